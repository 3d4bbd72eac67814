"""SPV_KHR_cooperative_matrix's memory layouts in NumPy: where element (r, c) of a matrix
lives relative to the pointer of OpCooperativeMatrixLoadKHR / OpCooperativeMatrixStoreKHR.

    RowMajorKHR:    offset + r * stride + c
    ColumnMajorKHR: offset + c * stride + r

in units of the array's elements. So a block in memory is `lines` lines of `per_line`
consecutive elements, `stride` apart: rows of the matrix when row major, columns when column
major. The emulator's memories move blocks through a `MatrixLayout` and never look at layout
names; checked Vulkan launches guard the same span (codegen.checked).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..types import CoopMatType


@dataclass(frozen=True)
class MatrixLayout:
    rows: int
    cols: int
    column_major: bool

    @property
    def span(self) -> tuple[int, int]:
        """(lines, elements per line) of the block in memory."""
        return (self.cols, self.rows) if self.column_major else (self.rows, self.cols)

    def extent(self, stride: np.ndarray) -> np.ndarray:
        """Index of the block's last element relative to its first (per stride value)."""
        lines, per_line = self.span
        return (lines - 1) * np.asarray(stride).astype(np.int64) + (per_line - 1)

    def offsets(self, stride: np.ndarray) -> np.ndarray:
        """Offset of element (r, c) from the block's first element: shape stride.shape +
        (rows, cols)."""
        r = np.arange(self.rows, dtype=np.int64)[:, None]
        c = np.arange(self.cols, dtype=np.int64)[None, :]
        s = np.asarray(stride, dtype=np.int64)[..., None, None]
        return (c * s + r) if self.column_major else (r * s + c)

    def element_steps(self, stride):
        """(step between rows, step between columns) of the matrix in memory."""
        return (1, stride) if self.column_major else (stride, 1)

    def in_memory_order(self, blocks: np.ndarray) -> np.ndarray:
        """Matrices (..., rows, cols) as their blocks in memory (..., lines, per_line)."""
        return np.swapaxes(blocks, -1, -2) if self.column_major else blocks


def matrix_layout(t: CoopMatType, layout: str) -> MatrixLayout:
    """The layout of a `t` matrix stored with MemoryLayout `layout` (RowMajorKHR or
    ColumnMajorKHR)."""
    return MatrixLayout(t.rows, t.cols, layout == "ColumnMajorKHR")
