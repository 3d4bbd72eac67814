"""`pycoop.nv`: SPV_NV_cooperative_matrix2 and SPV_NV_tensor_addressing."""
from .tensor import load_tensor, store_tensor, tensor_layout, tensor_view

__all__ = ["load_tensor", "store_tensor", "tensor_layout", "tensor_view"]
