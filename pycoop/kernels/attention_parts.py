"""What the attention kernels share: the constants of the online softmax, its per-element
and reduction functions (called per element by the implementation, with the element's row r
and column c), and the row layout of one head."""
from __future__ import annotations

import numpy as np

import pycoop as pc
from pycoop import f16, f32, u32
from pycoop.codegen.float_modes import FP_MODES

from .args import is_int

# "minus infinity" for the running maxima: finite, so exp(m_old - m_new) stays 0 or 1 rather
# than NaN when a whole block of a row is masked to -inf; a power of two, so that its product
# with exp2's factor k is exact and fma(m, k, -(m * k)) is exactly 0 (with -1e30 it left the
# product's rounding error, about 1e21, whose exp2 is inf: NaN rows)
NEG_BIG = -2.0 ** 99
# Base e multiplies no maximum by a factor, so it starts from the lowest finite f32: a row
# whose every scaled score lies below -2^99 (a large scale) still finds its maximum (from
# NEG_BIG it stayed there and every exponential underflowed: a NaN row)
F32_LOWEST = float(-np.finfo(np.float32).max)


def start_max(exp2: bool) -> float:
    """The running maxima's starting value in base 2 (NEG_BIG) or base e (F32_LOWEST)."""
    return NEG_BIG if exp2 else F32_LOWEST
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
ELEMENT = {"f16": f16, "bf16": pc.bf16}      # the input dtypes
OUT = {"f16": f16, "f32": f32}               # the output dtypes
HEAD_DIMS = (64, 80, 96, 112, 128, 256)     # the attention kernels' (the merge takes them all)


# The largest query or key block of the attention kernels: a tile is held in registers or
# shared memory by one workgroup (the kernels use 16 ... 256)
MAX_TILE = 512


def check_tile(name: str, head_dim: int, Bc: int, dtype: str, out: str,
               fp: str = "exact") -> None:
    """The errors every prefill kernel gives for its head dim, key block, input and output
    types and floating-point mode before anything is traced."""
    if fp not in FP_MODES:
        raise ValueError(f"{name}: fp must be one of {FP_MODES}, got {fp!r}")
    if not is_int(head_dim) or head_dim not in HEAD_DIMS:   # (64.0 == 64: not an int)
        raise ValueError(f"{name}: head_dim must be one of {HEAD_DIMS}, got {head_dim!r}")
    if not is_int(Bc) or Bc < 16 or Bc % 16 or Bc > MAX_TILE:
        raise ValueError(f"{name}: the key block Bc must be a multiple of 16 of at most "
                         f"{MAX_TILE}, got {Bc!r}")
    if dtype not in ELEMENT:
        raise ValueError(f"{name}: dtype must be 'f16' or 'bf16', got {dtype!r}")
    if out not in OUT:
        raise ValueError(f"{name}: out must be 'f16' or 'f32', got {out!r}")


def heavy_first_heads(head_dim: int) -> int:
    """How many heads a group of causal prefill tiles spans (see heavy_first): 1024 / head_dim
    (16 at head dim 64, 8 at 128, 4 at 256), so that a group's K and V take the same bytes at
    every head dim. On the H200 (2026-11-28, 4 x 32 heads, 4096 queries and keys,
    bench/prefill_parts.py) head dim 64 ran at 221 TFLOP/s in groups of 16 heads against 215
    in groups of 8 (198 of 4, 220 of 32); head dim 128 at 193 in groups of 8 against 194 of
    4, 185 of 16 and 178 of 32."""
    return max(1, 1024 // head_dim)


@pc.func
def heavy_first(x, y, tiles, heads, group_heads: int):
    """The (query tile, head) a causal prefill workgroup takes, from its workgroup id (x, y)
    in a grid of (tiles, heads): the tiles of each group of `group_heads` heads in the
    order of their work, the last tile (which sees every key) first. Workgroups start in the
    order of their linear id, so the short tiles fill the GPU's last wave instead of the
    long ones running alone at the end (list scheduling's longest-first order); grouping the
    heads keeps the K/V blocks the running workgroups read few enough for the L2 cache. A
    simulation of list scheduling (4 x 32 heads of 32 tiles, 132 or 264 workgroups at once)
    puts the causal run at 0.515-0.53 of the non-causal one's time in this order, 0.53-0.56
    in grid order; for 1 x 32 heads, 0.51-0.53 against 0.59-0.69 (the H100: 1.41x faster at
    head dim 64 with 128 invocations, 1.11x at 128; docs/kernels.md)."""
    i = y * tiles + x                                     # the linear workgroup id
    group = i // (group_heads * tiles)
    first = group * group_heads
    n = pc.min(u32(group_heads), heads - first)           # the last group may be smaller
    r = i - first * tiles
    return tiles - 1 - r // n, first + r % n


def tile_and_head(causal: bool, head_dim: int):
    """(query tile, head) of this prefill workgroup in a grid of (tiles, heads): causal
    heaviest first, else the grid's own."""
    if causal:
        return heavy_first(pc.workgroup_id.x, pc.workgroup_id.y, pc.num_workgroups.x,
                           pc.num_workgroups.y, heavy_first_heads(head_dim))
    return pc.workgroup_id.x, pc.workgroup_id.y


def larger(r, c, e, x):
    return pc.max(e, x)


def exp_minus(r, c, e, m):
    return pc.exp(e - m)


def exp2_scaled(r, c, e, m, k):
    """2^(k·(e - m)) as one fused multiply-add and an exp2: e and m raw scores, k the
    scale times log2(e)."""
    return pc.exp2(pc.fma(e, k, -(m * k)))


def divide(r, c, e, d):
    return e / d


def log_sum_exp(r, c, m, l):
    return m + pc.log(l)


def log2_sum_exp2(r, c, m, l):
    """The natural log-sum-exp from maxima and sums kept in base 2."""
    return (m + pc.log2(l)) * f32(LN2)


def smear(a, b):
    """Row reduction that copies a row's (equal) values to a matrix of another width."""
    return a


def in_sequence(r, c, s, k0, kend):
    """The score, or -inf for a key past the end of the sequence (read as zeros)."""
    return pc.select(k0 + c < kend, s, f32(float("-inf")))


def causal_score(r, c, s, k0, kend, q0):
    """As `in_sequence`, and -inf for a key after the query (query i sees keys 0..i)."""
    return pc.select(k0 + c <= q0 + r, in_sequence(r, c, s, k0, kend), f32(float("-inf")))


def rows_layout(n_before, n, D):
    """A 2-D layout over the rows of one head (n rows after n_before rows of the heads
    before it, D columns): zeros past the head's last row, stores discarded there."""
    return pc.nv.tensor_layout(2, clamp="constant").dimension(n_before + n, D)
