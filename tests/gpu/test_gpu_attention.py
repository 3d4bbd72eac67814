"""pycoop.kernels.attention on a real GPU (-m gpu): against an f64 NumPy reference and, where
torch with CUDA is present, with an error no larger than a small multiple of torch's own f16
scaled_dot_product_attention."""
from __future__ import annotations

import numpy as np
import pytest

import pycoop as pc
from pycoop.kernels import (Softmax, attention, attention_prefill, attention_reference,
                            prefill_splits)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def _vulkan_nv():
    try:
        pc.runtime.backend.vulkan_missing(attention_prefill(128).compile())
    except pc.BackendUnavailable as e:
        pytest.skip(str(e))


def _torch_error(Q, K, V, mask, causal, ref):
    """torch's f16 SDPA error against the same reference (None without torch + CUDA)."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    g = Q.shape[1] // K.shape[1]
    q, k, v = (torch.from_numpy(a).cuda() for a in (Q, K, V))
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    m = None if mask is None else torch.from_numpy(mask).cuda()
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal)
    return float(np.abs(o.float().cpu().numpy() - ref).max())


@pytest.mark.parametrize("B,H,Hkv,Sq,Skv,D,causal,masked", [
    (2, 8, 8, 1000, 1000, 128, True, False),     # ragged against the 64-row tiles
    (1, 8, 2, 300, 777, 64, False, False),     # head dim 64: 128 invocations by default
    (1, 8, 2, 300, 776, 64, False, True),      # the same with a mask read as words
    (1, 16, 4, 512, 1500, 128, False, True),     # the mask through tensor layouts
    (1, 16, 4, 500, 1504, 128, True, True),      # the mask read as words (keys % 8 == 0)
    (1, 4, 4, 200, 200, 256, True, False),
    (3, 4, 2, 700, 700, 64, True, False),        # causal heaviest first: groups of 8 and 4
    (1, 2, 1, 256, 8192, 128, False, False),     # 4 workgroups: keys split in 16, merged
    (1, 4, 2, 300, 4100, 64, False, True),       # 12 workgroups, a mask: 8 splits
    (1, 32, 8, 1, 8192, 128, False, False),      # decode: split KV + combine
    (1, 32, 8, 4, 5000, 64, False, False),
])
def test_attention_matches_reference_on_gpu(B, H, Hkv, Sq, Skv, D, causal, masked):
    rng = np.random.default_rng(7)
    Q = rng.standard_normal((B, H, Sq, D)).astype(np.float16)
    K = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float16)
    V = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float16)
    mask = (rng.standard_normal((Sq, Skv)) * 2).astype(np.float16) if masked else None
    r = attention(Q, K, V, mask=mask, causal=causal, out="f32", backend="vulkan")
    assert r.backend == "vulkan"
    ref, lse = attention_reference(Q, K, V, mask=mask, causal=causal)
    err = float(np.abs(r.out - ref).max())
    assert err < 2e-3, err
    np.testing.assert_allclose(r.lse, lse, rtol=0, atol=2e-3)   # row sums of f16-rounded P
    terr = _torch_error(Q, K, V, mask, causal, ref)
    if terr is not None:
        assert err <= max(2 * terr, 1e-3), (err, terr)


@pytest.mark.parametrize("Sq,Skv,causal", [(512, 4096, False), (300, 1000, True),
                                            (333, 1501, False)])
def test_masks_of_zeros_and_minus_infinity_skip_blocks_on_gpu(Sq, Skv, causal):
    """llama.cpp's kind of mask (a causal band at the end of the keys, padding keys of -inf, a
    few columns of values): the pre-pass marks its blocks, the prefill skips those of -inf
    and leaves out the mask where it is 0, and gives the result of loading every block (up to
    the rounding of the rescaling a block of -inf would apply, a factor of 1 in exact
    arithmetic)."""
    rng = np.random.default_rng(Skv)
    Q = rng.standard_normal((1, 16, Sq, 128)).astype(np.float16)
    K = rng.standard_normal((1, 4, Skv, 128)).astype(np.float16)
    V = rng.standard_normal((1, 4, Skv, 128)).astype(np.float16)
    mask = np.where(np.arange(Skv)[None, :] <= Skv - Sq + np.arange(Sq)[:, None], 0.0,
                    -np.inf).astype(np.float16)
    mask[:, 200:264] = -np.inf                                  # padding
    mask[:, 70:75] = rng.standard_normal((Sq, 5))
    r = attention(Q, K, V, mask=mask, causal=causal, out="f32", backend="vulkan")
    every = attention(Q, K, V, mask=mask, causal=causal, out="f32", backend="vulkan",
                      mask_blocks=False)
    # the mask's pre-pass and the prefill; where the 48-64 workgroups leave SMs idle (on a
    # GPU of 132 SMs) the prefill splits the keys and a merge follows
    split = prefill_splits(-(-Sq // 128) * 16, Skv) > 1
    assert len(r.kernel_ms) == (3 if split else 2), (r.kernel_ms, split)
    np.testing.assert_allclose(r.out, every.out, rtol=1e-5, atol=1e-6)
    ref, lse = attention_reference(Q, K, V, mask=mask, causal=causal)
    err = float(np.abs(r.out - ref).max())
    assert err < 2e-3, err
    np.testing.assert_allclose(r.lse, lse, rtol=0, atol=2e-3)


@pytest.mark.parametrize("D,dtype,out,tol", [(80, np.float16, "f16", 4e-3),
                                            (128, "bfloat16", "f32", 2e-2)])
def test_attention_other_head_dims_and_types_on_gpu(D, dtype, out, tol):
    import ml_dtypes
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    rng = np.random.default_rng(8)
    Q = rng.standard_normal((1, 8, 300, D)).astype(dt)
    K = rng.standard_normal((1, 2, 300, D)).astype(dt)
    V = rng.standard_normal((1, 2, 300, D)).astype(dt)
    for causal, q in ((True, Q), (False, Q[:, :, :2])):          # prefill, then decode
        try:
            r = attention(q, K, V, causal=causal, out=out, backend="vulkan")
        except pc.BackendUnavailable as e:
            # the H100 (driver 580) lists neither bf16 nor 80-wide workgroup-scope matrices at
            # 256 invocations: the launch says which types it lacks, before any work
            assert "lacks cooperative matrix" in str(e), e
            pytest.skip(f"the device lacks the matrix types of this configuration: {e}")
        assert r.backend == "vulkan"
        ref, _ = attention_reference(q, K, V, causal=causal)
        assert np.abs(r.out.astype(np.float64) - ref).max() < tol


@pytest.mark.parametrize("kwargs", [
    {"softmax": Softmax()},
    {"softmax": Softmax(exp2=True)},
    {"softmax": Softmax(lazy_sum=True)},
    {"softmax": Softmax(prefetch=True)},
    {"softmax": Softmax(True, True, True), "fp": "fast"},
    {"softmax": Softmax(exp2=True, prefetch=True, row_width=32)},
    {"Br": 64, "Bc": 16, "invocations": 128, "scope": "subgroup",
     "softmax": Softmax(True, True, True)},
    {"decode_rows": 16, "decode_Bc": 32, "decode_invocations": 128, "decode_scope": "subgroup",
     "softmax": Softmax(True, True, True), "decode_kernel": "coopmat"},
], ids=["exp", "exp2", "lazy", "prefetch", "all-fast", "narrow", "subgroup", "decode-subgroup"])
def test_attention_options_on_gpu(kwargs):
    """The Softmax options (the narrow row state too), fp="fast" and the subgroup-scope
    kernels against the reference: a ragged causal GQA prefill, and a decode."""
    rng = np.random.default_rng(9)
    Q = rng.standard_normal((1, 8, 333, 128)).astype(np.float16)
    K = rng.standard_normal((1, 2, 333, 128)).astype(np.float16)
    V = rng.standard_normal((1, 2, 333, 128)).astype(np.float16)
    decode = "decode_scope" in kwargs
    q = Q[:, :, :1] if decode else Q
    r = attention(q, K, V, causal=not decode, out="f32", backend="vulkan", **kwargs)
    ref, lse = attention_reference(q, K, V, causal=not decode)
    assert np.abs(r.out - ref).max() < 2e-3
    np.testing.assert_allclose(r.lse, lse, rtol=0, atol=2e-3)


@pytest.mark.parametrize("B,H,Hkv,Sq,Skv,D,dtype", [
    (1, 32, 8, 1, 8192, 128, np.float16),       # the decode goal's shape
    (2, 16, 4, 2, 3001, 64, np.float16),        # 8 rows per K/V head, ragged keys
    (1, 8, 8, 1, 1000, 256, np.float16),
    (1, 8, 2, 1, 777, 128, "bfloat16"),
])
@pytest.mark.parametrize("merge,width", [("workgroup", 4), ("launch", 4), ("phase", 4),
                                         ("launch", 8), ("phase", 8), ("phase4", 8),
                                         ("phase-butterfly", 8)])
def test_vector_decode_on_gpu(B, H, Hkv, Sq, Skv, D, dtype, merge, width):
    """The vector decode (the default for these shapes) against the f64 reference: f32
    probabilities, so well inside torch's f16 kernel's error; the chunks merged by the last
    workgroup of each head (device-scope barrier and acquire-release counter: a stale
    partial would show as a wrong row), by a second launch or by a second dispatch of the
    same kernel ("phase4": each row's dimensions over 4 workgroups); K and V read 8 or 16
    bytes at a time; the scores summed by the reduce-scatter (where it fits, the default)
    or the butterfly. The merged kernel runs 3 times on the same arrays (its counters must be
    back at zero after each)."""
    merge, columns = ("phase", 4) if merge == "phase4" else (merge, 1)
    merge, _, reduce = merge.partition("-")
    import ml_dtypes
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    rng = np.random.default_rng(10)
    Q = rng.standard_normal((B, H, Sq, D)).astype(dt)
    K = rng.standard_normal((B, Hkv, Skv, D)).astype(dt)
    V = rng.standard_normal((B, Hkv, Skv, D)).astype(dt)
    ref, lse = attention_reference(Q, K, V)
    r = attention(Q, K, V, out="f32", backend="vulkan", decode_kernel="vector",
                  decode_merge=merge, decode_width=width, decode_merge_columns=columns,
                  decode_reduce=reduce or "auto", repeat=3)
    assert r.backend == "vulkan" and len(r.kernel_ms) == (1 if merge == "workgroup" else 2)
    err = float(np.abs(r.out - ref).max())
    assert err < 1e-4, err
    np.testing.assert_allclose(r.lse, lse, rtol=0, atol=1e-4)
    if dtype == np.float16:
        terr = _torch_error(Q, K, V, None, False, ref)
        if terr is not None:
            assert err <= terr, (err, terr)


@pytest.mark.parametrize("B,H,Hkv,Sq,Skv,D,causal,masked,dtype,tile", [
    (2, 8, 8, 1000, 1000, 128, True, False, np.float16, (128, 64)),
    (1, 8, 2, 300, 777, 64, False, True, np.float16, (64, 64)),
    (1, 4, 4, 200, 200, 256, True, False, np.float16, (64, 32)),
    (1, 8, 2, 333, 500, 80, True, True, np.float16, (128, 32)),
    (1, 8, 2, 333, 500, 128, False, False, "bfloat16", (128, 64)),
])
def test_staged_prefill_on_gpu(B, H, Hkv, Sq, Skv, D, causal, masked, dtype, tile):
    """scope="staged" (16 x 16 subgroup-scope pieces, K and V staged in shared memory)
    against the reference and torch: ragged, GQA, causal, masked, head dims 64 to 256, bf16.
    Its matrices are KHR subgroup-scope 16 x 16 ones, so head dim 80 and bf16 run where the
    device lists those types (the H100 lacks the workgroup-scope ones)."""
    import ml_dtypes
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    rng = np.random.default_rng(11)
    Q = rng.standard_normal((B, H, Sq, D)).astype(dt)
    K = rng.standard_normal((B, Hkv, Skv, D)).astype(dt)
    V = rng.standard_normal((B, Hkv, Skv, D)).astype(dt)
    mask = (rng.standard_normal((Sq, Skv)) * 2).astype(np.float16) if masked else None
    Br, Bc = tile
    try:
        r = attention(Q, K, V, mask=mask, causal=causal, out="f32", backend="vulkan",
                      decode=False, scope="staged", Br=Br, Bc=Bc, invocations=2 * Br)
    except pc.BackendUnavailable as e:
        assert "lacks" in str(e), e
        pytest.skip(f"the device lacks the matrix types of this configuration: {e}")
    ref, lse = attention_reference(Q, K, V, mask=mask, causal=causal)
    err = float(np.abs(r.out - ref).max())
    assert err < (2e-2 if dtype == "bfloat16" else 2e-3), err
    if dtype == np.float16:
        np.testing.assert_allclose(r.lse, lse, rtol=0, atol=2e-3)
        terr = _torch_error(Q, K, V, mask, causal, ref)
        if terr is not None:
            assert err <= max(2 * terr, 1e-3), (err, terr)
