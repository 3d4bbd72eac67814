"""The vector attention decode through the real Vulkan path (lavapipe in CI: subgroups of 8,
shuffles), against NumPy, on NumPy and on device arrays."""
from __future__ import annotations

import numpy as np
import pytest

import pycoop as pc
from pycoop.kernels import attention, attention_reference

pytestmark = pytest.mark.vulkan


@pytest.fixture(scope="module")
def subgroup_size(vulkan_caps):
    """The device's subgroup size, which the kernel is built for (8 on lavapipe)."""
    caps = vulkan_caps
    if "shuffle" not in caps.subgroup_operations:
        pytest.skip("the device has no subgroup shuffles")
    return caps.subgroup_size


@pytest.mark.parametrize("G,Sq,Skv,D,splits,prefetch,width,merge", [
    (4, 1, 333, 128, None, False, 4, "launch"), (2, 2, 100, 64, 3, True, 4, "workgroup"),
    (8, 1, 57, 64, 2, False, 8, "phase"), (1, 1, 40, 256, None, True, 8, "launch"),
    (4, 1, 333, 128, 5, True, 8, "phase"), (4, 1, 333, 128, 5, True, 8, "phase4"),
    (2, 2, 100, 64, 7, False, 4, "phase16")])
def test_vector_decode_on_vulkan(subgroup_size, G, Sq, Skv, D, splits, prefetch, width, merge):
    """Against NumPy, each merge mode; "phaseN": the merge dispatch with each row's
    dimensions over N workgroups."""
    merge, columns = ("phase", int(merge[5:])) if merge[5:].isdigit() else (merge, 1)
    rng = np.random.default_rng(Skv)
    Q = rng.standard_normal((1, 2 * G, Sq, D)).astype(np.float16)
    K = rng.standard_normal((1, 2, Skv, D)).astype(np.float16)
    V = rng.standard_normal((1, 2, Skv, D)).astype(np.float16)
    lanes = min(subgroup_size, D // 8)
    r = attention(Q, K, V, out="f32", backend="vulkan", splits=splits, decode_kernel="vector",
                  subgroup_size=subgroup_size, decode_lanes=lanes, decode_subgroups=2,
                  decode_prefetch=prefetch, decode_width=width, decode_merge=merge,
                  decode_merge_columns=columns)
    assert r.backend == "vulkan"
    ref, lse = attention_reference(Q, K, V)
    np.testing.assert_allclose(r.out, ref, rtol=0, atol=2e-5)
    np.testing.assert_allclose(r.lse, lse, rtol=0, atol=2e-5)


def test_vector_decode_on_device_arrays(subgroup_size):
    rng = np.random.default_rng(1)
    Q, K, V = (rng.standard_normal(s).astype(np.float16)
               for s in ((1, 8, 1, 64), (1, 2, 200, 64), (1, 2, 200, 64)))
    q, k, v = (pc.asarray(a, backend="vulkan") for a in (Q, K, V))
    r = attention(q, k, v, backend="vulkan", decode_kernel="vector", subgroup_size=subgroup_size,
                  decode_lanes=min(subgroup_size, 8))
    assert isinstance(r.out, pc.Array)
    ref, _ = attention_reference(Q, K, V)
    np.testing.assert_allclose(r.out.numpy().astype(np.float64), ref, rtol=0, atol=2e-3)


def test_a_prefill_the_device_cannot_run_names_the_staged_kernel_where_it_runs(
        subgroup_size, monkeypatch):
    """The workgroup-scope prefill's BackendUnavailable (lavapipe has no cooperative
    matrices) names the staged configuration when the device runs that one (here: as if it
    did), and only then."""
    import sys
    attn = sys.modules["pycoop.kernels.attention"]     # the module (the package's name for
                                                         # it is the function)
    Q = np.zeros((1, 2, 40, 128), np.float16)
    with pytest.raises(pc.BackendUnavailable) as plain:
        attention(Q, Q, Q, backend="vulkan", decode=False)
    assert "staged" not in str(plain.value)
    monkeypatch.setattr(attn, "vulkan_missing", lambda ck: [])
    with pytest.raises(pc.BackendUnavailable, match=r"lacks .*\n  hint: this device runs "
                       r"scope='staged'.*Br=128, Bc=64, invocations=256, scope='staged'"):
        attention(Q, Q, Q, backend="vulkan", decode=False)


@pytest.mark.parametrize("Sq,Skv,rows,Bc", [(70, 136, 32, 32), (300, 1001, 128, 64),
                                            (16, 16, 16, 16)])
def test_mask_block_kinds_on_vulkan(vulkan_caps, Sq, Skv, rows, Bc):
    """The attention prefill's mask pre-pass (vector code, a subgroup OR and an atomic OR per
    subgroup) marks the same blocks on the driver as NumPy."""
    from pycoop.kernels.attention_mask import mask_block_kinds, mask_block_kinds_reference
    if "arithmetic" not in vulkan_caps.subgroup_operations:
        pytest.skip("the device has no subgroup arithmetic")
    rng = np.random.default_rng(Skv)
    mask = np.where(np.arange(Skv)[None, :] <= Skv - Sq + np.arange(Sq)[:, None], 0.0,
                    -np.inf).astype(np.float16)
    c = Skv // 3
    mask[:, c:c + 4] = rng.standard_normal((Sq, 4))
    mask[: Sq // 2, Skv // 2:] = -0.0
    want = mask_block_kinds_reference(mask, rows, Bc)
    got = np.zeros_like(want)
    mask_block_kinds(rows, Bc)[(want.shape[1], want.shape[0])](
        mask, got, Sq, Skv, backend="vulkan", subgroup_size=vulkan_caps.subgroup_size)
    np.testing.assert_array_equal(got, want)
