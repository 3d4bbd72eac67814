"""What the runtime tests share: whether a Vulkan device (lavapipe in CI) is there, and a
kernel every launch-path test uses."""
from __future__ import annotations

import pycoop as pc
from pycoop import f32, u32


def _vulkan_ok() -> bool:
    try:
        from pycoop.runtime.vulkan import get_runtime
        get_runtime()
        return True
    except Exception:          # noqa: BLE001  (no loader / no device: those tests skip)
        return False


VULKAN = _vulkan_ok()


@pc.kernel(workgroup_size=64)
def axpy(X: pc.ReadBuffer[f32], Y: pc.Buffer[f32], a: f32, n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = a * X[i] + Y[i]
