"""Source transformation of kernel / helper functions so ordinary Python control flow can
depend on runtime values.

`if`, `for ... in range(...)`, `while`, `and`/`or`/`not` and `x if c else y` are rewritten into
calls of pycoop.frontend.control, which evaluates them in Python when the condition/bounds are
plain Python values (metaprogramming: unrolled, specialised) and records structured IR when
they are runtime values. Line and column numbers of the user's source are preserved.
"""
from __future__ import annotations

import ast
import copy
import inspect
import textwrap
import types

from ..errors import CompileError, Loc
from . import control
from .control import PASSED

_PC = "__pc"


def _names_stored(stmts: list[ast.stmt], *, bases: bool) -> list[str]:
    """Names bound by `stmts` (not inside nested functions). With `bases`, also the base name
    of subscript/attribute targets (containers mutated in place)."""
    out: dict[str, None] = {}

    class V(ast.NodeVisitor):
        def visit_Name(self, n):
            if isinstance(n.ctx, ast.Store) and not n.id.startswith(_PC):
                out[n.id] = None

        def _base(self, n):
            while isinstance(n, (ast.Subscript, ast.Attribute)):
                n = n.value
            if bases and isinstance(n, ast.Name) and not n.id.startswith(_PC):
                out[n.id] = None

        def visit_Subscript(self, n):
            if isinstance(n.ctx, ast.Store):
                self._base(n)
            self.generic_visit(n)

        def visit_Attribute(self, n):
            if isinstance(n.ctx, ast.Store):
                self._base(n)
            self.generic_visit(n)

        def visit_AugAssign(self, n):
            if isinstance(n.target, ast.Name):
                out[n.target.id] = None
            else:
                self._base(n.target)
            self.visit(n.value)

        def visit_FunctionDef(self, n):
            if not n.name.startswith(_PC):
                out[n.name] = None

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_Lambda(self, n):
            pass

        def visit_ListComp(self, n):
            pass

        visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_ListComp

        def visit_ClassDef(self, n):
            out[n.name] = None

    for s in stmts:
        V().visit(s)
    return list(out)


# list/dict methods that change the container in place
_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update",
             "setdefault", "popitem", "__setitem__", "__delitem__"}


def _names_passed(stmts: list[ast.stmt], local: set[str]) -> list[str]:
    """Local variables that `stmts` pass to calls (`helper(xs)`) or call a mutating method of
    (`xs.append(v)`): a helper may change a list or dict they hold, so a rewritten loop or `if`
    carries them like the variables it assigns (the runtime keeps only lists and dicts)."""
    out: dict[str, None] = {}
    for n in (n for s in stmts for n in ast.walk(s)):
        if not isinstance(n, ast.Call):
            continue
        args = [a.value if isinstance(a, ast.Starred) else a for a in n.args]
        args += [kw.value for kw in n.keywords]
        if isinstance(n.func, ast.Attribute) and n.func.attr in _MUTATORS:
            args.append(n.func.value)
        for a in args:
            while isinstance(a, (ast.Subscript, ast.Attribute)):  # M[0].reverse(): M changes
                a = a.value
            if isinstance(a, ast.Name) and a.id in local and not a.id.startswith(_PC):
                out[a.id] = None
    return list(out)


def _has(stmts: list[ast.stmt], kinds: tuple, *, into_loops: bool = True) -> bool:
    """Whether `stmts` contain a node of `kinds` (not inside nested functions, nor inside nested
    loops when into_loops is False)."""
    stack = list(stmts)
    while stack:
        n = stack.pop()
        if isinstance(n, kinds):
            return True
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if not into_loops and isinstance(n, (ast.For, ast.While)):
            stack.extend(n.orelse)
            continue
        stack.extend(ast.iter_child_nodes(n))
    return False


def _call(fn: str, args: list[ast.expr], node: ast.AST, **keywords: ast.expr) -> ast.Call:
    """`__pc.fn(*args)` at `node`'s position. The callee `__pc.fn` is placed on `node`'s first
    line only: CPython puts a method call spanning lines at the end line of its callee, so a
    rewritten `for` or `if` would show its body's last line in tracebacks."""
    line, col = node.lineno, node.col_offset
    func = ast.Attribute(value=ast.Name(_PC, ast.Load(), lineno=line, col_offset=col,
                                        end_lineno=line, end_col_offset=col),
                         attr=fn, ctx=ast.Load(), lineno=line, col_offset=col,
                         end_lineno=line, end_col_offset=col)
    c = ast.Call(func=func, args=args, keywords=[ast.keyword(k, v) for k, v in keywords.items()])
    return ast.copy_location(c, node)


def _tuple(names: list[str], ctx) -> ast.Tuple:
    return ast.Tuple([ast.Name(n, ctx()) for n in names], ctx())


def _lambda(body: ast.expr) -> ast.Lambda:
    args = ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
                         kwarg=None, defaults=[])
    return ast.copy_location(ast.Lambda(args=args, body=body), body)


class _Unsupported(Exception):
    """A break/continue (or return) inside a statement the flag rewrite does not handle (its
    kind is the argument)."""


class _Rewriter(ast.NodeTransformer):
    def __init__(self, free: tuple[str, ...] = ()):
        self.n = 0
        self.scopes: list[set[str]] = [set(free)]   # names bound by each enclosing function
        self.loops: list[ast.stmt] = []             # the loops around the node visited

    def visit_FunctionDef(self, node):
        """Rewrite the loops and `if`s of a function (the kernel, or a helper defined in it),
        then fix the scoping the rewrite changed:
        - a container the function only mutates (`xs[i] = v` inside a rewritten loop or `if`)
          is rebound to itself afterwards: declared nonlocal/global, it stays the enclosing
          function's variable instead of becoming an unassigned local;
        - the function's own locals start as UNDEF, since a rewritten loop or branch passes
          them in before they may have been assigned."""
        a = node.args
        params = {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if p}
        local_names = [n for n in _names_stored(node.body, bases=False) if n not in params]
        own = params | set(local_names)
        self.scopes.append(own)
        self.generic_visit(node)
        self.scopes.pop()
        after = _names_stored(node.body, bases=False)
        rebound = [n for n in after if n not in own and not n.startswith("_pc_")]
        # flags of rewritten break/continue are new locals too
        local_names += [n for n in after if n.startswith("_pc_") and n not in own]
        outer = set().union(*self.scopes)
        stmts: list[ast.stmt] = [ast.Nonlocal([n]) if n in outer else ast.Global([n]) for n in rebound]
        if local_names:     # a variable first bound inside a rewritten loop is passed into it
            stmts.append(ast.Assign([ast.Name(n, ast.Store()) for n in local_names],
                                    ast.Attribute(ast.Name(_PC, ast.Load()), "UNDEF", ast.Load())))
        node.body[:0] = [ast.fix_missing_locations(ast.copy_location(d, node.body[0])) for d in stmts]
        return node

    def _fresh(self, what: str) -> str:
        self.n += 1
        return f"{_PC}_{what}_{self.n}"

    def _fn(self, name: str, params: list[str], body: list[ast.stmt], ret: list[str], node) -> ast.FunctionDef:
        """def name(*params): body; return (ret...) — `return X` inside becomes a Return marker."""
        body = [_ReturnMarker(ret).visit(s) for s in body]
        body.append(ast.Return(_tuple(ret, ast.Load)))
        fn = ast.FunctionDef(
            name=name,
            args=ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params], vararg=None,
                               kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
            body=body, decorator_list=[], returns=None, type_params=[])
        return ast.fix_missing_locations(ast.copy_location(fn, node))

    def _finish(self, node, call: ast.Call, names: list[str], has_return: bool) -> list[ast.stmt]:
        r = self._fresh("r")
        out: list[ast.stmt] = [ast.Assign([ast.Name(r, ast.Store())], call)]
        if has_return:
            out.append(ast.If(test=ast.Attribute(ast.Name(r, ast.Load()), "returned", ast.Load()),
                              body=[ast.Return(ast.Attribute(ast.Name(r, ast.Load()), "value", ast.Load()))],
                              orelse=[]))
        if names:      # variables only passed to calls come after these: their lists and
            # dicts were updated in place, so they are not rebound (nor made locals here)
            values = ast.Attribute(ast.Name(r, ast.Load()), "values", ast.Load())
            out.append(ast.Assign([_tuple(names, ast.Store)],
                                  ast.Subscript(values, ast.Slice(None, ast.Constant(len(names))),
                                                ast.Load())))
        return [ast.fix_missing_locations(ast.copy_location(s, node)) for s in out]

    def _loc_arg(self, node) -> ast.Constant:
        return ast.Constant((node.lineno, node.col_offset + 1))

    # ---------------------------------------------------------------- statements
    def visit_If(self, node: ast.If):
        self.generic_visit(node)
        if _has(node.body + node.orelse, (ast.Break, ast.Continue), into_loops=False):
            # break/continue belong to an enclosing trace-time loop: a Python `if` whose
            # condition must then be a Python value (the error says which loop and why)
            loop = self.loops[-1] if self.loops else None
            why = ("a loop over a Python iterable" if isinstance(loop, ast.For) and
                   not getattr(loop, "_pc_python_only", None) and not loop.orelse else
                   f"the loop at line {loop.lineno}, which {self._python_only(loop)}"
                   if loop is not None else "a loop")
            node.test = _call("python_if", [node.test, ast.Constant(why),
                                            self._loc_arg(node)], node.test)
            ast.fix_missing_locations(node)
            return node
        names, marked, stored = self._names(node.body + node.orelse, ())
        has_ret = _has(node.body + node.orelse, (ast.Return,))
        t, e = self._fresh("then"), self._fresh("else")
        fns = [self._fn(t, names, node.body, names, node),
               self._fn(e, names, node.orelse or [ast.Pass()], names, node)]
        call = _call("if_", [node.test, ast.Name(t, ast.Load()), ast.Name(e, ast.Load()),
                             _tuple(names, ast.Load), ast.Constant(marked), self._loc_arg(node)],
                     node)
        return fns + self._finish(node, call, stored, has_ret)

    def _names(self, stmts: list[ast.stmt], skip: tuple) -> tuple[list[str], tuple, list[str]]:
        """The variables a rewritten loop or `if` over `stmts` takes and gives back: those it
        assigns, then local ones it only passes to calls; the same as the names the runtime
        gets, the latter marked with PASSED; and the assigned ones alone."""
        stored = [n for n in _names_stored(stmts, bases=True) if n not in skip]
        local = set().union(*self.scopes[1:])          # not scopes[0]: the free variables
        passed = [n for n in _names_passed(stmts, local) if n not in stored and n not in skip]
        return stored + passed, tuple(stored) + tuple(n + PASSED for n in passed), stored

    def _flags(self, node) -> tuple[list[ast.stmt], str] | None:
        """Rewrite `break`/`continue` of this loop into flags (`_pc_brk_N`, `_pc_cnt_N`): the
        statements after one run only while both are false, and the loop stops once the break
        flag is set. None if the loop has neither, or has one inside a statement other than `if`.
        The break flag is returned only if the loop has a `break`: otherwise no statement of the
        body assigns it, so the rewritten loop does not carry it and must not test it."""
        if node.orelse or not _has(node.body, (ast.Break, ast.Continue), into_loops=False):
            return None
        breaks = _has(node.body, (ast.Break,), into_loops=False)
        self.n += 1
        brk, cnt = f"_pc_brk_{self.n}", f"_pc_cnt_{self.n}"

        def assign(name, value):
            return ast.Assign([ast.Name(name, ast.Store())], ast.Constant(value))

        def rewrite(stmts):
            out = []
            for i, st in enumerate(stmts):
                if isinstance(st, (ast.Break, ast.Continue)):
                    out.append(assign(brk if isinstance(st, ast.Break) else cnt, True))
                    return out
                if not _has([st], (ast.Break, ast.Continue), into_loops=False):
                    out.append(st)
                    continue
                if not isinstance(st, ast.If):
                    raise _Unsupported(type(st).__name__.lower())
                out.append(ast.If(st.test, rewrite(st.body) or [ast.Pass()], rewrite(st.orelse)))
                rest = rewrite(stmts[i + 1:])
                if rest:
                    go_on = ast.UnaryOp(ast.Not(), ast.BoolOp(ast.Or(), [ast.Name(brk, ast.Load()),
                                                                         ast.Name(cnt, ast.Load())]))
                    out.append(ast.If(go_on, rest, []))
                return out
            return out

        try:
            body = rewrite(node.body)
        except _Unsupported as e:
            node._pc_python_only = f"has a `break` or `continue` inside a `{e.args[0]}` statement"
            return None
        node.body = [assign(cnt, False), *body]
        pre = [assign(brk, False)]
        for tree in node.body + pre:          # new statements take the loop's position
            for n in ast.walk(tree):
                if isinstance(n, (ast.stmt, ast.expr)) and not hasattr(n, "lineno"):
                    ast.copy_location(n, node)
        return pre, brk if breaks else None

    @staticmethod
    def _python_only(node) -> str:
        """Why a loop stays a Python loop (for the error when its bound is a runtime value)."""
        if node.orelse:
            return "has an `else` clause"
        return getattr(node, "_pc_python_only", "runs while tracing")   # set by _flags

    def visit_For(self, node: ast.For):
        it = node.iter
        # range(...), or X.range(...) (pycoop.range, decided at trace time)
        method = isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "range"
        is_range = (isinstance(it, ast.Call) and isinstance(node.target, ast.Name)
                    and not any(isinstance(a, ast.Starred) for a in it.args)
                    and (method and all(kw.arg for kw in it.keywords)
                         or isinstance(it.func, ast.Name) and it.func.id == "range"
                         and not it.keywords and 1 <= len(it.args) <= 3))
        # a loop over a Python iterable runs while tracing; its break/continue become flags
        # too (for_range iterates it), so an `if` on a runtime value may leave it
        over_python = not is_range and isinstance(node.target, ast.Name) and not node.orelse
        flags = self._flags(node) if is_range or over_python else None
        self.loops.append(node)
        self.generic_visit(node)
        self.loops.pop()
        prior = ast.Name(node.target.id, ast.Load()) if is_range or over_python else None
        if (is_range or over_python) and node.target.id in _names_stored(node.body, bases=False):
            # the body assigns the loop variable: as in Python it holds the body's last value
            # after the loop, so it becomes a variable the loop carries, set from a fresh
            # loop variable at the top of each iteration
            fresh = self._fresh("iv")
            node.body.insert(0, ast.copy_location(ast.Assign(
                [ast.Name(node.target.id, ast.Store())], ast.Name(fresh, ast.Load())),
                node.body[0]))
            node.target = ast.copy_location(ast.Name(fresh, ast.Store()), node.target)
            prior = ast.Attribute(ast.Name(_PC, ast.Load()), "UNDEF", ast.Load())
            ast.fix_missing_locations(node)
        if over_python and flags is not None:
            names, marked, stored = self._names(node.body, (node.target.id,))
            b = self._fresh("body")
            fn = self._fn(b, [node.target.id, *names], node.body, names, node)
            call = _call("for_range", [ast.Tuple([], ast.Load()), ast.Name(b, ast.Load()),
                                       _tuple(names, ast.Load), ast.Constant(marked),
                                       self._loc_arg(node), ast.Constant(flags[1]),
                                       _lambda(it), ast.Dict([], [])], node,
                         prior=prior)
            return flags[0] + [fn] + self._finish(node, call, [node.target.id, *stored],
                                                  _has(node.body, (ast.Return,)))
        if (not is_range or node.orelse
                or _has(node.body, (ast.Break, ast.Continue), into_loops=False)):
            if is_range:     # stays a Python loop: its bounds must be known at trace time
                node.iter = _call("python_range", [
                    it.func, ast.Tuple(it.args, ast.Load()),
                    ast.Dict([ast.Constant(kw.arg) for kw in it.keywords], [kw.value for kw in it.keywords]),
                    ast.Constant(self._python_only(node)), self._loc_arg(node)], it)
                ast.fix_missing_locations(node)
            return node
        names, marked, stored = self._names(node.body, (node.target.id,))
        has_ret = _has(node.body, (ast.Return,))
        b = self._fresh("body")
        fn = self._fn(b, [node.target.id, *names], node.body, names, node)
        extra = [it.func, ast.Dict([ast.Constant(kw.arg) for kw in it.keywords],
                                   [kw.value for kw in it.keywords])] if method else []
        call = _call("for_range", [ast.Tuple(it.args, ast.Load()), ast.Name(b, ast.Load()),
                                   _tuple(names, ast.Load), ast.Constant(marked),
                                   self._loc_arg(node), ast.Constant(flags and flags[1]),
                                   *extra], node, prior=prior)
        return (flags[0] if flags else []) + [fn] + self._finish(node, call, [node.target.id, *stored],
                                                                 has_ret)

    def visit_While(self, node: ast.While):
        flags = self._flags(node)
        tested = self._test_once(node, flags and flags[1])
        if flags and flags[1]:
            stop = ast.UnaryOp(ast.Not(), ast.Name(flags[1], ast.Load()))
            node.test = ast.copy_location(ast.BoolOp(ast.And(), [stop, node.test]), node.test)
            ast.fix_missing_locations(node)
        self.loops.append(node)
        self.generic_visit(node)
        self.loops.pop()
        if node.orelse or _has(node.body, (ast.Break, ast.Continue), into_loops=False):
            node.test = _call("python_cond", [node.test, ast.Constant(self._python_only(node)),
                                              self._loc_arg(node)], node.test)
            ast.fix_missing_locations(node)
            return node
        names, marked, stored = self._names(node.body, ())
        has_ret = _has(node.body, (ast.Return,))
        c, b = self._fresh("cond"), self._fresh("body")
        cond = ast.fix_missing_locations(ast.copy_location(ast.FunctionDef(
            name=c, args=ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in names], vararg=None,
                                       kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
            body=[ast.Return(node.test)], decorator_list=[], returns=None, type_params=[]), node))
        fn = self._fn(b, names, node.body, names, node)
        call = _call("while_", [ast.Name(c, ast.Load()), ast.Name(b, ast.Load()),
                                _tuple(names, ast.Load), ast.Constant(marked),
                                self._loc_arg(node)], node)
        return ((flags[0] if flags else []) + tested + [cond, fn]
                + self._finish(node, call, stored, has_ret))

    def _test_once(self, node: ast.While, brk: str | None) -> list[ast.stmt]:
        """A test that binds names (`while (x := f()) < n:`) is evaluated into a variable
        before the loop and again at the end of each iteration that does not break, so that
        the loop carries those names and they hold the last test's values after it, as in
        Python. Returns the statements before the loop (none for other tests, and for loops
        that stay Python loops, where Python binds them itself)."""
        if (not any(isinstance(n, ast.NamedExpr) for n in ast.walk(node.test)) or node.orelse
                or _has(node.body, (ast.Break, ast.Continue), into_loops=False)):
            return []
        self.n += 1
        t = f"_pc_test_{self.n}"
        first = ast.copy_location(ast.Assign([ast.Name(t, ast.Store())],
                                             copy.deepcopy(node.test)), node.test)
        again: ast.stmt = ast.Assign([ast.Name(t, ast.Store())], node.test)
        if brk:
            again = ast.If(ast.UnaryOp(ast.Not(), ast.Name(brk, ast.Load())), [again], [])
        node.body.append(ast.fix_missing_locations(ast.copy_location(again, node.test)))
        node.test = ast.copy_location(ast.Name(t, ast.Load()), node.test)
        out = self.visit(ast.fix_missing_locations(first))
        return out if isinstance(out, list) else [out]

    # ---------------------------------------------------------------- expressions
    def visit_Call(self, node: ast.Call):
        """`print(...)`: each argument, and each value formatted in an f-string argument,
        passes `control.printable` first, which refuses a runtime value (print runs once,
        while tracing, and would show the value's IR name)."""
        self.generic_visit(node)
        if not (isinstance(node.func, ast.Name) and node.func.id == "print"):
            return node
        pos = self._loc_arg(node)

        def check(e: ast.expr) -> ast.expr:
            return _call("printable", [ast.Name("print", ast.Load()), e, pos], e)

        for a in node.args:
            for v in ast.walk(a):
                if isinstance(v, ast.FormattedValue):
                    v.value = check(v.value)
        node.args = [ast.Starred(check(a.value), ast.Load()) if isinstance(a, ast.Starred)
                     else a if isinstance(a, ast.JoinedStr) else check(a) for a in node.args]
        return ast.fix_missing_locations(node)

    def visit_BoolOp(self, node: ast.BoolOp):
        self.generic_visit(node)
        fn = "and_" if isinstance(node.op, ast.And) else "or_"
        expr = node.values[0]
        for v in node.values[1:]:
            expr = _call(fn, [expr, _lambda(v)], node)
        return expr

    def visit_UnaryOp(self, node: ast.UnaryOp):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return _call("not_", [node.operand], node)
        return node

    def visit_IfExp(self, node: ast.IfExp):
        self.generic_visit(node)
        return _call("ifexp", [node.test, _lambda(node.body), _lambda(node.orelse)], node)

    def visit_Compare(self, node: ast.Compare):
        """`a < b < c < d` -> `a < (t1 := b) and (t1 < (t2 := c) and t2 < d)`, each later link
        in a lambda inside the one before: every operand is evaluated once, and only while
        the links before it hold, as in Python. The temporaries (`__pc_cmp_N`) are locals of
        the function evaluating the link, read by the lambdas nested in it."""
        self.generic_visit(node)
        if len(node.ops) == 1:
            return self._compare(node.left, node.ops[0], node.comparators[0], node)
        operands, ops = [node.left, *node.comparators], node.ops
        temps = [self._fresh("cmp") for _ in ops[1:]]

        def link(k: int) -> ast.expr:
            left = operands[0] if k == 0 else ast.Name(temps[k - 1], ast.Load())
            right = operands[k + 1]
            if k < len(temps):
                right = ast.NamedExpr(ast.Name(temps[k], ast.Store()), right)
            return ast.fix_missing_locations(self._compare(left, ops[k], right, node))

        expr = link(len(ops) - 1)
        for k in range(len(ops) - 2, -1, -1):
            expr = _call("and_", [link(k), _lambda(expr)], node)
        return expr

    def _compare(self, left: ast.expr, op: ast.cmpop, right: ast.expr, node) -> ast.expr:
        """`left op right` at `node`; `is` and `is not` become `__pc.is_(...)`, which refuses
        a runtime value (its identity is a fact of the trace, not of the kernel)."""
        if isinstance(op, (ast.Is, ast.IsNot)):
            return _call("is_", [left, right, ast.Constant(isinstance(op, ast.IsNot)),
                                 self._loc_arg(node)], node)
        return ast.copy_location(ast.Compare(left, [op], [right]), node)


class _ReturnMarker(ast.NodeTransformer):
    """Inside a generated branch/body function: `return X` -> `return __pc.Return(X, (names))`."""

    def __init__(self, names: list[str]):
        self.names = names

    def visit_Return(self, node: ast.Return):
        value = node.value or ast.Constant(None)
        return ast.copy_location(ast.Return(_call("Return", [value, _tuple(self.names, ast.Load)], node)),
                                 node)

    def visit_FunctionDef(self, node):
        return node     # nested functions keep their own returns

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef


def _nested_return(stmts: list[ast.stmt]) -> bool:
    """A `return` below an if/for/while of this function (not only at its top level)."""
    return any(_has([st], (ast.Return,)) for st in stmts
               if isinstance(st, (ast.If, ast.For, ast.While)))


def _always_returns(stmts: list[ast.stmt]) -> bool:
    """Whether every path through `stmts` ends in a `return` (or a `raise`, or a `while True`
    it does not break out of) rather than falling off their end."""
    for st in stmts:
        if isinstance(st, (ast.Return, ast.Raise)):
            return True
        if isinstance(st, ast.If) and _always_returns(st.body) and _always_returns(st.orelse):
            return True
        if isinstance(st, ast.While) and isinstance(st.test, ast.Constant) and st.test.value \
                and not _has(st.body, (ast.Break,)):
            return True
    return False


def _single_exit(fdef: ast.FunctionDef) -> None:
    """Rewrite a function with `return X` inside branches or loops to one exit: the value goes
    to `_pc_rv`, a flag `_pc_rf` guards what follows and breaks out of loops, and the
    function ends with `return _pc_rv` (so values merge like any other variable)."""
    rf, rv = "_pc_rf", "_pc_rv"

    def assign(name, value):
        return ast.Assign([ast.Name(name, ast.Store())], value)

    def guard(rest):
        return ast.If(ast.UnaryOp(ast.Not(), ast.Name(rf, ast.Load())), rest, [])

    def at(node, where):
        """`node` (and its new parts) at the line of the statement it stands for, so that
        errors inside the rewritten function name the user's lines."""
        for n in ast.walk(node):
            if isinstance(n, (ast.stmt, ast.expr)) and not hasattr(n, "lineno"):
                ast.copy_location(n, where)
        return node

    def block(stmts, in_loop):
        out = []
        for i, st in enumerate(stmts):
            if isinstance(st, ast.Return):
                out += [at(assign(rv, st.value or ast.Constant(None)), st),
                        at(assign(rf, ast.Constant(True)), st)]
                if in_loop:
                    out.append(at(ast.Break(), st))
                return out
            if not _has([st], (ast.Return,)):
                out.append(st)
                continue
            ends = [bool(b) and isinstance(b[-1], ast.Return) for b in (st.body, st.orelse)] \
                if isinstance(st, ast.If) else [False, False]
            if any(ends):
                # a branch that ends in `return`: what follows the `if` runs in the other
                # branch only, so the variables it reads are those of that branch (a guard
                # after the `if` would merge them with the returning branch, where they may
                # have no value)
                then, other = (b if end else b + stmts[i + 1:]
                               for b, end in zip((st.body, st.orelse), ends))
                out.append(at(ast.If(st.test, block(then, in_loop) or [ast.Pass()],
                                     block(other, in_loop)), st))
                return out
            if isinstance(st, ast.If):
                out.append(at(ast.If(st.test, block(st.body, in_loop) or [ast.Pass()],
                                     block(st.orelse, in_loop)), st))
            elif isinstance(st, (ast.For, ast.While)) and not st.orelse:
                loop = ast.For(st.target, st.iter, block(st.body, True), []) if isinstance(st, ast.For) \
                    else ast.While(st.test, block(st.body, True), [])
                out.append(at(loop, st))
                if in_loop:            # a return in an inner loop also leaves this one
                    out.append(at(ast.If(ast.Name(rf, ast.Load()), [ast.Break()], []), st))
            else:
                raise _Unsupported
            rest = block(stmts[i + 1:], in_loop)
            if rest:
                out.append(at(guard(rest), stmts[i + 1]))
            return out
        return out

    body = block(fdef.body, False)
    exit_value = ast.Name(rv, ast.Load())
    if not _always_returns(fdef.body):
        # a path may fall off the end: an error where a runtime condition chose it
        pos = ast.Constant((fdef.lineno, fdef.col_offset + 1))
        exit_value = _call("function_exit", [ast.Name(rf, ast.Load()), exit_value,
                                             ast.Constant(fdef.name), pos], fdef)
    new = [assign(rf, ast.Constant(False)), assign(rv, ast.Constant(None)), *body,
           ast.Return(exit_value)]
    for tree in new:
        for n in ast.walk(tree):
            if isinstance(n, (ast.stmt, ast.expr)) and not hasattr(n, "lineno"):
                ast.copy_location(n, fdef.body[0])
    fdef.body = new


# Statements a kernel cannot mean: what they do happens (or is skipped) while tracing, not in
# the kernel, or the rewrite of loops and branches cannot keep their meaning.
_UNSUPPORTED = {
    ast.Try: ("try", "a kernel raises no Python exceptions at run time: the `except` "
                     "handlers would never run",
              "check the condition with an `if` instead; errors found while tracing are "
              "CompileErrors"),
    ast.With: ("with", "a context manager would run while the kernel is traced, not in the kernel",
               "enter it around the launch (or the compile() call) instead"),
    ast.AsyncWith: ("async with", "kernels are not coroutines", "write plain code"),
    ast.AsyncFor: ("async for", "kernels are not coroutines", "use `for i in range(...)`"),
    ast.AsyncFunctionDef: ("async def", "kernels are not coroutines", "use a plain `def`"),
    ast.Await: ("await", "kernels are not coroutines", "call the function directly"),
    ast.Global: ("global", "a kernel's variables live in the kernel: branches and loops pass "
                           "them in and out, which a global or nonlocal name would bypass",
                 "return the value (from a @pycoop.func) or write it to a buffer"),
}
_UNSUPPORTED[ast.Nonlocal] = ("nonlocal",) + _UNSUPPORTED[ast.Global][1:]
if hasattr(ast, "TryStar"):                            # Python 3.11: try/except*
    _UNSUPPORTED[ast.TryStar] = ("try",) + _UNSUPPORTED[ast.Try][1:]
_YIELD_RULE = ("a kernel or traced function runs once while tracing and cannot be a generator",
               "collect the values in a list and return it (from a @pycoop.func), or define "
               "the generator as a separate helper function")


def _check_statements(fdef: ast.FunctionDef, file: str) -> None:
    """Reject, at their line, the statements kernels do not support (a `try` would otherwise
    lose its handlers silently). `yield` is rejected in the traced function itself only: a
    helper generator defined inside it is ordinary trace-time Python."""
    found = []
    stack: list[tuple[ast.AST, bool]] = [(st, True) for st in fdef.body]
    while stack:
        n, top = stack.pop()
        entry = _UNSUPPORTED.get(type(n))
        if entry is None and top and isinstance(n, (ast.Yield, ast.YieldFrom)):
            entry = ("yield",) + _YIELD_RULE
        if entry is not None:
            found.append((n.lineno, n.col_offset, entry))
        inner = top and not isinstance(n, (ast.FunctionDef, ast.Lambda, ast.ClassDef))
        stack.extend((c, inner) for c in ast.iter_child_nodes(n))
    if found:                                   # the first in the source
        raise _unsupported(*min(found, key=lambda f: f[:2]), file)


def _unsupported(line: int, col: int, entry: tuple[str, str, str], file: str) -> CompileError:
    """The error of a statement kernels do not support (an `_UNSUPPORTED` entry) at its line."""
    what, rule, hint = entry
    return CompileError(f"`{what}` is not supported in a kernel", Loc(file, line, col + 1),
                        rule=rule, hint=hint, rule_id="frontend.unsupported-statement")


def _lazy_parts(n: ast.AST) -> list[ast.AST]:
    """The parts of `n` that the rewrite evaluates later, inside a generated lambda: the right
    side of `and`/`or`, the arms of `x if c else y`, the links of a chained comparison after
    the first."""
    if isinstance(n, ast.BoolOp):
        return n.values[1:]
    if isinstance(n, ast.IfExp):
        return [n.body, n.orelse]
    if isinstance(n, ast.Compare) and len(n.ops) > 1:
        return n.comparators[1:]
    if isinstance(n, ast.For) and not (isinstance(n.iter, ast.Call) and (
            isinstance(n.iter.func, ast.Name) and n.iter.func.id == "range"
            or isinstance(n.iter.func, ast.Attribute) and n.iter.func.attr == "range")) \
            and _has(n.body, (ast.Break, ast.Continue), into_loops=False):
        return [n.iter]     # iterated by the rewrite, from a lambda
    return []


def _own_nodes(stmts: list[ast.stmt]):
    """The nodes of `stmts`, not those inside functions or lambdas they define."""
    stack = list(stmts)
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(n))


def _check_closures(fdef: ast.FunctionDef, file: str) -> None:
    """Refuse a call, inside a loop or `if`, of a function defined in the kernel that reads a
    variable of the kernel the loop or `if` assigns. The loop's or branch's body becomes a
    function of its own whose carried variables are its parameters, so the helper, reading
    the kernel's variable, would see its value from before the loop or `if`."""
    helpers: dict[str, set[str]] = {}            # helper -> the kernel variables it reads
    for n in ast.walk(fdef):
        if n is fdef or not isinstance(n, ast.FunctionDef):
            continue
        # names bound anywhere in it (its parameters and those of what it defines, its
        # variables, comprehension variables): the others it reads are the kernel's
        bound = {m.arg for m in ast.walk(n) if isinstance(m, ast.arg)} | {
            m.id for m in ast.walk(n) if isinstance(m, ast.Name) and isinstance(m.ctx, ast.Store)}
        helpers[n.name] = {m.id for m in ast.walk(n) if isinstance(m, ast.Name)
                           and isinstance(m.ctx, ast.Load) and m.id not in bound}
    if not helpers:
        return
    for node in _own_nodes(fdef.body):
        if not isinstance(node, (ast.For, ast.While, ast.If)):
            continue
        body = node.body + node.orelse
        assigned = set(_names_stored(body, bases=False))
        if isinstance(node, ast.For):
            assigned |= set(_names_stored([ast.Assign([node.target], ast.Constant(0))],
                                          bases=False))
        inside = {n.name for st in body for n in ast.walk(st) if isinstance(n, ast.FunctionDef)}
        for call in _own_nodes(body):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) \
                    and call.func.id in helpers and call.func.id not in inside:
                stale = sorted(helpers[call.func.id] & assigned)
                if stale:
                    raise CompileError(
                        f"{call.func.id}() reads {', '.join(stale)}, which this "
                        f"{'loop' if not isinstance(node, ast.If) else '`if`'} assigns",
                        Loc(file, call.lineno, call.col_offset + 1),
                        rule="pycoop runs the body of a loop or `if` as a function of its own "
                             "whose variables are its parameters, so a function defined "
                             "outside it would read their values from before it",
                        hint=f"pass {', '.join(stale)} to {call.func.id}() as arguments",
                        rule_id="frontend.stale-closure")


def _check_walrus(fdef: ast.FunctionDef, file: str) -> None:
    """Reject `:=` where the rewrite would evaluate it inside a lambda, which would bind the
    name in the lambda and leave the kernel's variable unchanged (a silently wrong value).
    Nested functions, lambdas and comprehensions are rewritten too, so they are checked."""
    # (node, inside a lazily evaluated part, inside the body of a loop or `if`)
    stack: list[tuple[ast.AST, bool, bool]] = [(st, False, False) for st in fdef.body]
    while stack:
        n, lazy, block = stack.pop()
        if block and isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            named = next((m for m in ast.walk(n) if isinstance(m, ast.NamedExpr)), None)
            if named is not None:
                raise CompileError(
                    f"`{named.target.id} := ...` inside a comprehension in a loop or `if`",
                    Loc(file, named.lineno, named.col_offset + 1),
                    rule="a comprehension binds `:=` in the function around it, and pycoop "
                         "may run that part of the kernel as a function of its own (the body "
                         "of a loop or `if`), where the name would not reach the kernel",
                    hint=f"build the list in a for loop and assign {named.target.id} there",
                    rule_id="frontend.walrus-comprehension")
        if isinstance(n, ast.NamedExpr) and lazy:
            raise CompileError(
                f"`{n.target.id} := ...` inside the right side of `and`/`or`, an arm of `x if c "
                "else y`, a later link of a chained comparison or the iterable of a `for` "
                "with `break` or `continue`", Loc(file, n.lineno, n.col_offset + 1),
                rule="pycoop evaluates those parts in a function of their own (only when they "
                     "are needed, as Python does), where `:=` would bind a name of that "
                     "function, not of the kernel",
                hint=f"assign {n.target.id} in a statement before, or use := in the first "
                     "operand", rule_id="frontend.walrus-lazy-operand")
        later = _lazy_parts(n)
        bodies = n.body + n.orelse if isinstance(n, (ast.For, ast.While, ast.If)) else []
        stack.extend((c, lazy or any(c is p for p in later), block or any(c is b for b in bodies))
                     for c in ast.iter_child_nodes(n))


class _DelToUndef(ast.NodeTransformer):
    """`del x` -> `x = UNDEF`: the variable has no value afterwards (a use is a CompileError),
    which branches and loops carry like any other value (a deleted name could not be)."""

    def visit_Delete(self, node: ast.Delete):
        names = [t for t in node.targets if isinstance(t, ast.Name)]
        rest = [t for t in node.targets if not isinstance(t, ast.Name)]
        out: list[ast.stmt] = []
        if names:
            undef = ast.Attribute(ast.Name(_PC, ast.Load()), "UNDEF", ast.Load())
            out.append(ast.Assign([ast.Name(t.id, ast.Store()) for t in names], undef))
        if rest:
            out.append(ast.Delete(rest))
        return [ast.fix_missing_locations(ast.copy_location(s, node)) for s in out]


class _KernelReturns(ast.NodeTransformer):
    """In a kernel: `return X` -> `return __pc.kernel_return(X, pos)`, which rejects a value at
    that line (kernels return nothing); nested functions keep their returns."""

    def visit_Return(self, node: ast.Return):
        if node.value is None or isinstance(node.value, ast.Constant) and node.value.value is None:
            return node
        pos = ast.Constant((node.lineno, node.value.col_offset + 1))
        node.value = _call("kernel_return", [node.value, pos], node.value)
        return ast.fix_missing_locations(node)

    def visit_FunctionDef(self, node):
        return node

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef


def transform(fn: types.FunctionType, *, returns_value: bool = True) -> types.FunctionType:
    """Return `fn` rewritten for tracing (same globals, closure, defaults, file and lines).
    Functions that return a value (not kernels) may return from inside branches and loops."""
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        raise CompileError(f"cannot read the source of {fn.__qualname__}", None,
                           rule="pycoop traces kernels from their Python source",
                           hint="define kernels in a file or a notebook cell, not via exec() of a "
                                "string without source", rule_id="frontend.source-available") from None
    src = "".join(lines)
    dedented = textwrap.dedent(src)
    indent = len(src.split("\n", 1)[0]) - len(dedented.split("\n", 1)[0])
    tree = ast.parse(dedented)
    ast.increment_lineno(tree, start - 1)
    for node in ast.walk(tree):
        if hasattr(node, "col_offset") and indent:
            node.col_offset += indent
            if getattr(node, "end_col_offset", None) is not None:
                node.end_col_offset += indent
    fdef = tree.body[0]
    file = fn.__code__.co_filename
    if isinstance(fdef, ast.AsyncFunctionDef):
        raise _unsupported(fdef.lineno, fdef.col_offset, _UNSUPPORTED[ast.AsyncFunctionDef], file)
    if not isinstance(fdef, ast.FunctionDef):
        raise CompileError(f"{fn.__qualname__} is not a plain function definition",
                           Loc(file, fdef.lineno, fdef.col_offset + 1),
                           rule="pycoop: a kernel or @pycoop.func is a plain `def` (its source is "
                                "transformed)",
                           hint="decorate a `def` statement (not a lambda, an async def or a "
                                "callable object)", rule_id="frontend.plain-def")
    fdef.decorator_list = []
    _check_statements(fdef, file)
    _check_walrus(fdef, file)
    _check_closures(fdef, file)
    fdef = _DelToUndef().visit(fdef)
    if not returns_value:
        fdef.body = [_KernelReturns().visit(st) for st in fdef.body]
    if returns_value and _nested_return(fdef.body):
        try:
            _single_exit(fdef)
        except _Unsupported:
            pass                    # a return inside e.g. `with`: traced as written
    # helpers defined inside return from branches as well (a bare `return` too: it leaves the
    # helper, not the kernel)
    for node in list(ast.walk(fdef)):
        if node is not fdef and isinstance(node, ast.FunctionDef) and _nested_return(node.body):
            try:
                _single_exit(node)
            except _Unsupported:
                pass
    fdef = _Rewriter(fn.__code__.co_freevars).visit(fdef)
    # Wrap in a factory whose parameters are the closure's free variables (plus the control
    # module), so the rewritten function gets the original cells and globals. A helper defined
    # inside a rewritten function may already refer to the control module.
    free = [n for n in fn.__code__.co_freevars if n != _PC] + [_PC]
    # Named apart inside the factory, so the function's own name in its body still means what
    # it meant (e.g. the global @pycoop.func object of a recursive helper); renamed back below.
    fdef.name = f"{_PC}_fn"
    factory = ast.FunctionDef(
        name=f"{_PC}_factory",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in free], vararg=None, kwonlyargs=[],
                           kw_defaults=[], kwarg=None, defaults=[]),
        body=[fdef, ast.Return(ast.Name(fdef.name, ast.Load()))], decorator_list=[], returns=None,
        type_params=[])
    module = ast.fix_missing_locations(ast.Module([ast.copy_location(factory, fdef)], []))
    code = compile(module, fn.__code__.co_filename, "exec")
    fcode = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    icode = next(c for c in fcode.co_consts if isinstance(c, types.CodeType) and c.co_name == fdef.name)
    icode = icode.replace(co_name=fn.__code__.co_name, co_qualname=fn.__code__.co_qualname)
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    cells[_PC] = types.CellType(control)
    closure = tuple(cells[n] for n in icode.co_freevars)
    new = types.FunctionType(icode, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = fn.__kwdefaults__
    return new

