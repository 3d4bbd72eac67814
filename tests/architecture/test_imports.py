"""The package's imports follow the pipeline: every pycoop module imports at top level, and
the graph of imports between pycoop's modules (function-local ones included) has no cycle.

Layers, bottom to top (a module may import only its own layer and those below):
errors/knobs/version/jupyter < types < spirv < ir < codegen and the emulator's memories (what ops
touch) < ops < the emulator's machine and fast paths (which run ops) < runtime < cache <
frontend < kernels and tools (autotune, cli, plot, testing). Only modules that load pyvulkan
are imported inside functions (see VULKAN_LOADER).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "pycoop"

# The one kind of import kept inside functions: a module that loads pyvulkan when imported
# (VULKAN_LOADER, and whatever imports it) is imported only where Vulkan is used, because
# pyvulkan dlopens the Vulkan loader, which a machine may lack, and pycoop works there on the
# emulator.
VULKAN_LOADER = "pycoop.runtime.vulkan.ext"      # runs load_vulkan() at import

LAYERS = [
    {"errors", "knobs", "version", "jupyter"},
    {"types"},
    {"spirv"},
    {"ir"},
    {"codegen", "emulator.memory", "emulator.lazy", "emulator.memo"},
    {"ops"},
    {"emulator"},
    {"runtime"},
    {"cache"},
    {"frontend"},
    {"kernels", "autotune", "cli", "demo", "plot", "testing", "__main__", "__init__"},
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
            # `from x import y` imports the submodule x.y when there is one, else names of x
            subs = [f"{mod}.{a.name}" for a in node.names]
            targets = subs if all(s in _MODULES for s in subs) else [mod] + [
                s for s in subs if s in _MODULES]
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


_MODULES = _modules()


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


def _loads_vulkan() -> set[str]:
    """The modules whose import (top-level imports, transitively) loads pyvulkan."""
    importers: dict[str, set] = {}
    for m, d, _, top in _edges():
        if top:
            importers.setdefault(d, set()).add(m)
    found, todo = {VULKAN_LOADER}, [VULKAN_LOADER]
    while todo:
        for m in importers.get(todo.pop(), ()):
            if m not in found:
                found.add(m)
                todo.append(m)
    return found


def _lazy(edge) -> bool:
    return edge[1] in _loads_vulkan()


def test_imports_are_at_top_level():
    local = sorted(f"{m} line {line}: imports {d}" for m, d, line, top in _edges()
                   if not top and not _lazy((m, d)))
    assert local == []


def test_importing_pycoop_does_not_load_pyvulkan():
    loading = _loads_vulkan()
    top = {m for m, d, _, t in _edges() if t}
    reached, todo = set(), ["pycoop"]
    graph: dict[str, set] = {}
    for m, d, _, t in _edges():
        if t:
            graph.setdefault(m, set()).add(d)
    while todo:
        n = todo.pop()
        for d in graph.get(n, ()):
            if d not in reached:
                reached.add(d)
                todo.append(d)
    assert top and not (reached & loading), sorted(reached & loading)


def test_no_module_imports_a_higher_layer():
    up = sorted(f"{m} ({_layer(m)}) imports {d} ({_layer(d)}) at line {line}"
                for m, d, line, _ in _edges() if _layer(d) > _layer(m))
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
