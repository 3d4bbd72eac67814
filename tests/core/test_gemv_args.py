"""Argument checking of the GEMV entry points (`matmul_q`, `weights`, `choose_kernel`,
`GemvConfig` where they receive one, and the grid and kernel helpers): every bad argument is
a ValueError naming the function and the argument, raised before any work, never an internal
exception or a silently wrong result; and the valid spellings of each keep working."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import pycoop as pc
from pycoop.kernels import (GemvConfig, GGMLWeights, choose_kernel, gemv, gemv_grid, gemv_q8_1,
                            matmul_q, q8_1_error_bound, quantize_grid, quantize_q8_0,
                            quantize_q8_1, weights)
from pycoop.kernels.gemv import check_gemv_config, coopmat_kernel, planes_kernel
from pycoop.kernels.gemv_planes import gemv_planes, planes_gemv_config

M, K = 64, 256


def q4_0(seed: int = 0, rows: int = M) -> np.ndarray:
    """Raw Q4_0 blocks (rows x K) of random nibbles and a scale of 0.02."""
    W = np.random.default_rng(seed).integers(0, 256, (rows, K // 32 * 18), dtype=np.uint8)
    W[:, ::18], W[:, 1::18] = np.array([0.02], np.float16).view(np.uint8)
    return W


def X(n: int = 4, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, K)).astype(np.float32)


def refused(call, message: str, Wq: GGMLWeights | None = None) -> None:
    """`call` raises a ValueError matching `message`, having made none of Wq's arrays."""
    with pytest.raises(ValueError, match=message):
        call()
    assert Wq is None or not Wq._arrays


# --------------------------------------------------------------------- GemvConfig fields

P = "matmul_q: config"
BAD_CONFIGS = [
    (GemvConfig("planes", tile=(0, 16, 64)), rf"{P}.tile\[0\] must be an int >= 1, got 0"),
    (GemvConfig("planes", tile=(64, 0, 64)), rf"{P}.tile\[1\] must be an int >= 1, got 0"),
    (GemvConfig("planes", subgroups=0, tile=(64, 16, 64)),
     rf"{P}.subgroups must be an int >= 1, got 0"),
    (GemvConfig("planes", tile=None), rf"{P}.tile is a tuple of 3 ints \(weight rows, "
                                      r"vectors, K\), got None"),
    (GemvConfig("planes", tile=(64, 16)), rf"{P}.tile is a tuple of 3 ints"),
    (GemvConfig("planes", tile=(64, 16, 64, 1)), rf"{P}.tile is a tuple of 3 ints"),
    (GemvConfig("planes", tile=(64.0, 16, 64)), rf"{P}.tile\[0\] must be an int >= 1, got 64.0"),
    (GemvConfig("planes", tile=(64, 16, 48)), rf"{P}.tile's K step must be a multiple of 32"),
    (GemvConfig("planes", tile=(64, 16, 64), split_k=True),
     rf"{P}.split_k must be an int >= 1, got True"),
    (GemvConfig("planes", tile=(64, 16, 64), split_k=0), rf"{P}.split_k must be an int >= 1"),
    # tiles the subgroups do not divide: rows or vectors left uncomputed (silently wrong)
    (GemvConfig("planes", subgroups=4, tile=(32, 16, 256)),
     rf"{P}.tile's weight rows must be a multiple of 16 x config.subgroups = 64"),
    (GemvConfig("planes", subgroups=1, tile=(64, 144, 64)),
     rf"{P}.tile's vectors must be a multiple of 16 x 2"),
    (GemvConfig("planes", subgroups=1, tile=(64, 40, 64)),
     rf"{P}.tile's vectors must be a multiple of 16, got"),
    (GemvConfig("planes", subgroups=64, tile=(1024, 16, 64)),
     "2048 per workgroup; Vulkan devices take at most 1024"),
    (GemvConfig("coopmat", tile=(16, 64, 0)), rf"{P}.tile\[2\] must be an int >= 1, got 0"),
    (GemvConfig("coopmat", tile=(0, 64, 32)), rf"{P}.tile\[0\] must be an int >= 1, got 0"),
    (GemvConfig("coopmat", tile=(16, 64, 48)), rf"{P}.tile's K step must be a multiple of 32"),
    (GemvConfig("gemv", unroll=-1), rf"{P}.unroll is None, True, False or an int >= 2 .*, got -1"),
    (GemvConfig("gemv", unroll=1), rf"{P}.unroll is None, True, False or an int >= 2 .*, got 1"),
    (GemvConfig("gemv", unroll=2.0), rf"{P}.unroll is None"),
    (GemvConfig("gemv", rows=1.0), rf"{P}.rows must be an int >= 1, got 1.0"),
    (GemvConfig("gemv", nt=0), rf"{P}.nt must be an int >= 1, got 0"),
    (GemvConfig("gemv", parts=0), rf"{P}.parts must be an int >= 1, got 0"),
    (GemvConfig("gemv", tile=None), rf"{P}.tile is a tuple of 3 ints, got None"),
    (GemvConfig("gemv_planes", span=0), rf"{P}.span must be an int >= 1, got 0"),
    (GemvConfig("gemv_planes", kgroups="4"), rf"{P}.kgroups must be an int >= 1, got '4'"),
    (GemvConfig("gemv_planes", prefetch="yes"), rf"{P}.prefetch is True or False, got 'yes'"),
    (GemvConfig("gemv_planes", x="q8"), rf"{P}.x is None or one of 'f32'"),
    (GemvConfig("gemm"), rf"{P}.kind is one of 'gemv', 'q8_1', 'planes', 'gemv_planes', "
                         r"'coopmat', got 'gemm'"),
    (GemvConfig(None), rf"{P}.kind is one of .* got None"),
    # more than 1,024 invocations per workgroup, refused where the kernel is built
    (GemvConfig("gemv", subgroups=64), "gemv: subgroups x subgroup_size = 64 x 32 = 2048 "
                                       "invocations per workgroup"),
    (GemvConfig("gemv_planes", subgroups=64), "gemv_planes: subgroups x subgroup_size"),
]


@pytest.mark.parametrize("cfg,message", BAD_CONFIGS)
def test_matmul_q_refuses_a_bad_config_field_before_any_work(cfg, message):
    Wq = weights(q4_0(), "q4_0")
    n = 70 if cfg.kind == "coopmat" else 1 if cfg.kind == "gemv_planes" else 4
    refused(lambda: matmul_q(Wq, X(n), config=cfg, backend="emulator"), message, Wq)


def test_numpy_ints_in_a_config_are_taken_as_python_ints():
    """NumPy integers (a sweep's np.arange, say) are ints: the same kernel and result as
    Python ints; the config matmul_q works with holds Python ints (no float or NumPy key in
    the kernel caches)."""
    Wq = weights(q4_0(), "q4_0")
    x = X()
    i = np.int64
    for plain, numpy_ in (
            (GemvConfig("planes", subgroups=4, tile=(64, 16, 64), split_k=2),
             GemvConfig("planes", subgroups=i(4), tile=(i(64), np.int32(16), 64),
                        split_k=i(2))),
            (GemvConfig("gemv", 2, 2, 2, 2, 2),
             GemvConfig("gemv", i(2), i(2), i(2), i(2), i(2)))):
        a = matmul_q(Wq, x, config=plain, backend="emulator", deterministic=True)
        b = matmul_q(Wq, x, config=numpy_, backend="emulator", deterministic=np.True_)
        np.testing.assert_array_equal(a, b)
        c = check_gemv_config(numpy_)
        assert c == plain
        assert all(type(v) is int for v in (c.rows, c.nt, c.subgroups, c.split_k, *c.tile))


def test_valid_configs_pass_the_check_unchanged():
    for cfg in (choose_kernel("q4_0", 1), choose_kernel("q4_0", 4, M=M, K=K),
                choose_kernel("q4_0", 100), choose_kernel("q8_0", 3, activations="q8_1"),
                choose_kernel("q4_0", 1, activations="q8_1", M=M, K=14336),
                GemvConfig("gemv", 2, 2, unroll=True), GemvConfig("q8_1", 1, 8, 2, None, 1),
                GemvConfig("planes", subgroups=2, tile=(128, 128, 64), split_k=2)):
        assert check_gemv_config(cfg) == cfg


def test_planes_and_coopmat_kernel_builders_check_their_arguments():
    refused(lambda: planes_kernel("q4_0", GemvConfig("planes", tile=(0, 16, 64))),
            r"planes_kernel: config.tile\[0\] must be an int >= 1")
    refused(lambda: planes_kernel("q4_0", GemvConfig("gemv")),
            "planes_kernel: config.kind is 'planes', got 'gemv'")
    refused(lambda: planes_kernel("f16", GemvConfig("planes", tile=(64, 16, 64))),
            "planes_kernel: the planes GEMMs take q4_0, q8_0, q4_k weights, not fmt='f16'")
    refused(lambda: coopmat_kernel("q4_0", (16, 64, 0)),
            r"coopmat_kernel: tile\[2\] must be an int >= 1, got 0")
    refused(lambda: coopmat_kernel("q4_0", None), "coopmat_kernel: tile is a tuple of 3 ints")
    refused(lambda: coopmat_kernel("f16", (16, 64, 32)),
            "coopmat_kernel: the decode-function GEMMs take .*not fmt='f16'")


# --------------------------------------------------------------------- matmul_q's arguments

@pytest.mark.parametrize("x,message", [
    (np.zeros((0, K), np.float32), r"matmul_q: X has no rows \(shape \(0, 256\)\)"),
    (None, r"matmul_q: X holds real numbers .*, got None$"),
    (3.0, "matmul_q: X must be N x K or K, got a scalar 3.0"),
    (np.ones((2, K), np.complex64), "matmul_q: X holds real numbers .* got an array of complex64"),
    (np.full((2, K), "1.5"), "matmul_q: X holds real numbers .* got an array of <U3"),
    (np.ones((2, K), bool), "got an array of bool"),
    (np.ones((1, 2, K), np.float32), r"X must be N x K or K with K = 256 .* shape \(1, 2, 256\)"),
])
def test_matmul_q_refuses_an_x_it_cannot_multiply(x, message):
    Wq = weights(q4_0(), "q4_0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no ComplexWarning on the way to the error
        refused(lambda: matmul_q(Wq, x, backend="emulator"), message, Wq)


def test_matmul_q_takes_real_x_of_every_documented_dtype():
    Wq = weights(q4_0(), "q4_0")
    xi = np.random.default_rng(2).integers(-3, 4, (2, K))
    want = matmul_q(Wq, xi.astype(np.float32), backend="emulator")
    for x in (xi, xi.astype(np.int8), xi.astype(np.float64), xi.astype(np.float16),
              xi.tolist()):
        np.testing.assert_array_equal(matmul_q(Wq, x, backend="emulator"), want)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    np.testing.assert_array_equal(
        matmul_q(Wq, xi.astype(ml_dtypes.bfloat16), backend="emulator"), want)


@pytest.mark.parametrize("n", [1, 4])        # gemv_planes, and the planes GEMM
@pytest.mark.parametrize("kw,message", [
    (dict(subgroup_size=7), "matmul_q: subgroup_size must be 8, 16, 32, 64 or 128"),
    (dict(subgroup_size="32"), r"matmul_q: subgroup_size must be .*, got '32'"),
    (dict(subgroup_size=None), "matmul_q: subgroup_size must be .*, got None"),
    (dict(subgroup_size=True), "matmul_q: subgroup_size must be .*, got True"),
    (dict(subgroup_size=0), "matmul_q: subgroup_size must be .*, got 0"),
    (dict(subgroup_size=32.0), "matmul_q: subgroup_size must be .*, got 32.0"),
    (dict(deterministic="no"), "matmul_q: deterministic is True or False, got 'no'"),
    (dict(deterministic=None), "matmul_q: deterministic is True or False, got None"),
    (dict(activations="int8"), r"matmul_q: activations is 'f32' .* or 'q8_1' .*got 'int8'"),
    (dict(activations=["f32"]), r"matmul_q: activations is 'f32' .*got \['f32'\]"),
    (dict(fmt=["q8_0"]), r"matmul_q: unknown weight format \['q8_0'\]"),
    (dict(large_n=0), "matmul_q: large_n must be an int >= 1, got 0"),
])
def test_matmul_q_checks_its_keywords_on_every_path(n, kw, message):
    W = q4_0()
    refused(lambda: matmul_q(W, X(n), **{"fmt": "q4_0", **kw}, backend="emulator"), message)


def test_matmul_q_names_itself_for_activations_its_weights_do_not_take():
    refused(lambda: matmul_q(np.zeros((4, 32), np.float16), np.zeros(32, np.float32),
                             activations="q8_1"),
            "matmul_q: activations='q8_1' takes q8_0, q4_0 or q4_k weights, not f16")


def test_matmul_q_takes_numpy_bools_and_ints_for_its_keywords():
    Wq = weights(q4_0(), "q4_0")
    x = X()
    want = matmul_q(Wq, x, backend="emulator", deterministic=True)
    got = matmul_q(Wq, x, backend="emulator", deterministic=np.bool_(True),
                   subgroup_size=np.int64(32), large_n=np.int64(64))
    np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------- weights

class _TensorType:
    """A gguf.GGMLQuantizationType's one field that `weights` reads."""

    def __init__(self, name):
        self.name = name


class _Tensor:
    """The fields of a gguf.ReaderTensor that `weights` reads."""

    def __init__(self, tensor_type, data):
        self.name, self.tensor_type, self.data = "blk.0.ffn_up.weight", tensor_type, data
        self.shape = np.array([data.shape[1] // 18 * 32, data.shape[0]])


@pytest.mark.parametrize("fields,message", [
    (("q8_0", 40, 32), r"40 x 32 q8_0 weights are a contiguous 40 x 34 uint8 array, got "
                       r"\(40, 68\) uint8"),
    (("q8_0", 20, 64), r"20 x 64 q8_0 weights are a contiguous 20 x 68 uint8 array, got "
                       r"\(40, 68\)"),
    (("q5_0", 40, 64), "fmt must be one of"),
    (("q8_0", 40, 48), "K a multiple of 32"),
    (("f16", 40, 34), r"contiguous 40 x 34 float16 array, got \(40, 68\) uint8"),
])
def test_ggml_weights_made_by_hand_must_match_their_bytes(fields, message):
    """GGMLWeights whose fields disagree with their bytes would have the kernels read past
    them or as another shape: refused when made, naming `weights(...)`."""
    raw = np.zeros((40, 68), np.uint8)
    with pytest.raises(ValueError, match=message + ".*pycoop.kernels.weights" if "array" in
                       message else message):
        GGMLWeights(*fields, raw)
    w = GGMLWeights("q8_0", 40, 64, raw)
    assert (w.M, w.K, w.nbytes) == (40, 64, 40 * 68)


def test_weights_refuses_a_k_that_contradicts_the_weights():
    Wq = weights(q4_0(), "q4_0")
    assert weights(Wq, K=K) is Wq and weights(Wq, "q4_0", np.int64(K)) is Wq
    refused(lambda: weights(Wq, K=128), "weights: these weights have K = 256 columns, not K=128")
    refused(lambda: weights(q4_0(), "q8_0", K="256"), "weights: K must be an int >= 1, got '256'")
    refused(lambda: weights(q4_0(), "q4_0", K=0), "weights: K must be an int >= 1, got 0")
    refused(lambda: weights(np.zeros((4, 16), np.float16), K=8),
            "weights: this f16 matrix has K = 16 columns, not K=8")
    assert weights(np.zeros((4, 16), np.float16), K=16).K == 16
    t = _Tensor(_TensorType("Q4_0"), q4_0(rows=4))
    assert weights(t, K=K).K == K
    refused(lambda: weights(t, K=512), "weights: GGUF tensor 'blk.0.ffn_up.weight' has K = 256 "
                                       "columns, not K=512")
    refused(lambda: weights(q4_0(), ["q4_0"]), r"weights: unknown weight format \['q4_0'\]")


def test_weights_names_a_tensor_type_without_a_name():
    refused(lambda: weights(_Tensor(3, q4_0(rows=4))),
            "weights: W has a tensor_type and data.*tensor_type 3 is no "
            r"gguf.GGMLQuantizationType \(it has no name\)")


@pytest.mark.parametrize("N", [1, 4, 70])
def test_weights_are_a_snapshot_of_a_writeable_source(N):
    """A writeable source is copied: changing it afterwards changes no result, on any path
    (the kernels keep planes and padded words made from the bytes, and some paths read views
    of them: before, some paths saw a change and others did not). The copy is read-only."""
    rng = np.random.default_rng(N)
    W32 = rng.standard_normal((64, 256)).astype(np.float32)
    raw = quantize_q8_0(W32)
    Wq = weights(raw, "q8_0")
    X = rng.standard_normal((N, 256)).astype(np.float32)
    before = np.asarray(matmul_q(Wq, X, backend="emulator"))
    raw[:] = quantize_q8_0(-W32)
    np.testing.assert_array_equal(np.asarray(matmul_q(Wq, X, backend="emulator")), before)
    assert not np.shares_memory(Wq.data, raw)
    with pytest.raises(ValueError, match="read-only"):
        Wq.data[0, 0] = 1


def test_weights_keep_a_read_only_source_uncopied():
    """A read-only source (a GGUF file's memory map) is used in place."""
    W = q4_0()
    W.flags.writeable = False
    assert np.shares_memory(weights(W, "q4_0").data, W)


# --------------------------------------------------------------------- helpers

@pytest.mark.parametrize("call,message", [
    (lambda: gemv_grid(64, 4, 0), "gemv_grid: rows must be an int >= 1, got 0"),
    (lambda: gemv_grid(64, 4, subgroups=0), "gemv_grid: subgroups must be an int >= 1, got 0"),
    (lambda: gemv_grid(64, 4, nt=0), "gemv_grid: nt must be an int >= 1, got 0"),
    (lambda: gemv_grid(0, 4), "gemv_grid: M must be an int >= 1, got 0"),
    (lambda: gemv_grid(64, 4.0), "gemv_grid: N must be an int >= 1, got 4.0"),
    (lambda: quantize_grid(10, 0), "quantize_grid: subgroups must be an int >= 1, got 0"),
    (lambda: quantize_grid(10, 4, 0), "quantize_grid: subgroup_size must be 8, 16, 32, 64"),
    (lambda: quantize_grid(0), "quantize_grid: nb must be an int >= 1, got 0"),
    (lambda: q8_1_error_bound(np.ones((4, 64)), np.ones(3)),
     r"q8_1_error_bound: d is N x K/32 = N x 2 .*got shape \(3,\)"),
    (lambda: q8_1_error_bound(np.ones((4, 64)), np.ones((1, 3))),
     r"q8_1_error_bound: d is N x K/32 = N x 2 .*got shape \(1, 3\)"),
    (lambda: q8_1_error_bound(np.ones(64), np.ones((1, 2))),
     r"q8_1_error_bound: Wf is M x K with K a multiple of 32, got shape \(64,\)"),
    (lambda: choose_kernel("q4_0", 4, M="64", K=256),
     "choose_kernel: M must be an int >= 1, got '64'"),
    (lambda: choose_kernel("q4_0", 4, M=64.5, K=256), "choose_kernel: M must be an int >= 1"),
    (lambda: choose_kernel("q4_0", 4, M=64, K=-256),
     "choose_kernel: K must be an int >= 1, got -256"),
    (lambda: choose_kernel("q4_0", 4, large_n=0), "choose_kernel: large_n must be an int >= 1"),
    (lambda: choose_kernel("q4_0", True), "choose_kernel: N must be an int >= 1, got True"),
    (lambda: choose_kernel("q4_0", 0), "choose_kernel: N must be an int >= 1, got 0"),
    (lambda: choose_kernel(["q4_0"], 1), r"choose_kernel: unknown weight format \['q4_0'\]"),
    (lambda: choose_kernel("q4_0", 1, activations=None), "choose_kernel: activations is"),
    (lambda: planes_gemv_config("q4_0", True), r"N = 1 \.\.\. 8 vectors, got True"),
    # workgroups of more than 1,024 invocations, and loop hints pc.range does not take
    (lambda: gemv("q4_0", subgroups=64), "gemv: subgroups x subgroup_size = 64 x 32 = 2048 "
                                         r"invocations per workgroup; .* at most 1024"),
    (lambda: gemv("q4_0", subgroups=16, subgroup_size=128), "gemv: .* = 2048 invocations"),
    (lambda: gemv_q8_1("q4_0", subgroups=64), "gemv_q8_1: subgroups x subgroup_size"),
    (lambda: quantize_q8_1("f32", 64), "quantize_q8_1: subgroups x subgroup_size"),
    (lambda: gemv_planes("q4_0", subgroups=64), "gemv_planes: subgroups x subgroup_size"),
    (lambda: gemv("q4_0", unroll=-1), "gemv: unroll is None, True, False or an int >= 2"),
    (lambda: gemv_q8_1("q4_0", unroll=0), "gemv_q8_1: unroll is None"),
    (lambda: gemv_planes("q4_0", unroll="2"), "gemv_planes: unroll is None"),
])
def test_helpers_refuse_bad_arguments(call, message):
    refused(call, message)


def test_helpers_take_their_largest_valid_arguments():
    assert gemv_grid(np.int64(64), 4, 2, 2, 4) == (2, 8)
    assert quantize_grid(np.int64(10), 4, 32) == 1
    assert choose_kernel("q4_0", np.int64(4), M=np.int64(M), K=K).kind == "planes"
    gemv("q4_0", subgroups=32)                          # 1,024 invocations
    gemv("q4_0", unroll=2)
    gemv_planes("q4_0", subgroups=16, split=2, subgroup_size=64)
    bound = q8_1_error_bound(np.ones((4, 64)), np.ones((3, 2)))
    assert bound.shape == (3, 4)
    y = matmul_q(q4_0(), pc.asarray(X(), backend="emulator"), "q4_0",
                 config=GemvConfig("gemv", 2, 2, 2, 2))
    assert y.shape == (4, M)


@pytest.mark.parametrize("activations", ["q8_1", "f32"])
def test_the_dispatchers_choice_fits_wide_subgroups(activations):
    """`choose_kernel` tunes for subgroups of 32; `matmul_q` with subgroups of 128 halves the
    chosen subgroups until the workgroup holds at most 1,024 invocations (16 x 128 was
    refused) and gives the same products up to the order of the f32 sums."""
    from pycoop.kernels.gemv import _fit_subgroups
    W, x = q4_0(rows=128), X(1)[0]
    cfg = choose_kernel("q4_0", 1, activations=activations, M=128, K=K)
    wide = _fit_subgroups(cfg, 128)
    assert wide.subgroups * 128 <= 1024 and wide.subgroups % wide.split_k == 0
    assert _fit_subgroups(cfg, 32) == cfg
    narrow = matmul_q(W, x, "q4_0", activations=activations, backend="emulator")
    y = matmul_q(W, x, "q4_0", activations=activations, subgroup_size=128, backend="emulator")
    np.testing.assert_allclose(y, narrow, rtol=1e-5, atol=1e-5 * np.abs(narrow).max())
