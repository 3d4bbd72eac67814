"""`pycoop.nv`: SPV_NV_cooperative_matrix2, SPV_NV_tensor_addressing and
SPV_NV_cooperative_matrix_decode_vector."""
from ...knobs import check_decode_vector
from .matrix import convert, per_element, reduce, transpose
from .tensor import load_tensor, store_tensor, tensor_layout, tensor_view

__all__ = ["check_decode_vector", "convert", "load_tensor", "per_element", "reduce", "store_tensor",
           "tensor_layout", "tensor_view", "transpose"]
