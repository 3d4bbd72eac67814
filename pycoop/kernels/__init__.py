"""Ready-made kernels written in pycoop (used by `pycoop demo` and the benchmarks)."""
from .gemm import gemm_khr, gemm_reference, gemm_workgroup_tile

__all__ = ["gemm_khr", "gemm_reference", "gemm_workgroup_tile"]
