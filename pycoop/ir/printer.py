"""Readable text form of the IR (`kernel.ir`), one op per line with its source location."""
from __future__ import annotations

import os

from .core import Block, Module, Op, Value


class _Names:
    def __init__(self):
        self.names: dict[Value, str] = {}

    def __call__(self, v: Value) -> str:
        n = self.names.get(v)
        if n is None:
            n = self.names[v] = f"%{v.name or len(self.names)}"
        return n


def _attrs(op: Op) -> str:
    shown = {k: v for k, v in op.attrs.items() if k not in ("result_types",)}
    if not shown:
        return ""
    return " {" + ", ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in shown.items()) + "}"


def _block(block: Block, name: _Names, indent: int, out: list[str], locs: bool) -> None:
    pad = "  " * indent
    for op in block.ops:
        res = ", ".join(f"{name(r)}: {r.type}" for r in op.results)
        lhs = f"{res} = " if res else ""
        args = ", ".join(name(v) for v in op.operands)
        line = f"{pad}{lhs}{op.name}({args}){_attrs(op)}"
        if op.regions:
            line += " {"
        if locs and op.loc and op.loc.line:
            line = f"{line:<72}  # {os.path.basename(op.loc.file)}:{op.loc.line}"
        out.append(line)
        for i, r in enumerate(op.regions):
            label = {"if": ("then", "else"), "loop": ("cond", "body")}.get(op.name, ("region",) * 9)[i]
            args = ", ".join(f"{name(a)}: {a.type}" for a in r.args)
            out.append(f"{pad}  ^{label}({args}):")
            _block(r, name, indent + 2, out, locs)
        if op.regions:
            out.append(f"{pad}}}")


def print_module(m: Module, *, locs: bool = True) -> str:
    name = _Names()
    fn = m.kernel
    for p, n in zip(fn.params, m.param_names):
        name.names[p] = f"%{n}"
    params = ", ".join(f"%{n}: {p.type}" for p, n in zip(fn.params, m.param_names))
    out = [f"kernel {fn.name}({params}) workgroup_size={m.workgroup_size} "
           f"subgroup_size={m.subgroup_size} fp={m.fp} {{"]
    _block(fn.body, name, 1, out, locs)
    out.append("}")
    for f in m.functions:
        params = ", ".join(f"{name(p)}: {p.type}" for p in f.params)
        out.append(f"func {f.name}({params}) -> {f.result_type} {{")
        _block(f.body, name, 1, out, locs)
        out.append("}")
    return "\n".join(out) + "\n"
