"""Weights and references shared by the GEMV tests (emulator, lavapipe, GPU): matrices in
llama.cpp's formats made with llama.cpp's own `gguf` package, and X @ W.T with W dequantised by
it."""
from __future__ import annotations

import numpy as np
import pytest

QK = {"f16": 1, "q8_0": 32, "q4_0": 32, "q4_k": 256}


@pytest.fixture(scope="module")
def gguf():
    """llama.cpp's Python package (the optional extra pycoop[gguf]); tests skip without it."""
    return pytest.importorskip("gguf")


def qtype(gguf, fmt):
    return gguf.GGMLQuantizationType[fmt.upper()]


def make_weights(gguf, fmt: str, M: int, K: int, seed: int = 0) -> np.ndarray:
    """An M x K matrix in `fmt`, as a GGUF file stores it: gguf's own quantisation of random
    values, except Q4_K, which gguf cannot quantise: random super-blocks (any bytes are valid
    nibbles and 6-bit scales) with small positive f16 d and dmin."""
    rng = np.random.default_rng(seed)
    if fmt == "f16":
        return rng.standard_normal((M, K)).astype(np.float16)
    if fmt == "q4_k":
        nb = M * K // 256
        b = rng.integers(0, 256, (nb, 144), dtype=np.uint8)
        b[:, :4] = rng.uniform(1e-3, 0.05, (nb, 2)).astype(np.float16).view(np.uint8)
        return b.reshape(M, -1)
    return gguf.quants.quantize(rng.standard_normal((M, K)).astype(np.float32), qtype(gguf, fmt))


def reference(gguf, fmt: str, W: np.ndarray, X: np.ndarray) -> np.ndarray:
    """X @ W.T in f64 with W dequantised by gguf."""
    Wf = W if fmt == "f16" else gguf.quants.dequantize(W, qtype(gguf, fmt))
    return np.asarray(X, np.float64) @ np.asarray(Wf, np.float64).T


def check(y, ref):
    # f32 accumulation of K products: a few ulps of the largest partial sums
    tol = 2e-6 * np.abs(ref).max() * np.sqrt(ref.shape[-1] + 1) + 1e-6
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=tol)
