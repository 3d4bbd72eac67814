"""Atomics (pycoop.atomic) on the emulator: applied in invocation order, checked against a
sequential reference (old values and final memory, for every kind and integer width, with
divergent active masks and contended elements); shared-memory atomics; races between atomic and
plain accesses; capabilities/features derived per type and storage; misuse as CompileError."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f32, i32, i64, u32, u64
from pycoop.runtime.vulkan.capabilities import Capabilities

from core_helpers import SETTINGS, emu, line_of

WG = 32
KINDS = ["add", "sub", "min", "max", "and", "or", "xor", "exchange", "compare_exchange"]


def _kernel(T):
    @pc.kernel(workgroup_size=WG)
    def rmw(D: pc.Buffer[T], I: pc.ReadBuffer[u32], V: pc.ReadBuffer[T], C: pc.ReadBuffer[T],
            M: pc.ReadBuffer[u32], Old: pc.Buffer[T], KIND: pc.Const):
        i = pc.global_invocation_id.x
        if M[i] != 0:
            j, v = I[i], V[i]
            if KIND == "add":
                o = pc.atomic.add(D, j, v)
            elif KIND == "sub":
                o = pc.atomic.sub(D, j, v)
            elif KIND == "min":
                o = pc.atomic.min(D, j, v)
            elif KIND == "max":
                o = pc.atomic.max(D, j, v)
            elif KIND == "and":
                o = pc.atomic.and_(D, j, v)
            elif KIND == "or":
                o = pc.atomic.or_(D, j, v)
            elif KIND == "xor":
                o = pc.atomic.xor(D, j, v)
            elif KIND == "exchange":
                o = pc.atomic.exchange(D, j, v)
            else:
                o = pc.atomic.compare_exchange(D, j, C[i], v)
            Old[i] = o
    return rmw


RMW = {t: _kernel(T) for t, T in ((np.int32, i32), (np.uint32, u32), (np.int64, i64), (np.uint64, u64))}


def sequential(kind, D, I, V, C, M):
    """Each active invocation in turn (global index order) applies its operation."""
    D = D.copy()
    old = np.zeros_like(V)
    with np.errstate(over="ignore"):
        for k in np.flatnonzero(M):
            j, v, cur = I[k], V[k], D[I[k]]
            old[k] = cur
            D[j] = {"add": lambda: cur + v, "sub": lambda: cur - v, "min": lambda: min(cur, v),
                    "max": lambda: max(cur, v), "and": lambda: cur & v, "or": lambda: cur | v,
                    "xor": lambda: cur ^ v, "exchange": lambda: v,
                    "compare_exchange": lambda: v if cur == C[k] else cur}[kind]()
    return D, old


@SETTINGS
@given(dtype=st.sampled_from(list(RMW)), kind=st.sampled_from(KINDS), elems=st.integers(1, 20),
       density=st.floats(0, 1), seed=st.integers(0, 2**31), grid=st.integers(1, 3))
def test_atomics_apply_in_invocation_order(dtype, kind, elems, density, seed, grid):
    r = np.random.default_rng(seed)
    n = grid * WG
    info = np.iinfo(dtype)
    big = r.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    small = r.integers(0 if info.min == 0 else -3, 4, n).astype(dtype)
    V = np.where(r.random(n) < 0.5, big, small)            # wrap-arounds and ties both
    C = np.where(r.random(n) < 0.5, small, V)
    D = r.integers(0 if info.min == 0 else -3, 4, elems).astype(dtype)
    I = r.integers(0, elems, n).astype(np.uint32)
    M = (r.random(n) < density).astype(np.uint32)
    Old = np.zeros(n, dtype)
    ref_d, ref_old = sequential(kind, D, I, V, C, M)
    emu(RMW[dtype], grid, D, I, V, C, M, Old, kind)
    np.testing.assert_array_equal(D, ref_d)
    np.testing.assert_array_equal(Old[M != 0], ref_old[M != 0])


@pc.kernel(workgroup_size=64)
def float_sum(X: pc.ReadBuffer[f32], I: pc.ReadBuffer[u32], S: pc.Buffer[f32], Old: pc.Buffer[f32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        Old[i] = pc.atomic.add(S, I[i], X[i])


@SETTINGS
@given(n=st.integers(1, 300), bins=st.integers(1, 5), seed=st.integers(0, 2**31))
def test_float_add_is_a_left_fold_in_invocation_order(n, bins, seed):
    r = np.random.default_rng(seed)
    X = (r.standard_normal(n) * 10 ** r.uniform(-3, 3, n)).astype(np.float32)
    I = r.integers(0, bins, n).astype(np.uint32)
    S = np.zeros(bins, np.float32)
    Old = np.zeros(n, np.float32)
    emu(float_sum, -(-n // 64), X, I, S, Old, n)
    acc = np.zeros(bins, np.float32)
    for k in range(n):
        assert Old[k] == acc[I[k]]
        acc[I[k]] = np.float32(acc[I[k]] + X[k])
    np.testing.assert_array_equal(S, acc)
    np.testing.assert_allclose(S, np.bincount(I, X.astype(np.float64), bins), rtol=1e-4,
                               atol=1e-4 * np.abs(X).sum())


@pc.kernel(workgroup_size=64)
def shared_histogram(X: pc.ReadBuffer[u32], H: pc.Buffer[u32], n: u32, BINS: pc.Const = 16):
    lid = pc.local_invocation_index()
    i = pc.global_invocation_id.x
    sh = pc.shared(u32, BINS)
    if lid < BINS:
        sh[lid] = u32(0)
    pc.barrier()
    if i < n:
        pc.atomic.add(sh, X[i] % u32(BINS), 1)
    pc.barrier()
    if lid < BINS:
        pc.atomic.add(H, lid, sh[lid])


@SETTINGS
@given(n=st.integers(1, 400), seed=st.integers(0, 2**31))
def test_shared_memory_histogram(n, seed):
    X = np.random.default_rng(seed).integers(0, 1000, n).astype(np.uint32)
    H = np.zeros(16, np.uint32)
    emu(shared_histogram, -(-n // 64), X, H, n)
    np.testing.assert_array_equal(H, np.bincount(X % 16, minlength=16))


# ---------------------------------------------------------------- races

@pc.kernel(workgroup_size=32)
def buffer_race(D: pc.Buffer[u32], MODE: pc.Const):
    i = pc.local_invocation_index()
    if MODE == "read_after":
        pc.atomic.add(D, 0, 1)
        if i == 5:
            D[1] = D[0]                                     # PLAIN READ
    elif MODE == "store_before":
        if i == 3:
            D[0] = u32(7)                                   # PLAIN STORE
        pc.atomic.max(D, 0, i)                              # ATOMIC
    else:                                                   # own element: no race
        pc.atomic.add(D, i, 1)
        D[i] = D[i] * u32(2)


def test_plain_access_racing_with_an_atomic_on_a_buffer():
    with pytest.raises(pc.EmulatorError) as e:
        emu(buffer_race, 1, np.zeros(32, np.uint32), "read_after")
    assert "data race: this load accesses element 0 of buffer 'D'" in str(e.value)
    assert "conflicting accesses" in e.value.rule and "pycoop.atomic" in e.value.hint
    assert e.value.rule_id == "emulator.atomic-race"
    assert e.value.loc.line == line_of(buffer_race, "# PLAIN READ")
    with pytest.raises(pc.EmulatorError) as e:
        emu(buffer_race, 1, np.zeros(32, np.uint32), "store_before")
    assert "this atomic operation accesses element 0" in str(e.value)
    assert e.value.loc.line == line_of(buffer_race, "# ATOMIC")
    D = np.arange(32, dtype=np.uint32)
    emu(buffer_race, 1, D, "own")
    np.testing.assert_array_equal(D, (np.arange(32) + 1) * 2)


@pc.kernel(workgroup_size=32)
def shared_race(O: pc.Buffer[u32], MODE: pc.Const):
    i = pc.local_invocation_index()
    sh = pc.shared(u32, 4)
    if MODE != "unwritten":
        if i < 4:
            sh[i] = u32(0)
        pc.barrier()
    pc.atomic.add(sh, i % u32(4), 1)                         # ATOMIC
    if MODE == "barrier":
        pc.barrier()
    if i < 4:
        O[i] = sh[i]                                         # READ


def test_shared_atomics_race_with_plain_reads_until_a_barrier():
    O = np.zeros(4, np.uint32)
    emu(shared_race, 1, O, "barrier")
    np.testing.assert_array_equal(O, [8, 8, 8, 8])
    with pytest.raises(pc.EmulatorError) as e:
        emu(shared_race, 1, O, "race")
    assert "data race" in str(e.value) and e.value.loc.line == line_of(shared_race, "# READ")
    with pytest.raises(pc.EmulatorError) as e:
        emu(shared_race, 1, O, "unwritten")
    assert "nothing in its workgroup wrote" in str(e.value)
    assert e.value.loc.line == line_of(shared_race, "# ATOMIC")


# ---------------------------------------------------------------- capabilities and features

def _reqs(T, kind, where, semantics="relaxed"):
    @pc.kernel(workgroup_size=32)
    def k(B: pc.Buffer[T], O: pc.Buffer[T], KIND: pc.Const, WHERE: pc.Const, SEM: pc.Const):
        i = pc.local_invocation_index()
        if WHERE == "shared":
            sh = pc.shared(T, 32)
            sh[i] = B[i]
            pc.barrier()
            O[i] = getattr(pc.atomic, KIND)(sh, u32(0), B[i], semantics=SEM)
        else:
            O[i] = getattr(pc.atomic, KIND)(B, u32(0), B[i], semantics=SEM)
    return k.compile(KIND=kind, WHERE=where, SEM=semantics).requirements


@pytest.mark.parametrize("T, kind, where, caps, features, exts", [
    (u32, "add", "buffer", {"VulkanMemoryModelDeviceScope"}, {"vulkanMemoryModelDeviceScope"}, set()),
    (u32, "xor", "shared", set(), set(), set()),
    (i64, "min", "buffer", {"Int64Atomics"}, {"shaderBufferInt64Atomics"}, set()),
    (u64, "add", "shared", {"Int64Atomics"}, {"shaderSharedInt64Atomics"}, set()),
    (f32, "add", "buffer", {"AtomicFloat32AddEXT"}, {"shaderBufferFloat32AtomicAdd"},
     {"VK_EXT_shader_atomic_float"}),
    (f32, "max", "shared", {"AtomicFloat32MinMaxEXT"}, {"shaderSharedFloat32AtomicMinMax"},
     {"VK_EXT_shader_atomic_float2"}),
    (pc.f16, "add", "buffer", {"AtomicFloat16AddEXT"}, {"shaderBufferFloat16AtomicAdd"},
     {"VK_EXT_shader_atomic_float2"}),
    (pc.f64, "min", "buffer", {"AtomicFloat64MinMaxEXT"}, {"shaderBufferFloat64AtomicMinMax"},
     {"VK_EXT_shader_atomic_float2"}),
])
def test_capabilities_features_and_extensions_per_type_and_storage(T, kind, where, caps, features, exts):
    r = _reqs(T, kind, where)
    assert caps <= set(r["capabilities"])
    assert features <= set(r["features"])
    assert exts <= set(r["extensions"])
    if where == "shared":
        assert "VulkanMemoryModelDeviceScope" not in r["capabilities"]


@pc.kernel(workgroup_size=32)
def with_semantics(B: pc.Buffer[u32], O: pc.Buffer[u32], SEM: pc.Const):
    i = pc.local_invocation_index()
    sh = pc.shared(u32, 1)
    if i == 0:
        sh[0] = u32(0)
    pc.barrier()
    O[i] = pc.atomic.add(B, 0, 1, semantics=SEM) + u32(100) * pc.atomic.compare_exchange(
        sh, 0, i, i + u32(1), semantics=SEM)


@pytest.mark.parametrize("sem", ["relaxed", "acquire", "release", "acq_rel"])
def test_semantics_change_the_encoding_not_the_result(sem):
    B, O = np.zeros(1, np.uint32), np.zeros(32, np.uint32)
    emu(with_semantics, 1, B, O, sem)        # the session's codegen test validates the module
    # in invocation order, invocation k finds the counter at k and sh at k (== its index, so
    # its compare-exchange succeeds and sets k + 1 for the next)
    np.testing.assert_array_equal(O, 101 * np.arange(32))
    words = np.frombuffer(with_semantics.compile(SEM=sem).spv, np.uint32)
    assert len(words) > 0


def test_the_device_check_names_missing_atomic_features():
    dev = Capabilities("dev", "x", "1", "1.3", "cpu", extensions=("VK_EXT_shader_atomic_float",),
                       features={"shaderBufferFloat32AtomicAdd": False})
    r = _reqs(f32, "add", "buffer")
    assert "feature shaderBufferFloat32AtomicAdd" in dev.missing(r)


# ---------------------------------------------------------------- misuse

def _error(fn):
    k = pc.kernel(workgroup_size=32)(fn)
    with pytest.raises(pc.CompileError) as e:
        k.compile()
    return e.value


def test_misuse_is_a_compile_error_at_the_line():
    def read_only(B: pc.ReadBuffer[u32]):
        pc.atomic.add(B, 0, 1)                              # BAD
    e = _error(read_only)
    assert "read-only buffer" in e.message and e.rule and e.line == line_of(read_only, "# BAD")
    assert e.rule_id == "core.read-only-store"

    def float_sub(B: pc.Buffer[f32]):
        pc.atomic.sub(B, 0, 1.0)                            # BAD
    e = _error(float_sub)
    assert "atomic sub is not available on elements of type f32" in e.message
    assert "add, min and max on f16, f32 and f64" in e.rule and e.line == line_of(float_sub, "# BAD")
    assert e.rule_id == "atomic.element-type"

    def float_cas(B: pc.Buffer[f32]):
        pc.atomic.compare_exchange(B, 0, 1.0, 2.0)          # BAD
    assert _error(float_cas).line == line_of(float_cas, "# BAD")

    def narrow(B: pc.Buffer[pc.u16]):
        pc.atomic.add(B, 0, 1)                              # BAD
    assert "32- or 64-bit integers" in _error(narrow).rule

    def bf16(B: pc.Buffer[pc.bf16]):
        pc.atomic.add(B, 0, pc.bf16(1.0))                   # BAD
    assert _error(bf16).line == line_of(bf16, "# BAD")

    def mismatch(B: pc.Buffer[u32], v: i32):
        pc.atomic.max(B, 0, v)                              # BAD
    e = _error(mismatch)
    assert "got a i32 operand" in e.message and e.hint == "cast it: u32(value)"
    assert e.rule_id == "atomic.value-type"
    assert e.line == line_of(mismatch, "# BAD")

    def not_memory(B: pc.Buffer[u32], n: u32):
        pc.atomic.add(n, 0, 1)                              # BAD
    e = _error(not_memory)
    assert "needs a buffer or shared array, not u32" in e.message and "Pointer" in e.rule
    assert e.rule_id == "atomic.pointer"
    assert e.line == line_of(not_memory, "# BAD")

    def python_memory(B: pc.Buffer[u32]):
        pc.atomic.add(np.zeros(4, np.uint32), 0, 1)        # BAD
    e = _error(python_memory)
    assert "needs a buffer or shared array, not a Python ndarray" in e.message
    assert e.rule_id == "atomic.pointer" and e.line == line_of(python_memory, "# BAD")

    def write_only(B: pc.WriteBuffer[u32]):
        pc.atomic.or_(B, 0, 1)                              # BAD
    e = _error(write_only)
    assert "write-only buffer" in e.message and e.line == line_of(write_only, "# BAD")
    assert e.rule_id == "core.write-only-read"

    def float_index(B: pc.Buffer[u32], x: f32):
        pc.atomic.add(B, x, 1)                              # BAD
    e = _error(float_index)
    assert "index must be an integer, not f32" in e.message and e.line == line_of(float_index, "# BAD")
    assert e.rule_id == "core.index-integer"

    def semantics(B: pc.Buffer[u32]):
        pc.atomic.add(B, 0, 1, semantics="seq_cst")         # BAD
    e = _error(semantics)
    assert "unknown atomic semantics 'seq_cst'" in e.message and e.line == line_of(semantics, "# BAD")
    assert e.rule_id == "atomic.semantics"


@pc.kernel(workgroup_size=32)
def out_of_bounds(B: pc.Buffer[u32], n: u32):
    pc.atomic.add(B, pc.local_invocation_index() + n, 1)     # OOB


def test_an_atomic_out_of_bounds_is_reported():
    emu(out_of_bounds, 1, np.zeros(40, np.uint32), 8)
    with pytest.raises(pc.EmulatorError) as e:
        emu(out_of_bounds, 1, np.zeros(40, np.uint32), 9)
    assert "invocation 31: atomic operation out of bounds of buffer 'B' (40 elements)" in str(e.value)
    assert e.value.loc.line == line_of(out_of_bounds, "# OOB")
    assert e.value.rule_id == "emulator.undefined-behaviour"
