"""Vectors of 8 and 16 components (SPV_EXT_long_vector): they run on the emulator, compile to
a module pycoop checks where the installed spirv-val predates the extension, and a Vulkan
device without VK_EXT_shader_long_vector refuses them by name before any work."""
from __future__ import annotations

import numpy as np
import pytest

import pycoop as pc
from pycoop import f32


@pc.kernel(workgroup_size=64)
def widen(F: pc.Buffer[f32]):
    i = pc.global_invocation_id.x
    v = pc.make_vector([F[i] * f32(k) for k in range(8)])
    F[i] = v[7] + v[1]


def test_eight_component_vectors_on_the_emulator():
    x = np.arange(64, dtype=np.float32)
    widen[1](x, backend="emulator")
    np.testing.assert_array_equal(x, np.arange(64, dtype=np.float32) * 8)


def test_the_module_declares_the_extension_and_is_checked():
    from pycoop.ops.long_vector import check, validator_knows
    from pycoop.spirv import grammar, reader
    ck = widen.compile()
    words = dict.fromkeys(n for n, _ in reader.instructions(ck.spv))
    caps = [ops[0] for n, ops in reader.instructions(ck.spv) if n == "OpCapability"]
    assert "OpTypeVector" in words and grammar.capability("LongVectorEXT") in caps
    assert check(ck.spv) == []
    if not validator_knows():
        assert any("SPV_EXT_long_vector" in n for n in ck.report)


def test_a_device_without_long_vectors_refuses_them_by_name():
    try:
        from pycoop.runtime.vulkan import get_runtime
        caps = get_runtime().capabilities
    except Exception as e:
        pytest.skip(f"no Vulkan device: {e}")
    if "VK_EXT_shader_long_vector" in caps.extensions:
        pytest.skip("the device has long vectors")
    with pytest.raises(pc.BackendUnavailable, match="lacks extension VK_EXT_shader_long_vector"):
        widen[1](np.zeros(64, np.float32), backend="vulkan")
