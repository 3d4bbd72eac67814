"""Numerical semantics on Vulkan (lavapipe in CI) against the same independent references as
tests/core/test_numerics.py, and bit for bit against the emulator (docs/numerics.md)."""
from __future__ import annotations

import numpy as np
import pytest

import pycoop as pc
from pycoop import f16, f32, f64, u32
from pycoop.ops.core import fma_array

from numerics_cases import (IEEE, INTS, NARROW, cast_kernel, int_expected, int_operands, int_ties,
                            narrow_expected, narrowing_ties, run_int_ops, run_narrow)

pytestmark = pytest.mark.vulkan


@pytest.fixture(scope="module", autouse=True)
def _device():
    try:
        from pycoop.runtime.vulkan import get_runtime
        get_runtime()
    except Exception as e:
        pytest.skip(f"no Vulkan device: {e}")


@pytest.mark.parametrize("t", INTS, ids=str)
def test_integer_ops_at_the_extremes(t):
    got = run_int_ops(t, "vulkan")
    want = int_expected(t, *int_operands(t))
    for name in want:
        assert got[name] == want[name], name


@pytest.mark.parametrize("t", NARROW, ids=str)
def test_narrow_results_wrap(t):
    """Driver workaround: 8/16-bit -x, ~x + 1, x + y, x - y, x * y and x << 1 wrap before
    comparisons, shifts, min and widening conversions (NVIDIA 580.159.04 kept -x of an i8
    -128 as +128, and ~x + 1 too, with plain narrow instructions)."""
    assert run_narrow(t, "vulkan") == narrow_expected(t)


@pc.kernel(workgroup_size=64)
def range_steps(Lo: pc.ReadBuffer[pc.i32], Hi: pc.ReadBuffer[pc.i32], St: pc.ReadBuffer[pc.i32],
                Out: pc.WriteBuffer[pc.i32], n: u32):
    """Per invocation, sum and count of range(lo, hi, step) over i32 bounds, and over u32
    bounds (|lo|, |hi|, |step|), with runtime steps, 0 included."""
    i = pc.global_invocation_id.x
    if i < n:
        s, c = pc.i32(0), pc.i32(0)
        for j in range(Lo[i], Hi[i], St[i]):
            s += j
            c += 1
        su, cu = u32(0), u32(0)
        for j in range(u32(abs(Lo[i])), u32(abs(Hi[i])), u32(abs(St[i]))):
            su += j
            cu += 1
        Out[4 * i], Out[4 * i + 1], Out[4 * i + 2], Out[4 * i + 3] = s, c, pc.i32(su), pc.i32(cu)


def test_runtime_range_steps_as_python_and_zero_steps_run_nothing():
    """Runtime range() on the device as in Python, and a step of 0 (Python raises) runs no
    iteration: over bounds in order it looped forever (a lost device)."""
    rng = np.random.default_rng(3)
    n = 256
    lo, hi = (rng.integers(-20, 21, n).astype(np.int32) for _ in range(2))
    st = rng.integers(-4, 5, n).astype(np.int32)
    out = np.zeros(4 * n, np.int32)
    range_steps[(n // 64,)](lo, hi, st, out, n, backend="vulkan")
    want = []
    for a, b, d in zip(lo.tolist(), hi.tolist(), st.tolist()):
        r = range(a, b, d) if d else ()
        ru = range(abs(a), abs(b), abs(d)) if d else ()
        want += [sum(r), len(r), sum(ru), len(ru)]
    assert out.tolist() == want
    assert (st == 0).sum() > 10


def _both(kernel, grid, *args):
    gpu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    emu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    assert kernel[grid](*gpu, backend="vulkan").backend == "vulkan"
    kernel[grid](*emu, backend="emulator")
    return gpu, emu


@pytest.mark.parametrize("src", INTS, ids=str)
@pytest.mark.parametrize("dst", IEEE, ids=str)
def test_int_to_float_at_ties_matches_the_emulator(src, dst):
    x = int_ties(src, dst)
    n = len(x)
    with np.errstate(over="ignore"):
        gpu, emu = _both(cast_kernel(src, dst), -(-n // 64), x, np.zeros(n, dst.dtype), n)
    assert gpu[1].tobytes() == emu[1].tobytes()


@pytest.mark.parametrize("src,dst", [(f64, f32), (f64, f16), (f32, f16)], ids=str)
def test_float_narrowing_at_ties_matches_the_emulator(src, dst):
    x = narrowing_ties(src, dst)
    gpu, emu = _both(cast_kernel(src, dst), -(-len(x) // 64), x, np.zeros(len(x), dst.dtype), len(x))
    if gpu[1].tobytes() != emu[1].tobytes() and (src, dst) == (f64, f16) and _lavapipe():
        # lavapipe converts f64 to f16 through f32 (two roundings); every difference is one
        np.testing.assert_array_equal(gpu[1], x.astype(np.float32).astype(np.float16))
        return
    assert gpu[1].tobytes() == emu[1].tobytes()


def _lavapipe() -> bool:
    from pycoop.runtime.vulkan import get_runtime
    return "llvmpipe" in get_runtime().capabilities.device_name


@pc.kernel(workgroup_size=64)
def f64_math(X: pc.ReadBuffer[f64], Y: pc.WriteBuffer[f64], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        x = X[i]
        Y[i] = pc.abs(x)
        Y[n + i] = pc.floor(x)
        Y[u32(2) * n + i] = pc.ceil(x)
        Y[u32(3) * n + i] = pc.trunc(x)
        Y[u32(4) * n + i] = pc.sqrt(pc.abs(x))
        Y[u32(5) * n + i] = pc.fma(x, x, -x)


def test_f64_math_matches_the_emulator():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(200) * 1e3, [-0.0, 0.5, -2.5, 2.0 ** 60 + 1024]])
    n = len(x)
    gpu, emu = _both(f64_math, -(-n // 64), x, np.zeros(6 * n), n)
    g, e = gpu[1].reshape(6, n), emu[1].reshape(6, n)
    diff = g[:5].view(np.uint64) != e[:5].view(np.uint64)
    if _lavapipe():              # lavapipe's f64 trunc(-0.0) is +0.0
        diff[3] &= ~((x == 0) & (g[3] == 0))
    assert not diff.any()
    _fused_or_not(x, x, -x, g[5])        # lavapipe does not fuse Fma (Vulkan allows it)


def _fused_or_not(a, b, c, got):
    """Each result is a*b+c rounded once, or rounded after the product and after the sum."""
    fused = fma_array(a, b, c)
    with np.errstate(all="ignore"):
        twice = a * b + c
    assert ((got.view(np.uint8) == fused.view(np.uint8)).reshape(len(got), -1).all(1)
            | (got.view(np.uint8) == twice.view(np.uint8)).reshape(len(got), -1).all(1)).all()
    return fused, twice


@pc.kernel(workgroup_size=64)
def rsqrt64(X: pc.ReadBuffer[f64], Y: pc.WriteBuffer[f64], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = pc.rsqrt(X[i])


def test_f64_rsqrt_within_the_vulkan_bound():
    x = np.random.default_rng(6).random(300) * 100 + 0.01
    y = np.zeros(300)
    rsqrt64[5](x, y, 300, backend="vulkan")
    np.testing.assert_allclose(y, 1 / np.sqrt(x), rtol=2 * 2.0 ** -52)     # 2 ULP


@pc.kernel(workgroup_size=64)
def fma32(A: pc.ReadBuffer[f32], B: pc.ReadBuffer[f32], C: pc.Buffer[f32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        C[i] = pc.fma(A[i], B[i], C[i])


def test_fma_f32_fused_or_as_vulkan_allows():
    """The emulator's fma is fused (one rounding); a Vulkan device may compute GLSL Fma as a
    multiply then an add (lavapipe does), so each element is one of the two."""
    rng = np.random.default_rng(8)
    a = rng.standard_normal(512).astype(np.float32)
    b = rng.standard_normal(512).astype(np.float32)
    c = (-(a.astype(np.float64) * b)).astype(np.float32)      # cancellation shows the fusion
    gpu, emu = _both(fma32, 8, a, b, c, 512)
    fused, twice = _fused_or_not(a, b, c, gpu[2])
    assert emu[2].tobytes() == fused.tobytes() != twice.tobytes()


def _contraction_kernel(fp):
    @pc.kernel(workgroup_size=64, fp=fp)
    def contraction(A: pc.ReadBuffer[f16], B: pc.ReadBuffer[f16], O: pc.WriteBuffer[f16], n: u32):
        i = pc.global_invocation_id.x
        if i < n:
            a, b = A[i], B[i]
            O[i] = a + b * (a * b)
            O[n + i] = (a - a) * f16(-1.0)          # -0.0 * ... keeps its sign
            O[u32(2) * n + i] = -(a - a) + f16(-0.0)
    return contraction


def test_exact_mode_matches_the_emulator_bit_for_bit():
    rng = np.random.default_rng(9)
    a = rng.standard_normal(1000).astype(np.float16)
    b = rng.standard_normal(1000).astype(np.float16)
    gpu, emu = _both(_contraction_kernel("exact"), 16, a, b, np.zeros(3000, np.float16), 1000)
    assert gpu[2].tobytes() == emu[2].tobytes()
    assert np.signbit(gpu[2][1000:]).all()


def test_strict_mode_on_a_device_without_denormal_preservation():
    from pycoop.runtime.vulkan import get_runtime
    caps = get_runtime().capabilities
    if caps.float_controls.get("shaderDenormPreserveFloat16"):
        pytest.skip(f"{caps.device_name} preserves f16 subnormals")
    k = _contraction_kernel("strict")
    with pytest.raises(pc.BackendUnavailable, match="shaderDenormPreserveFloat16") as ei:
        k[1](np.ones(4, np.float16), np.ones(4, np.float16), np.zeros(12, np.float16), 4,
             backend="vulkan")
    assert 'fp="strict"' in str(ei.value)


@pc.kernel(workgroup_size=8)
def min_max32(X: pc.ReadBuffer[f32], Y: pc.ReadBuffer[f32], O: pc.WriteBuffer[f32]):
    i = pc.global_invocation_id.x
    O[i] = pc.min(X[i], Y[i])
    O[8 + i] = pc.max(X[i], Y[i])


def test_min_max_of_signed_zeros_and_nan():
    n = np.nan
    x = np.array([0.0, -0.0, n, 1.0, n, -0.0, 2.0, -3.0], np.float32)
    y = np.array([-0.0, 0.0, 1.0, n, n, -0.0, 2.0, 4.0], np.float32)
    gpu, emu = _both(min_max32, 1, x, y, np.zeros(16, np.float32))
    g, e = gpu[2].view(np.uint32), emu[2].view(np.uint32)
    if _lavapipe():          # lavapipe: the second operand of a +-0 pair (GLSL leaves it open)
        ties = np.tile((x == 0) & (y == 0), 2)
        np.testing.assert_array_equal(g[ties], np.tile(y.view(np.uint32), 2)[ties])
        g, e = g[~ties], e[~ties]
    np.testing.assert_array_equal(g, e)


@pc.kernel(workgroup_size=64, fp="exact")
def float_to_u64_narrowed(A: pc.ReadBuffer[pc.u64], F: pc.ReadBuffer[f32], W: pc.Buffer[pc.u64],
                          I: pc.Buffer[pc.i32], n: u32):
    """Seed 301593's chain, whole and in parts (docs/numerics.md, driver table)."""
    i = pc.global_invocation_id.x
    if i < n:
        f = pc.cast(pc.cast(A[i], u32), f32)
        a2 = pc.cast(pc.select(f == f, pc.min(pc.max(f, f32(0.0)), f32(9.223372036854776e+18)),
                               f32(0.0)), pc.u64)
        W[i] = a2                                          # u64 -> u32 -> f32 -> u64
        I[i] = pc.cast(a2, pc.i32)                         # ... -> i32 (the seed's use)
        w = pc.cast(F[i], pc.u64)
        W[n + i] = w                                       # f32 -> u64
        I[n + i] = pc.cast(w, pc.i32)                      # f32 -> u64 -> i32
        I[2 * n + i] = pc.cast(pc.cast(w, u32), pc.i32)    # f32 -> u64 -> u32 -> i32


def test_float_to_u64_then_narrowed():
    """Seed 301593: O0[13] was 101.0 on the H200 and 100.0 on the emulator, which follows
    SPIR-V here (u32 0xFFFFFFF9 -> f32 is 2^32, -> u64 4294967296, low word 0); 101 is what a
    saturating f32 -> 32-bit conversion (-1) would give. On the H200 only the clamped chain
    (`...->i32`) differed: the driver folds a clamped OpConvertFToU to 64 bits and the narrowing
    into one saturating 32-bit conversion, also when the low word was taken from the value's
    bits; pycoop now builds every f32/f64 -> 64-bit conversion from two in-range 32-bit
    conversions (ops.core.int64_from_float_words). Run on lavapipe here, and on the GPU by the
    gpu suite."""
    a = np.array([0xFFFFFFF9, 0xFFFFFFF3, 0xFFFFFFFF, 0xFFFFFF80, 2 ** 24 + 1, 123, 0,
                  0xFFFFFFFFFFFFFFF3] * 8, np.uint64)
    f = np.array([2.0 ** 32, 2.0 ** 33 + 2 ** 10, 2.0 ** 40, 4294967040.0, 1.5, 0.0, 7.0,
                  2.0 ** 63 - 2 ** 40] * 8, np.float32)
    n = len(a)
    W, I = np.zeros(2 * n, np.uint64), np.zeros(3 * n, np.int32)
    gpu, emu = _both(float_to_u64_narrowed, 1, a, f, W, I, n)
    assert emu[2][:3].tolist() == [2 ** 32, 2 ** 32, 2 ** 32] and emu[3][:3].tolist() == [0, 0, 0]
    lines = {"u32->f32->u64": (gpu[2][:n], emu[2][:n]), "...->i32": (gpu[3][:n], emu[3][:n]),
             "f32->u64": (gpu[2][n:], emu[2][n:]), "f32->u64->i32": (gpu[3][n:2 * n], emu[3][n:2 * n]),
             "f32->u64->u32->i32": (gpu[3][2 * n:], emu[3][2 * n:])}
    differ = {k: (g[:8].tolist(), e[:8].tolist()) for k, (g, e) in lines.items()
              if g.tobytes() != e.tobytes()}
    print(differ)
    assert not differ, differ


# ---------------------------------------------------------------- float -> 64-bit integers

def float_edges(src, dst) -> np.ndarray:
    """Floats of type `src` at the edges of a conversion to the 64-bit integer type `dst`, all
    in its defined domain (trunc(x) representable): zeros, subnormals, 1 - ulp, 2^31 and 2^32
    and their neighbours, 2^52, 2^53, 2^63 - ulp, -2^63 (i64) or 2^63, 2^64 - ulp (u64),
    fractions, negatives (i64) or negative fractions above -1 (u64), then random values
    spread over the domain's binades."""
    t = src.dtype.type
    up = lambda x: np.nextafter(t(x), t(np.inf))        # noqa: E731
    down = lambda x: np.nextafter(t(x), t(-np.inf))     # noqa: E731
    tiny = np.finfo(src.dtype).smallest_subnormal
    v = [0.0, tiny, 3 * tiny, down(np.finfo(src.dtype).smallest_normal), 0.5, down(1.0), 1.0,
         1.5, 123.75, 2.0 ** 23 + 0.5, down(2.0 ** 31), 2.0 ** 31, up(2.0 ** 31), down(2.0 ** 32),
         2.0 ** 32, up(2.0 ** 32), 2.0 ** 33 + 2.0 ** 10, 4294967040.0, 2.0 ** 52, up(2.0 ** 52),
         2.0 ** 53, up(2.0 ** 53), 2.0 ** 62 + 2.0 ** 40, down(2.0 ** 63)]
    rng = np.random.default_rng(src.bits * 64 + dst.signed)
    mags = 2.0 ** rng.uniform(-3, 63, 40) * rng.uniform(1, 2, 40)
    if dst.signed:
        v += [-x for x in v[1:]] + [-(2.0 ** 63), -0.0]
        mags = np.where(rng.random(40) < 0.5, -mags, mags)
    else:
        v += [2.0 ** 63, up(2.0 ** 63), down(2.0 ** 64), -0.0, -tiny, -0.5, -float(down(1.0))]
    x = np.concatenate([np.array(v, src.dtype), mags.astype(src.dtype)])
    lo, hi = dst.min_max()
    return x[(np.trunc(x.astype(np.float64)) >= lo) & (np.trunc(x.astype(np.float64)) < hi + 1)]


# float clamp bounds (before the conversion) and integer clamp bounds (after it), per dst
F_CLAMP = {pc.u64: (0.0, 2.0 ** 63), pc.i64: (-(2.0 ** 62), 2.0 ** 62)}
I_CLAMP = {pc.u64: (3, 2 ** 62 + 2 ** 33 + 1), pc.i64: (-(2 ** 61) - 2 ** 32 - 3, 2 ** 61 + 2 ** 31 + 5)}
NARROWED = (pc.i32, u32, pc.i16, pc.u8)


def float_to_int64_kernel(src, dst, fp):
    """x -> dst whole and narrowed to i32/u32/i16/u8, in four chains: as is, a float clamp
    (min/max/select) before the conversion, an integer clamp after it, and both (the chain
    k of element i at k*n + i)."""
    flo, fhi = F_CLAMP[dst]
    ilo, ihi = I_CLAMP[dst]

    @pc.kernel(workgroup_size=64, fp=fp)
    def k(X: pc.ReadBuffer[src], W: pc.WriteBuffer[dst], A: pc.WriteBuffer[pc.i32],
          B: pc.WriteBuffer[u32], C: pc.WriteBuffer[pc.i16], D: pc.WriteBuffer[pc.u8], n: u32):
        i = pc.global_invocation_id.x
        if i < n:
            x = X[i]
            fc = pc.select(x == x, pc.min(pc.max(x, src(flo)), src(fhi)), src(0.0))
            for j, w in enumerate((pc.cast(x, dst), pc.cast(fc, dst))):
                for c, v in enumerate((w, pc.select(x == x, pc.max(pc.min(w, dst(ihi)), dst(ilo)), dst(0)))):
                    at = (2 * c + j) * n + i
                    W[at] = v
                    A[at] = pc.cast(v, pc.i32)
                    B[at] = pc.cast(v, u32)
                    C[at] = pc.cast(v, pc.i16)
                    D[at] = pc.cast(v, pc.u8)
    return k


def float_to_int64_expected(x: np.ndarray, dst) -> list[list[int]]:
    """The chains of float_to_int64_kernel on Python ints (int(float) truncates exactly): the
    64-bit values of the four chains, in kernel order."""
    flo, fhi = F_CLAMP[dst]
    ilo, ihi = I_CLAMP[dst]
    whole = [int(float(v)) for v in x]
    fclamped = [int(min(max(float(v), flo), fhi)) for v in x]
    iclamp = lambda w: [max(min(v, ihi), ilo) for v in w]     # noqa: E731
    return [whole, fclamped, iclamp(whole), iclamp(fclamped)]


def run_float_to_int64(src, dst, fp, backend):
    x = float_edges(src, dst)
    n = len(x)
    outs = [np.zeros(4 * n, t.dtype) for t in (dst, *NARROWED)]
    launch = float_to_int64_kernel(src, dst, fp)[-(-n // 64)](x, *outs, n, backend=backend)
    assert launch.backend == backend
    return x, outs


@pytest.mark.parametrize("fp", ["fast", "exact"])
@pytest.mark.parametrize("dst", [pc.u64, pc.i64], ids=str)
@pytest.mark.parametrize("src", [f32, f64], ids=str)
def test_float_to_int64_whole_and_narrowed(src, dst, fp):
    """Driver workaround (docs/numerics.md, seed 301593): f32/f64 -> u64/i64 built from two
    in-range 32-bit conversions (ops.core.int64_from_float_words), over the edges of the
    conversion, used whole and narrowed to i32/u32/i16/u8, with and without a float clamp
    before and an integer clamp after: the emulator gives the Python-int reference and the
    device the emulator's bits. Run on lavapipe here, and on the GPU by the gpu suite."""
    x, emu = run_float_to_int64(src, dst, fp, "emulator")
    ref = np.array([v for chain in float_to_int64_expected(x, dst) for v in chain], object)
    for t, e in zip((dst, *NARROWED), emu):
        want = [((int(v) & ((1 << t.bits) - 1)) ^ (1 << (t.bits - 1) if t.signed else 0))
                - ((1 << (t.bits - 1)) if t.signed else 0) for v in ref]
        assert e.tolist() == want, f"emulator, {dst} -> {t}"
    _, got = run_float_to_int64(src, dst, fp, "vulkan")
    chains = ["as is", "float clamp", "integer clamp", "both clamps"]
    n = len(x)
    differ = []
    for t, g, e in zip((dst, *NARROWED), got, emu):
        for k in np.flatnonzero(g != e)[:4]:
            differ.append(f"{chains[k // n]} -> {t}: x = {x[k % n]!r}: device {g[k]}, emulator {e[k]}")
    assert not differ, "\n".join(differ)
