"""Launch graphs against direct launches: a chain of 5 small dependent kernels
(Out = X + b*Y on 4096 f32, each reading the previous ones' outputs) called 1,000 times.

Rows, each measured in this run:
- pycoop direct: the 5 launches per call, queued (one synchronisation at the end), and
  synchronised after every call
- pycoop graph: the same 5 launches captured once, `g.launch()` per call, the same two ways
  (unchecked, the production mode, and checked, the default)
- torch eager and torch CUDA graph (`torch.cuda.CUDAGraph`) doing the same 5 ops
  (`torch.add(X, Y, alpha=b, out=Out)`) on CUDA tensors, if torch and CUDA are there

Columns: the host time of one call (median over the queued calls: what Python spends to
queue the block, waits for a full queue excluded), wall time per call with calls queued (mean over 1,000 calls, the final
synchronisation included), wall time per call when every call is synchronised (median), the
device time of one block (pycoop: first dispatch start to last end, from timestamps, median;
torch: CUDA events around one block, median), and the device throughput (device time from the
first call's start to the last call's end, per call; for torch from CUDA events around all
calls). Results are checked: the graph's output equals the direct launches' bit for bit, and
torch's within 1e-5.

    python3 bench/graph_replay.py [--calls 1000] [--n 4096]
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import time

import numpy as np

import pycoop as pc
from pycoop import f32, u32
from warmup import vulkan_or_skip

WG = 256
COEFFS = (0.5, 0.5, 0.5, 0.5, 0.1)      # y <- x + 0.1*t4(y): a contraction, values stay finite


@pc.kernel(workgroup_size=WG)
def axpby(X: pc.ReadBuffer[f32], Y: pc.ReadBuffer[f32], Out: pc.WriteBuffer[f32], b: f32,
          n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Out[i] = X[i] + b * Y[i]


def chain(launch, x, y, t):
    """The 5 dependent launches: t1 = x + .5y, t2 = t1 + .5x, t3 = t2 + .5t1, t4 = t3 + .5t2,
    y = x + .1t4 (`launch(X, Y, Out, b)`)."""
    b = COEFFS
    return [launch(x, y, t[0], b[0]), launch(t[0], x, t[1], b[1]), launch(t[1], t[0], t[2], b[2]),
            launch(t[2], t[1], t[3], b[3]), launch(x, t[3], y, b[4])]


def torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def row(name: str, call_us, queued_us, sync_us, block_us, busy_us, note: str = "") -> None:
    cells = [f"{v:10.1f}" if v is not None else "         -"
             for v in (call_us, queued_us, sync_us, block_us, busy_us)]
    print(f"| {name:<32} | " + " | ".join(cells) + f" | {note}")


def pycoop_rows(n: int, calls: int, checked: bool) -> dict:
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal(n).astype(np.float32)
    grid = (n + WG - 1) // WG
    k = axpby[grid]

    def launch(X, Y, Out, b):
        return k(X, Y, Out, b, n, checked=checked)

    def arrays():
        return (pc.asarray(x0, backend="vulkan"), pc.zeros(n, backend="vulkan"),
                [pc.zeros(n, backend="vulkan") for _ in range(4)])

    out = {}
    # direct launches
    x, y, t = arrays()
    for _ in range(20):
        chain(launch, x, y, t)
    pc.synchronize()
    samples, host = [], []
    clock = time.perf_counter
    s = clock()
    for i in range(calls):
        c = clock()
        rs = chain(launch, x, y, t)
        host.append(clock() - c)
        if i == 0:
            first = rs[0]
        if i % 16 == 0:
            samples.append(rs)
    last = rs[-1]
    pc.synchronize()
    queued = (time.perf_counter() - s) / calls * 1e6
    block = statistics.median((rs[-1].spans_ns[0][1] - rs[0].spans_ns[0][0]) / 1e3
                              for rs in samples)
    busy = (last.spans_ns[0][1] - first.spans_ns[0][0]) / 1e3 / calls
    walls = []
    for _ in range(calls // 4):
        s = time.perf_counter()
        chain(launch, x, y, t)
        pc.synchronize()
        walls.append(time.perf_counter() - s)
    out["direct"] = (statistics.median(host) * 1e6, queued, statistics.median(walls) * 1e6,
                     block, busy)
    want = y.numpy()
    # the graph
    x, y, t = arrays()
    with pc.capture(backend="vulkan") as g:
        chain(launch, x, y, t)
    for _ in range(20):
        g.launch()
    pc.synchronize()
    results, host = [], []
    s = clock()
    for i in range(calls):
        c = clock()
        r = g.launch()
        host.append(clock() - c)
        if i == 0:
            first = r
        if i % 16 == 0:
            results.append(r)
    pc.synchronize()
    queued = (time.perf_counter() - s) / calls * 1e6
    block = statistics.median(r.times_ms[0] * 1e3 for r in results)
    busy = (r.spans_ns[0][1] - first.spans_ns[0][0]) / 1e3 / calls
    walls = []
    for _ in range(calls // 4):
        s = time.perf_counter()
        g.launch()
        pc.synchronize()
        walls.append(time.perf_counter() - s)
    out["graph"] = (statistics.median(host) * 1e6, queued, statistics.median(walls) * 1e6,
                    block, busy)
    got = y.numpy()
    assert np.array_equal(got, want), "the graph's result differs from the direct launches'"
    assert np.isfinite(got).all()
    out["y"] = got
    g.free()
    return out


def torch_rows(torch, n: int, calls: int):
    x = torch.tensor(np.random.default_rng(0).standard_normal(n).astype(np.float32),
                     device="cuda")
    y = torch.zeros(n, device="cuda")
    t = [torch.zeros(n, device="cuda") for _ in range(4)]

    def block():
        chain(lambda X, Y, Out, b: torch.add(X, Y, alpha=b, out=Out), x, y, t)

    def timed(fn):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        host = []
        s = time.perf_counter()
        e0.record()
        for _ in range(calls):
            c = time.perf_counter()
            fn()
            host.append(time.perf_counter() - c)
        e1.record()
        torch.cuda.synchronize()
        queued = (time.perf_counter() - s) / calls * 1e6
        busy = e0.elapsed_time(e1) * 1e3 / calls
        walls, blocks = [], []
        for _ in range(calls // 4):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s = time.perf_counter()
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            walls.append(time.perf_counter() - s)
            blocks.append(a.elapsed_time(b) * 1e3)
        return (statistics.median(host) * 1e6, queued, statistics.median(walls) * 1e6,
                statistics.median(blocks), busy)

    out = {"eager": timed(block)}
    y.zero_()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            block()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        block()
    out["cuda graph"] = timed(graph.replay)
    out["y"] = y.cpu().numpy()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1000, help="calls of the 5-launch block")
    ap.add_argument("--n", type=int, default=4096, help="elements per array")
    args = ap.parse_args()
    rt = vulkan_or_skip()
    if rt is None:
        return
    torch = torch_cuda()
    caps = rt.capabilities
    print(f"{datetime.date.today()}; device: {caps.device_name}, driver {caps.driver_version}; "
          f"torch: {torch.__version__ if torch else 'none (torch rows skipped)'}; "
          f"{args.calls} calls of 5 launches on {args.n} f32")
    print("| row | host us/call | queued us/call | synced us/call | device us/block | "
          "device us/call (throughput) | notes")
    print("|---|---|---|---|---|---|---|")
    old = os.environ.get("PYCOOP_CHECKED")
    results = {}
    for checked in (False, True):
        r = pycoop_rows(args.n, args.calls, checked)
        mode = "checked" if checked else "unchecked"
        results[mode] = r
        row(f"pycoop direct, {mode}", *r["direct"], "5 launches per call")
        d, g = r["direct"], r["graph"]
        row(f"pycoop graph, {mode}", *g,
            f"g.launch() per call; speed-up over direct: {d[0] / g[0]:.1f}x host, "
            f"{d[1] / g[1]:.2f}x queued, {d[2] / g[2]:.2f}x synced; result equal to direct")
    if old is not None:
        os.environ["PYCOOP_CHECKED"] = old
    if torch is not None:
        tr = torch_rows(torch, args.n, args.calls)
        err = float(np.abs(tr["y"] - results["unchecked"]["y"]).max())
        row("torch eager", *tr["eager"], f"5 x torch.add(out=); max abs diff vs pycoop {err:.1e}")
        row("torch CUDA graph", *tr["cuda graph"], "torch.cuda.CUDAGraph.replay()")
        assert err < 1e-5, err
    print("stats:", {k: v for k, v in rt.stats().items() if k != "heap_usage"})


if __name__ == "__main__":
    main()
