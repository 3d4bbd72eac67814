"""backend="auto" on a device that cannot run a kernel: a short BackendFallbackWarning, once per
kernel, pointing at the user's launch line, with the details as attributes; filterable."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import pycoop as pc
from pycoop import f32
from pycoop.errors import BackendUnavailable
from pycoop.runtime import backend

Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]


@pc.kernel(workgroup_size=32)
def ones(C: pc.Buffer[f32]):
    pc.store(C, 0, Acc.fill(1.0), 16)


MISSING = ["extension VK_KHR_cooperative_matrix", "feature cooperativeMatrix",
           "cooperative matrix shape 16x16x16"]


@pytest.fixture
def lacking(monkeypatch):
    monkeypatch.setattr(backend, "_noticed", set())
    monkeypatch.setattr(backend, "vulkan_missing", lambda ck: list(MISSING))


def _launch(C):
    return ones[1](C)                                      # LAUNCH


def test_warning_is_short_and_carries_the_details(lacking):
    C = np.zeros(256, np.float32)
    with pytest.warns(pc.BackendFallbackWarning) as record:
        r = _launch(C)
    assert r.backend == "emulator" and (C == 1).all()
    [w] = record
    assert w.filename == __file__ and "# LAUNCH" in open(__file__).read().splitlines()[w.lineno - 1]
    msg = str(w.message)
    assert msg == ("ones runs on the pycoop emulator: the Vulkan device lacks extension "
                   "VK_KHR_cooperative_matrix and 2 more (details: the warning's .reason, "
                   "`pycoop info`)")
    assert w.message.kernel == "ones" and w.message.missing == tuple(MISSING)
    assert w.message.reason == "ones runs on the emulator because the Vulkan device lacks " + \
        ", ".join(MISSING)


def test_once_per_kernel(lacking):
    C = np.zeros(256, np.float32)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            _launch(C)
    assert [type(w.message) for w in record] == [pc.BackendFallbackWarning]


def test_no_vulkan_at_all(monkeypatch):
    def unavailable(ck):
        raise BackendUnavailable("Vulkan is not available: no driver")
    monkeypatch.setattr(backend, "_noticed", set())
    monkeypatch.setattr(backend, "vulkan_missing", unavailable)
    with pytest.warns(pc.BackendFallbackWarning, match="no usable Vulkan device") as record:
        _launch(np.zeros(256, np.float32))
    assert record[0].message.missing == ()
    assert "no driver" in record[0].message.reason


def test_filterable_and_explicit_backends_do_not_warn(lacking):
    C = np.zeros(256, np.float32)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=pc.BackendFallbackWarning)
        _launch(C)
    assert record == []
    backend._noticed.clear()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ones[1](C, backend="emulator")
        with pc.use_backend("emulator"):
            _launch(C)
    assert record == []


def test_an_error_filter_raises_it(lacking):
    with warnings.catch_warnings():
        warnings.simplefilter("error", pc.BackendFallbackWarning)
        with pytest.raises(pc.BackendFallbackWarning):
            _launch(np.zeros(256, np.float32))


@pytest.mark.gpu
def test_no_warning_on_a_capable_device(monkeypatch):
    monkeypatch.setattr(backend, "_noticed", set())
    C = np.zeros(256, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pc.BackendFallbackWarning)
        r = _launch(C)
    assert r.backend == "vulkan" and (C == 1).all()
