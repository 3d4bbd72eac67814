"""Seeded generation of random valid pycoop kernels free of undefined behaviour.

A kernel reads one element per invocation from each input buffer, computes with random typed
expressions under random control flow, and stores into its own element of each output buffer,
so two backends that implement the same semantics must produce the same bits. What keeps it
free of undefined behaviour:

- integer divisors are `(b & 7) + 1` or a constant other than 0 and -1; shift amounts are
  masked below the width; `abs` of a signed integer takes `x | 1` (never INT_MIN);
- floats are converted to integers only through `select(f == f, min(max(f, lo), hi), 0)`
  with `lo`/`hi` representable in both types; float `min`/`max` see no NaN operand (the
  result of GLSL.std.450 FMin/FMax with a NaN operand is unspecified); no float division or
  transcendental function (their precision differs between implementations);
- in the "fast" float mode (no NoContraction, so a driver may fuse `a*b + c` and, as Mesa
  does for every float op not marked exact, rewrite `-x + (y + x)` to `y`), float arithmetic
  stays where such rewrites cannot change a bit: float inputs are small integers, literals
  are multiples of 1/8, integers become floats only through `% 64`, and the generator tracks a
  bound on each float value's magnitude. A value is *exact* while that bound times 8 is
  within the type's exact-integer range (2048 for f16); `+ - *` only take exact operands, so
  every rounded result (a product, an over-large sum) is rounded once and never re-enters
  arithmetic: it is only compared, converted, selected or stored. Exact mode
  (`fp="exact"`) lifts all of this;
- every index is `gid` or reduced modulo the buffer's length; loops run at most a few
  iterations and `while` counters are incremented first in the body;
- a shared array is written at `[lid]` by every invocation at the kernel's top level, read at
  `[lid]` until the next barrier and anywhere after it, and a barrier is only emitted at the
  top level before any invocation can have returned (uniform control flow).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

import pycoop as pc

from .features import Features
from .program import Expr, Function, Program, Stmt
from .gen_khr import KhrGenerator
from .gen_nv import NvGenerator

INTS = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")
FLOATS = ("f16", "f32", "f64")
SCALARS = INTS + FLOATS
WORKGROUP_SIZES = (8, 16, 32, 64)
_FLOAT_LITERALS = (0.0, 1.0, -1.0, 0.5, 2.0, -3.0, 0.25, 10.0, -0.125, 1.5)
_EXACT_FLOAT_LITERALS = _FLOAT_LITERALS + (100.0, 0.1, 1e-3, 65504.0, -1e4)
INF = float("inf")
FAST_INPUT_RANGE = 16        # fast mode: float inputs are integers in [-16, 16]
HELPER_PARAM_MAG = 64.0
_EXACT_INT = {"f16": 2048, "f32": 2 ** 24, "f64": 2 ** 53}


def exact_ok(t: str, mag: float) -> bool:
    """Whether every multiple of 1/8 of magnitude <= mag is exactly representable in `t`."""
    return mag * 8 <= _EXACT_INT[t]


def stype(name: str):
    return getattr(pc, name)


def is_float(t: str) -> bool:
    return t in FLOATS


def bits(t: str) -> int:
    return stype(t).bits


def literal(t: str, v) -> Expr:
    return Expr(f"{t}({v!r})", type=t)


def float_to_int_bounds(f: str, t: str) -> tuple[float, float]:
    """[lo, hi] such that every float of type `f` in it truncates to a value of integer type
    `t`, with lo and hi exactly representable in `f`."""
    tmin, tmax = (int(x) for x in stype(t).min_max())
    fmax = float(np.finfo(stype(f).dtype).max)
    exact = 2 ** (np.finfo(stype(f).dtype).nmant + 1)

    def bound(v: int) -> float:
        if abs(v) <= exact and abs(v) <= fmax:
            return float(v)
        k = min(abs(v), int(fmax)).bit_length() - 1
        return float(2 ** k) * (1 if v > 0 else -1)
    return bound(tmin) if tmin else 0.0, bound(tmax)


@dataclass
class Var:
    name: str
    type: str            # scalar type name, or "pyint" for an unrolled loop's index
    uniform: bool        # the same value in every invocation of a workgroup
    nanfree: bool = True  # a float that cannot be NaN
    mag: float = 0.0     # bound on |value| of an exact float, inf once it may be rounded
    mutable: bool = True
    loops: int = 0       # loops enclosing its definition


@dataclass
class _Loop:
    allow_continue: bool
    breaks: int = 0


@dataclass
class _Props:
    uniform: bool = True
    nanfree: bool = True
    mag: float = 0.0     # see Var.mag (0 for integers)


@dataclass
class _Helper:
    name: str
    params: list[str]
    ret: str


@dataclass
class _State:
    scopes: list[list[Var]] = field(default_factory=lambda: [[]])
    loops: list[_Loop] = field(default_factory=list)
    uniform: bool = True          # control flow reaching here is workgroup-uniform
    runtime_loops: int = 0        # enclosing runtime loops
    depth: int = 0
    helper: _Helper | None = None


class ScalarGenerator:
    """Generates one scalar (+ shared memory) kernel per seed."""

    def __init__(self, seed: int, features: Features):
        self.seed = seed
        self.f = features
        self.r = random.Random(seed)
        self.counter = 0
        self.helpers: list[_Helper] = []
        self.inputs: list[tuple[str, str]] = []      # (name, type) of ReadBuffers
        self.outputs: list[tuple[str, str]] = []     # (name, type) of Buffers
        self.shared: tuple[str, str] | None = None   # (name, type)
        self.phase = "none"        # shared array: "none", "own" (written, not synced), "all"
        self.shared_mag = 0.0      # bound on every value written to it (see Var.mag)
        self.shared_nanfree = True
        self.fast = features.fp == "fast"
        self.exited = False        # some invocation may have returned (no more barriers)
        self.wg = 0
        self.length = 0
        self.budget = 0

    # ------------------------------------------------------------------ helpers
    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def visible(self, s: _State) -> list[Var]:
        return [v for scope in s.scopes for v in scope]

    def int_literal(self, t: str) -> Expr:
        lo, hi = (int(x) for x in stype(t).min_max())
        pick = self.r.random()
        if pick < 0.5:
            v = self.r.randint(max(lo, -9), min(hi, 9))
        elif pick < 0.7:
            v = self.r.choice([lo, hi, lo + 1, hi - 1, 0, 1])
        else:
            v = self.r.randint(lo, hi)
        return literal(t, v)

    def float_literal(self, t: str) -> tuple[Expr, _Props]:
        v = self.r.choice(_FLOAT_LITERALS if self.fast else _EXACT_FLOAT_LITERALS)
        return literal(t, v), _Props(mag=abs(v))

    def any_literal(self, t: str) -> tuple[Expr, _Props]:
        return self.float_literal(t) if is_float(t) else (self.int_literal(t), _Props())

    # ------------------------------------------------------------------ expressions
    def expr(self, s: _State, t: str, depth: int, *, exact: bool = False,
             uniform: bool = False) -> tuple[Expr, _Props]:
        """A random expression of type `t` and what is known of its value. `exact`: an
        operand of float arithmetic in fast mode (see the module docstring); `uniform`: only
        workgroup-uniform values."""
        if t == "bool":
            return self.cond(s, depth, uniform=uniform)
        exact = exact and self.fast and is_float(t)
        if depth <= 0 or self.chance(0.25):
            e, p = self.leaf(s, t, exact=exact, uniform=uniform)
        else:
            choices = self._expr_choices(t, exact)
            kind = self.r.choices([c for c, _ in choices], [w for _, w in choices])[0]
            e, p = getattr(self, "_e_" + kind)(s, t, depth - 1, exact, uniform)
        if exact and not exact_ok(t, p.mag):
            return self.float_literal(t)
        return e, p

    def _expr_choices(self, t: str, exact: bool):
        if is_float(t):
            c = [("arith", 6), ("minmax", 2), ("unary", 2), ("select", 2), ("ifexp", 1), ("cast", 3)]
            c.append(("rounding", 1))
        else:
            c = [("arith", 6), ("bitop", 3), ("div", 3), ("shift", 3), ("unary", 2), ("minmax", 2),
                 ("select", 2), ("ifexp", 1), ("cast", 3)]
        if self.helpers and not exact:       # helper results count as rounded
            c.append(("call", 2))
        return c

    def _var_props(self, v: Var) -> _Props:
        return _Props(v.uniform, v.nanfree, v.mag)

    def leaf(self, s: _State, t: str, *, exact: bool = False, uniform: bool = False):
        cands = [v for v in self.visible(s) if (v.type == t or v.type == "pyint")
                 and (not uniform or v.uniform) and not (exact and not exact_ok(t, v.mag))]
        pick = self.r.random()
        if not uniform and s.helper is None and pick < 0.12:
            e = self._memory_read(s, t)
            if e is not None:
                return e
        if cands and pick < 0.8:
            v = self.r.choice(cands)
            if v.type == "pyint":
                return Expr(f"{t}({v.name})", type=t), _Props(True, mag=3.0)
            return Expr(v.name, type=t), self._var_props(v)
        others = [v for v in self.visible(s) if v.type in self._cast_sources(t)
                  and (not uniform or v.uniform)]
        if others and pick < 0.9:      # a value of another type, converted
            v = self.r.choice(others)
            return self._cast(t, Expr(v.name, type=v.type), self._var_props(v))
        return self.any_literal(t)

    def _memory_read(self, s: _State, t: str):
        """A read of the shared array (where its phase allows it) or of an input buffer at an
        index reduced modulo its length."""
        opts = []
        if self.shared and self.shared[1] == t and self.phase != "none":
            opts.append("shared")
        ins = [name for name, ty in self.inputs if ty == t]
        if ins:
            opts.append("input")
        if not opts:
            return None
        if self.r.choice(opts) == "shared":
            name = self.shared[0]
            props = _Props(False, self.shared_nanfree, self.shared_mag)
            if self.phase == "own" or self.chance(0.2):
                return Expr(f"{name}[lid]", type=t), props
            idx, _ = self.expr(s, "u32", 1)
            return Expr(f"{name}[{{0}} % u32({self.wg})]", [idx], type=t, fixed=True), props
        idx, _ = self.expr(s, "u32", 1)
        return (Expr(f"{self.r.choice(ins)}[{{0}} % u32({self.length})]", [idx], type=t, fixed=True),
                self._input_props(t))

    def _input_props(self, t: str) -> _Props:
        return _Props(False, True, FAST_INPUT_RANGE if self.fast and is_float(t) else INF)

    def _e_arith(self, s, t, d, exact, uniform):
        op = self.r.choice(["+", "-", "*"])
        a, pa = self.expr(s, t, d, exact=True, uniform=uniform)
        b, pb = self.expr(s, t, d, exact=True, uniform=uniform)
        uni = pa.uniform and pb.uniform
        if not is_float(t):
            return Expr(f"({{0}} {op} {{1}})", [a, b], type=t), _Props(uni)
        mag = pa.mag + pb.mag if op != "*" else INF          # a product is rounded
        if not exact_ok(t, mag):
            mag = INF
        return Expr(f"({{0}} {op} {{1}})", [a, b], type=t), _Props(uni, False, mag)

    def _e_bitop(self, s, t, d, exact, uniform):
        op = self.r.choice(["&", "|", "^"])
        a, pa = self.expr(s, t, d, uniform=uniform)
        b, pb = self.expr(s, t, d, uniform=uniform)
        return Expr(f"({{0}} {op} {{1}})", [a, b], type=t), _Props(pa.uniform and pb.uniform)

    def _e_div(self, s, t, d, exact, uniform):
        op = self.r.choice(["//", "%"])
        a, pa = self.expr(s, t, d, uniform=uniform)
        if self.chance(0.4):
            consts = [2, 3, 5, 7, 16] + ([-3, -7] if stype(t).signed else [])
            return Expr(f"({{0}} {op} {t}({self.r.choice(consts)}))", [a], type=t), pa
        b, pb = self.expr(s, t, d, uniform=uniform)
        div = Expr(f"(({{0}} & {t}(7)) + {t}(1))", [b], type=t, fixed=True)   # 1..8
        return Expr(f"({{0}} {op} {{1}})", [a, div], type=t), _Props(pa.uniform and pb.uniform)

    def _e_shift(self, s, t, d, exact, uniform):
        op = self.r.choice(["<<", ">>"])
        a, pa = self.expr(s, t, d, uniform=uniform)
        if self.chance(0.4):
            return Expr(f"({{0}} {op} {self.r.randrange(bits(t))})", [a], type=t), pa
        b, pb = self.expr(s, t, d, uniform=uniform)
        amount = Expr(f"({{0}} & {t}({bits(t) - 1}))", [b], type=t, fixed=True)
        return Expr(f"({{0}} {op} {{1}})", [a, amount], type=t), _Props(pa.uniform and pb.uniform)

    def _e_unary(self, s, t, d, exact, uniform):
        if is_float(t):
            op = self.r.choice(["neg", "abs"])
            a, pa = self.expr(s, t, d, exact=exact, uniform=uniform)
            return Expr("(-{0})" if op == "neg" else "pc.abs({0})", [a], type=t), pa
        ops = ["~"] + (["abs", "-"] if stype(t).signed else [])   # narrow -x wraps everywhere
        op = self.r.choice(ops)
        a, pa = self.expr(s, t, d, uniform=uniform)
        if op == "abs":
            return Expr(f"pc.abs({{0}} | {t}(1))", [a], type=t, fixed=True), pa
        return Expr(f"({op}{{0}})", [a], type=t), pa

    def _e_rounding(self, s, t, d, exact, uniform):
        fn = self.r.choice(["floor", "ceil", "trunc"])
        a, pa = self.expr(s, t, d, exact=exact, uniform=uniform)
        return Expr(f"pc.{fn}({{0}})", [a], type=t), _Props(pa.uniform, pa.nanfree, pa.mag + 1)

    def _nanfree(self, e: Expr, p: _Props, t: str) -> Expr:
        if p.nanfree:
            return e
        return Expr(f"pc.select({{0}} == {{0}}, {{0}}, {t}(0.0))", [e], type=t, fixed=True)

    def _e_minmax(self, s, t, d, exact, uniform):
        fn = self.r.choice(["min", "max"])
        a, pa = self.expr(s, t, d, exact=exact, uniform=uniform)
        b, pb = self.expr(s, t, d, exact=exact, uniform=uniform)
        if is_float(t):
            a, b = self._nanfree(a, pa, t), self._nanfree(b, pb, t)
        return (Expr(f"pc.{fn}({{0}}, {{1}})", [a, b], type=t),
                _Props(pa.uniform and pb.uniform, True, max(pa.mag, pb.mag)))

    def _e_select(self, s, t, d, exact, uniform):
        return self._choice(s, t, d, exact, uniform, "pc.select({0}, {1}, {2})")

    def _e_ifexp(self, s, t, d, exact, uniform):
        return self._choice(s, t, d, exact, uniform, "({1} if {0} else {2})")

    def _choice(self, s, t, d, exact, uniform, fmt):
        c, pc_ = self.cond(s, d, uniform=uniform)
        a, pa = self.expr(s, t, d, exact=exact, uniform=uniform)
        b, pb = self.expr(s, t, d, exact=exact, uniform=uniform)
        return (Expr(fmt, [c, a, b], type=t),
                _Props(pc_.uniform and pa.uniform and pb.uniform, pa.nanfree and pb.nanfree,
                       max(pa.mag, pb.mag)))

    def _cast_sources(self, t: str) -> list[str]:
        out = [u for u in SCALARS if u != t]
        return out

    def _e_cast(self, s, t, d, exact, uniform):
        src = self.r.choice(self._cast_sources(t))
        return self._cast(t, *self.expr(s, src, d, exact=exact, uniform=uniform))

    def _cast(self, t: str, a: Expr, pa: _Props):
        src = a.type
        if is_float(src) and not is_float(t):
            lo, hi = float_to_int_bounds(src, t)
            clamp = (f"pc.cast(pc.select({{0}} == {{0}}, pc.min(pc.max({{0}}, {src}({lo!r})), "
                     f"{src}({hi!r})), {src}(0.0)), {t})")
            return Expr(clamp, [a], type=t, fixed=True), _Props(pa.uniform)
        form = self.r.choice([f"{t}({{0}})", f"pc.cast({{0}}, {t})"])
        if not is_float(t):
            return Expr(form, [a], type=t), _Props(pa.uniform)
        if is_float(src):
            mag = pa.mag if exact_ok(t, pa.mag) else INF
            return Expr(form, [a], type=t), _Props(pa.uniform, pa.nanfree, mag)
        if self.fast:                    # a small integer: exact in every float type
            return (Expr(form.replace("{0}", f"({{0}} % {src}(64))"), [a], type=t, fixed=True),
                    _Props(pa.uniform, True, 64.0))
        return Expr(form, [a], type=t), _Props(pa.uniform, True, INF)

    def _e_call(self, s, t, d, exact, uniform):
        # self.helpers holds the helpers defined so far (a helper calls only earlier ones).
        fits = [h for h in self.helpers if h.ret == t]
        if not fits:
            return self.leaf(s, t, exact=exact, uniform=uniform)
        h = self.r.choice(fits)
        args, props = [], []
        for p in h.params:           # float parameters are exact values of magnitude <= 64
            e, pe = self.expr(s, p, d, exact=True, uniform=uniform)
            if is_float(p) and self.fast and pe.mag > HELPER_PARAM_MAG:
                e, pe = self.float_literal(p)
            args.append(e)
            props.append(pe)
        fmt = f"{h.name}(" + ", ".join(f"{{{i}}}" for i in range(len(args))) + ")"
        return Expr(fmt, args, type=t), _Props(all(p.uniform for p in props), False, INF)

    def cond(self, s: _State, depth: int, *, uniform: bool = False) -> tuple[Expr, _Props]:
        pick = self.r.random()
        if depth > 0 and pick < 0.15:
            a, pa = self.cond(s, depth - 1, uniform=uniform)
            b, pb = self.cond(s, depth - 1, uniform=uniform)
            op = self.r.choice(["&", "|", "and", "or"])
            return Expr(f"({{0}} {op} {{1}})", [a, b]), _Props(pa.uniform and pb.uniform)
        if depth > 0 and pick < 0.2:
            a, pa = self.cond(s, depth - 1, uniform=uniform)
            return Expr("(not {0})", [a]), pa
        t = self.r.choice(SCALARS)
        a, pa = self.expr(s, t, max(depth - 1, 0), uniform=uniform)
        b, pb = self.expr(s, t, max(depth - 1, 0), uniform=uniform)
        op = self.r.choice(["<", "<=", ">", ">=", "==", "!="])
        return Expr(f"({{0}} {op} {{1}})", [a, b]), _Props(pa.uniform and pb.uniform)

    def some_cond(self, s: _State) -> tuple[Expr, bool]:
        """A branch condition: sometimes workgroup-uniform on purpose."""
        c, p = self.cond(s, 2, uniform=self.chance(0.3))
        return c, p.uniform and s.uniform

    # ------------------------------------------------------------------ statements
    def block(self, s: _State, n: int) -> list[Stmt]:
        out: list[Stmt] = []
        s.scopes.append([])
        for _ in range(n):
            if self.budget <= 0:
                break
            self.budget -= 1
            out.extend(self.statement(s))
        s.scopes.pop()
        return out

    def statement(self, s: _State) -> list[Stmt]:
        kinds = [("assign", 5), ("reassign", 4), ("if", 3)]
        if s.helper is None:
            kinds.append(("store", 2))
        if s.depth < 3:
            kinds += [("loop", 3)]
        if s.loops:
            kinds.append(("exit_loop", 2))
        kinds.append(("return", 1))
        if (s.helper is None and s.depth == 0 and self.shared and not self.exited):
            kinds += [("shared_write", 3), ("barrier", 2)]
        kind = self.r.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        return getattr(self, "_s_" + kind)(s)

    def _new_var(self, s: _State, t: str, p: _Props, prefix: str = "v") -> Var:
        v = Var(self.fresh(prefix), t, p.uniform and s.uniform, p.nanfree, p.mag,
                loops=len(s.loops))
        s.scopes[-1].append(v)
        return v

    def _s_assign(self, s):
        t = self.r.choice(SCALARS)
        e, p = self.expr(s, t, 3)
        v = self._new_var(s, t, p)
        return [Stmt(f"{v.name} = {{0}}", [e])]

    def _s_reassign(self, s):
        # Fast mode: an exact float defined outside the innermost loop stays unassigned in it,
        # or the loop's earlier statements would read it rounded in the next iteration.
        cands = [v for v in self.visible(s) if v.mutable and v.type != "pyint"
                 and not (self.fast and is_float(v.type) and v.mag != INF and v.loops < len(s.loops))]
        if not cands:
            return self._s_assign(s)
        v = self.r.choice(cands)
        fl = is_float(v.type)
        if self.chance(0.3) and not (fl and self.fast and not exact_ok(v.type, v.mag)):
            op = self.r.choice(["+", "-"] + (["*", "^", "&", "|"] if not fl else []))
            e, p = self.expr(s, v.type, 2, exact=True)
            head = f"{v.name} {op}= {{0}}"
            mag = v.mag + p.mag
            p = _Props(p.uniform, not fl, mag if fl and exact_ok(v.type, mag) else INF)
        else:
            e, p = self.expr(s, v.type, 3)
            head = f"{v.name} = {{0}}"
        v.uniform = v.uniform and p.uniform and s.uniform
        v.nanfree = v.nanfree and p.nanfree
        v.mag = max(v.mag, p.mag)
        return [Stmt(head, [e])]

    def _s_store(self, s):
        name, t = self.r.choice(self.outputs)
        e, _ = self.expr(s, t, 3)
        return [Stmt(f"{name}[gid] = {{0}}", [e])]

    def _sub(self, s: _State, n: int, *, uniform: bool, loop: _Loop | None = None,
             runtime: bool = False, bind: list[Var] = ()) -> list[Stmt]:
        """A nested block under a condition or loop of the given uniformity."""
        saved = s.uniform
        s.uniform = s.uniform and uniform
        s.depth += 1
        if loop:
            s.loops.append(loop)
        s.runtime_loops += runtime
        s.scopes.append(list(bind))
        body = self.block(s, n)
        s.scopes.pop()
        s.runtime_loops -= runtime
        if loop:
            s.loops.pop()
        s.depth -= 1
        s.uniform = saved
        return body

    def _s_if(self, s):
        c, uni = self.some_cond(s)
        then = self._sub(s, self.r.randint(1, 3), uniform=uni)
        blocks = [(None, then)]
        pick = self.r.random()
        if pick < 0.2:             # else: if ... (an elif chain)
            blocks.append(("else:", self._s_if(s)))
        elif pick < 0.5:
            blocks.append(("else:", self._sub(s, self.r.randint(1, 3), uniform=uni)))
        return [Stmt("if {0}:", [c], blocks)]

    def _bound(self, s: _State) -> tuple[Expr, bool]:
        """A small runtime loop bound (u32, at most 4)."""
        if s.helper is None and self.chance(0.35):
            return Expr("n", type="u32"), True
        e, p = self.expr(s, "u32", 2, uniform=self.chance(0.3))
        return Expr(f"({{0}} % u32({self.r.randint(2, 4)}))", [e], type="u32", fixed=True), p.uniform

    def _s_loop(self, s):
        kinds = ["range", "unrolled", "while", "prange"]
        kind = self.r.choice(kinds)
        wants_break = self.chance(0.5)
        allow_continue = True
        loop = _Loop(allow_continue)
        n = self.r.randint(1, 4)
        out = []
        if kind == "range":
            bound, uni = self._bound(s)
            var = Var(self.fresh("j"), "u32", uni and s.uniform, mutable=False)
            body = self._sub(s, n, uniform=uni, loop=loop, runtime=True, bind=[var])
            head, exprs = f"for {var.name} in range({{0}}):", [bound]
        elif kind == "unrolled":
            var = Var(self.fresh("j"), "pyint", True, mutable=False)
            body = self._sub(s, n, uniform=True, loop=loop, bind=[var])
            head, exprs = f"for {var.name} in range({self.r.randint(1, 3)}):", []
        elif kind == "prange":
            lo = self.r.randint(0, 2)
            hi = lo + self.r.randint(0, 3)          # zero-trip loops are folded while tracing
            hint = ", unroll=True" if self.chance(0.3) else ""
            var = Var(self.fresh("q"), "u32", s.uniform, mutable=False)
            body = self._sub(s, n, uniform=True, loop=loop, runtime=True, bind=[var])
            head, exprs = f"for {var.name} in pc.range({lo}, {hi}{hint}):", []
        else:
            bound, uni = self._bound(s)
            w = Var(self.fresh("w"), "u32", uni and s.uniform, mutable=False)
            out.append(Stmt(f"{w.name} = u32(0)"))
            s.scopes[-1].append(w)
            body = [Stmt(f"{w.name} += u32(1)", protected=True)]
            body += self._sub(s, n, uniform=uni, loop=loop, runtime=True)
            head, exprs = f"while {w.name} < {{0}}:", [bound]
        if wants_break and loop.breaks == 0 and kind != "while":
            c, _ = self.some_cond(s)
            body.insert(self.r.randint(0, len(body)), Stmt("if {0}:", [c], [(None, [Stmt("break")])]))
        out.append(Stmt(head, exprs, [(None, body)]))
        return out

    def _s_exit_loop(self, s):
        loop = s.loops[-1]
        what = "break" if not loop.allow_continue or self.chance(0.5) else "continue"
        loop.breaks += what == "break"
        c, uni = self.some_cond(s)
        pre = self._sub(s, self.r.randint(0, 1), uniform=uni)
        if not uni:
            s.uniform = False      # the rest of the loop body runs in fewer invocations
        return [Stmt("if {0}:", [c], [(None, pre + [Stmt(what)])])]

    def _s_return(self, s):
        c, uni = self.some_cond(s)
        if s.helper is not None:
            e, _ = self.expr(s, s.helper.ret, 2)
            return [Stmt("if {0}:", [c], [(None, [Stmt("return {0}", [e])])])]
        # Even a uniform return may leave some invocations running (those that took an earlier
        # divergent `continue`), so any return ends the use of barriers.
        self.exited = True
        s.uniform = s.uniform and uni
        return [Stmt("if {0}:", [c], [(None, [Stmt("return")])])]

    def _s_shared_write(self, s):
        name, t = self.shared
        out = []
        if self.phase == "all":
            out.append(Stmt("pc.barrier()", protected=True))   # readers are done before we write
            self.phase = "own"     # the value written may read this invocation's slot only
        e, p = self.expr(s, t, 3)
        out.append(Stmt(f"{name}[lid] = {{0}}", [e], protected=True))
        self.phase = "own"
        self.shared_mag = max(self.shared_mag, p.mag)
        self.shared_nanfree = self.shared_nanfree and p.nanfree
        return out

    def _s_barrier(self, s):
        if self.phase == "own":
            self.phase = "all"
        return [Stmt("pc.barrier()")]

    # ------------------------------------------------------------------ functions
    def helper(self, index: int) -> Function:
        params = [self.r.choice(SCALARS) for _ in range(self.r.randint(1, 3))]
        h = _Helper(f"h{index}", params, self.r.choice(SCALARS))
        s = _State(helper=h)
        names = [f"a{i}" for i in range(len(params))]
        s.scopes[0] = [Var(n, t, False, True, HELPER_PARAM_MAG if self.fast else INF)
                       for n, t in zip(names, params)]
        self.budget = self.r.randint(2, 6)
        body = self.block(s, self.budget)
        e, _ = self.expr(s, h.ret, 3)
        body.append(Stmt("return {0}", [e]))
        self.helpers.append(h)
        return Function("@pc.func", f"def {h.name}({', '.join(names)}):", body)

    def kernel(self) -> Program:
        r = self.r
        self.wg = r.choice(WORKGROUP_SIZES)
        grid = r.randint(1, 3)
        self.length = self.wg * grid
        functions = [self.helper(i) for i in range(r.choice([0, 0, 1, 2]))]
        self.inputs = [(f"A{i}", r.choice(SCALARS)) for i in range(r.randint(1, 3))]
        self.outputs = [(f"O{i}", r.choice(SCALARS)) for i in range(r.randint(1, 3))]
        scalars = {"n": r.randint(0, 4)}
        extra = [(f"p{i}", r.choice(SCALARS)) for i in range(r.randint(0, 2))]
        for name, t in extra:
            scalars[name] = float(r.choice([0.5, -2.0, 3.0])) if is_float(t) else r.randint(0, 5)
        params = ([f"{n}: pc.ReadBuffer[{t}]" for n, t in self.inputs]
                  + [f"{n}: pc.Buffer[{t}]" for n, t in self.outputs]
                  + ["n: u32"] + [f"{n}: {t}" for n, t in extra])
        s = _State()
        g = s.scopes[0]
        g += [Var("gid", "u32", False, mutable=False), Var("lid", "u32", False, mutable=False),
              Var("wid", "u32", True, mutable=False), Var("n", "u32", True, mutable=False)]
        g += [Var(n, t, True, mag=3.0, mutable=False) for n, t in extra]
        body = [Stmt("gid = pc.global_invocation_id.x"), Stmt("lid = pc.local_invocation_index()"),
                Stmt("wid = pc.workgroup_id.x")]
        if "shared" in self.f.families and r.random() < 0.7:
            self.shared = ("S", r.choice(SCALARS))
            body.append(Stmt(f"S = pc.shared({self.shared[1]}, {self.wg})", protected=True))
        for name, t in self.inputs:
            v = Var(self.fresh("x"), t, False, mag=self._input_props(t).mag)
            body.append(Stmt(f"{v.name} = {name}[gid]"))
            g.append(v)
        self.budget = r.randint(6, 24)
        s.scopes.append([])
        while self.budget > 0:
            self.budget -= 1
            body.extend(self.statement(s))
        for name, t in self.outputs:
            e, _ = self.expr(s, t, 2)
            body.append(Stmt(f"{name}[gid] = {{0}}", [e]))
        deco = f"@pc.kernel(workgroup_size={self.wg}"
        deco += ', fp="exact")' if self.f.fp == "exact" else ")"
        functions.append(Function(deco, f"def kern({', '.join(params)}):", body))
        length = {n: self.length for n, _ in self.inputs + self.outputs}
        ranges = {n: FAST_INPUT_RANGE for n, t in self.inputs if self.fast and is_float(t)}
        return Program(self.seed, self.f.describe(), [], functions, grid, length, scalars, ranges)


def generate(seed: int, features: Features | None = None) -> Program:
    """The random kernel of `seed` (the same program for the same seed and features)."""
    features = features or Features()
    kinds = ["scalar"] + [k for k in ("khr", "nv") if k in features.families]
    kind = random.Random(seed).choice(kinds)
    if kind == "khr":
        return KhrGenerator(seed, features).kernel()
    if kind == "nv":
        return NvGenerator(seed, features).kernel()
    return ScalarGenerator(seed, features).kernel()
