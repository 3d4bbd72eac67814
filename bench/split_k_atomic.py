"""The fused split-K GEMM (gemm_khr_staged(split_k_mode="atomic"): each workgroup adds its share
of K into C with f32 atomic adds) against the two-kernel split-K of gemm_gpu.py (stacked
partial products, then sum_splits; the two kernels' times added) and against no split, at the
Q4_0 benchmark's shape M=4096, N=512, K=14336 (128x128 tiles leave each SM one workgroup) and
at 4096^3. All f16 in, f32 out; timing as in gemm_gpu.py (fastest of --repeat back-to-back runs
after warm-up runs). With repeat, the fused kernel keeps adding into the same C: the times are
those of real runs, the values are checked on one separate run from zeros. The fused kernel
needs C zeroed before each use (a vkCmdFillBuffer, not timed here).

    python3 bench/split_k_atomic.py [--repeat 50]
"""
from __future__ import annotations

import argparse
import itertools

import numpy as np

from gemm_gpu import split_k_tflops, tflops
from pycoop.kernels import gemm_khr_staged, gemm_reference

CONFIGS = [(128, 128, 64, 2, 2), (128, 128, 32, 2, 2), (128, 128, 64, 2, 4)]   # BM BN BK SGM SGN
SPLIT_K = [2, 4, 8]
SHAPES = [(4096, 512, 14336), (4096, 4096, 4096)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=50)
    repeat = ap.parse_args().repeat
    rng = np.random.default_rng(0)
    print(f"{'shape':>16} {'kernel':<44}{'TFLOPS':>9}{'rel err':>10}")
    for M, N, K in SHAPES:
        A = rng.standard_normal((M, K), dtype=np.float32).astype(np.float16)
        B = rng.standard_normal((K, N), dtype=np.float32).astype(np.float16)
        A4, B4 = A.view(np.uint32).reshape(-1, 4), B.view(np.uint32).reshape(-1, 4)
        ref = gemm_reference(A[:256], B)
        shape, flop = f"{M}x{N}x{K}", 2 * M * N * K
        for (bm, bn, bk, sgm, sgn), split_k in itertools.product(CONFIGS, [1] + SPLIT_K):
            if K % (bk * split_k):
                continue
            cfg, grid = f"{bm}x{bn}x{bk} {sgm}x{sgn}sg", (M // bm, N // bn)
            Y = np.zeros((M, N), np.float32)
            args = [A4, B4, Y, M, N, K]
            if split_k == 1:
                tf = tflops(gemm_khr_staged(bm, bn, bk, sgm, sgn, specialize=True, vector_copy=True),
                            grid, args, flop, repeat)
                print(f"{shape:>16} {cfg + ' no split':<44}{tf:>9.1f}", flush=True)
                continue
            two = split_k_tflops(gemm_khr_staged(bm, bn, bk, sgm, sgn, specialize=True,
                                                 vector_copy=True, split_k=split_k),
                                 grid, args, Y, split_k, flop, repeat)
            print(f"{shape:>16} {cfg + f' split{split_k} gemm+sum_splits':<44}{two:>9.1f}", flush=True)
            fused = gemm_khr_staged(bm, bn, bk, sgm, sgn, specialize=True, vector_copy=True,
                                    split_k=split_k, split_k_mode="atomic")
            fused[grid + (split_k,)](*args, backend="vulkan")            # one run from zeros
            err = float(np.abs(Y[:256] - ref).max() / np.abs(ref).max())
            tf = tflops(fused, grid + (split_k,), args, flop, repeat)
            print(f"{shape:>16} {cfg + f' split{split_k} fused atomic':<44}{tf:>9.1f}{err:>10.1e}",
                  flush=True)


if __name__ == "__main__":
    main()
