"""The emulator on valid kernels that once crashed it, compared with Vulkan (lavapipe in CI)
where a driver is present and with results computed in plain Python:

* code no invocation reaches (after every invocation, or every invocation of a branch, has
  returned) is not run, so no op sees the values of an `if` whose branches all returned;
* the fused loop path (emulator/fast/loop_fusion.py) keeps its iteration axis apart from the trailing
  component axis of vectors, with a per-invocation outer loop bound and several workgroups.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f16, f32, u32, u64
from pycoop.emulator.fast import loop_fusion

from core_helpers import FEW, SETTINGS, emu


def vulkan(kernel, grid, *args):
    """The outputs of `kernel` run on Vulkan over copies of `args`, or None without a driver
    or where the device lacks what the kernel needs (lavapipe has no cooperative matrices)."""
    try:
        from pycoop.runtime.vulkan import get_runtime
        get_runtime()
    except Exception:
        return None
    out = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    try:
        assert kernel[grid](*out, backend="vulkan").backend == "vulkan"
    except pc.BackendUnavailable:
        return None
    return out


def agree(kernel, grid, *args):
    """Run on the emulator (args updated in place) and, where a driver is, on Vulkan: the two
    give identical buffers."""
    gpu = vulkan(kernel, grid, *args)
    emu(kernel, grid, *args)
    if gpu is not None:
        for g, e in zip(gpu, args):
            if isinstance(e, np.ndarray):
                np.testing.assert_array_equal(g, e)


@contextlib.contextmanager
def counting_fused_chunks():
    """Counts the chunks the fused loop path runs (0: every loop ran the ordinary way)."""
    seen = []
    original = loop_fusion._run_chunk

    def spy(*a, **k):
        seen.append(1)
        return original(*a, **k)
    loop_fusion._run_chunk = spy
    try:
        yield seen
    finally:
        loop_fusion._run_chunk = original


# --------------------------------------------------------------------------- no invocation active

@pc.kernel(workgroup_size=8)
def after_uniform_return(O: pc.Buffer[u32], n: u32):
    lid = pc.local_invocation_index()
    s = u32(0)
    if n > u32(0):
        return
    if lid > u32(3):
        s = lid
    O[lid] = s


@pytest.mark.parametrize("n", [0, 3])
def test_code_after_every_invocation_returned_does_not_run(n):
    O = np.full(8, 99, np.uint32)
    agree(after_uniform_return, 1, O, n)
    expected = np.full(8, 99, np.uint32) if n else np.array([0, 0, 0, 0, 4, 5, 6, 7], np.uint32)
    np.testing.assert_array_equal(O, expected)


@pc.kernel(workgroup_size=64)
def branch_all_returned(A: pc.ReadBuffer[u32], O: pc.Buffer[u32]):
    gid = pc.global_invocation_id.x
    lid = pc.local_invocation_index()
    x2 = A[gid]
    if lid == u32(0):
        pass
    else:
        for p in range(3):
            if (pc.f32(p) >= pc.f32(0.0)) & (lid != u32(0)):
                return
        if u32(0) <= lid:
            pass
        else:
            x2 = u32(127)
        x2 = pc.max(u32(0), x2)
    O[gid] = x2


def test_values_merged_where_every_invocation_of_a_branch_returned():
    A = np.arange(64, dtype=np.uint32) + 5
    O = np.zeros(64, np.uint32)
    agree(branch_all_returned, 1, A, O)
    np.testing.assert_array_equal(O, np.r_[5, np.zeros(63, np.uint32)])


@pc.kernel(workgroup_size=32)
def returns_in_loop(O: pc.Buffer[u32], k: u32, n: u32):
    lid = pc.local_invocation_index()
    wid = pc.workgroup_id.x
    s = wid
    for j in range(n):
        if lid + wid < k + j:              # more invocations return at every iteration
            return
        s = s + j
    if lid >= k:                           # may be reached by no invocation
        s = s * u32(2)
    O[wid * u32(32) + lid] = s


def _returns_in_loop_reference(k, n, grid):
    out = np.full(grid * 32, 7, np.uint32)
    for wid in range(grid):
        for lid in range(32):
            s = wid
            for j in range(n):
                if lid + wid < k + j:
                    break
                s += j
            else:
                out[wid * 32 + lid] = s * 2 if lid >= k else s
    return out


@FEW
@given(k=st.integers(0, 40), n=st.integers(0, 40), grid=st.integers(1, 3))
def test_every_invocation_returning_inside_a_loop(k, n, grid):
    O = np.full(grid * 32, 7, np.uint32)
    agree(returns_in_loop, grid, O, k, n)
    np.testing.assert_array_equal(O, _returns_in_loop_reference(k, n, grid))


Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]


@pc.kernel(workgroup_size=32, subgroup_size=32)
def matrix_and_barrier_after_return(O: pc.Buffer[f32], S: pc.Buffer[u32], cut: u32):
    lid = pc.local_invocation_index()
    wid = pc.workgroup_id.x
    sh = pc.shared(u32, 32)
    if wid < cut:                           # whole workgroups return
        return
    if lid < u32(32):                       # true for all: every invocation returns here too
        if wid >= u32(0):
            return
    sh[lid] = lid
    pc.barrier()
    S[wid * u32(32) + lid] = sh[u32(31) - lid]
    pc.store(O, wid * u32(256), Acc.fill(1.0), 16)


@pytest.mark.parametrize("cut", [0, 1, 5])
def test_barriers_and_matrix_ops_nobody_reaches(cut):
    O = np.zeros(2 * 256, np.float32)
    S = np.zeros(64, np.uint32)
    agree(matrix_and_barrier_after_return, 2, O, S, cut)
    assert not O.any() and not S.any()


# --------------------------------------------------------------------------- fused loops, shapes

def _dead_in_fused_loop(wg: int):
    """The kernel of a dead value in a pc.range loop nested in a runtime loop whose bound
    differs per invocation; the outer loop also carries a value out."""
    @pc.kernel(workgroup_size=wg)
    def kern(A: pc.ReadBuffer[u64], O: pc.Buffer[u32]):
        gid = pc.global_invocation_id.x
        lid = pc.local_invocation_index()
        x = A[gid]
        s = u32(1)
        for j in range(lid, 2):
            for q in pc.range(1, 4):
                v = pc.select(x <= x, q, j)  # noqa: F841 (dead: the loop is fused)
            s = s * u32(3) + j
        O[gid] = s
    return kern


_DEAD = {wg: _dead_in_fused_loop(wg) for wg in (1, 16, 32)}


@SETTINGS
@given(wg=st.sampled_from(sorted(_DEAD)), grid=st.integers(1, 4))
def test_dead_value_in_fused_loop_under_a_per_invocation_loop(wg, grid):
    n = wg * grid
    A = np.arange(n, dtype=np.uint64)
    O = np.zeros(n, np.uint32)
    with counting_fused_chunks() as chunks:
        agree(_DEAD[wg], grid, A, O)
    lid = np.arange(n) % wg
    expected = [(1 * 3 + 0) * 3 + 1 if i == 0 else 1 * 3 + 1 if i == 1 else 1 for i in lid]
    np.testing.assert_array_equal(O, np.array(expected, np.uint32))
    assert chunks, "the inner loop was expected to run fused"


@pc.kernel(workgroup_size=16)
def every_fused_op(A: pc.ReadBuffer[u32], H: pc.ReadBuffer[f16], O: pc.Buffer[u32], n: u32):
    gid = pc.global_invocation_id.x
    lid = pc.local_invocation_index()
    x = A[gid]
    s = u32(0)
    for j in range(lid % u32(4), n):         # per-invocation, or uniform, bound
        for q in pc.range(1, 4):
            # one dead value of every kind of op the fused path evaluates
            a = x * q + j                                             # binary
            b = -pc.f32(a)                                            # cast, unary
            c = pc.select(a <= j, a, q)                               # compare, select
            v = pc.make_vector([a, c])                                # composite.construct
            w = pc.select(a < q, v, pc.make_vector([q, j]))           # select on vectors
            d = pc.bitcast(w, u64)                                    # vector -> scalar
            e = pc.bitcast(d, pc.vec(u32, 2))                         # scalar -> vector
            f = A[e[0] % u32(8)] + pc.workgroup_id.x                  # extract, load, built-in
            h = H[q] * pc.f16(b)                                      # a load of f16
        s = s + j * x
    O[gid] = s


@FEW
@given(grid=st.integers(1, 3), n=st.sampled_from([2, 5]))
def test_every_fused_op_keeps_its_shape(grid, n):
    """Each op kind in a fused loop under a per-invocation outer loop, several workgroups, the
    launch repeated (its kept results reused, emulator.memo): the result of the fused path
    equals the ordinary loop's and the Python reference."""
    size = 16 * grid
    A = np.arange(size, dtype=np.uint32) * 3 + 1
    H = np.linspace(-2, 2, 8).astype(np.float16)
    lid = np.arange(size) % 16
    expected = np.array([sum(j * int(x) for j in range(i % 4, n)) for i, x in zip(lid, A)],
                        np.uint32)
    for _ in range(2):
        O = np.zeros(size, np.uint32)
        with counting_fused_chunks() as chunks:
            agree(every_fused_op, grid, A, H, O, n)
        np.testing.assert_array_equal(O, expected)
        assert chunks


MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]


@pc.kernel(workgroup_size=64, subgroup_size=32)
def dead_matrices_in_fused_loop(A: pc.ReadBuffer[f16], O: pc.Buffer[u32], n: u32):
    w = pc.workgroup_id.x
    s = w
    for r in range(w, n):                    # a bound uniform in each workgroup only
        for kk in pc.range(0, 4):
            f = Acc.fill(f32(kk))                                       # noqa: F841
            a = MatA.load(A, kk * u32(16) + r * u32(64), 16)            # noqa: F841
        s = s * u32(5) + r
    O[pc.global_invocation_id.x] = s


@FEW
@given(grid=st.integers(1, 4), n=st.integers(0, 5))
def test_dead_matrix_ops_in_fused_loop_over_several_workgroups(grid, n):
    A = np.zeros(64 * 5 + 256, np.float16)
    expected = []
    for w in range(grid):
        s = w
        for r in range(w, n):
            s = s * 5 + r
        expected += [s] * 64
    for _ in range(2):                       # the second launch reuses kept results
        O = np.zeros(64 * grid, np.uint32)
        with counting_fused_chunks() as chunks:
            emu(dead_matrices_in_fused_loop, grid, A, O, n)
        np.testing.assert_array_equal(O, np.array(expected, np.uint32))
        assert bool(chunks) == (n > 0)
