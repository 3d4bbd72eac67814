"""What a launch computes from its configuration alone, kept for the next launch like it.

Index arithmetic, address analyses and bounds checks depend only on the kernel, the grid, the
subgroup size, the scalar arguments and the sizes of the buffers, never on what the buffers
hold. The emulator keeps those results for the last few such configurations of each kernel
and reuses them when a launch repeats one, as a training or inference loop does: a repeated
512^3 GEMM launch runs about a quarter faster. Buffer contents, and anything computed from
them (loaded values, products, data-dependent control flow and the checks under it), are
never kept.

A value is *invariant* in a launch when it is a scalar argument, or the result of a
memoryless op (arithmetic, comparisons, conversions, constants, built-ins) executed with every
invocation active and only invariant operands. Only invariant values and what is derived from
them alone are kept.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict

import numpy as np

from .. import knobs
from ..ir.core import Function

_PER_KERNEL = 4                  # configurations kept per kernel, least recently used dropped
_MEMOS: "weakref.WeakKeyDictionary[Function, OrderedDict]" = weakref.WeakKeyDictionary()


class LaunchMemo(dict):
    """Results kept for one configuration of one kernel: {key: value}, keys built from the IR
    ops that computed them. Arrays are made read-only as they are kept: a later launch that
    tried to change one in place would fail loudly instead of corrupting the next."""

    def __setitem__(self, key, value) -> None:
        _freeze(value)
        super().__setitem__(key, value)


def _freeze(x) -> None:
    if isinstance(x, np.ndarray):
        x.flags.writeable = False
    elif isinstance(x, (tuple, list)):
        for v in x:
            _freeze(v)
    elif hasattr(x, "__dataclass_fields__"):
        for name in x.__dataclass_fields__:
            _freeze(getattr(x, name))


def launch_memo(module, dispatch, args: list, params) -> LaunchMemo | None:
    """The memo of this launch's configuration (empty the first time), or None when disabled
    (PYCOOP_EMULATOR_MEMO=0)."""
    if not knobs.emulator_memo():
        return None
    key = (dispatch.grid, dispatch.wg_size, dispatch.sgs,
           tuple(_config(a, p.type) for a, p in zip(args, params)))
    per = _MEMOS.setdefault(module.kernel, OrderedDict())
    memo = per.pop(key, None)
    if memo is None:
        memo = LaunchMemo()
        if len(per) >= _PER_KERNEL:
            per.popitem(last=False)
    per[key] = memo
    return memo


def _config(arg, t) -> tuple:
    """What of an argument the kept results may depend on: a scalar's value (its bits: -0.0 is
    not 0.0), a buffer's size."""
    if isinstance(arg, np.ndarray):
        return ("buffer", arg.nbytes, arg.dtype.str)
    return ("scalar", str(t), np.asarray(arg, t.dtype).tobytes())
