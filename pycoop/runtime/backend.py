"""Backend choice: "auto" | "vulkan" | "emulator" per call, a context manager, or
PYCOOP_BACKEND. `auto` uses Vulkan when a device supports everything the kernel needs and
otherwise the emulator, with a BackendFallbackWarning (once per kernel) saying why. Never a
silent switch."""
from __future__ import annotations

import logging
import threading
import warnings
from contextlib import contextmanager

from .. import knobs
from ..errors import (ArgumentValueError, BackendFallbackWarning, BackendUnavailable,
                      user_stacklevel)
from .vulkan import VulkanUnavailable, get_runtime

_log = logging.getLogger(__name__)        # every choice, at DEBUG level
_local = threading.local()
_noticed: set[tuple[str, str]] = set()      # (kernel, reason) pairs already warned about
BACKENDS = ("auto", "vulkan", "emulator")


def check_backend(name) -> None:
    """ArgumentValueError unless `name` is one of BACKENDS."""
    if name not in BACKENDS:
        hint = (" (pycoop runs on Vulkan or its emulator; torch CUDA tensors are taken as "
                "arguments of Vulkan launches)") if name == "cuda" else ""
        raise ArgumentValueError(f"backend must be one of {BACKENDS}, got {name!r}{hint}")


def requested_backend(backend: str | None) -> str | None:
    """The backend a call asks for: `backend` if given (checked: an empty string is not
    "auto"), else `pycoop.use_backend(...)`'s, else None (then $PYCOOP_BACKEND decides)."""
    if backend is not None:
        check_backend(backend)
        return backend
    return getattr(_local, "backend", None)


@contextmanager
def use_backend(name: str):
    """`with pycoop.use_backend("emulator"): ...` sets the default backend of launches inside."""
    check_backend(name)
    prev = getattr(_local, "backend", None)
    _local.backend = name
    try:
        yield
    finally:
        _local.backend = prev


def _notice(kernel: str, reason: str, missing: list[str]) -> None:
    if (kernel, reason) not in _noticed:
        _noticed.add((kernel, reason))
        warnings.warn(BackendFallbackWarning(kernel, reason, tuple(missing)),
                      stacklevel=user_stacklevel())


def vulkan_missing(ck) -> list[str]:
    """What the selected Vulkan device lacks for this kernel ([] = runnable), or raises
    BackendUnavailable when there is no usable Vulkan device at all."""
    try:
        rt = get_runtime()
    except VulkanUnavailable as e:
        raise BackendUnavailable(f"Vulkan is not available: {e}") from None
    return rt.capabilities.missing(ck.requirements)


def choose(requested: str | None, ck) -> str:
    name = requested_backend(requested) or knobs.backend()
    check_backend(name)
    if name == "emulator":
        return "emulator"
    try:
        missing = vulkan_missing(ck)
        why = f"the Vulkan device lacks {', '.join(missing)}" if missing else None
    except BackendUnavailable as e:
        missing, why = [], str(e)
    _log.debug("%s (backend=%s): %s", ck.name, name, why or "runs on Vulkan")
    if why is None:
        return "vulkan"
    if name == "vulkan":
        raise BackendUnavailable(f"cannot run {ck.name} on Vulkan: {why}")
    _notice(ck.name, f"{ck.name} runs on the emulator because {why}", missing)
    return "emulator"
