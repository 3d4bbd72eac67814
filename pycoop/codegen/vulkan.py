"""The Vulkan target: a traced module as a SPIR-V 1.6 GLCompute module.

It owns what is Vulkan's: the entry point and its interface, the argument block (push
constants, or an argument buffer) and descriptor bindings (codegen.abi), bounds-checked
variants (codegen.checked), the Vulkan memory model, float-controls execution modes, and the
device requirements of a module (features and extensions, from its tables for the core
language and from each extension's record).
"""
from __future__ import annotations

from ..ir.core import Module
from ..types import BufferType, u32
from . import abi as abi_mod
from . import checked as checked_mod
from . import extensions, float_modes
from .lower import Lowered, LowerCtx, base_requirements, lower_functions

NAME = "vulkan"
VALIDATOR_ENV = "vulkan1.3"

# Vulkan device features that enable the capabilities of the core language (scalar types, storage,
# memory model, addresses); an extension's own capabilities are in its record (codegen.extensions).
_FEATURES = {
    "Float16": "shaderFloat16", "Float64": "shaderFloat64", "Int8": "shaderInt8",
    "Int16": "shaderInt16", "Int64": "shaderInt64",
    "StorageBuffer8BitAccess": "storageBuffer8BitAccess",
    "StorageBuffer16BitAccess": "storageBuffer16BitAccess",
    "VulkanMemoryModel": "vulkanMemoryModel", "PhysicalStorageBufferAddresses": "bufferDeviceAddress",
    "VulkanMemoryModelDeviceScope": "vulkanMemoryModelDeviceScope",
    "BFloat16TypeKHR": "shaderBFloat16Type",
    "BFloat16CooperativeMatrixKHR": "shaderBFloat16CooperativeMatrix", "Float8EXT": "shaderFloat8",
    "Float8CooperativeMatrixEXT": "shaderFloat8CooperativeMatrix",
}

# Vulkan device extensions that expose the SPIR-V extensions of the core language's types.
_VK_EXTENSIONS = {
    "SPV_KHR_bfloat16": "VK_KHR_shader_bfloat16", "SPV_EXT_float8": "VK_EXT_shader_float8",
}


def lower(module: Module, omit: frozenset[str] = frozenset(), *, debug_info: bool = True,
          abi: str = "device_address", checked: bool = False) -> Lowered:
    """`omit`: optional extensions whose uses are left out (codegen.extensions; e.g.
    DecodeVectorFunc operands: DecodeFunc alone is a valid implementation of the load).
    `debug_info`: OpSource/OpString/OpLine map instructions to the kernel's source lines.
    `abi`: "device_address" (buffers as device addresses in push constants) or "descriptors"
    (buffers as StorageBuffer bindings of set 0, scalars in push constants); see abi.py.
    `checked`: buffer accesses are bounds-guarded (codegen/checked.py; the ABI grows)."""
    descriptors = abi_mod.check_abi(abi) == "descriptors"
    ctx = LowerCtx(module, omit, debug_info, descriptors)
    guards = ctx.checks = checked_mod.Guards(ctx, checked_mod.param_names(module)) if checked else None
    b = ctx.b
    # descriptor modules use Logical addressing unless a pointer (decode functions) needs addresses
    for cap in ("Shader", "VulkanMemoryModel") + (() if descriptors else ("PhysicalStorageBufferAddresses",)):
        ctx.need(cap)
    fn = module.kernel
    ptypes = [p.type for p in fn.params]
    layout = abi_mod.layout(module.param_names, ptypes, abi, checked)
    layout["spec_constants"] = abi_mod.spec_constants(module)

    if descriptors:
        for p, a in zip(fn.params, layout["args"]):
            if a["kind"] != "buffer":
                continue
            var = b.global_inst("OpVariable", ctx.type_id(p.type), "StorageBuffer")
            b.decorate(var, "DescriptorSet", a["set"])
            b.decorate(var, "Binding", a["binding"])
            if p.type.access == "write":
                b.decorate(var, "NonReadable")
            b.name(var, a["name"])
            ctx.set(p, var)
            ctx.interface.append(var)
        members = [(p, ctx.type_id(p.type)) for p in fn.params if not isinstance(p.type, BufferType)]
        entries = [a for a in layout["args"] if a["kind"] != "buffer"]
    else:
        members = [(p, ctx.type_id(p.type)) for p in fn.params]
        entries = layout["args"]
    # the argument block: a push-constant struct, or a pointer to it in an argument buffer
    # checked: the fault record's address, then the buffers' element counts
    extra_members = ([guards.record_type()] + [ctx.type_id(u32)] * len(layout["checked"]["counts"])
                     if checked else [])
    block = (b.type("OpTypeStruct", *(m for _, m in members), *extra_members, unique=True)
             if members or extra_members else None)
    if block is not None:
        b.decorate(block, "Block")
        for i, a in enumerate(entries):
            b.member_decorate(block, i, "Offset", a["offset"])
            b.member_name(block, i, a["name"])
        if checked:
            guards.declare_members(block, len(layout["args"]), layout["checked"])
        b.name(block, "Args")
        if layout["mode"] == "arg_buffer":
            holder = b.type("OpTypeStruct", b.type("OpTypePointer", "PhysicalStorageBuffer", block),
                            unique=True)
            b.decorate(holder, "Block")
            b.member_decorate(holder, 0, "Offset", 0)
        else:
            holder = block
        pc_var = b.global_inst("OpVariable", b.type("OpTypePointer", "PushConstant", holder),
                               "PushConstant")
        ctx.interface.append(pc_var)

    void = b.type("OpTypeVoid")
    main = b.begin_function(void, None, "None", b.type("OpTypeFunction", void))
    ctx.begin_block(b.label())
    if block is not None:
        base, storage = pc_var, "PushConstant"
        if layout["mode"] == "arg_buffer":
            pp = b.type("OpTypePointer", "PhysicalStorageBuffer", block)
            slot = b.emit("OpAccessChain", b.type("OpTypePointer", "PushConstant", pp), pc_var,
                          ctx.const(u32, 0))
            base, storage = b.emit("OpLoad", pp, slot), "PhysicalStorageBuffer"
        for i, (p, mid) in enumerate(members):
            slot = b.emit("OpAccessChain", b.type("OpTypePointer", storage, mid), base, ctx.const(u32, i))
            extra = ["Aligned", 8 if isinstance(p.type, BufferType) else p.type.size] \
                if storage == "PhysicalStorageBuffer" else []
            ctx.set(p, b.emit("OpLoad", mid, slot, *extra))
            b.name(ctx.id(p), entries[i]["name"])
        if checked:
            guards.load_members(base, storage, len(fn.params), extra_members)
    if ctx.lower_region(fn.body, []) is not None:
        b.emit("OpReturn")
    b.end_function()
    ctx.checks = None      # called functions (decode callbacks): unguarded, the counts live in main
    lower_functions(ctx, module)
    b.memory_model("PhysicalStorageBuffer64" if "PhysicalStorageBufferAddresses" in ctx.caps
                   else "Logical", "Vulkan")
    b.entry_point("GLCompute", main, "main", ctx.interface)
    b.execution_mode(main, "LocalSize", *module.workgroup_size)
    fp_modes = float_modes.execution_modes(ctx.fp, ctx.float_widths)
    for mode, width in fp_modes:
        ctx.need(mode)
        b.execution_mode(main, mode, width)
    features = {**_FEATURES}
    vk_extensions = {**_VK_EXTENSIONS}
    for ext in extensions.known():
        features.update(ext.features)
        if ext.vulkan:
            vk_extensions[ext.name] = ext.vulkan
    reqs = {
        **base_requirements(ctx, module),
        "extensions": sorted({vk_extensions[e] for e in b.extensions if e in vk_extensions}),
        "features": sorted({features[c] for c in ctx.caps if c in features} | ctx.features
                           | ({"cooperativeMatrixWorkgroupScope"} if ctx.workgroup_scope else set())),
        "coopmat_types": sorted(ctx.coopmat_types),
        "push_constants": 8 if layout["mode"] == "arg_buffer" else layout["size"],
        "float_controls": [float_modes.device_property(m, w) for m, w in fp_modes],
        "fp": ctx.fp,
    }
    if ctx.driver_defects:
        reqs["driver_defects"] = {k: sorted(v) for k, v in sorted(ctx.driver_defects.items())}
    if ctx.subgroup_operations:
        reqs["subgroup_operations"] = sorted(ctx.subgroup_operations)
    if ctx.uses_subgroup:
        reqs["subgroup_size"] = module.subgroup_size
        layout["required_subgroup_size"] = module.subgroup_size
    notes = [extensions.get(name).omission_note(len(fns)) for name, fns in ctx.dropped.items()]
    if checked:
        layout["checked"]["ops"] = guards.ops
    return Lowered(b.assemble(), layout, sorted(ctx.caps), b.extensions, reqs, notes)
