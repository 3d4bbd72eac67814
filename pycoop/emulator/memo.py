"""What a launch computes from its configuration alone, kept for the next launch like it.

Index arithmetic, address analyses and bounds checks depend only on the kernel, the grid, the
subgroup size, the scalar arguments and the sizes of the buffers, never on what the buffers
hold. The emulator keeps those results for recent configurations and reuses them when a
launch repeats one, as a training or inference loop does: a repeated 512^3 GEMM launch runs
about a quarter faster. Buffer contents, and anything computed from them (loaded values,
products, data-dependent control flow and the checks under it), are never kept.

A value is *invariant* in a launch when it is a scalar argument, or the result of a
memoryless op (arithmetic, comparisons, conversions, constants, built-ins) executed with every
invocation active and only invariant operands. Only invariant values and what is derived from
them alone are kept: at most 64 MiB per configuration and 256 MiB in all, the least recently
launched configurations dropped first.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Callable

import numpy as np

from .. import knobs
from ..ir.core import Function

_PER_CONFIG = 64 << 20           # bytes kept for one configuration
_TOTAL = 256 << 20               # bytes kept in all
_CONFIGS = 64                    # configurations kept in all
# (id of the kernel's IR function, configuration) -> (weak reference to the function, memo)
_MEMOS: "OrderedDict[tuple, tuple[weakref.ref, LaunchMemo]]" = OrderedDict()
_LOCK = threading.Lock()         # launches from several threads share the table


class LaunchMemo(dict):
    """Results kept for one configuration of one kernel: {key: value}, keys built from the IR
    ops that computed them. Arrays are made read-only as they are kept: a later launch that
    tried to change one in place would fail loudly instead of corrupting the next."""

    def __init__(self):
        super().__init__()
        self.nbytes = 0

    def get_or(self, key, compute: Callable):
        """The value kept under `key`, else `compute()`, kept when the budget allows."""
        if key in self:
            return self[key]
        value = compute()
        size = _footprint(value)
        if self.nbytes + size <= _PER_CONFIG:
            _freeze(value)
            self[key] = value
            self.nbytes += size
        return value


def launch_memo(module, dispatch, args: list, params) -> LaunchMemo | None:
    """The memo of this launch's configuration (empty the first time), or None when disabled
    (PYCOOP_EMULATOR_MEMO=0)."""
    if not knobs.emulator_memo():
        return None
    fn = module.kernel
    key = (id(fn), dispatch.grid, dispatch.wg_size, dispatch.sgs,
           tuple(_config(a, p.type) for a, p in zip(args, params)))
    with _LOCK:
        found = _MEMOS.pop(key, None)
        if found is None or found[0]() is not fn:      # new, or an id reused by another kernel
            found = (weakref.ref(fn), LaunchMemo())
        _MEMOS[key] = found                               # the most recent last
        total = sum(m.nbytes for _, m in _MEMOS.values())
        while len(_MEMOS) > 1 and (len(_MEMOS) > _CONFIGS or total > _TOTAL):
            _, (_, dropped) = _MEMOS.popitem(last=False)
            total -= dropped.nbytes
    return found[1]


def configurations(fn: Function) -> list[LaunchMemo]:
    """The memos kept for kernel function `fn`, least recently launched first."""
    with _LOCK:
        return [m for ref, m in _MEMOS.values() if ref() is fn]


def _config(arg, t) -> tuple:
    """What of an argument the kept results may depend on: a scalar's value (its bits: -0.0 is
    not 0.0), a buffer's size."""
    if isinstance(arg, np.ndarray):
        return ("buffer", arg.nbytes, arg.dtype.str)
    return ("scalar", str(t), np.asarray(arg, t.dtype).tobytes())


def _arrays(x):
    if isinstance(x, np.ndarray):
        yield x
    elif isinstance(x, (tuple, list)):
        for v in x:
            yield from _arrays(v)
    elif hasattr(x, "__dataclass_fields__"):
        for name in x.__dataclass_fields__:
            yield from _arrays(getattr(x, name))


def _footprint(x) -> int:
    """Bytes held by the arrays in `x`; a broadcast counts its distinct elements only."""
    return sum(a.itemsize * int(np.prod([n for n, s in zip(a.shape, a.strides) if s]))
               for a in _arrays(x))


def _freeze(x) -> None:
    for a in _arrays(x):
        a.flags.writeable = False
