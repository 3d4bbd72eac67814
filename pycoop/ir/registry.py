"""The op registry: one typed record per op holds its type rule and checks, SPIR-V lowering,
NumPy semantics, the SPIR-V capabilities it needs and its effects.

Op families (`pycoop.ops.core`, `.khr`, `.nv`, ...) declare records with `define()` and attach
`@lowering` / `@emulation` functions; the builder, verifier, SPIR-V lowering and emulator only
ever look ops up here. Everything the pipeline needs to know about an op is a field of its
record (purity, the memory it writes, its client environment, ...): nothing about an op is
listed anywhere else. `check_complete()` fails for a record that lacks a part it needs.

This module sits in `ir/` below every consumer: it imports nothing of pycoop but the errors
and the IR, so the tracer, the code generator and the emulator all depend on it, never on
`ops/`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal

from ..errors import CompileError, Loc
from ..spirv import grammar

if TYPE_CHECKING:                     # annotations only: the consumers sit above the IR
    from ..types import Type
    from .core import Block, Module, Op, Value

Environment = Literal["vulkan", "opencl"]
ENVIRONMENTS = ("vulkan", "opencl")
# ops the walkers handle structurally: no lowering or emulation of their own
STRUCTURAL = frozenset({"yield", "condition"})


@dataclass
class OpDef:
    name: str
    # (operands, attrs, regions, loc) -> result types; raises CompileError at `loc`
    infer: Callable[[list["Value"], dict, "list[Block] | None", "Loc | None"], list["Type"]]
    lower: Callable[[Any, "Op"], None] | None = None       # (LowerCtx, op); sets ctx.ids
    emulate: Callable[..., Any] | None = None               # (EmuCtx, op, *operand arrays)
    capabilities: tuple[str, ...] = ()
    # no memory access, no side effect, no dependence on which invocations run it: the
    # tracer shares repeats (CSE) and the emulator may run it once for many iterations/launches
    pure: bool = False
    writes: int | None = None          # operand index of the memory the op writes
    atomic: bool = False               # updates operand `writes` atomically
    # the one SPIR-V client environment the op exists in (None: every environment)
    environment: Environment | None = None
    # the emulation reads operands that may be undefined in some invocations and handles
    # that itself (otherwise the emulator reports any such read)
    poison_aware: bool = False
    # a tangled instruction (barrier, subgroup-wide block IO): not allowed in functions
    # called per element (SPV_NV_cooperative_matrix2)
    tangled: bool = False
    # checked lowering: op -> the memory extent the access reaches (codegen.checked.Reach)
    bounds: Callable[["Op"], Any] | None = None
    # op -> the bytes the start of its memory (operand 0) must be a multiple of, so a launch
    # refuses a view of a buffer that starts between two such boundaries
    base_alignment: Callable[["Op"], int] | None = None
    doc: str = ""


_REGISTRY: dict[str, OpDef] = {}


def define(name: str, infer: Callable, *, capabilities: tuple[str, ...] = (), pure: bool = False,
           writes: int | None = None, atomic: bool = False,
           environment: Environment | None = None, poison_aware: bool = False,
           tangled: bool = False, bounds: Callable | None = None,
           base_alignment: Callable | None = None, doc: str = "") -> OpDef:
    """Register op `name`. Keyword-only effects: a misspelt one is a TypeError at import."""
    if name in _REGISTRY:
        raise RuntimeError(f"op {name} defined twice")
    if environment is not None and environment not in ENVIRONMENTS:
        raise ValueError(f"op {name}: unknown environment {environment!r}")
    if atomic and writes is None:
        raise ValueError(f"op {name}: an atomic op names the memory it writes")
    d = OpDef(name, infer, capabilities=tuple(capabilities), pure=pure, writes=writes,
              atomic=atomic, environment=environment, poison_aware=poison_aware,
              tangled=tangled, bounds=bounds, base_alignment=base_alignment, doc=doc)
    _REGISTRY[name] = d
    return d


def lowering(name: str):
    def deco(fn):
        _REGISTRY[name].lower = fn
        return fn
    return deco


def emulation(name: str):
    def deco(fn):
        _REGISTRY[name].emulate = fn
        return fn
    return deco


def get(name: str) -> OpDef:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise CompileError(f"internal: unknown op {name!r}") from None


def all_ops() -> list[OpDef]:
    """Every registered op, by name."""
    return [_REGISTRY[n] for n in sorted(_REGISTRY)]


def check_complete() -> None:
    """Raise RuntimeError naming every op that lacks a doc, a lowering or an emulation
    (the structural terminators excepted). Run once every op family is imported."""
    missing = []
    for d in all_ops():
        parts = [] if d.doc else ["doc"]
        if d.name not in STRUCTURAL:
            parts += [p for p in ("lower", "emulate") if getattr(d, p) is None]
        if parts:
            missing.append(f"{d.name}: {', '.join(parts)}")
    if missing:
        raise RuntimeError("incomplete op records: " + "; ".join(missing))


def environment_of(module: "Module") -> Environment:
    """The client environment of a module: that of its environment-bound ops ("vulkan" when
    none is bound). Ops bound to different environments cannot share a module: the first op,
    in program order, whose environment differs from an earlier op's is a CompileError at
    its line."""
    first = None
    for op in module.walk():
        env = get(op.name).environment
        if env is None:
            continue
        if first is None:
            first, first_env = op, env
        elif env != first_env:
            raise CompileError(
                f"{_bound_op(op)} exists only in the {_ENV_NAME[env]} environment, but this "
                f"kernel also uses {_bound_op(first)} (line {first.loc.line}), which exists only in "
                f"the {_ENV_NAME[first_env]} environment", op.loc,
                rule="a SPIR-V module has one client environment: SPV_INTEL_2d_block_io needs "
                     "OpenCL (CrossWorkgroup base pointers); SPV_NV_cooperative_matrix2, "
                     "SPV_NV_tensor_addressing and SPV_QCOM_cooperative_matrix_conversion are "
                     "Vulkan extensions (PhysicalStorageBuffer / Vulkan memory model)",
                hint="split the work into two kernels, one per environment",
                rule_id="target.mixed-environments")
    return first_env if first is not None else "vulkan"


_ENV_NAME = {"opencl": "OpenCL", "vulkan": "Vulkan"}


def _bound_op(op: "Op") -> str:
    """`op` and the extensions that bind it to one environment, for messages."""
    exts = []
    for c in get(op.name).capabilities:
        exts += [e for e in grammar.extensions_of_capability(c)[:1]
                 if e not in exts and e != "SPV_KHR_cooperative_matrix"]
    return f"{op.name} ({', '.join(exts)})" if exts else op.name
