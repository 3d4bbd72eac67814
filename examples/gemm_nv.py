"""Workgroup-scope GEMM with SPV_NV_cooperative_matrix2 tensor layouts, for any M, N, K.

The whole workgroup (128 invocations) owns one 64x64 accumulator. Tiles are loaded through
tensor layouts with the Constant clamp mode, so tiles that hang over the edges of A, B or C
read zeros and their out-of-bounds elements are not stored: M, N and K need not be multiples
of anything. f16 inputs, f32 accumulation; checked against NumPy.

    python3 examples/gemm_nv.py
"""
import numpy as np

import pycoop as pc
from pycoop import f16, f32, u32

TM, TN, TK = 64, 64, 32
MatA = pc.coopmat[f16, pc.Workgroup, TM, TK, pc.UseA]
MatB = pc.coopmat[f16, pc.Workgroup, TK, TN, pc.UseB]
Acc = pc.coopmat[f32, pc.Workgroup, TM, TN, pc.Accumulator]


@pc.kernel(workgroup_size=128)
def gemm_nv(A: pc.Buffer[f16], B: pc.Buffer[f16], C: pc.Buffer[f32], M: u32, N: u32, K: u32):
    la = pc.nv.tensor_layout(2, clamp="constant").dimension(M, K)   # each setter returns
    lb = pc.nv.tensor_layout(2, clamp="constant").dimension(K, N)   # a new layout, like the
    lc = pc.nv.tensor_layout(2, clamp="constant").dimension(M, N)   # SPIR-V instructions
    m0, n0 = pc.workgroup_id.x * TM, pc.workgroup_id.y * TN
    acc = Acc.fill(0.0)
    for k in range(0, K, TK):
        a = pc.nv.load_tensor(A, la.slice(m0, TM, k, TK), MatA)
        b = pc.nv.load_tensor(B, lb.slice(k, TK, n0, TN), MatB)
        acc = pc.mul_add(a, b, acc)
    pc.nv.store_tensor(C, lc.slice(m0, TM, n0, TN), acc)


def main():
    M, N, K = 100, 150, 90
    rng = np.random.default_rng(0)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    C = np.zeros((M, N), np.float32)
    r = gemm_nv[(-(-M // TM), -(-N // TN))](A, B, C, M, N, K)
    ref = A.astype(np.float32) @ B.astype(np.float32)
    err = np.abs(C - ref).max() / np.abs(ref).max()
    gemm_nv.compile().spv                  # validated with spirv-val
    print(f"workgroup-scope GEMM {M}x{N}x{K} on {r.backend}: {r.time_ms:.2f} ms, max rel error {err:.1e}")
    assert err < 1e-5, err


if __name__ == "__main__":
    main()
