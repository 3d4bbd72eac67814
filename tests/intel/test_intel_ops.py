"""pycoop.intel (SPV_INTEL_2d_block_io) through real kernels: the spec's worked examples,
property tests against test_blockio's independent per-element reference, every trace-time
check and emulator undefined-behaviour report (message and line), and the OpenCL target
(every module passes spirv-val's OpenCL environment)."""
from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pycoop as pc
from pycoop import CompileError, EmulatorError, f16, f32, i32, i64, u8, u16, u32
from pycoop import intel
from pycoop.spirv.tools import validate

from test_blockio import PITCH, rc, ref_load, ref_store, tagged_memory  # noqa: E402  (same directory)

ROOT = Path(__file__).resolve().parents[2]
UINT = {1: u8, 2: u16, 4: u32, 8: pc.u64}


def check_spv(ck) -> None:
    """The module is an OpenCL-environment kernel accepted by spirv-val (opencl2.2)."""
    assert ck.target == "opencl"
    validate(ck.spv, "opencl2.2")       # ck.spv is validated already; say it explicitly
    asm = ck.spvasm
    for line in ("OpCapability Addresses", "OpCapability Kernel", "OpCapability Int64",
                 "OpCapability SubgroupDispatch", "OpCapability Subgroup2DBlockIOINTEL",
                 'OpExtension "SPV_INTEL_2d_block_io"', "OpMemoryModel Physical64 OpenCL",
                 f"OpExecutionMode %{ck.name} SubgroupSize {ck.module.subgroup_size}",
                 f"OpEntryPoint Kernel %{ck.name} \"{ck.name}\""):
        assert line in asm, line


# --- kernels built per shape ---------------------------------------------------------------

def load_kernel(mode: str, E: int, W: int, H: int, C: int, S: int, mw: int, mh: int, pitch: int,
                subgroups: int = 1):
    """Each subgroup g block-loads at (coords[2g], coords[2g+1]) and writes its lanes' arrays
    to out[(g*S + lane)*n + j]."""
    fn = {"load": intel.block_load, "load_transform": intel.block_load_transform,
          "load_transpose": intel.block_load_transpose}[mode]
    n = intel.block_length(width=W, height=H, count=C, elem_size=E, transform=mode == "load_transform",
                           transpose=mode == "load_transpose", subgroup_size=S)
    T = u32 if mode == "load_transform" else UINT[E]

    @pc.kernel(workgroup_size=S * subgroups, subgroup_size=S, strict_intel_shapes=False)
    def k(mem: pc.Buffer[u8], coords: pc.Buffer[i32], out: pc.Buffer[T]):
        g = pc.workgroup_id.x * subgroups + pc.subgroup_id()
        a = fn(mem, width=W, height=H, count=C, elem_size=E, memory_width=mw, memory_height=mh,
               pitch=pitch, coord=(coords[2 * g], coords[2 * g + 1]))
        base = (g * S + pc.subgroup_local_id()) * n
        for j in range(n):
            out[base + j] = a[j]
    return k, n, T


def run_load(mode, E, W, H, C, S, mem, mw, mh, pitch, coords, subgroups=1):
    k, n, T = load_kernel(mode, E, W, H, C, S, mw, mh, pitch, subgroups)
    groups = len(coords)
    out = np.zeros(groups * S * n, T.dtype)
    k[groups // subgroups](mem, np.asarray(coords, np.int32).reshape(-1), out)
    return k, out.reshape(groups, S, n).tolist()


# --- the six worked examples of "Mapping Block Data to Invocations" (subgroup size 4) -------

def example(mode, E, W, H):
    _, out = run_load(mode, E, W, H, 1, 4, tagged_memory(E), 64, 4, PITCH, [(0, 0)])
    return out[0]


def test_example1_width_equals_subgroup():
    assert example("load", 1, 4, 2) == [rc((0, i), (1, i)) for i in range(4)]


def test_example2_width_less_than_subgroup():
    assert example("load", 2, 2, 4) == [rc((0, 0), (2, 0)), rc((0, 1), (2, 1)), rc((1, 0), (3, 0)),
                                        rc((1, 1), (3, 1))]


def test_example3_width_greater_than_subgroup():
    assert example("load", 1, 8, 2) == [rc((0, 2 * i), (0, 2 * i + 1), (1, 2 * i), (1, 2 * i + 1))
                                        for i in range(4)]


def test_example4_transpose():
    assert example("load_transpose", 4, 2, 4) == [rc((i, 0), (i, 1)) for i in range(4)]


def test_example5_transform_2byte():
    assert example("load_transform", 2, 4, 2) == [[(16 + i) << 16 | i] for i in range(4)]


def test_example6_transform_1byte():
    assert example("load_transform", 1, 4, 4) == [[(48 + i) << 24 | (32 + i) << 16 | (16 + i) << 8 | i]
                                                  for i in range(4)]


def test_examples_compile_to_valid_opencl_modules():
    for mode, E, W, H in [("load", 1, 4, 2), ("load", 2, 2, 4), ("load", 1, 8, 2),
                          ("load_transpose", 4, 2, 4), ("load_transform", 2, 4, 2),
                          ("load_transform", 1, 4, 4)]:
        k, _, _ = load_kernel(mode, E, W, H, 1, 4, 64, 4, PITCH)
        check_spv(k.compile())


# --- property tests against the independent reference -------------------------------------

@st.composite
def kernel_cases(draw, mode: str):
    E = draw(st.sampled_from({"load_transform": [1, 2]}.get(mode, [1, 2, 4, 8])))
    S = draw(st.sampled_from([8, 16, 32]))
    step = {1: 4, 2: 2}.get(E, 1)
    W = step * draw(st.integers(1, 48 // step))
    H = draw(st.integers(1, 24))
    C = draw(st.integers(1, 4 if W * H <= 128 else 2))
    mw = 8 * draw(st.integers(8, 20))                  # 64..160 bytes: defined behaviour only
    mh = draw(st.integers(1, 40))
    pitch = mw + 8 * draw(st.integers(0, 3))
    xs = [step * draw(st.integers((-W - 3) // step, (mw // E + 3) // step)) for _ in range(2)]
    ys = [draw(st.integers(-H - 3, mh + 3)) for _ in range(2)]
    seed = draw(st.integers(0, 2**32 - 1))
    mem = np.random.default_rng(seed).integers(0, 256, size=mh * pitch + 8, dtype=np.uint8)
    return E, W, H, C, S, mw, mh, pitch, list(zip(xs, ys)), mem, seed


def check_kernel_load(case, mode):
    E, W, H, C, S, mw, mh, pitch, coords, mem, _ = case
    k, got = run_load(mode, E, W, H, C, S, mem, mw, mh, pitch, coords, subgroups=2)
    check_spv(k.compile())
    for g, (x, y) in enumerate(coords):
        assert got[g] == ref_load(mem, 0, E, W, H, C, mw, mh, pitch, x, y, S,
                                  transform=mode == "load_transform", transpose=mode == "load_transpose")


@settings(max_examples=30, deadline=None)
@given(kernel_cases("load"))
def test_kernel_load_matches_reference(case):
    check_kernel_load(case, "load")


@settings(max_examples=25, deadline=None)
@given(kernel_cases("load_transform"))
def test_kernel_load_transform_matches_reference(case):
    check_kernel_load(case, "load_transform")


@settings(max_examples=25, deadline=None)
@given(kernel_cases("load_transpose"))
def test_kernel_load_transpose_matches_reference(case):
    check_kernel_load(case, "load_transpose")


def store_kernel(E, W, H, C, S, mw, mh, pitch, x, y):
    n = intel.block_length(width=W, height=H, count=C, elem_size=E, subgroup_size=S)
    T = UINT[E]

    @pc.kernel(workgroup_size=S, subgroup_size=S, strict_intel_shapes=False)
    def k(mem: pc.Buffer[u8], vals: pc.Buffer[T]):
        base = pc.subgroup_local_id() * n
        arr = pc.make_array([vals[base + j] for j in range(n)])
        intel.block_prefetch(mem, width=W, height=H, count=C, elem_size=E, memory_width=mw,
                             memory_height=mh, pitch=pitch, coord=(x, y))
        intel.block_store(mem, arr, width=W, height=H, count=C, elem_size=E, memory_width=mw,
                          memory_height=mh, pitch=pitch, coord=(x, y))
    return k, n, T


@settings(max_examples=30, deadline=None)
@given(kernel_cases("store"))
def test_kernel_store_matches_reference(case):
    E, W, H, C, S, mw, mh, pitch, coords, mem, seed = case
    x, y = coords[0]
    k, n, T = store_kernel(E, W, H, C, S, mw, mh, pitch, x, y)
    values = np.random.default_rng(seed).integers(0, 2 ** (8 * E), size=(S, n), dtype=np.uint64).astype(T.dtype)
    got, want = mem.copy(), mem.copy()
    k[1](got, values.reshape(-1))
    ref_store(want, 0, E, W, H, C, mw, mh, pitch, x, y, S, values.tolist())
    assert np.array_equal(got, want)
    check_spv(k.compile())


def test_property_kernels_validate():
    """One kernel of each mode/subgroup size also lowers to a valid OpenCL module."""
    for S in (8, 16, 32):
        for mode in ("load", "load_transform", "load_transpose"):
            k, _, _ = load_kernel(mode, 2, 16, 4, 2, S, 128, 8, 128, subgroups=2)
            check_spv(k.compile())
        check_spv(store_kernel(1, 12, 3, 2, S, 64, 8, 64, 4, -1)[0].compile())


# --- a kernel with every op, the OpenCL module, defaults, ABI ------------------------------

@pc.kernel(workgroup_size=32)
def all_ops(src: pc.ReadBuffer[u16], src32: pc.ReadBuffer[u32], dst: pc.WriteBuffer[u16], w: i32, h: i32):
    c = pc.make_vector([i32(0), i32(pc.workgroup_id.x) * 8])
    intel.block_prefetch(src, width=16, height=8, memory_width=w * 2, memory_height=h, pitch=w * 2, coord=c)
    a = intel.block_load(src, width=16, height=8, memory_width=w * 2, memory_height=h, pitch=w * 2, coord=c)
    t = intel.block_load_transform(src, width=16, height=16, memory_width=w * 2, memory_height=h,
                                   pitch=w * 2, coord=c)
    tr = intel.block_load_transpose(src32, width=8, height=16, memory_width=w * 2, memory_height=h,
                                    pitch=w * 2, coord=c)
    b = pc.make_array([a[i] + u16(t[i] & 1) + u16(tr[i] & 1) for i in range(8)])
    intel.block_store(dst, b, width=16, height=8, memory_width=w * 2, memory_height=h, pitch=w * 2, coord=c)


def test_all_ops_module_is_opencl_and_valid():
    ck = all_ops.compile()
    check_spv(ck)
    asm = ck.spvasm
    for opname in ("OpSubgroup2DBlockLoadINTEL", "OpSubgroup2DBlockLoadTransformINTEL",
                   "OpSubgroup2DBlockLoadTransposeINTEL", "OpSubgroup2DBlockPrefetchINTEL",
                   "OpSubgroup2DBlockStoreINTEL", "OpCapability Subgroup2DBlockTransformINTEL",
                   "OpCapability Subgroup2DBlockTransposeINTEL", "OpTypePointer CrossWorkgroup",
                   "OpExecutionMode %all_ops LocalSize 32 1 1", "Function"):
        assert opname in asm, opname
    assert "OpVariable %_ptr_Function__arr_" in asm          # Dst/Src are Function arrays
    assert "Shader" not in asm and "GLCompute" not in asm and "PushConstant" not in asm


def test_all_ops_run_on_emulator():
    h, w = 16, 64
    src = np.arange(h * w, dtype=np.uint16)
    src32 = np.arange(h * w // 2, dtype=np.uint32)
    dst = np.zeros(h * w, np.uint16)
    all_ops[2](src, src32, dst, w, h)
    d, s = dst.reshape(h, w), src.reshape(h, w)
    s32 = src32.reshape(h, w // 2)

    def at(m, r, c):                      # out-of-bounds elements read 0
        return int(m[r, c]) if r < m.shape[0] else 0

    # a[r] = s[y+r, lane]; t[r] packs rows y+2r, y+2r+1 of column lane; tr[r] = s32[y+lane, r]
    for g in range(2):
        y = 8 * g
        for r in range(8):
            for lane in range(16):
                t = at(s, y + 2 * r, lane) | at(s, y + 2 * r + 1, lane) << 16
                tr = at(s32, y + lane, r)
                assert d[y + r, lane] == (s[y + r, lane] + (t & 1) + (tr & 1)) & 0xFFFF
    assert not d[:, 16:].any()


def test_vulkan_kernels_are_unchanged():
    @pc.kernel(workgroup_size=16)
    def plain(x: pc.Buffer[f32]):
        x[pc.global_invocation_id.x] = f32(1.0)
    ck = plain.compile()
    assert ck.target == "vulkan" and "GLCompute" in ck.spvasm and ck.metadata()["entry_point"] == "main"


def test_intel_kernels_default_to_subgroup_16(monkeypatch):
    monkeypatch.setenv("PYCOOP_SUBGROUP_SIZE", "32")

    @pc.kernel(workgroup_size=16)
    def k(src: pc.Buffer[u16]):
        intel.block_prefetch(src, width=16, height=8, memory_width=64, memory_height=8, pitch=64, coord=(0, 0))
    assert k.compile().module.subgroup_size == 16
    assert k.compile(subgroup_size=16).module.subgroup_size == 16


def test_opencl_abi_and_sidecar(tmp_path):
    ck = all_ops.compile()
    meta = json.loads(Path(ck.save(tmp_path / "k.spv")).with_suffix(".spv.json").read_text())
    assert meta["target"] == "opencl" and meta["entry_point"] == "all_ops"
    assert meta["execution_model"] == "Kernel" and meta["spirv_version"] == "1.2"
    assert meta["abi"]["required_subgroup_size"] == 16
    args = meta["abi"]["args"]
    assert [a["name"] for a in args] == ["src", "src32", "dst", "w", "h"]
    assert [a["index"] for a in args] == [0, 1, 2, 3, 4]
    assert args[0] == {"name": "src", "index": 0, "kind": "buffer", "address_space": "global",
                       "storage_class": "CrossWorkgroup", "size": 8, "dtype": "uint16", "access": "read"}
    assert args[3] == {"name": "w", "index": 3, "kind": "scalar", "size": 4, "dtype": "int32"}
    assert "SPV_INTEL_2d_block_io" in meta["extensions"]
    assert (tmp_path / "k.spv").read_bytes() == ck.spv


def test_vulkan_backend_refuses_opencl_kernels():
    src = np.zeros(256, np.uint16)
    with pytest.raises(pc.BackendUnavailable, match="OpenCL"):
        all_ops[1](src, np.zeros(128, np.uint32), src.copy(), 16, 16, backend="vulkan")


def test_cli_compiles_the_example(tmp_path):
    out = tmp_path / "x.spv"
    r = subprocess.run([sys.executable, "-m", "pycoop.cli", "compile",
                        str(ROOT / "examples" / "intel_block_gemm.py") + ":intel_gemm", "-o", str(out)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "x.spv.json").read_text())
    assert meta["target"] == "opencl" and meta["abi"]["args"][2]["storage_class"] == "CrossWorkgroup"
    validate(out.read_bytes(), "opencl2.2")


# --- trace-time checks: message and line ---------------------------------------------------

def marked_line(k) -> int:
    lines, start = inspect.getsourcelines(k.fn)
    return start + next(i for i, s in enumerate(lines) if "# <-" in s)


def compile_error(k, match: str, **kw) -> CompileError:
    with pytest.raises(CompileError, match=match) as info:
        k.compile(**kw)
    assert info.value.line == marked_line(k), str(info.value)
    return info.value


GEOM = dict(memory_width=128, memory_height=16, pitch=128, coord=(0, 0))


def test_element_size():
    @pc.kernel(workgroup_size=16)
    def k(src: pc.Buffer[u8]):
        intel.block_load(src, width=16, height=8, elem_size=3, **GEOM)  # <-
    compile_error(k, "Element Size must be 1, 2, 4 or 8 bytes, got 3")


@pytest.mark.parametrize("E, W", [(1, 6), (1, 18), (2, 5)])
def test_block_width_multiple(E, W):
    @pc.kernel(workgroup_size=16, strict_intel_shapes=False)
    def k(src: pc.Buffer[u8]):
        intel.block_prefetch(src, width=W, height=8, elem_size=E, **GEOM)  # <-
    compile_error(k, f"Block Width must be a multiple of {4 if E == 1 else 2} for {E}-byte elements")


def test_block_operands_are_compile_time():
    @pc.kernel(workgroup_size=16)
    def k(src: pc.Buffer[u16], h: i32):
        intel.block_load(src, width=16, height=h, **GEOM)  # <-
    e = compile_error(k, "block height must be a compile-time int")
    assert "constant instructions" in e.rule


def test_block_operands_are_32_bit():
    @pc.kernel(workgroup_size=16, strict_intel_shapes=False)
    def k(src: pc.Buffer[u16]):
        intel.block_load(src, width=16, height=8, count=1 << 31, **GEOM)  # <-
    compile_error(k, "Block Count must be a positive 32-bit integer constant")

    @pc.kernel(workgroup_size=16, strict_intel_shapes=False)
    def k2(src: pc.Buffer[u16]):
        intel.block_load(src, width=1 << 40, height=8, **GEOM)  # <-
    compile_error(k2, "does not fit in a 32-bit integer")

    @pc.kernel(workgroup_size=16, strict_intel_shapes=False)
    def k3(src: pc.Buffer[u16]):
        intel.block_load(src, width=16, height=0, **GEOM)  # <-
    compile_error(k3, "Block Height must be a positive")


def test_base_pointer_storage_class():
    @pc.kernel(workgroup_size=16)
    def k(src: pc.Buffer[u16]):
        sh = pc.shared(u16, 256)
        intel.block_load(sh, width=16, height=8, **GEOM)  # <-
    e = compile_error(k, "base pointer must be a kernel buffer parameter, got a workgroup-shared array")
    assert "CrossWorkgroup" in e.rule

    @pc.kernel(workgroup_size=16)
    def k2(n: u32):
        intel.block_prefetch(n, width=16, height=8, **GEOM)  # <-
    compile_error(k2, "got a value of type u32")


@pytest.mark.parametrize("coord, match", [
    ("scalar", "2-vector of integers .* got i32"),
    ("float", "2-vector of integers .* got vec2<f32>"),
    ("three", "2-vector of integers .* got vec3<i32>"),
    ("wide", "32-bit integer components, got vec2<i64>"),
    ("tuple_float", "2-vector of integers, got \\(1.5, 0\\)"),
])
def test_coordinate(coord, match):
    @pc.kernel(workgroup_size=16)
    def k(src: pc.Buffer[u16], x: i32):
        c = {"scalar": x, "float": pc.make_vector([f32(1.0), f32(2.0)]),
             "three": pc.make_vector([x, x, x]), "wide": pc.make_vector([i64(0), i64(0)]),
             "tuple_float": (1.5, 0)}[coord]
        intel.block_load(src, width=16, height=8, memory_width=128, memory_height=8, pitch=128, coord=c)  # <-
    compile_error(k, match)


def test_memory_operands_are_32_bit_integers():
    @pc.kernel(workgroup_size=16)
    def k(src: pc.Buffer[u16], w: f32):
        intel.block_load(src, width=16, height=8, memory_width=w, memory_height=8, pitch=128, coord=(0, 0))  # <-
    compile_error(k, "memory width \\(bytes\\) must be an integer scalar, got f32")

    @pc.kernel(workgroup_size=16)
    def k2(src: pc.Buffer[u16], p: i64):
        intel.block_load(src, width=16, height=8, memory_width=128, memory_height=8, pitch=p, coord=(0, 0))  # <-
    compile_error(k2, "memory pitch \\(bytes\\) must be a 32-bit integer, got i64")


def test_transform_destination_is_32_bit_int():
    @pc.kernel(workgroup_size=16)
    def k(src: pc.Buffer[u16]):
        intel.block_load_transform(src, width=16, height=16, dtype=f32, **GEOM)  # <-
    e = compile_error(k, "destination element type f32 is not one")
    assert "scalar 32-bit integer" in e.rule

    @pc.kernel(workgroup_size=16, strict_intel_shapes=False)
    def k2(src: pc.Buffer[u32]):
        intel.block_load_transform(src, width=8, height=16, **GEOM)  # <-
    compile_error(k2, "Element Size 4 is not defined")

    @pc.kernel(workgroup_size=16)
    def ok(src: pc.Buffer[u16], out: pc.Buffer[i32]):
        t = intel.block_load_transform(src, width=16, height=16, dtype=i32, **GEOM)
        out[pc.subgroup_local_id()] = t[0]
    check_spv(ok.compile())


def test_load_destination_size():
    @pc.kernel(workgroup_size=16)
    def k(src: pc.Buffer[u16]):
        intel.block_load(src, width=16, height=8, dtype=f32, **GEOM)  # <-
    compile_error(k, "destination element type f32 is 4 bytes, the block elements are 2")


def test_buffer_access():
    @pc.kernel(workgroup_size=16)
    def k(src: pc.ReadBuffer[u16]):
        a = intel.block_load(src, width=16, height=8, **GEOM)
        intel.block_store(src, a, width=16, height=8, **GEOM)  # <-
    compile_error(k, "cannot block_store into a read-only buffer")

    @pc.kernel(workgroup_size=16)
    def k2(dst: pc.WriteBuffer[u16]):
        intel.block_load(dst, width=16, height=8, **GEOM)  # <-
    compile_error(k2, "cannot read from a write-only buffer")


def test_store_value_checks():
    @pc.kernel(workgroup_size=16)
    def k(dst: pc.Buffer[u16]):
        v = pc.make_array([u32(0)] * 8)
        intel.block_store(dst, v, width=16, height=8, **GEOM)  # <-
    compile_error(k, "block_store of 2-byte elements from an array of u32")

    @pc.kernel(workgroup_size=16)
    def k2(dst: pc.Buffer[u16]):
        v = pc.make_array([u16(0)] * 4)
        intel.block_store(dst, v, width=16, height=8, **GEOM)  # <-
    compile_error(k2, "needs 8 elements per invocation, the array has 4")

    @pc.kernel(workgroup_size=16)
    def k3(dst: pc.Buffer[u16]):
        intel.block_store(dst, u16(1), width=16, height=8, **GEOM)  # <-
    compile_error(k3, "stores a per-invocation array of numbers, got u16")


def test_strict_intel_shapes_names_the_row_that_fits():
    @pc.kernel(workgroup_size=16)
    def k(src: pc.Buffer[u16]):
        intel.block_load(src, width=16, height=64, **GEOM)  # <-
    e = compile_error(k, "block_load of 2-byte elements, 16 wide x 64 high x 1 block\\(s\\) is not in "
                         "Intel's supported-shape table")
    assert "nearest supported row: block_load: element size 2, width 16, height 1/2/4/8/16/32, count 1/2" in e.hint
    assert "strict_intel_shapes=False" in e.hint

    @pc.kernel(workgroup_size=16)
    def k2(dst: pc.Buffer[u16]):
        intel.block_store(dst, pc.make_array([u16(0)] * 16), width=16, height=16, **GEOM)  # <-
    e = compile_error(k2, "block_store of 2-byte elements, 16 wide x 16 high")
    assert "height 1/2/4/8, count 1" in e.hint

    @pc.kernel(workgroup_size=16, strict_intel_shapes=False)
    def relaxed(src: pc.Buffer[u16]):
        intel.block_load(src, width=16, height=64, **GEOM)
        intel.block_load(src, width=16, height=64, strict=True, **GEOM)  # <-
    compile_error(relaxed, "not in Intel's supported-shape table")


def test_strict_shapes_need_subgroup_16():
    @pc.kernel(workgroup_size=32, subgroup_size=32)
    def k(src: pc.Buffer[u16]):
        intel.block_load(src, width=16, height=8, **GEOM)  # <-
    compile_error(k, "subgroup size 16, this kernel is compiled for subgroup size 32")


# --- emulator: undefined behaviour with the kernel line ------------------------------------

def emu_error(k, args, grid=1, match=None) -> EmulatorError:
    with pytest.raises(EmulatorError, match=match) as info:
        k[grid](*args)
    assert info.value.loc.line == marked_line(k), str(info.value)
    return info.value


def geometry_kernel():
    @pc.kernel(workgroup_size=16)
    def k(src: pc.Buffer[u16], w: i32, h: i32, p: i32, x: i32, y: i32):
        intel.block_load(src, width=16, height=8, memory_width=w, memory_height=h, pitch=p, coord=(x, y))  # <-
    return k


@pytest.mark.parametrize("w, h, p, x, rule", [
    (128, 8, 128, 1, "coordinate-x-alignment"),
    (32, 8, 32, 0, "memory-width"),
    ((1 << 24) + 8, 1, (1 << 24) + 8, 0, "memory-width"),
    (128, 0, 128, 0, "memory-height"),
    (128, 8, 132, 0, "memory-pitch"),
    (128, 8, 120, 0, "memory-pitch"),
])
def test_undefined_operands(w, h, p, x, rule):
    e = emu_error(geometry_kernel(), [np.zeros(2048, np.uint16), w, h, p, x, 0])
    assert f"({rule})" in e.rule and "undefined behaviour in workgroup (0, 0, 0), subgroup 0" in e.message


def test_block_inside_memory_but_past_the_buffer():
    emu_error(geometry_kernel(), [np.zeros(64, np.uint16), 128, 8, 128, 0, 0],
              match="past the end of buffer 'src'")


def test_part_of_a_subgroup():
    @pc.kernel(workgroup_size=16)
    def k(src: pc.Buffer[u16]):
        if pc.subgroup_local_id() < 8:
            intel.block_prefetch(src, width=16, height=8, **GEOM)  # <-
    e = emu_error(k, [np.zeros(1024, np.uint16)], match="only part of subgroup 0")
    assert "same dynamic instance" in e.rule


def test_operands_must_be_subgroup_uniform():
    @pc.kernel(workgroup_size=16)
    def k(src: pc.Buffer[u16]):
        y = i32(pc.subgroup_local_id())
        intel.block_load(src, width=16, height=8, memory_width=128, memory_height=8, pitch=128, coord=(0, y))  # <-
    emu_error(k, [np.zeros(1024, np.uint16)], match="coordinate y of intel.block_load differs")


def test_partial_subgroups():
    @pc.kernel(workgroup_size=24)
    def k(src: pc.Buffer[u16]):
        intel.block_prefetch(src, width=16, height=8, **GEOM)  # <-
    emu_error(k, [np.zeros(1024, np.uint16)], match="not a multiple of the subgroup size 16")


def test_divergent_but_uniform_subgroups_are_fine():
    @pc.kernel(workgroup_size=32)
    def k(src: pc.Buffer[u16], dst: pc.Buffer[u16]):
        if pc.subgroup_id() == 1:
            a = intel.block_load(src, width=16, height=8, memory_width=128, memory_height=16, pitch=128,
                                 coord=(0, 8))
            intel.block_store(dst, a, width=16, height=8, memory_width=128, memory_height=16, pitch=128,
                              coord=(16, 0))
    src = np.arange(16 * 64, dtype=np.uint16)
    dst = np.zeros_like(src)
    k[1](src, dst)
    assert np.array_equal(dst.reshape(16, 64)[:8, 16:32], src.reshape(16, 64)[8:16, :16])
    assert dst.sum() == src.reshape(16, 64)[8:16, :16].sum()
    check_spv(k.compile())


def test_unroll_counts_need_spirv_1_4_which_opencl_modules_are_not():
    @pc.kernel(workgroup_size=16)
    def k(A: pc.ReadBuffer[f16], Y: pc.Buffer[f32], unroll: pc.Const = 4):
        s = f32(0.0)
        for i in pc.range(4, unroll=unroll):
            a = intel.block_load(A, width=16, height=8, memory_width=64, memory_height=8,
                                 pitch=64, coord=(0, 0))
            s = s + f32(a[0])
        Y[pc.local_invocation_index()] = s

    with pytest.raises(CompileError, match=r"unroll=4\) needs SPIR-V 1.4") as e:
        k.compile().spv                 # the target is known once the module is lowered
    src, start = inspect.getsourcelines(k.fn)
    assert e.value.line == start + next(i for i, ln in enumerate(src) if "pc.range(" in ln)
    assert e.value.rule_id == "control.partial-count-version"
    for unroll in (True, False, None):
        check_spv(k.compile(unroll=unroll))


@pytest.mark.parametrize("kw,message", [
    (dict(width="16", height=8), "width must be an int, got '16'"),
    (dict(width=16, height=8, count=-1), r"\[block-operand\] Block Count must be a positive"),
    (dict(width=3, height=8), r"\[block-width-multiple\] Block Width must be a multiple of 2"),
    (dict(width=16, height=0), r"\[block-operand\] Block Height"),
    (dict(width=16, height=8, subgroup_size=12), "subgroup_size must be a power of two"),
    (dict(width=16, height=8, elem_size=4, transform=True), r"\[transform-element-size\]"),
    (dict(width=16, height=8, transform=True, transpose=True), "transformed or transposed"),
])
def test_block_length_refuses_shapes_the_extension_leaves_undefined(kw, message):
    """The plain-Python helper names the rule (it returned lengths for width 3 or height 0,
    and raised NumPy's or Python's own errors for a string or a negative count)."""
    with pytest.raises(ValueError, match="block_length: .*" + message):
        intel.block_length(**kw)
