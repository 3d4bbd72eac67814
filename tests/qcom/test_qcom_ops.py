"""pycoop.qcom (SPV_QCOM_cooperative_matrix_conversion) through real kernels: round trips on the
emulator for subgroup sizes 8..64, packed forms against explicit bit manipulation, every spec
rule as a CompileError at the user's line, poisoned (OpUndef) lanes, run-time range checks,
capabilities and Vulkan requirements. Every compiled module is run through spirv-val."""
from __future__ import annotations

import inspect
import zlib

import numpy as np
import pytest

import pycoop as pc
from pycoop import CompileError, EmulatorError, bf16, f16, f32, i8, i16, i32, u8, u32
from pycoop.codegen.vulkan import lower
from pycoop.spirv.tools import validate

SG = pc.Subgroup
AB_COLS = {f32: 8, f16: 16, i8: 32, u8: 32}         # 256-bit rows (A) / columns (B)


def spv_ok(ck) -> None:
    """spirv-val on a fresh lowering (not the disk cache)."""
    validate(lower(ck.module).spv, "vulkan1.3")


def emu(k, grid, *args, **kw):
    return k[grid](*args, backend="emulator", **kw)


def line_of(k, marker: str) -> int:
    lines, start = inspect.getsourcelines(k.fn)
    for i, ln in enumerate(lines):
        if marker in ln:
            return start + i
    raise AssertionError(marker)


def random_bits(rng, dtype, shape):
    """Arbitrary finite values of `dtype` (bit patterns; float NaN/inf patterns replaced)."""
    dtype = np.dtype(dtype)
    raw = rng.integers(0, 256, size=tuple(shape) + (dtype.itemsize,), dtype=np.uint8).view(dtype)[..., 0]
    if dtype.kind == "f":
        raw = np.where(np.isfinite(raw), raw, dtype.type(1.5))
    return np.ascontiguousarray(raw)


def bits(a):
    return np.asarray(a).view(f"u{np.asarray(a).dtype.itemsize}")


def unpack_words(words: np.ndarray, comp) -> np.ndarray:
    """Little-endian unpacking of u32 words into `comp` elements, with shifts and masks."""
    w = np.dtype(comp).itemsize * 8
    per = 32 // w
    words = words.astype(np.uint64)
    parts = [(words >> np.uint64(w * k)) & np.uint64((1 << w) - 1) for k in range(per)]
    raw = np.stack(parts, axis=-1).reshape(words.shape[:-1] + (words.shape[-1] * per,))
    return raw.astype(f"u{w // 8}").view(comp)


# --------------------------------------------------------------------------- round trips

_KERNELS: dict = {}


def roundtrip_kernel(S, use, comp, rows, cols, elem):
    """Per lane: load an array of `elem`, construct the matrix, store it (row major), extract
    it again in the same form and store the lanes that hold data."""
    key = (S, use, comp, rows, cols, elem)
    if key in _KERNELS:
        return _KERNELS[key]
    M = pc.coopmat[comp, SG, rows, cols, use]
    lanes, n = (cols, rows) if use == pc.UseB else (rows, cols)
    if elem == comp:
        L = n
    elif use != pc.Accumulator:
        L = 8
    else:
        L = cols * comp.size // 4
    WG = 2 * S

    @pc.kernel(workgroup_size=WG, subgroup_size=S)
    def k_roundtrip(In: pc.Buffer[elem], Out: pc.Buffer[elem], Mat: pc.Buffer[comp]):
        inv = pc.workgroup_id.x * WG + pc.local_invocation_id.x
        sg = pc.workgroup_id.x * 2 + pc.subgroup_id()
        arr = pc.make_array([In[inv * L + j] for j in range(L)])
        m = pc.qcom.construct(arr, M)
        pc.store(Mat, sg * (rows * cols), m, cols)
        back = pc.qcom.extract(m, elem)
        if pc.subgroup_local_id() < lanes:
            for j in range(L):
                Out[inv * L + j] = back[j]

    _KERNELS[key] = (k_roundtrip, lanes, L)
    return _KERNELS[key]


def _cases():
    out = []
    for S in (8, 16, 32, 64):
        free = [s for s in (8, 16, 32) if s <= S]
        for comp, fixed in AB_COLS.items():
            for r in free:
                out.append((S, pc.UseA, comp, r, fixed, comp))
                out.append((S, pc.UseB, comp, fixed, r, comp))
            out.append((S, pc.UseA, comp, free[-1], fixed, u32))
            out.append((S, pc.UseB, comp, fixed, free[0], u32))
        for comp in (i32, u32, f16, f32):
            out.append((S, pc.Accumulator, comp, free[0], free[-1], comp))
            out.append((S, pc.Accumulator, comp, free[-1], free[0], comp))
            if comp in (f16, f32):
                out.append((S, pc.Accumulator, comp, free[-1], free[-1], u32))
    return out


CASES = _cases()


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"S{c[0]}-{c[1].short}-{c[2]}-{c[3]}x{c[4]}-{c[5]}")
def test_construct_then_extract_round_trip(case):
    S, use, comp, rows, cols, elem = case
    k, lanes, L = roundtrip_kernel(*case)
    rng = np.random.default_rng(zlib.crc32(repr(case).encode()))   # not hash(): salted per process
    n_inv = 4 * S                                  # 2 workgroups x 2 subgroups
    inp = random_bits(rng, elem.dtype, (n_inv, L))
    out = np.zeros_like(inp)
    mat = np.zeros((4, rows, cols), comp.dtype)
    emu(k, 2, inp.ravel(), out.reshape(-1), mat.reshape(-1))
    # lane i of each subgroup is row i (A, accumulator) or column i (B): explicit NumPy
    per_sg = inp.reshape(4, S, L)[:, :lanes]
    vals = unpack_words(per_sg, comp.dtype) if elem == u32 and comp != u32 else per_sg
    expect = np.swapaxes(vals, -1, -2) if use == pc.UseB else vals
    assert np.array_equal(bits(mat), bits(expect))
    got = out.reshape(4, S, L)
    assert np.array_equal(bits(got[:, :lanes]), bits(per_sg))      # extract . construct = id
    assert not got[:, lanes:].any()                                 # past the matrix: not stored
    spv_ok(k.compile())


def test_int_accumulator_from_u32():
    """Construct (only) accepts u32[cols] for a 32-bit int accumulator."""
    M = pc.coopmat[i32, SG, 16, 16, pc.Accumulator]

    @pc.kernel(workgroup_size=32, subgroup_size=32)
    def k_acc_u32(In: pc.Buffer[u32], Mat: pc.Buffer[i32]):
        lane = pc.local_invocation_id.x
        m = pc.qcom.construct(pc.make_array([In[lane * 16 + j] for j in range(16)]), M)
        pc.store(Mat, 0, m, 16)

    words = np.random.default_rng(3).integers(0, 2**32, (32, 16), dtype=np.uint64).astype(np.uint32)
    mat = np.zeros((16, 16), np.int32)
    emu(k_acc_u32, 1, words.ravel(), mat.reshape(-1))
    assert np.array_equal(mat.view(np.uint32), words[:16])
    spv_ok(k_acc_u32.compile())


def test_extract_packed_matches_bit_manipulation():
    """extract(mat, u32) packs element j of a row into bits [j*w, (j+1)*w) of word j*w // 32."""
    MA = pc.coopmat[i8, SG, 16, 32, pc.UseA]
    MC = pc.coopmat[f16, SG, 16, 16, pc.Accumulator]

    @pc.kernel(workgroup_size=16, subgroup_size=16)
    def k_pack(A: pc.Buffer[i8], C: pc.Buffer[f16], PA: pc.Buffer[u32], PC: pc.Buffer[u32]):
        lane = pc.local_invocation_id.x
        wa = pc.qcom.extract(MA.load(A, 0, 32), u32)
        wc = pc.qcom.extract(MC.load(C, 0, 16), u32)
        for j in range(8):
            PA[lane * 8 + j] = wa[j]
            PC[lane * 8 + j] = wc[j]

    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (16, 32)).astype(np.int8)
    c = rng.standard_normal((16, 16)).astype(np.float16)
    pa, pcw = np.zeros((16, 8), np.uint32), np.zeros((16, 8), np.uint32)
    emu(k_pack, 1, a.ravel(), c.ravel(), pa.reshape(-1), pcw.reshape(-1))
    ua = a.view(np.uint8).astype(np.uint32)
    want_a = ua[:, 0::4] | ua[:, 1::4] << 8 | ua[:, 2::4] << 16 | ua[:, 3::4] << 24
    uc = c.view(np.uint16).astype(np.uint32)
    want_c = uc[:, 0::2] | uc[:, 1::2] << 16
    assert np.array_equal(pa, want_a) and np.array_equal(pcw, want_c)
    spv_ok(k_pack.compile())


BITCASTS = [(u32, 8, f16), (f16, 16, u32), (f32, 4, i32), (i32, 6, f16), (f16, 6, f32), (u32, 3, f32)]


@pytest.mark.parametrize("src,n,dst", BITCASTS, ids=lambda x: str(x))
def test_bitcast_both_ways(src, n, dst):
    m = n * src.size // dst.size

    @pc.kernel(workgroup_size=8, subgroup_size=8)
    def k_bitcast(In: pc.Buffer[src], Out: pc.Buffer[dst], Back: pc.Buffer[src]):
        lane = pc.local_invocation_id.x
        arr = pc.make_array([In[lane * n + j] for j in range(n)])
        there = pc.qcom.bitcast_array(arr, dst)
        back = pc.qcom.bitcast_array(there, pc.array(src, n))
        for j in range(m):
            Out[lane * m + j] = there[j]
        for j in range(n):
            Back[lane * n + j] = back[j]

    inp = random_bits(np.random.default_rng(n), src.dtype, (8, n))
    out, back = np.zeros((8, m), dst.dtype), np.zeros_like(inp)
    emu(k_bitcast, 1, inp.ravel(), out.reshape(-1), back.reshape(-1))
    assert np.array_equal(bits(out), bits(inp.view(dst.dtype)))         # NumPy reinterpretation
    assert np.array_equal(bits(back), bits(inp))
    spv_ok(k_bitcast.compile())


def test_extract_subarray_runtime_and_constant_start():
    @pc.kernel(workgroup_size=16, subgroup_size=16)
    def k_sub(In: pc.Buffer[f32], Out: pc.Buffer[f32], Out2: pc.Buffer[f32]):
        lane = pc.local_invocation_id.x
        arr = pc.make_array([In[lane * 16 + j] for j in range(16)])
        win = pc.qcom.extract_subarray(arr, lane % 13, 4)          # runtime u32 start
        hi = pc.qcom.extract_subarray(arr, 8, 8)                   # constant start
        for j in range(4):
            Out[lane * 4 + j] = win[j]
        for j in range(8):
            Out2[lane * 8 + j] = hi[j]

    inp = np.arange(256, dtype=np.float32).reshape(16, 16)
    out, out2 = np.zeros((16, 4), np.float32), np.zeros((16, 8), np.float32)
    emu(k_sub, 1, inp.ravel(), out.reshape(-1), out2.reshape(-1))
    for lane in range(16):
        s = lane % 13
        assert np.array_equal(out[lane], inp[lane, s:s + 4])
    assert np.array_equal(out2, inp[:, 8:])
    ck = k_sub.compile()
    spv_ok(ck)
    assert "OpExtractSubArrayQCOM" in ck.spvasm


def test_reference_module_shape():
    """The reference module's pipeline: u32[8] -> A, bitcast u32[8] -> f16[16] -> B, f32[16]
    -> accumulator, mul_add, extract, upper half."""
    A = pc.coopmat[f16, SG, 16, 16, pc.UseA]
    B = pc.coopmat[f16, SG, 16, 16, pc.UseB]
    C = pc.coopmat[f32, SG, 16, 16, pc.Accumulator]

    @pc.kernel(workgroup_size=16, subgroup_size=16)
    def k_ref(IA: pc.Buffer[u32], IB: pc.Buffer[u32], IC: pc.Buffer[f32], O: pc.Buffer[f32]):
        lane = pc.local_invocation_id.x
        a = pc.qcom.construct(pc.make_array([IA[lane * 8 + j] for j in range(8)]), A)
        b = pc.qcom.construct(pc.qcom.bitcast_array(pc.make_array([IB[lane * 8 + j] for j in range(8)]), f16), B)
        c = pc.qcom.construct(pc.make_array([IC[lane * 16 + j] for j in range(16)]), C)
        hi = pc.qcom.extract_subarray(pc.qcom.extract(pc.mul_add(a, b, c)), 8, 8)
        for j in range(8):
            O[lane * 8 + j] = hi[j]

    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 16)).astype(np.float16)
    c = rng.standard_normal((16, 16)).astype(np.float32)
    o = np.zeros((16, 8), np.float32)
    emu(k_ref, 1, a.view(np.uint32).ravel(), np.ascontiguousarray(b.T).view(np.uint32).ravel(),
        c.ravel(), o.reshape(-1))
    ref = a.astype(np.float32) @ b.astype(np.float32) + c
    assert np.allclose(o, ref[:, 8:], atol=1e-4)
    ck = k_ref.compile()
    spv_ok(ck)
    for name in ("OpCompositeConstructCoopMatQCOM", "OpBitCastArrayQCOM", "OpCompositeExtractCoopMatQCOM",
                 "OpExtractSubArrayQCOM"):
        assert name in ck.spvasm


# --------------------------------------------------------------------------- capabilities / Vulkan

def test_capability_only_when_used():
    M = pc.coopmat[f32, SG, 16, 16, pc.Accumulator]

    @pc.kernel(workgroup_size=16, subgroup_size=16)
    def k_plain(X: pc.Buffer[f32]):
        pc.store(X, 0, M.load(X, 0, 16) + M.load(X, 0, 16), 16)

    @pc.kernel(workgroup_size=16, subgroup_size=16)
    def k_bitcast_only(X: pc.Buffer[u32], Y: pc.Buffer[f32]):
        lane = pc.local_invocation_id.x
        y = pc.qcom.bitcast_array(pc.make_array([X[lane * 2], X[lane * 2 + 1]]), f32)
        Y[lane] = y[0] + y[1]

    plain = k_plain.compile()
    assert "CooperativeMatrixConversionQCOM" not in plain.requirements["capabilities"]
    assert "VK_QCOM_cooperative_matrix_conversion" not in plain.requirements["extensions"]
    assert "cooperativeMatrixConversion" not in plain.requirements["features"]
    ck = k_bitcast_only.compile()
    spv_ok(ck)
    r = ck.requirements
    assert {"CooperativeMatrixConversionQCOM", "CooperativeMatrixKHR"} <= set(r["capabilities"])
    assert "VK_QCOM_cooperative_matrix_conversion" in r["extensions"]
    assert "cooperativeMatrixConversion" in r["features"]
    assert 'OpExtension "SPV_QCOM_cooperative_matrix_conversion"' in ck.spvasm
    y = np.zeros(16, np.float32)
    x = np.arange(32, dtype=np.float32).view(np.uint32)
    emu(k_bitcast_only, 1, x, y)
    assert np.array_equal(y, np.arange(0, 32, 2) + np.arange(1, 32, 2))


def _caps(qcom: bool):
    from pycoop.runtime.vulkan.capabilities import Capabilities, CoopmatShape
    feats = {f: True for f in ("bufferDeviceAddress", "vulkanMemoryModel", "shaderFloat16",
                               "cooperativeMatrix", "storageBuffer16BitAccess")}
    feats["cooperativeMatrixConversion"] = qcom
    exts = ("VK_KHR_cooperative_matrix",) + (("VK_QCOM_cooperative_matrix_conversion",) if qcom else ())
    return Capabilities("Adreno (test)", "Qualcomm", "", "1.3", "integrated", extensions=exts,
                        features=feats, qcom_conversion=qcom, subgroup_size=64,
                        khr_coopmat_shapes=[CoopmatShape(16, 16, 16, "float16", "float16", "float32",
                                                         "float32", False, "subgroup")],
                        max_push_constants_size=128, max_compute_shared_memory_size=32768,
                        max_compute_workgroup_invocations=1024)


def test_vulkan_only_on_a_device_with_the_feature(monkeypatch, capsys):
    import importlib.util
    from pathlib import Path
    from pycoop.runtime import backend
    path = Path(__file__).parents[2] / "examples" / "qcom_rows.py"
    spec = importlib.util.spec_from_file_location("qcom_rows_example", path)
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    monkeypatch.setattr(backend, "_noticed", set())
    ck = ex.scaled_rows_gemm.compile(subgroup_size=64)
    assert "cooperativeMatrixConversion" in ck.requirements["features"]
    monkeypatch.setattr(backend, "vulkan_missing", lambda c: _caps(True).missing(c.requirements))
    assert backend.choose("auto", ck) == "vulkan"
    monkeypatch.setattr(backend, "vulkan_missing", lambda c: _caps(False).missing(c.requirements))
    with pytest.warns(pc.BackendFallbackWarning) as record:
        assert backend.choose("auto", ck) == "emulator"
    reason = record[0].message.reason
    assert "VK_QCOM_cooperative_matrix_conversion" in reason and "cooperativeMatrixConversion" in reason
    with pytest.raises(pc.BackendUnavailable, match="cooperativeMatrixConversion"):
        backend.choose("vulkan", ck)


# --------------------------------------------------------------------------- emulator reports

def test_poisoned_lane_read_is_reported():
    M = pc.coopmat[f32, SG, 8, 8, pc.Accumulator]

    @pc.kernel(workgroup_size=16, subgroup_size=16)
    def k_poison(X: pc.Buffer[f32], Y: pc.Buffer[f32]):
        lane = pc.local_invocation_id.x
        rows = pc.qcom.extract(M.load(X, 0, 8))        # lanes 8..15 get OpUndef
        Y[lane] = rows[0]  # READ

    x, y = np.ones(64, np.float32), np.zeros(16, np.float32)
    with pytest.raises(EmulatorError) as e:
        emu(k_poison, 1, x, y)
    assert e.value.loc.line == line_of(k_poison, "# READ")
    assert "invocation 8" in e.value.message and "undefined" in e.value.message
    assert "OpUndef" in e.value.message
    spv_ok(k_poison.compile())


def test_poison_follows_bitcast_and_subarray_and_construct():
    M8 = pc.coopmat[f16, SG, 8, 16, pc.UseA]
    M16 = pc.coopmat[f16, SG, 16, 16, pc.UseA]

    @pc.kernel(workgroup_size=16, subgroup_size=16)
    def k_guarded(X: pc.Buffer[f16], Y: pc.Buffer[u32]):
        lane = pc.local_invocation_id.x
        w = pc.qcom.extract_subarray(pc.qcom.bitcast_array(pc.qcom.extract(M8.load(X, 0, 16)), u32), 0, 4)
        if lane < 8:
            Y[lane] = w[3]
        m = pc.qcom.construct(pc.qcom.extract(M8.load(X, 0, 16)), M8)     # lanes >= 8 ignored
        pc.store(X, 256, m, 16)

    @pc.kernel(workgroup_size=16, subgroup_size=16)
    def k_bad_construct(X: pc.Buffer[f16]):
        rows = pc.qcom.extract(M8.load(X, 0, 16))
        m = pc.qcom.construct(rows, M16)  # BAD
        pc.store(X, 0, m, 16)

    @pc.kernel(workgroup_size=16, subgroup_size=16)
    def k_bad_sub(X: pc.Buffer[f16], Y: pc.Buffer[u32]):
        lane = pc.local_invocation_id.x
        w = pc.qcom.extract_subarray(pc.qcom.bitcast_array(pc.qcom.extract(M8.load(X, 0, 16)), u32), 0, 4)
        Y[lane] = w[1]  # BAD

    x = np.arange(512).astype(np.float16)
    y = np.zeros(16, np.uint32)
    emu(k_guarded, 1, x, y)
    assert np.array_equal(y[:8], x[:128].reshape(8, 16).view(np.uint32)[:, 3])
    assert np.array_equal(x[256:384], x[:128])
    for k in (k_bad_construct, k_bad_sub):
        with pytest.raises(EmulatorError) as e:
            emu(k, 1, np.zeros(512, np.float16), *(() if k is k_bad_construct else (y,)))
        assert e.value.loc.line == line_of(k, "# BAD")
        assert "invocation 8" in e.value.message
        spv_ok(k.compile())
    spv_ok(k_guarded.compile())


def test_start_index_out_of_range_is_reported():
    @pc.kernel(workgroup_size=8, subgroup_size=8)
    def k_range(X: pc.Buffer[f32], start: i32):
        lane = pc.local_invocation_id.x
        arr = pc.make_array([X[lane * 8 + j] for j in range(8)])
        w = pc.qcom.extract_subarray(arr, start + pc.cast(lane % 5, i32), 4)  # RANGE
        X[lane] = w[0]

    x = np.zeros(64, np.float32)
    emu(k_range, 1, x, 0)          # starts 0..4: windows within f32[8]
    with pytest.raises(EmulatorError) as e:
        emu(k_range, 1, x, 1)
    assert e.value.loc.line == line_of(k_range, "# RANGE")
    assert "Start Index" in e.value.message and "invocation 4" in e.value.message
    with pytest.raises(EmulatorError, match="start -1"):
        emu(k_range, 1, x, -1)
    spv_ok(k_range.compile())


def test_runtime_start_not_a_multiple_of_k_is_reported():
    MA = pc.coopmat[f16, SG, 8, 16, pc.UseA]

    @pc.kernel(workgroup_size=8, subgroup_size=8)
    def k_kmul(X: pc.Buffer[f16], start: u32):
        lane = pc.local_invocation_id.x
        arr = pc.make_array([X[lane * 32 + j] for j in range(32)])
        m = pc.qcom.construct(pc.qcom.extract_subarray(arr, start, 16), MA)  # KMUL
        pc.store(X, 0, m, 16)

    x = np.arange(256).astype(np.float16)
    emu(k_kmul, 1, x, 16)
    assert np.array_equal(x[:128].reshape(8, 16), np.arange(256).astype(np.float16).reshape(8, 32)[:, 16:])
    with pytest.raises(EmulatorError, match="multiple of a supported K") as e:
        emu(k_kmul, 1, x, 4)
    assert e.value.loc.line == line_of(k_kmul, "# KMUL")
    assert e.value.rule_id == "qcom.subarray-k-multiple"
    spv_ok(k_kmul.compile())


def test_non_power_of_two_subgroup_is_reported():
    from pycoop.emulator.machine import run
    M = pc.coopmat[f32, SG, 8, 8, pc.Accumulator]

    @pc.kernel(workgroup_size=48, subgroup_size=16)
    def k_npot(X: pc.Buffer[f32]):
        lane = pc.subgroup_local_id()
        m = pc.qcom.construct(pc.make_array([X[lane * 8 + j] for j in range(8)]), M)  # NPOT
        pc.store(X, 0, m, 8)

    ck = k_npot.compile()
    with pytest.raises(EmulatorError) as e:
        run(ck.module, (1, 1, 1), [np.zeros(512, np.float32)], subgroup_size=12)
    assert "power of two" in e.value.message and e.value.loc.line == line_of(k_npot, "# NPOT")
    assert e.value.rule_id == "qcom.subgroup-size"
    # no kernel is traced with such a size: compile() refuses it before the op's own check
    with pytest.raises(pc.ArgumentValueError, match="subgroup_size must be a power of two"):
        k_npot.compile(subgroup_size=24)


# --------------------------------------------------------------------------- compile-time rules

def _arr(buf, n):
    lane = pc.local_invocation_id.x
    return pc.make_array([buf[lane * n + j] for j in range(n)])


def _fail(body, *, S=16, params=None):
    """Compile a kernel whose line marked `# BAD` calls `body`; return the CompileError and
    check it points at that line."""
    params = params or {}

    @pc.kernel(workgroup_size=S, subgroup_size=S)
    def k_bad(F: pc.Buffer[f32], H: pc.Buffer[f16], U: pc.Buffer[u32], I: pc.Buffer[i32],
              B8: pc.Buffer[i8], S16: pc.Buffer[i16]):
        body(F, H, U, I, B8, S16)  # BAD

    with pytest.raises(CompileError) as e:
        k_bad.compile(**params)
    assert e.value.loc.line == line_of(k_bad, "# BAD") or e.value.loc.line == _body_line(body)
    return e.value


def _body_line(body) -> int:
    return body.__code__.co_firstlineno


def M(comp, rows, cols, use, scope=SG):
    return pc.coopmat[comp, scope, rows, cols, use]


# (id, body, tag, message fragment): each body is one line, so the error's line is the lambda's.
RULES = [
    ("bitcast-source-i8", lambda F, H, U, I, B8, S16: pc.qcom.bitcast_array(_arr(B8, 8), u32),
     "bitcast-source-type", "got int8"),
    ("bitcast-source-i16", lambda F, H, U, I, B8, S16: pc.qcom.bitcast_array(_arr(S16, 4), u32),
     "bitcast-source-type", "got int16"),
    ("bitcast-result-i16", lambda F, H, U, I, B8, S16: pc.qcom.bitcast_array(_arr(U, 2), i16),
     "bitcast-result-type", "got int16"),
    ("bitcast-size-explicit", lambda F, H, U, I, B8, S16: pc.qcom.bitcast_array(_arr(U, 2), pc.array(f16, 2)),
     "bitcast-size", "(4 bytes) and source (8 bytes)"),
    ("bitcast-size-partial", lambda F, H, U, I, B8, S16: pc.qcom.bitcast_array(_arr(H, 3), u32),
     "bitcast-size", "6 bytes"),
    ("construct-scope", lambda F, H, U, I, B8, S16: pc.qcom.construct(_arr(H, 16), M(f16, 16, 16, pc.UseA, pc.Workgroup)),
     "scope", "must be Subgroup"),
    ("construct-A-component", lambda F, H, U, I, B8, S16: pc.qcom.construct(_arr(I, 8), M(i32, 16, 8, pc.UseA)),
     "A-component", "8-bit int, f16 or f32, got int32"),
    ("construct-B-component", lambda F, H, U, I, B8, S16: pc.qcom.construct(_arr(S16, 16), M(i16, 16, 16, pc.UseB)),
     "B-component", "got int16"),
    ("construct-acc-component", lambda F, H, U, I, B8, S16: pc.qcom.construct(_arr(B8, 16), M(i8, 16, 16, pc.Accumulator)),
     "accumulator-component", "32-bit int, f16 or f32, got int8"),
    ("construct-A-256", lambda F, H, U, I, B8, S16: pc.qcom.construct(_arr(H, 8), M(f16, 16, 8, pc.UseA)),
     "A-256-bit", "got 8 x 16"),
    ("construct-B-256", lambda F, H, U, I, B8, S16: pc.qcom.construct(_arr(F, 16), M(f32, 16, 16, pc.UseB)),
     "B-256-bit", "got 16 x 32"),
    ("construct-A-rows", lambda F, H, U, I, B8, S16: pc.qcom.construct(_arr(H, 16), M(f16, 32, 16, pc.UseA)),
     "rows-subgroup", "Rows (32) must be <= SubgroupSize (16)"),
    ("construct-B-cols", lambda F, H, U, I, B8, S16: pc.qcom.construct(_arr(F, 8), M(f32, 8, 32, pc.UseB)),
     "columns-subgroup", "Columns (32) must be <= SubgroupSize (16)"),
    ("construct-acc-cols", lambda F, H, U, I, B8, S16: pc.qcom.construct(_arr(F, 32), M(f32, 16, 32, pc.Accumulator)),
     "columns-subgroup", "Columns (32)"),
    ("construct-elem-type", lambda F, H, U, I, B8, S16: pc.qcom.construct(_arr(F, 16), M(f16, 16, 16, pc.UseA)),
     "array-element-type", "component type (float16) or uint32, got float32"),
    ("construct-acc-elem-type", lambda F, H, U, I, B8, S16: pc.qcom.construct(_arr(I, 16), M(f32, 16, 16, pc.Accumulator)),
     "array-element-type", "got int32"),
    ("construct-length", lambda F, H, U, I, B8, S16: pc.qcom.construct(_arr(H, 8), M(f16, 16, 16, pc.UseA)),
     "array-length", "must have length 16, got 8"),
    ("construct-packed-AB-length", lambda F, H, U, I, B8, S16: pc.qcom.construct(_arr(U, 16), M(f16, 16, 16, pc.UseB)),
     "array-length", "uint32 source array for a MatrixB of 16x16 float16 must have length 8, got 16"),
    ("construct-packed-acc-f16", lambda F, H, U, I, B8, S16: pc.qcom.construct(_arr(U, 16), M(f16, 16, 16, pc.Accumulator)),
     "array-length", "must have length 8, got 16"),
    ("construct-packed-acc-f32", lambda F, H, U, I, B8, S16: pc.qcom.construct(_arr(U, 8), M(f32, 16, 16, pc.Accumulator)),
     "array-length", "must have length 16, got 8"),
    ("construct-bf16", lambda F, H, U, I, B8, S16: pc.qcom.construct(_arr(U, 8), M(bf16, 16, 16, pc.UseA)),
     "A-component", "got bfloat16"),
    ("construct-not-array", lambda F, H, U, I, B8, S16: pc.qcom.construct(F[0], M(f32, 16, 8, pc.UseA)),
     None, "must be a per-invocation array of scalars, got f32"),
    ("construct-not-type", lambda F, H, U, I, B8, S16: pc.qcom.construct(_arr(F, 8), f32),
     None, "must be a cooperative matrix, got f32"),
    ("extract-elem-type", lambda F, H, U, I, B8, S16: pc.qcom.extract(M(f16, 16, 16, pc.UseA).load(H, 0, 16), f32),
     "array-element-type", "got float32"),
    ("extract-int-acc-packed", lambda F, H, U, I, B8, S16: pc.qcom.extract(M(i32, 16, 16, pc.Accumulator).load(I, 0, 16), u32),
     "array-element-type", "result array element type must be the component type (int32), got uint32"),
    ("extract-length", lambda F, H, U, I, B8, S16: pc.qcom.extract(M(f16, 16, 16, pc.UseB).load(H, 0, 16), pc.array(f16, 8)),
     "array-length", "must have length 16, got 8"),
    ("extract-packed-length", lambda F, H, U, I, B8, S16: pc.qcom.extract(M(i8, 16, 32, pc.UseA).load(B8, 0, 32), pc.array(u32, 4)),
     "array-length", "must have length 8, got 4"),
    ("extract-packed-acc-length", lambda F, H, U, I, B8, S16: pc.qcom.extract(M(f16, 16, 16, pc.Accumulator).load(H, 0, 16), pc.array(u32, 16)),
     "array-length", "must have length 8, got 16"),
    ("extract-rows", lambda F, H, U, I, B8, S16: pc.qcom.extract(M(f32, 8, 8, pc.Accumulator, ).load(F, 0, 8)),
     "rows-subgroup", "Rows (8) must be <= SubgroupSize (4)"),
    ("extract-component", lambda F, H, U, I, B8, S16: pc.qcom.extract(M(i16, 16, 16, pc.UseA).load(S16, 0, 16)),
     "A-component", "got int16"),
    ("extract-scope", lambda F, H, U, I, B8, S16: pc.qcom.extract(M(f32, 16, 16, pc.Accumulator, pc.Workgroup).load(F, 0, 16)),
     "scope", "must be Subgroup, got Workgroup"),
    ("extract-not-matrix", lambda F, H, U, I, B8, S16: pc.qcom.extract(_arr(F, 8)),
     None, "the extracted value must be a cooperative matrix"),
    ("subarray-range", lambda F, H, U, I, B8, S16: pc.qcom.extract_subarray(_arr(F, 16), 12, 8),
     "subarray-range", "(12 + 8) must be within the source length 16"),
    ("subarray-negative", lambda F, H, U, I, B8, S16: pc.qcom.extract_subarray(_arr(F, 16), -1, 8),
     "subarray-range", "(-1 + 8)"),
    ("subarray-start-type", lambda F, H, U, I, B8, S16: pc.qcom.extract_subarray(_arr(F, 16), F[0], 8),
     "subarray-start-type", "32-bit integer, got float32"),
    ("subarray-start-float", lambda F, H, U, I, B8, S16: pc.qcom.extract_subarray(_arr(F, 16), 8.0, 8),
     "subarray-start-type", "not the Python float 8.0"),
    ("subarray-start-16bit", lambda F, H, U, I, B8, S16: pc.qcom.extract_subarray(_arr(F, 16), S16[0], 8),
     "subarray-start-type", "got int16"),
    ("subarray-source", lambda F, H, U, I, B8, S16: pc.qcom.extract_subarray(_arr(S16, 16), 0, 8),
     "subarray-source-type", "got int16"),
    ("subarray-length", lambda F, H, U, I, B8, S16: pc.qcom.extract_subarray(_arr(F, 16), 0, 0),
     None, "positive compile-time int"),
    ("subarray-k-multiple", lambda F, H, U, I, B8, S16: pc.qcom.construct(pc.qcom.extract_subarray(_arr(H, 32), 4, 16), M(f16, 16, 16, pc.UseA)),
     "subarray-k-multiple", "Start Index 4 feeding cooperative matrix operations must be a multiple"),
]


# rule ids (docs/rules.md) of the RULES without a static_checks tag
UNTAGGED_IDS = {"construct-not-array": "qcom.array-source", "construct-not-type": "qcom.matrix-type",
                "extract-not-matrix": "qcom.matrix-type", "subarray-length": "qcom.subarray-length"}


@pytest.mark.parametrize("name,body,tag,fragment", RULES, ids=[r[0] for r in RULES])
def test_rule_is_a_compile_error_at_the_users_line(name, body, tag, fragment):
    e = _fail(body, S=4 if name == "extract-rows" else 16)
    assert e.loc.line == _body_line(body), (e.loc, _body_line(body))
    assert fragment in e.message, e.message
    if tag is not None:
        assert f"[{tag}]" in e.rule and "SPV_QCOM_cooperative_matrix_conversion" in e.rule
        assert e.rule_id == f"qcom.{tag.lower()}", e.rule_id
    else:
        assert e.rule_id == UNTAGGED_IDS[name] and e.rule, e.rule_id


def test_result_type_rules():
    """bitcast_array and extract take a scalar or array type; an extract_subarray Start Index
    of another type is refused by the op's own type rule."""
    for body, rule_id in [(lambda F, H, U, I, B8, S16: pc.qcom.bitcast_array(_arr(F, 8), "u32"), "qcom.bitcast-result"),
                          (lambda F, H, U, I, B8, S16: pc.qcom.extract(M(f32, 16, 8, pc.Accumulator).load(F, 0, 8), 3),
                           "qcom.extract-result")]:
        e = _fail(body)
        assert e.rule_id == rule_id and e.loc.line == _body_line(body), str(e)
    from pycoop.ops.qcom.ops import _infer_subarray
    from pycoop.ir.core import Value
    from pycoop.types import ArrayType
    with pytest.raises(CompileError) as e:
        _infer_subarray([Value(ArrayType(f32, 8)), Value(pc.vec(u32, 2))], {"type": ArrayType(f32, 4)}, None, None)
    assert e.value.rule_id == "qcom.subarray-start-type"


def test_good_forms_compile_and_validate():
    """The forms the rules allow, all in one module (spirv-val)."""
    @pc.kernel(workgroup_size=32, subgroup_size=32)
    def k_ok(F: pc.Buffer[f32], H: pc.Buffer[f16], U: pc.Buffer[u32], I: pc.Buffer[i32],
             B8: pc.Buffer[i8], Q: pc.Buffer[u8]):
        lane = pc.local_invocation_id.x
        a8 = pc.qcom.construct(_arr(B8, 32), M(i8, 32, 32, pc.UseA))
        b8 = pc.qcom.construct(_arr(U, 8), M(u8, 32, 8, pc.UseB))
        c = pc.qcom.construct(_arr(I, 8), M(i32, 32, 8, pc.Accumulator))
        d = pc.mul_add(a8, b8, c)
        w = pc.qcom.extract(d)
        ws = pc.qcom.extract_subarray(pc.qcom.bitcast_array(w, f16), 8, 8)
        hf = pc.qcom.construct(pc.qcom.bitcast_array(_arr(U, 8), f16), M(f16, 16, 16, pc.UseA))
        pc.store(H, 0, hf, 16)
        fa = pc.qcom.extract(M(f32, 8, 16, pc.Accumulator).load(F, 0, 16), u32)
        qb = pc.qcom.extract(M(u8, 32, 16, pc.UseB).load(Q, 0, 16), u32)
        I[lane] = w[0]
        H[lane] = ws[0] + ws[1]
        U[lane] = fa[0] + qb[7]

    spv_ok(k_ok.compile())


def test_poison_follows_if_and_loop_results():
    """Undefined lanes of an extracted array stay undefined through a runtime if merge and a
    loop-carried variable; reads guarded to the defined lanes stay silent."""
    M = pc.coopmat[f32, SG, 8, 8, pc.Accumulator]

    @pc.kernel(workgroup_size=16, subgroup_size=16)
    def k_if(X: pc.Buffer[f32], Y: pc.Buffer[f32], flag: u32, guard: u32):
        lane = pc.local_invocation_id.x
        rows = pc.qcom.extract(M.load(X, 0, 8))        # lanes 8..15 get OpUndef
        zeros = pc.make_array([f32(0.0)] * 8)
        picked = rows if flag == 1 else zeros
        if lane < guard:
            Y[lane] = picked[0]  # READ IF

    @pc.kernel(workgroup_size=16, subgroup_size=16)
    def k_loop(X: pc.Buffer[f32], Y: pc.Buffer[f32], n: u32):
        lane = pc.local_invocation_id.x
        carried = pc.make_array([f32(1.0)] * 8)
        for i in range(n):
            carried = pc.qcom.extract(M.load(X, 0, 8))
        Y[lane] = carried[0]  # READ LOOP

    x, y = np.ones(64, np.float32), np.zeros(16, np.float32)
    with pytest.raises(EmulatorError, match="OpUndef") as e:
        emu(k_if, 1, x, y, 1, 16)
    assert e.value.loc.line == line_of(k_if, "# READ IF") and "invocation 8" in e.value.message
    emu(k_if, 1, x, y, 1, 8)                             # only the defined lanes read
    emu(k_if, 1, x, y, 0, 16)                            # the zeros were picked
    with pytest.raises(EmulatorError, match="OpUndef") as e:
        emu(k_loop, 1, x, y, 2)
    assert e.value.loc.line == line_of(k_loop, "# READ LOOP")
    emu(k_loop, 1, x, y, 0)                              # the loop never ran
    np.testing.assert_array_equal(y, 1.0)
    for k in (k_if, k_loop):
        spv_ok(k.compile())
