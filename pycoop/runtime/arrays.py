"""Device arrays: `pycoop.Array` and its constructors, on every backend.

An Array lives where it was made: on Vulkan in a pooled device buffer (kernels get its device
address, nothing is copied), on the emulator in a NumPy buffer the emulator runs on in place.
A kernel launched on Arrays runs on their backend; Arrays of different backends never mix
silently: `a.to("emulator")` is the explicit (copying) move. Memory is freed when the last
reference (the Array and every view of it) goes, after any queued launch that uses it.

Every constructor returns zero-filled memory unless it writes every byte itself (`asarray`,
`full`): pycoop never hands out bytes an earlier buffer left behind, on any backend.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any

import numpy as np

from .. import knobs
from ..errors import ArgumentError, BackendUnavailable, entry_point
from ..types import SCALARS, ScalarType, VectorType, scalar_of_dtype
from . import capturing, interop
from .backend import check_backend, requested_backend
from .vulkan import VulkanUnavailable
from .vulkan import get_runtime as get_vulkan_runtime
from .vulkan.abi import DeviceView, check_timeout, numpy_dtype
from ..jupyter import array_html

_lock = threading.Lock()
_emulator_stats = {"array_count": 0, "array_bytes": 0}
_vulkan_ok: bool | None = None


def _error(message: str, hint: str) -> ArgumentError:
    return ArgumentError(f"{message}\n  hint: {hint}")


def _dtype(dtype: Any) -> np.dtype:
    """A NumPy dtype from a NumPy dtype/name, a pycoop scalar type (pc.f32, pc.bf16...) or
    its name ("f16": never NumPy's 16-byte float code), one kernels can hold."""
    if isinstance(dtype, str) and dtype in SCALARS:
        dtype = SCALARS[dtype]
    if isinstance(dtype, VectorType):   # its `.dtype` is its component's: NumPy would take that
        raise _error(f"{dtype} is a vector type: arrays hold the components of buffers of "
                     f"vectors", f"pass the component type with a last axis of {dtype.count}, "
                     f"e.g. pc.zeros((n, {dtype.count}), pc.{dtype.elem})")
    if isinstance(dtype, ScalarType):
        dtype = dtype.dtype
    try:
        dt = numpy_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    except (TypeError, ArgumentError):
        raise _error(f"{dtype!r} is not a dtype",
                     "pass a NumPy dtype (np.float32) or a pycoop type (pc.f32)") from None
    if scalar_of_dtype(dt) is None and not (dt.kind == "V" and dt.fields):
        raise _error(f"{dt} is no type a kernel can hold",
                     f"use one of {', '.join(SCALARS)} (or a structured dtype of blocks)")
    return dt


def _cast(data: np.ndarray, dtype: np.dtype, what: str) -> np.ndarray:
    """`data` as `dtype`, refusing values the conversion would not keep: NumPy's `astype`
    wraps -1 to 255, turns NaN into INT_MIN and drops fractions in silence. Into integers
    and bools every value must come back unchanged; into floats values round, and only a
    finite one that overflows is refused. Complex values and Python objects are refused too
    (NumPy drops imaginary parts and makes None a NaN); what NumPy cannot convert at all (a
    string that is no number) raises its ValueError."""
    if data.dtype == dtype or dtype.fields is not None:     # blocks: bytes, as NumPy copies them
        return data.astype(dtype)
    if data.dtype.kind in "cO":
        raise ArgumentError(f"{what}{data.dtype} values are no {dtype} values")
    with np.errstate(all="ignore"):
        out = data.astype(dtype)
        if scalar_of_dtype(dtype).is_float:
            changed = np.isfinite(data.astype(np.float64)) & ~np.isfinite(out.astype(np.float64))
        else:
            changed = out.astype(data.dtype) != data
    if changed.any():
        i = np.argwhere(changed)[0] if data.ndim else ()
        raise _error(f"{what}{data[tuple(i)].item()!r} is no {dtype} value (converting "
                     f"gives {out[tuple(i)].item()!r})",
                     "convert it as you mean it first (np.round, np.clip, a wider dtype)")
    return out


def _shape(shape: Any) -> tuple[int, ...]:
    try:
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    except TypeError:                            # 2.5, None: not a length nor a sequence
        raise ArgumentError(f"an array shape is an int or a tuple of non-negative ints, got "
                            f"{shape!r}") from None
    if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0
               for n in shape):
        raise ArgumentError(f"an array shape is an int or a tuple of non-negative ints, got "
                            f"{shape!r}")
    return tuple(int(n) for n in shape)


def resolve_backend(backend: str | None = None) -> str:
    """Where a new array goes: `backend`, else `pycoop.use_backend(...)`, else
    $PYCOOP_BACKEND; "auto" means Vulkan if a device is usable, else the emulator."""
    name = requested_backend(backend) or knobs.backend()
    check_backend(name)
    if name == "auto":
        global _vulkan_ok
        if _vulkan_ok is None:
            try:
                vulkan_runtime()
                _vulkan_ok = True
            except BackendUnavailable:
                _vulkan_ok = False
        return "vulkan" if _vulkan_ok else "emulator"
    return name


def vulkan_runtime():
    """The process-wide VulkanRuntime (BackendUnavailable if there is none)."""
    runtime = _vulkan_module._runtime if _vulkan_module is not None else None
    if runtime is not None:
        return runtime
    return _make_vulkan_runtime()


_vulkan_module = None       # pycoop.runtime.vulkan.runtime once loaded (pyvulkan found)


def _make_vulkan_runtime():
    global _vulkan_module
    try:
        runtime = get_vulkan_runtime()
    except VulkanUnavailable as e:
        raise BackendUnavailable(f"Vulkan is not available: {e}") from None
    from .vulkan import runtime as module
    _vulkan_module = module
    return runtime


class _HostStorage:
    """Emulator memory: a zero-filled NumPy byte buffer."""
    backend = "emulator"

    def __init__(self, nbytes: int):
        try:
            self.data = np.zeros(nbytes, np.uint8)
        except ValueError:                       # beyond what NumPy can index
            raise ArgumentError(f"an emulator array of {nbytes} bytes is larger than NumPy "
                                f"can hold") from None
        self.nbytes = nbytes
        with _lock:
            _emulator_stats["array_count"] += 1
            _emulator_stats["array_bytes"] += nbytes

    def __del__(self):
        if hasattr(self, "data"):           # counted only once allocated
            with _lock:
                _emulator_stats["array_count"] -= 1
                _emulator_stats["array_bytes"] -= self.nbytes


class _VulkanStorage:
    """A pooled device buffer; given back (after the work queued on it) when collected."""
    backend = "vulkan"

    def __init__(self, nbytes: int, zero: bool):
        self.runtime = vulkan_runtime()
        self.nbytes = nbytes
        self.allocation, self.ctx = self.runtime.allocate(nbytes, zero)
        self.cuda = None        # the CUDA import of this buffer, made on first torch use

    def check(self) -> None:
        if not self.ctx.alive:
            raise BackendUnavailable("this array's Vulkan device was lost or closed; its "
                                     "contents are gone (make the array again)")

    def __del__(self):
        try:
            if self.cuda is not None:
                self.cuda.close()
            self.runtime.free(self.allocation, self.ctx)
        except Exception:       # interpreter shutdown: the runtime may be gone already
            pass


class Array:
    """An n-dimensional, C-contiguous array in a backend's memory (see the module docstring).
    Views (`reshape`, `a[i:j]`) share the memory and carry an element offset."""

    __slots__ = ("_storage", "_byte_offset", "shape", "dtype", "__weakref__")

    def __init__(self, storage, byte_offset: int, shape: tuple[int, ...], dtype: np.dtype):
        self._storage, self._byte_offset = storage, byte_offset
        self.shape, self.dtype = shape, dtype

    # -------------------------------------------------------------- properties
    @property
    def backend(self) -> str:
        """"vulkan" or "emulator": where the memory is, and where kernels on it run."""
        return self._storage.backend

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def offset(self) -> int:
        """Elements from the start of the underlying buffer to this view's first element."""
        return self._byte_offset // self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self) -> str:
        view = f", offset={self.offset}" if self._byte_offset else ""
        return f"pycoop.Array(shape={self.shape}, dtype={self.dtype.name}, backend={self.backend}{view})"

    def _repr_html_(self) -> str:
        return array_html(self)

    # -------------------------------------------------------------- views
    @entry_point
    def reshape(self, *shape) -> "Array":
        """A view with another shape of the same size (one dimension may be -1)."""
        given = shape[0] if len(shape) == 1 else shape
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            try:
                shape = tuple(shape[0])
            except TypeError:                    # 24.0, None: not a length nor a sequence
                shape = (shape[0],)
        if not all(isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_))
                   for n in shape):               # int(2.7) would reshape to 2 in silence
            raise ArgumentError(f"reshape takes ints (one of them may be -1), got {given!r}")
        shape = tuple(int(n) for n in shape)
        if shape.count(-1) > 1 or any(n < -1 for n in shape):
            raise ArgumentError(f"cannot reshape an array to {shape}")
        if -1 in shape:
            known = 1
            for n in shape:
                known *= n if n != -1 else 1
            if known == 0 or self.size % known:
                raise ArgumentError(f"cannot reshape an array of size {self.size} to {shape}")
            shape = tuple(self.size // known if n == -1 else n for n in shape)
        new = 1
        for n in shape:
            new *= n
        if new != self.size:
            raise ArgumentError(f"cannot reshape an array of size {self.size} to {shape}")
        return Array(self._storage, self._byte_offset, shape, self.dtype)

    @entry_point
    def view(self, dtype: Any) -> "Array":
        """The same bytes read as `dtype`, like NumPy's `view`: the last axis scales by the
        ratio of the item sizes (f16 (N, 8) -> u32 (N, 4)). A view, never a copy."""
        dt = _dtype(dtype)
        old = self.dtype.itemsize
        last = self.shape[-1] if self.shape else 1
        if (last * old) % dt.itemsize or self._byte_offset % dt.itemsize:
            raise _error(f"cannot view {self.dtype} {self.shape} as {dt}: the last axis "
                         f"({last * old} bytes) and the start must be multiples of "
                         f"{dt.itemsize} bytes", "view a reshaped array, or copy with .numpy()")
        shape = self.shape[:-1] + (last * old // dt.itemsize,) if self.shape else (
            old // dt.itemsize,)
        return Array(self._storage, self._byte_offset, shape, dt)

    @entry_point
    def __getitem__(self, index) -> "Array":
        """`a[i:j]` (step 1) or `a[i]` along the first axis: a view, never a copy."""
        if not self.shape:
            raise IndexError("a 0-d array cannot be indexed")
        n = self.shape[0]
        row = self.nbytes // n if n else 0
        if isinstance(index, (bool, np.bool_)):
            raise _error(f"an Array is indexed by an int or a slice along its first axis, "
                         f"got {index!r}", "use .numpy() for boolean indexing")
        if isinstance(index, (int, np.integer)):
            i = int(index) + (n if index < 0 else 0)
            if not 0 <= i < n:
                raise IndexError(f"index {index} is out of bounds for axis 0 with size {n}")
            return Array(self._storage, self._byte_offset + i * row, self.shape[1:], self.dtype)
        if isinstance(index, slice):
            try:
                start, stop, step = index.indices(n)
            except (TypeError, ValueError) as e:         # a float bound, a zero step
                raise _error(f"an Array slice takes int bounds, got {index!r} ({e})",
                             "a[i:j] with ints (step 1)") from None
            if step != 1:
                raise _error("only contiguous slices (step 1) of an Array are views",
                             "copy to NumPy with .numpy() for strided access")
            stop = max(stop, start)
            return Array(self._storage, self._byte_offset + start * row,
                         (stop - start,) + self.shape[1:], self.dtype)
        raise _error(f"an Array is indexed by an int or a slice along its first axis, "
                     f"got {index!r}", "use .numpy() for other indexing")

    # -------------------------------------------------------------- data movement
    @entry_point
    def numpy(self) -> np.ndarray:
        """A NumPy copy of the contents; waits for the queued launches that write them."""
        if capturing.active:
            graph = capturing.current()
            if graph is not None and graph.writes(self):
                raise capturing.refuse(
                    ".numpy() of an array the captured launches write",
                    "the captured launches have not run: read it after `g.launch()` and "
                    "`pycoop.synchronize()`, outside the `with pycoop.capture()` block")
        out = np.empty(self.shape, self.dtype)
        if self.backend == "emulator":
            np.copyto(out, self._host_view())
        else:
            storage = self._storage
            storage.check()
            interop.before_host_access(storage)     # after torch's writes, if torch shares it
            storage.runtime.read(storage.allocation, self._byte_offset, out)
        return out

    def __reduce__(self):
        """Pickling (and `copy.copy`, `copy.deepcopy`) stores the contents: the array comes
        back as a new one on the same backend, as NumPy copies an array. Copying the storage
        object itself skipped the emulator's accounting (stats() fell below zero) and cannot
        copy a Vulkan buffer."""
        return _unpickle, (self.numpy(), self.backend)

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    @entry_point
    def copy_from(self, source: Any) -> "Array":
        """Overwrite the contents with `source` (NumPy-like, torch tensor or Array) of the
        same size and dtype. Host data is taken now; the copy itself is queued. Inside a
        launch-graph capture, a copy from another array is recorded into the graph."""
        graph = capturing.current() if capturing.active else None
        if graph is not None:
            return graph.capture_copy(self, source)
        if isinstance(source, Array):
            if source.nbytes != self.nbytes or source.dtype != self.dtype:
                raise ArgumentError(f"copy_from: source {source.shape} {source.dtype} does not "
                                    f"match {self.shape} {self.dtype}")
            if source.backend == self.backend == "vulkan":
                source._storage.check()
                self._storage.check()
                interop.before_host_access(source._storage)
                interop.before_host_access(self._storage)
                self._storage.runtime.copy(source._storage.allocation, source._byte_offset,
                                           self._storage.allocation, self._byte_offset,
                                           self.nbytes)
                interop.after_device_write(self._storage)
                return self
            source = source.numpy()
        data = interop.host_array(source, "source")
        if data.size != self.size:
            raise _error(f"copy_from: source has {data.size} elements, the array "
                         f"{self.size}", interop.reshape_hint(source, self.shape))
        if data.dtype != self.dtype:
            raise _error(f"copy_from: source dtype {data.dtype} is not the array's "
                         f"{self.dtype}", interop.dtype_hint(source, "source", self.dtype))
        data = np.ascontiguousarray(data)
        if self.backend == "emulator":
            self._host_view()[...] = data.reshape(self.shape)
        else:
            self._storage.check()
            interop.before_host_access(self._storage)    # torch may still read the old bytes
            self._storage.runtime.write(self._storage.allocation, self._byte_offset, data)
            interop.after_device_write(self._storage)
        return self

    def to(self, backend: str) -> "Array":
        """This array on `backend` ("vulkan", "emulator"): itself if it is there, else a copy."""
        if resolve_backend(backend) == self.backend:
            return self
        return asarray(self.numpy(), backend=backend)

    def torch(self):
        """A torch tensor on the same memory: a CPU tensor for emulator arrays, a CUDA tensor
        for Vulkan arrays on an NVIDIA GPU (see docs/arrays.md for synchronisation)."""
        return interop.to_torch(self)

    # -------------------------------------------------------------- DLPack
    def __dlpack_device__(self) -> tuple[int, int]:
        if self.backend == "emulator":
            return (1, 0)                       # kDLCPU
        return interop.cuda_dlpack_device(self)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if self.backend == "emulator":
            view = self._host_view()
            kwargs = {} if max_version is None else {"max_version": max_version}
            try:
                return view.__dlpack__(stream=stream, **kwargs)
            except TypeError:            # NumPy before DLPack 1.0 arguments
                return view.__dlpack__(stream=stream)
        return interop.cuda_dlpack(self, stream=stream, max_version=max_version)

    # -------------------------------------------------------------- kernels
    def _host_view(self) -> np.ndarray:
        """The emulator memory of this view, as a NumPy array (no copy)."""
        data = self._storage.data[self._byte_offset:self._byte_offset + self.nbytes]
        return data.view(self.dtype).reshape(self.shape)

    def kernel_argument(self):
        """What a launch on this array's backend passes: the NumPy memory (emulator) or a
        DeviceView (Vulkan)."""
        storage = self._storage
        if storage.backend == "emulator":
            return self._host_view()
        if not storage.ctx.alive:
            storage.check()
        return DeviceView(storage.allocation, self._byte_offset, self.nbytes, self.dtype)


# ------------------------------------------------------------------ constructors
def _unpickle(data: np.ndarray, backend: str) -> Array:
    return asarray(data, backend=backend)


def _new(shape, dtype, backend, zero: bool) -> Array:
    shape, dtype = _shape(shape), _dtype(dtype)
    n = 1
    for d in shape:
        n *= d
    nbytes = n * dtype.itemsize
    be = resolve_backend(backend)
    storage = _HostStorage(nbytes) if be == "emulator" else _VulkanStorage(nbytes, zero)
    return Array(storage, 0, shape, dtype)


@entry_point
def empty(shape, dtype=np.float32, *, backend: str | None = None) -> Array:
    """A new array. Unlike `numpy.empty` its memory is zero-filled on every backend (pycoop
    never shows an earlier buffer's bytes); use it where the values do not matter."""
    return _new(shape, dtype, backend, True)


@entry_point
def zeros(shape, dtype=np.float32, *, backend: str | None = None) -> Array:
    """A new zero-filled array. Inside a launch-graph capture on its backend the zeroing is
    also recorded, so that each replay starts it from zeros again, as the captured code did
    (kernels that add into a zeroed output give the same result at every replay)."""
    out = _new(shape, dtype, backend, True)
    graph = capturing.current() if capturing.active else None
    if graph is not None and graph.backend == out.backend:
        graph.capture_zeros(out)
    return out


@entry_point
def full(shape, fill_value, dtype=np.float32, *, backend: str | None = None) -> Array:
    """A new array with every element `fill_value`."""
    dtype = _dtype(dtype)
    value = np.asarray(fill_value)
    if value.dtype.kind in "cO":                # 1j, None (a NaN to NumPy), 2**70
        raise ArgumentError(f"full: the fill value {fill_value!r} is no {dtype} value")
    try:
        data = np.full(_shape(shape), _cast(value, dtype, "full: the fill value "), dtype)
    except ValueError as e:                     # "a", an array of another shape
        raise ArgumentError(f"full: the fill value {fill_value!r} is no {dtype}: {e}") from None
    return asarray(data, backend=backend)


@entry_point
def asarray(obj: Any, dtype=None, *, backend: str | None = None) -> Array:
    """An Array with the contents of `obj` (NumPy array, torch tensor, anything NumPy or DLPack
    can read, or an Array). Always a copy, except an Array already on `backend` with this
    dtype, which is returned as is. A CUDA tensor is copied device to device."""
    if isinstance(obj, Array):
        if (dtype is None or _dtype(dtype) == obj.dtype) and (
                backend is None or resolve_backend(backend) == obj.backend):
            return obj
        obj = obj.numpy()
    be = resolve_backend(backend)
    if be == "vulkan" and interop.is_cuda_tensor(obj):
        return _from_cuda_tensor(obj, dtype)
    try:
        if isinstance(obj, (list, tuple, int, float, complex)):
            obj = np.asarray(obj)
        data = interop.host_array(obj, "obj")
        if dtype is not None:
            data = _cast(data, _dtype(dtype), "asarray: ")
    except ValueError as e:                # a ragged list, a string that is no number
        raise ArgumentError(f"asarray: NumPy cannot read the contents as an array of "
                            f"{'its own dtype' if dtype is None else _dtype(dtype)}: "
                            f"{e}") from None
    _dtype(data.dtype)                      # one a kernel can hold
    if not data.flags.c_contiguous:         # (ascontiguousarray would make a 0-d array 1-d)
        data = np.ascontiguousarray(data)
    if be == "emulator":
        out = Array(_HostStorage(data.nbytes), 0, data.shape, data.dtype)
        out._host_view()[...] = data
        return out
    out = Array(_VulkanStorage(data.nbytes, zero=False), 0, data.shape, data.dtype)
    out._storage.runtime.write(out._storage.allocation, 0, data)
    return out


@entry_point
def synchronize(timeout_s: float | None = None) -> None:
    """Wait for every queued launch and copy (Vulkan), at most `timeout_s` per batch (default
    10 s). Errors of a queued launch (device lost, a hang) are raised here, naming it. A wait
    that runs out is taken for a hang: the device is dropped, with every array on it, so
    `timeout_s` bounds a hang, it does not poll. A no-op when only the emulator was used. Not
    allowed inside a launch-graph capture."""
    if capturing.active:
        capturing.refuse_sync("pycoop.synchronize()")
    check_timeout(timeout_s)
    wait_all(timeout_s)


def wait_all(timeout_s: float | None = None) -> None:
    """`synchronize` without the capture check (pycoop's own waits, e.g. for a result's
    times: those never involve captured launches)."""
    try:
        from .vulkan import runtime as vulkan
    except ImportError:
        return
    if vulkan._runtime is not None:
        vulkan._runtime._synchronize(timeout_s)


class EmulatorRuntime:
    """The emulator's side of `pycoop.get_runtime`: launches run when called, so there is
    nothing to wait for; `stats()` counts live arrays."""

    def synchronize(self, timeout_s: float | None = None) -> None:
        """Nothing is ever queued on the emulator (not allowed inside a capture, as on
        Vulkan)."""
        if capturing.active:
            capturing.refuse_sync("synchronize()")
        check_timeout(timeout_s)

    @contextmanager
    def batch(self):
        """Launches run as they are called on the emulator: nothing to group."""
        yield self

    def stats(self) -> dict[str, Any]:
        with _lock:
            return {"backend": "emulator", **_emulator_stats, "pending_launches": 0,
                    "graph_count": capturing.emulator_graphs}


def get_runtime(backend: str | None = None):
    """The runtime new arrays and launches use (`backend` as for `empty`): a VulkanRuntime or
    an EmulatorRuntime; both have `.stats()`, `.synchronize()` and `.batch()`."""
    if resolve_backend(backend) == "emulator":
        return EmulatorRuntime()
    return vulkan_runtime()


def _from_cuda_tensor(t, dtype=None):
    """A new Vulkan Array with the contents of a torch CUDA tensor, copied device to device
    (torch copies into the shared buffer), never through the host."""
    t = t.detach().contiguous()
    name = str(t.dtype).removeprefix("torch.")
    if name in interop.BIT_VIEWS:
        np_dtype = numpy_dtype(interop.BIT_VIEWS[name][1])
    else:
        np_dtype = np.dtype(name)
    if dtype is not None and _dtype(dtype) != np_dtype:
        raise ArgumentError(f"asarray: the CUDA tensor has dtype {t.dtype}, not {_dtype(dtype)}"
                            f"\n  hint: convert it first with t.to(torch.{interop.torch_dtype_name(_dtype(dtype))})")
    out = Array(_VulkanStorage(t.numel() * np_dtype.itemsize, zero=False), 0, tuple(t.shape),
                np_dtype)
    out.torch().copy_(t)
    interop.cuda_sync(out._storage).torch_to_vulkan()     # pycoop's next submission runs after the copy
    return out
