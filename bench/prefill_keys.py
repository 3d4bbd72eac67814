"""The attention prefill's cost per query tile apart from its key blocks: `attention(...)`'s
prefill (the default tiles, keys not split) over 4096 queries and fewer and fewer keys, so
that each query tile's fixed work (loading Q, the first loads, the output's and the
log-sum-exp's stores) stands out against its key blocks; then the causal prefill over as many
keys as queries, which sees half the key blocks for as many tiles.

    python3 bench/prefill_keys.py [--batch 4 --heads 32 --kv-heads 8 --head-dims 64 128]

A line through the times gives the fixed cost (the intercept) and each key block's (the
slope, per block of 64 keys across all tiles). Device times of the prefill kernel, the best of
3 x 10 launches after the GPU is kept busy for a moment. Skips (exit 0) without a Vulkan
device that runs the prefill (cooperative matrices of workgroup scope).
"""
from __future__ import annotations

import argparse

import numpy as np

# before pycoop: the benchmark times the unchecked kernels (bench/unchecked.py)
import unchecked  # noqa: E402,F401

import pycoop as pc  # noqa: E402
from pycoop.kernels import attention  # noqa: E402
from warmup import vulkan_or_skip, warm_gpu  # noqa: E402


def prefill_us(Q, K, V, causal: bool) -> float:
    run = dict(causal=causal, decode=False, splits=1, backend="vulkan")
    attention(Q, K, V, repeat=3, **run)             # the driver compiles on first use
    warm_gpu(0.3)
    return min(attention(Q, K, V, repeat=10, **run).time_ms for _ in range(3)) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--queries", type=int, default=4096)
    ap.add_argument("--keys", type=int, nargs="+", default=[128, 256, 512, 1024, 2048, 4096])
    ap.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    a = ap.parse_args()
    if vulkan_or_skip() is None:
        return
    rng = np.random.default_rng(0)

    def arr(*shape):
        return pc.asarray(rng.standard_normal(shape).astype(np.float16), backend="vulkan")
    warm_gpu()
    print(f"{'head dim':>8} {'causal':>6} {'keys':>6} {'µs':>9} {'µs per key block':>17}")
    for D in a.head_dims:
        Q = arr(a.batch, a.heads, a.queries, D)
        fit = []
        for Skv in a.keys:
            K, V = arr(a.batch, a.kv_heads, Skv, D), arr(a.batch, a.kv_heads, Skv, D)
            try:
                us = prefill_us(Q, K, V, False)
            except pc.BackendUnavailable as e:
                print(f"skipped: {str(e).splitlines()[0][:200]}")
                return
            fit.append((Skv / 64, us))
            print(f"{D:>8} {'':>6} {Skv:>6} {us:9.1f} {us / (Skv / 64):17.2f}", flush=True)
        K, V = arr(a.batch, a.kv_heads, a.queries, D), arr(a.batch, a.kv_heads, a.queries, D)
        us = prefill_us(Q, K, V, True)
        print(f"{D:>8} {'yes':>6} {a.queries:>6} {us:9.1f}", flush=True)
        if len(fit) > 1:
            slope, fixed = np.polyfit(*zip(*fit), 1)
            print(f"{D:>8} fit: {fixed:.1f} µs fixed + {slope:.2f} µs per key block", flush=True)


if __name__ == "__main__":
    main()
