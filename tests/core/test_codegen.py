"""SPIR-V generation: every kernel of the core suite validates (spirv-val), and the
disassembly, capabilities, exported files and argument ABI are what the kernels need."""
import importlib
import json
import pathlib
import struct

import numpy as np
import pytest

import pycoop
from pycoop import bf16, f16, f32, f64, i8, i32, u8, u32
from pycoop.spirv.errors import SpirvValidationError

from core_helpers import KERNELS, emu

SIBLINGS = ["test_types", "test_ir", "test_emulator_scalar", "test_control_flow",
            "test_coopmat_khr", "test_launch_errors"]
SG = pycoop.Subgroup
T = 16


def _module_kernels():
    out = []
    for name in SIBLINGS:
        mod = importlib.import_module(name)
        for attr, v in vars(mod).items():
            if isinstance(v, pycoop.Kernel):
                out.append((f"{name}.{attr}", v))
    return out


@pytest.mark.parametrize("name,k", _module_kernels(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_module_level_kernel_validates(name, k):
    try:
        ck = k.compile()
    except pycoop.CompileError:
        return          # a kernel written to fail compiling (its test checks the error)
    except pycoop.ArgumentError:       # needs Const values: the run_last test covers the
        return                         # specialisations the other tests created
    spv = ck.spv                       # raises SpirvValidationError if spirv-val rejects it
    assert struct.unpack_from("<I", spv)[0] == 0x07230203
    assert "OpEntryPoint GLCompute" in ck.spvasm


@pytest.mark.run_last
def test_every_traced_specialisation_of_the_session_validates():
    """Every specialisation traced by any test of this session (kernels made inside test
    functions and factories included) lowers to SPIR-V that spirv-val accepts."""
    checked = 0
    failures = []
    for k in list(KERNELS):
        for ck in list(k._cache.values()):
            try:
                ck.spv
            except SpirvValidationError as e:
                failures.append(f"{k.name} {ck.consts}: {e}")
            checked += 1
    assert not failures, "\n".join(failures[:5])
    assert checked >= 1


# --------------------------------------------------------------------------- spot checks

def mma_kernel(ta, tb, tc, saturating=False):
    MA = pycoop.coopmat[ta, SG, T, T, pycoop.UseA]
    MB = pycoop.coopmat[tb, SG, T, T, pycoop.UseB]
    MC = pycoop.coopmat[tc, SG, T, T, pycoop.Accumulator]

    @pycoop.kernel(workgroup_size=32)
    def k_mma(A: pycoop.Buffer[ta], B: pycoop.Buffer[tb], C: pycoop.Buffer[tc]):
        d = pycoop.mul_add(MA.load(A, 0, 16), MB.load(B, 0, 16), MC.load(C, 0, 16),
                           saturating=saturating)
        pycoop.store(C, 0, d, 16)
    return k_mma.compile()


def _mul_add_line(asm):
    lines = [ln for ln in asm.splitlines() if "OpCooperativeMatrixMulAddKHR" in ln]
    assert len(lines) == 1
    return lines[0]


@pytest.mark.parametrize("ta,tb,tc,sat,mask", [
    (f16, f16, f32, False, []),
    (u8, u8, u32, False, []),
    (i8, i8, i32, False, ["MatrixASignedComponentsKHR", "MatrixBSignedComponentsKHR",
                          "MatrixCSignedComponentsKHR", "MatrixResultSignedComponentsKHR"]),
    (i8, u8, i32, False, ["MatrixASignedComponentsKHR", "MatrixCSignedComponentsKHR",
                          "MatrixResultSignedComponentsKHR"]),
    (u8, i8, u32, False, ["MatrixBSignedComponentsKHR"]),
    (i8, i8, i32, True, ["MatrixASignedComponentsKHR", "MatrixBSignedComponentsKHR",
                         "MatrixCSignedComponentsKHR", "MatrixResultSignedComponentsKHR",
                         "SaturatingAccumulationKHR"]),
])
def test_mul_add_operand_mask(ta, tb, tc, sat, mask):
    ck = mma_kernel(ta, tb, tc, sat)
    line = _mul_add_line(ck.spvasm)
    words = line.split()
    ops_after = words[words.index("OpCooperativeMatrixMulAddKHR") + 5:]
    assert (ops_after[0].split("|") if ops_after else []) == mask
    shapes = ck.requirements["coopmat_shapes"]
    assert len(shapes) == 1 and shapes[0][:3] == (16, 16, 16) and shapes[0][7] == sat


def test_capabilities_follow_the_types_used():
    caps = lambda ck: set(ck.metadata()["capabilities"])   # noqa: E731
    asm_caps = lambda ck: {ln.split()[1] for ln in ck.spvasm.splitlines()  # noqa: E731
                           if ln.strip().startswith("OpCapability")}
    f16mm = mma_kernel(f16, f16, f32)
    i8mm = mma_kernel(i8, i8, i32)
    bfmm = mma_kernel(bf16, bf16, f32)
    u8mm = mma_kernel(u8, u8, u32)
    for ck in (f16mm, i8mm, bfmm, u8mm):
        assert caps(ck) == asm_caps(ck)
        assert {"Shader", "CooperativeMatrixKHR", "VulkanMemoryModel",
                "PhysicalStorageBufferAddresses"} <= caps(ck)
        assert 'OpExtension "SPV_KHR_cooperative_matrix"' in ck.spvasm
    assert "Float16" in caps(f16mm) and "StorageBuffer16BitAccess" in caps(f16mm)
    assert "Int8" not in caps(f16mm) and "Float16" not in caps(i8mm)
    assert {"Int8", "StorageBuffer8BitAccess"} <= caps(i8mm) and "Int8" in caps(u8mm)
    assert {"BFloat16TypeKHR", "BFloat16CooperativeMatrixKHR"} <= caps(bfmm)
    assert "Float16" not in caps(bfmm)
    assert "OpTypeFloat 16 BFloat16KHR" in bfmm.spvasm
    assert 'OpExtension "SPV_KHR_bfloat16"' in bfmm.spvasm
    assert "BFloat16TypeKHR" not in caps(f16mm)


@pycoop.kernel(workgroup_size=32)
def k_plain_f32(A: pycoop.Buffer[f32], n: u32):
    i = pycoop.global_invocation_id.x
    if i < n:
        A[i] = A[i] * 2.0


@pycoop.kernel(workgroup_size=32)
def k_flow(A: pycoop.Buffer[i32], n: i32):
    i = pycoop.local_invocation_index()
    s = 0
    for j in range(n):
        if j % 2 == 0:
            s = s + j
    while s > 100:
        s = s - 7
    A[i] = s


def test_plain_kernel_needs_no_optional_capabilities():
    ck = k_plain_f32.compile()
    caps = set(ck.metadata()["capabilities"])
    assert not caps & {"Float16", "Int8", "Int16", "Int64", "Float64", "CooperativeMatrixKHR",
                       "StorageBuffer8BitAccess", "StorageBuffer16BitAccess"}
    assert "OpSelectionMerge" in ck.spvasm and "OpLoopMerge" not in ck.spvasm
    assert ck.requirements["coopmat_shapes"] == []


def test_structured_control_flow_merges():
    asm = k_flow.compile().spvasm
    assert asm.count("OpLoopMerge") == 2
    assert asm.count("OpSelectionMerge") == 1
    assert "OpPhi" in asm and "OpBranchConditional" in asm
    a = np.zeros(32, np.int32)
    emu(k_flow, 1, a, 30)
    s = sum(j for j in range(30) if j % 2 == 0)
    while s > 100:
        s -= 7
    assert (a == s).all()


@pycoop.kernel(workgroup_size=(8, 4))
def k_abi(A: pycoop.Buffer[f16], n: u32, B: pycoop.ReadBuffer[f32], h: f16, d: f64, c: u8,
          C: pycoop.WriteBuffer[i32]):
    i = pycoop.local_invocation_index()
    C[i] = pycoop.cast(B[i] + pycoop.cast(A[i] * h, f32) + pycoop.cast(d, f32), i32) + \
        pycoop.cast(n, i32) + pycoop.cast(c, i32)


def test_abi_push_constant_offsets_and_alignment():
    abi = k_abi.compile().abi
    assert abi["mode"] == "push_constants"
    args = {a["name"]: a for a in abi["args"]}
    assert [a["name"] for a in abi["args"]] == ["A", "n", "B", "h", "d", "c", "C"]
    assert [args[k]["offset"] for k in ("A", "n", "B", "h", "d", "c", "C")] == \
        [0, 8, 16, 24, 32, 40, 48]
    assert abi["size"] == 56
    assert args["A"]["kind"] == "buffer" and args["A"]["dtype"] == "float16"
    assert args["B"]["access"] == "read" and args["C"]["access"] == "write"
    assert args["h"]["dtype"] == "float16" and args["d"]["dtype"] == "float64"
    for a in abi["args"]:
        align = 8 if a["kind"] == "buffer" else np.dtype(a["dtype"]).itemsize
        assert a["offset"] % align == 0
    asm = k_abi.compile().spvasm
    for i, off in enumerate([0, 8, 16, 24, 32, 40, 48]):
        assert f"OpMemberDecorate %Args {i} Offset {off}" in asm
    assert "LocalSize 8 4 1" in asm


def test_save_writes_spv_and_json_sidecar(tmp_path):
    ck = k_abi.compile()
    p = ck.save(tmp_path / "k_abi.spv")
    assert p == tmp_path / "k_abi.spv"
    assert p.read_bytes() == ck.spv
    meta = json.loads((tmp_path / "k_abi.spv.json").read_text())
    assert meta["kernel"] == "k_abi" and meta["entry_point"] == "main"
    assert meta["workgroup_size"] == [8, 4, 1] and meta["subgroup_size"] == 32
    assert meta["abi"] == json.loads(json.dumps(ck.abi))
    assert [a["offset"] for a in meta["abi"]["args"]] == [0, 8, 16, 24, 32, 40, 48]
    assert set(meta["capabilities"]) >= {"Float16", "Float64", "Int8"}
    assert meta["requirements"]["push_constants"] == 56
    assert meta["pycoop_version"] == pycoop.__version__


@pycoop.kernel(workgroup_size=32)
def k_many(b0: pycoop.Buffer[f32], b1: pycoop.Buffer[f32], b2: pycoop.Buffer[f32],
           b3: pycoop.Buffer[f32], b4: pycoop.Buffer[f32], b5: pycoop.Buffer[f32],
           b6: pycoop.Buffer[f32], b7: pycoop.Buffer[f32], b8: pycoop.Buffer[f32],
           b9: pycoop.Buffer[f32], b10: pycoop.Buffer[f32], b11: pycoop.Buffer[f32],
           b12: pycoop.Buffer[f32], b13: pycoop.Buffer[f32], b14: pycoop.Buffer[f32],
           b15: pycoop.Buffer[f32], s: u32, t: f32):
    i = pycoop.local_invocation_index()
    b15[i] = b0[i] + b14[i] * t + pycoop.cast(s, f32)


@pycoop.kernel(workgroup_size=32)
def k_exactly_128(b0: pycoop.Buffer[f32], b1: pycoop.Buffer[f32], b2: pycoop.Buffer[f32],
                  b3: pycoop.Buffer[f32], b4: pycoop.Buffer[f32], b5: pycoop.Buffer[f32],
                  b6: pycoop.Buffer[f32], b7: pycoop.Buffer[f32], b8: pycoop.Buffer[f32],
                  b9: pycoop.Buffer[f32], b10: pycoop.Buffer[f32], b11: pycoop.Buffer[f32],
                  b12: pycoop.Buffer[f32], b13: pycoop.Buffer[f32], b14: pycoop.Buffer[f32],
                  b15: pycoop.Buffer[f32]):
    i = pycoop.local_invocation_index()
    b15[i] = b0[i]


def test_arg_buffer_mode_above_128_bytes():
    small = k_exactly_128.compile()
    assert small.abi["mode"] == "push_constants" and small.abi["size"] == 128
    ck = k_many.compile()
    abi = ck.abi
    assert abi["mode"] == "arg_buffer"
    assert abi["size"] == 8 * 16 + 8
    assert [a["offset"] for a in abi["args"]][-3:] == [120, 128, 132]
    assert ck.requirements["push_constants"] == 8
    asm = ck.spvasm
    assert "OpTypePointer PhysicalStorageBuffer %Args" in asm
    assert asm.count("OpVariable") >= 1 and "PushConstant" in asm
    arrays = [np.full(32, float(i), np.float32) for i in range(16)]
    emu(k_many, 1, *arrays, 3, 0.5)
    np.testing.assert_array_equal(arrays[15], np.full(32, 0 + 14 * 0.5 + 3, np.float32))


def test_compile_is_cached_and_ir_is_stable():
    a = k_plain_f32.compile()
    assert a is k_plain_f32.compile()
    assert a.spv == a.spv and a.ir == k_plain_f32.compile().ir
    assert "k_plain_f32" in repr(a) and "k_plain_f32" in repr(k_plain_f32)


MU8 = pycoop.coopmat[u8, SG, T, T, pycoop.Accumulator]


@pycoop.kernel(workgroup_size=32)
def k_unsigned_to_signed(A: pycoop.Buffer[u8], B: pycoop.Buffer[i32], C: pycoop.Buffer[i8]):
    i = pycoop.local_invocation_index()
    B[i] = pycoop.cast(A[i], i32) - 1                 # zero-extension into a signed type
    pycoop.store(B, 32, pycoop.convert(MU8.load(A, 0, 16), i32), 16)
    C[i] = pycoop.cast(pycoop.cast(A[i], u32) + 1, i8)


def test_unsigned_to_wider_signed_conversion_validates_and_zero_extends():
    """OpUConvert needs an unsigned result type; u8 -> i32 must still zero-extend."""
    ck = k_unsigned_to_signed.compile()
    asm = ck.spvasm
    assert "OpUConvert %uint" in asm and "OpBitcast %int" in asm
    a = np.arange(256, dtype=np.uint8)[::-1].copy()
    b = np.zeros(32 + 256, np.int32)
    c = np.zeros(32, np.int8)
    emu(k_unsigned_to_signed, 1, a, b, c)
    np.testing.assert_array_equal(b[:32], a[:32].astype(np.int32) - 1)
    np.testing.assert_array_equal(b[32:], a.astype(np.int32))
    np.testing.assert_array_equal(c, (a[:32].astype(np.int64) + 1).astype(np.uint8).view(np.int8))
