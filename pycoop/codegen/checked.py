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
element, with the span the emulator uses (`ops.khr_layout.MatrixLayout.span`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Op, Value
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


class Guards:
    """Checked lowering state of one module (LowerCtx.checks)."""

    def __init__(self, ctx, names: dict):
        self.ctx = ctx
        self.names = names              # buffer parameter Value -> its name
        self.counts: dict = {}          # buffer parameter Value -> id of its u32 element count
        self.fault: int | None = None   # id of the fault record pointer
        self.ops: list[dict] = []       # op id -> what the runtime reports

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
        """Lower `op` (by `lower_access()`) inside a guard on `reach`."""
        ctx, b = self.ctx, self.ctx.b
        mem = reach.memory
        if isinstance(mem.type, SharedArrayType):
            count, label = ctx.const(u32, mem.type.length), "shared array"
            unit = " per workgroup"
        else:
            count, label, unit = self.counts[mem], f"buffer '{self.names[mem]}'", ""
        op_id = len(self.ops)
        self.ops.append({"file": op.loc.file if op.loc else "<unknown>",
                         "line": op.loc.line if op.loc else 0, "col": op.loc.col if op.loc else 0,
                         "what": reach.what, "memory": label, "per": unit,
                         "block": reach.major > 0 or reach.minor > 0})
        idx, idx_t = ctx.id(reach.index), reach.index.type
        first = self._u32(idx, idx_t)
        ok = self._in_bounds(first, idx, idx_t, count, reach)
        l_ok, l_bad, l_merge = ctx.new_label(), ctx.new_label(), ctx.new_label()
        b.emit("OpSelectionMerge", l_merge, "None")
        b.emit("OpBranchConditional", ok, l_ok, l_bad)
        ctx.begin_block(l_ok)
        lower_access()
        ok_end = ctx.current_label
        b.emit("OpBranch", l_merge)
        ctx.begin_block(l_bad)
        self._record(op_id, first, idx, idx_t, count, reach)
        bad_end = ctx.current_label
        b.emit("OpBranch", l_merge)
        ctx.begin_block(l_merge)
        if op.results:
            r = op.results[0]
            loaded = ctx.id(r)
            ctx.set(r, ctx.emit("OpPhi", r.type, loaded, ok_end, self._zero(r.type), bad_end))

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
        values.append(first)
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
        for i, v in enumerate(values, start=1):
            b.emit("OpStore", slot(i), v, *ctx.memory_access(4))
        b.emit("OpBranch", l_done)
        ctx.begin_block(l_done)

    def _zero(self, t) -> int:
        """What a suppressed load yields: zero of its type (a matrix: filled with zeros)."""
        b, ctx = self.ctx.b, self.ctx
        if isinstance(t, CoopMatType):
            return b.constant_composite(ctx.type_id(t), [b.constant_null(ctx.type_id(t.component))])
        return b.constant_null(ctx.type_id(t))


def param_names(module) -> dict:
    return {p: n for p, n in zip(module.kernel.params, module.param_names)
            if isinstance(p.type, BufferType)}
