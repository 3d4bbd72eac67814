"""Core scalar ops: constants, built-ins, arithmetic, comparisons, math, casts, select,
memory (buffers and workgroup arrays) and barriers.

Each op is declared once: its type rule (`_infer_*`), its SPIR-V lowering and its NumPy
semantics. Arithmetic ops also accept cooperative matrices where SPV_KHR_cooperative_matrix
allows them (element-wise, same type on both sides).
"""
from __future__ import annotations

import math
import numbers

import ml_dtypes
import numpy as np

from ..errors import CompileError, Loc, current_loc
from ..ir.builder import emit, emit1, tracer, tracing
from ..ir.core import Value
from ..types import (BufferType, CoopMatType, ScalarType, SharedArrayType, Type, VectorType,
                     SCALARS, bf16, bool_, f16, f32, f64, i32, u32, u64, memory_element, scalar_of_dtype)
from ..codegen.checked import element
from ..ir.registry import define, emulation, lowering
from .known_bits import exact
from .spec import check_not_spec

# --------------------------------------------------------------------------- constants

def _infer_const(operands, attrs, regions, loc):
    return [attrs["type"]]


define("const", _infer_const, pure=True, doc="A compile-time constant scalar.")


def const(value, type: ScalarType, loc: Loc | None = None, negative_hint: str | None = None) -> Value:
    """A constant of `type`. `negative_hint` is the hint where a negative number meets an
    unsigned type (what the caller's construct should be written as instead)."""
    loc = loc or current_loc()
    return emit1("const", [], {"value": _check_literal(value, type, loc, negative_hint),
                               "type": type}, loc)


def constant_value(v):
    """The value of `v` when it is a trace-time constant (a `const` op), else None: what
    checks of "must" rules on operands use to report them at compile time."""
    return v.op.attrs["value"] if isinstance(v, Value) and v.op is not None and v.op.name == "const" \
        else None


def _check_literal(value, type: ScalarType, loc: Loc, negative_hint: str | None = None):
    if type.is_bool:
        if not isinstance(value, (bool, np.bool_)):
            raise CompileError(f"{value!r} is not a bool", loc,
                               rule="SPIR-V: OpConstantTrue/OpConstantFalse are the Boolean constants",
                               hint="compare the bool with True or False, or with another bool value",
                               rule_id="core.bool-constant")
        return bool(value)
    if type.is_int:
        if isinstance(value, float) and not value.is_integer():
            raise CompileError(f"{value!r} is not an integer, but the other operand is {type}", loc,
                               hint=f"cast explicitly, e.g. {type}(x)",
                               rule="SPIR-V: an integer constant holds an integer value",
                               rule_id="core.integer-constant")
        v = int(value)
        lo, hi = type.min_max()
        if not lo <= v <= hi:
            hint = "use a wider type or cast the other operand"
            if v < 0 and not type.signed:
                hint = negative_hint or (f"{type} holds no negative numbers: compute in a "
                                         f"signed type, e.g. i{type.bits}(x)")
            raise CompileError(f"constant {v} does not fit in {type} (range {lo}..{hi})", loc,
                               hint=hint,
                               rule="SPIR-V: a constant's literal fits its type's width and signedness",
                               rule_id="core.constant-range")
        return v
    return _float_literal(value, type, loc)


def python_float(value, type: ScalarType, loc: Loc) -> float:
    """float(value) of a Python number; an int beyond every float (10**400) is an error of the
    literal's range, not Python's OverflowError."""
    try:
        return float(value)
    except OverflowError:
        raise CompileError(f"the integer literal of {len(str(abs(value)))} digits is outside the "
                           f"range of {type}", loc,
                           rule="a constant must be a value of its type (OpConstant)",
                           hint="write the value as a float (1e30), or compute it at run time",
                           rule_id="core.float-literal-range") from None


def _float_literal(value, type: ScalarType, loc: Loc) -> float:
    """The literal, checked against `type`'s range (rounded once, to nearest even); a finite literal
    beyond the type's range is an error rather than a silent infinity (or NaN in fp8_e4m3,
    which has no infinity)."""
    x = python_float(value, type, loc)
    r = float(convert_array(np.array(x), f64, type).astype(np.float64))
    if math.isfinite(r) or math.isnan(x) or (math.isinf(x) and math.isinf(r)):
        # IEEE types keep the literal as written (NumPy and the SPIR-V encoder round it once);
        # bf16 / fp8 get the rounded value, since their conversions from a double would not
        return r if type.encoding else x
    big = float(ml_dtypes.finfo(type.dtype).max)
    hint = (f"compute in f32 (f32(x) * {value!r}), or write the infinity explicitly "
            f"({type}(math.inf))") if math.isinf(r) else f"compute in f32: {type} has no infinity"
    raise CompileError(f"the literal {value!r} is outside the range of {type} (largest finite "
                       f"value {big:g})", loc,
                       rule="a constant must be a value of its type (OpConstant)", hint=hint,
                       rule_id="core.float-literal-range")


@emulation("const")
def _emu_const(ctx, op):
    return np.full((1, 1), op.attrs["value"], dtype=op.attrs["type"].dtype)


@lowering("const")
def _lower_const(ctx, op):
    ctx.set(op.result, ctx.const(op.attrs["type"], op.attrs["value"]))


class Undefined:
    """The value of a variable that has no value on this path (the front end's control flow
    puts it there); any use is an error naming why."""

    def __init__(self, why: str = ""):
        self.why = why

    def _fail(self, *a, **k):
        raise CompileError("a variable is used where it has no value" + (f": {self.why}" if self.why else ""),
                           current_loc(),
                           hint="assign it before the if/loop so it is defined on every path",
                           rule="Python: a variable must be assigned on every path before it is read "
                                "(SPIR-V: an SSA value dominates its uses)",
                           rule_id="control.undefined-variable")

    __getattr__ = __call__ = __bool__ = __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = _fail
    __rmul__ = __truediv__ = __getitem__ = __setitem__ = __index__ = __iter__ = __neg__ = _fail
    __lt__ = __le__ = __gt__ = __ge__ = __floordiv__ = __mod__ = _fail

    def __repr__(self) -> str:
        return "<undefined>"


def provable_ub(message: str, loc: Loc, rule: str, hint: str) -> CompileError:
    """The error for undefined behaviour the trace proves (constant operands): what the
    emulator would report in every invocation, raised at the line instead, under the
    emulator's rule id (docs/rules.md: compile time, emulator)."""
    return CompileError(message, loc, rule=rule, hint=hint, rule_id="emulator.undefined-behaviour")


def note_python_ints(v: Value, where: str) -> None:
    """Remember that `v` holds Python ints merged by control flow (`where`), typed i32 as
    default_type types them: the user wrote no i32, so a type error on `v` says where it
    came from."""
    tracer().python_int_merges[v.id] = where


def _python_int_origin(a, b) -> str | None:
    """Where operand a or b got Python ints merged into it, if the other is one of those
    values or a Python int too (their sum still holds Python ints); else None."""
    merges = tracer().python_int_merges
    wa, wb = merges.get(getattr(a, "id", None)), merges.get(getattr(b, "id", None))
    if wa is not None and (wb is not None or isinstance(b, int)):
        return wa
    if wb is not None and isinstance(a, int):
        return wb
    return None


def python_int_hint(*values) -> str:
    """The hint's addition for a type error on `values`: where one of them became i32 from
    Python ints (note_python_ints), else '' (also outside a trace: the verifier's rerun)."""
    if not tracing():
        return ""
    for v in values:
        where = tracer().python_int_merges.get(getattr(v, "id", None))
        if where is not None:
            return (f"; it is i32 because it holds {where} (a Python int is i32 there): give "
                    f"the variable its type where it is first assigned, e.g. u32(0)")
    return ""


def default_type(x) -> ScalarType:
    """Type given to a bare Python number that becomes a runtime value."""
    if isinstance(x, (bool, np.bool_)):
        return bool_
    if isinstance(x, np.generic):
        t = scalar_of_dtype(x.dtype)
        if t is not None:
            return t
    if isinstance(x, numbers.Integral):
        return i32
    if isinstance(x, numbers.Real):
        return f32
    if isinstance(x, Undefined):
        x._fail()          # a variable with no value on this path: say why, not "Python Undefined"
    raise CompileError(f"cannot use a Python {type(x).__name__} ({x!r}) as a kernel value",
                       current_loc(),
                       rule="only numbers, bools and pycoop values can be traced",
                       hint="compute it in Python before the kernel, or pass it as a parameter",
                       rule_id="core.traceable-value")


def as_value(x, like: Type | None = None, negative_hint: str | None = None) -> Value:
    """Turn a Python number into a constant (of `like`'s scalar type if given; `negative_hint`
    as for `const`)."""
    if isinstance(x, Value):
        return x
    if isinstance(like, CoopMatType):
        like = like.component
    if isinstance(like, VectorType):
        like = like.elem
    t = like if isinstance(like, ScalarType) else default_type(x)
    if isinstance(x, np.generic):
        x = x.item()
    if not isinstance(x, (numbers.Real, np.bool_)):
        default_type(x)   # raises the untraceable-value error (complex numbers, Decimal too)
    if not isinstance(x, (numbers.Integral, float, np.bool_)):
        x = python_float(x, t, current_loc())   # a Fraction, a long double: checked as a float
    return const(x, t, negative_hint=negative_hint)


# --------------------------------------------------------------------------- built-ins

BUILTINS = {
    # name: (SPIR-V BuiltIn, is vector)
    "workgroup_id": ("WorkgroupId", True),
    "local_invocation_id": ("LocalInvocationId", True),
    "global_invocation_id": ("GlobalInvocationId", True),
    "num_workgroups": ("NumWorkgroups", True),
    "local_invocation_index": ("LocalInvocationIndex", False),
    "subgroup_id": ("SubgroupId", False),
    "subgroup_local_id": ("SubgroupLocalInvocationId", False),
    "subgroup_size": ("SubgroupSize", False),
    "num_subgroups": ("NumSubgroups", False),
}


def _infer_builtin(operands, attrs, regions, loc):
    return [u32]


define("builtin", _infer_builtin, pure=True, doc="A compute built-in variable (component of a vector built-in).")


@emulation("builtin")
def _emu_builtin(ctx, op):
    return ctx.dispatch.builtin(op.attrs["name"], op.attrs.get("component", 0))


@lowering("builtin")
def _lower_builtin(ctx, op):
    name = op.attrs["name"]
    spv, is_vec = BUILTINS[name]
    v = ctx.builtin_value(spv, is_vec)
    if is_vec:
        v = ctx.emit("OpCompositeExtract", u32, v, op.attrs["component"])
    ctx.set(op.result, v)


class _Builtin:
    """A built-in variable's handle; using the handle itself as a value is a clear error."""

    def __init__(self, name: str):
        self._name = name

    def _misused(self, *args):
        raise CompileError(f"pycoop.{self._name} is used as a value", current_loc(),
                           hint=self._hint,
                           rule="pycoop: pycoop functions are called, not used as values",
                           rule_id="core.function-as-value")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _misused
    __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __neg__ = _misused
    __lshift__ = __rshift__ = __and__ = __or__ = __xor__ = __rand__ = __ror__ = _misused
    __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __index__ = __int__ = __float__ = _misused


class _BuiltinVec(_Builtin):
    def _get(self, comp: int) -> Value:
        return emit1("builtin", [], {"name": self._name, "component": comp})

    x = property(lambda self: self._get(0))
    y = property(lambda self: self._get(1))
    z = property(lambda self: self._get(2))

    @property
    def _hint(self) -> str:
        return f"take a component: pycoop.{self._name}.x (or .y, .z)"

    def __repr__(self) -> str:
        return f"pycoop.{self._name} (use .x/.y/.z inside a kernel)"


class _BuiltinScalar(_Builtin):
    def __call__(self) -> Value:
        return emit1("builtin", [], {"name": self._name})

    @property
    def _hint(self) -> str:
        return f"call it: pycoop.{self._name}()"

    def __repr__(self) -> str:
        return f"pycoop.{self._name}() (call it inside a kernel)"


workgroup_id = _BuiltinVec("workgroup_id")
local_invocation_id = _BuiltinVec("local_invocation_id")
global_invocation_id = _BuiltinVec("global_invocation_id")
num_workgroups = _BuiltinVec("num_workgroups")
local_invocation_index = _BuiltinScalar("local_invocation_index")
subgroup_id = _BuiltinScalar("subgroup_id")
subgroup_local_id = _BuiltinScalar("subgroup_local_id")
subgroup_size = _BuiltinScalar("subgroup_size")
num_subgroups = _BuiltinScalar("num_subgroups")


# --------------------------------------------------------------------------- arithmetic

# name: (python symbol, float opcode, signed opcode, unsigned opcode, numpy fn)
def _np_div(a, b):
    if np.issubdtype(a.dtype, np.signedinteger):
        # OpSDiv truncates toward zero: floor division corrected where it rounded down. (No
        # abs(): |INT_MIN| does not exist in the type.) The caller has replaced divisors that
        # are undefined (0; -1 under INT_MIN) by 1.
        q = np.floor_divide(a, b)
        return q + ((q * b != a) & ((a < 0) != (b < 0))).astype(a.dtype)
    if np.issubdtype(a.dtype, np.integer):
        return np.floor_divide(a, b)
    return np.divide(a, b)


def _np_rem(a, b):
    if np.issubdtype(a.dtype, np.signedinteger):
        return a - _np_div(a, b) * b          # OpSRem: the sign of the dividend
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.fmod(a, b)


BINARY = {
    "add": ("+", "OpFAdd", "OpIAdd", "OpIAdd", np.add),
    "sub": ("-", "OpFSub", "OpISub", "OpISub", np.subtract),
    "mul": ("*", "OpFMul", "OpIMul", "OpIMul", np.multiply),
    "div": ("/", "OpFDiv", "OpSDiv", "OpUDiv", _np_div),
    "rem": ("%", "OpFRem", "OpSRem", "OpUMod", _np_rem),
    "and": ("&", None, "OpBitwiseAnd", "OpBitwiseAnd", np.bitwise_and),
    "or": ("|", None, "OpBitwiseOr", "OpBitwiseOr", np.bitwise_or),
    "xor": ("^", None, "OpBitwiseXor", "OpBitwiseXor", np.bitwise_xor),
    "shl": ("<<", None, "OpShiftLeftLogical", "OpShiftLeftLogical", np.left_shift),
    "shr": (">>", None, "OpShiftRightArithmetic", "OpShiftRightLogical", np.right_shift),
    "min": ("min", "GLSL:FMin", "GLSL:SMin", "GLSL:UMin", np.minimum),
    "max": ("max", "GLSL:FMax", "GLSL:SMax", "GLSL:UMax", np.maximum),
    "pow": ("**", "GLSL:Pow", None, None, np.power),
}
_BOOL_BINARY = {"and": "OpLogicalAnd", "or": "OpLogicalOr", "xor": "OpLogicalNotEqual"}
# Element-wise ops SPV_KHR_cooperative_matrix allows on matrices.
_COOPMAT_BINARY = {"add", "sub", "mul", "div"}


def _elem(t: Type) -> ScalarType | None:
    if isinstance(t, ScalarType):
        return t
    if isinstance(t, (VectorType,)):
        return t.elem
    if isinstance(t, CoopMatType):
        return t.component
    return None


def _infer_binary(operands, attrs, regions, loc):
    kind = attrs["kind"]
    a, b = operands
    sym = BINARY[kind][0]
    if a.type != b.type:
        vec, other = (a.type, b.type) if isinstance(a.type, VectorType) else (b.type, a.type)
        if isinstance(vec, VectorType) and other == vec.elem:
            hint = (f"vectors combine with vectors: make one of the scalar, e.g. "
                    f"pycoop.make_vector([s] * {vec.count})")
        elif isinstance(a.type, ScalarType):
            hint = f"convert one side, e.g. pycoop.cast(x, {a.type})"
        else:
            hint = "convert one side with pycoop.convert"
        raise CompileError(f"operands of `{sym}` have different types: {a.type} and {b.type}", loc,
                           rule="arithmetic needs operands of one type (no implicit conversion)",
                           hint=hint + python_int_hint(a, b), rule_id="core.operand-types")
    t = a.type
    e = _elem(t)
    if e is None:
        raise CompileError(f"`{sym}` is not defined on {t}", loc,
                           rule="SPIR-V: arithmetic instructions take numeric operands of one type "
                                "(OpFAdd: floating-point, OpIAdd: integer, ...)",
                           hint="arithmetic takes numbers, vectors and matrices: load elements first (buf[i])",
                           rule_id="core.arithmetic-type")
    if isinstance(t, CoopMatType) and kind not in _COOPMAT_BINARY:
        raise CompileError(f"`{sym}` is not defined on cooperative matrices", loc,
                           rule="SPV_KHR_cooperative_matrix allows only + - * / and negation "
                                "element-wise on matrices",
                           hint="compute element-wise functions on scalars before loading, or after storing",
                           rule_id="khr.matrix-arithmetic")
    if e.encoding and not isinstance(t, CoopMatType):
        raise CompileError(f"`{sym}` is not defined on scalar {e}", loc,
                           rule=f"SPIR-V arithmetic on {e} exists only for cooperative matrices",
                           hint=f"cast to f32 first: f32(x) {sym} f32(y)",
                           rule_id="core.narrow-float-arithmetic")
    if e.is_bool:
        if kind not in _BOOL_BINARY:
            raise CompileError(f"`{sym}` is not defined on bool", loc, hint="use & | ^ on bools",
                               rule="SPIR-V: arithmetic instructions take numeric operands, not Booleans "
                                    "(OpLogical* for bools)", rule_id="core.bool-arithmetic")
    else:
        slot = 1 if e.is_float else (2 if e.signed else 3)
        if BINARY[kind][slot] is None:
            raise CompileError(f"`{sym}` is not defined on {e}", loc,
                               hint="bitwise ops and shifts need integers; ** needs floats",
                               rule="SPIR-V: arithmetic instructions take numeric operands of one type "
                                    "(OpFAdd: floating-point, OpIAdd: integer, ...)",
                               rule_id="core.arithmetic-type")
        if kind in _GLSL_16_32 and e.bits not in (16, 32):
            raise CompileError(f"`{sym}` is not available for {e}", loc,
                               rule="GLSL.std.450 Pow: 16- or 32-bit floats only",
                               hint="cast to f32 first", rule_id="core.glsl-16-32-bit")
        if e.is_int:
            _check_constant_operands(kind, a, b, loc)
    return [t]


def _check_constant_operands(kind: str, a: Value, b: Value, loc: Loc) -> None:
    """Undefined behaviour that the traced operands prove (a divisor or shift amount the IR
    fixes, in a scalar, in a component of a vector or in a filled matrix): a CompileError at
    the line, as the emulator would report every invocation."""
    ds = _constants(b) if kind in ("div", "rem", "shl", "shr") else None
    if ds is None:
        return
    xs = _constants(a) or [None]
    e = _elem(a.type)
    n = max(len(xs), len(ds))
    for i in range(n):
        x, d = xs[i % len(xs)], ds[i % len(ds)]
        if d is None:
            continue
        where = f" (component {i})" if n > 1 else ""
        if kind in ("div", "rem") and (d == 0 or (e.signed and d == -1 and x == e.min_max()[0])):
            sym = "//" if kind == "div" else "%"
            what = "by zero" if d == 0 else f"{x}, the least {e}, by -1"
            raise provable_ub(f"`{sym}` divides {what}{where}: the result is undefined", loc,
                               rule="SPIR-V: OpUDiv, OpSDiv, OpUMod and OpSRem are undefined if "
                                    "Operand 2 is 0 (the signed ones also for the minimum value by -1)",
                               hint="guard the division, or divide by a value that cannot be 0")
        if kind in ("shl", "shr") and not 0 <= d < e.bits:
            sym = "<<" if kind == "shl" else ">>"
            by = "a negative amount" if d < 0 else "its width or more"
            raise provable_ub(f"`{sym} {d}` shifts a {e.bits}-bit integer by {by}{where}: the "
                               f"result is undefined", loc,
                               rule="SPIR-V: the result of a shift is undefined if Shift is greater "
                                    "than or equal to the bit width of Base's components",
                               hint=f"shift by 0 to {e.bits - 1} (a wider type holds more bits)")


def _constants(v: Value) -> list[int | None] | None:
    """The integer each component of `v` has when the IR fixes it (None where it does not): a
    scalar, a vector built from scalars, a matrix filled with one; None for other values."""
    op = v.op
    if isinstance(v.type, ScalarType):
        return [exact(v)]
    if op is not None and op.name in ("composite.construct", "khr.fill"):
        return [exact(c) for c in op.operands]
    return None


define("binary", _infer_binary, pure=True, doc="Element-wise binary arithmetic / bitwise / min / max.")


@emulation("binary")
def _emu_binary(ctx, op, a, b):
    kind = op.attrs["kind"]
    e = _elem(op.operands[0].type)
    if e.is_int and kind in ("div", "rem"):
        bad = (b == 0)
        if e.signed:
            lo = np.array(e.min_max()[0], dtype=a.dtype)
            bad = bad | ((a == lo) & (b == -1))
        msg = "integer division by zero (or INT_MIN / -1) is undefined"
        hint = "guard the division, or divide by a value that cannot be 0"
        t = op.operands[0].type
        if isinstance(t, CoopMatType):
            ctx.check_instances(bad.any((-2, -1)), ctx.scope_active(t.scope, op), op, msg, hint=hint)
        else:
            ctx.check_ub(bad, op, msg, hint=hint)
        b = np.where(bad, np.ones_like(b), b)     # undefined: any value, but no trap in NumPy
    if e.is_int and kind in ("shl", "shr"):
        ctx.check_ub((b < 0) | (b >= e.bits), op,
                     f"shifting a {e.bits}-bit integer by a negative amount or >= {e.bits} is undefined",
                     hint=f"shift by 0 to {e.bits - 1} (a wider type holds more bits)")
    fn = BINARY[kind][4]
    if e.is_bool:
        fn = {"and": np.logical_and, "or": np.logical_or, "xor": np.not_equal}[kind]
    if not e.is_float:                 # integer array ops raise no floating-point errors
        return fn(a, b).astype(a.dtype, copy=False)
    if e.encoding:                     # bf16 / fp8 matrices: in f32, rounded once (as lowered)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return convert_array(fn(a.astype(np.float32), b.astype(np.float32)), f32, e)
    if kind in ("min", "max"):
        return _float_min_max(kind, a, b)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        r = fn(a, b)
    return r.astype(a.dtype, copy=False)


def _float_min_max(kind: str, a, b):
    """GLSL FMin/FMax as IEEE 754-2019 minimumNumber/maximumNumber: a NaN operand gives the
    other operand, and -0 is less than +0. GLSL leaves the NaN case unspecified and words the
    zero case as "y if y < x"; the H100 computes exactly this (lavapipe returns the second
    operand of a +-0 pair)."""
    both_zero = (a == 0) & (b == 0)
    if kind == "min":
        r = np.where(both_zero, np.where(np.signbit(a), a, b), np.fmin(a, b))
    else:
        r = np.where(both_zero, np.where(np.signbit(a), b, a), np.fmax(a, b))
    return r.astype(a.dtype, copy=False)


@lowering("binary")
def _lower_binary(ctx, op):
    kind = op.attrs["kind"]
    t = op.result.type
    e = _elem(t)
    if e.is_bool:
        opname = _BOOL_BINARY[kind]
    else:
        opname = BINARY[kind][1 if e.is_float else (2 if e.signed else 3)]
    a, b = (ctx.id(v) for v in op.operands)
    if e.encoding:
        ctx.set(op.result, via_f32(ctx, t, lambda wt, x, y: ctx.emit(opname, wt, x, y), a, b))
    elif opname in _NARROW_WRAP and e.signed and e.bits < 32 and isinstance(t, (ScalarType, VectorType)):
        ctx.set(op.result, narrow_int(ctx, t, opname, a, b))
    elif opname == "OpSRem" and ctx.target == "vulkan":
        ctx.set(op.result, _signed_rem(ctx, t, a, b))
    elif opname.startswith("GLSL:"):
        ctx.set(op.result, ctx.glsl(opname[5:], t, a, b))
    else:
        ctx.set(op.result, ctx.emit(opname, t, a, b))


def _signed_rem(ctx, t: Type, a: int, b: int) -> int:
    """a % b with the sign of a (OpSRem's meaning) as |a| umod |b| with the sign put back:
    the Vulkan environment leaves OpSRem undefined when an operand is negative, and the
    NVIDIA driver does return other values there."""
    e = _elem(t)
    ue = SCALARS[f"u{e.bits}"]
    ut = VectorType(ue, t.count) if isinstance(t, VectorType) else ue

    def splat(x: int) -> int:
        c = ctx.const(e, x)
        return ctx.constant_composite(t, *[c] * t.count) if isinstance(t, VectorType) else c
    mag = [ctx.emit("OpBitcast", ut, ctx.glsl("SAbs", t, x)) for x in (a, b)]
    m = ctx.emit("OpBitcast", t, ctx.emit("OpUMod", ut, *mag))
    sign = ctx.emit("OpShiftRightArithmetic", t, a, splat(e.bits - 1))     # 0 or -1
    return ctx.emit("OpISub", t, ctx.emit("OpBitwiseXor", t, m, sign), sign)


def binary(kind: str, a, b) -> Value:
    if not isinstance(a, Value) and not isinstance(b, Value):
        return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
                "min": lambda: min(a, b), "max": lambda: max(a, b)}[kind]()
    same = _integer_identity(kind, a, b)
    if same is not None:
        return same
    loc = current_loc()
    hint = _negative_hint(kind, _elem(getattr(a, "type", None) or b.type))
    merged = _python_int_origin(a, b)
    a = as_value(a, getattr(b, "type", None), hint)
    b = as_value(b, a.type, hint)
    r = emit1("binary", [a, b], {"kind": kind}, loc)
    if merged is not None:              # `c + 1` of such a value still holds Python ints
        note_python_ints(r, merged)
    return r


def _negative_hint(kind: str, t: ScalarType | None) -> str | None:
    """What to write where a negative Python int meets an unsigned value in `a kind b` (the
    int becomes a constant of that type, which cannot hold it); None for other types."""
    if t is None or not t.is_int or t.signed:
        return None
    if kind == "add":
        return "subtract instead: `x - 1`, not `x + -1` (or compute in a signed type)"
    if kind == "sub":
        return "add instead: `x + 1`, not `x - -1` (or compute in a signed type)"
    if kind in ("and", "or", "xor"):
        return (f"write the mask in the value's type, e.g. `x & ~{t}(3)`: Python's `~3` is "
                f"the int -4")
    return f"{t} holds no negative numbers: compute in a signed type, e.g. i{t.bits}(x)"


# x op n == x for an integer x and these Python ints n on the right (or either side: commutative)
_RIGHT_IDENTITY = {"add": 0, "sub": 0, "mul": 1, "or": 0, "xor": 0, "shl": 0, "shr": 0}
_COMMUTATIVE = {"add", "mul", "or", "xor"}


def _integer_identity(kind: str, a, b) -> Value | None:
    """The integer operand of `a kind b` when the other is a Python int leaving it unchanged
    (m0 + 16 * i with i == 0 in an unrolled tile loop): no op is traced. Floats are left alone
    (-0.0 + 0 is +0.0)."""
    n = _RIGHT_IDENTITY.get(kind)
    for x, k, ok in ((a, b, True), (b, a, kind in _COMMUTATIVE)):
        if (ok and isinstance(x, Value) and type(k) is int and k == n
                and isinstance(x.type, (ScalarType, VectorType)) and _elem(x.type).is_int):
            return x
    return None


# --------------------------------------------------------------------------- unary & math

UNARY = {
    # name: (float op, signed op, unsigned op, numpy)
    "neg": ("OpFNegate", "OpSNegate", "OpSNegate", np.negative),
    "not": (None, "OpNot", "OpNot", np.invert),
    "abs": ("GLSL:FAbs", "GLSL:SAbs", None, np.abs),
    "exp": ("GLSL:Exp", None, None, np.exp),
    "exp2": ("GLSL:Exp2", None, None, np.exp2),
    "log": ("GLSL:Log", None, None, np.log),
    "log2": ("GLSL:Log2", None, None, np.log2),
    "sqrt": ("GLSL:Sqrt", None, None, np.sqrt),
    "rsqrt": ("GLSL:InverseSqrt", None, None, lambda x: 1 / np.sqrt(x)),
    "sin": ("GLSL:Sin", None, None, np.sin),
    "cos": ("GLSL:Cos", None, None, np.cos),
    "tanh": ("GLSL:Tanh", None, None, np.tanh),
    "floor": ("GLSL:Floor", None, None, np.floor),
    "ceil": ("GLSL:Ceil", None, None, np.ceil),
    "trunc": ("GLSL:Trunc", None, None, np.trunc),
}
# ExtInst math on 8/16-bit float types other than f16 is not defined: compute in f32 instead.


def _infer_unary(operands, attrs, regions, loc):
    kind = attrs["kind"]
    t = operands[0].type
    e = _elem(t)
    if e is None:
        raise CompileError(f"{kind} is not defined on {t}", loc,
                           rule="SPIR-V: arithmetic instructions take numeric operands of one type "
                                "(OpFAdd: floating-point, OpIAdd: integer, ...)",
                           hint="arithmetic takes numbers, vectors and matrices: load elements first (buf[i])",
                           rule_id="core.arithmetic-type")
    if isinstance(t, CoopMatType) and kind != "neg":
        raise CompileError(f"{kind} is not defined on cooperative matrices", loc,
                           rule="SPV_KHR_cooperative_matrix allows only negation as a unary op",
                           hint="compute element-wise functions on scalars before loading, or after storing",
                           rule_id="khr.matrix-arithmetic")
    if e.is_bool:
        if kind != "not":
            raise CompileError(f"{kind} is not defined on bool", loc,
                               rule="SPIR-V: arithmetic instructions take numeric operands, not Booleans "
                                    "(OpLogical* for bools)",
                               hint="use `not` or ~ on bools; pycoop.select(c, 1, 0) gives a number",
                               rule_id="core.bool-arithmetic")
        return [t]
    slot = 0 if e.is_float else (1 if e.signed else 2)
    if UNARY[kind][slot] is None:
        raise CompileError(f"{kind} is not defined on {e}", loc,
                           hint="math functions need a float operand: cast first",
                           rule="SPIR-V: arithmetic instructions take numeric operands of one type "
                                "(OpFAdd: floating-point, OpIAdd: integer, ...)",
                           rule_id="core.arithmetic-type")
    if e.encoding and kind == "neg" and not isinstance(t, CoopMatType):
        raise CompileError(f"negation is not defined on scalar {e}", loc,
                           rule=f"SPIR-V arithmetic on {e} exists only for cooperative matrices",
                           hint="cast to f32 first: -f32(x)",
                           rule_id="core.narrow-float-arithmetic")
    if e.encoding and kind != "neg":
        raise CompileError(f"{kind} is not available for {e}", loc,
                           rule=f"GLSL.std.450 is defined for IEEE float types, not {e}",
                           hint="cast to f32 first", rule_id="core.glsl-float-type")
    if kind in _GLSL_16_32 and e.bits not in (16, 32):
        raise CompileError(f"{kind} is not available for {e}", loc,
                           rule=f"GLSL.std.450 {UNARY[kind][0][5:]}: 16- or 32-bit floats only",
                           hint="cast to f32 first", rule_id="core.glsl-16-32-bit")
    return [t]


# GLSL.std.450 instructions whose text restricts the operand to 16- or 32-bit floats (the
# exponential, logarithmic, power and trigonometric family); FAbs, Floor, Ceil, Trunc, Sqrt,
# InverseSqrt, FMin, FMax and Fma take any float width, f64 included.
_GLSL_16_32 = {"exp", "exp2", "log", "log2", "sin", "cos", "tanh", "pow"}


define("unary", _infer_unary, pure=True, doc="Element-wise unary arithmetic and math functions.")


@emulation("unary")
def _emu_unary(ctx, op, a):
    kind = op.attrs["kind"]
    if _elem(op.operands[0].type).is_bool:
        return np.logical_not(a)
    with np.errstate(all="ignore"):
        return UNARY[kind][3](a).astype(a.dtype, copy=False)


@lowering("unary")
def _lower_unary(ctx, op):
    kind = op.attrs["kind"]
    t = op.result.type
    e = _elem(t)
    a = ctx.id(op.operands[0])
    if e.is_bool:
        ctx.set(op.result, ctx.emit("OpLogicalNot", t, a))
        return
    if kind == "neg" and e.encoding:
        ctx.set(op.result, via_f32(ctx, t, lambda wt, x: ctx.emit("OpFNegate", wt, x), a))
        return
    if kind == "neg" and e.is_int and e.signed and e.bits < 32 and isinstance(t, (ScalarType, VectorType)):
        ctx.set(op.result, narrow_int(ctx, t, "OpSNegate", a))
        return
    opname = UNARY[kind][0 if e.is_float else (1 if e.signed else 2)]
    if opname.startswith("GLSL:"):
        ctx.set(op.result, ctx.glsl(opname[5:], t, a))
    else:
        ctx.set(op.result, ctx.emit(opname, t, a))


def narrow_int(ctx, t: Type, opname: str, *args: int) -> int:
    """`opname` on 8- or 16-bit signed integers, computed in 32 bits and brought back to the
    narrow type by a shift pair that leaves the 32-bit register sign-extended.

    Driver workaround: the NVIDIA driver (580.159.04) does not wrap the negation of an 8- or
    16-bit INT_MIN before a comparison, shift, min/max or widening conversion uses it (-x of
    an i8 -128 stayed +128), including negations it finds in the code itself (~x + 1). The
    SPIR-V pycoop emitted was right. The extra instructions cost nothing measurable, and the
    result is the same on every target."""
    e = _elem(t)
    wt = VectorType(i32, t.count) if isinstance(t, VectorType) else i32

    def splat(x: int) -> int:
        c = ctx.const(u32, x)
        return ctx.constant_composite(VectorType(u32, t.count), *[c] * t.count) \
            if isinstance(t, VectorType) else c
    r = ctx.emit(opname, wt, *(ctx.emit("OpSConvert", wt, x) for x in args))
    r = ctx.emit("OpShiftLeftLogical", wt, r, splat(32 - e.bits))
    r = ctx.emit("OpShiftRightArithmetic", wt, r, splat(32 - e.bits))
    return ctx.emit("OpSConvert", t, r)


# Signed narrow ops that are, or that a driver may turn into, a negation (-x, ~x + 1, 0 - x,
# x * -1): computed by narrow_int. Unsigned narrow arithmetic and shifts wrap correctly there.
_NARROW_WRAP = {"OpSNegate", "OpIAdd", "OpISub", "OpIMul"}


def via_f32(ctx, t: Type, compute, *args: int) -> int:
    """An arithmetic op on bf16 or fp8 matrices, which SPIR-V's float arithmetic does not take
    (SPV_KHR_bfloat16, SPV_EXT_float8 allow only conversions, loads/stores and MulAdd on them):
    convert the operands to f32, compute, convert back. One f32 op rounded to the narrow type
    is the correctly rounded narrow result (f32 has more than 2p+1 bits for p <= 8), which is
    what the emulator computes."""
    wt = t.with_(component=f32)
    wide = [ctx.emit("OpFConvert", wt, x) for x in args]
    return ctx.emit("OpFConvert", t, compute(wt, *wide))


# Python numbers given to the float functions are computed as the GPU would, in IEEE
# arithmetic: sqrt(-4) is NaN, exp(1000) inf, log(0) -inf (Python's math raises there)
_PYTHON_FLOAT = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2,
                 "sqrt": np.sqrt, "rsqrt": lambda v: 1.0 / np.sqrt(v), "sin": np.sin,
                 "cos": np.cos, "tanh": np.tanh}


def unary(kind: str, x) -> Value:
    if not isinstance(x, Value):
        if not isinstance(x, (numbers.Real, np.number, np.bool_)):
            default_type(x)             # a CompileError naming what it is
        if kind == "neg":
            return -x
        if kind == "abs":
            return abs(x)
        if kind not in _PYTHON_FLOAT and isinstance(x, numbers.Integral):
            return getattr(math, kind)(x)
        v = python_float(x, f64, current_loc())
        if kind in _PYTHON_FLOAT:
            with np.errstate(all="ignore"):
                return float(_PYTHON_FLOAT[kind](np.float64(v)))
        if not math.isfinite(v):
            return v                # floor/ceil/trunc of NaN and infinities, as on the GPU
        return getattr(math, kind)(v)
    return emit1("unary", [x], {"kind": kind})


def _math(kind):
    def f(x):
        return unary(kind, x)
    f.__name__ = kind
    f.__doc__ = f"Element-wise {kind} (GLSL.std.450 on the GPU)."
    return f


exp, exp2, log, log2, sqrt, rsqrt = (_math(k) for k in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt"))
sin, cos, tanh, floor, ceil, trunc = (_math(k) for k in ("sin", "cos", "tanh", "floor", "ceil", "trunc"))


def abs_(x):
    """|x| for ints and floats (a Python number gives Python's abs)."""
    return unary("abs", x)


def minimum(a, b):
    """Element-wise minimum. Floats: a NaN operand gives the other one and -0 < +0 (what
    GLSL FMin leaves open; see docs/numerics.md)."""
    return binary("min", a, b)


def maximum(a, b):
    return binary("max", a, b)


# --------------------------------------------------------------------------- fma

def _infer_fma(operands, attrs, regions, loc):
    a, b, c = operands
    if not (a.type == b.type == c.type):
        raise CompileError(f"pycoop.fma operands have different types: {a.type}, {b.type}, "
                           f"{c.type}", loc, rule="GLSL.std.450 Fma: a, b, c and the result "
                                                  "have one type",
                           hint=f"convert the operands, e.g. pycoop.cast(x, {a.type})"
                           if isinstance(a.type, ScalarType) else None, rule_id="core.fma-types")
    e = a.type if isinstance(a.type, ScalarType) else (
        a.type.elem if isinstance(a.type, VectorType) else None)
    if e is None or not e.is_float or e.encoding:
        raise CompileError(f"pycoop.fma is not defined on {a.type}", loc,
                           rule="GLSL.std.450 Fma takes IEEE float scalars or vectors "
                                "(f16, f32, f64)",
                           hint="convert to f32 first" if e is not None and e.is_float else
                           "fma needs float operands", rule_id="core.fma-float")
    return [a.type]


define("fma", _infer_fma, doc="a * b + c with one rounding (GLSL.std.450 Fma).")


@emulation("fma")
def _emu_fma(ctx, op, a, b, c):
    return fma_array(a, b, c)


@lowering("fma")
def _lower_fma(ctx, op):
    ctx.set(op.result, ctx.glsl("Fma", op.result.type, *(ctx.id(v) for v in op.operands)))


def fma(a, b, c) -> Value:
    """a * b + c rounded once (GLSL.std.450 Fma), for f16, f32 and f64 scalars or vectors (on
    Python numbers: exactly for ints, rounded once to a float otherwise)."""
    if not any(isinstance(x, Value) for x in (a, b, c)):
        for x in (a, b, c):
            if not isinstance(x, (numbers.Real, np.bool_)):
                default_type(x)             # a CompileError naming what it is
        if all(isinstance(x, numbers.Integral) for x in (a, b, c)):
            return a * b + c
        return float(_fma_f64(*(np.array(python_float(x, f64, current_loc())) for x in (a, b, c))))
    loc = current_loc()
    like = next(x.type for x in (a, b, c) if isinstance(x, Value))
    return emit1("fma", [as_value(x, like) for x in (a, b, c)], {}, loc)


def fma_array(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a * b + c with one rounding to nearest even, element-wise on one float dtype."""
    if a.dtype == np.float64:
        return _fma_f64(a, b, c)
    # f16 / f32: the product is exact in f64, the sum is rounded to odd there, then once more
    # to the narrow type - which is the correctly rounded result.
    with np.errstate(over="ignore", invalid="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)
        s = _add_odd(p, c.astype(np.float64))
        return _round_float(s, scalar_of_dtype(a.dtype))


def _two_sum(a, b):
    """s + e == a + b exactly, s the rounded sum (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _add_odd(a, b):
    """a + b in f64 rounded to odd (finite sums; inf and NaN as a plain sum)."""
    with np.errstate(over="ignore", invalid="ignore"):
        s, e = _two_sum(a, b)
    bits = s.view(np.uint64)
    inexact = (e != 0) & np.isfinite(s)
    bits = np.where(inexact & ((e < 0) != (s < 0)), bits - np.uint64(1), bits)   # toward zero
    bits = np.where(inexact, bits | np.uint64(1), bits)
    return bits.astype(np.uint64).view(np.float64)


def _split(x):
    """hi + lo == x with hi holding the top 26 significant bits (Veltkamp)."""
    t = x * 134217729.0                           # 2**27 + 1
    hi = t - (t - x)
    return hi, x - hi


def _two_prod(a, b):
    """p + e == a * b exactly, for |a|, |b| in [0.5, 1) (Dekker)."""
    p = a * b
    (ah, al), (bh, bl) = _split(a), _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _fma_f64(a, b, c):
    """Exact f64 fma (Boldo & Melquiond's emulation with rounding to odd), vectorised.

    a and b are scaled to [0.5, 1) by their exponents (frexp), so the product's halves are
    exact; c is scaled by the same power of two. The result is exact except when it is
    subnormal (|result| < 2**-1022): there the final scaling rounds a second time and the last
    bit can differ in halfway cases."""
    ma, ea = np.frexp(a)
    mb, eb = np.frexp(b)
    e = (ea + eb).astype(np.int64)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        cs = np.ldexp(c, np.clip(-e, -2000, 2000))
        lost = (cs == 0) & (c != 0)                 # c far below the product: a sticky bit
        cs = np.where(lost, np.copysign(2.0 ** -1000, c), cs)
        uh, ul = _two_prod(ma, mb)
        th, tl = _two_sum(cs, uh)
        r = np.ldexp(th + _add_odd(tl, ul), e)
        huge = ~np.isfinite(cs)                     # c far above the product: c itself
        r = np.where(huge, c, r)
        finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
        special = np.where(np.isinf(c) & np.isfinite(a) & np.isfinite(b), c, a * b + c)
        zero = (a == 0) | (b == 0)                  # exact zero product: IEEE signed-zero sum
        r = np.where(zero, (a * b) + c, r)
    return np.where(finite, r, special)


# --------------------------------------------------------------------------- comparisons

COMPARE = {
    # name: (float op, signed op, unsigned op, numpy)
    "eq": ("OpFOrdEqual", "OpIEqual", "OpIEqual", np.equal),
    "ne": ("OpFUnordNotEqual", "OpINotEqual", "OpINotEqual", np.not_equal),
    "lt": ("OpFOrdLessThan", "OpSLessThan", "OpULessThan", np.less),
    "le": ("OpFOrdLessThanEqual", "OpSLessThanEqual", "OpULessThanEqual", np.less_equal),
    "gt": ("OpFOrdGreaterThan", "OpSGreaterThan", "OpUGreaterThan", np.greater),
    "ge": ("OpFOrdGreaterThanEqual", "OpSGreaterThanEqual", "OpUGreaterThanEqual", np.greater_equal),
}


def _infer_compare(operands, attrs, regions, loc):
    a, b = operands
    if a.type != b.type:
        raise CompileError(f"cannot compare {a.type} with {b.type}", loc,
                           rule="comparisons need operands of one type",
                           hint=f"cast one side, e.g. pycoop.cast(x, {a.type})",
                           rule_id="core.compare-types")
    if not isinstance(a.type, ScalarType):
        raise CompileError(f"comparisons are defined on scalars, not {a.type}", loc,
                           rule="SPIR-V: comparison instructions take scalar or vector operands (not "
                                "cooperative matrices)",
                           hint="compare scalars (a vector's components one by one)",
                           rule_id="core.compare-matrix")
    if a.type.is_bool and attrs["kind"] not in ("eq", "ne"):
        raise CompileError("bools can only be compared with == and !=", loc,
                           rule="SPIR-V: OpLogicalEqual/OpLogicalNotEqual are the only comparisons of "
                                "Booleans",
                           hint="bools compare with == and != only; compare numbers for an order",
                           rule_id="core.compare-bool")
    return [bool_]


define("compare", _infer_compare, pure=True, doc="Scalar comparison giving a bool.")


@emulation("compare")
def _emu_compare(ctx, op, a, b):
    return COMPARE[op.attrs["kind"]][3](a, b)


def narrowable_i64_compare(op) -> bool:
    """Whether compare op `op` is a signed ordered i64 comparison whose sides are each an i32
    sign-extended to i64 or a literal constant that i32 holds, at least one of them extended:
    the lowering emits it as the equal i32 comparison (cheaper; Mesa 22.3.6, lavapipe,
    evaluates the i64 form as if the extended value were the greater: docs/numerics.md,
    Driver workarounds). The fuzzer's allowance for that driver asks the same question."""
    if op.attrs["kind"] not in ("lt", "le", "gt", "ge") or str(op.operands[0].type) != "i64":
        return False
    kinds = []
    for v in op.operands:
        src = v.op
        if sign_extended_i32(v):
            kinds.append("extended")
        elif src is not None and src.name == "const" and \
                -2 ** 31 <= int(src.attrs["value"]) < 2 ** 31:
            kinds.append("constant")
        else:
            return False
    return "extended" in kinds


def sign_extended_i32(v) -> bool:
    """Whether value `v` is an i32 converted to i64 (a cast, emitted as OpSConvert)."""
    op = getattr(v, "op", None)
    return (op is not None and op.name == "cast" and str(v.type) == "i64"
            and str(op.operands[0].type) == "i32")


def _narrowed_operands(ctx, op) -> list[int]:
    """The i32 operands of a `narrowable_i64_compare`: the extended values' sources and the
    constants as i32."""
    return [ctx.id(v.op.operands[0]) if v.op.name == "cast" else
            ctx.const(i32, int(v.op.attrs["value"])) for v in op.operands]


@lowering("compare")
def _lower_compare(ctx, op):
    t = op.operands[0].type
    kind = op.attrs["kind"]
    if t.is_bool:
        opname = "OpLogicalEqual" if kind == "eq" else "OpLogicalNotEqual"
    else:
        opname = COMPARE[kind][0 if t.is_float else (1 if t.signed else 2)]
    ids = _narrowed_operands(ctx, op) if not t.is_bool and narrowable_i64_compare(op) else \
        [ctx.id(v) for v in op.operands]
    ctx.set(op.result, ctx.emit(opname, bool_, *ids))


def compare(kind: str, a, b) -> Value:
    loc = current_loc()
    hint = ("an unsigned value is never negative: drop the test, or compare in a signed type "
            "(`i32(x) > -1`)")
    a = as_value(a, getattr(b, "type", None), hint)
    b = as_value(b, a.type, hint)
    return emit1("compare", [a, b], {"kind": kind}, loc)


# --------------------------------------------------------------------------- select & casts

def _infer_select(operands, attrs, regions, loc):
    c, a, b = operands
    if c.type != bool_:
        raise CompileError(f"select condition must be bool, not {c.type}", loc,
                           rule="SPIR-V: OpSelect's Condition must be a Boolean scalar",
                           hint="compare to get a bool, e.g. pycoop.select(x > 0, a, b)",
                           rule_id="core.select-condition")
    if a.type != b.type:
        raise CompileError(f"select branches have different types: {a.type} and {b.type}", loc,
                           rule="SPIR-V: OpSelect's Object 1 and Object 2 have the Result Type",
                           hint=f"convert one of them: pycoop.cast(b, {a.type})",
                           rule_id="core.select-types")
    if isinstance(a.type, CoopMatType):
        raise CompileError("select on cooperative matrices is not allowed", loc,
                           hint="use an if/else on a scope-uniform condition",
                           rule="SPV_KHR_cooperative_matrix: OpSelect is not among the instructions that "
                                "take cooperative matrices", rule_id="khr.select-matrix")
    return [a.type]


define("select", _infer_select, pure=True, doc="cond ? a : b, per invocation.")


@emulation("select")
def _emu_select(ctx, op, c, a, b):
    if not isinstance(op.result.type, ScalarType):   # a trailing component axis; known from the
        c = c[..., None]                             # type: a fused loop adds leading axes
    return np.where(c, a, b)


@lowering("select")
def _lower_select(ctx, op):
    ctx.set(op.result, ctx.emit("OpSelect", op.result.type, *(ctx.id(v) for v in op.operands)))


def select(cond, a, b) -> Value:
    """`a` where `cond` else `b` (both evaluated)."""
    if not isinstance(cond, Value):
        return a if cond else b
    loc = current_loc()
    a = as_value(a, getattr(b, "type", None))
    b = as_value(b, a.type)
    return emit1("select", [as_value(cond), a, b], {}, loc)


def _cast_opcode(src: ScalarType, dst: ScalarType) -> str:
    if src.is_float and dst.is_float:
        return "OpFConvert"
    if src.is_float:
        return "OpConvertFToS" if dst.signed else "OpConvertFToU"
    if dst.is_float:
        return "OpConvertSToF" if src.signed else "OpConvertUToF"
    if src.bits == dst.bits:
        return "OpBitcast"
    return "OpSConvert" if src.signed else "OpUConvert"


def _infer_cast(operands, attrs, regions, loc):
    src, dst = operands[0].type, attrs["type"]
    if not isinstance(src, ScalarType) or not isinstance(dst, ScalarType):
        raise CompileError(f"cannot cast {src} to {repr(dst) if isinstance(dst, str) else dst}", loc,
                           hint=f"pass the type itself (pycoop.{dst}), not a string"
                           if isinstance(dst, str) else
                           "pycoop.convert converts cooperative matrices",
                           rule="SPIR-V: conversion instructions convert between numeric scalar types of "
                                "the same shape", rule_id="core.cast-types")
    if src.is_bool or dst.is_bool:
        if not (src.is_bool and dst.is_bool):
            raise CompileError(f"cannot cast between bool and {dst if src.is_bool else src}", loc,
                               hint="use pycoop.select(c, 1, 0) or a comparison",
                               rule="SPIR-V: conversion instructions take numeric types; Booleans are made "
                                    "with OpSelect or comparisons", rule_id="core.cast-bool")
    c = constant_value(operands[0])
    if c is not None and src.is_float and dst.is_int:
        # the emulator's report of every invocation, made at the line: the trace fixes the value
        v = float(np.asarray(c, np.float64).astype(src.dtype))
        lo, hi = dst.min_max()
        if not (math.isfinite(v) and lo <= math.trunc(v) <= hi):
            raise provable_ub(f"converting the constant {v!r} to {dst}: the result is undefined",
                               loc, rule="SPIR-V: OpConvertFToS/OpConvertFToU are undefined when "
                                         "the value rounded toward zero does not fit the result "
                                         "type (NaN and infinities included)",
                               hint=f"write a value from {lo} to {hi}, or convert to a wider type")
    return [dst]


define("cast", _infer_cast, pure=True, doc="Scalar numeric conversion (round to nearest even for floats, "
                                "truncation toward zero for float to int, wrap for int to int).")


def convert_array(x: np.ndarray, src: ScalarType, dst: ScalarType) -> np.ndarray:
    """NumPy semantics of SPIR-V numeric conversion, shared by scalar casts and matrices: one
    rounding (to nearest even) into a float type, truncation toward zero into an integer type."""
    if src == dst:
        return x
    if src.is_float and dst.is_int:
        # Out-of-range float to int is undefined in SPIR-V (the caller reports it); the emulator
        # saturates. Bounds compared as exact powers of two: float(2**63 - 1) is 2**63.
        lo, hi = dst.min_max()
        y = np.trunc(x.astype(np.float64))
        inside = (y >= float(lo)) & (y < float(hi + 1))
        r = np.where(inside, y, 0).astype(dst.dtype)
        r = np.where(y >= float(hi + 1), dst.dtype.type(hi), r)
        return np.where(y < float(lo), dst.dtype.type(lo), r)
    if dst.is_float:
        if src.is_float:
            # every float type other than f64 converts exactly to f32
            via = x.astype(np.float64) if src.bits == 64 else x.astype(np.float32)
        elif src.bits == 64 and dst.bits < 64:
            via = _int64_to_f64_odd(x)
        else:
            via = x.astype(np.float64)      # exact (<= 32-bit ints), or the one rounding to f64
        return _round_float(via, dst)
    return x.astype(dst.dtype)      # int -> int: wrap / sign- or zero-extend per source


# Correct rounding without double rounding: a value rounded to odd (truncated, with its lowest
# bit set when anything was cut off) with at least two more bits than the target rounds to the
# target as the exact value would (Boldo & Melquiond, "When double rounding is odd", 2008).

def _round_float(v: np.ndarray, dst: ScalarType) -> np.ndarray:
    """Round `v` (f32, or f64 possibly rounded to odd) to `dst` with one effective rounding."""
    if v.dtype == dst.dtype:
        return v
    with np.errstate(over="ignore", invalid="ignore"):
        if dst.encoding is None or v.dtype == np.float32:
            # NumPy converts f64 -> f32 and f64/f32 -> f16 directly; ml_dtypes f32 -> bf16/fp8
            return v.astype(dst.dtype)
        # ml_dtypes converts f64 to bf16/fp8 through f32: make that first step round to odd
        return _f64_to_f32_odd(v).astype(dst.dtype)


def _int64_to_f64_odd(x: np.ndarray) -> np.ndarray:
    """64-bit integers to f64 rounded to odd (>= 43 significant bits, enough for any narrower
    target): magnitudes >= 2**53 keep their bits from 2**11 up, OR-ing the rest into bit 0."""
    signed = x.dtype == np.int64
    u = x.view(np.uint64) if signed else x
    neg = x < 0 if signed else np.zeros(x.shape, bool)
    m = np.where(neg, np.uint64(0) - u, u)           # |x|, exact for INT64_MIN too
    big = m >= np.uint64(1 << 53)
    y = np.where(big, (m >> np.uint64(11)) | (m & np.uint64(0x7FF) != 0).astype(np.uint64), m)
    f = y.astype(np.float64) * np.where(big, 2048.0, 1.0)
    return np.where(neg, -f, f)


def _f64_to_f32_odd(v: np.ndarray) -> np.ndarray:
    """f64 to f32 rounded to odd (inf and NaN convert as they are)."""
    with np.errstate(over="ignore", invalid="ignore"):
        f = np.asarray(v.astype(np.float32))
    back = f.astype(np.float64)
    inexact = (back != v) & np.isfinite(v)
    bits = f.view(np.uint32)
    bits = np.where(inexact & (np.abs(back) > np.abs(v)), bits - np.uint32(1), bits)  # toward 0
    bits = np.where(inexact, bits | np.uint32(1), bits)
    return bits.astype(np.uint32).view(np.float32)


@emulation("cast")
def _emu_cast(ctx, op, x):
    src, dst = op.operands[0].type, op.attrs["type"]
    if src.is_float and dst.is_int:
        lo, hi = dst.min_max()
        xf = np.trunc(x.astype(np.float64))
        ctx.check_ub(~np.isfinite(xf) | (xf < float(lo)) | (xf >= float(hi + 1)), op,
                     f"converting an out-of-range float to {dst} is undefined",
                     hint=f"clamp the value into {lo}..{hi} first (pycoop.min, pycoop.max)")
    return convert_array(x, src, dst)


def emit_conversion(ctx, src: ScalarType, dst: ScalarType, result_type: Type, value: int) -> int:
    """Emit the conversion of `value` (components `src`) to `result_type` (components `dst`).
    OpUConvert's result must be unsigned: widening/narrowing an unsigned value into a signed
    type converts to the unsigned type of that width, then bitcasts."""
    opname = _cast_opcode(src, dst)
    if opname == "OpUConvert" and dst.signed:
        udst = SCALARS[f"u{dst.bits}"]
        mid = udst if isinstance(result_type, ScalarType) else result_type.with_(component=udst)
        return ctx.emit("OpBitcast", result_type, ctx.emit("OpUConvert", mid, value))
    return ctx.emit(opname, result_type, value)


@lowering("cast")
def _lower_cast(ctx, op):
    src, dst = op.operands[0].type, op.attrs["type"]
    x = op.operands[0]
    if src == f16 and dst in (f32, f64) and f16_from_rounding(x, ctx.merged_sources()):
        wide = widen_f16_bits(ctx, ctx.id(x))
        ctx.set(op.result, wide if dst == f32 else ctx.emit("OpFConvert", dst, wide))
        return
    if src in _WIDE_FLOATS and dst.is_int and dst.bits == 64:
        ctx.set(op.result, int64_from_float_words(ctx, ctx.id(x), src, dst))
        return
    ctx.set(op.result, emit_conversion(ctx, src, dst, dst, ctx.id(x)))


# Floats whose finite values reach 2^32 (f16 and fp8 stay below 2^16: their conversions to
# 64-bit integers are emitted as written).
_WIDE_FLOATS = (f32, f64, bf16)


def int64_from_float_words(ctx, x: int, src: ScalarType, dst: ScalarType) -> int:
    """The conversion of the float `x` (f32, f64 or bf16) to the 64-bit integer type `dst`,
    built from two 32-bit conversions of values in [0, 2^32), so that the low word of the
    result never is the conversion of a float outside the 32-bit range.

    Driver workaround: the NVIDIA driver (580.159.04) folded `f32 -> u64`, clamped by
    min/max/select and then narrowed to 32 bits, into one saturating 32-bit conversion (seed
    301593 of the exact fuzzing campaign: 2^32 -> u64 -> i32 gave -1 instead of 0), also when
    the narrowing took the low word from the value's bits. Built this way, a later narrowing
    keeps (part of) the conversion of `lo` below, which is in range, so a saturating conversion
    gives the same bits. Emitted for every conversion of these floats to 64 bits (the
    conversion cannot know whether a later use narrows it), on every target: 11 instructions
    to u64, 15 to i64, where OpConvertFToU/OpConvertFToS was one.

    With a = |x| (bf16 widened to f32 first, exactly), in the type F = f32 or f64 of x:
      h  = ConvertFToU_u32(a * 2^-32)           h = floor(a / 2^32)
      lo = ConvertFToU_u32(a - F(h) * 2^32)     lo = trunc(a) - h * 2^32
      m  = u64(h) << 32 | u64(lo)               m = trunc(a)
    and the result is m for u64; for i64, m where x >= 0 and 0 - m (mod 2^64) where x < 0.
    Exactness, for a in the defined domain (trunc(x) representable in `dst`, so a < 2^64;
    NaN and infinities are undefined, as the emulator reports):
    - a * 2^-32 is exact where it is normal (a power-of-two scaling); where it is subnormal
      (a < 2^-94 for f32), any rounding of it, or a flush to zero, is in [0, 1). ConvertFToU
      truncates a value in [0, 2^32) (a < 2^64), so h = floor(a / 2^32) < 2^32, in range.
    - F(h) is exact: h is a float of at most 24 (f32) / 53 (f64) significant bits with its
      fraction bits cleared, and * 2^32 is a power-of-two scaling, so y = F(h) * 2^32 is
      exactly h * 2^32 <= a.
    - a - y is exact: if h = 0 it is a; if h >= 1, then y >= 2^32 and y > a - 2^32, so
      a / 2 < y <= a and Sterbenz's lemma applies. It lies in [0, 2^32), so its conversion lo
      = trunc(a - y) = trunc(a) - h * 2^32 is in range (y is an integer).
    - h < 2^32 and lo < 2^32, so m = h * 2^32 + lo = trunc(a), exactly. For i64, trunc(x) is
      -m where x < 0, and 0 - m wraps to it, -2^63 (m = 2^63) included.
    A driver that flushes subnormals gets 0 for a subnormal x, which is trunc(x). Floor is not
    used: lavapipe's f64 rounding goes through 32-bit integers on some CPUs (numerics.md)."""
    ft = f64 if src == f64 else f32
    if src.encoding is not None:                       # bf16 -> f32 is exact
        x = ctx.emit("OpFConvert", ft, x)
    a = ctx.glsl("FAbs", ft, x)
    h = ctx.emit("OpConvertFToU", u32, ctx.emit("OpFMul", ft, a, ctx.const(ft, 2.0 ** -32)))
    y = ctx.emit("OpFMul", ft, ctx.emit("OpConvertUToF", ft, h), ctx.const(ft, 2.0 ** 32))
    lo = ctx.emit("OpConvertFToU", u32, ctx.emit("OpFSub", ft, a, y))
    m = ctx.emit("OpBitwiseOr", u64,
                 ctx.emit("OpShiftLeftLogical", u64, ctx.emit("OpUConvert", u64, h), ctx.const(u32, 32)),
                 ctx.emit("OpUConvert", u64, lo))
    if not dst.signed:
        return m
    neg = ctx.emit("OpFOrdLessThan", bool_, x, ctx.const(ft, 0.0))
    m = ctx.emit("OpSelect", u64, neg, ctx.emit("OpISub", u64, ctx.const(u64, 0), m), m)
    return ctx.emit("OpBitcast", dst, m)


# Ops through which an f16 value keeps the one it was converted from, as far as a compiler that
# moves conversions across them can tell (min/max and select of converted values).
_F16_THROUGH = {"select": None, "binary": ("min", "max"), "unary": ("neg", "abs", "floor",
                                                                     "ceil", "trunc")}


def _scalar(t):
    return t.elem if isinstance(t, VectorType) else t


def _rounds(op) -> bool:
    """Whether a cast op makes f16 values by a rounding conversion."""
    src = _scalar(op.operands[0].type)
    return _scalar(op.results[0].type) == f16 and not (
        src.is_bool or (src.is_int and src.bits <= 8) or src == f16)


# Ops whose result carries the bits of their operands (a component, a reinterpretation, a
# vector of them): an f16 made by one keeps its operands' origin, as far as a driver that
# sees through them could tell
_F16_CARRIED = ("composite.extract", "composite.construct", "bitcast")


def f16_from_rounding(v: Value, merged: dict | None = None) -> bool:
    """Whether the f16 value `v` may come from a conversion that rounds (from f32, f64, bf16 or
    an integer of more than 8 bits), directly or through min/max, select, negation, abs or
    rounding, or carried through vector components, bitcasts and (with `merged`,
    `ir.core.merged_sources` of the module) the values a loop or `if` merges. Values whose
    origin is not traced here (function parameters, results of calls, merged values without
    `merged`) count as such; loads (of scalars or vectors, from buffers, shared memory or
    through block pointers), constants, fma and f16 arithmetic do not.

    Driver workaround: the NVIDIA driver (580.159.04) drops the pair `f32 -> f16 -> f32`
    (OpFConvert twice; seed 300640 of the exact fuzzing campaign: -1.98e17 stayed -1.98e17
    instead of -inf), so such a value is widened by `widen_f16_bits`, which it cannot fold.
    Tracing through components and merges keeps that 13-instruction widening off the f16
    values a kernel loads as vectors and carries through its loops."""
    return _f16_from_rounding(v, {}, merged or {})


def _f16_from_rounding(v: Value, seen: dict, merged: dict) -> bool:
    if id(v) not in seen:             # by identity: == on a Value traces a comparison
        seen[id(v)] = False           # repeats cost nothing (and a value carried around a
        op = v.op                     # loop unchanged keeps its initial value's origin)
        if op is None or op.name in ("loop", "if"):
            seen[id(v)] = id(v) not in merged or any(
                _f16_from_rounding(x, seen, merged) for x in merged[id(v)])
        elif op.name == "cast":
            seen[id(v)] = _rounds(op)
        elif op.name in _F16_CARRIED:
            seen[id(v)] = any(_f16_from_rounding(x, seen, merged) for x in op.operands)
        elif op.name in _F16_THROUGH:
            kinds = _F16_THROUGH[op.name]       # another kind computes a new f16 value
            seen[id(v)] = (kinds is None or op.attrs.get("kind") in kinds) and any(
                _f16_from_rounding(x, seen, merged) for x in op.operands if x.type == v.type)
        else:
            seen[id(v)] = op.name not in ("load", "ptr.load", "const", "fma")
    return seen[id(v)]


def widen_f16_bits(ctx, h: int) -> int:
    """f16 -> f32 from the value's bits, in integer arithmetic (the f16 bits are those of a
    2 x f16 vector whose component 0 is `h`, read as a u32: no 16-bit integer type needed).
    Normal: exponent rebiased (+112), significand shifted by 13; infinity/NaN: exponent 255,
    payload kept; zero/subnormal: 2^-14 + m * 2^-24 minus 2^-14 (exact), sign put back. The
    conversion is exact, so the result is OpFConvert's, on every target; 13 instructions
    where `f16_from_rounding` says a driver could otherwise fold a conversion pair."""
    v2 = VectorType(f16, 2)
    zero = ctx.const(f16, 0.0)
    bits = ctx.emit("OpBitcast", u32, ctx.emit("OpCompositeConstruct", v2, h, zero))

    def c(x: int) -> int:
        return ctx.const(u32, x)
    mag = ctx.emit("OpShiftLeftLogical", u32, ctx.emit("OpBitwiseAnd", u32, bits, c(0x7FFF)), c(13))
    sign = ctx.emit("OpShiftLeftLogical", u32, ctx.emit("OpBitwiseAnd", u32, bits, c(0x8000)), c(16))
    exp = ctx.emit("OpBitwiseAnd", u32, mag, c(0x0F800000))
    normal = ctx.emit("OpIAdd", u32, mag, c(112 << 23))
    special = ctx.emit("OpIAdd", u32, normal, c(112 << 23))
    tiny_f = ctx.emit("OpFSub", f32, ctx.emit("OpBitcast", f32,
                                             ctx.emit("OpIAdd", u32, normal, c(1 << 23))),
                      ctx.const(f32, 2.0 ** -14))
    tiny = ctx.emit("OpBitcast", u32, tiny_f)
    r = ctx.emit("OpSelect", u32, ctx.emit("OpIEqual", bool_, exp, c(0)), tiny, normal)
    r = ctx.emit("OpSelect", u32, ctx.emit("OpIEqual", bool_, exp, c(0x0F800000)), special, r)
    return ctx.emit("OpBitcast", f32, ctx.emit("OpBitwiseOr", u32, r, sign))


def cast(x, type: ScalarType) -> Value:
    """Convert a scalar to `type` (matrices: ops.values.cast)."""
    if isinstance(x, (numbers.Real, np.bool_)) and isinstance(type, ScalarType) and _literal_fits(x, type):
        return as_value(x, type)         # u32(0): a constant of that type, not a converted one
    x = as_value(x)
    if x.type == type:
        return x
    return emit1("cast", [x], {"type": type})


def _literal_fits(x, type: ScalarType) -> bool:
    """Whether the literal is exactly a value of `type`, or a float for an IEEE float type
    (rounded to it as NumPy does); anything else, bf16 and fp8 included, converts as a traced
    value would."""
    if type.is_bool:
        return isinstance(x, (bool, np.bool_))
    if isinstance(x, (bool, np.bool_)):
        return False
    if type.is_int:
        lo, hi = type.min_max()
        return isinstance(x, (int, np.integer)) and lo <= int(x) <= hi
    with np.errstate(over="ignore"):
        return type.encoding is None and (np.isfinite(type.dtype.type(x)) or not np.isfinite(x))


def bitcast(x, type: ScalarType | VectorType) -> Value:
    """Reinterpret the bits of a scalar or vector as another scalar or vector type of the same
    total width (u32 <-> vec2<f16>, vec4<u32> <-> vec8... as OpBitcast allows)."""
    x = as_value(x)
    return emit1("bitcast", [x], {"type": type})


def _bitcast_shape(t) -> tuple[ScalarType, int] | None:
    if isinstance(t, ScalarType):
        return t, 1
    if isinstance(t, VectorType):
        return t.elem, t.count
    return None


def _infer_bitcast(operands, attrs, regions, loc):
    src, dst = operands[0].type, attrs["type"]
    s, d = _bitcast_shape(src), _bitcast_shape(dst)
    if s is None or d is None or s[0].is_bool or d[0].is_bool or src.size != dst.size \
            or max(s[1], d[1]) % min(s[1], d[1]):
        raise CompileError(f"cannot bitcast {src} to {dst}", loc,
                           rule="OpBitcast needs numeric scalars or vectors of the same total width, "
                                "the larger component count a multiple of the smaller",
                           hint="pick a type of the same total width, e.g. u32 and pycoop.vec(f16, 2)",
                           rule_id="core.bitcast-width")
    return [dst]


define("bitcast", _infer_bitcast, pure=True, doc="Bit reinterpretation between same-width scalars and vectors.")


@emulation("bitcast")
def _emu_bitcast(ctx, op, x):
    src, dst = op.operands[0].type, op.attrs["type"]
    x = np.ascontiguousarray(x)
    if isinstance(src, ScalarType):
        x = x[..., None]                 # vectors carry a trailing component axis
    y = x.view(dst.dtype)
    return y[..., 0] if isinstance(dst, ScalarType) else y


@lowering("bitcast")
def _lower_bitcast(ctx, op):
    ctx.set(op.result, ctx.emit("OpBitcast", op.attrs["type"], ctx.id(op.operands[0])))




# --------------------------------------------------------------------------- memory

def _infer_load(operands, attrs, regions, loc):
    mem, idx = operands
    _check_indexable(mem, idx, loc)
    check_readable(mem, loc)
    check_shared_index(mem, idx, loc)
    return [mem.type.elem]


def check_shared_index(mem: Value, idx: Value, loc: Loc) -> None:
    """A shared array's length is known while tracing: an index the IR fixes outside it is
    undefined behaviour in every invocation, reported at the line."""
    i = exact(idx) if isinstance(mem.type, SharedArrayType) else None
    if i is not None and not 0 <= i < mem.type.length:
        raise provable_ub(f"index {i} is outside the shared array of {mem.type.length} "
                           f"elements", loc,
                           rule="Vulkan: an access outside a Workgroup variable is undefined "
                                "(robust buffer access does not cover shared memory)",
                           hint=f"index 0 to {mem.type.length - 1}, or make the array longer")


def _check_indexable(mem: Value, idx: Value, loc: Loc):
    if not isinstance(mem.type, (BufferType, SharedArrayType)):
        raise CompileError(f"cannot index a value of type {mem.type}", loc,
                           rule="pycoop: buffers, shared arrays, arrays and vectors are indexed",
                           hint="index buffers, shared arrays, arrays and vectors",
                           rule_id="core.indexable")
    if not (isinstance(idx.type, ScalarType) and idx.type.is_int):
        raise CompileError(f"index must be an integer, not {idx.type}", loc,
                           hint="cast it, e.g. u32(i)",
                           rule="SPIR-V: OpAccessChain indexes are integer scalars",
                           rule_id="core.index-integer")
    if not isinstance(mem.type.elem, (ScalarType, VectorType)):
        raise CompileError(f"elements of {mem.type} cannot be loaded or stored one by one", loc,
                           hint="buffers of blocks are read by decode functions of "
                                "pycoop.nv.load_tensor",
                           rule="pycoop: elements of a buffer of structs are read through pointer members "
                                "(pycoop.ptr)", rule_id="core.struct-buffer-element")


define("load", _infer_load, bounds=element("load"), doc="buf[i] / shared[i]: load one element.")


def check_readable(mem: Value, loc: Loc):
    if isinstance(mem.type, BufferType) and mem.type.access == "write":
        raise CompileError("cannot read from a write-only buffer", loc,
                           rule="WriteBuffer parameters are not uploaded to the device",
                           hint="annotate the parameter pycoop.Buffer[...] to read and write it",
                           rule_id="core.write-only-read")


def _infer_store(operands, attrs, regions, loc):
    mem, idx, val = operands
    _check_indexable(mem, idx, loc)
    if val.type != mem.type.elem:
        raise CompileError(f"cannot store a {val.type} into an array of {mem.type.elem}", loc,
                           hint=f"cast it: {mem.type.elem}(value)" + python_int_hint(val),
                           rule="SPIR-V: OpStore's Object has the type Pointer points to",
                           rule_id="core.store-type")
    if isinstance(mem.type, BufferType) and mem.type.access == "read":
        raise CompileError("cannot store into a read-only buffer", loc,
                           rule="SPIR-V: NonWritable memory (a ReadBuffer) is not stored to",
                           hint="annotate the parameter pycoop.Buffer[...] to store into it",
                           rule_id="core.read-only-store")
    check_shared_index(mem, idx, loc)
    return []


define("store", _infer_store, writes=0, bounds=element("store"),
       doc="buf[i] = v / shared[i] = v: store one element.")


@emulation("load")
def _emu_load(ctx, op, mem, idx):
    return ctx.memory_of(op.operands[0]).gather(ctx, op, idx)


@emulation("store")
def _emu_store(ctx, op, mem, idx, val):
    ctx.memory_of(op.operands[0]).scatter(ctx, op, idx, val)
    return ()


@lowering("load")
def _lower_load(ctx, op):
    ptr, align = ctx.element_pointer(op.operands[0], op.operands[1])
    ctx.set(op.result, ctx.emit("OpLoad", op.result.type, ptr, *ctx.memory_access(align)))


@lowering("store")
def _lower_store(ctx, op):
    ptr, align = ctx.element_pointer(op.operands[0], op.operands[1])
    ctx.emit("OpStore", None, ptr, ctx.id(op.operands[2]), *ctx.memory_access(align))


# where a negative Python int is given as an index or offset into memory
NEGATIVE_INDEX_HINT = ("a kernel's indexes do not count from the end: write the position from "
                       "the start (n - 1 for the last of n elements)")


def index_value(idx) -> Value:
    """An index or offset into a buffer or shared array: a runtime integer, or a Python int as
    a u32 constant. A Python float is refused even when integral, as Python refuses it as an
    index (`out[2.0]` is a TypeError)."""
    if isinstance(idx, (float, np.floating)):
        raise CompileError(f"an index must be an integer, not the float {idx!r}", current_loc(),
                           hint="write an int (2, not 2.0), or int(x) of a trace-time float",
                           rule="SPIR-V: OpAccessChain indexes are integer scalars",
                           rule_id="core.index-integer")
    return as_value(idx, u32, NEGATIVE_INDEX_HINT)


def load(mem: Value, idx) -> Value:
    loc = current_loc()
    return emit1("load", [mem, index_value(idx)], {}, loc)


def store(mem: Value, idx, val) -> None:
    loc = current_loc()
    val = as_value(val, mem.type.elem if isinstance(mem.type, (BufferType, SharedArrayType)) else None)
    emit("store", [mem, index_value(idx), val], {}, None, loc)


def _infer_shared(operands, attrs, regions, loc):
    return [SharedArrayType(attrs["elem"], attrs["length"])]


define("shared", _infer_shared, doc="A workgroup-shared array (module-level Workgroup variable).")


@emulation("shared")
def _emu_shared(ctx, op):
    return ctx.alloc_shared(op)


@lowering("shared")
def _lower_shared(ctx, op):
    ctx.set(op.result, ctx.shared_variable(op.result.type))


# The shared memory one kernel may declare, in bytes: above the largest
# maxComputeSharedMemorySize of any device (227 KiB on NVIDIA's H100/H200, 160 KiB on AMD's
# MI355X), so that a size no device can run is refused while tracing rather than as an
# encoding error (a length beyond 32 bits) or an allocation failure of the emulator. What a
# given device allows is checked at the launch.
MAX_SHARED_BYTES = 256 * 1024


def shared(elem: ScalarType | VectorType, length: int) -> Value:
    """Allocate an array of `length` elements of `elem` (a numeric scalar, or a numeric vector
    of 2 or 4 components) in workgroup-shared memory."""
    loc = current_loc()
    if not memory_element(elem):
        raise CompileError(f"shared arrays hold numeric scalars or numeric vectors of 2 or 4 "
                           f"components, not {elem!r}", loc,
                           rule="pycoop: shared arrays hold numeric scalars or 2/4-component numeric "
                                "vectors",
                           hint="use a numeric scalar type or pycoop.vec(T, 2) / pycoop.vec(T, 4)",
                           rule_id="core.shared-element")
    check_not_spec(length, "a shared array length", loc)
    if not isinstance(length, numbers.Integral) or isinstance(length, bool) or length <= 0:
        raise CompileError(f"shared array length must be a positive compile-time int, got "
                           f"{length!r}", loc,
                           rule="SPIR-V: OpTypeArray Length must be at least 1 (a constant)",
                           hint="pass a positive Python int (or a pycoop.Const parameter)",
                           rule_id="core.shared-length")
    t = tracer()
    size = int(length) * elem.size
    total = size + sum(v.type.length * v.type.elem.size for v in t.shared)
    if total > MAX_SHARED_BYTES:
        before = f", {total - size} B in the arrays before it" if total > size else ""
        raise CompileError(f"pycoop.shared({elem}, {length}) takes {size} B{before}: more shared "
                           f"memory than any device gives a workgroup", loc,
                           rule=f"pycoop: a kernel's shared arrays take at most "
                                f"{MAX_SHARED_BYTES // 1024} KiB (more than any device's "
                                f"maxComputeSharedMemorySize)",
                           hint="use smaller tiles or reuse one array; a launch also checks the "
                                "device's own limit (Vulkan guarantees 16 KiB, an H100 gives "
                                "227 KiB)", rule_id="core.shared-length")
    if len(t.blocks) != 1:
        raise CompileError("shared arrays must be allocated at the top level of the kernel", loc,
                           hint="move pycoop.shared(...) before any runtime if/for/while",
                           rule="SPIR-V: Workgroup variables are declared at module scope (pycoop: at the "
                                "kernel's top level)", rule_id="core.shared-top-level")
    v = emit1("shared", [], {"elem": elem, "length": int(length)}, loc)
    t.shared.append(v)
    return v


BARRIER_MEMORY = ("workgroup", "device")


def _infer_barrier(operands, attrs, regions, loc):
    return []


define("barrier", _infer_barrier, tangled=True,
       doc="Workgroup execution + memory barrier (OpControlBarrier Workgroup, AcquireRelease; "
           "memory='device': Device memory scope over buffers and shared memory, with "
           "MakeAvailable and MakeVisible).")


@emulation("barrier")
def _emu_barrier(ctx, op):
    ctx.barrier(op)
    return ()


@lowering("barrier")
def _lower_barrier(ctx, op):
    wg = ctx.const(u32, ctx.enum("Scope", "Workgroup"))
    if op.attrs.get("memory", "workgroup") == "workgroup":
        sem = ctx.const(u32, ctx.enum("MemorySemantics", "AcquireRelease|WorkgroupMemory"))
        ctx.emit("OpControlBarrier", None, wg, wg, sem)
        return
    if ctx.target != "vulkan":
        raise CompileError("pycoop.barrier(memory='device') is available in Vulkan kernels only",
                           op.loc, rule="pycoop emits device-scope barriers (Vulkan memory model) "
                                        "for the Vulkan target only",
                           hint="use pycoop.barrier() in kernels with pycoop.intel ops",
                           rule_id="core.barrier-device-vulkan")
    ctx.need("VulkanMemoryModelDeviceScope")
    dev = ctx.const(u32, ctx.enum("Scope", "Device"))
    sem = ctx.const(u32, ctx.enum("MemorySemantics", "AcquireRelease|UniformMemory|"
                                  "WorkgroupMemory|MakeAvailable|MakeVisible"))
    ctx.emit("OpControlBarrier", None, wg, dev, sem)


def barrier(memory: str = "workgroup") -> None:
    """Wait until every invocation of the workgroup reaches this point; make shared-memory
    writes before it visible to reads after it. `memory="device"` also orders buffer
    accesses at device scope: buffer writes of the workgroup before it are made available to
    the whole device, and writes other workgroups made available (for example before a
    release atomic that this workgroup's acquire atomic read) become visible after it: the
    barrier of a "last workgroup finishes the job" pattern, with `pc.atomic.add(...,
    semantics="acq_rel")` on a counter."""
    if memory not in BARRIER_MEMORY:
        raise CompileError(f"pycoop.barrier: memory is 'workgroup' or 'device', got {memory!r}",
                           current_loc(), rule="pycoop: barrier memory scopes are Workgroup and "
                                               "Device",
                           hint="memory='workgroup' orders shared memory, memory='device' buffers too",
                           rule_id="core.barrier-memory")
    emit("barrier", [], {"memory": memory} if memory != "workgroup" else {})


# Methods of values by the class of their type, e.g. layout.slice(...) on tensor layouts;
# op families register theirs here (ops.values looks them up for attribute access).
TYPE_METHODS: dict[type, dict[str, object]] = {}
