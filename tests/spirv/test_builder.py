"""ModuleBuilder tests: every module built here must pass spirv-val."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from pycoop.spirv import ModuleBuilder, SpirvEncodingError, SpirvValidationError, tools

REFERENCE_DIR = Path("/work/shared/reference/spvasm/valid")


def canonical(text: str) -> list[str]:
    """Disassembly lines without comments/debug names, ids renumbered by first appearance: a built
    module and an assembled reference compare equal when their instruction order matches."""
    ids: dict[str, str] = {}
    out = []
    for line in text.splitlines():
        line = line.split(";", 1)[0].strip()
        if not line or line.startswith(("OpName", "OpMemberName")):
            continue
        out.append(re.sub(r"%[\w.]+", lambda m: ids.setdefault(m.group(0), f"%{len(ids) + 1}"), " ".join(line.split())))
    return out


def words(spv: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(spv) // 4}I", spv))


def skeleton(*capabilities: str) -> ModuleBuilder:
    """Builder with Shader + Vulkan memory model, for small validation modules."""
    b = ModuleBuilder()
    for cap in ("Shader", "VulkanMemoryModel", *capabilities):
        b.capability(cap)
    b.memory_model("Logical", "Vulkan")
    return b


def finish(b: ModuleBuilder) -> bytes:
    """Add an empty GLCompute entry point, assemble and spirv-val."""
    void = b.type("OpTypeVoid")
    main = b.begin_function(void, None, "None", b.type("OpTypeFunction", void))
    b.emit_label()
    b.emit("OpReturn")
    b.end_function()
    b.entry_point("GLCompute", main, "main")
    b.execution_mode(main, "LocalSize", 1, 1, 1)
    spv = b.assemble()
    tools.validate(spv, "vulkan1.3")
    return spv


def build_khr_muladd() -> bytes:
    """a_khr_coopmat_muladd.spvasm, built in the reference's instruction order."""
    b = ModuleBuilder((1, 6))
    for cap in ("Shader", "Float16", "StorageBuffer16BitAccess", "VulkanMemoryModel", "CooperativeMatrixKHR"):
        b.capability(cap)
    b.extension("SPV_KHR_cooperative_matrix")
    b.memory_model("Logical", "Vulkan")
    main = b.new_id()
    void = b.type("OpTypeVoid")
    fnvoid = b.type("OpTypeFunction", void)
    uint = b.type("OpTypeInt", 32, 0)
    half = b.type("OpTypeFloat", 16)
    f32 = b.type("OpTypeFloat", 32)
    rta_h = b.type("OpTypeRuntimeArray", half)
    rta_f = b.type("OpTypeRuntimeArray", f32)
    sa = b.type("OpTypeStruct", rta_h, unique=True)
    sc = b.type("OpTypeStruct", rta_f, unique=True)
    p_sa = b.type("OpTypePointer", "StorageBuffer", sa)
    p_sc = b.type("OpTypePointer", "StorageBuffer", sc)
    p_h = b.type("OpTypePointer", "StorageBuffer", half)
    p_f = b.type("OpTypePointer", "StorageBuffer", f32)
    bufs = [b.global_inst("OpVariable", p, "StorageBuffer") for p in (p_sa, p_sa, p_sc)]
    c0, c1, c2, c3, c16 = (b.constant(uint, v) for v in (0, 1, 2, 3, 16))
    mat_a = b.type("OpTypeCooperativeMatrixKHR", half, c3, c16, c16, c0)
    mat_b = b.type("OpTypeCooperativeMatrixKHR", half, c3, c16, c16, c1)
    mat_c = b.type("OpTypeCooperativeMatrixKHR", f32, c3, c16, c16, c2)

    b.entry_point("GLCompute", main, "main", bufs)
    b.execution_mode(main, "LocalSize", 32, 1, 1)
    b.name(main, "main")
    b.decorate(rta_h, "ArrayStride", 2)
    b.decorate(rta_f, "ArrayStride", 4)
    b.member_decorate(sa, 0, "Offset", 0)
    b.member_decorate(sc, 0, "Offset", 0)
    b.decorate(sa, "Block")
    b.decorate(sc, "Block")
    for binding, var in enumerate(bufs):
        b.decorate(var, "DescriptorSet", 0)
        b.decorate(var, "Binding", binding)

    b.begin_function(void, main, "None", fnvoid)
    b.emit_label()
    pa = b.emit("OpAccessChain", p_h, bufs[0], c0, c0)
    pb = b.emit("OpAccessChain", p_h, bufs[1], c0, c0)
    pc = b.emit("OpAccessChain", p_f, bufs[2], c0, c0)
    a = b.emit("OpCooperativeMatrixLoadKHR", mat_a, pa, c0, c16, "NonPrivatePointer")
    bm = b.emit("OpCooperativeMatrixLoadKHR", mat_b, pb, c0, c16, "NonPrivatePointer")
    c = b.emit("OpCooperativeMatrixLoadKHR", mat_c, pc, c0, c16, "NonPrivatePointer")
    d = b.emit("OpCooperativeMatrixMulAddKHR", mat_c, a, bm, c)
    b.emit("OpCooperativeMatrixLengthKHR", uint, mat_c)
    assert b.emit("OpCooperativeMatrixStoreKHR", pc, d, c0, c16, "NonPrivatePointer") is None
    b.emit("OpReturn")
    b.end_function()
    return b.assemble()


def test_khr_muladd_matches_reference():
    spv = build_khr_muladd()
    tools.validate(spv, "vulkan1.3")
    ref = tools.assemble_text((REFERENCE_DIR / "a_khr_coopmat_muladd.spvasm").read_text(), "vulkan1.3")
    assert canonical(tools.disassemble(spv)) == canonical(tools.disassemble(ref))
    assert words(spv)[:3] == [0x07230203, 0x00010600, 0]
    assert words(spv)[4] == 0


def build_psb_loop() -> tuple[bytes, dict[str, int]]:
    """Linked-list sum over PhysicalStorageBuffer pointers from a push-constant block.

    Exercises OpTypeForwardPointer (recursive PSB struct), u64 members, OpPhi with forward
    references, OpLoopMerge, a Function variable requested mid-body, OpString/OpLine and
    MemoryAccess parameters ("Aligned|MakePointerAvailable|NonPrivatePointer" 4 %scope)."""
    b = ModuleBuilder((1, 6))
    for cap in ("Shader", "Int64", "PhysicalStorageBufferAddresses", "VulkanMemoryModel",
                "VulkanMemoryModelDeviceScope"):
        b.capability(cap)
    b.memory_model("PhysicalStorageBuffer64", "Vulkan")
    src = b.string("kernel.py")
    void = b.type("OpTypeVoid")
    fnvoid = b.type("OpTypeFunction", void)
    boolean = b.type("OpTypeBool")
    uint = b.type("OpTypeInt", 32, 0)
    u64 = b.type("OpTypeInt", 64, 0)
    f32 = b.type("OpTypeFloat", 32)
    v3u = b.type("OpTypeVector", uint, 3)

    node_ptr = b.forward_pointer("PhysicalStorageBuffer")
    node = b.type("OpTypeStruct", f32, node_ptr, unique=True)
    assert b.type("OpTypePointer", "PhysicalStorageBuffer", node, result=node_ptr) == node_ptr
    assert b.type("OpTypePointer", "PhysicalStorageBuffer", node) == node_ptr
    b.member_decorate(node, 0, "Offset", 0)
    b.member_decorate(node, 1, "Offset", 8)
    b.decorate(node, "Block")
    psb_f32 = b.type("OpTypePointer", "PhysicalStorageBuffer", f32)
    b.decorate(psb_f32, "ArrayStride", 4)
    psb_next = b.type("OpTypePointer", "PhysicalStorageBuffer", node_ptr)

    pc_struct = b.type("OpTypeStruct", node_ptr, u64, uint, unique=True)
    for member, offset in enumerate((0, 8, 16)):
        b.member_decorate(pc_struct, member, "Offset", offset)
    b.decorate(pc_struct, "Block")
    b.name(pc_struct, "Params")
    b.member_name(pc_struct, 0, "head")
    pc_ptr = b.type("OpTypePointer", "PushConstant", pc_struct)
    pc = b.global_inst("OpVariable", pc_ptr, "PushConstant")
    in_v3u = b.type("OpTypePointer", "Input", v3u)
    gid = b.global_inst("OpVariable", in_v3u, "Input")
    b.decorate(gid, "BuiltIn", "GlobalInvocationId")
    fn_f32 = b.type("OpTypePointer", "Function", f32)

    c0, c1, c2 = (b.constant(uint, v) for v in (0, 1, 2))
    device = b.constant(uint, 1)  # Scope Device
    f0 = b.constant(f32, 0.0)
    no_addr = b.constant(u64, 0)

    main = b.new_id()
    b.entry_point("GLCompute", main, "main", [pc, gid])
    b.execution_mode(main, "LocalSize", 64, 1, 1)
    b.name(main, "main")

    b.begin_function(void, main, "None", fnvoid)
    entry = b.emit_label()
    b.line(src, 3, 1)
    pc_node_ptr = b.type("OpTypePointer", "PushConstant", node_ptr)
    head = b.emit("OpLoad", node_ptr, b.emit("OpAccessChain", pc_node_ptr, pc, c0))
    addr = b.emit("OpLoad", u64, b.emit("OpAccessChain", b.type("OpTypePointer", "PushConstant", u64), pc, c1))
    n = b.emit("OpLoad", uint, b.emit("OpAccessChain", b.type("OpTypePointer", "PushConstant", uint), pc, c2))
    header, cond, body, cont, merge = (b.label() for _ in range(5))
    b.emit("OpBranch", header)

    i_next, acc_next, node_next = b.new_id(), b.new_id(), b.new_id()
    b.emit_label(header)
    i = b.emit("OpPhi", uint, c0, entry, i_next, cont)
    acc = b.emit("OpPhi", f32, (f0, entry), (acc_next, cont))
    cur = b.emit("OpPhi", node_ptr, head, entry, node_next, cont)
    b.emit("OpLoopMerge", merge, cont, "None")
    b.emit("OpBranch", cond)

    b.emit_label(cond)
    b.emit("OpBranchConditional", b.emit("OpULessThan", boolean, i, n), body, merge)

    b.emit_label(body)
    b.line(src, 5, 9)
    value = b.emit("OpLoad", f32, b.emit("OpAccessChain", psb_f32, cur, c0), "Aligned", 8)
    b.emit("OpFAdd", f32, acc, value, result=acc_next)
    b.emit("OpLoad", node_ptr, b.emit("OpAccessChain", psb_next, cur, c1), "Aligned", 8, result=node_next)
    b.emit("OpBranch", cont)

    b.emit_label(cont)
    b.emit("OpIAdd", uint, i, c1, result=i_next)
    b.emit("OpBranch", header)

    b.emit_label(merge)
    tmp = b.function_variable(fn_f32)  # requested late, must land in the entry block
    b.emit("OpStore", tmp, acc)
    has_out = b.emit("OpINotEqual", boolean, addr, no_addr)
    store, done = b.label(), b.label()
    b.emit("OpSelectionMerge", done, "None")
    b.emit("OpBranchConditional", has_out, store, done)
    b.emit_label(store)
    out = b.emit("OpConvertUToPtr", psb_f32, addr)
    x = b.emit("OpCompositeExtract", uint, b.emit("OpLoad", v3u, gid), 0)
    dst = b.emit("OpPtrAccessChain", psb_f32, out, x)
    b.emit("OpStore", dst, b.emit("OpLoad", f32, tmp), "Aligned|MakePointerAvailable|NonPrivatePointer", 4, device)
    b.emit("OpBranch", done)
    b.emit_label(done)
    b.emit("OpReturn")
    b.end_function()
    return b.assemble(), {"tmp": tmp, "entry": entry}


def test_psb_loop_module_validates():
    spv, ids = build_psb_loop()
    tools.validate(spv, "vulkan1.3")
    text = tools.disassemble(spv, friendly_names=False)
    lines = canonical(tools.disassemble(spv))
    assert "OpMemoryModel PhysicalStorageBuffer64 Vulkan" in lines
    assert re.search(r"OpTypeForwardPointer %\d+ PhysicalStorageBuffer", text)
    assert re.search(r"OpPhi %\d+ %\d+ %\d+ %\d+ %\d+", text)
    assert re.search(r"OpLoopMerge %\d+ %\d+ None", text)
    assert re.search(r"OpStore %\d+ %\d+ Aligned\|MakePointerAvailable\|NonPrivatePointer 4 %\d+", text)
    assert 'OpString "kernel.py"' in text and re.search(r"OpLine %\d+ 5 9", text)
    assert "OpName %" in text and '"head"' in text
    # The Function variable sits right after the entry block's label.
    first = text.split(f"%{ids['entry']} = OpLabel\n", 1)[1].splitlines()[0].strip()
    assert re.fullmatch(rf"%{ids['tmp']} = OpVariable %\d+ Function", first)


def test_type_and_constant_dedup():
    b = skeleton("Int64")
    u32 = b.type("OpTypeInt", 32, 0)
    assert b.type("OpTypeInt", 32, 0) == u32
    assert b.type("OpTypeInt", 32, 1) != u32
    f32 = b.type("OpTypeFloat", 32)
    assert b.constant(u32, 7) == b.constant(u32, 7) == b.const_int(u32, 32, False, 7)
    assert b.constant(f32, 1.0) == b.const_float(f32, 32, 0x3F800000)
    assert b.constant(u32, 1) != b.constant(f32, 1.0)
    v2 = b.type("OpTypeVector", f32, 2)
    comp = b.constant_composite(v2, [b.constant(f32, 1.0), b.constant(f32, 2.0)])
    assert b.constant_composite(v2, [b.constant(f32, 1.0), b.constant(f32, 2.0)]) == comp
    assert b.constant_null(v2) == b.constant_null(v2)
    boolean = b.type("OpTypeBool")
    assert b.const_bool(boolean, True) == b.constant(boolean, True) != b.const_bool(boolean, False)
    s1 = b.type("OpTypeStruct", u32, unique=True)
    assert b.type("OpTypeStruct", u32, unique=True) != s1
    assert b.spec_constant(u32, 3) != b.spec_constant(u32, 3)
    b.capability("Shader")  # duplicates collapse
    b.extension("SPV_KHR_vulkan_memory_model")
    b.extension("SPV_KHR_vulkan_memory_model")
    text = tools.disassemble(finish(b))
    assert text.count("OpTypeInt 32 0") == 1
    assert text.count("OpCapability Shader") == 1
    assert text.count('OpExtension "SPV_KHR_vulkan_memory_model"') == 1


def test_capabilities_and_extensions_sorted():
    b = ModuleBuilder()
    for cap in ("VulkanMemoryModel", "Int64", "Shader", "Float16"):
        b.capability(cap)
    b.extension("SPV_KHR_b")
    b.extension("SPV_KHR_a")
    b.memory_model("Logical", "Vulkan")
    first = b.assemble()
    lines = [line for line in tools.disassemble(first).splitlines() if "OpCapability" in line or "OpExtension" in line]
    assert [line.split()[-1] for line in lines] == ["Shader", "Float16", "Int64", "VulkanMemoryModel",
                                                    '"SPV_KHR_a"', '"SPV_KHR_b"']
    assert b.assemble() == first  # deterministic


def test_bitenum_parameters_in_bit_order():
    # MemoryAccess Aligned (0x2, literal) then MakePointerAvailable (0x8, scope id).
    enc = ModuleBuilder.encode("OpStore", (5, 6, "MakePointerAvailable|Aligned", 16, 9))
    assert enc == [6 << 16 | 62, 5, 6, 0x2 | 0x8, 16, 9]
    assert ModuleBuilder.encode("OpStore", (5, 6, 0xA, 16, 9)) == enc
    with pytest.raises(SpirvEncodingError, match="needs a IdScope parameter"):
        ModuleBuilder.encode("OpStore", (5, 6, "Aligned|MakePointerAvailable", 16))
    # TensorAddressingOperands: TensorView, DecodeFunc, DecodeVectorFunc (overlay) ids follow in bit order.
    enc = ModuleBuilder.encode("OpCooperativeMatrixLoadTensorNV",
                               (1, 3, 4, 5, "None", "DecodeVectorFunc|DecodeFunc", 7, 8), 2)
    assert enc == [10 << 16 | 5367, 1, 2, 3, 4, 5, 0, 0x6, 7, 8]  # 10 words (word0 included)


def test_memory_access_parameters_validate():
    b = skeleton()
    u32 = b.type("OpTypeInt", 32, 0)
    var = b.global_inst("OpVariable", b.type("OpTypePointer", "Workgroup", u32), "Workgroup")
    void = b.type("OpTypeVoid")
    device = b.constant(u32, 1)
    main = b.begin_function(void, None, "None", b.type("OpTypeFunction", void))
    b.emit_label()
    b.emit("OpStore", var, b.constant(u32, 5), "Aligned|MakePointerAvailable|NonPrivatePointer", 4, device)
    b.emit("OpReturn")
    b.end_function()
    b.capability("VulkanMemoryModelDeviceScope")
    b.entry_point("GLCompute", main, "main", [var])
    b.execution_mode(main, "LocalSize", 1, 1, 1)
    spv = b.assemble()
    tools.validate(spv, "vulkan1.3")
    assert "Aligned|MakePointerAvailable|NonPrivatePointer 4 %uint_1" in tools.disassemble(spv)


def test_literal_strings_padding():
    for text, n in (("", 1), ("abc", 1), ("abcd", 2), ("main", 2), ("héllo", 2)):
        enc = ModuleBuilder.encode("OpSourceExtension", (text,))
        assert len(enc) == 1 + n
        raw = struct.pack(f"<{n}I", *enc[1:])
        assert raw.rstrip(b"\0").decode() == text and raw.endswith(b"\0")
    b = skeleton()
    b.debug("OpSourceExtension", "GL_pycoop_abcd")
    b.debug("OpModuleProcessed", "pycoop")
    f32 = b.type("OpTypeFloat", 32)
    b.name(f32, "f")
    b.decorate(f32, "UserSemantic", "x")
    spv = finish(b)
    text = tools.disassemble(spv)
    assert 'OpSourceExtension "GL_pycoop_abcd"' in text and 'OpModuleProcessed "pycoop"' in text


def test_64bit_constants():
    b = skeleton("Int64", "Float64")
    u64 = b.type("OpTypeInt", 64, 0)
    i64 = b.type("OpTypeInt", 64, 1)
    f64 = b.type("OpTypeFloat", 64)
    big = b.constant(u64, 0x1_2345_6789)
    minus = b.const_int(i64, 64, True, -2)
    half = b.constant(f64, 0.5)
    text = tools.disassemble(finish(b), friendly_names=False)
    assert f"%{big} = OpConstant %{u64} 4886718345" in text
    assert f"%{minus} = OpConstant %{i64} -2" in text
    assert f"%{half} = OpConstant %{f64} 0.5" in text
    assert ModuleBuilder.encode("OpConstant", (u64, [0x89, 0x1]), 9)[3:] == [0x89, 0x1]


def test_small_and_signed_ints_extend():
    b = skeleton("Int8", "Int16")
    i8 = b.type("OpTypeInt", 8, 1)
    u16 = b.type("OpTypeInt", 16, 0)
    i32 = b.type("OpTypeInt", 32, 1)
    neg = b.constant(i8, -1)
    b.constant(u16, 0xFFFF)
    b.constant(i32, -5)
    spv = finish(b)
    assert 0xFFFFFFFF in words(spv)  # sign-extended i8 -1
    assert f"%{neg} = OpConstant %{i8} -1" in tools.disassemble(spv, friendly_names=False)
    with pytest.raises(SpirvEncodingError, match="does not fit"):
        b.constant(i8, 128)
    with pytest.raises(SpirvEncodingError, match="does not fit"):
        b.constant(u16, -1)


def test_f16_bf16_types():
    b = skeleton("Float16", "BFloat16TypeKHR")
    b.extension("SPV_KHR_bfloat16")
    f16 = b.type("OpTypeFloat", 16)
    bf16 = b.type("OpTypeFloat", 16, "BFloat16KHR")
    assert bf16 != f16
    assert b.type("OpTypeFloat", 16, 0) == bf16  # same encoding by value
    assert ModuleBuilder.encode("OpTypeFloat", (16, "BFloat16KHR"), 3) == [4 << 16 | 22, 3, 16, 0]
    assert ModuleBuilder.encode("OpTypeFloat", (16,), 3) == [3 << 16 | 22, 3, 16]
    one_h = b.constant(f16, 1.0)
    one_bf = b.constant(bf16, 1.0)
    assert one_h != one_bf
    assert b.const_float(f16, 16, 0x3C00) == one_h
    assert b.const_float(bf16, 16, 0x3F80) == one_bf
    assert b.constant(bf16, 1.00390625) == one_bf  # halfway: rounds to even
    spv = finish(b)
    text = tools.disassemble(spv, friendly_names=False)
    assert f"%{bf16} = OpTypeFloat 16 BFloat16KHR" in text
    assert f"%{f16} = OpTypeFloat 16\n" in text


def test_switch_and_ext_inst():
    b = skeleton()
    glsl = b.ext_inst_import("GLSL.std.450")
    assert b.ext_inst_import("GLSL.std.450") == glsl
    void = b.type("OpTypeVoid")
    u32 = b.type("OpTypeInt", 32, 0)
    f32 = b.type("OpTypeFloat", 32)
    main = b.begin_function(void, None, "None", b.type("OpTypeFunction", void))
    b.emit_label()
    b.emit("OpExtInst", f32, glsl, 31, b.constant(f32, 4.0))  # 31 = Sqrt
    case1, case2, default, merge = (b.label() for _ in range(4))
    b.emit("OpSelectionMerge", merge, "None")
    b.emit("OpSwitch", b.constant(u32, 2), default, 1, case1, (2, case2))
    for lab in (case1, case2, default):
        b.emit_label(lab)
        b.emit("OpBranch", merge)
    b.emit_label(merge)
    b.emit("OpReturn")
    b.end_function()
    b.entry_point("GLCompute", main, "main")
    b.execution_mode(main, "LocalSize", 1, 1, 1)
    spv = b.assemble()
    tools.validate(spv, "vulkan1.3")
    text = tools.disassemble(spv, friendly_names=False)
    assert re.search(r"OpSwitch %\d+ %\d+ 1 %\d+ 2 %\d+", text)
    assert re.search(r'OpExtInst %\d+ %\d+ Sqrt', text)


def test_spec_constants_and_execution_mode_id():
    b = skeleton()
    u32 = b.type("OpTypeInt", 32, 0)
    x = b.spec_constant(u32, 64)
    b.decorate(x, "SpecId", 0)
    doubled = b.spec_constant_op(u32, "OpIMul", x, b.constant(u32, 2))
    assert doubled != x
    void = b.type("OpTypeVoid")
    main = b.begin_function(void, None, "None", b.type("OpTypeFunction", void))
    b.emit_label()
    b.emit("OpReturn")
    b.end_function()
    b.entry_point("GLCompute", main, "main")
    one = b.constant(u32, 1)
    b.execution_mode_id(main, "LocalSizeId", x, one, one)
    spv = b.assemble()
    tools.validate(spv, "vulkan1.3")
    text = tools.disassemble(spv, friendly_names=False)
    assert f"OpExecutionModeId %{main} LocalSizeId %{x} %{one} %{one}" in text
    assert re.search(rf"%{doubled} = OpSpecConstantOp %{u32} IMul %{x} %\d+", text)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda b: b.emit("OpNotAnOp"), "unknown SPIR-V instruction"),
        (lambda b: b.emit("OpIAdd", 1, 2), "missing operand"),
        (lambda b: b.emit("OpReturn", 1), "too many"),
        (lambda b: b.emit("OpLoad", 1, 2, "Bogus"), "unknown MemoryAccess enumerant 'Bogus'"),
        (lambda b: b.emit("OpLoad", 1, 2, "Aligned|Bogus", 4), "unknown MemoryAccess enumerant 'Bogus'"),
        (lambda b: b.emit("OpLoad", 1, "x"), "IdRef must be a positive int id"),
        (lambda b: b.emit("OpLoad", 1, 2, 1 << 30), "unknown MemoryAccess bit"),
        (lambda b: b.emit("OpReturn", result=4), "has no result id"),
        (lambda b: b.decorate(1, "NoSuchDecoration"), "unknown Decoration enumerant"),
        (lambda b: b.decorate(1, "Offset"), "needs a LiteralInteger parameter"),
        (lambda b: b.capability("NoSuchCap"), "unknown Capability enumerant"),
        (lambda b: b.name(1, 5), "LiteralString must be a str"),
        (lambda b: b.execution_mode(1, "LocalSize", 1, 1, 1 << 40), "32-bit int"),
        (lambda b: b.constant(b.type("OpTypeFloat", 16), 1e6), "overflows"),
        (lambda b: b.constant(b.type("OpTypeFloat", 8, "Float8E4M3EXT"), 1.0), "bit pattern"),
        (lambda b: b.constant(b.type("OpTypeVoid"), 1), "not a numeric scalar type"),
        (lambda b: b.type("OpTypeForwardPointer", 1, "PhysicalStorageBuffer"), "does not declare a type"),
        (lambda b: [b.type("OpTypeInt", 32, 0), b.type("OpTypeInt", 32, 0, result=99)], "already declared"),
    ],
)
def test_encoding_errors(call, match):
    b = skeleton()
    void = b.type("OpTypeVoid")
    b.begin_function(void, None, "None", b.type("OpTypeFunction", void))
    b.emit_label()
    with pytest.raises(SpirvEncodingError, match=match):
        call(b)


def test_builder_state_errors():
    b = skeleton()
    with pytest.raises(SpirvEncodingError, match="no open function"):
        b.emit("OpReturn")
    void = b.type("OpTypeVoid")
    b.begin_function(void, None, "None", b.type("OpTypeFunction", void))
    with pytest.raises(SpirvEncodingError, match="another function is open"):
        b.begin_function(void, None, "None", b.type("OpTypeFunction", void))
    with pytest.raises(SpirvEncodingError, match="open function"):
        b.assemble()
    with pytest.raises(SpirvEncodingError, match="without memory_model"):
        ModuleBuilder().assemble()


def test_validation_error_carries_message_and_disassembly():
    b = ModuleBuilder()
    b.capability("Shader")
    b.memory_model("Logical", "GLSL450")
    u32 = b.type("OpTypeInt", 32, 0)
    b.constant(u32, 1)
    b.global_inst("OpVariable", b.type("OpTypePointer", "Function", u32), "Function")  # not allowed at module scope
    with pytest.raises(SpirvValidationError) as info:
        tools.validate(b.assemble(), "vulkan1.3")
    assert "Function" in info.value.message
    assert "OpVariable" in info.value.disassembly


def test_assemble_text_roundtrip():
    spv = tools.assemble_text((REFERENCE_DIR / "a_khr_coopmat_muladd.spvasm").read_text(), "vulkan1.3")
    tools.validate(spv, "vulkan1.3")
    assert words(spv)[0] == 0x07230203
    with pytest.raises(SpirvValidationError, match="spirv-as"):
        tools.assemble_text("OpBogus", "spv1.6")
