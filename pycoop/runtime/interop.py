"""NumPy, DLPack and torch: reading arguments without copies, hints in the caller's library,
and sharing Vulkan device arrays with CUDA (torch) on NVIDIA GPUs.

torch is never imported here unless the caller already did (a tensor exists) or asks for a
tensor (`Array.torch()`); cuda-python likewise. Both are optional (`pip install pycoop[torch]`).

CUDA sharing: a Vulkan array's buffer is allocated exportable (VK_KHR_external_memory_fd);
on first use from torch its memory is imported with `cudaImportExternalMemory` and mapped to a
CUDA pointer, which torch wraps through `__cuda_array_interface__` (no copy). Synchronisation
is coarse and automatic: `Array.torch()` waits for pycoop's queued work first, and a launch on
an array that torch has seen first waits for torch's current stream, then runs to completion
before returning.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..errors import ArgumentError, BackendUnavailable

# torch dtypes with no NumPy equivalent, read through an integer view of the same width.
_BIT_VIEWS = {"bfloat16": ("int16", "bfloat16"), "float8_e4m3fn": ("uint8", "float8_e4m3fn"),
              "float8_e5m2": ("uint8", "float8_e5m2")}


def torch_module():
    """torch if the program imported it (a tensor can only exist then), else None."""
    return sys.modules.get("torch")


def is_torch_tensor(obj: Any) -> bool:
    torch = torch_module()
    return torch is not None and isinstance(obj, torch.Tensor)


def is_cuda_tensor(obj: Any) -> bool:
    return is_torch_tensor(obj) and obj.device.type == "cuda"


def host_array(obj: Any, name: str) -> np.ndarray:
    """`obj` as a NumPy array on the same memory where possible: NumPy arrays as they are,
    torch CPU tensors through `.numpy()` (detached; bf16/float8 through a bit view), else
    `__array_interface__`/`__array__`/DLPack."""
    if isinstance(obj, np.ndarray):
        return obj
    if is_torch_tensor(obj):
        return _torch_cpu(obj, name)
    if hasattr(obj, "__array_interface__") or hasattr(obj, "__array__"):
        return np.asarray(obj)
    if hasattr(obj, "__dlpack__"):
        return np.from_dlpack(obj)
    raise ArgumentError(f"'{name}' must be an array, got {type(obj).__name__}")


def _torch_cpu(t, name: str) -> np.ndarray:
    if t.device.type != "cpu":
        raise ArgumentError(f"'{name}' is a torch tensor on {t.device}, which this backend "
                            f"cannot read in place\n  hint: pass {name}.cpu(), or run on Vulkan "
                            f"with pycoop.asarray({name}) (a device-to-device copy)")
    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    name_ = str(t.dtype).removeprefix("torch.")
    if name_ in _BIT_VIEWS:
        import ml_dtypes  # noqa: F401  (registers the NumPy dtypes)
        from .vulkan.abi import numpy_dtype
        torch = torch_module()
        bits, target = _BIT_VIEWS[name_]
        return t.view(getattr(torch, bits)).numpy().view(numpy_dtype(target))
    return t.numpy()


def dtype_hint(obj: Any, name: str, want: np.dtype) -> str:
    """How to convert `obj` to `want`, in its own library."""
    if is_torch_tensor(obj):
        return f"convert it with {name}.to(torch.{_torch_dtype_name(want)})"
    return f"convert it with {name}.astype({want.name!r})"


def contiguity_hint(obj: Any, name: str) -> str:
    if is_torch_tensor(obj):
        return f"pass {name}.contiguous() and copy results back"
    return f"pass np.ascontiguousarray({name}) and copy results back"


def reshape_hint(obj: Any, shape: tuple[int, ...]) -> str:
    return f"give a source of shape {shape}"


def _torch_dtype_name(dtype: np.dtype) -> str:
    return {"float8_e4m3fn": "float8_e4m3fn", "bool": "bool"}.get(dtype.name, dtype.name)


# ---------------------------------------------------------------------------- CUDA sharing
class CudaMapping:
    """A Vulkan buffer's memory imported into CUDA: `pointer` is its CUDA device address."""

    def __init__(self, allocation, device_handle):
        from cuda.bindings import runtime as cudart
        from .vulkan.ext import get_memory_fd
        self._cudart = cudart
        fd = get_memory_fd(device_handle, allocation.memory)
        desc = cudart.cudaExternalMemoryHandleDesc()
        desc.type = cudart.cudaExternalMemoryHandleType.cudaExternalMemoryHandleTypeOpaqueFd
        desc.handle.fd = fd
        desc.size = allocation.memory_size
        err, self._external = cudart.cudaImportExternalMemory(desc)
        _cuda_check(err, "cudaImportExternalMemory")
        buffer = cudart.cudaExternalMemoryBufferDesc()
        buffer.offset, buffer.size, buffer.flags = 0, allocation.size, 0
        err, pointer = cudart.cudaExternalMemoryGetMappedBuffer(self._external, buffer)
        if err:
            cudart.cudaDestroyExternalMemory(self._external)
            _cuda_check(err, "cudaExternalMemoryGetMappedBuffer")
        self.pointer = int(pointer)

    def close(self) -> None:
        if self._external is not None:
            self._cudart.cudaDeviceSynchronize()    # no queued CUDA work may use it after
            self._cudart.cudaFree(self.pointer)
            self._cudart.cudaDestroyExternalMemory(self._external)
            self._external = None


def _cuda_check(err, what: str) -> None:
    if int(err):
        raise BackendUnavailable(f"{what} failed ({err}): cannot share this Vulkan array with CUDA")


class _CudaInterface:
    """Just enough for torch.as_tensor(..., device="cuda"): version 3 of the interface."""

    def __init__(self, pointer: int, shape: tuple[int, ...], typestr: str):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (pointer, False), "version": 3,
                                         "strides": None, "stream": None}


def _mapping(a) -> CudaMapping:
    storage = a._storage
    storage.check()
    if storage.cuda is None:
        if not storage.allocation.exportable:
            raise BackendUnavailable(
                "this Vulkan device cannot export memory (VK_KHR_external_memory_fd), so its "
                "arrays cannot be shared with CUDA\n  hint: use .numpy() (a copy)")
        try:
            import cuda.bindings.runtime  # noqa: F401
        except ImportError:
            raise BackendUnavailable("sharing Vulkan arrays with torch needs cuda-python\n"
                                     "  hint: pip install pycoop[torch]") from None
        storage.cuda = CudaMapping(storage.allocation, storage.ctx.device.handle)
    return storage.cuda


def to_torch(a):
    """The torch tensor on an Array's memory (see the module docstring)."""
    import torch
    if a.backend == "emulator":
        if a.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
            bits, _ = _BIT_VIEWS[a.dtype.name]
            raw = torch.from_numpy(a._host_view().view(np.dtype(bits)))
            return raw.view(getattr(torch, a.dtype.name))
        return torch.from_dlpack(a)
    mapping = _mapping(a)
    a._storage.runtime.synchronize()        # torch sees what pycoop queued
    pointer = mapping.pointer + a._byte_offset
    name = a.dtype.name
    if name in _BIT_VIEWS:
        bits = np.dtype(_BIT_VIEWS[name][0])
        raw = torch.as_tensor(_CudaInterface(pointer, a.shape, bits.str), device="cuda")
        tensor = raw.view(getattr(torch, name))
    else:
        tensor = torch.as_tensor(_CudaInterface(pointer, a.shape, a.dtype.str), device="cuda")
    tensor._pycoop_array = a        # the memory lives as long as the tensor
    return tensor


def cuda_dlpack_device(a) -> tuple[int, int]:
    """kDLCUDA where the array can be shared with CUDA, else kDLVulkan (then `__dlpack__`
    raises BufferError: there is no zero-copy host view of device memory)."""
    torch = torch_module()
    if (a._storage.allocation.exportable and torch is not None
            and torch.cuda.is_available()):
        return (2, torch.cuda.current_device())
    return (7, 0)


def cuda_dlpack(a, stream=None, max_version=None):
    if cuda_dlpack_device(a)[0] != 2:
        raise BufferError("this Vulkan array cannot be shared without a copy here (no CUDA "
                          "device to import it into); use .numpy() for a host copy")
    tensor = to_torch(a)
    kwargs = {} if max_version is None else {"max_version": max_version}
    return tensor.__dlpack__(stream=stream, **kwargs)


def wait_for_torch(arrays) -> bool:
    """Before a launch: if torch has seen any of these Vulkan arrays, wait for its current
    stream (so the kernel reads torch's writes) and return True (the launch then completes
    before returning, so torch reads the kernel's writes)."""
    if not any(a._storage.cuda is not None for a in arrays):
        return False
    torch = torch_module()
    if torch is not None:
        torch.cuda.current_stream().synchronize()
    return True


def from_cuda_tensor(t, dtype=None):
    """A new Vulkan Array with the contents of a torch CUDA tensor, copied device to device
    (torch copies into the shared buffer), never through the host."""
    from .arrays import _VulkanStorage, Array, _dtype
    t = t.detach().contiguous()
    name = str(t.dtype).removeprefix("torch.")
    if name in _BIT_VIEWS:
        from .vulkan.abi import numpy_dtype
        np_dtype = numpy_dtype(_BIT_VIEWS[name][1])
    else:
        np_dtype = np.dtype(name)
    if dtype is not None and _dtype(dtype) != np_dtype:
        raise ArgumentError(f"asarray: the CUDA tensor has dtype {t.dtype}, not {_dtype(dtype)}"
                            f"\n  hint: convert it first with t.to(torch.{_torch_dtype_name(_dtype(dtype))})")
    out = Array(_VulkanStorage(t.numel() * np_dtype.itemsize, zero=False), 0, tuple(t.shape),
                np_dtype)
    out.torch().copy_(t)
    import torch
    torch.cuda.current_stream().synchronize()     # the copy is done before pycoop reads it
    return out
