"""Pictures (matplotlib, optional): tensor layout loads, Intel block IO lane maps and autotune
timings are drawn from the emulator's own addressing, at the size the figure states."""
from __future__ import annotations

import struct
import sys

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from pycoop import plot  # noqa: E402
from pycoop.autotune import TuneResult  # noqa: E402


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _assert_rendered(fig, data: bytes) -> None:
    w, h = fig.get_size_inches() * fig.dpi
    assert _png_size(data) == (round(w), round(h))


# A 6x7 tensor, an 8x8 matrix at row 3, column -2: an independent NumPy model of each clamp
# mode of a 2-D layout (unit blocks, default strides), per coordinate.
H, W, R0, C0 = 6, 7, 3, -2


def _model(mode: str, coord: np.ndarray, dim: int) -> np.ndarray:
    if mode == "clamp_to_edge":
        return np.clip(coord, 0, dim - 1)
    if mode == "repeat":
        return coord % dim
    period = 2 * dim - 2                             # mirror_repeat
    c = coord % period
    return np.where(c < dim, c, period - c)


@pytest.mark.parametrize("mode", ["clamp_to_edge", "repeat", "mirror_repeat"])
def test_tensor_load_kinds_and_indices(mode):
    t = plot.TensorLoad(plot.layout((H, W), mode, slice=[(R0, 8), (C0, 8)]), 8, 8)
    rows, cols = np.meshgrid(np.arange(8) + R0, np.arange(8) + C0, indexing="ij")
    inside = (rows < H) & (cols >= 0) & (cols < W)
    assert (t.kinds[inside] == "read").all() and (t.kinds[~inside] == mode).all()
    expect = _model(mode, rows, H) * W + _model(mode, cols, W)
    assert (t.element_index == expect).all()
    fig = t.figure()
    _assert_rendered(fig, plot.png(fig))
    assert len(fig.axes) == 2                         # memory and matrix


def test_constant_clip_and_undefined():
    clip = plot.view(clip=(0, 6, 0, 8))
    t = plot.TensorLoad(plot.layout((H, W), "constant", slice=[(R0, 8), (C0, 8)]), 8, 8, clip)
    rows, cols = np.meshgrid(np.arange(8) + R0, np.arange(8) + C0, indexing="ij")
    inside = (rows < H) & (cols >= 0) & (cols < W)
    assert (t.kinds[6:] == "clipped").all()                     # rows past the clip's span
    assert (t.kinds[:6][inside[:6]] == "read").all()
    assert (t.kinds[:6][~inside[:6]] == "constant").all()
    u = plot.TensorLoad(plot.layout((H, W), "undefined", slice=[(R0, 8), (C0, 8)]), 8, 8)
    assert (u.kinds[~inside] == "undefined").all()
    assert u._repr_png_()[:4] == b"\x89PNG"


def test_layouts_are_checked():
    with pytest.raises(ValueError, match="unknown clamp mode 'wrap'"):
        plot.layout((4, 4), "wrap")


def test_block_io_lane_maps():
    load = plot.BlockIO(2, 16, 8, 1, 16, "load")          # width = subgroup: a row per slot
    cols, rows = np.meshgrid(np.arange(16), np.arange(8))
    assert (load.lane == cols).all() and (load.slot == rows).all() and load.slots == 8
    vnni = plot.BlockIO(2, 16, 8, 1, 16, "load_transform")   # two rows per u32
    assert (vnni.lane == cols).all() and (vnni.slot == rows // 2).all()
    assert (vnni.part == rows % 2).all()
    two = plot.BlockIO(2, 16, 8, 2, 16, "load")           # block 1 follows block 0 in each lane
    assert (two.lane[:, 16:] == cols).all() and (two.slot[:, 16:] == rows + 8).all()
    fig = vnni.figure()
    _assert_rendered(fig, plot.png(fig))
    with pytest.raises(ValueError, match="op must be"):
        plot.BlockIO(2, 16, 8, op="store")


def test_autotune_figure():
    r = TuneResult((2, 2), {(1, 1): 3.0, (2, 2): 1.0}, {(4, 4): "CompileError: too big"})
    fig = plot.autotune_figure(r)
    _assert_rendered(fig, plot.png(fig))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["(1, 1)", "(2, 2)"]
    assert "failed: (4, 4): CompileError: too big" in ax.get_xlabel()
    with pytest.raises(ValueError, match="cached"):
        plot.autotune_figure(TuneResult((2, 2), cached=True))
    assert r._repr_png_()[:4] == b"\x89PNG"                       # Jupyter shows the picture
    assert TuneResult((2, 2), cached=True)._repr_png_() is None    # and the text here


def test_without_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install 'pycoop\[plot\]'"):
        plot.TensorLoad(plot.layout((4, 4), "repeat"), 4, 4).figure()
    assert TuneResult(1, {1: 1.0})._repr_png_() is None
