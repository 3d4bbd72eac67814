"""Every rule of the NV ops (SPV_NV_cooperative_matrix2, SPV_NV_tensor_addressing) that a kernel
can break, as a CompileError at the user's line with its rule id (docs/rules.md): one kernel
per rule, the rule's id, the line and a fragment of the message. Also: tangled instructions in
the functions these ops call per element, and constant layouts whose accesses the emulator
would report as undefined (the same rule ids as the emulator's reports)."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import pycoop as pc
from pycoop import f16, f32, u32
from pycoop.errors import CompileError, EmulatorError

Acc16 = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.Accumulator]
Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]
MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
MatB = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseB]
Odd = pc.coopmat[f32, pc.Subgroup, 16, 15, pc.Accumulator]


def marked_line(fn, marker: str = "# HERE") -> int:
    src, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(src) if marker in line)


def compile_error(body, marker: str = "# HERE") -> CompileError:
    k = pc.kernel(workgroup_size=32)(body)
    with pytest.raises(CompileError) as e:
        k.compile()
    assert e.value.loc is not None and e.value.loc.file == __file__, e.value.loc
    assert e.value.loc.line == marked_line(body, marker), str(e.value)
    assert e.value.rule, str(e.value)
    return e.value


# --------------------------------------------------------------------------- kernels, one per rule

def k_dim_range(X: pc.Buffer[f16]):
    pc.nv.tensor_layout(6)  # HERE


def k_clamp_mode(X: pc.Buffer[f16]):
    pc.nv.tensor_layout(2, "wrap")  # HERE


def k_operand_count(X: pc.Buffer[f16]):
    pc.nv.tensor_layout(2).dimension(4, 4, 4)  # HERE


def k_operand_type(X: pc.Buffer[f16], s: f32):
    pc.nv.tensor_layout(1).stride(s)  # HERE


def k_operand_type_python_float(X: pc.Buffer[f16]):
    pc.nv.tensor_layout(2).dimension(16, 16.0)  # HERE


def k_clamp_value(X: pc.Buffer[f16], v: pc.f64):
    pc.nv.tensor_layout(2, "constant").clamp_value(v)  # HERE


def k_view_permutation_count(X: pc.Buffer[f16]):
    pc.nv.tensor_view(3, False, (0, 1))  # HERE


def k_view_permutation(X: pc.Buffer[f16]):
    pc.nv.tensor_view(2, False, (1, 1))  # HERE


def k_view_permutation_of_bools(X: pc.Buffer[f16]):
    pc.nv.tensor_view(2, False, (True, 0))  # HERE


def k_dim_range_bool(X: pc.Buffer[f16]):
    pc.nv.tensor_layout(True)  # HERE


def k_view_has_dimensions(X: pc.Buffer[f16]):
    pc.nv.tensor_view(2, 1)  # HERE


def k_tensor_pointer(X: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2).dimension(16, 16)
    pc.nv.load_tensor(X[0], lay, Acc16)  # HERE


def k_tensor_vector_array(X: pc.Buffer[pc.vec(f16, 4)]):
    lay = pc.nv.tensor_layout(2).dimension(16, 16)
    pc.nv.load_tensor(X, lay, Acc16)  # HERE


def k_layout_operand(X: pc.Buffer[f16]):
    pc.nv.load_tensor(X, pc.nv.tensor_view(2), Acc16)  # HERE


def k_layout_operand_store(X: pc.Buffer[f16]):
    pc.nv.store_tensor(X, pc.nv.tensor_view(2), Acc16.fill(0.0))  # HERE


def k_view_operand(X: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2).dimension(16, 16)
    pc.nv.load_tensor(X, lay, Acc16, view=lay)  # HERE


def k_view_operand_store(X: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2).dimension(16, 16)
    pc.nv.store_tensor(X, lay, Acc16.fill(0.0), view=lay)  # HERE


def k_load_result_type(X: pc.Buffer[f16]):
    pc.nv.load_tensor(X, pc.nv.tensor_layout(2).dimension(16, 16), f16)  # HERE


def k_object_type(X: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2).dimension(16, 16)
    pc.nv.load_tensor(X, lay, Acc16, object=Acc.fill(0.0))  # HERE


def k_object_python(X: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2).dimension(16, 16)
    pc.nv.load_tensor(X, lay, Acc16, object=0.0)  # HERE


def k_decode_needed(X: pc.Buffer[f32]):
    pc.nv.load_tensor(X, pc.nv.tensor_layout(2).dimension(16, 16), Acc16)  # HERE


def k_decode_shared_memory(X: pc.Buffer[f16]):
    s = pc.shared(f16, 256)
    lay = pc.nv.tensor_layout(2).dimension(16, 16)
    pc.nv.load_tensor(s, lay, Acc16, decode=lambda p, b, c: p[0])  # HERE


def k_decode_vector_needs_decode(X: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2).dimension(16, 16)
    pc.nv.load_tensor(X, lay, Acc16, decode_vector=lambda p, b, c: p[0])  # HERE


def k_decode_vector_block(X: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2).dimension(16, 16)
    pc.nv.load_tensor(X, lay, Acc16, decode_vector_block=f16)  # HERE


def k_store_no_decode(X: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2).dimension(16, 16)
    pc.nv.store_tensor(X, lay, Acc16.fill(0.0), decode=lambda p, b, c: p[0])  # HERE


def k_store_no_decode_vector(X: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2).dimension(16, 16)
    pc.nv.store_tensor(X, lay, Acc16.fill(0.0), decode_vector=lambda p, b, c: p[0])  # HERE


def k_store_object(X: pc.Buffer[f16]):
    pc.nv.store_tensor(X, pc.nv.tensor_layout(2).dimension(16, 16), X[0])  # HERE


def k_store_object_python(X: pc.Buffer[f16]):
    pc.nv.store_tensor(X, pc.nv.tensor_layout(2).dimension(16, 16), 1.0)  # HERE


def k_read_only_store(X: pc.ReadBuffer[f16]):
    pc.nv.store_tensor(X, pc.nv.tensor_layout(2).dimension(16, 16), Acc16.fill(0.0))  # HERE


def k_store_element_type(X: pc.Buffer[f16]):
    pc.nv.store_tensor(X, pc.nv.tensor_layout(2).dimension(16, 16), Acc.fill(0.0))  # HERE


def k_view_dim_without_dimensions(X: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2, "constant").dimension(16, 16)
    pc.nv.load_tensor(X, lay, Acc16, view=pc.nv.tensor_view(3, False))  # HERE


def k_matrix_operand(X: pc.Buffer[f16]):
    pc.nv.reduce(X[0], "row", "add")  # HERE


def k_reduce_mode(X: pc.Buffer[f16]):
    pc.nv.reduce(Acc.fill(0.0), "diagonal", "add")  # HERE


def k_reduce_2x2_odd(X: pc.Buffer[f16]):
    pc.nv.reduce(Odd.fill(0.0), "2x2", "add")  # HERE


def k_reduce_mode_list(X: pc.Buffer[f16]):
    pc.nv.reduce(Acc.fill(0.0), ["row"], "add")  # HERE


def k_reduce_result_type(X: pc.Buffer[f16]):
    pc.nv.reduce(Acc.fill(0.0), "row", "max", result_type=5)  # HERE


def k_combine_function(X: pc.Buffer[f16]):
    pc.nv.reduce(Acc.fill(0.0), "row", "avg")  # HERE


def k_reduce_accumulator(X: pc.Buffer[f16]):
    pc.nv.reduce(MatA.fill(0.0), "row", "add")  # HERE


def k_reduce_type(X: pc.Buffer[f16]):
    pc.nv.reduce(Acc.fill(0.0), "row", "add", Acc16)  # HERE


def k_reduce_2x2_shape(X: pc.Buffer[f16]):
    pc.nv.reduce(Odd.fill(0.0), "2x2", "add")  # HERE


def k_reduce_row_shape(X: pc.Buffer[f16]):
    pc.nv.reduce(Acc.fill(0.0), "row", "add", Acc.with_(rows=8))  # HERE


def k_reduce_column_shape(X: pc.Buffer[f16]):
    pc.nv.reduce(Acc.fill(0.0), "column", "add", Acc.with_(cols=8))  # HERE


def k_per_element_operand(X: pc.Buffer[f16]):
    pc.nv.per_element(Acc.fill(0.0), lambda r, c, e, o: e, pc.make_array([f32(1.0)]))  # HERE


def k_per_element_matrix_type(X: pc.Buffer[f16]):
    pc.nv.per_element(Acc.fill(0.0), lambda r, c, e, o: e, Acc16.fill(0.0))  # HERE


def k_convert_result_type(X: pc.Buffer[f16]):
    pc.nv.convert(Acc16.fill(0.0), f16)  # HERE


def k_convert_shape(X: pc.Buffer[f16]):
    pc.nv.convert(Acc16.fill(0.0), MatA.with_(rows=8))  # HERE


def k_convert_use(X: pc.Buffer[f16]):
    pc.nv.convert(MatB.fill(0.0), MatA)  # HERE


def k_callback_not_function(X: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2).dimension(16, 16)
    pc.nv.load_tensor(X, lay, Acc16, decode=3)  # HERE


def k_callback_arity(X: pc.Buffer[f16]):
    pc.nv.per_element(Acc.fill(0.0), lambda r, c: r)  # HERE


def k_callback_return_type(X: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2).dimension(16, 16)
    pc.nv.load_tensor(X, lay, Acc16, decode=lambda p, b, c: f32(p[0]))  # HERE


def k_callback_return_value(X: pc.Buffer[f16]):
    pc.nv.reduce(Acc.fill(0.0), "row", lambda a, b: "max")  # HERE


def k_transpose_use(X: pc.Buffer[f16]):
    pc.nv.transpose(MatA.fill(0.0))  # HERE


def k_transpose_shape(X: pc.Buffer[f16]):
    pc.nv.transpose(Acc16.fill(0.0), MatA)  # HERE


def k_transpose_to_a_scalar_type(X: pc.Buffer[f16]):
    pc.nv.transpose(Acc16.fill(0.0), f16)  # HERE


# constant operands that the emulator would report at run time

def k_store_block_size(X: pc.Buffer[f16], O: pc.Buffer[f16], n: u32):
    lay = pc.nv.tensor_layout(2).dimension(n, n).block_size(2, 2)
    pc.nv.store_tensor(O, lay, Acc16.load(X, 0, 16))  # HERE


def k_block_size_zero(X: pc.Buffer[f16]):
    pc.nv.tensor_layout(2, "constant").dimension(16, 16).block_size(u32(0), 1)  # HERE


def k_undefined_out_of_bounds(X: pc.Buffer[f16], O: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2).dimension(8, 16).slice(0, 16, 0, 16)
    pc.store(O, 0, pc.nv.load_tensor(X, lay, Acc16), 16)  # HERE


def k_zero_span(X: pc.Buffer[f16], O: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2, "constant").dimension(16, 16).slice(0, 0, 0, 16)
    pc.nv.store_tensor(O, lay, Acc16.load(X, 0, 16))  # HERE


def k_empty_dimension(X: pc.Buffer[f16], O: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2, "clamp_to_edge").dimension(0, 16).slice(0, 16, 0, 16)
    pc.store(O, 0, pc.nv.load_tensor(X, lay, Acc16), 16)  # HERE


def k_mirror_dimension_1(X: pc.Buffer[f16], n: u32):
    pc.nv.tensor_layout(2, "mirror_repeat").dimension(n, 1)  # HERE


RULES = [
    ("nv.dim-range", k_dim_range, "from 1 to 5"),
    ("nv.dim-range", k_dim_range_bool, "from 1 to 5, got True"),
    ("nv.clamp-mode", k_clamp_mode, "unknown clamp mode"),
    ("nv.operand-count", k_operand_count, "takes 2 values here"),
    ("nv.operand-type", k_operand_type, "32-bit integers"),
    ("nv.operand-type", k_operand_type_python_float, "32-bit integers, got f32"),
    ("nv.clamp-value", k_clamp_value, "at most 32 bits"),
    ("nv.view-permutation-count", k_view_permutation_count, "needs 3 permutation values"),
    ("nv.view-permutation", k_view_permutation, "not a permutation"),
    ("nv.view-permutation", k_view_permutation_of_bools, "[True, 0] is not a permutation"),
    ("nv.view-has-dimensions", k_view_has_dimensions, "compile-time bool"),
    ("nv.tensor-pointer", k_tensor_pointer, "needs a buffer parameter or a shared array"),
    ("nv.tensor-vector-array", k_tensor_vector_array, "through an array of"),
    ("nv.layout-operand", k_layout_operand, "needs a tensor layout"),
    ("nv.layout-operand", k_layout_operand_store, "needs a tensor layout"),
    ("nv.view-operand", k_view_operand, "must be a tensor view"),
    ("nv.view-operand", k_view_operand_store, "must be a tensor view"),
    ("nv.load-result-type", k_load_result_type, "needs a coopmat type"),
    ("nv.object-type", k_object_type, "the object operand"),
    ("nv.object-type", k_object_python, "must be a coopmat<f16, Subgroup, 16x16, Acc> value, got float"),
    ("nv.decode-needed", k_decode_needed, "needs a decode function"),
    ("nv.decode-shared-memory", k_decode_shared_memory, "not shared arrays"),
    ("nv.decode-vector-needs-decode", k_decode_vector_needs_decode, "needs a scalar decode function"),
    ("nv.decode-vector-block", k_decode_vector_block, "which is missing"),
    ("nv.store-no-decode", k_store_no_decode, "takes no decode function"),
    ("nv.store-no-decode-vector", k_store_no_decode_vector, "takes no decode_vector"),
    ("nv.store-object", k_store_object, "stores a cooperative matrix"),
    ("nv.store-object", k_store_object_python, "stores a cooperative matrix, got float"),
    ("nv.read-only-store", k_read_only_store, "read-only"),
    ("nv.store-element-type", k_store_element_type, "cannot store f32 elements"),
    ("nv.view-dim-without-dimensions", k_view_dim_without_dimensions, "without dimensions"),
    ("nv.matrix-operand", k_matrix_operand, "must be a cooperative matrix"),
    ("nv.reduce-mode", k_reduce_mode, "unknown reduction"),
    ("nv.reduce-mode", k_reduce_mode_list, "unknown reduction ['row']"),
    ("nv.reduce-result-type", k_reduce_result_type, "result_type must be a coopmat type, got 5"),
    ("nv.combine-function", k_combine_function, "unknown combine function"),
    ("nv.reduce-accumulator", k_reduce_accumulator, "accumulator"),
    ("nv.reduce-type", k_reduce_type, "must keep the component type"),
    ("nv.reduce-2x2-shape", k_reduce_2x2_shape, "2x2 reduction"),
    ("nv.reduce-2x2-shape", k_reduce_2x2_odd, "needs an even number of rows and columns, not 16x15"),
    ("nv.reduce-row-shape", k_reduce_row_shape, "keeps the 16 rows"),
    ("nv.reduce-column-shape", k_reduce_column_shape, "keeps the 16 columns"),
    ("nv.per-element-operand", k_per_element_operand, "scalars or matrices"),
    ("nv.per-element-matrix-type", k_per_element_matrix_type, "must have the type of the matrix"),
    ("nv.convert-result-type", k_convert_result_type, "must be a coopmat type"),
    ("nv.convert-shape", k_convert_shape, "scope and shape must stay the same"),
    ("nv.convert-use", k_convert_use, "cannot change the use"),
    ("nv.callback-not-function", k_callback_not_function, "must be a function"),
    ("nv.callback-arity", k_callback_arity, "takes 2 parameters"),
    ("nv.callback-return-type", k_callback_return_type, "returns f32, expected f16"),
    ("nv.callback-return-type", k_callback_return_value, "returned 'max', not a value"),
    ("nv.transpose-use", k_transpose_use, "takes an accumulator"),
    ("nv.transpose-shape", k_transpose_shape, "is a UseB"),
    ("nv.transpose-shape", k_transpose_to_a_scalar_type, "is a matrix type, not f16"),
    ("nv.store-block-size", k_store_block_size, "block size in dimension 0 is 2"),
    ("nv.block-size-zero", k_block_size_zero, "at least 1, got 0"),
    ("nv.undefined-out-of-bounds", k_undefined_out_of_bounds, "out of bounds with clamp mode Undefined"),
    ("nv.zero-span", k_zero_span, "a span (or view dimension) of 0"),
    ("nv.empty-dimension", k_empty_dimension, "no coordinate to clamp to"),
    ("nv.mirror-dimension-1", k_mirror_dimension_1, "MirrorRepeat layout with a dimension of 1"),
]


@pytest.mark.parametrize("rule_id,body,fragment", RULES, ids=[f"{r[0]}:{r[1].__name__}" for r in RULES])
def test_rule(rule_id, body, fragment):
    e = compile_error(body)
    assert e.rule_id == rule_id, str(e)
    assert fragment in e.message, e.message
    assert f"[{rule_id}]" in str(e)          # the rendered error names the table's key


def test_constant_layouts_that_are_defined_compile():
    """Clamped, constant-mode and in-bounds constant layouts are not reported."""
    @pc.kernel(workgroup_size=32)
    def ok(X: pc.Buffer[f16], O: pc.Buffer[f16]):
        edge = pc.nv.tensor_layout(2, "clamp_to_edge").dimension(8, 16).slice(2, 16, 0, 16)
        const = pc.nv.tensor_layout(2, "constant").dimension(8, 16).slice(0, 16, 0, 16).clamp_value(1.0)
        wrap = pc.nv.tensor_layout(2).dimension(8, 16)        # spans wrap: 16 x 16 reads 8 x 16
        m = pc.nv.load_tensor(X, edge, Acc16) + pc.nv.load_tensor(X, const, Acc16) + \
            pc.nv.load_tensor(X, wrap, Acc16)
        pc.nv.store_tensor(O, const, m)                        # rows 8..15 are discarded
    X = np.arange(256).astype(np.float16)
    O = np.zeros(256, np.float16)
    ok[1](X, O, backend="emulator")
    ref = X.reshape(16, 16)[np.minimum(np.arange(16) + 2, 7)] + np.where(
        np.arange(16)[:, None] < 8, X.reshape(16, 16)[np.arange(16) % 8], np.float16(1.0)) + \
        X.reshape(16, 16)[np.arange(16) % 8]
    np.testing.assert_array_equal(O.reshape(16, 16)[:8], ref[:8].astype(np.float16))
    assert not O.reshape(16, 16)[8:].any()
    ok.compile().spv                                           # spirv-val


@pytest.mark.parametrize("rule_id,args", [
    ("nv.undefined-out-of-bounds", (8, 1)),      # 8 rows of 16: rows 8..15 out of bounds
    ("nv.block-size-zero", (16, 0)),
])
def test_runtime_operands_are_reported_by_the_emulator_with_the_same_rule(rule_id, args):
    @pc.kernel(workgroup_size=32)
    def k(X: pc.Buffer[f16], O: pc.Buffer[f16], rows: u32, bs: u32):
        lay = pc.nv.tensor_layout(2).block_size(bs, 1).dimension(rows, 16).slice(0, 16, 0, 16)
        pc.store(O, 0, pc.nv.load_tensor(X, lay, Acc16), 16)  # HERE
    with pytest.raises(EmulatorError) as e:
        k[1](np.zeros(256, np.float16), np.zeros(256, np.float16), *args, backend="emulator")
    assert e.value.rule_id == rule_id and e.value.loc.line == marked_line(k.fn), str(e.value)


# --------------------------------------------------------------------------- tangled instructions

def _combine_with_barrier(a, b):
    pc.barrier()  # TANGLED
    return a + b


@pc.func
def _helper_with_barrier(x):
    pc.barrier()  # TANGLED
    return x


def _per_element_with_matrix(r, c, e):
    m = Acc.fill(1.0)  # TANGLED
    return e


def _decode_with_helper(p, bc, cib):
    return _helper_with_barrier(p[0])


def _decode_vector_with_matrix(p, bc, cib):
    Acc16.fill(0.0)  # TANGLED
    return pc.make_vector([f16(p[0])] * 2)


def t_reduce(X: pc.Buffer[f32]):
    pc.store(X, 0, pc.nv.reduce(Acc.load(X, 0, 16), "row", _combine_with_barrier), 16)


def t_per_element(X: pc.Buffer[f32]):
    pc.store(X, 0, pc.nv.per_element(Acc.load(X, 0, 16), _per_element_with_matrix), 16)


def t_decode(X: pc.Buffer[f16], O: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2).dimension(16, 16)
    pc.nv.store_tensor(O, lay, pc.nv.load_tensor(X, lay, Acc16, decode=_decode_with_helper))


def t_decode_vector(X: pc.Buffer[f16], O: pc.Buffer[f16]):
    lay = pc.nv.tensor_layout(2).block_size(1, 2).dimension(16, 16)
    m = pc.nv.load_tensor(X, lay, Acc16, decode=lambda p, b, c: p[0],
                          decode_vector=_decode_vector_with_matrix)
    pc.nv.store_tensor(O, pc.nv.tensor_layout(2).dimension(16, 16), m)


@pytest.mark.parametrize("body,role,where", [
    (t_reduce, "combine function", _combine_with_barrier),
    (t_per_element, "per-element function", _per_element_with_matrix),
    (t_decode, "decode function", _helper_with_barrier._fn),
    (t_decode_vector, "decode_vector function", _decode_vector_with_matrix),
])
def test_tangled_instruction_in_a_function_called_per_element(body, role, where):
    """SPV_NV_cooperative_matrix2: no tangled instruction in a DecodeFunc, Func or CombineFunc,
    nor in a function it calls (here a @pycoop.func); DecodeVectorFunc stands in for DecodeFunc."""
    k = pc.kernel(workgroup_size=32)(body)
    with pytest.raises(CompileError) as e:
        k.compile()
    assert e.value.rule_id == "nv.tangled-in-callback", str(e.value)
    assert f"the {role} uses" in e.value.message and "tangled" in e.value.rule
    assert e.value.loc.line == marked_line(where, "# TANGLED"), str(e.value)


def test_untangled_functions_compile():
    """Scalar work, runtime control flow and buffer reads through the block pointer are fine."""
    def combine(a, b):
        s = a
        if b > a:
            s = b
        return s

    @pc.kernel(workgroup_size=32)
    def k(X: pc.Buffer[f32]):
        pc.store(X, 0, pc.nv.reduce(Acc.load(X, 0, 16), "row", combine), 16)
    k.compile().spv
