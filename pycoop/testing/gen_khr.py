"""Random kernels with KHR cooperative matrices (the "khr" feature family).

Each subgroup loads its own A, B and C tiles from row- or column-major buffers at random
aligned offsets and strides, applies a random sequence of multiply-adds, element-wise
arithmetic, scalar scaling, negation and component-conversion round trips (in uniform loops
and under uniform conditions), and stores the result at a random aligned place.

Results must be bit-identical on every implementation, whatever the order in which a device
accumulates products, so inputs are small integers (`RANGES` in the printed program) and the
generator tracks a bound on every element's magnitude, choosing only operations that keep the
result exactly representable in the accumulator type (and in f16 for a round trip through it).
Offsets and strides are multiples of 16 bytes (VUID-RuntimeSpirv-OpCooperativeMatrixLoadKHR-08986).
"""
from __future__ import annotations

import random

from .features import Features
from .program import Expr, Function, Program, Stmt

SUBGROUP = 32
# (M, N, K, A, B, C): shapes the NVIDIA drivers list for subgroup scope (result type = C).
SHAPES = (
    (16, 16, 16, "f16", "f16", "f32"),
    (16, 16, 16, "f16", "f16", "f16"),
    (16, 8, 16, "f16", "f16", "f32"),
    (16, 8, 8, "f16", "f16", "f32"),
    (16, 16, 32, "i8", "i8", "i32"),
    (16, 16, 32, "u8", "u8", "u32"),
    (16, 8, 32, "i8", "i8", "i32"),
)
_SIZE = {"f16": 2, "f32": 4, "i8": 1, "u8": 1, "i32": 4, "u32": 4}
# Largest magnitude up to which every integer is exact in the type (integers wrap exactly).
_EXACT = {"f16": 2048, "f32": 2 ** 24, "i32": float("inf"), "u32": float("inf")}


class KhrGenerator:
    def __init__(self, seed: int, features: Features):
        self.seed = seed
        self.f = features
        self.r = random.Random(seed)

    def _layout(self, rows: int, cols: int, t: str):
        """(layout, offset, stride, region length) of one tile in a buffer of `t`."""
        align = 16 // _SIZE[t]
        layout = self.r.choice(["row_major", "col_major"])
        inner, outer = (cols, rows) if layout == "row_major" else (rows, cols)
        stride = inner + align * self.r.choice([0, 0, 1, 2])
        offset = align * self.r.choice([0, 0, 1, 3])
        region = offset + stride * (outer - 1) + inner
        region = -(-region // align) * align
        return layout, offset, stride, region

    def kernel(self) -> Program:
        r = self.r
        M, N, K, ta, tb, tc = r.choice(SHAPES)
        nsg = r.choice([1, 2])
        grid = r.choice([1, 2])
        tiles = nsg * grid
        unsigned = tc.startswith("u")
        ranges = {"A": 3, "B": 3, "C": 6}
        la, oa, sa, ra = self._layout(M, K, ta)
        lb, ob, sb, rb = self._layout(K, N, tb)
        lc, oc, sc, rc = self._layout(M, N, tc)
        ld, od, sd, rd = self._layout(M, N, tc)
        prelude = [f"MA = pc.coopmat[{ta}, pc.Subgroup, {M}, {K}, pc.UseA]",
                   f"MB = pc.coopmat[{tb}, pc.Subgroup, {K}, {N}, pc.UseB]",
                   f"MC = pc.coopmat[{tc}, pc.Subgroup, {M}, {N}, pc.Accumulator]", ""]
        body = [Stmt(f"t = pc.workgroup_id.x * u32({nsg}) + pc.subgroup_id()"),
                Stmt(f'a = MA.load(A, t * u32({ra}) + u32({oa}), {sa}, "{la}")'),
                Stmt(f'b = MB.load(B, t * u32({rb}) + u32({ob}), {sb}, "{lb}")')]
        if r.random() < 0.7:
            body.append(Stmt(f'c = MC.load(C, t * u32({rc}) + u32({oc}), {sc}, "{lc}")'))
        else:
            v = r.randint(0 if unsigned else -6, 6)
            body.append(Stmt(f"c = MC.fill({float(v) if tc.startswith('f') else v})"))
        body.append(Stmt("acc = pc.mul_add(a, b, c)"))
        prod = K * 9                               # |A*B| per element
        bound = prod + 6
        limit = _EXACT[tc]
        for _ in range(r.randint(1, 6)):
            stmts, bound = self._step(tc, bound, prod, limit, unsigned)
            body += stmts
        body.append(Stmt(f'pc.store(D, t * u32({rd}) + u32({od}), acc, {sd}, "{ld}")'))
        n = r.randint(0, 3)
        sig = (f"def kern(A: pc.ReadBuffer[{ta}], B: pc.ReadBuffer[{tb}], C: pc.ReadBuffer[{tc}], "
               f"D: pc.Buffer[{tc}], n: u32):")
        deco = f"@pc.kernel(workgroup_size={SUBGROUP * nsg}, subgroup_size={SUBGROUP}"
        deco += ', fp="exact")' if self.f.fp == "exact" else ")"
        length = {"A": tiles * ra, "B": tiles * rb, "C": tiles * rc, "D": tiles * rd}
        return Program(self.seed, self.f.describe(), prelude, [Function(deco, sig, body)], grid,
                       length, {"n": n}, ranges)

    def _step(self, tc: str, bound: float, prod: int, limit: float, unsigned: bool):
        """One random operation on `acc`, kept exact: (statements, new bound). Integer
        accumulators wrap exactly, so only float ones (and conversions) need the bound."""
        r = self.r
        floating = tc.startswith("f")
        options = []
        if bound + prod <= limit:
            options.append(("mul_add", bound + prod))
        if bound + 6 <= limit:
            options += [("add", bound + 6), ("sub", bound + 6), ("if", bound + 6)]
        if bound * 6 <= limit:
            options.append(("mul", bound * 6))
        if floating and bound * 2 <= limit:
            options.append(("scale", bound * 2))
        if bound + 3 * prod <= limit:
            options.append(("loop", bound + 3 * prod))
        if not unsigned:
            options.append(("neg", bound))
        if bound <= 2048 and tc in ("f16", "f32", "i32"):
            options.append(("convert", bound))
        kind, new = r.choice(options)
        if unsigned and kind == "sub":
            new = float("inf")                  # wraps around: no more conversions
        if kind in ("add", "sub", "mul"):
            op = {"add": "+", "sub": "-", "mul": "*"}[kind]
            return [Stmt(f"acc = acc {op} c")], new
        if kind == "mul_add":
            return [Stmt("acc = pc.mul_add(a, b, acc)")], new
        if kind == "scale":
            return [Stmt("acc = acc * 2.0")], new
        if kind == "neg":
            return [Stmt("acc = -acc")], new
        if kind == "loop":
            return [Stmt("for k in range(n):", [], [(None, [Stmt("acc = pc.mul_add(a, b, acc)")])])], new
        if kind == "convert":
            via = {"f16": "f32", "f32": "f16", "i32": "f32"}[tc]
            return [Stmt(f"acc = pc.convert(pc.convert(acc, {via}), {tc})")], new
        cond = r.choice(["pc.workgroup_id.x % u32(2) == u32(0)", "n > u32(1)",
                         "pc.subgroup_id() == u32(0)"])
        return [Stmt("if {0}:", [Expr(cond)], [(None, [Stmt("acc = acc + c")])])], new
