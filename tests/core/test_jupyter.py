"""The Jupyter display of a compiled kernel: signature, IR linked to source lines, SPIR-V."""
from __future__ import annotations

import inspect
import re

import pycoop as pc
from pycoop import f32, u32


@pc.kernel(workgroup_size=64)
def scale(X: pc.Buffer[f32], s: f32, n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        X[i] = X[i] * s  # STORE


def test_compiled_kernel_html():
    html = scale.compile()._repr_html_()
    assert "scale(X: Buffer[f32], s: f32, n: u32)" in html
    assert "workgroup_size=(64, 1, 1)" in html
    assert "OpEntryPoint GLCompute" in html and "OpStore" in html       # the disassembly
    src, start = inspect.getsourcelines(scale.fn)
    store_line = start + next(i for i, l in enumerate(src) if "# STORE" in l)
    # each IR op links to its source line, and the source table has that anchor
    assert f"href='#L{store_line}'" in html
    assert f"id='L{store_line}'" in html
    assert "X[i] = X[i] * s" in html
    assert re.search(r"store\(%X", html)
