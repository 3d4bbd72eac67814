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
from collections.abc import Iterable
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, Callable, Sequence

from . import knobs
from .errors import ArgumentError, ArgumentValueError, PycoopError, entry_point
from .plot import autotune_figure, png
from .runtime.vulkan import get_runtime
from .runtime.vulkan.abi import check_repeat


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
    if isinstance(configs, (str, bytes)) or not isinstance(configs, Iterable):
        raise ArgumentError(f"autotune: configs is a sequence of configurations, got {configs!r}")
    configs = list(configs)
    if not configs:
        raise ArgumentValueError("autotune needs at least one configuration")
    reprs = [repr(c) for c in configs]
    if len(set(reprs)) != len(reprs):
        raise ArgumentValueError("autotune configurations must have distinct reprs")
    first: dict = {}
    for c in configs:               # they key times_ms and failures
        try:
            same = first.setdefault(c, c)
        except TypeError:
            raise ArgumentValueError(f"autotune configurations must be hashable (tuples, "
                                     f"NamedTuples, frozen dataclasses), got a "
                                     f"{type(c).__name__}: {c!r}") from None
        if same is not c:           # 1 and 1.0: one key, so one would hide the other's time
            raise ArgumentValueError(f"autotune configurations {same!r} and {c!r} are equal "
                                     "(one key of times_ms): make them distinct")
    if not callable(run):
        raise ArgumentError(f"autotune: run is a function run(config, repeat) returning the "
                            f"launch's LaunchResult, got {run!r}")
    repeat = check_repeat(repeat)   # refused here, not by every configuration's launch
    if key is not None and not isinstance(key, str):
        raise ArgumentError(f"autotune: key is a string (e.g. the kernel's name and the "
                            f"problem shape) or None, got {key!r}")
    if key is not None:
        hit = _load(key, reprs)
        if hit is not None:
            return TuneResult(configs[reprs.index(hit)], cached=True)
    times, failures, ran = {}, {}, {}
    for c in configs:
        try:
            result = run(c, repeat)
            # reading the times waits for the launch, and raises its error
            backend, time_ms = getattr(result, "backend", None), getattr(result, "time_ms", None)
        except (PycoopError, ValueError) as e:     # e.g. a compile error, an invalid tiling
            failures[c] = f"{type(e).__name__}: {e}".splitlines()[0]
            continue
        if not isinstance(backend, str) or not isinstance(time_ms, Real) \
                or isinstance(time_ms, bool):
            raise ArgumentError(f"autotune: run({c!r}, {repeat}) must return the launch's "
                                f"LaunchResult (`return kernel[grid](..., repeat=repeat)`), "
                                f"got {result!r}")
        times[c], ran[c] = float(time_ms), backend
    if len(set(ran.values())) > 1:  # backend="auto" ran some on the emulator: another clock
        for c, backend in ran.items():
            if backend != "vulkan":
                failures[c] = (f"it ran on the {backend}, the others on Vulkan: its wall time "
                               "does not compare with their device times")
                del times[c]
    timed = {c: t for c, t in times.items() if not math.isnan(t)}
    if not timed:
        raise PycoopError("autotune: no configuration ran" + "".join(
            f"\n  {c!r}: {why}" for c, why in failures.items()) if failures else
            "autotune: the device gave no timestamps")
    best = min(timed, key=timed.get)
    if key is not None:
        _store(key, _device(ran[best]), reprs, repr(best))
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
    """The choices stored at `path` by device; none where the file is missing, unreadable or
    not what `_store` writes (it is then rewritten by the next store)."""
    try:
        choices = json.loads(path.read_text())["choices"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not isinstance(choices, dict) or not all(isinstance(v, str) for v in choices.values()):
        return {}
    return choices


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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        choices = {**_choices(path), device: best}
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"key": key, "configs": reprs, "choices": choices}, f)
            os.replace(tmp, path)
        except OSError:
            os.unlink(tmp)
            raise
    except OSError:
        pass        # an unusable cache directory: the choice is not remembered, the result stands
