"""GPU GEMM throughput on Vulkan against torch's cuBLAS matmul measured in the same run.

- pycoop's KHR subgroup-scope GEMMs: pycoop.kernels.gemm_khr (several register tilings) and
  gemm_khr_staged (shared-memory staging with a register prefetch)
- pycoop's NV coopmat2 workgroup-scope GEMM (pycoop.kernels.gemm_nv), autotuned over tile
  shapes, edge clamping, k-steps per iteration and shape specialisation
- the Q4_0 GEMMs at llama.cpp's shape M=4096, N=512, K=14336 (gemm_q4_0 through NV decode
  functions, gemm_q4_0_staged dequantising llama.cpp's blocks by hand, gemm_q4_0_planes the
  same blocks split into nibble and scale planes) against pycoop's f16 GEMMs there (gemm_nv,
  gemm_khr_staged with vector copies), each also with split-K: the grid gains split_k
  workgroups along K writing partial products that sum_splits adds, the two kernels' times
  added
- the Q8_0 and Q4_K GEMMs at the same shape (gemm_q8_0 and gemm_q4_k through NV decode
  functions, gemm_q8_0_planes and gemm_q4_k_planes dequantising Q8_0 / Q4_K planes by hand,
  also with split-K) against
  pycoop's f16 gemm_nv and cuBLAS there; each format's fastest kernel is checked against
  NumPy dequantise-then-matmul on a 64 x 64 corner

All f16 in, f32 accumulate. Each configuration runs --repeat times back to back on the device
(one upload, no idle gaps, so the GPU stays at full clock), after 200 unmeasured runs that
bring the clock back up from the idle time of pipeline creation, and reports its fastest run; cuBLAS
is timed the same way before and after each block and the better of the two is the reference.

    python3 bench/gemm_gpu.py [--sizes 4096 8192] [--repeat 50] [--formats q4_0 q8_0 q4_k]
"""
from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from pycoop.kernels import (dequantize_q4_k, dequantize_q4_k_planes, dequantize_q8_0, gemm_khr,
                            gemm_khr_staged, gemm_nv, gemm_q4_0, gemm_q4_0_planes,
                            gemm_q4_0_staged, gemm_q4_k, gemm_q4_k_planes, gemm_q8_0,
                            gemm_q8_0_planes, gemm_workgroup_tile, q4_0_planes, q4_k_planes,
                            q8_0_planes, quantize_q4_k, quantize_q8_0, sum_splits)

# before pycoop: the benchmark times the unchecked kernels (bench/unchecked.py)
import unchecked  # noqa: E402,F401

KHR_CONFIGS = [(2, 2), (4, 4)]
# BM BN BK SGM SGN pad, specialize, vector_copy
STAGED_CONFIGS = [((128, 256, 32, 2, 4, 8), False, False), ((128, 256, 32, 2, 4, 8), True, False),
                  ((256, 128, 32, 4, 2, 8), True, False), ((128, 256, 32, 4, 4, 8), True, False),
                  ((128, 128, 32, 2, 2, 8), True, False), ((256, 128, 32, 4, 2, 8), True, True),
                  ((128, 256, 32, 2, 4, 8), True, True), ((128, 128, 64, 2, 2, 8), True, True),
                  ((128, 128, 32, 2, 2, 8), True, True)]
NV_TILES = [(128, 256, 32, 256), (128, 256, 64, 256), (256, 128, 32, 256), (256, 128, 64, 256),
            (128, 128, 64, 256), (128, 128, 32, 256)]
Q4_TILES = [(128, 128, 32), (128, 128, 64), (256, 64, 64), (128, 64, 64), (256, 64, 32)]  # 256 invocations
# BM BN BK SGM SGN: gemm_khr_staged(vector_copy=True) for f16, gemm_q4_0_staged and
# gemm_q4_0_planes for Q4_0
Q4_KHR = [(128, 64, 64, 2, 2), (128, 128, 64, 2, 4), (128, 128, 64, 4, 2), (128, 64, 64, 4, 1),
          (128, 128, 64, 2, 2)]
# split-K at the Q4_0 shape (128 tiles of 128x128 leave an SM one workgroup): BM BN BK SGM SGN
# for gemm_khr_staged(vector_copy=True) and gemm_q4_0_planes, and BM BN BK for gemm_nv
# ("undefined", unroll 2)
SPLIT_K = [2, 4]
SPLIT_KHR = [(128, 128, 64, 2, 2), (128, 128, 32, 2, 2), (128, 128, 64, 2, 4)]
SPLIT_NV = [(128, 256, 64), (128, 256, 32), (128, 128, 64), (256, 128, 32)]
# Q8_0 and Q4_K at the same shape: BM BN BK of gemm_q8_0 / gemm_q4_k (256 invocations, shape
# specialised, clamp "undefined", both operand orders), and BM BN BK SGM SGN of
# gemm_q8_0_planes and gemm_q4_k_planes (with split-K 2 for the first two)
QUANT_TILES = [(128, 128, 32), (128, 128, 64), (256, 64, 64), (128, 64, 64)]
Q8_PLANES = [(128, 64, 64, 2, 2), (128, 128, 64, 2, 2), (128, 128, 64, 2, 4), (128, 128, 32, 2, 2)]


def gpu_state() -> str:
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
        apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10)
        return f"{q.stdout.strip()}, {len(apps.stdout.split())} compute processes"
    except (OSError, subprocess.SubprocessError):
        return "nvidia-smi unavailable"


WARMUP = 200   # unmeasured runs first: creating a pipeline idles the GPU and lowers its clock;
               # 50 did not always bring it back up after a large shader (H100, 2026-11-22)


def cublas_tflops(m: int, n: int, k: int, repeat: int) -> float:
    import torch
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(repeat)]
    for _ in range(WARMUP):                    # unmeasured, like the pycoop runs
        a @ b
    for start, end in events:                  # back to back, like the pycoop runs
        start.record()
        a @ b
        end.record()
    torch.cuda.synchronize()
    return 2 * m * n * k / (min(s.elapsed_time(e) for s, e in events) * 1e-3) / 1e12


def time_ms(kernel, grid, args, repeat: int, **consts) -> float:
    """The fastest of `repeat` back-to-back runs, after WARMUP unmeasured ones."""
    launch = kernel[grid]
    launch(*args, backend="vulkan", repeat=WARMUP, **consts)
    return launch(*args, backend="vulkan", repeat=repeat, **consts).time_ms


def tflops(kernel, grid, args, flop: int, repeat: int, **consts) -> float:
    return flop / time_ms(kernel, grid, args, repeat, **consts) / 1e9


def split_k_tflops(kernel, grid, args, Y, split_k: int, flop: int, repeat: int) -> float:
    """A split-K GEMM writing its partial products into a stacked buffer (in place of Y in
    `args`), then sum_splits adding them into Y: the two kernels' times added."""
    P = np.zeros((split_k * Y.shape[0], Y.shape[1]), np.float32)
    n4 = Y.size // 4
    ms = time_ms(kernel, grid + (split_k,), [P if a is Y else a for a in args], repeat)
    ms += time_ms(sum_splits(split_k), (-(-n4 // 256),), [P.reshape(-1, 4), Y.reshape(-1, 4), n4],
                  repeat)
    return flop / ms / 1e9


def rel_err(C, A, B) -> float:
    ref = A[:64].astype(np.float32) @ B[:, :64].astype(np.float32)
    return float(np.abs(C[:64, :64] - ref).max() / np.abs(ref).max())


class Table:
    def __init__(self, shape: str, ref: float):
        self.shape, self.ref, self.rows = shape, ref, []

    def row(self, name: str, tf: float, err: float | None = None) -> None:
        e = f"{err:>10.1e}" if err is not None else f"{'':>10}"
        print(f"{self.shape:>16} {name:<52}{tf:>9.1f}{tf / self.ref:>10.3f}{e}", flush=True)
        self.rows.append((tf, name))

    def best(self, prefix: str) -> tuple[float, str]:
        return max((r for r in self.rows if r[1].startswith(prefix)), default=(0.0, "none"))


def square(n: int, repeat: int) -> None:
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)
    B = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)
    C = np.zeros((n, n), np.float32)
    args, flop = [A, B, C, n, n, n], 2 * n ** 3
    before = cublas_tflops(n, n, n, repeat)
    t = Table(f"{n}^3", before)
    for tm, tn in KHR_CONFIGS:
        wm, wn = gemm_workgroup_tile(tm, tn)
        C[:] = 0
        tf = tflops(gemm_khr, (n // wm, n // wn), args, flop, repeat, TM=tm, TN=tn)
        t.row(f"KHR TM={tm} TN={tn}", tf, rel_err(C, A, B))
    A4, B4 = A.view(np.uint32).reshape(-1, 4), B.view(np.uint32).reshape(-1, 4)
    for cfg, spec, vec in STAGED_CONFIGS:
        C[:] = 0
        tf = tflops(gemm_khr_staged(*cfg, specialize=spec, vector_copy=vec),
                    (n // cfg[0], n // cfg[1]), [A4, B4, C, n, n, n] if vec else args, flop, repeat)
        t.row(f"KHR staged {cfg[0]}x{cfg[1]}x{cfg[2]} {cfg[3]}x{cfg[4]}sg"
              f"{' spec' if spec else ''}{' uvec4' if vec else ''}", tf, rel_err(C, A, B))
    configs = [((128, 256, 32, 256), "constant", 1, False)] + [
        (tile, clamp, unroll, True) for tile, clamp, unroll in
        itertools.product(NV_TILES, ["constant", "undefined"], [1, 2])
        if clamp == "constant" or (n % tile[0] == 0 and n % tile[1] == 0 and n % (tile[2] * unroll) == 0)]
    for (bm, bn, bk, inv), clamp, unroll, spec in configs:
        C[:] = 0
        tf = tflops(gemm_nv(bm, bn, bk, inv, clamp, unroll, spec), (-(-n // bm), -(-n // bn)), args,
                    flop, repeat)
        t.row(f"NV {bm}x{bn}x{bk} wg={inv} {clamp} u{unroll}{' spec' if spec else ''}", tf,
              rel_err(C, A, B))
    after = cublas_tflops(n, n, n, repeat)
    ref = max(before, after)
    print(f"{'':>16} cuBLAS {before:.1f} before, {after:.1f} after ({gpu_state()})")
    for prefix in ("KHR", "NV"):
        tf, name = t.best(prefix)
        print(f"{'':>16} best {prefix}: {name}: {tf:.1f} TFLOP/s = {tf / ref:.3f}x cuBLAS")


def q4_0(repeat: int) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
    from q4_0_gemm import quantize_q4_0
    M, N, K = 4096, 512, 14336
    rng = np.random.default_rng(1)
    X = rng.standard_normal((M, K), dtype=np.float32).astype(np.float16)
    Wf = rng.standard_normal((N, K), dtype=np.float32)
    Wq = quantize_q4_0(Wf)
    Wt = np.ascontiguousarray(Wf.T.astype(np.float16))            # K x N for the f16 GEMM
    Y = np.zeros((M, N), np.float32)
    flop = 2 * M * N * K
    t = Table(f"{M}x{N}x{K}", cublas_tflops(M, N, K, repeat))
    for (bm, bn, bk), clamp, unroll in itertools.product(Q4_TILES, ["constant", "undefined"], [1, 2]):
        grid = (-(-M // bm), -(-N // bn))
        cfg = f"{bm}x{bn}x{bk} {clamp} u{unroll} spec"
        t.row(f"f16 NV {cfg}", tflops(gemm_nv(bm, bn, bk, 256, clamp, unroll, True), grid,
                                      [X, Wt, Y, M, N, K], flop, repeat))
        for first in (True, False):
            t.row(f"Q4_0 NV {'W.X^T' if first else 'X.W^T'} {cfg}",
                  tflops(gemm_q4_0(bm, bn, bk, 256, unroll, True, clamp=clamp, weights_first=first),
                         grid, [X, Wq, Y, M, N, K], flop, repeat))
    X4, Wt4, W32 = X.view(np.uint32).reshape(-1, 4), Wt.view(np.uint32).reshape(-1, 4), Wq.view(np.uint32)
    # gemm_q4_0_planes computes W @ X: Q4_0 weights M x K (4096 rows) times f16 K x N
    Q, D = q4_0_planes(quantize_q4_0(rng.standard_normal((M, K), dtype=np.float32)), M, K)
    for bm, bn, bk, sgm, sgn in Q4_KHR:
        grid, cfg = (M // bm, N // bn), f"{bm}x{bn}x{bk} {sgm}x{sgn}sg spec"
        t.row(f"f16 KHR staged uvec4 {cfg}",
              tflops(gemm_khr_staged(bm, bn, bk, sgm, sgn, specialize=True, vector_copy=True), grid,
                     [X4, Wt4, Y, M, N, K], flop, repeat))
        t.row(f"Q4_0 KHR staged {cfg}", tflops(gemm_q4_0_staged(bm, bn, bk, sgm, sgn, specialize=True),
                                               grid, [X4, W32, Y, M, N, K], flop, repeat))
        t.row(f"Q4_0 KHR planes {cfg}", tflops(gemm_q4_0_planes(bm, bn, bk, sgm, sgn, specialize=True),
                                               grid, [Q, D, Wt4, Y, M, N, K], flop, repeat))
    for (bm, bn, bk), split_k in itertools.product(SPLIT_NV, SPLIT_K):
        t.row(f"f16 NV {bm}x{bn}x{bk} undefined u2 spec split{split_k}",
              split_k_tflops(gemm_nv(bm, bn, bk, 256, "undefined", 2, True, split_k=split_k),
                             (M // bm, N // bn), [X, Wt, Y, M, N, K], Y, split_k, flop, repeat))
    for (bm, bn, bk, sgm, sgn), split_k in itertools.product(SPLIT_KHR, SPLIT_K):
        grid, cfg = (M // bm, N // bn), f"{bm}x{bn}x{bk} {sgm}x{sgn}sg spec split{split_k}"
        t.row(f"f16 KHR staged uvec4 {cfg}", split_k_tflops(
            gemm_khr_staged(bm, bn, bk, sgm, sgn, specialize=True, vector_copy=True, split_k=split_k),
            grid, [X4, Wt4, Y, M, N, K], Y, split_k, flop, repeat))
        t.row(f"Q4_0 KHR planes {cfg}", split_k_tflops(
            gemm_q4_0_planes(bm, bn, bk, sgm, sgn, specialize=True, split_k=split_k), grid,
            [Q, D, Wt4, Y, M, N, K], Y, split_k, flop, repeat))
    (b16, n16), (bq, nq) = t.best("f16"), t.best("Q4_0")
    print(f"{'':>16} best f16: {n16}: {b16:.1f}; best Q4_0: {nq}: {bq:.1f}; "
          f"Q4_0 / f16 = {bq / b16:.2f}")


def quant(fmts: list[str], repeat: int, shape: tuple[int, int, int] = (4096, 512, 14336)) -> None:
    """Q8_0 and Q4_K at llama.cpp's prefill shape M=4096, N=512, K=14336 (Y = X @ W.T, W N x K;
    the planes GEMM computes the transposed product with M x K weights), with cuBLAS and the
    f16 gemm_nv in the same run."""
    M, N, K = shape
    rng = np.random.default_rng(2)
    X = rng.standard_normal((M, K), dtype=np.float32).astype(np.float16)
    Wf = rng.standard_normal((N, K), dtype=np.float32)
    Wt = np.ascontiguousarray(Wf.T.astype(np.float16))            # K x N for the f16 GEMM
    Y = np.zeros((M, N), np.float32)
    flop = 2 * M * N * K
    before = cublas_tflops(M, N, K, repeat)
    t = Table(f"{M}x{N}x{K}", before)
    for bm, bn, bk in QUANT_TILES[:2]:
        t.row(f"f16 NV {bm}x{bn}x{bk} undefined u2 spec",
              tflops(gemm_nv(bm, bn, bk, 256, "undefined", 2, True), (M // bm, N // bn),
                     [X, Wt, Y, M, N, K], flop, repeat))
    quantize = {"q8_0": quantize_q8_0, "q4_k": quantize_q4_k}
    dequantize = {"q8_0": dequantize_q8_0, "q4_k": dequantize_q4_k}
    kernels = {"q8_0": gemm_q8_0, "q4_k": gemm_q4_k}
    for fmt in fmts:
        Wq = quantize[fmt](Wf)
        W64 = dequantize[fmt](Wq[:64], 64, K)                       # the first 64 weight rows
        ref = X[:64].astype(np.float32) @ W64.T
        name = fmt.upper()
        for (bm, bn, bk), first in itertools.product(QUANT_TILES, (True, False)):
            k = kernels[fmt](bm, bn, bk, 256, 1, True, clamp="undefined", weights_first=first)
            Y[:] = np.nan
            tf = tflops(k, (M // bm, N // bn), [X, Wq, Y, M, N, K], flop, repeat)
            t.row(f"{name} NV {'W.X^T' if first else 'X.W^T'} {bm}x{bn}x{bk} undefined spec", tf,
                  float(np.abs(Y[:64, :64] - ref).max() / np.abs(ref).max()))
        # the planes GEMM computes W @ X: weights M x K (4096 rows) times f16 K x N; Q4_K's
        # planes hold f16 (scale, min) per sub-block, so its reference is dequantize_q4_k_planes
        Wm = quantize[fmt](rng.standard_normal((M, K), dtype=np.float32))
        planes = {"q8_0": q8_0_planes, "q4_k": q4_k_planes}[fmt]
        kernel = {"q8_0": gemm_q8_0_planes, "q4_k": gemm_q4_k_planes}[fmt]
        Q, D = planes(Wm, M, K)
        W64 = (dequantize_q8_0(Wm[:64], 64, K) if fmt == "q8_0" else
               dequantize_q4_k_planes(Q[:64 * K // 32], D[:64 * K // 32], 64, K))
        ref = W64.astype(np.float32) @ Wt[:, :64].astype(np.float32)
        Wt4 = Wt.view(np.uint32).reshape(-1, 4)
        for i, (bm, bn, bk, sgm, sgn) in enumerate(Q8_PLANES):
            grid, cfg = (M // bm, N // bn), f"{bm}x{bn}x{bk} {sgm}x{sgn}sg spec"
            Y[:] = np.nan
            tf = tflops(kernel(bm, bn, bk, sgm, sgn, specialize=True), grid,
                        [Q, D, Wt4, Y, M, N, K], flop, repeat)
            t.row(f"{name} KHR planes {cfg}", tf,
                  float(np.abs(Y[:64, :64] - ref).max() / np.abs(ref).max()))
            if i < 2:
                t.row(f"{name} KHR planes {cfg} split2", split_k_tflops(
                    kernel(bm, bn, bk, sgm, sgn, specialize=True, split_k=2), grid,
                    [Q, D, Wt4, Y, M, N, K], Y, 2, flop, repeat))
    after = cublas_tflops(M, N, K, repeat)
    ref16 = max(before, after)
    print(f"{'':>16} cuBLAS {before:.1f} before, {after:.1f} after ({gpu_state()})")
    b16, n16 = t.best("f16")
    for fmt in fmts:
        tf, name = t.best(fmt.upper())
        print(f"{'':>16} best {fmt.upper()}: {name}: {tf:.1f} TFLOP/s = {tf / ref16:.2f}x cuBLAS "
              f"f16, {tf / b16:.2f}x pycoop f16 ({n16}: {b16:.1f})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[4096, 8192],
                    help="square sizes (none: only the Q4_0 comparison)")
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--formats", nargs="*", default=["q4_0", "q8_0", "q4_k"],
                    choices=["q4_0", "q8_0", "q4_k"],
                    help="weight formats compared at 4096x512x14336 (q4_0: the long Q4_0 "
                         "table; q8_0, q4_k: the Q8_0 / Q4_K GEMMs, decode-function and planes)")
    a = ap.parse_args()
    from pycoop.runtime.vulkan import get_runtime
    caps = get_runtime().capabilities
    print(f"# GEMM f16 -> f32, {time.strftime('%Y-%m-%d')}, {caps.device_name}, driver "
          f"{caps.driver_version}; fastest of {a.repeat} back-to-back runs ({gpu_state()})")
    print(f"{'shape':>16} {'kernel':<52}{'TFLOP/s':>9}{'x cuBLAS':>10}{'rel err':>10}")
    for n in a.sizes:
        square(n, a.repeat)
    if "q4_0" in a.formats:
        q4_0(a.repeat)
    rest = [f for f in a.formats if f != "q4_0"]
    if rest:
        quant(rest, a.repeat)


if __name__ == "__main__":
    main()
