"""`@pycoop.kernel`: signatures, tracing, specialisation, compiled
artifacts (IR, SPIR-V, ABI) and launches."""
from __future__ import annotations

import ast
import copy
import functools
import inspect
import json
import math
import os
import re
import sys
import textwrap
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from .. import knobs
from ..cache import lower_cached
from ..codegen import extensions
from ..errors import (ArgumentError, ArgumentValueError, BackendUnavailable, CompileError, Loc,
                     PycoopError, current_loc, entry_point, in_package, is_internal,
                     without_internal_frames)
from ..ir.builder import RequiresSubgroupSize, Tracer, emit1, trace_scope, tracing
from ..ir.core import Block, Function, Module, Value
from ..ir.printer import print_module
from ..ir.verifier import verify
from ..ir.registry import environment_of, get
from ..codegen.float_modes import DEFAULT_FP, FP_MODES
from ..runtime import interop
from ..runtime.arrays import Array, asarray, vulkan_runtime
from ..runtime import capturing, graphs
from ..runtime.results import KernelStatistics, LaunchResult
from ..runtime.backend import _local, choose, requested_backend, vulkan_missing
from ..runtime.vulkan.abi import Binder, check_repeat, float_as
from ..runtime.vulkan.errors import PipelineError
from ..runtime.vulkan.harvest import WG as HARVEST_WG, harvest_faults
from ..types import (SCALARS, BufferType, CoopMatType, ScalarType, SpecType, StructType, Type,
                     VectorType, memory_element)
from . import functions
from .transform import transform

from ..version import __version__
from ..ops.core import _check_literal
from ..codegen.abi import check_abi
from ..codegen.abi import layout
from ..spirv.tools import disassemble
from ..emulator.machine import run
from ..jupyter import kernel_html
from ..jupyter import compiled_kernel_html

# the optional extension behind `CompiledKernel.decode_vector` (kept in, or stripped from, .spv)
_DECODE_VECTOR = "SPV_NV_cooperative_matrix_decode_vector"


class _ConstMarker:
    """`pycoop.Const` (or `Const[int]`): a compile-time parameter; each value specialises the
    kernel."""

    def __getitem__(self, _):
        return self

    def __repr__(self) -> str:
        return "pycoop.Const"


Const = _ConstMarker()


@dataclass(frozen=True)
class Param:
    name: str
    type: Type | None        # None for Const parameters
    default: object = inspect.Parameter.empty

    @property
    def is_const(self) -> bool:
        return self.type is None

    @property
    def is_spec(self) -> bool:
        return isinstance(self.type, SpecType)

    @property
    def is_runtime(self) -> bool:
        """A buffer or scalar argument of each launch (not a Const or Spec parameter)."""
        return not (self.is_const or self.is_spec)


def _def_loc(fn, param: str | None = None) -> Loc | None:
    """Where the decorated `fn` is written: the annotation (or name) of `param`, else the
    line of its first decorator (which holds the decorator's arguments)."""
    code = fn.__code__
    where = Loc(code.co_filename, code.co_firstlineno)
    if param is None:
        return where
    try:
        lines, start = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return where
    if not isinstance(tree.body[0], ast.FunctionDef):     # a lambda: its line
        return where
    indent = len(lines[0]) - len(lines[0].lstrip())
    a = tree.body[0].args
    for arg in a.posonlyargs + a.args + a.kwonlyargs:
        if arg.arg == param:
            node = arg.annotation or arg
            return Loc(code.co_filename, start + node.lineno - 1, node.col_offset + indent + 1)
    return where


class Kernel:
    def __init__(self, fn, workgroup_size, subgroup_size: int | None = None, def_locals=None,
                 strict_intel_shapes: bool = True, fp: str = DEFAULT_FP, requires=None):
        functools.update_wrapper(self, fn)
        if requires is not None and not callable(requires):
            raise CompileError(f"requires must be a function of the kernel's scalar arguments "
                               f"(or None), got {requires!r}", _def_loc(fn),
                               rule="pycoop.kernel(requires=...): called with the runtime scalar "
                                    "arguments of each launch by name; a ValueError it raises "
                                    "refuses the launch",
                               hint="e.g. requires=check_n, a function def check_n(N) that "
                                    "raises ValueError('N must be a multiple of 64')",
                               rule_id="frontend.requires")
        self.requires = requires
        if fp not in FP_MODES:
            raise CompileError(f"fp={fp!r}: the floating-point mode is one of "
                               f"{', '.join(map(repr, FP_MODES))}",
                               Loc(fn.__code__.co_filename, fn.__code__.co_firstlineno),
                               rule="floating-point modes: exact, strict (exact with subnormals "
                                    "preserved) or fast (see docs/numerics.md)",
                               hint='e.g. @pycoop.kernel(workgroup_size=64, fp="fast")',
                               rule_id="frontend.fp-mode")
        self.fp = fp
        self.strict_intel_shapes = bool(strict_intel_shapes)
        self._def_locals = def_locals or {}
        self.fn = fn
        self.name = fn.__name__
        try:
            ws = (workgroup_size,) if isinstance(workgroup_size, int) else tuple(workgroup_size)
        except TypeError:
            ws = ()
        if not 1 <= len(ws) <= 3 or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0
                                            for x in ws):
            raise CompileError(f"workgroup_size must be 1 to 3 positive ints, got {workgroup_size!r}",
                               _def_loc(fn), rule="LocalSize: each workgroup dimension is a positive "
                                                  "integer (x, y, z)",
                               hint="e.g. @pycoop.kernel(workgroup_size=64) or workgroup_size=(16, 16)",
                               rule_id="frontend.workgroup-size")
        self.workgroup_size = tuple(ws) + (1,) * (3 - len(ws))
        self.subgroup_size = None if subgroup_size is None else int(subgroup_size) \
            if knobs.is_subgroup_size(subgroup_size) else subgroup_size
        if subgroup_size is not None and not knobs.is_subgroup_size(subgroup_size):
            raise CompileError(f"subgroup_size must be a power of two from 1 to "
                               f"{knobs.MAX_SUBGROUP_SIZE}, got {subgroup_size!r}",
                               _def_loc(fn), rule="VkPhysicalDeviceSubgroupProperties: the subgroup "
                                                  "size is a power of two",
                               hint="use 16 or 32 (or leave it out: the device's size)",
                               rule_id="frontend.subgroup-size")
        self.params = self._signature()
        self.call_signature = inspect.Signature(   # how launches bind their arguments
            [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=p.default)
             for p in self.params])
        self._traced = None
        self._cache: dict = {}
        self._no_consts = not any(p.is_const for p in self.params)
        self._launchers: dict = {}      # grid -> its checked _Launcher (launches reuse them)

    def _signature(self) -> list[Param]:
        # String annotations (from __future__ import annotations) are evaluated in the
        # function's globals plus the locals of the scope that defined it (type variables of
        # kernel factories are not captured in closures).
        scope = dict(self._def_locals)
        scope.update(zip(self.fn.__code__.co_freevars,
                         (c.cell_contents for c in self.fn.__closure__ or ())))
        out = []
        for p in inspect.signature(self.fn).parameters.values():
            ann = p.annotation
            if isinstance(ann, str):
                try:
                    ann = eval(ann, self.fn.__globals__, scope)
                except CompileError as e:          # e.g. Buffer[coopmat]: at the annotation
                    raise CompileError(e.message, _def_loc(self.fn, p.name), rule=e.rule,
                                       hint=e.hint, rule_id=e.rule_id) from None
                except Exception as e:
                    raise CompileError(f"cannot evaluate the annotation {ann!r} of parameter "
                                       f"'{p.name}': {e}", _def_loc(self.fn, p.name),
                                       rule="annotations are evaluated where the kernel is defined",
                                       hint="import the types the annotation names",
                                       rule_id="frontend.annotation-eval") from None
            rule = ("kernel parameters are annotated pycoop.Buffer[T], a numeric scalar type (u32, "
                    "f32, ...) or pycoop.Const")
            hint = f"e.g. def {self.name}(A: pycoop.Buffer[f32], n: u32, tile: pycoop.Const = 64)"
            if ann is Const:
                out.append(Param(p.name, None, p.default))
            elif isinstance(ann, SpecType):
                out.append(self._spec_param(p, ann))
            elif isinstance(ann, BufferType) and not (isinstance(ann.elem, StructType)
                                                      or memory_element(ann.elem)):
                raise CompileError(
                    f"parameter '{p.name}' of kernel {self.name}: buffers of {ann.elem} are not "
                    "supported", _def_loc(self.fn, p.name),
                    rule="kernel buffers hold numeric scalars, numeric vectors of 2 or 4 "
                         "components, or structs (blocks)",
                    hint="pass the data as a buffer of its scalar type and index it explicitly"
                         + ("; load matrices from it with M.load(A, offset, stride)"
                            if isinstance(ann.elem, CoopMatType) else ""), rule_id="frontend.buffer-element")
            elif isinstance(ann, BufferType) or (isinstance(ann, ScalarType) and not ann.is_bool):
                out.append(Param(p.name, ann, p.default))
            elif ann is inspect.Parameter.empty:
                raise CompileError(f"parameter '{p.name}' of kernel {self.name} has no annotation",
                                   _def_loc(self.fn, p.name), rule=rule, hint=hint,
                                   rule_id="frontend.parameter-annotation")
            elif isinstance(ann, ScalarType):
                raise CompileError(f"parameter '{p.name}' of kernel {self.name} is a bool",
                                   _def_loc(self.fn, p.name),
                                   rule=rule + "; bool has no memory layout (SPIR-V OpTypeBool)",
                                   hint=f"pass a u32 (0 or 1) and compare it: `if {p.name} != 0:`",
                                   rule_id="frontend.parameter-annotation")
            elif isinstance(ann, CoopMatType):
                raise CompileError(f"parameter '{p.name}' of kernel {self.name} is a cooperative "
                                   "matrix", _def_loc(self.fn, p.name), rule=rule,
                                   hint=f"pass a buffer and load the matrix in the kernel: "
                                        f"{p.name}: pycoop.Buffer[{ann.component}], then "
                                        f"M.load({p.name}, offset, stride)",
                                   rule_id="frontend.parameter-annotation")
            else:
                raise CompileError(
                    f"parameter '{p.name}' of kernel {self.name} has annotation {ann!r}",
                    _def_loc(self.fn, p.name), rule=rule, hint=hint, rule_id="frontend.parameter-annotation")
        return out

    def _spec_param(self, p: inspect.Parameter, ann: SpecType) -> Param:
        where = _def_loc(self.fn, p.name)
        if not isinstance(ann.type, ScalarType):
            raise CompileError(f"parameter '{p.name}' of kernel {self.name}: Spec[{ann.type!r}] is "
                               "not a scalar type", where,
                               rule="OpSpecConstant: a specialization constant is a scalar "
                                    "(integer, float or bool)",
                               hint=f"e.g. {p.name}: pycoop.Spec[pycoop.u32] = 64",
                               rule_id="frontend.spec-scalar")
        if p.default is inspect.Parameter.empty:
            raise CompileError(f"specialization constant '{p.name}' of kernel {self.name} has no "
                               "default", where,
                               rule="OpSpecConstant: a specialization constant has a default value, "
                                    "used when the pipeline does not set it",
                               hint=f"give it one: {p.name}: Spec[{ann.type}] = ...",
                               rule_id="frontend.spec-default")
        return Param(p.name, ann, _check_literal(p.default, ann.type, where))

    # ---------------------------------------------------------------- compile
    @entry_point
    def compile(self, *, subgroup_size: int | None = None, debug_info: bool = True,
                abi: str = "device_address", checked: bool = False, **consts) -> "CompiledKernel":
        """Trace and specialise for the given Const parameters (and Spec parameters: the
        default value of their OpSpecConstant); the result exposes `.ir`, `.spv`, `.spvasm`,
        `.abi` and `.save()`. `debug_info=False` leaves OpSource/OpLine out of the module;
        `abi="descriptors"` binds buffers as descriptors (docs/abi.md); `checked=True`: its
        SPIR-V is the bounds-checked variant (extra ABI fields, see docs/abi.md). Cached per
        specialisation."""
        check_abi(abi)
        if subgroup_size is not None:
            if not knobs.is_subgroup_size(subgroup_size):
                raise ArgumentValueError(f"{self.name}: subgroup_size must be a power of two "
                                         f"from 1 to {knobs.MAX_SUBGROUP_SIZE} (or None: the "
                                         f"kernel's or the device's), got {subgroup_size!r}")
            subgroup_size = int(subgroup_size)          # a NumPy integer keys the cache as 32
        if checked and abi != "device_address":
            raise ArgumentError(f"{self.name}: checked modules use the device-address ABI "
                                "(their fault record is reached by address)")
        explicit = subgroup_size or self.subgroup_size
        sgs = explicit or knobs.subgroup_size()
        values = {}
        for p in self.params:
            if p.is_spec:
                values[p.name] = _spec_value(p, consts.pop(p.name)) if p.name in consts \
                    else p.default
            elif p.is_const:
                if p.name in consts:
                    values[p.name] = consts.pop(p.name)
                elif p.default is not inspect.Parameter.empty:
                    values[p.name] = p.default
                else:
                    raise ArgumentError(f"{self.name}: compile-time parameter '{p.name}' needs a value")
        if consts:
            raise ArgumentError(f"{self.name}: unknown compile-time parameter(s) {sorted(consts)}; "
                                f"its Const and Spec parameters are "
                                f"{[p.name for p in self.params if not p.is_runtime]}")
        key = (sgs, tuple(sorted((k, repr(v)) for k, v in values.items())))
        ck = self._cache.get(key)
        if ck is None:
            try:
                module = self._trace(values, sgs, explicit is not None)
            except RequiresSubgroupSize as r:
                module = self._trace(values, r.size, True)
            ck = self._cache[key] = CompiledKernel(self, module, values)
        if abi == "descriptors":         # its push-constant limit, reported at the kernel
            if ck.target != "vulkan":
                raise ArgumentError(f"{self.name} targets OpenCL (it uses pycoop.intel ops): "
                                    "abi='descriptors' is a Vulkan ABI")
            try:
                layout(ck.module.param_names, [p.type for p in ck.module.kernel.params], abi)
            except CompileError as e:
                raise CompileError(e.message, _def_loc(self.fn), rule=e.rule, hint=e.hint,
                                   rule_id=e.rule_id) from None
        # the same module lowered with other options (debug info, ABI, bounds checks)
        return ck.variant(debug_info, abi, bool(checked))

    def _trace(self, consts: dict, sgs: int, explicit: bool = True) -> Module:
        try:
            if self._traced is None:
                self._traced = transform(self.fn, returns_value=False)
            t = Tracer(sgs, self.workgroup_size, subgroup_size_explicit=explicit,
                       strict_intel_shapes=self.strict_intel_shapes,
                       function_tracer=functions)
            runtime = [Value(p.type, name=p.name) for p in self.params if p.is_runtime]
            it = iter(runtime)
            body = Block()
            t.blocks.append(body)
            with trace_scope(t):
                specs = iter(range(len(self.params)))
                args = [consts[p.name] if p.is_const else next(it) if p.is_runtime else
                        emit1("spec_constant", [], {"name": p.name, "spec_id": next(specs),
                                                    "type": p.type.type, "value": consts[p.name]},
                              _def_loc(self.fn, p.name))
                        for p in self.params]
                try:
                    ret = self._traced(*args)
                except (PycoopError, RequiresSubgroupSize):
                    raise
                except Exception as e:
                    error = _kernel_code_error(e)
                    if error is None:
                        raise                   # raised inside pycoop: kept as it is
                    raise error from (e if knobs.show_internal_frames() else None)
            if ret is not None:
                raise CompileError(f"kernel {self.name} returned {ret!r}; kernels return nothing",
                                   _def_loc(self.fn), rule="a kernel's entry point returns void",
                                   hint="write results into a buffer parameter",
                                   rule_id="frontend.kernel-returns-void")
            module = Module(Function(self.name, runtime, body), self.workgroup_size, sgs,
                            [p.name for p in self.params if p.is_runtime], shared=t.shared,
                            functions=t.functions, fp=self.fp)
            verify(module)
            environment_of(module)      # one client environment per module (else CompileError)
            return module
        except CompileError as e:
            raise without_internal_frames(e) from None

    # ---------------------------------------------------------------- launch
    @entry_point
    def __getitem__(self, grid) -> "_Launcher":
        # only grids of plain ints are kept: 2.0 or True would find the launcher of an equal
        # int grid and skip the launch's check of their type
        if not (type(grid) is int or type(grid) is tuple and all(type(g) is int for g in grid)):
            return _Launcher(self, grid)           # checked (and refused) at the launch
        launcher = self._launchers.get(grid)
        if launcher is None:
            launcher = _Launcher(self, grid)
            if len(self._launchers) < 256:
                self._launchers[grid] = launcher
        return launcher

    def __call__(self, *a, **k):
        if tracing():
            raise _kernel_in_kernel(self.name)
        raise TypeError(f"launch a kernel with {self.name}[grid](...), e.g. {self.name}[(8, 8)](...)")

    def __repr__(self) -> str:
        sig = ", ".join(f"{p.name}: {p.type if p.type else 'Const'}" for p in self.params)
        return f"<pycoop.kernel {self.name}({sig}) workgroup_size={self.workgroup_size}>"

    def _repr_html_(self) -> str:
        return kernel_html(self)


@entry_point
def kernel(fn=None, *, workgroup_size=64, subgroup_size: int | None = None, strict_intel_shapes: bool = True,
           fp: str = DEFAULT_FP, requires=None):
    """Decorator: `@pycoop.kernel(workgroup_size=128)` turns a Python function into a kernel.
    `strict_intel_shapes` (kernels using pycoop.intel): reject block shapes outside Intel's
    supported-shape table (subgroup size 16). `fp`: the floating-point mode, "exact"
    (default), "strict" or "fast" (docs/numerics.md). `requires`: a function called with the
    runtime scalar arguments of every launch, by name, before any work; a ValueError it
    raises refuses the launch as an ArgumentError (the preconditions a kernel cannot check
    itself, such as a size that must be a multiple of its tile)."""
    caller = sys._getframe(1)
    while is_internal(caller.f_code.co_filename):     # the entry_point wrapper
        caller = caller.f_back
    scope = caller.f_locals
    make = entry_point(lambda f: Kernel(f, workgroup_size, subgroup_size, scope, strict_intel_shapes,
                                        fp, requires))
    return make if fn is None else make(fn)


@functools.cache
def _fault_harvest() -> "CompiledKernel":
    """The kernel that ends a launch graph of checked launches on Vulkan (its source and why:
    pycoop.runtime.vulkan.harvest), compiled once."""
    return Kernel(harvest_faults, HARVEST_WG, None, {}, True, DEFAULT_FP, None).compile(
        debug_info=False)


def _kernel_in_kernel(name: str) -> CompileError:
    """A kernel called or launched from the code of a kernel being traced."""
    return CompileError(f"kernel {name} is called inside a kernel", current_loc(),
                        rule="pycoop: a kernel is an entry point, launched from the host; kernel "
                             "code calls @pycoop.func helpers (inlined)",
                        hint="move the shared code into a @pycoop.func and call it from both "
                             "kernels", rule_id="frontend.kernel-in-kernel")


def _kernel_code_error(e: Exception) -> CompileError | None:
    """A Python exception that the kernel's own code raised while it was traced (a misspelt
    name, a call with the wrong arguments, an `assert`, a pycoop function refusing the
    arguments it was called with) as a CompileError at that line, or None when it comes from
    deeper inside pycoop (its implementation, or a bundled kernel's configuration check,
    whose ValueError is the documented error)."""
    if isinstance(e, KeyError) and e.args and isinstance(e.args[0], Value):
        return CompileError(
            f"a Python container was indexed with a runtime value ({e.args[0].type})",
            _user_frame_loc(e.__traceback__),
            rule="dicts and other Python containers are indexed while tracing: their keys must "
                 "be known at trace time",
            hint="index with a Python value (a Const, a trace-time loop variable), keep the "
                 "data in a buffer or shared array, or choose with pycoop.select",
            rule_id="frontend.runtime-container-index")
    caller, tb = None, e.__traceback__
    while tb.tb_next is not None:
        caller, tb = tb, tb.tb_next
    if in_package(tb.tb_frame.f_code.co_filename):
        # a pycoop function that kernel code called refusing its arguments itself
        # (`pc.vec(f32, 9)`): reported at the call; anything deeper is pycoop's own
        if (caller is None or in_package(caller.tb_frame.f_code.co_filename)
                or not isinstance(e, (TypeError, ValueError))):
            return None
        tb = caller
    # (the names of the functions the front end wraps kernel code in are left out)
    message = re.sub(r"(?:__pc\w*\.<locals>\.)+", "", f"{type(e).__name__}: {e}")
    return CompileError(
        message, Loc(tb.tb_frame.f_code.co_filename, tb.tb_lineno),
        rule="a kernel's Python code runs while pycoop traces it; an exception it raises stops "
             "the compilation", hint="the exception is Python's own, raised by this line while "
                                     "it was traced (PYCOOP_TRACEBACK=1 shows the whole traceback)",
        rule_id="frontend.python-exception")


def _user_frame_loc(tb) -> Loc | None:
    """The innermost line of kernel code (not pycoop's implementation) in a traceback."""
    loc = None
    while tb is not None:
        f = tb.tb_frame.f_code.co_filename
        if not is_internal(f):
            loc = Loc(f, tb.tb_lineno)
        tb = tb.tb_next
    return loc


def _grid(grid) -> tuple[int, int, int]:
    try:
        g = (grid,) if isinstance(grid, (int, np.integer)) else tuple(grid)
    except TypeError:
        raise ArgumentError(f"grid must be 1 to 3 positive ints (workgroups per dimension), "
                            f"got {grid!r}") from None
    if not 1 <= len(g) <= 3 or not all(isinstance(x, (int, np.integer)) and x >= 1
                                       and not isinstance(x, (bool, np.bool_)) for x in g):
        raise ArgumentError(f"grid must be 1 to 3 positive ints (workgroups per dimension), got {grid!r}")
    return tuple(int(x) for x in g) + (1,) * (3 - len(g))


class _Launcher:
    def __init__(self, k: Kernel, grid):
        self.k, self.grid = k, _grid(grid)

    @entry_point
    def __call__(self, *args, backend: str | None = None, subgroup_size: int | None = None,
                 repeat: int = 1, checked: bool | None = None, **kwargs):
        k = self.k
        if not kwargs and subgroup_size is None and len(args) == len(k.params) and k._no_consts:
            # the common case, without inspect's binding: positional, no compile-time values
            ck = k._cache.get((k.subgroup_size or knobs.subgroup_size(), ()))
            if ck is not None:
                return ck._launch(self.grid, args, backend,
                                  1 if repeat == 1 and type(repeat) is int else check_repeat(repeat),
                                  _launch_site(), checked=checked)
        try:
            bound = k.call_signature.bind(*args, **kwargs)
        except TypeError as e:
            table = "\n".join(f"    {p.name}: {p.type if p.type else 'Const'}" for p in k.params)
            raise ArgumentError(f"{k.name}: {e}\n  parameters:\n{table}") from None
        bound.apply_defaults()
        consts = {p.name: bound.arguments[p.name] for p in k.params if p.is_const}
        spec = {p.name: bound.arguments[p.name] for p in k.params if p.is_spec}
        ck = k.compile(subgroup_size=subgroup_size, **consts)
        return ck._launch(self.grid, [bound.arguments[p.name] for p in k.params if p.is_runtime],
                          backend, check_repeat(repeat), _launch_site(), spec=spec, checked=checked)


_internal_files: dict[str, bool] = {}     # co_filename -> is_internal (on every launch's path)


def _launch_site() -> str:
    """file:line of the user's launch (past the entry_point wrapper), named by queued errors."""
    caller = sys._getframe(2)
    while True:
        name = caller.f_code.co_filename
        internal = _internal_files.get(name)
        if internal is None:
            internal = is_internal(name)
            if len(_internal_files) < 4096:
                _internal_files[name] = internal
        if not internal:
            return f"{name}:{caller.f_lineno}"
        caller = caller.f_back


def _as_array(name: str, value, t: BufferType):
    """A buffer argument as the launch uses it: a NumPy array on the caller's memory (NumPy,
    torch CPU tensors, anything with the array interface or DLPack) or a pycoop.Array.
    Hints are phrased in the caller's library."""
    if isinstance(value, Array):
        arr = value
    else:
        arr = interop.host_array(value, name)
    if isinstance(t.elem, StructType):
        # blocks are passed as raw bytes (or a structured array of the same item size)
        if arr.dtype != np.uint8 and arr.dtype.itemsize != t.elem.size:
            raise ArgumentError(f"argument '{name}' ({t}) must be a uint8 array of "
                                f"{t.elem.size}-byte blocks or a structured array of that item "
                                f"size, got {arr.dtype}")
        if not isinstance(arr, Array) and not arr.flags.c_contiguous:
            raise ArgumentError(f"argument '{name}' ({t}) must be C-contiguous")
        nbytes = arr.nbytes
        if nbytes % t.elem.size:
            raise ArgumentError(f"argument '{name}' ({t}) has {nbytes} bytes, not a multiple of "
                                f"the {t.elem.size}-byte block")
        if isinstance(arr, Array):
            return arr.reshape(-1) if arr.dtype == np.uint8 else _byte_view(arr)
        return arr.reshape(-1).view(np.uint8)
    want = t.elem.dtype
    if isinstance(t.elem, VectorType) and arr.size % t.elem.count:
        raise ArgumentError(f"argument '{name}' ({t}) has {arr.size} {want} values, not a "
                            f"multiple of the {t.elem.count} components of an element")
    if arr.dtype != want:
        raise ArgumentError(
            f"argument '{name}' ({t}) must have dtype {want}, got {arr.dtype}; "
            f"{interop.dtype_hint(value, name, want)}")
    if not isinstance(arr, Array) and not arr.flags.c_contiguous:
        raise ArgumentError(f"argument '{name}' ({t}) must be C-contiguous; "
                            f"{interop.contiguity_hint(value, name)}")
    if isinstance(t.elem, VectorType) and isinstance(arr, Array) and \
            arr._byte_offset % t.elem.size:
        raise ArgumentError(f"argument '{name}' ({t}) is a view {arr._byte_offset} bytes into "
                            f"its buffer: its {t.elem.size}-byte elements are loaded and "
                            f"stored {t.elem.size}-byte aligned, so a view must start at a "
                            f"multiple of {t.elem.size} bytes")
    count = arr.size // (t.elem.count if isinstance(t.elem, VectorType) else 1)
    if count > MAX_ELEMENTS:
        _too_long(name, t, count)
    return arr


def _misaligned_view(name: str, offset: int, align: int, op: str):
    rule = ("SPV_NV_cooperative_matrix2: the Pointer of a tensor load or store must be a "
            "multiple of 16 bytes" if op.startswith("nv.") else
            "VUID-RuntimeSpirv-OpCooperativeMatrixLoadKHR-08986: a matrix load's or store's "
            "Pointer is aligned to the lesser of 16 bytes and a row (column) of the matrix")
    what = ("tensor " if op.startswith("nv.") else "") + ("stores" if "store" in op else "loads")
    raise ArgumentError(f"argument '{name}' is a view {offset} bytes into its buffer, but the "
                        f"kernel's cooperative-matrix {what} need it to start at a multiple of "
                        f"{align} bytes ({rule}; "
                        "a GPU reads or writes the wrong elements otherwise); pass a view "
                        f"starting at a multiple of {align} bytes or an aligned copy "
                        "(b = pycoop.empty(a.shape, a.dtype); b.copy_from(a))")


# Buffers are indexed with 32-bit integers, which SPIR-V's access chains read as signed: an
# element at 2^31 or past it would be addressed 2 GiB before the buffer
MAX_ELEMENTS = 2 ** 31 - 1


def _too_long(name: str, t: BufferType, count: int):
    raise ArgumentError(f"argument '{name}' ({t}) has {count} elements: buffers are indexed "
                        f"with 32-bit integers, so at most {MAX_ELEMENTS} elements of the "
                        f"declared type (view the array with a wider element type, or split it)")


def _byte_view(arr):
    """A structured-dtype Array seen as bytes (same memory)."""
    return Array(arr._storage, arr._byte_offset, (arr.nbytes,), np.dtype(np.uint8))


@functools.cache
def _finite_max(name: str) -> float:
    """The largest finite value of a float type (every value up to it stays finite)."""
    t = SCALARS[name]
    return float(ml_dtypes.finfo(t.dtype).max) if t.bits < 64 else math.inf


def _as_scalar(name: str, value, t: ScalarType):
    kind = type(value)
    if kind is float and not t.is_int and abs(value) <= _finite_max(t.name):
        return value
    if kind is int and t.is_int:
        lo, hi = t.min_max()
        if lo <= value <= hi:
            return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ArgumentError(f"argument '{name}' ({t}) must be a number, got {type(value).__name__}")
    if t.is_int:
        if isinstance(value, (float, np.floating)) and not float(value).is_integer():
            raise ArgumentError(f"argument '{name}' ({t}) must be an integer, got {value!r}")
        lo, hi = t.min_max()
        if not lo <= int(value) <= hi:
            raise ArgumentError(f"argument '{name}' ({t}) = {int(value)} is out of range {lo}..{hi}")
        return int(value)
    value = float(value)
    if float_as(value, t.dtype) is None:
        raise ArgumentError(f"argument '{name}' ({t}) = {value} is out of range for {t}")
    return value


def _spec_value(p: Param, v):
    t = p.type.type
    if not t.is_bool:
        return _as_scalar(p.name, v, t)
    if not isinstance(v, (bool, np.bool_)):
        raise ArgumentError(f"argument '{p.name}' ({p.type}) must be a bool, got {v!r}")
    return bool(v)


class _LaunchMemo:
    """A kernel's last launch on Vulkan device arrays, kept prepared: a launch with the same
    grid, the same Array objects (held weakly: the memo never keeps memory alive) and equal
    scalars records it again without checking and binding anew (loops launch like this)."""

    __slots__ = ("grid", "repeat", "backend", "scope_backend", "args", "prepared", "runtime")

    def __init__(self, grid, repeat, backend, args, prepared, runtime):
        self.grid, self.repeat, self.backend = grid, repeat, backend
        self.scope_backend = getattr(_local, "backend", None)
        self.args = tuple(weakref.ref(a) if type(a) is Array else a for a in args)
        self.prepared, self.runtime = prepared, runtime

    def matches(self, grid, args, backend, repeat) -> bool:
        if (grid != self.grid or repeat != self.repeat or backend != self.backend
                or len(args) != len(self.args)
                or getattr(_local, "backend", None) != self.scope_backend):
            return False
        for old, new in zip(self.args, args):
            if type(old) is weakref.ReferenceType:
                if old() is not new:
                    return False
            elif type(old) is not type(new) or old != new:
                return False
        return True

    @staticmethod
    def shared_with_torch(args) -> bool:
        """Arrays torch has seen need the synchronised path."""
        return any(type(a) is Array and a._storage.cuda is not None for a in args)


class CompiledKernel:
    """A traced, specialised kernel and its artifacts."""

    def __init__(self, k: Kernel, module: Module, values: dict, debug_info: bool = True,
                 abi: str = "device_address", checked: bool = False):
        self.kernel = k
        self.module = module
        spec = {p.name for p in k.params if p.is_spec}
        self.consts = {n: v for n, v in values.items() if n not in spec}
        self.spec = {n: v for n, v in values.items() if n in spec}   # OpSpecConstant defaults
        self.debug_info, self.abi_kind = debug_info, abi
        self.checked = checked          # its SPIR-V guards every buffer access (codegen.checked)
        # the kernels of one module lowered with other options, shared by all of them
        self._variants: dict = {(debug_info, abi, checked): self}
        self._lowered = None
        self._vulkan_checked = None     # set once the Vulkan device is known to run it
        self._binders: dict = {}        # the Vulkan ABI's argument packer per Spec values
        self._memo: _LaunchMemo | None = None   # the last device-array launch on Vulkan
        self._memo_spec: dict = {}              # ... and its Spec values
        # per buffer, from each op's registry entry: whether an op writes it, and the
        # alignment its cooperative-matrix loads and stores need of its start (and which op)
        self._written: set[Value] = set()
        self._base_alignment: dict[Value, tuple[int, str]] = {}
        for op in module.walk():
            d = get(op.name)
            if d.writes is not None and isinstance(op.operands[d.writes].type, BufferType):
                self._written.add(op.operands[d.writes])
            if d.base_alignment is not None and isinstance(op.operands[0].type, BufferType):
                align = d.base_alignment(op)
                if align > self._base_alignment.get(op.operands[0], (1, ""))[0]:
                    self._base_alignment[op.operands[0]] = (align, op.name)

    @property
    def name(self) -> str:
        return self.kernel.name

    def variant(self, debug_info: bool, abi: str, checked: bool = False) -> "CompiledKernel":
        """This module lowered with other options (same trace): debug info, ABI, bounds
        checks. Each variant has its own SPIR-V, ABI, binder and launch memo."""
        key = (debug_info, abi, checked)
        ck = self._variants.get(key)
        if ck is None:
            ck = CompiledKernel(self.kernel, self.module, {**self.consts, **self.spec},
                                debug_info, abi, checked)
            ck._variants = self._variants
            self._variants[key] = ck
        return ck

    @functools.cached_property
    def target(self) -> str:
        """"vulkan" (GLCompute, push-constant ABI) or "opencl" (Kernel entry point with
        CrossWorkgroup pointer arguments): kernels using pycoop.intel ops target OpenCL."""
        return environment_of(self.module)

    @functools.cached_property
    @entry_point
    def ir(self) -> str:
        return print_module(self.module)

    @functools.cached_property
    def omitted(self) -> frozenset[str]:
        """Optional extensions the module uses that `.spv` leaves out (`.spv_full` keeps them):
        each extension's record decides (codegen.extensions), e.g. DecodeVectorFunc operands
        under PYCOOP_DECODE_VECTOR."""
        if self.target != "vulkan":
            return frozenset()
        return frozenset(e for e in extensions.optional_in(self.module)
                         if not extensions.get(e).keep())

    @functools.cached_property
    def decode_vector(self) -> str | None:
        """None if no tensor load uses decode_vector; else "kept" (`.spv` has the
        DecodeVectorFunc operands) or "stripped" (PYCOOP_DECODE_VECTOR=strip, or "auto" with a
        spirv-val that predates SPV_NV_cooperative_matrix_decode_vector)."""
        if self.target != "vulkan" or _DECODE_VECTOR not in extensions.optional_in(self.module):
            return None
        return "stripped" if _DECODE_VECTOR in self.omitted else "kept"

    def _lower(self):
        if self._lowered is None:
            self._lowered = lower_cached(self.module, omit=self.omitted, debug_info=self.debug_info,
                                         abi=self.abi_kind, checked=self.checked)
            if self.omitted:
                self._lower_full()        # the full module is still checked (pycoop's verifier)
        return self._lowered

    def _lower_full(self):
        return lower_cached(self.module, debug_info=self.debug_info, abi=self.abi_kind,
                            checked=self.checked)

    @property
    @entry_point
    def spv(self) -> bytes:
        """The validated SPIR-V binary (for kernels using decode_vector: see `.decode_vector`)."""
        return self._lower().spv

    @property
    @entry_point
    def spv_full(self) -> bytes:
        """The module with every DecodeVectorFunc operand (SPV_NV_cooperative_matrix_decode_vector),
        whatever `.spv` holds; checked by pycoop's decode_vector verifier (and spirv-val when it
        knows the extension). Equal to `.spv` for kernels without decode_vector."""
        if not self.omitted:
            return self.spv
        return self._lower_full().spv

    @property
    @entry_point
    def report(self) -> list[str]:
        """Notes of the compilation: what was changed for the target (e.g. stripped
        DecodeVectorFunc operands) and how the module was checked."""
        notes = list(self._lower().notes)
        if self.omitted:
            notes += [n for n in self._lower_full().notes if n not in notes]
        return notes

    @functools.cached_property
    @entry_point
    def spvasm(self) -> str:
        return disassemble(self.spv)

    @property
    @entry_point
    def abi(self) -> dict:
        """The parameters' layout (docs/abi.md): a copy, so that changing it changes no
        launch."""
        return copy.deepcopy(self._lower().abi)

    @property
    @entry_point
    def requirements(self) -> dict:
        """The capabilities, extensions and device features the module needs (a copy)."""
        return copy.deepcopy(self._lower().requirements)

    @entry_point
    def metadata(self) -> dict:
        """The JSON sidecar of an exported .spv (see docs/abi.md)."""
        low = self._lower()
        return {"pycoop_version": __version__, "kernel": self.name, "target": self.target,
                "entry_point": low.abi.get("entry_point", "main"),
                "execution_model": low.abi.get("execution_model", "GLCompute"),
                "spirv_version": low.abi.get("spirv_version", "1.6"),
                "workgroup_size": list(self.module.workgroup_size),
                "subgroup_size": self.module.subgroup_size, "constants": {k: repr(v) for k, v in self.consts.items()},
                "debug_info": self.debug_info,
                "abi": low.abi, "capabilities": low.capabilities, "extensions": low.extensions,
                "requirements": {k: (list(map(list, v)) if k in ("coopmat_shapes", "coopmat_types") else v)
                                 for k, v in low.requirements.items()},
                **({"decode_vector": self.decode_vector, "notes": self.report}
                   if self.decode_vector else {})}

    @entry_point
    def save(self, path) -> Path:
        """Write `path` (.spv) and `path`.json (entry point, ABI, requirements): both or
        neither (a sidecar that cannot be written takes the .spv back out)."""
        if not isinstance(path, (str, os.PathLike)) or str(path) == "":
            raise ArgumentError(f"{self.name}.save: path is a file name (str or os.PathLike), "
                                f"got {path!r}")
        path = Path(path)
        side = path.with_suffix(path.suffix + ".json")
        text = json.dumps(self.metadata(), indent=2) + "\n"
        path.write_bytes(self.spv)
        try:
            side.write_text(text)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path

    @functools.cached_property
    def _arg_specs(self) -> list[tuple]:
        """Per runtime parameter: (name, type, is buffer, written, the dtype a device array
        must have to be taken as it is (None: check in full), the byte alignment a view of
        it must start at and the op that needs it)."""
        specs = []
        for p, name in zip(self.module.kernel.params, self.module.param_names):
            buffer = isinstance(p.type, BufferType)
            plain = (buffer and isinstance(p.type.elem, ScalarType)) or None
            specs.append((name, p.type, buffer, p in self._written,
                          p.type.elem.dtype if plain else None,
                          *self._base_alignment.get(p, (1, ""))))
        return specs

    def _check_requires(self, args: list) -> None:
        """The kernel's `requires` on this launch's scalar arguments (by name): its ValueError
        refuses the launch, before any work."""
        scalars = {s[0]: v for s, v in zip(self._arg_specs, args) if not s[2]}
        try:
            self.kernel.requires(**scalars)
        except ArgumentError:
            raise
        except ValueError as e:
            msg = str(e)
            raise ArgumentError(msg if msg.startswith(self.name) else
                                f"{self.name}: {msg}") from None

    def check_args(self, args: list) -> list:
        out = []
        for (name, t, buffer, written, dtype, align, needs), v in zip(self._arg_specs, args):
            if buffer:
                if type(v) is Array and v.dtype == dtype and not v._byte_offset % align:
                    if v.size > MAX_ELEMENTS:
                        _too_long(name, t, v.size)
                    out.append(v)
                    continue
                if isinstance(v, Value):
                    raise _kernel_in_kernel(self.name)
                arr = _as_array(name, v, t)
                if isinstance(arr, Array) and arr._byte_offset % align:
                    _misaligned_view(name, arr._byte_offset, align, needs)
                if written and isinstance(arr, np.ndarray) and not arr.flags.writeable:
                    raise ArgumentError(f"argument '{name}' is written by the kernel but the array is "
                                        "read-only")
                out.append(arr)
            else:
                try:
                    out.append(_as_scalar(name, v, t))
                except ArgumentError:
                    if isinstance(v, Value):
                        raise _kernel_in_kernel(self.name) from None
                    raise
        return out

    @entry_point
    def launch(self, grid, args: list, *, backend: str | None = None, repeat: int = 1,
               site: str | None = None, spec: dict | None = None,
               checked: bool | None = None) -> LaunchResult:
        """Run the kernel over `grid`. `repeat` runs it that many times back to back on the
        same buffers (each run sees the previous one's writes): on a GPU one upload, one
        readback and no idle gaps, so timings are taken at full clock. `spec`: values of Spec
        parameters (default: the compiled ones), set at pipeline creation.

        On pycoop.Arrays the kernel runs on their backend; on Vulkan the launch is queued and
        returns at once (see docs/arrays.md). With NumPy (or torch CPU) arguments it is
        synchronous: results are in the caller's arrays on return.

        `checked` (default: $PYCOOP_CHECKED, on): on Vulkan, run the bounds-checked variant,
        which raises pycoop.KernelFault for an out-of-bounds access (docs/gpu.md)."""
        if not isinstance(args, (list, tuple)):
            raise ArgumentError(f"{self.name}.launch: args is a list or tuple of the runtime "
                                f"arguments ({', '.join(s[0] for s in self._arg_specs)}), got "
                                f"{type(args).__name__}")
        if len(args) != len(self._arg_specs):
            raise ArgumentError(f"{self.name} takes {len(self._arg_specs)} runtime arguments "
                                f"({', '.join(s[0] for s in self._arg_specs)}), got {len(args)}")
        return self._launch(_grid(grid), args, backend, check_repeat(repeat), site, spec=spec,
                            checked=checked)

    def _launch(self, grid: tuple[int, int, int], args: list, backend: str | None, repeat: int,
                site: str | None, *, spec: dict | None = None,
                checked: bool | None = None) -> LaunchResult:
        """`launch` with `grid` and `repeat` already checked (the launcher's hot path): the
        variant `checked` asks for runs it."""
        if self.kernel.requires is not None:
            self._check_requires(args)
        checked = self._checked(checked)
        ck = self if checked is self.checked else self.variant(self.debug_info, self.abi_kind,
                                                                checked)
        return ck._run(grid, args, backend, repeat, site, spec)

    def _run(self, grid: tuple[int, int, int], args: list, backend: str | None, repeat: int,
             site: str | None, spec: dict | None) -> LaunchResult:
        """`_launch` of this variant, its arguments' preconditions checked."""
        spec = self._spec_values(spec) if spec or self.spec else {}
        if capturing.active:
            graph = capturing.current()
            if graph is not None:
                return self._capture(graph, grid, args, backend, repeat, site, spec)
        memo = self._memo
        if memo is not None and spec == self._memo_spec and memo.matches(grid, args, backend, repeat):
            runtime = memo.runtime
            if memo.prepared.ctx is runtime._ctx and not memo.shared_with_torch(args):
                return LaunchResult("vulkan", pending=runtime.record(
                    memo.prepared, f"kernel {self.name} launched at {site or '<unknown>'}"))
        writebacks = []
        torch = interop.torch_module()
        if torch is not None and any(isinstance(v, torch.Tensor) for v in args):
            args, writebacks = self._cuda_tensor_arguments(args, backend)
        arrays = self.check_args(args)
        device_arrays = [a for a in arrays if isinstance(a, Array)]
        be = self._backend(device_arrays, backend)
        if be == "emulator":
            host = [a._host_view() if isinstance(a, Array) else a for a in arrays]
            # the emulator runs the module compiled with these values as its defaults
            module = self.module if spec == self.spec else self.kernel.compile(
                subgroup_size=self.module.subgroup_size, **self.consts, **spec).module
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                run(module, grid, host)
                times.append((time.perf_counter() - t0) * 1e3)
            return LaunchResult("emulator", tuple(times))
        runtime = vulkan_runtime()
        shared = interop.wait_for_torch(device_arrays)
        prepared = runtime.prepare(
            self.spv, "main", grid, self._binder(spec),
            [a.kernel_argument() if isinstance(a, Array) else a for a in arrays], repeat)
        if prepared.push is not None and not writebacks:
            self._memo = _LaunchMemo(grid, repeat, backend, args, prepared, runtime)
            self._memo_spec = spec
        pending = runtime.record(prepared, f"kernel {self.name} launched at {site or '<unknown>'}")
        if shared:          # torch's stream runs after it (semaphores, or a host wait)
            interop.release_to_torch(runtime)
        for tensor, array in writebacks:
            tensor.copy_(array.torch())
        return LaunchResult("vulkan", pending=pending)

    @entry_point
    def gpu_statistics(self, *, checked: bool | None = None,
                       spec: dict | None = None) -> KernelStatistics:
        """What the Vulkan driver reports of this kernel compiled for its device (registers
        per invocation, code size; the names are the driver's): the pipeline a launch with
        these options would use (`checked` as a launch takes it, PYCOOP_CHECKED by default;
        `spec`: Spec values), compiled again with statistics captured. No GPU work. Raises
        BackendUnavailable where the kernel cannot run on the device, PipelineError where the
        driver reports no statistics (VK_KHR_pipeline_executable_properties)."""
        if checked is not None and not isinstance(checked, bool):
            raise ArgumentError(f"{self.name}.gpu_statistics: checked must be True, False or "
                                f"None, got {checked!r}")
        if self.target == "opencl":
            raise BackendUnavailable(f"{self.name}: no statistics: it is an OpenCL-environment "
                                     "kernel (pycoop.intel ops), which Vulkan does not run")
        ck = self.variant(self.debug_info, self.abi_kind, self._checked(checked))
        runtime = vulkan_runtime()
        missing = vulkan_missing(self.variant(self.debug_info, self.abi_kind, False))
        if missing:
            raise BackendUnavailable(f"{self.name}: no statistics: the Vulkan device "
                                     f"({runtime.capabilities.device_name}) cannot run it; it "
                                     f"lacks {', '.join(missing)}")
        executables = runtime.pipeline_statistics(ck.spv, "main",
                                                  ck._binder(ck._spec_values(spec)))
        if not executables:
            raise PipelineError(f"{self.name}: the driver reported no executable of the "
                                "pipeline (VK_KHR_pipeline_executable_properties)")
        first = executables[0]                  # a compute pipeline has one
        stats = first["statistics"]
        return KernelStatistics(self.name, runtime.capabilities.device_name, first["name"],
                                first["subgroup_size"], {n: v for n, (v, _) in stats.items()},
                                {n: d for n, (_, d) in stats.items()})

    def _checked(self, checked: bool | None) -> bool:
        """Whether a launch with `checked=` runs the bounds-checked variant: as asked, else
        PYCOOP_CHECKED; never for the descriptor ABI, which has no such variant."""
        if self.abi_kind == "descriptors":      # bounds checking needs buffer addresses
            if checked:
                raise ArgumentError(f"{self.name}: checked=True runs the bounds-checked "
                                    "variant, which uses the device-address ABI; this kernel "
                                    "was compiled with abi='descriptors' (pass checked=False "
                                    "or compile without abi=)")
            return False
        if checked is not None and not isinstance(checked, (bool, np.bool_)):
            raise ArgumentValueError(f"{self.name}: checked must be True, False or None "
                                     f"($PYCOOP_CHECKED), got {checked!r}")
        return knobs.checked() if checked is None else bool(checked)

    def _binder(self, spec: dict) -> Binder:
        """The Vulkan argument packer of this kernel for these Spec values (made once)."""
        binder = self._binders.get(tuple(spec.items()))
        if binder is None:
            from ..runtime.vulkan.pipeline import specialization
            abi = self.abi     # with the VkSpecializationInfo values of this launch
            if abi.get("spec_constants"):
                abi = {**abi, "specialization": specialization(abi["spec_constants"], spec)}
            binder = self._binders[tuple(spec.items())] = Binder(abi)
        return binder

    def _capture(self, graph, grid: tuple[int, int, int], args: list, backend: str | None,
                 repeat: int, site: str | None, spec: dict) -> LaunchResult:
        """A launch inside `with pycoop.capture()`: checked like any launch, then recorded
        into `graph` (not run). Only device arrays of the graph's backend are taken; scalars
        are recorded as they are."""
        label = f"kernel {self.name} launched at {site or '<unknown>'}"
        if repeat != 1:
            raise capturing.refuse(
                f"{self.name}[...](..., repeat={repeat})", "repeat= times the runs of one "
                "launch, and a graph is timed as a whole: launch the kernel several times "
                "inside the capture, or replay the graph several times", graph)
        for (name, _, buffer, *_), v in zip(self._arg_specs, args):
            if buffer and not isinstance(v, Array):
                kind = "a torch tensor" if interop.is_torch_tensor(v) else \
                    f"a {type(v).__module__.split('.')[0]}.{type(v).__name__}"
                raise capturing.refuse(
                    f"kernel {self.name}: argument '{name}' is {kind}, not a pycoop.Array",
                    "a graph replays launches on device memory: make the array once before "
                    f"the capture ({name} = pycoop.asarray(...)) and write new contents into "
                    "it with copy_from between replays", graph)
        arrays = self.check_args(args)
        device_arrays = [a for a in arrays if isinstance(a, Array)]
        for a in device_arrays:
            graph.check_backend(a.backend, f"kernel {self.name}")
        requested = requested_backend(backend)
        if requested not in (None, "auto", graph.backend):
            raise capturing.refuse(
                f"kernel {self.name} with backend={requested!r}", f"this capture records "
                f"{graph.backend} launches (pycoop.capture(backend=...) chooses)", graph)
        if graph.backend == "vulkan":
            self.check_vulkan()
        written = [a for spec_, a in zip(self._arg_specs, arrays)
                   if spec_[3] and isinstance(a, Array)]
        if graph.backend == "emulator":
            host = [a._host_view() if isinstance(a, Array) else a for a in arrays]
            module = self.module if spec == self.spec else self.kernel.compile(
                subgroup_size=self.module.subgroup_size, **self.consts, **spec).module
            graph.add_launch(device_arrays, written, step=lambda: run(module, grid, host))
        else:
            prepared = vulkan_runtime().prepare(
                self.spv, "main", grid, self._binder(spec),
                [a.kernel_argument() if isinstance(a, Array) else a for a in arrays])
            graph.add_launch(device_arrays, written, prepared=prepared, label=label,
                             harvest=_fault_harvest() if self.checked else None)
        return graphs.captured(graph.backend, label)

    def _spec_values(self, spec: dict | None) -> dict:
        """Spec parameter values checked against their types (missing ones: the compiled)."""
        out = dict(self.spec)
        for name, v in (spec or {}).items():
            p = next((p for p in self.kernel.params if p.name == name and p.is_spec), None)
            if p is None:
                raise ArgumentError(f"{self.name} has no Spec parameter {name!r}")
            out[name] = _spec_value(p, v)
        return out

    def _backend(self, device_arrays: list, backend: str | None) -> str:
        """Where this launch runs: on device arrays, their backend (never a silent move);
        otherwise as `backend`/`use_backend`/$PYCOOP_BACKEND choose."""
        requested = requested_backend(backend)
        if not device_arrays:
            if self.target == "opencl":   # no OpenCL runtime: such kernels run on the emulator
                if (requested or knobs.backend()) == "vulkan":
                    raise BackendUnavailable(f"{self.name} is an OpenCL-environment kernel (it "
                                             "uses pycoop.intel ops): Vulkan cannot run it; use "
                                             "the emulator or load its .spv with an OpenCL runtime")
                return "emulator"
            # the unchecked lowering has the same requirements
            return choose(backend, self.variant(self.debug_info, self.abi_kind, False))
        kinds = sorted({a._storage.backend for a in device_arrays})
        if len(kinds) > 1:
            raise ArgumentError(f"{self.name}: its array arguments live on different backends "
                                f"({', '.join(kinds)}); pycoop does not move arrays silently\n"
                                "  hint: move one with a.to('vulkan') or a.to('emulator') (a copy)")
        be = kinds[0]
        if requested not in (None, "auto", be):
            raise ArgumentError(f"{self.name}: backend {requested!r} was asked for, but its array "
                                f"arguments live on {be}\n  hint: a.to({requested!r}) copies an "
                                "array there")
        if be == "vulkan":
            self.check_vulkan()
        return be

    def check_vulkan(self, what: str | None = None) -> None:
        """BackendUnavailable if the Vulkan device cannot run this kernel (`what`: the name
        the error gives it, the kernel's by default), before anything is queued."""
        why = None
        if self.target == "opencl":
            why = "it is an OpenCL-environment kernel (pycoop.intel ops)"
        elif self._vulkan_checked is None:
            missing = vulkan_missing(self.variant(self.debug_info, self.abi_kind, False))
            if missing:
                why = f"the Vulkan device lacks {', '.join(missing)}"
            else:
                self._vulkan_checked = True
        if why:
            raise BackendUnavailable(
                f"cannot run {what or self.name} on its Vulkan arrays: {why}\n  hint: run it on "
                "the emulator with arrays made there (pycoop.zeros(..., backend='emulator')) "
                "or moved there with a.to('emulator') (a copy)")

    def _cuda_tensor_arguments(self, args: list, backend: str | None):
        """torch CUDA tensors pycoop does not own: each copied once, device to device, into a
        Vulkan array; after the launch the copy goes back into the tensor if the kernel
        writes it."""
        out, writebacks = [], []
        for p, v in zip(self.module.kernel.params, args):
            if isinstance(p.type, BufferType) and interop.is_cuda_tensor(v):
                array = asarray(v, backend=backend or "vulkan")
                if p in self._written:
                    writebacks.append((v, array))
                v = array
            out.append(v)
        return out, writebacks

    def __repr__(self) -> str:
        consts = "".join(f" {k}={v!r}" for k, v in {**self.consts, **self.spec}.items())
        return f"<pycoop compiled kernel {self.name}{consts} ({self.target})>"

    def _repr_html_(self) -> str:
        return compiled_kernel_html(self)
