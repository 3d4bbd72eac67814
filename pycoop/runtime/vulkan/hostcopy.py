"""Copies between NumPy arrays and mapped Vulkan memory at memory bandwidth: one np.copyto per
chunk, large copies split over a few threads (NumPy releases the GIL while it copies), no
per-element Python and no allocation per copy."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .ext import ffi

PARALLEL_MIN_BYTES = 8 << 20        # below this one thread is as fast
MAX_THREADS = 8
_pool: ThreadPoolExecutor | None = None


def _bytes(array: np.ndarray) -> np.ndarray:
    return array.reshape(-1).view(np.uint8)


def _mapped(pointer: Any, nbytes: int) -> np.ndarray:
    return np.frombuffer(ffi.buffer(pointer, nbytes), np.uint8)


def zeroed_words(pointer: Any, nbytes: int) -> np.ndarray:
    """Host-visible memory at `pointer` as u32 words (a view, not a copy), zeroed first: the
    fault records of checked launches and a graph's ring of them."""
    words = np.frombuffer(ffi.buffer(pointer, nbytes), np.uint32)
    words[:] = 0
    return words


def to_mapped(pointer: Any, array: np.ndarray) -> None:
    """Copy C-contiguous `array` to host-visible memory at `pointer`."""
    _copy(_mapped(pointer, array.nbytes), _bytes(array))


def from_mapped(array: np.ndarray, pointer: Any) -> None:
    """Copy host-visible memory at `pointer` into C-contiguous `array`."""
    _copy(_bytes(array), _mapped(pointer, array.nbytes))


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    n = dst.size
    threads = min(MAX_THREADS, os.cpu_count() or 1)
    if n < PARALLEL_MIN_BYTES or threads < 2:
        np.copyto(dst, src)
        return
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(threads, thread_name_prefix="pycoop-copy")
    step = -(-n // threads)
    step = -(-step // 4096) * 4096          # page-aligned chunks
    parts = [_pool.submit(np.copyto, dst[i:i + step], src[i:i + step]) for i in range(0, n, step)]
    for part in parts:
        part.result()
