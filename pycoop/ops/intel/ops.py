"""SPV_INTEL_2d_block_io as IR ops: subgroup 2D block load / load-transform / load-transpose /
prefetch / store (``pycoop.intel``).

A kernel using any of them compiles for the OpenCL environment (pycoop.codegen.opencl): the
base pointer is a buffer parameter (a CrossWorkgroup pointer), the per-invocation destination
or source is a Function-storage array. Loads return one array per invocation
(``ArrayType``); stores take one. Element size, block width/height/count are compile-time ints;
memory width (bytes), height (rows), pitch (bytes) are 32-bit integer scalars; the coordinate is a
2-vector of 32-bit ints (x in elements, y in rows), e.g. ``pycoop.make_vector([x, y])`` or a
tuple ``(x, y)``.

Checks at trace time (CompileError at the user's line): the spec's rules on the compile-time
operands (pycoop.ops.intel.blockio.static_checks), the storage classes of the pointers, operand
types, and - with ``strict_intel_shapes`` (a ``pycoop.kernel`` option, on by default; or the
per-op ``strict=`` flag) - Intel's supported-shape table for subgroup size 16, naming the
nearest row. Semantics in the emulator come from pycoop.ops.intel.blockio, vectorised over
every subgroup of the dispatch, with the spec's undefined-behaviour conditions reported as
EmulatorError at the op's line.
"""
from __future__ import annotations

import numbers

import numpy as np

from ...errors import CompileError, EmulatorError, Loc, current_loc
from ...ir.builder import RequiresSubgroupSize, emit, emit1, tracer
from ...ir.core import Value
from ...types import (SCALARS, ArrayType, BufferType, PointerType, ScalarType, Scope, SharedArrayType,
                      StorageClass, VectorType, i32, u32)
from ..core import as_value, check_readable, constant_value
from ...ir.registry import define, emulation, lowering
from . import blockio
from ..composite import make_vector

SPEC = "SPV_INTEL_2d_block_io"
INTEL_SUBGROUP_SIZE = 16

# op name -> (blockio mode, SPIR-V instruction, capabilities)
OPS = {
    "intel.block_load": ("load", "OpSubgroup2DBlockLoadINTEL", ("Subgroup2DBlockIOINTEL",)),
    "intel.block_load_transform": ("load_transform", "OpSubgroup2DBlockLoadTransformINTEL",
                                   ("Subgroup2DBlockIOINTEL", "Subgroup2DBlockTransformINTEL")),
    "intel.block_load_transpose": ("load_transpose", "OpSubgroup2DBlockLoadTransposeINTEL",
                                   ("Subgroup2DBlockIOINTEL", "Subgroup2DBlockTransposeINTEL")),
    "intel.block_prefetch": ("prefetch", "OpSubgroup2DBlockPrefetchINTEL", ("Subgroup2DBlockIOINTEL",)),
    "intel.block_store": ("store", "OpSubgroup2DBlockStoreINTEL", ("Subgroup2DBlockIOINTEL",)),
}
# Rule ids (docs/rules.md) of the tagged rules of pycoop.ops.intel.blockio's checks that a
# kernel can break (the base is a whole buffer, subgroups are full and executed as one here).
RULE_IDS = {tag: f"intel.{tag}" for tag in (
    "element-size", "block-operand", "block-width-multiple", "transform-element-size",
    "coordinate-x-alignment", "memory-width", "memory-height", "memory-pitch")}
_USER_NAME = {"load": "block_load", "load_transform": "block_load_transform",
              "load_transpose": "block_load_transpose", "prefetch": "block_prefetch",
              "store": "block_store"}


def dest_length(elem_size: int, width: int, height: int, count: int, subgroup_size: int, mode: str) -> int:
    """Elements of each invocation's destination (loads) or source (stores) array."""
    rows, _, _ = blockio._element_map(elem_size, width, height, count, subgroup_size, mode)
    return int(rows.shape[1])


def _shape_text(mode: str, e: int, w: int, h: int, c: int) -> str:
    return f"{_USER_NAME[mode]} of {e}-byte elements, {w} wide x {h} high x {c} block(s)"


def _row_text(r: blockio.ShapeRow) -> str:
    def alts(v):
        return v[0] if len(v) == 1 else "/".join(map(str, v))
    return (f"{_USER_NAME[r.op]}: element size {r.elem_size}, width {alts(r.widths)}, "
            f"height {alts(r.heights)}, count {alts(r.counts)}")


# --------------------------------------------------------------------------- type rule & checks

def _int32_scalar(v: Value, what: str, loc: Loc) -> None:
    t = v.type
    if not (isinstance(t, ScalarType) and t.is_int):
        raise CompileError(f"{what} must be an integer scalar, got {t}", loc,
                           rule=f"{SPEC}: Memory Width, Memory Height and Memory Pitch must be "
                                "integer type scalars", hint="cast it, e.g. pycoop.i32(x)",
                           rule_id="intel.memory-operand-type")
    if t.bits != 32:
        raise CompileError(f"{what} must be a 32-bit integer, got {t}", loc,
                           rule="OpenCL environment (cl_intel_subgroup_2d_block_io): Memory "
                                "Width/Height/Pitch are 32-bit integers",
                           hint="cast it, e.g. pycoop.i32(x)",
                           rule_id="intel.memory-operand-32bit")


def _check_base(base: Value, mode: str, loc: Loc) -> BufferType:
    t = getattr(base, "type", None)
    which = "Dst Base Pointer" if mode == "store" else "Src Base Pointer"
    if isinstance(t, BufferType):
        if not (isinstance(t.elem, ScalarType) and not t.elem.is_bool):
            raise CompileError(f"block IO needs a buffer of numeric scalars, got {t}", loc,
                               rule="SPV_INTEL_2d_block_io: the Base Pointer points to the block elements "
                                    "(numeric scalars of Element Size bytes)",
                               hint="pass a Buffer of the block's element type (u8, u16, f16, u32, ...)",
                               rule_id="intel.base-element-type")
        return t
    got = ("a workgroup-shared array (Workgroup storage class)" if isinstance(t, SharedArrayType)
           else f"a value of type {t}" if t is not None else f"a Python {type(base).__name__}")
    raise CompileError(f"{_USER_NAME[mode]}'s base pointer must be a kernel buffer parameter, got {got}",
                       loc, rule=f"{SPEC}: the {which} must be a pointer to the CrossWorkgroup "
                                 "storage class (a kernel buffer argument)",
                       hint="pass a pycoop.Buffer[...] parameter of the kernel",
                       rule_id="intel.base-pointer")


def _check_static(mode: str, attrs: dict, loc: Loc) -> None:
    e, w, h, c = (attrs[k] for k in ("elem_size", "width", "height", "count"))
    errors = blockio.static_checks(e, w, h, c, mode)
    if errors:
        tag, _, text = errors[0].partition("] ")
        hint = {"[element-size": "use 1, 2, 4 or 8",
                "[block-width-multiple": "round the block width up and ignore the extra columns",
                "[transform-element-size": "the transform (VNNI packing) exists for 1- and 2-byte "
                                            "elements; use block_load for 4/8-byte data",
                "[block-operand": "use a positive int below 2**31"}.get(tag)
        raise CompileError(text, loc, rule=f"{SPEC} ({tag[1:]})", hint=hint,
        rule_id=RULE_IDS.get(tag[1:]))
    sgs = attrs["subgroup_size"]
    if attrs["strict"]:
        if sgs != INTEL_SUBGROUP_SIZE:
            raise CompileError(
                f"Intel hardware runs 2D block IO with subgroup size {INTEL_SUBGROUP_SIZE}, this kernel "
                f"is compiled for subgroup size {sgs}", loc,
                rule="cl_intel_subgroup_2d_block_io: the subgroup size must be 16",
                hint="drop the kernel's subgroup_size, or pass strict_intel_shapes=False to "
                     "pycoop.kernel to emulate other subgroup sizes (8/16/32)",
                rule_id="intel.subgroup-size-16")
        ok, nearest = blockio.intel_supported_shape(mode, e, w, h, c)
        if not ok:
            rows = "; ".join(_row_text(r) for r in nearest[:2])
            raise CompileError(
                f"{_shape_text(mode, e, w, h, c)} is not in Intel's supported-shape table", loc,
                rule="cl_intel_subgroup_2d_block_io SPIR-V environment table (strict_intel_shapes)",
                hint=f"nearest supported row: {rows}; or pass strict_intel_shapes=False to "
                     "pycoop.kernel (or strict=False to this op) for shapes the SPIR-V extension "
                     "defines but Intel's OpenCL driver does not list",
                rule_id="intel.supported-shape")


_UB_HINT = ("memory width 64..2^24 bytes, height 1..2^24 rows, pitch >= width and a multiple of 8, "
            "x a multiple of 4 (1-byte) / 2 (2-byte elements)")


def _check_constant_operands(mode: str, attrs: dict, mw: Value, mh: Value, pitch: Value, coord: Value,
                             loc: Loc) -> None:
    """The Restrictions the emulator checks per subgroup at run time, on the operands that are
    trace-time constants: a CompileError before any launch."""
    x = coord.op.operands[0] if coord.op is not None and coord.op.name == "composite.construct" else None
    known = {"memory width": constant_value(mw), "memory height": constant_value(mh),
             "pitch": constant_value(pitch), "coordinate x": None if x is None else constant_value(x)}
    errors = blockio.constant_checks(attrs["elem_size"], attrs["subgroup_size"], *known.values())
    if errors:
        tag, _, text = errors[0].partition("] ")
        values = ", ".join(f"{k} {v}" for k, v in known.items() if v is not None)
        raise CompileError(f"{_USER_NAME[mode]}: {text} (constant operands: {values})", loc,
                           rule=f"{SPEC}: Restrictions ({tag[1:]})", hint=_UB_HINT,
                           rule_id=RULE_IDS.get(tag[1:]))


def _infer(operands, attrs, regions, loc):
    mode = attrs["mode"]
    base, mw, mh, pitch, coord = operands[:5]
    bt = _check_base(base, mode, loc)
    if mode == "store":
        if bt.access == "read":
            raise CompileError("cannot block_store into a read-only buffer", loc,
                               hint="annotate the parameter pycoop.Buffer[...] or pycoop.WriteBuffer[...]",
                               rule="SPIR-V: memory of a FuncParamAttr NoWrite pointer (a ReadBuffer) is "
                                    "not stored to",
                               rule_id="intel.read-only-store")
    elif mode != "prefetch":
        check_readable(base, loc)
    for v, what in ((mw, "memory width (bytes)"), (mh, "memory height (rows)"), (pitch, "memory pitch (bytes)")):
        _int32_scalar(v, what, loc)
    ct = coord.type
    if not (isinstance(ct, VectorType) and ct.count == 2 and ct.elem.is_int):
        raise CompileError(f"the coordinate must be a 2-vector of integers (x in elements, y in rows), "
                           f"got {ct}", loc,
                           rule=f"{SPEC}: Coordinate must be a vector of two integer type components",
                           hint="pass (x, y) or pycoop.make_vector([x, y]) with integer x and y",
                           rule_id="intel.coordinate-type")
    if ct.elem.bits != 32:
        raise CompileError(f"the coordinate must have 32-bit integer components, got {ct}", loc,
                           rule="OpenCL environment: Coordinate is a vector of two 32-bit integers",
                           hint="cast x and y with pycoop.i32(...)",
                           rule_id="intel.coordinate-32bit")
    _check_static(mode, attrs, loc)
    _check_constant_operands(mode, attrs, mw, mh, pitch, coord, loc)
    n = dest_length(attrs["elem_size"], attrs["width"], attrs["height"], attrs["count"],
                    attrs["subgroup_size"], mode)
    if mode == "store":
        vt = operands[5].type
        e = attrs["elem_size"]
        if not isinstance(vt, ArrayType) or not isinstance(vt.elem, ScalarType) or vt.elem.is_bool:
            raise CompileError(f"block_store stores a per-invocation array of numbers, got {vt}", loc,
                               rule=f"{SPEC}: Src Pointer points to per-invocation (Function) storage "
                                    "holding the data",
                               hint=f"build it with pycoop.make_array([...]) ({n} elements)",
                               rule_id="intel.store-source")
        if vt.elem.size != e:
            raise CompileError(f"block_store of {e}-byte elements from an array of {vt.elem} "
                               f"({vt.elem.size}-byte)", loc,
                               rule=f"{SPEC}: Element Size is the size of one block element",
                               hint=f"convert the elements to a {e}-byte type",
                               rule_id="intel.store-element-size")
        if vt.length != n:
            raise CompileError(f"block_store of this block needs {n} elements per invocation, the "
                               f"array has {vt.length}", loc,
                               rule=f"{SPEC}: Mapping Block Data to Invocations (subgroup size "
                                    f"{attrs['subgroup_size']})",
                               hint=f"pycoop.intel.block_length(...) gives the length ({n})",
                               rule_id="intel.store-length")
        return []
    if mode == "prefetch":
        return []
    elem = attrs["type"]
    if mode == "load_transform":
        if not (elem.is_int and elem.bits == 32):
            raise CompileError(f"block_load_transform packs rows into 32-bit integers; the destination "
                               f"element type {elem} is not one", loc,
                               rule=f"{SPEC}: the transform's Dst Pointer must point to a scalar 32-bit "
                                    "integer type", hint="use dtype=pycoop.u32 (the default) or pycoop.i32",
                               rule_id="intel.transform-destination")
    elif elem.size != attrs["elem_size"]:
        raise CompileError(f"destination element type {elem} is {elem.size} bytes, the block elements "
                           f"are {attrs['elem_size']}", loc,
                           rule=f"{SPEC}: Element Size is the size of one block element",
                           hint="pick a dtype of Element Size bytes",
                           rule_id="intel.destination-element-size")
    return [ArrayType(elem, n)]


for _name, (_mode, _opname, _caps) in OPS.items():
    define(_name, _infer, capabilities=_caps, environment="opencl", tangled=True,
           writes=0 if _mode == "store" else None,
           doc=f"{_opname}: subgroup 2D block {_USER_NAME[_mode].replace('block_', '').replace('_', ' ')} "
               "(OpenCL environment only).")


# --------------------------------------------------------------------------- tracing (user API)

def _const_int(v, what: str, loc: Loc) -> int:
    if isinstance(v, Value) or not isinstance(v, numbers.Integral) or isinstance(v, bool):
        raise CompileError(f"{what} must be a compile-time int, got "
                           f"{getattr(v, 'type', None) or type(v).__name__}", loc,
                           rule=f"{SPEC}: Element Size, Block Width, Block Height and Block Count must be "
                                "constant instructions with scalar 32-bit integer type",
                           hint="use a Python int or a pycoop.Const parameter",
                           rule_id="intel.block-operand-constant")
    v = int(v)
    if not -(1 << 31) <= v < (1 << 32):
        raise CompileError(f"{what} = {v} does not fit in a 32-bit integer constant", loc,
                           rule=f"{SPEC}: the block operands are scalar 32-bit integer constants",
                           hint="use a positive int below 2**31",
                           rule_id="intel.block-operand-constant")
    return v


def _int_operand(x, what: str, loc: Loc) -> Value:
    if isinstance(x, Value):
        return x
    if isinstance(x, numbers.Integral) and not isinstance(x, bool):
        return as_value(int(x), i32)
    raise CompileError(f"{what} must be an integer, got {x!r}", loc,
                       rule=f"{SPEC}: Memory Width, Memory Height and Memory Pitch must be integer scalars",
                       hint="pass a Python int or a 32-bit integer value",
                       rule_id="intel.memory-operand-type")


def _coord(coord, loc: Loc) -> Value:
    if isinstance(coord, Value):
        return coord
    if isinstance(coord, (tuple, list)):
        vals = list(coord)
        like = next((v.type for v in vals if isinstance(v, Value)), i32)
        if not all(isinstance(v, Value) or (isinstance(v, numbers.Integral) and not isinstance(v, bool))
                   for v in vals):
            raise CompileError(f"the coordinate must be a 2-vector of integers, got {coord!r}", loc,
                               rule=f"{SPEC}: Coordinate must be a vector of two integer type components",
                               hint="pass (x, y) with integer x (elements) and y (rows)",
                               rule_id="intel.coordinate-type")
        return make_vector(vals, like if isinstance(like, ScalarType) else i32)
    raise CompileError(f"the coordinate must be a 2-vector of integers, got {coord!r}", loc,
                       rule=f"{SPEC}: Coordinate must be a vector of two integer type components",
                       hint="pass (x, y) or pycoop.make_vector([x, y])",
                       rule_id="intel.coordinate-type")


def _subgroup(loc: Loc) -> int:
    t = tracer()
    sgs = t.subgroup_size
    if not t.subgroup_size_explicit and sgs != INTEL_SUBGROUP_SIZE:
        # the kernel did not choose a subgroup size: Intel block IO kernels run with 16
        raise RequiresSubgroupSize(INTEL_SUBGROUP_SIZE)
    return sgs


def _strict(strict, loc: Loc) -> bool:
    if strict is None:
        return tracer().strict_intel_shapes
    return bool(strict)


def _attrs(mode, base, elem_size, width, height, count, strict, loc) -> dict:
    _check_base(base, mode, loc)
    e = base.type.elem.size if elem_size is None else _const_int(elem_size, "element size", loc)
    return {"mode": mode, "elem_size": e, "width": _const_int(width, "block width", loc),
            "height": _const_int(height, "block height", loc), "count": _const_int(count, "block count", loc),
            "subgroup_size": _subgroup(loc), "strict": _strict(strict, loc)}


def _default_elem(mode: str, base: Value, e: int, dtype, loc: Loc) -> ScalarType:
    if dtype is not None:
        if not isinstance(dtype, ScalarType) or dtype.is_bool:
            raise CompileError(f"dtype must be a pycoop numeric scalar type, got {dtype!r}", loc,
                               rule="SPV_INTEL_2d_block_io: the Dst Pointer points to a numeric scalar "
                                    "type",
                               hint="pass a scalar type, e.g. dtype=pycoop.u16",
                               rule_id="intel.destination-type")
        return dtype
    if mode == "load_transform":
        return u32
    be = base.type.elem
    if be.size == e:
        return be
    if e not in (1, 2, 4, 8):
        return u32          # rejected by the element-size check
    return SCALARS[f"u{8 * e}"]


def _operands(base, memory_width, memory_height, pitch, coord, loc) -> list[Value]:
    return [base, _int_operand(memory_width, "memory width", loc), _int_operand(memory_height, "memory height", loc),
            _int_operand(pitch, "memory pitch", loc), _coord(coord, loc)]


def _load(mode, base, width, height, memory_width, memory_height, pitch, coord, count, elem_size, dtype,
          strict, loc) -> Value:
    attrs = _attrs(mode, base, elem_size, width, height, count, strict, loc)
    attrs["type"] = _default_elem(mode, base, attrs["elem_size"], dtype, loc)
    return emit1(f"intel.{_USER_NAME[mode]}",
                 _operands(base, memory_width, memory_height, pitch, coord, loc), attrs, loc)


def block_load(base: Value, *, width: int, height: int, memory_width, memory_height, pitch, coord,
               count: int = 1, elem_size: int | None = None, dtype: ScalarType | None = None,
               strict: bool | None = None) -> Value:
    """OpSubgroup2DBlockLoadINTEL: `count` blocks of `height` rows x `width` elements starting at
    element `coord` = (x, y) of the 2D region at `base` (memory_width bytes wide, memory_height
    rows, `pitch` bytes between rows). Returns this invocation's share of the block as an array
    (out-of-bounds elements read 0). `elem_size` defaults to the buffer's element size, `dtype`
    (the array's element type) to the buffer's element type."""
    loc = current_loc()
    return _load("load", base, width, height, memory_width, memory_height, pitch, coord, count,
                 elem_size, dtype, strict, loc)


def block_load_transform(base: Value, *, width: int, height: int, memory_width, memory_height, pitch,
                         coord, count: int = 1, elem_size: int | None = None,
                         dtype: ScalarType | None = None, strict: bool | None = None) -> Value:
    """OpSubgroup2DBlockLoadTransformINTEL: like block_load, packing 2 (2-byte elements) or 4
    (1-byte) rows of a column into each 32-bit value, lower rows in lower bits (VNNI layout).
    The array holds u32 (or `dtype=pycoop.i32`)."""
    loc = current_loc()
    return _load("load_transform", base, width, height, memory_width, memory_height, pitch, coord,
                 count, elem_size, dtype, strict, loc)


def block_load_transpose(base: Value, *, width: int, height: int, memory_width, memory_height, pitch,
                         coord, count: int = 1, elem_size: int | None = None,
                         dtype: ScalarType | None = None, strict: bool | None = None) -> Value:
    """OpSubgroup2DBlockLoadTransposeINTEL: loads a `height` x `width` block (dimensions in
    memory, before the transpose) and distributes its transpose."""
    loc = current_loc()
    return _load("load_transpose", base, width, height, memory_width, memory_height, pitch, coord,
                 count, elem_size, dtype, strict, loc)


def block_prefetch(base: Value, *, width: int, height: int, memory_width, memory_height, pitch, coord,
                   count: int = 1, elem_size: int | None = None, strict: bool | None = None) -> None:
    """OpSubgroup2DBlockPrefetchINTEL: a cache hint; no functional effect."""
    loc = current_loc()
    attrs = _attrs("prefetch", base, elem_size, width, height, count, strict, loc)
    emit("intel.block_prefetch", _operands(base, memory_width, memory_height, pitch, coord, loc), attrs,
         None, loc)


def block_store(base: Value, value: Value, *, width: int, height: int, memory_width, memory_height, pitch,
                coord, count: int = 1, elem_size: int | None = None, strict: bool | None = None) -> None:
    """OpSubgroup2DBlockStoreINTEL: store each invocation's `value` array (its share of the
    block, same layout as block_load) at `coord`; out-of-bounds elements are not written."""
    loc = current_loc()
    attrs = _attrs("store", base, elem_size, width, height, count, strict, loc)
    if not isinstance(value, Value):
        raise CompileError(f"block_store stores a per-invocation array, got {type(value).__name__}", loc,
                           hint="build it with pycoop.make_array([...])",
                           rule="SPV_INTEL_2d_block_io: Src Pointer points to per-invocation (Function) "
                                "storage holding the data",
                           rule_id="intel.store-source")
    emit("intel.block_store", _operands(base, memory_width, memory_height, pitch, coord, loc) + [value],
         attrs, None, loc)


def block_length(*, width: int, height: int, count: int = 1, elem_size: int = 2, transform: bool = False,
                 transpose: bool = False, subgroup_size: int = INTEL_SUBGROUP_SIZE) -> int:
    """Length of each invocation's array for a block shape (plain Python; usable anywhere).
    A shape the extension leaves undefined is a ValueError naming its rule, as a kernel's
    block op would be a CompileError."""
    ints = {"width": width, "height": height, "count": count, "elem_size": elem_size,
            "subgroup_size": subgroup_size}
    for name, v in ints.items():
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"block_length: {name} must be an int, got {v!r}")
    if transform and transpose:
        raise ValueError("block_length: a block load is transformed or transposed, not both")
    if subgroup_size < 1 or subgroup_size & (subgroup_size - 1):
        raise ValueError(f"block_length: subgroup_size must be a power of two, got "
                         f"{subgroup_size}")
    mode = "load_transform" if transform else "load_transpose" if transpose else "load"
    errors = blockio.static_checks(elem_size, width, height, count, mode)
    if errors:
        raise ValueError(f"block_length: {'; '.join(errors)} ({SPEC})")
    return dest_length(elem_size, width, height, count, subgroup_size, mode)


# --------------------------------------------------------------------------- emulator

def _subgroups(ctx, op, x: np.ndarray, what: str) -> np.ndarray:
    """The one value of per-invocation `x` in every subgroup, shape (W, S); it must be uniform."""
    d = ctx.dispatch
    v = ctx.scope_uniform_value(x, Scope.Subgroup, op, what)
    return np.broadcast_to(v, (d.nwg, d.nsg))


def _active_subgroups(ctx, op) -> np.ndarray:
    d = ctx.dispatch
    if d.wgs % d.sgs:
        raise EmulatorError(f"the workgroup size {d.wgs} is not a multiple of the subgroup size {d.sgs}",
                            op.loc, rule=f"{SPEC}: behaviour is undefined unless the subgroup is full "
                                         "(SubgroupSize equals SubgroupMaxSize)",
                            hint="make the workgroup size a multiple of the subgroup size",
                            rule_id="intel.full-subgroup")
    if ctx.mask is None:
        return np.ones((d.nwg, d.nsg), bool)
    m = ctx._scope_split(ctx.mask, Scope.Subgroup)
    anyv, allv = m.any(-1), m.all(-1)
    if (anyv != allv).any():
        w, s = np.argwhere(anyv != allv)[0]
        raise EmulatorError(f"{op.name.split('.')[1]} is executed by only part of subgroup {s} of "
                            f"workgroup {ctx._wg_name(w)}", op.loc,
                            rule=f"{SPEC}: behaviour is undefined unless all invocations within the "
                                 "subgroup execute the same dynamic instance of this instruction",
                            hint="keep block IO under conditions that are uniform across the subgroup",
                            rule_id="intel.same-dynamic-instance")
    return allv


def _operand_batch(ctx, op, mw, mh, pitch, coord):
    """Active subgroups (W, S) and the operands of each active one (1-D arrays)."""
    active = _active_subgroups(ctx, op)
    vals = [_subgroups(ctx, op, a, f"the {what} of {op.name}")
            for a, what in ((mw, "memory width"), (mh, "memory height"), (pitch, "memory pitch"),
                            (coord[..., 0], "coordinate x"), (coord[..., 1], "coordinate y"))]
    vals = [v.astype(np.int64)[active] for v in vals]
    a = op.attrs
    errors = blockio.check_undefined(0, a["elem_size"], a["width"], a["height"], a["count"], *vals,
                                     ctx.dispatch.sgs)
    if errors:
        tag, _, text = errors[0].partition("] ")
        text, _, where = text.partition(": instances [(")
        k = int(where.split(",")[0]) if where else 0
        w, s = np.argwhere(active)[k]
        raise EmulatorError(f"undefined behaviour in workgroup {ctx._wg_name(w)}, subgroup {s}: {text} "
                            f"(memory width {vals[0][k]} bytes, height {vals[1][k]} rows, pitch "
                            f"{vals[2][k]} bytes, coordinate ({vals[3][k]}, {vals[4][k]}))", op.loc,
                            rule=f"{SPEC}: Restrictions ({tag[1:]})", hint=_UB_HINT,
                            rule_id=RULE_IDS.get(tag[1:]))
    return active, vals


def _memory(ctx, op) -> tuple:
    mem = ctx.memory_of(op.operands[0])
    return mem, mem.data.view(np.uint8)


def _run(ctx, op, fn, *args, **kw):
    mem = ctx.memory_of(op.operands[0])
    try:
        return fn(*args, **kw)
    except IndexError:
        raise EmulatorError(f"{op.name.split('.')[1]} reads or writes past the end of buffer "
                            f"'{mem.name}' ({mem.data.nbytes} bytes): an element inside memory width x "
                            "memory height lies outside the array", op.loc,
                            rule="Vulkan: accesses outside the bound buffer are undefined",
                            hint="memory height * pitch must fit in the buffer",
                            rule_id="intel.buffer-extent") from None


def _emu_load(ctx, op, base, mw, mh, pitch, coord):
    a = op.attrs
    d = ctx.dispatch
    t = op.result.type
    active, (w, h, p, x, y) = _operand_batch(ctx, op, mw, mh, pitch, coord)
    _, raw = _memory(ctx, op)
    got = _run(ctx, op, blockio.block_load, raw, 0, a["elem_size"], a["width"], a["height"], a["count"],
               w, h, p, x, y, d.sgs, transform=a["mode"] == "load_transform",
               transpose=a["mode"] == "load_transpose")
    out = np.zeros((d.nwg, d.nsg, d.sgs, t.length), dtype=got.dtype)
    out[active] = got
    return out.reshape(d.nwg, d.wgs, t.length).view(t.elem.dtype)


for _name in ("intel.block_load", "intel.block_load_transform", "intel.block_load_transpose"):
    emulation(_name)(_emu_load)


@emulation("intel.block_prefetch")
def _emu_prefetch(ctx, op, base, mw, mh, pitch, coord):
    _operand_batch(ctx, op, mw, mh, pitch, coord)
    return ()


@emulation("intel.block_store")
def _emu_store(ctx, op, base, mw, mh, pitch, coord, value):
    a = op.attrs
    d = ctx.dispatch
    active, (w, h, p, x, y) = _operand_batch(ctx, op, mw, mh, pitch, coord)
    n = op.operands[5].type.length
    vals = np.broadcast_to(value, (d.nwg, d.wgs, n)).reshape(d.nwg, d.nsg, d.sgs, n)[active]
    vals = np.ascontiguousarray(vals).view(f"u{a['elem_size']}")
    _, raw = _memory(ctx, op)
    _run(ctx, op, blockio.block_store, raw, 0, a["elem_size"], a["width"], a["height"], a["count"],
         w, h, p, x, y, d.sgs, vals)
    return ()


# --------------------------------------------------------------------------- SPIR-V (OpenCL target)

def _need_opencl(ctx, op):
    if getattr(ctx, "target", "vulkan") != "opencl":
        raise CompileError(f"{op.name} exists only in the OpenCL environment (CrossWorkgroup base "
                           "pointers); lower this module with pycoop.codegen.opencl", op.loc,
                           rule="SPV_INTEL_2d_block_io: the Dst/Src Base Pointer must be a pointer to the "
                                "CrossWorkgroup storage class (OpenCL environment)",
                           hint="compile the kernel (kernel.compile()): it picks the OpenCL target",
                           rule_id="intel.opencl-only")


def _block_operands(ctx, op) -> list[int]:
    a = op.attrs
    c = [ctx.const(u32, a[k]) for k in ("elem_size", "width", "height", "count")]
    return c + [ctx.id(v) for v in op.operands[:5]]


def _private(ctx, t: ArrayType) -> tuple[int, int]:
    """A Function-storage array variable and a pointer to its first element."""
    var = ctx.b.function_variable(ctx.ptr_type(t, StorageClass.Function))
    first = ctx.emit("OpInBoundsAccessChain", PointerType(t.elem, StorageClass.Function), var, ctx.const(u32, 0))
    return var, first


def _lower_load(ctx, op):
    _need_opencl(ctx, op)
    t = op.result.type
    var, first = _private(ctx, t)
    ctx.emit(OPS[op.name][1], None, *_block_operands(ctx, op), first)
    ctx.set(op.result, ctx.emit("OpLoad", t, var))


for _name in ("intel.block_load", "intel.block_load_transform", "intel.block_load_transpose"):
    lowering(_name)(_lower_load)


@lowering("intel.block_prefetch")
def _lower_prefetch(ctx, op):
    _need_opencl(ctx, op)
    ctx.emit("OpSubgroup2DBlockPrefetchINTEL", None, *_block_operands(ctx, op))


@lowering("intel.block_store")
def _lower_store(ctx, op):
    _need_opencl(ctx, op)
    t = op.operands[5].type
    var, first = _private(ctx, t)
    ctx.emit("OpStore", None, var, ctx.id(op.operands[5]))
    c = _block_operands(ctx, op)
    # operand order: Element Size, Width, Height, Count, Src Pointer, Dst Base Pointer, ...
    ctx.emit("OpSubgroup2DBlockStoreINTEL", None, *c[:4], first, *c[4:])
