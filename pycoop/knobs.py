"""Settings, each typed and read from an environment variable (read when used, not at import,
so tests and users can change them at run time). A value a setting does not take raises
SettingError naming the variable; an empty one means the default (the disk cache's: off)."""
from __future__ import annotations

import math
import numbers
import os
import sys
from pathlib import Path

import numpy as np


class SettingError(ValueError):
    """A PYCOOP_* environment variable holds a value pycoop does not take (the message names
    it and what it takes)."""


def backend() -> str:
    """PYCOOP_BACKEND: the default backend, "auto" | "vulkan" | "emulator"."""
    v = os.environ.get("PYCOOP_BACKEND", "auto").strip().lower() or "auto"
    if v not in ("auto", "vulkan", "emulator"):
        raise SettingError(f"PYCOOP_BACKEND={v!r}: expected auto, vulkan or emulator")
    return v


def cache_dir() -> Path | None:
    """PYCOOP_CACHE_DIR: where compiled SPIR-V is cached ("" or "off" disables the disk cache).
    Default: the platform's user cache directory ($XDG_CACHE_HOME or ~/.cache on Linux,
    ~/Library/Caches on macOS, %LOCALAPPDATA% on Windows), then "pycoop"."""
    v = os.environ.get("PYCOOP_CACHE_DIR")
    if v is not None and v.strip().lower() in ("", "off", "0"):
        return None
    if v:       # "~/x" unexpanded (quoted, or from a .env file) made a directory named "~"
        return Path(v).expanduser()
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        base = Path(os.environ["LOCALAPPDATA"])
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "pycoop"


def cache_max_bytes() -> int:
    """PYCOOP_CACHE_MAX_MB (default 256): the disk cache's size limit; past it, the least
    recently used entries are deleted."""
    v = os.environ.get("PYCOOP_CACHE_MAX_MB", "256").strip() or "256"
    try:
        mb = float(v)
    except ValueError:
        raise SettingError(f"PYCOOP_CACHE_MAX_MB={v!r}: expected a size in MiB, e.g. 256") from None
    if not 0 <= mb < math.inf:          # nan and inf too: no number of bytes
        raise SettingError(f"PYCOOP_CACHE_MAX_MB={v!r}: expected a finite size >= 0")
    return int(mb * 2**20)


_ON, _OFF = ("1", "on", "true", "yes"), ("0", "off", "false", "no")


def _switch(name: str, default: bool, meaning: str) -> bool:
    """An on/off setting: 1/on/true/yes or 0/off/false/no in any case, empty for `default`;
    anything else raises SettingError (`meaning`: what on does)."""
    v = os.environ.get(name, "").strip().lower()
    if v == "":
        return default
    if v not in _ON + _OFF:
        raise SettingError(f"{name}={os.environ[name]!r}: expected 1 ({meaning}) or 0 (also "
                           f"on/off, true/false, yes/no)")
    return v in _ON


def show_internal_frames() -> bool:
    """PYCOOP_TRACEBACK=1: keep pycoop's own frames in the tracebacks of pycoop's errors. Read
    while an error is being raised, so it never raises itself: any value but empty, 0, off,
    false or no is on (a SettingError there would hide the error being shown)."""
    return os.environ.get("PYCOOP_TRACEBACK", "").strip().lower() not in ("",) + _OFF


def emulator_memo() -> bool:
    """PYCOOP_EMULATOR_MEMO=0: the emulator recomputes everything at every launch instead of
    reusing what depends only on the launch's configuration (see pycoop.emulator.memo)."""
    return _switch("PYCOOP_EMULATOR_MEMO", True, "reuse what depends only on the configuration")


def vk_validation() -> bool:
    """PYCOOP_VK_VALIDATION=1: Vulkan instances enable the Khronos validation layer where it
    is installed."""
    return _switch("PYCOOP_VK_VALIDATION", False, "the Khronos validation layer")


def emulator_max_iterations() -> int:
    """PYCOOP_EMULATOR_MAX_ITERATIONS (default 1048576): the iterations after which the
    emulator reports a runtime loop that has not ended (a loop that never ends hangs a GPU)."""
    v = os.environ.get("PYCOOP_EMULATOR_MAX_ITERATIONS", "").strip() or str(1 << 20)
    try:
        n = int(v)
    except ValueError:
        raise SettingError(f"PYCOOP_EMULATOR_MAX_ITERATIONS={v!r}: expected a positive integer") \
            from None
    if n < 1:
        raise SettingError(f"PYCOOP_EMULATOR_MAX_ITERATIONS={v!r}: expected a positive integer")
    return n


def subgroup_size() -> int:
    """PYCOOP_SUBGROUP_SIZE (default 32): the subgroup size kernels that fix none are traced
    and emulated with; a power of two, as every device's is (another value would run kernels
    with subgroups no GPU has)."""
    v = os.environ.get("PYCOOP_SUBGROUP_SIZE", "").strip() or "32"
    try:
        n = int(v)
    except ValueError:
        n = 0
    if not is_subgroup_size(n):
        raise SettingError(f"PYCOOP_SUBGROUP_SIZE={v!r}: expected a power of two from 1 to "
                           f"{MAX_SUBGROUP_SIZE}, e.g. 32")
    return n


MAX_SUBGROUP_SIZE = 128      # Vulkan: a subgroup size is a power of two of at most 128


def is_subgroup_size(n) -> bool:
    """Whether `n` is a subgroup size some device has: an integer (Python's or NumPy's, not a
    bool), a power of two from 1 to MAX_SUBGROUP_SIZE."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, numbers.Integral):
        return False
    return 1 <= n <= MAX_SUBGROUP_SIZE and not int(n) & (int(n) - 1)


_check_decode_vector_override: list[bool] = []


def check_decode_vector_enabled() -> bool:
    """PYCOOP_CHECK_DECODE_VECTOR=1 (or inside `check_decode_vector()`): the emulator calls both
    the decode and the decode_vector function of a tensor load wherever the vector one may be
    used, and reports any element where they disagree."""
    if _check_decode_vector_override:
        return _check_decode_vector_override[-1]
    return _switch("PYCOOP_CHECK_DECODE_VECTOR", False, "compare decode and decode_vector")


class check_decode_vector:
    """`with pycoop.knobs.check_decode_vector(): ...` turns the decode_vector checking mode on
    (or off with `check_decode_vector(False)`) for launches inside, whatever the environment."""

    def __init__(self, on: bool = True):
        self.on = bool(on)

    def __enter__(self):
        _check_decode_vector_override.append(self.on)
        return self

    def __exit__(self, *exc):
        _check_decode_vector_override.pop()
        return False


def decode_vector_mode() -> str:
    """PYCOOP_DECODE_VECTOR: what `CompiledKernel.spv` holds for kernels using decode_vector:
    "auto" (default: strip the DecodeVectorFunc operand unless spirv-val knows
    SPV_NV_cooperative_matrix_decode_vector), "strip" or "keep" (the full module)."""
    v = os.environ.get("PYCOOP_DECODE_VECTOR", "auto").strip().lower() or "auto"
    if v not in ("auto", "strip", "keep"):
        raise SettingError(f"PYCOOP_DECODE_VECTOR={v!r}: expected auto, strip or keep")
    return v


def vk_transfer() -> str:
    """PYCOOP_VK_TRANSFER: how Vulkan kernels reach their data: "direct" (host-visible memory,
    no copies), "staged" (device-local memory, staging copies) or "auto" (default: direct on
    CPU and integrated devices, where device-local memory is host-visible anyway)."""
    v = os.environ.get("PYCOOP_VK_TRANSFER", "auto").strip().lower() or "auto"
    if v not in ("auto", "direct", "staged"):
        raise SettingError(f"PYCOOP_VK_TRANSFER={v!r}: expected auto, direct or staged")
    return v


def checked() -> bool:
    """PYCOOP_CHECKED=0: Vulkan launches run the unchecked kernel by default (production,
    benchmarks); default 1: bounds-checked (see docs/gpu.md "Checked launches"). A launch's
    `checked=` argument overrides it."""
    return _switch("PYCOOP_CHECKED", True, "bounds-checked launches")


def torch_sync() -> str:
    """PYCOOP_TORCH_SYNC: how launches on Vulkan arrays that torch shares are ordered against
    torch's CUDA stream. "auto" (default): exported timeline semaphores waited and signalled
    on the GPU where the driver and cuda-python allow, else host waits (with a warning
    saying why); "semaphore": semaphores or an error; "coarse": always host waits."""
    v = os.environ.get("PYCOOP_TORCH_SYNC", "auto").strip().lower() or "auto"
    if v not in ("auto", "semaphore", "coarse"):
        raise SettingError(f"PYCOOP_TORCH_SYNC={v!r}: expected auto, semaphore or coarse")
    return v
