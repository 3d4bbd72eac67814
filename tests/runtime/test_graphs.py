"""Launch graphs (`pycoop.capture`, `Graph.launch`) on the emulator and on Vulkan (lavapipe):
replays give what the same launches give run directly (read-after-write inside, write-after-
read and ordinary launches between replays, many replays queued, inputs changed with
copy_from), what cannot be captured raises CaptureError at the user's line, checked launches
report each replay's faults, timing, and teardown without leaks."""
from __future__ import annotations

import contextlib
import gc
import inspect
import threading
import traceback

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f32, i32, u32
from pycoop.errors import is_internal
from runtime_helpers import VULKAN

BACKENDS = ["emulator", pytest.param("vulkan", marks=[
    pytest.mark.vulkan, pytest.mark.skipif(not VULKAN, reason="no Vulkan device")])]
WG = 64


@pc.kernel(workgroup_size=WG)
def axpy(X: pc.ReadBuffer[f32], Y: pc.Buffer[f32], a: f32, n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = a * X[i] + Y[i]


@pc.kernel(workgroup_size=WG)
def shift_sum(X: pc.ReadBuffer[f32], Y: pc.WriteBuffer[f32], n: u32):
    """Y[i] = X[i] + X[i + 1] (the last element: X[i]): reads a neighbour another
    invocation's workgroup may write in a later launch."""
    i = pc.global_invocation_id.x
    if i < n:
        j = pc.select(i + 1 < n, i + 1, i)
        Y[i] = X[i] + X[j]


@pc.kernel(workgroup_size=WG)
def tanh_inplace(X: pc.Buffer[f32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        X[i] = pc.tanh(X[i]) * 3.0


@pc.kernel(workgroup_size=WG)
def gather(Idx: pc.ReadBuffer[i32], X: pc.ReadBuffer[f32], Y: pc.WriteBuffer[f32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = X[Idx[i]]                                  # the index is data: may be out of bounds


def groups(n: int) -> int:
    return (n + WG - 1) // WG


def block(x, h, y, n, a=0.5):
    """Five launches with read-after-write between them and write-after-read of x at the
    end (h reads x, then x is overwritten from y)."""
    g = groups(n)
    shift_sum[g](x, h, n)           # h = x + shifted x       (reads x)
    axpy[g](h, y, a, n)             # y += a*h                (RAW on h)
    tanh_inplace[g](y, n)           # y = 3 tanh(y)           (RAW/WAW on y)
    shift_sum[g](y, h, n)           # h = y + shifted y       (WAR on h, RAW on y)
    axpy[g](h, x, -0.25, n)         # x -= h/4                (WAR on x: read by launch 1)


def fresh(n, backend, seed=0):
    rng = np.random.default_rng(seed)
    x = pc.asarray(rng.standard_normal(n).astype(np.float32), backend=backend)
    y = pc.asarray(rng.standard_normal(n).astype(np.float32), backend=backend)
    return x, pc.zeros(n, backend=backend), y


@pytest.mark.parametrize("backend", BACKENDS)
def test_replays_equal_direct_launches_with_ordinary_launches_between(backend):
    n = 1000
    x, h, y = fresh(n, backend)
    rx, rh, ry = fresh(n, backend)
    with pc.capture(backend=backend) as g:
        block(x, h, y, n)
    assert len(g) == 5 and g.backend == backend
    np.testing.assert_array_equal(x.numpy(), rx.numpy())    # nothing ran at capture
    np.testing.assert_array_equal(y.numpy(), ry.numpy())
    for step in range(6):
        g.launch()
        block(rx, rh, ry, n)
        if step % 2:                      # ordinary launches between replays: on y and x
            axpy[groups(n)](x, y, 0.125, n)
            axpy[groups(n)](rx, ry, 0.125, n)
            tanh_inplace[groups(n)](x, n)
            tanh_inplace[groups(n)](rx, n)
    pc.synchronize()
    for got, want in ((x, rx), (h, rh), (y, ry)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_queued_replays_then_one_synchronize(backend):
    n, count = 300, 200 if backend == "vulkan" else 20
    x, h, y = fresh(n, backend, 1)
    rx, rh, ry = fresh(n, backend, 1)
    with pc.capture(backend=backend) as g:
        block(x, h, y, n)
    results = [g.launch() for _ in range(count)]
    for _ in range(count):
        block(rx, rh, ry, n)
    pc.synchronize()
    for got, want in ((x, rx), (h, rh), (y, ry)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    times = [r.times_ms for r in results]
    assert all(len(t) == 1 and t[0] >= 0 for t in times)
    if backend == "vulkan":
        spans = [r.spans_ns[0] for r in results]
        assert all(a <= b for a, b in spans)
        assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1)), \
            "replays that depend on each other overlapped on the device"


@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_changed_with_copy_from_between_replays(backend):
    n = 257
    x = pc.zeros(n, backend=backend)
    y = pc.zeros(n, backend=backend)
    out = pc.zeros(n, backend=backend)
    zero = pc.zeros(n, backend=backend)
    with pc.capture(backend=backend) as g:
        y.copy_from(zero)                 # a copy between arrays is captured (y = 0)
        axpy[groups(n)](x, y, 2.0, n)
        shift_sum[groups(n)](y, out, n)
    outs = []
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal(n).astype(np.float32) for _ in range(4)]
    for v in inputs:
        x.copy_from(v)                    # queued before the replay, read at the call
        g.launch()
        outs.append(pc.zeros(n, backend=backend))
        outs[-1].copy_from(out)           # an ordinary copy after the replay sees its result
    pc.synchronize()
    for v, o in zip(inputs, outs):
        yy = np.float32(2.0) * v
        want = yy + np.append(yy[1:], yy[-1])
        np.testing.assert_array_equal(o.numpy(), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_zeros_made_inside_the_capture_start_from_zero_at_each_replay(backend):
    """An output made with pc.zeros inside the capture and added into (as split-K or kgroups
    kernels do) holds one launch's sums after every replay, not the sum of all replays;
    pc.empty's contents are written once and kept. A zeros made on another backend is not
    recorded."""
    n = 300
    x = pc.asarray(np.arange(n, dtype=np.float32), backend=backend)
    other = "vulkan" if backend == "emulator" else "emulator"
    with pc.capture(backend=backend) as g:
        acc = pc.zeros(n, backend=backend)
        axpy[groups(n)](x, acc, 2.0, n)             # acc += 2 x
        axpy[groups(n)](x, acc, 1.0, n)             # acc += x
        kept = pc.empty(n, backend=backend)
        if backend == "emulator" or VULKAN:
            pc.zeros(4, backend=other)
    assert len(g) == 3                              # two launches and one fill
    kept.copy_from(np.full(n, 7, np.float32))
    for _ in range(3):
        g.launch()
        assert np.array_equal(acc.numpy(), 3 * np.arange(n, dtype=np.float32))
    for _ in range(4):                              # queued back to back
        g.launch()
    assert np.array_equal(acc.numpy(), 3 * np.arange(n, dtype=np.float32))
    assert (kept.numpy() == 7).all()
    g.free()


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalars_are_baked_and_arrays_kept_alive(backend):
    n = 100
    x = pc.full(n, 1.0, backend=backend)
    y = pc.zeros(n, backend=backend)
    a = 3.0
    before = pc.get_runtime(backend).stats()["array_count"]
    with pc.capture(backend=backend) as g:
        tmp = pc.empty(n, backend=backend)             # made (and zeroed) once, at capture
        axpy[groups(n)](x, tmp, a, n)
        axpy[groups(n)](tmp, y, 1.0, n)
        tmp_view = tmp[10:20]
        axpy[1](tmp_view, y[:10], 1.0, 10)              # views at an offset
    a = 100.0                                           # noqa: F841  (the graph keeps 3.0)
    del tmp, tmp_view                                   # the graph keeps the array
    for _ in range(3):
        g.launch()
    pc.synchronize()
    want = np.zeros(n, np.float32)
    t = np.zeros(n, np.float32)
    for _ in range(3):
        t += 3.0
        want += t
        want[:10] += t[10:20]
    np.testing.assert_array_equal(y.numpy(), want)
    assert pc.get_runtime(backend).stats()["array_count"] == before + 1
    g.free()
    pc.synchronize()
    assert pc.get_runtime(backend).stats()["array_count"] == before


def _raises_at(fn, line_text: str, match: str):
    """Run `fn`, expect CaptureError whose message and innermost user frame name the line of
    this file holding `line_text`."""
    lines, start = inspect.getsourcelines(fn)
    line = start + next(i for i, ln in enumerate(lines) if line_text in ln)
    with pytest.raises(pc.CaptureError, match=match) as info:
        fn()
    assert f"{__file__}:{line}" in str(info.value), str(info.value)
    frames = [f for f in traceback.extract_tb(info.value.__traceback__)
              if not is_internal(f.filename)]          # pycoop's frames are dropped from it
    assert frames[-1].filename == __file__ and frames[-1].lineno == line, frames
    return info.value


@pytest.mark.parametrize("backend", BACKENDS)
def test_what_cannot_be_captured_raises_at_the_users_line(backend):
    n = 64
    x, y = pc.zeros(n, backend=backend), pc.zeros(n, backend=backend)
    host = np.zeros(n, np.float32)

    def numpy_argument():
        with pc.capture(backend=backend):
            axpy[1](host, y, 1.0, n)                    # numpy argument
    e = _raises_at(numpy_argument, "# numpy argument", "argument 'X' is a numpy.ndarray")
    assert "capture began at" in str(e) and "copy_from" in str(e)

    def read_written():
        with pc.capture(backend=backend):
            axpy[1](x, y, 1.0, n)
            y.numpy()                                   # read what the graph writes
    _raises_at(read_written, "# read what the graph writes", r"\.numpy\(\) of an array")

    def sync():
        with pc.capture(backend=backend):
            axpy[1](x, y, 1.0, n)
            pc.synchronize()                            # sync inside
    _raises_at(sync, "# sync inside", "waits for the device")

    def runtime_sync():
        with pc.capture(backend=backend):
            pc.get_runtime(backend).synchronize()       # runtime sync
    with pytest.raises(pc.CaptureError, match="waits for the device"):
        runtime_sync()

    def repeat():
        with pc.capture(backend=backend):
            axpy[1](x, y, 1.0, n, repeat=3)             # repeat inside
    _raises_at(repeat, "# repeat inside", "repeat=3")

    def nested():
        with pc.capture(backend=backend):
            with pc.capture(backend=backend):           # nested capture
                pass
    _raises_at(nested, "# nested capture", "do not nest")

    def host_copy():
        with pc.capture(backend=backend):
            x.copy_from(host)                           # host copy inside
    _raises_at(host_copy, "# host copy inside", r"copy_from\(host data\)")

    def own_replay():
        with pc.capture(backend=backend) as g:
            g.launch()                                  # replay inside its capture
    _raises_at(own_replay, "# replay inside its capture", "being captured")

    # reading an array the graph does not write is fine, as are launches after the error
    with pc.capture(backend=backend) as g:
        axpy[1](x, y, 1.0, n)
        assert x.numpy().sum() == 0
    g.launch()
    pc.synchronize()
    assert y.numpy()[0] == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_capture_or_a_freed_graph_cannot_be_replayed(backend):
    x, y = pc.zeros(64, backend=backend), pc.zeros(64, backend=backend)
    with pytest.raises(ZeroDivisionError):
        with pc.capture(backend=backend) as g:
            axpy[1](x, y, 1.0, 64)
            1 / 0
    with pytest.raises(pc.CaptureError, match="not completed"):
        g.launch()
    with pc.capture(backend=backend) as g2:
        axpy[1](x, y, 1.0, 64)
    g2.free()
    with pytest.raises(pc.CaptureError, match="freed"):
        g2.launch()
    with pc.capture(backend=backend) as g3:
        axpy[1](x, y, 1.0, 64)
    with pc.capture(backend=backend):
        with pytest.raises(pc.CaptureError, match="a launch-graph replay"):
            g3.launch()
    # a launch made inside a capture is not timed on its own
    with pc.capture(backend=backend):
        r = axpy[1](x, y, 1.0, 64)
    with pytest.raises(pc.CaptureError, match="replayed"):
        r.times_ms
    # ... and it displays as such: a repr that raised broke print([r]) and debuggers
    assert repr(r) == f"<launch on {backend}: captured into a launch graph, it runs in the graph's replays>"
    assert "captured into a launch graph" in r._repr_html_()
    assert pc.get_runtime(backend).stats()["graph_count"] >= 1
    del g, g3
    pc.synchronize()


@pytest.mark.vulkan
@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
def test_mixing_backends_is_refused():
    v = pc.zeros(64, backend="vulkan")
    e = pc.zeros(64, backend="emulator")

    def mixed():
        with pc.capture(backend="vulkan"):
            tanh_inplace[1](e, 64)                      # an emulator array
    _raises_at(mixed, "# an emulator array", "on emulator arrays")

    def other_backend():
        with pc.capture(backend="emulator"):
            tanh_inplace[1](e, 64, backend="vulkan")    # backend= other than the capture's
    _raises_at(other_backend, "# backend= other than", "backend='vulkan'")

    def copy_across():
        with pc.capture(backend="vulkan"):
            v.copy_from(e)                              # copy from the emulator
    _raises_at(copy_across, "# copy from the emulator", "copy_from on emulator arrays")


def test_a_capture_is_per_thread():
    """Another thread's launches run while this one captures."""
    x = pc.full(64, 1.0, backend="emulator")
    y = pc.zeros(64, backend="emulator")
    started, go = threading.Event(), threading.Event()

    def other():
        started.wait()
        axpy[1](x, y, 1.0, 64)                   # runs at once (the emulator is synchronous)
        go.set()
    t = threading.Thread(target=other)
    t.start()
    with pc.capture(backend="emulator") as g:
        started.set()
        go.wait(30)
        axpy[1](x, y, 10.0, 64)
    t.join()
    assert y.numpy()[0] == 1.0
    g.launch()
    assert y.numpy()[0] == 11.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_leak_after_a_thousand_replays(backend):
    n = 128
    x, h, y = fresh(n, backend, 2)
    rt = pc.get_runtime(backend)
    with pc.capture(backend=backend) as g:
        block(x, h, y, n)

    def thousand(graph):
        for i in range(1000):
            graph.launch()
            if i % 250 == 0:
                x.copy_from(np.full(n, 0.5, np.float32))
        pc.synchronize()
    thousand(g)                     # warm: the pool holds what queued batches need
    gc.collect()                    # earlier tests' garbage must not count here
    before = rt.stats()
    thousand(g)
    after = rt.stats()
    keys = ["array_count", "array_bytes", "graph_count", "pending_launches"]
    assert {k: after[k] for k in keys} == {k: before[k] for k in keys}
    if backend == "vulkan":         # buffers in use: the same; pooled ones: what batches need
        assert after["live_allocations"] - after["pooled_count"] == \
            before["live_allocations"] - before["pooled_count"]
        assert after["live_allocations"] <= before["live_allocations"] + 16, (before, after)
    assert after["graph_count"] == 1
    g.launch()
    del g                                          # freed while a replay is queued
    if backend == "vulkan":
        assert rt.stats()["graph_count"] == 1      # its command buffer waits for the replay
    pc.synchronize()
    assert rt.stats()["graph_count"] == 0
    assert np.isfinite(y.numpy()).all()


# ---------------------------------------------------------------------------- Vulkan only
@pytest.mark.vulkan
@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
def test_checked_launches_report_the_fault_of_each_replay():
    n = 128
    idx = pc.asarray(np.arange(n, dtype=np.int32), backend="vulkan")
    x = pc.asarray(np.arange(n, dtype=np.float32), backend="vulkan")
    y = pc.zeros(n, backend="vulkan")
    with pc.capture(backend="vulkan") as g:
        gather[groups(n)](idx, x, y, n, checked=True)
        axpy[groups(n)](x, y, 1.0, n, checked=True)
    g.launch()
    pc.synchronize()                                   # in bounds: no fault
    np.testing.assert_array_equal(y.numpy(), 2 * np.arange(n, dtype=np.float32))
    bad = np.arange(n, dtype=np.int32)
    bad[77] = n + 5
    idx.copy_from(bad)
    r = g.launch()
    with pytest.raises(pc.KernelFault) as info:
        pc.synchronize()
    lines, start = inspect.getsourcelines(gather.fn)
    line = start + next(i for i, ln in enumerate(lines) if "X[Idx[i]]" in ln)
    assert info.value.loc.line == line and info.value.index == n + 5
    assert "launch graph captured at" in str(info.value) and "replayed at" in str(info.value)
    with pytest.raises(pc.KernelFault):
        r.times_ms
    idx.copy_from(np.arange(n, dtype=np.int32))
    g.launch()
    pc.synchronize()                                   # the records were reset
    np.testing.assert_array_equal(y.numpy(), 2 * np.arange(n, dtype=np.float32))
    idx.copy_from(bad)                                 # several replays queued: each its own
    g.launch()
    idx.copy_from(np.arange(n, dtype=np.int32))
    g.launch()
    with pytest.raises(pc.KernelFault):
        pc.synchronize()
    pc.synchronize()


@pytest.mark.vulkan
@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
def test_descriptor_abi_kernels_and_disjoint_views_in_a_graph():
    n = 256
    ck = axpy.compile(abi="descriptors")
    x = pc.asarray(np.arange(n, dtype=np.float32), backend="vulkan")
    y = pc.zeros(2 * n, backend="vulkan")
    with pc.capture(backend="vulkan") as g:
        ck.launch(groups(n), [x, y[:n], 1.0, n])
        ck.launch(groups(n), [x, y[n:], 2.0, n])       # the other half: independent
        axpy[groups(n)](y[:n], y[n:], 1.0, n)          # reads the first half
    for _ in range(3):
        g.launch()
    pc.synchronize()
    a, b = np.zeros(n, np.float32), np.zeros(n, np.float32)
    xs = np.arange(n, dtype=np.float32)
    for _ in range(3):
        a += xs
        b += 2 * xs
        b += a
    np.testing.assert_array_equal(y.numpy(), np.concatenate([a, b]))


@pytest.mark.vulkan
@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
def test_replay_times_cover_the_graph_and_a_lost_device_drops_it(monkeypatch):
    n = 4096
    x, h, y = fresh(n, "vulkan", 3)
    with pc.capture(backend="vulkan") as g:
        block(x, h, y, n)
    r = g.launch()
    direct = [axpy[groups(n)](x, y, 0.0, n) for _ in range(2)]
    pc.synchronize()
    (start, end), = r.spans_ns
    assert r.time_ms > 0 and end - start >= r.time_ms * 1e6 * 0.99
    assert end <= direct[0].spans_ns[0][0]            # in queue order
    rt = pc.get_runtime("vulkan")
    rt.close()                                         # the device goes (as after a loss)
    with pytest.raises(pc.CaptureError, match="capture it again"):
        g.launch()
    del g
    assert rt.stats()["graph_count"] == 0


@pytest.mark.vulkan
@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
@pytest.mark.parametrize("held", [False, True])
def test_each_of_many_queued_checked_replays_reports_its_own_fault_as_the_ring_wraps(
        monkeypatch, held):
    """More replays queued than the ring has slots (16 here), some with an out-of-bounds
    index: exactly those replays fail, each with its own fault, inside one held batch (the
    ring's room is made by submitting and retiring) or submitted as the runtime likes."""
    from pycoop.runtime.vulkan import faults
    monkeypatch.setattr(faults, "RING_BYTES", 1)        # the fewest slots: 16
    n = 96
    good, bad = np.arange(n, dtype=np.int32), np.arange(n, dtype=np.int32)
    bad[40] = -3
    idx = pc.asarray(good, backend="vulkan")
    x = pc.asarray(np.arange(n, dtype=np.float32), backend="vulkan")
    y = pc.zeros(n, backend="vulkan")
    with pc.capture(backend="vulkan") as g:
        gather[groups(n)](idx, x, y, n, checked=True)
        axpy[groups(n)](x, y, 1.0, n, checked=True)
    faulty = {3, 17, 18, 40, 49}
    results = []
    rt = pc.get_runtime("vulkan")
    with (rt.batch() if held else contextlib.nullcontext()):
        for i in range(50):
            idx.copy_from(bad if i in faulty else good)
            results.append(g.launch())
    with pytest.raises(pc.KernelFault) as first:
        pc.synchronize()
    assert first.value.index == -3
    for i, r in enumerate(results):
        if i in faulty:
            with pytest.raises(pc.KernelFault) as info:
                r.times_ms
            assert info.value.index == -3 and info.value.invocation == 40 % WG
        else:
            assert len(r.times_ms) == 1
    idx.copy_from(good)
    g.launch()
    pc.synchronize()                                   # the records and slots were reset


@pytest.mark.vulkan
@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
def test_a_fault_in_the_second_slab_of_records_names_its_launch():
    """A graph of more checked launches than one slab of fault records holds (256): the
    fault of a launch in the second slab is reported with that launch's grid."""
    from pycoop.runtime.vulkan import faults
    n = 64
    idx = pc.asarray(np.arange(n, dtype=np.int32), backend="vulkan")
    wrong = pc.asarray(np.full(n, n + 7, dtype=np.int32), backend="vulkan")
    x = pc.asarray(np.ones(n, dtype=np.float32), backend="vulkan")
    y = pc.zeros(n, backend="vulkan")
    with pc.capture(backend="vulkan") as g:
        for _ in range(faults.SLAB_RECORDS + 3):
            gather[1](idx, x, y, n, checked=True)
        gather[(1, 2, 1)](wrong, x, y, n, checked=True)   # the 260th record
    for _ in range(2):
        g.launch()
    with pytest.raises(pc.KernelFault) as info:
        pc.synchronize()
    assert info.value.index == n + 7 and "grid (1, 2, 1)" in str(info.value)
    np.testing.assert_array_equal(y.numpy(), 0)         # the last launch's loads suppressed


@given(count=st.integers(1, 150), slots=st.sampled_from([16, 32, 64]),
       seq=st.one_of(st.integers(0, 100), st.integers(2**32 - 70, 2**32 - 1)),
       data=st.data())
@settings(max_examples=25)
def test_the_fault_harvest_moves_faulted_records_into_the_replays_slot(count, slots, seq, data):
    """The graphs' fault harvest (run on the emulator) against NumPy: the records holding a
    fault (word 0 set) go to slot seq mod slots of the ring and are zeroed, the counter after
    the records advances (wrapping at 2^32), nothing else changes."""
    from pycoop.runtime.vulkan.harvest import RECORD_WORDS, WG, harvest_faults
    harvest = pc.kernel(harvest_faults, workgroup_size=WG)
    faulted = data.draw(st.sets(st.integers(0, count - 1), max_size=5))
    rng = np.random.default_rng(count * 7 + seq % 1000)
    records = np.zeros((count, RECORD_WORDS), np.uint32)
    for r in faulted:
        records[r] = rng.integers(1, 2**32, RECORD_WORDS, dtype=np.uint32)
    buf = np.append(records.reshape(-1), np.uint32(seq))
    ring = rng.integers(0, 2**32, (slots, count, RECORD_WORDS), dtype=np.uint32)
    want = ring.copy()
    want[seq % slots][sorted(faulted)] = records[sorted(faulted)]
    harvest[1](buf, ring.reshape(-1), count, slots, backend="emulator")
    np.testing.assert_array_equal(ring, want)
    assert not buf[:-1].any() and buf[-1] == (seq + 1) % 2**32


def test_ring_slots_are_powers_of_two_within_bounds():
    from pycoop.runtime.vulkan import faults
    for records in (1, 2, 3, 5, 64, 255, 256):
        slots = faults.ring_slots(records)
        assert slots & (slots - 1) == 0
        assert faults.RING_SLOTS[0] <= slots <= faults.RING_SLOTS[1]
        assert slots == faults.RING_SLOTS[0] or slots * records * faults.FAULT_BYTES <= faults.RING_BYTES
