"""SPV_NV_cooperative_matrix_decode_vector: `load_tensor(..., decode=f, decode_vector=fv)`.

Trace-time rules (one bad input each), the emulator's V-grouping against an independent
implementation written from the spec text (hypothesis), the checking mode, lowering (full and
stripped modules) and pycoop's own checker of the full module.
"""
from __future__ import annotations

import importlib.util
import linecache
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f16, f32, u8, u32
from pycoop.errors import CompileError, EmulatorError
from pycoop.ops.nv import decode_vector as DV
from pycoop.spirv import grammar, reader
from pycoop.spirv.tools import assemble_text, validate

HERE = Path(__file__).parent
SPVASM = Path("/work/shared/reference/spvasm")
MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
Blk = pc.struct("Blk", d=f16, qs=pc.array(u8, 8))


@pytest.fixture(autouse=True)
def _emulator():
    with pc.use_backend("emulator"), pc.knobs.check_decode_vector():
        yield


def _ref():
    """The literal spec pseudo-code reference of tests/nv/test_addressing.py."""
    spec = importlib.util.spec_from_file_location("_addressing_reference", HERE / "test_addressing.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod              # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


R = _ref()


# ============================================================================ decode functions

def dec(p, bc, cib):
    return f16(p[cib[1]])


def decv4(p, bc, cib):
    return pc.make_vector([f16(p[cib[1] + i]) for i in range(4)])


def at_user_line(e: CompileError, text: str) -> None:
    """The error points at the user's call (this file, the line with `text`)."""
    assert e.loc is not None and e.loc.file == __file__, e.loc
    assert text in linecache.getline(e.loc.file, e.loc.line), (e.loc, text)


def _compile_load(decode=dec, decode_vector=decv4, block=(1, 8), comp=f16, **kw):
    Mat = pc.coopmat[comp, pc.Subgroup, 16, 16, pc.UseA if comp == f16 else pc.Accumulator]

    @pc.kernel(workgroup_size=32)
    def k(A: pc.ReadBuffer[f16], O: pc.Buffer[f16]):
        l = pc.nv.tensor_layout(2, clamp="constant").block_size(*block).dimension(16, 16)
        m = pc.nv.load_tensor(A, l, Mat, decode=decode, decode_vector=decode_vector, **kw)  # LOAD
        pc.nv.store_tensor(O, pc.nv.tensor_layout(2).dimension(16, 16), m)
    return k.compile()


# ============================================================================ trace-time rules

def test_decode_vector_needs_decode():
    with pytest.raises(CompileError, match="needs a scalar decode function") as e:
        _compile_load(decode=None)
    at_user_line(e.value, "# LOAD")
    assert "DecodeFunc must also be present" in str(e.value)


def test_return_type_must_be_a_vector():
    with pytest.raises(CompileError, match="not a vector of the matrix component type") as e:
        _compile_load(decode_vector=dec)
    at_user_line(e.value, "# LOAD")
    assert e.value.rule_id == "nv.decode-vector-return-type"


def test_return_vector_of_the_component_type():
    def wrong(p, bc, cib):
        return pc.make_vector([f32(p[cib[1] + i]) for i in range(4)])
    with pytest.raises(CompileError, match="not a vector of the matrix component type f16"):
        _compile_load(decode_vector=wrong)


@pytest.mark.parametrize("v", [3, 16])
def test_vector_size_must_be_2_4_or_8(v):
    def wrong(p, bc, cib):
        return pc.make_vector([f16(p[cib[1]])] * v)
    with pytest.raises(CompileError, match="V must be 2, 4 or 8") as e:
        _compile_load(decode_vector=wrong, block=(1, 240))
    at_user_line(e.value, "# LOAD")
    assert e.value.rule_id == "nv.decode-vector-length"


def test_a_vector_spirv_has_no_type_for_is_refused_where_it_is_made():
    def five(p, bc, cib):
        return pc.make_vector([f16(p[cib[1]])] * 5)     # FIVE
    with pytest.raises(CompileError, match="a vector has 2, 3, 4, 8 or 16 components, "
                                           "got 5") as e:
        _compile_load(decode_vector=five, block=(1, 240))
    assert e.value.rule_id == "composite.vector-size"
    assert "# FIVE" in e.value.loc.source_line()


def test_parameter_count():
    def two(p, bc):
        return pc.make_vector([f16(p[0])] * 4)
    with pytest.raises(CompileError, match="takes 2 parameters") as e:
        _compile_load(decode_vector=two)
    at_user_line(e.value, "# LOAD")


def test_bad_decode_vector_block():
    with pytest.raises(CompileError, match="decode_vector_block must be a block struct") as e:
        _compile_load(decode_vector_block=pc.Buffer[f16])
    at_user_line(e.value, "# LOAD")
    assert e.value.rule_id == "nv.decode-vector-block-type"
    with pytest.raises(CompileError, match="decode_vector function, which is missing"):
        _compile_load(decode_vector=None, decode_vector_block=f16)


def test_parameter_types_rule():
    """The parameter rule itself (pycoop always traces with the right types; a function built
    otherwise, e.g. by a future frontend, is rejected by the verifier)."""
    from pycoop.ir.core import Block, Function, Value
    from pycoop.types import ArrayType, PointerType, StorageClass, VectorType
    ok = [Value(PointerType(f16, StorageClass.PhysicalStorageBuffer)), Value(ArrayType(u32, 2)),
          Value(ArrayType(u32, 2))]
    f = Function("fv", ok, Block(), "func", VectorType(f16, 4))
    assert DV.check_vector_function(f, MatA, 2, None) == 4
    with pytest.raises(CompileError, match="first parameter must be pointer to PhysicalStorageBuffer") as e:
        DV.check_vector_function(Function("fv", [Value(PointerType(f16, StorageClass.Workgroup))] + ok[1:],
                                          Block(), "func", VectorType(f16, 4)), MatA, 2, None)
    assert e.value.rule_id == "nv.decode-vector-pointer"
    with pytest.raises(CompileError, match="expected u32\\[3\\]") as e:
        DV.check_vector_function(f, MatA, 3, None)
    assert e.value.rule_id == "nv.decode-vector-coord-params"
    with pytest.raises(CompileError, match="takes 2 parameters, not 3") as e:
        DV.check_vector_function(Function("fv", ok[:2], Block(), "func", VectorType(f16, 4)), MatA, 2, None)
    assert e.value.rule_id == "nv.decode-vector-params"
    with pytest.raises(CompileError, match="expected u32\\[2\\]"):
        DV.check_vector_function(Function("fv", ok[:1] + [Value(ArrayType(pc.i32, 2))] * 2, Block(), "func",
                                          VectorType(f16, 4)), MatA, 2, None)


def test_not_on_store():
    @pc.kernel(workgroup_size=32)
    def k(O: pc.Buffer[f16]):
        l = pc.nv.tensor_layout(2).dimension(16, 16)
        pc.nv.store_tensor(O, l, MatA.fill(1.0), decode_vector=decv4)  # STORE
    with pytest.raises(CompileError, match="no decode_vector") as e:
        k.compile()
    at_user_line(e.value, "# STORE")


@pytest.mark.parametrize("block", [(1, 6), (1, 2), (4, 1)])
def test_constant_block_size_must_be_a_multiple_of_v(block):
    with pytest.raises(CompileError, match="not a multiple of the decode_vector width V = 4") as e:
        _compile_load(block=block)
    at_user_line(e.value, "# LOAD")
    assert e.value.rule_id == "nv.decode-vector-block-multiple"


def test_default_block_size_1_is_rejected():
    @pc.kernel(workgroup_size=32)
    def k(A: pc.ReadBuffer[f16], O: pc.Buffer[f16]):
        l = pc.nv.tensor_layout(2).dimension(16, 16)
        m = pc.nv.load_tensor(A, l, MatA, decode=dec, decode_vector=decv4)  # LOAD
        pc.nv.store_tensor(O, l, m)
    with pytest.raises(CompileError, match="block size in its last dimension is 1") as e:
        k.compile()
    at_user_line(e.value, "# LOAD")


def _runtime_block_kernel():
    @pc.kernel(workgroup_size=32)
    def k(A: pc.ReadBuffer[f16], O: pc.Buffer[f16], b: u32):
        l = pc.nv.tensor_layout(2, clamp="constant").block_size(1, b).dimension(16, 16)
        m = pc.nv.load_tensor(A, l, MatA, decode=dec, decode_vector=decv4)  # LOAD
        pc.nv.store_tensor(O, pc.nv.tensor_layout(2).dimension(16, 16), m)
    return k


def test_runtime_block_size_not_a_multiple_of_v_is_reported():
    k = _runtime_block_kernel()
    A, O = np.arange(512).astype(np.float16), np.zeros(256, np.float16)
    k[1](A, O, 8)                                  # fine
    with pytest.raises(EmulatorError, match="block size in its last dimension is 6") as e:
        k[1](A, O, 6)
    assert "# LOAD" in linecache.getline(e.value.loc.file, e.value.loc.line)
    assert e.value.rule_id == "nv.decode-vector-block-multiple"


# ============================================================================ checking mode

def test_checking_mode_catches_a_wrong_vector_decode():
    def reversed_v4(p, bc, cib):                  # components in the wrong order
        return pc.make_vector([f16(p[cib[1] + 3 - i]) for i in range(4)])

    @pc.kernel(workgroup_size=32)
    def k(A: pc.ReadBuffer[f16], O: pc.Buffer[f16]):
        l = pc.nv.tensor_layout(2, clamp="constant").block_size(1, 16).dimension(16, 16)
        m = pc.nv.load_tensor(A, l, MatA, decode=dec, decode_vector=reversed_v4)  # WRONG
        pc.nv.store_tensor(O, pc.nv.tensor_layout(2).dimension(16, 16), m)
    A, O = np.arange(256).astype(np.float16), np.zeros(256, np.float16)
    with pytest.raises(EmulatorError, match="decode_vector and decode disagree") as e:
        k[1](A, O)
    msg = str(e.value)
    assert "# WRONG" in linecache.getline(e.value.loc.file, e.value.loc.line)
    assert "row 0, col 0" in msg and "= 0.0" in msg and "= 3.0" in msg, msg
    assert e.value.rule_id == "nv.decode-vector-agrees"
    # without checking the vector function is used where it may be (here: everywhere)
    with pc.knobs.check_decode_vector(False):
        k[1](A, O)
    assert O[:4].tolist() == [3, 2, 1, 0]


def test_checking_mode_env(monkeypatch):
    monkeypatch.setenv("PYCOOP_CHECK_DECODE_VECTOR", "1")
    with pc.knobs.check_decode_vector(False):
        assert not pc.knobs.check_decode_vector_enabled()
    pc.knobs._check_decode_vector_override.clear()
    try:
        assert pc.knobs.check_decode_vector_enabled()
        monkeypatch.setenv("PYCOOP_CHECK_DECODE_VECTOR", "0")
        assert not pc.knobs.check_decode_vector_enabled()
    finally:
        pc.knobs._check_decode_vector_override.append(True)   # the fixture's context


def test_vector_pointer_uses_its_own_block_type():
    """The vector function's pointer is element index * sizeof(its own pointee)."""
    Words = pc.struct("Words", d=f16, qs=pc.array(pc.u16, 4))        # same 10 bytes as Blk

    def sdec(b, bc, cib):
        return f16(b.qs[cib[1]]) * b.d

    def vdec(b, bc, cib):
        w = b.qs[cib[1] >> 1]
        return pc.make_vector([f16(w & 255) * b.d, f16(w >> 8) * b.d])

    @pc.kernel(workgroup_size=32)
    def k(W: pc.ReadBuffer[Blk], O: pc.Buffer[f16]):
        l = pc.nv.tensor_layout(2, clamp="constant").block_size(1, 8).dimension(16, 16)
        m = pc.nv.load_tensor(W, l, MatA, decode=sdec, decode_vector=vdec, decode_vector_block=Words)
        pc.nv.store_tensor(O, pc.nv.tensor_layout(2).dimension(16, 16), m)
    rng = np.random.default_rng(0)
    raw = np.zeros((32, 10), np.uint8)
    raw[:, :2] = np.full(32, 0.5, np.float16).view(np.uint8).reshape(32, 2)
    raw[:, 2:] = rng.integers(0, 200, (32, 8))
    O = np.zeros(256, np.float16)
    k[1](raw.reshape(-1), O)                       # checking mode on: both agree
    np.testing.assert_array_equal(O.reshape(16, 16), (raw[:, 2:].reshape(16, 16) * 0.5).astype(np.float16))


# ============================================================================ grouping (hypothesis)

ROWS, COLS = 8, 16
MatU = pc.coopmat[u32, pc.Subgroup, ROWS, COLS, pc.Accumulator]
TAG = 1 << 31


def _enc(bc, cib):
    return bc[0] | (bc[1] << 5) | (cib[0] << 10) | (cib[1] << 15)


def _coord_dec(p, bc, cib):
    return _enc(bc, cib)


def _make_coord_decv(v):
    def coord_decv(p, bc, cib):
        return pc.make_vector([_enc(bc, cib) | (i << 20) | TAG for i in range(v)])
    return coord_decv


def _ptr_dec(p, bc, cib):
    return p[0]


def _make_ptr_decv(v):
    def ptr_decv(p, bc, cib):
        x = p[0]
        return pc.make_vector([x | TAG] * v)
    return ptr_decv


_KERNELS = {}
MODES = {"constant": R.CONSTANT, "clamp_to_edge": R.CLAMP_TO_EDGE, "repeat": R.REPEAT}


def _grouping_kernel(clamp: str, view: tuple | None, v: int):
    key = (clamp, view, v)
    if key in _KERNELS:
        return _KERNELS[key]
    cdecv, pdecv = _make_coord_decv(v), _make_ptr_decv(v)

    @pc.kernel(workgroup_size=32)
    def k(Mem: pc.ReadBuffer[u32], C: pc.Buffer[u32], P: pc.Buffer[u32],
          d0: u32, d1: u32, b0: u32, b1: u32, o0: u32, s0: u32, o1: u32, s1: u32, step0: u32,
          step1: u32, cro: u32, crs: u32, cco: u32, ccs: u32):
        w = pc.workgroup_id.x
        l = pc.nv.tensor_layout(2, clamp=clamp).block_size(b0, b1).dimension(d0, d1) \
            .slice(o0 + w * step0, s0, o1 + w * step1, s1)
        lo = pc.nv.tensor_layout(2).dimension(2 * ROWS, COLS).slice(w * ROWS, ROWS, 0, COLS)
        if view is None:
            c = pc.nv.load_tensor(Mem, l, MatU, decode=_coord_dec, decode_vector=cdecv)
            p = pc.nv.load_tensor(Mem, l, MatU, decode=_ptr_dec, decode_vector=pdecv)
        else:
            vw = pc.nv.tensor_view(2, False, view).clip(cro, crs, cco, ccs)
            c = pc.nv.load_tensor(Mem, l, MatU, view=vw, decode=_coord_dec, decode_vector=cdecv)
            p = pc.nv.load_tensor(Mem, l, MatU, view=vw, decode=_ptr_dec, decode_vector=pdecv)
        pc.nv.store_tensor(C, lo, c)
        pc.nv.store_tensor(P, lo, p)
    _KERNELS[key] = k
    return k


def _expected(clamp, view, v, args, w):
    """From the spec text: the V matrix elements of one DecodeVectorFunc invocation share
    blockCoord and coordInBlock but in dimension LDim-1, whose values are V consecutive integers
    starting at a multiple of V; pointer and coordinates are the lowest one's. A group is used
    when all its V elements are elements of this load (pycoop's choice; else DecodeFunc)."""
    d0, d1, b0, b1, o0, s0, o1, s1, step0, step1, cro, crs, cco, ccs = args
    t = R.ref_create_layout(2, MODES[clamp])
    t = R.ref_layout_set_block_size(t, [b0, b1])
    t = R.ref_layout_set_dimension(t, [d0, d1])
    t = R.ref_layout_slice(t, [o0 + w * step0, o1 + w * step1], [s0, s1])
    rv = None
    if view is not None:
        rv = R.ref_view_set_clip(R.ref_create_view(2, False, view), cro, crs, cco, ccs)
    elems = {}
    for r in range(ROWS):
        for c in range(COLS):
            e = R.ref_element(t, rv, r, c, COLS, False)
            assert e.outcome in (R.Outcome.ACCESSED, R.Outcome.CONSTANT, R.Outcome.CLIPPED), e.outcome
            if e.outcome == R.Outcome.ACCESSED:
                elems[(r, c)] = e
    lanes: dict[tuple, set] = {}
    for e in elems.values():
        key = (tuple(e.blockCoord), tuple(e.coordInBlock[:-1]), e.coordInBlock[-1] // v)
        lanes.setdefault(key, set()).add(e.coordInBlock[-1] % v)
    C = np.zeros((ROWS, COLS), np.uint32)
    P = np.zeros((ROWS, COLS), np.uint32)
    for (r, c), e in elems.items():
        bc, cib = e.blockCoord, list(e.coordInBlock)
        key = (tuple(bc), tuple(cib[:-1]), cib[-1] // v)
        if len(lanes[key]) == v:                       # whole group: the vector function
            lane = cib[-1] % v
            first = cib[:-1] + [cib[-1] - lane]
            C[r, c] = _enc(bc, first) | (lane << 20) | TAG
            P[r, c] = e.index | TAG
        else:
            C[r, c] = _enc(bc, cib)
            P[r, c] = e.index
    return C, P


@st.composite
def grouping_cases(draw):
    v = draw(st.sampled_from([2, 4, 8]))
    b0 = draw(st.integers(1, 4))
    b1 = v * draw(st.integers(1, 3))
    d0 = draw(st.integers(1, 24))
    d1 = draw(st.integers(1, 30))
    o0, o1 = draw(st.integers(-6, 12)), draw(st.integers(-9, 20))
    s0, s1 = draw(st.integers(1, 10)), draw(st.integers(1, 20))
    step0, step1 = draw(st.integers(0, 3)), draw(st.integers(0, 9))
    clamp = draw(st.sampled_from(sorted(MODES)))
    view = draw(st.sampled_from([None, (0, 1), (1, 0)]))
    clip = (draw(st.integers(0, 4)), draw(st.integers(0, 10)), draw(st.integers(0, 8)),
            draw(st.integers(0, 20)))
    args = (d0, d1, b0, b1, o0 & 0xFFFFFFFF, s0, o1 & 0xFFFFFFFF, s1, step0, step1, *clip)
    return clamp, view, v, args


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grouping_cases())
def test_grouping_matches_spec_reference(case):
    clamp, view, v, args = case
    k = _grouping_kernel(clamp, view, v)
    mem = np.arange(4096, dtype=np.uint32)
    C = np.zeros((2 * ROWS, COLS), np.uint32)
    P = np.zeros((2 * ROWS, COLS), np.uint32)
    with pc.knobs.check_decode_vector(False):        # the two functions differ on purpose
        k[2](mem, C, P, *args)
    ref_args = list(args)
    ref_args[4], ref_args[6] = R.i32(args[4]), R.i32(args[6])
    for w in range(2):
        eC, eP = _expected(clamp, view, v, ref_args, w)
        np.testing.assert_array_equal(C[w * ROWS:(w + 1) * ROWS], eC, err_msg=f"coordinates, workgroup {w}")
        np.testing.assert_array_equal(P[w * ROWS:(w + 1) * ROWS], eP, err_msg=f"pointers, workgroup {w}")


def test_grouping_straddling_span_uses_scalar():
    """Groups cut by the span (offset 2 into blocks of 8, V = 4) are decoded per element."""
    k = _grouping_kernel("constant", None, 4)
    mem = np.arange(4096, dtype=np.uint32)
    C = np.zeros((2 * ROWS, COLS), np.uint32)
    P = np.zeros_like(C)
    with pc.knobs.check_decode_vector(False):
        k[2](mem, C, P, 16, 32, 1, 8, 0, 8, 2, 16, 0, 0, 0, 0, 0, 0)
    # columns 0..15 read tensor columns 2..17: groups {0..3} and {16..19} are cut by the span
    tags = (C[0] >> 31).tolist()
    assert tags == [0, 0] + [1] * 12 + [0, 0], tags
    assert ((C[0, 2:6] >> 20) & 7).tolist() == [0, 1, 2, 3]          # lanes of group {4..7}


# ============================================================================ lowering

def _words_of_load(spv: bytes):
    return _operands(spv, "OpCooperativeMatrixLoadTensorNV")


def _operands(spv: bytes, opname: str) -> list:
    return [ops for name, ops in reader.instructions(spv) if name == opname]


def _capabilities(spv: bytes) -> list[int]:
    return [ops[0] for ops in _operands(spv, "OpCapability")]


def _extensions(spv: bytes) -> list[str]:
    return [reader.string(ops) for ops in _operands(spv, "OpExtension")]


DECODE_VECTOR_CAP = grammar.capability("CooperativeMatrixDecodeVectorNV")
LONG_VECTOR_CAP = grammar.capability("LongVectorEXT")


def test_full_module_encoding_and_stripped_module():
    k = pc.kernel(workgroup_size=32)(_runtime_block_kernel().fn)
    ck = k.compile()
    assert ck.decode_vector == "stripped"
    caps = _capabilities(ck.spv_full)
    assert DECODE_VECTOR_CAP in caps and LONG_VECTOR_CAP not in caps
    assert DV.EXTENSION in _extensions(ck.spv_full)
    load = _words_of_load(ck.spv_full)[0]
    # result type, result, pointer, object, layout, Aligned|NonPrivatePointer, 2, 0x6, %decode, %decodev
    assert load[5] == 0x22 and load[7] == 0x6 and len(load) == 10
    funcs = [ops[1] for ops in _operands(ck.spv_full, "OpFunction")]
    assert load[8] in funcs and load[9] in funcs
    assert DV.check_module(ck.spv_full) == []
    # stripped: DecodeFunc only, no capability, extension or vector function; spirv-val passes
    s_load = _words_of_load(ck.spv)[0]
    assert s_load[7] == 0x2 and len(s_load) == 9
    assert DECODE_VECTOR_CAP not in _capabilities(ck.spv)
    assert len(_operands(ck.spv, "OpFunction")) == 2                        # main + decode
    validate(ck.spv)
    assert any("stripped the DecodeVectorFunc" in n for n in ck.report)
    md = ck.metadata()
    assert md["decode_vector"] == "stripped" and md["notes"] == ck.report
    assert "SPV_NV_cooperative_matrix_decode_vector" not in md["extensions"]


def test_keep_mode_and_v8_long_vector(monkeypatch):
    def decv8(p, bc, cib):
        return pc.make_vector([f16(p[cib[1] + i]) for i in range(8)])
    monkeypatch.setenv("PYCOOP_DECODE_VECTOR", "keep")
    ck = _compile_load(decode_vector=decv8, block=(1, 16))
    assert ck.decode_vector == "kept" and ck.spv == ck.spv_full
    caps = _capabilities(ck.spv)
    assert LONG_VECTOR_CAP in caps and DECODE_VECTOR_CAP in caps
    assert "SPV_EXT_long_vector" in _extensions(ck.spv)
    assert "VK_NV_cooperative_matrix_decode_vector" in ck.requirements["extensions"]
    assert "cooperativeMatrixDecodeVector" in ck.requirements["features"]
    monkeypatch.setenv("PYCOOP_DECODE_VECTOR", "strip")
    ck2 = _compile_load(decode_vector=decv8, block=(1, 16))
    validate(ck2.spv)
    assert LONG_VECTOR_CAP not in _capabilities(ck2.spv)


def test_kernels_without_decode_vector_are_unchanged():
    @pc.kernel(workgroup_size=32)
    def k(A: pc.ReadBuffer[f16], O: pc.Buffer[f16]):
        l = pc.nv.tensor_layout(2, clamp="constant").block_size(1, 8).dimension(16, 16)
        m = pc.nv.load_tensor(A, l, MatA, decode=dec)
        pc.nv.store_tensor(O, pc.nv.tensor_layout(2).dimension(16, 16), m)
    ck = k.compile()
    assert ck.decode_vector is None and ck.spv_full == ck.spv and ck.report == []
    assert "notes" not in ck.metadata()


def _numeric(text: str) -> str:
    """Symbolic decode-vector names -> raw numbers that spirv-as 2025.5 assembles."""
    return (text.replace("OpCapability CooperativeMatrixDecodeVectorNV", "OpCapability !5447")
            .replace("OpCapability LongVectorEXT", "OpCapability !5425")
            .replace("DecodeFunc|DecodeVectorFunc", "!0x6"))


@pytest.mark.parametrize("name, problem", [
    ("valid/c_nv_decode_vector_numeric.spvasm", None),
    ("valid/c_nv_decode_vector_named.spvasm", None),
    ("valid/c_nv_decode_vector_v8_longvector.spvasm", None),
    ("invalid/c_nocap.spvasm", "CooperativeMatrixDecodeVectorNV capability"),
    ("invalid/c_v8_nolongvec.spvasm", "LongVectorEXT"),
])
def test_checker_on_reference_modules(name, problem):
    path = SPVASM / name
    if not path.exists():
        pytest.skip("reference modules not available")
    spv = assemble_text(_numeric(path.read_text()))
    problems = DV.check_module(spv)
    if problem is None:
        assert problems == []
    else:
        assert any(problem in p for p in problems), problems


def test_checker_flags_missing_decode_func_and_bad_return():
    text = _numeric((SPVASM / "valid/c_nv_decode_vector_numeric.spvasm").read_text()) \
        if (SPVASM / "valid/c_nv_decode_vector_numeric.spvasm").exists() else None
    if text is None:
        pytest.skip("reference modules not available")
    no_decode = text.replace("!0x6 %decode %decodev", "!0x4 %decodev")
    assert "DecodeVectorFunc requires DecodeFunc to also be specified" in DV.check_module(assemble_text(no_decode))
    scalar_ret = text.replace("!0x6 %decode %decodev", "!0x6 %decode %decode")
    assert any("must be a vector" in p for p in DV.check_module(assemble_text(scalar_ret)))
