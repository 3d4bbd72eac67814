"""torch CPU tensors as kernel arguments and device arrays shared with torch, zero-copy through
DLPack (skipped without torch): detached grad tensors, bf16, hints in torch's terms."""
from __future__ import annotations

import numpy as np
import pytest

import pycoop as pc
from pycoop import bf16, f32, u32

torch = pytest.importorskip("torch")


@pc.kernel(workgroup_size=64)
def scale(X: pc.Buffer[f32], a: f32, n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        X[i] = X[i] * a


@pc.kernel(workgroup_size=64)
def widen(X: pc.ReadBuffer[bf16], Y: pc.WriteBuffer[f32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = pc.cast(X[i], f32) * 2.0


def test_a_cpu_tensor_is_written_in_place_without_a_copy():
    t = torch.arange(100, dtype=torch.float32)
    scale[2](t, 3.0, 100, backend="emulator")
    assert torch.equal(t, torch.arange(100, dtype=torch.float32) * 3)


def test_a_tensor_that_requires_grad_is_accepted_detached():
    w = torch.ones(64, requires_grad=True)
    scale[1](w, 2.0, 64, backend="emulator")
    assert w.requires_grad and torch.equal(w.detach(), torch.full((64,), 2.0))


def test_bf16_tensors_are_read_through_a_bit_view():
    x = torch.linspace(-4, 4, 96, dtype=torch.bfloat16)
    y = torch.zeros(96, dtype=torch.float32)
    widen[2](x, y, 96, backend="emulator")
    assert torch.equal(y, x.float() * 2)
    a = pc.asarray(x, backend="emulator")
    assert a.dtype.name == "bfloat16"
    np.testing.assert_array_equal(a.numpy().astype(np.float32), x.float().numpy())


def test_hints_are_phrased_for_torch():
    with pytest.raises(pc.ArgumentError, match=r"X.to\(torch.float32\)"):
        scale[1](torch.zeros(8, dtype=torch.float64), 1.0, 8, backend="emulator")
    with pytest.raises(pc.ArgumentError, match=r"X.contiguous\(\)"):
        scale[1](torch.zeros(8, 2)[:, 0], 1.0, 8, backend="emulator")
    with pytest.raises(pc.ArgumentError, match=r"X.astype\('float32'\)"):
        scale[1](np.zeros(8), 1.0, 8, backend="emulator")      # NumPy inputs: NumPy hints


def test_emulator_arrays_and_torch_share_memory():
    a = pc.asarray(np.arange(64, dtype=np.float32), backend="emulator")
    t = torch.from_dlpack(a)
    t.mul_(2)                                   # torch writes, the kernel reads ...
    scale[1](a, 0.5, 64)
    assert torch.equal(t, torch.arange(64, dtype=torch.float32))   # ... and torch sees it
    view = a[16:32].torch()
    view.fill_(-1)
    assert (a.numpy()[16:32] == -1).all() and (a.numpy()[:16] == np.arange(16)).all()
    b = pc.asarray(torch.ones(4, 4), backend="emulator")
    assert b.shape == (4, 4) and b.numpy().sum() == 16


@pytest.mark.vulkan
def test_vulkan_arrays_from_cpu_tensors():
    try:
        a = pc.asarray(torch.arange(256, dtype=torch.float32, requires_grad=True), backend="vulkan")
    except pc.BackendUnavailable as e:
        pytest.skip(str(e))
    scale[4](a, 2.0, 256)
    assert torch.equal(torch.from_numpy(a.numpy()), torch.arange(256, dtype=torch.float32) * 2)
