"""The argument ABI of compiled kernels (Vulkan target).

No descriptor sets: every parameter lives in one push-constant block, in declaration order at
its natural alignment — buffers as 64-bit device addresses (PhysicalStorageBuffer pointers),
scalars by value. When the block exceeds 128 bytes (the minimum maxPushConstantsSize Vulkan
guarantees) the same block is placed in an argument buffer whose device address is the only
push constant.
"""
from __future__ import annotations

from ..types import BufferType, ScalarType, Type, VectorType

PUSH_CONSTANT_LIMIT = 128


def _member(t: Type) -> tuple[int, int, str]:
    """(size, alignment, dtype name) of a parameter in the argument block."""
    if isinstance(t, BufferType):
        # buffers of blocks (structs) travel as raw bytes, vectors as their components
        return 8, 8, str(t.elem.dtype) if isinstance(t.elem, (ScalarType, VectorType)) else "uint8"
    assert isinstance(t, ScalarType)
    size = 4 if t.is_bool else t.size
    return size, size, "uint32" if t.is_bool else str(t.dtype)


def layout(names: list[str], types: list[Type], checked: bool = False) -> dict:
    """`checked`: after the parameters, the fault record's address (u64) and each buffer's
    element count (u32, in buffer order), under the layout's "checked" key."""
    args, off = [], 0
    for name, t in zip(names, types):
        size, align, dtype = _member(t)
        off = (off + align - 1) // align * align
        entry = {"name": name, "kind": "buffer" if isinstance(t, BufferType) else "scalar",
                 "offset": off, "dtype": dtype}
        if isinstance(t, BufferType):
            entry["access"] = t.access
            if isinstance(t.elem, VectorType):
                entry["components"] = t.elem.count
        args.append(entry)
        off += size
    extra = None
    if checked:
        off = (off + 7) // 8 * 8
        extra = {"fault_offset": off, "counts": [], "ops": []}
        off += 8
        for name, t in zip(names, types):
            if isinstance(t, BufferType):
                extra["counts"].append({"name": name, "offset": off, "elem_size": t.elem.size})
                off += 4
    size = (off + 7) // 8 * 8
    out = {"mode": "push_constants" if size <= PUSH_CONSTANT_LIMIT else "arg_buffer",
           "size": size, "args": args}
    if extra is not None:
        out["checked"] = extra
    return out
