"""Pick the fastest configuration of a library GEMM for one problem on the device at hand.

`pc.autotune` times each configuration of `pycoop.kernels.gemm_nv` (workgroup tile, edge
clamping, k-steps per iteration, shape specialisation) with back-to-back runs, skips those that
cannot run here, and remembers the choice per device for this problem. The chosen kernel's
result is then checked against NumPy.

    python3 examples/autotune_gemm.py [--size 1024]
"""
import argparse

import numpy as np

import pycoop as pc
from pycoop.kernels import gemm_nv

CONFIGS = [  # BM, BN, BK, invocations, clamp, unroll, specialize
    (128, 256, 64, 256, "undefined", 2, True),
    (128, 256, 32, 256, "undefined", 2, True),
    (128, 128, 32, 256, "constant", 1, False),
    (64, 64, 32, 128, "constant", 1, False),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=256, help="M = N = K, a multiple of 256")
    n = ap.parse_known_args()[0].size
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n)).astype(np.float16)
    B = rng.standard_normal((n, n)).astype(np.float16)
    C = np.zeros((n, n), np.float32)

    def run(c, repeat):
        return gemm_nv(*c)[(n // c[0], n // c[1])](A, B, C, n, n, n, repeat=repeat)

    tuned = pc.autotune(CONFIGS, run, repeat=3, key=f"examples/autotune_gemm {n}")
    for c, t in tuned.times_ms.items():
        print(f"  {c}: {t:.2f} ms")
    for c, why in tuned.failures.items():
        print(f"  {c}: skipped, {why}")
    C[:] = 0
    r = run(tuned.best, 1)
    ref = A.astype(np.float32) @ B.astype(np.float32)
    err = np.abs(C - ref).max() / np.abs(ref).max()
    print(f"best of {len(CONFIGS)} on {r.backend}{' (remembered)' if tuned.cached else ''}: "
          f"{tuned.best}, {2 * n ** 3 / r.time_ms / 1e6:.1f} GFLOP/s, max rel error {err:.1e}")
    assert err < 1e-5, err


if __name__ == "__main__":
    main()
