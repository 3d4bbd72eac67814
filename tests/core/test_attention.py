"""pycoop.kernels.attention on the emulator against an f64 NumPy attention (prefill and
split-KV decode), with the emulator's undefined-behaviour checks on (out-of-bounds tensor
accesses, conflicting stores and non-uniform matrix operands are reported as errors), spirv-val
on every module, and the configuration errors."""
from __future__ import annotations

import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from core_helpers import FEW, SETTINGS
import pycoop as pc
from pycoop.kernels import (AttentionResult, Softmax, tuned_softmax, attention, attention_decode,
                            attention_decode_vector, attention_merge, attention_prefill,
                            attention_reference, mask_as_f16, prefill_invocations,
                            prefill_splits)
from pycoop import u32
from pycoop.kernels.attention_parts import heavy_first, heavy_first_heads
from pycoop.kernels.attention_decode import default_splits, default_subgroups, fits_shared
from pycoop.kernels.attention_mask import mask_block_kinds, mask_block_kinds_reference

# small tiles keep the emulator fast; the GPU defaults are checked by spirv-val below
TILE = {"Br": 32, "Bc": 32, "invocations": 128}
# f16 P (and its row sums) limit the accuracy: about 2^-11 relative, as torch's f16 kernels
OUT_TOL, LSE_TOL = 2e-3, 2e-3


def operands(B, H, Hkv, Sq, Skv, D, seed=0, masked=False, dtype=np.float16):
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((B, H, Sq, D)).astype(dtype)
    K = rng.standard_normal((B, Hkv, Skv, D)).astype(dtype)
    V = rng.standard_normal((B, Hkv, Skv, D)).astype(dtype)
    mask = None
    if masked:     # additive values and some hidden keys; key 0 stays visible in every row
        mask = (rng.standard_normal((Sq, Skv)) * 2).astype(np.float16)
        mask[rng.random((Sq, Skv)) < 0.3] = -np.inf
        mask[:, 0] = 0
    return Q, K, V, mask


def check(r, Q, K, V, mask=None, causal=False, tol=OUT_TOL):
    ref, lse = attention_reference(Q, K, V, mask=mask, causal=causal)
    assert r.out.shape == Q.shape and r.lse.shape == Q.shape[:3]
    np.testing.assert_allclose(r.out.astype(np.float64), ref, rtol=0, atol=tol)
    np.testing.assert_allclose(r.lse, lse, rtol=0, atol=LSE_TOL)


@SETTINGS
@given(B=st.integers(1, 2), Hkv=st.integers(1, 2), G=st.sampled_from([1, 2, 4]),
       Sq=st.integers(1, 70), extra=st.integers(0, 40), causal=st.booleans(),
       masked=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_prefill_matches_numpy(B, Hkv, G, Sq, extra, causal, masked, seed):
    """Ragged sequence lengths (tensor-layout clamping at the tile edges), GQA ratios, causal
    or not, with or without an additive mask."""
    Q, K, V, mask = operands(B, G * Hkv, Hkv, Sq, Sq + extra, 64, seed, masked)
    r = attention(Q, K, V, mask=mask, causal=causal, out="f32", backend="emulator",
                  decode=False, **TILE)
    check(r, Q, K, V, mask, causal)


# every combination of the Softmax options, and narrow row states (16 columns of Bc = 32)
SOFTMAX = ([Softmax(*bits) for bits in np.ndindex(2, 2, 2)]
           + [Softmax(exp2, False, prefetch, 16) for exp2, prefetch in np.ndindex(2, 2)])


@SETTINGS
@given(Hkv=st.integers(1, 2), G=st.sampled_from([1, 2]), Sq=st.integers(1, 70),
       extra=st.integers(0, 40), causal=st.booleans(), masked=st.booleans(),
       sm=st.sampled_from(SOFTMAX), subgroup=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_prefill_options_match_numpy(Hkv, G, Sq, extra, causal, masked, sm, subgroup, seed):
    """The Softmax options (exp2 with the scale in the exponent's multiply-add, lazy row sums,
    prefetched K/V, narrow row maxima and sums) at workgroup scope and at subgroup scope (2
    subgroups of 16 rows each, their causal bounds and tile edges apart), on ragged lengths,
    causal or masked."""
    Q, K, V, mask = operands(1, G * Hkv, Hkv, Sq, Sq + extra, 64, seed, masked)
    tile = ({"Br": 32, "Bc": 32, "invocations": 64, "scope": "subgroup"} if subgroup
            else TILE)
    r = attention(Q, K, V, mask=mask, causal=causal, out="f32", backend="emulator",
                  decode=False, softmax=sm, **tile)
    check(r, Q, K, V, mask, causal)


@SETTINGS
@given(B=st.integers(1, 2), Hkv=st.integers(1, 2), G=st.sampled_from([1, 2, 4]),
       Sq=st.integers(1, 70), extra=st.integers(0, 40), causal=st.booleans(),
       masked=st.booleans(), D=st.sampled_from([64, 80, 96, 112, 128, 256]),
       tile=st.sampled_from([(16, 32), (32, 64), (16, 96), (48, 64)]),
       out=st.sampled_from(["f16", "f32"]), seed=st.integers(0, 2 ** 16))
def test_staged_prefill_matches_numpy(B, Hkv, G, Sq, extra, causal, masked, D, tile, out, seed):
    """The staged kernel (16 x 16 pieces, K and V in shared memory): ragged lengths (a
    workgroup's key rows clamped to the last key, its query rows past the end discarded),
    GQA, causal bounds that differ between the subgroups of a workgroup, masks, every head
    dim, key blocks of 16 to 48 keys (copies that leave some invocations idle: 80 x 16 / 8
    uvec4 over 96 invocations), f16 and f32 outputs."""
    Bc, inv = tile
    Bc = min(Bc, 32768 // (4 * D) // 16 * 16)
    Q, K, V, mask = operands(B, G * Hkv, Hkv, Sq, Sq + extra, D, seed, masked)
    r = attention(Q, K, V, mask=mask, causal=causal, out=out, backend="emulator", decode=False,
                  scope="staged", Br=inv // 2, Bc=Bc, invocations=inv)
    check(r, Q, K, V, mask, causal, tol=OUT_TOL if out == "f32" else 4e-3)


@SETTINGS
@given(Hkv=st.integers(1, 2), G=st.sampled_from([1, 2]), Sq=st.integers(1, 70),
       Skv=st.integers(1, 200), splits=st.integers(2, 9), causal=st.booleans(),
       masked=st.booleans(), blocks=st.booleans(), sm=st.sampled_from(SOFTMAX),
       subgroup=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_split_prefill_matches_numpy(Hkv, G, Sq, Skv, splits, causal, masked, blocks, sm,
                                     subgroup, seed):
    """The prefill with its keys split over grid z and merged (`splits`): chunks of whole
    key blocks, the last one ragged, chunks past the keys or (causal) past a tile's queries
    that see nothing, masks with and without their block kinds, every Softmax (the merge in
    base 2 or e as the partial maxima are kept), workgroup and subgroup scope."""
    Skv = max(Skv, Sq) if causal else Skv
    Q, K, V, mask = operands(1, G * Hkv, Hkv, Sq, Skv, 64, seed, masked)
    tile = ({"Br": 32, "Bc": 32, "invocations": 64, "scope": "subgroup"} if subgroup
            else TILE)
    r = attention(Q, K, V, mask=mask, causal=causal, out="f32", backend="emulator",
                  decode=False, softmax=sm, splits=splits, mask_blocks=blocks, **tile)
    check(r, Q, K, V, mask, causal)
    chunk = -(-Skv // (splits * 32)) * 32
    assert len(r.kernel_ms) == (-(-Skv // chunk) > 1) + 1 + (masked and blocks)


def test_split_prefill_is_the_unsplit_one_merged():
    """Each split sees its own keys only: two splits of a 64-key sequence give the unsplit
    outputs up to the merge's rounding, f16 output and device arrays included."""
    Q, K, V, mask = operands(2, 4, 2, 40, 64, 128, seed=3, masked=True)
    one = attention(Q, K, V, mask=mask, backend="emulator", decode=False, **TILE)
    two = attention(Q, K, V, mask=mask, backend="emulator", decode=False, splits=2, **TILE)
    assert len(two.kernel_ms) == len(one.kernel_ms) + 1
    np.testing.assert_allclose(two.out.astype(np.float32), one.out.astype(np.float32),
                               atol=2e-3)
    np.testing.assert_allclose(two.lse, one.lse, atol=LSE_TOL)
    dev = [pc.asarray(a, backend="emulator") for a in (Q, K, V, mask)]
    r = attention(*dev[:3], mask=dev[3], backend="emulator", decode=False, splits=2, **TILE)
    np.testing.assert_array_equal(r.out.numpy(), two.out)


def test_split_prefill_bf16_causal_with_heads_in_groups():
    """bf16 inputs, causal tiles taken heaviest first over 12 heads (groups of 8 and 4)
    with the keys in 3 chunks: every (tile, head, chunk) once."""
    Q, K, V, _ = operands(1, 12, 4, 70, 96, 64, seed=9, dtype=ml_dtypes.bfloat16)
    r = attention(Q, K, V, causal=True, out="f32", backend="emulator", decode=False, splits=3,
                  **TILE)
    assert len(r.kernel_ms) == 2
    check(r, Q, K, V, causal=True, tol=4e-3)


@pytest.mark.parametrize("workgroups,keys,expected", [
    (128, 4096, 1), (4096, 32768, 1), (66, 65536, 2), (16, 32768, 8), (1, 1100, 2),
    (1, 511, 1), (2, 100000, 66), (200, 100000, 1)])
def test_prefill_splits_fill_one_wave_with_long_enough_chunks(workgroups, keys, expected):
    assert prefill_splits(workgroups, keys) == expected


def test_the_prefill_splits_by_default_where_its_grid_leaves_sms_idle():
    """One query tile of one head over 1100 keys: two chunks of 544 and 556 keys (whole
    blocks of 32), merged; the staged kernel stays whole."""
    Q, K, V, _ = operands(1, 1, 1, 20, 1100, 64, seed=5)
    r = attention(Q, K, V, out="f32", backend="emulator", decode=False, **TILE)
    assert len(r.kernel_ms) == 2
    check(r, Q, K, V)
    r = attention(Q, K, V, out="f32", backend="emulator", decode=False, scope="staged",
                  Br=32, Bc=32, invocations=64)
    assert len(r.kernel_ms) == 1
    check(r, Q, K, V)


def heavy_first_order(group_heads: int):
    @pc.kernel(workgroup_size=1)
    def order(Out: pc.Buffer[u32]):
        tile, bh = heavy_first(pc.workgroup_id.x, pc.workgroup_id.y, pc.num_workgroups.x,
                               pc.num_workgroups.y, group_heads)
        i = pc.workgroup_id.y * pc.num_workgroups.x + pc.workgroup_id.x
        Out[2 * i] = tile
        Out[2 * i + 1] = bh
    return order


@pytest.mark.parametrize("tiles, heads, group_heads",
                         [(1, 1, 8), (3, 12, 8), (5, 8, 8), (4, 17, 8), (2, 3, 8), (3, 40, 16),
                          (2, 9, 4), (3, 5, 1)])
def test_causal_tiles_run_heaviest_first_in_groups_of_heads(tiles, heads, group_heads):
    """Every (tile, head) once; within each group of `group_heads` heads (the last one
    smaller) the workgroups in linear order take the last tile of each head first."""
    out = np.zeros(2 * tiles * heads, np.uint32)
    heavy_first_order(group_heads)[(tiles, heads)](out, backend="emulator")
    order = [tuple(p) for p in out.reshape(-1, 2)]
    assert sorted(order) == [(t, h) for t in range(tiles) for h in range(heads)]
    want = []
    for first in range(0, heads, group_heads):
        group = range(first, min(heads, first + group_heads))
        want += [(t, h) for t in reversed(range(tiles)) for h in group]
    assert order == want


def test_heavy_first_groups_span_the_same_kv_bytes_at_every_head_dim():
    assert [heavy_first_heads(d) for d in (64, 80, 96, 112, 128, 256)] == [16, 12, 10, 9, 8, 4]


def test_causal_prefill_over_a_partial_group_of_heads():
    """20 heads at head dim 64: a group of 16 and one of 4, each with its tiles heaviest
    first."""
    Q, K, V, _ = operands(5, 4, 2, 70, 75, 64, seed=9)
    r = attention(Q, K, V, causal=True, out="f32", backend="emulator", decode=False, **TILE)
    check(r, Q, K, V, causal=True)


def test_staged_prefill_bf16_and_device_arrays():
    Q, K, V, _ = operands(1, 4, 2, 33, 40, 64, seed=4, dtype=ml_dtypes.bfloat16)
    r = attention(Q, K, V, causal=True, out="f32", backend="emulator", decode=False,
                  scope="staged", Br=32, Bc=32, invocations=64)
    check(r, Q, K, V, causal=True, tol=2e-2)       # bf16 P: 2^-8 relative
    Q, K, V, mask = operands(2, 2, 1, 21, 60, 128, seed=5, masked=True)
    q, k, v, mk = (pc.asarray(a, backend="emulator") for a in (Q, K, V, mask))
    r = attention(q, k, v, mask=mk, out="f32", backend="emulator", decode=False,
                  scope="staged", Br=16, Bc=32, invocations=32)
    assert isinstance(r.out, pc.Array)
    check(AttentionResult(r.out.numpy(), r.lse.numpy(), 0, ""), Q, K, V, mask)


@FEW
@given(G=st.sampled_from([1, 2, 4, 8]), Sq=st.integers(1, 2), Skv=st.integers(1, 300),
       splits=st.integers(1, 9), sm=st.sampled_from(SOFTMAX),
       config=st.sampled_from([("workgroup", 32, 32, 128), ("subgroup", 16, 32, 64),
                               ("subgroup", 16, 32, 96)]),
       seed=st.integers(0, 2 ** 16))
def test_decode_options_match_numpy(G, Sq, Skv, splits, sm, config, seed):
    """Split-KV decode with the Softmax options (exp2: maxima and sums in base 2, merged in
    base 2 by attention_merge) and at subgroup scope: one chunk per subgroup, the splits
    rounded up to whole workgroups (chunks past the keys weigh 0)."""
    scope, rows, Bc, inv = config
    Sq = min(Sq, rows // G)
    Q, K, V, _ = operands(1, 2 * G, 2, Sq, Skv, 64, seed)
    r = attention(Q, K, V, out="f32", backend="emulator", splits=splits, softmax=sm,
                  decode_kernel="coopmat", decode_rows=rows, decode_Bc=Bc, decode_invocations=inv, decode_scope=scope)
    check(r, Q, K, V)
    assert len(r.kernel_ms) == 2


@pytest.mark.parametrize("splits", [1, 5, 8, 13])
def test_merge_of_the_coopmat_decode(splits):
    """The cooperative-matrix decode's chunks merged by attention_merge, in base e (the
    default Softmax) and base 2 (Softmax(exp2=True)), with 1 to 8 chunks loaded ahead (a
    different order of rescaling: roundings only), whatever the remainder."""
    Q, K, V, _ = operands(1, 8, 2, 1, 700, 64, seed=splits)
    for sm in (Softmax(), Softmax(exp2=True)):
        plain = attention(Q, K, V, out="f32", backend="emulator", splits=splits,
                          decode_kernel="coopmat", softmax=sm, merge_unroll=1)
        check(plain, Q, K, V)
        for u in (2, 3, 8):
            r = attention(Q, K, V, out="f32", backend="emulator", splits=splits,
                          merge_unroll=u, decode_kernel="coopmat", softmax=sm)
            np.testing.assert_allclose(r.out, plain.out, rtol=0, atol=1e-6)
            np.testing.assert_allclose(r.lse, plain.lse, rtol=0, atol=1e-6)


def test_device_arrays_in_and_out():
    """pc.Array inputs give pc.Array results on the same backend (no host copies)."""
    Q, K, V, mask = operands(1, 4, 2, 40, 50, 64, seed=9, masked=True)
    q, k, v, m = (pc.asarray(a, backend="emulator") for a in (Q, K, V, mask))
    r = attention(q, k, v, mask=m, out="f32", backend="emulator", decode=False, **TILE)
    assert isinstance(r.out, pc.Array) and isinstance(r.lse, pc.Array)
    ref, lse = attention_reference(Q, K, V, mask=mask)
    np.testing.assert_allclose(r.out.numpy(), ref, rtol=0, atol=OUT_TOL)
    np.testing.assert_allclose(r.lse.numpy(), lse, rtol=0, atol=LSE_TOL)
    r = attention(pc.asarray(Q[:, :, :1], backend="emulator"), k, v, out="f16",
                  backend="emulator")                                     # decode
    ref, _ = attention_reference(Q[:, :, :1], K, V)
    np.testing.assert_allclose(r.out.numpy().astype(np.float64), ref, rtol=0, atol=4e-3)
    with pytest.raises(ValueError, match="all be pc.Arrays or all NumPy"):
        attention(q, K, V, backend="emulator")


@FEW
@given(G=st.sampled_from([1, 2, 4, 8]), Sq=st.integers(1, 4), Skv=st.integers(1, 400),
       splits=st.integers(1, 9), seed=st.integers(0, 2 ** 16))
def test_decode_matches_numpy(G, Sq, Skv, splits, seed):
    """The G query heads of a K/V head packed as the rows of one matrix, the keys split
    across workgroups (the last chunk partial) and combined."""
    if G * Sq > 32:
        Sq = 32 // G
    Q, K, V, _ = operands(1, 2 * G, 2, Sq, Skv, 64, seed)
    r = attention(Q, K, V, out="f32", backend="emulator", splits=splits, decode_kernel="coopmat")
    check(r, Q, K, V)


@pytest.mark.parametrize("D", [80, 96, 112, 128, 256])
def test_head_dims(D):
    Q, K, V, _ = operands(1, 2, 1, 20, 45, D, seed=D)
    check(attention(Q, K, V, causal=True, out="f32", backend="emulator", decode=False,
                    Br=16, Bc=16, invocations=64), Q, K, V, causal=True)
    Q1 = Q[:, :, :1]
    for kind in ("auto", "coopmat"):          # auto: the vector decode at 128 and 256
        check(attention(Q1, K, V, out="f32", backend="emulator", splits=2, decode_kernel=kind),
              Q1, K, V)


def test_f16_output_and_scale():
    Q, K, V, mask = operands(2, 4, 2, 37, 50, 64, seed=3, masked=True)
    r = attention(Q, K, V, mask=mask, scale=0.3, backend="emulator", decode=False, **TILE)
    ref, _ = attention_reference(Q, K, V, mask=mask, scale=0.3)
    assert r.out.dtype == np.float16
    np.testing.assert_allclose(r.out.astype(np.float64), ref, rtol=0, atol=4e-3)


def test_bf16_inputs():
    Q, K, V, _ = operands(1, 2, 2, 33, 40, 64, seed=4, dtype=ml_dtypes.bfloat16)
    r = attention(Q, K, V, causal=True, out="f32", backend="emulator", decode=False, **TILE)
    check(r, Q, K, V, causal=True, tol=2e-2)       # bf16 P: 2^-8 relative


def test_every_output_element_is_written_once():
    """Launched directly with NaN-filled outputs: the stores cover every row of every head
    exactly (the rows past the end of a head are discarded, not written into the next one)."""
    B, H, Hkv, Sq, Skv, D = 2, 4, 2, 45, 45, 64
    Q, K, V, _ = operands(B, H, Hkv, Sq, Skv, D, seed=5)
    O = np.full((B, H, Sq, D), np.nan, np.float32)
    LSE = np.full((B, H, Sq), np.nan, np.float32)
    attention_prefill(D, 32, 32, 128, True, False, "f16", "f32")[(2, B * H)](
        Q, K, V, O, LSE, Sq, Skv, H, Hkv, 0.125, backend="emulator")
    ref, lse = attention_reference(Q, K, V, causal=True, scale=0.125)
    np.testing.assert_allclose(O, ref, rtol=0, atol=OUT_TOL)
    np.testing.assert_allclose(LSE, lse, rtol=0, atol=LSE_TOL)


@pytest.mark.parametrize("D,causal,scope,Br,Bc,expected", [
    (64, False, "workgroup", 128, 64, 128), (64, False, "workgroup", 128, 32, 128),
    (64, False, "workgroup", 128, 128, 256), (64, True, "workgroup", 128, 64, 128),
    (128, False, "workgroup", 128, 64, 256), (64, False, "workgroup", 256, 64, 256),
    (64, False, "workgroup", 64, 64, 128),
    (64, False, "subgroup", 128, 64, 256), (64, False, "staged", 64, 64, 128),
    (128, True, "staged", 128, 32, 256)])
def test_prefill_invocations(D, causal, scope, Br, Bc, expected):
    """The invocations attention() takes where none are given: 128 for the head-dim-64 tiles
    of at most 128 rows and 64 keys, causal or not (the fastest on the H100), 2 Br at
    staged scope, else 256."""
    assert prefill_invocations(D, causal, scope, Br, Bc) == expected


@pytest.mark.parametrize("masked", [False, True])
def test_default_tile_at_head_dim_64(masked):
    """attention()'s own tile at head dim 64 (128 x 64, 128 invocations; with a mask, each
    invocation copies 8 uvec4s of it per block) and a staged call without invocations."""
    Q, K, V, mask = operands(1, 2, 1, 40, 136, 64, seed=5, masked=masked)
    check(attention(Q, K, V, mask=mask, out="f32", backend="emulator", decode=False),
          Q, K, V, mask)
    if not masked:
        check(attention(Q, K, V, out="f32", backend="emulator", scope="staged", Br=32,
                        Bc=32, decode=False), Q, K, V)


@pytest.mark.parametrize("kernel", [
    attention_prefill(), attention_prefill(128, causal=True, mask=True, out="f32"),
    attention_prefill(64, 64, 64, 128, causal=True), attention_prefill(256, 64, 64, 256),
    attention_prefill(80, 64, 32, dtype="bf16", mask=True), attention_decode(),
    attention_decode(64, 64, 64, 128, "bf16"), attention_merge(80, exp2=False),
    attention_merge(112, "f32", exp2=False),
    attention_prefill(128, 64, 32, 128, causal=True, mask=True, scope="subgroup",
                      softmax=Softmax(True, True, True)),
    attention_prefill(64, softmax=Softmax(exp2=True, lazy_sum=True), fp="fast"),
    attention_prefill(128, 128, 64, 256, scope="staged"),
    attention_prefill(256, 64, 32, 128, True, True, "bf16", "f32", scope="staged"),
    attention_prefill(80, 32, 16, 64, True, scope="staged"),
    attention_prefill(128, softmax=Softmax(prefetch=True), mask=True),
    attention_decode(128, 16, 32, 128, scope="subgroup", softmax=Softmax(True, True, True)),
    attention_merge(96, "f16", unroll=8),
    attention_prefill(128, softmax=Softmax(row_width=32), causal=True),
    attention_decode(128, softmax=Softmax(exp2=True, prefetch=True, row_width=32)),
    attention_prefill(128, mask="words"), attention_prefill(64, causal=True, mask="words"),
    attention_prefill(128, mask="words", blocks=True),
    attention_prefill(64, 128, 64, 128), attention_prefill(64, 128, 64, 128, mask="words", blocks=True),
    attention_prefill(128, 64, 32, 128, causal=True, mask=True, scope="subgroup", blocks=True),
    attention_prefill(128, 128, 32, 256, split=True),
    attention_prefill(128, 128, 32, 256, mask="words", blocks=True, split=True),
    attention_prefill(64, 64, 64, 128, causal=True, mask=True, scope="subgroup", split=True),
    mask_block_kinds(128, 64), mask_block_kinds(16, 16),
], ids=lambda k: "")
def test_modules_pass_spirv_val(kernel):
    spv = kernel.compile().spv            # validated with spirv-val
    assert len(spv) > 1000


@pytest.mark.parametrize("call,message", [
    (lambda: attention_prefill(100), "head_dim must be one of"),
    (lambda: attention_prefill(128, 40), "query block must be a multiple of 16"),
    (lambda: attention_prefill(128, 64, 8), "key block Bc must be a multiple of 16"),
    (lambda: attention_prefill(128, dtype="f32"), "dtype must be 'f16' or 'bf16'"),
    (lambda: attention_merge(64, "i8"), "out must be 'f16' or 'f32'"),
    (lambda: attention_prefill(128, scope="warp"),
     r"scope must be one of \('workgroup', 'subgroup', 'staged'\)"),
    (lambda: attention_prefill(128, 128, 64, 128, scope="staged"),
     "each subgroup of 32 invocations takes 16 query rows, so Br must be invocations / 2 = 64"),
    (lambda: attention_prefill(128, 64, 64, 128, scope="staged", softmax=Softmax(exp2=True)),
     r"the staged kernel computes the softmax one way \(Softmax\(\), in base e\)"),
    (lambda: attention_prefill(256, 64, 64, 128, scope="staged"),
     r"take 65536 bytes of shared memory .* use Bc <= 32"),
    (lambda: attention_decode(128, 32, 64, 128, scope="staged"),
     "attention_decode: scope must be 'workgroup' or 'subgroup'"),
    (lambda: attention_prefill(128, 64, 64, 100, scope="subgroup"),
     "invocations must be a multiple of 32"),
    (lambda: attention_prefill(128, 64, 64, 256, scope="subgroup"),
     r"8 subgroups of 256 invocations each take Br / 8 rows, which must be a multiple of 16"),
    (lambda: attention_decode(128, 16, 32, 48, scope="subgroup"),
     "invocations must be a multiple of 32"),
    (lambda: attention_merge(128, exp2=1), "exp2 must be a bool, got 1"),
    (lambda: attention_merge(72), r"head_dim must be one of \(64, 80, 96, 112, 128, 256\)"),
    (lambda: attention_prefill(128, mask="yes"), "mask must be False, True or 'words'"),
    (lambda: attention_prefill(128, 128, 64, 256, scope="staged", split=True),
     "split .split-KV. takes scope 'workgroup' or 'subgroup', got 'staged'"),
    (lambda: attention_prefill(128, 64, 32, 128, mask="words", scope="subgroup"),
     "mask='words' takes workgroup scope"),
    (lambda: attention_prefill(128, 16, 16, 64, mask="words"),
     r"Br x Bc a multiple of 8 x invocations .* 16 x 16, 64 invocations"),
    (lambda: attention_prefill(128, softmax=Softmax(row_width=24)),
     "row_width must be 0 .* or a multiple of 16 of at most Bc=64, got 24"),
    (lambda: attention_decode(128, 32, 32, softmax=Softmax(row_width=64)),
     "at most Bc=32, got 64"),
    (lambda: attention_prefill(128, softmax=Softmax(lazy_sum=True, row_width=32)),
     "lazy_sum keeps per-column sums .* needs row_width 0 or Bc, got 32"),
])
def test_configuration_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("shapes,kwargs,message", [
    (((1, 6, 8, 64), (1, 4, 8, 64), (1, 4, 8, 64)), {}, r"kv_heads \(4\) must divide the heads \(6\)"),
    (((1, 2, 8, 100), (1, 2, 8, 100), (1, 2, 8, 100)), {}, "head_dim must be one of"),
    (((1, 2, 8, 64), (1, 2, 9, 64), (1, 2, 8, 64)), {}, "K and V must be"),
    (((2, 8, 64), (2, 8, 64), (2, 8, 64)), {}, r"\(batch, heads, sequence, head_dim\)"),
    (((1, 2, 8, 64), (1, 2, 4, 64), (1, 2, 4, 64)), {"causal": True},
     "causal needs at least as many keys as queries"),
    (((1, 2, 8, 64), (1, 2, 9, 64), (1, 2, 9, 64)), {"mask": np.zeros((9, 8), np.float16)},
     r"mask must be \(queries, keys\) = \(8, 9\)"),
])
def test_shape_errors_before_any_work(shapes, kwargs, message):
    Q, K, V = (np.zeros(s, np.float16) for s in shapes)
    with pytest.raises(ValueError, match=message):
        attention(Q, K, V, backend="emulator", **kwargs)


def _dev(a):
    return pc.asarray(a, backend="emulator")


@pytest.mark.parametrize("make,message", [
    (lambda Q: (Q[:0], Q[:0], Q[:0], {}), r"empty batch or heads \(batch=0, heads=2\)"),
    (lambda Q: (Q, _dev(Q), _dev(Q), {}), "must all be pc.Arrays or all NumPy arrays"),
    (lambda Q: (_dev(Q), _dev(Q), _dev(Q), {"mask": np.zeros((8, 8), np.float16)}),
     "must all be pc.Arrays or all NumPy arrays"),
    (lambda Q: (Q, Q, Q, {"mask": np.ones((8, 8), bool)}), "a boolean mask is ambiguous"),
    (lambda Q: (Q, Q, Q, {"mask": np.zeros((8, 8), np.int32)}),
     "the mask must be floating point .* got int32"),
    (lambda Q: (_dev(Q), _dev(Q), _dev(Q), {"mask": _dev(np.zeros((8, 8), np.float32))}),
     "a pc.Array mask must be float16, got float32"),
    (lambda Q: (Q, Q, Q, {"scale": float("inf")}), "scale must be a finite number .* got inf"),
    (lambda Q: (Q, Q, Q, {"mask_loads": "bytes"}), "mask_loads must be 'auto', 'layout' or 'words'"),
    (lambda Q: (Q, Q, Q, {"mask_loads": "words"}),
     r"mask_loads='words' says how the prefill reads a mask, and there is none"),
    (lambda Q: (Q, Q, Q, {"softmax": {"lazy_sum": True}}),
     r"softmax must be a pycoop.kernels.Softmax or None, got \{'lazy_sum': True\}"),
    (lambda Q: (Q, Q, Q, {"softmax": "exp2"}), "softmax must be a pycoop.kernels.Softmax"),
    (lambda Q: (Q, Q, Q, {"softmax": True}), "softmax must be a pycoop.kernels.Softmax"),
    (lambda Q: (Q, Q, Q, {"merge_unroll": 0}), "merge_unroll must be an int >= 1"),
    (lambda Q: (Q, Q, Q, {"Br": "128"}), "Br must be an int >= 1, got '128'"),
    (lambda Q: (Q, Q, Q, {"Bc": None}), "Bc must be an int >= 1, got None"),
    (lambda Q: (Q, Q, Q, {"invocations": 256.0}), "invocations must be an int >= 1 or None"),
    (lambda Q: (Q, Q, Q, {"decode_rows": "32"}), "decode_rows must be an int >= 1"),
    (lambda Q: (Q, Q, Q, {"subgroup_size": True}), "subgroup_size must be an int >= 1"),
    (lambda Q: (Q, Q, Q, {"causal": "yes"}), "causal must be True or False, got 'yes'"),
    (lambda Q: (Q, Q, Q, {"decode": "no"}), "decode must be True or False or None"),
    (lambda Q: (Q, Q, Q, {"mask_blocks": 1}), "mask_blocks must be True or False"),
    (lambda Q: (Q, Q, Q, {"fp": "bogus"}), r"fp must be one of \('exact', 'strict', 'fast'\)"),
    (lambda Q: (Q, Q, Q, {"scale": "0.1"}), "scale must be a number or None, got '0.1'"),
    (lambda Q: (Q.tolist(), Q, Q, {}), "must be float16 or bfloat16, got float64"),
    # the vector decode's options are checked whichever path runs
    (lambda Q: (Q[:, :, :1], Q, Q, {"decode_kernel": "coopmat", "decode_width": 6}),
     r"decode_width \(halves per K and V load\) must be one of \(4, 8\) or None, got 6"),
    (lambda Q: (Q, Q, Q, {"decode_merge": "kernel", "decode": False}),
     "decode_merge must be one of .* got 'kernel'"),
    # and so are the prefill's tiles where the decode runs, and the decode's where the prefill does
    (lambda Q: (Q[:, :, :1], Q, Q, {"scope": "thread"}),
     r"the prefill's Br, Bc, scope, invocations\): scope must be one of .* got 'thread'"),
    (lambda Q: (Q[:, :, :1], Q, Q, {"Br": 7}), r"query block must be a multiple of 16 .* got 7"),
    (lambda Q: (Q[:, :, :1], Q, Q, {"invocations": 3}),
     "invocations must be a multiple of 32 .* got 3"),
    (lambda Q: (Q, Q, Q, {"causal": True, "decode_Bc": 24}),
     r"the decode's decode_rows, decode_Bc, .*: the key block Bc must be a multiple of 16 .* "
     r"got 24"),
    (lambda Q: (Q, Q, Q, {"decode": False, "decode_scope": "x"}),
     "scope must be one of .* got 'x'"),
    (lambda Q: (Q, Q, Q, {"splits": 0}), "splits must be a positive int, got 0"),
    (lambda Q: (Q, Q, Q, {"splits": 2.0}), "splits must be a positive int, got 2.0"),
    (lambda Q: (Q, Q, Q, {"splits": 2, "decode": False, "scope": "staged", "Br": 128,
                          "invocations": 256}),
     "the prefill splits its keys .splits=2. at scope 'workgroup' or 'subgroup', not 'staged'"),
    (lambda Q: (Q, Q[:, :, :6], Q[:, :, :6], {"mask": np.zeros((8, 6), np.float16),
                                              "mask_loads": "words", "decode": False}),
     r"mask_loads='words' .* keys a multiple of 8 \(got 6\)"),
    (lambda Q: (Q, Q, Q, {"mask": np.zeros((8, 8), np.float16), "mask_loads": "words",
                          "scope": "subgroup", "Br": 32, "Bc": 32, "invocations": 64}),
     r"mask_loads='words' .* needs scope='workgroup' \(got 'subgroup'\)"),
    (lambda Q: (Q, Q, Q, {"scale": 0.0, "softmax": Softmax(exp2=True), "decode": False}),
     r"Softmax\(exp2=True\) keeps the row maxima in raw scores, which needs 2\^-24 <= "
     r"scale <= 2\^24"),
])
def test_argument_errors_before_any_work(make, message):
    Q, K, V, kw = make(np.zeros((1, 2, 8, 64), np.float16))
    with pytest.raises(ValueError, match=message):
        attention(Q, K, V, backend="emulator", **kw)


def test_numpy_integers_and_bools_as_options():
    """NumPy integers and bools are read as ints and bools (Br=np.int64(64) was refused as
    "not a multiple of 16"), with the same result as Python's."""
    Q, K, V, _ = operands(1, 2, 1, 20, 30, 64, seed=8)
    want = attention(Q, K, V, out="f32", backend="emulator", decode=False, causal=True, **TILE)
    got = attention(Q, K, V, out="f32", backend="emulator", decode=np.bool_(False),
                    causal=np.bool_(True), Br=np.int64(32), Bc=np.int32(32),
                    invocations=np.uint16(128))
    np.testing.assert_array_equal(got.out, want.out)


@pytest.mark.parametrize("build", [
    lambda: attention_prefill(64, fp="bogus"), lambda: attention_decode(64, fp="bogus"),
    lambda: attention_prefill(64, 32, 32, 64, scope="staged", fp="bogus")])
def test_kernel_builders_refuse_an_unknown_fp_mode(build):
    with pytest.raises(ValueError, match=r"fp must be one of \('exact', 'strict', 'fast'\), "
                                         r"got 'bogus'"):
        build()


def test_masks_as_lists_and_scales_of_any_sign():
    """A mask as nested lists (read as float16), and scale 0 or negative (the scores are
    scaled in f32, the maxima of the scaled scores kept)."""
    Q, K, V, _ = operands(1, 2, 1, 20, 30, 64, seed=7)
    mask = np.where(np.arange(30) % 3 == 0, -np.inf, 0.5)[None].repeat(20, 0).astype(np.float16)
    r = attention(Q, K, V, mask=mask.tolist(), out="f32", backend="emulator", **TILE)
    check(r, Q, K, V, mask)
    for scale in (0.0, -0.2):
        for kw in ({"decode": False, **TILE}, {"decode": False, "scope": "staged", "Br": 16,
                                               "Bc": 32, "invocations": 32}):
            r = attention(Q, K, V, scale=scale, out="f32", backend="emulator", **kw)
            ref, lse = attention_reference(Q, K, V, scale=scale)
            np.testing.assert_allclose(r.out, ref, rtol=0, atol=OUT_TOL)
            np.testing.assert_allclose(r.lse, lse, rtol=0, atol=LSE_TOL)


@pytest.mark.parametrize("Sq,Skv,causal", [(40, 72, False), (33, 64, True), (70, 104, True),
                                            (1, 8, False), (64, 96, False)])
def test_masks_read_as_words(Sq, Skv, causal):
    """A mask whose rows are whole uvec4s (keys a multiple of 8) is copied block by block into
    shared memory by 16-byte loads (mask="words"): rows past the queries and keys past the
    sequence read clamped words, which the edge blocks hide. attention(mask_loads="words")
    takes that path, and the tensor-layout loads give the same bits."""
    Q, K, V, mask = operands(1, 4, 2, Sq, Skv, 64, seed=Skv, masked=True)
    scale = 0.125
    O, LSE = np.zeros((1, 4, Sq, 64), np.float32), np.zeros((1, 4, Sq), np.float32)
    attention_prefill(64, 32, 32, 128, causal, "words", out="f32")[(-(-Sq // 32), 4)](
        Q, K, V, mask.view(np.uint32), O, LSE, Sq, Skv, 4, 2, scale, backend="emulator")
    ref, lse = attention_reference(Q, K, V, mask=mask, causal=causal, scale=scale)
    np.testing.assert_allclose(O, ref, rtol=0, atol=OUT_TOL)
    np.testing.assert_allclose(LSE, lse, rtol=0, atol=LSE_TOL)
    for loads in ("words", "auto"):
        r = attention(Q, K, V, mask=mask, causal=causal, scale=scale, out="f32",
                      backend="emulator", decode=False, mask_loads=loads, **TILE)
        np.testing.assert_array_equal(r.out, O)
    tensor = np.zeros_like(O)
    attention_prefill(64, 32, 32, 128, causal, True, out="f32")[(-(-Sq // 32), 4)](
        Q, K, V, mask, tensor, LSE, Sq, Skv, 4, 2, scale, backend="emulator")
    np.testing.assert_array_equal(tensor, O)


def test_extreme_scales_stay_finite():
    """Base 2 overflows f32 beyond 2^-24 <= scale <= 2^24 (the starting maximum, the mask
    divided by the scale, the queries times scale · log2(e)): the tuned softmax computes in
    base e there, "auto" decodes with the cooperative matrices, and asking for base 2 or the
    vector decode is refused."""
    Q, K, V, mask = operands(1, 2, 1, 32, 40, 64, seed=11, masked=True)
    for scale, m in ((1e8, None), (1e30, None), (1e-39, mask), (1e-36, mask)):
        r = attention(Q, K, V, mask=m, scale=scale, out="f32", backend="emulator",
                      decode=False, **TILE)
        ref, _ = attention_reference(Q, K, V, mask=m, scale=scale)
        assert not np.isnan(r.out).any(), scale
        np.testing.assert_allclose(r.out, ref, rtol=0, atol=OUT_TOL)
    q = Q[:, :, :1]
    for scale in (1e8, 1e37):
        r = attention(q, K, V, scale=scale, out="f32", backend="emulator")
        np.testing.assert_allclose(r.out, attention_reference(q, K, V, scale=scale)[0],
                                   rtol=0, atol=OUT_TOL)
    with pytest.raises(ValueError, match=r"needs 2\^-24 <= scale <= 2\^24 .* got 100000000.0"):
        attention(Q, K, V, scale=1e8, softmax=Softmax(exp2=True), backend="emulator",
                  decode=False, **TILE)
    with pytest.raises(ValueError, match=r"vector decode .* needs \|scale\| <= 2\^24"):
        attention(q, K, V, scale=1e30, decode_kernel="vector", backend="emulator")
    with pytest.raises(ValueError, match="scale must be a finite number that f32 holds"):
        attention(Q, K, V, scale=1e39, backend="emulator")


def test_large_scores_in_base_2_and_base_e():
    """Base 2 subtracts the row maximum times k = scale · log2(e) rounded to f32 (the
    exponentials' multiply-add): exact to f16's rounding while |m·k| < 2^13, as documented
    (here scaled scores up to about 4,000, so that one dominant key per row decides little);
    at any size base e keeps the maximum's exponential exactly 1 (scores near 10^10 pick each
    row's largest key, as the f64 reference does)."""
    rng = np.random.default_rng(5)
    Q = rng.uniform(-1, 1, (1, 1, 16, 64)).astype(np.float16)
    K = rng.uniform(-1, 1, (1, 1, 130, 64)).astype(np.float16)
    V = rng.standard_normal((1, 1, 130, 64)).astype(np.float16)
    scale = 4000.0 / float(np.abs(Q[0, 0].astype(np.float32) @ K[0, 0].T.astype(np.float32)).max())
    r = attention(Q, K, V, scale=scale, out="f32", backend="emulator", decode=False, **TILE)
    np.testing.assert_allclose(r.out, attention_reference(Q, K, V, scale=scale)[0], rtol=0,
                               atol=2e-3)
    Qb, Kb = (x * np.float16(3e4) for x in (Q, K))
    r = attention(Qb, Kb, V, out="f32", softmax=Softmax(), backend="emulator", decode=False,
                  **TILE)
    ref, lse = attention_reference(Qb, Kb, V)
    np.testing.assert_allclose(r.out, ref, rtol=0, atol=OUT_TOL)
    np.testing.assert_allclose(r.lse, lse, rtol=1e-6)


@pytest.mark.parametrize("kw", [dict(decode=False, **TILE),
                                dict(decode=False, splits=2, **TILE),
                                dict(decode=False, scope="staged", Br=32, Bc=32, invocations=64),
                                dict(decode=True, decode_kernel="coopmat")])
def test_rows_of_scores_below_the_base_2_start_find_their_maximum(kw):
    """Base e (the scale is beyond base 2's range) starts the running maxima at the lowest f32:
    rows whose every scaled score lies below -2^99 (Q >= 0, K <= 0 and a scale of 1e30) come
    out finite and equal to the reference, in the prefill, its split form and merge, the
    staged kernel and the cooperative-matrix decode (they started at -2^99: NaN rows)."""
    Q, K, V, _ = operands(1, 2, 2, 1 if kw["decode"] else 24, 40, 64, seed=12)
    Q, K = np.abs(Q), -np.abs(K)      # one key well ahead of the others in every row
    r = attention(Q, K, V, scale=1e30, out="f32", backend="emulator", **kw)
    ref, lse = attention_reference(Q, K, V, scale=1e30)
    assert np.isfinite(r.out).all() and np.isfinite(lse).all()
    np.testing.assert_allclose(r.out, ref, rtol=0, atol=OUT_TOL)
    np.testing.assert_allclose(r.lse, lse, rtol=1e-6)


def test_reference_and_kernel_arguments_checked(monkeypatch):
    """`attention_reference` checks its scale and causality as `attention` does; a row that
    sees no key has lse -inf there as in the kernels; `Softmax` fields and the prefill
    factory's arguments are checked by type and size (a float tile equal to an int, a string
    flag, a tile too large to hold)."""
    Q, K, V, _ = operands(1, 2, 1, 8, 8, 64, seed=13)
    with pytest.raises(ValueError, match="attention_reference: causal must be True or False"):
        attention_reference(Q, K, V, causal="no")
    with pytest.raises(ValueError, match="attention_reference: scale must be a number"):
        attention_reference(Q, K, V, scale="0.1")
    with pytest.raises(ValueError, match="attention_reference: scale must be a finite"):
        attention_reference(Q, K, V, scale=float("nan"))
    hidden = np.zeros((8, 8), np.float16)
    hidden[3] = -np.inf
    out, lse = attention_reference(Q, K, V, mask=hidden)
    assert np.isnan(out[:, :, 3]).all() and (lse[:, :, 3] == -np.inf).all()
    assert np.isfinite(np.delete(lse, 3, axis=2)).all()
    r = attention(Q, K, V, mask=hidden, backend="emulator", decode=False, **TILE)
    assert (r.lse[:, :, 3] == -np.inf).all()
    for sm, msg in ((Softmax(exp2="no"), "Softmax.exp2 must be True or False, got 'no'"),
                    (Softmax(prefetch=-1), "Softmax.prefetch must be True or False"),
                    (Softmax(row_width=16.0), "Softmax.row_width must be an int")):
        with pytest.raises(ValueError, match=msg):
            attention(Q, K, V, softmax=sm, backend="emulator", decode=False, **TILE)
    for call, msg in ((lambda: attention_prefill(64.0), "head_dim must be one of"),
                      (lambda: attention_prefill(64, 32, 32.0), "key block Bc must be"),
                      (lambda: attention_prefill(64, causal="no"), "causal must be True or"),
                      (lambda: attention_prefill(64, 1 << 20), "at most 512"),
                      (lambda: attention_prefill(64, invocations=33), "multiple of 32"),
                      (lambda: attention_prefill(64, invocations=2048), "at most 1024"),
                      (lambda: attention(Q, K, V, Bc=1 << 20, backend="emulator",
                                         decode=False), "at most 512"),
                      (lambda: attention(Q[:, :, :1], K, V, decode=False, backend="emulator",
                                         decode_kernel="vector"), "decode=False takes the"),
                      (lambda: prefill_splits(10, 100, min_chunk=0), "min_chunk must be an"),
                      (lambda: tuned_softmax(64, "x"), "scale must be a number or None"),
                      (lambda: tuned_softmax(64.0), "Bc .* must be a multiple of 16"),
                      (lambda: mask_as_f16("abc"), "mask must be floating point")):
        with pytest.raises(ValueError, match=msg):
            call()


@pytest.mark.parametrize("Skv,kw,offset,loads", [
    (16, {}, 0, "words"),
    (12, {}, 0, True),                                    # keys not a multiple of 8
    (16, {"scope": "subgroup", "invocations": 64}, 0, True),
    (16, {"Br": 16, "Bc": 16}, 0, True),                  # 16 x 16 < 8 x 128 invocations
])
def test_the_default_mask_loads_are_words_where_they_apply(monkeypatch, Skv, kw, offset, loads):
    """mask_loads="auto" (the default) reads the mask as words where the words path applies
    and through tensor layouts elsewhere, never refusing a mask the layout path takes."""
    module = sys.modules["pycoop.kernels.attention"]      # the function shadows the name
    seen = []

    def recording(*args, **kwargs):
        seen.append(args[5])
        return prefill(*args, **kwargs)
    prefill = module.attention_prefill
    monkeypatch.setattr(module, "attention_prefill", recording)
    Q, K, V, mask = operands(1, 2, 1, 8, Skv, 64, seed=Skv, masked=True)
    m = _dev(np.concatenate([np.zeros(offset, np.float16), mask.ravel()]))[offset:]
    r = attention(*(_dev(a) for a in (Q, K, V)), mask=m.reshape(mask.shape), out="f32",
                  decode=False, **{**TILE, **kw})
    assert seen == [loads]
    check(AttentionResult(r.out.numpy(), r.lse.numpy(), 0, ""), Q, K, V, mask)


def test_words_refusals_name_what_is_missing():
    Q, K, V, mask = operands(1, 2, 1, 8, 12, 64, seed=1, masked=True)
    with pytest.raises(ValueError, match=r"mask_loads='words' .* needs keys a multiple of 8 "
                                         r"\(got 12\); use mask_loads='layout'") as ei:
        attention(*(_dev(a) for a in (Q, K, V)), mask=_dev(mask), mask_loads="words",
                  decode=False, **TILE)
    assert "scope=" not in str(ei.value) and "invocations" not in str(ei.value)


@pytest.mark.parametrize("name,halves", [("Q", 4), ("K", 2), ("V", 1), ("the mask", 4)])
def test_views_off_16_byte_alignment_are_refused_by_the_cooperative_matrix_kernels(name, halves):
    """A tensor load's Pointer is a multiple of 16 bytes (SPV_NV_cooperative_matrix2), so a
    view of Q, K, V or the mask that starts elsewhere in its buffer is refused before any
    launch, naming the view and its offset (a GPU would read the wrong elements)."""
    Q, K, V, mask = operands(1, 2, 1, 8, 16, 64, seed=1, masked=True)
    args = {"Q": Q, "K": K, "V": V, "the mask": mask}
    flat = _dev(np.concatenate([np.zeros(halves, np.float16), args[name].ravel()]))
    args = {n: flat[halves:].reshape(a.shape) if n == name else _dev(a) for n, a in args.items()}
    with pytest.raises(ValueError, match=rf"need Q, K, V and the mask to start 16-byte aligned "
                                         rf".* but {name} starts {2 * halves} bytes into its "
                                         rf"buffer; pass aligned copies"):
        attention(args["Q"], args["K"], args["V"], mask=args["the mask"], decode=False, **TILE)


def test_the_tuned_softmax_is_the_default():
    """Without a Softmax the kernels compute in base 2 with a row state 32 columns wide (or Bc
    where narrower), in base e where the scale is not positive; the result is the one
    Softmax() gives, up to roundings (P is rounded to f16 after exponentials computed another
    way, so a rounding step of P can differ)."""
    assert tuned_softmax(64) == Softmax(exp2=True, row_width=32)
    assert tuned_softmax(16) == Softmax(exp2=True, row_width=16)
    assert tuned_softmax(64, scale=-0.5) == Softmax(exp2=False, row_width=32)
    Q, K, V, mask = operands(1, 2, 1, 40, 70, 64, seed=3, masked=True)
    for kw in ({"Br": 32, "Bc": 64, "invocations": 128}, TILE, {"Br": 32, "Bc": 16,
                                                                "invocations": 128}):
        tuned = attention(Q, K, V, mask=mask, out="f32", backend="emulator", **kw)
        plain = attention(Q, K, V, mask=mask, out="f32", backend="emulator", softmax=Softmax(),
                          **kw)
        check(tuned, Q, K, V, mask)
        check(plain, Q, K, V, mask)
        np.testing.assert_allclose(tuned.out, plain.out, rtol=0, atol=5e-4)
        np.testing.assert_allclose(tuned.lse, plain.lse, rtol=0, atol=2e-4)


@pytest.mark.parametrize("sm", [Softmax(), Softmax(exp2=True)], ids=["exp", "exp2"])
@pytest.mark.parametrize("D", [64, 80, 256])
def test_rows_whose_first_blocks_are_all_masked(sm, D):
    """Left padding: every row's first key blocks hidden. With exp2 the rescale factor of
    such a block is 2^(k·m - k·m) for the starting maximum m: exactly 1 (a power-of-two m;
    -1e30 left the product's rounding error, whose exp2 was inf: NaN rows at these head dims)."""
    Q, K, V, _ = operands(1, 2, 1, 40, 100, D, seed=D)
    mask = np.zeros((40, 100), np.float16)
    mask[:, :64] = -np.inf
    r = attention(Q, K, V, mask=mask, out="f32", backend="emulator", softmax=sm,
                  decode=False, Br=32, Bc=32, invocations=128)
    check(r, Q, K, V, mask)


def test_large_scores_keep_their_accuracy():
    """Inputs of standard deviation 4 at head dim 128 (scale 1/sqrt(128), no power of two):
    the scores are scaled in f32, so the error stays at the f16 rounding of P (Q · scale
    rounded to f16 before the product gave 7.7e-3)."""
    rng = np.random.default_rng(8)
    Q, K, V = (4 * rng.standard_normal((1, 2, 48, 128))).astype(np.float16), \
        (4 * rng.standard_normal((1, 1, 64, 128))).astype(np.float16), \
        rng.standard_normal((1, 1, 64, 128)).astype(np.float16)
    ref, lse = attention_reference(Q, K, V)
    for kw in (TILE, {"scope": "staged", "Br": 16, "Bc": 32, "invocations": 32}):
        r = attention(Q, K, V, out="f32", backend="emulator", decode=False, **kw)
        assert np.abs(r.out - ref).max() < 1e-3
        assert np.abs(r.lse - lse).max() < 5e-4


def test_decode_path_limits():
    Q = np.zeros((1, 8, 8, 64), np.float16)
    K = np.zeros((1, 1, 8, 64), np.float16)
    with pytest.raises(ValueError, match=r"at most decode_rows=32 packed rows .* = 64\)"):
        attention(Q, K, K, decode=True, backend="emulator")
    with pytest.raises(ValueError, match="takes neither mask nor causal"):
        attention(Q[:, :, :1], K, K, causal=True, decode=True, backend="emulator")


def test_dtype_errors():
    Q = np.zeros((1, 2, 8, 64), np.float16)
    with pytest.raises(ValueError, match="must be float16 or bfloat16"):
        attention(Q.astype(np.float32), Q, Q, backend="emulator")
    with pytest.raises(ValueError, match="must have one dtype"):
        attention(Q, Q.astype(ml_dtypes.bfloat16), Q, backend="emulator")


# --- the vector decode (attention_decode_vector + attention_merge) -------------------------

@SETTINGS
@given(B=st.integers(1, 2), G=st.sampled_from([1, 2, 4, 8]), Sq=st.integers(1, 2),
       Skv=st.integers(1, 300), D=st.sampled_from([64, 128, 256]),
       splits=st.one_of(st.none(), st.integers(1, 9)),
       config=st.sampled_from([(32, 4, 4, None), (32, 2, 1, None), (8, 2, 3, None),
                               (32, 1, 2, 8), (16, 2, 2, 16), (8, 4, 1, 4)]),
       prefetch=st.sampled_from([False, True, 2, 3]),
       merge=st.sampled_from(["workgroup", "launch", "phase", "phase2", "phase8"]),
       width=st.sampled_from([4, 8]), reduce=st.sampled_from(["auto", "butterfly"]),
       seed=st.integers(0, 2 ** 16))
def test_vector_decode_matches_numpy(B, G, Sq, Skv, D, splits, config, prefetch, merge, width,
                                     reduce, seed):
    """GQA ratios, one or two queries, key counts that are no multiple of a chunk (the last
    iteration's keys past the chunk masked), head dims 64/128/256, subgroups of 8, 16 or 32
    lanes (workgroups of fewer invocations than head_dim / 4 too: the merge then takes
    several column groups per invocation), lanes per key, streams and unrolling, 8- and
    16-byte loads of K and V, the chunks merged by the last workgroup of each head, by a
    second launch or by a second dispatch of the same kernel ("phaseN": its rows' dimensions
    split over N workgroups); scores summed by the reduce-scatter (where it fits) or a
    butterfly; f32 scores and probabilities: far tighter than the f16-P kernels."""
    S, subgroups, unroll, lanes = config
    merge, columns = ("phase", int(merge[5:])) if merge[5:].isdigit() else (merge, 1)
    while not fits_shared(D, G * min(Sq, 8 // G), subgroups):   # as the default does
        subgroups //= 2
    if lanes is not None and (lanes > S or (D // width) % lanes):
        lanes = None
    if lanes is None and (D // width) % min(S, D // 8):     # the default lanes don't divide
        width = 4
    Sq = min(Sq, 8 // G)
    Q, K, V, _ = operands(B, 2 * G, 2, Sq, Skv, D, seed)
    r = attention(Q, K, V, out="f32", backend="emulator", splits=splits,
                  decode_kernel="vector", decode_subgroups=subgroups, decode_unroll=unroll,
                  decode_lanes=lanes, subgroup_size=S, decode_prefetch=prefetch,
                  decode_merge=merge, decode_width=width, decode_merge_columns=columns,
                  decode_reduce=reduce)
    check(r, Q, K, V, tol=2e-5)
    ref, lse = attention_reference(Q, K, V)
    np.testing.assert_allclose(r.lse, lse, rtol=0, atol=2e-5)
    assert len(r.kernel_ms) == (1 if merge == "workgroup" else 2)


@pytest.mark.parametrize("columns", [2, 4, 8, 32])
def test_the_merge_dispatch_splits_rows_over_workgroups(columns):
    """decode_merge_columns: each row's dimensions merged by `columns` workgroups, each with
    more groups of invocations over the chunks (32: one column group each)."""
    Q, K, V, _ = operands(2, 8, 2, 1, 1000, 128, seed=columns)
    r = attention(Q, K, V, out="f32", backend="emulator", splits=13, decode_kernel="vector",
                  subgroup_size=8, decode_merge="phase", decode_merge_columns=columns)
    check(r, Q, K, V, tol=2e-5)
    np.testing.assert_allclose(r.lse, attention_reference(Q, K, V)[1], rtol=0, atol=2e-5)


@pytest.mark.parametrize("G,Sq,unroll,S,D", [(4, 1, 2, 32, 128), (1, 1, 2, 32, 128),
                                             (3, 1, 3, 32, 128), (8, 1, 2, 32, 128),
                                             (2, 2, 1, 8, 64), (1, 1, 1, 32, 256),
                                             (2, 1, 4, 16, 128)])
def test_reduce_scatter_agrees_with_the_butterfly(G, Sq, unroll, S, D):
    """The reduce-scatter of the scores (rows and keys padded to powers of two: 3 rows x 3
    keys as 4 x 4; one (row, key) per lane or per group of up to 16 lanes) gives the
    butterfly's results to f32 rounding, at ragged key counts (keys past the chunk masked in
    the lane that holds them)."""
    Q, K, V, _ = operands(1, 2 * G, 2, Sq, 301, D, seed=G * 10 + unroll)
    runs = [attention(Q, K, V, out="f32", backend="emulator", splits=5, decode_kernel="vector",
                      subgroup_size=S, decode_unroll=unroll, decode_reduce=red)
            for red in ("scatter", "butterfly")]
    for r in runs:
        check(r, Q, K, V, tol=2e-6)
    np.testing.assert_allclose(runs[0].out, runs[1].out, rtol=0, atol=1e-6)
    np.testing.assert_allclose(runs[0].lse, runs[1].lse, rtol=0, atol=1e-6)


def test_reduce_auto_scatters_where_it_fits():
    """"auto" is the reduce-scatter where padded rows x keys fit the lanes of a key (same
    module), else the butterfly; an explicit "scatter" that does not fit is an error."""
    from pycoop.kernels.attention_decode import scatter_fits
    assert scatter_fits(4, 2, 16) and scatter_fits(3, 3, 16) and scatter_fits(1, 1, 1)
    assert not scatter_fits(8, 4, 16) and not scatter_fits(5, 2, 8)
    spv = [attention_decode_vector(128, 4, reduce=r).compile().spv
           for r in ("auto", "scatter", "butterfly")]
    assert spv[0] == spv[1] != spv[2]
    assert attention_decode_vector(128, 8, unroll=4).compile().spv == \
        attention_decode_vector(128, 8, unroll=4, reduce="butterfly").compile().spv
    with pytest.raises(ValueError, match="decode_reduce must be one of"):
        attention(*operands(1, 4, 2, 1, 64, 128, seed=0)[:3], backend="emulator",
                  decode_reduce="tree")


def test_prefetching_changes_no_bit():
    """decode_prefetch only moves the loads, 1 to 3 iterations ahead: the same sums in the
    same order."""
    Q, K, V, _ = operands(1, 8, 2, 1, 333, 128, seed=3)
    for splits in (1, 3, 40):                   # 40: chunks past the keys
        a, *rest = (attention(Q, K, V, out="f32", backend="emulator", splits=splits,
                              decode_kernel="vector", subgroup_size=8, decode_prefetch=p)
                    for p in (False, True, 2, 3))
        for b in rest:
            assert np.array_equal(a.out, b.out) and np.array_equal(a.lse, b.lse)


def test_vector_decode_is_the_default_where_it_applies():
    """auto: the vector kernel for up to 8 query rows per K/V head at head dims 64/128/256
    (f32 probabilities: errors near f32 rounding), the cooperative-matrix kernels otherwise
    (f16 probabilities: errors near 2^-11)."""
    Q, K, V, _ = operands(1, 8, 2, 1, 200, 128, seed=1)
    ref, _ = attention_reference(Q, K, V)
    auto = attention(Q, K, V, out="f32", backend="emulator")
    coop = attention(Q, K, V, out="f32", backend="emulator", decode_kernel="coopmat")
    vec = attention(Q, K, V, out="f32", backend="emulator", decode_kernel="vector")
    assert np.array_equal(auto.out, vec.out)
    assert np.abs(vec.out - ref).max() < 1e-5 < np.abs(coop.out - ref).max() < OUT_TOL
    Q3 = operands(1, 8, 2, 3, 200, 128, seed=1)[0]        # 12 rows per K/V head: coopmat
    r = attention(Q3, K, V, out="f32", backend="emulator")
    assert 1e-5 < np.abs(r.out - attention_reference(Q3, K, V)[0]).max() < OUT_TOL


def test_vector_decode_bf16_f16_out_scale_and_device_arrays():
    Q, K, V, _ = operands(2, 4, 1, 1, 90, 64, seed=2, dtype=ml_dtypes.bfloat16)
    ref, _ = attention_reference(Q, K, V, scale=0.3)
    for width in (4, 8):                        # 8: bf16 pairs read from 16-byte loads
        r = attention(Q, K, V, scale=0.3, backend="emulator", decode_kernel="vector",
                      decode_width=width)
        assert r.out.dtype == np.float16
        np.testing.assert_allclose(r.out.astype(np.float64), ref, rtol=0, atol=2e-3)  # f16
    Q, K, V, _ = operands(1, 4, 2, 1, 70, 128, seed=3)
    q, k, v = (pc.asarray(a, backend="emulator") for a in (Q, K, V))
    for width in (4, 8):                        # 8: the arrays viewed as uvec4
        r = attention(q, k, v, out="f32", backend="emulator", splits=3, decode_width=width)
        assert isinstance(r.out, pc.Array) and isinstance(r.lse, pc.Array)
        check(AttentionResult(r.out.numpy(), r.lse.numpy(), 0, ""), Q, K, V, tol=2e-5)


@pytest.mark.parametrize("keys,kv_rows,splits", [
    (8192, 8, 33),      # about 2 workgroups per SM of 132: chunks of 256 keys
    (16384, 8, 33),     # chunks of 497 keys: still within 512
    (32768, 8, 64),     # 33 chunks would be 993 keys long: 64 of 512
    (1 << 20, 8, 66),   # at most twice the base
    (100, 8, 2),        # no chunk shorter than one iteration (64 keys)
    (512, 264, 1),      # many heads: one chunk each
    (8192, 264, 2),     # ... but chunks of 8192 keys are long: two
])
def test_default_splits(keys, kv_rows, splits):
    assert default_splits(keys, kv_rows, 32, 2) == splits


@pytest.mark.parametrize("keys,kv_rows,subgroups", [
    (8192, 8, 8),       # 33 base chunks of 249 keys: short, 8 subgroups
    (8448, 8, 8),       # 256 keys each
    (8449, 8, 4),       # 257
    (32768, 8, 4),      # long chunks: 4 subgroups (and more splits)
    (100, 8, 8),
    (8192, 1, 8),       # one K/V head: 264 base chunks of 32 keys
    (200000, 1, 4),     # ... of 758 keys
])
def test_default_subgroups(keys, kv_rows, subgroups):
    assert default_subgroups(keys, kv_rows) == subgroups


@pytest.mark.parametrize("Skv,splits", [(5, 4), (64, 9), (33, 3)])
def test_vector_decode_chunks_past_the_keys(Skv, splits):
    """Launched directly with more chunks than the keys fill, outputs NaN-filled first: the
    empty chunks write maxima of -2^99, zero sums and outputs, and every element is written."""
    D, n, R = 64, 4, 8
    Q, K, V, _ = operands(1, 8, 2, 1, Skv, D, seed=Skv)
    Part = np.full((splits, R, D), np.nan, np.float32)
    M, L = np.full((splits, R), np.nan, np.float32), np.full((splits, R), np.nan, np.float32)
    attention_decode_vector(D, n, 2, None, 1, 32)[(splits, 2)](Q, K, V, Part, M, L, Skv, 16,
                                                               0.125, backend="emulator")
    used = -(-Skv // 16)
    assert not np.isnan(Part).any() and not np.isnan(M).any() and not np.isnan(L).any()
    assert (M[used:] == np.float32(-2.0 ** 99)).all() and (L[used:] == 0).all()
    assert (Part[used:] == 0).all()
    O, LSE = np.zeros((R, D), np.float32), np.zeros(R, np.float32)
    attention_merge(D, "f32")[(R,)](Part, M, L, O, LSE, R, splits, backend="emulator")
    ref, lse = attention_reference(Q, K, V, scale=0.125)
    np.testing.assert_allclose(O.reshape(ref.shape), ref, rtol=0, atol=2e-5)
    np.testing.assert_allclose(LSE.reshape(lse.shape), lse, rtol=0, atol=2e-5)


@pytest.mark.parametrize("kernel", [
    attention_decode_vector(), attention_decode_vector(64, 8, 2, 8, 2, 32, "bf16"),
    attention_decode_vector(256, 1, 4, None, 1, 8), attention_merge(),
    attention_merge(64, "f32", 128, 2),
    attention_decode_vector(128, 4, prefetch=3, merge=True, out="f32"),
    attention_decode_vector(256, 2, 1, None, 1, 32, merge=True),   # fewer invocations than D / 4
    attention_decode_vector(128, 4, width=8), attention_decode_vector(64, 8, 2, 8, 2, 32, "bf16",
                                                                      width=8),
    attention_decode_vector(128, 4, 8, phases=True), attention_decode_vector(
        64, 1, 2, None, 2, 32, width=8, phases=True, out="f32"),     # phase 1: more groups
    attention_decode_vector(128, 4, 8, phases=True, merge_columns=8),
    attention_decode_vector(64, 1, 1, None, 1, 8, phases=True, merge_columns=16),
    attention_decode_vector(128, 4, reduce="butterfly"),
    attention_decode_vector(128, 3, unroll=3, width=8, phases=True),    # scatter, padded
], ids=lambda k: "")
def test_vector_decode_modules_pass_spirv_val(kernel):
    assert len(kernel.compile().spv) > 1000


@pytest.mark.parametrize("call,message", [
    (lambda: attention_decode_vector(80), r"head_dim must be one of \(64, 128, 256\)"),
    (lambda: attention_decode_vector(128, 9), "rows .* from 1 to 8, got 9"),
    (lambda: attention_decode_vector(128, 4, 0), "subgroups must be an int >= 1"),
    (lambda: attention_decode_vector(128, 4, unroll=0), "unroll must be an int >= 1"),
    (lambda: attention_decode_vector(128, 4, lanes=12), "lanes per key must be a power of two"),
    (lambda: attention_decode_vector(64, 4, lanes=32), r"dividing head_dim / width = 16, got 32"),
    (lambda: attention_decode_vector(64, 4, lanes=16, width=8),
     r"dividing head_dim / width = 8, got 16"),
    (lambda: attention_decode_vector(128, 4, width=2), r"width .* one of \(4, 8\), got 2"),
    (lambda: attention_decode_vector(128, 4, subgroup_size=12), "subgroup_size must be"),
    (lambda: attention_decode_vector(128, 4, dtype="f32"), "dtype must be 'f16' or 'bf16'"),
    (lambda: attention_decode_vector(256, 8, 4), "needs more than 32768 bytes of shared"),
    (lambda: attention_merge(128, "i8"), "out must be 'f16' or 'f32'"),
    (lambda: attention_merge(128, invocations=100), "multiple of head_dim / 4 = 32"),
    (lambda: attention_merge(128, unroll=0), "unroll must be an int >= 1"),
    (lambda: attention_decode_vector(128, 4, prefetch=5), r"prefetch .* int from 0 to 4, got 5"),
    (lambda: attention_decode_vector(128, 4, prefetch=-1), "prefetch .* got -1"),
    (lambda: attention_decode_vector(128, 4, merge=1), "merge must be a bool, got 1"),
    (lambda: attention_decode_vector(128, 4, phases=1), "phases must be a bool, got 1"),
    (lambda: attention_decode_vector(128, 4, merge=True, phases=True), "choose one"),
    (lambda: attention_decode_vector(128, 4, phases=True, out="f64"), "out must be 'f16' or"),
    (lambda: attention_decode_vector(128, 4, merge=True, out="f64"), "out must be 'f16' or"),
    (lambda: attention_decode_vector(128, 4, merge=True, merge_unroll=0),
     "merge unroll must be an int >= 1"),
    (lambda: attention_decode_vector(128, 4, phases=True, merge_columns=3),
     r"merge_columns must be a power of two dividing head_dim / 4 = 32, got 3"),
    (lambda: attention_decode_vector(64, 4, phases=True, merge_columns=32),
     r"dividing head_dim / 4 = 16, got 32"),
    (lambda: attention_decode_vector(128, 4, phases=True, merge_columns=True), "got True"),
    (lambda: attention_decode_vector(128, 4, merge_columns=2), "without phases"),
    (lambda: attention_decode_vector(128, 4, reduce="tree"), "reduce must be one of"),
    (lambda: attention_decode_vector(128, 8, unroll=4, reduce="scatter"),
     r"rows x unroll, .* at most the lanes per key \(16\); got 8 x 4"),
    (lambda: attention_decode_vector(64, 3, unroll=3, lanes=8, reduce="scatter"),
     r"lanes per key \(8\); got 3 x 3"),
    (lambda: attention(*[np.zeros((1, 4, 1, 64), np.float16)] * 3, decode_merge="launch",
                       decode_merge_columns=2), "decode_merge='launch'"),
    (lambda: attention(*[np.zeros((1, 4, 1, 64), np.float16)] * 3, decode_merge_columns=3),
     "decode_merge_columns must be a power of two dividing head_dim / 4 = 16, got 3"),
    (lambda: attention(*[np.zeros((1, 4, 1, 64), np.float16)] * 3, decode_merge_columns=2.0),
     "decode_merge_columns must be an int >= 1 or None, got 2.0"),
])
def test_vector_decode_configuration_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_vector_decode_path_errors():
    Q = np.zeros((1, 8, 3, 64), np.float16)
    K = np.zeros((1, 2, 8, 64), np.float16)
    with pytest.raises(ValueError, match=r"at most 8 query rows per K/V head .* = 12, head_dim 64"):
        attention(Q, K, K, decode_kernel="vector", backend="emulator")
    with pytest.raises(ValueError, match="decode_kernel must be 'auto', 'vector' or 'coopmat'"):
        attention(Q, K, K, decode_kernel="fast", backend="emulator")
    with pytest.raises(ValueError, match="splits must be a positive int"):
        attention(Q[:, :, :1], K, K, splits=0, backend="emulator")
    with pytest.raises(ValueError,
                       match=r"decode_merge must be one of \('workgroup', 'launch', 'phase'\)"):
        attention(Q[:, :, :1], K, K, decode_merge="atomic", backend="emulator")


def test_views_of_k_and_v_that_start_between_words():
    """A K view 2 bytes into its buffer: the vector decode loads 4 halves at a time and the
    cooperative-matrix kernels need 16-byte aligned pointers, so every path refuses it before
    any launch, naming the view's offset; 8 bytes in, "auto" decodes with the vector kernel
    and only the cooperative-matrix paths refuse it."""
    rng = np.random.default_rng(2)
    Q = rng.standard_normal((1, 2, 1, 64)).astype(np.float16)
    K = rng.standard_normal((1, 1, 30, 64)).astype(np.float16)
    q, v = _dev(Q), _dev(K)

    def view(halves):
        buf = pc.asarray(np.concatenate([np.zeros(halves, np.float16), K.ravel()]),
                         backend="emulator")
        return buf[halves:].reshape(K.shape)
    k2, k8 = view(1), view(4)
    coopmat = r"need Q, K, V and the mask to start 16-byte aligned .* but K starts {} bytes"
    for kw in ({}, {"decode_kernel": "coopmat"}, {"decode": False},
               {"decode": False, "scope": "staged", "Br": 32, "Bc": 32}):
        with pytest.raises(ValueError, match=coopmat.format(2)):
            attention(q, k2, v, **kw)
    with pytest.raises(ValueError, match="vector decode .* K and V views starting 8-byte "
                                         "aligned .* K starts 2 bytes into its buffer"):
        attention(q, k2, v, decode_kernel="vector")
    ref, _ = attention_reference(Q, K, K)
    np.testing.assert_allclose(attention(q, k8, v, out="f32").out.numpy(), ref, rtol=0,
                               atol=OUT_TOL)
    with pytest.raises(ValueError, match=coopmat.format(8)):
        attention(q, k8, v, decode=False)


def test_masks_beyond_the_range_of_float16_saturate():
    """A float mask is rounded to f16 with finite values beyond ±65504 saturated: -1e9 hides
    keys as -inf does, a row of it weighs the keys as without it (the same value added to
    every score of the row; not NaN), a large bias still dominates; -inf and NaN are kept; attention_reference adds the same mask."""
    m = np.array([[-1e9, 1e5, -np.inf, np.nan, 0.1, 70000.0]], np.float32)
    np.testing.assert_array_equal(
        mask_as_f16(m), np.array([[-65504, 65504, -np.inf, np.nan, 0.1, 65504]], np.float16))
    Q, K, V, _ = operands(1, 2, 1, 4, 8, 64, seed=6)
    mask = np.zeros((4, 8), np.float32)
    mask[0, 2:] = -1e9                  # keys 2.. hidden
    mask[1, :] = -1e9                   # every key: as if unmasked
    mask[2, 3] = 1e5                    # key 3 takes all the weight
    r = attention(Q, K, V, mask=mask, out="f32", backend="emulator", decode=False, **TILE)
    ref, lse = attention_reference(Q, K, V, mask=mask)
    assert np.isfinite(r.out).all() and np.isfinite(ref).all()
    np.testing.assert_allclose(r.out, ref, rtol=0, atol=OUT_TOL)
    hidden = mask.copy()
    hidden[0, 2:] = -np.inf
    np.testing.assert_allclose(r.out[:, :, 0], attention_reference(Q, K, V, mask=hidden)[0][:, :, 0],
                               rtol=0, atol=OUT_TOL)
    np.testing.assert_allclose(r.out[:, :, 1], attention_reference(Q, K, V)[0][:, :, 1],
                               rtol=0, atol=OUT_TOL)
    np.testing.assert_allclose(r.out[:, :, 2], np.broadcast_to(
        V[:, :, 3].astype(np.float64), r.out[:, :, 2].shape), rtol=0, atol=OUT_TOL)


@pytest.mark.parametrize("make,message", [
    (lambda Q: (Q, Q, Q, {"mask": np.ones((8, 8), bool)}), "a boolean mask is ambiguous"),
    (lambda Q: (Q, Q[:, :, :4], Q[:, :, :4], {"causal": True}),
     "causal needs at least as many keys as queries"),
    (lambda Q: (np.zeros((1, 3, 8, 64), np.float16), Q, Q, {}),
     r"kv_heads \(2\) must divide the heads \(3\)"),
    (lambda Q: (Q, Q[:, :, :0], Q[:, :, :0], {}), "empty sequence"),
    (lambda Q: (Q, Q, Q, {"mask": np.zeros((8, 7), np.float32)}),
     r"mask must be \(queries, keys\) = \(8, 8\)"),
])
def test_the_reference_checks_its_arguments_as_attention_does(make, message):
    Q, K, V, kw = make(np.zeros((1, 2, 8, 64), np.float16))
    with pytest.raises(ValueError, match="attention_reference: .*" + message):
        attention_reference(Q, K, V, **kw)
    # any head dim is fine there, and nested lists are arrays
    attention_reference(np.zeros((1, 1, 2, 16)).tolist(), np.zeros((1, 1, 2, 16)),
                        np.zeros((1, 1, 2, 16)))


@pytest.mark.parametrize("kind", ["prefill", "decode_coopmat", "decode_vector", "decode_phases"])
def test_attention_inside_a_launch_graph(kind):
    """Every attention path can be recorded with pc.capture and replayed (its result then has
    no times: they come from the replays), with the result of a direct call."""
    rng = np.random.default_rng(5)
    Sq = 1 if kind != "prefill" else 16
    q = rng.standard_normal((1, 4, Sq, 64)).astype(np.float16)
    k = rng.standard_normal((1, 2, 64, 64)).astype(np.float16)
    v = rng.standard_normal((1, 2, 64, 64)).astype(np.float16)
    qa, ka, va = (pc.asarray(a, backend="emulator") for a in (q, k, v))
    kw = {"prefill": {}, "decode_coopmat": {"decode_kernel": "coopmat"},
          "decode_vector": {"decode_kernel": "vector"},
          "decode_phases": {"decode_kernel": "vector", "decode_merge": "phase"}}[kind]
    direct = attention(qa, ka, va, **kw)
    with pc.capture(backend="emulator") as g:
        captured = attention(qa, ka, va, **kw)
    assert np.isnan(captured.time_ms) and all(np.isnan(t) for t in captured.kernel_ms)
    g.launch()
    pc.synchronize()
    np.testing.assert_array_equal(captured.out.numpy(), direct.out.numpy())


def test_the_decode_width_follows_the_alignment_of_k_and_v():
    """16-byte loads (decode_width 8) need K and V views starting 16 bytes aligned: by
    default a misaligned view decodes with 8-byte loads, asking for 8 is refused naming the
    view, and NumPy integers count as ints for `splits`."""
    Q, K, V, _ = operands(1, 8, 2, 1, 72, 64, seed=3)
    q, v = _dev(Q), _dev(V)
    k = _dev(np.concatenate([np.zeros(4, np.float16), K.ravel()]))[4:].reshape(K.shape)
    r = attention(q, k, v, out="f32", splits=np.int64(3))
    check(AttentionResult(r.out.numpy(), r.lse.numpy(), 0, ""), Q, K, V)
    with pytest.raises(ValueError, match=r"decode_width=8 loads K and V 16 bytes at a time "
                                         r"from 16-byte aligned views, but K starts 8 bytes "
                                         r"into its buffer; use decode_width=4"):
        attention(q, k, v, decode_width=8)


def _banded_mask(rng, Sq, Skv, kinds):
    """A mask of 16 x 16 pieces, each of one kind: zeros (+0 or -0), -inf, values, values with
    -inf, or a NaN somewhere."""
    m = np.zeros((Sq, Skv), np.float16)
    for i in range(0, Sq, 16):
        for j in range(0, Skv, 16):
            piece = m[i:i + 16, j:j + 16]
            kind = kinds[(i // 16 * 7 + j // 16) % len(kinds)]
            if kind == "-0":
                piece[...] = -0.0
            elif kind == "-inf":
                piece[...] = -np.inf
            elif kind == "values":
                piece[...] = rng.standard_normal(piece.shape)
            elif kind == "some -inf":
                piece[...] = np.where(rng.random(piece.shape) < 0.5, -np.inf, 0.0)
            elif kind == "nan":
                piece.flat[rng.integers(piece.size)] = np.nan
    return m


@FEW
@given(Sq=st.integers(1, 80), Skv=st.integers(1, 90), tile=st.sampled_from([(16, 16), (32, 32),
                                                                             (64, 16)]),
       kinds=st.lists(st.sampled_from(["0", "-0", "-inf", "values", "some -inf", "nan"]),
                      min_size=1, max_size=6), seed=st.integers(0, 2 ** 16))
def test_mask_block_kinds_match_numpy(Sq, Skv, tile, kinds, seed):
    """The pre-pass marks each rows x Bc block of the mask: some entry not ±0 (MASKED), some
    entry not -inf (NEEDED); entries past the queries and keys do not count."""
    rows, Bc = tile
    mask = _banded_mask(np.random.default_rng(seed), Sq, Skv, kinds)
    want = mask_block_kinds_reference(mask, rows, Bc)
    got = np.zeros_like(want)
    mask_block_kinds(rows, Bc)[(want.shape[1], want.shape[0])](mask, got, Sq, Skv,
                                                               backend="emulator")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("Sq,Skv,causal,kinds,kw", [
    (70, 136, False, "0 -inf values", {}),                      # words
    (70, 130, True, "0 -inf values", {}),                       # layout: keys % 8 != 0
    (64, 96, False, "0 -inf values", {"scope": "subgroup", "invocations": 64}),
    (64, 96, False, "0 values", {"scope": "subgroup", "invocations": 64}),
    (50, 104, True, "0 -inf values", {"softmax": Softmax(prefetch=True)}),  # none skipped
    (40, 120, False, "0 -inf values", {"softmax": Softmax()}),
    (96, 128, False, "0 -inf values", {"softmax": Softmax()}),
])
def test_mask_blocks_skip_what_changes_nothing(Sq, Skv, causal, kinds, kw):
    """With the kinds of the mask's blocks (`mask_blocks=True`, the default) the prefill skips
    blocks of only -inf and adds no mask to blocks of only zeros: the result of loading every
    block (the same bits in base e; in base 2 a skipped block leaves out a rescaling by a
    factor of 1 up to the rounding of the exponent's multiply-add), and NumPy's attention."""
    rng = np.random.default_rng(Skv)
    Q, K, V, _ = operands(1, 4, 2, Sq, Skv, 64, seed=Sq)
    band = np.where(np.arange(Skv)[None, :] <= Skv - Sq + np.arange(Sq)[:, None], 0.0,
                    -np.inf if "-inf" in kinds else 0.0)
    mask = band.astype(np.float16)
    mask[:, 16:24] = rng.standard_normal((Sq, 8))               # one block of values
    mask[:8, 32:64] = -0.0
    tile = {**TILE, **{k: v for k, v in kw.items() if k == "invocations"}}
    rest = {k: v for k, v in kw.items() if k != "invocations"}
    a = attention(Q, K, V, mask=mask, causal=causal, out="f32", backend="emulator",
                  decode=False, **tile, **rest)
    b = attention(Q, K, V, mask=mask, causal=causal, out="f32", backend="emulator",
                  decode=False, mask_blocks=False, **tile, **rest)
    if kw.get("softmax") == Softmax() or "-inf" not in kinds:
        np.testing.assert_array_equal(a.out, b.out)
        np.testing.assert_array_equal(a.lse, b.lse)
    np.testing.assert_allclose(a.out, b.out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a.lse, b.lse, rtol=1e-6, atol=1e-6)
    assert len(a.kernel_ms) == 2 and len(b.kernel_ms) == 1          # the pre-pass ran
    check(a, Q, K, V, mask, causal)


def test_block_kinds_need_a_mask():
    with pytest.raises(ValueError, match="blocks .* take a mask and scope 'workgroup' or "
                                         "'subgroup', got mask=False"):
        attention_prefill(64, 32, 32, 128, blocks=True)
    with pytest.raises(ValueError, match="blocks .* got mask=True, scope='staged'"):
        attention_prefill(64, 64, 32, 128, mask=True, scope="staged", blocks=True)
    with pytest.raises(ValueError, match=r"a 16 x 16 block is read by 512 invocations, so it "
                                         r"must hold a multiple of 512 entries"):
        mask_block_kinds(16, 16, 512)


@pytest.mark.parametrize("kw", [{"splits": 1}, {"splits": 3}, {"decode_kernel": "coopmat"},
                                {"decode": False}])
def test_an_infinite_value_stays_infinite(kw):
    """An inf in V gives inf in its output column on every path, as the f64 reference does
    (the vector decode's merge used to weigh a clamped step past the last chunk by 0: NaN)."""
    Q, K, V, _ = operands(1, 2, 1, 1, 70, 64, seed=12)
    V[0, 0, 7, 5] = np.inf
    with np.errstate(invalid="ignore"):
        ref, _ = attention_reference(Q, K, V)
    r = attention(Q, K, V, out="f32", backend="emulator", **kw)
    assert np.isposinf(ref[..., 5]).all() and np.isposinf(r.out[..., 5]).all()
    np.testing.assert_allclose(r.out[..., :5], ref[..., :5], rtol=0, atol=OUT_TOL)
