"""Rich displays in Jupyter for kernels, compiled kernels, launch results, cooperative-matrix
types and device arrays (the `_repr_html_` methods of those classes call these functions).

Every style is inline: JupyterLab's stylesheet sets `pre {font-family: inherit}`, which would
otherwise turn IR and SPIR-V into a proportional font. Locations never wrap (`white-space:
nowrap`), and code of a notebook cell is named as the cell, `In [4], line 3`, not by
ipykernel's temporary file name. Python source is highlighted with pygments when it is
installed (the optional extra `pycoop[jupyter]`) and shown plain otherwise. Each IR line links to
the source line that made it, and so does each OpLine of the SPIR-V disassembly.
"""
from __future__ import annotations

import html
import inspect
import itertools
import linecache
import os

from .errors import cell_label
import numpy as np

MONO = ("font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, 'Liberation Mono', "
        "monospace; font-size: 12px; line-height: 1.4")
PRE = f"{MONO}; white-space: pre; margin: 0; padding: 4px; overflow-x: auto; text-align: left"
NOWRAP = "white-space: nowrap"
MUTED = "color: #888"
_ids = itertools.count()


def _uid(kind: str) -> str:
    """A prefix unique in the notebook page, so anchors of two displays never collide."""
    return f"pycoop-{kind}-{os.getpid()}-{next(_ids)}"


def location(file: str, line: int) -> str:
    """`In [4], line 3` for notebook code, else `name.py:3` (the file's base name)."""
    cell = cell_label(file)
    return f"{cell}, line {line}" if cell else f"{os.path.basename(file)}:{line}"


def highlight(code: str) -> str:
    """One line of Python as HTML with inline colours (pygments), or escaped without it."""
    try:
        from pygments import highlight as _highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer
    except ImportError:
        return html.escape(code)
    return _highlight(code, PythonLexer(), HtmlFormatter(noclasses=True, nowrap=True)).rstrip("\n")


def _code(text: str) -> str:
    return f"<code style=\"{MONO}\">{html.escape(text)}</code>"


def _table(rows: list[tuple[str, str]]) -> str:
    cells = "".join(f"<tr><th style='text-align: left; {NOWRAP}; padding-right: 1em'>{k}</th>"
                    f"<td style='text-align: left'>{v}</td></tr>" for k, v in rows)
    return f"<table>{cells}</table>"


def _details(summary: str, body: str, open_: bool = False) -> str:
    return (f"<details{' open' if open_ else ''}><summary style='cursor: pointer'>{summary}"
            f"</summary>{body}</details>")


# ------------------------------------------------------------------ source listings
def _listing(uid: str, file: str, lines: list[int], marked: set[int]) -> str:
    """The lines of `file`, each with its anchor `{uid}-{line}`, a gap shown as an ellipsis;
    lines that made IR ops are marked."""
    out, prev = [], None
    for n in lines:
        text = linecache.getline(file, n).rstrip("\n")
        if prev is not None and n != prev + 1:
            out.append(f"<span style='{MUTED}'>{'⋮':>5}</span>")
        mark = "background: #fff5b1;" if n in marked else ""
        out.append(f"<span id='{uid}-{n}' style='{mark}'><span style='{MUTED}; user-select: none'>"
                   f"{n:>5}  </span>{highlight(text)}</span>")
        prev = n
    head = f"<div style='{NOWRAP}; {MUTED}'>{html.escape(location(file, lines[0]))}</div>"
    return head + f"<pre style=\"{PRE}\">" + "\n".join(out) + "</pre>"


def _function_lines(fn) -> tuple[str, list[int]] | None:
    try:
        src, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    return fn.__code__.co_filename, list(range(start, start + len(src)))


class _Sources:
    """The files and lines a display shows, and the anchor of each line."""

    def __init__(self, uid: str):
        self.uid, self.files, self.marked = uid, {}, {}

    def add(self, file: str, lines, marked=()) -> None:
        self.files.setdefault(file, set()).update(lines)
        self.marked.setdefault(file, set()).update(marked)

    def anchor(self, file: str, line: int) -> str:
        return f"{self.uid}-{list(self.files).index(file)}-{line}"

    def html(self) -> str:
        return "".join(_listing(f"{self.uid}-{i}", f, sorted(lines), self.marked[f])
                       for i, (f, lines) in enumerate(self.files.items()))


# ------------------------------------------------------------------ kernels
def _signature(k) -> str:
    return ", ".join(f"{p.name}: {p.type if p.type else 'Const'}"
                     + ("" if p.default is inspect.Parameter.empty else f" = {p.default!r}")
                     for p in k.params)


def kernel_html(k) -> str:
    """A kernel: its signature, sizes, source, and the specialisations compiled so far."""
    sources = _Sources(_uid("kernel"))
    found = _function_lines(k.fn)
    if found:
        sources.add(*found)
    specs = [ck for ck in k._cache.values()]
    compiled = "".join(f"<li>{_code(repr(ck))}</li>" for ck in specs) or "<li>none yet</li>"
    rows = [("workgroup_size", _code(str(k.workgroup_size))),
            ("subgroup_size", _code(str(k.subgroup_size or "launch / PYCOOP_SUBGROUP_SIZE"))),
            ("compiled", f"<ul style='margin: 0'>{compiled}</ul>")]
    return (f"<div><b>pycoop kernel</b> {_code(f'{k.name}({_signature(k)})')}{_table(rows)}"
            f"{_details('source', sources.html(), open_=True) if found else ''}</div>")


def _ir_html(ck, sources: _Sources) -> str:
    """The IR text, each line's `# file:line` comment replaced by a link to that source line."""
    by_name = {}
    for f in sources.files:
        by_name.setdefault(os.path.basename(f), f)
    out = []
    for text in ck.ir.splitlines():
        code, sep, where = text.rpartition("  # ")
        name, _, line = where.rpartition(":")
        if sep and line.isdigit() and name in by_name:
            file = by_name[name]
            link = (f"<a href='#{sources.anchor(file, int(line))}' style='{MUTED}; {NOWRAP}'>"
                    f"# {html.escape(location(file, int(line)))}</a>")
            out.append(f"{html.escape(code)}  {link}")
        else:
            out.append(html.escape(text))
    return f"<pre style=\"{PRE}\">" + "\n".join(out) + "</pre>"


def _spirv_html(ck, sources: _Sources) -> str:
    """The disassembly, each `OpLine %file line col` followed by a link to that source line
    (OpString holds the path, or the cell's name for notebook code)."""
    files = {cell_label(f) or f: f for f in sources.files}
    strings, out = {}, []
    for text in ck.spvasm.splitlines():
        words = text.split()
        if len(words) == 4 and words[2] == "OpString" and words[3].startswith('"'):
            strings[words[0]] = files.get(words[3].strip('"'))
        file = strings.get(words[1]) if len(words) == 4 and words[0] == "OpLine" else None
        if file is not None and words[2].isdigit():
            line = int(words[2])
            out.append(f"{html.escape(text)}  <a href='#{sources.anchor(file, line)}' "
                       f"style='{MUTED}; {NOWRAP}'># {html.escape(location(file, line))}</a>")
        else:
            out.append(html.escape(text))
    return f"<pre style=\"{PRE}\">" + "\n".join(out) + "</pre>"


def compiled_kernel_html(ck) -> str:
    """A compiled kernel: signature, constants, capabilities, the IR (each op linked to its
    source line), the source, and the SPIR-V disassembly."""
    sources = _Sources(_uid("ck"))
    found = _function_lines(ck.kernel.fn)
    used = {}
    for op in ck.module.walk():                      # the kernel's ops, then its functions'
        if op.loc and op.loc.line:
            used.setdefault(op.loc.file, set()).add(op.loc.line)
    if found:
        sources.add(found[0], found[1], used.get(found[0], ()))
    for file, lines in used.items():
        sources.add(file, lines, lines)
    params = ", ".join(f"{n}: {p.type}" for n, p in zip(ck.module.param_names, ck.module.kernel.params))
    try:
        low = ck._lower()
        caps = ", ".join(low.capabilities)
        exts = ", ".join(low.extensions) or "none"
        spvasm = _details(f"SPIR-V ({len(ck.spv)} bytes, {ck.target})", _spirv_html(ck, sources))
    except Exception as e:          # show the kernel even if lowering fails
        caps = exts = "?"
        spvasm = f"<pre style=\"{PRE}\">lowering failed: {html.escape(str(e))}</pre>"
    rows = [("workgroup_size", _code(str(ck.module.workgroup_size))),
            ("subgroup_size", _code(str(ck.module.subgroup_size))),
            *([("constants", _code(", ".join(f"{k}={v!r}" for k, v in ck.consts.items())))]
              if ck.consts else []),
            ("capabilities", _code(caps)), ("extensions", _code(exts))]
    return (f"<div><b>pycoop compiled kernel</b> {_code(f'{ck.name}({params})')}{_table(rows)}"
            f"{_details('IR', _ir_html(ck, sources), open_=True)}"
            f"{_details('source', sources.html())}{spvasm}</div>")


# ------------------------------------------------------------------ values
def launch_result_html(r) -> str:
    """The backend and times of a launch, or why it has none (captured, failed)."""
    missing = r._missing()
    if missing is not None:
        rows = [("backend", _code(r.backend)), ("times", html.escape(missing))]
        return f"<div><b>pycoop launch</b>{_table(rows)}</div>"
    runs = ", ".join(f"{t:.3f}" for t in r.times_ms)
    what = "device time (timestamps)" if r.backend == "vulkan" else "wall time"
    rows = [("backend", _code(r.backend)), ("fastest", f"{r.time_ms:.3f} ms ({what})"),
            ("runs", f"{len(r.times_ms)}: {runs} ms" if len(r.times_ms) > 1 else "1")]
    return f"<div><b>pycoop launch</b>{_table(rows)}</div>"


def statistics_html(s) -> str:
    """A KernelStatistics: each statistic's value, its description as the cell's tooltip."""
    rows = [(html.escape(n), f'<span title="{html.escape(s.descriptions.get(n, ""))}">'
                              f'{_code(str(v))}</span>') for n, v in s.values.items()]
    return (f"<div><b>{html.escape(s.kernel)}</b> on {html.escape(s.device)} "
            f"({html.escape(s.executable)}, subgroup size {s.subgroup_size}){_table(rows)}</div>")


def coopmat_type_html(t) -> str:
    rows = [("component", _code(str(t.component))), ("scope", _code(t.scope.name)),
            ("shape", f"{t.rows} rows x {t.cols} columns"),
            ("use", f"{_code(t.use.name)} (SPIR-V {_code(t.use.value)})")]
    return f"<div><b>pycoop cooperative matrix type</b> {_code(repr(t))}{_table(rows)}</div>"


def array_html(a) -> str:
    """Shape, dtype, backend, view offset and size, and the contents as NumPy prints them
    (elided past a few values). Reading the contents waits for the launches that write them,
    as `a.numpy()` does; an array whose device was lost shows that instead of its data."""
    rows = [("shape", _code(str(a.shape))), ("dtype", _code(a.dtype.name)),
            ("backend", _code(a.backend)), ("bytes", f"{a.nbytes:,}")]
    if a.offset:
        rows.append(("view offset", f"{a.offset} elements"))
    try:
        body = np.array2string(a.numpy(), threshold=64, edgeitems=3)
    except Exception as e:                       # noqa: BLE001  (a display must not raise)
        body = f"(contents unavailable: {e})"
    return (f"<div><b>pycoop array</b>{_table(rows)}"
            f"<pre style=\"{PRE}\">{html.escape(body)}</pre></div>")
