"""The SPIR-V targets, as objects: each owns its client environment's module driver, its
validator environment and what it supports. A module's target follows from its ops (their
registry records name the one environment they exist in: ir.registry.environment_of).

Adding a backend that consumes SPIR-V for another environment means one `Target` here (and a
LowerCtx subclass where its instructions differ), not edits to the pipeline.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..ir.core import Module
from ..ir.registry import environment_of
from . import opencl, vulkan
from .lower import Lowered


@dataclass(frozen=True)
class Target:
    name: str                          # "vulkan" | "opencl": the client environment
    validator_env: str                 # spirv-val --target-env
    # (module, omit, *, debug_info, abi, checked) -> Lowered
    lower: Callable[..., Lowered]
    checked: bool                      # emits bounds-checked variants (codegen.checked)


VULKAN = Target("vulkan", vulkan.VALIDATOR_ENV, vulkan.lower, checked=True)
OPENCL = Target("opencl", opencl.VALIDATOR_ENV, opencl.lower_opencl, checked=False)
TARGETS = {t.name: t for t in (VULKAN, OPENCL)}


def target_of(module: Module) -> Target:
    return TARGETS[environment_of(module)]
