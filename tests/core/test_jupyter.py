"""Jupyter displays, checked by parsing their HTML: kernels, compiled kernels (IR linked to the
source lines, SPIR-V), launch results and coopmat types; inline monospace fonts, locations that
do not wrap, notebook cells named `In [4]`, pygments highlighting (and plain text without it)."""
from __future__ import annotations

import inspect
import linecache
import sys
import types
from html.parser import HTMLParser

import numpy as np
import pytest

import pycoop as pc
from pycoop import f32, u32
from pycoop.jupyter import highlight


@pc.kernel(workgroup_size=64)
def scale(X: pc.Buffer[f32], s: f32, n: u32):
    i = pc.global_invocation_id.x
    if i < n:
        X[i] = X[i] * s  # STORE


class Page(HTMLParser):
    """Elements by id, links, the text inside each id'd element, and the styles of tags."""

    def __init__(self, text: str):
        super().__init__()
        self.ids, self.links, self.styles, self.stack, self.text = {}, [], [], [], {}
        self.link_text, self._in_link = {}, None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.styles.append((tag, a.get("style", "")))
        if "id" in a:
            assert a["id"] not in self.ids, f"duplicate id {a['id']}"
            self.ids[a["id"]] = tag
            self.text[a["id"]] = ""
        self.stack.append(a.get("id"))
        if tag == "a":
            self.links.append(a["href"])
            self._in_link = a["href"]
            self.link_text[a["href"]] = ""

    def handle_endtag(self, tag):
        self.stack.pop()
        if tag == "a":
            self._in_link = None

    def handle_data(self, data):
        for i in self.stack:
            if i is not None:
                self.text[i] += data
        if self._in_link:
            self.link_text[self._in_link] += data


def _line_of(fn, marker: str) -> int:
    src, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(src) if marker in line)


def test_compiled_kernel_html():
    html = scale.compile()._repr_html_()
    page = Page(html)
    assert "scale(X: Buffer[f32], s: f32, n: u32)" in html
    assert "OpEntryPoint GLCompute" in html and "OpStore" in html       # the disassembly
    assert "PhysicalStorageBufferAddresses" in html                     # capabilities
    store = _line_of(scale.fn, "# STORE")
    # every link has its target; the store's IR line links to the source line of the store
    assert page.links and all(h.startswith("#") and h[1:] in page.ids for h in page.links)
    targets = {page.link_text[h].strip(): h[1:] for h in page.links}
    target = targets[f"# test_jupyter.py:{store}"]
    assert "X[i] = X[i] * s" in page.text[target] and str(store) in page.text[target]


def test_inline_monospace_and_no_wrapping():
    html = scale.compile()._repr_html_()
    page = Page(html)
    for tag, style in page.styles:
        if tag in ("pre", "code"):
            assert "monospace" in style, (tag, style)     # JupyterLab's pre {font-family: inherit}
        if tag == "a":
            assert "white-space: nowrap" in style
    assert any(tag == "pre" and "white-space: pre" in style for tag, style in page.styles)


def test_two_displays_have_distinct_anchors():
    a, b = Page(scale.compile()._repr_html_()), Page(scale.compile()._repr_html_())
    assert not set(a.ids) & set(b.ids)


def test_kernel_launch_result_and_coopmat_displays():
    page = Page(scale._repr_html_())
    assert "scale(X: Buffer[f32], s: f32, n: u32)" in scale._repr_html_()
    listing = "".join(page.text.values())
    assert "X[i] = X[i] * s" in listing and "def scale" in listing
    r = scale[1](np.zeros(64, np.float32), 2.0, 64, backend="emulator", repeat=3)
    html = r._repr_html_()
    Page(html)
    assert "emulator" in html and f"{r.time_ms:.3f} ms" in html and "3: " in html
    t = pc.coopmat[pc.f16, pc.Subgroup, 16, 8, pc.UseB]
    html = t._repr_html_()
    Page(html)
    assert "16 rows x 8 columns" in html and "MatrixBKHR" in html and "f16" in html


def test_highlighting_with_and_without_pygments(monkeypatch):
    pytest.importorskip("pygments")
    colored = highlight("x = a + 1  # note")
    assert "<span" in colored and "style=" in colored
    monkeypatch.setitem(sys.modules, "pygments", None)       # as if it were not installed
    assert highlight("x = a < 1") == "x = a &lt; 1"
    Page(scale.compile()._repr_html_())                       # still renders


CELL = '''import pycoop as pc
from pycoop import f32, u32
@pc.kernel(workgroup_size=64)
def cell_kernel(X: pc.Buffer[f32], n: u32):
    i = pc.global_invocation_id.x
    X[i] = X[i] * 2.0
@pc.kernel(workgroup_size=64)
def cell_bad(X: pc.Buffer[f32], n: u32):
    X[0] = X[1] + n
'''


@pytest.fixture
def notebook(monkeypatch):
    """A cell run as ipykernel runs it: compiled from a temporary file name that the shell's
    compiler maps to execution count 4, its source in linecache."""
    IPython = pytest.importorskip("IPython")
    from IPython.core.compilerop import CachingCompiler

    class KernelCompiler(CachingCompiler):           # like ipykernel's XCachingCompiler
        def get_code_name(self, raw_code, transformed_code, number):
            return "/tmp/ipykernel_4242/2530548090.py"
    cc = KernelCompiler()
    name = cc.cache(CELL, number=4)
    monkeypatch.setattr(IPython, "get_ipython", lambda: types.SimpleNamespace(compile=cc))
    scope: dict = {}
    exec(compile(CELL, name, "exec"), scope)
    yield scope
    linecache.cache.pop(name, None)


def test_notebook_cells_are_named_as_cells(notebook):
    k = notebook["cell_kernel"]
    html = k.compile()._repr_html_()
    assert "2530548090" not in html and "ipykernel" not in html
    page = Page(html)
    assert any(t.strip() == "# In [4], line 6" for t in page.link_text.values())
    assert "In [4], line 3" in html                               # the listing's header
    with pytest.raises(pc.CompileError) as e:
        notebook["cell_bad"].compile()
    assert str(e.value).startswith("In [4], line 9, column 12: operands of `+` have different types")
    assert "X[0] = X[1] + n" in str(e.value)
    assert "In [4], line 3" in k._repr_html_()              # from the decorator line


def test_array_display_shows_shape_dtype_backend_and_contents():
    a = pc.asarray(np.arange(10, dtype=np.float32), backend="emulator")
    html = a._repr_html_()
    assert "(10,)" in html and "float32" in html and "emulator" in html
    assert "[0. 1. 2. 3. 4. 5. 6. 7. 8. 9.]" in html
    view = a[4:6]
    vhtml = view._repr_html_()
    assert "view offset" in vhtml and "4 elements" in vhtml and "[4. 5.]" in vhtml
    big = pc.zeros(10_000, pc.f32, backend="emulator")._repr_html_()
    assert "..." in big and len(big) < 4000
    assert any("monospace" in style for tag, style in Page(html).styles if tag == "pre")
