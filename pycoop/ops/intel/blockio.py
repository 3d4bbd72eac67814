"""Exact NumPy semantics of SPV_INTEL_2d_block_io (subgroup 2D block load / store / prefetch).

Source: the SPV_INTEL_2d_block_io specification ("Mapping Block Data to Invocations",
"Out-of-Bounds Behavior", "Restrictions") and its diagram: Memory Width and Pitch are in
bytes, Coordinate.x is in elements, and Block Count > 1 lays blocks side by side along X.

Every dynamic operand is an integer array of one batch shape ``B`` (one entry per subgroup
instance of a dispatch), so a whole dispatch is emulated with a few gathers/scatters.
Compile-time operands (element size, block width/height/count) are plain ints.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

Op = Literal["load", "load_transform", "load_transpose", "store", "prefetch"]
OPS: tuple[Op, ...] = ("load", "load_transform", "load_transpose", "store", "prefetch")

MAX_MEMORY_EXTENT = 1 << 24  # "less than or equal to 224" is 2^24 with a lost superscript
CACHE_LINE_BYTES = 64
PITCH_MULTIPLE_BYTES = 8  # this spec; the OpenCL client spec is stricter (16)


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _distribute(rows: int, width: int, subgroup_size: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(row, column) of the distributed block held by each (lane, slot); shapes (S, slots).

    ``width`` is the padded (power-of-two) block width.  Width <= S (spec cases 1 and 2):
    the block is dealt out row-major, S elements per slot, so several rows share a slot;
    rows past ``rows`` are padding.  Width > S (case 3): each lane holds width/S consecutive
    elements of every row.
    """
    lane = np.arange(subgroup_size, dtype=np.int64)[:, None]
    if width <= subgroup_size:
        slots = -(-rows * width // subgroup_size)
        k = np.arange(slots, dtype=np.int64)[None, :] * subgroup_size + lane
        return k // width, k % width
    per_lane = width // subgroup_size
    slot = np.arange(rows * per_lane, dtype=np.int64)[None, :]
    return slot // per_lane, lane * per_lane + slot % per_lane


def _element_map(
    elem_size: int, block_width: int, block_height: int, block_count: int, subgroup_size: int, mode: Op
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.bool_]]:
    """Memory-block (row, column) feeding each (lane, slot, part) of the destination, and
    whether it is a real element (False: padding, reads as zero / is never written).

    ``part`` indexes the rows packed into one u32 by the transform (lowest row first); it has
    length 1 for the other operations.  Columns include the block offset ``b * block_width``:
    block ``b`` starts right after block ``b - 1`` in memory and its data follows block
    ``b - 1``'s in each lane's destination.
    """
    if mode == "load_transpose":
        # Height padded to pow2, then the transposed block (block_width rows) is distributed.
        r, c = _distribute(block_width, _next_pow2(block_height), subgroup_size)
        rows, cols = c[..., None], r[..., None]
    elif mode == "load_transform":
        parts = 4 // elem_size
        r, c = _distribute(-(-block_height // parts), _next_pow2(block_width), subgroup_size)
        rows, cols = r[..., None] * parts + np.arange(parts), c[..., None]
    else:
        r, c = _distribute(block_height, _next_pow2(block_width), subgroup_size)
        rows, cols = r[..., None], c[..., None]
    rows, cols = np.broadcast_arrays(rows, cols)
    real = (rows < block_height) & (cols < block_width)
    offsets = np.arange(block_count, dtype=np.int64) * block_width
    cols = np.concatenate([cols + o for o in offsets], axis=1)
    return np.tile(rows, (1, block_count, 1)), cols, np.tile(real, (1, block_count, 1))


def _int_arrays(*values: ArrayLike) -> list[NDArray[np.int64]]:
    return [np.asarray(v, dtype=np.int64) for v in np.broadcast_arrays(*values)]


def _validate(
    memory: NDArray[np.uint8], elem_size: int, block_width: int, block_height: int, block_count: int,
    subgroup_size: int, op: Op,
) -> None:
    """Reject what the emulator cannot give a meaning to (UB is left to check_undefined)."""
    if memory.dtype != np.uint8 or memory.ndim != 1:
        raise TypeError("memory must be a flat uint8 array")
    if not _is_pow2(subgroup_size):
        raise ValueError(f"subgroup size {subgroup_size} is not a power of two: the lane mapping is undefined")
    errors = static_checks(elem_size, block_width, block_height, block_count, op)
    if errors:
        raise ValueError("; ".join(errors))


def _addresses(
    memory: NDArray[np.uint8],
    base: ArrayLike,
    elem_size: int,
    block_width: int,
    block_height: int,
    block_count: int,
    mem_width_bytes: ArrayLike,
    mem_height_rows: ArrayLike,
    pitch_bytes: ArrayLike,
    coord_x: ArrayLike,
    coord_y: ArrayLike,
    subgroup_size: int,
    mode: Op,
) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """Byte address of every destination (lane, slot, part) and whether it is accessed:
    a real (non-padding) element lying wholly inside Memory Width x Memory Height."""
    _validate(memory, elem_size, block_width, block_height, block_count, subgroup_size, mode)
    base, width, height, pitch, x, y = (
        a[..., None, None, None] for a in _int_arrays(base, mem_width_bytes, mem_height_rows, pitch_bytes, coord_x, coord_y)
    )
    rows, cols, real = _element_map(elem_size, block_width, block_height, block_count, subgroup_size, mode)
    row, col = y + rows, x + cols
    accessed = real & (row >= 0) & (row < height) & (col >= 0) & ((col + 1) * elem_size <= width)
    address = base + row * pitch + col * elem_size
    touched = address[accessed]
    if touched.size and (touched.min() < 0 or touched.max() + elem_size > memory.size):
        raise IndexError("an in-bounds block element lies outside the memory buffer")
    return address, accessed


def _element_dtype(elem_size: int) -> np.dtype:
    return np.dtype(f"<u{elem_size}")


def block_load(
    memory: NDArray[np.uint8],
    base: ArrayLike,
    elem_size: int,
    block_width: int,
    block_height: int,
    block_count: int,
    mem_width_bytes: ArrayLike,
    mem_height_rows: ArrayLike,
    pitch_bytes: ArrayLike,
    coord_x: ArrayLike,
    coord_y: ArrayLike,
    subgroup_size: int,
    *,
    transform: bool = False,
    transpose: bool = False,
) -> NDArray[np.unsignedinteger]:
    """OpSubgroup2DBlockLoad{,Transform,Transpose}INTEL: every lane's destination array.

    Returns shape ``B + (subgroup_size, n)``; dtype is the unsigned int of ``elem_size`` bytes,
    or uint32 for the transform.  Padding and out-of-bounds elements read as zero.
    """
    if transform and transpose:
        raise ValueError("a load is either transformed or transposed, not both")
    mode: Op = "load_transform" if transform else "load_transpose" if transpose else "load"
    address, accessed = _addresses(
        memory, base, elem_size, block_width, block_height, block_count,
        mem_width_bytes, mem_height_rows, pitch_bytes, coord_x, coord_y, subgroup_size, mode,
    )
    dtype = _element_dtype(elem_size)
    raw = memory[address[accessed][:, None] + np.arange(elem_size)]
    elements = np.zeros(address.shape, dtype=dtype)
    elements[accessed] = raw.view(dtype)[:, 0]
    if not transform:
        return elements[..., 0].astype(dtype.newbyteorder("="))
    shifts = np.arange(elements.shape[-1], dtype=np.uint32) * np.uint32(8 * elem_size)
    return np.bitwise_or.reduce(elements.astype(np.uint32) << shifts, axis=-1)


def block_store(
    memory: NDArray[np.uint8],
    base: ArrayLike,
    elem_size: int,
    block_width: int,
    block_height: int,
    block_count: int,
    mem_width_bytes: ArrayLike,
    mem_height_rows: ArrayLike,
    pitch_bytes: ArrayLike,
    coord_x: ArrayLike,
    coord_y: ArrayLike,
    subgroup_size: int,
    values: ArrayLike,
) -> None:
    """OpSubgroup2DBlockStoreINTEL: write ``values`` (``B + (subgroup_size, n)``) in place.

    Values are reinterpreted bitwise (their itemsize must equal ``elem_size``); padding slots
    and out-of-bounds elements are ignored.  Which of several overlapping instances wins is
    unspecified, as on hardware.
    """
    address, accessed = _addresses(
        memory, base, elem_size, block_width, block_height, block_count,
        mem_width_bytes, mem_height_rows, pitch_bytes, coord_x, coord_y, subgroup_size, "store",
    )
    values = np.asarray(values)
    if values.dtype.itemsize != elem_size:
        raise TypeError(f"values have itemsize {values.dtype.itemsize}, expected {elem_size}")
    expected = address.shape[-3:-1]
    if values.shape[-2:] != expected:
        raise ValueError(f"values must end in shape {expected} (lanes, elements), got {values.shape}")
    shape = np.broadcast_shapes(address.shape[:-1], values.shape)
    address, accessed = np.broadcast_to(address[..., 0], shape), np.broadcast_to(accessed[..., 0], shape)
    data = np.broadcast_to(values, shape).astype(values.dtype.newbyteorder("<")).view(np.uint8).reshape(shape + (elem_size,))
    memory[address[accessed][:, None] + np.arange(elem_size)] = data[accessed]


def block_prefetch(
    memory: NDArray[np.uint8],
    base: ArrayLike,
    elem_size: int,
    block_width: int,
    block_height: int,
    block_count: int,
    mem_width_bytes: ArrayLike,
    mem_height_rows: ArrayLike,
    pitch_bytes: ArrayLike,
    coord_x: ArrayLike,
    coord_y: ArrayLike,
    subgroup_size: int,
) -> None:
    """OpSubgroup2DBlockPrefetchINTEL: no functional effect, so only the operands are checked
    (nothing is read, so the block need not lie inside ``memory``)."""
    _validate(memory, elem_size, block_width, block_height, block_count, subgroup_size, "prefetch")
    _int_arrays(base, mem_width_bytes, mem_height_rows, pitch_bytes, coord_x, coord_y)


def _instances(bad: NDArray[np.bool_], limit: int = 8) -> str:
    where = [tuple(int(i) for i in idx) for idx in np.argwhere(bad)]
    more = f" and {len(where) - limit} more" if len(where) > limit else ""
    return f"instances {where[:limit]}{more}"


def check_undefined(
    base: ArrayLike,
    elem_size: int,
    block_width: int,
    block_height: int,
    block_count: int,
    mem_width_bytes: ArrayLike,
    mem_height_rows: ArrayLike,
    pitch_bytes: ArrayLike,
    coord_x: ArrayLike,
    coord_y: ArrayLike,
    subgroup_size: int,
    *,
    subgroup_max_size: int | None = None,
    active: ArrayLike | None = None,
    private_address: ArrayLike | None = None,
) -> list[str]:
    """Every "Behavior is undefined unless" condition of the spec that the instances break.

    The emulator computes a result even then, so callers decide whether UB is an error.
    ``base`` is the byte offset of the per-subgroup base pointer within a 64-byte-aligned
    allocation.  ``active`` (``B + (subgroup_size,)`` bools) marks the invocations executing
    the instance; ``private_address`` is each invocation's Dst/Src (Function storage) pointer
    byte address, checked only when given.  Dynamic uniformity holds by construction, since
    the operands are given per instance, not per invocation.
    """
    base, width, height, pitch, x, y = _int_arrays(base, mem_width_bytes, mem_height_rows, pitch_bytes, coord_x, coord_y)
    errors: list[str] = []

    def rule(name: str, bad: NDArray[np.bool_], text: str) -> None:
        if np.any(bad):
            errors.append(f"[{name}] {text}: {_instances(bad)}")

    x_multiple = {1: 4, 2: 2}.get(elem_size, 1)
    rule("coordinate-x-alignment", x % x_multiple != 0,
         f"Coordinate.x must be a multiple of {x_multiple} for {elem_size}-byte elements")
    rule("base-alignment", base % CACHE_LINE_BYTES != 0,
         "the per-subgroup base address must be cache-line aligned (64 bytes)")
    if private_address is not None:
        rule("invocation-address-alignment", np.asarray(private_address, dtype=np.int64) % elem_size != 0,
             f"the per-invocation address must be a multiple of the Element Size ({elem_size})")
    rule("memory-width", (width < 64) | (width > MAX_MEMORY_EXTENT),
         "Memory Width must be >= 64 bytes and <= 2^24 bytes")
    rule("memory-height", (height <= 0) | (height > MAX_MEMORY_EXTENT),
         "Memory Height must be > 0 and <= 2^24 rows")
    rule("memory-pitch", (pitch < width) | (pitch % PITCH_MULTIPLE_BYTES != 0),
         f"Memory Pitch must be >= Memory Width and a multiple of {PITCH_MULTIPLE_BYTES} bytes")
    max_size = subgroup_size if subgroup_max_size is None else subgroup_max_size
    if not _is_pow2(max_size):
        errors.append(f"[subgroup-max-size] SubgroupMaxSize must be a power of two, got {max_size}")
    if subgroup_size != max_size:
        errors.append(
            f"[full-subgroup] SubgroupSize ({subgroup_size}) must equal SubgroupMaxSize ({max_size})"
        )
    if active is not None:
        rule("same-dynamic-instance", ~np.all(np.asarray(active, dtype=bool), axis=-1),
             "all invocations of the subgroup must execute the same dynamic instance")
    return errors


def constant_checks(
    elem_size: int,
    subgroup_size: int,
    mem_width_bytes: int | None = None,
    mem_height_rows: int | None = None,
    pitch_bytes: int | None = None,
    coord_x: int | None = None,
) -> list[str]:
    """check_undefined's rules on the operands known when a kernel is traced (None: a runtime
    operand). An unknown operand takes a value that satisfies every rule with the known ones,
    so that only what the constants alone break is reported; a pitch below 64 breaks
    "pitch >= width >= 64" whatever the width."""
    width = 64 if mem_width_bytes is None else mem_width_bytes
    if pitch_bytes is None:
        pitch_bytes = -(-max(width, 64) // PITCH_MULTIPLE_BYTES) * PITCH_MULTIPLE_BYTES
    errors = check_undefined(0, elem_size, 1, 1, 1, width, 1 if mem_height_rows is None else mem_height_rows,
                             pitch_bytes, 0 if coord_x is None else coord_x, 0, subgroup_size)
    return [e.partition(": instances [")[0] for e in errors]


def static_checks(elem_size: int, block_width: int, block_height: int, block_count: int, op: Op) -> list[str]:
    """The spec's rules on compile-time operands, checkable when a kernel is traced."""
    errors: list[str] = []
    if op not in OPS:
        return [f"[op] unknown operation {op!r}; expected one of {OPS}"]
    if elem_size not in (1, 2, 4, 8):
        errors.append(f"[element-size] Element Size must be 1, 2, 4 or 8 bytes, got {elem_size}")
    for name, value in (("Block Width", block_width), ("Block Height", block_height), ("Block Count", block_count)):
        if not 0 < value < 1 << 31:
            errors.append(f"[block-operand] {name} must be a positive 32-bit integer constant, got {value}")
    multiple = {1: 4, 2: 2}.get(elem_size)
    if multiple and block_width % multiple:
        errors.append(
            f"[block-width-multiple] Block Width must be a multiple of {multiple} for "
            f"{elem_size}-byte elements, got {block_width}"
        )
    if op == "load_transform" and elem_size not in (1, 2):
        errors.append(
            f"[transform-element-size] the transform packs 1- or 2-byte elements into 32 bits; "
            f"Element Size {elem_size} is not defined"
        )
    return errors


class ShapeRow(NamedTuple):
    """One row of the OpenCL environment's supported-shape table."""

    op: Op
    elem_size: int
    widths: tuple[int, ...]
    heights: tuple[int, ...]
    counts: tuple[int, ...]


_H6 = (1, 2, 4, 8, 16, 32)
_H4 = (1, 2, 4, 8)
# Source: the SPIR-V environment table of the cl_intel_subgroup_2d_block_io OpenCL extension
# (1.1.0); valid for subgroup size 16 only.
SUPPORTED_SHAPES: tuple[ShapeRow, ...] = (
    ShapeRow("load", 1, (32,), _H6, (1, 2)),
    ShapeRow("load", 1, (16,), (8, 16, 32), (4,)),
    ShapeRow("load", 2, (16,), _H6, (1, 2)),
    ShapeRow("load", 4, (8,), _H6, (1, 2)),
    ShapeRow("load", 4, (16,), _H6, (1,)),
    ShapeRow("load_transform", 1, (16,), (32,), (1, 2, 4)),
    ShapeRow("load_transform", 2, (16,), (16, 32), (1, 2)),
    ShapeRow("load_transpose", 4, (8,), (16, 32), (1,)),
    ShapeRow("store", 1, (16, 32), _H4, (1,)),
    ShapeRow("store", 2, (16,), _H4, (1,)),
    ShapeRow("store", 4, (16,), _H4, (1,)),
    ShapeRow("prefetch", 1, (32,), _H6, (1, 2)),
    ShapeRow("prefetch", 1, (16,), (32,), (1, 2)),
    ShapeRow("prefetch", 1, (16,), (8, 16, 32), (4,)),
    ShapeRow("prefetch", 2, (16,), _H6, (1, 2)),
    ShapeRow("prefetch", 4, (8,), _H6, (1, 2)),
    ShapeRow("prefetch", 4, (16,), _H6, (1,)),
)


def _distance(row: ShapeRow, elem_size: int, w: int, h: int, count: int) -> float:
    """Log-scale distance from a requested shape to the closest shape a table row allows."""
    def gap(value: int, allowed: tuple[int, ...]) -> float:
        return min(abs(np.log2(max(value, 1)) - np.log2(a)) for a in allowed)

    return 4 * (row.elem_size != elem_size) + gap(w, row.widths) + gap(h, row.heights) + gap(count, row.counts)


def intel_supported_shape(op: Op, elem_size: int, w: int, h: int, count: int) -> tuple[bool, tuple[ShapeRow, ...]]:
    """Whether the OpenCL environment table lists this shape (subgroup size 16).

    Returns ``(True, (matching_row,))``, or ``(False, nearest)`` with the rows of the same
    operation closest to the request (same element size preferred), best first, for a hint.
    """
    rows = [r for r in SUPPORTED_SHAPES if r.op == op]
    for r in rows:
        if r.elem_size == elem_size and w in r.widths and h in r.heights and count in r.counts:
            return True, (r,)
    ranked = sorted(rows, key=lambda r: _distance(r, elem_size, w, h, count))
    return False, tuple(ranked[:3])
