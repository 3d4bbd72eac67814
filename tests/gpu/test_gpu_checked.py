"""Checked launches on a real GPU (run with -m gpu): out-of-bounds accesses raise
pycoop.KernelFault at the kernel line with the emulator's facts, the process goes on, matrix
tiles and NV tensor accesses are guarded once per access, and checked GEMMs give the
unchecked results (their K loops run the copy without guards when every k-step is in bounds)."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import pycoop as pc
from pycoop import f32, u32

pytestmark = pytest.mark.gpu
Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]


def line_of(k, text: str) -> int:
    lines, start = inspect.getsourcelines(k.fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


@pc.kernel(workgroup_size=64)
def fill(y: pc.Buffer[f32]):
    i = pc.global_invocation_id.x
    y[i] = f32(i)


@pc.kernel(workgroup_size=32)
def tile_copy(S: pc.Buffer[f32], D: pc.Buffer[f32], src: u32, dst: u32, N: u32):
    t = pc.load(Acc, S, src, N)
    pc.store(D, dst, t, N)


@pc.kernel(workgroup_size=32)
def tile_via_shared(S: pc.Buffer[f32], D: pc.Buffer[f32], src: u32):
    sh = pc.shared(f32, 256)
    i = pc.local_invocation_id.x
    for k in range(8):
        sh[i * 8 + k] = S[i * 8 + k]
    pc.barrier()
    t = pc.load(Acc, sh, src, u32(16))
    pc.store(D, 0, t, u32(16))


@pc.kernel(workgroup_size=32)
def nv_store_rows(O: pc.Buffer[f32], rows: u32, first: u32):
    lay = pc.nv.tensor_layout(2, clamp="constant").dimension(rows, 16)
    pc.nv.store_tensor(O, lay.slice(first, 16, 0, 16), pc.fill(Acc, 2.0))


@pytest.mark.parametrize("n, extra", [(128, 128), (128, 64), (128, 4096), (1000, 24)])
def test_the_new_user_case_faults_at_the_kernel_line_on_the_gpu(n, extra):
    grid = (n + extra + 63) // 64
    y = np.zeros(n, np.float32)
    with pytest.raises(pc.KernelFault) as gpu:
        fill[grid](y, backend="vulkan")
    with pytest.raises(pc.EmulatorError) as emu:
        fill[grid](np.zeros(n, np.float32), backend="emulator")
    e = gpu.value
    assert e.loc == emu.value.loc and e.line == line_of(fill, "y[i] = f32(i)")
    assert e.buffer == "buffer 'y'" and e.count == n and n <= e.index < grid * 64
    words = f"store out of bounds of buffer 'y' ({n} elements): index"
    assert words in str(e) and words in str(emu.value)
    assert f"invocation {e.invocation}: {words} {e.index}" in str(e)
    assert f"{words} {n}" in str(emu.value)                  # the emulator: the first one
    np.testing.assert_array_equal(y, np.arange(n, dtype=np.float32))
    a = pc.zeros(n, pc.f32, backend="vulkan")       # the process and device go on
    fill[n // 64](a)
    np.testing.assert_array_equal(a.numpy()[:n // 64 * 64], np.arange(n // 64 * 64, dtype=np.float32))


def test_queued_device_array_launches_fault_at_synchronisation():
    a = pc.zeros(128, pc.f32, backend="vulkan")
    for _ in range(5):
        fill[2](a)
    fill[4](a)
    with pytest.raises(pc.KernelFault) as info:
        pc.synchronize()
    assert info.value.count == 128 and 128 <= info.value.index < 256
    np.testing.assert_array_equal(a.numpy(), np.arange(128, dtype=np.float32))


def test_khr_tiles_are_checked_as_whole_blocks():
    S = np.arange(256, dtype=np.float32)
    D = np.zeros(256, np.float32)
    tile_copy[1](S, D, 0, 0, 16, backend="vulkan")       # in bounds: a plain copy
    np.testing.assert_array_equal(D, S)
    line = line_of(tile_copy, "pc.load(Acc, S, src, N)")
    with pytest.raises(pc.KernelFault) as gpu:
        tile_copy[1](S, D, 16, 0, 16, backend="vulkan")  # rows 1..16: the last is past the end
    with pytest.raises(pc.EmulatorError) as emu:
        tile_copy[1](S, np.zeros(256, np.float32), 16, 0, 16, backend="emulator")
    words = "elements 16..271 of buffer 'S' (256 elements)"
    assert gpu.value.line == emu.value.line == line
    assert words in str(gpu.value) and words in str(emu.value)
    assert "cooperative matrix load out of bounds" in str(gpu.value)
    np.testing.assert_array_equal(D, 0)                  # the suppressed load gave zeros
    D[:] = 7
    with pytest.raises(pc.KernelFault) as gpu:
        tile_copy[1](S, D, 0, 8, 16, backend="vulkan")
    assert "cooperative matrix store out of bounds: elements 8..263 of buffer 'D'" in str(gpu.value)
    assert gpu.value.line == line_of(tile_copy, "pc.store(D, dst, t, N)")
    np.testing.assert_array_equal(D, 7)                  # the suppressed store wrote nothing


def test_khr_tiles_from_shared_memory_are_checked():
    S = np.arange(256, dtype=np.float32)
    D = np.zeros(256, np.float32)
    tile_via_shared[1](S, D, 0, backend="vulkan")
    np.testing.assert_array_equal(D, S)
    with pytest.raises(pc.KernelFault) as info:
        tile_via_shared[1](S, D, 32, backend="vulkan")
    assert info.value.buffer == "shared array" and info.value.index == 32
    assert "elements 32..287 of shared array (256 elements per workgroup)" in str(info.value)


@pc.kernel(workgroup_size=32)
def nv_load_rows(S: pc.Buffer[f32], D: pc.Buffer[f32], rows: u32, first: u32):
    lay = pc.nv.tensor_layout(2, clamp="clamp_to_edge").dimension(rows, 16)
    t = pc.nv.load_tensor(S, lay.slice(first, 16, 0, 16), Acc, object=Acc.fill(7.0))
    pc.nv.store_tensor(D, pc.nv.tensor_layout(2).dimension(16, 16), t)


def _nv(launch):
    try:
        return launch()
    except pc.BackendUnavailable as e:
        pytest.skip(f"no VK_NV_cooperative_matrix2: {e}")


def test_nv_tensor_stores_are_guarded_over_the_rows_their_layout_reaches():
    O = np.zeros(16 * 16 + 8, np.float32)
    _nv(lambda: nv_store_rows[1](O, 17, 0, backend="vulkan"))    # rows 0..15: in bounds
    np.testing.assert_array_equal(O[:256], 2.0)
    np.testing.assert_array_equal(O[256:], 0.0)
    with pytest.raises(pc.EmulatorError, match="past the end") as emu:
        nv_store_rows[1](np.zeros(16 * 16 + 8, np.float32), 17, 1, backend="emulator")
    O = np.zeros(16 * 16 + 8, np.float32)
    with pytest.raises(pc.KernelFault) as info:                 # rows 1..16: 16..271 of 264
        nv_store_rows[1](O, 17, 1, backend="vulkan")
    e = info.value
    line = line_of(nv_store_rows, "pc.nv.store_tensor(O")
    assert e.line == emu.value.line == line and e.rule_id == "checked.bounds"
    assert (e.buffer, e.count, e.index) == ("buffer 'O'", 264, 16)
    assert "tensor store out of bounds: elements 16..271 of buffer 'O' (264 elements)" in str(e)
    np.testing.assert_array_equal(O, 0.0)                       # the store was skipped
    _nv(lambda: nv_store_rows[1](O, 16, 1, backend="vulkan"))   # rows past 15 discarded: fine
    np.testing.assert_array_equal(O[16:256], 2.0)


def test_nv_tensor_loads_are_guarded_and_a_suppressed_load_gives_its_object():
    S = np.arange(256, dtype=np.float32)
    D = np.zeros(256, np.float32)
    _nv(lambda: nv_load_rows[1](S, D, 16, 8, backend="vulkan"))  # rows 8..23 clamp to 8..15
    want = S.reshape(16, 16)[np.minimum(np.arange(8, 24), 15)].reshape(-1)
    np.testing.assert_array_equal(D, want)
    with pytest.raises(pc.KernelFault) as info:                 # a 20-row tensor in 256 elements
        nv_load_rows[1](S, D, 20, 8, backend="vulkan")
    e = info.value
    assert e.line == line_of(nv_load_rows, "pc.nv.load_tensor(S")
    assert "tensor load out of bounds: elements 128..319 of buffer 'S' (256 elements)" in str(e)
    with pytest.raises(pc.EmulatorError, match="reads element 319"):
        nv_load_rows[1](S, np.zeros(256, np.float32), 20, 8, backend="emulator")
    np.testing.assert_array_equal(D, 7.0)                       # the Object operand's values


@pytest.mark.parametrize("shape", [(256, 256, 256), (200, 136, 72)])
def test_checked_nv_gemms_give_the_unchecked_results(shape):
    from pycoop.kernels import gemm_nv, gemm_reference
    M, N, K = shape
    rng = np.random.default_rng(1)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    k = gemm_nv(128, 256, 32, 256, "constant")
    grid = (-(-M // 128), -(-N // 256))
    out = {}
    for checked in (False, True):
        C = np.zeros((M, N), np.float32)
        _nv(lambda: k[grid](A, B, C, M, N, K, backend="vulkan", checked=checked))
        out[checked] = C
    np.testing.assert_array_equal(out[True], out[False])
    np.testing.assert_allclose(out[True], gemm_reference(A, B), rtol=1e-3, atol=1e-2)


def test_a_checked_nv_gemm_with_a_short_buffer_faults_at_its_load():
    from pycoop.kernels import gemm_nv
    k = gemm_nv(128, 256, 32, 256, "constant")
    A = np.ones(256 * 256 - 1, np.float16)                     # one element short of M x K
    B = np.ones((256, 256), np.float16)
    with pytest.raises(pc.KernelFault) as info:
        _nv(lambda: k[2, 1](A, B, np.zeros((256, 256), np.float32), 256, 256, 256, backend="vulkan"))
    assert info.value.buffer == "buffer 'A'" and "tensor load out of bounds" in str(info.value)


def test_checked_khr_staged_gemms_run_the_fast_loop_and_fault_when_short():
    from pycoop.kernels import gemm_khr_staged, gemm_reference
    n = 512
    rng = np.random.default_rng(2)
    A = rng.standard_normal((n, n)).astype(np.float16)
    B = rng.standard_normal((n, n)).astype(np.float16)
    k = gemm_khr_staged(128, 256, 32, 2, 4, 8, specialize=True)
    out = {}
    for checked in (False, True):
        C = np.zeros((n, n), np.float32)
        k[n // 128, n // 256](A, B, C, n, n, n, backend="vulkan", checked=checked)
        out[checked] = C
    np.testing.assert_array_equal(out[True], out[False])
    np.testing.assert_allclose(out[True], gemm_reference(A, B), rtol=1e-3, atol=1e-2)
    with pytest.raises(pc.KernelFault) as info:                 # the last k-step's tiles: short
        k[n // 128, n // 256](A.reshape(-1)[:-8], B, np.zeros((n, n), np.float32), n, n, n,
                              backend="vulkan")
    assert info.value.buffer == "buffer 'A'" and "cooperative matrix load out of bounds" in str(info.value)


def test_a_long_kernel_times_out_and_the_next_launch_works():
    @pc.kernel(workgroup_size=1)
    def spin(y: pc.Buffer[f32], n: u32):
        x, c = y[0], y[1]
        for _ in pc.range(n):
            for _ in pc.range(u32(1 << 16)):
                x = x * 0.999 + c
        y[0] = x

    from pycoop.runtime.vulkan import VulkanTimeout
    y = np.array([0, 1], np.float32)
    spin[1](y, 1, backend="vulkan")                      # compiled and warm
    with pytest.raises(VulkanTimeout, match="did not finish"):
        a = pc.asarray(y, backend="vulkan")
        spin[1](a, 1 << 12)                              # 2**28 dependent steps: ~2 s
        pc.synchronize(timeout_s=0.2)
    z = np.zeros(64, np.float32)
    fill[1](z, backend="vulkan")                         # a fresh device
    np.testing.assert_array_equal(z, np.arange(64, dtype=np.float32))
