"""KHR cooperative-matrix kernels on a real GPU, compared with the emulator (run with -m gpu).

Floats are compared within a tolerance stated per test (the GPU's accumulation order and
internal precision differ from the emulator's f32 sums); integers must match exactly.
"""
from __future__ import annotations

import numpy as np
import pytest

import pycoop as pc
from pycoop import bf16, f16, f32, i8, i32, u8, u32

pytestmark = pytest.mark.gpu


def make_gemm(ta, tc, m, n, k, *, tiles=2, col_major_b=False, saturating=False):
    """A (tiles*m) x (tiles*n) workgroup tile per subgroup... one subgroup per workgroup."""
    MatA = pc.coopmat[ta, pc.Subgroup, m, k, pc.UseA]
    MatB = pc.coopmat[ta, pc.Subgroup, k, n, pc.UseB]
    Acc = pc.coopmat[tc, pc.Subgroup, m, n, pc.Accumulator]

    @pc.kernel(workgroup_size=32)
    def gemm(A: pc.Buffer[ta], B: pc.Buffer[ta], C: pc.Buffer[tc], M: u32, N: u32, K: u32):
        m0 = pc.workgroup_id.x * (m * tiles)
        n0 = pc.workgroup_id.y * (n * tiles)
        acc = [[pc.load(Acc, C, (m0 + m * i) * N + n0 + n * j, N) for j in range(tiles)]
               for i in range(tiles)]
        for kk in range(0, K, k):
            a = [MatA.load(A, (m0 + m * i) * K + kk, K) for i in range(tiles)]
            if col_major_b:
                b = [MatB.load(B, (n0 + n * j) * K + kk, K, "col_major") for j in range(tiles)]
            else:
                b = [MatB.load(B, kk * N + n0 + n * j, N) for j in range(tiles)]
            for i in range(tiles):
                for j in range(tiles):
                    acc[i][j] = pc.mul_add(a[i], b[j], acc[i][j], saturating=saturating)
        for i in range(tiles):
            for j in range(tiles):
                pc.store(C, (m0 + m * i) * N + n0 + n * j, acc[i][j], N)
    return gemm


def _inputs(rng, t, shape):
    if t in (i8, u8):
        lo, hi = (-128, 127) if t == i8 else (0, 255)
        return rng.integers(lo, hi + 1, shape).astype(t.dtype)
    return rng.standard_normal(shape).astype(t.dtype)


def run_both(kernel, grid, args):
    """Run on Vulkan and on the emulator with copies of the same inputs; return both outputs."""
    gpu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    emu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    r = kernel[grid](*gpu, backend="vulkan")
    assert r.backend == "vulkan"
    kernel[grid](*emu, backend="emulator")
    return gpu, emu


CASES = [
    # (A/B type, C type, m, n, k, tolerance)
    (f16, f32, 16, 16, 16, 1e-4),
    (f16, f32, 16, 8, 16, 1e-4),
    (f16, f16, 16, 16, 16, 2e-2),
    (bf16, f32, 16, 16, 16, 1e-4),
    (i8, i32, 16, 16, 32, 0),
    (u8, u32, 16, 16, 32, 0),
    (i8, i32, 16, 8, 32, 0),
]


@pytest.mark.parametrize("ta,tc,m,n,k,tol", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("col_major_b", [False, True])
def test_gemm_matches_emulator(ta, tc, m, n, k, tol, col_major_b):
    rng = np.random.default_rng(1)
    tiles = 2
    M, N, K = 4 * m * tiles, 2 * n * tiles, 3 * k
    A = _inputs(rng, ta, (M, K))
    B = _inputs(rng, ta, (K, N))
    if col_major_b:
        B = np.ascontiguousarray(B.T)
    C = (_inputs(rng, i8, (M, N)) if tc.is_int and tc.signed else
         _inputs(rng, u8, (M, N)) if tc.is_int else rng.standard_normal((M, N))).astype(tc.dtype)
    g = make_gemm(ta, tc, m, n, k, tiles=tiles, col_major_b=col_major_b)
    gpu, emu = run_both(g, (M // (m * tiles), N // (n * tiles)), [A, B, C, M, N, K])
    if tol == 0:
        np.testing.assert_array_equal(gpu[2], emu[2])
    else:
        ref = np.abs(emu[2].astype(np.float64)).max()
        np.testing.assert_allclose(gpu[2].astype(np.float64), emu[2].astype(np.float64),
                                   atol=tol * ref, rtol=0)


def test_saturating_int8_matches_emulator():
    rng = np.random.default_rng(2)
    g = make_gemm(i8, i32, 16, 16, 32, tiles=1, saturating=True)
    from pycoop.runtime.backend import vulkan_missing
    missing = vulkan_missing(g.compile())
    if missing:
        pytest.skip(f"device lacks {', '.join(missing)}")
    M, N, K = 32, 32, 64
    A = np.full((M, K), 127, np.int8)
    B = np.full((K, N), 127, np.int8)
    C = np.full((M, N), 2**31 - 5000, np.int32)
    C[::2] = rng.integers(-1000, 1000, (M // 2, N))
    gpu, emu = run_both(g, (M // 16, N // 16), [A, B, C, M, N, K])
    np.testing.assert_array_equal(gpu[2], emu[2])
    assert (emu[2][1::2] == 2**31 - 1).all()


def test_elementwise_convert_length_shared():
    Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]

    @pc.kernel(workgroup_size=64)
    def ew(X: pc.Buffer[f32], Y: pc.Buffer[f32], O: pc.Buffer[f32], H: pc.Buffer[f16], L: pc.Buffer[u32]):
        sg = pc.subgroup_id() + pc.workgroup_id.x * 2
        sh = pc.shared(f32, 2 * 256)
        x = Acc.load(X, sg * 256, 16)
        y = Acc.load(Y, sg * 256, 16, "col_major")
        pc.store(sh, pc.subgroup_id() * 256, (x + y) * x - y / Acc.fill(3.0) * 0.5, 16)
        pc.barrier()
        z = -Acc.load(sh, pc.subgroup_id() * 256, 16)
        pc.store(O, sg * 256, z, 16)
        pc.store(H, sg * 256, pc.convert(z, f16), 16)
        L[sg] = pc.length(Acc)

    rng = np.random.default_rng(3)
    n = 4 * 256
    X = rng.standard_normal(n).astype(np.float32)
    Y = rng.uniform(1, 2, n).astype(np.float32)
    O, H, L = np.zeros(n, np.float32), np.zeros(n, np.float16), np.zeros(4, np.uint32)
    gpu, emu = run_both(ew, 2, [X, Y, O, H, L])
    np.testing.assert_allclose(gpu[2], emu[2], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gpu[3].astype(np.float32), emu[3].astype(np.float32), rtol=1e-3, atol=1e-3)
    assert (gpu[4] > 0).all()      # implementation-defined element count per invocation


@pytest.mark.parametrize("seed", range(6))
def test_random_gemm_differential(seed):
    rng = np.random.default_rng(100 + seed)
    ta, tc, m, n, k, tol = CASES[rng.integers(len(CASES))]
    tiles = int(rng.integers(1, 3))
    M, N, K = (int(rng.integers(1, 5)) * m * tiles, int(rng.integers(1, 5)) * n * tiles,
               int(rng.integers(1, 6)) * k)
    A, B = _inputs(rng, ta, (M, K)), _inputs(rng, ta, (K, N))
    C = np.zeros((M, N), tc.dtype)
    g = make_gemm(ta, tc, m, n, k, tiles=tiles)
    gpu, emu = run_both(g, (M // (m * tiles), N // (n * tiles)), [A, B, C, M, N, K])
    if tol == 0:
        np.testing.assert_array_equal(gpu[2], emu[2])
    else:
        ref = max(np.abs(emu[2].astype(np.float64)).max(), 1.0)
        np.testing.assert_allclose(gpu[2].astype(np.float64), emu[2].astype(np.float64), atol=tol * ref)


def test_demo_gemm_on_gpu():
    from pycoop.kernels.gemm import gemm_khr, gemm_reference
    rng = np.random.default_rng(4)
    M = N = K = 256
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    C = np.zeros((M, N), np.float32)
    gemm_khr[(M // 64, N // 64)](A, B, C, M, N, K, backend="vulkan")
    ref = gemm_reference(A, B)
    np.testing.assert_allclose(C, ref, atol=1e-3 * np.abs(ref).max())
