"""Sweep of the planes GEMMs (`gemm_q4_0_planes`, `gemm_q4_k_planes`, `gemm_q8_0_planes`) as
small-N kernels (N = 8 ... 64 vectors) on the activations' own layouts as `matmul_q` runs them
(`x_rows=True, x_f32=True`: X f32 N x K, Y N x M): tile shapes, subgroup layouts and split-K
(stacked + `sum_splits`, or atomic into a zeroed Y), weights rotated through >= 256 MB of
copies, against torch's f16 matmul (cuBLAS, CUDA graph, weights rotated) in the same run.
Atomic split-K times leave out zeroing Y (one vkCmdFillBuffer of M x N floats).

    python3 bench/small_n_sweep.py [--formats q4_0 q4_k] [--ns 8 16 32 64] [--shapes 4096x14336]

`--x f32rows f16rows f16cols`: X as `matmul_q` hands it over (f32 N x K, rounded to f16 as
the GEMM stages it: the default), already f16 N x K (`x_rows` alone), or f16 K x N (neither;
Y M x N): what X's format and layout cost at larger N, where every row tile of W reads all of
X. `--around-default`: only the dispatcher's configuration (`planes_config`); `--tiles
256x4x1x64 ...` (weight rows x subgroups x 1 x depth) and `--bns 32 64` narrow the sweep.

Prints the best configurations per (shape, format, N). Skips (exit 0) without a Vulkan device."""
import argparse
import itertools
import statistics
import sys

import numpy as np

import pycoop as pc
from pycoop.kernels import (gemm_q4_0_planes, gemm_q4_k_planes, gemm_q8_0_planes, q4_0_planes,
                            q4_k_planes, q8_0_planes, quantize_q4_k, quantize_q8_0, sum_splits)
from pycoop.kernels.gemv import BLOCKS, planes_config

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from llm_kernels import CONFIG_WARMUP_S, torch_times  # noqa: E402
from warmup import warm_gpu  # noqa: E402

PLANES = {"q4_0": (gemm_q4_0_planes, q4_0_planes), "q8_0": (gemm_q8_0_planes, q8_0_planes),
          "q4_k": (gemm_q4_k_planes, q4_k_planes)}


def weights_raw(fmt, M, K, rng):
    w = rng.standard_normal((M, K), dtype=np.float32) * np.float32(0.02)
    if fmt == "q4_k":
        return quantize_q4_k(w)
    if fmt == "q8_0":
        return quantize_q8_0(w)
    b = rng.integers(0, 256, (M, K // 32, 18), dtype=np.uint8)
    b[..., :2] = rng.uniform(1e-3, 1e-2, (M, K // 32)).astype(np.float16)[..., None].view(np.uint8)
    return b.reshape(M, -1)


# X's layouts: (x_rows, x_f32) of the GEMM
X_LAYOUTS = {"f32rows": (True, True), "f16rows": (True, False), "f16cols": (False, False)}


def x_operand(X, layout, Np, backend):
    """X (N x K f32) as the GEMM takes it in `layout`, zero rows padding N to Np where the
    layout needs whole tiles (f16)."""
    if layout == "f32rows":
        return pc.asarray(X.reshape(-1, 4), backend=backend)
    Xp = np.zeros((Np, X.shape[1]), np.float16)
    Xp[:len(X)] = X
    if layout == "f16cols":
        Xp = np.ascontiguousarray(Xp.T)
    return pc.asarray(Xp.view(np.uint32).reshape(-1, 4), backend=backend)


def around_default(M, N, K):
    """The dispatcher's configuration for the shape."""
    cfg = planes_config(M, N, K)
    BM, BN, BK = cfg.tile
    return [(BM, BN, BK, cfg.subgroups, max(1, BN // 64), cfg.split_k,
             "atomic" if cfg.split_k > 1 else "stacked")]


TILES = ((64, 4, 1, 64), (128, 4, 1, 64), (64, 2, 1, 64), (128, 2, 2, 64), (128, 2, 1, 64),
         (128, 4, 1, 32), (64, 2, 2, 64), (64, 4, 1, 128), (128, 8, 1, 64), (256, 8, 1, 64))


def candidates(N, modes=("stacked", "atomic"), tiles=TILES, bns=(16, 32, 64)):
    out = []
    for BN in bns:                # narrower tiles than N too: several along the vectors
        if BN > max(16, 2 * N):
            continue
        for BM, SGM, SGN, BK in tiles:
            TN = BN // (16 * SGN)
            if TN < 1 or BM % (16 * SGM):
                continue
            for split, mode in itertools.product((1, 2, 4, 8, 16), modes):
                if split == 1 and mode == "atomic" and "stacked" in modes:
                    continue
                out.append((BM, BN, BK, SGM, SGN, split, mode))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--formats", nargs="+", default=["q4_0", "q4_k"])
    ap.add_argument("--ns", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--shapes", nargs="+", default=["4096x14336", "14336x4096"])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--rotate-mb", type=int, default=256)
    ap.add_argument("--top", type=int, default=4)
    ap.add_argument("--modes", nargs="+", default=["stacked", "atomic"],
                    choices=["stacked", "atomic"], help="split-K modes tried")
    ap.add_argument("--backend", default="vulkan", help="emulator: a check of the script at small sizes")
    ap.add_argument("--x", nargs="+", default=["f32rows"], choices=list(X_LAYOUTS),
                    help="X's format and layout (f32rows: as matmul_q passes it)")
    ap.add_argument("--tiles", nargs="+", default=None, metavar="BMxSGMxSGNxBK",
                    help="only these weight rows x subgroups x depth, e.g. 256x8x1x32")
    ap.add_argument("--bns", type=int, nargs="+", default=[16, 32, 64],
                    help="vectors per tile tried (those up to twice N)")
    ap.add_argument("--around-default", action="store_true",
                    help="only the dispatcher's configuration for each shape and N")
    args = ap.parse_args()
    BK_ = args.backend
    try:
        pc.zeros(1, pc.f32, backend=BK_)
    except Exception as e:                                    # noqa: BLE001
        print(f"skipped: no Vulkan device ({e})")
        return 0
    tiles = tuple(tuple(map(int, t.split("x"))) for t in args.tiles) if args.tiles else TILES
    rng = np.random.default_rng(0)
    rows = []
    for shape in args.shapes:
        M, K = map(int, shape.split("x"))
        for fmt in args.formats:
            gemm, planes = PLANES[fmt]
            raw = weights_raw(fmt, M, K, rng)
            Q, D = planes(raw, M, K)
            nbytes = M * K // BLOCKS[fmt][0] * BLOCKS[fmt][1]
            copies = max(1, -(-args.rotate_mb * 2**20 // nbytes))
            ws = [(pc.asarray(Q, backend=BK_), pc.asarray(D, backend=BK_))
                  for _ in range(copies)]
            for N in args.ns:
                X = rng.standard_normal((N, K)).astype(np.float32)       # rows of vectors
                ref = None
                tt = None
                try:
                    tt = torch_times(M, K, N, max(1, -(-args.rotate_mb * 2**20 // (M * K * 2))), args.repeat)
                except Exception as e:                        # noqa: BLE001
                    print(f"torch: {e}")
                res = []
                configs = (around_default(M, N, K) if args.around_default
                           else candidates(N, tuple(args.modes), tiles, args.bns))
                for (BM, BN, BK, SGM, SGN, split, mode), layout in itertools.product(configs, args.x):
                    Np = -(-N // BN) * BN
                    if M % BM or K % (BK * split):
                        continue
                    name = f"BM{BM} BN{BN} BK{BK} sg{SGM}x{SGN} split{split} {mode} X {layout}"
                    x_rows, x_f32 = X_LAYOUTS[layout]
                    try:
                        xa = x_operand(X, layout, Np, BK_)
                        k = gemm(BM, BN, BK, SGM, SGN, split_k=split, split_k_mode=mode,
                                 x_rows=x_rows, x_f32=x_f32)
                        y = pc.zeros((Np, M) if x_rows else (M, Np), pc.f32, backend=BK_)
                        p = pc.zeros((split * Np, M), pc.f32, backend=BK_) if mode == "stacked" and split > 1 else None
                        grid = (M // BM, Np // BN, split) if split > 1 else (M // BM, Np // BN)
                        ssum = sum_splits(split) if p is not None else None

                        def launch(w):
                            out = []
                            out.append(k[grid](w[0], w[1], xa, p if p is not None else y, M,
                                               N if x_f32 else Np, K))
                            if ssum is not None:
                                out.append(ssum[-(-(M * Np // 4) // 256)](p.reshape(-1, 4), y.reshape(-1, 4), M * Np // 4))
                            return out
                        rt = pc.get_runtime()
                        for i in range(10):
                            launch(ws[i % copies])
                        pc.synchronize()
                        if mode == "atomic":
                            y.copy_from(np.zeros(y.shape, np.float32))
                        launch(ws[0])
                        got = y.numpy()[:N] if x_rows else y.numpy()[:, :N].T
                        if ref is None:
                            from pycoop.kernels import dequantize_q4_k_planes
                            Wf = (dequantize_q4_k_planes(Q, D, M, K) if fmt == "q4_k" else
                                  None)
                            if Wf is None:
                                from gguf.quants import dequantize
                                import gguf
                                Wf = dequantize(raw, gguf.GGMLQuantizationType[fmt.upper()])
                            ref = X.astype(np.float16).astype(np.float64) @ \
                                np.asarray(Wf, np.float32).astype(np.float16).astype(np.float64).T
                        err = np.abs(got - ref).max() / np.abs(ref).max()
                        warm_gpu(CONFIG_WARMUP_S)   # the pipeline's creation and the check idled it
                        with rt.batch():
                            runs = [launch(ws[i % copies]) for i in range(args.repeat)]
                        pc.synchronize()
                        t = statistics.median(sum(r.times_ms[0] for r in run) for run in runs) * 1e3
                        res.append((t, name, err))
                    except Exception as e:                    # noqa: BLE001
                        res.append((float("inf"), f"{name}: "
                                    f"{type(e).__name__}: {str(e).splitlines()[0][:160]}", float("nan")))
                res.sort()
                for t, name, err in res[:args.top]:
                    speed = f"{tt[0] / t:.2f}x" if tt else "-"
                    rows.append(f"| {shape} | {fmt} | {N} | {t:.1f} | {nbytes / t / 1e3:.0f} | "
                                f"{tt[0] if tt else '-':.5} | {speed} | {name} | {err:.1e} |")
                    print(rows[-1], flush=True)
                fails = [n for t, n, _ in res if t == float("inf")]
                if fails:
                    print(f"  {len(fails)} failed, e.g. {fails[0]}", flush=True)
    print("\n| M x K | format | N | µs (rotated) | GB/s | torch f16 µs | vs torch | config | rel err |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
