"""Vectors of 8 and 16 components (`pc.vec(elem, 8)`): the SPV_EXT_long_vector record.

Lowering declares the LongVectorEXT capability for them (codegen.lower). Vulkan exposes it
through VK_EXT_shader_long_vector (feature `longVector`), so a launch on a device without it
raises BackendUnavailable naming both, and `backend="auto"` runs such a kernel on the
emulator. spirv-val learned the capability after SPIRV-Tools v2025.5: where the installed one
does not know it, pycoop checks the module's use itself (`check`) instead."""
from __future__ import annotations

import functools

from ..codegen import extensions
from ..spirv import grammar, reader
from ..spirv.errors import SpirvError
from ..spirv.tools import assemble_text, validate

EXTENSION = "SPV_EXT_long_vector"
CAPABILITY = "LongVectorEXT"
_PROBE = f"""OpCapability Shader
OpCapability {CAPABILITY}
OpExtension "{EXTENSION}"
OpMemoryModel Logical GLSL450
OpEntryPoint GLCompute %main "main"
OpExecutionMode %main LocalSize 1 1 1
%void = OpTypeVoid
%fn = OpTypeFunction %void
%float = OpTypeFloat 32
%v8 = OpTypeVector %float 8
%main = OpFunction %void None %fn
%entry = OpLabel
OpReturn
OpFunctionEnd
"""


@functools.cache
def validator_knows() -> bool:
    """Whether the installed SPIRV-Tools assemble and validate a module using the extension."""
    try:
        validate(assemble_text(_PROBE), "vulkan1.3")
    except SpirvError:
        return False
    return True


def check(spv: bytes) -> list[str]:
    """The problems of `spv`'s long vectors (empty: fine): each vector of more than 4
    components needs the capability and the extension declared."""
    caps, exts, long = set(), set(), False
    for name, ops in reader.instructions(spv):
        if name == "OpCapability":
            caps.add(ops[0])
        elif name == "OpExtension":
            exts.add(reader.string(ops))
        elif name == "OpTypeVector" and ops[2] > 4:
            long = True
    problems = []
    if long and grammar.capability(CAPABILITY) not in caps:
        problems.append(f"a vector of more than 4 components needs the {CAPABILITY} capability")
    if long and EXTENSION not in exts:
        problems.append(f"a vector of more than 4 components needs OpExtension {EXTENSION!r}")
    return problems


extensions.register(extensions.Extension(
    EXTENSION, vulkan="VK_EXT_shader_long_vector", features={CAPABILITY: "longVector"},
    check=check, validator_knows=validator_knows))
