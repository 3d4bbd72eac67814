"""Which buffer writes of other workgroups a load may see in one dispatch.

Workgroups run concurrently, so a plain load of a buffer element that another workgroup
stored in the same dispatch is a data race unless the Vulkan memory model orders the two
(and so is a store changing such an element).
The emulator runs the workgroups in lockstep, so such a load would quietly see the value; it
reports the race instead unless the pattern that orders it was followed:

- the writer's store is made available: by a release (or acq_rel) atomic on a buffer by the
  storing invocation itself, after the store, or by any invocation of its workgroup after a
  `pc.barrier(memory="device")` that follows the store;
- the reader acquired it: an acquire (or acq_rel) atomic on a buffer, no earlier than that
  release, by the loading invocation itself, or by any invocation of its workgroup followed
  by a `pc.barrier(memory="device")` before the load.

One clock orders the events; ops run in lockstep, so a release and an acquire made by the
same atomic op count as ordered (on a GPU only the invocations after the releasing one in
the atomic's order see it; pycoop's last-workgroup pattern reads only there). Which element
the atomics touched is not compared, so a missing synchronisation can go unreported, but a
reported race is always one.
"""
from __future__ import annotations

import numpy as np


class DeviceSync:
    """Per invocation and workgroup, the clock of its last release, acquire and device-scope
    barrier in this dispatch (see the module docstring)."""

    def __init__(self, nwg: int, wgs: int):
        self.wgs = wgs
        self.clock = 0
        self.barrier = np.full(nwg, -1, np.int64)           # last device barrier
        self.release = np.full((nwg, wgs), -1, np.int64)    # each invocation's last release
        self.wg_release = np.full(nwg, -1, np.int64)        # the workgroup's last release,
        self.wg_cover = np.full(nwg, -1, np.int64)          # and its device barrier before it
        self.acquire = np.full((nwg, wgs), -1, np.int64)    # each invocation's last acquire
        self.wg_acquire = np.full(nwg, -1, np.int64)        # acquires a device barrier shared

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def device_barrier(self, wgs: np.ndarray) -> None:
        """Workgroups `wgs` (a bool mask) pass a device-scope barrier."""
        c = self.tick()
        self.barrier[wgs] = c
        self.wg_acquire[wgs] = np.maximum(self.wg_acquire, self.acquire.max(1))[wgs]

    def atomic(self, active: np.ndarray | None, semantics: str) -> None:
        """A buffer atomic with `semantics` by the `active` invocations (None: all)."""
        c = self.tick()
        act = np.ones(self.release.shape, bool) if active is None else active
        wgs = act.any(1)
        if semantics in ("release", "acq_rel"):
            self.release[act] = c
            self.wg_release[wgs] = c
            self.wg_cover[wgs] = self.barrier[wgs]
        if semantics in ("acquire", "acq_rel"):
            self.acquire[act] = c

    def unordered(self, writer: np.ndarray, wrote: np.ndarray, reader: np.ndarray) -> np.ndarray:
        """Which loads by invocations `reader` (global indices) of elements stored by `writer`
        at clocks `wrote` (writer < 0: none this dispatch) are not ordered after the store."""
        wa, wr = writer // self.wgs, reader // self.wgs
        other = (writer >= 0) & (wa != wr)
        if not other.any():
            return other
        w = np.where(other, writer, 0)
        wa = np.where(other, wa, 0)
        seen = np.maximum(self.acquire.reshape(-1)[reader], self.wg_acquire[wr])
        own = self.release.reshape(-1)[w]                       # the writer's own release
        by_own = (own > wrote) & (own <= seen)
        by_wg = (self.wg_cover[wa] > wrote) & (self.wg_release[wa] <= seen)
        return other & ~(by_own | by_wg)
