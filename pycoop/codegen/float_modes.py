"""Floating-point modes of a kernel (`@pycoop.kernel(fp=...)`) and what each asks of the
SPIR-V module and of the device.

- "exact": every float add, subtract, multiply, divide and remainder is decorated
  `NoContraction` (a driver may not fuse `a*b + c` into one rounding), and for each IEEE float
  width the kernel uses the entry point declares `SignedZeroInfNanPreserve` and
  `RoundingModeRTE` (SPV_KHR_float_controls, core in SPIR-V 1.4). Subnormals are left to the
  device, since few devices offer `DenormPreserve` (the H100 for f16 only, lavapipe for none).
- "strict": "exact" plus `DenormPreserve` for each width: runs only where the device
  preserves subnormals of every width the kernel uses.
- "fast": none of these; the driver may contract, drop the sign of zero, assume no NaN or
  infinity, and flush subnormals.

The modes apply to Vulkan modules; OpenCL-environment modules (kernels using pycoop.intel)
keep that environment's defaults, since NoContraction needs the Shader capability.

The emulator computes IEEE results (one rounding per operation, to nearest even, signed zeros
and subnormals kept) in every mode: in "exact" mode the GPU must agree with it bit for bit on
+ - * fma, conversions, min/max and floor/ceil/trunc, subnormals aside, and bf16 results
aside (SPV_KHR_bfloat16 lets a device round them toward zero, and no execution mode chooses:
docs/numerics.md).
"""
from __future__ import annotations

FP_MODES = ("exact", "strict", "fast")
DEFAULT_FP = "exact"

# Instructions a driver could contract with another one (mul + add into an fma).
CONTRACTIBLE = frozenset({"OpFAdd", "OpFSub", "OpFMul", "OpFDiv", "OpFRem", "OpFMod",
                          "OpVectorTimesScalar", "OpMatrixTimesScalar"})

# Execution modes (and the capabilities of the same names) per mode, for each float width used.
EXECUTION_MODES = {
    "exact": ("SignedZeroInfNanPreserve", "RoundingModeRTE"),
    "strict": ("SignedZeroInfNanPreserve", "RoundingModeRTE", "DenormPreserve"),
    "fast": (),
}

# VkPhysicalDeviceFloatControlsProperties member saying whether a device honours a mode.
_PROPERTY = {"SignedZeroInfNanPreserve": "shaderSignedZeroInfNanPreserveFloat{}",
             "RoundingModeRTE": "shaderRoundingModeRTEFloat{}",
             "DenormPreserve": "shaderDenormPreserveFloat{}"}

# Every float-controls property the runtime probes (VkPhysicalDeviceVulkan12Properties).
PROPERTIES = tuple(f"shader{kind}Float{w}" for kind in (
    "SignedZeroInfNanPreserve", "DenormPreserve", "DenormFlushToZero", "RoundingModeRTE",
    "RoundingModeRTZ") for w in (16, 32, 64))


def execution_modes(fp: str, widths) -> list[tuple[str, int]]:
    """(execution mode, float width) pairs the entry point declares."""
    return [(mode, w) for w in sorted(widths) for mode in EXECUTION_MODES[fp]]


def device_property(mode: str, width: int) -> str:
    """The device property that must be true for `mode` on `width`-bit floats."""
    return _PROPERTY[mode].format(width)
