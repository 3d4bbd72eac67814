"""The one builder every traced op goes through.

`emit()` looks the op up in the registry, runs its type rule / checks (which raise
CompileError at the user's line), records the op with that line in the current block.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..errors import CompileError, Loc, current_loc
from ..types import Type
from .core import Block, Op, Value
from .registry import get

_state = threading.local()


class RequiresSubgroupSize(Exception):
    """Raised while tracing by an op that needs a particular subgroup size when the kernel did
    not choose one (Intel 2D block IO: 16); the kernel is traced again with that size."""

    def __init__(self, size: int):
        super().__init__(size)
        self.size = size


class Tracer:
    """State of one trace: a stack of blocks being filled, module-level collections, and the
    kernel's tracing options.

    `function_tracer` traces Python callables into IR functions (decode, combine and per-element
    functions of SPV_NV_cooperative_matrix2): it is the front end's (frontend.functions), given
    by whoever starts the trace, so that the ops calling it do not depend on the front end."""

    def __init__(self, subgroup_size: int, workgroup_size: tuple[int, int, int], *,
                 subgroup_size_explicit: bool = True, strict_intel_shapes: bool = True,
                 function_tracer: Any = None):
        self.blocks: list[Block] = []
        self.shared: list[Value] = []
        self.functions: list = []           # functions called by ops (decode, combine, ...)
        self.function_cache: dict = {}
        # id(block) -> (block, {op key: op}): repeated pure ops shared. Keys hold operand ids;
        # each entry's op keeps its operands alive, so an id is never another value's.
        self.cse: dict[int, tuple] = {}
        self.subgroup_size = subgroup_size
        self.workgroup_size = workgroup_size
        # False: the kernel did not choose its subgroup size (an op may ask for another one)
        self.subgroup_size_explicit = subgroup_size_explicit
        self.strict_intel_shapes = strict_intel_shapes   # pycoop.kernel(strict_intel_shapes=...)
        self.function_tracer = function_tracer
        # Value.id -> where Python ints were merged into it (a runtime `if` or loop, which
        # gives them i32): named by the type errors its uses meet
        self.python_int_merges: dict[int, str] = {}

    @property
    def block(self) -> Block:
        return self.blocks[-1]

    @contextmanager
    def region(self, block: Block):
        self.blocks.append(block)
        try:
            yield block
        finally:
            self.blocks.pop()


def tracer() -> Tracer:
    t = getattr(_state, "tracer", None)
    if t is None:
        raise CompileError("pycoop ops can only be used inside a @pycoop.kernel while it is traced",
                           current_loc(),
                           hint="call the kernel (kernel[grid](...)) or kernel.compile() instead",
                           rule="pycoop: ops are traced inside a @pycoop.kernel (or a function it calls)",
                           rule_id="frontend.trace-outside-kernel")
    return t


def trace_function(fn, param_types: list[Type], role: str, loc: Loc,
                   result_type: Type | None = None):
    """`fn` traced into an IR Function by the front end's function tracer (Tracer.function_tracer):
    frontend.functions.trace_function says how."""
    return tracer().function_tracer.trace_function(fn, param_types, role, loc, result_type)


def trace_closure(fn, param_types: list[Type], role: str, loc: Loc,
                  result_type: Type | None = None):
    """Like trace_function, for functions that may use the kernel's values
    (frontend.functions.trace_closure)."""
    return tracer().function_tracer.trace_closure(fn, param_types, role, loc, result_type)


def tracing() -> bool:
    return getattr(_state, "tracer", None) is not None


@contextmanager
def trace_scope(t: Tracer):
    prev = getattr(_state, "tracer", None)
    _state.tracer = t
    try:
        yield t
    finally:
        _state.tracer = prev


def emit(name: str, operands: list[Value], attrs: dict[str, Any] | None = None,
         regions: list[Block] | None = None, loc: Loc | None = None) -> Op:
    """Check and record op `name`; return the Op (its results are the new values)."""
    d = get(name)
    attrs = attrs or {}
    loc = loc or current_loc()
    result_types: list[Type] = d.infer(operands, attrs, regions, loc)
    t = tracer()
    key = _cse_key(name, operands, attrs, regions)
    blk, table = t.cse.get(id(t.block), (None, None))
    if blk is not t.block:                 # the block holds its table, so its id stays its own
        blk, table = t.block, {}
        t.cse[id(blk)] = (blk, table)
    if key is not None and key in table:
        return table[key]
    op = Op(name, operands, attrs, result_types, regions, loc)
    if not t.block.terminated:           # code after a `return` is unreachable: not recorded
        t.block.ops.append(op)
        if key is not None:
            table[key] = op
    return op


def _cse_key(name: str, operands: list[Value], attrs: dict[str, Any], regions) -> tuple | None:
    """What makes a side-effect-free op equal to an earlier one of its block (the same
    operands, kind and constants), or None for ops that are never shared. Floats are keyed
    by their bits: 0.0 == -0.0."""
    if not get(name).pure or regions:
        return None
    items = []
    for k, v in sorted(attrs.items()):
        if isinstance(v, (float, np.floating)):
            v = ("float", float(v).hex())
        items.append((k, v))
    key = (name, tuple(map(id, operands)), tuple(items))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def emit1(name: str, operands: list[Value], attrs: dict[str, Any] | None = None,
          loc: Loc | None = None) -> Value:
    return emit(name, operands, attrs, None, loc).result
