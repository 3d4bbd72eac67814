"""Checked launches on Vulkan (lavapipe): out-of-bounds accesses are suppressed and reported as
pycoop.KernelFault at the kernel line, in the emulator's words; the process goes on; red zones;
the pool never hands out memory a live array uses."""
from __future__ import annotations

import json
import struct
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f32, f64, i32, i64, u32
from pycoop.codegen.vulkan import lower
from pycoop.spirv.tools import disassemble, validate
from runtime_helpers import VULKAN


def needs_vulkan(test):
    return pytest.mark.vulkan(pytest.mark.skipif(not VULKAN, reason="no Vulkan device")(test))


def line_of(k, text: str) -> int:
    import inspect
    lines, start = inspect.getsourcelines(k.fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


@pc.kernel(workgroup_size=64)
def fill(y: pc.Buffer[f32]):
    i = pc.global_invocation_id.x
    y[i] = f32(i)                                          # the new user's bug: no `if i < n`


@pc.kernel(workgroup_size=64)
def shifted(x: pc.ReadBuffer[f32], y: pc.Buffer[f32], shift: i32):
    i = pc.global_invocation_id.x
    y[i] = x[i32(i) + shift]


@pc.kernel(workgroup_size=16)
def vec_load(x: pc.ReadBuffer[pc.vec(f32, 4)], y: pc.Buffer[f32]):
    i = pc.global_invocation_id.x
    v = x[i]
    y[i] = v[0] + v[3]


@pc.kernel(workgroup_size=32)
def shared_oob(y: pc.Buffer[f32], k: u32):
    sh = pc.shared(f32, 32)
    t = pc.local_invocation_id.x
    sh[t] = f32(t)
    pc.barrier()
    y[pc.global_invocation_id.x] = sh[t + k]


@pc.kernel(workgroup_size=32)
def count_into(h: pc.Buffer[u32], bins: u32):
    i = pc.global_invocation_id.x
    pc.atomic.add(h, i % bins, u32(1))


@pc.kernel(workgroup_size=32)
def wide_index(y: pc.Buffer[f32], base: i64):
    y[base + i64(pc.global_invocation_id.x)] = 1.0


def checked_spv(k, **consts) -> bytes:
    spv = k.compile(checked=True, **consts).spv
    validate(spv)
    return spv


# ---------------------------------------------------------------- compiling
def test_checked_and_unchecked_are_two_variants_with_their_own_abi():
    plain, checked = fill.compile(), fill.compile(checked=True)
    assert plain is not checked and checked is fill.compile(checked=True)
    assert not plain.checked and checked.checked and checked.variant(True, "device_address", False) is plain
    assert "checked" not in plain.abi
    extra = checked.abi["checked"]
    assert extra["counts"] == [{"name": "y", "offset": 16, "elem_size": 4}]
    assert extra["fault_offset"] == 8
    op = extra["ops"][0]
    assert (op["file"], op["line"], op["what"], op["memory"]) == (
        __file__, line_of(fill, "y[i] = f32(i)"), "store", "buffer 'y'")
    # the unchecked module is the plain lowering: no guard, no fault record
    assert plain.spv == lower(plain.module).spv
    assert "OpAtomicCompareExchange" not in plain.spvasm
    assert "FaultRecord" in disassemble(checked.spv)


@pytest.mark.parametrize("k", [fill, shifted, vec_load, shared_oob, count_into, wide_index])
def test_every_checked_module_passes_spirv_val(k):
    spv = checked_spv(k)
    text = disassemble(spv)
    assert "OpAtomicCompareExchange" in text and "OpSelectionMerge" in text


def test_khr_tiles_are_guarded_once_per_access():
    Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]

    @pc.kernel(workgroup_size=32)
    def tiles(C: pc.Buffer[f32], N: u32):
        acc = pc.load(Acc, C, pc.workgroup_id.x * 16, N)
        pc.store(C, pc.workgroup_id.x * 16, acc, N)

    ck = tiles.compile(checked=True)
    validate(ck.spv)
    text = disassemble(ck.spv)
    ops = ck.abi["checked"]["ops"]
    assert [o["what"] for o in ops] == ["cooperative matrix load", "cooperative matrix store"]
    assert all(o["block"] for o in ops)
    assert text.count("OpAtomicCompareExchange") == 2     # one guard per access, not per element
    assert text.count("OpUDiv") == 2


@settings(max_examples=40, deadline=None)
@given(rows=st.sampled_from([8, 16, 32]), cols=st.sampled_from([8, 16, 32]),
       layout=st.sampled_from(["RowMajorKHR", "ColumnMajorKHR"]), k=st.sampled_from([1, 2, 4]),
       stride=st.integers(1, 1000), offset=st.integers(0, 1000))
def test_a_tile_guard_reaches_the_last_element_the_emulator_checks(rows, cols, layout, k, stride,
                                                                   offset):
    """The guard's reach (in memory elements holding k matrix components each) ends at the
    element holding the emulator's last component (MatrixLayout.extent, in components)."""
    from pycoop.codegen.checked import matrix_block
    from pycoop.ops.khr_layout import matrix_layout
    t = pc.coopmat[pc.f16, pc.Subgroup, rows, cols, pc.Accumulator]
    lay = matrix_layout(t, layout)
    reach = matrix_block("load", lay.span, None, None, "stride", k)
    last_component = offset * k + int(lay.extent(stride * k))
    assert offset + reach.major * stride + reach.minor == last_component // k


def test_sidecar_of_a_checked_export_documents_the_extra_fields(tmp_path):
    path = fill.compile(checked=True).save(tmp_path / "fill.spv")
    meta = json.loads((tmp_path / "fill.spv.json").read_text())
    assert meta["abi"]["checked"]["counts"][0]["name"] == "y"
    assert meta["abi"]["checked"]["ops"][0]["line"] == line_of(fill, "y[i] = f32(i)")
    validate(path.read_bytes())
    fill.compile().save(tmp_path / "plain.spv")
    assert "checked" not in json.loads((tmp_path / "plain.spv.json").read_text())["abi"]


def test_the_knob_reads_the_environment(monkeypatch):
    from pycoop import knobs
    monkeypatch.delenv("PYCOOP_CHECKED", raising=False)
    assert knobs.checked()
    monkeypatch.setenv("PYCOOP_CHECKED", "0")
    assert not knobs.checked()
    monkeypatch.setenv("PYCOOP_CHECKED", "maybe")
    with pytest.raises(ValueError, match="PYCOOP_CHECKED"):
        knobs.checked()


# ---------------------------------------------------------------- running
@needs_vulkan
def test_the_new_user_case_faults_at_the_kernel_line_like_the_emulator():
    y = np.zeros(128, np.float32)
    with pytest.raises(pc.KernelFault) as gpu:
        fill[4](y, backend="vulkan")                 # 256 invocations, 128 elements
    e = gpu.value
    line = line_of(fill, "y[i] = f32(i)")
    assert (e.loc.file, e.line, e.buffer, e.count) == (__file__, line, "buffer 'y'", 128)
    assert 128 <= e.index < 256 and e.workgroup in ((2, 0, 0), (3, 0, 0))
    assert e.invocation == e.index - 64 * e.workgroup[0]
    assert e.rule_id == "checked.bounds"
    assert f"store out of bounds of buffer 'y' (128 elements): index {e.index}" in str(e)
    np.testing.assert_array_equal(y, np.arange(128, dtype=np.float32))   # in-bounds work done
    with pytest.raises(pc.EmulatorError) as emu:
        fill[4](np.zeros(128, np.float32), backend="emulator")
    assert emu.value.loc == e.loc      # the same facts, in the same words
    assert ("undefined behaviour in workgroup (2, 0, 0), invocation 0: store out of bounds of "
            "buffer 'y' (128 elements): index 128") in str(emu.value)
    assert (f"undefined behaviour in workgroup {e.workgroup}, invocation {e.invocation}: store out "
            f"of bounds of buffer 'y' (128 elements): index {e.index}") in str(e)
    # the process goes on: the next launches work
    y2 = np.zeros(128, np.float32)
    fill[2](y2, backend="vulkan")
    np.testing.assert_array_equal(y2, np.arange(128, dtype=np.float32))


@needs_vulkan
def test_queued_launches_fault_at_synchronisation_and_the_result_reports_it():
    y = pc.zeros(100, pc.f32, backend="vulkan")
    r = fill[2](y)                                   # queued: nothing raised here
    with pytest.raises(pc.KernelFault) as info:
        pc.synchronize()
    assert info.value.count == 100 and 100 <= info.value.index < 128
    assert f"launched at {__file__}:{sys._getframe().f_lineno - 4}" in str(info.value)
    with pytest.raises(pc.KernelFault):
        r.times_ms
    fill[1](y)
    np.testing.assert_array_equal(y.numpy()[:64], np.arange(64, dtype=np.float32))


@needs_vulkan
def test_a_faulted_launch_displays_the_fault_without_raising_it():
    y = pc.zeros(100, pc.f32, backend="vulkan")
    bad = fill[2](y)
    with pytest.raises(pc.KernelFault):
        pc.synchronize()
    assert repr(bad).startswith("<launch on vulkan: failed: KernelFault: ") and "out of bounds" in repr(bad)
    assert "failed: KernelFault" in bad._repr_html_()
    with pytest.raises(pc.KernelFault):               # its times still raise
        bad.times_ms
    with pc.get_runtime("vulkan").batch():         # one submission: good waits with bad
        good, bad = fill[1](y), fill[2](y)
    with pytest.raises(pc.KernelFault):               # the wait raises another launch's fault:
        repr(good)                                    # not good's to hide
    assert "failed" in repr(bad) and "ms>" in repr(good)


@needs_vulkan
def test_each_of_many_queued_launches_has_its_own_fault_record():
    y = pc.zeros(64, pc.f32, backend="vulkan")
    rt = pc.get_runtime("vulkan")
    with rt.batch():
        results = [fill[1](y) for _ in range(300)]     # more launches than a record slab
        bad = fill[2](y)
        results += [fill[1](y) for _ in range(20)]
    with pytest.raises(pc.KernelFault):
        pc.synchronize()
    with pytest.raises(pc.KernelFault):
        bad.times_ms
    assert all(len(r.times_ms) == 1 for r in results)  # the others are fine
    pc.synchronize()                                   # reported once
    stats = rt.stats()
    assert stats["live_allocations"] - stats["pooled_count"] == stats["array_count"]


@needs_vulkan
def test_out_of_bounds_loads_yield_zero_and_negative_indices_are_reported_signed():
    x = np.arange(1, 65, dtype=np.float32)
    y = np.full(64, -1.0, np.float32)
    with pytest.raises(pc.KernelFault) as info:
        shifted[1](x, y, 32, backend="vulkan")
    np.testing.assert_array_equal(y, np.r_[x[32:], np.zeros(32, np.float32)])
    assert info.value.buffer == "buffer 'x'" and 64 <= info.value.index < 96
    assert "load out of bounds of buffer 'x' (64 elements)" in str(info.value)
    with pytest.raises(pc.KernelFault) as info:
        shifted[1](x, y, -70, backend="vulkan")
    assert -70 <= info.value.index < -6
    assert f"index {info.value.index}" in str(info.value)


@needs_vulkan
def test_vector_elements_are_counted_as_elements():
    x = np.arange(64, dtype=np.float32).reshape(16, 4)[:12].copy()      # 12 vec4s
    y = np.zeros(16, np.float32)
    with pytest.raises(pc.KernelFault) as info:
        vec_load[1](x, y, backend="vulkan")
    assert info.value.count == 12 and 12 <= info.value.index < 16
    np.testing.assert_array_equal(y[:12], x[:, 0] + x[:, 3])
    np.testing.assert_array_equal(y[12:], 0)


@needs_vulkan
def test_shared_memory_accesses_are_guarded():
    y = np.zeros(64, np.float32)
    shared_oob[2](y, 0, backend="vulkan")
    np.testing.assert_array_equal(y, np.tile(np.arange(32, dtype=np.float32), 2))
    with pytest.raises(pc.KernelFault) as info:
        shared_oob[2](y, 8, backend="vulkan")
    e = info.value
    assert e.buffer == "shared array" and e.count == 32 and 32 <= e.index < 40
    assert e.line == line_of(shared_oob, "sh[t + k]")
    assert "shared array (32 elements per workgroup)" in str(e)


@needs_vulkan
def test_atomics_and_64_bit_indices_are_guarded():
    h = np.zeros(4, np.uint32)
    count_into[1](h, 4, backend="vulkan")
    np.testing.assert_array_equal(h, [8, 8, 8, 8])
    with pytest.raises(pc.KernelFault) as info:
        count_into[1](np.zeros(4, np.uint32), 6, backend="vulkan")
    assert "atomic operation out of bounds of buffer 'h' (4 elements)" in str(info.value)
    with pytest.raises(pc.KernelFault) as info:
        wide_index[1](np.zeros(32, np.float32), 1 << 33, backend="vulkan")
    assert (1 << 33) <= info.value.index < (1 << 33) + 32


@needs_vulkan
def test_unchecked_launches_skip_the_guards(monkeypatch):
    monkeypatch.setenv("PYCOOP_CHECKED", "0")
    y = np.zeros(64, np.float32)
    fill[1](y, backend="vulkan")                     # in bounds: the unchecked kernel runs
    assert fill.compile().checked is False
    np.testing.assert_array_equal(y, np.arange(64, dtype=np.float32))
    with pytest.raises(pc.KernelFault):
        fill[2](np.zeros(64, np.float32), backend="vulkan", checked=True)


@pc.kernel(workgroup_size=64)
def many(y: pc.Buffer[f32], a: f64, b: f64, c: f64, d: f64, e: f64, f: f64, g: f64, h: f64,
         i: f64, j: f64, k: f64, m: f64, n: f64, o: f64):
    t = pc.global_invocation_id.x
    y[t] = f32(a + b + c + d + e + f + g + h + i + j + k + m + n + o)


@needs_vulkan
def test_checked_fields_that_overflow_the_push_constants_go_to_the_argument_buffer():
    assert many.compile().abi["mode"] == "push_constants"
    assert many.compile(checked=True).abi["mode"] == "arg_buffer"
    y = np.zeros(64, np.float32)
    many[1](y, *range(14), backend="vulkan")
    np.testing.assert_array_equal(y, 91.0)
    with pytest.raises(pc.KernelFault, match="buffer 'y' \\(64 elements\\)"):
        many[2](y, *range(14), backend="vulkan")
    a = pc.zeros(64, pc.f32, backend="vulkan")
    with pytest.raises(pc.KernelFault) as info:     # argument-buffer launches wait
        many[2](a, *range(14))
    assert 64 <= info.value.index < 128
    np.testing.assert_array_equal(a.numpy(), 91.0)


# ---------------------------------------------------------------- other faults
@needs_vulkan
def test_a_hang_times_out_and_the_next_launches_work(monkeypatch):
    """A hang is simulated (lavapipe ends long loops early): the fence never signals, the
    launch ends with the timeout error, and the next use gets a fresh device."""
    from pycoop.runtime.vulkan import errors
    from pycoop.runtime.vulkan import runtime as module
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from test_arrays import _FailingWaits
    y = pc.zeros(64, pc.f32, backend="vulkan")
    pc.synchronize()
    with monkeypatch.context() as m:
        m.setattr(module, "lib", _FailingWaits(module.lib, 2))
        fill[1](y)
        with pytest.raises(errors.VulkanTimeout, match="did not finish"):
            pc.synchronize()
    with pytest.raises(pc.KernelFault):                  # a fault after the hang: reported
        fill[2](np.zeros(64, np.float32), backend="vulkan")
    z = np.zeros(64, np.float32)
    fill[1](z, backend="vulkan")                         # and the launch after it works
    np.testing.assert_array_equal(z, np.arange(64, dtype=np.float32))


# ---------------------------------------------------------------- pool hygiene, red zones
@needs_vulkan
def test_a_freed_buffer_never_aliases_a_live_one():
    rng = np.random.default_rng(3)
    live = {}
    for step in range(60):
        if live and rng.random() < 0.4:
            del live[rng.choice(list(live))]           # back to the pool (after queued work)
        else:
            n = int(rng.integers(1, 3000))
            live[step] = a = pc.zeros(n, pc.f32, backend="vulkan")
            if n >= 64:
                fill[n // 64](a[:n // 64 * 64])         # queued: the pool must wait for it
        spans = sorted((a.kernel_argument().address, a.kernel_argument().address + a.nbytes)
                       for a in live.values())
        assert all(hi <= lo2 for (_, hi), (lo2, _) in zip(spans, spans[1:])), spans
    pc.synchronize()
    for a in live.values():                          # each array holds what its kernel wrote
        n = a.size - a.size % 64
        np.testing.assert_array_equal(a.numpy()[:n], np.arange(n, dtype=np.float32))


def test_the_red_zone_checker_names_the_first_changed_byte():
    from pycoop.runtime.vulkan import faults
    zone = np.full(faults.RED_ZONE_BYTES // 4, faults.RED_ZONE_WORD, np.uint32)
    assert faults.check_red_zone(zone, "y", 10, "kernel k") is None
    zone[3] = 0
    e = faults.check_red_zone(zone, "y", 10, "kernel k")
    assert isinstance(e, pc.KernelFault) and e.buffer == "y" and e.rule_id == "checked.red-zone"
    assert "past the end of parameter y (10 bytes)" in str(e) and "at byte 24" in str(e)


@needs_vulkan
def test_red_zones_catch_a_write_that_slips_past_the_guards(monkeypatch):
    """A guard that lets a write through is simulated by a count 8 elements too large: the
    write lands in the red zone after the buffer, and the launch reports it."""
    from pycoop.runtime.vulkan import abi

    class Lying(struct.Struct):
        def pack_into(self, buffer, offset, count):
            super().pack_into(buffer, offset, count + 8)

    y = np.zeros(64, np.float32)
    monkeypatch.setattr(abi, "_COUNT", Lying("<I"))
    with pytest.raises(pc.KernelFault, match="wrote past the end of parameter y") as info:
        fill[2](y, backend="vulkan")
    assert info.value.rule_id == "checked.red-zone"
    monkeypatch.undo()
    fill[1](y, backend="vulkan")
    np.testing.assert_array_equal(y, np.arange(64, dtype=np.float32))


@needs_vulkan
@pytest.mark.parametrize("transfer", ["direct", "staged"])
def test_faults_and_red_zones_in_both_transfer_modes(transfer, monkeypatch):
    from pycoop.runtime.vulkan import abi
    from pycoop.runtime.vulkan.runtime import VulkanRuntime

    class Lying(struct.Struct):
        def pack_into(self, buffer, offset, count):
            super().pack_into(buffer, offset, count + 8)

    ck = fill.compile(checked=True)
    rt = VulkanRuntime(transfer=transfer)
    try:
        assert rt.transfer_mode == transfer
        y = np.zeros(64, np.float32)
        with pytest.raises(pc.KernelFault, match="index 6[4-9]|index [7-9][0-9]|index 1[0-2][0-9]"):
            rt.launch(ck.spv, "main", (2, 1, 1), ck.abi, [y])
        np.testing.assert_array_equal(y, np.arange(64, dtype=np.float32))
        with monkeypatch.context() as m:
            m.setattr(abi, "_COUNT", Lying("<I"))
            with pytest.raises(pc.KernelFault, match="red zone after it was changed at byte 256"):
                rt.launch(ck.spv, "main", (2, 1, 1), ck.abi, [np.zeros(64, np.float32)])
        rt.launch(ck.spv, "main", (1, 1, 1), ck.abi, [y])      # and the runtime goes on
    finally:
        rt.close()


# ---------------------------------------------------------------- NV tensor guards
def _s32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def _guard_range(dim, mode, steps, rows, cols, store, has_view=False):
    """tensor_range on Python ints: (assumptions hold, accessed, lo, hi) of the guard."""
    from types import SimpleNamespace
    from pycoop.codegen.checked import Pairs, PyInts, tensor_range
    from pycoop.types import TensorLayoutType
    p = Pairs(PyInts())
    leaf = lambda v, signed: p.point(_s32(v) if signed else v & 0xFFFFFFFF)  # noqa: E731
    ops = [SimpleNamespace(name=n, operands=[None, *vals]) for n, vals in steps]
    acc, lo, hi = tensor_range(p, TensorLayoutType(dim, mode), ops, leaf, rows, cols, has_view, store)
    return all(p.fits), acc, lo, hi


def _emulated_range(dim, mode, steps, rows, cols, store, view=None):
    """The emulator's addressing (pycoop.ops.nv.addressing): None when it reports undefined
    behaviour, () when no element is read or written, else (min, max) element index."""
    from pycoop.ops.nv import addressing as A
    lay = A.create_layout(dim, mode)
    for n, vals in steps:
        v = np.array(vals, np.int64)
        if n == "nv.layout_dimension":
            lay = A.layout_set_dimension(lay, v)
        elif n == "nv.layout_stride":
            lay = A.layout_set_stride(lay, v)
        elif n == "nv.layout_block_size":
            lay = A.layout_set_block_size(lay, v)
        elif n == "nv.layout_slice":
            lay = A.layout_slice(lay, v[0::2], v[1::2])
    plan = (A.store_tensor_plan if store else A.load_tensor_plan)(lay, view, rows, cols)
    if plan.fault.any():
        return None
    ei = plan.element_index[plan.accessed]
    return (int(ei.min()), int(ei.max())) if ei.size else ()


@st.composite
def _tensor_access(draw):
    dim = draw(st.sampled_from([1, 2, 3]))
    mode = draw(st.integers(0, 4))
    store = draw(st.booleans())
    rows, cols = draw(st.sampled_from([1, 4, 16])), draw(st.sampled_from([1, 8, 16]))
    steps = []
    if not store and draw(st.booleans()):
        steps.append(("nv.layout_block_size", [draw(st.integers(1, 4)) for _ in range(dim)]))
    dims = [draw(st.integers(1, 300)) for _ in range(dim)]
    steps.append(("nv.layout_dimension", dims))
    if draw(st.booleans()):
        steps.append(("nv.layout_stride", [draw(st.integers(0, 5000)) for _ in range(dim)]))
    if dim == 2 and draw(st.booleans()):          # a matrix tile, as kernels slice them
        spans = [rows, cols]
    elif dim == 1:
        spans = [rows * cols]
    else:
        spans = [draw(st.integers(1, 40)) for _ in range(dim)]
    for _ in range(draw(st.integers(0, 2))):
        offs = [draw(st.integers(-350, 350)) for _ in range(dim)]
        steps.append(("nv.layout_slice", [x for o, s in zip(offs, spans) for x in (o, s)]))
    return dim, mode, steps, rows, cols, store


@settings(max_examples=400, deadline=None)
@given(_tensor_access())
def test_the_tensor_guard_reaches_the_elements_the_emulator_addresses(case):
    """On random layouts the guard's range of element indices is the emulator's (min, max)
    addressed index for Undefined, Constant, ClampToEdge and Repeat, and contains it for
    MirrorRepeat; where the emulator reports undefined behaviour (span, block size or clamped
    dimension of 0, MirrorRepeat on a dimension of 1) the guard's assumptions fail unless
    only Undefined's out-of-range coordinates (not memory) are at fault."""
    dim, mode, steps, rows, cols, store = case
    fits, accessed, lo, hi = _guard_range(*case)
    emu = _emulated_range(*case)
    if emu is None:
        return                       # undefined behaviour: reported by the emulator
    assert fits
    if emu == ():
        assert not accessed or mode in (0, 4)
        return
    assert accessed
    effective = 1 if store and mode else mode
    if effective != 4 and _span_coordinates_form_a_box(steps, rows * cols):
        assert (lo, hi) == emu, (lo, hi, emu)
    else:                            # the guard bounds each coordinate on its own
        assert lo <= emu[0] and emu[1] <= hi


def _span_coordinates_form_a_box(steps, n: int) -> bool:
    """Whether the span coordinates of matrix elements 0..n-1 are every combination of their
    per-dimension ranges (then bounding each coordinate on its own is exact)."""
    spans = [s for name, vals in steps for s in ([vals[1::2]] if name == "nv.layout_slice" else
                                                 [vals] if name == "nv.layout_dimension" else [])][-1]
    coords = set()
    for i in range(n):
        c = []
        for s in reversed(spans):
            c.append(i % s)
            i //= s
        coords.add(tuple(c))
    box = 1
    for d in range(len(spans)):
        box *= len({c[d] for c in coords})
    return box == len(coords)


@settings(max_examples=150, deadline=None)
@given(_tensor_access(), st.integers(0, 16), st.integers(1, 16), st.integers(0, 16), st.integers(1, 16))
def test_the_tensor_guard_with_a_view_contains_what_the_emulator_addresses(case, r0, rs, c0, cs):
    from pycoop.ops.nv import addressing as A
    dim = case[0]
    view = A.view_set_clip(A.create_view(dim, False, tuple(range(dim))), r0, rs, c0, cs)
    fits, accessed, lo, hi = _guard_range(*case, has_view=True)
    emu = _emulated_range(*case, view=view)
    if emu is None or emu == ():
        return
    assert fits and accessed and lo <= emu[0] and emu[1] <= hi


def test_undefined_behaviour_fails_the_guard():
    # a span of 0 (`index % 0`) and a MirrorRepeat dimension of 1 read out of range
    assert not _guard_range(2, 1, [("nv.layout_dimension", [8, 8]), ("nv.layout_slice", [0, 0, 0, 16])],
                            16, 16, False)[0]
    assert not _guard_range(1, 4, [("nv.layout_dimension", [1]), ("nv.layout_slice", [3, 16])],
                            4, 4, False)[0]
    # Undefined with a negative coordinate: before the buffer
    assert not _guard_range(2, 0, [("nv.layout_dimension", [64, 64]), ("nv.layout_slice", [-1, 16, 0, 16])],
                            16, 16, False)[0]


_CLAMPS = ["undefined", "constant", "clamp_to_edge", "repeat", "mirror_repeat"]


def _tensor_kernel(clamp: str, view: bool, block: bool):
    Acc = pc.coopmat[f32, pc.Workgroup, 16, 16, pc.Accumulator]

    @pc.kernel(workgroup_size=32)
    def tensor_copy(S: pc.Buffer[f32], D: pc.Buffer[f32], rows: u32, first: u32, k: u32):
        lay = pc.nv.tensor_layout(2, clamp=clamp).dimension(rows, 16)
        if block:
            lay = lay.block_size(1, 1)
        v = pc.nv.tensor_view(2, True, (1, 0)).dimension(16, 16).clip(0, 16, 0, k) if view else None
        t = pc.nv.load_tensor(S, lay.slice(first, 16, 0, 16), Acc, view=v)
        out = pc.nv.tensor_layout(2, clamp=clamp).dimension(rows, 16).slice(first, 16, 0, 16)
        pc.nv.store_tensor(D, out, t, view=v)
    return tensor_copy


@pytest.mark.parametrize("clamp", _CLAMPS)
@pytest.mark.parametrize("view", [False, True])
def test_tensor_guards_pass_spirv_val_for_every_clamp_mode_and_view(clamp, view):
    ck = _tensor_kernel(clamp, view, block=not view).compile(checked=True)
    validate(ck.spv)
    ops = ck.abi["checked"]["ops"]
    assert [o["what"] for o in ops] == ["tensor load", "tensor store"]
    assert all(o["block"] for o in ops) and ops[0]["memory"] == "buffer 'S'"
    assert disassemble(ck.spv).count("OpAtomicCompareExchange") == 2     # once per access


def test_a_decode_function_load_is_guarded_in_blocks():
    from pycoop.kernels import gemm_q4_0
    ck = gemm_q4_0(64, 64, 32, 128).compile(checked=True)
    validate(ck.spv)
    # W holds Q4_0 blocks: its guard counts blocks (the decode function's pointee), and the
    # K loop's copy run when every k-step is in bounds has no guards (these are the other copy's)
    assert [(o["what"], o["memory"]) for o in ck.abi["checked"]["ops"]] == [
        ("tensor load", "buffer 'X'"), ("tensor load", "buffer 'W'"), ("tensor store", "buffer 'Y'")]


def test_a_layout_through_control_flow_is_left_unguarded():
    Acc = pc.coopmat[f32, pc.Workgroup, 16, 16, pc.Accumulator]

    @pc.kernel(workgroup_size=32)
    def carried(D: pc.Buffer[f32], n: u32):
        lay = pc.nv.tensor_layout(2, clamp="constant").dimension(16, 16)
        for i in pc.range(n):
            lay = lay.slice(1, 16, 0, 16)
        pc.nv.store_tensor(D, lay, pc.fill(Acc, 1.0))

    ck = carried.compile(checked=True)
    validate(ck.spv)
    assert ck.abi["checked"]["ops"] == []


# ---------------------------------------------------------------- guards hoisted out of loops
@pc.kernel(workgroup_size=32)
def strided_sum(x: pc.ReadBuffer[f32], y: pc.Buffer[f32], n: u32, stride: u32, base: u32):
    i = pc.global_invocation_id.x
    s = f32(0.0)
    for k in pc.range(0, n, 2):
        s = s + x[base + k * stride + i]
    y[i] = s


def test_a_counted_loop_runs_an_unguarded_copy_when_every_iteration_is_in_bounds():
    ck = strided_sum.compile(checked=True)
    validate(ck.spv)
    text = disassemble(ck.spv)
    assert text.count("OpLoopMerge") == 2                 # the checked copy and the fast one
    lines = [o["line"] for o in ck.abi["checked"]["ops"]]
    load = line_of(strided_sum, "s = s + x[")
    assert lines.count(load) == 1                          # guarded in the checked copy only


def test_the_staged_khr_gemm_loop_has_no_guards_in_its_fast_copy():
    from collections import Counter
    from pycoop.kernels import gemm_khr_staged
    k = gemm_khr_staged(128, 256, 32, 2, 4, 8, specialize=True)
    ck = k.compile(checked=True, M=1024, N=1024, K=1024)
    validate(ck.spv)
    assert ck.spvasm.count("OpLoopMerge") == 2
    plain = k.compile(M=1024, N=1024, K=1024)
    # the guards of the loop's 28 accesses exist once (the checked copy); the fast copy has as
    # many matrix loads and stores as the unchecked kernel's loop
    per_line = Counter(o["line"] for o in ck.abi["checked"]["ops"])
    assert sum(per_line.values()) == 50
    n_plain = plain.spvasm.count("OpCooperativeMatrixLoadKHR")
    assert ck.spvasm.count("OpCooperativeMatrixLoadKHR") == n_plain + 22


@needs_vulkan
@pytest.mark.parametrize("n, stride, base", [(8, 32, 0), (9, 32, 0), (8, 32, 40), (0, 1 << 30, 0),
                                             (5, 64, 0), (5, 64, 1), (3, 1 << 31, 0), (2, 0, 250)])
def test_versioned_loops_keep_the_first_fault_exact(n, stride, base):
    """The same facts as the emulator, whichever loop copy runs (all in bounds: the fast
    copy; else the guarded one)."""
    x = np.arange(256, dtype=np.float32)
    y = np.zeros(32, np.float32)
    want = np.zeros(32, np.float32)
    bad = False
    for k in range(0, n, 2):
        idx = (base + k * stride + np.arange(32)) % (1 << 32)
        bad |= bool((idx >= 256).any())
        want += np.where(idx < 256, x[np.minimum(idx, 255)], 0)
    if not bad:
        strided_sum[1](x, y, n, stride, base, backend="vulkan")
        np.testing.assert_array_equal(y, want)
        return
    with pytest.raises(pc.KernelFault) as gpu:
        strided_sum[1](x, y, n, stride, base, backend="vulkan")
    with pytest.raises(pc.EmulatorError) as emu:
        strided_sum[1](x, np.zeros(32, np.float32), n, stride, base, backend="emulator")
    e = gpu.value
    assert e.line == emu.value.line == line_of(strided_sum, "s = s + x[")
    assert f"load out of bounds of buffer 'x' (256 elements): index {e.index}" in str(e)
    assert f"load out of bounds of buffer 'x' (256 elements): index {e.index}" in str(emu.value) \
        or 256 <= e.index
    np.testing.assert_array_equal(y, want)       # suppressed loads read zeros, the rest ran


@needs_vulkan
def test_the_unguarded_copy_is_the_one_that_runs_in_bounds(monkeypatch):
    """With every per-access guard forced to fail, an in-bounds launch still reports nothing:
    the loop copy without guards ran. Out of bounds, the guarded copy runs and reports."""
    from pycoop.codegen import checked

    @pc.kernel(workgroup_size=32)
    def walk(x: pc.ReadBuffer[f32], y: pc.Buffer[f32], n: u32):
        i = pc.global_invocation_id.x
        s = f32(0.0)
        for k in pc.range(n):
            s = s + x[k * 32 + i]
        y[i] = s

    def fail(self, first, idx, idx_t, count, reach):
        return self.ctx.emit("OpULessThan", checked.bool_, count, count)

    monkeypatch.setattr(checked.Guards, "_in_bounds", fail)
    x = np.arange(128, dtype=np.float32)
    y = np.zeros(32, np.float32)
    with pytest.raises(pc.KernelFault) as info:          # the store after the loop: guarded
        walk[1](x, y, 4, backend="vulkan")
    assert info.value.line == line_of(walk, "y[i] = s")
    np.testing.assert_array_equal(y, 0)
    with pytest.raises(pc.KernelFault) as info:
        walk[1](x, y, 5, backend="vulkan")
    assert info.value.line == line_of(walk, "s = s + x[")   # the loop's load, guarded copy


@pc.kernel(workgroup_size=32)
def while_counted(x: pc.ReadBuffer[f32], y: pc.Buffer[f32], n: u32):
    i = pc.global_invocation_id.x
    w = u32(0)
    s = f32(0.0)
    while w < n:
        w += u32(1)                 # the step is a constant traced inside the body
        s = s + x[w * 32 + i - 32]
    y[i] = s


@needs_vulkan
@pytest.mark.parametrize("n", [0, 3, 8, 9])
def test_a_while_loop_counting_up_is_versioned_too(n):
    assert while_counted.compile(checked=True).spvasm.count("OpLoopMerge") == 2
    x = np.arange(256, dtype=np.float32)
    y = np.zeros(32, np.float32)
    want = sum((x[k * 32:(k + 1) * 32] for k in range(min(n, 8))), np.zeros(32, np.float32))
    if n <= 8:
        while_counted[1](x, y, n, backend="vulkan")
    else:
        with pytest.raises(pc.KernelFault, match="index 256"):
            while_counted[1](x, y, n, backend="vulkan")
    np.testing.assert_array_equal(y, want)
