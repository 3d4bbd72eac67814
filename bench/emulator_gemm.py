"""Emulator speed: the KHR GEMM kernel (f16 -> f32, 64x64 workgroup tiles) against NumPy's
float32 matmul of the same shape, measured in the same process: repeated launches of one
configuration (which reuse what depends only on it, see pycoop.emulator.memo), and launches
that recompute everything (PYCOOP_EMULATOR_MEMO=0, as a configuration's first launch does).

    python3 bench/emulator_gemm.py [--size 512] [--repeat 20]
"""
from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from pycoop.kernels.gemm import gemm_khr, gemm_reference


def best(fns, repeat: int) -> list[float]:
    """The best time of each function in ms, run interleaved so that both see the same machine."""
    times = [[] for _ in fns]
    for _ in range(repeat):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return [min(ts) * 1e3 for ts in times]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=20)
    a = ap.parse_args()
    n = a.size
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n)).astype(np.float16)
    B = rng.standard_normal((n, n)).astype(np.float16)
    C = np.zeros((n, n), np.float32)
    A32, B32 = A.astype(np.float32), B.astype(np.float32)
    run = lambda: gemm_khr[(n // 64, n // 64)](A, B, C, n, n, n, backend="emulator")  # noqa: E731

    def fresh():
        os.environ["PYCOOP_EMULATOR_MEMO"] = "0"
        try:
            run()
        finally:
            del os.environ["PYCOOP_EMULATOR_MEMO"]

    run()
    assert np.allclose(C, gemm_reference(A, B), atol=1e-3)
    t_emu, t_fresh, t_np = best([run, fresh, lambda: A32 @ B32], a.repeat)
    print(f"# emulator GEMM {n}^3, f16 -> f32, 64x64 workgroup tiles ({platform.processor() or platform.machine()}, "
          f"{time.strftime('%Y-%m-%d')})")
    print(f"{'what':<40}{'ms':>10}{'ratio':>10}")
    print(f"{'numpy f32 matmul':<40}{t_np:>10.2f}{1.0:>10.2f}")
    print(f"{'pycoop emulator, repeated launch':<40}{t_emu:>10.2f}{t_emu / t_np:>10.2f}")
    print(f"{'pycoop emulator, nothing kept':<40}{t_fresh:>10.2f}{t_fresh / t_np:>10.2f}")


if __name__ == "__main__":
    main()
