"""The fast launch path on Vulkan (lavapipe in CI): repeated prepared launches (barriers from
the write flags alone, push constants not re-recorded), timestamps across many reused
submissions (reset on the host), NumPy arguments staged or written through the BAR, timeline
semaphores ordering a submission, and the stated fallback of torch synchronisation where
semaphores cannot be shared."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import pycoop as pc
from pycoop import f32, u32
from runtime_helpers import VULKAN, axpy



pytestmark = [pytest.mark.vulkan, pytest.mark.skipif(not VULKAN, reason="no Vulkan device")]


@pc.kernel(workgroup_size=64)
def scale_into(X: pc.ReadBuffer[f32], Y: pc.WriteBuffer[f32], n: u32, a: f32):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = X[i] * a


@pc.kernel(workgroup_size=64)
def inc(X: pc.Buffer[f32], n: u32):
    i = pc.global_invocation_id.x + pc.global_invocation_id.y * 65536
    if i < n:
        X[i] = X[i] + 1.0


N = 256


def _barriers(rt, launches) -> int:
    before = rt.stats()["barriers"]
    with rt.batch():
        launches()
        after = rt.stats()["barriers"]
    pc.synchronize()
    return after - before


def test_a_repeated_launch_waits_only_for_its_own_writes():
    rt = pc.get_runtime("vulkan")
    x, y = pc.full(N, 1.0, backend="vulkan"), pc.zeros(N, backend="vulkan")
    outs = [pc.zeros(N, backend="vulkan") for _ in range(3)]
    axpy[4](x, y, 1.0, N)
    pc.synchronize()
    # the same launch 20 times: each reads and writes Y, so a barrier between each pair
    assert _barriers(rt, lambda: [axpy[4](x, y, 1.0, N) for _ in range(20)]) == 19
    np.testing.assert_array_equal(y.numpy(), np.full(N, 21.0, np.float32))
    # the same launch writing a fresh output each time: no barrier; then the same one again
    assert _barriers(rt, lambda: [scale_into[4](x, o, N, 2.0) for o in outs]) == 0
    assert _barriers(rt, lambda: [scale_into[4](x, outs[0], N, 3.0) for _ in range(4)]) == 3
    # the repeated launch first, then a launch reading what it wrote: one more barrier
    assert _barriers(rt, lambda: (axpy[4](x, y, 1.0, N), axpy[4](x, y, 1.0, N),
                                  scale_into[4](y, outs[1], N, 1.0))) == 2
    np.testing.assert_array_equal(outs[1].numpy(), np.full(N, 23.0, np.float32))


def test_push_constants_follow_scalars_and_pipeline_switches():
    x = pc.asarray(np.arange(N, dtype=np.float32), backend="vulkan")
    y, z = pc.zeros(N, backend="vulkan"), pc.zeros(N, backend="vulkan")
    want_y = np.zeros(N, np.float32)
    rt = pc.get_runtime("vulkan")
    with rt.batch():            # one command buffer: what is skipped must still be right
        for a in (1.0, 1.0, 2.0, 2.0, 1.0):
            axpy[4](x, y, a, N)                  # the same bytes twice, then new ones
            want_y += a * np.arange(N, dtype=np.float32)
            scale_into[4](x, z, N, a + 0.5)      # another pipeline and layout in between
            axpy[4](x, y, a, N)                  # axpy's memo again: its push is recorded anew
            want_y += a * np.arange(N, dtype=np.float32)
    np.testing.assert_array_equal(y.numpy(), want_y)
    np.testing.assert_array_equal(z.numpy(), np.arange(N, dtype=np.float32) * 1.5)


def test_timestamps_stay_valid_over_many_reused_submissions():
    from pycoop.runtime.vulkan.runtime import LAZY_BATCH
    x, y = pc.full(N, 1.0, backend="vulkan"), pc.zeros(N, backend="vulkan")
    rt = pc.get_runtime("vulkan")
    results = []
    for batch in range(6):          # submissions come back from the idle list and are reused
        with rt.batch():
            results += [axpy[4](x, y, 1.0, N) for _ in range(LAZY_BATCH + batch)]
        results.append(axpy[4](x, y, 1.0, N, repeat=3))
    pc.synchronize()
    assert y.numpy()[0] == sum(LAZY_BATCH + b for b in range(6)) + 18
    for r in results:
        assert all(math.isfinite(t) and t >= 0 for t in r.times_ms)
        starts, ends = zip(*r.spans_ns)
        assert all(a <= b for a, b in zip(starts, ends))
    assert rt.stats()["pending_launches"] == 0


@pc.kernel(workgroup_size=64)
def scale_half(X: pc.ReadBuffer[f32], Y: pc.WriteBuffer[f32], Z: pc.Buffer[f32], n: u32):
    i = pc.global_invocation_id.x
    if i < n // 2:                  # Y's second half is not written: the caller's values stay
        Y[i] = X[i] * 2.0
    if i < n:
        Z[i] = Z[i] + X[i]


@pytest.mark.parametrize("bar", [False, True])
@pytest.mark.parametrize("checked", [False, True])
def test_numpy_arguments_staged_or_written_through_the_bar(bar, checked):
    """Staged transfers: NumPy arguments are copied through staging memory, or (a discrete
    GPU with resizable BAR; forced here, lavapipe's memory is host-visible) written by the
    host straight into device-local memory the kernel reads. Either way the results, the
    elements the kernel leaves alone and the pool are the same, checked launches too."""
    from pycoop.runtime.vulkan import VulkanRuntime
    rt = VulkanRuntime(transfer="staged")
    try:
        rt.context.memory.bar = bar
        ck = scale_half.compile()
        ck = ck.variant(ck.debug_info, ck.abi_kind, checked)
        n = 50_000
        rng = np.random.default_rng(2)
        x = rng.standard_normal(n, dtype=np.float32)
        y, z = np.full(n, -5.0, np.float32), rng.standard_normal(n, dtype=np.float32)
        for _ in range(3):          # the pool hands the same buffers out again
            yy, zz = y.copy(), z.copy()
            rt.launch(ck.spv, "main", (-(-n // 64), 1, 1), ck.abi, [x, yy, zz, n])
            np.testing.assert_array_equal(yy[:n // 2], x[:n // 2] * 2.0)
            np.testing.assert_array_equal(yy[n // 2:], y[n // 2:])
            np.testing.assert_array_equal(zz, z + x)
        kinds = {kind for kind, _ in rt.context.memory._free}
        assert ("bar" in kinds) == bar
        stats = rt.stats()
        assert stats["pending_launches"] == 0 and stats["live_allocations"] == stats["pooled_count"]
    finally:
        rt.close()


def test_a_timeline_semaphore_orders_a_submission():
    from pycoop.runtime.vulkan.timeline import TimelineSemaphore
    rt = pc.get_runtime("vulkan")
    ctx = rt.context
    before, after = TimelineSemaphore(ctx.device), TimelineSemaphore(ctx.device)
    try:
        x, y = pc.full(N, 1.0, backend="vulkan"), pc.zeros(N, backend="vulkan")
        pc.synchronize()
        rt.wait_before_next(before.handle, 1)      # as torch's stream signal would do
        axpy[4](x, y, 2.0, N)
        rt.flush(signal=(after.handle, 1))
        assert not after.wait(1, 0.05)             # held back by the wait
        assert after.value == 0 and rt.stats()["pending_launches"] == 1
        before.signal(1)                           # the other side signals
        assert after.wait(1, 10.0)
        np.testing.assert_array_equal(y.numpy(), np.full(N, 2.0, np.float32))
        rt.flush(signal=(after.handle, 2))         # nothing open: an empty submission signals
        assert after.wait(2, 10.0)
        pc.synchronize()
    finally:
        before.destroy()
        after.destroy()


def test_torch_synchronisation_falls_back_and_says_why(monkeypatch):
    from pycoop.runtime.interop import CudaSync
    from pycoop.runtime.vulkan.timeline import timeline_support
    rt = pc.get_runtime("vulkan")
    ctx = rt.context
    why = timeline_support(ctx.device)
    if why is None:
        pytest.skip("this device can share timeline semaphores (the GPU tests cover it)")
    sync = CudaSync(rt, ctx)
    assert sync.describe() == "not used yet"
    monkeypatch.setenv("PYCOOP_TORCH_SYNC", "semaphore")
    with pytest.raises(pc.BackendUnavailable, match="cannot share semaphores with CUDA"):
        sync.mode
    monkeypatch.setenv("PYCOOP_TORCH_SYNC", "auto")
    with pytest.warns(RuntimeWarning, match="waiting on the host") as record:
        assert sync.mode == "coarse"
    assert why in str(record[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # said once, not at every launch
        assert sync.mode == "coarse"
    assert sync.describe() == f"coarse ({why})"
    monkeypatch.setenv("PYCOOP_TORCH_SYNC", "coarse")
    assert sync.mode == "coarse" and sync.describe().startswith("coarse (PYCOOP_TORCH_SYNC")
    monkeypatch.setenv("PYCOOP_TORCH_SYNC", "sometimes")
    with pytest.raises(ValueError, match="PYCOOP_TORCH_SYNC"):
        sync.mode
    sync.destroy()
