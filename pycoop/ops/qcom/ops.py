"""SPV_QCOM_cooperative_matrix_conversion as IR ops: per-invocation arrays <-> subgroup-scope
cooperative matrices, array bitcasts and sub-arrays.

The spec's type and size rules are `conversion.static_checks`; here they are run at trace time
(the subgroup size is fixed then) and turned into CompileErrors at the user's line. The
emulator uses the NumPy semantics of `conversion`; lanes past the matrix get a poisoned
(OpUndef) array on extract, and an active invocation reading it is reported (EmuCtx.poison).

Emulator layout: per-invocation arrays are (W|1, I|1, n); a subgroup's lane i is invocation
s*S + i of its workgroup (S the subgroup size), matrices are (W|1, S|1, rows, cols).
"""
from __future__ import annotations

import numbers

import numpy as np

from ...errors import CompileError, EmulatorError, Loc, current_loc
from ...ir.builder import emit1, tracer
from ...ir.core import Value
from ...types import ArrayType, CoopMatType, ScalarType, Scope, Use, i32, u32
from ..core import as_value
from ...ir.registry import define, emulation, lowering
from . import conversion

SPEC = "SPV_QCOM_cooperative_matrix_conversion"
CAPS = ("CooperativeMatrixKHR", "CooperativeMatrixConversionQCOM")
K_SIZES = (8, 16, 32)          # MatrixA columns / MatrixB rows this extension allows (the K of a GEMM)
_USE = {Use.A: "A", Use.B: "B", Use.Accumulator: "Accumulator"}

_HINTS = {
    "scope": "declare the matrix with pycoop.Subgroup scope",
    "subgroup-size": "compile with a power-of-two subgroup_size (8, 16, 32 or 64)",
    "A-component": "A/B matrices hold i8, u8, f16 or f32",
    "B-component": "A/B matrices hold i8, u8, f16 or f32",
    "accumulator-component": "accumulators hold i32, u32, f16 or f32",
    "A-256-bit": "a MatrixA row is 256 bits: 8 x f32, 16 x f16 or 32 x i8/u8 columns",
    "B-256-bit": "a MatrixB column is 256 bits: 8 x f32, 16 x f16 or 32 x i8/u8 rows",
    "rows-subgroup": "one invocation holds one row: use at most subgroup_size rows",
    "columns-subgroup": "one invocation holds one column (B) or the accumulator is at most "
                        "subgroup_size wide",
    "array-element-type": "use an array of the component type, or the packed u32 form",
    "array-length": "lane i holds the whole row i (A, accumulator) or column i (B)",
    "bitcast-source-type": "arrays of i32, u32, f16 or f32 can be bitcast",
    "bitcast-result-type": "bitcast to i32, u32, f16 or f32",
    "bitcast-size": "the result must have exactly as many bytes as the source",
    "subarray-source-type": "sub-arrays are taken from arrays of i32, u32, f16 or f32",
    "subarray-element-type": "the result has the source's element type",
    "subarray-start-type": "pass a Python int or an i32/u32 value",
    "subarray-range": "start + length must be within the source array",
    "subarray-k-multiple": f"start at a multiple of {K_SIZES[0]} when the sub-array builds a matrix",
}

# Rule ids (docs/rules.md) of the tagged rules of pycoop.ops.qcom.conversion.static_checks that
# these ops can break.
RULE_IDS = {tag: f"qcom.{tag.lower()}" for tag in (
    "scope", "subgroup-size", "A-component", "B-component", "accumulator-component", "A-256-bit",
    "B-256-bit", "rows-subgroup", "columns-subgroup", "array-element-type", "array-length",
    "bitcast-source-type", "bitcast-result-type", "bitcast-size", "subarray-source-type",
    "subarray-start-type", "subarray-range", "subarray-k-multiple")}

_RULES = {
    "bitcast": "OpBitCastArrayQCOM", "construct": "OpCompositeConstructCoopMatQCOM",
    "extract": "OpCompositeExtractCoopMatQCOM", "extract_subarray": "OpExtractSubArrayQCOM",
}


def _raise(errors: list[str], op: str, loc: Loc) -> None:
    """CompileError for the first broken rule (static_checks tags each message with it)."""
    if not errors:
        return
    first = errors[0]
    tag, _, msg = first.partition("] ")
    tag = tag.lstrip("[")
    more = f" (and {len(errors) - 1} more: {'; '.join(e.partition('] ')[2] for e in errors[1:])})" \
        if len(errors) > 1 else ""
    raise CompileError(msg + more, loc, rule=f"{SPEC}: {_RULES[op]} [{tag}]", hint=_HINTS.get(tag),
                       rule_id=RULE_IDS.get(tag))


def _array_type(v, what: str, loc: Loc) -> ArrayType:
    t = getattr(v, "type", None)
    if not isinstance(v, Value) or not isinstance(t, ArrayType) or not isinstance(t.elem, ScalarType):
        raise CompileError(f"{what} must be a per-invocation array of scalars, got "
                           f"{t if t is not None else type(v).__name__}", loc,
                           rule=f"{SPEC}: the source must be a one-dimensional OpTypeArray",
                           hint="build one with pycoop.make_array([...])",
                           rule_id="qcom.array-source")
    return t


def _mat_type(t, what: str, loc: Loc) -> CoopMatType:
    if not isinstance(t, CoopMatType):
        raise CompileError(f"{what} must be a cooperative matrix, got {t!r}", loc,
                           hint="e.g. pycoop.coopmat[f16, pycoop.Subgroup, 16, 16, pycoop.UseA]",
                           rule="SPV_QCOM_cooperative_matrix_conversion: the matrix type must be an "
                                "OpTypeCooperativeMatrixKHR",
                           rule_id="qcom.matrix-type")
    return t


def _dtype(t: ScalarType):
    return t.dtype if not t.is_bool else np.dtype(np.bool_)


def _sizes(t: CoopMatType) -> tuple[int, int]:
    """(lanes holding data, elements per lane)."""
    return (t.cols, t.rows) if t.use == Use.B else (t.rows, t.cols)


def _packed(elem: ScalarType, t: CoopMatType) -> bool:
    return elem == u32 and t.component != u32


def _matrix_rules(op: str, t: CoopMatType, arr: ArrayType, sgs: int, loc: Loc) -> None:
    _raise(conversion.static_checks(op, use=_USE[t.use], component=_dtype(t.component), rows=t.rows,
                                    cols=t.cols, array_dtype=_dtype(arr.elem), array_length=arr.length,
                                    subgroup_size=sgs, scope=t.scope.value), op, loc)


def _const_value(v: Value):
    return v.op.attrs["value"] if v.op is not None and v.op.name == "const" else None


# --------------------------------------------------------------------------- bitcast

def _infer_bitcast(operands, attrs, regions, loc):
    src = _array_type(operands[0], "the bitcast source", loc)
    res: ArrayType = attrs["type"]
    _raise(conversion.static_checks("bitcast", array_dtype=_dtype(src.elem), array_length=src.length,
                                    result_dtype=_dtype(res.elem), result_length=res.length),
           "bitcast", loc)
    return [res]


define("qcom.bitcast_array", _infer_bitcast, capabilities=CAPS, poison_aware=True, environment="vulkan",
       doc="OpBitCastArrayQCOM: reinterpret a per-invocation array's bytes (little-endian) as "
           "another element type; the total size stays the same.")


@emulation("qcom.bitcast_array")
def _emu_bitcast(ctx, op, x):
    _propagate(ctx, op, op.operands[0])
    return conversion.bitcast_array(x, op.result.type.elem.dtype)


@lowering("qcom.bitcast_array")
def _lower_bitcast(ctx, op):
    ctx.set(op.result, ctx.emit("OpBitCastArrayQCOM", op.result.type, ctx.id(op.operands[0])))


def bitcast_array(arr: Value, elem_type) -> Value:
    """The bytes of `arr` as an array of `elem_type` (a scalar type: the length follows from
    the size; or an array type `pycoop.array(T, n)`). Element types: i32, u32, f16, f32."""
    loc = current_loc()
    src = _array_type(arr, "the bitcast source", loc)
    if isinstance(elem_type, ArrayType):
        res = elem_type
    elif isinstance(elem_type, ScalarType):
        size = src.length * src.elem.size
        if elem_type.is_bool or size % elem_type.size:
            _raise([f"[bitcast-size] {size} bytes of {src} do not make a whole {elem_type} array"],
                   "bitcast", loc)
        res = ArrayType(elem_type, size // elem_type.size)
    else:
        raise CompileError(f"bitcast_array takes a scalar or array type, got {elem_type!r}", loc,
                           rule="SPV_QCOM_cooperative_matrix_conversion: OpBitCastArrayQCOM's Result Type "
                                "is an OpTypeArray",
                           hint="pass a scalar type (pycoop.u32) or pycoop.array(T, n)",
                           rule_id="qcom.bitcast-result")
    return emit1("qcom.bitcast_array", [arr], {"type": res}, loc)


# --------------------------------------------------------------------------- construct

def _subarray_source(v: Value) -> Value | None:
    """The extract_subarray op's result `v` comes from, through array bitcasts."""
    while v.op is not None and v.op.name == "qcom.bitcast_array":
        v = v.op.operands[0]
    return v if v.op is not None and v.op.name == "qcom.extract_subarray" else None


def _infer_construct(operands, attrs, regions, loc):
    src = _array_type(operands[0], "the construct source", loc)
    t = _mat_type(attrs["type"], "the constructed type", loc)
    _matrix_rules("construct", t, src, attrs["subgroup_size"], loc)
    sub = _subarray_source(operands[0])
    if sub is not None and t.use != Use.Accumulator:
        start = _const_value(sub.op.operands[1])
        if start is not None:
            errs = conversion.static_checks("extract_subarray", array_dtype=np.uint32, result_dtype=np.uint32,
                                            start=int(start), k_sizes=K_SIZES)
            if errs:
                errs = [e + f" (the sub-array is taken at {sub.op.loc})" for e in errs]
            _raise(errs, "extract_subarray", loc)
    return [t]


define("qcom.construct", _infer_construct, capabilities=CAPS, poison_aware=True, environment="vulkan",
       doc="OpCompositeConstructCoopMatQCOM: lane i's array is row i (UseA, Accumulator) or "
           "column i (UseB) of a subgroup matrix; lanes past the matrix are ignored.")


def _check_subgroup(ctx, op) -> int:
    d = ctx.dispatch
    if not conversion._is_pow2(d.sgs):
        raise EmulatorError(f"the subgroup size {d.sgs} is not a power of two", op.loc,
                            rule=f"{SPEC}: SubgroupSize must be a power of 2 (undefined otherwise)",
                            hint="launch with a power-of-two subgroup_size",
                            rule_id="qcom.subgroup-size")
    return d.sgs


def _lane_ids(ctx) -> np.ndarray:
    return (np.arange(ctx.dispatch.wgs) % ctx.dispatch.sgs)[None, :]


@emulation("qcom.construct")
def _emu_construct(ctx, op, arr):
    t: CoopMatType = op.result.type
    sgs = _check_subgroup(ctx, op)
    ctx.scope_active(Scope.Subgroup, op)
    lanes, _ = _sizes(t)
    hit = ctx.poison.get(op.operands[0])
    if hit is not None:       # only lanes that become rows/columns are read
        ctx.check_ub(hit[0] & (_lane_ids(ctx) < lanes), op,
                     f"a lane that becomes a matrix {'column' if t.use == Use.B else 'row'} holds an "
                     f"undefined array ({hit[1]})")
    sub = _subarray_source(op.operands[0])
    if sub is not None and t.use != Use.Accumulator and sub.op.operands[1] in ctx.env:
        start = np.asarray(ctx.env[sub.op.operands[1]]).astype(np.int64)
        ctx.check_ub(start % K_SIZES[0] != 0, op,
                     f"{SPEC}: the Start Index of a sub-array that builds a Matrix{_USE[t.use]} must be a "
                     f"multiple of a supported K {K_SIZES} (the sub-array is taken at {sub.op.loc})",
                     rule_id="qcom.subarray-k-multiple")
    d = ctx.dispatch
    w, n = arr.shape[0], arr.shape[-1]
    a = np.broadcast_to(arr, (w, d.wgs, n)).reshape(w, d.nsg, sgs, n)
    elem = op.operands[0].type.elem
    return conversion.construct(a, t.component.dtype, t.rows, t.cols, _USE[t.use], packed=_packed(elem, t))


@lowering("qcom.construct")
def _lower_construct(ctx, op):
    ctx.set(op.result, ctx.emit("OpCompositeConstructCoopMatQCOM", op.result.type, ctx.id(op.operands[0])))


def construct(arr: Value, mat_type: CoopMatType) -> Value:
    """A subgroup matrix of type `mat_type` whose row i (UseA, Accumulator) or column i (UseB)
    is the array of the subgroup's invocation i. The array holds the component type, or the
    packed u32 form (u32[8] for A/B, u32[cols/2] for f16 and u32[cols] for 32-bit
    accumulators)."""
    loc = current_loc()
    _array_type(arr, "the construct source", loc)
    _mat_type(mat_type, "the constructed type", loc)
    return emit1("qcom.construct", [arr], {"type": mat_type, "subgroup_size": tracer().subgroup_size}, loc)


# --------------------------------------------------------------------------- extract

def _infer_extract(operands, attrs, regions, loc):
    v = operands[0]
    t = _mat_type(getattr(v, "type", v), "the extracted value", loc)
    res: ArrayType = attrs["type"]
    _matrix_rules("extract", t, res, attrs["subgroup_size"], loc)
    return [res]


define("qcom.extract", _infer_extract, capabilities=CAPS, poison_aware=True, environment="vulkan",
       doc="OpCompositeExtractCoopMatQCOM: row i (UseA, Accumulator) or column i (UseB) of a "
           "subgroup matrix to lane i; lanes past the matrix get an undefined array.")


@emulation("qcom.extract")
def _emu_extract(ctx, op, m):
    t: CoopMatType = op.operands[0].type
    sgs = _check_subgroup(ctx, op)
    ctx.scope_active(Scope.Subgroup, op)
    arrays, _ = conversion.extract(m, _USE[t.use], sgs, packed=_packed(op.result.type.elem, t))
    d = ctx.dispatch
    w, n = arrays.shape[0], arrays.shape[-1]
    lanes, _ = _sizes(t)
    if lanes < sgs:
        ctx.poison[op.result] = (
            _lane_ids(ctx) >= lanes,
            f"lanes {lanes}..{sgs - 1} got OpUndef from the extract at {op.loc}: the matrix has "
            f"only {lanes} {'columns' if t.use == Use.B else 'rows'}")
    else:
        ctx.poison.pop(op.result, None)
    return np.ascontiguousarray(np.broadcast_to(arrays, (w, d.nsg, sgs, n)).reshape(w, d.wgs, n))


@lowering("qcom.extract")
def _lower_extract(ctx, op):
    ctx.set(op.result, ctx.emit("OpCompositeExtractCoopMatQCOM", op.result.type, ctx.id(op.operands[0])))


def extract(mat: Value, elem_type=None) -> Value:
    """Each invocation's row (UseA, Accumulator) or column (UseB) of the subgroup matrix
    `mat`, as a per-invocation array. `elem_type`: None for the component type, `u32` for the
    packed form, or an explicit `pycoop.array(T, n)` type. Lanes past the matrix's rows
    (columns for UseB) get an undefined array."""
    loc = current_loc()
    t = _mat_type(getattr(mat, "type", mat), "the extracted value", loc)
    if elem_type is None or elem_type == t.component:
        res = ArrayType(t.component, _sizes(t)[1])
    elif isinstance(elem_type, ArrayType):
        res = elem_type
    elif elem_type == u32:
        if t.use != Use.Accumulator:
            n = conversion.PACKED_AB_LENGTH
        else:
            n = t.cols * t.component.size // 4 if t.component.is_float else t.cols
        res = ArrayType(u32, max(n, 1))
    elif isinstance(elem_type, ScalarType):
        res = ArrayType(elem_type, _sizes(t)[1])
    else:
        raise CompileError(f"extract takes a scalar or array element type, got {elem_type!r}", loc,
                           rule="SPV_QCOM_cooperative_matrix_conversion: OpCompositeExtractCoopMatQCOM's "
                                "Result Type is an OpTypeArray",
                           hint="pass a scalar type (pycoop.u32 for the packed form) or leave T out",
                           rule_id="qcom.extract-result")
    return emit1("qcom.extract", [mat], {"type": res, "subgroup_size": tracer().subgroup_size}, loc)


# --------------------------------------------------------------------------- extract_subarray

def _infer_subarray(operands, attrs, regions, loc):
    src = _array_type(operands[0], "the sub-array source", loc)
    start = operands[1]
    res: ArrayType = attrs["type"]
    st = start.type if isinstance(start.type, ScalarType) else None
    if st is None:
        raise CompileError(f"Start Index must be a 32-bit integer scalar, got {start.type}", loc,
                           rule=f"{SPEC}: OpExtractSubArrayQCOM [subarray-start-type]",
                           hint="pass a Python int or an i32/u32 value",
                           rule_id="qcom.subarray-start-type")
    c = _const_value(start)
    _raise(conversion.static_checks("extract_subarray", array_dtype=_dtype(src.elem), array_length=src.length,
                                    result_dtype=_dtype(res.elem), result_length=res.length,
                                    start_dtype=_dtype(st), start=None if c is None else int(c)),
           "extract_subarray", loc)
    return [res]


define("qcom.extract_subarray", _infer_subarray, capabilities=CAPS, poison_aware=True, environment="vulkan",
       doc="OpExtractSubArrayQCOM: arr[start:start+length] (start may be a runtime i32/u32).")


@emulation("qcom.extract_subarray")
def _emu_subarray(ctx, op, arr, start):
    ctx.check_poison(op, [op.operands[1]])
    _propagate(ctx, op, op.operands[0])
    n, length = arr.shape[-1], op.result.type.length
    s = np.asarray(start).astype(np.int64)
    bad = (s < 0) | (s + length > n)
    if bad.any():
        ctx.check_ub(bad, op, f"OpExtractSubArrayQCOM: Start Index + length ({length}) leaves the "
                              f"source array of length {n} (start {int(s[np.nonzero(bad)][0])})",
                     rule_id="qcom.subarray-range")
        s = np.where(bad, 0, s)     # inactive invocations only
    return conversion.extract_subarray(arr, s, length)


@lowering("qcom.extract_subarray")
def _lower_subarray(ctx, op):
    ctx.set(op.result, ctx.emit("OpExtractSubArrayQCOM", op.result.type,
                                *(ctx.id(v) for v in op.operands)))


def extract_subarray(arr: Value, start, length) -> Value:
    """`arr[start:start+length]` as a new array. `start` is a Python int (checked now) or an
    i32/u32 runtime value (checked by the emulator); `length` is a compile-time int."""
    loc = current_loc()
    src = _array_type(arr, "the sub-array source", loc)
    if isinstance(length, Value) or not isinstance(length, numbers.Integral) or isinstance(length, bool) \
            or length <= 0:
        raise CompileError(f"the sub-array length must be a positive compile-time int, got {length!r}", loc,
                           rule=f"{SPEC}: OpExtractSubArrayQCOM: the result is an OpTypeArray of fixed length",
                           hint="pass a positive Python int",
                           rule_id="qcom.subarray-length")
    if isinstance(start, (float, np.floating, bool, np.bool_)):      # even 8.0, as an index
        _raise([f"[subarray-start-type] Start Index must be a 32-bit integer, not the Python "
                f"{type(start).__name__} {start!r}"], "extract_subarray", loc)
    if isinstance(start, numbers.Integral):
        if not -2**31 <= int(start) < 2**31:
            _raise([f"[subarray-range] Start Index {start} does not fit a 32-bit int"], "extract_subarray", loc)
    start = as_value(start, i32)
    return emit1("qcom.extract_subarray", [arr, start], {"type": ArrayType(src.elem, int(length))}, loc)


# --------------------------------------------------------------------------- poison

def _propagate(ctx, op, src: Value) -> None:
    """The result of a pure data move is undefined where its source is."""
    hit = ctx.poison.get(src)
    if hit is None:
        ctx.poison.pop(op.result, None)
    else:
        ctx.poison[op.result] = hit
