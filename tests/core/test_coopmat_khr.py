"""SPV_KHR_cooperative_matrix on the emulator: GEMMs of every supported component-type
combination against NumPy, loads/stores in both layouts with padded strides, shared-memory
sources, element-wise arithmetic, length, conversion, undefined-behaviour reports and compile
errors."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pycoop
from pycoop import bf16, f16, f32, i8, i32, u8, u32

from core_helpers import FEW, SETTINGS, emu, line_of

SG = pycoop.Subgroup
T = 16                     # tile edge used throughout
WG = 64                    # two subgroups of 32 per workgroup

# --------------------------------------------------------------------------- GEMM

_GEMMS = {}


def gemm_kernel(ta, tb, tc, saturating=False):
    """D = A @ B + C, one 16x16 tile of D per subgroup, row-major operands."""
    key = (ta, tb, tc, saturating)
    if key in _GEMMS:
        return _GEMMS[key]
    MA = pycoop.coopmat[ta, SG, T, T, pycoop.UseA]
    MB = pycoop.coopmat[tb, SG, T, T, pycoop.UseB]
    MC = pycoop.coopmat[tc, SG, T, T, pycoop.Accumulator]

    @pycoop.kernel(workgroup_size=WG)
    def k_gemm(A: pycoop.Buffer[ta], B: pycoop.Buffer[tb], C: pycoop.Buffer[tc],
               D: pycoop.Buffer[tc], M: u32, N: u32, K: u32):
        tile = pycoop.workgroup_id.x * 2 + pycoop.subgroup_id()
        m0 = tile // (N // 16) * 16
        n0 = tile % (N // 16) * 16
        if m0 < M:                               # uniform within each subgroup
            acc = MC.load(C, m0 * N + n0, N)
            for k in range(0, K, 16):
                a = MA.load(A, m0 * K + k, K)
                b = MB.load(B, k * N + n0, N)
                acc = pycoop.mul_add(a, b, acc, saturating=saturating)
            pycoop.store(D, m0 * N + n0, acc, N)

    _GEMMS[key] = k_gemm
    return k_gemm


def run_gemm(ta, tb, tc, a, b, c, saturating=False):
    M, K = a.shape
    N = b.shape[1]
    d = np.zeros((M, N), tc.dtype)
    tiles = (M // T) * (N // T)
    emu(gemm_kernel(ta, tb, tc, saturating), -(-tiles // 2), a, b, c, d, M, N, K)
    return d


def int_ref(a, b, c, tc, saturating=False):
    exact = a.astype(np.int64) @ b.astype(np.int64) + c.astype(np.int64)
    lo, hi = tc.min_max()
    if saturating:
        return np.clip(exact, lo, hi).astype(tc.dtype)
    return ((exact - lo) % (1 << tc.bits) + lo).astype(tc.dtype)   # low-order bits


def float_check(d, a, b, c, out_t, acc_eps):
    """|D - ref| <= (K + 2) * acc_eps * (|A| @ |B| + |C|) + one rounding to the output type."""
    a64, b64, c64 = (x.astype(np.float64) for x in (a, b, c))
    ref = a64 @ b64 + c64
    K = a.shape[1]
    bound = (K + 2) * acc_eps * (np.abs(a64) @ np.abs(b64) + np.abs(c64))
    bound += float(ml_dtypes.finfo(out_t.dtype).eps) * np.abs(ref) + 1e-30
    err = np.abs(d.astype(np.float64) - ref)
    assert (err <= bound).all(), float(np.max(err - bound))


dims = st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3))


@st.composite
def int_operands(draw, ta, tb, tc):
    tm, tn, tk = draw(dims)
    seed = draw(st.integers(0, 2 ** 32 - 1))
    r = np.random.default_rng(seed)
    lo_a, hi_a = ta.min_max()
    lo_b, hi_b = tb.min_max()
    a = r.integers(lo_a, hi_a + 1, (tm * T, tk * T)).astype(ta.dtype)
    b = r.integers(lo_b, hi_b + 1, (tk * T, tn * T)).astype(tb.dtype)
    lo_c, hi_c = tc.min_max()
    c = r.integers(max(lo_c, -10 ** 6), min(hi_c, 10 ** 6), (tm * T, tn * T)).astype(tc.dtype)
    return a, b, c


@st.composite
def float_operands(draw, tin, tc):
    tm, tn, tk = draw(dims)
    r = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    a = r.standard_normal((tm * T, tk * T)).astype(np.float32).astype(tin.dtype)
    b = r.standard_normal((tk * T, tn * T)).astype(np.float32).astype(tin.dtype)
    c = r.standard_normal((tm * T, tn * T)).astype(np.float32).astype(tc.dtype)
    return a, b, c


@SETTINGS
@given(float_operands(f16, f32))
def test_gemm_f16_to_f32(ops):
    a, b, c = ops
    d = run_gemm(f16, f16, f32, a, b, c)
    float_check(d, a, b, c, f32, 2.0 ** -24)


@SETTINGS
@given(float_operands(f16, f16))
def test_gemm_f16_to_f16(ops):
    a, b, c = ops
    d = run_gemm(f16, f16, f16, a, b, c)
    # devices may accumulate in f16: allow f16 precision for the accumulation
    float_check(d, a, b, c, f16, 2.0 ** -11)


@SETTINGS
@given(float_operands(bf16, f32))
def test_gemm_bf16_to_f32(ops):
    a, b, c = ops
    d = run_gemm(bf16, bf16, f32, a, b, c)
    float_check(d, a, b, c, f32, 2.0 ** -24)


def test_gemm_f16_small_integers_is_exact():
    r = np.random.default_rng(1)
    a = r.integers(-8, 8, (32, 48)).astype(np.float16)
    b = r.integers(-8, 8, (48, 32)).astype(np.float16)
    c = r.integers(-100, 100, (32, 32)).astype(np.float32)
    d = run_gemm(f16, f16, f32, a, b, c)
    np.testing.assert_array_equal(d, (a.astype(np.int64) @ b.astype(np.int64) + c).astype(np.float32))


@SETTINGS
@given(int_operands(i8, i8, i32))
def test_gemm_i8_to_i32_signed(ops):
    a, b, c = ops
    np.testing.assert_array_equal(run_gemm(i8, i8, i32, a, b, c), int_ref(a, b, c, i32))


@SETTINGS
@given(int_operands(u8, u8, u32))
def test_gemm_u8_to_u32(ops):
    a, b, c = ops
    np.testing.assert_array_equal(run_gemm(u8, u8, u32, a, b, c), int_ref(a, b, c, u32))


@FEW
@given(int_operands(i8, u8, i32))
def test_gemm_mixed_signedness(ops):
    a, b, c = ops
    np.testing.assert_array_equal(run_gemm(i8, u8, i32, a, b, c), int_ref(a, b, c, i32))


def test_gemm_signedness_comes_from_the_component_type():
    """The same bytes multiply differently as i8 and as u8."""
    a = np.full((16, 16), -1, np.int8)
    b = np.ones((16, 16), np.int8)
    c = np.zeros((16, 16), np.int32)
    d_signed = run_gemm(i8, i8, i32, a, b, c)
    d_unsigned = run_gemm(u8, u8, u32, a.view(np.uint8), b.view(np.uint8), c.view(np.uint32))
    assert (d_signed == -16).all() and (d_unsigned == 255 * 16).all()


@pytest.mark.parametrize("sign", [1, -1])
def test_gemm_saturating_i8_to_i32_overflow(sign):
    a = np.full((16, 32), 127 * sign, np.int8)
    b = np.full((32, 16), 127, np.int8)
    lim = np.iinfo(np.int32).max if sign > 0 else np.iinfo(np.int32).min
    c = np.full((16, 16), lim - sign * 1000, np.int32)
    c[0, :] = 0                               # no overflow in this row
    sat = run_gemm(i8, i8, i32, a, b, c, saturating=True)
    wrap = run_gemm(i8, i8, i32, a, b, c, saturating=False)
    np.testing.assert_array_equal(sat, int_ref(a, b, c, i32, saturating=True))
    np.testing.assert_array_equal(wrap, int_ref(a, b, c, i32, saturating=False))
    assert (sat[1:] == lim).all() and (sat[0] == sign * 127 * 127 * 32).all()
    assert (np.sign(wrap[1:].astype(np.int64)) == -sign).all()     # wrapped around


@FEW
@given(int_operands(i8, i8, i32))
def test_gemm_saturating_without_overflow_equals_plain(ops):
    a, b, c = ops
    np.testing.assert_array_equal(run_gemm(i8, i8, i32, a, b, c, saturating=True),
                                  run_gemm(i8, i8, i32, a, b, c))


# --------------------------------------------------------------------------- layouts and strides

_COPIES = {}


def copy_kernel(t, use, rows, cols, src_layout, dst_layout):
    key = (t, use, rows, cols, src_layout, dst_layout)
    if key in _COPIES:
        return _COPIES[key]
    Mt = pycoop.coopmat[t, SG, rows, cols, use]

    @pycoop.kernel(workgroup_size=32)
    def k_copy(S: pycoop.ReadBuffer[t], D: pycoop.Buffer[t], so: u32, ss: u32, do: u32, ds: u32):
        m = Mt.load(S, so, ss, src_layout)
        pycoop.store(D, do, m, ds, dst_layout)

    _COPIES[key] = k_copy
    return k_copy


def read_block(buf, off, stride, rows, cols, layout):
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    idx = off + (r * stride + c if layout == "row_major" else c * stride + r)
    return buf[idx]


@SETTINGS
@given(st.sampled_from([(16, 16), (16, 8), (8, 32)]),
       st.sampled_from(["row_major", "col_major"]), st.sampled_from(["row_major", "col_major"]),
       st.sampled_from([pycoop.UseA, pycoop.UseB, pycoop.Accumulator]),
       *[st.integers(0, 5).map(lambda n: 4 * n)] * 4)
def test_load_store_layouts_with_padded_strides(shape, src_l, dst_l, use, pad_s, pad_d, so, do):
    """Offsets and paddings are multiples of 4 f32s: the pointer and stride of a matrix load
    or store must be 16-byte aligned here (rows/columns are at least 32 bytes)."""
    rows, cols = shape
    minor_s = cols if src_l == "row_major" else rows
    minor_d = cols if dst_l == "row_major" else rows
    ss, ds = minor_s + pad_s, minor_d + pad_d
    major_s = rows if src_l == "row_major" else cols
    major_d = rows if dst_l == "row_major" else cols
    src = np.random.default_rng(so * 31 + pad_s).standard_normal(so + major_s * ss).astype(np.float32)
    dst = np.full(do + major_d * ds, -7.0, np.float32)
    emu(copy_kernel(f32, use, rows, cols, src_l, dst_l), 1, src, dst, so, ss, do, ds)
    block = read_block(src, so, ss, rows, cols, src_l)
    np.testing.assert_array_equal(read_block(dst, do, ds, rows, cols, dst_l), block)
    # nothing outside the block was written
    written = np.zeros(len(dst), bool)
    r, c = np.arange(rows)[:, None], np.arange(cols)[None, :]
    written[do + (r * ds + c if dst_l == "row_major" else c * ds + r)] = True
    assert (dst[~written] == -7.0).all()


def test_column_major_load_is_the_transpose():
    src = np.arange(256, dtype=np.float32)
    row = np.zeros(256, np.float32)
    emu(copy_kernel(f32, pycoop.Accumulator, 16, 16, "col_major", "row_major"), 1, src, row,
        0, 16, 0, 16)
    np.testing.assert_array_equal(row.reshape(16, 16), src.reshape(16, 16).T)


def test_block_out_of_bounds_is_reported():
    k = copy_kernel(f32, pycoop.Accumulator, 16, 16, "row_major", "row_major")
    src = np.zeros(255, np.float32)
    with pytest.raises(pycoop.EmulatorError, match="cooperative matrix load out of bounds") as ei:
        emu(k, 1, src, np.zeros(256, np.float32), 0, 16, 0, 16)
    assert ei.value.loc.line == line_of(k, "m = Mt.load(")
    assert ei.value.rule_id == "emulator.out-of-bounds"
    with pytest.raises(pycoop.EmulatorError, match="cooperative matrix store out of bounds"):
        emu(k, 1, np.zeros(256, np.float32), np.zeros(256, np.float32), 0, 16, 4, 16)


# --------------------------------------------------------------------------- shared memory

MAf = pycoop.coopmat[f16, SG, T, T, pycoop.UseA]
MBf = pycoop.coopmat[f16, SG, T, T, pycoop.UseB]
MCf = pycoop.coopmat[f32, SG, T, T, pycoop.Accumulator]


@pycoop.kernel(workgroup_size=WG)
def k_shared_gemm(A: pycoop.Buffer[f16], B: pycoop.Buffer[f16], D: pycoop.Buffer[f32]):
    """Both subgroups stage A (16x16) in shared memory; subgroup s multiplies by B's tile s."""
    sa = pycoop.shared(f16, 256)
    l = pycoop.local_invocation_index()
    for r in range(4):
        sa[l + 64 * r] = A[l + 64 * r]
    pycoop.barrier()
    s = pycoop.subgroup_id()
    a = MAf.load(sa, 0, 16)
    b = MBf.load(B, s * 16, 32)
    pycoop.store(D, s * 16, pycoop.mul_add(a, b, MCf.fill(0.0)), 32)


@pycoop.kernel(workgroup_size=WG)
def k_shared_racy(A: pycoop.Buffer[f16], D: pycoop.Buffer[f16]):
    sa = pycoop.shared(f16, 256)
    l = pycoop.local_invocation_index()
    for r in range(4):
        sa[l + 64 * r] = A[l + 64 * r]
    a = MAf.load(sa, 0, 16)
    pycoop.store(D, pycoop.subgroup_id() * 256, a, 16)


def test_coopmat_load_from_shared_memory():
    r = np.random.default_rng(3)
    a = r.integers(-4, 5, (16, 16)).astype(np.float16)
    b = r.integers(-4, 5, (16, 32)).astype(np.float16)
    d = np.zeros((16, 32), np.float32)
    emu(k_shared_gemm, 1, a, b, d)
    np.testing.assert_array_equal(d, a.astype(np.float32) @ b.astype(np.float32))


def test_coopmat_load_racing_with_shared_stores_is_reported():
    with pytest.raises(pycoop.EmulatorError, match="data race") as ei:
        emu(k_shared_racy, 1, np.zeros(256, np.float16), np.zeros(512, np.float16))
    assert ei.value.loc.line == line_of(k_shared_racy, "a = MAf.load(sa")
    assert ei.value.rule_id == "emulator.shared-race"


# --------------------------------------------------------------------------- element-wise

MC32 = pycoop.coopmat[f32, SG, T, T, pycoop.Accumulator]
MI32 = pycoop.coopmat[i32, SG, T, T, pycoop.Accumulator]


@pycoop.kernel(workgroup_size=32)
def k_elementwise(X: pycoop.Buffer[f32], Y: pycoop.Buffer[f32], O: pycoop.Buffer[f32], s: f32):
    x = MC32.load(X, 0, 16)
    y = MC32.load(Y, 0, 16)
    pycoop.store(O, 0, x + y, 16)
    pycoop.store(O, 256, x - y, 16)
    pycoop.store(O, 512, x * y, 16)
    pycoop.store(O, 768, x / y, 16)
    pycoop.store(O, 1024, -x, 16)
    pycoop.store(O, 1280, x * s, 16)
    pycoop.store(O, 1536, 0.5 * y, 16)
    pycoop.store(O, 1792, (x + y) * x - MC32.fill(s), 16)


@pycoop.kernel(workgroup_size=32)
def k_elementwise_int(X: pycoop.Buffer[i32], Y: pycoop.Buffer[i32], O: pycoop.Buffer[i32]):
    x = MI32.load(X, 0, 16)
    y = MI32.load(Y, 0, 16)
    pycoop.store(O, 0, x + y, 16)
    pycoop.store(O, 256, x - y, 16)
    pycoop.store(O, 512, x * y, 16)
    pycoop.store(O, 768, x // y, 16)
    pycoop.store(O, 1024, -x, 16)


def rounded(fn, *xs, dtype=np.float32):
    with np.errstate(all="ignore"):
        return fn(*(x.astype(np.float64) for x in xs)).astype(dtype)


@SETTINGS
@given(st.integers(0, 2 ** 32 - 1), st.floats(-4, 4, width=32))
def test_elementwise_float_ops(seed, s):
    r = np.random.default_rng(seed)
    x = r.standard_normal(256).astype(np.float32)
    y = r.standard_normal(256).astype(np.float32)
    y[y == 0] = 1
    o = np.zeros(2048, np.float32)
    emu(k_elementwise, 1, x, y, o, s)
    s32 = np.float32(s)
    parts = o.reshape(8, 256)
    np.testing.assert_array_equal(parts[0], rounded(np.add, x, y))
    np.testing.assert_array_equal(parts[1], rounded(np.subtract, x, y))
    np.testing.assert_array_equal(parts[2], rounded(np.multiply, x, y))
    np.testing.assert_array_equal(parts[3], rounded(np.divide, x, y))
    np.testing.assert_array_equal(parts[4], -x)
    np.testing.assert_array_equal(parts[5], rounded(np.multiply, x, np.full(256, s32)))
    np.testing.assert_array_equal(parts[6], rounded(np.multiply, y, np.full(256, 0.5, np.float32)))
    t = rounded(np.multiply, rounded(np.add, x, y), x)
    np.testing.assert_array_equal(parts[7], rounded(np.subtract, t, np.full(256, s32)))


@FEW
@given(st.integers(0, 2 ** 32 - 1))
def test_elementwise_int_ops_wrap_and_truncate(seed):
    r = np.random.default_rng(seed)
    x = r.integers(-2 ** 31, 2 ** 31, 256).astype(np.int32)
    y = r.integers(-2 ** 31, 2 ** 31, 256).astype(np.int32)
    y[:16] = r.integers(-9, 10, 16)
    y[y == 0] = 3
    y[(x == -2 ** 31) & (y == -1)] = 2
    o = np.zeros(1280, np.int32)
    emu(k_elementwise_int, 1, x, y, o)
    xs, ys = x.astype(np.int64), y.astype(np.int64)
    wrap = lambda v: ((v + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)   # noqa: E731
    q = np.abs(xs) // np.abs(ys) * np.sign(xs) * np.sign(ys)
    parts = o.reshape(5, 256)
    for got, exp in zip(parts, [xs + ys, xs - ys, xs * ys, q, -xs]):
        np.testing.assert_array_equal(got, wrap(exp))


@pycoop.kernel(workgroup_size=64)
def k_length(L: pycoop.Buffer[u32]):
    i = pycoop.local_invocation_index()
    L[i] = pycoop.length(MC32) * 1000 + pycoop.length(pycoop.coopmat[f16, SG, 16, 8, pycoop.UseA])


def test_length_is_elements_per_invocation():
    out = np.zeros(64, np.uint32)
    emu(k_length, 1, out)
    assert (out == (256 // 32) * 1000 + 128 // 32).all()
    out16 = np.zeros(64, np.uint32)
    emu(k_length, 1, out16, subgroup_size=16)
    assert (out16 == 16 * 1000 + 8).all()


@pycoop.kernel(workgroup_size=32)
def k_convert(X: pycoop.Buffer[f32], H: pycoop.Buffer[f16], I: pycoop.Buffer[i32]):
    x = MC32.load(X, 0, 16)
    pycoop.store(H, 0, pycoop.convert(x, f16), 16)
    pycoop.store(I, 0, pycoop.convert(x, i32), 16)
    pycoop.store(X, 0, pycoop.convert(pycoop.convert(x, f16), f32), 16)


def test_convert_f32_to_f16_rounds_to_nearest_even_and_to_int_truncates():
    h = 2.0 ** -11
    x = np.random.default_rng(5).uniform(-1000, 1000, 256).astype(np.float32)
    x[:6] = [1 + h, 1 + 3 * h, -(1 + h), 65520.0 - 1, -2.5, 2.5]
    orig = x.copy()
    hh = np.zeros(256, np.float16)
    ii = np.zeros(256, np.int32)
    emu(k_convert, 1, x, hh, ii)
    np.testing.assert_array_equal(hh, orig.astype(np.float16))
    assert hh[:6].astype(np.float64).tolist() == [1.0, 1 + 4 * h, -1.0, 65504.0, -2.5, 2.5]
    assert ii.tolist() == [int(v) for v in orig.tolist()]
    np.testing.assert_array_equal(x, orig.astype(np.float16).astype(np.float32))


# --------------------------------------------------------------------------- undefined behaviour

@pycoop.kernel(workgroup_size=64)
def k_divergent_mul_add(A: pycoop.Buffer[f16], B: pycoop.Buffer[f16], D: pycoop.Buffer[f32],
                        split: u32):
    acc = MCf.fill(0.0)
    a = MAf.load(A, 0, 16)
    b = MBf.load(B, 0, 16)
    if pycoop.local_invocation_index() < split:
        acc = pycoop.mul_add(a, b, acc)
    pycoop.store(D, 0, acc, 16)


@pycoop.kernel(workgroup_size=64)
def k_divergent_load(A: pycoop.Buffer[f32], D: pycoop.Buffer[f32], split: u32):
    if pycoop.local_invocation_index() < split:
        pycoop.store(D, pycoop.subgroup_id() * 256, MC32.load(A, 0, 16), 16)


@pycoop.kernel(workgroup_size=32)
def k_nonuniform_offset(A: pycoop.Buffer[f32], D: pycoop.Buffer[f32]):
    m = MC32.load(A, pycoop.local_invocation_index(), 16)
    pycoop.store(D, 0, m, 16)


@pycoop.kernel(workgroup_size=64)
def k_store_stride(A: pycoop.Buffer[f32], D: pycoop.Buffer[f32], stride: u32):
    pycoop.store(D, 0, MC32.load(A, 0, 16), stride)


def test_mul_add_under_divergent_control_flow_is_reported():
    a = np.zeros(256, np.float16)
    d = np.zeros(256, np.float32)
    for split in (0, 32, 64):                 # subgroup-uniform splits are fine
        emu(k_divergent_mul_add, 1, a, a, d, split)
    with pytest.raises(pycoop.EmulatorError, match="only part of subgroup") as ei:
        emu(k_divergent_mul_add, 1, a, a, d, 17)
    assert ei.value.loc.line == line_of(k_divergent_mul_add, "acc = pycoop.mul_add(a, b, acc)")


def test_load_under_divergent_control_flow_is_reported():
    a = np.arange(256, dtype=np.float32)
    d = np.zeros(512, np.float32)
    emu(k_divergent_load, 1, a, d, 32)          # only subgroup 0
    np.testing.assert_array_equal(d[:256], a)
    assert (d[256:] == 0).all()
    with pytest.raises(pycoop.EmulatorError, match="only part of subgroup 1") as ei:
        emu(k_divergent_load, 1, a, d, 40)
    assert ei.value.loc.line == line_of(k_divergent_load, "MC32.load(A, 0, 16)")
    assert ei.value.rule_id == "khr.scope-all-active"


def test_non_uniform_load_offset_is_reported():
    with pytest.raises(pycoop.EmulatorError, match="load offset differs") as ei:
        emu(k_nonuniform_offset, 1, np.zeros(512, np.float32), np.zeros(256, np.float32))
    assert ei.value.loc.line == line_of(k_nonuniform_offset, "MC32.load(A, pycoop.local")
    assert ei.value.rule_id == "khr.scope-uniform-operands"


def test_store_with_stride_zero_is_reported():
    a = np.zeros(256, np.float32)
    with pytest.raises(pycoop.EmulatorError, match="Stride must be greater than 0") as ei:
        emu(k_store_stride, 1, a, np.zeros(256, np.float32), 0)
    assert ei.value.loc.line == line_of(k_store_stride, "pycoop.store(D, 0")
    assert ei.value.rule_id == "khr.stride-sign"
    emu(k_store_stride, 1, a, np.zeros(256, np.float32), 16)


# --------------------------------------------------------------------------- compile errors

def _mats(comp=f16, acc=f32, scope_b=SG, kb=T):
    return (pycoop.coopmat[comp, SG, T, T, pycoop.UseA],
            pycoop.coopmat[comp, scope_b, kb, T, pycoop.UseB],
            pycoop.coopmat[acc, SG, T, T, pycoop.Accumulator])


def _mul_add_kernel(MA, MB, MC, saturating=False, swap=False):
    @pycoop.kernel(workgroup_size=32)
    def k_bad_mul_add(A: pycoop.Buffer[MA.component], B: pycoop.Buffer[MB.component],
                      D: pycoop.Buffer[MC.component]):
        a = MA.load(A, 0, 16)
        b = MB.load(B, 0, 16)
        c = MC.fill(0)
        d = pycoop.mul_add(b if swap else a, a if swap else b, c, saturating=saturating)  # HERE
        pycoop.store(D, 0, d, 16)
    return k_bad_mul_add


@pytest.mark.parametrize("kernel_args,msg", [
    (dict(swap=True), "operand A of mul_add has use B, expected A"),
    (dict(kb=8), "shapes do not match"),
    (dict(scope_b=pycoop.Workgroup), "different scopes"),
    (dict(acc=i32), "mixes float and integer"),
    (dict(comp=i8, acc=f32), "mixes float and integer"),
    (dict(saturating=True), "saturating accumulation applies to integer"),
])
def test_mul_add_compile_errors_name_the_line(kernel_args, msg):
    kw = {k: kernel_args[k] for k in ("comp", "acc", "scope_b", "kb") if k in kernel_args}
    MA, MB, MC = _mats(**kw)
    k = _mul_add_kernel(MA, MB, MC, saturating=kernel_args.get("saturating", False),
                        swap=kernel_args.get("swap", False))
    with pytest.raises(pycoop.CompileError, match=msg) as ei:
        k.compile()
    assert ei.value.line == line_of(k, "# HERE")
    assert ei.value.rule
    ids = {"has use B": "mul-add-use", "shapes": "mul-add-shape", "scopes": "mul-add-scope",
           "mixes": "mul-add-kinds", "saturating": "saturating-integer"}
    assert ei.value.rule_id == "khr." + next(v for k, v in ids.items() if k in msg)


@pycoop.kernel(workgroup_size=32)
def k_load_from_scalar(A: pycoop.Buffer[f32], n: u32):
    m = MC32.load(n, 0, 16)
    pycoop.store(A, 0, m, 16)


@pycoop.kernel(workgroup_size=32)
def k_store_readonly(A: pycoop.ReadBuffer[f32]):
    m = MC32.load(A, 0, 16)
    pycoop.store(A, 0, m, 16)


@pycoop.kernel(workgroup_size=32)
def k_store_scalar_as_matrix(A: pycoop.Buffer[f32]):
    pycoop.store(A, 0, A[0], 16)


@pycoop.kernel(workgroup_size=32)
def k_bad_layout(A: pycoop.Buffer[f32]):
    m = MC32.load(A, 0, 16, "diagonal")


@pycoop.kernel(workgroup_size=32)
def k_scale_int(A: pycoop.Buffer[i32]):
    m = MI32.load(A, 0, 16)
    pycoop.store(A, 0, m * 3, 16)


@pycoop.kernel(workgroup_size=32)
def k_mat_plus_other_type(A: pycoop.Buffer[f32]):
    m = MC32.load(A, 0, 16)
    pycoop.store(A, 0, m + pycoop.convert(m, f16), 16)


@pycoop.kernel(workgroup_size=32)
def k_mat_bitwise(A: pycoop.Buffer[i32]):
    m = MI32.load(A, 0, 16)
    pycoop.store(A, 0, m & m, 16)


@pycoop.kernel(workgroup_size=32)
def k_convert_use(A: pycoop.Buffer[f32]):
    m = MC32.load(A, 0, 16)
    pycoop.convert(m, pycoop.coopmat[f32, SG, 16, 16, pycoop.UseA])


@pycoop.kernel(workgroup_size=32)
def k_float_matrix_floordiv(A: pycoop.Buffer[f32]):
    m = MC32.load(A, 0, 16)
    pycoop.store(A, 0, m // m, 16)


@pycoop.kernel(workgroup_size=32)
def k_convert_bool(A: pycoop.Buffer[f32]):
    m = MC32.load(A, 0, 16)
    b = pycoop.convert(m, pycoop.bool_)          # a bool matrix type fails spirv-val


@pycoop.kernel(workgroup_size=32)
def k_layout_list(A: pycoop.Buffer[f32]):
    m = MC32.load(A, 0, 16, ["row_major"])


@pycoop.kernel(workgroup_size=32)
def k_fill_scalar_type(A: pycoop.Buffer[f32]):
    pycoop.store(A, 0, pycoop.fill(f32, 1.0), 16)


@pytest.mark.parametrize("k,msg,marker", [
    (k_load_from_scalar, "needs a buffer parameter or a shared array, got u32", "MC32.load(n"),
    (k_convert_bool, "unsupported cooperative matrix component type bool", "pycoop.convert(m, pycoop.bool_)"),
    (k_float_matrix_floordiv, "`//` is not defined on f32 matrices", "m // m"),
    (k_layout_list, "unknown layout \\['row_major'\\]", "MC32.load(A, 0, 16, ["),
    (k_fill_scalar_type, "its type must be a coopmat type, got f32", "pycoop.fill(f32"),
    (k_store_readonly, "cannot store into a read-only buffer", "pycoop.store(A, 0, m"),
    (k_store_scalar_as_matrix, "must be a cooperative matrix", "pycoop.store(A, 0, A[0]"),
    (k_bad_layout, "unknown layout 'diagonal'", "MC32.load(A, 0, 16, \"diagonal\")"),
    (k_scale_int, "needs a float component type", "m * 3"),
    (k_mat_plus_other_type, "different types", "m + pycoop.convert"),
    (k_mat_bitwise, "not defined on cooperative matrices", "m & m"),
    (k_convert_use, "cannot change the use", "pycoop.convert(m, pycoop"),
], ids=lambda x: getattr(x, "name", None) or None)
def test_coopmat_compile_errors_name_the_line(k, msg, marker):
    with pytest.raises(pycoop.CompileError, match=msg) as ei:
        k.compile()
    assert ei.value.line == line_of(k, marker)
    assert ei.value.loc.file == __file__
    ids = {"k_load_from_scalar": "khr.pointer", "k_store_readonly": "core.read-only-store",
           "k_store_scalar_as_matrix": "khr.matrix-operand", "k_bad_layout": "khr.layout",
           "k_scale_int": "khr.scalar-float", "k_mat_plus_other_type": "core.operand-types",
           "k_mat_bitwise": "khr.matrix-arithmetic", "k_convert_use": "khr.convert-use",
           "k_convert_bool": "khr.component-type", "k_layout_list": "khr.layout",
           "k_fill_scalar_type": "khr.fill-result-type", "k_float_matrix_floordiv": "khr.matrix-arithmetic"}
    assert ei.value.rule_id == ids[k.name]


# --------------------------------------------------------------------------- more scopes and flow

WA = pycoop.coopmat[f16, pycoop.Workgroup, 32, 16, pycoop.UseA]
WB = pycoop.coopmat[f16, pycoop.Workgroup, 16, 32, pycoop.UseB]
WC = pycoop.coopmat[f32, pycoop.Workgroup, 32, 32, pycoop.Accumulator]


@pycoop.kernel(workgroup_size=64)
def k_workgroup_scope(A: pycoop.Buffer[f16], B: pycoop.Buffer[f16], C: pycoop.Buffer[f32]):
    w = pycoop.workgroup_id.x
    acc = pycoop.mul_add(WA.load(A, w * 512, 16), WB.load(B, 0, 32), WC.fill(1.0))
    pycoop.store(C, w * 1024, acc, 32)


def test_workgroup_scope_matrices():
    r = np.random.default_rng(7)
    a = r.integers(-3, 4, (3, 32, 16)).astype(np.float16)
    b = r.integers(-3, 4, (16, 32)).astype(np.float16)
    c = np.zeros((3, 32, 32), np.float32)
    emu(k_workgroup_scope, 3, a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.float32) @ b.astype(np.float32) + 1)


@pycoop.kernel(workgroup_size=64)
def k_subgroup_trip_count(A: pycoop.Buffer[f16], B: pycoop.Buffer[f16], C: pycoop.Buffer[f32]):
    s = pycoop.subgroup_id()
    acc = MCf.fill(0.0)
    for k in range(0, (s + 1) * 16, 16):      # differs between subgroups, uniform within
        acc = pycoop.mul_add(MAf.load(A, k, 32), MBf.load(B, k * 16, 16), acc)
    if pycoop.workgroup_id.x == 1:
        acc = -acc
    pycoop.store(C, (pycoop.workgroup_id.x * 2 + s) * 256, acc, 16)


def test_matrices_carried_through_subgroup_uniform_loops_and_ifs():
    r = np.random.default_rng(8)
    a = r.integers(-3, 4, (16, 32)).astype(np.float16)
    b = r.integers(-3, 4, (32, 16)).astype(np.float16)
    c = np.zeros((2, 2, 16, 16), np.float32)
    emu(k_subgroup_trip_count, 2, a, b, c)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    r0, r1 = af[:, :16] @ bf[:16], af @ bf
    for w, sign in ((0, 1), (1, -1)):
        np.testing.assert_array_equal(c[w, 0], sign * r0)
        np.testing.assert_array_equal(c[w, 1], sign * r1)


@pycoop.kernel(workgroup_size=64)
def k_matrix_store_then_scalar_read(A: pycoop.Buffer[f32], O: pycoop.Buffer[f32], sync: u32):
    sh = pycoop.shared(f32, 512)
    s = pycoop.subgroup_id()
    pycoop.store(sh, s * 256, MC32.load(A, s * 256, 16), 16)
    if sync == 1:
        pycoop.barrier()
    l = pycoop.local_invocation_index()
    O[l] = sh[(l * 8 + 256) % 512]           # reads the other subgroup's tile


def test_matrix_store_to_shared_then_scalar_read():
    a = np.arange(512, dtype=np.float32)
    o = np.zeros(64, np.float32)
    emu(k_matrix_store_then_scalar_read, 1, a, o, 1)
    np.testing.assert_array_equal(o, a[(np.arange(64) * 8 + 256) % 512])
    with pytest.raises(pycoop.EmulatorError, match="data race") as ei:
        emu(k_matrix_store_then_scalar_read, 1, a, o, 0)
    assert ei.value.loc.line == line_of(k_matrix_store_then_scalar_read, "O[l] = sh[")


TileAcc = pycoop.coopmat[f32, pycoop.Subgroup, 16, 16, pycoop.Accumulator]


@pycoop.kernel(workgroup_size=32)
def k_scatter_tiles(Offs: pycoop.ReadBuffer[u32], Src: pycoop.ReadBuffer[f32],
                    Dst: pycoop.Buffer[f32], stride: u32, col: pycoop.Const = False):
    w = pycoop.workgroup_id.x
    m = pycoop.load(TileAcc, Src, w * 256, 16)
    pycoop.store(Dst, Offs[w], m, stride, "col_major" if col else "row_major")


@settings(SETTINGS, max_examples=80)
@given(data=st.data(), col=st.booleans(), stride=st.integers(4, 12).map(lambda s: 4 * s),
       n=st.integers(1, 10), lattice=st.booleans(), same_values=st.booleans())
def test_tile_stores_match_element_by_element_writes(data, col, stride, n, lattice, same_values):
    """One tile store per workgroup at chosen offsets: tiles on a lattice (the emulator's
    row-by-row path when they fill it), anywhere (overlaps: a race unless the values agree).
    Offsets and strides are multiples of 4 f32s (16 bytes), as matrix stores require."""
    if lattice:
        py = data.draw(st.sampled_from([16, 20, 32]))
        px = data.draw(st.sampled_from([16, 24, 32]))
        cols = max(1, (stride - 16) // px + 1)
        cells = data.draw(st.lists(st.tuples(st.integers(0, 4), st.integers(0, cols - 1)),
                                   min_size=n, max_size=n, unique=True))
        offs = [y * py * stride + x * px for y, x in cells]
    else:
        offs = data.draw(st.lists(st.integers(0, 6 * stride // 4).map(lambda o: 4 * o),
                                  min_size=n, max_size=n))
    rng = np.random.default_rng(n)
    tile = rng.standard_normal((16, 16)).astype(np.float32)
    src = np.stack([tile if same_values else rng.standard_normal((16, 16)).astype(np.float32)
                    for _ in range(n)])
    size = max(offs) + 15 * stride + 16
    want, owner = np.full(size, -1.0, np.float32), np.full(size, -1)
    clash = False
    for w, o in enumerate(offs):
        i, j = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
        idx = (o + j * stride + i) if col else (o + i * stride + j)
        prev = owner[idx] >= 0
        clash |= bool((prev & (want[idx] != src[w])).any())
        want[idx], owner[idx] = src[w], w
    dst = np.full(size, -1.0, np.float32)
    args = (np.array(offs, np.uint32), src.reshape(-1), dst, stride)
    if clash:
        with pytest.raises(pycoop.EmulatorError, match="more than once with different values"):
            emu(k_scatter_tiles, n, *args, col=col)
    else:
        emu(k_scatter_tiles, n, *args, col=col)
        np.testing.assert_array_equal(dst, want)


@pycoop.kernel(workgroup_size=64)
def k_scalar_writes_then_matrix_store(A: pycoop.Buffer[f32], O: pycoop.Buffer[f32], sync: u32):
    sh = pycoop.shared(f32, 512)
    l = pycoop.local_invocation_index()
    for r in range(8):
        sh[l * 8 + r] = -1.0
    if sync == 1:
        pycoop.barrier()
    s = pycoop.subgroup_id()
    pycoop.store(sh, s * 256, MC32.load(A, s * 256, 16), 16)   # overwrites other invocations' writes
    pycoop.barrier()
    for r in range(8):
        O[l * 8 + r] = sh[l * 8 + r]


def test_matrix_store_over_unsynchronised_scalar_writes_is_a_race():
    a = np.arange(512, dtype=np.float32)
    o = np.zeros(512, np.float32)
    emu(k_scalar_writes_then_matrix_store, 1, a, o, 1)
    np.testing.assert_array_equal(o, a)
    with pytest.raises(pycoop.EmulatorError, match="data race: this store overwrites") as ei:
        emu(k_scalar_writes_then_matrix_store, 1, a, o, 0)
    assert ei.value.loc.line == line_of(k_scalar_writes_then_matrix_store, "pycoop.store(sh,")


@pycoop.kernel(workgroup_size=64)
def k_reuse_shared_tile(A: pycoop.Buffer[f32], O: pycoop.Buffer[f32], sync: u32):
    """Each subgroup reads the other's tile, then refills its own slot: the refill must wait
    for the other subgroup's read (the trailing barrier of a single-buffered loop)."""
    sh = pycoop.shared(f32, 512)
    s = pycoop.subgroup_id()
    pycoop.store(sh, s * 256, MC32.load(A, s * 256, 16), 16)
    pycoop.barrier()
    other = MC32.load(sh, (1 - s) * 256, 16)
    if sync == 1:
        pycoop.barrier()
    pycoop.store(sh, s * 256, MC32.load(A, 512 + s * 256, 16), 16)
    pycoop.barrier()
    pycoop.store(O, s * 256, other + MC32.load(sh, s * 256, 16), 16)


def test_refilling_shared_memory_another_subgroup_still_reads_is_a_race():
    a = np.arange(1024, dtype=np.float32)
    o = np.zeros(512, np.float32)
    emu(k_reuse_shared_tile, 1, a, o, 1)
    np.testing.assert_array_equal(o, np.r_[a[256:512], a[:256]] + a[512:])
    with pytest.raises(pycoop.EmulatorError, match="read since the last barrier") as ei:
        emu(k_reuse_shared_tile, 1, a, o, 0)
    assert ei.value.loc.line == line_of(k_reuse_shared_tile, "pycoop.store(sh, s * 256, MC32.load(A, 512")


@pycoop.kernel(workgroup_size=64)
def k_read_tile_zero(A: pycoop.Buffer[f32], O: pycoop.Buffer[f32], sync: u32):
    """Each subgroup stores its tile, then both load tile 0 (the first subgroup's): one block
    read by two scope instances, only one of which wrote it."""
    sh = pycoop.shared(f32, 512)
    s = pycoop.subgroup_id()
    pycoop.store(sh, s * 256, MC32.load(A, s * 256, 16), 16)
    if sync == 1:
        pycoop.barrier()
    t = MC32.load(sh, 0, 16)
    pycoop.barrier()
    pycoop.store(O, s * 256, t, 16)


def test_a_tile_loaded_by_several_subgroups_before_the_barrier_is_a_race():
    a = np.arange(512, dtype=np.float32)
    o = np.zeros(512, np.float32)
    emu(k_read_tile_zero, 2, a, o, 1)
    np.testing.assert_array_equal(o, np.r_[a[:256], a[:256]])
    with pytest.raises(pycoop.EmulatorError, match="reads shared memory written since the last "
                       r"barrier by other invocations \(workgroup \(0, 0, 0\), scope instance 1\)") as ei:
        emu(k_read_tile_zero, 2, a, o, 0)
    assert ei.value.loc.line == line_of(k_read_tile_zero, "t = MC32.load(sh")


def _through_elements(comp, elem, layout):
    """A matrix of `comp` components loaded from a buffer of `elem` (several components per
    element) and stored to another, next to the same through buffers of `comp` itself."""
    Mat = pycoop.coopmat[comp, pycoop.Subgroup, 16, 16, pycoop.Accumulator]

    @pycoop.kernel(workgroup_size=32)
    def k(X: pycoop.ReadBuffer[elem], Y: pycoop.Buffer[elem], Xc: pycoop.ReadBuffer[comp],
          Yc: pycoop.Buffer[comp], off: u32, stride: u32, k: u32):
        pycoop.store(Y, off, pycoop.load(Mat, X, off, stride, layout), stride, layout)
        pycoop.store(Yc, off * k, pycoop.load(Mat, Xc, off * k, stride * k, layout), stride * k,
                     layout)
    return k


@settings(SETTINGS, max_examples=30)
@given(data=st.data(), layout=st.sampled_from(["row_major", "col_major"]))
def test_matrices_through_buffers_of_wider_elements(data, layout):
    """Offsets and strides count the buffer's elements and a row's components are contiguous
    (SPV_KHR_cooperative_matrix, 'Pointer'[row*'Stride']): the same as a buffer of the
    components with both scaled by the components per element."""
    comp, elem = data.draw(st.sampled_from([
        (f16, u32), (f16, pycoop.vec(u32, 4)), (f16, pycoop.vec(u32, 2)), (u8, u32),
        (i8, pycoop.vec(u32, 4)), (f32, pycoop.vec(f32, 4)), (f32, pycoop.vec(u32, 2))]))
    k = elem.size // comp.size
    q = max(1, 16 // elem.size)              # elements per 16 bytes: the required alignment
    least = -(-16 // k)                      # a row's elements
    stride = q * data.draw(st.integers(-(-least // q), -(-least // q) + 5))
    off = q * data.draw(st.integers(0, 7))
    n = (off + 16 * stride + 16) * k
    rng = np.random.default_rng(off + 100 * stride)
    raw = rng.integers(0, 256, n * comp.size, dtype=np.uint8)
    if comp.is_float:                        # no NaN/Inf bit patterns: compare values exactly
        raw = rng.standard_normal(n).astype(comp.dtype).view(np.uint8)
    Xc = raw.view(comp.dtype).copy()
    X = Xc.view(elem.dtype).copy()
    Y, Yc = np.zeros_like(X), np.zeros_like(Xc)
    emu(_through_elements(comp, elem, layout), 1, X, Y, Xc, Yc, off, stride, k)
    np.testing.assert_array_equal(Y.view(np.uint8), Yc.view(np.uint8))
    assert Yc.any() or not Xc.any()


def test_matrix_element_size_rules():
    Mat = pycoop.coopmat[f32, pycoop.Subgroup, 16, 16, pycoop.Accumulator]

    @pycoop.kernel(workgroup_size=32)
    def narrower(X: pycoop.Buffer[pycoop.u16]):
        pycoop.store(X, 0, pycoop.load(Mat, X, 0, 16), 16)

    with pytest.raises(pycoop.CompileError, match="whole number of matrix components") as ei:
        narrower.compile()
    assert ei.value.rule_id == "khr.array-element-size"


MA16 = pycoop.coopmat[f16, pycoop.Subgroup, 16, 16, pycoop.UseA]
MB16 = pycoop.coopmat[f16, pycoop.Subgroup, 16, 16, pycoop.UseB]
AccF = pycoop.coopmat[f32, pycoop.Subgroup, 16, 16, pycoop.Accumulator]


@pycoop.kernel(workgroup_size=32)
def k_f16_matrix_from_f32_data(A: pycoop.Buffer[f32], C: pycoop.Buffer[f32]):
    acc = pycoop.mul_add(MA16.load(A, 0, 16), MB16.load(A, 0, 16), AccF.zeros())   # HERE
    pycoop.store(C, 0, acc, 16)


@pycoop.kernel(workgroup_size=32)
def k_f16_matrix_into_f32_data(A: pycoop.Buffer[f16], C: pycoop.Buffer[f32]):
    pycoop.store(C, 0, MA16.load(A, 0, 16), 16)                                    # HERE


@pycoop.kernel(workgroup_size=32)
def k_bf16_matrix_from_shared_f16_vectors(A: pycoop.Buffer[bf16]):
    sh = pycoop.shared(pycoop.vec(f16, 4), 64)
    m = pycoop.load(pycoop.coopmat[bf16, pycoop.Subgroup, 16, 16, pycoop.UseA], sh, 0, 4)  # HERE
    pycoop.store(A, 0, m, 16)


@pytest.mark.parametrize("kernel,message,hint", [
    (k_f16_matrix_from_f32_data, "load of f16 components through an array of f32",
     "pycoop.convert(m, f16)"),
    (k_f16_matrix_into_f32_data, "store of f16 components through an array of f32",
     "pycoop.convert(m, f32)"),
    (k_bf16_matrix_from_shared_f16_vectors, "load of bf16 components through an array of "
                                            "vec4<f16>", "pycoop.convert(m, bf16)"),
])
def test_a_matrix_through_an_array_of_another_float_type_is_refused(kernel, message, hint):
    """The bits of f32 data read as f16 components gave 0, 0, 0, 3.5 for an identity matrix,
    with no error; a float matrix stored into a buffer of a narrower float was already refused
    (khr.array-element-size), so the rule is now the same both ways. Integer containers (u32,
    pycoop.vec(u32, 4)) keep packing components (test_matrices_through_buffers_of_wider_elements)."""
    with pytest.raises(pycoop.CompileError, match=message) as ei:
        kernel.compile()
    assert ei.value.rule_id == "khr.array-element-type" and hint in ei.value.hint
    assert ei.value.loc.file == __file__ and ei.value.line == line_of(kernel, "# HERE")


MH = pycoop.coopmat[f16, pycoop.Subgroup, 16, 16, pycoop.Accumulator]


@pycoop.kernel(workgroup_size=64)
def k_swap_through_shared_words(A: pycoop.Buffer[f16], O: pycoop.Buffer[f16], sync: u32):
    """f16 tiles through a u32 shared array (two components per element): each subgroup
    stores its tile, then reads the other's."""
    sh = pycoop.shared(u32, 256)
    s = pycoop.subgroup_id()
    pycoop.store(sh, s * 128, MH.load(A, s * 256, 16), 8)
    if sync == 1:
        pycoop.barrier()
    pycoop.store(O, s * 256, pycoop.load(MH, sh, (1 - s) * 128, 8), 16)


def test_matrices_through_a_shared_array_of_wider_elements():
    a = np.arange(512).astype(np.float16)
    o = np.zeros(512, np.float16)
    emu(k_swap_through_shared_words, 1, a, o, 1)
    np.testing.assert_array_equal(o, np.r_[a[256:], a[:256]])
    with pytest.raises(pycoop.EmulatorError, match="data race") as ei:
        emu(k_swap_through_shared_words, 1, a, o, 0)
    assert ei.value.loc.line == line_of(k_swap_through_shared_words, "pycoop.store(O, s * 256")


@pycoop.kernel(workgroup_size=64)
def k_tiles_through_shared_vectors(A: pycoop.ReadBuffer[pycoop.vec(u32, 4)], O: pycoop.Buffer[f16],
                                   sync: u32):
    """Invocations copy 8 halves each as one uvec4 into shared memory; subgroups then read
    each other's f16 tile from it (8 components per element, stride 2 elements)."""
    sh = pycoop.shared(pycoop.vec(u32, 4), 64)
    l = pycoop.local_invocation_index()
    sh[l] = A[l]
    if sync == 1:
        pycoop.barrier()
    s = pycoop.subgroup_id()
    pycoop.store(O, s * 256, pycoop.load(MH, sh, (1 - s) * 32, 2), 16)


def test_matrices_through_shared_vectors():
    a = np.arange(512).astype(np.float16)
    o = np.zeros(512, np.float16)
    emu(k_tiles_through_shared_vectors, 1, a.view(np.uint32).reshape(-1, 4), o, 1)
    np.testing.assert_array_equal(o, np.r_[a[256:], a[:256]])
    with pytest.raises(pycoop.EmulatorError, match="data race") as ei:
        emu(k_tiles_through_shared_vectors, 1, a.view(np.uint32).reshape(-1, 4), o, 0)
    assert ei.value.loc.line == line_of(k_tiles_through_shared_vectors, "pycoop.store(O, s * 256")

    @pycoop.kernel(workgroup_size=32)
    def vec3_shared(O: pycoop.Buffer[u32]):
        sh = pycoop.shared(pycoop.vec(u32, 3), 8)

    with pytest.raises(pycoop.CompileError, match="numeric vectors of 2 or 4 components") as ei:
        vec3_shared.compile()
    assert ei.value.rule_id == "core.shared-element"


@pycoop.kernel(workgroup_size=32)
def k_shared_block(O: pycoop.Buffer[f16], N: pycoop.Const, ELEM: pycoop.Const, OFF: pycoop.Const,
                   STRIDE: pycoop.Const, LAYOUT: pycoop.Const):
    sh = pycoop.shared(ELEM, N)
    pycoop.store(sh, OFF, pycoop.coopmat[f16, SG, 16, 16, pycoop.Accumulator].zeros(), STRIDE, LAYOUT)   # BLOCK


@pytest.mark.parametrize("n,elem,off,stride,layout,reach", [
    (256, f16, 8, 16, "row_major", "8..263"),
    (255, f16, 0, 16, "col_major", "0..255"),
    (512, f16, 0, 2**28, "row_major", "0..4026531855"),
    (31, pycoop.vec(u32, 4), 0, 2, "row_major", "0..31"),     # 8 f16 per element
])
def test_a_constant_block_outside_a_shared_array_is_a_compile_error(n, elem, off, stride, layout, reach):
    """A shared array's length is known while tracing: a matrix store (or load) whose constant
    offset and stride reach past it is refused at the line, with the emulator's rule id."""
    with pytest.raises(pycoop.CompileError, match=f"store of elements {reach} of a shared array of {n} elements") as ei:
        k_shared_block.compile(N=n, ELEM=elem, OFF=off, STRIDE=stride, LAYOUT=layout)
    assert ei.value.rule_id == "emulator.out-of-bounds" and ei.value.hint
    assert ei.value.line == line_of(k_shared_block, "# BLOCK")
    k_shared_block.compile(N=n + 1, ELEM=elem, OFF=0, STRIDE=16 if elem == f16 else 2, LAYOUT=layout)
