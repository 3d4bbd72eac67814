"""Matrices the fused GEMM loop leaves as blocks of one matrix product, copied out only when
needed: a store that writes the blocks onto a lattice matching their place in the product
copies them straight from it (one pass instead of a gather, a reorder and a copy)."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided


def as_blocks(grid: np.ndarray, m: int, n: int) -> np.ndarray:
    """A (nA*M, nB*N) matrix viewed as its (nA, nB, M, N) blocks, without a copy."""
    r0, r1 = grid.strides
    return as_strided(grid, (grid.shape[0] // m, grid.shape[1] // n, m, n),
                      (m * r0, n * r1, r0, r1), writeable=False)


class LazyBlocks:
    """grid's (m x n) blocks [ia, ib], one per scope instance, shaped `inst` + (m, n)."""

    __slots__ = ("grid", "m", "n", "ia", "ib", "inst")

    def __init__(self, grid: np.ndarray, m: int, n: int, ia: np.ndarray, ib: np.ndarray,
                 inst: tuple[int, int]):
        self.grid, self.m, self.n, self.ia, self.ib, self.inst = grid, m, n, ia, ib, inst

    @property
    def dtype(self) -> np.dtype:
        return self.grid.dtype

    def materialize(self) -> np.ndarray:
        blocks = as_blocks(self.grid, self.m, self.n)
        return blocks[self.ia, self.ib].reshape(self.inst + (self.m, self.n))

    def __array__(self, dtype=None, copy=None):
        out = self.materialize()
        return out if dtype is None else out.astype(dtype, copy=False)

    def store_onto(self, data: np.ndarray, start: int, stride: int, cells) -> bool:
        """Write the blocks row-major into `data` (flat), block i at cell (cy[i], cx[i]) of the
        lattice of pitch (py, px) rows/columns from `start`, when the cells are the grid's
        blocks at a constant step (so one strided copy does it). False if they are not."""
        cy, cx, py, px = cells
        ia, ib = self.ia.reshape(-1), self.ib.reshape(-1)
        ny, nx = int(cy.max()) + 1, int(cx.max()) + 1
        if ny * nx != ia.size or data.dtype != self.grid.dtype:
            return False
        a0, b0 = int(ia[np.argmin(cy)]), int(ib[np.argmin(cx)])
        da = int(ia[np.argmax(cy)] - a0) // (ny - 1) if ny > 1 else 1
        db = int(ib[np.argmax(cx)] - b0) // (nx - 1) if nx > 1 else 1
        if da < 1 or db < 1 or not ((ia == a0 + da * cy).all() and (ib == b0 + db * cx).all()):
            return False
        m, n, g = self.m, self.n, self.grid
        r0, r1 = g.strides
        src = as_strided(g[a0 * m:, b0 * n:], (ny, m, nx, n), (da * m * r0, r0, db * n * r1, r1),
                         writeable=False)
        isz = data.itemsize
        dst = as_strided(data[start:], (ny, m, nx, n), (py * stride * isz, stride * isz,
                                                          px * isz, isz), writeable=True)
        dst[...] = src
        return True


def store_tiles(data: np.ndarray, entries: list[tuple["LazyBlocks", np.ndarray, int]]) -> bool:
    """Stores of lazy blocks of one product into `data` (flat, row-major tiles), given as
    (blocks, block starts, stride), written as one copy of a rectangle of the product when
    together they tile it exactly, each block at the product's own relative place (a tiled
    GEMM's accumulator stores). False (nothing written) otherwise."""
    lazy, _, stride = entries[0]
    g, m, n = lazy.grid, lazy.m, lazy.n
    if data.dtype != g.dtype or any(e[0].grid is not g or e[2] != stride for e in entries):
        return False
    ia = np.concatenate([e[0].ia.reshape(-1) for e in entries])
    ib = np.concatenate([e[0].ib.reshape(-1) for e in entries])
    y, x = np.divmod(np.concatenate([e[1].reshape(-1) for e in entries]), stride)
    r0, c0 = y - ia * m, x - ib * n                 # where the product's origin lands
    a0, b0 = int(ia.min()), int(ib.min())
    na, nb = int(ia.max()) - a0 + 1, int(ib.max()) - b0 + 1
    if (na * nb != ia.size or (r0 != r0[0]).any() or (c0 != c0[0]).any()
            or int(c0[0]) + (b0 + nb) * n > stride or int(r0[0]) < 0 or int(c0[0]) < 0
            or np.bincount((ia - a0) * nb + (ib - b0)).max() > 1):
        return False
    isz = data.itemsize
    start = (int(r0[0]) + a0 * m) * stride + int(c0[0]) + b0 * n
    dst = as_strided(data[start:], (na * m, nb * n), (stride * isz, isz), writeable=True)
    dst[...] = g[a0 * m:(a0 + na) * m, b0 * n:(b0 + nb) * n]
    return True


def materialized(x):
    return x.materialize() if isinstance(x, LazyBlocks) else x
