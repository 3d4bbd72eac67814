"""Several kernels chained on device arrays: a two-layer MLP forward pass (GEMV, bias + ReLU,
GEMV, softmax) on a batch of vectors, repeated, with nothing copied between launches. On
Vulkan every launch is queued and the only copy back is the final `.numpy()`; on the emulator
the same code runs on NumPy memory. Checks itself against NumPy.

    python3 examples/chain_arrays.py
"""
import numpy as np

import pycoop as pc
from pycoop import f32, u32

WG = 64


@pc.kernel(workgroup_size=WG)
def matvec(W: pc.ReadBuffer[f32], X: pc.ReadBuffer[f32], Y: pc.WriteBuffer[f32], rows: u32,
           cols: u32, batch: u32):
    """Y[b, r] = sum_c W[r, c] * X[b, c], one invocation per output."""
    i = pc.global_invocation_id.x
    if i < rows * batch:
        b, r = i // rows, i % rows
        acc = f32(0.0)
        for c in range(cols):
            acc = acc + W[r * cols + c] * X[b * cols + c]
        Y[i] = acc


@pc.kernel(workgroup_size=WG)
def bias_relu(Y: pc.Buffer[f32], bias: pc.ReadBuffer[f32], rows: u32, n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = pc.max(Y[i] + bias[i % rows], f32(0.0))


@pc.kernel(workgroup_size=WG)
def softmax(Y: pc.Buffer[f32], cols: u32, batch: u32):
    """One invocation per row of Y (batch x cols): a stable softmax in place."""
    b = pc.global_invocation_id.x
    if b < batch:
        m = f32(-3.0e38)
        for c in range(cols):
            m = pc.max(m, Y[b * cols + c])
        s = f32(0.0)
        for c in range(cols):
            e = pc.exp(Y[b * cols + c] - m)
            Y[b * cols + c] = e
            s = s + e
        for c in range(cols):
            Y[b * cols + c] = Y[b * cols + c] / s


def groups(n):
    return (n + WG - 1) // WG


def main():
    batch, n_in, hidden, n_out, steps = 32, 96, 128, 10, 4
    rng = np.random.default_rng(3)
    w1 = (rng.standard_normal((hidden, n_in)) / np.sqrt(n_in)).astype(np.float32)
    b1 = rng.standard_normal(hidden).astype(np.float32) * 0.1
    w2 = (rng.standard_normal((n_out, hidden)) / np.sqrt(hidden)).astype(np.float32)
    xs = rng.standard_normal((steps, batch, n_in)).astype(np.float32)

    W1, B1, W2 = pc.asarray(w1), pc.asarray(b1), pc.asarray(w2)     # uploaded once
    X = pc.asarray(xs)                                               # all steps' inputs
    H = pc.empty((batch, hidden), pc.f32)                            # reused every step
    out = pc.empty((steps, batch, n_out), pc.f32)
    for s in range(steps):                       # queued launches, no copies in between
        matvec[groups(batch * hidden)](W1, X[s], H, hidden, n_in, batch)
        bias_relu[groups(batch * hidden)](H, B1, hidden, batch * hidden)
        matvec[groups(batch * n_out)](W2, H, out[s], n_out, hidden, batch)
        softmax[groups(batch)](out[s], n_out, batch)
    probs = out.numpy()                          # the one copy back (waits for the chain)

    h = np.maximum(xs @ w1.T + b1, 0)
    logits = h @ w2.T
    e = np.exp(logits - logits.max(-1, keepdims=True))
    ref = e / e.sum(-1, keepdims=True)
    err = np.abs(probs - ref).max()
    print(f"MLP forward, {steps} steps x 4 kernels on {out.backend} arrays: max abs error {err:.1e}")
    assert err < 1e-5, err


if __name__ == "__main__":
    main()
