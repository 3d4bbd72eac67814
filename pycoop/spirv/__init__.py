"""SPIR-V encoding layer: grammar tables, a sectioned module builder and SPIRV-Tools wrappers.

Knows nothing about pycoop's IR; it only speaks SPIR-V.
"""

from pycoop.spirv.builder import ModuleBuilder
from pycoop.spirv.errors import SpirvEncodingError, SpirvError, SpirvToolNotFound, SpirvValidationError

__all__ = ["ModuleBuilder", "SpirvEncodingError", "SpirvError", "SpirvToolNotFound", "SpirvValidationError"]
