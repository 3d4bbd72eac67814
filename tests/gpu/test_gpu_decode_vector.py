"""SPV_NV_cooperative_matrix_decode_vector examples on a real GPU against the emulator (-m gpu).

Devices without VK_NV_cooperative_matrix_decode_vector (and spirv-val 2025.5) get the module
with the DecodeVectorFunc operand stripped; the emulator runs with checking on (decode and
decode_vector called and compared), so both paths are covered.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import pycoop as pc

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).parents[2] / "examples"


def _example(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _both(kernel, grid, args):
    try:
        pc.runtime.backend.vulkan_missing(kernel.compile())
    except pc.BackendUnavailable as e:
        pytest.skip(str(e))
    emu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    with pc.knobs.check_decode_vector():
        kernel[grid](*emu, backend="emulator")
    gpu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    assert kernel[grid](*gpu, backend="vulkan").backend == "vulkan"
    return gpu, emu


@pytest.mark.parametrize("M, N, K", [(40, 80, 256), (33, 17, 96)])
def test_q4_0_v4(M, N, K):
    ex = _example("q4_0_gemm")
    rng = np.random.default_rng(M)
    X = rng.standard_normal((M, K)).astype(np.float16)
    W = ex.quantize_q4_0(rng.standard_normal((N, K)).astype(np.float32))
    Y = np.zeros((M, N), np.float32)
    gpu, emu = _both(ex.q4_gemm_v4, (-(-M // 16), -(-N // 16)), [X, W, Y, M, N, K])
    np.testing.assert_allclose(gpu[2], emu[2], atol=1e-4 * np.abs(emu[2]).max())
    assert ex.q4_gemm_v4.compile().decode_vector in ("stripped", "kept")


@pytest.mark.parametrize("M, N, K", [(40, 48, 128), (20, 70, 64)])
def test_q1_v8(M, N, K):
    ex = _example("q1_gemm")
    rng = np.random.default_rng(N)
    X = rng.standard_normal((M, K)).astype(np.float16)
    W = ex.quantize_q1(rng.standard_normal((N, K)).astype(np.float32))
    Y = np.zeros((M, N), np.float32)
    gpu, emu = _both(ex.q1_gemm, (-(-M // 16), -(-N // 16)), [X, W, Y, M, N, K])
    np.testing.assert_allclose(gpu[2], emu[2], atol=1e-4 * np.abs(emu[2]).max())
