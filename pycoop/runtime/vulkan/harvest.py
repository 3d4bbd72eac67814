"""The fault harvest of launch graphs (graph.py): a small kernel recorded as the last command of
a graph that holds checked launches.

A graph is recorded once, so its checked launches write their faults into fixed records, yet
each replay must report its own faults whatever is queued after it. The harvest moves every
record that holds a fault into this replay's slot of a host-visible ring and zeroes it for the
next replay. Which slot is known only on the device: the harvest keeps the replay count in a
counter word after the records and advances it. The host numbers the replays in the same order
(replays of one graph are ordered by barriers: each writes the records) and reads each
replay's slot when its batch completes (`VulkanRuntime.replay`).

Without a fault the harvest reads one word per record and writes the counter: the only cost a
checked replay adds is this one-workgroup dispatch and the barrier before it, and the host
does nothing per replay but note which slot to read.

The kernel's source lives here, by the runtime that records it; the front end compiles it
(`pycoop.frontend.kernel`, with `workgroup_size=WG`) and hands it to the graph with its first
checked launch.
"""
from __future__ import annotations

from ...ops.core import barrier, local_invocation_id
from ...types import Buffer, WriteBuffer, u32
from .faults import FAULT_BYTES

RECORD_WORDS = FAULT_BYTES // 4
WG = 64


def harvest_faults(records: Buffer[u32], ring: WriteBuffer[u32], count: u32, slots: u32):
    """`records`: `count` fault records, then the replay counter. `ring`: `slots` slots of
    `count` records each (slots a power of two, so the u32 counter wraps onto the same slot as
    the host's count)."""
    lane = local_invocation_id.x
    words = count * RECORD_WORDS
    seq = records[words]
    barrier()               # every lane has read the counter before lane 0 advances it
    if lane == 0:
        records[words] = seq + 1
    slot = (seq & (slots - 1)) * words
    for at in range(lane * RECORD_WORDS, words, WG * RECORD_WORDS):
        if records[at] != 0:
            for w in range(RECORD_WORDS):
                ring[slot + at + w] = records[at + w]
                records[at + w] = 0
