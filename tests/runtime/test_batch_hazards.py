"""The hazard tracker that decides where a batch needs a pipeline barrier, against a model
that keeps every byte's last accesses, and the threaded host copies (no device needed
beyond pyvulkan's cffi)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pycoop.runtime.vulkan import VulkanUnavailable

try:
    from pycoop.runtime.vulkan.batch import Hazards
except VulkanUnavailable as e:       # pyvulkan or its loader is missing
    pytest.skip(str(e), allow_module_level=True)

access = st.tuples(st.integers(0, 2), st.integers(0, 60), st.integers(1, 20), st.booleans())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(access, min_size=1, max_size=3), min_size=1, max_size=12))
def test_barriers_exactly_where_bytes_conflict(commands):
    """Each command is a few (buffer, start, length, write) accesses. A barrier is needed iff
    some byte it reads was written, or some byte it writes was read or written, by a command
    since the last barrier."""
    tracker = Hazards()
    read: set[tuple[int, int]] = set()
    written: set[tuple[int, int]] = set()
    for command in commands:
        want = any((buf, b) in written or (write and (buf, b) in read)
                   for buf, lo, n, write in command for b in range(lo, lo + n))
        got = any(tracker.conflicts(buf, lo, lo + n, write) for buf, lo, n, write in command)
        assert got == want
        if got:
            tracker.clear()
            read.clear()
            written.clear()
        for buf, lo, n, write in command:
            tracker.add(buf, lo, lo + n, write)
            (written if write else read).update((buf, b) for b in range(lo, lo + n))


@pytest.mark.parametrize("nbytes", [0, 1, 4095, (8 << 20) + 12])
def test_host_copies_round_trip(nbytes):
    from pycoop.runtime.vulkan import hostcopy
    from pycoop.runtime.vulkan.ext import ffi
    src = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    mapped = ffi.new("char[]", max(nbytes, 1))
    if nbytes:
        hostcopy.to_mapped(mapped, src)
    back = np.empty_like(src)
    if nbytes:
        hostcopy.from_mapped(back, mapped)
    np.testing.assert_array_equal(back, src)
    f32 = src[: nbytes // 4 * 4].view(np.float32).reshape(-1, 1)   # any dtype and shape
    out = np.zeros_like(f32)
    if f32.size:
        hostcopy.to_mapped(mapped, f32)
        hostcopy.from_mapped(out, mapped)
    np.testing.assert_array_equal(out.view(np.uint8), f32.view(np.uint8))
