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
def subgroup_size(vulkan_caps):
    """The device's subgroup size, which the kernels are built for (8 on lavapipe)."""
    caps = vulkan_caps
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


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
@pytest.mark.parametrize("N,cfg", [(1, None), (5, None), (3, GemvConfig("q8_1", 2, 2, 2, None, 2)),
                                   (7, GemvConfig("q8_1", 1, 8, 1, None, 1))])
def test_integer_path_on_vulkan(gguf, subgroup_size, fmt, N, cfg):
    """activations='q8_1' through the real Vulkan path (OpSDot/OpSUDot, clustered subgroup
    reductions): the quantised activations bit for bit as the emulator's (lavapipe divides
    correctly rounded), Y equal to the emulator's up to the order of the f32 sums, and
    within the quantisation bound of gguf's float reference."""
    from pycoop.kernels import q8_1_error_bound, quantize_q8_1, quantize_q8_1_reference
    from pycoop.kernels import quantize_grid
    if subgroup_size < 8:
        pytest.skip("quantize_q8_1 reduces clusters of 8 lanes")
    M, K = 19, 192
    W = make_weights(gguf, fmt, M, K, seed=M + N)
    X = np.random.default_rng(N).standard_normal((N, K)).astype(np.float32)
    nb = N * K // 32
    Q, D, S = np.zeros(nb * 8, np.uint32), np.zeros(nb, np.float32), np.zeros(nb, np.int32)
    quantize_q8_1("f32", 4, subgroup_size)[quantize_grid(nb, 4, subgroup_size)](
        X.reshape(-1, 4), Q, D, S, nb, backend="vulkan")
    q, d, s = quantize_q8_1_reference(X)
    np.testing.assert_array_equal(Q.view(np.int8).reshape(N, K), q)
    np.testing.assert_array_equal(D.reshape(N, -1), d)
    np.testing.assert_array_equal(S.reshape(N, -1), s)
    y = matmul_q(W, X, fmt, config=cfg, backend="vulkan", subgroup_size=subgroup_size,
                 activations="q8_1")
    emu = matmul_q(W, X, fmt, config=cfg, backend="emulator", subgroup_size=subgroup_size,
                   activations="q8_1")
    np.testing.assert_allclose(y, emu, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(emu).max()))
    Wf = gguf.quants.dequantize(W, gguf.GGMLQuantizationType[fmt.upper()])
    err = np.abs(y - reference(gguf, fmt, W, X))
    assert (err <= q8_1_error_bound(Wf, d) + 1e-5 * np.abs(emu).max()).all()
