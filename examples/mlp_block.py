"""A llama-style MLP block (RMSNorm, gate and up projections, SiLU(gate) * up, down projection,
residual add) on device arrays with Q4_0 and Q4_K weights, checked against NumPy.

Runs anywhere: on the emulator by default at a small size; `--backend vulkan` on a GPU.
"""
import argparse

import numpy as np

import pycoop as pc
from pycoop.kernels import MLPBlock, dequantize_q4_k, mlp_reference, quantize_q4_k


def q4_0_blocks(W):
    """W (M x K f32) as llama.cpp Q4_0 blocks (the reference quantiser: d = max / -8)."""
    M, K = W.shape
    b = W.reshape(M, K // 32, 32)
    mx = np.take_along_axis(b, np.abs(b).argmax(-1)[..., None], -1)
    d = (mx / -8).astype(np.float32)
    inv = np.where(d != 0, 1 / np.where(d != 0, d, 1), 0)
    q = np.clip(np.trunc(b * inv + 8.5), 0, 15).astype(np.uint8)
    out = np.empty((M, K // 32, 18), np.uint8)
    out[..., :2] = d.astype(np.float16).view(np.uint8)
    out[..., 2:] = q[..., :16] | (q[..., 16:] << 4)
    deq = (q.astype(np.float32) - 8) * d.astype(np.float16).astype(np.float32)
    return out.reshape(M, -1), deq.reshape(M, K)


def q4_k_blocks(M, K, rng):
    """Q4_K super-blocks quantised from Gaussian weights (std 0.02, like a trained layer's),
    and their values (random bytes would give weights of mean ~0.5, overflowing f16)."""
    b = quantize_q4_k(rng.standard_normal((M, K), dtype=np.float32) * np.float32(0.02))
    return b, dequantize_q4_k(b, M, K)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backend", default="emulator")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--intermediate", type=int, default=512)
    args = ap.parse_args()
    H, I = args.hidden, args.intermediate
    rng = np.random.default_rng(0)
    nw = rng.uniform(0.5, 1.5, H).astype(np.float32)
    for fmt in ("q4_0", "q4_k"):
        if fmt == "q4_0":
            (g, gf), (u, uf), (d, df) = (q4_0_blocks((0.05 * rng.standard_normal(s)).astype(np.float32))
                                         for s in ((I, H), (I, H), (H, I)))
        else:
            (g, gf), (u, uf), (d, df) = (q4_k_blocks(*s, rng) for s in ((I, H), (I, H), (H, I)))
        block = MLPBlock(g, u, d, nw, fmt, backend=args.backend)
        for T in (1, 70):                       # token generation, and the prefill kernels
            x = rng.standard_normal((T, H)).astype(np.float32)
            y = block(pc.asarray(x, backend=args.backend)).numpy()
            ref = mlp_reference(x, gf, uf, df, nw)
            err = np.abs(y - ref).max() / np.abs(ref - x).max()
            print(f"{fmt} T={T:3d}: max |error| / max |MLP output| = {err:.2e}")
            assert err < 0.02                   # q8_1 activations (T=1, Q4_0) or f16 (T=70)


if __name__ == "__main__":
    main()
