"""Launch arguments other than NumPy arrays: objects with __array_interface__ or DLPack are
used without copies, so results land in their memory."""
from __future__ import annotations

import numpy as np
import pytest

import pycoop as pc
from pycoop import f32, u32


@pc.kernel(workgroup_size=32)
def double(X: pc.Buffer[f32], n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        X[i] = X[i] * 2.0


class ArrayInterface:
    def __init__(self, a: np.ndarray):
        self._a = a
        self.__array_interface__ = a.__array_interface__


class DLPackOnly:
    def __init__(self, a: np.ndarray):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


@pytest.mark.parametrize("wrap", [ArrayInterface, DLPackOnly], ids=lambda w: w.__name__)
def test_results_land_in_the_objects_memory(wrap):
    base = np.arange(40, dtype=np.float32)
    double[2](wrap(base), 40, backend="emulator")
    np.testing.assert_array_equal(base, np.arange(40, dtype=np.float32) * 2)


def test_an_object_of_the_wrong_dtype_is_refused_by_name():
    with pytest.raises(pc.ArgumentError, match="argument 'X'.*float32"):
        double[1](ArrayInterface(np.zeros(8, np.float64)), 8, backend="emulator")
