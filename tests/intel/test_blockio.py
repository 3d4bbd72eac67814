"""SPV_INTEL_2d_block_io semantics: the spec's worked examples, and property tests against an
independent per-element reference transcribed from "Mapping Block Data to Invocations"."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pycoop.ops.intel.blockio import (
    SUPPORTED_SHAPES,
    block_load,
    block_prefetch,
    block_store,
    check_undefined,
    intel_supported_shape,
    static_checks,
)

# --- independent reference: literal, one element at a time -------------------------------


def next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def ref_assignment(E, W, H, C, S, transform=False, transpose=False):
    """Per lane, the list of destination entries; each entry is a list of the (row, column)
    memory-block elements packed into it (lowest row first), None marking padding."""
    lanes = [[] for _ in range(S)]
    for b in range(C):
        # 1. pad: width to pow2 (load/transform/store), height to pow2 (transpose),
        #    height to a multiple of 4 (1-byte) / 2 (2-byte) for the transform.
        pw = W if transpose else next_pow2(W)
        ph = next_pow2(H) if transpose else H
        if transform:
            group = 4 // E
            while ph % group:
                ph += 1
        block = [[[(r, b * W + c)] if r < H and c < W else [None] for c in range(pw)] for r in range(ph)]
        # 2. transform: every `group` rows of one column combine into one 32-bit value.
        if transform:
            block = [
                [sum((block[i * group + p][c] for p in range(group)), []) for c in range(pw)]
                for i in range(ph // group)
            ]
        # 3. transpose: first column becomes the first row, and so on.
        if transpose:
            block = [[block[r][c] for r in range(ph)] for c in range(pw)]
        # 4. rows to invocations, three cases.
        width = len(block[0])
        mine = [[] for _ in range(S)]
        if width == S:
            for row in block:
                for i in range(S):
                    mine[i].append(row[i])
        elif width < S:
            rows_per_pass = S // width
            pad = [[None] * len(block[0][0])] * width
            for first in range(0, len(block), rows_per_pass):
                for j in range(rows_per_pass):
                    row = block[first + j] if first + j < len(block) else pad
                    for c in range(width):
                        mine[j * width + c].append(row[c])
        else:
            per = width // S
            for row in block:
                for i in range(S):
                    mine[i].extend(row[i * per:(i + 1) * per])
        for i in range(S):
            lanes[i].extend(mine[i])
    return lanes


def ref_address(E, mw, mh, pitch, base, x, y, tag):
    """Byte address of a block element, or None when it is padding or out of bounds."""
    if tag is None:
        return None
    row, col = y + tag[0], x + tag[1]
    if 0 <= row < mh and 0 <= col and (col + 1) * E <= mw:
        return base + row * pitch + col * E
    return None


def ref_load(mem, base, E, W, H, C, mw, mh, pitch, x, y, S, transform=False, transpose=False):
    out = []
    for entries in ref_assignment(E, W, H, C, S, transform, transpose):
        lane = []
        for tags in entries:
            value = 0
            for p, tag in enumerate(tags):
                a = ref_address(E, mw, mh, pitch, base, x, y, tag)
                if a is not None:
                    value |= int.from_bytes(bytes(mem[a:a + E]), "little") << (8 * E * p)
            lane.append(value)
        out.append(lane)
    return out


def ref_store(mem, base, E, W, H, C, mw, mh, pitch, x, y, S, values):
    for i, entries in enumerate(ref_assignment(E, W, H, C, S)):
        for s, (tag,) in enumerate(entries):
            a = ref_address(E, mw, mh, pitch, base, x, y, tag)
            if a is not None:
                mem[a:a + E] = list(int(values[i][s]).to_bytes(E, "little"))


# --- the spec's six worked examples (subgroup size 4) ------------------------------------

PITCH = 64


def tagged_memory(E: int, rows: int = 4, cols: int = 8) -> np.ndarray:
    """Element (r, c) holds 16*r + c, so results read back as (row, column) pairs."""
    mem = np.zeros(rows * PITCH, dtype=np.uint8)
    for r in range(rows):
        for c in range(cols):
            mem[r * PITCH + c * E] = 16 * r + c
    return mem


def rc(*pairs: tuple[int, int]) -> list[int]:
    return [16 * r + c for r, c in pairs]


def load(E, W, H, **kw):
    return block_load(tagged_memory(E), 0, E, W, H, 1, 64, 4, PITCH, 0, 0, 4, **kw).tolist()


def test_example1_width_equals_subgroup():
    assert load(1, 4, 2) == [rc((0, i), (1, i)) for i in range(4)]


def test_example2_width_less_than_subgroup():
    assert load(2, 2, 4) == [
        rc((0, 0), (2, 0)), rc((0, 1), (2, 1)), rc((1, 0), (3, 0)), rc((1, 1), (3, 1)),
    ]


def test_example3_width_greater_than_subgroup():
    assert load(1, 8, 2) == [rc((0, 2 * i), (0, 2 * i + 1), (1, 2 * i), (1, 2 * i + 1)) for i in range(4)]


def test_example4_transpose():
    assert load(4, 2, 4, transpose=True) == [rc((i, 0), (i, 1)) for i in range(4)]


def test_example5_transform_2byte():
    assert load(2, 4, 2, transform=True) == [[(16 + i) << 16 | i] for i in range(4)]


def test_example6_transform_1byte_height4():
    # The spec text says "Block Height equals two" but shows and packs four rows.
    assert load(1, 4, 4, transform=True) == [[(48 + i) << 24 | (32 + i) << 16 | (16 + i) << 8 | i] for i in range(4)]


def test_block_count_places_blocks_side_by_side():
    # Two 2x4 blocks: block 1 covers columns 4..7 and follows block 0 in each lane.
    out = block_load(tagged_memory(1), 0, 1, 4, 2, 2, 64, 4, PITCH, 0, 0, 4).tolist()
    assert out == [rc((0, i), (1, i), (0, 4 + i), (1, 4 + i)) for i in range(4)]


def test_width_padding_and_out_of_bounds_read_zero():
    # Width 12 pads to 16; memory is only 64 bytes wide, so columns past 63 read zero.
    mem = np.full(4 * PITCH, 7, dtype=np.uint8)
    out = block_load(mem, 0, 1, 12, 1, 1, 64, 4, PITCH, 56, 0, 16)
    assert out.tolist() == [[7]] * 8 + [[0]] * 8


# --- property tests against the reference ------------------------------------------------


@st.composite
def block_cases(draw, mode: str):
    E = draw(st.sampled_from({"transform": [1, 2], "transpose": [1, 2, 4, 8]}.get(mode, [1, 2, 4, 8])))
    S = draw(st.sampled_from([8, 16, 32]))
    step = {1: 4, 2: 2}.get(E, 1)
    W = step * draw(st.integers(1, 64 // step))
    H = draw(st.integers(1, 32 if mode != "plain" else 24))
    C = draw(st.integers(1, 4 if W * H <= 256 else 2))
    n = draw(st.integers(1, 3))
    mw = draw(st.integers(E, 160))
    mh = draw(st.integers(1, 40))
    pitch = mw + draw(st.integers(0, 24))
    base = draw(st.lists(st.integers(0, 96), min_size=n, max_size=n))
    xs = draw(st.lists(st.integers(-W - 3, mw // E + 3), min_size=n, max_size=n))
    ys = draw(st.lists(st.integers(-H - 3, mh + 3), min_size=n, max_size=n))
    seed = draw(st.integers(0, 2**32 - 1))
    mem = np.random.default_rng(seed).integers(0, 256, size=96 + mh * pitch + 8, dtype=np.uint8)
    return E, W, H, C, S, mw, mh, pitch, base, xs, ys, mem, seed


def check_load(case, **kw):
    E, W, H, C, S, mw, mh, pitch, base, xs, ys, mem, _ = case
    got = block_load(mem, base, E, W, H, C, mw, mh, pitch, xs, ys, S, **kw)
    for k in range(len(xs)):
        assert got[k].tolist() == ref_load(mem, base[k], E, W, H, C, mw, mh, pitch, xs[k], ys[k], S, **kw)
    assert got.dtype == (np.uint32 if kw.get("transform") else np.dtype(f"u{E}"))


@settings(max_examples=60, deadline=None)
@given(block_cases("plain"))
def test_load_matches_reference(case):
    check_load(case)


@settings(max_examples=40, deadline=None)
@given(block_cases("transform"))
def test_load_transform_matches_reference(case):
    check_load(case, transform=True)


@settings(max_examples=40, deadline=None)
@given(block_cases("transpose"))
def test_load_transpose_matches_reference(case):
    check_load(case, transpose=True)


def ref_written(E, W, H, C, S, mw, mh, pitch, base, x, y):
    return {
        ref_address(E, mw, mh, pitch, base, x, y, tag) + i
        for entries in ref_assignment(E, W, H, C, S) for (tag,) in entries
        if ref_address(E, mw, mh, pitch, base, x, y, tag) is not None for i in range(E)
    }


@settings(max_examples=60, deadline=None)
@given(block_cases("plain"))
def test_store_matches_reference(case):
    E, W, H, C, S, mw, mh, pitch, base, xs, ys, mem, seed = case
    shape = block_load(mem, base, E, W, H, C, mw, mh, pitch, xs, ys, S).shape
    values = np.random.default_rng(seed).integers(0, 2 ** (8 * E), size=shape, dtype=np.uint64).astype(f"u{E}")
    for k in range(len(xs)):
        got, want = mem.copy(), mem.copy()
        block_store(got, base[k], E, W, H, C, mw, mh, pitch, xs[k], ys[k], S, values[k])
        ref_store(want, base[k], E, W, H, C, mw, mh, pitch, xs[k], ys[k], S, values[k].tolist())
        assert np.array_equal(got, want)
    written = [ref_written(E, W, H, C, S, mw, mh, pitch, base[k], xs[k], ys[k]) for k in range(len(xs))]
    if sum(map(len, written)) == len(set().union(*written)):  # batched stores agree when disjoint
        got, want = mem.copy(), mem.copy()
        block_store(got, base, E, W, H, C, mw, mh, pitch, xs, ys, S, values)
        for k in range(len(xs)):
            ref_store(want, base[k], E, W, H, C, mw, mh, pitch, xs[k], ys[k], S, values[k].tolist())
        assert np.array_equal(got, want)


@settings(max_examples=40, deadline=None)
@given(block_cases("plain"))
def test_store_then_load_round_trips_in_bounds(case):
    E, W, H, C, S, mw, mh, pitch, base, xs, ys, mem, seed = case
    base, x, y = base[0], xs[0], ys[0]
    loaded = block_load(mem, base, E, W, H, C, mw, mh, pitch, x, y, S)
    values = np.random.default_rng(seed).integers(0, 2 ** (8 * E), size=loaded.shape, dtype=np.uint64).astype(f"u{E}")
    block_store(mem, base, E, W, H, C, mw, mh, pitch, x, y, S, values)
    mask = block_load(np.full_like(mem, 255), base, E, W, H, C, mw, mh, pitch, x, y, S) != 0
    again = block_load(mem, base, E, W, H, C, mw, mh, pitch, x, y, S)
    assert np.array_equal(again[mask], values[mask])
    assert not again[~mask].any()


def test_store_ignores_padding_and_out_of_bounds():
    mem = np.zeros(2 * PITCH, dtype=np.uint8)
    values = np.full((16, 1), 9, dtype=np.uint8)  # width 12 pads to 16: lanes 12..15 are padding
    block_store(mem, 0, 1, 12, 1, 1, 64, 1, PITCH, 56, 0, 16, values)
    assert mem[56:64].tolist() == [9] * 8 and not mem[64:].any() and not mem[:56].any()


def test_store_takes_values_bitwise():
    mem = np.zeros(PITCH, dtype=np.uint8)
    block_store(mem, 0, 2, 16, 1, 1, 64, 1, PITCH, 0, 0, 16, np.full((16, 1), 1.0, dtype=np.float16))
    assert mem[:32].view("<u2").tolist() == [0x3C00] * 16
    with pytest.raises(TypeError):
        block_store(mem, 0, 2, 16, 1, 1, 64, 1, PITCH, 0, 0, 16, np.zeros((16, 1), np.uint32))


def test_batch_shape_is_leading():
    mem = tagged_memory(1)
    out = block_load(mem, 0, 1, 4, 2, 1, 64, 4, PITCH, np.zeros((2, 3), int), 0, 4)
    assert out.shape == (2, 3, 4, 2)


def test_buffer_overrun_and_bad_arguments_raise():
    mem = np.zeros(64, dtype=np.uint8)
    with pytest.raises(IndexError):
        block_load(mem, 0, 1, 4, 2, 1, 64, 2, 64, 0, 0, 4)  # row 1 is in bounds but past the buffer
    with pytest.raises(ValueError, match="power of two"):
        block_load(mem, 0, 1, 4, 1, 1, 64, 1, 64, 0, 0, 12)
    with pytest.raises(ValueError, match="block-width-multiple"):
        block_prefetch(mem, 0, 1, 6, 1, 1, 64, 1, 64, 0, 0, 16)
    with pytest.raises(ValueError, match="transform-element-size"):
        block_load(mem, 0, 4, 8, 1, 1, 64, 1, 64, 0, 0, 16, transform=True)
    with pytest.raises(ValueError):
        block_load(mem, 0, 2, 8, 1, 1, 64, 1, 64, 0, 0, 16, transform=True, transpose=True)
    block_prefetch(mem, 0, 1, 32, 32, 2, 1 << 20, 1 << 20, 1 << 20, 5000, 5000, 16)  # OOB: fine


# --- undefined behaviour and static rules ------------------------------------------------

GOOD = dict(base=0, elem_size=2, block_width=16, block_height=8, block_count=1,
            mem_width_bytes=128, mem_height_rows=64, pitch_bytes=128, coord_x=4, coord_y=3, subgroup_size=16)


def ub(**changes) -> list[str]:
    args = {**GOOD, **changes}
    extra = {k: args.pop(k) for k in ("subgroup_max_size", "active", "private_address") if k in args}
    return check_undefined(*args.values(), **extra)


def test_check_undefined_clean():
    assert ub() == []
    assert ub(active=np.ones(16, bool), private_address=np.arange(16) * 32, subgroup_max_size=16) == []


@pytest.mark.parametrize(
    "changes, rule",
    [
        (dict(coord_x=3), "coordinate-x-alignment"),
        (dict(elem_size=1, block_width=16, coord_x=6), "coordinate-x-alignment"),
        (dict(base=32), "base-alignment"),
        (dict(private_address=np.arange(16) * 32 + 1), "invocation-address-alignment"),
        (dict(mem_width_bytes=32, pitch_bytes=32), "memory-width"),
        (dict(mem_width_bytes=(1 << 24) + 8, pitch_bytes=(1 << 24) + 8), "memory-width"),
        (dict(mem_height_rows=0), "memory-height"),
        (dict(mem_height_rows=(1 << 24) + 1), "memory-height"),
        (dict(pitch_bytes=120), "memory-pitch"),
        (dict(mem_width_bytes=124, pitch_bytes=132), "memory-pitch"),
        (dict(subgroup_size=12), "subgroup-max-size"),
        (dict(subgroup_max_size=32), "full-subgroup"),
        (dict(active=np.arange(16) < 15), "same-dynamic-instance"),
    ],
)
def test_check_undefined_rules(changes, rule):
    errors = ub(**changes)
    assert len(errors) == 1 and errors[0].startswith(f"[{rule}]"), errors


def test_check_undefined_names_instances():
    errors = ub(coord_x=np.array([0, 1, 2, 3]), base=np.array([0, 0, 64, 65]))
    assert errors == [
        "[coordinate-x-alignment] Coordinate.x must be a multiple of 2 for 2-byte elements: instances [(1,), (3,)]",
        "[base-alignment] the per-subgroup base address must be cache-line aligned (64 bytes): instances [(3,)]",
    ]


def test_check_undefined_boundaries_are_inclusive():
    assert ub(mem_width_bytes=64, pitch_bytes=64, mem_height_rows=1) == []
    assert ub(mem_width_bytes=1 << 24, pitch_bytes=1 << 24, mem_height_rows=1 << 24) == []


@pytest.mark.parametrize(
    "args, rule",
    [
        ((3, 16, 8, 1, "load"), "element-size"),
        ((1, 6, 8, 1, "load"), "block-width-multiple"),
        ((2, 5, 8, 1, "store"), "block-width-multiple"),
        ((2, 16, 0, 1, "load"), "block-operand"),
        ((2, 16, 8, 1 << 31, "load"), "block-operand"),
        ((4, 8, 8, 1, "load_transform"), "transform-element-size"),
        ((2, 16, 8, 1, "gather"), "op"),
    ],
)
def test_static_rules(args, rule):
    errors = static_checks(*args)
    assert len(errors) == 1 and errors[0].startswith(f"[{rule}]"), errors


def test_static_ok():
    for args in [(4, 3, 7, 1, "load"), (8, 1, 1, 1, "store"), (1, 4, 5, 3, "load_transform"), (2, 2, 3, 1, "load_transpose")]:
        assert static_checks(*args) == []


def test_supported_shapes_table():
    assert intel_supported_shape("load", 2, 16, 8, 2) == (True, (SUPPORTED_SHAPES[2],))
    assert intel_supported_shape("load_transform", 1, 16, 32, 4)[0]
    assert intel_supported_shape("load_transpose", 4, 8, 32, 1)[0]
    assert intel_supported_shape("store", 1, 32, 8, 1)[0]
    assert not intel_supported_shape("store", 2, 16, 16, 1)[0]  # stores stop at 8 rows
    ok, nearest = intel_supported_shape("load", 2, 16, 64, 1)
    assert not ok and nearest[0] == SUPPORTED_SHAPES[2]
    ok, nearest = intel_supported_shape("load", 4, 16, 8, 2)  # 4-byte x16 allows only count 1
    assert not ok and nearest[0].elem_size == 4
    every_shape_passes_static = all(
        static_checks(r.elem_size, w, h, c, r.op) == []
        for r in SUPPORTED_SHAPES for w in r.widths for h in r.heights for c in r.counts
    )
    assert every_shape_passes_static
