"""Large-N GEMMs over llama.cpp's Q8_0 and Q4_K weights (prefill: many activation vectors),
built as the Q4_0 ones of `pycoop.kernels.gemm`, with the block formats' NumPy helpers.

`gemm_q8_0(...)` / `gemm_q4_k(...)`: workgroup-scope NV cooperative matrices through tensor
layouts, any M and N, the weights decoded by a decode function while loading (`gemm_q4_0`'s
structure and options). `gemm_q8_0_planes(...)` / `gemm_q4_k_planes(...)`: Q8_0 / Q4_K weights
as two planes (`q8_0_planes` / `q4_k_planes`), dequantised by hand into shared memory
(`gemm_q4_0_planes`'s structure and options).

Formats, bit for bit as in a GGUF file (llama.cpp's ggml-common.h):
- Q8_0: blocks of 32 weights along K, 34 bytes: an f16 scale d, then 32 signed bytes q;
  weight = d * q.
- Q4_K: super-blocks of 256 weights, 144 bytes: f16 d and dmin, 12 bytes of 6-bit scales
  and mins of its 8 sub-blocks of 32, then 128 bytes of nibbles (bytes 32j .. 32j + 31 hold
  sub-block 2j in their low nibbles and 2j + 1 in their high ones);
  weight = d * scale * q - dmin * min.
"""
from __future__ import annotations

import numpy as np

import pycoop as pc
from pycoop import f16, f32, u32

from .args import check_ints, kernel_cache, numeric_array, real_dtype
from .gemm import decoded_gemm, planes_gemm, rows_of_blocks

Q8_0 = pc.struct("Q8_0", d=f16, qs=pc.array(pc.u16, 16))       # 34 bytes: scale, 32 int8
# 144 bytes: d, dmin, 12 bytes of packed 6-bit scales and mins, 128 bytes of nibbles
Q4_K = pc.struct("Q4_K", d=f16, dmin=f16, scales=pc.array(u32, 3), qs=pc.array(u32, 32))
U4 = pc.vec(u32, 4)


def _f16_at(word, high):
    """The f16 in the low (or, where `high`, the high) half of a u32, as an f32."""
    return f32(pc.bitcast(pc.u16((word >> pc.select(high, u32(16), u32(0))) & 0xFFFF), f16))


def _q4_k_scales(h1, h2, h3, j):
    """The 6-bit scales and mins of sub-blocks 2j and 2j + 1 of a Q4_K super-block, from its
    12 packed scale bytes (words h1, h2, h3). Sub-blocks 0-3 keep scale and min in the low 6
    bits of bytes 0-3 and 4-7; sub-blocks 4-7 in the nibbles of bytes 8-11 with their top 2
    bits in the top bits of bytes 0-3 (scales) and 4-7 (mins): computed for 4 bytes at once."""
    lo = j < 2
    sc = pc.select(lo, h1 & 0x3F3F3F3F, (h3 & 0x0F0F0F0F) | ((h1 >> 2) & 0x30303030))
    mn = pc.select(lo, h2 & 0x3F3F3F3F, ((h3 >> 4) & 0x0F0F0F0F) | ((h2 >> 2) & 0x30303030))
    shift = (j & 1) << 4                         # bytes 2j % 4 and 2j % 4 + 1
    return [f32((v >> (shift + s)) & 0xFF) for v in (sc, mn) for s in (0, 8)]


def _q8_0_weight(block, block_coord, coord_in_block):
    """One weight of a Q8_0 block, d * q: byte j of the 32, read from its u16 pair. XOR with
    0x80 makes the signed byte q the unsigned q + 128; OR-ed into the mantissa of 1024.0
    (0x6400) it reads as 1152 + q, and subtracting 1152 is exact (no integer conversion)."""
    j = coord_in_block[1]
    b = (u32(block.qs[j >> 1]) >> ((j & 1) << 3)) & 0xFF
    return (pc.bitcast(pc.u16((b ^ 0x80) | 0x6400), f16) - f16(1152.0)) * block.d


def _q4_k_weight(block, block_coord, coord_in_block):
    """One weight of a Q4_K super-block, d * scale * q - dmin * min in f32 (as llama.cpp's
    dequantisation), then f16: weight j is in sub-block s = j / 32, nibble byte
    32 (j / 64) + j % 32, its low nibble for even s and its high one for odd s."""
    j = coord_in_block[1]
    s = j >> 5
    sc0, sc1, m0, m1 = _q4_k_scales(block.scales[0], block.scales[1], block.scales[2], s >> 1)
    odd = (s & 1) == 1
    byte = ((j >> 6) << 5) + (j & 31)
    q = f32((block.qs[byte >> 2] >> (((byte & 3) << 3) + ((s & 1) << 2))) & 15)
    return f16(f32(block.d) * pc.select(odd, sc1, sc0) * q
               - f32(block.dmin) * pc.select(odd, m1, m0))


@kernel_cache
def gemm_q8_0(BM: int = 128, BN: int = 128, BK: int = 32, invocations: int = 256, unroll: int = 1,
              specialize: bool = False, driver_unroll: bool | int | None = None,
              clamp: str = "constant", weights_first: bool = False):
    """Y (M x N, f32) = X (M x K, f16) @ W.T, W (N x K) in Q8_0 blocks of 32 along K (the raw
    bytes, as a buffer of `Q8_0`), decoded while loading. Options, grid and operands as in
    `gemm_q4_0`: any M and N with the Constant clamp, K a multiple of 32."""
    return decoded_gemm("gemm_q8_0", Q8_0, 32, _q8_0_weight, BM, BN, BK, invocations, unroll,
                         specialize, driver_unroll, clamp, weights_first)


@kernel_cache
def gemm_q4_k(BM: int = 128, BN: int = 128, BK: int = 32, invocations: int = 256, unroll: int = 1,
              specialize: bool = False, driver_unroll: bool | int | None = None,
              clamp: str = "constant", weights_first: bool = False):
    """Y (M x N, f32) = X (M x K, f16) @ W.T, W (N x K) in Q4_K super-blocks of 256 along K
    (the raw bytes, as a buffer of `Q4_K`), decoded while loading; BK divides 256 or is a
    multiple of it. Options, grid and operands as in `gemm_q4_0`: any M and N with the
    Constant clamp, K a multiple of 256."""
    return decoded_gemm("gemm_q4_k", Q4_K, 256, _q4_k_weight, BM, BN, BK, invocations, unroll,
                         specialize, driver_unroll, clamp, weights_first)


def _byte_pairs(c, d):
    """The 4 signed bytes of u32 `c` (weights 4i .. 4i + 3 of a Q8_0 block) times scale d
    (f16x2), as two f16x2 in u32s: bytes 0, 1 and 2, 3 spread to bits 0 and 16, offset to
    unsigned (XOR 0x80) and OR-ed into the mantissa of 1024.0, minus 1152."""
    out = []
    for s in ((c & 0xFF) | ((c & 0xFF00) << 8), ((c >> 16) & 0xFF) | ((c >> 8) & 0xFF0000)):
        w = pc.bitcast((s ^ 0x00800080) | 0x64006400, pc.vec(f16, 2))
        out.append(pc.bitcast((w - pc.make_vector([f16(1152.0)] * 2)) * d, u32))
    return out


@kernel_cache
def gemm_q8_0_planes(BM: int = 128, BN: int = 128, BK: int = 64, SGM: int = 2, SGN: int = 4,
                     pad: int = 8, specialize: bool = False,
                     driver_unroll: bool | int | None = None, split_k: int = 1,
                     split_k_mode: str = "stacked", x_rows: bool = False,
                     x_f32: bool = False):
    """Y (M x N, f32) = W (M x K, Q8_0) @ X (K x N, f16), the weights as two planes
    (`q8_0_planes`): Q, two uvec4 of signed bytes per block, and D, an f16 scale per block.

    `gemm_q4_0_planes`'s structure: each invocation loads whole blocks (two aligned uvec4 and
    a scale, consecutive invocations on consecutive blocks) a k-step ahead and dequantises
    them in registers while storing them into the shared W tile; X is copied as uvec4
    (`X.view(np.uint32).reshape(-1, 4)`). M and N must be multiples of the tile (N any size
    with `x_rows`) and K of BK x split_k (checked at each launch, or when compiled with
    `specialize`); BM a multiple of 16 x SGM, BN of
    16 x SGN, BK of 32, pad of 8. The grid is (M // BM, N // BN), or (M // BM, N // BN,
    split_k) with `split_k` and `split_k_mode` as in gemm_khr_staged; `x_rows` and `x_f32` as
    in gemm_q4_0_planes.
    """
    def stage_block(put, qs, d):
        dd = pc.make_vector([d, d])
        for i, q in enumerate(qs):                # weights 16i .. 16i + 15
            for h in range(2):                    # uvec4 of weights 16i + 8h ..
                put(2 * i + h, pc.make_vector(_byte_pairs(q[2 * h], dd)
                                              + _byte_pairs(q[2 * h + 1], dd)))
    return planes_gemm("gemm_q8_0_planes", "Q8_0", 2, stage_block, BM, BN, BK, SGM, SGN, pad,
                       specialize, driver_unroll, split_k, split_k_mode, x_rows=x_rows, x_f32=x_f32)


def _q4_k_pair(bits, s, m):
    """Two weights from the nibbles q at bits 0-3 and 16-19 of `bits` with scale s and min m
    (f16x2), as 2 x f16 in a u32: 1024 + q (the nibble OR-ed into the mantissa of 1024.0)
    minus 1024 is q exactly, then one f16x2 multiplication and one subtraction, each rounded:
    f16(f16(q * s) - m), the definition of `dequantize_q4_k_planes`."""
    w = pc.bitcast((bits & 0x000F000F) | 0x64006400, pc.vec(f16, 2))
    return pc.bitcast((w - pc.make_vector([f16(1024.0)] * 2)) * s - m, u32)


@kernel_cache
def gemm_q4_k_planes(BM: int = 128, BN: int = 128, BK: int = 64, SGM: int = 2, SGN: int = 4,
                     pad: int = 8, specialize: bool = False,
                     driver_unroll: bool | int | None = None, split_k: int = 1,
                     split_k_mode: str = "stacked", x_rows: bool = False,
                     x_f32: bool = False):
    """Y (M x N, f32) = W (M x K, Q4_K) @ X (K x N, f16), the weights as two planes
    (`q4_k_planes`): Q, a uvec4 of nibbles per sub-block of 32 (Q4_0's nibble order), and D,
    an f16x2 (scale, min) per sub-block.

    `gemm_q4_0_planes`'s structure and options: each invocation loads whole sub-blocks (one
    aligned uvec4 and an f16x2, consecutive invocations on consecutive sub-blocks) a k-step
    ahead and dequantises them in registers, two weights per f16x2 operation, f16(f16(q *
    scale) - min) (`dequantize_q4_k_planes`), while storing them into the shared W tile; X
    is copied as uvec4 (`X.view(np.uint32).reshape(-1, 4)`). M and N must be multiples of the
    tile (N any size with `x_rows`) and K of BK x split_k (K is a multiple of 256 for Q4_K
    weights), checked at each launch (or when compiled with `specialize`); BM a multiple of 16 x SGM, BN of 16 x SGN, BK of 32, pad of 8.
    The grid is (M // BM, N // BN), or (M // BM, N // BN, split_k) with `split_k` and
    `split_k_mode` as in gemm_khr_staged; `x_rows` and `x_f32` as in gemm_q4_0_planes.
    """
    def stage_block(put, qs, d):
        s, m = pc.make_vector([d[0], d[0]]), pc.make_vector([d[1], d[1]])
        lo, hi = [], []
        for i in range(4):                        # 4 nibble bytes: weights j (low), j + 16
            c = qs[0][i]
            s01 = (c & 0xFF) | ((c & 0xFF00) << 8)            # bytes 0, 1 -> 0, 2
            s23 = ((c >> 16) & 0xFF) | ((c >> 8) & 0xFF0000)  # bytes 2, 3 -> 0, 2
            lo += [_q4_k_pair(s01, s, m), _q4_k_pair(s23, s, m)]
            hi += [_q4_k_pair(s01 >> 4, s, m), _q4_k_pair(s23 >> 4, s, m)]
        for i, v in enumerate([lo[:4], lo[4:], hi[:4], hi[4:]]):   # weights 8i..8i+7
            put(i, pc.make_vector(v))
    return planes_gemm("gemm_q4_k_planes", "Q4_K 32-weight", 1, stage_block, BM, BN, BK, SGM, SGN, pad,
                       specialize, driver_unroll, split_k, split_k_mode, pc.vec(f16, 2), x_rows,
                       x_f32)


# --- NumPy helpers: quantisation, dequantisation, planes ----------------------------------

def _real_matrix(name: str, w, qk: int) -> np.ndarray:
    """w as an f32 M x K matrix (K a multiple of qk), refused before the conversion where it
    holds no real numbers (`real_dtype`)."""
    a = np.asarray(w)
    if not real_dtype(a):
        raise ValueError(f"{name} takes real weights (floats or integers), got dtype {a.dtype}")
    a = np.asarray(a, np.float32)
    if a.ndim != 2 or a.shape[1] % qk or a.size == 0:
        raise ValueError(f"{name} takes a non-empty M x K matrix with K a multiple of "
                         f"{qk}, got shape {a.shape}")
    return a


def _round_away(a: np.ndarray) -> np.ndarray:
    """Round half away from zero (C's roundf, as llama.cpp)."""
    return np.sign(a) * np.floor(np.abs(a) + 0.5)


def _check_finite(name: str, w: np.ndarray, qk: int, block: str = "block") -> None:
    """A NaN or infinite weight would quantise to NaN scales or arbitrary bytes (blocks of qk
    weights along the rows of `w`)."""
    bad = ~np.isfinite(w)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise ValueError(f"{name}: w must be finite (as f32), got {w[r, c]} in row {r}, "
                         f"{block} {c // qk} (column {c})")


def _f16_scale(name: str, what: str, v: np.ndarray, limit: str,
               block: str = "block", up: bool = False) -> np.ndarray:
    """The scales `v` (rows x blocks x 1, f32) of each `block` as f16; where one exceeds f16's
    range it would be stored as inf, and every weight of its block would read as inf or NaN.
    `up`: rounded up, never below v, so that 63 of them still reach what v was computed to
    cover (rounded down, a tiny dmin became 0 and a sub-block lost its offset: errors of twice
    its largest weight)."""
    with np.errstate(over="ignore"):
        h = v.astype(np.float16)
    if up:
        low = h.astype(np.float32) < v
        h = np.where(low, np.nextafter(h, np.float16(np.inf)), h)
    bad = np.isinf(h[..., 0])
    if bad.any():
        r, b = np.argwhere(bad)[0]
        raise ValueError(f"{name}: row {r}, {block} {b}: its scale {what} = {v[r, b, 0]:.6g} "
                         f"does not fit in f16 (at most 65504): {limit}")
    return h


def quantize_q8_0(w: np.ndarray) -> np.ndarray:
    """llama.cpp's Q8_0 quantisation of the rows of `w` (M x K, K a multiple of 32): the raw
    bytes, M x (K / 32 * 34) uint8. Per block d = max |w| / 127 and q = round(w / d). The
    weights must be finite and d must fit in f16 (max |w| below about 8.32e6 per block).
    Below f16's normal range d keeps fewer bits, as llama.cpp stores it too: blocks whose
    max |w| is under about 8e-3 lose precision as they shrink (an error of 2 % of max |w| at
    2e-4, 6 % at 4e-5, 25 % at 1e-5); scale such weights up first."""
    w = _real_matrix("quantize_q8_0", w, 32)
    _check_finite("quantize_q8_0", w, 32)
    M, K = w.shape
    blocks = w.reshape(M, K // 32, 32)
    d = np.abs(blocks).max(axis=-1, keepdims=True) / 127
    dh = _f16_scale("quantize_q8_0", "max |w| / 127", d,
                    "a block's max |w| must stay below about 8.32e6 (65504 x 127)")
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, 0, 1 / np.where(d == 0, 1, d))
    q = _round_away(blocks * inv).astype(np.int8)
    out = np.concatenate([dh.view(np.uint8), q.view(np.uint8)], axis=-1)
    return out.reshape(M, -1)


def dequantize_q8_0(raw, rows: int, K: int) -> np.ndarray:
    """The rows x K f32 weights of Q8_0 bytes: d * q."""
    b = rows_of_blocks(raw, rows, K, 32, 34, "q8_0", "dequantize_q8_0")
    d = np.ascontiguousarray(b[..., :2]).view(np.float16).astype(np.float32)
    q = np.ascontiguousarray(b[..., 2:]).view(np.int8).astype(np.float32)
    return (d * q).reshape(rows, K)


def q8_0_planes(raw, rows: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """llama.cpp Q8_0 blocks (raw bytes of a rows x K matrix) as two planes, losslessly: the 32
    signed bytes of each block as two uvec4 (rows * K / 16 x 4 u32), and the scales
    (rows * K / 32 f16). The layout of `gemm_q8_0_planes`; `q8_0_blocks` undoes it."""
    b = rows_of_blocks(raw, rows, K, 32, 34, "q8_0", "q8_0_planes")
    return (np.ascontiguousarray(b[..., 2:]).view(np.uint32).reshape(-1, 4),
            np.ascontiguousarray(b[..., :2]).view(np.float16).reshape(-1))


def q8_0_blocks(Q: np.ndarray, D: np.ndarray, rows: int) -> np.ndarray:
    """The GGUF bytes (rows x row bytes, uint8) of the planes of `q8_0_planes`: Q, two uvec4
    (8 u32) per block, and D, an f16 scale per block, the blocks of `rows` equal rows."""
    name = "q8_0_blocks"
    rows, = check_ints(name, rows=rows)
    Q = numeric_array(name, "Q", Q, "the signed bytes as u32 (q8_0_planes' Q)")
    D = numeric_array(name, "D", D, "the f16 scales (q8_0_planes' D)")
    nb = D.size
    if nb == 0 or nb % rows:
        raise ValueError(f"{name}: D's {nb} scales (one per block) do not divide into "
                         f"rows={rows} rows")
    if Q.size != 8 * nb:
        raise ValueError(f"{name}: Q must hold 8 u32 (two uvec4) per block, {8 * nb} for the "
                         f"{nb} blocks of D, got {Q.size}")
    q = np.ascontiguousarray(Q, np.uint32).view(np.uint8).reshape(nb, 32)
    d = np.ascontiguousarray(D, np.float16).view(np.uint8).reshape(nb, 2)
    return np.concatenate([d, q], axis=1).reshape(rows, -1)


def _q4_k_unpack_scales(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit scales and mins of Q4_K super-blocks from their 12 scale bytes (... x 12)."""
    s = s.astype(np.uint8)
    sc = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 15) | ((s[..., 0:4] >> 6) << 4)], -1)
    mn = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], -1)
    return sc, mn


def _q4_k_pack_scales(sc: np.ndarray, mn: np.ndarray) -> np.ndarray:
    """The 12 scale bytes of Q4_K super-blocks from 8 six-bit scales and mins (... x 8)."""
    sc, mn = sc.astype(np.uint8), mn.astype(np.uint8)
    return np.concatenate([
        (sc[..., :4] & 63) | ((sc[..., 4:] >> 4) << 6),
        (mn[..., :4] & 63) | ((mn[..., 4:] >> 4) << 6),
        (sc[..., 4:] & 15) | ((mn[..., 4:] & 15) << 4)], -1)


def dequantize_q4_k(raw, rows: int, K: int) -> np.ndarray:
    """The rows x K f32 weights of Q4_K bytes: d * scale * q - dmin * min per sub-block."""
    b = rows_of_blocks(raw, rows, K, 256, 144, "q4_k", "dequantize_q4_k")
    dm = np.ascontiguousarray(b[..., :4]).view(np.float16).astype(np.float32)    # ... x 2
    sc, mn = _q4_k_unpack_scales(b[..., 4:16])
    qs = b[..., 16:].reshape(rows, K // 256, 4, 1, 32)
    q = np.concatenate([qs & 15, qs >> 4], axis=3).reshape(rows, K // 256, 8, 32)
    d = dm[..., :1, None] * sc[..., None].astype(np.float32)
    m = dm[..., 1:, None] * mn[..., None].astype(np.float32)
    return (d * q.astype(np.float32) - m).reshape(rows, K)


def quantize_q4_k(w: np.ndarray) -> np.ndarray:
    """A Q4_K quantisation of the rows of `w` (M x K, K a multiple of 256): the raw bytes,
    M x (K / 256 * 144) uint8, readable by llama.cpp. Per sub-block of 32 the range
    [min(w, 0), max(w)] is cut into 15 steps; its step and offset are stored as 6-bit
    multiples of the super-block's d and dmin, and the nibbles are rounded against the stored
    step and offset. (llama.cpp's own quantiser searches each sub-block's step and offset for
    the least squared error instead; the layout is the same.) The weights must be finite and
    d and dmin must fit in f16: per super-block, max(w) - min(w, 0) of each sub-block below
    about 6.19e7 and -min(w) below about 4.13e6. d and dmin are rounded up to f16, so that
    their 6-bit multiples cover each sub-block even where they fall below f16's normal range
    (tiny weights): the error stays that of the format (about 7 % of a super-block's max |w|
    for uniform weights) down to weights of about 1e-5; below that the smallest f16 steps are
    too coarse (9 % at 5e-6, 22 % at 1e-6): scale such weights up first."""
    w = _real_matrix("quantize_q4_k", w, 256)
    _check_finite("quantize_q4_k", w, 256, "super-block")
    M, K = w.shape
    x = w.reshape(M, K // 256, 8, 32)
    lo = np.minimum(x.min(axis=-1), 0)                       # ... x 8: offsets (<= 0)
    with np.errstate(over="ignore"):                         # an inf step: refused below
        step = (x.max(axis=-1) - lo) / 15
    d = _f16_scale("quantize_q4_k", "d (the widest sub-block's max(w) - min(w, 0), / 15 / 63)",
                   step.max(axis=-1, keepdims=True) / 63,
                   "that range must stay below about 6.19e7 (65504 x 63 x 15)", "super-block",
                   up=True)
    dmin = _f16_scale("quantize_q4_k", "dmin (-min(w) / 63)",
                      (-lo).max(axis=-1, keepdims=True) / 63,
                      "-min(w) must stay below about 4.13e6 (65504 x 63)", "super-block",
                      up=True)
    df, dminf = d.astype(np.float32), dmin.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.clip(_round_away(np.where(df > 0, step / df, 0)), 0, 63)
        mn = np.clip(_round_away(np.where(dminf > 0, -lo / dminf, 0)), 0, 63)
        ds, dm = df * sc, dminf * mn                             # the stored step and offset
        q = np.where(ds[..., None] > 0, _round_away((x + dm[..., None]) / ds[..., None]), 0)
    q = np.clip(q, 0, 15).astype(np.uint8).reshape(M, K // 256, 4, 2, 32)
    nib = q[:, :, :, 0] | (q[:, :, :, 1] << 4)                 # ... x 4 x 32
    head = np.concatenate([d, dmin], -1).view(np.uint8)       # ... x 4
    out = np.concatenate([head, _q4_k_pack_scales(sc, mn), nib.reshape(M, K // 256, 128)], -1)
    return out.reshape(M, -1)


def q4_k_planes(raw, rows: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """llama.cpp Q4_K super-blocks (raw bytes of a rows x K matrix) as the two planes of
    `gemm_q4_k_planes`, per sub-block of 32 weights (rows * K / 32 of them, in order along
    each row):

    - Q (rows * K / 32 x 4 u32): its 32 nibbles as 16 bytes in Q4_0's order, byte j holding
      weight j in its low nibble and weight j + 16 in its high one;
    - D (rows * K / 32 x 2 f16): scale = f16(d * sc) and min = f16(dmin * m), sc and m the
      sub-block's 6-bit scale and min; each product is exact in f32 (11 x 6 bits) and rounded
      once to f16, to nearest even.

    A one-way repack: the nibbles are kept, but D holds rounded products, from which d, dmin
    and the 6-bit factors cannot in general be recovered. The weights the planes stand for
    are `dequantize_q4_k_planes`'s, f16(f16(q * scale) - min): three roundings to f16 (unit
    u = 2^-11), so with p = d * sc * q, m = dmin * m and w = p - m (llama.cpp's weight,
    `dequantize_q4_k`) each differs from w by at most
    u * (1.01 |w| + 2.01 p + 1.01 m) + 2^-20 (the last term for f16 subnormals). A GPU that
    fuses the product and the subtraction rounds once less, within the same bound."""
    b = rows_of_blocks(raw, rows, K, 256, 144, "q4_k", "q4_k_planes")
    dm = np.ascontiguousarray(b[..., :4]).view(np.float16).astype(np.float32)    # ... x 2
    sc, mn = _q4_k_unpack_scales(b[..., 4:16])
    scale = (dm[..., :1] * sc.astype(np.float32)).astype(np.float16)              # ... x 8
    mins = (dm[..., 1:] * mn.astype(np.float32)).astype(np.float16)
    qs = b[..., 16:].reshape(rows, K // 256, 4, 1, 32)
    q = np.concatenate([qs & 15, qs >> 4], axis=3).reshape(-1, 32)   # sub-blocks 2j, 2j + 1
    Q = (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)
    return (np.ascontiguousarray(Q).view(np.uint32).reshape(-1, 4),
            np.stack([scale.reshape(-1), mins.reshape(-1)], axis=-1))


def q4_k_scale_words(raw, rows: int, K: int) -> np.ndarray:
    """The scales of llama.cpp Q4_K super-blocks (raw bytes of a rows x K matrix) as the
    matrix-vector kernels read them (`gemv_planes`): 5 u32 per super-block, 20 bytes for
    its 256 weights where `q4_k_planes`' D takes 32: word 0 the bits of d (low half) and dmin
    (high half) as stored, word 1 + j sub-blocks 2j and 2j + 1 as 4 bytes, sc(2j), m(2j),
    sc(2j + 1), m(2j + 1) (the 6-bit factors). Nothing is rounded: a kernel computes
    llama.cpp's d * sc and dmin * m, each exact in f32."""
    b = rows_of_blocks(raw, rows, K, 256, 144, "q4_k", "q4_k_scale_words")
    sc, mn = _q4_k_unpack_scales(b[..., 4:16])
    pairs = np.stack([sc, mn], -1).reshape(rows, K // 256, 16)          # sc0 m0 sc1 m1 ...
    words = np.concatenate([np.ascontiguousarray(b[..., :4]), pairs], -1)
    return np.ascontiguousarray(words).view(np.uint32).reshape(-1)


def dequantize_q4_k_planes(Q: np.ndarray, D: np.ndarray, rows: int, K: int) -> np.ndarray:
    """The rows x K f16 weights the planes of `q4_k_planes` stand for, as `gemm_q4_k_planes`
    computes them: f16(f16(q * scale) - min) per weight, each operation rounded to f16. Q and
    D hold the rows * K / 32 sub-blocks (uvec4 and f16x2 each), K a multiple of 32."""
    name = "dequantize_q4_k_planes"
    rows, K = check_ints(name, rows=rows, K=K)
    if K % 32:
        raise ValueError(f"{name}: K must be a multiple of 32 (a sub-block), got K={K}")
    nb = rows * K // 32
    Q = numeric_array(name, "Q", Q, "the nibbles as u32 (q4_k_planes' Q)")
    D = numeric_array(name, "D", D, "the f16 (scale, min) pairs (q4_k_planes' D)")
    if Q.size != 4 * nb or D.size != 2 * nb:
        raise ValueError(f"{name}: {rows} x {K} weights are {nb} sub-blocks of 32: Q must hold "
                         f"{4 * nb} u32 (a uvec4 each) and D {2 * nb} f16 (scale and min), got "
                         f"{Q.size} and {D.size}")
    q = np.ascontiguousarray(Q, np.uint32).view(np.uint8).reshape(-1, 16)
    q = np.concatenate([q & 15, q >> 4], axis=1).astype(np.float16)              # ... x 32
    D = np.asarray(D, np.float16).reshape(-1, 2)
    return (q * D[:, :1] - D[:, 1:]).reshape(rows, K)
