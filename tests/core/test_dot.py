"""pycoop.dot4x8 (OpSDot / OpUDot / OpSUDot): every signedness and both operand forms against a
NumPy reference on the emulator, the instruction and capabilities in the module, the rules, and
the same kernels through the Vulkan driver (lavapipe in CI)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pycoop as pc
from pycoop import i8, i32, u8, u32
from pycoop.spirv import reader

from core_helpers import SETTINGS, line_of


def _packed_kernel(sa: bool, sb: bool, out):
    @pc.kernel(workgroup_size=64)
    def packed(A: pc.ReadBuffer[u32], B: pc.ReadBuffer[u32], O: pc.WriteBuffer[out], n: u32):
        i = pc.global_invocation_id.x
        if i < n:
            O[i] = pc.dot4x8(A[i], B[i], signed=(sa, sb))
    return packed


def _vector_kernel(ta, tb, out):
    @pc.kernel(workgroup_size=64)
    def vector(A: pc.ReadBuffer[ta], B: pc.ReadBuffer[tb], O: pc.WriteBuffer[out], n: u32):
        i = pc.global_invocation_id.x
        if i < n:
            a = pc.make_vector([A[4 * i + k] for k in range(4)])
            b = pc.make_vector([B[4 * i + k] for k in range(4)])
            O[i] = pc.dot4x8(a, b)
    return vector


SIGNS = [(True, True), (False, False), (True, False), (False, True)]
PACKED = {s: _packed_kernel(*s, i32 if any(s) else u32) for s in SIGNS}
VECTOR = {s: _vector_kernel(i8 if s[0] else u8, i8 if s[1] else u8, i32 if any(s) else u32)
          for s in SIGNS}


def _reference(a_lanes: np.ndarray, b_lanes: np.ndarray, signs) -> np.ndarray:
    """Sum of products of the lanes (n, 4), each read as int8 or uint8 as `signs` says."""
    a = a_lanes.astype(np.uint8).view(np.int8 if signs[0] else np.uint8).astype(np.int64)
    b = b_lanes.astype(np.uint8).view(np.int8 if signs[1] else np.uint8).astype(np.int64)
    return (a * b).sum(-1).astype(np.int32 if any(signs) else np.uint32)


def _inputs(seed: int, n: int):
    r = np.random.default_rng(seed)
    a = r.integers(0, 256, (n, 4), dtype=np.uint8)
    b = r.integers(0, 256, (n, 4), dtype=np.uint8)
    a[0], b[0] = 0x80, 0x80            # the extremes: -128 * -128 and 128 * 128 per lane
    a[1], b[1] = 0xFF, 0x80
    return a, b


def _run(signs, packed: bool, a, b, backend: str = "emulator") -> np.ndarray:
    n = len(a)
    out = np.zeros(n, np.int32 if any(signs) else np.uint32)
    if packed:
        PACKED[signs][(n + 63) // 64](a.view("<u4").reshape(n), b.view("<u4").reshape(n), out, n,
                                      backend=backend)
    else:
        va = a.view(np.int8) if signs[0] else a
        vb = b.view(np.int8) if signs[1] else b
        VECTOR[signs][(n + 63) // 64](va.reshape(-1), vb.reshape(-1), out, n, backend=backend)
    return out


@SETTINGS
@given(signs=st.sampled_from(SIGNS), packed=st.booleans(), n=st.integers(2, 130),
       seed=st.integers(0, 2**31))
def test_matches_the_sum_of_lane_products(signs, packed, n, seed):
    a, b = _inputs(seed, n)
    np.testing.assert_array_equal(_run(signs, packed, a, b), _reference(a, b, signs))


def test_the_extremes_are_exact():
    a, b = _inputs(0, 2)
    assert _run((True, True), True, a, b)[0] == 4 * 128 * 128
    assert _run((False, False), True, a, b)[0] == 4 * 128 * 128
    assert _run((False, True), False, a, b)[1] == 4 * 255 * -128
    assert _run((False, False), False, a, b)[1] == 4 * 255 * 128


@pytest.mark.parametrize("signs,opname", [((True, True), "OpSDot"), ((False, False), "OpUDot"),
                                          ((True, False), "OpSUDot"), ((False, True), "OpSUDot")])
@pytest.mark.parametrize("packed", [True, False])
def test_the_module_uses_the_instruction_and_capabilities(signs, opname, packed):
    ck = (PACKED if packed else VECTOR)[signs].compile()
    names = [name for name, _ in reader.instructions(ck.spv)]
    assert opname in names
    want = "DotProductInput4x8BitPacked" if packed else "DotProductInput4x8Bit"
    assert {"DotProduct", want} <= set(ck.requirements["capabilities"])
    assert "shaderIntegerDotProduct" in ck.requirements["features"]
    if signs == (False, True):     # OpSUDot's first operand is the signed one: the operands swap
        dot = [ops for name, ops in reader.instructions(ck.spv) if name == "OpSUDot"][0]
        loads = [ops[1] for name, ops in reader.instructions(ck.spv) if name in
                 ("OpLoad", "OpCompositeConstruct")]
        assert dot[2] in loads and dot[3] in loads and dot[2] != dot[3]


def test_operand_types_are_checked_at_the_users_line():
    @pc.kernel(workgroup_size=64)
    def wide(A: pc.ReadBuffer[u32], O: pc.WriteBuffer[i32]):
        O[0] = pc.dot4x8(pc.make_vector([A[0]] * 4), pc.make_vector([A[1]] * 4))   # u32 lanes
    with pytest.raises(pc.CompileError) as e:
        wide.compile()
    assert e.value.rule_id == "dot.operand-types" and "vec4<u32>" in e.value.message.replace(" ", "")
    assert e.value.loc.line == line_of(wide, "u32 lanes")


def test_signed_is_only_for_packed_operands():
    @pc.kernel(workgroup_size=64)
    def vec_signed(A: pc.ReadBuffer[i8], O: pc.WriteBuffer[i32]):
        v = pc.make_vector([A[k] for k in range(4)])
        O[0] = pc.dot4x8(v, v, signed=(True, True))               # redundant signedness
    with pytest.raises(pc.CompileError) as e:
        vec_signed.compile()
    assert e.value.rule_id == "dot.signedness"
    assert e.value.loc.line == line_of(vec_signed, "redundant signedness")


@pytest.mark.parametrize("signed", [True, (True,), (True, False, True), "yes"], ids=repr)
def test_signed_is_a_pair(signed):
    """signed= of packed operands names each operand's signedness (it failed in the lowering,
    unpacking a pair, for anything else)."""
    @pc.kernel(workgroup_size=64)
    def packed(A: pc.ReadBuffer[u32], O: pc.WriteBuffer[i32], S: pc.Const):
        O[0] = pc.dot4x8(A[0], A[1], signed=S)                   # not a pair
    with pytest.raises(pc.CompileError, match="a pair of bools") as e:
        packed.compile(S=signed)
    assert e.value.rule_id == "dot.signedness" and e.value.hint
    assert e.value.loc.line == line_of(packed, "not a pair")


@pytest.mark.vulkan
@pytest.mark.parametrize("signs", SIGNS)
@pytest.mark.parametrize("packed", [True, False])
def test_the_driver_computes_the_same(signs, packed):
    try:
        from pycoop.runtime.vulkan import get_runtime
        caps = get_runtime().capabilities
    except Exception as e:                                   # noqa: BLE001
        pytest.skip(f"no Vulkan device: {e}")
    if not caps.has("shaderIntegerDotProduct"):
        pytest.skip(f"{caps.device_name} lacks shaderIntegerDotProduct")
    a, b = _inputs(7, 200)
    np.testing.assert_array_equal(_run(signs, packed, a, b, backend="vulkan"),
                                  _reference(a, b, signs))
