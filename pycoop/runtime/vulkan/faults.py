"""What checked launches report: out-of-bounds accesses the guards caught, and red zones.

A checked kernel (pycoop.codegen.checked) writes its launch's first out-of-bounds access into
a fault record; `read_fault` turns a record into `pycoop.KernelFault`, worded as the emulator
words the same access. Red zones are guard words after each buffer a checked launch stages:
a write that slips past the guards (an access the guards do not cover) changes them, and
`check_red_zone` reports it after the launch.
"""
from __future__ import annotations

import numpy as np

from ...codegen.checked import FAULT_BYTES, FAULT_WORDS
from ...errors import KernelFault, Loc

RULE = "checked launch: every buffer and shared-array access stays within its memory"
SLAB_RECORDS = 256                    # fault records allocated together (one per launch)
RING_BYTES = 1 << 18                  # a graph's ring of replay slots (harvest.py), about
RING_SLOTS = (16, 4096)               # (fewest and most slots, powers of two)
RED_ZONE_BYTES = 64                   # guard bytes after each staged buffer
RED_ZONE_WORD = 0xC0DEFA17            # their pattern (u32): unlikely as real data
RED_ZONE_RULE = "checked launch: nothing is written past the end of a buffer"

__all__ = ["FAULT_BYTES", "RED_ZONE_BYTES", "SLAB_RECORDS", "RED_ZONE_WORD", "check_red_zone", "read_fault",
           "red_zone_offset", "ring_slots"]


def read_fault(record: np.ndarray, ops: list[dict], grid: tuple[int, int, int],
               kernel: str) -> KernelFault | None:
    """The KernelFault a fault record holds (u32 words, FAULT_WORDS order), or None."""
    if not record[0]:           # the op word: no fault (every launch's record is read)
        return None
    w = dict(zip(FAULT_WORDS, (int(x) for x in record[:len(FAULT_WORDS)])))
    op = ops[w["op"] - 1]
    index = w["index_lo"] | (w["index_hi"] << 32)
    if w["signed"] and index >= 1 << 63:     # a 32-bit index's high word is its sign
        index -= 1 << 64
    wg = (w["wg_x"], w["wg_y"], w["wg_z"])
    memory = f"{op['memory']} ({w['count']} elements{op['per']})"
    if op["block"]:
        what = f"{op['what']} out of bounds: elements {index}..{index + w['extent']} of {memory}"
    else:
        what = f"{op['what']} out of bounds of {memory}: index {index}"
    message = (f"undefined behaviour in workgroup {wg}, invocation {w['invocation']}: {what} "
               f"({kernel}, grid {grid}; caught by the checked launch, the access was "
               "suppressed)")
    return KernelFault(message, Loc(op["file"], op["line"], op["col"]), rule=RULE,
                       rule_id="checked.bounds",
                       hint="check the index against the array size (launches beyond the data "
                            "need an `if i < n:` guard)",
                       buffer=op["memory"], index=index, count=w["count"], workgroup=wg,
                       invocation=w["invocation"])


def ring_slots(records: int) -> int:
    """Slots of the ring of a graph whose largest slab holds `records` fault records: replays
    queued at once before the host must wait for the oldest one's faults to be read. A power
    of two (the device's u32 replay counter wraps onto the host's slot), about RING_BYTES."""
    fit = max(1, RING_BYTES // (records * FAULT_BYTES))
    return min(max(1 << (fit.bit_length() - 1), RING_SLOTS[0]), RING_SLOTS[1])


def red_zone_offset(nbytes: int) -> int:
    """Where a buffer's red zone starts: its end, rounded up to whole words."""
    return (nbytes + 3) // 4 * 4


def check_red_zone(zone: np.ndarray, name: str, nbytes: int, kernel: str) -> KernelFault | None:
    """A KernelFault if the red zone (u32 words) after buffer `name` of `nbytes` bytes was
    written, naming the first changed byte past the buffer's end."""
    bad = np.flatnonzero(zone != RED_ZONE_WORD)
    if not bad.size:
        return None
    return KernelFault(
        f"{kernel} wrote past the end of parameter {name} ({nbytes} bytes): the red zone "
        f"after it was changed at byte {red_zone_offset(nbytes) + 4 * int(bad[0])}", None,
        rule=RED_ZONE_RULE, rule_id="checked.red-zone",
        hint="an access the bounds guards do not cover (a tensor store whose layout is larger "
             "than the buffer?) wrote there; run the kernel on the emulator to find the line",
        buffer=name)
