"""The kinds of a mask's blocks, found by a pre-pass so that the prefill loads only the blocks
that need it.

Masks as models build them (a causal band, padding, a sliding window) are mostly 0 or -inf:
a block of only zeros changes no score, and a block of only -inf hides every key of it. The
prefill loads a mask block as an accumulator matrix, which costs more than the block's whole
product on the H100 (bench/results/2026-11-27-h100-attention-defaults.md), so
`mask_block_kinds` marks each (query tile, key block) first and the prefill skips what it can:

- no bit `NEEDED` (only -inf): the block is skipped, its K and V not even loaded. A block of
  -inf adds 0 to every sum and output and leaves the row maxima as they were, so loading it
  would only rescale what came before by 2^(k·m − k·m), which is 1 up to the rounding of
  k·m in base 2's multiply-add (a few units in the last place of f32; exactly 1 in base e);
- no bit `MASKED` (only zeros, +0 or -0): the block's scores are computed without the mask;
- both bits: the mask block is loaded and added.

Entries past the queries or the keys do not count: the prefill hides those keys per element
and discards those rows."""
from __future__ import annotations

import functools

import numpy as np

import pycoop as pc
from pycoop import f16, u32

MASKED = 1    # a block entry is neither +0 nor -0: the block's mask must be added
NEEDED = 2    # a block entry is not -inf: the block adds to the result


@functools.cache
def mask_block_kinds(rows: int, Bc: int, invocations: int = 256):
    """The pre-pass kernel: Mask (queries, keys) f16, Blocks (ceil(queries / rows),
    ceil(keys / Bc)) u32, zeroed before the launch; then queries and keys. The grid is
    (ceil(keys / Bc), ceil(queries / rows)): each workgroup reads one rows x Bc block and ORs
    the bits of its entries into the block's word, once per subgroup."""
    if rows * Bc % invocations:
        raise ValueError(f"mask_block_kinds: a {rows} x {Bc} block is read by {invocations} "
                         f"invocations, so it must hold a multiple of {invocations} entries")
    inf = f16(float("-inf"))

    @pc.kernel(workgroup_size=invocations)
    def mask_block_kinds(Mask: pc.ReadBuffer[f16], Blocks: pc.Buffer[u32], Sq: u32, Skv: u32):
        k0, q0 = pc.workgroup_id.x * Bc, pc.workgroup_id.y * rows
        t = pc.local_invocation_index()
        bits = u32(0)
        for i in range(rows * Bc // invocations):
            u = t + i * invocations
            r, c = q0 + u // Bc, k0 + u % Bc
            x = Mask[pc.min(r, Sq - 1) * Skv + pc.min(c, Skv - 1)]     # clamped: not counted
            inside = (r < Sq) & (c < Skv)
            bits = bits | pc.select(inside & (x != f16(0.0)), u32(MASKED), u32(0)) \
                | pc.select(inside & (x != inf), u32(NEEDED), u32(0))
        bits = pc.subgroup.or_(bits)
        if pc.subgroup.elect() & (bits != 0):
            pc.atomic.or_(Blocks, pc.workgroup_id.y * pc.num_workgroups.x + pc.workgroup_id.x,
                          bits)
    return mask_block_kinds


def mask_block_kinds_reference(mask: np.ndarray, rows: int, Bc: int) -> np.ndarray:
    """What `mask_block_kinds` writes, from NumPy (the test reference)."""
    m = np.asarray(mask, np.float16)
    Sq, Skv = m.shape
    out = np.zeros((-(-Sq // rows), -(-Skv // Bc)), np.uint32)
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            b = m[i * rows:(i + 1) * rows, j * Bc:(j + 1) * Bc]
            out[i, j] = MASKED * bool((b != 0).any()) | NEEDED * bool((b != -np.inf).any())
    return out
