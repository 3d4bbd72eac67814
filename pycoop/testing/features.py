"""What the fuzzer may generate: construct families, constructs that meet known defects
(off until those defects are fixed), and the floating-point comparison policy."""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from pycoop import kernel

# Families named by `--features`.
FAMILIES = ("scalar", "shared", "khr", "nv")

# Constructs that meet a known pycoop or driver defect, by name (the generator asks `has(name)`
# before making one). They are off by default so that a run reports only new failures; turn one
# on (`--with NAME`) to check a fix, then generate it unconditionally.
KNOWN_DEFECTS: dict[str, str] = {
    "nv_inner_stride": "NV tensor layouts whose innermost stride is not 1: the NVIDIA driver "
                       "(580.159.04) applies that stride to the slice's start but reads a row's "
                       "elements contiguously (SPV_NV_tensor_addressing multiplies every "
                       "coordinate by its stride); docs/numerics.md, Driver workarounds",
    "nv_span_wrap": "NV tensor loads and stores whose innermost span equals the matrix's column "
                    "count while the outer span has fewer rows than the matrix (in the layout's "
                    "order, or a transposing view's): linearToSpanCoord takes the outer coordinate "
                    "modulo the span, the NVIDIA driver (580.159.04) does not (seed 100295: row 3 "
                    "of a 3-row span read row 3 + offset, wrapped by Repeat, instead of row 0); "
                    "docs/numerics.md, Driver workarounds",
}


@dataclass(frozen=True)
class Features:
    """One fuzzing configuration. `families` picks the kernel kinds (scalar code is in every
    kernel); `enabled` the known-defect constructs to generate anyway; `fp` the float mode
    ("fast": the driver may contract `a*b + c`, drop the sign of zero; "exact": kernels are
    declared `@pc.kernel(fp="exact")` and compared bit for bit, see `exact_mode_available`)."""
    families: frozenset = frozenset({"scalar", "shared"})
    enabled: frozenset = frozenset()
    fp: str = "fast"

    def __post_init__(self):
        bad = set(self.families) - set(FAMILIES)
        if bad:
            raise ValueError(f"unknown feature families {sorted(bad)}; known: {', '.join(FAMILIES)}")
        bad = set(self.enabled) - set(KNOWN_DEFECTS)
        if bad:
            raise ValueError(f"unknown constructs {sorted(bad)}; known: {', '.join(KNOWN_DEFECTS)}")
        if self.fp not in ("fast", "exact"):
            raise ValueError(f"fp must be 'fast' or 'exact', not {self.fp!r}")
        if self.fp == "exact" and not exact_mode_available():
            raise ValueError("fp='exact' needs @pycoop.kernel(fp='exact'), which this pycoop lacks")

    def has(self, name: str) -> bool:
        return name in self.families or name in self.enabled

    def describe(self) -> str:
        parts = sorted(self.families) + [f"+{e}" for e in sorted(self.enabled)]
        return ",".join(parts) + f" fp={self.fp}"


def exact_mode_available() -> bool:
    """Whether `pc.kernel` takes `fp="exact"` (NoContraction on float arithmetic and the float
    controls that preserve signed zeros): then the fuzzer can compare floats bit for bit with
    no generator restriction."""
    return "fp" in inspect.signature(kernel).parameters


def parse_features(families: str = "scalar,shared", enabled: str = "", fp: str = "fast") -> Features:
    fam = {f.strip() for f in families.split(",") if f.strip()} | {"scalar"}
    en = {e.strip() for e in enabled.split(",") if e.strip()}
    return Features(frozenset(fam), frozenset(en), fp)
