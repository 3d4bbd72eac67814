"""Ready-made kernels written in pycoop (used by `pycoop demo` and the benchmarks)."""
from .attention import (AttentionResult, Softmax, attention, attention_decode, attention_prefill,
                        attention_reference, mask_as_f16, prefill_invocations,
                        prefill_splits, tuned_softmax)
from .attention_decode import attention_decode_vector, attention_merge
from .attention_staged import attention_prefill_staged
from .gemm import (Q4_0, gemm_khr, gemm_khr_staged, gemm_nv, gemm_q4_0, gemm_q4_0_planes,
                   gemm_q4_0_staged, gemm_reference, gemm_workgroup_tile, q4_0_planes, sum_splits)
from .gemm_quant import (Q4_K, Q8_0, dequantize_q4_k, dequantize_q4_k_planes, dequantize_q8_0,
                         gemm_q4_k, gemm_q4_k_planes, gemm_q8_0, gemm_q8_0_planes, q4_k_planes,
                         q4_k_scale_words, q8_0_blocks, q8_0_planes, quantize_q4_k, quantize_q8_0)
from .gemv import GemvConfig, GGMLWeights, choose_kernel, gemv, gemv_grid, matmul_q, weights
from .gemvq import (gemv_q8_1, gemv_q8_1_reference, q8_1_error_bound, quantize_grid,
                    quantize_q8_1, quantize_q8_1_reference)
from .mlp import MLPBlock, mlp_reference

__all__ = ["AttentionResult", "Softmax", "tuned_softmax", "prefill_invocations", "prefill_splits", "mask_as_f16", "attention",
           "attention_decode", "attention_prefill", "attention_reference", "attention_decode_vector",
           "attention_prefill_staged",
           "attention_merge", "Q4_0", "gemm_khr", "gemm_khr_staged",
           "gemm_nv", "gemm_q4_0", "gemm_q4_0_planes", "gemm_q4_0_staged", "gemm_reference",
           "gemm_workgroup_tile", "q4_0_planes", "sum_splits", "Q4_K", "Q8_0",
           "dequantize_q4_k", "dequantize_q4_k_planes", "dequantize_q8_0", "gemm_q4_k",
           "gemm_q4_k_planes", "gemm_q8_0", "gemm_q8_0_planes", "q4_k_planes", "q4_k_scale_words",
           "q8_0_blocks", "q8_0_planes", "quantize_q4_k", "quantize_q8_0", "GGMLWeights", "GemvConfig",
           "choose_kernel", "gemv", "gemv_grid", "matmul_q", "weights", "gemv_q8_1",
           "gemv_q8_1_reference", "q8_1_error_bound", "quantize_grid", "quantize_q8_1",
           "quantize_q8_1_reference", "MLPBlock", "mlp_reference"]
