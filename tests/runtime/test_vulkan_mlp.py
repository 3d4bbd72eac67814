"""pycoop.kernels.MLPBlock through the real Vulkan path (lavapipe in CI: subgroups of 8, no
cooperative matrices): the token path against the emulator, and a prefill-sized call that the
device cannot run refused before anything is queued."""
from __future__ import annotations

import numpy as np
import pytest

import pycoop as pc
from pycoop.kernels import MLPBlock

pytestmark = pytest.mark.vulkan
H, I = 64, 96


def q4_0(rng, M: int, K: int) -> np.ndarray:
    """Random Q4_0 blocks with a scale of 0.01."""
    b = rng.integers(0, 256, (M, K // 32, 18), dtype=np.uint8)
    b[..., :2] = np.full((M, K // 32, 1), 0.01, np.float16).view(np.uint8)
    return b.reshape(M, -1)


def blocks(caps):
    rng = np.random.default_rng(0)
    W = [q4_0(rng, I, H), q4_0(rng, I, H), q4_0(rng, H, I)]
    nw = rng.uniform(0.5, 1.5, H).astype(np.float32)
    return [MLPBlock(*W, nw, "q4_0", backend=be, subgroup_size=caps.subgroup_size)
            for be in ("vulkan", "emulator")]


def test_tokens_match_the_emulator(vulkan_caps):
    caps = vulkan_caps
    if "shuffle" not in caps.subgroup_operations:
        pytest.skip("the device has no subgroup shuffles")
    vk, emu = blocks(caps)
    x = np.random.default_rng(1).standard_normal((3, H)).astype(np.float32)
    y = vk(pc.asarray(x, backend="vulkan")).numpy()
    ref = emu(pc.asarray(x, backend="emulator")).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_prefill_the_device_cannot_run_is_refused_before_any_work(vulkan_caps):
    caps = vulkan_caps
    if caps.has("cooperativeMatrix"):
        pytest.skip("the device has cooperative matrices")
    vk, _ = blocks(caps)
    rt = pc.get_runtime("vulkan")
    pc.synchronize()
    x = pc.asarray(np.zeros((70, H), np.float32), backend="vulkan")
    pending = rt.stats()["pending_launches"]
    with pytest.raises(pc.BackendUnavailable, match=r"MLPBlock with T = 70 > small_t = 64 "
                                                    r"tokens \(its GEMMs\).*lacks"):
        vk(x)
    assert vk.launches == [] and rt.stats()["pending_launches"] == pending


@pytest.mark.parametrize("T,small_t", [(20, 64), (70, 100)])
def test_tokens_past_8_without_cooperative_matrices_go_8_at_a_time(vulkan_caps, T, small_t):
    """8 < T <= small_t takes matmul_q's GEMMs (the planes ones up to 64 tokens, then the
    decode-function ones) where the device has cooperative matrices; without them, the token
    path over groups of at most 8 tokens (as the emulator gives for each)."""
    caps = vulkan_caps
    if caps.has("cooperativeMatrix") or "shuffle" not in caps.subgroup_operations:
        pytest.skip("the device has cooperative matrices, or no subgroup shuffles")
    vk, emu = blocks(caps)
    vk.small_t = small_t
    x = np.random.default_rng(2).standard_normal((T, H)).astype(np.float32)
    y = vk(pc.asarray(x, backend="vulkan")).numpy()
    assert len(vk.launches) == -(-T // 8) * 5      # groups of five launches
    ref = np.concatenate([emu(pc.asarray(x[t:t + 8], backend="emulator")).numpy()
                          for t in range(0, T, 8)])
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_f16_row_kernels_match_the_emulator(vulkan_caps):
    """rms_norm_f16 and swiglu_f16 (the f16 rows of 8 < T <= 64) on the device against the
    emulator: within one f16 step, nearly all equal (the device's rsqrt and exp may differ
    from NumPy's in the last f32 bits, which can move a rounding)."""
    from pycoop.kernels import mlp
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, H)).astype(np.float32)
    nw = rng.uniform(0.5, 1.5, H).astype(np.float32)
    y2 = (3 * rng.standard_normal((5, 2 * I))).astype(np.float32)
    got = {}
    for be in ("vulkan", "emulator"):
        n = pc.zeros((5, H), pc.f16, backend=be)
        mlp.rms_norm_f16(vulkan_caps.subgroup_size)[5](
            pc.asarray(x, backend=be).reshape(-1, 4), pc.asarray(nw, backend=be).reshape(-1, 4),
            n.view(np.uint32).reshape(-1, 2), H, 1e-5)
        h = pc.zeros((5, I), pc.f16, backend=be)
        mlp.swiglu_f16[mlp._groups(5 * I // 4)](pc.asarray(y2, backend=be).reshape(-1, 4),
                                                 h.view(np.uint32).reshape(-1, 2), 5, I)
        got[be] = (n.numpy(), h.numpy())
    for a, b in zip(got["vulkan"], got["emulator"]):
        np.testing.assert_allclose(a, b, rtol=2.0 ** -10, atol=2.0 ** -24)
        assert (a == b).mean() > 0.98
