"""Atomic read-modify-write operations on buffer and shared-array elements, as
`pycoop.atomic.*`: add, sub, min, max, and, or, xor, exchange, compare-exchange (integers of 32
and 64 bits) and float add/min/max (f16, f32, f64 where the device has
VK_EXT_shader_atomic_float / _float2). Each returns the element's value before the operation.

Memory model (Vulkan memory model, which every pycoop module declares): the memory scope is
Device for buffers and Workgroup for shared arrays; the semantics are Relaxed unless
`semantics=` asks for "acquire", "release" or "acq_rel" (then with the storage class's memory
bit and MakeVisible / MakeAvailable, so plain accesses are ordered too).

The emulator applies the atomics of one op in invocation order (workgroup by workgroup, then
by local invocation index) and several ops in program order. For add/sub/min/max/and/or/xor on
integers every order gives the same memory contents (the returned old values follow that
order); for exchange, compare-exchange and float adds a GPU may use another order: which
invocation wins, and the rounding of float sums, may then differ. A plain load or store of an
element that another invocation accesses atomically (in the same dispatch for buffers, between
the same barriers for shared arrays) is a data race, reported at the line.
"""
from __future__ import annotations

import numpy as np

from ..errors import CompileError, Loc, current_loc
from ..ir.builder import emit1
from ..ir.core import Value
from ..types import BufferType, ScalarType, SharedArrayType, u32
from ..codegen import extensions
from ..codegen.checked import element
from .core import as_value, check_readable, check_shared_index, index_value
from ..ir.registry import define, emulation, lowering

__all__ = ["add", "sub", "min", "max", "and_", "or_", "xor", "exchange", "compare_exchange"]

# kind: (integer opcode(s) signed / unsigned, float opcode or None, NumPy ufunc(s) int / float)
KINDS = {
    "add": ("OpAtomicIAdd", "OpAtomicIAdd", "OpAtomicFAddEXT"),
    "sub": ("OpAtomicISub", "OpAtomicISub", None),
    "min": ("OpAtomicSMin", "OpAtomicUMin", "OpAtomicFMinEXT"),
    "max": ("OpAtomicSMax", "OpAtomicUMax", "OpAtomicFMaxEXT"),
    "and": ("OpAtomicAnd", "OpAtomicAnd", None),
    "or": ("OpAtomicOr", "OpAtomicOr", None),
    "xor": ("OpAtomicXor", "OpAtomicXor", None),
    "exchange": ("OpAtomicExchange", "OpAtomicExchange", None),
    "compare_exchange": ("OpAtomicCompareExchange", "OpAtomicCompareExchange", None),
}
# the float atomics' extensions (each capability's device feature is named by the lowering:
# it depends on the memory, buffer or shared)
for _ext, _vk in (("SPV_EXT_shader_atomic_float_add", "VK_EXT_shader_atomic_float"),
                  ("SPV_EXT_shader_atomic_float_min_max", "VK_EXT_shader_atomic_float2"),
                  ("SPV_EXT_shader_atomic_float16_add", "VK_EXT_shader_atomic_float2")):
    extensions.register(extensions.Extension(_ext, vulkan=_vk))

# float capability (by bits) and the Vulkan feature name stem of the float kinds
_FLOAT_CAPS = {"add": ("AtomicFloat{}AddEXT", "Float{}AtomicAdd"),
               "min": ("AtomicFloat{}MinMaxEXT", "Float{}AtomicMinMax"),
               "max": ("AtomicFloat{}MinMaxEXT", "Float{}AtomicMinMax")}
SEMANTICS = ("relaxed", "acquire", "release", "acq_rel")


def _infer_atomic(operands, attrs, regions, loc):
    mem, idx = operands[:2]
    kind = attrs["kind"]
    if not isinstance(mem.type, (BufferType, SharedArrayType)):
        _not_memory(kind, mem.type, loc)
    if isinstance(mem.type, BufferType):
        check_readable(mem, loc)
        if mem.type.access == "read":
            raise CompileError("cannot apply an atomic operation to a read-only buffer", loc,
                               rule="ReadBuffer parameters are NonWritable",
                               hint="annotate the parameter pycoop.Buffer[...]",
                               rule_id="core.read-only-store")
    if not (isinstance(idx.type, ScalarType) and idx.type.is_int):
        raise CompileError(f"index must be an integer, not {idx.type}", loc,
                           rule="array indices are integers", hint="cast it, e.g. u32(i)",
                           rule_id="core.index-integer")
    t = mem.type.elem
    ok_int = isinstance(t, ScalarType) and t.is_int and t.bits in (32, 64)
    ok_float = (isinstance(t, ScalarType) and t.is_float and t.encoding is None
                and KINDS[kind][2] is not None)
    if not (ok_int or ok_float):
        floats = ", ".join(k for k, v in KINDS.items() if v[2])
        raise CompileError(f"atomic {kind} is not available on elements of type {t}", loc,
                           rule="SPIR-V/Vulkan: atomics take 32- or 64-bit integers; float atomics "
                                "(VK_EXT_shader_atomic_float/_float2) are add, min and max on "
                                "f16, f32 and f64",
                           hint=f"use a u32/i32/u64/i64 array, or one of {floats} on floats",
                           rule_id="atomic.element-type")
    for v in operands[2:]:
        if v.type != t:
            raise CompileError(f"atomic {kind} on {t} elements got a {v.type} operand", loc,
                               rule="SPIR-V: the Value's type must be the pointee type",
                               hint=f"cast it: {t}(value)", rule_id="atomic.value-type")
    check_shared_index(mem, idx, loc)
    return [t]


define("atomic", _infer_atomic, writes=0, atomic=True, bounds=element("atomic operation"),
       doc="An atomic read-modify-write of one element (OpAtomicIAdd, ISub, S/UMin, S/UMax, And, "
           "Or, Xor, Exchange, CompareExchange, FAddEXT, FMinEXT, FMaxEXT); the old value.")


def _semantics(ctx, shared: bool, which: str) -> int:
    if which == "relaxed":
        return ctx.const(u32, 0)
    bits = {"acquire": "Acquire|MakeVisible", "release": "Release|MakeAvailable",
            "acq_rel": "AcquireRelease|MakeAvailable|MakeVisible"}[which]
    storage = "WorkgroupMemory" if shared else "UniformMemory"
    return ctx.const(u32, ctx.enum("MemorySemantics", f"{bits}|{storage}"))


@lowering("atomic")
def _lower_atomic(ctx, op):
    mem, idx = op.operands[:2]
    kind, t = op.attrs["kind"], op.result.type
    if ctx.target != "vulkan":
        raise CompileError("atomics are not available in OpenCL-environment kernels", op.loc,
                           rule="pycoop emits atomics for the Vulkan target only",
                           hint="use atomics in kernels without pycoop.intel ops",
                           rule_id="atomic.vulkan-only")
    shared = isinstance(mem.type, SharedArrayType)
    where = "Shared" if shared else "Buffer"
    if t.is_float:
        cap, feature = (s.format(t.bits) for s in _FLOAT_CAPS[kind])
        ctx.need(cap)
        ctx.features.add(f"shader{where}{feature}")
        opname = KINDS[kind][2]
    else:
        opname = KINDS[kind][0 if t.signed else 1]
        if t.bits == 64:
            ctx.need("Int64Atomics")
            ctx.features.add(f"shader{where}Int64Atomics")
    if not shared:
        ctx.need("VulkanMemoryModelDeviceScope")     # Device scope under the Vulkan memory model
    scope = ctx.const(u32, ctx.enum("Scope", "Workgroup" if shared else "Device"))
    sem = op.attrs["semantics"]
    ptr, _ = ctx.element_pointer(mem, idx)
    vals = [ctx.id(v) for v in op.operands[2:]]
    if kind == "compare_exchange":
        cmp, val = vals
        # the Unequal semantics may not release (spec): only its acquire part is kept
        unequal = {"release": "relaxed", "acq_rel": "acquire"}.get(sem, sem)
        r = ctx.emit(opname, t, ptr, scope, _semantics(ctx, shared, sem),
                     _semantics(ctx, shared, unequal), val, cmp)
    else:
        r = ctx.emit(opname, t, ptr, scope, _semantics(ctx, shared, sem), *vals)
    ctx.set(op.result, r)


def _ufunc(kind: str, t: ScalarType):
    if t.is_float:
        return {"add": np.add, "min": np.fmin, "max": np.fmax}[kind]
    return {"add": np.add, "sub": np.subtract, "min": np.minimum, "max": np.maximum,
            "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[kind]


def apply_in_order(kind: str, t: ScalarType, data: np.ndarray, flat: np.ndarray, vals: np.ndarray,
                   cmps: np.ndarray | None = None) -> np.ndarray:
    """Apply atomics to `data[flat[k]]` one after another for k = 0, 1, ... and return each
    one's old value. Vectorised: the accesses are grouped by element (stable, so each group
    keeps invocation order) and each group is folded left to right with the op's ufunc
    (`accumulate` along rows of groups padded to a power-of-two length, so padding costs at
    most twice the work); compare-exchange steps through the rows' columns."""
    n = len(flat)
    if n == 0:
        return vals[:0]
    order = np.argsort(flat, kind="stable")
    f, v = flat[order], vals[order]
    first = np.r_[True, f[1:] != f[:-1]]
    starts = np.flatnonzero(first)
    gid = np.cumsum(first) - 1
    lens = np.diff(np.r_[starts, n])
    rank = np.arange(n) - starts[gid]
    cur = data[f[starts]]
    old = np.empty_like(v)
    if kind == "exchange":
        prev = np.r_[v[:1], v[:-1]]
        old[:] = np.where(rank == 0, cur[gid], prev)
        final = v[starts + lens - 1]
    else:
        c = cmps[order] if cmps is not None else None
        final = np.empty_like(cur)
        cls = np.ceil(np.log2(lens)).astype(np.int64)
        pos = np.empty(len(starts), np.int64)
        for k in np.unique(cls):
            g = np.flatnonzero(cls == k)
            pos[g] = np.arange(len(g))
            sel = cls[gid] == k
            row, col = pos[gid[sel]], rank[sel]
            width = (1 << int(k)) + 1
            P = np.zeros((len(g), width), v.dtype)
            P[:, 0] = cur[g]
            P[row, col + 1] = v[sel]
            if kind == "compare_exchange":
                C = np.zeros((len(g), width), v.dtype)
                C[row, col + 1] = c[sel]
                acc = np.empty_like(P)
                acc[:, 0] = P[:, 0]
                live = np.arange(1, width)[None, :] <= lens[g][:, None]
                for j in range(1, width):
                    swap = live[:, j - 1] & (acc[:, j - 1] == C[:, j])
                    acc[:, j] = np.where(swap, P[:, j], acc[:, j - 1])
            else:
                with np.errstate(all="ignore"):
                    acc = _ufunc(kind, t).accumulate(P, axis=1)
            old[sel] = acc[row, col]
            final[g] = acc[np.arange(len(g)), lens[g]]
    data[f[starts]] = final
    out = np.empty_like(old)
    out[order] = old
    return out


@emulation("atomic")
def _emu_atomic(ctx, op, mem, idx, *vals):
    memory = ctx.memory_of(op.operands[0])
    flat, active = memory.atomic_access(ctx, op, idx)
    if not isinstance(op.operands[0].type, SharedArrayType):    # orders other workgroups'
        ctx.sync.atomic(active, op.attrs["semantics"])           # buffer accesses
    shape = ctx.dispatch.shape
    t = op.result.type
    per = [np.broadcast_to(v, shape)[active] if active is not None else np.broadcast_to(v, shape).reshape(-1)
           for v in vals]
    cmps, v = (per[0], per[1]) if op.attrs["kind"] == "compare_exchange" else (None, per[0])
    old = apply_in_order(op.attrs["kind"], t, memory.data, flat, v, cmps)
    out = np.zeros(shape, t.dtype)
    if active is None:
        out.reshape(-1)[:] = old
    else:
        out[active] = old
    return out


def _not_memory(kind: str, what, loc: Loc):
    raise CompileError(f"atomic {kind} needs a buffer or shared array, not {what}", loc,
                       rule="SPIR-V: the Pointer of an atomic points into StorageBuffer, "
                            "PhysicalStorageBuffer or Workgroup memory",
                       hint="pass the array and the index: pycoop.atomic.add(buf, i, v)",
                       rule_id="atomic.pointer")


def _atomic(kind: str, mem, idx, *vals, semantics: str) -> Value:
    loc = current_loc()
    if not isinstance(mem, Value):
        _not_memory(kind, f"a Python {type(mem).__name__}", loc)
    _check_semantics(semantics, loc)
    elem = mem.type.elem if isinstance(mem, Value) and isinstance(
        mem.type, (BufferType, SharedArrayType)) else None
    hint = {"add": "decrement with pycoop.atomic.sub(mem, i, 1)",
            "sub": "increment with pycoop.atomic.add(mem, i, 1)"}.get(kind)
    operands = [mem, index_value(idx)] + [as_value(v, elem, hint) for v in vals]
    return emit1("atomic", operands, {"kind": kind, "semantics": semantics}, loc)


def _check_semantics(semantics, loc: Loc) -> None:
    if semantics not in SEMANTICS:
        raise CompileError(f"unknown atomic semantics {semantics!r}", loc,
                           rule="pycoop atomics take Relaxed, Acquire, Release or AcquireRelease "
                                "semantics (Vulkan memory model)",
                           hint=f"one of {', '.join(map(repr, SEMANTICS))}", rule_id="atomic.semantics")


def add(mem, idx, value, *, semantics: str = "relaxed") -> Value:
    """mem[idx] += value atomically; the old value (integers wrap)."""
    return _atomic("add", mem, idx, value, semantics=semantics)


def sub(mem, idx, value, *, semantics: str = "relaxed") -> Value:
    """mem[idx] -= value atomically (integers); the old value."""
    return _atomic("sub", mem, idx, value, semantics=semantics)


def min(mem, idx, value, *, semantics: str = "relaxed") -> Value:  # noqa: A001
    """mem[idx] = min(mem[idx], value) atomically (signed or unsigned by the element type;
    floats: a NaN operand loses); the old value."""
    return _atomic("min", mem, idx, value, semantics=semantics)


def max(mem, idx, value, *, semantics: str = "relaxed") -> Value:  # noqa: A001
    """mem[idx] = max(mem[idx], value) atomically; the old value."""
    return _atomic("max", mem, idx, value, semantics=semantics)


def and_(mem, idx, value, *, semantics: str = "relaxed") -> Value:
    """mem[idx] &= value atomically (integers); the old value."""
    return _atomic("and", mem, idx, value, semantics=semantics)


def or_(mem, idx, value, *, semantics: str = "relaxed") -> Value:
    """mem[idx] |= value atomically (integers); the old value."""
    return _atomic("or", mem, idx, value, semantics=semantics)


def xor(mem, idx, value, *, semantics: str = "relaxed") -> Value:
    """mem[idx] ^= value atomically (integers); the old value."""
    return _atomic("xor", mem, idx, value, semantics=semantics)


def exchange(mem, idx, value, *, semantics: str = "relaxed") -> Value:
    """mem[idx] = value atomically (integers); the old value."""
    return _atomic("exchange", mem, idx, value, semantics=semantics)


def compare_exchange(mem, idx, expected, value, *, semantics: str = "relaxed") -> Value:
    """If mem[idx] == expected, mem[idx] = value, atomically (integers); the old value either
    way (the exchange happened when it equals `expected`)."""
    return _atomic("compare_exchange", mem, idx, expected, value, semantics=semantics)
