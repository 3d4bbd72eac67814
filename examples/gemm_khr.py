"""Tiled GEMM with subgroup-scope KHR cooperative matrices (f16 in, f32 accumulate).

Each workgroup of 4 subgroups computes a 64x64 tile of C; each subgroup keeps 2x2
accumulators of 16x16 and walks K in steps of 16 (a loop with a runtime bound). Runs on the
best backend, checks itself against NumPy, and validates its SPIR-V with spirv-val.

    python3 examples/gemm_khr.py
"""
import numpy as np

import pycoop as pc
from pycoop import f16, f32, u32

MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
MatB = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseB]
Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]


@pc.kernel(workgroup_size=128)          # 4 subgroups of 32
def gemm(A: pc.Buffer[f16], B: pc.Buffer[f16], C: pc.Buffer[f32], M: u32, N: u32, K: u32):
    sg = pc.subgroup_id()
    m0 = pc.workgroup_id.x * 64 + (sg // 2) * 32          # this subgroup's 32x32 block of C
    n0 = pc.workgroup_id.y * 64 + (sg % 2) * 32
    acc = [[Acc.fill(0.0) for _ in range(2)] for _ in range(2)]   # unrolled at trace time
    for k in range(0, K, 16):                               # runtime bound -> a SPIR-V loop
        a = [MatA.load(A, (m0 + 16 * i) * K + k, K) for i in range(2)]
        b = [MatB.load(B, k * N + n0 + 16 * j, N) for j in range(2)]
        for i in range(2):
            for j in range(2):
                acc[i][j] = pc.mul_add(a[i], b[j], acc[i][j])   # carried by reassignment
    for i in range(2):
        for j in range(2):
            pc.store(C, (m0 + 16 * i) * N + n0 + 16 * j, acc[i][j], N)


def main():
    M, N, K = 256, 192, 320
    rng = np.random.default_rng(0)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    C = np.zeros((M, N), np.float32)
    r = gemm[(M // 64, N // 64)](A, B, C, M, N, K)
    ref = A.astype(np.float32) @ B.astype(np.float32)
    err = np.abs(C - ref).max() / np.abs(ref).max()
    k = gemm.compile()
    k.spv                                   # lowered and validated with spirv-val
    print(f"gemm {M}x{N}x{K} on {r.backend}: {r.time_ms:.2f} ms, max rel error {err:.1e}, "
          f"{len(k.spv)} bytes of SPIR-V")
    assert err < 1e-5, err


if __name__ == "__main__":
    main()
