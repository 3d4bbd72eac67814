"""Q4_0-quantised weights x f16 activations with SPV_NV_cooperative_matrix2 decode functions.

Weights W (N x K) are stored as llama.cpp's Q4_0 blocks: 32 weights per block, an f16 scale
and 16 bytes of 4-bit values (value j in the low nibble of byte j, value j + 16 in the high
nibble, both offset by 8). The B operand (K x N) is read through a tensor layout with block
size 1 x 32 and a transposing view; the decode function turns (block, coordinate in block)
into one f16 weight. Checked against a NumPy dequantise-then-matmul.

`q4_gemm_v4` adds a vector decode function (SPV_NV_cooperative_matrix_decode_vector, V = 4):
one dword of the block (read as two u16 halves through a second view of the block, Q4_0w) holds
the nibbles of four consecutive weights. The emulator runs it with PYCOOP_CHECK_DECODE_VECTOR
on (both functions called, any disagreement reported); devices and validators without the
extension get the module with the DecodeVectorFunc operand stripped (`q4_gemm_v4.compile().report`).

    python3 examples/q4_0_gemm.py
"""
import numpy as np

import pycoop as pc
from pycoop import f16, f32, i32, u8, u16, u32

Q4_0 = pc.struct("Q4_0", d=f16, qs=pc.array(u8, 16))           # 18 bytes per 32 weights
Q4_0w = pc.struct("Q4_0w", d=f16, qs=pc.array(u16, 8))         # the same 18 bytes, qs as u16
MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
MatB = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseB]
Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]


def dequant_q4_0(block, block_coord, coord_in_block):
    j = coord_in_block[1]                       # position of the weight inside its block (0..31)
    byte = block.qs[j % 16]
    q = pc.select(j < 16, byte & 15, byte >> 4)
    return f16(i32(q) - 8) * block.d


def dequant_q4_0_x4(block, block_coord, coord_in_block):
    """Weights j..j+3 (j = coord_in_block[1], a multiple of 4): bytes j%16 .. j%16+3 of qs, one
    dword, composed from two u16 loads (18-byte blocks keep qs 2-byte aligned only)."""
    j = coord_in_block[1]
    h = (j % 16) >> 1                           # u16 index of byte j % 16
    word = u32(block.qs[h]) | (u32(block.qs[h + 1]) << 16)
    word = pc.select(j < 16, word, word >> 4)   # low nibbles for j < 16, high ones after
    return pc.make_vector([f16(i32((word >> (8 * i)) & 15) - 8) * block.d for i in range(4)])


@pc.kernel(workgroup_size=32)
def q4_gemm(X: pc.Buffer[f16], W: pc.ReadBuffer[Q4_0], Y: pc.Buffer[f32], M: u32, N: u32, K: u32):
    lx = pc.nv.tensor_layout(2, clamp="constant").dimension(M, K)
    lw = pc.nv.tensor_layout(2, clamp="constant").block_size(1, 32).dimension(N, K)
    ly = pc.nv.tensor_layout(2, clamp="constant").dimension(M, N)
    wt = pc.nv.tensor_view(2, False, (1, 0))    # read W (N x K) as K x N
    m0, n0 = pc.workgroup_id.x * 16, pc.workgroup_id.y * 16
    acc = Acc.fill(0.0)
    for k in range(0, K, 16):
        a = pc.nv.load_tensor(X, lx.slice(m0, 16, k, 16), MatA)
        b = pc.nv.load_tensor(W, lw.slice(n0, 16, k, 16), MatB, view=wt, decode=dequant_q4_0)
        acc = pc.mul_add(a, b, acc)
    pc.nv.store_tensor(Y, ly.slice(m0, 16, n0, 16), acc)


@pc.kernel(workgroup_size=32)
def q4_gemm_v4(X: pc.Buffer[f16], W: pc.ReadBuffer[Q4_0], Y: pc.Buffer[f32], M: u32, N: u32, K: u32):
    lx = pc.nv.tensor_layout(2, clamp="constant").dimension(M, K)
    lw = pc.nv.tensor_layout(2, clamp="constant").block_size(1, 32).dimension(N, K)
    ly = pc.nv.tensor_layout(2, clamp="constant").dimension(M, N)
    wt = pc.nv.tensor_view(2, False, (1, 0))
    m0, n0 = pc.workgroup_id.x * 16, pc.workgroup_id.y * 16
    acc = Acc.fill(0.0)
    for k in range(0, K, 16):
        a = pc.nv.load_tensor(X, lx.slice(m0, 16, k, 16), MatA)
        b = pc.nv.load_tensor(W, lw.slice(n0, 16, k, 16), MatB, view=wt, decode=dequant_q4_0,
                              decode_vector=dequant_q4_0_x4, decode_vector_block=Q4_0w)
        acc = pc.mul_add(a, b, acc)
    pc.nv.store_tensor(Y, ly.slice(m0, 16, n0, 16), acc)


def quantize_q4_0(w: np.ndarray) -> np.ndarray:
    """llama.cpp's Q4_0 quantisation of rows of `w` (K a multiple of 32) -> raw bytes."""
    n, k = w.shape
    blocks = w.reshape(n, k // 32, 32)
    amax = np.take_along_axis(blocks, np.abs(blocks).argmax(-1)[..., None], -1)[..., 0]
    d = (amax / -8).astype(np.float16)
    inv = np.where(d != 0, 1 / d.astype(np.float32), 0)
    q = np.clip(np.floor(blocks * inv[..., None] + 8.5), 0, 15).astype(np.uint8)
    out = np.zeros((n, k // 32, 18), np.uint8)
    out[..., 0:2] = d[..., None].view(np.uint8)
    out[..., 2:] = q[..., :16] | (q[..., 16:] << 4)
    return out.reshape(-1)


def dequantize_q4_0(raw: np.ndarray, n: int, k: int) -> np.ndarray:
    b = raw.reshape(n, k // 32, 18)
    d = b[..., 0:2].copy().view(np.float16)
    q = np.concatenate([b[..., 2:] & 15, b[..., 2:] >> 4], -1).astype(np.int32) - 8
    return (q.astype(np.float16) * d).reshape(n, k)        # f16 products, as the kernel


def main():
    M, N, K = 40, 48, 128
    rng = np.random.default_rng(0)
    X = rng.standard_normal((M, K)).astype(np.float16)
    W = quantize_q4_0(rng.standard_normal((N, K)).astype(np.float32))
    ref = X.astype(np.float32) @ dequantize_q4_0(W, N, K).astype(np.float32).T
    for kern in (q4_gemm, q4_gemm_v4):
        Y = np.zeros((M, N), np.float32)
        with pc.knobs.check_decode_vector():  # the emulator calls decode and decode_vector, compares
            r = kern[((M + 15) // 16, (N + 15) // 16)](X, W, Y, M, N, K)
        err = np.abs(Y - ref).max() / np.abs(ref).max()
        ck = kern.compile()
        ck.spv                                # validated with spirv-val (stripped of decode_vector)
        print(f"{kern.name} Q4_0 GEMM {M}x{N}x{K} on {r.backend}: {r.time_ms:.2f} ms, "
              f"max rel error {err:.1e}")
        for note in ck.report:
            print(f"  note: {note}")
        assert err < 1e-5, err


if __name__ == "__main__":
    main()
