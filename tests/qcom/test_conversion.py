"""SPV_QCOM_cooperative_matrix_conversion semantics: round trips, packed forms against explicit
bit manipulation, and every static rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pycoop.ops.qcom.conversion import bitcast_array, construct, extract, extract_subarray, static_checks

AB = {np.dtype(np.float32): 8, np.dtype(np.float16): 16, np.dtype(np.int8): 32, np.dtype(np.uint8): 32}
ACC = [np.dtype(t) for t in (np.int32, np.uint32, np.float16, np.float32)]


def random_values(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Arbitrary bit patterns (NaNs included) so comparisons below are bitwise."""
    return rng.integers(0, 256, size=shape + (dtype.itemsize,), dtype=np.uint8).view(dtype)[..., 0]


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.dtype.itemsize}")


@st.composite
def matrix_cases(draw):
    use = draw(st.sampled_from(["A", "B", "Accumulator"]))
    S = draw(st.sampled_from([8, 16, 32, 64]))
    sizes = [s for s in (8, 16, 32) if s <= S]
    if use == "Accumulator":
        dtype = draw(st.sampled_from(ACC))
        rows, cols = draw(st.sampled_from(sizes)), draw(st.sampled_from(sizes))
    else:
        dtype = draw(st.sampled_from(list(AB)))
        fixed, free = AB[dtype], draw(st.sampled_from(sizes))
        rows, cols = (free, fixed) if use == "A" else (fixed, free)
    packed = draw(st.booleans()) and (use != "Accumulator" or dtype.kind == "f")
    batch = draw(st.sampled_from([(), (3,), (2, 2)]))
    return use, S, dtype, rows, cols, packed, batch, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=150, deadline=None)
@given(matrix_cases())
def test_extract_then_construct_is_identity(case):
    use, S, dtype, rows, cols, packed, batch, seed = case
    m = random_values(np.random.default_rng(seed), dtype, batch + (rows, cols))
    arrays, valid = extract(m, use, S, packed=packed)
    lanes, length = (cols, rows) if use == "B" else (rows, cols)
    assert valid.shape == batch + (S,) and valid.sum(axis=-1).tolist() == np.full(batch, lanes).tolist()
    assert arrays.dtype == (np.uint32 if packed else dtype)
    assert arrays.shape[-1] == (length * dtype.itemsize // 4 if packed else length)
    back = construct(arrays, dtype, rows, cols, use, packed=packed)
    assert back.dtype == dtype and np.array_equal(bits(back), bits(m))


@settings(max_examples=150, deadline=None)
@given(matrix_cases())
def test_construct_then_extract_is_identity_on_valid_lanes(case):
    use, S, dtype, rows, cols, packed, batch, seed = case
    lanes, length = (cols, rows) if use == "B" else (rows, cols)
    width = length * dtype.itemsize // 4 if packed else length
    arrays = random_values(np.random.default_rng(seed), np.dtype(np.uint32) if packed else dtype, batch + (S, width))
    m = construct(arrays, dtype, rows, cols, use, packed=packed)
    again, valid = extract(m, use, S, packed=packed)
    assert np.array_equal(bits(again[valid]), bits(arrays[valid]))
    assert not valid[..., lanes:].any()


def test_lane_i_is_row_i_or_column_i():
    arrays = np.arange(16 * 16, dtype=np.float16).reshape(16, 16)
    a = construct(arrays, np.float16, 8, 16, "A")
    b = construct(arrays, np.float16, 16, 8, "B")
    assert np.array_equal(a, arrays[:8]) and np.array_equal(b, arrays[:8].T)
    acc = construct(arrays.astype(np.float32), np.float32, 8, 16, "Accumulator")
    assert np.array_equal(acc, arrays[:8].astype(np.float32))


def test_lanes_past_the_matrix_are_ignored_and_poisoned():
    arrays = np.ones((32, 8), np.float32)
    arrays[16:] = np.nan
    m = construct(arrays, np.float32, 16, 8, "A")
    assert m.shape == (16, 8) and not np.isnan(m).any()
    out, valid = extract(m, "A", 32)
    assert valid.tolist() == [True] * 16 + [False] * 16
    assert np.array_equal(out[:16], arrays[:16])


def test_packed_8bit_against_shifts():
    rng = np.random.default_rng(1)
    m = rng.integers(-128, 128, size=(16, 32), dtype=np.int8)
    packed, _ = extract(m, "A", 16, packed=True)
    u = m.view(np.uint8).astype(np.uint32)
    want = u[:, 0::4] | u[:, 1::4] << 8 | u[:, 2::4] << 16 | u[:, 3::4] << 24
    assert np.array_equal(packed, want)
    unpacked = np.stack([(packed >> (8 * k)) & 0xFF for k in range(4)], axis=-1).reshape(16, 32)
    assert np.array_equal(construct(packed, np.int8, 16, 32, "A", packed=True).view(np.uint8), unpacked)


def test_packed_16bit_against_shifts():
    rng = np.random.default_rng(2)
    m = rng.standard_normal((16, 8)).astype(np.float16)  # MatrixB: 16 rows (256 bits) x 8 columns
    packed, _ = extract(m, "B", 8, packed=True)
    u = m.T.view(np.uint16).astype(np.uint32)  # lane i holds column i
    assert np.array_equal(packed, u[:, 0::2] | u[:, 1::2] << 16)
    acc = rng.standard_normal((8, 16)).astype(np.float16)
    packed, _ = extract(acc, "Accumulator", 16, packed=True)
    u = acc.view(np.uint16).astype(np.uint32)
    assert packed.shape == (16, 8) and np.array_equal(packed[:8], u[:, 0::2] | u[:, 1::2] << 16)
    low, high = (packed & 0xFFFF).astype(np.uint16), (packed >> 16).astype(np.uint16)
    rebuilt = np.stack([low, high], axis=-1).reshape(16, 16).view(np.float16)[:8]
    assert np.array_equal(construct(packed, np.float16, 8, 16, "Accumulator", packed=True), rebuilt)


def test_packed_32bit_is_the_bit_pattern():
    m = np.array([[1.0, -2.0] * 4] * 8, np.float32)
    packed, _ = extract(m, "A", 8, packed=True)
    assert packed[0, :2].tolist() == [0x3F800000, 0xC0000000]
    i = np.arange(64, dtype=np.int32).reshape(8, 8) - 5
    assert np.array_equal(construct(i.view(np.uint32), np.int32, 8, 8, "Accumulator", packed=True), i)


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from([np.int32, np.uint32, np.float16, np.float32]),
    st.sampled_from([np.int32, np.uint32, np.float16, np.float32]),
    st.integers(1, 16),
    st.integers(0, 2**32 - 1),
)
def test_bitcast_both_ways(src, dst, words, seed):
    src, dst = np.dtype(src), np.dtype(dst)
    n = words * 4 // src.itemsize
    a = random_values(np.random.default_rng(seed), src, (3, n))
    b = bitcast_array(a, dst)
    assert b.dtype == dst and b.shape == (3, words * 4 // dst.itemsize)
    assert a.tobytes() == b.tobytes()  # byte reinterpretation (little-endian host)
    assert np.array_equal(bits(bitcast_array(b, src)), bits(a))


def test_bitcast_against_shifts():
    h = np.array([1.0, -2.0, 0.5, 65504.0], np.float16)
    u = h.view(np.uint16).astype(np.uint32)
    assert bitcast_array(h, np.uint32).tolist() == (u[0::2] | u[1::2] << 16).tolist()


def test_bitcast_errors():
    with pytest.raises(ValueError, match="bitcast-size"):
        bitcast_array(np.zeros(3, np.float16), np.uint32)
    with pytest.raises(ValueError, match="bitcast-source-type"):
        bitcast_array(np.zeros(4, np.uint8), np.uint32)
    with pytest.raises(ValueError, match="bitcast-result-type"):
        bitcast_array(np.zeros(4, np.uint32), np.int8)


def test_extract_subarray():
    a = np.arange(24, dtype=np.float32).reshape(2, 12)
    assert extract_subarray(a, 4, 3).tolist() == [[4, 5, 6], [16, 17, 18]]
    assert extract_subarray(a, np.array([0, 9]), 3).tolist() == [[0, 1, 2], [21, 22, 23]]
    assert extract_subarray(a, 12, 0).shape == (2, 0)
    with pytest.raises(IndexError, match="subarray-range"):
        extract_subarray(a, 10, 3)
    with pytest.raises(IndexError, match="subarray-range"):
        extract_subarray(a, np.array([0, -1]), 3)
    with pytest.raises(ValueError, match="subarray-source-type"):
        extract_subarray(np.zeros(8, np.int8), 0, 4)


def test_construct_and_extract_reject_bad_inputs():
    with pytest.raises(ValueError, match="subgroup-size"):
        construct(np.zeros((12, 8), np.float32), np.float32, 8, 8, "A")
    with pytest.raises(ValueError, match="subgroup-size"):
        extract(np.zeros((8, 8), np.float32), "A", 12)
    with pytest.raises(TypeError):
        construct(np.zeros((8, 8), np.float32), np.float32, 8, 8, "A", packed=True)
    with pytest.raises(ValueError, match="array-length"):
        construct(np.zeros((8, 16), np.uint32), np.float16, 8, 16, "A", packed=True)
    with pytest.raises(ValueError, match="array-element-type"):
        extract(np.zeros((8, 8), np.int32), "Accumulator", 8, packed=True)


# --- every static rule -------------------------------------------------------------------

OK = [
    dict(op="construct", use="A", component=np.int8, rows=16, cols=32, array_dtype=np.int8, array_length=32, subgroup_size=16),
    dict(op="construct", use="A", component=np.uint8, rows=16, cols=32, array_dtype=np.uint32, array_length=8, subgroup_size=16),
    dict(op="construct", use="B", component=np.float16, rows=16, cols=8, array_dtype=np.uint32, array_length=8, subgroup_size=8),
    dict(op="construct", use="Accumulator", component=np.float16, rows=8, cols=16, array_dtype=np.uint32, array_length=8, subgroup_size=16),
    dict(op="construct", use="Accumulator", component=np.int32, rows=8, cols=16, array_dtype=np.uint32, array_length=16, subgroup_size=16),
    dict(op="extract", use="Accumulator", component=np.float32, rows=8, cols=8, array_dtype=np.uint32, array_length=8, subgroup_size=8),
    dict(op="extract", use="B", component=np.float32, rows=8, cols=16, array_dtype=np.float32, array_length=8, subgroup_size=16,
         supported_cols=(8, 16)),
    dict(op="bitcast", array_dtype=np.float16, array_length=16, result_dtype=np.int32, result_length=8),
    dict(op="extract_subarray", array_dtype=np.float16, array_length=32, result_dtype=np.float16, result_length=16,
         start_dtype=np.int32, start=16, k_sizes=(16, 32)),
]


@pytest.mark.parametrize("kw", OK)
def test_static_ok(kw):
    assert static_checks(**kw) == []


BAD = [
    (dict(OK[0], scope="Workgroup"), "scope"),
    (dict(OK[0], subgroup_size=24), "subgroup-size"),
    (dict(OK[0], component=np.int32, cols=8, array_dtype=np.int32, array_length=8), "A-component"),
    (dict(OK[0], cols=16, array_length=16), "A-256-bit"),
    (dict(OK[0], rows=32), "rows-subgroup"),
    (dict(OK[0], supported_rows=(8,)), "rows-supported"),
    (dict(OK[0], array_dtype=np.int16), "array-element-type"),
    (dict(OK[0], array_length=16), "array-length"),
    (dict(OK[1], array_length=32), "array-length"),
    (dict(OK[2], component=np.int32, rows=8), "B-component"),
    (dict(OK[2], rows=32), "B-256-bit"),
    (dict(OK[2], cols=16), "columns-subgroup"),
    (dict(OK[2], array_length=16), "array-length"),
    (dict(OK[3], component=np.int8, array_dtype=np.int8, array_length=16), "accumulator-component"),
    (dict(OK[3], rows=32, array_length=8), "rows-subgroup"),
    (dict(OK[3], cols=32, array_length=16), "columns-subgroup"),
    (dict(OK[3], array_length=16), "array-length"),
    (dict(OK[3], cols=5, array_length=2), "array-element-type"),  # odd columns have no packed f16 form
    (dict(OK[4], array_length=8), "array-length"),
    (dict(OK[4], op="extract"), "array-element-type"),  # extract lists only the f32 / f16 packed forms
    (dict(OK[5], array_length=4), "array-length"),
    (dict(OK[5], use="Sparse"), "operands"),
    (dict(OK[7], array_dtype=np.uint8, array_length=32), "bitcast-source-type"),
    (dict(OK[7], result_dtype=np.float64, result_length=4), "bitcast-result-type"),
    (dict(OK[7], result_length=4), "bitcast-size"),
    (dict(OK[8], array_dtype=np.int8, result_dtype=np.int8), "subarray-source-type"),
    (dict(OK[8], result_dtype=np.float32), "subarray-element-type"),
    (dict(OK[8], start_dtype=np.int64), "subarray-start-type"),
    (dict(OK[8], start=32), "subarray-range"),
    (dict(OK[8], start=8), "subarray-k-multiple"),
    (dict(OK[8], op="gather"), "op"),
]


@pytest.mark.parametrize("kw, rule", BAD)
def test_static_rules(kw, rule):
    errors = static_checks(**kw)
    assert len(errors) == 1 and errors[0].startswith(f"[{rule}]"), errors
