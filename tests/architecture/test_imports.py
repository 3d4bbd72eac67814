"""The package's imports follow the pipeline: every pycoop module imports at top level, and
the graph of imports between pycoop's modules (function-local ones included) has no cycle.

Layers, bottom to top (a module may import only its own layer and those below):
errors/knobs/version < types < spirv < ir < codegen and the emulator's memories (what ops
touch) < ops < the emulator's machine and fast paths (which run ops) < runtime < cache <
frontend < kernels and tools (autotune, cli, jupyter, plot, testing).
The few imports that stay inside functions are listed in LAZY with the reason.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "pycoop"

# (module, imported module): imports kept inside functions, and why
LAZY = {
    # pyvulkan loads the Vulkan loader: only a Vulkan launch or query pays for it
    ("pycoop.runtime.vulkan", "pycoop.runtime.vulkan.instance"),
    ("pycoop.runtime.vulkan", "pycoop.runtime.vulkan.runtime"),
    # optional extras (matplotlib, pygments), imported when a figure or a notebook display is made
    ("pycoop.autotune", "pycoop.plot"),
}

LAYERS = [
    {"errors", "knobs", "version"},
    {"types"},
    {"spirv"},
    {"ir"},
    {"codegen", "emulator.memory", "emulator.lazy", "emulator.memo"},
    {"ops"},
    {"emulator"},
    {"runtime"},
    {"cache"},
    {"frontend"},
    {"kernels", "autotune", "cli", "demo", "jupyter", "plot", "testing", "__main__", "__init__"},
]


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path):
    """(imported pycoop module, line, at top level) for every import in `path`."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    typing_only = set()           # `if TYPE_CHECKING:` blocks: annotations, never run
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            typing_only.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod] if node.module else [f"{mod}.{a.name}" for a in node.names]
            if node.module:       # `from .x import y` may import the submodule y
                targets += [f"{mod}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        for t in targets:
            if t == "pycoop" or t.startswith("pycoop."):
                yield t, node.lineno, id(node) in top


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _resolve(target: str, modules: dict) -> str | None:
    while target and target not in modules:
        target = target.rsplit(".", 1)[0] if "." in target else ""
    return target or None


def _layer(module: str) -> int:
    rel = module.removeprefix("pycoop").lstrip(".") or "__init__"
    best = None
    for i, names in enumerate(LAYERS):
        for n in names:
            if (rel == n or rel.startswith(n + ".")) and (best is None or len(n) > best[1]):
                best = (i, len(n))
    assert best is not None, f"{module} belongs to no layer"
    return best[0]


def _edges():
    modules = _modules()
    for name, path in modules.items():
        for target, line, top in _imports(path):
            dep = _resolve(target, modules)
            if dep is not None and dep != name and not name.startswith(dep + "."):
                yield name, dep, line, top


def test_imports_are_at_top_level():
    local = sorted(f"{m} line {line}: imports {d}" for m, d, line, top in _edges()
                   if not top and (m, d) not in LAZY)
    assert local == []


def test_every_lazy_import_is_still_needed():
    kept = {(m, d) for m, d, _, top in _edges() if not top}
    assert LAZY <= kept, f"no longer imported lazily: {LAZY - kept}"


def test_no_module_imports_a_higher_layer():
    up = sorted(f"{m} ({_layer(m)}) imports {d} ({_layer(d)}) at line {line}"
                for m, d, line, _ in _edges() if _layer(d) > _layer(m) and (m, d) not in LAZY)
    assert up == []


def test_the_import_graph_has_no_cycle():
    graph: dict[str, set] = {}
    for m, d, _, _ in _edges():
        graph.setdefault(m, set()).add(d)
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 1:
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
