"""Timeline semaphores: order pycoop's submissions against another API's queue on the GPU.

A submission can wait for a timeline value before its first command and signal one after its
last (`VulkanRuntime.wait_before_next`, `VulkanRuntime.flush(signal=...)`). With
VK_KHR_external_semaphore_fd the semaphore is exportable: CUDA imports its fd
(`cudaImportExternalSemaphore`, type TimelineSemaphoreFd) and waits for or signals values on a
stream, so neither side waits on the host (see runtime/interop.py, `CudaSync`).
"""
from __future__ import annotations

from typing import Any

from .errors import VulkanError, check
from .ext import ffi, get_semaphore_fd, lib, vk

EXTERNAL_SEMAPHORE_FD = "VK_KHR_external_semaphore_fd"


def timeline_support(device) -> str | None:
    """Why `device` cannot share timeline semaphores with CUDA, or None if it can."""
    if not device.support.features.get("timelineSemaphore"):
        return f"{device.info.name} lacks the timelineSemaphore feature"
    if EXTERNAL_SEMAPHORE_FD not in device.capabilities.extensions:
        return f"{device.info.name} lacks {EXTERNAL_SEMAPHORE_FD}"
    return None


class TimelineSemaphore:
    """A VkSemaphore of type timeline starting at 0, exportable as an opaque fd if `export`."""

    def __init__(self, device, export: bool = False):
        if not device.support.features.get("timelineSemaphore"):
            raise VulkanError(f"{device.info.name} lacks the timelineSemaphore feature")
        self.device = device.handle
        exported = ffi.new("VkExportSemaphoreCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_EXPORT_SEMAPHORE_CREATE_INFO,
            "handleTypes": vk.VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT})
        kind = ffi.new("VkSemaphoreTypeCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
            "pNext": exported if export else ffi.NULL,
            "semaphoreType": vk.VK_SEMAPHORE_TYPE_TIMELINE, "initialValue": 0})
        info = ffi.new("VkSemaphoreCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, "pNext": kind})
        handle = ffi.new("VkSemaphore*")
        check(lib.vkCreateSemaphore(self.device, info, ffi.NULL, handle), "vkCreateSemaphore")
        self.handle = handle[0]
        self.export = export

    def fd(self) -> int:
        """A new fd for the semaphore (the importer owns it)."""
        if not self.export:
            raise VulkanError("this timeline semaphore was not created exportable")
        return get_semaphore_fd(self.device, self.handle)

    @property
    def value(self) -> int:
        """The current counter value."""
        out = ffi.new("uint64_t*")
        check(lib.vkGetSemaphoreCounterValue(self.device, self.handle, out),
              "vkGetSemaphoreCounterValue")
        return int(out[0])

    def signal(self, value: int) -> None:
        """Set the counter to `value` from the host (it must exceed the current value)."""
        info = ffi.new("VkSemaphoreSignalInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO, "semaphore": self.handle,
            "value": value})
        check(lib.vkSignalSemaphore(self.device, info), "vkSignalSemaphore")

    def wait(self, value: int, timeout_s: float) -> bool:
        """Wait on the host until the counter reaches `value`; False on timeout."""
        handles = ffi.new("VkSemaphore[1]", [self.handle])
        values = ffi.new("uint64_t[1]", [value])
        info = ffi.new("VkSemaphoreWaitInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, "semaphoreCount": 1,
            "pSemaphores": handles, "pValues": values})
        result = lib.vkWaitSemaphores(self.device, info, max(0, int(timeout_s * 1e9)))
        if result == 2:         # VK_TIMEOUT
            return False
        check(result, "vkWaitSemaphores")
        return True

    def destroy(self) -> None:
        if self.handle is not None:
            lib.vkDestroySemaphore(self.device, self.handle, ffi.NULL)
            self.handle = None


def submit_info(sub, waits: list[tuple[Any, int]], signals: list[tuple[Any, int]]) -> tuple:
    """A VkSubmitInfo for `sub`'s command buffer that first waits for each (semaphore, value)
    of `waits` (before any of its commands) and then signals each of `signals`. Returns the
    info and the structs it points to (keep them alive until vkQueueSubmit returns)."""
    wait_handles = ffi.new("VkSemaphore[]", [s for s, _ in waits] or [ffi.NULL])
    wait_values = ffi.new("uint64_t[]", [v for _, v in waits] or [0])
    stages = ffi.new("VkPipelineStageFlags[]",
                     [vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT] * max(1, len(waits)))
    signal_handles = ffi.new("VkSemaphore[]", [s for s, _ in signals] or [ffi.NULL])
    signal_values = ffi.new("uint64_t[]", [v for _, v in signals] or [0])
    timeline = ffi.new("VkTimelineSemaphoreSubmitInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
        "waitSemaphoreValueCount": len(waits), "pWaitSemaphoreValues": wait_values,
        "signalSemaphoreValueCount": len(signals), "pSignalSemaphoreValues": signal_values})
    info = ffi.new("VkSubmitInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, "pNext": timeline,
        "waitSemaphoreCount": len(waits), "pWaitSemaphores": wait_handles,
        "pWaitDstStageMask": stages, "commandBufferCount": 1,
        "pCommandBuffers": sub.command_buffers,
        "signalSemaphoreCount": len(signals), "pSignalSemaphores": signal_handles})
    return info, (wait_handles, wait_values, stages, signal_handles, signal_values, timeline)
