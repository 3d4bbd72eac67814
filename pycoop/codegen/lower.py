"""Lowering of a traced IR module to a SPIR-V 1.6 Vulkan compute module.

This file knows the module-level structure (types, the push-constant ABI, built-ins, regions
and blocks); what each op becomes is in that op's registry entry. Capabilities and extensions
are collected from the types and ops actually used.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import cell_label
from ..ir.core import Block, Module, Op, Value
from ..ir.registry import get
from ..spirv import grammar
from ..spirv.builder import ModuleBuilder
from ..types import (ArrayType, BufferType, CoopMatType, PointerType, ScalarType, SharedArrayType,
                     StorageClass, StructType, TensorLayoutType, TensorViewType, Type, VectorType,
                     bool_, u32)
from . import abi as abi_mod
from . import checked as checked_mod
from . import float_modes

# Capabilities that SPIR-V 1.6 has in core: their extensions need no OpExtension.
_CORE_IN_1_6 = {"VulkanMemoryModel", "VulkanMemoryModelDeviceScope", "PhysicalStorageBufferAddresses",
                "StorageBuffer8BitAccess", "StorageBuffer16BitAccess", "GroupNonUniform",
                "SignedZeroInfNanPreserve", "RoundingModeRTE", "DenormPreserve"}
_TYPE_CAPS = {("float", 16, None): ("Float16",), ("float", 64, None): ("Float64",),
              ("int", 8, None): ("Int8",), ("int", 16, None): ("Int16",), ("int", 64, None): ("Int64",),
              ("float", 16, "BFloat16KHR"): ("BFloat16TypeKHR",),
              ("float", 8, "Float8E4M3EXT"): ("Float8EXT",), ("float", 8, "Float8E5M2EXT"): ("Float8EXT",)}
_STORAGE_CAPS = {1: "StorageBuffer8BitAccess", 2: "StorageBuffer16BitAccess"}
_GNU_BUILTINS = {"SubgroupId", "SubgroupLocalInvocationId", "SubgroupSize", "NumSubgroups"}
# Vulkan device features that enable each SPIR-V capability (VkPhysicalDevice*Features names).
_FEATURES = {
    "Float16": "shaderFloat16", "Float64": "shaderFloat64", "Int8": "shaderInt8",
    "Int16": "shaderInt16", "Int64": "shaderInt64",
    "StorageBuffer8BitAccess": "storageBuffer8BitAccess",
    "StorageBuffer16BitAccess": "storageBuffer16BitAccess",
    "VulkanMemoryModel": "vulkanMemoryModel", "PhysicalStorageBufferAddresses": "bufferDeviceAddress",
    "VulkanMemoryModelDeviceScope": "vulkanMemoryModelDeviceScope",
    "CooperativeMatrixKHR": "cooperativeMatrix", "BFloat16TypeKHR": "shaderBFloat16Type",
    "BFloat16CooperativeMatrixKHR": "shaderBFloat16CooperativeMatrix", "Float8EXT": "shaderFloat8",
    "Float8CooperativeMatrixEXT": "shaderFloat8CooperativeMatrix",
    "CooperativeMatrixReductionsNV": "cooperativeMatrixReductions",
    "CooperativeMatrixConversionsNV": "cooperativeMatrixConversions",
    "CooperativeMatrixPerElementOperationsNV": "cooperativeMatrixPerElementOperations",
    "CooperativeMatrixTensorAddressingNV": "cooperativeMatrixTensorAddressing",
    "CooperativeMatrixBlockLoadsNV": "cooperativeMatrixBlockLoads",
    "CooperativeMatrixConversionQCOM": "cooperativeMatrixConversion",
    "CooperativeMatrixDecodeVectorNV": "cooperativeMatrixDecodeVector",
}

# Vulkan device extensions that expose each SPIR-V extension.
_VK_EXTENSIONS = {
    "SPV_KHR_cooperative_matrix": "VK_KHR_cooperative_matrix",
    "SPV_NV_cooperative_matrix2": "VK_NV_cooperative_matrix2",
    "SPV_NV_tensor_addressing": "VK_NV_cooperative_matrix2",
    "SPV_NV_cooperative_matrix_decode_vector": "VK_NV_cooperative_matrix_decode_vector",
    "SPV_KHR_bfloat16": "VK_KHR_shader_bfloat16", "SPV_EXT_float8": "VK_EXT_shader_float8",
    "SPV_QCOM_cooperative_matrix_conversion": "VK_QCOM_cooperative_matrix_conversion",
    "SPV_EXT_shader_atomic_float_add": "VK_EXT_shader_atomic_float",
    "SPV_EXT_shader_atomic_float_min_max": "VK_EXT_shader_atomic_float2",
    "SPV_EXT_shader_atomic_float16_add": "VK_EXT_shader_atomic_float2",
}


def component_name(t: ScalarType) -> str:
    """Vulkan component-type name used in device capability lists ("float16", "float8_e4m3")."""
    return {"fp8_e4m3": "float8_e4m3", "fp8_e5m2": "float8_e5m2"}.get(t.name, str(t.dtype))


@dataclass
class Lowered:
    spv: bytes
    abi: dict
    capabilities: list[str]
    extensions: list[str]
    requirements: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)      # what lowering changed, for the compile report


class LowerCtx:
    """What op lowerings use: ids of values and types, constants, instruction emission, blocks."""

    target = "vulkan"            # the SPIR-V client environment (OpenCLLowerCtx: "opencl")

    def __init__(self, module: Module, decode_vector: bool = True, debug_info: bool = False,
                 descriptors: bool = False):
        self.module = module
        self.debug_info = debug_info          # OpLine for the instructions of each op
        # where buffer parameters live: StorageBuffer descriptors or device addresses
        self.buffer_storage = StorageClass.StorageBuffer if descriptors else \
            StorageClass.PhysicalStorageBuffer
        self.checks = None                   # codegen.checked.Guards in a checked lowering
        # False: leave DecodeVectorFunc operands out (SPV_NV_cooperative_matrix_decode_vector)
        self.decode_vector = decode_vector
        self.stripped_functions: set = set()
        self.b = ModuleBuilder((1, 6))
        self.ids: dict[Value, int] = {}
        self._types: dict[Type, int] = {}
        self._builtins: dict[str, int] = {}
        self._glsl: int | None = None
        self.interface: list[int] = []
        self.current_label: int | None = None
        self.caps: set[str] = set()
        self.coopmat_shapes: set[tuple] = set()
        self.coopmat_types: set[tuple] = set()      # (rows, cols, use, component, scope)
        self.uses_subgroup = False          # subgroup-scope matrices or subgroup built-ins
        self._functions: dict = {}
        self._buffer_arrays: dict = {}
        self.workgroup_scope = False         # workgroup-scope matrices (NV coopmat2 feature)
        self.fp = module.fp                  # floating-point mode (float_modes)
        self.float_widths: set[int] = set()  # IEEE float widths used (float-controls modes)
        self.features: set[str] = set()      # device features ops need beyond their capabilities
        self.subgroup_operations: set[str] = set()   # VkSubgroupFeatureFlagBits names (ops.subgroup)

    # ---------------------------------------------------------------- capabilities
    def need(self, cap: str) -> None:
        if cap in self.caps:
            return
        self.caps.add(cap)
        self.b.capability(cap)
        if cap not in _CORE_IN_1_6:
            for ext in grammar.extensions_of_capability(cap)[:1]:
                self.b.extension(ext)

    def enum(self, kind: str, name: str) -> int:
        return grammar.enum_value(kind, name)

    # ---------------------------------------------------------------- types & constants
    def type_id(self, t: Type) -> int:
        tid = self._types.get(t)
        if tid is None:
            tid = self._types[t] = self._make_type(t)
        return tid

    def _make_type(self, t: Type) -> int:
        b = self.b
        if isinstance(t, ScalarType):
            for cap in _TYPE_CAPS.get((t.kind, t.bits, t.encoding), ()):
                self.need(cap)
            if t.is_bool:
                return b.type("OpTypeBool")
            if t.is_int:
                return b.type("OpTypeInt", t.bits, int(t.signed))
            if not t.encoding:
                self.float_widths.add(t.bits)
            if t.encoding:
                return b.type("OpTypeFloat", t.bits, t.encoding)
            return b.type("OpTypeFloat", t.bits)
        if isinstance(t, VectorType):
            if t.count > 4:       # Shader modules: 8/16-component vectors (SPV_EXT_long_vector)
                self.need("LongVectorEXT")
            return b.type("OpTypeVector", self.type_id(t.elem), t.count)
        if isinstance(t, CoopMatType):
            from ..ops.khr import _type_caps
            self.coopmat_types.add((t.rows, t.cols, {"MatrixAKHR": "A", "MatrixBKHR": "B"}.get(
                t.use.value, "Accumulator"), component_name(t.component), t.scope.value.lower()))
            self.uses_subgroup |= t.scope.value == "Subgroup"
            self.workgroup_scope |= t.scope.value == "Workgroup"
            for cap in _type_caps(t):
                self.need(cap)
            return b.type("OpTypeCooperativeMatrixKHR", self.type_id(t.component),
                          self.const(u32, self.enum("Scope", t.scope.value)),
                          self.const(u32, t.rows), self.const(u32, t.cols),
                          self.const(u32, self.enum("CooperativeMatrixUse", t.use.value)))
        if isinstance(t, BufferType):
            return b.type("OpTypePointer", self.buffer_storage.value, self.buffer_block(t))
        if isinstance(t, ArrayType):
            return b.type("OpTypeArray", self.type_id(t.elem), self.const(u32, t.length))
        if isinstance(t, SharedArrayType):
            return b.type("OpTypeArray", self.type_id(t.elem), self.const(u32, t.length))
        if isinstance(t, TensorLayoutType):
            return b.type("OpTypeTensorLayoutNV", self.const(u32, t.dim), self.const(u32, t.clamp_mode))
        if isinstance(t, TensorViewType):
            return b.type("OpTypeTensorViewNV", self.const(u32, t.dim),
                          self.const(bool_, t.has_dimensions), *(self.const(u32, p) for p in t.permutation))
        if isinstance(t, PointerType):
            if t.storage == StorageClass.StorageBuffer:
                return b.type("OpTypePointer", t.storage.value, self._explicit(t.pointee))
            if t.storage == StorageClass.PhysicalStorageBuffer:
                self.need("PhysicalStorageBufferAddresses")
                pointee = self._explicit(t.pointee)
                if isinstance(t.pointee, ScalarType):
                    # OpPtrAccessChain on a PhysicalStorageBuffer pointer needs its stride
                    pid = b.type("OpTypePointer", t.storage.value, pointee, unique=True)
                    b.decorate(pid, "ArrayStride", t.pointee.size)
                    return pid
                return b.type("OpTypePointer", t.storage.value, pointee)
            return b.type("OpTypePointer", t.storage.value, self.type_id(t.pointee))
        if isinstance(t, StructType):
            return self._explicit(t)
        raise TypeError(f"no SPIR-V type for {t}")

    def _explicit(self, t: Type) -> int:
        """Id of `t` with an explicit memory layout (Offset / ArrayStride decorations), as
        types in PhysicalStorageBuffer memory need; plain types are shared otherwise."""
        if isinstance(t, ScalarType):
            self._storage_caps(t)
            return self.type_id(t)
        key = ("explicit", t)
        tid = self._types.get(key)
        if tid is not None:
            return tid
        b = self.b
        if isinstance(t, ArrayType):
            tid = b.type("OpTypeArray", self._explicit(t.elem), self.const(u32, t.length), unique=True)
            b.decorate(tid, "ArrayStride", t.elem.size)
        elif isinstance(t, StructType):
            tid = b.type("OpTypeStruct", *(self._explicit(ft) for _, ft in t.fields), unique=True)
            for i, ((name, _), off) in enumerate(zip(t.fields, t.offsets)):
                b.member_decorate(tid, i, "Offset", off)
                b.member_name(tid, i, name)
            b.name(tid, t.name)
        else:
            tid = self.type_id(t)
        self._types[key] = tid
        return tid

    def buffer_block(self, t: BufferType) -> int:
        """Id of the Block struct (one runtime array) a buffer parameter points to."""
        key = ("block", t)
        st = self._types.get(key)
        if st is None:
            b = self.b
            self._storage_caps(t.elem)
            arr = b.type("OpTypeRuntimeArray", self._explicit(t.elem), unique=True)
            b.decorate(arr, "ArrayStride", t.elem.size)
            self._buffer_arrays[t] = arr
            st = self._types[key] = b.type("OpTypeStruct", arr, unique=True)
            b.decorate(st, "Block")
            b.member_decorate(st, 0, "Offset", 0)
            if t.access == "read":
                b.member_decorate(st, 0, "NonWritable")
        return st

    def buffer_array_id(self, t: BufferType) -> int:
        """Id of the runtime array inside a buffer parameter's Block struct."""
        self.buffer_block(t)
        return self._buffer_arrays[t]

    def emit_raw(self, opname: str, result_type_id: int, *operands):
        """emit() with the result type given as an id."""
        return self.b.emit(opname, result_type_id, *operands)

    def _storage_caps(self, t: Type) -> None:
        if isinstance(t, VectorType):
            t = t.elem
        if isinstance(t, ScalarType) and t.size in _STORAGE_CAPS:
            self.need(_STORAGE_CAPS[t.size])

    def ptr_type(self, t: Type, storage: StorageClass) -> int:
        return self.type_id(PointerType(t, storage))

    def const(self, t: ScalarType, value) -> int:
        return self.b.constant(self.type_id(t), value)

    def constant_composite(self, t: Type, *ids: int) -> int:
        return self.b.constant_composite(self.type_id(t), list(ids))

    # ---------------------------------------------------------------- values
    def id(self, v: Value) -> int:
        return self.ids[v]

    def set(self, v: Value, id_: int) -> None:
        self.ids[v] = id_

    def new_id(self) -> int:
        return self.b.new_id()

    def emit(self, opname: str, result_type: Type | None, *operands):
        if result_type is None:
            return self.b.emit(opname, *operands)
        rid = self.b.emit(opname, self.type_id(result_type), *operands)
        if opname in float_modes.CONTRACTIBLE and self.fp != "fast" and self.target == "vulkan":
            self.b.decorate(rid, "NoContraction")
        return rid

    def emit_patchable(self, opname: str, result_type: Type, result: int, *operands):
        """Emit an instruction whose last two operands are filled in later (OpPhi back edges)."""
        pos = self.b.position()
        self.b.emit(opname, self.type_id(result_type), *operands, *operands[-2:], result=result)

        def patch(value_id: int, label_id: int) -> None:
            self.b.patch_word(pos + 5, value_id)
            self.b.patch_word(pos + 6, label_id)
        return patch

    def glsl(self, name: str, result_type: Type, *args: int) -> int:
        if self._glsl is None:
            self._glsl = self.b.ext_inst_import("GLSL.std.450")
        return self.emit("OpExtInst", result_type, self._glsl, glsl_opcode(name), *args)

    # ---------------------------------------------------------------- blocks
    def new_label(self) -> int:
        return self.b.label()

    def begin_block(self, label: int) -> None:
        self.b.emit_label(label)
        self.current_label = label

    def lower_region(self, block: Block, arg_ids: list[int]) -> list[int] | None:
        """Lower the ops of `block`; return the ids its terminator yields (None: it returned)."""
        for a, i in zip(block.args, arg_ids):
            self.ids[a] = i
        for op in block.ops:
            if op.name in ("yield", "condition"):
                return [self.ids[v] for v in op.operands]
            self.lower_op(op)
            if op.name == "return":
                return None
        return []

    def lower_op(self, op: Op) -> None:
        d = get(op.name)
        for cap in d.capabilities:
            self.need(cap)
        bounds = d.bounds if self.checks is not None else None
        if not (self.debug_info and op.loc is not None):
            self._lower_guarded(d, op, bounds)
            return
        # the op's instructions carry its source position; regions it lowers set their own
        # a notebook cell is named as the cell ("In [4]"), not by ipykernel's temporary file
        outer = self.b.set_line(cell_label(op.loc.file) or op.loc.file, op.loc.line, op.loc.col)
        try:
            self._lower_guarded(d, op, bounds)
        finally:
            self.b.restore_line(outer)

    def _lower_guarded(self, d, op: Op, bounds) -> None:
        """The op's own lowering, inside a bounds guard in a checked lowering (codegen.checked)."""
        if bounds is not None:
            self.checks.lower(op, bounds(op), lambda: d.lower(self, op))
        else:
            d.lower(self, op)

    def need_shape(self, a: CoopMatType, b: CoopMatType, c: CoopMatType, result: CoopMatType,
                   saturating: bool) -> None:
        """Record an MxNxK multiply the device must list (Vulkan component-type names)."""
        self.coopmat_shapes.add((a.rows, b.cols, a.cols, component_name(a.component),
                                 component_name(b.component), component_name(c.component),
                                 component_name(result.component), saturating,
                                 a.scope.value.lower()))

    # ---------------------------------------------------------------- functions
    def function_id(self, f) -> int:
        """Id of a traced Function (allocated on first reference; lowered after the kernel)."""
        fid = self._functions.get(f)
        if fid is None:
            fid = self._functions[f] = self.b.new_id()
        return fid

    def lower_function(self, f) -> None:
        b = self.b
        rt = self.type_id(f.result_type)
        fnt = b.type("OpTypeFunction", rt, *(self.type_id(p.type) for p in f.params))
        b.begin_function(rt, self.function_id(f), "None", fnt)
        for p in f.params:
            self.set(p, b.function_parameter(self.type_id(p.type)))
        self.begin_block(b.label())
        out = self.lower_region(f.body, [self.id(p) for p in f.params])
        b.emit("OpReturnValue", out[0])
        b.end_function()

    # ---------------------------------------------------------------- memory
    def builtin_value(self, name: str, is_vec: bool) -> int:
        var = self._builtins.get(name)
        t = VectorType(u32, 3) if is_vec else u32
        if var is None:
            if name in _GNU_BUILTINS:
                self.need("GroupNonUniform")
                self.uses_subgroup = True
            var = self.b.global_inst("OpVariable", self.ptr_type_input(t), "Input")
            self.b.decorate(var, "BuiltIn", name)
            self._builtins[name] = var
            self.interface.append(var)
        return self.emit("OpLoad", t, var)

    def ptr_type_input(self, t: Type) -> int:
        return self.b.type("OpTypePointer", "Input", self.type_id(t))

    def element_pointer(self, mem: Value, idx: Value) -> tuple[int, int | None]:
        """Pointer to element `idx` of a buffer parameter or shared array, and the alignment
        its accesses must declare (PhysicalStorageBuffer) or None."""
        t = mem.type
        if isinstance(t, BufferType):
            p = self.ptr_type(t.elem, self.buffer_storage)
            align = t.elem.size if self.buffer_storage == StorageClass.PhysicalStorageBuffer else None
            return self.b.emit("OpAccessChain", p, self.id(mem), self.const(u32, 0), self.id(idx)), align
        p = self.ptr_type(t.elem, StorageClass.Workgroup)
        return self.b.emit("OpAccessChain", p, self.id(mem), self.id(idx)), None

    def memory_access(self, align: int | None) -> list:
        if align is None:
            return ["NonPrivatePointer"]
        return ["Aligned|NonPrivatePointer", align]

    def shared_variable(self, t: SharedArrayType) -> int:
        self._storage_caps(t.elem)
        var = self.b.global_inst("OpVariable", self.b.type("OpTypePointer", "Workgroup", self.type_id(t)),
                                 "Workgroup")
        self.interface.append(var)
        return var


_GLSL: dict[str, int] | None = None


def glsl_opcode(name: str) -> int:
    """Instruction number in the GLSL.std.450 extended instruction set (from its grammar)."""
    global _GLSL
    if _GLSL is None:
        _GLSL = grammar.ext_inst_set("glsl.std.450")
    return _GLSL[name]


def lower(module: Module, decode_vector: bool = True, *, debug_info: bool = True,
          abi: str = "device_address", checked: bool = False) -> Lowered:
    """`decode_vector=False` strips DecodeVectorFunc operands and their functions (the
    module stays correct: DecodeFunc alone is a valid implementation of the load).
    `debug_info`: OpSource/OpString/OpLine map instructions to the kernel's source lines.
    `abi`: "device_address" (buffers as device addresses in push constants) or "descriptors"
    (buffers as StorageBuffer bindings of set 0, scalars in push constants); see abi.py.
    `checked`: buffer accesses are bounds-guarded (codegen/checked.py; the ABI grows)."""
    descriptors = abi_mod.check_abi(abi) == "descriptors"
    ctx = LowerCtx(module, decode_vector, debug_info, descriptors)
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
    for f in module.functions:
        if f in ctx.stripped_functions and f not in ctx._functions:
            continue
        ctx.lower_function(f)
    b.memory_model("PhysicalStorageBuffer64" if "PhysicalStorageBufferAddresses" in ctx.caps
                   else "Logical", "Vulkan")
    b.entry_point("GLCompute", main, "main", ctx.interface)
    b.execution_mode(main, "LocalSize", *module.workgroup_size)
    fp_modes = float_modes.execution_modes(ctx.fp, ctx.float_widths)
    for mode, width in fp_modes:
        ctx.need(mode)
        b.execution_mode(main, mode, width)
    shared_bytes = sum(v.type.elem.size * v.type.length for v in module.shared)
    reqs = {
        "capabilities": sorted(ctx.caps),
        "extensions": sorted({_VK_EXTENSIONS[e] for e in b.extensions if e in _VK_EXTENSIONS}),
        "features": sorted({_FEATURES[c] for c in ctx.caps if c in _FEATURES} | ctx.features
                           | ({"cooperativeMatrixWorkgroupScope"} if ctx.workgroup_scope else set())),
        "coopmat_shapes": sorted(ctx.coopmat_shapes),
        "coopmat_types": sorted(ctx.coopmat_types),
        "workgroup_invocations": module.workgroup_size[0] * module.workgroup_size[1] * module.workgroup_size[2],
        "shared_memory": shared_bytes,
        "push_constants": 8 if layout["mode"] == "arg_buffer" else layout["size"],
        "float_controls": [float_modes.device_property(m, w) for m, w in fp_modes],
        "fp": ctx.fp,
    }
    if ctx.subgroup_operations:
        reqs["subgroup_operations"] = sorted(ctx.subgroup_operations)
    if ctx.uses_subgroup:
        reqs["subgroup_size"] = module.subgroup_size
        layout["required_subgroup_size"] = module.subgroup_size
    notes = []
    if ctx.stripped_functions:
        notes.append(f"stripped the DecodeVectorFunc operands ({len(ctx.stripped_functions)} "
                     "decode_vector function(s)) of SPV_NV_cooperative_matrix_decode_vector: the "
                     "target lacks the extension; those tensor loads use their DecodeFunc only")
    if checked:
        layout["checked"]["ops"] = guards.ops
    return Lowered(b.assemble(), layout, sorted(ctx.caps), b.extensions, reqs, notes)
