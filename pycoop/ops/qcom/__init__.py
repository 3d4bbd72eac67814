"""`pycoop.qcom`: SPV_QCOM_cooperative_matrix_conversion (VK_QCOM_cooperative_matrix_conversion).

    bitcast_array(arr, elem_type)          OpBitCastArrayQCOM
    construct(arr, MatType)                OpCompositeConstructCoopMatQCOM
    extract(mat, elem_type=None)           OpCompositeExtractCoopMatQCOM
    extract_subarray(arr, start, length)   OpExtractSubArrayQCOM

The NumPy semantics are in `pycoop.ops.qcom.conversion`; the IR ops in `pycoop.ops.qcom.ops`.
"""
from ...codegen import extensions
from .ops import bitcast_array, construct, extract, extract_subarray

__all__ = ["bitcast_array", "construct", "extract", "extract_subarray"]

extensions.register(extensions.Extension(
    "SPV_QCOM_cooperative_matrix_conversion", vulkan="VK_QCOM_cooperative_matrix_conversion",
    features={"CooperativeMatrixConversionQCOM": "cooperativeMatrixConversion"}))
