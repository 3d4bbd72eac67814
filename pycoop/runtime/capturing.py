"""Which thread is capturing a launch graph (`pycoop.capture`), and the error for what a
capture cannot hold. Kept apart from the graphs themselves so that the runtime's hot paths
and the Vulkan runtime can ask without importing them: while no capture is open anywhere,
asking costs one global read (`active`)."""
from __future__ import annotations

import sys
import threading

from ..errors import PycoopError, is_internal

_local = threading.local()
active = 0          # captures open in any thread (launch paths test this first)
emulator_graphs = 0     # emulator launch graphs not yet freed (EmulatorRuntime.stats)
_lock = threading.Lock()


class CaptureError(PycoopError, RuntimeError):
    """Something inside `with pycoop.capture():` cannot be recorded into a launch graph (a
    NumPy argument, a synchronisation, a nested capture...), or a graph was misused."""


def current():
    """The graph this thread is capturing into, or None."""
    return getattr(_local, "graph", None) if active else None


def enter(graph) -> None:
    global active
    with _lock:
        _local.graph = graph
        active += 1


def leave() -> None:
    global active
    with _lock:
        _local.graph = None
        active -= 1


def user_site() -> str:
    """file:line of the innermost caller outside pycoop's implementation."""
    f = sys._getframe(1)
    while f is not None and is_internal(f.f_code.co_filename):
        f = f.f_back
    return f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "<unknown>"


def refuse(what: str, hint: str, graph=None) -> CaptureError:
    """The error for `what` done inside the capture of `graph` (this thread's by default),
    naming the user's line and where the capture began."""
    graph = graph if graph is not None else current()
    where = f" (the capture began at {graph.site})" if graph is not None else ""
    return CaptureError(f"{what} at {user_site()}, inside a launch-graph capture{where}"
                        f"\n  hint: {hint}")


def refuse_sync(what: str) -> None:
    """Raise if this thread is capturing: `what` waits for the device, and the captured
    launches have not run (they run at each replay)."""
    if active and getattr(_local, "graph", None) is not None:
        raise refuse(f"{what} waits for the device", "captured launches run only when the "
                     "graph is replayed: synchronise after `g.launch()`, outside the "
                     "`with pycoop.capture()` block")
