"""Loads of buffer elements another workgroup stored in the same dispatch: the emulator
reports them as data races unless a device-scope barrier and a release/acquire atomic
order them (emulator.sync), and runs the last-workgroup pattern of docs/api.md cleanly."""
from __future__ import annotations

import numpy as np
import pytest

import pycoop as pc
from pycoop import f32, u32


def _total(first_barrier: str, semantics: str, second_barrier: str):
    """Each workgroup stores its part (invocation 1); invocation 0 counts the workgroup done,
    and in the last one to count, invocation 1 sums the parts."""
    @pc.kernel(workgroup_size=32)
    def total(part: pc.Buffer[f32], count: pc.Buffer[u32], out: pc.Buffer[f32]):
        done = pc.shared(u32, 1)
        i, w = pc.local_invocation_index(), pc.workgroup_id.x
        if i == 1:
            part[w] = f32(w + 1)
        pc.barrier(memory=first_barrier)
        if i == 0:
            done[0] = pc.atomic.add(count, 0, u32(1), semantics=semantics)
        pc.barrier(memory=second_barrier)
        if done[0] == pc.num_workgroups.x - 1:
            if i == 1:                   # not the invocation that made the acquire
                t = f32(0.0)
                for j in pc.range(0, pc.num_workgroups.x):
                    t = t + part[j]      # HERE
                out[0] = t
    return total


def _run(k, n=4):
    part, count, out = np.zeros(n, np.float32), np.zeros(1, np.uint32), np.zeros(1, np.float32)
    k[n](part, count, out, backend="emulator")
    return out[0]


def test_last_workgroup_pattern_is_ordered():
    assert _run(_total("device", "acq_rel", "device")) == 1 + 2 + 3 + 4


@pytest.mark.parametrize("first,semantics,second", [
    ("workgroup", "acq_rel", "device"),      # the parts are not made available (their
                                             # storing invocations made no release)
    ("device", "relaxed", "device"),         # no release/acquire
    ("device", "release", "device"),         # released, never acquired
    ("device", "acq_rel", "workgroup"),      # acquired by invocation 0 only
])
def test_missing_synchronisation_is_a_race(first, semantics, second):
    with pytest.raises(pc.EmulatorError) as e:
        _run(_total(first, semantics, second))
    assert e.value.rule_id == "emulator.workgroup-race"
    assert "data race: this load reads element" in str(e.value) and "stored" in str(e.value)
    src = open(__file__).read().splitlines()
    assert "# HERE" in src[e.value.loc.line - 1]


@pc.kernel(workgroup_size=32)
def _neighbour(x: pc.Buffer[f32]):
    i = pc.global_invocation_id.x
    x[i] = f32(i)
    pc.barrier()
    x[i] = x[(i + 32) % (pc.num_workgroups.x * 32)] + 1.0    # the next workgroup's element


def test_reading_another_workgroups_store_is_a_race():
    """A workgroup barrier orders nothing across workgroups."""
    with pytest.raises(pc.EmulatorError, match="data race: this load reads element 32"):
        _neighbour[2](np.zeros(64, np.float32), backend="emulator")
    x = np.zeros(32, np.float32)
    _neighbour[1](x, backend="emulator")          # one workgroup: its own stores, no race
    assert (x == np.arange(32) + 1).all()


@pc.kernel(workgroup_size=32)
def _own_release(part: pc.Buffer[f32], count: pc.Buffer[u32], out: pc.Buffer[f32]):
    """The storing invocation releases its own store (no device barrier needed); the
    acquiring invocation loads."""
    w = pc.workgroup_id.x
    if pc.local_invocation_index() == 0:
        part[w] = f32(w)
        old = pc.atomic.add(count, 0, u32(1), semantics="acq_rel")
        if old == pc.num_workgroups.x - 1:
            t = f32(0.0)
            for j in pc.range(0, pc.num_workgroups.x):
                t = t + part[j]
            out[0] = t


def test_a_release_by_the_storing_invocation_orders_its_store():
    part, count, out = np.zeros(3, np.float32), np.zeros(1, np.uint32), np.zeros(1, np.float32)
    _own_release[3](part, count, out, backend="emulator")
    assert out[0] == 0 + 1 + 2


@pc.kernel(workgroup_size=32)
def _two_writers(x: pc.Buffer[f32]):
    i = pc.local_invocation_index()
    w = pc.workgroup_id.x
    if w == 0:
        x[i] = f32(1.0)
    pc.barrier()
    if w == 1:
        x[i] = x[32 + i] + 2.0          # HERE: workgroup 0 stored x[i] in this dispatch


def test_a_store_over_another_workgroups_store_is_a_race():
    """Two workgroups storing different values to one element, unordered: which value stays
    is unspecified; the same value stored twice is not reported."""
    with pytest.raises(pc.EmulatorError) as e:
        _two_writers[2](np.zeros(64, np.float32), backend="emulator")
    assert e.value.rule_id == "emulator.workgroup-race"
    assert "this store changes element 0" in str(e.value) and "workgroup 0" in str(e.value)
    src = open(__file__).read().splitlines()
    assert "# HERE" in src[e.value.loc.line - 1]
    x = np.zeros(64, np.float32)
    x[32:] = -1.0                        # workgroup 1 then stores 1.0 too: the same value
    _two_writers[2](x, backend="emulator")
    assert (x[:32] == 1.0).all()
