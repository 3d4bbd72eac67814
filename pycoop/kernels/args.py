"""Argument checks shared by the ready-made kernels' builders. They run before a kernel is
built or looked up in a cache: a float tile size such as 64.0 equals and hashes as 64, so it
would otherwise reach a kernel cache, or build a kernel of float sizes."""
from __future__ import annotations

import functools
import numbers

import numpy as np

from .limits import MAX_INVOCATIONS


def is_int(v) -> bool:
    """Whether v is a Python or NumPy integer (not a bool, which is one to Python)."""
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def check_int(fn: str, name: str, v, least: int = 1) -> int:
    """v as a Python int, or the error of `fn` for its argument `name`: an int >= `least`."""
    if not is_int(v) or v < least:
        raise ValueError(f"{fn}: {name} must be an int >= {least}, got {v!r}")
    return int(v)


def check_bool(fn: str, name: str, v, optional: bool = False) -> bool | None:
    """A True/False option of `fn` (a NumPy bool too; None where `optional`), or its error: a
    string such as 'no' would otherwise be taken as true."""
    if v is None and optional:
        return None
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    raise ValueError(f"{fn}: {name} must be True or False{' or None' if optional else ''},"
                     f" got {v!r}")


def check_unroll(fn: str, unroll, name: str = "unroll") -> None:
    """The values `pc.range(unroll=...)` takes, checked where the kernel is built: a bad one
    would surface only when the kernel is compiled, as an error inside its loop."""
    if not (unroll is None or isinstance(unroll, bool) or is_int(unroll) and unroll >= 2):
        raise ValueError(f"{fn}: {name} is None, True, False or an int >= 2 (a partial unroll "
                         f"count), got {unroll!r}")


def check_invocations(fn: str, subgroups: int, subgroup_size: int) -> None:
    """The error of `fn` for a workgroup of more than `MAX_INVOCATIONS` invocations."""
    if subgroups * subgroup_size > MAX_INVOCATIONS:
        raise ValueError(f"{fn}: subgroups x subgroup_size = {subgroups} x {subgroup_size} = "
                         f"{subgroups * subgroup_size} invocations per workgroup; Vulkan devices "
                         f"take at most {MAX_INVOCATIONS} (use fewer subgroups)")


# The kernel factories are cached with `typed=True`: 64.0 == 64 (and True == 1) hash alike, so
# an untyped cache would hand the kernel built for one to a call with the other. Each factory
# checks its arguments first, and a refused call is never cached.
kernel_cache = functools.lru_cache(maxsize=None, typed=True)


def check_ints(name: str, minimum: int = 1, **values) -> list[int]:
    """`values` (argument -> value) as Python ints, each an int >= `minimum` (`check_int`)."""
    return [check_int(name, arg, v, minimum) for arg, v in values.items()]


def real_dtype(a: np.ndarray) -> bool:
    """Whether `a` holds real numbers: floats (ml_dtypes' bfloat16 too) or integers, not
    bools, complex numbers, strings or objects (converting those to f32 would read bools as
    0 and 1, drop imaginary parts with a warning only, or fail inside NumPy)."""
    return a.dtype.kind in "fiu" or a.dtype.name == "bfloat16"


def numeric_array(name: str, arg: str, value, what: str) -> np.ndarray:
    """`value` as a NumPy array of numbers (bools, ints or floats): the helpers reinterpret
    its bytes, which objects or strings do not have as numbers."""
    try:
        a = np.asarray(value)
    except (TypeError, ValueError):           # e.g. ragged nested lists
        a = None
    if a is None or a.dtype.kind not in "biuf":
        got = f"an array of {a.dtype}" if isinstance(value, np.ndarray) else type(value).__name__
        raise ValueError(f"{name}: {arg} must be {what}, got {got}")
    return a
