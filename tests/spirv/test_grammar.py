"""Grammar table tests: checked-in grammar.json matches the installed headers, overlay, lookups."""

from __future__ import annotations

import json

import pytest

from pycoop.spirv import SpirvEncodingError, grammar


def test_grammar_json_is_current(tmp_path):
    regenerated = grammar.regenerate(tmp_path / "grammar.json")
    assert regenerated.read_text() == grammar.GRAMMAR_JSON.read_text()


def test_grammar_json_matches_upstream_numbers():
    upstream = json.loads(grammar.upstream_grammar_path().read_text())
    for ins in upstream["instructions"]:
        assert grammar.opcode(ins["opname"]) == ins["opcode"]
    for kind in upstream["operand_kinds"]:
        for e in kind.get("enumerants", []):
            value = int(e["value"], 16) if isinstance(e["value"], str) else e["value"]
            assert grammar.enumerant(kind["kind"], e["enumerant"]).value == value


def test_opcodes_and_aliases():
    assert grammar.opcode("OpCooperativeMatrixMulAddKHR") == 4459
    assert grammar.opcode("OpDecorateStringGOOGLE") == grammar.opcode("OpDecorateString")
    with pytest.raises(SpirvEncodingError, match="unknown SPIR-V instruction"):
        grammar.opcode("OpFoo")


def test_instruction_operands():
    info = grammar.instruction("OpCooperativeMatrixLoadKHR")
    assert info.has_result_type and info.has_result
    assert [(o.kind, o.quantifier) for o in info.operands] == [
        ("IdResultType", ""), ("IdResult", ""), ("IdRef", ""), ("IdRef", ""), ("IdRef", "?"), ("MemoryAccess", "?")]
    assert info.operands[4].name == "Stride"
    assert info.capabilities == ("CooperativeMatrixKHR",)
    label = grammar.instruction("OpLabel")
    assert label.has_result and not label.has_result_type
    assert not grammar.instruction("OpStore").has_result
    assert grammar.instruction("OpExtInst").operands[-1].quantifier == "*"


def test_enum_values():
    assert grammar.enum_value("StorageClass", "PhysicalStorageBuffer") == 5349
    assert grammar.enum_value("Scope", "QueueFamilyKHR") == grammar.enum_value("Scope", "QueueFamily") == 5
    assert grammar.enum_value("MemoryAccess", "Aligned|MakePointerAvailable") == 0xA
    assert grammar.enum_value("MemoryAccess", "None") == 0
    assert grammar.enum_value("FPEncoding", "BFloat16KHR") == 0
    assert [e.name for e in grammar.bit_enumerants("MemoryAccess", 0x2A)] == [
        "Aligned", "MakePointerAvailable", "NonPrivatePointer"]
    assert grammar.kind_category("PairLiteralIntegerIdRef") == "Composite"
    assert grammar.composite_bases("PairIdRefIdRef") == ("IdRef", "IdRef")
    with pytest.raises(SpirvEncodingError, match="unknown Scope enumerant"):
        grammar.enum_value("Scope", "Galaxy")
    with pytest.raises(SpirvEncodingError, match="not a SPIR-V enum"):
        grammar.enum_value("IdRef", "x")


def test_capabilities():
    assert grammar.capability("CooperativeMatrixKHR") == 6022
    assert grammar.extensions_of_capability("CooperativeMatrixKHR") == ["SPV_KHR_cooperative_matrix"]
    assert grammar.extensions_of_capability("Shader") == []
    assert set(grammar.extensions_of_capability("PhysicalStorageBufferAddresses")) == {
        "SPV_EXT_physical_storage_buffer", "SPV_KHR_physical_storage_buffer"}
    assert grammar.implied_capabilities("BFloat16CooperativeMatrixKHR") == ["BFloat16TypeKHR", "CooperativeMatrixKHR"]


def test_overlay():
    assert grammar.capability("CooperativeMatrixDecodeVectorNV") == 5447
    assert grammar.extensions_of_capability("CooperativeMatrixDecodeVectorNV") == [
        "SPV_NV_cooperative_matrix_decode_vector"]
    assert grammar.implied_capabilities("CooperativeMatrixDecodeVectorNV") == ["CooperativeMatrixBlockLoadsNV"]
    assert grammar.capability("LongVectorEXT") == 5425
    assert grammar.extensions_of_capability("LongVectorEXT") == ["SPV_EXT_long_vector"]
    e = grammar.enumerant("TensorAddressingOperands", "DecodeVectorFunc")
    assert e.value == 0x4 and [p.kind for p in e.parameters] == ["IdRef"]
    assert e.capabilities == ("CooperativeMatrixDecodeVectorNV",)
    assert grammar.enum_value("TensorAddressingOperands", "DecodeFunc|DecodeVectorFunc") == 0x6


def test_regenerate_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(grammar, "GRAMMAR_JSON", tmp_path / "g.json")
    grammar.main(["--regenerate"])
    assert "wrote" in capsys.readouterr().out
    assert (tmp_path / "g.json").stat().st_size > 100_000
