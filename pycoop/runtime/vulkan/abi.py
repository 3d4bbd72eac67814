"""Binding Python arguments to a compiled kernel's ABI: check everything, then pack.

The ABI dict comes from the compiler: `{"abi", "mode", "size", "args": [{"name", "kind",
"offset" | "set"/"binding", "dtype", "access"?}], "required_subgroup_size"}`. In the
device-address ABI buffers are u64 device addresses in the argument block; in the descriptor
ABI each buffer is a storage-buffer descriptor of set 0 at its `binding` and the block holds
only the scalars. Scalars are stored by value, little-endian. No Vulkan here: all checks run
before any GPU work, and every error names the parameter.
"""
from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import ArgumentError

# pycoop dtype names that numpy spells differently (ml_dtypes registers the float8/bfloat16 names).
_NUMPY_NAMES = {"float8_e4m3": "float8_e4m3fn", "bool": "bool"}
ACCESS = ("read", "write", "readwrite")
MODES = ("push_constants", "arg_buffer")
ABIS = ("device_address", "descriptors")


@functools.lru_cache(maxsize=None)
def numpy_dtype(name: str) -> np.dtype:
    try:
        import ml_dtypes  # noqa: F401  (registers bfloat16 / float8 dtype names)
    except ImportError:
        pass
    try:
        return np.dtype(_NUMPY_NAMES.get(name, name))
    except TypeError:
        raise ArgumentError(f"unknown dtype {name!r} in kernel ABI") from None


class DeviceView:
    """A buffer argument already in device memory (a `pycoop.Array` on Vulkan): `nbytes`
    bytes at byte `offset` of `allocation`, holding `dtype` elements. Launches pass its
    address, nothing is copied."""
    __slots__ = ("allocation", "offset", "nbytes", "dtype", "writeable")

    def __init__(self, allocation: Any, offset: int, nbytes: int, dtype: np.dtype,
                 writeable: bool = True):
        self.allocation, self.offset, self.nbytes = allocation, offset, nbytes
        self.dtype, self.writeable = dtype, writeable

    @property
    def address(self) -> int:
        return self.allocation.address + self.offset


@dataclass
class BufferBinding:
    """A numpy array or DeviceView bound to a buffer parameter; `address_offsets` are where its
    device address goes in the argument block, `bindings` the descriptor bindings (set 0) it
    is bound to in the descriptor ABI (the same array may be passed for several)."""
    array: np.ndarray | DeviceView
    names: list[str]
    address_offsets: list[int]
    upload: bool
    readback: bool
    bindings: list[int] = field(default_factory=list)


@dataclass
class BoundArguments:
    block: bytearray
    buffers: list[BufferBinding]

    def set_address(self, binding: BufferBinding, address: int) -> None:
        for offset in binding.address_offsets:
            self.block[offset:offset + 8] = address.to_bytes(8, "little")


def check_abi(abi: dict) -> None:
    """The ABI's kind (`abi`, default "device_address": sidecars before the descriptor ABI
    have no such key), mode and size are ones this runtime launches."""
    kind = abi.get("abi", "device_address")
    if kind not in ABIS:
        raise ArgumentError(f"kernel ABI {kind!r} is not one of {ABIS}")
    if abi.get("mode") not in MODES:
        raise ArgumentError(f"kernel ABI mode {abi.get('mode')!r} is not one of {MODES}")
    size = abi.get("size")
    if not isinstance(size, int) or size < 0:
        raise ArgumentError(f"kernel ABI size {size!r} is not a byte count")
    if kind == "descriptors":
        if abi["mode"] != "push_constants":
            raise ArgumentError("the descriptor ABI keeps its scalars in push constants, not "
                                f"in mode {abi['mode']!r}")
        if abi.get("checked"):
            raise ArgumentError("checked kernels use the device-address ABI, not descriptors")


_STRUCT_CODES = {"int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i",
                 "uint32": "I", "int64": "q", "uint64": "Q", "float16": "e", "float32": "f",
                 "float64": "d"}


_COUNT = struct.Struct("<I")


class Binder:
    """`bind` for one ABI, with the ABI checked and each parameter's packing worked out once
    (launches of a kernel reuse it: binding is on the hot path of every launch)."""

    def __init__(self, abi: dict):
        check_abi(abi)
        self.abi, self.size = abi, abi["size"]
        self.descriptors = abi.get("abi") == "descriptors"
        self.bindings = 0       # descriptor ABI: storage-buffer bindings of set 0
        self.names = [p["name"] for p in abi["args"]]
        # checked kernels: where each buffer's element count goes (abi "checked", see
        # docs/abi.md), and where the fault record's address goes
        self.checked = abi.get("checked")
        counts = {c["name"]: (c["offset"], c["elem_size"]) for c in self.checked["counts"]} \
            if self.checked else {}
        self.params = []
        for param in abi["args"]:
            name, kind = param["name"], param["kind"]
            dtype = numpy_dtype(param["dtype"])
            if self.descriptors and kind == "buffer":
                self.params.append((name, True, None, dtype, _access(param),
                                    None, self._binding(param)))
                continue
            offset = param["offset"]
            width = 8 if kind == "buffer" else dtype.itemsize
            if offset < 0 or offset + width > self.size:
                raise ArgumentError(f"parameter {name}: offset {offset} + {width} bytes is outside "
                                    f"the {self.size}-byte argument block")
            if kind == "buffer":
                self.params.append((name, True, offset, dtype, _access(param), counts.get(name),
                                    None))
            elif kind == "scalar":
                code = _STRUCT_CODES.get(dtype.name)
                packer = struct.Struct("<" + code) if code else None
                limits = (np.iinfo(dtype).min, np.iinfo(dtype).max) if dtype.kind in "iu" else None
                self.params.append((name, False, offset, dtype, limits, packer, dtype.kind))
            else:
                raise ArgumentError(f"parameter {name}: unknown kind {kind!r}")

    def _binding(self, param: dict) -> int:
        """A descriptor-ABI buffer's binding: set 0, bindings 0..n-1 in parameter order (the
        layout the pipeline's descriptor set layout is made with)."""
        if param.get("set", 0) != 0 or param.get("binding") != self.bindings or \
                param.get("descriptor_type", "storage_buffer") != "storage_buffer":
            raise ArgumentError(
                f"parameter {param['name']}: expected storage buffer set 0 binding "
                f"{self.bindings}, got {param.get('descriptor_type')} set {param.get('set')} "
                f"binding {param.get('binding')}")
        self.bindings += 1
        return self.bindings - 1

    def bind(self, args: list | tuple) -> BoundArguments:
        """Check `args` (count, kinds, dtypes, contiguity, scalar ranges) and build the
        argument block with zeroed addresses. Raises ArgumentError naming the parameter."""
        params = self.params
        if len(args) != len(params):
            names = self.names
            if len(args) < len(params):
                missing = ", ".join(names[len(args):])
                raise ArgumentError(f"missing argument(s) {missing}: kernel takes {len(params)} "
                                    f"({', '.join(names)}), got {len(args)}")
            raise ArgumentError(f"too many arguments: kernel takes {len(params)} "
                                f"({', '.join(names)}), got {len(args)}")
        block = bytearray(self.size)
        buffers: dict[tuple, BufferBinding] = {}
        for (name, is_buffer, offset, dtype, extra, packer, kind), value in zip(params, args):
            if is_buffer:       # `kind`: the descriptor binding (descriptor ABI)
                access = extra
                if type(value) is DeviceView:
                    array = _check_view(name, value, dtype, access)
                    key = (id(value.allocation), value.offset, value.nbytes, value.dtype.str)
                else:
                    array = _check_array(name, value, dtype, access)
                    key = (array.__array_interface__["data"][0], array.nbytes, array.dtype.str)
                binding = buffers.get(key)
                if binding is None:
                    binding = buffers[key] = BufferBinding(array, [], [], False, False)
                binding.names.append(name)
                if offset is None:
                    binding.bindings.append(kind)
                else:
                    binding.address_offsets.append(offset)
                binding.upload |= access != "write"
                binding.readback |= access != "read"
                if packer is not None:      # checked: the element count, saturated to u32
                    count_offset, elem_size = packer
                    _COUNT.pack_into(block, count_offset, min(array.nbytes // elem_size, 0xFFFFFFFF))
                continue
            # scalars: the common cases packed directly, everything else checked in full
            if packer is not None:
                if kind in "iu":
                    if type(value) is int and extra[0] <= value <= extra[1]:
                        packer.pack_into(block, offset, value)
                        continue
                elif type(value) is float:
                    try:
                        packer.pack_into(block, offset, value)
                        continue
                    except OverflowError:
                        pass
            block[offset:offset + dtype.itemsize] = _scalar_bytes(name, value, dtype)
        return BoundArguments(block, list(buffers.values()))


def bind(abi: dict, args: list | tuple) -> BoundArguments:
    """Check `args` against `abi` (count, kinds, dtypes, contiguity, scalar ranges) and build
    the argument block with zeroed addresses. Raises ArgumentError naming the parameter."""
    return Binder(abi).bind(args)


def _access(param: dict) -> str:
    access = param.get("access", "readwrite")
    if access not in ACCESS:
        raise ArgumentError(f"parameter {param['name']}: access {access!r} not in {ACCESS}")
    return access


def _check_array(name: str, value: Any, dtype: np.dtype, access: str) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise ArgumentError(f"parameter {name}: expected a numpy array of {dtype.name}, got "
                            f"{type(value).__name__}")
    if value.dtype != dtype:
        raise ArgumentError(f"parameter {name}: expected dtype {dtype.name}, got "
                            f"{value.dtype.name} (convert with .astype(np.{dtype.name}))")
    if not value.flags.c_contiguous:
        raise ArgumentError(f"parameter {name}: array is not C-contiguous "
                            "(use np.ascontiguousarray)")
    if access != "read" and not value.flags.writeable:
        raise ArgumentError(f"parameter {name}: the kernel writes it but the array is read-only")
    return value


def _check_view(name: str, view: DeviceView, dtype: np.dtype, access: str) -> DeviceView:
    if view.dtype != dtype and not (dtype == np.uint8 and view.dtype.kind == "V"):
        raise ArgumentError(f"parameter {name}: expected dtype {dtype.name}, got {view.dtype.name}")
    if access != "read" and not view.writeable:
        raise ArgumentError(f"parameter {name}: the kernel writes it but the array is read-only")
    return view


def _scalar_bytes(name: str, value: Any, dtype: np.dtype) -> bytes:
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if dtype.kind in "iu":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ArgumentError(f"parameter {name}: expected an integer for {dtype.name}, got "
                                f"{type(value).__name__} {value!r}")
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise ArgumentError(f"parameter {name}: {value} is out of range for {dtype.name} "
                                f"[{info.min}, {info.max}]")
        return np.array(int(value), dtype=dtype).tobytes()
    if dtype.kind == "b":
        if not isinstance(value, (bool, np.bool_)):
            raise ArgumentError(f"parameter {name}: expected a bool, got {value!r}")
        return np.array(value, dtype=dtype).tobytes()
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
        raise ArgumentError(f"parameter {name}: expected a number for {dtype.name}, got "
                            f"{type(value).__name__} {value!r}")
    converted = float_as(value, dtype)
    if converted is None:
        raise ArgumentError(f"parameter {name}: {value} is out of range for {dtype.name}")
    return converted.tobytes()


def float_as(value, dtype: np.dtype) -> np.ndarray | None:
    """`value` as a 0-d array of the float `dtype`, or None where a finite value would not
    stay finite there (the rule for float scalars on every backend)."""
    with np.errstate(over="ignore"):
        converted = np.array(value, dtype=dtype)
    if math.isfinite(float(value)) and not math.isfinite(float(converted)):
        return None
    return converted


def check_repeat(repeat) -> int:
    """The number of back-to-back runs of a launch (repeat=), checked."""
    if not isinstance(repeat, (int, np.integer)) or isinstance(repeat, bool) or not 1 <= repeat <= 4096:
        raise ArgumentError(f"repeat must be an int from 1 to 4096, got {repeat!r}")
    return int(repeat)


def check_timeout(timeout_s) -> None:
    """A synchronisation's `timeout_s`: None (the runtime's default) or a positive number of
    seconds. A wait that runs out is taken for a hang and drops the device, arrays and all,
    so a value that cannot be waited for (0, negative, NaN) must never reach it."""
    if timeout_s is not None and (not isinstance(timeout_s, (int, float, np.integer, np.floating))
                                  or isinstance(timeout_s, bool) or not 0 < timeout_s < math.inf):
        raise ArgumentError(f"synchronize: timeout_s is a positive number of seconds or None "
                            f"(the default), got {timeout_s!r}")
