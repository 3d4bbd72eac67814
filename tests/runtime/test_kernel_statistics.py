"""CompiledKernel.gpu_statistics: what the Vulkan driver reports of a compiled kernel
(VK_KHR_pipeline_executable_properties), or a clear error where it reports nothing."""
from __future__ import annotations

import pytest

import pycoop as pc
from pycoop import f32
from pycoop.runtime.vulkan import PipelineError

EXTENSION = "VK_KHR_pipeline_executable_properties"


@pc.kernel(workgroup_size=64)
def fill(y: pc.Buffer[f32], n: pc.Spec[pc.u32] = 1):
    i = pc.global_invocation_id.x
    y[i] = f32(i * n)


@pytest.mark.parametrize("checked", [None, False, True])
def test_statistics_or_a_clear_error(vulkan_caps, checked):
    ck = fill.compile()
    if not vulkan_caps.has("pipelineExecutableInfo"):
        with pytest.raises(PipelineError, match=f"does not report pipeline statistics "
                                                f"\\({EXTENSION}"):
            ck.gpu_statistics(checked=checked)
        return
    s = ck.gpu_statistics(checked=checked, spec={"n": 3})
    assert s.kernel == "fill" and s.device == vulkan_caps.device_name and s.values
    assert set(s.descriptions) == set(s.values)
    name = next(iter(s.values))
    assert s[name] == s.values[name] and name in str(s)


@pytest.mark.parametrize("kwargs, message", [
    (dict(checked="yes"), "checked must be True, False or None, got 'yes'"),
    (dict(spec={"m": 1}), "fill has no Spec parameter 'm'"),
])
def test_bad_options_are_argument_errors(vulkan_caps, kwargs, message):
    with pytest.raises(pc.ArgumentError, match=message):
        fill.compile().gpu_statistics(**kwargs)


def test_descriptor_abi_kernels_have_no_checked_variant(vulkan_caps):
    with pytest.raises(pc.ArgumentError, match="abi='descriptors'"):
        fill.compile(abi="descriptors").gpu_statistics(checked=True)


def test_a_kernel_the_device_cannot_run_names_what_it_lacks(vulkan_caps):
    from pycoop.kernels import gemm_nv
    if vulkan_caps.has("cooperativeMatrixWorkgroupScope"):
        pytest.skip("the device runs workgroup-scope matrices")
    with pytest.raises(pc.BackendUnavailable, match="gemm_nv: no statistics: the Vulkan device "
                                                    ".* lacks .*cooperativeMatrixWorkgroupScope"):
        gemm_nv(128, 128, 32, 256).compile().gpu_statistics()


def test_the_drivers_statistics_are_read_by_their_format():
    """The four VkPipelineExecutableStatisticFormatKHR of a statistics array as a driver
    fills it (the query itself needs a device with the extension: tests/gpu)."""
    from pycoop.runtime.vulkan import ext
    want = {"Register Count": (1, 2, 168), "Spills": (0, 0, True), "Offset": (2, 1, -4),
            "Ratio": (3, 3, 0.5)}
    stats = ext.struct_array("VkPipelineExecutableStatisticKHR",
                             ext.vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR, 5)
    member = {0: "b32", 1: "i64", 2: "u64", 3: "f64"}
    for s, (name, (_, fmt, value)) in zip(stats, want.items()):
        s.name = name.encode()
        s.description = f"the {name.lower()}".encode()
        s.format = fmt
        setattr(s.value, member[fmt], value)
    got = ext.statistics_of(stats, 4)
    assert got == {n: (v, f"the {n.lower()}") for n, (_, _, v) in want.items()}
    assert [type(v) for v, _ in got.values()] == [int, bool, int, float]


def test_the_query_reads_every_executable_and_statistic(monkeypatch):
    """pipeline_statistics against a stand-in driver that answers the count-then-fill calls
    as the spec says (the real one needs the extension: tests/gpu)."""
    from pycoop.runtime.vulkan import ext
    executables = [("Compute", 32, {"Register Count": 96, "Binary Size": 4096}),
                   ("Second", 16, {"Spills": 0})]

    def get_props(device, info, count, items):
        count[0] = len(executables)
        if items != ext.ffi.NULL:
            for item, (name, size, _) in zip(items, executables):
                item.name, item.description, item.subgroupSize = name.encode(), b"d", size
        return 0

    def get_stats(device, executable, count, items):
        stats = executables[executable.executableIndex][2]
        count[0] = len(stats)
        if items != ext.ffi.NULL:
            for item, (name, value) in zip(items, stats.items()):
                item.name, item.description, item.format = name.encode(), b"", 2
                item.value.u64 = value
        return 0

    fns = {"vkGetPipelineExecutablePropertiesKHR": get_props,
           "vkGetPipelineExecutableStatisticsKHR": get_stats}
    monkeypatch.setattr(ext, "_device_function", lambda device, name, extension: fns[name])
    got = ext.pipeline_statistics(None, ext.ffi.NULL)
    assert [(e["name"], e["subgroup_size"]) for e in got] == [("Compute", 32), ("Second", 16)]
    assert got[0]["statistics"] == {"Register Count": (96, ""), "Binary Size": (4096, "")}
    assert got[1]["statistics"] == {"Spills": (0, "")}


def test_statistics_print_and_display_in_jupyter():
    s = pc.KernelStatistics("gemm", "GPU <0>", "Compute", 32, {"Register Count": 168,
                            "Spilled": False}, {"Register Count": "registers <per> thread",
                                                "Spilled": ""})
    assert s["Register Count"] == 168
    assert str(s).splitlines() == ["gemm on GPU <0> (Compute, subgroup size 32):",
                                   "  Register Count  168", "  Spilled         False"]
    h = s._repr_html_()
    assert "GPU &lt;0&gt;" in h and "registers &lt;per&gt; thread" in h and "168" in h


@pc.kernel(workgroup_size=16)
def prefetch(src: pc.ReadBuffer[pc.u16], w: pc.i32, h: pc.i32):
    pc.intel.block_prefetch(src, width=16, height=8, memory_width=w * 2, memory_height=h,
                            pitch=w * 2, coord=pc.make_vector([pc.i32(0), pc.i32(0)]))


def test_an_opencl_kernel_has_no_vulkan_statistics(vulkan_caps):
    with pytest.raises(pc.BackendUnavailable,
                       match="prefetch: no statistics: it is an OpenCL-environment kernel"):
        prefetch.compile().gpu_statistics()
