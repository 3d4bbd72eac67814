"""Token generation's matrix-vector product with 4-bit weights: Y = X @ W.T for a few vectors
X (N x K, f32) and weights W (M x K) in llama.cpp's Q4_0 and Q4_K blocks, exactly as a GGUF
file stores them, through `pycoop.kernels.matmul_q`.

The weights here are random blocks (any bytes are valid 4-bit values) with small f16 scales,
and the result is checked against a NumPy dequantise-then-matmul written from llama.cpp's block
layouts. A tensor read from a GGUF file (`gguf.GGUFReader(path).tensors[i]`) can be passed to
`matmul_q` in place of the raw blocks.

    python3 examples/gemv_q4.py
"""
import numpy as np

import pycoop as pc
from pycoop.kernels import choose_kernel, matmul_q


def random_blocks(rows, nblocks, size, nscales, rng):
    """rows x nblocks blocks of `size` bytes whose first nscales f16 are small positive scales."""
    b = rng.integers(0, 256, (rows, nblocks, size), dtype=np.uint8)
    b[..., :2 * nscales] = rng.uniform(0.001, 0.05, (rows, nblocks, nscales)).astype(
        np.float16).view(np.uint8)
    return b.reshape(rows, -1)


def dequantize_q4_0(W, M, K):
    """Q4_0: 18-byte blocks of 32 weights, an f16 scale d then 16 bytes; weight j is the low
    nibble of byte j (j < 16) or the high nibble of byte j - 16, value (nibble - 8) * d."""
    b = W.reshape(M, K // 32, 18)
    d = b[..., :2].copy().view(np.float16).astype(np.float32)
    q = np.concatenate([b[..., 2:] & 15, b[..., 2:] >> 4], axis=-1).astype(np.float32)
    return ((q - 8) * d).reshape(M, K)


def dequantize_q4_k(W, M, K):
    """Q4_K: 144-byte super-blocks of 256 weights: f16 d and dmin, 12 bytes of 6-bit scales and
    mins for 8 sub-blocks of 32, then 128 bytes; bytes 32j..32j+31 hold sub-block 2j in their
    low nibbles and 2j + 1 in their high ones; value d * scale * q - dmin * min."""
    b = W.reshape(M, K // 256, 144)
    d = b[..., 0:2].copy().view(np.float16).astype(np.float32)
    dmin = b[..., 2:4].copy().view(np.float16).astype(np.float32)
    s = b[..., 4:16].astype(np.uint32)
    sc = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 15) | ((s[..., 0:4] >> 6) << 4)], -1)
    mn = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], -1)
    qs = b[..., 16:].reshape(M, K // 256, 4, 32)
    q = np.stack([qs & 15, qs >> 4], axis=3).reshape(M, K // 256, 8, 32).astype(np.float32)
    w = d[..., None] * sc[..., None] * q - dmin[..., None] * mn[..., None]
    return w.reshape(M, K)


def main():
    rng = np.random.default_rng(0)
    M, K = 48, 512
    weights = {"q4_0": (random_blocks(M, K // 32, 18, 1, rng), dequantize_q4_0),
               "q4_k": (random_blocks(M, K // 256, 144, 2, rng), dequantize_q4_k)}
    for fmt, (W, dequantize) in weights.items():
        for N in (1, 5):
            X = rng.standard_normal((N, K)).astype(np.float32)
            Y = matmul_q(W, X, fmt)                  # the kernel choose_kernel(fmt, N) picks
            ref = X.astype(np.float64) @ dequantize(W, M, K).astype(np.float64).T
            err = np.abs(Y - ref).max() / np.abs(ref).max()
            print(f"{fmt} {M}x{K}, N={N} ({choose_kernel(fmt, N)}): max rel error {err:.1e}")
            assert Y.shape == (N, M) and err < 1e-5, err
    # device arrays: the weights are uploaded once and the result stays on the device
    W = weights["q4_0"][0]
    x = pc.asarray(rng.standard_normal(K).astype(np.float32))
    y = matmul_q(W, x, "q4_0")                       # one vector in, M values out
    assert np.allclose(y.numpy(), dequantize_q4_0(W, M, K) @ x.numpy(), rtol=1e-4, atol=1e-3)


if __name__ == "__main__":
    main()
