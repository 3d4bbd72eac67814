"""What the pipeline knows about a SPIR-V extension beyond its grammar: the one hook through
which an op family tells the targets, the cache and the runtime about its extension.

The grammar already says which capabilities an instruction needs and which extension declares
each capability (spirv.grammar). An extension's module registers an `Extension` record for
the rest:

* `vulkan` / `features`: the Vulkan device extension that exposes it and the device feature
  (VkPhysicalDevice*Features member) enabling each of its capabilities: the Vulkan target
  lists them in a module's requirements, and launches check them;
* `optional` / `keep`: the module can be lowered without the extension (its uses are hints a
  device may ignore: `lower(..., omit={name})`); `optional(module)` says whether a module uses
  it so, `keep()` whether `CompiledKernel.spv` keeps those uses (else they are stripped and
  the full module stays available as `.spv_full`);
* `check` / `validator_knows`: pycoop's own validation of a module using it, for validators
  that predate the extension.

Nothing in codegen, the cache or the frontend names a particular extension: they ask here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..ir.core import Module


@dataclass(frozen=True)
class Extension:
    name: str                                                # SPV_...
    vulkan: str | None = None                                # VK_... exposing it
    features: dict[str, str] = field(default_factory=dict)   # capability -> Vulkan feature
    optional: Callable[[Module], bool] | None = None
    keep: Callable[[], bool] = lambda: True
    # the compile-report note when `n` functions only its uses called were left out
    omission_note: Callable[[int], str] | None = None
    check: Callable[[bytes], list[str]] | None = None        # problems found (empty: fine)
    validator_knows: Callable[[], bool] = lambda: True


_EXTENSIONS: dict[str, Extension] = {}


def register(ext: Extension) -> Extension:
    if ext.name in _EXTENSIONS:
        raise RuntimeError(f"extension {ext.name} registered twice")
    _EXTENSIONS[ext.name] = ext
    return ext


def get(name: str) -> Extension | None:
    return _EXTENSIONS.get(name)


def known() -> list[Extension]:
    return list(_EXTENSIONS.values())


def used(names: Iterable[str]) -> list[Extension]:
    """The records of the extensions `names` (a module's OpExtension list) that have one."""
    return [_EXTENSIONS[n] for n in names if n in _EXTENSIONS]


def optional_in(module: Module) -> list[str]:
    """The optional extensions `module` uses, by name."""
    return [e.name for e in _EXTENSIONS.values() if e.optional is not None and e.optional(module)]
