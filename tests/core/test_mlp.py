"""The MLP block (pycoop.kernels.mlp): each of its kernels against NumPy, and the whole block on
the emulator against an f64 reference with dequantised weights (gguf's dequantisation), within
a bound propagated through the block from each projection's own error bound: the q8_1
quantisation bound (`q8_1_error_bound`) on the integer path, f16 rounding of activations and
weights on the GEMM path (2^-10 relative to sum |w x| for Q4_0; for Q4_K the planes' weights
within `q4_k_planes`' documented bound), f32 rounding on the float GEMV path."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pycoop as pc
from pycoop.kernels import (MLPBlock, mlp_reference, q4_k_planes, q8_1_error_bound,
                            quantize_q8_1_reference)
from pycoop.kernels import mlp
from pycoop.kernels.gemv import planes_config, weights

from core_helpers import FEW
from gemv_cases import gguf, qtype  # noqa: F401 (fixture)

EMU = "emulator"


def arr(a):
    return pc.asarray(np.ascontiguousarray(a), backend=EMU)


def make(gguf, fmt: str, M: int, K: int, seed: int) -> np.ndarray:
    """M x K weights of a realistic scale (|w| about 0.05): gguf's Q4_0 quantisation of normal
    values, or random Q4_K super-blocks with small d and dmin (gguf cannot quantise Q4_K)."""
    rng = np.random.default_rng(seed)
    if fmt == "q4_0":
        return gguf.quants.quantize((0.05 * rng.standard_normal((M, K))).astype(np.float32),
                                    qtype(gguf, fmt))
    b = rng.integers(0, 256, (M * K // 256, 144), dtype=np.uint8)
    b[:, :4] = rng.uniform(2e-4, 2e-3, (M * K // 256, 2)).astype(np.float16).view(np.uint8)
    return b.reshape(M, -1)


def silu(a):
    return a / (1 + np.exp(-a))


def norm_ref(x, nw, eps=1e-5):
    x = np.asarray(x, np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * nw


# ---------------------------------------------------------------- kernels


@FEW
@given(st.integers(1, 4), st.sampled_from([32, 64, 288, 1056]), st.integers(0, 2**16),
       st.sampled_from([8, 32]), st.booleans())
def test_rms_norm_q8_1(T, H, seed, sg, held):
    """Row read in a loop, or loaded at once over several workgroups (H at build)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((T, H)) * rng.uniform(0.1, 10)).astype(np.float32)
    nw = rng.uniform(0.5, 1.5, H).astype(np.float32)
    nb = T * H // 32
    q, d, s = arr(np.zeros(nb * 8, np.uint32)), arr(np.zeros(nb, np.float32)), arr(np.zeros(nb, np.int32))
    grid = (T, mlp.rows_held_parts(H)) if held else T
    mlp.rms_norm_q8_1(sg, H if held else None)[grid](arr(x).reshape(-1, 4), arr(nw).reshape(-1, 4),
                                                     q, d, s, H, 1e-5)
    n = norm_ref(x, nw)
    qr, dr, sr = quantize_q8_1_reference(n.astype(np.float32))
    qk = q.numpy().view(np.int8).reshape(T, H).astype(np.int32)
    np.testing.assert_allclose(d.numpy(), dr.reshape(-1), rtol=1e-5)
    # the norm's f32 sum differs from NumPy's by an ulp or so: a value on a half may round
    # the other way, never further
    assert np.abs(qk - qr).max() <= 1
    assert (np.abs(qk - qr) > 0).mean() < 0.01
    assert np.array_equal(s.numpy(), qk.reshape(nb, 32).sum(-1))
    deq = qk.reshape(T, -1, 32) * d.numpy().reshape(T, -1, 1)
    assert (np.abs(deq.reshape(T, H) - n) <= np.repeat(dr, 32, axis=1) * 0.5001 + 1e-6).all()


@FEW
@given(st.integers(1, 5), st.sampled_from([4, 8, 100, 1000, 1028]), st.integers(0, 2**16),
       st.booleans())
def test_rms_norm_f16_and_scale(T, H, seed, held):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, H)).astype(np.float32)
    nw = rng.uniform(0.5, 1.5, H).astype(np.float32)
    y = arr(np.zeros((T, H), np.float16))
    grid = (T, mlp.rows_held_parts(H)) if held else T
    mlp.rms_norm_f16(32, H if held else None)[grid](arr(x).reshape(-1, 4), arr(nw).reshape(-1, 4),
                                                    y.view(np.uint32).reshape(-1, 2), H, 1e-5)
    # f32 values within 2e-6 of the reference, then rounded to f16: at most one f16 step apart
    ref = norm_ref(x, nw)
    np.testing.assert_allclose(y.numpy(), ref, rtol=2.0 ** -10, atol=2.0 ** -24)
    assert (y.numpy() == ref.astype(np.float16)).mean() > 0.99
    r = arr(np.zeros(T, np.float32))
    mlp.rms_scale(32)[T](arr(x).reshape(-1, 4), r, H, 1e-5)
    np.testing.assert_allclose(r.numpy(), 1 / np.sqrt((x.astype(np.float64) ** 2).mean(-1) + 1e-5),
                               rtol=2e-6)


def test_rows_loaded_at_once_need_a_whole_length():
    with pytest.raises(ValueError, match="multiple of 4"):
        mlp.rms_norm_f16(32, 1030)


@FEW
@given(st.integers(1, 9), st.sampled_from([8, 16, 64]), st.sampled_from([8, 96]), st.integers(0, 2**16))
def test_rms_norm_t(T, ld_extra, H, seed):
    rng = np.random.default_rng(seed)
    ld = -(-T // 8) * 8 + ld_extra - 8
    x = rng.standard_normal((T, H)).astype(np.float32)
    nw = rng.uniform(0.5, 1.5, H).astype(np.float32)
    r = (1 / np.sqrt((x.astype(np.float64) ** 2).mean(-1) + 1e-5)).astype(np.float32)
    y = arr(np.full((H * ld // 8, 4), 0xFFFFFFFF, np.uint32))
    mlp.rms_norm_t[mlp._groups(H * ld // 8)](arr(x).reshape(-1), arr(r), arr(nw), y, T, H, ld)
    got = y.numpy().view(np.float16).reshape(H, ld)
    want = np.zeros((H, ld), np.float16)
    want[:, :T] = ((x * r[:, None]) * nw).astype(np.float16).T
    assert np.array_equal(got, want)


@FEW
@given(st.integers(1, 4), st.sampled_from([32, 96, 320]), st.integers(0, 2**16))
def test_swiglu_q8_1_and_f16(N, I, seed):
    rng = np.random.default_rng(seed)
    y = (3 * rng.standard_normal((N, 2 * I))).astype(np.float32)
    h = silu(y[:, :I].astype(np.float64)) * y[:, I:]
    nb = N * I // 32
    q, d, s = arr(np.zeros(nb * 8, np.uint32)), arr(np.zeros(nb, np.float32)), arr(np.zeros(nb, np.int32))
    mlp.swiglu_q8_1(32)[mlp._groups(N * I // 4)](arr(y).reshape(-1, 4), q, d, s, N, I)
    qr, dr, _ = quantize_q8_1_reference(h.astype(np.float32))
    qk = q.numpy().view(np.int8).reshape(N, I).astype(np.int32)
    np.testing.assert_allclose(d.numpy(), dr.reshape(-1), rtol=1e-5)
    assert np.abs(qk - qr).max() <= 1 and (qk != qr).mean() < 0.01
    assert np.array_equal(s.numpy(), qk.reshape(nb, 32).sum(-1))
    hf = arr(np.zeros((N, I), np.float16))
    mlp.swiglu_f16[mlp._groups(N * I // 4)](arr(y).reshape(-1, 4), hf.view(np.uint32).reshape(-1, 2),
                                            N, I)
    np.testing.assert_allclose(hf.numpy(), h, rtol=2.0 ** -10, atol=2.0 ** -24)
    assert (hf.numpy() == h.astype(np.float16)).mean() > 0.99


@FEW
@given(st.sampled_from([8, 24]), st.sampled_from([8, 16]), st.integers(0, 2**16))
def test_swiglu_t_and_residuals(I, ld, seed):
    rng = np.random.default_rng(seed)
    y = (3 * rng.standard_normal((2 * I, ld))).astype(np.float32)
    h = arr(np.zeros((I * ld // 8, 4), np.uint32))
    mlp.swiglu_t[mlp._groups(I * ld // 8)](arr(y).reshape(-1, 4), h, I * ld // 8)
    want = (silu(y[:I].astype(np.float64)) * y[I:]).astype(np.float32)
    got = h.numpy().view(np.float16).reshape(I, ld).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=2.0 ** -10, atol=1e-6)
    T, H = ld - 3, I
    x = rng.standard_normal((T, H)).astype(np.float32)
    o = arr(np.zeros((T, H), np.float32))
    yd = y[:H]
    mlp.residual_t[mlp._groups(T * H)](arr(x).reshape(-1), arr(yd).reshape(-1), o.reshape(-1), T, H, ld)
    assert np.array_equal(o.numpy(), x + yd[:, :T].T)
    o2 = arr(np.zeros((T, H), np.float32))
    yy = rng.standard_normal((T, H)).astype(np.float32)
    mlp.residual_add[mlp._groups(T * H // 4)](arr(x).reshape(-1, 4), arr(yy).reshape(-1, 4),
                                              o2.reshape(-1, 4), T * H // 4)
    assert np.array_equal(o2.numpy(), x + yy)


# ---------------------------------------------------------------- the block


def propagated_bound(x, Wg, Wu, Wd, nw, proj):
    """A bound on |block - reference| from `proj(W, v)`, a bound on the error of one projection
    of v (also covering v's own error where given as proj(W, v, dv)): the gate and up errors
    Bg, Bu give |dh| <= 1.1 Bg |u| + |silu(g)| Bu + 1.1 Bg Bu (|silu'| <= 1.1), and the down
    projection adds |Wd| @ |dh| and its own error on h."""
    n = norm_ref(x, nw)
    g, u = n @ Wg.T, n @ Wu.T
    Bg, Bu = proj(Wg, n, 0), proj(Wu, n, 0)
    dh = 1.1 * Bg * np.abs(u) + np.abs(silu(g)) * Bu + 1.1 * Bg * Bu
    h = silu(g) * u
    return np.abs(dh) @ np.abs(Wd).T + proj(Wd, h, dh)


def q8_1_proj(W, v, dv):
    vmax = np.abs(v) + dv                         # quantised values may be off by dv
    d = vmax.reshape(v.shape[0], -1, 32).max(-1) / 127
    return q8_1_error_bound(W, d) + 1e-5 * np.abs(v) @ np.abs(W).T


def f16_proj(W, v, dv):
    return (2.0 ** -10 + 1e-5) * (np.abs(v) + dv) @ np.abs(W).T


def q4_k_planes_proj(raws, activations=None):
    """The projection bound of the paths over Q4_K planes: f16 activations (2^-11 relative; or
    `activations(W, v, dv)`, q8_1's for the token GEMVs) and the planes' weights, each within q4_k_planes' documented bound of llama.cpp's w = p - m:
    2^-11 (1.01 |w| + 2.01 p + 1.01 m) + 2^-20, p and m from the planes (over by at most
    their own f16 rounding, 2^-10 relative)."""
    bounds = {}
    for W, (raw, M, K) in raws.items():
        Q, D = q4_k_planes(raw, M, K)
        nib = Q.view(np.uint8).reshape(-1, 16)
        q = np.concatenate([nib & 15, nib >> 4], 1).astype(np.float64)
        p = (1 + 2.0 ** -10) * q * D[:, :1].astype(np.float64)
        m = (1 + 2.0 ** -10) * np.broadcast_to(D[:, 1:].astype(np.float64), q.shape)
        w = np.abs(p - m)
        bounds[W] = (2.0 ** -11 * (1.01 * w + 2.01 * p + 1.01 * m) + 2.0 ** -20).reshape(M, K)

    def proj(W, v, dv):
        a = np.abs(v) + dv
        x_err = (2.0 ** -11 + 1e-5) * a @ np.abs(W).T if activations is None else \
            activations(W, v, dv)
        return x_err + (1 + 2.0 ** -11) * a @ bounds[id(W)].T
    return proj


@pytest.mark.parametrize("fmt", ["q4_0", "q4_k"])
@pytest.mark.parametrize("T", [1, 5, 12, 24, 64, 70])
def test_block_against_reference(gguf, fmt, T, H=256, I=512):
    Wg, Wu, Wd = make(gguf, fmt, I, H, 1), make(gguf, fmt, I, H, 2), make(gguf, fmt, H, I, 3)
    deq = [gguf.quants.dequantize(w, qtype(gguf, fmt)).astype(np.float64) for w in (Wg, Wu, Wd)]
    rng = np.random.default_rng(T)
    nw = rng.uniform(0.5, 1.5, H).astype(np.float32)
    blk = MLPBlock(Wg, Wu, Wd, nw, fmt, backend=EMU)
    x = rng.standard_normal((T, H)).astype(np.float32)
    y = blk(arr(x))
    assert isinstance(y, pc.Array) and y.shape == (T, H) and y.backend == EMU
    ref = mlp_reference(x, *deq, nw)
    planes = {id(d): (w, *d.shape) for w, d in zip((Wg, Wu, Wd), deq)}
    if T <= mlp.PLANES_MAX_N:            # q8_1 activations, the planes' weights
        proj = q8_1_proj if fmt == "q4_0" else q4_k_planes_proj(planes, q8_1_proj)
    else:                                # f16 activations, the GEMMs' weights
        proj = f16_proj if fmt == "q4_0" else q4_k_planes_proj(planes)
    bound = propagated_bound(x, *deq, nw, proj) + 1e-6 * np.abs(ref)
    err = np.abs(y.numpy() - ref)
    assert (err <= bound).all(), (err / bound).max()
    assert np.abs(ref - x).max() > 10 * err.max()             # the test is not vacuous


@pytest.mark.parametrize("fmt", ["q4_0", "q4_k"])
def test_block_deterministic_sums_splits_apart(gguf, fmt, T=12, H=256, I=512):
    """`deterministic=True`: both split-K GEMMs of the 8 < T <= 64 path write their splits
    apart and sum them in a launch of their own (two more launches than the atomic form), and
    the result keeps to the f16 path's bound (the reference test's, at the same size)."""
    W = [make(gguf, fmt, I, H, 1), make(gguf, fmt, I, H, 2), make(gguf, fmt, H, I, 3)]
    nw = np.random.default_rng(1).uniform(0.5, 1.5, H).astype(np.float32)
    x = arr(np.random.default_rng(2).standard_normal((T, H)).astype(np.float32))
    atomic, det = (MLPBlock(*W, nw, fmt, backend=EMU, deterministic=d) for d in (False, True))
    ya, yd = atomic(x).numpy(), det(x).numpy()
    assert len(det.launches) == len(atomic.launches) + 2
    np.testing.assert_allclose(yd, ya, rtol=1e-5, atol=1e-5 * np.abs(ya).max())


def test_block_prefill_gemms_off_the_64_grid(gguf):
    """H = 64, I = 96 (the docs' example): the prefill GEMMs take 32 x 32 x 32 tiles (down's
    K = 96 is no multiple of 64); at 12 tokens down, which no planes GEMM fits, goes to the
    GEMV kernels with its f16 rows widened."""
    assert mlp._tile(192, 64, 64, 96) == (32, 32, 32, 1, 1)
    test_block_against_reference(gguf, "q4_0", 70, H=64, I=96)
    test_block_against_reference(gguf, "q4_0", 12, H=64, I=96)


@pytest.mark.parametrize("fmt", ["q4_0", "q4_k"])
def test_block_prefill_gemms_specialised_and_whole(gguf, fmt, monkeypatch):
    """Where the GEMMs' tiles fill the GPU (here: SMS lowered to 1) they run unsplit with the
    shape specialised; the block still meets the bound (above, at these sizes, both GEMMs
    split K in two)."""
    assert mlp._split(8, 256, 64) == 2
    monkeypatch.setattr(mlp, "SMS", 1)
    assert mlp._split(8, 256, 64) == 1
    test_block_against_reference(gguf, fmt, 70)


def test_down_gemm_takes_two_16_vector_tiles_at_17_to_32_tokens(gguf):
    """17-32 tokens: down as two 16-vector tiles (the gate/up GEMM keeps its 32-vector ones),
    split-K within 1,024 workgroups; other T and shapes no planes tile fits: matmul_q's own.
    The 24-token reference test above runs it."""
    H, I = 4096, 14336
    blk = MLPBlock.__new__(MLPBlock)
    blk.down = weights(np.zeros((H, I // 32 * 18), np.uint8), "q4_0", K=I)
    cfg = blk._down_config(24)
    assert (cfg.kind, cfg.tile, cfg.subgroups, cfg.split_k) == ("planes", (128, 16, 64), 4, 16)
    assert blk._down_config(32) == cfg
    assert blk._down_config(16) is None and blk._down_config(33) is None
    blk.down = weights(np.zeros((96, 64 // 32 * 18), np.uint8), "q4_0", K=64)
    assert blk._down_config(24) is None                         # 96 rows: no 128-row tile
    assert planes_config(4096, 24, 14336).tile == (128, 32, 64)        # matmul_q's own


def test_device_time_of_the_last_call(gguf):
    """On the emulator (no device timestamps) the sum of the launches' times; before any
    call a clear error."""
    H, I = 64, 96
    W = [make(gguf, "q4_0", I, H, 1), make(gguf, "q4_0", I, H, 2), make(gguf, "q4_0", H, I, 3)]
    blk = MLPBlock(*W, np.ones(H, np.float32), "q4_0", backend=EMU)
    with pytest.raises(RuntimeError, match="not been called yet"):
        blk.device_time_ms()
    blk(arr(np.ones((2, H), np.float32)))
    assert blk.device_time_ms() == pytest.approx(sum(r.time_ms for r in blk.launches))
    assert blk.device_time_ms() > 0


@pytest.mark.parametrize("tiles,K,split", [(128, 14336, 2), (896, 4096, 1), (131, 128, 2),
                                           (132, 4096, 1), (64, 192, 1)])
def test_prefill_split_rule(tiles, K, split):
    """Two splits below one tile per SM (132), where K divides into two whole 64-deep halves."""
    assert mlp._split(tiles, K, 64) == split


def test_block_one_vector_and_errors(gguf):
    H, I = 64, 96
    W = [make(gguf, "q4_0", I, H, 1), make(gguf, "q4_0", I, H, 2), make(gguf, "q4_0", H, I, 3)]
    nw = np.ones(H, np.float32)
    blk = MLPBlock(*W, nw, "q4_0", backend=EMU)
    x = np.random.default_rng(0).standard_normal(H).astype(np.float32)
    y1 = blk(arr(x))
    assert y1.shape == (H,)
    np.testing.assert_array_equal(y1.numpy(), blk(arr(x[None]))[0].numpy())
    with pytest.raises(TypeError, match="pc.Array"):
        blk(x)
    with pytest.raises(ValueError, match="T x 64"):
        blk(arr(np.zeros((2, 32), np.float32)))
    with pytest.raises(ValueError, match="no tokens"):
        blk(arr(np.zeros((0, 64), np.float32)))
    buf = arr(np.concatenate([np.zeros(4, np.float32), x]))      # views 16 and 4 bytes in
    np.testing.assert_array_equal(blk(buf[4:]).numpy(), y1.numpy())
    with pytest.raises(ValueError, match="x is a view 4 bytes into its buffer; .* 16-byte "
                                         "aligned"):
        blk(buf[1:1 + H])
    with pytest.raises(ValueError, match="I x H"):
        MLPBlock(W[0], W[1], W[0], nw, "q4_0", backend=EMU)
    with pytest.raises(ValueError, match="norm_weight"):
        MLPBlock(*W, np.ones(3, np.float32), "q4_0", backend=EMU)
    with pytest.raises(ValueError, match="deterministic must be True or False, got 'yes'"):
        MLPBlock(*W, nw, "q4_0", backend=EMU, deterministic="yes")
    with pytest.raises(ValueError, match="small_t .* must be an int >= 0, got 8.5"):
        MLPBlock(*W, nw, "q4_0", backend=EMU, small_t=8.5)
    for eps in (None, -1.0, "1e-5", 1e300, np.array([1e-5]), True):
        with pytest.raises(ValueError, match="eps .* must be a number >= 0 that f32 holds"):
            MLPBlock(*W, nw, "q4_0", backend=EMU, eps=eps)
    for bad in (np.array(["ones"] * H), np.ones(H, bool), np.ones(H, np.complex64)):
        with pytest.raises(ValueError, match="norm_weight must be H = 64 real numbers, got "
                                             "dtype"):
            MLPBlock(*W, bad, "q4_0", backend=EMU)
    MLPBlock(*W, np.ones(H, ml_dtypes.bfloat16), "q4_0", backend=EMU)    # bf16 is real
    with pytest.raises(ValueError, match=r"norm_weight is a vector of H = 64 values, got shape "
                                         r"\(8, 8\)"):
        MLPBlock(*W, np.ones((8, 8), np.float32), "q4_0", backend=EMU)
    with pytest.raises(ValueError, match="T x 64"):
        blk(arr(np.float32(1)))                                  # a 0-d array
