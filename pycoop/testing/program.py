"""The fuzzer's program representation: expression and statement trees that print as pycoop
Python source.

Kernels are generated as trees rather than text so that the shrinker can delete statements and
replace subexpressions and print the result again. Each node carries what the generator knew
when it built it (type, whether the shrinker may touch it), nothing else: the meaning of a
program is its printed source, which is what pycoop traces.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Expr:
    """`fmt` is the node's text with `{0}`, `{1}`, ... standing for its children's text.

    `type` is a pycoop ScalarType name ("i32", "f16", ...) or "bool". `fixed` nodes are
    guards that keep the program free of undefined behaviour (a divisor made non-zero, a shift
    amount masked below the width, a float clamped before its conversion to an integer): the
    shrinker may simplify their operands but never replaces the node itself."""
    fmt: str
    args: list["Expr"] = field(default_factory=list)
    type: str = "bool"
    fixed: bool = False

    def render(self) -> str:
        return self.fmt.format(*(a.render() for a in self.args)) if self.args else self.fmt

    def nodes(self):
        """Pre-order walk of (node, parent, index in parent.args)."""
        stack = [(self, None, -1)]
        while stack:
            node, parent, i = stack.pop()
            yield node, parent, i
            stack.extend((c, node, j) for j, c in reversed(list(enumerate(node.args))))


@dataclass
class Stmt:
    """One statement: a header line (`head` formatted with `exprs`) and, for compound
    statements, blocks of nested statements. `blocks` is a list of (label, body): the first
    label is None (the body under the header), later ones are e.g. "else:". `protected`
    statements are what keeps the program valid and UB-free (the increment of a `while`
    counter, the write that initialises a shared array): the shrinker never deletes them."""
    head: str
    exprs: list[Expr] = field(default_factory=list)
    blocks: list[tuple[str | None, list["Stmt"]]] = field(default_factory=list)
    protected: bool = False

    def render(self, indent: int, out: list[str]) -> None:
        pad = "    " * indent
        out.append(pad + self.head.format(*(e.render() for e in self.exprs)))
        for label, body in self.blocks:
            if label is not None:
                out.append(pad + label)
            if body:
                for s in body:
                    s.render(indent + 1, out)
            else:
                out.append(pad + "    pass")


@dataclass
class Function:
    """A module-level function: `decorator` (e.g. "@pc.func"), `signature` (the `def` line
    without the body), its statements."""
    decorator: str
    signature: str
    body: list[Stmt]

    def render(self, out: list[str]) -> None:
        out.append(self.decorator)
        out.append(self.signature)
        if self.body:
            for s in self.body:
                s.render(1, out)
        else:
            out.append("    pass")


@dataclass
class Program:
    """A generated test case: prelude lines (imports, matrix types), helper functions, the
    kernel (last function, named `kern`), and how to launch it: GRID workgroups, buffers of
    LENGTH[name] elements, inputs drawn from SEED (integers in [-R, R] for buffers named in
    RANGES, else values over the type's range). These are module constants of the printed
    source so that the printed program reruns on its own (see `runner.make_args`)."""
    seed: int
    features: str
    prelude: list[str]
    functions: list[Function]
    grid: int
    length: dict[str, int]
    scalars: dict[str, object] = field(default_factory=dict)
    ranges: dict[str, int] = field(default_factory=dict)

    def render(self) -> str:
        out = [f'"""Random pycoop kernel: seed {self.seed}, features {self.features}.',
               "Run it: python THIS_FILE (emulator and Vulkan, compared)", '"""',
               "import pycoop as pc",
               "from pycoop import f16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64",
               "", *self.prelude,
               f"GRID = {self.grid}",
               f"LENGTH = {self.length!r}",
               f"SCALARS = {self.scalars!r}",
               *([f"RANGES = {self.ranges!r}"] if self.ranges else []),
               f"SEED = {self.seed}", ""]
        for f in self.functions:
            out.append("")
            f.render(out)
        out += ["", "", 'if __name__ == "__main__":       # run on both backends and compare',
                "    import sys", "    from pycoop.testing.fuzz import main",
                '    sys.exit(main(["--replay", __file__, *sys.argv[1:]]))']
        return "\n".join(out) + "\n"

    def statement_lists(self):
        """Every statement list of the program (function bodies and nested blocks), outermost
        first: the shrinker edits these in place."""
        todo = [f.body for f in self.functions]
        while todo:
            body = todo.pop(0)
            yield body
            for s in body:
                todo.extend(b for _, b in s.blocks)

    def expressions(self):
        """Every expression root with its statement."""
        for body in self.statement_lists():
            for s in body:
                for e in s.exprs:
                    yield e
