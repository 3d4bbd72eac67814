"""The IR: printed form, the structural verifier, and source locations on every op."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

import pycoop
from pycoop import f16, f32, i32, u32
from pycoop.errors import Loc
from pycoop.ir import Block, Function, Module, Op, Value, print_module, verify, walk_block
from pycoop.types import BufferType, bool_

from core_helpers import emu, line_of

Acc = pycoop.coopmat[f32, pycoop.Subgroup, 16, 16, pycoop.Accumulator]
MA = pycoop.coopmat[f16, pycoop.Subgroup, 16, 16, pycoop.UseA]
MB = pycoop.coopmat[f16, pycoop.Subgroup, 16, 16, pycoop.UseB]


@pycoop.kernel(workgroup_size=64)
def k_saxpy_loop(X: pycoop.Buffer[f32], Y: pycoop.Buffer[f32], a: f32, n: u32, reps: u32):
    i = pycoop.global_invocation_id.x
    if i < n:
        acc = Y[i]
        for r in range(reps):
            acc = acc + a * X[i]
        Y[i] = acc


@pycoop.kernel(workgroup_size=32)
def k_mma(A: pycoop.Buffer[f16], B: pycoop.Buffer[f16], C: pycoop.Buffer[f32], K: u32):
    acc = Acc.fill(0.0)
    for k in range(0, K, 16):
        acc = pycoop.mul_add(MA.load(A, k, K), MB.load(B, k * 16, 16), acc)
    pycoop.store(C, 0, acc, 16)


FILE = os.path.basename(__file__)


def test_printer_shows_signature_ops_types_and_locations():
    text = k_saxpy_loop.compile().ir
    first = text.splitlines()[0]
    assert first.startswith("kernel k_saxpy_loop(%X: Buffer[f32], %Y: Buffer[f32], %a: f32, %n: u32, "
                            "%reps: u32)")
    assert "workgroup_size=(64, 1, 1)" in first and "subgroup_size=32" in first
    for op in ("builtin(", "compare(", "if(", "loop(", "load(%X", "store(%Y", "yield(", "condition("):
        assert op in text, op
    assert "{kind='mul'}" in text and "{kind='add'}" in text and "{kind='lt'}" in text
    assert re.search(r"%\w+: f32 = binary\(", text)
    assert "^then():" in text and "^else():" in text and "^cond(" in text and "^body(" in text
    assert f"# {FILE}:{line_of(k_saxpy_loop, 'acc = acc + a * X[i]')}" in text
    assert f"# {FILE}:{line_of(k_saxpy_loop, 'for r in range(reps)')}" in text
    assert text.rstrip().endswith("}")


def test_printer_without_locations_and_coopmat_types():
    m = k_mma.compile().module
    text = print_module(m, locs=False)
    assert "#" not in text
    assert "khr.mul_add(" in text and "khr.load(" in text and "khr.fill(" in text
    assert "coopmat<f16, Subgroup, 16x16, A>" in text
    assert "coopmat<f32, Subgroup, 16x16, Acc>" in text
    assert "layout='RowMajorKHR'" in text


def test_every_op_has_a_location_in_this_file():
    for k in (k_saxpy_loop, k_mma):
        m = k.compile().module
        first = k.fn.__code__.co_firstlineno
        last = first + len(__import__("inspect").getsource(k.fn).splitlines())
        ops = list(m.walk())
        assert ops
        for op in ops:
            assert op.loc is not None and op.loc.file == __file__, op
            assert first < op.loc.line < last, (op, first, last)


def test_ops_get_the_line_they_were_written_on():
    m = k_saxpy_loop.compile().module
    by_name = {}
    for op in m.walk():
        by_name.setdefault(op.name, []).append(op.loc.line)
    assert by_name["loop"] == [line_of(k_saxpy_loop, "for r in range")]
    assert by_name["if"] == [line_of(k_saxpy_loop, "if i < n")]
    assert line_of(k_saxpy_loop, "Y[i] = acc") in by_name["store"]
    assert by_name["builtin"] == [line_of(k_saxpy_loop, "global_invocation_id")]


def test_traced_module_verifies_and_runs():
    m = k_saxpy_loop.compile().module
    verify(m)      # no exception
    x = np.arange(70, dtype=np.float32)
    y = np.ones(70, np.float32)
    emu(k_saxpy_loop, 2, x, y, 0.5, 67, 3)
    ref = np.ones(70, np.float32)
    for _ in range(3):
        ref[:67] = ref[:67] + np.float32(0.5) * x[:67]
    np.testing.assert_array_equal(y, ref)


# --------------------------------------------------------------------------- hand-built modules

LOC = Loc(__file__, 1)


def _module(body: Block, params: list[Value]) -> Module:
    return Module(Function("k", params, body), (32, 1, 1), 32, [f"p{i}" for i in range(len(params))])


def _const(v, t) -> Op:
    return Op("const", [], {"value": v, "type": t}, [t], None, LOC)


def test_hand_built_module_verifies_and_prints():
    buf = Value(BufferType(i32))
    c = _const(7, i32)
    idx = _const(0, u32)
    st = Op("store", [buf, idx.result, c.result], {}, [], None, LOC)
    m = _module(Block(ops=[c, idx, st]), [buf])
    verify(m)
    text = print_module(m)
    assert "const() {value=7, type=i32}" in text and "store(%p0, " in text


def test_verifier_catches_use_before_definition():
    a, b = _const(1, i32), _const(2, i32)
    add = Op("binary", [a.result, b.result], {"kind": "add"}, [i32], None, Loc(__file__, 42))
    m = _module(Block(ops=[a, add, b]), [])          # b is used before it is defined
    with pytest.raises(pycoop.CompileError, match="internal: binary uses a value before its "
                                                  "definition") as ei:
        verify(m)
    assert ei.value.line == 42


def test_verifier_catches_value_escaping_its_region():
    cond = _const(True, bool_)
    inner = _const(3, i32)
    if_op = Op("if", [cond.result], {"result_types": []}, [],
               [Block(ops=[inner, Op("yield", [], {}, [], None, LOC)]),
                Block(ops=[Op("yield", [], {}, [], None, LOC)])], LOC)
    use = Op("binary", [inner.result, inner.result], {"kind": "add"}, [i32], None, LOC)
    with pytest.raises(pycoop.CompileError, match="computed inside a runtime loop or `if`"):
        verify(_module(Block(ops=[cond, if_op, use]), []))


def test_verifier_catches_missing_terminator_and_misplaced_terminator():
    cond = _const(True, bool_)
    if_op = Op("if", [cond.result], {"result_types": []}, [],
               [Block(ops=[_const(1, i32)]), Block(ops=[Op("yield", [], {}, [], None, LOC)])], LOC)
    with pytest.raises(pycoop.CompileError, match="does not end in yield"):
        verify(_module(Block(ops=[cond, if_op]), []))
    y = Op("yield", [], {}, [], None, LOC)
    with pytest.raises(pycoop.CompileError, match="not the last op"):
        verify(_module(Block(ops=[y, _const(1, i32)]), []))


def test_verifier_reruns_type_rules():
    a, b = _const(1, i32), _const(2.0, f32)
    bad = Op("binary", [a.result, b.result], {"kind": "add"}, [i32], None, Loc(__file__, 7))
    with pytest.raises(pycoop.CompileError, match="different types") as ei:
        verify(_module(Block(ops=[a, b, bad]), []))
    assert ei.value.line == 7
    a2 = _const(1, i32)
    wrong = Op("binary", [a2.result, a2.result], {"kind": "add"}, [f32], None, LOC)  # recorded f32
    with pytest.raises(pycoop.CompileError, match="result types"):
        verify(_module(Block(ops=[a2, wrong]), []))


def test_walk_block_visits_nested_regions_in_order():
    m = k_saxpy_loop.compile().module
    names = [op.name for op in walk_block(m.kernel.body)]
    assert names.index("if") < names.index("loop") < names.index("condition")
    assert names == [op.name for op in m.walk()]
    assert names.count("store") == 1


@pycoop.kernel(workgroup_size=32)
def k_repeated(X: pycoop.Buffer[f32], Y: pycoop.Buffer[f32], Z: pycoop.Buffer[u32], n: u32):
    i = pycoop.global_invocation_id.x
    j = pycoop.global_invocation_id.x                 # the same built-in: one op
    Z[i] = (i * n + 3) + (j * n + 3) + (i + 0) * 1    # i * n + 3 once; + 0 and * 1: no op
    Y[i] = X[i] + 0.0                                 # float + 0.0 stays (-0.0 + 0.0 is +0.0)
    Y[j + 32] = X[i] * -0.0 + X[i] * 0.0              # -0.0 and 0.0: two constants
    if i < n:
        Z[i + 64] = i * n + 3                         # another block: its own op


def test_repeated_pure_ops_are_traced_once_per_block():
    m = k_repeated.compile().module
    top = m.kernel.body.ops
    count = lambda ops, name, **attrs: sum(  # noqa: E731
        1 for o in ops if o.name == name and all(o.attrs.get(k) == v for k, v in attrs.items()))
    assert count(top, "builtin") == 1
    assert count(top, "binary", kind="mul") == 3      # i * n, X * -0.0, X * 0.0
    floats = sorted(str(o.attrs["value"]) for o in top if o.name == "const" and o.attrs["type"] == f32)
    assert floats == ["-0.0", "0.0"]                  # + 0.0 reuses 0.0, -0.0 kept apart
    assert count(top, "load") == 3                    # memory ops are never shared
    inner = next(o for o in top if o.name == "if").regions[0].ops
    assert count(inner, "binary", kind="mul") == 1


def test_shared_and_folded_ops_compute_the_same_results():
    x = np.array([1.5, -2.0] * 48, np.float32)
    y, z = np.zeros(96, np.float32), np.zeros(128, np.uint32)
    emu(k_repeated, 1, x, y, z, 5)
    i = np.arange(32, dtype=np.uint32)
    np.testing.assert_array_equal(z[:32], 2 * (i * 5 + 3) + i)
    np.testing.assert_array_equal(z[64:69], i[:5] * 5 + 3)
    np.testing.assert_array_equal(y[:32], x[:32])
    assert not np.signbit(y[32:64]).any()             # -0.0 * x + 0.0 * x: +0.0 or -0.0 + 0.0



def test_blocks_never_share_their_traced_ops(monkeypatch):
    """Each block shares repeated ops only among its own: with every block given the same
    id() (as CPython may give a new block the address of a discarded trace's block), the
    kernel still traces, validates and runs right."""
    import builtins

    from pycoop.ir import builder
    monkeypatch.setattr(builder, "id", lambda o: 0 if isinstance(o, Block) else builtins.id(o),
                        raising=False)
    def inside_and_after(X: pycoop.Buffer[f32], Y: pycoop.Buffer[f32], n: u32):
        i = pycoop.global_invocation_id.x
        s = X[i]
        for r in range(n):
            s = s + pycoop.cast(i * 3, f32)          # i * 3 in the loop body's block
        Y[i] = s + pycoop.cast(i * 3, f32)           # and again after the loop

    k = pycoop.kernel(workgroup_size=32)(inside_and_after)
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(32, np.float32)
    emu(k, 1, x, y, 4)
    np.testing.assert_array_equal(y, x + 5 * 3 * x)
    assert k.compile().spv
