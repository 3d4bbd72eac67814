"""The GEMV kernels on a real GPU (subgroups of 32; run with -m gpu): every format at N = 1,
a small-N tile and N = 64 at a llama-like K, against gguf's dequantisation; the Q4_0 large-N
path (cooperative matrices); the planes path of N >= 2 vectors; device arrays in and out."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import pycoop as pc
from pycoop.kernels import GemvConfig, matmul_q, weights

sys.path.insert(0, str(Path(__file__).parents[1] / "core"))
from gemv_cases import check, gguf, make_weights, reference  # noqa: E402,F401 (fixture)

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("fmt", ["f16", "q8_0", "q4_0", "q4_k"])
@pytest.mark.parametrize("N", [1, 3, 16, 64])
def test_gemv_formats(gguf, fmt, N):
    M, K = 1000, 4096
    W = make_weights(gguf, fmt, M, K, seed=N)
    X = np.random.default_rng(N).standard_normal((N, K)).astype(np.float32)
    y = matmul_q(W, X, None if fmt == "f16" else fmt, backend="vulkan")
    check(y, reference(gguf, fmt, W, X))


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q4_k"])
@pytest.mark.parametrize("rows,nt,subgroups,parts,unroll", [(1, 1, 8, 1, None), (4, 8, 2, 2, 2),
                                                             (2, 16, 4, 4, None), (2, 1, 4, 8, 4)])
def test_gemv_configurations(gguf, fmt, rows, nt, subgroups, parts, unroll):
    if fmt == "q4_0" and parts == 8:
        parts = 4
    M, K, N = 777, 2048, 37 if nt > 1 else 1
    W = make_weights(gguf, fmt, M, K, seed=rows)
    X = np.random.default_rng(rows).standard_normal((N, K)).astype(np.float32)
    cfg = GemvConfig("gemv", rows, nt, subgroups, unroll, parts)
    check(matmul_q(W, X, fmt, config=cfg, backend="vulkan"), reference(gguf, fmt, W, X))


def test_q4_0_large_n_and_device_arrays(gguf):
    M, K, N = 512, 1024, 128
    W = make_weights(gguf, "q4_0", M, K, seed=1)
    X = np.random.default_rng(1).standard_normal((N, K)).astype(np.float32)
    with pc.use_backend("vulkan"):
        Wq = weights(W, "q4_0")
        y = matmul_q(Wq, pc.asarray(X))                   # coopmat path, device arrays
        y1 = matmul_q(Wq, pc.asarray(X[:4]))              # gemv path
    ref = reference(gguf, "q4_0", W, X.astype(np.float16))
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())
    check(y1.numpy(), reference(gguf, "q4_0", W, X[:4]))


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
@pytest.mark.parametrize("N", [1, 4, 16, 64])
def test_integer_path(gguf, fmt, N):
    """activations='q8_1' (quantiser + integer dot products, the dispatcher's tile for N): the
    quantised activations as the NumPy definition (the driver's f32 division may move a value
    within a few ULP of a half to the neighbouring integer: allowed for 1 value in 10^4), Y
    within the f32 summation of the reference terms of the GPU's own quantisation, and within
    the quantisation bound of gguf's float reference."""
    from pycoop.kernels import (choose_kernel, gemv_q8_1_reference, q8_1_error_bound,
                                quantize_grid, quantize_q8_1, quantize_q8_1_reference)
    M, K = 1000, 4096
    W = make_weights(gguf, fmt, M, K, seed=N)
    X = np.random.default_rng(N).standard_normal((N, K)).astype(np.float32)
    nb = N * K // 32
    Q, D, S = np.zeros(nb * 8, np.uint32), np.zeros(nb, np.float32), np.zeros(nb, np.int32)
    quantize_q8_1("f32")[quantize_grid(nb)](X.reshape(-1, 4), Q, D, S, nb, backend="vulkan")
    q, d, s = quantize_q8_1_reference(X)
    qg = Q.view(np.int8).reshape(N, K)
    assert (qg != q).mean() <= 1e-4 and np.abs(qg.astype(int) - q).max() <= 1
    np.testing.assert_allclose(D.reshape(N, -1), d, rtol=2 ** -21)
    cfg = choose_kernel(fmt, N, activations="q8_1")
    if cfg.kind != "q8_1":         # N = 1 goes to gemv_planes (test_gemv_planes_on_gpu)
        cfg = GemvConfig("q8_1", 2, 1, parts=4)
    y = matmul_q(W, X, fmt, backend="vulkan", activations="q8_1", config=cfg)
    parts = cfg.parts
    dg, sg = D.reshape(N, -1), S.reshape(N, -1)
    ref = gemv_q8_1_reference(W, fmt, qg, dg, sg, parts)
    tol = (K // 32 + 64) * 2.0 ** -24 * gemv_q8_1_reference(W, fmt, qg, dg, sg, parts,
                                                            absolute=True)
    assert (np.abs(y - ref) <= tol + 1e-30).all()
    Wf = gguf.quants.dequantize(W, gguf.GGMLQuantizationType[fmt.upper()])
    err = np.abs(y - reference(gguf, fmt, W, X))
    assert (err <= q8_1_error_bound(Wf, dg) + 1e-5 * np.abs(ref).max()).all()


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q4_k"])
@pytest.mark.parametrize("N", [2, 16, 30, 40, 64, 100])
@pytest.mark.parametrize("deterministic", [False, True])
def test_planes_path(gguf, fmt, N, deterministic):
    """matmul_q's planes path (N >= 2, M a multiple of 64): split-K by atomics or summed in a
    second kernel, device arrays and NumPy arrays, against gguf's weights rounded to f16."""
    from test_matmul_planes import check as check_planes, f16_weights
    from pycoop.kernels import choose_kernel
    M, K = 1024, 4096
    W = make_weights(gguf, fmt, M, K, seed=N)
    X = np.random.default_rng(N).standard_normal((N, K)).astype(np.float32)
    assert choose_kernel(fmt, N, M=M, K=K).kind == "planes"
    Wf = f16_weights(gguf, fmt, W, M, K)
    check_planes(matmul_q(W, X, fmt, backend="vulkan", deterministic=deterministic), X, Wf)
    y = matmul_q(weights(W, fmt), pc.asarray(X, backend="vulkan"), deterministic=deterministic)
    check_planes(y.numpy(), X, Wf)
    # f16 activations, read where they lie (rows past N as zeros): the same products
    x16 = pc.asarray(X.astype(np.float16), backend="vulkan")
    y16 = matmul_q(weights(W, fmt), x16, deterministic=deterministic).numpy()
    check_planes(y16, X, Wf)
    if deterministic:
        np.testing.assert_array_equal(y16, y.numpy())


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q4_k", "f16"])
@pytest.mark.parametrize("x", ["f32", "q8_1", "q8_1_shared"])
@pytest.mark.parametrize("N", [1, 2, 5, 8])
def test_gemv_planes_on_gpu(gguf, fmt, x, N):
    """gemv_planes (subgroups of 32) at a llama-like K with ragged M: x="f32" against gguf's
    dequantisation (llama.cpp's weights), x="q8_1" (and "q8_1_shared", the quantiser
    in the kernel) against the NumPy twin of the GPU's own quantised activations and within
    the quantisation bound; the dispatcher's N = 1 choice through matmul_q too."""
    from pycoop.kernels import q8_1_error_bound, quantize_q8_1_reference
    from pycoop.kernels.gemv_planes import (fits_shared, matmul_planes_gemv, planes_gemv_config,
                                            planes_gemv_reference, planes_weights)
    if fmt == "f16" and x != "f32":
        pytest.skip("f16 weights take x='f32'")
    M, K = 1000, 4096
    cfg = planes_gemv_config(fmt, N, x, K)
    if x == "q8_1_shared" and not fits_shared(K, cfg.nt):
        pytest.skip(f"{cfg.nt} quantised vectors of {K} do not fit shared memory")
    W = make_weights(gguf, fmt, M, K, seed=N)
    Wq = weights(W, None if fmt == "f16" else fmt)
    X = np.random.default_rng(N).standard_normal((N, K)).astype(np.float32)
    y = matmul_planes_gemv(Wq, X, cfg, backend="vulkan")
    Wf = planes_weights(Wq)
    ref = X.astype(np.float64) @ Wf.T
    if x == "f32":
        check(y, ref)
    else:
        q8 = quantize_q8_1_reference(X)
        bound = q8_1_error_bound(Wf, q8[1]) + 1e-5 * np.abs(ref).max()
        assert (np.abs(y - ref) <= bound).all()
        twin = planes_gemv_reference(Wq, q8=q8)        # the driver may round one q differently
        np.testing.assert_allclose(y, twin, rtol=1e-3, atol=1e-3 * np.abs(twin).max())
    if N == 1 and fmt != "f16":     # the dispatcher's choice at N = 1: this kernel
        y1 = matmul_q(Wq, X[0], activations="q8_1" if x != "f32" else x, backend="vulkan")
        np.testing.assert_allclose(y1, y[0], rtol=1e-5, atol=1e-5 * np.abs(y).max())


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q4_k"])
def test_q8_1_in_the_kernel_at_llama_k(gguf, fmt):
    """The dispatcher's one-vector q8_1 path at K = 14336 (llama-8B's down projection): the
    quantiser inside gemv_planes with workgroups sharing K (f32 atomics into Y), one launch,
    against the two-launch path (the same quantised X; other partial sums) and within the
    quantisation bound; deterministic=True gives the two-launch path's bits."""
    from pycoop.kernels import choose_kernel, q8_1_error_bound, quantize_q8_1_reference
    from pycoop.kernels.gemv_planes import (matmul_planes_gemv, planes_gemv_config,
                                            planes_weights)
    M, K = 1000, 14336
    assert choose_kernel(fmt, 1, activations="q8_1", M=M, K=K).kgroups > 1
    W = make_weights(gguf, fmt, M, K, seed=7)
    Wq = weights(W, fmt)
    X = np.random.default_rng(7).standard_normal(K).astype(np.float32)
    launches: list = []
    y = matmul_q(Wq, pc.asarray(X, backend="vulkan"), activations="q8_1", launches=launches)
    assert len(launches) == 1
    two = matmul_planes_gemv(Wq, X[None], planes_gemv_config(fmt, 1, "q8_1"), backend="vulkan")[0]
    np.testing.assert_allclose(y.numpy(), two, rtol=1e-4, atol=1e-4 * np.abs(two).max())
    Wf = planes_weights(Wq)
    ref = X.astype(np.float64) @ Wf.T
    bound = q8_1_error_bound(Wf, quantize_q8_1_reference(X[None])[1]) + 1e-5 * np.abs(ref).max()
    assert (np.abs(y.numpy() - ref) <= bound).all()
    det = matmul_q(Wq, X, activations="q8_1", backend="vulkan", deterministic=True)
    np.testing.assert_array_equal(det, two)
