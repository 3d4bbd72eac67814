"""Numerical semantics on the GPU (run with -m gpu): the driver workarounds of
docs/numerics.md and exact mode, against the independent references and bit for bit against
the emulator."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

import pycoop as pc
from pycoop import bf16, f16, f32, f64, i32, u32, u64
from pycoop.ops.core import fma_array

sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))
from numerics_cases import IEEE, INTS, cast_kernel, int_ties, narrowing_ties  # noqa: E402
# the integer tests run unchanged on the GPU (collected here under the gpu mark)
from test_vulkan_numerics import (_both, _contraction_kernel, f64_math, fma32, min_max32,  # noqa: E402,F401
                                  test_float_to_int64_whole_and_narrowed,
                                  test_runtime_range_steps_as_python_and_zero_steps_run_nothing,
                                  test_float_to_u64_then_narrowed, test_integer_ops_at_the_extremes,
                                  test_narrow_results_wrap)

pytestmark = pytest.mark.gpu


def test_float_controls_of_the_device():
    """What exact mode needs: signed zeros and round-to-nearest-even for f16/f32/f64."""
    from pycoop.runtime.vulkan import get_runtime
    caps = get_runtime().capabilities
    print(caps.describe())
    for w in (16, 32, 64):
        assert caps.float_controls[f"shaderSignedZeroInfNanPreserveFloat{w}"]
        assert caps.float_controls[f"shaderRoundingModeRTEFloat{w}"]


@pytest.mark.parametrize("src", INTS, ids=str)
@pytest.mark.parametrize("dst", IEEE, ids=str)
def test_int_to_float_at_ties(src, dst):
    x = int_ties(src, dst)
    n = len(x)
    gpu, emu = _both(cast_kernel(src, dst), -(-n // 64), x, np.zeros(n, dst.dtype), n)
    assert gpu[1].tobytes() == emu[1].tobytes()


@pytest.mark.parametrize("src,dst", [(f64, f32), (f64, f16), (f32, f16)], ids=str)
def test_float_narrowing_at_ties(src, dst):
    x = narrowing_ties(src, dst)
    gpu, emu = _both(cast_kernel(src, dst), -(-len(x) // 64), x, np.zeros(len(x), dst.dtype), len(x))
    assert gpu[1].tobytes() == emu[1].tobytes()


def test_f64_math_and_fma_bit_for_bit():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(200) * 1e3, [-0.0, 0.5, -2.5, 2.0 ** 60 + 1024]])
    n = len(x)
    gpu, emu = _both(f64_math, -(-n // 64), x, np.zeros(6 * n), n)
    assert gpu[1].tobytes() == emu[1].tobytes()


def test_fma_f32_is_fused():
    rng = np.random.default_rng(8)
    a = rng.standard_normal(512).astype(np.float32)
    b = rng.standard_normal(512).astype(np.float32)
    c = (-(a.astype(np.float64) * b)).astype(np.float32)
    gpu, emu = _both(fma32, 8, a, b, c, 512)
    assert gpu[2].tobytes() == emu[2].tobytes() == fma_array(a, b, c).tobytes()


@pytest.mark.parametrize("fp", ["exact", "strict"])
def test_exact_mode_bit_for_bit(fp):
    """No contraction of a + b*(a*b) in f16 (1-256 ULP differences before), signed zeros."""
    from pycoop.runtime.vulkan import get_runtime
    if fp == "strict" and not get_runtime().capabilities.float_controls["shaderDenormPreserveFloat16"]:
        pytest.skip("the device does not preserve f16 subnormals")
    rng = np.random.default_rng(9)
    a = rng.standard_normal(4096).astype(np.float16)
    b = rng.standard_normal(4096).astype(np.float16)
    a[:64] = np.float16(2.0 ** -14) * np.arange(64)      # products in the subnormal range
    gpu, emu = _both(_contraction_kernel(fp), 64, a, b, np.zeros(3 * 4096, np.float16), 4096)
    assert gpu[2].tobytes() == emu[2].tobytes()


@pc.kernel(workgroup_size=256, fp="fast")
def fast_contraction(A: pc.ReadBuffer[f32], B: pc.ReadBuffer[f32], O: pc.WriteBuffer[f32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        O[i] = A[i] * B[i] - A[i] * B[i]


def test_fast_mode_stays_within_one_rounding_of_the_product():
    """Fast mode may fuse a*b - a*b into fma(a, b, -(a*b)): the result is then the rounding
    error of a*b, at most half an ULP of the product (0 without contraction)."""
    rng = np.random.default_rng(10)
    a = rng.standard_normal(4096).astype(np.float32)
    b = rng.standard_normal(4096).astype(np.float32)
    o = np.full(4096, np.nan, np.float32)
    fast_contraction[16](a, b, o, 4096, backend="vulkan")
    p = (a * b).astype(np.float32)
    assert (np.abs(o) <= np.spacing(np.abs(p)) / 2).all()


def test_min_max_of_signed_zeros_and_nan():
    """The emulator's FMin/FMax (-0 < +0, a NaN gives the other operand) is the H100's."""
    n = np.nan
    x = np.array([0.0, -0.0, n, 1.0, n, -0.0, 2.0, -3.0], np.float32)
    y = np.array([-0.0, 0.0, 1.0, n, n, -0.0, 2.0, 4.0], np.float32)
    gpu, emu = _both(min_max32, 1, x, y, np.zeros(16, np.float32))
    # bit for bit, signs of zero included; a NaN is any NaN (the H100 returns 0x7fffffff for
    # min(NaN, NaN), NumPy 0x7fc00000: NaN payloads are not specified, docs/numerics.md)
    def bits(a):
        b = a.view(np.uint32).copy()
        b[np.isnan(a)] = 0x7FC00000
        return b
    np.testing.assert_array_equal(bits(gpu[2]), bits(emu[2]))


# ---------------------------------------------------------------- findings of 2026-11-27 (H200)

sys.path.insert(0, str(Path(__file__).parents[1] / "core"))
from test_numerics import (_round_trip_inputs, round_trip_expected, run_round_trips,  # noqa: E402
                           same_floats)


def test_f16_round_trips_bit_for_bit():
    """Driver workaround: f32 -> f16 -> f32 (and the f64, i64 and min/select variants) round
    through f16 on the device (the driver dropped the pair at seed 300640: -1.98e17 stayed
    -1.98e17 instead of -inf), over every f16 and the values around its range."""
    O, P = run_round_trips("vulkan")
    want_o, want_p = round_trip_expected(*_round_trip_inputs())
    emu_o, emu_p = run_round_trips("emulator")
    assert same_floats(emu_o, want_o) and same_floats(emu_p, want_p)
    bad = np.flatnonzero(~((O == want_o) | (np.isnan(O) & np.isnan(want_o)))
                         | (np.signbit(O) != np.signbit(want_o)) & ~np.isnan(want_o))
    assert same_floats(O, want_o), f"{len(bad)} f32 results differ, first {bad[:8]}: {O[bad[:8]]}"
    assert same_floats(P, want_p)


def test_f32_denormal_flush_is_the_allowance():
    """Seeds 300422 and 300561 (exact mode): the device flushes the f32 subnormal product; the
    fuzzer accepts it only as the `nvidia_f32_denormals_flushed` allowance, whose model must
    give the device's bits."""
    from pycoop.testing import Features, generate, run_program
    from pycoop.testing.allowances import allowances_for, vulkan_device
    allowed = {a.name for a in allowances_for(vulkan_device())}
    for seed in (300422, 300561):
        o = run_program(generate(seed, Features(fp="exact")), backend="vulkan", signed_zero=True)
        assert o.cls == "ok" and set(o.allowed) <= allowed, (seed, o)


def test_nv_inner_stride_driver_defect_is_as_documented(monkeypatch):
    """The known defect `nv_inner_stride` (docs/numerics.md): seed 100274's layout
    `.dimension(24, 36).stride(80, 2).slice(8, 16, 6, 16)`. The emulator reads element
    (r, c) at (8 + r) * 80 + (6 + c) * 2 (SPV_NV_tensor_addressing); the driver (580.159.04,
    H200) read (8 + r) * 80 + 6 * 2 + c for c < 2 and something else after that. This asserts
    the documented defect (the device differs from the specification) and prints where each
    element of the first row came from: when it fails, the driver changed, and the known defect
    and the docs need revisiting."""
    from pycoop.testing import generate, parse_features
    from pycoop.testing.runner import load, make_args
    module = load(generate(100274, parse_features("scalar,shared,khr,nv", "nv_inner_stride")).render())
    # pycoop refuses this module on NVIDIA (capabilities.DRIVER_DEFECTS); run it anyway to see
    from pycoop.runtime.vulkan import capabilities
    monkeypatch.setattr(capabilities, "DRIVER_DEFECTS", {})
    try:
        args = make_args(module)
        module.kern[1](*args, backend="vulkan")
    except pc.BackendUnavailable as e:
        pytest.skip(str(e))
    x, out = args[0], args[1].reshape(16, 16)
    r, c = np.mgrid[0:16, 0:16]
    spec = x[(8 + r) * 80 + (6 + c) * 2]
    emu = make_args(module)
    module.kern[1](*emu, backend="emulator")
    assert emu[1].reshape(16, 16).tobytes() == spec.tobytes()
    sources = [np.flatnonzero(x.view(np.uint16) == v).tolist()[:3] for v in out[0].view(np.uint16)]
    print("row 0 read from elements:", sources)
    assert out.tobytes() != spec.tobytes()


def _matrix_narrowing(scope: str, use: str, dst, rows: int, cols: int, invocations: int):
    """A kernel that converts f32 accumulators (rows x cols tiles of X, one per workgroup) to
    `dst` matrices of `use` ("acc": the KHR conversion, "A": the NV use change that the
    attention kernels use for P) and stores them."""
    sc = pc.Workgroup if scope == "workgroup" else pc.Subgroup
    Acc = pc.coopmat[f32, sc, rows, cols, pc.Accumulator]
    To = pc.coopmat[dst, sc, rows, cols, pc.Accumulator if use == "acc" else pc.UseA]
    n = rows * cols

    @pc.kernel(workgroup_size=invocations)
    def narrow(X: pc.Buffer[f32], Y: pc.Buffer[dst]):
        base = pc.workgroup_id.x * n
        m = Acc.load(X, base, cols)
        y = pc.convert(m, dst) if use == "acc" else pc.nv.convert(m, To)
        pc.store(Y, base, y, cols)
    return narrow


# (scope, use, rows, cols, invocations): the KHR conversion, the NV use change, and the
# attention kernels' f32 -> UseA conversion of P at workgroup scope
MATRIX_CONVERSIONS = [("subgroup", "acc", 16, 16, 32), ("subgroup", "A", 16, 16, 32),
                      ("workgroup", "A", 128, 64, 256)]
MATRIX_IDS = ["khr", "nv-use", "nv-workgroup"]


def _f16_ties() -> np.ndarray:
    """f32 values halfway between two neighbouring f16 values, the f32 values either side,
    and values past f16's range and in its subnormals."""
    edges = np.array([65504.0, 65519.99, 65520.0, 70000.0, 2.0 ** -24, 2.0 ** -25,
                      1.5 * 2.0 ** -25, 2.0 ** -26, 3e-6, 1e-7], np.float32)
    return np.concatenate([narrowing_ties(f32, f16), edges, -edges]).astype(np.float32)


def _run_matrix_conversion(dst, case, x: np.ndarray):
    scope, use, rows, cols, invocations = case
    n = rows * cols
    X = np.resize(x, -(-len(x) // n) * n).astype(np.float32)
    kern = _matrix_narrowing(scope, use, dst, rows, cols, invocations)
    try:
        gpu, emu = _both(kern, len(X) // n, X, np.zeros(len(X), dst.dtype))
    except pc.BackendUnavailable as e:           # a matrix type the device does not list
        pytest.skip(str(e))
    return X, gpu[1], emu[1]


@pytest.mark.parametrize("case", MATRIX_CONVERSIONS, ids=MATRIX_IDS)
def test_matrix_f16_narrowing_at_ties(case):
    """Matrix conversions to f16 round as scalar ones do (to nearest even): every f32 tie
    between two f16 values and its neighbours, bit for bit against the emulator."""
    X, got, emu = _run_matrix_conversion(f16, case, _f16_ties())
    with np.errstate(over="ignore"):         # NumPy rounds to nearest even
        assert emu.tobytes() == X.astype(np.float16).tobytes()
    g, e = got.view(np.uint16), emu.view(np.uint16)
    bad = np.flatnonzero(g != e)
    assert not len(bad), (f"{len(bad)} of {len(X)} differ; first: "
                          f"{[(float(X[i]), hex(g[i]), hex(e[i])) for i in bad[:6]]}")


def _bf16_ties() -> np.ndarray:
    """Normal f32 values halfway between two neighbouring bf16 values and the f32 values
    either side of each (subnormals left out: the driver flushes f32 subnormals), with values
    past bf16's range."""
    rng = np.random.default_rng(16)
    hi = rng.integers(0x0080, 0x7F7F, 400, dtype=np.uint32) << np.uint32(16)
    hi |= rng.integers(0, 2, 400, dtype=np.uint32) << np.uint32(31)
    mid = (hi | np.uint32(0x8000)).view(np.float32)
    edges = np.array([3.3895e38, 3.392e38, 3.3962e38, 3.4e38], np.float32)
    return np.concatenate([mid, np.nextafter(mid, np.float32(np.inf)),
                           np.nextafter(mid, np.float32(-np.inf)), edges, -edges])


def _toward_zero_bf16(x) -> np.ndarray:
    """The bits of each value rounded toward zero to bf16 (an exact model in Python numbers:
    8 significant bits kept, finite values past the range give the largest bf16)."""
    out = []
    for v in x.tolist():
        if isinstance(v, int):
            b = abs(v).bit_length()
            t = float((abs(v) >> max(b - 8, 0)) << max(b - 8, 0)) * (1 if v >= 0 else -1)
        else:
            m, e = math.frexp(v)
            t = math.ldexp(math.trunc(m * 256) / 256, e)
        t = math.copysign(min(abs(t), 3.3895313892515355e38), t)
        out.append(t)
    return np.array(out, np.float32).astype(bf16.dtype).view(np.uint16)


def _bf16_cases():
    rng = np.random.default_rng(5)
    x32 = _bf16_ties()
    return [(f32, x32), (f64, x32.astype(np.float64) * (1 + 2.0 ** -30)),
            (f16, (rng.standard_normal(2000) * 100).astype(np.float16)),
            (i32, rng.integers(-2 ** 31, 2 ** 31 - 1, 2000).astype(np.int32)),
            (u64, rng.integers(0, 2 ** 63, 2000).astype(np.uint64))]


@pytest.mark.parametrize("kind", ["scalar", *MATRIX_IDS])
def test_bf16_rounding_is_one_the_spec_allows(kind):
    """SPV_KHR_bfloat16 lets a device round bf16 results to nearest even or toward zero, and
    no execution mode selects one (docs/numerics.md): the device's bits must be the
    emulator's (to nearest even) everywhere or the model of rounding toward zero everywhere,
    one way for all the scalar conversions (from f32, f64, f16, i32 and u64), and for each
    matrix conversion. NVIDIA 580.159.04 (H200, 2026-11-28) rounds all of them toward zero."""
    seen = set()
    if kind == "scalar":
        runs = []
        for src, x in _bf16_cases():
            try:
                gpu, emu = _both(cast_kernel(src, bf16), -(-len(x) // 64), x,
                                 np.zeros(len(x), bf16.dtype), len(x))
            except pc.BackendUnavailable as e:       # no bf16 scalars (or f64) on the device
                pytest.skip(str(e))
            runs.append((str(src), x, gpu[1], emu[1]))
    else:
        case = MATRIX_CONVERSIONS[MATRIX_IDS.index(kind)]
        X, got, emu = _run_matrix_conversion(bf16, case, _bf16_ties())
        runs = [("f32 matrix", X, got, emu)]
    for name, x, got, emu in runs:
        g = got.view(np.uint16)
        if np.array_equal(g, emu.view(np.uint16)):
            seen.add("to nearest even")
            continue
        rtz = _toward_zero_bf16(x)
        bad = np.flatnonzero(g != rtz)
        assert not len(bad), (f"{name} -> bf16: {len(bad)} of {len(x)} results are neither "
                              f"rounding; first {[(x[i].item(), hex(g[i]), hex(rtz[i])) for i in bad[:4]]}")
        seen.add("toward zero")
    print(f"{kind}: bf16 conversions round {seen}")
    assert len(seen) == 1, f"the device rounds some bf16 conversions one way and some the other: {seen}"



def _matrix_arithmetic(el, scope: str, rows: int, cols: int, invocations: int):
    """a + b, a - b, a * b, a * s, -a and a * b + c (two roundings) of `el` accumulators, each
    stored to its own slice of O (6 results per element)."""
    sc = pc.Workgroup if scope == "workgroup" else pc.Subgroup
    M = pc.coopmat[el, sc, rows, cols, pc.Accumulator]
    n = rows * cols

    @pc.kernel(workgroup_size=invocations)
    def arith(A: pc.Buffer[el], B: pc.Buffer[el], C: pc.Buffer[el], O: pc.Buffer[el], s: el,
              total: u32):
        base = pc.workgroup_id.x * n
        a = M.load(A, base, cols)
        b = M.load(B, base, cols)
        c = M.load(C, base, cols)
        for k, r in enumerate((a + b, a - b, a * b, a * s, -a, a * b + c)):
            pc.store(O, total * k + base, r, cols)
    return arith


@pytest.mark.parametrize("el", [f16, f32], ids=str)
@pytest.mark.parametrize("case", [("subgroup", 16, 16, 32), ("workgroup", 64, 64, 128)],
                         ids=["subgroup", "workgroup"])
def test_matrix_arithmetic_bit_for_bit(el, case):
    """Element-wise matrix arithmetic in exact mode rounds each operation once, to nearest even,
    as the emulator does: random operands over many binades, including a * b + c, which
    must not be fused. (The fuzzer's matrix kernels keep every value exact, so this is where
    the rounding of matrix arithmetic is compared.)"""
    scope, rows, cols, inv = case
    rng = np.random.default_rng(11)
    n = rows * cols * 8
    lim = 6 if el == f16 else 30

    def draw():
        return (rng.standard_normal(n) * 2.0 ** rng.integers(-lim, lim, n)).astype(el.dtype)
    A, B, C = draw(), draw(), draw()
    s = el.dtype.type(1.0 + 2.0 ** -5 + 2.0 ** -9)
    try:
        gpu, emu = _both(_matrix_arithmetic(el, scope, rows, cols, inv), 8, A, B, C,
                         np.zeros(6 * n, el.dtype), s, n)
    except pc.BackendUnavailable as e:
        pytest.skip(str(e))
    g = gpu[3].reshape(6, n)
    e = emu[3].reshape(6, n)
    for k, name in enumerate(("a + b", "a - b", "a * b", "a * s", "-a", "a * b + c")):
        same = (g[k] == e[k]) & (np.signbit(g[k]) == np.signbit(e[k]))
        bad = np.flatnonzero(~(same | np.isnan(g[k]) & np.isnan(e[k])))
        assert not len(bad), (f"{name}: {len(bad)} of {n} differ; first "
                              f"{[(A[i], B[i], C[i], g[k][i], e[k][i]) for i in bad[:3]]}")


@pytest.mark.parametrize("src,dst", [(i32, f32), (i32, f16), (u32, f32), (f32, i32), (f16, i32),
                                     (f32, u32)], ids=str)
def test_matrix_integer_conversions_bit_for_bit(src, dst):
    """Matrix conversions between integers and floats (KHR, 16 x 16 accumulators): integers
    past 2^24 (f32) or 2^11 (f16) round to nearest even, past 65520 to infinity in f16;
    floats truncate toward zero (values in range: out of range is undefined)."""
    rng = np.random.default_rng(src.bits * 7 + dst.bits)
    n = 256 * 8
    if src.is_int:
        lo, hi = src.min_max()
        x = rng.integers(lo, hi, n, dtype=np.int64, endpoint=True)
        if dst == f16:             # most of i32 / u32 is past f16's range: keep a half inside
            x[::2] //= 2 ** 17
        # every third value at a tie of the target's rounding, or one either side
        bits = 24 if dst == f32 else 11
        for i in range(0, n, 3):
            step = 1 << max(abs(int(x[i])).bit_length() - bits, 0)
            x[i] = min(max(int(x[i]) // step * step + step // 2 + int(rng.integers(-1, 2)), lo), hi)
        X = x.astype(src.dtype)
    else:
        lo, hi = dst.min_max()
        span = min(float(hi), 60000.0 if src == f16 else 2.0 ** 31)
        X = rng.uniform(max(float(lo), -span), span, n).astype(src.dtype)
    Mi = pc.coopmat[src, pc.Subgroup, 16, 16, pc.Accumulator]

    @pc.kernel(workgroup_size=32)
    def conv(X: pc.Buffer[src], Y: pc.Buffer[dst]):
        base = pc.workgroup_id.x * 256
        pc.store(Y, base, pc.convert(Mi.load(X, base, 16), dst), 16)
    try:
        gpu, emu = _both(conv, 8, X, np.zeros(n, dst.dtype))
    except pc.BackendUnavailable as e:
        pytest.skip(str(e))
    bad = np.flatnonzero(gpu[1].view(f"u{dst.bits // 8}") != emu[1].view(f"u{dst.bits // 8}"))
    assert not len(bad), (f"{len(bad)} of {n} differ; first "
                          f"{[(X[i].item(), gpu[1][i].item(), emu[1][i].item()) for i in bad[:4]]}")
