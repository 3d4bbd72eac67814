"""pycoop's own validation of SPV_NV_cooperative_matrix_decode_vector in a SPIR-V binary: the
rules spirv-val applies from SPIRV-Tools v2026.3 on, for validators that predate the
extension (the extension's record, codegen.extensions, runs it on every module using it).
Numbers come from the grammar (spirv.grammar, through spirv.reader)."""
from __future__ import annotations

from ...spirv import grammar, reader
from ...spirv.tools import validator_version

EXTENSION = "SPV_NV_cooperative_matrix_decode_vector"
VECTOR_SIZES = (2, 4, 8)
_TYPES = ("OpTypeInt", "OpTypeFloat", "OpTypeVector", "OpTypeArray", "OpTypePointer",
          "OpTypeFunction", "OpTypeCooperativeMatrixKHR", "OpTypeTensorLayoutNV")


def validator_supports() -> bool:
    """Whether the installed spirv-val knows the extension (SPIRV-Tools v2026.3 or later)."""
    version = validator_version()
    return version is not None and version >= (2026, 3)


def check_module(spv: bytes) -> list[str]:
    """The problems of the DecodeVectorFunc uses in `spv` (empty: fine)."""
    operands = lambda name: grammar.enum_value("TensorAddressingOperands", name)   # noqa: E731
    tensor_view, decode, decode_vector = (operands(n) for n in ("TensorView", "DecodeFunc",
                                                                 "DecodeVectorFunc"))
    psb = grammar.enum_value("StorageClass", "PhysicalStorageBuffer")
    caps, exts, types, funcs, uses, problems = set(), set(), {}, {}, [], []
    for name, ops in reader.instructions(spv):
        if name == "OpCapability":
            caps.add(ops[0])
        elif name == "OpExtension":
            exts.add(reader.string(ops))
        elif name in _TYPES:
            types[ops[0]] = (name, tuple(ops[1:]))
        elif name == "OpFunction":
            funcs[ops[1]] = (ops[0], ops[3])           # result type, function type
        elif name in ("OpCooperativeMatrixLoadTensorNV", "OpCooperativeMatrixStoreTensorNV"):
            uses.append((name, tuple(ops)))
    for name, ops in uses:
        load = name == "OpCooperativeMatrixLoadTensorNV"
        # load: result type, result, pointer, object, layout, memory operands; store: pointer,
        # object, layout, memory operands; then the tensor addressing operands and their ids
        rtype, mask_at = (ops[0], 5) if load else (None, 3)
        k = mask_at + 1 + reader.operand_words("MemoryAccess", ops[mask_at])
        ta, ids = ops[k], list(ops[k + 1:])
        if not ta & decode_vector:
            continue
        if not load:
            problems.append("DecodeVectorFunc on OpCooperativeMatrixStoreTensorNV")
            continue
        if not ta & decode:
            problems.append("DecodeVectorFunc requires DecodeFunc to also be specified")
            continue
        first = 1 if ta & tensor_view else 0          # DecodeFunc's id, then DecodeVectorFunc's
        fid = ids[first + 1]
        if fid not in funcs:
            problems.append(f"DecodeVectorFunc <id> {fid} is not a function")
            continue
        comp = types.get(rtype, ("", (0,)))[1][0]
        ret, fnt = funcs[fid]
        rt = types.get(ret)
        if rt is None or rt[0] != "OpTypeVector" or rt[1][0] != comp:
            problems.append("DecodeVectorFunc return type must be a vector of the matrix component type")
            continue
        if rt[1][1] not in VECTOR_SIZES:
            problems.append("DecodeVectorFunc return vector length must be 2, 4, or 8")
        if rt[1][1] == 8 and grammar.capability("LongVectorEXT") not in caps:
            problems.append("an 8-component vector needs the LongVectorEXT capability")
        params = types[fnt][1][1:]
        p0 = types.get(params[0]) if params else None
        if p0 is None or p0[0] != "OpTypePointer" or p0[1][0] != psb:
            problems.append("DecodeVectorFunc first parameter must be pointer to PhysicalStorageBuffer")
        # the coordinate arrays must be those of DecodeFunc (u32[Dim], checked by spirv-val there)
        scalar = ids[first]
        sparams = types[funcs[scalar][1]][1][1:] if scalar in funcs else ()
        for p in params[1:3]:
            t = types.get(p)
            elem = types.get(t[1][0]) if t is not None and t[0] == "OpTypeArray" else None
            if not (elem is not None and elem[0] == "OpTypeInt" and elem[1][0] == 32
                    and (len(sparams) < 3 or p == sparams[1])):
                problems.append("DecodeVectorFunc parameters 2 and 3 must be arrays of 32-bit integers "
                                "with dimension equal to the tensor dimension")
        if len(params) != 3:
            problems.append("DecodeVectorFunc must take 3 parameters")
        if grammar.capability("CooperativeMatrixDecodeVectorNV") not in caps:
            problems.append("DecodeVectorFunc needs the CooperativeMatrixDecodeVectorNV capability")
        if EXTENSION not in exts:
            problems.append(f'DecodeVectorFunc needs OpExtension "{EXTENSION}"')
    return problems
