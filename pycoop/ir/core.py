"""IR data structures: typed SSA values, ops with structured regions, functions, modules.

Control flow is structured (MLIR-style): `if` and `loop` ops own regions whose blocks end with
`yield` / `condition`; loop-carried values are block arguments. Both consumers (SPIR-V
lowering, emulator) walk this tree directly.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from ..errors import Loc
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
        from .builder import current_loc
        from ..errors import CompileError
        raise CompileError(
            "a runtime value was used where Python needs a plain bool", current_loc(),
            rule="runtime conditions must be in an `if`/`while` of a @pycoop.kernel or @pycoop.func",
            hint="decorate the helper with @pycoop.func, or use pycoop.select(cond, a, b)")

    def __index__(self):
        from .builder import current_loc
        from ..errors import CompileError
        raise CompileError(
            "a runtime value was used where Python needs a plain int", current_loc(),
            rule="sizes, shapes and Python-level indices must be known at trace time",
            hint="for a loop with a runtime bound write `for i in range(n):` directly in the "
                 "kernel (not inside a loop containing break/continue)")

    def __iter__(self):
        from .builder import current_loc
        from ..errors import CompileError
        raise CompileError(f"cannot iterate over a runtime value of type {self.type}",
                           current_loc())

    __hash__ = object.__hash__


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

    def walk(self) -> Iterator[Op]:
        for fn in [self.kernel, *self.functions]:
            yield from walk_block(fn.body)


def walk_block(block: Block) -> Iterator[Op]:
    for op in block.ops:
        yield op
        for r in op.regions:
            yield from walk_block(r)
