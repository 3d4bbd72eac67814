"""Saturating integer mul_add: the sum with C saturates; an overflowing A*B is reported."""
from __future__ import annotations

import numpy as np
import pytest

import pycoop as pc
from pycoop import i8, i16

MatA = pc.coopmat[i8, pc.Subgroup, 16, 16, pc.UseA]
MatB = pc.coopmat[i8, pc.Subgroup, 16, 16, pc.UseB]
Acc = pc.coopmat[i16, pc.Subgroup, 16, 16, pc.Accumulator]


@pc.kernel(workgroup_size=32)
def sat(A: pc.Buffer[i8], B: pc.Buffer[i8], C: pc.Buffer[i16]):
    pc.store(C, 0, pc.mul_add(MatA.load(A, 0, 16), MatB.load(B, 0, 16), Acc.load(C, 0, 16),
                              saturating=True), 16)  # MULADD


def test_sum_with_c_saturates():
    A = np.full(256, 10, np.int8)
    B = np.full(256, 10, np.int8)                       # A@B = 1600 per element: fits i16
    C = np.full(256, 32000, np.int16)
    sat[1](A, B, C, backend="emulator")
    assert (C == 32767).all()


def test_overflowing_product_is_reported():
    A = np.full(256, 127, np.int8)
    B = np.full(256, 127, np.int8)                      # A@B = 258064 > i16 max
    C = np.zeros(256, np.int16)
    with pytest.raises(pc.EmulatorError, match="SaturatingAccumulation") as ei:
        sat[1](A, B, C, backend="emulator")
    assert ei.value.rule_id == "khr.saturating-overflow"
