"""pycoop.kernels.attention on the emulator against an f64 NumPy attention (prefill and
split-KV decode), with the emulator's undefined-behaviour checks on (out-of-bounds tensor
accesses, conflicting stores and non-uniform matrix operands are reported as errors), spirv-val
on every module, and the configuration errors."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from core_helpers import FEW, SETTINGS
import pycoop as pc
from pycoop.kernels import (Softmax, attention, attention_combine, attention_decode,
                            attention_prefill, attention_reference)

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


@FEW
@given(G=st.sampled_from([1, 2, 4, 8]), Sq=st.integers(1, 2), Skv=st.integers(1, 300),
       splits=st.integers(1, 9), sm=st.sampled_from(SOFTMAX),
       config=st.sampled_from([("workgroup", 32, 32, 128), ("subgroup", 16, 32, 64),
                               ("subgroup", 16, 32, 96)]),
       seed=st.integers(0, 2 ** 16))
def test_decode_options_match_numpy(G, Sq, Skv, splits, sm, config, seed):
    """Split-KV decode with the Softmax options (exp2: maxima and sums in base 2, merged in
    base 2 by the combine kernel) and at subgroup scope: one chunk per subgroup, the splits
    rounded up to whole workgroups (chunks past the keys weigh 0)."""
    scope, rows, Bc, inv = config
    Sq = min(Sq, rows // G)
    Q, K, V, _ = operands(1, 2 * G, 2, Sq, Skv, 64, seed)
    r = attention(Q, K, V, out="f32", backend="emulator", splits=splits, softmax=sm,
                  decode_rows=rows, decode_Bc=Bc, decode_invocations=inv, decode_scope=scope)
    check(r, Q, K, V)
    assert len(r.kernel_ms) == 2


@pytest.mark.parametrize("splits", [1, 5, 8, 13])
def test_combine_unroll_is_bit_identical(splits):
    """The combine's unrolled loops read several splits before using them but add in the same
    order: the same bits as the plain loop, whatever the remainder."""
    Q, K, V, _ = operands(1, 8, 2, 1, 700, 64, seed=splits)
    plain = attention(Q, K, V, out="f32", backend="emulator", splits=splits)
    for u in (2, 3, 8):
        r = attention(Q, K, V, out="f32", backend="emulator", splits=splits, combine_unroll=u)
        assert np.array_equal(r.out, plain.out) and np.array_equal(r.lse, plain.lse)
    check(plain, Q, K, V)


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
    r = attention(Q, K, V, out="f32", backend="emulator", splits=splits)
    check(r, Q, K, V)


@pytest.mark.parametrize("D", [80, 96, 112, 128, 256])
def test_head_dims(D):
    Q, K, V, _ = operands(1, 2, 1, 20, 45, D, seed=D)
    check(attention(Q, K, V, causal=True, out="f32", backend="emulator", decode=False,
                    Br=16, Bc=16, invocations=64), Q, K, V, causal=True)
    Q1 = Q[:, :, :1]
    check(attention(Q1, K, V, out="f32", backend="emulator", splits=2), Q1, K, V)


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


@pytest.mark.parametrize("kernel", [
    attention_prefill(), attention_prefill(128, causal=True, mask=True, out="f32"),
    attention_prefill(64, 64, 64, 128, causal=True), attention_prefill(256, 64, 64, 256),
    attention_prefill(80, 64, 32, dtype="bf16", mask=True), attention_decode(),
    attention_decode(64, 64, 64, 128, "bf16"), attention_combine(), attention_combine(64, "f32"),
    attention_prefill(128, 64, 32, 128, causal=True, mask=True, scope="subgroup",
                      softmax=Softmax(True, True, True)),
    attention_prefill(64, softmax=Softmax(exp2=True, lazy_sum=True), fp="fast"),
    attention_prefill(128, softmax=Softmax(prefetch=True), mask=True),
    attention_decode(128, 16, 32, 128, scope="subgroup", softmax=Softmax(True, True, True)),
    attention_combine(128, "f16", exp2=True), attention_combine(128, "f16", unroll=8),
    attention_prefill(128, softmax=Softmax(row_width=32), causal=True),
    attention_decode(128, softmax=Softmax(exp2=True, prefetch=True, row_width=32)),
], ids=lambda k: "")
def test_modules_pass_spirv_val(kernel):
    spv = kernel.compile().spv            # validated with spirv-val
    assert len(spv) > 1000


@pytest.mark.parametrize("call,message", [
    (lambda: attention_prefill(100), "head_dim must be one of"),
    (lambda: attention_prefill(128, 40), "query block must be a multiple of 16"),
    (lambda: attention_prefill(128, 64, 8), "key block Bc must be a multiple of 16"),
    (lambda: attention_prefill(128, dtype="f32"), "dtype must be 'f16' or 'bf16'"),
    (lambda: attention_combine(64, "i8"), "out must be 'f16' or 'f32'"),
    (lambda: attention_prefill(128, scope="warp"), "scope must be 'workgroup' or 'subgroup'"),
    (lambda: attention_prefill(128, 64, 64, 100, scope="subgroup"),
     "invocations must be a multiple of 32"),
    (lambda: attention_prefill(128, 64, 64, 256, scope="subgroup"),
     r"8 subgroups of 256 invocations each take Br / 8 rows, which must be a multiple of 16"),
    (lambda: attention_decode(128, 16, 32, 48, scope="subgroup"),
     "invocations must be a multiple of 32"),
    (lambda: attention_combine(128, unroll=0), "unroll must be a positive int"),
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
