"""GPU GEMM throughput on Vulkan against torch's cuBLAS matmul measured in the same run.

- pycoop's KHR subgroup-scope GEMMs (pycoop.kernels.gemm_khr, several register tilings, and
  gemm_khr_staged: shared-memory staging with a register prefetch)
- pycoop's NV coopmat2 workgroup-scope GEMM (pycoop.kernels.gemm_nv, several tile shapes)
- the Q4_0 GEMM at llama.cpp's shape M=4096, N=512, K=14336 against pycoop's f16 GEMM there

All f16 in, f32 accumulate; device time from Vulkan timestamps (best of --repeat launches).

    python3 bench/gemm_gpu.py [--sizes 4096 8192] [--repeat 5]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from pycoop.kernels import gemm_khr, gemm_khr_staged, gemm_nv, gemm_q4_0, gemm_workgroup_tile

KHR_CONFIGS = [(2, 2), (4, 2), (2, 4), (4, 4)]
STAGED_CONFIGS = [(128, 256, 32, 2, 4, 8), (128, 256, 16, 2, 4, 8), (128, 128, 32, 2, 4, 8)]
NV_CONFIGS = [(64, 64, 32, 128), (128, 128, 32, 256), (128, 128, 64, 256), (128, 256, 32, 256),
              (256, 128, 32, 256), (256, 256, 32, 256), (128, 256, 64, 256), (256, 128, 64, 256),
              (128, 128, 128, 256), (256, 256, 64, 256), (64, 128, 64, 128), (128, 64, 64, 128)]


def cublas_tflops(m: int, n: int, k: int, repeat: int) -> float:
    import torch
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
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
    return 2 * m * n * k / (best * 1e-3) / 1e12


def timed(kernel, grid, args, repeat: int, **kw) -> float:
    best = float("inf")
    for _ in range(repeat):
        best = min(best, kernel[grid](*args, backend="vulkan", **kw).time_ms)
    return best


def rel_err(C, A, B) -> float:
    ref = A[:64].astype(np.float32) @ B[:, :64].astype(np.float32)
    return float(np.abs(C[:64, :64] - ref).max() / np.abs(ref).max())


def row(size, name, tflops, ref, err=None):
    e = f"{err:>10.1e}" if err is not None else f"{'':>10}"
    print(f"{size:>16} {name:<30}{tflops:>10.1f}{tflops / ref:>10.3f}{e}", flush=True)


def square(n: int, repeat: int) -> None:
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)
    B = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)
    C = np.zeros((n, n), np.float32)
    flop = 2 * n ** 3
    ref = cublas_tflops(n, n, n, repeat)
    row(f"{n}^3", "torch cuBLAS", ref, ref)
    for tm, tn in KHR_CONFIGS:
        wm, wn = gemm_workgroup_tile(tm, tn)
        t = timed(gemm_khr, (n // wm, n // wn), [A, B, C, n, n, n], repeat, TM=tm, TN=tn)
        row(f"{n}^3", f"KHR TM={tm} TN={tn}", flop / t / 1e9, ref, rel_err(C, A, B))
    for cfg in STAGED_CONFIGS:
        C[:] = 0
        t = timed(gemm_khr_staged(*cfg), (n // cfg[0], n // cfg[1]), [A, B, C, n, n, n], repeat)
        row(f"{n}^3", f"KHR staged {cfg[0]}x{cfg[1]}x{cfg[2]} {cfg[3]}x{cfg[4]}sg", flop / t / 1e9,
            ref, rel_err(C, A, B))
    results = []
    for bm, bn, bk, inv in NV_CONFIGS:
        C[:] = 0
        t = timed(gemm_nv(bm, bn, bk, inv), (-(-n // bm), -(-n // bn)), [A, B, C, n, n, n], repeat)
        row(f"{n}^3", f"NV {bm}x{bn}x{bk} wg={inv}", flop / t / 1e9, ref, rel_err(C, A, B))
        results.append((flop / t / 1e9, (bm, bn, bk, inv), 1))
    # the three best tilings again with 2 and 4 k-steps per loop iteration
    for _, cfg, _ in sorted(results, reverse=True)[:3]:
        for unroll in (2, 4):
            C[:] = 0
            t = timed(gemm_nv(*cfg, unroll=unroll), (-(-n // cfg[0]), -(-n // cfg[1])),
                      [A, B, C, n, n, n], repeat)
            row(f"{n}^3", f"NV {cfg[0]}x{cfg[1]}x{cfg[2]} wg={cfg[3]} u{unroll}", flop / t / 1e9, ref,
                rel_err(C, A, B))
            results.append((flop / t / 1e9, cfg, unroll))
    tf, cfg, unroll = max(results)
    print(f"{'':>16} best NV: {cfg[0]}x{cfg[1]}x{cfg[2]} wg={cfg[3]} unroll {unroll}: "
          f"{tf:.1f} TFLOP/s = {tf / ref:.3f}x cuBLAS")


def q4_0(repeat: int, configs) -> None:
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
    from q4_0_gemm import quantize_q4_0
    M, N, K = 4096, 512, 14336
    rng = np.random.default_rng(1)
    X = rng.standard_normal((M, K), dtype=np.float32).astype(np.float16)
    Wf = rng.standard_normal((N, K), dtype=np.float32)
    Wq = quantize_q4_0(Wf)
    Wt = np.ascontiguousarray(Wf.T.astype(np.float16))            # K x N for the f16 GEMM
    Y = np.zeros((M, N), np.float32)
    flop = 2 * M * N * K
    ref = cublas_tflops(M, N, K, repeat)
    shape = f"{M}x{N}x{K}"
    row(shape, "torch cuBLAS f16", ref, ref)
    best16 = bestq = 0.0
    for config in configs:
        bm, bn, bk, inv = config
        grid = (-(-M // bm), -(-N // bn))
        for unroll in (1, 2):
            t16 = flop / timed(gemm_nv(*config, unroll=unroll), grid, [X, Wt, Y, M, N, K], repeat) / 1e9
            row(shape, f"NV f16 {bm}x{bn}x{bk} wg={inv} u{unroll}", t16, ref)
            tq = flop / timed(gemm_q4_0(*config, unroll=unroll), grid, [X, Wq, Y, M, N, K], repeat) / 1e9
            row(shape, f"NV Q4_0 {bm}x{bn}x{bk} wg={inv} u{unroll}", tq, ref)
            best16, bestq = max(best16, t16), max(bestq, tq)
    print(f"{'':>16} best Q4_0 / best f16 = {bestq / best16:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--q4-configs", type=int, nargs="+", default=[128, 128, 32, 256, 128, 128, 64, 256,
                                                                   64, 128, 64, 128, 128, 64, 64, 128],
                    help="BM BN BK invocations, repeated")
    a = ap.parse_args()
    from pycoop.runtime.vulkan import get_runtime
    caps = get_runtime().capabilities
    print(f"# GEMM f16 -> f32, {time.strftime('%Y-%m-%d')}, {caps.device_name}, driver {caps.driver_version}")
    print(f"{'shape':>16} {'kernel':<30}{'TFLOP/s':>10}{'x cuBLAS':>10}{'rel err':>10}")
    for n in a.sizes:
        square(n, a.repeat)
    q = a.q4_configs
    q4_0(a.repeat, [tuple(q[i:i + 4]) for i in range(0, len(q), 4)])


if __name__ == "__main__":
    main()
