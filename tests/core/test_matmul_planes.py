"""`matmul_q`'s planes path (N >= 2 vectors of Q4_0, Q8_0 or Q4_K weights): the planes GEMMs
on the activations' own layouts (`x_rows`), split-K by atomics or summed deterministically, on
the emulator against NumPy with llama.cpp's `gguf` package dequantising the weights; the
configuration rule; and the errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pycoop as pc
from pycoop.kernels import (GemvConfig, choose_kernel, dequantize_q4_k_planes,
                            gemm_q4_0_planes, matmul_q, q4_k_planes, weights)
from pycoop.kernels.gemv import planes_config

from gemv_cases import gguf, make_weights, qtype  # noqa: F401 (fixture)


def f16_weights(gguf, fmt, W, M, K):
    """The weights as the planes GEMMs multiply them: gguf's dequantisation rounded to f16
    (one rounding of scale x q), or for Q4_K the planes' own definition."""
    if fmt == "q4_k":
        return dequantize_q4_k_planes(*q4_k_planes(W, M, K), M, K).astype(np.float64)
    return np.asarray(gguf.quants.dequantize(W, qtype(gguf, fmt)), np.float16).astype(np.float64)


def check(y, X, Wf):
    ref = np.asarray(X, np.float16).astype(np.float64) @ Wf.T    # X rounded to f16
    tol = 4e-6 * np.abs(ref).max() * np.sqrt(Wf.shape[1]) + 1e-6
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=tol)


@settings(max_examples=30, deadline=None)
@given(fmt=st.sampled_from(["q4_0", "q8_0", "q4_k"]), m=st.sampled_from([64, 128, 192, 256]),
       k=st.sampled_from([256, 512, 768]), n=st.integers(2, 70),
       deterministic=st.booleans(), device=st.booleans(), f16_x=st.booleans(),
       seed=st.integers(0, 2**16))
def test_planes_path_matches_numpy(gguf, fmt, m, k, n, deterministic, device, f16_x, seed):
    W = make_weights(gguf, fmt, m, k, seed)
    X = np.random.default_rng(seed).standard_normal((n, k)).astype(np.float16 if f16_x else np.float32)
    cfg = choose_kernel(fmt, n, M=m, K=k)
    assert cfg.kind == "planes" and cfg == planes_config(m, n, k)
    launches = []
    if device:
        y = matmul_q(weights(W, fmt), pc.asarray(X, backend="emulator"),
                     deterministic=deterministic, launches=launches).numpy()
    else:
        y = matmul_q(W, X, fmt, backend="emulator", deterministic=deterministic, launches=launches)
    assert y.shape == (n, m) and y.dtype == np.float32
    stacked = cfg.split_k > 1 and deterministic
    assert len(launches) == 1 + stacked     # the GEMM (reading f16 or f32 X where it lies), sum
    check(y, X, f16_weights(gguf, fmt, W, m, k))


def test_planes_split_k_atomic_and_deterministic_agree_closely(gguf):
    W = make_weights(gguf, "q4_0", 128, 2048, 3)
    X = np.random.default_rng(3).standard_normal((20, 2048)).astype(np.float32)
    assert choose_kernel("q4_0", 20, M=128, K=2048).split_k == 16
    a = matmul_q(W, X, "q4_0", backend="emulator")
    b = matmul_q(W, X, "q4_0", backend="emulator", deterministic=True)
    c = matmul_q(W, X, "q4_0", backend="emulator", deterministic=True)
    np.testing.assert_array_equal(b, c)                       # the same order every time
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * np.abs(b).max())
    check(a, X, f16_weights(gguf, "q4_0", W, 128, 2048))


def test_planes_config_rule():
    """The sweep's best configurations on the H200 (bench/small_n_sweep.py)."""
    assert planes_config(4096, 16, 14336) == GemvConfig("planes", subgroups=4, tile=(128, 16, 64), split_k=16)
    assert planes_config(14336, 8, 4096) == GemvConfig("planes", subgroups=4, tile=(128, 16, 64), split_k=8)
    assert planes_config(4096, 32, 14336) == GemvConfig("planes", subgroups=2, tile=(128, 32, 64), split_k=16)
    assert planes_config(14336, 32, 4096).split_k == 4 and planes_config(14336, 64, 4096).split_k == 2
    assert planes_config(4096, 64, 14336) == GemvConfig("planes", subgroups=4, tile=(128, 64, 64), split_k=8)
    assert planes_config(4096, 512, 14336) == GemvConfig("planes", subgroups=2, tile=(128, 128, 64), split_k=2)
    assert planes_config(4096 + 64, 16, 4096).tile[0] == 64            # M a multiple of 64 only
    assert planes_config(4096 + 32, 16, 4096) is None                  # neither: the GEMV kernels
    assert planes_config(4096, 16, 4096 + 32) is None                  # K not whole 64-deep steps
    assert choose_kernel("q4_0", 16, M=4096 + 32, K=4096).kind == "gemv"
    assert choose_kernel("q4_0", 1, M=4096, K=4096).kind != "planes"   # N = 1: a GEMV kernel
    assert choose_kernel("f16", 16, M=4096, K=4096).kind == "gemv"     # no planes for f16
    assert choose_kernel("q4_0", 16).kind == "gemv"                    # shape unknown


def test_planes_x_rows_kernels_pass_spirv_val():
    for split, mode in ((1, "stacked"), (4, "stacked"), (4, "atomic")):
        for x_f32 in (False, True):
            assert gemm_q4_0_planes(128, 16, 64, 4, 1, split_k=split, split_k_mode=mode,
                                    x_rows=True, x_f32=x_f32).compile().spv   # spirv-val
    with pytest.raises(ValueError, match="x_f32 reads X as rows"):
        gemm_q4_0_planes(x_f32=True)


def test_planes_config_that_does_not_fit_is_refused(gguf):
    W = make_weights(gguf, "q4_0", 64, 256)
    X = np.ones((4, 256), np.float32)
    with pytest.raises(ValueError, match="tile .* does not fit M=64, K=256"):
        matmul_q(W, X, "q4_0", backend="emulator",
                 config=GemvConfig("planes", subgroups=4, tile=(128, 16, 64), split_k=1))


@settings(max_examples=15, deadline=None)
@given(fmt=st.sampled_from(["q4_0", "q8_0", "q4_k"]), n=st.integers(2, 70),
       split=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2**16))
def test_f16_x_is_read_where_it_lies(gguf, fmt, n, split, seed):
    """f16 X goes to the planes GEMM as it is (one launch, no copy padding its rows to the
    tile: rows past N read as zeros), with the bits f32 X rounded to f16 by the GEMM gives."""
    m, k = 128, 512
    W = make_weights(gguf, fmt, m, k, seed)
    X = np.random.default_rng(seed).standard_normal((n, k)).astype(np.float16)
    base = planes_config(m, n, k)
    cfg = GemvConfig("planes", subgroups=base.subgroups, tile=base.tile, split_k=split)
    launches = []
    a = matmul_q(weights(W, fmt), pc.asarray(X, backend="emulator"), config=cfg,
                 deterministic=True, launches=launches).numpy()
    assert len(launches) == 1 + (split > 1)                    # the GEMM (and the sum)
    b = matmul_q(W, X.astype(np.float32), fmt, backend="emulator", config=cfg,
                 deterministic=True)
    np.testing.assert_array_equal(a, b)
    check(a, X, f16_weights(gguf, fmt, W, m, k))
