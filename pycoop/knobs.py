"""Settings, each typed and read from an environment variable (read when used, not at import,
so tests and users can change them at run time)."""
from __future__ import annotations

import os
from pathlib import Path


def backend() -> str:
    """PYCOOP_BACKEND: the default backend, "auto" | "vulkan" | "emulator"."""
    v = os.environ.get("PYCOOP_BACKEND", "auto").strip().lower() or "auto"
    if v not in ("auto", "vulkan", "emulator"):
        raise ValueError(f"PYCOOP_BACKEND={v!r}: expected auto, vulkan or emulator")
    return v


def cache_dir() -> Path | None:
    """PYCOOP_CACHE_DIR: where compiled SPIR-V is cached ("" or "off" disables the disk cache)."""
    v = os.environ.get("PYCOOP_CACHE_DIR")
    if v is not None and v.strip().lower() in ("", "off", "0"):
        return None
    return Path(v) if v else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pycoop"


def show_internal_frames() -> bool:
    """PYCOOP_TRACEBACK=1: keep pycoop's own frames in tracebacks of CompileError."""
    return os.environ.get("PYCOOP_TRACEBACK", "") not in ("", "0")


def subgroup_size() -> int:
    """PYCOOP_SUBGROUP_SIZE: the emulator's subgroup size when a kernel does not fix one."""
    return int(os.environ.get("PYCOOP_SUBGROUP_SIZE", "32"))
