"""The lowering context every op lowering writes through: ids of values and types,
constants, instruction emission, blocks, built-ins, memory access and functions.

What each op becomes is in that op's registry record; the module around the ops (entry point,
ABI, memory model, requirements) is the target's (codegen.vulkan, codegen.opencl), which
subclasses this context where its environment differs. Capabilities and extensions are
collected from the types and ops actually used.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import cell_label
from ..ir.core import Block, Module, Op, Value, merged_sources
from ..ir.registry import get
from ..spirv import grammar
from ..spirv.builder import ModuleBuilder
from ..types import (ArrayType, BufferType, CoopMatType, PointerType, ScalarType, SharedArrayType,
                     StorageClass, StructType, TensorLayoutType, TensorViewType, Type, VectorType,
                     bool_, u32)
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
def coopmat_capabilities(t: CoopMatType) -> tuple[str, ...]:
    """The capabilities a cooperative-matrix type needs (by its component type)."""
    caps = ["CooperativeMatrixKHR"]
    if t.component.encoding == "BFloat16KHR":
        caps.append("BFloat16CooperativeMatrixKHR")
    elif t.component.encoding:
        caps.append("Float8CooperativeMatrixEXT")
    return tuple(caps)


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
    spirv_version = (1, 6)
    math_set = ("GLSL.std.450", "glsl.std.450")    # (OpExtInstImport name, grammar name)

    def __init__(self, module: Module, omit: frozenset[str] = frozenset(), debug_info: bool = False,
                 descriptors: bool = False):
        self.module = module
        self._merged: dict | None = None      # merged_sources(module), made when first asked
        self.debug_info = debug_info          # OpLine for the instructions of each op
        # where buffer parameters live: StorageBuffer descriptors or device addresses
        self.buffer_storage = StorageClass.StorageBuffer if descriptors else \
            StorageClass.PhysicalStorageBuffer
        self.checks = None                   # codegen.checked.Guards in a checked lowering
        # optional extensions left out (codegen.extensions): their ops lower without them
        self.omit = omit
        self.dropped: dict[str, set] = {}   # extension -> functions only its left-out uses called
        self.b = ModuleBuilder(self.spirv_version)
        self.ids: dict[Value, int] = {}
        self._types: dict[Type, int] = {}
        self._builtins: dict[str, int] = {}
        self._math: int | None = None
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
        # known driver defects the module may meet: name -> where (runtime.vulkan.capabilities)
        self.driver_defects: dict[str, set[str]] = {}

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
            self.coopmat_types.add((t.rows, t.cols, {"MatrixAKHR": "A", "MatrixBKHR": "B"}.get(
                t.use.value, "Accumulator"), component_name(t.component), t.scope.value.lower()))
            self.uses_subgroup |= t.scope.value == "Subgroup"
            self.workgroup_scope |= t.scope.value == "Workgroup"
            for cap in coopmat_capabilities(t):
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
        if t.is_float and t.encoding and t.bits == 8:
            # the builder encodes IEEE floats and bf16 from a Python float; an fp8 constant (a
            # matrix fill, a scale factor) is given by its bits, as ml_dtypes rounds it
            bits = int(np.asarray(value, t.dtype).view(np.uint8))
            return self.b.const_float(self.type_id(t), 8, bits)
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
        """A math instruction, named as in GLSL.std.450, from the target's math set."""
        if self._math is None:
            self._math = self.b.ext_inst_import(self.math_set[0])
        return self.emit("OpExtInst", result_type, self._math, self.math_opcode(name), *args)

    def math_opcode(self, name: str) -> int:
        return grammar.ext_inst_set(self.math_set[1])[name]

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
        elif self.checks is not None and op.name == "loop":     # guards hoisted out of loops
            self.checks.lower_loop(op, lambda: d.lower(self, op))
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

    def merged_sources(self) -> dict:
        """`ir.core.merged_sources` of the module being lowered (the values each loop or `if`
        merges), made once."""
        if self._merged is None:
            self._merged = merged_sources(self.module)
        return self._merged

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


def lower_functions(ctx: LowerCtx, module: Module) -> None:
    """Lower the functions ops call (decode, combine, per-element functions), except those
    only left-out extension uses called."""
    dropped = set().union(*ctx.dropped.values())
    for f in module.functions:
        if f in dropped and f not in ctx._functions:
            continue
        ctx.lower_function(f)


def base_requirements(ctx: LowerCtx, module: Module) -> dict:
    """The requirements every target lists: capabilities, workgroup size, shared memory,
    cooperative-matrix shapes."""
    wg = module.workgroup_size
    return {"capabilities": sorted(ctx.caps), "workgroup_invocations": wg[0] * wg[1] * wg[2],
            "shared_memory": sum(v.type.elem.size * v.type.length for v in module.shared),
            "coopmat_shapes": sorted(ctx.coopmat_shapes)}
