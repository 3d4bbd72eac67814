"""Exceptions of the Vulkan runtime, and the mapping from VkResult codes to them.

Importing this module never touches Vulkan, so callers can catch `VulkanUnavailable`
without a loader installed. VkResult values are written out here because pyvulkan
1.3.275 has some extension error codes with the wrong sign (e.g. its
VK_ERROR_OUT_OF_POOL_MEMORY is +1000069000); the numbers are from the Vulkan spec, VkResult.
"""
from __future__ import annotations

from ...errors import ArgumentError, PycoopError  # noqa: F401  (ArgumentError re-exported)



class VulkanError(PycoopError, RuntimeError):
    """A Vulkan call failed; `result` is the VkResult code (None when not from a call)."""

    def __init__(self, message: str, result: int | None = None):
        super().__init__(message)
        self.result = result


class VulkanUnavailable(VulkanError):
    """No Vulkan loader, no driver, or no usable device on this machine."""


class DeviceLost(VulkanError):
    """The device was lost (driver reset or GPU fault); the runtime is recreated on next use."""


class VulkanTimeout(VulkanError):
    """The GPU did not finish in time; the kernel may have hung (e.g. an infinite loop)."""


class OutOfDeviceMemory(VulkanError):
    """A device allocation failed; pooled memory was released, later launches may succeed."""


class OutOfHostMemory(VulkanError):
    """The driver ran out of host memory."""


class PipelineError(VulkanError):
    """The driver rejected a shader module or compute pipeline (invalid or unsupported SPIR-V)."""


# VkResult codes (Vulkan spec, "VkResult").
RESULT_NAMES: dict[int, str] = {
    0: "VK_SUCCESS",
    1: "VK_NOT_READY",
    2: "VK_TIMEOUT",
    5: "VK_INCOMPLETE",
    -1: "VK_ERROR_OUT_OF_HOST_MEMORY",
    -2: "VK_ERROR_OUT_OF_DEVICE_MEMORY",
    -3: "VK_ERROR_INITIALIZATION_FAILED",
    -4: "VK_ERROR_DEVICE_LOST",
    -5: "VK_ERROR_MEMORY_MAP_FAILED",
    -6: "VK_ERROR_LAYER_NOT_PRESENT",
    -7: "VK_ERROR_EXTENSION_NOT_PRESENT",
    -8: "VK_ERROR_FEATURE_NOT_PRESENT",
    -9: "VK_ERROR_INCOMPATIBLE_DRIVER",
    -10: "VK_ERROR_TOO_MANY_OBJECTS",
    -11: "VK_ERROR_FORMAT_NOT_SUPPORTED",
    -12: "VK_ERROR_FRAGMENTED_POOL",
    -13: "VK_ERROR_UNKNOWN",
    -1000069000: "VK_ERROR_OUT_OF_POOL_MEMORY",
    -1000161000: "VK_ERROR_FRAGMENTATION",
    -1000257000: "VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS",
    -1000012000: "VK_ERROR_INVALID_SHADER_NV",
    1000297000: "VK_PIPELINE_COMPILE_REQUIRED",
}

_MEANING: dict[int, tuple[type[VulkanError], str]] = {
    2: (VulkanTimeout, "timed out; the GPU may have hung (kernel not terminating?)"),
    -1: (OutOfHostMemory, "out of host memory"),
    -2: (OutOfDeviceMemory, "out of device memory"),
    -3: (VulkanUnavailable, "initialization failed (driver problem?)"),
    -4: (DeviceLost, "device lost (GPU fault or driver reset)"),
    -6: (VulkanUnavailable, "a requested layer is not installed"),
    -7: (VulkanUnavailable, "a requested extension is not supported"),
    -8: (VulkanUnavailable, "a requested feature is not supported"),
    -9: (VulkanUnavailable, "no compatible Vulkan driver"),
    -1000012000: (PipelineError, "the driver rejected the shader"),
}


def result_name(result: int) -> str:
    return RESULT_NAMES.get(result, f"VkResult({result})")


def check(result: int, what: str) -> None:
    """Raise the exception that explains `result` if it is not VK_SUCCESS."""
    if result == 0:
        return
    cls, meaning = _MEANING.get(result, (VulkanError, "failed"))
    raise cls(f"{what}: {meaning} [{result_name(result)}]", result)
