"""`pycoop.nv`: SPV_NV_cooperative_matrix2 and SPV_NV_tensor_addressing."""
from .matrix import convert, per_element, reduce, transpose
from .tensor import load_tensor, store_tensor, tensor_layout, tensor_view

__all__ = ["convert", "load_tensor", "per_element", "reduce", "store_tensor", "tensor_layout",
           "tensor_view", "transpose"]
