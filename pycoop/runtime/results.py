"""What a launch (or a launch-graph replay) returns: the backend and its times."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import PycoopError
from ..jupyter import launch_result_html, statistics_html
from .arrays import wait_all
from .capturing import CaptureError


class LaunchResult:
    """What a launch returns: the backend and the time of each run (`repeat=`): device time
    from Vulkan timestamps, or wall time on the emulator. An asynchronous launch (Vulkan,
    device arrays) gets its times at the next synchronisation: reading them waits for it.
    A launch-graph replay (`Graph.launch`) returns one too, with one time: the replay's."""

    __slots__ = ("backend", "_times", "_pending")

    def __init__(self, backend: str, times_ms: tuple[float, ...] | None = None, pending=None):
        self.backend, self._times, self._pending = backend, times_ms, pending

    @property
    def times_ms(self) -> tuple[float, ...]:
        """Per run, in ms (waits for an asynchronous launch to finish; raises its error)."""
        if self._times is None:
            pending = self._pending
            if not pending.done and pending.error is None:
                wait_all()
            if pending.error is not None:
                raise pending.error
            self._times = pending.times_ms
        return self._times

    @property
    def spans_ns(self) -> tuple[tuple[float, float], ...] | None:
        """(start, end) of each run on the device's clock in ns (Vulkan), None on the
        emulator: the gap between one launch's end and the next one's start is device idle."""
        if self._pending is None:
            return None
        self.times_ms               # waits for the launch
        return self._pending.spans_ns

    @property
    def time_ms(self) -> float:
        """The fastest run."""
        return min(self.times_ms)

    def _missing(self) -> str | None:
        """Why this launch has no times (it was captured into a graph, or it failed), else
        None; waits for the launch. Displays say so: a repr that raised broke printing a list
        of results, a debugger's view of them and Jupyter's display. Another launch's error,
        raised by the wait, is still raised: it is not this launch's to hide."""
        try:
            self.times_ms
        except PycoopError as e:
            if e is not self._pending.error:
                raise
            if isinstance(e, CaptureError):
                return "captured into a launch graph, it runs in the graph's replays"
            return f"failed: {type(e).__name__}: {str(e).splitlines()[0]}"
        return None

    def __repr__(self) -> str:
        missing = self._missing()
        if missing is not None:
            return f"<launch on {self.backend}: {missing}>"
        runs = f" (fastest of {len(self.times_ms)})" if len(self.times_ms) > 1 else ""
        return f"<launch on {self.backend}: {self.time_ms:.3f} ms{runs}>"

    def _repr_html_(self) -> str:
        return launch_result_html(self)


@dataclass(frozen=True)
class KernelStatistics:
    """What the Vulkan driver reports of a kernel compiled for its device
    (`CompiledKernel.gpu_statistics`, VK_KHR_pipeline_executable_properties): `values` by
    statistic name, with their `descriptions`. The names and their meaning are the driver's
    own: NVIDIA's include the registers each invocation takes, which bound how many
    workgroups an SM holds at once."""
    kernel: str
    device: str
    executable: str
    subgroup_size: int
    values: dict
    descriptions: dict

    def __getitem__(self, name: str):
        return self.values[name]

    def __str__(self) -> str:
        width = max((len(n) for n in self.values), default=0)
        rows = [f"  {n:<{width}}  {v}" for n, v in self.values.items()]
        return "\n".join([f"{self.kernel} on {self.device} ({self.executable}, subgroup size "
                          f"{self.subgroup_size}):"] + rows)

    def _repr_html_(self) -> str:
        return statistics_html(self)
