"""Test configuration shared by every test directory.

`gpu` tests need a Vulkan device with KHR cooperative matrices (run them with `-m gpu`, e.g.
on the H200 through the device tool); they skip with the reason anywhere else. `vulkan` tests
need any Vulkan device (lavapipe in CI).

Hypothesis runs derandomized (the same examples every run) and without its example database,
so a run does not depend on earlier runs, and without time limits (no deadline, no "too slow"
health check: a loaded 2-core machine must not fail a correct test);
`--hypothesis-profile=explore` draws fresh examples.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("PYCOOP_CACHE_DIR", "off")      # tests never depend on a warm disk cache
_UNTIMED = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("deterministic", derandomize=True, database=None, **_UNTIMED)
settings.register_profile("explore", **_UNTIMED)
settings.load_profile("deterministic")


def _vulkan_caps():
    try:
        from pycoop.runtime.vulkan import get_runtime
        return get_runtime().capabilities, None
    except Exception as e:          # no loader / no device: the reason becomes the skip message
        return None, str(e)


def pytest_collection_modifyitems(config, items):
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    caps, why = _vulkan_caps()
    if caps is not None and not caps.khr_coopmat_shapes:
        why = f"{caps.device_name} has no KHR cooperative matrix support"
    if why is None:
        return
    skip = pytest.mark.skip(reason=f"no GPU with cooperative matrices: {why}")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)
