"""Loads through PhysicalStorageBuffer pointers: the pointer a decode function receives to
its block. `p.field` loads a scalar member, `p.field[i]` an element of an array member,
`p[i]` element i of a scalar block (OpAccessChain / OpPtrAccessChain + OpLoad Aligned).

Emulator: a pointer is a PointerArray (memory + byte address per element); loads read the
bytes at address + offset and are bounds-checked against the buffer.
"""
from __future__ import annotations

import numpy as np

from ..errors import CompileError, EmulatorError, current_loc
from ..ir.builder import emit1
from ..ir.core import Value
from ..types import ArrayType, PointerType, ScalarType, StructType, u32
from .core import as_value
from ..ir.registry import define, emulation, lowering


def _infer_ptr_load(operands, attrs, regions, loc):
    return [attrs["type"]]


define("ptr.load", _infer_ptr_load,
       doc="Load a scalar through a PhysicalStorageBuffer pointer at a struct member (and "
           "array element) or a scalar element index.")


@emulation("ptr.load")
def _emu_ptr_load(ctx, op, ptr, *index):
    t: ScalarType = op.attrs["type"]
    addr = ptr.byte_addr.astype(np.int64) + op.attrs["offset"]
    if index:
        addr = addr + index[0].astype(np.int64) * op.attrs["stride"]
    mem = ptr.memory.data.view(np.uint8)
    bad = (addr < 0) | (addr + t.size > mem.shape[0])
    if ctx.mask is not None:
        bad &= np.broadcast_to(ctx.mask, bad.shape)
    if bad.any():
        raise EmulatorError(f"load through a pointer out of bounds of buffer '{ptr.memory.name}' "
                            f"({mem.shape[0]} bytes)", op.loc, rule="reported by the pycoop emulator",
                            hint="give the layout the dimensions of the buffer of blocks",
                            rule_id="emulator.out-of-bounds")
    addr = np.clip(addr, 0, max(mem.shape[0] - t.size, 0))
    raw = mem[addr[..., None] + np.arange(t.size)]
    return np.ascontiguousarray(raw).view(t.dtype)[..., 0]


@lowering("ptr.load")
def _lower_ptr_load(ctx, op):
    t = op.attrs["type"]
    ptr = op.operands[0]
    p = ctx.ptr_type(t, ptr.type.storage)
    path = [ctx.const(u32, i) for i in op.attrs["path"]]
    if op.attrs["scalar_block"]:
        chain = ctx.emit_raw("OpPtrAccessChain", p, ctx.id(ptr), ctx.id(op.operands[1]))
    else:
        idx = [ctx.id(op.operands[1])] if len(op.operands) > 1 else []
        chain = ctx.emit_raw("OpAccessChain", p, ctx.id(ptr), *path, *idx)
    ctx.set(op.result, ctx.emit("OpLoad", t, chain, "Aligned", t.size))


class _ArrayMember:
    """`p.field` for an array member: index it to load an element."""

    def __init__(self, ptr: Value, member: int, offset: int, t: ArrayType):
        self.ptr, self.member, self.offset, self.t = ptr, member, offset, t

    def __getitem__(self, i):
        loc = current_loc()
        if not isinstance(self.t.elem, ScalarType):
            raise CompileError("nested arrays in blocks are not supported", loc,
                               rule="pycoop: arrays in buffer blocks are one-dimensional",
                               hint="flatten the array: one dimension, indexed row * n + col",
                               rule_id="pointer.nested-array")
        idx = as_value(i, u32)
        return emit1("ptr.load", [self.ptr, idx],
                     {"type": self.t.elem, "offset": self.offset, "stride": self.t.elem.size,
                      "path": (self.member,), "scalar_block": False}, loc)

    def __len__(self) -> int:
        return self.t.length


def member(ptr: Value, name: str):
    t: PointerType = ptr.type
    st = t.pointee
    loc = current_loc()
    if not isinstance(st, StructType):
        raise AttributeError(name)
    names = [n for n, _ in st.fields]
    if name not in names:
        raise CompileError(f"{st.name} has no member {name!r} (members: {', '.join(names)})", loc,
                           rule="SPIR-V: OpAccessChain indexes name a member of the struct",
                           hint="use one of the struct's member names",
                           rule_id="pointer.member-name")
    i = names.index(name)
    ft = st.fields[i][1]
    off = st.offsets[i]
    if isinstance(ft, ArrayType):
        return _ArrayMember(ptr, i, off, ft)
    if not isinstance(ft, ScalarType):
        raise CompileError(f"member {name} of type {ft} cannot be loaded directly", loc,
                           rule="SPIR-V: OpLoad through a pointer loads a scalar, vector or array member "
                                "(pycoop: index nested structs member by member)",
                           hint="index the nested struct's members one by one (p.inner.x)",
                           rule_id="pointer.member-load")
    return emit1("ptr.load", [ptr], {"type": ft, "offset": off, "stride": 0, "path": (i,),
                                     "scalar_block": False}, loc)


def element(ptr: Value, i) -> Value:
    t: PointerType = ptr.type
    if not isinstance(t.pointee, ScalarType):
        raise CompileError(f"index the members of {t.pointee} by name", current_loc(),
                           rule="SPIR-V: struct members are selected with constant indexes (pycoop: by "
                                "name)",
                           hint="read a member by name: block_ptr.d, block_ptr.qs[i]",
                           rule_id="pointer.member-by-name")
    return emit1("ptr.load", [ptr, as_value(i, u32)],
                 {"type": t.pointee, "offset": 0, "stride": t.pointee.size, "path": (),
                  "scalar_block": True})
