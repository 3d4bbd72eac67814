"""Subgroup collectives and atomics on a real GPU (subgroup size 32) against the emulator:
integers bit for bit (under divergence), floats within summation-order rounding; float and
64-bit atomics where the device has them; the fused split-K GEMM (run with -m gpu)."""
from __future__ import annotations

import numpy as np
import pytest

import pycoop as pc
from pycoop import f32, i32, i64, u32
from pycoop.kernels import gemm_khr_staged, gemm_q4_0_planes, gemm_reference, q4_0_planes

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def caps():
    from pycoop.runtime.vulkan import get_runtime
    return get_runtime().capabilities


def both(kernel, grid, *args):
    gpu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    emu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    assert kernel[grid](*gpu, backend="vulkan").backend == "vulkan"
    kernel[grid](*emu, backend="emulator")
    return gpu, emu


@pc.kernel(workgroup_size=128, subgroup_size=32)
def collectives(X: pc.ReadBuffer[i32], F: pc.ReadBuffer[f32], M: pc.ReadBuffer[u32],
                O: pc.Buffer[i32], G: pc.Buffer[f32]):
    i = pc.global_invocation_id.x
    if M[i] != 0:
        x, f = X[i], F[i]
        O[i * u32(8)] = pc.subgroup.add(x)
        O[i * u32(8) + u32(1)] = pc.subgroup.exclusive_scan(x, "min")
        O[i * u32(8) + u32(2)] = pc.subgroup.inclusive_scan(x, "and")
        O[i * u32(8) + u32(3)] = pc.subgroup.max(x, 8) + pc.subgroup.xor(x, 2)
        O[i * u32(8) + u32(4)] = i32(pc.subgroup.ballot_bit_count(pc.subgroup.ballot(x > 0), "exclusive"))
        O[i * u32(8) + u32(5)] = pc.select(pc.subgroup.elect(), 1, 0) + pc.select(
            pc.subgroup.all_equal(x), 2, 0) + pc.select(pc.subgroup.any(x > 6), 4, 0)
        O[i * u32(8) + u32(6)] = pc.subgroup.broadcast_first(x) + pc.subgroup.add(x, 16)
        G[i * u32(3)] = pc.subgroup.add(f)
        G[i * u32(3) + u32(1)] = pc.subgroup.inclusive_add(f)
        G[i * u32(3) + u32(2)] = pc.subgroup.max(f, 4)
    lane = pc.subgroup_local_id()
    O[i * u32(8) + u32(7)] = pc.subgroup.shuffle_xor(X[i], 5) + pc.subgroup.shuffle(X[i], (lane * u32(7)) % u32(32))


@pytest.mark.parametrize("density", [1.0, 0.6, 0.1])
def test_collectives_match_the_emulator(density):
    r = np.random.default_rng(int(density * 10))
    n = 4 * 128
    X = r.integers(-8, 8, n).astype(np.int32)
    F = r.standard_normal(n).astype(np.float32)
    M = (r.random(n) < density).astype(np.uint32)
    gpu, emu = both(collectives, 4, X, F, M, np.zeros(8 * n, np.int32), np.zeros(3 * n, np.float32))
    np.testing.assert_array_equal(gpu[3], emu[3])
    np.testing.assert_allclose(gpu[4], emu[4], rtol=1e-5, atol=1e-4)   # sums: any order


@pc.kernel(workgroup_size=256)
def float_atomics(X: pc.ReadBuffer[f32], S: pc.Buffer[f32], n: u32, KIND: pc.Const):
    i = pc.global_invocation_id.x
    if i < n:
        getattr(pc.atomic, KIND)(S, i % u32(8), X[i])


@pytest.mark.parametrize("kind, feature", [("add", "shaderBufferFloat32AtomicAdd"),
                                           ("min", "shaderBufferFloat32AtomicMinMax"),
                                           ("max", "shaderBufferFloat32AtomicMinMax")])
def test_float_atomics(caps, kind, feature):
    if not caps.has(feature):
        pytest.skip(f"the device lacks {feature}")
    X = np.random.default_rng(3).standard_normal(100000).astype(np.float32)
    S = np.zeros(8, np.float32) if kind == "add" else np.full(8, 0.5 if kind == "min" else -0.5, np.float32)
    gpu, emu = both(float_atomics, 391, X, S, 100000, kind)
    if kind == "add":
        np.testing.assert_allclose(gpu[1], emu[1], rtol=1e-3, atol=1e-2)
    else:
        np.testing.assert_array_equal(gpu[1], emu[1])     # min/max: any order, one result


@pc.kernel(workgroup_size=256)
def int64_atomics(D: pc.Buffer[i64], V: pc.ReadBuffer[i64], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        v = V[i]
        pc.atomic.add(D, i % u32(4), v)
        pc.atomic.min(D, u32(4) + i % u32(4), v)
        pc.atomic.xor(D, u32(8) + i % u32(4), v)


def test_int64_atomics(caps):
    if not caps.has("shaderBufferInt64Atomics"):
        pytest.skip("the device lacks shaderBufferInt64Atomics")
    V = np.random.default_rng(4).integers(-2**62, 2**62, 50000).astype(np.int64)
    gpu, emu = both(int64_atomics, 196, np.zeros(12, np.int64), V, 50000)
    np.testing.assert_array_equal(gpu[0], emu[0])


@pytest.mark.parametrize("split_k", [2, 4])
def test_fused_split_k_gemm(caps, split_k):
    if not caps.has("shaderBufferFloat32AtomicAdd"):
        pytest.skip("the device lacks shaderBufferFloat32AtomicAdd")
    M, N, K = 512, 256, 2048
    r = np.random.default_rng(5)
    A = r.standard_normal((M, K)).astype(np.float16)
    B = r.standard_normal((K, N)).astype(np.float16)
    C = np.zeros((M, N), np.float32)
    k = gemm_khr_staged(128, 128, 64, 2, 2, specialize=True, vector_copy=True, split_k=split_k,
                        split_k_mode="atomic")
    k[(M // 128, N // 128, split_k)](A.view(np.uint32).reshape(-1, 4), B.view(np.uint32).reshape(-1, 4),
                                     C, M, N, K, backend="vulkan")
    want = gemm_reference(A, B)
    assert np.abs(C - want).max() / np.abs(want).max() < 1e-4


def test_fused_split_k_q4_0_planes(caps):
    if not caps.has("shaderBufferFloat32AtomicAdd"):
        pytest.skip("the device lacks shaderBufferFloat32AtomicAdd")
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
    from q4_0_gemm import dequantize_q4_0, quantize_q4_0
    M, N, K = 512, 256, 2048
    r = np.random.default_rng(6)
    Wq = quantize_q4_0(r.standard_normal((M, K)).astype(np.float32))
    X = r.standard_normal((K, N)).astype(np.float16)
    Y = np.zeros((M, N), np.float32)
    gemm_q4_0_planes(128, 128, 64, 2, 2, specialize=True, split_k=4, split_k_mode="atomic")[
        (M // 128, N // 128, 4)](*q4_0_planes(Wq, M, K), X.view(np.uint32).reshape(-1, 4), Y, M, N, K,
                                 backend="vulkan")
    want = dequantize_q4_0(Wq, M, K).astype(np.float32) @ X.astype(np.float32)
    assert np.abs(Y - want).max() / np.abs(want).max() < 1e-4
