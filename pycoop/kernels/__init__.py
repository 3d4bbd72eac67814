"""Ready-made kernels written in pycoop (used by `pycoop demo` and the benchmarks)."""
from .attention import (AttentionResult, Softmax, attention, attention_combine, attention_decode,
                        attention_prefill, attention_reference)
from .gemm import (Q4_0, gemm_khr, gemm_khr_staged, gemm_nv, gemm_q4_0, gemm_q4_0_planes,
                   gemm_q4_0_staged, gemm_reference, gemm_workgroup_tile, q4_0_planes, sum_splits)
from .gemv import GemvConfig, GGMLWeights, choose_kernel, gemv, gemv_grid, matmul_q, weights
from .gemvq import (gemv_q8_1, gemv_q8_1_reference, q8_1_error_bound, quantize_grid,
                    quantize_q8_1, quantize_q8_1_reference)

__all__ = ["AttentionResult", "Softmax", "attention", "attention_combine", "attention_decode",
           "attention_prefill", "attention_reference", "Q4_0", "gemm_khr", "gemm_khr_staged",
           "gemm_nv", "gemm_q4_0", "gemm_q4_0_planes", "gemm_q4_0_staged", "gemm_reference",
           "gemm_workgroup_tile", "q4_0_planes", "sum_splits", "GGMLWeights", "GemvConfig",
           "choose_kernel", "gemv", "gemv_grid", "matmul_q", "weights", "gemv_q8_1",
           "gemv_q8_1_reference", "q8_1_error_bound", "quantize_grid", "quantize_q8_1",
           "quantize_q8_1_reference"]
