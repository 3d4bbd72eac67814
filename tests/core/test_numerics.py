"""Numerical semantics on the emulator against independent references (Python ints, exact
fractions): integer ops at the extremes of every width, conversions with one rounding,
literal ranges, f64 math, fma, bf16/fp8 matrix arithmetic and the floating-point modes'
SPIR-V (docs/numerics.md)."""
from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pycoop as pc
from pycoop import bf16, f16, f32, f64, fp8_e4m3, fp8_e5m2, i8, i16, i64, u32
from pycoop.ops.core import convert_array, fma_array
from pycoop.runtime.vulkan.capabilities import Capabilities
from pycoop.spirv.tools import validate

from core_helpers import SETTINGS, emu, line_of

sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))
from numerics_cases import (FLOATS, INTS, NARROW, cast_kernel, int_expected,  # noqa: E402
                            int_operands, narrow_expected, narrow_kernel, round_to, run_int_ops,
                            run_narrow, ties, wrap)


# --------------------------------------------------------------------------- integers

@pytest.mark.parametrize("t", INTS, ids=str)
def test_integer_ops_at_the_extremes(t):
    """+ - * // % neg ~ min max << >> abs at INT_MIN/INT_MAX/0/±1 of every width (the
    emulator once took np.abs of INT64_MIN in `//`)."""
    got = run_int_ops(t, "emulator")
    want = int_expected(t, *int_operands(t))
    for name in want:
        assert got[name] == want[name], name


def test_int64_min_floor_division_regression():
    @pc.kernel(workgroup_size=1)
    def k(A: pc.Buffer[i64]):
        A[0] = A[0] // i64(3)
        A[1] = A[1] // i64(2)
        A[2] = A[2] % i64(3)
    a = np.array([-2**63, -2**63, -2**63], np.int64)
    emu(k, 1, a)
    assert a.tolist() == [-3074457345618258602, -2**62, -2]


@pytest.mark.parametrize("t", [i8, i64], ids=str)
def test_int_min_by_minus_one_is_reported_for_remainder_too(t):
    @pc.kernel(workgroup_size=1)
    def k(A: pc.Buffer[t]):
        A[0] = A[0] % A[1]
    with pytest.raises(pc.EmulatorError, match="INT_MIN") as ei:
        emu(k, 1, np.array([t.min_max()[0], -1], t.dtype))
    assert ei.value.loc.line == line_of(k, "A[0] % A[1]")


@pytest.mark.parametrize("src", INTS, ids=str)
@pytest.mark.parametrize("dst", INTS, ids=str)
def test_int_to_int_conversions_wrap(src, dst):
    vals = [v for v in [*src.min_max(), 0, 1, -1, 2, src.min_max()[1] // 2 + 1]
            if src.min_max()[0] <= v <= src.min_max()[1]]
    got = convert_array(np.array(vals, src.dtype), src, dst)
    assert [int(v) for v in got] == [wrap(v, dst) for v in vals]


@pytest.mark.parametrize("src", [f16, f32, f64], ids=str)
@pytest.mark.parametrize("dst", INTS, ids=str)
def test_float_to_int_at_the_bounds(src, dst):
    """Truncation toward zero; the largest float below 2**63 converts exactly; 2**63 and
    beyond are out of range (the emulator once let 2**63 through to i64)."""
    lo, hi = dst.min_max()
    vals = [0.0, -0.0, 0.9, -0.9, 1.5, -1.5, float(lo), np.nextafter(float(hi + 1), 0)]
    with np.errstate(over="ignore"):
        vals = [v for v in vals if lo - 1 < float(src.dtype.type(v)) < hi + 1]
    x = np.array(vals, src.dtype)
    got = convert_array(x, src, dst)
    assert [int(v) for v in got] == [int(float(v)) for v in x]   # Python int() truncates

    @pc.kernel(workgroup_size=1)
    def k(X: pc.ReadBuffer[src], Y: pc.Buffer[dst]):
        Y[0] = dst(X[0])
    for bad in (float(hi + 1), float(lo) - 2.0 ** max(0, lo.bit_length() - 10) - 1, math.inf):
        with np.errstate(over="ignore"):
            if not math.isfinite(float(src.dtype.type(bad))) and math.isfinite(bad):
                continue
        with pytest.raises(pc.EmulatorError, match=f"out-of-range float to {dst}") as ei:
            emu(k, 1, np.array([bad], src.dtype), np.zeros(1, dst.dtype))
        assert ei.value.loc.line == line_of(k, "Y[0] = dst(X[0])")
        assert ei.value.rule_id == "emulator.undefined-behaviour"


@pc.kernel(workgroup_size=1)
def k_constant_to_int(X: pc.Buffer[f32], V: pc.Const, T: pc.Const):
    X[0] = f32(T(V))


@pytest.mark.parametrize("value,t", [(math.nan, pc.i32), (1e10, pc.i32), (-1.5, u32), (128.0, i8),
                                     (2147483647.0, pc.i32),     # rounds to 2**31 in f32
                                     (-math.inf, pc.u64)], ids=str)
def test_a_constant_float_that_no_integer_of_the_type_holds_is_a_compile_error(value, t):
    """A Python float converts as a traced f32 (docs/ops.md, cast): where the trace fixes an
    out-of-range value, the conversion SPIR-V leaves undefined is refused at the line."""
    with pytest.raises(pc.CompileError, match=f"to {t}: the result is undefined") as ei:
        k_constant_to_int.compile(V=value, T=t)
    assert ei.value.line == line_of(k_constant_to_int, "X[0] = f32(T(V))")
    assert ei.value.rule_id == "emulator.undefined-behaviour" and ei.value.hint
    assert "OpConvertFToS" in ei.value.rule


def test_constant_floats_that_fit_convert_by_truncation():
    @pc.kernel(workgroup_size=1)
    def k(X: pc.Buffer[pc.i32], Y: pc.Buffer[u32]):
        X[0], X[1] = pc.i32(-2.7), pc.i32(2147483520.0)
        Y[0] = u32(-0.5)                      # truncates to 0: defined
    x, y = np.zeros(2, np.int32), np.ones(1, np.uint32)
    emu(k, 1, x, y)
    assert x.tolist() == [-2, 2147483520] and y[0] == 0


def test_math_functions_of_python_numbers_compute_as_ieee_floats():
    """On Python numbers pc.floor & co. run in Python; NaN and infinities are returned as the
    GPU's functions give them (math.floor raised), NumPy scalars are taken as floats."""
    assert math.isnan(pc.floor(math.nan)) and pc.ceil(-math.inf) == -math.inf
    assert pc.trunc(np.float32(2.5)) == 2 and pc.floor(10**400) == 10**400
    assert math.isnan(pc.sqrt(-1.0))
    with pytest.raises(pc.CompileError, match="integer literal of 401 digits") as ei:
        pc.exp(10**400)
    assert ei.value.rule_id == "core.float-literal-range"


def _same(got, want) -> bool:
    g, w = float(got), float(want)
    return (math.isnan(g) and math.isnan(w)) or (g == w and math.copysign(1, g) == math.copysign(1, w))


@pytest.mark.parametrize("src", INTS, ids=str)
@pytest.mark.parametrize("dst", FLOATS, ids=str)
def test_int_to_float_rounds_once_at_ties(src, dst):
    """Every integer -> float pair at the integers halfway between two floats (and either
    side): one rounding to nearest even (i64 -> f32 went through f64 before)."""
    lo, hi = src.min_max()
    vals = ties(dst, lo, hi, np.random.default_rng(src.bits + dst.bits))
    if dst == fp8_e4m3:          # no infinity: out-of-range conversion is not IEEE-defined
        vals = [v for v in vals if abs(v) <= 464]
    x = np.array(vals, src.dtype)
    got = convert_array(x, src, dst)
    for v, g in zip(vals, got):
        assert _same(g, round_to(Fraction(v), dst)), (v, float(g))
    if dst in (f16, f32, f64):   # the traced cast gives the same values
        y = np.zeros(len(vals), dst.dtype)
        emu(cast_kernel(src, dst), -(-len(vals) // 64), x, y, len(vals))
        assert y.tobytes() == got.tobytes()


def test_int64_to_f32_regression():
    assert convert_array(np.array([2**60 + 2**36 + 1], np.int64), i64, f32)[0] == 2.0**60 + 2.0**37


def _midpoints(src, dst, rng, n=200):
    """Values of `src` halfway between two neighbouring `dst` values, and the `src` values
    either side of each."""
    fin = ml_dtypes.finfo(dst.dtype)
    base = (rng.standard_normal(n) * 2.0 ** rng.integers(-12, 12, n)).astype(np.float64)
    base = np.clip(base, -float(fin.max) / 2, float(fin.max) / 2)
    lo = convert_array(base, f64, dst).astype(np.float64)
    up = np.nextafter(lo.astype(dst.dtype), np.array(np.inf, dst.dtype)).astype(np.float64) \
        if dst.encoding is None else _next_up(lo, dst)
    mid = ((lo + up) / 2).astype(src.dtype)
    sd = src.dtype.type
    return np.concatenate([mid, np.nextafter(mid, sd(np.inf)), np.nextafter(mid, sd(-np.inf))])


def _next_up(v, t):
    bits = np.asarray(v).astype(t.dtype).view(np.uint8 if t.bits == 8 else np.uint16)
    step = np.where(np.asarray(v) >= 0, 1, -1).astype(bits.dtype)
    return (bits + step).view(t.dtype).astype(np.float64)


@pytest.mark.parametrize("src,dst", [(f64, f32), (f64, f16), (f64, bf16), (f64, fp8_e4m3),
                                     (f64, fp8_e5m2), (f32, f16), (f32, bf16), (f32, fp8_e4m3),
                                     (f32, fp8_e5m2), (f16, fp8_e4m3), (f16, fp8_e5m2)], ids=str)
def test_float_to_narrower_float_rounds_once(src, dst):
    x = _midpoints(src, dst, np.random.default_rng(dst.bits * 7 + src.bits))
    got = convert_array(x, src, dst)
    for v, g in zip(x, got):
        assert _same(g, round_to(Fraction(float(v)), dst)), (float(v), float(g))


# --------------------------------------------------------------------------- literals

def test_float_literal_outside_f16_is_a_compile_error():
    @pc.kernel(workgroup_size=4)
    def k(X: pc.ReadBuffer[f16], Y: pc.Buffer[f16]):
        i = pc.global_invocation_id.x
        Y[i] = X[i] * 70000.0
    with pytest.raises(pc.CompileError) as ei:
        k.compile()
    e = ei.value
    assert "70000.0 is outside the range of f16" in str(e) and "65504" in str(e)
    assert e.loc.line == line_of(k, "70000.0")
    assert e.rule == "a constant must be a value of its type (OpConstant)"
    assert e.rule_id == "core.float-literal-range"
    assert "f16(math.inf)" in e.hint and "f32" in e.hint
    with pytest.raises(pc.CompileError):      # the emulator sees the same error (at tracing)
        emu(k, 1, np.zeros(4, np.float16), np.zeros(4, np.float16))


@pytest.mark.parametrize("t,lit", [(f32, 1e39), (f16, -65520.0), (f64, 1e308)], ids=str)
def test_float_literal_ranges(t, lit):
    @pc.kernel(workgroup_size=1)
    def k(X: pc.Buffer[t]):
        X[0] = X[0] + lit
    with np.errstate(over="ignore"):
        fits = math.isfinite(float(np.array(lit).astype(t.dtype)))
    if fits:
        assert k.compile().spv                # in range (65519 rounds to 65504, 1e308 fits)
        return
    with pytest.raises(pc.CompileError, match="outside the range") as ei:
        k.compile()
    assert ei.value.loc.line == line_of(k, "X[0] + lit")


def test_explicit_infinity_and_rounded_literals_are_accepted():
    @pc.kernel(workgroup_size=1)
    def k(X: pc.Buffer[f16]):
        X[0] = pc.min(X[0] + 65519.0, f16(math.inf))
        X[1] = X[1] * 1e-9                    # underflows to 0: a value of f16, not an error
    x = np.array([1, 1], np.float16)
    emu(k, 1, x)
    assert x.tolist() == [65504.0, 0.0] and k.compile().spv


@pytest.mark.parametrize("t,lit", [(fp8_e4m3, 1000.0), (fp8_e5m2, 1e6), (bf16, 1e39)], ids=str)
def test_narrow_float_literals_are_checked(t, lit):
    M = pc.coopmat[t, pc.Subgroup, 16, 16, pc.Accumulator]

    @pc.kernel(workgroup_size=32)
    def k(X: pc.Buffer[t]):
        pc.store(X, 0, M.fill(lit), 16)
    with pytest.raises(pc.CompileError, match=f"outside the range of {t}") as ei:
        k.compile()
    assert ei.value.loc.line == line_of(k, "M.fill(lit)")


def test_bf16_literal_is_rounded_once():
    """A bf16 fill with a double just above a bf16 halfway point rounds up (a conversion
    through f32 would land on the halfway point and round to even)."""
    M = pc.coopmat[bf16, pc.Subgroup, 16, 16, pc.Accumulator]
    v = 1 + 2.0 ** -8 + 2.0 ** -40

    @pc.kernel(workgroup_size=32)
    def k(X: pc.Buffer[bf16]):
        pc.store(X, 0, M.fill(v), 16)
    x = np.zeros(256, ml_dtypes.bfloat16)
    emu(k, 1, x)
    assert float(x[0]) == 1 + 2.0 ** -7


# --------------------------------------------------------------------------- f64 math

def test_f64_math_that_glsl_allows():
    @pc.kernel(workgroup_size=8)
    def k(X: pc.ReadBuffer[f64], Y: pc.WriteBuffer[f64]):
        i = pc.global_invocation_id.x
        x = X[i]
        Y[i] = pc.abs(x)
        Y[8 + i] = pc.floor(x)
        Y[16 + i] = pc.ceil(x)
        Y[24 + i] = pc.trunc(x)
        Y[32 + i] = pc.sqrt(pc.abs(x))
        Y[40 + i] = pc.rsqrt(pc.abs(x))
        Y[48 + i] = pc.fma(x, x, x)
        Y[56 + i] = pc.min(x, -x)
    x = np.array([-2.5, -0.0, 0.5, 1e300, -1e-310, 3.0, 2.0 ** 53 + 2, 7.25])
    y = np.zeros(64)
    emu(k, 1, x, y)
    a = np.abs(x)
    with np.errstate(divide="ignore"):
        want = [a, np.floor(x), np.ceil(x), np.trunc(x), np.sqrt(a), 1 / np.sqrt(a),
                fma_array(x, x, x), np.minimum(x, -x)]
    np.testing.assert_array_equal(y.reshape(8, 8), np.array(want))
    validate(k.compile().spv, "vulkan1.3")


def test_integral_powers_are_products():
    """`x ** n` for an integral n (1 <= |n| <= 64) multiplies, as Python does: Pow is
    undefined for a negative base (a GPU may give NaN for (-4.0) ** 2); integers take it too;
    another exponent stays Pow."""
    @pc.kernel(workgroup_size=8)
    def k(Y: pc.Buffer[f32], N: pc.Buffer[u32]):
        i = pc.local_invocation_index()
        x = f32(i) - 4.0
        Y[i] = x ** 2 + x ** 3 + (x + 0.5) ** -2 + x ** 5.0
        N[i] = i ** 3
    y, n = np.zeros(8, np.float32), np.zeros(8, np.uint32)
    emu(k, 1, y, n)
    x = np.arange(8, dtype=np.float32) - np.float32(4)
    np.testing.assert_array_equal(y, x * x + x * x * x + 1 / ((x + 0.5) * (x + 0.5))
                                  + x * x * x * x * x)
    np.testing.assert_array_equal(n, np.arange(8, dtype=np.uint32) ** 3)
    assert "Pow" not in k.compile().spvasm
    validate(k.compile().spv, "vulkan1.3")

    @pc.kernel(workgroup_size=1)
    def half(Y: pc.Buffer[f32]):
        Y[0] = Y[0] ** 0.5
    assert "Pow" in half.compile().spvasm


def test_power_zero_is_one():
    """x ** 0 is 1 for every x, as in Python: GLSL's Pow(x, 0) is undefined for x <= 0, so it
    is not emitted (and integers, vectors and matrices take it too)."""
    M = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]

    @pc.kernel(workgroup_size=32)
    def k(Y: pc.Buffer[f32], N: pc.Buffer[pc.i32], V: pc.Buffer[pc.vec(f32, 4)], O: pc.Buffer[f32]):
        i = pc.local_invocation_index()
        Y[i] = Y[i] ** 0
        N[i] = N[i] ** 0.0
        V[i] = V[i] ** 0
        pc.store(O, 0, M.load(O, 0, 16) ** 0, 16)
    y = np.array([0.0, -2.0, np.nan, np.inf] * 8, np.float32)
    n, v, o = np.arange(-16, 16, dtype=np.int32), np.zeros((32, 4), np.float32), np.zeros(256, np.float32)
    emu(k, 1, y, n, v, o)
    assert (y == 1).all() and (n == 1).all() and (v == 1).all() and (o == 1).all()
    assert "Pow" not in k.compile().spvasm


@pytest.mark.parametrize("fn,name", [(pc.exp, "Exp"), (pc.log2, "Log2"), (pc.sin, "Sin"),
                                     (lambda x: x ** x, "Pow")], ids=str)
def test_f64_math_that_glsl_restricts(fn, name):
    @pc.kernel(workgroup_size=1)
    def k(X: pc.Buffer[f64]):
        X[0] = fn(X[0])
    with pytest.raises(pc.CompileError, match="not available for f64") as ei:
        k.compile()
    assert ei.value.rule == f"GLSL.std.450 {name}: 16- or 32-bit floats only"
    assert ei.value.rule_id == "core.glsl-16-32-bit"
    assert ei.value.hint == "cast to f32 first"


# --------------------------------------------------------------------------- fma

def _fma_ref(a, b, c, t):
    a, b, c = float(a), float(b), float(c)
    if math.isfinite(a) and math.isfinite(b):
        if not math.isfinite(c):
            return c                    # a finite product cannot cancel an infinity
        x = Fraction(a) * Fraction(b) + Fraction(c)
        if x != 0:
            return round_to(x, t)
    with np.errstate(all="ignore"):   # infinities, NaN, exact zeros: IEEE rules of a*b + c
        return float(np.float64(a) * np.float64(b) + np.float64(c))


@pytest.mark.parametrize("t", [f16, f32, f64], ids=str)
def test_fma_rounds_once(t):
    rng = np.random.default_rng(t.bits)
    n = 3000
    spread = {16: 4, 32: 30, 64: 200}[t.bits]
    a = (rng.standard_normal(n) * 2.0 ** rng.integers(-spread, spread, n)).astype(t.dtype)
    b = (rng.standard_normal(n) * 2.0 ** rng.integers(-spread, spread, n)).astype(t.dtype)
    c = np.where(rng.random(n) < 0.5, -(a.astype(np.float64) * b), rng.standard_normal(n)).astype(t.dtype)
    # integers of many bits: products land exactly on halfway points of the type
    k = {16: 6, 32: 13, 64: 27}[t.bits]
    a[:300] = (rng.integers(1, 2 ** k, 300) | 1)
    b[:300] = (rng.integers(1, 2 ** k, 300) | 1)
    c[:300] = rng.choice([-1, 1, 2 ** -k, -(2.0 ** -k)], 300)
    specials = np.array([[np.inf, 0, 1], [1, 2, -np.inf], [-0.0, 5, 0.0], [0.0, -5, -0.0],
                         [np.nan, 1, 1]], t.dtype)
    a, b, c = (np.concatenate([v, specials[:, j]]) for j, v in enumerate((a, b, c)))
    got = fma_array(a, b, c)
    for x, y, z, g in zip(a, b, c, got):
        assert _same(g, _fma_ref(x, y, z, t)), (x, y, z, g)


def test_fma_f64_large_and_cancelling():
    big = np.finfo(np.float64).max
    a = np.array([big, 1e308, 2.0 ** 600, 1 + 2.0 ** -52, 3.0])
    b = np.array([2.0, 10.0, 2.0 ** 500, 1 - 2.0 ** -52, 1.0 / 3])
    c = np.array([-big, -np.inf, -1e300, -1.0, -1.0])
    got = fma_array(a, b, c)
    for x, y, z, g in zip(a, b, c, got):
        assert _same(g, _fma_ref(x, y, z, f64)), (x, y, z, g)


def test_fma_types_and_python_numbers():
    assert pc.fma(2, 3, 1) == 7 and pc.fma(2.0, 3.0, 1.0) == 7.0
    assert pc.fma(0.1, 10.0, -1.0) == 2.0 ** -54          # 0.1 * 10.0 - 1.0 is 0.0

    @pc.kernel(workgroup_size=1)
    def k(X: pc.Buffer[i16]):
        X[0] = pc.fma(X[0], X[0], X[0])
    with pytest.raises(pc.CompileError, match="pycoop.fma is not defined on i16") as ei:
        k.compile()
    assert ei.value.loc.line == line_of(k, "pc.fma(X[0]")
    assert ei.value.rule.startswith("GLSL.std.450 Fma")
    assert ei.value.rule_id == "core.fma-float"


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_fma_kernel_on_vectors_of_f32(seed):
    rng = np.random.default_rng(seed)
    V = pc.vec(f32, 4)

    @pc.kernel(workgroup_size=4)
    def k(A: pc.ReadBuffer[V], B: pc.ReadBuffer[V], C: pc.Buffer[V]):
        i = pc.global_invocation_id.x
        C[i] = pc.fma(A[i], B[i], C[i])
    a, b, c = (rng.standard_normal(16).astype(np.float32) for _ in range(3))
    want = fma_array(a, b, c)
    emu(k, 1, a, b, c)
    assert c.tobytes() == want.tobytes()


# --------------------------------------------------------------------------- narrow negation

@pytest.mark.parametrize("t", NARROW, ids=str)
def test_narrow_results_wrap(t):
    assert run_narrow(t, "emulator") == narrow_expected(t)


def test_narrow_arithmetic_is_lowered_in_32_bits():
    asm = narrow_kernel(i8).compile().spvasm
    for op in ("OpSNegate", "OpIAdd", "OpISub", "OpIMul"):
        assert f"{op} %int " in asm and f"{op} %char" not in asm, op
    assert "OpShiftRightArithmetic %int" in asm and "OpShiftLeftLogical %char" in asm
    asm = narrow_kernel(pc.u16).compile().spvasm       # unsigned: as written
    assert "OpIAdd %ushort" in asm and "OpSNegate %ushort" in asm


# --------------------------------------------------------------------------- bf16 / fp8 matrices

@pytest.mark.parametrize("t", [bf16, fp8_e4m3, fp8_e5m2], ids=str)
def test_narrow_float_matrix_arithmetic_goes_through_f32(t):
    M = pc.coopmat[t, pc.Subgroup, 16, 16, pc.Accumulator]

    @pc.kernel(workgroup_size=32)
    def k(X: pc.ReadBuffer[t], Y: pc.ReadBuffer[t], O: pc.WriteBuffer[t]):
        a = M.load(X, 0, 16)
        b = M.load(Y, 0, 16)
        pc.store(O, 0, a + b, 16)
        pc.store(O, 256, a - b, 16)
        pc.store(O, 512, a * b, 16)
        pc.store(O, 768, a / b, 16)
        pc.store(O, 1024, -a, 16)
        pc.store(O, 1280, a * t(1.5), 16)
        pc.store(O, 1536, a * 3.0 + M.fill(0.5) - M.zeros(), 16)   # constants of the type
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(256) * 4).astype(t.dtype)
    y = (rng.standard_normal(256) * 4 + 0.25).astype(t.dtype)
    o = np.zeros(1792, t.dtype)
    emu(k, 1, x, y, o)
    xf, yf = x.astype(np.float32), y.astype(np.float32)
    r = (xf * np.float32(3)).astype(t.dtype).astype(np.float32)
    with np.errstate(all="ignore"):
        want = [xf + yf, xf - yf, xf * yf, xf / yf, -xf, xf * np.float32(1.5),
                (r + np.float32(0.5)).astype(t.dtype).astype(np.float32)]
    want = np.concatenate([w.astype(np.float32).astype(t.dtype) for w in want])
    assert o.view(np.uint8).tobytes() == want.view(np.uint8).tobytes()
    ck = k.compile()
    validate(ck.spv, "vulkan1.3")
    asm = ck.spvasm
    assert "OpFAdd %" in asm and "OpFConvert" in asm


def test_length_of_a_non_matrix_type_is_a_compile_error():
    @pc.kernel(workgroup_size=32)
    def k(X: pc.Buffer[u32]):
        X[0] = pc.length(u32)
    with pytest.raises(pc.CompileError, match="takes a cooperative matrix type") as ei:
        k.compile()
    assert ei.value.loc.line == line_of(k, "pc.length(u32)")
    assert ei.value.rule.startswith("OpCooperativeMatrixLengthKHR")
    assert ei.value.rule_id == "khr.length-type"


# --------------------------------------------------------------------------- floating-point modes

def _fp_kernel(fp):
    @pc.kernel(workgroup_size=8, fp=fp)
    def fp_mode(A: pc.ReadBuffer[f16], B: pc.Buffer[f32], C: pc.Buffer[f64]):
        i = pc.global_invocation_id.x
        B[i] = f32(A[i] + A[i] * A[i]) * B[i] - B[i] / f32(3)
        C[i] = pc.fma(C[i], C[i], C[i])
    return fp_mode


def test_exact_mode_spirv():
    ck = _fp_kernel("exact").compile()
    asm = ck.spvasm
    arith = [ln.split("=")[0].strip() for ln in asm.splitlines()
             if any(f" {o} " in ln for o in ("OpFAdd", "OpFSub", "OpFMul", "OpFDiv"))]
    assert len(arith) == 5
    for rid in arith:
        assert f"OpDecorate {rid} NoContraction" in asm
    for w in (16, 32, 64):
        assert f"SignedZeroInfNanPreserve {w}" in asm and f"RoundingModeRTE {w}" in asm
        assert f"DenormPreserve {w}" not in asm
    assert "OpCapability SignedZeroInfNanPreserve" in asm and "Fma" in asm
    assert ck.requirements["fp"] == "exact"
    assert "shaderSignedZeroInfNanPreserveFloat16" in ck.requirements["float_controls"]
    assert "fp=exact" in ck.ir


def test_strict_and_fast_mode_spirv():
    strict = _fp_kernel("strict").compile()
    assert all(f"DenormPreserve {w}" in strict.spvasm for w in (16, 32, 64))
    fast = _fp_kernel("fast").compile()
    assert "NoContraction" not in fast.spvasm and "SignedZeroInfNanPreserve" not in fast.spvasm
    assert fast.requirements["float_controls"] == []


def test_default_mode_is_exact():
    @pc.kernel(workgroup_size=1)
    def k(X: pc.Buffer[f32]):
        X[0] = X[0] * X[0] + X[0]
    assert k.fp == "exact" and "NoContraction" in k.compile().spvasm


def test_unknown_fp_mode_is_a_compile_error():
    with pytest.raises(pc.CompileError, match="fp='precise'") as ei:
        @pc.kernel(workgroup_size=1, fp="precise")
        def k(X: pc.Buffer[f32]):
            X[0] = X[0]
    assert ei.value.loc.line == line_of(test_unknown_fp_mode_is_a_compile_error, 'fp="precise"')
    assert "exact" in ei.value.rule
    assert ei.value.rule_id == "frontend.fp-mode"


def _caps(**fc):
    props = {f"shader{k}Float{w}": False for k in ("SignedZeroInfNanPreserve", "DenormPreserve",
                                                   "RoundingModeRTE") for w in (16, 32, 64)}
    props.update(fc)
    return Capabilities("test", "NVIDIA", "", "1.3", "discrete", float_controls=props)


def _float_controls(requirements):
    return {"float_controls": requirements["float_controls"], "fp": requirements["fp"]}


def test_device_float_controls_are_checked():
    # the H100's properties: signed zeros and RTE everywhere, denormals kept for f16 only
    h100 = _caps(**{f"shader{k}Float{w}": True for k in ("SignedZeroInfNanPreserve",
                                                         "RoundingModeRTE") for w in (16, 32, 64)},
                 shaderDenormPreserveFloat16=True)
    exact, strict, fast = (_float_controls(_fp_kernel(m).compile().requirements)
                           for m in ("exact", "strict", "fast"))
    assert h100.missing(exact) == [] and h100.missing(fast) == []
    (why,) = h100.missing(strict)
    assert "shaderDenormPreserveFloat32, shaderDenormPreserveFloat64" in why
    assert 'fp="strict"' in why and "Float16" not in why
    assert _caps().missing(fast) == []
    assert "shaderRoundingModeRTEFloat64" in _caps().missing(exact)[0]
    unprobed = Capabilities("test", "NVIDIA", "", "1.3", "discrete")
    assert unprobed.missing(strict) == []


@pytest.mark.parametrize("t", INTS, ids=str)
def test_shift_by_the_width_is_reported(t):
    @pc.kernel(workgroup_size=1)
    def k(A: pc.Buffer[t]):
        A[0] = A[0] << A[1]
    emu(k, 1, np.array([1, t.bits - 1], t.dtype))
    with pytest.raises(pc.EmulatorError, match=f"shifting a {t.bits}-bit integer") as ei:
        emu(k, 1, np.array([1, t.bits], t.dtype))
    assert ei.value.loc.line == line_of(k, "A[0] << A[1]")


def test_narrow_vector_negation_wraps():
    V = pc.vec(i8, 4)

    @pc.kernel(workgroup_size=2)
    def k(A: pc.Buffer[V]):
        i = pc.global_invocation_id.x
        A[i] = -A[i] + A[i] * A[i]
    a = np.array([-128, 127, -1, 0, 1, 64, -64, 100], np.int8)
    want = [wrap(-v + v * v, i8) for v in a.tolist()]
    emu(k, 1, a)
    assert a.tolist() == want
    asm = k.compile().spvasm
    assert "OpSNegate %v4int" in asm and "OpSNegate %v4char" not in asm


def test_describe_lists_float_controls():
    text = _caps(shaderSignedZeroInfNanPreserveFloat32=True, shaderRoundingModeRTEFloat16=True,
                 shaderRoundingModeRTEFloat64=True).describe()
    assert ("float controls: signed zero/inf/nan preserve f32, denorm preserve none, round to "
            "nearest even f16/f64") in text
    assert "float controls" not in Capabilities("test", "NVIDIA", "", "1.3", "discrete").describe()


@pytest.mark.parametrize("t", [bf16, fp8_e4m3], ids=str)
def test_scalar_narrow_float_negation_is_rejected(t):
    @pc.kernel(workgroup_size=1)
    def k(X: pc.Buffer[t]):
        X[0] = -X[0]
    with pytest.raises(pc.CompileError, match=f"negation is not defined on scalar {t}") as ei:
        k.compile()
    assert ei.value.loc.line == line_of(k, "X[0] = -X[0]")
    assert ei.value.hint == "cast to f32 first: -f32(x)"
    assert ei.value.rule_id == "core.narrow-float-arithmetic"


def test_fma_operands_of_different_types_are_a_compile_error():
    @pc.kernel(workgroup_size=1)
    def k(X: pc.Buffer[f32], Y: pc.Buffer[f64]):
        X[0] = pc.fma(X[0], X[0], Y[0])
    with pytest.raises(pc.CompileError, match="pycoop.fma operands have different types") as ei:
        k.compile()
    assert ei.value.loc.line == line_of(k, "pc.fma(X[0], X[0], Y[0])")
    assert ei.value.rule == "GLSL.std.450 Fma: a, b, c and the result have one type"
    assert ei.value.rule_id == "core.fma-types"
    assert ei.value.hint == "convert the operands, e.g. pycoop.cast(x, f32)"


@pytest.mark.parametrize("t", [f16, f32, f64], ids=str)
def test_float_min_max_of_signed_zeros_and_nan(t):
    """IEEE 754-2019 minimumNumber / maximumNumber, as the H100 computes GLSL FMin / FMax."""
    @pc.kernel(workgroup_size=8)
    def k(X: pc.ReadBuffer[t], Y: pc.ReadBuffer[t], O: pc.WriteBuffer[t]):
        i = pc.global_invocation_id.x
        O[i] = pc.min(X[i], Y[i])
        O[8 + i] = pc.max(X[i], Y[i])
    n = np.nan
    x = np.array([0.0, -0.0, n, 1.0, n, -0.0, 2.0, -3.0], t.dtype)
    y = np.array([-0.0, 0.0, 1.0, n, n, -0.0, 2.0, 4.0], t.dtype)
    o = np.zeros(16, t.dtype)
    emu(k, 1, x, y, o)
    mn, mx = o[:8], o[8:]
    assert [str(v) for v in mn.tolist()] == ["-0.0", "-0.0", "1.0", "1.0", "nan", "-0.0", "2.0", "-3.0"]
    assert [str(v) for v in mx.tolist()] == ["0.0", "0.0", "1.0", "1.0", "nan", "-0.0", "2.0", "4.0"]


# --------------------------------------------------------------------------- f16 round trips

@pc.kernel(workgroup_size=64, fp="exact")
def f16_round_trips(A: pc.ReadBuffer[f32], D: pc.ReadBuffer[f64], H: pc.ReadBuffer[f16],
                    L: pc.ReadBuffer[i64], O: pc.Buffer[f32], P: pc.Buffer[f64], n: u32):
    """Each line converts a value that went through f16 back to a wider float (seed 300640 of
    the exact campaign: `cast(cast(cast(i64, f32), f16), f32)` through min)."""
    i = pc.global_invocation_id.x
    if i < n:
        v = pc.cast(A[i], f16)
        O[i] = pc.cast(pc.min(v, v), f32)                             # f32 -> f16 -> f32
        O[n + i] = pc.cast(pc.cast(pc.cast(L[i], f32), f16), f32)     # i64 -> f32 -> f16 -> f32
        O[2 * n + i] = pc.cast(pc.select(A[i] < f32(0.0), -v, pc.abs(v)), f32)
        P[i] = pc.cast(pc.cast(D[i], f16), f64)                       # f64 -> f16 -> f64
        P[n + i] = pc.cast(v, f64)                                    # f32 -> f16 -> f64
        O[3 * n + i] = pc.cast(H[i], f32)                             # a loaded f16: as written


def _round_trip_inputs():
    h = np.arange(65536, dtype=np.uint16).view(np.float16)           # every f16
    extra = np.array([-1.9787828e17, 1e-30, -1e-30, 65519.99, 65520.0, -65520.0, 3e-8, -7e-8,
                      2.0 ** -25, 2.0 ** -24 * 1.5, np.inf, -np.inf, np.nan, 1e38], np.float64)
    with np.errstate(invalid="ignore"):
        a = np.concatenate([h.astype(np.float64), extra])
    n = len(a)
    rng = np.random.default_rng(21)
    ints = rng.integers(-2 ** 63, 2 ** 63 - 1, n, dtype=np.int64, endpoint=True)
    ints[:8] = [-197878283749919095, 65504, 65519, 65520, -65536, 0, 2 ** 62, 1]
    with np.errstate(invalid="ignore", over="ignore"):
        return (a.astype(np.float32), a, np.resize(h, n), ints)


def round_trip_expected(A, D, H, L):
    with np.errstate(over="ignore"):
        v = A.astype(np.float16)
        o = np.concatenate([v.astype(np.float32),
                            L.astype(np.float64).astype(np.float32).astype(np.float16).astype(np.float32),
                            np.where(A < 0, -v, np.abs(v)).astype(np.float32),
                            H.astype(np.float32)])
        p = np.concatenate([D.astype(np.float16).astype(np.float64), v.astype(np.float64)])
    return o, p


def run_round_trips(backend):
    A, D, H, L = _round_trip_inputs()
    n = len(A)
    O, P = np.zeros(4 * n, np.float32), np.zeros(2 * n)
    f16_round_trips[-(-n // 64)](A, D, H, L, O, P, n, backend=backend)
    return O, P


def same_floats(got, want) -> bool:
    """Bit for bit, NaN as NaN."""
    nan = np.isnan(want)
    u = np.dtype(f"u{want.dtype.itemsize}")
    return bool(np.array_equal(np.isnan(got), nan)
                and np.array_equal(got[~nan].view(u), want[~nan].view(u)))


def test_f16_round_trips_round_on_the_emulator():
    """The references: NumPy's one rounding into f16, then exact widening. (The int64 line goes
    through f64 in NumPy, two roundings, but every input is either exact in f64 or far beyond
    f16's range, where both give the same infinity.)"""
    O, P = run_round_trips("emulator")
    want_o, want_p = round_trip_expected(*_round_trip_inputs())
    assert same_floats(O, want_o) and same_floats(P, want_p)
    assert O[len(O) // 4 * 1] == -np.inf            # seed 300640's value overflows f16


def _widenings_of_half(asm: str) -> tuple[int, int]:
    """(OpFConvert instructions taking an f16 operand, f16 values widened from their bits)."""
    types = {}
    count = 0
    for ln in asm.splitlines():
        parts = ln.split()
        if len(parts) >= 4 and parts[1] == "=":
            types[parts[0]] = parts[3]
            if parts[2] == "OpFConvert" and parts[3] in ("%float", "%double") \
                    and types.get(parts[4]) == "%half":
                count += 1
    return count, asm.count("OpCompositeConstruct %v2half")


@pc.kernel(workgroup_size=64, fp="exact")
def f16_exact_sources(B: pc.ReadBuffer[pc.i8], H: pc.ReadBuffer[f16], O: pc.Buffer[f32]):
    i = pc.global_invocation_id.x
    O[i] = pc.cast(pc.cast(B[i], f16), f32) + pc.cast(H[i] + H[i], f32) + pc.cast(f16(1.5), f32)


def test_f16_round_trips_are_widened_from_bits():
    """Driver workaround (docs/numerics.md): an f16 that may come from a rounding conversion is
    widened from its bits with integer instructions, so no OpFConvert pair `wide -> f16 ->
    wide` is left for a driver to fold; an f16 loaded from memory, the result of f16
    arithmetic, or one converted from an 8-bit integer (exact) is widened by OpFConvert."""
    ck = f16_round_trips.compile()
    validate(ck.spv)
    assert _widenings_of_half(ck.spvasm) == (1, 5)        # H[i]; the five round trips
    assert "OpConvertFToU" not in ck.spvasm and "OpShiftLeftLogical %uint" in ck.spvasm
    assert _widenings_of_half(f16_exact_sources.compile().spvasm) == (3, 0)
    fast = pc.kernel(workgroup_size=64, fp="fast")(f16_round_trips.fn)
    assert _widenings_of_half(fast.compile().spvasm) == (1, 5)     # every mode


V4H = pc.vec(f16, 4)


@pc.kernel(workgroup_size=64)
def f16_carried_sources(X: pc.ReadBuffer[V4H], U: pc.ReadBuffer[pc.u32], F: pc.ReadBuffer[f32],
                        O: pc.Buffer[f32], n: pc.u32):
    """Loaded f16 (a vector's component, bits from a u32, a vector carried by a loop) and
    rounded f16 (a component of a vector made of converted values, through two bitcasts,
    carried by a loop, merged by an if)."""
    i = pc.global_invocation_id.x
    v = X[i]
    acc = pc.cast(v[1], f32)                                           # exact: OpFConvert
    acc = acc + pc.cast(pc.bitcast(U[i], pc.vec(f16, 2))[1], f32)      # exact
    rounded = pc.make_vector([pc.cast(F[i], f16), f16(0.0), f16(1.0), f16(2.0)])
    acc = acc + pc.cast(rounded[0], f32)                               # rounded: from bits
    back = pc.bitcast(pc.bitcast(rounded, pc.vec(pc.u32, 2)), V4H)
    acc = acc + pc.cast(back[0], f32)                                  # rounded: from bits
    cur = [X[i]]
    r = [pc.cast(F[i] * 2.0, f16)]
    for j in pc.range(0, n):
        acc = acc + pc.cast(cur[0][2], f32)                            # loaded, carried: exact
        acc = acc + pc.cast(r[0], f32)                                 # rounded, carried: bits
        cur[0] = X[i + j]
        r[0] = pc.cast(F[i + j], f16)
    h = X[i][0]
    if F[i] > 0.0:
        h = pc.cast(F[i], f16)
    O[i] = acc + pc.cast(h, f32)                                       # merged with a rounded


def test_f16_origins_are_traced_through_components_bitcasts_and_merges():
    """The driver workaround widens from bits only the f16 values that may come from a
    rounding conversion: an f16 loaded as part of a vector, read from loaded bits, or carried
    through a loop, or through a block pointer (Q4_K's decode function) keeps OpFConvert;
    rounded ones stay widened from their bits through
    vector components, bitcasts, loop-carried values and if-merges. The emulator agrees with
    NumPy either way (the widening is exact)."""
    ck = f16_carried_sources.compile()
    validate(ck.spv)
    assert _widenings_of_half(ck.spvasm) == (3, 4)
    from pycoop.kernels import gemm_q4_k          # f16 scales loaded through block pointers
    assert _widenings_of_half(gemm_q4_k().compile().spvasm) == (2, 0)
    rng = np.random.default_rng(3)
    X = rng.standard_normal((64 + 3, 4)).astype(np.float16)
    U = rng.standard_normal((64, 2)).astype(np.float16).view(np.uint32).reshape(64)
    F = (rng.standard_normal(64 + 3) * 1e3).astype(np.float32)        # rounded, in range
    F[::5] *= -1.0
    O = np.zeros(64, np.float32)
    n = 3
    f16_carried_sources[1](X, U, F, O, n, backend="emulator")
    h = lambda a: a.astype(np.float16).astype(np.float32)                # noqa: E731
    i = np.arange(64)
    want = X[i, 1].astype(np.float32) + U.view(np.float16).reshape(64, 2)[:, 1].astype(np.float32)
    want = want + h(F[i]) + h(F[i])
    for j in range(n):
        want = want + (X[i, 2] if j == 0 else X[i + j - 1, 2]).astype(np.float32)
        want = want + (h(F[i] * np.float32(2.0)) if j == 0 else h(F[i + j - 1]))
    want = want + np.where(F[i] > 0, h(F[i]), X[i, 0].astype(np.float32))
    np.testing.assert_allclose(O, want, rtol=1e-5)


@pytest.mark.vulkan
def test_f16_round_trips_on_vulkan():
    """The emitted widening on a Vulkan device (lavapipe in CI), bit for bit against the
    references over every f16 and the values around f16's range."""
    try:
        O, P = run_round_trips("vulkan")
    except pc.BackendUnavailable as e:
        pytest.skip(str(e))
    want_o, want_p = round_trip_expected(*_round_trip_inputs())
    assert same_floats(O, want_o) and same_floats(P, want_p)


@pc.kernel(workgroup_size=64)
def _narrowings(F: pc.ReadBuffer[pc.f32], A: pc.ReadBuffer[pc.u64], O: pc.WriteBuffer[pc.i32],
                P: pc.WriteBuffer[pc.u16], Q: pc.WriteBuffer[pc.i64], H: pc.ReadBuffer[f16]):
    i = pc.global_invocation_id.x
    w = pc.cast(pc.min(pc.max(F[i], pc.f32(0.0)), pc.f32(1e18)), pc.u64)
    c = pc.select(F[i] == F[i], pc.max(w, pc.u64(3)), pc.u64(0))   # a clamp of the converted value
    O[i] = pc.cast(c, pc.i32)                                         # narrowings: OpUConvert
    P[i] = pc.cast(c, pc.u16)
    O[64 + i] = pc.cast(A[i], pc.i32)
    Q[i] = pc.cast(pc.f64(F[i]) * -3.0, pc.i64)                       # f64 -> i64
    Q[64 + i] = pc.cast(H[i], pc.i64)                                 # f16: one OpConvertFToS


def test_float_to_64_bit_integers_are_built_from_two_32_bit_conversions():
    """Driver workaround (docs/numerics.md): f32/f64 -> u64/i64 is built from the 32-bit
    conversions of floor(|x| / 2^32) and of the rest (ops.core.int64_from_float_words), so
    that a later narrowing keeps an in-range conversion, which the NVIDIA driver cannot turn
    into a saturating one; narrowings are OpUConvert/OpSConvert, and f16 (below 2^16)
    converts with one instruction. The values: against NumPy's truncation."""
    from pycoop.spirv import reader
    spv = _narrowings.compile().spv
    validate(spv)
    asm = _narrowings.compile().spvasm
    types = {}
    conversions = []
    for ln in asm.splitlines():
        parts = ln.split()
        if len(parts) >= 5 and parts[1] == "=":
            types[parts[0]] = parts[3]
            if parts[2] in ("OpConvertFToU", "OpConvertFToS"):
                conversions.append((parts[2], parts[3], types.get(parts[4])))
    # two 32-bit conversions for each f32/f64 -> 64-bit one, one for the f16 -> i64
    assert sorted(conversions) == sorted(
        [("OpConvertFToU", "%uint", "%float")] * 2 + [("OpConvertFToU", "%uint", "%double")] * 2
        + [("OpConvertFToS", "%long", "%half")]), conversions
    ops = [name for name, _ in reader.instructions(spv)]
    assert ops.count("OpUConvert") == 3 + 2 * 2   # c -> i32, c -> u16, A -> i32; two words each
    f = np.array([0.5, 4294967296.0, 2.0 ** 40 + 2.0 ** 20, np.nan] * 16, np.float32)
    a = np.array([2 ** 32 + 5, 2 ** 63 + 2 ** 31, 7, 2 ** 64 - 1] * 16, np.uint64)
    h = np.array([-65504.0, -0.75, 3.5, 65504.0] * 16, np.float16)
    o, p, q = np.zeros(128, np.int32), np.zeros(64, np.uint16), np.zeros(128, np.int64)
    f_ok = np.where(np.isnan(f), 1.0, f).astype(np.float32)   # NaN -> i64 is undefined
    _narrowings[1](f_ok, a, o, p, q, h, backend="emulator")
    w = np.minimum(np.maximum(f_ok, 0), 1e18).astype(np.uint64)
    c = np.maximum(w, 3).astype(np.uint64)
    assert o[:64].tolist() == c.astype(np.uint32).view(np.int32).tolist()
    assert p.tolist() == c.astype(np.uint16).tolist()
    assert o[64:].tolist() == a.astype(np.uint32).view(np.int32).tolist()
    assert q[:64].tolist() == np.trunc(f_ok.astype(np.float64) * -3.0).astype(np.int64).tolist()
    assert q[64:].tolist() == np.trunc(h.astype(np.float64)).astype(np.int64).tolist()


@pc.kernel(workgroup_size=64)
def _bf16_to_int64(A: pc.ReadBuffer[pc.bf16], B: pc.ReadBuffer[pc.bf16], O: pc.WriteBuffer[pc.u64],
                   P: pc.WriteBuffer[pc.i64]):
    i = pc.global_invocation_id.x
    O[i] = pc.cast(A[i], pc.u64)
    P[i] = pc.cast(B[i], pc.i64)


def test_bf16_to_64_bit_integers_are_widened_then_built_from_two_conversions():
    """bf16 reaches 2^32 too: widened to f32 (exact), then converted as an f32 is."""
    ck = _bf16_to_int64.compile()
    validate(ck.spv)
    convs = [ln.split()[2:4] for ln in ck.spvasm.splitlines() if "Convert" in ln]
    assert convs.count(["OpFConvert", "%float"]) == 2
    assert convs.count(["OpConvertFToU", "%uint"]) == 4 and ["OpConvertFToS", "%long"] not in convs
    a = np.array([1.5e18, 3.3e15, 2.0 ** 40 + 2.0 ** 33, 0.5, 0.0, 2.0 ** 63 - 2.0 ** 55, 255.0, 1.0]
                 * 8, ml_dtypes.bfloat16)
    o, p = np.zeros(64, np.uint64), np.zeros(64, np.int64)
    _bf16_to_int64[1](a, -a, o, p, backend="emulator")
    assert o.tolist() == [int(float(x)) for x in a]
    assert p.tolist() == [-int(float(x)) for x in a]


def test_i64_comparisons_of_extended_i32_with_literals_are_emitted_in_i32():
    """`i64(x) < i64(8)` is emitted as an i32 comparison (the same result; Mesa 22.3.6
    computes the i64 form wrongly: docs/numerics.md); other i64 comparisons stay i64."""
    import pycoop as pc
    from pycoop import i32, i64

    @pc.kernel(workgroup_size=8)
    def k(A: pc.ReadBuffer[i32], B: pc.ReadBuffer[i64], O: pc.Buffer[i32]):
        i = pc.local_invocation_index()
        O[i] = pc.select(i64(A[i]) < i64(8), i32(1), i32(0))
        O[i + 8] = pc.select(B[i] < i64(8), i32(1), i32(0))
        O[i + 16] = pc.select(i64(A[i]) < i64(5000000000), i32(1), i32(0))
    lines = [ln.split("=", 1)[1].split() for ln in k.compile().spvasm.splitlines()
             if "OpSLessThan" in ln]
    types = {ln.split("=")[0].strip(): ln.split()[-1] for ln in k.compile().spvasm.splitlines()
             if "OpConstant" in ln and "=" in ln}
    assert [types.get(ln[3]) for ln in lines] == ["8", "8", "5000000000"]
    assert [ln[3].startswith("%int") for ln in lines] == [True, False, False]
