"""Structured control flow ops: `if`, `loop`, and their terminators `yield`, `condition`,
`return`.

    if(cond) -> results       regions: then, else (each ends in yield or return)
    loop(inits) -> results    regions: cond(args) ends in condition(c);
                              body(args) ends in yield(next values)

The emulator runs both sides of a divergent `if` under masks and runs a loop until no
invocation is active; cooperative-matrix values may only flow through control flow that is
uniform across their scope (the emulator reports it otherwise).
"""
from __future__ import annotations

import numpy as np

from .. import knobs
from ..errors import CompileError
from ..types import CoopMatType, bool_
from ..ir.registry import define, emulation, lowering


def _infer_if(operands, attrs, regions, loc):
    if operands[0].type != bool_:
        raise CompileError(f"if condition must be bool, not {operands[0].type}", loc,
                           rule="SPIR-V: the Condition of OpBranchConditional must be a Boolean type "
                                "scalar", hint="compare to get a bool, e.g. `if x != 0:`",
                           rule_id="control.condition-bool")
    return list(attrs["result_types"])


def _infer_loop(operands, attrs, regions, loc):
    return [v.type for v in operands]


def _infer_none(operands, attrs, regions, loc):
    return []


define("if", _infer_if, doc="Structured selection with results merged from both branches.")
define("loop", _infer_loop, doc="Structured loop: cond region, body region, carried values.")
define("yield", _infer_none, doc="Ends a region, giving its results.")
define("condition", _infer_none, doc="Ends a loop's cond region: continue while true.")
define("return", _infer_none, doc="Early exit of the kernel for the active invocations.")


# --------------------------------------------------------------------------- emulator

def _merge(ctx, op, take_new, new, old, t):
    """Per-invocation merge of `new` (where take_new) and `old`; matrices need scope-uniform
    conditions."""
    if take_new is None:
        return new
    if isinstance(t, CoopMatType):
        sel = ctx.scope_uniform(take_new, t.scope, op, "a cooperative matrix is assigned under "
                                "control flow that is not uniform across its scope")
        return np.where(sel[..., None, None], new, old)
    if new.ndim > 2:
        take_new = take_new.reshape(take_new.shape + (1,) * (new.ndim - 2))
    return np.where(take_new, new, old)


@emulation("if")
def _emu_if(ctx, op, cond):
    then_blk, else_blk = op.regions
    mask = ctx.mask
    if cond.size == 1:                                   # uniform across the dispatch
        blk = then_blk if bool(cond.reshape(-1)[0]) else else_blk
        out = ctx.run_region(blk, [], mask)
        if out is None:
            return [None] * len(op.results)
        if ctx.poison:
            ctx.merge_poison(op.results, None, ctx.yielded, [None] * len(out))
        return out
    c = np.broadcast_to(cond, ctx.dispatch.shape)
    mt = c if mask is None else (mask & c)
    me = ~c if mask is None else (mask & ~c)
    t_out = ctx.run_region(then_blk, [], mt) if mt.any() else None
    t_vals = ctx.yielded
    e_out = ctx.run_region(else_blk, [], me) if me.any() else None
    e_vals = ctx.yielded
    if t_out is None or e_out is None:
        out, vals = (e_out, e_vals) if t_out is None else (t_out, t_vals)
        if out is None:
            return [None] * len(op.results)
        if ctx.poison:
            ctx.merge_poison(op.results, None, vals, [None] * len(out))
        return out
    if ctx.poison:
        ctx.merge_poison(op.results, c, t_vals, e_vals)
    return [_merge(ctx, op, c, t, e, r.type) for t, e, r in zip(t_out, e_out, op.results)]


@emulation("loop")
def _emu_loop(ctx, op, *inits):
    cond_blk, body_blk = op.regions
    vals = list(inits)
    active = ctx.mask
    if ctx.poison:                      # undefined lanes of the carried values follow them
        for blk in (cond_blk, body_blk):
            ctx.merge_poison(blk.args, None, op.operands, [None] * len(vals))
    limit, steps = knobs.emulator_max_iterations(), 0
    while True:
        if steps == limit:
            ctx.endless_loop(op, active, limit)
        steps += 1
        out = ctx.run_region(cond_blk, vals, active)
        if out is None:
            break
        c = out[0]
        if c.size == 1:
            if not bool(c.reshape(-1)[0]):
                break
            step_mask = active
        else:
            c = np.broadcast_to(c, ctx.dispatch.shape)
            step_mask = c if active is None else (active & c)
            if not step_mask.any():
                break
        new = ctx.run_region(body_blk, vals, step_mask)
        if new is None:          # every active invocation returned inside the body
            break
        # the body's values are computed for every invocation: those that left the loop
        # (outside step_mask, even where the condition came out uniform over the rest) keep
        # the values they left with
        if ctx.poison:
            for blk in (cond_blk, body_blk):
                ctx.merge_poison(blk.args, step_mask, ctx.yielded, list(body_blk.args))
        if step_mask is None:
            vals = new
        else:
            vals = [_merge(ctx, op, step_mask, n, o, r.type)
                    for n, o, r in zip(new, vals, op.results)]
            active = step_mask
        if ctx.dead is not None:
            active = ~ctx.dead if active is None else (active & ~ctx.dead)
    if ctx.poison:
        ctx.merge_poison(op.results, None, list(body_blk.args), [None] * len(vals))
    return vals


@emulation("return")
def _emu_return(ctx, op):
    ctx.kill(ctx.mask)
    return ()


# --------------------------------------------------------------------------- SPIR-V

@lowering("if")
def _lower_if(ctx, op):
    then_blk, else_blk = op.regions
    l_then, l_else, l_merge = ctx.new_label(), ctx.new_label(), ctx.new_label()
    ctx.emit("OpSelectionMerge", None, l_merge, "None")
    ctx.emit("OpBranchConditional", None, ctx.id(op.operands[0]), l_then, l_else)
    incoming = []
    for lbl, blk in ((l_then, then_blk), (l_else, else_blk)):
        ctx.begin_block(lbl)
        ids = ctx.lower_region(blk, [])
        if ids is not None:
            incoming.append((ids, ctx.current_label))
            ctx.emit("OpBranch", None, l_merge)
    ctx.begin_block(l_merge)
    if not incoming:
        ctx.emit("OpUnreachable", None)
        ctx.begin_block(ctx.new_label())     # dead continuation (no predecessors)
        return
    for i, r in enumerate(op.results):
        if len(incoming) == 1:
            ctx.set(r, incoming[0][0][i])
        else:
            pairs = [w for ids, lbl in incoming for w in (ids[i], lbl)]
            ctx.set(r, ctx.emit("OpPhi", r.type, *pairs))


@lowering("loop")
def _lower_loop(ctx, op):
    cond_blk, body_blk = op.regions
    pre = ctx.current_label
    l_header, l_cond, l_body, l_cont, l_merge = (ctx.new_label() for _ in range(5))
    ctx.emit("OpBranch", None, l_header)
    ctx.begin_block(l_header)
    phi_ids = [ctx.new_id() for _ in op.operands]
    phi_patch = []
    for pid, init, r in zip(phi_ids, op.operands, op.results):
        # the back-edge value is known only after the body is lowered: patched below
        phi_patch.append(ctx.emit_patchable("OpPhi", r.type, pid, ctx.id(init), pre))
    control = op.attrs.get("control", "None")     # pycoop.range(unroll=...)
    if isinstance(control, tuple) and ctx.b.version < (1, 4):
        raise CompileError(f"pycoop.range(unroll={control[1]}) needs SPIR-V 1.4 (LoopControl "
                           f"PartialCount); this module is SPIR-V {ctx.b.version[0]}.{ctx.b.version[1]}",
                           op.loc, hint="use unroll=True or unroll=False here",
                           rule="SPIR-V: LoopControl PartialCount needs SPIR-V 1.4",
                           rule_id="control.partial-count-version")
    ctx.emit("OpLoopMerge", None, l_merge, l_cont, *(control if isinstance(control, tuple) else (control,)))
    ctx.emit("OpBranch", None, l_cond)
    ctx.begin_block(l_cond)
    c = ctx.lower_region(cond_blk, phi_ids)
    ctx.emit("OpBranchConditional", None, c[0], l_body, l_merge)
    ctx.begin_block(l_body)
    nxt = ctx.lower_region(body_blk, phi_ids)
    if nxt is not None:
        ctx.emit("OpBranch", None, l_cont)
    ctx.begin_block(l_cont)
    for patch, v, pid in zip(phi_patch, nxt or phi_ids, phi_ids):
        patch(v, l_cont)
    ctx.emit("OpBranch", None, l_header)
    ctx.begin_block(l_merge)
    for r, pid in zip(op.results, phi_ids):
        ctx.set(r, pid)


@lowering("return")
def _lower_return(ctx, op):
    ctx.emit("OpReturn", None)
