"""SPV_NV_tensor_addressing + the tensor loads/stores of SPV_NV_cooperative_matrix2.

Tensor layouts and views are immutable values: every setter is one SPIR-V instruction that
returns a new value (`layout.dimension(M, K).slice(m0, 64, k, 32)`). The emulator keeps their
state per invocation and takes it per scope instance at a load or store, where it must be
uniform; the addressing itself is pycoop.ops.nv.addressing (the spec pseudo-code, vectorised).
"""
from __future__ import annotations

import dataclasses
import functools
import numbers
import os

import numpy as np

from ... import knobs
from ...codegen.checked import tensor_access
from ...emulator.memory import PointerArray, check_write_race
from ...errors import CompileError, EmulatorError, Loc, current_loc
from ...ir.builder import emit, emit1, trace_function
from ...ir.core import Value
from ...types import (CLAMP_MODES, ArrayType, BufferType, CoopMatType, PointerType, ScalarType,
                      SharedArrayType, StorageClass, TensorLayoutType, TensorViewType, i32, u8, u16, u32,
                      Layout, VectorType, alignment)
from .. import core
from ..core import TYPE_METHODS, as_value, constant_value, default_type
from ...ir.registry import define, emulation, lowering
from . import addressing as A
from . import decode_vector as DV
from .tangled import check_untangled

SPEC = "SPV_NV_tensor_addressing"
CM2 = "SPV_NV_cooperative_matrix2"
TA_CAPS = ("TensorAddressingNV",)


def _dims(n, what: str, loc: Loc) -> int:
    if isinstance(n, (Value, bool)) or not isinstance(n, numbers.Integral) or not 1 <= n <= 5:
        raise CompileError(f"{what} must be a compile-time int from 1 to 5, got {n!r}", loc,
                           rule=f"{SPEC}: 'Dim' must be greater than zero and at most 5",
                           hint="pass the number of dimensions as a Python int",
                           rule_id="nv.dim-range")
    return int(n)


def _u32s(values, n: int, what: str, loc: Loc, rule: str) -> list[Value]:
    values = list(values)
    if len(values) != n:
        raise CompileError(f"{what} takes {n} values here, got {len(values)}", loc, rule=rule,
                           hint=f"pass {n} values",
                           rule_id="nv.operand-count")
    out = []
    for v in values:
        if isinstance(v, (float, np.floating, bool, np.bool_)):
            t = default_type(v)             # refused as the f32 or bool it would be, even 16.0
        else:
            v = as_value(v, u32)
            t = v.type
        if not (isinstance(t, ScalarType) and t.is_int and t.bits == 32):
            raise CompileError(f"{what} operands must be 32-bit integers, got {t}", loc, rule=rule,
                               hint="pass Python ints or 32-bit integer values (pycoop.i32(x))",
                               rule_id="nv.operand-type")
        out.append(v)
    return out


# --------------------------------------------------------------------------- layouts

def tensor_layout(dim: int, clamp: str = "undefined") -> Value:
    """OpCreateTensorLayoutNV: a `dim`-dimensional layout with a clamp mode (undefined,
    constant, clamp_to_edge, repeat, mirror_repeat)."""
    loc = current_loc()
    d = _dims(dim, "tensor layout dimension count", loc)
    if clamp not in CLAMP_MODES:
        raise CompileError(f"unknown clamp mode {clamp!r}", loc, hint=f"use one of {', '.join(CLAMP_MODES)}",
                           rule="SPV_NV_tensor_addressing: ClampMode must be a valid TensorClampMode",
                           rule_id="nv.clamp-mode")
    return emit1("nv.create_layout", [], {"type": TensorLayoutType(d, CLAMP_MODES.index(clamp))}, loc)


def _infer_create(operands, attrs, regions, loc):
    return [attrs["type"]]


def _infer_state(operands, attrs, regions, loc):
    t = operands[0].type
    return [t]


for _name, _doc in [
        ("nv.create_layout", "OpCreateTensorLayoutNV: dimension, stride, span, offset 0; block size 1."),
        ("nv.create_view", "OpCreateTensorViewNV: view dimension/stride 0; clip spans all.")]:
    define(_name, _infer_create, capabilities=TA_CAPS, environment="vulkan", doc=_doc)
_STATE_OPS = {
    # op: (SPIR-V opcode, NumPy semantics, doc)
    "nv.layout_dimension": ("OpTensorLayoutSetDimensionNV", A.layout_set_dimension,
                            "Set dimensions; resets span to them, offset to 0 and strides to the "
                            "packed defaults (in blocks)."),
    "nv.layout_stride": ("OpTensorLayoutSetStrideNV", A.layout_set_stride, "Set strides (in blocks)."),
    "nv.layout_slice": ("OpTensorLayoutSliceNV", None, "Add to the offset and set the span per dimension."),
    "nv.layout_clamp_value": ("OpTensorLayoutSetClampValueNV", A.layout_set_clamp_value,
                              "Set the 32-bit clamp value (Constant clamp mode)."),
    "nv.layout_block_size": ("OpTensorLayoutSetBlockSizeNV", A.layout_set_block_size,
                             "Set the block size per dimension (decode functions get one block)."),
    "nv.view_dimension": ("OpTensorViewSetDimensionNV", A.view_set_dimension,
                          "Set the view dimensions (and default strides)."),
    "nv.view_stride": ("OpTensorViewSetStrideNV", A.view_set_stride, "Set the view strides."),
    "nv.view_clip": ("OpTensorViewSetClipNV", None, "Set the clip rectangle (row/col offset and span)."),
}
for _name, (_opc, _fn, _doc) in _STATE_OPS.items():
    define(_name, _infer_state, capabilities=TA_CAPS, environment="vulkan", doc=f"{_opc}: {_doc}")


def _state(name: str, obj: Value, values: list, what: str, n: int, rule: str) -> Value:
    loc = current_loc()
    vals = _u32s(values, n, what, loc, rule)
    return emit1(name, [obj, *vals], {}, loc)


def _constant(x):
    """`x` (a Python int or a Value) as an int when known at trace time, else None."""
    if isinstance(x, numbers.Integral) and not isinstance(x, bool):
        return int(x)
    c = constant_value(x)
    return None if c is None else int(c)


def _layout_dimension(l: Value, *dims) -> Value:
    if l.type.clamp_mode == CLAMP_MODES.index("mirror_repeat") and any(_constant(d) == 1 for d in dims):
        rule, hint = _FAULT_RULES[A.Outcome.FAULT_MIRROR_DIM_1]
        raise CompileError("a MirrorRepeat layout with a dimension of 1", current_loc(), rule=rule,
                           hint=hint, rule_id=RULE_IDS[A.Outcome.FAULT_MIRROR_DIM_1])
    return _state("nv.layout_dimension", l, dims, "dimension()", l.type.dim,
                  f"{SPEC}: OpTensorLayoutSetDimensionNV takes Dim operands")


def _layout_stride(l: Value, *strides) -> Value:
    return _state("nv.layout_stride", l, strides, "stride()", l.type.dim,
                  f"{SPEC}: OpTensorLayoutSetStrideNV takes Dim operands")


def _layout_slice(l: Value, *offsets_spans) -> Value:
    """slice(off0, span0, off1, span1, ...): offsets add to the current offset. A negative
    Python int offset (before the tensor: clamped, or clipped) is an i32 constant."""
    offsets_spans = [as_value(v, i32) if i % 2 == 0 and isinstance(v, numbers.Integral)
                     and not isinstance(v, bool) and v < 0 else v for i, v in enumerate(offsets_spans)]
    return _state("nv.layout_slice", l, offsets_spans, "slice()", 2 * l.type.dim,
                  f"{SPEC}: OpTensorLayoutSliceNV takes 2*Dim operands (offset, span per dimension)")


def _layout_block_size(l: Value, *sizes) -> Value:
    loc = current_loc()
    for s in sizes:
        c = _constant(s)
        if c is not None and c < 1:
            rule, hint = _FAULT_RULES[A.Outcome.FAULT_ZERO_BLOCK_SIZE]
            raise CompileError(f"block sizes must be at least 1, got {c}", loc, rule=rule, hint=hint,
                               rule_id=RULE_IDS[A.Outcome.FAULT_ZERO_BLOCK_SIZE])
    return _state("nv.layout_block_size", l, sizes, "block_size()", l.type.dim,
                  f"{SPEC}: OpTensorLayoutSetBlockSizeNV takes Dim operands")


def _layout_clamp_value(l: Value, value) -> Value:
    """The value out-of-bounds elements read in Constant mode: an int is taken as the 32-bit
    pattern; a float or a typed value is converted to its bits (f16/bf16 in the low bits)."""
    loc = current_loc()
    if isinstance(value, Value):
        t = value.type
        if not isinstance(t, ScalarType) or t.bits > 32:
            raise CompileError(f"the clamp value must be a scalar of at most 32 bits, got {t}", loc,
                               rule="SPV_NV_tensor_addressing: the clamp Value must be a scalar 32-bit "
                                    "integer type",
                               hint="pass a Python number or a scalar of 32 bits or fewer",
                               rule_id="nv.clamp-value")
        if t.is_float:
            value = core.bitcast(value, {8: u8, 16: u16, 32: u32}[t.bits])
        if value.type != u32:
            value = core.cast(value, u32)
    elif isinstance(value, (float, np.floating)):
        value = int(np.float32(value).view(np.uint32))
    elif isinstance(value, numbers.Integral) and -2**31 <= value < 0:
        value = int(value) & 0xFFFFFFFF     # the 32-bit pattern of a negative int
    return emit1("nv.layout_clamp_value", [l, as_value(value, u32)], {}, loc)


TYPE_METHODS[TensorLayoutType] = {"dimension": _layout_dimension, "stride": _layout_stride,
                                  "slice": _layout_slice, "block_size": _layout_block_size,
                                  "clamp_value": _layout_clamp_value}


# --------------------------------------------------------------------------- views

def tensor_view(dim: int, has_dimensions: bool = False, permutation=None) -> Value:
    """OpCreateTensorViewNV: a `dim`-dimensional view; `permutation` reorders coordinates
    (default identity); with has_dimensions=False the layout's span is used."""
    loc = current_loc()
    d = _dims(dim, "tensor view dimension count", loc)
    perm = tuple(range(d)) if permutation is None else tuple(permutation)
    if len(perm) != d:
        raise CompileError(f"a {d}-dimensional view needs {d} permutation values, got {len(perm)}", loc,
                           rule=f"{SPEC}: OpTypeTensorViewNV has exactly Dim permutation operands",
                           hint=f"give one permutation value per dimension ({d})",
                           rule_id="nv.view-permutation-count")
    # bools are ints to Python, not to SPIR-V: True would be emitted as OpConstantTrue
    if any(not isinstance(p, numbers.Integral) or isinstance(p, bool) for p in perm) \
            or sorted(perm) != list(range(d)):
        raise CompileError(f"{list(perm)} is not a permutation of 0..{d - 1}", loc,
                           rule=f"{SPEC}: the permutation values must form a valid permutation",
                           hint=f"give each of the Python ints 0..{d - 1} once",
                           rule_id="nv.view-permutation")
    if not isinstance(has_dimensions, bool):
        raise CompileError("has_dimensions must be a compile-time bool", loc,
                           rule="SPV_NV_tensor_addressing: HasDimensions must be a constant instruction "
                                "with scalar Boolean type",
                           hint="pass has_dimensions=True or False",
                           rule_id="nv.view-has-dimensions")
    return emit1("nv.create_view", [], {"type": TensorViewType(d, has_dimensions, perm)}, loc)


def _view_dimension(v: Value, *dims) -> Value:
    return _state("nv.view_dimension", v, dims, "dimension()", v.type.dim,
                  f"{SPEC}: OpTensorViewSetDimensionNV takes Dim operands")


def _view_stride(v: Value, *strides) -> Value:
    return _state("nv.view_stride", v, strides, "stride()", v.type.dim,
                  f"{SPEC}: OpTensorViewSetStrideNV takes Dim operands")


def _view_clip(v: Value, *clip) -> Value:
    """clip(row_offset, row_span, col_offset, col_span)."""
    return _state("nv.view_clip", v, clip, "clip()", 4,
                  f"{SPEC}: OpTensorViewSetClipNV takes four operands")


TYPE_METHODS[TensorViewType] = {"dimension": _view_dimension, "stride": _view_stride,
                                "clip": _view_clip}


# --------------------------------------------------------------------------- state emulation

def _stack(vals: list[np.ndarray]) -> np.ndarray:
    shape = np.broadcast_shapes(*(v.shape for v in vals))
    return np.stack([np.broadcast_to(v, shape).astype(np.int64) for v in vals], axis=-1)


@emulation("nv.create_layout")
def _emu_create_layout(ctx, op):
    t = op.attrs["type"]
    return A.create_layout(t.dim, t.clamp_mode, (1, 1))


@emulation("nv.create_view")
def _emu_create_view(ctx, op):
    t = op.attrs["type"]
    return A.create_view(t.dim, t.has_dimensions, t.permutation, (1, 1))


def _apply_state(name: str, obj, *vals):
    """NumPy semantics of state op `name` (the emulator's, and the trace-time evaluation of
    layouts made of constants)."""
    if name == "nv.layout_slice":
        return A.layout_slice(obj, _stack(list(vals[0::2])), _stack(list(vals[1::2])))
    if name == "nv.view_clip":
        return A.view_set_clip(obj, *vals)
    if name == "nv.layout_clamp_value":
        return A.layout_set_clamp_value(obj, vals[0])
    return _STATE_OPS[name][1](obj, _stack(list(vals)))


def _emu_state(ctx, op, obj, *vals):
    return _apply_state(op.name, obj, *vals)


for _name in _STATE_OPS:
    emulation(_name)(_emu_state)


def _per_instance(ctx, state, scope, op, what: str):
    """Reduce per-invocation layout/view state to one per scope instance (must be uniform),
    every field with the dispatch's instance shape in front."""
    fields = {}
    for f in dataclasses.fields(state):
        v = getattr(state, f.name)
        if not isinstance(v, np.ndarray):
            continue
        if f.name in state._VECTOR_FIELDS:
            comps = [ctx.scope_uniform_value(v[..., i], scope, op, f"{what} {f.name}[{i}]")
                     for i in range(v.shape[-1])]
            fields[f.name] = _stack(comps)
        else:
            fields[f.name] = ctx.scope_uniform_value(v, scope, op, f"{what} {f.name}").astype(np.int64)
    inst = ctx.dispatch.instance_shape(scope)
    return dataclasses.replace(state, **{k: np.broadcast_to(a, inst + a.shape[2:])
                                         for k, a in fields.items()})


# --------------------------------------------------------------------------- state lowering

def _lower_create(ctx, op):
    opname = "OpCreateTensorLayoutNV" if op.name == "nv.create_layout" else "OpCreateTensorViewNV"
    ctx.set(op.result, ctx.emit(opname, op.result.type))


lowering("nv.create_layout")(_lower_create)
lowering("nv.create_view")(_lower_create)


def _lower_state(ctx, op):
    ctx.set(op.result, ctx.emit(_STATE_OPS[op.name][0], op.result.type,
                                *(ctx.id(v) for v in op.operands)))
    if op.name == "nv.layout_dimension":
        _spec_default_strides(ctx, op)


def _spec_default_strides(ctx, op) -> None:
    """SetDimension's default strides are stride[i] = stride[i+1] * ceil(dim[i+1] / block[i+1])
    by the spec; NVIDIA's driver floors the division. When a block size may differ from 1,
    follow SetDimension with explicit strides computed the spec's way."""
    blocks = DV.block_sizes(op.operands[0])
    if not blocks or all(b.op is not None and b.op.name == "const" and b.op.attrs["value"] == 1
                             for b in blocks):
        return
    dims = [ctx.id(d) for d in op.operands[1:]]
    one = ctx.const(u32, 1)
    strides = [one]
    for d, b in zip(reversed(dims[1:]), reversed([ctx.id(b) for b in blocks[1:]])):
        ceil = ctx.emit("OpUDiv", u32, ctx.emit("OpISub", u32, ctx.emit("OpIAdd", u32, d, b), one), b)
        strides.append(ctx.emit("OpIMul", u32, strides[-1], ceil))
    ctx.set(op.result, ctx.emit("OpTensorLayoutSetStrideNV", op.result.type, ctx.id(op.result),
                                *reversed(strides)))


for _name in _STATE_OPS:
    lowering(_name)(_lower_state)


# --------------------------------------------------------------------------- load / store

def _check_tensor_mem(mem, loc, what):
    if not isinstance(mem, Value) or not isinstance(mem.type, (BufferType, SharedArrayType)):
        raise CompileError(f"{what} needs a buffer parameter or a shared array, got "
                           f"{getattr(mem, 'type', type(mem).__name__)}", loc,
                           rule=f"{CM2}: 'Pointer' points into StorageBuffer, PhysicalStorageBuffer "
                                "or Workgroup memory",
                           hint="pass a Buffer[...] parameter or a pycoop.shared(...) array",
                           rule_id="nv.tensor-pointer")
    if isinstance(mem.type.elem, VectorType):
        raise CompileError(f"{what} through an array of {mem.type.elem}", loc,
                           rule="pycoop: tensors are read through arrays of scalars or blocks",
                           hint="pass the data as a buffer of its scalar type",
                           rule_id="nv.tensor-vector-array")


# Faults of the addressing pseudo-code (pycoop.ops.nv.addressing.Outcome), reported by the
# emulator, and at trace time when the layout (and view) are made of constants.
RULE_IDS = {
    A.Outcome.FAULT_UNDEFINED: "nv.undefined-out-of-bounds", A.Outcome.FAULT_MIRROR_DIM_1: "nv.mirror-dimension-1",
    A.Outcome.FAULT_ZERO_SPAN: "nv.zero-span", A.Outcome.FAULT_ZERO_BLOCK_SIZE: "nv.block-size-zero",
    A.Outcome.FAULT_EMPTY_DIMENSION: "nv.empty-dimension",
    A.Outcome.FAULT_STORE_BLOCK_SIZE: "nv.store-block-size",
}
_FAULT_RULES = {       # outcome: (rule, hint)
    A.Outcome.FAULT_UNDEFINED: (
        f"{SPEC}: clamp mode Undefined: out of bounds accesses have undefined behavior",
        "use a clamp mode other than undefined, or keep slices in bounds"),
    A.Outcome.FAULT_MIRROR_DIM_1: (
        f"{SPEC}: RepeatMirrored computes c % (2*dim - 2), a division by zero for dim == 1 (NVIDIA GPUs "
        "hang)", "use clamp_to_edge for dimensions of size 1"),
    A.Outcome.FAULT_ZERO_SPAN: (
        f"{CM2}: linearToSpanCoord computes index % span[dim] (a span or view dimension of 0 divides "
        "by zero)", "give every dimension a span of at least 1"),
    A.Outcome.FAULT_ZERO_BLOCK_SIZE: (
        f"{CM2}: blockCoord = c / blockSize, coordInBlock = c % blockSize (a block size of 0 divides "
        "by zero)", "use 1 for dimensions that are not blocked"),
    A.Outcome.FAULT_EMPTY_DIMENSION: (
        f"{SPEC}: ClampToEdge, Repeat and RepeatMirrored clamp into [0, dim): a layout dimension of 0 "
        "has no coordinate to clamp to", "give the layout dimensions of at least 1, or use the constant "
        "clamp mode"),
    A.Outcome.FAULT_STORE_BLOCK_SIZE: (
        f"{CM2}: a block size larger than 1 must not be used with OpCooperativeMatrixStoreTensorNV "
        "(data races)", "store through a layout without block_size(...): blocks are for decoding loads"),
}


def _constant_key(v: Value) -> tuple | None:
    """A hashable description of layout or view `v` when every op that made it has trace-time
    constant operands: its create op and type, then each state op with its operands (else
    None). The clamp value plays no part in which accesses are defined, so it is left out."""
    chain = []
    while v.op is not None and v.op.name in _STATE_OPS:
        if v.op.name != "nv.layout_clamp_value":
            vals = [constant_value(x) for x in v.op.operands[1:]]
            if any(c is None for c in vals):
                return None
            chain.append((v.op.name, tuple(int(c) & 0xFFFFFFFF for c in vals)))
        v = v.op.operands[0]
    if v.op is None or v.op.name not in ("nv.create_layout", "nv.create_view"):
        return None
    return v.op.name, v.op.attrs["type"], tuple(reversed(chain))


def _state_of(key: tuple):
    """The addressing state (pycoop.ops.nv.addressing) that a _constant_key describes."""
    name, t, chain = key
    state = A.create_layout(t.dim, t.clamp_mode) if name == "nv.create_layout" else \
        A.create_view(t.dim, t.has_dimensions, t.permutation)
    for op_name, vals in chain:
        state = _apply_state(op_name, state, *(np.int64(c) for c in vals))
    return state


@functools.lru_cache(maxsize=1024)
def _constant_fault(layout_key: tuple, view_key: tuple | None, rows: int, cols: int,
                    store: bool) -> tuple | None:
    """(outcome, message) of the first access the emulator would report, or None. Cached: the
    verifier re-runs each op's checks, and kernels reuse their layouts."""
    view = None if view_key is None else _state_of(view_key)
    plan = (A.store_tensor_plan if store else A.load_tensor_plan)(_state_of(layout_key), view, rows, cols)
    try:
        plan.check()
    except A.TensorAddressingError as e:
        return e.outcome, str(e)
    return None


def _check_constant_access(name: str, layout: Value, view: Value | None, t: CoopMatType, store: bool,
                           loc: Loc) -> None:
    """A load or store through a layout (and view) of constants: the accesses the emulator would
    report as undefined are a CompileError now."""
    lay = _constant_key(layout)
    vw = None if view is None else _constant_key(view)
    if lay is None or (view is not None and vw is None):
        return
    fault = _constant_fault(lay, vw, t.rows, t.cols, store)
    if fault is not None:
        outcome, text = fault
        rule, hint = _FAULT_RULES[outcome]
        raise CompileError(f"{name} through a constant layout: {text}", loc, rule=rule, hint=hint,
                           rule_id=RULE_IDS[outcome])


def _check_view_dim(layout: Value, view: Value | None, loc: Loc) -> None:
    if view is None:
        return
    vt, lt = view.type, layout.type
    if not vt.has_dimensions and vt.dim > lt.dim:
        raise CompileError(f"a {vt.dim}-dimensional view without dimensions over a {lt.dim}-dimensional "
                           "layout", loc,
                           rule=f"{CM2}: a view whose hasDimensions is false uses the layout's span as "
                                "its dimensions",
                           hint="create the view with has_dimensions=True and set its dimensions, or "
                                f"give it at most {lt.dim} dimensions",
                           rule_id="nv.view-dim-without-dimensions")


def _infer_load_tensor(operands, attrs, regions, loc):
    mem, obj, layout = operands[:3]
    t: CoopMatType = attrs["type"]
    _check_tensor_mem(mem, loc, "load_tensor")
    core.check_readable(mem, loc)
    if not isinstance(layout.type, TensorLayoutType):
        raise CompileError(f"load_tensor needs a tensor layout, got {layout.type}", loc,
                           rule=f"{CM2}: TensorLayout must have a tensor layout type",
                           hint="pass a layout (pycoop.nv.tensor_layout(...)); a view goes in view=",
                           rule_id="nv.layout-operand")
    if obj.type != t:
        raise CompileError(f"the object operand is {obj.type}, the result is {t}", loc,
                           rule=f"{CM2}: Object's type must match Result Type",
                           hint="give object the result type (MatT.fill(v))",
                           rule_id="nv.object-type")
    if attrs.get("view") and not isinstance(operands[3].type, TensorViewType):
        raise CompileError(f"view must be a tensor view, got {operands[3].type}", loc,
                           rule="SPV_NV_cooperative_matrix2: the TensorView operand must have a tensor "
                                "view type",
                           hint="pass a view made by pycoop.nv.tensor_view(...)",
                           rule_id="nv.view-operand")
    if attrs.get("decode") is None and isinstance(mem.type.elem, ScalarType) \
            and mem.type.elem.size != t.component.size:
        raise CompileError(f"loading {t.component} elements from an array of {mem.type.elem} "
                           "needs a decode function", loc,
                           hint="pass decode=fn, or use a buffer of the component type",
                           rule="SPV_NV_cooperative_matrix2: without DecodeFunc, elements are read as the "
                                "component type (the index is multiplied by its size)",
                           rule_id="nv.decode-needed")
    if attrs.get("decode") is None and not isinstance(mem.type.elem, ScalarType):
        raise CompileError(f"a buffer of {mem.type.elem} blocks needs a decode function", loc,
                           rule=f"{CM2}: without DecodeFunc, elements are read as the component type",
                           hint="pass decode=fn(block_ptr, block_coord, coord_in_block)",
                           rule_id="nv.decode-needed")
    if attrs.get("decode") is not None:
        check_untangled(attrs["decode"], "decode function", loc)
    if attrs.get("decode_vector") is not None:
        check_untangled(attrs["decode_vector"], "decode_vector function", loc)
        if attrs.get("decode") is None:
            raise CompileError("decode_vector needs a scalar decode function too", loc,
                               rule=f"{DV.SPEC}: DecodeFunc must also be present",
                               hint="pass decode=f as well: the implementation may call either",
                               rule_id="nv.decode-vector-needs-decode")
        v = DV.check_vector_function(attrs["decode_vector"], t, layout.type.dim, loc)
        DV.check_static_block_size(layout, v, loc)
    view = operands[3] if attrs.get("view") else None
    _check_view_dim(layout, view, loc)
    _check_constant_access("load_tensor", layout, view, t, False, loc)
    return [t]


def _infer_store_tensor(operands, attrs, regions, loc):
    mem, mat, layout = operands[:3]
    _check_tensor_mem(mem, loc, "store_tensor")
    if not isinstance(mat.type, CoopMatType):
        raise CompileError(f"store_tensor stores a cooperative matrix, got {mat.type}", loc,
                           rule="SPV_NV_cooperative_matrix2: Object's type must be an "
                                "OpTypeCooperativeMatrixKHR",
                           hint="pass the matrix value to store",
                           rule_id="nv.store-object")
    if not isinstance(layout.type, TensorLayoutType):
        raise CompileError(f"store_tensor needs a tensor layout, got {layout.type}", loc,
                           rule=f"{CM2}: TensorLayout must have a tensor layout type",
                           hint="pass a layout (pycoop.nv.tensor_layout(...)); a view goes in view=",
                           rule_id="nv.layout-operand")
    if isinstance(mem.type, BufferType) and mem.type.access == "read":
        raise CompileError("cannot store into a read-only buffer", loc,
                           rule="SPIR-V: NonWritable memory (a ReadBuffer) is not stored to",
                           hint="annotate the parameter pycoop.Buffer[...] to store into it",
                           rule_id="nv.read-only-store")
    if not isinstance(mem.type.elem, ScalarType) or mem.type.elem.size != mat.type.component.size:
        raise CompileError(f"cannot store {mat.type.component} elements into an array of "
                           f"{mem.type.elem}", loc, hint="store into a buffer of the component type",
                           rule="SPV_NV_cooperative_matrix2: the index is multiplied by the size of the "
                                "matrix component type (the array holds that type)",
                           rule_id="nv.store-element-type")
    for i, b in enumerate(DV.block_sizes(layout) or ()):
        c = constant_value(b)
        if c is not None and c != 1:
            rule, hint = _FAULT_RULES[A.Outcome.FAULT_STORE_BLOCK_SIZE]
            raise CompileError(f"store_tensor through a layout whose block size in dimension {i} is {c}",
                               loc, rule=rule, hint=hint,
                               rule_id=RULE_IDS[A.Outcome.FAULT_STORE_BLOCK_SIZE])
    view = operands[3] if attrs.get("view") else None
    _check_view_dim(layout, view, loc)
    _check_constant_access("store_tensor", layout, view, mat.type, True, loc)
    return []


# SPV_NV_cooperative_matrix2: "The 'Pointer' must be a multiple of 16B" (the elements a span
# selects need not be aligned)
POINTER_ALIGNMENT = 16
define("nv.load_tensor", _infer_load_tensor, environment="vulkan",
       capabilities=("CooperativeMatrixTensorAddressingNV", "TensorAddressingNV"),
       bounds=tensor_access("tensor load", False), base_alignment=lambda op: POINTER_ALIGNMENT,
       doc="OpCooperativeMatrixLoadTensorNV: elements addressed through a tensor layout (and "
           "view); clipped elements keep Object's value; Constant clamp reads the clamp value; "
           "with a decode function each element is decoded from its block.")
define("nv.store_tensor", _infer_store_tensor, writes=0, environment="vulkan",
       capabilities=("CooperativeMatrixTensorAddressingNV", "TensorAddressingNV"),
       bounds=tensor_access("tensor store", True), base_alignment=lambda op: POINTER_ALIGNMENT,
       doc="OpCooperativeMatrixStoreTensorNV: clipped and (unless Undefined) out-of-bounds "
           "elements are not written.")


def load_tensor(mem: Value, layout: Value, mat_type: CoopMatType, *, view: Value | None = None,
                decode=None, object: Value | None = None, decode_vector=None,
                decode_vector_block=None) -> Value:
    """Load a matrix of `mat_type` from `mem` through `layout` (and `view`). `decode(block_ptr,
    block_coord, coord_in_block)` turns a block into one element; `object` gives the values of
    clipped elements (default zeros). `decode_vector` (same parameters; its pointer points to a
    `decode_vector_block`, default the buffer's element type) returns a vector of V = 2, 4 or 8
    elements: those at coord_in_block[-1] + 0..V-1 (SPV_NV_cooperative_matrix_decode_vector)."""
    loc = current_loc()
    if decode_vector is not None and decode is None:
        raise CompileError("decode_vector needs a scalar decode function too", loc,
                           rule=f"{DV.SPEC}: DecodeFunc must also be present when DecodeVectorFunc is",
                           hint="pass decode=f as well: the implementation may call either",
                           rule_id="nv.decode-vector-needs-decode")
    if decode_vector_block is not None and decode_vector is None:
        raise CompileError("decode_vector_block is the pointee of the decode_vector function, which "
                           "is missing", loc,
                           rule="SPV_NV_cooperative_matrix_decode_vector: DecodeVectorFunc's first "
                                "parameter points to the block it decodes",
                           hint="pass decode_vector= as well, or drop decode_vector_block=",
                           rule_id="nv.decode-vector-block")
    if not isinstance(mat_type, CoopMatType):
        raise CompileError(f"load_tensor needs a coopmat type, got {mat_type!r}", loc,
                           rule="SPV_NV_cooperative_matrix2: Result Type of "
                                "OpCooperativeMatrixLoadTensorNV must be a cooperative matrix type",
                           hint="pass the matrix type, e.g. pycoop.coopmat[f16, scope, m, n, pycoop.UseA]",
                           rule_id="nv.load-result-type")
    _check_tensor_mem(mem, loc, "load_tensor")
    if not isinstance(layout, Value) or not isinstance(layout.type, TensorLayoutType):
        raise CompileError(f"load_tensor needs a tensor layout, got {getattr(layout, 'type', layout)!r}",
                           loc, rule=f"{CM2}: TensorLayout must have a tensor layout type",
                           hint="a view goes in view=, the layout is required",
                           rule_id="nv.layout-operand")
    if object is not None and not isinstance(object, Value):
        raise CompileError(f"the object operand must be a {mat_type} value, got "
                           f"{type(object).__name__}", loc,
                           rule=f"{CM2}: Object's type must match Result Type",
                           hint=f"pass a matrix, e.g. object={mat_type}.fill(v)",
                           rule_id="nv.object-type")
    obj = object if object is not None else emit1("nv.null", [], {"type": mat_type}, loc)
    operands = [mem, obj, layout]
    attrs = {"type": mat_type, "view": view is not None, "decode": None}
    if view is not None:
        if not isinstance(view, Value) or not isinstance(view.type, TensorViewType):
            raise CompileError(f"view must be a tensor view, got {getattr(view, 'type', view)!r}", loc,
                               rule="SPV_NV_cooperative_matrix2: the TensorView operand must have a tensor "
                                    "view type",
                               hint="pass a view made by pycoop.nv.tensor_view(...)",
                               rule_id="nv.view-operand")
        operands.append(view)
    if decode is not None:
        if isinstance(mem.type, SharedArrayType):
            raise CompileError("decode functions read PhysicalStorageBuffer memory, not shared arrays",
                               loc, rule=f"{CM2}: DecodeFunc's first parameter is a "
                                         "PhysicalStorageBuffer pointer",
                               hint="decode from a Buffer[...] parameter (a PhysicalStorageBuffer pointer)",
                               rule_id="nv.decode-shared-memory")
        d = layout.type.dim
        coord = ArrayType(u32, d)
        fn = trace_function(decode, [PointerType(mem.type.elem, StorageClass.PhysicalStorageBuffer),
                                     coord, coord], "decode function", loc, mat_type.component)
        attrs["decode"] = fn
        if decode_vector is not None:
            block = mem.type.elem if decode_vector_block is None else decode_vector_block
            DV.check_block_type(block, loc)
            fv = trace_function(decode_vector, [PointerType(block, StorageClass.PhysicalStorageBuffer),
                                                coord, coord], "decode_vector function", loc)
            DV.check_vector_function(fv, mat_type, d, loc)
            attrs["decode_vector"] = fv
    return emit1("nv.load_tensor", operands, attrs, loc)


def store_tensor(mem: Value, layout: Value, mat: Value, *, view: Value | None = None,
                 decode=None, decode_vector=None) -> None:
    """Store `mat` into `mem` through `layout` (and `view`)."""
    loc = current_loc()
    if decode_vector is not None:
        raise CompileError("store_tensor takes no decode_vector function", loc,
                           rule=f"{DV.SPEC}: DecodeVectorFunc is not allowed on "
                                "OpCooperativeMatrixStoreTensorNV",
                           hint="drop decode_vector=: stores encode nothing",
                           rule_id="nv.store-no-decode-vector")
    if decode is not None:
        raise CompileError("store_tensor takes no decode function", loc,
                           rule=f"{CM2}: DecodeFunc is not allowed on OpCooperativeMatrixStoreTensorNV",
                           hint="drop decode=: stores encode nothing",
                           rule_id="nv.store-no-decode")
    _check_tensor_mem(mem, loc, "store_tensor")
    if not isinstance(mat, Value):
        raise CompileError(f"store_tensor stores a cooperative matrix, got {type(mat).__name__}", loc,
                           rule="SPV_NV_cooperative_matrix2: Object's type must be an "
                                "OpTypeCooperativeMatrixKHR",
                           hint="pass the matrix value to store", rule_id="nv.store-object")
    if not isinstance(layout, Value) or not isinstance(layout.type, TensorLayoutType):
        raise CompileError("store_tensor needs a tensor layout", loc,
                           rule=f"{CM2}: TensorLayout must have a tensor layout type",
                           hint="pass a layout (pycoop.nv.tensor_layout(...)); a view goes in view=",
                           rule_id="nv.layout-operand")
    operands = [mem, mat, layout] + ([view] if view is not None else [])
    if view is not None and not (isinstance(view, Value) and isinstance(view.type, TensorViewType)):
        raise CompileError("view must be a tensor view", loc,
                           rule="SPV_NV_cooperative_matrix2: the TensorView operand must have a tensor "
                                "view type",
                           hint="pass a view made by pycoop.nv.tensor_view(...)",
                           rule_id="nv.view-operand")
    emit("nv.store_tensor", operands, {"view": view is not None}, None, loc)


def _infer_null(operands, attrs, regions, loc):
    return [attrs["type"]]


define("nv.null", _infer_null, doc="A matrix of zeros (OpConstantNull): the default Object.")


@emulation("nv.null")
def _emu_null(ctx, op):
    t = op.attrs["type"]
    return np.zeros((1, 1) + t.shape, t.component.dtype)


@lowering("nv.null")
def _lower_null(ctx, op):
    ctx.set(op.result, ctx.b.constant_null(ctx.type_id(op.attrs["type"])))


def _plan(ctx, op, layout, view, t: CoopMatType, store: bool):
    lay = _per_instance(ctx, layout, t.scope, op, "tensor layout")
    vw = _per_instance(ctx, view, t.scope, op, "tensor view") if view is not None else None
    try:
        plan = (A.store_tensor_plan if store else A.load_tensor_plan)(lay, vw, t.rows, t.cols)
    except ValueError as e:
        raise EmulatorError(str(e), op.loc,
                            rule="SPV_NV_cooperative_matrix2: matrixCoordToTensorElementWithView (a view "
                                 "without dimensions uses the layout span)",
                            hint="create the view with has_dimensions=True and set its dimensions",
                            rule_id="nv.view-dim-without-dimensions") from None
    active = ctx.scope_active(t.scope, op)
    fault = plan.fault if active is None else plan.fault & active[..., None, None]
    if fault.any():
        try:
            plan.check()
        except A.TensorAddressingError as e:
            rule, hint = _FAULT_RULES[e.outcome]
            raise EmulatorError(str(e), op.loc, rule=rule, hint=hint,
            rule_id=RULE_IDS[e.outcome]) from None
    return plan, active


def _check_read_extent(op, memory, ei: np.ndarray) -> None:
    if ei.size and ei.max() >= memory.length:
        raise EmulatorError(f"load_tensor reads element {int(ei.max())} of {memory._describe()}",
                            op.loc, rule="Vulkan: accesses outside the bound buffer are undefined",
                            hint="the layout's dimensions/strides describe more memory than the "
                                 "buffer holds",
                            rule_id="nv.buffer-extent")


@emulation("nv.load_tensor")
def _emu_load_tensor(ctx, op, mem, obj, layout, *rest):
    t: CoopMatType = op.attrs["type"]
    view = rest[0] if op.attrs["view"] else None
    plan, active = _plan(ctx, op, layout, view, t, store=False)
    memory = ctx.memory_of(op.operands[0])
    shape = plan.shape
    acc = plan.accessed if active is None else plan.accessed & active[..., None, None]
    fn, fv = op.attrs["decode"], op.attrs.get("decode_vector")
    if fn is None and fv is None and memory.segment is None and acc.all():
        # every element read from a buffer without decoding (a GEMM's in-bounds tiles): one
        # gather, no per-element selection
        ei = np.broadcast_to(plan.element_index, shape)
        _check_read_extent(op, memory, ei)
        return memory.data.view(t.component.dtype)[ei]
    out = np.array(np.broadcast_to(obj, shape), dtype=t.component.dtype)
    use_clamp = plan.use_clamp_value if active is None else plan.use_clamp_value & active[..., None, None]
    if use_clamp.any():
        cv = A.clamp_value_as(plan.layout.clamp_value, t.component.dtype)
        out[use_clamp] = np.broadcast_to(cv[..., None, None], shape)[use_clamp]
    idx = plan.element_index
    if acc.any():
        where = np.nonzero(acc)
        ei = np.broadcast_to(idx, shape)[where]
        _check_read_extent(op, memory, ei)
        if fv is not None:
            out[where] = DV.emulate_decode(ctx, op, fn, fv, memory, plan, where, ei,
                                           knobs.check_decode_vector_enabled())
        elif fn is None:
            out[where] = memory.data.view(t.component.dtype)[ei] if memory.segment is None else \
                memory.data.view(t.component.dtype)[ei + where[0] * memory.segment]
        else:
            esize = memory.elem.size
            ptr = PointerArray(memory, (ei * esize).astype(np.int64))
            bc = plan.block_coord[where].astype(np.uint32)
            cib = plan.coord_in_block[where].astype(np.uint32)
            out[where] = ctx.call(fn, [ptr, bc, cib], (len(ei),))
    return out


@emulation("nv.store_tensor")
def _emu_store_tensor(ctx, op, mem, mat, layout, *rest):
    t: CoopMatType = op.operands[1].type
    view = rest[0] if op.attrs["view"] else None
    plan, active = _plan(ctx, op, layout, view, t, store=True)
    memory = ctx.memory_of(op.operands[0])
    acc = plan.accessed if active is None else plan.accessed & active[..., None, None]
    if acc.any():
        if memory.segment is None and acc.all():      # every element written: no selection
            where = (slice(None),)
            ei = np.broadcast_to(plan.element_index, plan.shape).reshape(-1)
        else:
            where = np.nonzero(acc)
            ei = np.broadcast_to(plan.element_index, plan.shape)[where]
        if memory.segment is not None:
            ei = ei + where[0] * memory.segment
        if (ei >= memory.data.shape[0]).any():
            raise EmulatorError(f"store_tensor writes past the end of {memory._describe()}", op.loc,
                                rule="Vulkan: accesses outside the bound buffer are undefined",
                                hint="give the layout the buffer's dimensions (or a larger buffer)",
                                rule_id="nv.buffer-extent")
        vals = np.broadcast_to(mat, plan.shape)[where].reshape(-1)
        check_write_race(op, ei, vals, "store_tensor")
        memory.data.view(t.component.dtype)[ei] = vals
        if memory.tracks_writes:               # shared memory: these elements are now written
            memory.untracked_write(ei, t.component)
    return ()


def _tensor_ptr(ctx, mem: Value) -> tuple[int, list]:
    """Pointer operand (to the array) and memory operands of a tensor load/store."""
    t = mem.type
    if isinstance(t, BufferType):
        storage = ctx.buffer_storage.value
        ptype = ctx.b.type("OpTypePointer", storage, ctx.buffer_array_id(t))
        chain = ctx.emit_raw("OpAccessChain", ptype, ctx.id(mem), ctx.const(u32, 0))
        if storage != "PhysicalStorageBuffer":      # descriptor ABI: no Aligned operand
            return chain, ["NonPrivatePointer"]
        return chain, ["Aligned|NonPrivatePointer",
                       alignment(t.elem, getattr(t.elem, "layout", Layout.scalar))]
    return ctx.id(mem), ["NonPrivatePointer"]


def innermost_stride(layout: Value) -> int | str | None:
    """The innermost stride of `layout` (stride[LDim-1], the one the NVIDIA driver reads wrongly
    when it is not 1, docs/numerics.md "Driver workarounds"): an int when known at trace time
    (OpTensorLayoutSetDimensionNV sets it to 1), "runtime" when a runtime value sets it, None
    when nothing addresses memory through it (a layout without dimensions) or when the layout
    comes through control flow or a function parameter (not examined)."""
    v = layout
    while v.op is not None and v.op.name in _STATE_OPS:
        if v.op.name == "nv.layout_stride":
            c = constant_value(v.op.operands[-1])
            return "runtime" if c is None else int(c) & 0xFFFFFFFF
        if v.op.name == "nv.layout_dimension":
            return 1
        v = v.op.operands[0]
    return None


def _note_inner_stride(ctx, op) -> None:
    """Record the driver defect `nv_inner_stride` in the module's requirements when the access's
    innermost stride is a trace-time constant other than 1, or a runtime value and the access
    uses no view (runtime.vulkan.capabilities refuses such modules on NVIDIA devices). The H200
    (580.159.04) read a runtime innermost stride of 2 wrongly without a view, and read and wrote
    runtime strides of 2 correctly through views; nothing checks a runtime value on the device
    (docs/numerics.md)."""
    stride = innermost_stride(op.operands[2])
    if stride == "runtime" and op.attrs["view"]:
        return
    if stride is None or stride == 1:
        return
    where = f"{os.path.basename(op.loc.file)}:{op.loc.line}" if op.loc else "?"
    what = "a runtime value, no view" if stride == "runtime" else stride
    ctx.driver_defects.setdefault("nv_inner_stride", set()).add(
        f"{op.name.removeprefix('nv.')} at {where} (innermost stride {what})")


def layout_spans(layout: Value) -> tuple[int | None, ...] | None:
    """The span of each dimension of `layout` (the coordinates linearToSpanCoord wraps by), as
    set by its last slice or dimension: an int when known at trace time, None for a runtime
    value; None in place of the tuple when no span was set (a created layout) or the layout
    comes through control flow or a function parameter (not examined)."""
    v = layout
    while v.op is not None and v.op.name in _STATE_OPS:
        if v.op.name == "nv.layout_slice":          # operands: layout, (offset, span) per dim
            spans = v.op.operands[2::2]
        elif v.op.name == "nv.layout_dimension":    # span = dimension
            spans = v.op.operands[1:]
        else:
            v = v.op.operands[0]
            continue
        return tuple(None if constant_value(x) is None else int(constant_value(x)) & 0xFFFFFFFF
                     for x in spans)
    return None


def _layout_origin(layout: Value) -> tuple[Value | None, str | None]:
    """(the layout's nv.create_layout op, the name of the last op that set its spans:
    "nv.layout_slice" or "nv.layout_dimension"); None in either place when not traced back."""
    v, last = layout, None
    while v.op is not None and v.op.name in _STATE_OPS:
        if last is None and v.op.name in ("nv.layout_slice", "nv.layout_dimension"):
            last = v.op.name
        v = v.op.operands[0]
    return (v.op if v.op is not None and v.op.name == "nv.create_layout" else None), last


def _bare_identity_view(view: Value) -> bool:
    """Whether `view` is `tensor_view(d, False)` with the identity permutation and nothing set
    on it (no dimension, stride or clip): the only kind of view the H200 was seen to read and
    write SPAN_WRAP layouts through correctly."""
    if view.op is None or view.op.name != "nv.create_view":
        return False
    t = view.op.attrs["type"]
    return not t.has_dimensions and tuple(t.permutation) == tuple(range(t.dim))


def _view_permutation(view: Value) -> tuple[int, ...] | None:
    """The permutation of the view `view` was created as (through its state ops), or None."""
    v = view
    while v.op is not None and v.op.name in _STATE_OPS:
        v = v.op.operands[0]
    return tuple(v.op.attrs["type"].permutation) if v.op is not None and v.op.name == "nv.create_view" \
        else None


def _span_wrap_condition(spans: tuple, rows: int, cols: int) -> bool:
    """A constant innermost span equal to the matrix's column count with a constant outer span
    smaller than its row count (spans in the order that addresses the matrix)."""
    return spans[-1] == cols and any(p is not None and p < rows for p in spans[:-1])


def _note_span_wrap(ctx, op) -> None:
    """Record the driver defect `nv_span_wrap` in the module's requirements for a tensor load or
    store under which the NVIDIA driver (580.159.04, H200) was seen not to wrap the outer span
    coordinate, or where it was not checked (docs/numerics.md, "Driver workarounds"; the cases
    of tests/gpu/test_gpu_nv.py::SPAN_WRAP): the layout has a constant innermost span equal to
    the matrix's column count and a constant outer span smaller than its row count, in the
    layout's order or, through a view that permutes coordinates, in the view's order (a
    transposed 2-D view read the layout dimension under the matrix's rows unwrapped). Not
    recorded where the device was right: through `tensor_view(d, False)` with the identity
    permutation and nothing set on it (loads and a store); loads without a view of rank 3 or
    more; loads without a view whose spans come from .dimension() with the Repeat clamp mode
    (the spans are the dimensions: Repeat then wraps as the spans would). Runtime spans are
    not recorded (two loads with them were right; nothing checks their values)."""
    spans = layout_spans(op.operands[2])
    t: CoopMatType = op.operands[1].type if op.name == "nv.store_tensor" else op.result.type
    if spans is None or len(spans) < 2:
        return
    view = op.operands[3] if op.attrs["view"] else None
    store = op.name == "nv.store_tensor"
    if view is None:
        if not _span_wrap_condition(spans, t.rows, t.cols):
            return
        if not store:
            create, last = _layout_origin(op.operands[2])
            if len(spans) >= 3:
                return
            if (last == "nv.layout_dimension" and create is not None
                    and create.attrs["type"].clamp_mode == CLAMP_MODES.index("repeat")):
                return
    else:
        if _bare_identity_view(view):
            return
        perm = _view_permutation(view)
        permuted = tuple(spans[p] for p in perm) if perm is not None and len(perm) == len(spans) else None
        if not (_span_wrap_condition(spans, t.rows, t.cols)
                or (permuted is not None and _span_wrap_condition(permuted, t.rows, t.cols))
                or (perm is None and _span_wrap_condition(spans[::-1], t.rows, t.cols))):
            return
    where = f"{os.path.basename(op.loc.file)}:{op.loc.line}" if op.loc else "?"
    shown = ", ".join("runtime" if p is None else str(p) for p in spans)
    through = "" if view is None else " through a view"
    ctx.driver_defects.setdefault("nv_span_wrap", set()).add(
        f"{op.name.removeprefix('nv.')} at {where} (spans ({shown}) of a {t.rows}x{t.cols} "
        f"matrix{through})")


@lowering("nv.load_tensor")
def _lower_load_tensor(ctx, op):
    _note_inner_stride(ctx, op)
    _note_span_wrap(ctx, op)
    ptr, mem_ops = _tensor_ptr(ctx, op.operands[0])
    names, extra = [], []
    if op.attrs["view"]:
        names.append("TensorView")
        extra.append(ctx.id(op.operands[3]))
    if op.attrs["decode"] is not None:
        ctx.need("CooperativeMatrixBlockLoadsNV")
        names.append("DecodeFunc")
        extra.append(ctx.function_id(op.attrs["decode"]))
    fv = op.attrs.get("decode_vector")
    if fv is not None:
        if DV.EXTENSION not in ctx.omit:
            ctx.need(DV.CAPABILITY)
            names.append("DecodeVectorFunc")
            extra.append(ctx.function_id(fv))
        else:   # stripped: DecodeFunc alone is always a correct implementation of the load
            ctx.dropped.setdefault(DV.EXTENSION, set()).add(fv)
    ta = "|".join(names) if names else "None"
    ctx.set(op.result, ctx.emit("OpCooperativeMatrixLoadTensorNV", op.result.type, ptr,
                                ctx.id(op.operands[1]), ctx.id(op.operands[2]), *mem_ops, ta, *extra))


@lowering("nv.store_tensor")
def _lower_store_tensor(ctx, op):
    _note_inner_stride(ctx, op)
    _note_span_wrap(ctx, op)
    ptr, mem_ops = _tensor_ptr(ctx, op.operands[0])
    names, extra = [], []
    if op.attrs["view"]:
        names.append("TensorView")
        extra.append(ctx.id(op.operands[3]))
    ctx.emit("OpCooperativeMatrixStoreTensorNV", None, ptr, ctx.id(op.operands[1]),
             ctx.id(op.operands[2]), *mem_ops, "|".join(names) if names else "None", *extra)

