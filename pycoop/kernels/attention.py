"""Flash attention forward with SPV_NV_cooperative_matrix2 (workgroup- or subgroup-scope matrices).

softmax(Q Kᵀ · scale + mask) V for Q of shape (batch, heads, queries, head_dim) and K, V of
shape (batch, kv_heads, keys, head_dim): f16 or bf16 inputs, f32 accumulation, grouped-query
attention (each K/V head serves heads / kv_heads consecutive query heads).

Both kernels walk the keys in blocks of Bc with the online softmax of `attention_blocks`
(`Softmax` chooses how). A 2-D tensor layout per head addresses its rows and ends at its last
row: the Constant clamp reads zeros past the end of a sequence (and -inf from the mask), and
the stores discard the rows past it, so any sequence length works without padding; the blocks
wholly inside the sequence are read by strided loads instead.

- `attention_prefill(...)`: one workgroup per Br queries of one head; the grid is
  (ceil(queries / Br), batch · heads). At workgroup scope the whole workgroup holds one Br-row
  tile; at subgroup scope each subgroup holds its own rows (Br / subgroups of them) and does
  its row maxima and sums within the subgroup.
- `attention_decode(...)` + `attention_merge(...)`: few queries against a long KV cache.
  The G = heads / kv_heads query heads sharing a K/V head are packed into the rows of one
  matrix (they are consecutive rows of Q), the keys are split into chunks, one workgroup (or,
  at subgroup scope, one subgroup) per (chunk, K/V head) writes an unnormalised partial
  output with its row maxima and sums, and the merge kernel combines the chunks: that is what
  spreads a memory-bound decode over the whole GPU.
- `attention(...)`: checks the shapes and launches either path; `attention_reference(...)`:
  the NumPy result.
"""
from __future__ import annotations

import functools
import numbers
from typing import NamedTuple

import numpy as np

import pycoop as pc
from pycoop import f16, f32, u32
from pycoop.codegen.float_modes import FP_MODES
from pycoop.runtime import capturing
from pycoop.runtime.backend import vulkan_missing

from . import attention_blocks as online
from .attention_blocks import EXP2_SCALES, Softmax, tuned_softmax
from .attention_decode import (DECODE_MERGES, MAX_ROWS, MERGE_INVOCATIONS, VECTOR_HEAD_DIMS,
                               WIDTHS, REDUCES, DecodeConfig,
                               attention_decode_vector, attention_merge, check_merge_columns,
                               chunk_of, default_lanes,
                               default_splits, default_subgroups, fits_shared, streams_of)
from .attention_mask import MASKED, NEEDED, mask_block_kinds
from .args import check_bool, check_int, is_int
from .attention_parts import (ELEMENT, HEAD_DIMS, LOG2E, MAX_TILE, causal_score,
                              check_tile, divide, in_sequence, log2_sum_exp2, log_sum_exp,
                              rows_layout, start_max, tile_and_head)
from .attention_staged import attention_prefill_staged
from .limits import MAX_INVOCATIONS, SHARED_BYTES, SMS

SCOPES = ("workgroup", "subgroup", "staged")
PREFILL_MIN_CHUNK = 512         # keys: the shortest chunk the default prefill splits give
# subgroup-scope kernels are compiled for subgroups of 32 invocations (NVIDIA's size)
SUBGROUP = 32
_NUMPY_OUT = {"f16": np.float16, "f32": np.float32}
F16_MAX = float(np.finfo(np.float16).max)


def prefill_invocations(head_dim: int, causal: bool, scope: str, Br: int, Bc: int) -> int:
    """The invocations of a prefill workgroup where `attention` is given none: 2 Br at staged
    scope (16 query rows per subgroup); 128 at workgroup scope for Br <= 128, Bc <= 64 and
    head dim 64; else 256. On the H100 (bench/prefill_parts.py, 2026-11-27) the head-dim-64
    prefill ran at 208-212 TFLOP/s with 128 x 64 tiles of 128 invocations against 180-183
    with 256 (128 x 32: 182 against 159; 64 x 64: 171 against 71); with 128 invocations
    128 x 128 tiles ran at 55 against 193, and at head dim 128 they spill (49 against 192).
    Causal tiles took 256 until they ran heaviest first (`heavy_first`): in grid order the
    128-invocation kernel, two workgroups to an SM, ended on its long tiles (2026-11-28,
    1 x 32 heads over 8 of 4096: 151 against 154 TFLOP/s with 256; heaviest first 214).
    `causal` is kept for callers: the choice no longer depends on it."""
    if scope == "staged":
        return 2 * Br
    return 128 if scope == "workgroup" and head_dim == 64 and Br <= 128 and Bc <= 64 else 256


def prefill_splits(workgroups: int, keys: int, sms: int = SMS,
                   min_chunk: int = PREFILL_MIN_CHUNK) -> int:
    """The chunks `attention` splits a prefill's keys into where it is given no `splits`:
    where its `workgroups` (query tiles x batch x heads) leave SMs idle, as many as one wave
    of workgroups holds (sms // workgroups), with chunks of at least `min_chunk` keys. At
    llama.cpp's 512 queries over 32 heads (128 workgroups) the H100 ran no faster split
    (2026-11-28: 365 µs of prefill with 2 or 4 splits as with 1, at one workgroup per SM
    by registers, plus the merge), so a grid that fills the SMs once stays whole."""
    workgroups, keys, sms, min_chunk = (check_int("prefill_splits", name, v, least) for name, v,
                                        least in (("workgroups", workgroups, 0),
                                                  ("keys", keys, 0), ("sms", sms, 1),
                                                  ("min_chunk", min_chunk, 1)))
    return max(1, min(sms // max(workgroups, 1), keys // min_chunk))


def _check_config(name: str, head_dim: int, rows: int, Bc: int, dtype: str, out: str,
                  scope: str = "workgroup", invocations: int = 128, fp: str = "exact") -> None:
    """Errors a wrong configuration gives before anything is traced or launched."""
    check_tile(name, head_dim, Bc, dtype, out, fp)
    if not is_int(rows) or rows < 16 or rows % 16 or rows > MAX_TILE:
        raise ValueError(f"{name}: the query block must be a multiple of 16 of at most "
                         f"{MAX_TILE}, got {rows!r}")
    if scope not in SCOPES:
        raise ValueError(f"{name}: scope must be one of {SCOPES}, got {scope!r}")
    if not is_int(invocations) or invocations < SUBGROUP or invocations % SUBGROUP \
            or invocations > MAX_INVOCATIONS:
        raise ValueError(f"{name}: the invocations must be a multiple of {SUBGROUP} (whole "
                         f"subgroups) of at most {MAX_INVOCATIONS}, got {invocations!r}")


def _int_arg(name: str, v, optional: bool = False) -> int | None:
    """An int option of `attention` (a NumPy integer read as one) >= 1, or None where
    `optional`; anything else (a bool, a string, a float) is refused naming the option."""
    if v is None and optional:
        return None
    if isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)) and v >= 1:
        return int(v)
    raise ValueError(f"attention: {name} must be an int >= 1{' or None' if optional else ''}, "
                     f"got {v!r}")


def _scale_arg(fn: str, scale, D: int) -> float:
    """The scale of `fn`'s scores (None: 1 / sqrt(head_dim)), a finite number f32 holds."""
    if scale is not None and (not isinstance(scale, numbers.Real)
                              or isinstance(scale, (bool, np.bool_))):
        raise ValueError(f"{fn}: scale must be a number or None, got {scale!r}")
    scale = float(1 / np.sqrt(D) if scale is None else scale)
    if not np.isfinite(scale) or abs(scale) > float(np.finfo(np.float32).max):
        raise ValueError(f"{fn}: scale must be a finite number that f32 holds, got {scale}")
    return scale


def _words_unmet(scope: str, Br: int, Bc: int, invocations: int) -> list[str]:
    """What a workgroup's tile lacks for the mask read as words (`mask="words"`), as text."""
    return [what for ok, what in (
        (scope == "workgroup", f"scope='workgroup' (got {scope!r})"),
        (Br * Bc % (8 * invocations) == 0, f"Br x Bc a multiple of 8 x invocations (got "
                                           f"{Br} x {Bc}, {invocations} invocations)")) if not ok]


def _subgroup_rows(name: str, Br: int, invocations: int) -> int:
    """The rows of each subgroup when `invocations // 32` subgroups share Br rows."""
    nsg = invocations // SUBGROUP
    if Br % nsg or (Br // nsg) % 16:
        raise ValueError(f"{name}: at subgroup scope the {nsg} subgroups of {invocations} "
                         f"invocations each take Br / {nsg} rows, which must be a multiple of "
                         f"16 (Br={Br})")
    return Br // nsg


# --- prefill -------------------------------------------------------------------------------

@functools.cache
def attention_prefill(head_dim: int = 128, Br: int = 128, Bc: int = 64, invocations: int = 256,
                      causal: bool = False, mask: bool | str = False, dtype: str = "f16",
                      out: str = "f16", scope: str = "workgroup",
                      softmax: Softmax | None = None, fp: str = "exact",
                      blocks: bool = False, split: bool = False):
    """The prefill kernel for one configuration. Parameters:
    Q (batch, heads, queries, head_dim), K and V (batch, kv_heads, keys, head_dim) of `dtype`;
    with `mask`, Mask (queries, keys) f16 added to the scaled scores (shared by every batch and
    head; -inf hides a key); O (batch, heads, queries, head_dim) of `out`; LSE (batch, heads,
    queries) f32, the log-sum-exp of each row's scaled scores; then queries, keys, heads,
    kv_heads and scale. `causal`: query i sees keys 0..i (torch's `is_causal`).
    The grid is (ceil(queries / Br), batch * heads). `mask="words"` (workgroup scope): the
    mask bound as uvec4 (`Mask.view(np.uint32)`; keys a multiple of 8), each block copied
    into shared memory by 16-byte loads and read from there: an accumulator loaded from the
    buffer through a tensor layout made the masked kernel 5 times slower than the unmasked
    one on the H100 (37 against 192 TFLOP/s at 4096 x 4096, head dim 128; 54 from shared
    memory, bench/results/2026-11-27-h100-attention-defaults.md). With `blocks` (a mask, scope
    "workgroup" or "subgroup") the kernel takes Blocks after Mask, the kinds of the mask's
    blocks that `attention_mask.mask_block_kinds(rows, Bc)` wrote (rows: Br, or at subgroup scope
    each subgroup's rows; ceil(queries / Br) · Br / rows tiles of ceil(keys / Bc) blocks):
    blocks of only -inf are skipped, blocks of only zeros computed without the mask, the
    others loaded (the last blocks of the sequence, and causal, the diagonal ones, are never
    skipped: their keys are hidden per element).

    `scope="workgroup"`: the Br x Bc tiles are workgroup-scope matrices of `invocations`
    invocations. `scope="subgroup"`: each of the invocations / 32 subgroups owns Br /
    subgroups rows as subgroup-scope matrices (its row reductions stay in the subgroup), and
    the subgroups share the key blocks through the caches. `scope="staged"`:
    `attention_prefill_staged` (FlashAttention-2's structure: 16 x 16 subgroup-scope pieces,
    K and V staged in shared memory; K and V bound as uvec4, `K.view(np.uint32)`), with
    Br = 16 rows per subgroup of the invocations and its own softmax (`Softmax()`, or None).
    `softmax`: see `Softmax`; None is `tuned_softmax(Bc)`, in base 2, which needs the
    launch's scale > 0. `fp`:
    the kernel's floating-point mode (`pc.kernel(fp=...)`; "fast" lets the driver fuse and
    reorder the scalar arithmetic of the per-element functions).

    The key blocks that need no masking (all keys in the sequence and, causal, before the
    tile's first query) run in a loop of their own; only the last blocks pay for the
    per-element masking; that loop reads K and V by strided loads.
    Every buffer must start 16-byte aligned (a view elsewhere is refused at the launch).

    `split` (split-KV prefill, workgroup and subgroup scope): the keys are split into chunks
    of `chunk` keys (a multiple of Bc), one per grid z, so that few query tiles over many keys
    still fill the GPU (llama.cpp's 512 queries: 4 tiles x 32 heads, 128 workgroups). In
    place of O and LSE the kernel writes each chunk's unnormalised output to Part (splits,
    batch · heads · queries, head_dim) f32 and its row maxima and sums to M and L (splits,
    batch · heads · queries) f32, then takes `chunk` after scale; `attention_merge(...,
    exp2=softmax.exp2)` merges them (a chunk that sees no key of a row leaves it the maxima's
    start, `start_max`, and a sum of 0, which the merge weighs as nothing)."""
    _check_config("attention_prefill", head_dim, Br, Bc, dtype, out, scope, invocations, fp)
    for flag, v in (("causal", causal), ("blocks", blocks), ("split", split)):
        check_bool("attention_prefill", flag, v)
    if split and scope == "staged":
        raise ValueError("attention_prefill: split (split-KV) takes scope 'workgroup' or "
                         "'subgroup', got 'staged'")
    if mask not in (False, True, "words"):
        raise ValueError(f"attention_prefill: mask must be False, True or 'words', got {mask!r}")
    words = mask == "words"
    if blocks and (not mask or scope == "staged"):
        raise ValueError(f"attention_prefill: blocks (the kinds of the mask's blocks) take a "
                         f"mask and scope 'workgroup' or 'subgroup', got mask={mask!r}, "
                         f"scope={scope!r}")
    unmet = _words_unmet(scope, Br, Bc, invocations) if words else []
    if unmet:
        raise ValueError(f"attention_prefill: mask='words' takes workgroup scope with Br x Bc a "
                         f"multiple of 8 x invocations (each invocation copies whole uvec4s): "
                         f"it needs {' and '.join(unmet)}")
    if scope == "staged":
        if Br * 2 != invocations:
            raise ValueError(f"attention_prefill: at staged scope each subgroup of 32 "
                             f"invocations takes 16 query rows, so Br must be invocations / 2 = "
                             f"{invocations // 2}, got Br={Br}")
        if online.as_softmax("attention_prefill", softmax) not in (None, Softmax()):
            raise ValueError(f"attention_prefill: the staged kernel computes the softmax one "
                             f"way (Softmax(), in base e); got {softmax!r}")
        return attention_prefill_staged(head_dim, Bc, invocations // SUBGROUP, causal, mask,
                                        dtype, out, fp)
    rows = _subgroup_rows("attention_prefill", Br, invocations) if scope == "subgroup" else Br
    D, el = head_dim, ELEMENT[dtype]
    sm = online.check_softmax("attention_prefill", softmax, Bc)
    T = online.block_types(el, rows, D, Bc, scope, sm.row_width)
    Out = pc.coopmat[f16, T.O.scope, rows, D, pc.Accumulator] if out == "f16" else T.O
    OutEl = f16 if out == "f16" else f32
    lse_fn = log2_sum_exp2 if sm.exp2 else log_sum_exp
    U4, W8 = pc.vec(u32, 4), Bc // 8              # mask="words": a uvec4 holds 8 halves

    @pc.func
    def body(Q, K, V, Mask, Blocks, O, LSE, Part, M, L, Sq, Skv, H, Hkv, scale, chunk):
        tile, bh = tile_and_head(causal, D)
        q0 = tile * Br
        if scope == "subgroup":
            q0 = q0 + pc.subgroup_id() * rows
        bkv = (bh // H) * Hkv + (bh % H) // (H // Hkv)        # the K/V head of query head bh
        lq, lkv = rows_layout(bh * Sq, Sq, D), rows_layout(bkv * Skv, Skv, D)
        if words:
            staged = pc.shared(U4, rows * Bc // 8)
        elif mask:
            lm = (pc.nv.tensor_layout(2, clamp="constant").dimension(Sq, Skv)
                  .clamp_value(f16(float("-inf"))))          # -inf: keys past the sequence
        whole = q0 + rows <= Sq     # a query tile wholly inside its head: strided, unclamped
        q = online.load_q(T, Q, lq, bh * Sq + q0, rows, D, whole)
        k = scale * f32(LOG2E)                            # used with exp2 only
        m, l, o = T.Row.fill(start_max(sm.exp2)), T.Row.fill(0.0), T.O.fill(0.0)
        kend = pc.min(Skv, q0 + rows) if causal else Skv   # later keys are hidden from the tile
        # blocks wholly inside the sequence (and, causal, at or before the first query)
        kfull = (pc.min(Skv, q0 + 1) if causal else Skv) // Bc * Bc
        kb = u32(0)
        if split:                   # this chunk's keys: [kb, kend)
            kb = pc.min(pc.workgroup_id.z * chunk, kend)
            kend = pc.min(kb + chunk, kend)
            kfull = pc.max(kb, pc.min(kfull, kend))

        load, load_inside = online.kv_loaders(T, K, V, lkv, bkv * Skv, Bc, D)

        def mask_block(k0):
            """The Br x Bc block of the mask at (q0, k0) as f32."""
            if not words:
                return pc.nv.convert(pc.nv.load_tensor(Mask, lm.slice(q0, rows, k0, Bc),
                                                       T.Mask), T.S)
            # rows past the queries and keys past the sequence read the last ones (clamped:
            # those rows are not stored, those keys are hidden per element at the edge)
            pc.barrier()                                  # the last block's reads are done
            t = pc.local_invocation_index()
            for i in range(rows * Bc // 8 // invocations):
                u = t + i * invocations
                r, c = pc.min(q0 + u // W8, Sq - 1), pc.min(k0 // 8 + u % W8, Skv // 8 - 1)
                staged[u] = Mask[r * (Skv // 8) + c]
            pc.barrier()
            return pc.nv.convert(T.Mask.load(staged, 0, W8, "row_major"), T.S)

        if blocks:                  # this tile's row of the mask's block kinds
            tile_kinds = q0 // rows * ((Skv + (Bc - 1)) // Bc)

        def kind(k0):
            """The bits of the mask block at (q0, k0) (attention_mask)."""
            return Blocks[tile_kinds + k0 // Bc]

        def live(k0):
            return kind(k0) & NEEDED != 0

        def scores(k0, kt):
            if not mask:
                return online.block_scores(q, kt, T, scale, sm)
            if not blocks:
                return online.block_scores(q, kt, T, scale, sm, mask_block(k0))
            if kind(k0) & MASKED != 0:
                s = online.block_scores(q, kt, T, scale, sm, mask_block(k0))
            else:
                s = online.block_scores(q, kt, T, scale, sm)
            return s

        def edge_scores(k0, kt):                             # the edge: mask per element
            s = scores(k0, kt)
            return (pc.nv.per_element(s, causal_score, k0, kend, q0) if causal else
                    pc.nv.per_element(s, in_sequence, k0, kend))

        m, l, o = online.key_blocks(T, sm, k, m, l, o, kb, kfull, Bc, load_inside, scores,
                                    live if blocks else None)
        m, l, o = online.key_blocks(T, sm, k, m, l, o, kfull, kend, Bc, load, edge_scores)
        m, l = online.finish(m, l, sm, k)
        if split:                   # this chunk's rows: (split, bh, query)
            first = (pc.workgroup_id.z * pc.num_workgroups.y + bh) * Sq
            pc.nv.store_tensor(Part, rows_layout(first, Sq, D).slice(first + q0, rows, 0, D), o)
            for buf, x in ((M, m), (L, l)):
                pc.nv.store_tensor(buf, rows_layout(first, Sq, 1).slice(first + q0, rows, 0,
                                                                        sm.row_width), x)
        else:
            o = pc.nv.per_element(o, divide, online.by_row(l, T))
            res = o if Out == T.O else pc.nv.convert(o, Out)
            if whole:
                pc.store(O, (bh * Sq + q0) * D, res, D)
            else:
                pc.nv.store_tensor(O, lq.slice(bh * Sq + q0, rows, 0, D), res)
            online.store_lse(LSE, rows_layout(bh * Sq, Sq, 1).slice(bh * Sq + q0, rows, 0,
                                                                 sm.row_width),
                             pc.nv.per_element(m, lse_fn, l))

    sgs = SUBGROUP if scope == "subgroup" else None
    kernel = pc.kernel(workgroup_size=invocations, subgroup_size=sgs, fp=fp)
    # one kernel per set of buffers: with or without the mask and its block kinds, the
    # finished output (O, LSE) or a chunk's partial one (Part, M, L, chunk)
    if split and blocks:
        @kernel
        def attention_prefill(Q: pc.ReadBuffer[el], K: pc.ReadBuffer[el], V: pc.ReadBuffer[el],
                              Mask: pc.ReadBuffer[U4 if words else f16], Blocks: pc.ReadBuffer[u32],
                              Part: pc.WriteBuffer[f32], M: pc.WriteBuffer[f32],
                              L: pc.WriteBuffer[f32], Sq: u32, Skv: u32, H: u32, Hkv: u32,
                              scale: f32, chunk: u32):
            body(Q, K, V, Mask, Blocks, None, None, Part, M, L, Sq, Skv, H, Hkv, scale, chunk)
    elif split and mask:
        @kernel
        def attention_prefill(Q: pc.ReadBuffer[el], K: pc.ReadBuffer[el], V: pc.ReadBuffer[el],
                              Mask: pc.ReadBuffer[U4 if words else f16], Part: pc.WriteBuffer[f32],
                              M: pc.WriteBuffer[f32], L: pc.WriteBuffer[f32], Sq: u32, Skv: u32,
                              H: u32, Hkv: u32, scale: f32, chunk: u32):
            body(Q, K, V, Mask, None, None, None, Part, M, L, Sq, Skv, H, Hkv, scale, chunk)
    elif split:
        @kernel
        def attention_prefill(Q: pc.ReadBuffer[el], K: pc.ReadBuffer[el], V: pc.ReadBuffer[el],
                              Part: pc.WriteBuffer[f32], M: pc.WriteBuffer[f32],
                              L: pc.WriteBuffer[f32], Sq: u32, Skv: u32, H: u32, Hkv: u32,
                              scale: f32, chunk: u32):
            body(Q, K, V, None, None, None, None, Part, M, L, Sq, Skv, H, Hkv, scale, chunk)
    elif blocks:
        @kernel
        def attention_prefill(Q: pc.ReadBuffer[el], K: pc.ReadBuffer[el], V: pc.ReadBuffer[el],
                              Mask: pc.ReadBuffer[U4 if words else f16], Blocks: pc.ReadBuffer[u32],
                              O: pc.WriteBuffer[OutEl], LSE: pc.WriteBuffer[f32], Sq: u32,
                              Skv: u32, H: u32, Hkv: u32, scale: f32):
            body(Q, K, V, Mask, Blocks, O, LSE, None, None, None, Sq, Skv, H, Hkv, scale, None)
    elif mask:
        @kernel
        def attention_prefill(Q: pc.ReadBuffer[el], K: pc.ReadBuffer[el], V: pc.ReadBuffer[el],
                              Mask: pc.ReadBuffer[U4 if words else f16], O: pc.WriteBuffer[OutEl],
                              LSE: pc.WriteBuffer[f32], Sq: u32, Skv: u32, H: u32, Hkv: u32,
                              scale: f32):
            body(Q, K, V, Mask, None, O, LSE, None, None, None, Sq, Skv, H, Hkv, scale, None)
    else:
        @kernel
        def attention_prefill(Q: pc.ReadBuffer[el], K: pc.ReadBuffer[el], V: pc.ReadBuffer[el],
                              O: pc.WriteBuffer[OutEl], LSE: pc.WriteBuffer[f32], Sq: u32,
                              Skv: u32, H: u32, Hkv: u32, scale: f32):
            body(Q, K, V, None, None, O, LSE, None, None, None, Sq, Skv, H, Hkv, scale, None)
    return attention_prefill


# --- decode --------------------------------------------------------------------------------

@functools.cache
def attention_decode(head_dim: int = 128, rows: int = 32, Bc: int = 64, invocations: int = 128,
                     dtype: str = "f16", scope: str = "workgroup",
                     softmax: Softmax | None = None, fp: str = "exact"):
    """The split-KV decode kernel: Q (batch, heads, queries, head_dim), K and V (batch,
    kv_heads, keys, head_dim); each chunk multiplies the G = heads / kv_heads query heads of
    one K/V head (G * queries <= rows, packed as the rows of one matrix: they are consecutive
    rows of Q) with `chunk` keys (a multiple of Bc) and writes its unnormalised output to Part
    (splits, batch * heads * queries, head_dim) f32, its row maxima to M and sums to L (splits,
    batch * heads * queries) f32 (with `softmax.exp2`, maxima and sums in base 2: M·ln 2 is
    the natural maximum). Every query sees every key. `rows` is at least the device's row
    granularity for the scope (32 at workgroup scope on the H100, 16 at subgroup scope).

    `scope="workgroup"`: one workgroup per chunk, the grid is (splits, batch * kv_heads).
    `scope="subgroup"`: each of the invocations / 32 subgroups of a workgroup takes a chunk of
    its own, the grid is (splits / subgroups, batch * kv_heads) and splits must be a multiple
    of the subgroups. Chunks past the keys write the maxima's start (`start_max`: -2^99 in
    base 2, the lowest f32 in base e) and sums of 0.
    As in the prefill, the whole key blocks of a chunk are read by strided loads and its last
    block through the tensor layout. `softmax` and `fp` as in `attention_prefill`.
    `attention_merge(..., exp2=softmax.exp2)` merges the splits."""
    _check_config("attention_decode", head_dim, rows, Bc, dtype, "f32", scope, invocations, fp)
    if scope == "staged":
        raise ValueError("attention_decode: scope must be 'workgroup' or 'subgroup' (the staged "
                         "kernel is a prefill kernel)")
    D, el = head_dim, ELEMENT[dtype]
    sm = online.check_softmax("attention_decode", softmax, Bc)
    T = online.block_types(el, rows, D, Bc, scope, sm.row_width)
    nsg = invocations // SUBGROUP if scope == "subgroup" else 1

    @pc.kernel(workgroup_size=invocations, subgroup_size=SUBGROUP if nsg > 1 else None, fp=fp)
    def attention_decode(Q: pc.ReadBuffer[el], K: pc.ReadBuffer[el], V: pc.ReadBuffer[el],
                         Part: pc.WriteBuffer[f32], M: pc.WriteBuffer[f32], L: pc.WriteBuffer[f32],
                         n: u32, Skv: u32, chunk: u32, scale: f32):
        bkv = pc.workgroup_id.y
        split = pc.workgroup_id.x
        if scope == "subgroup":
            split = split * nsg + pc.subgroup_id()
        nkv = pc.num_workgroups.y
        lkv = rows_layout(bkv * Skv, Skv, D)
        q = pc.nv.load_tensor(Q, rows_layout(bkv * n, n, D).slice(bkv * n, rows, 0, D), T.Q)
        k = scale * f32(LOG2E)                            # used with exp2 only
        m, l, o = T.Row.fill(start_max(sm.exp2)), T.Row.fill(0.0), T.O.fill(0.0)
        kb = pc.min(split * chunk, Skv)
        kend = pc.min(kb + chunk, Skv)
        kfull = kb + (kend - kb) // Bc * Bc               # whole blocks: no masking

        load, load_inside = online.kv_loaders(T, K, V, lkv, bkv * Skv, Bc, D)

        def scores(k0, kt):
            return online.block_scores(q, kt, T, scale, sm)

        def edge_scores(k0, kt):
            return pc.nv.per_element(scores(k0, kt), in_sequence, k0, kend)

        m, l, o = online.key_blocks(T, sm, k, m, l, o, kb, kfull, Bc, load_inside, scores)
        m, l, o = online.key_blocks(T, sm, k, m, l, o, kfull, kend, Bc, load, edge_scores)
        m, l = online.finish(m, l, sm, k)
        first = (split * nkv + bkv) * n          # this chunk's rows: (split, bkv, row)
        pc.nv.store_tensor(Part, rows_layout(first, n, D).slice(first, rows, 0, D), o)
        pc.nv.store_tensor(M, rows_layout(first, n, 1).slice(first, rows, 0, sm.row_width), m)
        pc.nv.store_tensor(L, rows_layout(first, n, 1).slice(first, rows, 0, sm.row_width), l)
    return attention_decode


# --- host side -----------------------------------------------------------------------------

class AttentionResult(NamedTuple):
    out: np.ndarray          # (batch, heads, queries, head_dim)
    lse: np.ndarray          # (batch, heads, queries) f32, natural log
    time_ms: float           # the sum of the kernels' times
    backend: str
    kernel_ms: tuple = ()    # each kernel's time in launch order (the mask's pre-pass, the
    #                          prefill or split-KV kernel, the merge of the chunks)


def _check_shapes(name: str, Q, K, V, mask, causal: bool,
                  head_dims: tuple | None = HEAD_DIMS) -> tuple[int, ...]:
    """The shapes' rules (`head_dims` None: any head dim), as (B, H, Hkv, Sq, Skv, D)."""
    if Q.ndim != 4 or K.ndim != 4 or V.ndim != 4:
        raise ValueError(f"{name}: Q, K and V must be (batch, heads, sequence, head_dim) arrays, "
                         f"got {Q.shape}, {K.shape}, {V.shape}")
    B, H, Sq, D = Q.shape
    Hkv, Skv = K.shape[1], K.shape[2]
    if K.shape != V.shape or K.shape[0] != B or K.shape[3] != D:
        raise ValueError(f"{name}: K and V must be (batch={B}, kv_heads, keys, head_dim={D}) "
                         f"of one shape, got {K.shape} and {V.shape}")
    if min(B, H) < 1:
        raise ValueError(f"{name}: empty batch or heads (batch={B}, heads={H})")
    if Hkv < 1 or H % Hkv:
        raise ValueError(f"{name}: the kv_heads ({Hkv}) must divide the heads ({H}) "
                         "(grouped-query attention)")
    if head_dims is not None and D not in head_dims:
        raise ValueError(f"{name}: head_dim must be one of {head_dims}, got {D}")
    if min(Sq, Skv) < 1:
        raise ValueError(f"{name}: empty sequence (queries={Sq}, keys={Skv})")
    if mask is not None and mask.shape != (Sq, Skv):
        raise ValueError(f"{name}: the mask must be (queries, keys) = {(Sq, Skv)}, "
                         f"got {mask.shape}")
    if causal and Skv < Sq:
        raise ValueError(f"{name}: causal needs at least as many keys as queries "
                         f"(queries={Sq}, keys={Skv}): query i sees keys 0..i")
    return B, H, Hkv, Sq, Skv, D


def _check_kinds(name: str, Q, K, V, mask):
    """Q, K, V and the mask all pc.Arrays or all host arrays, and a floating-point mask; the
    host ones (array-likes) returned as NumPy arrays."""
    arrays = [isinstance(a, pc.Array) for a in (Q, K, V)]
    Q, K, V = (a if isinstance(a, pc.Array) else np.asarray(a) for a in (Q, K, V))
    if mask is not None:
        if not isinstance(mask, pc.Array):
            mask = np.asarray(mask)
        arrays.append(isinstance(mask, pc.Array))
    if any(arrays) and not all(arrays):
        raise ValueError(f"{name}: Q, K, V (and the mask) must all be pc.Arrays or all NumPy "
                         "arrays (move them with pc.asarray(a, backend=...) or a.numpy())")
    if mask is not None and mask.dtype == np.bool_:
        raise ValueError(f"{name}: the mask is added to the scores (-inf hides a key); a "
                         "boolean mask is ambiguous: pass np.where(keep, 0, -np.inf)"
                         ".astype(np.float16) for a mask that is True where a key is seen")
    if mask is not None and not (np.issubdtype(mask.dtype, np.floating)
                                 or mask.dtype.name == "bfloat16"):
        raise ValueError(f"{name}: the mask must be floating point (added to the scores as "
                         f"float16), got {mask.dtype}")
    if mask is not None and isinstance(mask, pc.Array) and mask.dtype != np.float16:
        raise ValueError(f"{name}: a pc.Array mask must be float16, got {mask.dtype} "
                         "(pc.asarray(mask.numpy().astype(np.float16), backend=...))")
    return Q, K, V, mask


def mask_as_f16(mask) -> np.ndarray:
    """A host mask as `attention` adds it: float16, with finite values beyond float16's range
    saturated to ±65504, so that a large finite value such as -1e9 (a common way to hide a
    key) stays finite rather than becoming -inf: a row of only -inf is NaN, a row of only
    -65504 weighs its keys as if unmasked. -inf, +inf and NaN are kept."""
    m = np.asarray(mask)
    if not (np.issubdtype(m.dtype, np.floating) or m.dtype.name == "bfloat16"):
        raise ValueError(f"mask_as_f16: the mask must be floating point (added to the scores; "
                         f"-inf hides a key), got {m.dtype}")
    if m.dtype != np.float16:
        m = np.asarray(m, np.float32)
        m = np.where(np.isfinite(m), np.clip(m, -F16_MAX, F16_MAX), m).astype(np.float16)
    return np.ascontiguousarray(m)


def _dtype_name(a: np.ndarray) -> str:
    if a.dtype == np.float16:
        return "f16"
    if a.dtype.name == "bfloat16":
        return "bf16"
    raise ValueError(f"attention: Q, K and V must be float16 or bfloat16, got {a.dtype}")


def attention(Q, K, V, *, mask=None, causal: bool = False, scale: float | None = None,
              out: str = "f16", backend: str | None = None, repeat: int = 1,
              Br: int = 128, Bc: int = 64, invocations: int | None = None,
              scope: str = "workgroup", softmax: Softmax | None = None, splits: int | None = None,
              decode_rows: int = 32,
              decode_Bc: int = 64, decode_invocations: int = 128,
              decode_scope: str = "workgroup", fp: str = "exact",
              decode: bool | None = None, decode_kernel: str = "auto",
              decode_subgroups: int | None = None,
              decode_unroll: int = DecodeConfig.unroll, decode_lanes: int | None = None,
              decode_prefetch: bool | int = DecodeConfig.prefetch,
              decode_merge: str = DecodeConfig.merge,
              decode_width: int | None = None,
              decode_merge_columns: int | None = None, decode_reduce: str = "auto",
              subgroup_size: int = 32, merge_unroll: int | None = None,
              mask_loads: str = "auto", mask_blocks: bool = True) -> AttentionResult:
    """softmax(Q Kᵀ · scale + mask) V with f32 accumulation; scale defaults to 1/sqrt(head_dim).

    Q (batch, heads, queries, head_dim), K and V (batch, kv_heads, keys, head_dim), float16
    (or bfloat16), NumPy arrays or `pc.Array`s (then the results are `pc.Array`s on the same
    backend and nothing is copied); heads a multiple of kv_heads. `mask`: (queries, keys)
    float16, added to the scaled scores. `causal`: query i sees keys 0..i. Without mask and
    causality, queries whose G = heads / kv_heads heads fit the `decode_rows` rows of one
    matrix (G * queries <= decode_rows) go the decode path (`attention_decode` with
    `decode_Bc`, `decode_invocations`, `decode_scope`; `attention_merge` with
    `merge_unroll`, chunks loaded per step: 4 by default), the keys split into `splits` chunks
    (by default about 4 workgroups per SM of a 132-SM GPU, rounded up to whole workgroups at
    subgroup scope); otherwise the prefill kernel with Br x Bc tiles, `invocations` (None:
    `prefill_invocations`) and `scope` ("workgroup", "subgroup" or "staged": see
    `attention_prefill`), its keys split into `splits` chunks merged by `attention_merge`
    (None: `prefill_splits`, where the grid leaves SMs idle; not at staged scope). `softmax` (a
    `Softmax`; None: `tuned_softmax`, base e where scale <= 0) and `fp` (the kernels'
    floating-point mode) apply to both paths. `mask_loads`: how the prefill reads the mask,
    "words" (`attention_prefill(mask="words")`, 16-byte loads staged in shared memory:
    workgroup scope, Br x Bc a multiple of 8 x invocations, keys a multiple of 8), "layout"
    (an accumulator loaded through a tensor layout; any shape, 1.45x slower on the H100) or
    "auto" (the default): "words" where it applies, else "layout". `mask_blocks` (workgroup
    and subgroup scope): a pre-pass kernel first finds the kinds of the mask's blocks
    (`attention_mask`), and the prefill skips the blocks of only -inf and adds no mask to those
    of only zeros.
    `decode` True or False chooses the path instead. `pc.Array` views of Q, K, V and the mask
    must start 16-byte aligned in their buffers (the cooperative-matrix loads need it; the
    vector decode takes K and V 8-byte aligned). The configuration is checked before
    anything runs.

    `decode_kernel`: "vector" decodes with `attention_decode_vector` + `attention_merge` (no
    cooperative matrices; K and V read once by vector loads; `decode_subgroups`
    (default `default_subgroups`: 8 where the chunks are at most 256 keys long, else 4;
    fewer where the merge would not fit 32 KiB of shared memory),
    `decode_unroll`, `decode_lanes`, `decode_prefetch` (load the next keys' K and V before
    the current keys' math; an int: that many iterations ahead, True is 1), `decode_merge`
    ("workgroup": the last workgroup of each K/V head merges the chunks, one launch;
    "launch": `attention_merge` as a second launch; "phase", the default: one kernel for
    both steps, dispatched twice with one pipeline), `decode_width` (halves per K and V
    load: 4, or 8 for 16-byte loads, which needs `pc.Array` K and V starting 16 bytes
    aligned; None, the default: 8 where it applies, else 4), `decode_merge_columns` (with
    decode_merge="phase": the merge dispatch splits each row's dimensions over that many
    workgroups, a power of two dividing head_dim / 4; None, the default, is 1),
    `decode_reduce` (how a key's score is summed over the lanes that hold its slices:
    "scatter", "butterfly" or "auto", the default: scatter where it fits; see
    `attention_decode_vector`),
    `subgroup_size`, `merge_unroll` (default 2); `splits` by default about two workgroups per
    SM of a 132-SM GPU, up to twice that where chunks would be longer than 512 keys),
    "coopmat" with the cooperative-matrix kernels above, "auto" (the default) with "vector"
    where it applies: f16 or bf16, head_dim
    64, 128 or 256, at most 8 query rows per K/V head (heads / kv_heads * queries). On the
    vector path `softmax` and `fp` do not apply (it computes in f32 throughout, in base 2)."""
    Br, Bc, decode_rows, decode_Bc, decode_invocations, subgroup_size, decode_unroll = (
        _int_arg(n, v) for n, v in (("Br", Br), ("Bc", Bc), ("decode_rows", decode_rows),
                                    ("decode_Bc", decode_Bc),
                                    ("decode_invocations", decode_invocations),
                                    ("subgroup_size", subgroup_size),
                                    ("decode_unroll", decode_unroll)))
    invocations, decode_subgroups, decode_lanes, merge_unroll, decode_merge_columns = (
        _int_arg(n, v, optional=True) for n, v in (
            ("invocations", invocations), ("decode_subgroups", decode_subgroups),
            ("decode_lanes", decode_lanes), ("merge_unroll", merge_unroll),
            ("decode_merge_columns", decode_merge_columns)))
    causal = check_bool("attention", "causal", causal)
    mask_blocks = check_bool("attention", "mask_blocks", mask_blocks)
    decode = check_bool("attention", "decode", decode, optional=True)
    if fp not in FP_MODES:
        raise ValueError(f"attention: fp must be one of {FP_MODES}, got {fp!r}")
    _scale_arg("attention", scale, 64)
    Q, K, V, mask = _check_kinds("attention", Q, K, V, mask)
    B, H, Hkv, Sq, Skv, D = _check_shapes("attention", Q, K, V, mask, causal)
    el = _dtype_name(Q)
    if _dtype_name(K) != el or _dtype_name(V) != el:
        raise ValueError(f"attention: Q, K and V must have one dtype, got {Q.dtype}, {K.dtype}, "
                         f"{V.dtype}")
    if out not in _NUMPY_OUT:
        raise ValueError(f"attention: out must be 'f16' or 'f32', got {out!r}")
    if mask_loads not in ("auto", "layout", "words"):
        raise ValueError(f"attention: mask_loads must be 'auto', 'layout' or 'words', got "
                         f"{mask_loads!r}")
    if mask is None and mask_loads != "auto":
        raise ValueError(f"attention: mask_loads={mask_loads!r} says how the prefill reads a "
                         f"mask, and there is none (leave mask_loads at 'auto')")
    scale = _scale_arg("attention", scale, D)
    sm = online.as_softmax("attention", softmax)
    # both paths' tiles are checked, whichever this call takes: a wrong option fails now,
    # not at the first call whose shape takes the other path
    if invocations is None:
        invocations = prefill_invocations(D, causal, scope, Br, Bc)
    _check_config("attention (the prefill's Br, Bc, scope, invocations)", D, Br, Bc, el, out,
                  scope, invocations, fp)
    _check_config("attention (the decode's decode_rows, decode_Bc, decode_scope, "
                  "decode_invocations)", D, decode_rows, decode_Bc, el, out, decode_scope,
                  decode_invocations, fp)
    if isinstance(splits, numbers.Integral) and not isinstance(splits, bool):
        splits = int(splits)                       # a NumPy integer is an int here
    if splits is not None and (not isinstance(splits, int) or isinstance(splits, bool)
                               or splits < 1):
        raise ValueError(f"attention: splits must be a positive int, got {splits!r}")
    if decode_merge not in DECODE_MERGES:
        raise ValueError(f"attention: decode_merge must be one of {DECODE_MERGES}, got "
                         f"{decode_merge!r}")
    if decode_merge_columns is None:
        decode_merge_columns = DecodeConfig.merge_columns
    check_merge_columns("attention", D, decode_merge_columns, "decode_merge_columns")
    if decode_merge_columns != 1 and decode_merge != "phase":
        raise ValueError(f"attention: decode_merge_columns splits the rows of the merge "
                         f"dispatch (decode_merge='phase'); got {decode_merge_columns} with "
                         f"decode_merge={decode_merge!r}")
    if decode_width is not None and (decode_width not in WIDTHS or isinstance(decode_width,
                                                                              bool)):
        raise ValueError(f"attention: decode_width (halves per K and V load) must be one of "
                         f"{WIDTHS} or None, got {decode_width!r}")
    if not isinstance(decode_reduce, str) or decode_reduce not in REDUCES:
        raise ValueError(f"attention: decode_reduce must be one of {REDUCES}, got "
                         f"{decode_reduce!r}")
    device = isinstance(Q, pc.Array)
    if device:
        be = Q.backend

        def new(shape, dtype):
            return pc.empty(shape, dtype, backend=be)

        def zeros(shape, dtype):
            return pc.zeros(shape, dtype, backend=be)
    else:
        Q, K, V = (np.ascontiguousarray(a) for a in (Q, K, V))
        new = zeros = np.zeros
    O = new((B, H, Sq, D), _NUMPY_OUT[out])
    LSE = new((B, H, Sq), np.float32)
    run = {"backend": backend, "repeat": repeat}
    if decode_kernel not in ("auto", "vector", "coopmat"):
        raise ValueError(f"attention: decode_kernel must be 'auto', 'vector' or 'coopmat', got "
                         f"{decode_kernel!r}")
    if decode is False and decode_kernel != "auto":
        raise ValueError(f"attention: decode_kernel={decode_kernel!r} names a decode kernel, "
                         f"and decode=False takes the prefill (leave decode_kernel 'auto')")
    n = (H // Hkv) * Sq                      # query rows per K/V head
    # views starting `halves` halves into their buffers: the vector decode loads K and V 4
    # or 8 halves at a time (8 or 16 bytes); the cooperative-matrix kernels need every
    # operand at 16 bytes (their tensor loads' pointers)
    offsets = [(name, a.offset) for name, a in (("Q", Q), ("K", K), ("V", V), ("the mask", mask))
               if isinstance(a, pc.Array)]

    def misaligned(halves: int, names=("K", "V")) -> list[str]:
        return [f"{name} starts {2 * o} bytes into its buffer" for name, o in offsets
                if o % halves and name in names]
    vector = D in VECTOR_HEAD_DIMS and n <= MAX_ROWS and not misaligned(4)
    if decode_kernel == "vector" and not vector:
        raise ValueError(f"attention: the vector decode takes head_dim {VECTOR_HEAD_DIMS}, at "
                         f"most {MAX_ROWS} query rows per K/V head and K and V views starting "
                         f"8-byte aligned (heads / kv_heads * queries = {n}, head_dim {D}"
                         + "".join(f", {m}" for m in misaligned(4)) + ")")
    if decode_kernel == "vector" and not abs(scale) <= EXP2_SCALES[1]:
        raise ValueError(f"attention: the vector decode multiplies the queries by scale · "
                         f"log2(e) in f32, which needs |scale| <= 2^24, got {scale}; use "
                         "decode_kernel='coopmat'")
    # (where the scale is out of its range, "auto" decodes with the cooperative matrices)
    vector = vector and decode_kernel != "coopmat" and abs(scale) <= EXP2_SCALES[1]
    fits = mask is None and not causal and (n <= MAX_ROWS if vector else n <= decode_rows)
    if decode and not fits:
        raise ValueError(f"attention: the decode path takes neither mask nor causal, and at most "
                         f"decode_rows={decode_rows} packed rows (heads / kv_heads * queries = "
                         f"{(H // Hkv) * Sq})")
    if (fits if decode is None else decode) and vector:
        return _decode_vector(Q, K, V, O, LSE, new, run, B, H, Hkv, Sq, Skv, D, el, out, scale,
                              splits, decode_subgroups, decode_unroll, decode_lanes,
                              subgroup_size, merge_unroll or DecodeConfig.merge_unroll,
                              decode_prefetch, decode_merge, decode_width,
                              decode_merge_columns, decode_reduce, misaligned(8))
    off16 = misaligned(8, ("Q", "K", "V", "the mask"))
    if off16:
        raise ValueError(f"attention: the cooperative-matrix kernels need Q, K, V and the mask "
                         f"to start 16-byte aligned (SPV_NV_cooperative_matrix2: the Pointer of "
                         f"a tensor load is a multiple of 16 bytes), but {' and '.join(off16)}; "
                         f"pass aligned copies (b = pycoop.empty(a.shape, a.dtype); "
                         f"b.copy_from(a))")
    if sm is not None and sm.exp2 and not EXP2_SCALES[0] <= scale <= EXP2_SCALES[1]:
        raise ValueError(f"attention: Softmax(exp2=True) keeps the row maxima in raw scores, "
                         f"which needs 2^-24 <= scale <= 2^24 (beyond, f32 products "
                         f"overflow), got {scale}; use Softmax() (the scores scaled in f32)")
    if fits if decode is None else decode:
        sm = tuned_softmax(decode_Bc, scale) if sm is None else sm
        kernel = attention_decode(D, decode_rows, decode_Bc, decode_invocations, el,
                                  decode_scope, sm, fp)
        per_wg = decode_invocations // SUBGROUP if decode_scope == "subgroup" else 1
        R, Bd = B * H * Sq, decode_Bc
        if splits is None:
            splits = max(1, min(-(-Skv // Bd), -(-4 * SMS * per_wg // (B * Hkv))))
        chunk = -(-Skv // (splits * Bd)) * Bd
        splits = -(-(-(-Skv // chunk)) // per_wg) * per_wg     # whole workgroups
        Part = new((splits, R, D), np.float32)
        M, L = new((splits, R), np.float32), new((splits, R), np.float32)
        r1 = kernel[(splits // per_wg, B * Hkv)](
            Q, K, V, Part, M, L, (H // Hkv) * Sq, Skv, chunk, scale, **run)
        r2 = attention_merge(D, out, unroll=merge_unroll or 4, exp2=bool(sm.exp2))[(R,)](
            Part, M, L, O, LSE, R, splits, **run)
        return _result(O, LSE, r1, r2)
    if sm is None and scope != "staged":
        sm = tuned_softmax(Bc, scale)
    unmet = [] if mask is None or mask_loads == "layout" else _words_unmet(
        scope, Br, Bc, invocations) + ([] if Skv % 8 == 0 else
                                       [f"keys a multiple of 8 (got {Skv})"])
    if unmet and mask_loads == "words":
        raise ValueError(f"attention: mask_loads='words' reads the mask rows as uvec4s: it "
                         f"needs {' and '.join(unmet)}; use mask_loads='layout'")
    words = mask is not None and mask_loads != "layout" and not unmet
    blocks = mask is not None and bool(mask_blocks) and scope != "staged"
    if splits not in (None, 1) and scope == "staged":
        raise ValueError(f"attention: the prefill splits its keys (splits={splits}) at scope "
                         f"'workgroup' or 'subgroup', not 'staged'")
    if splits is None:
        splits = 1 if scope == "staged" else prefill_splits(-(-Sq // Br) * B * H, Skv)
    chunk = -(-Skv // (splits * Bc)) * Bc               # keys per split, whole key blocks
    splits = -(-Skv // chunk)
    k = attention_prefill(D, Br, Bc, invocations, causal,
                          "words" if words else mask is not None, el, out, scope, sm, fp,
                          blocks, splits > 1)
    if mask is not None and not device:
        mask = mask_as_f16(mask)
    kinds, launches = [], []
    if blocks:                      # the kinds of the mask's blocks, before the prefill
        rows = _subgroup_rows("attention", Br, invocations) if scope == "subgroup" else Br
        nkb = -(-Skv // Bc)
        tiles = -(-Sq // Br) * (Br // rows)    # every subgroup's, those past the queries too
        kinds = [zeros((tiles, nkb), np.uint32)]
        launches.append(mask_block_kinds(rows, Bc)[(nkb, tiles)](mask, kinds[0], Sq, Skv,
                                                                 **run))
    if words:
        mask = mask.view(np.uint32)
    if scope == "staged":           # K and V read as uvec4 (8 halves)
        K, V = K.view(np.uint32), V.view(np.uint32)
    args = [Q, K, V] + ([mask] if mask is not None else []) + kinds
    try:
        if splits > 1:              # each split's partial rows, then their merge
            R = B * H * Sq
            Part = new((splits, R, D), np.float32)
            M, L = new((splits, R), np.float32), new((splits, R), np.float32)
            launches.append(k[(-(-Sq // Br), B * H, splits)](*args, Part, M, L, Sq, Skv, H, Hkv,
                                                            scale, chunk, **run))
            # a row's few chunks shared by as few groups of head_dim / 4 invocations: one
            # workgroup per row, and the prefill has many rows
            groups = min(1 << (splits.bit_length() - 1), MERGE_INVOCATIONS // (D // 4))
            r = attention_merge(D, out, groups * (D // 4), merge_unroll or 4,
                                bool(sm.exp2))[(R,)](Part, M, L, O, LSE, R, splits, **run)
        else:
            r = k[(-(-Sq // Br), B * H)](*args, O, LSE, Sq, Skv, H, Hkv, scale, **run)
    except pc.BackendUnavailable as e:
        staged = _staged_for(D, causal, mask is not None, el, out, fp)
        if scope == "staged" or staged is None:
            raise
        raise pc.BackendUnavailable(   # the H100 lists no 80-wide nor bf16 ones at 256
            f"{e}\n  hint: this device runs scope='staged', the same attention from 16 x 16 "
            f"subgroup-scope matrices: {staged}") from None
    return _result(O, LSE, *launches, r)


def _staged_for(D: int, causal: bool, mask: bool, el: str, out: str, fp: str) -> str | None:
    """The staged configuration (its keyword arguments, as text) for this problem if the
    Vulkan device can run it, else None."""
    Bc = min(64, SHARED_BYTES // (4 * D) // 16 * 16)
    try:
        k = attention_prefill_staged(D, Bc, 8, causal, mask, el, out, fp)
        if vulkan_missing(k.compile()):
            return None
    except pc.BackendUnavailable:
        return None
    return f"Br=128, Bc={Bc}, invocations=256, scope='staged'"


def _decode_vector(Q, K, V, O, LSE, new, run, B, H, Hkv, Sq, Skv, D, el, out, scale, splits,
                   subgroups, unroll, lanes, subgroup_size, merge_unroll,
                   prefetch, merge, width, merge_columns: int, reduce: str,
                   misaligned: list[str]) -> AttentionResult:
    """The vector decode: chunks of keys per K/V head, merged by the last workgroup of each
    head (merge="workgroup"), by a second launch (merge="launch") or by a second dispatch of
    the same kernel (merge="phase"); width None: 8 where K and V start 16 bytes aligned
    (`misaligned`: the views that do not, as text)."""
    if width == 8 and misaligned:
        raise ValueError(f"attention: decode_width=8 loads K and V 16 bytes at a time from "
                         f"16-byte aligned views, but {' and '.join(misaligned)}; use "
                         f"decode_width=4 (or None: chosen by the alignment)")
    width = width or (4 if misaligned else DecodeConfig.width)
    n = (H // Hkv) * Sq
    if subgroups is None:           # the default, halved until the merge fits shared memory
        subgroups = default_subgroups(Skv, B * Hkv)
        while subgroups > 1 and not fits_shared(D, n, subgroups):
            subgroups //= 2
    fused = merge == "workgroup"
    kernel = attention_decode_vector(D, n, subgroups, lanes, unroll, subgroup_size, el, prefetch,
                                     fused, out, merge_unroll, width, merge == "phase",
                                     merge_columns, reduce)
    if width == 8:                  # 16-byte loads: K and V bound as uvec4
        K, V = K.view(np.uint32), V.view(np.uint32)
    T = streams_of(subgroups, subgroup_size, lanes or default_lanes(D, subgroup_size))
    if splits is None:
        splits = default_splits(Skv, B * Hkv, T, unroll)
    chunk, splits = chunk_of(Skv, splits, T, unroll)
    R = B * H * Sq
    Part = new((splits, R, D), np.float32)
    M, L = new((splits, R), np.float32), new((splits, R), np.float32)
    if fused:                       # the heads' counters start at zero (the kernel leaves
        count = new((B * Hkv,), np.uint32)              # them at zero: a graph replays it)
        r = kernel[(splits, B * Hkv)](Q, K, V, Part, M, L, count, O, LSE, Skv, chunk, scale,
                                      **run)
        return _result(O, LSE, r)
    if merge == "phase":            # one pipeline: the chunks, then their merge
        r1 = kernel[(splits, B * Hkv)](Q, K, V, Part, M, L, O, LSE, Skv, chunk, scale, R, splits,
                                       0, **run)
        r2 = kernel[(R, merge_columns)](Q, K, V, Part, M, L, O, LSE, Skv, chunk, scale, R,
                                        splits, 1, **run)
        return _result(O, LSE, r1, r2)
    r1 = kernel[(splits, B * Hkv)](Q, K, V, Part, M, L, Skv, chunk, scale, **run)
    r2 = attention_merge(D, out, unroll=merge_unroll)[(R,)](Part, M, L, O, LSE, R, splits, **run)
    return _result(O, LSE, r1, r2)


def _result(O, LSE, *launches) -> AttentionResult:
    """The result of the kernels `launches` wrote O and LSE with: their times, or NaN when they
    were recorded into a launch graph (the times then come from its replays)."""
    if capturing.active and capturing.current() is not None:
        times = (float("nan"),) * len(launches)
    else:
        times = tuple(r.time_ms for r in launches)
    return AttentionResult(O, LSE, sum(times), launches[0].backend, times)


def attention_reference(Q, K, V, *, mask=None, causal: bool = False,
                        scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(output, log-sum-exp) in f64 from the f32 values of the inputs, as `attention` defines
    them (GQA: query head h uses K/V head h // (heads / kv_heads); the mask as
    `mask_as_f16` makes it), with attention's checks of the arguments (any head dim)."""
    causal = check_bool("attention_reference", "causal", causal)
    Q, K, V, mask = _check_kinds("attention_reference", Q, K, V, mask)
    _check_shapes("attention_reference", Q, K, V, mask, causal, head_dims=None)
    scale = _scale_arg("attention_reference", scale, Q.shape[-1])
    Q, K, V = (np.asarray(a, np.float32).astype(np.float64) for a in (Q, K, V))
    G = Q.shape[1] // K.shape[1]
    K, V = np.repeat(K, G, axis=1), np.repeat(V, G, axis=1)
    s = Q @ np.swapaxes(K, -1, -2) * scale
    if mask is not None:
        s = s + mask_as_f16(mask).astype(np.float64)
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)     # a row of only -inf: sum 0, output NaN, lse -inf
    p = np.exp(s - m)
    l = p.sum(-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (p / l) @ V, (m + np.log(l))[..., 0]
