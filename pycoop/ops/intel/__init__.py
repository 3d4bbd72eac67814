"""Intel vendor ops (``pycoop.intel``): SPV_INTEL_2d_block_io subgroup 2D block IO.

Kernels using them compile for the OpenCL environment (see docs/abi.md, "OpenCL target").
"""
from .ops import (block_length, block_load, block_load_transform, block_load_transpose, block_prefetch,
                  block_store)

__all__ = ["block_length", "block_load", "block_load_transform", "block_load_transpose",
           "block_prefetch", "block_store"]
