"""What pyvulkan 1.3.275 lacks or gets wrong, in one documented place.

Numbers come from vk.xml (PyPI `vulkan-object` 1.4.366; abbreviated "REF" below), or from
the Vulkan spec where pyvulkan has the name but a missing/None value ("SPEC").

Structs pyvulkan's (precompiled, closed) cffi `ffi` does not know are declared in a private
cffi FFI with the same layouts; `struct()` picks whichever FFI knows the type, and `link()`
chains structs of either FFI through their `pNext` by address.
"""
from __future__ import annotations

from typing import Any

import cffi

from ._loader import load_vulkan
from .errors import VulkanError, check

vk = load_vulkan()
ffi, lib = vk.ffi, vk.lib

# --- constants pyvulkan lacks or has as None ---------------------------------------------
API_VERSION_1_3 = (1 << 22) | (3 << 12)                    # SPEC: VK_MAKE_API_VERSION(0, 1, 3, 0)
BUFFER_USAGE_SHADER_DEVICE_ADDRESS = 0x00020000             # SPEC: VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT
MEMORY_ALLOCATE_DEVICE_ADDRESS = 0x2                       # SPEC: VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT
SHADER_STAGE_REQUIRE_FULL_SUBGROUPS = 0x2                  # SPEC: VkPipelineShaderStageCreateFlagBits
PIPELINE_CREATE_CAPTURE_STATISTICS = 0x40                  # SPEC: VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR

# sTypes of structs pyvulkan lacks (REF table; 1000000000 + (extension_number - 1) * 1000 + offset)
STYPE_BFLOAT16_FEATURES = 1000141000          # REF: VK_KHR_shader_bfloat16 (142)
STYPE_FLOAT8_FEATURES = 1000567000            # REF: VK_EXT_shader_float8 (568)
STYPE_COOPMAT2_FEATURES = 1000593000          # REF: VK_NV_cooperative_matrix2 (594)
STYPE_FLEXIBLE_DIMENSIONS_PROPERTIES = 1000593001   # REF: VK_NV_cooperative_matrix2 (594)
STYPE_COOPMAT2_PROPERTIES = 1000593002        # REF: VK_NV_cooperative_matrix2 (594)
STYPE_DECODE_VECTOR_FEATURES = 1000689000     # REF: VK_NV_cooperative_matrix_decode_vector (690)
# VK_QCOM_cooperative_matrix_conversion is registered extension number 173 (not in REF; vk.xml
# as mirrored by LWJGL's and the Haskell `vulkan` bindings): 1000000000 + 172 * 1000.
STYPE_QCOM_CONVERSION_FEATURES = 1000172000

# VkComponentTypeKHR (REF: core values 0..10, bfloat16 and float8 from their extensions).
COMPONENT_TYPES: dict[int, str] = {
    0: "float16", 1: "float32", 2: "float64", 3: "int8", 4: "int16", 5: "int32", 6: "int64",
    7: "uint8", 8: "uint16", 9: "uint32", 10: "uint64",
    1000141000: "bfloat16",       # REF: VK_COMPONENT_TYPE_BFLOAT16_KHR
    1000567002: "float8_e4m3",    # REF: VK_COMPONENT_TYPE_FLOAT8_E4M3_EXT
    1000567003: "float8_e5m2",    # REF: VK_COMPONENT_TYPE_FLOAT8_E5M2_EXT
}
SCOPES: dict[int, str] = {1: "device", 2: "workgroup", 3: "subgroup", 5: "queue_family"}  # REF: VkScopeKHR

EXTENSIONS = {
    "coopmat": "VK_KHR_cooperative_matrix",
    "coopmat2": "VK_NV_cooperative_matrix2",
    "bfloat16": "VK_KHR_shader_bfloat16",
    "float8": "VK_EXT_shader_float8",
    "decode_vector": "VK_NV_cooperative_matrix_decode_vector",
    "qcom_conversion": "VK_QCOM_cooperative_matrix_conversion",
    "memory_budget": "VK_EXT_memory_budget",
    "external_memory_fd": "VK_KHR_external_memory_fd",     # device arrays shared with CUDA
    "external_semaphore_fd": "VK_KHR_external_semaphore_fd",   # ordering with CUDA streams
    "atomic_float": "VK_EXT_shader_atomic_float",
    "atomic_float2": "VK_EXT_shader_atomic_float2",
    "executable_properties": "VK_KHR_pipeline_executable_properties",   # register counts
}

# --- struct layouts pyvulkan lacks (REF members, in order) -----------------------------------
_ext_ffi = cffi.FFI()
_ext_ffi.cdef("""
typedef uint32_t VkBool32;
typedef int32_t VkStructureType;
typedef struct VkPhysicalDeviceCooperativeMatrix2FeaturesNV {
    VkStructureType sType; void* pNext;
    VkBool32 cooperativeMatrixWorkgroupScope; VkBool32 cooperativeMatrixFlexibleDimensions;
    VkBool32 cooperativeMatrixReductions; VkBool32 cooperativeMatrixConversions;
    VkBool32 cooperativeMatrixPerElementOperations; VkBool32 cooperativeMatrixTensorAddressing;
    VkBool32 cooperativeMatrixBlockLoads;
} VkPhysicalDeviceCooperativeMatrix2FeaturesNV;
typedef struct VkPhysicalDeviceCooperativeMatrix2PropertiesNV {
    VkStructureType sType; void* pNext;
    uint32_t cooperativeMatrixWorkgroupScopeMaxWorkgroupSize;
    uint32_t cooperativeMatrixFlexibleDimensionsMaxDimension;
    uint32_t cooperativeMatrixWorkgroupScopeReservedSharedMemory;
} VkPhysicalDeviceCooperativeMatrix2PropertiesNV;
typedef struct VkCooperativeMatrixFlexibleDimensionsPropertiesNV {
    VkStructureType sType; void* pNext;
    uint32_t MGranularity; uint32_t NGranularity; uint32_t KGranularity;
    int32_t AType; int32_t BType; int32_t CType; int32_t ResultType;
    VkBool32 saturatingAccumulation; int32_t scope; uint32_t workgroupInvocations;
} VkCooperativeMatrixFlexibleDimensionsPropertiesNV;
typedef struct VkPhysicalDeviceShaderBfloat16FeaturesKHR {
    VkStructureType sType; void* pNext;
    VkBool32 shaderBFloat16Type; VkBool32 shaderBFloat16DotProduct;
    VkBool32 shaderBFloat16CooperativeMatrix;
} VkPhysicalDeviceShaderBfloat16FeaturesKHR;
typedef struct VkPhysicalDeviceShaderFloat8FeaturesEXT {
    VkStructureType sType; void* pNext;
    VkBool32 shaderFloat8; VkBool32 shaderFloat8CooperativeMatrix;
} VkPhysicalDeviceShaderFloat8FeaturesEXT;
typedef struct VkPhysicalDeviceCooperativeMatrixDecodeVectorFeaturesNV {
    VkStructureType sType; void* pNext;
    VkBool32 cooperativeMatrixDecodeVector;
} VkPhysicalDeviceCooperativeMatrixDecodeVectorFeaturesNV;
typedef struct VkPhysicalDeviceCooperativeMatrixConversionFeaturesQCOM {
    VkStructureType sType; void* pNext;
    VkBool32 cooperativeMatrixConversion;
} VkPhysicalDeviceCooperativeMatrixConversionFeaturesQCOM;
""")


def _ffi_for(type_name: str) -> cffi.FFI:
    try:
        ffi.typeof(type_name)
        return ffi
    except ffi.error:
        return _ext_ffi


def struct(type_name: str, stype: int, **fields: Any) -> Any:
    """Allocate a zeroed Vulkan struct (from whichever FFI knows it) with sType set."""
    return _ffi_for(type_name).new(f"{type_name}*", {"sType": stype, **fields})


def struct_array(type_name: str, stype: int, count: int) -> Any:
    f = _ffi_for(type_name)
    array = f.new(f"{type_name}[]", max(count, 1))
    for item in array:
        item.sType = stype
    return array


def address(cdata: Any) -> int:
    """The address of a struct of either FFI, as an int."""
    for f in (ffi, _ext_ffi):
        try:
            return int(f.cast("uintptr_t", cdata))
        except TypeError:
            continue
    raise TypeError(f"not a cffi pointer: {cdata!r}")


def link(structs: list[Any]) -> Any:
    """Chain `structs` through pNext in order; returns the head as a pyvulkan `void*`."""
    for head, tail in zip(structs, structs[1:]):
        head.pNext = _owner(head).cast("void *", address(tail))
    return ffi.cast("void *", address(structs[0])) if structs else ffi.NULL


def _owner(cdata: Any) -> cffi.FFI:
    return ffi if isinstance(cdata, ffi.CData) else _ext_ffi


# --- functions ------------------------------------------------------------------------------
def get_buffer_device_address(device: Any, buffer: Any) -> int:
    """Device address of `buffer` (the pyvulkan wrapper returns its input struct instead)."""
    info = ffi.new("VkBufferDeviceAddressInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, "buffer": buffer})
    return int(lib.vkGetBufferDeviceAddress(device, info))


def _export_fd(device: Any, function: str, info_type: str, info: dict, extension: str) -> int:
    """A POSIX fd from vkGetMemoryFdKHR / vkGetSemaphoreFdKHR, which are not in pyvulkan's
    `lib`: fetched with vkGetDeviceProcAddr. Each call makes a new fd; whoever imports it owns it."""
    pointer = lib.vkGetDeviceProcAddr(device, function.encode())
    if pointer == ffi.NULL:
        raise VulkanError(f"{function} is not available ({extension})")
    fn = ffi.cast(f"PFN_{function}", pointer)
    info_struct = ffi.new(f"{info_type}*", info)      # alive until the call returns
    fd = ffi.new("int*")
    check(fn(device, info_struct, fd), function)
    return fd[0]


def get_memory_fd(device: Any, memory: Any) -> int:
    """A POSIX fd for exportable `memory` (VK_KHR_external_memory_fd, opaque fd)."""
    return _export_fd(device, "vkGetMemoryFdKHR", "VkMemoryGetFdInfoKHR", {
        "sType": vk.VK_STRUCTURE_TYPE_MEMORY_GET_FD_INFO_KHR, "memory": memory,
        "handleType": vk.VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT},
        "VK_KHR_external_memory_fd")


def get_semaphore_fd(device: Any, semaphore: Any) -> int:
    """A POSIX fd for an exportable semaphore (VK_KHR_external_semaphore_fd, opaque fd)."""
    return _export_fd(device, "vkGetSemaphoreFdKHR", "VkSemaphoreGetFdInfoKHR", {
        "sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_GET_FD_INFO_KHR, "semaphore": semaphore,
        "handleType": vk.VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT},
        "VK_KHR_external_semaphore_fd")


def device_uuid(physical_device: Any) -> bytes:
    """VkPhysicalDeviceIDProperties.deviceUUID: matches CUDA's device UUID on NVIDIA."""
    ids = ffi.new("VkPhysicalDeviceIDProperties*", {
        "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES})
    props = ffi.new("VkPhysicalDeviceProperties2*", {
        "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, "pNext": ids})
    lib.vkGetPhysicalDeviceProperties2(physical_device, props)
    return bytes(ffi.buffer(ids.deviceUUID, 16))


def _instance_function(instance: Any, name: str, ctype: str) -> Any:
    pointer = lib.vkGetInstanceProcAddr(instance, name.encode())
    if pointer == ffi.NULL:
        return None
    return ffi.cast(ctype, pointer)


def _enumerate(fn: Any, physical_device: Any, type_name: str, stype: int,
               what: str) -> list[dict[str, int]]:
    """Call a count-then-fill query; each entry as a dict of its members (sType/pNext dropped)."""
    count = ffi.new("uint32_t*")
    check(fn(physical_device, count, ffi.NULL), what)
    items = struct_array(type_name, stype, count[0])
    check(fn(physical_device, count, ffi.cast("void *", address(items))), what)
    names = [name for name, _ in _ffi_for(type_name).typeof(type_name).fields
             if name not in ("sType", "pNext")]
    return [{name: getattr(items[i], name) for name in names} for i in range(count[0])]


def cooperative_matrix_properties(instance: Any, physical_device: Any) -> list[dict[str, int]]:
    """VkCooperativeMatrixPropertiesKHR entries (call only if VK_KHR_cooperative_matrix exists)."""
    fn = _instance_function(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR",
                            "VkResult(*)(VkPhysicalDevice, uint32_t*, void*)")
    if fn is None:
        return []
    return _enumerate(fn, physical_device, "VkCooperativeMatrixPropertiesKHR",
                      vk.VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR,
                      "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")


def flexible_dimensions_properties(instance: Any, physical_device: Any) -> list[dict[str, int]]:
    """VkCooperativeMatrixFlexibleDimensionsPropertiesNV entries (VK_NV_cooperative_matrix2)."""
    fn = _instance_function(instance,
                            "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV",
                            "VkResult(*)(VkPhysicalDevice, uint32_t*, void*)")
    if fn is None:
        return []
    return _enumerate(fn, physical_device, "VkCooperativeMatrixFlexibleDimensionsPropertiesNV",
                      STYPE_FLEXIBLE_DIMENSIONS_PROPERTIES,
                      "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV")


def _device_function(device: Any, name: str, extension: str) -> Any:
    pointer = lib.vkGetDeviceProcAddr(device, name.encode())
    if pointer == ffi.NULL:
        raise VulkanError(f"{name} is not available ({extension})")
    return ffi.cast(f"PFN_{name}", pointer)


def _statistic_value(stat: Any) -> bool | int | float:
    """A VkPipelineExecutableStatisticKHR's value, by its `format` (SPEC: BOOL32 0, INT64 1,
    UINT64 2, FLOAT64 3)."""
    return {0: lambda v: bool(v.b32), 1: lambda v: int(v.i64), 2: lambda v: int(v.u64),
            3: lambda v: float(v.f64)}[stat.format](stat.value)


def pipeline_statistics(device: Any, pipeline: Any) -> list[dict[str, Any]]:
    """What the driver reports of each executable of `pipeline` (created with
    PIPELINE_CREATE_CAPTURE_STATISTICS; VK_KHR_pipeline_executable_properties): per
    executable {"name", "description", "subgroup_size", "statistics": {name: (value,
    description)}}. The statistics' names are the driver's own (e.g. a register count)."""
    extension = EXTENSIONS["executable_properties"]
    get_props = _device_function(device, "vkGetPipelineExecutablePropertiesKHR", extension)
    get_stats = _device_function(device, "vkGetPipelineExecutableStatisticsKHR", extension)
    info = ffi.new("VkPipelineInfoKHR*", {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR,
                                          "pipeline": pipeline})
    props, count = _filled(lambda n, items: get_props(device, info, n, items),
                           "VkPipelineExecutablePropertiesKHR",
                           vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR,
                           "vkGetPipelineExecutablePropertiesKHR")
    out = []
    for index in range(count):
        p = props[index]
        executable = ffi.new("VkPipelineExecutableInfoKHR*", {
            "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, "pipeline": pipeline,
            "executableIndex": index})
        stats, n = _filled(lambda n, items: get_stats(device, executable, n, items),
                           "VkPipelineExecutableStatisticKHR",
                           vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR,
                           "vkGetPipelineExecutableStatisticsKHR")
        out.append({"name": _text(p.name), "description": _text(p.description),
                    "subgroup_size": p.subgroupSize, "statistics": statistics_of(stats, n)})
    return out


def _filled(call: Any, type_name: str, stype: int, what: str) -> tuple[Any, int]:
    """A count-then-fill query: `call(count pointer, array or NULL)` twice; returns the
    array and its count."""
    count = ffi.new("uint32_t*")
    check(call(count, ffi.NULL), what)
    items = struct_array(type_name, stype, count[0])
    check(call(count, items), what)
    return items, count[0]


def _text(chars: Any) -> str:
    return ffi.string(chars).decode(errors="replace")


def statistics_of(stats: Any, count: int) -> dict[str, tuple[bool | int | float, str]]:
    """{name: (value, description)} of the first `count` VkPipelineExecutableStatisticKHR
    of the cffi array `stats`."""
    return {_text(stats[i].name): (_statistic_value(stats[i]), _text(stats[i].description))
            for i in range(count)}
