"""Tracing Python callables into separate IR functions: the decode, combine and per-element
functions that SPV_NV_cooperative_matrix2 ops call. Each becomes one SPIR-V OpFunction; the
emulator runs it vectorised over every element it is applied to."""
from __future__ import annotations

import inspect
import types as pytypes

from ..errors import CompileError, Loc
from ..ir.builder import emit, tracer
from ..ir.core import Block, Function, Value
from ..types import Type


def _callable_for_trace(fn):
    """User functions are source-transformed (runtime if/for/while allowed); pycoop's own
    helpers (pycoop.max, ...) and lambdas without source are called as they are."""
    from .kernel import func
    if isinstance(fn, func):
        return fn
    if isinstance(fn, pytypes.FunctionType) and not fn.__module__.startswith("pycoop") \
            and fn.__name__ != "<lambda>":
        from .transform import transform
        try:
            return transform(fn)
        except CompileError:
            return fn
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


def trace_function(fn, param_types: list[Type], role: str, loc: Loc,
                   result_type: Type | None = None) -> Function:
    """Trace `fn(*params)` into a Function (cached per callable and signature in this trace).
    `role` names it in errors ("decode function", ...); `result_type`, if given, is checked."""
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
        return cached
    n = arity(fn)
    if n is not None and n != len(param_types):
        raise CompileError(f"the {role} {getattr(fn, '__name__', fn)!r} takes {n} parameters, "
                           f"but is called with {len(param_types)} "
                           f"({', '.join(map(str, param_types))})", loc,
                           rule="SPV_NV_cooperative_matrix2: the function has one parameter per operand it "
                                "is called with",
                           rule_id="nv.callback-arity")
    params = [Value(pt, name=f"p{i}") for i, pt in enumerate(param_types)]
    body = Block(list(params))
    call = _callable_for_trace(fn)
    with t.region(body):
        out = call(*params)
        if not isinstance(out, Value):
            from ..ops.core import as_value
            try:
                out = as_value(out, result_type)
            except CompileError:
                raise CompileError(f"the {role} returned {out!r}, not a value", loc,
                                   rule="SPV_NV_cooperative_matrix2: the function's return type must match "
                                        "the matrix component type",
                                   rule_id="nv.callback-return-type") from None
        if result_type is not None and out.type != result_type:
            raise CompileError(f"the {role} returns {out.type}, expected {result_type}", loc,
                               hint=f"convert the result, e.g. {result_type}(x)",
                               rule="SPV_NV_cooperative_matrix2: the function's return type must match the "
                                    "matrix component type",
                               rule_id="nv.callback-return-type")
        if body.terminated:
            raise CompileError(f"the {role} must end by returning a value", loc,
                               rule="SPV_NV_cooperative_matrix2: the function returns a value "
                                    "(OpReturnValue)")
        emit("yield", [out], loc=loc)
    name = getattr(fn, "__name__", role.replace(" ", "_"))
    f = Function(f"{name}_{len(t.functions)}", params, body, kind="func", result_type=out.type,
                 loc=loc)
    t.functions.append(f)
    t.function_cache[key] = f
    return f
