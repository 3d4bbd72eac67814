"""Device arrays (pycoop.Array) and asynchronous launches, on the emulator and on Vulkan
(lavapipe in CI): constructors, views with offsets, hazards between dependent launches,
errors at synchronisation, pooling without leaks, and no stale memory anywhere."""
from __future__ import annotations

import gc
import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f32, i32, u32
from runtime_helpers import VULKAN, axpy



BACKENDS = ["emulator", pytest.param("vulkan", marks=[
    pytest.mark.vulkan, pytest.mark.skipif(not VULKAN, reason="no Vulkan device")])]


@pc.kernel(workgroup_size=64)
def add_one(X: pc.ReadBuffer[i32], Y: pc.WriteBuffer[i32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = X[i] + 1


@pc.kernel(workgroup_size=32)
def write_first(Y: pc.WriteBuffer[f32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = f32(i) + 0.5


def groups(n: int, size: int = 64) -> int:
    return max(1, -(-n // size))


# ---------------------------------------------------------------- constructors and copies
@pytest.mark.parametrize("backend", BACKENDS)
def test_constructors_and_round_trips(backend):
    a = pc.empty((3, 5), pc.f32, backend=backend)
    assert (a.shape, a.dtype, a.size, a.nbytes, a.ndim, len(a)) == ((3, 5), np.float32, 15, 60, 2, 3)
    assert a.backend == backend
    np.testing.assert_array_equal(a.numpy(), np.zeros((3, 5), np.float32))   # empty is zeroed
    np.testing.assert_array_equal(pc.zeros(7, np.int32, backend=backend).numpy(), np.zeros(7, np.int32))
    np.testing.assert_array_equal(pc.full((2, 2), 2.5, np.float16, backend=backend).numpy(),
                                  np.full((2, 2), 2.5, np.float16))
    src = np.arange(24, dtype=np.int64).reshape(4, 6)
    b = pc.asarray(src, backend=backend)
    src[0, 0] = 99                                   # asarray copied: the array keeps 0
    assert b.numpy()[0, 0] == 0 and np.asarray(b).shape == (4, 6)
    assert pc.asarray(b) is b                        # already there: no copy
    bf = pc.asarray(np.arange(8, dtype=np.float32).astype("bfloat16"), backend=backend)
    assert bf.dtype.name == "bfloat16" and bf.numpy().astype(np.float32).tolist() == list(range(8))
    assert "pycoop.Array(shape=(4, 6), dtype=int64" in repr(b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_copy_from_numpy_and_arrays(backend):
    a = pc.zeros((4, 4), np.float32, backend=backend)
    a.copy_from(np.arange(16, dtype=np.float32))           # same size, any shape
    b = pc.zeros(16, np.float32, backend=backend).reshape(4, 4)
    b.copy_from(a)
    np.testing.assert_array_equal(b.numpy(), np.arange(16, dtype=np.float32).reshape(4, 4))
    with pytest.raises(pc.ArgumentError, match="source has 3 elements, the array 16"):
        a.copy_from(np.zeros(3, np.float32))
    with pytest.raises(pc.ArgumentError, match=r"(?s)source dtype float64.*astype\('float32'\)"):
        a.copy_from(np.zeros(16))


@pytest.mark.parametrize("backend", BACKENDS)
def test_views_have_offsets_and_kernels_see_only_them(backend):
    base = pc.asarray(np.zeros(256, np.float32), backend=backend)
    rows = base.reshape(8, 32)
    view = rows[2:5]
    assert view.shape == (3, 32) and view.offset == 64 and rows[-1].offset == 224
    x = pc.full(96, 2.0, np.float32, backend=backend)
    axpy[groups(96)](x, view.reshape(-1), 3.0, 96)
    want = np.zeros(256, np.float32)
    want[64:160] = 6.0
    np.testing.assert_array_equal(base.numpy(), want)
    np.testing.assert_array_equal(rows[3].numpy(), np.full(32, 6.0, np.float32))
    with pytest.raises(pc.ArgumentError, match="only contiguous slices"):
        base[::2]
    with pytest.raises(pc.ArgumentError, match="indexed by an int or a slice .* got True"):
        base[True]
    for bad in (slice(1.0, 2), slice(None, None, 0)):   # were slice.indices' own errors
        with pytest.raises(pc.ArgumentError, match="an Array slice takes int bounds"):
            base[bad]
    with pytest.raises(pc.ArgumentError, match="cannot reshape an array of size 256"):
        base.reshape(5, -1)
    for bad in ((2.7, 128), (True, 256), "a", None, 256.0):   # never truncated in silence
        with pytest.raises(pc.ArgumentError, match="reshape takes ints"):
            base.reshape(bad)
    assert base.reshape(np.int64(8), 32).shape == base.reshape([8, 32]).shape == (8, 32)


def test_contents_numpy_cannot_read_are_argument_errors():
    with pytest.raises(pc.ArgumentError, match="asarray: NumPy cannot read .* inhomogeneous"):
        pc.asarray([[1.0], [2.0, 3.0]], backend="emulator")
    with pytest.raises(pc.ArgumentError, match="asarray: .* float32: could not convert"):
        pc.asarray(np.array(["abc"]), np.float32, backend="emulator")
    with pytest.raises(pc.ArgumentError, match="full: the fill value 'a' is no float32"):
        pc.full(3, "a", backend="emulator")
    with pytest.raises(pc.ArgumentError, match="larger than NumPy can hold"):
        pc.empty(2 ** 62, backend="emulator")


@pytest.mark.parametrize("call,message", [
    # NumPy's casts would wrap, truncate or invent these values in silence
    (lambda: pc.full(3, -1, pc.u32), "full: the fill value -1 is no uint32 value .*gives 4294967295"),
    (lambda: pc.full(3, 300, pc.u8), "the fill value 300 is no uint8 value"),     # an OverflowError
    (lambda: pc.full(3, float("nan"), pc.i32), "the fill value nan is no int32 value"),
    (lambda: pc.full(3, 2.7, pc.i32), "the fill value 2.7 is no int32 value .*gives 2"),
    (lambda: pc.full(3, 1e6, pc.f16), "the fill value 1000000.0 is no float16 value .*gives inf"),
    (lambda: pc.full(3, None, pc.f32), "the fill value None is no float32 value"),  # was NaN
    (lambda: pc.full(3, 1j, pc.f32), "the fill value 1j is no float32 value"),      # was 0
    (lambda: pc.asarray([-1], pc.u8), "asarray: -1 is no uint8 value .*gives 255"),
    (lambda: pc.asarray([1.0, float("nan")], pc.i32), "asarray: nan is no int32 value"),
    (lambda: pc.asarray(np.array([1, None]), pc.f32), "asarray: object values are no float32"),
])
def test_conversions_that_would_change_values_are_refused(call, message):
    with pc.use_backend("emulator"), pytest.raises(pc.ArgumentError, match=message):
        call()


def test_conversions_that_keep_values_or_round_floats_are_taken():
    with pc.use_backend("emulator"):
        assert pc.full(2, 2.0, pc.i32).numpy().tolist() == [2, 2]
        assert pc.full(2, 0.1, pc.f32).numpy()[0] == np.float32(0.1)          # rounded
        assert np.isnan(pc.full(2, float("nan"), pc.f16).numpy()).all()       # NaN is a float
        assert pc.asarray([1.0, 255.0], pc.u8).numpy().tolist() == [1, 255]
        assert pc.asarray(np.array(["1.5"]), pc.f32).numpy().tolist() == [1.5]


@pytest.mark.parametrize("backend", BACKENDS)
def test_dtype_views_share_the_bytes(backend):
    """`a.view(dtype)` reads the same bytes as another dtype, like NumPy's: the last axis
    scales, offsets carry over, and kernels writing the view change the original."""
    ref = np.arange(48, dtype=np.float16).reshape(3, 16)
    a = pc.asarray(ref, backend=backend)
    w = a[1:].view(pc.u32)
    assert w.shape == (2, 8) and w.dtype == np.uint32 and w.offset == 8
    np.testing.assert_array_equal(w.numpy(), ref[1:].view(np.uint32))
    f = a.view(np.float32).reshape(-1)
    axpy[groups(24)](pc.zeros(24, np.float32, backend=backend), f, 0.0, 24)   # y = 0 * x + y
    np.testing.assert_array_equal(a.numpy(), ref)
    with pytest.raises(pc.ArgumentError, match=r"cannot view float16 \(7,\) as uint32"):
        a.reshape(-1)[1:8].view(np.uint32)


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 300), start=st.integers(0, 40), length=st.integers(0, 80))
def test_slices_match_numpy_on_the_emulator(n, start, length):
    ref = np.arange(n, dtype=np.int32)
    a = pc.asarray(ref, backend="emulator")
    out = pc.zeros(n, np.int32, backend="emulator")
    sl = slice(start, start + length)
    m = len(ref[sl])
    add_one[groups(max(m, 1))](a[sl], out[sl], m)
    want = np.zeros(n, np.int32)
    want[sl] = ref[sl] + 1
    np.testing.assert_array_equal(out.numpy(), want)


# ---------------------------------------------------------------- asynchronous launches
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_chain_of_dependent_launches(backend):
    n = 1000
    a = pc.asarray(np.arange(n, dtype=np.int32), backend=backend)
    b = pc.empty(n, np.int32, backend=backend)
    for _ in range(25):                    # a -> b -> a ...: each reads the previous write
        add_one[groups(n)](a, b, n)
        add_one[groups(n)](b, a, n)
    results = [axpy[groups(n)](pc.full(n, 1.0, backend=backend), pc.zeros(n, backend=backend), 1.0, n)
               for _ in range(3)]
    np.testing.assert_array_equal(a.numpy(), np.arange(n, dtype=np.int32) + 50)
    assert all(r.backend == backend and len(r.times_ms) == 1 for r in results)


@pytest.mark.vulkan
@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
def test_barriers_only_where_a_launch_depends_on_an_earlier_one():
    rt = pc.get_runtime("vulkan")
    n = 256
    xs = [pc.full(n, float(i), backend="vulkan") for i in range(4)]
    ys = [pc.zeros(n, backend="vulkan") for _ in range(4)]
    whole = pc.zeros(2 * n, backend="vulkan")
    pc.synchronize()
    axpy[groups(n)](xs[0], ys[0], 1.0, n)      # warm the pipeline
    pc.synchronize()

    def barriers(launches):
        before = rt.stats()["barriers"]
        with rt.batch():                      # every launch in one command buffer
            launches()
            after = rt.stats()["barriers"]
        pc.synchronize()
        return after - before

    # independent launches (distinct outputs, shared read-only inputs): no barrier at all
    assert barriers(lambda: [axpy[groups(n)](xs[0], y, 1.0, n) for y in ys]) == 0
    # each launch reads what the previous one wrote: one barrier between each pair
    assert barriers(lambda: [axpy[groups(n)](ys[i], ys[i + 1], 1.0, n) for i in range(3)]) == 2
    # disjoint halves of one buffer are independent; overlapping views are the same memory
    assert barriers(lambda: (axpy[groups(n)](xs[0], whole[:n], 1.0, n),
                             axpy[groups(n)](xs[1], whole[n:], 1.0, n))) == 0
    assert barriers(lambda: (axpy[groups(n)](xs[0], whole[:n], 1.0, n),
                             axpy[groups(n)](xs[1], whole[n // 2:n // 2 + n], 1.0, n))) == 1
    # a write after a read of the same memory waits for the read
    assert barriers(lambda: (axpy[groups(n)](xs[2], ys[0], 1.0, n),
                             axpy[groups(n)](ys[1], xs[2], 1.0, n))) == 1
    np.testing.assert_array_equal(xs[2].numpy(), ys[1].numpy() + 2.0)


@pytest.mark.vulkan
@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
def test_launches_are_queued_until_a_synchronisation():
    rt = pc.get_runtime("vulkan")
    n = 64
    x, y = pc.full(n, 1.0, backend="vulkan"), pc.zeros(n, backend="vulkan")
    pc.synchronize()
    with rt.batch():                                      # recorded, not submitted
        results = [axpy[1](x, y, 1.0, n) for _ in range(5)]
        assert rt.stats()["pending_launches"] == 5
        assert not any(r._pending.done for r in results)
        assert y.numpy()[0] == 5.0                        # .numpy() submits and waits
    assert rt.stats()["pending_launches"] == 0
    assert all(len(r.times_ms) == 1 and r.times_ms[0] >= 0 for r in results)
    host = np.zeros(n, np.float32)
    axpy[1](x, y, 1.0, n)
    r = axpy[1](x, host, 2.0, n)                          # a NumPy launch waits for everything
    assert r._pending.done and rt.stats()["pending_launches"] == 0
    np.testing.assert_array_equal(host, np.full(n, 2.0, np.float32))
    r = axpy[1](x, y, 1.0, n, repeat=3)                   # repeat: 3 timed dispatches, in order
    assert len(r.times_ms) == 3 and y.numpy()[0] == 9.0


@pytest.mark.vulkan
@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
def test_thousands_of_launches_do_not_leak():
    rt = pc.get_runtime("vulkan")
    n = 300

    def work(count):
        x, y = pc.full(n, 1.0, backend="vulkan"), pc.zeros(n, backend="vulkan")
        for _ in range(count):
            axpy[groups(n)](x, y, 1.0, n)
            tmp = pc.zeros(n, backend="vulkan")            # freed while its launch is queued
            axpy[groups(n)](y, tmp, 0.0, n)
        assert y.numpy()[0] == count

    gc.collect()                    # earlier tests' garbage (arrays in cycles) must not count
    work(50)
    before = rt.stats()
    work(1500)
    after = rt.stats()
    assert before["pending_launches"] == after["pending_launches"] == 0
    for key in ("array_count", "array_bytes"):
        assert after[key] == before[key], key
    # after a synchronisation only live arrays hold buffers; the pool is capped (per kind)
    for stats in (before, after):
        assert stats["live_allocations"] - stats["pooled_count"] == stats["array_count"]
        assert stats["live_bytes"] - stats["pooled_bytes"] == stats["array_bytes"]
    from pycoop.runtime.vulkan.memory import POOL_LIMIT_COUNT
    assert after["pooled_count"] <= 3 * POOL_LIMIT_COUNT


@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
def test_a_loop_of_launches_with_temporaries_stops_allocating():
    """A block of launches called in a loop, each call with its own temporaries freed while
    queued (as pycoop.kernels.MLPBlock does): once warm, the pool serves every array. Each
    round of 20 calls keeps its 180 temporaries to its end and then synchronises, so exactly
    180 are in use whatever the device's speed: more than the 64 free buffers per kind the
    pool kept before (an MLP block then allocated ~7 new Vulkan buffers per call), fewer than
    it keeps now."""
    rt = pc.get_runtime("vulkan")
    memory = rt._context().memory
    pc.synchronize()
    memory.trim()            # earlier tests' pooled buffers would count against the pool's caps
    n = 64
    x = pc.full(n, 1.0, backend="vulkan")

    def one_round():
        held = []            # a round's temporaries live to its end: 180 in use, every round
        for _ in range(20):
            tmps = [pc.empty(n * (1 + i % 3), backend="vulkan") for i in range(9)]
            for t in tmps:
                axpy[groups(n)](x, t, 1.0, n)
            held += tmps
        # returning frees every one of them (no loop variable outlives the round), while
        # their launches may still be queued

    def rounds(count):
        for _ in range(count):
            one_round()
            pc.synchronize()

    rounds(2)
    allocate = memory._allocate
    made = []
    memory._allocate = lambda *a: made.append(a) or allocate(*a)
    try:
        rounds(5)
    finally:
        del memory._allocate
    # the arrays' size classes only: a checked launch's fault-record slab (one per submission,
    # 16 KiB) may be new when more submissions are in flight than during the warm-up, which
    # depends on how busy the machine is
    from pycoop.runtime.vulkan.memory import size_class
    sizes = {size_class(n * 4 * k) for k in (1, 2, 3)}
    made = [a for a in made if a[1] in sizes]
    assert not made, f"{len(made)} new buffers for arrays in 100 warm calls"


class _FailingWaits:
    """pyvulkan's `lib` with fence queries answering what a driver reports for a GPU fault
    (-4, device lost) or a hang (not ready, then a timeout), without making one. Once the
    failure has been reported, fences answer truthfully again (so the device is torn down)."""

    def __init__(self, lib, result: int):
        self._lib, self._result, self._armed = lib, result, True

    def __getattr__(self, name):
        return getattr(self._lib, name)

    def vkGetFenceStatus(self, device, fence):
        if self._armed and self._result == -4:
            # the work is over before the device is called lost, so tearing it down is safe
            # (destroying a device whose queue still runs a dispatch crashed lavapipe)
            self._lib.vkDeviceWaitIdle(device)
            self._armed = False
            return -4
        if self._armed:
            return 1
        return self._lib.vkGetFenceStatus(device, fence)

    def vkWaitForFences(self, *args):
        self._armed = False
        return self._result


@pytest.mark.vulkan
@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
@pytest.mark.parametrize("result, error", [(-4, "DeviceLost"), (2, "VulkanTimeout")])
def test_device_errors_surface_at_synchronisation_naming_the_launch(monkeypatch, result, error):
    from pycoop.runtime.vulkan import errors
    from pycoop.runtime.vulkan import runtime as module
    kind = getattr(errors, error)
    x, y = pc.full(64, 1.0, backend="vulkan"), pc.zeros(64, backend="vulkan")
    pc.synchronize()
    with monkeypatch.context() as m:
        m.setattr(module, "lib", _FailingWaits(module.lib, result))
        r = axpy[1](x, y, 2.0, 64)                     # queued: nothing is raised here
        line = sys._getframe().f_lineno - 1
        with pytest.raises(kind) as info:
            pc.synchronize()
    assert f"kernel axpy launched at {__file__}:{line}" in str(info.value)
    with pytest.raises(kind):
        r.times_ms                                  # the launch's result reports it too
    with pytest.raises(pc.BackendUnavailable, match="device was lost or closed"):
        y.numpy()                                   # arrays of the dropped device are gone
    z = pc.full(4, 3.0, backend="vulkan")           # the next use gets a fresh device
    np.testing.assert_array_equal(z.numpy(), np.full(4, 3.0, np.float32))


class _TimedWaits(_FailingWaits):
    """As _FailingWaits, recording the timeout of each blocking fence wait (seconds)."""

    def __init__(self, lib, result: int):
        super().__init__(lib, result)
        self.timeouts = []

    def vkWaitForFences(self, *args):
        self.timeouts.append(args[-1] / 1e9)
        return super().vkWaitForFences(*args)


def _new_kernel(value: float):
    """A kernel whose module (so whose pipeline) no other test launches."""
    @pc.kernel(workgroup_size=64)
    def add_constant(Y: pc.Buffer[f32]):
        i = pc.global_invocation_id.x
        Y[i] = Y[i] + f32(value)
    return add_constant


@pytest.mark.vulkan
@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
@pytest.mark.parametrize("graph", [False, True])
def test_a_first_launch_on_a_cpu_device_waits_for_its_compile(monkeypatch, graph):
    """lavapipe compiles a kernel at its first dispatch, inside the fence wait: by default a
    submission holding a pipeline's first dispatch (or a graph's first replay) waits
    CPU_COMPILE_TIMEOUT_S on a CPU device, and a timeout there names the compile; the next
    launch of that kernel waits the runtime's timeout_s. GPUs wait timeout_s throughout."""
    from pycoop.runtime.vulkan import errors
    from pycoop.runtime.vulkan import runtime as module
    rt = pc.get_runtime("vulkan")
    cpu = rt.capabilities.device_type == "cpu"
    y = pc.zeros(64, pc.f32, backend="vulkan")
    pc.synchronize()

    def timed_out_wait(kernel):
        """The timeout of the one fence wait of a launch of `kernel`, made to time out."""
        with monkeypatch.context() as m:
            waits = _TimedWaits(module.lib, 2)
            m.setattr(module, "lib", waits)
            if graph:
                with pc.capture(backend="vulkan") as g:
                    kernel[1](y)
                g.launch()
            else:
                kernel[1](y)
            with pytest.raises(errors.VulkanTimeout) as info:
                pc.synchronize()
        assert len(waits.timeouts) == 1
        return waits.timeouts[0], str(info.value)

    first, message = timed_out_wait(_new_kernel(1000.5 + graph))
    assert first == pytest.approx(max(rt.timeout_s, module.CPU_COMPILE_TIMEOUT_S) if cpu
                                  else rt.timeout_s)
    assert ("the wait included compiling kernel add_constant launched at" in message) == cpu
    y = pc.zeros(64, pc.f32, backend="vulkan")         # the device was recreated
    ran = _new_kernel(2000.5 + graph)
    if graph:   # a replay compiles the graph's fault harvest too (its launches are checked)
        with pc.capture(backend="vulkan") as g:
            ran[1](y)
        g.launch()
    else:
        ran[1](y)
    pc.synchronize()                                    # compiled by this first launch
    again, message = timed_out_wait(ran)
    assert again == pytest.approx(rt.timeout_s) and "compiling" not in message


# ---------------------------------------------------------------- no stale memory
@pytest.mark.parametrize("backend", BACKENDS)
def test_unwritten_elements_of_a_numpy_array_keep_the_callers_values(backend):
    y = np.full(64, 7.0, np.float32)
    write_first[1](y, 32, backend=backend)               # writes Y[0:32] only
    np.testing.assert_array_equal(y[:32], np.arange(32, dtype=np.float32) + 0.5)
    np.testing.assert_array_equal(y[32:], np.full(32, 7.0, np.float32))


@pytest.mark.vulkan
@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
@pytest.mark.parametrize("mode", ["direct", "staged"])
def test_no_stale_device_memory_in_either_transfer_mode(mode):
    from pycoop.runtime.vulkan import VulkanRuntime
    rt = VulkanRuntime(transfer=mode)
    try:
        ck = write_first.compile()
        for _ in range(3):          # pooled buffers that held other data come around again
            junk = np.full(64, -1.0, np.float32)
            rt.launch(ck.spv, "main", (2, 1, 1), ck.abi, [junk, 64])
            y = np.full(64, 7.0, np.float32)
            rt.launch(ck.spv, "main", (1, 1, 1), ck.abi, [y, 32])
            np.testing.assert_array_equal(y[32:], np.full(32, 7.0, np.float32))
    finally:
        rt.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_pooled_memory_never_shows_an_earlier_arrays_contents(backend):
    for _ in range(3):
        a = pc.full(1000, 123.0, np.float32, backend=backend)
        a.numpy()
        del a
        pc.synchronize()
        for make in (pc.empty, pc.zeros):
            b = make(1000, np.float32, backend=backend)
            np.testing.assert_array_equal(b.numpy(), np.zeros(1000, np.float32))


# ---------------------------------------------------------------- backends meet
@pytest.mark.vulkan
@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
def test_arrays_of_two_backends_never_mix_silently():
    v, e = pc.zeros(64, backend="vulkan"), pc.zeros(64, backend="emulator")
    with pytest.raises(pc.ArgumentError, match="(?s)live on different backends.*a.to"):
        axpy[1](v, e, 1.0, 64)
    with pytest.raises(pc.ArgumentError, match="backend 'emulator' was asked for, but its array "
                                              "arguments live on vulkan"):
        axpy[1](v, v, 1.0, 64, backend="emulator")
    moved = pc.full(64, 2.0, backend="vulkan").to("emulator")
    assert moved.backend == "emulator" and moved.to("emulator") is moved
    axpy[1](moved, e, 1.0, 64)
    np.testing.assert_array_equal(e.numpy(), np.full(64, 2.0, np.float32))


@pytest.mark.vulkan
@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
def test_a_kernel_vulkan_cannot_run_refuses_vulkan_arrays():
    from pycoop import intel, u16

    @pc.kernel(workgroup_size=16, subgroup_size=16)
    def load_rows(src: pc.ReadBuffer[u16], dst: pc.WriteBuffer[u16], w: i32, h: i32):
        a = intel.block_load(src, width=16, height=8, memory_width=w * 2, memory_height=h,
                             pitch=w * 2, coord=pc.make_vector([i32(0), i32(0)]))
        for j in range(8):
            dst[pc.subgroup_local_id() * 8 + j] = a[j]

    src = np.arange(32 * 8, dtype=np.uint16)
    with pytest.raises(pc.BackendUnavailable, match="(?s)OpenCL-environment kernel.*a.to\\('emulator'\\)"):
        load_rows[1](pc.asarray(src, backend="vulkan"), pc.zeros(128, np.uint16, backend="vulkan"), 32, 8)
    out = pc.zeros(128, np.uint16, backend="emulator")
    load_rows[1](pc.asarray(src, backend="vulkan").to("emulator"), out, 32, 8)
    assert out.numpy().any()


def test_stats_count_live_emulator_arrays():
    rt = pc.get_runtime("emulator")
    before = rt.stats()
    a = pc.zeros((10, 10), np.float64, backend="emulator")
    view = a[2:4]
    del a
    assert rt.stats()["array_count"] == before["array_count"] + 1      # the view keeps it
    assert rt.stats()["array_bytes"] == before["array_bytes"] + 800
    del view
    assert rt.stats() == before


def test_dlpack_shares_emulator_memory_with_numpy():
    a = pc.zeros(8, np.float32, backend="emulator")
    view = np.from_dlpack(a)
    view[3] = 5.0                     # the same memory: the array sees it
    assert a.__dlpack_device__() == (1, 0) and a.numpy()[3] == 5.0


@pytest.mark.vulkan
@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
def test_vulkan_arrays_refuse_dlpack_without_cuda():
    a = pc.zeros(8, np.float32, backend="vulkan")
    if a.__dlpack_device__()[0] == 2:
        pytest.skip("this machine shares Vulkan arrays with CUDA")
    with pytest.raises(BufferError, match="use .numpy"):
        np.from_dlpack(a)


@pytest.mark.vulkan
@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
def test_uploads_and_temporaries_without_launches_stay_bounded(monkeypatch):
    """With no launch to submit it, the open batch is submitted once the buffers waiting for
    it (upload staging, arrays freed while queued) reach MAX_BATCH_HELD_BYTES (lowered here
    to 1 MiB): before, every copy_from's staging buffer lived until the next synchronisation
    (50 uploads into one 16 MiB array held 816 MiB)."""
    from pycoop.runtime.vulkan import runtime as module
    monkeypatch.setattr(module, "MAX_BATCH_HELD_BYTES", 1 << 20)
    rt = pc.get_runtime("vulkan")
    n = 1 << 16                                            # 256 KiB of f32
    x = pc.zeros(n, backend="vulkan")
    host = np.arange(n, dtype=np.float32)
    pc.synchronize()
    in_use = lambda: rt.stats()["live_allocations"] - rt.stats()["pooled_count"]  # noqa: E731
    start = in_use()
    for i in range(200):
        x.copy_from(host + i)
        t = pc.zeros(n, backend="vulkan")                  # noqa: F841  (dropped at once)
        assert in_use() - start <= 2 * (module.MAX_IN_FLIGHT + 1) * 5, i
    np.testing.assert_array_equal(x.numpy(), host + 199)


@pytest.mark.parametrize("backend", BACKENDS)
def test_copies_between_overlapping_views_of_one_buffer(backend):
    """a[1:].copy_from(a[:-1]) copies the source as it was, as NumPy does (vkCmdCopyBuffer
    forbids overlapping regions: Vulkan copies through a temporary buffer), directly and in a
    launch graph."""
    ref = np.arange(10, dtype=np.float32)
    a = pc.asarray(ref, backend=backend)
    a[1:].copy_from(a[:-1])
    a[:-2].copy_from(a[2:])
    want = ref.copy()
    want[1:] = want[:-1].copy()
    want[:-2] = want[2:].copy()
    np.testing.assert_array_equal(a.numpy(), want)
    b = pc.asarray(ref, backend=backend)
    with pc.capture(backend=backend) as g:
        b[3:].copy_from(b[:-3])
    want = ref.copy()
    for _ in range(2):                      # each replay shifts the values by 3 once more
        g.launch()
        want[3:] = want[:-3].copy()
    np.testing.assert_array_equal(b.numpy(), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dtypes_by_pycoop_name_and_types_no_kernel_holds(backend):
    """pycoop's own type names are its types ("f16" is never NumPy's 16-byte float code), and
    dtypes no kernel can hold are refused; 0-d values keep their shape."""
    for name, want in (("f16", np.float16), ("u8", np.uint8), ("i8", np.int8),
                       ("f32", np.float32), ("bf16", ml_dtypes.bfloat16)):
        assert pc.zeros(2, name, backend=backend).dtype == want
    for bad in (np.longdouble, np.complex64, "U5", object):
        with pytest.raises(pc.ArgumentError, match="is no type a kernel can hold"):
            pc.zeros(2, bad, backend=backend)
    with pytest.raises(pc.ArgumentError, match="complex64 is no type a kernel can hold"):
        pc.asarray(np.zeros(2, np.complex64), backend=backend)
    a = pc.asarray(np.float32(3), backend=backend)
    assert a.shape == () and a.numpy() == 3
    # a vector type's .dtype is its component's: NumPy made n floats of pc.zeros(n, vec4)
    with pytest.raises(pc.ArgumentError, match=r"vec4<f32> is a vector type.*\n.*"
                                               r"pc.zeros\(\(n, 4\), pc.f32\)"):
        pc.zeros(2, pc.vec(pc.f32, 4), backend=backend)
    with pytest.raises(pc.ArgumentError, match="vec2<u32> is a vector type"):
        a.reshape(1).view(pc.vec(pc.u32, 2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_pickling_and_copies_store_the_contents(backend):
    # copying the storage object itself skipped the emulator's accounting (stats went below
    # zero) and raised "cannot pickle '_thread.RLock'" on Vulkan
    import copy
    import pickle
    a = pc.asarray(np.arange(6, dtype=np.float32), backend=backend)[2:]
    before = pc.get_runtime(backend).stats()["array_count"]
    for b in (copy.deepcopy(a), copy.copy(a), pickle.loads(pickle.dumps(a))):
        assert b.backend == backend and b.offset == 0 and b.numpy().tolist() == [2, 3, 4, 5]
        b.copy_from(np.zeros(4, np.float32))          # a copy: the original is unchanged
        assert a.numpy().tolist() == [2, 3, 4, 5]
        del b
    gc.collect()
    pc.synchronize()
    assert pc.get_runtime(backend).stats()["array_count"] == before


@pytest.mark.parametrize("shape", [2.5, None, (2, 1.5), (True, 2), (-1,)])
def test_shapes_that_are_not_ints_are_refused(shape):
    with pytest.raises(pc.ArgumentError, match="an array shape is an int or a tuple of "
                                               "non-negative ints"):
        pc.zeros(shape, np.float32, backend="emulator")


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "10", True])
def test_synchronize_takes_a_positive_timeout(timeout):
    with pytest.raises(pc.ArgumentError, match="timeout_s is a positive number of seconds"):
        pc.synchronize(timeout_s=timeout)
    pc.synchronize(timeout_s=5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("timeout", [0, -1, "10"])
def test_the_runtime_synchronize_checks_its_timeout_too(backend, timeout):
    # a timeout that cannot be waited for ran out at once, was taken for a hang and dropped
    # the device with every array on it ("x": a TypeError deep in the wait)
    x, y = pc.zeros(1 << 12, pc.f32, backend=backend), pc.zeros(1 << 12, pc.f32, backend=backend)
    axpy[64](x, y, 1.0, 1 << 12)
    with pytest.raises(pc.ArgumentError, match="timeout_s is a positive number of seconds"):
        pc.get_runtime(backend).synchronize(timeout)
    pc.get_runtime(backend).synchronize(5)
    assert y.numpy().shape == (1 << 12,)       # the arrays are still there


def test_torch_views_without_torch_say_what_to_install(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_torch(name, *a, **k):
        if name == "torch":
            raise ImportError("no torch here")
        return real_import(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(pc.BackendUnavailable, match="Array.torch\\(\\) needs torch"):
        pc.zeros(4, np.float32, backend="emulator").torch()


@pytest.mark.vulkan
@pytest.mark.skipif(not VULKAN, reason="no Vulkan device")
def test_work_queued_before_a_reset_runs_and_reports():
    """reset_runtime() runs what is queued first: a launch queued before it has its time,
    not a result that never resolves."""
    from pycoop.runtime.vulkan import reset_runtime
    x, y = pc.full(64, 1.0, backend="vulkan"), pc.zeros(64, backend="vulkan")
    r = axpy[1](x, y, 2.0, 64)
    reset_runtime()
    assert len(r.times_ms) == 1 and r.time_ms >= 0 and "launch on vulkan" in repr(r)
    with pytest.raises(pc.BackendUnavailable, match="device was lost or closed"):
        y.numpy()


def test_a_failed_emulator_allocation_leaves_the_counts_alone():
    before = pc.get_runtime("emulator").stats()["array_count"]
    with pytest.raises((MemoryError, ValueError)):
        pc.zeros(2 ** 50, pc.u8, backend="emulator")
    assert pc.get_runtime("emulator").stats()["array_count"] == before


def _even(n):
    if n % 2:
        raise ValueError(f"n must be even, got {n}")


@pc.kernel(workgroup_size=8, requires=_even)
def halve_into(A: pc.Buffer[u32], n: u32):
    i = pc.global_invocation_id.x
    if i < n // u32(2):
        A[i] = u32(7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_kernel_requires_its_scalar_arguments(backend):
    """`pycoop.kernel(requires=...)` is called with each launch's scalar arguments by name;
    its ValueError refuses the launch as an ArgumentError naming the kernel, before any work
    and with no frame of pycoop's; a kernel passes what it requires."""
    a = pc.zeros(8, np.uint32, backend=backend)
    with pytest.raises(pc.ArgumentError, match="halve_into: n must be even, got 5") as e:
        halve_into[1](a, 5)
    tb, shown = e.value.__traceback__, []
    while tb is not None:
        if not tb.tb_frame.f_locals.get("__tracebackhide__"):
            shown.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    assert not any(pc.errors.is_internal(f) for f in shown)
    assert not a.numpy().any()
    halve_into[1](a, 6)
    assert a.numpy().tolist() == [7, 7, 7, 0, 0, 0, 0, 0]
    with pytest.raises(pc.CompileError, match="requires must be a function") as e:
        pc.kernel(workgroup_size=8, requires="n % 2 == 0")(lambda A: None)
    assert e.value.rule_id == "frontend.requires"
