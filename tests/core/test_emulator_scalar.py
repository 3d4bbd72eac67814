"""Element-wise kernels on the NumPy emulator against independent NumPy references, and the
emulator's run-time checks (bounds, division by zero, shifts, races, barriers)."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import pycoop
from pycoop import f16, f32, i32, u32, i8, u8

from core_helpers import SETTINGS, FEW, emu, line_of

WG = 32
DTYPES = {"f32": f32, "f16": f16, "i32": i32, "u32": u32}

# --------------------------------------------------------------------------- kernel factories

_KERNELS = {}


def binary_kernel(t, name, fn):
    """C[i] = fn(A[i], B[i]) for i < n (fn applied to traced values)."""
    key = ("bin", t, name)
    if key not in _KERNELS:
        @pycoop.kernel(workgroup_size=WG)
        def k_binary(A: pycoop.Buffer[t], B: pycoop.Buffer[t], C: pycoop.Buffer[t], n: u32):
            i = pycoop.global_invocation_id.x
            if i < n:
                C[i] = fn(A[i], B[i])
        _KERNELS[key] = k_binary
    return _KERNELS[key]


def unary_kernel(src, dst, name, fn):
    key = ("un", src, dst, name)
    if key not in _KERNELS:
        @pycoop.kernel(workgroup_size=WG)
        def k_unary(A: pycoop.Buffer[src], C: pycoop.Buffer[dst], n: u32):
            i = pycoop.global_invocation_id.x
            if i < n:
                C[i] = fn(A[i])
        _KERNELS[key] = k_unary
    return _KERNELS[key]


def grid_for(n):
    return -(-n // WG)


# --------------------------------------------------------------------------- value strategies

def values(t, n, *, small=False, nonzero=False):
    if t.is_float:
        w = 16 if t == f16 else 32
        lim = 100.0 if small else (60000.0 if t == f16 else float(np.float32(1e30)))
        el = st.floats(-lim, lim, width=w, allow_nan=False, allow_infinity=False)
    else:
        lo, hi = t.min_max()
        if small:
            lo, hi = max(lo, -1000), min(hi, 1000)
        el = st.integers(lo, hi)
    if nonzero:
        el = el.map(lambda x: x if x != 0 else 1)
    return st.lists(el, min_size=n, max_size=n).map(lambda xs: np.array(xs, dtype=t.dtype))


@st.composite
def two_arrays(draw, t, small=False, nonzero_b=False):
    n = draw(st.integers(1, 150))
    a = draw(values(t, n, small=small))
    b = draw(values(t, n, small=small, nonzero=nonzero_b))
    return a, b


def exact_ref(t, a, b, fn):
    """Reference for +, -, *, /: computed exactly (float64 is wide enough to make one rounding
    to f16/f32 correct; integers in Python ints, wrapped)."""
    if t.is_float:
        with np.errstate(all="ignore"):
            return fn(a.astype(np.float64), b.astype(np.float64)).astype(t.dtype)
    bits = t.bits
    out = []
    for x, y in zip(a.tolist(), b.tolist()):
        r = fn(x, y) & ((1 << bits) - 1)
        if t.signed and r >= 1 << (bits - 1):
            r -= 1 << bits
        out.append(r)
    return np.array(out, dtype=np.int64).astype(t.dtype)


ARITH = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y}


# --------------------------------------------------------------------------- arithmetic

@pytest.mark.parametrize("tname", list(DTYPES))
@pytest.mark.parametrize("opname", list(ARITH))
@SETTINGS
@given(data=st.data())
def test_arithmetic_matches_exact_reference(tname, opname, data):
    t = DTYPES[tname]
    a, b = data.draw(two_arrays(t))
    c = np.zeros_like(a)
    emu(binary_kernel(t, opname, ARITH[opname]), grid_for(len(a)), a, b, c, len(a))
    np.testing.assert_array_equal(c, exact_ref(t, a, b, ARITH[opname]))


@pytest.mark.parametrize("tname", ["f32", "f16"])
@SETTINGS
@given(data=st.data())
def test_float_division_is_correctly_rounded(tname, data):
    t = DTYPES[tname]
    a, b = data.draw(two_arrays(t, nonzero_b=True))
    c = np.zeros_like(a)
    emu(binary_kernel(t, "div", lambda x, y: x / y), grid_for(len(a)), a, b, c, len(a))
    np.testing.assert_array_equal(c, exact_ref(t, a, b, lambda x, y: x / y))


def c_div(x, y):
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


def c_rem(x, y):
    return x - c_div(x, y) * y


@pytest.mark.parametrize("tname", ["i32", "u32"])
@SETTINGS
@given(data=st.data())
def test_integer_floordiv_and_mod_truncate_toward_zero(tname, data):
    t = DTYPES[tname]
    a, b = data.draw(two_arrays(t, nonzero_b=True))
    if t.signed:      # INT_MIN / -1 is undefined: keep it out of the random data
        b = np.where((a == np.iinfo(np.int32).min) & (b == -1), 1, b).astype(t.dtype)
    q, r = np.zeros_like(a), np.zeros_like(a)
    emu(binary_kernel(t, "fdiv", lambda x, y: x // y), grid_for(len(a)), a, b, q, len(a))
    emu(binary_kernel(t, "mod", lambda x, y: x % y), grid_for(len(a)), a, b, r, len(a))
    np.testing.assert_array_equal(q, exact_ref(t, a, b, c_div))
    np.testing.assert_array_equal(r, exact_ref(t, a, b, c_rem))


def test_signed_division_of_negative_operands_is_c_like():
    a = np.array([7, -7, 7, -7, -1, 1, -9, 9, 0], np.int32)
    b = np.array([2, 2, -2, -2, 5, -5, 4, -4, -3], np.int32)
    q, r = np.zeros_like(a), np.zeros_like(a)
    emu(binary_kernel(i32, "fdiv", lambda x, y: x // y), 1, a, b, q, len(a))
    emu(binary_kernel(i32, "mod", lambda x, y: x % y), 1, a, b, r, len(a))
    assert q.tolist() == [3, -3, -3, 3, 0, 0, -2, -2, 0]
    assert r.tolist() == [1, -1, 1, -1, -1, 1, -1, 1, 0]
    assert (q * b + r == a).all()      # the C identity, unlike Python's floor division


def test_float_floordiv_floors_and_mod_is_fmod():
    a = np.array([7.5, -7.5, 7.5, -7.5], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0], np.float32)
    q, r = np.zeros_like(a), np.zeros_like(a)
    emu(binary_kernel(f32, "fdiv", lambda x, y: x // y), 1, a, b, q, 4)
    emu(binary_kernel(f32, "mod", lambda x, y: x % y), 1, a, b, r, 4)
    np.testing.assert_array_equal(q, np.floor(a / b))
    np.testing.assert_array_equal(r, np.fmod(a, b))     # OpFRem: sign of the dividend


@pytest.mark.parametrize("tname", ["i32", "u32"])
def test_integer_division_by_zero_is_reported(tname):
    t = DTYPES[tname]
    a = np.array([1, 2, 3, 4], t.dtype)
    b = np.array([1, 1, 0, 1], t.dtype)
    k = binary_kernel(t, "fdiv", lambda x, y: x // y)
    with pytest.raises(pycoop.EmulatorError, match="division by zero") as ei:
        emu(k, 1, a, b, np.zeros_like(a), 4)
    assert "invocation 2" in str(ei.value)
    with pytest.raises(pycoop.EmulatorError, match="division by zero"):
        emu(binary_kernel(t, "mod", lambda x, y: x % y), 1, a, b, np.zeros_like(a), 4)
    # lanes masked off by `if i < n` may hold a zero divisor
    out = np.zeros_like(a)
    emu(k, 1, a, b, out, 2)
    assert out.tolist() == [1, 2, 0, 0]


def test_int_min_divided_by_minus_one_is_reported():
    a = np.array([np.iinfo(np.int32).min], np.int32)
    b = np.array([-1], np.int32)
    with pytest.raises(pycoop.EmulatorError, match="INT_MIN"):
        emu(binary_kernel(i32, "fdiv", lambda x, y: x // y), 1, a, b, np.zeros_like(a), 1)


# --------------------------------------------------------------------------- comparisons, select

CMPS = {"lt": (lambda x, y: x < y, np.less), "le": (lambda x, y: x <= y, np.less_equal),
        "gt": (lambda x, y: x > y, np.greater), "ge": (lambda x, y: x >= y, np.greater_equal),
        "eq": (lambda x, y: x == y, np.equal), "ne": (lambda x, y: x != y, np.not_equal)}


@pytest.mark.parametrize("tname", list(DTYPES))
@pytest.mark.parametrize("cmp", list(CMPS))
@FEW
@given(data=st.data())
def test_comparison_and_select(tname, cmp, data):
    t = DTYPES[tname]
    a, b = data.draw(two_arrays(t, small=True))
    b[: len(b) // 3] = a[: len(b) // 3]         # make equality happen
    traced, ref = CMPS[cmp]
    c = np.zeros_like(a)
    k = binary_kernel(t, "sel_" + cmp, lambda x, y: pycoop.select(traced(x, y), x, y))
    emu(k, grid_for(len(a)), a, b, c, len(a))
    np.testing.assert_array_equal(c, np.where(ref(a, b), a, b))


@pytest.mark.parametrize("tname", list(DTYPES))
@SETTINGS
@given(data=st.data())
def test_min_max(tname, data):
    t = DTYPES[tname]
    a, b = data.draw(two_arrays(t))
    lo, hi = np.zeros_like(a), np.zeros_like(a)
    emu(binary_kernel(t, "min", pycoop.min), grid_for(len(a)), a, b, lo, len(a))
    emu(binary_kernel(t, "max", pycoop.max), grid_for(len(a)), a, b, hi, len(a))
    np.testing.assert_array_equal(lo, np.minimum(a, b))
    np.testing.assert_array_equal(hi, np.maximum(a, b))


# --------------------------------------------------------------------------- bitwise and shifts

BITS = {"and": (lambda x, y: x & y, np.bitwise_and), "or": (lambda x, y: x | y, np.bitwise_or),
        "xor": (lambda x, y: x ^ y, np.bitwise_xor)}


@pytest.mark.parametrize("tname", ["i32", "u32"])
@pytest.mark.parametrize("op", list(BITS))
@FEW
@given(data=st.data())
def test_bitwise(tname, op, data):
    t = DTYPES[tname]
    a, b = data.draw(two_arrays(t))
    c = np.zeros_like(a)
    emu(binary_kernel(t, op, BITS[op][0]), grid_for(len(a)), a, b, c, len(a))
    np.testing.assert_array_equal(c, BITS[op][1](a, b))


@pytest.mark.parametrize("tname", ["i32", "u32"])
@SETTINGS
@given(data=st.data())
def test_bitwise_not(tname, data):
    t = DTYPES[tname]
    n = data.draw(st.integers(1, 100))
    a = data.draw(values(t, n))
    c = np.zeros_like(a)
    emu(unary_kernel(t, t, "not", lambda x: ~x), grid_for(n), a, c, n)
    mask = (1 << 32) - 1
    np.testing.assert_array_equal(c.astype(np.int64) & mask, (~a.astype(np.int64)) & mask)


@pytest.mark.parametrize("tname", ["i32", "u32"])
@SETTINGS
@given(data=st.data())
def test_shifts(tname, data):
    """<< is logical; >> is arithmetic for signed and logical for unsigned (as in C)."""
    t = DTYPES[tname]
    n = data.draw(st.integers(1, 100))
    a = data.draw(values(t, n))
    s = np.array(data.draw(st.lists(st.integers(0, 31), min_size=n, max_size=n)), t.dtype)
    left, right = np.zeros_like(a), np.zeros_like(a)
    emu(binary_kernel(t, "shl", lambda x, y: x << y), grid_for(n), a, s, left, n)
    emu(binary_kernel(t, "shr", lambda x, y: x >> y), grid_for(n), a, s, right, n)
    av, sv = a.tolist(), s.tolist()
    exp_l = [(x << k) & 0xFFFFFFFF for x, k in zip(av, sv)]
    exp_r = [(x >> k) & 0xFFFFFFFF for x, k in zip(av, sv)]   # Python >> is arithmetic on ints
    assert (left.astype(np.int64) & 0xFFFFFFFF).tolist() == exp_l
    assert (right.astype(np.int64) & 0xFFFFFFFF).tolist() == exp_r
    if t.signed and (a < 0).any():
        assert (right[(a < 0)] < 0).all()     # sign is kept


def test_shift_by_width_is_reported():
    a = np.array([1, 1], np.uint32)
    s = np.array([3, 32], np.uint32)
    with pytest.raises(pycoop.EmulatorError, match="shifting a 32-bit integer"):
        emu(binary_kernel(u32, "shl", lambda x, y: x << y), 1, a, s, np.zeros_like(a), 2)


# --------------------------------------------------------------------------- casts

def test_f32_to_f16_rounds_to_nearest_even():
    h = 2.0 ** -11        # half an f16 ulp at 1.0
    src = np.array([1 + h, 1 + 3 * h, 1 + h + 2.0 ** -20, -(1 + h), 2 + 2 * h, 65519.0, 65520.0,
                    1e-8, 2.0 ** -25, 2.0 ** -25 * 1.5, 0.1], np.float32)
    out = np.zeros(len(src), np.float16)
    emu(unary_kernel(f32, f16, "cast", f16), 1, src, out, len(src))
    expected = [1.0, 1 + 4 * h, 1 + 2 * h, -1.0, 2.0, 65504.0, np.inf,
                0.0, 0.0, 2.0 ** -24, float(np.float16(0.1))]
    assert out.astype(np.float64).tolist() == expected


@SETTINGS
@given(st.lists(st.floats(-70000, 70000, width=32), min_size=1, max_size=120))
def test_f32_to_f16_matches_numpy_rne(xs):
    src = np.array(xs, np.float32)
    out = np.zeros(len(src), np.float16)
    emu(unary_kernel(f32, f16, "cast", f16), grid_for(len(src)), src, out, len(src))
    with np.errstate(over="ignore"):          # values past f16's range round to inf, as intended
        np.testing.assert_array_equal(out, src.astype(np.float16))


@pytest.mark.parametrize("dst", [i32, u32, i8, u8], ids=repr)
@SETTINGS
@given(data=st.data())
def test_float_to_int_truncates_toward_zero(dst, data):
    lo, hi = dst.min_max()
    # the widest f32 range whose truncation fits in dst
    lo_f = np.float32(lo - 0.99) if dst.bits < 32 else np.float32(lo)
    hi_f = np.nextafter(np.float32(hi + 1), np.float32(0)) if dst.bits < 32 else \
        np.float32(2.0 ** 31 - 128 if dst.signed else 2.0 ** 32 - 256)
    n = data.draw(st.integers(1, 100))
    xs = data.draw(st.lists(st.floats(float(lo_f), float(hi_f)), min_size=n, max_size=n))
    src = np.clip(np.array(xs, np.float64).astype(np.float32), lo_f, hi_f)
    out = np.zeros(n, dst.dtype)
    emu(unary_kernel(f32, dst, "cast", lambda x: pycoop.cast(x, dst)), grid_for(n), src, out, n)
    ref = [int(x) for x in src.tolist()]          # Python int() truncates toward zero
    assert out.astype(np.int64).tolist() == ref


def test_float_to_int_examples_and_out_of_range_is_reported():
    src = np.array([2.7, -2.7, -0.5, 0.99, -2147483648.0], np.float32)
    out = np.zeros(5, np.int32)
    k = unary_kernel(f32, i32, "cast", i32)
    emu(k, 1, src, out, 5)
    assert out.tolist() == [2, -2, 0, 0, -2147483648]
    with pytest.raises(pycoop.EmulatorError, match="out-of-range float to i32"):
        emu(k, 1, np.array([3e9], np.float32), np.zeros(1, np.int32), 1)
    with pytest.raises(pycoop.EmulatorError, match="out-of-range float to u32"):
        emu(unary_kernel(f32, u32, "cast", u32), 1, np.array([-1.0], np.float32),
            np.zeros(1, np.uint32), 1)


def test_int_to_int_casts_wrap_and_extend():
    src = np.array([-1, 255, 256, -129, 127], np.int32)
    out8 = np.zeros(5, np.uint8)
    emu(unary_kernel(i32, u8, "cast", u8), 1, src, out8, 5)
    assert out8.tolist() == [255, 255, 0, 127, 127]
    s8 = np.array([-1, -128, 127], np.int8)
    out = np.zeros(3, np.int32)
    emu(unary_kernel(i8, i32, "cast", i32), 1, s8, out, 3)       # sign extension
    assert out.tolist() == [-1, -128, 127]
    outu = np.zeros(3, np.uint32)
    emu(unary_kernel(u8, u32, "cast", u32), 1, s8.view(np.uint8), outu, 3)   # zero extension
    assert outu.tolist() == [255, 128, 127]


def test_int_to_float_and_bitcast():
    src = np.array([16777217, -3, 2 ** 31 - 1], np.int32)
    out = np.zeros(3, np.float32)
    emu(unary_kernel(i32, f32, "cast", f32), 1, src, out, 3)
    np.testing.assert_array_equal(out, src.astype(np.float64).astype(np.float32))   # RNE
    bits = np.zeros(3, np.uint32)
    f = np.array([1.0, -2.5, 0.0], np.float32)
    emu(unary_kernel(f32, u32, "bitcast", lambda x: pycoop.bitcast(x, u32)), 1, f, bits, 3)
    np.testing.assert_array_equal(bits, f.view(np.uint32))


@pycoop.kernel(workgroup_size=1)
def k_literal_casts(Y: pycoop.Buffer[f32], Z: pycoop.Buffer[u32]):
    Y[0] = f32(f16(0.1))
    Y[1] = f32(f16(65519.0))           # rounds to the largest f16
    Y[2] = f32(f16(1e6))               # overflows: converted at run time, to inf
    Y[3] = f32(pycoop.bf16(0.1))       # bf16 converts at run time
    Y[4] = f32(i8(-100))
    Z[0] = u32(4000000000)
    Z[1] = u32(-1)                     # out of range: converted at run time, wraps


def test_scalar_types_called_on_literals_are_constants_of_that_type():
    """u32(0), f16(0.1): a constant of the type (rounded as NumPy rounds), not a converted
    constant of another type; literals the type cannot hold exactly convert as before."""
    ck = k_literal_casts.compile()
    assert ck.spv                      # passes spirv-val
    ir = ck.ir
    for text in ("value=0.1, type=f16", "value=65519.0, type=f16", "value=-100, type=i8",
                 "value=4000000000, type=u32"):
        assert text in ir
    assert "value=1000000.0, type=f32" in ir and "value=-1, type=i32" in ir
    Y, Z = np.zeros(5, np.float32), np.zeros(2, np.uint32)
    emu(k_literal_casts, 1, Y, Z)
    import ml_dtypes
    want = [np.float16(0.1), np.float16(65519.0), np.inf, ml_dtypes.bfloat16(0.1), -100]
    np.testing.assert_array_equal(Y, np.array(want, np.float32))
    assert Z.tolist() == [4000000000, 2 ** 32 - 1]


# --------------------------------------------------------------------------- math

MATH = {"exp": (pycoop.exp, np.exp, (-20, 20)), "log": (pycoop.log, np.log, (1e-3, 1e4)),
        "sqrt": (pycoop.sqrt, np.sqrt, (0, 1e6)), "sin": (pycoop.sin, np.sin, (-10, 10)),
        "tanh": (pycoop.tanh, np.tanh, (-5, 5)), "exp2": (pycoop.exp2, np.exp2, (-20, 20)),
        "rsqrt": (pycoop.rsqrt, lambda x: 1 / np.sqrt(x), (1e-3, 1e4))}


@pytest.mark.parametrize("tname", ["f32", "f16"])
@pytest.mark.parametrize("fn", list(MATH))
@FEW
@given(data=st.data())
def test_math_functions_within_tolerance(tname, fn, data):
    t = DTYPES[tname]
    traced, ref, (lo, hi) = MATH[fn]
    if t == f16:
        hi = min(hi, 10 if fn in ("exp", "exp2") else 6e4)
    n = data.draw(st.integers(1, 80))
    xs = data.draw(st.lists(st.floats(lo, hi), min_size=n, max_size=n))
    a = np.array(xs, np.float32).astype(t.dtype)
    a = np.clip(a, t.dtype.type(lo), t.dtype.type(hi))
    if fn in ("log", "rsqrt"):
        a = np.maximum(a, t.dtype.type(1e-3))
    c = np.zeros_like(a)
    emu(unary_kernel(t, t, fn, traced), grid_for(n), a, c, n)
    expect = ref(a.astype(np.float64))
    # tolerance: a few ulps of the type (the GPU's GLSL.std.450 precision is looser still)
    rtol = 4 * float(np.finfo(t.dtype).eps)
    np.testing.assert_allclose(c.astype(np.float64), expect, rtol=rtol,
                               atol=4 * float(np.finfo(t.dtype).eps))


@pytest.mark.parametrize("fn,ref", [(pycoop.floor, np.floor), (pycoop.ceil, np.ceil),
                                    (pycoop.trunc, np.trunc), (pycoop.abs, np.abs)])
def test_rounding_functions_are_exact(fn, ref):
    a = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.7, -3.7, 0.0], np.float32)
    c = np.zeros_like(a)
    emu(unary_kernel(f32, f32, fn.__name__, fn), 1, a, c, len(a))
    np.testing.assert_array_equal(c, ref(a))


def test_integer_abs_and_negate():
    a = np.array([-5, 0, 7, -2147483647], np.int32)
    c = np.zeros_like(a)
    emu(unary_kernel(i32, i32, "abs", pycoop.abs), 1, a, c, 4)
    assert c.tolist() == [5, 0, 7, 2147483647]
    emu(unary_kernel(i32, i32, "neg", lambda x: -x), 1, a, c, 4)
    assert c.tolist() == [5, 0, -7, 2147483647]


def test_math_on_integers_is_a_compile_error():
    k = unary_kernel(i32, i32, "exp_int", pycoop.exp)
    with pytest.raises(pycoop.CompileError, match="exp is not defined on i32") as ei:
        k.compile()
    assert ei.value.rule_id == "core.arithmetic-type"


# --------------------------------------------------------------------------- bounds checks

@pycoop.kernel(workgroup_size=WG)
def k_copy_unguarded(A: pycoop.Buffer[f32], B: pycoop.Buffer[f32]):
    i = pycoop.global_invocation_id.x
    v = A[i]
    B[i] = v


@pycoop.kernel(workgroup_size=WG)
def k_store_offset(A: pycoop.Buffer[f32], off: i32):
    i = pycoop.global_invocation_id.x
    A[pycoop.cast(i, i32) + off] = 1.0


def test_out_of_bounds_load_names_the_kernel_line():
    a = np.zeros(40, np.float32)
    b = np.zeros(64, np.float32)
    with pytest.raises(pycoop.EmulatorError, match="load out of bounds of buffer 'A'") as ei:
        emu(k_copy_unguarded, 2, a, b)
    assert ei.value.loc.line == line_of(k_copy_unguarded, "v = A[i]")
    assert ei.value.loc.file == __file__
    assert "invocation 8" in str(ei.value) and "(1, 0, 0)" in str(ei.value)
    assert "v = A[i]" in str(ei.value)        # the source line is shown


def test_out_of_bounds_store_names_the_kernel_line_and_writes_nothing():
    a = np.zeros(64, np.float32)
    b = np.full(40, 7.0, np.float32)
    with pytest.raises(pycoop.EmulatorError, match="store out of bounds of buffer 'B'") as ei:
        emu(k_copy_unguarded, 2, a, b)
    assert ei.value.loc.line == line_of(k_copy_unguarded, "B[i] = v")
    assert (b == 7.0).all()
    c = np.zeros(32, np.float32)
    with pytest.raises(pycoop.EmulatorError, match="store out of bounds") as ei:
        emu(k_store_offset, 1, c, -1)          # negative index
    assert ei.value.loc.line == line_of(k_store_offset, "A[pycoop.cast")
    emu(k_store_offset, 1, np.zeros(33, np.float32), 1)


# --------------------------------------------------------------------------- shared memory

@pycoop.kernel(workgroup_size=64)
def k_reverse(A: pycoop.Buffer[f32], B: pycoop.Buffer[f32]):
    s = pycoop.shared(f32, 64)
    l = pycoop.local_invocation_index()
    g = pycoop.global_invocation_id.x
    s[l] = A[g]
    pycoop.barrier()
    B[g] = s[63 - l]


@pycoop.kernel(workgroup_size=64)
def k_reverse_racy(A: pycoop.Buffer[f32], B: pycoop.Buffer[f32]):
    s = pycoop.shared(f32, 64)
    l = pycoop.local_invocation_index()
    g = pycoop.global_invocation_id.x
    s[l] = A[g]
    B[g] = s[63 - l]


@pycoop.kernel(workgroup_size=64)
def k_own_slot(A: pycoop.Buffer[f32], B: pycoop.Buffer[f32]):
    s = pycoop.shared(f32, 64)
    l = pycoop.local_invocation_index()
    g = pycoop.global_invocation_id.x
    s[l] = A[g]
    B[g] = s[l] * 2.0          # reading one's own write needs no barrier


@pycoop.kernel(workgroup_size=64)
def k_barrier_divergent(A: pycoop.Buffer[f32]):
    l = pycoop.local_invocation_index()
    if l < 10:
        pycoop.barrier()
    A[l] = 1.0


@pycoop.kernel(workgroup_size=64)
def k_shared_oob(A: pycoop.Buffer[f32]):
    s = pycoop.shared(f32, 32)
    l = pycoop.local_invocation_index()
    s[l] = 1.0


@SETTINGS
@given(st.integers(1, 6), st.integers(0, 2 ** 31))
def test_workgroup_reversal_through_shared_memory(groups, seed):
    a = np.random.default_rng(seed).standard_normal(64 * groups).astype(np.float32)
    b = np.zeros_like(a)
    emu(k_reverse, groups, a, b)
    np.testing.assert_array_equal(b, a.reshape(groups, 64)[:, ::-1].reshape(-1))


def test_shared_memory_is_per_workgroup_and_own_writes_are_visible():
    a = np.arange(128, dtype=np.float32)
    b = np.zeros_like(a)
    emu(k_own_slot, 2, a, b)
    np.testing.assert_array_equal(b, a * 2)


def test_data_race_without_barrier_is_reported():
    a = np.arange(64, dtype=np.float32)
    with pytest.raises(pycoop.EmulatorError, match="data race") as ei:
        emu(k_reverse_racy, 1, a, np.zeros_like(a))
    assert ei.value.loc.line == line_of(k_reverse_racy, "B[g] = s[63 - l]")
    assert ei.value.rule_id == "emulator.shared-race"


def test_barrier_in_divergent_control_flow_is_reported():
    with pytest.raises(pycoop.EmulatorError, match="barrier reached by only part") as ei:
        emu(k_barrier_divergent, 1, np.zeros(64, np.float32))
    assert ei.value.loc.line == line_of(k_barrier_divergent, "pycoop.barrier()")
    assert ei.value.rule_id == "control.barrier-uniform"


def test_shared_out_of_bounds_is_reported():
    with pytest.raises(pycoop.EmulatorError, match="out of bounds of shared array") as ei:
        emu(k_shared_oob, 1, np.zeros(64, np.float32))
    assert ei.value.loc.line == line_of(k_shared_oob, "s[l] = 1.0")


# --------------------------------------------------------------------------- built-ins

@pycoop.kernel(workgroup_size=(4, 2, 2))
def k_builtins(out: pycoop.Buffer[u32]):
    g = (pycoop.workgroup_id.z * pycoop.num_workgroups.y + pycoop.workgroup_id.y) * \
        pycoop.num_workgroups.x + pycoop.workgroup_id.x
    base = (g * 16 + pycoop.local_invocation_index()) * 8
    out[base] = pycoop.local_invocation_id.x
    out[base + 1] = pycoop.local_invocation_id.y
    out[base + 2] = pycoop.local_invocation_id.z
    out[base + 3] = pycoop.global_invocation_id.x
    out[base + 4] = pycoop.global_invocation_id.y
    out[base + 5] = pycoop.global_invocation_id.z
    out[base + 6] = pycoop.subgroup_id() * 100 + pycoop.subgroup_local_id()
    out[base + 7] = pycoop.num_subgroups() * 100 + pycoop.subgroup_size()


def test_builtins_follow_the_vulkan_definitions():
    grid = (3, 2, 2)
    out = np.zeros(12 * 16 * 8, np.uint32)
    emu(k_builtins, grid, out, subgroup_size=8)
    o = out.reshape(2, 2, 3, 16, 8)        # [wz, wy, wx, local index, field]
    for wz in range(2):
        for wy in range(2):
            for wx in range(3):
                for li in range(16):
                    lx, ly, lz = li % 4, (li // 4) % 2, li // 8
                    assert o[wz, wy, wx, li].tolist() == [
                        lx, ly, lz, wx * 4 + lx, wy * 2 + ly, wz * 2 + lz,
                        (li // 8) * 100 + li % 8, 2 * 100 + 8]


@pycoop.kernel(workgroup_size=32)
def k_uncalled_builtin(out: pycoop.Buffer[u32], n: u32):
    out[pycoop.local_invocation_index + n] = 1


@pycoop.kernel(workgroup_size=32)
def k_vector_builtin_as_value(out: pycoop.Buffer[u32]):
    out[pycoop.workgroup_id * 32] = 1


def test_a_builtin_handle_used_as_a_value_is_a_clear_error():
    with pytest.raises(pycoop.CompileError, match="local_invocation_index is used as a value") as ei:
        k_uncalled_builtin.compile()
    assert ei.value.line == line_of(k_uncalled_builtin, "out[pycoop.local_invocation_index + n]")
    assert "pycoop.local_invocation_index()" in str(ei.value)
    assert ei.value.rule_id == "core.function-as-value"
    with pytest.raises(pycoop.CompileError, match="workgroup_id is used as a value") as ei:
        k_vector_builtin_as_value.compile()
    assert "pycoop.workgroup_id.x" in str(ei.value)


@pycoop.kernel(workgroup_size=64)
def k_all_write_one(out: pycoop.Buffer[u32], same: pycoop.Const = False):
    l = pycoop.local_invocation_index()
    out[0] = u32(7) if same else l


@pycoop.kernel(workgroup_size=64)
def k_shared_overwrite(out: pycoop.Buffer[f32], sync: pycoop.Const = False,
                       same: pycoop.Const = False):
    s = pycoop.shared(f32, 64)
    l = pycoop.local_invocation_index()
    s[l] = 1.0
    if sync:
        pycoop.barrier()
    s[(l + 1) % 64] = 1.0 if same else f32(l)
    pycoop.barrier()
    out[l] = s[l]


def test_write_write_races_are_reported():
    """Several invocations writing one element with different values, in one store or (shared
    memory) in two stores without a barrier between them: which value lands is unspecified."""
    out = np.zeros(4, np.uint32)
    with pytest.raises(pycoop.EmulatorError, match="more than once with different values") as ei:
        emu(k_all_write_one, 1, out)
    assert ei.value.loc.line == line_of(k_all_write_one, "out[0] =")
    assert ei.value.rule_id == "emulator.store-overlap"
    emu(k_all_write_one, 1, out, same=True)
    assert out[0] == 7
    res = np.zeros(64, np.float32)
    with pytest.raises(pycoop.EmulatorError, match="data race: this store overwrites") as ei:
        emu(k_shared_overwrite, 1, res)
    assert ei.value.loc.line == line_of(k_shared_overwrite, "s[(l + 1) % 64] =")
    assert ei.value.rule_id == "emulator.shared-race"
    for kw in (dict(sync=True), dict(same=True)):
        emu(k_shared_overwrite, 1, res, **kw)
        want = np.roll(np.arange(64, dtype=np.float32), 1) if kw.get("sync") else np.ones(64)
        np.testing.assert_array_equal(res, want)


@pycoop.kernel(workgroup_size=64)
def k_write_after_read(out: pycoop.Buffer[f32], sync: pycoop.Const = False,
                       same: pycoop.Const = False):
    s = pycoop.shared(f32, 64)
    l = pycoop.local_invocation_index()
    s[l] = f32(l)
    pycoop.barrier()
    v = s[(l + 1) % 64]                 # the neighbour's element
    if sync:
        pycoop.barrier()
    s[l] = f32(l) if same else 2.0 * f32(l)
    pycoop.barrier()
    out[l] = v + s[l]


def test_a_write_after_another_invocations_read_is_reported():
    res = np.zeros(64, np.float32)
    with pytest.raises(pycoop.EmulatorError, match="read since the last barrier") as ei:
        emu(k_write_after_read, 1, res)
    assert ei.value.loc.line == line_of(k_write_after_read, "s[l] = f32(l) if same")
    l = np.arange(64, dtype=np.float32)
    emu(k_write_after_read, 1, res, sync=True)
    np.testing.assert_array_equal(res, np.roll(l, -1) + 2 * l)
    emu(k_write_after_read, 1, res, same=True)
    np.testing.assert_array_equal(res, np.roll(l, -1) + l)


@pycoop.kernel(workgroup_size=64)
def k_broadcast_then_update(out: pycoop.Buffer[f32], sync: pycoop.Const = False):
    s = pycoop.shared(f32, 1)
    l = pycoop.local_invocation_index()
    if l == 0:
        s[0] = 1.0
    pycoop.barrier()
    v = s[0]                            # every invocation reads the element
    if sync:
        pycoop.barrier()
    if l == 0:
        s[0] = 5.0                      # its own read is fine, the others' are not
    out[l] = v


def test_an_element_read_by_many_invocations_then_overwritten_is_a_race():
    out = np.zeros(64, np.float32)
    with pytest.raises(pycoop.EmulatorError, match="read since the last barrier") as ei:
        emu(k_broadcast_then_update, 1, out)
    assert ei.value.loc.line == line_of(k_broadcast_then_update, "s[0] = 5.0")
    emu(k_broadcast_then_update, 1, out, sync=True)
    np.testing.assert_array_equal(out, 1.0)


@pycoop.kernel(workgroup_size=32)
def k_vector_bitcasts(src: pycoop.Buffer[u32], out: pycoop.Buffer[pycoop.vec(u32, 2)],
                      wide: pycoop.Buffer[pycoop.vec(u32, 2)], bytes_out: pycoop.Buffer[pycoop.vec(u8, 4)]):
    i = pycoop.global_invocation_id.x
    v = pycoop.bitcast(src[i], pycoop.vec(f16, 2))                 # scalar -> vector
    w = v * pycoop.make_vector([f16(2.0), f16(-1.0)])
    out[i] = pycoop.make_vector([pycoop.bitcast(w, u32), pycoop.bitcast(v, u32)])   # vector -> scalar
    four = pycoop.make_vector([v[0], v[1], w[0], w[1]])
    wide[i] = pycoop.bitcast(four, pycoop.vec(u32, 2))            # vector -> vector of fewer
    bytes_out[i] = pycoop.bitcast(src[i], pycoop.vec(u8, 4))


def test_vector_bitcasts_reinterpret_bytes():
    src = np.random.default_rng(3).integers(0, 2 ** 32, 64, dtype=np.uint32)
    src[:2] = [0x3C00BC00, 0x7C00FC00]             # (-1, 1), (-inf, inf) as f16 pairs
    out, wide = np.zeros((64, 2), np.uint32), np.zeros((64, 2), np.uint32)
    bytes_out = np.zeros((64, 4), np.uint8)
    emu(k_vector_bitcasts, 2, src, out, wide, bytes_out)
    v = src.view(np.float16).reshape(64, 2)
    with np.errstate(invalid="ignore", over="ignore"):
        w = (v * np.array([2.0, -1.0], np.float16)).astype(np.float16)
    want = np.stack([w.view(np.uint32).ravel(), src], 1)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(wide, np.concatenate([v, w], 1).view(np.uint32))
    np.testing.assert_array_equal(bytes_out, src.view(np.uint8).reshape(64, 4))


def test_bitcast_of_unequal_widths_is_a_compile_error():
    @pycoop.kernel(workgroup_size=1)
    def bad(a: pycoop.Buffer[u32]):
        x = pycoop.bitcast(a[0], pycoop.vec(f16, 4))
        a[0] = u32(x[0])

    for _ in range(2):                  # the second trace reads cached source positions
        with pytest.raises(pycoop.CompileError, match="cannot bitcast u32 to vec4<f16>") as e:
            bad.compile()
        assert "same total width" in str(e.value)
        assert e.value.rule_id == "core.bitcast-width"
        line = line_of(bad, "pycoop.bitcast(")
        assert e.value.loc.line == line
        text = open(__file__).read().splitlines()[line - 1]
        assert e.value.loc.col == text.index("pycoop.bitcast(") + 1
