"""Rules of SPV_KHR_cooperative_matrix that SPIRV-Tools checks and pycoop reports first, at the
user's line with their rule id (docs/rules.md)."""
from __future__ import annotations

import inspect

import pytest

import pycoop as pc
from pycoop import f16, f32

A = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
B = pc.coopmat[f16, pc.Subgroup, 8, 16, pc.UseB]
C = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]


def test_mul_add_shapes():
    """SPIRV-Tools CoopMatKHRDimFail: A is MxK, B is KxN, C and the result are MxN."""
    def body(X: pc.Buffer[f16], Y: pc.Buffer[f32]):
        pc.store(Y, 0, pc.mul_add(A.load(X, 0, 16), B.load(X, 0, 16), C.fill(0.0)), 16)  # HERE
    with pytest.raises(pc.CompileError) as e:
        pc.kernel(workgroup_size=32)(body).compile()
    src, start = inspect.getsourcelines(body)
    assert e.value.loc.line == start + next(i for i, s in enumerate(src) if "# HERE" in s)
    assert e.value.rule_id == "khr.mul-add-shape" and "B is 8x16" in e.value.message, str(e.value)
