"""The OpenCL target: a traced module as an OpenCL-environment SPIR-V kernel (SPIR-V 1.2).

Used for kernels whose IR contains an op that only exists in the OpenCL (Kernel) environment
(registry records with ``environment="opencl"``: the ``intel.*`` 2D block IO ops, whose base
pointers must be CrossWorkgroup pointers). The IR and front end are the Vulkan target's; what
differs is the module header and the ABI:

* capabilities Addresses, Kernel, Int64; ``OpMemoryModel Physical64 OpenCL``;
* one ``OpEntryPoint Kernel`` named after the kernel, whose parameters are the kernel's
  arguments in declaration order: buffers as CrossWorkgroup pointers to their element type,
  scalars by value (clSetKernelArg order);
* ``OpExecutionMode LocalSize`` and ``OpExecutionMode SubgroupSize N`` (capability
  SubgroupDispatch; SPIR-V 1.2 / spirv-val target env ``opencl2.2``);
* built-ins are Input variables with the OpenCL types (size_t = 64-bit vectors/scalars for the
  id built-ins, 32-bit for the subgroup ones), converted to pycoop's u32 where read;
* buffer accesses are OpInBoundsPtrAccessChain + Aligned loads/stores; math goes through the
  OpenCL.std extended instruction set.

Every op lowering of the Vulkan target is reused through the LowerCtx interface
(``element_pointer``, ``memory_access``, ``builtin_value``, ``glsl``, ``shared_variable``).
"""
from __future__ import annotations

from ..ir.core import Module
from ..types import SCALARS, BufferType, ScalarType, SharedArrayType, StorageClass, Type, VectorType, i64, u32, u64
from .lower import Lowered, LowerCtx, base_requirements, lower_functions

NAME = "opencl"
SPIRV_VERSION = (1, 2)
VALIDATOR_ENV = "opencl2.2"      # SubgroupDispatch (required subgroup size) needs OpenCL 2.2 / SPIR-V 1.2

# GLSL.std.450 names used by the core ops -> their OpenCL.std names (numbers from the grammar)
_OPENCL_STD = {
    "FMin": "fmin", "SMin": "s_min", "UMin": "u_min", "FMax": "fmax", "SMax": "s_max",
    "UMax": "u_max", "Pow": "pow", "FAbs": "fabs", "SAbs": "s_abs", "Exp": "exp", "Exp2": "exp2",
    "Log": "log", "Log2": "log2", "Sqrt": "sqrt", "InverseSqrt": "rsqrt", "Sin": "sin",
    "Cos": "cos", "Tanh": "tanh", "Floor": "floor", "Ceil": "ceil", "Trunc": "trunc", "Fma": "fma",
}
# OpenCL built-in types: the id built-ins are size_t (64-bit in Physical64), the subgroup ones uint.
_SIZE_T_BUILTINS = {"WorkgroupId", "LocalInvocationId", "GlobalInvocationId", "NumWorkgroups",
                    "LocalInvocationIndex"}


class OpenCLLowerCtx(LowerCtx):
    target = NAME
    spirv_version = SPIRV_VERSION
    math_set = ("OpenCL.std", "opencl.std.100")

    def __init__(self, module: Module, debug_info: bool = False):
        super().__init__(module, debug_info=debug_info)
        self._result_types: dict[int, int] = {}     # result id -> type id (to elide no-op bitcasts)

    # ---------------------------------------------------------------- types
    # The Kernel capability allows only signedness 0 in OpTypeInt: signed pycoop ints share the
    # unsigned SPIR-V type of their width (signedness lives in the opcodes, as in OpenCL C).
    def _make_type(self, t: Type) -> int:
        if isinstance(t, BufferType):
            return self.b.type("OpTypePointer", "CrossWorkgroup", self.type_id(t.elem))
        if isinstance(t, ScalarType) and t.is_int and t.signed:
            return self.type_id(SCALARS[f"u{t.bits}"])
        return super()._make_type(t)

    def const(self, t: ScalarType, value) -> int:
        if t.is_int and t.signed:
            t, value = SCALARS[f"u{t.bits}"], int(value) & ((1 << t.bits) - 1)
        cid = super().const(t, value)
        self._result_types[cid] = self.type_id(t)
        return cid

    def emit(self, opname: str, result_type: Type | None, *operands):
        if opname == "OpBitcast" and operands and self._result_types.get(operands[0]) == self.type_id(result_type):
            return operands[0]          # i32 <-> u32: the same SPIR-V type here
        rid = super().emit(opname, result_type, *operands)
        if result_type is not None:
            self._result_types[rid] = self.type_id(result_type)
        return rid

    def _storage_caps(self, t: Type) -> None:
        pass        # 8/16-bit storage capabilities are Vulkan's; Kernel allows them with Int8/Int16

    # ---------------------------------------------------------------- math
    def math_opcode(self, name: str) -> int:
        return super().math_opcode(_OPENCL_STD[name])

    # ---------------------------------------------------------------- memory
    def builtin_value(self, name: str, is_vec: bool) -> int:
        wide = name in _SIZE_T_BUILTINS
        comp = u64 if wide else u32
        t = VectorType(comp, 3) if is_vec else comp
        var = self._builtins.get(name)
        if var is None:
            if name not in _SIZE_T_BUILTINS:
                self.uses_subgroup = True
            var = self.b.global_inst("OpVariable", self.ptr_type_input(t), "Input")
            self.b.decorate(var, "BuiltIn", name)
            self.b.decorate(var, "Constant")
            self._builtins[name] = var
            self.interface.append(var)
        v = self.emit("OpLoad", t, var, "Aligned", 32 if is_vec and wide else comp.size)
        if wide:
            v = self.emit("OpUConvert", VectorType(u32, 3) if is_vec else u32, v)
        return v

    def _index64(self, idx) -> int:
        t = idx.type
        i = self.id(idx)
        if t.bits == 64:
            return i
        if t.signed:
            return self.emit("OpSConvert", i64, i)
        return self.emit("OpUConvert", u64, i)

    def element_pointer(self, mem, idx) -> tuple[int, int | None]:
        t = mem.type
        if isinstance(t, BufferType):
            p = self.ptr_type(t.elem, StorageClass.CrossWorkgroup)
            return self.b.emit("OpInBoundsPtrAccessChain", p, self.id(mem), self._index64(idx)), t.elem.size
        p = self.ptr_type(t.elem, StorageClass.Workgroup)
        return self.b.emit("OpInBoundsAccessChain", p, self.id(mem), self.id(idx)), t.elem.size

    def memory_access(self, align: int | None) -> list:
        return [] if align is None else ["Aligned", align]

    def shared_variable(self, t: SharedArrayType) -> int:
        # SPIR-V < 1.4: the entry point interface lists Input/Output variables only
        return self.b.global_inst("OpVariable", self.b.type("OpTypePointer", "Workgroup", self.type_id(t)),
                                  "Workgroup")


def _arg_entry(name: str, t: Type, index: int) -> dict:
    if isinstance(t, BufferType):
        return {"name": name, "index": index, "kind": "buffer", "address_space": "global",
                "storage_class": "CrossWorkgroup", "size": 8, "dtype": str(t.elem.dtype),
                "access": t.access}
    return {"name": name, "index": index, "kind": "scalar", "size": t.size, "dtype": str(t.dtype)}


def lower_opencl(module: Module, omit: frozenset[str] = frozenset(), *, debug_info: bool = True,
                 abi: str = "opencl", checked: bool = False) -> Lowered:
    """The OpenCL-environment SPIR-V module of a traced kernel (validate with VALIDATOR_ENV);
    `debug_info`: OpSource/OpString/OpLine, as for Vulkan. The other options of the Vulkan
    target have no meaning here: no optional extension applies to OpenCL modules (`omit`),
    the ABI is the kernel's own parameter list (`abi`), and OpenCL kernels run on the emulator,
    which checks every access itself (`checked`)."""
    ctx = OpenCLLowerCtx(module, debug_info)
    b = ctx.b
    for cap in ("Addresses", "Kernel", "Int64", "SubgroupDispatch"):
        ctx.need(cap)
    b.memory_model("Physical64", "OpenCL")
    fn = module.kernel
    void = b.type("OpTypeVoid")
    ptypes = [ctx.type_id(p.type) for p in fn.params]
    kernel_fn = b.begin_function(void, None, "None", b.type("OpTypeFunction", void, *ptypes))
    for p, tid, name in zip(fn.params, ptypes, module.param_names):
        pid = b.function_parameter(tid)
        ctx._result_types[pid] = tid
        ctx.set(p, pid)
        b.name(pid, name)
        if isinstance(p.type, BufferType) and p.type.access == "read":
            b.decorate(pid, "FuncParamAttr", "NoWrite")
    ctx.begin_block(b.label())
    if ctx.lower_region(fn.body, []) is not None:
        b.emit("OpReturn")
    b.end_function()
    lower_functions(ctx, module)
    b.entry_point("Kernel", kernel_fn, fn.name, ctx.interface)
    b.execution_mode(kernel_fn, "LocalSize", *module.workgroup_size)
    b.execution_mode(kernel_fn, "SubgroupSize", module.subgroup_size)
    b.name(kernel_fn, fn.name)
    abi = {"target": NAME, "entry_point": fn.name, "execution_model": "Kernel",
           "spirv_version": "%d.%d" % SPIRV_VERSION, "addressing_model": "Physical64",
           "memory_model": "OpenCL",
           "args": [_arg_entry(n, p.type, i) for i, (n, p) in enumerate(zip(module.param_names, fn.params))],
           "required_subgroup_size": module.subgroup_size,
           "local_size": list(module.workgroup_size)}
    reqs = {"target": NAME, **base_requirements(ctx, module), "extensions": b.extensions,
            "subgroup_size": module.subgroup_size}
    return Lowered(b.assemble(), abi, sorted(ctx.caps), b.extensions, reqs)
