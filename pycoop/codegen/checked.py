"""Bounds guards of checked launches (Vulkan target).

Buffers travel as bare device addresses, so nothing on the device knows their sizes: a kernel
indexing past the end corrupts whatever lies there. A checked module also receives each
buffer's element count in the argument block, plus the address of a small fault record, and
every buffer or shared-array access an op declares (its registry entry's `bounds`) is wrapped
in a guard: in bounds, the access runs; out of bounds, it is suppressed (a load yields zero)
and the first violation of the launch is written to the fault record. The runtime reads the
record after the launch and raises `pycoop.KernelFault` naming the op's line (the op table
maps op ids to source locations).

A matrix access is checked once for its whole extent (first and last element), not per
element, with the span the emulator uses (`ops.khr_layout.MatrixLayout.span`). An NV tensor
load/store (`TensorReach`) is checked once for the range of element indices its layout (and
view) can address: with a clamp mode other than Undefined the coordinates stay inside the
layout's dimensions, so the range follows from the layout's runtime dimensions, strides,
offsets, spans and block sizes (`tensor_range`, shared by the SPIR-V guard and its tests).

Counted loops (`Guards.lower_loop`): the guarded accesses of a `pc.range` loop whose indices
are integer arithmetic on the induction variable and loop-invariant values are checked once
before the loop, over every iteration (interval arithmetic); when all are in bounds the loop
runs a copy without those guards, otherwise the guarded copy runs, so the first fault of a
launch is still recorded exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Op, Value
from ..ir.registry import get as op_def
from ..types import (BufferType, CoopMatType, ScalarType, SharedArrayType, StorageClass, bool_, i32,
                     u32, u64)

# Words of the fault record (u32 each): 0 = op id + 1 (0: no fault; set once, by an atomic
# compare-exchange, so only the first violation is kept), then who and where.
FAULT_WORDS = ("op", "wg_x", "wg_y", "wg_z", "invocation", "index_lo", "index_hi", "count",
               "extent", "signed")
FAULT_BYTES = 4 * 16


@dataclass(frozen=True)
class Reach:
    """The memory elements one access touches: `index` .. `index + major * stride + minor`
    of `memory` (a buffer parameter or a shared array). A single element: major = minor = 0.
    `major` and `minor` are compile-time counts; `stride` a Value (or None when major is 0)."""
    memory: Value
    index: Value
    what: str                     # "load", "store", "atomic", "cooperative matrix load", ...
    major: int = 0
    stride: Value | None = None
    minor: int = 0


def element(what: str):
    """`bounds` of an op addressing operand 1 of memory operand 0, one element."""
    return lambda op: Reach(op.operands[0], op.operands[1], what)


def matrix_block(what: str, span: tuple[int, int], memory: Value, index: Value, stride: Value,
                 components: int) -> Reach:
    """Reach of a cooperative-matrix block of `span` = (lines, components per line) at `index`
    with `stride`, in units of the memory's elements, each holding `components` matrix
    components."""
    major, minor = span
    return Reach(memory, index, what, major - 1, stride if major > 1 else None,
                 (minor - 1) // components)


@dataclass(frozen=True)
class TensorReach:
    """An NV tensor load/store (OpCooperativeMatrixLoadTensorNV / StoreTensorNV) of a
    `rows` x `cols` matrix through `layout` (and `view`): the elements of `memory` it can
    address (`tensor_range`). `extra`: memory elements read past each addressed one (a
    DecodeVectorFunc block larger than the buffer's element). `suppressed`: what a suppressed
    load yields (the load's Object operand: the values of elements it does not read)."""
    memory: Value
    what: str
    layout: Value
    view: Value | None
    rows: int
    cols: int
    store: bool
    extra: int = 0
    suppressed: Value | None = None


LAYOUT_STATE = ("nv.layout_dimension", "nv.layout_stride", "nv.layout_slice",
                "nv.layout_clamp_value", "nv.layout_block_size")
UNDEFINED, CONSTANT, CLAMP_TO_EDGE, REPEAT, MIRROR_REPEAT = range(5)   # TensorClampMode


def layout_chain(layout: Value):
    """(layout type, state ops from the create op on) of a layout built in straight-line code,
    or None when it comes through control flow or a function parameter."""
    steps, v = [], layout
    while v.op is not None and v.op.name in LAYOUT_STATE:
        steps.append(v.op)
        v = v.op.operands[0]
    if v.op is None or v.op.name != "nv.create_layout":
        return None
    return v.op.attrs["type"], steps[::-1]


def tensor_access(what: str, store: bool):
    """`bounds` of nv.load_tensor (operands mem, object, layout[, view]) or nv.store_tensor
    (mem, matrix, layout[, view]): a TensorReach, or None for a layout built through control
    flow. A decode function reads its block through a pointer to the buffer's element at the
    addressed index (one element); a DecodeVectorFunc block larger than that element reads
    the following elements too."""
    def reach(op: Op):
        layout = op.operands[2]
        if layout_chain(layout) is None:
            return None
        mem = op.operands[0]
        t = op.operands[1].type
        view = op.operands[3] if op.attrs.get("view") else None
        extra = 0
        fv = None if store else op.attrs.get("decode_vector")
        if fv is not None:
            size = fv.params[0].type.pointee.size
            extra = max(0, -(-size // mem.type.elem.size) - 1)
        return TensorReach(mem, what, layout, view, t.rows, t.cols, store, extra,
                           None if store else op.operands[1])
    return reach


class PyInts:
    """Exact integer arithmetic on Python ints: the domain `tensor_range` is tested in."""
    def const(self, n): return n
    def add(self, a, b): return a + b
    def sub(self, a, b): return a - b
    def mul(self, a, b): return a * b
    def div(self, a, b): return a // max(b, 1)
    def smod(self, a, b): return a % max(b, 1)
    def lt(self, a, b): return a < b
    def le(self, a, b): return a <= b
    def and_(self, *c): return all(c)
    def or_(self, a, b): return a or b
    def not_(self, a): return not a
    def select(self, c, a, b): return a if c else b
    def min(self, a, b): return min(a, b)
    def max(self, a, b): return max(a, b)


class SpvInts:
    """The same arithmetic emitted as SPIR-V on 64-bit integers (signed operations; every
    value a guard computes stays far inside the 64-bit range, see `tensor_range`)."""

    def __init__(self, ctx):
        self.ctx = ctx

    def _e(self, name, t, *ids):
        return self.ctx.emit(name, t, *ids)

    def const(self, n): return self.ctx.const(u64, n & 0xFFFFFFFFFFFFFFFF)
    def add(self, a, b): return self._e("OpIAdd", u64, a, b)
    def sub(self, a, b): return self._e("OpISub", u64, a, b)
    def mul(self, a, b): return self._e("OpIMul", u64, a, b)

    def div(self, a, b):        # b >= 1 where the result is used
        return self._e("OpSDiv", u64, a, self.max(b, self.const(1)))

    def smod(self, a, b):
        return self._e("OpSMod", u64, a, self.max(b, self.const(1)))

    def lt(self, a, b): return self._e("OpSLessThan", bool_, a, b)
    def le(self, a, b): return self._e("OpSLessThanEqual", bool_, a, b)

    def and_(self, *c):
        """True (the Python value) when there is nothing to check."""
        c = [x for x in c if x is not True]
        if not c:
            return True
        out = c[0]
        for x in c[1:]:
            out = self._e("OpLogicalAnd", bool_, out, x)
        return out

    def or_(self, a, b):
        return True if True in (a, b) else self._e("OpLogicalOr", bool_, a, b)

    def not_(self, a): return self._e("OpLogicalNot", bool_, a)
    def select(self, c, a, b): return a if a == b else self._e("OpSelect", u64, c, a, b)
    def min(self, a, b): return a if a == b else self.select(self.lt(a, b), a, b)
    def max(self, a, b): return a if a == b else self.select(self.lt(a, b), b, a)

    def extend(self, v_id: int, t: ScalarType, signed32: bool = False) -> int:
        """A scalar integer as a 64-bit value: unsigned types zero-extended, signed ones (or any
        32-bit operand read as int32_t: `signed32`) sign-extended."""
        if t.bits == 64:
            return v_id if t == u64 else self._e("OpBitcast", u64, v_id)
        return self._e("OpSConvert" if (t.signed or signed32) else "OpUConvert", u64, v_id)


_M31, _M32 = (1 << 31) - 1, (1 << 32) - 1


class Pairs:
    """Interval arithmetic over a domain: a value is (lo, hi); a point has lo == hi and costs
    one operation. `fits` collects the conditions under which the results are exact (no
    32-bit wrap, no division by zero, products of operands below 2**31)."""

    def __init__(self, dom):
        self.d, self.fits = dom, []

    def point(self, x):
        return (x, x)

    def const(self, n):
        c = self.d.const(n)
        return (c, c)

    def _two(self, f, a, b, c, e):
        if a == c and b == e:
            r = f(a, b)
            return (r, r)
        return (f(a, b), f(c, e))

    def add(self, a, b): return self._two(self.d.add, a[0], b[0], a[1], b[1])
    def sub(self, a, b): return self._two(self.d.sub, a[0], b[1], a[1], b[0])
    def min(self, a, b): return self._two(self.d.min, a[0], b[0], a[1], b[1])
    def max(self, a, b): return self._two(self.d.max, a[0], b[0], a[1], b[1])

    def mul(self, a, b):
        """Both operands in [0, 2**31): exact in 64 bits."""
        self.in_range(a, 0, _M31)
        self.in_range(b, 0, _M31)
        return self._two(self.d.mul, a[0], b[0], a[1], b[1])

    def div(self, a, b):
        """a >= 0, b >= 1: floor division."""
        self.in_range(a, 0, None)
        self.in_range(b, 1, None)
        return self._two(self.d.div, a[0], b[1], a[1], b[0])

    def rem(self, a, b):
        self.in_range(a, 0, None)
        self.in_range(b, 1, None)
        if a[0] == a[1] and b[0] == b[1]:
            r = self.d.smod(a[0], b[0])
            return (r, r)
        return (self.d.const(0), self.d.min(a[1], self.d.sub(b[1], self.d.const(1))))

    def in_range(self, a, lo, hi) -> None:
        if lo is not None:
            self.fits.append(self.d.le(self.d.const(lo), a[0]))
        if hi is not None:
            self.fits.append(self.d.le(a[1], self.d.const(hi)))


def tensor_range(p: Pairs, ttype, steps, leaf, rows: int, cols: int, has_view: bool,
                 store: bool):
    """The element indices an NV tensor load/store can address, from its layout's state ops
    (`layout_chain`): (accessed, lo, hi) in the domain of `p` (intervals of `leaf(value,
    signed32)`), `accessed` False when no element is read or written (every coordinate is
    discarded by the Constant clamp / store discard). Conditions the range relies on are added
    to p.fits; a layout the spec leaves undefined (a span, block size or clamped dimension of 0,
    MirrorRepeat on a dimension of 1, a negative coordinate with Undefined) fails them.

    Per dimension, the span coordinates lie in [0, h]: h = span - 1, or fewer when the matrix
    has fewer elements than the span (no view); the tensor coordinate c = offset + span
    coordinate lies in [offset, offset + h], which the clamp mode maps into [0, dimension)
    (Undefined: not at all); the block coordinate is c / blockSize and the index the sum of block
    coordinate x stride (SPV_NV_cooperative_matrix2, SPV_NV_tensor_addressing pseudo-code)."""
    d, D = p.d, ttype.dim
    zero, one = p.const(0), p.const(1)
    dim, stride, offset, span, block = ([zero] * D, [zero] * D, [zero] * D, [zero] * D, [one] * D)
    for s in steps:
        if s.name == "nv.layout_clamp_value":
            continue
        if s.name == "nv.layout_slice":
            vals = [leaf(v, i % 2 == 0) for i, v in enumerate(s.operands[1:])]
            offset = [p.add(o, x) for o, x in zip(offset, vals[0::2])]
            for o in offset:                                   # int32_t offset: no wrap
                p.in_range(o, -_M31 - 1, _M31)
            span = vals[1::2]
            continue
        vals = [leaf(v, False) for v in s.operands[1:]]
        if s.name == "nv.layout_dimension":
            dim, span, offset = vals, vals, [zero] * D
            stride = [one] * D
            for i in range(D - 2, -1, -1):       # the spec's ceil(dim / blockSize) (lower.py too)
                blocks = p.div(p.add(dim[i + 1], p.sub(block[i + 1], one)), block[i + 1])
                stride[i] = p.mul(stride[i + 1], blocks)
                p.in_range(stride[i], 0, _M32)
        elif s.name == "nv.layout_stride":
            stride = vals
        elif s.name == "nv.layout_block_size":
            block = vals
    mode = ttype.clamp_mode
    if store and mode != UNDEFINED:
        mode = CONSTANT              # stores discard out-of-bounds elements in every other mode
    # the largest span coordinate per dimension
    h = [None] * D
    q = p.const(rows * cols - 1)
    for i in range(D - 1, -1, -1):
        p.in_range(span[i], 1, None)                           # span 0: `index % 0`
        h[i] = p.sub(span[i], one)
        if not has_view:
            h[i] = p.min(h[i], q)
            q = p.div(q, span[i])
    accessed, lo, hi = [], zero, zero
    for i in range(D):
        c_lo, c_hi = offset[i][0], d.add(offset[i][1], h[i][1])
        p.in_range((c_lo, c_hi), None, _M31)                   # int32_t c: no wrap
        last = d.sub(dim[i][1], d.const(1))                     # largest coordinate in bounds
        if mode == UNDEFINED:
            a, b = c_lo, c_hi
            p.in_range((a, b), 0, None)
        elif mode == CONSTANT:
            a, b = d.max(c_lo, d.const(0)), d.min(c_hi, last)
            accessed.append(d.le(a, b))
        else:
            p.in_range(dim[i], 1, None)                        # nothing to clamp to
            inside = d.and_(d.le(d.const(0), c_lo), d.le(c_hi, d.sub(dim[i][0], d.const(1))))
            if mode == CLAMP_TO_EDGE:
                a = d.min(d.max(c_lo, d.const(0)), d.sub(dim[i][0], d.const(1)))
                b = d.min(d.max(c_hi, d.const(0)), last)
            elif mode == REPEAT and offset[i][0] == offset[i][1] and dim[i][0] == dim[i][1] \
                    and h[i][0] == h[i][1]:            # one layout: the exact wrapped range
                n = dim[i][0]
                lm, hm = d.smod(c_lo, n), d.smod(c_hi, n)
                whole = d.or_(d.le(n, d.add(d.sub(c_hi, c_lo), d.const(1))), d.lt(hm, lm))
                a, b = d.select(whole, d.const(0), lm), d.select(whole, last, hm)
            else:                                      # Repeat over intervals, MirrorRepeat
                if mode == MIRROR_REPEAT:                      # `c % (2 * 1 - 2)`
                    p.fits.append(d.or_(inside, d.le(d.const(2), dim[i][0])))
                a, b = d.select(inside, c_lo, d.const(0)), d.select(inside, c_hi, last)
        if mode == CONSTANT:         # a dimension that reads nothing: keep the arithmetic valid
            b = d.max(a, b)
        bc_lo, bc_hi = p.div((a, b), block[i])
        lo = p.add(lo, p.mul((bc_lo, bc_lo), (stride[i][0], stride[i][0])))
        hi = p.add(hi, p.mul((bc_hi, bc_hi), (stride[i][1], stride[i][1])))
    any_ = d.and_(*accessed) if accessed else True
    return any_, lo[0], hi[1]


class Guards:
    """Checked lowering state of one module (LowerCtx.checks)."""

    def __init__(self, ctx, names: dict):
        self.ctx = ctx
        self.names = names              # buffer parameter Value -> its name
        self.counts: dict = {}          # buffer parameter Value -> id of its u32 element count
        self.fault: int | None = None   # id of the fault record pointer
        self.ops: list[dict] = []       # op id -> what the runtime reports
        self.hoisted: set = set()       # ops proven in bounds for the loop copy being lowered
        self.depth = 0                  # loops versioned around the op being lowered

    # ---------------------------------------------------------------- module-level
    def record_type(self) -> int:
        """Pointer type of the fault record: a Block of u32 words in PhysicalStorageBuffer."""
        ctx, b = self.ctx, self.ctx.b
        arr = b.type("OpTypeArray", ctx.type_id(u32), ctx.const(u32, 16), unique=True)
        b.decorate(arr, "ArrayStride", 4)
        st = b.type("OpTypeStruct", arr, unique=True)
        b.decorate(st, "Block")
        b.member_decorate(st, 0, "Offset", 0)
        b.name(st, "FaultRecord")
        return b.type("OpTypePointer", "PhysicalStorageBuffer", st)

    def declare_members(self, block: int, first: int, extra: dict) -> None:
        """Offsets and names of the extra argument-block members (abi.layout's "checked")."""
        b = self.ctx.b
        b.member_decorate(block, first, "Offset", extra["fault_offset"])
        b.member_name(block, first, "fault_record")
        for i, c in enumerate(extra["counts"], start=first + 1):
            b.member_decorate(block, i, "Offset", c["offset"])
            b.member_name(block, i, f"{c['name']}_count")

    def load_members(self, base: int, storage: str, first: int, members: list[int]) -> None:
        """Load the fault record pointer and the element counts at the kernel's entry."""
        b = self.ctx.b
        values = []
        for i, mid in enumerate(members, start=first):
            slot = b.emit("OpAccessChain", b.type("OpTypePointer", storage, mid), base,
                          self.ctx.const(u32, i))
            align = ["Aligned", 8 if i == first else 4] if storage == "PhysicalStorageBuffer" else []
            values.append(b.emit("OpLoad", mid, slot, *align))
        self.fault = values[0]
        self.counts = dict(zip(self.names, values[1:]))

    # ---------------------------------------------------------------- per op
    def lower(self, op: Op, reach: Reach, lower_access) -> None:
        """Lower `op` (by `lower_access()`) inside a guard on `reach` (None: a tensor layout
        that comes through control flow, whose extent is unknown: unguarded, see docs/gpu.md)."""
        ctx, b = self.ctx, self.ctx.b
        if reach is None or op in self.hoisted:
            lower_access()
            return
        mem = reach.memory
        count, label, unit = self._count(mem)
        op_id = len(self.ops)
        tensor = isinstance(reach, TensorReach)
        self.ops.append({"file": op.loc.file if op.loc else "<unknown>",
                         "line": op.loc.line if op.loc else 0, "col": op.loc.col if op.loc else 0,
                         "what": reach.what, "memory": label, "per": unit,
                         "block": tensor or reach.major > 0 or reach.minor > 0})
        if tensor:
            ok, words = self._tensor_guard(reach, count)
            record = lambda: self._record_words(op_id, words, count)      # noqa: E731
        else:
            idx, idx_t = ctx.id(reach.index), reach.index.type
            first = self._u32(idx, idx_t)
            ok = self._in_bounds(first, idx, idx_t, count, reach)
            record = lambda: self._record(op_id, first, idx, idx_t, count, reach)  # noqa: E731
        l_ok, l_bad, l_merge = ctx.new_label(), ctx.new_label(), ctx.new_label()
        b.emit("OpSelectionMerge", l_merge, "None")
        b.emit("OpBranchConditional", ok, l_ok, l_bad)
        ctx.begin_block(l_ok)
        lower_access()
        ok_end = ctx.current_label
        b.emit("OpBranch", l_merge)
        ctx.begin_block(l_bad)
        record()
        bad_end = ctx.current_label
        b.emit("OpBranch", l_merge)
        ctx.begin_block(l_merge)
        if op.results:
            r = op.results[0]
            loaded = ctx.id(r)
            other = ctx.id(reach.suppressed) if tensor and reach.suppressed is not None \
                else self._zero(r.type)
            ctx.set(r, ctx.emit("OpPhi", r.type, loaded, ok_end, other, bad_end))

    # ---------------------------------------------------------------- counted loops
    def lower_loop(self, op: Op, lower_loop) -> None:
        """Lower loop `op` (by `lower_loop()`), versioned when it is a counted loop (`for k in
        pc.range(start, stop, step)`, step a positive invariant) holding guarded accesses whose
        reach is integer arithmetic on k and values defined before the loop: those are checked
        once, before the loop, for every k the loop can take (interval arithmetic); the loop
        copy run when all are in bounds lowers them without guards, the other copy with them."""
        ctx, b = self.ctx, self.ctx.b
        counted = _counted_loop(op) if self.depth < 2 else None
        if counted is None:
            lower_loop()
            return
        j, start, stop, step = counted
        inside = _defined_inside(op)
        k = op.regions[1].args[j]
        hoist = []
        for o in _walk(op.regions):
            bounds = op_def(o.name).bounds
            reach = bounds(o) if bounds is not None and o not in self.hoisted else None
            if reach is not None and _analysable(reach, inside, k):
                hoist.append((o, reach))
        if not hoist:
            lower_loop()
            return
        dom = SpvInts(ctx)
        p = Pairs(dom)
        t = start.type
        tmax = (1 << (t.bits - 1)) - 1 if t.signed else (1 << t.bits) - 1
        first, end, inc = (dom.const(int(v.op.attrs["value"])) if v in inside else
                           dom.extend(ctx.id(v), v.type) for v in (start, stop, step))
        # the last k: start + (stop - 1 - start) / step * step; k + step never wraps
        last = dom.add(first, dom.mul(dom.div(dom.sub(dom.sub(end, dom.const(1)), first), inc), inc))
        runs = dom.lt(first, end)
        p.fits += [dom.le(dom.const(1), inc), dom.le(dom.add(last, inc), dom.const(tmax))]
        cache = {k: (first, last)}
        leaf = _LoopLeaves(p, ctx, inside, cache)
        checks = []
        for o, reach in hoist:
            count64 = dom.extend(self._count(reach.memory)[0], u32)
            if isinstance(reach, TensorReach):
                ttype, steps = layout_chain(reach.layout)
                checks.append(self._tensor_ok(p, reach, ttype, steps, leaf, count64)[0])
            else:
                lo, hi = leaf(reach.index, False)
                end_ = hi
                if reach.major:
                    end_ = dom.add(end_, dom.mul(leaf(reach.stride, False)[1], dom.const(reach.major)))
                    p.in_range(leaf(reach.stride, False), 0, _M31)
                checks.append(dom.and_(dom.le(dom.const(0), lo),
                                       dom.lt(dom.add(end_, dom.const(reach.minor)), count64)))
        ok = dom.and_(*p.fits, *checks)
        ok = dom.or_(dom.not_(runs), ok) if ok is not True else True
        l_fast, l_slow, l_merge = ctx.new_label(), ctx.new_label(), ctx.new_label()
        b.emit("OpSelectionMerge", l_merge, "None")
        b.emit("OpBranchConditional", ok if ok is not True else ctx.emit("OpIEqual", bool_,
               dom.const(0), dom.const(0)), l_fast, l_slow)
        ends = []
        for label, hoisted in ((l_fast, {o for o, _ in hoist}), (l_slow, set())):
            ctx.begin_block(label)
            saved = self.hoisted
            self.hoisted, self.depth = saved | hoisted, self.depth + 1
            try:
                lower_loop()
            finally:
                self.hoisted, self.depth = saved, self.depth - 1
            ends.append(([ctx.id(r) for r in op.results], ctx.current_label))
            b.emit("OpBranch", l_merge)
        ctx.begin_block(l_merge)
        (fast, l1), (slow, l2) = ends
        for r, a, c in zip(op.results, fast, slow):
            ctx.set(r, ctx.emit("OpPhi", r.type, a, l1, c, l2))

    def _count(self, mem: Value):
        """(id of the u32 element count, how the runtime names the memory, per-workgroup note)."""
        if isinstance(mem.type, SharedArrayType):
            return self.ctx.const(u32, mem.type.length), "shared array", " per workgroup"
        return self.counts[mem], f"buffer '{self.names[mem]}'", ""

    # ---------------------------------------------------------------- NV tensors
    def _tensor_guard(self, reach: TensorReach, count: int):
        """(in bounds, (first index, last - first) as 64-bit ids) of a tensor access."""
        ctx = self.ctx
        dom = SpvInts(ctx)
        p = Pairs(dom)
        ttype, steps = layout_chain(reach.layout)
        leaf = lambda v, signed32: p.point(dom.extend(ctx.id(v), v.type, signed32))  # noqa: E731
        ok, lo, hi = self._tensor_ok(p, reach, ttype, steps, leaf, dom.extend(count, u32))
        return ok, (lo, dom.sub(hi, lo))

    def _tensor_ok(self, p: Pairs, reach: TensorReach, ttype, steps, leaf, count64: int):
        d = p.d
        accessed, lo, hi = tensor_range(p, ttype, steps, leaf, reach.rows, reach.cols,
                                        reach.view is not None, reach.store)
        inside = d.and_(d.le(d.const(0), lo), d.lt(d.add(hi, d.const(reach.extra)), count64))
        if accessed is not True:
            inside = d.or_(d.not_(accessed), inside)
        return d.and_(*p.fits, inside), lo, hi

    def _record_words(self, op_id: int, words, count: int) -> None:
        """Record a tensor fault: first index (64-bit, signed) and the extent to the last."""
        ctx = self.ctx
        lo, extent = words
        lo_w = ctx.emit("OpUConvert", u32, lo)
        hi_w = ctx.emit("OpUConvert", u32, ctx.emit("OpShiftRightLogical", u64, lo, ctx.const(u32, 32)))
        self._write_record(op_id, [lo_w, hi_w, count, ctx.emit("OpUConvert", u32, extent),
                                   ctx.const(u32, 1)])

    def _u32(self, idx: int, t: ScalarType) -> int:
        """The index as u32 (a negative one becomes huge, hence out of bounds); 64-bit indices
        are compared in 64 bits by _in_bounds."""
        ctx = self.ctx
        if t.bits < 32:
            idx = ctx.emit("OpSConvert" if t.signed else "OpUConvert",
                           i32 if t.signed else u32, idx)
        if t.bits <= 32:
            return idx if not t.signed else ctx.emit("OpBitcast", u32, idx)
        return ctx.emit("OpUConvert", u32, ctx.emit("OpBitcast", u64, idx)
                        if t.signed else idx)

    def _in_bounds(self, first: int, idx: int, idx_t: ScalarType, count: int, reach: Reach) -> int:
        """index < count, and the reach's last element too, without overflow:
        minor <= count - 1 - index and stride * major <= count - 1 - index - minor."""
        ctx = self.ctx
        if idx_t.bits == 64:
            wide = ctx.emit("OpBitcast", u64, idx) if idx_t.signed else idx
            ok = ctx.emit("OpULessThan", bool_, wide, ctx.emit("OpUConvert", u64, count))
        else:
            ok = ctx.emit("OpULessThan", bool_, first, count)
        if reach.major == 0 and reach.minor == 0:
            return ok
        # room after the first element (garbage when !ok, which the final And discards)
        room = ctx.emit("OpISub", u32, ctx.emit("OpISub", u32, count, first), ctx.const(u32, 1))
        if reach.minor:
            ok = ctx.emit("OpLogicalAnd", bool_, ok,
                          ctx.emit("OpULessThanEqual", bool_, ctx.const(u32, reach.minor), room))
            room = ctx.emit("OpISub", u32, room, ctx.const(u32, reach.minor))
        if reach.major:
            stride = self._stride(reach.stride)
            limit = ctx.emit("OpUDiv", u32, room, ctx.const(u32, reach.major))
            ok = ctx.emit("OpLogicalAnd", bool_, ok,
                          ctx.emit("OpULessThanEqual", bool_, stride, limit))
        return ok

    def _stride(self, v: Value) -> int:
        """The stride as u32 (negative: huge, so the guard fails); a 64-bit stride past 2**32
        saturates to u32's maximum."""
        ctx, t, sid = self.ctx, v.type, self.ctx.id(v)
        if t.bits < 32:
            sid = ctx.emit("OpSConvert" if t.signed else "OpUConvert", i32 if t.signed else u32, sid)
        if t.bits <= 32:
            return ctx.emit("OpBitcast", u32, sid) if t.signed else sid
        wide = ctx.emit("OpBitcast", u64, sid) if t.signed else sid
        big = ctx.emit("OpUGreaterThan", bool_, wide, ctx.const(u64, 0xFFFFFFFF))
        return ctx.emit("OpSelect", u32, big, ctx.const(u32, 0xFFFFFFFF),
                        ctx.emit("OpUConvert", u32, wide))

    def _record(self, op_id: int, first: int, idx: int, idx_t: ScalarType, count: int,
                reach: Reach) -> None:
        """Keep this violation if it is the launch's first: op id, workgroup, invocation,
        index, element count, extent."""
        ctx = self.ctx
        values = [first]
        if idx_t.bits == 64:
            wide = ctx.emit("OpBitcast", u64, idx) if idx_t.signed else idx
            values.append(ctx.emit("OpUConvert", u32, ctx.emit("OpShiftRightLogical", u64, wide,
                                                                ctx.const(u32, 32))))
        elif idx_t.signed:      # the sign word of a narrower signed index
            values.append(ctx.emit("OpShiftRightArithmetic", u32, first, ctx.const(u32, 31)))
        else:
            values.append(ctx.const(u32, 0))
        values.append(count)
        if reach.major:
            extent = ctx.emit("OpIAdd", u32, ctx.emit("OpIMul", u32, self._stride(reach.stride),
                                                      ctx.const(u32, reach.major)),
                              ctx.const(u32, reach.minor))
        else:
            extent = ctx.const(u32, reach.minor)
        values.append(extent)
        values.append(ctx.const(u32, int(idx_t.signed)))
        self._write_record(op_id, values)

    def _write_record(self, op_id: int, words: list[int]) -> None:
        """Keep this violation if it is the launch's first: op id, workgroup, invocation, then
        `words` (index low/high, element count, extent, signed)."""
        ctx, b = self.ctx, self.ctx.b
        word = ctx.ptr_type(u32, StorageClass.PhysicalStorageBuffer)

        def slot(i: int) -> int:
            return b.emit("OpAccessChain", word, self.fault, ctx.const(u32, 0), ctx.const(u32, i))

        # QueueFamily scope: Device scope would need VulkanMemoryModelDeviceScope
        old = ctx.emit("OpAtomicCompareExchange", u32, slot(0),
                       ctx.const(u32, ctx.enum("Scope", "QueueFamily")), ctx.const(u32, 0),
                       ctx.const(u32, 0), ctx.const(u32, op_id + 1), ctx.const(u32, 0))
        won = ctx.emit("OpIEqual", bool_, old, ctx.const(u32, 0))
        l_won, l_done = ctx.new_label(), ctx.new_label()
        b.emit("OpSelectionMerge", l_done, "None")
        b.emit("OpBranchConditional", won, l_won, l_done)
        ctx.begin_block(l_won)
        wg = ctx.builtin_value("WorkgroupId", True)
        vec = ctx.type_id(u32)
        values = [b.emit("OpCompositeExtract", vec, wg, i) for i in range(3)]
        values.append(ctx.builtin_value("LocalInvocationIndex", False))
        for i, v in enumerate(values + list(words), start=1):
            b.emit("OpStore", slot(i), v, *ctx.memory_access(4))
        b.emit("OpBranch", l_done)
        ctx.begin_block(l_done)

    def _zero(self, t) -> int:
        """What a suppressed load yields: zero of its type (a matrix: filled with zeros)."""
        b, ctx = self.ctx.b, self.ctx
        if isinstance(t, CoopMatType):
            return b.constant_composite(ctx.type_id(t), [b.constant_null(ctx.type_id(t.component))])
        return b.constant_null(ctx.type_id(t))


_INTERVAL_OPS = ("add", "sub", "mul", "div", "rem", "min", "max")


def _walk(regions):
    for blk in regions:
        for o in blk.ops:
            yield o
            yield from _walk(o.regions or ())


def _defined_inside(op: Op) -> set:
    """Values defined in the regions of `op` (block arguments and op results)."""
    out = set()
    for blk in op.regions:
        out.update(blk.args)
        for o in blk.ops:
            out.update(o.results)
            if o.regions:
                out |= _defined_inside(o)
    return out


def _counted_loop(op: Op):
    """(carried index j, start, stop, step) of `loop` op whose condition is `arg_j < stop` and
    whose body ends by yielding arg_j + step (stop, step defined before the loop or constants),
    for a 32-bit integer arg_j; else None."""
    if op.name != "loop" or len(op.regions) != 2:
        return None
    cond, body = op.regions
    if not cond.ops or cond.ops[-1].name != "condition" or not body.ops or body.ops[-1].name != "yield":
        return None
    c = cond.ops[-1].operands[0]
    if c.op is None or c.op.name != "compare" or c.op.attrs.get("kind") != "lt":
        return None
    arg, stop = c.op.operands
    # found by identity: `in` and `.index` would compare Values with ==, which records an op
    j = next((i for i, a in enumerate(cond.args) if a is arg), None)
    if j is None or not isinstance(arg.type, ScalarType) or not arg.type.is_int \
            or arg.type.bits != 32:
        return None
    nxt = body.ops[-1].operands[j]
    if nxt.op is None or nxt.op.name != "binary" or nxt.op.attrs.get("kind") != "add" \
            or nxt.op.operands[0] is not body.args[j]:
        return None
    step = nxt.op.operands[1]
    inside = _defined_inside(op)
    for v in (stop, step):
        if v in inside and (v.op is None or v.op.name != "const"):
            return None
    return j, op.operands[j], stop, step


def _analysable(reach, inside: set, k: Value) -> bool:
    """Whether every value `reach` depends on is k, a value defined before the loop, or
    constants and `_INTERVAL_OPS` of such values (32-bit integers)."""
    def ok(v: Value) -> bool:
        if not isinstance(v.type, ScalarType) or not v.type.is_int or v.type.bits > 32:
            return False
        if v is k or v not in inside:
            return True
        if v.op is None:
            return False
        if v.op.name == "const":
            return True
        return v.op.name == "binary" and v.op.attrs.get("kind") in _INTERVAL_OPS \
            and all(ok(x) for x in v.op.operands)
    if isinstance(reach, TensorReach):
        chain = layout_chain(reach.layout)
        return chain is not None and all(ok(x) for s in chain[1] for x in s.operands[1:])
    return ok(reach.index) and (reach.stride is None or ok(reach.stride))


class _LoopLeaves:
    """leaf(value, signed32) -> (lo, hi) over every iteration of a versioned loop: k's range,
    invariant values as points, arithmetic inside the loop by interval arithmetic, each result
    checked to fit its 32-bit type (so the 32-bit arithmetic of the loop did not wrap)."""

    def __init__(self, p: Pairs, ctx, inside: set, cache: dict):
        self.p, self.ctx, self.inside, self.cache = p, ctx, inside, cache

    def __call__(self, v: Value, signed32: bool):
        r = self._of(v)
        if signed32 and not v.type.signed:            # a u32 read as int32_t: below 2**31
            self.p.in_range(r, None, _M31)
        return r

    def _of(self, v: Value):
        if v in self.cache:
            return self.cache[v]
        p, d = self.p, self.p.d
        if v not in self.inside:
            r = p.point(d.extend(self.ctx.id(v), v.type))
        elif v.op.name == "const":
            r = p.const(int(v.op.attrs["value"]))
        else:
            a, b = (self._of(x) for x in v.op.operands)
            r = getattr(p, v.op.attrs["kind"])(a, b)
            t = v.type
            lo, hi = (-(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1) if t.signed else (0, (1 << t.bits) - 1)
            p.in_range(r, lo, hi)
        self.cache[v] = r
        return r


def param_names(module) -> dict:
    return {p: n for p, n in zip(module.kernel.params, module.param_names)
            if isinstance(p.type, BufferType)}
