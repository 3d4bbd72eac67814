"""The fused split-K GEMM (gemm_khr_staged(split_k_mode="atomic")): every workgroup adds its
share of K into C with f32 atomic adds. On the emulator the adds land in invocation order, so
C is exactly the f32 sum, in split order, of the stacked mode's partial products; against the
f32 reference it agrees within summation-order rounding. Its module passes spirv-val and
declares the float-atomic capability and device feature."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from pycoop.kernels import gemm_khr_staged, gemm_q4_0_planes, gemm_reference, q4_0_planes

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
from q4_0_gemm import dequantize_q4_0, quantize_q4_0  # noqa: E402


@pytest.mark.parametrize("vector_copy", [False, True])
@pytest.mark.parametrize("split_k", [2, 3])
def test_atomic_split_k_sums_the_partial_products_in_split_order(vector_copy, split_k):
    M, N, K = 128, 64, 64 * split_k
    r = np.random.default_rng(split_k)
    A = r.standard_normal((M, K)).astype(np.float16)
    B = r.standard_normal((K, N)).astype(np.float16)
    a, b = (A.view(np.uint32).reshape(-1, 4), B.view(np.uint32).reshape(-1, 4)) if vector_copy else (A, B)
    grid = (M // 64, N // 64, split_k)
    fused = gemm_khr_staged(64, 64, 64, 2, 2, vector_copy=vector_copy, split_k=split_k,
                            split_k_mode="atomic")
    C = np.zeros((M, N), np.float32)
    fused[grid](a, b, C, M, N, K, backend="emulator")
    P = np.zeros((split_k * M, N), np.float32)
    gemm_khr_staged(64, 64, 64, 2, 2, vector_copy=vector_copy, split_k=split_k)[grid](
        a, b, P, M, N, K, backend="emulator")
    want = np.zeros((M, N), np.float32)
    for part in P.reshape(split_k, M, N):        # 0 + P0 + P1 + ...: workgroup z in order
        want = want + part
    np.testing.assert_array_equal(C, want)
    np.testing.assert_allclose(C, gemm_reference(A, B), rtol=1e-5, atol=1e-4)
    ck = fused.compile()
    assert ck.spv                                # spirv-val accepts it
    assert "AtomicFloat32AddEXT" in ck.requirements["capabilities"]
    assert "shaderBufferFloat32AtomicAdd" in ck.requirements["features"]


def test_atomic_split_k_q4_0_planes():
    M, N, K, split_k = 64, 64, 256, 2
    r = np.random.default_rng(4)
    Wq = quantize_q4_0(r.standard_normal((M, K)).astype(np.float32))
    X = r.standard_normal((K, N)).astype(np.float16)
    planes, x4 = q4_0_planes(Wq, M, K), X.view(np.uint32).reshape(-1, 4)
    Y = np.zeros((M, N), np.float32)
    gemm_q4_0_planes(64, 64, 64, 2, 2, specialize=True, split_k=split_k, split_k_mode="atomic")[
        (1, 1, split_k)](*planes, x4, Y, M, N, K, backend="emulator")
    P = np.zeros((split_k * M, N), np.float32)
    gemm_q4_0_planes(64, 64, 64, 2, 2, specialize=True, split_k=split_k)[(1, 1, split_k)](
        *planes, x4, P, M, N, K, backend="emulator")
    np.testing.assert_array_equal(Y, np.float32(0) + P[:M] + P[M:])
    np.testing.assert_allclose(Y, dequantize_q4_0(Wq, M, K).astype(np.float32) @ X.astype(np.float32),
                               rtol=1e-4, atol=1e-3)
    assert gemm_q4_0_planes(64, 64, 64, 2, 2, specialize=True, split_k=split_k,
                            split_k_mode="atomic").compile(M=M, N=N, K=K).spv     # spirv-val


def test_atomic_split_k_adds_to_what_c_holds():
    M, N, K = 64, 64, 128
    A = np.ones((M, K), np.float16)
    B = np.ones((K, N), np.float16)
    C = np.full((M, N), 0.5, np.float32)            # a bias
    gemm_khr_staged(64, 64, 64, 2, 2, split_k=2, split_k_mode="atomic")[(1, 1, 2)](
        A, B, C, M, N, K, backend="emulator")
    np.testing.assert_array_equal(C, np.full((M, N), K + 0.5, np.float32))


def test_split_k_mode_is_checked():
    with pytest.raises(ValueError, match="split_k_mode must be 'stacked' or 'atomic'"):
        gemm_khr_staged(64, 64, 64, 2, 2, split_k=2, split_k_mode="sum")
