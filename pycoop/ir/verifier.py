"""Structural verifier: SSA values are defined before use in an enclosing scope, regions end
in the right terminator, and every op's type rule still holds (re-run from the registry)."""
from __future__ import annotations

from ..errors import CompileError
from .registry import get
from .core import Block, Module

_TERMINATOR = {("if", 0): "yield", ("if", 1): "yield", ("loop", 0): "condition", ("loop", 1): "yield"}


def _check_block(block: Block, visible: set, seen: set) -> None:
    """`seen`: every value defined so far, nested regions included: one seen but out of scope
    escaped a region (the user's doing, through an object the tracer does not follow), one
    not seen yet is used before its definition (a pycoop bug)."""
    scope = set(visible) | set(block.args)
    seen.update(block.args)
    for i, op in enumerate(block.ops):
        for v in op.operands:
            if v not in scope and v not in seen:
                raise CompileError(f"internal: {op.name} uses a value before its definition", op.loc)
            if v not in scope:
                made = f" (made at line {v.op.loc.line})" if v.op is not None and v.op.loc else ""
                raise CompileError(
                    f"this uses a value computed inside a runtime loop or `if`{made} outside it",
                    op.loc, rule="a runtime loop or `if` hands on only the variables it assigns "
                                 "and the lists, dicts, namespaces and dataclasses it assigns into "
                                 "or passes to calls",
                    hint="the value left the body some other way (an attribute of another kind "
                         "of object, a global, a nonlocal of a function not defined in the "
                         "kernel): keep it in a variable, list, dict, types.SimpleNamespace or "
                         "dataclass of the kernel instead", rule_id="control.escaped-value")
        if op.name in ("yield", "condition", "return") and i != len(block.ops) - 1:
            raise CompileError(f"internal: {op.name} is not the last op of its block", op.loc)
        types = get(op.name).infer(op.operands, op.attrs, op.regions, op.loc)
        if list(types) != [r.type for r in op.results]:
            raise CompileError(f"internal: {op.name} result types {types} != recorded", op.loc)
        for k, r in enumerate(op.regions):
            _check_block(r, scope, seen)
            last = r.ops[-1].name if r.ops else None
            want = _TERMINATOR.get((op.name, k))
            if want and last not in (want, "return"):
                raise CompileError(f"internal: region {k} of {op.name} does not end in {want}", op.loc)
        scope.update(op.results)
        seen.update(op.results)


def verify(m: Module) -> None:
    """Raise CompileError if the module is malformed: a value used outside the runtime loop
    or `if` that computed it (the user's, reported as such), anything else a pycoop bug."""
    _check_block(m.kernel.body, set(m.kernel.params), set())
    for f in m.functions:
        _check_block(f.body, set(f.params), set())
        if not f.body.ops or f.body.ops[-1].name != "yield":
            raise CompileError(f"internal: function {f.name} does not end in yield", f.loc)
