"""Memories the emulator reads and writes: kernel buffers (the user's NumPy arrays, updated in
place) and workgroup-shared arrays (one segment per workgroup, with race detection between
barriers). Every access is bounds-checked for the active invocations; an out-of-bounds access
raises EmulatorError naming the kernel line instead of touching memory.
"""
from __future__ import annotations

import copy

import numpy as np

from ..errors import EmulatorError
from ..types import CoopMatType, ScalarType, StructType, VectorType
from .lazy import LazyBlocks, store_blocks, strided


def _windows(data: np.ndarray, lay, stride: int, writeable: bool):
    """Every block of `data` with a uniform stride, as a view indexed by its first element."""
    isz = data.itemsize
    ext = int(lay.extent(stride))
    sr, sc = lay.element_steps(stride)
    return strided(data, shape=(max(data.shape[0] - ext, 0), lay.rows, lay.cols),
                   strides=(isz, sr * isz, sc * isz), writeable=writeable)


def _lattice(lay, starts: np.ndarray, stride: int):
    """Blocks at `starts` as distinct cells of one lattice over the array seen `stride` wide,
    none wrapping a row and the cells at least a block apart: a cheap proof that they share no
    element. Returns (cell row, cell column) per block and the lattice pitch, or None."""
    h, w = lay.span
    y, x = np.divmod(starts.reshape(-1), stride)
    if y.size == 0 or stride < w or (x + w > stride).any():
        return None
    y, x = y - y.min(), x - x.min()
    py, px = int(np.gcd.reduce(y)) or h, int(np.gcd.reduce(x)) or w
    if py < h or px < w:
        return None
    cy, cx = y // py, x // px
    if np.bincount(cy * (int(cx.max()) + 1) + cx).max() > 1:     # two blocks in one cell
        return None
    return cy, cx, py, px


def _store_tiled(data: np.ndarray, lay, starts: np.ndarray, stride: int,
                 vals: np.ndarray, cells) -> bool:
    """Store blocks that fill every cell of their lattice as one strided copy, row after row
    (block by block is several times slower on memory not in cache). False if cells are empty."""
    cy, cx, py, px = cells
    ny, nx = int(cy.max()) + 1, int(cx.max()) + 1
    if ny * nx != cy.size:
        return False
    blocks = lay.in_memory_order(vals)
    h, w = blocks.shape[-2:]
    cells = np.empty((ny * nx, h, w), data.dtype)      # the blocks in lattice order
    cells[cy * nx + cx] = blocks
    isz = data.itemsize
    region = strided(data[int(starts.min()):], (ny, h, nx, w),
                     (py * stride * isz, stride * isz, px * isz, isz), writeable=True)
    region[...] = cells.reshape(ny, nx, h, w).transpose(0, 2, 1, 3)
    return True


def check_write_race(op, index: np.ndarray, values: np.ndarray, what: str) -> None:
    """One store writing a location more than once with different values: the order of those
    writes is unspecified (the GPU may keep any of them), so the result is a race."""
    if index.size < 2 or (np.diff(index) > 0).all():
        return                                    # increasing: every location written once
    order = np.argsort(index, kind="stable")
    si = index[order]
    if not (si[1:] == si[:-1]).any():
        return
    sv = values[order]
    bits = np.ascontiguousarray(sv).view(np.uint8).reshape(len(sv), -1)   # an element's bytes
    clash = (si[1:] == si[:-1]) & (bits[1:] != bits[:-1]).any(axis=1)
    if clash.any():
        k = int(np.argmax(clash))
        raise EmulatorError(
            f"{what} writes element {int(si[k])} more than once with different values "
            f"({sv[k]!r} and {sv[k + 1]!r}); which write lands is unspecified", op.loc,
            rule="reported by the pycoop emulator: overlapping writes of one store race",
            hint="make distinct invocations (and matrix elements) write distinct locations",
            rule_id="emulator.store-overlap")


def _at(values: np.ndarray, shape: tuple, w: int, i: int) -> int:
    """The value of invocation `i` of workgroup `w` in per-invocation `values` (broadcast)."""
    return int(np.ravel(np.broadcast_to(values, np.broadcast_shapes(values.shape, shape))[w, i])[0])


class EpochReaders:
    """Per element, the smallest and largest reader id in the current barrier epoch, kept as
    keys that order by epoch first (max of epoch * R + id, min of -epoch * R + id, ids shifted
    by `shift` to 0 <= id < R): a newer epoch's reads win both, so nothing is reset at a
    barrier."""

    def __init__(self, length: int, ids: int, shift: int = 0):
        self.shift, self.R = shift, ids + shift + 1
        self.max_key = np.full(length, -(1 << 62), np.int64)        # never read
        self.min_key = np.full(length, 1 << 62, np.int64)

    def note(self, epoch, idx: np.ndarray, who: np.ndarray, who_max=None) -> None:
        """Readers `who` of elements `idx` in `epoch` (`who_max`: the largest reader of each
        entry where an entry stands for several, `who` then the smallest)."""
        np.minimum.at(self.min_key, idx, who + (self.shift - epoch * self.R))
        np.maximum.at(self.max_key, idx, (who if who_max is None else who_max)
                      + (self.shift + epoch * self.R))

    def readers(self, epoch, e: np.ndarray):
        """(read in `epoch`, smallest reader, largest reader) of elements e."""
        hi = self.max_key[e] - (self.shift + epoch * self.R)
        return hi >= -self.shift, self.min_key[e] + (epoch * self.R - self.shift), hi


class Memory:
    """A kernel buffer: a flat view of the user's array."""

    segment: int | None = None
    tracks_writes = False             # shared memory records its writers for race checks
    unit = "elements"                 # what `length` counts
    # Per element, the smallest and largest invocation (global index) that accessed it with a
    # plain load/store and with an atomic op in this dispatch; allocated by track_atomics()
    # for buffers that some atomic op uses.
    _plain: tuple[np.ndarray, np.ndarray] | None = None
    _atomic: tuple[np.ndarray, np.ndarray] | None = None
    # Per element, the invocation (global index) that last stored it in this dispatch and the
    # DeviceSync clock of that store; allocated by track_writers() for buffers a kernel both
    # stores to and loads from
    _writer: np.ndarray | None = None
    _wrote: np.ndarray | None = None
    _sync = None
    # With _writer, per element: the barrier epoch of its last store (-1: none), and its
    # readers in the current barrier epoch (global invocation indices): accesses by
    # invocations of one workgroup with no barrier between them are checked against each other
    _wepoch: np.ndarray | None = None
    _readers: EpochReaders | None = None

    def __init__(self, name: str, array: np.ndarray, elem):
        self.name = name
        self.elem = elem
        if isinstance(elem, StructType):           # blocks: raw bytes, length in blocks
            self.data = array.reshape(-1).view(np.uint8)
            self.length = self.data.shape[0] // elem.size
        elif isinstance(elem, VectorType):         # one row of components per element
            self.data = array.reshape(-1).view(elem.dtype).reshape(-1, elem.count)
            self.length = self.data.shape[0]
        else:
            self.data = array.reshape(-1).view(elem.dtype)
            self.length = self.data.shape[0]

    # ---------------------------------------------------------------- per invocation

    def _flat(self, ctx, idx: np.ndarray) -> np.ndarray:
        return idx.astype(np.int64)

    def _oob(self, ctx, op, idx: np.ndarray, what: str):
        bad = (idx < 0) | (idx >= self.length)
        if bad.any():       # worded as checked Vulkan launches word it (runtime/vulkan/faults.py)
            ctx.check_ub(bad, op, lambda w, i: f"{what} out of bounds of {self._describe()}: index "
                                               f"{_at(idx, ctx.dispatch.shape, w, i)}",
                         hint="check the index against the array's length (pass it as a parameter)")

    def _describe(self) -> str:
        return f"buffer '{self.name}' ({self.length} {self.unit})"

    def gather(self, ctx, op, idx: np.ndarray) -> np.ndarray:
        idx = idx.astype(np.int64)
        self._oob(ctx, op, idx, "load")
        flat = self._flat(ctx, idx)
        if ctx.mask is not None or flat.size > 1:
            valid = (idx >= 0) & (idx < self.length)
            flat = np.where(valid, flat, 0)
        self._check_race_read(ctx, op, flat)
        if self._writer is not None:
            self._check_unordered_read(ctx, op, flat)
            self._check_workgroup_read(ctx, op, flat)
        return self.data[flat]

    def checks_races(self) -> bool:
        """Whether loads of this buffer are checked against other invocations' stores (its
        kernel also writes it): checks made per invocation of the dispatch."""
        return self._writer is not None or self._plain is not None

    def track_writers(self, sync) -> None:
        """Record which invocation stored each element, and when (`sync`: the dispatch's
        emulator.sync.DeviceSync), so that loads by other workgroups are checked."""
        self._writer = np.full(self.length, -1, np.int64)
        self._wrote = np.full(self.length, -1, np.int64)
        self._sync = sync
        self._wepoch = np.full(self.length, -1, np.int64)
        self._readers = EpochReaders(self.length, sync.release.size)

    def _store_epoch(self, ctx, who) -> np.ndarray:
        """The epoch of stores by invocations `who` (global indices): their workgroup's last
        `pc.barrier(memory="device")`. Only that barrier makes one invocation's buffer stores
        visible to the others (`pc.barrier()` does so for shared memory alone, as GLSL's
        barrier() without memoryBarrierBuffer())."""
        return self._sync.barrier[who // ctx.dispatch.wgs]

    def _check_workgroup_read(self, ctx, op, flat) -> None:
        """A load of an element another invocation of the same workgroup stored with no device
        barrier between them is a data race (the emulator's lockstep shows the new value; a
        GPU may show either). Then the load is noted for the stores' check, by barrier epoch
        (any barrier orders a load before a later store)."""
        shape = ctx.dispatch.shape
        e = np.broadcast_to(flat, shape)
        who = np.broadcast_to(self._who(ctx), shape)
        writer, wgs = self._writer[e], ctx.dispatch.wgs
        bad = (self._wepoch[e] == self._store_epoch(ctx, who)) & (writer >= 0) & \
            (writer != who) & (writer // wgs == who // wgs)
        ctx.check_ub(bad, op, lambda w, i: (
            f"data race: this load reads element {int(e[w, i])} of {self._describe()}, which "
            f"invocation {int(writer[w, i]) % wgs} of the same workgroup stored with no "
            "pc.barrier(memory='device') between them (pc.barrier() orders shared memory, "
            "not buffers): the load may see the old value or the new one"),
            rule_id="emulator.buffer-race",
            hint="put pc.barrier(memory='device') between the store and the load, or share "
                 "the value through a pc.shared array (pc.barrier() orders those)")
        if ctx.mask is not None:
            e, who = e[ctx.mask], who[ctx.mask]
        self._readers.note(ctx.barrier_epoch, e.reshape(-1), who.reshape(-1))

    def _check_workgroup_write(self, ctx, op, e, val, who) -> None:
        """A store changing an element that another invocation of the same workgroup stored
        with no device barrier since, or loaded with no barrier since, is a data race (which
        store lands, or which value the load saw, is unspecified); equal values are allowed,
        as everywhere."""
        wgs = ctx.dispatch.wgs
        writer = self._writer[e]
        wrote = (self._wepoch[e] == self._store_epoch(ctx, who)) & (writer >= 0) & \
            (writer != who) & (writer // wgs == who // wgs)
        was_read, lo, hi = self._readers.readers(ctx.barrier_epoch, e)
        # every reader since the barrier in the storer's workgroup (readers in others are the
        # cross-workgroup checks' concern), and not only the storer itself
        read = was_read & ((lo != who) | (hi != who)) & (lo // wgs == who // wgs) & \
            (hi // wgs == who // wgs)
        if not (wrote | read).any():
            return
        old = np.ascontiguousarray(self.data[e]).reshape(len(e), -1)
        new = np.ascontiguousarray(val.astype(old.dtype, copy=False)).reshape(len(e), -1)
        width = f"u{old.dtype.itemsize}"                 # compared as bits (NaN payloads too)
        changed = (old.view(width) != new.view(width)).any(1)
        for bad, other, what in (
                (wrote & changed, writer, "stored with no pc.barrier(memory='device') since; "
                                          "which store lands is unspecified"),
                (read & changed, np.where(lo != who, lo, hi), "loaded with no barrier since; "
                                                             "the load may see either value")):
            if bad.any():
                k = int(np.argmax(bad))
                raise EmulatorError(
                    f"data race: this store changes element {int(e[k])} of {self._describe()}, "
                    f"which invocation {int(other[k]) % wgs} of the same workgroup {what}",
                    op.loc, rule="reported by the pycoop emulator",
                    hint="order the two accesses with a barrier (pc.barrier(memory='device') "
                         "after a store), let one invocation update the element (pc.atomic "
                         "ops for a counter or a sum), or share values through a pc.shared "
                         "array", rule_id="emulator.buffer-race")

    def _check_unordered_read(self, ctx, op, flat) -> None:
        shape = ctx.dispatch.shape
        e = np.broadcast_to(flat, shape)
        bad = self._sync.unordered(self._writer[e], self._wrote[e], self._who(ctx))
        ctx.check_ub(bad, op, lambda w, i: (
            f"data race: this load reads element {int(e[w, i])} of {self._describe()}, which "
            f"workgroup {ctx._wg_name(int(self._writer[e[w, i]]) // self._sync.wgs)} stored "
            "in this dispatch, and nothing orders the two (make the stores available with "
            "pc.barrier(memory='device') before a release atomic, and load after an acquire "
            "atomic and pc.barrier(memory='device'), or load in a later launch)"),
            rule_id="emulator.workgroup-race")

    def _check_unordered_write(self, ctx, op, e, val, who) -> None:
        """A store changing an element another workgroup stored in this dispatch, with
        nothing ordering the two stores: which value stays is unspecified."""
        bad = self._sync.unordered(self._writer[e], self._wrote[e], who)
        if not bad.any():
            return
        old, new = self.data[e].reshape(len(e), -1), val.reshape(len(e), -1)
        width = f"u{old.dtype.itemsize}"            # compared as bits (NaN payloads too)
        differs = (np.ascontiguousarray(old).view(width) !=
                   np.ascontiguousarray(new.astype(old.dtype)).view(width)).any(1)
        bad &= differs
        if bad.any():
            k = int(np.argmax(bad))
            raise EmulatorError(
                f"data race: this store changes element {int(e[k])} of {self._describe()}, "
                f"which workgroup {ctx._wg_name(int(self._writer[e[k]]) // self._sync.wgs)} "
                "stored in this dispatch, and nothing orders the two stores (which value stays "
                "is unspecified)", op.loc,
                rule="reported by the pycoop emulator",
                hint="order them as loads are (pc.barrier(memory='device') and release/acquire "
                     "atomics), or store from one workgroup",
                rule_id="emulator.workgroup-race")

    def scatter(self, ctx, op, idx: np.ndarray, val: np.ndarray) -> None:
        idx = idx.astype(np.int64)
        self._oob(ctx, op, idx, "store")
        comp = self.data.shape[1:]                 # (components,) for vector elements
        shape = np.broadcast_shapes(idx.shape, val.shape[:val.ndim - len(comp)], ctx.dispatch.shape)
        flat = np.broadcast_to(self._flat(ctx, idx), shape)
        val = np.broadcast_to(val, shape + comp)
        if ctx.mask is not None:
            flat, val = flat[ctx.mask], val[ctx.mask]
        val = np.ascontiguousarray(val).reshape((-1,) + comp)
        check_write_race(op, flat.reshape(-1), val, "this store")
        self._record_write(ctx, op, flat, val)
        if self._writer is not None:
            who = np.broadcast_to(self._who(ctx), shape)
            who = (who[ctx.mask] if ctx.mask is not None else who).reshape(-1)
            self._check_unordered_write(ctx, op, flat.reshape(-1), val, who)
            self._check_workgroup_write(ctx, op, flat.reshape(-1), val, who)
        self.data[flat.reshape(-1)] = val
        if self._writer is not None:
            self._writer[flat.reshape(-1)] = who
            self._wrote[flat.reshape(-1)] = self._sync.tick()
            self._wepoch[flat.reshape(-1)] = self._store_epoch(ctx, who)

    def _who(self, ctx):
        d = ctx.dispatch
        return (np.arange(d.nwg, dtype=np.int64)[:, None] * d.wgs
                + np.arange(d.wgs, dtype=np.int64)[None, :])

    def _check_race_read(self, ctx, op, flat):
        if self._plain is not None:
            flat = np.broadcast_to(flat, ctx.dispatch.shape)
            who = np.broadcast_to(self._who(ctx), ctx.dispatch.shape)
            if ctx.mask is not None:
                flat, who = flat[ctx.mask], who[ctx.mask]
            self._plain_access(op, flat.reshape(-1), who.reshape(-1), "load")

    def _record_write(self, ctx, op, flat, vals):
        if self._plain is not None:
            who = np.broadcast_to(self._who(ctx), ctx.dispatch.shape)
            who = who[ctx.mask] if ctx.mask is not None else who.reshape(-1)
            self._plain_access(op, flat.reshape(-1), who, "store")

    # ---------------------------------------------------------------- atomics

    def track_atomics(self) -> None:
        """Record plain and atomic accesses per element from now on (race checks)."""
        big = np.iinfo(np.int64).max
        self._plain = (np.full(self.length, big), np.full(self.length, -1, np.int64))
        self._atomic = (np.full(self.length, big), np.full(self.length, -1, np.int64))

    @staticmethod
    def _note(lohi, e, who) -> None:
        np.minimum.at(lohi[0], e, who)
        np.maximum.at(lohi[1], e, who)

    @staticmethod
    def _others(lohi, e, who) -> np.ndarray:
        """Whether an invocation other than `who` is recorded in `lohi` for element e."""
        lo, hi = lohi[0][e], lohi[1][e]
        return (hi >= 0) & ((lo != who) | (hi != who))

    def _plain_access(self, op, e, who, what: str) -> None:
        bad = self._others(self._atomic, e, who)
        if bad.any():
            k = int(np.argmax(bad))
            self._atomic_race(op, int(e[k]), f"this {what}", "an atomic operation of another invocation")
        self._note(self._plain, e, who)

    def _atomic_race(self, op, e: int, this: str, other: str):
        raise EmulatorError(
            f"data race: {this} accesses element {e} of {self._describe()}, which "
            f"{other} also accesses{'' if self.segment is None else ' since the last barrier'}",
            op.loc, rule="Vulkan memory model: conflicting accesses, one of them non-atomic, "
                         "must be ordered (reported by the pycoop emulator)",
            hint="access an element that invocations update atomically only with "
                 "pycoop.atomic ops (e.g. read it with pycoop.atomic.add(buf, i, 0))",
            rule_id="emulator.atomic-race")

    def atomic_access(self, ctx, op, idx: np.ndarray):
        """The elements (flat indices, invocation order) an atomic op of the active invocations
        touches, and the active mask (None: all): bounds- and race-checked, then recorded."""
        idx = idx.astype(np.int64)
        self._oob(ctx, op, idx, "atomic operation")
        shape = ctx.dispatch.shape
        flat = np.broadcast_to(self._flat(ctx, idx), shape)
        who = np.broadcast_to(self._who(ctx), shape)
        active = None if ctx.mask is None else np.broadcast_to(ctx.mask, shape)
        flat, who = (flat.reshape(-1), who.reshape(-1)) if active is None else (flat[active], who[active])
        self._atomic_check(ctx, op, flat, who)
        return flat, active

    def _atomic_check(self, ctx, op, e, who) -> None:
        if self._plain is None:
            return
        bad = self._others(self._plain, e, who)
        if bad.any():
            k = int(np.argmax(bad))
            self._atomic_race(op, int(e[k]), "this atomic operation", "a plain load or store of another invocation")
        self._note(self._atomic, e, who)

    # ---------------------------------------------------------------- cooperative blocks

    def components(self, comp: ScalarType) -> "Memory":
        """This buffer seen as a flat array of `comp` (a buffer of u32 or uvec4 read as f16
        matrices), sharing its data."""
        view = Memory(self.name, self.data, comp)
        view.unit = f"{comp} components"
        return view

    def check_block(self, ctx, op, t, offs, stride, lay, active, what):
        """The block origins, bounds-checked. Matrix ops reach memory whose elements hold
        several components through components() (khr._component_memory)."""
        inst = ctx.dispatch.instance_shape(t.scope)
        offs = np.broadcast_to(offs.astype(np.int64), inst)
        ext = lay.extent(stride)
        limit = self.segment or self.length
        if active is None and offs.min() >= 0 and (offs + ext).max() < limit:
            return offs                  # all in bounds: two reductions, no mask
        bad = (offs < 0) | (offs + ext >= limit)
        if active is not None:
            bad = bad & active
        if bad.any():
            w, s = np.argwhere(bad)[0]
            o = int(offs[w, s])
            e = int(np.broadcast_to(ext, inst)[w, s])
            raise EmulatorError(
                f"{what} out of bounds: {self.unit} {o}..{o + e} of {self._describe()} "
                f"(workgroup {ctx._wg_name(w)}, scope instance {s})", op.loc,
                rule="reported by the pycoop emulator",
                hint="check the offset and stride against the array size", rule_id="emulator.out-of-bounds")
        return offs

    def _indices(self, lay, offs, stride):
        return offs[..., None, None] + lay.offsets(stride)

    def _segment_base(self, ctx, inst_shape):
        return 0

    def block_set(self, ctx, op, offs, stride, lay, active, t: CoopMatType):
        """The blocks a cooperative load reads, as (distinct blocks, index per instance) with
        every instance's block == blocks[index], after the bounds and race checks."""
        offs = self.check_block(ctx, op, t, offs, stride, lay, active, "cooperative matrix load")
        if active is not None:
            offs = np.where(active, offs, 0)
        base = self._segment_base(ctx, offs.shape)
        stride = np.asarray(stride)
        distinct = None
        if stride.size == 1:      # many instances usually load the same block (every
            # workgroup of a GEMM row loads the same A tile): each distinct block once
            distinct = np.unique((offs + base).reshape(-1), return_inverse=True)
        self._check_race_block(ctx, op, t, lay, offs + base, stride, active, distinct)
        if distinct is not None:  # a uniform stride: every block a strided window
            win = _windows(self.data, lay, int(stride.reshape(-1)[0]), writeable=False)
            blocks, index = win[distinct[0]], distinct[1].reshape(offs.shape)
        else:
            idx = self._indices(lay, offs, stride) + np.asarray(base)[..., None, None]
            blocks = self.data[idx].reshape((-1,) + t.shape)
            index = np.arange(blocks.shape[0]).reshape(idx.shape[:-2])
        return blocks.view(t.component.dtype), index

    def gather_block(self, ctx, op, offs, stride, lay, active, t: CoopMatType) -> np.ndarray:
        blocks, index = self.block_set(ctx, op, offs, stride, lay, active, t)
        out = blocks[index]
        if blocks.shape[0] * 2 <= index.size:
            ctx.remember_blocks(out, blocks, index)
        return out

    def scatter_block(self, ctx, op, offs, stride, lay, active, mat, t: CoopMatType) -> None:
        offs = self.check_block(ctx, op, t, offs, stride, lay, active, "cooperative matrix store")
        starts = offs + self._segment_base(ctx, offs.shape)
        if isinstance(mat, LazyBlocks):
            s = np.asarray(stride)
            if (not self.tracks_writes and active is None and not lay.column_major
                    and (s == s.flat[0]).all()
                    and store_blocks(self.data, [(mat, starts)], int(s.flat[0]))):
                return
            mat = mat.materialize()
        vals = np.broadcast_to(mat, offs.shape + t.shape).view(self.elem.dtype)
        stride = np.broadcast_to(np.asarray(stride, dtype=np.int64), offs.shape)
        if active is not None:
            starts, vals, stride = starts[active], vals[active], stride[active]
        uniform = stride.size > 0 and (stride == stride.flat[0]).all()
        s0 = int(stride.flat[0]) if uniform else 0
        cells = _lattice(lay, starts, s0) if uniform else None
        idx = None
        if self.tracks_writes or cells is None:
            idx = self._indices(lay, starts, stride)
            if cells is None:            # a lattice already proves the blocks disjoint
                check_write_race(op, idx.reshape(-1), np.ascontiguousarray(vals).reshape(-1),
                                 "cooperative matrix store")
            self._record_write_block(ctx, op, t, idx, active, vals)
        flat = vals.reshape((-1,) + t.shape)
        if cells is not None and _store_tiled(self.data, lay, starts, s0, flat, cells):
            return
        if uniform:                      # each block a strided window of the flat array
            _windows(self.data, lay, s0, writeable=True)[starts.reshape(-1)] = flat
        else:
            self.data[idx.reshape(-1)] = vals.reshape(-1)

    def _check_race_block(self, ctx, op, t, lay, starts, stride, active, distinct=None):
        pass

    def _record_write_block(self, ctx, op, t, idx, active, vals):
        pass


# `SharedMemory.writer` of an element several invocations accessed atomically since the barrier.
ATOMIC_MANY = -(1 << 40)

# `SharedMemory.epoch` of an element nothing wrote in this dispatch (its value is undefined),
# and of one written only by an op whose writes are not tracked per writer (untracked_write).
NEVER_WRITTEN, UNTRACKED = -1, -2


class SharedMemory(Memory):
    """A workgroup-shared array: one segment of `length` elements per workgroup. Between two
    barriers, accesses by different invocations (or scope instances) to one element race when
    one of them writes: a read after another's write, and a write of a different value after
    another's write or read, are reported. A read of an element that nothing in its workgroup
    wrote is reported too: Vulkan leaves Workgroup variables uninitialised (the GPU returns
    whatever the memory held; the emulator's zeros would hide the bug)."""

    tracks_writes = True
    k = 1                                   # matrix components per element (components())

    def __init__(self, elem: ScalarType, length: int, dispatch, ctx):
        self.name = "shared"
        self.elem = elem
        self.segment = length
        self.length = length
        comp = (elem.count,) if isinstance(elem, VectorType) else ()
        self.data = np.zeros((dispatch.nwg * length,) + comp, dtype=elem.dtype)
        self.writer = np.full(dispatch.nwg * length, -1, dtype=np.int64)
        # the barrier epoch of each element's last write (or NEVER_WRITTEN, UNTRACKED)
        self.epoch = np.full(dispatch.nwg * length, NEVER_WRITTEN, dtype=np.int64)
        # the barrier epoch of each element's last atomic access (-1: none); its `writer` is
        # then the one invocation that accessed it atomically in that epoch, or ATOMIC_MANY
        self.atomic_epoch = np.full(dispatch.nwg * length, -1, dtype=np.int64)
        # each element's readers in the current barrier epoch: invocations, and scope
        # instances as ids down to -1 - nsg
        self.reads = EpochReaders(dispatch.nwg * length, dispatch.wgs, shift=dispatch.nsg + 2)
        self.ctx = ctx

    def _describe(self) -> str:
        return f"shared array ({self.length} {self.unit} per workgroup)"

    def components(self, comp: ScalarType) -> "SharedMemory":
        """This array seen as a flat array of `comp`, sharing its data and its race records
        (kept per element: matrix rows start at elements, so no two blocks share one)."""
        view = copy.copy(self)
        view.k = self.elem.size // comp.size
        view.elem, view.data = comp, self.data.reshape(-1).view(comp.dtype)
        view.length, view.segment = self.length * view.k, self.segment * view.k
        view.unit = f"{comp} components"
        return view

    def _el(self, idx: np.ndarray) -> np.ndarray:
        """The element of each component index."""
        return idx if self.k == 1 else idx // self.k

    def _flat(self, ctx, idx):
        wg = np.arange(ctx.dispatch.nwg, dtype=np.int64)[:, None] * self.segment
        return wg + idx

    def _segment_base(self, ctx, inst_shape):
        return np.arange(ctx.dispatch.nwg, dtype=np.int64)[:, None] * self.segment

    def _who(self, ctx):
        return np.arange(ctx.dispatch.wgs, dtype=np.int64)[None, :]

    def untracked_write(self, comp_idx: np.ndarray, comp: ScalarType) -> None:
        """Record that an op writing the data directly (no writer ids, no race checks:
        nv.store_tensor) wrote the `comp` components at flat indices `comp_idx`."""
        e = np.asarray(comp_idx, np.int64) // (self.elem.size // comp.size)
        ep = self.epoch[e]
        self.epoch[e] = np.where(ep == NEVER_WRITTEN, UNTRACKED, ep)

    def _report_unwritten(self, ctx, op, bad: np.ndarray, e: np.ndarray, who: str) -> None:
        """Report the first reader with `bad` set (a read of element `e`, same shape, that
        nothing wrote); `bad` is (workgroups, invocations or scope instances, ...)."""
        if bad.any():
            hit = tuple(np.argwhere(bad)[0])
            w = int(hit[0])
            raise EmulatorError(
                f"undefined behaviour in workgroup {ctx._wg_name(w)}, {who} {int(hit[1])}: "
                f"reads shared element {int(e[hit]) - w * self.segment // self.k}, which nothing "
                f"in this workgroup wrote (its value is undefined)", op.loc,
                rule="reported by the pycoop emulator: Workgroup variables are not initialised",
                hint="write every element before reading it (and put pycoop.barrier() between "
                     "other invocations' writes and this read)", rule_id="emulator.shared-unwritten")

    def _check_race_read(self, ctx, op, flat):
        flat = np.broadcast_to(flat, ctx.dispatch.shape)
        who = np.broadcast_to(self._who(ctx), flat.shape)
        ep = self.epoch[flat]
        unwritten = ep == NEVER_WRITTEN
        if ctx.mask is not None:
            unwritten &= ctx.mask
        self._report_unwritten(ctx, op, unwritten, flat, "invocation")
        same_epoch = ep == ctx.barrier_epoch
        ctx.check_ub(same_epoch & (self.writer[flat] != who), op,
                     "data race: this shared-memory element was written by another invocation "
                     "since the last barrier", rule_id="emulator.shared-race")
        if ctx.mask is not None:
            flat, who = flat[ctx.mask], who[ctx.mask]
        self._record_reads(ctx, flat.reshape(-1), who.reshape(-1))

    def _record_reads(self, ctx, idx: np.ndarray, who: np.ndarray, who_max=None) -> None:
        """Remember who read each element in this barrier epoch (the smallest and largest
        reader id: equal when one invocation read it). `who_max`: the largest reader of each
        entry when an entry stands for several readers (`who` then the smallest)."""
        self.reads.note(ctx.barrier_epoch, self._el(idx), who, who_max)

    def _readers(self, ctx, e: np.ndarray):
        """(read in this epoch, smallest reader, largest reader) of elements e."""
        return self.reads.readers(ctx.barrier_epoch, e)

    def _record_write(self, ctx, op, flat, vals):
        who = np.broadcast_to(self._who(ctx), ctx.dispatch.shape)
        if ctx.mask is not None:
            who = who[ctx.mask]
        self._write(ctx, op, flat.reshape(-1), who.reshape(-1), vals)

    def _write(self, ctx, op, idx: np.ndarray, who: np.ndarray, vals: np.ndarray) -> None:
        """Record the writers of `idx`. Overwriting with a different value an element that
        another invocation or scope instance wrote, or read, since the last barrier is a race."""
        cur = ctx.barrier_epoch
        e = self._el(idx)
        atomic = (self.atomic_epoch[e] == cur) & (self.writer[e] != who)
        if atomic.any():
            self._atomic_race(op, int(e[np.argmax(atomic)]) % self.segment, "this store",
                              "an atomic operation of another invocation")
        wrote = (self.epoch[e] == cur) & (self.writer[e] != who)
        was_read, rmin, rmax = self._readers(ctx, e)
        read = was_read & ((rmin != who) | (rmax != who))
        if (wrote | read).any():
            old = np.ascontiguousarray(self.data[idx]).view(np.uint8).reshape(len(idx), -1)
            new = np.ascontiguousarray(vals).view(np.uint8).reshape(len(idx), -1)
            changed = (old != new).any(axis=1)                     # an element's bytes
            for bad, what, why in (
                    (wrote & changed, "written", "which write lands is unspecified"),
                    (read & changed, "read", "the reader may see either value")):
                if bad.any():
                    raise EmulatorError(
                        f"data race: this store overwrites shared element "
                        f"{int(e[np.argmax(bad)])}, {what} since the last barrier by another "
                        f"invocation, with a different value; {why}", op.loc,
                        rule="reported by the pycoop emulator",
                        hint="put pycoop.barrier() between the other invocation's access and "
                             "this store (a second buffer needs fewer barriers)",
                        rule_id="emulator.shared-race")
        self.writer[e] = who
        self.epoch[e] = ctx.barrier_epoch

    def _atomic_check(self, ctx, op, e, who) -> None:
        """Atomics race with plain reads and writes of other invocations since the barrier
        (not with other atomics); they read the old value, so it must have been written."""
        cur = ctx.barrier_epoch
        e = self._el(e)
        if (self.epoch[e] == NEVER_WRITTEN).any():
            k = int(np.argmax(self.epoch[e] == NEVER_WRITTEN))
            raise EmulatorError(
                f"undefined behaviour: an atomic operation reads shared element "
                f"{int(e[k]) % self.segment}, which nothing in its workgroup wrote (its value "
                f"is undefined)", op.loc,
                rule="reported by the pycoop emulator: Workgroup variables are not initialised",
                hint="initialise the shared array (and put pycoop.barrier() after that)",
                rule_id="emulator.shared-unwritten")
        plain_write = ((self.epoch[e] == cur) & (self.atomic_epoch[e] != cur)
                       & (self.writer[e] != who))
        was_read, rmin, rmax = self._readers(ctx, e)
        plain_read = was_read & ((rmin != who) | (rmax != who))
        for bad, other in ((plain_write, "a plain store of another invocation"),
                           (plain_read, "a plain load of another invocation")):
            if bad.any():
                self._atomic_race(op, int(e[np.argmax(bad)]) % self.segment,
                                  "this atomic operation", other)
        # one atomic invocation per element keeps its id as the writer; several: ATOMIC_MANY
        uniq, inv = np.unique(e, return_inverse=True)
        lo = np.full(len(uniq), np.iinfo(np.int64).max, np.int64)
        hi = np.full(len(uniq), -1, np.int64)
        np.minimum.at(lo, inv, who)
        np.maximum.at(hi, inv, who)
        prev = self.writer[uniq]
        many = (lo != hi) | ((self.atomic_epoch[uniq] == cur) & (prev != lo))
        self.writer[uniq] = np.where(many, ATOMIC_MANY, lo)
        self.epoch[uniq] = cur
        self.atomic_epoch[uniq] = cur

    def _instance_ids(self, t, shape):
        return np.broadcast_to(-2 - np.arange(shape[1], dtype=np.int64)[None, :], shape)

    def _check_race_block(self, ctx, op, t, lay, starts, stride, active, distinct=None):
        """`distinct`: np.unique(starts, return_inverse=True) when the stride is uniform."""
        if active is None and distinct is not None and self._check_race_distinct_blocks(
                ctx, t, lay, starts, stride, distinct):
            return
        idx = self._indices(lay, starts, stride)
        inst = self._instance_ids(t, starts.shape)[..., None, None]
        e = self._el(idx)
        ep = self.epoch[e]
        unwritten = ep == NEVER_WRITTEN
        if active is not None:
            unwritten &= active[..., None, None]
        self._report_unwritten(ctx, op, unwritten, e, "scope instance")
        bad = (ep == ctx.barrier_epoch) & (self.writer[e] != inst)
        if active is not None:
            bad = bad & active[..., None, None]
        if bad.any():
            w, s = np.argwhere(bad)[0][:2]
            raise EmulatorError(f"data race: a cooperative matrix load reads shared memory written "
                                f"since the last barrier by other invocations (workgroup "
                                f"{ctx._wg_name(w)}, scope instance {s})", op.loc,
                                rule="reported by the pycoop emulator",
                                hint="put pycoop.barrier() between the writes and this load",
                                rule_id="emulator.shared-race")
        ids = np.broadcast_to(inst, idx.shape)
        if active is not None:
            idx, ids = idx[active], ids[active]
        self._record_reads(ctx, idx.reshape(-1), ids.reshape(-1))

    def _check_race_distinct_blocks(self, ctx, t, lay, starts, stride, distinct) -> bool:
        """The race check and read records of a matrix load with every instance active, done
        once per distinct block with the smallest and largest instance reading it (instances
        loading one tile, as the subgroups of one GEMM row do, share the work). False, with
        nothing recorded, when some reader races or reads an element nothing wrote: the
        per-instance check then names it."""
        ids = self._instance_ids(t, starts.shape)
        uniq, inv = distinct
        lo = np.full(len(uniq), np.iinfo(np.int64).max, np.int64)
        hi = np.full(len(uniq), np.iinfo(np.int64).min, np.int64)
        np.minimum.at(lo, inv, ids.reshape(-1))
        np.maximum.at(hi, inv, ids.reshape(-1))
        idx = self._indices(lay, uniq, int(stride.reshape(-1)[0]))
        e = self._el(idx)
        w, ep = self.writer[e], self.epoch[e]
        lo3, hi3 = lo[:, None, None], hi[:, None, None]
        if (ep == NEVER_WRITTEN).any() or ((ep == ctx.barrier_epoch)
                                           & ((w != lo3) | (w != hi3))).any():
            return False
        self._record_reads(ctx, idx.reshape(-1), np.broadcast_to(lo3, e.shape).reshape(-1),
                           np.broadcast_to(hi3, e.shape).reshape(-1))
        return True

    def _record_write_block(self, ctx, op, t, idx, active, vals):
        inst_shape = ctx.dispatch.instance_shape(t.scope)
        ids = np.broadcast_to(self._instance_ids(t, inst_shape)[..., None, None], inst_shape + t.shape)
        if active is not None:
            ids = ids[active]
        self._write(ctx, op, idx.reshape(-1), ids.reshape(-1), vals)


class PointerArray:
    """Per-element pointers into a memory (PhysicalStorageBuffer pointers passed to decode
    functions): byte addresses into `memory`."""

    def __init__(self, memory: Memory, byte_addr: np.ndarray):
        self.memory, self.byte_addr = memory, byte_addr

    def reshape(self, *shape) -> "PointerArray":
        return PointerArray(self.memory, self.byte_addr.reshape(*shape))
