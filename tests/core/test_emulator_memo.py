"""What the emulator keeps across launches of one configuration (pycoop.emulator.memo): a
repeated launch gives what a fresh one gives, the kept results follow the configuration
(grid, scalars, buffer sizes), and nothing computed from buffer contents is kept, so
data-dependent errors are still reported."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f32, u32
from pycoop.emulator import memo
from pycoop.kernels import (gemm_khr, gemm_khr_staged, gemm_nv, gemm_q4_0_planes, gemm_reference,
                            q4_0_planes)

from core_helpers import FEW

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
from q4_0_gemm import dequantize_q4_0, quantize_q4_0  # noqa: E402


def kept(kernel) -> list[int]:
    """The number of results kept per configuration of `kernel`'s module, oldest first."""
    return [len(m) for m in memo.configurations(kernel.compile().module.kernel)]


def operands(m, n, k, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(np.float16),
            rng.standard_normal((k, n)).astype(np.float16))


@pytest.mark.parametrize("name", ["khr", "staged", "nv"])
def test_a_repeated_launch_gives_what_a_fresh_one_gives(name):
    M, N, K = 128, 128, 96
    kern, grid = {"khr": (gemm_khr, (2, 2)),
                  "staged": (gemm_khr_staged(64, 64, 32, 2, 2), (2, 2)),
                  "nv": (gemm_nv(64, 64, 32, 128), (2, 2))}[name]
    for seed in range(3):                       # new contents each time, one configuration
        A, B = operands(M, N, K, seed)
        C = np.full((M, N), np.nan, np.float32)
        kern[grid](A, B, C, M, N, K, backend="emulator")
        np.testing.assert_allclose(C, gemm_reference(A, B), rtol=1e-5, atol=1e-4)
    assert kept(kern)[-1] > 0


def test_the_q4_0_planes_gemm_repeats_with_new_weights():
    M, N, K = 128, 64, 128
    k = gemm_q4_0_planes(64, 64, 64, 2, 2)
    rng = np.random.default_rng(4)
    for _ in range(2):
        Wq = quantize_q4_0(rng.standard_normal((M, K)).astype(np.float32))
        X = rng.standard_normal((K, N)).astype(np.float16)
        Y = np.zeros((M, N), np.float32)
        k[(2, 1)](*q4_0_planes(Wq, M, K), X.view(np.uint32).reshape(-1, 4), Y, M, N, K,
                  backend="emulator")
        np.testing.assert_allclose(Y, dequantize_q4_0(Wq, M, K).astype(np.float32)
                                   @ X.astype(np.float32), rtol=1e-5, atol=1e-4)


@given(st.lists(st.tuples(st.sampled_from([64, 128]), st.sampled_from([64, 128]),
                          st.sampled_from([16, 48, 64])), min_size=2, max_size=6))
@FEW
def test_configurations_interleaved(shapes):
    """Launches alternating between configurations each get their own kept results."""
    for i, (M, N, K) in enumerate(shapes):
        A, B = operands(M, N, K, i)
        C = np.zeros((M, N), np.float32)
        gemm_khr[(M // 64, N // 64)](A, B, C, M, N, K, backend="emulator")
        np.testing.assert_allclose(C, gemm_reference(A, B), rtol=1e-5, atol=1e-4)
    assert kept(gemm_khr)


def test_least_recently_launched_configurations_are_dropped(monkeypatch):
    monkeypatch.setattr(memo, "_CONFIGS", 2)
    for n in (64, 128, 192):
        A, B = operands(n, 64, 32, n)
        gemm_khr[(n // 64, 1)](A, B, np.zeros((n, 64), np.float32), n, 64, 32, backend="emulator")
    assert len(memo._MEMOS) == 2 and len(kept(gemm_khr)) == 2


def test_a_configuration_keeps_at_most_its_budget(monkeypatch):
    monkeypatch.setattr(memo, "_PER_CONFIG", 4096)
    M, N, K = 128, 128, 80                       # a configuration no other test launches
    for seed in range(2):
        A, B = operands(M, N, K, seed)
        C = np.zeros((M, N), np.float32)
        gemm_khr[(2, 2)](A, B, C, M, N, K, backend="emulator")
        np.testing.assert_allclose(C, gemm_reference(A, B), rtol=1e-5, atol=1e-4)
    (m,) = [m for m in memo.configurations(gemm_khr.compile().module.kernel)
            if m.nbytes or len(m)][-1:]
    assert m.nbytes <= 4096 and m.nbytes == sum(memo._footprint(v) for v in m.values())


def test_a_smaller_buffer_is_still_bounds_checked():
    M = N = K = 64
    A, B = operands(M, N, K, 0)
    C = np.zeros((M, N), np.float32)
    gemm_khr[(1, 1)](A, B, C, M, N, K, backend="emulator")
    with pytest.raises(pc.EmulatorError, match="out of bounds"):
        gemm_khr[(1, 1)](A[:48], B, C, M, N, K, backend="emulator")   # same scalars


@pc.kernel(workgroup_size=64)
def divide_where_positive(X: pc.Buffer[u32], Y: pc.Buffer[u32], D: u32):
    i = pc.global_invocation_id.x
    q = u32(1000) // (D + u32(64) - i)          # invariant: kept
    if X[i] > 0:
        Y[i] = q + u32(100) // (D - i)          # under a data-dependent branch: never kept


def test_data_dependent_undefined_behaviour_is_still_reported():
    X, Y = np.zeros(64, np.uint32), np.zeros(64, np.uint32)
    X[:5] = 1
    divide_where_positive[(1,)](X, Y, 10, backend="emulator")     # lane 10 inactive: fine
    assert Y[4] == 1000 // 70 + 100 // 6
    X[10] = 1
    with pytest.raises(pc.EmulatorError, match="division by zero"):
        divide_where_positive[(1,)](X, Y, 10, backend="emulator")


@pc.kernel(workgroup_size=64)
def reciprocal(Y: pc.Buffer[f32], s: f32):
    Y[pc.global_invocation_id.x] = f32(1.0) / s


def test_scalars_are_told_apart_by_their_bits():
    Y = np.zeros(64, np.float32)
    reciprocal[(1,)](Y, 0.0, backend="emulator")
    assert (Y == np.inf).all()
    reciprocal[(1,)](Y, -0.0, backend="emulator")              # equal to 0.0 as a float
    assert (Y == -np.inf).all()


def test_kept_arrays_are_read_only():
    gemm_khr[(1, 1)](*operands(64, 64, 32, 0), np.zeros((64, 64), np.float32), 64, 64, 32,
                     backend="emulator")
    per = memo.configurations(gemm_khr.compile().module.kernel)
    arrays = [v for m in per for v in m.values() if isinstance(v, np.ndarray)]
    assert arrays and not any(a.flags.writeable for a in arrays)


def test_the_memo_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("PYCOOP_EMULATOR_MEMO", "0")

    @pc.kernel(workgroup_size=64)
    def twice(Y: pc.Buffer[f32]):
        Y[pc.global_invocation_id.x] = f32(2.0) * Y[pc.global_invocation_id.x]

    Y = np.ones(64, np.float32)
    twice[(1,)](Y, backend="emulator")
    twice[(1,)](Y, backend="emulator")
    assert (Y == 4).all() and kept(twice) == []


def test_launches_from_several_threads():
    from concurrent.futures import ThreadPoolExecutor

    def launch(seed):
        M = N = 64 * (1 + seed % 2)
        A, B = operands(M, N, 32, seed)
        C = np.zeros((M, N), np.float32)
        gemm_khr[(M // 64, N // 64)](A, B, C, M, N, 32, backend="emulator")
        return np.abs(C - gemm_reference(A, B)).max()

    with ThreadPoolExecutor(4) as ex:
        assert max(ex.map(launch, range(16))) < 1e-3
