"""Launch graphs: record a sequence of launches once, replay it with one call.

    with pycoop.capture() as g:          # launches inside are recorded, not run
        k1[grid](x, h, 2.0, n)
        k2[grid](h, y, n)
    for token in ...:
        x.copy_from(next_input)           # new inputs: same arrays, new contents
        g.launch()                        # queued like a launch; one unit on the device
    pycoop.synchronize()

On Vulkan a graph is one secondary command buffer (pycoop.runtime.vulkan.graph), recorded
once and executed by each replay from the open batch, with barriers where the replay depends
on earlier work or later work on it. On the emulator a graph is the list of its launches,
run again in order by each replay: the same code runs on a laptop.

A graph keeps every array it uses alive until it is freed (`g.free()`, or its last reference
going). Arrays keep their identity: write inputs with `copy_from` between replays and read
outputs after `pycoop.synchronize()`. Scalar arguments are recorded with the launch (baked
in). What cannot be recorded raises `CaptureError` at the user's line (see `capturing`).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..errors import ArgumentError, entry_point
from . import capturing, interop
from .arrays import Array, resolve_backend, vulkan_runtime
from .capturing import CaptureError
from .results import LaunchResult

__all__ = ["CaptureError", "Graph", "capture"]


class _NotRun:
    """The pending times of a captured launch: it runs only in replays."""

    __slots__ = ("label", "error")
    done = False

    def __init__(self, label: str):
        self.label = label
        self.error = CaptureError(f"{label} was captured into a launch graph and runs only "
                                  "when the graph is replayed\n  hint: time the replay: "
                                  "`g.launch().times_ms`")


def captured(backend: str, label: str) -> LaunchResult:
    """What a launch made inside a capture returns: reading its times raises CaptureError."""
    return LaunchResult(backend, pending=_NotRun(label))


class Graph:
    """A recorded sequence of launches (`pycoop.capture`). `launch()` queues one replay;
    `free()` (or dropping the last reference) releases it once no replay is in flight."""

    def __init__(self, backend: str, site: str):
        self.backend, self.site = backend, site
        self.state = "capturing"            # then "ready", "failed" or "freed"
        self.launches = 0                   # launches, copies and zero fills recorded
        self._arrays: dict[int, Array] = {}  # every array used, kept alive
        self._written: dict[int, list[tuple[int, int]]] = {}    # storage -> byte ranges
        self._steps: list = []              # emulator: the recorded work, in order
        self._recording = None              # Vulkan: the GraphRecording
        self._harvest = None                # and the fault harvest that ends it (checked)
        self._runtime = None
        self._label = ""
        if backend == "vulkan":
            self._runtime = vulkan_runtime()
            self._recording = self._runtime.begin_graph()
        else:
            with capturing._lock:
                capturing.emulator_graphs += 1

    # ------------------------------------------------------------------ recording
    def _keep(self, arrays, written) -> None:
        for a in arrays:
            self._arrays.setdefault(id(a), a)
        for a in written:
            self._written.setdefault(id(a._storage), []).append(
                (a._byte_offset, a._byte_offset + a.nbytes))

    def writes(self, array: Array) -> bool:
        """Whether a recorded launch or copy writes any byte of `array`."""
        lo, hi = array._byte_offset, array._byte_offset + array.nbytes
        return any(a < hi and lo < b for a, b in self._written.get(id(array._storage), ()))

    def check_backend(self, backend: str, what: str) -> None:
        if backend != self.backend:
            raise capturing.refuse(
                f"{what} on {backend} arrays", f"this capture records {self.backend} launches; "
                f"make the arrays there (backend={self.backend!r}) or capture on {backend} "
                f"(pycoop.capture(backend={backend!r}))", self)

    def add_launch(self, arrays: list, written: list, *, prepared=None, label: str = "",
                   step=None, harvest=None) -> None:
        """Record a checked launch: `prepared` (Vulkan, see VulkanRuntime.prepare) or `step`
        (emulator: a callable that runs it); `arrays` are kept alive, `written` noted.
        `harvest`: with a bounds-checked Vulkan launch, the compiled fault harvest that will
        end the graph (pycoop.runtime.vulkan.harvest)."""
        if self._recording is not None:
            self._runtime.capture_launch(self._recording, prepared, label)
            if harvest is not None:
                self._harvest = harvest
        else:
            self._steps.append(step)
        self._keep(arrays, written)
        self.launches += 1

    def capture_copy(self, dst: Array, source: Any) -> Array:
        """`dst.copy_from(source)` inside the capture: recorded if `source` is an array."""
        if not isinstance(source, Array):
            raise capturing.refuse(
                "copy_from(host data)", "host data would be read once, now, not at each "
                "replay: write inputs with copy_from before `g.launch()`, outside the capture "
                "(only copies between arrays are recorded)", self)
        if source.nbytes != dst.nbytes or source.dtype != dst.dtype:
            raise ArgumentError(f"copy_from: source {source.shape} {source.dtype} does not "
                                f"match {dst.shape} {dst.dtype}")
        self.check_backend(source.backend, "copy_from")
        self.check_backend(dst.backend, "copy_from")
        if self._recording is not None:
            source._storage.check()
            dst._storage.check()
            self._runtime.capture_copy(self._recording, source._storage.allocation,
                                       source._byte_offset, dst._storage.allocation,
                                       dst._byte_offset, dst.nbytes)
        else:
            into, out_of = dst._host_view().reshape(-1), source._host_view().reshape(-1)
            self._steps.append(lambda: np.copyto(into, out_of))
        self._keep((dst, source), (dst,))
        self.launches += 1
        return dst

    def capture_zeros(self, array: Array) -> None:
        """`pc.zeros` inside the capture: its zero fill is recorded too (see `zeros`)."""
        if self._recording is not None:
            allocation = array._storage.allocation
            self._runtime.capture_fill(self._recording, allocation, 0, allocation.size)
        else:
            data = array._storage.data
            self._steps.append(lambda: data.fill(0))
        self._keep((array,), (array,))
        self.launches += 1

    def _finish(self) -> None:
        if self._recording is not None:
            self._runtime.end_graph(self._recording, self._harvest)
        self.state = "ready"
        self._label = (f"launch graph captured at {self.site} ({self.launches} launch"
                       f"{'es' if self.launches != 1 else ''})")

    # ------------------------------------------------------------------ replay
    @entry_point
    def launch(self) -> LaunchResult:
        """Queue one replay of the recorded launches, in order with other launches, and
        return at once (Vulkan) or after running them (emulator). The result's `times_ms`
        has one entry: on Vulkan the device time from the start of the replay's first
        command to the end of its last (timestamps, read at the synchronisation that sees it
        finish), on the emulator the wall time."""
        if self.state != "ready":
            if self.state == "capturing":
                raise capturing.refuse("g.launch() of the graph being captured",
                                       "replay it after the `with pycoop.capture()` block", self)
            raise CaptureError(f"this launch graph (captured at {self.site}) was "
                               + ("freed" if self.state == "freed" else
                                  "not completed: an error left its capture") +
                               "\n  hint: capture it again")
        if capturing.active and capturing.current() is not None:
            raise capturing.refuse("a launch-graph replay", "replay graphs outside the capture, "
                                   "or launch the kernels themselves inside it")
        label = f"{self._label}, replayed at {capturing.user_site()}"
        if self._recording is None:
            t0 = time.perf_counter()
            for step in self._steps:
                step()
            return LaunchResult("emulator", ((time.perf_counter() - t0) * 1e3,))
        runtime = self._runtime
        shared = interop.wait_for_torch(self._arrays.values())
        pending = runtime.replay(self._recording, label)
        if shared:          # torch's stream runs after the replay
            interop.release_to_torch(runtime)
        return LaunchResult("vulkan", pending=pending)

    # ------------------------------------------------------------------ teardown
    def free(self) -> None:
        """Release the graph: its command buffer and descriptor sets once no replay of it is
        in flight, and its references to the arrays (each freed when its last user goes).
        Launching it afterwards raises CaptureError."""
        if self.state in ("freed", "failed"):
            return
        self.state = "freed"
        if self._recording is not None:
            recording, self._recording = self._recording, None
            self._runtime.free_graph(recording)
        elif self.backend == "emulator":
            with capturing._lock:
                capturing.emulator_graphs -= 1
        self._steps = []
        self._arrays = {}
        self._written = {}

    def _discard(self) -> None:
        """The capture ended with an error: nothing of it can be replayed."""
        self.free()
        self.state = "failed"

    def __del__(self):
        try:
            if self.state not in ("freed", "failed"):
                self.free()
        except Exception:       # interpreter shutdown: the runtime may be gone already
            pass

    def __len__(self) -> int:
        return self.launches

    def __repr__(self) -> str:
        return (f"<pycoop launch graph on {self.backend}: {self.launches} launches, "
                f"{self.state}, captured at {self.site}>")


class _Capture:
    """`with pycoop.capture() as g:` (see `capture`)."""

    def __init__(self, backend: str | None):
        self.backend = backend
        self.graph: Graph | None = None

    @entry_point
    def __enter__(self) -> Graph:
        outer = capturing.current() if capturing.active else None
        if outer is not None:
            raise capturing.refuse("pycoop.capture()", "captures do not nest: end the "
                                   "outer one first", outer)
        self.graph = Graph(resolve_backend(self.backend), capturing.user_site())
        capturing.enter(self.graph)
        return self.graph

    def __exit__(self, kind, value, tb) -> bool:
        capturing.leave()
        if kind is None:
            self.graph._finish()
        else:
            self.graph._discard()
        return False


def capture(backend: str | None = None) -> _Capture:
    """`with pycoop.capture() as g:` records the launches (and copies between arrays) made
    inside on this thread into the launch graph `g` instead of running them; `g.launch()`
    replays them. `backend` as for `pycoop.empty` (the arrays the launches use must live
    there). See docs/arrays.md, "Launch graphs"."""
    if backend is not None:
        resolve_backend(backend)            # a bad name fails here, not at __enter__
    return _Capture(backend)
