"""The addressing rules of OpCooperativeMatrixLoadKHR / OpCooperativeMatrixStoreKHR:

* VUID-RuntimeSpirv-OpCooperativeMatrixLoadKHR-08986: the Pointer and the Stride are aligned to
  the lesser of 16 bytes and the size of a row (row major) or column (column major);
* SPV_KHR_cooperative_matrix: Stride >= 0 for a load, > 0 for a store.

A trace that proves a rule broken (a constant, or an offset like `w * 256 + 1` that is odd
whatever `w` is) is a CompileError at the line; the emulator reports the rest as undefined
behaviour at the line, for buffers and shared memory, fused loops included."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f16, f32, i32, u8, u16, u32, u64
from pycoop.ops.known_bits import exact, low_bits

from core_helpers import FEW, SETTINGS, emu, line_of

ALIGN = "VUID-RuntimeSpirv-OpCooperativeMatrixLoadKHR-08986"
STRIDE = "Stride must be greater than 0 when passed to OpCooperativeMatrixStoreKHR"
M16 = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.Accumulator]        # rows of 32 bytes: 16
M8 = pc.coopmat[u8, pc.Subgroup, 16, 8, pc.Accumulator]           # rows of 8 bytes: 8
MA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
MB = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseB]
Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]


def compile_error(fn) -> pc.CompileError:
    with pytest.raises(pc.CompileError) as e:
        fn.compile()
    return e.value


# --------------------------------------------------------------------------- trace time

def test_issue_kernel_offset_odd_in_every_workgroup():
    @pc.kernel(workgroup_size=32)
    def k(C: pc.Buffer[f16]):
        w = pc.workgroup_id.x
        m = M16.load(C, w * 256 + 1, 16)                         # MISALIGNED
        pc.store(C, w * 256, m, 16)

    e = compile_error(k)
    assert "load offset is 1 more than a multiple of 256 in every invocation" in e.message
    assert "not a multiple of 16 bytes: the pointer is misaligned" in e.message
    assert ALIGN in e.rule and "multiples of 8 elements" in e.hint
    assert e.loc.line == line_of(k, "# MISALIGNED")


@pytest.mark.parametrize("off, stride, what", [(4, 16, "offset is 4 (8 bytes)"),
                                               (0, 20, "stride is 20 (40 bytes)"),
                                               (3, 24, "offset is 3 (6 bytes)")])
def test_constant_store_offset_or_stride(off, stride, what):
    @pc.kernel(workgroup_size=32)
    def k(C: pc.Buffer[f16]):
        pc.store(C, off, M16.fill(1.0), stride)                  # STORE

    e = compile_error(k)
    assert f"cooperative matrix store {what}, not a multiple of 16 bytes" in e.message
    assert ALIGN in e.rule and e.loc.line == line_of(k, "# STORE")
    assert e.rule_id == "khr.alignment"


def test_shared_memory_offsets_count_too():
    @pc.kernel(workgroup_size=32)
    def k(C: pc.Buffer[f16]):
        sh = pc.shared(f16, 1024)
        pc.store(sh, pc.subgroup_id() * 512 + 8, M16.fill(1.0), 16)
        pc.barrier()
        pc.store(C, 0, M16.load(sh, 8 * pc.subgroup_id() + 2, 16), 16)   # SHARED

    e = compile_error(k)
    assert "load offset is 2 more than a multiple of 8" in e.message
    assert e.loc.line == line_of(k, "# SHARED")


def test_the_lesser_of_16_bytes_and_a_row_or_column():
    """u8 16x8: a row is 8 bytes (row major: 8-byte alignment), a column 16 (column major: 16)."""
    @pc.kernel(workgroup_size=32)
    def row_major(C: pc.Buffer[u8]):
        pc.store(C, 8, M8.load(C, 24, 8), 40)

    @pc.kernel(workgroup_size=32)
    def col_major(C: pc.Buffer[u8]):
        pc.store(C, 8, M8.load(C, 32, 16, "col_major"), 48, "col_major")   # COL

    row_major.compile()
    e = compile_error(col_major)
    assert "store offset is 8 (8 bytes), not a multiple of 16 bytes" in e.message
    assert e.loc.line == line_of(col_major, "# COL")


def test_elements_wider_than_the_alignment_are_always_aligned():
    """A buffer of uvec4 (16 bytes) read as f16 matrices: any element offset is aligned."""
    @pc.kernel(workgroup_size=32)
    def k(C: pc.Buffer[pc.vec(u32, 4)], o: u32):
        pc.store(C, o + 3, M16.load(C, o + 1, 3), 5)

    k.compile()


@pytest.mark.parametrize("typed", [True, False], ids=["i32", "python-int"])
@pytest.mark.parametrize("op, stride", [("load", -16), ("store", -16), ("store", 0)])
def test_constant_stride_sign(op, stride, typed):
    """A negative Python int stride breaks the stride rule too (it is not reported as a
    constant that u32 cannot hold)."""
    if op == "load":
        @pc.kernel(workgroup_size=32)
        def k(C: pc.Buffer[f16]):
            pc.store(C, 0, M16.load(C, 256, i32(stride) if typed else stride), 16)    # STRIDE
    else:
        @pc.kernel(workgroup_size=32)
        def k(C: pc.Buffer[f16]):
            pc.store(C, 0, M16.fill(1.0), i32(stride) if typed else stride)           # STRIDE

    e = compile_error(k)
    assert f"cooperative matrix {op} with stride {stride}" in e.message
    assert STRIDE in e.rule and "only a load may use 0" in e.hint
    assert e.rule_id == "khr.stride-sign"
    assert e.loc.line == line_of(k, "# STRIDE")


def test_a_load_with_stride_zero_repeats_a_row():
    @pc.kernel(workgroup_size=32)
    def k(C: pc.Buffer[f16]):
        pc.store(C, 256, M16.load(C, 0, 0), 16)

    c = np.arange(512).astype(np.float16)
    emu(k, 1, c)
    np.testing.assert_array_equal(c[256:].reshape(16, 16), np.tile(c[:16], (16, 1)))


# --------------------------------------------------------------------------- known low bits

_LEAVES = st.one_of(st.integers(0, 2**32 - 1).map(lambda c: ("const", c)), st.just(("x",)),
                    st.just(("y",)))


def _exprs():
    return st.recursive(_LEAVES, lambda sub: st.one_of(
        st.tuples(st.sampled_from(["add", "sub", "mul", "and"]), sub, sub),
        st.tuples(st.just("shl"), sub, st.integers(0, 31)),
        st.tuples(st.just("select"), sub, sub),
        st.tuples(st.just("cast16"), sub)), max_leaves=8)


def _build(e, x, y):
    kind = e[0]
    if kind == "const":
        return u32(e[1])
    if kind in ("x", "y"):
        return x if kind == "x" else y
    if kind == "shl":
        return _build(e[1], x, y) << u32(e[2])
    if kind == "select":
        return pc.select(x < y, _build(e[1], x, y), _build(e[2], x, y))
    if kind == "cast16":
        return u32(u16(_build(e[1], x, y)))
    a, b = _build(e[1], x, y), _build(e[2], x, y)
    return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
            "and": lambda: a & b}[kind]()


def _value(e, x, y):
    """The same expression in Python, wrapping like u32."""
    kind = e[0]
    if kind == "const":
        return e[1]
    if kind in ("x", "y"):
        return x if kind == "x" else y
    if kind == "shl":
        return (_value(e[1], x, y) << e[2]) % 2**32
    if kind == "select":
        return _value(e[1], x, y) if x < y else _value(e[2], x, y)
    if kind == "cast16":
        return _value(e[1], x, y) % 2**16
    a, b = _value(e[1], x, y), _value(e[2], x, y)
    return {"add": a + b, "sub": a - b, "mul": a * b, "and": a & b}[kind] % 2**32


@SETTINGS
@given(expr=_exprs(), seed=st.integers(0, 2**32 - 1))
def test_known_low_bits_hold_in_every_invocation(expr, seed):
    """What the trace claims about an expression's low bits holds for every input, checked
    on the emulator and in Python; a constant expression is known exactly."""
    found = []

    @pc.kernel(workgroup_size=64)
    def k(X: pc.ReadBuffer[u32], Y: pc.ReadBuffer[u32], O: pc.Buffer[u32]):
        i = pc.global_invocation_id.x
        v = _build(expr, X[i], Y[i])
        found.append((low_bits(v), exact(v)))
        O[i] = v

    rng = np.random.default_rng(seed)
    X = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    Y = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    O = np.zeros(64, np.uint32)
    emu(k, 1, X, Y, O)
    (kb, r), c = found[0]
    ref = np.array([_value(expr, int(a), int(b)) for a, b in zip(X, Y)], np.uint64)
    np.testing.assert_array_equal(O, ref.astype(np.uint32))
    assert ((O.astype(np.uint64) % (1 << kb)) == r).all()
    if c is not None:
        assert (O == c).all()


def test_known_low_bits_of_typical_offsets():
    got = {}

    @pc.kernel(workgroup_size=32)
    def k(O: pc.Buffer[u64], n: u32):
        w, s = pc.workgroup_id.x, pc.subgroup_id()
        got["tile"] = low_bits((w * u32(4) + s) * u32(16) * n + u32(8))   # 16 | *, then + 8
        got["shift"] = low_bits((w << u32(5)) + u32(3))
        got["masked"] = low_bits((n + u32(7)) & u32(0xFFFFFFF8))
        got["wide"] = low_bits(u64(w) * u64(12))
        got["const"] = exact(i32(-5) * i32(3))
        O[0] = u64(n)

    k.compile()
    assert got["tile"] == (4, 8)
    assert got["shift"] == (5, 3)
    assert got["masked"] == (3, 0)
    assert got["wide"] == (2, 0)
    assert got["const"] == -15


# --------------------------------------------------------------------------- emulator

@pc.kernel(workgroup_size=64, subgroup_size=32)
def copy_tile(S: pc.Buffer[f16], D: pc.Buffer[f16], so: u32, ss: u32, do: u32, ds: i32,
              shared: u32):
    sg = pc.subgroup_id()
    sh = pc.shared(f16, 2 * 1024)
    if shared == u32(1):
        pc.store(sh, sg * u32(1024) + so, M16.load(S, 0, 16), ss)      # SHARED STORE
        pc.barrier()
        m = M16.load(sh, sg * u32(1024) + so, ss)                     # SHARED LOAD
    else:
        m = M16.load(S, so, ss)                                        # LOAD
    pc.store(D, do, m, ds)                                             # STORE


@SETTINGS
@given(so=st.integers(0, 40), ss=st.integers(16, 40), do=st.integers(0, 40),
       ds=st.integers(-2, 40), shared=st.integers(0, 1))
def test_runtime_offsets_and_strides(so, ss, do, ds, shared):
    S = (np.arange(2048) % 13).astype(np.float16)
    D = np.zeros(2048, np.float16)
    args = (S, D, so, ss, do, ds, shared)
    where = ("SHARED STORE" if so % 8 or ss % 8 else None) if shared else (
        "LOAD" if so % 8 or ss % 8 else None)
    if where is None and (ds <= 0 or do % 8 or ds % 8):
        where = "STORE"
    if where is None:
        emu(copy_tile, 1, *args)
        src = S[:256] if shared else S[so + np.arange(16)[:, None] * ss + np.arange(16)]
        np.testing.assert_array_equal(
            D[do + np.arange(16)[:, None] * ds + np.arange(16)].reshape(16, 16),
            np.asarray(src).reshape(16, 16))
        return
    with pytest.raises(pc.EmulatorError) as e:
        emu(copy_tile, 1, *args)
    assert e.value.loc.line == line_of(copy_tile, f"# {where}")
    assert "undefined behaviour in workgroup (0, 0, 0), scope instance 0:" in e.value.message
    if where == "STORE" and ds <= 0:
        assert f"cooperative matrix store with stride {ds}" in e.value.message
        assert STRIDE in e.value.rule and e.value.rule_id == "khr.stride-sign"
    else:
        assert "misaligned" in e.value.message and ALIGN in e.value.rule
        assert e.value.rule_id == "khr.alignment"
        assert "multiples of 8 elements" in e.value.hint


@pc.kernel(workgroup_size=32)
def negative_load_stride(S: pc.Buffer[f16], s: i32):
    pc.store(S, 0, M16.load(S, 512, s), 16)                            # LOAD


def test_runtime_negative_load_stride():
    S = np.zeros(1024, np.float16)
    with pytest.raises(pc.EmulatorError, match="cooperative matrix load with stride -16") as e:
        emu(negative_load_stride, 1, S, -16)
    assert e.value.loc.line == line_of(negative_load_stride, "# LOAD")
    assert e.value.rule_id == "khr.stride-sign"
    emu(negative_load_stride, 1, S, 0)


@pc.kernel(workgroup_size=32)
def gemm_k_loop(A: pc.ReadBuffer[f16], B: pc.ReadBuffer[f16], C: pc.Buffer[f32], K: u32,
                pad: u32):
    acc = Acc.fill(0.0)
    for k in pc.range(0, K, 16):
        a = MA.load(A, k + pad, K)                                     # A LOAD
        b = MB.load(B, k * u32(16), 16)
        acc = pc.mul_add(a, b, acc)
    pc.store(C, 0, acc, 16)


@FEW
@given(kt=st.integers(2, 5), pad=st.sampled_from([0, 1, 4, 8]))
def test_fused_loop_reports_a_misaligned_load_at_its_line(kt, pad):
    K = 16 * kt
    A = (np.arange(16 * K + 8) % 5).astype(np.float16)
    B = (np.arange(K * 16) % 3).astype(np.float16)
    C = np.zeros(256, np.float32)
    if pad % 8:
        with pytest.raises(pc.EmulatorError, match=f"load offset {pad} .* misaligned") as e:
            emu(gemm_k_loop, 1, A, B, C, K, pad)
        assert e.value.loc.line == line_of(gemm_k_loop, "# A LOAD")
        return
    emu(gemm_k_loop, 1, A, B, C, K, pad)
    a = A[pad:pad + 16 * K].reshape(16, K).astype(np.float32)
    np.testing.assert_array_equal(C.reshape(16, 16), a @ B.reshape(K, 16).astype(np.float32))


@pc.kernel(workgroup_size=64, subgroup_size=32)
def misaligned_where_inactive(C: pc.Buffer[f16], off: u32):
    sg = pc.subgroup_id()
    if sg == u32(0):                         # subgroup 1 would load at a misaligned offset
        pc.store(C, 512, M16.load(C, off * sg, 16), 16)


def test_inactive_scope_instances_are_not_checked():
    C = (np.arange(1024) % 9).astype(np.float16)
    emu(misaligned_where_inactive, 1, C, 3)
    np.testing.assert_array_equal(C[512:768], C[:256])


# --------------------------------------------------------------------------- on a GPU

def _aligned_copy(t, use, rows, cols, layout):
    Mt = pc.coopmat[t, pc.Subgroup, rows, cols, use]

    @pc.kernel(workgroup_size=32)
    def copy(S: pc.ReadBuffer[t], D: pc.Buffer[t], P: pc.ReadBuffer[u32], region: u32):
        w = pc.workgroup_id.x
        so, ss, do, ds = (P[w * u32(4) + u32(i)] for i in range(4))
        pc.store(D, w * region + do, Mt.load(S, so, ss, layout), ds, layout)
    return copy


@pytest.mark.gpu
@pytest.mark.parametrize("t, use, rows, cols", [(f16, pc.Accumulator, 16, 16),
                                                (f32, pc.Accumulator, 16, 16),
                                                (u8, pc.UseA, 16, 32)])
@pytest.mark.parametrize("layout", ["row_major", "col_major"])
def test_aligned_offsets_and_strides_copy_exactly_on_the_gpu(t, use, rows, cols, layout):
    """Offsets and strides that keep the rule (multiples of 16 bytes here, not of a whole row)
    copy every element exactly on the GPU, as on the emulator: one workgroup per combination,
    offsets and strides read from a buffer."""
    from pycoop.runtime.backend import vulkan_missing
    k = _aligned_copy(t, use, rows, cols, layout)
    try:
        missing = vulkan_missing(k.compile())
    except pc.BackendUnavailable as e:
        pytest.skip(str(e))
    if missing:
        pytest.skip(f"device lacks {', '.join(missing)}")
    q = 16 // t.size                                     # elements per 16 bytes
    major, minor = (rows, cols) if layout == "row_major" else (cols, rows)
    combos = [(so * q, minor + ps * q, do * q, minor + pd * q)
              for so in (0, 1, 3) for ps in (0, 1, 2) for do in (0, 1, 5) for pd in (0, 1)]
    region = max(do + major * ds for _, _, do, ds in combos)
    size = max(so + major * ss for so, ss, _, _ in combos)
    rng = np.random.default_rng(7)
    S = (rng.integers(0, 256, size) if t == u8 else rng.standard_normal(size)).astype(t.dtype)
    P = np.array(combos, np.uint32).reshape(-1)
    outs = []
    for backend in ("vulkan", "emulator"):
        D = np.zeros(region * len(combos), t.dtype)
        assert k[len(combos)](S, D, P, region, backend=backend).backend == backend
        outs.append(D)
    np.testing.assert_array_equal(outs[0], outs[1])
    r, c = np.arange(rows)[:, None], np.arange(cols)[None, :]
    for w, (so, ss, do, ds) in enumerate(combos):
        src = so + (r * ss + c if layout == "row_major" else c * ss + r)
        dst = w * region + do + (r * ds + c if layout == "row_major" else c * ds + r)
        np.testing.assert_array_equal(outs[1][dst], S[src])
