"""Emulator fast paths: faster evaluations of particular op patterns, with the same results
and the same reports as running the ops one by one (each falls back to that whenever it
cannot be sure). They are registered here by op name; no op record names them, so a faster
emulator never touches an op family's module.

* `FAST_OPS[name](ctx, op, operand values)`: the op's results, or None to run its emulation;
* `RUNS[name](ctx, ops, i)`: how many ops of `ops` from `i` on (a run starting with an op of
  this name) it did, or 0;
* `LAZY_OPERANDS`: ops whose emulation takes lazy matrix-product blocks (emulator.lazy) as
  they are, instead of copied out.
"""
from __future__ import annotations

from . import loop_fusion, store_runs

FAST_OPS = {"loop": loop_fusion.run}
RUNS = {"khr.store": store_runs.run}
LAZY_OPERANDS = frozenset({"khr.store"})
