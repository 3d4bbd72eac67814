"""The argument ABIs of compiled kernels (Vulkan target), as the JSON sidecar describes them.

"device_address" (the default, what `kernel[grid](...)` launches): no descriptor sets; every
parameter lives in one push-constant block, in declaration order at its natural alignment —
buffers as 64-bit device addresses (PhysicalStorageBuffer pointers), scalars by value. When the
block exceeds 128 bytes (the minimum maxPushConstantsSize Vulkan guarantees) the same block is
placed in an argument buffer whose device address is the only push constant.

"descriptors": what conventional Vulkan applications bind. Each buffer parameter is a
StorageBuffer descriptor of set 0, binding = its index among the buffer parameters; scalars
keep their declaration order in the push-constant block (no argument buffer: over 128 bytes of
scalars is a CompileError). Needs no bufferDeviceAddress.

Either way, specialization constants (pycoop.Spec parameters) are listed with their SpecId.
"""
from __future__ import annotations

from ..errors import ArgumentValueError, CompileError
from ..types import BufferType, ScalarType, Type, VectorType

PUSH_CONSTANT_LIMIT = 128
ABIS = ("device_address", "descriptors")


def check_abi(abi: str) -> str:
    """`abi` if it is one of ABIS (a value pycoop does not take: ArgumentValueError, which
    is a ValueError too)."""
    if abi not in ABIS:
        raise ArgumentValueError(f"abi must be one of {ABIS}, got {abi!r}")
    return abi


def _member(t: Type) -> tuple[int, int, str]:
    """(size, alignment, dtype name) of a parameter in the argument block."""
    if isinstance(t, BufferType):
        # buffers of blocks (structs) travel as raw bytes, vectors as their components
        return 8, 8, str(t.elem.dtype) if isinstance(t.elem, (ScalarType, VectorType)) else "uint8"
    assert isinstance(t, ScalarType)
    size = 4 if t.is_bool else t.size
    return size, size, "uint32" if t.is_bool else str(t.dtype)


def layout(names: list[str], types: list[Type], abi: str = "device_address",
           checked: bool = False) -> dict:
    """`checked` (device-address ABI): after the parameters, the fault record's address (u64)
    and each buffer's element count (u32, in buffer order), under the layout's "checked" key."""
    descriptors = check_abi(abi) == "descriptors"
    if descriptors and checked:
        raise ValueError("checked modules use the device-address ABI")
    args, off, binding = [], 0, 0
    for name, t in zip(names, types):
        size, align, dtype = _member(t)
        entry = {"name": name, "kind": "buffer" if isinstance(t, BufferType) else "scalar"}
        if descriptors and isinstance(t, BufferType):
            entry.update({"set": 0, "binding": binding, "descriptor_type": "storage_buffer"})
            binding += 1
        else:
            off = (off + align - 1) // align * align
            entry["offset"] = off
            off += size
        entry["dtype"] = dtype
        if isinstance(t, BufferType):
            entry["access"] = t.access
            if isinstance(t.elem, VectorType):
                entry["components"] = t.elem.count
        args.append(entry)
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
    if descriptors:
        if size > PUSH_CONSTANT_LIMIT:
            raise CompileError(
                f"the scalar parameters take {size} bytes of push constants",
                rule="Vulkan guarantees maxPushConstantsSize >= 128 bytes; the descriptor ABI "
                     "keeps scalars in push constants",
                hint="pass some scalars in a small buffer, or use the device-address ABI",
                rule_id="target.descriptor-push-constants")
        return {"abi": "descriptors", "mode": "push_constants", "size": size, "args": args}
    out = {"abi": "device_address",
           "mode": "push_constants" if size <= PUSH_CONSTANT_LIMIT else "arg_buffer",
           "size": size, "args": args}
    if extra is not None:
        out["checked"] = extra
    return out


def spec_constants(module) -> list[dict]:
    """The sidecar's `spec_constants`: name, SpecId, dtype and the module's default value."""
    out = []
    for op in module.walk():
        if op.name == "spec_constant":
            t = op.attrs["type"]
            out.append({"name": op.attrs["name"], "id": op.attrs["spec_id"],
                        "dtype": "bool" if t.is_bool else str(t.dtype),
                        "size": 4 if t.is_bool else t.size, "default": op.attrs["value"]})
    return sorted(out, key=lambda e: e["id"])
