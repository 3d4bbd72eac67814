"""Matrix-vector and small-N products for LLM token generation on the GPU: pycoop's GEMV
kernels (pycoop.kernels.gemv) over f16, Q8_0, Q4_0 and Q4_K weights against torch's f16
matmul (cuBLAS) measured in the same run.

Y (N x M) = X (N x K) @ W.T at llama-8B's projection shapes M x K = 4096 x 4096, 14336 x 4096
(gate, up) and 4096 x 14336 (down), N = 1, 2, 4, 8, 16, 32, 64.

- pycoop: device time from timestamps around each dispatch. "rotated": each launch reads
  another copy of the weights, cycling through at least --rotate-mb (256 MB: the H100's L2 is
  50 MB, so each launch reads its weights from memory); "warm": every launch on the same
  buffer (L2 holds what fits, the figure llama.cpp's own benchmark reports). The median of
  --repeat launches recorded into one submission (no idle gaps, so the GPU stays at full
  clock), after unmeasured warm-up launches. Each row tries its kernel's default
  configuration and a few others (rows per subgroup, vectors per tile, subgroups per
  workgroup, driver unrolling) and reports the fastest, and which it was. The dispatcher's
  (`choose_kernel`) kernels are the "planes" rows (N >= 2, Q4_0, Q8_0, Q4_K) and, at N = 1,
  `--paths gemv_planes`; the default path's other rows time the GGUF-block float kernel
  (`gemv`, its configuration `gemv_config`).
- torch: f16 `x @ W.T` as GPU time of a CUDA graph of --repeat matmuls (rotated through as
  many weight copies, and on one buffer), divided by the count.
- GB/s: weight bytes per second, against the memory's peak (H100 3.35 TB/s, H200 4.8 TB/s;
  --peak-gbs for other devices).

- the integer path (`--paths q8_1`, Q8_0 and Q4_0 weights): X quantised to 8 bits per
  32-block by `quantize_q8_1`, then `gemv_q8_1` (integer dot products of packed 8-bit lanes,
  tiles of up to 64 vectors reading each weight once). Its µs are the two kernels together
  (each timed on its own, medians added); the config column gives both parts.

Every row is checked against gguf's dequantisation (first rows of the result) when gguf is
installed. A failure of one row (a compile error, a device fault) is reported in its row and
the others still run.

    python3 bench/llm_kernels.py [--quick] [--formats q4_0 q4_k] [--ns 1 16] [--out FILE.md]
    python3 bench/llm_kernels.py --formats q8_0 q4_0 --paths f32 q8_1 --ns 1 4 16 64 \
        --shapes 4096x4096 4096x14336          # both paths, about 2 minutes on an H200
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
import traceback

import numpy as np

import pycoop as pc
from pycoop.kernels import (GemvConfig, choose_kernel, gemm_nv, gemm_q4_0, gemv, gemv_grid, matmul_q,
                            gemv_q8_1, q8_1_error_bound, quantize_grid, quantize_q8_1,
                            quantize_q8_1_reference, weights)
from pycoop.kernels.gemv import BLOCKS, PARTS, gemv_config, q8_1_config
from pycoop.kernels.gemvq import FORMATS_Q8_1
from warmup import warm_gpu
from pycoop.kernels.gemv_planes import (PlanesGemvConfig, fits_shared, gemv_operands,
                                        planes_gemv_config, planes_gemv_reference,
                                        planes_weights)

# before pycoop: the benchmark times the unchecked kernels (bench/unchecked.py)
import unchecked  # noqa: E402,F401

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]
NS = [1, 2, 4, 8, 16, 32, 64]
FORMATS = ["f16", "q8_0", "q4_0", "q4_k"]
PEAK_GBS = {"H100": 3350.0, "H200": 4800.0}     # HBM3 / HBM3e, by device name
WARMUP = 50
CONFIG_WARMUP_S = 0.25      # the GPU kept busy before each configuration is timed



def note_error(errors: list, what, e: Exception, verbose: bool) -> None:
    """Record why a configuration failed (its first line), with the traceback if verbose."""
    errors.append(f"{what}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    if verbose:
        traceback.print_exc()


def failed_row(M: int, K: int, fmt: str, N: int, errors: list) -> str:
    """The table row of a shape where no configuration ran."""
    return f"| {M}x{K} | {fmt} | {N} | FAILED: {'; '.join(errors)[:300]} |"

def random_weights(fmt: str, M: int, K: int, seed: int = 0) -> np.ndarray:
    """An M x K matrix in `fmt` as GGUF stores it: random blocks (every byte pattern is a valid
    quantised value) with small positive f16 scales, so that sums stay finite."""
    rng = np.random.default_rng(seed)
    if fmt == "f16":
        return (rng.standard_normal((M, K), np.float32) * 0.02).astype(np.float16)
    qk, size = BLOCKS[fmt]
    b = rng.integers(0, 256, (M * K // qk, size), dtype=np.uint8)
    nscale = 2 if fmt == "q4_k" else 1                   # d (and dmin for Q4_K)
    b[:, :2 * nscale] = rng.uniform(1e-3, 1e-2, (b.shape[0], nscale)).astype(np.float16).view(np.uint8)
    return b.reshape(M, -1)


def configs(fmt: str, N: int, quick: bool) -> list[GemvConfig]:
    """The GGUF-block float kernel's default first (`gemv_config`: the dispatcher takes
    gemv_planes at N = 1 and the planes GEMM from 2 vectors where the shape fits, timed in
    their own rows), then the variants tried."""
    first = gemv_config(fmt, N)
    if quick:
        return [first]
    if N == 1:
        shapes = [(1, 1, 4), (2, 1, 4), (4, 1, 2), (2, 1, 8), (1, 1, 8), (4, 1, 4)]
    else:
        t8, t16 = min(N, 8), min(N, 16)
        shapes = [(1, t8, 4), (4, t8, 2), (2, t16, 2), (4, t16, 1), (1, t16, 4), (2, min(N, 32), 1)]
    out = [first] + [GemvConfig("gemv", first.rows, first.nt, first.subgroups, u) for u in (2, 4)]
    if fmt != "f16":                                      # lanes per block
        out += [GemvConfig("gemv", first.rows, first.nt, first.subgroups, parts=p)
                for p in (1, 2, 4, 8) if p != PARTS[fmt] and not (fmt == "q4_0" and p == 8)]
    for r, t, s in shapes:
        c = GemvConfig("gemv", r, t, s)
        if c not in out and r * t <= 64:
            out.append(c)
    return out


def configs_q8_1(fmt: str, N: int, quick: bool) -> list[GemvConfig]:
    """The GGUF-block integer kernel: its default first (the dispatcher now takes
    gemv_planes up to 8 vectors), then lanes per block and tile shapes."""
    first = q8_1_config(N)
    if quick:
        return [first]
    out = [first]
    for p in (1, 2, 4):
        out.append(GemvConfig("q8_1", first.rows, first.nt, first.subgroups, parts=p))
    if N > 1:
        nt = first.nt
        out += [GemvConfig("q8_1", 1, nt, 4, parts=1), GemvConfig("q8_1", 4, min(nt, 16), 2, parts=1),
                GemvConfig("q8_1", 2, min(nt, 8), 4, parts=1 if nt > 4 else 2)]
    else:
        out += [GemvConfig("q8_1", 4, 1, 2, parts=4), GemvConfig("q8_1", 1, 1, 8, parts=2)]
    seen, uniq = set(), []
    for c in out:
        if c not in seen and c.rows * c.nt <= 64 and not (fmt == "q4_0" and c.parts == 8):
            seen.add(c)
            uniq.append(c)
    return uniq


INT_OPS = ("OpBitwiseAnd", "OpBitwiseOr", "OpBitwiseXor", "OpShiftRightLogical",
           "OpShiftLeftLogical", "OpIAdd", "OpIMul", "OpISub", "OpSelect", "OpUDiv", "OpUMod",
           "OpIEqual", "OpULessThan", "OpSDot", "OpSUDot", "OpConvertSToF")
FLOAT_OPS = ("OpFAdd", "OpFSub", "OpFMul", "OpFConvert", "OpExtInst")      # OpExtInst: Fma


def instruction_mix(fmt: str, cfg: GemvConfig) -> str:
    """Static counts of the SPIR-V instructions in the kernel's K loop, per weight a lane
    handles in one iteration (rows x its share of a unit): loads, integer and float ops, the
    float ops also per weight and vector."""
    import collections
    if cfg.kind == "q8_1":
        ck = gemv_q8_1(fmt, cfg.rows, cfg.nt, cfg.subgroups, 32, cfg.parts).compile()
    else:
        ck = gemv(fmt, cfg.rows, cfg.nt, cfg.subgroups, parts=cfg.parts).compile()
    asm = [ln for ln in ck.spvasm.splitlines() if ln.strip() and not ln.startswith(";")]
    head = next(i for i, ln in enumerate(asm) if "OpLoopMerge" in ln)
    merge = asm[head].split()[1]
    end = next(i for i, ln in enumerate(asm) if ln.split()[:3] == [merge, "=", "OpLabel"])
    ops = collections.Counter(ln.split()[2] if " = " in ln else ln.split()[0] for ln in asm[head:end])
    P = cfg.parts or PARTS[fmt]
    per = cfg.rows * {"q4_0": 32, "q8_0": 32, "q4_k": 64, "f16": 8}[fmt] // P
    n = lambda names: sum(ops[o] for o in names) / per                         # noqa: E731
    dots = sum(ops[o] for o in ("OpSDot", "OpSUDot"))
    if cfg.kind == "q8_1":
        return (f"{fmt} q8_1 (rows {cfg.rows}, nt {cfg.nt}, parts {P}): per weight "
                f"{n(('OpLoad',)):.2f} loads, {n(INT_OPS):.2f} integer ops ({dots / per:.3f} dot4x8), "
                f"{n(FLOAT_OPS):.2f} float ops ({n(INT_OPS) / cfg.nt:.2f} integer ops per weight and vector)")
    return (f"{fmt} (rows {cfg.rows}, nt {cfg.nt}, parts {P}): per weight {n(('OpLoad',)):.2f} "
            f"loads, {n(INT_OPS):.2f} integer ops, {n(FLOAT_OPS):.2f} float ops "
            f"({n(FLOAT_OPS) / cfg.nt:.2f} per weight and vector)")


def median_us(results) -> float:
    return statistics.median(t for r in results for t in r.times_ms) * 1e3


def table_row(lines: list, args, M: int, K: int, fmt: str, N: int, rot: float, warm: float,
              nbytes: int, tt, config: str, status: str, note: str = "") -> None:
    """Append and print one row of the table: pycoop's rotated and warm µs, GB/s of `nbytes`
    against the peak, torch's (rotated, warm) µs `tt` or "-", and the speed-up."""
    gbs = nbytes / (rot * 1e-6) / 1e9
    t_rot, t_warm = (f"{tt[0]:.1f}", f"{tt[1]:.1f}") if tt else ("-", "-")
    speed = f"{tt[0] / rot:.2f}x" if tt else "-"
    lines.append(f"| {M}x{K} | {fmt} | {N} | {rot:.1f} | {gbs:.0f} ({100 * gbs / args.peak_gbs:.0f}%) "
                 f"| {warm:.1f} | {t_rot} | {t_warm} | {speed} | {config} | {status} |" + note)
    print(lines[-1], flush=True)


def time_pycoop(launch, ws: list, repeat: int) -> tuple[float, float]:
    """(rotated µs, warm µs): medians of `repeat` launches `launch(w)` cycling through the
    weight copies `ws`, and of `repeat` launches on ws[0], after a short clock warm-up (the
    configuration's pipeline was just created, with the GPU idle)."""
    rt = pc.get_runtime()
    warm_gpu(CONFIG_WARMUP_S)
    with rt.batch():
        for i in range(WARMUP):
            launch(ws[i % len(ws)])
    with rt.batch():
        rot = [launch(ws[i % len(ws)]) for i in range(repeat)]
    with rt.batch():
        warm = [launch(ws[0]) for _ in range(repeat)]
    pc.synchronize()
    return median_us(rot), median_us(warm)


def time_planes(M: int, K: int, fmt: str, N: int, W: np.ndarray, copies: int, repeat: int,
                dtype=np.float32):
    """(rotated µs, warm µs, config, check) of `matmul_q`'s planes path on device arrays (the
    dispatcher's choice for N >= 2) with X of `dtype` (f32 or f16): the device time of its
    launch (Y's zeroing is a fill, not timed), weights rotated through `copies`
    GGMLWeights."""
    cfg = choose_kernel(fmt, N, M=M, K=K)
    if cfg.kind != "planes":
        return None
    Wqs = [weights(W, fmt) for _ in range(copies)]
    X = np.random.default_rng(N).standard_normal((N, K)).astype(dtype)
    x = pc.asarray(X, backend="vulkan")

    def run(w):
        out = []
        matmul_q(w, x, launches=out)
        return out

    rt = pc.get_runtime()
    warm_gpu(CONFIG_WARMUP_S)
    with rt.batch():
        for i in range(WARMUP):
            run(Wqs[i % copies])
    with rt.batch():
        rot = [run(Wqs[i % copies]) for i in range(repeat)]
    with rt.batch():
        warm = [run(Wqs[0]) for _ in range(repeat)]
    pc.synchronize()
    total = lambda runs: statistics.median(sum(r.times_ms[0] for r in run_) for run_ in runs) * 1e3  # noqa: E731
    y = matmul_q(Wqs[0], x).numpy()
    status = check(fmt, W, X.astype(np.float16).astype(np.float32), y, 2e-3)
    name = (f"planes {cfg.tile[0]}x{cfg.tile[1]}x{cfg.tile[2]} split{cfg.split_k} "
            f"X {np.dtype(dtype).name}")
    return total(rot), total(warm), name, status


def coopmat_candidates(fmt: str, N: int, quick: bool) -> list[tuple]:
    """The cooperative-matrix GEMMs tried as small-N kernels (N >= 8; tensor cores instead of
    f32 FMAs, at the cost of tiles of at least 16 vectors): gemm_q4_0 on the GGUF blocks
    (weights as the A operand) and gemm_nv on f16 weights. (name, kernel, grid)."""
    if N < 8 or fmt not in ("q4_0", "f16") or quick:
        return []
    # the vector side of the tile: NVIDIA lists workgroup-scope matrices at 256 invocations
    # in multiples of 32 only (16-wide tiles raise BackendUnavailable there)
    bn = next(t for t in (32, 64) if N <= t)
    out = []
    for bw in (64, 128, 256):                         # the weight side
        for bk in (32, 64):
            if fmt == "q4_0":
                out.append((f"gemm_q4_0 {bw}x{bn}x{bk}", gemm_q4_0(bn, bw, bk, 256, weights_first=True),
                            None, bn, bw))
            else:
                out.append((f"gemm_nv {bw}x{bn}x{bk}", gemm_nv(bw, bn, bk, 256), None, bw, bn))
    return out


def torch_times(M: int, K: int, N: int, copies: int, repeat: int):
    """(rotated µs, warm µs) of torch's f16 x @ W.T in CUDA graphs, or None without CUDA."""
    try:
        import torch
        if not torch.cuda.is_available():
            return None
    except ImportError:
        return None
    W = [torch.randn(M, K, device="cuda", dtype=torch.float16) * 0.02 for _ in range(copies)]
    x = torch.randn(N, K, device="cuda", dtype=torch.float16)
    out = torch.empty(N, M, device="cuda", dtype=torch.float16)

    def graph_us(order: list) -> float:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):                     # warm-up outside the capture (cuBLAS)
            for w in order[:3]:
                torch.matmul(x, w.T, out=out)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for w in order:
                torch.matmul(x, w.T, out=out)
        for _ in range(3):
            g.replay()
        times = []
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1e3 / len(order))
        return statistics.median(times)

    rot = graph_us([W[i % copies] for i in range(repeat)])
    warm = graph_us([W[0]] * repeat)
    del W
    torch.cuda.empty_cache()
    return rot, warm


def torch_times_or_none(M: int, K: int, N: int, args, errors: list | None = None):
    """torch_times with the rotation of --rotate-mb, or None (the error noted) on failure."""
    try:
        return torch_times(M, K, N, max(1, -(-args.rotate_mb * 2**20 // (M * K * 2))), args.repeat)
    except Exception as e:                                  # noqa: BLE001
        if errors is not None:
            errors.append(f"torch: {type(e).__name__}: {e}")
        return None


def check(fmt: str, W: np.ndarray, X: np.ndarray, y: np.ndarray, tol: float = 1e-4) -> str:
    """Compare the first 64 rows of Y with gguf's dequantisation (if installed); `tol`
    relative to the largest value (f16 products in the cooperative-matrix GEMMs)."""
    try:
        import gguf
    except ImportError:
        return "unchecked"
    rows = W[:64]
    Wf = rows if fmt == "f16" else gguf.quants.dequantize(rows, gguf.GGMLQuantizationType[fmt.upper()])
    ref = X.astype(np.float64) @ np.asarray(Wf, np.float64).T
    err = float(np.abs(y[:, :64] - ref).max() / max(np.abs(ref).max(), 1e-30))
    return "ok" if err < tol else f"ERR {err:.1e}"


def bench_shape(M: int, K: int, args, lines: list) -> None:
    torch_cache: dict = {}
    for fmt in args.formats:
        try:
            W = random_weights(fmt, M, K)
            Wq = weights(W, None if fmt == "f16" else fmt)
            host = Wq.kernel_array()
            copies = max(1, -(-args.rotate_mb * 2**20 // Wq.nbytes))
            ws = [pc.asarray(host, backend="vulkan") for _ in range(copies)]
        except Exception as e:                              # noqa: BLE001 (reported, not fatal)
            lines.append(f"| {M}x{K} | {fmt} | all | FAILED to prepare: {type(e).__name__}: {e} |")
            print(lines[-1], flush=True)
            continue
        blocks: dict = {}
        for N in args.ns:
            if "q8_1" in args.paths and fmt in FORMATS_Q8_1 and "f32" not in args.paths:
                if (N, M, K) not in torch_cache:
                    torch_cache[N, M, K] = torch_times_or_none(M, K, N, args)
                bench_q8_1(M, K, fmt, N, W, Wq, ws, args, torch_cache, lines)
                continue
            X = np.random.default_rng(N).standard_normal((N, K)).astype(np.float32)
            x = pc.asarray(X.reshape(-1, 4), backend="vulkan")
            y = pc.zeros((N, M), pc.f32, backend="vulkan")
            best, errors = None, []
            for cfg in configs(fmt, N, args.quick):
                try:
                    k = gemv(fmt, cfg.rows, cfg.nt, cfg.subgroups, args.subgroup_size, 8, cfg.unroll,
                             cfg.parts)
                    grid = gemv_grid(M, N, cfg.rows, cfg.nt, cfg.subgroups)
                    rot, warm = time_pycoop(lambda w: k[grid](w, x, y, M, N, K), ws, args.repeat)
                    if best is None or rot < best[1]:
                        best = (cfg, rot, warm)
                except Exception as e:                      # noqa: BLE001
                    note_error(errors, cfg, e, args.verbose)
            best_cm = None
            for name, k, _, ta, tb in coopmat_candidates(fmt, N, args.quick):
                try:
                    if fmt not in blocks:                   # the weights as the GEMMs read them
                        raw = np.ascontiguousarray(W).reshape(-1)
                        blocks[fmt] = [pc.asarray(raw, backend="vulkan") for _ in ws]
                    wb = blocks[fmt]
                    if fmt == "q4_0":                       # Y (N x M) = X (f16) @ W.T
                        xh = pc.asarray(X.astype(np.float16), backend="vulkan")
                        yc = pc.zeros((N, M), pc.f32, backend="vulkan")
                        grid = (-(-N // ta), -(-M // tb))
                        launch = lambda w: k[grid](xh, w, yc, N, M, K)          # noqa: E731
                    else:                                   # Y.T (M x N) = W @ X.T
                        xh = pc.asarray(np.ascontiguousarray(X.T.astype(np.float16)), backend="vulkan")
                        yc = pc.zeros((M, N), pc.f32, backend="vulkan")
                        grid = (-(-M // ta), -(-N // tb))
                        launch = lambda w: k[grid](w, xh, yc, M, N, K)          # noqa: E731
                    rot, warm = time_pycoop(launch, wb, args.repeat)
                    if best_cm is None or rot < best_cm[1]:
                        launch(wb[0])
                        yv = yc.numpy() if fmt == "q4_0" else yc.numpy().T
                        best_cm = (name, rot, warm, check(fmt, W, X.astype(np.float16).astype(np.float32),
                                                          yv, 2e-3))
                except Exception as e:                      # noqa: BLE001
                    note_error(errors, name, e, args.verbose)
            if best is None:
                lines.append(failed_row(M, K, fmt, N, errors))
                print(lines[-1], flush=True)
                continue
            cfg, rot, warm = best
            k = gemv(fmt, cfg.rows, cfg.nt, cfg.subgroups, args.subgroup_size, 8, cfg.unroll,
                     cfg.parts)
            k[gemv_grid(M, N, cfg.rows, cfg.nt, cfg.subgroups)](ws[0], x, y, M, N, K)
            status = check(fmt, W, X, y.numpy())
            if (N, M, K) not in torch_cache:
                torch_cache[N, M, K] = torch_times_or_none(M, K, N, args, errors)
            tt = torch_cache[N, M, K]
            c = f"r{cfg.rows} nt{cfg.nt} sg{cfg.subgroups}" + (f" u{cfg.unroll}" if cfg.unroll else "") \
                + (f" p{cfg.parts}" if cfg.parts else "")
            table_row(lines, args, M, K, fmt, N, rot, warm, Wq.nbytes, tt, c, status,
                      f" {len(errors)} config(s) failed" if errors else "")
            if best_cm is not None:
                name, crot, cwarm, cstatus = best_cm
                table_row(lines, args, M, K, fmt, N, crot, cwarm, Wq.nbytes, tt, name, cstatus)
            for dtype in args.planes_x:
                try:
                    planes = time_planes(M, K, fmt, N, W, len(ws), args.repeat,
                                         np.dtype(dtype)) if fmt != "f16" else None
                except Exception as e:                      # noqa: BLE001
                    planes = None
                    note_error(errors, "planes", e, args.verbose)
                if planes is not None:
                    prot, pwarm, pname, pstatus = planes
                    table_row(lines, args, M, K, fmt, N, prot, pwarm, Wq.nbytes, tt, pname,
                              pstatus)
            for e in errors:
                print(f"    {e}", flush=True)
            if "q8_1" in args.paths and fmt in FORMATS_Q8_1:
                bench_q8_1(M, K, fmt, N, W, Wq, ws, args, torch_cache, lines)
        del ws, blocks
        pc.synchronize()


def bench_q8_1(M: int, K: int, fmt: str, N: int, W: np.ndarray, Wq, ws: list, args,
               torch_cache: dict, lines: list) -> None:
    """One row of the integer path: the quantiser and the fastest gemv_q8_1 configuration,
    timed each on its own (rotated weights for the GEMV), checked against gguf within the
    quantisation bound."""
    X = np.random.default_rng(N).standard_normal((N, K)).astype(np.float32)
    nb = N * K // 32
    x = pc.asarray(X.reshape(-1, 4), backend="vulkan")
    d, s = pc.zeros(nb, pc.f32, backend="vulkan"), pc.zeros(nb, pc.i32, backend="vulkan")
    q = pc.zeros(nb * 8, pc.u32, backend="vulkan")
    y = pc.zeros((N, M), pc.f32, backend="vulkan")
    quant = quantize_q8_1("f32", 4, args.subgroup_size)
    qgrid = quantize_grid(nb, 4, args.subgroup_size)
    errors, best = [], None
    try:
        tq, _ = time_pycoop(lambda w: quant[qgrid](x, q, d, s, nb), [None], args.repeat)
    except Exception as e:                                  # noqa: BLE001
        lines.append(f"| {M}x{K} | {fmt} q8_1 | {N} | FAILED: quantize_q8_1: {type(e).__name__}: {e} |")
        print(lines[-1], flush=True)
        return
    for cfg in configs_q8_1(fmt, N, args.quick):
        try:
            k = gemv_q8_1(fmt, cfg.rows, cfg.nt, cfg.subgroups, args.subgroup_size, cfg.parts)
            qv = q.reshape(-1, 4) if cfg.parts == 1 else q
            grid = gemv_grid(M, N, cfg.rows, cfg.nt, cfg.subgroups)
            rot, warm = time_pycoop(lambda w: k[grid](w, qv, d, s, y, M, N, K), ws, args.repeat)
            if best is None or rot < best[1]:
                best = (cfg, rot, warm)
        except Exception as e:                              # noqa: BLE001
            note_error(errors, cfg, e, args.verbose)
    if best is None:
        lines.append(failed_row(M, K, fmt + " q8_1", N, errors))
        print(lines[-1], flush=True)
        return
    cfg, rot, warm = best
    k = gemv_q8_1(fmt, cfg.rows, cfg.nt, cfg.subgroups, args.subgroup_size, cfg.parts)
    quant[qgrid](x, q, d, s, nb)
    k[gemv_grid(M, N, cfg.rows, cfg.nt, cfg.subgroups)](
        ws[0], q.reshape(-1, 4) if cfg.parts == 1 else q, d, s, y, M, N, K)
    status = check_q8_1(fmt, W, X, y.numpy())
    tt = torch_cache.get((N, M, K))
    c = (f"q8_1 r{cfg.rows} nt{cfg.nt} sg{cfg.subgroups} p{cfg.parts}: gemv {rot:.1f} + "
         f"quantise {tq:.1f}")
    table_row(lines, args, M, K, f"{fmt} q8_1", N, rot + tq, warm + tq, Wq.nbytes, tt, c, status,
              f" {len(errors)} config(s) failed" if errors else "")
    for e in errors:
        print(f"    {e}", flush=True)


def gemv_planes_candidates(fmt: str, N: int, K: int, quick: bool,
                           kinds: list | None = None) -> list[PlanesGemvConfig]:
    """`gemv_planes` configurations tried: the default first and its twin with weight
    prefetching switched (the two with `quick`), then rows per subgroup, blocks per lane and
    step (span), subgroups per workgroup, the driver's unrolling and subgroups sharing rows
    (split), for x in f32, f16 and (quantised formats) q8_1 and q8_1_shared (the quantiser in
    the kernel, weights prefetched: workgroups of 8 to 32 rows, or up to 128 with kgroups
    (these also without prefetching), so that each quantises X for many rows), or the x kinds
    in `kinds`."""
    xs = ["f32", "f16"] if fmt == "f16" else ["f32", "f16", "q8_1", "q8_1_shared"]
    xs = [x for x in xs if kinds is None or x in kinds]
    out = []
    for x in xs:
        first = planes_gemv_config(fmt, N, x, K)
        if x == "q8_1_shared":
            if fits_shared(K // first.kgroups, first.nt):
                out += [first, dataclasses.replace(first, prefetch=not first.prefetch)]
            if not quick:     # (rows, subgroups, split, span): 8 to 32 rows per workgroup
                out += [PlanesGemvConfig(x, r, first.nt, sg, sp, None, split, 1, True)
                        for r, sg, split, sp in ((2, 8, 2, 1), (4, 8, 2, 1), (2, 16, 2, 1),
                                                 (4, 16, 4, 1), (8, 8, 2, 1), (4, 8, 1, 1),
                                                 (4, 16, 2, 1), (8, 16, 4, 1), (2, 16, 4, 1),
                                                 (4, 8, 4, 1), (1, 16, 2, 1), (4, 8, 2, 2))
                        if fits_shared(K, first.nt)]
                # workgroups sharing K (kgroups): 16 to 128 rows per workgroup, each
                # quantising only its stretch of X
                shapes = ((2, 16, 2, 2), (4, 16, 1, 4), (4, 16, 2, 4), (2, 16, 1, 4),
                          (4, 8, 1, 4), (8, 16, 2, 4), (8, 16, 1, 8), (4, 16, 1, 8),
                          (4, 16, 2, 8), (8, 8, 1, 8), (2, 16, 2, 4), (4, 16, 1, 2))
                out += [PlanesGemvConfig(x, r, first.nt, sg, 1, None, split, kg, pf)
                        for pf in (True, False) for r, sg, split, kg in shapes
                        if K % (32 * kg) == 0 and fits_shared(K // kg, first.nt)]
            continue
        out += [first, dataclasses.replace(first, prefetch=not first.prefetch)]  # and its twin
        if quick:
            continue
        nt = first.nt
        if N == 1:
            shapes = [(r, 1, sg, sp) for r in (1, 2, 4) for sp in (1, 2, 4) for sg in (4, 8)
                      if r * sp <= 8]
        else:
            shapes = [(r, nt, sg, sp) for r in (1, 2, 4) for sp in (1, 2) for sg in (2, 4)
                      if r * nt * sp <= 32]
        for r, t, sg, sp in shapes:
            out.append(PlanesGemvConfig(x, r, t, sg, sp))
        out += [PlanesGemvConfig(x, first.rows, nt, first.subgroups, first.span, u) for u in (2, 4)]
        out += [PlanesGemvConfig(x, r, nt, sg, sp, None, split) for r in (1, 2, 4)
                for sp in (1, 2) for sg in (4, 8) for split in (2, 4)
                if r * nt * sp <= 32]
    seen, uniq = set(), []
    for c in out:
        if c not in seen:
            seen.add(c)
            uniq.append(c)
    return uniq


def bench_gemv_planes(M: int, K: int, args, lines: list) -> None:
    """Rows of `gemv_planes` (N <= 8): every candidate configuration timed with the planes
    rotated through >= --rotate-mb of copies (the q8_1 rows add the quantiser's median time),
    the fastest per x kind in the table, each checked against gguf (q8_1: within the
    quantisation bound)."""
    for fmt in args.formats:
        W = random_weights(fmt, M, K)
        planes = gemv_operands(weights(W, None if fmt == "f16" else fmt))   # (Q, D) on the host
        pbytes = sum(a.nbytes for a in planes)
        copies = max(1, -(-args.rotate_mb * 2**20 // pbytes))
        ws = [tuple(pc.asarray(a, backend="vulkan") for a in planes) for _ in range(copies)]
        for N in [n for n in args.ns if n <= 8]:
            X = np.random.default_rng(N).standard_normal((N, K)).astype(np.float32)
            x = pc.asarray(X.reshape(-1, 4), backend="vulkan")
            X16 = X.astype(np.float16)          # x="f16": X rounded to f16, read as halves
            x16 = pc.asarray(X16.reshape(-1).view(np.uint32).reshape(-1, 4), backend="vulkan")
            y = pc.zeros((N, M), pc.f32, backend="vulkan")
            nb = N * K // 32
            xq = pc.zeros((nb * 2, 4), pc.u32, backend="vulkan")
            xd, xs = pc.zeros(nb, pc.f32, backend="vulkan"), pc.zeros(nb, pc.i32, backend="vulkan")
            quant = quantize_q8_1("f32", 4, args.subgroup_size)
            qgrid = quantize_grid(nb, 4, args.subgroup_size)
            tq = None
            best: dict = {}
            errors: list = []
            for cfg in gemv_planes_candidates(fmt, N, K, args.quick, args.x):
                try:
                    k, grid = cfg.kernel(fmt, args.subgroup_size, K), cfg.grid(M, N)
                    if cfg.x == "q8_1_shared":
                        launch = lambda w: k[grid](w[0], w[1], x, y, M, N)             # noqa: E731
                        extra = 0.0
                    elif cfg.x != "q8_1":
                        xx = x if cfg.x == "f32" else x16
                        launch = lambda w: k[grid](w[0], w[1], xx, y, M, N, K)         # noqa: E731
                        extra = 0.0
                    else:
                        if tq is None:
                            tq, _ = time_pycoop(lambda w: quant[qgrid](x, xq.reshape(-1), xd, xs, nb),
                                                [None], args.repeat)
                        launch = lambda w: k[grid](w[0], w[1], xq, xd, xs, y, M, N, K)  # noqa: E731
                        extra = tq
                    rot, warm = time_pycoop(launch, ws, args.repeat)
                    print(f"    gemv_planes {M}x{K} {fmt} N={N} {cfg}: {rot:.1f} (+{extra:.1f}) µs "
                          f"rotated, {warm:.1f} warm", flush=True)
                    if cfg.x not in best or rot + extra < best[cfg.x][1]:
                        best[cfg.x] = (cfg, rot + extra, warm + extra, rot)
                except Exception as e:                          # noqa: BLE001
                    note_error(errors, cfg, e, args.verbose)
            if (N, M, K) not in args.torch_cache:
                args.torch_cache[N, M, K] = torch_times_or_none(M, K, N, args, errors)
            tt = args.torch_cache[N, M, K]
            for xk, (cfg, rot, warm, krot) in best.items():
                k, grid = cfg.kernel(fmt, args.subgroup_size, K), cfg.grid(M, N)
                if xk == "q8_1_shared":
                    y = pc.zeros((N, M), pc.f32, backend="vulkan")   # kgroups add into Y
                    k[grid](ws[0][0], ws[0][1], x, y, M, N)
                    status = check_planes_q8_1(fmt, W, X, y.numpy())
                elif xk != "q8_1":
                    k[grid](ws[0][0], ws[0][1], x if xk == "f32" else x16, y, M, N, K)
                    status = check(fmt, W, X if xk == "f32" else X16.astype(np.float32),
                                   y.numpy(), 1e-4)
                else:
                    quant[qgrid](x, xq.reshape(-1), xd, xs, nb)
                    k[grid](ws[0][0], ws[0][1], xq, xd, xs, y, M, N, K)
                    status = check_planes_q8_1(fmt, W, X, y.numpy())
                c = (f"gemv_planes x={xk} r{cfg.rows} nt{cfg.nt} sg{cfg.subgroups} span{cfg.span}"
                     + (f" u{cfg.unroll}" if cfg.unroll else "")
                     + (f" split{cfg.split}" if cfg.split > 1 else "")
                     + (f" kg{cfg.kgroups}" if cfg.kgroups > 1 else "")
                     + (" prefetch" if cfg.prefetch else "")
                     + (f": kernel {krot:.1f} + quantise {rot - krot:.1f}" if xk == "q8_1" else ""))
                table_row(lines, args, M, K, fmt, N, rot, warm, pbytes, tt, c, status)
            for e in errors:
                print(f"    {e}", flush=True)
        del ws
        pc.synchronize()


def check_planes_q8_1(fmt: str, W: np.ndarray, X: np.ndarray, y: np.ndarray) -> str:
    """gemv_planes with x="q8_1", first 64 rows: against its NumPy twin (the same quantised
    activations; f32 roundings only) and against the float product of the planes' weights
    within the quantisation bound."""
    from pycoop.kernels import q8_1_error_bound, quantize_q8_1_reference
    rows = weights(W[:64], fmt)
    q8 = quantize_q8_1_reference(X)
    twin = planes_gemv_reference(rows, q8=q8)
    exact = float(np.abs(y[:, :64] - twin).max() / max(np.abs(twin).max(), 1e-30))
    Wf = planes_weights(rows)
    ref = X.astype(np.float64) @ Wf.T
    bound = q8_1_error_bound(Wf, q8[1]) + 1e-5 * np.abs(ref).max()
    excess = float((np.abs(y[:, :64] - ref) / bound).max())
    ok = exact < 1e-4 and excess <= 1
    return f"{'ok' if ok else 'ERR'} (twin {exact:.0e}, {excess:.2f} of bound)"


def check_q8_1(fmt: str, W: np.ndarray, X: np.ndarray, y: np.ndarray) -> str:
    """The first 64 rows of the integer path's Y against gguf's float reference, within the
    bound of X's quantisation (plus f32 summation)."""
    try:
        import gguf
    except ImportError:
        return "unchecked"
    Wf = gguf.quants.dequantize(W[:64], gguf.GGMLQuantizationType[fmt.upper()])
    ref = X.astype(np.float64) @ np.asarray(Wf, np.float64).T
    bound = q8_1_error_bound(Wf, quantize_q8_1_reference(X)[1]) + 1e-5 * np.abs(ref).max()
    excess = float((np.abs(y[:, :64] - ref) / bound).max())
    return f"ok ({excess:.2f} of bound)" if excess <= 1 else f"ERR {excess:.2f}x the bound"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="each kernel's default configuration only, N = 1, 16, 64")
    p.add_argument("--formats", nargs="+", default=FORMATS, choices=FORMATS)
    p.add_argument("--paths", nargs="+", default=["f32"], choices=["f32", "q8_1", "gemv_planes"],
                   help="f32: the float kernels (every format); q8_1: the integer path (Q8_0, "
                        "Q4_0: X quantised to 8 bits, integer dot products); gemv_planes: "
                        "gemv_planes over the weight planes, N <= 8, x in f32, f16 and q8_1 "
                        "(GB/s counted on the planes' bytes)")
    p.add_argument("--ns", nargs="+", type=int, default=None)
    p.add_argument("--x", nargs="+", default=None,
                   choices=["f32", "f16", "q8_1", "q8_1_shared"],
                   help="gemv_planes: only these activation kinds (default: all)")
    p.add_argument("--planes-x", nargs="+", default=["float32"], choices=["float32", "float16"],
                   help="the planes path (N >= 2) with X of each of these types")
    p.add_argument("--shapes", nargs="+", default=None, help="MxK, e.g. 4096x14336")
    p.add_argument("--repeat", type=int, default=100)
    p.add_argument("--rotate-mb", type=int, default=256)
    p.add_argument("--out", default=None, help="also write the table (markdown) here")
    p.add_argument("--subgroup-size", type=int, default=32, help="the device's (8 on lavapipe)")
    p.add_argument("--verbose", action="store_true", help="tracebacks of failed configurations")
    p.add_argument("--peak-gbs", type=float, default=None,
                   help="the memory's peak GB/s (default: by device name, else the H100's)")
    args = p.parse_args()
    if args.ns is None:
        args.ns = [1, 16, 64] if args.quick else NS
    shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes] if args.shapes else SHAPES
    try:
        from pycoop.runtime.vulkan import get_runtime
        dev = get_runtime().capabilities.device_name
    except Exception as e:                                   # noqa: BLE001
        sys.exit(f"no Vulkan device: {e}")
    if args.peak_gbs is None:
        args.peak_gbs = next((v for k, v in PEAK_GBS.items() if k in dev), PEAK_GBS["H100"])
    head = [f"| M x K | format | N | pycoop rotated µs | GB/s (of {args.peak_gbs / 1000:.2f} TB/s) | pycoop warm µs | "
            "torch f16 rotated µs | torch f16 warm µs | vs torch rotated | config | check |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    print(f"# {dev}, {time.strftime('%Y-%m-%d %H:%M')}, rotation through >= {args.rotate_mb} MB")
    mix = []
    for fmt in args.formats:
        for n in sorted({1, max(args.ns)}):
            try:
                if "f32" in args.paths:
                    mix.append(instruction_mix(fmt, gemv_config(fmt, n)))
                if "q8_1" in args.paths and fmt in FORMATS_Q8_1:
                    mix.append(instruction_mix(fmt, q8_1_config(n)))
            except Exception as e:                          # noqa: BLE001
                mix.append(f"{fmt}: instruction mix failed: {type(e).__name__}: {e}")
    print("SPIR-V instruction mix of the GGUF-block GEMV kernels:\n  " + "\n  ".join(mix))
    warm_gpu()
    print("\n".join(head), flush=True)
    lines: list[str] = []
    args.torch_cache = {}
    for M, K in shapes:
        try:
            if "gemv_planes" in args.paths:
                bench_gemv_planes(M, K, args, lines)
            if set(args.paths) - {"gemv_planes"}:
                bench_shape(M, K, args, lines)
        except Exception as e:                               # noqa: BLE001
            lines.append(f"| {M}x{K} | all | all | FAILED: {type(e).__name__}: {e} |")
            print(lines[-1], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(f"# LLM kernels, {dev}, {time.strftime('%Y-%m-%d')}\n\n"
                    + "".join(f"- {m}\n" for m in mix) + "\n" + "\n".join(head + lines) + "\n")


if __name__ == "__main__":
    main()
