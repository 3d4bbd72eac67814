"""Where a replayed attention decode's device time goes: the vector decode's chunk kernel and
merge kernel timed in `repeat=` loops (one pipeline dispatched back to back), each alone as a
replayed launch graph, both as one graph, and the chunk kernel twice in one graph; then the
kernel that does both steps (`phases=True`, `decode_merge="phase"`: the same pipeline
dispatched twice), alone and as both steps.

    python3 bench/decode_launches.py [--keys 8192 32768] [--replays 200]

32 query heads over 8 K/V heads, head dim 128, f16, device arrays, the default configuration
(`attention(...)`'s splits and kernels). Graph times are from the replay's first command to
its last (min and median over the replays). The GPU is kept busy for a moment before each
measurement (`warmup.warm_gpu`), and the loops are timed again at the end. Skips (exit 0) without a Vulkan device with
subgroups of 32.
"""
from __future__ import annotations

import argparse

import numpy as np

# before pycoop: the benchmark times the unchecked kernels (bench/unchecked.py)
import unchecked  # noqa: E402,F401

import pycoop as pc  # noqa: E402
from pycoop.kernels.attention_decode import (  # noqa: E402
    DecodeConfig, attention_decode_vector, attention_merge, chunk_of, default_lanes,
    default_splits, default_subgroups, streams_of)
from warmup import vulkan_or_skip, warm_gpu  # noqa: E402

H, HKV, D = 32, 8, 128
WARM_S = 0.3        # the GPU kept busy before each measurement, so that its clocks are up


def graph_us(body, replays: int) -> tuple[float, float]:
    """(min, median) µs of `replays` replays of the launches `body` makes, captured once."""
    with pc.capture(backend="vulkan") as g:
        body()
    warm_gpu(WARM_S)
    for _ in range(20):
        g.launch()
    runs = [g.launch() for _ in range(replays)]
    pc.synchronize()
    t = sorted(r.times_ms[0] * 1e3 for r in runs)
    g.free()
    return t[0], t[len(t) // 2]


def case(keys: int, replays: int) -> None:
    rng = np.random.default_rng(0)
    q = pc.asarray(rng.standard_normal((HKV * H // HKV, D)).astype(np.float16), backend="vulkan")
    k, v = (pc.asarray(rng.standard_normal((HKV * keys, D)).astype(np.float16), backend="vulkan")
            for _ in range(2))
    sg = default_subgroups(keys, HKV)
    T = streams_of(sg, 32, default_lanes(D, 32))
    chunk, splits = chunk_of(keys, default_splits(keys, HKV, T, DecodeConfig.unroll), T,
                             DecodeConfig.unroll)
    part = pc.empty((splits, H, D), pc.f32, backend="vulkan")
    m, l = (pc.empty((splits, H), pc.f32, backend="vulkan") for _ in range(2))
    o, lse = pc.empty((H, D), pc.f16, backend="vulkan"), pc.empty(H, pc.f32, backend="vulkan")
    chunks = attention_decode_vector(D, H // HKV, sg, None,
                                     DecodeConfig.unroll, 32, "f16", DecodeConfig.prefetch)
    merge = attention_merge(D, "f16")
    phases = attention_decode_vector(D, H // HKV, sg, None, DecodeConfig.unroll, 32, "f16",
                                     DecodeConfig.prefetch, phases=True)
    scale = float(1 / np.sqrt(D))

    def a1(**kw):
        return chunks[(splits, HKV)](q, k, v, part, m, l, keys, chunk, scale, backend="vulkan",
                                     **kw)

    def a2(**kw):
        return merge[(H,)](part, m, l, o, lse, H, splits, backend="vulkan", **kw)

    def p1(**kw):
        return phases[(splits, HKV)](q, k, v, part, m, l, o, lse, keys, chunk, scale, H, splits,
                                     0, backend="vulkan", **kw)

    def p2(**kw):
        return phases[(H,)](q, k, v, part, m, l, o, lse, keys, chunk, scale, H, splits, 1,
                            backend="vulkan", **kw)

    def loops() -> str:
        warm_gpu(WARM_S)
        a1(repeat=200)
        a2(repeat=200)
        r1, r2 = a1(repeat=100), a2(repeat=100)
        pc.synchronize()
        return f"chunks {r1.time_ms * 1e3:.2f}, merge {r2.time_ms * 1e3:.2f}"

    print(f"\n{keys} keys, {splits} chunks of {chunk} keys, {sg} subgroups (µs, min / median)")
    print(f"  repeat loops: {loops()}")
    for label, body in (("chunks alone", a1), ("merge alone", a2),
                        ("chunks then merge", lambda: (a1(), a2())),
                        ("chunks twice", lambda: (a1(), a1())),
                        ("merge then chunks", lambda: (a2(), a1())),
                        ("phases: chunks", p1), ("phases: both", lambda: (p1(), p2()))):
        lo, med = graph_us(body, replays)
        print(f"  graph, {label:<18} {lo:7.2f} / {med:7.2f}")
    print(f"  repeat loops again: {loops()}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, nargs="*", default=[8192, 32768])
    ap.add_argument("--replays", type=int, default=200)
    a = ap.parse_args()
    rt = vulkan_or_skip()
    if rt is None:
        return
    caps = rt.capabilities
    print(f"device: {caps.device_name}, driver {caps.driver_version}")
    try:
        for keys in a.keys:
            case(keys, a.replays)
    except pc.BackendUnavailable as e:     # e.g. no subgroups of 32 (lavapipe)
        print(f"skipped: {e}")


if __name__ == "__main__":
    main()
