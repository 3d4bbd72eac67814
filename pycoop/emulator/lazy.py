"""Matrices the fused GEMM loop leaves as blocks of one matrix product, copied out only when
needed: stores that write the blocks where they sit in the product (up to a translation and
a constant step) copy them straight from it, one pass instead of a gather, a reorder and a
copy."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided


def strided(x: np.ndarray, shape, strides, writeable: bool = True) -> np.ndarray:
    """numpy's as_strided for every element type: NumPy cannot rebuild an array of ml_dtypes'
    float8_e5m2 from its array interface (type string '<f1'), so such an array is viewed as
    uint8 and the result viewed back (the bits are the same)."""
    if x.dtype.kind == "f" and x.itemsize == 1:
        return as_strided(x.view(np.uint8), shape, strides, writeable=writeable).view(x.dtype)
    return as_strided(x, shape, strides, writeable=writeable)


def as_blocks(grid: np.ndarray, m: int, n: int) -> np.ndarray:
    """A (nA*M, nB*N) matrix viewed as its (nA, nB, M, N) blocks, without a copy."""
    r0, r1 = grid.strides
    return strided(grid, (grid.shape[0] // m, grid.shape[1] // n, m, n),
                   (m * r0, n * r1, r0, r1), writeable=False)


class Product:
    """The matrix product a @ b, computed when first needed: a store that writes all of it in
    place has it computed straight into the destination, with no copy."""

    __slots__ = ("a", "b", "_grid")

    def __init__(self, a: np.ndarray, b: np.ndarray):
        self.a, self.b, self._grid = a, b, None

    @property
    def dtype(self) -> np.dtype:
        return np.result_type(self.a, self.b)

    @property
    def shape(self) -> tuple[int, int]:
        return self.a.shape[0], self.b.shape[1]

    @property
    def grid(self) -> np.ndarray:
        if self._grid is None:
            self._grid = self.a @ self.b
        return self._grid


class LazyBlocks:
    """The (m x n) blocks [ia, ib] of a product, one per scope instance, shaped `inst` +
    (m, n). `key`: the memo key of ia and ib when they are invariant in the launch
    (emulator.memo)."""

    __slots__ = ("product", "m", "n", "ia", "ib", "inst", "key")

    def __init__(self, product: Product, m: int, n: int, ia: np.ndarray, ib: np.ndarray,
                 inst: tuple[int, int], key: tuple | None = None):
        self.product, self.m, self.n, self.ia, self.ib = product, m, n, ia, ib
        self.inst, self.key = inst, key

    @property
    def dtype(self) -> np.dtype:
        return self.product.dtype

    def materialize(self) -> np.ndarray:
        blocks = as_blocks(self.product.grid, self.m, self.n)
        return blocks[self.ia, self.ib].reshape(self.inst + (self.m, self.n))

    def __array__(self, dtype=None, copy=None):
        out = self.materialize()
        return out if dtype is None else out.astype(dtype, copy=False)


class BlockCopy:
    """Where a sub-grid of a product's blocks goes: its first block (a0, b0) and grid steps
    (da, db), na x nb blocks of m x n, landing at row y0, column x0 of a destination with rows
    `stride` apart, blocks (py, px) apart. Depends only on the block indices and places, not
    on the product."""

    __slots__ = ("a0", "b0", "da", "db", "na", "nb", "m", "n", "y0", "x0", "py", "px", "stride")

    def __init__(self, *fields):
        for name, v in zip(self.__slots__, fields):
            setattr(self, name, v)

    def apply(self, data: np.ndarray, product: Product) -> None:
        """Write the blocks of `product` into `data` (flat): the product computed straight
        into place when the blocks are all of it, side by side as in it, else one strided
        copy."""
        m, n, isz = self.m, self.n, data.itemsize
        start = data[self.y0 * self.stride + self.x0:]
        if (product._grid is None and (self.a0, self.b0, self.da, self.db) == (0, 0, 1, 1)
                and (self.na * m, self.nb * n) == product.shape
                and (self.py, self.px) == (m, n)):
            np.matmul(product.a, product.b,
                      out=strided(start, product.shape, (self.stride * isz, isz)))
            return
        grid = product.grid
        r0, r1 = grid.strides
        src = strided(grid[self.a0 * m:, self.b0 * n:], (self.na, m, self.nb, n),
                      (self.da * m * r0, r0, self.db * n * r1, r1), writeable=False)
        dst = strided(start, (self.na, m, self.nb, n),
                      (self.py * self.stride * isz, self.stride * isz, self.px * isz, isz),
                         writeable=True)
        dst[...] = src


def block_copy(entries: list[tuple[LazyBlocks, np.ndarray]], stride: int,
               dtype: np.dtype) -> BlockCopy | None:
    """How to write the lazy blocks of one or more stores, given as (blocks, block starts) into
    a flat `dtype` array (rows `stride` apart, blocks row-major), as one strided copy from the
    product when their places there map onto their destinations by a translation and a
    constant step: the blocks of one product at grid steps (da, db) landing at steps (py, px)
    apart, every block of that sub-grid exactly once and no two overlapping (a tiled GEMM's
    accumulator stores, one at a time or a whole run). None otherwise."""
    g, m, n = entries[0][0].product, entries[0][0].m, entries[0][0].n
    if dtype != g.dtype or any(e[0].product is not g for e in entries):
        return None
    ia = np.concatenate([e[0].ia.reshape(-1) for e in entries])
    ib = np.concatenate([e[0].ib.reshape(-1) for e in entries])
    y, x = np.divmod(np.concatenate([e[1].reshape(-1) for e in entries]), stride)
    a0, b0 = int(ia.min()), int(ib.min())
    da, db = int(np.gcd.reduce(ia - a0)) or 1, int(np.gcd.reduce(ib - b0)) or 1
    ka, kb = (ia - a0) // da, (ib - b0) // db
    na, nb = int(ka.max()) + 1, int(kb.max()) + 1
    if na * nb != ia.size or np.bincount(ka * nb + kb).max() > 1:
        return None                                   # not every block of the sub-grid once
    y0, x0 = int(y[np.argmin(ka)]), int(x[np.argmin(kb)])
    py = int(y[np.argmax(ka)] - y0) // (na - 1) if na > 1 else m
    px = int(x[np.argmax(kb)] - x0) // (nb - 1) if nb > 1 else n
    if (py < m or px < n or x0 + (nb - 1) * px + n > stride
            or not ((y == y0 + ka * py).all() and (x == x0 + kb * px).all())):
        return None
    return BlockCopy(a0, b0, da, db, na, nb, m, n, y0, x0, py, px, stride)


def store_blocks(data: np.ndarray, entries: list[tuple[LazyBlocks, np.ndarray]],
                 stride: int) -> bool:
    """Write the lazy blocks of `entries` into `data` as `block_copy` describes; False, with
    nothing written, when it cannot."""
    plan = block_copy(entries, stride, data.dtype)
    if plan is None:
        return False
    plan.apply(data, entries[0][0].product)
    return True


def materialized(x):
    return x.materialize() if isinstance(x, LazyBlocks) else x
