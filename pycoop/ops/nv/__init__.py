"""`pycoop.nv`: SPV_NV_cooperative_matrix2, SPV_NV_tensor_addressing and
SPV_NV_cooperative_matrix_decode_vector."""
from ...codegen import extensions
from ...knobs import check_decode_vector
from .matrix import convert, per_element, reduce, transpose
from .tensor import load_tensor, store_tensor, tensor_layout, tensor_view

__all__ = ["check_decode_vector", "convert", "load_tensor", "per_element", "reduce", "store_tensor",
           "tensor_layout", "tensor_view", "transpose"]

# VK_NV_cooperative_matrix2 exposes both SPIR-V extensions, one device feature per capability
# (SPV_NV_cooperative_matrix_decode_vector registers itself in .decode_vector)
extensions.register(extensions.Extension(
    "SPV_NV_cooperative_matrix2", vulkan="VK_NV_cooperative_matrix2",
    features={"CooperativeMatrixReductionsNV": "cooperativeMatrixReductions",
              "CooperativeMatrixConversionsNV": "cooperativeMatrixConversions",
              "CooperativeMatrixPerElementOperationsNV": "cooperativeMatrixPerElementOperations",
              "CooperativeMatrixBlockLoadsNV": "cooperativeMatrixBlockLoads"}))
extensions.register(extensions.Extension(
    "SPV_NV_tensor_addressing", vulkan="VK_NV_cooperative_matrix2",
    features={"CooperativeMatrixTensorAddressingNV": "cooperativeMatrixTensorAddressing"}))
