"""Reads of shared memory that nothing in the workgroup wrote in this dispatch are reported as
undefined behaviour at the reading line (Vulkan leaves Workgroup variables uninitialised; the
emulator's zero fill would otherwise hide the bug): scalar reads and cooperative-matrix loads,
only for invocations that are active, per workgroup and per launch."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f16, f32, u32

from core_helpers import FEW, emu, line_of

RULE = "Workgroup variables are not initialised"


@pc.kernel(workgroup_size=16)
def half_written(O: pc.Buffer[u32], n: u32, skip_wg: u32):
    lid = pc.local_invocation_index()
    wid = pc.workgroup_id.x
    sh = pc.shared(u32, 16)
    if (lid < n) & (wid != skip_wg):
        sh[lid] = lid * u32(3)
    pc.barrier()
    if lid < n:
        O[wid * u32(16) + lid] = sh[n - u32(1) - lid]     # READ


@FEW
@given(n=st.integers(0, 16), grid=st.integers(1, 3))
def test_reading_only_written_elements_is_fine(n, grid):
    O = np.zeros(16 * grid, np.uint32)
    emu(half_written, grid, O, n, 99)
    lid = np.arange(16)
    row = np.where(lid < n, (n - 1 - lid) * 3, 0)
    np.testing.assert_array_equal(O, np.tile(row, grid).astype(np.uint32))


@pytest.mark.parametrize("grid, skip, where", [(1, 99, None), (3, 2, "(2, 0, 0)")])
def test_scalar_read_of_unwritten_element(grid, skip, where):
    """Invocation 0 reads element n-1 = 15; with n = 16 every element is written except in
    workgroup `skip`; with the reads extended past n (kernel below) an element is unwritten."""
    O = np.zeros(16 * grid, np.uint32)
    if where is None:
        with pytest.raises(pc.EmulatorError) as e:
            emu(reads_past_written, grid, O, 8)
        where, element = "(0, 0, 0)", 15
        fn = reads_past_written
    else:
        with pytest.raises(pc.EmulatorError) as e:
            emu(half_written, grid, O, 16, skip)
        element, fn = 15, half_written
    msg = str(e.value)
    assert f"workgroup {where}, invocation 0: reads shared element {element}, which nothing" in msg
    assert RULE in e.value.rule and "write every element" in e.value.hint
    assert e.value.rule_id == "emulator.shared-unwritten"
    assert e.value.loc.line == line_of(fn, "# READ")


@pc.kernel(workgroup_size=16)
def reads_past_written(O: pc.Buffer[u32], n: u32):
    lid = pc.local_invocation_index()
    sh = pc.shared(u32, 16)
    if lid < n:
        sh[lid] = lid
    pc.barrier()
    O[lid] = sh[u32(15) - lid]                             # READ


def test_each_launch_starts_unwritten():
    """Writes of a previous launch do not count: shared memory lives for one dispatch."""
    O = np.zeros(16, np.uint32)
    emu(half_written, 1, O, 16, 99)
    with pytest.raises(pc.EmulatorError, match="nothing in this workgroup wrote"):
        emu(reads_past_written, 1, O, 8)


MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]


@pc.kernel(workgroup_size=64, subgroup_size=32)
def tile_through_shared(A: pc.ReadBuffer[f16], O: pc.Buffer[f32], rows: u32, stride: u32):
    """Subgroup s writes rows 0..rows-1 of tile s with scalar stores, then loads the whole
    16x16 tile as a matrix (stride `stride` >= 16 leaves gaps that are not read)."""
    lid = pc.local_invocation_index()
    sg = pc.subgroup_id()
    lane = pc.subgroup_local_id()
    sh = pc.shared(f16, 2 * 16 * 24)
    base = sg * u32(16 * 24)
    for r in range(rows):
        for c in range(lane, 16, 32):
            sh[base + r * stride + c] = A[r * u32(16) + c]
    pc.barrier()
    a = MatA.load(sh, base, stride)                          # LOAD
    acc = pc.mul_add(a, pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseB].fill(1.0), Acc.fill(0.0))
    pc.store(O, (pc.workgroup_id.x * u32(2) + sg) * u32(256), acc, 16)
    O[lid] = O[lid] + f32(0.0)


@pytest.mark.parametrize("stride", [16, 24])
def test_matrix_load_of_written_tile(stride):
    A = (np.arange(256) % 7).astype(np.float16)
    O = np.zeros(2 * 256, np.float32)
    emu(tile_through_shared, 1, A, O, 16, stride)
    ref = A.reshape(16, 16).astype(np.float32).sum(1, keepdims=True) * np.ones((1, 16))
    np.testing.assert_array_equal(O.reshape(2, 16, 16), np.stack([ref, ref]))


def test_matrix_load_of_partly_written_tile():
    A = np.ones(256, np.float16)
    O = np.zeros(2 * 256, np.float32)
    with pytest.raises(pc.EmulatorError) as e:
        emu(tile_through_shared, 1, A, O, 15, 24)
    assert ("workgroup (0, 0, 0), scope instance 0: reads shared element 360, which nothing"
            in str(e.value))                                # row 15, column 0 of tile 0
    assert e.value.rule_id == "emulator.shared-unwritten"
    assert RULE in e.value.rule
    assert e.value.loc.line == line_of(tile_through_shared, "# LOAD")


U4 = pc.vec(u32, 4)


@pc.kernel(workgroup_size=32, subgroup_size=32)
def matrix_through_vectors(A: pc.ReadBuffer[U4], O: pc.Buffer[f16], n: u32):
    """A 16x16 f16 tile staged as 32 uvec4 elements (8 halves each); a matrix store to shared
    memory counts as a write too."""
    lid = pc.local_invocation_index()
    sh = pc.shared(U4, 64)
    if lid < n:
        sh[lid] = A[lid]
    pc.barrier()
    a = MatA.load(sh, 0, 2)                                  # LOAD: strides count uvec4s
    pc.store(sh, 32, a, 2)
    pc.barrier()
    pc.store(O, 0, MatA.load(sh, 32, 2), 16)


def test_matrix_load_through_vector_elements():
    halves = (np.arange(256) % 11).astype(np.float16)
    A = halves.view(np.uint32).reshape(32, 4).copy()
    O = np.zeros(256, np.float16)
    emu(matrix_through_vectors, 1, A, O, 32)
    np.testing.assert_array_equal(O, halves)
    with pytest.raises(pc.EmulatorError, match="reads shared element 31, which nothing") as e:
        emu(matrix_through_vectors, 1, A, O, 31)
    assert e.value.loc.line == line_of(matrix_through_vectors, "# LOAD")


@pc.kernel(workgroup_size=32, subgroup_size=32)
def tensor_store_then_read(O: pc.Buffer[f32]):
    """pc.nv.store_tensor writes shared memory too (its writes count as writes)."""
    lid = pc.local_invocation_index()
    sh = pc.shared(f32, 256)
    pc.nv.store_tensor(sh, pc.nv.tensor_layout(2).dimension(16, 16), Acc.fill(2.0))
    pc.barrier()
    for i in range(8):
        O[lid * u32(8) + u32(i)] = sh[lid * u32(8) + u32(i)]


def test_tensor_store_counts_as_a_write():
    O = np.zeros(256, np.float32)
    emu(tensor_store_then_read, 1, O)
    np.testing.assert_array_equal(O, np.full(256, 2.0, np.float32))
