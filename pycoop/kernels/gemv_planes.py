"""Matrix-vector products over weight planes: Y (N x M, f32) = X (N x K) @ W.T for N = 1 ... 8
vectors, with the weights in the planes layout the small-N GEMMs already use (`q4_0_planes`,
`q8_0_planes`, `q4_k_planes`; made once per weight matrix and shared with them) or as f16.

Why planes: llama.cpp's blocks are 18 (Q4_0), 34 (Q8_0) or 144 (Q4_K) bytes, so a kernel
reading them straight from the GGUF bytes loads unaligned words that straddle blocks. The
planes hold each 32-weight block's payload as aligned uvec4 (Q4_0 and Q4_K: one, 32 nibbles;
Q8_0: two, 32 bytes) and its scale in a separate contiguous stream (Q4_0, Q8_0: an f16;
Q4_K: `q4_k_scale_words`, d and dmin and the 6-bit factors of each super-block in 20 bytes,
so that the kernel reads 18.5 bytes per 32 weights, where `q4_k_planes`' f16 scale and min
per sub-block would make it 20). Lane l of a subgroup reads block l,
l + S, ... of a row: every load is a 16-byte aligned vector and a subgroup's loads of one
step are one contiguous run of memory.

Schedule (`gemv_planes`):
- each subgroup owns `rows` consecutive weight rows, a workgroup `subgroups` subgroups and
  `nt` vectors (grid `gemv_planes_grid`); each weight block is loaded and unpacked once for
  the workgroup's `nt` vectors, each activation block once for the `rows` rows;
- `split` subgroups may share rows, each taking every split-th stretch of K: with few rows
  (M = 4096) one subgroup per row leaves half the GPU's lanes idle and too few loads in
  flight to cover memory latency; their sums meet in shared memory;
- a lane takes `span` consecutive blocks per step (their loads issued before any arithmetic),
  steps S * span blocks apart; `unroll` is the driver's hint on that loop;
- the lanes' partial sums are reduced with `pc.subgroup.add` and lane 0 stores them.

Activations, two kinds:
- `x="f32"`: X as f32 (vec4). A block's weights are dequantised in registers without integer
  conversions (a nibble OR-ed into the mantissa of 2^23 reads as 2^23 + q; one subtraction
  gives q minus the format's offset exactly), multiplied by x in f32 and scaled once per
  block: Q4_0 d * sum((q - 8) x); Q8_0 d * sum(q x); Q4_K scale * sum(q x) - min * sum(x)
  with scale = d * sc and min = dmin * m, each exact in f32 (llama.cpp's).
- `x="q8_1"`: X quantised to 8 bits per 32-block by `quantize_q8_1` (Q: uvec4, two per block;
  D: f32 scale, S: i32 sum of the block's q). Integer dot products of packed 8-bit lanes
  (`pc.dot4x8`) give each block's exact integer sum isum = sum(q_w q_x), then
  Q4_0 f32(isum - 8 s) * (d * dx); Q8_0 f32(isum) * (d * dx); Q4_K dx * (scale * f32(isum) -
  min * f32(s)). The error against the float product is that of X's quantisation
  (`q8_1_error_bound`) plus f32 sums.
- `x="f16"`: X as f16 (uvec4 of 8 halves), each value converted to f32 exactly, then as
  x="f32": the same products and sums, half the bytes of x to load, one more conversion
  per value. Chosen for f16 device arrays.
- f16 weights (`fmt="f16"`) take x="f32" or "f16": W as uvec4 (8 halves), K a multiple of 8.

Sums are in f32, in an order the device chooses for the subgroup reduction. Any M and N
work (rows and vectors past the edge are clamped on load and not stored); K is a multiple of
the block (32; Q4_K 256, the planes' super-block; f16 8).
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

import pycoop as pc
from pycoop import f16, f32, i32, u32

from .gemm import q4_0_planes
from .gemm_quant import dequantize_q4_k, q4_k_planes, q4_k_scale_words, q8_0_planes
from .dequant import dot, fields_as_f32
from .args import check_int, check_invocations, check_unroll, is_int
from .gemvq import (check_subgroup_size, put_sum, q8_1_lanes, quantize_grid, quantize_q8_1,
                    store_row_sums)
from .limits import SHARED_BYTES

FORMATS = ("q4_0", "q8_0", "q4_k", "f16")
X_KINDS = ("f32", "f16", "q8_1", "q8_1_shared")
X_DTYPES = {"f32": np.float32, "f16": np.float16}     # X as the float kernels read it
# x="q8_1_shared" above this K: KGROUPS workgroups share each row group, each quantising its
# stretch of X. Up to it every workgroup quantises all of X, which beat the quantiser's own
# launch at K = 4096 (H200: Q4_0 6.8 against 8.9 µs at 4096 x 4096) and lost at K = 14336
# (15.1 against 14.1 µs; with kg4 on the H100: 16.2 against 17.5)
KGROUPS_ABOVE_K = 4096
KGROUPS = 4
PLANES = {"q4_0": q4_0_planes, "q8_0": q8_0_planes, "q4_k": q4_k_planes}
# uvec4 of Q per 32-weight block, and the K granularity of each format
WORDS = {"q4_0": 1, "q8_0": 2, "q4_k": 1}
K_MULTIPLE = {"q4_0": 32, "q8_0": 32, "q4_k": 256, "f16": 8}
MAX_N = 8

U4 = pc.vec(u32, 4)
F4 = pc.vec(f32, 4)
H2 = pc.vec(f16, 2)
_LOW = 0x0F0F0F0F


def _sum(xs: list):
    s = xs[0]
    for v in xs[1:]:
        s = s + v
    return s


def check_config(fmt: str, x: str, rows: int, nt: int, subgroups: int, subgroup_size: int,
                 span: int, split: int = 1, kgroups: int = 1) -> None:
    """The errors `gemv_planes` raises for a configuration, before anything is built."""
    if fmt not in FORMATS:
        raise ValueError(f"gemv_planes: format is one of {', '.join(FORMATS)}, got {fmt!r}")
    if x not in X_KINDS:
        raise ValueError(f"gemv_planes: x is one of {', '.join(map(repr, X_KINDS))}, got {x!r}")
    if fmt == "f16" and x.startswith("q8_1"):
        raise ValueError("gemv_planes: f16 weights take x='f32' or 'f16'")
    for name, v in (("rows", rows), ("nt", nt), ("subgroups", subgroups), ("span", span),
                    ("split", split), ("kgroups", kgroups)):
        check_int("gemv_planes", name, v)
    if kgroups > 1 and x != "q8_1_shared":
        raise ValueError(f"gemv_planes: kgroups (workgroups sharing a row's K) needs "
                         f"x='q8_1_shared', got x={x!r}")
    if subgroups % split:
        raise ValueError(f"gemv_planes: split ({split}) must divide subgroups ({subgroups})")
    if nt > MAX_N:
        raise ValueError(f"gemv_planes: nt (vectors per workgroup) is at most {MAX_N}, got {nt}")
    if rows * nt * span > 64:
        raise ValueError(f"gemv_planes: rows x nt x span = {rows * nt * span}: at most 64 "
                         "(accumulators and loads in flight per lane stay in registers)")
    check_subgroup_size("gemv_planes", subgroup_size)
    check_invocations("gemv_planes", subgroups, subgroup_size)


def shared_bytes(K: int, nt: int) -> int:
    """Shared memory of x="q8_1_shared": nt quantised vectors of K values (a byte each, and
    an f32 scale and i32 sum per 32)."""
    return nt * (K + K // 4)


def fits_shared(K: int, nt: int) -> bool:
    """Whether x="q8_1_shared" can hold nt vectors of K values in `SHARED_BYTES`."""
    return shared_bytes(K, nt) <= SHARED_BYTES


def check_shared(K: int, nt: int) -> None:
    """The error of x="q8_1_shared" where its vectors do not fit `SHARED_BYTES`."""
    if not fits_shared(K, nt):
        raise ValueError(f"gemv_planes: x='q8_1_shared' holds nt x K quantised values in "
                         f"shared memory: {shared_bytes(K, nt)} bytes for nt={nt}, K={K}, "
                         f"more than {SHARED_BYTES}; use x='q8_1' (a quantiser launch) or "
                         "fewer vectors per workgroup")


@functools.cache
def gemv_planes(fmt: str, x: str = "f32", rows: int = 2, nt: int = 1, subgroups: int = 4,
                subgroup_size: int = 32, span: int = 1, unroll: bool | int | None = None,
                split: int = 1, K: int | None = None, src: str = "f32", kgroups: int = 1,
                prefetch: bool = False):
    """The kernel Y (N x M, f32) = X (N x K) @ W.T over weight planes (module docstring).

    Operands, in order:
    - Q (uvec4): `fmt`'s planes Q (Q4_0/Q4_K: M * K / 32 uvec4, Q8_0: M * K / 16), or for f16
      the weights as uvec4 (M * K / 8);
    - D: the planes' scales (f16 per block); Q4_K `q4_k_scale_words` (u32, 5 per
      super-block); for f16 weights any f16 array (not read);
    - x="f32": X (N x K f32 as vec4: `X.reshape(-1, 4)`); x="f16": X (N x K f16 as uvec4,
      8 halves each); x="q8_1": XQ (uvec4, N * K / 16),
      XD (f32, N * K / 32), XS (i32, N * K / 32), `quantize_q8_1`'s outputs;
    - Y (N x M f32), M, N, K (u32).
    x="q8_1_shared": Q, D, X (N x K, f32, or f16 with `src="f16"`, as vec4:
    `X.reshape(-1, 4)`), Y, M, N: each workgroup first quantises its `nt` vectors into shared
    memory, the bits `quantize_q8_1` gives, then multiplies as x="q8_1" (the same sums in the
    same order): one launch instead of two. K is fixed when the kernel is built (`K`; the
    quantised vectors must fit `SHARED_BYTES`, `fits_shared`). `kgroups` > 1: that many
    workgroups share each row group, each taking one stretch of K / kgroups, quantising only
    that stretch of X and adding its sums into Y with f32 atomics: Y must be zero before the
    launch, and the order of the additions, hence the last bits of Y, may change from run to
    run.
    `prefetch`: each step of a lane issues the next step's weight loads before its own
    products (x="q8_1_shared": the first step's before X is quantised), the same sums.
    Grid `gemv_planes_grid(M, N, rows, nt, subgroups, split, kgroups)`; subgroups of
    `subgroup_size` lanes.
    """
    if not isinstance(prefetch, bool):
        raise ValueError(f"gemv_planes: prefetch must be a bool, got {prefetch!r}")
    check_config(fmt, x, rows, nt, subgroups, subgroup_size, span, split, kgroups)
    check_unroll("gemv_planes", unroll)
    if x == "q8_1_shared":
        unit = K_MULTIPLE[fmt] * kgroups
        if not isinstance(K, int) or isinstance(K, bool) or K < 1 or K % unit:
            raise ValueError(f"gemv_planes: x='q8_1_shared' is built for one K, a multiple of "
                             f"{K_MULTIPLE[fmt]} for {fmt}"
                             + (f" times kgroups={kgroups}" if kgroups > 1 else "")
                             + f"; got K={K!r}")
        check_shared(K // kgroups, nt)
        if src not in X_DTYPES:
            raise ValueError(f"gemv_planes: src (X's dtype) is 'f32' or 'f16', got {src!r}")
    S, R, T, SP = subgroup_size, rows, nt, span
    DT = u32 if fmt == "q4_k" else f16
    bk = 8 if fmt == "f16" else 32                         # weights per unit (block, uvec4)
    nw = WORDS.get(fmt, 1)

    def load_w(Q, D, row, u, nb):
        """(payload uvec4s, scale) of unit u of a row; Q4_K's scale as the uvec3 (d and dmin
        word, its sub-block pair's word, the pair's shift): loaded words only, decoded where
        they are used (`scale_min`), so that a prefetch does not wait for its loads."""
        g = row * nb + u
        qs = [Q[g * nw + i] for i in range(nw)]
        if fmt == "q4_k":
            w0 = (g >> 3) * 5                               # 8 sub-blocks per super-block
            return qs, pc.make_vector([D[w0], D[w0 + 1 + ((g >> 1) & 3)], (g & 1) * 16])
        return qs, (None if fmt == "f16" else D[g])

    def scale_min(d):
        """Q4_K: (d · sc, dmin · m) of a sub-block from its uvec3 (`load_w`), exact in f32
        as llama.cpp computes them."""
        dm, pair = pc.bitcast(d[0], H2), d[1] >> d[2]
        return f32(dm[0]) * f32(pair & 0xFF), f32(dm[1]) * f32((pair >> 8) & 0xFF)

    def term_f32(qs, d, xs):
        """A unit's product with one vector's x values (f32 list, in order)."""
        if fmt == "f16":
            v = qs[0]
            ws = [f32(pc.bitcast(v[c], H2)[h]) for c in range(4) for h in range(2)]
            return dot(ws, xs)
        if fmt == "q8_0":
            ws = [w for v in qs for c in range(4) for w in fields_as_f32(v[c] ^ 0x80808080, 128.0, 8, 0)]
            return f32(d) * dot(ws, xs)
        v = qs[0]                                          # byte j: weight j low, j + 16 high
        off = 8.0 if fmt == "q4_0" else 0.0
        ws = [w for c in range(4) for w in fields_as_f32(v[c], off, 4, 0)] + \
             [w for c in range(4) for w in fields_as_f32(v[c], off, 4, 4)]
        if fmt == "q4_0":
            return f32(d) * dot(ws, xs)
        scale, mn = scale_min(d)
        return scale * dot(ws, xs) - mn * _sum(xs)

    def term_q8_1(qs, d, xa, xb, dx, s):
        """A block's product with one vector's quantised block (xa, xb: its 8 words)."""
        if fmt == "q8_0":
            isum = None
            for v, xv in ((qs[0], xa), (qs[1], xb)):
                for c in range(4):
                    t = pc.dot4x8(v[c], xv[c], signed=(True, True))
                    isum = t if isum is None else isum + t
            return f32(isum) * (f32(d) * dx)
        v = qs[0]
        isum = None
        for c in range(4):
            lo = pc.dot4x8(v[c] & _LOW, xa[c], signed=(False, True))
            hi = pc.dot4x8((v[c] >> 4) & _LOW, xb[c], signed=(False, True))
            isum = lo + hi if isum is None else isum + lo + hi
        if fmt == "q4_0":
            return f32(isum - s * 8) * (f32(d) * dx)
        scale, mn = scale_min(d)
        return dx * (scale * f32(isum) - mn * f32(s))

    def setup(M, N):
        """The lane, its rows and vectors, its first unit and the stride between its steps."""
        lane, sg = pc.subgroup_local_id(), pc.subgroup_id()
        row0 = (pc.workgroup_id.y * (subgroups // split) + sg // split) * R
        col0 = pc.workgroup_id.x * T
        rws = [pc.min(row0 + r, M - 1) for r in range(R)]       # clamped: loads stay inside
        cols = [pc.min(col0 + c, N - 1) for c in range(T)]
        first = ((sg % split) * S + lane) * SP if split > 1 else lane * SP
        return lane, row0, col0, rws, cols, [[f32(0.0)] * T for _ in range(R)], first

    @pc.func
    def finish(Y, acc, lane, row0, col0, M, N):
        """Sum the lanes' (and the split subgroups') partial sums and store them."""
        if split == 1:
            store_row_sums(Y, acc, lane, row0, col0, M, N, kgroups > 1)
            return
        sums = [[pc.subgroup.add(a) for a in row] for row in acc]
        part = pc.shared(f32, subgroups * R * T)
        sg = pc.subgroup_id()
        if lane == 0:
            for r in range(R):
                for c in range(T):
                    part[sg * (R * T) + r * T + c] = sums[r][c]
        pc.barrier()
        if lane == 0 and sg % split == 0:
            for r in range(R):
                for c in range(T):
                    t = _sum([part[(sg + p) * (R * T) + r * T + c] for p in range(split)])
                    if row0 + r < M and col0 + c < N:
                        put_sum(Y, (col0 + c) * M + row0 + r, t, kgroups > 1)

    def units(u0, end):
        """The `span` units of a step from u0, clamped below `end`, and which are real."""
        us = [u0 + j for j in range(SP)]
        if SP == 1 and not prefetch:
            return us, None
        return [pc.min(u, end - 1) for u in us], [u < end for u in us]

    def load_ws(Q, D, us, nb, rws):
        """The weights of units `us` of every row, each as a list [payload uvec4s..., scale]."""
        out = []
        for row in rws:
            out.append([])
            for u in us:
                qs, d = load_w(Q, D, row, u, nb)
                out[-1].append(qs + ([d] if d is not None else []))
        return out

    def products(ws, xs, ok, acc):
        for r in range(R):
            for c in range(T):
                for j in range(SP):
                    w = ws[r][j]
                    t = term((w[:nw], w[nw] if fmt != "f16" else None), xs[c][j])
                    if ok is not None:
                        t = pc.select(ok[j], t, f32(0.0))
                    acc[r][c] = acc[r][c] + t

    def preload(Q, D, start, end, nb, rws):
        """With `prefetch`, the weights of a lane's first step (issued before whatever the
        kernel does next); else nothing."""
        return load_ws(Q, D, units(start, end)[0], nb, rws) if prefetch else None

    @pc.func
    def walk(Q, D, xload, start, end, nb, rws, cols, acc, ahead=None):
        """A lane's steps over units start, start + stride, ... below `end` (loads first).
        With `prefetch` (`ahead` from `preload`) each step issues the next step's weight
        loads before its own products, so they are in flight during them."""
        stride = S * SP * split
        for u0 in pc.range(start, end, stride, unroll=unroll):
            us, ok = units(u0, end)
            if prefetch:
                ws = [[list(w) for w in row] for row in ahead]
                fresh = load_ws(Q, D, units(u0 + stride, end)[0], nb, rws)
                for r in range(R):
                    for j in range(SP):
                        for i in range(len(fresh[r][j])):
                            ahead[r][j][i] = fresh[r][j][i]
            else:
                ws = load_ws(Q, D, us, nb, rws)
            xs = [[xload(col, u, nb) for u in us] for col in cols]
            products(ws, xs, ok, acc)

    if x in ("f32", "f16"):
        XT, per = (F4, 4) if x == "f32" else (U4, 8)           # x values per vector load

        def term(w, xv):
            return term_f32(w[0], w[1], xv)

        def values(v):
            if x == "f32":
                return [v[i] for i in range(4)]
            return [f32(pc.bitcast(v[c], H2)[h]) for c in range(4) for h in range(2)]

        def make_xload(X, K):
            def xload(col, u, nb):
                base = col * (K // per) + u * (bk // per)
                return [t for k in range(bk // per) for t in values(X[base + k])]
            return xload

        @pc.kernel(workgroup_size=subgroups * S, subgroup_size=S)
        def gemv_planes(Q: pc.ReadBuffer[U4], D: pc.ReadBuffer[DT], X: pc.ReadBuffer[XT],
                        Y: pc.WriteBuffer[f32], M: u32, N: u32, K: u32):
            lane, row0, col0, rws, cols, acc, first = setup(M, N)
            xload, nb = make_xload(X, K), K // bk
            walk(Q, D, xload, first, nb, nb, rws, cols, acc, preload(Q, D, first, nb, nb, rws))
            finish(Y, acc, lane, row0, col0, M, N)
        return gemv_planes

    def term(w, xv):                                            # noqa: F811
        return term_q8_1(w[0], w[1], *xv)

    if x == "q8_1_shared":
        return _q8_1_shared_kernel(fmt, subgroups, S, T, split, K, src, setup, preload, walk,
                                   finish, DT, kgroups)

    def make_xload(XQ, XD, XS):                                 # noqa: F811
        def xload(col, u, nb):
            b = col * nb + u
            return XQ[2 * b], XQ[2 * b + 1], XD[b], (XS[b] if fmt != "q8_0" else None)
        return xload

    @pc.kernel(workgroup_size=subgroups * S, subgroup_size=S)
    def gemv_planes_q8_1(Q: pc.ReadBuffer[U4], D: pc.ReadBuffer[DT], XQ: pc.ReadBuffer[U4],
                         XD: pc.ReadBuffer[f32], XS: pc.ReadBuffer[i32], Y: pc.WriteBuffer[f32],
                         M: u32, N: u32, K: u32):
        lane, row0, col0, rws, cols, acc, first = setup(M, N)
        xload, nb = make_xload(XQ, XD, XS), K // bk
        walk(Q, D, xload, first, nb, nb, rws, cols, acc, preload(Q, D, first, nb, nb, rws))
        finish(Y, acc, lane, row0, col0, M, N)
    return gemv_planes_q8_1


def _q8_1_shared_kernel(fmt: str, subgroups: int, S: int, T: int, split: int, K: int, src: str,
                        setup, preload, walk, finish, DT, KG: int):
    """`gemv_planes`' x="q8_1_shared" kernel: the workgroup's T vectors (their stretch of K /
    KG values, the workgroup's z index picking it) quantised into shared memory by 8 lanes per
    32-block (`q8_1_lanes`, as `quantize_q8_1`), then the x="q8_1" products with the
    activations read from there."""
    WG, K4, nb = subgroups * S, K // 4, K // 32
    Kc = K // KG                                # this workgroup's stretch of K
    K4c, nbc = Kc // 4, Kc // 32
    H4 = pc.vec(f16, 4)
    XT = F4 if src == "f32" else H4
    per = -(-K4c // WG)                         # vec4 of a vector per invocation
    batch = min(per, 4)                         # loaded together before they are quantised
    YT = pc.Buffer[f32] if KG > 1 else pc.WriteBuffer[f32]       # atomics read it too

    @pc.kernel(workgroup_size=WG, subgroup_size=S)
    def gemv_planes_q8_1_shared(Q: pc.ReadBuffer[U4], D: pc.ReadBuffer[DT],
                                X: pc.ReadBuffer[XT], Y: YT, M: u32, N: u32):
        sh_q = pc.shared(U4, T * nbc * 2)
        sh_d = pc.shared(f32, T * nbc)
        sh_s = pc.shared(i32, T * nbc) if fmt != "q8_0" else None
        lane, row0, col0, rws, cols, acc, first = setup(M, N)
        kz = pc.workgroup_id.z if KG > 1 else u32(0)
        ubase = kz * nbc                        # the stretch's first unit of a row
        # with prefetch the first weights are loaded while X is quantised
        ahead = preload(Q, D, ubase + first, ubase + nbc, nb, rws)
        me = pc.subgroup_id() * S + lane        # 8 consecutive lanes share a block
        for c in range(T):
            base = cols[c] * K4 + kz * K4c
            for g0 in pc.range(0, per * WG, batch * WG):     # the same trip count everywhere
                gs = [g0 + j * WG + me for j in range(batch)]
                vs = [X[base + pc.min(g, K4c - 1)] for g in gs]          # clamped: all reduce
                for g, v in zip(gs, vs):
                    word, d, s = q8_1_lanes([f32(v[e]) for e in range(4)])
                    words = [word] + [pc.subgroup.shuffle_xor(word, m) for m in (1, 2, 3)]
                    if g < K4c:
                        if (g & 3) == 0:        # lanes 0 and 4 of the block: its two uvec4
                            sh_q[c * nbc * 2 + (g >> 2)] = pc.make_vector(words)
                        if (g & 7) == 0:
                            sh_d[c * nbc + (g >> 3)] = d
                            if sh_s is not None:
                                sh_s[c * nbc + (g >> 3)] = s
        pc.barrier()

        def xload(c, u, nb_):
            b = c * nbc + (u - ubase)
            return sh_q[2 * b], sh_q[2 * b + 1], sh_d[b], (sh_s[b] if sh_s is not None else None)

        walk(Q, D, xload, ubase + first, ubase + nbc, nb, rws, list(range(T)), acc, ahead)
        finish(Y, acc, lane, row0, col0, M, N)
    return gemv_planes_q8_1_shared


def gemv_planes_grid(M: int, N: int, rows: int = 2, nt: int = 1, subgroups: int = 4,
                     split: int = 1, kgroups: int = 1) -> tuple[int, ...]:
    """The grid of `gemv_planes(fmt, x, rows, nt, subgroups, ..., split=split,
    kgroups=kgroups)` for M rows and N vectors."""
    grid = (-(-N // nt), -(-M // (rows * (subgroups // split))))
    return grid + (kgroups,) if kgroups > 1 else grid


@dataclasses.dataclass(frozen=True)
class PlanesGemvConfig:
    """A configuration of `gemv_planes` (its arguments but the format and subgroup size)."""
    x: str = "f32"
    rows: int = 2
    nt: int = 1
    subgroups: int = 4
    span: int = 1
    unroll: bool | int | None = None
    split: int = 1
    kgroups: int = 1
    prefetch: bool = False

    def kernel(self, fmt: str, subgroup_size: int = 32, K: int | None = None,
               src: str = "f32"):
        """The `gemv_planes` kernel of this configuration for `fmt` weights (x="q8_1_shared":
        for K columns and X of dtype `src`)."""
        if self.x != "q8_1_shared":
            K, src = None, "f32"                 # one kernel for every K and X dtype
        return gemv_planes(fmt, self.x, self.rows, self.nt, self.subgroups, subgroup_size,
                           self.span, self.unroll, self.split, K, src, self.kgroups,
                           self.prefetch)

    def grid(self, M: int, N: int) -> tuple[int, ...]:
        """Its grid for M rows and N vectors."""
        return gemv_planes_grid(M, N, self.rows, self.nt, self.subgroups, self.split,
                                self.kgroups)


def planes_gemv_config(fmt: str, N: int, x: str = "f32", K: int | None = None) -> PlanesGemvConfig:
    """The configuration used by default for N vectors (1 ... 8): the fastest of the sweeps
    on the H200 (bench/llm_kernels.py --paths gemv_planes, 2026-11-27: all three llama-8B
    shapes at N = 1, 4096 x 14336 at N = 2, 4, 8). Two or four subgroups share each row
    group (`split`) almost everywhere: one subgroup per row leaves lanes idle at M = 4096.
    x="q8_1": one row per subgroup at N = 1 (the activations are 8x smaller than f32, so
    sharing them over rows gains little), more rows with more vectors; x="f32": 4 rows share
    each x value, two blocks per lane and step (f16 weights: one row per subgroup).
    x="q8_1_shared" (H100 sweep, 2026-11-27): 16 rows per workgroup (2 per subgroup, 16
    subgroups, 2 sharing each row group); above K = `KGROUPS_ABOVE_K`, 4 workgroups share K
    with 64 (Q4_0 and Q4_K) or 32 (Q8_0) rows each (Q4_K: 17.3 against 18.7 µs with 32 rows,
    H100 sweep of 2026-11-28). Both prefetch the weights (H100: 4-12 % faster at
    4096 x 4096, 14336 x 4096 and 4096 x 14336)."""
    if not is_int(N) or not 1 <= N <= MAX_N:
        raise ValueError(f"gemv_planes takes N = 1 ... {MAX_N} vectors, got {N!r}")
    nt = 1 if N == 1 else 2 if N == 2 else 4 if N <= 4 else 8
    C = PlanesGemvConfig
    if x == "q8_1_shared":      # 16 rows per workgroup: each quantises X for all of them;
        if K is not None and K > KGROUPS_ABOVE_K and K % (K_MULTIPLE[fmt] * KGROUPS) == 0:
            r, sg = {"q4_0": (4, 16), "q4_k": (4, 16), "q8_0": (2, 16)}[fmt]
            return C(x, r, nt, sg, 1, split=1, kgroups=KGROUPS, prefetch=True)  # a stretch each
        return C(x, 2, nt, 16, 1, split=2, prefetch=True)
    if x == "q8_1":
        return {1: C(x, 1, 1, 4, 1, split=2), 2: C(x, 2, 2, 8, 1, split=2),
                4: C(x, 2, 4, 8, 1, split=2), 8: C(x, 4, 8, 4, 1, split=2)}[nt]
    if fmt == "f16":
        return {1: C(x, 1, 1, 4, 1, split=4), 2: C(x, 2, 2, 4, 2),
                4: C(x, 2, 4, 4, 1, split=4), 8: C(x, 4, 8, 2, 1)}[nt]
    if nt == 1:
        return C(x, 4, 1, 8, 2, split=2)
    return C(x, 4, nt, 2, 2 if nt <= 4 else 1)


def weight_planes(Wq, backend=None):
    """The planes of GGMLWeights `Wq` (Q, D), made once and kept in `Wq._arrays` under the key
    the planes GEMMs of `matmul_q` use; f16 weights as uvec4 (Q) and a one-element f16 D.
    Q4_K's Q is the one `gemv_operands` made, where it did. `backend`: device arrays on it,
    else NumPy arrays."""
    key = ("planes", backend)
    if key not in Wq._arrays:
        if Wq.fmt == "f16":
            raw = np.ascontiguousarray(Wq.data).reshape(-1).view(np.uint32).reshape(-1, 4)
            planes = (raw, np.zeros(1, np.float16))
        else:
            planes = PLANES[Wq.fmt](Wq.data, Wq.M, Wq.K)
        shared = Wq._arrays.get(("gemv", backend)) if Wq.fmt == "q4_k" else None
        arrays = planes if backend is None else tuple(pc.asarray(a, backend=backend)
                                                      for a in planes[shared is not None:])
        Wq._arrays[key] = arrays if shared is None else (shared[0],) + arrays[-1:]
    return Wq._arrays[key]


def gemv_operands(Wq, backend=None):
    """(Q, D) as `gemv_planes` reads GGMLWeights `Wq`: `weight_planes`, but for Q4_K the
    scales as `q4_k_scale_words` (with the planes' Q, one copy shared with the GEMMs' planes
    where both are made), kept in `Wq._arrays`."""
    if Wq.fmt != "q4_k":
        return weight_planes(Wq, backend)
    key = ("gemv", backend)
    if key not in Wq._arrays:
        planes = Wq._arrays.get(("planes", backend))
        Q = planes[0] if planes is not None else q4_k_planes(Wq.data, Wq.M, Wq.K)[0]
        D = q4_k_scale_words(Wq.data, Wq.M, Wq.K)
        if backend is not None:
            Q = Q if planes is not None else pc.asarray(Q, backend=backend)
            D = pc.asarray(D, backend=backend)
        Wq._arrays[key] = (Q, D)
    return Wq._arrays[key]


def matmul_planes_gemv(Wq, X, cfg: PlanesGemvConfig | None = None, *, backend=None,
                       subgroup_size: int = 32, launches: list | None = None):
    """Y = X @ Wq.T through `gemv_planes` for GGMLWeights `Wq` (Q4_0, Q8_0, Q4_K or f16) and X
    (N x K or K, N <= 8; NumPy, or a `pc.Array` whose backend is used and which gives a
    `pc.Array`). With cfg.x == "q8_1" X (f32 or f16) is first quantised by `quantize_q8_1`
    (one more launch); otherwise an f16 device array X is read as halves (x="f16", the
    same products as converting it to f32), and x="f16" with f32 NumPy X rounds it to f16
    first. `launches`
    receives the launch results."""
    fmt, M, K = Wq.fmt, Wq.M, Wq.K
    device = isinstance(X, pc.Array)
    shape = tuple(X.shape)
    if len(shape) not in (1, 2) or shape[-1] != K:
        raise ValueError(f"gemv_planes: X must be N x K or K with K = {K}, got shape {shape}")
    N = 1 if len(shape) == 1 else shape[0]
    cfg = cfg or planes_gemv_config(fmt, N)
    check_config(fmt, cfg.x, cfg.rows, cfg.nt, cfg.subgroups, subgroup_size, cfg.span, cfg.split,
                 cfg.kgroups)
    if not 1 <= N <= MAX_N:
        raise ValueError(f"gemv_planes takes N = 1 ... {MAX_N} vectors, got {N}")
    if K % K_MULTIPLE[fmt]:
        raise ValueError(f"gemv_planes: {fmt} weights need K a multiple of {K_MULTIPLE[fmt]}, "
                         f"got K={K}")
    if X.dtype not in (np.float32, np.float16):
        raise ValueError(f"gemv_planes: X is f32 or f16, got {X.dtype}")
    if cfg.x == "q8_1_shared":
        if K % (K_MULTIPLE[fmt] * cfg.kgroups):
            raise ValueError(f"gemv_planes: kgroups={cfg.kgroups} needs K a multiple of "
                             f"{K_MULTIPLE[fmt] * cfg.kgroups} for {fmt}, got K={K}")
        check_shared(K // cfg.kgroups, cfg.nt)
    if not cfg.x.startswith("q8_1"):
        # the float path: an f16 device array is read as halves (x="f16"); NumPy f16 X is
        # converted on the host (the same values; for f16 weights the f32 kernel was the
        # faster while each conversion of a half cost 13 instructions)
        kind = "f16" if (device and X.dtype == np.float16) or cfg.x == "f16" else "f32"
        if device and X.dtype != X_DTYPES[kind]:
            raise ValueError(f"gemv_planes: x='f16' reads f16 X; convert the device array "
                             f"(X.astype('float16')), got {X.dtype}")
        cfg = dataclasses.replace(cfg, x=kind)
    launches = [] if launches is None else launches
    be = X.backend if device else backend
    Q, D = gemv_operands(Wq, be if device else None)
    src = "f16" if X.dtype == np.float16 else "f32"
    k, grid = cfg.kernel(fmt, subgroup_size, K, src), cfg.grid(M, N)
    kw = {} if device else {"backend": be}
    if device:
        y = pc.zeros((N, M), pc.f32, backend=be)
        new = lambda shape, t: pc.zeros(shape, t, backend=be)              # noqa: E731
        xs = X
    else:
        y = np.zeros((N, M), np.float32)
        new = lambda shape, t: np.zeros(shape, t)                          # noqa: E731
        xs = np.ascontiguousarray(np.asarray(X, X_DTYPES.get(cfg.x)))
    if cfg.x == "q8_1_shared":
        launches.append(k[grid](Q, D, xs.reshape(-1, 4), y, M, N, **kw))
    elif cfg.x != "q8_1":
        x4 = xs.reshape(-1, 4) if cfg.x == "f32" else xs.reshape(-1).view(np.uint32).reshape(-1, 4)
        launches.append(k[grid](Q, D, x4, y, M, N, K, **kw))
    else:
        nb = N * K // 32
        xq, xd, xsum = new((nb * 2, 4), np.uint32), new(nb, np.float32), new(nb, np.int32)
        quant = quantize_q8_1("f16" if X.dtype == np.float16 else "f32", 4, subgroup_size)
        launches.append(quant[quantize_grid(nb, 4, subgroup_size)](
            xs.reshape(-1, 4), xq.reshape(-1), xd, xsum, nb, **kw))
        launches.append(k[grid](Q, D, xq, xd, xsum, y, M, N, K, **kw))
    return y.reshape(M) if len(shape) == 1 else y


def planes_weights(Wq) -> np.ndarray:
    """The M x K weights (f64) that `gemv_planes` multiplies for GGMLWeights `Wq`: Q4_0
    d (q - 8), Q8_0 d q, Q4_K (d sc) q - dmin m (llama.cpp's weights), f16 as is."""
    M, K = Wq.M, Wq.K
    if Wq.fmt == "f16":
        return np.asarray(Wq.data, np.float64)
    if Wq.fmt == "q4_k":
        return dequantize_q4_k(Wq.data, M, K).astype(np.float64)
    Q, D = weight_planes(Wq)
    b = np.ascontiguousarray(Q).view(np.uint8).reshape(M * K // 32, -1)
    if Wq.fmt == "q8_0":
        w = b.view(np.int8).astype(np.float64)
    else:
        w = np.concatenate([b & 15, b >> 4], axis=1).astype(np.float64)
    d = np.asarray(D, np.float16).astype(np.float64).reshape(M * K // 32, -1)
    w = (w - 8.0) * d[:, :1] if Wq.fmt == "q4_0" else w * d[:, :1]
    return w.reshape(M, K)


def planes_gemv_reference(Wq, X=None, q8=None) -> np.ndarray:
    """NumPy twin of what `gemv_planes` computes, in f64 (the kernel differs only by f32
    roundings and the order of its sums): `planes_weights(Wq)` times X (N x K), or, with
    q8 = (q, d, s) from `quantize_q8_1_reference`, times the quantised activations q * d."""
    Wf = planes_weights(Wq)
    if q8 is not None:
        q, dx, _ = q8
        N = q.shape[0]
        Xf = (q.reshape(N, -1, 32).astype(np.float64) * dx[..., None]).reshape(N, Wq.K)
    else:
        Xf = np.asarray(X, np.float64)
    return Xf @ Wf.T
