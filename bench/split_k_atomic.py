"""The fused split-K GEMMs (split_k_mode="atomic": each workgroup adds its share of K into the
output with f32 atomic adds) against the two-kernel split-K of gemm_gpu.py (stacked partial
products, then sum_splits; the two kernels' times added) and against no split:
gemm_khr_staged (f16, uvec4 copies) at the Q4_0 benchmark's shape M=4096, N=512, K=14336
(128x128 tiles leave each SM one workgroup) and at 4096^3, and gemm_q4_0_planes (Q4_0
weights) at the Q4_0 shape. f32 out; timing as in gemm_gpu.py (fastest of --repeat
back-to-back runs after warm-up runs). With repeat, a fused kernel keeps adding into the same
output: the times are those of real runs, the values are checked on one separate run from
zeros. A fused kernel needs its output zeroed before each use (a vkCmdFillBuffer, not timed
here).

    python3 bench/split_k_atomic.py [--repeat 50]
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from gemm_gpu import split_k_tflops, tflops
from pycoop.kernels import gemm_khr_staged, gemm_q4_0_planes, gemm_reference, q4_0_planes

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
from q4_0_gemm import dequantize_q4_0, quantize_q4_0  # noqa: E402

# Times the unchecked kernels (PYCOOP_CHECKED=0, the production mode); the cost of checked
# launches is measured by bench/checked_overhead.py.
os.environ["PYCOOP_CHECKED"] = "0"

CONFIGS = [(128, 128, 64, 2, 2), (128, 128, 32, 2, 2), (128, 128, 64, 2, 4)]   # BM BN BK SGM SGN
SPLIT_K = [1, 2, 4, 8]
SHAPES = [(4096, 512, 14336), (4096, 4096, 4096)]


def rows(shape: str, name: str, make, grid, args, Y, ref, flop: int, repeat: int) -> None:
    """No split, two-kernel split-K and fused split-K of one configuration."""
    for split_k in SPLIT_K:
        if split_k == 1:
            tf = tflops(make(1, "stacked"), grid, args, flop, repeat)
            print(f"{shape:>16} {name + ' no split':<60}{tf:>9.1f}", flush=True)
            continue
        two = split_k_tflops(make(split_k, "stacked"), grid, args, Y, split_k, flop, repeat)
        print(f"{shape:>16} {name + f' split{split_k} gemm+sum_splits':<60}{two:>9.1f}", flush=True)
        fused = make(split_k, "atomic")
        Y[:] = 0
        fused[grid + (split_k,)](*args, backend="vulkan")            # one run from zeros
        err = float(np.abs(Y[:256] - ref).max() / np.abs(ref).max())
        tf = tflops(fused, grid + (split_k,), args, flop, repeat)
        print(f"{shape:>16} {name + f' split{split_k} fused atomic':<60}{tf:>9.1f}{err:>10.1e}",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=50)
    repeat = ap.parse_args().repeat
    rng = np.random.default_rng(0)
    print(f"{'shape':>16} {'kernel':<60}{'TFLOPS':>9}{'rel err':>10}")
    for M, N, K in SHAPES:
        A = rng.standard_normal((M, K), dtype=np.float32).astype(np.float16)
        B = rng.standard_normal((K, N), dtype=np.float32).astype(np.float16)
        A4, B4 = A.view(np.uint32).reshape(-1, 4), B.view(np.uint32).reshape(-1, 4)
        shape, flop = f"{M}x{N}x{K}", 2 * M * N * K
        Y = np.zeros((M, N), np.float32)
        ref = gemm_reference(A[:256], B)
        for bm, bn, bk, sgm, sgn in CONFIGS:
            rows(shape, f"f16 KHR staged uvec4 {bm}x{bn}x{bk} {sgm}x{sgn}sg",
                 lambda s, mode: gemm_khr_staged(bm, bn, bk, sgm, sgn, specialize=True,
                                                 vector_copy=True, split_k=s, split_k_mode=mode),
                 (M // bm, N // bn), [A4, B4, Y, M, N, K], Y, ref, flop, repeat)
        if N != 512:
            continue
        Wq = quantize_q4_0(rng.standard_normal((M, K), dtype=np.float32))
        Q, D = q4_0_planes(Wq, M, K)
        ref = dequantize_q4_0(Wq, M, K)[:256].astype(np.float32) @ B.astype(np.float32)
        for bm, bn, bk, sgm, sgn in CONFIGS:
            rows(shape, f"Q4_0 KHR planes {bm}x{bn}x{bk} {sgm}x{sgn}sg",
                 lambda s, mode: gemm_q4_0_planes(bm, bn, bk, sgm, sgn, specialize=True,
                                                  split_k=s, split_k_mode=mode),
                 (M // bm, N // bn), [Q, D, B4, Y, M, N, K], Y, ref, flop, repeat)


if __name__ == "__main__":
    main()
