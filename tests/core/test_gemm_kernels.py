"""The ready-made GEMMs of pycoop.kernels on the emulator, in every option the benchmarks
tune: results against NumPy, and shape specialisation keeping the K loop a loop."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import pycoop as pc
from pycoop.kernels import (dequantize_q4_k, dequantize_q8_0, gemm_khr_staged, gemm_nv,
                            gemm_q4_0, gemm_q4_0_planes, gemm_q4_0_staged, gemm_q4_k,
                            gemm_q4_k_planes, gemm_q8_0, gemm_q8_0_planes, gemm_reference,
                            q4_0_planes, q4_k_planes, q4_k_scale_words, q8_0_planes, sum_splits)

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
from q4_0_gemm import dequantize_q4_0, quantize_q4_0  # noqa: E402


def operands(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(np.float16),
            rng.standard_normal((k, n)).astype(np.float16))


def loop_controls(ck) -> list[str]:
    return [ln.split()[-1] for ln in ck.spvasm.splitlines() if "OpLoopMerge" in ln]


@pytest.mark.parametrize("specialize,driver_unroll,vector_copy", [
    (False, None, False), (True, None, False), (True, False, False), (False, 2, False),
    (False, None, True), (True, None, True), (True, True, False), (False, True, False)])
def test_staged_khr_gemm(specialize, driver_unroll, vector_copy):
    cfg = (64, 64, 32, 2, 2, 8)
    M, N, K = 128, 64, 96
    A, B = operands(M, N, K)
    C = np.zeros((M, N), np.float32)
    k = gemm_khr_staged(*cfg, specialize=specialize, driver_unroll=driver_unroll,
                        vector_copy=vector_copy)
    a, b = (A.view(np.uint32).reshape(-1, 4), B.view(np.uint32).reshape(-1, 4)) if vector_copy \
        else (A, B)
    k[(M // 64, N // 64)](a, b, C, M, N, K, backend="emulator")
    np.testing.assert_allclose(C, gemm_reference(A, B), rtol=1e-5, atol=1e-4)
    ck = k.compile(**({"M": M, "N": N, "K": K} if specialize else {}))
    want = {None: "None", False: "DontUnroll", 2: "2", True: "Unroll"}[driver_unroll]
    # one K loop, unrolled at trace time only with unroll=True and constant bounds (K fixed)
    assert loop_controls(ck) == ([] if driver_unroll is True and specialize else [want])


@pytest.mark.parametrize("clamp,M,N,K", [("constant", 100, 72, 80), ("undefined", 128, 128, 128)])
@pytest.mark.parametrize("unroll,specialize", [(1, False), (2, True)])
def test_nv_gemm(clamp, M, N, K, unroll, specialize):
    A, B = operands(M, N, K, seed=1)
    C = np.zeros((M, N), np.float32)
    gemm_nv(64, 64, 32, 128, clamp, unroll, specialize)[(-(-M // 64), -(-N // 64))](
        A, B, C, M, N, K, backend="emulator")
    np.testing.assert_allclose(C, gemm_reference(A, B), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("weights_first", [True, False])
@pytest.mark.parametrize("clamp,M,N,K,specialize", [("constant", 100, 72, 96, False),
                                                    ("undefined", 128, 64, 64, True)])
def test_q4_0_gemm(weights_first, clamp, M, N, K, specialize):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((M, K)).astype(np.float16)
    Wq = quantize_q4_0(rng.standard_normal((N, K)).astype(np.float32))
    Y = np.zeros((M, N), np.float32)
    k = gemm_q4_0(64, 32, 32, 128, 1, specialize, clamp=clamp, weights_first=weights_first)
    k[(-(-M // 64), -(-N // 32))](X, Wq, Y, M, N, K, backend="emulator")
    W = dequantize_q4_0(Wq, N, K).astype(np.float32)
    np.testing.assert_allclose(Y, X.astype(np.float32) @ W.T, rtol=1e-4, atol=1e-3)


def test_vector_copy_needs_whole_uvec4_per_invocation():
    with pytest.raises(ValueError, match="whole number of uvec4 per invocation"):
        gemm_khr_staged(64, 64, 16, 2, 4, 8, vector_copy=True)     # 128 uvec4, 256 invocations
    with pytest.raises(ValueError, match="pad a multiple of 8"):
        gemm_khr_staged(64, 64, 32, 2, 2, 4, vector_copy=True)


def test_q4_0_gemm_needs_whole_blocks_along_k():
    with pytest.raises(ValueError, match="multiple of the 32-weight Q4_0 block"):
        gemm_q4_0(64, 64, 16)


@pytest.mark.parametrize("cfg,M,N,K,specialize", [
    ((64, 64, 64, 2, 2), 128, 64, 64, True),          # one k-step; a partial round of raw words
    ((64, 64, 128, 2, 2), 64, 128, 384, False),       # 18 words per row, even: padded stride
    ((64, 32, 64, 2, 1), 64, 64, 256, True),          # more half blocks than invocations
    ((128, 64, 64, 4, 2), 128, 64, 128, False)])      # as many half blocks as invocations
def test_q4_0_staged_gemm(cfg, M, N, K, specialize):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((M, K)).astype(np.float16)
    W = rng.standard_normal((N, K)).astype(np.float32)
    W[:, :32] *= 1e-3                                  # small scales next to large ones
    Wq = quantize_q4_0(W)
    Y = np.zeros((M, N), np.float32)
    k = gemm_q4_0_staged(*cfg, specialize=specialize)
    k[(M // cfg[0], N // cfg[1])](X.view(np.uint32).reshape(-1, 4), Wq.view(np.uint32), Y, M, N, K,
                                  backend="emulator")
    want = X.astype(np.float32) @ dequantize_q4_0(Wq, N, K).astype(np.float32).T
    np.testing.assert_allclose(Y, want, rtol=1e-5, atol=1e-4)
    ck = k.compile(**({"M": M, "N": N, "K": K} if specialize else {}))
    assert loop_controls(ck) == ["None"]


def test_q4_0_staged_gemm_checks_its_tiling():
    with pytest.raises(ValueError, match="BK a multiple of 64"):
        gemm_q4_0_staged(64, 64, 32)
    with pytest.raises(ValueError, match="half Q4_0 blocks per invocation"):
        gemm_q4_0_staged(128, 32, 64, 4, 2)            # 128 half blocks for 256 invocations


def test_q4_0_planes_round_trip_the_blocks():
    rng = np.random.default_rng(5)
    Wq = quantize_q4_0(rng.standard_normal((3, 96)).astype(np.float32))
    Q, D = q4_0_planes(Wq, 3, 96)
    assert Q.shape == (9, 4) and Q.dtype == np.uint32 and D.shape == (9,) and D.dtype == np.float16
    blocks = np.concatenate([D.view(np.uint8).reshape(9, 2), Q.view(np.uint8).reshape(9, 16)], 1)
    np.testing.assert_array_equal(blocks.reshape(-1), Wq)


@pytest.mark.parametrize("cfg,M,N,K,specialize", [
    ((64, 64, 64, 2, 2), 128, 64, 64, True),          # one k-step
    ((64, 64, 32, 1, 2), 64, 128, 96, False),         # one block per row and k-step
    ((64, 64, 128, 2, 2), 64, 64, 256, True),         # four blocks per row and k-step
    ((128, 64, 64, 4, 2), 128, 64, 128, False)])      # as many blocks as invocations
def test_q4_0_planes_gemm(cfg, M, N, K, specialize):
    rng = np.random.default_rng(3)
    W = rng.standard_normal((M, K)).astype(np.float32)
    W[:, :32] *= 1e-3                                  # small scales next to large ones
    Wq = quantize_q4_0(W)
    X = rng.standard_normal((K, N)).astype(np.float16)
    Y = np.zeros((M, N), np.float32)
    k = gemm_q4_0_planes(*cfg, specialize=specialize)
    k[(M // cfg[0], N // cfg[1])](*q4_0_planes(Wq, M, K), X.view(np.uint32).reshape(-1, 4), Y,
                                  M, N, K, backend="emulator")
    want = dequantize_q4_0(Wq, M, K).astype(np.float32) @ X.astype(np.float32)
    np.testing.assert_allclose(Y, want, rtol=1e-5, atol=1e-4)
    ck = k.compile(**({"M": M, "N": N, "K": K} if specialize else {}))
    assert loop_controls(ck) == ["None"]


def test_q4_0_planes_gemm_checks_its_tiling():
    with pytest.raises(ValueError, match="BK a multiple of 32"):
        gemm_q4_0_planes(64, 64, 48)
    with pytest.raises(ValueError, match="Q4_0 blocks per invocation"):
        gemm_q4_0_planes(64, 64, 32, 2, 2)             # 64 blocks for 128 invocations


def split_k_case(kind, split_k):
    """(launch(P), A, B, M, N, K) for a split-K GEMM of `kind` writing its stacked
    partial products into P; A and B are f16, the weights dequantised for Q4_0."""
    rng = np.random.default_rng(11)
    if kind == "nv constant":                     # ragged M, N and K: edges clamped and clipped
        M, N, K = 72, 40, 100
        A, B = operands(M, N, K, seed=11)
        return (lambda P: gemm_nv(64, 32, 32, 128, split_k=split_k)[(2, 2, split_k)](
            A, B, P, M, N, K, backend="emulator")), A, B, M, N, K
    M, N, K = 128, 64, 64 * split_k * 2
    if kind == "q4_0 planes":
        Wq = quantize_q4_0(rng.standard_normal((M, K)).astype(np.float32))
        X = rng.standard_normal((K, N)).astype(np.float16)
        return (lambda P: gemm_q4_0_planes(64, 64, 64, 2, 2, specialize=True, split_k=split_k)[
            (2, 1, split_k)](*q4_0_planes(Wq, M, K), X.view(np.uint32).reshape(-1, 4), P, M, N, K,
                             backend="emulator")), dequantize_q4_0(Wq, M, K), X, M, N, K
    A, B = operands(M, N, K, seed=12)
    if kind == "nv undefined":
        return (lambda P: gemm_nv(64, 64, 32, 128, "undefined", 2, True, split_k=split_k)[
            (2, 1, split_k)](A, B, P, M, N, K, backend="emulator")), A, B, M, N, K
    vec = kind == "khr vector"
    a, b = (A.view(np.uint32).reshape(-1, 4), B.view(np.uint32).reshape(-1, 4)) if vec else (A, B)
    return (lambda P: gemm_khr_staged(64, 64, 64, 2, 2, vector_copy=vec, split_k=split_k)[
        (2, 1, split_k)](a, b, P, M, N, K, backend="emulator")), A, B, M, N, K


@pytest.mark.parametrize("kind", ["khr", "khr vector", "nv constant", "nv undefined", "q4_0 planes"])
@pytest.mark.parametrize("split_k", [2, 3])
def test_split_k_gemms_write_each_share_of_k_and_sum_splits_adds_them(kind, split_k):
    launch, A, B, M, N, K = split_k_case(kind, split_k)
    P = np.full((split_k * M, N), np.nan, np.float32)
    launch(P)
    A, B = A.astype(np.float32), B.astype(np.float32)
    step = -(-K // split_k)
    if kind == "nv constant":                     # shares of whole k-steps (2 of 32 here)
        step = -(-K // (32 * split_k)) * 32
    for z in range(split_k):
        ks = slice(z * step, (z + 1) * step)
        np.testing.assert_allclose(P[z * M:(z + 1) * M], A[:, ks] @ B[ks], rtol=1e-5, atol=1e-4)
    Y = np.full((M, N), np.nan, np.float32)
    n4 = M * N // 4
    sum_splits(split_k)[(-(-n4 // 256),)](P.reshape(-1, 4), Y.reshape(-1, 4), n4,
                                           backend="emulator")
    np.testing.assert_allclose(Y, A @ B, rtol=1e-5, atol=1e-4)
    parts = P.reshape(split_k, M, N)
    want = parts[0]
    for z in range(1, split_k):                   # f32 sums in split order, bit for bit
        want = want + parts[z]
    np.testing.assert_array_equal(Y, want)


def test_split_k_gemms_check_their_tiling():
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="split_k must be an int >= 1"):
            gemm_khr_staged(64, 64, 32, 2, 2, split_k=bad)
    with pytest.raises(ValueError, match=r"K a multiple of 64 x 2 \(BK x split_k\)"):
        gemm_q4_0_planes(64, 64, 64, 2, 2, specialize=True, split_k=2).compile(M=64, N=64, K=192)
    with pytest.raises(ValueError, match="N of 64 and K a multiple of 32; got M=64, N=96"):
        gemm_khr_staged(64, 64, 32, 2, 2, specialize=True).compile(M=64, N=96, K=64)
    with pytest.raises(ValueError, match=r"K a multiple of 64 x 3"):
        gemm_nv(64, 64, 32, 128, "undefined", 2, True, split_k=3).compile(M=64, N=64, K=128)
    gemm_nv(64, 64, 32, 128, split_k=3).compile()     # edges handled: any shape


def test_library_kernel_ops_point_at_their_own_source():
    """A kernel of pycoop.kernels is DSL code like the user's: its ops carry the lines of
    gemm.py that made them (the K-loop loads, the stores of the tile helper), not the line of
    whoever compiled it."""
    import inspect

    import pycoop.kernels.gemm as gemm
    ck = gemm.gemm_khr_staged(128, 128, 32, 2, 2).compile()
    lines = inspect.getsource(gemm).splitlines()
    locs = {(op.name, op.loc.file, op.loc.line) for op in ck.module.walk()}
    assert {f for _, f, _ in locs} == {gemm.__file__}
    stores = {ln for name, _, ln in locs if name == "khr.store"}
    store_line = next(i for i, t in enumerate(lines, 1) if "pc.store(C, (m0 + 16 * i)" in t)
    assert store_line in stores


# (factory, valid int arguments, their names): every cached GEMM factory
FACTORIES = [
    (gemm_khr_staged, (64, 64, 32, 2, 2), ("BM", "BN", "BK", "SGM", "SGN")),
    (gemm_nv, (64, 64, 32, 128), ("BM", "BN", "BK", "invocations")),
    (gemm_q4_0, (64, 64, 32, 128), ("BM", "BN", "BK", "invocations")),
    (gemm_q4_0_staged, (64, 64, 64, 2, 1), ("BM", "BN", "BK", "SGM", "SGN")),
    (gemm_q4_0_planes, (64, 64, 64, 2, 1), ("BM", "BN", "BK", "SGM", "SGN")),
    (gemm_q8_0, (64, 64, 32, 128), ("BM", "BN", "BK", "invocations")),
    (gemm_q4_k, (64, 64, 32, 128), ("BM", "BN", "BK", "invocations")),
    (gemm_q8_0_planes, (64, 64, 64, 2, 1), ("BM", "BN", "BK", "SGM", "SGN")),
    (gemm_q4_k_planes, (64, 64, 64, 2, 1), ("BM", "BN", "BK", "SGM", "SGN"))]


@pytest.mark.parametrize("factory,args,arg,i", [
    (f, args, arg, i) for f, args, names in FACTORIES for i, arg in enumerate(names)])
def test_factories_refuse_a_float_size_and_keep_the_int_kernel(factory, args, arg, i):
    """64.0 == 64 share a hash: a float size must be refused whether or not the int call is
    cached, and must not leave a kernel for the int call to find (the cache is typed)."""
    name = factory.__name__
    bad = args[:i] + (float(args[i]),) + args[i + 1:]
    factory.cache_clear()
    with pytest.raises(ValueError, match=f"{name}: {arg} must be an int >= 1, got "
                                         f"{float(args[i])}"):
        factory(*bad)
    k = factory(*args)                                 # the valid call builds a working kernel
    assert k.compile().spv
    with pytest.raises(ValueError, match=f"{name}: {arg} must be an int >= 1"):
        factory(*bad)                                  # also once the int kernel is cached
    assert factory(*args) is k
    for other in (True, 0, -16, "64", None):          # SGM = 0 or SGN = 0 divided by zero
        with pytest.raises(ValueError, match=f"{name}: {arg} must be an int >= 1, got "):
            factory(*(args[:i] + (other,) + args[i + 1:]))


def test_factories_take_numpy_ints_as_python_ints():
    k = gemm_nv(np.int64(64), 64, 32, np.int32(128), split_k=np.int64(2))
    assert k.workgroup_size == (128, 1, 1) and k.compile().spv
    assert gemm_khr_staged(np.int64(64), 64, np.int16(32), 2, 2).compile().spv
    assert sum_splits(np.int64(2)).compile().spv


def test_factories_check_their_options():
    with pytest.raises(ValueError, match="gemm_khr_staged: pad must be an int >= 0, got 8.0"):
        gemm_khr_staged(64, 64, 32, 2, 2, 8.0)
    with pytest.raises(ValueError, match="gemm_q4_0_planes: split_k must be an int >= 1, got 2.0"):
        gemm_q4_0_planes(64, 64, 64, 2, 1, split_k=2.0)
    with pytest.raises(ValueError, match="sum_splits: split_k must be an int >= 1, got 2.0"):
        sum_splits(2.0)
    # True == 1 too: driver_unroll=1 (not a pycoop.range hint) must not find the True kernel
    gemm_khr_staged(64, 64, 32, 2, 2, driver_unroll=True)
    with pytest.raises(ValueError, match=r"gemm_khr_staged: driver_unroll is None, True, "
                                         r"False or an int >= 2 .*, got 1"):
        gemm_khr_staged(64, 64, 32, 2, 2, driver_unroll=1)
    with pytest.raises(ValueError, match="gemm_nv: clamp must be 'constant' or 'undefined', "
                                         "got 'repeat'"):
        gemm_nv(64, 64, 32, 128, "repeat")             # would repeat values past the edges
    with pytest.raises(ValueError, match="gemm_q4_0: clamp must be 'constant' or 'undefined'"):
        gemm_q4_0(64, 64, 32, 128, clamp="clamp_to_edge")


@pytest.mark.parametrize("factory,args,match", [
    # BN not a multiple of 16 x SGN: a subgroup's matrices round down, columns stay zero
    (gemm_khr_staged, (64, 40, 32, 2, 1), "BN of 16 x SGN = 16"),
    (gemm_khr_staged, (64, 96, 32, 2, 4), "BN of 16 x SGN = 64"),
    (gemm_khr_staged, (48, 256, 32), "BM a multiple of 16 x SGM = 32"),
    (gemm_khr_staged, (64, 64, 24, 2, 2), "BK of 16"),
    (gemm_q4_0_planes, (64, 48, 64, 2, 2), "BN of 16 x SGN = 32"),
    (gemm_q4_0_planes, (96, 64, 64, 4, 1), "BM a multiple of 16 x SGM = 64"),
    (gemm_q8_0_planes, (64, 48, 64, 2, 2), "BN of 16 x SGN = 32"),
    (gemm_q4_k_planes, (64, 48, 64, 2, 2), "BN of 16 x SGN = 32"),
    (gemm_q4_0_staged, (64, 48, 64, 2, 2), "BN of 16 x SGN = 32"),
    # 4 A tiles for 8 subgroups: each stages 4 // 8 = none, shared memory left unwritten
    (gemm_khr_staged, (32, 256, 32), "the 4 16x16 tiles of A .* multiple of the 8 subgroups"),
    (gemm_khr_staged, (64, 32, 16, 2, 2), "the 2 of B .* multiple of the 4 subgroups")])
def test_factories_refuse_tilings_that_would_give_wrong_results(factory, args, match):
    with pytest.raises(ValueError, match=f"{factory.__name__} needs .*{match}"):
        factory(*args)


def test_q4_0_staged_gemm_checks_a_specialised_shape():
    with pytest.raises(ValueError, match="gemm_q4_0_staged needs M a multiple of 64, N of 64 "
                                         "and K a multiple of 64; got M=64, N=64, K=96"):
        gemm_q4_0_staged(64, 64, 64, 2, 1, specialize=True).compile(M=64, N=64, K=96)


@pytest.mark.parametrize("factory,args,launch", [
    (gemm_q4_0_planes, (64, 64, 64, 2, 2), (64, 64, 288)),        # K: 4 x 64 + 32
    (gemm_q8_0_planes, (64, 64, 64, 2, 2), (64, 48, 256)),        # N off the tile
    (gemm_q4_k_planes, (64, 64, 64, 2, 2, 8, False, None, 2), (64, 64, 320)),  # 320 % 128
    (gemm_khr_staged, (64, 64, 32, 2, 2), (96, 64, 64)),          # M off the tile
    (gemm_q4_0_staged, (64, 64, 64, 2, 1), (64, 64, 96)),
    (gemm_nv, (64, 64, 32, 128, "undefined", 2), (64, 64, 96))])  # K % (BK x unroll)
def test_unspecialised_gemms_refuse_shapes_off_their_tiling_at_the_launch(factory, args, launch):
    """Without `specialize` M, N, K are launch arguments the kernel cannot refuse itself; its
    `requires` refuses them before any work (they left edges unwritten or dropped the tail
    of K: the planes GEMM at K = 288 was 30 % off), naming the shape and the tiling."""
    k = factory(*args)
    M, N, K = launch
    out = np.zeros(M * N * 2, np.float32)
    buffers = [np.zeros(1 << 14, np.uint32) for _ in range(len(k.params) - 4)]
    with pytest.raises(pc.ArgumentError, match=rf"{factory.__name__} needs M a multiple of "
                                               rf".* got M={M}, N={N}, K={K}"):
        k[(1, 1)](*buffers, out, M, N, K, backend="emulator")
    assert not out.any()                                  # refused before any work


def test_gemm_reference_checks_the_shapes():
    with pytest.raises(ValueError, match=r"gemm_reference: A must be M x K and B K x N .* got A "
                                         r"of shape \(3, 4\) and B of shape \(3, 4\)"):
        gemm_reference(np.ones((3, 4)), np.ones((3, 4)))
    with pytest.raises(ValueError, match=r"got A of shape \(4,\)"):
        gemm_reference(np.ones(4), np.ones((4, 2)))
    np.testing.assert_array_equal(gemm_reference(np.ones((3, 4)), np.ones((4, 2))),
                                  np.full((3, 2), 4.0))


@pytest.mark.parametrize("helper,fmt,size,qk", [
    (q4_0_planes, "q4_0", 18, 32), (q8_0_planes, "q8_0", 34, 32),
    (dequantize_q8_0, "q8_0", 34, 32), (dequantize_q4_k, "q4_k", 144, 256),
    (q4_k_planes, "q4_k", 144, 256), (q4_k_scale_words, "q4_k", 144, 256)])
def test_block_helpers_check_rows_k_and_the_data(helper, fmt, size, qk):
    name = helper.__name__
    raw = np.zeros((4, 2 * size), np.uint8)            # 4 rows of 2 blocks
    for arg, bad in (("rows", 4.0), ("rows", None), ("rows", "4"), ("rows", True), ("rows", 0),
                     ("rows", -4), ("K", float(2 * qk)), ("K", None), ("K", -2 * qk)):
        a = {"rows": 4, "K": 2 * qk, arg: bad}
        with pytest.raises(ValueError, match=f"{name}: {arg} must be an int >= 1, got "):
            helper(raw, a["rows"], a["K"])
    with pytest.raises(ValueError, match=f"{name}: raw must be an array of the {fmt} bytes"):
        helper(None, 4, 2 * qk)
    with pytest.raises(ValueError, match=f"{name}: raw must be an array"):
        helper(["x"] * raw.size, 4, 2 * qk)
    # the same bytes read as 2 rows of 4 blocks: a 2-D array says otherwise
    with pytest.raises(ValueError, match=f"{name}: raw is 4 rows of {2 * size} bytes, but 2 x "
                                         f"{4 * qk} {fmt} weights are 2 rows of {4 * size}"):
        helper(raw, 2, 4 * qk)
    helper(raw.reshape(-1), 2, 4 * qk)                # flat bytes: any rows x K of their size
    helper(raw, np.int64(4), np.int32(2 * qk))
    helper(raw.view(np.uint16), 4, 2 * qk)            # rows of the same bytes in other words
