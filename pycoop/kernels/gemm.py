"""Tiled GEMM with subgroup-scope KHR cooperative matrices: C = A @ B, f16 inputs, f32
accumulation, row-major matrices.

A workgroup of 4 subgroups (2 x 2) computes a (32*TM) x (32*TN) tile of C; each subgroup holds
TM x TN accumulators of 16 x 16 and walks K in steps of 16. M and N must be multiples of the
workgroup tile and K of 16.
"""
from __future__ import annotations

import numpy as np

import pycoop as pc
from pycoop import f16, f32, u32

MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
MatB = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseB]
Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]


@pc.kernel(workgroup_size=128)
def gemm_khr(A: pc.Buffer[f16], B: pc.Buffer[f16], C: pc.Buffer[f32], M: u32, N: u32, K: u32,
             TM: pc.Const = 2, TN: pc.Const = 2):
    sg = pc.subgroup_id()
    m0 = pc.workgroup_id.x * (32 * TM) + (sg // 2) * (16 * TM)
    n0 = pc.workgroup_id.y * (32 * TN) + (sg % 2) * (16 * TN)
    acc = [[Acc.fill(0.0) for _ in range(TN)] for _ in range(TM)]
    for k in range(0, K, 16):
        a = [MatA.load(A, (m0 + 16 * i) * K + k, K) for i in range(TM)]
        b = [MatB.load(B, k * N + n0 + 16 * j, N) for j in range(TN)]
        for i in range(TM):
            for j in range(TN):
                acc[i][j] = pc.mul_add(a[i], b[j], acc[i][j])
    for i in range(TM):
        for j in range(TN):
            pc.store(C, (m0 + 16 * i) * N + n0 + 16 * j, acc[i][j], N)


def gemm_workgroup_tile(TM: int = 2, TN: int = 2) -> tuple[int, int]:
    return 32 * TM, 32 * TN


def gemm_reference(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """The NumPy result the kernel must match (f16 products are exact in f32)."""
    return A.astype(np.float32) @ B.astype(np.float32)
