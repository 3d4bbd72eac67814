"""Checked launches on a real GPU (run with -m gpu): out-of-bounds accesses raise
pycoop.KernelFault at the kernel line with the emulator's facts, the process goes on, matrix
tiles are guarded once per access, and red zones catch NV tensor stores (not guarded)."""
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


def test_nv_tensor_stores_past_the_end_are_caught_by_the_red_zone():
    O = np.zeros(16 * 16 + 8, np.float32)
    try:
        nv_store_rows[1](O, 17, 0, backend="vulkan")     # rows 0..15: in bounds
    except pc.BackendUnavailable as e:
        pytest.skip(f"no VK_NV_cooperative_matrix2: {e}")
    np.testing.assert_array_equal(O[:256], 2.0)
    with pytest.raises(pc.EmulatorError, match="past the end"):
        nv_store_rows[1](np.zeros(16 * 16 + 8, np.float32), 17, 1, backend="emulator")
    with pytest.raises(pc.KernelFault, match="wrote past the end of parameter O") as info:
        nv_store_rows[1](np.zeros(16 * 16 + 8, np.float32), 17, 1, backend="vulkan")
    assert info.value.rule_id == "checked.red-zone"


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
