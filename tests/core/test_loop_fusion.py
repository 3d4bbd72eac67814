"""The emulator's fused evaluation of tiled-GEMM loops (pycoop.emulator.fast.loop_fusion) gives the
ordinary loop's results (up to float summation order) and never hides an error."""
from __future__ import annotations

import contextlib
import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f16, f32, u32
from pycoop.kernels.gemm import gemm_khr
from pycoop.emulator.lazy import LazyBlocks
from pycoop.emulator import fast
from pycoop.emulator.fast import loop_fusion

MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
MatB = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseB]
Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]
Acc16 = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.Accumulator]


@contextlib.contextmanager
def fusion(on: bool = True):
    """Launches inside run their loops fused (the default) or the ordinary way."""
    original = fast.FAST_OPS["loop"]
    if not on:
        fast.FAST_OPS["loop"] = lambda ctx, op, inits: None
    try:
        yield
    finally:
        fast.FAST_OPS["loop"] = original


def loop_ops(compiled):
    return [op for op in compiled.module.walk() if op.name == "loop"]


@settings(max_examples=12, deadline=None)
@given(tm=st.sampled_from([1, 2]), tn=st.sampled_from([1, 2]), mb=st.integers(1, 3),
       nb=st.integers(1, 3), kb=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_fused_gemm_matches_the_ordinary_loop(tm, tn, mb, nb, kb, seed):
    rng = np.random.default_rng(seed)
    M, N, K = mb * 32 * tm, nb * 32 * tn, kb * 16
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    fused, plain = np.zeros((M, N), np.float32), np.zeros((M, N), np.float32)
    assert loop_fusion.plan(loop_ops(gemm_khr.compile(TM=tm, TN=tn))[0]) is not None
    gemm_khr[(mb, nb)](A, B, fused, M, N, K, TM=tm, TN=tn, backend="emulator")
    with fusion(False):
        gemm_khr[(mb, nb)](A, B, plain, M, N, K, TM=tm, TN=tn, backend="emulator")
    np.testing.assert_allclose(fused, plain, rtol=1e-5, atol=1e-5 * np.abs(plain).max())
    np.testing.assert_allclose(fused, A.astype(np.float32) @ B.astype(np.float32), rtol=1e-5,
                               atol=1e-4 * np.abs(plain).max())


@pc.kernel(workgroup_size=32)
def overrun(A: pc.Buffer[f16], B: pc.Buffer[f16], C: pc.Buffer[f32], K: u32, extra: u32):
    acc = Acc.fill(0.0)
    for k in range(0, K + extra, 16):
        a = MatA.load(A, k, K)  # LOAD
        b = MatB.load(B, k * 16, 16)
        acc = pc.mul_add(a, b, acc)
    pc.store(C, 0, acc, 16)


def test_an_error_inside_a_fused_loop_is_reported_at_its_line():
    A, B = np.ones(16 * 64, np.float16), np.ones(64 * 16, np.float16)
    C = np.zeros(256, np.float32)
    overrun[1](A, B, C, 64, 0, backend="emulator")
    np.testing.assert_array_equal(C, 64)
    with pytest.raises(pc.EmulatorError) as e:
        overrun[1](A, B, C, 64, 16, backend="emulator")
    src, start = inspect.getsourcelines(overrun.fn)
    assert e.value.loc.line == start + next(i for i, l in enumerate(src) if "# LOAD" in l)


def test_loops_outside_the_pattern_are_not_fused():
    @pc.kernel(workgroup_size=32)
    def with_store(A: pc.Buffer[f16], C: pc.Buffer[f32], K: u32):
        acc = Acc.fill(0.0)
        for k in range(0, K, 16):
            acc = pc.mul_add(MatA.load(A, k, K), MatB.load(A, k, K), acc)
            pc.store(C, 0, acc, 16)

    @pc.kernel(workgroup_size=32)
    def half_acc(A: pc.Buffer[f16], C: pc.Buffer[f16], K: u32):
        acc = Acc16.fill(0.0)
        for k in range(0, K, 16):
            acc = pc.mul_add(MatA.load(A, k, K), MatB.load(A, k, K), acc)
        pc.store(C, 0, acc, 16)

    @pc.kernel(workgroup_size=32)
    def reads_acc(A: pc.Buffer[f16], C: pc.Buffer[f32], K: u32):
        acc = Acc.fill(0.0)
        for k in range(0, K, 16):
            acc = pc.mul_add(MatA.load(A, k, K), MatB.load(A, k, K), acc * 0.5)
        pc.store(C, 0, acc, 16)

    for k in (with_store, half_acc, reads_acc):
        assert loop_fusion.plan(loop_ops(k.compile())[0]) is None, k.name


def test_divergent_subgroups_are_still_reported():
    @pc.kernel(workgroup_size=32)
    def k(A: pc.Buffer[f16], C: pc.Buffer[f32], K: u32):
        if pc.subgroup_local_id() < 16:
            acc = Acc.fill(0.0)
            for k in range(0, K, 16):
                acc = pc.mul_add(MatA.load(A, k, K), MatB.load(A, k, K), acc)
            pc.store(C, 0, acc, 16)

    with pytest.raises(pc.EmulatorError, match="part of subgroup"):
        k[1](np.ones(1024, np.float16), np.zeros(256, np.float32), 64, backend="emulator")


def test_a_matrix_loaded_before_the_loop_is_not_mistaken_for_a_per_iteration_one():
    """Here the workgroup count equals the trip count, the ambiguous case for shapes."""
    @pc.kernel(workgroup_size=32)
    def k(A: pc.Buffer[f16], B: pc.Buffer[f16], C: pc.Buffer[f32], K: u32):
        w = pc.workgroup_id.x
        a = MatA.load(A, w * 16 * 16, 16)              # the same A for every iteration
        acc = Acc.fill(0.0)
        for kk in range(0, K, 16):
            acc = pc.mul_add(a, MatB.load(B, kk * 16, 16), acc)
        pc.store(C, w * 256, acc, 16)

    rng = np.random.default_rng(3)
    W, K = 4, 64                                        # 4 workgroups, 4 iterations
    A = rng.standard_normal(W * 256).astype(np.float16)
    B = rng.standard_normal(K * 16).astype(np.float16)
    C = np.zeros(W * 256, np.float32)
    k[W](A, B, C, K, backend="emulator")
    bsum = B.astype(np.float32).reshape(K // 16, 16, 16).sum(0)
    want = np.stack([A[w * 256:(w + 1) * 256].astype(np.float32).reshape(16, 16) @ bsum
                     for w in range(W)])
    np.testing.assert_allclose(C.reshape(W, 16, 16), want, rtol=1e-4, atol=1e-4)


@pc.kernel(workgroup_size=64)
def layouts(A: pc.Buffer[f16], B: pc.Buffer[f16], C: pc.Buffer[f32], M: u32, N: u32, K: u32,
            a_cols: pc.Const = False, b_cols: pc.Const = False, gap: pc.Const = 1,
            spread: pc.Const = 1):
    """C[tile] += sum over every gap-th K tile of A @ B, A and B in either layout; each
    workgroup's two row tiles are spread * 32 rows apart."""
    m0 = pc.workgroup_id.x * 32 * spread + pc.subgroup_id() * 16
    n0 = pc.workgroup_id.y * 16
    acc = Acc.load(C, m0 * N + n0, N)
    for k in range(0, K, 16 * gap):
        if a_cols:
            a = MatA.load(A, k * M + m0, M, "col_major")     # A given as its transpose
        else:
            a = MatA.load(A, m0 * K + k, K)
        if b_cols:
            b = MatB.load(B, n0 * K + k, K, "col_major")
        else:
            b = MatB.load(B, k * N + n0, N)
        acc = pc.mul_add(a, b, acc)
    pc.store(C, m0 * N + n0, acc, N)


@settings(max_examples=16, deadline=None)
@given(a_cols=st.booleans(), b_cols=st.booleans(), gap=st.sampled_from([1, 2]),
       spread=st.sampled_from([1, 2]), mb=st.integers(1, 3), nb=st.integers(1, 3),
       kb=st.integers(2, 6), seed=st.integers(0, 2**32 - 1))
def test_fused_loop_reads_any_layout_and_spacing(a_cols, b_cols, gap, spread, mb, nb, kb, seed):
    """Operands read as windows of memory (either layout, evenly spaced or not) or gathered
    block by block (gap 2: the K tiles are not adjacent) give the ordinary loop's results."""
    rng = np.random.default_rng(seed)
    M, N, K = mb * 32 * spread, nb * 16, kb * 16
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    C0 = rng.standard_normal((M, N)).astype(np.float32)
    a_buf = np.ascontiguousarray(A.T) if a_cols else A
    b_buf = np.ascontiguousarray(B.T) if b_cols else B
    consts = dict(a_cols=a_cols, b_cols=b_cols, gap=gap, spread=spread)
    assert loop_fusion.plan(loop_ops(layouts.compile(**consts))[0]) is not None
    fused, plain = C0.copy(), C0.copy()
    layouts[(mb, nb)](a_buf, b_buf, fused, M, N, K, **consts, backend="emulator")
    with fusion(False):
        layouts[(mb, nb)](a_buf, b_buf, plain, M, N, K, **consts, backend="emulator")
    want = C0.copy()
    ks = np.arange(K).reshape(-1, 16)[::gap].reshape(-1)
    rows = (np.arange(M).reshape(-1, 32 * spread)[:, :32]).reshape(-1)
    want[rows] += A[rows][:, ks].astype(np.float32) @ B[ks].astype(np.float32)
    scale = np.abs(want).max()
    np.testing.assert_allclose(fused, plain, rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(fused, want, rtol=1e-5, atol=1e-4 * scale)


MatB8 = pc.coopmat[f16, pc.Subgroup, 16, 8, pc.UseB]
Acc8 = pc.coopmat[f32, pc.Subgroup, 16, 8, pc.Accumulator]


@pc.kernel(workgroup_size=32)
def two_shapes(A: pc.Buffer[f16], B: pc.Buffer[f16], C: pc.Buffer[f32], D: pc.Buffer[f32],
               N: u32, K: u32):
    """Two accumulators of different shapes fed from windows of the same arrays."""
    n0 = pc.workgroup_id.x * 24
    acc, acc8 = Acc.fill(0.0), Acc8.fill(0.0)
    for k in range(0, K, 16):
        a = MatA.load(A, k, K)
        acc = pc.mul_add(a, MatB.load(B, k * N + n0, N), acc)
        acc8 = pc.mul_add(a, MatB8.load(B, k * N + n0 + 16, N), acc8)
    pc.store(C, n0, acc, N)
    pc.store(D, pc.workgroup_id.x * 8, acc8, 8 * pc.num_workgroups.x)


def test_accumulators_of_different_shapes_share_no_product():
    rng = np.random.default_rng(5)
    W, K = 3, 64
    N = 24 * W
    A = rng.standard_normal((16, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    C, D = np.zeros((16, N), np.float32), np.zeros((16, 8 * W), np.float32)
    two_shapes[W](A, B, C, D, N, K, backend="emulator")
    full = A.astype(np.float32) @ B.astype(np.float32)
    cols = np.arange(N).reshape(W, 24)
    np.testing.assert_allclose(C[:, cols[:, :16]], full[:, cols[:, :16]], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(D.reshape(16, W, 8), full[:, cols[:, 16:]], rtol=1e-5, atol=1e-4)


@pc.kernel(workgroup_size=64)
def consumers(A: pc.Buffer[f16], B: pc.Buffer[f16], C: pc.Buffer[f32], D: pc.Buffer[f32],
              M: u32, N: u32, K: u32, reps: u32, mode: pc.Const = 0):
    """Ways the fused loop's accumulator is used afterwards: stored where its blocks sit in
    the product (copied straight from it) or otherwise (copied out first)."""
    m0 = pc.workgroup_id.x * 32 + pc.subgroup_id() * 16
    n0 = pc.workgroup_id.y * 16
    acc = Acc.fill(0.0)
    for r in range(reps if mode == 5 else 1):           # mode 5: an outer runtime loop
        for k in range(0, K, 16):
            acc = pc.mul_add(MatA.load(A, m0 * K + k, K), MatB.load(B, k * N + n0, N), acc)
    if mode == 0:
        pc.store(C, n0 * M + m0, acc, M, "col_major")   # C holds the transpose
    elif mode == 1:
        pc.store(C, m0 * N + n0, acc * 2.0, N)           # another op reads it first
    elif mode == 2:
        pc.store(C, m0 * N + n0, acc, N)
        pc.store(D, m0 * N + n0, acc, N)                 # stored twice
    elif mode == 3:
        if pc.workgroup_id.y == 0:                       # some scope instances inactive
            pc.store(C, m0 * N + n0, acc, N)
    elif mode == 4:
        pc.store(C, (m0 ^ 16) * N + n0, acc, N)          # the two subgroups' rows swapped
    else:
        pc.store(C, m0 * N + n0, acc, N)


@pytest.mark.parametrize("mode", range(7))
def test_the_accumulator_of_a_fused_loop_feeds_any_consumer(mode, monkeypatch):
    rng = np.random.default_rng(mode)
    mb, nb, K, reps = 2, 3, 64, 2
    M, N = 32 * mb, 16 * nb
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    from pycoop.emulator import memory               # its single-store calls, not a run's
    direct, store_blocks = [], memory.store_blocks
    monkeypatch.setattr(memory, "store_blocks", lambda *a: direct.append(store_blocks(*a)) or direct[-1])
    runs = []
    for fused in (True, False):
        C, D = np.zeros((M, N), np.float32), np.zeros((M, N), np.float32)
        with fusion(fused):
            consumers[(mb, nb)](A, B, C, D, M, N, K, reps, mode=mode, backend="emulator")
        runs.append((C, D))
    full = A.astype(np.float32) @ B.astype(np.float32)
    want = {0: full.T.reshape(M, N), 1: 2 * full, 2: full, 3: np.where(np.arange(N) < 16, full, 0),
            4: full.reshape(mb, 2, 16, N)[:, ::-1].reshape(M, N), 5: reps * full, 6: full}[mode]
    # stored where the blocks sit in the product: copied straight from it
    assert direct == {2: [True, True], 4: [False], 6: [True]}.get(mode, [])
    for C, D in runs:
        np.testing.assert_allclose(C, want, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(D, full if mode == 2 else 0, rtol=1e-5, atol=1e-4)


@settings(max_examples=60, deadline=None)
@given(na=st.integers(1, 4), nb=st.integers(1, 4), da=st.integers(1, 2), db=st.integers(1, 2),
       py=st.sampled_from([16, 24, 32]), px=st.sampled_from([16, 24, 32]), off=st.integers(0, 1),
       swap=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_lazy_blocks_store_exactly_what_their_gathered_copy_stores(na, nb, da, db, py, px, off,
                                                                   swap, seed):
    """A store of lazy product blocks onto a lattice gives the same memory as storing the
    gathered blocks one by one, whether the one-pass copy applies or not (a permuted instance
    order, steps through the product, a lattice that does not match), and whether the product
    is computed straight into place (all of it, side by side) or copied."""
    from pycoop.emulator.lazy import Product, store_blocks
    from pycoop.emulator.memory import _lattice
    from pycoop.ops.khr_layout import matrix_layout
    rng = np.random.default_rng(seed)
    m = n = 16
    rows, cols = m * ((na - 1) * da + 1 + off), n * ((nb - 1) * db + 1)
    a = rng.standard_normal((rows, 8)).astype(np.float32)
    b = rng.standard_normal((8, cols)).astype(np.float32)
    ia, ib = np.meshgrid(np.arange(na) * da + off, np.arange(nb) * db, indexing="ij")
    order = rng.permutation(na * nb)
    ia, ib = ia.reshape(-1)[order], ib.reshape(-1)[order]
    cy, cx = np.meshgrid(np.arange(na), np.arange(nb), indexing="ij")
    cy, cx = cy.reshape(-1)[order], cx.reshape(-1)[order]
    if swap and na > 1:                       # cells no longer in the product's order
        cy = (na - 1) - cy
    stride = px * nb + 8
    starts = (cy * py * stride + cx * px + 3).reshape(-1, 1)
    lazy, ref = (LazyBlocks(Product(a, b), m, n, ia.reshape(-1, 1), ib.reshape(-1, 1),
                            (na * nb, 1)) for _ in range(2))
    want = np.zeros(stride * py * na, np.float32)
    for s, block in zip(starts.reshape(-1), ref.materialize().reshape(-1, m, n)):
        for r in range(m):
            want[s + r * stride:s + r * stride + n] = block[r]
    t = pc.coopmat[f32, pc.Subgroup, m, n, pc.Accumulator]
    cells = _lattice(matrix_layout(t, "RowMajorKHR"), starts, stride)
    assert cells is not None
    got = np.zeros_like(want)
    if not store_blocks(got, [(lazy, starts)], stride):
        assert swap and na > 1                # only a mismatched lattice refuses
        return
    np.testing.assert_array_equal(got, want)


@pc.kernel(workgroup_size=32)
def tile_stores(A: pc.Buffer[f16], B: pc.Buffer[f16], C: pc.Buffer[f32], N: u32, K: u32,
                mode: pc.Const = 0):
    """Two accumulators of one K loop stored one after the other: together they tile the
    product in place (mode 0), overlap (1), are read back between (2), or run off the end (3)."""
    n0 = pc.workgroup_id.x * 32
    acc0, acc1 = Acc.fill(0.0), Acc.fill(0.0)
    for k in range(0, K, 16):
        a = MatA.load(A, k, K)
        acc0 = pc.mul_add(a, MatB.load(B, k * N + n0, N), acc0)
        acc1 = pc.mul_add(a, MatB.load(B, k * N + n0 + 16, N), acc1)
    pc.store(C, n0, acc0, N)
    if mode == 1:
        pc.store(C, n0 + 8, acc1, N)                      # overlaps the first tile
    elif mode == 2:
        back = Acc.load(C, n0, N)                         # sees the first store
        pc.store(C, n0 + 16, back + acc1, N)
    elif mode == 3:
        pc.store(C, n0 + 16 + N * 16, acc1, N)  # OVERRUN
    elif mode == 4:
        pc.store(C, n0 + 16 + pc.local_invocation_index() % 2, acc1, N)  # SPLIT
    elif mode == 5:
        pc.store(C, n0 + 16, acc1, N * (pc.workgroup_id.x % 2))  # ZERO STRIDE
    else:
        pc.store(C, n0 + 16, acc1, N)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_consecutive_tile_stores_match_the_ordinary_loop(mode, monkeypatch):
    from pycoop.emulator.fast import store_runs
    monkeypatch.setenv("PYCOOP_EMULATOR_MEMO", "0")    # plans are made at every launch
    copies, block_copy = [], store_runs.block_copy     # a run's plans, not single stores'
    monkeypatch.setattr(store_runs, "block_copy",
                        lambda *a: copies.append(block_copy(*a) is not None) or block_copy(*a))
    rng = np.random.default_rng(11)
    W, K = 3, 48
    N = 32 * W
    A = rng.standard_normal((16, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    full = (A.astype(np.float32) @ B.astype(np.float32)).reshape(16, W, 2, 16)
    want = full.copy()
    if mode == 1:
        want[..., 0, 8:] = full[..., 1, :8]
        want[..., 1, :8] = full[..., 1, 8:]
        want[..., 1, 8:] = 0
    elif mode == 2:
        want[..., 1, :] += full[..., 0, :]
    C = np.zeros((16, N), np.float32)
    tile_stores[W](A, B, C, N, K, mode=mode, backend="emulator")
    np.testing.assert_allclose(C.reshape(16, W, 2, 16), want, rtol=1e-5, atol=1e-4)
    # in place: one copy; overlapping: store by store; a load between: no run of stores
    assert copies == {0: [True], 1: [False], 2: []}[mode]


@pytest.mark.parametrize("mode,marker,message", [
    (3, "OVERRUN", "out of bounds"), (4, "SPLIT", "the store offset differs"),
    (5, "ZERO STRIDE", "Stride must be greater than 0")])
def test_a_bad_store_among_tile_stores_is_reported_at_its_line(mode, marker, message):
    """The run of stores is checked as a whole first; a failure there leaves each store to
    its own checks, so the error names the store that broke the rule."""
    A, B = np.ones((16, 32), np.float16), np.ones((32, 64), np.float16)
    C = np.zeros((16, 64), np.float32)
    with pytest.raises(pc.EmulatorError, match=message) as e:
        tile_stores[2](A, B, C, 64, 32, mode=mode, backend="emulator")
    lines, start = inspect.getsourcelines(tile_stores.fn)
    assert e.value.loc.line == start + next(i for i, s in enumerate(lines) if marker in s)
