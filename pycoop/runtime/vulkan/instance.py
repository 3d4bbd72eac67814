"""The VkInstance and physical-device choice (PYCOOP_DEVICE), without creating a device."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ... import knobs
from .errors import VulkanUnavailable, check
from .ext import API_VERSION_1_3, ffi, lib, vk

VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
DEVICE_TYPES = {0: "other", 1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}
_TYPE_PREFERENCE = {"discrete": 0, "integrated": 1, "virtual": 2, "cpu": 3, "other": 4}
VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel", 0x5143: "Qualcomm",
           0x13B5: "ARM", 0x1010: "Imagination", 0x106B: "Apple", 0x10005: "Mesa"}


def version_text(version: int) -> str:
    return f"{version >> 22}.{(version >> 12) & 0x3FF}.{version & 0xFFF}"


@dataclass(frozen=True)
class DeviceInfo:
    """One physical device, as `list_devices()` reports it."""
    index: int
    name: str
    device_type: str
    vendor: str
    api_version: str
    usable: bool            # Vulkan 1.3 or newer (what pycoop's runtime needs)


class Instance:
    """A VkInstance (API 1.3). `PYCOOP_VK_VALIDATION=1` adds the Khronos validation layer."""

    def __init__(self) -> None:
        self._keep: list[Any] = []
        layers = [VALIDATION_LAYER] if (knobs.vk_validation()
                                        and VALIDATION_LAYER in _available_layers()) else []
        self.layers = layers
        app_name = ffi.new("char[]", b"pycoop")
        app = ffi.new("VkApplicationInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_APPLICATION_INFO, "pApplicationName": app_name,
            "pEngineName": app_name, "apiVersion": API_VERSION_1_3})
        names = [ffi.new("char[]", n.encode()) for n in layers]
        name_array = ffi.new("char*[]", names)
        info = ffi.new("VkInstanceCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, "pApplicationInfo": app,
            "enabledLayerCount": len(names), "ppEnabledLayerNames": name_array})
        handle = ffi.new("VkInstance*")
        check(lib.vkCreateInstance(info, ffi.NULL, handle), "vkCreateInstance")
        self.handle = handle[0]

    def physical_devices(self) -> list[Any]:
        count = ffi.new("uint32_t*")
        check(lib.vkEnumeratePhysicalDevices(self.handle, count, ffi.NULL),
              "vkEnumeratePhysicalDevices")
        devices = ffi.new("VkPhysicalDevice[]", count[0])
        check(lib.vkEnumeratePhysicalDevices(self.handle, count, devices),
              "vkEnumeratePhysicalDevices")
        return [devices[i] for i in range(count[0])]

    def device_infos(self) -> list[DeviceInfo]:
        infos = []
        for index, pd in enumerate(self.physical_devices()):
            props = ffi.new("VkPhysicalDeviceProperties*")
            lib.vkGetPhysicalDeviceProperties(pd, props)
            infos.append(DeviceInfo(
                index, ffi.string(props.deviceName).decode(errors="replace"),
                DEVICE_TYPES.get(props.deviceType, "other"),
                VENDORS.get(props.vendorID, hex(props.vendorID)),
                version_text(props.apiVersion), props.apiVersion >= API_VERSION_1_3))
        return infos

    def select(self, spec: str | None = None) -> tuple[Any, DeviceInfo]:
        """The physical device named by `spec` (index or name substring; default
        $PYCOOP_DEVICE, else the best usable one: discrete, integrated, virtual, CPU)."""
        spec = os.environ.get("PYCOOP_DEVICE") if spec is None else spec
        devices, infos = self.physical_devices(), self.device_infos()
        listing = "; ".join(f"{i.index}: {i.name} ({i.device_type}, Vulkan {i.api_version})"
                            for i in infos) or "none"
        if spec:
            chosen = [i for i in infos if (spec.isdigit() and i.index == int(spec))
                      or spec.lower() in i.name.lower()]
            if not chosen:
                raise VulkanUnavailable(f"PYCOOP_DEVICE={spec!r} matches no device ({listing})")
            if not chosen[0].usable:
                raise VulkanUnavailable(f"{chosen[0].name} supports only Vulkan "
                                        f"{chosen[0].api_version}; pycoop needs 1.3")
        else:
            chosen = sorted((i for i in infos if i.usable),
                            key=lambda i: _TYPE_PREFERENCE[i.device_type])
            if not chosen:
                raise VulkanUnavailable(f"no Vulkan 1.3 device found (devices: {listing})")
        return devices[chosen[0].index], chosen[0]

    def destroy(self) -> None:
        if self.handle is not None:
            lib.vkDestroyInstance(self.handle, ffi.NULL)
            self.handle = None


def _available_layers() -> set[str]:
    count = ffi.new("uint32_t*")
    lib.vkEnumerateInstanceLayerProperties(count, ffi.NULL)
    layers = ffi.new("VkLayerProperties[]", count[0])
    lib.vkEnumerateInstanceLayerProperties(count, layers)
    return {ffi.string(layers[i].layerName).decode() for i in range(count[0])}


def list_devices() -> list[DeviceInfo]:
    """Every physical device, without creating a logical device."""
    instance = Instance()
    try:
        return instance.device_infos()
    finally:
        instance.destroy()
