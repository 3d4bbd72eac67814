"""pycoop's Vulkan runtime: every use of Vulkan (pyvulkan) in pycoop goes through here.

Importing this package needs no Vulkan loader; `get_runtime()`, `list_devices()` and
`VulkanRuntime()` raise `VulkanUnavailable` (with the reason) when there is none.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .capabilities import Capabilities, CoopmatShape, FlexibleDimensions
from .errors import (ArgumentError, DeviceLost, OutOfDeviceMemory, OutOfHostMemory,
                     PipelineError, VulkanError, VulkanTimeout, VulkanUnavailable)

if TYPE_CHECKING:
    from .instance import DeviceInfo
    from .runtime import LaunchResult, VulkanRuntime

__all__ = [
    "ArgumentError", "Capabilities", "CoopmatShape", "DeviceInfo", "DeviceLost",
    "FlexibleDimensions", "LaunchResult", "OutOfDeviceMemory", "OutOfHostMemory",
    "PipelineError", "VulkanError", "VulkanRuntime", "VulkanTimeout", "VulkanUnavailable",
    "get_runtime", "list_devices", "reset_runtime",
]


def get_runtime() -> VulkanRuntime:
    """The process-wide runtime on the default device (created on first use)."""
    from .runtime import get_runtime
    return get_runtime()


def reset_runtime() -> None:
    from .runtime import reset_runtime
    reset_runtime()


def list_devices() -> list[DeviceInfo]:
    """Every Vulkan physical device, without creating a logical device."""
    from .instance import list_devices
    return list_devices()


def __getattr__(name: str):   # VulkanRuntime, LaunchResult, DeviceInfo: loaded with pyvulkan
    if name in ("VulkanRuntime", "LaunchResult"):
        from . import runtime
        return getattr(runtime, name)
    if name == "DeviceInfo":
        from .instance import DeviceInfo
        return DeviceInfo
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
