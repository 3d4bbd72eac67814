"""An emulator fast path for the tiled-GEMM loop shape: `for k in range(lo, hi, step)` whose
body only loads tiles and feeds them into `mul_add` chains on float accumulators.

Such a loop computes acc + sum over k of A_k @ B_k. Instead of one round of ops per
iteration, the body runs once with the iteration as an extra leading axis:
- per-invocation values get shape (T, W, I);
- matrices get shape (T*W, S, rows, cols), T folded into the workgroup axis.
The products are then summed over the whole K range in one matrix product per chain.
When few distinct tiles were loaded, as in a GEMM, that is one BLAS call over every distinct
A row-sequence and B column-sequence.

The sums differ from the step-by-step loop only in float summation order, which
SPV_KHR_cooperative_matrix leaves to the implementation. Anything outside the pattern, or any
undefined behaviour found on the way, falls back to the ordinary loop, which then reports it
precisely. Nothing in the fused body writes memory, so the fallback repeats no side effects.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from ...errors import EmulatorError
from ...ir.core import Block, Op, Value
from ...ir.registry import get
from ...ops.khr import check_addressing
from ...ops.khr_layout import matrix_layout
from ...types import BufferType, CoopMatType, Scope
from ..lazy import LazyBlocks, Product, as_blocks, materialized, strided

# Ops the fused body may contain besides pure ops and the mul_add chains: loads of buffers.
_LOADS = ("khr.load", "load")
_MAX_ELEMENTS = 1 << 22          # per-chunk size of the (T, W, I) scalar arrays


class _Abort(Exception):
    """The fused evaluation cannot continue; run the ordinary loop instead."""


@dataclass
class _Plan:
    bound: Value                     # loop-invariant upper bound (cond: iv < bound)
    step: Value                      # loop-invariant step (body: iv + step)
    chains: list[list[Op]]           # per accumulator: its mul_adds, first to last
    body_ops: list[Op]               # the other ops of the body, in order
    factored: set                    # loads only feeding mul_adds: kept as distinct blocks
    outer: frozenset                 # values from outside the body its ops read (not buffers)


@dataclass
class _Factored:
    """A loaded matrix kept as the load's arguments (bounds already checked). Operands are read
    as windows of memory where possible, else from the load's distinct blocks."""
    memory: object
    ctx: object
    op: Op
    offs: np.ndarray
    stride: np.ndarray
    active: np.ndarray | None
    key: tuple | None = None                     # memo key when offsets and stride are invariant
    wide: dict = field(default_factory=dict)     # converted blocks and operands, by key

    def blocks(self, dtype) -> tuple[np.ndarray, np.ndarray]:
        """(the distinct blocks converted to `dtype`, index per instance)."""
        if "set" not in self.wide:
            self.wide["set"] = self.memory.block_set(self.ctx, self.op, self.offs, self.stride,
                                                     _layout(self.op), self.active,
                                                     self.op.result.type)
        blocks, index = self.wide["set"]
        if dtype not in self.wide:
            self.wide[dtype] = np.asarray(blocks, dtype)
        return self.wide[dtype], index


def _layout(load: Op):
    return matrix_layout(load.result.type, load.attrs["layout"])


_PLANS: "weakref.WeakKeyDictionary[Op, _Plan | None]" = weakref.WeakKeyDictionary()


def _defined_in(block: Block) -> set:
    out = set(block.args)
    for op in block.ops:
        out.update(op.results)
    return out


def _analyse(op: Op) -> _Plan | None:
    cond, body = op.regions
    if not op.operands or len(cond.ops) < 2:
        return None
    cmp, term = cond.ops[-2], cond.ops[-1]
    inside_cond = _defined_in(cond)
    if term.name != "condition" or term.operands[0] is not cmp.result or cmp.name != "compare" \
            or cmp.attrs["kind"] != "lt" or cmp.operands[0] is not cond.args[0] \
            or cmp.operands[1] in inside_cond or any(o.name != "const" for o in cond.ops[:-2]):
        return None
    y = body.ops[-1] if body.ops else None
    if y is None or y.name != "yield":
        return None
    inside = _defined_in(body)
    nxt = y.operands[0].op
    if nxt is None or nxt.name != "binary" or nxt.attrs["kind"] != "add" \
            or nxt.operands[0] is not body.args[0] or nxt.operands[1] in inside:
        return None
    uses: dict = {}
    for o in body.ops:
        for v in o.operands:
            uses[v] = uses.get(v, 0) + 1
    chains, chained = [], set()
    for j, v in enumerate(y.operands[1:], 1):
        chain = []
        while v is not body.args[j]:
            d = v.op
            if d is None or d.name != "khr.mul_add" or v not in inside or d.attrs["saturating"] \
                    or uses.get(v, 0) != 1 or not d.result.type.component.is_float \
                    or d.result.type.component.bits < 32:
                return None
            chain.append(d)
            v = d.operands[2]
        if uses.get(body.args[j], 0) != 1 or not chain:
            return None
        chains.append(chain[::-1])
        chained.update(chain)
    # the values that depend on the accumulators are exactly the chain results
    tainted = set(body.args[1:])
    others = []
    for o in body.ops[:-1]:
        if o in chained or o is nxt:
            continue
        if not (get(o.name).pure or o.name in _LOADS) or any(v in tainted for v in o.operands):
            return None
        if o.name in _LOADS and not isinstance(o.operands[0].type, BufferType):
            return None
        others.append(o)
    for c in chains:
        for m in c:
            if m.operands[0] in tainted or m.operands[1] in tainted:
                return None
            tainted.update(m.results)
    feeds = {v for c in chains for m in c for v in m.operands[:2]}
    factored = {o for o in others if o.name == "khr.load" and o.result in feeds
                and o.operands[0].type.elem.size == o.result.type.component.size
                and uses.get(o.result) == sum(v is o.result for c in chains for m in c
                                              for v in m.operands[:2])}
    body_ops = others + [nxt]
    outer = frozenset(v for o in body_ops for v in o.operands
                      if v not in inside and not isinstance(v.type, BufferType))
    return _Plan(cmp.operands[1], nxt.operands[1], chains, body_ops, factored, outer)


def plan(op: Op) -> _Plan | None:
    if op not in _PLANS:
        _PLANS[op] = _analyse(op)
    return _PLANS[op]


class _FusedDispatch:
    """The dispatch seen by matrix ops in the fused body: T copies of the workgroups."""

    def __init__(self, parent, t: int, compressed: bool):
        self.parent, self.t, self.compressed = parent, t, compressed
        self.sgs, self.wgs, self.nsg = parent.sgs, parent.wgs, parent.nsg
        self.nwg = parent.nwg * t
        self.grid = parent.grid

    def instance_shape(self, scope: Scope) -> tuple[int, int]:
        w, s = self.parent.instance_shape(scope)
        return (w * self.t, s)

    def scope_invocations(self, scope: Scope) -> int:
        return self.parent.scope_invocations(scope)

    def builtin(self, name: str, comp: int) -> np.ndarray:
        if self.compressed and name == "subgroup_id":
            return np.arange(self.parent.nsg, dtype=np.uint32)[None, :]
        return self.parent.builtin(name, comp)


# Built-ins whose value is the same for every invocation of a subgroup.
_UNIFORM_BUILTINS = {"workgroup_id", "num_workgroups", "subgroup_id", "subgroup_size",
                     "num_subgroups"}


def _compressible(ctx, p: _Plan, body: Block) -> bool:
    """Whether the body can run with one lane per subgroup: no divergence, no lane-dependent
    built-ins, and every per-invocation value it reads from outside is subgroup-uniform."""
    d = ctx.dispatch
    if ctx.mask is not None or d.wgs % d.sgs or d.wgs == 1:
        return False
    inside = _defined_in(body)
    for o in p.body_ops:
        if o.name == "builtin" and o.attrs["name"] not in _UNIFORM_BUILTINS:
            return False
        for v in o.operands:
            if v in inside:
                continue
            x = ctx.env[v]
            if not isinstance(x, np.ndarray):
                return False
            if x.ndim == 2 and x.shape[1] == d.wgs:
                lanes = x.reshape(x.shape[0], d.nsg, d.sgs)
                if not (lanes == lanes[..., :1]).all():
                    return False
            elif x.ndim != 2 and not isinstance(v.type, CoopMatType):
                return False
    return True


class _FusedCtx:
    """EmuCtx stand-in for the fused body (only what its ops use)."""

    def __init__(self, ctx, t: int, compressed: bool):
        self.parent, self.t, self.compressed = ctx, t, compressed
        self.env = _ChainEnv(ctx.env, ctx.dispatch if compressed else None)
        self.dispatch = _FusedDispatch(ctx.dispatch, t, compressed)
        self.mask, self.memories = ctx.mask, ctx.memories
        self.remember_blocks = ctx.remember_blocks
        self.memory_of = ctx.memory_of
        self._wg_name = ctx._wg_name

    def check_ub(self, bad, op, message, rule_id=None, hint=None):
        if np.asarray(bad).any():
            raise _Abort

    def check_instances(self, bad, active, op, message, rule=None, hint=None, rule_id=None):
        if np.asarray(bad).any():
            raise _Abort

    def scope_active(self, scope, op):
        active = self.parent.scope_active(scope, op)
        return None if active is None else np.tile(active, (self.t, 1))

    def scope_uniform_value(self, x, scope, op, what):
        """Per-instance values, shape (T*W | 1, S | 1), like EmuCtx's over the iteration axis too."""
        d = self.parent.dispatch
        if self.compressed:                           # one lane per subgroup already
            v = x
            if scope != Scope.Subgroup:
                if not (x == x[..., :1]).all():
                    raise _Abort
                v = x[..., :1]
        elif x.ndim == 2:                             # no iteration axis
            v = self.parent.scope_uniform_value(x, scope, op, what)
        elif x.shape[2] == 1:
            v = x[:, :, 0][..., None]                 # (T, W | 1, 1)
        else:
            lanes = d.sgs if scope == Scope.Subgroup else d.wgs
            x4 = x.reshape(x.shape[0], x.shape[1], d.wgs // lanes, lanes)
            v = x4[..., 0]
            same = x4 == v[..., None]
            if self.parent.mask is not None:
                m = self.parent.mask
                same = same | ~m.reshape(1, m.shape[0], d.wgs // lanes, lanes)
            if not same.all():
                raise _Abort
        if v.ndim == 2:                               # the same for every iteration
            return v if v.shape[0] == 1 else np.tile(v, (self.t, 1))
        v = np.broadcast_to(v, (self.t, d.nwg, v.shape[2]))
        return v.reshape(self.t * d.nwg, v.shape[2])


class _ChainEnv(dict):
    """Values of the fused body; outer values are read from the enclosing environment (one
    lane per subgroup when the body runs compressed)."""

    def __init__(self, outer: dict, compress_from=None):
        super().__init__()
        self.outer, self.dispatch = outer, compress_from

    def __missing__(self, key):
        x = self.outer[key]
        d = self.dispatch
        if d is not None and isinstance(x, np.ndarray) and x.ndim == 2 and x.shape[1] == d.wgs:
            x = x.reshape(x.shape[0], d.nsg, d.sgs)[..., 0]
        self[key] = x
        return x


def run(ctx, op: Op, inits: list) -> list | None:
    """The loop's results by fused evaluation, or None to run it the ordinary way."""
    p = plan(op)
    if p is None or ctx.mask is not None and not ctx.mask.any():
        return None
    iv0, step, bound = inits[0], ctx.env[p.step], ctx.env[p.bound]
    if iv0.size != 1 or step.size != 1 or bound.size != 1:
        return None
    start, stride, stop = (int(np.asarray(v).reshape(-1)[0]) for v in (iv0, step, bound))
    ivs = np.arange(start, stop, stride, dtype=np.int64) if stride > 0 else np.zeros(0, np.int64)
    if len(ivs) < 2:
        return None
    body = op.regions[1]
    accs = list(inits[1:])
    # the iterations are invariant in the launch (emulator.memo) when the loop's range is
    keep = (ctx.memo is not None and ctx.mask is None and not ctx.poison
            and all(v in ctx.invariant for v in (op.operands[0], p.step, p.bound)))
    if keep and p.outer <= ctx.invariant:
        compressed = ctx.memo.get_or((op, "compressed"), lambda: _compressible(ctx, p, body))
    else:
        compressed = _compressible(ctx, p, body)
    per_iter = ctx.dispatch.nwg * (ctx.dispatch.nsg if compressed else ctx.dispatch.wgs)
    chunk = max(1, _MAX_ELEMENTS // per_iter)
    try:
        with np.errstate(all="ignore"):
            for c0 in range(0, len(ivs), chunk):
                part = ivs[c0:c0 + chunk]
                accs = _run_chunk(ctx, p, body, part.astype(iv0.dtype).reshape(-1, 1, 1), accs,
                                  compressed, (op, c0) if keep else None)
    except (_Abort, EmulatorError):
        return None
    final = np.asarray(start + len(ivs) * stride).astype(iv0.dtype).reshape(1, 1)
    return [final, *accs]


def _run_chunk(ctx, p: _Plan, body: Block, iv: np.ndarray, accs: list, compressed: bool,
               key: tuple | None) -> list:
    """One chunk of iterations. `key`: (loop, first iteration) when the iterations are
    invariant in the launch; values computed from them alone are then kept (emulator.memo)."""
    t = iv.shape[0]
    sub = _FusedCtx(ctx, t, compressed)
    sub.env[body.args[0]] = iv
    inv = {body.args[0]} if key is not None else set()
    for o in p.body_ops[:-1]:
        if o.name in _LOADS and ctx.memory_of(o.operands[0]).checks_races():
            raise _Abort        # its race checks see one invocation per element: not T copies
        addr = o.operands[1:] if o in p.factored else o.operands    # a load: not its buffer
        k = (key, o) if inv and all(v in inv or v in ctx.invariant for v in addr) else None
        if o in p.factored:
            sub.env[o.result] = _factored_load(ctx, sub, o, k)
        elif k is not None and get(o.name).pure:
            sub.env[o.result] = ctx.memo.get_or(k, lambda: get(o.name).emulate(
                sub, o, *[sub.env[v] for v in o.operands]))
            inv.add(o.result)
        else:
            sub.env[o.result] = get(o.name).emulate(sub, o, *[sub.env[v] for v in o.operands])
    merged = _merged_products(ctx, sub, p, t)
    new = []
    for acc, chain in zip(accs, p.chains):
        ctx.scope_active(chain[0].operands[0].type.scope, chain[0])   # reports partial activity
        r: CoopMatType = chain[-1].result.type
        wide = _wide(r)
        inst = ctx.dispatch.instance_shape(r.scope)
        total = None                               # a fresh array: summed in place
        for m in chain:
            prod = merged.get(m)
            if prod is None:
                prod = _product(ctx, sub.env[m.operands[0]], sub.env[m.operands[1]], t, inst, wide)
            if total is None:
                total = prod
            else:
                total = materialized(total)
                np.add(total, materialized(prod), out=total)
        acc = materialized(acc)                    # the result of an earlier chunk
        if _nonzero(acc):                          # often a fill with zero
            total = materialized(total)
            total += acc
        if isinstance(total, LazyBlocks) and total.dtype == r.component.dtype:
            new.append(total)                      # copied out by its consumer
        else:
            new.append(materialized(total).astype(r.component.dtype, copy=False))
    return new


def _nonzero(x: np.ndarray) -> bool:
    """x.any(), looking once at each element of a broadcast (a fill) rather than at every copy."""
    return bool(x[tuple(0 if s == 0 else slice(None) for s in x.strides)].any())


def _wide(t: CoopMatType):
    """The type products are summed in: f64 for f64 accumulators, else f32."""
    return np.float64 if t.component.bits == 64 else np.float32


def _merged_products(ctx, sub, p: _Plan, t: int) -> dict:
    """The products of every mul_add whose A and B operands are windows of memory, as one
    matrix product per group sharing an A array and a B array (the tiles of a GEMM together
    cover each operand once): {mul_add: product}."""
    groups: dict = {}
    for m in (m for chain in p.chains for m in chain):
        a, b = sub.env[m.operands[0]], sub.env[m.operands[1]]
        if not (isinstance(a, _Factored) and isinstance(b, _Factored)):
            continue
        inst = ctx.dispatch.instance_shape(m.result.type.scope)
        wa, wb = _window(a, t, inst, "A"), _window(b, t, inst, "B")
        if wa is not None and wb is not None:
            groups.setdefault((wa.source, wb.source, _wide(m.result.type), inst), []).append(
                (m, wa, wb))
    out = {}
    for (_, _, wide, inst), members in groups.items():
        keys = tuple((wa.key, wb.key) for _, wa, wb in members)
        key = ("products", keys) if all(None not in k for k in keys) else None
        found = (_product_grid(members, inst) if key is None      # else kept (emulator.memo)
                 else ctx.memo.get_or(key, lambda: _product_grid(members, inst)))
        if found is None:
            continue
        (ua, ub), blocks = found
        wa0, wb0 = members[0][1], members[0][2]
        grid = Product(wa0.read(ua, wide), wb0.read(ub, wide))
        for (m, _, _), (ia, ib) in zip(members, blocks):
            out[m] = LazyBlocks(grid, wa0.rows, wb0.cols, ia, ib, inst,
                                None if key is None else (key, m))
    return out


def _product_grid(members: list, inst: tuple[int, int]):
    """The distinct A and B window starts of a group of products, and each product's blocks
    in their grid product: ((ua, ub), [(ia, ib)]), or None when the grid would mostly compute
    unused blocks."""
    ua = np.unique(np.concatenate([wa.bases for _, wa, _ in members]))
    ub = np.unique(np.concatenate([wb.bases for _, _, wb in members]))
    if len(ua) * len(ub) > 2 * len(members) * inst[0] * inst[1]:
        return None
    return (ua, ub), [(np.searchsorted(ua, wa.bases)[wa.which],
                       np.searchsorted(ub, wb.bases)[wb.which]) for _, wa, wb in members]


def _factored_load(ctx, sub, o: Op, key: tuple | None) -> _Factored:
    """The load kept as its checked arguments. With `key` (its offset and stride invariant in
    the launch) the checked arguments are kept across launches (emulator.memo)."""
    mem = ctx.memory_of(o.operands[0])

    def checked():
        t: CoopMatType = o.result.type
        offs = sub.scope_uniform_value(sub.env[o.operands[1]], t.scope, o, "the load offset")
        strd = sub.scope_uniform_value(sub.env[o.operands[2]], t.scope, o, "the load stride")
        active = sub.scope_active(t.scope, o)
        check_addressing(sub, o, t, o.attrs["layout"], o.operands[0].type.elem.size, offs, strd,
                         active, "cooperative matrix load")
        offs = mem.check_block(sub, o, t, offs, strd, _layout(o), active,
                               "cooperative matrix load")
        return offs, np.asarray(strd), active

    if key is None:
        return _Factored(mem, sub, o, *checked())
    return _Factored(mem, sub, o, *ctx.memo.get_or(key, checked), key=key)


@dataclass
class _Window:
    """A loaded operand whose blocks over the T iterations are adjacent along K (A: side by
    side; B: one below the other), as in a GEMM walking its operands: each instance reads one
    K-long window of memory, starting at one of `bases`."""
    data: np.ndarray
    source: tuple                    # array, element steps, use, block shape: equal sources read alike
    rows: int                        # of one block: M for A, K for B
    cols: int                        # of one block: K for A, N for B
    t: int
    bases: np.ndarray                # distinct window starts (elements), sorted
    which: np.ndarray                # the window of each instance
    key: tuple | None = None         # the load's memo key when invariant in the launch

    def read(self, bases: np.ndarray, wide) -> np.ndarray:
        """The windows at `bases` converted to `wide`: A (n*M, T*K) stacked, B (T*K, n*N) side
        by side. One strided view when evenly spaced, else a gather."""
        _, _, si, sj, use, _, _ = self.source
        data, isz, n = self.data, self.data.itemsize, len(bases)
        rows, cols = (self.rows, self.t * self.cols) if use == "A" else (self.t * self.rows, self.cols)
        d = int(bases[1] - bases[0]) if n > 1 else 1
        even = n == 1 or (np.diff(bases) == d).all()
        ext = (rows - 1) * si + (cols - 1) * sj          # bounds: checked block by block
        src, count, el = (data[int(bases[0]):], n, d * isz) if even else (data, data.shape[0] - ext, isz)
        if use == "A":
            win = strided(src, (count, rows, cols), (el, si * isz, sj * isz), writeable=False)
            return np.asarray(win if even else win[bases], wide).reshape(n * rows, cols)
        win = strided(src, (rows, count, cols), (si * isz, el, sj * isz), writeable=False)
        return np.asarray(win if even else win[:, bases], wide).reshape(rows, n * cols)


def _window(x: _Factored, t: int, inst: tuple[int, int], use: str) -> _Window | None:
    """`x` as windows of memory for use A or B, or None when its blocks are not adjacent."""
    key = ("window", t, inst, use)
    if key not in x.wide:
        found = (_find_window(x, t, inst, use) if x.key is None     # else kept (emulator.memo)
                 else x.ctx.parent.memo.get_or((x.key, key), lambda: _find_window(x, t, inst, use)))
        if found is None:
            x.wide[key] = None
        else:
            dt, _, _, _, r, c = found.source
            x.wide[key] = _Window(x.memory.data.view(dt), (id(x.memory),) + found.source, r, c, t,
                                  found.bases, found.which, x.key)
    return x.wide[key]


@dataclass
class _WindowShape:
    """What a window is besides its memory: the same in every launch of a configuration."""
    source: tuple                    # dtype, element steps, use, block shape
    bases: np.ndarray
    which: np.ndarray


def _find_window(x: _Factored, t: int, inst: tuple[int, int], use: str) -> _WindowShape | None:
    st = x.stride.reshape(-1)
    if x.active is not None or not (st == st[0]).all():
        return None
    mt: CoopMatType = x.op.result.type
    r, c, s = mt.rows, mt.cols, int(st[0])
    si, sj = _layout(x.op).element_steps(s)                               # element (i, j)
    step = c * sj if use == "A" else r * si                               # the next block
    o = np.broadcast_to(_by_iteration(x.offs, t, inst[0]), (t,) + inst).reshape(t, -1)
    if not (o == o[:1] + step * np.arange(t)[:, None]).all():
        return None
    bases, which = np.unique(o[0], return_inverse=True)
    return _WindowShape((mt.component.dtype, si, sj, use, r, c), bases, which)


def _concatenated(ctx, x, wide, t: int, inst: tuple[int, int], use: str):
    """The K-concatenated operand over the T iterations for each distinct sequence of blocks
    (A: (n*M, T*K), sequences stacked; B: (T*K, n*N), side by side), which sequence each
    instance uses, and M or N. Cached on the loaded value: one A tile feeds several
    accumulators."""
    if not isinstance(x, _Factored):
        return _gathered(ctx, x, wide, t, inst, use)
    key = (wide, t, inst, use)
    if key not in x.wide:
        w = _window(x, t, inst, use)
        x.wide[key] = ((w.read(w.bases, wide), w.which, w.rows if use == "A" else w.cols)
                       if w is not None else _gathered(ctx, x, wide, t, inst, use))
    return x.wide[key]


def _blocks(ctx, x, wide) -> tuple[np.ndarray, np.ndarray] | None:
    if isinstance(x, _Factored):
        return x.blocks(wide)
    return ctx.distinct_blocks(x, wide)


def _gathered(ctx, x, wide, t: int, inst: tuple[int, int], use: str):
    """The K-concatenated operands gathered from the distinct blocks of the loaded value."""
    found = _blocks(ctx, x, wide)
    if found is None:
        return None
    blocks, index = found
    seqs, which = _sequences(index, t, inst)
    n, (r, c) = len(seqs), blocks.shape[1:]
    if use == "A":                                       # (n*M, T*K)
        return np.moveaxis(blocks[seqs], 1, 2).reshape(n * r, t * c), which, r
    return np.transpose(blocks[seqs], (1, 2, 0, 3)).reshape(t * r, n * c), which, c   # (T*K, n*N)


def _by_iteration(x: np.ndarray, t: int, nwg: int) -> np.ndarray:
    """(T*W, ...) -> (T, W, ...); a value from outside the loop (W or 1 rows) gets a
    broadcast iteration axis."""
    if t > 1 and x.shape[0] == t * nwg:
        return x.reshape((t, nwg) + x.shape[1:])
    return x[None]


def _sequences(index: np.ndarray, t: int, inst: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct per-instance sequences of block indices over the T iterations:
    (sequences (n, T), which sequence each of the W*S instances uses)."""
    idx = _by_iteration(index, t, inst[0])
    rows = np.ascontiguousarray(np.broadcast_to(idx, (t,) + inst).reshape(t, -1).T, dtype=np.int64)
    keys = rows.view(np.dtype((np.void, 8 * t))).reshape(-1)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return rows[first], inverse.reshape(-1)


def _product(ctx, a: np.ndarray, b: np.ndarray, t: int, inst: tuple[int, int], wide) -> np.ndarray:
    """sum over t of a_t @ b_t per instance, shape inst + (M, N): the whole K range at once."""
    fa, fb = _concatenated(ctx, a, wide, t, inst, "A"), _concatenated(ctx, b, wide, t, inst, "B")
    if fa is not None and fb is not None:
        (acat, ra, m), (bcat, rb, n) = fa, fb            # (nA*M, T*K) and (T*K, nB*N)
        na, nb, tk = acat.shape[0] // m, bcat.shape[1] // n, acat.shape[1]
        if na * nb <= 2 * inst[0] * inst[1]:
            blocks = as_blocks(acat @ bcat, m, n)
            return blocks[ra.reshape(-1), rb.reshape(-1)].reshape(inst + (m, n))
        return np.matmul(acat.reshape(na, m, tk)[ra.reshape(-1)],
                         bcat.reshape(tk, nb, n).transpose(1, 0, 2)[rb.reshape(-1)]
                         ).reshape(inst + (m, n))
    A, B = (np.take(*x.blocks(wide), axis=0) if isinstance(x, _Factored) else x for x in (a, b))
    A, B = ctx.widened(A, wide), ctx.widened(B, wide)
    A = np.broadcast_to(_by_iteration(A, t, inst[0]), (t,) + inst + A.shape[2:])
    B = np.broadcast_to(_by_iteration(B, t, inst[0]), (t,) + inst + B.shape[2:])
    m, k, n = A.shape[-2], A.shape[-1], B.shape[-1]
    acat = np.moveaxis(A, 0, -2).reshape(inst + (m, t * k))
    bcat = np.moveaxis(B, 0, 2).reshape(inst + (t * k, n))
    return np.matmul(acat, bcat)
