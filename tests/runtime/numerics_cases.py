"""Kernels and independent references for the numerical-semantics tests, shared by
tests/core/test_numerics.py (emulator), tests/runtime/test_vulkan_numerics.py (lavapipe) and
tests/gpu/test_gpu_numerics.py (GPU).

The references are written from the SPIR-V and IEEE 754 texts with Python ints and
fractions, not with NumPy, so they do not share the emulator's code paths.
"""
from __future__ import annotations

from fractions import Fraction
from functools import cache

import numpy as np

import pycoop as pc
from pycoop import u32

INTS = (pc.i8, pc.i16, pc.i32, pc.i64, pc.u8, pc.u16, pc.u32, pc.u64)
IEEE = (pc.f16, pc.f32, pc.f64)
FLOATS = (pc.f16, pc.bf16, pc.f32, pc.f64, pc.fp8_e4m3, pc.fp8_e5m2)

# --------------------------------------------------------------------------- integers


def wrap(v: int, t) -> int:
    """`v` reduced to `t`'s width, two's complement for signed types."""
    v &= (1 << t.bits) - 1
    return v - (1 << t.bits) if t.signed and v >> (t.bits - 1) else v


def trunc_div(a: int, b: int) -> int:
    """OpSDiv / OpUDiv: the quotient rounded toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


# name -> (reference on Python ints, whether signed types only)
INT_OPS = {
    "add": (lambda t, a, b, d, s: wrap(a + b, t), False),
    "sub": (lambda t, a, b, d, s: wrap(a - b, t), False),
    "mul": (lambda t, a, b, d, s: wrap(a * b, t), False),
    "div": (lambda t, a, b, d, s: wrap(trunc_div(a, d), t), False),        # OpSDiv / OpUDiv
    "rem": (lambda t, a, b, d, s: wrap(a - d * trunc_div(a, d), t), False),  # OpSRem / OpUMod
    "neg": (lambda t, a, b, d, s: wrap(-a, t), False),                      # OpSNegate wraps
    "not": (lambda t, a, b, d, s: wrap(~a, t), False),
    "min": (lambda t, a, b, d, s: min(a, b), False),
    "max": (lambda t, a, b, d, s: max(a, b), False),
    "shl": (lambda t, a, b, d, s: wrap(a << s, t), False),
    "shr": (lambda t, a, b, d, s: a >> s, False),      # arithmetic for signed, logical unsigned
    "abs": (lambda t, a, b, d, s: wrap(abs(a), t), True),                   # SAbs(INT_MIN) wraps
}


def int_values(t) -> list[int]:
    lo, hi = t.min_max()
    vals = {lo, lo + 1, 0, 1, 2, 3, hi - 1, hi, hi // 2, hi // 2 + 1}
    if t.signed:
        vals |= {-1, -2, -3, lo // 2}
    return sorted(vals)


def int_operands(t):
    """Every pair of extreme values: a, b, the divisor d (b, or 1 where a / b is undefined:
    b == 0, INT_MIN / -1) and a shift amount s in [0, bits)."""
    lo = t.min_max()[0]
    vals = int_values(t)
    pairs = [(a, b) for a in vals for b in vals]
    a = [p[0] for p in pairs]
    b = [p[1] for p in pairs]
    d = [1 if y == 0 or (t.signed and x == lo and y == -1) else y for x, y in pairs]
    s = [(i * 7) % t.bits for i in range(len(pairs))]
    s[:2] = [0, t.bits - 1]
    return a, b, d, s


@cache
def int_kernel(t):
    """Every integer op of INT_OPS on A, B (D the divisor, S the shift), op k into O[k*n + i]."""
    signed = t.signed

    @pc.kernel(workgroup_size=64)
    def int_ops(A: pc.ReadBuffer[t], B: pc.ReadBuffer[t], D: pc.ReadBuffer[t],
                S: pc.ReadBuffer[t], O: pc.WriteBuffer[t], n: u32):
        i = pc.global_invocation_id.x
        if i < n:
            a, b, d, s = A[i], B[i], D[i], S[i]
            O[i] = a + b
            O[n + i] = a - b
            O[u32(2) * n + i] = a * b
            O[u32(3) * n + i] = a // d
            O[u32(4) * n + i] = a % d
            O[u32(5) * n + i] = -a
            O[u32(6) * n + i] = ~a
            O[u32(7) * n + i] = pc.min(a, b)
            O[u32(8) * n + i] = pc.max(a, b)
            O[u32(9) * n + i] = a << s
            O[u32(10) * n + i] = a >> s
            if signed:
                O[u32(11) * n + i] = pc.abs(a)
    return int_ops


def int_expected(t, a, b, d, s) -> dict[str, list[int]]:
    return {name: [ref(t, *args) for args in zip(a, b, d, s)]
            for name, (ref, signed_only) in INT_OPS.items() if t.signed or not signed_only}


def run_int_ops(t, backend: str) -> dict[str, list[int]]:
    a, b, d, s = int_operands(t)
    n = len(a)
    arrays = [np.array(v, dtype=t.dtype) for v in (a, b, d, s)]
    out = np.zeros(12 * n, dtype=t.dtype)
    int_kernel(t)[-(-n // 64)](*arrays, out, n, backend=backend)
    names = [k for k, (_, so) in INT_OPS.items() if t.signed or not so]
    return {name: [int(x) for x in out[k * n:(k + 1) * n]] for k, name in enumerate(names)}


# --------------------------------------------------------------------------- narrow wrap

NARROW = (pc.i8, pc.i16, pc.u8, pc.u16)


@cache
def narrow_kernel(t):
    """8/16-bit results that leave the narrow range (-x, ~x + 1, 0 - x, x + y, x - y, x * y,
    x << 1) used by a widening conversion, a comparison, a right shift and min: what the NVIDIA
    driver got wrong for negations (it kept -x of an i8 -128 as +128)."""
    W = pc.i32 if t.signed else u32

    @pc.kernel(workgroup_size=32)
    def narrow_wrap(X: pc.ReadBuffer[t], Y: pc.ReadBuffer[t], O: pc.WriteBuffer[W], n: u32):
        i = pc.global_invocation_id.x
        if i < n:
            x, y = X[i], Y[i]
            for k, v in enumerate([-x, ~x + t(1), t(0) - x, x + y, x - y, x * y, x << t(1)]):
                O[u32(4 * k) * n + i] = W(v)
                O[u32(4 * k + 1) * n + i] = pc.select(v > y, W(1), W(0))
                O[u32(4 * k + 2) * n + i] = W(v >> t(1))
                O[u32(4 * k + 3) * n + i] = W(pc.min(v, y))
    return narrow_wrap


def narrow_operands(t) -> tuple[list[int], list[int]]:
    lo, hi = t.min_max()
    if t.signed:
        return [lo, lo + 1, -1, 0, 1, hi, hi, lo], [0, 5, lo, hi, -1, 1, hi, -1]
    return [0, 1, hi // 2 + 1, hi - 1, hi, 2, hi, 0], [0, 5, hi, 1, 1, hi, hi, 1]


def narrow_expected(t) -> list[int]:
    xs, ys = narrow_operands(t)
    out = []
    for f in (lambda x, y: -x, lambda x, y: ~x + 1, lambda x, y: -x, lambda x, y: x + y,
              lambda x, y: x - y, lambda x, y: x * y, lambda x, y: x << 1):
        v = [wrap(f(x, y), t) for x, y in zip(xs, ys)]
        out += v + [int(a > y) for a, y in zip(v, ys)] + [a >> 1 for a in v] + \
            [min(a, y) for a, y in zip(v, ys)]
    return out


def run_narrow(t, backend: str) -> list[int]:
    xs, ys = narrow_operands(t)
    n = len(xs)
    out = np.zeros(28 * n, np.int32 if t.signed else np.uint32)
    narrow_kernel(t)[1](np.array(xs, t.dtype), np.array(ys, t.dtype), out, n, backend=backend)
    return [int(v) for v in out]


# --------------------------------------------------------------------------- floats

# (significand bits with the hidden one, smallest normal exponent, largest finite, has inf)
FORMATS = {"f16": (11, -14, 65504.0, True), "bf16": (8, -126, float(Fraction(255, 128) * 2**127), True),
           "f32": (24, -126, float((2 - Fraction(1, 2**23)) * 2**127), True),
           "f64": (53, -1022, float((2 - Fraction(1, 2**52)) * 2**1023), True),
           "fp8_e4m3": (4, -6, 448.0, False), "fp8_e5m2": (3, -14, 57344.0, True)}


def round_to(x: Fraction, t) -> float:
    """IEEE round-to-nearest-even of the exact value `x` into the format `t` (as a Python
    float; overflow gives inf, or NaN for a format without infinities)."""
    p, emin, big, has_inf = FORMATS[t.name]
    if x == 0:
        return 0.0
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    q = Fraction(2) ** (max(e, emin) - p + 1)     # the spacing of the format at |x|
    n, rem = divmod(a, q)
    if rem * 2 > q or (rem * 2 == q and n % 2):
        n += 1
    r = n * q
    if r > Fraction(big):
        return (float("inf") if has_inf else float("nan")) * (1 if x > 0 else -1)
    return float(r) if x > 0 else -float(r)


def ties(t, lo: int, hi: int, rng) -> list[int]:
    """Integers in [lo, hi] that are halfway between two neighbours of float type `t`, and the
    integers either side of them (plus the range's ends)."""
    p = FORMATS[t.name][0]
    out = {lo, hi, 0, 1}
    if lo < 0:
        out.add(-1)
    for e in range(p, max(lo.bit_length(), hi.bit_length()) + 1):
        spacing = 1 << (e - p)                 # float spacing in [2**(e-1), 2**e)
        if spacing < 2:
            continue
        for _ in range(3):
            m = int(rng.integers(1 << (p - 1), 1 << p))
            mid = m * spacing + spacing // 2
            for v in (mid - 1, mid, mid + 1, -mid, -mid - 1, -mid + 1):
                if lo <= v <= hi:
                    out.add(v)
    return sorted(out)


@cache
def cast_kernel(src, dst):
    @pc.kernel(workgroup_size=64)
    def cast(X: pc.ReadBuffer[src], Y: pc.WriteBuffer[dst], n: u32):
        i = pc.global_invocation_id.x
        if i < n:
            Y[i] = dst(X[i])
    return cast


def int_ties(src, dst) -> np.ndarray:
    """`ties(dst, ...)` over the whole range of integer type `src`, as an array of `src`."""
    lo, hi = src.min_max()
    return np.array(ties(dst, lo, hi, np.random.default_rng(src.bits * dst.bits)), src.dtype)


def narrowing_ties(src, dst) -> np.ndarray:
    """Values of float type `src` halfway between two neighbours in the narrower `dst`, and the
    `src` values either side of each."""
    rng = np.random.default_rng(dst.bits)
    lo = (rng.standard_normal(500) * 2.0 ** rng.integers(-20, 15, 500)).astype(dst.dtype)
    up = np.nextafter(lo, np.array(np.inf, dst.dtype))
    mid = ((lo.astype(np.float64) + up) / 2).astype(src.dtype)
    sd = src.dtype.type
    return np.concatenate([mid, np.nextafter(mid, sd(np.inf)), np.nextafter(mid, sd(-np.inf))])
