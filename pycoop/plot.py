"""Pictures of what addressing does, drawn with matplotlib (the optional extra `pycoop[plot]`).

* `TensorLoad`: a matrix loaded through an NV tensor layout (and view): which memory element
  each matrix element reads, and which are read in bounds, clamped to the edge, repeated,
  mirrored, the clamp value, left as Object's value (clipped by the view) or undefined. The
  answers come from the emulator's own addressing (`pycoop.ops.nv.addressing`), so the picture
  shows exactly what the emulator does.
* `BlockIO`: an Intel 2D block load: which lane and slot of the subgroup each element of the
  block lands in (from `pycoop.ops.intel.blockio.block_load` run on numbered memory).
* `autotune_figure`: time per configuration of a `pc.autotune` result.

Each picture is a `matplotlib.figure.Figure` (`.figure()`); in Jupyter the objects display as
PNG (`_repr_png_`).
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .ops.intel import blockio
from .ops.nv import addressing as A
from .types import CLAMP_MODES

# what happens to one element of a loaded matrix -> (legend, colour)
KINDS = {
    "read": ("read in bounds", "#4c78a8"),
    "clamp_to_edge": ("clamped to the edge", "#f58518"),
    "repeat": ("repeated (wrapped)", "#54a24b"),
    "mirror_repeat": ("mirrored", "#b279a2"),
    "constant": ("clamp value", "#bab0ac"),
    "clipped": ("clipped: Object's value", "#ffffff"),
    "undefined": ("undefined behaviour", "#e45756"),
}


def _pyplot_figure(width_in: float, height_in: float):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("pycoop.plot needs matplotlib: pip install 'pycoop[plot]'") from None
    return Figure(figsize=(width_in, height_in), dpi=100, layout="constrained")


def png(fig) -> bytes:
    """The figure as PNG bytes (its size in inches times 100 dpi)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi)
    return buf.getvalue()


# ------------------------------------------------------------------ NV tensor layouts
def layout(dims: Sequence[int], clamp: str = "undefined", *, slice: Sequence[tuple[int, int]] | None = None,
           stride: Sequence[int] | None = None, block_size: Sequence[int] | None = None,
           clamp_value: int = 0) -> A.TensorLayout:
    """A tensor layout built like `pc.nv.tensor_layout(len(dims), clamp).dimension(*dims)`,
    then `.block_size(...)`, `.stride(...)`, `.slice(offset, span, ...)` and
    `.clamp_value(...)`, with Python values (the emulator's state object)."""
    if clamp not in CLAMP_MODES:
        raise ValueError(f"unknown clamp mode {clamp!r}: use one of {', '.join(CLAMP_MODES)}")
    lay = A.create_layout(len(dims), CLAMP_MODES.index(clamp))
    if block_size is not None:
        lay = A.layout_set_block_size(lay, block_size)
    lay = A.layout_set_dimension(lay, dims)
    if stride is not None:
        lay = A.layout_set_stride(lay, stride)
    if slice is not None:
        lay = A.layout_slice(lay, [o for o, _ in slice], [s for _, s in slice])
    return A.layout_set_clamp_value(lay, clamp_value)


def view(dims: Sequence[int] | None = None, *, permutation: Sequence[int] | None = None,
         clip: tuple[int, int, int, int] | None = None, dim: int = 2) -> A.TensorView:
    """A tensor view like `pc.nv.tensor_view(...)`: its own dimensions (if given), a
    permutation, and a clip (row offset, row span, column offset, column span)."""
    n = len(dims) if dims is not None else dim
    v = A.create_view(n, dims is not None, tuple(permutation) if permutation else tuple(range(n)))
    if dims is not None:
        v = A.view_set_dimension(v, dims)
    if clip is not None:
        v = A.view_set_clip(v, *clip)
    return v


@dataclass
class TensorLoad:
    """A rows x cols matrix loaded through `layout` (and `view`): its addressing plan and the
    kind of each element (`kinds`, keys of KINDS)."""
    layout: A.TensorLayout
    rows: int
    cols: int
    view: A.TensorView | None = None

    def __post_init__(self):
        if self.layout.batch_shape != () or (self.view is not None and self.view.batch_shape != ()):
            raise ValueError("draw one instance: a layout (and view) without a batch shape")
        self.plan = A.load_tensor_plan(self.layout, self.view, self.rows, self.cols)
        outcome = self.plan.outcome.reshape(self.rows, self.cols)
        in_bounds = np.broadcast_to(self.plan.in_bounds, outcome.shape)
        clamped = CLAMP_MODES[self.layout.clamp_mode]
        kinds = np.full(outcome.shape, "undefined", dtype=object)
        kinds[(outcome == A.Outcome.ACCESSED) & in_bounds] = "read"
        kinds[(outcome == A.Outcome.ACCESSED) & ~in_bounds] = clamped
        kinds[outcome == A.Outcome.CONSTANT] = "constant"
        kinds[outcome == A.Outcome.CLIPPED] = "clipped"
        self.kinds = kinds
        self.element_index = np.broadcast_to(self.plan.element_index, outcome.shape)

    def _memory_grid(self) -> tuple[np.ndarray, np.ndarray] | None:
        """For a 2-D layout with unit blocks: the linear index of each memory element (rows x
        cols of the layout's dimensions) and how many matrix elements read it."""
        lay = self.layout
        if lay.dim != 2 or (lay.block_size != 1).any():
            return None
        (h, w), (s0, s1) = lay.dimension.tolist(), lay.stride.tolist()
        index = np.arange(h)[:, None] * s0 + np.arange(w)[None, :] * s1
        reads = np.zeros((h, w), np.int64)
        where = {int(i): (r, c) for (r, c), i in np.ndenumerate(index)}
        accessed = np.isin(self.kinds, ["read", "clamp_to_edge", "repeat", "mirror_repeat"])
        for i in self.element_index[accessed].tolist():
            if int(i) in where:
                reads[where[int(i)]] += 1
        return index, reads

    def figure(self):
        grid = self._memory_grid()
        cell = 0.42
        mem_w = 0 if grid is None else grid[0].shape[1] + 2
        width = max(4.0, cell * (self.cols + mem_w) + 2.6)
        height = max(3.2, cell * max(self.rows, 0 if grid is None else grid[0].shape[0] + 2) + 1.6)
        fig = _pyplot_figure(width, height)
        axes = fig.subplots(1, 2 if grid is not None else 1, squeeze=False,
                            width_ratios=[mem_w, self.cols] if grid is not None else None)[0]
        if grid is not None:
            self._draw_memory(axes[0], *grid)
        self._draw_matrix(axes[-1])
        handles = [_patch(KINDS[k][1], KINDS[k][0]) for k in KINDS if (self.kinds == k).any()]
        fig.legend(handles=handles, loc="outside lower center", ncols=min(4, len(handles)),
                   fontsize=8, frameon=False)
        return fig

    def _draw_matrix(self, ax) -> None:
        ax.set_title(f"{self.rows}x{self.cols} matrix: memory element read", fontsize=9)
        small = self.rows * self.cols <= 400
        for (r, c), kind in np.ndenumerate(self.kinds):
            ax.add_patch(_rect(c, r, KINDS[kind][1]))
            if small and kind in ("read", "clamp_to_edge", "repeat", "mirror_repeat"):
                ax.text(c + 0.5, r + 0.5, str(int(self.element_index[r, c])), ha="center",
                        va="center", fontsize=6.5, color="white" if kind == "read" else "black")
            elif small and kind == "clipped":
                ax.text(c + 0.5, r + 0.5, "O", ha="center", va="center", fontsize=6.5)
        _grid_axes(ax, self.rows, self.cols)

    def _draw_memory(self, ax, index: np.ndarray, reads: np.ndarray) -> None:
        h, w = index.shape
        off = self.layout.offset.tolist()
        span = self.layout.span.tolist()
        ax.set_title(f"memory ({h}x{w}, {CLAMP_MODES[self.layout.clamp_mode]})", fontsize=9)
        for (r, c), i in np.ndenumerate(index):
            n = reads[r, c]
            ax.add_patch(_rect(c, r, "#9ecae9" if n == 1 else "#2b6ca3" if n > 1 else "#f2f2f2"))
            if h * w <= 400:
                ax.text(c + 0.5, r + 0.5, str(int(i)), ha="center", va="center", fontsize=6.5,
                        color="white" if n > 1 else "black")
        # the slice: the window of the layout the matrix covers (it may leave the tensor)
        from matplotlib.patches import Rectangle
        ax.add_patch(Rectangle((off[1], off[0]), span[1], span[0], fill=False, lw=1.6, ls="--",
                               ec="#e45756"))
        lo_r, lo_c = min(0, off[0]) - 0.5, min(0, off[1]) - 0.5
        hi_r, hi_c = max(h, off[0] + span[0]) + 0.5, max(w, off[1] + span[1]) + 0.5
        _grid_axes(ax, h, w, (lo_r, hi_r), (lo_c, hi_c))
        ax.set_xlabel("dashed: the slice; light: read once, dark: more than once", fontsize=7)

    def _repr_png_(self) -> bytes:
        return png(self.figure())


# ------------------------------------------------------------------ Intel 2D block IO
@dataclass
class BlockIO:
    """Where each element of a `height` x (`width` x `count`) block goes in an Intel 2D block
    load: `lane[r, c]` and `slot[r, c]` (and `part[r, c]`, the row packed into a u32 by the
    transform, lowest first), -1 where the element is not loaded."""
    elem_size: int
    width: int
    height: int
    count: int = 1
    subgroup_size: int = 16
    op: str = "load"          # "load", "load_transform" or "load_transpose"

    def __post_init__(self):
        if self.op not in ("load", "load_transform", "load_transpose"):
            raise ValueError(f"op must be load, load_transform or load_transpose, got {self.op!r}")
        h, w = self.height, self.width * self.count
        shape = (h, w)
        self.lane, self.slot, self.part = (np.full(shape, -1) for _ in range(3))
        # load numbered memory twice (row + 1, then column + 1) with the emulator's block_load
        row, col = (self._load(np.broadcast_to(v, shape)) for v in
                    (np.arange(1, h + 1)[:, None], np.arange(1, w + 1)[None, :]))
        for (lane, slot, part), r in np.ndenumerate(row):
            if r:
                c = col[lane, slot, part]
                self.lane[r - 1, c - 1], self.slot[r - 1, c - 1], self.part[r - 1, c - 1] = lane, slot, part
        self.slots = row.shape[1]

    def _load(self, values: np.ndarray) -> np.ndarray:
        """(lane, slot, part) -> the value of the memory element loaded there (0: nothing)."""
        e = self.elem_size
        h, w = values.shape
        pitch = -(-max(w * e, 64) // 64) * 64
        mem = np.zeros(h * pitch, np.uint8)
        rows = mem.reshape(h, pitch)[:, :w * e].view(f"<u{e}")
        rows[:] = values
        out = blockio.block_load(mem, 0, e, self.width, self.height, self.count, w * e, h, pitch,
                                 0, 0, self.subgroup_size, transform=self.op == "load_transform",
                                 transpose=self.op == "load_transpose")
        if self.op != "load_transform":
            return out.astype(np.int64)[..., None]
        parts = 4 // e
        shifts = np.arange(parts, dtype=np.uint32) * np.uint32(8 * e)
        return ((out[..., None] >> shifts) & np.uint32((1 << 8 * e) - 1)).astype(np.int64)

    def figure(self):
        h, w = self.lane.shape
        cell = 0.46
        fig = _pyplot_figure(max(4.5, cell * w + 1.0), max(2.6, cell * h + 1.2))
        ax = fig.subplots()
        from matplotlib import colormaps
        cmap = colormaps["tab20"]
        for (r, c), lane in np.ndenumerate(self.lane):
            ax.add_patch(_rect(c, r, cmap(lane % 20) if lane >= 0 else "#ffffff"))
            if lane >= 0 and h * w <= 1024:
                label = f"{lane}/{self.slot[r, c]}" + (
                    f".{self.part[r, c]}" if self.op == "load_transform" else "")
                ax.text(c + 0.5, r + 0.5, label, ha="center", va="center", fontsize=5.5)
        _grid_axes(ax, h, w)
        where = "lane/slot.part (part: row in the packed u32)" if self.op == "load_transform" \
            else "lane/slot"
        ax.set_title(f"Intel 2D block {self.op}: {self.height}x{self.width}"
                     + (f" x {self.count} blocks" if self.count > 1 else "")
                     + f", {8 * self.elem_size}-bit elements, subgroup of {self.subgroup_size}\n"
                     f"where each element goes: {where}; {self.slots} slot(s) per lane",
                     fontsize=8)
        return fig

    def _repr_png_(self) -> bytes:
        return png(self.figure())


# ------------------------------------------------------------------ autotune
def autotune_figure(result, label=repr):
    """A bar per configuration of a `pc.autotune` result: its fastest run (ms), the chosen one
    highlighted; configurations that failed are listed under the bars."""
    if not result.times_ms:
        raise ValueError("this result has no timings (it was cached: autotune ran nothing)")
    configs = list(result.times_ms)
    times = [result.times_ms[c] for c in configs]
    fig = _pyplot_figure(7.0, 0.9 + 0.32 * (len(configs) + len(result.failures)))
    ax = fig.subplots()
    y = np.arange(len(configs))
    ax.barh(y, times, color=["#f58518" if c == result.best else "#4c78a8" for c in configs])
    ax.set_yticks(y, [label(c) for c in configs], fontsize=7)
    ax.invert_yaxis()
    failed = "".join(f"\nfailed: {label(c)}: {why}" for c, why in result.failures.items())
    ax.set_xlabel("fastest run (ms)" + failed, fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.margins(x=0.12)
    ax.set_title(f"autotune: best {label(result.best)}", fontsize=9)
    for i, t in enumerate(times):
        ax.text(t, i, f" {t:.3g}", va="center", fontsize=7)
    return fig


# ------------------------------------------------------------------ helpers
def _rect(x, y, colour):
    from matplotlib.patches import Rectangle
    return Rectangle((x, y), 1, 1, facecolor=colour, edgecolor="#666666", lw=0.4)


def _patch(colour, text):
    from matplotlib.patches import Patch
    return Patch(facecolor=colour, edgecolor="#666666", label=text)


def _grid_axes(ax, rows, cols, ylim=None, xlim=None) -> None:
    ax.set_xlim(*(xlim or (0, cols)))
    ax.set_ylim(*(ylim or (0, rows))[::-1])     # row 0 at the top
    ax.set_aspect("equal")
    ax.xaxis.tick_top()
    ax.set_xticks(np.arange(cols) + 0.5, [str(c) for c in range(cols)], fontsize=6)
    ax.set_yticks(np.arange(rows) + 0.5, [str(r) for r in range(rows)], fontsize=6)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
