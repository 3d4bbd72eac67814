"""Choosing among kernel configurations by timing them on the device that will run them.

`autotune(configs, run)` launches `run(config, repeat)` for each configuration (it returns the
launch's LaunchResult) and keeps the fastest run of each. Configurations that fail to build,
compile or launch are reported and skipped. With a `key`, the choice is remembered on disk
(next to the SPIR-V cache) for the device that ran it, so later processes on the same device
skip the timing.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from . import knobs
from .errors import PycoopError, entry_point
from .plot import autotune_figure, png
from .runtime.vulkan import get_runtime


@dataclass(frozen=True)
class TuneResult:
    best: Any                                   # the fastest configuration
    times_ms: dict = field(default_factory=dict)  # configuration -> its fastest run (ms)
    failures: dict = field(default_factory=dict)  # configuration -> why it could not run
    cached: bool = False                        # chosen earlier (no timing this time)

    def _repr_png_(self) -> bytes | None:
        """In Jupyter: the time per configuration (pycoop.plot), when there are timings and
        matplotlib is installed; otherwise the text repr."""
        if not self.times_ms:
            return None
        try:
            return png(autotune_figure(self))
        except ImportError:
            return None


@entry_point
def autotune(configs: Sequence, run: Callable[[Any, int], Any], *, repeat: int = 20,
             key: str | None = None) -> TuneResult:
    """The fastest of `configs`, timing `run(config, repeat)` (a launch with repeat=repeat
    runs, returning its LaunchResult; `time_ms` is its fastest run). `key` (e.g. the kernel's
    name and the problem shape) remembers the choice on disk for this backend and device."""
    configs = list(configs)
    if not configs:
        raise ValueError("autotune needs at least one configuration")
    reprs = [repr(c) for c in configs]
    if len(set(reprs)) != len(reprs):
        raise ValueError("autotune configurations must have distinct reprs")
    for c in configs:               # they key times_ms and failures
        try:
            hash(c)
        except TypeError:
            raise ValueError(f"autotune configurations must be hashable (tuples, NamedTuples, "
                             f"frozen dataclasses), got a {type(c).__name__}: {c!r}") from None
    if key is not None:
        hit = _load(key, reprs)
        if hit is not None:
            return TuneResult(configs[reprs.index(hit)], cached=True)
    times, failures, device = {}, {}, None
    for c in configs:
        try:
            result = run(c, repeat)
        except (PycoopError, ValueError) as e:     # e.g. a compile error, an invalid tiling
            failures[c] = f"{type(e).__name__}: {e}".splitlines()[0]
            continue
        device = device or _device(result.backend)
        times[c] = result.time_ms
    timed = {c: t for c, t in times.items() if not math.isnan(t)}
    if not timed:
        raise PycoopError("autotune: no configuration ran" + "".join(
            f"\n  {c!r}: {why}" for c, why in failures.items()) if failures else
            "autotune: the device gave no timestamps")
    best = min(timed, key=timed.get)
    if key is not None:
        _store(key, device, reprs, repr(best))
    return TuneResult(best, times, failures)


def _device(backend: str) -> str:
    if backend != "vulkan":
        return backend
    caps = get_runtime().capabilities
    return f"vulkan:{caps.device_name}:{caps.driver_version}"


def _path(key: str, reprs: list[str]):
    """The file holding the choices for `key` and these configurations, one per device."""
    d = knobs.cache_dir()
    if d is None:
        return None
    return d / "autotune" / (hashlib.sha256(json.dumps([key, reprs]).encode()).hexdigest()[:32]
                             + ".json")


def _choices(path) -> dict:
    try:
        return json.loads(path.read_text())["choices"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _load(key: str, reprs: list[str]) -> str | None:
    """A choice stored for a device present now (a GPU's first, then the emulator's)."""
    path = _path(key, reprs)
    choices = _choices(path) if path is not None else {}
    for device in sorted(choices, key=lambda d: not d.startswith("vulkan:")):
        try:
            here = _device(device.split(":")[0])
        except PycoopError:          # no Vulkan here now: a stored GPU choice does not apply
            continue
        if here == device and choices[device] in reprs:
            return choices[device]
    return None


def _store(key: str, device: str, reprs: list[str], best: str) -> None:
    path = _path(key, reprs)
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    choices = {**_choices(path), device: best}
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump({"key": key, "configs": reprs, "choices": choices}, f)
    os.replace(tmp, path)
