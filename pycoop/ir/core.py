"""IR data structures: typed SSA values, ops with structured regions, functions, modules.

Control flow is structured (MLIR-style): `if` and `loop` ops own regions whose blocks end with
`yield` / `condition`; loop-carried values are block arguments. Both consumers (SPIR-V
lowering, emulator) walk this tree directly.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from ..errors import CompileError, Loc, current_loc
from ..types import Type


class Value:
    """An SSA value. During tracing it is also the user's proxy: Python operators on it
    record ops (the operator table is installed by pycoop.ops.core)."""

    __slots__ = ("type", "op", "id", "name", "__weakref__")
    _counter = 0

    def __init__(self, type: Type, op: "Op | None" = None, name: str | None = None):
        self.type = type
        self.op = op
        Value._counter += 1
        self.id = Value._counter
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.type} %{self.name or self.id}>"

    # Python must never decide control flow on a traced value.
    def __bool__(self):
        raise CompileError(
            "a runtime value was used where Python needs a plain bool", current_loc(),
            rule="runtime conditions must be in an `if`/`while` of a @pycoop.kernel or @pycoop.func",
            hint="decorate the helper with @pycoop.func, or use pycoop.select(cond, a, b) "
                 "(and pycoop.max / pycoop.min for Python's max() / min())", rule_id="frontend.runtime-bool")

    def __index__(self):
        raise CompileError(
            "a runtime value was used where Python needs a plain int", current_loc(),
            rule="sizes, shapes and Python-level indices must be known at trace time",
            hint="for a loop with a runtime bound write `for i in range(n):` directly in the "
                 "kernel (not inside a loop containing break/continue)", rule_id="frontend.runtime-int")

    def __float__(self):
        raise CompileError("float() of a runtime value: Python's float() needs a plain number",
                           current_loc(), rule="Python's conversions run at trace time",
                           hint="pycoop.cast(x, f32) converts on the device",
                           rule_id="frontend.runtime-float")

    def __round__(self, ndigits=None):
        raise CompileError("round() of a runtime value: Python's round needs a plain number",
                           current_loc(), rule="Python's rounding functions run at trace time",
                           hint="pycoop.floor(x + 0.5), pycoop.trunc(x) or pycoop.cast(x, i32) "
                                "round on the device", rule_id="frontend.runtime-round")

    def __trunc__(self):
        raise CompileError("math.trunc() of a runtime value: Python's trunc needs a plain number",
                           current_loc(), rule="Python's rounding functions run at trace time",
                           hint="pycoop.trunc(x) truncates on the device",
                           rule_id="frontend.runtime-round")

    def __matmul__(self, other):
        raise CompileError(f"the @ operator on a runtime value of type {self.type}",
                           current_loc(), rule="pycoop has no @ on runtime values",
                           hint="pycoop.mul_add(a, b, c) multiplies cooperative matrices; a "
                                "dot product of vectors is the sum of their components' products",
                           rule_id="frontend.runtime-matmul")

    __rmatmul__ = __matmul__

    def __iter__(self):
        raise CompileError(f"cannot iterate over a runtime value of type {self.type}",
                           current_loc(),
                           rule="pycoop: compile-time values, arrays and vectors are iterated in "
                                "Python; other runtime values have no length at trace time (shared "
                                "arrays are read by index)",
                           hint="iterate over a Python range() of indexes, or keep the data in an array",
                           rule_id="frontend.runtime-iteration")

    def __len__(self):
        raise CompileError(f"len() of a runtime value of type {self.type} is not known at "
                           "trace time", current_loc(),
                           hint="pass the size as a kernel parameter (a u32, or pycoop.Const to "
                                "fix it at compile time)",
                           rule="pycoop: compile-time values, arrays and vectors are iterated in "
                                "Python; other runtime values have no length at trace time (shared "
                                "arrays are read by index)", rule_id="frontend.runtime-iteration")

    # NumPy functions cannot trace: a clear error at the user's line instead of NumPy's own.
    # An operator with a NumPy scalar on the left (np.float32(2) * x) reaches NumPy first; it
    # is applied as the Python operator on the scalar's Python value.
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        op = _OPERATOR_UFUNCS.get(ufunc.__name__)
        if (method == "__call__" and op is not None and not kwargs and len(inputs) == 2
                and all(isinstance(x, Value) or np.ndim(x) == 0 for x in inputs)):
            return op(*(x if isinstance(x, Value) else x.item() for x in inputs))
        _numpy_on_value(getattr(ufunc, "__name__", str(ufunc)))

    def __array_function__(self, func, types, args, kwargs):
        _numpy_on_value(getattr(func, "__name__", str(func)))

    __hash__ = object.__hash__


_OPERATOR_UFUNCS = {
    "add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
    "true_divide": operator.truediv, "floor_divide": operator.floordiv, "remainder": operator.mod,
    "power": operator.pow, "bitwise_and": operator.and_, "bitwise_or": operator.or_,
    "bitwise_xor": operator.xor, "left_shift": operator.lshift, "right_shift": operator.rshift,
    "less": operator.lt, "less_equal": operator.le, "greater": operator.gt,
    "greater_equal": operator.ge, "equal": operator.eq, "not_equal": operator.ne}


def _numpy_on_value(name: str):
    import pycoop
    alt = f"pycoop.{name}" if callable(getattr(pycoop, name, None)) else "pycoop's own functions"
    raise CompileError(f"NumPy's {name}() cannot run on a kernel value", current_loc(),
                       rule="kernel code is traced: NumPy only computes on values known at "
                            "trace time",
                       hint=f"use {alt} (see docs/ops.md)",
                       rule_id="frontend.numpy-on-runtime-value")


@dataclass
class Block:
    args: list[Value] = field(default_factory=list)
    ops: list["Op"] = field(default_factory=list)

    @property
    def terminated(self) -> bool:
        return bool(self.ops) and self.ops[-1].name in TERMINATORS


TERMINATORS = {"yield", "condition", "return"}


class Op:
    __slots__ = ("name", "operands", "attrs", "results", "regions", "loc", "__weakref__")

    def __init__(self, name: str, operands: list[Value], attrs: dict[str, Any],
                 result_types: list[Type], regions: list[Block] | None, loc: Loc):
        self.name = name
        self.operands = operands
        self.attrs = attrs
        self.results = [Value(t, self) for t in result_types]
        self.regions = regions or []
        self.loc = loc

    @property
    def result(self) -> Value:
        return self.results[0]

    def __repr__(self) -> str:
        return f"<Op {self.name} at {self.loc}>"


@dataclass(eq=False)
class Function:
    """A kernel (entry point) or a function called by an op (decode, combine, ...)."""
    name: str
    params: list[Value]
    body: Block
    kind: str = "kernel"                 # "kernel" | "func"
    result_type: Type | None = None
    loc: Loc | None = None


@dataclass
class Module:
    kernel: Function
    workgroup_size: tuple[int, int, int]
    subgroup_size: int
    param_names: list[str]
    functions: list[Function] = field(default_factory=list)
    shared: list[Value] = field(default_factory=list)      # workgroup arrays (global variables)
    fp: str = "exact"          # floating-point mode of the kernel (pycoop.codegen.float_modes)

    def walk(self) -> Iterator[Op]:
        for fn in [self.kernel, *self.functions]:
            yield from walk_block(fn.body)


def merged_sources(module: "Module") -> dict[int, list[Value]]:
    """For every value merged by structured control flow (a loop's block arguments and
    results, an `if`'s results), keyed by id: the values it may take (a loop's initial value
    and the body's yielded one; each yielding branch's value)."""
    out: dict[int, list[Value]] = {}
    for op in module.walk():
        if op.name == "loop":
            cond, body = op.regions
            end = body.ops[-1] if body.ops else None
            for i, init in enumerate(op.operands):
                incoming = [init] + ([end.operands[i]] if end is not None and end.name == "yield"
                                     else [])
                for v in (cond.args[i], body.args[i], op.results[i]):
                    out[id(v)] = incoming
        elif op.name == "if":
            ends = [r.ops[-1] for r in op.regions if r.ops and r.ops[-1].name == "yield"]
            for i, v in enumerate(op.results):
                out[id(v)] = [e.operands[i] for e in ends]
    return out


def walk_block(block: Block) -> Iterator[Op]:
    for op in block.ops:
        yield op
        for r in op.regions:
            yield from walk_block(r)
