"""Matrix-vector and small-N kernels for LLM token generation: Y (N x M, f32) = X (N x K, f32)
@ W.T for N = 1 ... 64 vectors, with W (M x K) in one of llama.cpp's weight formats, stored
bit for bit as in a GGUF file (`f16`, `q8_0`, `q4_0`, `q4_k`).

These products are bound by the bandwidth of the weights, so the kernels are built to read
each weight byte once, wide and coalesced, and to do little arithmetic per byte:
- each subgroup owns `rows` rows of W; its lanes walk a row's units (a block, a quarter of a
  Q4_K super-block or 8 halves) one after another, `parts` lanes sharing a unit so that
  consecutive lanes read consecutive weight words and x values, and a subgroup reduction
  (`pc.subgroup.add`) sums the lanes' partial dot products;
- a workgroup owns `nt` vectors of X: each x value loaded feeds the `rows` rows, and each
  weight decoded feeds the `nt` vectors; the grid's x dimension walks the vector tiles of the
  same rows, so workgroups that re-read a weight tile run together and find it in L2;
- weights are dequantised in registers without integer-to-float conversions: a 4- or 8-bit
  value OR-ed into the mantissa of 2^23 reads as 2^23 + q, and one subtraction gives q (minus
  the format's offset) exactly; a block's scale multiplies its dot product once.

`matmul_q` picks the kernel and configuration by shape and format (`choose_kernel`); larger
N go to the cooperative-matrix GEMM of the format (`gemm_q4_0`, `gemm_q8_0`, `gemm_q4_k`). With
`activations="q8_1"`, Q8_0 and Q4_0 weights take the integer path of `pycoop.kernels.gemvq`
instead: X quantised to 8 bits per 32-block, then integer dot products of packed 8-bit lanes.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

import pycoop as pc
from pycoop import f16, f32, u32

from .args import check_int, check_invocations, check_unroll, is_int, real_dtype
from .dequant import dot, fields_as_f32
from .gemm import gemm_q4_0, gemm_q4_0_planes, sum_splits
from .gemm_quant import (_f16_at, _q4_k_scales, gemm_q4_k, gemm_q4_k_planes, gemm_q8_0,
                         gemm_q8_0_planes)
from .gemv_planes import K_MULTIPLE as PLANES_K_MULTIPLE
from .gemv_planes import (KGROUPS, KGROUPS_ABOVE_K, X_KINDS, PlanesGemvConfig,
                          matmul_planes_gemv, planes_gemv_config, weight_planes)
from .gemvq import (FORMATS_Q8_1, check_subgroup_size, gemv_q8_1, quantize_grid, quantize_q8_1,
                    store_row_sums)
from .limits import MAX_INVOCATIONS

# weights per block and bytes per block of each format (llama.cpp's ggml-common.h)
BLOCKS = {"f16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18), "q4_k": (256, 144)}
FORMATS = tuple(BLOCKS)
MAX_SMALL_N = 64                         # above this, the large-N GEMM where the format has one
LARGE_N_GEMMS = {"q4_0": gemm_q4_0, "q8_0": gemm_q8_0, "q4_k": gemm_q4_k}   # decode-function GEMMs
# the planes GEMMs (weights as nibble/byte planes and scales, dequantised into shared memory,
# KHR cooperative matrices; the planes made once by `weight_planes`): the kernels for N >= 2
PLANES_GEMMS = {"q4_0": gemm_q4_0_planes, "q8_0": gemm_q8_0_planes, "q4_k": gemm_q4_k_planes}

U4 = pc.vec(u32, 4)
F4 = pc.vec(f32, 4)


def _check_activations(fn: str, activations, fmt: str | None = None) -> str:
    """`activations` (for `fmt` weights where given), or the error of `fn`."""
    if not isinstance(activations, str) or activations not in ("f32", "q8_1"):
        raise ValueError(f"{fn}: activations is 'f32' (the float path) or 'q8_1' (X quantised "
                         f"to 8 bits, integer dot products), got {activations!r}")
    if activations == "q8_1" and fmt is not None and fmt not in FORMATS_Q8_1 + ("q4_k",):
        raise ValueError(f"{fn}: activations='q8_1' takes {', '.join(FORMATS_Q8_1)} or q4_k "
                         f"weights, not {fmt}; use activations='f32'")
    return activations


def _check_fmt(fn: str, fmt) -> str:
    # a str first: `in BLOCKS` would hash an unhashable fmt (a list) and fail on that
    if not isinstance(fmt, str) or fmt not in BLOCKS:
        raise ValueError(f"{fn}: unknown weight format {fmt!r} (fmt); pycoop's GEMV kernels "
                         f"take {', '.join(FORMATS)}")
    return fmt


# lanes sharing a unit of work by default (a block, a quarter of a Q4_K super-block, 8 halves),
# and the u32 payload words of a unit: sharing puts consecutive lanes on consecutive x values,
# so that a warp's vec4 loads of x touch a few cache lines instead of one per lane, at the
# price of the per-unit decoding (scale, addresses) being done by every lane of the unit
PARTS = {"q4_0": 4, "q8_0": 4, "q4_k": 4, "f16": 1}
WORDS = {"q4_0": 4, "q8_0": 8, "q4_k": 8, "f16": 4}


def _x_per_unit(fmt: str, vec: int) -> int:
    """x values a unit of work covers: a block, a quarter of a Q4_K super-block (64 weights
    with two sub-block scales) or `vec` f16 weights."""
    return {"q8_0": 32, "q4_0": 32, "q4_k": 64}.get(fmt, vec)


def _x_slots(fmt: str, vec: int, P: int) -> list:
    """The vec4 offsets in the unit (plus the lane's part) of the x values a lane multiplies,
    in the order of its weights: per payload word p + P * i it handles, its low nibbles then
    high nibbles (Q4_0: weights 4w.. and 16 + 4w..; Q4_K: sub-blocks 2j and 2j + 1) or its 4
    bytes (Q8_0)."""
    if fmt == "f16":
        return [0, 1] if vec == 8 else [0]
    hi = {"q4_0": 4, "q4_k": 8, "q8_0": None}[fmt]
    return [o for i in range(WORDS[fmt] // P)
            for o in ([P * i] if hi is None else [P * i, hi + P * i])]


def _payload_word(W, base, odd, w):
    """Word w of the payload after the f16 scale of an 18- or 34-byte block that starts at
    word `base` (odd blocks 2 bytes into it, even blocks at its start): a whole word for odd
    blocks, straddling two words for even ones."""
    a, b = W[base + w], W[base + w + 1]
    return pc.select(odd, b, (a >> 16) | (b << 16))


def _q4_0_unit(W, g, words: list, xcols: list) -> list:
    """Nibble words `words` of block g of a Q4_0 matrix (18 bytes: an f16 scale, 16 bytes of
    nibbles; weight l is the low nibble of byte l for l < 16, else the high nibble of byte
    l - 16) times the matching values of each x in `xcols`."""
    base, odd = (g * 9) >> 1, (g & 1) == 1
    d = _f16_at(W[base], odd)
    vals = []
    for w in words:
        q = _payload_word(W, base, odd, w)
        vals += fields_as_f32(q, 8.0, 4, 0) + fields_as_f32(q, 8.0, 4, 4)
    return [d * dot(vals, xs) for xs in xcols]


def _q8_0_unit(W, g, words: list, xcols: list) -> list:
    """Words `words` of the 32 signed bytes of block g of a Q8_0 matrix (34 bytes: an f16
    scale, then the bytes) times the matching values of each x. XOR with 0x80 makes a signed
    byte q the unsigned q + 128."""
    base, odd = (g * 17) >> 1, (g & 1) == 1
    d = _f16_at(W[base], odd)
    vals = []
    for w in words:
        vals += fields_as_f32(_payload_word(W, base, odd, w) ^ 0x80808080, 128.0)
    return [d * dot(vals, xs) for xs in xcols]


def _q4_k_words(W4, sb, j, P: int, part, pick: list) -> list:
    """The nibble words p + P * i (p = part) of quarter j of super-block sb, from uvec4 1 + 2j
    and 2 + 2j of it. With P <= 4 the uvec4 of each word is known and its component is
    ((P * i) % 4) + p; with P = 8 the uvec4 is p // 4 + 2i and the component p % 4. `pick[c]`:
    whether that runtime component offset is c (c >= 1)."""
    out = []
    for i in range(8 // P):
        if P == 8:
            v = W4[sb * 9 + 1 + 2 * j + (part >> 2)]
            first = 0
        else:
            v = W4[sb * 9 + 1 + 2 * j + ((P * i) >> 2)]
            first = (P * i) & 3
        q = v[first]
        for c in range(1, min(P, 4)):                # the component of this lane's word
            q = pc.select(pick[c - 1], v[first + c], q)
        out.append(q)
    return out


def _q4_k_unit(W4, u, row_sb, P: int, part, pick: list, xcols: list, xsums: list) -> list:
    """The nibble words p + P * i of quarter j = u % 4 of super-block u // 4 of a Q4_K row
    (144 bytes = 9 uvec4: f16 d and dmin, 12 bytes of scales, 128 bytes of nibbles; quarter j
    is nibble bytes 32j .. 32j + 31, its low nibbles sub-block 2j and its high nibbles sub-block
    2j + 1, 32 weights each, weight = d * scale * q - dmin * min), times the matching values of
    each x. xsums: per x, the sums of its low- and high-nibble values, which the mins
    multiply."""
    sb, j = row_sb + (u >> 2), u & 3
    h = W4[sb * 9]
    d, dmin = _f16_at(h[0], False), _f16_at(h[0], True)
    sc0, sc1, m0, m1 = _q4_k_scales(h[1], h[2], h[3], j)
    lo, hi = [], []
    for q in _q4_k_words(W4, sb, j, P, part, pick):
        lo += fields_as_f32(q, 0.0, 4, 0)
        hi += fields_as_f32(q, 0.0, 4, 4)
    out = []
    for xs, (s0, s1) in zip(xcols, xsums):
        xl = [x for i in range(0, len(xs), 8) for x in xs[i:i + 4]]
        xh = [x for i in range(0, len(xs), 8) for x in xs[i + 4:i + 8]]
        out.append(d * (sc0 * dot(lo, xl) + sc1 * dot(hi, xh)) - dmin * (m0 * s0 + m1 * s1))
    return out


def _q4_k_xsums(xs: list) -> tuple:
    """(sum of the low-nibble x values, of the high-nibble ones) of a lane's x list."""
    return (_sum([x for i in range(0, len(xs), 8) for x in xs[i:i + 4]]),
            _sum([x for i in range(0, len(xs), 8) for x in xs[i + 4:i + 8]]))


def _f16_unit(W, i, xcols: list, vec: int) -> list:
    """`vec` f16 weights (one uvec4 for 8, else one half) from element i of W times as many
    values of each x."""
    if vec == 1:
        vals = [f32(W[i])]
    else:
        v = W[i]
        vals = [f32(pc.bitcast(v[c], pc.vec(f16, 2))[h]) for c in range(4) for h in range(2)]
    return [dot(vals, xs) for xs in xcols]


def _sum(xs: list):
    s = xs[0]
    for v in xs[1:]:
        s = s + v
    return s


@functools.cache
def gemv(fmt: str, rows: int = 1, nt: int = 1, subgroups: int = 4, subgroup_size: int = 32,
         vec: int = 8, unroll: bool | int | None = None, parts: int | None = None):
    """The kernel Y (N x M, f32) = X (N x K, f32) @ W.T for weights W (M x K) in format `fmt`.

    Each of the `subgroups` subgroups of a workgroup computes `rows` rows of Y for the `nt`
    vectors of the workgroup's tile; the grid is (ceil(N / nt), ceil(M / (rows * subgroups)))
    (`gemv_grid`). Any M and N work (rows and vectors past the edge are clamped on load and not
    stored). Operands (`pack_x`, `GGMLWeights.kernel_array`):
    - W: `q4_0` / `q8_0` the raw blocks as u32 words (the bytes padded to a multiple of 4),
      K a multiple of 32; `q4_k` the raw super-blocks as uvec4, K a multiple of 256; `f16`
      the halves as uvec4 (`vec=8`, K a multiple of 8) or as f16 (`vec=1`, any K);
    - X: f32, as vec4 (`X.reshape(-1, 4)`) except for `f16` with `vec=1`;
    - Y: N x M f32; M, N, K: u32.
    The kernel needs subgroups of `subgroup_size` lanes (a required subgroup size on Vulkan).
    `unroll` is the driver's hint on the lanes' loop over K (`pc.range`): unrolling keeps more
    weight loads in flight per lane. `parts`: lanes sharing a unit (default `PARTS[fmt]`; 1,
    2, 4, or 8 for Q8_0 and Q4_K; lane p of a unit takes its payload words p, p + parts, ...).
    """
    _check_fmt("gemv", fmt)
    for name, v in (("rows", rows), ("nt", nt), ("subgroups", subgroups)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"gemv: {name} must be an int >= 1, got {v!r}")
    if rows * nt > 64:
        raise ValueError(f"gemv: rows x nt = {rows * nt} accumulators per lane; at most 64 "
                         "keep them in registers (lower rows or nt)")
    check_subgroup_size("gemv", subgroup_size)
    check_invocations("gemv", subgroups, subgroup_size)
    check_unroll("gemv", unroll)
    if vec not in (1, 8) or (vec == 1 and fmt != "f16"):
        raise ValueError(f"gemv: vec is 8 (uvec4 loads), or 1 for f16 weights with K not a "
                         f"multiple of 8; got {vec!r} for {fmt}")
    P = PARTS[fmt] if parts is None else parts
    if fmt == "f16" and P != 1 or P not in (1, 2, 4, 8) or P > WORDS[fmt] or P > subgroup_size:
        raise ValueError(f"gemv: parts must be 1, 2, 4 or 8 and at most the {WORDS[fmt]} "
                         f"payload words of a {fmt} unit (1 for f16); got {parts!r}")
    S = subgroup_size
    nx = _x_per_unit(fmt, vec)
    WT = {"q4_0": u32, "q8_0": u32, "q4_k": U4, "f16": U4 if vec == 8 else f16}[fmt]
    XT = f32 if nx == 1 else F4
    slots = _x_slots(fmt, vec, P)

    @pc.kernel(workgroup_size=subgroups * S, subgroup_size=S)
    def gemv(W: pc.ReadBuffer[WT], X: pc.ReadBuffer[XT], Y: pc.WriteBuffer[f32], M: u32, N: u32,
             K: u32):
        lane = pc.subgroup_local_id()
        part = lane % P if P > 1 else u32(0)                     # P lanes share a unit
        words = [part + P * i for i in range(WORDS[fmt] // P)] if fmt in ("q4_0", "q8_0") else []
        row0 = (pc.workgroup_id.y * subgroups + pc.subgroup_id()) * rows
        col0 = pc.workgroup_id.x * nt
        rws = [pc.min(row0 + r, M - 1) for r in range(rows)]     # clamped: loads stay inside
        cols = [pc.min(col0 + c, N - 1) for c in range(nt)]
        units = (K + (nx - 1)) // nx if fmt == "f16" else K // nx
        pick = [(part & 3) == c for c in range(1, min(P, 4))] if fmt == "q4_k" else []
        acc = [[f32(0.0)] * nt for _ in range(rows)]
        for u in pc.range(lane // P, units, S // P, unroll=unroll):
            if nx == 1:
                xcols = [[X[c * K + u]] for c in cols]
            else:
                xcols = [[x[i] for off in slots
                          for x in [X[c * (K // 4) + u * (nx // 4) + off + part]]
                          for i in range(4)] for c in cols]
            xsums = [_q4_k_xsums(xs) for xs in xcols] if fmt == "q4_k" else None
            for r, row in enumerate(rws):
                if fmt == "q4_0":
                    out = _q4_0_unit(W, row * units + u, words, xcols)
                elif fmt == "q8_0":
                    out = _q8_0_unit(W, row * units + u, words, xcols)
                elif fmt == "q4_k":
                    out = _q4_k_unit(W, u, row * (K >> 8), P, part, pick, xcols, xsums)
                else:
                    out = _f16_unit(W, row * units + u, xcols, vec)
                acc[r] = [a + o for a, o in zip(acc[r], out)]
        store_row_sums(Y, acc, lane, row0, col0, M, N)
    return gemv


def gemv_grid(M: int, N: int, rows: int = 1, nt: int = 1, subgroups: int = 4) -> tuple[int, int]:
    """The grid of `gemv(fmt, rows, nt, subgroups)` for an M x K weight matrix and N vectors."""
    M, N, rows, nt, subgroups = (check_int("gemv_grid", name, v) for name, v in (
        ("M", M), ("N", N), ("rows", rows), ("nt", nt), ("subgroups", subgroups)))
    return -(-N // nt), -(-M // (rows * subgroups))


@dataclasses.dataclass(frozen=True)
class GemvConfig:
    """A kernel choice of `choose_kernel`: `kind` is "gemv" (the kernels above, N = 1 ... 64,
    or any N for formats without a large-N GEMM; `rows`, `nt`, `subgroups`, `unroll`,
    `parts` as in `gemv`), "q8_1" (the integer path: `quantize_q8_1` then `gemv_q8_1` with
    these fields, Q8_0 and Q4_0 only), "planes" (`gemm_q4_0_planes`, `gemm_q8_0_planes` or
    `gemm_q4_k_planes` by format on X's and Y's own layouts (`x_rows`), with `tile` = (weight
    rows, vectors, K) per workgroup, `subgroups` x 1 subgroups and `split_k`) or "coopmat"
    (`gemm_q4_0`, `gemm_q8_0` or `gemm_q4_k` by format, with `tile` = (vectors, weight rows,
    K) per workgroup; below 128 vectors it computes with the weights as the A operand,
    `weights_first`) or "gemv_planes" (`pycoop.kernels.gemv_planes` over the weight
    planes, N <= 8, X in f32 or, with activations="q8_1", quantised; `rows`, `nt`,
    `subgroups`, `unroll`, `span`, its blocks per lane and step, `split_k`, the subgroups
    sharing rows, `x`, its activation kind: None for the one `activations` names, or
    "q8_1_shared" to quantise X in the kernel, one launch instead of two, `kgroups`,
    the workgroups sharing a row's K with x="q8_1_shared", and `prefetch`, the next step's
    weights loaded before the current step's products).
    A GemvConfig takes any values (sweeps build shapes and then filter them); `matmul_q`
    checks every field of the one it is given (`check_gemv_config`) before any work."""
    kind: str
    rows: int = 1
    nt: int = 1
    subgroups: int = 4
    unroll: bool | int | None = None
    parts: int | None = None
    tile: tuple[int, int, int] = (128, 128, 32)
    split_k: int = 1
    span: int = 1
    x: str | None = None
    kgroups: int = 1
    prefetch: bool = False


KINDS = ("gemv", "q8_1", "planes", "gemv_planes", "coopmat")


def _check_tile(fn: str, kind: str, tile, subgroups: int,
                arg: str = "config.tile") -> tuple[int, int, int]:
    """The tile of a config of `kind` ("planes" with `subgroups` x 1 subgroups, "coopmat", or
    another, which does not read it) as Python ints, or the error of `fn`: the planes GEMM
    gives each subgroup 16-row matrices and has no edge handling inside its tile, so a tile
    its subgroups do not divide would leave rows or vectors of Y uncomputed (wrong results,
    or an index error while it is built)."""
    parts = {"planes": " (weight rows, vectors, K)", "coopmat": " (vectors, weight rows, K)"}
    if not isinstance(tile, (tuple, list)) or len(tile) != 3:
        raise ValueError(f"{fn}: {arg} is a tuple of 3 ints{parts.get(kind, '')}, got {tile!r}")
    tile = tuple(check_int(fn, f"{arg}[{i}]", v) for i, v in enumerate(tile))
    if kind not in parts:
        return tile
    if tile[2] % 32:
        raise ValueError(f"{fn}: {arg}'s K step must be a multiple of 32 (a block), got "
                         f"{tile}")
    if kind == "coopmat":
        return tile
    BM, BN, _ = tile
    SGN = max(1, BN // 64)                      # subgroups along the vectors (planes_kernel)
    if BN % (16 * SGN):
        shared = f" x {SGN} (above 64 vectors, {SGN} subgroups share them)" if SGN > 1 else ""
        raise ValueError(f"{fn}: {arg}'s vectors must be a multiple of 16{shared}, got "
                         f"{tile}")
    if BM % (16 * subgroups):
        raise ValueError(f"{fn}: {arg}'s weight rows must be a multiple of 16 x "
                         f"config.subgroups = {16 * subgroups}, got {tile}")
    if 32 * subgroups * SGN > MAX_INVOCATIONS:
        raise ValueError(f"{fn}: config.subgroups x {SGN} subgroups of 32 invocations = "
                         f"{32 * subgroups * SGN} per workgroup; Vulkan devices take at most "
                         f"{MAX_INVOCATIONS} (fewer subgroups)")
    return tile


def check_gemv_config(cfg, fn: str = "matmul_q") -> GemvConfig:
    """`cfg` with its fields checked (the errors `fn` raises before any work) and its integers
    as Python ints (NumPy ints are taken; a float or a bool, an int to Python, would fail deep
    inside a kernel builder or be cached as a kernel of its own). Every field is checked,
    whatever the kind: each has a valid default, so a bad one was passed by mistake. What
    needs the weights (the tile and split-K against M and K, `parts` against the format,
    rows x nt) is checked where they are known."""
    if not isinstance(cfg, GemvConfig):
        raise ValueError(f"{fn}: config is a GemvConfig (or None), got {cfg!r}")
    if not isinstance(cfg.kind, str) or cfg.kind not in KINDS:
        raise ValueError(f"{fn}: config.kind is one of {', '.join(map(repr, KINDS))}, got "
                         f"{cfg.kind!r}")
    ints = {name: check_int(fn, f"config.{name}", getattr(cfg, name))
            for name in ("rows", "nt", "subgroups", "split_k", "span", "kgroups")}
    if cfg.parts is not None:
        ints["parts"] = check_int(fn, "config.parts", cfg.parts)
    check_unroll(fn, cfg.unroll, "config.unroll")
    if is_int(cfg.unroll):
        ints["unroll"] = int(cfg.unroll)
    if not isinstance(cfg.prefetch, (bool, np.bool_)):
        raise ValueError(f"{fn}: config.prefetch is True or False, got {cfg.prefetch!r}")
    if cfg.x is not None and (not isinstance(cfg.x, str) or cfg.x not in X_KINDS):
        raise ValueError(f"{fn}: config.x is None or one of {', '.join(map(repr, X_KINDS))}, "
                         f"got {cfg.x!r}")
    tile = _check_tile(fn, cfg.kind, cfg.tile, ints["subgroups"])
    return dataclasses.replace(cfg, **ints, tile=tile, prefetch=bool(cfg.prefetch))


def _fit_subgroups(cfg: GemvConfig, subgroup_size: int) -> GemvConfig:
    """A configuration `choose_kernel` made (tuned for subgroups of 32) for subgroups of
    `subgroup_size`: where its workgroup would pass MAX_INVOCATIONS (16 subgroups of 128),
    half as many subgroups until it fits, the subgroups sharing rows (split) at most all of
    them. The GEMM kinds fix their own invocations."""
    if cfg.kind not in ("gemv", "q8_1", "gemv_planes"):
        return cfg
    while cfg.subgroups * subgroup_size > MAX_INVOCATIONS and cfg.subgroups > 1:
        sg = cfg.subgroups // 2
        cfg = dataclasses.replace(cfg, subgroups=sg, split_k=min(cfg.split_k, sg))
    return cfg


def choose_kernel(fmt: str, N: int, large_n: int = MAX_SMALL_N,
                  activations: str = "f32", M: int | None = None,
                  K: int | None = None) -> GemvConfig:
    """The kernel for N vectors of weights in `fmt`: `gemv_planes` over the weight planes at
    N = 1 (f16, Q4_0, Q8_0, Q4_K; one vector of q8_1 activations
    quantised in the kernel, above K = `KGROUPS_ABOVE_K` by `KGROUPS` workgroups sharing K,
    where K divides into their stretches) and with q8_1 activations up to 8
    vectors, where K is a multiple of the format's block; for N >= 2 with Q4_0, Q8_0 or Q4_K weights whose shape (`M` x `K`, when given) fits, the
    planes GEMM (`planes_config`); otherwise tiles of up to 8 vectors sharing each decoded
    weight for N <= `large_n`, and the decode-function GEMM above that where the format has
    one. Rows per subgroup grow with the tile so that each x value loaded feeds more rows.
    `activations="q8_1"` (Q8_0 and Q4_0): the integer path, one tile of up to 64 vectors
    (the next power of two at or above N) reading each weight block once for all of them,
    with 4 lanes per block at N = 1, 2 for tiles of up to 4 vectors, else 1."""
    _check_fmt("choose_kernel", fmt)
    N = check_int("choose_kernel", "N", N)
    large_n = check_int("choose_kernel", "large_n", large_n)
    _check_activations("choose_kernel", activations, fmt)
    M, K = (None if v is None else check_int("choose_kernel", name, v)
            for name, v in (("M", M), ("K", K)))
    # gemv_planes where it wins (H200 sweeps): N = 1, and N <= 8 with q8_1 activations (Q4_K
    # at N = 1 with f32 X: 26.1 against the GGUF blocks' 34.7 µs at 4096 x 14336; its scale
    # words give gguf's weights exactly, as the GGUF-block kernel does)
    planes = fmt in PLANES_GEMMS and (activations == "q8_1" or N == 1)
    if (planes or (fmt == "f16" and N == 1)) and N <= 8 and (
            K is None or K % PLANES_K_MULTIPLE[fmt] == 0):
        x = activations
        if x == "q8_1" and N == 1 and K is not None and (
                K <= KGROUPS_ABOVE_K or K % (PLANES_K_MULTIPLE[fmt] * KGROUPS) == 0):
            x = "q8_1_shared"          # the quantiser in the kernel: one launch, not two
        p = planes_gemv_config(fmt, N, x, K)
        return GemvConfig("gemv_planes", p.rows, p.nt, p.subgroups, p.unroll, span=p.span,
                          split_k=p.split, x=None if x == activations else x,
                          kgroups=p.kgroups, prefetch=p.prefetch)
    if activations == "q8_1":
        if fmt == "q4_k":
            raise ValueError(f"choose_kernel: activations='q8_1' with q4_k weights takes N <= 8 "
                             f"vectors (gemv_planes), got N={N}")
        return q8_1_config(N)
    if N >= 2 and fmt in PLANES_GEMMS and M is not None and K is not None:
        cfg = planes_config(M, N, K)
        if cfg is not None:
            return cfg
    if N > large_n and fmt in LARGE_N_GEMMS:
        bm = next(t for t in (16, 32, 64, 128) if N <= t or t == 128)    # vectors per tile
        return GemvConfig("coopmat", tile=(bm, 128, 32))
    return gemv_config(fmt, N)


def gemv_config(fmt: str, N: int) -> GemvConfig:
    """The GGUF-block float kernel's configuration (`gemv`) for N vectors: tiles of up to 8
    vectors sharing each decoded weight, 2 rows per subgroup (at N = 1 one row for f16 and 2
    for the quantised formats, whose x values are 7x their weights' bytes: two rows share
    each). `choose_kernel` falls back to it where no other kernel fits."""
    _check_fmt("gemv_config", fmt)
    N = check_int("gemv_config", "N", N)
    if N == 1:
        return GemvConfig("gemv", rows=1 if fmt == "f16" else 2, nt=1)
    return GemvConfig("gemv", rows=2, nt=2 if N == 2 else 4 if N <= 4 else 8)


def q8_1_config(N: int) -> GemvConfig:
    """The GGUF-block integer kernel's configuration (`gemv_q8_1`) for N vectors: one tile of
    up to 64 vectors (the next power of two at or above N), with 4 lanes per block at N = 1,
    2 for tiles of up to 4 vectors, else 1."""
    nt = min(64, 1 << (check_int("q8_1_config", "N", N) - 1).bit_length())
    return GemvConfig("q8_1", rows=2 if nt <= 32 else 1, nt=nt,
                      parts=4 if nt == 1 else 2 if nt <= 4 else 1)


def planes_config(M: int, N: int, K: int) -> GemvConfig | None:
    """The planes GEMM's configuration for an M x K weight matrix and N vectors, or None where
    the shape does not fit (M a multiple of 64, K of 64). The vector side of the tile is the
    smallest of 16, 32, 64, 128 holding N (N is padded to it); 128 weight rows per workgroup
    (64 where M needs it) on 4 x 1 subgroups (2 x 1 for 32 vectors, 2 x 2 for 128); split-K
    into the largest power of two <= 16 that keeps the workgroups within 1,024 (16-vector
    tiles), 512 (32) or 256 (wider), K dividing into whole 64-deep steps. The best of sweeps
    on the H200 (bench/small_n_sweep.py, 2026-11-27: 4096 x 14336 and 14336 x 4096, N = 8 ...
    64)."""
    M, N, K = (check_int("planes_config", name, v) for name, v in (("M", M), ("N", N), ("K", K)))
    bn = next(t for t in (16, 32, 64, 128) if N <= t or t == 128)
    bm = 128 if M % 128 == 0 else 64
    if M % bm or K % 64:
        return None
    sgm = 2 if bn in (32, 128) else bm // 32
    tiles = M // bm * -(-N // bn)
    limit = {16: 1024, 32: 512}.get(bn, 256)
    split = 1
    while split < 16 and tiles * split * 2 <= limit and K % (64 * split * 2) == 0:
        split *= 2
    return GemvConfig("planes", subgroups=sgm, tile=(bm, bn, 64), split_k=split)


@dataclasses.dataclass
class GGMLWeights:
    """An M x K weight matrix in a llama.cpp format: `data` holds its bytes exactly as a GGUF
    file does (rows of blocks along K; `f16` as float16). Made by `weights(...)`.

    `data` is read-only: a copy of a writeable source, the source itself where that is
    read-only and contiguous (a GGUF file's memory map is not copied). The arrays the kernels
    read (`kernel_array`, the planes, device copies) are made from it once, when first needed,
    and kept in `_arrays`. So changing the source array afterwards changes no result: make new
    weights from the changed array."""
    fmt: str
    M: int
    K: int
    data: np.ndarray
    _arrays: dict = dataclasses.field(default_factory=dict, repr=False)

    def __post_init__(self):
        # made by hand, the fields could disagree with the bytes: the kernels would read past
        # them or take them for another shape (a wrong result, no error)
        if self.fmt not in BLOCKS:
            raise ValueError(f"GGMLWeights: fmt must be one of {FORMATS}, got {self.fmt!r}")
        qk, size = BLOCKS[self.fmt]
        if not (is_int(self.M) and is_int(self.K) and self.M >= 1 and self.K >= 1
                and self.K % qk == 0):
            raise ValueError(f"GGMLWeights: M and K are ints >= 1, K a multiple of {qk} "
                             f"({self.fmt}'s block), got M={self.M!r}, K={self.K!r}")
        dtype, cols = (np.float16, self.K) if self.fmt == "f16" else \
            (np.uint8, self.K // qk * size)
        d = self.data
        if not (isinstance(d, np.ndarray) and d.dtype == dtype and d.shape == (self.M, cols)
                and d.flags.c_contiguous):
            raise ValueError(f"GGMLWeights: {self.M} x {self.K} {self.fmt} weights are a "
                             f"contiguous {self.M} x {cols} {np.dtype(dtype).name} array, got "
                             + (f"{d.shape} {d.dtype}" if isinstance(d, np.ndarray) else
                                type(d).__name__)
                             + "; make them with pycoop.kernels.weights(...)")

    @property
    def nbytes(self) -> int:
        return self.M * self.K // BLOCKS[self.fmt][0] * BLOCKS[self.fmt][1]

    def kernel_array(self, backend: str | None = None, vec: int = 8):
        """The weights as the `gemv` kernel reads them (u32 words, uvec4 or f16): a NumPy view
        (no copy, unless the bytes need padding to whole words) or, with `backend`, a device
        array on it, made once and kept."""
        key = (backend, vec)
        if key not in self._arrays:
            raw = np.ascontiguousarray(self.data).reshape(-1).view(np.uint8)
            if self.fmt == "f16":
                a = raw.view(np.float16) if vec == 1 else raw.view(np.uint32).reshape(-1, 4)
            elif self.fmt == "q4_k":
                a = raw.view(np.uint32).reshape(-1, 4)
            else:
                if raw.size % 4:
                    raw = np.concatenate([raw, np.zeros(4 - raw.size % 4, np.uint8)])
                a = raw.view(np.uint32)
            self._arrays[key] = a if backend is None else pc.asarray(a, backend=backend)
        return self._arrays[key]


def weights(W, fmt: str | None = None, K: int | None = None) -> GGMLWeights:
    """Weights for `matmul_q`, without re-packing:
    - a tensor of `gguf.GGUFReader(...).tensors` (its type names the format; 2-D, rows of K);
    - a float16 array (M x K): `f16`;
    - the raw bytes of a quantised matrix (uint8, M x row bytes) with `fmt`, K from the row
      size (or given);
    - GGMLWeights, returned as they are.
    `fmt` and `K`, where given, must agree with what W holds. The weights are a snapshot:
    writeable bytes are copied (a read-only GGUF memory map is not), and the kernels' own
    arrays are made from them once and kept (see `GGMLWeights`): after changing W, make new
    weights."""
    return _weights(W, fmt, K, snapshot=True)


def _weights(W, fmt: str | None, K: int | None, snapshot: bool) -> GGMLWeights:
    """`weights`; `snapshot=False` keeps a writeable source uncopied, for weights only this
    call uses (matmul_q given raw bytes, a stacked matrix made for them) whose kernel arrays
    are all made (planes) or copied (uploads) before the call returns."""
    if fmt is not None:
        _check_fmt("weights", fmt)
    if K is not None:
        K = check_int("weights", "K", K)
    if isinstance(W, GGMLWeights):
        if fmt is not None and fmt != W.fmt:
            raise ValueError(f"weights: these weights are {W.fmt}, not fmt={fmt!r}")
        if K is not None and K != W.K:
            raise ValueError(f"weights: these weights have K = {W.K} columns, not K={K}")
        return W
    if hasattr(W, "tensor_type") and hasattr(W, "data"):          # gguf.ReaderTensor
        kind = getattr(W.tensor_type, "name", None)
        if not isinstance(kind, str):
            raise ValueError(f"weights: W has a tensor_type and data, as a gguf.ReaderTensor, "
                             f"but its tensor_type {W.tensor_type!r} is no "
                             f"gguf.GGMLQuantizationType (it has no name)")
        name = kind.lower()
        if name not in BLOCKS:
            raise ValueError(f"weights: GGUF tensor {W.name!r} is {kind}; pycoop's GEMV "
                             f"kernels take {', '.join(f.upper() for f in FORMATS)}")
        if fmt is not None and fmt != name:
            raise ValueError(f"weights: GGUF tensor {W.name!r} is {name}, not fmt={fmt!r}")
        shape = [int(s) for s in W.shape]                        # GGML order: K first
        if len(shape) != 2 and not (len(shape) > 2 and all(s == 1 for s in shape[2:])):
            raise ValueError(f"weights: GGUF tensor {W.name!r} has shape {shape}: a matrix is "
                             f"2-D")
        if K is not None and K != shape[0]:
            raise ValueError(f"weights: GGUF tensor {W.name!r} has K = {shape[0]} columns, "
                             f"not K={K}")
        return _make(name, shape[1], shape[0], W.data, snapshot)
    a = np.asarray(W)
    if fmt is None:
        if a.dtype != np.float16:
            raise ValueError("weights: pass fmt= for raw quantised bytes (uint8); only float16 "
                             f"arrays are taken without one, got {a.dtype}")
        fmt = "f16"
    if a.ndim != 2:
        raise ValueError(f"weights: a matrix is 2-D (M x K, or M x row bytes), got shape {a.shape}")
    if fmt == "f16":
        if a.dtype != np.float16:
            raise ValueError(f"weights: f16 weights are float16, got {a.dtype}")
        if K is not None and K != a.shape[1]:
            raise ValueError(f"weights: this f16 matrix has K = {a.shape[1]} columns, not K={K}")
        return _make(fmt, a.shape[0], a.shape[1], a, snapshot)
    if a.dtype != np.uint8:
        raise ValueError(f"weights: {fmt} weights are raw bytes (uint8), got {a.dtype}")
    qk, size = BLOCKS[fmt]
    if a.shape[1] % size:
        raise ValueError(f"weights: a {fmt} row is whole {size}-byte blocks; "
                         f"got {a.shape[1]} bytes")
    Kb = a.shape[1] // size * qk
    if K is not None and K != Kb:
        raise ValueError(f"weights: rows of {a.shape[1]} bytes hold K = {Kb} {fmt} weights, "
                         f"not {K}")
    return _make(fmt, a.shape[0], Kb, a, snapshot)


def _make(fmt: str, M: int, K: int, data, snapshot: bool) -> GGMLWeights:
    qk, size = BLOCKS[fmt]
    if M < 1 or K < 1:
        raise ValueError(f"weights: an empty matrix ({M} x {K} {fmt} weights)")
    if K % qk:
        raise ValueError(f"{fmt} weights need K a multiple of {qk} (its block), got K={K}")
    source = np.asarray(data)
    data = np.ascontiguousarray(source)       # the kernels read rows as laid out in memory
    if snapshot and data.flags.writeable and np.may_share_memory(data, source):
        # a snapshot of memory the caller can still change: every array the kernels read
        # (planes, padded words, device copies) is made from these bytes and kept, so a later
        # change of the source must reach none of them rather than some. A read-only source (a
        # GGUF file's memory map) is kept as it is, uncopied.
        data = data.copy()
    elif data.flags.writeable and np.may_share_memory(data, source):
        data = data.view()                  # read-only here, the source stays writeable
    data.flags.writeable = False
    want = M * K // qk * size
    if data.nbytes != want:
        raise ValueError(f"{fmt} weights of {M} x {K} are {want} bytes, got {data.nbytes}")
    if fmt == "f16":
        data = data.reshape(M, K).view(np.float16)
    else:
        data = data.reshape(M, -1).view(np.uint8)
    return GGMLWeights(fmt, M, K, data)


def pack_x(X) -> np.ndarray:
    """X (N x K, or K for one vector) as the f32 the kernels read."""
    return np.ascontiguousarray(np.asarray(X, np.float32))


def _numpy_x(X) -> np.ndarray:
    """A NumPy X for `matmul_q` (anything `np.asarray` reads) as the kernels take it: f16 kept,
    other real numbers as f32, checked before the conversion, which would drop the imaginary
    part of complex values (a warning only), parse strings and make a 0-d X 1-d."""
    a = np.asarray(X)
    if not real_dtype(a):
        what = f"{X!r}" if a.ndim == 0 else f"an array of {a.dtype}"
        raise ValueError(f"matmul_q: X holds real numbers (float16, float32, float64, bfloat16 "
                         f"or integers), got {what}")
    if a.ndim == 0:
        raise ValueError(f"matmul_q: X must be N x K or K, got a scalar {X!r}")
    return np.ascontiguousarray(a if a.dtype == np.float16 else np.asarray(a, np.float32))


def matmul_q(W, X, fmt: str | None = None, *, config: GemvConfig | None = None,
             backend: str | None = None, subgroup_size: int = 32, large_n: int = MAX_SMALL_N,
             activations: str = "f32", deterministic: bool = False,
             launches: list | None = None):
    """Y = X @ W.T for weights W (M x K) in a llama.cpp format (see `weights`: a GGUF tensor,
    f16 array or raw blocks with `fmt`) and X (N x K, or a single vector of K): the result is
    N x M f32 (or M for a vector). X may be a NumPy array or a `pc.Array` (then the result is
    a `pc.Array` on its backend and the weights are uploaded there once). The kernel is
    `choose_kernel(fmt, N, large_n, activations)` unless `config` is given. The shapes and the
    configuration are checked before any work.
    `activations="q8_1"` (Q8_0 and Q4_0 weights) quantises X to 8 bits per 32-block on the
    device and multiplies with integer dot products (`pycoop.kernels.gemvq`: exact integer
    sums, scaled per block; X's quantisation adds an error of at most
    sum_k |w_k| * d_block(k) / 2); "f32" (the default) multiplies the dequantised weights by X
    in f32. A config of kind "q8_1" chooses the integer path too.
    The planes GEMMs (N >= 2, Q4_0/Q8_0/Q4_K) multiply X rounded to f16 with f16 weights
    (f32 sums); their split-K adds partial products with f32 atomics, in an order that may
    change from run to run (results may differ in the last bits): `deterministic=True` sums
    the splits in a second kernel instead (one more launch). `launches`: a list that receives
    the planes path's launch results (device times: `.times_ms`).
    NumPy X (or anything `np.asarray` reads) holds real numbers: float16 (kept), float32,
    float64, bfloat16 or integers (as f32); complex, string, bool and object arrays are
    refused."""
    if config is not None:
        config = check_gemv_config(config, "matmul_q")
    if fmt is not None:
        _check_fmt("matmul_q", fmt)
    large_n = check_int("matmul_q", "large_n", large_n)
    subgroup_size = check_subgroup_size("matmul_q", subgroup_size)
    _check_activations("matmul_q", activations)
    if not isinstance(deterministic, (bool, np.bool_)):
        raise ValueError(f"matmul_q: deterministic is True or False, got {deterministic!r}")
    deterministic = bool(deterministic)
    if launches is not None and not isinstance(launches, list):
        raise ValueError(f"matmul_q: launches is a list the launches are appended to (or "
                         f"None), got {launches!r}")
    Wq = _weights(W, fmt, None, snapshot=False)      # this call's, if made here
    device = isinstance(X, pc.Array)
    if device and backend is not None and backend != X.backend:
        raise ValueError(f"matmul_q: X is on {X.backend}, not {backend}")
    if device and X.dtype not in (np.float32, np.float16):
        raise ValueError(f"matmul_q: a pc.Array X is float32 or float16, got {X.dtype}")
    if device and X.offset * X.dtype.itemsize % 16:
        raise ValueError(f"matmul_q: X is a view {X.offset * X.dtype.itemsize} bytes into its "
                         f"buffer; the kernels read X 16 bytes at a time, so a view of X must "
                         f"start 16-byte aligned: pass an aligned copy "
                         f"(x = pycoop.empty(X.shape, X.dtype); x.copy_from(X))")
    if not device:
        X = _numpy_x(X)
    bk = X.backend if device else backend
    shape = tuple(X.shape)
    vector = len(shape) == 1
    if len(shape) not in (1, 2) or shape[-1] != Wq.K:
        raise ValueError(f"matmul_q: X must be N x K or K with K = {Wq.K} (the weights' "
                         f"columns), got shape {shape}")
    if shape[0] == 0:
        raise ValueError(f"matmul_q: X has no rows (shape {shape}); N >= 1 vectors")
    N = 1 if vector else shape[0]
    _check_activations("matmul_q", activations, Wq.fmt)
    if config is not None and activations == "q8_1" and config.kind not in ("q8_1",
                                                                           "gemv_planes"):
        raise ValueError(f"matmul_q: activations='q8_1' needs a config of kind 'q8_1' or "
                         f"'gemv_planes', got "
                         f"{config.kind!r}")
    cfg = config or _fit_subgroups(choose_kernel(Wq.fmt, N, large_n, activations, Wq.M, Wq.K),
                                   subgroup_size)
    if cfg.kind == "planes":
        return _planes(Wq, X, N, vector, device, bk, cfg, deterministic,
                       [] if launches is None else launches)
    if cfg.kind == "gemv_planes":
        x = activations if cfg.x is None else cfg.x
        if x.startswith("q8_1") != (activations == "q8_1"):
            raise ValueError(f"matmul_q: a gemv_planes config with x={cfg.x!r} takes "
                             f"activations={'q8_1' if x.startswith('q8_1') else 'f32'!r}, got "
                             f"activations={activations!r}")
        p = PlanesGemvConfig(x, cfg.rows, cfg.nt, cfg.subgroups, cfg.span, cfg.unroll,
                             cfg.split_k, cfg.kgroups, cfg.prefetch)
        if deterministic and p.kgroups > 1:
            if config is not None:
                raise ValueError("matmul_q: deterministic=True takes no kgroups (their f32 "
                                 "atomics add in a run-dependent order)")
            p = planes_gemv_config(Wq.fmt, N, "q8_1")     # the quantiser's own launch
        return matmul_planes_gemv(Wq, X, p, backend=bk, subgroup_size=subgroup_size,
                                  launches=launches)
    if cfg.kind == "q8_1":
        if Wq.fmt not in FORMATS_Q8_1:
            raise ValueError(f"matmul_q: a config of kind 'q8_1' takes "
                             f"{', '.join(FORMATS_Q8_1)} weights, not {Wq.fmt}")
        return _matmul_q8_1(Wq, X, N, vector, device, bk, cfg, subgroup_size)
    if cfg.kind == "coopmat":
        if Wq.fmt not in LARGE_N_GEMMS:
            raise ValueError(f"matmul_q: no cooperative-matrix GEMM for {Wq.fmt} weights; "
                             "use GemvConfig('gemv', ...)")
        return _coopmat(Wq, X, N, vector, device, bk, cfg.tile)
    vec = 8 if Wq.fmt != "f16" or Wq.K % 8 == 0 else 1
    k = gemv(Wq.fmt, cfg.rows, cfg.nt, cfg.subgroups, subgroup_size, vec, cfg.unroll, cfg.parts)
    grid = gemv_grid(Wq.M, N, cfg.rows, cfg.nt, cfg.subgroups)
    if device:
        if X.dtype == np.float16:           # the kernel reads f32: widened on the device
            n = N * Wq.K
            xf = pc.empty(n, pc.f32, backend=bk)
            _halves_to_f32[-(-n // 256)](X.reshape(-1), xf, n)
            X = xf
        x = X.reshape(-1) if vec == 1 else X.reshape(-1, 4)
        y = pc.zeros((N, Wq.M), pc.f32, backend=bk)
        k[grid](Wq.kernel_array(bk, vec), x, y, Wq.M, N, Wq.K)
    else:
        x = pack_x(X).reshape(-1) if vec == 1 else pack_x(X).reshape(-1, 4)
        y = np.zeros((N, Wq.M), np.float32)
        k[grid](Wq.kernel_array(None, vec), x, y, Wq.M, N, Wq.K, backend=bk)
    return y.reshape(Wq.M) if vector else y


@pc.kernel(workgroup_size=256)
def _halves_to_f32(X: pc.ReadBuffer[f16], Y: pc.WriteBuffer[f32], n: u32):
    """Y = X widened to f32 (exact), n values; grid ceil(n / 256)."""
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = f32(X[i])


@pc.kernel(workgroup_size=256)
def _floats_to_halves(X: pc.ReadBuffer[f32], Y: pc.WriteBuffer[f16], n: u32):
    """Y = X rounded to f16 (to nearest even, as NumPy's astype), n values; grid
    ceil(n / 256)."""
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = f16(X[i])


def planes_kernel(fmt: str, cfg: GemvConfig, deterministic: bool = False,
                  x_f32: bool = True) -> tuple:
    """(kernel, split-K mode) of `matmul_q`'s planes path for a "planes" config: the planes
    GEMM of `fmt` on X's and Y's own layouts, X f32 (`x_f32`) or f16 rows, split-K summed by
    f32 atomics ("atomic") or, `deterministic`, apart and then by `sum_splits` ("stacked")."""
    if fmt not in PLANES_GEMMS:
        raise ValueError(f"planes_kernel: the planes GEMMs take {', '.join(PLANES_GEMMS)} "
                         f"weights, not fmt={fmt!r}")
    cfg = check_gemv_config(cfg, "planes_kernel")
    if cfg.kind != "planes":
        raise ValueError(f"planes_kernel: config.kind is 'planes', got {cfg.kind!r}")
    BM, BN, BK = cfg.tile
    mode = "atomic" if cfg.split_k > 1 and not deterministic else "stacked"
    return PLANES_GEMMS[fmt](BM, BN, BK, cfg.subgroups, max(1, BN // 64), split_k=cfg.split_k,
                             split_k_mode=mode, x_rows=True, x_f32=x_f32), mode


def _planes(Wq: GGMLWeights, X, N: int, vector: bool, device: bool, bk, cfg: GemvConfig,
            deterministic: bool, launches: list):
    """N >= 2 Q4_0, Q8_0 or Q4_K: the planes GEMM on X's and Y's own layouts (`x_rows`, X read
    where it lies: f16 as is, f32 rounded to f16 by the GEMM as it stages it, `x_f32`),
    split-K summed by f32 atomics into a zeroed Y (or, `deterministic`, by `sum_splits`). The
    weights' planes are made once."""
    if Wq.fmt not in PLANES_GEMMS:
        raise ValueError(f"matmul_q: the planes GEMMs take {', '.join(PLANES_GEMMS)} weights, "
                         f"not {Wq.fmt}")
    BM, BN, BK = cfg.tile
    split = cfg.split_k
    if Wq.M % BM or Wq.K % (BK * split):
        raise ValueError(f"matmul_q: the planes GEMM's tile {cfg.tile} with split_k={split} "
                         f"does not fit M={Wq.M}, K={Wq.K} (M a multiple of the tile's rows, K of "
                         f"its depth x split_k)")
    dtype = X.dtype if device else np.asarray(X).dtype
    x_f32 = dtype != np.float16            # f32 X is rounded to f16 by the GEMM as it stages it
    k, mode = planes_kernel(Wq.fmt, cfg, deterministic, x_f32)
    Np = -(-N // BN) * BN
    grid = (Wq.M // BM, Np // BN) + ((split,) if split > 1 else ())
    stacked = split > 1 and mode == "stacked"
    be = X.backend if device else bk
    Q, D = weight_planes(Wq, be if device else None)     # shared with gemv_planes
    if device:
        if X.dtype not in (np.float32, np.float16):
            raise ValueError(f"matmul_q: X is f32 or f16, got {X.dtype}")
        xk = X.reshape(-1, 4) if x_f32 else X.view(np.uint32).reshape(-1, 4)
        y = pc.zeros((Np, Wq.M), pc.f32, backend=be) if mode == "atomic" else \
            pc.empty((Np, Wq.M), pc.f32, backend=be)
        out = pc.empty((split * Np, Wq.M), pc.f32, backend=be) if stacked else y
        launches.append(k[grid](Q, D, xk, out, Wq.M, N, Wq.K))
    else:
        xk = np.ascontiguousarray(X).reshape(N, Wq.K)
        xk = xk.reshape(-1, 4) if x_f32 else xk.view(np.uint32).reshape(-1, 4)
        y = np.zeros((Np, Wq.M), np.float32)
        out = np.empty((split * Np, Wq.M), np.float32) if stacked else y
        launches.append(k[grid](Q, D, xk, out, Wq.M, N, Wq.K, backend=bk))
    if stacked:
        n4 = Np * Wq.M // 4
        launches.append(sum_splits(split)[-(-n4 // 256)](out.reshape(-1, 4), y.reshape(-1, 4), n4,
                                                         **({} if device else {"backend": bk})))
    return y[0] if vector else y[:N]


def coopmat_kernel(fmt: str, tile: tuple[int, int, int]):
    """The kernel of `matmul_q`'s "coopmat" configs: the decode-function GEMM of `fmt` with
    `tile` = (vectors, weight rows, K) per workgroup, the weights as the A operand below 128
    vectors."""
    if fmt not in LARGE_N_GEMMS:
        raise ValueError(f"coopmat_kernel: the decode-function GEMMs take "
                         f"{', '.join(LARGE_N_GEMMS)} weights, not fmt={fmt!r}")
    bm, bn, bk = _check_tile("coopmat_kernel", "coopmat", tile, 1, "tile")
    return LARGE_N_GEMMS[fmt](bm, bn, bk, 256, weights_first=bm < 128)


def _coopmat(Wq: GGMLWeights, X, N: int, vector: bool, device: bool, bk, tile):
    """N > 64 Q4_0, Q8_0 or Q4_K: the workgroup-scope cooperative-matrix GEMM decoding the
    blocks while loading (NV cooperative matrices 2 on Vulkan). Its activations are f16: a
    device f32 X is rounded to f16 on the device (`_floats_to_halves`)."""
    bm, bn, bk_ = tile
    k = coopmat_kernel(Wq.fmt, tile)
    grid = (-(-N // bm), -(-Wq.M // bn))
    if device:
        x = X                       # f16 or f32 (matmul_q checks)
        if X.dtype == np.float32:
            n = N * Wq.K
            x = pc.empty(n, pc.f16, backend=bk)
            _floats_to_halves[-(-n // 256)](X.reshape(-1), x, n)
        x = x.reshape(N, Wq.K)
        y = pc.zeros((N, Wq.M), pc.f32, backend=bk)
        if ("blocks", bk) not in Wq._arrays:
            Wq._arrays["blocks", bk] = pc.asarray(Wq.data.reshape(-1), backend=bk)
        k[grid](x, Wq._arrays["blocks", bk], y, N, Wq.M, Wq.K)
    else:
        y = np.zeros((N, Wq.M), np.float32)
        k[grid](np.asarray(X, np.float16).reshape(N, Wq.K), Wq.data, y, N, Wq.M, Wq.K,
                backend=bk)
    return y.reshape(Wq.M) if vector else y


def _matmul_q8_1(Wq: GGMLWeights, X, N: int, vector: bool, device: bool, bk, cfg: GemvConfig,
                 subgroup_size: int):
    """The integer path: X (f32 or f16) quantised by `quantize_q8_1`, then `gemv_q8_1`: two
    launches, on X's backend for a device X (the quantised activations stay there), else on
    `bk` as any NumPy launch."""
    P = 4 if cfg.parts is None else cfg.parts
    k = gemv_q8_1(Wq.fmt, cfg.rows, cfg.nt, cfg.subgroups, subgroup_size, P, cfg.unroll)
    quant = quantize_q8_1("f16" if X.dtype == np.float16 else "f32", 4, subgroup_size)
    nb = N * Wq.K // 32
    qshape = (nb * 2, 4) if P == 1 else (nb * 8,)
    qgrid = quantize_grid(nb, 4, subgroup_size)
    grid = gemv_grid(Wq.M, N, cfg.rows, cfg.nt, cfg.subgroups)
    if device:
        if X.dtype not in (np.float32, np.float16):
            raise ValueError(f"matmul_q: activations='q8_1' takes f32 or f16 X, got {X.dtype}")
        be = X.backend
        q, d = pc.zeros(qshape, pc.u32, backend=be), pc.zeros(nb, pc.f32, backend=be)
        s, y = pc.zeros(nb, pc.i32, backend=be), pc.zeros((N, Wq.M), pc.f32, backend=be)
        quant[qgrid](X.reshape(-1, 4), q, d, s, nb)
        k[grid](Wq.kernel_array(be), q, d, s, y, Wq.M, N, Wq.K)
    else:
        a = np.asarray(X)
        x = np.ascontiguousarray(a if a.dtype == np.float16 else a.astype(np.float32))
        q, d = np.zeros(qshape, np.uint32), np.zeros(nb, np.float32)
        s, y = np.zeros(nb, np.int32), np.zeros((N, Wq.M), np.float32)
        quant[qgrid](x.reshape(-1, 4), q, d, s, nb, backend=bk)
        k[grid](Wq.kernel_array(None), q, d, s, y, Wq.M, N, Wq.K, backend=bk)
    return y.reshape(Wq.M) if vector else y
