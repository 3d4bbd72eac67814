"""Helpers shared by the core test modules (imported by name: pytest puts this directory on
sys.path)."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, settings

import pycoop

# Every Kernel defined in tests/core (filled by conftest.py; checked by test_codegen).
KERNELS: list = []

# Modest example counts keep the whole suite fast; deadlines are off because the first example
# of a test traces (and caches) its kernels.
SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
FEW = settings(SETTINGS, max_examples=10)


def emu(kernel, grid, *args, **kwargs):
    """Launch `kernel` over `grid` on the NumPy emulator."""
    return kernel[grid](*args, backend="emulator", **kwargs)


def line_of(fn, text: str) -> int:
    """Line number (in this file) of the first source line of `fn` containing `text`."""
    import inspect
    fn = getattr(fn, "fn", None) or getattr(fn, "_fn", None) or fn
    lines, start = inspect.getsourcelines(fn)
    for i, ln in enumerate(lines):
        if text in ln:
            return start + i
    raise AssertionError(f"{text!r} not found in the source of {fn!r}")


def ulp_close(x, ref, dtype, ulps=2):
    """|x - ref| within `ulps` units in the last place of `dtype` at ref's magnitude."""
    x = np.asarray(x, np.float64)
    ref = np.asarray(ref, np.float64)
    eps = float(np.finfo(dtype).eps)
    tiny = float(np.finfo(dtype).smallest_normal)
    tol = ulps * eps * np.maximum(np.abs(ref), tiny)
    return np.all(np.abs(x - ref) <= tol)


def rng(seed=0):
    return np.random.default_rng(seed)


__all__ = ["SETTINGS", "FEW", "emu", "line_of", "ulp_close", "rng", "pycoop"]
