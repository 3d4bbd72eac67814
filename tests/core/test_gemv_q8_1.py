"""The integer path of the GEMV kernels (pycoop.kernels.gemvq) on the emulator: the activation
quantiser bit for bit against its NumPy definition (rounding halves away from zero, tiny and
zero blocks), the Q8_0/Q4_0 integer-dot-product kernels exactly where every float step is exact
(power-of-two scales), within their f32 summation of the NumPy reference terms elsewhere, and
within the quantisation error bound of gguf's dequantised float reference; the dispatcher's
`activations=` option; every module passes spirv-val."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pycoop as pc
from pycoop.kernels import (GemvConfig, choose_kernel, gemv_grid, gemv_q8_1, gemv_q8_1_reference,
                            matmul_q, q8_1_error_bound, quantize_grid, quantize_q8_1,
                            quantize_q8_1_reference, weights)

from core_helpers import FEW
from gemv_cases import gguf, make_weights, qtype, reference  # noqa: F401 (fixture)

BYTES = {"q8_0": 34, "q4_0": 18}


def run_quantize(X, subgroups=2, subgroup_size=8, backend="emulator"):
    """(q int8 N x K, d, s) from the quantize_q8_1 kernel."""
    N, K = X.shape
    nb = N * K // 32
    Q, D, S = np.zeros(nb * 8, np.uint32), np.zeros(nb, np.float32), np.zeros(nb, np.int32)
    src = "f16" if X.dtype == np.float16 else "f32"
    quantize_q8_1(src, subgroups, subgroup_size)[quantize_grid(nb, subgroups, subgroup_size)](
        np.ascontiguousarray(X).reshape(-1, 4), Q, D, S, nb, backend=backend)
    return Q.view(np.int8).reshape(N, K), D.reshape(N, -1), S.reshape(N, -1)


def run_gemv(fmt, W, q, d, s, cfg: GemvConfig, subgroup_size=8, backend="emulator"):
    """Y from gemv_q8_1 on raw blocks W and quantised activations (q, d, s)."""
    M, N, K = W.shape[0], q.shape[0], q.shape[1]
    k = gemv_q8_1(fmt, cfg.rows, cfg.nt, cfg.subgroups, subgroup_size, cfg.parts, cfg.unroll)
    Q = np.ascontiguousarray(q).view(np.uint32).reshape((-1, 4) if cfg.parts == 1 else (-1,))
    Y = np.zeros((N, M), np.float32)
    k[gemv_grid(M, N, cfg.rows, cfg.nt, cfg.subgroups)](
        weights(W, fmt).kernel_array(), Q, d.reshape(-1), s.reshape(-1), Y, M, N, K,
        backend=backend)
    return Y


def summation_tolerance(fmt, W, q, d, s, parts):
    """The f32 summation error bound of the kernel's terms: (blocks per row + subgroup lanes)
    unit roundoffs of the sum of their magnitudes."""
    n = q.shape[1] // 32 + 64
    return n * 2.0 ** -24 * gemv_q8_1_reference(W, fmt, q, d, s, parts, absolute=True) + 1e-30


def test_quantize_rounds_halves_away_from_zero():
    """Values at exact halves (amax = 127: inv = d = 1): 2.5 -> 3, -2.5 -> -3, 0.5 -> 1,
    -0.5 -> -1, 126.5 -> 127; the block sum is of the rounded values; an all-zero block and a
    block below 2^-96 give d = 0 and zeros."""
    x = np.zeros((3, 32), np.float32)
    x[0, :6] = [127.0, 2.5, -2.5, 0.5, -0.5, 126.5]
    x[0, 6:10] = [1.49999988, -1.5, 3.4999998, 0.49999997]
    x[2, :4] = [2.0 ** -97, -(2.0 ** -98), 0.0, 2.0 ** -100]
    for src in (np.float32, np.float16):
        X = x if src == np.float32 else x[:2].astype(np.float16)
        q, d, s = run_quantize(X)
        rq, rd, rs = quantize_q8_1_reference(X)
        np.testing.assert_array_equal(q, rq)
        np.testing.assert_array_equal(d.view(np.uint32), rd.view(np.uint32))
        np.testing.assert_array_equal(s, rs)
    q, d, s = quantize_q8_1_reference(x)
    want = [127, 3, -3, 1, -1, 127, 1, -2, 3, 0]
    assert q[0, :10].tolist() == want and s[0, 0] == sum(want) and d[0, 0] == 1.0
    assert not q[1:].any() and d[1, 0] == 0 and d[2, 0] == 0 and s[1:].sum() == 0


@pytest.mark.parametrize("backend", ["emulator", pytest.param("vulkan", marks=pytest.mark.vulkan)])
def test_a_block_with_nan_or_inf_quantises_to_a_nan_scale(backend, gguf):
    """A NaN or an infinity makes its block's d NaN with zero q and s (the kernel bit for bit
    as the reference; before, the emulator reported an undefined float-to-int conversion and
    a GPU gave finite garbage), so every product with that block is NaN, as on the f32 path;
    the other blocks are as before."""
    if backend == "vulkan":
        try:
            pc.get_runtime("vulkan")
        except pc.BackendUnavailable as e:
            pytest.skip(f"no Vulkan device: {e}")
    rng = np.random.default_rng(5)
    X = rng.standard_normal((2, 128)).astype(np.float32)
    X[0, 5], X[0, 70], X[1, 127] = np.nan, np.inf, -np.inf
    for src in (np.float32, np.float16):
        q, d, s = run_quantize(X.astype(src), backend=backend)
        rq, rd, rs = quantize_q8_1_reference(X.astype(src))
        np.testing.assert_array_equal(q, rq)
        np.testing.assert_array_equal(d.view(np.uint32), rd.view(np.uint32))
        np.testing.assert_array_equal(s, rs)
        assert np.isnan(d).tolist() == [[True, False, True, False], [False, False, False, True]]
        assert not q[0, :32].any() and s[0, 0] == 0
        good = quantize_q8_1_reference(np.where(np.isfinite(X), X, 0).astype(src))
        np.testing.assert_array_equal(q[:, 32:64], good[0][:, 32:64])
    W = make_weights(gguf, "q4_0", 16, 128, seed=1)
    Y = matmul_q(W, X, "q4_0", activations="q8_1", backend=backend, subgroup_size=8)
    assert np.isnan(Y).all()
    Y = matmul_q(W, np.where(np.isfinite(X), X, 0), "q4_0", activations="q8_1",
                 backend=backend, subgroup_size=8)
    assert np.isfinite(Y).all()


@FEW
@given(n=st.integers(1, 5), blocks=st.integers(1, 5), src=st.sampled_from(["f32", "f16"]),
       scale=st.sampled_from([1e-3, 1.0, 7.5, 3e4]), seed=st.integers(0, 2**16),
       sg=st.sampled_from([8, 16, 32]))
def test_quantize_matches_its_definition(n, blocks, src, scale, seed, sg):
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal((n, blocks * 32)) * scale).astype(
        np.float32 if src == "f32" else np.float16)
    X[0, :32] = X[0, :32] * (seed % 3 == 0)               # sometimes an all-zero block
    q, d, s = run_quantize(X, 2, sg)
    rq, rd, rs = quantize_q8_1_reference(X)
    np.testing.assert_array_equal(q, rq)
    np.testing.assert_array_equal(d.view(np.uint32), rd.view(np.uint32))
    np.testing.assert_array_equal(s, rs)
    # what it promises: |x - q d| <= d / 2 (+ rounding), |q| <= 127, s the sum of q
    Xf = X.astype(np.float64)
    dk = np.repeat(rd.astype(np.float64), 32, axis=1)
    assert (np.abs(Xf - rq * dk) <= dk * (0.5 + 2.0 ** -14)).all()
    assert np.abs(rq.astype(int)).max() <= 127
    np.testing.assert_array_equal(rs, rq.reshape(n, blocks, 32).astype(np.int32).sum(-1))


def exact_case(fmt, M, N, nb, seed):
    """Blocks whose weight scales are powers of two and activations whose block maxima are
    127 * 2^j with values on that grid: every quantised value is exact and every f32 step of
    the kernel (scale products, the terms and their sums, kept under 2^24 units) is exact, so
    any summation order gives the reference bit for bit."""
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 256, (M, nb, BYTES[fmt]), dtype=np.uint8)
    b[..., :2] = (2.0 ** rng.integers(-6, -2, (M, nb, 1))).astype(np.float16).view(np.uint8)
    j = rng.integers(-3, 1, (N, nb, 1))
    v = rng.integers(-40, 41, (N, nb, 32)).astype(np.float64)
    v[..., 0] = 127 * np.where(rng.random((N, nb)) < 0.5, 1, -1)
    X = (v * 2.0 ** j).reshape(N, nb * 32).astype(np.float32)
    return b.reshape(M, -1), X


CONFIGS = [GemvConfig("q8_1", 1, 1, 2, None, 4), GemvConfig("q8_1", 2, 3, 2, 2, 2),
           GemvConfig("q8_1", 3, 2, 1, None, 1), GemvConfig("q8_1", 1, 8, 2, True, 1),
           GemvConfig("q8_1", 2, 1, 4, None, 8)]


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"r{c.rows}nt{c.nt}sg{c.subgroups}p{c.parts}")
@pytest.mark.parametrize("sg", [8, 32])
def test_gemv_q8_1_exact_with_power_of_two_scales(fmt, cfg, sg):
    if fmt == "q4_0" and cfg.parts == 8:
        cfg = GemvConfig("q8_1", cfg.rows, cfg.nt, cfg.subgroups, cfg.unroll, 4)
    M, N, nb = 13, cfg.nt + 2, 7
    W, X = exact_case(fmt, M, N, nb, seed=cfg.rows * 10 + cfg.nt)
    q, d, s = quantize_q8_1_reference(X)
    assert (q.astype(np.float64) * np.repeat(d, 32, 1) == X).all()     # quantised exactly
    y = run_gemv(fmt, W, q, d, s, cfg, sg)
    ref = gemv_q8_1_reference(W, fmt, q, d, s, cfg.parts)
    np.testing.assert_array_equal(y, ref.astype(np.float32))
    assert np.array_equal(ref, ref.astype(np.float32))                  # the sum is exact
    ck = gemv_q8_1(fmt, cfg.rows, cfg.nt, cfg.subgroups, sg, cfg.parts, cfg.unroll).compile()
    dots = sum(1 for ln in ck.spvasm.splitlines() if "OpSUDot" in ln or "OpSDot" in ln)
    words = (4 if fmt == "q4_0" else 8) // cfg.parts * (2 if fmt == "q4_0" else 1)
    assert dots == cfg.rows * cfg.nt * words                            # one per word pair


@FEW
@given(fmt=st.sampled_from(["q8_0", "q4_0"]), m=st.integers(1, 40), blocks=st.integers(1, 6),
       n=st.sampled_from([1, 2, 3, 4, 7, 16, 33, 64]), seed=st.integers(0, 2**16))
def test_matmul_q8_1_against_its_reference_and_gguf(gguf, fmt, m, blocks, n, seed):
    """The dispatcher's integer kernel for N vectors (one tile of up to 64): within the f32
    summation of the reference's terms, and within the quantisation bound of X @ W.T with W
    dequantised by gguf."""
    K = blocks * 32
    W = make_weights(gguf, fmt, m, K, seed)
    X = np.random.default_rng(seed + 1).standard_normal((n, K)).astype(np.float32)
    cfg = choose_kernel(fmt, n, activations="q8_1")
    if cfg.kind == "gemv_planes":      # the dispatcher's N = 1 (Q8_0: 2) kernel: test_gemv_planes
        nt = 1 << (n - 1).bit_length()
        cfg = GemvConfig("q8_1", 2, nt, parts=4 if nt == 1 else 2 if nt <= 4 else 1)
    y = matmul_q(W, X, fmt, backend="emulator", activations="q8_1", config=cfg)
    assert y.shape == (n, m) and y.dtype == np.float32 and cfg.kind == "q8_1"
    q, d, s = quantize_q8_1_reference(X)
    ref = gemv_q8_1_reference(W, fmt, q, d, s, cfg.parts)
    assert (np.abs(y - ref) <= summation_tolerance(fmt, W, q, d, s, cfg.parts)).all()
    Wf = gguf.quants.dequantize(W, qtype(gguf, fmt))
    bound = q8_1_error_bound(Wf, d)
    assert (np.abs(y - reference(gguf, fmt, W, X)) <= bound + 1e-5 * np.abs(ref).max()).all()


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_weights_loaded_once_for_every_vector_of_the_tile(fmt):
    """The small-N kernels read each weight word once per tile: the loads in the K loop are a
    fixed number for the weights plus a fixed number per vector (activation words, scale,
    block sum), so 1, 2 and 16 vectors differ only by the per-vector loads."""
    def loads(nt):
        asm = gemv_q8_1(fmt, 2, nt, 2, 32, 1).compile().spvasm.splitlines()
        head = next(i for i, ln in enumerate(asm) if "OpLoopMerge" in ln)
        return sum(1 for ln in asm[head:] if "= OpLoad" in ln)
    per_vector = loads(2) - loads(1)
    assert per_vector == (4 if fmt == "q4_0" else 3)     # 2 uvec4 of q, d (and s)
    assert loads(16) == loads(1) + 15 * per_vector


def test_f16_activations_and_device_arrays(gguf):
    W = make_weights(gguf, "q4_0", 21, 96, seed=3)
    X = np.random.default_rng(3).standard_normal((5, 96)).astype(np.float16)
    q, d, s = quantize_q8_1_reference(X)
    with pc.use_backend("emulator"):
        Wq = weights(W, "q4_0")
        y = matmul_q(Wq, pc.asarray(X), activations="q8_1")
        y1 = matmul_q(Wq, pc.asarray(X[2]), activations="q8_1")
    assert isinstance(y, pc.Array) and y.shape == (5, 21) and y1.shape == (21,)
    ref = gemv_q8_1_reference(W, "q4_0", q, d, s, 2)
    assert (np.abs(y.numpy() - ref) <= summation_tolerance("q4_0", W, q, d, s, 2)).all()
    np.testing.assert_array_equal(y.numpy(), matmul_q(W, X, "q4_0", backend="emulator",
                                                      activations="q8_1"))
    np.testing.assert_allclose(y1.numpy(), y.numpy()[2], rtol=1e-5, atol=1e-5)


def test_choose_kernel_for_the_integer_path():
    """Up to 8 vectors: gemv_planes (subgroups sharing rows); more: the GGUF-block kernel."""
    assert choose_kernel("q4_0", 1, activations="q8_1") == GemvConfig("gemv_planes", 1, 1, 4,
                                                                      split_k=2)
    assert choose_kernel("q4_0", 2, activations="q8_1") == GemvConfig("gemv_planes", 2, 2, 8,
                                                                      split_k=2)
    assert choose_kernel("q8_0", 3, activations="q8_1") == GemvConfig("gemv_planes", 2, 4, 8,
                                                                      split_k=2)
    assert choose_kernel("q8_0", 8, activations="q8_1") == GemvConfig("gemv_planes", 4, 8, 4,
                                                                      split_k=2)
    assert choose_kernel("q4_0", 9, activations="q8_1") == GemvConfig("q8_1", 2, 16, parts=1)
    assert choose_kernel("q4_0", 16, activations="q8_1") == GemvConfig("q8_1", 2, 16, parts=1)
    assert choose_kernel("q4_0", 64, activations="q8_1") == GemvConfig("q8_1", 1, 64, parts=1)
    assert choose_kernel("q4_0", 500, activations="q8_1").nt == 64     # tiles of 64
    assert choose_kernel("q4_0", 3).kind == "gemv"                       # float path default


@pytest.mark.parametrize("call,message", [
    (lambda: gemv_q8_1("q4_k"), "takes q8_0, q4_0 weights"),
    (lambda: gemv_q8_1("q4_0", parts=8), "at most the 4 payload words"),
    (lambda: gemv_q8_1("q8_0", parts=3), "parts must be 1, 2, 4"),
    (lambda: gemv_q8_1("q8_0", rows=2, nt=64), "at most 64"),
    (lambda: gemv_q8_1("q8_0", subgroup_size=12), "subgroup_size must be"),
    (lambda: quantize_q8_1("bf16"), "'f32' or 'f16'"),
    (lambda: quantize_q8_1("f32", subgroup_size=4), "at least 8"),
    (lambda: quantize_q8_1_reference(np.zeros((2, 40), np.float32)), "multiple of 32"),
    (lambda: choose_kernel("q4_k", 9, activations="q8_1"), "N <= 8"),
    (lambda: choose_kernel("f16", 1, activations="q8_1"), "not f16"),
    (lambda: choose_kernel("q4_0", 1, activations="int8"), "'f32' .* or 'q8_1'"),
    (lambda: matmul_q(np.zeros((4, 32), np.float16), np.zeros((1, 32), np.float32),
                      activations="q8_1"), "not f16"),
    (lambda: matmul_q(np.zeros((4, 18), np.uint8), np.zeros((1, 32), np.float32), "q4_0",
                      activations="q8_1", config=GemvConfig("gemv")), "kind 'q8_1' or"),
])
def test_integer_path_errors_before_any_work(call, message):
    with pytest.raises(ValueError, match=message):
        call()
