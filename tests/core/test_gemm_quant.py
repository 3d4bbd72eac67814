"""The large-N GEMMs over Q8_0 and Q4_K weights (pycoop.kernels.gemm_quant) on the emulator
against NumPy dequantise-then-matmul with llama.cpp's own `gguf` package as the reference, the
formats' NumPy helpers against gguf and their lossless round trips, and spirv-val of every
configuration tested."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pycoop.kernels import (GemvConfig, choose_kernel, dequantize_q4_k, dequantize_q4_k_planes,
                            dequantize_q8_0, gemm_q4_k, gemm_q4_k_planes, gemm_q8_0,
                            gemm_q8_0_planes, matmul_q, q4_0_planes, q4_k_planes, q8_0_blocks,
                            q8_0_planes, quantize_q4_k, quantize_q8_0, sum_splits)

from gemv_cases import gguf, make_weights, qtype, reference  # noqa: F401 (fixture)

DECODED = {"q8_0": gemm_q8_0, "q4_k": gemm_q4_k}


def close(y, ref):
    """f16 weights and activations: the decoded weight is rounded to f16 once."""
    np.testing.assert_allclose(y, ref, rtol=2e-3, atol=2e-3 * np.abs(ref).max())


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 9), blocks=st.integers(1, 6), seed=st.integers(0, 2**16),
       scale=st.sampled_from([1e-4, 1.0, 300.0]))
def test_q8_0_helpers_match_gguf_bit_for_bit(gguf, m, blocks, seed, scale):
    w = (np.random.default_rng(seed).standard_normal((m, 32 * blocks)) * scale).astype(np.float32)
    w[0, :32] = 0                                  # an all-zero block: d = 0
    q = quantize_q8_0(w)
    np.testing.assert_array_equal(q, gguf.quants.quantize(w, qtype(gguf, "q8_0")))
    np.testing.assert_array_equal(dequantize_q8_0(q, m, 32 * blocks),
                                  gguf.quants.dequantize(q, qtype(gguf, "q8_0")))
    Q, D = q8_0_planes(q, m, 32 * blocks)         # planes and back: the GGUF bytes, losslessly
    assert Q.shape == (m * blocks * 2, 4) and D.shape == (m * blocks,)
    np.testing.assert_array_equal(q8_0_blocks(Q, D, m), q)


@settings(max_examples=15, deadline=None)
@given(m=st.integers(1, 6), blocks=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_q4_k_dequantisation_matches_gguf_on_random_super_blocks(gguf, m, blocks, seed):
    raw = make_weights(gguf, "q4_k", m, 256 * blocks, seed)
    np.testing.assert_array_equal(dequantize_q4_k(raw, m, 256 * blocks),
                                  gguf.quants.dequantize(raw, qtype(gguf, "q4_k")))


@settings(max_examples=15, deadline=None)
@given(m=st.integers(1, 6), blocks=st.integers(1, 3), seed=st.integers(0, 2**16),
       shift=st.sampled_from([0.0, 2.0, -2.0]))
def test_q4_k_quantisation_is_read_back_by_gguf_within_a_step(gguf, m, blocks, seed, shift):
    w = np.random.default_rng(seed).standard_normal((m, 256 * blocks)).astype(np.float32) + shift
    w[0, :32] = 0                                  # a constant sub-block
    q = quantize_q4_k(w)
    assert q.shape == (m, 144 * blocks) and q.dtype == np.uint8
    back = gguf.quants.dequantize(q, qtype(gguf, "q4_k"))
    np.testing.assert_array_equal(back, dequantize_q4_k(q, m, 256 * blocks))
    # within one step of the super-block's widest sub-block (15 steps span [min(w, 0), max w])
    x = w.reshape(m, blocks, 8, 32)
    step = (x.max(-1) - np.minimum(x.min(-1), 0)).max(-1) / 15           # m x blocks
    err = np.abs(back - w).reshape(m, blocks, 256).max(-1)
    assert (err <= step * 1.01 + 1e-6).all(), (err / step).max()
    np.testing.assert_array_equal(back[0, :32], 0)


def test_helpers_check_their_shapes():
    with pytest.raises(ValueError, match="K a multiple of 32"):
        quantize_q8_0(np.zeros((2, 48)))
    with pytest.raises(ValueError, match="K a multiple of 256"):
        quantize_q4_k(np.zeros((2, 128)))
    with pytest.raises(ValueError, match="dequantize_q4_k: 2 x 256 q4_k weights are 288 bytes, "
                                         "got 144"):
        dequantize_q4_k(np.zeros(144, np.uint8), 2, 256)
    with pytest.raises(ValueError, match="q4_0_planes: q4_0 needs K a multiple of 32"):
        q4_0_planes(np.zeros((4, 54), np.uint8), 4, 100)
    with pytest.raises(ValueError, match="q4_0_planes: 5 x 96 q4_0 weights are 270 bytes, got 216"):
        q4_0_planes(np.zeros((4, 54), np.uint8), 5, 96)


CASES = [  # format, (BM, BN, BK, invocations, unroll, specialize), clamp, weights_first, M, N, K
    ("q8_0", (64, 32, 32, 128, 1, False), "constant", False, 100, 72, 96),      # ragged M and N
    ("q8_0", (64, 32, 32, 128, 1, False), "constant", True, 37, 50, 160),
    ("q8_0", (64, 64, 64, 128, 2, True), "undefined", False, 128, 64, 256),
    ("q8_0", (32, 64, 32, 128, 1, False), "undefined", True, 64, 128, 64),
    ("q4_k", (64, 32, 32, 128, 1, False), "constant", False, 100, 72, 256),     # ragged M and N
    ("q4_k", (64, 32, 64, 128, 1, False), "constant", True, 45, 40, 512),
    ("q4_k", (64, 64, 256, 128, 1, True), "undefined", False, 64, 64, 512),     # whole super-blocks
    ("q4_k", (32, 64, 32, 128, 2, False), "undefined", True, 64, 128, 256)]


@pytest.mark.parametrize("fmt,cfg,clamp,first,M,N,K", CASES)
def test_decoded_gemms_match_gguf(gguf, fmt, cfg, clamp, first, M, N, K):
    rng = np.random.default_rng(M + N + K)
    X = rng.standard_normal((M, K)).astype(np.float16)
    W = make_weights(gguf, fmt, N, K, seed=M)
    Y = np.full((M, N), np.nan, np.float32)
    BM, BN, BK, inv, unroll, spec = cfg
    k = DECODED[fmt](BM, BN, BK, inv, unroll, spec, clamp=clamp, weights_first=first)
    k[(-(-M // BM), -(-N // BN))](X, W, Y, M, N, K, backend="emulator")
    close(Y, reference(gguf, fmt, W, X))
    assert k.compile(**({"M": M, "N": N, "K": K} if spec else {})).spv     # spirv-val


def test_decoded_gemms_check_their_tiling():
    with pytest.raises(ValueError, match="BK must be a multiple of 32"):
        gemm_q8_0(64, 64, 16)
    with pytest.raises(ValueError, match="divides or is a multiple of the 256-weight Q4_K block"):
        gemm_q4_k(64, 64, 96)
    with pytest.raises(ValueError, match="N of 64 and K a multiple of 64"):
        gemm_q8_0(64, 64, 32, 128, 2, True, clamp="undefined").compile(M=64, N=64, K=96)


def run_planes(k, planes, X, cfg, M, N, K, split_k, mode):
    """Y = W @ X by planes GEMM `k` on the emulator, its split-K partial products summed."""
    atomic = mode == "atomic"
    P = np.zeros((M if atomic else split_k * M, N), np.float32)
    k[(M // cfg[0], N // cfg[1], split_k)](*planes, X.view(np.uint32).reshape(-1, 4), P, M, N, K,
                                           backend="emulator")
    if split_k == 1 or atomic:
        return P
    Y = np.zeros((M, N), np.float32)
    n4 = M * N // 4
    sum_splits(split_k)[(-(-n4 // 256),)](P.reshape(-1, 4), Y.reshape(-1, 4), n4,
                                           backend="emulator")
    return Y


PLANES = [  # (BM, BN, BK, SGM, SGN), M, N, K, specialize, split_k, mode
    ((64, 64, 64, 2, 2), 128, 64, 64, True, 1, "stacked"),       # one k-step
    ((64, 64, 32, 1, 2), 64, 128, 96, False, 1, "stacked"),      # one block per row and k-step
    ((64, 64, 128, 2, 2), 64, 64, 256, True, 1, "stacked"),      # four blocks per row
    ((128, 64, 64, 4, 2), 128, 64, 128, False, 1, "stacked"),    # as many blocks as invocations
    ((64, 64, 64, 2, 2), 64, 64, 256, True, 2, "stacked"),
    ((64, 64, 64, 2, 2), 64, 64, 384, False, 3, "atomic")]


@pytest.mark.parametrize("cfg,M,N,K,spec,split_k,mode", PLANES)
def test_q8_0_planes_gemm_matches_gguf(gguf, cfg, M, N, K, spec, split_k, mode):
    rng = np.random.default_rng(K + split_k)
    W = rng.standard_normal((M, K)).astype(np.float32)
    W[:, :32] *= 1e-3                                  # small scales next to large ones
    Wq = quantize_q8_0(W)
    X = rng.standard_normal((K, N)).astype(np.float16)
    k = gemm_q8_0_planes(*cfg, specialize=spec, split_k=split_k, split_k_mode=mode)
    Y = run_planes(k, q8_0_planes(Wq, M, K), X, cfg, M, N, K, split_k, mode)
    ref = reference(gguf, "q8_0", Wq, X.T).T            # W @ X
    close(Y, ref)
    assert k.compile(**({"M": M, "N": N, "K": K} if spec else {})).spv


def _q4_k_parts(raw, rows, K):
    """Per weight of Q4_K bytes, independently of the library: the nibble q, d * sc and
    dmin * m (f32, exact), with llama.cpp's get_scale_min_k4 written out per sub-block."""
    b = np.asarray(raw, np.uint8).reshape(rows, K // 256, 144)
    d = b[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    dmin = b[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    s = b[..., 4:16].astype(np.uint32)
    q = np.zeros((rows, K // 256, 256), np.float32)
    ds, dm = np.zeros_like(q), np.zeros_like(q)
    for j in range(8):
        if j < 4:
            sc, mn = s[..., j] & 63, s[..., j + 4] & 63
        else:
            sc = (s[..., j + 4] & 0xF) | ((s[..., j - 4] >> 6) << 4)
            mn = (s[..., j + 4] >> 4) | ((s[..., j] >> 6) << 4)
        nib = b[..., 16 + 32 * (j // 2): 48 + 32 * (j // 2)] >> (4 * (j % 2)) & 15
        q[..., 32 * j: 32 * j + 32] = nib
        ds[..., 32 * j: 32 * j + 32] = (d * sc)[..., None]
        dm[..., 32 * j: 32 * j + 32] = (dmin * mn)[..., None]
    return q.reshape(rows, K), ds.reshape(rows, K), dm.reshape(rows, K)


def _q4_k_bytes(rows, K, seed, scale=0.05):
    """Random Q4_K super-blocks, d and dmin uniform in [scale / 50, scale] (f16)."""
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 256, (rows * K // 256, 144), dtype=np.uint8)
    b[:, :4] = rng.uniform(scale / 50, scale, (len(b), 2)).astype(np.float16).view(np.uint8)
    return b.reshape(rows, -1)


def q4_k_planes_bound(raw, rows, K):
    """The documented bound on |planes' weight - llama.cpp's| (q4_k_planes' docstring)."""
    q, ds, dm = _q4_k_parts(raw, rows, K)
    p, m = (ds * q).astype(np.float64), dm.astype(np.float64)
    return 2.0 ** -11 * (1.01 * np.abs(p - m) + 2.01 * p + 1.01 * m) + 2.0 ** -20


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 6), blocks=st.integers(1, 4), seed=st.integers(0, 2**16),
       scale=st.sampled_from([1e-6, 1e-3, 0.05, 10.0]))
def test_q4_k_planes_dequantise_as_documented(gguf, m, blocks, seed, scale):
    K = 256 * blocks
    raw = _q4_k_bytes(m, K, seed, scale)
    Q, D = q4_k_planes(raw, m, K)
    assert Q.shape == (m * K // 32, 4) and Q.dtype == np.uint32
    assert D.shape == (m * K // 32, 2) and D.dtype == np.float16
    q, ds, dm = _q4_k_parts(raw, m, K)
    # Q: byte j of a sub-block holds its weight j (low nibble) and j + 16 (high), as Q4_0
    nib = Q.view(np.uint8).reshape(-1, 16)
    np.testing.assert_array_equal(np.concatenate([nib & 15, nib >> 4], 1).reshape(m, K), q)
    # D: d * sc and dmin * m rounded once to f16
    np.testing.assert_array_equal(D[:, 0], ds.reshape(-1, 32)[:, 0].astype(np.float16))
    np.testing.assert_array_equal(D[:, 1], dm.reshape(-1, 32)[:, 0].astype(np.float16))
    # the weights: f16(f16(q * scale) - min), bit for bit
    s, mn = ds.astype(np.float16).astype(np.float64), dm.astype(np.float16).astype(np.float64)
    want = (q * s).astype(np.float16).astype(np.float64) - mn     # exact in f64, then rounded
    got = dequantize_q4_k_planes(Q, D, m, K)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want.astype(np.float16))
    # within the documented f16 rounding bound of gguf's dequantisation
    ref = gguf.quants.dequantize(raw, qtype(gguf, "q4_k")).astype(np.float64)
    assert (np.abs(got.astype(np.float64) - ref) <= q4_k_planes_bound(raw, m, K)).all()


@pytest.mark.parametrize("cfg,M,N,K,spec,split_k,mode", [
    ((64, 64, 64, 2, 2), 128, 64, 256, True, 1, "stacked"),
    ((64, 64, 32, 1, 2), 64, 128, 256, False, 1, "stacked"),     # one sub-block per row and k-step
    ((64, 64, 128, 2, 2), 64, 64, 512, True, 1, "stacked"),      # four sub-blocks per row
    ((128, 64, 64, 4, 2), 128, 64, 256, False, 1, "stacked"),    # as many sub-blocks as invocations
    ((64, 64, 64, 2, 2), 64, 64, 256, True, 2, "stacked"),
    ((64, 64, 64, 2, 2), 64, 64, 768, False, 3, "atomic"),
    ((64, 64, 96, 2, 1), 64, 64, 768, True, 2, "stacked")])      # k-steps across super-blocks
def test_q4_k_planes_gemm(gguf, cfg, M, N, K, spec, split_k, mode):
    raw = _q4_k_bytes(M, K, K + split_k)
    raw.reshape(M, -1, 144)[:, 0, :4] = np.array([2e-4, 1e-4], np.float16).view(np.uint8)  # small
    X = np.random.default_rng(K).standard_normal((K, N)).astype(np.float16)
    Q, D = q4_k_planes(raw, M, K)
    k = gemm_q4_k_planes(*cfg, specialize=spec, split_k=split_k, split_k_mode=mode)
    Y = run_planes(k, (Q, D), X, cfg, M, N, K, split_k, mode)
    Xa = np.abs(X.astype(np.float64))
    Wp = dequantize_q4_k_planes(Q, D, M, K).astype(np.float64)
    acc = K * 2.0 ** -23 * (np.abs(Wp) @ Xa)         # f32 accumulation of K products
    # the planes' weights exactly, up to the f32 sums
    assert (np.abs(Y - Wp @ X.astype(np.float64)) <= acc).all()
    # gguf's weights within the planes' f16 rounding bound
    ref = reference(gguf, "q4_k", raw, X.T).T          # W @ X
    assert (np.abs(Y - ref) <= q4_k_planes_bound(raw, M, K) @ Xa + acc).all()
    assert k.compile(**({"M": M, "N": N, "K": K} if spec else {})).spv


def test_q4_k_planes_check_their_shapes():
    with pytest.raises(ValueError, match="q4_k_planes: q4_k needs K a multiple of 256"):
        q4_k_planes(np.zeros(144, np.uint8), 1, 128)
    with pytest.raises(ValueError, match="Q4_K 32-weight blocks per invocation"):
        gemm_q4_k_planes(64, 64, 32, 2, 2)             # 64 sub-blocks for 128 invocations


def test_q8_0_planes_gemm_checks_its_tiling():
    with pytest.raises(ValueError, match="BK a multiple of 32"):
        gemm_q8_0_planes(64, 64, 48)
    with pytest.raises(ValueError, match="Q8_0 blocks per invocation"):
        gemm_q8_0_planes(64, 64, 32, 2, 2)             # 64 blocks for 128 invocations


@pytest.mark.parametrize("fmt,M,K,N", [("q8_0", 40, 96, 70), ("q4_k", 33, 512, 65)])
def test_matmul_q_sends_large_n_to_the_decoded_gemm(gguf, fmt, M, K, N):
    """N > 64 Q8_0 / Q4_K run gemm_q8_0 / gemm_q4_k (f16 activations), ragged M and N."""
    assert choose_kernel(fmt, N) == GemvConfig("coopmat", tile=(128, 128, 32))
    assert choose_kernel(fmt, 64).kind == "gemv"
    W = make_weights(gguf, fmt, M, K, seed=N)
    X = np.random.default_rng(N).standard_normal((N, K)).astype(np.float32)
    close(matmul_q(W, X, fmt, backend="emulator"), reference(gguf, fmt, W, X.astype(np.float16)))
    # below 128 vectors with the weights as the A operand, in tiles of 32 vectors
    y = matmul_q(W, X[:20], fmt, backend="emulator", large_n=16)
    assert choose_kernel(fmt, 20, large_n=16) == GemvConfig("coopmat", tile=(32, 128, 32))
    close(y, reference(gguf, fmt, W, X[:20].astype(np.float16)))


@pytest.mark.parametrize("quantize,dequantize,width,big,limit", [
    (quantize_q8_0, dequantize_q8_0, 64, 9e6,
     r"scale max \|w\| / 127 = 70866.1 does not fit in f16 \(at most 65504\): a block's max "
     r"\|w\| must stay below about 8.32e6"),
    (quantize_q4_k, dequantize_q4_k, 512, 7e7,
     r"scale d \(.*\) = 74074.1 does not fit in f16 .* below about 6.19e7")])
def test_quantisers_refuse_scales_f16_cannot_hold(quantize, dequantize, width, big, limit):
    """A scale past f16's range was stored as inf: weights of inf or NaN, silently."""
    w = np.zeros((3, width), np.float32)
    w[2, width // 2] = big                            # the second block of row 2
    block = "super-block" if quantize is quantize_q4_k else "block"
    with pytest.raises(ValueError, match=rf"{quantize.__name__}: row 2, {block} 1: its {limit}"):
        quantize(w)
    w[2, width // 2] = big / 1.2                      # within the limit: read back closely
    back = dequantize(quantize(w), 3, width)
    np.testing.assert_allclose(back, w, rtol=0, atol=big / 1.2 / 100)


def test_quantize_q8_0_takes_the_largest_scale_and_q4_k_checks_dmin():
    w = np.zeros((1, 32), np.float32)
    w[0, 0] = 65504 * 127                             # d = 65504, the largest f16
    np.testing.assert_array_equal(dequantize_q8_0(quantize_q8_0(w), 1, 32), w)
    with pytest.raises(ValueError, match=r"quantize_q4_k: row 0, super-block 1: its scale dmin "
                                         r"\(-min\(w\) / 63\) = 79365.1 .* below about 4.13e6"):
        quantize_q4_k(np.concatenate([np.zeros((1, 256)), np.full((1, 256), -5e6)], 1))


@pytest.mark.parametrize("quantize,width", [(quantize_q8_0, 64), (quantize_q4_k, 512)])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_quantisers_refuse_non_finite_weights(quantize, width, value):
    w = np.ones((2, width), np.float32)
    w[1, width - 1] = value
    block = "super-block" if quantize is quantize_q4_k else "block"
    with pytest.raises(ValueError, match=rf"{quantize.__name__}: w must be finite \(as f32\), got "
                                         rf"{value} in row 1, {block} 1 \(column {width - 1}\)"):
        quantize(w)


@pytest.mark.parametrize("quantize,width", [(quantize_q8_0, 32), (quantize_q4_k, 256)])
@pytest.mark.parametrize("w", [np.ones((1, 256), complex), np.ones((1, 256), bool),
                               np.array([["1.0"] * 256])], ids=["complex", "bool", "str"])
def test_quantisers_take_real_weights_only(quantize, width, w):
    """Converting to f32 would drop an imaginary part with a warning only, read bools as 0
    and 1, or fail inside NumPy."""
    with pytest.raises(ValueError, match=f"{quantize.__name__} takes real weights .* got dtype"):
        quantize(w[:, :width])


@pytest.mark.parametrize("a", [1e-3, 1e-4, 4e-5, 1e-5])
def test_q4_k_scales_round_up_so_tiny_weights_keep_their_offsets(a):
    """d and dmin below f16's normal range, rounded to nearest, could become 0 (a sub-block
    lost its offset: errors of twice its largest weight); rounded up, 63 multiples still
    cover the sub-block and the error stays the format's."""
    u = np.random.default_rng(3).uniform(-1, 1, (16, 512))
    u[:, ::32] = 1.0                                # every block's largest |w| is a
    w = (u * a).astype(np.float32)
    err = np.abs(dequantize_q4_k(quantize_q4_k(w), 16, 512) - w).max()
    assert err <= 0.07 * a, err / a


def test_q8_0_blocks_check_the_planes():
    q = quantize_q8_0(np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32))
    Q, D = q8_0_planes(q, 4, 64)                      # 8 blocks: Q 16 x 4 u32, D 8 f16
    np.testing.assert_array_equal(q8_0_blocks(Q, D, np.int64(4)), q)
    for bad in (4.0, 0, None, True):
        with pytest.raises(ValueError, match="q8_0_blocks: rows must be an int >= 1, got "):
            q8_0_blocks(Q, D, bad)
    with pytest.raises(ValueError, match=r"q8_0_blocks: D's 8 scales \(one per block\) do not "
                                         r"divide into rows=3 rows"):
        q8_0_blocks(Q, D, 3)
    with pytest.raises(ValueError, match=r"q8_0_blocks: Q must hold 8 u32 \(two uvec4\) per "
                                         r"block, 64 for the 8 blocks of D, got 32"):
        q8_0_blocks(Q[:8], D, 4)
    with pytest.raises(ValueError, match="q8_0_blocks: Q must hold 8 u32 .* got 256"):
        q8_0_blocks(Q.view(np.uint8), D, 4)           # bytes, not words
    with pytest.raises(ValueError, match="q8_0_blocks: D must be the f16 scales"):
        q8_0_blocks(Q, None, 4)


def test_dequantize_q4_k_planes_checks_the_planes():
    Q, D = q4_k_planes(_q4_k_bytes(2, 512, 0), 2, 512)   # 32 sub-blocks
    want = dequantize_q4_k_planes(Q, D, 2, 512)
    # the planes hold sub-blocks in order: rows x K of the same count read them alike
    np.testing.assert_array_equal(dequantize_q4_k_planes(Q, D, np.int64(4), 256),
                                  want.reshape(4, 256))
    for arg, bad in (("rows", 2.0), ("rows", 0), ("K", None), ("K", "512")):
        a = {"rows": 2, "K": 512, arg: bad}
        with pytest.raises(ValueError, match=f"dequantize_q4_k_planes: {arg} must be an int >= 1"):
            dequantize_q4_k_planes(Q, D, a["rows"], a["K"])
    with pytest.raises(ValueError, match="K must be a multiple of 32 .* got K=80"):
        dequantize_q4_k_planes(Q, D, 2, 80)
    with pytest.raises(ValueError, match=r"2 x 512 weights are 32 sub-blocks of 32: Q must hold "
                                         r"128 u32 \(a uvec4 each\) and D 64 f16 \(scale and "
                                         r"min\), got 128 and 32"):
        dequantize_q4_k_planes(Q, D[:16], 2, 512)
    with pytest.raises(ValueError, match="got 64 and 64"):
        dequantize_q4_k_planes(Q[:16], D, 2, 512)
    with pytest.raises(ValueError, match="dequantize_q4_k_planes: Q must be the nibbles"):
        dequantize_q4_k_planes(None, D, 2, 512)


def test_matmul_q_with_a_float_planes_tile_leaves_no_broken_kernel():
    """A float tile (64.0 == 64) used to cache gemm_q8_0_planes(64.0, ...) for later int calls."""
    W = quantize_q8_0(np.random.default_rng(1).standard_normal((64, 128)).astype(np.float32))
    X = np.random.default_rng(2).standard_normal((16, 128)).astype(np.float32)
    with pytest.raises(ValueError, match="64.0"):
        matmul_q(W, X, "q8_0", backend="emulator",
                 config=GemvConfig("planes", subgroups=4, tile=(64.0, 16, 64)))
    y = matmul_q(W, X, "q8_0", backend="emulator",
                 config=GemvConfig("planes", subgroups=4, tile=(64, 16, 64)))
    Wf = dequantize_q8_0(W, 64, 128).astype(np.float16).astype(np.float32)
    close(y, X.astype(np.float16).astype(np.float32) @ Wf.T)
    with pytest.raises(ValueError, match="gemm_q8_0_planes: BM must be an int >= 1, got 64.0"):
        gemm_q8_0_planes(64.0, 16, 64, 4, 1, split_k=1, split_k_mode="stacked", x_rows=True,
                         x_f32=True)
