"""The op registry is complete and is the one place an op's properties live: every op has
its parts, docs/ops.md is generated from it, and an emulator launch never enters the code
generator."""
from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

import pycoop as pc
from pycoop.ir import registry
from pycoop.ir.registry import all_ops, check_complete, define

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_op_is_complete():
    check_complete()
    assert len(all_ops()) > 50


def test_an_incomplete_op_is_named(monkeypatch):
    monkeypatch.setitem(registry._REGISTRY, "test.half_done", registry.OpDef("test.half_done", None))
    with pytest.raises(RuntimeError, match=r"test\.half_done: doc, lower, emulate"):
        check_complete()


def test_a_misspelt_effect_is_an_error_at_definition():
    with pytest.raises(TypeError):
        define("test.misspelt", lambda *a: [], pur=True)          # noqa  (the misspelling)
    with pytest.raises(ValueError, match="environment"):
        define("test.env", lambda *a: [], environment="metal")
    assert "test.misspelt" not in registry._REGISTRY and "test.env" not in registry._REGISTRY


def test_ops_md_index_is_generated_from_the_registry():
    make = runpy.run_path(str(DOCS / "make_ops_index.py"))
    text = (DOCS / "ops.md").read_text()
    assert make["updated"](text) == text, "run: python docs/make_ops_index.py"


def test_ops_md_headings_name_registered_ops():
    names = {d.name for d in all_ops()}
    headings = re.findall(r"^### (.*)$", (DOCS / "ops.md").read_text(), re.M)
    named = [n for h in headings for n in re.findall(r"`([a-z_.0-9]+)`", h)]
    assert named and all(n in names for n in named), set(named) - names


@pc.kernel(workgroup_size=32)
def _gemm(A: pc.ReadBuffer[pc.f16], B: pc.ReadBuffer[pc.f16], C: pc.WriteBuffer[pc.f32], K: pc.u32):
    a_t = pc.coopmat[pc.f16, pc.Subgroup, 16, 16, pc.UseA]
    b_t = pc.coopmat[pc.f16, pc.Subgroup, 16, 16, pc.UseB]
    acc = pc.coopmat[pc.f32, pc.Subgroup, 16, 16, pc.Accumulator].fill(0.0)
    for k in range(0, K, 16):
        acc = pc.mul_add(a_t.load(A, k, K), b_t.load(B, k * 16, 16), acc)
    pc.store(C, 0, acc, 16)


def test_an_emulator_launch_enters_no_code_generator():
    A = np.ones((16, 32), np.float16)
    B = np.ones((32, 16), np.float16)
    C = np.zeros((16, 16), np.float32)
    entered = set()

    def profile(frame, event, arg):
        if event == "call":
            entered.add((frame.f_globals.get("__name__", ""), frame.f_code.co_name))
    sys.setprofile(profile)                                 # the trace and the launch
    try:
        _gemm[1](A, B, C, 32, backend="emulator")
    finally:
        sys.setprofile(None)
    assert (C == 32).all()
    assert ("pycoop.emulator.machine", "run") in entered
    # compile() checks the ABI option's name (codegen.abi.check_abi); nothing is lowered
    generator = {(m, f) for m, f in entered
                 if m.startswith(("pycoop.codegen", "pycoop.spirv", "pycoop.cache"))}
    assert generator == {("pycoop.codegen.abi", "check_abi")}
