"""The descriptor-set ABI (`compile(abi="descriptors")`): buffers as StorageBuffer bindings of
set 0 in parameter order, scalars in push constants; modules validate (Vulkan 1.3 env) with
plain, cooperative-matrix and NV tensor accesses, and the sidecar describes the bindings."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f16, f32, u32, u64
from pycoop.codegen import abi as abi_mod
from pycoop.spirv import tools

from core_helpers import SETTINGS, emu, line_of


@pc.kernel(workgroup_size=64)
def saxpy3(X: pc.ReadBuffer[f32], n: u32, Y: pc.Buffer[f32], a: f32, Out: pc.WriteBuffer[f32]):
    i = pc.global_invocation_id.x
    if i < n:
        Y[i] = Y[i] + a * X[i]
        Out[i] = Y[i] * 2.0


def decorations(asm: str, name: str) -> set[str]:
    return {m.group(1) for m in re.finditer(rf"OpDecorate %{name} (.+)", asm)}


def test_buffers_are_bindings_and_scalars_push_constants():
    ck = saxpy3.compile(abi="descriptors")
    asm = tools.disassemble(ck.spv)                 # validated by spirv-val (vulkan1.3)
    assert ck.abi == {
        "abi": "descriptors", "mode": "push_constants", "size": 8, "spec_constants": [],
        "args": [
            {"name": "X", "kind": "buffer", "set": 0, "binding": 0,
             "descriptor_type": "storage_buffer", "dtype": "float32", "access": "read"},
            {"name": "n", "kind": "scalar", "offset": 0, "dtype": "uint32"},
            {"name": "Y", "kind": "buffer", "set": 0, "binding": 1,
             "descriptor_type": "storage_buffer", "dtype": "float32", "access": "readwrite"},
            {"name": "a", "kind": "scalar", "offset": 4, "dtype": "float32"},
            {"name": "Out", "kind": "buffer", "set": 0, "binding": 2,
             "descriptor_type": "storage_buffer", "dtype": "float32", "access": "write"}]}
    for name, binding in (("X", 0), ("Y", 1), ("Out", 2)):
        assert {"DescriptorSet 0", f"Binding {binding}"} <= decorations(asm, name)
        assert re.search(rf"%{name} = OpVariable %_ptr_StorageBuffer_\w+ StorageBuffer", asm)
    assert "NonReadable" in decorations(asm, "Out") and "NonReadable" not in decorations(asm, "Y")
    # ReadBuffer: its block's member is NonWritable
    block = re.search(r"%X = OpVariable %_ptr_StorageBuffer_(\w+) ", asm).group(1)
    assert f"OpMemberDecorate %{block} 0 NonWritable" in asm
    # no device addresses: Logical addressing, no bufferDeviceAddress requirement
    assert "OpMemoryModel Logical Vulkan" in asm and "PhysicalStorageBuffer" not in asm
    assert "bufferDeviceAddress" not in ck.requirements["features"]
    assert ck.requirements["push_constants"] == 8


def test_device_address_abi_is_the_default_and_says_so():
    ck = saxpy3.compile()
    assert ck.abi["abi"] == "device_address" and ck.abi["mode"] == "push_constants"
    assert [a["offset"] for a in ck.abi["args"]] == [0, 8, 16, 24, 32]
    assert "OpMemoryModel PhysicalStorageBuffer64 Vulkan" in ck.spvasm
    assert saxpy3.compile(abi="device_address") is ck


def test_same_trace_same_results():
    """Both ABIs lower one traced module: the emulator result is the module's."""
    d = saxpy3.compile(abi="descriptors")
    assert d.module is saxpy3.compile().module
    x, y = np.arange(100, dtype=np.float32), np.ones(100, np.float32)
    out = np.zeros(100, np.float32)
    emu(saxpy3, 2, x, 100, y, 0.5, out)
    np.testing.assert_allclose(out, (1 + 0.5 * np.arange(100)) * 2)


def test_descriptor_modules_launch_unchecked_only():
    """pycoop launches the descriptor ABI too (tests/runtime/test_descriptor_launch.py);
    the bounds-checked variant exists only in the device-address ABI."""
    d = saxpy3.compile(abi="descriptors")
    x, y, out = np.arange(4, dtype=np.float32), np.ones(4, np.float32), np.zeros(4, np.float32)
    d.launch(1, [x, 4, y, 0.5, out], backend="emulator")
    np.testing.assert_allclose(out, (1 + 0.5 * np.arange(4)) * 2)
    with pytest.raises(pc.ArgumentError, match="checked=True.*device-address ABI.*"
                                               "abi='descriptors'"):
        d.launch(1, [x, 4, y, 0.5, out], backend="emulator", checked=True)


def test_unknown_abi():
    with pytest.raises(pc.ArgumentValueError, match="abi must be one of"):   # a ValueError too
        saxpy3.compile(abi="bindless")


PARAM_TYPES = [pc.Buffer[f32], pc.ReadBuffer[f16], pc.WriteBuffer[pc.u8], pc.u8, pc.i16, u32,
               u64, f16, f32, pc.f64]


@SETTINGS
@given(st.lists(st.sampled_from(PARAM_TYPES), min_size=1, max_size=14))
def test_descriptor_layout_properties(types):
    names = [f"p{i}" for i in range(len(types))]
    lay = abi_mod.layout(names, types, "descriptors")
    buffers = [a for a in lay["args"] if a["kind"] == "buffer"]
    assert [a["binding"] for a in buffers] == list(range(len(buffers)))
    assert all(a["set"] == 0 and "offset" not in a for a in buffers)
    end = 0
    for a, t in zip(lay["args"], types):
        if a["kind"] == "scalar":          # declaration order, natural alignment, no overlap
            assert a["offset"] >= end and a["offset"] % t.size == 0
            end = a["offset"] + t.size
    assert lay["size"] == (end + 7) // 8 * 8 and lay["mode"] == "push_constants"
    # the device-address layout keeps every parameter in the block, buffers as 8-byte addresses
    dev = abi_mod.layout(names, types)
    assert [a["name"] for a in dev["args"]] == names
    assert all(a["offset"] % 8 == 0 for a in dev["args"] if a["kind"] == "buffer")


MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
MatB = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseB]
Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]


@pc.kernel(workgroup_size=32)
def khr_tile(A: pc.ReadBuffer[f16], B: pc.ReadBuffer[f16], C: pc.Buffer[f32], K: u32):
    acc = Acc.load(C, 0, 16)
    for k in range(0, K, 16):
        acc = pc.mul_add(MatA.load(A, k, K), MatB.load(B, k * 16, 16), acc)
    pc.store(C, 0, acc, 16)


def test_khr_cooperative_matrix_loads_from_storage_buffers():
    asm = tools.disassemble(khr_tile.compile(abi="descriptors").spv)     # spirv-val clean
    loads = re.findall(r"OpCooperativeMatrixLoadKHR %\w+ (%\w+)", asm)
    assert len(loads) == 3
    for ptr in loads:
        chain = re.search(rf"{ptr} = OpAccessChain (%\w+)", asm).group(1)
        assert chain.startswith("%_ptr_StorageBuffer_")
    assert "Aligned" not in asm          # only PhysicalStorageBuffer accesses declare it
    rng = np.random.default_rng(1)
    K = 48
    a = rng.standard_normal((16, K)).astype(np.float16)
    b = rng.standard_normal((K, 16)).astype(np.float16)
    c = rng.standard_normal((16, 16)).astype(np.float32)
    ref = c + a.astype(np.float32) @ b.astype(np.float32)
    emu(khr_tile, 1, a, b, c, K)
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4)


def dec(p, bc, cib):
    return f16(p[cib[1]] * 2.0)


def test_nv_tensor_loads_from_storage_buffers_with_a_decode_function():
    Mat = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]

    @pc.kernel(workgroup_size=32)
    def nv_copy(A: pc.ReadBuffer[f16], O: pc.Buffer[f16]):
        l = pc.nv.tensor_layout(2, clamp="constant").dimension(16, 16)
        m = pc.nv.load_tensor(A, l, Mat, decode=dec)
        pc.nv.store_tensor(O, pc.nv.tensor_layout(2).dimension(16, 16), m)

    asm = tools.disassemble(nv_copy.compile(abi="descriptors").spv)     # spirv-val clean
    assert re.search(r"OpCooperativeMatrixLoadTensorNV %\w+ %\w+ %\w+ %\w+ NonPrivatePointer", asm)
    # the buffers are descriptors; the decode function still takes a PhysicalStorageBuffer
    # pointer (the extension says so), so the module keeps PhysicalStorageBuffer64 addressing
    assert re.search(r"%A = OpVariable %_ptr_StorageBuffer_\w+ StorageBuffer", asm)
    assert "OpMemoryModel PhysicalStorageBuffer64 Vulkan" in asm
    a = np.random.default_rng(2).standard_normal((16, 16)).astype(np.float16)
    o = np.zeros((16, 16), np.float16)
    emu(nv_copy, 1, a, o)
    np.testing.assert_array_equal(o, a * np.float16(2))


def test_too_many_scalar_bytes_for_push_constants():
    @pc.kernel(workgroup_size=1)
    def many(X: pc.Buffer[u64], a: u64, b: u64, c: u64, d: u64, e: u64, f: u64, g: u64, h: u64,
             i: u64, j: u64, k: u64, l: u64, m: u64, n: u64, o: u64, p: u64, q: u64):
        X[0] = a + q

    assert many.compile().abi["mode"] == "arg_buffer"         # the device-address ABI copes
    with pytest.raises(pc.CompileError) as err:
        many.compile(abi="descriptors")
    assert err.value.message == "the scalar parameters take 136 bytes of push constants"
    assert "maxPushConstantsSize >= 128" in err.value.rule and "buffer" in err.value.hint
    assert err.value.rule_id == "target.descriptor-push-constants"
    assert err.value.loc.line == line_of(test_too_many_scalar_bytes_for_push_constants,
                                         "@pc.kernel(workgroup_size=1)")


def test_opencl_kernels_have_no_descriptor_abi():
    @pc.kernel(workgroup_size=16)
    def prefetch(src: pc.Buffer[pc.u16]):
        pc.intel.block_prefetch(src, width=16, height=8, memory_width=64, memory_height=8,
                                pitch=64, coord=(0, 0))

    with pytest.raises(pc.ArgumentError, match="targets OpenCL.*Vulkan ABI"):
        prefetch.compile(abi="descriptors")
