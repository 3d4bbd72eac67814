"""Buffers with device addresses, pooled by size class so launches don't allocate each time.

Kinds: "device" (device-local, for kernels), "host" (host-visible, cached if possible:
staging for uploads and readbacks), "unified" (device-local and host-visible: kernels read
it directly, no copies; used where that memory is the normal kind, e.g. lavapipe/integrated).
"bar" (device-local and host-visible on a discrete GPU whose whole memory the host can map,
resizable BAR): NumPy arguments of a launch are written there by the host, and kernels read
them in place, so uploads need no staging copy and no DMA (on the H200 the 4096^3 GEMM on NumPy
arrays took 15.1 ms this way against 18.3 ms staged). Never read by the host: reads through
the BAR are uncached and slow, so readbacks stay GPU copy + host copy.
Every buffer can be used by kernels through its device address. Where the device has
VK_KHR_external_memory_fd, "device" buffers are exportable (opaque fd), so a device array can
be imported into CUDA and seen by torch without a copy.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from .device import (MEMORY_DEVICE_LOCAL, MEMORY_HOST_CACHED, MEMORY_HOST_COHERENT,
                     MEMORY_HOST_VISIBLE, Device)
from .errors import OutOfDeviceMemory, VulkanError, check
from .ext import (BUFFER_USAGE_SHADER_DEVICE_ADDRESS, MEMORY_ALLOCATE_DEVICE_ADDRESS, ffi,
                  get_buffer_device_address, lib, vk)

EXTERNAL_MEMORY_FD = "VK_KHR_external_memory_fd"
_HOST = MEMORY_HOST_VISIBLE | MEMORY_HOST_COHERENT
MEMORY_PREFERENCES = {
    "device": [MEMORY_DEVICE_LOCAL, 0],
    "host": [_HOST | MEMORY_HOST_CACHED, _HOST],
    "unified": [MEMORY_DEVICE_LOCAL | _HOST | MEMORY_HOST_CACHED, MEMORY_DEVICE_LOCAL | _HOST, _HOST],
    "bar": [MEMORY_DEVICE_LOCAL | _HOST],
}
BAR_MIN_HEAP_BYTES = 4 << 30        # a smaller BAR window (256 MB without resizable BAR) is
                                    # left to the driver's own use
USAGE = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
         | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT | BUFFER_USAGE_SHADER_DEVICE_ADDRESS)
POOL_LIMIT_BYTES = 512 << 20        # free memory kept for reuse, per kind
# Free buffers kept, per kind: enough for the intermediates of every launch of a few queued
# batches (with 64, a block of 5 launches and 9 small arrays per call, called in a loop,
# allocated 5 new buffers per call: ~1.5 ms of vkAllocateMemory on the H200), within a quarter
# of the driver's cap on live allocations.
POOL_LIMIT_COUNT = 1024


def size_class(size: int) -> int:
    """Round up to a power of two below 1 MiB, else to an eighth of the next power of two
    (at most 12.5% waste), so similar sizes share pooled buffers."""
    size = max(size, 256)
    power = 1 << (size - 1).bit_length()
    if power <= 1 << 20:
        return power
    step = power // 8
    return -(-size // step) * step


class Allocation:
    """A VkBuffer bound to its own VkDeviceMemory; `mapped` is set for host-visible kinds."""
    __slots__ = ("kind", "size", "buffer", "memory", "address", "mapped", "owner",
                 "memory_size", "exportable")

    def __init__(self, kind: str, size: int, buffer: Any, memory: Any, address: int,
                 mapped: Any, owner: "Memory"):
        self.kind, self.size, self.buffer, self.memory = kind, size, buffer, memory
        self.address, self.mapped, self.owner = address, mapped, owner
        self.memory_size, self.exportable = size, False


class Memory:
    """Allocates, pools and frees buffers; counts what is live so leaks are visible."""

    def __init__(self, device: Device):
        self.device = device
        self.export = EXTERNAL_MEMORY_FD in device.capabilities.extensions
        self.bar = device.info.device_type == "discrete" and any(flags & (MEMORY_DEVICE_LOCAL | _HOST) == MEMORY_DEVICE_LOCAL | _HOST
                       and size >= BAR_MIN_HEAP_BYTES
                       for flags, size in zip(device.memory_types, device.type_heap_bytes))
        self.pool_limit_count = min(POOL_LIMIT_COUNT,
                                    device.capabilities.max_memory_allocation_count // 4)
        self._free: dict[tuple[str, int], list[Allocation]] = defaultdict(list)
        self._pooled_bytes: dict[str, int] = defaultdict(int)
        self._pooled_count: dict[str, int] = defaultdict(int)
        self.live_count = 0          # allocations that exist (in use or pooled)
        self.live_bytes = 0

    @property
    def pooled_count(self) -> int:
        return sum(self._pooled_count.values())

    @property
    def pooled_bytes(self) -> int:
        return sum(self._pooled_bytes.values())

    def acquire(self, kind: str, size: int) -> Allocation:
        if size >= 1 << 63:          # past VkDeviceSize (and past any device's memory)
            raise OutOfDeviceMemory(f"{size} bytes are more than a Vulkan buffer can hold")
        capacity = size_class(size)
        free = self._free.get((kind, capacity))
        if free:
            allocation = free.pop()
            self._pooled_bytes[kind] -= capacity
            self._pooled_count[kind] -= 1
            return allocation
        try:
            return self._allocate(kind, capacity)
        except OutOfDeviceMemory:
            self.trim()
            return self._allocate(kind, capacity)

    def release(self, allocation: Allocation) -> None:
        kind = allocation.kind
        if (self._pooled_bytes[kind] + allocation.size > POOL_LIMIT_BYTES
                or self._pooled_count[kind] >= self.pool_limit_count):
            self._destroy(allocation)
            return
        self._free[(kind, allocation.size)].append(allocation)
        self._pooled_bytes[kind] += allocation.size
        self._pooled_count[kind] += 1

    def trim(self) -> None:
        """Free every pooled buffer."""
        for allocations in self._free.values():
            for allocation in allocations:
                self._destroy(allocation)
        self._free.clear()
        self._pooled_bytes.clear()
        self._pooled_count.clear()

    def _allocate(self, kind: str, size: int) -> Allocation:
        dev = self.device.handle
        export = self.export and kind == "device"
        external = ffi.new("VkExternalMemoryBufferCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
            "handleTypes": vk.VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT})
        info = ffi.new("VkBufferCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, "size": size, "usage": USAGE,
            "sharingMode": vk.VK_SHARING_MODE_EXCLUSIVE,
            "pNext": external if export else ffi.NULL})
        handle = ffi.new("VkBuffer*")
        check(lib.vkCreateBuffer(dev, info, ffi.NULL, handle), "vkCreateBuffer")
        buffer = handle[0]
        try:
            requirements = ffi.new("VkMemoryRequirements*")
            lib.vkGetBufferMemoryRequirements(dev, buffer, requirements)
            type_index = self.device.find_memory_type(requirements.memoryTypeBits,
                                                      MEMORY_PREFERENCES[kind])
            if type_index is None:
                raise VulkanError(f"no memory type for {kind} buffers on {self.device.info.name}")
            exported = ffi.new("VkExportMemoryAllocateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_EXPORT_MEMORY_ALLOCATE_INFO,
                "handleTypes": vk.VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT})
            flags = ffi.new("VkMemoryAllocateFlagsInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                "flags": MEMORY_ALLOCATE_DEVICE_ADDRESS,
                "pNext": exported if export else ffi.NULL})
            allocate = ffi.new("VkMemoryAllocateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, "pNext": flags,
                "allocationSize": requirements.size, "memoryTypeIndex": type_index})
            memory_handle = ffi.new("VkDeviceMemory*")
            check(lib.vkAllocateMemory(dev, allocate, ffi.NULL, memory_handle),
                  f"allocating {size} bytes of {kind} memory")
        except BaseException:
            lib.vkDestroyBuffer(dev, buffer, ffi.NULL)
            raise
        memory = memory_handle[0]
        try:
            check(lib.vkBindBufferMemory(dev, buffer, memory, 0), "vkBindBufferMemory")
            mapped = None
            if self.device.memory_types[type_index] & MEMORY_HOST_VISIBLE:
                pointer = ffi.new("void**")
                check(lib.vkMapMemory(dev, memory, 0, size, 0, pointer), "vkMapMemory")
                mapped = pointer[0]
        except BaseException:
            lib.vkDestroyBuffer(dev, buffer, ffi.NULL)
            lib.vkFreeMemory(dev, memory, ffi.NULL)
            raise
        self.live_count += 1
        self.live_bytes += size
        allocation = Allocation(kind, size, buffer, memory,
                                get_buffer_device_address(dev, buffer), mapped, self)
        allocation.memory_size, allocation.exportable = requirements.size, export
        return allocation

    def _destroy(self, allocation: Allocation) -> None:
        lib.vkDestroyBuffer(self.device.handle, allocation.buffer, ffi.NULL)
        lib.vkFreeMemory(self.device.handle, allocation.memory, ffi.NULL)   # unmaps too
        self.live_count -= 1
        self.live_bytes -= allocation.size
