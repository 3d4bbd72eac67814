"""The integer small-N GEMM: Y (N x M, f32) = X (N x K) @ W.T with Q4_0 weights (nibble and
scale planes, `q4_0_planes`) and activations quantised to 8 bits per 32-block with f16
scales, multiplied by 8-bit integer cooperative matrices.

Each k-step stages the weights as signed bytes (q - 8) and X's bytes in shared memory; per
32-deep block every subgroup multiplies its 16 x 32 weight tiles by 32 x 16 activation tiles
into exact i32 sums and adds them, converted, times the outer product of the block's weight
scales and activation scales into its f32 accumulators. The outer product is itself a
16 x 16 x 16 f16 product: the weight scales as a matrix whose every column is the scale
vector (a column-major load with stride 0) times one whose first row is the activation
scales and whose other rows are zeros (a row-major load from a band of shared memory whose
rows past the first stay zero), one exact product per element.
"""
from __future__ import annotations

import pycoop as pc
from pycoop import f16, f32, i8, i32, u32

from .args import check_ints, kernel_cache
from .gemm import (Acc, MatA, MatB, _add_tiles_atomic, _check_split_k, _check_subgroup_tile,
                   _launch_tiling, _split_rows, _staged_k_loop, _store_tiles, _check_tiling)

A8 = pc.coopmat[i8, pc.Subgroup, 16, 32, pc.UseA]
B8 = pc.coopmat[i8, pc.Subgroup, 32, 16, pc.UseB]
C32 = pc.coopmat[i32, pc.Subgroup, 16, 16, pc.Accumulator]
U4 = pc.vec(u32, 4)
LOW = 0x0F0F0F0F


def _signed_bytes(w):
    """Four nibbles (one per byte of w, 0..15) as signed bytes q - 8: adding 0x78 to a byte
    cannot carry, and flipping its top bit subtracts 0x80 modulo 256."""
    return (w + 0x78787878) ^ 0x80808080


@kernel_cache
def gemm_q4_0_int8(BM: int = 128, BN: int = 64, BK: int = 64, SGM: int = 4, SGN: int = 1,
                   split_k: int = 1, split_k_mode: str = "stacked", variant: str = "full"):
    """Q (uvec4 per Q4_0 block), D (f16 per block), XQ (uvec4: X's signed bytes, N rows of
    K / 16), XD (f16: N rows of K / 32 scales), Y (f32, N x M, or split_k stacked N x M
    matrices with N rounded up to BN). Grid (M // BM, ceil(N / BN), split_k)."""
    name = "gemm_q4_0_int8"
    BM, BN, BK, SGM, SGN = check_ints(name, BM=BM, BN=BN, BK=BK, SGM=SGM, SGN=SGN)
    split_k = _check_split_k(name, split_k, split_k_mode)
    _check_subgroup_tile(name, BM, BN, BK, SGM, SGN)
    atomic = split_k > 1 and split_k_mode == "atomic"
    TM, TN = BM // (16 * SGM), BN // (16 * SGN)
    nth = 32 * SGM * SGN
    nb = BK // 32                                   # blocks per k-step
    ld = BK // 16 + 1                               # uvec4 per shared row (one of padding)
    band = nb * BN                                  # halves of activation scales per k-step
    wblocks = BM * nb
    xvecs = BN * BK // 16
    if BK % 32 or wblocks % nth:
        raise ValueError(f"{name}: BK a multiple of 32 and whole weight blocks per invocation "
                         f"({nth} invocations)")

    def kernel(Q: pc.ReadBuffer[U4], D: pc.ReadBuffer[f16], XQ: pc.ReadBuffer[U4],
               XD: pc.ReadBuffer[f16], Y: pc.Buffer[f32], M: u32, N: u32, K: u32):
        sw, sx = pc.shared(U4, BM * ld), pc.shared(U4, BN * ld)
        sdw = pc.shared(f16, BM * nb)
        sdx = pc.shared(f16, 16 * band)             # row 0: the scales; rows 1..15: zeros
        scratch = pc.shared(f32, SGM * SGN * 256) if atomic else None
        sg, t = pc.subgroup_id(), pc.local_invocation_index()
        wm, wn = (sg // SGN) * (16 * TM), (sg % SGN) * (16 * TN)
        m0, n0 = pc.workgroup_id.x * BM, pc.workgroup_id.y * BN
        for q in range(-(-15 * band // nth)):
            if 15 * band % nth == 0 or t + q * nth < 15 * band:
                sdx[band + t + q * nth] = f16(0.0)
        pw = [divmod(t + q * nth, nb) for q in range(wblocks // nth)]       # (row, block)
        px = [divmod(t + q * nth, BK // 16) for q in range(-(-xvecs // nth))]   # (row, uvec4)
        pd = [divmod(t + q * nth, nb) for q in range(-(-band // nth))]      # (row, block)

        def fetch(kn):
            w = [(Q[(m0 + r) * (K // 32) + kn // 32 + b], D[(m0 + r) * (K // 32) + kn // 32 + b])
                 for r, b in pw]
            zero = pc.make_vector([u32(0)] * 4)
            xs = [pc.select(n0 + r < N, XQ[pc.min(n0 + r, N - 1) * (K // 16) + kn // 16 + c],
                            zero) for r, c in px]
            ds = [pc.select(n0 + r < N, XD[pc.min(n0 + r, N - 1) * (K // 32) + kn // 32 + b],
                            f16(0.0)) for r, b in pd]
            return w, xs, ds

        def stage(w, xs, ds):
            for (r, b), (qs, d) in zip(pw, w):
                lo = [_signed_bytes(qs[i] & LOW) for i in range(4)]
                hi = [_signed_bytes((qs[i] >> 4) & LOW) for i in range(4)]
                sw[r * ld + 2 * b] = pc.make_vector(lo)
                sw[r * ld + 2 * b + 1] = pc.make_vector(hi)
                sdw[b * BM + r] = d
            for q, ((r, c), v) in enumerate(zip(px, xs)):
                if xvecs % nth == 0 or t + q * nth < xvecs:
                    sx[r * ld + c] = v
            for q, ((r, b), d) in enumerate(zip(pd, ds)):
                if band % nth == 0 or t + q * nth < band:
                    sdx[b * BN + r] = d

        def products(acc):
            for b in range(nb):
                a = [A8.load(sw, (wm + 16 * i) * ld + 2 * b, ld) for i in range(TM)]
                x = [B8.load(sx, (wn + 16 * j) * ld + 2 * b, ld, "col_major") for j in range(TN)]
                dw = [MatA.load(sdw, b * BM + wm + 16 * i, 0, "col_major") for i in range(TM)]
                dx = [MatB.load(sdx, b * BN + wn + 16 * j, band) for j in range(TN)]
                if variant == "full":
                    acc = [[acc[i][j] + pc.convert(pc.mul_add(a[i], x[j], C32.fill(0)), f32)
                            * pc.mul_add(dw[i], dx[j], Acc.fill(0.0))
                            for j in range(TN)] for i in range(TM)]
                elif variant == "noscale":     # the integer products, converted and added
                    acc = [[acc[i][j] + pc.convert(pc.mul_add(a[i], x[j], C32.fill(0)), f32)
                            for j in range(TN)] for i in range(TM)]
                elif variant == "int_acc":     # i32 sums over all of K (timing only)
                    acc = [[pc.mul_add(a[i], x[j], acc[i][j]) for j in range(TN)]
                           for i in range(TM)]
            return acc

        _check_tiling(name, M, BN, K, BM, BN, BK, split_k)
        T0 = C32 if variant == "int_acc" else Acc
        acc = _staged_k_loop([[T0.fill(0) for _ in range(TN)] for _ in range(TM)], K, BK,
                             split_k, None, fetch, stage, products)
        if variant == "int_acc":
            acc = [[pc.convert(c, f32) for c in row] for row in acc]
        if atomic:
            _add_tiles_atomic(Y, acc, scratch, sg, m0 + wm, n0 + wn, M, True)
        else:
            rows = (N + BN - 1) // BN * BN
            _store_tiles(Y, acc, m0 + wm, _split_rows(n0, rows, split_k) + wn, M, True)

    kernel.__name__ = kernel.__qualname__ = name
    return pc.kernel(workgroup_size=nth, requires=_launch_tiling(name, BM, BN, BK, split_k,
                                                                 False, n_any=True))(kernel)
