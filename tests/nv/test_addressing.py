"""Tensor addressing (SPV_NV_cooperative_matrix2 / SPV_NV_tensor_addressing) against a literal reference.

The reference below transcribes the spec pseudo-code per element with Python scalars and the C
types the spec declares (uint32_t wraps, int32_t c, `%` on signed values is OpSMod). It shares
nothing with the implementation but the outcome labels.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pycoop.ops.nv import addressing as A
from pycoop.ops.nv.addressing import Outcome

M32 = 0xFFFFFFFF
UNDEFINED, CONSTANT, CLAMP_TO_EDGE, REPEAT, MIRROR_REPEAT = range(5)


# ============================================================================ literal reference

def u32(x: int) -> int:
    return x & M32


def i32(x: int) -> int:
    x &= M32
    return x - (1 << 32) if x >= 1 << 31 else x


def smod(a: int, b: int) -> int:
    """OpSMod: the remainder whose sign matches the divisor's (written without Python's %)."""
    q = abs(a) // abs(b)
    rem = abs(a) - q * abs(b)
    if a < 0:
        rem = -rem
    if rem != 0 and (rem < 0) != (b < 0):
        rem += b
    return rem


@dataclass
class RefLayout:
    LDim: int
    clampMode: int
    blockSize: list[int] = field(default_factory=list)
    layoutDimension: list[int] = field(default_factory=list)
    stride: list[int] = field(default_factory=list)
    offset: list[int] = field(default_factory=list)
    span: list[int] = field(default_factory=list)
    clampValue: int = 0


@dataclass
class RefView:
    VDim: int
    hasDimensions: bool
    permutation: tuple[int, ...]
    viewDimension: list[int] = field(default_factory=list)
    viewStride: list[int] = field(default_factory=list)
    clipRowOffset: int = 0
    clipRowSpan: int = 0xFFFFFFFF
    clipColOffset: int = 0
    clipColSpan: int = 0xFFFFFFFF


def ref_create_layout(dim: int, mode: int) -> RefLayout:
    # "The layoutDimension, stride, span, and offset elements are initialized to zero. The blockSize
    # elements are initialized to one. clampValue is initialized to zero."
    return RefLayout(dim, mode, [1] * dim, [0] * dim, [0] * dim, [0] * dim, [0] * dim, 0)


def ref_layout_set_block_size(t: RefLayout, sizes: list[int]) -> RefLayout:
    t = copy.deepcopy(t)
    t.blockSize = [u32(s) for s in sizes]
    return t


def ref_layout_set_dimension(t: RefLayout, dims: list[int]) -> RefLayout:
    # "setting the layoutDimension and span elements to Dim<i>. Sets offset elements to zero. Sets
    # stride[LDim-1] to 1 and sets stride[i] to stride[i+1] * ceiling(Dim<i+1> / blockSize[i+1])."
    t = copy.deepcopy(t)
    dims = [u32(d) for d in dims]
    t.layoutDimension = list(dims)
    t.span = list(dims)
    t.offset = [0] * t.LDim
    t.stride[t.LDim - 1] = 1
    for i in range(t.LDim - 2, -1, -1):
        bs = t.blockSize[i + 1]
        if bs == 0:
            raise ZeroDivisionError("blockSize 0 in SetDimension")
        t.stride[i] = u32(t.stride[i + 1] * ((dims[i + 1] + bs - 1) // bs))
    return t


def ref_layout_set_stride(t: RefLayout, strides: list[int]) -> RefLayout:
    t = copy.deepcopy(t)
    t.stride = [u32(s) for s in strides]
    return t


def ref_layout_slice(t: RefLayout, offsets: list[int], spans: list[int]) -> RefLayout:
    # "adding Offset<i> to offset[i], and span[i] is set to Span<i>"
    t = copy.deepcopy(t)
    t.offset = [i32(t.offset[i] + i32(offsets[i])) for i in range(t.LDim)]
    t.span = [u32(s) for s in spans]
    return t


def ref_layout_set_clamp_value(t: RefLayout, value: int) -> RefLayout:
    t = copy.deepcopy(t)
    t.clampValue = u32(value)
    return t


def ref_create_view(dim: int, has_dimensions: bool, permutation: tuple[int, ...]) -> RefView:
    return RefView(dim, has_dimensions, permutation, [0] * dim, [0] * dim)


def ref_view_set_dimension(v: RefView, dims: list[int]) -> RefView:
    # "Sets viewStride[LDim-1] to 1 and sets viewStride[i] to the product of Dim<i+1> to Dim<LDim-1>"
    v = copy.deepcopy(v)
    v.viewDimension = [u32(d) for d in dims]
    for i in range(v.VDim):
        product = 1
        for k in range(i + 1, v.VDim):
            product = u32(product * v.viewDimension[k])
        v.viewStride[i] = product
    return v


def ref_view_set_stride(v: RefView, strides: list[int]) -> RefView:
    v = copy.deepcopy(v)
    v.viewStride = [u32(s) for s in strides]
    return v


def ref_view_set_clip(v: RefView, ro: int, rs: int, co: int, cs: int) -> RefView:
    v = copy.deepcopy(v)
    v.clipRowOffset, v.clipRowSpan, v.clipColOffset, v.clipColSpan = u32(ro), u32(rs), u32(co), u32(cs)
    return v


class Terminate(Exception):
    """'terminate index calculation', with what happens to the element."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome


@dataclass
class RefElement:
    outcome: Outcome
    index: int = 0
    blockCoord: list[int] = field(default_factory=list)
    coordInBlock: list[int] = field(default_factory=list)
    in_bounds: bool = False


def ref_element(t: RefLayout, v: RefView | None, row: int, col: int, N: int, store: bool) -> RefElement:
    """matrixCoordToTensorElement[WithView] for one element."""
    MAX_DIM = 5
    out_of_bounds = False

    def matrixCoordToLinear() -> int:
        if v is None:
            return u32(row * N + col)
        r, c = row, col
        if (r < v.clipRowOffset or r >= u32(v.clipRowOffset + v.clipRowSpan)
                or c < v.clipColOffset or c >= u32(v.clipColOffset + v.clipColSpan)):
            raise Terminate(Outcome.CLIPPED)
        r -= v.clipRowOffset
        c -= v.clipColOffset
        width = min(N, v.clipColSpan)
        return u32(r * width + c)

    def linearToViewCoord(index: int) -> list[int]:
        dimensions = v.viewDimension if v.hasDimensions else t.span
        viewCoord = [0] * MAX_DIM
        for dim in range(v.VDim - 1, -1, -1):
            i = v.permutation[dim]
            if dimensions[i] == 0:
                raise Terminate(Outcome.FAULT_ZERO_SPAN)
            viewCoord[i] = index % dimensions[i]
            index //= dimensions[i]
        return viewCoord

    def viewCoordToLinear(viewCoord: list[int]) -> int:
        stride = [0] * MAX_DIM
        if v.hasDimensions:
            stride[:v.VDim] = v.viewStride
        else:
            stride[v.VDim - 1] = 1
            for dim in range(v.VDim - 2, -1, -1):
                stride[dim] = u32(stride[dim + 1] * t.span[dim + 1])
        index = 0
        for dim in range(v.VDim - 1, -1, -1):
            index = u32(index + viewCoord[dim] * stride[dim])
        return index

    def linearToSpanCoord(index: int) -> list[int]:
        spanCoord = [0] * MAX_DIM
        for dim in range(t.LDim - 1, -1, -1):
            if t.span[dim] == 0:
                raise Terminate(Outcome.FAULT_ZERO_SPAN)
            spanCoord[dim] = index % t.span[dim]
            index //= t.span[dim]
        return spanCoord

    def spanCoordToTensorCoord(spanCoord: list[int]) -> tuple[list[int], list[int]]:
        nonlocal out_of_bounds
        blockCoord = [0] * MAX_DIM
        coordInBlock = [0] * MAX_DIM
        for dim in range(t.LDim):
            c = i32(spanCoord[dim] + t.offset[dim])
            ld = t.layoutDimension[dim]
            if c < 0 or c >= ld:
                out_of_bounds = True
                clampMode = t.clampMode
                if store and clampMode != UNDEFINED:
                    clampMode = CONSTANT
                if clampMode == UNDEFINED:
                    raise Terminate(Outcome.FAULT_UNDEFINED)
                if clampMode == CONSTANT:
                    raise Terminate(Outcome.CONSTANT)
                if ld == 0:  # no in-bounds coordinate to clamp/wrap to
                    raise Terminate(Outcome.FAULT_EMPTY_DIMENSION)
                if clampMode == CLAMP_TO_EDGE:
                    c = min(max(c, 0), ld - 1)
                elif clampMode == REPEAT:
                    c = smod(c, ld)
                else:
                    if 2 * ld - 2 == 0:
                        raise Terminate(Outcome.FAULT_MIRROR_DIM_1)
                    c = smod(c, 2 * ld - 2)
                    c = (2 * ld - 2 - c) if c >= ld else c
            if t.blockSize[dim] == 0:
                raise Terminate(Outcome.FAULT_ZERO_BLOCK_SIZE)
            coordInBlock[dim] = c % t.blockSize[dim]
            blockCoord[dim] = c // t.blockSize[dim]
        return blockCoord, coordInBlock

    def tensorCoordToLinear(blockCoord: list[int]) -> int:
        index = 0
        for dim in range(t.LDim):
            index = u32(index + blockCoord[dim] * t.stride[dim])
        return index

    try:
        index = matrixCoordToLinear()
        if store and any(b != 1 for b in t.blockSize):
            raise Terminate(Outcome.FAULT_STORE_BLOCK_SIZE)
        if v is not None:
            index = viewCoordToLinear(linearToViewCoord(index))
        blockCoord, coordInBlock = spanCoordToTensorCoord(linearToSpanCoord(index))
        index = tensorCoordToLinear(blockCoord)
    except Terminate as e:
        return RefElement(e.outcome)
    return RefElement(Outcome.ACCESSED, index, blockCoord[:t.LDim], coordInBlock[:t.LDim], not out_of_bounds)


# ============================================================================ scenarios

LAYOUT_OPS = ("dimension", "stride", "slice", "block_size", "clamp_value")
VIEW_OPS = ("dimension", "stride", "clip")

def mostly(common: st.SearchStrategy[int], rare: st.SearchStrategy[int], one_in: int = 12) -> st.SearchStrategy[int]:
    """common values, with an occasional edge case (zero sizes, 32-bit extremes)."""
    # (a middle value: hypothesis draws the bounds of a range more often than the rest)
    return st.integers(0, one_in - 1).flatmap(lambda k: rare if k == one_in // 2 else common)


dims_u = mostly(st.integers(1, 7), st.just(0), 30)
offsets_i = mostly(st.integers(-9, 9), st.integers(-(1 << 31), (1 << 31) - 1)
                   | st.integers((1 << 31) - 9, (1 << 31) - 1) | st.integers(-(1 << 31), -(1 << 31) + 9), 5)
spans_u = mostly(st.integers(1, 8), st.just(0), 40)
strides_u = mostly(st.integers(0, 60), st.integers(0, M32) | st.integers(M32 - 9, M32), 4)
blocks_u = mostly(st.integers(1, 4), st.just(0), 40)
clip_u = mostly(st.integers(0, 6), st.integers(M32 - 6, M32) | st.integers(0, M32), 3)


@dataclass
class Scenario:
    dim: int
    mode: int
    batch: tuple[int, ...]
    layout_ops: list[tuple[str, tuple[np.ndarray, ...]]]
    view: tuple[int, bool, tuple[int, ...]] | None
    view_ops: list[tuple[str, tuple[np.ndarray, ...]]]
    rows: int
    cols: int
    batched_create: bool  # create_layout(batch_shape=batch) rather than growing it from operands


@st.composite
def operand(draw, values, batch: tuple[int, ...], tail: tuple[int, ...]) -> np.ndarray:
    """Shared (tail) or per instance (batch + tail) operand values."""
    shape = tail if (not batch or draw(st.booleans())) else batch + tail
    flat = draw(st.lists(values, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    return np.array(flat, dtype=np.int64).reshape(shape)


@st.composite
def scenarios(draw) -> Scenario:
    dim = draw(st.integers(1, 5))
    mode = draw(st.integers(0, 4))
    batch = draw(st.sampled_from([(), (1,), (3,), (2, 2)]))
    ops = []
    # Most layouts start with SetDimension and are then sliced, as kernels do; some differ.
    names = ["dimension"] + draw(st.lists(st.sampled_from(LAYOUT_OPS), max_size=3))
    if draw(st.integers(0, 2)):
        names.insert(draw(st.integers(1, len(names))), "slice")
    if draw(st.integers(0, 3)) == 0:
        names.insert(0, "block_size")
    if draw(st.integers(0, 19)) == 10:
        names.remove("dimension")
    for name in names:
        if name == "dimension":
            ops.append((name, (draw(operand(dims_u, batch, (dim,))),)))
        elif name == "stride":
            ops.append((name, (draw(operand(strides_u, batch, (dim,))),)))
        elif name == "slice":
            ops.append((name, (draw(operand(offsets_i, batch, (dim,))), draw(operand(spans_u, batch, (dim,))))))
        elif name == "block_size":
            ops.append((name, (draw(operand(blocks_u, batch, (dim,))),)))
        else:
            ops.append((name, (draw(operand(st.integers(0, M32), batch, ())),)))
    view, view_ops = None, []
    if draw(st.booleans()):
        has_dims = draw(st.booleans())
        vdim = draw(st.integers(1, 5 if has_dims else dim))
        perm = tuple(draw(st.permutations(range(vdim))))
        view = (vdim, has_dims, perm)
        view_names = draw(st.lists(st.sampled_from(VIEW_OPS), max_size=3))
        if has_dims and draw(st.integers(0, 7)):
            view_names.insert(0, "dimension")  # a view with dimensions is normally given them
        for name in view_names:
            if name == "dimension":
                view_ops.append((name, (draw(operand(dims_u, batch, (vdim,))),)))
            elif name == "stride":
                view_ops.append((name, (draw(operand(strides_u, batch, (vdim,))),)))
            else:
                view_ops.append((name, tuple(draw(operand(clip_u, batch, ())) for _ in range(4))))
    return Scenario(dim, mode, batch, ops, view, view_ops, draw(st.integers(1, 6)), draw(st.integers(1, 6)),
                    draw(st.booleans()))


def build(s: Scenario) -> tuple[A.TensorLayout, A.TensorView | None]:
    """The vectorised state; state ops see per-instance or shared operands as drawn."""
    lay = A.create_layout(s.dim, s.mode, s.batch if s.batched_create else ())
    impl = {"dimension": A.layout_set_dimension, "stride": A.layout_set_stride, "slice": A.layout_slice,
            "block_size": A.layout_set_block_size, "clamp_value": A.layout_set_clamp_value}
    for name, args in s.layout_ops:
        lay = impl[name](lay, *args)
    view = None
    if s.view is not None:
        view = A.create_view(*s.view)
        vimpl = {"dimension": A.view_set_dimension, "stride": A.view_set_stride, "clip": A.view_set_clip}
        for name, args in s.view_ops:
            view = vimpl[name](view, *args)
    return lay, view


def at(a: np.ndarray, inst: tuple[int, ...], batch: tuple[int, ...], scalar: bool) -> object:
    """Instance inst's operand: a per-instance array has the batch shape in front."""
    per_instance = a.ndim > (0 if scalar else 1)
    return (a[inst] if per_instance and batch else a).tolist()


def ref_build(s: Scenario, inst: tuple[int, ...]) -> tuple[RefLayout, RefView | None]:
    t = ref_create_layout(s.dim, s.mode)
    impl = {"dimension": ref_layout_set_dimension, "stride": ref_layout_set_stride, "slice": ref_layout_slice,
            "block_size": ref_layout_set_block_size, "clamp_value": ref_layout_set_clamp_value}
    for name, args in s.layout_ops:
        t = impl[name](t, *(at(a, inst, s.batch, name == "clamp_value") for a in args))
    v = None
    if s.view is not None:
        v = ref_create_view(*s.view)
        vimpl = {"dimension": ref_view_set_dimension, "stride": ref_view_set_stride, "clip": ref_view_set_clip}
        for name, args in s.view_ops:
            v = vimpl[name](v, *(at(a, inst, s.batch, name == "clip") for a in args))
    return t, v


def instances(s: Scenario, plan_batch: tuple[int, ...]) -> list[tuple[int, ...]]:
    return list(np.ndindex(plan_batch)) if plan_batch else [()]


def build_or_raise(s: Scenario):
    """Both sides agree on whether SetDimension divides by a zero block size."""
    ref_error = None
    try:
        for inst in (np.ndindex(s.batch) if s.batch else [()]):
            ref_build(s, inst)
    except ZeroDivisionError as e:
        ref_error = e
    if ref_error is not None:
        with pytest.raises(A.TensorAddressingError, match="divides by zero"):
            build(s)
        return None
    return build(s)


# ============================================================================ property tests

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenarios(), st.booleans())
def test_plan_matches_reference(s: Scenario, store: bool) -> None:
    built = build_or_raise(s)
    if built is None:
        return
    lay, view = built
    plan = (A.store_tensor_plan if store else A.load_tensor_plan)(lay, view, s.rows, s.cols)
    batch = plan.shape[:-2]
    assert plan.shape == batch + (s.rows, s.cols)
    assert plan.block_coord.shape == plan.coord_in_block.shape == plan.shape + (s.dim,)
    for inst in instances(s, batch):
        t, v = ref_build(s, inst)
        for r in range(s.rows):
            for c in range(s.cols):
                e = ref_element(t, v, r, c, s.cols, store)
                where = inst + (r, c)
                assert plan.outcome[where] == e.outcome, (inst, r, c)
                assert plan.in_bounds[where] == e.in_bounds, (inst, r, c)
                assert plan.in_clip[where] == (e.outcome != Outcome.CLIPPED)
                assert plan.undefined[where] == (e.outcome == Outcome.FAULT_UNDEFINED)
                assert plan.mirror_zero_dim[where] == (e.outcome == Outcome.FAULT_MIRROR_DIM_1)
                if store:
                    assert plan.discarded[where] == (e.outcome == Outcome.CONSTANT)
                else:
                    assert plan.use_clamp_value[where] == (e.outcome == Outcome.CONSTANT)
                if e.outcome == Outcome.ACCESSED:
                    assert plan.element_index[where] == e.index, (inst, r, c)
                    assert plan.block_coord[where].tolist() == e.blockCoord
                    assert plan.coord_in_block[where].tolist() == e.coordInBlock


BUFFER = 97


@SETTINGS
@given(scenarios(), st.integers(0, 2**31))
def test_gather_scatter_match_reference(s: Scenario, seed: int) -> None:
    built = build_or_raise(s)
    if built is None:
        return
    lay, view = built
    rng = np.random.default_rng(seed)
    buffer = rng.integers(-1000, 1000, BUFFER).astype(np.int32)
    load, store = A.load_tensor_plan(lay, view, s.rows, s.cols), A.store_tensor_plan(lay, view, s.rows, s.cols)
    batch = load.shape[:-2]
    obj = rng.integers(-1000, 1000, load.shape).astype(np.int32)
    values = rng.integers(-1000, 1000, load.shape).astype(np.int32)

    expected = obj.copy()
    load_ok, store_ok = True, True
    written: dict[int, set[int]] = {}
    for inst in instances(s, batch):
        t, v = ref_build(s, inst)
        for r in range(s.rows):
            for c in range(s.cols):
                where = inst + (r, c)
                ld, st_ = ref_element(t, v, r, c, s.cols, False), ref_element(t, v, r, c, s.cols, True)
                if ld.outcome >= Outcome.FAULT_UNDEFINED or (ld.outcome == Outcome.ACCESSED and ld.index >= BUFFER):
                    load_ok = False
                elif ld.outcome == Outcome.ACCESSED:
                    expected[where] = buffer[ld.index]
                elif ld.outcome == Outcome.CONSTANT:
                    expected[where] = i32(t.clampValue)
                if st_.outcome >= Outcome.FAULT_UNDEFINED or (st_.outcome == Outcome.ACCESSED and st_.index >= BUFFER):
                    store_ok = False
                elif st_.outcome == Outcome.ACCESSED:
                    written.setdefault(st_.index, set()).add(int(values[where]))

    clamp = A.clamp_value_as(lay.clamp_value, np.int32)
    if load_ok:
        np.testing.assert_array_equal(A.gather(buffer, load, obj, clamp), expected)
    else:
        with pytest.raises(A.TensorAddressingError):
            A.gather(buffer, load, obj, clamp)
    out = buffer.copy()
    if store_ok:
        A.scatter(out, store, values)
        for i in range(BUFFER):
            assert int(out[i]) in written.get(i, {int(buffer[i])}), i
    else:
        with pytest.raises(A.TensorAddressingError):
            A.scatter(out, store, values)


# ============================================================================ worked examples

def layout2d(mode: int, dims=(8, 8), batch=()) -> A.TensorLayout:
    return A.layout_set_dimension(A.create_layout(2, mode, batch), dims)


def test_create_layout_initial_state() -> None:
    lay = A.create_layout(3, CONSTANT, (2,))
    for name in ("dimension", "stride", "offset", "span"):
        assert getattr(lay, name).tolist() == [[0, 0, 0]] * 2
    assert lay.block_size.tolist() == [[1, 1, 1]] * 2
    assert lay.clamp_value.tolist() == [0, 0]
    v = A.create_view(2, True, (1, 0))
    assert v.clip_row_span.item() == v.clip_col_span.item() == M32 and v.clip_row_offset.item() == 0


def test_set_dimension_resets_offset_span_and_strides() -> None:
    lay = A.layout_slice(layout2d(CONSTANT, (8, 8)), [3, 4], [2, 2])
    lay = A.layout_set_stride(lay, [100, 1])
    lay = A.layout_set_dimension(lay, [5, 6])
    assert lay.offset.tolist() == [0, 0]
    assert lay.span.tolist() == [5, 6]
    assert lay.stride.tolist() == [6, 1]


def test_set_dimension_strides_use_ceiling_of_blocks() -> None:
    # 3-D, blocks (1, 2, 4): stride[1] = ceil(10/4) = 3, stride[0] = 3 * ceil(7/2) = 12.
    # (The NVIDIA driver floors: 2 and 6; pycoop follows the spec.)
    lay = A.layout_set_block_size(A.create_layout(3, UNDEFINED), [1, 2, 4])
    lay = A.layout_set_dimension(lay, [3, 7, 10])
    assert lay.stride.tolist() == [12, 3, 1]


def test_set_dimension_with_zero_block_size_is_reported() -> None:
    lay = A.layout_set_block_size(A.create_layout(2, UNDEFINED, (2,)), [[1, 1], [1, 0]])
    with pytest.raises(A.TensorAddressingError, match=r"blockSize\[1\] is 0 in instance \(1,\)"):
        A.layout_set_dimension(lay, [4, 4])


def test_slice_adds_to_offset() -> None:
    lay = A.layout_slice(A.layout_slice(layout2d(CONSTANT), [1, 2], [4, 4]), [3, -1], [2, 2])
    assert lay.offset.tolist() == [4, 1]
    assert lay.span.tolist() == [2, 2]
    plan = A.load_tensor_plan(lay, None, 2, 2)
    assert plan.element_index.tolist() == [[4 * 8 + 1, 4 * 8 + 2], [5 * 8 + 1, 5 * 8 + 2]]


def test_offsets_are_int32_and_wrap() -> None:
    lay = A.layout_slice(layout2d(CONSTANT), [0xFFFFFFFF, 0], [1, 1])
    assert lay.offset.tolist() == [-1, 0]
    lay = A.layout_slice(A.layout_slice(layout2d(CONSTANT), [2**31 - 1, 0], [1, 1]), [1, 0], [1, 1])
    assert lay.offset.tolist() == [-(2**31), 0]


def one_d(mode: int, dim: int, offset: int, span: int) -> A.LoadPlan:
    lay = A.layout_slice(A.layout_set_dimension(A.create_layout(1, mode), [dim]), [offset], [span])
    return A.load_tensor_plan(lay, None, 1, span)


def test_repeat_with_negative_coordinates_uses_smod() -> None:
    plan = one_d(REPEAT, 5, -7, 9)  # c = -7 .. 1; OpSMod(c, 5) takes the divisor's sign
    assert plan.element_index[0].tolist() == [3, 4, 0, 1, 2, 3, 4, 0, 1]
    assert plan.accessed.all() and plan.in_bounds[0].tolist() == [False] * 7 + [True] * 2


def test_mirror_repeat_uses_layout_dimension() -> None:
    plan = one_d(MIRROR_REPEAT, 4, -3, 11)  # c = -3 .. 7, period 2*4-2 = 6
    assert plan.element_index[0].tolist() == [3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1]


def test_clamp_to_edge() -> None:
    assert one_d(CLAMP_TO_EDGE, 4, -2, 8).element_index[0].tolist() == [0, 0, 0, 1, 2, 3, 3, 3]


def test_coordinate_wraps_to_int32() -> None:
    # int32_t c = spanCoord + offset: offset 2**31-1 then +1 wraps to -2**31, clamped to 0.
    assert one_d(CLAMP_TO_EDGE, 4, 2**31 - 1, 3).element_index[0].tolist() == [3, 0, 0]


def test_linear_index_wraps_to_uint32() -> None:
    # tensorCoordToLinear is uint32_t: a stride of 0xFFFFFFFF steps backwards (as the GPU's 32-bit math).
    lay = A.layout_set_stride(A.layout_set_dimension(A.create_layout(2, UNDEFINED), [2, 3]), [M32, 1])
    plan = A.load_tensor_plan(lay, None, 2, 3)
    assert plan.element_index.tolist() == [[0, 1, 2], [M32, 0, 1]]


def test_clip_bound_wraps_to_uint32() -> None:
    # row >= clipRowOffset + clipRowSpan is uint32_t: 1 + 0xFFFFFFFF == 0, so every row is clipped.
    lay = A.layout_set_dimension(A.create_layout(2, CONSTANT), [4, 4])
    plan = A.load_tensor_plan(lay, A.view_set_clip(A.create_view(2, False, (0, 1)), 1, M32, 0, M32), 4, 4)
    assert not plan.in_clip.any()


def test_mirror_repeat_on_dimension_1_is_detected() -> None:
    plan = one_d(MIRROR_REPEAT, 1, -1, 3)
    assert plan.mirror_zero_dim[0].tolist() == [True, False, True]
    with pytest.raises(A.TensorAddressingError, match="MirrorRepeat on a layout dimension of 1") as e:
        plan.check()
    assert (e.value.row, e.value.col) == (0, 0)


def test_undefined_out_of_bounds_is_reported() -> None:
    lay = layout2d(UNDEFINED, batch=(2,))
    lay = A.layout_slice(lay, [[0, 0], [6, 0]], [4, 4])
    plan = A.load_tensor_plan(lay, None, 4, 4)
    assert not plan.undefined[0].any() and plan.undefined[1, 2:].all() and not plan.undefined[1, :2].any()
    with pytest.raises(A.TensorAddressingError, match=r"instance \(1,\) of batch shape \(2,\), element \(row 2, col 0\)"):
        A.gather(np.zeros(64, np.float32), plan, np.zeros((2, 4, 4), np.float32), np.float32(0))
    with pytest.raises(A.TensorAddressingError, match="Undefined"):
        A.scatter(np.zeros(64, np.float32), A.store_tensor_plan(lay, None, 4, 4), np.float32(1))


@pytest.mark.parametrize("dtype, bits, value", [
    (np.float16, 0x3C00, 1.0), (np.float16, 0xABCD3800, 0.5),  # low 16 bits
    (np.float32, 0x3F800000, 1.0), (np.float32, 0xC0000000, -2.0),
    (np.int32, 0xFFFFFFFF, -1), (np.uint32, 0xFFFFFFFF, 2**32 - 1), (np.int8, 0x1FF, -1),
])
def test_clamp_value_is_a_bit_pattern(dtype, bits: int, value: float) -> None:
    assert A.clamp_value_as(bits, dtype).item() == value
    assert A.clamp_value_as(bits, dtype).dtype == np.dtype(dtype)


def test_constant_load_uses_clamp_value_and_clip_keeps_object() -> None:
    lay = A.layout_set_clamp_value(A.layout_slice(layout2d(CONSTANT, (4, 4)), [2, 0], [4, 4]), 0x3C00)
    view = A.view_set_clip(A.create_view(2, False, (0, 1)), 0, 4, 0, 3)  # column 3 clipped
    plan = A.load_tensor_plan(lay, view, 4, 4)
    buf = np.arange(16, dtype=np.float16)
    out = A.gather(buf, plan, np.full((4, 4), -5, np.float16), A.clamp_value_as(lay.clamp_value, np.float16))
    # width = min(N, clipColSpan) = 3: the clipped layout sees a 3-wide row-major matrix.
    lin = np.arange(4)[:, None] * 3 + np.arange(3)
    rows, cols = lin // 4 + 2, lin % 4
    expected = np.where(rows < 4, rows * 4 + cols, 1.0).astype(np.float16)
    np.testing.assert_array_equal(out[:, :3], expected)
    np.testing.assert_array_equal(out[:, 3], -5)


def test_store_discards_out_of_bounds_in_every_mode_but_undefined() -> None:
    for mode in (CONSTANT, CLAMP_TO_EDGE, REPEAT, MIRROR_REPEAT):
        lay = A.layout_slice(layout2d(mode, (4, 4)), [-1, 2], [3, 3])
        plan = A.store_tensor_plan(lay, None, 3, 3)
        buf = np.zeros(16, np.int32)
        A.scatter(buf, plan, np.arange(1, 10, dtype=np.int32).reshape(3, 3))
        expected = np.zeros((4, 4), np.int32)
        expected[0:2, 2:4] = [[4, 5], [7, 8]]
        np.testing.assert_array_equal(buf.reshape(4, 4), expected, err_msg=A.CLAMP_MODE_NAMES[mode])


def test_store_with_block_size_is_reported() -> None:
    lay = A.layout_set_block_size(layout2d(CONSTANT), [1, 2])
    with pytest.raises(A.TensorAddressingError, match="block size other than 1"):
        A.scatter(np.zeros(64, np.int32), A.store_tensor_plan(lay, None, 2, 2), np.int32(1))


def test_block_coordinates_and_strides_in_blocks() -> None:
    # 8 x 12 elements in blocks of 1 x 4: 3 blocks per row; strides count blocks.
    lay = A.layout_set_dimension(A.layout_set_block_size(A.create_layout(2, UNDEFINED), [1, 4]), [8, 12])
    assert lay.stride.tolist() == [3, 1]
    lay = A.layout_slice(lay, [2, 5], [2, 6])
    plan = A.load_tensor_plan(lay, None, 2, 6)
    r, c = np.arange(2)[:, None] + 2, np.arange(6)[None, :] + 5
    np.testing.assert_array_equal(plan.block_coord[..., 0], np.broadcast_to(r, (2, 6)))
    np.testing.assert_array_equal(plan.block_coord[..., 1], np.broadcast_to(c // 4, (2, 6)))
    np.testing.assert_array_equal(plan.coord_in_block[..., 1], np.broadcast_to(c % 4, (2, 6)))
    np.testing.assert_array_equal(plan.element_index, r * 3 + c // 4)  # DecodeFunc pointer / pointee size


def test_view_permutation_transposes() -> None:
    lay = A.layout_slice(layout2d(UNDEFINED, (8, 8)), [1, 2], [3, 5])
    plan = A.load_tensor_plan(lay, A.create_view(2, False, (1, 0)), 5, 3)
    np.testing.assert_array_equal(plan.element_index, (np.arange(3)[None, :] + 1) * 8 + np.arange(5)[:, None] + 2)


def test_view_with_dimensions_reshapes() -> None:
    # a 2x8 matrix read as a 4x4 span through a view of dims (2, 2, 4) permuted (1, 0, 2)
    lay = A.layout_set_dimension(A.create_layout(2, UNDEFINED), [4, 4])
    view = A.view_set_dimension(A.create_view(3, True, (1, 0, 2)), [2, 2, 4])
    assert view.view_stride.tolist() == [8, 4, 1]
    plan = A.load_tensor_plan(lay, view, 2, 8)
    # linear i -> coordinates with dim 0 innermost-but-one: i = ((v1 * 2) + v0) * 4 + v2
    i = np.arange(16).reshape(2, 8)
    v2, v0, v1 = i % 4, (i // 4) % 2, i // 8
    np.testing.assert_array_equal(plan.element_index, v0 * 8 + v1 * 4 + v2)


def test_view_without_dimensions_cannot_exceed_layout_dim() -> None:
    with pytest.raises(ValueError, match="cannot exceed"):
        A.load_tensor_plan(layout2d(CONSTANT), A.create_view(3, False, (0, 1, 2)), 2, 2)


def test_batch_broadcasting_of_state_ops() -> None:
    lay = A.layout_slice(layout2d(CONSTANT, (16, 16)), np.array([[0, 0], [4, 4], [8, 8]]), [4, 4])
    assert lay.batch_shape == (3,) and lay.dimension.shape == (3, 2)
    view = A.view_set_clip(A.create_view(2, False, (0, 1)), 0, np.array([[4], [2]]), 0, 4)
    plan = A.load_tensor_plan(lay, view, 4, 4)
    assert plan.shape == (2, 3, 4, 4)
    assert plan.in_clip[1, :, 2:].sum() == 0 and plan.in_clip[0].all()
    np.testing.assert_array_equal(plan.element_index[0, 2], (np.arange(4)[:, None] + 8) * 16 + np.arange(4) + 8)
    with pytest.raises(ValueError, match="expected 2 operands"):
        A.layout_set_stride(lay, [1, 2, 3])


def test_out_of_buffer_is_reported() -> None:
    plan = A.load_tensor_plan(A.layout_slice(layout2d(CONSTANT, (8, 8)), [1, 0], [2, 2]), None, 2, 2)
    with pytest.raises(A.TensorAddressingError, match=r"\(row 0, col 1\) addresses element 9, outside the buffer of 9"):
        A.gather(np.zeros(9, np.int32), plan, np.zeros((2, 2), np.int32), np.int32(0))


def test_zero_span_is_reported_not_a_crash():
    """A fresh layout has span 0: the decomposition divides by zero, reported per element."""
    lay = A.create_layout(2, A.UNDEFINED)
    plan = A.load_tensor_plan(lay, None, 4, 4)
    assert (plan.outcome == Outcome.FAULT_ZERO_SPAN).all()
    view = A.view_set_clip(A.create_view(2, False, (0, 1)), 0, 2, 0, 2)
    plan = A.load_tensor_plan(lay, view, 4, 4)
    assert (plan.outcome[:2, :2] == Outcome.FAULT_ZERO_SPAN).all()
    assert (plan.outcome[2:, :] == Outcome.CLIPPED).all()
