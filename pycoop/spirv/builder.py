"""Sectioned SPIR-V module builder.

Instructions are encoded from the grammar (pycoop.spirv.grammar) as soon as they are added and
kept per logical-layout section (SPIR-V spec 2.4), so callers may add capabilities, decorations,
types and function bodies in any order and still get a valid layout from ``assemble()``.

Operand conventions (all instructions): ints for ids and literal numbers (a list/tuple of ints is
taken as the raw words of a multi-word literal); str for ValueEnum enumerant names and literal
strings; BitEnum masks as "A|B" or int, followed by the set bits' parameters in increasing bit
order; Composite pairs (OpSwitch targets) flat or as tuples.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence
from typing import Union

from pycoop.spirv import grammar
from pycoop.spirv.errors import SpirvEncodingError

OperandValue = Union[int, str, float, Sequence[int], tuple]
MAGIC = 0x07230203

# Debug instructions live in three ordered sub-sections (7a strings/source, 7b names, 7c processed).
_DEBUG_NAMES = frozenset({"OpName", "OpMemberName"})
_DEBUG_PROCESSED = frozenset({"OpModuleProcessed"})


class _Function:
    """Words of one function; Function-storage variables are spliced in after the first OpLabel."""

    __slots__ = ("header", "body", "variables", "first_block_start")

    def __init__(self, header: list[int]) -> None:
        self.header = header
        self.body: list[int] = []
        self.variables: list[int] = []
        self.first_block_start: int | None = None  # index in body just after the first OpLabel


class ModuleBuilder:
    """Builds one SPIR-V module; ``assemble()`` returns the binary."""

    def __init__(self, version: tuple[int, int] = (1, 6)) -> None:
        self.version = version
        self._bound = 1
        self._capabilities: set[str] = set()
        self._extensions: set[str] = set()
        self._ext_imports: dict[str, int] = {}
        self._ext_import_words: list[int] = []
        self._memory_model: list[int] = []
        self._entry_points: list[int] = []
        self._execution_modes: list[int] = []
        self._debug_source: list[int] = []
        self._debug_names: list[int] = []
        self._debug_processed: list[int] = []
        self._strings: dict[str, int] = {}
        self._annotations: list[int] = []
        self._globals: list[int] = []
        self._types: dict[tuple[int, ...], int] = {}
        self._constants: dict[tuple[int, ...], int] = {}
        self._scalars: dict[int, tuple[str, int, int | None]] = {}  # id -> (opname, width, sign/encoding)
        self._functions: list[_Function] = []
        self._current: _Function | None = None
        # Debug line info (OpLine): the source position of what is emitted now, and the one the
        # open block last declared. An OpLine's scope ends with its block, so each block that
        # needs a position declares it again (after its OpLabel: an OpLine cannot precede it).
        self.loc: tuple[int, int, int] | None = None      # (OpString file id, line, column)
        self._block_loc: tuple[int, int, int] | None = None
        self._after_merge = False

    # ---------------------------------------------------------------- ids
    def new_id(self) -> int:
        rid = self._bound
        self._bound += 1
        return rid

    @property
    def bound(self) -> int:
        return self._bound

    # ---------------------------------------------------------------- module-level sections
    def capability(self, name: str) -> None:
        grammar.capability(name)  # validates the name
        self._capabilities.add(name)

    def extension(self, name: str) -> None:
        self._extensions.add(name)

    def ext_inst_import(self, name: str) -> int:
        rid = self._ext_imports.get(name)
        if rid is None:
            rid = self._ext_imports[name] = self.new_id()
            self._ext_import_words += self.encode("OpExtInstImport", (name,), rid)
        return rid

    def memory_model(self, addressing: str, model: str) -> None:
        self._memory_model = self.encode("OpMemoryModel", (addressing, model))

    def entry_point(self, execution_model: str, fn_id: int, name: str, interface_ids: Sequence[int] = ()) -> None:
        self._entry_points += self.encode("OpEntryPoint", (execution_model, fn_id, name, *interface_ids))

    def execution_mode(self, fn_id: int, mode: str, *literals: OperandValue) -> None:
        self._execution_modes += self.encode("OpExecutionMode", (fn_id, mode, *literals))

    def execution_mode_id(self, fn_id: int, mode: str, *ids: int) -> None:
        self._execution_modes += self.encode("OpExecutionModeId", (fn_id, mode, *ids))

    def string(self, text: str) -> int:
        """OpString (deduplicated), e.g. a file name for ``line()``."""
        rid = self._strings.get(text)
        if rid is None:
            rid = self._strings[text] = self.new_id()
            self._debug_source += self.encode("OpString", (text,), rid)
        return rid

    def debug(self, opname: str, *operands: OperandValue) -> int | None:
        """Any other debug-section instruction (OpSource, OpModuleProcessed, ...)."""
        info = grammar.instruction(opname)
        rid = self.new_id() if info.has_result else None
        words = self.encode(opname, operands, rid)
        if info.opname in _DEBUG_NAMES:
            self._debug_names += words
        elif info.opname in _DEBUG_PROCESSED:
            self._debug_processed += words
        else:
            self._debug_source += words
        return rid

    def name(self, target: int, text: str) -> None:
        self._debug_names += self.encode("OpName", (target, text))

    def member_name(self, struct_id: int, member: int, text: str) -> None:
        self._debug_names += self.encode("OpMemberName", (struct_id, member, text))

    def decorate(self, target: int, decoration: str, *args: OperandValue) -> None:
        self._annotations += self.encode("OpDecorate", (target, decoration, *args))

    def decorate_id(self, target: int, decoration: str, *ids: int) -> None:
        self._annotations += self.encode("OpDecorateId", (target, decoration, *ids))

    def member_decorate(self, struct_id: int, member: int, decoration: str, *args: OperandValue) -> None:
        self._annotations += self.encode("OpMemberDecorate", (struct_id, member, decoration, *args))

    # ---------------------------------------------------------------- types, constants, globals
    def type(self, opname: str, *operands: OperandValue, unique: bool = False, result: int | None = None) -> int:
        """Declare a type; identical (opname, encoded operands) return the same id unless ``unique``
        (e.g. structs that get distinct decorations). ``result`` supplies a pre-allocated id, e.g.
        the one from ``forward_pointer()``."""
        info = grammar.instruction(opname)
        if not info.has_result or info.has_result_type:
            raise SpirvEncodingError(f"{opname} does not declare a type (use global_inst)")
        words = self.encode(opname, operands, 0)
        key = tuple(words[0:1] + words[2:])
        if not unique:
            known = self._types.get(key)
            if known is not None:
                if result is not None and result != known:
                    raise SpirvEncodingError(f"{opname} {operands} already declared as %{known}, not %{result}")
                return known
        rid = result if result is not None else self.new_id()
        words[1] = rid
        if not unique:
            self._types[key] = rid
        if info.opname in ("OpTypeInt", "OpTypeFloat", "OpTypeBool"):
            self._scalars[rid] = (info.opname, words[2] if len(words) > 2 else 0, words[3] if len(words) > 3 else None)
        self._globals += words
        return rid

    def forward_pointer(self, storage_class: str) -> int:
        """OpTypeForwardPointer; declare the pointer later with ``type("OpTypePointer", ..., result=id)``."""
        rid = self.new_id()
        self._globals += self.encode("OpTypeForwardPointer", (rid, storage_class))
        return rid

    def global_inst(self, opname: str, *operands: OperandValue, result: int | None = None) -> int | None:
        """Any instruction of the types/constants/globals section, not deduplicated (OpVariable, OpUndef...)."""
        return self._append(self._globals, opname, operands, result)

    def _constant(self, opname: str, operands: tuple, dedup: bool = True) -> int:
        return self._add_constant(self.encode(opname, operands, 0), dedup)

    def _add_constant(self, words: list[int], dedup: bool) -> int:
        """Append a constant encoded with result id 0, deduplicated on (opcode, type, value words)."""
        key = tuple(words[0:2] + words[3:])
        if dedup and key in self._constants:
            return self._constants[key]
        rid = words[2] = self.new_id()
        if dedup:
            self._constants[key] = rid
        self._globals += words
        return rid

    def constant(self, type_id: int, value: bool | int | float | Sequence[int]) -> int:
        """OpConstant (deduplicated per type and bits). ``value`` is raw words (list/tuple) or a Python
        bool/int/float encoded according to the scalar type ``type_id`` (declared via ``type()``)."""
        if isinstance(value, bool):
            return self.const_bool(type_id, value)
        return self._constant("OpConstant", (type_id, self._literal_words(type_id, value)))

    def const_int(self, type_id: int, width: int, signed: bool, value: int) -> int:
        return self._constant("OpConstant", (type_id, _int_words(width, signed, value)))

    def const_float(self, type_id: int, width: int, value_bits: int) -> int:
        """Float constant from its bit pattern (any encoding: f16, bf16, fp8, f32, f64)."""
        return self._constant("OpConstant", (type_id, _int_words(width, False, value_bits)))

    def const_bool(self, type_id: int, value: bool) -> int:
        return self._constant("OpConstantTrue" if value else "OpConstantFalse", (type_id,))

    def constant_composite(self, type_id: int, constituents: Sequence[int]) -> int:
        return self._constant("OpConstantComposite", (type_id, *constituents))

    def constant_null(self, type_id: int) -> int:
        return self._constant("OpConstantNull", (type_id,))

    def spec_constant(self, type_id: int, value: bool | int | float | Sequence[int]) -> int:
        """OpSpecConstant / OpSpecConstantTrue|False (never deduplicated: each gets its own SpecId)."""
        if isinstance(value, bool):
            return self._constant("OpSpecConstantTrue" if value else "OpSpecConstantFalse", (type_id,), False)
        return self._constant("OpSpecConstant", (type_id, self._literal_words(type_id, value)), False)

    def spec_constant_composite(self, type_id: int, constituents: Sequence[int]) -> int:
        return self._constant("OpSpecConstantComposite", (type_id, *constituents), False)

    def spec_constant_op(self, type_id: int, opname: str, *operands: OperandValue) -> int:
        """OpSpecConstantOp; ``operands`` are those of ``opname`` after its result type, encoded
        by ``opname``'s grammar (the core grammar leaves them unspecified)."""
        if not grammar.instruction(opname).has_result_type:
            raise SpirvEncodingError(f"OpSpecConstantOp cannot wrap {opname}")
        words = self.encode("OpSpecConstantOp", (type_id, opname), 0)
        words += self.encode(opname, (type_id, *operands), 0)[3:]
        words[0] = len(words) << 16 | (words[0] & 0xFFFF)
        return self._add_constant(words, False)

    def _literal_words(self, type_id: int, value: int | float | Sequence[int]) -> list[int]:
        if isinstance(value, (list, tuple)):
            return list(value)
        scalar = self._scalars.get(type_id)
        if scalar is None or scalar[0] == "OpTypeBool":
            raise SpirvEncodingError(f"%{type_id} is not a numeric scalar type declared with type(); pass raw words")
        opname, width, extra = scalar
        if opname == "OpTypeInt":
            if not isinstance(value, int):
                raise SpirvEncodingError(f"integer type %{type_id} needs an int constant, got {value!r}")
            return _int_words(width, bool(extra), value)
        return _int_words(width, False, _float_bits(float(value), width, extra))

    # ---------------------------------------------------------------- functions
    def begin_function(self, result_type: int, fn_id: int | None, control: str | int, fn_type: int) -> int:
        if self._current is not None:
            raise SpirvEncodingError("begin_function() while another function is open")
        fn_id = fn_id if fn_id is not None else self.new_id()
        self._current = _Function(self.encode("OpFunction", (result_type, control, fn_type), fn_id))
        self._functions.append(self._current)
        return fn_id

    def function_parameter(self, type_id: int) -> int:
        fn = self._open_function()
        if fn.body:
            raise SpirvEncodingError("function_parameter() after the function body started")
        rid = self.new_id()
        fn.header += self.encode("OpFunctionParameter", (type_id,), rid)
        return rid

    def label(self) -> int:
        """Allocate a block label id (emit it later with ``emit_label``)."""
        return self.new_id()

    def emit_label(self, label_id: int | None = None) -> int:
        return self.emit("OpLabel", result=label_id)  # type: ignore[return-value]

    def emit(self, opname: str, *operands: OperandValue, result: int | None = None) -> int | None:
        """Append an instruction to the open function. For instructions with a result, pass the
        result type (if any) as first operand; the result id is allocated (or ``result``) and returned.
        An OpLine (or OpNoLine) for ``loc`` goes first when the block's position differs."""
        fn = self._open_function()
        if opname == "OpLabel":
            self._block_loc = None
            self._after_merge = False
        else:
            self._sync_line(fn)
            self._after_merge = opname in ("OpSelectionMerge", "OpLoopMerge")
        rid = self._append(fn.body, opname, operands, result)
        if fn.first_block_start is None and opname == "OpLabel":
            fn.first_block_start = len(fn.body)
        return rid

    def _sync_line(self, fn: _Function) -> None:
        # a merge instruction must immediately precede its branch: no OpLine in between
        if self.loc == self._block_loc or self._after_merge:
            return
        if self.loc is None:
            fn.body += self.encode("OpNoLine", ())
        else:
            fn.body += self.encode("OpLine", self.loc)
        self._block_loc = self.loc

    def position(self) -> int:
        """Word index in the open function where the next instruction goes (see patch_word)."""
        fn = self._open_function()
        self._sync_line(fn)
        return len(fn.body)

    def patch_word(self, index: int, value: int) -> None:
        """Overwrite one word of the open function, e.g. an OpPhi operand known only later."""
        self._open_function().body[index] = value

    @property
    def extensions(self) -> list[str]:
        return sorted(self._extensions)

    def function_variable(self, ptr_type: int, initializer: int | None = None) -> int:
        """OpVariable in Function storage, placed at the start of the function's first block."""
        fn = self._open_function()
        rid = self.new_id()
        extra = (initializer,) if initializer is not None else ()
        fn.variables += self.encode("OpVariable", (ptr_type, "Function", *extra), rid)
        return rid

    def set_line(self, file: str | None, line: int = 0, column: int = 0) -> tuple | None:
        """Source position of the instructions emitted from now on (None: none); returns the
        previous one, to restore with ``restore_line``. Files become OpString + OpSource."""
        prev = self.loc
        if file is None:
            self.loc = None
        else:
            fid = self._strings.get(file)
            if fid is None:
                fid = self.string(file)
                self._debug_source += self.encode("OpSource", ("Unknown", 0, fid))
            self.loc = (fid, line, column)
        return prev

    def restore_line(self, loc: tuple | None) -> None:
        self.loc = loc

    def line(self, file_id: int, line: int, column: int) -> None:
        """Position (an OpString id, line, column) of the instructions emitted from now on."""
        self.loc = (file_id, line, column)

    def end_function(self) -> None:
        fn = self._open_function()
        if fn.variables and fn.first_block_start is None:
            raise SpirvEncodingError("function_variable() used in a function without blocks")
        fn.body += self.encode("OpFunctionEnd", ())
        self._current = None
        self._block_loc = None

    def _open_function(self) -> _Function:
        if self._current is None:
            raise SpirvEncodingError("no open function (call begin_function first)")
        return self._current

    # ---------------------------------------------------------------- assembly
    def assemble(self) -> bytes:
        if self._current is not None:
            raise SpirvEncodingError("assemble() with an open function (call end_function)")
        if not self._memory_model:
            raise SpirvEncodingError("assemble() without memory_model()")
        major, minor = self.version
        words = array("I", [MAGIC, major << 16 | minor << 8, 0, self._bound, 0])
        for cap in sorted(self._capabilities, key=grammar.capability):
            words.extend(self.encode("OpCapability", (cap,)))
        for ext in sorted(self._extensions):
            words.extend(self.encode("OpExtension", (ext,)))
        for section in (self._ext_import_words, self._memory_model, self._entry_points, self._execution_modes,
                        self._debug_source, self._debug_names, self._debug_processed, self._annotations,
                        self._globals):
            words.extend(section)
        for fn in self._functions:
            words.extend(fn.header)
            split = fn.first_block_start or 0
            words.extend(fn.body[:split])
            words.extend(fn.variables)
            words.extend(fn.body[split:])
        if sys.byteorder != "little":
            words.byteswap()
        return words.tobytes()

    # ---------------------------------------------------------------- encoding
    def _append(self, section: list[int], opname: str, operands: Sequence[OperandValue],
                result: int | None) -> int | None:
        if grammar.instruction(opname).has_result:
            result = result if result is not None else self.new_id()
        elif result is not None:
            raise SpirvEncodingError(f"{opname} has no result id")
        section += self.encode(opname, operands, result)
        return result

    @staticmethod
    def encode(opname: str, operands: Sequence[OperandValue], result: int | None = None) -> list[int]:
        """Encode one instruction; ``result`` fills its IdResult slot (operands exclude it)."""
        info = grammar.instruction(opname)
        words = [0]
        pos = 0
        try:
            for slot in info.operands:
                if slot.kind == "IdResult":
                    if result is None:
                        raise SpirvEncodingError("result id missing")
                    words.append(result)
                elif slot.quantifier == "":
                    if pos >= len(operands):
                        raise SpirvEncodingError(f"missing operand {slot.name or slot.kind!r}")
                    pos = _encode_operand(slot.kind, operands, pos, words)
                elif slot.quantifier == "?":
                    if pos < len(operands):
                        pos = _encode_operand(slot.kind, operands, pos, words)
                else:
                    while pos < len(operands):
                        pos = _encode_operand(slot.kind, operands, pos, words)
            if pos != len(operands):
                raise SpirvEncodingError(f"{len(operands) - pos} operand(s) too many: {list(operands[pos:])!r}")
        except SpirvEncodingError as exc:
            raise SpirvEncodingError(f"{info.opname}{tuple(operands)!r}: {exc}") from None
        if len(words) > 0xFFFF:
            raise SpirvEncodingError(f"{info.opname}: {len(words)} words exceed the 65535-word limit")
        words[0] = len(words) << 16 | info.opcode
        return words


def _encode_operand(kind: str, operands: Sequence[OperandValue], pos: int, words: list[int]) -> int:
    """Encode the operand of ``kind`` at ``operands[pos]`` (plus any enumerant parameters that
    follow it) into ``words``; return the position after what was consumed."""
    value = operands[pos]
    category = grammar.kind_category(kind)
    if category == "Id":
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise SpirvEncodingError(f"{kind} must be a positive int id, got {value!r}")
        words.append(value)
        return pos + 1
    if category == "Literal":
        words += _literal(kind, value)
        return pos + 1
    if category == "Composite":
        bases = grammar.composite_bases(kind)
        if isinstance(value, tuple) and len(value) == len(bases):
            for base, item in zip(bases, value):
                _encode_operand(base, (item,), 0, words)
            return pos + 1
        for base in bases:
            if pos >= len(operands):
                raise SpirvEncodingError(f"incomplete {kind}")
            pos = _encode_operand(base, operands, pos, words)
        return pos
    if category == "BitEnum":
        if isinstance(value, str):
            mask = grammar.enum_value(kind, value)
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            mask = value
        else:
            raise SpirvEncodingError(f"{kind} must be a name ('A|B') or mask, got {value!r}")
        words.append(mask)
        params = [p for e in grammar.bit_enumerants(kind, mask) for p in e.parameters]
    else:  # ValueEnum
        if isinstance(value, str):
            enum = grammar.enumerant(kind, value)
        elif isinstance(value, int) and not isinstance(value, bool):
            enum = grammar.enumerant_by_value(kind, value)
        else:
            raise SpirvEncodingError(f"{kind} must be an enumerant name, got {value!r}")
        words.append(enum.value if enum is not None else value)  # type: ignore[arg-type]
        params = list(enum.parameters) if enum is not None else []
    pos += 1
    for param in params:
        if param.quantifier == "*":
            while pos < len(operands):
                pos = _encode_operand(param.kind, operands, pos, words)
        elif pos < len(operands):
            pos = _encode_operand(param.kind, operands, pos, words)
        elif param.quantifier == "":
            raise SpirvEncodingError(f"{kind} {value!r} needs a {param.kind} parameter")
    return pos


def _literal(kind: str, value: OperandValue) -> list[int]:
    if kind == "LiteralString":
        if not isinstance(value, str):
            raise SpirvEncodingError(f"LiteralString must be a str, got {value!r}")
        return _string_words(value)
    if kind == "LiteralSpecConstantOpInteger" and isinstance(value, str):
        return [grammar.opcode(value)]
    if kind == "LiteralFloat" and isinstance(value, float):
        return [struct.unpack("<I", struct.pack("<f", value))[0]]
    if isinstance(value, (list, tuple)) and value and all(isinstance(w, int) and 0 <= w <= 0xFFFFFFFF for w in value):
        return list(value)  # raw words of a multi-word literal
    if not isinstance(value, int) or isinstance(value, bool) or not -(1 << 31) <= value <= 0xFFFFFFFF:
        raise SpirvEncodingError(f"{kind} must be a 32-bit int (or a list of words), got {value!r}")
    return [value & 0xFFFFFFFF]


def _string_words(text: str) -> list[int]:
    data = text.encode("utf-8") + b"\0"
    data += b"\0" * (-len(data) % 4)
    return list(struct.unpack(f"<{len(data) // 4}I", data))


def _int_words(width: int, signed: bool, value: int) -> list[int]:
    """Literal words of an integer of ``width`` bits: low word first; values narrower than 32 bits
    are sign-extended (signed) or zero-extended (unsigned) as the spec requires."""
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
    if not isinstance(value, int) or not lo <= value <= hi:
        raise SpirvEncodingError(f"{value!r} does not fit a {'signed' if signed else 'unsigned'} {width}-bit int")
    bits = value & ((1 << max(width, 32)) - 1)
    return [(bits >> s) & 0xFFFFFFFF for s in range(0, max(width, 32), 32)]


def _float_bits(value: float, width: int, encoding: int | None) -> int:
    bfloat16 = grammar.enum_value("FPEncoding", "BFloat16KHR")
    if encoding is None and width in (16, 32, 64):
        fmt = {16: "<e", 32: "<f", 64: "<d"}[width]
        try:
            return int.from_bytes(struct.pack(fmt, value), "little")
        except OverflowError as exc:
            raise SpirvEncodingError(f"{value!r} overflows a {width}-bit float") from exc
    if encoding == bfloat16 and width == 16:
        f32 = int.from_bytes(struct.pack("<f", value), "little")
        if value != value:  # NaN: keep it quiet, avoid rounding into infinity
            return (f32 >> 16) | 0x40
        return (f32 + 0x7FFF + ((f32 >> 16) & 1)) >> 16  # round to nearest even
    raise SpirvEncodingError(f"no Python float encoding for a {width}-bit float with encoding {encoding}; "
                             "use const_float() with the bit pattern")
