"""Every rule of pycoop.intel (SPV_INTEL_2d_block_io and Intel's OpenCL environment) that a
kernel can break, with its rule id (docs/rules.md) and line: trace-time rules, constant memory
operands the emulator would report at run time, the emulator's own reports, and kernels that
mix OpenCL-only and Vulkan-only ops."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import pycoop as pc
from pycoop import f16, f32, i32, i64, u8, u16, u32
from pycoop import intel
from pycoop.errors import CompileError, EmulatorError

GEOM = dict(memory_width=128, memory_height=16, pitch=128, coord=(0, 0))


def marked_line(fn, marker: str = "# HERE") -> int:
    src, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(src) if marker in line)


def kernel(body, **kw):
    return pc.kernel(workgroup_size=kw.pop("workgroup_size", 16), **kw)(body)


def k_base_pointer(src: pc.Buffer[u16]):
    sh = pc.shared(u16, 256)
    intel.block_load(sh, width=16, height=8, **GEOM)  # HERE


Pair = pc.struct("Pair", a=u16, b=u16)


def k_base_element_type(src: pc.Buffer[Pair]):
    intel.block_prefetch(src, width=16, height=8, elem_size=2, **GEOM)  # HERE


def k_memory_operand_type(src: pc.Buffer[u16], w: f32):
    intel.block_load(src, width=16, height=8, memory_width=w, memory_height=8, pitch=128, coord=(0, 0))  # HERE


def k_memory_operand_python(src: pc.Buffer[u16]):
    intel.block_load(src, width=16, height=8, memory_width=128.0, memory_height=8, pitch=128, coord=(0, 0))  # HERE


def k_memory_operand_32bit(src: pc.Buffer[u16], p: i64):
    intel.block_load(src, width=16, height=8, memory_width=128, memory_height=8, pitch=p, coord=(0, 0))  # HERE


def k_coordinate_type(src: pc.Buffer[u16], x: i32):
    intel.block_load(src, width=16, height=8, memory_width=128, memory_height=8, pitch=128, coord=x)  # HERE


def k_coordinate_tuple(src: pc.Buffer[u16]):
    intel.block_load(src, width=16, height=8, memory_width=128, memory_height=8, pitch=128, coord=(1.5, 0))  # HERE


def k_coordinate_python(src: pc.Buffer[u16]):
    intel.block_load(src, width=16, height=8, memory_width=128, memory_height=8, pitch=128, coord=3)  # HERE


def k_coordinate_32bit(src: pc.Buffer[u16]):
    c = pc.make_vector([i64(0), i64(0)])
    intel.block_load(src, width=16, height=8, memory_width=128, memory_height=8, pitch=128, coord=c)  # HERE


def k_block_operand_constant(src: pc.Buffer[u16], h: i32):
    intel.block_load(src, width=16, height=h, **GEOM)  # HERE


def k_block_operand_32bit(src: pc.Buffer[u16]):
    intel.block_load(src, width=1 << 40, height=8, **GEOM)  # HERE


def k_element_size(src: pc.Buffer[u8]):
    intel.block_load(src, width=16, height=8, elem_size=3, **GEOM)  # HERE


def k_block_operand(src: pc.Buffer[u16]):
    intel.block_load(src, width=16, height=0, **GEOM)  # HERE


def k_block_width_multiple(src: pc.Buffer[u16]):
    intel.block_prefetch(src, width=5, height=8, **GEOM)  # HERE


def k_transform_element_size(src: pc.Buffer[u32]):
    intel.block_load_transform(src, width=8, height=16, **GEOM)  # HERE


def k_transform_destination(src: pc.Buffer[u16]):
    intel.block_load_transform(src, width=16, height=16, dtype=f32, **GEOM)  # HERE


def k_destination_element_size(src: pc.Buffer[u16]):
    intel.block_load(src, width=16, height=8, dtype=f32, **GEOM)  # HERE


def k_destination_type(src: pc.Buffer[u16]):
    intel.block_load(src, width=16, height=8, dtype="f32", **GEOM)  # HERE


def k_read_only_store(src: pc.ReadBuffer[u16]):
    a = intel.block_load(src, width=16, height=8, **GEOM)
    intel.block_store(src, a, width=16, height=8, **GEOM)  # HERE


def k_store_source(dst: pc.Buffer[u16]):
    intel.block_store(dst, u16(1), width=16, height=8, **GEOM)  # HERE


def k_store_source_python(dst: pc.Buffer[u16]):
    intel.block_store(dst, [1, 2], width=16, height=8, **GEOM)  # HERE


def k_store_element_size(dst: pc.Buffer[u16]):
    intel.block_store(dst, pc.make_array([u32(0)] * 8), width=16, height=8, **GEOM)  # HERE


def k_store_length(dst: pc.Buffer[u16]):
    intel.block_store(dst, pc.make_array([u16(0)] * 4), width=16, height=8, **GEOM)  # HERE


def k_supported_shape(src: pc.Buffer[u16]):
    intel.block_load(src, width=16, height=64, **GEOM)  # HERE


# constant memory operands that are undefined behaviour whatever runs (issue's cases first)

def k_memory_width(src: pc.Buffer[u16]):
    intel.block_load(src, width=16, height=8, memory_width=32, memory_height=8, pitch=32, coord=(0, 0))  # HERE


def k_memory_pitch(src: pc.Buffer[u16], w: i32):
    intel.block_load(src, width=16, height=8, memory_width=w, memory_height=8, pitch=130, coord=(0, 0))  # HERE


def k_coordinate_x_alignment(src: pc.Buffer[u16], y: i32):
    intel.block_load(src, width=16, height=8, memory_width=128, memory_height=8, pitch=128, coord=(1, y))  # HERE


def k_memory_height(src: pc.Buffer[u16]):
    intel.block_prefetch(src, width=16, height=8, memory_width=128, memory_height=0, pitch=128, coord=(0, 0))  # HERE


def k_pitch_below_64(src: pc.Buffer[u16], w: i32):
    intel.block_load(src, width=16, height=8, memory_width=w, memory_height=8, pitch=32, coord=(0, 0))  # HERE


RULES = [
    ("intel.base-pointer", k_base_pointer, {}, "must be a kernel buffer parameter"),
    ("intel.base-element-type", k_base_element_type, {}, "buffer of numeric scalars"),
    ("intel.memory-operand-type", k_memory_operand_type, {}, "must be an integer scalar, got f32"),
    ("intel.memory-operand-type", k_memory_operand_python, {}, "memory width must be an integer"),
    ("intel.memory-operand-32bit", k_memory_operand_32bit, {}, "must be a 32-bit integer, got i64"),
    ("intel.coordinate-type", k_coordinate_type, {}, "2-vector of integers"),
    ("intel.coordinate-type", k_coordinate_tuple, {}, "2-vector of integers, got (1.5, 0)"),
    ("intel.coordinate-type", k_coordinate_python, {}, "2-vector of integers, got 3"),
    ("intel.coordinate-32bit", k_coordinate_32bit, {}, "32-bit integer components"),
    ("intel.block-operand-constant", k_block_operand_constant, {}, "must be a compile-time int"),
    ("intel.block-operand-constant", k_block_operand_32bit, {"strict_intel_shapes": False},
     "does not fit in a 32-bit integer"),
    ("intel.element-size", k_element_size, {}, "Element Size must be 1, 2, 4 or 8 bytes, got 3"),
    ("intel.block-operand", k_block_operand, {"strict_intel_shapes": False}, "Block Height must be a positive"),
    ("intel.block-width-multiple", k_block_width_multiple, {"strict_intel_shapes": False},
     "Block Width must be a multiple of 2"),
    ("intel.transform-element-size", k_transform_element_size, {"strict_intel_shapes": False},
     "Element Size 4 is not defined"),
    ("intel.transform-destination", k_transform_destination, {}, "destination element type f32 is not one"),
    ("intel.destination-element-size", k_destination_element_size, {}, "is 4 bytes, the block elements are 2"),
    ("intel.destination-type", k_destination_type, {}, "dtype must be a pycoop numeric scalar type"),
    ("intel.read-only-store", k_read_only_store, {}, "read-only buffer"),
    ("intel.store-source", k_store_source, {}, "per-invocation array of numbers, got u16"),
    ("intel.store-source", k_store_source_python, {}, "per-invocation array, got list"),
    ("intel.store-element-size", k_store_element_size, {}, "from an array of u32"),
    ("intel.store-length", k_store_length, {}, "needs 8 elements per invocation, the array has 4"),
    ("intel.supported-shape", k_supported_shape, {}, "not in Intel's supported-shape table"),
    ("intel.memory-width", k_memory_width, {}, "Memory Width must be >= 64 bytes"),
    ("intel.memory-pitch", k_memory_pitch, {}, "a multiple of 8 bytes (constant operands: memory height 8, pitch 130"),
    ("intel.coordinate-x-alignment", k_coordinate_x_alignment, {}, "multiple of 2 for 2-byte elements"),
    ("intel.memory-height", k_memory_height, {}, "Memory Height must be > 0"),
    ("intel.memory-pitch", k_pitch_below_64, {}, "Memory Pitch must be >= Memory Width"),
]


@pytest.mark.parametrize("rule_id,body,kw,fragment", RULES, ids=[f"{r[0]}:{r[1].__name__}" for r in RULES])
def test_rule(rule_id, body, kw, fragment):
    with pytest.raises(CompileError) as e:
        kernel(body, **kw).compile()
    assert e.value.rule_id == rule_id and e.value.rule, str(e.value)
    assert e.value.loc.line == marked_line(body), str(e.value)
    assert fragment in e.value.message, e.value.message


def test_subgroup_size_16():
    def body(src: pc.Buffer[u16]):
        intel.block_load(src, width=16, height=8, **GEOM)  # HERE
    with pytest.raises(CompileError) as e:
        kernel(body, workgroup_size=32, subgroup_size=32).compile()
    assert e.value.rule_id == "intel.subgroup-size-16" and e.value.loc.line == marked_line(body)


def test_runtime_operands_report_the_same_rules():
    """The emulator's report of the same rule carries the same id."""
    def body(src: pc.Buffer[u16], w: i32, p: i32, x: i32):
        intel.block_load(src, width=16, height=8, memory_width=w, memory_height=8, pitch=p, coord=(x, 0))  # HERE
    k = kernel(body)
    mem = np.zeros(2048, np.uint16)
    for args, rule_id in [((32, 32, 0), "intel.memory-width"), ((128, 130, 0), "intel.memory-pitch"),
                          ((128, 128, 1), "intel.coordinate-x-alignment")]:
        with pytest.raises(EmulatorError) as e:
            k[1](mem, *args)
        assert e.value.rule_id == rule_id and e.value.loc.line == marked_line(body), str(e.value)


def test_emulator_reports():
    def partial(src: pc.Buffer[u16]):
        if pc.subgroup_local_id() < 8:
            intel.block_prefetch(src, width=16, height=8, **GEOM)  # HERE

    def past_the_end(src: pc.Buffer[u16]):
        a = intel.block_load(src, width=16, height=8, **GEOM)  # HERE
        src[pc.subgroup_local_id()] = a[0]

    def part_subgroup(src: pc.Buffer[u16]):
        intel.block_prefetch(src, width=16, height=8, **GEOM)  # HERE

    for body, kw, n, rule_id in [(partial, {}, 1024, "intel.same-dynamic-instance"),
                                 (past_the_end, {}, 64, "intel.buffer-extent"),
                                 (part_subgroup, {"workgroup_size": 24}, 1024, "intel.full-subgroup")]:
        with pytest.raises(EmulatorError) as e:
            kernel(body, **kw)[1](np.zeros(n, np.uint16))
        assert e.value.rule_id == rule_id and e.value.loc.line == marked_line(body), str(e.value)


def test_vulkan_lowering_of_an_opencl_op_is_refused():
    """pycoop lowers block IO with the OpenCL target only (an internal guard of the lowering)."""
    from pycoop.codegen.vulkan import lower

    def body(src: pc.Buffer[u16]):
        intel.block_prefetch(src, width=16, height=8, **GEOM)  # HERE
    ck = kernel(body).compile()
    with pytest.raises(CompileError) as e:
        lower(ck.module)
    assert e.value.rule_id == "intel.opencl-only" and e.value.loc.line == marked_line(body)


# --------------------------------------------------------------------------- one environment per module

Acc16 = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.Accumulator]


def mix_tensor(A: pc.Buffer[f16], O: pc.Buffer[f16]):
    intel.block_prefetch(A, width=16, height=8, **GEOM)  # FIRST
    lay = pc.nv.tensor_layout(2).dimension(16, 16)  # HERE
    pc.nv.store_tensor(O, lay, pc.nv.load_tensor(A, lay, Acc16))


def mix_tensor_reversed(A: pc.Buffer[f16], O: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2).dimension(16, 16)  # FIRST
    m = pc.nv.load_tensor(A, lay, Acc16)
    intel.block_prefetch(A, width=16, height=8, **GEOM)  # HERE


def mix_qcom(A: pc.Buffer[f16], O: pc.Buffer[u32]):
    a = intel.block_load(A, width=16, height=8, **GEOM)  # FIRST
    m = pc.qcom.construct(pc.make_array([f32(0.0)] * 8), pc.coopmat[f32, pc.Subgroup, 16, 8, pc.Accumulator])  # HERE


def mix_reduce_in_branch(A: pc.Buffer[f16], O: pc.Buffer[f32], n: u32):
    intel.block_prefetch(A, width=16, height=8, **GEOM)  # FIRST
    if n > u32(0):
        m = pc.nv.reduce(pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator].fill(1.0), "row", "add")  # HERE
        pc.store(O, 0, m, 16)


@pytest.mark.parametrize("body,first,second", [
    (mix_tensor, "SPV_INTEL_2d_block_io", "SPV_NV_tensor_addressing"),
    (mix_tensor_reversed, "SPV_NV_tensor_addressing", "SPV_INTEL_2d_block_io"),
    (mix_qcom, "SPV_INTEL_2d_block_io", "SPV_QCOM_cooperative_matrix_conversion"),
    (mix_reduce_in_branch, "SPV_INTEL_2d_block_io", "SPV_NV_cooperative_matrix2"),
])
def test_opencl_and_vulkan_ops_in_one_kernel(body, first, second):
    """Intel block IO exists only in OpenCL modules, the NV and QCOM ops only in Vulkan ones:
    the op that conflicts with an earlier one is the error, naming both extensions."""
    with pytest.raises(CompileError) as e:
        kernel(body).compile()
    v = e.value
    assert v.rule_id == "target.mixed-environments", str(v)
    assert v.loc.line == marked_line(body), str(v)
    assert first in v.message and second in v.message, v.message
    assert f"(line {marked_line(body, '# FIRST')})" in v.message, v.message


def test_khr_matrices_go_with_either_environment():
    """KHR cooperative matrices are not bound to one environment: with block IO the kernel is an
    OpenCL one (spirv-val opencl2.2), and it runs on the emulator."""
    M = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseB]

    @pc.kernel(workgroup_size=16)
    def k(A: pc.Buffer[f16], O: pc.Buffer[f16]):
        intel.block_prefetch(A, width=16, height=8, **GEOM)
        pc.store(O, 0, M.load(A, 0, 16), 16)
    ck = k.compile()
    assert ck.target == "opencl"
    ck.spv                                   # validated (opencl2.2)
    A = np.arange(256).astype(np.float16)
    O = np.zeros(256, np.float16)
    k[1](A, O)
    np.testing.assert_array_equal(O, A)
