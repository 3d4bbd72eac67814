"""Buffer accesses of invocations of one workgroup that nothing orders: the emulator reports
them (emulator.buffer-race) where it would otherwise show one of the outcomes a GPU may give.
A load of another invocation's store, or a second store over it, needs
pc.barrier(memory="device") between them (pc.barrier() orders shared memory only); a store
over an element another invocation loaded needs any barrier between them."""
from __future__ import annotations

import numpy as np
import pytest

import pycoop as pc
from pycoop import u32

SRC = open(__file__).read().splitlines()


def _race(kernel, *arrays, grid=1):
    with pytest.raises(pc.EmulatorError) as e:
        kernel[grid](*arrays, backend="emulator")
    assert e.value.rule_id == "emulator.buffer-race"
    assert "# HERE" in SRC[e.value.loc.line - 1]
    return str(e.value)


@pc.kernel(workgroup_size=8)
def increment_one_counter(out: pc.Buffer[u32]):
    out[0] += u32(1)                                                    # HERE


def test_every_invocation_incrementing_one_element_is_a_race():
    """The classic mistake: 8 loads of 0, 8 stores of 1 (the emulator's lockstep gave 1, a GPU
    gives anything from 1 to 8)."""
    msg = _race(increment_one_counter, np.zeros(8, np.uint32))
    assert "this store changes element 0 of buffer 'out'" in msg
    assert "of the same workgroup loaded with no barrier since" in msg
    assert "pc.atomic" in msg                                           # the hint


def _neighbour(barrier: str | None):
    @pc.kernel(workgroup_size=8)
    def neighbour(out: pc.Buffer[u32]):
        i = pc.local_invocation_index()
        out[i] = i * u32(10)
        if barrier is not None:
            pc.barrier(memory=barrier)
        out[8 + i] = out[(i + 1) % 8]                                   # HERE
    return neighbour


@pytest.mark.parametrize("barrier", [None, "workgroup"])
def test_loading_a_neighbours_store_needs_a_device_barrier(barrier):
    msg = _race(_neighbour(barrier), np.zeros(16, np.uint32))
    assert "this load reads element 1 of buffer 'out'" in msg
    assert "invocation 1 of the same workgroup stored" in msg
    assert "pc.barrier() orders shared memory, not buffers" in msg


def test_a_device_barrier_orders_the_store_before_the_load():
    out = np.zeros(16, np.uint32)
    _neighbour("device")[1](out, backend="emulator")
    np.testing.assert_array_equal(out[8:], (np.arange(8) + 1) % 8 * 10)


@pc.kernel(workgroup_size=8)
def normalise(X: pc.Buffer[u32], n: u32):
    """Every invocation reads all of X, then each scales its share: the loads come before the
    barrier, the stores after it."""
    i = pc.local_invocation_index()
    s = u32(0)
    for c in range(n):
        s = s + X[c]
    pc.barrier()
    for c in range(i, n, 8):
        X[c] = X[c] * s


def test_a_barrier_orders_loads_before_later_stores():
    x = np.arange(1, 21, dtype=np.uint32)
    want = x * x.sum()
    normalise[1](x, 20, backend="emulator")
    np.testing.assert_array_equal(x, want)


def _two_stores(second: int):
    @pc.kernel(workgroup_size=8)
    def two_stores(out: pc.Buffer[u32]):
        i = pc.local_invocation_index()
        if i == 0:
            out[0] = u32(5)
        if i == 1:
            out[0] = u32(second)                                        # HERE
        out[1 + i] = out[1 + i]                                         # X loaded and stored
    return two_stores


def test_a_second_store_of_another_value_is_a_race():
    msg = _race(_two_stores(6), np.zeros(9, np.uint32))
    assert "invocation 0 of the same workgroup stored with no pc.barrier(memory='device')" in msg


def test_a_second_store_of_the_same_value_is_not_reported():
    out = np.zeros(9, np.uint32)
    _two_stores(5)[1](out, backend="emulator")
    assert out[0] == 5


@pc.kernel(workgroup_size=8)
def own_elements(out: pc.Buffer[u32]):
    i = pc.workgroup_id.x * 8 + pc.local_invocation_index()
    out[i] = i
    out[i] = out[i] * u32(3) + u32(1)


def test_each_invocation_updating_its_own_elements_is_clean():
    out = np.zeros(32, np.uint32)
    own_elements[4](out, backend="emulator")
    np.testing.assert_array_equal(out, np.arange(32) * 3 + 1)


@pc.kernel(workgroup_size=8)
def masked_increment(out: pc.Buffer[u32]):
    i = pc.local_invocation_index()
    if i == 3:                          # one invocation: nothing to race with
        out[0] += u32(1)
    if i >= 6:
        out[1] += u32(1)                                                # HERE


def test_only_active_invocations_take_part():
    msg = _race(masked_increment, np.zeros(2, np.uint32))
    assert "element 1 of buffer 'out'" in msg and "invocation 7 of the same workgroup" in msg
