"""Bring the GPU to its working clocks before a benchmark times anything: rows timed first in
a cold process ran up to 3-4x slow on the H200 (kernels and copies alike)."""
from __future__ import annotations

import functools
import time

import pycoop as pc
from pycoop import f32, u32


@pc.kernel(workgroup_size=256)
def _fma_stream(X: pc.ReadBuffer[f32], Y: pc.Buffer[f32], n: u32):
    i = pc.global_invocation_id.x + pc.global_invocation_id.y * 65535 * 256
    if i < n:
        x, y = X[i], Y[i]
        for _ in pc.range(64):                  # some arithmetic per element, not only memory
            y = y * 0.999 + x
        Y[i] = y


def vulkan_or_skip():
    """The Vulkan runtime, or None after printing why the benchmark skips (no device)."""
    try:
        return pc.get_runtime("vulkan")
    except pc.BackendUnavailable as e:
        print(f"skipped: {e}")
        return None


@functools.cache
def _buffers(n: int) -> tuple:
    """The two arrays the warm-up streams, made once per process (each call reuses them)."""
    return pc.zeros(n, pc.f32, backend="vulkan"), pc.zeros(n, pc.f32, backend="vulkan")


def warm_gpu(seconds: float = 3.0) -> None:
    """Keep a discrete GPU busy for `seconds` with a kernel that streams 1 GB and computes,
    and with 512 MB device-to-device copies, so that its clocks have ramped up before the
    first row is timed. Other devices (lavapipe) are left alone. Sweeps call it briefly
    before each configuration too: creating a pipeline idles the GPU for long enough that
    its clocks fall again (an H100 sweep ran every configuration after the seventh 2-5x
    slow until then)."""
    rt = pc.get_runtime("vulkan")
    if rt.capabilities.device_type != "discrete":
        return
    n = 128 << 20
    x, y = _buffers(n)
    blocks = n // 256
    grid = (min(blocks, 65535), -(-blocks // 65535))
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        with rt.batch():
            for _ in range(10):
                _fma_stream[grid](x, y, n)
                y.copy_from(x)
        pc.synchronize()
