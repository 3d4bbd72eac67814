"""Run-time side of the source transformation: if / for-range / while / and / or / not.

Each helper decides: plain Python values -> ordinary Python semantics at trace time (the
metaprogramming layer); runtime values -> a structured IR op. Variables assigned in a branch or
loop body are passed in and out explicitly; containers (lists, tuples, dicts) of values are
flattened so tiles kept in nested lists can be carried through runtime loops.
"""
from __future__ import annotations

import builtins
import copy
import dataclasses
import numbers
import types
from typing import Any, Callable

import numpy as np

from ..errors import CompileError, Loc, current_loc
from ..ir.builder import emit, tracer, tracing
from ..ir.core import Block, Value
from ..ops.core import Undefined, as_value, const, default_type, note_python_ints
from ..types import BufferType, CoopMatType, ScalarType, SharedArrayType, Type, bool_, i32, u32
from ..ops.khr import fill
from ..ops.core import select


UNDEF = Undefined()


class Return:
    """Marker returned by a generated branch/body function when the user's code returned."""

    def __init__(self, value, values):
        self.value, self.values = value, values


class Result:
    __slots__ = ("returned", "value", "values")

    def __init__(self, values, returned=False, value=None):
        self.values, self.returned, self.value = values, returned, value


def _loc(pos) -> Loc:
    f = current_loc()
    return Loc(f.file, pos[0], pos[1]) if pos else f


def _runtime_bool(cond, loc: Loc) -> Value | None:
    """The IR value of a runtime condition, or None for a Python value."""
    if not isinstance(cond, Value):
        return None
    if cond.type != bool_:
        raise CompileError(f"condition has type {cond.type}, not bool", loc,
                           hint="compare explicitly, e.g. `if x != 0:`",
                           rule="SPIR-V: the Condition of OpBranchConditional must be a Boolean type "
                                "scalar", rule_id="control.condition-bool")
    return cond


# --------------------------------------------------------------------------- pytrees

def _fields(x) -> list[str] | None:
    """The attributes of a record (a types.SimpleNamespace or dataclass instance), which
    branches and loops carry like a dict's items; None for anything else."""
    if isinstance(x, types.SimpleNamespace):
        return list(vars(x))
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return [f.name for f in dataclasses.fields(x)]
    return None


class _Record:
    """A record in a pytree: equal to another of its class (the attribute names are compared
    beside it); copies of the record are made from `template`."""
    __slots__ = ("template",)
    __hash__ = None

    def __init__(self, x):
        self.template = x

    def __eq__(self, other) -> bool:
        return isinstance(other, _Record) and type(other.template) is type(self.template)


def _flatten(x, leaves: list) -> Any:
    if isinstance(x, list):
        return ("list", [_flatten(v, leaves) for v in x])
    if isinstance(x, tuple) and type(x) is tuple:
        return ("tuple", [_flatten(v, leaves) for v in x])
    if isinstance(x, dict):
        return ("dict", [(k, _flatten(v, leaves)) for k, v in x.items()])
    names = _fields(x)
    if names is not None:
        return ("record", (_Record(x), [(k, _flatten(getattr(x, k), leaves)) for k in names]))
    leaves.append(x)
    return None


class _LoopList(list):
    """A list as the body of a runtime loop or branch sees it: it notes the first line that
    changes its length, so that the error (a carried list keeps its length) names that line."""
    __slots__ = ("where",)

    def _grows(self):
        if not hasattr(self, "where"):
            self.where = current_loc()

    def _wrap(name):
        def method(self, *a, **k):
            self._grows()
            return getattr(list, name)(self, *a, **k)
        method.__name__ = name
        return method

    for _m in ("append", "extend", "insert", "pop", "remove", "clear", "__delitem__", "__iadd__",
               "__imul__"):
        locals()[_m] = _wrap(_m)
    del _m, _wrap

    def __setitem__(self, i, v):
        if isinstance(i, slice):
            self._grows()
        list.__setitem__(self, i, v)


def _growth_loc(x) -> Loc | None:
    """The line that first changed the length of a list in `x` (a body's output), if any."""
    if isinstance(x, _LoopList) and hasattr(x, "where"):
        return x.where
    items = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else \
        [getattr(x, k) for k in _fields(x) or ()]
    for v in items:
        w = _growth_loc(v)
        if w is not None:
            return w
    return None


def _unflatten(tree, it, lst=list) -> Any:
    if tree is None:
        return next(it)
    kind, items = tree
    if kind == "list":
        return lst(_unflatten(t, it, lst) for t in items)
    if kind == "tuple":
        return tuple(_unflatten(t, it, lst) for t in items)
    if kind == "record":
        rec, fields = items
        new = copy.copy(rec.template)
        for k, t in fields:
            object.__setattr__(new, k, _unflatten(t, it, lst))    # frozen dataclasses too
        return new
    return {k: _unflatten(t, it, lst) for k, t in items}


def _write_back(orig, new):
    """Update containers and records in place so other references to them see the new
    values."""
    if isinstance(orig, list) and isinstance(new, list) and len(orig) == len(new):
        for i, (o, n) in enumerate(zip(orig, new)):
            orig[i] = _write_back(o, n)
        return orig
    if isinstance(orig, dict) and isinstance(new, dict) and orig.keys() == new.keys():
        for k in orig:
            orig[k] = _write_back(orig[k], new[k])
        return orig
    names = _fields(orig)
    if names is not None and type(new) is type(orig) and _fields(new) == names:
        for k in names:
            object.__setattr__(orig, k, _write_back(getattr(orig, k), getattr(new, k)))
        return orig
    return new


def _carried(x) -> bool:
    """Runtime values that flow through branches and loops (memory handles stay fixed)."""
    return isinstance(x, Value) and not isinstance(x.type, (BufferType, SharedArrayType))


RETURN_VALUE = "_pc_rv"        # the variable a single-exit rewrite returns (see transform)
PASSED = "?"                    # marks a variable a loop or `if` body only passes to calls
_NOT_SET = object()             # that variable on a path that has not returned yet


def _zero(t: Type, loc: Loc) -> Value:
    """A value of type `t` standing for 'not set yet'."""
    if isinstance(t, CoopMatType):
        return fill(t, 0)
    if isinstance(t, ScalarType):
        return const(False if t.is_bool else 0, t, loc)
    raise CompileError(f"a function returning {t} from inside a loop is not supported", loc,
                       hint="assign the result to a variable and return it after the loop",
                       rule="pycoop: a @pycoop.func that returns from inside a runtime loop returns a "
                            "numeric scalar or cooperative matrix (a value the loop can carry)",
                       rule_id="control.loop-return-type")


def _is_number(x) -> bool:
    return isinstance(x, (numbers.Number, np.generic)) and not isinstance(x, Value)


def _same_static(a, b) -> bool:
    if a is b:
        return True
    if _is_number(a) and _is_number(b):
        return type(a) is type(b) and a == b
    return False


# --------------------------------------------------------------------------- if

def _merge_local(v, everywhere: bool = False):
    """A variable first assigned inside the branches: kept if it is a single value (merged like
    any other) or, where every branch that goes on assigned it (`everywhere`), a container
    (merged element by element, as one assigned before the `if`); otherwise undefined after
    the if."""
    if not everywhere and (isinstance(v, (list, tuple, dict)) or _fields(v) is not None):
        return Undefined("it is a container first assigned inside an `if` on a runtime condition")
    return v


def _check_aliases(vals: tuple, names: tuple, loc: Loc) -> None:
    """Refuse one list or dict held by two of the variables a runtime loop or `if` carries:
    it carries each variable's elements apart, so a write through one name would not reach
    the other (Python's aliasing cannot be kept)."""
    owner: dict[int, str] = {}

    def walk(x, name: str) -> None:
        if isinstance(x, (list, dict)):
            other = owner.setdefault(id(x), name)
            if other != name:
                kind = "list" if isinstance(x, list) else "dict"
                raise CompileError(
                    f"`{other}` and `{name}` hold the same {kind} across a loop or `if` on a "
                    "runtime value", loc,
                    rule="pycoop: a runtime loop or branch carries each variable's elements "
                         "apart, so a change through one name would not reach the other",
                    hint=f"use one name for the {kind} (or copy it: {name} = {kind}({other}))",
                    rule_id="control.aliased-container")
            for c in (x.values() if isinstance(x, dict) else x):
                walk(c, name)
        elif isinstance(x, tuple):
            for c in x:
                walk(c, name)
    for v, n in zip(vals, names):
        walk(v, n.removesuffix(PASSED))


def if_(cond, then_fn: Callable, else_fn: Callable, vals: tuple, names: tuple, pos=None) -> Result:
    loc = _loc(pos)
    c = _runtime_bool(cond, loc)
    if c is None:
        out = (then_fn if cond else else_fn)(*vals)
        if isinstance(out, Return):
            return Result(out.values, True, out.value)
        return Result(out)
    _check_aliases(vals, names, loc)
    t = tracer()
    leaves: list = []
    trees = [_flatten(v, leaves) for v in vals]

    def fresh():
        it = iter(leaves)
        return tuple(_unflatten(tr, it, _LoopList) for tr in trees)

    outs, blocks = [], []
    for fn in (then_fn, else_fn):
        blk = Block()
        with t.region(blk):
            out = fn(*fresh())
            if isinstance(out, Return):
                if out.value is not None:
                    raise CompileError("returning a value from inside an `if` on a runtime condition",
                                       loc, hint="assign the value to a variable in both branches and "
                                                 "return it after the if",
                                       rule="pycoop: a @pycoop.func returns its value outside runtime "
                                            "control flow (SPIR-V structured control flow has one merge)",
                                       rule_id="control.func-return-in-control-flow")
                if not blk.terminated:
                    emit("return", [], loc=loc)
                out = None
        outs.append(out)
        blocks.append(blk)
    if RETURN_VALUE in names:                  # one branch set the return value, the other not
        i = names.index(RETURN_VALUE)
        if any(o is not None and o[i] is not None for o in outs):
            outs = [o if o is None or o[i] is not None else o[:i] + (_NOT_SET,) + o[i + 1:]
                    for o in outs]
    terminated = [b.terminated for b in blocks]
    if all(terminated):
        emit("if", [c], {"result_types": []}, blocks, loc)
        emit("return", [], loc=loc)
        # every path returned: the caller returns too (code after the `if` is unreachable and
        # is not traced, so it cannot fail on variables the branches assigned)
        return Result(vals, True, None)
    flat = []
    # the variables first assigned inside the branches that every branch going on assigned
    everywhere = [isinstance(v0, Undefined) and all(
        o is None or not isinstance(o[j], Undefined) for o in outs) for j, v0 in enumerate(vals)]
    returned = range(0)         # the leaves of the return value (of the first live branch)
    for k, out in enumerate(outs):
        if out is None:
            flat.append(None)
            continue
        lv: list = []
        tr = []
        for j, (v, v0) in enumerate(zip(out, vals)):
            start = len(lv)
            tr.append(_flatten(v if not isinstance(v0, Undefined) else
                               _merge_local(v, everywhere[j]), lv))
            if names[j] == RETURN_VALUE and not returned:
                returned = range(start, len(lv))
        flat.append((tr, lv))
    live = [f for f in flat if f is not None]
    ref_tree, _ = live[0]
    if any(f[0] != ref_tree for f in live[1:]):
        grown = _growth_loc(outs)
        raise CompileError("a variable holds containers of different shapes after the two branches"
                           + (f" of the `if` at line {loc.line}" if grown else ""), grown or loc,
                           rule="after a runtime `if`, lists, tuples and dicts have the same "
                                "lengths and keys on both paths",
                           hint="keep lists/tuples the same length in both branches",
                           rule_id="control.if-container-shape")
    n = len(live[0][1])
    results: list = [None] * n
    merge_idx, yields, mtypes = [], [[], []], []      # mtypes: the merged value's type
    python_ints = set()                  # the merges of two Python ints (positions in merge_idx)
    for i in range(n):
        cand = [f[1][i] if f is not None else None for f in flat]
        alive = [cand[k] for k in range(2) if flat[k] is not None]
        if len(alive) == 1 or _same_static(alive[0], alive[1]):
            if len(alive) == 1 and _carried(alive[0]):
                merge_idx.append(i)          # yield it from the one live branch
                mtypes.append(alive[0].type)
                for k in range(2):
                    yields[k].append(cand[k])
            else:
                results[i] = alive[0]
            continue
        a, b = alive
        if a is _NOT_SET or b is _NOT_SET:            # a zero of the other side's type
            other = b if a is _NOT_SET else a
            if not (_carried(other) or _is_number(other)):
                results[i] = Undefined(f"the function's return value is not a runtime value (line "
                                    f"{loc.line})")
                continue
            merge_idx.append(i)              # a Python number: a runtime value of its type
            yields[0].append(a)
            yields[1].append(b)
            mtypes.append(other.type if isinstance(other, Value) else default_type(other))
            continue
        if isinstance(a, Undefined) or isinstance(b, Undefined):
            results[i] = Undefined("it is assigned in only one branch of the `if` at line "
                                f"{loc.line}")
            continue
        if not (_carried(a) or _is_number(a)) or not (_carried(b) or _is_number(b)):
            results[i] = Undefined(f"it holds different objects after the `if` at line {loc.line}")
            continue
        ta = a.type if isinstance(a, Value) else None
        tb = b.type if isinstance(b, Value) else None
        if ta is None and tb is None:
            if not (_is_number(a) and _is_number(b)):
                results[i] = Undefined(f"it holds different Python objects after the `if` at line {loc.line}")
                continue
            ta = default_type(a) if type(a) is type(b) else default_type(a + b)
            if ta == i32 and isinstance(a, int) and isinstance(b, int):
                python_ints.add(len(merge_idx))
        if ta is not None and tb is not None and ta != tb:
            if i in returned:
                raise CompileError(f"the function returns {ta} on one path and {tb} on another "
                                   f"(the `if` at line {loc.line})", loc,
                                   hint=f"convert the returned values to one type, e.g. "
                                        f"return {ta}(...) on both paths",
                                   rule="pycoop: a @pycoop.func returns one type on every path "
                                        "(SPIR-V: one OpFunction result type)",
                                   rule_id="control.func-return-type")
            results[i] = Undefined(f"it is {ta} in one branch and {tb} in the other (line {loc.line})")
            continue
        merge_idx.append(i)
        yields[0].append(a)
        yields[1].append(b)
        mtypes.append(ta if ta is not None else tb)
    typ = []
    for k, blk in enumerate(blocks):
        if blk.terminated:
            continue
        with t.region(blk):
            vals_k = []
            for j, v in enumerate(yields[k]):
                # both branches yield the merged type (1 and 2.5 merge as f32, not i32/f32)
                if v is _NOT_SET:
                    v = _zero(mtypes[j], loc)
                vals_k.append(as_value(v, mtypes[j]) if not isinstance(v, Value) else v)
            emit("yield", vals_k, loc=loc)
            typ = [v.type for v in vals_k]
    op = emit("if", [c], {"result_types": typ}, blocks, loc)
    for j in python_ints:
        note_python_ints(op.results[j], f"Python ints merged by the runtime `if` at line {loc.line}")
    for i, r in zip(merge_idx, op.results):
        results[i] = r
    it = iter(results)
    merged = tuple(_unflatten(tr, it) for tr in ref_tree)
    return Result(tuple(_write_back(o, m) for o, m in zip(vals, merged)))


# --------------------------------------------------------------------------- loops

def _runtime_loop(vals: tuple, loc: Loc, make_cond: Callable, run_body: Callable,
                  extra: list[Value], names: tuple = (), attrs: dict | None = None
                  ) -> tuple[list[Value], tuple]:
    """Record a loop op. `extra` are leading carried values (e.g. the induction variable);
    `make_cond(extra_args, user_vals) -> bool Value`; `run_body(extra_args, user_vals) ->
    (new_extra, user_out | Return)`. Returns (extra results, user values after the loop)."""
    _check_aliases(vals, names, loc)
    t = tracer()
    leaves: list = []
    trees, spans = [], []                # spans: the leaves of each variable
    for v in vals:
        first = len(leaves)
        trees.append(_flatten(v, leaves))
        spans.append(range(first, len(leaves)))
    # the return value of a rewritten function may be None until set: it takes the type of
    # the value the body gives it (its initial value is never used)
    placeholders = {spans[i].start for i, n in enumerate(names)
                    if n == RETURN_VALUE and vals[i] is None}
    # Variables the body only passes to calls (names marked PASSED): a callee may change the
    # elements of a list or dict they hold, anything else stays as it is. Their elements are
    # carried until a trace shows them unchanged (`invariant`: then read from outside).
    passed, invariant = set(), set()
    for n, v, span in zip(names, vals, spans):
        if n.endswith(PASSED):
            passed.update(span)
            if not isinstance(v, (list, dict)) and _fields(v) is None:
                invariant.update(span)
    promote: dict[int, Type] = {}
    python_ints = set()                  # leaves promoted from a Python int to i32
    for _attempt in range(4):
        carried = [i for i, v in enumerate(leaves)
                   if (_carried(v) or i in promote) and i not in invariant]
        init = []
        for i in carried:
            v = leaves[i]
            init.append(v if isinstance(v, Value) else
                        _zero(promote[i], loc) if v is None else const(v, promote[i], loc))
        cond_blk = Block([Value(v.type) for v in extra] + [Value(v.type) for v in init])
        body_blk = Block([Value(v.type) for v in extra] + [Value(v.type) for v in init])
        for k, i in enumerate(carried):
            if i in python_ints:
                for blk in (cond_blk, body_blk):
                    note_python_ints(blk.args[len(extra) + k], f"a Python int carried through "
                                                               f"the loop at line {loc.line}")

        def user_vals(blk):
            cur = list(leaves)
            for k, i in enumerate(carried):
                cur[i] = blk.args[len(extra) + k]
            it = iter(cur)
            return tuple(_unflatten(tr, it, _LoopList) for tr in trees)

        with t.region(cond_blk):
            c = make_cond(cond_blk.args[:len(extra)], user_vals(cond_blk))
            c = _runtime_bool(c, loc)
            if c is None:
                raise CompileError("the loop condition does not depend on runtime values here",
                                   loc, hint="use a Python-level loop instead",
                                   rule="pycoop: a `while` on a runtime value has a runtime condition in "
                                        "every iteration", rule_id="control.while-runtime-condition")
            emit("condition", [c], loc=loc)
        with t.region(body_blk):
            new_extra, out = run_body(body_blk.args[:len(extra)], user_vals(body_blk))
            returned = isinstance(out, Return)
            if returned:
                if out.value is not None:
                    raise CompileError("returning a value from inside a runtime loop", loc,
                                       hint="assign it to a variable and return after the loop",
                                       rule="pycoop: a @pycoop.func returns its value outside runtime "
                                            "control flow (SPIR-V structured control flow has one merge)",
                                       rule_id="control.func-return-in-control-flow")
                if not body_blk.terminated:
                    emit("return", [], loc=loc)
                out = user_vals(body_blk)
            out_leaves: list = []
            # variables with no value before the loop are local to the body
            out_trees = [_flatten(v if not isinstance(v0, Undefined) else v0, out_leaves)
                         for v, v0 in zip(out, vals)]
        if out_trees != trees:
            grown = _growth_loc(out)
            raise CompileError("a variable changes its container shape inside a runtime loop"
                               + (f" (the loop at line {loc.line})" if grown else ""), grown or loc,
                               rule="the variables a runtime loop carries keep their types, and "
                                    "lists, tuples and dicts their lengths and keys",
                               hint="keep lists/tuples the same length across iterations (collect "
                                    "per-iteration results in a buffer or shared array)",
                               rule_id="control.loop-container-shape")
        # which Python leaves change? -> promote them to runtime values and trace again
        changed = {}
        for i, (a, b) in enumerate(zip(leaves, out_leaves)):
            if i in carried or _same_static(a, b) or isinstance(a, Undefined):
                continue
            if _is_number(a):
                # the type it takes in the body: a runtime value's, or of the numbers it holds
                # before and after (0 then 0.5: f32)
                changed[i] = b.type if isinstance(b, Value) and isinstance(b.type, ScalarType) \
                    else default_type(a) if not _is_number(b) or type(a) is type(b) \
                    else default_type(a + b)
                if changed[i] == i32 and isinstance(a, int) and \
                        (isinstance(b, int) or isinstance(b, Value) and b.type == i32):
                    python_ints.add(i)
            elif i in placeholders and isinstance(b, Value):
                changed[i] = b.type
            else:
                raise CompileError(f"a variable holding {a!r} is reassigned inside a runtime loop", loc,
                                   rule="only numbers and pycoop values can be carried through "
                                        "a loop with a runtime bound",
                                   hint="keep the Python object out of the loop, or carry numbers "
                                        "or pycoop values (lists of them keep their length)",
                                   rule_id="control.loop-carried-value")
        same = {i for k, i in enumerate(carried)
                if i in passed and out_leaves[i] is body_blk.args[len(extra) + k]}
        if changed or same:
            promote.update(changed)
            invariant |= same
            continue
        break
    yv = list(new_extra)
    if not body_blk.terminated:
        with t.region(body_blk):
            for k, i in enumerate(carried):
                v = out_leaves[i]
                want = init[k].type
                if not isinstance(v, Value):
                    if isinstance(v, Undefined):
                        raise CompileError("a loop-carried variable has no value at the end of the "
                                           "loop body", loc,
                                           rule="SPIR-V: a loop-carried variable (an OpPhi) has a value on "
                                                "every back edge",
                                           hint="assign it on every path through the loop body "
                                                "(also before a `continue`)",
                                           rule_id="control.loop-carried-undefined")
                    v = as_value(v, want)
                if v.type != want:
                    raise CompileError(f"a loop-carried variable changes type from {want} to {v.type}",
                                       loc, hint="convert it explicitly so it keeps one type",
                                       rule="SPIR-V: the OpPhi of a loop-carried variable has one type",
                                       rule_id="control.loop-carried-type")
                yv.append(v)
            emit("yield", yv, loc=loc)
    op = emit("loop", list(extra) + init, attrs or {}, [cond_blk, body_blk], loc)
    res = op.results
    final = list(leaves)
    for k, i in enumerate(carried):
        final[i] = res[len(extra) + k]
        if i in python_ints:
            note_python_ints(final[i], f"a Python int carried through the loop at line {loc.line}")
    for i, a in enumerate(leaves):
        if isinstance(a, Undefined):
            final[i] = Undefined(f"it is first assigned inside the loop at line {loc.line}, "
                              "which may run zero times")
    it = iter(final)
    after = tuple(_unflatten(tr, it) for tr in trees)
    return res[:len(extra)], tuple(_write_back(o, m) for o, m in zip(vals, after))


def for_range(args: tuple, body_fn: Callable, vals: tuple, names: tuple, pos=None,
              stop: str | None = None, callee: Callable | None = None,
              kwargs: dict | None = None, prior: Any = UNDEF) -> Result:
    """`stop` names the flag a rewritten `break` sets: the loop ends once it is true.
    `callee` is the function of a `for x in something.range(...)` header (None: the built-in
    range): pycoop.range always makes a kernel loop; any other is iterated in Python. `prior`
    is the loop variable's value before the loop: as in Python, it keeps it where the loop
    runs zero times."""
    loc = _loc(pos)
    k = names.index(stop) if stop is not None else None
    attrs, iterable = {}, None          # iterable: a loop unrolled while tracing
    if callee is kernel_range:
        args, attrs = _kernel_range(args, kwargs or {}, loc)
        bounds = _constant_bounds(args)
        if bounds is not None and (attrs["control"] == "Unroll" or not len(range(*bounds))):
            # Unrolled here rather than by the driver (a full-unroll hint has crashed a
            # driver's compiler), and a loop that never runs is not emitted at all. The loop
            # variable stays a constant of the loop's type.
            t = next(a.type for a in args if isinstance(a, Value))
            iterable = (const(i, t, loc) for i in range(*bounds))
    elif callee is not None:
        iterable = callee(*args, **(kwargs or {}))
    elif not any(isinstance(a, Value) for a in args):
        iterable = _python_range(args, loc)
    if iterable is not None:
        cur = prior                     # the loop variable: the last iteration that ran
        for i in iterable:
            if k is not None and isinstance(vals[k], Value):
                # broken out of under a runtime condition: the rest runs only where it did
                # not, and there the loop variable moves on (it keeps its value at the break
                # elsewhere, as in Python)
                def step(_, *v, i=i):
                    out = body_fn(i, *v)
                    return Return(out.value, (i, *out.values)) if isinstance(out, Return) \
                        else (i, *out)
                out = if_(~vals[k], step, lambda *v: v, (cur, *vals), ("the loop variable",
                                                                       *names), pos)
                if out.returned:
                    return Result(tuple(out.values), True, out.value)
                cur, vals = out.values[0], tuple(out.values[1:])
                continue
            if k is not None and vals[k]:
                break
            cur = i
            out = body_fn(i, *vals)
            if isinstance(out, Return):
                return Result((i, *out.values), True, out.value)
            vals = out
        return Result((cur, *vals))
    lo, hi, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], 1) if len(args) == 2 else args
    types_ = {a.type for a in (lo, hi, step) if isinstance(a, Value)}
    if len(types_) != 1:
        raise CompileError(f"range() bounds have different types: {', '.join(map(str, types_))}", loc,
                           hint="cast them to one integer type",
                           rule="pycoop: the bounds of a runtime range() share one integer type",
                           rule_id="control.range-bound-types")
    it_t = types_.pop()
    if not (isinstance(it_t, ScalarType) and it_t.is_int):
        raise _range_error(f"range() needs integer bounds, got {it_t}", loc,
                           rule_id="control.range-integer-bounds")
    if not isinstance(step, Value) and step == 0:
        raise _range_error("range() step must not be zero", loc,
                           rule_id="control.range-step-zero")
    lo, hi, step = (a.item() if isinstance(a, np.generic) else a for a in (lo, hi, step))
    for a in (lo, hi, step):
        if not isinstance(a, (Value, numbers.Integral)):        # as Python's range() refuses
            raise _range_error(f"range() needs integer bounds, got {a!r}", loc,
                               rule_id="control.range-integer-bounds")
    # a constant negative step over unsigned bounds counts down by its magnitude, which the
    # type holds (it holds no -d)
    down = not it_t.signed and not isinstance(step, Value) and step < 0
    # Python numbers as constants of the loop's type, at the loop's line (a number the type
    # cannot hold, such as a stop of -1 with u32 bounds, is reported there)
    bound_hint = (f"{it_t} holds no negative numbers: `range(n, 0, -1)` counts n down to 1; to "
                  f"end at 0, loop over i32 bounds (`range(i32(n) - 1, -1, -1)`)")
    lo, hi, step = (a if isinstance(a, Value) else const(a, it_t, loc, bound_hint)
                    for a in (lo, hi, -step if down else step))
    bounds = _constant_bounds((lo, hi, -step.op.attrs["value"] if down else step))
    if bounds is not None and not len(range(*bounds)):       # never runs: dead code
        return Result((prior, *vals))
    if down:
        return _count_down(lo, hi, step, body_fn, vals, names, k, attrs, prior, loc)
    constant_step = step.op is not None and step.op.name == "const"
    neg = constant_step and step.op.attrs["value"] < 0

    # A runtime step of 0 runs no iteration (Python raises; a kernel cannot, and testing only
    # i < hi or i > hi would loop forever, a lost device, where the bounds are in order)
    def in_range(i):
        if neg:
            return i > hi
        if constant_step:
            return i < hi
        if not it_t.signed:
            return (step != 0) & (i < hi)
        return select(step > 0, i < hi, (step < 0) & (i > hi))

    def cond(extra, user):
        c = in_range(extra[0])
        if k is not None and isinstance(user[k], Value):
            c = c & ~user[k]
        return c

    def body(extra, user):
        out = body_fn(extra[0], *user)
        return [extra[0] + step], out

    before = _prior_as(prior, it_t, loc)
    (end,), after = _runtime_loop(vals, loc, cond, body, [lo], names, attrs)
    # the last index that ran is one step before the final one (a break ends the loop after
    # its iteration's step too); where no iteration ran, the value from before the loop
    last = end - step
    return Result((select(in_range(lo), last, before) if isinstance(before, Value) else before,
                   *after))


def _count_down(lo: Value, hi: Value, d: Value, body_fn: Callable, vals: tuple, names: tuple,
                k: int | None, attrs: dict, prior: Any, loc: Loc) -> Result:
    """`for i in range(lo, hi, -d)` over unsigned bounds (d a positive constant): i runs from
    lo down while i > hi. The step i - d wraps below 0, and a wrapped index is above hi again,
    so the loop carries whether the next index is still in range, decided before the step
    (where i > hi, so i - hi does not wrap). `k`: the index in `vals` of the break flag."""
    def cond(extra, user):
        c = extra[1]
        if k is not None and isinstance(user[k], Value):
            c = c & ~user[k]
        return c

    def body(extra, user):
        i = extra[0]
        out = body_fn(i, *user)
        return [i - d, i - hi > d], out

    before = _prior_as(prior, lo.type, loc)
    runs = lo > hi
    (end, _), after = _runtime_loop(vals, loc, cond, body, [lo, runs], names, attrs)
    # the last index that ran (the breaking one after a break): the step wraps modulo 2^bits,
    # so adding it back is exact
    last = end + d
    return Result((select(runs, last, before) if isinstance(before, Value) else before, *after))


def _prior_as(prior: Any, t: ScalarType, loc: Loc) -> Value | Undefined:
    """A runtime loop's variable before the loop as a value of the loop's type `t` (it holds
    that value after the loop where no iteration ran), or Undefined saying why it cannot."""
    if isinstance(prior, Value) and prior.type == t:
        return prior
    if isinstance(prior, numbers.Integral) and not isinstance(prior, bool) \
            and t.min_max()[0] <= int(prior) <= t.min_max()[1]:
        return const(int(prior), t, loc)
    if isinstance(prior, Undefined):
        return Undefined("the loop variable of a runtime loop has no value after it where the "
                         "loop may run zero times and the variable was not assigned before")
    what = prior.type if isinstance(prior, Value) else repr(prior)
    return Undefined(f"after a runtime loop its variable holds the last index ({t}) or, where "
                     f"no iteration ran, its value from before the loop ({what}): one type "
                     f"cannot hold both")


def _constant_bounds(args: tuple) -> tuple[int, ...] | None:
    """The bounds of a loop as Python ints when every one is a constant integer of one type
    and the step is not zero, else None (the loop is then checked and emitted as written)."""
    out, types_ = [], set()
    for a in args:
        if isinstance(a, Value):
            if a.op is None or a.op.name != "const":
                return None
            types_.add(a.type)
            a = a.op.attrs["value"]
        if not isinstance(a, numbers.Integral) or isinstance(a, bool):
            return None
        out.append(int(a))
    if len(types_) != 1 or not next(iter(types_)).is_int or (len(out) == 3 and out[2] == 0):
        return None
    return tuple(out)


def function_exit(returned, value, name: str, pos=None):
    """The value of a function whose last statement may be reached without a `return`: where
    a runtime condition decides whether it returned (`returned` a Value) and a path did return
    a value, the others would return Python's None, which no kernel value can stand for (the
    merge had put a 0 there)."""
    if isinstance(returned, Value) and value is not None:
        raise CompileError(
            f"{name} returns a value on some paths and falls off its end on others (where "
            f"Python would return None)", _loc(pos),
            rule="pycoop: a @pycoop.func that returns a value returns one on every path a "
                 "runtime condition can take",
            hint="end the function with a return (the value for the paths that find "
                 "nothing, e.g. `return u32(0)` after a search loop)",
            rule_id="control.func-falls-off")
    return value


def kernel_return(value, pos=None):
    """The value of a kernel's `return X`: only None (kernels return nothing)."""
    if value is not None:
        what = f"a {value.type} value" if isinstance(value, Value) else repr(value)
        raise CompileError(f"a kernel returns nothing, but this returns {what}", _loc(pos),
                           rule="a kernel's entry point returns void",
                           hint="write results into a buffer parameter and `return` without a value",
                           rule_id="frontend.kernel-returns-void")
    return None


def printable(callee, x, pos=None):
    """An argument of `print(...)` in kernel code (or a value an f-string argument formats),
    returned as it is: print runs once, while the kernel is traced, so a runtime value (a
    Value, or a list, tuple, dict or record holding one) has no value to show yet and is
    refused. Another function named print is left alone."""
    if callee is builtins.print:
        leaves: list = []
        _flatten(x, leaves)
        traced = next((v for v in leaves if isinstance(v, Value)), None)
        if traced is not None:
            raise CompileError(
                f"print() of a runtime value ({traced.type}): kernel code runs once, while "
                "the kernel is traced, when the value has no value yet", _loc(pos),
                rule="pycoop: kernel code is traced; print() shows what is known at trace time "
                     "(sizes, configuration), not the values of a launch",
                hint="store the value into a buffer parameter and read that after the launch",
                rule_id="frontend.print-traced")
    return x


def _trace_time_loop(message: str, pos, extra_hint: str = "") -> CompileError:
    """The error of a runtime value where a loop that runs while tracing needs a Python one
    (its bound, its condition, or an `if` holding its break)."""
    return CompileError(message, _loc(pos),
                        rule="a kernel loop's break and continue must sit in its body or in "
                             "`if` statements in it; loops with `else` run while tracing only",
                        hint="set a flag variable and test it after the loop instead of `else`; "
                             "move break/continue out of a `match` into an `if`" + extra_hint,
                        rule_id="control.break-placement")


def python_range(callee: Callable, args: tuple, kwargs: dict, why: str, pos=None):
    """The iterable of a `for ... in range(...)` loop that stays a Python loop (`why` says
    why): its bounds must be known at trace time."""
    if callee is kernel_range or (callee is range and any(isinstance(a, Value) for a in args)):
        what = "it cannot be a pycoop.range() loop" if callee is kernel_range \
            else "its bounds must be known at trace time"
        raise _trace_time_loop(f"this loop {why}, so {what}", pos)
    return callee(*args, **kwargs)


def python_cond(cond, why: str, pos=None):
    """The condition of a `while` loop that stays a Python loop: known at trace time."""
    if isinstance(cond, Value):
        raise _trace_time_loop(f"this while loop {why}, so its condition cannot be a runtime "
                               "value", pos)
    return cond


def python_if(cond, why: str, pos=None):
    """The condition of an `if` holding a `break` or `continue` of a loop that runs while
    tracing: known at trace time."""
    if isinstance(cond, Value):
        raise _trace_time_loop(f"this `if` holds a `break` or `continue` of {why}: that loop "
                               "runs while tracing, so the `if` cannot test a runtime value",
                               pos, "; loop over range(...) for a runtime loop")
    return cond


def kernel_range(*args, unroll: bool | int | None = None):
    """`for i in pycoop.range(start, stop, step, unroll=None)`: a loop of the kernel even when
    its bounds are known at trace time (the built-in range() is then unrolled while tracing),
    with a hint to the driver's compiler: unroll=True unrolls it, False keeps it rolled, an
    int n > 1 unrolls n iterations at a time, None leaves the choice to the driver. Constant
    bounds give a u32 loop variable (i32 if one is negative); with them, unroll=True is
    unrolled while tracing and a loop that never runs is not emitted."""
    raise CompileError("pycoop.range() is only for the header of a for loop in a kernel",
                       current_loc(), hint="write `for i in pycoop.range(...):`",
                       rule="pycoop: pycoop.range() is the iterable of a `for` statement in a kernel or "
                            "@pycoop.func", rule_id="control.range-in-for")


# Python's rules for range() that kernel loops keep, by rule id: (rule, hint)
_RANGE_RULES = {"control.range-arity": ("Python: range() takes 1 to 3 arguments",
                                        "range(stop), range(start, stop) or "
                                        "range(start, stop, step)"),
                "control.range-integer-bounds": ("Python: range() takes integer bounds",
                                                 "convert the bound, e.g. range(u32(n)) or "
                                                 "range(int(x))"),
                "control.range-step-zero": ("Python: range() arg 3 must not be zero",
                                            "step by a nonzero amount")}


def _range_error(message: str, loc, rule_id: str) -> CompileError:
    rule, hint = _RANGE_RULES[rule_id]
    return CompileError(message, loc, rule=rule, hint=hint, rule_id=rule_id)


def _python_range(args: tuple, loc) -> range:
    """range(*args) of Python bounds, unrolled while tracing; what Python refuses is a
    CompileError at the loop."""
    if not 1 <= len(args) <= 3:
        raise _range_error(f"range() takes 1 to 3 bounds, got {len(args)}", loc,
                           rule_id="control.range-arity")
    try:
        return range(*args)
    except TypeError as e:
        raise _range_error(f"range() needs integer bounds: {e}", loc,
                           rule_id="control.range-integer-bounds") from None
    except ValueError:
        raise _range_error("range() step must not be zero", loc,
                           rule_id="control.range-step-zero") from None


def _kernel_range(args: tuple, kwargs: dict, loc: Loc) -> tuple[tuple, dict]:
    """The bounds as kernel values and the loop attributes of a pycoop.range() header."""
    unknown = set(kwargs) - {"unroll"}
    if unknown:
        raise CompileError(f"pycoop.range() got unexpected keyword(s) {', '.join(sorted(unknown))}",
                           loc, hint="its only keyword is unroll=",
                           rule="pycoop: pycoop.range(start, stop, step, unroll=...) takes only the unroll "
                                "keyword", rule_id="control.range-keywords")
    if not 1 <= len(args) <= 3:
        raise _range_error(f"pycoop.range() takes 1 to 3 bounds, got {len(args)}", loc,
                           rule_id="control.range-arity")
    unroll = kwargs.get("unroll")
    if isinstance(unroll, bool) or unroll is None:
        control = {None: "None", True: "Unroll", False: "DontUnroll"}[unroll]
    elif isinstance(unroll, numbers.Integral) and unroll > 1:
        control = ("PartialCount", int(unroll))
    else:
        raise CompileError(f"pycoop.range(unroll={unroll!r}): expected True, False, None or an "
                           "integer > 1", loc,
                           rule="SPIR-V: LoopControl Unroll, DontUnroll or PartialCount with a count > 1",
                           hint="unroll=True (all), False (none), None (the driver decides) or "
                                "a count such as 4", rule_id="control.unroll-value")
    if not any(isinstance(a, Value) for a in args):
        for a in args:
            if not isinstance(a, numbers.Integral) or isinstance(a, bool):
                raise _range_error(f"range() needs integer bounds, got {a!r}", loc,
                                   rule_id="control.range-integer-bounds")
        t = default_type(-1) if any(a < 0 for a in args) else u32
        args = tuple(as_value(a, t) for a in args)
    return args, {"control": control}


# iterations a `while` on a Python condition may unroll while tracing (a `while True:` left
# only by a kernel `return` under a runtime condition would unroll forever)
MAX_UNROLLED = 1 << 16


def while_(cond_fn: Callable, body_fn: Callable, vals: tuple, names: tuple, pos=None) -> Result:
    loc = _loc(pos)

    def test():
        """The condition, traced into a block that is dropped: a runtime one is traced again
        in the loop's own condition region, and its ops (an atomic too) must run once per
        test, there. (Outside tracing, as a @pycoop.func called from Python, it is Python.)"""
        if not tracing():
            return cond_fn(*vals)
        with tracer().region(Block()):
            return cond_fn(*vals)

    c = test()
    # While the condition is a Python value the loop runs at trace time (unrolled). Once it
    # is a runtime value (from the start, or after iterations that made it one, as
    # `while True:` with a runtime `break` does) the rest of the loop is a runtime loop on
    # the values so far: `while c: body` is `if c: body` followed by the same loop.
    unrolled = 0
    while not isinstance(c, Value):
        if not c:
            return Result(vals)
        if unrolled == MAX_UNROLLED:
            raise CompileError(
                f"this while loop has run {unrolled} iterations while the kernel was traced, "
                "and its condition is still the Python value True", loc,
                rule="pycoop: a `while` on a Python condition runs while tracing, unrolled; it "
                     "becomes a runtime loop only once its condition is a runtime value",
                hint="leave the loop with `break` under a runtime condition (a `return` inside "
                     "it does not change the condition), or test a runtime value in the `while`",
                rule_id="control.while-unrolled-limit")
        unrolled += 1
        out = body_fn(*vals)
        if isinstance(out, Return):
            return Result(out.values, True, out.value)
        vals = out
        c = test()
    _, after = _runtime_loop(vals, loc, lambda e, u: cond_fn(*u), lambda e, u: ([], body_fn(*u)), [],
                             names)
    return Result(after)


# --------------------------------------------------------------------------- expressions

def and_(a, b_fn: Callable):
    if not isinstance(a, Value):
        return b_fn() if a else a
    return _short_circuit(a, b_fn, True)


def or_(a, b_fn: Callable):
    if not isinstance(a, Value):
        return a if a else b_fn()
    return _short_circuit(a, b_fn, False)


def _short_circuit(a: Value, b_fn: Callable, is_and: bool):
    """`a and b` / `a or b` on a runtime bool: b is evaluated only where it matters."""
    _runtime_bool(a, current_loc())
    rhs = lambda _: (as_value(b_fn(), bool_),)          # noqa: E731
    short = lambda _: (not is_and,)                      # noqa: E731
    r = if_(a, rhs if is_and else short, short if is_and else rhs, (None,), ("_",), None)
    return r.values[0]


def not_(a):
    if isinstance(a, Value):
        _runtime_bool(a, current_loc())
        return ~a
    return not a


def is_(a, b, negate: bool, pos=None) -> bool:
    """`a is b` (`a is not b` with `negate`): Python identity, evaluated while tracing. A
    runtime value's identity is that of its traced object, not of anything the kernel
    computes (`b is True` of a runtime bool would be False in every invocation), so it is
    refused except against None, which a runtime value never is (the test of an optional
    argument)."""
    if (isinstance(a, Value) or isinstance(b, Value)) and a is not None and b is not None:
        v = a if isinstance(a, Value) else b
        op = "is not" if negate else "is"
        raise CompileError(f"`{op}` with a runtime value ({v.type}) tests the identity of its "
                           "traced object, not its value", _loc(pos),
                           rule="pycoop: `is` and `is not` are evaluated while tracing; runtime "
                                "values are compared with == and !=",
                           hint=f"write `{'!=' if negate else '=='}` (or test the value itself: "
                                "`if b:`)", rule_id="frontend.runtime-identity")
    return (a is not b) if negate else (a is b)


def ifexp(c, a_fn: Callable, b_fn: Callable):
    if not isinstance(c, Value):
        return a_fn() if c else b_fn()
    sides: list = []

    def side(fn: Callable) -> Callable:
        def run(_):
            sides.append(fn())
            return (sides[-1],)
        return run
    r = if_(c, side(a_fn), side(b_fn), (None,), ("_",), None).values[0]
    types_ = [getattr(v, "type", None) or default_type(v) for v in sides
              if isinstance(v, Value) or _is_number(v)]
    if isinstance(r, Undefined) and len(types_) == 2 and types_[0] != types_[1]:
        # no variable holds the result yet: say so, at the expression, rather than where a
        # variable assigned from it is read
        raise CompileError(f"the two sides of `x if c else y` on a runtime condition have "
                           f"different types: {types_[0]} and {types_[1]}", current_loc(),
                           rule="SPIR-V: both values an `if` merges have the result's type (as "
                                "OpSelect's Object 1 and Object 2 do)",
                           hint=f"convert one side, e.g. {types_[0]}(y)",
                           rule_id="core.select-types")
    return r
