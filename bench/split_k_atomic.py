"""The fused split-K GEMMs (split_k_mode="atomic": each workgroup adds its share of K into the
output with f32 atomic adds) against the two-kernel split-K (stacked partial products, then
sum_splits; the two kernels' times added) and against no split: gemm_khr_staged (f16, uvec4
copies) at the Q4_0 benchmark's shape M=4096, N=512, K=14336 (128x128 tiles leave each SM one
workgroup) and at 4096^3, and gemm_q4_0_planes (Q4_0 weights) at the Q4_0 shape; torch's f16
matmul (cuBLAS) at each shape as the reference, measured in the same run.

f16 in, f32 out. All operands are device arrays (nothing is copied between runs). The GPU is
first kept busy for --warmup-s seconds so it reaches its full clock; then each timing runs
unmeasured launches for at least --warmup-ms (creating a pipeline idles the GPU), and reports
the fastest of --repeat back-to-back runs. With repeat, a fused kernel keeps adding into the
same output: the times are those of real runs, the values are checked on one separate run from
zeros. A fused kernel needs its output zeroed before each use (a vkCmdFillBuffer, not timed
here).

    python3 bench/split_k_atomic.py [--repeat 50] [--configs 3] [--split-k 2 4 8]
                                    [--shapes 4096x512x14336 4096x4096x4096]
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

import pycoop as pc
from pycoop.kernels import gemm_khr_staged, gemm_q4_0_planes, gemm_reference, q4_0_planes, sum_splits

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
from q4_0_gemm import dequantize_q4_0, quantize_q4_0  # noqa: E402

# before pycoop: the benchmark times the unchecked kernels (bench/unchecked.py)
import unchecked  # noqa: E402,F401

CONFIGS = [(128, 128, 64, 2, 2), (128, 128, 32, 2, 2), (128, 128, 64, 2, 4)]   # BM BN BK SGM SGN
SPLIT_K = [2, 4, 8]
SHAPES = [(4096, 512, 14336), (4096, 4096, 4096)]
BACKEND = "vulkan"


def time_ms(kernel, grid, args, repeat: int, warmup_ms: float) -> float:
    """The fastest of `repeat` back-to-back runs, after unmeasured runs lasting at least
    `warmup_ms` (their count from a first short batch)."""
    launch = kernel[grid]
    first = launch(*args, backend=BACKEND, repeat=20).times_ms
    n = min(4096, max(20, math.ceil(warmup_ms / max(float(np.median(first)), 1e-3))))
    launch(*args, backend=BACKEND, repeat=n).times_ms
    return launch(*args, backend=BACKEND, repeat=repeat).time_ms


def cublas_ms(M: int, N: int, K: int, repeat: int, warmup_ms: float) -> float | None:
    """torch's f16 matmul (cuBLAS) at the same shape, f16 out: the fastest of `repeat`
    back-to-back runs after a warm-up as long as pycoop's; None without CUDA."""
    try:
        import torch
        if not torch.cuda.is_available():
            return None
    except ImportError:
        return None
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warmup_ms * 1e-3:
        for _ in range(20):
            a @ b
        torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(repeat)]
    for start, end in events:
        start.record()
        a @ b
        end.record()
    torch.cuda.synchronize()
    return min(s.elapsed_time(e) for s, e in events)


def line(shape: str, name: str, ms: float, flop: int, extra: str = "") -> None:
    print(f"{shape:>16} {name:<58}{ms * 1e3:>10.1f}{flop / ms / 1e9:>9.1f}  {extra}", flush=True)


def rows(shape: str, name: str, make, grid, args: list, Y, ref, flop: int, opts, best: dict) -> None:
    """No split, two-kernel split-K and fused split-K of one configuration. `args` holds Y
    (a device array of M x N f32) where the output goes."""
    M, N = Y.shape
    ms = time_ms(make(1, "stacked"), grid, args, opts.repeat, opts.warmup_ms)
    line(shape, f"{name} no split", ms, flop)
    best.setdefault((shape, name.split()[0], "no split"), []).append((ms, name))
    for split_k in opts.split_k:
        P = pc.zeros((split_k * M * N // 4, 4), pc.f32, backend=BACKEND)
        gemm_ms = time_ms(make(split_k, "stacked"), grid + (split_k,),
                          [P.reshape(split_k * M, N) if a is Y else a for a in args],
                          opts.repeat, opts.warmup_ms)
        n4 = M * N // 4
        sum_ms = time_ms(sum_splits(split_k), (-(-n4 // 256),), [P, Y.reshape(-1, 4), n4],
                         opts.repeat, opts.warmup_ms)
        del P
        line(shape, f"{name} split{split_k} gemm+sum_splits", gemm_ms + sum_ms, flop,
             f"(gemm {gemm_ms * 1e3:.1f} + sum {sum_ms * 1e3:.1f})")
        best.setdefault((shape, name.split()[0], "gemm+sum_splits"), []).append(
            (gemm_ms + sum_ms, f"{name} split{split_k}"))
        fused = make(split_k, "atomic")
        Y.copy_from(np.zeros((M, N), np.float32))
        fused[grid + (split_k,)](*args, backend=BACKEND)  # one run from zeros
        err = float(np.abs(Y.numpy()[:ref.shape[0]] - ref).max() / np.abs(ref).max())
        ms = time_ms(fused, grid + (split_k,), args, opts.repeat, opts.warmup_ms)
        line(shape, f"{name} split{split_k} fused atomic", ms, flop, f"rel err {err:.1e}")
        best.setdefault((shape, name.split()[0], "fused atomic"), []).append(
            (ms, f"{name} split{split_k}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--configs", type=int, default=len(CONFIGS),
                    help=f"the first N tilings of {CONFIGS} (BM BN BK SGM SGN)")
    ap.add_argument("--split-k", type=int, nargs="+", default=SPLIT_K)
    ap.add_argument("--shapes", nargs="+", default=None, help="MxNxK, e.g. 4096x512x14336")
    ap.add_argument("--warmup-s", type=float, default=2.0, help="the GPU kept busy first")
    ap.add_argument("--warmup-ms", type=float, default=200.0, help="unmeasured runs per timing")
    ap.add_argument("--no-q4", action="store_true", help="f16 only")
    ap.add_argument("--backend", default="vulkan", choices=["vulkan", "emulator"],
                    help="emulator: checks the script at a small --shapes (times are wall time)")
    opts = ap.parse_args()
    global BACKEND
    BACKEND = opts.backend
    shapes = ([tuple(int(v) for v in s.lower().split("x")) for s in opts.shapes]
              if opts.shapes else SHAPES)
    configs = CONFIGS[:opts.configs]
    if BACKEND == "vulkan":
        from pycoop.runtime.vulkan import get_runtime
        print(f"# {get_runtime().capabilities.device_name}, {time.strftime('%Y-%m-%d %H:%M')}")
    rng = np.random.default_rng(0)
    best: dict = {}
    first = True
    print(f"{'shape':>16} {'kernel':<58}{'µs':>10}{'TFLOPS':>9}")
    for M, N, K in shapes:
        A = rng.standard_normal((M, K), dtype=np.float32).astype(np.float16)
        B = rng.standard_normal((K, N), dtype=np.float32).astype(np.float16)
        A4 = pc.asarray(A.view(np.uint32).reshape(-1, 4), backend=BACKEND)
        B4 = pc.asarray(B.view(np.uint32).reshape(-1, 4), backend=BACKEND)
        Y = pc.zeros((M, N), pc.f32, backend=BACKEND)
        shape, flop = f"{M}x{N}x{K}", 2 * M * N * K
        ref = gemm_reference(A[:256], B)
        if first:                                          # bring the GPU to its full clock
            bm, bn, bk, sgm, sgn = configs[0]
            k = gemm_khr_staged(bm, bn, bk, sgm, sgn, specialize=True, vector_copy=True)
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < opts.warmup_s:
                k[(M // bm, N // bn)](A4, B4, Y, M, N, K, backend=BACKEND, repeat=50).times_ms
            first = False
        ms = cublas_ms(M, N, K, opts.repeat, opts.warmup_ms) if BACKEND == "vulkan" else None
        if ms is not None:
            line(shape, "torch f16 matmul (cuBLAS), f16 out", ms, flop)
        for bm, bn, bk, sgm, sgn in configs:
            rows(shape, f"f16 KHR staged uvec4 {bm}x{bn}x{bk} {sgm}x{sgn}sg",
                 lambda s, mode: gemm_khr_staged(bm, bn, bk, sgm, sgn, specialize=True,
                                                 vector_copy=True, split_k=s, split_k_mode=mode),
                 (M // bm, N // bn), [A4, B4, Y, M, N, K], Y, ref, flop, opts, best)
        if N != 512 or opts.no_q4:
            continue
        Wq = quantize_q4_0(rng.standard_normal((M, K), dtype=np.float32))
        Q, D = q4_0_planes(Wq, M, K)
        Qd, Dd = pc.asarray(Q, backend=BACKEND), pc.asarray(D, backend=BACKEND)
        ref = dequantize_q4_0(Wq, M, K)[:256].astype(np.float32) @ B.astype(np.float32)
        for bm, bn, bk, sgm, sgn in configs:
            rows(shape, f"Q4_0 KHR planes {bm}x{bn}x{bk} {sgm}x{sgn}sg",
                 lambda s, mode: gemm_q4_0_planes(bm, bn, bk, sgm, sgn, specialize=True,
                                                  split_k=s, split_k_mode=mode),
                 (M // bm, N // bn), [Qd, Dd, B4, Y, M, N, K], Y, ref, flop, opts, best)
    print("\nfastest of each kind:")
    for (shape, family, kind), entries in best.items():
        ms, name = min(entries)
        print(f"{shape:>16} {family:<5} {kind:<16} {ms * 1e3:>9.1f} µs  {name}")


if __name__ == "__main__":
    main()
