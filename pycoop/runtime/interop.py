"""NumPy, DLPack and torch: reading arguments without copies, hints in the caller's library,
and sharing Vulkan device arrays with CUDA (torch) on NVIDIA GPUs.

torch is never imported here unless the caller already did (a tensor exists) or asks for a
tensor (`Array.torch()`); cuda-python likewise. Both are optional (`pip install pycoop[torch]`).

CUDA sharing: a Vulkan array's buffer is allocated exportable (VK_KHR_external_memory_fd);
on first use from torch its memory is imported with `cudaImportExternalMemory` and mapped to a
CUDA pointer, which torch wraps through `__cuda_array_interface__` (no copy).

Synchronisation is automatic, on the GPU where possible (`CudaSync`): two timeline semaphores
exported from Vulkan (VK_KHR_external_semaphore_fd) and imported into CUDA. Before pycoop's
queue touches a shared array, torch's current stream signals one and the next Vulkan
submission waits for it; after, that submission signals the other and torch's current stream
waits for it. Nobody waits on the host. Where the device, driver or cuda-python cannot do
this, or with PYCOOP_TORCH_SYNC=coarse, the same points wait on the host instead (torch's
stream is synchronised; pycoop's queue is drained), and a RuntimeWarning says why, once.
"""
from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import numpy as np

from .. import knobs
from ..errors import ArgumentError, BackendUnavailable, user_stacklevel
from .vulkan.abi import numpy_dtype

# torch dtypes with no NumPy equivalent, read through an integer view of the same width.
BIT_VIEWS = {"bfloat16": ("int16", "bfloat16"), "float8_e4m3fn": ("uint8", "float8_e4m3fn"),
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
    if name_ in BIT_VIEWS:
        import ml_dtypes  # noqa: F401  (registers the NumPy dtypes)
        torch = torch_module()
        bits, target = BIT_VIEWS[name_]
        return t.view(getattr(torch, bits)).numpy().view(numpy_dtype(target))
    return t.numpy()


def dtype_hint(obj: Any, name: str, want: np.dtype) -> str:
    """How to convert `obj` to `want`, in its own library."""
    if is_torch_tensor(obj):
        return f"convert it with {name}.to(torch.{torch_dtype_name(want)})"
    return f"convert it with {name}.astype({want.name!r})"


def contiguity_hint(obj: Any, name: str) -> str:
    if is_torch_tensor(obj):
        return f"pass {name}.contiguous() and copy results back"
    return f"pass np.ascontiguousarray({name}) and copy results back"


def reshape_hint(obj: Any, shape: tuple[int, ...]) -> str:
    return f"give a source of shape {shape}"


def torch_dtype_name(dtype: np.dtype) -> str:
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
    try:
        import torch
    except ImportError:
        raise BackendUnavailable("Array.torch() needs torch\n  hint: pip install torch (or "
                                 "pycoop[torch] for CUDA sharing)") from None
    if a.backend == "emulator":
        if a.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
            bits, _ = BIT_VIEWS[a.dtype.name]
            raw = torch.from_numpy(a._host_view().view(np.dtype(bits)))
            return raw.view(getattr(torch, a.dtype.name))
        return torch.from_dlpack(a)
    mapping = _mapping(a)
    cuda_sync(a._storage).vulkan_to_torch()     # torch's stream sees what pycoop queued
    pointer = mapping.pointer + a._byte_offset
    name = a.dtype.name
    if name in BIT_VIEWS:
        bits = np.dtype(BIT_VIEWS[name][0])
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
    """Before a launch: if torch has seen any of these Vulkan arrays, order the launch after
    the work queued so far on torch's current stream (so the kernel reads torch's writes) and
    return True: the caller then calls `release_to_torch` after recording the launch."""
    for a in arrays:
        storage = a._storage
        if storage.cuda is not None:
            cuda_sync(storage).torch_to_vulkan()
            return True
    return False


def release_to_torch(runtime) -> None:
    """After a launch on arrays torch shares: submit it, and order torch's current stream
    after it (torch ops issued next see its writes and cannot overwrite what it reads)."""
    sync = runtime.context.torch_sync
    if sync is None:
        runtime.synchronize()
    else:
        sync.vulkan_to_torch()


def before_host_access(storage) -> None:
    """Before pycoop's queue reads or writes a shared array for the host (`.numpy()`,
    `copy_from`): order it after torch's queued work on the array."""
    if storage.cuda is not None:
        cuda_sync(storage).torch_to_vulkan()


def after_device_write(storage) -> None:
    """After queueing a copy into a shared array: torch's stream runs after it."""
    if storage.cuda is not None:
        cuda_sync(storage).vulkan_to_torch()


def cuda_sync(storage) -> "CudaSync":
    """The CudaSync of the context that owns a Vulkan array's storage."""
    ctx = storage.ctx
    sync = ctx.torch_sync
    if sync is None:
        sync = ctx.torch_sync = CudaSync(storage.runtime, ctx)
    return sync


class CudaSync:
    """Orders one Vulkan device context's queue against torch's CUDA streams (see the module
    docstring). `mode` is "semaphore" or "coarse"; `reason` says why it is coarse."""

    def __init__(self, runtime, ctx):
        self.runtime, self.ctx = runtime, ctx
        self.reason: str | None = None      # why semaphores are unavailable (None: unknown yet)
        self.ready = False                  # the semaphores exist and CUDA imported them
        self.to_vulkan = self.to_cuda = None
        self._external: list = []           # CUDA handles of the imported semaphores
        self.signalled = 0                  # last value torch's stream signalled (to_vulkan)
        self.released = 0                   # last value a submission signals (to_cuda)
        self.warned = False

    def describe(self) -> str:
        """How launches are ordered against torch, for `stats()` (creates nothing)."""
        if knobs.torch_sync() == "coarse":
            return "coarse (PYCOOP_TORCH_SYNC=coarse)"
        if self.ready:
            return "semaphore"
        return f"coarse ({self.reason})" if self.reason else "not used yet"

    @property
    def mode(self) -> str:
        setting = knobs.torch_sync()
        if setting == "coarse":
            return "coarse"
        if not self.ready and self.reason is None:
            self._create()
        if self.ready:
            return "semaphore"
        if setting == "semaphore":
            raise BackendUnavailable(f"PYCOOP_TORCH_SYNC=semaphore, but pycoop cannot share "
                                     f"semaphores with CUDA here: {self.reason}")
        if not self.warned:
            self.warned = True
            warnings.warn(f"pycoop orders its launches on arrays shared with torch by waiting "
                          f"on the host, which costs a GPU round trip per launch: {self.reason}",
                          RuntimeWarning, stacklevel=user_stacklevel())
        return "coarse"

    def _create(self) -> None:
        from .vulkan.timeline import TimelineSemaphore, timeline_support
        self.reason = timeline_support(self.ctx.device)
        if self.reason is not None:
            return
        try:
            from cuda.bindings import runtime as cudart
            self._cudart = cudart
            kind = cudart.cudaExternalSemaphoreHandleType.cudaExternalSemaphoreHandleTypeTimelineSemaphoreFd
            self.to_vulkan = TimelineSemaphore(self.ctx.device, export=True)
            self.to_cuda = TimelineSemaphore(self.ctx.device, export=True)
            for semaphore in (self.to_vulkan, self.to_cuda):
                fd = semaphore.fd()
                desc = cudart.cudaExternalSemaphoreHandleDesc()
                desc.type = kind
                desc.handle.fd = fd
                desc.flags = 0
                err, external = cudart.cudaImportExternalSemaphore(desc)
                if int(err):
                    os.close(fd)            # CUDA owns the fd only after a successful import
                    raise BackendUnavailable(f"cudaImportExternalSemaphore failed ({err})")
                self._external.append(external)
            self._signal_params = cudart.cudaExternalSemaphoreSignalParams()
            self._signal_params.flags = 0
            self._wait_params = cudart.cudaExternalSemaphoreWaitParams()
            self._wait_params.flags = 0
            self.ready = True
        except (ImportError, AttributeError) as e:
            self.reason = f"cuda-python lacks timeline-semaphore interop ({e})"
        except Exception as e:          # VulkanError, BackendUnavailable, CUDA errors
            self.reason = str(e).splitlines()[0]
        if not self.ready:
            self.destroy(wait=False)

    @staticmethod
    def _stream(stream):
        if stream is not None:
            return stream
        return torch_module().cuda.current_stream().cuda_stream

    def torch_to_vulkan(self, stream=None) -> None:
        """The next Vulkan submission runs after the work queued so far on `stream` (default
        torch's current stream)."""
        if self.mode == "coarse":
            torch = torch_module()
            if torch is not None:
                if stream is None:
                    torch.cuda.current_stream().synchronize()
                else:
                    torch.cuda.ExternalStream(stream).synchronize()
            return
        self.signalled += 1
        params = self._signal_params
        params.params.fence.value = self.signalled
        err, = self._cudart.cudaSignalExternalSemaphoresAsync(
            [self._external[0]], [params], 1, self._stream(stream))
        _cuda_check(err, "cudaSignalExternalSemaphoresAsync")
        self.runtime.wait_before_next(self.to_vulkan.handle, self.signalled)

    def vulkan_to_torch(self, stream=None) -> None:
        """Submit pycoop's queued work; work queued next on `stream` (default torch's current
        stream) runs after it."""
        if self.mode == "coarse":
            self.runtime.synchronize()
            return
        self.released += 1
        self.runtime.flush(signal=(self.to_cuda.handle, self.released))
        params = self._wait_params
        params.params.fence.value = self.released
        err, = self._cudart.cudaWaitExternalSemaphoresAsync(
            [self._external[1]], [params], 1, self._stream(stream))
        _cuda_check(err, "cudaWaitExternalSemaphoresAsync")

    def destroy(self, wait: bool = True) -> None:
        """Free the semaphores. `wait`: let CUDA finish first (not after device loss: a wait
        for a value the lost device never signals would not end)."""
        if self._external:
            cudart = self._cudart
            if wait:
                cudart.cudaDeviceSynchronize()
            for external in self._external:
                cudart.cudaDestroyExternalSemaphore(external)
            self._external.clear()
        for semaphore in (self.to_vulkan, self.to_cuda):
            if semaphore is not None:
                semaphore.destroy()
        self.to_vulkan = self.to_cuda = None
        self.ready = False
