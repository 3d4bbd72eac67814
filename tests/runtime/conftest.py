"""Shared fixtures of the runtime tests."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def vulkan_caps():
    """The Vulkan device's capabilities (lavapipe in CI); the module's tests skip without
    one."""
    try:
        from pycoop.runtime.vulkan import get_runtime
        return get_runtime().capabilities
    except Exception as e:
        pytest.skip(f"no Vulkan device: {e}")
