"""Kernels the front end once crashed on or compiled wrongly: `continue` without `break`,
loops that never run and `pycoop.range(unroll=True)` (which crashed a driver's compiler),
helpers and closures passed to per-element, combine and decode functions. Scalar kernels run
on the emulator and on Vulkan (lavapipe in CI) and agree with a NumPy or Python reference;
the driver-crash kernels also run on a GPU (-m gpu)."""
from __future__ import annotations

import numpy as np
import pytest

import pycoop as pc
from pycoop import f16, f32, i16, i64, u32

from core_helpers import line_of

C32 = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]


def _vulkan() -> bool:
    try:
        from pycoop.runtime.vulkan import get_runtime
        get_runtime()
    except Exception:
        return False
    return True


HAVE_VULKAN = _vulkan()


def run_both(kernel, grid, *args):
    """Outputs on the emulator and (where a driver exists) on Vulkan, from copies of the same
    inputs; the Vulkan outputs are None without a driver."""
    emu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    kernel[grid](*emu, backend="emulator")
    if not HAVE_VULKAN:
        return emu, None
    vk = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    assert kernel[grid](*vk, backend="vulkan").backend == "vulkan"
    return emu, vk


def check_both(kernel, grid, args, index, want):
    emu, vk = run_both(kernel, grid, *args)
    np.testing.assert_array_equal(emu[index], want)
    if vk is not None:
        np.testing.assert_array_equal(vk[index], want)


# --------------------------------------------------------------------------- continue, no break

@pc.kernel(workgroup_size=8)
def continue_runtime(A: pc.Buffer[u32], n: u32):
    gid = pc.global_invocation_id.x
    for j in range(n):
        if gid == u32(1):
            continue
        A[gid] = A[gid] + u32(1)


@pc.kernel(workgroup_size=8)
def continue_unrolled(A: pc.Buffer[u32], n: u32):
    gid = pc.global_invocation_id.x
    for j in range(3):
        if gid == u32(1):
            continue
        A[gid] = A[gid] + u32(1)


@pc.kernel(workgroup_size=8)
def continue_pc_range(A: pc.Buffer[u32], n: u32):
    gid = pc.global_invocation_id.x
    s = u32(0)
    for j in pc.range(0, 5, unroll=True):
        if (gid + j) % u32(2) == u32(0):
            continue
        s = s + j
    A[gid] = s


@pytest.mark.parametrize("kernel,bump", [(continue_runtime, 5), (continue_unrolled, 3)])
def test_continue_in_a_loop_without_break(kernel, bump):
    A = np.arange(16, dtype=np.uint32)
    want = A + bump
    want[1] = 1                            # global id 1 skips every step
    check_both(kernel, 2, (A, 5), 0, want)


def test_continue_in_an_unrolled_pc_range():
    want = [sum(j for j in range(5) if (g + j) % 2) for g in range(8)]
    check_both(continue_pc_range, 1, (np.zeros(8, np.uint32), 0), 0, np.array(want, np.uint32))


# --------------------------------------------------------------------------- driver crashes

@pc.kernel(workgroup_size=32)
def zero_trip(A: pc.ReadBuffer[i16], O: pc.Buffer[u32]):
    gid = u32(1) + pc.local_invocation_id.x
    x = A[gid]
    w = u32(0)
    while w < u32(5):
        w += u32(1)
        if x > i16(15):
            return
    for q in pc.range(1, 1):          # a loop that never runs
        O[gid] = u32(1)
    w2 = u32(0)
    while w2 < gid:
        w2 += u32(1)
    O[gid] = gid


@pc.kernel(workgroup_size=32)
def unrolled_break(A: pc.ReadBuffer[i64], O: pc.Buffer[i64]):
    gid = pc.local_invocation_id.x
    x = A[gid]
    while x > i64(100):
        x = x // i64(3)
    s = i64(0)
    for q in pc.range(1, 3, unroll=True):
        if x // i64(7) < x:
            break
        s += x * i64(q)
    O[gid] = s + x


def _zero_trip_case():
    A = np.arange(40, dtype=np.int16)
    want = np.zeros(40, np.uint32)
    want[1:16] = np.arange(1, 16)           # ids 16.. return early (x = id > 15)
    return (A, np.zeros(40, np.uint32)), want


def _unrolled_break_case():
    A = (np.arange(32, dtype=np.int64) * 37 - 40)
    want = []
    for x in A.tolist():
        while x > 100:
            x //= 3
        s = 0
        for q in range(1, 3):
            if x // 7 < x:
                break
            s += x * q
        want.append(s + x)
    return (A, np.zeros(32, np.int64)), np.array(want, np.int64)


def test_driver_crash_kernels_emit_no_zero_trip_or_unroll_hinted_loop():
    """The two kernels that crashed a driver's pipeline compiler: no loop op for the loop
    that never runs, and `pycoop.range(unroll=True)` unrolled by the tracer (no Unroll hint)."""
    assert [op.name for op in zero_trip.compile().module.walk()].count("loop") == 2     # the whiles
    ck = unrolled_break.compile()
    assert [op.name for op in ck.module.walk()].count("loop") == 1
    assert " Unroll" not in ck.spvasm and ck.spv


@pytest.mark.parametrize("kernel,case", [(zero_trip, _zero_trip_case), (unrolled_break, _unrolled_break_case)])
def test_driver_crash_kernels_run(kernel, case):
    args, want = case()
    check_both(kernel, 1, args, 1, want)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel,case", [(zero_trip, _zero_trip_case), (unrolled_break, _unrolled_break_case)])
def test_driver_crash_kernels_run_on_the_gpu(kernel, case):
    """These crashed vkCreateComputePipelines on an H100 (driver 580.159.04) before the tracer
    folded the zero-trip loop and unrolled the unroll=True one."""
    args, want = case()
    out = [a.copy() for a in args]
    assert kernel[1](*out, backend="vulkan").backend == "vulkan"
    np.testing.assert_array_equal(out[1], want)
    emu = [a.copy() for a in args]
    kernel[1](*emu, backend="emulator")
    np.testing.assert_array_equal(out[1], emu[1])


@pc.kernel(workgroup_size=8)
def folded_runtime_range(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    for j in range(u32(4), u32(4)):          # constant bounds, no iteration
        A[i] = u32(7)
    for j in range(u32(0), u32(2)):          # constant bounds: stays a loop
        A[i] = A[i] + j


def test_a_runtime_range_with_constant_empty_bounds_is_folded():
    assert [op.name for op in folded_runtime_range.compile().module.walk()].count("loop") == 1
    check_both(folded_runtime_range, 1, (np.zeros(8, np.uint32),), 0, np.ones(8, np.uint32))


@pc.kernel(workgroup_size=8)
def unrolled_values(A: pc.Buffer[i64]):
    i = pc.global_invocation_id.x
    s = i64(0)
    for j in pc.range(5, -4, -3, unroll=True):      # 5, 2, -1: an i32 loop variable
        s = s * i64(10) + i64(j)
    A[i] = s


def test_unrolled_pc_range_keeps_the_loop_variable_type_and_order():
    assert not any(op.name == "loop" for op in unrolled_values.compile().module.walk())
    check_both(unrolled_values, 1, (np.zeros(8, np.int64),), 0, np.full(8, (5 * 10 + 2) * 10 - 1))


# --------------------------------------------------------------------------- callbacks

@pc.kernel(workgroup_size=32)
def helper_with_local(X: pc.Buffer[f32]):
    def twice(r, c, e):
        t = e + e
        return t
    pc.store(X, 0, pc.nv.per_element(C32.load(X, 0, 16), twice), 16)


@pc.kernel(workgroup_size=32)
def closure_over_parameter(X: pc.Buffer[f32], s: f32):
    pc.store(X, 0, pc.nv.per_element(C32.load(X, 0, 16), lambda r, c, e: e * s), 16)


@pc.kernel(workgroup_size=32)
def closure_over_values(X: pc.Buffer[f32], s: f32):
    m = C32.load(X, 0, 16)
    k = f32(2.0)
    t = s + f32(1.0)

    def f(r, c, e, o):                       # o: the extra operand; m, s, t, k: captured
        if e > s:
            return e * o * k + t
        return e - f32(r)
    pc.store(X, 0, pc.nv.per_element(m, f, m), 16)


@pc.kernel(workgroup_size=32)
def closure_in_a_loop(X: pc.Buffer[f32]):
    m = C32.load(X, 0, 16)
    for s in (f32(2.0), f32(3.0)):           # one lambda object per iteration, same code
        m = pc.nv.per_element(m, lambda r, c, e: e * s)
    pc.store(X, 0, m, 16)


def test_a_helper_with_a_local_variable_as_per_element_function():
    X = np.arange(256, dtype=np.float32)
    helper_with_local[1](X, backend="emulator")
    np.testing.assert_array_equal(X, np.arange(256, dtype=np.float32) * 2)
    assert helper_with_local.compile().spv


def test_closures_pass_kernel_values_as_extra_operands():
    X = np.arange(256, dtype=np.float32)
    closure_over_parameter[1](X, 1.5, backend="emulator")
    np.testing.assert_array_equal(X, np.arange(256, dtype=np.float32) * 1.5)
    fn = closure_over_parameter.compile().module.functions[0]
    assert len(fn.params) == 4                           # row, col, element, s

    X0 = np.arange(256, dtype=np.float32)
    X = X0.copy()
    closure_over_values[1](X, 100.0, backend="emulator")
    r = np.arange(256) // 16
    np.testing.assert_array_equal(X, np.where(X0 > 100, X0 * X0 * 2 + 101, X0 - r))

    X = X0.copy()
    closure_in_a_loop[1](X, backend="emulator")
    np.testing.assert_array_equal(X, X0 * 6)
    for k in (closure_over_parameter, closure_over_values, closure_in_a_loop):
        assert k.compile().spv                           # passes spirv-val


@pc.kernel(workgroup_size=32)
def combine_capture(X: pc.Buffer[f32], s: f32):
    m = pc.nv.reduce(C32.load(X, 0, 16), "row", lambda a, b: a + b * s)
    pc.store(X, 0, m, 16)


@pc.kernel(workgroup_size=32)
def per_element_reads_buffer(X: pc.Buffer[f32]):
    m = C32.load(X, 0, 16)
    pc.store(X, 0, pc.nv.per_element(m, lambda r, c, e: e + X[r]), 16)


@pc.kernel(workgroup_size=32)
def decode_capture(A: pc.ReadBuffer[f16], O: pc.Buffer[f16], s: f16):
    l = pc.nv.tensor_layout(2, clamp="constant").block_size(1, 8).dimension(16, 16)
    MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
    m = pc.nv.load_tensor(A, l, MatA, decode=lambda p, bc, cib: f16(p[cib[1]]) * s)
    pc.nv.store_tensor(O, pc.nv.tensor_layout(2).dimension(16, 16), m)


@pc.kernel(workgroup_size=32)
def decode_vector_capture(A: pc.ReadBuffer[f16], O: pc.Buffer[f16], s: f16):
    l = pc.nv.tensor_layout(2, clamp="constant").block_size(1, 8).dimension(16, 16)
    MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
    m = pc.nv.load_tensor(A, l, MatA, decode=lambda p, bc, cib: f16(p[cib[1]]),
                          decode_vector=lambda p, bc, cib: pc.make_vector(
                              [f16(p[cib[1] + i]) * s for i in range(4)]))
    pc.nv.store_tensor(O, pc.nv.tensor_layout(2).dimension(16, 16), m)


@pytest.mark.parametrize("kernel,text,rule", [
    (combine_capture, "lambda a, b: a + b * s", "CombineFunc's parameters are two components"),
    (decode_capture, "decode=lambda", "DecodeFunc's parameters"),
    (decode_vector_capture, "[f16(p[cib[1] + i]) * s", "DecodeVectorFunc's parameters"),
    (per_element_reads_buffer, "lambda r, c, e: e + X[r]", "not memory")])
def test_captures_a_function_cannot_receive_are_compile_errors(kernel, text, rule):
    with pytest.raises(pc.CompileError, match="uses a") as e:
        kernel.compile()
    assert e.value.line == line_of(kernel, text)
    assert rule in e.value.rule and e.value.hint
    assert e.value.rule_id == ("nv.callback-captures-memory" if kernel is per_element_reads_buffer
                               else "nv.callback-parameters")


def test_float_functions_of_python_numbers_follow_the_gpu():
    """Given Python numbers, pycoop's float functions compute in Python as the GPU would (IEEE:
    NaN and infinities, no exception), rsqrt included."""
    import math
    assert pc.rsqrt(4.0) == 0.5 and pc.exp2(3) == 8.0 and pc.sqrt(2) == math.sqrt(2)
    assert math.isnan(pc.sqrt(-4.0)) and pc.log(0.0) == -math.inf and pc.exp(1000.0) == math.inf
    assert pc.floor(2.5) == 2 and pc.abs(-3) == 3



def test_a_helper_defined_in_a_kernel_returns_from_runtime_branches():
    """A plain `def` inside a kernel is rewritten like a @pycoop.func: it may `return` a
    value from inside a runtime `if` or loop."""
    u = np.arange(64, dtype=np.uint32)
    nested_returns[1](u, backend="emulator")
    want = np.arange(64, dtype=np.uint32)
    want = np.where(want > 3, want, 0) + np.where(want > 3, 3, 0)
    np.testing.assert_array_equal(u, want)


@pc.kernel(workgroup_size=64)
def nested_returns(U: pc.Buffer[u32]):
    i = pc.global_invocation_id.x

    def first_three(n):
        for k in range(u32(0), n):
            if k == u32(3):
                return k
        return u32(0)

    def above_three(n):
        if n > u32(3):
            return n
        return u32(0)
    U[i] = above_three(U[i]) + first_three(U[i])


@pc.kernel(workgroup_size=64)
def vector_components(X: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    v = pc.make_vector([i, i + 1, i + 2, i + 3])
    X[i] = v.x + v.w * u32(10) + v.y * u32(100) + v.z * u32(1000)


def test_vector_components_by_name():
    """v.x, v.y, v.z, v.w read a vector's components, as in GLSL."""
    x = np.zeros(64, np.uint32)
    vector_components[1](x, backend="emulator")
    i = np.arange(64, dtype=np.uint32)
    np.testing.assert_array_equal(x, i + (i + 3) * 10 + (i + 1) * 100 + (i + 2) * 1000)


# --------------------------------------------------------------------------- found by a probe
# of random kernels against Python twins (2026-11-28): each gave a wrong result silently

@pc.kernel(workgroup_size=8)
def loop_variable_reassigned(x: pc.Buffer[u32]):
    g = pc.global_invocation_id.x
    v = x[g]
    i = u32(7)
    for i in range(v):                  # runtime loop
        i = i * u32(10)
    j = u32(5)
    for j in range(3):                  # unrolled
        j = j + u32(100)
    k = u32(9)
    for k in (v, v + u32(1)):           # over a Python tuple
        if k > u32(3):
            k = k * u32(2)
    m = u32(1)
    for m in pc.range(v):               # with continue
        if m == u32(1):
            m = u32(50)
            continue
        m = m + u32(1)
    x[g] = i * u32(1000000) + j * u32(10000) + k * u32(100) + m


def _loop_variable_twin(v):
    i = 7
    for i in range(v):
        i = i * 10
    j = 5
    for j in range(3):
        j = j + 100
    k = 9
    for k in (v, v + 1):
        if k > 3:
            k = k * 2
    m = 1
    for m in range(v):
        if m == 1:
            m = 50
            continue
        m = m + 1
    return i * 1000000 + j * 10000 + k * 100 + m


def test_a_loop_variable_the_body_assigns_keeps_the_last_value_assigned():
    """As in Python, after the loop it holds what the body's last iteration assigned (it
    used to hold the last index), and where the loop runs zero times its value from before."""
    n = np.array([0, 1, 2, 3, 4, 5, 0, 2], np.uint32)
    check_both(loop_variable_reassigned, 1, [n], 0,
               np.array([_loop_variable_twin(int(v)) for v in n], np.uint32))


@pc.kernel(workgroup_size=4)
def helper_bare_return(x: pc.Buffer[u32]):
    g = pc.global_invocation_id.x

    def put(v):
        if v > u32(2):
            x[g] = v
            return                      # leaves put, not the kernel
        x[g] = u32(50)
    put(x[g])
    x[g] = x[g] + u32(1000)


@pc.kernel(workgroup_size=4)
def nested_container_method(x: pc.Buffer[u32]):
    g = pc.global_invocation_id.x
    M = [[x[g], u32(100)]]
    if x[g] > u32(2):
        M[0].reverse()                  # changes M on that path only
    x[g] = M[0][0]


def test_a_bare_return_in_a_branch_of_a_helper_leaves_the_helper():
    check_both(helper_bare_return, 1, [np.array([1, 2, 3, 4], np.uint32)], 0,
               np.array([1050, 1050, 1003, 1004], np.uint32))


def test_a_method_of_a_nested_container_changes_it_only_where_it_runs():
    check_both(nested_container_method, 1, [np.array([1, 2, 3, 4], np.uint32)], 0,
               np.array([1, 2, 100, 100], np.uint32))


@pc.kernel(workgroup_size=4)
def loads_in_a_loop_of_a_written_buffer(x: pc.Buffer[u32]):
    g = pc.global_invocation_id.x
    x[g] = u32(0)
    for i in pc.range(3):
        v = x[g]                        # noqa: F841 (the loop only loads)
    x[g] = x[g] + u32(3)


def test_a_loop_loading_a_buffer_the_kernel_writes_runs_on_the_emulator():
    """The emulator's fused-loop fast path (the loop's iterations as one extra axis) crashed in
    the race checks of a load of a buffer the kernel also writes, which are made per
    invocation; such loops run step by step."""
    check_both(loads_in_a_loop_of_a_written_buffer, 2, [np.zeros(8, np.uint32)], 0,
               np.full(8, 3, np.uint32))


@pc.kernel(workgroup_size=4)
def python_number_becomes_float(n: pc.ReadBuffer[u32], y: pc.Buffer[f32]):
    g = pc.global_invocation_id.x
    s = 0
    c = 0
    for i in range(n[g]):
        s = s + 0.5                     # an int before the loop, a float in it: f32
        c = c + 2                       # an int throughout: i32
    y[g] = s + f32(c)


def test_a_python_number_takes_the_type_it_takes_in_the_loop():
    n = np.array([0, 1, 2, 3], np.uint32)
    check_both(python_number_becomes_float, 1, [n, np.zeros(4, np.float32)], 1,
               np.array([0.5 * v + 2 * v for v in n], np.float32))


@pc.func
def _returns_early_with_a_branch_variable(v):
    if v > u32(2):
        return v
    else:
        y = v * u32(2)
    return y + u32(1)


@pc.func
def _returns_a_python_number_in_a_branch(v):
    if v > u32(2):
        return 7
    return v


@pc.kernel(workgroup_size=4)
def early_returns_of_helpers(x: pc.Buffer[u32], y: pc.Buffer[u32]):
    g = pc.global_invocation_id.x
    v = x[g]
    x[g] = _returns_early_with_a_branch_variable(v)
    y[g] = _returns_a_python_number_in_a_branch(v)


def test_what_follows_a_returning_branch_runs_in_the_other_branch():
    """A helper's code after `if c: return a` reads the variables of the branch that did not
    return (it was "assigned in only one branch"), and a Python number returned in one
    branch takes the other's type (it was "u32 in one branch and i32 in the other")."""
    x = np.array([1, 2, 3, 4], np.uint32)
    emu_x, vk = run_both(early_returns_of_helpers, 1, x, np.zeros(4, np.uint32))
    for got in (emu_x, vk) if vk is not None else (emu_x,):
        assert got[0].tolist() == [3, 5, 3, 4] and got[1].tolist() == [1, 2, 7, 7]


@pc.func
def _returns_a_tuple_in_a_branch(v):
    if v > u32(2):
        return v, u32(1)
    return v, u32(2)


@pc.kernel(workgroup_size=4)
def tuple_returns_of_a_helper(x: pc.Buffer[u32]):
    g = pc.global_invocation_id.x
    a, b = _returns_a_tuple_in_a_branch(x[g])
    x[g] = a * u32(10) + b


def test_a_helper_returns_a_tuple_from_a_branch():
    """It was refused as "containers of different shapes" (the guarded rest merged with a
    branch where the return value had no value yet)."""
    check_both(tuple_returns_of_a_helper, 1, [np.array([1, 2, 3, 4], np.uint32)], 0,
               np.array([12, 22, 31, 41], np.uint32))

