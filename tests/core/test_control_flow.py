"""Control flow: runtime for / while / if recorded as structured IR, Python-level control flow
unrolled at trace time, short-circuit boolean operators, early returns, helpers, and the
compile errors for ill-formed control flow."""
import dataclasses
import types

import numpy as np
import pytest
from hypothesis import given, strategies as st

import pycoop
from pycoop import f32, i32, u32

from core_helpers import SETTINGS, emu, line_of

WG = 16


def ops_of(k, **consts):
    return [op.name for op in k.compile(**consts).module.walk()]


# --------------------------------------------------------------------------- runtime for

@pycoop.kernel(workgroup_size=WG)
def k_range3(out: pycoop.Buffer[i32], lo: i32, hi: i32, step: i32):
    i = pycoop.local_invocation_index()
    s = 0
    cnt = 0
    for j in range(lo, hi, step):
        s = s + j
        cnt += 1
    out[i] = s * 1000 + cnt


@pycoop.kernel(workgroup_size=WG)
def k_range_neg_const(out: pycoop.Buffer[i32], lo: i32, hi: i32):
    i = pycoop.local_invocation_index()
    s = 0
    for j in range(hi, lo, -3):
        s = s * 7 + j            # order-sensitive
    out[i] = s


@pycoop.kernel(workgroup_size=WG)
def k_range_per_invocation(out: pycoop.Buffer[u32], n: u32):
    i = pycoop.local_invocation_index()
    s = u32(0)
    for j in range(i, n):       # trip count differs per invocation
        s = s + j * j
    out[i] = s


@pycoop.kernel(workgroup_size=WG)
def k_range_only_stores(out: pycoop.Buffer[u32], n: u32):
    i = pycoop.local_invocation_index()
    for j in range(n):          # nothing carried but the induction variable
        out[i * 8 + j] = j + i


@SETTINGS
@given(st.integers(-30, 30), st.integers(-30, 30), st.integers(-7, 7).filter(lambda s: s != 0))
def test_runtime_range_with_runtime_bounds_and_step(lo, hi, step):
    out = np.zeros(WG, np.int32)
    emu(k_range3, 1, out, lo, hi, step)
    r = range(lo, hi, step)
    assert (out == sum(r) * 1000 + len(r)).all()


@SETTINGS
@given(st.integers(-40, 40), st.integers(-40, 40))
def test_runtime_range_with_negative_constant_step(lo, hi):
    out = np.zeros(WG, np.int32)
    emu(k_range_neg_const, 1, out, lo, hi)
    s = 0
    for j in range(hi, lo, -3):
        s = (s * 7 + j)
    s = (s + 2 ** 31) % 2 ** 32 - 2 ** 31
    assert (out == s).all()


@pycoop.kernel(workgroup_size=WG)
def k_range_unsigned_down(out: pycoop.Buffer[u32], lo: u32, hi: u32, step: pycoop.Const = 1):
    i = pycoop.local_invocation_index()
    s = u32(0)
    j = u32(99)
    for j in range(hi, lo + i, -step):
        s = s * u32(7) + j       # order-sensitive
        if j == lo + u32(13):
            break
    out[i * 2] = s
    out[i * 2 + 1] = j           # the last index that ran, or 99 where none did


def _unsigned_down(lo, hi, step):
    out = []
    for i in range(WG):
        s, j = 0, 99
        for j in range(hi, lo + i, -step):
            s = (s * 7 + j) % 2 ** 32
            if j == lo + 13:
                break
        out += [s, j]
    return out


@SETTINGS
@given(st.sampled_from([0, 2 ** 32 - 80]), st.integers(0, 50), st.integers(0, 50),
       st.sampled_from([1, 2, 3, 7]))
def test_runtime_range_with_unsigned_bounds_and_a_negative_constant_step(base, lo, hi, step):
    """`range(hi, lo, -step)` over u32 bounds counts down while j > lo, as in Python (api.md),
    also where j - step would wrap below 0 or the bounds are near 2^32."""
    out = np.zeros(WG * 2, np.uint32)
    emu(k_range_unsigned_down, 1, out, base + lo, base + hi, step=step)
    assert out.tolist() == _unsigned_down(base + lo, base + hi, step)


@SETTINGS
@given(st.integers(0, 40))
def test_runtime_range_trip_count_per_invocation(n):
    out = np.zeros(WG, np.uint32)
    emu(k_range_per_invocation, 1, out, n)
    assert out.tolist() == [sum(j * j for j in range(i, n)) for i in range(WG)]
    assert ops_of(k_range_per_invocation).count("loop") == 1


@pytest.mark.parametrize("n", [0, 1, 5, 8])
def test_runtime_range_with_no_carried_values(n):
    out = np.zeros(WG * 8, np.uint32)
    emu(k_range_only_stores, 1, out, n)
    exp = np.zeros((WG, 8), np.uint32)
    for i in range(WG):
        for j in range(n):
            exp[i, j] = i + j
    np.testing.assert_array_equal(out.reshape(WG, 8), exp)


@pycoop.kernel(workgroup_size=WG)
def k_nested(out: pycoop.Buffer[i32], n: i32, m: i32):
    i = pycoop.local_invocation_index()
    total = 0
    for a in range(n):
        row = 0
        for b in range(a, m):
            row = row + a * b
            total = total + 1
        total = total + row
    out[i] = total


@SETTINGS
@given(st.integers(-2, 9), st.integers(-2, 9))
def test_nested_runtime_loops(n, m):
    out = np.zeros(WG, np.int32)
    emu(k_nested, 1, out, n, m)
    total = 0
    for a in range(n):
        row = 0
        for b in range(a, m):
            row += a * b
            total += 1
        total += row
    assert (out == total).all()
    assert ops_of(k_nested).count("loop") == 2


# --------------------------------------------------------------------------- while

@pycoop.kernel(workgroup_size=WG)
def k_collatz(out: pycoop.Buffer[u32], start: u32):
    x = pycoop.local_invocation_index() + start
    steps = u32(0)
    while x != 1 and x != 0:
        if x % 2 == 0:
            x = x // 2
        else:
            x = 3 * x + 1
        steps += 1
    out[pycoop.local_invocation_index()] = steps


def collatz(x):
    s = 0
    while x not in (0, 1):
        x = x // 2 if x % 2 == 0 else 3 * x + 1
        s += 1
    return s


@SETTINGS
@given(st.integers(0, 500))
def test_while_on_runtime_condition_with_divergent_body(start):
    out = np.zeros(WG, np.uint32)
    emu(k_collatz, 1, out, start)
    assert out.tolist() == [collatz(start + i) for i in range(WG)]


# --------------------------------------------------------------------------- if / elif / else

@pycoop.kernel(workgroup_size=WG)
def k_classify(A: pycoop.Buffer[f32], out: pycoop.Buffer[i32], lo: f32, hi: f32):
    i = pycoop.global_invocation_id.x
    x = A[i]
    y = x
    if x < lo:
        k = -1
        y = lo
    elif x > hi:
        k = 1
        y = hi
    elif x == 0.0:
        k = 100
    else:
        k = 0
    out[i] = k
    A[i] = y


@SETTINGS
@given(st.lists(st.floats(-10, 10, width=32), min_size=32, max_size=32),
       st.floats(-5, 0, width=32), st.floats(0, 5, width=32))
def test_divergent_if_elif_else(xs, lo, hi):
    a = np.array(xs, np.float32)
    a[::5] = 0.0
    orig = a.copy()
    out = np.zeros(32, np.int32)
    emu(k_classify, 2, a, out, lo, hi)
    lo32, hi32 = np.float32(lo), np.float32(hi)
    exp_k = np.select([orig < lo32, orig > hi32, orig == 0], [-1, 1, 100], 0)
    np.testing.assert_array_equal(out, exp_k)
    np.testing.assert_array_equal(a, np.clip(orig, lo32, hi32))


@pycoop.kernel(workgroup_size=WG)
def k_list_carry(out: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    acc = [0, i, [i * 2, 1]]
    for t in range(n):
        acc[0] = acc[0] + acc[1]
        acc[1] = acc[1] + 1
        acc[2][1] = acc[2][1] * 2
        if t % 2 == 0:
            acc[2][0] = acc[2][0] - t
    out[i * 4] = acc[0]
    out[i * 4 + 1] = acc[1]
    out[i * 4 + 2] = acc[2][0]
    out[i * 4 + 3] = acc[2][1]


@SETTINGS
@given(st.integers(-1, 12))
def test_lists_of_values_carried_through_loops_and_ifs(n):
    out = np.zeros(WG * 4, np.int32)
    emu(k_list_carry, 1, out, n)
    for i in range(WG):
        acc = [0, i, [i * 2, 1]]
        for t in range(n):
            acc[0] += acc[1]
            acc[1] += 1
            acc[2][1] *= 2
            if t % 2 == 0:
                acc[2][0] -= t
        assert out[i * 4: i * 4 + 4].tolist() == [acc[0], acc[1], acc[2][0], acc[2][1]]


def _bump(xs, d, by):
    """A plain helper (not traced by pycoop) that changes the list and dict it is given."""
    for j in range(len(xs)):
        xs[j] = xs[j] + by
    d["sum"] = d["sum"] + xs[0]


def _read_only(xs):
    return xs[0] * 2


@pycoop.kernel(workgroup_size=WG)
def k_helper_mutates(out: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    acc, d, fixed = [i, i * 3], {"sum": i * 0}, [i + 100]
    for t in range(n):
        _bump(acc, d, t)                       # changes acc and d in place
        out[i * 5 + 4] = _read_only(fixed)     # only reads fixed
    k = i * 0
    while k < n:
        _bump(acc, d, 1)
        k = k + 1
    if i % 2 == 0:
        _bump(acc, d, 10)
    out[i * 5] = acc[0]
    out[i * 5 + 1] = acc[1]
    out[i * 5 + 2] = d["sum"]
    out[i * 5 + 3] = fixed[0]


@SETTINGS
@given(st.integers(-1, 6))
def test_a_helper_may_change_lists_and_dicts_inside_runtime_loops_and_ifs(n):
    """Lists and dicts a plain helper changes in place inside a runtime loop or `if` carry
    their new values through it, as if the kernel had assigned them."""
    out = np.full(WG * 5, -7, np.int32)
    emu(k_helper_mutates, 1, out, n)
    for i in range(WG):
        acc, d, fixed = [i, i * 3], {"sum": 0}, [i + 100]
        for t in range(n):
            _bump(acc, d, t)
        for _ in range(max(n, 0)):
            _bump(acc, d, 1)
        if i % 2 == 0:
            _bump(acc, d, 10)
        want = [acc[0], acc[1], d["sum"], fixed[0], 2 * fixed[0] if n > 0 else -7]
        assert out[i * 5: i * 5 + 5].tolist() == want


def test_only_what_a_helper_changes_is_carried():
    """The loop carries acc and d (changed by the helper) and its counter: the list the body
    only reads, and the buffer and bound it passes to ops, stay outside the loop."""
    loops = [op for op in k_helper_mutates.compile().module.walk() if op.name == "loop"]
    assert [len(op.operands) for op in loops] == [1 + 3, 3 + 1]   # for: i, acc x2, d; while


@pycoop.kernel(workgroup_size=WG)
def k_helper_appends(out: pycoop.Buffer[i32], n: i32):
    xs = [n]
    for t in range(n):
        xs.append(t)                           # HERE
    out[0] = xs[0]


def test_a_helper_growing_a_list_in_a_runtime_loop_is_reported():
    with pytest.raises(pycoop.CompileError, match="changes its container shape") as e:
        k_helper_appends.compile()
    assert e.value.loc.line == line_of(k_helper_appends, "# HERE")     # the append, not the for
    assert f"the loop at line {line_of(k_helper_appends, 'for t in range(n)')}" in e.value.message
    assert "lengths" in e.value.rule


@dataclasses.dataclass
class _Running:
    total: object
    count: object


def _accumulate(run, x):
    run.total = run.total + x
    run.count = run.count + 1


class _Plain:
    pass


@pycoop.kernel(workgroup_size=WG)
def k_records(out: pycoop.Buffer[i32], n: i32, plain: pycoop.Const = False):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    ns = types.SimpleNamespace(v=i, w=i * 10)
    run = _Running(i * 0, i * 0)
    box = _Plain()
    box.v = i
    for t in range(n):
        ns.v = ns.v + t                        # attribute of a namespace assigned in the body
        _accumulate(run, i)                    # a dataclass changed by a helper
        if plain:
            box.v = box.v + 1                  # PLAIN
    if i % 2 == 0:
        ns.w = ns.w - 1
    out[i * 4] = ns.v
    out[i * 4 + 1] = ns.w
    out[i * 4 + 2] = run.total
    out[i * 4 + 3] = run.count + box.v * 0


@SETTINGS
@given(st.integers(-1, 6))
def test_namespaces_and_dataclasses_are_carried_like_dicts(n):
    out = np.zeros(WG * 4, np.int32)
    emu(k_records, 1, out, n)
    for i in range(WG):
        trips = max(n, 0)
        want = [i + trips * (trips - 1) // 2, i * 10 - (i % 2 == 0), i * trips, trips]
        assert out[i * 4: i * 4 + 4].tolist() == want


def test_a_value_leaving_a_runtime_loop_through_a_plain_object_is_reported():
    with pytest.raises(pycoop.CompileError, match="computed inside a runtime loop or `if`") as e:
        k_records.compile(plain=True)
    assert e.value.loc.line == line_of(k_records, "box.v * 0")
    assert "types.SimpleNamespace" in e.value.hint           # the hint names what is carried
    assert e.value.rule_id == "control.escaped-value"


# --------------------------------------------------------------------------- early return

@pycoop.kernel(workgroup_size=WG)
def k_early_return(out: pycoop.Buffer[i32], n: u32):
    i = pycoop.global_invocation_id.x
    out[i] = 1
    if i < n:
        return
    out[i] = 2


@pycoop.kernel(workgroup_size=WG)
def k_return_in_loop(out: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    s = 0
    for j in range(n):
        if j == i:
            out[i] = -s
            return
        s = s + j
    out[i] = s


@pytest.mark.parametrize("n", [0, 5, 16, 40])
def test_early_return_only_some_invocations_exit(n):
    out = np.zeros(48, np.int32)
    emu(k_early_return, 3, out, n)
    np.testing.assert_array_equal(out, np.where(np.arange(48) < n, 1, 2))


@pytest.mark.parametrize("n", [0, 3, 16, 20])
def test_return_inside_a_runtime_loop(n):
    out = np.zeros(WG, np.int32)
    emu(k_return_in_loop, 1, out, n)
    exp = [(-sum(range(i))) if i < n else sum(range(n)) for i in range(WG)]
    assert out.tolist() == exp


# --------------------------------------------------------------------------- boolean operators

@pycoop.kernel(workgroup_size=WG)
def k_short_circuit(A: pycoop.Buffer[i32], out: pycoop.Buffer[i32], n: u32):
    i = pycoop.global_invocation_id.x
    pos = 1 if (i < n and A[i] > 0) else 0
    neg = 0
    if i >= n or A[i] < 0:
        neg = 2
    if not (i < n and A[i] != 0):
        neg = neg + 4
    chained = 0
    if 0 < i < n:
        chained = 8
    out[i] = pos + neg + chained


@SETTINGS
@given(st.lists(st.integers(-3, 3), min_size=0, max_size=32))
def test_and_or_not_ternary_short_circuit(xs):
    """`i < n and A[i] > 0` must not load A[i] for i >= n (A has exactly n elements)."""
    n = len(xs)
    a = np.array(xs, np.int32) if n else np.zeros(0, np.int32)
    out = np.zeros(32, np.int32)
    emu(k_short_circuit, 2, a if n else np.zeros(1, np.int32)[:0], out, n)
    exp = []
    for i in range(32):
        pos = 1 if (i < n and xs[i] > 0) else 0
        neg = 2 if (i >= n or xs[i] < 0) else 0
        if not (i < n and xs[i] != 0):
            neg += 4
        exp.append(pos + neg + (8 if 0 < i < n else 0))
    assert out.tolist() == exp


@pycoop.kernel(workgroup_size=WG)
def k_no_short_circuit(A: pycoop.Buffer[i32], out: pycoop.Buffer[i32], n: u32):
    i = pycoop.global_invocation_id.x
    ok = (i < n) & (A[i] > 0)       # `&` evaluates both sides
    out[i] = pycoop.select(ok, 1, 0)


def test_bitwise_and_on_bools_evaluates_both_sides():
    with pytest.raises(pycoop.EmulatorError, match="load out of bounds") as ei:
        emu(k_no_short_circuit, 1, np.ones(4, np.int32), np.zeros(16, np.int32), 4)
    assert ei.value.loc.line == line_of(k_no_short_circuit, "ok = (i < n)")


# --------------------------------------------------------------------------- trace-time control flow

@pycoop.kernel(workgroup_size=WG)
def k_unrolled(A: pycoop.Buffer[f32], B: pycoop.Buffer[f32], taps: pycoop.Const = 3,
               mode: pycoop.Const = "sum"):
    i = pycoop.global_invocation_id.x
    acc = A[i]
    for t in range(1, taps):               # Python ints: unrolled
        if mode == "sum":                  # Python condition: resolved at trace time
            acc = acc + A[i + t]
        else:
            acc = pycoop.max(acc, A[i + t])
    k = 0
    while k < 2:                           # Python while: unrolled
        acc = acc * 2.0
        k += 1
    B[i] = acc          # not A: invocation i - 1 reads A[i] (a race on a GPU)


@pytest.mark.parametrize("taps,mode", [(1, "sum"), (3, "sum"), (4, "max")])
def test_python_loops_and_ifs_are_unrolled_at_trace_time(taps, mode):
    names = ops_of(k_unrolled, taps=taps, mode=mode)
    assert "loop" not in names and "if" not in names
    assert names.count("load") == taps
    assert names.count("binary") == 2 * (taps - 1) + 2     # i + t, the combine, two doublings
    a = np.arange(64, dtype=np.float32)
    b = np.full(64, -1.0, np.float32)
    emu(k_unrolled, 1, a, b, taps=taps, mode=mode)
    win = np.stack([a[t:t + WG] for t in range(taps)])
    ref = (win.sum(0) if mode == "sum" else win.max(0)) * 4
    np.testing.assert_array_equal(b[:WG], ref)
    np.testing.assert_array_equal(b[WG:], -1.0)


# --------------------------------------------------------------------------- helpers

@pycoop.func
def clamp_add(x, lo, hi, d):
    y = x + d
    if y < lo:
        y = lo
    elif y > hi:
        y = hi
    return y


def twice(x):       # plain helper: no runtime control flow, inlined as Python
    return x * 2 + 1


@pycoop.func
def sum_to(n):
    s = 0
    for j in range(n):
        s = s + j
    return s


@pycoop.kernel(workgroup_size=WG)
def k_helpers(A: pycoop.Buffer[i32], lo: i32, hi: i32):
    i = pycoop.global_invocation_id.x
    A[i] = twice(clamp_add(A[i], lo, hi, 3)) + sum_to(A[i] % 4)


@SETTINGS
@given(st.lists(st.integers(-50, 50), min_size=16, max_size=16), st.integers(-20, 0),
       st.integers(0, 20))
def test_func_helpers_with_runtime_control_flow(xs, lo, hi):
    a = np.array(xs, np.int32)
    emu(k_helpers, 1, a, lo, hi)
    c_mod = lambda x, m: x - int(x / m) * m   # noqa: E731  (C remainder)
    exp = [(min(max(x + 3, lo), hi) * 2 + 1) + sum(range(c_mod(x, 4))) for x in xs]
    assert a.tolist() == exp


# --------------------------------------------------------------------------- compile errors

@pycoop.kernel(workgroup_size=WG)
def k_one_branch_var(A: pycoop.Buffer[f32]):
    i = pycoop.global_invocation_id.x
    if A[i] > 0.0:
        z = A[i] * 2.0
    A[i] = z + 1.0


@pycoop.kernel(workgroup_size=WG)
def k_loop_defined_var(A: pycoop.Buffer[f32], n: u32):
    i = pycoop.global_invocation_id.x
    for j in range(n):
        w = A[i]
    A[i] = w


@pycoop.kernel(workgroup_size=WG)
def k_type_change(A: pycoop.Buffer[f32], n: u32):
    i = pycoop.global_invocation_id.x
    x = A[i]
    for j in range(n):
        x = pycoop.cast(x, i32)
    A[i] = 0.0


@pycoop.kernel(workgroup_size=WG)
def k_branch_type_mismatch(A: pycoop.Buffer[f32]):
    i = pycoop.global_invocation_id.x
    if A[i] > 0.0:
        v = A[i]
    else:
        v = pycoop.cast(A[i], i32)
    A[i] = v


def undecorated_helper(x):
    if x > 0.0:
        return x
    return -x


@pycoop.kernel(workgroup_size=WG)
def k_undecorated(A: pycoop.Buffer[f32]):
    i = pycoop.global_invocation_id.x
    A[i] = undecorated_helper(A[i])


@pycoop.kernel(workgroup_size=WG)
def k_return_value(A: pycoop.Buffer[f32]):
    i = pycoop.global_invocation_id.x
    if A[i] > 0.0:
        return 1


@pycoop.kernel(workgroup_size=WG)
def k_float_range(A: pycoop.Buffer[f32], n: f32):
    for j in range(n):
        A[0] = 1.0


@pycoop.kernel(workgroup_size=WG)
def k_int_condition(A: pycoop.Buffer[i32]):
    i = pycoop.global_invocation_id.x
    if A[i]:
        A[i] = 0


def test_variable_defined_in_one_branch_then_used():
    with pytest.raises(pycoop.CompileError, match="no value.*only one branch") as ei:
        k_one_branch_var.compile()
    assert ei.value.line == line_of(k_one_branch_var, "A[i] = z + 1.0")
    assert "line %d" % line_of(k_one_branch_var, "if A[i] > 0.0") in str(ei.value)


def test_variable_first_defined_in_loop_then_used():
    with pytest.raises(pycoop.CompileError, match="first assigned inside the loop") as ei:
        k_loop_defined_var.compile()
    assert ei.value.line == line_of(k_loop_defined_var, "A[i] = w")
    assert ei.value.rule_id == "control.undefined-variable"


def test_loop_carried_type_change():
    with pytest.raises(pycoop.CompileError, match="changes type from f32 to i32") as ei:
        k_type_change.compile()
    assert ei.value.line == line_of(k_type_change, "for j in range(n)")
    assert ei.value.rule_id == "control.loop-carried-type"


def test_branch_type_mismatch_used_after():
    with pytest.raises(pycoop.CompileError, match="f32 in one branch and i32 in the other") as ei:
        k_branch_type_mismatch.compile()
    assert ei.value.line == line_of(k_branch_type_mismatch, "A[i] = v")


def test_runtime_if_in_undecorated_helper():
    with pytest.raises(pycoop.CompileError, match="plain bool") as ei:
        k_undecorated.compile()
    assert ei.value.line == line_of(undecorated_helper, "if x > 0.0")
    assert "@pycoop.func" in str(ei.value)
    assert ei.value.rule_id == "frontend.runtime-bool"


def test_other_control_flow_errors():
    with pytest.raises(pycoop.CompileError, match="a kernel returns nothing") as ei:
        k_return_value.compile()
    assert ei.value.line == line_of(k_return_value, "return 1")
    assert ei.value.rule_id == "frontend.kernel-returns-void"
    with pytest.raises(pycoop.CompileError, match="integer bounds") as ei:
        k_float_range.compile()
    assert ei.value.line == line_of(k_float_range, "for j in range(n)")
    assert ei.value.rule_id == "control.range-integer-bounds"
    with pytest.raises(pycoop.CompileError, match="not bool") as ei:
        k_int_condition.compile()
    assert ei.value.line == line_of(k_int_condition, "if A[i]:")
    assert ei.value.rule_id == "control.condition-bool"


def test_runtime_if_and_loop_are_structured_ops():
    names = ops_of(k_classify)
    assert names.count("if") == 3 and "loop" not in names
    names = ops_of(k_collatz)
    assert names.count("loop") == 1 and "condition" in names


@pycoop.kernel(workgroup_size=WG)
def k_merge_int_float(A: pycoop.Buffer[f32], B: pycoop.Buffer[f32]):
    i = pycoop.local_invocation_index()
    x = 1 if i < 5 else 2.5              # Python int and float literals merge as f32
    y = 3
    if i % 2 == 0:
        y = 0.5
    A[i] = x
    B[i] = y


def test_python_numbers_of_different_types_merge_as_one_runtime_type():
    ck = k_merge_int_float.compile()
    for op in ck.module.walk():
        if op.name == "if":
            assert [r.type for r in op.results] == [f32]
            for blk in op.regions:
                assert [v.type for v in blk.ops[-1].operands] == [f32]    # both yields
    a, b = np.zeros(WG, np.float32), np.zeros(WG, np.float32)
    emu(k_merge_int_float, 1, a, b)
    np.testing.assert_array_equal(a, np.where(np.arange(WG) < 5, 1.0, 2.5))
    np.testing.assert_array_equal(b, np.where(np.arange(WG) % 2 == 0, 0.5, 3.0))


@pycoop.kernel(workgroup_size=WG)
def k_loop_var_after(A: pycoop.Buffer[i32], n: i32):
    for j in range(n):
        A[0] = j
    A[1] = j


def test_runtime_loop_variable_is_undefined_after_the_loop():
    with pytest.raises(pycoop.CompileError, match="loop variable of a runtime loop") as ei:
        k_loop_var_after.compile()
    assert ei.value.line == line_of(k_loop_var_after, "A[1] = j")


@pycoop.kernel(workgroup_size=WG)
def k_workgroup_uniform_if(A: pycoop.Buffer[f32]):
    s = pycoop.shared(f32, WG)
    l = pycoop.local_invocation_index()
    g = pycoop.global_invocation_id.x
    if pycoop.workgroup_id.x % 2 == 1:     # uniform per workgroup: barrier allowed inside
        s[l] = A[g]
        pycoop.barrier()
        A[g] = s[WG - 1 - l]


def test_barrier_under_workgroup_uniform_condition():
    a = np.arange(4 * WG, dtype=np.float32)
    orig = a.copy().reshape(4, WG)
    emu(k_workgroup_uniform_if, 4, a)
    exp = orig.copy()
    exp[1::2] = exp[1::2, ::-1]
    np.testing.assert_array_equal(a.reshape(4, WG), exp)


@pycoop.kernel(workgroup_size=WG)
def k_while_return(A: pycoop.Buffer[i32], lim: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    x = i - i
    while x < 100:
        x = x + i + 1
        if x > lim:
            A[i] = -x
            return
    A[i] = x


@pytest.mark.parametrize("lim", [-1, 50, 99, 200])
def test_return_inside_while(lim):
    a = np.zeros(WG, np.int32)
    emu(k_while_return, 1, a, lim)

    def ref(i):
        x = 0
        while x < 100:
            x += i + 1
            if x > lim:
                return -x
        return x
    assert a.tolist() == [ref(i) for i in range(WG)]


@pycoop.kernel(workgroup_size=WG)
def k_all_branches_return(A: pycoop.Buffer[i32]):
    i = pycoop.local_invocation_index()
    if i < 4:
        A[i] = 1
        return
    elif i < 8:
        A[i] = 2
        return
    else:
        return
    A[i] = 3                 # unreachable: not traced, so no error about A or i


def test_code_after_an_if_whose_branches_all_return_is_unreachable():
    a = np.zeros(WG, np.int32)
    emu(k_all_branches_return, 1, a)
    assert a.tolist() == [1] * 4 + [2] * 4 + [0] * (WG - 8)
    stores = [op for op in k_all_branches_return.compile().module.walk() if op.name == "store"]
    assert len(stores) == 2


@pycoop.kernel(workgroup_size=WG)
def k_unsigned_step(A: pycoop.Buffer[u32], lo: u32, hi: u32, st: u32):
    c = u32(0)
    for j in range(lo, hi, st):
        c += j
    A[pycoop.local_invocation_index()] = c


@SETTINGS
@given(st.integers(0, 50), st.integers(0, 50), st.integers(1, 9))
def test_runtime_range_with_unsigned_runtime_step(lo, hi, step):
    a = np.zeros(WG, np.uint32)
    emu(k_unsigned_step, 1, a, lo, hi, step)
    assert (a == sum(range(lo, hi, step))).all()


@SETTINGS
@given(st.integers(-30, 30), st.integers(-30, 30))
def test_a_runtime_step_of_zero_runs_no_iteration(lo, hi):
    """Python raises for range(lo, hi, 0); a kernel cannot, and testing only i < hi (or
    i > hi) would never end where the bounds are in order: no iteration, signed or not."""
    out = np.full(WG, 7, np.int32)
    emu(k_range3, 1, out, lo, hi, 0)
    assert (out == 0).all()
    a = np.full(WG, 7, np.uint32)
    emu(k_unsigned_step, 1, a, abs(lo), abs(hi), 0)
    assert (a == 0).all()


@pycoop.func
def relu_with_returns(x):
    if x > 0.0:
        return x
    return 0.0


@pycoop.kernel(workgroup_size=WG)
def k_func_returns_value_in_if(A: pycoop.Buffer[f32]):
    i = pycoop.local_invocation_index()
    A[i] = relu_with_returns(A[i])


@pycoop.kernel(workgroup_size=WG)
def k_while_becomes_runtime(A: pycoop.Buffer[i32]):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    x = 0
    while x < 100:
        x = x + i + 1
    A[i] = x


@pycoop.kernel(workgroup_size=WG)
def k_while_true_breaks(A: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    x, steps = 0, 0
    while True:
        x = x + i + 1
        steps += 1
        if x >= n:
            break
    A[i] = steps


@pycoop.kernel(workgroup_size=WG)
def k_while_walrus(A: pycoop.Buffer[i32], B: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    k = 0
    while (sq := k * k + i) < n:
        k += 1
    A[i] = sq                     # the last test's value, as Python leaves it
    j = 0
    while (t := j * 3) < n:       # with a break: no test after it
        j += 1
        if j * 3 + i > 40:
            break
    B[i] = t * 100 + j


def test_func_returns_a_value_from_inside_an_if():
    a = np.linspace(-2, 2, WG).astype(np.float32)
    out = a.copy()
    emu(k_func_returns_value_in_if, 1, out)
    np.testing.assert_array_equal(out, np.maximum(a, 0))


@pycoop.kernel(workgroup_size=WG)
def k_while_or(A: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    x, steps = i, 0
    while x < n or x < 0:         # `or`: true as a constant where x < n
        x = x + i + 1
        steps += 1
    A[i] = steps * 1000 + x


def test_a_loop_keeps_the_values_of_invocations_that_left_it():
    """Invocations that left a loop keep the values they left with, also in the iterations
    where the condition comes out uniform over those still in it (here a constant from the
    short-circuit of `or`): the emulator used to take those iterations' values for every
    invocation."""
    a = np.zeros(WG, np.int32)
    emu(k_while_or, 1, a, 50)
    want = []
    for i in range(WG):
        x, steps = i, 0
        while x < 50 or x < 0:
            x, steps = x + i + 1, steps + 1
        want.append(steps * 1000 + x)
    np.testing.assert_array_equal(a, want)


def python_while(i, n):
    """k_while_becomes_runtime, k_while_true_breaks and k_while_walrus in plain Python."""
    x = 0
    while x < 100:
        x = x + i + 1
    y, steps = 0, 0
    while True:
        y, steps = y + i + 1, steps + 1
        if y >= n:
            break
    k = 0
    while (sq := k * k + i) < n:
        k += 1
    j = 0
    while (t := j * 3) < n:
        j += 1
        if j * 3 + i > 40:
            break
    return x, steps, sq, t * 100 + j


@pycoop.kernel(workgroup_size=WG)
def k_while_condition_python_inside(A: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    x = y = i
    while id(x) == id(y) and x < n:   # true on entry, false for the loop's own x
        x = x + 1
    A[i] = x


@pycoop.kernel(workgroup_size=WG)
def k_endless_for_some(A: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    x = i
    while x < n:
        x = x + i          # invocation 0 never moves
    A[i] = x


def test_a_loop_that_does_not_end_is_reported(monkeypatch):
    monkeypatch.setenv("PYCOOP_EMULATOR_MAX_ITERATIONS", "200")
    with pytest.raises(pycoop.EmulatorError, match="has run 200 iterations without ending for "
                       r"1 invocations \(the first: invocation 0 of workgroup \(0, 0, 0\)\)") as ei:
        emu(k_endless_for_some, 1, np.zeros(WG, np.int32), 100)
    assert ei.value.rule_id == "emulator.endless-loop"
    assert ei.value.line == line_of(k_endless_for_some, "while x < n")
    a = np.zeros(WG, np.int32)             # ended in time: no report
    emu(k_endless_for_some, 1, a, 0)
    np.testing.assert_array_equal(a, np.arange(WG))
    monkeypatch.setenv("PYCOOP_EMULATOR_MAX_ITERATIONS", "0")
    with pytest.raises(ValueError, match="expected a positive integer"):
        emu(k_endless_for_some, 1, a, 0)


@pycoop.kernel(workgroup_size=WG)
def k_chain_once(A: pycoop.Buffer[i32], C: pycoop.Buffer[i32], D: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    j = 0
    # C and D count the evaluations: each operand once per test, D's only while 0 <= C's
    while 0 <= pycoop.atomic.add(C, i, 1) + j < pycoop.atomic.add(D, i, 1) + i < n + i:
        j += 1
    A[i] = j


def test_chained_comparisons_and_loop_tests_evaluate_each_operand_once():
    """`a < b < c < d` evaluates b and c once, c only if a < b holds; a runtime while test
    runs once per iteration (plus the last), in the loop: operands with side effects (here
    atomic counters) count as in Python."""
    for n in (0, 7, 12):
        a, c, d = (np.zeros(WG, np.int32) for _ in range(3))
        emu(k_chain_once, 1, a, c, d, n)
        for i in range(WG):
            cnt_c = cnt_d = j = 0
            while True:
                b = cnt_c + j
                cnt_c += 1
                if not 0 <= b:
                    break
                e = cnt_d + i
                cnt_d += 1
                if not (b < e < n + i):
                    break
                j += 1
            assert (a[i], c[i], d[i]) == (j, cnt_c, cnt_d), (n, i)


@pycoop.kernel(workgroup_size=WG)
def k_walrus_in_and(A: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    t = 0
    if i < n and (t := i * 2) > 3:
        A[i] = t


@pycoop.kernel(workgroup_size=WG)
def k_walrus_in_ifexp(A: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    A[i] = (u := i) if i < n else 0


@pycoop.kernel(workgroup_size=WG)
def k_walrus_in_chain(A: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    if 0 < i < (m := n * 2):
        A[i] = m


@pytest.mark.parametrize("k,text", [(k_walrus_in_and, "(t := i * 2)"),
                                    (k_walrus_in_ifexp, "(u := i)"),
                                    (k_walrus_in_chain, "(m := n * 2)")])
def test_walrus_where_it_is_evaluated_lazily_is_refused(k, text):
    """`:=` in the right side of and/or, an arm of x if c else y or a later link of a chained
    comparison would bind a name of the function pycoop evaluates that part in: refused at
    its line and column (it left the kernel's variable unchanged)."""
    with pytest.raises(pycoop.CompileError, match=":= ...` inside the right side") as ei:
        k.compile()
    assert ei.value.rule_id == "frontend.walrus-lazy-operand"
    assert ei.value.line == line_of(k, text)
    import inspect
    src = inspect.getsource(k.fn if hasattr(k, "fn") else k._fn)
    line = next(ln for ln in src.splitlines() if text in ln)
    assert ei.value.loc.col == line.index(text) + 2      # the `:=` expression, 1-based


@pycoop.kernel(workgroup_size=WG)
def k_while_true_left_by_return(A: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    x = 0
    while True:
        x += 1
        A[i] = x
        if x + i > n:
            return


def test_a_while_true_left_only_by_return_is_refused_not_unrolled_forever(monkeypatch):
    """A kernel `return` leaves the condition True, so tracing would unroll the loop forever:
    after MAX_UNROLLED iterations it is a CompileError at the loop, naming `break`."""
    from pycoop.frontend import control
    monkeypatch.setattr(control, "MAX_UNROLLED", 40)
    with pytest.raises(pycoop.CompileError, match="has run 40 iterations while the kernel was "
                                                  "traced") as ei:
        k_while_true_left_by_return.compile()
    assert ei.value.rule_id == "control.while-unrolled-limit"
    assert ei.value.line == line_of(k_while_true_left_by_return, "while True")
    assert "break" in ei.value.hint


@pycoop.func
def step_of(i, n):
    if i > n:
        return 5                  # Python numbers returned under runtime conditions
    return -1


@pycoop.func
def first_square_above(i, n):
    x = 0
    while x < 100:                # Python at first; the return flag makes it a runtime loop
        x += 1
        if x * x > i + n:
            return x * 10
    return -x


@pycoop.kernel(workgroup_size=WG)
def k_func_python_returns(A: pycoop.Buffer[i32], B: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    A[i] = step_of(i, n)
    B[i] = first_square_above(i, n)


def test_funcs_return_python_numbers_from_runtime_branches_and_loops():
    """A @pycoop.func may return Python numbers under runtime conditions (they become runtime
    values of their type), also from a loop whose condition becomes a runtime value."""
    a, b = np.zeros(WG, np.int32), np.zeros(WG, np.int32)
    emu(k_func_python_returns, 1, a, b, 6)

    def first(i, n):
        x = 0
        while x < 100:
            x += 1
            if x * x > i + n:
                return x * 10
        return -x
    np.testing.assert_array_equal(a, [5 if i > 6 else -1 for i in range(WG)])
    np.testing.assert_array_equal(b, [first(i, 6) for i in range(WG)])


@pycoop.func
def bad_after_return(i, n):
    x = i * 2
    if i > n:                     # the merge of the two returns names this line
        return i
    return pycoop.f32(1.0)        # another type


@pycoop.kernel(workgroup_size=WG)
def k_bad_after_return(A: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    A[i] = bad_after_return(i, n)


def test_errors_after_a_rewritten_return_name_the_users_line():
    """The statements a single-exit rewrite adds stand at the lines of those they replace
    (they took the function's first line): the code after `if c: return a` runs in the
    if's other branch, so the two returns merge at the `if`, whose line the error names."""
    with pytest.raises(pycoop.CompileError) as ei:
        k_bad_after_return.compile()
    line = line_of(bad_after_return, "if i > n:")
    assert f":{line}:" in str(ei.value).splitlines()[0], str(ei.value)
    assert f"returns i32 on one path and f32 on another (the `if` at line {line})" in \
        str(ei.value)


@pycoop.kernel(workgroup_size=WG)
def k_break_in_while_else(A: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    x = 0
    while True:
        x += 1
        if x > n + i:
            break
    else:
        x = -1
    A[i] = x


@pycoop.kernel(workgroup_size=WG)
def k_break_in_python_for(A: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    x = 0
    for step, w in [(1, 2), (2, 3)]:       # a tuple target: the loop stays Python's
        x += step * w
        if x > n + i:
            break
    A[i] = x


@pycoop.kernel(workgroup_size=WG)
def k_runtime_break_over_a_list(A: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    x = 0
    last = 0
    for step in [1, 2, 3, 5, 8]:
        if step == 2:
            continue
        x += step
        last = step
        if x > n + i:
            break
    A[i] = x * 100 + step * 10 + last


@pytest.mark.parametrize("n", [-1, 4, 9, 30])
def test_break_under_a_runtime_condition_in_a_loop_over_a_python_list(n):
    """A loop over a Python list runs while tracing; its break (and continue) become flags,
    so an `if` on a runtime value may leave it, and the loop variable keeps the value it
    broke at."""
    a = np.zeros(WG, np.int32)
    emu(k_runtime_break_over_a_list, 1, a, n)

    def py(i):
        x = last = 0
        for step in [1, 2, 3, 5, 8]:
            if step == 2:
                continue
            x += step
            last = step
            if x > n + i:
                break
        return x * 100 + step * 10 + last
    np.testing.assert_array_equal(a, [py(i) for i in range(WG)])


@pytest.mark.parametrize("k,why,line", [
    (k_break_in_while_else, "of the loop at line {}, which has an `else` clause", "while True"),
    (k_break_in_python_for, "of a loop over a Python iterable", "for step, w in")])
def test_a_runtime_if_breaking_a_trace_time_loop_says_which_loop(k, why, line):
    with pytest.raises(pycoop.CompileError, match="this `if` holds a `break` or `continue` "
                       + why.format(line_of(k, line)).replace("(", r"\(")) as ei:
        k.compile()
    assert ei.value.rule_id == "control.break-placement"
    assert ei.value.line == line_of(k, "if x > n + i")


def test_a_runtime_loop_whose_condition_is_a_python_value_inside_it():
    with pytest.raises(pycoop.CompileError, match="does not depend on runtime values") as ei:
        k_while_condition_python_inside.compile()
    assert ei.value.rule_id == "control.while-runtime-condition"
    assert ei.value.line == line_of(k_while_condition_python_inside, "while id(x) == id(y)")


@pytest.mark.parametrize("n", [0, 1, 30, 77])
def test_while_loops_whose_condition_becomes_runtime_and_walrus_tests(n):
    """A `while` whose Python condition becomes a runtime value after some iterations
    (`while True:` with a runtime `break` too) runs those iterations at trace time and the
    rest as a runtime loop; names bound by the test (`:=`) hold the last test's values
    after the loop, and none after a `break`, as in Python."""
    want = np.array([python_while(i, n) for i in range(WG)], np.int32)
    x = np.zeros(WG, np.int32)
    emu(k_while_becomes_runtime, 1, x)
    steps = np.zeros(WG, np.int32)
    emu(k_while_true_breaks, 1, steps, n)
    a, b = np.zeros(WG, np.int32), np.zeros(WG, np.int32)
    emu(k_while_walrus, 1, a, b, n)
    np.testing.assert_array_equal(x, want[:, 0])
    np.testing.assert_array_equal(steps, want[:, 1])
    np.testing.assert_array_equal(a, want[:, 2])
    np.testing.assert_array_equal(b, want[:, 3])


# --------------------------------------------------------------------------- pycoop.range

@pycoop.kernel(workgroup_size=WG)
def k_kernel_range(out: pycoop.Buffer[i32], lo: pycoop.Const = 0, hi: pycoop.Const = 10,
                   step: pycoop.Const = 1, unroll: pycoop.Const = None):
    i = pycoop.local_invocation_index()
    s = 0
    for j in pycoop.range(lo, hi, step, unroll=unroll):
        s = s * 3 + j            # order-sensitive
    out[i] = i32(s)              # j is u32 when the bounds are all >= 0


@SETTINGS
@given(st.integers(-20, 20), st.integers(-20, 20), st.integers(-5, 5).filter(lambda s: s != 0),
       st.sampled_from([None, True, False, 2, 8]))
def test_kernel_range_keeps_a_loop_with_constant_bounds(lo, hi, step, unroll):
    """pycoop.range with bounds known at trace time is still one loop op (the built-in range
    would be unrolled while tracing), with the unroll hint as its LoopControl; but unroll=True
    is unrolled by pycoop itself, and a loop that never runs is not emitted."""
    ck = k_kernel_range.compile(lo=lo, hi=hi, step=step, unroll=unroll)
    loops = [op for op in ck.module.walk() if op.name == "loop"]
    unrolled = unroll is True or not range(lo, hi, step)
    assert len(loops) == (0 if unrolled else 1)
    want = {None: "None", True: "Unroll", False: "DontUnroll"}.get(unroll, f"PartialCount {unroll}")
    assert unrolled or any(l.strip().startswith("OpLoopMerge") and l.strip().endswith(want)
                           for l in ck.spvasm.splitlines())
    out = np.zeros(WG, np.int32)
    emu(k_kernel_range, 1, out, lo=lo, hi=hi, step=step, unroll=unroll)
    s = 0
    for j in range(lo, hi, step):
        s = s * 3 + j
    np.testing.assert_array_equal(out, np.array(s % (1 << 32), np.uint32).view(np.int32))   # wraps


@pycoop.kernel(workgroup_size=WG)
def k_kernel_range_runtime(out: pycoop.Buffer[u32], n: u32):
    s = u32(0)
    for j in pycoop.range(n, unroll=False):
        s = s + j
    out[pycoop.local_invocation_index()] = s


def test_kernel_range_with_runtime_bounds_is_a_runtime_range_with_a_hint():
    out = np.zeros(WG, np.uint32)
    emu(k_kernel_range_runtime, 1, out, 7)
    np.testing.assert_array_equal(out, 21)
    assert "DontUnroll" in k_kernel_range_runtime.compile().spvasm


class _Steps:
    @staticmethod
    def range(n, every):
        return range(0, n, every)


@pycoop.kernel(workgroup_size=WG)
def k_other_range_method(out: pycoop.Buffer[u32]):
    s = u32(0)
    for j in _Steps.range(10, every=3):          # not pycoop's: a Python loop
        s = s + j
    out[pycoop.local_invocation_index()] = s


def test_a_range_method_of_another_object_is_a_python_loop():
    assert "loop" not in ops_of(k_other_range_method)
    out = np.zeros(WG, np.uint32)
    emu(k_other_range_method, 1, out)
    np.testing.assert_array_equal(out, 0 + 3 + 6 + 9)


@pycoop.kernel(workgroup_size=WG)
def k_bad_unroll(out: pycoop.Buffer[u32], u: pycoop.Const = 1):
    for j in pycoop.range(4, unroll=u):
        out[j] = j


@pycoop.kernel(workgroup_size=WG)
def k_bad_range_keyword(out: pycoop.Buffer[u32]):
    for j in pycoop.range(4, step=2):
        out[j] = j


@pycoop.kernel(workgroup_size=WG)
def k_range_outside_for(out: pycoop.Buffer[u32]):
    r = pycoop.range(4)
    out[0] = 1


def test_kernel_range_errors():
    for u in (1, 0, "x", 2.0):
        with pytest.raises(pycoop.CompileError, match="expected True, False, None or an integer") as ei:
            k_bad_unroll.compile(u=u)
        assert ei.value.line == line_of(k_bad_unroll, "for j in pycoop.range")
        assert ei.value.rule_id == "control.unroll-value"
    with pytest.raises(pycoop.CompileError, match="unexpected keyword.*step") as ei:
        k_bad_range_keyword.compile()
    assert ei.value.line == line_of(k_bad_range_keyword, "for j in pycoop.range")
    assert ei.value.rule_id == "control.range-keywords"
    with pytest.raises(pycoop.CompileError, match="only for the header of a for loop") as ei:
        k_range_outside_for.compile()
    assert ei.value.line == line_of(k_range_outside_for, "r = pycoop.range(4)")
    assert ei.value.rule_id == "control.range-in-for"


# --------------------------------------------------------------------------- helpers nested in kernels

@pycoop.kernel(workgroup_size=WG)
def k_helper_loops(out: pycoop.Buffer[i32], n: i32):
    i = pycoop.local_invocation_index()
    acc = [i32(0), i32(0)]
    sh = pycoop.shared(i32, WG)

    def accumulate(m):
        for j in range(m):              # a runtime loop inside a helper
            t = j * 2                   # first bound inside the loop
            acc[0] = acc[0] + t         # the kernel's list, mutated in place
            acc[1] = acc[1] + 1

    def fill(v):
        for q in range(2):              # a trace-time loop storing to the kernel's shared array
            sh[i] = v + q

    accumulate(n)
    fill(acc[1])
    pycoop.barrier()
    out[i] = acc[0] * 100 + sh[i]


@pytest.mark.parametrize("n", [0, 1, 5])
def test_helpers_nested_in_a_kernel_mutate_its_containers_in_loops(n):
    out = np.zeros(WG, np.int32)
    emu(k_helper_loops, 1, out, n)
    assert out.tolist() == [n * (n - 1) * 100 + n + 1] * WG


# --------------------------------------------------------------------------- NumPy and Python built-ins

@pycoop.kernel(workgroup_size=WG)
def k_numpy_scalars(X: pycoop.Buffer[f32], Y: pycoop.Buffer[f32]):
    i = pycoop.global_invocation_id.x
    v = np.float32(2.0) * X[i] + np.float32(1.0)         # NumPy scalar on the left
    if np.float32(3.0) < v:
        v = v - np.float32(0.5)
    Y[i] = np.float32(10.0) - v


def test_numpy_scalars_on_the_left_of_an_operator():
    x = np.arange(WG, dtype=np.float32)
    y = np.zeros(WG, np.float32)
    emu(k_numpy_scalars, 1, x, y)
    v = 2 * x + 1
    np.testing.assert_array_equal(y, 10 - np.where(3 < v, v - 0.5, v))


def _numpy_exp(X: pycoop.Buffer[f32]):
    X[0] = np.exp(X[1])                                  # HERE


def _numpy_sum(X: pycoop.Buffer[f32]):
    X[0] = np.sum(X[1])                                  # HERE


def _len_of_buffer(X: pycoop.Buffer[f32]):
    X[0] = len(X)                                        # HERE


@pytest.mark.parametrize("body,match,hint", [
    (_numpy_exp, "NumPy's exp\\(\\) cannot run on a kernel value", "pycoop.exp"),
    (_numpy_sum, "NumPy's sum\\(\\) cannot run on a kernel value", "pycoop's own functions"),
    (_len_of_buffer, "len\\(\\) of a runtime value of type Buffer\\[f32\\]", "kernel parameter")])
def test_numpy_functions_and_len_on_kernel_values_are_reported(body, match, hint):
    k = pycoop.kernel(workgroup_size=WG)(body)
    with pytest.raises(pycoop.CompileError, match=match) as ei:
        k.compile()
    assert ei.value.line == line_of(body, "# HERE")
    assert hint in ei.value.hint
    assert ei.value.rule_id == ("frontend.runtime-iteration" if body is _len_of_buffer
                                else "frontend.numpy-on-runtime-value")


@pycoop.func
def count_up_by_two(n):
    k = 0
    while k < n:
        k += 2
    return k


def test_a_func_with_a_while_loop_runs_as_python_outside_kernels():
    """Called from Python (no kernel being traced) a @pycoop.func's loops are Python's."""
    assert [count_up_by_two(n) for n in (0, 1, 7, 8)] == [0, 2, 8, 8]


@pycoop.kernel(workgroup_size=WG)
def k_loop_variable_after_runtime_break(A: pycoop.Buffer[i32], n: i32):
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    s = 0
    for j in range(5):            # unrolled while tracing; left at run time
        s += j
        if s + i > n:
            break
    A[i] = j * 100 + s


@pytest.mark.parametrize("n", [-1, 3, 6, 20])
def test_the_loop_variable_keeps_its_value_at_a_runtime_break(n):
    """After a trace-time loop broken out of under a runtime condition, its variable holds
    the iteration that broke, as in Python (it held the last iteration's)."""
    a = np.zeros(WG, np.int32)
    emu(k_loop_variable_after_runtime_break, 1, a, n)

    def py(i):
        s = 0
        for j in range(5):
            s += j
            if s + i > n:
                break
        return j * 100 + s
    np.testing.assert_array_equal(a, [py(i) for i in range(WG)])


@pycoop.kernel(workgroup_size=WG)
def k_loop_variables_after_loops(A: pycoop.Buffer[i32], lo: i32, hi: i32, step: i32):
    """Each loop's variable read after it: runtime bounds, a runtime break, a negative
    constant step, pycoop.range, ranges that never run and an empty Python list."""
    i = pycoop.cast(pycoop.local_invocation_index(), i32)
    a = -7
    for a in range(lo, hi + i, step):
        pass
    b = i
    for b in range(lo, hi):
        if b * b > i * 3:
            break
    c = 100
    for c in range(hi, lo, -2):
        pass
    d = i + 1000
    for d in pycoop.range(lo, hi + 2):
        pass
    e = 5
    for e in range(3, 3):
        pass
    f = i
    for f in []:
        pass
    A[i * 6 + 0] = a
    A[i * 6 + 1] = b
    A[i * 6 + 2] = c
    A[i * 6 + 3] = d
    A[i * 6 + 4] = e
    A[i * 6 + 5] = f


def python_loop_variables(i, lo, hi, step):
    """k_loop_variables_after_loops in plain Python (the reference)."""
    a = -7
    for a in range(lo, hi + i, step):
        pass
    b = i
    for b in range(lo, hi):
        if b * b > i * 3:
            break
    c = 100
    for c in range(hi, lo, -2):
        pass
    d = i + 1000
    for d in range(lo, hi + 2):
        pass
    e = 5
    for e in range(3, 3):
        pass
    f = i
    for f in []:
        pass
    return [a, b, c, d, e, f]


@SETTINGS
@given(st.integers(-6, 6), st.integers(-6, 12), st.sampled_from([-3, -1, 1, 2, 5]))
def test_a_loop_variable_keeps_its_value_where_the_loop_runs_zero_times(lo, hi, step):
    """After a loop (runtime or unrolled while tracing) its variable holds the last index
    that ran, or its value from before the loop where no iteration ran, as in Python."""
    a = np.zeros(WG * 6, np.int32)
    emu(k_loop_variables_after_loops, 1, a, lo, hi, step)
    want = [python_loop_variables(i, lo, hi, step) for i in range(WG)]
    np.testing.assert_array_equal(a.reshape(WG, 6), want)


@pycoop.kernel(workgroup_size=WG)
def k_loop_variable_of_another_type(A: pycoop.Buffer[f32], n: u32):
    j = 0.5
    for j in range(n):
        pass
    A[0] = j


def test_a_loop_variable_whose_value_before_has_another_type():
    """A runtime loop's variable after it is the last index or the value from before; where
    one type cannot hold both, reading it is refused at the read, naming both types."""
    with pytest.raises(pycoop.CompileError, match=r"holds the last index \(u32\) or, where no "
                                                  r"iteration ran, its value from before the "
                                                  r"loop \(0.5\)") as ei:
        k_loop_variable_of_another_type.compile()
    assert ei.value.line == line_of(k_loop_variable_of_another_type, "A[0] = j")


@pycoop.func
def _pick(a):
    if a > 3:
        return a                                     # (None where a <= 3)


@pycoop.func
def _search(a, n):
    for j in range(n):
        if j >= a:
            return j


@pycoop.func
def _search_or(a, n):
    for j in range(n):
        if j >= a:
            return j
    return u32(99)


@pycoop.func
def _by_mode(a, MODE):
    if MODE == 1:                                    # decided while tracing
        return a


def test_a_func_that_falls_off_its_end_on_a_runtime_path_is_a_compile_error():
    """Where a runtime condition decides whether a @pycoop.func returns a value, a path that
    falls off its end would return Python's None, which no kernel value stands for (it gave
    0 in silence); a trailing return, or a trace-time condition, is fine."""
    for helper in (_pick, _search):
        @pycoop.kernel(workgroup_size=8)
        def k(out: pycoop.Buffer[u32], n: u32):
            out[pycoop.local_invocation_index()] = helper(pycoop.local_invocation_index(), n) \
                if helper is _search else helper(pycoop.local_invocation_index())
        with pytest.raises(pycoop.CompileError, match="returns a value on some paths and falls "
                                                      "off its end") as e:
            k.compile()
        assert e.value.rule_id == "control.func-falls-off"
        assert e.value.loc.file == __file__ and e.value.line == line_of(helper, "def ")

    @pycoop.kernel(workgroup_size=8)
    def fine(out: pycoop.Buffer[u32], n: u32):
        i = pycoop.local_invocation_index()
        out[i] = _search_or(i, n) + _by_mode(i, 1)
    out = np.zeros(8, np.uint32)
    emu(fine, 1, out, 5)
    i = np.arange(8)
    np.testing.assert_array_equal(out, np.where(i < 5, i, 99) + i)


def test_containers_first_assigned_in_both_branches_merge():
    """A tuple or list first assigned in both branches of a runtime `if` merges element by
    element, as one assigned before it (it was refused as 'assigned in only one branch');
    assigned in one branch only it is undefined after the `if`, and of two shapes a
    container-shape error."""
    @pycoop.kernel(workgroup_size=8)
    def both(out: pycoop.Buffer[i32]):
        i = i32(pycoop.local_invocation_index())
        if i > 3:
            t, l = (i, i), [i * 2]
        else:
            t, l = (i + 1, i + 2), [i * 3]
        out[i] = t[0] * 10 + t[1] + l[0] * 100
    out = np.zeros(8, np.int32)
    emu(both, 1, out)
    i = np.arange(8)
    np.testing.assert_array_equal(out, np.where(i > 3, 11 * i + 200 * i,
                                                (i + 1) * 10 + i + 2 + 300 * i))

    @pycoop.kernel(workgroup_size=8)
    def one(out: pycoop.Buffer[i32]):
        i = i32(pycoop.local_invocation_index())
        if i > 3:
            t = [i, i]
        out[i] = t[0]
    with pytest.raises(pycoop.CompileError, match="assigned in only one branch") as e:
        one.compile()
    assert e.value.rule_id == "control.undefined-variable"

    @pycoop.kernel(workgroup_size=8)
    def shapes(out: pycoop.Buffer[i32]):
        i = i32(pycoop.local_invocation_index())
        if i > 3:
            t = (i, i)
        else:
            t = (i,)
        out[i] = t[0]
    with pytest.raises(pycoop.CompileError, match="containers of different shapes") as e:
        shapes.compile()
    assert e.value.rule_id == "control.if-container-shape"
