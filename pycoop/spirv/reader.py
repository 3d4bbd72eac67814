"""Reading SPIR-V binaries: the instruction stream and literal strings. Opcode and enumerant
numbers come from spirv.grammar (callers look them up by name); nothing is typed by hand."""
from __future__ import annotations

import struct
from typing import Iterator

from pycoop.spirv import grammar


def instructions(spv: bytes) -> Iterator[tuple[str, tuple[int, ...]]]:
    """(opname, operand words) of every instruction after the header; raises ValueError for a
    malformed stream."""
    if len(spv) % 4:
        raise ValueError("malformed SPIR-V: the length is not a multiple of 4 bytes")
    words = struct.unpack(f"<{len(spv) // 4}I", spv)
    i = 5
    while i < len(words):
        n, opc = words[i] >> 16, words[i] & 0xFFFF
        if n == 0 or i + n > len(words):
            raise ValueError(f"malformed SPIR-V: bad word count at word {i}")
        yield grammar.opname(opc), words[i + 1:i + n]
        i += n


def string(words: tuple[int, ...]) -> str:
    """The literal string at the start of `words` (nul-terminated, little-endian words)."""
    return b"".join(struct.pack("<I", w) for w in words).split(b"\0")[0].decode()


def operand_words(kind: str, mask: int) -> int:
    """How many words the parameters of the bits of a BitEnum operand `mask` take (each
    parameter is one id or one literal integer word)."""
    return sum(len(e.parameters) for e in grammar.bit_enumerants(kind, mask))
