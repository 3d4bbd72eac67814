"""The GEMV kernels through the real Vulkan path (lavapipe in CI: subgroups of 8, arithmetic
collectives), each format against gguf's dequantisation and the emulator."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from pycoop.kernels import GemvConfig, matmul_q

sys.path.insert(0, str(Path(__file__).parents[1] / "core"))
from gemv_cases import check, gguf, make_weights, reference  # noqa: E402,F401 (fixture)

pytestmark = pytest.mark.vulkan


@pytest.fixture(scope="module")
def subgroup_size():
    """The device's subgroup size, which the kernels are built for (8 on lavapipe)."""
    try:
        from pycoop.runtime.vulkan import get_runtime
        caps = get_runtime().capabilities
    except Exception as e:
        pytest.skip(f"no Vulkan device: {e}")
    size = caps.subgroup_size
    if "arithmetic" not in caps.subgroup_operations:
        pytest.skip("the device has no subgroup arithmetic")
    return size


@pytest.mark.parametrize("fmt,M,K", [("f16", 19, 200), ("f16", 7, 45), ("q8_0", 21, 224),
                                     ("q4_0", 19, 160), ("q4_k", 9, 512)])
@pytest.mark.parametrize("N,cfg", [(1, None), (6, None), (5, GemvConfig("gemv", 3, 2, 2))])
def test_gemv_on_vulkan(gguf, subgroup_size, fmt, M, K, N, cfg):
    W = make_weights(gguf, fmt, M, K, seed=M + N)
    X = np.random.default_rng(N).standard_normal((N, K)).astype(np.float32)
    f = None if fmt == "f16" else fmt
    y = matmul_q(W, X, f, config=cfg, backend="vulkan", subgroup_size=subgroup_size)
    check(y, reference(gguf, fmt, W, X))
    emu = matmul_q(W, X, f, config=cfg, backend="emulator", subgroup_size=subgroup_size)
    np.testing.assert_allclose(y, emu, rtol=1e-5, atol=1e-4 * max(1.0, np.abs(emu).max()))
