"""`pycoop demo`: a KHR cooperative-matrix GEMM on the best available backend, checked
against NumPy."""
from __future__ import annotations

import sys
import time

import numpy as np

from .kernels.gemm import gemm_khr, gemm_reference, gemm_workgroup_tile


def main(size: int = 512, backend: str = "auto") -> int:
    M = N = K = size
    rng = np.random.default_rng(0)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    C = np.zeros((M, N), np.float32)
    tm, tn = gemm_workgroup_tile()
    launch = gemm_khr[(M // tm, N // tn)]
    t0 = time.perf_counter()
    launch(A, B, C, M, N, K, backend=backend)
    wall = (time.perf_counter() - t0) * 1e3
    r = launch(A, B, C, M, N, K, backend=backend, repeat=5)    # warm: the fastest of 5
    ref = gemm_reference(A, B)
    err = float(np.abs(C - ref).max() / np.abs(ref).max())
    ok = err < 1e-5
    print(f"pycoop demo: {M}x{N}x{K} GEMM (f16 in, f32 accumulate, 16x16x16 subgroup coopmats)")
    print(f"  backend: {r.backend}")
    print(f"  time:    {r.time_ms:.2f} ms ({'device' if r.backend == 'vulkan' else 'wall'}, "
          f"fastest of 5 runs; the first launch took {wall:.1f} ms with its compile)")
    print(f"  check:   max relative error vs NumPy {err:.2e} -> {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
