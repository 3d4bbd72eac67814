"""SPV_NV_cooperative_matrix_decode_vector: the optional DecodeVectorFunc of
OpCooperativeMatrixLoadTensorNV (`pycoop.nv.load_tensor(..., decode=f, decode_vector=fv)`).

* Trace-time rules (`check_vector_function`, `const_last_block_size`), re-run by the IR verifier.
* Emulator semantics (`emulate_decode`): V-groups of elements sharing blockCoord and
  coordInBlock except the last dimension, whose coordInBlock starts at a multiple of V. The
  vector function decodes whole groups, the scalar one the rest; in checking mode
  (PYCOOP_CHECK_DECODE_VECTOR=1 or `pycoop.knobs.check_decode_vector()`) both run and any
  disagreement is reported.
* The extension's record (codegen.extensions): the Vulkan extension and feature, the policy
  stripping the optional operand from `.spv` (PYCOOP_DECODE_VECTOR), and the binary checker
  of decode_vector_check for validators that predate the extension (see docs/gpu.md).
"""
from __future__ import annotations

import numpy as np

from ... import knobs
from ...codegen import extensions
from ...emulator.memory import PointerArray
from ...errors import CompileError, EmulatorError, Loc
from ...ir.core import Value
from ...types import (ArrayType, CoopMatType, PointerType, ScalarType, StorageClass, StructType,
                      VectorType, u32)
from .decode_vector_check import check_module, validator_supports

SPEC = "SPV_NV_cooperative_matrix_decode_vector"
EXTENSION = SPEC
CAPABILITY = "CooperativeMatrixDecodeVectorNV"
LONG_VECTOR = "LongVectorEXT"
VECTOR_SIZES = (2, 4, 8)


# --------------------------------------------------------------------------- trace-time rules

def check_block_type(block, loc: Loc) -> None:
    """`decode_vector_block=`: the pointee of the vector function's pointer parameter."""
    if not isinstance(block, (StructType, ScalarType)) or (isinstance(block, ScalarType) and block.is_bool):
        raise CompileError(f"decode_vector_block must be a block struct (pycoop.struct) or a numeric "
                           f"scalar type, got {block!r}", loc,
                           rule=f"{SPEC}: DecodeVectorFunc's first parameter is a pointer in the "
                                "PhysicalStorageBuffer storage class (its pointee may differ from "
                                "DecodeFunc's)",
                           hint="pass a pycoop.struct(...) or a scalar type such as pycoop.u16",
                           rule_id="nv.decode-vector-block-type")


def check_vector_function(fn, mat_type: CoopMatType, dim: int, loc: Loc) -> int:
    """The rules of the spec and of SPIRV-Tools v2026.3 on a traced DecodeVectorFunc; returns V."""
    rt = fn.result_type
    comp = mat_type.component
    if not isinstance(rt, VectorType) or rt.elem != comp:
        raise CompileError(f"the decode_vector function returns {rt}, not a vector of the matrix "
                           f"component type {comp}", loc,
                           rule=f"{SPEC}: the Result Type of DecodeVectorFunc's function must be a "
                                "vector of the Component Type of Result Type",
                           hint=f"return pycoop.make_vector([...], {comp}) with 2, 4 or 8 elements",
                           rule_id="nv.decode-vector-return-type")
    if rt.count not in VECTOR_SIZES:
        raise CompileError(f"the decode_vector function returns {rt.count} components; V must be "
                           "2, 4 or 8", loc,
                           rule=f"{SPEC}: the return vector has 2, 4, or 8 components",
                           hint="return pycoop.make_vector([...]) of 2, 4 or 8 elements",
                           rule_id="nv.decode-vector-length")
    params = [p.type for p in fn.params]
    coord = ArrayType(_u32(), dim)
    if len(params) != 3:
        raise CompileError(f"the decode_vector function takes {len(params)} parameters, not 3", loc,
                           rule=f"{SPEC}: same parameters as DecodeFunc",
                           hint="take (block_ptr, block_coord, coord_in_block), as the decode function",
                           rule_id="nv.decode-vector-params")
    p0 = params[0]
    if not (isinstance(p0, PointerType) and p0.storage == StorageClass.PhysicalStorageBuffer):
        raise CompileError(f"the decode_vector function's first parameter is {p0}", loc,
                           rule=f"{SPEC}: first parameter must be pointer to PhysicalStorageBuffer",
                           hint="take the block pointer first: fv(block_ptr, block_coord, coord_in_block)",
                           rule_id="nv.decode-vector-pointer")
    for i, p in enumerate(params[1:], 2):
        if p != coord:
            raise CompileError(f"parameter {i} of the decode_vector function is {p}, expected {coord}",
                               loc, rule=f"{SPEC}: second and third parameters are arrays of 32-bit "
                                         "integers whose length equals the tensor layout dimension",
                               hint="take the coordinates as the decode function does (u32 arrays)",
                               rule_id="nv.decode-vector-coord-params")
    return rt.count


def _u32():
    return u32


def block_sizes(layout: Value) -> list[Value] | None:
    """The block-size operands in effect for `layout`, following its SSA chain of state ops:
    [] when none was set (all 1), None when unknown (a layout coming through control flow)."""
    v = layout
    while v.op is not None and v.op.name.startswith("nv.layout_"):
        if v.op.name == "nv.layout_block_size":
            return v.op.operands[1:]
        v = v.op.operands[0]
    return [] if v.op is not None and v.op.name == "nv.create_layout" else None


def const_last_block_size(layout_value) -> int | None:
    """blockSize[LDim-1] of a layout value when it is a compile-time constant (1 when no
    block size was set); None when unknown (a runtime operand, or a layout carried through a
    loop)."""
    sizes = block_sizes(layout_value)
    if sizes is None:
        return None
    if not sizes:
        return 1
    last = sizes[-1]
    if last.op is not None and last.op.name == "const":
        return int(last.op.attrs["value"]) & 0xFFFFFFFF
    return None


def check_static_block_size(layout_value, v: int, loc: Loc) -> None:
    bs = const_last_block_size(layout_value)
    if bs is not None and bs % v:
        raise CompileError(f"the layout's block size in its last dimension is {bs}, not a multiple "
                           f"of the decode_vector width V = {v}", loc,
                           rule=f"{SPEC}: blockSize[LDim-1] must be a multiple of V (otherwise "
                                "DecodeVectorFunc invocations are undefined behaviour)",
                           hint=f"set .block_size(..., {v * max(1, -(-bs // v))}) or use a smaller V",
                           rule_id="nv.decode-vector-block-multiple")


# --------------------------------------------------------------------------- emulator

def _equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f" or a.dtype.kind == "V" or a.dtype.name in ("bfloat16",) \
            or "float" in a.dtype.name:
        af, bf = a.astype(np.float64), b.astype(np.float64)
        return (af == bf) | (np.isnan(af) & np.isnan(bf))
    return a == b


def groups(inst: np.ndarray, bc: np.ndarray, cib: np.ndarray, v: int):
    """Group accessed elements: (group id per element, lane per element, whole per group,
    representative element per group). Elements are in one group when they share the scope
    instance, blockCoord, coordInBlock[:-1] and coordInBlock[-1] // V; a group is whole when
    every lane 0..V-1 occurs."""
    last = cib[:, -1].astype(np.int64)
    key = np.concatenate([inst[:, None].astype(np.int64), bc.astype(np.int64),
                          cib[:, :-1].astype(np.int64), (last // v)[:, None]], axis=1)
    _, first, gid = np.unique(key, axis=0, return_index=True, return_inverse=True)
    gid = gid.reshape(-1)
    lane = last % v
    present = np.zeros((len(first), v), bool)
    present[gid, lane] = True
    return gid, lane, present.all(1), first


def emulate_decode(ctx, op, fn, fv, memory, plan, where, ei, check: bool):
    """Values of the accessed elements `where` of a load with DecodeFunc `fn` and
    DecodeVectorFunc `fv` (see the module docstring)."""
    v = fv.result_type.count
    shape = plan.shape
    batch = shape[:-2]
    n = len(ei)
    # blockSize[LDim-1] must be a multiple of V in every instance that loads something
    bs = np.broadcast_to(plan.layout.block_size[..., -1], batch)
    inst = np.ravel_multi_index(where[:-2], batch) if batch else np.zeros(n, np.int64)
    loading = np.zeros(int(np.prod(batch)), bool)
    loading[inst] = True
    bad = (bs.reshape(-1) % v != 0) & loading
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise EmulatorError(
            f"load_tensor with decode_vector (V = {v}): the layout's block size in its last "
            f"dimension is {int(bs.reshape(-1)[i])} in scope instance "
            f"{np.unravel_index(i, batch) if batch else ()}, not a multiple of V", op.loc,
            rule=f"{SPEC}: blockSize[LDim-1] must be a multiple of V (undefined behaviour otherwise)",
            hint="reported by the pycoop emulator",
            rule_id="nv.decode-vector-block-multiple")
    bc = plan.block_coord[where].astype(np.uint32)
    cib = plan.coord_in_block[where].astype(np.uint32)
    gid, lane, whole, first = groups(inst, bc, cib, v)
    use_vec = whole[gid]
    dtype = op.attrs["type"].component.dtype
    out = np.empty(n, dtype)
    # vector decode: one call per whole group, with the pointer and coordinates of its lane 0
    wg = np.flatnonzero(whole)
    if wg.size:
        rep = first[wg]
        vsize = fv.params[0].type.pointee.size
        vcib = cib[rep].copy()
        vcib[:, -1] -= vcib[:, -1] % v
        vptr = PointerArray(memory, (ei[rep] * vsize).astype(np.int64))
        vals = ctx.call(fv, [vptr, bc[rep], vcib], (wg.size,))
        slot = np.full(len(whole), -1, np.int64)
        slot[wg] = np.arange(wg.size)
        out[use_vec] = vals[slot[gid[use_vec]], lane[use_vec]]
    scalar = np.ones(n, bool) if check else ~use_vec
    if scalar.any():
        esize = fn.params[0].type.pointee.size
        sel = np.flatnonzero(scalar)
        ptr = PointerArray(memory, (ei[sel] * esize).astype(np.int64))
        svals = ctx.call(fn, [ptr, bc[sel], cib[sel]], (sel.size,))
        if check:
            both = use_vec[sel]
            diff = both & ~_equal(svals, out[sel])
            if diff.any():
                k = int(np.flatnonzero(diff)[0])
                e = int(sel[k])
                loc_idx = tuple(int(w[e]) for w in where)
                instance, (row, col) = loc_idx[:-2], loc_idx[-2:]
                base = int(cib[e, -1]) - int(lane[e])
                raise EmulatorError(
                    f"decode_vector and decode disagree at matrix element (row {row}, col {col}) "
                    f"of scope instance {instance}: decode(blockCoord={bc[e].tolist()}, "
                    f"coordInBlock={cib[e].tolist()}) = {svals[k].item()!r}, but component {int(lane[e])} "
                    f"of decode_vector(blockCoord={bc[e].tolist()}, coordInBlock="
                    f"{cib[e, :-1].tolist() + [base]}) = {out[e].item()!r} "
                    f"({int(diff.sum())} element(s) differ)", op.loc,
                    rule=f"{SPEC}: the implementation may call either function for any element, "
                         "so both must return the same values",
                    hint=f"component i of the vector is the element at coordInBlock[-1] + i "
                         f"(V = {v}); checked because PYCOOP_CHECK_DECODE_VECTOR is on",
                    rule_id="nv.decode-vector-agrees")
            out[sel[~both]] = svals[~both]
        else:
            out[sel] = svals
    return out


def uses_decode_vector(module) -> bool:
    return any(op.name == "nv.load_tensor" and op.attrs.get("decode_vector") is not None
               for op in module.walk())


def _keep() -> bool:
    """Whether `.spv` keeps the DecodeVectorFunc operands (PYCOOP_DECODE_VECTOR)."""
    mode = knobs.decode_vector_mode()
    return mode == "keep" or (mode == "auto" and validator_supports())


extensions.register(extensions.Extension(
    EXTENSION, vulkan="VK_NV_cooperative_matrix_decode_vector",
    features={CAPABILITY: "cooperativeMatrixDecodeVector"},
    optional=uses_decode_vector, keep=_keep,
    omission_note=lambda n: (f"stripped the DecodeVectorFunc operands ({n} decode_vector "
                             f"function(s)) of {EXTENSION}: the target lacks the extension; "
                             "those tensor loads use their DecodeFunc only"),
    check=check_module, validator_knows=validator_supports))
