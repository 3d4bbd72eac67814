"""Dequantisation in registers shared by the GEMV kernels (`gemv`, `gemv_planes`): small
integer fields read as f32 without integer-to-float conversions, and f32 dot products."""
from __future__ import annotations

import pycoop as pc
from pycoop import f32

MAGIC = 0x4B000000                       # the bits of 2^23 (f32): OR a small int into its mantissa
TWO23 = 8388608.0


def fields_as_f32(word, offset: float, bits: int = 8, shift: int = 0) -> list:
    """The 4 fields of `bits` bits at bits 8b + shift of `word` (b = 0 ... 3, one per byte),
    as f32 minus `offset`: exact, with no integer conversion (2^23 + v is an f32 whose mantissa
    is v). A field reaching bit 31 needs no mask."""
    out = []
    for b in range(4):
        v = word >> (8 * b + shift)
        if 8 * b + shift + bits < 32:
            v = v & ((1 << bits) - 1)
        out.append(pc.bitcast(v | MAGIC, f32) - (TWO23 + offset))
    return out


def dot(w: list, x: list):
    """sum w[i] * x[i] in f32, as one fused multiply-add chain."""
    s = w[0] * x[0]
    for wi, xi in zip(w[1:], x[1:]):
        s = pc.fma(wi, xi, s)
    return s
