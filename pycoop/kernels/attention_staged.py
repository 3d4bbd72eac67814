"""Flash attention prefill in FlashAttention-2's structure: 16 x 16 subgroup-scope pieces, with
each key block's K and V staged once in shared memory for all the subgroups of a workgroup.

Why: the workgroup-scope kernel (`attention_prefill(scope="workgroup")`) holds whole Br x Bc
and D x Bc matrices (Kᵀ, V, S, P, the row state) in every invocation's registers. On the H100
every change that made one of them larger was several times slower (register spills,
bench/results/2026-11-27-h100-attention.md). Here each subgroup owns 16 query rows and keeps
16 x 16 pieces only: its Q (D / 16 operand pieces) and O (D / 16 accumulators) for the whole
loop, the scores of one key block (Bc / 16 accumulators), and one piece of Kᵀ or V at a time,
read from shared memory.

Per key block of Bc keys, in a loop the whole workgroup runs:
- the block's K and V rows are copied into shared memory as uvec4 (8 halves), one block
  ahead: the next block's loads are issued into registers before this block's math, and
  stored after the barrier that ends it. Shared memory holds each 16 x 16 piece as 512
  contiguous bytes, so a piece's load touches every bank once, and 32 consecutive
  invocations store one piece. Rows past the keys are clamped to the last key: their scores
  are masked to -inf, so their probabilities are 0 and their values count for nothing;
- S_j = Σ_d Q_d · Kᵀ_dj for the key pieces j (Kᵀ_dj is a K piece read column-major);
- the row maxima: each S_j reduced along its rows (`pc.nv.reduce`), the pieces combined with
  a per-element max; P_j = exp(S_j - m) per element; the row sums l · α + Σ_j P_j · ones
  (the rounded P that multiplies V, as the workgroup kernel does); O_d = O_d · α +
  Σ_j P_j · V_jd.
The row state (m, l, α) is 16 x 16 accumulators that hold each row's value in every column,
the layout of the scores, so it needs no smearing between widths. The scores are scaled in
f32 (Q is used as loaded). The key blocks that need no per-element masking (all keys inside
the sequence and, causal, at or before the workgroup's first query) run in a loop of their
own.
"""
from __future__ import annotations

import functools

import pycoop as pc
from pycoop import f16, f32, u32

from .args import check_bool
from .attention_parts import (ELEMENT, F32_LOWEST, OUT, causal_score, check_tile, divide,
                              exp_minus, in_sequence, larger, log_sum_exp, rows_layout,
                              tile_and_head)
from .limits import SHARED_BYTES

U4 = pc.vec(u32, 4)


def shared_bytes(head_dim: int, Bc: int) -> int:
    """The shared memory of one key block's K and V."""
    return 2 * Bc * head_dim * 2


def check_staged(name: str, head_dim: int, Bc: int, subgroups: int, dtype: str,
                 out: str, fp: str = "exact") -> None:
    """The errors a configuration of the staged kernel gives before anything is built."""
    check_tile(name, head_dim, Bc, dtype, out, fp)
    if not isinstance(subgroups, int) or isinstance(subgroups, bool) or not 1 <= subgroups <= 32:
        raise ValueError(f"{name}: subgroups (16 query rows each) must be an int from 1 to 32, "
                         f"got {subgroups!r}")
    if shared_bytes(head_dim, Bc) > SHARED_BYTES:
        raise ValueError(f"{name}: a key block's K and V take {shared_bytes(head_dim, Bc)} "
                         f"bytes of shared memory (Bc={Bc}, head_dim={head_dim}), more than "
                         f"{SHARED_BYTES}; use Bc <= {SHARED_BYTES // (4 * head_dim) // 16 * 16}")


@functools.cache
def attention_prefill_staged(head_dim: int = 128, Bc: int = 64, subgroups: int = 8,
                             causal: bool = False, mask: bool = False, dtype: str = "f16",
                             out: str = "f16", fp: str = "exact"):
    """The staged prefill kernel (module docstring) for one configuration: `subgroups`
    subgroups of 32 invocations, 16 query rows each (Br = 16 · subgroups rows per workgroup),
    key blocks of Bc keys. Parameters and grid as `attention_prefill`'s: Q (batch, heads,
    queries, head_dim) of `dtype`, K and V (batch, kv_heads, keys, head_dim) of `dtype` bound
    as uvec4 (`K.view(np.uint32)`), with `mask` Mask (queries, keys) f16, O (batch, heads,
    queries, head_dim) of `out`, LSE (batch, heads, queries) f32, then queries, keys, heads,
    kv_heads and scale; the grid is (ceil(queries / Br), batch · heads)."""
    check_staged("attention_prefill_staged", head_dim, Bc, subgroups, dtype, out, fp)
    for flag, v in (("causal", causal), ("mask", mask)):
        check_bool("attention_prefill_staged", flag, v)
    D, el = head_dim, ELEMENT[dtype]
    Br, WG = 16 * subgroups, 32 * subgroups
    nd, nj = D // 16, Bc // 16
    A = pc.coopmat[el, pc.Subgroup, 16, 16, pc.UseA]
    B = pc.coopmat[el, pc.Subgroup, 16, 16, pc.UseB]
    Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]
    MaskT = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.Accumulator]
    Out = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.Accumulator] if out == "f16" else Acc
    OutEl = OUT[out]
    total = Bc * D // 8                     # uvec4 of a block's K (and of its V)
    per = -(-total // WG)                   # ... that each invocation copies

    def piece(j: int, d: int) -> int:
        """The first uvec4 of piece (key block j, dimension block d) in shared memory."""
        return (j * nd + d) * 32

    @pc.func
    def body(Q, K, V, Mask, O, LSE, Sq, Skv, H, Hkv, scale):
        sk, sv = pc.shared(U4, total), pc.shared(U4, total)
        tile, bh = tile_and_head(causal, head_dim)            # causal: heaviest first
        w0 = tile * Br                                        # the workgroup's first query
        q0 = w0 + pc.subgroup_id() * 16                       # this subgroup's
        bkv = (bh // H) * Hkv + (bh % H) // (H // Hkv)        # the K/V head of query head bh
        lq = rows_layout(bh * Sq, Sq, D)
        if mask:
            lm = (pc.nv.tensor_layout(2, clamp="constant").dimension(Sq, Skv)
                  .clamp_value(f16(float("-inf"))))          # -inf: keys past the sequence
        q = [pc.nv.load_tensor(Q, lq.slice(bh * Sq + q0, 16, 16 * d, 16), A) for d in range(nd)]
        ones = B.fill(1.0)
        m, l, o = Acc.fill(F32_LOWEST), Acc.fill(0.0), [Acc.fill(0.0) for _ in range(nd)]
        kend = pc.min(Skv, w0 + Br) if causal else Skv      # later keys: hidden from the tile
        kfull = (pc.min(Skv, w0 + 1) if causal else Skv) // Bc * Bc   # no masking below
        # the uvec4 this invocation copies: u -> piece u // 32, its row (u % 32) // 2 and
        # half u % 2; 32 consecutive invocations store one piece
        t = pc.local_invocation_index()
        us = [t + i * WG for i in range(per)]
        where = [(u // 32 // nd * 16 + u % 32 // 2, (u // 32 % nd) * 2 + u % 2) for u in us]

        def fetch(k0):
            """The K and V vectors of the block from k0 (rows clamped to the last key)."""
            at = [(bkv * Skv + pc.min(k0 + r, Skv - 1)) * (D // 8) + c for r, c in where]
            return [K[a] for a in at], [V[a] for a in at]

        def stage(ks, vs):
            for u, a, b in zip(us, ks, vs):
                if total % WG == 0 or u < total:
                    sk[u] = a
                    sv[u] = b

        def scores(k0, edge: bool):
            s = [Acc.fill(0.0) for _ in range(nj)]
            for d in range(nd):
                for j in range(nj):      # Kᵀ_dj: the K piece (j, d) read column-major
                    s[j] = pc.mul_add(q[d], B.load(sk, piece(j, d), 2, "col_major"), s[j])
            for j in range(nj):
                s[j] = s[j] * scale
                if mask:
                    mb = pc.nv.load_tensor(Mask, lm.slice(q0, 16, k0 + 16 * j, 16), MaskT)
                    s[j] = s[j] + pc.nv.convert(mb, Acc)
                if edge and causal:
                    s[j] = pc.nv.per_element(s[j], causal_score, k0 + 16 * j, kend, q0)
                elif edge:
                    s[j] = pc.nv.per_element(s[j], in_sequence, k0 + 16 * j, kend)
            return s

        def attend(m, l, o, s):
            top = pc.nv.reduce(s[0], "row", "max")
            for x in s[1:]:
                top = pc.nv.per_element(top, larger, pc.nv.reduce(x, "row", "max"))
            m_new = pc.nv.per_element(m, larger, top)
            alpha = pc.nv.per_element(m, exp_minus, m_new)       # rescales what came before
            p = [pc.nv.convert(pc.nv.per_element(x, exp_minus, m_new), A) for x in s]
            l = l * alpha
            for pj in p:                 # the row sums on the tensor cores
                l = pc.mul_add(pj, ones, l)
            o = [x * alpha for x in o]
            for d in range(nd):
                for j in range(nj):
                    o[d] = pc.mul_add(p[j], B.load(sv, piece(j, d), 2), o[d])
            return m_new, l, o

        def blocks(m, l, o, kb, ke, edge: bool):
            ahead = fetch(kb)
            for k0 in pc.range(kb, ke, Bc):
                pc.barrier()             # every subgroup is done with the last block
                stage(*ahead)
                pc.barrier()
                ahead = fetch(k0 + Bc)   # in flight during this block's math
                m, l, o = attend(m, l, o, scores(k0, edge))
            return m, l, o

        m, l, o = blocks(m, l, o, u32(0), kfull, False)
        m, l, o = blocks(m, l, o, kfull, kend, True)
        for d in range(nd):
            od = pc.nv.per_element(o[d], divide, l)
            pc.nv.store_tensor(O, lq.slice(bh * Sq + q0, 16, 16 * d, 16),
                               od if Out == Acc else pc.nv.convert(od, Out))
        # one column of the row-wise log-sum-exp: the others fall outside a width of 1
        pc.nv.store_tensor(LSE, rows_layout(bh * Sq, Sq, 1).slice(bh * Sq + q0, 16, 0, 16),
                           pc.nv.per_element(m, log_sum_exp, l))

    if mask:
        @pc.kernel(workgroup_size=WG, subgroup_size=32, fp=fp)
        def attention_prefill_staged(Q: pc.ReadBuffer[el], K: pc.ReadBuffer[U4],
                                     V: pc.ReadBuffer[U4], Mask: pc.ReadBuffer[f16],
                                     O: pc.WriteBuffer[OutEl], LSE: pc.WriteBuffer[f32], Sq: u32,
                                     Skv: u32, H: u32, Hkv: u32, scale: f32):
            body(Q, K, V, Mask, O, LSE, Sq, Skv, H, Hkv, scale)
    else:
        @pc.kernel(workgroup_size=WG, subgroup_size=32, fp=fp)
        def attention_prefill_staged(Q: pc.ReadBuffer[el], K: pc.ReadBuffer[U4],
                                     V: pc.ReadBuffer[U4], O: pc.WriteBuffer[OutEl],
                                     LSE: pc.WriteBuffer[f32], Sq: u32, Skv: u32, H: u32,
                                     Hkv: u32, scale: f32):
            body(Q, K, V, None, O, LSE, Sq, Skv, H, Hkv, scale)
    return attention_prefill_staged
