"""SPV_QCOM_cooperative_matrix_conversion: each invocation computes one row of a matrix in
registers, the subgroup turns those rows into a cooperative matrix without going through
memory, multiplies it, and hands the result rows back to the invocations.

    Y = (tanh(X) * scale[:, None]) @ W

One subgroup of 16 invocations per 16-row tile: invocation i computes the scaled activation of
row i (16 values, rounded to f16), `pc.qcom.construct` makes it row i of a 16x16 f16 MatrixA,
`pc.mul_add` multiplies it with W (a MatrixB loaded from memory), and `pc.qcom.extract` gives
invocation i row i of the f32 result, which it stores. Checks itself against NumPy.

    python3 examples/qcom_rows.py
"""
import numpy as np

import pycoop as pc
from pycoop import f16, f32, u32

T = 16                       # tile edge: rows per subgroup, K and N
SG = pc.Subgroup
A = pc.coopmat[f16, SG, T, T, pc.UseA]
B = pc.coopmat[f16, SG, T, T, pc.UseB]
C = pc.coopmat[f32, SG, T, T, pc.Accumulator]


@pc.kernel(workgroup_size=64, subgroup_size=T)
def scaled_rows_gemm(X: pc.Buffer[f32], scale: pc.Buffer[f32], W: pc.Buffer[f16],
                     Y: pc.Buffer[f32], nrows: u32):
    tile = pc.workgroup_id.x * 4 + pc.subgroup_id()
    row = tile * T + pc.subgroup_local_id()            # this invocation's row
    if tile * T < nrows:                                 # uniform within the subgroup
        s = scale[row]
        act = pc.make_array([pc.cast(pc.tanh(X[row * T + k]) * s, f16) for k in range(T)])
        a = pc.qcom.construct(act, A)                    # lane i's array is row i of A
        d = pc.mul_add(a, B.load(W, 0, T), C.zeros())
        out = pc.qcom.extract(d)                         # row i of D back to lane i
        for n in range(T):
            Y[row * T + n] = out[n]


def main():
    tiles = 10
    rows = tiles * T
    rng = np.random.default_rng(7)
    X = rng.standard_normal((rows, T)).astype(np.float32)
    scale = rng.uniform(0.5, 2.0, rows).astype(np.float32)
    W = (rng.standard_normal((T, T)) / 4).astype(np.float16)
    Y = np.zeros((rows, T), np.float32)
    r = scaled_rows_gemm[-(-tiles // 4)](X, scale, W, Y, rows)
    act = (np.tanh(X) * scale[:, None]).astype(np.float16)
    ref = act.astype(np.float32) @ W.astype(np.float32)
    err = np.abs(Y - ref).max()
    ck = scaled_rows_gemm.compile()
    ck.spv                                               # validated with spirv-val
    assert "CooperativeMatrixConversionQCOM" in ck.requirements["capabilities"]
    print(f"qcom rows {rows}x{T} @ {T}x{T} on {r.backend}: {r.time_ms:.2f} ms, max abs error {err:.1e}")
    assert err < 1e-2, err


if __name__ == "__main__":
    main()
