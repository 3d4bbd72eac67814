"""Query a physical device: its Capabilities, and the feature chain/extensions to enable.

One table (`FEATURES`) drives both: every struct listed is queried with
vkGetPhysicalDeviceFeatures2, reported in `Capabilities.features`, and the supported members
are enabled on the logical device (device.py) - so what `pycoop info` shows is what kernels get.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...codegen import float_modes
from . import ext
from .capabilities import NV_COOPMAT2_FEATURES, Capabilities, CoopmatShape, FlexibleDimensions
from .errors import check
from .ext import ffi, lib, vk
from .instance import DEVICE_TYPES, VENDORS, version_text

# float atomics (pycoop.atomic on floats), by storage: VK_EXT_shader_atomic_float / _float2
ATOMIC_FLOAT_FEATURES = tuple(f"shader{where}Float{bits}Atomic{what}" for where in ("Buffer", "Shared")
                              for bits in (32, 64) for what in ("s", "Add"))
ATOMIC_FLOAT2_FEATURES = tuple(f"shader{where}Float{bits}Atomic{what}" for where in ("Buffer", "Shared")
                               for bits, what in ((16, "s"), (16, "Add"), (16, "MinMax"),
                                                  (32, "MinMax"), (64, "MinMax")))
# VkSubgroupFeatureFlagBits (names as pycoop.ops.subgroup.VULKAN_OPERATIONS uses them)
SUBGROUP_OPERATIONS = {0x1: "basic", 0x2: "vote", 0x4: "arithmetic", 0x8: "ballot", 0x10: "shuffle",
                       0x20: "shuffle_relative", 0x40: "clustered", 0x80: "quad"}

# (struct type, sType, extension that must be supported or None for core 1.3, members wanted)
FEATURES: list[tuple[str, int, str | None, tuple[str, ...]]] = [
    ("VkPhysicalDeviceVulkan11Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
     None, ("storageBuffer16BitAccess", "uniformAndStorageBuffer16BitAccess",
            "variablePointersStorageBuffer", "variablePointers")),
    ("VkPhysicalDeviceVulkan12Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
     None, ("bufferDeviceAddress", "vulkanMemoryModel", "vulkanMemoryModelDeviceScope",
            "shaderFloat16", "shaderInt8", "storageBuffer8BitAccess",
            "uniformAndStorageBuffer8BitAccess", "scalarBlockLayout",
            "shaderSubgroupExtendedTypes", "hostQueryReset", "shaderBufferInt64Atomics",
            "shaderSharedInt64Atomics", "timelineSemaphore")),
    ("VkPhysicalDeviceVulkan13Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES,
     None, ("subgroupSizeControl", "computeFullSubgroups", "maintenance4",
            "shaderIntegerDotProduct")),
    ("VkPhysicalDeviceShaderAtomicFloatFeaturesEXT",
     vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT,
     ext.EXTENSIONS["atomic_float"], ATOMIC_FLOAT_FEATURES),
    ("VkPhysicalDeviceShaderAtomicFloat2FeaturesEXT",
     vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_2_FEATURES_EXT,
     ext.EXTENSIONS["atomic_float2"], ATOMIC_FLOAT2_FEATURES),
    ("VkPhysicalDeviceCooperativeMatrixFeaturesKHR",
     vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR,
     ext.EXTENSIONS["coopmat"], ("cooperativeMatrix",)),
    ("VkPhysicalDeviceCooperativeMatrix2FeaturesNV", ext.STYPE_COOPMAT2_FEATURES,
     ext.EXTENSIONS["coopmat2"], NV_COOPMAT2_FEATURES),
    ("VkPhysicalDeviceShaderBfloat16FeaturesKHR", ext.STYPE_BFLOAT16_FEATURES,
     ext.EXTENSIONS["bfloat16"], ("shaderBFloat16Type", "shaderBFloat16DotProduct",
                                  "shaderBFloat16CooperativeMatrix")),
    ("VkPhysicalDeviceShaderFloat8FeaturesEXT", ext.STYPE_FLOAT8_FEATURES,
     ext.EXTENSIONS["float8"], ("shaderFloat8", "shaderFloat8CooperativeMatrix")),
    ("VkPhysicalDeviceCooperativeMatrixDecodeVectorFeaturesNV", ext.STYPE_DECODE_VECTOR_FEATURES,
     ext.EXTENSIONS["decode_vector"], ("cooperativeMatrixDecodeVector",)),
    ("VkPhysicalDeviceCooperativeMatrixConversionFeaturesQCOM",
     ext.STYPE_QCOM_CONVERSION_FEATURES, ext.EXTENSIONS["qcom_conversion"],
     ("cooperativeMatrixConversion",)),
    ("VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR",
     vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
     ext.EXTENSIONS["executable_properties"], ("pipelineExecutableInfo",)),
]
CORE_FEATURES = ("shaderFloat64", "shaderInt64", "shaderInt16")   # in VkPhysicalDeviceFeatures
STAGES = {0x1: "vertex", 0x2: "tessellation_control", 0x4: "tessellation_evaluation",
          0x8: "geometry", 0x10: "fragment", 0x20: "compute", 0x40: "task", 0x80: "mesh"}


@dataclass
class DeviceSupport:
    """Everything device creation needs to know, from one query."""
    capabilities: Capabilities
    extensions_to_enable: list[str]
    features: dict[str, bool]


def device_extensions(physical_device: Any) -> set[str]:
    count = ffi.new("uint32_t*")
    check(lib.vkEnumerateDeviceExtensionProperties(physical_device, ffi.NULL, count, ffi.NULL),
          "vkEnumerateDeviceExtensionProperties")
    props = ffi.new("VkExtensionProperties[]", count[0])
    check(lib.vkEnumerateDeviceExtensionProperties(physical_device, ffi.NULL, count, props),
          "vkEnumerateDeviceExtensionProperties")
    return {ffi.string(props[i].extensionName).decode() for i in range(count[0])}


def feature_chain(extensions: set[str], values: dict[str, bool] | None = None) -> tuple[Any, list[Any]]:
    """A VkPhysicalDeviceFeatures2 chain of every FEATURES struct whose extension is present.
    With `values`, the wanted members are set from it (for device creation); else all zero
    (for querying). Returns (head, structs) - keep `structs` alive while the chain is used."""
    head = ffi.new("VkPhysicalDeviceFeatures2*",
                   {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2})
    structs: list[Any] = [head]
    for type_name, stype, extension, members in FEATURES:
        if extension is not None and extension not in extensions:
            continue
        fields = {m: int(values.get(m, False)) for m in members} if values else {}
        structs.append(ext.struct(type_name, stype, **fields))
    if values:
        for name in CORE_FEATURES:
            setattr(head.features, name, int(values.get(name, False)))
    ext.link(structs)
    return head, structs


def query(instance: Any, physical_device: Any) -> DeviceSupport:
    extensions = device_extensions(physical_device)
    features = _query_features(physical_device, extensions)
    wanted = [e for e in ext.EXTENSIONS.values() if e in extensions]

    props2 = ffi.new("VkPhysicalDeviceProperties2*",
                     {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2})
    p11 = ffi.new("VkPhysicalDeviceVulkan11Properties*",
                  {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES})
    p12 = ffi.new("VkPhysicalDeviceVulkan12Properties*",
                  {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES})
    p13 = ffi.new("VkPhysicalDeviceVulkan13Properties*",
                  {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_PROPERTIES})
    chain = [props2, p11, p12, p13]
    cm2 = None
    if ext.EXTENSIONS["coopmat2"] in extensions:
        cm2 = ext.struct("VkPhysicalDeviceCooperativeMatrix2PropertiesNV",
                         ext.STYPE_COOPMAT2_PROPERTIES)
        chain.append(cm2)
    ext.link(chain)
    lib.vkGetPhysicalDeviceProperties2(physical_device, props2)
    p, limits = props2.properties, props2.properties.limits

    caps = Capabilities(
        device_name=ffi.string(p.deviceName).decode(errors="replace"),
        vendor=VENDORS.get(p.vendorID, hex(p.vendorID)),
        driver_version=f"{ffi.string(p12.driverName).decode(errors='replace')} "
                       f"{ffi.string(p12.driverInfo).decode(errors='replace')}".strip(),
        api_version=version_text(p.apiVersion),
        device_type=DEVICE_TYPES.get(p.deviceType, "other"),
        extensions=tuple(sorted(extensions)),
        features=features,
        nv_coopmat2={name: features.get(name, False) for name in NV_COOPMAT2_FEATURES},
        decode_vector=features.get("cooperativeMatrixDecodeVector", False),
        qcom_conversion=features.get("cooperativeMatrixConversion", False),
        subgroup_size=p11.subgroupSize,
        subgroup_operations=tuple(name for bit, name in SUBGROUP_OPERATIONS.items()
                                  if p11.subgroupSupportedOperations & bit),
        subgroup_stages=tuple(name for bit, name in STAGES.items()
                              if p11.subgroupSupportedStages & bit),
        min_subgroup_size=p13.minSubgroupSize,
        max_subgroup_size=p13.maxSubgroupSize,
        subgroup_size_control=features.get("subgroupSizeControl", False),
        required_subgroup_size_stages=tuple(
            name for bit, name in STAGES.items() if p13.requiredSubgroupSizeStages & bit),
        max_push_constants_size=limits.maxPushConstantsSize,
        min_storage_buffer_offset_alignment=limits.minStorageBufferOffsetAlignment,
        max_storage_buffer_range=limits.maxStorageBufferRange,
        max_per_stage_storage_buffers=limits.maxPerStageDescriptorStorageBuffers,
        max_memory_allocation_count=limits.maxMemoryAllocationCount,
        max_compute_shared_memory_size=limits.maxComputeSharedMemorySize,
        max_compute_workgroup_invocations=limits.maxComputeWorkGroupInvocations,
        max_compute_workgroup_size=tuple(limits.maxComputeWorkGroupSize),
        max_compute_workgroup_count=tuple(limits.maxComputeWorkGroupCount),
        timestamp_period_ns=limits.timestampPeriod,
        float_controls={name: bool(getattr(p12, name)) for name in float_modes.PROPERTIES},
    )
    if features.get("cooperativeMatrix"):
        caps.khr_coopmat_shapes = [CoopmatShape(
            e["MSize"], e["NSize"], e["KSize"], *(_component(e[t]) for t in
                                                  ("AType", "BType", "CType", "ResultType")),
            bool(e["saturatingAccumulation"]), ext.SCOPES.get(e["scope"], str(e["scope"])))
            for e in ext.cooperative_matrix_properties(instance, physical_device)]
    if cm2 is not None:
        caps.coopmat2_max_workgroup_size = cm2.cooperativeMatrixWorkgroupScopeMaxWorkgroupSize
        caps.flexible_max_dimension = cm2.cooperativeMatrixFlexibleDimensionsMaxDimension
        caps.coopmat2_reserved_shared_memory = (
            cm2.cooperativeMatrixWorkgroupScopeReservedSharedMemory)
        if features.get("cooperativeMatrixFlexibleDimensions"):
            caps.flexible_dimensions = [FlexibleDimensions(
                e["MGranularity"], e["NGranularity"], e["KGranularity"],
                *(_component(e[t]) for t in ("AType", "BType", "CType", "ResultType")),
                bool(e["saturatingAccumulation"]), ext.SCOPES.get(e["scope"], str(e["scope"])),
                e["workgroupInvocations"])
                for e in ext.flexible_dimensions_properties(instance, physical_device)]
    return DeviceSupport(caps, wanted, features)


def _query_features(physical_device: Any, extensions: set[str]) -> dict[str, bool]:
    head, structs = feature_chain(extensions)
    lib.vkGetPhysicalDeviceFeatures2(physical_device, head)
    features = {name: bool(getattr(head.features, name)) for name in CORE_FEATURES}
    for struct, (_, _, _, members) in zip(structs[1:], _present(extensions)):
        features.update({m: bool(getattr(struct, m)) for m in members})
    return features


def _present(extensions: set[str]) -> list[tuple[str, int, str | None, tuple[str, ...]]]:
    return [f for f in FEATURES if f[2] is None or f[2] in extensions]


def _component(value: int) -> str:
    return ext.COMPONENT_TYPES.get(value, f"component{value}")
