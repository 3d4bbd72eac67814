"""Tensor layout / view addressing of SPV_NV_cooperative_matrix2 (rev 2) and SPV_NV_tensor_addressing.

Pure NumPy semantics, no IR knowledge. Every state value carries a leading batch shape ``B``
(one entry per scope instance), and an addressing plan covers all instances at once.

Integer semantics (the spec's pseudo-code types, C arithmetic):

* Every operand is a 32-bit integer: it is reduced modulo 2**32 and read as ``uint32_t`` for
  dimensions, strides, spans, block sizes, clip values and the clamp value, and as ``int32_t``
  for Slice offsets (``offset`` is declared ``int32_t``). State arrays hold these values in int64.
* ``uint32_t`` arithmetic of the pseudo-code wraps modulo 2**32: ``row * N + col``, the view and
  SetDimension stride products, ``viewCoordToLinear``, ``tensorCoordToLinear`` and the clip bound
  ``clipOffset + clipSpan``. ``int32_t c = spanCoord + offset`` wraps to int32.
* The clamp formulas use exact integer arithmetic, ``%`` being OpSMod (result takes the
  divisor's sign), so coordinates after clamping lie in ``[0, layoutDimension)``.

What the spec leaves undefined is not guessed: such elements get a fault outcome that
``TensorPlan.check`` (called by ``gather``/``scatter``) reports with the instance and element.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from functools import cached_property
from math import prod

import numpy as np
import numpy.typing as npt

__all__ = [
    "UNDEFINED", "CONSTANT", "CLAMP_TO_EDGE", "REPEAT", "MIRROR_REPEAT", "CLAMP_MODE_NAMES",
    "Outcome", "TensorAddressingError", "TensorLayout", "TensorView",
    "create_layout", "layout_set_dimension", "layout_set_stride", "layout_slice",
    "layout_set_clamp_value", "layout_set_block_size",
    "create_view", "view_set_dimension", "view_set_stride", "view_set_clip",
    "TensorPlan", "LoadPlan", "StorePlan", "load_tensor_plan", "store_tensor_plan",
    "clamp_value_as", "gather", "scatter",
]

UNDEFINED, CONSTANT, CLAMP_TO_EDGE, REPEAT, MIRROR_REPEAT = range(5)
CLAMP_MODE_NAMES = ("Undefined", "Constant", "ClampToEdge", "Repeat", "MirrorRepeat")

_M32 = 0xFFFFFFFF


class Outcome(enum.IntEnum):
    """What happens to one matrix element; values >= FAULT_UNDEFINED are faults to report."""

    ACCESSED = 0          # memory is read / written at element_index (in bounds or clamped)
    CLIPPED = 1           # outside the view's clip: load keeps Object's value, store skipped
    CONSTANT = 2          # Constant clamp: load returns clampValue; store (any mode but Undefined) discarded
    FAULT_UNDEFINED = 3   # out of bounds with clamp mode Undefined: undefined behaviour
    FAULT_MIRROR_DIM_1 = 4  # MirrorRepeat on layoutDimension 1: `c % 0` (the GPU hangs)
    FAULT_ZERO_SPAN = 5   # span or view dimension 0: `index % 0` in the coordinate decomposition
    FAULT_ZERO_BLOCK_SIZE = 6  # blockSize 0: `c % 0`
    FAULT_EMPTY_DIMENSION = 7  # ClampToEdge/Repeat/MirrorRepeat on layoutDimension 0: nothing to clamp to
    FAULT_STORE_BLOCK_SIZE = 8  # store with a blockSize != 1: forbidden by the spec (data races)


_REASONS = {
    Outcome.FAULT_UNDEFINED: "out of bounds with clamp mode Undefined (undefined behaviour)",
    Outcome.FAULT_MIRROR_DIM_1: "out of bounds with MirrorRepeat on a layout dimension of 1: the "
                                "modulus 2*dim-2 is 0 (division by zero; the GPU hangs)",
    Outcome.FAULT_ZERO_SPAN: "a span (or view dimension) of 0 divides by zero in the coordinate decomposition",
    Outcome.FAULT_ZERO_BLOCK_SIZE: "a block size of 0 divides by zero",
    Outcome.FAULT_EMPTY_DIMENSION: "out of bounds in a layout dimension of 0: ClampToEdge/Repeat/"
                                   "MirrorRepeat have no coordinate to clamp to",
    Outcome.FAULT_STORE_BLOCK_SIZE: "OpCooperativeMatrixStoreTensorNV with a block size other than 1 "
                                    "(the spec forbids it: data races)",
}


class TensorAddressingError(Exception):
    """An access the spec leaves undefined (or one outside the buffer); says which instance and element."""

    def __init__(self, message: str, instance: tuple[int, ...] = (), row: int = -1, col: int = -1,
                 outcome: Outcome | None = None) -> None:
        super().__init__(message)
        self.instance, self.row, self.col, self.outcome = instance, row, col, outcome


# --------------------------------------------------------------------------- integer helpers

def _u32(x: npt.ArrayLike) -> np.ndarray:
    """A 32-bit operand read as uint32_t, held in int64."""
    return np.asarray(x).astype(np.int64) & _M32


def _i32(x: npt.ArrayLike) -> np.ndarray:
    """A 32-bit operand read as int32_t, held in int64."""
    v = np.asarray(x).astype(np.int64) & _M32
    return v - ((v >> 31) << 32)


def _mul32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """uint32_t product (wraps); uint64 so that products of two 32-bit values cannot overflow."""
    return ((a.astype(np.uint64) * b.astype(np.uint64)) & np.uint64(_M32)).astype(np.int64)


def _vector_operand(values: npt.ArrayLike, dim: int, what: str) -> np.ndarray:
    a = np.asarray(values)
    if a.ndim == 0 or a.shape[-1] != dim:
        raise ValueError(f"{what}: expected {dim} operands along the last axis, got shape {a.shape}")
    return a


def _rebatch(obj, **new: np.ndarray):
    """Copy of a layout/view with some state replaced, every field broadcast to one batch shape."""
    fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)
              if f.name in obj._VECTOR_FIELDS + obj._SCALAR_FIELDS}
    fields.update(new)
    batch = np.broadcast_shapes(*(v.shape[:-1] if k in obj._VECTOR_FIELDS else v.shape
                                  for k, v in fields.items()))
    for k, v in fields.items():
        tail = v.shape[-1:] if k in obj._VECTOR_FIELDS else ()
        fields[k] = np.broadcast_to(v, batch + tail)
    return dataclasses.replace(obj, **fields)


def _instance(batch_shape: tuple[int, ...], index: tuple[int, ...]) -> str:
    index = tuple(int(i) for i in index)
    return "the (only) instance" if not batch_shape else f"instance {index} of batch shape {batch_shape}"


# --------------------------------------------------------------------------- tensor layout

@dataclass(frozen=True, eq=False)
class TensorLayout:
    """tensorLayoutNV: ``dim`` and ``clamp_mode`` are compile-time, the rest per instance (read-only arrays)."""

    dim: int
    clamp_mode: int
    dimension: np.ndarray    # B + (dim,)  layoutDimension, uint32
    stride: np.ndarray       # B + (dim,)  uint32, in blocks when blockSize != 1
    offset: np.ndarray       # B + (dim,)  int32
    span: np.ndarray         # B + (dim,)  uint32
    block_size: np.ndarray   # B + (dim,)  uint32
    clamp_value: np.ndarray  # B           uint32 bit pattern

    _VECTOR_FIELDS = ("dimension", "stride", "offset", "span", "block_size")
    _SCALAR_FIELDS = ("clamp_value",)

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return self.clamp_value.shape


def create_layout(dim: int, clamp_mode: int, batch_shape: tuple[int, ...] = ()) -> TensorLayout:
    """OpCreateTensorLayoutNV: dimension, stride, span, offset 0; blockSize 1; clampValue 0."""
    if not 1 <= dim <= 5:
        raise ValueError(f"tensor layout Dim must be in [1, 5], got {dim}")
    if clamp_mode not in range(5):
        raise ValueError(f"clamp mode must be one of 0..4 ({', '.join(CLAMP_MODE_NAMES)}), got {clamp_mode}")
    zeros = np.zeros(tuple(batch_shape) + (dim,), np.int64)
    return _rebatch(TensorLayout(dim, clamp_mode, zeros, zeros, zeros, zeros, zeros + 1,
                                 np.zeros(tuple(batch_shape), np.int64)))


def layout_set_dimension(layout: TensorLayout, dims: npt.ArrayLike) -> TensorLayout:
    """OpTensorLayoutSetDimensionNV: dimension = span = dims, offset = 0, default strides.

    stride[LDim-1] = 1, stride[i] = stride[i+1] * ceil(dims[i+1] / blockSize[i+1]) (the spec's
    ceiling; the NVIDIA driver floors, see docs/design.md). A block size of 0 there divides by zero
    and raises TensorAddressingError.
    """
    d = _u32(_vector_operand(dims, layout.dim, "OpTensorLayoutSetDimensionNV"))
    batch = np.broadcast_shapes(layout.batch_shape, d.shape[:-1])
    d = np.broadcast_to(d, batch + (layout.dim,))
    bs = np.broadcast_to(layout.block_size, d.shape)
    if (bs[..., 1:] == 0).any():
        where = np.argwhere(bs[..., 1:] == 0)[0]
        raise TensorAddressingError(
            f"OpTensorLayoutSetDimensionNV: blockSize[{where[-1] + 1}] is 0 in {_instance(batch, where[:-1])}: "
            f"the default stride ceil(dim / blockSize) divides by zero")
    strides = np.ones_like(d)
    for i in range(layout.dim - 2, -1, -1):
        blocks = -(-d[..., i + 1] // np.maximum(bs[..., i + 1], 1))
        strides[..., i] = _mul32(strides[..., i + 1], blocks)
    return _rebatch(layout, dimension=d, span=d, offset=np.zeros_like(d), stride=strides)


def layout_set_stride(layout: TensorLayout, strides: npt.ArrayLike) -> TensorLayout:
    """OpTensorLayoutSetStrideNV (strides count blocks when blockSize != 1)."""
    return _rebatch(layout, stride=_u32(_vector_operand(strides, layout.dim, "OpTensorLayoutSetStrideNV")))


def layout_slice(layout: TensorLayout, offsets: npt.ArrayLike, spans: npt.ArrayLike) -> TensorLayout:
    """OpTensorLayoutSliceNV: offset += offsets (int32 wrap) -- it adds, it does not set; span = spans."""
    off = _i32(_vector_operand(offsets, layout.dim, "OpTensorLayoutSliceNV offsets"))
    spn = _u32(_vector_operand(spans, layout.dim, "OpTensorLayoutSliceNV spans"))
    return _rebatch(layout, offset=_i32(layout.offset + off), span=spn)


def layout_set_clamp_value(layout: TensorLayout, value_u32: npt.ArrayLike) -> TensorLayout:
    """OpTensorLayoutSetClampValueNV: a 32-bit pattern, reinterpreted at load time (see clamp_value_as)."""
    return _rebatch(layout, clamp_value=_u32(value_u32))


def layout_set_block_size(layout: TensorLayout, sizes: npt.ArrayLike) -> TensorLayout:
    """OpTensorLayoutSetBlockSizeNV: strides set before or after are then counted in blocks."""
    return _rebatch(layout, block_size=_u32(_vector_operand(sizes, layout.dim, "OpTensorLayoutSetBlockSizeNV")))


# --------------------------------------------------------------------------- tensor view

@dataclass(frozen=True, eq=False)
class TensorView:
    """tensorViewNV: ``dim``, ``has_dimensions``, ``permutation`` are compile-time, the rest per instance."""

    dim: int
    has_dimensions: bool
    permutation: tuple[int, ...]
    view_dimension: np.ndarray  # B + (dim,) uint32
    view_stride: np.ndarray     # B + (dim,) uint32
    clip_row_offset: np.ndarray  # B uint32
    clip_row_span: np.ndarray    # B uint32
    clip_col_offset: np.ndarray  # B uint32
    clip_col_span: np.ndarray    # B uint32

    _VECTOR_FIELDS = ("view_dimension", "view_stride")
    _SCALAR_FIELDS = ("clip_row_offset", "clip_row_span", "clip_col_offset", "clip_col_span")

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return self.clip_row_offset.shape


def create_view(dim: int, has_dimensions: bool, permutation: tuple[int, ...] | list[int],
                batch_shape: tuple[int, ...] = ()) -> TensorView:
    """OpCreateTensorViewNV: viewDimension, viewStride 0; clip offsets 0, spans 0xFFFFFFFF."""
    if not 1 <= dim <= 5:
        raise ValueError(f"tensor view Dim must be in [1, 5], got {dim}")
    perm = tuple(int(p) for p in permutation)
    if sorted(perm) != list(range(dim)):
        raise ValueError(f"view permutation {perm} is not a permutation of range({dim})")
    b = tuple(batch_shape)
    zeros, zs = np.zeros(b + (dim,), np.int64), np.zeros(b, np.int64)
    return _rebatch(TensorView(dim, bool(has_dimensions), perm, zeros, zeros, zs, zs + _M32, zs, zs + _M32))


def view_set_dimension(view: TensorView, dims: npt.ArrayLike) -> TensorView:
    """OpTensorViewSetDimensionNV: viewStride[VDim-1] = 1, viewStride[i] = prod(dims[i+1:]) (uint32 wrap).

    The spec writes LDim-1 for the last stride; the view has VDim dimensions, so VDim-1 is meant.
    """
    d = _u32(_vector_operand(dims, view.dim, "OpTensorViewSetDimensionNV"))
    strides = np.ones_like(d)
    for i in range(view.dim - 2, -1, -1):
        strides[..., i] = _mul32(strides[..., i + 1], d[..., i + 1])
    return _rebatch(view, view_dimension=d, view_stride=strides)


def view_set_stride(view: TensorView, strides: npt.ArrayLike) -> TensorView:
    """OpTensorViewSetStrideNV (only used when the view has its own dimensions)."""
    return _rebatch(view, view_stride=_u32(_vector_operand(strides, view.dim, "OpTensorViewSetStrideNV")))


def view_set_clip(view: TensorView, row_off: npt.ArrayLike, row_span: npt.ArrayLike,
                  col_off: npt.ArrayLike, col_span: npt.ArrayLike) -> TensorView:
    """OpTensorViewSetClipNV; each operand is a scalar or has the batch shape."""
    return _rebatch(view, clip_row_offset=_u32(row_off), clip_row_span=_u32(row_span),
                    clip_col_offset=_u32(col_off), clip_col_span=_u32(col_span))


# --------------------------------------------------------------------------- plans

@dataclass(frozen=True, eq=False)
class TensorPlan:
    """Addressing of every element of an M x N matrix for every instance (arrays B + (rows, cols)).

    ``element_index`` (uint32 value in int64, in units of the pointee type: the component type,
    or the DecodeFunc pointee, whose pointer is element_index * sizeof(pointee)), ``block_coord``
    and ``coord_in_block`` are only meaningful where ``accessed``. Arrays may be read-only
    broadcast views.
    """

    layout: TensorLayout
    view: TensorView | None
    rows: int
    cols: int
    outcome: np.ndarray      # int8 Outcome per element
    element_index: np.ndarray
    in_bounds: np.ndarray    # not clipped, no fault, every coordinate within the layout dimensions
    _block_parts: tuple[np.ndarray, ...] = dataclasses.field(repr=False)
    _in_block_parts: tuple[np.ndarray, ...] = dataclasses.field(repr=False)

    _OP = "tensor access"

    @property
    def shape(self) -> tuple[int, ...]:
        return self.outcome.shape

    @cached_property
    def in_clip(self) -> np.ndarray:
        return self.outcome != Outcome.CLIPPED

    @cached_property
    def accessed(self) -> np.ndarray:
        """Memory is read/written at element_index (in bounds, or clamped into bounds)."""
        return self.outcome == Outcome.ACCESSED

    @cached_property
    def fault(self) -> np.ndarray:
        return self.outcome >= Outcome.FAULT_UNDEFINED

    @cached_property
    def undefined(self) -> np.ndarray:
        """Out of bounds with clamp mode Undefined."""
        return self.outcome == Outcome.FAULT_UNDEFINED

    @cached_property
    def mirror_zero_dim(self) -> np.ndarray:
        """MirrorRepeat clamping on a layout dimension of 1 (modulus 0: the GPU hangs)."""
        return self.outcome == Outcome.FAULT_MIRROR_DIM_1

    @cached_property
    def block_coord(self) -> np.ndarray:
        """B + (rows, cols, dim): the DecodeFunc blockCoord argument."""
        return self._stack(self._block_parts)

    @cached_property
    def coord_in_block(self) -> np.ndarray:
        """B + (rows, cols, dim): the DecodeFunc coordInBlock argument."""
        return self._stack(self._in_block_parts)

    def _stack(self, parts: tuple[np.ndarray, ...]) -> np.ndarray:
        full = (prod(self.shape[:-2]), self.rows, self.cols)
        return np.stack([np.broadcast_to(p, full) for p in parts], axis=-1).reshape(self.shape + (len(parts),))

    def check(self) -> None:
        """Raise TensorAddressingError naming the first faulty element (instance, row, col, why)."""
        bad = self.fault
        if not bad.any():
            return
        first = tuple(int(i) for i in np.unravel_index(int(np.flatnonzero(bad)[0]), self.shape))
        inst, row, col = first[:-2], first[-2], first[-1]
        code = Outcome(int(self.outcome[first]))
        lay = {k: np.broadcast_to(getattr(self.layout, k), self.shape[:-2] + (self.layout.dim,))[inst].tolist()
               for k in ("dimension", "offset", "span", "stride", "block_size")}
        raise TensorAddressingError(
            f"{self._OP} of a {self.rows}x{self.cols} matrix: {int(bad.sum())} element(s) with undefined "
            f"behaviour; first: {_instance(self.shape[:-2], inst)}, element (row {row}, col {col}): "
            f"{_REASONS[code]}. Layout of that instance: clampMode="
            f"{CLAMP_MODE_NAMES[self.layout.clamp_mode]}, "
            + ", ".join(f"{k}={v}" for k, v in lay.items()),
            inst, row, col, code)


@dataclass(frozen=True, eq=False)
class LoadPlan(TensorPlan):
    """Plan of OpCooperativeMatrixLoadTensorNV."""

    _OP = "OpCooperativeMatrixLoadTensorNV"

    @cached_property
    def use_clamp_value(self) -> np.ndarray:
        """Constant mode, out of bounds: the element is the layout's clamp value."""
        return self.outcome == Outcome.CONSTANT


@dataclass(frozen=True, eq=False)
class StorePlan(TensorPlan):
    """Plan of OpCooperativeMatrixStoreTensorNV."""

    _OP = "OpCooperativeMatrixStoreTensorNV"

    @cached_property
    def discarded(self) -> np.ndarray:
        """Out of bounds with any clamp mode but Undefined: the store is dropped."""
        return self.outcome == Outcome.CONSTANT


def load_tensor_plan(layout: TensorLayout, view: TensorView | None, rows: int, cols: int) -> LoadPlan:
    """Addressing of OpCooperativeMatrixLoadTensorNV (matrixCoordToTensorElement[WithView])."""
    return LoadPlan(*_plan(layout, view, rows, cols, store=False))


def store_tensor_plan(layout: TensorLayout, view: TensorView | None, rows: int, cols: int) -> StorePlan:
    """Addressing of OpCooperativeMatrixStoreTensorNV: out of bounds is a discard unless Undefined."""
    return StorePlan(*_plan(layout, view, rows, cols, store=True))


def _plan(layout: TensorLayout, view: TensorView | None, rows: int, cols: int, store: bool) -> tuple:
    """The spec pseudo-code, vectorised without computing per (instance, element) what is shared.

    1. Instances with equal span/view/clip state share the matrix -> span-coordinate map, so it is
       computed once per distinct state ("group") on rows x cols elements.
    2. Per layout dimension, the span coordinates that occur are few; the clamp/block/stride
       transform is tabulated per (instance, span coordinate).
    3. Tables are gathered per element; a dimension whose coordinate depends only on the row (or
       the column) is gathered on that axis and broadcast, so the common 2-D case costs a single
       broadcast add for element_index.
    """
    if rows < 1 or cols < 1:
        raise ValueError(f"matrix must have at least one row and column, got {rows}x{cols}")
    ldim = layout.dim
    if view is not None and not view.has_dimensions and view.dim > ldim:
        raise ValueError(f"a view without dimensions uses the layout span, so its Dim ({view.dim}) "
                         f"cannot exceed the layout's ({ldim})")
    batch = np.broadcast_shapes(layout.batch_shape, view.batch_shape if view is not None else ())
    n = prod(batch)

    def flat(a: np.ndarray, tail: tuple[int, ...] = ()) -> np.ndarray:
        return (a if a.shape == batch + tail else np.broadcast_to(a, batch + tail)).reshape((n,) + tail)

    span, offset = flat(layout.span, (ldim,)), flat(layout.offset, (ldim,))
    dimension, stride, block = (flat(getattr(layout, k), (ldim,)) for k in ("dimension", "stride", "block_size"))

    # 1. group instances by the state that decides the element -> span coordinate map
    keys = [span]
    if view is not None:
        keys.append(np.stack([flat(getattr(view, k)) for k in TensorView._SCALAR_FIELDS], axis=1))
        if view.has_dimensions:
            keys += [flat(view.view_dimension, (view.dim,)), flat(view.view_stride, (view.dim,))]
    key = np.concatenate(keys, axis=1)
    if (key == key[:1]).all():
        uniq, group = key[:1], np.zeros(n, np.intp)
    else:
        uniq, group = np.unique(key, axis=0, return_inverse=True)
        group = group.reshape(-1)
    g_span = uniq[:, :ldim, None, None]
    in_clip, pre, span_coord = _span_coords(uniq, g_span, view, rows, cols)

    def per_instance(a: np.ndarray) -> np.ndarray:
        return a if len(uniq) == 1 else a[group]

    def take(table: np.ndarray, j: np.ndarray) -> np.ndarray:
        """table (n, R) at each element's position j (G, rows|1, cols|1) -> (n, rows|1, cols|1)."""
        if len(uniq) == 1:
            return table[:, j[0]]
        return table[np.arange(n)[:, None, None], j[group]]

    # 2. + 3. per dimension tables, gathered per element. Outcomes are combined as uint8 keys
    # rank * 16 + code whose minimum is the first event in pseudo-code order (see _KEY_*).
    mode = layout.clamp_mode
    if store and mode != UNDEFINED:
        mode = CONSTANT  # "For stores, other than Undefined, everything is treated as discard"
    index_parts, key_parts, block_parts, in_block_parts, index_max = [], [], [], [], 0
    for d in range(ldim):
        values, j = _compress(span_coord[d])
        j = _factor(j)
        ev, oob, bc, cib = _clamp_table(values, offset[:, d, None], dimension[:, d, None],
                                        block[:, d, None], mode)
        contrib = _mul32(bc, stride[:, d, None])
        index_max += int(contrib.max(initial=0))
        index_parts.append(take(contrib, j))
        block_parts.append(take(bc, j))
        in_block_parts.append(take(cib, j))
        key = np.where(ev != 0, (_KEY_DIM0 + d) * 16 + ev.astype(np.int16),
                       np.where(oob, _KEY_OUT_OF_BOUNDS, _KEY_NONE))
        if (key != _KEY_NONE).any():
            key_parts.append(take(key.astype(np.uint8), j))
    if not in_clip.all() or pre.any():
        clip_key = np.where(in_clip, np.where(pre != 0, _KEY_PRE * 16 + pre.astype(np.int16), _KEY_NONE),
                            Outcome.CLIPPED)
        key_parts.append(per_instance(clip_key.astype(np.uint8)))
    if store and (block != 1).any():
        store_key = np.where((block != 1).any(axis=1), _KEY_STORE * 16 + Outcome.FAULT_STORE_BLOCK_SIZE, _KEY_NONE)
        key_parts.append(store_key.astype(np.uint8)[:, None, None])

    def out(a: np.ndarray) -> np.ndarray:
        full = a if a.shape == (n, rows, cols) else np.broadcast_to(a, (n, rows, cols))
        return full.reshape(batch + (rows, cols))

    index = _combine(index_parts, np.add)
    if index_max > _M32:
        index &= _M32  # uint32_t index of tensorCoordToLinear
    if key_parts:
        key = _combine(key_parts, np.minimum)
        outcome, in_bounds = (key & 15).view(np.int8), key == _KEY_NONE
    else:
        outcome, in_bounds = np.zeros((1, 1, 1), np.int8), np.ones((1, 1, 1), bool)
    return (layout, view, rows, cols, out(outcome), out(index), out(in_bounds),
            tuple(block_parts), tuple(in_block_parts))


# Ranks of the outcome keys: an earlier step of the pseudo-code has a smaller rank.
_KEY_STORE, _KEY_PRE, _KEY_DIM0 = 1, 2, 3   # clip is rank 0 (key == Outcome.CLIPPED)
_KEY_OUT_OF_BOUNDS, _KEY_NONE = 14 * 16, 15 * 16  # clamped into bounds / in bounds: code 0


def _combine(parts: list[np.ndarray], op: np.ufunc) -> np.ndarray:
    """Reduce broadcastable (n, rows|1, cols|1) parts with op, smallest shapes first (fewest full passes)."""
    by_shape: dict[tuple[int, ...], np.ndarray] = {}
    for p in parts:
        by_shape[p.shape] = op(by_shape[p.shape], p) if p.shape in by_shape else p
    ordered = sorted(by_shape.values(), key=lambda a: a.size)
    result = ordered[0]
    for p in ordered[1:]:
        result = op(result, p)
    return result


def _span_coords(uniq: np.ndarray, g_span: np.ndarray, view: TensorView | None, rows: int, cols: int
                 ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """matrixCoordToLinear [+ linearToViewCoord + viewCoordToLinear] + linearToSpanCoord, per group.

    Returns in_clip, the pre-clamp fault code and the span coordinates, each (G, rows, cols).
    """
    groups, ldim = len(uniq), g_span.shape[1]
    r = np.arange(rows, dtype=np.int64)[:, None]
    c = np.arange(cols, dtype=np.int64)[None, :]
    pre = np.zeros((groups, rows, cols), np.int8)
    zero_span = np.int8(Outcome.FAULT_ZERO_SPAN)
    if view is None:
        in_clip = np.ones((groups, rows, cols), bool)
        index = np.broadcast_to(r * cols + c, (groups, rows, cols))
    else:
        cro, crs, cco, ccs = (uniq[:, ldim + k, None, None] for k in range(4))
        in_clip = (r >= cro) & (r < ((cro + crs) & _M32)) & (c >= cco) & (c < ((cco + ccs) & _M32))
        width = np.minimum(cols, ccs)
        index = np.where(in_clip, (r - cro) * width + (c - cco), 0)
        vdim = view.dim
        if view.has_dimensions:
            sizes = uniq[:, ldim + 4:ldim + 4 + vdim, None, None]
            vstride = uniq[:, ldim + 4 + vdim:, None, None]
        else:
            sizes = g_span[:, :vdim]
            vstride = np.ones_like(sizes)
            for dim in range(vdim - 2, -1, -1):
                vstride[:, dim] = _mul32(vstride[:, dim + 1], sizes[:, dim + 1])
        coord: list[np.ndarray] = [np.empty(0, np.int64)] * vdim
        for dim in range(vdim - 1, -1, -1):
            i = view.permutation[dim]
            size = sizes[:, i]
            pre = np.where((size == 0) & (pre == 0), zero_span, pre)
            coord[i] = index % np.maximum(size, 1)
            index = index // np.maximum(size, 1)
        index = sum(_mul32(coord[dim], vstride[:, dim]) for dim in range(vdim)) & _M32
    span_coord: list[np.ndarray] = [np.empty(0, np.int64)] * ldim
    for dim in range(ldim - 1, -1, -1):
        size = g_span[:, dim]
        pre = np.where((size == 0) & (pre == 0), zero_span, pre)
        span_coord[dim] = index % np.maximum(size, 1)
        index = index // np.maximum(size, 1)
    return in_clip, pre, span_coord


def _compress(coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct coordinate values and each element's position among them (a range when dense)."""
    lo, hi = int(coords.min()), int(coords.max())
    if hi - lo < 2 * coords.size:
        return np.arange(lo, hi + 1, dtype=np.int64), coords - lo
    values, j = np.unique(coords, return_inverse=True)
    return values, j.reshape(coords.shape)


def _factor(j: np.ndarray) -> np.ndarray:
    """Shrink a (G, rows, cols) index to the axes it depends on, so gathers stay small."""
    if (j == j[:, :1, :1]).all():
        return j[:, :1, :1]
    if (j == j[:, :, :1]).all():
        return j[:, :, :1]
    if (j == j[:, :1, :]).all():
        return j[:, :1, :]
    return j


def _clamp_table(span_coord: np.ndarray, offset: np.ndarray, dimension: np.ndarray, block: np.ndarray,
                 mode: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One iteration of spanCoordToTensorCoord for every (instance, span coordinate value).

    Returns the event code (0: none), out-of-bounds flag, blockCoord and coordInBlock, each (n, R).
    """
    c = _i32(span_coord[None, :] + offset)  # int32_t c = spanCoord[dim] + t.offset[dim]
    oob = (c < 0) | (c >= dimension)
    ev = np.zeros(c.shape, np.int8)
    if oob.any():
        if mode == UNDEFINED:
            ev[oob] = Outcome.FAULT_UNDEFINED
        elif mode == CONSTANT:
            ev[oob] = Outcome.CONSTANT
        else:
            if mode == CLAMP_TO_EDGE:
                clamped = np.clip(c, 0, dimension - 1)
            elif mode == REPEAT:
                clamped = c % np.maximum(dimension, 1)  # OpSMod, positive divisor
            else:  # MIRROR_REPEAT, `dim` meaning t.layoutDimension[dim] (see specs/README.md)
                period = np.maximum(2 * dimension - 2, 1)
                m = c % period
                clamped = np.where(m >= dimension, period - m, m)
                ev[oob & (dimension == 1)] = Outcome.FAULT_MIRROR_DIM_1
            ev[oob & (dimension == 0)] = Outcome.FAULT_EMPTY_DIMENSION
            c = np.where(oob, clamped, c)
    if (block == 0).any():
        ev[(ev == 0) & np.broadcast_to(block == 0, ev.shape)] = Outcome.FAULT_ZERO_BLOCK_SIZE
    if ev.any():
        c = np.where(ev == 0, c, 0)
    if (block == 1).all():
        return ev, oob, c, np.zeros_like(c)
    safe_block = np.maximum(block, 1)
    return ev, oob, c // safe_block, c % safe_block


# --------------------------------------------------------------------------- applying a plan

def clamp_value_as(clamp_value: npt.ArrayLike, dtype: npt.DTypeLike) -> np.ndarray:
    """The 32-bit clampValue pattern as the component type: its low sizeof(component) bytes.

    (The Vulkan CTS passes 0x3800 for an fp16 0.5, i.e. the fp16 bit pattern in the low 16 bits.)
    """
    dt = np.dtype(dtype)
    if dt.itemsize > 4:
        raise ValueError(f"clampValue is 32 bits; it cannot fill a {dt.itemsize * 8}-bit component type")
    bits = np.asarray(clamp_value).astype(np.int64) & ((1 << (8 * dt.itemsize)) - 1)
    return np.asarray(bits.astype(np.dtype(f"u{dt.itemsize}"))).view(dt)


def _indices(buffer: np.ndarray, plan: TensorPlan) -> tuple[np.ndarray, np.ndarray]:
    """The accessed mask and the flat element indices, checked against the buffer size."""
    if buffer.ndim != 1:
        raise ValueError(f"buffer must be 1-D, got shape {buffer.shape}")
    plan.check()
    mask = plan.accessed
    idx = plan.element_index[mask]
    if idx.size and int(idx.max()) >= buffer.size:
        first = tuple(int(i) for i in np.argwhere(mask & (plan.element_index >= buffer.size))[0])
        raise TensorAddressingError(
            f"{plan._OP}: {_instance(plan.shape[:-2], first[:-2])}, element (row {first[-2]}, "
            f"col {first[-1]}) addresses element {int(plan.element_index[first])}, outside the "
            f"buffer of {buffer.size} elements", first[:-2], first[-2], first[-1])
    return mask, idx


def gather(buffer_1d: np.ndarray, plan: LoadPlan, object_values: npt.ArrayLike,
           clamp_value_as_component: npt.ArrayLike) -> np.ndarray:
    """Result of a load without DecodeFunc: memory, the clamp value, or Object's value where clipped.

    ``object_values`` broadcasts to plan.shape, ``clamp_value_as_component`` to the batch shape
    (see clamp_value_as); both must have the buffer's dtype.
    """
    mask, idx = _indices(buffer_1d, plan)
    result = np.array(np.broadcast_to(np.asarray(object_values), plan.shape))
    clamp = np.asarray(clamp_value_as_component)
    for what, a in (("object_values", result), ("clamp value", clamp)):
        if a.dtype != buffer_1d.dtype:
            raise TypeError(f"{what} has dtype {a.dtype}, the buffer {buffer_1d.dtype}")
    result[mask] = buffer_1d[idx]
    use = plan.use_clamp_value
    if use.any():
        result[use] = np.broadcast_to(clamp[..., None, None], plan.shape)[use]
    return result


def scatter(buffer_1d: np.ndarray, plan: StorePlan, values: npt.ArrayLike) -> None:
    """Store without DecodeFunc, in place: clipped and discarded elements are skipped.

    Elements addressing the same location are written in row-major order, instance by instance
    (the GPU gives no order: such a store races).
    """
    mask, idx = _indices(buffer_1d, plan)
    buffer_1d[idx] = np.broadcast_to(np.asarray(values), plan.shape)[mask]
