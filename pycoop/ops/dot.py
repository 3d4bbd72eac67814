"""Integer dot products of four 8-bit lanes: OpSDot / OpUDot / OpSUDot (SPV_KHR_integer_dot_product,
core in SPIR-V 1.6; Vulkan 1.3's shaderIntegerDotProduct).

`pycoop.dot4x8(a, b)` takes two `vec(i8|u8, 4)` values, or two 32-bit integers holding four
packed 8-bit lanes (PackedVectorFormat4x8Bit: lane i in bits 8i..8i+7), whose lanes are signed
or unsigned as `signed=` says. Four products of 8-bit lanes sum to at most 4 * 255 * 255, so
the 32-bit result is exact: i32 when either operand is signed, u32 when both are unsigned.
This is the building block of 8-bit quantised matrix-vector products (llama.cpp's Q8_0 and
Q4_0 kernels use the same instruction through GLSL's dotPacked4x8EXT).
"""
from __future__ import annotations

import numpy as np

from ..codegen import extensions
from ..errors import CompileError, current_loc
from ..ir.builder import emit1
from ..ir.core import Value
from ..ir.registry import define, emulation, lowering
from ..types import ScalarType, VectorType, i32, u32
from .core import as_value

SPEC = "SPV_KHR_integer_dot_product"
RULE = (f"{SPEC}: Vector 1 and Vector 2 are vectors of four 8-bit integers, or 32-bit integers "
        "with PackedVectorFormat4x8Bit")
extensions.register(extensions.Extension(SPEC, features={
    "DotProduct": "shaderIntegerDotProduct", "DotProductInput4x8Bit": "shaderIntegerDotProduct",
    "DotProductInput4x8BitPacked": "shaderIntegerDotProduct"}))


def _form(t) -> str | None:
    """"vector" for vec(i8|u8, 4), "packed" for a 32-bit integer, None otherwise."""
    if isinstance(t, VectorType) and t.count == 4 and t.elem.is_int and t.elem.bits == 8:
        return "vector"
    if isinstance(t, ScalarType) and t.is_int and t.bits == 32:
        return "packed"
    return None


def _infer(operands, attrs, regions, loc):
    a, b = operands
    forms = {_form(a.type), _form(b.type)}
    if None in forms or len(forms) != 1:
        raise CompileError(f"dot4x8 of {a.type} and {b.type}", loc, rule=RULE,
                           hint="pass two vec(i8 or u8, 4) values, or two u32/i32 values each "
                                "holding four packed 8-bit lanes", rule_id="dot.operand-types")
    return [i32 if any(attrs["signed"]) else u32]


define("dot4x8", _infer, capabilities=("DotProduct",), pure=True,
       doc="Dot product of four 8-bit integer lanes, from vec(i8|u8, 4) or packed in 32-bit "
           "integers (OpSDot, OpUDot, OpSUDot); exact in 32 bits.")


def _lanes(x: np.ndarray, packed: bool, signed: bool) -> np.ndarray:
    """The four 8-bit lanes of `x` as int64, lane on the last axis."""
    if packed:
        u = np.asarray(x).astype(np.uint32)[..., None] >> np.arange(0, 32, 8, dtype=np.uint32)
        lanes = (u & 0xFF).astype(np.int64)
        return np.where(lanes > 127, lanes - 256, lanes) if signed else lanes
    return np.asarray(x).astype(np.int64)        # an i8/u8 vector: its lanes as they are


@emulation("dot4x8")
def _emu(ctx, op, a, b):
    packed = op.attrs["packed"]
    sa, sb = op.attrs["signed"]
    total = (_lanes(a, packed, sa) * _lanes(b, packed, sb)).sum(-1)
    return total.astype(op.result.type.dtype)


@lowering("dot4x8")
def _lower(ctx, op):
    a, b = op.operands
    sa, sb = op.attrs["signed"]
    if sa == sb:
        opname, first, second = ("OpSDot" if sa else "OpUDot"), a, b
    else:                      # OpSUDot: Vector 1 signed, Vector 2 unsigned (the dot commutes)
        opname, first, second = ("OpSUDot", a, b) if sa else ("OpSUDot", b, a)
    extra = []
    if op.attrs["packed"]:
        ctx.need("DotProductInput4x8BitPacked")
        extra = ["PackedVectorFormat4x8Bit"]
    else:
        ctx.need("DotProductInput4x8Bit")
    ctx.set(op.result, ctx.emit(opname, op.result.type, ctx.id(first), ctx.id(second), *extra))


def dot4x8(a, b, *, signed: tuple[bool, bool] | None = None) -> Value:
    """Sum of the products of the four 8-bit lanes of `a` and `b`: `vec(i8|u8, 4)` values
    (lanes signed as their type), or 32-bit integers with four packed lanes (lane i in bits
    8i..8i+7) that are signed as `signed=(a_signed, b_signed)` says (default: as their own
    types). The result is i32, or u32 when both operands are unsigned; it is exact."""
    loc = current_loc()
    a, b = as_value(a, u32), as_value(b, u32)
    packed = _form(a.type) == "packed"
    if signed is None:
        signed = (_elem_signed(a), _elem_signed(b))
    elif not packed:
        raise CompileError("signed= is for packed operands; vector lanes are signed as their "
                           "type (i8 or u8)", loc, rule=RULE,
                           hint="drop signed=, or bitcast the vectors to the lane type you mean",
                           rule_id="dot.signedness")
    elif not isinstance(signed, (tuple, list)) or len(signed) != 2:
        raise CompileError(f"signed= says how each operand's lanes are signed: a pair of bools, "
                           f"not {signed!r}", loc, rule=RULE,
                           hint="e.g. signed=(True, False): a signed, b unsigned",
                           rule_id="dot.signedness")
    return emit1("dot4x8", [a, b], {"packed": packed, "signed": tuple(bool(s) for s in signed)},
                 loc)


def _elem_signed(v: Value) -> bool:
    t = v.type.elem if isinstance(v.type, VectorType) else v.type
    return bool(getattr(t, "signed", False))
