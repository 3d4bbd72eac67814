"""Exceptions raised by the SPIR-V layer."""


class SpirvError(Exception):
    """Base class for pycoop.spirv errors."""


class SpirvEncodingError(SpirvError):
    """An instruction or operand cannot be encoded (unknown name, wrong operand count or type)."""


class SpirvToolNotFound(SpirvError):
    """A SPIRV-Tools binary (spirv-val, spirv-dis, spirv-as) could not be located."""


class SpirvValidationError(SpirvError):
    """spirv-val rejected a module; carries the validator message and the module's disassembly."""

    def __init__(self, message: str, disassembly: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.disassembly = disassembly

    def __str__(self) -> str:
        if not self.disassembly:
            return self.message
        return f"{self.message}\n--- disassembly ---\n{self.disassembly}"
