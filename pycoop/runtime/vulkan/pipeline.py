"""Compute pipelines, cached by SHA-256 of what defines them, over one VkPipelineCache.

The pipeline layout is the push-constant range of the argument block, plus, for the descriptor
ABI, one descriptor set layout (set 0) of `bindings` storage buffers; the device-address ABI has
no descriptor sets (buffers travel by address in the block). The layouts live and die with the
pipeline. SPIR-V is checked structurally first (magic, size, entry point)
because drivers may crash rather than fail on malformed modules.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Any

from .capabilities import Capabilities
from .device import Device
from .errors import PipelineError, VulkanError, check
from .ext import (EXTENSIONS, PIPELINE_CREATE_CAPTURE_STATISTICS,
                  SHADER_STAGE_REQUIRE_FULL_SUBGROUPS, ffi, lib, pipeline_statistics, vk)

SPIRV_MAGIC = 0x07230203
OP_ENTRY_POINT, OP_EXECUTION_MODE, OP_FUNCTION = 15, 16, 54
EXECUTION_MODEL_GLCOMPUTE, EXECUTION_MODE_LOCAL_SIZE = 5, 17


def specialization(entries: list[dict], values: dict) -> tuple[tuple[int, bytes], ...]:
    """(SpecId, bytes) of each specialization constant (the sidecar's `spec_constants`): the
    value in `values`, else its default; bools as VkBool32."""
    import numpy as np
    out = []
    for e in entries:
        v = values.get(e["name"], e["default"])
        data = np.uint32(bool(v)) if e["dtype"] == "bool" else np.array(v, dtype=e["dtype"])
        out.append((e["id"], data.tobytes()))
    return tuple(out)


@dataclass
class Pipeline:
    handle: Any
    layout: Any
    module: Any
    push_size: int
    set_layout: Any = None      # descriptor ABI: set 0's layout (None: device-address ABI)
    bindings: int = 0           # storage-buffer bindings of set 0
    dispatched: bool = False    # recorded into a command buffer before (a CPU device such as
                                # lavapipe compiles the shader at its first dispatch)


def inspect_spirv(spv: bytes, entry: str) -> tuple[int, int, int] | None:
    """Check that `spv` is a SPIR-V module with a GLCompute entry point `entry`; return its
    LocalSize (None when given by LocalSizeId). Raises PipelineError saying what is wrong."""
    if len(spv) < 20 or len(spv) % 4:
        raise PipelineError(f"not a SPIR-V module: {len(spv)} bytes (need a multiple of 4, >= 20)")
    words = struct.unpack(f"<{len(spv) // 4}I", spv)
    if words[0] != SPIRV_MAGIC:
        raise PipelineError(f"not a SPIR-V module: magic {words[0]:#010x}, expected "
                            f"{SPIRV_MAGIC:#010x} (little-endian)")
    entries: dict[str, int] = {}
    local_sizes: dict[int, tuple[int, int, int]] = {}
    i = 5
    while i < len(words):
        count, opcode = words[i] >> 16, words[i] & 0xFFFF
        if count == 0 or i + count > len(words):
            raise PipelineError(f"malformed SPIR-V: bad instruction at word {i}")
        if opcode == OP_FUNCTION:
            break
        if opcode == OP_ENTRY_POINT and words[i + 1] == EXECUTION_MODEL_GLCOMPUTE:
            raw = spv[4 * (i + 3): 4 * (i + count)]
            entries[raw.split(b"\0", 1)[0].decode(errors="replace")] = words[i + 2]
        elif opcode == OP_EXECUTION_MODE and words[i + 2] == EXECUTION_MODE_LOCAL_SIZE:
            local_sizes[words[i + 1]] = tuple(words[i + 3: i + 6])
        i += count
    if entry not in entries:
        raise PipelineError(f"SPIR-V module has no GLCompute entry point {entry!r} "
                            f"(it has: {', '.join(entries) or 'none'})")
    return local_sizes.get(entries[entry])


class Pipelines:
    def __init__(self, device: Device):
        self.device = device
        self._cache: dict[bytes, Pipeline] = {}
        # the same bytes object launched again skips hashing: (id, ...) -> (spv, pipeline);
        # the entry keeps `spv` alive so its id cannot be reused by another object
        self._by_object: dict[tuple, tuple[bytes, Pipeline]] = {}
        self.hits = self.misses = 0
        info = ffi.new("VkPipelineCacheCreateInfo*",
                       {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO})
        handle = ffi.new("VkPipelineCache*")
        check(lib.vkCreatePipelineCache(device.handle, info, ffi.NULL, handle),
              "vkCreatePipelineCache")
        self.vk_cache = handle[0]

    @staticmethod
    def key(spv: bytes, entry: str, required_subgroup_size: int | None, push_size: int,
            spec: tuple = (), bindings: int | None = None) -> bytes:
        h = hashlib.sha256(spv)
        h.update(f"\0{entry}\0{required_subgroup_size}\0{push_size}\0{spec!r}\0{bindings}"
                 .encode())
        return h.digest()

    def get(self, spv: bytes, entry: str, required_subgroup_size: int | None,
            push_size: int, spec: tuple = (), bindings: int | None = None) -> Pipeline:
        """`spec`: (SpecId, value bytes) pairs, passed as VkSpecializationInfo. `bindings`:
        the descriptor ABI's storage-buffer count (None: the device-address ABI)."""
        fast = (id(spv), entry, required_subgroup_size, push_size, spec, bindings)
        seen = self._by_object.get(fast)
        if seen is not None and seen[0] is spv:
            self.hits += 1
            return seen[1]
        pipeline = self._get(spv, entry, required_subgroup_size, push_size, spec, bindings)
        if len(self._by_object) < 4096:
            self._by_object[fast] = (spv, pipeline)
        return pipeline

    def _get(self, spv: bytes, entry: str, required_subgroup_size: int | None,
             push_size: int, spec: tuple = (), bindings: int | None = None) -> Pipeline:
        key = self.key(spv, entry, required_subgroup_size, push_size, spec, bindings)
        pipeline = self._cache.get(key)
        if pipeline is not None:
            self.hits += 1
            return pipeline
        self.misses += 1
        local_size = inspect_spirv(spv, entry)
        pipeline = self._create(spv, entry, required_subgroup_size, push_size, local_size, spec,
                                bindings)
        self._cache[key] = pipeline
        return pipeline

    def statistics(self, spv: bytes, entry: str, required_subgroup_size: int | None,
                   push_size: int, spec: tuple = (), bindings: int | None = None) -> list[dict]:
        """What the driver reports of the pipeline `get` would make (registers, code size:
        ext.pipeline_statistics). Compiled again, with statistics captured, into a pipeline of
        its own that is destroyed after the query: launches never use a pipeline built that
        way, as some drivers leave such pipelines out of their caches."""
        caps = self.device.capabilities
        if not caps.has("pipelineExecutableInfo"):
            raise PipelineError(f"{caps.device_name} does not report pipeline statistics "
                                f"({EXTENSIONS['executable_properties']} with the "
                                "pipelineExecutableInfo feature)")
        local_size = inspect_spirv(spv, entry)
        pipeline = self._create(spv, entry, required_subgroup_size, push_size, local_size, spec,
                                bindings, PIPELINE_CREATE_CAPTURE_STATISTICS)
        try:
            return pipeline_statistics(self.device.handle, pipeline.handle)
        finally:
            _destroy(self.device.handle, pipeline)

    def _create(self, spv: bytes, entry: str, required_subgroup_size: int | None,
                push_size: int, local_size: tuple[int, int, int] | None,
                spec: tuple = (), bindings: int | None = None, flags: int = 0) -> Pipeline:
        dev, caps = self.device.handle, self.device.capabilities
        code = ffi.new("uint32_t[]", len(spv) // 4)
        ffi.memmove(code, spv, len(spv))
        module_info = ffi.new("VkShaderModuleCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, "codeSize": len(spv),
            "pCode": code})
        module = ffi.new("VkShaderModule*")
        _check_pipeline(lib.vkCreateShaderModule(dev, module_info, ffi.NULL, module),
                        "vkCreateShaderModule")
        push_range = ffi.new("VkPushConstantRange*", {
            "stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT, "offset": 0, "size": push_size})
        set_layout = None
        if bindings is not None:
            try:
                set_layout = _set_layout(dev, bindings)
            except VulkanError:
                lib.vkDestroyShaderModule(dev, module[0], ffi.NULL)
                raise
        set_layouts = ffi.new("VkDescriptorSetLayout[1]", [set_layout] if set_layout else [])
        layout_info = ffi.new("VkPipelineLayoutCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
            "setLayoutCount": 1 if set_layout else 0,
            "pSetLayouts": set_layouts if set_layout else ffi.NULL,
            "pushConstantRangeCount": 1 if push_size else 0,
            "pPushConstantRanges": push_range if push_size else ffi.NULL})
        layout = ffi.new("VkPipelineLayout*")
        try:
            check(lib.vkCreatePipelineLayout(dev, layout_info, ffi.NULL, layout),
                  "vkCreatePipelineLayout")
        except VulkanError:
            if set_layout:
                lib.vkDestroyDescriptorSetLayout(dev, set_layout, ffi.NULL)
            lib.vkDestroyShaderModule(dev, module[0], ffi.NULL)
            raise
        name = ffi.new("char[]", entry.encode())
        stage_next, stage_flags, subgroup_info = ffi.NULL, 0, None
        if required_subgroup_size is not None:
            stage_flags, subgroup_info = _subgroup_control(caps, required_subgroup_size,
                                                           local_size)
            if subgroup_info is not None:
                stage_next = subgroup_info
        spec_info = ffi.NULL
        if spec:
            data = b"".join(v for _, v in spec)
            offsets = [sum(len(v) for _, v in spec[:i]) for i in range(len(spec))]
            entries = ffi.new("VkSpecializationMapEntry[]", [
                {"constantID": sid, "offset": off, "size": len(v)}
                for (sid, v), off in zip(spec, offsets)])
            blob = ffi.new("char[]", data)
            spec_info = ffi.new("VkSpecializationInfo*", {
                "mapEntryCount": len(spec), "pMapEntries": entries, "dataSize": len(data),
                "pData": blob})
        stage = ffi.new("VkPipelineShaderStageCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, "pNext": stage_next,
            "flags": stage_flags, "stage": vk.VK_SHADER_STAGE_COMPUTE_BIT, "module": module[0],
            "pName": name, "pSpecializationInfo": spec_info})
        info = ffi.new("VkComputePipelineCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, "flags": flags,
            "stage": stage[0],
            "layout": layout[0], "basePipelineIndex": -1})
        handle = ffi.new("VkPipeline*")
        try:
            _check_pipeline(lib.vkCreateComputePipelines(dev, self.vk_cache, 1, info, ffi.NULL,
                                                         handle), "vkCreateComputePipelines")
        except VulkanError:
            lib.vkDestroyPipelineLayout(dev, layout[0], ffi.NULL)
            if set_layout:
                lib.vkDestroyDescriptorSetLayout(dev, set_layout, ffi.NULL)
            lib.vkDestroyShaderModule(dev, module[0], ffi.NULL)
            raise
        return Pipeline(handle[0], layout[0], module[0], push_size, set_layout, bindings or 0)

    def destroy(self) -> None:
        dev = self.device.handle
        for p in self._cache.values():
            _destroy(dev, p)
        self._cache.clear()
        self._by_object.clear()
        lib.vkDestroyPipelineCache(dev, self.vk_cache, ffi.NULL)


def _destroy(dev: Any, p: Pipeline) -> None:
    lib.vkDestroyPipeline(dev, p.handle, ffi.NULL)
    lib.vkDestroyPipelineLayout(dev, p.layout, ffi.NULL)
    if p.set_layout:
        lib.vkDestroyDescriptorSetLayout(dev, p.set_layout, ffi.NULL)
    lib.vkDestroyShaderModule(dev, p.module, ffi.NULL)


def _set_layout(dev: Any, bindings: int) -> Any:
    """Set 0 of the descriptor ABI: storage buffers at bindings 0..bindings-1, compute stage."""
    entries = ffi.new("VkDescriptorSetLayoutBinding[]", [
        {"binding": i, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
         "descriptorCount": 1, "stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT}
        for i in range(bindings)] or 1)
    info = ffi.new("VkDescriptorSetLayoutCreateInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
        "bindingCount": bindings, "pBindings": entries})
    handle = ffi.new("VkDescriptorSetLayout*")
    check(lib.vkCreateDescriptorSetLayout(dev, info, ffi.NULL, handle),
          "vkCreateDescriptorSetLayout")
    return handle[0]


def _subgroup_control(caps: Capabilities, size: int,
                      local_size: tuple[int, int, int] | None) -> tuple[int, Any]:
    """Stage flags and VkPipelineShaderStageRequiredSubgroupSizeCreateInfo for `size`."""
    if not caps.supports_subgroup_size(size):
        raise PipelineError(f"kernel requires subgroup size {size}; {caps.device_name} has "
                            f"{caps.subgroup_size}" + (
                                f" (selectable {caps.min_subgroup_size}..{caps.max_subgroup_size})"
                                if caps.subgroup_size_control else ""))
    if not (caps.subgroup_size_control and "compute" in caps.required_subgroup_size_stages):
        return 0, None      # the device's only size already matches
    flags = 0
    if (caps.has("computeFullSubgroups") and local_size is not None
            and local_size[0] % size == 0):
        flags = SHADER_STAGE_REQUIRE_FULL_SUBGROUPS
    info = ffi.new("VkPipelineShaderStageRequiredSubgroupSizeCreateInfo*", {
        "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
        "requiredSubgroupSize": size})
    return flags, info


def _check_pipeline(result: int, what: str) -> None:
    try:
        check(result, what)
    except VulkanError as exc:
        if type(exc) is VulkanError:      # generic failure: the driver rejected the module
            raise PipelineError(f"{exc} (invalid or unsupported SPIR-V?)", result) from None
        raise
