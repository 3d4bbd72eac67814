"""HTML display of compiled kernels in Jupyter: signature, IR (each op linked to its source
line), capabilities and the SPIR-V disassembly."""
from __future__ import annotations

import html
import os

from .ir.core import walk_block


def _source_table(ck) -> str:
    rows = {}
    for op in walk_block(ck.module.kernel.body):
        if op.loc and op.loc.line:
            rows.setdefault((op.loc.file, op.loc.line), []).append(op.name)
    out = []
    for (f, line), names in sorted(rows.items(), key=lambda kv: kv[0][1]):
        from .errors import Loc
        src = Loc(f, line).source_line().strip()
        out.append(f"<tr id='L{line}'><td>{html.escape(os.path.basename(f))}:{line}</td>"
                   f"<td><code>{html.escape(src)}</code></td><td>{html.escape(', '.join(dict.fromkeys(names)))}</td></tr>")
    return "<table>" + "".join(out) + "</table>"


def _ir_html(ck) -> str:
    lines = []
    for text in ck.ir.splitlines():
        esc = html.escape(text)
        if "  # " in text:
            code, _, where = text.rpartition("  # ")
            line = where.rsplit(":", 1)[-1]
            esc = f"{html.escape(code)}  <a href='#L{line}'># {html.escape(where)}</a>"
        lines.append(esc)
    return "<pre>" + "\n".join(lines) + "</pre>"


def compiled_kernel_html(ck) -> str:
    params = ", ".join(f"{n}: {p.type}" for n, p in zip(ck.module.param_names, ck.module.kernel.params))
    try:
        caps = ", ".join(ck._lower().capabilities)
        spvasm = f"<details><summary>SPIR-V ({len(ck.spv)} bytes)</summary><pre>{html.escape(ck.spvasm)}</pre></details>"
    except Exception as e:          # show the kernel even if lowering fails
        caps, spvasm = "?", f"<pre>lowering failed: {html.escape(str(e))}</pre>"
    return (f"<div><b>pycoop kernel</b> <code>{html.escape(ck.name)}({html.escape(params)})</code> "
            f"workgroup_size={ck.module.workgroup_size} subgroup_size={ck.module.subgroup_size}<br>"
            f"capabilities: {html.escape(caps)}"
            f"<details open><summary>IR</summary>{_ir_html(ck)}</details>"
            f"<details><summary>source lines</summary>{_source_table(ck)}</details>{spvasm}</div>")
