"""Subgroup collectives and atomics through the real Vulkan path (lavapipe in CI) against the
emulator: integer results bit for bit (under divergent masks), float ones within the rounding
that a different combination order gives; the launch-time check of the device's subgroup
operations and atomic features."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f32, i32, u32

pytestmark = pytest.mark.vulkan


@pytest.fixture(scope="module")
def caps(vulkan_caps):
    return vulkan_caps


@pytest.fixture(scope="module")
def sgs(caps):
    if not {"basic", "arithmetic", "ballot", "vote", "shuffle", "shuffle_relative"} <= set(
            caps.subgroup_operations) or "compute" not in caps.subgroup_stages:
        pytest.skip(f"the device's subgroup operations are {caps.subgroup_operations}")
    return caps.subgroup_size


def both(kernel, grid, sgs, *args, **consts):
    """Outputs of the Vulkan run and of the emulator run on copies of the same inputs."""
    gpu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    emu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    r = kernel[grid](*gpu, backend="vulkan", subgroup_size=sgs, **consts)
    assert r.backend == "vulkan"
    kernel[grid](*emu, backend="emulator", subgroup_size=sgs, **consts)
    return gpu, emu


@pc.kernel(workgroup_size=32)
def int_collectives(X: pc.ReadBuffer[i32], M: pc.ReadBuffer[u32], O: pc.Buffer[i32], U: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    if M[i] != 0:
        x = X[i]
        lane = pc.subgroup_local_id()
        O[i * u32(8)] = pc.subgroup.add(x)
        O[i * u32(8) + u32(1)] = pc.subgroup.inclusive_scan(x, "max")
        O[i * u32(8) + u32(2)] = pc.subgroup.exclusive_scan(x, "xor")
        O[i * u32(8) + u32(3)] = pc.subgroup.min(x) * pc.subgroup.reduce(x, "or")
        O[i * u32(8) + u32(4)] = pc.subgroup.broadcast_first(x) + pc.subgroup.inclusive_scan(x, "mul")
        O[i * u32(8) + u32(5)] = pc.subgroup.broadcast(x, pc.subgroup.broadcast_first(lane))
        O[i * u32(8) + u32(6)] = pc.select(pc.subgroup.elect(), 1, 0) + pc.select(
            pc.subgroup.all(x > 0), 2, 0) + pc.select(pc.subgroup.any(x > 5), 4, 0) + pc.select(
            pc.subgroup.all_equal(x), 8, 0)
        b = pc.subgroup.ballot(x > 2)
        U[i * u32(4)] = b[0]
        U[i * u32(4) + u32(1)] = pc.subgroup.ballot_bit_count(b, "inclusive")
        U[i * u32(4) + u32(2)] = pc.subgroup.ballot_bit_count(b, "exclusive") + pc.subgroup.ballot_bit_count(b)
    else:
        O[i * u32(8) + u32(7)] = 0


@settings(max_examples=12, deadline=None)
@given(density=st.floats(0, 1), seed=st.integers(0, 2**31))
def test_integer_collectives_match_bit_for_bit(sgs, density, seed):
    r = np.random.default_rng(seed)
    n = 64
    X = r.integers(-4, 8, n).astype(np.int32)
    M = (r.random(n) < density).astype(np.uint32)
    gpu, emu = both(int_collectives, 2, sgs, X, M, np.zeros(8 * n, np.int32), np.zeros(4 * n, np.uint32))
    np.testing.assert_array_equal(gpu[2], emu[2])
    np.testing.assert_array_equal(gpu[3], emu[3])


@pc.kernel(workgroup_size=32)
def shuffles(X: pc.ReadBuffer[f32], O: pc.Buffer[f32]):
    i = pc.global_invocation_id.x
    lane = pc.subgroup_local_id()
    n = pc.subgroup_size()
    x = X[i]
    O[i * u32(5)] = pc.subgroup.shuffle(x, (lane + u32(3)) % n)
    O[i * u32(5) + u32(1)] = pc.subgroup.shuffle_xor(x, 1) + pc.subgroup.shuffle_xor(x, 4)
    up = pc.subgroup.shuffle_up(x, 1)
    down = pc.subgroup.shuffle_down(x, 2)
    if lane >= u32(1):
        O[i * u32(5) + u32(2)] = up
    if lane + u32(2) < n:
        O[i * u32(5) + u32(3)] = down
    O[i * u32(5) + u32(4)] = pc.subgroup.add(x)


def test_shuffles_and_float_sum(sgs):
    X = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    gpu, emu = both(shuffles, 2, sgs, X, np.zeros(5 * 64, np.float32))
    g, e = gpu[1].reshape(64, 5), emu[1].reshape(64, 5)
    np.testing.assert_array_equal(g[:, :4], e[:, :4])            # moves are exact
    np.testing.assert_allclose(g[:, 4], e[:, 4], rtol=1e-5, atol=1e-5)   # sums: any order


@pc.kernel(workgroup_size=32)
def clustered(X: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    X[i] = pc.subgroup.add(X[i], 4)


def test_missing_subgroup_operations_are_named_at_launch(caps, sgs):
    X = np.arange(32, dtype=np.uint32)
    if "clustered" in caps.subgroup_operations:
        gpu, emu = both(clustered, 1, sgs, X)
        np.testing.assert_array_equal(gpu[0], emu[0])
        return
    with pytest.raises(pc.BackendUnavailable, match="subgroup operations clustered in compute shaders"):
        clustered[1](X, backend="vulkan", subgroup_size=sgs)


@pc.kernel(workgroup_size=64)
def int_atomics(D: pc.Buffer[u32], S: pc.Buffer[i32], I: pc.ReadBuffer[u32], V: pc.ReadBuffer[u32],
                Old: pc.Buffer[u32], n: u32):
    i = pc.global_invocation_id.x
    sh = pc.shared(u32, 1)
    if pc.local_invocation_index() == u32(0):
        sh[0] = u32(0)
    pc.barrier()
    if i < n:
        j, v = I[i], V[i]
        Old[i] = pc.atomic.add(D, j, u32(1))
        pc.atomic.max(D, j + u32(8), v)
        pc.atomic.min(S, j, i32(v) - i32(500))
        pc.atomic.xor(D, j + u32(16), v)
        pc.atomic.or_(D, j + u32(24), v & u32(0xF0F0))
        pc.atomic.and_(D, j + u32(32), ~v)
        pc.atomic.sub(S, j + u32(8), i32(v))
        pc.atomic.add(sh, 0, v)
    pc.barrier()
    if pc.local_invocation_index() == u32(0):
        pc.atomic.add(D, u32(40), sh[0])


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 256), seed=st.integers(0, 2**31))
def test_integer_atomics_match_bit_for_bit(caps, n, seed):
    r = np.random.default_rng(seed)
    I = r.integers(0, 8, n).astype(np.uint32)
    V = r.integers(0, 1000, n).astype(np.uint32)
    D = np.zeros(41, np.uint32)
    D[32:40] = 0xFFFFFFFF
    S = np.zeros(16, np.int32)
    grid = -(-n // 64)
    gpu, emu = both(int_atomics, grid, caps.subgroup_size, D, S, I, V, np.zeros(n, np.uint32), n)
    np.testing.assert_array_equal(gpu[0], emu[0])
    np.testing.assert_array_equal(gpu[1], emu[1])
    # the old values of a counter: each one of 0 .. count-1 once per element, in any order
    for j in range(8):
        np.testing.assert_array_equal(np.sort(gpu[4][I == j]), np.arange((I == j).sum()))


@pc.kernel(workgroup_size=64)
def float_atomics(X: pc.ReadBuffer[f32], S: pc.Buffer[f32], n: u32, KIND: pc.Const, SHARED: pc.Const):
    i = pc.global_invocation_id.x
    lid = pc.local_invocation_index()
    sh = pc.shared(f32, 4)
    if SHARED:
        if lid < u32(4):       # the identity (reading S here would race with other workgroups)
            sh[lid] = f32({"add": 0.0, "min": 1e30, "max": -1e30}[KIND])
        pc.barrier()
    if i < n:
        if SHARED:
            getattr(pc.atomic, KIND)(sh, i % u32(4), X[i])
        else:
            getattr(pc.atomic, KIND)(S, i % u32(4), X[i])
    if SHARED:
        pc.barrier()
        if lid < u32(4):
            getattr(pc.atomic, KIND)(S, lid, sh[lid])


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("kind", ["add", "min", "max"])
def test_float_atomics_where_the_device_has_them(caps, kind, shared):
    X = np.random.default_rng(2).standard_normal(1000).astype(np.float32)
    S = np.zeros(4, np.float32)
    feature = f"shader{'Shared' if shared else 'Buffer'}Float32Atomic{'Add' if kind == 'add' else 'MinMax'}"
    if not caps.has(feature):
        with pytest.raises(pc.BackendUnavailable, match=feature):
            float_atomics[16](X, S, 1000, kind, shared, backend="vulkan")
        return
    gpu, emu = both(float_atomics, 16, caps.subgroup_size, X, S, 1000, KIND=kind, SHARED=shared)
    if kind == "add":
        np.testing.assert_allclose(gpu[1], emu[1], rtol=1e-4, atol=1e-4)   # any order
    else:
        np.testing.assert_array_equal(gpu[1], emu[1])      # one result in every order


@pc.kernel(workgroup_size=64)
def wide_atomics(D: pc.Buffer[pc.i64], F: pc.Buffer[pc.f64], V: pc.ReadBuffer[pc.i64], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        v = V[i]
        pc.atomic.add(D, i % u32(2), v)
        pc.atomic.max(D, u32(2) + i % u32(2), v)
        pc.atomic.xor(D, u32(4), v)
        if F[0] < 0.0:            # never true; the module still needs f64 atomic add
            pc.atomic.add(F, 0, 1.0)


def test_64_bit_atomics_and_the_feature_check(caps):
    V = np.random.default_rng(3).integers(-2**62, 2**62, 500).astype(np.int64)
    args = (np.zeros(5, np.int64), np.zeros(1, np.float64), V, 500)
    missing = [f for f in ("shaderBufferInt64Atomics", "shaderBufferFloat64AtomicAdd") if not caps.has(f)]
    if missing:
        with pytest.raises(pc.BackendUnavailable, match=missing[0]):
            wide_atomics[8](*args, backend="vulkan")
        return
    gpu, emu = both(wide_atomics, 8, caps.subgroup_size, *args)
    np.testing.assert_array_equal(gpu[0], emu[0])


@pc.kernel(workgroup_size=32)
def vector_collectives(X: pc.ReadBuffer[pc.vec(i32, 2)], M: pc.ReadBuffer[u32], O: pc.Buffer[pc.vec(i32, 2)]):
    i = pc.global_invocation_id.x
    x = X[i]
    O[i * u32(3)] = pc.subgroup.shuffle_xor(x, 1)
    if M[i] != 0:
        O[i * u32(3) + u32(1)] = pc.subgroup.add(x)
        O[i * u32(3) + u32(2)] = pc.subgroup.exclusive_scan(x, "or")


def test_vector_collectives_match_bit_for_bit(sgs):
    r = np.random.default_rng(9)
    X = r.integers(-100, 100, (64, 2)).astype(np.int32)
    M = (r.random(64) < 0.5).astype(np.uint32)
    gpu, emu = both(vector_collectives, 2, sgs, X, M, np.zeros((3 * 64, 2), np.int32))
    np.testing.assert_array_equal(gpu[2], emu[2])
