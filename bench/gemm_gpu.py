"""GPU GEMM throughput: pycoop's KHR subgroup-scope GEMM (f16 in, f32 accumulate) on Vulkan
against torch's cuBLAS matmul measured in the same run. Prints TFLOP/s and the ratio.

    python3 bench/gemm_gpu.py [--sizes 4096 8192] [--repeat 5]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from pycoop.kernels.gemm import gemm_khr, gemm_workgroup_tile

CONFIGS = [(2, 2), (4, 2), (2, 4), (4, 4)]


def cublas_tflops(n: int, repeat: int) -> float:
    import torch
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(repeat):
        start.record()
        a @ b
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end))
    return 2 * n ** 3 / (best * 1e-3) / 1e12


def pycoop_tflops(n: int, tm: int, tn: int, repeat: int) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)
    B = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)
    C = np.zeros((n, n), np.float32)
    wm, wn = gemm_workgroup_tile(tm, tn)
    grid = (n // wm, n // wn)
    best = float("inf")
    for _ in range(repeat):
        r = gemm_khr[grid](A, B, C, n, n, n, TM=tm, TN=tn, backend="vulkan")
        best = min(best, r.time_ms)
    # spot-check a block against NumPy
    ref = A[:64].astype(np.float32) @ B[:, :64].astype(np.float32)
    err = float(np.abs(C[:64, :64] - ref).max() / np.abs(ref).max())
    return 2 * n ** 3 / (best * 1e-3) / 1e12, err


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    from pycoop.runtime.vulkan import get_runtime
    caps = get_runtime().capabilities
    print(f"# GEMM f16 -> f32, {time.strftime('%Y-%m-%d')}, {caps.device_name}, driver {caps.driver_version}")
    print(f"{'size':>6} {'kernel':<22}{'TFLOP/s':>10}{'x cuBLAS':>10}{'rel err':>10}")
    for n in a.sizes:
        ref = cublas_tflops(n, a.repeat)
        print(f"{n:>6} {'torch cuBLAS':<22}{ref:>10.1f}{1.0:>10.2f}{'':>10}")
        for tm, tn in CONFIGS:
            if n % (32 * tm) or n % (32 * tn):
                continue
            t, err = pycoop_tflops(n, tm, tn, a.repeat)
            print(f"{n:>6} {f'pycoop KHR TM={tm} TN={tn}':<22}{t:>10.1f}{t / ref:>10.3f}{err:>10.1e}",
                  flush=True)


if __name__ == "__main__":
    main()
