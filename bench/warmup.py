"""Bring the GPU to its working clocks before a benchmark times anything: rows timed first in
a cold process ran up to 3-4x slow on the H200 (kernels and copies alike)."""
from __future__ import annotations

import time

import pycoop as pc
from pycoop.kernels import gemm_nv


def warm_gpu(seconds: float = 3.0) -> None:
    """Keep the GPU busy for `seconds`, alternating 4096^3 GEMMs (compute) and 512 MB
    device-to-device copies (memory), so that both its clocks have ramped up before the first
    row is timed: rows timed first in a cold process were up to 4x slow."""
    size = 4096
    a = pc.zeros((size, size), pc.f16, backend="vulkan")
    c = pc.zeros((size, size), pc.f32, backend="vulkan")
    src, dst = (pc.zeros(128 << 20, pc.f32, backend="vulkan") for _ in range(2))
    k = gemm_nv(128, 256, 64, 256, "undefined", 2, True)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        with pc.get_runtime().batch():
            for _ in range(20):
                k[size // 128, size // 256](a, a, c, size, size, size)
                dst.copy_from(src)
        pc.synchronize()
