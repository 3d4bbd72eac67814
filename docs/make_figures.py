"""Regenerate the pictures in docs/figures (needs the `plot` extra: pip install -e '.[plot]').

    python3 docs/make_figures.py

Each picture is drawn by pycoop.plot from the emulator's own addressing; the autotune picture
times three GEMM configurations on the emulator (its numbers are this machine's).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pycoop as pc  # noqa: E402
from pycoop import plot  # noqa: E402

OUT = ROOT / "docs" / "figures"


def tensor_loads() -> dict:
    """An 8x8 matrix loaded from a 6x7 tensor at row 3, column -2: half of it lies outside."""
    window = [(3, 8), (-2, 8)]
    return {f"tensor_{mode}.png": plot.TensorLoad(plot.layout((6, 7), mode, slice=window), 8, 8)
            for mode in ("clamp_to_edge", "repeat", "mirror_repeat")} | {
        "tensor_constant_clip.png": plot.TensorLoad(plot.layout((6, 7), "constant", slice=window),
                                                    8, 8, plot.view(clip=(0, 6, 0, 8)))}


def block_io() -> dict:
    return {"intel_block_load.png": plot.BlockIO(2, 16, 8, 2, 16, "load"),
            "intel_block_load_transform.png": plot.BlockIO(2, 16, 8, 1, 16, "load_transform")}


def autotune():
    from pycoop.kernels import gemm_khr
    M = N = K = 128
    rng = np.random.default_rng(0)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    C = np.zeros((M, N), np.float32)
    configs = [(1, 1), (1, 2), (2, 2), (4, 4)]
    result = pc.autotune(configs, lambda c, rep: gemm_khr[(M // (32 * c[0]), N // (32 * c[1]))](
        A, B, C, M, N, K, TM=c[0], TN=c[1], repeat=rep, backend="emulator"), repeat=3)
    return plot.autotune_figure(result, label=lambda c: f"gemm_khr TM={c[0]} TN={c[1]}")


def main() -> None:
    OUT.mkdir(exist_ok=True)
    figures = {name: p.figure() for name, p in {**tensor_loads(), **block_io()}.items()}
    figures["autotune_gemm_khr.png"] = autotune()
    for name, fig in figures.items():
        (OUT / name).write_bytes(plot.png(fig))
        print(f"wrote {(OUT / name).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
