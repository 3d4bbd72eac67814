"""The one builder every traced op goes through.

`emit()` looks the op up in the registry, runs its type rule / checks (which raise
CompileError at the user's line), records the op with that line in the current block.
"""
from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..errors import UNKNOWN, CompileError, Loc
from ..types import Type
from .core import Block, Op, Value
from .registry import get

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_KERNELS_DIR = _PKG_DIR + "kernels" + os.sep     # the library's kernels: DSL code like the user's
_state = threading.local()


_POSITIONS: dict = {}     # code object -> its instructions' source positions


def _column(f) -> int:
    """1-based column of the instruction frame `f` is at (0 if unknown). Every traced op asks,
    so each code object's position table is built once, not once per op."""
    code = f.f_code
    pos = _POSITIONS.get(code)
    if pos is None:
        if len(_POSITIONS) > 4096:           # redefined cells in a long notebook session
            _POSITIONS.clear()
        pos = _POSITIONS[code] = tuple(code.co_positions()) if hasattr(code, "co_positions") else ()
    i = f.f_lasti // 2
    return (pos[i][2] or -1) + 1 if i < len(pos) else 0


def current_loc() -> Loc:
    """Location of the innermost frame outside pycoop's implementation (the kernel code being
    traced: the user's, or a kernel of pycoop.kernels)."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_PKG_DIR) or fn.startswith(_KERNELS_DIR):
            return Loc(fn, f.f_lineno, _column(f))
        f = f.f_back
    return UNKNOWN


class Tracer:
    """State of one trace: a stack of blocks being filled, and module-level collections."""

    def __init__(self, subgroup_size: int, workgroup_size: tuple[int, int, int]):
        self.blocks: list[Block] = []
        self.shared: list[Value] = []
        self.functions: list = []           # functions called by ops (decode, combine, ...)
        self.function_cache: dict = {}
        # id(block) -> (block, {op key: op}): repeated pure ops shared. Keys hold operand ids;
        # each entry's op keeps its operands alive, so an id is never another value's.
        self.cse: dict[int, tuple] = {}
        self.subgroup_size = subgroup_size
        self.workgroup_size = workgroup_size

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
