"""1-bit-quantised weights x f16 activations with an 8-wide vector decode function
(SPV_NV_cooperative_matrix2 DecodeFunc + SPV_NV_cooperative_matrix_decode_vector, V = 8).

Weights W (N x K) are stored in blocks of 32 along K: an f16 scale d and 4 bytes of sign bits,
weight 8*b + i being +d if bit i of byte b is set and -d otherwise. One byte is the natural pack
unit, so the vector decode function returns the 8 weights of one byte (a vec8<f16>: the full
module also declares LongVectorEXT / SPV_EXT_long_vector). The scalar decode function stays
required; the emulator runs with decode_vector checking on (both called and compared), and
targets without the extension get the DecodeVectorFunc operand stripped (see `.report`).
Checked against a NumPy dequantise-then-matmul.

    python3 examples/q1_gemm.py
"""
import numpy as np

import pycoop as pc
from pycoop import f16, f32, u8, u32

Q1 = pc.struct("Q1", d=f16, qs=pc.array(u8, 4))               # 6 bytes per 32 weights
MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
MatB = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseB]
Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]


def dequant_q1(block, block_coord, coord_in_block):
    j = coord_in_block[1]                                       # 0..31
    bit = (u32(block.qs[j >> 3]) >> (j & 7)) & 1
    return pc.select(bit == 1, block.d, -block.d)


def dequant_q1_x8(block, block_coord, coord_in_block):
    j = coord_in_block[1]                                       # a multiple of 8: one byte
    byte = u32(block.qs[j >> 3])
    d = block.d
    return pc.make_vector([pc.select(((byte >> i) & 1) == 1, d, -d) for i in range(8)])


@pc.kernel(workgroup_size=32)
def q1_gemm(X: pc.Buffer[f16], W: pc.ReadBuffer[Q1], Y: pc.Buffer[f32], M: u32, N: u32, K: u32):
    lx = pc.nv.tensor_layout(2, clamp="constant").dimension(M, K)
    lw = pc.nv.tensor_layout(2, clamp="constant").block_size(1, 32).dimension(N, K)
    ly = pc.nv.tensor_layout(2, clamp="constant").dimension(M, N)
    wt = pc.nv.tensor_view(2, False, (1, 0))                    # read W (N x K) as K x N
    m0, n0 = pc.workgroup_id.x * 16, pc.workgroup_id.y * 16
    acc = Acc.fill(0.0)
    for k in range(0, K, 16):
        a = pc.nv.load_tensor(X, lx.slice(m0, 16, k, 16), MatA)
        b = pc.nv.load_tensor(W, lw.slice(n0, 16, k, 16), MatB, view=wt, decode=dequant_q1,
                              decode_vector=dequant_q1_x8)
        acc = pc.mul_add(a, b, acc)
    pc.nv.store_tensor(Y, ly.slice(m0, 16, n0, 16), acc)


def quantize_q1(w: np.ndarray) -> np.ndarray:
    """Sign bits and the mean magnitude per block of 32 along K -> raw 6-byte blocks."""
    n, k = w.shape
    blocks = w.reshape(n, k // 32, 32)
    d = np.abs(blocks).mean(-1).astype(np.float16)
    bits = (blocks >= 0).reshape(n, k // 32, 4, 8)
    qs = (bits * (1 << np.arange(8))).sum(-1).astype(np.uint8)
    out = np.zeros((n, k // 32, 6), np.uint8)
    out[..., 0:2] = d[..., None].view(np.uint8)
    out[..., 2:] = qs
    return out.reshape(-1)


def dequantize_q1(raw: np.ndarray, n: int, k: int) -> np.ndarray:
    b = raw.reshape(n, k // 32, 6)
    d = b[..., 0:2].copy().view(np.float16)
    bits = (b[..., 2:, None] >> np.arange(8)) & 1               # (n, k/32, 4, 8)
    sign = np.where(bits.reshape(n, k // 32, 32) == 1, 1, -1).astype(np.float16)
    return (sign * d).reshape(n, k)


def main():
    M, N, K = 40, 48, 128
    rng = np.random.default_rng(0)
    X = rng.standard_normal((M, K)).astype(np.float16)
    W = quantize_q1(rng.standard_normal((N, K)).astype(np.float32))
    Y = np.zeros((M, N), np.float32)
    with pc.knobs.check_decode_vector():       # the emulator calls both decode functions
        r = q1_gemm[((M + 15) // 16, (N + 15) // 16)](X, W, Y, M, N, K)
    ref = X.astype(np.float32) @ dequantize_q1(W, N, K).astype(np.float32).T
    err = np.abs(Y - ref).max() / np.abs(ref).max()
    ck = q1_gemm.compile()
    ck.spv                                     # validated with spirv-val (stripped)
    print(f"1-bit GEMM {M}x{N}x{K} on {r.backend}: {r.time_ms:.2f} ms, max rel error {err:.1e}")
    for note in ck.report:
        print(f"  note: {note}")
    assert err < 1e-5, err


if __name__ == "__main__":
    main()
