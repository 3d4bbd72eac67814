"""`break` and `continue` in loops with runtime bounds or conditions (rewritten into flags),
against plain Python references; every module passes spirv-val."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f32, i32, u32


@pc.kernel(workgroup_size=32)
def first_above(X: pc.Buffer[f32], Out: pc.Buffer[i32], n: u32, rows: u32, t: f32):
    r = pc.global_invocation_id.x
    if r < rows:
        found = i32(-1)
        for j in range(n):
            if X[r * n + j] > t:
                found = i32(j)
                break
        Out[r] = found


@pc.kernel(workgroup_size=32)
def sum_until(X: pc.Buffer[f32], Out: pc.Buffer[f32], n: u32, rows: u32):
    r = pc.global_invocation_id.x
    if r < rows:
        s = f32(0.0)
        j = u32(0)
        while j < n:
            v = X[r * n + j]
            j += 1
            if v < 0.0:
                continue
            if v > 2.5:
                break
            s += v
        Out[r] = s


@pc.kernel(workgroup_size=32)
def static_bound(X: pc.Buffer[f32], Out: pc.Buffer[f32], rows: u32):
    r = pc.global_invocation_id.x
    if r < rows:
        s = f32(0.0)
        for j in range(6):                     # trace-time bound, runtime break
            v = X[r * 6 + j]
            if v > 1.0:
                break
            elif v < -1.0:
                continue
            s += v
        Out[r] = s


@pc.kernel(workgroup_size=32)
def nested(X: pc.Buffer[f32], Out: pc.Buffer[u32], n: u32, rows: u32):
    r = pc.global_invocation_id.x
    if r < rows:
        count = u32(0)
        for a in range(n):
            if X[r * n + a] < -2.0:
                break
            for b in range(a, n):
                if X[r * n + b] > 1.5:
                    break
                count += 1
        Out[r] = count


def py_first_above(x, t):
    return next((j for j, v in enumerate(x) if v > t), -1)


def py_sum_until(x):
    s = np.float32(0)
    for v in x:
        if v < 0:
            continue
        if v > 2.5:
            break
        s += v
    return s


def py_static(x):
    s = np.float32(0)
    for v in x:
        if v > 1.0:
            break
        elif v < -1.0:
            continue
        s += v
    return s


def py_nested(x):
    count = 0
    for a in range(len(x)):
        if x[a] < -2.0:
            break
        for b in range(a, len(x)):
            if x[b] > 1.5:
                break
            count += 1
    return count


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 40), n=st.integers(0, 24), seed=st.integers(0, 2**32 - 1))
def test_runtime_loops_with_break_and_continue(rows, n, seed):
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal(rows * max(n, 1)) * 1.5).astype(np.float32)
    grid = -(-rows // 32)
    O = np.zeros(rows, np.int32)
    first_above[grid](X, O, n, rows, 1.2, backend="emulator")
    np.testing.assert_array_equal(O, [py_first_above(X[r * n:(r + 1) * n], 1.2) for r in range(rows)])
    S = np.zeros(rows, np.float32)
    sum_until[grid](X, S, n, rows, backend="emulator")
    np.testing.assert_allclose(S, [py_sum_until(X[r * n:(r + 1) * n]) for r in range(rows)], atol=1e-4)
    C = np.zeros(rows, np.uint32)
    nested[grid](X, C, n, rows, backend="emulator")
    np.testing.assert_array_equal(C, [py_nested(X[r * n:(r + 1) * n]) for r in range(rows)])


def test_trace_time_loop_with_runtime_break():
    rng = np.random.default_rng(5)
    rows = 45
    X = rng.standard_normal(rows * 6).astype(np.float32)
    O = np.zeros(rows, np.float32)
    static_bound[2](X, O, rows, backend="emulator")
    np.testing.assert_allclose(O, [py_static(X[r * 6:(r + 1) * 6]) for r in range(rows)], atol=1e-5)


def test_break_in_a_trace_time_loop_stays_python():
    @pc.kernel(workgroup_size=32)
    def k(Out: pc.Buffer[u32]):
        total = 0
        for j in range(10):
            if j == 4:
                break
            total += j
        Out[pc.global_invocation_id.x] = u32(total)

    assert not [op for op in k.compile().module.walk() if op.name in ("loop", "if")]
    O = np.zeros(32, np.uint32)
    k[1](O, backend="emulator")
    assert (O == 6).all()


@pytest.mark.parametrize("k", [first_above, sum_until, static_bound, nested], ids=lambda k: k.name)
def test_modules_validate(k):
    assert k.compile().spv                    # lowered and checked by spirv-val


# --------------------------------------------------------------------------- returns in functions

@pc.func
def relu(x):
    if x > 0.0:
        return x
    return f32(0.0)


@pc.func
def index_of(X, base, n, t):
    for j in range(n):
        if X[base + j] > t:
            return i32(j)
    return i32(-1)


@pc.func
def classify(x):
    if x < -1.0:
        return u32(0)
    elif x < 1.0:
        return u32(1)
    else:
        return u32(2)


@pc.kernel(workgroup_size=32)
def uses_helpers(X: pc.Buffer[f32], R: pc.Buffer[f32], I: pc.Buffer[i32], Cl: pc.Buffer[u32], n: u32,
                 rows: u32):
    r = pc.global_invocation_id.x
    if r < rows:
        R[r] = relu(X[r * n])
        I[r] = index_of(X, r * n, n, f32(1.0))
        Cl[r] = classify(X[r * n + 1])


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 40), n=st.integers(2, 16), seed=st.integers(0, 2**32 - 1))
def test_helpers_return_from_branches_and_loops(rows, n, seed):
    X = np.random.default_rng(seed).standard_normal(rows * n).astype(np.float32)
    R, I, Cl = np.zeros(rows, np.float32), np.zeros(rows, np.int32), np.zeros(rows, np.uint32)
    uses_helpers[-(-rows // 32)](X, R, I, Cl, n, rows, backend="emulator")
    x = X.reshape(rows, n)
    np.testing.assert_array_equal(R, np.maximum(x[:, 0], 0))
    np.testing.assert_array_equal(I, [py_first_above(x[r], 1.0) for r in range(rows)])
    np.testing.assert_array_equal(Cl, np.where(x[:, 1] < -1, 0, np.where(x[:, 1] < 1, 1, 2)))
    assert uses_helpers.compile().spv


def test_per_element_function_with_an_early_return():
    Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]

    def causal(r, c, e):
        if c > r:
            return f32(-1e30)
        return e

    @pc.kernel(workgroup_size=32)
    def k(X: pc.Buffer[f32], Out: pc.Buffer[f32]):
        pc.store(Out, 0, pc.nv.per_element(Acc.load(X, 0, 16), causal), 16)

    X = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    Out = np.zeros(256, np.float32)
    k[1](X, Out, backend="emulator")
    r, c = np.mgrid[0:16, 0:16]
    np.testing.assert_array_equal(Out.reshape(16, 16), np.where(c > r, np.float32(-1e30), X.reshape(16, 16)))
    assert k.compile().spv
