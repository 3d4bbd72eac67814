"""The integer path of the matrix-vector and small-N kernels: activations quantised to 8 bits
per 32-value block (`quantize_q8_1`), then Q8_0 or Q4_0 weights times those activations with
integer dot products of four packed 8-bit lanes (`pc.dot4x8`), scaled per block (`gemv_q8_1`).

What it computes, exactly:

1. **Quantisation** (`quantize_q8_1`, NumPy twin `quantize_q8_1_reference`). X (N x K, f32 or
   f16; K a multiple of 32) is cut into blocks of 32 values along K. For a block with
   amax = max |x| (f32):
   - amax >= 2^-96: d = amax / 127 and inv = 127 / amax (two f32 divisions), and each value
     becomes q = round(x * inv) (the product rounded to f32 first) with halves rounded **away
     from zero**, as C's `roundf` in llama.cpp's reference `quantize_row_q8_1`; |q| <= 127;
   - amax < 2^-96 (including an all-zero block): d = 0 and every q = 0;
   - s = the sum of the block's 32 q (an exact i32, for Q4_0's offset).
   Outputs: Q, the q as int8 packed four to a u32 (value 4w + i in byte i of word w, N x K/4
   words), D (f32, N x K/32) and S (i32, N x K/32).
   - A block holding a NaN or an infinity gets d = NaN, every q = 0 and s = 0, so that every
     product with it is NaN, as the f32 products are for a NaN (an infinity gives NaN here
     where f32 products may give ±inf).
2. **Products** (`gemv_q8_1`). For weight row m, vector n and block b, with the weight block's
   f16 scale dw and its integers w (Q8_0: the signed bytes; Q4_0: the nibbles 0 ... 15):
   - the `parts` lanes sharing the block each take some of its payload words and form an exact
     i32 partial sum: Q8_0 sum(w * q), Q4_0 sum(nib * q) - 8 * s (the offset through the
     activations' block sum, subtracted by the block's first lane only);
   - each lane's partial becomes f32(partial) * (f32(dw) * d[n, b]) (the scale product first,
     each step an f32 rounding; f32(partial) is exact, |partial| < 2^24);
   - Y[n, m] is the sum of these terms in f32: each lane adds its terms in the order of its
     blocks, then a subgroup reduction adds the lanes (an order the device chooses).
   So the integer parts are exact and the only roundings are the two per-term multiplies and
   the f32 sum, as for the float path; the difference from the float path is the
   quantisation of X: |x - q * d| <= d / 2 (plus an f32 rounding) per value, hence
   |Y_int - Y_float| <= sum_k |w_k| * d_block(k) / 2, about 0.4 % of sum |w x| for normal
   activations.

Kernels are cached per configuration, like `gemv`. The layout and schedule follow `gemv`:
each subgroup owns `rows` weight rows, its lanes walk a row's blocks with `parts` lanes per
block, a workgroup computes `nt` vectors at once (each weight word loaded and unpacked once for
all of them), and `pc.subgroup.add` reduces the lanes.
"""
from __future__ import annotations

import functools

import numpy as np

import pycoop as pc
from pycoop import f16, f32, i32, u32

from .args import check_int, check_invocations, check_unroll, is_int

QK = 32                                   # values per activation block
TINY = 2.0 ** -96                         # blocks with a smaller amax quantise to zeros
ABS_BITS = 0x7FFFFFFF                      # an f32's bits without the sign
F32_MAX_BITS = 0x7F7FFFFF                  # the largest finite f32's bits
NAN = float("nan")
FORMATS_Q8_1 = ("q8_0", "q4_0")           # weight formats of the integer path
SUBGROUP_SIZES = (8, 16, 32, 64, 128)
U4 = pc.vec(u32, 4)
F4 = pc.vec(f32, 4)
H4 = pc.vec(f16, 4)
_LOW_NIBBLES = 0x0F0F0F0F


def put_sum(Y, i, v, add: bool) -> None:
    """Y[i] = v, or (`add`, for workgroups that share Y[i]) v added with an f32 atomic."""
    if add:
        pc.atomic.add(Y, i, v)
    else:
        Y[i] = v


@pc.func
def store_row_sums(Y, acc: list, lane, row0, col0, M, N, add: bool = False):
    """The last step of the matrix-vector kernels: each accumulator acc[r][c] summed over the
    subgroup, and lane 0 storing it as Y[(col0 + c) * M + row0 + r] where that is inside M x N
    (`add`: adding it there with an f32 atomic, for workgroups that share a row)."""
    sums = [[pc.subgroup.add(a) for a in row] for row in acc]
    if lane == 0:
        for r in range(len(sums)):
            for c in range(len(sums[r])):
                if row0 + r < M and col0 + c < N:
                    put_sum(Y, (col0 + c) * M + row0 + r, sums[r][c], add)


def _check_src(src) -> str:
    if src not in ("f32", "f16"):
        raise ValueError(f"quantize_q8_1: activations are 'f32' or 'f16', got {src!r}")
    return src


def check_subgroup_size(name: str, s, least: int = 8) -> int:
    """s as a Python int, or the error of `name` for a subgroup size it does not take."""
    if not is_int(s) or s not in SUBGROUP_SIZES or s < least:
        raise ValueError(f"{name}: subgroup_size must be 8, 16, 32, 64 or 128 (at least "
                         f"{least}), got {s!r}")
    return int(s)


def _round_away(t):
    """t rounded to the nearest integer, halves away from zero, as an i32: exact (|t| minus its
    floor is exact in f32)."""
    a = pc.abs(t)
    f = pc.floor(a)
    r = pc.cast(f + pc.select(a - f >= 0.5, f32(1.0), f32(0.0)), i32)
    return pc.select(t < 0.0, -r, r)


def q8_1_lanes(xs: list):
    """The q8_1 quantisation of a 32-value block held as 4 values by each of 8 consecutive
    lanes (aligned to 8): this lane's packed word, the block's d and its sum s (as
    `quantize_q8_1`, through a butterfly of shuffles)."""
    # the block's amax over the bits of |x|: non-negative floats order as their bit patterns,
    # and an infinity or a NaN lies above every finite value there, so the amax is one exactly
    # where the block holds one (an f32 max may drop a NaN; this takes no select per value)
    mags = [pc.bitcast(x, u32) & ABS_BITS for x in xs]
    top = pc.max(pc.max(mags[0], mags[1]), pc.max(mags[2], mags[3]))
    for m in (1, 2, 4):
        top = pc.max(top, pc.subgroup.shuffle_xor(top, m))
    amax = pc.bitcast(top, f32)
    ok = amax >= TINY                               # (false for a NaN)
    bad = top > F32_MAX_BITS
    den = pc.select(ok, amax, f32(1.0))
    inv = pc.select(ok, f32(127.0) / den, f32(0.0))
    d = pc.select(bad, f32(NAN), pc.select(ok, den / f32(127.0), f32(0.0)))
    qs = [pc.max(pc.min(_round_away(pc.select(bad, f32(0.0), x * inv)), i32(127)), i32(-127))
          for x in xs]
    word = u32(0)
    for c, q in enumerate(qs):
        word = word | ((pc.bitcast(q, u32) & 0xFF) << (8 * c))
    s = qs[0] + qs[1] + qs[2] + qs[3]
    for m in (1, 2, 4):
        s = s + pc.subgroup.shuffle_xor(s, m)
    return word, d, s


@functools.cache
def quantize_q8_1(src: str = "f32", subgroups: int = 4, subgroup_size: int = 32):
    """The kernel quantising activations to 8 bits per 32-block (see the module docstring for
    the exact definition). Operands: X (`src`: f32 or f16, as vec4: `X.reshape(-1, 4)`), Q
    (u32, one word per 4 values), D (f32) and S (i32), one per block, and `nb` (u32, the
    number of blocks, N * K / 32). One invocation per vec4, 8 per block (a butterfly of
    subgroup shuffles finds the block's amax and sum: exact in any order, and it needs only
    the `shuffle` subgroup feature, not `clustered`); grid `quantize_grid(nb, subgroups,
    subgroup_size)`."""
    _check_src(src)
    check_subgroup_size("quantize_q8_1", subgroup_size)
    check_int("quantize_q8_1", "subgroups", subgroups)
    check_invocations("quantize_q8_1", subgroups, subgroup_size)
    XT = F4 if src == "f32" else H4

    @pc.kernel(workgroup_size=subgroups * subgroup_size, subgroup_size=subgroup_size)
    def quantize_q8_1(X: pc.ReadBuffer[XT], Q: pc.WriteBuffer[u32], D: pc.WriteBuffer[f32],
                      S: pc.WriteBuffer[i32], nb: u32):
        g = pc.global_invocation_id.x                      # vec4 g: block g / 8, word g % 8
        v = X[pc.min(g, nb * 8 - 1)]                       # clamped: every lane reduces
        word, d, s = q8_1_lanes([f32(v[c]) for c in range(4)])   # the block's 8 lanes
        if g < nb * 8:
            Q[g] = word
            if (g & 7) == 0:
                D[g >> 3] = d
                S[g >> 3] = s
    return quantize_q8_1


def quantize_grid(nb: int, subgroups: int = 4, subgroup_size: int = 32) -> int:
    """Workgroups of `quantize_q8_1(src, subgroups, subgroup_size)` for `nb` >= 1 blocks (its
    lanes past the end read the last block, so there must be one)."""
    nb = check_int("quantize_grid", "nb", nb)
    subgroups = check_int("quantize_grid", "subgroups", subgroups)
    return -(-nb * 8 // (subgroups * check_subgroup_size("quantize_grid", subgroup_size)))


def quantize_q8_1_reference(X) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """NumPy twin of `quantize_q8_1`: (q as int8 N x K, d f32 N x K/32, s i32 N x K/32) for X
    (N x K, or K; f32 or f16, K a multiple of 32), bit for bit what the kernel computes."""
    X = np.asarray(X)
    if X.dtype not in (np.float32, np.float16):
        raise ValueError(f"quantize_q8_1_reference: X is float32 or float16, got {X.dtype}")
    X2 = np.atleast_2d(X).astype(np.float32)
    N, K = X2.shape
    if K % QK:
        raise ValueError(f"quantize_q8_1_reference: K must be a multiple of {QK}, got {K}")
    b = X2.reshape(N, K // QK, QK)
    bad = ~np.isfinite(b).all(-1)                 # a NaN or an infinity: d = NaN, q = 0
    b = np.where(bad[..., None], np.float32(0.0), b)
    amax = np.abs(b).max(-1)
    ok = amax >= np.float32(TINY)
    den = np.where(ok, amax, np.float32(1.0)).astype(np.float32)
    inv = np.where(ok, np.float32(127.0) / den, np.float32(0.0)).astype(np.float32)
    d = np.where(bad, np.float32(np.nan),
                 np.where(ok, den / np.float32(127.0), np.float32(0.0))).astype(np.float32)
    t = (b * inv[..., None]).astype(np.float32)
    a = np.abs(t)
    f = np.floor(a)
    r = (f + (a - f >= np.float32(0.5))).astype(np.int32)
    q = np.clip(np.where(t < 0, -r, r), -127, 127).astype(np.int8)
    s = q.astype(np.int32).sum(-1).astype(np.int32)
    return q.reshape(N, K), d, s


def _f16_at(word, high):
    """The f16 in the low (or, where `high`, the high) half of a u32, as an f32."""
    return f32(pc.bitcast(pc.u16((word >> pc.select(high, u32(16), u32(0))) & 0xFFFF), f16))


def _weight_words(W, fmt: str, g, words: list):
    """(f32 scale, payload words `words`) of block g of a Q8_0 (34 bytes) or Q4_0 (18 bytes)
    matrix read as u32 words: the block starts at word base, 2 bytes into it for odd blocks,
    so odd blocks' payload words are whole and even blocks' straddle two words. Each word is
    loaded once."""
    half = 17 if fmt == "q8_0" else 9
    base, odd = (g * half) >> 1, (g & 1) == 1
    cache: dict = {}

    def at(i):
        if i not in cache:
            cache[i] = W[base + i]
        return cache[i]
    d = _f16_at(at(0), odd)
    out = [pc.select(odd, at(w + 1), (at(w) >> 16) | (at(w + 1) << 16)) for w in words]
    return d, out


@functools.cache
def gemv_q8_1(fmt: str, rows: int = 2, nt: int = 1, subgroups: int = 4, subgroup_size: int = 32,
              parts: int = 4, unroll: bool | int | None = None):
    """The kernel Y (N x M, f32) = Xq @ W.T for Q8_0 or Q4_0 weights W (M x K, GGUF blocks as
    u32 words: `GGMLWeights.kernel_array()`) and activations quantised by `quantize_q8_1`
    (Q: u32 words, or uvec4 with `parts=1`; D: f32; S: i32, read by Q4_0 only), with integer dot
    products of packed 8-bit lanes (definition in the module docstring).

    Each of the `subgroups` subgroups computes `rows` rows of Y for the workgroup's `nt`
    vectors (grid `gemv_grid(M, N, rows, nt, subgroups)` of `pycoop.kernels.gemv`); `parts`
    lanes share a block (1, 2 or 4; 8 too for Q8_0), lane p taking its payload words p,
    p + parts, ... Each weight word is loaded and unpacked once for all `nt` vectors. Any M
    and N work; K is a multiple of 32. Operands: W, Q, D, (S,) Y, M, N, K."""
    if fmt not in FORMATS_Q8_1:
        raise ValueError(f"gemv_q8_1: the integer path takes {', '.join(FORMATS_Q8_1)} weights, "
                         f"got {fmt!r}")
    for name, v in (("rows", rows), ("nt", nt), ("subgroups", subgroups)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"gemv_q8_1: {name} must be an int >= 1, got {v!r}")
    if rows * nt > 64:
        raise ValueError(f"gemv_q8_1: rows x nt = {rows * nt} accumulators per lane; at most "
                         "64 keep them in registers (lower rows or nt)")
    check_subgroup_size("gemv_q8_1", subgroup_size)
    check_invocations("gemv_q8_1", subgroups, subgroup_size)
    check_unroll("gemv_q8_1", unroll)
    nwords = 8 if fmt == "q8_0" else 4                     # payload words per block
    if parts not in (1, 2, 4, 8) or parts > nwords or parts > subgroup_size:
        raise ValueError(f"gemv_q8_1: parts must be 1, 2, 4 (or 8 for q8_0) and at most the "
                         f"{nwords} payload words of a {fmt} block; got {parts!r}")
    P, S_ = parts, subgroup_size
    q4 = fmt == "q4_0"
    XT = U4 if P == 1 else u32

    @pc.kernel(workgroup_size=subgroups * subgroup_size, subgroup_size=subgroup_size)
    def gemv_q8_1(W: pc.ReadBuffer[u32], Q: pc.ReadBuffer[XT], D: pc.ReadBuffer[f32],
                  S: pc.ReadBuffer[i32], Y: pc.WriteBuffer[f32], M: u32, N: u32, K: u32):
        lane = pc.subgroup_local_id()
        part = lane % P if P > 1 else u32(0)
        words = [part + P * i for i in range(nwords // P)]          # this lane's payload words
        # activation words multiplying them: Q8_0 the same words; Q4_0 word w (low nibbles,
        # values 4w ...) and w + 4 (high nibbles, values 16 + 4w ...)
        xwords = words + [w + 4 for w in words] if q4 else words
        row0 = (pc.workgroup_id.y * subgroups + pc.subgroup_id()) * rows
        col0 = pc.workgroup_id.x * nt
        rws = [pc.min(row0 + r, M - 1) for r in range(rows)]     # clamped: loads stay inside
        cols = [pc.min(col0 + c, N - 1) for c in range(nt)]
        nbk = K >> 5
        first = part == 0
        acc = [[f32(0.0)] * nt for _ in range(rows)]
        for u in pc.range(lane // P, nbk, S_ // P, unroll=unroll):
            wts = []
            for row in rws:                                  # each weight word once, for all nt
                dw, ws = _weight_words(W, fmt, row * nbk + u, words)
                if q4:
                    ws = [w & _LOW_NIBBLES for w in ws] + [(w >> 4) & _LOW_NIBBLES for w in ws]
                wts.append((dw, ws))
            for c, col in enumerate(cols):
                blk = col * nbk + u
                if P == 1:
                    v = [Q[blk * 2], Q[blk * 2 + 1]]
                    xs = [v[i >> 2][i & 3] for i in range(8)]
                else:
                    xs = [Q[blk * 8 + w] for w in xwords]
                dx = D[blk]
                off = None
                if q4:
                    s8 = S[blk] * 8
                    off = s8 if P == 1 else pc.select(first, s8, i32(0))
                for r, (dw, ws) in enumerate(wts):
                    isum = None
                    for w, x in zip(ws, xs):
                        t = pc.dot4x8(w, x, signed=(not q4, True))
                        isum = t if isum is None else isum + t
                    if q4:
                        isum = isum - off
                    acc[r][c] = acc[r][c] + f32(isum) * (dw * dx)
        store_row_sums(Y, acc, lane, row0, col0, M, N)

    return gemv_q8_1


def gemv_q8_1_reference(Wdata: np.ndarray, fmt: str, q: np.ndarray, d: np.ndarray,
                        s: np.ndarray, parts: int = 4, absolute: bool = False) -> np.ndarray:
    """NumPy twin of `gemv_q8_1`'s arithmetic: Y (N x M, f64) = the sum, in f64, of the terms
    f32(partial) * (f32(dw) * d) that the kernel's lanes add in f32 (the exact integer
    partials per block and lane, the f32 scale products), for raw GGUF blocks `Wdata` (uint8,
    M x row bytes) and the output of `quantize_q8_1_reference`. The kernel's result differs
    from it only by its f32 summation of the same terms. `absolute=True`: a bound on the sum
    of the terms' magnitudes instead (|w|, |q|, |s| and |scale| in place of their values),
    which bounds that summation error: a few units of f32 roundoff times it."""
    qk, size = {"q8_0": (32, 34), "q4_0": (32, 18)}[fmt]
    M = Wdata.shape[0]
    nb = Wdata.shape[1] // size
    blk = np.ascontiguousarray(Wdata).reshape(M, nb, size)
    dw = blk[..., :2].copy().view(np.float16)[..., 0].astype(np.float32)     # M x nb
    if fmt == "q8_0":
        w = blk[..., 2:].view(np.int8).astype(np.int64)                      # M x nb x 32
    else:
        p = blk[..., 2:].astype(np.int64)
        w = np.concatenate([p & 15, p >> 4], -1)                             # nibbles
    N = q.shape[0]
    qx = q.reshape(N, nb, qk).astype(np.int64)
    if absolute:
        w, qx, s, d = np.abs(w), np.abs(qx), np.abs(s), np.abs(d)
        dw = np.abs(dw)
    nwords = 8 if fmt == "q8_0" else 4
    # value k of a block belongs to payload word (k % 16) // 4 (Q4_0) or k // 4 (Q8_0); the
    # lane of word w is w % parts
    k = np.arange(qk)
    lane_of = ((k % 16) // 4 if fmt == "q4_0" else k // 4) % parts
    scale = (dw[None, :, :] * d[:, None, :]).astype(np.float32)               # N x M x nb
    y = np.zeros((N, M))
    for p in range(min(parts, nwords)):
        sel = lane_of == p
        part = np.einsum("mbk,nbk->nmb", w[..., sel], qx[..., sel])
        if fmt == "q4_0" and p == 0:
            part = part + (1 if absolute else -1) * 8 * s.astype(np.int64)[:, None, :]
        term = (part.astype(np.float32) * scale).astype(np.float32)
        y += term.astype(np.float64).sum(-1)
    return y


def q8_1_error_bound(Wf: np.ndarray, d: np.ndarray) -> np.ndarray:
    """The bound on |Y_int - Y_float| from quantising X (N x M): sum_k |w_mk| * d_nk / 2, for
    dequantised weights Wf (M x K) and the activations' block scales d (N x K/32), with a
    little room for the roundings of inv, d and x * inv (|q| <= 127 times d's and inv's
    relative errors of 2^-24 each: under 2^-15 d)."""
    Wf, d = np.asarray(Wf, np.float64), np.asarray(d, np.float64)
    if Wf.ndim != 2 or Wf.shape[1] % QK:
        raise ValueError(f"q8_1_error_bound: Wf is M x K with K a multiple of {QK}, got shape "
                         f"{Wf.shape}")
    if d.ndim != 2 or d.shape[1] * QK != Wf.shape[1]:
        raise ValueError(f"q8_1_error_bound: d is N x K/{QK} = N x {Wf.shape[1] // QK} (a scale "
                         f"per block of X), got shape {d.shape}")
    dk = np.repeat(d, QK, axis=1)                                           # N x K
    return (dk @ np.abs(Wf).T) * (0.5 + 2.0 ** -14)
