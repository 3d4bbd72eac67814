"""Rules that no other test breaks, each broken by one kernel and reported at the user's line
with its rule id (docs/rules.md): constants, arithmetic, comparisons, selects, casts, memory,
composites, cooperative-matrix operands, runtime control flow, block pointers, kernels that
cannot be traced, and what the emulator reports about built-ins and partial subgroups."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import pycoop as pc
from pycoop import f16, f32, i32, u32
from pycoop.errors import CompileError

from core_helpers import emu

MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]
AccW = pc.coopmat[f32, pc.Workgroup, 16, 16, pc.Accumulator]


def marked_line(fn, marker: str = "# HERE") -> int:
    src, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(src) if marker in line)


def file_line(marker: str) -> int:
    """The line of this file that ends with `marker` (for a rule broken in a helper)."""
    lines = open(__file__).read().splitlines()
    return 1 + next(i for i, line in enumerate(lines) if line.endswith(marker))


def compile_error(body, marker: str | None = None) -> CompileError:
    with pytest.raises(CompileError) as e:
        pc.kernel(workgroup_size=32)(body).compile()
    assert e.value.loc is not None and e.value.loc.file == __file__, str(e.value)
    line = marked_line(body) if marker is None else file_line(marker)
    assert e.value.loc.line == line, str(e.value)
    assert e.value.rule, str(e.value)
    return e.value


# --------------------------------------------------------------------------- kernels, one per rule

def k_bool_constant(A: pc.Buffer[u32]):
    b = A[0] == u32(1)
    A[1] = pc.select(b == 2, u32(1), u32(0))  # HERE


def k_integer_constant(A: pc.Buffer[u32]):
    A[0] = A[1] + 1.5  # HERE


def k_constant_range(A: pc.Buffer[u32]):
    A[0] = A[1] + 5_000_000_000  # HERE


def k_bool_arithmetic(A: pc.Buffer[u32]):
    b = A[0] == u32(1)
    A[1] = pc.select(b + b, u32(1), u32(0))  # HERE


def k_bool_negation(A: pc.Buffer[u32]):
    b = A[0] == u32(1)
    A[1] = pc.select(-b, u32(1), u32(0))  # HERE


def k_arithmetic_type(A: pc.Buffer[f32]):
    A[0] = A[1] & A[2]  # HERE


def k_traceable_value(A: pc.Buffer[u32]):
    A[0] = A[1] + "one"  # HERE


def k_traceable_complex(A: pc.Buffer[f32]):
    A[0] = A[1] + 1j  # HERE


def k_traceable_fma_argument(A: pc.Buffer[f32]):
    A[0] = pc.fma(None, 2.0, 3.0)  # HERE


def k_float_literal_beyond_every_float(A: pc.Buffer[f32]):
    A[0] = A[1] + 10**400  # HERE


def k_traceable_function_argument(A: pc.Buffer[u32]):
    A[0] = pc.abs("one")  # HERE


def k_integer_true_division(A: pc.Buffer[u32]):
    A[0] = A[1] / A[2]  # HERE


def k_glsl_float_type(A: pc.Buffer[f32]):
    A[0] = f32(pc.exp(pc.bf16(A[1])))  # HERE


def k_compare_types(A: pc.Buffer[u32], B: pc.Buffer[f32]):
    if A[0] < B[0]:  # HERE
        A[1] = u32(1)


def k_compare_matrix(A: pc.Buffer[f16]):
    m = MatA.load(A, 0, 16)
    if m < m:  # HERE
        A[1] = f16(1.0)


def k_compare_bool(A: pc.Buffer[u32]):
    b = A[0] == u32(1)
    if b < b:  # HERE
        A[1] = u32(1)


def k_select_condition(A: pc.Buffer[u32]):
    A[0] = pc.select(A[1], u32(1), u32(0))  # HERE


def k_select_types(A: pc.Buffer[u32], B: pc.Buffer[f32]):
    A[0] = pc.select(A[1] == u32(0), A[2], B[0])  # HERE


def k_select_matrix(A: pc.Buffer[f16]):
    m = MatA.load(A, 0, 16)
    pc.store(A, 0, pc.select(A[0] == f16(0.0), m, m), 16)  # HERE


def k_cast_types(A: pc.Buffer[u32], V: pc.Buffer[pc.vec(u32, 4)]):
    A[0] = pc.cast(V[0], f32)  # HERE


def k_cast_python_number_to_a_string(A: pc.Buffer[u32]):
    A[0] = pc.cast(1, "u32")  # HERE


def k_cast_bool(A: pc.Buffer[u32]):
    A[0] = pc.cast(A[1] == u32(0), u32)  # HERE


def k_indexable(A: pc.Buffer[u32], n: u32):
    A[0] = n[0]  # HERE


def k_assignable(A: pc.Buffer[u32], n: u32):
    n[0] = A[0]  # HERE


def k_attribute(A: pc.Buffer[u32], n: u32):
    A[0] = u32(A.shape[0])  # HERE


def k_attribute_swizzle(A: pc.Buffer[pc.vec(f32, 4)], B: pc.Buffer[f32]):
    B[0] = A[0].xy.x  # HERE


def k_store_type(A: pc.Buffer[u32], B: pc.Buffer[f32]):
    A[0] = B[0]  # HERE


def k_shared_length(A: pc.Buffer[u32]):
    s = pc.shared(u32, 0)  # HERE
    A[0] = s[0]


def k_shared_beyond_32_bits(A: pc.Buffer[u32]):
    s = pc.shared(f32, 1 << 40)  # HERE
    A[0] = u32(s[0])


def k_shared_beyond_any_device(A: pc.Buffer[u32]):
    s = pc.shared(f32, 32768)
    t = pc.shared(pc.vec(u32, 4), 8193)  # HERE
    A[0] = u32(s[0]) + t[0].x


def k_barrier_memory(A: pc.Buffer[u32]):
    pc.barrier(memory="global")  # HERE
    A[0] = u32(1)


def k_shared_top_level(A: pc.Buffer[u32]):
    if A[0] == u32(0):
        s = pc.shared(u32, 4)  # HERE
        A[1] = s[0]


def k_struct_buffer_element(A: pc.Buffer[pc.struct("Pair", a=u32, b=u32)], O: pc.Buffer[u32]):
    O[0] = A[0]  # HERE


def k_constituent_type(A: pc.Buffer[u32], B: pc.Buffer[f32]):
    v = pc.make_array([A[0], B[0]])  # HERE
    A[1] = v[0]


def k_array_length(A: pc.Buffer[u32]):
    v = pc.make_array([])  # HERE
    A[1] = v[0]


def k_vector_size(A: pc.Buffer[u32]):
    v = pc.make_vector([])  # HERE
    A[1] = v[0]


def k_vector_component(A: pc.Buffer[u32], V: pc.Buffer[pc.vec(f32, 4)]):
    v = pc.make_vector([V[0], V[1]])  # HERE


def k_index_range(A: pc.Buffer[u32]):
    v = pc.make_array([A[0], A[1]])
    A[2] = v[2]  # HERE


def k_literal_index(A: pc.Buffer[u32]):
    v = pc.make_array([A[0], A[1]])
    A[2] = v[A[3]]  # HERE


def k_fill_type(A: pc.Buffer[f32]):
    pc.store(A, 0, Acc.fill(A[0] == f32(0.0)), 16)  # HERE


def k_stride_type(A: pc.Buffer[f16], s: f32):
    pc.store(A, 0, MatA.load(A, 0, s), 16)  # HERE


def k_load_result_type(A: pc.Buffer[f16]):
    pc.load(A, f16, 0, 16)  # HERE


def k_scalar_type(A: pc.Buffer[f32], s: f16):
    pc.store(A, 0, Acc.fill(1.0) * s, 16)  # HERE


def k_convert_shape(A: pc.Buffer[f32]):
    pc.store(A, 0, pc.convert(Acc.fill(1.0), AccW), 16)  # HERE


def k_convert_target(A: pc.Buffer[f32]):
    pc.store(A, 0, pc.convert(Acc.fill(1.0), 3), 16)  # HERE


def k_range_arity(A: pc.Buffer[u32], n: u32):
    for i in pc.range(0, n, 1, 2):  # HERE
        A[i] = u32(0)


def k_range_bound_types(A: pc.Buffer[u32], n: u32, m: i32):
    for i in range(n, m):  # HERE
        A[0] = u32(0)


def k_range_step_zero(A: pc.Buffer[u32], n: u32):
    for i in range(0, n, 0):  # HERE
        A[0] = u32(0)


def k_loop_carried_value(A: pc.Buffer[u32], n: u32):
    x = "a"
    for i in range(n):  # HERE
        x = "b"
    A[0] = u32(0)


@pc.func
def _first_pair(A, n):
    for i in range(n):  # HERE loop-return
        if A[i] > u32(0):
            return pc.make_array([A[i], A[i + 1]])
    return pc.make_array([A[0], A[1]])


def k_loop_return_type(A: pc.Buffer[u32], n: u32):
    A[0] = _first_pair(A, n)[0]


def k_loop_carried_undefined(A: pc.Buffer[u32], n: u32):
    x = A[0]
    for i in range(n):  # HERE
        A[i] = x
        del x


@pc.func
def _return_in_if(A):
    for i in range(2):          # `else`: a loop of the trace, whose body the rewrite leaves alone
        if A[i] > u32(0):  # HERE return-in-if
            return A[i]
    else:
        pass
    return u32(0)


def k_return_in_if(A: pc.Buffer[u32]):
    A[0] = _return_in_if(A)


@pc.func
def _return_types(A):
    if A[0] > u32(0):  # HERE return-types
        return f32(A[0])
    return A[1]


def k_return_types(A: pc.Buffer[u32]):
    A[0] = u32(_return_types(A))


@pc.func
def _return_in_loop(A, n):
    for _ in range(1):
        for i in range(n):  # HERE return-in-loop
            return A[i]
    else:
        pass
    return u32(0)


def k_return_in_loop(A: pc.Buffer[u32], n: u32):
    A[0] = _return_in_loop(A, n)


def k_runtime_int(A: pc.Buffer[u32]):
    A[0] = u32([1, 2, 3][A[1] > u32(0)])  # HERE


def k_runtime_float(A: pc.Buffer[f32]):
    A[0] = f32(float(A[1]))  # HERE


def k_runtime_round(A: pc.Buffer[f32]):
    A[0] = round(A[1])  # HERE


def k_runtime_matmul(A: pc.Buffer[f32]):
    A[0] = A[1] @ A[2]  # HERE


RULES = [
    ("core.bool-constant", k_bool_constant, "is not a bool"),
    ("core.integer-constant", k_integer_constant, "is not an integer"),
    ("core.constant-range", k_constant_range, "does not fit in u32"),
    ("core.bool-arithmetic", k_bool_arithmetic, "not defined on bool"),
    ("core.bool-arithmetic", k_bool_negation, "not defined on bool"),
    ("core.arithmetic-type", k_arithmetic_type, "is not defined on f32"),
    ("core.traceable-value", k_traceable_value, "cannot use a Python str ('one') as a kernel value"),
    ("core.traceable-value", k_traceable_function_argument,
     "cannot use a Python str ('one') as a kernel value"),
    ("core.traceable-value", k_traceable_complex, "cannot use a Python complex (1j)"),
    ("core.traceable-value", k_traceable_fma_argument, "cannot use a Python NoneType (None)"),
    ("core.float-literal-range", k_float_literal_beyond_every_float,
     "the integer literal of 401 digits is outside the range of f32"),
    ("core.integer-true-division", k_integer_true_division, "`/` on integers is ambiguous"),
    ("core.glsl-float-type", k_glsl_float_type, "is not available for bf16"),
    ("core.compare-types", k_compare_types, "cannot compare u32 with f32"),
    ("core.compare-matrix", k_compare_matrix, "comparisons are defined on scalars"),
    ("core.compare-bool", k_compare_bool, "compared with == and !="),
    ("core.select-condition", k_select_condition, "select condition must be bool"),
    ("core.select-types", k_select_types, "select branches have different types"),
    ("khr.select-matrix", k_select_matrix, "select on cooperative matrices"),
    ("core.cast-types", k_cast_types, "cannot cast"),
    ("core.cast-types", k_cast_python_number_to_a_string, "cannot cast i32 to 'u32'"),
    ("core.cast-bool", k_cast_bool, "cannot cast between bool and u32"),
    ("core.indexable", k_indexable, "cannot index a value of type u32"),
    ("core.assignable", k_assignable, "cannot assign into a value of type u32"),
    ("core.attribute", k_attribute, "a value of type Buffer[u32] has no attribute 'shape'"),
    ("core.attribute", k_attribute_swizzle, "a value of type vec4<f32> has no attribute 'xy'"),
    ("core.store-type", k_store_type, "cannot store a f32 into an array of u32"),
    ("core.shared-length", k_shared_length, "positive compile-time int"),
    ("core.shared-length", k_shared_beyond_32_bits,
     "pycoop.shared(f32, 1099511627776) takes 4398046511104 B: more shared memory than any device"),
    ("core.shared-length", k_shared_beyond_any_device,
     "pycoop.shared(vec4<u32>, 8193) takes 131088 B, 131072 B in the arrays before it"),
    ("core.shared-top-level", k_shared_top_level, "top level of the kernel"),
    ("core.barrier-memory", k_barrier_memory, "memory is 'workgroup' or 'device', got 'global'"),
    ("core.struct-buffer-element", k_struct_buffer_element, "cannot be loaded or stored one by one"),
    ("composite.constituent-type", k_constituent_type, "element of type f32"),
    ("composite.array-length", k_array_length, "at least one element"),
    ("composite.vector-size", k_vector_size, "a vector has 2, 3, 4, 8 or 16 components, got 0"),
    ("composite.vector-component", k_vector_component, "a vector holds scalars, not vec4<f32>"),
    ("composite.index-range", k_index_range, "index 2 is out of range"),
    ("composite.literal-index", k_literal_index, "compile-time ints"),
    ("khr.fill-type", k_fill_type, "fill value is bool"),
    ("khr.stride-type", k_stride_type, "must be an integer scalar, got f32"),
    ("khr.load-result-type", k_load_result_type, "load needs a coopmat type"),
    ("khr.scalar-type", k_scalar_type, "scalar is f16, matrix component is f32"),
    ("khr.convert-shape", k_convert_shape, "scope and shape must stay the same"),
    ("khr.convert-target", k_convert_target, "convert target must be a scalar or coopmat type"),
    ("control.range-arity", k_range_arity, "takes 1 to 3 bounds, got 4"),
    ("control.range-bound-types", k_range_bound_types, "range() bounds have different types"),
    ("control.range-step-zero", k_range_step_zero, "step must not be zero"),
    ("control.loop-carried-value", k_loop_carried_value, "is reassigned inside a runtime loop"),
    ("control.loop-return-type", k_loop_return_type, "from inside a loop is not supported",
     "# HERE loop-return"),
    ("control.loop-carried-undefined", k_loop_carried_undefined, "has no value at the end"),
    ("control.func-return-in-control-flow", k_return_in_if, "from inside an `if` on a runtime",
     "# HERE return-in-if"),
    ("control.func-return-in-control-flow", k_return_in_loop, "from inside a runtime loop",
     "# HERE return-in-loop"),
    ("control.func-return-type", k_return_types, "returns f32 on one path and u32 on another",
     "# HERE return-types"),
    ("frontend.runtime-int", k_runtime_int, "where Python needs a plain int"),
    ("frontend.runtime-round", k_runtime_round, "round() of a runtime value"),
    ("frontend.runtime-float", k_runtime_float, "float() of a runtime value"),
    ("frontend.runtime-matmul", k_runtime_matmul, "the @ operator on a runtime value"),
]


@pytest.mark.parametrize("rule_id,body,fragment,marker", [r + (None,) * (4 - len(r)) for r in RULES],
                         ids=[f"{r[0]}:{r[1].__name__}" for r in RULES])
def test_rule(rule_id, body, fragment, marker):
    e = compile_error(body, marker)
    assert e.rule_id == rule_id, str(e)
    assert fragment in e.message, e.message
    assert f"[{rule_id}]" in str(e)


# --------------------------------------------------------------------------- block pointers (decode)

Blk = pc.struct("Blk", base=f16, pad=f16, vals=pc.array(f16, 6))
Pair = pc.struct("Pair", lo=f16, hi=f16)
Nested = pc.struct("Nested", pair=Pair, rows=pc.array(pc.array(f16, 3), 2))
Acc16 = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.Accumulator]


def _decoded(B, decode):
    lay = pc.nv.tensor_layout(2, "clamp_to_edge").block_size(2, 3).dimension(20, 21)
    return pc.nv.load_tensor(B, lay.slice(0, 16, 0, 16), Acc16, decode=decode)


def _dec_member_name(block, bc, cib):
    return block.scale  # HERE member-name


def _dec_member_load(block, bc, cib):
    return block.pair  # HERE member-load


def _dec_nested_array(block, bc, cib):
    return block.rows[0]  # HERE nested-array


def _dec_member_by_name(block, bc, cib):
    return block[0]  # HERE member-by-name


def k_member_name(B: pc.ReadBuffer[Blk], O: pc.Buffer[f16]):
    pc.store(O, 0, _decoded(B, _dec_member_name), 16)


def k_member_load(B: pc.ReadBuffer[Nested], O: pc.Buffer[f16]):
    pc.store(O, 0, _decoded(B, _dec_member_load), 16)


def k_nested_array(B: pc.ReadBuffer[Nested], O: pc.Buffer[f16]):
    pc.store(O, 0, _decoded(B, _dec_nested_array), 16)


def k_member_by_name(B: pc.ReadBuffer[Blk], O: pc.Buffer[f16]):
    pc.store(O, 0, _decoded(B, _dec_member_by_name), 16)


POINTER_RULES = [
    ("pointer.member-name", k_member_name, "has no member 'scale'", "# HERE member-name"),
    ("pointer.member-load", k_member_load, "cannot be loaded directly", "# HERE member-load"),
    ("pointer.nested-array", k_nested_array, "nested arrays", "# HERE nested-array"),
    ("pointer.member-by-name", k_member_by_name, "by name", "# HERE member-by-name"),
]


@pytest.mark.parametrize("rule_id,body,fragment,marker", POINTER_RULES, ids=[r[0] for r in POINTER_RULES])
def test_block_pointer_rule(rule_id, body, fragment, marker):
    test_rule(rule_id, body, fragment, marker)


# --------------------------------------------------------------------------- outside a kernel body

def test_ops_outside_a_kernel():
    with pytest.raises(CompileError) as e:
        pc.barrier()  # HERE outside
    assert e.value.rule_id == "frontend.trace-outside-kernel", str(e.value)
    assert e.value.loc.file == __file__ and e.value.loc.line == file_line("# HERE outside")
    assert "only be used inside a @pycoop.kernel" in e.value.message


def test_a_kernel_needs_its_source():
    ns: dict = {}
    exec("import pycoop as pc\ndef k(A: pc.Buffer[pc.u32]):\n    A[0] = pc.u32(1)\n", ns)
    with pytest.raises(CompileError) as e:
        pc.kernel(workgroup_size=32)(ns["k"]).compile()
    assert e.value.rule_id == "frontend.source-available", str(e.value)
    assert "cannot read the source of k" in e.value.message


def test_a_kernel_is_a_plain_def():
    with pytest.raises(CompileError) as e:
        pc.kernel(workgroup_size=32)(lambda: None).compile()  # HERE plain-def
    assert e.value.rule_id == "frontend.plain-def", str(e.value)
    assert "is not a plain function definition" in e.value.message
    assert e.value.loc.file == __file__ and e.value.line == file_line("# HERE plain-def")


# --------------------------------------------------------------------------- emulator

def _builtin_per_element(row, col, e):
    return e + f32(pc.local_invocation_index())  # HERE builtin


def k_builtin_per_element(C: pc.Buffer[f32]):
    pc.store(C, 0, pc.nv.per_element(Acc.fill(1.0), _builtin_per_element), 16)


def test_a_builtin_inside_a_per_element_function_is_reported():
    with pytest.raises(pc.EmulatorError) as e:
        emu(pc.kernel(workgroup_size=32)(k_builtin_per_element), 1, np.zeros(256, np.float32))
    assert e.value.rule_id == "nv.builtin-in-callback", str(e.value)
    assert "is not available inside a function called per element" in e.value.message


def k_partial_subgroup_matrix(A: pc.Buffer[f32]):
    pc.store(A, 0, Acc.fill(1.0), 16)


def test_subgroup_matrices_in_partial_subgroups_are_reported():
    k = pc.kernel(workgroup_size=40, subgroup_size=32)(k_partial_subgroup_matrix)
    with pytest.raises(pc.EmulatorError) as e:
        emu(k, 1, np.zeros(256, np.float32))
    assert e.value.rule_id == "emulator.whole-subgroups", str(e.value)
    assert "subgroup-scope matrices" in e.value.message and "40 is not a multiple" in e.value.message
