"""The MLP block (pycoop.kernels.MLPBlock) at llama-8B sizes against torch with f16 weights on
the same GPU, batch 1 and 512, Q4_0 and Q4_K: device time (pycoop timestamps, first launch to
last) and wall time per call after warm-up, torch eager and torch in a CUDA graph (wall time;
CUDA events for GPU time), the block recorded once with `pc.capture` and replayed (wall
time), and pycoop's output checked against torch's. Unchecked launches (the production mode).

    python3 bench/mlp_block.py [--hidden 4096 --intermediate 14336 --batches 1 512]

Skips (exit 0) without torch or CUDA or a Vulkan device."""
import argparse
import sys
import time

import numpy as np

# before pycoop: the benchmark times the unchecked kernels (bench/unchecked.py)
import unchecked  # noqa: E402,F401

import pycoop as pc  # noqa: E402
from pycoop.kernels import MLPBlock, dequantize_q4_k, quantize_q4_k  # noqa: E402
from warmup import warm_gpu  # noqa: E402


def q4_0(M, K, rng):
    b = rng.integers(0, 256, (M, K // 32, 18), dtype=np.uint8)
    d = rng.uniform(2e-3, 1e-2, (M, K // 32)).astype(np.float16)
    b[..., :2] = d[..., None].view(np.uint8).reshape(M, K // 32, 2)
    p = b[..., 2:]
    q = np.concatenate([p & 15, p >> 4], -1).astype(np.float32) - 8
    return b.reshape(M, -1), (q * d.astype(np.float32)[..., None]).reshape(M, K)


def q4_k(M, K, rng):
    """Q4_K super-blocks quantised from Gaussian weights (std 0.02, like a trained layer's), and
    their values. Random bytes would give weights of mean ~0.5: the f16 reference overflows."""
    b = quantize_q4_k(rng.standard_normal((M, K), dtype=np.float32) * np.float32(0.02))
    return b, dequantize_q4_k(b, M, K)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--intermediate", type=int, default=14336)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 512])
    ap.add_argument("--formats", nargs="+", default=["q4_0", "q4_k"])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--deterministic", action="store_true",
                    help="MLPBlock(deterministic=True): 9-64 tokens sum split-K apart, not "
                         "with f32 atomics")
    ap.add_argument("--launches", action="store_true",
                    help="also print each launch of the block: start after the first, duration")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed")
        return 0
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    try:
        pc.zeros(1, pc.f32, backend="vulkan")
    except Exception as e:                                    # noqa: BLE001
        print(f"skipped: no Vulkan device ({e})")
        return 0
    warm_gpu()
    H, I, eps = args.hidden, args.intermediate, 1e-5
    rng = np.random.default_rng(0)
    nw = rng.uniform(0.5, 1.5, H).astype(np.float32)
    rows = []
    for fmt in args.formats:
        make = q4_0 if fmt == "q4_0" else q4_k
        (g, gf), (u, uf), (d, df) = make(I, H, rng), make(I, H, rng), make(H, I, rng)
        block = MLPBlock(g, u, d, nw, fmt, backend="vulkan", eps=eps,
                         deterministic=args.deterministic)
        tw = [torch.tensor(w, dtype=torch.float16, device="cuda") for w in (gf, uf, df)]
        tn = torch.tensor(nw, device="cuda")
        del gf, uf, df

        def torch_block(x):
            xf = x.float()
            n = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * tn).half()
            h = torch.nn.functional.silu(n @ tw[0].T) * (n @ tw[1].T)
            return (xf + (h @ tw[2].T).float())

        for T in args.batches:
            x = rng.standard_normal((T, H)).astype(np.float32)
            xa = pc.asarray(x, backend="vulkan")
            for _ in range(3):                      # warm-up: pipelines, pools, clocks
                block(xa)
            pc.synchronize()
            dev = []
            t0 = time.perf_counter()
            for _ in range(args.iters):
                block(xa)
            pc.synchronize()
            wall = (time.perf_counter() - t0) / args.iters * 1e3
            with pc.capture(backend="vulkan") as graph_pc:    # the block recorded once
                yc = block(xa)
            for _ in range(3):
                graph_pc.launch()
            pc.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.iters):
                graph_pc.launch()
            pc.synchronize()
            replay = (time.perf_counter() - t0) / args.iters * 1e3
            yr, yb = yc.numpy(), block(xa).numpy()
            if block.deterministic or not 8 < T <= block.small_t:
                assert np.array_equal(yr, yb), "replayed block differs"
            else:           # split-K by f32 atomics: the same up to the last bits
                np.testing.assert_allclose(yr, yb, rtol=1e-3, atol=1e-4 * np.abs(yb).max(),
                                           err_msg="replayed block differs")
            del graph_pc, yc
            for _ in range(5):
                block(xa)
                dev.append(block.device_time_ms())
            if args.launches:                       # where the block's device time goes
                t0 = block.launches[0].spans_ns[0][0]
                for i, r in enumerate(block.launches):      # in MLPBlock's order
                    a, b = r.spans_ns[0]
                    print(f"    launch {i}: starts at {(a - t0) / 1e3:7.1f} µs, runs "
                          f"{(b - a) / 1e3:6.1f} µs", flush=True)
            yp = block(xa).numpy()
            xt = torch.tensor(x, device="cuda")
            for _ in range(3):
                yt = torch_block(xt)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.iters):
                yt = torch_block(xt)
            torch.cuda.synchronize()
            eager = (time.perf_counter() - t0) / args.iters * 1e3
            graph = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                torch_block(xt)
            torch.cuda.current_stream().wait_stream(s)
            with torch.cuda.graph(graph):
                yg = torch_block(xt)
            graph.replay()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.iters):
                graph.replay()
            torch.cuda.synchronize()
            gwall = (time.perf_counter() - t0) / args.iters * 1e3
            ref = yg.cpu().numpy().astype(np.float64)
            err = np.abs(yp - ref).max() / max(np.abs(ref - x).max(), 1e-30)
            rows.append((fmt, T, min(dev), wall, replay, eager, gwall, err))
            print(f"{fmt} T={T}: pycoop device {min(dev):.3f} ms, wall {wall:.3f} ms, replayed "
                  f"{replay:.3f} ms; torch eager "
                  f"{eager:.3f} ms, graph {gwall:.3f} ms; rel. error {err:.2e}", flush=True)
            del yt, yg, graph
    dev_name = torch.cuda.get_device_name()
    print(f"\nMLP block, hidden {H}, intermediate {I}, {dev_name} (ms per call after warm-up)\n")
    print("| format | T | pycoop device | pycoop wall | pycoop wall, replayed graph | torch f16 eager "
          "| torch f16 CUDA graph | speed-up vs graph (wall, replayed) | max err / max |MLP out| |")
    print("|---|---|---|---|---|---|---|---|---|")
    for fmt, T, dv, wl, rp, ea, gr, err in rows:
        print(f"| {fmt} | {T} | {dv:.3f} | {wl:.3f} | {rp:.3f} | {ea:.3f} | {gr:.3f} | "
              f"{gr / rp:.2f}x | {err:.2e} |")
    bad = [r for r in rows if not r[-1] < 0.03]
    if bad:
        print(f"FAILED: pycoop differs from torch by more than 3 % in {len(bad)} rows")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
