"""Probe: the integer GEMM (gemm_q4_0_int8) against the planes GEMM and torch f16."""
import itertools
import statistics
import sys

import numpy as np

import pycoop as pc
from pycoop.kernels import gemm_q4_0_planes, q4_0_planes, sum_splits
from pycoop.kernels.gemm_int8 import gemm_q4_0_int8
from pycoop.kernels.gemv import planes_config

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from llm_kernels import torch_times  # noqa: E402
from small_n_sweep import weights_raw  # noqa: E402
from warmup import warm_gpu  # noqa: E402

VARIANTS = __import__("os").environ.get("PROBE_VARIANTS", "").split(",") if __import__("os").environ.get("PROBE_VARIANTS") else []
BK_ = __import__("os").environ.get("PROBE_BACKEND", "vulkan")


def timed(launch, copies, repeat=30):
    for i in range(6):
        launch(i % copies)
    pc.synchronize()
    if BK_ == "vulkan":
        warm_gpu(0.3)
    rt = pc.get_runtime()
    with rt.batch():
        runs = [launch(i % copies) for i in range(repeat)]
    pc.synchronize()
    return statistics.median(sum(r.times_ms[0] for r in run) for run in runs) * 1e3


def int8_configs(N):
    if VARIANTS:
        if N <= 64:
            return [(128, 64, 64, 2, 2, 8, "atomic"), (128, 64, 64, 4, 1, 8, "atomic")]
        return [(128, 128, 64, 2, 4, 2, "atomic")]
    if N <= 64:
        BN = next(t for t in (16, 32, 64) if N <= t)
        tiles = [(128, 4, 1), (64, 2, 1), (64, 4, 1), (256, 8, 1), (128, 8, 1)]
        if BN >= 32:
            tiles += [(128, 2, 2), (256, 4, 2)]
        splits = [(1, "stacked"), (2, "atomic"), (4, "atomic"), (8, "atomic"), (16, "atomic")]
    else:
        BN = 128
        tiles = [(128, 2, 4), (128, 4, 2), (256, 4, 2), (64, 2, 4)]
        splits = [(1, "stacked"), (2, "atomic"), (4, "atomic")]
    out = []
    for (BM, SGM, SGN), (split, mode), BK in itertools.product(tiles, splits, (64, 128)):
        if BM % (16 * SGM) or BN % (16 * SGN):
            continue
        out.append((BM, BN, BK, SGM, SGN, split, mode))
    return out


def main():
    shapes = [tuple(map(int, s.split("x"))) for s in (sys.argv[1] if len(sys.argv) > 1 else
                                                     "4096x14336,14336x4096,4096x4096").split(",")]
    ns = [int(n) for n in (sys.argv[2] if len(sys.argv) > 2 else "16,32,64,128,512").split(",")]
    rng = np.random.default_rng(0)
    table = []
    for M, K in shapes:
        raw = weights_raw("q4_0", M, K, rng)
        Q, D = q4_0_planes(raw, M, K)
        copies = max(1, -(-256 * 2**20 // (M * K * 18 // 32)))
        ws = [(pc.asarray(Q, backend=BK_), pc.asarray(D, backend=BK_)) for _ in range(copies)]
        b = raw.reshape(M, K // 32, 18)
        nib = np.concatenate([b[..., 2:] & 15, b[..., 2:] >> 4], -1).astype(np.float64) - 8
        dw = b[..., :2].copy().view(np.float16)[..., 0].astype(np.float64)
        for N in ns:
            tt = torch_times(M, K, N, max(1, -(-256 * 2**20 // (M * K * 2))), 30)
            X = rng.standard_normal((N, K)).astype(np.float32)
            xb = X.reshape(N, K // 32, 32)
            xd = (np.abs(xb).max(-1) / 127).astype(np.float16)
            xq = np.clip(np.round(xb / np.maximum(xd.astype(np.float32), 1e-30)[..., None]),
                         -127, 127).astype(np.int8)
            ref = np.einsum("mbk,nbk,mb,nb->nm", nib, xq.astype(np.float64), dw,
                            xd.astype(np.float64)) if M * K * N <= 4096 * 14336 * 64 else None
            xqa = pc.asarray(xq.reshape(N, K).view(np.uint32).reshape(-1, 4), backend=BK_)
            xda = pc.asarray(xd.reshape(-1), backend=BK_)
            res = []
            # the planes GEMM's default configuration, X f32 rows and f16 rows
            cfg = planes_config(M, N, K)
            BM, BN, BKp = cfg.tile
            Np = -(-N // BN) * BN
            for x_f32 in (True, False):
                xa = pc.asarray(X.reshape(-1, 4) if x_f32 else
                                np.concatenate([X, np.zeros((Np - N, K), np.float32)]).astype(
                                    np.float16).view(np.uint32).reshape(-1, 4), backend=BK_)
                split = cfg.split_k
                mode = "atomic" if split > 1 else "stacked"
                k = gemm_q4_0_planes(BM, BN, BKp, cfg.subgroups, max(1, BN // 64), split_k=split,
                                     split_k_mode=mode, x_rows=True, x_f32=x_f32)
                y = pc.zeros((Np, M), pc.f32, backend=BK_)
                grid = (M // BM, Np // BN, split) if split > 1 else (M // BM, Np // BN)
                t = timed(lambda i: [k[grid](ws[i][0], ws[i][1], xa, y, M, N if x_f32 else Np, K)],
                          copies)
                res.append((t, f"planes default {cfg.tile} sg{cfg.subgroups} split{split} "
                               f"X {'f32' if x_f32 else 'f16'}", float("nan")))
            for (BM, BN, BK, SGM, SGN, split, mode), variant in itertools.product(int8_configs(N), VARIANTS or ["full"]):
                if M % BM or K % (BK * split):
                    continue
                name = f"int8 {variant} BM{BM} BN{BN} BK{BK} sg{SGM}x{SGN} split{split} {mode}"
                try:
                    k = gemm_q4_0_int8(BM, BN, BK, SGM, SGN, split, mode, variant)
                    Np = -(-N // BN) * BN
                    stacked = mode == "stacked" and split > 1
                    y = pc.zeros((Np, M), pc.f32, backend=BK_)
                    p = pc.zeros((split * Np, M), pc.f32, backend=BK_) if stacked else None
                    ss = sum_splits(split) if stacked else None
                    grid = (M // BM, Np // BN, split)

                    def launch(i):
                        out = [k[grid](ws[i][0], ws[i][1], xqa, xda, p if stacked else y, M, N, K)]
                        if ss is not None:
                            out.append(ss[-(-(M * Np // 4) // 256)](p.reshape(-1, 4),
                                                                     y.reshape(-1, 4), M * Np // 4))
                        return out
                    err = float("nan")
                    if ref is not None:
                        y.copy_from(np.zeros(y.shape, np.float32))
                        launch(0)
                        err = float(np.abs(y.numpy()[:N] - ref).max() / np.abs(ref).max())
                    res.append((timed(launch, copies), name, err))
                except Exception as e:                                  # noqa: BLE001
                    res.append((float("inf"), f"{name}: {type(e).__name__}: "
                                f"{str(e).splitlines()[0][:150]}", float("nan")))
            res.sort()
            planes = [r for r in res if r[1].startswith("planes")]
            best = [r for r in res if r[1].startswith("int8")][:4 if not VARIANTS else 99]
            for t, name, err in planes + best:
                line = (f"| {M}x{K} | {N} | {t:.1f} | {tt[0] if tt else float('nan'):.1f} | "
                        f"{(tt[0] / t) if tt else float('nan'):.2f}x | {name} | {err:.1e} |")
                table.append(line)
                print(line, flush=True)
            fails = [n for t, n, _ in res if t == float("inf")]
            if fails:
                print(f"  {len(fails)} failed, e.g. {fails[0]}", flush=True)
    print("\n| M x K | N | µs | torch f16 µs | vs torch | kernel | rel err |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(table))


if __name__ == "__main__":
    main()
