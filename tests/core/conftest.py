"""Shared set-up of the core test suite.

* Every kernel object defined in this directory is recorded (``core_helpers.KERNELS``) so that
  test_codegen can check that each traced specialisation lowers to SPIR-V that passes
  spirv-val; that test is moved to the end of the session.
* The on-disk SPIR-V cache is disabled so validation really runs.
"""
from __future__ import annotations

import os

import pytest

os.environ["PYCOOP_CACHE_DIR"] = "off"

from pycoop.frontend import kernel as _kernel_mod  # noqa: E402

from core_helpers import KERNELS  # noqa: E402  (this directory is on sys.path)

_orig_init = _kernel_mod.Kernel.__init__


_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _recording_init(self, *a, **k):
    _orig_init(self, *a, **k)
    if os.path.abspath(self.fn.__code__.co_filename).startswith(_HERE):   # this suite's only
        KERNELS.append(self)


if not getattr(_kernel_mod.Kernel.__init__, "_pycoop_recording", False):
    _recording_init._pycoop_recording = True
    _kernel_mod.Kernel.__init__ = _recording_init


def pytest_collection_modifyitems(config, items):
    last = [it for it in items if it.get_closest_marker("run_last")]
    if last:
        items[:] = [it for it in items if it not in last] + last


def pytest_configure(config):
    config.addinivalue_line("markers", "run_last: run after every other test of the session")
