"""pycoop kernels and torch ops on the same tensors, without copies: torch makes the input,
a pycoop kernel applies a fused GELU-like activation in place, torch reduces the result.
On an NVIDIA GPU the arrays live in Vulkan memory that torch sees as CUDA tensors; elsewhere
they live on the emulator and torch sees CPU tensors on the same NumPy memory. Skips (and
says so) without torch. Checks itself against torch.

    python3 examples/torch_interop.py
"""
import numpy as np

import pycoop as pc
from pycoop import f32, u32

try:
    import torch
except ImportError:
    torch = None


@pc.kernel(workgroup_size=256)
def gelu_tanh(X: pc.Buffer[f32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        x = X[i]
        X[i] = 0.5 * x * (1.0 + pc.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def main():
    if torch is None:
        print("torch is not installed (pip install pycoop[torch]): skipped, no error")
        return
    # Vulkan arrays become CUDA tensors on NVIDIA GPUs; otherwise share CPU memory.
    backend = None if torch.cuda.is_available() else "emulator"
    n = 1 << 16
    x = pc.zeros(n, pc.f32, backend=backend)
    t = x.torch()                                      # the same memory, as a tensor
    torch.manual_seed(0)
    t.copy_(torch.randn(n, device=t.device))           # torch writes the input
    want = torch.nn.functional.gelu(t, approximate="tanh")
    gelu_tanh[n // 256](x, n)                          # pycoop works in place
    total = t.sum()                                    # torch reads the kernel's result
    err = (t - want).abs().max().item()
    print(f"{x.backend} array as a {t.device.type} tensor: sum {total.item():.3f}, "
          f"max abs error against torch {err:.1e}")
    assert err < 1e-5, err
    assert np.allclose(x.numpy(), want.cpu().numpy(), atol=1e-5)


if __name__ == "__main__":
    main()
