"""The cost of checked launches (bounds guards on every buffer access, see docs/gpu.md): the
same kernels timed with checked=False and checked=True on the same device, in one run.

- gemm_nv (NV coopmat2 workgroup-scope GEMM, 128x256x32, specialised) at 8192^3
- gemm_khr_staged (KHR subgroup GEMM staged through shared memory, 128x256x32, 2x4 subgroups,
  specialised) at 8192^3
- axpy on 2^24 f32 elements (device arrays): one guarded load pair and store per invocation

Each kernel runs --repeat times back to back after WARMUP unmeasured runs; the fastest run is
reported, the two modes alternating twice. Goal: at most 5% on the GEMMs (a matrix tile or
tensor access is checked once per access, and the K loops run a copy without guards when the
check before the loop passes: docs/gpu.md, "Guards out of loops"). Takes about 30 s on an
H100/H200 at 8192 (most of it generating the inputs and compiling both variants).

    python3 bench/checked_overhead.py [--size 8192] [--repeat 30]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import pycoop as pc
from pycoop import f32, u32
from pycoop.kernels import gemm_khr_staged, gemm_nv

WARMUP = 100


@pc.kernel(workgroup_size=256)
def axpy(X: pc.ReadBuffer[f32], Y: pc.Buffer[f32], a: f32, n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = a * X[i] + Y[i]


def fastest_ms(kernel, grid, args, repeat: int, checked: bool) -> float:
    launch = kernel[grid]
    launch(*args, backend="vulkan", repeat=WARMUP, checked=checked)
    return launch(*args, backend="vulkan", repeat=repeat, checked=checked).time_ms


def compare(name: str, kernel, grid, args, repeat: int, flop: int | None = None) -> None:
    # alternate the modes so clock drift does not favour one
    times = {False: [], True: []}
    for checked in (False, True, False, True):
        times[checked].append(fastest_ms(kernel, grid, args, repeat, checked))
    plain, checked = min(times[False]), min(times[True])
    rate = (lambda t: f"{flop / t / 1e9:8.1f} TFLOP/s") if flop else (lambda t: f"{t * 1e3:8.1f} us   ")
    print(f"{name:<40}{plain:10.3f} ms {rate(plain)}{checked:10.3f} ms {rate(checked)}"
          f"{(checked / plain - 1) * 100:+9.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--repeat", type=int, default=30)
    a = ap.parse_args()
    caps = pc.get_runtime("vulkan").capabilities
    n = a.size
    print(f"# checked-launch overhead, {time.strftime('%Y-%m-%d')}, {caps.device_name}; fastest "
          f"of {a.repeat} back-to-back runs, checked=False and checked=True alternating")
    print(f"{'kernel':<40}{'unchecked':>13}{'':>16}{'checked':>13}{'':>16}{'overhead':>10}")
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)
    B = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)
    dA, dB, dC = pc.asarray(A), pc.asarray(B), pc.zeros((n, n), pc.f32)
    flop = 2 * n ** 3
    compare(f"gemm_nv 128x256x32 spec {n}^3", gemm_nv(128, 256, 32, 256, "constant", 1, True),
            (-(-n // 128), -(-n // 256)), [dA, dB, dC, n, n, n], a.repeat, flop)
    compare(f"gemm_khr_staged 128x256x32 2x4sg {n}^3",
            gemm_khr_staged(128, 256, 32, 2, 4, 8, specialize=True),
            (n // 128, n // 256), [dA, dB, dC, n, n, n], a.repeat, flop)
    del dA, dB, dC
    m = 1 << 24
    x, y = pc.asarray(rng.standard_normal(m, dtype=np.float32)), pc.zeros(m, pc.f32)
    compare(f"axpy {m} f32", axpy, (m // 256,), [x, y, 0.5, m], a.repeat * 10)


if __name__ == "__main__":
    main()
