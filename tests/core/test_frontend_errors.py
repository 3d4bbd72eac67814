"""Python a kernel cannot mean, and mistakes in a kernel's declaration: each is a CompileError
at the user's line (the statement, the annotation, the decorator or the call) with the rule
and a hint, never an internal exception; what does work keeps working."""
from __future__ import annotations

import contextlib
import re

import numpy as np
import pytest

import pycoop as pc
from pycoop import f32, i32, u32
from pycoop.ir.core import Value

from core_helpers import emu, line_of

C32 = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]
G = 0


def at_line(e, fn, text: str) -> None:
    assert e.loc is not None and e.loc.file == __file__, e.loc
    assert e.line == line_of(fn, text), (e.loc, text)
    assert e.rule and e.hint


def shown_frames(e) -> list[tuple[str, int]]:
    """(file, line) of the frames a traceback printer shows for the error `e`."""
    tb, shown = e.__traceback__, []
    while tb is not None:
        if not tb.tb_frame.f_locals.get("__tracebackhide__"):
            shown.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    return shown


# --------------------------------------------------------------------------- statements

@pc.kernel(workgroup_size=8)
def k_try(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    try:                                       # HERE
        A[i] = A[i] + u32(1)
    except Exception:
        A[i] = u32(0)


@pc.kernel(workgroup_size=8)
def k_try_finally(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    if A[i] > u32(2):
        try:                                   # HERE
            A[i] = u32(1)
        finally:
            A[i] = u32(2)


@pc.kernel(workgroup_size=8)
def k_with(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    with contextlib.nullcontext():             # HERE
        A[i] = u32(1)


@pc.kernel(workgroup_size=8)
def k_global(A: pc.Buffer[u32]):
    global G                                   # HERE
    i = pc.global_invocation_id.x
    G = A[i]


def _nonlocal_kernel():
    total = 0

    @pc.kernel(workgroup_size=8)
    def k_nonlocal(A: pc.Buffer[u32]):
        nonlocal total                         # HERE
        i = pc.global_invocation_id.x
        total = A[i]
    return k_nonlocal


@pc.kernel(workgroup_size=8)
def k_yield(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    yield A[i]                                 # HERE


@pc.kernel(workgroup_size=8)
def k_async(A: pc.Buffer[u32]):
    async def later():                         # HERE
        pass
    A[pc.global_invocation_id.x] = u32(1)


@pc.kernel(workgroup_size=8)
async def k_async_kernel(A: pc.Buffer[u32]):   # HERE
    A[pc.global_invocation_id.x] = u32(1)


@pc.kernel(workgroup_size=8)
def k_helper_try(A: pc.Buffer[u32]):
    def helper(x):
        try:                                   # HERE
            return x + u32(1)
        except KeyError:
            return x
    A[0] = helper(A[0])


def _per_element_try(r, c, e):
    try:                                       # HERE
        return e + e
    except ValueError:
        return e


@pc.kernel(workgroup_size=32)
def k_callback_try(X: pc.Buffer[f32]):
    pc.store(X, 0, pc.nv.per_element(C32.load(X, 0, 16), _per_element_try), 16)


@pytest.mark.parametrize("kernel,what", [
    (k_try, "try"), (k_try_finally, "try"), (k_with, "with"), (k_global, "global"),
    (_nonlocal_kernel(), "nonlocal"), (k_yield, "yield"), (k_async, "async def"),
    (k_async_kernel, "async def"),
    (k_helper_try, "try"), (k_callback_try, "try")],
    ids=lambda x: x if isinstance(x, str) else x.name)
def test_unsupported_statements_are_rejected_by_name(kernel, what):
    with pytest.raises(pc.CompileError, match=f"`{what}` is not supported in a kernel") as e:
        kernel.compile()
    at_line(e.value, _per_element_try if kernel is k_callback_try else kernel, "# HERE")
    assert e.value.rule_id == "frontend.unsupported-statement"


@pc.kernel(workgroup_size=8)
def k_for_else(A: pc.Buffer[u32], n: u32):
    i = pc.global_invocation_id.x
    for j in range(n):                         # HERE
        A[i] = A[i] + u32(1)
    else:
        A[i] = u32(0)


@pc.kernel(workgroup_size=8)
def k_while_else(A: pc.Buffer[u32], n: u32):
    i = pc.global_invocation_id.x
    j = u32(0)
    while j < n:                               # HERE
        j += u32(1)
    else:
        A[i] = j


@pc.kernel(workgroup_size=8)
def k_break_in_match(A: pc.Buffer[u32], n: u32):
    i = pc.global_invocation_id.x
    for j in pc.range(n):                      # HERE
        match 1:
            case 1:
                if A[i] > j:
                    break
        A[i] = A[i] + u32(1)


@pytest.mark.parametrize("kernel,why", [
    (k_for_else, "has an `else` clause, so its bounds must be known at trace time"),
    (k_while_else, "has an `else` clause, so its condition cannot be a runtime value"),
    (k_break_in_match, "inside a `match` statement, so it cannot be a pycoop.range() loop")],
    ids=lambda x: x if isinstance(x, str) else x.name)
def test_loops_that_stay_python_loops_need_trace_time_bounds(kernel, why):
    with pytest.raises(pc.CompileError, match="this (while )?loop") as e:
        kernel.compile()
    assert why in e.value.message and e.value.rule_id == "control.break-placement"
    at_line(e.value, kernel, "# HERE")


@pc.kernel(workgroup_size=8)
def k_python_constructs(A: pc.Buffer[u32]):
    """What worked before keeps working: loops with else over trace-time ranges, match on a
    Python value, a class, lambdas, del, walrus."""
    i = pc.global_invocation_id.x
    x = A[i]
    for j in range(2):
        x = x + u32(1)
    else:
        x = x + u32(10)
    match 3:
        case 3:
            x = x * u32(2)

    class Pair:
        scale = 3
    inc = lambda v: v + u32(Pair.scale) if v > u32(20) else v      # noqa: E731
    x = inc(x)
    tmp = x
    del tmp
    if (y := x + u32(1)) > u32(30):
        x = y
    A[i] = x


def test_supported_python_constructs_still_work():
    A = np.arange(8, dtype=np.uint32) * 5
    want = []
    for a in A.tolist():
        x = (a + 12) * 2
        x = x + 3 if x > 20 else x
        want.append(x + 1 if x + 1 > 30 else x)
    emu(k_python_constructs, 1, A)
    np.testing.assert_array_equal(A, want)


@pc.kernel(workgroup_size=8)
def k_del_in_branch(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    y = A[i]
    if y > u32(3):
        del y
    A[i] = y + u32(1)                          # HERE


def test_a_deleted_variable_has_no_value_after_a_runtime_if():
    """`del` in a runtime branch leaves the variable without a value on that path (before, an
    UnboundLocalError escaped from the rewritten branch)."""
    with pytest.raises(pc.CompileError, match="no value.*only one branch") as e:
        k_del_in_branch.compile()
    assert e.value.line == line_of(k_del_in_branch, "# HERE")


# --------------------------------------------------------------------------- declarations

def _decl(case: str):
    if case == "workgroup_size=0":
        @pc.kernel(workgroup_size=0)
        def k(A: pc.Buffer[u32]):
            pass
    elif case == "workgroup_size=(8, 0)":
        @pc.kernel(workgroup_size=(8, 0))
        def k(A: pc.Buffer[u32]):
            pass
    elif case == "subgroup_size=24":
        @pc.kernel(workgroup_size=32, subgroup_size=24)
        def k(A: pc.Buffer[u32]):
            pass
    elif case == "coopmat parameter":
        @pc.kernel(workgroup_size=32)
        def k(A: pc.Buffer[f32],
              M: C32):
            pass
    elif case == "Buffer[coopmat]":
        @pc.kernel(workgroup_size=32)
        def k(A: pc.Buffer[C32]):
            pass
    elif case == "bool parameter":
        @pc.kernel(workgroup_size=32)
        def k(A: pc.Buffer[u32], flag: pc.bool_):
            pass
    elif case == "no annotation":
        @pc.kernel(workgroup_size=32)
        def k(A: pc.Buffer[u32], n):
            pass
    elif case == "unknown name":
        @pc.kernel(workgroup_size=32)
        def k(A: pc.Buffer[u32], n: u64):      # noqa: F821 (not imported)
            pass


DECLARATIONS = {
    "workgroup_size=0": ("workgroup_size must be 1 to 3 positive ints", "@pc.kernel(workgroup_size=0)",
                         "LocalSize"),
    "workgroup_size=(8, 0)": ("workgroup_size must be", "@pc.kernel(workgroup_size=(8, 0))", "LocalSize"),
    "subgroup_size=24": ("subgroup_size must be a power of two", "subgroup_size=24", "power of two"),
    "coopmat parameter": ("parameter 'M' of kernel k is a cooperative matrix", "M: C32",
                          "kernel parameters are annotated"),
    "Buffer[coopmat]": ("Buffer.*takes a pycoop scalar", "A: pc.Buffer[C32]", "kernel buffers hold"),
    "bool parameter": ("parameter 'flag' of kernel k is a bool", "flag: pc.bool_", "OpTypeBool"),
    "no annotation": ("parameter 'n' of kernel k has no annotation", "pc.Buffer[u32], n)",
                      "kernel parameters are annotated"),
    "unknown name": ("cannot evaluate the annotation 'u64'", "n: u64", "annotations are evaluated"),
}


@pytest.mark.parametrize("case", DECLARATIONS)
def test_declaration_errors_name_the_users_line(case):
    message, text, rule = DECLARATIONS[case]
    with pytest.raises(pc.CompileError, match=message) as e:
        _decl(case)
    lines, start = __import__("inspect").getsourcelines(_decl)
    want = [start + i for i, ln in enumerate(lines) if text in ln]
    assert e.value.loc.file == __file__ and e.value.line in want, (e.value.loc, text)
    assert rule in e.value.rule and e.value.hint
    ids = {"workgroup_size": "workgroup-size", "subgroup_size": "subgroup-size",
           "Buffer[coopmat]": "buffer-element", "unknown name": "annotation-eval"}
    assert e.value.rule_id == "frontend." + next((v for k, v in ids.items() if k in case),
                                                 "parameter-annotation")


@pc.kernel(workgroup_size=8)
def k_returns(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    return A[i]                                # HERE


def test_a_kernel_returning_a_value_is_reported_at_the_return():
    with pytest.raises(pc.CompileError, match="returns nothing, but this returns a u32 value") as e:
        k_returns.compile()
    at_line(e.value, k_returns, "# HERE")
    assert e.value.rule_id == "frontend.kernel-returns-void"


@pc.kernel(workgroup_size=8)
def k_print_value(A: pc.Buffer[u32], n: u32):
    i = pc.global_invocation_id.x
    print("i is", i)                           # HERE
    A[i] = n


@pc.kernel(workgroup_size=8)
def k_print_fstring(A: pc.Buffer[u32], n: u32):
    i = pc.global_invocation_id.x
    print(f"n + 1 = {n + 1}")                  # HERE
    A[i] = n


@pc.kernel(workgroup_size=8)
def k_print_in_a_list(A: pc.Buffer[u32], n: u32):
    i = pc.global_invocation_id.x
    pair = [n, i]
    if i < n:
        print(*pair, sep=", ")                 # HERE
    A[i] = n


@pytest.mark.parametrize("kernel,what", [(k_print_value, "u32"), (k_print_fstring, "u32"),
                                         (k_print_in_a_list, "u32")],
                         ids=["argument", "f-string", "starred list"])
def test_print_of_a_runtime_value_is_reported_at_the_print(kernel, what):
    """print() runs once, while tracing: a runtime value would print as its IR name."""
    with pytest.raises(pc.CompileError, match=rf"print\(\) of a runtime value \({what}\)") as e:
        kernel.compile()
    at_line(e.value, kernel, "# HERE")
    assert e.value.rule_id == "frontend.print-traced"


@pc.kernel(workgroup_size=8)
def k_print_trace_time(A: pc.Buffer[u32], n: u32, tile: pc.Const[int] = 4):
    i = pc.global_invocation_id.x
    print("tile", tile, f"twice {tile * 2}", *[tile, 5], {"k": tile}, sep="|")
    A[i] = n + tile


def test_print_of_trace_time_values_prints_while_tracing(capsys):
    A = np.zeros(8, np.uint32)
    emu(k_print_trace_time, (1,), A, 3, tile=6)
    assert capsys.readouterr().out == "tile|6|twice 12|6|5|{'k': 6}\n"
    assert (A == 9).all()


def test_another_function_named_print_is_left_alone():
    seen = []
    print = seen.append                        # noqa: A001 (the kernel's own print)

    @pc.kernel(workgroup_size=8)
    def k_logs(A: pc.Buffer[u32], n: u32):
        i = pc.global_invocation_id.x
        print(i)
        A[i] = n
    k_logs.compile()
    assert len(seen) == 1 and isinstance(seen[0], Value)


# --------------------------------------------------------------------------- recursion, dicts

@pc.func
def countdown(x):
    if x > u32(3):
        return countdown(x - u32(1))           # HERE
    return x


@pc.kernel(workgroup_size=8)
def k_recursion(A: pc.Buffer[u32]):
    A[0] = countdown(A[0])


@pc.func
def tree_sum(xs):
    if len(xs) == 1:
        return xs[0]
    h = len(xs) // 2
    return tree_sum(xs[:h]) + tree_sum(xs[h:])


@pc.kernel(workgroup_size=8)
def k_tree(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    A[i] = tree_sum([A[i] * u32(q + 1) for q in range(6)])


def test_recursion_on_a_runtime_condition_is_a_compile_error():
    with pytest.raises(pc.CompileError, match="calls itself more than 64 levels deep") as e:
        k_recursion.compile()
    at_line(e.value, countdown, "# HERE")
    assert "inlined" in e.value.rule
    assert e.value.rule_id == "frontend.recursion-depth"


def test_recursion_ending_on_trace_time_values_works():
    A = np.arange(8, dtype=np.uint32)
    emu(k_tree, 1, A)
    np.testing.assert_array_equal(A, np.arange(8) * 21)


@pc.kernel(workgroup_size=8)
def k_dict_runtime_key(A: pc.Buffer[u32]):
    table = {0: u32(5), 1: u32(7)}
    i = pc.global_invocation_id.x
    A[i] = table[A[i]]                         # HERE


def test_a_dict_indexed_by_a_runtime_value():
    with pytest.raises(pc.CompileError, match="indexed with a runtime value") as e:
        k_dict_runtime_key.compile()
    assert e.value.loc.file == __file__ and e.value.line == line_of(k_dict_runtime_key, "# HERE")
    assert "trace time" in e.value.rule and "pycoop.select" in e.value.hint
    assert e.value.rule_id == "frontend.runtime-container-index"


@pc.kernel(workgroup_size=8)
def k_float_range(A: pc.Buffer[f32]):
    for i in range(2.5):                       # FLOAT RANGE
        A[0] = f32(1.0)


@pc.kernel(workgroup_size=8)
def k_zero_step(A: pc.Buffer[f32]):
    for i in range(0, 4, 0):                   # ZERO STEP
        A[0] = f32(1.0)


@pytest.mark.parametrize("kernel,marker,rule_id", [
    (k_float_range, "# FLOAT RANGE", "control.range-integer-bounds"),
    (k_zero_step, "# ZERO STEP", "control.range-step-zero")])
def test_python_ranges_python_refuses_are_compile_errors(kernel, marker, rule_id):
    with pytest.raises(pc.CompileError) as e:
        kernel.compile()
    assert e.value.rule_id == rule_id and e.value.line == line_of(kernel, marker)


MA16 = pc.coopmat[pc.f16, pc.Subgroup, 16, 16, pc.UseA]


@pc.kernel(workgroup_size=8)
def k_float_runtime_range(A: pc.Buffer[f32], n: u32):
    for i in range(0.0, n):                    # HERE
        A[i] = f32(1.0)


@pc.kernel(workgroup_size=8)
def k_float_index(A: pc.Buffer[f32]):
    A[2.0] = f32(1.0)                          # HERE


@pc.kernel(workgroup_size=8)
def k_float_atomic_index(A: pc.Buffer[u32]):
    pc.atomic.add(A, 0.0, u32(1))              # HERE


@pc.kernel(workgroup_size=32)
def k_float_stride(A: pc.Buffer[pc.f16]):
    pc.store(A, 0, MA16.load(A, 0, 16.0), 16)  # HERE


@pytest.mark.parametrize("kernel,message,rule_id", [
    (k_float_runtime_range, "range() needs integer bounds, got 0.0", "control.range-integer-bounds"),
    (k_float_index, "an index must be an integer, not the float 2.0", "core.index-integer"),
    (k_float_atomic_index, "an index must be an integer, not the float 0.0", "core.index-integer"),
    (k_float_stride, "stride must be an integer scalar, not the float 16.0", "khr.stride-type"),
])
def test_floats_where_python_takes_only_ints_are_compile_errors(kernel, message, rule_id):
    """Integral floats were accepted as indexes, range bounds and strides; Python raises a
    TypeError for each."""
    with pytest.raises(pc.CompileError, match=re.escape(message)) as e:
        kernel.compile()
    assert e.value.rule_id == rule_id and e.value.line == line_of(kernel, "# HERE")
    assert e.value.loc.file == __file__


def _helper_that_divides(x):
    return x / 0                               # HELPER


@pc.kernel(workgroup_size=8)
def k_python_attribute(A: pc.Buffer[f32]):
    m = C32.fill(0.0)
    C32.store(A, 0, m, 16)                     # ATTRIBUTE


@pc.kernel(workgroup_size=8)
def k_python_call(A: pc.Buffer[f32]):
    m = C32.load(A, 0)                         # CALL
    pc.store(A, 0, m, 16)


@pc.kernel(workgroup_size=8)
def k_python_assert(A: pc.Buffer[f32], n: pc.Const = 3):
    assert n % 2 == 0, "n must be even"        # ASSERT
    A[0] = f32(n)


@pc.kernel(workgroup_size=8)
def k_python_helper(A: pc.Buffer[f32]):
    A[0] = f32(_helper_that_divides(4))


@pc.func
def _two_args(a, b):
    return a + b


@pc.kernel(workgroup_size=8)
def k_python_helper_arity(A: pc.Buffer[f32]):
    A[0] = _two_args(A[1])                     # ARITY


@pc.kernel(workgroup_size=8)
def k_python_api(A: pc.Buffer[f32]):
    V9 = pc.vec(f32, 9)                        # API
    A[0] = f32(1.0)


@pytest.mark.parametrize("kernel,marker,what", [
    (k_python_attribute, "# ATTRIBUTE", "AttributeError: 'CoopMatType' object has no attribute "
                                        "'store'"),
    (k_python_call, "# CALL", "TypeError: load() missing 1 required positional argument: "
                              "'stride'"),
    (k_python_assert, "# ASSERT", "AssertionError: n must be even"),
    (k_python_helper, "# HELPER", "ZeroDivisionError: division by zero"),
    (k_python_api, "# API", "TypeError: vector size must be 2, 3, 4, 8 or 16, got 9"),
    (k_python_helper_arity, "# ARITY",
     "TypeError: _two_args() missing 1 required positional argument: 'b'"),
])
def test_python_exceptions_of_kernel_code_are_compile_errors_at_their_line(kernel, marker, what):
    """A Python exception that the kernel's code raises while traced (a misspelt method, a
    call missing an argument, an assert, a helper's error, a pycoop function refusing its
    arguments) is a CompileError at the line that raised it (or called the pycoop function),
    with Python's message and no frame of pycoop's."""
    with pytest.raises(pc.CompileError) as e:
        kernel.compile()
    assert what in e.value.message and e.value.rule_id == "frontend.python-exception"
    fn = _helper_that_divides if marker == "# HELPER" else kernel
    assert e.value.loc.file == __file__ and e.value.line == line_of(fn, marker)
    shown = shown_frames(e.value)
    assert not any(pc.errors.is_internal(f) for f, _ in shown) and e.value.__cause__ is None


@pc.func
def _grow(xs, v):
    xs.append(v)                               # HERE


@pc.kernel(workgroup_size=8)
def k_helper_grows_list(A: pc.Buffer[u32], n: u32):
    xs = [A[0]]
    for j in range(n):
        _grow(xs, j)
    A[0] = xs[0]


def test_a_list_grown_by_a_helper_in_a_runtime_loop_is_reported_at_the_append():
    with pytest.raises(pc.CompileError, match="changes its container shape") as e:
        k_helper_grows_list.compile()
    assert e.value.line == line_of(_grow, "# HERE")
    assert f"line {line_of(k_helper_grows_list, 'for j in range(n)')}" in e.value.message
    assert e.value.rule_id == "control.loop-container-shape"


@pc.kernel(workgroup_size=8)
def k_branch_grows_list(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    xs = [A[i]]
    if A[i] > u32(3):
        xs.pop()                               # HERE
    else:
        xs[0] = u32(1)
    A[i] = u32(len(xs))


def test_a_list_shortened_in_one_branch_of_a_runtime_if_is_reported_at_the_pop():
    with pytest.raises(pc.CompileError, match="containers of different shapes") as e:
        k_branch_grows_list.compile()
    at_line(e.value, k_branch_grows_list, "# HERE")
    assert f"line {line_of(k_branch_grows_list, 'if A[i] > u32(3)')}" in e.value.message
    assert e.value.rule_id == "control.if-container-shape"


# --------------------------------------------------------------------------- code the rewrite
# of loops and branches cannot keep the meaning of (each once gave a wrong result silently)

@pc.kernel(workgroup_size=4)
def k_stale_closure(x: pc.Buffer[u32]):
    g = pc.global_invocation_id.x
    s = u32(1)

    def get():
        return s
    t = u32(0)
    for j in range(2):
        s = s + x[g]
        t = t + get()                          # HERE
    x[g] = t


@pc.kernel(workgroup_size=4)
def k_aliased_list(x: pc.Buffer[u32]):
    g = pc.global_invocation_id.x
    L = [u32(0), u32(0)]
    A = L
    for i in range(x[g]):                      # HERE
        A[0] = A[0] + u32(1)
        L[1] = L[1] + u32(1)
    x[g] = L[0] * u32(10) + L[1]


@pc.kernel(workgroup_size=4)
def k_walrus_in_iterable(x: pc.Buffer[u32]):
    g = pc.global_invocation_id.x
    t = u32(0)
    for e in (x[g], (t := x[g] + u32(1))):     # HERE
        if e > u32(100):
            break
    x[g] = t


@pc.kernel(workgroup_size=4)
def k_walrus_in_comprehension(x: pc.Buffer[u32]):
    g = pc.global_invocation_id.x
    t = u32(0)
    if x[g] > u32(2):
        ys = [(t := x[g] + u32(i)) for i in range(2)]   # HERE # noqa: F841
    x[g] = t


@pytest.mark.parametrize("kernel,message,rule", [
    (k_stale_closure, r"get\(\) reads s, which this loop assigns", "frontend.stale-closure"),
    (k_aliased_list, "`A` and `L` hold the same list across a loop or `if` on a runtime value",
     "control.aliased-container"),
    (k_walrus_in_iterable, "`t := ...` inside .* the iterable of a `for` with `break`",
     "frontend.walrus-lazy-operand"),
    (k_walrus_in_comprehension, "`t := ...` inside a comprehension in a loop or `if`",
     "frontend.walrus-comprehension"),
])
def test_what_the_rewrite_cannot_keep_is_refused(kernel, message, rule):
    with pytest.raises(pc.CompileError, match=message) as info:
        emu(kernel, 1, np.array([1, 2, 3, 4], np.uint32))
    at_line(info.value, kernel, "# HERE")
    assert info.value.rule_id == rule


@pc.kernel(workgroup_size=4)
def k_closures_that_work(x: pc.Buffer[u32]):
    g = pc.global_invocation_id.x
    s = u32(1)
    t = u32(0)
    for j in range(x[g]):
        s = s + x[g]

        def get():                             # defined inside the loop: sees its s
            return s
        t = t + get()
    c = u32(3)

    def scaled(v):                             # reads c, which no loop assigns
        return v * c
    for j in range(2):
        t = t + scaled(s)
    ys = [(w := t + u32(i)) for i in range(2)]     # a comprehension outside loops and ifs
    x[g] = w + ys[0]


def test_closures_and_comprehensions_that_keep_their_meaning_still_work():
    x = np.array([1, 2, 3, 4], np.uint32)
    emu(k_closures_that_work, 1, x)

    def twin(v):
        s, t = 1, 0
        for j in range(v):
            s = s + v
            t = t + s
        for j in range(2):
            t = t + s * 3
        return (t + 1) + t
    assert x.tolist() == [twin(v) for v in (1, 2, 3, 4)]


@pc.kernel(workgroup_size=4)
def k_range_stop_out_of_type(x: pc.Buffer[u32]):
    g = pc.global_invocation_id.x
    s = u32(0)
    for i in range(x[g] - 1, -1, -1):          # HERE
        s = s + i
        s = s * u32(3)
    x[g] = s


def test_a_range_bound_the_loop_type_cannot_hold_is_reported_at_the_loop():
    """A stop of -1 with u32 bounds: reported at the `for`, not at the body's last line (in
    the message and in the traceback's last frame), with the ways to write the loop."""
    with pytest.raises(pc.CompileError, match="constant -1 does not fit in u32") as info:
        emu(k_range_stop_out_of_type, 1, np.array([1, 2, 3, 4], np.uint32))
    at_line(info.value, k_range_stop_out_of_type, "# HERE")
    assert info.value.rule_id == "core.constant-range"
    assert "range(n, 0, -1)" in info.value.hint and "i32" in info.value.hint
    assert shown_frames(info.value)[-1] == (__file__, info.value.line)


@pc.kernel(workgroup_size=8)
def k_is_true(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    b = i > u32(3)
    if b is True:                              # HERE
        A[i] = u32(1)


@pc.kernel(workgroup_size=8)
def k_is_not_in_a_chain(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    if u32(0) < i is not A[0]:                 # HERE
        A[i] = u32(1)


@pytest.mark.parametrize("kernel,op,hint", [(k_is_true, "is", "=="),
                                            (k_is_not_in_a_chain, "is not", "!=")])
def test_identity_of_a_runtime_value_is_a_compile_error(kernel, op, hint):
    """`b is True` of a runtime bool was Python identity, False in every invocation."""
    with pytest.raises(pc.CompileError, match=f"`{op}` with a runtime value") as info:
        kernel.compile()
    at_line(info.value, kernel, "# HERE")
    assert info.value.rule_id == "frontend.runtime-identity" and hint in info.value.hint


@pc.func
def _plus_optional(x, bias=None):
    if bias is None:
        return x
    return x + bias


@pc.kernel(workgroup_size=8)
def k_is_none(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    scale = None
    flag = True
    A[i] = _plus_optional(i) * u32(10) + _plus_optional(i, i) + (1 if flag is not False else 0)
    if scale is not None:
        A[i] = A[i] * scale


def test_identity_of_trace_time_values_and_none_still_works():
    a = np.zeros(8, np.uint32)
    emu(k_is_none, 1, a)
    assert a.tolist() == [10 * i + 2 * i + 1 for i in range(8)]


# --------------------------------------------------------------------------- messages that
# named the wrong thing, and static lengths that were refused

@pc.kernel(workgroup_size=8)
def k_ternary_of_two_types(A: pc.Buffer[f32]):
    i = pc.global_invocation_id.x
    v = f32(1.0) if i > u32(3) else i          # HERE
    A[i] = v


@pc.kernel(workgroup_size=8)
def k_cast_to_a_string(A: pc.Buffer[f32]):
    i = pc.global_invocation_id.x
    A[i] = pc.cast(i, "f32")                   # HERE


@pc.kernel(workgroup_size=8)
def k_vector_times_scalar(A: pc.Buffer[pc.vec(f32, 4)]):
    i = pc.global_invocation_id.x
    A[i] = A[i] * 2.0                          # HERE


@pc.kernel(workgroup_size=8)
def k_iterate_shared(A: pc.Buffer[f32]):
    s = pc.shared(f32, 8)
    for x in s:                                # HERE
        A[0] = x


@pytest.mark.parametrize("kernel,message,hint,rule_id", [
    (k_ternary_of_two_types, "the two sides of `x if c else y` on a runtime condition have "
                             "different types: f32 and u32", "f32(y)", "core.select-types"),
    (k_cast_to_a_string, "cannot cast u32 to 'f32'", "pycoop.f32", "core.cast-types"),
    (k_vector_times_scalar, "operands of `*` have different types: vec4<f32> and f32",
     "pycoop.make_vector([s] * 4)", "core.operand-types"),
    (k_iterate_shared, "cannot iterate over a shared array", "range(len(s))",
     "frontend.runtime-iteration"),
])
def test_messages_name_what_is_wrong(kernel, message, hint, rule_id):
    """A ternary said "a variable is used where it has no value" (there is none), a string
    type "cannot cast u32 to f32", a vector times a scalar gave no way to write it."""
    with pytest.raises(pc.CompileError, match=re.escape(message)) as info:
        kernel.compile()
    at_line(info.value, kernel, "# HERE")
    assert info.value.rule_id == rule_id and hint in info.value.hint


@pc.kernel(workgroup_size=4)
def k_static_lengths(A: pc.Buffer[pc.vec(u32, 4)], B: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    v = A[i]
    s = pc.shared(u32, 8)
    x, y, z, w = v
    total = u32(0)
    for c in v:
        total = total + c
    pair = pc.make_array([x, w])
    first, last = pair
    B[i * 4] = total
    B[i * 4 + 1] = v[-1] * u32(100) + v[-4]
    B[i * 4 + 2] = u32(len(v) * 10 + len(s) + len(pair) * 100)
    B[i * 4 + 3] = pair[-1] - first + last - y - z


def test_vectors_and_arrays_have_their_static_lengths():
    """len() of a vector, array or shared array is its length; vectors and arrays unpack,
    iterate and index from the end (v[-1]) as Python sequences do."""
    A = np.arange(16, dtype=np.uint32).reshape(4, 4)
    B = np.zeros(16, np.uint32)
    emu(k_static_lengths, 1, A, B)
    want = []
    for x, y, z, w in A.tolist():
        want += [x + y + z + w, w * 100 + x, 4 * 10 + 8 + 2 * 100, w - x + w - y - z]
    assert B.tolist() == [v % 2 ** 32 for v in want]


# --------------------------------------------------------------------------- undefined behaviour
# that the traced operands prove (what the emulator would report in every invocation)

@pc.kernel(workgroup_size=32)
def k_shared_index_past_the_end(A: pc.Buffer[u32]):
    s = pc.shared(u32, 8)
    i = pc.global_invocation_id.x
    s[8] = i                                   # HERE


@pc.kernel(workgroup_size=32)
def k_shared_atomic_past_the_end(A: pc.Buffer[u32]):
    s = pc.shared(u32, 8)
    A[0] = pc.atomic.add(s, 4 * 2 + 1, u32(1))  # HERE


@pc.kernel(workgroup_size=32)
def k_shift_by_the_width(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    A[i] = i << 32                             # HERE


@pc.kernel(workgroup_size=32)
def k_negative_shift(A: pc.Buffer[i32]):
    i = i32(pc.global_invocation_id.x)
    A[i] = i >> -1                             # HERE


@pc.kernel(workgroup_size=32)
def k_divide_by_zero(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    A[i] = A[i] // (i * 0)                     # HERE


@pc.kernel(workgroup_size=32)
def k_modulo_zero(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    A[i] = A[i] % 0                            # HERE


@pc.kernel(workgroup_size=32)
def k_int_min_by_minus_one(A: pc.Buffer[i32]):
    i = pc.global_invocation_id.x
    A[i] = i32(-2 ** 31) // -1                 # HERE


@pc.kernel(workgroup_size=32)
def k_vector_shift_by_the_width(A: pc.Buffer[pc.vec(u32, 2)]):
    i = pc.global_invocation_id.x
    A[i] = A[i] << pc.make_vector([u32(1), u32(32)])          # HERE


@pc.kernel(workgroup_size=32)
def k_matrix_divide_by_zero(A: pc.Buffer[i32]):
    M = pc.coopmat[i32, pc.Subgroup, 16, 16, pc.Accumulator]
    pc.store(A, 0, M.load(A, 0, 16) // M.fill(0), 16)        # HERE


@pc.kernel(workgroup_size=32, subgroup_size=32)
def k_broadcast_past_the_subgroup(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    A[i] = pc.subgroup.broadcast(i, 40)        # HERE


@pc.kernel(workgroup_size=32, subgroup_size=16)
def k_shuffle_past_the_subgroup(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    A[i] = pc.subgroup.shuffle(i, 16)          # HERE


@pytest.mark.parametrize("kernel,message", [
    (k_shared_index_past_the_end, "index 8 is outside the shared array of 8 elements"),
    (k_shared_atomic_past_the_end, "index 9 is outside the shared array of 8 elements"),
    (k_shift_by_the_width, "`<< 32` shifts a 32-bit integer by its width or more"),
    (k_negative_shift, "`>> -1` shifts a 32-bit integer by a negative amount"),
    (k_divide_by_zero, "`//` divides by zero"),
    (k_modulo_zero, "`%` divides by zero"),
    (k_int_min_by_minus_one, "`//` divides -2147483648, the least i32, by -1"),
    (k_vector_shift_by_the_width, "`<< 32` shifts a 32-bit integer by its width or more (component 1)"),
    (k_matrix_divide_by_zero, "`//` divides by zero"),
    (k_broadcast_past_the_subgroup, "subgroup.broadcast of lane 40 in subgroups of 32"),
    (k_shuffle_past_the_subgroup, "subgroup.shuffle of lane 16 in subgroups of 16"),
])
def test_undefined_behaviour_the_operands_prove_is_a_compile_error(kernel, message):
    """A constant (or IR-fixed, `i * 0`) operand that makes an op undefined in every
    invocation is refused while tracing, so compile() exports no such module; the emulator
    reports the same rule for runtime operands."""
    with pytest.raises(pc.CompileError, match=re.escape(message)) as info:
        kernel.compile()
    at_line(info.value, kernel, "# HERE")
    assert info.value.rule_id == "emulator.undefined-behaviour" and "undefined" in info.value.rule


@pc.kernel(workgroup_size=32)
def k_runtime_operands_left_to_the_emulator(A: pc.Buffer[u32], n: u32):
    s = pc.shared(u32, 32)
    i = pc.global_invocation_id.x
    s[i] = i
    pc.barrier()
    A[i] = (s[31] << n) + A[i] // n + pc.subgroup.broadcast(i, n)


def test_runtime_operands_of_those_ops_are_left_to_the_emulator():
    A = np.arange(32, dtype=np.uint32)
    emu(k_runtime_operands_left_to_the_emulator, 1, A, 1)
    assert A.tolist() == [31 * 2 + v + 1 for v in range(32)]
    with pytest.raises(pc.EmulatorError) as info:
        emu(k_runtime_operands_left_to_the_emulator, 1, A, 0)
    assert info.value.rule_id == "emulator.undefined-behaviour"


@pc.kernel(workgroup_size=8)
def k_negative_mask(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    A[i] = i & ~3                              # HERE


@pc.kernel(workgroup_size=8)
def k_negative_addend(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    A[i] = i + (-1)                            # HERE


@pc.kernel(workgroup_size=8)
def k_negative_index(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    A[-1] = i                                  # HERE


@pc.kernel(workgroup_size=8)
def k_negative_comparison(A: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    if i > -1:                                 # HERE
        A[i] = i


@pc.kernel(workgroup_size=8)
def k_negative_atomic_add(A: pc.Buffer[u32]):
    pc.atomic.add(A, 0, -1)                    # HERE


@pytest.mark.parametrize("kernel,message,hint", [
    (k_negative_mask, "constant -4 does not fit in u32", "~u32(3)"),
    (k_negative_addend, "constant -1 does not fit in u32", "subtract instead"),
    (k_negative_index, "constant -1 does not fit in u32", "do not count from the end"),
    (k_negative_comparison, "constant -1 does not fit in u32", "never negative"),
    (k_negative_atomic_add, "constant -1 does not fit in u32", "pycoop.atomic.sub"),
])
def test_a_negative_python_int_meeting_an_unsigned_value_names_the_fix(kernel, message, hint):
    with pytest.raises(pc.CompileError, match=message) as info:
        kernel.compile()
    at_line(info.value, kernel, "# HERE")
    assert info.value.rule_id == "core.constant-range" and hint in info.value.hint


@pc.kernel(workgroup_size=8)
def k_callee(A: pc.Buffer[f32], n: u32):
    A[0] = f32(1.0)


@pc.kernel(workgroup_size=8)
def k_calls_a_kernel(A: pc.Buffer[f32], n: u32):
    k_callee(A, n)                             # CALLS


@pc.kernel(workgroup_size=8)
def k_launches_a_kernel(A: pc.Buffer[f32], n: u32):
    k_callee[1](A, n)                          # LAUNCHES


@pytest.mark.parametrize("kernel,marker", [(k_calls_a_kernel, "# CALLS"),
                                           (k_launches_a_kernel, "# LAUNCHES")])
def test_a_kernel_called_inside_a_kernel_is_a_compile_error(kernel, marker):
    """Kernels are entry points: calling or launching one from kernel code is refused at the
    call, pointing at @pycoop.func (it used to say "launch a kernel with k[grid](...)" or
    "'A' must be an array, got Value")."""
    with pytest.raises(pc.CompileError, match="kernel k_callee is called inside a kernel") as e:
        kernel.compile()
    assert e.value.rule_id == "frontend.kernel-in-kernel" and "@pycoop.func" in e.value.hint
    assert e.value.line == line_of(kernel, marker)


@pytest.mark.parametrize("make", [lambda: pc.coopmat[f32, pc.Subgroup, 0, 16, pc.Accumulator],
                                  lambda: pc.Buffer[str]], ids=["coopmat", "Buffer"])
def test_type_factory_errors_outside_a_kernel_show_no_pycoop_frames(make):
    """`pc.coopmat[...]` and `pc.Buffer[...]` written at module level refuse a wrong type at
    the user's line, with no frame of pycoop's in the traceback."""
    with pytest.raises(pc.CompileError) as e:
        make()
    assert e.value.loc.file == __file__
    shown = shown_frames(e.value)
    assert shown and not any(pc.errors.is_internal(f) for f, _ in shown)


# --------------------------------------------------------------------------- Python ints merged

@pc.kernel(workgroup_size=8)
def k_merged_ints(out: pc.Buffer[u32]):
    i = pc.local_invocation_index()
    v = 3
    if i > 3:                                   # MERGE
        v = 7
    out[i] = v + i                              # USE


@pc.kernel(workgroup_size=8)
def k_counted_ints(out: pc.Buffer[u32], n: u32):
    i = pc.local_invocation_index()
    c = 0
    for j in range(n):                          # LOOP
        c += 1
        out[i] = c                              # USE


@pc.kernel(workgroup_size=8)
def k_counted_after(out: pc.Buffer[u32], n: u32):
    c = 0
    for j in range(n):                          # LOOP
        c = c + 2
    out[pc.local_invocation_index()] = c        # USE


@pytest.mark.parametrize("kernel,origin,rule", [
    (k_merged_ints, "Python ints merged by the runtime `if` at line {MERGE}", "core.operand-types"),
    (k_counted_ints, "a Python int carried through the loop at line {LOOP}", "core.store-type"),
    (k_counted_after, "a Python int carried through the loop at line {LOOP}", "core.store-type"),
])
def test_a_type_error_names_where_python_ints_became_i32(kernel, origin, rule):
    """The user wrote no i32: Python ints merged by a runtime `if` or carried through a
    runtime loop take it (the documented default), and the error says so (and how to choose
    the type), also after arithmetic with more Python ints."""
    with pytest.raises(pc.CompileError) as e:
        kernel.compile()
    at_line(e.value, kernel, "# USE")
    assert e.value.rule_id == rule
    marks = {m: line_of(kernel, f"# {m}") for m in ("MERGE", "LOOP") if m in origin}
    assert f"it is i32 because it holds {origin.format(**marks)}" in e.value.hint
    assert "e.g. u32(0)" in e.value.hint


@pc.kernel(workgroup_size=8)
def k_typed_count(out: pc.Buffer[u32], n: u32):
    c = u32(0)
    for j in range(n):
        c += 1
    out[pc.local_invocation_index()] = c


def test_the_hint_fix_runs():
    out = np.zeros(8, np.uint32)
    emu(k_typed_count, 1, out, 5)
    np.testing.assert_array_equal(out, 5)
