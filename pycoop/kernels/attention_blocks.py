"""The online softmax over blocks of keys, shared by the flash-attention kernels of
`attention` (the prefill and the cooperative-matrix decode): the matrix types of a tile, the
per-block step and the loops over the blocks.

For each block of Bc keys: the scores S = Q·Kᵀ (`block_scores`; Kᵀ read by strided loads, or
through a transposing tensor view where the block may pass the sequence's end: `load_kv`),
the running row maxima m (`pc.nv.reduce`) and sums l, P = exp(S - m) (`pc.nv.per_element`),
and O = O·exp(m_old - m) + P·V with P converted from the f32 accumulator to an operand
(`pc.nv.convert`): `attend`.

How it is computed (`Softmax`): `exp2` computes the exponentials as 2^(s·k - m·k), one
multiply-add and an exp2, with k = scale · log2(e) (Q is used as loaded, the maxima kept in
raw scores); `lazy_sum` keeps the row sums as a Br x Bc matrix of per-column partial sums (one
multiply-add per element per block, one row reduction at the end) instead of a product with a
matrix of ones on every block; `prefetch` loads the next key block's K and V before the current
block's softmax; `row_width` holds the row maxima and sums as Br x row_width matrices instead
of Br x Bc (fewer registers, fewer rescale exponentials, a narrower ones product). Without a
`Softmax` the kernels use `tuned_softmax`: exp2 and a row state 32 columns wide, the fastest on
the H100.
"""
from __future__ import annotations

import functools
import numbers
from typing import NamedTuple

import numpy as np

import pycoop as pc
from pycoop import f16, f32

from .args import is_int
from .attention_parts import exp2_scaled, exp_minus, larger, smear


class Softmax(NamedTuple):
    """How the online softmax is computed (every choice gives the same result up to roundings:
    P is rounded to f16 after exponentials computed in different ways, so one of its rounding
    steps can differ): see the module docstring. The kernels' default (`softmax=None`) is
    `tuned_softmax`."""
    exp2: bool = False
    lazy_sum: bool = False
    prefetch: bool = False
    row_width: int = 0       # columns of the row maxima and sums matrices (0: Bc)


# The row state of the tuned default is this many columns wide (or Bc, where narrower)
TUNED_ROW_WIDTH = 32
# The scales base 2 takes (and the vector decode, which is always base 2): beyond them the
# products with scale · log2(e) (the starting maximum -2^99, the queries, the mask / scale)
# overflow f32 and rows come out NaN; base e keeps the scaled scores and takes any scale
EXP2_SCALES = (2.0 ** -24, 2.0 ** 24)


def tuned_softmax(Bc: int, scale: float | None = None) -> Softmax:
    """The softmax the kernels use when none is given: exponentials in base 2 and the row
    maxima and sums 32 columns wide. On the H100 (bench/attention_gpu.py, 2026-11-27) it ran
    the 4 x 32 x 4096 prefill at 193 TFLOP/s at head dim 128 against 134 for `Softmax()` (184
    against 124 at head dim 64; causal 170 against 147). Base 2 keeps the maxima in raw
    scores, which needs scale > 0: with a `scale` of 0 or below, or outside `EXP2_SCALES`,
    it is base e."""
    if not is_int(Bc) or Bc < 16 or Bc % 16:
        raise ValueError(f"tuned_softmax: Bc (the key block) must be a multiple of 16, got "
                         f"{Bc!r}")
    if scale is not None and (not isinstance(scale, numbers.Real) or isinstance(scale, bool)):
        raise ValueError(f"tuned_softmax: scale must be a number or None, got {scale!r}")
    base2 = scale is None or EXP2_SCALES[0] <= scale <= EXP2_SCALES[1]
    return Softmax(exp2=base2, row_width=min(TUNED_ROW_WIDTH, int(Bc)))


def as_softmax(name: str, sm) -> Softmax | None:
    """`sm` as a Softmax (a tuple of its fields is read as one), or None; anything else (a
    dict, a string, a bool) is refused rather than read field by field."""
    if sm is None:
        return sm
    if not isinstance(sm, tuple) or len(sm) > len(Softmax._fields):
        raise ValueError(f"{name}: softmax must be a pycoop.kernels.Softmax or None, got "
                         f"{sm!r} (e.g. Softmax(exp2=True, row_width=32))")
    sm = Softmax(*sm)
    for field in ("exp2", "lazy_sum", "prefetch"):     # 'no' would read as true
        v = getattr(sm, field)
        if not (isinstance(v, (bool, np.bool_)) or isinstance(v, numbers.Integral)
                and v in (0, 1)):
            raise ValueError(f"{name}: Softmax.{field} must be True or False, got {v!r}")
    w = sm.row_width
    if not isinstance(w, numbers.Integral) or isinstance(w, (bool, np.bool_)):
        raise ValueError(f"{name}: Softmax.row_width must be an int (0: Bc), got {w!r}")
    return sm._replace(exp2=bool(sm.exp2), lazy_sum=bool(sm.lazy_sum),
                       prefetch=bool(sm.prefetch), row_width=int(w))


def check_softmax(name: str, sm: Softmax | None, Bc: int) -> Softmax:
    sm = as_softmax(name, sm)
    sm = tuned_softmax(Bc) if sm is None else sm
    w = sm.row_width
    if not isinstance(w, int) or w < 0 or (w and (w % 16 or w > Bc)):
        raise ValueError(f"{name}: Softmax.row_width must be 0 (= Bc) or a multiple of 16 of "
                         f"at most Bc={Bc}, got {w!r}")
    if sm.lazy_sum and w not in (0, Bc):
        raise ValueError(f"{name}: Softmax.lazy_sum keeps per-column sums of the Bc={Bc} "
                         f"columns, so it needs row_width 0 or Bc, got {w}")
    return sm._replace(row_width=w or Bc)


class Types(NamedTuple):
    """The matrix types of an Br-row attention tile (W: the row-state width)."""
    Q: object      # Br x D operand A (the queries as loaded)
    Kt: object     # D x Bc operand B
    V: object      # Bc x D operand B
    P: object      # Br x Bc operand A
    S: object      # Br x Bc f32 accumulator: scores, probabilities
    O: object      # Br x D f32 accumulator
    Ones: object   # Bc x W operand B (all ones: P @ Ones = the row sums of P in each column)
    Mask: object   # Br x Bc f16 accumulator (a block of the mask)
    Row: object    # Br x W f32 accumulator: row maxima and sums (each row's value in every column)


@functools.cache
def block_types(el, rows: int, D: int, Bc: int, scope: str = "workgroup", W: int = 0) -> Types:
    sc = pc.Workgroup if scope == "workgroup" else pc.Subgroup
    W = W or Bc

    def mat(t, r, c, use):
        return pc.coopmat[t, sc, r, c, use]
    return Types(mat(el, rows, D, pc.UseA), mat(el, D, Bc, pc.UseB), mat(el, Bc, D, pc.UseB),
                  mat(el, rows, Bc, pc.UseA), mat(f32, rows, Bc, pc.Accumulator),
                  mat(f32, rows, D, pc.Accumulator), mat(el, Bc, W, pc.UseB),
                  mat(f16, rows, Bc, pc.Accumulator),
                  mat(f32, rows, W, pc.Accumulator))


def widen(x, To):
    """A per-row value held in every column of a Br x W matrix as a Br x N matrix `To`."""
    return x if x.type == To else pc.nv.reduce(x, "row", smear, result_type=To)


def by_row(x, T: Types):
    """A per-row value of the row state as a Br x D matrix."""
    return widen(x, T.O)


@pc.func
def load_q(T: Types, Q, layout, row, rows: int, D: int, whole):
    """The prefill's query tile of `rows` rows from `row` of Q (rows of `layout`), loaded once
    and held for the whole loop: a tile wholly inside its head (`whole`) by a strided load,
    the head's last, partial one through the layout (which clamps). A function of its own so
    that bench/prefill_parts.py can time other ways."""
    if whole:
        q = T.Q.load(Q, row * D, D, "row_major")
    else:
        q = pc.nv.load_tensor(Q, layout.slice(row, rows, 0, D), T.Q)
    return q


def store_lse(LSE, tile, lse) -> None:
    """The log-sum-exp of the tile's rows (`lse`, the row state: every column of a row holds
    its value) stored through `tile`, a layout one column wide: the other columns fall
    outside it. A function of its own so that bench/prefill_parts.py can time the prefill
    without it."""
    pc.nv.store_tensor(LSE, tile, lse)


def block_scores(q, kt, T: Types, scale, sm: Softmax, mask=None):
    """S = Q Kᵀ of the query tile as loaded, times scale in f32 (with exp2 raw: the scale
    goes into the exponentials' multiply-add), plus the mask block `mask` (f32) if any. Q is
    never multiplied by the scale before the product: Q · scale rounded to f16 made the
    scores' error grow with their size (an output error of 7.7e-3 with inputs of standard
    deviation 4 at head dim 128, where scaling the f32 scores gives 2.8e-4). With exp2 the
    mask, in raw units (divided by the scale, which is > 0 there), is the product's
    accumulator: no pass over the scores adds it."""
    if sm.exp2:
        return pc.mul_add(q, kt, T.S.fill(0.0) if mask is None else mask * (f32(1.0) / scale))
    s = pc.mul_add(q, kt, T.S.fill(0.0)) * scale
    return s if mask is None else s + mask


def attend(T: Types, sm: Softmax, k, m, l, o, s, v):
    """One key block of the online softmax: scores s (masked; scaled, or raw with exp2 and
    k = scale · log2(e)) and values v update the row maxima m, sums l and unnormalised
    output o."""
    m_new = pc.nv.per_element(m, larger, pc.nv.reduce(s, "row", "max", result_type=T.Row))
    m_s = widen(m_new, T.S)                  # as wide as the scores (a narrow row state)
    if sm.exp2:
        pf = pc.nv.per_element(s, exp2_scaled, m_s, k)
        alpha = pc.nv.per_element(m, exp2_scaled, m_new, k)     # rescales what came before
    else:
        pf = pc.nv.per_element(s, exp_minus, m_s)
        alpha = pc.nv.per_element(m, exp_minus, m_new)
    p = pc.nv.convert(pf, T.P)
    if sm.lazy_sum:
        # per-column partial sums, reduced once at the end (`finish`)
        l = l * alpha + pf
    else:
        # the row sums by a product with ones, on the tensor cores, of the rounded P that
        # multiplies V (as llama.cpp does)
        l = pc.mul_add(p, T.Ones.fill(1.0), l * alpha)
    o = pc.mul_add(p, v, o * by_row(alpha, T))
    return m_new, l, o


def finish(m, l, sm: Softmax, k):
    """(maxima, row sums) in every column at the end of the loop: the lazy partial sums
    reduced; with exp2 the maxima in base 2 (raw maxima times k = scale · log2(e))."""
    return (m * k if sm.exp2 else m), (pc.nv.reduce(l, "row", "add") if sm.lazy_sum else l)


TRANSPOSE = (1, 0)


def load_kv(T: Types, K, V, layout, kt_view, row, Bc: int, D: int, strided: bool = False):
    """Kᵀ (D x Bc) and V (Bc x D) of the key block starting at `row` of K and V, read
    through `layout` (rows past the keys clamped), or with `strided` by strided loads
    (OpCooperativeMatrixLoadKHR: no clamping, so only for blocks wholly inside K and V, and
    K and V must start 16-byte aligned). On the H100 the strided loads made the prefill 20 %
    faster (d64: 252 against 210 TFLOP/s; bench/results/2026-11-28-h100-strided-loads.md)."""
    if strided:
        return T.Kt.load(K, row * D, D, "col_major"), T.V.load(V, row * D, D, "row_major")
    kv = layout.slice(row, Bc, 0, D)
    return pc.nv.load_tensor(K, kv, T.Kt, view=kt_view), pc.nv.load_tensor(V, kv, T.V)


def kv_loaders(T: Types, K, V, layout, row0, Bc: int, D: int):
    """(load, load_inside): k0 -> (Kᵀ, V) of the key block at row row0 + k0 of K and V (rows
    of `layout`), through the layout (any block) or by strided loads (a block wholly inside
    K and V): see `load_kv`."""
    view = pc.nv.tensor_view(2, False, TRANSPOSE)          # a Bc x D block of K as D x Bc
    return (lambda k0: load_kv(T, K, V, layout, view, row0 + k0, Bc, D),
            lambda k0: load_kv(T, K, V, layout, view, row0 + k0, Bc, D, True))


def key_blocks(T: Types, sm: Softmax, k, m, l, o, k_begin, k_end, Bc: int, load, scores,
                live=None):
    """The online softmax over the key blocks k_begin, k_begin + Bc, ... < k_end: load(k0)
    gives (Kᵀ, V) of a block, scores(k0, kt) its scaled, masked scores. With `prefetch` the
    next block's K and V are loaded before this block's softmax (the last iteration loads its
    own block again, so no load leaves the loop's blocks). `live(k0)` (a uniform bool; None: always
    true) says whether a block adds anything: without prefetch the others are skipped."""
    if sm.prefetch:
        return _blocks_prefetched(T, sm, k, m, l, o, k_begin, k_end, Bc, load, scores)
    return _blocks(T, sm, k, m, l, o, k_begin, k_end, Bc, load, scores, live)


@pc.func
def _blocks(T, sm, k, m, l, o, k_begin, k_end, Bc: int, load, scores, live=None):
    for k0 in pc.range(k_begin, k_end, Bc):
        if live is None or live(k0):        # live(k0) false: the block adds nothing
            kt, v = load(k0)
            m, l, o = attend(T, sm, k, m, l, o, scores(k0, kt), v)
    return m, l, o


@pc.func
def _blocks_prefetched(T, sm, k, m, l, o, k_begin, k_end, Bc: int, load, scores):
    if k_begin < k_end:                 # (an empty loop loads nothing)
        last = k_begin + (k_end - k_begin - 1) // Bc * Bc
        kt, v = load(k_begin)
        for k0 in pc.range(k_begin, k_end, Bc):
            s = scores(k0, kt)
            v_now = v
            kt, v = load(pc.min(k0 + Bc, last))
            m, l, o = attend(T, sm, k, m, l, o, s, v_now)
    return m, l, o
