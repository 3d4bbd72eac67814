"""A launch graph: a block of five launches (a residual MLP step: matrix-vector product, bias +
ReLU, matrix-vector product, residual add, RMS scale) captured once and replayed for every
token, with the next input written into the same array by copy_from. On Vulkan each replay is
one queued unit (no per-launch argument checks or recording); on the emulator the same code
re-runs the five launches. Checks itself against NumPy and against the launches run directly.

    python3 examples/graph_replay.py
"""
import numpy as np

import pycoop as pc
from pycoop import f32, u32

WG = 64


@pc.kernel(workgroup_size=WG)
def matvec(W: pc.ReadBuffer[f32], X: pc.ReadBuffer[f32], Y: pc.WriteBuffer[f32], rows: u32,
           cols: u32):
    r = pc.global_invocation_id.x
    if r < rows:
        acc = f32(0.0)
        for c in range(cols):
            acc = acc + W[r * cols + c] * X[c]
        Y[r] = acc


@pc.kernel(workgroup_size=WG)
def bias_relu(Y: pc.Buffer[f32], B: pc.ReadBuffer[f32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = pc.max(Y[i] + B[i], f32(0.0))


@pc.kernel(workgroup_size=WG)
def residual(X: pc.ReadBuffer[f32], Y: pc.ReadBuffer[f32], Out: pc.WriteBuffer[f32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Out[i] = X[i] + Y[i]


@pc.kernel(workgroup_size=WG)
def rms_scale(X: pc.Buffer[f32], n: u32):
    """One workgroup: X /= sqrt(mean(X^2) + 1e-6), each invocation summing all of X."""
    i = pc.local_invocation_id.x
    s = f32(0.0)
    for c in range(n):
        s = s + X[c] * X[c]
    scale = pc.rsqrt(s / pc.cast(n, f32) + f32(1e-6))
    pc.barrier()                           # every invocation has read X before any writes
    for c in range(i, n, WG):
        X[c] = X[c] * scale


def groups(n):
    return (n + WG - 1) // WG


def main():
    d, hidden, tokens = 64, 128, 6
    rng = np.random.default_rng(7)
    w1 = (rng.standard_normal((hidden, d)) / np.sqrt(d)).astype(np.float32)
    b1 = (rng.standard_normal(hidden) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((d, hidden)) / np.sqrt(hidden)).astype(np.float32)
    xs = rng.standard_normal((tokens, d)).astype(np.float32)

    W1, B1, W2 = pc.asarray(w1), pc.asarray(b1), pc.asarray(w2)
    x, h, y, out = (pc.zeros(n, pc.f32) for n in (d, hidden, d, d))

    def step():
        matvec[groups(hidden)](W1, x, h, hidden, d)
        bias_relu[groups(hidden)](h, B1, hidden)
        matvec[groups(d)](W2, h, y, d, hidden)
        residual[groups(d)](x, y, out, d)
        rms_scale[1](out, d)

    with pc.capture() as g:                # recorded once, nothing runs
        step()
    replayed = []
    for t in range(tokens):
        x.copy_from(xs[t])                 # the token's input, into the same array
        r = g.launch()                     # the five launches, as one queued unit
        replayed.append(out.numpy())       # waits for this replay
    direct = []
    for t in range(tokens):                # the same launches, one by one
        x.copy_from(xs[t])
        step()
        direct.append(out.numpy())

    hh = np.maximum(xs @ w1.T + b1, 0)
    o = xs + hh @ w2.T
    ref = o / np.sqrt((o * o).mean(-1, keepdims=True) + 1e-6)
    err = np.abs(np.array(replayed) - ref).max()
    same = all(np.array_equal(a, b) for a, b in zip(replayed, direct))
    print(f"{tokens} replays of a {len(g)}-launch graph on {out.backend}: max abs error vs NumPy "
          f"{err:.1e}, equal to direct launches: {same}, last replay {r.time_ms:.3f} ms")
    assert err < 1e-4 and same, (err, same)
    g.free()


if __name__ == "__main__":
    main()
