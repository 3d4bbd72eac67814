"""GEMM with Intel subgroup 2D block IO (SPV_INTEL_2d_block_io), C = A @ B.

One workgroup is one subgroup of 16 invocations and computes an 8x16 tile of C (f32) from
A (M x K, f16) and B (K x N, f16), walking K in steps of 16 (a loop with a runtime bound):

* the A tile (8 rows x 16 columns) comes from `pycoop.intel.block_load`: invocation i holds
  column i of each of the 8 rows; it is shared through workgroup memory so that every
  invocation sees the whole tile;
* the B tile (16 rows x 16 columns) comes from `pycoop.intel.block_load_transform` (VNNI):
  invocation j holds column j, rows 2p and 2p+1 packed in its p-th 32-bit value;
* invocation j computes C[m0 + r, n0 + j] for the 8 rows r on its own - exactly the layout
  `pycoop.intel.block_store` of an 8x16 block of 4-byte elements expects.

Every shape is in Intel's supported-shape table (strict_intel_shapes is on). The kernel
compiles to an OpenCL-environment module (Kernel entry point, CrossWorkgroup pointer
arguments, required subgroup size 16); it runs here on the emulator and checks itself against
NumPy.

    python3 examples/intel_block_gemm.py
    pycoop compile examples/intel_block_gemm.py:intel_gemm -o intel_gemm.spv
"""
import numpy as np

import pycoop as pc
from pycoop import f16, f32, i32, u16
from pycoop import intel

TM, TN, TK = 8, 16, 16          # C tile rows, C tile columns, K step


@pc.kernel(workgroup_size=16)
def intel_gemm(A: pc.ReadBuffer[f16], B: pc.ReadBuffer[f16], C: pc.WriteBuffer[f32], M: i32, N: i32, K: i32):
    lane = pc.subgroup_local_id()
    n0 = i32(pc.workgroup_id.x) * TN
    m0 = i32(pc.workgroup_id.y) * TM
    a_tile = pc.shared(f16, TM * TK)
    acc = pc.make_array([f32(0.0)] * TM)
    for k0 in range(0, K, TK):                                 # runtime bound -> a SPIR-V loop
        a = intel.block_load(A, width=TK, height=TM, memory_width=K * 2, memory_height=M,
                             pitch=K * 2, coord=(k0, m0))     # a[r] = A[m0 + r, k0 + lane]
        b = intel.block_load_transform(B, width=TN, height=TK, memory_width=N * 2, memory_height=K,
                                       pitch=N * 2, coord=(n0, k0))
        for r in range(TM):
            a_tile[r * TK + lane] = a[r]
        pc.barrier()
        bcol = []                                              # B[k0 + kk, n0 + lane], kk = 0..15
        for p in range(TK // 2):
            bcol.append(f32(pc.bitcast(u16(b[p] & 0xFFFF), f16)))     # lower row in the low bits
            bcol.append(f32(pc.bitcast(u16(b[p] >> 16), f16)))
        rows = []
        for r in range(TM):
            s = acc[r]
            for kk in range(TK):
                s = s + f32(a_tile[r * TK + kk]) * bcol[kk]
            rows.append(s)
        acc = pc.make_array(rows)                              # carried by reassignment
        pc.barrier()                                           # a_tile is rewritten next step
    intel.block_store(C, acc, width=TN, height=TM, memory_width=N * 4, memory_height=M, pitch=N * 4,
                      coord=(n0, m0))                          # C[m0 + r, n0 + lane] = acc[r]


def main():
    M, N, K = 32, 64, 64
    rng = np.random.default_rng(0)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    C = np.zeros((M, N), np.float32)
    r = intel_gemm[(N // TN, M // TM)](A, B, C, M, N, K, backend="emulator")
    ref = A.astype(np.float32) @ B.astype(np.float32)
    err = np.abs(C - ref).max() / np.abs(ref).max()
    k = intel_gemm.compile()
    print(f"intel block-IO gemm {M}x{N}x{K} on {r.backend}: max rel error {err:.1e}, "
          f"{len(k.spv)} bytes of OpenCL SPIR-V ({k.target} target, subgroup size {k.module.subgroup_size})")
    assert err < 1e-5, err


if __name__ == "__main__":
    main()
