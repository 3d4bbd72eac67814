"""An emulator fast path for runs of cooperative-matrix stores: a tiled GEMM stores its
accumulator tiles one after another after its K loop. When the stored matrices are lazy
blocks of one matrix product (emulator.lazy) and together tile a rectangle of it placed as
it is, the whole run is one strided copy instead of one scatter per tile.

Every check of the single store (khr.store's emulation) is made for the run as a whole first;
a run that fails any of them is done store by store, so the first failing store reports
itself exactly as it would alone.
"""
from __future__ import annotations

import numpy as np

from ...ir.registry import get
from ...ops.khr import component_memory, row_alignment
from ...ops.khr_layout import matrix_layout
from ...types import CoopMatType
from ..lazy import LazyBlocks, block_copy


def run(ctx, ops: list, i: int) -> int:
    """Row-major stores of lazy blocks of one matrix product into one buffer (a tiled GEMM's
    accumulators after its K loop), apart from each other only by ops that touch no memory,
    done as one copy when together they tile a rectangle of the product placed as it is.
    The number of ops done (the stores and the ops between them, run first), or 0."""
    first = ops[i]
    lazy = ctx.env.get(first.operands[2])
    if not isinstance(lazy, LazyBlocks) or ctx.poison:
        return 0
    stores, end = [], i
    for j in range(i, len(ops)):
        op = ops[j]
        if op.name == "khr.store":
            v = ctx.env.get(op.operands[2])
            if (not isinstance(v, LazyBlocks) or v.product is not lazy.product
                    or op.operands[0] is not first.operands[0]
                    or op.attrs["layout"] != "RowMajorKHR"):
                break
            stores.append(op)
            end = j + 1
        elif not get(op.name).pure or op.regions:
            break
    if len(stores) < 2:
        return 0
    for op in ops[i:end]:
        if op.name != "khr.store":
            ctx.execute(op)
    blocks = [ctx.env[op.operands[2]] for op in stores]
    key = None                            # kept across launches when invariant (emulator.memo)
    if (ctx.memo is not None and ctx.mask is None and all(b.key is not None for b in blocks)
            and all(v in ctx.invariant for op in stores for v in (op.operands[1], op.operands[3]))):
        key = ("stores", tuple(stores), tuple(b.key for b in blocks))

    def plan():
        found = _checked_stores(ctx, stores)
        return None if found is None else block_copy(found[1], found[2], found[0].data.dtype)

    copy = plan() if key is None else ctx.memo.get_or(key, plan)
    if copy is None:
        for op in stores:                 # one at a time: each check reports its own store
            ctx.execute(op)
    else:
        copy.apply(component_memory(ctx, first.operands[0], first.operands[2].type)[0].data,
                   lazy.product)
    return end - i


def _checked_stores(ctx, stores: list):
    """(memory, [(blocks, block starts)], stride) for stores that pass every check of
    _store_target and check_block together: all invocations active, one stride (> 0) for
    all, offsets uniform in each scope instance, every block in bounds. None otherwise (the
    stores then run one by one and the first failing check names its store)."""
    first = stores[0]
    t: CoopMatType = first.operands[2].type
    mem, k = component_memory(ctx, first.operands[0], t)
    strd = {s.flat[0] if s.size == 1 else None for s in (ctx.env[op.operands[3]] for op in stores)}
    if ctx.mask is not None or mem.tracks_writes or len(strd) != 1 or None in strd:
        return None
    stride = int(strd.pop()) * k
    if stride <= 0:
        return None
    d = ctx.dispatch
    inst = d.instance_shape(t.scope)
    offs = np.stack([np.broadcast_to(o, d.shape) if o.shape != d.shape else o
                     for o in (ctx.env[op.operands[1]] for op in stores)])
    x3 = offs.reshape(len(stores), d.nwg, inst[1], d.wgs // inst[1])
    if not (x3 == x3[..., :1]).all():
        return None
    size, align = first.operands[0].type.elem.size, row_alignment(t, "RowMajorKHR")
    if (stride // k * size) % align or ((x3[..., 0].astype(np.int64) * size) % align).any():
        return None
    blocks = x3[..., 0].astype(np.int64) * k                       # (stores, W, S)
    ext = int(matrix_layout(t, "RowMajorKHR").extent(stride))
    if blocks.min() < 0 or blocks.max() + ext >= (mem.segment or mem.length):
        return None
    return mem, [(ctx.env[op.operands[2]], b) for op, b in zip(stores, blocks)], stride
