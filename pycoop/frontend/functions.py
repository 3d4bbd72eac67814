"""Python functions called from kernels: `@pycoop.func` helpers (inlined where they are
called), and the decode, combine and per-element functions that SPV_NV_cooperative_matrix2 ops
call, traced into separate IR functions (each one SPIR-V OpFunction; the emulator runs it
vectorised over every element it is applied to). Ops reach the latter through the Tracer
(ir.builder.trace_function), which the kernel's trace is given this module as."""
from __future__ import annotations

import functools
import inspect
import types as pytypes

from ..errors import CompileError, Loc, current_loc, without_internal_frames
from ..ir.builder import emit, tracer
from ..ir.core import Block, Function, Op, Value, walk_block
from ..ops.core import as_value
from ..types import BufferType, CoopMatType, ScalarType, SharedArrayType, Type
from .transform import transform


# `@pycoop.func` helpers being inlined: nested calls of one helper (recursion) per helper
_func_depth: dict[int, int] = {}
_MAX_RECURSION = 64


class func:
    """`@pycoop.func`: a helper whose Python control flow may depend on runtime values. It is
    inlined where it is called from a kernel."""

    def __init__(self, fn):
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._traced = None

    def __call__(self, *args, **kwargs):
        if self._traced is None:
            try:
                self._traced = transform(self._fn)
            except CompileError as e:
                raise without_internal_frames(e) from None
        # A helper is inlined, so recursion must end on trace-time values; one that recurses
        # on a runtime condition would only end in Python's RecursionError.
        depth = _func_depth.get(id(self), 0)
        if depth >= _MAX_RECURSION:
            raise CompileError(f"@pycoop.func {self.__name__} calls itself more than "
                               f"{_MAX_RECURSION} levels deep", current_loc(),
                               rule="a @pycoop.func is inlined where it is called (kernels have "
                                    "no call stack): recursion must end on trace-time values",
                               hint="end the recursion on a Python value (a length, a Const), "
                                    "or write the computation as a loop", rule_id="frontend.recursion-depth")
        _func_depth[id(self)] = depth + 1
        try:
            return self._traced(*args, **kwargs)
        finally:
            if depth:
                _func_depth[id(self)] = depth
            else:
                del _func_depth[id(self)]


def _callable_for_trace(fn):
    """User functions are source-transformed (runtime if/for/while allowed); pycoop's own
    helpers (pycoop.max, ...) and lambdas without source are called as they are."""
    if isinstance(fn, func):
        return fn
    if isinstance(fn, pytypes.FunctionType) and not (fn.__module__ or "").startswith("pycoop") \
            and fn.__name__ != "<lambda>":
        try:
            return transform(fn)
        except CompileError as e:
            if e.loc is not None:       # a statement kernels reject: at the user's line
                raise
            return fn                   # no source to read: called as it is
    return fn


def arity(fn) -> int | None:
    """Number of positional parameters of `fn` (None if it takes *args)."""
    try:
        params = inspect.signature(fn._fn if hasattr(fn, "_fn") else fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


# Why a function of each role cannot receive kernel values: the extension fixes its
# parameters (the per-element function alone takes extra operands, see trace_closure).
_FIXED_PARAMS = {
    "decode function": "SPV_NV_cooperative_matrix2: DecodeFunc's parameters are the pointer, the "
                       "element coordinates and the block coordinates only",
    "decode_vector function": "SPV_NV_cooperative_matrix_decode_vector: DecodeVectorFunc's "
                              "parameters are the pointer and the coordinates only",
    "combine function": "SPV_NV_cooperative_matrix2: CombineFunc's parameters are two components "
                        "only",
}
_FIXED_HINT = {
    "decode function": "decode from the block alone, then apply the kernel value to the loaded "
                       "matrix (m * s, or pycoop.nv.per_element(m, fn, s))",
    "decode_vector function": "decode from the block alone, then apply the kernel value to the "
                              "loaded matrix (m * s, or pycoop.nv.per_element(m, fn, s))",
    "combine function": "combine the components alone, then apply the kernel value to the "
                        "reduced matrix (pycoop.nv.per_element(m, fn, s))",
}


def _outside_values(body: Block, params: list[Value]) -> dict[Value, object]:
    """Values a traced body uses but does not define (captured from the kernel by a closure):
    each with the first op that uses it."""
    defined, out = set(params), {}

    def walk(b: Block):
        defined.update(b.args)
        for op in b.ops:
            for v in op.operands:
                if v not in defined:
                    out.setdefault(v, op)
            for r in op.regions:
                walk(r)
            defined.update(op.results)

    walk(body)
    return out


def _substitute(body: Block, new: dict[Value, Value]) -> None:
    for op in walk_block(body):
        op.operands = [new.get(v, v) for v in op.operands]


def trace_function(fn, param_types: list[Type], role: str, loc: Loc,
                   result_type: Type | None = None) -> Function:
    """Trace `fn(*params)` into a Function (cached per callable and signature in this trace).
    `role` names it in errors ("decode function", ...); `result_type`, if given, is checked.
    Constants the function captures from the kernel are copied into it; any other kernel
    value it uses is a CompileError at the line that uses it (its parameters are fixed)."""
    return _trace(fn, param_types, role, loc, result_type, closure=False)[0]


def trace_closure(fn, param_types: list[Type], role: str, loc: Loc,
                  result_type: Type | None = None) -> tuple[Function, list[Value]]:
    """Like trace_function, for a function that may use scalars and matrices of the kernel
    (a closure over a parameter or a value computed before the call): each becomes a further
    parameter of the Function, after `param_types`. Returns the Function and the kernel
    values the caller passes for those parameters."""
    return _trace(fn, param_types, role, loc, result_type, closure=True)


def _trace(fn, param_types: list[Type], role: str, loc: Loc, result_type: Type | None,
           closure: bool) -> tuple[Function, list[Value]]:
    if not callable(fn):
        raise CompileError(f"the {role} must be a function, got {fn!r}", loc,
                           hint="pass a Python function (or a @pycoop.func)",
                           rule="SPV_NV_cooperative_matrix2: DecodeFunc, CombineFunc and Func are "
                                "OpFunctions",
                           rule_id="nv.callback-not-function")
    t = tracer()
    key = (fn, tuple(param_types), role)
    cached = t.function_cache.get(key)
    if cached is not None:
        return cached, []
    n = arity(fn)
    if n is not None and n != len(param_types):
        raise CompileError(f"the {role} {getattr(fn, '__name__', fn)!r} takes {n} parameters, "
                           f"but is called with {len(param_types)} "
                           f"({', '.join(map(str, param_types))})", loc,
                           rule="SPV_NV_cooperative_matrix2: the function has one parameter per operand it "
                                "is called with",
                           hint=f"define it with {len(param_types)} parameters",
                           rule_id="nv.callback-arity")
    params = [Value(pt, name=f"p{i}") for i, pt in enumerate(param_types)]
    body = Block(list(params))
    call = _callable_for_trace(fn)
    with t.region(body):
        out = call(*params)
        if not isinstance(out, Value):
            try:
                out = as_value(out, result_type)
            except CompileError:
                raise CompileError(f"the {role} returned {out!r}, not a value", loc,
                                   rule="SPV_NV_cooperative_matrix2: the function's return type must match "
                                        "the matrix component type",
                                   hint="return a value computed from the parameters, e.g. "
                                        "f16(x)", rule_id="nv.callback-return-type") from None
        if result_type is not None and out.type != result_type:
            raise CompileError(f"the {role} returns {out.type}, expected {result_type}", loc,
                               hint=f"convert the result, e.g. {result_type}(x)",
                               rule="SPV_NV_cooperative_matrix2: the function's return type must match the "
                                    "matrix component type",
                               rule_id="nv.callback-return-type")
        if body.terminated:
            raise CompileError(f"internal: the {role} must end by returning a value", loc,
                               rule="SPV_NV_cooperative_matrix2: the function returns a value "
                                    "(OpReturnValue)")
        emit("yield", [out], loc=loc)
    outside = _outside_values(body, params)
    new, captured = {}, []
    for v, user in outside.items():
        if v.op is not None and v.op.name == "const":        # a copy of the constant
            c = Op("const", [], dict(v.op.attrs), [v.type], None, v.op.loc)
            body.ops.insert(0, c)
            new[v] = c.result
        elif closure and isinstance(v.type, (ScalarType, CoopMatType)):
            p = Value(v.type, name=f"p{len(params)}")
            params.append(p)
            body.args.append(p)
            new[v] = p
            captured.append(v)
        else:
            what = "a buffer or shared array of the kernel" if isinstance(v.type, (BufferType, SharedArrayType)) \
                else f"a value of the kernel ({v.type})"
            if closure:
                rule = (f"the {role}'s parameters are its operands; pycoop passes the scalars and "
                        "matrices it uses from the kernel as further operands, not memory")
                hint = ("read what it needs in the kernel before the call and use that value "
                        "(or pass it as an extra operand)")
            else:
                rule = _FIXED_PARAMS.get(role, f"the {role}'s parameters are fixed by the extension")
                hint = _FIXED_HINT.get(role, "compute it from its parameters and values known at "
                                             "trace time only")
            raise CompileError(f"the {role} uses {what}", user.loc, rule=rule,
                               hint=hint, rule_id="nv.callback-captures-memory" if closure
                               else "nv.callback-parameters")
    _substitute(body, new)
    name = getattr(fn, "__name__", role.replace(" ", "_"))
    f = Function(f"{name}_{len(t.functions)}", params, body, kind="func", result_type=out.type,
                 loc=loc)
    t.functions.append(f)
    if not outside:         # a closure over kernel values is traced again at each use
        t.function_cache[key] = f
    return f, captured
