"""pycoop: an embedded Python DSL for cooperative-matrix GPU kernels.

Kernels written as Python functions are traced into a typed IR, lowered to SPIR-V
(SPV_KHR_cooperative_matrix; vendor extensions under pycoop.nv, pycoop.intel, pycoop.qcom)
and run on a Vulkan device or on a vectorised NumPy emulator that implements the specs'
semantics and reports undefined behaviour.
"""
from __future__ import annotations

from . import ops as _ops  # noqa: F401  (registers every op)
from .errors import (ArgumentError, ArgumentValueError, BackendFallbackWarning, BackendUnavailable, CompileError,
                     EmulatorError, KernelFault, PycoopError)
from .frontend.control import kernel_range as range  # noqa: A001  (pycoop.range)
from .frontend.functions import func
from .frontend.kernel import CompiledKernel, Const, Kernel, KernelStatistics, LaunchResult, kernel
from .version import __version__
from .ops.core import (abs_ as abs, barrier, bitcast, ceil, cos, exp, exp2, floor, fma, global_invocation_id,
                       local_invocation_id, local_invocation_index, log, log2, maximum as max,
                       minimum as min, num_subgroups, num_workgroups, rsqrt, select, shared, sin,
                       sqrt, subgroup_id, subgroup_local_id, subgroup_size, tanh, trunc, workgroup_id)
from .ops.composite import make_array, make_vector
from .ops.dot import dot4x8
from .ops.values import cast
from .ops.khr import convert, coopmat, fill, length, load, mul_add, store
from .ops import intel, nv, qcom  # the vendor namespaces: pycoop.nv, pycoop.intel, pycoop.qcom
from .ops import atomic, subgroup  # pycoop.atomic.add(buf, i, v), pycoop.subgroup.add(x), ...
from .autotune import TuneResult, autotune
from .runtime.backend import use_backend
from .runtime.arrays import Array, asarray, empty, full, get_runtime, synchronize, zeros
from .runtime.graphs import CaptureError, Graph, capture
from .types import (Buffer, ReadBuffer, WriteBuffer, Spec, CoopMatType, ScalarType, Scope, StorageClass, Use,
                    array, bf16, bool_, f16, f32, f64, fp8_e4m3, fp8_e5m2, i8, i16, i32,
                    i64, struct, u8, u16, u32, u64, vec)

Subgroup = Scope.Subgroup
Workgroup = Scope.Workgroup
UseA = Use.A
UseB = Use.B
Accumulator = Use.Accumulator

__all__ = [
    "ArgumentError", "ArgumentValueError", "BackendFallbackWarning", "BackendUnavailable", "CompileError", "EmulatorError", "KernelFault",
    "PycoopError",
    "TuneResult", "autotune",
    "CompiledKernel", "Const", "Kernel", "KernelStatistics", "LaunchResult", "__version__", "func", "kernel", "range",
    "abs", "barrier", "bitcast", "cast", "ceil", "cos", "exp", "exp2", "floor", "fma", "global_invocation_id",
    "local_invocation_id", "local_invocation_index", "log", "log2", "max", "min", "num_subgroups",
    "num_workgroups", "rsqrt", "select", "shared", "sin", "sqrt", "subgroup_id", "subgroup_local_id",
    "subgroup_size", "tanh", "trunc", "workgroup_id",
    "make_array", "make_vector", "dot4x8", "convert", "fill", "length", "load", "mul_add", "store", "use_backend",
    "Array", "asarray", "empty", "full", "get_runtime", "synchronize", "zeros",
    "CaptureError", "Graph", "capture",
    "Buffer", "ReadBuffer", "WriteBuffer", "Spec", "CoopMatType", "ScalarType", "Scope", "StorageClass", "Use",
    "array", "bf16", "bool_", "coopmat", "f16", "f32", "f64", "fp8_e4m3", "fp8_e5m2", "i8", "i16",
    "i32", "i64", "struct", "u8", "u16", "u32", "u64", "vec",
    "Subgroup", "Workgroup", "UseA", "UseB", "Accumulator",
    "intel", "nv", "qcom", "atomic", "subgroup",
]
