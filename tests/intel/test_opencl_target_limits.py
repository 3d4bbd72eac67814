"""Kernels that use pycoop.intel are lowered for the OpenCL environment (SPIR-V 1.2): subgroup
collectives (GroupNonUniform, SPIR-V 1.3+), atomics and device-scope barriers (the Vulkan
memory model) cannot be emitted there, which is a
CompileError at the user's line when the module is lowered (the emulator still runs them)."""
from __future__ import annotations

import numpy as np
import pytest

import pycoop as pc
from pycoop import i32, u16, u32



def _kernel(what: str):
    @pc.kernel(workgroup_size=16)
    def k(src: pc.ReadBuffer[u16], out: pc.Buffer[u32], w: i32, h: i32):
        c = pc.make_vector([i32(0), i32(0)])
        pc.intel.block_prefetch(src, width=16, height=8, memory_width=w * 2, memory_height=h,
                                pitch=w * 2, coord=c)
        if what == "subgroup":
            out[0] = pc.subgroup.add(out[1])               # HERE subgroup
        elif what == "atomic":
            pc.atomic.add(out, 0, 1)                       # HERE atomic
        else:
            pc.barrier(memory="device")                    # HERE barrier
    return k


@pytest.mark.parametrize("what, message", [
    ("subgroup", "subgroup collectives are not available in OpenCL-environment kernels"),
    ("atomic", "atomics are not available in OpenCL-environment kernels"),
    ("barrier", "pycoop.barrier(memory='device') is available in Vulkan kernels only")])
def test_collectives_and_atomics_in_opencl_kernels(what, message):
    k = _kernel(what)
    ck = k.compile()
    assert ck.target == "opencl"
    with pytest.raises(pc.CompileError) as e:
        ck.spv
    assert e.value.message == message and e.value.rule and e.value.hint
    assert e.value.rule_id == {"subgroup": "subgroup.vulkan-only", "atomic": "atomic.vulkan-only",
                               "barrier": "core.barrier-device-vulkan"}[what]
    src = open(__file__).read().splitlines()
    assert "# HERE " + what in src[e.value.line - 1]
    out = np.zeros(2, np.uint32)
    k[1](np.zeros(32 * 8, np.uint16), out, 32, 8, backend="emulator")
    assert out[0] == {"subgroup": 0, "atomic": 16, "barrier": 0}[what]
