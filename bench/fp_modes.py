"""What the floating-point modes cost on the GPU: the same kernels compiled with fp="exact"
(NoContraction on float arithmetic, SignedZeroInfNanPreserve and RoundingModeRTE), fp="strict"
(exact plus DenormPreserve, where the device has it) and fp="fast" (no float controls).

- softmax over rows (f32, one workgroup per row, shared-memory reductions, exp and division)
- RMS norm over rows (f16 in and out, f32 sums, rsqrt, a scale per column)
- a KHR cooperative-matrix GEMM (f16 in, f32 accumulate) with an epilogue
  D = alpha * (A @ B) + beta * C on the accumulators (matrix * scalar, matrix + matrix)

Each kernel runs --repeat times back to back after --warmup unmeasured runs; the table gives
the fastest run per mode and the ratio to fast mode, and checks that the modes' outputs agree
with NumPy (they differ from each other only in rounding).

    python3 bench/fp_modes.py [--rows 4096] [--cols 4096] [--gemm 4096] [--repeat 50]
"""
from __future__ import annotations

import argparse
import functools

import numpy as np

import pycoop as pc
from pycoop import f16, f32, u32

# before pycoop: the benchmark times the unchecked kernels (bench/unchecked.py)
import unchecked  # noqa: E402,F401

MODES = ("fast", "exact", "strict")
WG = 256


@pc.func
def _reduce(sh, tid, op):
    step = WG // 2
    while step > 0:
        if tid < step:
            sh[tid] = op(sh[tid], sh[tid + step])
        pc.barrier()
        step //= 2
    return sh[0]


@functools.cache
def softmax(fp: str):
    @pc.kernel(workgroup_size=WG, fp=fp)
    def softmax_rows(X: pc.ReadBuffer[f32], Y: pc.WriteBuffer[f32], ncols: u32):
        row, tid = pc.workgroup_id.x, pc.local_invocation_id.x
        sh = pc.shared(f32, WG)
        m = f32(-3.0e38)
        for c in range(tid, ncols, WG):
            m = pc.max(m, X[row * ncols + c])
        sh[tid] = m
        pc.barrier()
        m = _reduce(sh, tid, pc.max)
        pc.barrier()
        s = f32(0.0)
        for c in range(tid, ncols, WG):
            s = s + pc.exp(X[row * ncols + c] - m)
        sh[tid] = s
        pc.barrier()
        s = _reduce(sh, tid, lambda a, b: a + b)
        r = f32(1.0) / s
        for c in range(tid, ncols, WG):
            Y[row * ncols + c] = pc.exp(X[row * ncols + c] - m) * r
    return softmax_rows


@functools.cache
def rms_norm(fp: str):
    @pc.kernel(workgroup_size=WG, fp=fp)
    def rms_norm_rows(X: pc.ReadBuffer[f16], W: pc.ReadBuffer[f16], Y: pc.WriteBuffer[f16],
                      ncols: u32, eps: f32):
        row, tid = pc.workgroup_id.x, pc.local_invocation_id.x
        sh = pc.shared(f32, WG)
        s = f32(0.0)
        for c in range(tid, ncols, WG):
            x = f32(X[row * ncols + c])
            s = s + x * x
        sh[tid] = s
        pc.barrier()
        s = _reduce(sh, tid, lambda a, b: a + b)
        r = pc.rsqrt(s / f32(ncols) + eps)
        for c in range(tid, ncols, WG):
            Y[row * ncols + c] = f16(f32(X[row * ncols + c]) * r * f32(W[c]))
    return rms_norm_rows


MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
MatB = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseB]
Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]
TM = TN = 2


@functools.cache
def gemm_epilogue(fp: str):
    """4 subgroups of 32 per workgroup, each a (16*TM) x (16*TN) tile of D."""
    @pc.kernel(workgroup_size=128, subgroup_size=32, fp=fp)
    def gemm_alpha_beta(A: pc.ReadBuffer[f16], B: pc.ReadBuffer[f16], C: pc.ReadBuffer[f32],
                        D: pc.WriteBuffer[f32], M: u32, N: u32, K: u32, alpha: f32, beta: f32):
        sg = pc.subgroup_id()
        m0 = pc.workgroup_id.x * (32 * TM) + (sg // 2) * (16 * TM)
        n0 = pc.workgroup_id.y * (32 * TN) + (sg % 2) * (16 * TN)
        acc = [[Acc.fill(0.0) for _ in range(TN)] for _ in range(TM)]
        for k in range(0, K, 16):
            a = [MatA.load(A, (m0 + 16 * i) * K + k, K) for i in range(TM)]
            b = [MatB.load(B, k * N + n0 + 16 * j, N) for j in range(TN)]
            acc = [[pc.mul_add(a[i], b[j], acc[i][j]) for j in range(TN)] for i in range(TM)]
        for i in range(TM):
            for j in range(TN):
                off = (m0 + 16 * i) * N + n0 + 16 * j
                pc.store(D, off, acc[i][j] * alpha + Acc.load(C, off, N) * beta, N)
    return gemm_alpha_beta


def _time(kernel, grid, args, repeat: int, warmup: int) -> float:
    kernel[grid](*args, backend="vulkan", repeat=warmup)
    return kernel[grid](*args, backend="vulkan", repeat=repeat).time_ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--gemm", type=int, default=4096, help="M = N = K of the GEMM")
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=100)
    args = ap.parse_args()
    from pycoop.runtime.vulkan import get_runtime
    caps = get_runtime().capabilities
    print(f"{caps.device_name}, driver {caps.driver_version}")
    rng = np.random.default_rng(0)
    R, Cn, n = args.rows, args.cols, args.gemm

    X = (rng.standard_normal((R, Cn)) * 4).astype(np.float32)
    e = np.exp(X - X.max(1, keepdims=True))
    sm_ref = e / e.sum(1, keepdims=True)
    Xh = rng.standard_normal((R, Cn)).astype(np.float16)
    Wh = rng.standard_normal(Cn).astype(np.float16)
    xf = Xh.astype(np.float32)
    rn_ref = xf / np.sqrt((xf * xf).mean(1, keepdims=True) + 1e-6) * Wh.astype(np.float32)
    A = (rng.standard_normal((n, n)) / 8).astype(np.float16)
    B = (rng.standard_normal((n, n)) / 8).astype(np.float16)
    C = rng.standard_normal((n, n)).astype(np.float32)
    gm_ref = 1.5 * (A.astype(np.float32) @ B.astype(np.float32)) - 0.5 * C

    cases = [
        (f"softmax {R}x{Cn} f32", softmax, R, lambda: (X, np.zeros_like(X), Cn), 1, sm_ref, 1e-6),
        (f"rms norm {R}x{Cn} f16", rms_norm, R, lambda: (Xh, Wh, np.zeros_like(Xh), Cn, 1e-6), 2,
         rn_ref, 1e-2),
        (f"gemm {n}^3 f16->f32, alpha*AB+beta*C", gemm_epilogue, (n // (32 * TM), n // (32 * TN)),
         lambda: (A, B, C, np.zeros_like(C), n, n, n, 1.5, -0.5), 3, gm_ref, 1e-3),
    ]
    rows = []
    for name, factory, grid, make, out, ref, tol in cases:
        times = {}
        for mode in MODES:
            k = factory(mode)
            missing = caps.missing(k.compile().requirements)
            if missing:
                times[mode] = None
                print(f"  {name} {mode}: not run, the device lacks {', '.join(missing)}")
                continue
            a = make()
            times[mode] = _time(k, grid, a, args.repeat, args.warmup)
            err = np.abs(a[out].astype(np.float32) - ref).max()
            assert err < tol * max(1.0, np.abs(ref).max()), (name, mode, err)
        rows.append((name, times))

    print(f"\n| kernel | {' | '.join(f'{m} (ms)' for m in MODES)} | exact / fast | strict / fast |")
    print("|---|" + "---|" * (len(MODES) + 2))
    for name, t in rows:
        cells = [f"{t[m]:.3f}" if t[m] else "n/a" for m in MODES]
        ratios = [f"{t[m] / t['fast']:.3f}" if t[m] and t["fast"] else "n/a" for m in ("exact", "strict")]
        print(f"| {name} | {' | '.join(cells)} | {' | '.join(ratios)} |")


if __name__ == "__main__":
    main()
