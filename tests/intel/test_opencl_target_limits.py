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


def test_matrix_times_scalar_in_opencl_kernels():
    """OpMatrixTimesScalar needs the Matrix capability, which the OpenCL environment does not
    allow (the module failed spirv-val): there a matrix times a scalar is an OpFMul by a filled
    matrix, with the same result."""
    Acc = pc.coopmat[pc.f32, pc.Subgroup, 8, 8, pc.Accumulator]
    Acc16 = pc.coopmat[pc.bf16, pc.Subgroup, 8, 8, pc.Accumulator]

    @pc.kernel(workgroup_size=16)
    def k(src: pc.ReadBuffer[u16], y: pc.Buffer[pc.f32], z: pc.Buffer[pc.bf16], s: pc.f32):
        pc.intel.block_prefetch(src, width=16, height=8, memory_width=64, memory_height=8,
                                pitch=64, coord=(0, 0))
        pc.store(y, 64, Acc.load(y, 0, 8) * s, 8)
        pc.store(z, 64, Acc16.load(z, 0, 8) * pc.bf16(2.0), 8)
    ck = k.compile()
    assert ck.target == "opencl" and "OpMatrixTimesScalar" not in ck.spvasm   # validated
    y, z = np.arange(128, dtype=np.float32), np.arange(128).astype(pc.bf16.dtype)
    k[1](np.zeros(256, np.uint16), y, z, 1.5, backend="emulator")
    assert (y[64:] == np.arange(64) * 1.5).all() and (z[64:] == z[:64] * 2).all()
