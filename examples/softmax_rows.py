"""A non-coopmat kernel: row-wise softmax, one workgroup per row, with a shared-memory tree
reduction (max, then sum) between barriers. Checks itself against NumPy.

    python3 examples/softmax_rows.py
"""
import numpy as np

import pycoop as pc
from pycoop import f32, u32

WG = 64


@pc.func
def reduce_shared(sh, tid, op):
    """Tree reduction of sh[0:WG] into sh[0] (op is max or add)."""
    step = WG // 2
    while step > 0:                       # Python-level loop: unrolled at trace time
        if tid < step:                    # runtime condition: divergent branch
            sh[tid] = op(sh[tid], sh[tid + step])
        pc.barrier()
        step //= 2
    return sh[0]


@pc.kernel(workgroup_size=WG)
def softmax(X: pc.Buffer[f32], Y: pc.Buffer[f32], ncols: u32):
    row = pc.workgroup_id.x
    tid = pc.local_invocation_id.x
    sh = pc.shared(f32, WG)
    m = f32(-3.0e38)
    for c in range(tid, ncols, WG):       # runtime bound, strided over the row
        m = pc.max(m, X[row * ncols + c])
    sh[tid] = m
    pc.barrier()
    m = reduce_shared(sh, tid, pc.max)
    pc.barrier()
    s = f32(0.0)
    for c in range(tid, ncols, WG):
        s = s + pc.exp(X[row * ncols + c] - m)
    sh[tid] = s
    pc.barrier()
    s = reduce_shared(sh, tid, lambda a, b: a + b)
    for c in range(tid, ncols, WG):
        Y[row * ncols + c] = pc.exp(X[row * ncols + c] - m) / s


def main():
    rows, cols = 37, 301
    rng = np.random.default_rng(1)
    X = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    Y = np.zeros_like(X)
    r = softmax[rows](X, Y, cols)
    e = np.exp(X - X.max(1, keepdims=True))
    ref = e / e.sum(1, keepdims=True)
    err = np.abs(Y - ref).max()
    softmax.compile().spv                  # validated with spirv-val
    print(f"softmax {rows}x{cols} on {r.backend}: {r.time_ms:.2f} ms, max abs error {err:.1e}")
    assert err < 1e-6, err


if __name__ == "__main__":
    main()
