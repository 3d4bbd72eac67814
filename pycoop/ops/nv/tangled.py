"""The functions SPV_NV_cooperative_matrix2 calls per element (DecodeFunc, CombineFunc, the
per-element Func; DecodeVectorFunc is invoked in DecodeFunc's place) may hold no tangled
instruction: the implementation calls them an unspecified number of times, from an
unspecified subset of invocations, so nothing in them may need other invocations to take part.

Tangled here: ops whose registry entry says ``tangled=True`` (barriers, Intel block IO) and
every op taking or giving a cooperative matrix (SPV_KHR_cooperative_matrix: "instructions whose
operands are cooperative matrix objects are considered tangled"; the NV coopmat2 ops are listed
as tangled by their spec). Structured control flow is not itself tangled: its body is walked.
"""
from __future__ import annotations

from ...errors import CompileError, Loc
from ...ir.core import Function, Op, walk_block
from ...types import CoopMatType
from ...ir.registry import get

RULE = ("SPV_NV_cooperative_matrix2: in any function used as a DecodeFunc, per-element Func or "
        "CombineFunc, and any function called by it, tangled instructions are not allowed")
_CONTROL = frozenset({"if", "loop", "yield", "condition", "return"})


def is_tangled(op: Op) -> bool:
    if op.name in _CONTROL:
        return False
    if get(op.name).tangled:
        return True
    return any(isinstance(v.type, CoopMatType) for v in (*op.operands, *op.results))


def check_untangled(fn: Function, role: str, loc: Loc) -> None:
    """CompileError at the first tangled op of `fn` (the user's line inside the function)."""
    for op in walk_block(fn.body):
        if is_tangled(op):
            what = "pycoop.barrier()" if op.name == "barrier" else op.name
            raise CompileError(f"the {role} uses {what}, a tangled instruction; the function is "
                               "called per element, by an unspecified set of invocations",
                               op.loc if op.loc else loc,
                               rule=RULE,
                               hint="do cooperative and subgroup-wide work (barriers, matrix ops, "
                                    "block IO) in the kernel, and pass its results in as "
                                    "per-element operands",
                               rule_id="nv.tangled-in-callback")
