"""gemv_planes: matrix-vector products (N = 1 ... 8) over the weight planes, on the emulator
(hypothesis over shapes, formats, configurations and both activation kinds) against gguf's
dequantisation and the NumPy twin, and through lavapipe (subgroups of 8)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import pycoop as pc
from pycoop.kernels import matmul_q, q8_1_error_bound, quantize_q8_1_reference, weights
from pycoop.kernels.gemv_planes import (PlanesGemvConfig, gemv_planes, matmul_planes_gemv,
                                        gemv_operands, planes_gemv_config, planes_gemv_reference,
                                        planes_weights, weight_planes)

from gemv_cases import check, gguf, make_weights, reference  # noqa: F401 (fixture)

FMTS = ["q4_0", "q8_0", "q4_k", "f16"]


def check_against_twin(y, twin, X_abs_dot):
    """Y against the f64 twin: f32 rounding of the products and sums only (a few ulps of the
    sum of |terms|)."""
    tol = 2e-6 * X_abs_dot.max() * np.sqrt(X_abs_dot.shape[-1] + 1) + 1e-6
    np.testing.assert_allclose(y, twin, rtol=1e-5, atol=tol)


@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(FMTS), x=st.sampled_from(["f32", "f16", "q8_1", "q8_1_shared"]),
       m=st.integers(1, 21),
       blocks=st.integers(1, 5), n=st.integers(1, 8), rows=st.integers(1, 3),
       nt=st.sampled_from([1, 2, 4, 8]), sg=st.integers(1, 3), span=st.integers(1, 3),
       split=st.sampled_from([1, 1, 2, 3]), prefetch=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_gemv_planes_against_gguf_and_twin(gguf, fmt, x, m, blocks, n, rows, nt, sg, span, split,
                                           prefetch, seed):
    """`split` subgroups share each row group (their sums meet in shared memory); the
    quantiser inside the kernel (x="q8_1_shared") gives the bits of the quantiser's launch
    (x="q8_1"); `prefetch` (the next step's weights loaded before this step's products)
    changes no bit."""
    assume(rows * nt * span <= 64)                          # else refused (tested below)
    if fmt == "f16" and x.startswith("q8_1"):
        x = "f32"
    K = blocks * {"q4_k": 256, "f16": 8}.get(fmt, 32) * (1 if fmt == "q4_k" else 4)
    W = make_weights(gguf, fmt, m, K, seed=seed)
    Wq = weights(W, None if fmt == "f16" else fmt)
    X = np.random.default_rng(seed).standard_normal((n, K)).astype(
        np.float16 if x == "f16" else np.float32)
    cfg = PlanesGemvConfig(x, rows, nt, sg * split, span, split=split)
    y = matmul_planes_gemv(Wq, X, cfg, backend="emulator", subgroup_size=8)
    if prefetch:
        np.testing.assert_array_equal(matmul_planes_gemv(
            Wq, X, dataclasses.replace(cfg, prefetch=True), backend="emulator", subgroup_size=8), y)
    Wf = planes_weights(Wq)
    absdot = np.abs(X).astype(np.float64) @ np.abs(Wf).T
    if x == "q8_1_shared":
        two = matmul_planes_gemv(Wq, X, dataclasses.replace(cfg, x="q8_1"), backend="emulator",
                                 subgroup_size=8)
        np.testing.assert_array_equal(y, two)
        units = K // {"q4_k": 256, "f16": 8}.get(fmt, 32)
        kg = max(d for d in (1, 2, 3, 4) if units % d == 0 and d <= seed % 4 + 1)
        if kg > 1:              # workgroups sharing K: other partial sums, added atomically
            yk = matmul_planes_gemv(Wq, X, dataclasses.replace(cfg, kgroups=kg),
                                    backend="emulator", subgroup_size=8)
            check_against_twin(yk, two, absdot)
    if not x.startswith("q8_1"):
        check_against_twin(y, planes_gemv_reference(Wq, X), absdot)
        check(y, reference(gguf, fmt, W, X))            # llama.cpp's weights: gguf's Y
    else:
        q8 = quantize_q8_1_reference(X)
        check_against_twin(y, planes_gemv_reference(Wq, q8=q8), absdot)
        ref = X.astype(np.float64) @ Wf.T                   # within X's quantisation
        bound = q8_1_error_bound(Wf, q8[1]) + 1e-5 * np.abs(ref).max() + 1e-6
        assert (np.abs(y - ref) <= bound).all()
    if fmt == "q4_k":               # the scale words keep d, dmin and the 6-bit factors
        ref = gguf.quants.dequantize(W, gguf.GGMLQuantizationType.Q4_K).astype(np.float64)
        np.testing.assert_array_equal(Wf, ref)


def test_planes_are_shared_with_the_planes_gemms():
    """weight_planes keeps the planes under the key matmul_q's planes GEMMs use, once."""
    rng = np.random.default_rng(0)
    W = rng.integers(0, 256, (64, 2 * 18), dtype=np.uint8)
    W[:, 0:2] = np.array([0.01], np.float16).view(np.uint8)
    W[:, 18:20] = np.array([0.02], np.float16).view(np.uint8)
    Wq = weights(W, "q4_0")
    Q, D = weight_planes(Wq)
    assert Wq._arrays[("planes", None)][0] is Q and weight_planes(Wq)[1] is D
    assert Q.shape == (128, 4) and D.dtype == np.float16
    assert gemv_operands(Wq)[0] is Q and gemv_operands(Wq)[1] is D


def q4_k_factors(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit scales and mins of each Q4_K super-block from its 12 scale bytes, one
    at a time as llama.cpp's get_scale_min_k4 reads them."""
    sc, mn = np.zeros(q.shape[:-1] + (8,), np.uint8), np.zeros(q.shape[:-1] + (8,), np.uint8)
    for idx in np.ndindex(q.shape[:-1]):
        b = [int(v) for v in q[idx]]
        for j in range(8):
            if j < 4:
                sc[idx + (j,)], mn[idx + (j,)] = b[j] & 63, b[j + 4] & 63
            else:
                sc[idx + (j,)] = (b[j + 4] & 0xF) | ((b[j - 4] >> 6) << 4)
                mn[idx + (j,)] = (b[j + 4] >> 4) | ((b[j] >> 6) << 4)
    return sc, mn


@pytest.mark.parametrize("gemv_first", [True, False])
@pytest.mark.parametrize("backend", [None, "emulator"])
def test_q4_k_gemv_and_gemm_planes_share_their_nibbles(gemv_first, backend):
    """Q4_K: the GEMV reads the planes' Q with its own scale words (5 u32 per super-block:
    d and dmin, then the 6-bit factors in pairs of sub-blocks), the GEMMs Q with f16 scale
    and min per sub-block; whichever is made first, one Q serves both."""
    rng = np.random.default_rng(1)
    W = rng.integers(0, 256, (3, 2, 144), dtype=np.uint8)
    W[..., 0:4] = np.array([0.5, 0.25], np.float16).view(np.uint8)
    Wq = weights(W.reshape(3, -1), "q4_k")
    first, second = (gemv_operands, weight_planes) if gemv_first else (weight_planes,
                                                                        gemv_operands)
    a, b = first(Wq, backend), second(Wq, backend)
    assert a[0] is b[0] and a[1] is not b[1]
    (Q, S), (_, D) = gemv_operands(Wq, backend), weight_planes(Wq, backend)
    S = np.asarray(S.numpy() if backend else S)
    assert Q.shape == (3 * 512 // 32, 4) and S.shape == (3 * 2 * 5,) and S.dtype == np.uint32
    words = S.reshape(3, 2, 5)
    np.testing.assert_array_equal(words[..., 0], W[..., 0:4].copy().view(np.uint32)[..., 0])
    sc, mn = q4_k_factors(W[..., 4:16])
    np.testing.assert_array_equal(words[..., 1:].view(np.uint8).reshape(3, 2, 8, 2),
                                  np.stack([sc, mn], -1))
    assert np.asarray(D.numpy() if backend else D).shape == (3 * 512 // 32, 2)


def test_q8_1_block_sums_and_offsets_exact():
    """Power-of-two scales and small integers: every product and sum is exact in f32, so the
    kernel equals the twin bit for bit (Q4_0's offset 8 through the activations' sums, Q4_K's
    min through them too)."""
    rng = np.random.default_rng(3)
    M, K, N = 9, 512, 3
    for fmt in ("q4_0", "q8_0", "q4_k"):
        size = {"q4_0": 18, "q8_0": 34, "q4_k": 144}[fmt]
        nb = M * K // {"q4_k": 256}.get(fmt, 32)
        b = rng.integers(0, 256, (nb, size), dtype=np.uint8)
        b[:, :2] = np.array([0.125], np.float16).view(np.uint8)
        if fmt == "q4_k":
            b[:, 2:4] = np.array([0.0625], np.float16).view(np.uint8)
            b[:, 4:16] = 1                                   # scales and mins 1 (6 bits)
        Wq = weights(b.reshape(M, -1), fmt)
        X = rng.integers(-127, 128, (N, K)).astype(np.float32)
        X[:, ::32] = 127.0                                   # d = 1 in every block
        y = matmul_planes_gemv(Wq, X, PlanesGemvConfig("q8_1", 2, 4, 2, 2), backend="emulator",
                               subgroup_size=8)
        np.testing.assert_array_equal(y, planes_gemv_reference(Wq, X).astype(np.float32))


@pytest.mark.parametrize("fmt", ["f16", "q4_0", "q8_0"])
def test_f16_x_is_read_as_f16_with_the_products_of_f32(gguf, fmt):
    """An f16 device array goes through the x="f16" kernel (half the bytes of x), f16 NumPy X
    is converted on the host: bit for bit what the f32 kernel gives for the same values;
    x="f16" rounds f32 NumPy X to f16, and refuses an f32 device array."""
    M, K = 13, 256
    W = make_weights(gguf, fmt, M, K, seed=5)
    Wq = weights(W, None if fmt == "f16" else fmt)
    X = np.random.default_rng(5).standard_normal((3, K)).astype(np.float16)
    for cfg in (PlanesGemvConfig("f32", 1, 4, 4, 2, split=2), PlanesGemvConfig("f32", 2, 2, 2, 1)):
        y = matmul_planes_gemv(Wq, X, cfg, backend="emulator", subgroup_size=8)
        np.testing.assert_array_equal(y, matmul_planes_gemv(Wq, X.astype(np.float32), cfg,
                                                            backend="emulator", subgroup_size=8))
        with pc.use_backend("emulator"):
            np.testing.assert_array_equal(
                matmul_planes_gemv(Wq, pc.asarray(X), cfg, subgroup_size=8).numpy(), y)
    f16 = PlanesGemvConfig("f16", 2, 2, 2, 1)              # the last configuration's y
    np.testing.assert_array_equal(
        matmul_planes_gemv(Wq, X.astype(np.float32), f16, backend="emulator", subgroup_size=8),
        y)
    with pc.use_backend("emulator"), pytest.raises(ValueError, match="x='f16' reads f16 X"):
        matmul_planes_gemv(Wq, pc.asarray(X.astype(np.float32)), f16, subgroup_size=8)


def test_device_arrays_and_f16_activations():
    rng = np.random.default_rng(1)
    W = rng.integers(0, 256, (20, 4 * 34), dtype=np.uint8)
    for i in range(4):
        W[:, 34 * i:34 * i + 2] = np.array([0.01], np.float16).view(np.uint8)
    Wq = weights(W, "q8_0")
    X = rng.standard_normal((3, 128)).astype(np.float16)
    cfg = PlanesGemvConfig("q8_1", 1, 4, 2, 1)
    with pc.use_backend("emulator"):
        y = matmul_planes_gemv(Wq, pc.asarray(X), cfg, subgroup_size=8)
    assert isinstance(y, pc.Array)
    np.testing.assert_array_equal(y.numpy(), matmul_planes_gemv(Wq, X, cfg, backend="emulator",
                                                                subgroup_size=8))


@pytest.mark.parametrize("call,message", [
    (lambda Wq: gemv_planes("q5_0"), "format is one of"),
    (lambda Wq: gemv_planes("q4_0", "i8"), "x is one of 'f32', 'f16', 'q8_1', 'q8_1_shared'"),
    (lambda Wq: gemv_planes("f16", "q8_1"), "f16 weights take x='f32' or 'f16'"),
    (lambda Wq: gemv_planes("f16", "q8_1_shared", K=64), "f16 weights take x='f32' or 'f16'"),
    (lambda Wq: gemv_planes("q4_0", "q8_1_shared"), "built for one K, a multiple of 32"),
    (lambda Wq: gemv_planes("q4_k", "q8_1_shared", K=512 + 32), "multiple of 256 for q4_k"),
    (lambda Wq: gemv_planes("q4_0", "q8_1_shared", K=14336, nt=2),
     "35840 bytes for nt=2, K=14336, more than 32768"),
    (lambda Wq: gemv_planes("q4_0", "q8_1_shared", K=64, src="f64"), "src .* 'f32' or 'f16'"),
    (lambda Wq: gemv_planes("q4_0", "q8_1", kgroups=2), "kgroups .* needs x='q8_1_shared'"),
    (lambda Wq: gemv_planes("q4_0", prefetch=1), "prefetch must be a bool, got 1"),
    (lambda Wq: gemv_planes("q4_0", "q8_1_shared", K=96, kgroups=2),
     "a multiple of 32 for q4_0 times kgroups=2; got K=96"),
    (lambda Wq: gemv_planes("q4_0", "q8_1_shared", K=64, kgroups=0), "kgroups must be an int"),
    (lambda Wq: matmul_planes_gemv(Wq, np.zeros((1, 64), np.float32),
                                   PlanesGemvConfig("q8_1_shared", kgroups=4)),
     "kgroups=4 needs K a multiple of 128 for q4_0, got K=64"),
    (lambda Wq: matmul_planes_gemv(Wq, np.zeros((2, 64), np.float32),
                                   PlanesGemvConfig("q8_1_shared", nt=2), backend="emulator"),
     None),
    (lambda Wq: gemv_planes("q4_0", nt=16), "nt .* at most 8"),
    (lambda Wq: gemv_planes("q4_0", rows=0), "rows must be an int >= 1"),
    (lambda Wq: gemv_planes("q4_0", rows=8, nt=8, span=2), "at most 64"),
    (lambda Wq: gemv_planes("q4_0", subgroup_size=12), "subgroup_size"),
    (lambda Wq: gemv_planes("q4_0", subgroups=4, split=3), r"split \(3\) must divide"),
    (lambda Wq: gemv_planes("q4_0", split=0), "split must be an int >= 1"),
    (lambda Wq: matmul_planes_gemv(Wq, np.zeros((9, 64), np.float32)), r"N = 1 \.\.\. 8"),
    (lambda Wq: matmul_planes_gemv(Wq, np.zeros((2, 32), np.float32)), "K = 64"),
    (lambda Wq: matmul_planes_gemv(Wq, np.zeros((2, 64), np.int32)), "X is f32 or f16"),
    (lambda Wq: planes_gemv_config("q4_0", 0), r"N = 1 \.\.\. 8"),
])
def test_errors_before_any_work(call, message):
    W = np.zeros((4, 2 * 18), np.uint8)
    if message is None:                                     # a valid call
        call(weights(W, "q4_0"))
        return
    with pytest.raises(ValueError, match=message):
        call(weights(W, "q4_0"))


def test_q8_1_shared_too_large_for_shared_memory_before_any_work():
    """x="q8_1_shared" with vectors too long for shared memory: refused before the weights'
    planes are made or anything runs."""
    Wq = weights(np.zeros((4, 14336 // 32 * 18), np.uint8), "q4_0")
    with pytest.raises(ValueError, match="use x='q8_1' \\(a quantiser launch\\)"):
        matmul_planes_gemv(Wq, np.zeros((2, 14336), np.float32),
                           PlanesGemvConfig("q8_1_shared", nt=2), backend="emulator")
    assert not Wq._arrays


def test_dispatcher_quantises_in_the_kernel_where_it_paid():
    """activations="q8_1", one vector: the quantiser inside gemv_planes (one launch; up to
    K = 4096 the bits of the two-launch path), above that with 4 workgroups sharing each row
    group's K (each quantising a quarter of X; partial sums added atomically), and
    deterministic=True keeps the quantiser's own launch there; f16 X too."""
    from pycoop.kernels import choose_kernel
    from pycoop.kernels.gemv_planes import KGROUPS_ABOVE_K
    assert choose_kernel("q4_0", 1, activations="q8_1", M=64, K=4096).x == "q8_1_shared"
    big = choose_kernel("q4_0", 1, activations="q8_1", M=64, K=14336)
    assert big.x == "q8_1_shared" and big.kgroups == 4
    assert choose_kernel("q4_0", 1, activations="q8_1", M=64, K=4096 + 32).x is None
    assert choose_kernel("q4_0", 2, activations="q8_1", M=64, K=4096).x is None
    assert choose_kernel("q4_0", 1, activations="q8_1").x is None      # K unknown
    assert KGROUPS_ABOVE_K == 4096
    rng = np.random.default_rng(4)
    W = rng.integers(0, 256, (24, 8 * 18), dtype=np.uint8)
    W[:, ::18], W[:, 1::18] = np.array([0.02], np.float16).view(np.uint8)
    Wq = weights(W, "q4_0")
    for dt in (np.float32, np.float16):
        X = rng.standard_normal(256).astype(dt)
        launches: list = []
        y = matmul_q(Wq, X, activations="q8_1", backend="emulator", launches=launches)
        assert len(launches) == 1
        two = matmul_planes_gemv(Wq, X, planes_gemv_config("q4_0", 1, "q8_1"),
                                 backend="emulator")
        np.testing.assert_array_equal(y, two)
    with pytest.raises(ValueError, match="takes activations='q8_1'"):
        matmul_q(Wq, X, backend="emulator",
                 config=choose_kernel("q4_0", 1, activations="q8_1", M=24, K=256))
    W = rng.integers(0, 256, (24, 160 * 18), dtype=np.uint8)               # K = 5120
    W[:, ::18], W[:, 1::18] = np.array([0.02], np.float16).view(np.uint8)
    Wq = weights(W, "q4_0")
    X = rng.standard_normal(5120).astype(np.float32)
    two = matmul_planes_gemv(Wq, X, planes_gemv_config("q4_0", 1, "q8_1"), backend="emulator")
    launches = []
    y = matmul_q(Wq, X, activations="q8_1", backend="emulator", launches=launches)
    assert len(launches) == 1
    np.testing.assert_allclose(y, two, rtol=1e-5, atol=1e-5 * np.abs(two).max())
    launches = []
    y = matmul_q(Wq, X, activations="q8_1", backend="emulator", launches=launches,
                 deterministic=True)
    assert len(launches) == 2 and np.array_equal(y, two)
    with pytest.raises(ValueError, match="deterministic=True takes no kgroups"):
        matmul_q(Wq, X, activations="q8_1", backend="emulator", deterministic=True,
                 config=choose_kernel("q4_0", 1, activations="q8_1", M=24, K=5120))


@pytest.mark.vulkan
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("x", ["f32", "f16", "q8_1", "q8_1_shared"])
@pytest.mark.parametrize("N,cfg", [(1, None), (5, None), (3, (3, 2, 2, 2)), (1, (2, 1, 4, 1, None, 2, 2)),
                                   (2, (2, 2, 2, 2, None, 2, 1, True)),
                                   (2, (2, 2, 4, 1, None, 4)), (1, (1, 1, 4, 2, None, 2))])
def test_gemv_planes_on_lavapipe(gguf, fmt, x, N, cfg):
    """Through the real Vulkan path (lavapipe: subgroups of 8): equal to the emulator up to
    the order of the f32 sums."""
    try:
        from pycoop.runtime.vulkan import get_runtime
        caps = get_runtime().capabilities
    except Exception as e:                                   # noqa: BLE001
        pytest.skip(f"no Vulkan device: {e}")
    if "arithmetic" not in caps.subgroup_operations or caps.subgroup_size < 8:
        pytest.skip("needs subgroup arithmetic and subgroups of at least 8")
    if fmt == "f16" and x.startswith("q8_1"):
        pytest.skip("f16 weights take x='f32' or 'f16'")
    M, K = 19, 512
    W = make_weights(gguf, fmt, M, K, seed=N)
    Wq = weights(W, None if fmt == "f16" else fmt)
    X = np.random.default_rng(N).standard_normal((N, K)).astype(np.float32)
    c = planes_gemv_config(fmt, N, x, K) if cfg is None else PlanesGemvConfig(x, *cfg)
    if c.kgroups > 1 and x != "q8_1_shared":
        pytest.skip("kgroups takes x='q8_1_shared'")
    S = caps.subgroup_size
    y = matmul_planes_gemv(Wq, X, c, backend="vulkan", subgroup_size=S)
    emu = matmul_planes_gemv(Wq, X, c, backend="emulator", subgroup_size=S)
    np.testing.assert_allclose(y, emu, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(emu).max()))
    if x == "f32":
        check(y, reference(gguf, fmt, W, X))


def test_kgroups_in_a_launch_graph_replay_to_the_same_sums(gguf):
    """With kgroups the workgroups add into a zeroed Y. Captured into a launch graph, that Y
    is zeroed at every replay (pc.zeros inside a capture), so each replay gives one launch's
    sums, not their running total."""
    M, K = 16, 256
    Wq = weights(make_weights(gguf, "q4_0", M, K, seed=3), "q4_0")
    X = np.random.default_rng(3).standard_normal((1, K)).astype(np.float32)
    cfg = PlanesGemvConfig("q8_1_shared", 2, 1, 2, 1, kgroups=2)
    x = pc.asarray(X, backend="emulator")
    direct = matmul_planes_gemv(Wq, x, cfg, backend="emulator", subgroup_size=8).numpy()
    with pc.capture(backend="emulator") as g:
        y = matmul_planes_gemv(Wq, x, cfg, backend="emulator", subgroup_size=8)
    for _ in range(3):
        g.launch()
        np.testing.assert_array_equal(y.numpy(), direct)
