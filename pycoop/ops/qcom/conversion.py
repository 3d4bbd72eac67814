"""Exact NumPy semantics of SPV_QCOM_cooperative_matrix_conversion.

Source: the SPV_QCOM_cooperative_matrix_conversion specification.  Construct/extract move
rows (MatrixA, Accumulator) or columns (MatrixB) between a subgroup's per-invocation arrays
and a cooperative matrix; the ``uint32`` array forms are the same bytes packed little-endian
(element ``j`` of a 256-bit row sits in bits ``[j*w, (j+1)*w)`` of the row's byte image), which
is what OpBitCastArrayQCOM's byte reinterpretation gives.

Arrays carry a leading batch shape ``B`` (one entry per subgroup instance); construct/extract
arrays are ``B + (subgroup_size, length)`` and matrices ``B + (rows, cols)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

Use = Literal["A", "B", "Accumulator"]
Op = Literal["construct", "extract", "bitcast", "extract_subarray"]

_U32 = np.dtype(np.uint32)
AB_COMPONENTS = tuple(np.dtype(t) for t in (np.int8, np.uint8, np.float16, np.float32))
ACCUMULATOR_COMPONENTS = tuple(np.dtype(t) for t in (np.int32, np.uint32, np.float16, np.float32))
ARRAY_ELEMENTS = tuple(np.dtype(t) for t in (np.int32, np.uint32, np.float16, np.float32))
ROW_BITS = 256  # A rows / B columns: 8 x f32, 16 x f16, 32 x 8-bit int
PACKED_AB_LENGTH = ROW_BITS // 32


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _dtype(d: DTypeLike | None) -> np.dtype | None:
    return None if d is None else np.dtype(d)


def _lanes_and_length(use: Use, rows: int, cols: int) -> tuple[int, int]:
    """(number of invocations holding data, elements each holds) for a matrix use."""
    return (cols, rows) if use == "B" else (rows, cols)


def _expected_lengths(op: Op, use: Use, component: np.dtype, rows: int, cols: int) -> dict[np.dtype, int]:
    """Array element type -> the length the spec requires for it (construct source / extract result)."""
    _, length = _lanes_and_length(use, rows, cols)
    allowed = {component: length}
    if use != "Accumulator":
        allowed[_U32] = PACKED_AB_LENGTH
    elif component == np.float16:
        if cols % 2 == 0:
            allowed[_U32] = cols // 2
    elif component == np.float32 or op == "construct":
        # Construct: "... and must match the Result Type's Columns otherwise" also covers
        # 32-bit int components; extract only lists the f32 / f16 packed forms.
        allowed.setdefault(_U32, cols)
    return allowed


def _matrix_checks(
    op: Op,
    use: Use | None,
    component: np.dtype | None,
    rows: int | None,
    cols: int | None,
    array_dtype: np.dtype | None,
    array_length: int | None,
    subgroup_size: int | None,
    scope: str,
    supported_rows: Sequence[int] | None,
    supported_cols: Sequence[int] | None,
) -> list[str]:
    if use not in ("A", "B", "Accumulator") or component is None or rows is None or cols is None:
        return [f"[operands] {op} needs use ('A', 'B' or 'Accumulator'), component, rows and cols"]
    errors: list[str] = []
    if scope != "Subgroup":
        errors.append(f"[scope] the cooperative matrix Scope must be Subgroup, got {scope}")
    if subgroup_size is not None and not _is_pow2(subgroup_size):
        errors.append(f"[subgroup-size] SubgroupSize must be a power of 2, got {subgroup_size}")
    if use == "Accumulator":
        if component not in ACCUMULATOR_COMPONENTS:
            errors.append(
                f"[accumulator-component] MatrixAccumulator component type must be a 32-bit int, "
                f"f16 or f32, got {component.name}"
            )
        dims = (("Rows", rows, supported_rows), ("Columns", cols, supported_cols))
    else:
        if component not in AB_COMPONENTS:
            errors.append(
                f"[{use}-component] Matrix{use} component type must be an 8-bit int, f16 or f32, "
                f"got {component.name}"
            )
        fixed, free, free_name, supported = (
            (cols, rows, "Rows", supported_rows) if use == "A" else (rows, cols, "Columns", supported_cols)
        )
        fixed_name = "Columns" if use == "A" else "Rows"
        if fixed * component.itemsize * 8 != ROW_BITS:
            errors.append(
                f"[{use}-256-bit] Matrix{use} {fixed_name} x component bits must be 256 "
                f"(8 f32, 16 f16, 32 8-bit ints), got {fixed} x {component.itemsize * 8}"
            )
        dims = ((free_name, free, supported),)
    for dim_name, value, supported in dims:
        if subgroup_size is not None and value > subgroup_size:
            errors.append(f"[{dim_name.lower()}-subgroup] {dim_name} ({value}) must be <= SubgroupSize ({subgroup_size})")
        if supported is not None and value not in supported:
            errors.append(f"[{dim_name.lower()}-supported] {dim_name} ({value}) is not a supported size {tuple(supported)}")
    if array_dtype is not None and array_length is not None:
        allowed = _expected_lengths(op, use, component, rows, cols)
        role = "source array" if op == "construct" else "result array"
        if array_dtype not in allowed:
            errors.append(
                f"[array-element-type] the {role} element type must be the component type "
                f"({component.name}){' or uint32' if _U32 in allowed else ''}, got {array_dtype.name}"
            )
        elif allowed[array_dtype] != array_length:
            errors.append(
                f"[array-length] a {array_dtype.name} {role} for a Matrix{use} of "
                f"{rows}x{cols} {component.name} must have length {allowed[array_dtype]}, got {array_length}"
            )
    return errors


def static_checks(
    op: Op,
    *,
    use: Use | None = None,
    component: DTypeLike | None = None,
    rows: int | None = None,
    cols: int | None = None,
    array_dtype: DTypeLike | None = None,
    array_length: int | None = None,
    subgroup_size: int | None = None,
    result_dtype: DTypeLike | None = None,
    result_length: int | None = None,
    start_dtype: DTypeLike | None = None,
    start: int | None = None,
    k_sizes: Sequence[int] | None = None,
    scope: str = "Subgroup",
    supported_rows: Sequence[int] | None = None,
    supported_cols: Sequence[int] | None = None,
) -> list[str]:
    """The spec's type and size rules, each message tagged with the rule it breaks.

    construct/extract: ``array_*`` is the construct source / extract result array; rows/cols
    limits use ``supported_*`` when given (device-specific), else only ``<= subgroup_size``.
    bitcast/extract_subarray: ``array_*`` is the source array, ``result_*`` the result.
    ``start`` (a constant Start Index) and ``k_sizes`` (supported K lengths, for a sub-array
    feeding cooperative matrix operations) enable the checks a compiler can do statically.
    """
    component, array_dtype, result_dtype, start_dtype = map(_dtype, (component, array_dtype, result_dtype, start_dtype))
    if op in ("construct", "extract"):
        return _matrix_checks(
            op, use, component, rows, cols, array_dtype, array_length, subgroup_size, scope, supported_rows, supported_cols
        )
    if op not in ("bitcast", "extract_subarray"):
        return [f"[op] unknown operation {op!r}"]
    if array_dtype is None or result_dtype is None:
        return [f"[operands] {op} needs array_dtype and result_dtype"]
    errors: list[str] = []
    if array_dtype not in ARRAY_ELEMENTS:
        errors.append(f"[{'bitcast' if op == 'bitcast' else 'subarray'}-source-type] the source element type must be a 32-bit int, f32 or f16, got {array_dtype.name}")
    if op == "bitcast":
        if result_dtype not in ARRAY_ELEMENTS:
            errors.append(f"[bitcast-result-type] the result element type must be a 32-bit int, f32 or f16, got {result_dtype.name}")
        if array_length is not None and result_length is not None:
            src, dst = array_length * array_dtype.itemsize, result_length * result_dtype.itemsize
            if src != dst:
                errors.append(f"[bitcast-size] result ({dst} bytes) and source ({src} bytes) sizes must be equal")
        return errors
    if result_dtype != array_dtype:
        errors.append(
            f"[subarray-element-type] the result element type ({result_dtype.name}) must equal the source's ({array_dtype.name})"
        )
    if start_dtype is not None and not (start_dtype.kind in "iu" and start_dtype.itemsize == 4):
        errors.append(f"[subarray-start-type] Start Index must be a 32-bit integer, got {start_dtype.name}")
    if start is not None and result_length is not None and array_length is not None:
        if start < 0 or start + result_length > array_length:
            errors.append(
                f"[subarray-range] Start Index + result length ({start} + {result_length}) must be within the source length {array_length}"
            )
    if start is not None and k_sizes is not None and not any(start % k == 0 for k in k_sizes):
        errors.append(
            f"[subarray-k-multiple] Start Index {start} feeding cooperative matrix operations must be a multiple of a supported K {tuple(k_sizes)}"
        )
    return errors


def _raise(errors: list[str]) -> None:
    if errors:
        raise ValueError("; ".join(errors))


def _reinterpret(arr: NDArray, dtype: np.dtype) -> NDArray:
    """Reinterpret the last axis' little-endian bytes as ``dtype`` (the length rescales)."""
    data = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
    return data.view(dtype.newbyteorder("<")).astype(dtype)


def construct(
    arrays: ArrayLike, component: DTypeLike, rows: int, cols: int, use: Use, *, packed: bool = False
) -> NDArray:
    """OpCompositeConstructCoopMatQCOM: lane i's array becomes row i (A, Accumulator) or column i (B).

    ``arrays`` is ``B + (subgroup_size, length)``, of the component type, or uint32 when
    ``packed``; lanes past the matrix's rows (columns for B) are ignored.
    """
    arrays, component = np.asarray(arrays), np.dtype(component)
    expected = _U32 if packed else component
    if arrays.dtype != expected:
        raise TypeError(f"arrays must be {expected.name}, got {arrays.dtype.name}")
    subgroup_size, length = arrays.shape[-2:]
    _raise(static_checks("construct", use=use, component=component, rows=rows, cols=cols,
                         array_dtype=expected, array_length=length, subgroup_size=subgroup_size))
    lanes, _ = _lanes_and_length(use, rows, cols)
    vectors = _reinterpret(arrays, component)[..., :lanes, :]
    return np.ascontiguousarray(vectors.swapaxes(-1, -2) if use == "B" else vectors)


def extract(
    matrices: ArrayLike, use: Use, subgroup_size: int, *, packed: bool = False
) -> tuple[NDArray, NDArray[np.bool_]]:
    """OpCompositeExtractCoopMatQCOM: row i (A, Accumulator) or column i (B) to lane i.

    Returns ``(arrays, valid)``: arrays ``B + (subgroup_size, length)`` of the component type
    (uint32 when ``packed``) and ``valid`` ``B + (subgroup_size,)``.  Lanes past the matrix get
    OpUndef: ``valid`` is False there and their array holds zeros that mean nothing.
    """
    matrices = np.asarray(matrices)
    component = matrices.dtype
    rows, cols = matrices.shape[-2:]
    lanes, length = _lanes_and_length(use, rows, cols)
    array_dtype = _U32 if packed else component
    array_length = length * component.itemsize // 4 if packed else length
    _raise(static_checks("extract", use=use, component=component, rows=rows, cols=cols,
                         array_dtype=array_dtype, array_length=array_length, subgroup_size=subgroup_size))
    batch = matrices.shape[:-2]
    arrays = np.zeros(batch + (subgroup_size, length), dtype=component)
    arrays[..., :lanes, :] = matrices.swapaxes(-1, -2) if use == "B" else matrices
    valid = np.broadcast_to(np.arange(subgroup_size) < lanes, batch + (subgroup_size,))
    return (_reinterpret(arrays, _U32) if packed else arrays), valid


def bitcast_array(arr: ArrayLike, to_dtype: DTypeLike) -> NDArray:
    """OpBitCastArrayQCOM: reinterpret each ``B + (length,)`` array's bytes as ``to_dtype``."""
    arr, to_dtype = np.asarray(arr), np.dtype(to_dtype)
    size = arr.shape[-1] * arr.dtype.itemsize
    if size % to_dtype.itemsize:
        raise ValueError(f"[bitcast-size] {size} bytes do not make a whole {to_dtype.name} array")
    _raise(static_checks("bitcast", array_dtype=arr.dtype, array_length=arr.shape[-1],
                         result_dtype=to_dtype, result_length=size // to_dtype.itemsize))
    return _reinterpret(arr, to_dtype)


def extract_subarray(arr: ArrayLike, start: ArrayLike, length: int) -> NDArray:
    """OpExtractSubArrayQCOM: ``arr[..., start:start + length]`` with a per-instance ``start``.

    An out-of-range window is undefined behaviour in the spec; here it raises IndexError.
    """
    arr = np.asarray(arr)
    start = np.asarray(start, dtype=np.int64)
    _raise(static_checks("extract_subarray", array_dtype=arr.dtype, result_dtype=arr.dtype))
    if length < 0 or np.any(start < 0) or np.any(start + length > arr.shape[-1]):
        bad = np.unique(start[(start < 0) | (start + length > arr.shape[-1])])
        raise IndexError(
            f"[subarray-range] Start Index {bad.tolist()} + length {length} leaves the source length {arr.shape[-1]}"
        )
    index = start[..., None] + np.arange(length)
    batch = np.broadcast_shapes(arr.shape[:-1], index.shape[:-1])
    return np.take_along_axis(
        np.broadcast_to(arr, batch + arr.shape[-1:]), np.broadcast_to(index, batch + (length,)), axis=-1
    )
