"""The logical device: one compute queue, every relevant supported feature enabled."""
from __future__ import annotations

from typing import Any

from . import probe
from .errors import VulkanUnavailable, check
from .ext import ffi, lib, vk
from .instance import Instance

MEMORY_DEVICE_LOCAL = 0x1     # VkMemoryPropertyFlagBits
MEMORY_HOST_VISIBLE = 0x2
MEMORY_HOST_COHERENT = 0x4
MEMORY_HOST_CACHED = 0x8


class Device:
    """A VkDevice on the chosen physical device, its compute queue and memory types."""

    def __init__(self, instance: Instance, device_spec: str | None = None):
        self.physical_device, self.info = instance.select(device_spec)
        self.support = probe.query(instance.handle, self.physical_device)
        self.capabilities = self.support.capabilities
        if not self.support.features.get("bufferDeviceAddress"):
            raise VulkanUnavailable(f"{self.info.name} lacks bufferDeviceAddress, which pycoop's "
                                    "kernel ABI needs")
        self.queue_family, self.timestamp_bits = self._pick_queue_family()
        self.handle = self._create()
        queue = ffi.new("VkQueue*")
        lib.vkGetDeviceQueue(self.handle, self.queue_family, 0, queue)
        self.queue = queue[0]
        self.memory_types, self.heap_count, self.type_heap_bytes = self._memory_properties()

    def _pick_queue_family(self) -> tuple[int, int]:
        """A compute queue family, preferring one with timestamps, then a compute-only one."""
        count = ffi.new("uint32_t*")
        lib.vkGetPhysicalDeviceQueueFamilyProperties(self.physical_device, count, ffi.NULL)
        families = ffi.new("VkQueueFamilyProperties[]", count[0])
        lib.vkGetPhysicalDeviceQueueFamilyProperties(self.physical_device, count, families)
        compute = [(families[i].timestampValidBits == 0,
                    bool(families[i].queueFlags & vk.VK_QUEUE_GRAPHICS_BIT), i)
                   for i in range(count[0]) if families[i].queueFlags & vk.VK_QUEUE_COMPUTE_BIT]
        if not compute:
            raise VulkanUnavailable(f"{self.info.name} has no compute queue")
        index = min(compute)[2]
        return index, families[index].timestampValidBits

    def _create(self) -> Any:
        head, keep = probe.feature_chain(set(self.capabilities.extensions), self.support.features)
        priority = ffi.new("float*", 1.0)
        queue_info = ffi.new("VkDeviceQueueCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
            "queueFamilyIndex": self.queue_family, "queueCount": 1, "pQueuePriorities": priority})
        names = [ffi.new("char[]", e.encode()) for e in self.support.extensions_to_enable]
        name_array = ffi.new("char*[]", names)
        info = ffi.new("VkDeviceCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, "pNext": head,
            "queueCreateInfoCount": 1, "pQueueCreateInfos": queue_info,
            "enabledExtensionCount": len(names), "ppEnabledExtensionNames": name_array})
        handle = ffi.new("VkDevice*")
        check(lib.vkCreateDevice(self.physical_device, info, ffi.NULL, handle),
              f"vkCreateDevice on {self.info.name}")
        del keep
        return handle[0]

    def _memory_properties(self) -> tuple[list[int], int, list[int]]:
        """Property flags of each memory type, the number of heaps, and the size of each
        type's heap."""
        props = ffi.new("VkPhysicalDeviceMemoryProperties*")
        lib.vkGetPhysicalDeviceMemoryProperties(self.physical_device, props)
        types = [props.memoryTypes[i] for i in range(props.memoryTypeCount)]
        return ([t.propertyFlags for t in types], props.memoryHeapCount,
                [int(props.memoryHeaps[t.heapIndex].size) for t in types])

    def find_memory_type(self, allowed_bits: int, preferences: list[int]) -> int | None:
        """The first memory type allowed by `allowed_bits` that has all flags of the earliest
        satisfiable entry of `preferences`."""
        for wanted in preferences:
            for index, flags in enumerate(self.memory_types):
                if allowed_bits & (1 << index) and flags & wanted == wanted:
                    return index
        return None

    def has_memory(self, flags: int) -> bool:
        return any(t & flags == flags for t in self.memory_types)

    def heap_usage(self) -> list[int] | None:
        """Bytes in use per memory heap (VK_EXT_memory_budget), or None without it."""
        if "VK_EXT_memory_budget" not in self.capabilities.extensions:
            return None
        budget = ffi.new("VkPhysicalDeviceMemoryBudgetPropertiesEXT*", {
            "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT})
        props = ffi.new("VkPhysicalDeviceMemoryProperties2*", {
            "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, "pNext": budget})
        lib.vkGetPhysicalDeviceMemoryProperties2(self.physical_device, props)
        return [int(budget.heapUsage[i]) for i in range(self.heap_count)]

    def destroy(self) -> None:
        if self.handle is not None:
            lib.vkDestroyDevice(self.handle, ffi.NULL)
            self.handle = None
