"""The matrix-vector and small-N kernels of pycoop.kernels.gemv on the emulator, against
dequantise-then-matmul in NumPy with llama.cpp's own `gguf` package as the reference for every
block format (its `quantize` / `dequantize`, and a GGUF file written and read back), across
ragged shapes, N = 1 ... 64 and every configuration the dispatcher picks; every module built
passes spirv-val."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pycoop as pc
from pycoop.kernels import (GemvConfig, choose_kernel, gemv, gemv_grid, matmul_q, quantize_q4_k,
                            quantize_q8_0, weights)
from pycoop.kernels.gemv import gemv_config

from core_helpers import FEW
from gemv_cases import QK, qtype, check, gguf, make_weights, reference  # noqa: F401 (fixture)


def _shape(fmt, m, blocks, extra):
    """(M, K): K whole blocks, plus a ragged tail for f16 (any K)."""
    return m, blocks * (8 if fmt == "f16" else QK[fmt]) + (extra if fmt == "f16" else 0)


@FEW
@given(fmt=st.sampled_from(["f16", "q8_0", "q4_0", "q4_k"]), m=st.integers(1, 40),
       blocks=st.integers(1, 6), extra=st.integers(0, 7),
       n=st.sampled_from([1, 2, 3, 4, 5, 8, 13, 31, 64]), seed=st.integers(0, 2**16))
def test_matmul_q_matches_gguf_dequantisation(gguf, fmt, m, blocks, extra, n, seed):
    if fmt == "q4_k":
        blocks = 1 + blocks % 3                         # K = 256 ... 768
    M, K = _shape(fmt, m, blocks, extra)
    W = make_weights(gguf, fmt, M, K, seed)
    X = np.random.default_rng(seed + 1).standard_normal((n, K)).astype(np.float32)
    y = matmul_q(W, X, None if fmt == "f16" else fmt, backend="emulator")
    assert y.shape == (n, M) and y.dtype == np.float32
    check(y, reference(gguf, fmt, W, X))


@pytest.mark.parametrize("fmt", ["f16", "q8_0", "q4_0", "q4_k"])
@pytest.mark.parametrize("rows,nt,subgroups,sg,unroll,parts", [
    (1, 1, 4, 32, None, 1), (2, 4, 2, 32, 2, 2), (3, 8, 1, 32, None, None), (2, 2, 4, 8, None, 8),
    (4, 16, 2, 16, True, 4)])
def test_every_configuration(gguf, fmt, rows, nt, subgroups, sg, unroll, parts):
    """Tiles that do not divide M or N (clamped loads, skipped stores), a K of several lane
    strides, subgroup sizes 8 ... 32 and 1 to 8 lanes per block; the module of each
    configuration validates."""
    parts = 1 if fmt == "f16" else 4 if fmt == "q4_0" and parts == 8 else parts
    M, K = 23, (512 if fmt == "q4_k" else 320)
    N = nt + 3
    W = make_weights(gguf, fmt, M, K, seed=rows * 7 + nt)
    X = np.random.default_rng(nt).standard_normal((N, K)).astype(np.float32)
    cfg = GemvConfig("gemv", rows, nt, subgroups, unroll, parts)
    y = matmul_q(W, X, None if fmt == "f16" else fmt, config=cfg, backend="emulator",
                 subgroup_size=sg)
    check(y, reference(gguf, fmt, W, X))
    ck = gemv(fmt, rows, nt, subgroups, sg, 8, unroll, parts).compile()
    assert ck.spv                                             # spirv-val accepts it
    want = {None: "None", 2: "2", True: "Unroll"}[unroll]     # the hint on the K loop
    assert [ln.split()[-1] for ln in ck.spvasm.splitlines() if "OpLoopMerge" in ln] == [want]


def test_f16_any_k_uses_scalar_loads():
    """f16 weights with K not a multiple of 8 are read one half at a time (vec=1)."""
    rng = np.random.default_rng(3)
    W = rng.standard_normal((9, 77)).astype(np.float16)
    X = rng.standard_normal((3, 77)).astype(np.float32)
    check(matmul_q(W, X, backend="emulator"), X.astype(np.float64) @ W.T.astype(np.float64))
    assert gemv("f16", 2, 4, 4, 32, 1).compile().spv
    x1 = X[0]
    y1 = matmul_q(W, x1, backend="emulator")                  # a single vector: shape (M,)
    assert y1.shape == (9,)
    check(y1, W.astype(np.float64) @ x1.astype(np.float64))


def test_q4_0_large_n_goes_to_the_cooperative_matrix_gemm(gguf):
    """N > 64 Q4_0 runs gemm_q4_0 (f16 activations: the tolerance is f16 rounding of x)."""
    assert choose_kernel("q4_0", 65) == GemvConfig("coopmat", tile=(128, 128, 32))
    M, K, N = 40, 96, 70
    W = make_weights(gguf, "q4_0", M, K, seed=5)
    X = np.random.default_rng(5).standard_normal((N, K)).astype(np.float32)
    y = matmul_q(W, X, "q4_0", backend="emulator")
    ref = reference(gguf, "q4_0", W, X.astype(np.float16))
    np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())


def test_views_of_x_and_w_on_every_path(gguf):
    """Transposed X and row-reversed raw weights (NumPy views that are not C-contiguous)
    give the contiguous copies' results on the matrix-vector and the cooperative-matrix
    paths (the GEMM used to refuse them with its internal argument names)."""
    M, K = 40, 96
    W = make_weights(gguf, "q4_0", M, K, seed=9)
    X = np.random.default_rng(9).standard_normal((70, K)).astype(np.float16)
    Xt = np.asfortranarray(X)
    for n in (3, 70):
        want = matmul_q(W, X[:n], "q4_0", backend="emulator")
        np.testing.assert_array_equal(matmul_q(W, Xt[:n], "q4_0", backend="emulator"), want)
        np.testing.assert_array_equal(
            matmul_q(W, Xt[:n].astype(np.float32), "q4_0", backend="emulator"),
            matmul_q(W, X[:n].astype(np.float32), "q4_0", backend="emulator"))
        np.testing.assert_array_equal(
            matmul_q(W[::-1], X[:n], "q4_0", backend="emulator"),
            matmul_q(np.ascontiguousarray(W[::-1]), X[:n], "q4_0", backend="emulator"))


@pytest.mark.parametrize("n", [1, 3, 70])
def test_device_views_of_x_start_16_byte_aligned(gguf, n):
    """A pc.Array X that is a view 16 bytes into its buffer gives the NumPy X's results; one
    4 bytes in is refused before any launch, naming the offset (the kernels read X in 16-byte
    pieces, which a GPU would read misaligned)."""
    import pycoop as pc
    M, K = 40, 96
    W = make_weights(gguf, "q4_0", M, K, seed=5)
    X = np.random.default_rng(5).standard_normal((n, K)).astype(np.float32)
    buf = pc.asarray(np.concatenate([np.zeros(4, np.float32), X.ravel()]), backend="emulator")
    np.testing.assert_array_equal(matmul_q(W, buf[4:].reshape(X.shape), "q4_0").numpy(),
                                  matmul_q(W, X, "q4_0", backend="emulator"))
    with pytest.raises(ValueError, match=r"matmul_q: X is a view 12 bytes into its buffer; "
                                         r".* 16-byte aligned"):
        matmul_q(W, buf[3:3 + X.size].reshape(X.shape), "q4_0")


def test_large_n_gemm_on_device_arrays_rounds_x_on_the_device(gguf):
    """A device X (f32 or f16) reaches the cooperative-matrix GEMM on its backend: f32 is
    rounded to f16 by a kernel, as NumPy rounds it, so the results are the NumPy X's bits."""
    import pycoop as pc
    M, K, N = 40, 96, 70
    W = make_weights(gguf, "q4_0", M, K, seed=7)
    X = np.random.default_rng(7).standard_normal((N, K)).astype(np.float32)
    want = matmul_q(W, X, "q4_0", backend="emulator")
    for x in (X, X.astype(np.float16)):
        y = matmul_q(W, pc.asarray(x, backend="emulator"), "q4_0")
        assert isinstance(y, pc.Array)
        np.testing.assert_array_equal(y.numpy(), want)


def test_q4_0_small_n_cooperative_matrix_tiles(gguf):
    """The cooperative-matrix GEMM below 128 vectors (weights as the A operand, tiles of 16 or
    32 vectors), chosen with a lower `large_n` or named by the configuration."""
    assert choose_kernel("q4_0", 20, large_n=16) == GemvConfig("coopmat", tile=(32, 128, 32))
    M, K, N = 70, 128, 20
    W = make_weights(gguf, "q4_0", M, K, seed=6)
    X = np.random.default_rng(6).standard_normal((N, K)).astype(np.float32)
    ref = reference(gguf, "q4_0", W, X.astype(np.float16))
    for y in (matmul_q(W, X, "q4_0", backend="emulator", large_n=16),
              matmul_q(W, X, "q4_0", backend="emulator",
                       config=GemvConfig("coopmat", tile=(16, 64, 64)))):
        np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())


def test_choose_kernel_by_shape_and_format():
    assert choose_kernel("q4_0", 1) == GemvConfig("gemv_planes", 4, 1, 8, span=2,
                                                  split_k=2)                   # planes
    assert choose_kernel("f16", 1) == GemvConfig("gemv_planes", 1, 1, 4, split_k=4)
    assert choose_kernel("f16", 1, K=100) == GemvConfig("gemv", 1, 1)          # K % 8 != 0
    assert choose_kernel("q4_k", 1).kind == "gemv_planes"   # scale words: gguf's weights
    assert choose_kernel("q4_k", 2).nt == 2 and choose_kernel("q8_0", 3).nt == 4
    assert {choose_kernel("f16", n).nt for n in (5, 16, 64)} == {8}
    assert choose_kernel("f16", 512).kind == "gemv"    # no large-N GEMM: tiles of the GEMV
    for fmt in ("q8_0", "q4_0", "q4_k"):
        assert choose_kernel(fmt, 512).kind == "coopmat"
    assert gemv_grid(4096, 16, rows=2, nt=8, subgroups=4) == (2, 512)


def test_gemv_config_is_the_gguf_block_kernels_own():
    """The float GGUF-block kernel's defaults, which the dispatcher falls back to (and which
    bench/llm_kernels.py times as that kernel's rows): not gemv_planes' at N = 1."""
    assert gemv_config("f16", 1) == GemvConfig("gemv", 1, 1) == choose_kernel("f16", 1, K=100)
    assert gemv_config("q4_0", 1) == GemvConfig("gemv", 2, 1)
    assert [gemv_config("q8_0", n).nt for n in (2, 3, 4, 5, 64)] == [2, 4, 4, 8, 8]
    assert gemv_config("f16", 512) == choose_kernel("f16", 512)
    for bad, match in ((("q5_0", 1), "q5_0"), (("q4_0", 0), "N")):
        with pytest.raises(ValueError, match=match):
            gemv_config(*bad)


def test_gguf_file_round_trip(gguf, tmp_path):
    """Tensors written with GGUFWriter and read back with GGUFReader go straight to
    matmul_q, without re-packing."""
    shapes = {"f16": (12, 72), "q8_0": (10, 96), "q4_0": (11, 64), "q4_k": (6, 512)}
    ws = {fmt: make_weights(gguf, fmt, M, K, seed=9) for fmt, (M, K) in shapes.items()}
    w = gguf.GGUFWriter(tmp_path / "w.gguf", "llama")
    for fmt, W in ws.items():
        w.add_tensor(f"blk.0.{fmt}.weight", W, raw_dtype=None if fmt == "f16" else qtype(gguf, fmt))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tensors = {t.name: t for t in gguf.GGUFReader(tmp_path / "w.gguf").tensors}
    for fmt, (M, K) in shapes.items():
        t = tensors[f"blk.0.{fmt}.weight"]
        wt = weights(t)
        assert (wt.fmt, wt.M, wt.K) == (fmt, M, K)
        X = np.random.default_rng(M).standard_normal((3, K)).astype(np.float32)
        check(matmul_q(t, X, backend="emulator"), reference(gguf, fmt, ws[fmt], X))


def test_device_arrays_in_device_arrays_out(gguf):
    W = make_weights(gguf, "q8_0", 20, 128, seed=2)
    X = np.random.default_rng(2).standard_normal((5, 128)).astype(np.float32)
    with pc.use_backend("emulator"):
        Wq = weights(W, "q8_0")
        y = matmul_q(Wq, pc.asarray(X))
        assert isinstance(y, pc.Array) and y.backend == "emulator" and y.shape == (5, 20)
        y2 = matmul_q(Wq, pc.asarray(X))              # the uploaded weights are reused
    assert len(Wq._arrays) == 1
    check(y.numpy(), reference(gguf, "q8_0", W, X))
    np.testing.assert_array_equal(y.numpy(), y2.numpy())


@pytest.mark.parametrize("fmt,M,K,N", [("q4_k", 128, 256, 1), ("q8_0", 33, 64, 2),
                                       ("f16", 128, 64, 2), ("q8_0", 33, 64, 1)])
def test_any_float_x(gguf, fmt, M, K, N):
    """X of any float dtype: an f16 pc.Array on every kernel (the plain gemv reads f32: it is
    widened on the device first), and NumPy f64 (read as f32) for a matrix and one vector."""
    W = make_weights(gguf, fmt, M, K, seed=3)
    X = np.random.default_rng(3).standard_normal((N, K))
    X16 = X.astype(np.float16)
    y = matmul_q(W, pc.asarray(X16, backend="emulator"), fmt)
    np.testing.assert_array_equal(y.numpy(), matmul_q(W, X16, fmt, backend="emulator"))
    check(y.numpy(), reference(gguf, fmt, W, X16.astype(np.float32)))
    for x in (X, X[0]):
        check(matmul_q(W, x, fmt, backend="emulator"),
              reference(gguf, fmt, W, x.astype(np.float32)))


@pytest.mark.parametrize("call,message", [
    (lambda: matmul_q(np.zeros((4, 16), np.float16),
                      pc.asarray(np.zeros((2, 16), np.int32), backend="emulator")),
     "a pc.Array X is float32 or float16, got int32"),
    (lambda: gemv("q5_k"), "unknown weight format 'q5_k'"),
    (lambda: gemv("q4_0", rows=0), "rows must be an int >= 1"),
    (lambda: gemv("q4_0", rows=8, nt=16), "at most 64"),
    (lambda: gemv("q4_0", subgroup_size=12), "subgroup_size must be"),
    (lambda: gemv("q4_0", vec=1), "vec is 8"),
    (lambda: gemv("q4_0", parts=8), "at most the 4 payload words"),
    (lambda: gemv("f16", parts=2), "1 for f16"),
    (lambda: gemv("q8_0", parts=3), "parts must be 1, 2, 4 or 8"),
    (lambda: choose_kernel("q4_0", 0), "N must be an int >= 1"),
    (lambda: weights(np.zeros((4, 36), np.uint8)), "pass fmt="),
    (lambda: weights(np.zeros((4, 35), np.uint8), "q4_0"), "whole 18-byte blocks"),
    (lambda: weights(np.zeros((4, 36), np.uint8), "q4_0", K=32), "hold K = 64"),
    (lambda: weights(np.zeros((4, 8), np.float32), "f16"), "float16"),
    (lambda: weights(np.zeros(8, np.float16)), "2-D"),
    (lambda: weights(np.zeros((0, 16), np.float16)), r"an empty matrix \(0 x 16 f16 weights\)"),
    (lambda: weights(np.zeros((0, 36), np.uint8), "q4_0"), "an empty matrix"),
    (lambda: quantize_q8_0(np.zeros((0, 64))), "a non-empty M x K matrix"),
    (lambda: quantize_q4_k(np.zeros((3, 0))), "a non-empty M x K matrix"),
    (lambda: matmul_q(np.zeros((4, 16), np.float16), np.zeros(16), config={"kind": "gemv"}),
     "config is a GemvConfig"),
    (lambda: matmul_q(np.zeros((4, 16), np.float16), np.zeros(16), large_n="64"),
     "large_n must be an int >= 1, got '64'"),
    (lambda: matmul_q(np.zeros((4, 16), np.float16), np.zeros(16), launches=()),
     "launches is a list"),
    (lambda: matmul_q(np.zeros((64, 64), np.float16), np.zeros((4, 64)),
                      config=GemvConfig("planes", tile=(64, 16, 64))),
     "the planes GEMMs take q4_0, q8_0, q4_k weights, not f16"),
    (lambda: matmul_q(np.zeros((64, 36), np.uint8), np.zeros((4, 64)), "q4_0",
                      config=GemvConfig("planes", tile=(64, 16, 64), split_k=0)),
     "split_k must be an int >= 1, got 0"),
    (lambda: weights(weights(np.zeros((4, 36), np.uint8), "q4_0"), "q8_0"),
     "these weights are q4_0, not fmt='q8_0'"),
    (lambda: matmul_q(weights(np.zeros((4, 36), np.uint8), "q4_0"), np.zeros(64, np.float32),
                      "q8_0"), "these weights are q4_0, not fmt='q8_0'"),
    (lambda: matmul_q(np.zeros((4, 16), np.float16), np.zeros((2, 8), np.float32)),
     "K = 16"),
    (lambda: matmul_q(np.zeros((4, 16), np.float16), np.zeros((70, 16), np.float32),
                      config=GemvConfig("coopmat")), "no cooperative-matrix GEMM for f16"),
])
def test_configuration_errors_before_any_work(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_unsupported_gguf_tensor_type_is_named(gguf):
    class T:                                          # the fields of a gguf.ReaderTensor
        name, tensor_type = "blk.0.ffn_down.weight", gguf.GGMLQuantizationType.Q5_K
        shape, data = np.array([256, 4]), np.zeros((4, 176), np.uint8)
    with pytest.raises(ValueError, match="blk.0.ffn_down.weight.*Q5_K.*F16, Q8_0, Q4_0, Q4_K"):
        weights(T())


def test_a_gguf_tensor_with_another_fmt_is_refused(gguf):
    class T:                                          # the fields of a gguf.ReaderTensor
        name, tensor_type = "blk.0.ffn_up.weight", gguf.GGMLQuantizationType.Q4_0
        shape, data = np.array([64, 4]), np.zeros((4, 36), np.uint8)
    assert weights(T()).fmt == weights(T(), "q4_0").fmt == "q4_0"
    with pytest.raises(ValueError, match="GGUF tensor 'blk.0.ffn_up.weight' is q4_0, not "
                                         "fmt='q8_0'"):
        weights(T(), "q8_0")
