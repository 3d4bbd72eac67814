"""What a launch costs from Python: pycoop's wall time per launch, its device time, and torch
doing the same work in the same run.

Rows:
- axpy on 1M f32 device arrays, asynchronous (launches queued, one synchronisation at the
  end) and synchronous (each launch followed by pycoop.synchronize()); torch: `y.add_(x,
  alpha=a)` on CUDA tensors, the same way
- a chain of 100 dependent axpy dispatches in one batch: device idle between consecutive
  dispatches, from their timestamps
- gemm_nv 4096^3 (f16 in, f32 out) on device arrays, 20 launches queued: wall time against
  the sum of device times; torch: the f16 matmul
- where a synchronous launch's time goes: recording, submitting, the GPU round trip, retiring
- the same GEMM on NumPy arrays (uploaded and read back each launch): wall time and the
  effective host<->device bandwidth of the copies (median of 15 launches, with the fastest
  and slowest); and the pieces: host copies in and out of staging, an upload, a readback
- torch interop: torch op, pycoop kernel, torch op on the same CUDA tensor; the wall time the
  kernel adds beyond its device time, with timeline semaphores (PYCOOP_TORCH_SYNC=auto) and
  with host waits (coarse); how long the pycoop call takes on the host and how long torch's
  stream waits for it; and proof that no host copy happened
- the cost of switching between the two APIs with nothing shared: synchronous pycoop and
  torch launches, each alone and right after the other

    python3 bench/launch_overhead.py [--quick]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import pycoop as pc
from pycoop import f32, u32
from pycoop.kernels import gemm_nv
from warmup import warm_gpu

# before pycoop: the benchmark times the unchecked kernels (bench/unchecked.py)
import unchecked  # noqa: E402,F401


@pc.kernel(workgroup_size=256)
def axpy(X: pc.ReadBuffer[f32], Y: pc.Buffer[f32], a: f32, n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = a * X[i] + Y[i]


def torch_cuda():
    try:
        import torch
        return torch if torch.cuda.is_available() else None
    except ImportError:
        return None


def row(name: str, wall_us: float, device_us: float, torch_us: float | None, note: str = "") -> None:
    t = f"{torch_us:9.1f}" if torch_us is not None else "        -"
    print(f"| {name:<38} | {wall_us:10.1f} | {device_us:10.1f} | {t} | {note}")


def _spread(ts: list[float]) -> str:
    """Median, 99th percentile and the share of the total spent in calls over twice the
    median (submissions, retirements, waits for the GPU)."""
    ts = sorted(ts)
    med = statistics.median(ts)
    slow = sum(t for t in ts if t > 2 * med) / sum(ts)
    return (f"median {med * 1e6:.1f}, p99 {ts[int(len(ts) * 0.99)] * 1e6:.1f} us; "
            f"{slow * 100:.0f}% of the time in calls > 2x median")


def bench_axpy(n_launch: int, torch) -> None:
    """Mean wall time per launch over n_launch launches (batch submissions included)."""
    n = 1 << 20
    x = pc.full(n, 1.0, backend="vulkan")
    y = pc.zeros(n, backend="vulkan")
    grid = n // 256
    launch = axpy[grid]
    for _ in range(200):
        launch(x, y, 0.5, n)
    pc.synchronize()
    results, calls = [], []
    clock = time.perf_counter
    t0 = clock()
    for i in range(n_launch):
        s = clock()
        r = launch(x, y, 0.5, n)
        calls.append(clock() - s)
        if i % 16 == 0:                  # a sample for device times (a loop keeps none)
            results.append(r)
    t1 = clock()
    pc.synchronize()
    t2 = clock()
    device = statistics.median(r.times_ms[0] for r in results) * 1e3
    tt = None
    if torch is not None:
        tx, ty = torch.ones(n, device="cuda"), torch.zeros(n, device="cuda")
        for _ in range(200):
            ty.add_(tx, alpha=0.5)
        torch.cuda.synchronize()
        s = time.perf_counter()
        for _ in range(n_launch):
            ty.add_(tx, alpha=0.5)
        torch.cuda.synchronize()
        tt = (time.perf_counter() - s) / n_launch * 1e6
    row("axpy 1M f32, async (enqueue only)", (t1 - t0) / n_launch * 1e6, device, tt,
        f"mean; incl. final sync: {(t2 - t0) / n_launch * 1e6:.1f} us/launch; "
        f"{_spread(calls)}; goal <= 20")
    walls = []
    for _ in range(n_launch // 4):
        s = time.perf_counter()
        launch(x, y, 0.5, n)
        pc.synchronize()
        walls.append(time.perf_counter() - s)
    tt = None
    if torch is not None:
        tw = []
        for _ in range(n_launch // 4):
            s = time.perf_counter()
            ty.add_(tx, alpha=0.5)
            torch.cuda.synchronize()
            tw.append(time.perf_counter() - s)
        tt = statistics.median(tw) * 1e6
    row("axpy 1M f32, sync (launch + synchronize)", statistics.median(walls) * 1e6, device, tt,
        "median; goal <= 60")
    sync_breakdown(launch, (x, y, 0.5, n), n_launch // 4)


def sync_breakdown(launch, args, count: int) -> None:
    """Where a synchronous launch's time goes: recording it (Python and vkCmd*), submitting
    (vkEndCommandBuffer, vkQueueSubmit), the GPU round trip until its fence reads signalled
    (polled), and retiring it (timestamps, buffers)."""
    from pycoop.runtime.vulkan.ext import lib
    rt = pc.get_runtime("vulkan")
    parts = {"record": [], "submit": [], "until signalled": [], "retire": []}
    clock = time.perf_counter
    for _ in range(count):
        a = clock()
        launch(*args)
        b = clock()
        rt.flush()
        c = clock()
        ctx = rt.context
        sub, dev = ctx.in_flight[-1], ctx.device.handle
        while lib.vkGetFenceStatus(dev, sub.fences[0]) == 1:
            pass
        d = clock()
        rt.synchronize()
        e = clock()
        for key, (lo, hi) in zip(parts, ((a, b), (b, c), (c, d), (d, e))):
            parts[key].append(hi - lo)
    text = ", ".join(f"{k} {statistics.median(v) * 1e6:.1f}" for k, v in parts.items())
    total = sum(statistics.median(v) for v in parts.values()) * 1e6
    row("  sync launch, where the time goes", total, 0.0, None, f"medians, us: {text}")


def bench_chain() -> None:
    n = 1 << 20
    x = pc.full(n, 1.0, backend="vulkan")
    y = pc.zeros(n, backend="vulkan")
    grid = n // 256
    pc.synchronize()
    idles = []
    rt = pc.get_runtime("vulkan")
    for _ in range(5):
        with rt.batch():                                 # one command buffer, one submission
            rs = [axpy[grid](x, y, 0.5, n) for _ in range(100)]   # each reads the previous y
        pc.synchronize()
        spans = [r.spans_ns[0] for r in rs]
        idles += [(b[0] - a[1]) / 1e3 for a, b in zip(spans, spans[1:])]
        device = statistics.median(r.times_ms[0] for r in rs) * 1e3
    row("chain of 100 dependent dispatches", 0.0, device, None,
        f"device idle between dispatches: median {statistics.median(idles):.2f} us, "
        f"max {max(idles):.2f} us; goal <= 5")


def gemm_operands(size: int):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((size, size), dtype=np.float32).astype(np.float16)
    B = rng.standard_normal((size, size), dtype=np.float32).astype(np.float16)
    return A, B


def bench_gemm(size: int, launches: int, torch) -> None:
    kernel = gemm_nv(128, 256, 64, 256, "undefined", 2, True)
    grid = (size // 128, size // 256)
    A, B = gemm_operands(size)
    dA, dB = pc.asarray(A, backend="vulkan"), pc.asarray(B, backend="vulkan")
    dC = pc.zeros((size, size), np.float32, backend="vulkan")
    for _ in range(30):
        kernel[grid](dA, dB, dC, size, size, size)
    pc.synchronize()
    t0 = time.perf_counter()
    rs = [kernel[grid](dA, dB, dC, size, size, size) for _ in range(launches)]
    pc.synchronize()
    wall = (time.perf_counter() - t0) / launches * 1e6
    device = sum(r.times_ms[0] for r in rs) / launches * 1e3
    tt = None
    if torch is not None:
        ta, tb = torch.from_numpy(A).cuda(), torch.from_numpy(B).cuda()
        for _ in range(30):
            ta @ tb
        torch.cuda.synchronize()
        s = time.perf_counter()
        for _ in range(launches):
            ta @ tb
        torch.cuda.synchronize()
        tt = (time.perf_counter() - s) / launches * 1e6
    row(f"gemm_nv {size}^3, device arrays x{launches}", wall, device, tt,
        f"wall/device = {wall / device:.3f}; goal <= 1.2")
    C = np.zeros((size, size), np.float32)
    kernel[grid](A, B, C, size, size, size)
    expect = dC.numpy()
    walls, devs = [], []
    for _ in range(15):
        s = time.perf_counter()
        r = kernel[grid](A, B, C, size, size, size)
        walls.append(time.perf_counter() - s)
        devs.append(r.times_ms[0])
    wall = statistics.median(walls) * 1e6
    device = statistics.median(devs) * 1e3
    moved = A.nbytes + B.nbytes + 2 * C.nbytes     # up A, B, C; C back
    gbs = moved / ((wall - device) * 1e-6) / 1e9
    row(f"gemm_nv {size}^3, NumPy arrays", wall, device, None,
        f"median of 15 (min {min(walls) * 1e3:.1f}, max {max(walls) * 1e3:.1f} ms); "
        f"{moved / 1e6:.0f} MB copied at {gbs:.1f} GB/s effective; goals >= 10 GB/s, "
        f"<= 15000 us; same result as device arrays: {np.array_equal(C, expect)}")
    host_path_parts(C)


def host_path_parts(C: np.ndarray) -> None:
    """The NumPy path's pieces for one array, medians of 5: the host copy into pooled staging
    and out of it (hostcopy, threads), and an upload (`copy_from` + synchronize: host copy and
    DMA) and a readback (`numpy()`: DMA and host copy) of a device array."""
    from pycoop.runtime.vulkan import hostcopy
    rt = pc.get_runtime("vulkan")
    mem = rt.context.memory
    staging = mem.acquire("host", C.nbytes)
    out = np.empty_like(C)
    d = pc.empty(C.shape, C.dtype, backend="vulkan")

    def med(f):
        ts = []
        for _ in range(5):
            s = time.perf_counter()
            f()
            ts.append(time.perf_counter() - s)
        return statistics.median(ts) * 1e6

    t_in = med(lambda: hostcopy.to_mapped(staging.mapped, C))
    t_out = med(lambda: hostcopy.from_mapped(out, staging.mapped))
    t_up = med(lambda: (d.copy_from(C), pc.synchronize()))
    t_down = med(lambda: d.numpy())
    mem.release(staging)
    mb = C.nbytes / 1e6
    row(f"NumPy path pieces, {mb:.0f} MB", t_up + t_down, 0.0, None,
        f"host copy in {t_in:.0f} us ({C.nbytes / t_in / 1e3:.1f} GB/s), out {t_out:.0f} us "
        f"({C.nbytes / t_out / 1e3:.1f} GB/s); upload {t_up:.0f} us ({C.nbytes / t_up / 1e3:.1f} "
        f"GB/s), readback {t_down:.0f} us ({C.nbytes / t_down / 1e3:.1f} GB/s)")


def switch_row(torch, launches: int) -> None:
    """What alternating between the two APIs costs with nothing shared: a synchronous pycoop
    launch (arrays torch never saw) alone and right after a synchronised torch op, and a
    synchronised torch op alone and right after a synchronous pycoop launch. The difference is
    the GPU's switch from one context to the other, which no interop code is involved in."""
    n = 1 << 20
    y, x = pc.zeros(n, backend="vulkan"), pc.full(n, 1.0, backend="vulkan")
    t = torch.zeros(n, device="cuda")
    clock = time.perf_counter

    def pycoop_sync():
        s = clock()
        axpy[n // 256](x, y, 0.5, n)
        pc.synchronize()
        return clock() - s

    def torch_sync():
        s = clock()
        t.add_(1.0)
        torch.cuda.synchronize()
        return clock() - s

    for _ in range(50):
        pycoop_sync(), torch_sync()
    alone_p = statistics.median(pycoop_sync() for _ in range(launches))
    alone_t = statistics.median(torch_sync() for _ in range(launches))
    after_t, after_p = [], []
    for _ in range(launches):
        after_p.append(torch_sync())        # torch right after pycoop ...
        after_t.append(pycoop_sync())       # ... and pycoop right after torch
    after_t, after_p = statistics.median(after_t), statistics.median(after_p)
    row("API switch, nothing shared (sync)", after_t * 1e6, alone_p * 1e6, alone_t * 1e6,
        f"pycoop sync launch alone {alone_p * 1e6:.1f} us, right after a torch op "
        f"{after_t * 1e6:.1f} us; torch op + synchronize alone {alone_t * 1e6:.1f} us, right "
        f"after a pycoop launch {after_p * 1e6:.1f} us: the switches cost "
        f"{(after_t - alone_p + after_p - alone_t) * 1e6:.1f} us a round")


def bench_interop(torch, launches: int) -> None:
    switch_row(torch, launches)
    for mode in ("auto", "coarse", "auto"):
        os.environ["PYCOOP_TORCH_SYNC"] = mode
        try:
            interop_row(torch, launches, mode)
        except Exception as e:          # a row that fails says so; the others still run
            print(f"| torch op, pycoop kernel, torch op ({mode}) | failed: {type(e).__name__}: {e}")
    os.environ.pop("PYCOOP_TORCH_SYNC")


def interop_row(torch, launches: int, mode: str) -> None:
    n = 1 << 20
    y = pc.zeros(n, backend="vulkan")
    x = pc.full(n, 1.0, backend="vulkan")
    ty = y.torch()
    grid = n // 256
    for _ in range(50):
        ty.mul_(1.0)
        axpy[grid](x, y, 0.5, n)
        ty.add_(1.0)
    torch.cuda.synchronize()
    walls, devs, base, host, gaps = [], [], [], [], []
    for _ in range(launches):
        s = time.perf_counter()
        ty.mul_(1.0)
        ty.add_(1.0)
        torch.cuda.synchronize()
        base.append(time.perf_counter() - s)
        before, after = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s = time.perf_counter()
        ty.mul_(1.0)
        before.record()
        h = time.perf_counter()
        r = axpy[grid](x, y, 0.5, n)
        host.append(time.perf_counter() - h)
        after.record()
        ty.add_(1.0)
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - s)
        devs.append(r.times_ms[0])
        gaps.append(before.elapsed_time(after) * 1e3)
    added = (statistics.median(walls) - statistics.median(base)) * 1e6
    device = statistics.median(devs) * 1e3
    same = ty.data_ptr() == y._storage.cuda.pointer
    sync = pc.get_runtime("vulkan").stats()["torch_sync"]
    row(f"torch op, pycoop kernel, torch op ({mode})", added, device,
        statistics.median(base) * 1e6,
        f"torch_sync={sync}; kernel adds {added - device:.1f} us beyond its device time "
        f"(goal <= 50); the pycoop call takes {statistics.median(host) * 1e6:.1f} us on the "
        f"host; torch's stream waits {statistics.median(gaps):.1f} us for it (CUDA events); "
        f"tensor memory is the Vulkan buffer (no host copy): {same}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer launches, a 2048^3 GEMM")
    ap.add_argument("--size", type=int, default=4096, help="GEMM size (default 4096)")
    args = ap.parse_args()
    rt = pc.get_runtime("vulkan")
    torch = torch_cuda()
    caps = rt.capabilities
    print(f"device: {caps.device_name}, driver {caps.driver_version}, "
          f"torch: {torch.__version__ if torch else 'none'}")
    print("| row | pycoop wall us/launch | device us | torch us | notes")
    print("|---|---|---|---|---|")
    n = 200 if args.quick else 2000
    warm_gpu()
    bench_axpy(n, torch)
    bench_chain()
    bench_gemm(2048 if args.quick else args.size, 20, torch)
    if torch is not None:
        bench_interop(torch, 50 if args.quick else 200)
    print("stats:", rt.stats())


if __name__ == "__main__":
    main()
