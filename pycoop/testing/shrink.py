"""Test-case reduction: the smallest program that still fails the same way.

Greedy passes over the program tree, repeated until none makes progress: delete a helper
function, delete the shared array with its writes, delete a statement, replace a compound statement by one of its blocks, replace an
expression by a same-typed operand or a literal, launch fewer workgroups. A candidate is kept
when `check` says it still fails with the same signature (see `runner.Outcome`), so an edit
that makes the program invalid (a name left undefined) or changes the failure is rejected.
Guards against undefined behaviour (`Expr.fixed`, `Stmt.protected`) are never removed, so a
reduced mismatch is still a real one.
"""
from __future__ import annotations

import copy
import time
from collections.abc import Callable

from .program import Expr, Program


def _literals(t: str) -> list[Expr]:
    if t == "bool":
        return [Expr("False"), Expr("True")]
    zero = "0.0" if t.startswith("f") else "0"
    one = "1.0" if t.startswith("f") else "1"
    return [Expr(f"{t}({zero})", type=t), Expr(f"{t}({one})", type=t)]


class Shrinker:
    def __init__(self, check: Callable[[Program], bool], max_trials: int = 800,
                 time_limit_s: float = 180.0):
        self.check = check
        self.max_trials = max_trials
        self.deadline = time.monotonic() + time_limit_s
        self.trials = 0

    def _out_of_budget(self) -> bool:
        return self.trials >= self.max_trials or time.monotonic() > self.deadline

    def _try(self, cand: Program) -> bool:
        self.trials += 1
        return self.check(cand)

    def shrink(self, program: Program) -> Program:
        best = copy.deepcopy(program)
        progress = True
        while progress and not self._out_of_budget():
            progress = False
            for step in (self._functions, self._shared, self._statements, self._flatten,
                         self._expressions, self._launch):
                best, changed = step(best)
                progress |= changed
        return best

    # Each pass returns (program, changed) and stops early when the budget is spent.
    def _functions(self, best: Program):
        changed = False
        i = len(best.functions) - 2              # the kernel (last) stays
        while i >= 0 and not self._out_of_budget():
            cand = copy.deepcopy(best)
            del cand.functions[i]
            if self._try(cand):
                best, changed = cand, True
            i -= 1
        return best, changed

    def _shared(self, best: Program):
        """Drop the shared array with all its writes at once (they are protected one by one:
        without a write, a read would see uninitialised memory). A read left anywhere makes
        the candidate fail to trace, so it is rejected."""
        if self._out_of_budget() or not any(st.head.startswith("S = pc.shared")
                                            for st in best.functions[-1].body):
            return best, False
        cand = copy.deepcopy(best)
        for body in cand.statement_lists():
            body[:] = [st for st in body if not st.head.startswith(("S = pc.shared", "S[lid] ="))]
        if self._try(cand):
            return cand, True
        return best, False

    def _statements(self, best: Program):
        changed = False
        k = 0
        while not self._out_of_budget():
            lists = list(best.statement_lists())
            if k >= len(lists):
                break
            i = len(lists[k]) - 1
            while i >= 0 and not self._out_of_budget():
                if not list(best.statement_lists())[k][i].protected:
                    cand = copy.deepcopy(best)
                    del list(cand.statement_lists())[k][i]
                    if self._try(cand):
                        best, changed = cand, True
                i -= 1
            k += 1
        return best, changed

    def _flatten(self, best: Program):
        changed = False
        k = 0
        while not self._out_of_budget():
            lists = list(best.statement_lists())
            if k >= len(lists):
                break
            i = 0
            while i < len(list(best.statement_lists())[k]) and not self._out_of_budget():
                stmt = list(best.statement_lists())[k][i]
                for b in range(len(stmt.blocks)):
                    cand = copy.deepcopy(best)
                    body = list(cand.statement_lists())[k]
                    body[i:i + 1] = body[i].blocks[b][1]
                    if self._try(cand):
                        best, changed = cand, True
                        break
                i += 1
            k += 1
        return best, changed

    def _expressions(self, best: Program):
        changed = False
        r = 0
        while not self._out_of_budget():
            roots = list(best.expressions())
            if r >= len(roots):
                break
            n = 0
            while not self._out_of_budget():
                nodes = list(list(best.expressions())[r].nodes())
                if n >= len(nodes):
                    break
                node = nodes[n][0]
                if not node.fixed:
                    same = [c for c in node.args if c.type == node.type]
                    for repl in same + _literals(node.type):
                        if repl.render() == node.render():
                            continue
                        cand = copy.deepcopy(best)
                        target = list(list(cand.expressions())[r].nodes())[n][0]
                        src = copy.deepcopy(repl)
                        target.fmt, target.args, target.fixed = src.fmt, src.args, src.fixed
                        if self._try(cand):
                            best, changed = cand, True
                            break
                n += 1
            r += 1
        return best, changed

    def _launch(self, best: Program):
        changed = False
        if best.grid > 1 and not self._out_of_budget():
            cand = copy.deepcopy(best)
            cand.grid = 1
            if self._try(cand):
                best, changed = cand, True
        return best, changed


def shrink(program: Program, check: Callable[[Program], bool], max_trials: int = 800,
           time_limit_s: float = 180.0) -> tuple[Program, int]:
    """The reduced program and the number of candidates tried."""
    s = Shrinker(check, max_trials, time_limit_s)
    return s.shrink(program), s.trials
