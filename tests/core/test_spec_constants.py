"""Specialization constants (pycoop.Spec[T]): OpSpecConstant + SpecId in the module, listed in
the sidecar, values taken by compile() (the module's default), by launches (the emulator runs
the module compiled with the values; Vulkan sets them at pipeline creation), and the
CompileErrors where a shape needs a trace-time int."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f32, i32, u32
from pycoop.spirv import tools

from core_helpers import FEW, emu, line_of


@pc.kernel(workgroup_size=64)
def spec_axpy(X: pc.ReadBuffer[f32], Y: pc.WriteBuffer[f32], n: u32, alpha: f32,
              reps: pc.Spec[u32] = 2, beta: pc.Spec[f32] = 0.5, neg: pc.Spec[pc.bool_] = False,
              shift: pc.Spec[i32] = -3):
    i = pc.global_invocation_id.x
    if i < n:
        acc = X[i] * alpha
        for _ in range(reps):                   # a loop bound
            acc = acc + beta
        if neg:                                  # a condition
            acc = -acc
        Y[i] = acc + pc.cast(shift * 2, f32)     # arithmetic


def reference(x, alpha, reps=2, beta=0.5, neg=False, shift=-3):
    acc = x.astype(np.float32) * np.float32(alpha)
    for _ in range(reps):
        acc = acc + np.float32(beta)
    return (-acc if neg else acc) + np.float32(shift * 2)


def test_module_declares_spec_constants_with_spec_ids():
    ck = spec_axpy.compile()
    asm = ck.spvasm                      # .spv passed spirv-val
    for sid, (name, decl) in enumerate([("reps", "OpSpecConstant %uint 2"),
                                         ("beta", "OpSpecConstant %float 0.5"),
                                         ("neg", "OpSpecConstantFalse %bool"),
                                         ("shift", "OpSpecConstant %int -3")]):
        assert f"%{name} = {decl}" in asm
        assert f"OpDecorate %{name} SpecId {sid}" in asm
    # not in the push-constant block: only the runtime arguments are
    assert [a["name"] for a in ck.abi["args"]] == ["X", "Y", "n", "alpha"]
    assert ck.abi["spec_constants"] == [
        {"name": "reps", "id": 0, "dtype": "uint32", "size": 4, "default": 2},
        {"name": "beta", "id": 1, "dtype": "float32", "size": 4, "default": 0.5},
        {"name": "neg", "id": 2, "dtype": "bool", "size": 4, "default": False},
        {"name": "shift", "id": 3, "dtype": "int32", "size": 4, "default": -3}]


def test_compile_sets_the_default_and_the_sidecar_lists_it(tmp_path):
    ck = spec_axpy.compile(reps=7, neg=True)
    assert "%reps = OpSpecConstant %uint 7" in ck.spvasm
    assert "%neg = OpSpecConstantTrue %bool" in ck.spvasm
    assert ck.spec == {"reps": 7, "beta": 0.5, "neg": True, "shift": -3}
    side = json.loads(ck.save(tmp_path / "k.spv").with_suffix(".spv.json").read_text())
    assert {s["name"]: s["default"] for s in side["abi"]["spec_constants"]} == ck.spec
    assert "reps" not in side["constants"]        # Const values only


@FEW
@given(reps=st.integers(0, 4), beta=st.sampled_from([0.25, -1.5, 3.0]), neg=st.booleans(),
       shift=st.integers(-5, 5), n=st.integers(1, 130))
def test_emulator_takes_launch_values(reps, beta, neg, shift, n):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    emu(spec_axpy, (n + 63) // 64, x, y, n, 1.5, reps=reps, beta=beta, neg=neg, shift=shift)
    np.testing.assert_allclose(y, reference(x, 1.5, reps, beta, neg, shift), rtol=1e-6, atol=1e-6)


def test_defaults_apply_when_a_launch_leaves_them_out():
    x = np.arange(10, dtype=np.float32)
    y = np.zeros(10, np.float32)
    emu(spec_axpy, 1, x, y, 10, 2.0)
    np.testing.assert_allclose(y, reference(x, 2.0))


def test_bad_launch_values_are_argument_errors():
    x = np.zeros(4, np.float32)
    with pytest.raises(pc.ArgumentError, match="reps.*out of range"):
        emu(spec_axpy, 1, x, x.copy(), 4, 1.0, reps=-1)
    with pytest.raises(pc.ArgumentError, match="neg.*must be a bool"):
        emu(spec_axpy, 1, x, x.copy(), 4, 1.0, neg=1)


def test_vulkan_sets_values_at_pipeline_creation():
    try:
        from pycoop.runtime.vulkan import get_runtime
        get_runtime()
    except Exception as e:
        pytest.skip(f"no Vulkan device: {e}")
    x = np.arange(70, dtype=np.float32)
    for values in ({}, {"reps": 5, "beta": 1.0, "neg": True, "shift": 4}):
        y = np.zeros(70, np.float32)
        spec_axpy[2](x, y, 70, 2.0, backend="vulkan", **values)
        np.testing.assert_allclose(y, reference(x, 2.0, **values), rtol=1e-6)


def test_repeated_device_array_launches_follow_the_values():
    """Launches on the same device arrays are re-recorded from a memo: a launch with other
    Spec values must get its own pipeline."""
    try:
        from pycoop.runtime.vulkan import get_runtime
        get_runtime()
    except Exception as e:
        pytest.skip(f"no Vulkan device: {e}")
    x = np.arange(64, dtype=np.float32)
    dx, dy = pc.asarray(x, backend="vulkan"), pc.zeros(64, f32, backend="vulkan")
    for values in ({}, {}, {"reps": 4}, {"reps": 4}, {"beta": -2.0}, {}):
        spec_axpy[1](dx, dy, 64, 3.0, **values)
        np.testing.assert_allclose(dy.numpy(), reference(x, 3.0, **values), rtol=1e-6)


def test_spec_without_default_is_reported_at_its_annotation():
    with pytest.raises(pc.CompileError) as e:
        @pc.kernel
        def no_default(X: pc.Buffer[f32], n: pc.Spec[u32]):
            X[0] = 1.0
    assert "specialization constant 'n' of kernel no_default has no default" in e.value.message
    assert e.value.rule_id == "frontend.spec-default"
    assert "OpSpecConstant" in e.value.rule and e.value.loc.line == line_of(
        test_spec_without_default_is_reported_at_its_annotation, "def no_default")


def test_spec_of_a_buffer_type_is_reported():
    with pytest.raises(pc.CompileError) as e:
        @pc.kernel
        def not_scalar(X: pc.Buffer[f32], n: pc.Spec[pc.Buffer[f32]] = 0):
            X[0] = 1.0
    assert "is not a scalar type" in e.value.message and "scalar" in e.value.rule
    assert e.value.rule_id == "frontend.spec-scalar"
    assert e.value.loc.line == line_of(test_spec_of_a_buffer_type_is_reported, "def not_scalar")


@pc.kernel(workgroup_size=32)
def spec_as_matrix_rows(A: pc.Buffer[pc.f16], t: pc.Spec[u32] = 16):
    M = pc.coopmat[pc.f16, pc.Subgroup, t, 16, pc.UseA]
    pc.store(A, 0, pc.fill(M, 0.0), 16)


@pc.kernel(workgroup_size=32)
def spec_as_shared_length(A: pc.Buffer[f32], t: pc.Spec[u32] = 16):
    s = pc.shared(f32, t)
    s[0] = A[0]


@pytest.mark.parametrize("k,what,text", [
    (spec_as_matrix_rows, "cooperative matrix rows", "pc.coopmat["),
    (spec_as_shared_length, "a shared array length", "pc.shared(")])
def test_spec_as_a_shape_is_a_compile_error(k, what, text):
    with pytest.raises(pc.CompileError) as e:
        k.compile()
    assert e.value.message == f"{what} cannot be the specialization constant 't'"
    assert "chosen at pipeline creation" in e.value.rule and "pycoop.Const" in e.value.hint
    assert e.value.rule_id == "frontend.spec-as-shape"
    assert e.value.loc.line == line_of(k, text)


def test_spec_values_validate_in_both_abis():
    for abi in ("device_address", "descriptors"):
        asm = tools.disassemble(spec_axpy.compile(abi=abi, reps=3).spv)
        assert "OpDecorate %reps SpecId 0" in asm
