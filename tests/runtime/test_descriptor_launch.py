"""pycoop's Vulkan runtime launches descriptor-ABI modules (`compile(abi="descriptors")`):
buffers bound as storage-buffer descriptors of set 0 (NumPy arrays through staging, device
arrays and views at their offset), scalars in push constants. Both ABIs must give the
emulator's results, and async chains mixing them must keep their dependencies (lavapipe)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f32, i32, u32
from pycoop.spirv import tools
from runtime_helpers import VULKAN



pytestmark = [pytest.mark.vulkan,
              pytest.mark.skipif(not VULKAN, reason="no Vulkan device")]
ABIS = ["device_address", "descriptors"]


@pc.kernel(workgroup_size=64)
def saxpy3(X: pc.ReadBuffer[f32], n: u32, Y: pc.Buffer[f32], a: f32, Out: pc.WriteBuffer[f32]):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = Y[i] + a * X[i]
        Out[i] = Y[i] * 2.0


@pc.kernel(workgroup_size=64)
def reverse_blocks(X: pc.ReadBuffer[i32], Y: pc.WriteBuffer[i32], bias: i32):
    """Each workgroup reverses its 64 elements through shared memory."""
    tile = pc.shared(i32, 64)
    lid = pc.local_invocation_id.x
    base = pc.workgroup_id.x * 64
    tile[lid] = X[base + lid]
    pc.barrier()
    Y[base + lid] = tile[63 - lid] + bias


@pc.kernel(workgroup_size=64)
def add_scaled(X: pc.ReadBuffer[f32], Y: pc.Buffer[f32], a: f32, n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = Y[i] + a * X[i]


def compiled(kernel, abi):
    ck = kernel.compile(abi=abi)
    tools.validate(ck.spv)          # spirv-val, Vulkan 1.3 environment
    assert ck.abi["abi"] == abi
    return ck


@pytest.mark.parametrize("abi", ABIS)
@settings(max_examples=6, deadline=None)
@given(n=st.integers(0, 300), a=st.floats(-4, 4, width=32), seed=st.integers(0, 2**16))
def test_scalar_kernel_matches_the_emulator(abi, n, a, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = np.full(n, -7, np.float32)       # write-only: elements not written keep their values
    ey, eout = y.copy(), out.copy()
    grid = max(1, -(-n // 64))
    saxpy3.compile().launch(grid, [x, n, ey, a, eout], backend="emulator")
    compiled(saxpy3, abi).launch(grid, [x, n, y, a, out], backend="vulkan")
    np.testing.assert_array_equal(y, ey)
    np.testing.assert_array_equal(out, eout)


@pytest.mark.parametrize("abi", ABIS)
def test_shared_memory_kernel_matches_the_emulator(abi):
    x = np.random.default_rng(1).integers(-1000, 1000, 64 * 5, dtype=np.int32)
    want, got = np.zeros_like(x), np.zeros_like(x)
    reverse_blocks.compile().launch(5, [x, want, 3], backend="emulator")
    compiled(reverse_blocks, abi).launch(5, [x, got, 3], backend="vulkan")
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, x.reshape(5, 64)[:, ::-1].ravel() + 3)


def test_device_arrays_and_numpy_arguments_mixed():
    x = np.arange(200, dtype=np.float32)
    y = pc.asarray(np.ones(200, np.float32), backend="vulkan")
    out = np.zeros(200, np.float32)
    compiled(saxpy3, "descriptors").launch(4, [x, 200, y, 0.5, out])
    np.testing.assert_array_equal(y.numpy(), 1 + 0.5 * x)
    np.testing.assert_array_equal(out, 2 * (1 + 0.5 * x))


def test_the_same_array_bound_to_two_bindings():
    """One buffer passed for X and Y: two descriptors of the same memory."""
    y = pc.asarray(np.arange(100, dtype=np.float32), backend="vulkan")
    compiled(add_scaled, "descriptors").launch(2, [y, y, 1.0, 100])
    np.testing.assert_array_equal(y.numpy(), 2 * np.arange(100, dtype=np.float32))


def test_views_at_aligned_offsets():
    from pycoop.runtime.vulkan import get_runtime
    align = get_runtime().capabilities.min_storage_buffer_offset_alignment
    step = max(align // 4, 1)          # f32 elements per alignment unit
    base = np.arange(6 * step, dtype=np.float32)
    buf = pc.asarray(base, backend="vulkan")
    x, y = buf[step:3 * step], buf[3 * step:5 * step]      # views at byte 4*step and 12*step
    assert x.offset * 4 % align == 0 and y.offset * 4 % align == 0
    n = 2 * step
    compiled(add_scaled, "descriptors").launch(-(-n // 64), [x, y, 2.0, n])
    want = base.copy()
    want[3 * step:5 * step] += 2.0 * base[step:3 * step]
    np.testing.assert_array_equal(buf.numpy(), want)     # nothing outside y was touched


def test_misaligned_view_is_refused_naming_the_limit():
    from pycoop.runtime.vulkan import get_runtime
    align = get_runtime().capabilities.min_storage_buffer_offset_alignment
    if 4 % align == 0:
        pytest.skip(f"minStorageBufferOffsetAlignment {align}: every f32 view is aligned")
    base = np.arange(128, dtype=np.float32)
    buf = pc.asarray(base, backend="vulkan")
    x, y = buf[64:128], buf[1:65]               # y starts 4 bytes in
    ck = compiled(add_scaled, "descriptors")
    with pytest.raises(pc.ArgumentError, match=rf"parameter Y: the view starts at byte 4 .*"
                                               rf"minStorageBufferOffsetAlignment \({align}\)"):
        ck.launch(1, [x, y, 1.0, 64])
    add_scaled.compile().launch(1, [x, y, 1.0, 64])      # the device-address ABI takes it
    want = base.copy()
    want[1:65] += base[64:128]
    np.testing.assert_array_equal(buf.numpy(), want)


def test_dependent_async_launches_mixing_abis():
    """A chain on device arrays, alternating ABIs, queued without waiting: each launch reads
    what the previous wrote (the hazard tracker must see descriptor-bound buffers too)."""
    by_abi = {abi: compiled(add_scaled, abi) for abi in ABIS}
    x0 = np.random.default_rng(7).standard_normal(1000).astype(np.float32)
    a, b = pc.asarray(x0, backend="vulkan"), pc.zeros(1000, backend="vulkan")
    want_a, want_b = x0.copy(), np.zeros(1000, np.float32)
    for step in range(12):
        abi = ABIS[step % 2]
        src, dst = (a, b) if step % 3 else (b, a)
        s, d = (want_a, want_b) if step % 3 else (want_b, want_a)
        by_abi[abi].launch(16, [src, dst, 0.5, 1000])
        d += np.float32(0.5) * s
    np.testing.assert_allclose(a.numpy(), want_a, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), want_b, rtol=1e-6)


def test_repeated_launches_reuse_the_pipeline_and_outgrow_a_descriptor_pool():
    """More launches in one batch than a descriptor pool holds sets: pools are added, and
    reset when the submission is reused."""
    from pycoop.runtime.vulkan import batch, get_runtime
    ck = compiled(add_scaled, "descriptors")
    x = pc.asarray(np.ones(64, np.float32), backend="vulkan")
    y = pc.zeros(64, backend="vulkan")
    runtime = get_runtime()
    ck.launch(1, [x, y, 1.0, 64])
    misses = runtime.stats()["pipeline_misses"]
    launches = 2 * batch.POOL_SETS + 5
    with runtime.batch():
        for _ in range(launches):
            ck.launch(1, [x, y, 1.0, 64])
    np.testing.assert_array_equal(y.numpy(), np.full(64, launches + 1, np.float32))
    assert runtime.stats()["pipeline_misses"] == misses


def test_checked_launch_of_a_descriptor_module_is_refused():
    ck = compiled(add_scaled, "descriptors")
    x = np.zeros(4, np.float32)
    with pytest.raises(pc.ArgumentError, match="checked=True .*device-address ABI"):
        ck.launch(1, [x, x.copy(), 1.0, 4], checked=True)


def test_runtime_checks_the_abi_key():
    from pycoop.runtime.vulkan.abi import Binder
    from pycoop.runtime.vulkan.errors import ArgumentError
    abi = compiled(add_scaled, "descriptors").abi
    with pytest.raises(ArgumentError, match="kernel ABI 'bindless' is not one of"):
        Binder({**abi, "abi": "bindless"})
    with pytest.raises(ArgumentError, match="descriptor ABI keeps its scalars in push"):
        Binder({**abi, "mode": "arg_buffer"})
    args = [dict(a) for a in abi["args"]]
    args[1]["binding"] = 5
    with pytest.raises(ArgumentError, match="parameter Y: expected storage buffer set 0 binding 1"):
        Binder({**abi, "args": args})
    assert [b.bindings for b in Binder(abi).bind(
        [np.zeros(2, np.float32), np.zeros(2, np.float32), 1.0, 2]).buffers] == [[0], [1]]


@pc.kernel(workgroup_size=64)
def sum_many(A0: pc.ReadBuffer[i32], A1: pc.ReadBuffer[i32], A2: pc.ReadBuffer[i32],
             A3: pc.ReadBuffer[i32], A4: pc.ReadBuffer[i32], Out: pc.WriteBuffer[i32]):
    i = pc.global_invocation_id.x
    Out[i] = A0[i] + 2 * A1[i] + 3 * A2[i] + 4 * A3[i] + 5 * A4[i]


def test_sets_larger_than_a_descriptor_pool(monkeypatch):
    """A kernel with more buffers than a pool holds gets a pool of its own per launch."""
    from pycoop.runtime.vulkan import batch
    monkeypatch.setattr(batch, "POOL_BUFFERS", 4)
    ins = [np.full(64, k + 1, np.int32) for k in range(5)]
    out = np.zeros(64, np.int32)
    ck = compiled(sum_many, "descriptors")
    for _ in range(2):
        ck.launch(1, [*ins, out])
        np.testing.assert_array_equal(out, np.full(64, 1 + 4 + 9 + 16 + 25))
        out[:] = 0


def test_more_buffers_than_the_device_allows_per_stage():
    from pycoop.runtime.vulkan import get_runtime
    caps = get_runtime().capabilities
    old, caps.max_per_stage_storage_buffers = caps.max_per_stage_storage_buffers, 5
    try:
        with pytest.raises(pc.ArgumentError, match=r"kernel binds 6 storage buffers; .* allows 5 "
                                                   r"per shader stage"):
            compiled(sum_many, "descriptors").launch(
                1, [np.zeros(64, np.int32) for _ in range(6)])
    finally:
        caps.max_per_stage_storage_buffers = old
