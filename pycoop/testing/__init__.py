"""Differential testing of pycoop: random valid kernels run on the emulator and on Vulkan.

    from pycoop.testing.fuzz import fuzz
    report = fuzz(200, seed=0)            # scalar + shared-memory kernels, emulator vs Vulkan
    print(report.summary())

`python -m pycoop.testing.fuzz --help` runs it from the command line. The modules:
`gen` (scalar and shared-memory kernels) and `gen_khr` (cooperative matrices) generate
programs (`program`), `runner` runs and classifies them, `shrink` reduces failures, `fuzz`
drives a campaign (it is not imported here, so that `python -m` can run it as a script).
See docs/fuzzing.md.
"""
from __future__ import annotations

from .features import FAMILIES, KNOWN_DEFECTS, Features, exact_mode_available, parse_features
from .gen import generate
from .program import Program
from .runner import CLASSES, Outcome, Worker, compare_arrays, run_program
from .shrink import shrink

__all__ = ["CLASSES", "FAMILIES", "KNOWN_DEFECTS", "Features", "Outcome", "Program", "Worker",
           "compare_arrays", "exact_mode_available", "generate", "parse_features", "run_program",
           "shrink"]
