"""How fast a kernel that only reads memory streams a buffer the size of a weight matrix: the
ceiling the matrix-vector kernels of `bench/llm_kernels.py` measure themselves against.

Each invocation reads 16-byte vectors (`uvec4`), `loads` of them issued before any is used,
with consecutive invocations on consecutive vectors, strides over the buffer by the whole
grid and folds what it read into one word that it stores (so the loads cannot be dropped).
Sizes default to llama-8B's weight matrices at N = 1: Q4_0 4096 x 14336 (33.0 MB), Q4_K
(34.0 MB: the nibbles and `q4_k_scale_words`), Q8_0 (62.4 MB), f16 (117.4 MB). "rotated":
each launch reads another copy of random data (a GPU may read memory of one repeated value
faster than its DRAM moves), cycling through at least --rotate-mb (the H100's L2 is 50 MB),
as llm_kernels.py times the weights; "warm": the same copy every launch. Device time from
timestamps, medians.

    python3 bench/read_bandwidth.py [--mb 33.0 117.4] [--waves 1 2 4 8] [--loads 1 2 4 8]
                                    [--workgroup 256 1024]
"""
from __future__ import annotations

import argparse
import functools
import math

import numpy as np

import pycoop as pc
from pycoop import u32
from pycoop.kernels.limits import SMS
from llm_kernels import PEAK_GBS, time_pycoop   # noqa: E402  (sets PYCOOP_CHECKED=0)
from warmup import vulkan_or_skip

U4 = pc.vec(u32, 4)
# bytes of the weight matrices of 4096 x 14336 (Q4_0, Q4_K, Q8_0 and f16) in MB (2^20)
SIZES_MB = [4096 * 14336 * b / 2 ** 20 for b in (18 / 32, 18.5 / 32, 34 / 32, 2)]


@functools.cache
def stream_read(wg: int):
    """The reading kernel for workgroups of `wg` invocations."""
    @pc.kernel(workgroup_size=wg)
    def stream_read(X: pc.ReadBuffer[U4], Out: pc.WriteBuffer[u32], n: u32,
                    loads: pc.Const[int] = 4):
        """Out[i] = the XOR of every uvec4 component invocation i read: X[i], X[i + T], ...
        (T the grid's invocations), `loads` of them loaded per step before any is used."""
        T = pc.num_workgroups.x * wg
        i = pc.global_invocation_id.x
        acc = u32(0)
        for s in pc.range(i, n, T * loads):
            vs = [X[pc.min(s + j * T, n - 1)] for j in range(loads)]   # clamped, then masked
            for j in range(loads):
                v = vs[j]
                keep = pc.select(s + j * T < n, u32(0xFFFFFFFF), u32(0))
                acc = acc ^ ((v[0] ^ v[1] ^ v[2] ^ v[3]) & keep)
        Out[i] = acc
    return stream_read


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, nargs="+", default=SIZES_MB, help="buffer sizes (MB)")
    ap.add_argument("--waves", type=int, nargs="+", default=[1, 2, 4, 8],
                    help="workgroups per SM")
    ap.add_argument("--workgroup", type=int, nargs="+", default=[256],
                    help="invocations per workgroup")
    ap.add_argument("--loads", type=int, nargs="+", default=[1, 2, 4, 8],
                    help="vectors each invocation loads per step")
    ap.add_argument("--rotate-mb", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=50)
    a = ap.parse_args()
    rt = vulkan_or_skip()
    if rt is None:
        return
    caps = rt.capabilities
    peak = next((v for k, v in PEAK_GBS.items() if k in caps.device_name), None)
    print(f"device: {caps.device_name}, {caps.driver_version}; {SMS} SMs assumed; "
          f"peak {peak or '?'} GB/s")
    print("| MB | invocations per workgroup | workgroups per SM | loads per step | rotated µs | "
          "GB/s | warm µs | GB/s |")
    print("|---|---|---|---|---|---|---|---|")
    for mb in a.mb:
        n = int(mb * 2 ** 20) // 16
        copies = max(1, math.ceil(a.rotate_mb / mb))
        # every copy random: a GPU may compress memory of one repeated value and read it
        # faster than its DRAM moves
        rng = np.random.default_rng(0)
        first = rng.integers(0, 2 ** 32, (n, 4), np.uint32)
        xs = [pc.asarray(first, backend="vulkan")] + [
            pc.asarray(rng.integers(0, 2 ** 32, (n, 4), np.uint32), backend="vulkan")
            for _ in range(1, copies)]
        want = np.bitwise_xor.reduce(first.reshape(-1))
        for wg, waves in ((wg, w) for wg in a.workgroup for w in a.waves):
            grid = SMS * waves
            out = pc.empty(grid * wg, pc.u32, backend="vulkan")
            for loads in a.loads:
                k = stream_read(wg).compile(loads=loads)

                def launch(x, k=k, grid=grid, out=out):
                    return k.launch((grid, 1, 1), [x, out, n])
                launch(xs[0])          # every vector read once: the words XOR to X's
                assert np.bitwise_xor.reduce(out.numpy()) == want, (mb, wg, waves, loads)
                rot, warm = time_pycoop(launch, xs, a.repeat)
                gbs = [n * 16 / t / 1e3 for t in (rot, warm)]
                print(f"| {mb:.1f} | {wg} | {waves} | {loads} | {rot:.1f} | {gbs[0]:.0f} | "
                      f"{warm:.1f} | {gbs[1]:.0f} |", flush=True)
        del xs


if __name__ == "__main__":
    main()
