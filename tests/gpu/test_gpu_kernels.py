"""The ready-made GEMMs of pycoop.kernels on a real GPU in the configurations the benchmark
found fastest, whole outputs against NumPy (run with -m gpu)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from pycoop.kernels import (choose_kernel, dequantize_q4_k, dequantize_q4_k_planes,
                            dequantize_q8_0, gemm_khr_staged, gemm_nv, gemm_q4_0,
                            gemm_q4_0_planes, gemm_q4_0_staged, gemm_q4_k, gemm_q4_k_planes,
                            gemm_q8_0, gemm_q8_0_planes, gemm_reference, matmul_q, q4_0_planes,
                            q4_k_planes, q8_0_planes, quantize_q4_k, quantize_q8_0, sum_splits)

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
from q4_0_gemm import dequantize_q4_0, quantize_q4_0  # noqa: E402

pytestmark = pytest.mark.gpu


def check(C, want):
    err = np.abs(C - want).max() / np.abs(want).max()
    assert err < 1e-4, err


def operands(m, n, k):
    rng = np.random.default_rng(7)
    return (rng.standard_normal((m, k)).astype(np.float16),
            rng.standard_normal((k, n)).astype(np.float16))


@pytest.mark.parametrize("kernel,tile,vectors", [
    (gemm_khr_staged(256, 128, 32, 4, 2, specialize=True), (256, 128), False),
    (gemm_khr_staged(128, 256, 32, 2, 4), (128, 256), False),
    (gemm_khr_staged(256, 128, 32, 4, 2, specialize=True, vector_copy=True), (256, 128), True),
    (gemm_khr_staged(128, 128, 64, 2, 2, specialize=True, vector_copy=True), (128, 128), True),
    (gemm_nv(128, 256, 64, 256, "undefined", 2, True), (128, 256), False),
    (gemm_nv(128, 256, 32, 256), (128, 256), False)])
def test_square_gemms(kernel, tile, vectors):
    n = 1024
    A, B = operands(n, n, n)
    C = np.full((n, n), np.nan, np.float32)
    a, b = (A.view(np.uint32).reshape(-1, 4), B.view(np.uint32).reshape(-1, 4)) if vectors \
        else (A, B)
    kernel[(n // tile[0], n // tile[1])](a, b, C, n, n, n, backend="vulkan", repeat=3)
    check(C, gemm_reference(A, B))


@pytest.mark.parametrize("bm,bn,bk,unroll,spec,clamp,first", [
    (256, 64, 64, 2, True, "undefined", True), (256, 64, 64, 2, True, "undefined", False),
    (128, 128, 32, 1, False, "constant", True), (128, 128, 32, 1, False, "constant", False)])
def test_q4_0_gemm(bm, bn, bk, unroll, spec, clamp, first):
    M, N, K = 512, 256, 1024
    rng = np.random.default_rng(8)
    X = rng.standard_normal((M, K)).astype(np.float16)
    Wq = quantize_q4_0(rng.standard_normal((N, K)).astype(np.float32))
    Y = np.full((M, N), np.nan, np.float32)
    gemm_q4_0(bm, bn, bk, 256, unroll, spec, clamp=clamp, weights_first=first)[(M // bm, N // bn)](
        X, Wq, Y, M, N, K, backend="vulkan")
    check(Y, X.astype(np.float32) @ dequantize_q4_0(Wq, N, K).astype(np.float32).T)


@pytest.mark.parametrize("cfg,spec", [((128, 128, 64, 2, 4), True), ((128, 64, 64, 2, 2), False)])
def test_q4_0_staged_gemm(cfg, spec):
    M, N, K = 512, 256, 1024
    rng = np.random.default_rng(9)
    X = rng.standard_normal((M, K)).astype(np.float16)
    Wq = quantize_q4_0(rng.standard_normal((N, K)).astype(np.float32))
    Y = np.full((M, N), np.nan, np.float32)
    gemm_q4_0_staged(*cfg, specialize=spec)[(M // cfg[0], N // cfg[1])](
        X.view(np.uint32).reshape(-1, 4), Wq.view(np.uint32), Y, M, N, K, backend="vulkan")
    check(Y, X.astype(np.float32) @ dequantize_q4_0(Wq, N, K).astype(np.float32).T)


@pytest.mark.parametrize("cfg,spec", [((128, 128, 64, 2, 4), True), ((128, 64, 32, 2, 2), False)])
def test_q4_0_planes_gemm(cfg, spec):
    M, N, K = 512, 256, 1024
    rng = np.random.default_rng(10)
    Wq = quantize_q4_0(rng.standard_normal((M, K)).astype(np.float32))
    X = rng.standard_normal((K, N)).astype(np.float16)
    Y = np.full((M, N), np.nan, np.float32)
    gemm_q4_0_planes(*cfg, specialize=spec)[(M // cfg[0], N // cfg[1])](
        *q4_0_planes(Wq, M, K), X.view(np.uint32).reshape(-1, 4), Y, M, N, K, backend="vulkan")
    check(Y, dequantize_q4_0(Wq, M, K).astype(np.float32) @ X.astype(np.float32))



def sum_partials(P, Y, split_k):
    n4 = Y.size // 4
    sum_splits(split_k)[(-(-n4 // 256),)](P.reshape(-1, 4), Y.reshape(-1, 4), n4, backend="vulkan")


@pytest.mark.parametrize("split_k", [2, 4])
def test_split_k_q4_0_planes_gemm(split_k):
    M, N, K = 512, 256, 2048
    rng = np.random.default_rng(11)
    Wq = quantize_q4_0(rng.standard_normal((M, K)).astype(np.float32))
    X = rng.standard_normal((K, N)).astype(np.float16)
    P = np.full((split_k * M, N), np.nan, np.float32)
    Y = np.full((M, N), np.nan, np.float32)
    kernel = gemm_q4_0_planes(128, 128, 64, 2, 2, specialize=True, split_k=split_k)
    kernel[(M // 128, N // 128, split_k)](*q4_0_planes(Wq, M, K), X.view(np.uint32).reshape(-1, 4),
                                          P, M, N, K, backend="vulkan")
    sum_partials(P, Y, split_k)
    check(Y, dequantize_q4_0(Wq, M, K).astype(np.float32) @ X.astype(np.float32))


@pytest.mark.parametrize("kernel,split_k,shape,tile,vectors", [
    (gemm_nv(128, 256, 64, 256, "undefined", 2, True, split_k=2), 2, (512, 512, 1024), (128, 256),
     False),
    (gemm_nv(128, 128, 32, 256, split_k=3), 3, (300, 200, 1000), (128, 128), False),   # ragged
    (gemm_khr_staged(128, 128, 64, 2, 2, specialize=True, vector_copy=True, split_k=2), 2,
     (512, 256, 1024), (128, 128), True)])
def test_split_k_f16_gemms(kernel, split_k, shape, tile, vectors):
    M, N, K = shape
    A, B = operands(M, N, K)
    P = np.full((split_k * M, N), np.nan, np.float32)
    Y = np.full((M, N), np.nan, np.float32)
    a, b = (A.view(np.uint32).reshape(-1, 4), B.view(np.uint32).reshape(-1, 4)) if vectors \
        else (A, B)
    kernel[(-(-M // tile[0]), -(-N // tile[1]), split_k)](a, b, P, M, N, K, backend="vulkan")
    sum_partials(P, Y, split_k)
    check(Y, gemm_reference(A, B))


@pytest.mark.parametrize("fmt,cfg,clamp,first,shape", [
    ("q8_0", (128, 128, 32, 256, 1, True), "undefined", False, (512, 256, 1024)),
    ("q8_0", (128, 128, 32, 256, 1, False), "constant", True, (300, 200, 1024)),    # ragged
    ("q4_k", (128, 128, 32, 256, 1, True), "undefined", True, (512, 256, 1024)),
    ("q4_k", (128, 64, 64, 256, 1, False), "constant", False, (300, 200, 1024))])  # ragged
def test_q8_0_and_q4_k_decoded_gemms(fmt, cfg, clamp, first, shape):
    M, N, K = shape
    rng = np.random.default_rng(12)
    X = rng.standard_normal((M, K)).astype(np.float16)
    W = rng.standard_normal((N, K)).astype(np.float32)
    quantize, dequantize, kernel = {"q8_0": (quantize_q8_0, dequantize_q8_0, gemm_q8_0),
                                    "q4_k": (quantize_q4_k, dequantize_q4_k, gemm_q4_k)}[fmt]
    Wq = quantize(W)
    Y = np.full((M, N), np.nan, np.float32)
    bm, bn, bk, inv, unroll, spec = cfg
    kernel(bm, bn, bk, inv, unroll, spec, clamp=clamp, weights_first=first)[
        (-(-M // bm), -(-N // bn))](X, Wq, Y, M, N, K, backend="vulkan")
    Wd = dequantize(Wq, N, K).astype(np.float16).astype(np.float32)    # decoded to f16
    check(Y, X.astype(np.float32) @ Wd.T)


@pytest.mark.parametrize("cfg,spec,split_k", [((128, 128, 64, 2, 4), True, 1),
                                              ((128, 64, 32, 2, 2), False, 1),
                                              ((128, 128, 64, 2, 2), True, 2)])
def test_q8_0_planes_gemm(cfg, spec, split_k):
    M, N, K = 512, 256, 1024
    rng = np.random.default_rng(13)
    Wq = quantize_q8_0(rng.standard_normal((M, K)).astype(np.float32))
    X = rng.standard_normal((K, N)).astype(np.float16)
    P = np.full((split_k * M, N), np.nan, np.float32)
    gemm_q8_0_planes(*cfg, specialize=spec, split_k=split_k)[(M // cfg[0], N // cfg[1], split_k)](
        *q8_0_planes(Wq, M, K), X.view(np.uint32).reshape(-1, 4), P, M, N, K, backend="vulkan")
    Y = P
    if split_k > 1:
        Y = np.full((M, N), np.nan, np.float32)
        sum_partials(P, Y, split_k)
    Wd = dequantize_q8_0(Wq, M, K).astype(np.float16).astype(np.float32)
    check(Y, Wd @ X.astype(np.float32))


@pytest.mark.parametrize("cfg,spec,split_k,mode", [((128, 128, 64, 2, 4), True, 1, "stacked"),
                                                   ((128, 64, 32, 2, 2), False, 1, "stacked"),
                                                   ((128, 128, 64, 2, 2), True, 2, "stacked"),
                                                   ((128, 128, 64, 2, 2), False, 2, "atomic")])
def test_q4_k_planes_gemm(cfg, spec, split_k, mode):
    """Against the planes' weights (dequantize_q4_k_planes; a GPU may fuse q * scale - min,
    rounding once less) and against llama.cpp's within q4_k_planes' documented bound."""
    M, N, K = 512, 256, 1024
    rng = np.random.default_rng(15)
    Wq = quantize_q4_k(rng.standard_normal((M, K)).astype(np.float32))
    X = rng.standard_normal((K, N)).astype(np.float16)
    Q, D = q4_k_planes(Wq, M, K)
    atomic = mode == "atomic"
    P = np.zeros((M, N), np.float32) if atomic else np.full((split_k * M, N), np.nan, np.float32)
    gemm_q4_k_planes(*cfg, specialize=spec, split_k=split_k, split_k_mode=mode)[
        (M // cfg[0], N // cfg[1], split_k)](Q, D, X.view(np.uint32).reshape(-1, 4), P, M, N, K,
                                             backend="vulkan")
    Y = P
    if split_k > 1 and not atomic:
        Y = np.full((M, N), np.nan, np.float32)
        sum_partials(P, Y, split_k)
    Xa = np.abs(X.astype(np.float64))
    Wp = dequantize_q4_k_planes(Q, D, M, K).astype(np.float64)
    nib = Q.view(np.uint8).reshape(-1, 16)
    p = np.concatenate([nib & 15, nib >> 4], 1) * D[:, :1].astype(np.float64) * (1 + 2.0 ** -10)
    m = np.broadcast_to(D[:, 1:].astype(np.float64), p.shape) * (1 + 2.0 ** -10)
    bound = (2.0 ** -11 * (1.01 * np.abs(p - m) + 2.01 * p + 1.01 * m) + 2.0 ** -20).reshape(M, K)
    acc = K * 2.0 ** -23 * (np.abs(Wp) @ Xa)
    assert (np.abs(Y - Wp @ X) <= 2.0 ** -11 * (np.abs(Wp) + 2 * p.reshape(M, K)) @ Xa + acc).all()
    ref = dequantize_q4_k(Wq, M, K).astype(np.float64) @ X
    assert (np.abs(Y - ref) <= bound @ Xa + acc).all()


@pytest.mark.parametrize("fmt", ["q8_0", "q4_k"])
def test_matmul_q_large_n_q8_0_and_q4_k(fmt):
    """Q8_0 / Q4_K weights through their decoded GEMM (the dispatcher's choice for 512 vectors
    when the shape is not given; with it, the planes GEMM, whose Q4_K scales are rounded to
    f16, is chosen)."""
    M, K, N = 384, 1024, 512
    rng = np.random.default_rng(14)
    quantize, dequantize = {"q8_0": (quantize_q8_0, dequantize_q8_0),
                            "q4_k": (quantize_q4_k, dequantize_q4_k)}[fmt]
    Wq = quantize(rng.standard_normal((M, K)).astype(np.float32))
    X = rng.standard_normal((N, K)).astype(np.float32)
    assert choose_kernel(fmt, N).kind == "coopmat"
    Y = matmul_q(Wq, X, fmt, backend="vulkan", config=choose_kernel(fmt, N))
    Wd = dequantize(Wq, M, K).astype(np.float16).astype(np.float32)
    check(Y, X.astype(np.float16).astype(np.float32) @ Wd.T)
