"""Vulkan device arrays shared with torch CUDA tensors on an NVIDIA GPU, without copies
(run with -m gpu; needs torch with CUDA and cuda-python)."""
from __future__ import annotations

import numpy as np
import pytest

import pycoop as pc
from pycoop import f16, f32, u32

torch = pytest.importorskip("torch")
pytest.importorskip("cuda.bindings.runtime")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


@pc.kernel(workgroup_size=256)
def axpy(X: pc.ReadBuffer[f32], Y: pc.Buffer[f32], a: f32, n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = a * X[i] + Y[i]


@pc.kernel(workgroup_size=256)
def to_half(X: pc.ReadBuffer[f32], Y: pc.WriteBuffer[f16], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = pc.cast(X[i], f16)


N = 1 << 16


def test_torch_reads_what_a_kernel_wrote_without_a_copy():
    x = pc.asarray(np.arange(N, dtype=np.float32), backend="vulkan")
    y = pc.zeros(N, backend="vulkan")
    axpy[N // 256](x, y, 2.0, N)
    t = y.torch()                              # waits for the kernel
    assert t.device.type == "cuda" and t.data_ptr() == y._storage.cuda.pointer
    np.testing.assert_array_equal((t + 1).cpu().numpy(), np.arange(N, dtype=np.float32) * 2 + 1)
    t2 = torch.from_dlpack(y)
    assert t2.data_ptr() == t.data_ptr()


def test_a_kernel_reads_what_torch_wrote_and_torch_sees_the_result():
    x = pc.zeros(N, backend="vulkan")
    y = pc.zeros(N, backend="vulkan")
    tx, ty = x.torch(), y.torch()
    tx.copy_(torch.arange(N, device="cuda", dtype=torch.float32))   # torch writes x
    ty.fill_(1.0)
    axpy[N // 256](x, y, 3.0, N)              # waits for torch's stream, finishes before return
    ty.mul_(2)                                # torch op right after, on the kernel's output
    want = (np.arange(N, dtype=np.float32) * 3 + 1) * 2
    np.testing.assert_array_equal(ty.cpu().numpy(), want)
    np.testing.assert_array_equal(y.numpy(), want)


def test_views_and_half_precision():
    x = pc.asarray(np.linspace(-2, 2, N, dtype=np.float32), backend="vulkan")
    h = pc.zeros(2 * N, np.float16, backend="vulkan")
    to_half[N // 256](x, h[N:], N)
    th = h[N:].torch()
    assert th.dtype == torch.float16 and th.data_ptr() == h._storage.cuda.pointer + 2 * N
    np.testing.assert_array_equal(th.cpu().numpy(), np.linspace(-2, 2, N, dtype=np.float32).astype(np.float16))
    assert not h[:N].torch().any()


def test_a_cuda_tensor_is_copied_device_to_device():
    t = torch.randn(N, device="cuda")
    a = pc.asarray(t)
    assert a.backend == "vulkan" and a.torch().data_ptr() != t.data_ptr()
    np.testing.assert_array_equal(a.numpy(), t.cpu().numpy())
    y = torch.ones(N, device="cuda")
    axpy[N // 256](t, y, 0.5, N)              # tensors pycoop does not own: copied in and out
    np.testing.assert_allclose(y.cpu().numpy(), t.cpu().numpy() * 0.5 + 1, rtol=1e-6)


def test_no_leak_over_many_shared_arrays():
    rt = pc.get_runtime("vulkan")
    for _ in range(5):
        a = pc.zeros(N, backend="vulkan")
        a.torch().fill_(1)
        del a
    pc.synchronize()
    before = rt.stats()
    for _ in range(50):
        a = pc.zeros(N, backend="vulkan")
        a.torch().add_(1)
        del a
    pc.synchronize()
    after = rt.stats()
    assert after["array_count"] == before["array_count"]
    # in use: nothing more (launches no longer wait, so one more buffer may sit in the pool)
    assert after["live_bytes"] - after["pooled_bytes"] == before["live_bytes"] - before["pooled_bytes"]


@pytest.mark.parametrize("mode", ["auto", "coarse"])
def test_alternating_torch_ops_and_kernels_without_host_waits(monkeypatch, mode):
    monkeypatch.setenv("PYCOOP_TORCH_SYNC", mode)
    x = pc.asarray(np.arange(N, dtype=np.float32) % 7, backend="vulkan")
    y = pc.zeros(N, backend="vulkan")
    ty = y.torch()
    want = np.zeros(N, np.float32)
    xs = np.arange(N, dtype=np.float32) % 7
    for i in range(50):                         # nothing waits on the host in "auto"
        ty.mul_(0.5)                            # torch writes y ...
        axpy[N // 256](x, y, float(i % 3), N)   # ... the kernel reads and writes it ...
        ty.add_(1.0)                            # ... torch reads and writes the result
        want = (want * np.float32(0.5) + np.float32(i % 3) * xs) + np.float32(1.0)
    np.testing.assert_array_equal(ty.cpu().numpy(), want)
    ty.mul_(2.0)                                # torch writes; .numpy() is ordered after it
    np.testing.assert_array_equal(y.numpy(), want * 2)
    expected = "semaphore" if mode == "auto" else "coarse (PYCOOP_TORCH_SYNC=coarse)"
    assert pc.get_runtime("vulkan").stats()["torch_sync"] == expected
