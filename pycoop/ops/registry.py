"""The op registry: one entry per op holds its type rule and checks, SPIR-V lowering, NumPy
semantics and the SPIR-V capabilities it needs.

Op families (core, khr, ...) declare entries with `define()`; the builder, verifier, SPIR-V
lowering and emulator only ever look ops up here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import CompileError


@dataclass
class OpDef:
    name: str
    infer: Callable            # (operands, attrs, regions, loc) -> list[Type]; raises CompileError
    lower: Callable | None = None     # (LowerCtx, op) -> None; sets ctx.ids for results
    emulate: Callable | None = None   # (EmuCtx, op, *operand arrays) -> tuple of result arrays
    capabilities: tuple[str, ...] = ()
    doc: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


_REGISTRY: dict[str, OpDef] = {}

# Ops without memory access or side effects: the emulator may run them early or once for a
# whole loop (loop fusion, runs of stores).
MEMORYLESS = frozenset({"const", "binary", "unary", "compare", "select", "cast", "bitcast",
                        "builtin", "composite.construct", "composite.extract", "khr.fill"})


def define(name: str, infer: Callable, *, capabilities: tuple[str, ...] = (), doc: str = "",
           **extra) -> OpDef:
    if name in _REGISTRY:
        raise RuntimeError(f"op {name} defined twice")
    d = OpDef(name, infer, capabilities=capabilities, doc=doc, extra=extra)
    _REGISTRY[name] = d
    return d


def lowering(name: str):
    def deco(fn):
        _REGISTRY[name].lower = fn
        return fn
    return deco


def emulation(name: str):
    def deco(fn):
        _REGISTRY[name].emulate = fn
        return fn
    return deco


def get(name: str) -> OpDef:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise CompileError(f"internal: unknown op {name!r}") from None

