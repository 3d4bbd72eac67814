"""Launch graphs on a real GPU (run with -m gpu, -s for the tables): replays equal the direct
launches (dependencies inside, ordinary launches and copy_from between replays, 1,000 replays
queued), checked launches report each replay's fault, descriptor-ABI kernels, no leak, replay
timing against direct launches, and a replay between torch ops on shared CUDA tensors."""
from __future__ import annotations

import gc
import inspect
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import pycoop as pc
from pycoop import f32, i32, u32

sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))
# the fault harvest's tests run unchanged on the GPU (collected here under the gpu mark)
from test_graphs import (  # noqa: E402,F401
    test_a_fault_in_the_second_slab_of_records_names_its_launch,
    test_each_of_many_queued_checked_replays_reports_its_own_fault_as_the_ring_wraps)

pytestmark = pytest.mark.gpu
WG = 256


@pc.kernel(workgroup_size=WG)
def axpby(X: pc.ReadBuffer[f32], Y: pc.ReadBuffer[f32], Out: pc.WriteBuffer[f32], b: f32,
          n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Out[i] = X[i] + b * Y[i]


@pc.kernel(workgroup_size=WG)
def neighbours(X: pc.Buffer[f32], Out: pc.WriteBuffer[f32], n: u32):
    """Out[i] = X[i] + X[i+1] (the last: 2 X[i]); reads across workgroups."""
    i = pc.global_invocation_id.x
    if i < n:
        j = pc.select(i + 1 < n, i + 1, i)
        Out[i] = X[i] + X[j]


@pc.kernel(workgroup_size=WG)
def gather(Idx: pc.ReadBuffer[i32], X: pc.ReadBuffer[f32], Y: pc.WriteBuffer[f32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = X[Idx[i]]


def groups(n):
    return (n + WG - 1) // WG


def block(x, y, t, n, checked=None):
    """Five dependent launches: RAW between each, WAR on y (read first, written last)."""
    g = groups(n)
    kw = {} if checked is None else {"checked": checked}
    axpby[g](x, y, t[0], 0.5, n, **kw)
    neighbours[g](t[0], t[1], n, **kw)
    axpby[g](t[1], t[0], t[2], 0.5, n, **kw)
    neighbours[g](t[2], t[3], n, **kw)
    axpby[g](x, t[3], y, 0.1, n, **kw)


def arrays(n, seed=0):
    x = pc.asarray(np.random.default_rng(seed).standard_normal(n).astype(np.float32),
                   backend="vulkan")
    return x, pc.zeros(n, backend="vulkan"), [pc.zeros(n, backend="vulkan") for _ in range(4)]


def device_line() -> str:
    caps = pc.get_runtime("vulkan").capabilities
    return f"{caps.device_name}, driver {caps.driver_version}"


@pytest.mark.parametrize("n", [4096, 1 << 20])
def test_replays_equal_direct_launches(n):
    x, y, t = arrays(n)
    rx, ry, rt = arrays(n)
    with pc.capture(backend="vulkan") as g:
        block(x, y, t, n)
    inputs = np.random.default_rng(1).standard_normal((3, n)).astype(np.float32)
    for step in range(300):
        if step % 100 == 0:
            x.copy_from(inputs[step // 100])
            rx.copy_from(inputs[step // 100])
        g.launch()
        block(rx, ry, rt, n)
        if step % 7 == 0:                 # ordinary launches between replays
            neighbours[groups(n)](y, x, n)
            neighbours[groups(n)](ry, rx, n)
    pc.synchronize()
    for name, got, want in (("x", x, rx), ("y", y, ry), ("t3", t[3], rt[3])):
        a, b = got.numpy(), want.numpy()
        bad = np.flatnonzero(a != b)
        assert not bad.size, (f"{device_line()}: {name} differs from the direct launches at "
                              f"{bad.size} of {n} elements, first {bad[:5]}: "
                              f"{a[bad[:5]]} vs {b[bad[:5]]}")


def test_a_thousand_queued_replays_then_one_synchronize_without_leaking():
    n = 1 << 16
    x, y, t = arrays(n, 2)
    rx, ry, rt = arrays(n, 2)
    rt_ = pc.get_runtime("vulkan")
    with pc.capture(backend="vulkan") as g:
        block(x, y, t, n)
    for _ in range(1000):
        g.launch()
    pc.synchronize()
    gc.collect()            # earlier tests' garbage must not be freed inside the window
    before = rt_.stats()
    results = [g.launch() for _ in range(1000)]
    for _ in range(2000):
        block(rx, ry, rt, n)
    pc.synchronize()
    after = rt_.stats()
    np.testing.assert_array_equal(y.numpy(), ry.numpy())
    spans = [r.spans_ns[0] for r in results]
    overlaps = sum(spans[i][1] > spans[i + 1][0] for i in range(len(spans) - 1))
    gaps = [(spans[i + 1][0] - spans[i][1]) / 1e3 for i in range(len(spans) - 1)]
    print(f"\n{device_line()}: 1000 queued replays, replay device time median "
          f"{statistics.median(r.times_ms[0] for r in results) * 1e3:.1f} us, idle between "
          f"replays median {statistics.median(gaps):.2f} us, max {max(gaps):.1f} us")
    assert not overlaps, f"{overlaps} dependent replays overlapped on the device"
    in_use = lambda s: s["live_allocations"] - s["pooled_count"]      # noqa: E731
    assert in_use(after) == in_use(before), (before, after)
    assert after["graph_count"] == before["graph_count"] == 1
    g.launch()
    del g
    pc.synchronize()
    assert rt_.stats()["graph_count"] == 0


def test_checked_replays_report_their_own_faults():
    n = 1 << 14
    idx = pc.asarray(np.arange(n, dtype=np.int32), backend="vulkan")
    src = pc.asarray(np.arange(n, dtype=np.float32), backend="vulkan")
    out = pc.zeros(n, backend="vulkan")
    with pc.capture(backend="vulkan") as g:
        gather[groups(n)](idx, src, out, n, checked=True)
    bad = np.arange(n, dtype=np.int32)
    bad[1234] = -7
    g.launch()
    idx.copy_from(bad)
    g.launch()                             # this replay faults
    idx.copy_from(np.arange(n, dtype=np.int32))
    g.launch()
    with pytest.raises(pc.KernelFault) as info:
        pc.synchronize()
    lines, start = inspect.getsourcelines(gather.fn)
    line = start + next(i for i, ln in enumerate(lines) if "X[Idx[i]]" in ln)
    assert info.value.loc.line == line and info.value.index == -7, str(info.value)
    g.launch()
    pc.synchronize()                       # the records were reset: no fault
    np.testing.assert_array_equal(out.numpy(), np.arange(n, dtype=np.float32))


def test_descriptor_abi_kernels_in_a_graph():
    n = 1 << 12
    ck = axpby.compile(abi="descriptors")
    x = pc.asarray(np.arange(n, dtype=np.float32), backend="vulkan")
    y = pc.zeros(2 * n, backend="vulkan")
    with pc.capture(backend="vulkan") as g:
        ck.launch(groups(n), [x, y[:n], y[:n], 1.0, n])
        ck.launch(groups(n), [y[:n], y[n:], y[n:], 1.0, n])
    for _ in range(4):
        g.launch()
    pc.synchronize()
    xs = np.arange(n, dtype=np.float32)
    a, b = np.zeros(n, np.float32), np.zeros(n, np.float32)
    for _ in range(4):
        a = xs + a
        b = a + b
    np.testing.assert_array_equal(y.numpy(), np.concatenate([a, b]))


def test_replay_is_faster_on_the_host_than_direct_launches():
    """The bench's measurement, short: wall per call of the 5-launch block, direct vs graph
    (unchecked), calls queued and synchronised each; printed as a table."""
    n, calls = 4096, 500
    x, y, t = arrays(n, 4)
    with pc.capture(backend="vulkan") as g:
        block(x, y, t, n, checked=False)
    rows = {}
    for name, call in (("direct", lambda: block(x, y, t, n, checked=False)), ("graph", g.launch)):
        for _ in range(50):
            call()
        pc.synchronize()
        s = time.perf_counter()
        for _ in range(calls):
            call()
        pc.synchronize()
        queued = (time.perf_counter() - s) / calls * 1e6
        walls = []
        for _ in range(calls // 5):
            s = time.perf_counter()
            call()
            pc.synchronize()
            walls.append(time.perf_counter() - s)
        rows[name] = (queued, statistics.median(walls) * 1e6)
    r = g.launch()
    pc.synchronize()
    print(f"\n{device_line()}: 5-launch block on {n} f32, {calls} calls; graph replay device "
          f"time {r.time_ms * 1e3:.1f} us")
    print("| path | queued us/call | synced us/call |")
    for name, (q, s) in rows.items():
        print(f"| {name} | {q:.1f} | {s:.1f} |")
    assert rows["graph"][0] < rows["direct"][0], rows


def test_a_replay_between_torch_ops():
    torch = pytest.importorskip("torch")
    pytest.importorskip("cuda.bindings.runtime")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    n = 1 << 16
    x, y, t = arrays(n, 5)
    with pc.capture(backend="vulkan") as g:
        block(x, y, t, n)
    tx, ty = x.torch(), y.torch()
    rx, ry, rt = arrays(n, 5)
    for step in range(5):
        tx.mul_(0.5)                      # torch writes the graph's input ...
        g.launch()                        # ... the replay reads it, writes y ...
        ty.add_(1.0)                      # ... and torch updates the output
        rx.copy_from(rx.numpy() * np.float32(0.5))
        block(rx, ry, rt, n)
        ry.copy_from(ry.numpy() + np.float32(1.0))
    np.testing.assert_array_equal(ty.cpu().numpy(), ry.numpy())
