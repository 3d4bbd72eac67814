"""Allowed differences: the documented ways one driver computes something other than the
emulator, as an explicit table keyed by device and op.

The emulator implements the SPIR-V and IEEE 754 meaning of each operation, and a conforming
device agrees with it bit for bit (in exact float mode). Where a driver is known to differ
(docs/numerics.md, "Driver workarounds"), the fuzzer must neither report the difference as a
new failure nor stop seeing it. So a difference is never waived by looking at the output: the
emulator runs the kernel again with the listed ops computed as that driver computes them
(`device_model`), and the difference is allowed only if that run gives the device's bits
exactly. Each allowance names the driver it applies to; on any other device (the H100, say)
none applies and the comparison stays bit for bit.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from pycoop.ops.core import COMPARE, narrowable_i64_compare, sign_extended_i32
from pycoop.ir.core import walk_block
from pycoop.ir.registry import get
from pycoop.runtime.vulkan import PipelineError, get_runtime
from pycoop.types import BufferType

_NUMERICS = "docs/numerics.md, Driver workarounds, lavapipe (Mesa 22.3.6)"
_NUMERICS_NV = "docs/numerics.md, Driver workarounds, NVIDIA 580.159.04"


def host_cpu_flags() -> frozenset:
    """The feature flags of this machine's CPU as Linux lists them ("avx", "avx512f", ...; the
    kernel lists only features the OS has enabled, as Mesa's own check requires), empty where
    /proc/cpuinfo is unreadable. lavapipe compiles shaders for this CPU, so some of its
    deviations depend on them."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@dataclass(frozen=True)
class Allowance:
    """One driver's documented deviation in one op. `device` is a regular expression searched
    in "device name | driver version"; `deviate(op, result, *operands)` turns the emulator's
    result of registry op `op_name` into the driver's (returning it unchanged where the
    deviation does not apply)."""
    name: str
    device: str
    op_name: str | tuple[str, ...]
    what: str
    docs: str
    deviate: Callable[..., np.ndarray]
    # (device, host CPU flags) -> whether the deviation occurs there (None: always)
    applies: Callable[[str, frozenset], bool] | None = None
    # (op, *operands) -> the operands the driver computes with (None: the emulator's)
    operands: Callable[..., tuple] | None = None

    @property
    def op_names(self) -> tuple[str, ...]:
        return (self.op_name,) if isinstance(self.op_name, str) else self.op_name


def _min_max_second_of_zeros(op, r, a, b):
    # lavapipe's FMin/FMax return the second operand of a +-0 pair (x86 MINPS/MAXPS return
    # their second operand for a zero pair); the emulator orders -0 below +0 (IEEE
    # minimumNumber/maximumNumber), as the H100 does. An operand of `_zero_pair_result`'s
    # kinds is returned on either side where the other is not of them (seed 8104857:
    # min(f32(n), x) of n = 0 and x = -0.0 is +0.0 there, whichever side f32(n) is on).
    if op.attrs["kind"] not in ("min", "max") or r.dtype.kind != "f":
        return r
    pa, pb = (_zero_pair_result(x) for x in op.operands)
    second = a if pa and not pb else b
    return np.where((a == 0) & (b == 0), second, r).astype(r.dtype, copy=False)


def _zero_pair_result(v) -> bool:
    """Whether lavapipe's min/max returns `v` for a +-0 pair on either side (where the other
    operand is not such a value too), as probed there for every pair of operand kinds: a value
    its compiler knows (a literal, a constant it folds: `_known_constant`), an f32 converted
    from an integer of any width and signedness, and a min or max of two such values. Not
    f16 or f64 ones, conversions between floats, loads, parameters, negations, products, or
    selects that guard against NaN."""
    if _known_constant(v) is not None:
        return True
    op = getattr(v, "op", None)
    if op is not None and op.name == "binary" and op.attrs["kind"] in ("min", "max"):
        return all(_zero_pair_result(x) for x in op.operands)    # seed 8205071
    return (op is not None and op.name == "cast" and str(v.type) == "f32"
            and not getattr(op.operands[0].type, "is_float", True))


def _result_index(v) -> int:
    """Which of its op's results `v` is."""
    return next(k for k, r in enumerate(v.op.results) if r is v)


def _same_bits(a, b) -> bool:
    """Whether two known values (None: unknown) are the same bits (+0.0 and -0.0 differ)."""
    return a is not None and b is not None and np.asarray(a).tobytes() == np.asarray(b).tobytes()


def _yielded(v) -> list:
    """The values an `if` result `v` takes from its branches (None for a branch that yields
    nothing)."""
    i = _result_index(v)
    ends = [r.ops[-1] if r.ops else None for r in v.op.regions]
    return [e.operands[i] if e is not None and e.name == "yield" else None for e in ends]


def _f64_to_f16_through_f32(op, r, x):
    # Two roundings (f64 -> f32 -> f16) where SPIR-V's OpFConvert rounds once.
    if str(op.operands[0].type) != "f64" or str(op.attrs["type"]) != "f16":
        return r
    with np.errstate(over="ignore"):
        return np.asarray(x).astype(np.float32).astype(np.float16)


def _f64_trunc_through_int(op, r, x):
    # Mesa's lp_build_trunc without a rounding instruction for the vector (gallivm
    # lp_bld_arit.c): sitofp(fptosi(x)), so every x in (-1, 0], -0.0 included, gives +0.0, and
    # x itself where |x| > 2^24 (the code's cut-off for "already an integer": a non-integer
    # above it, e.g. trunc(-438443306495.1085), stays unchanged). f32 has the instruction.
    if op.attrs["kind"] != "trunc" or r.dtype != np.float64:
        return r
    x = np.asarray(x, np.float64)
    return np.where(np.abs(x) > 2.0 ** 24, x, np.where(r == 0, 0.0, r))


def lavapipe_f64_vector_bits(device: str) -> int | None:
    """The width in bits of lavapipe's f64 vectors: a compute shader runs (native width / 32)
    invocations per vector ("llvmpipe (LLVM 15.0.6, 256 bits)"), and an f64 value of each, so
    twice the native width, up to the 512 bits that the widest setting measured
    (LP_NATIVE_VECTOR_WIDTH=512 on an AVX-512 CPU rounds f64 exactly)."""
    m = re.search(r"llvmpipe \(LLVM [^,]*, (\d+) bits\)", device)
    return None if m is None else min(2 * int(m.group(1)), 512)


def lavapipe_f64_trunc_through_int(device: str, flags: frozenset) -> bool:
    """Whether lavapipe truncates f64 vectors through integers on this CPU: Mesa's
    arch_rounding_available() (lp_bld_arit.c) uses the rounding instruction for 128-bit
    vectors with SSE4.1, 256-bit with AVX and 512-bit with AVX-512F (any width on NEON or
    s390x). At the default 256-bit native width the f64 vectors are 512 bits: CPUs without
    AVX-512F (most AVX2 machines) take the integer path, AVX-512 ones round exactly."""
    bits = lavapipe_f64_vector_bits(device)
    if bits is None or not flags:
        return False
    if "asimd" in flags or "neon" in flags:          # aarch64 / arm (flag names of Linux)
        return False
    need = {128: "sse4_1", 256: "avx", 512: "avx512f"}.get(bits)
    return need is None or need not in flags


_F32_TINY = np.float32(np.finfo(np.float32).smallest_normal)


def _flush_f32(v):
    """f32 subnormals to a zero of their sign; everything else unchanged."""
    if not isinstance(v, np.ndarray) and not isinstance(v, np.floating):
        return v
    a = np.asarray(v)
    if a.dtype != np.float32:
        return v
    r = np.where(np.abs(a) < _F32_TINY, np.copysign(np.float32(0), a), a).astype(np.float32)
    return r if isinstance(v, np.ndarray) else np.float32(r[()])


# Ops that are f32 arithmetic on NVIDIA's FTZ path: everything that computes, converts or
# compares a float, but not moves (select, load, store, bitcast).
_FTZ_OPS = ("binary", "unary", "compare", "cast", "fma")


def _ftz_operands(op, *operands):
    return tuple(_flush_f32(x) for x in operands)


def _ftz_result(op, r, *operands):
    if op.name == "binary" and op.attrs["kind"] not in ("add", "sub", "mul", "div", "rem",
                                                        "min", "max"):
        return r
    return _flush_f32(r)


_INT_FOLDS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "and": np.bitwise_and,
              "or": np.bitwise_or, "xor": np.bitwise_xor}


_UNARY_FOLDS = {"neg": np.negative, "not": np.invert, "abs": np.abs, "floor": np.floor,
                "ceil": np.ceil, "trunc": np.trunc}


def _known_constant(v, env: dict | None = None):
    """The value the driver's compiler knows `v` to have at compile time (None: a runtime
    value; `env`: known values of block arguments, `_loop_of_known_values`'), as far as these
    rules follow it: literals; conversions, negation, `abs` and rounding of known values;
    comparisons, `select` and `min`/`max` of known values (a `select` of one known value both
    ways, whatever its condition; an integer compared with itself; an unsigned one with 0);
    what an `if` of a known condition yields, or one yields both ways; a loop's results where
    its condition is known, and the arguments of a loop body that runs once (`device_model`
    given the module), and a value a loop keeps through its body; `not`, `and`, `or`,
    `xor` of known bools; integer
    `+ - * // % & | ^ << >>` of known values, `x - x` and `x ^ x` (also of two truncations of
    one value to the same width, `u16(i16(x)) - u16(x)`), `~` of a known value, `x * 0`,
    `x & 0`, `x % 1`, `x >> 0` and `0 >> x`; float `* + -` of two known values as IEEE
    arithmetic (seed 8404400: `0.0 * -10000.0` is -0.0), of one known zero as
    `_fold_zero_operands` says. Other constant expressions are not tracked: a difference
    through one is reported, not allowed."""
    op = getattr(v, "op", None)
    if op is None:                # a block argument: known where `env` (a loop's) says
        return _once_loop_argument(v) if env is None else env.get(id(v))
    if not hasattr(v.type, "dtype"):
        return None
    if op.name == "compare":
        a, b = (_known_constant(x, env) for x in op.operands)
        x, y = op.operands
        if getattr(x.type, "is_int", False) and _low_bits_root(x, x.type) is _low_bits_root(
                y, y.type) and x.type == y.type:
            return op.attrs["kind"] in ("le", "ge", "eq")      # a value against itself
        if a is None or b is None:
            return _unsigned_against_zero(op, a, b)
        return bool(COMPARE[op.attrs["kind"]][3](a, b))
    if op.name == "select":
        c = _known_constant(op.operands[0], env)
        if c is not None:
            return _known_constant(op.operands[1 if c else 2], env)
        # a select of one known value both ways is that value (seed 8105212:
        # `select(i8(0) > i8(n), 0.0, 0.0) - x` is `-x` there)
        a, b = (_known_constant(x, env) for x in op.operands[1:])
        return a if _same_bits(a, b) else None
    if op.name == "if":           # a known condition: the value its branch yields
        c = _known_constant(op.operands[0], env)
        ys = [None if y is None else _known_constant(y, env) for y in _yielded(v)]
        if c is not None:
            return ys[0 if c else 1]
        return ys[0] if _same_bits(*ys) else None   # one value both ways, whatever the condition
    if op.name == "loop":
        return _loop_of_known_values(v, env)
    if v.type.is_bool:
        return _known_bool(op, env)
    dtype = v.type.dtype
    if op.name == "const":
        return dtype.type(op.attrs["value"])
    if op.name == "cast":
        c = _known_constant(op.operands[0], env)
        with np.errstate(all="ignore"):
            return None if c is None else np.asarray(c).astype(dtype)[()]
    if op.name == "unary" and op.attrs["kind"] in _UNARY_FOLDS:
        c = _known_constant(op.operands[0], env)
        with np.errstate(all="ignore"):
            return None if c is None else dtype.type(_UNARY_FOLDS[op.attrs["kind"]](c))
    if op.name != "binary":
        return None
    kind = op.attrs["kind"]
    x, y = op.operands
    a, b = _known_constant(x, env), _known_constant(y, env)
    if kind in ("min", "max") and a is not None and b is not None:
        if not (a == 0 and b == 0):
            return (np.minimum if kind == "min" else np.maximum)(a, b)
        if _same_bits(a, b):
            return a                    # two equal zeros: no question of which one
    if v.type.is_float:
        if kind not in ("mul", "add", "sub"):
            return None
        if a is not None and b is not None:     # both known: folded as IEEE arithmetic
            with np.errstate(all="ignore"):     # (0.0 * -10000.0 is -0.0)
                return dtype.type(a * b if kind == "mul" else a + b if kind == "add" else a - b)
        if kind == "mul":
            return a if a == 0 else b if b == 0 else None
        if b is not None and kind == "sub":
            b = -b
        return b if a == 0 else a if b == 0 else None
    if kind in ("sub", "xor") and _low_bits_root(x, v.type) is _low_bits_root(y, v.type):
        return dtype.type(0)
    if kind in ("mul", "and") and (a == 0 or b == 0):
        return dtype.type(0)
    if kind in ("shl", "shr") and (b == 0 or a == 0):
        return a                        # by 0, or of 0 (seed 8204009: `0 >> (lid & 31)`)
    if kind in ("shl", "shr") and a is not None and b is not None \
            and 0 <= int(b) < 8 * np.dtype(dtype).itemsize:
        shift = np.left_shift if kind == "shl" else np.right_shift     # >> as the type's sign
        return shift(np.asarray(a), np.asarray(b).astype(dtype)).astype(dtype)[()]
    if kind == "rem" and b is not None and abs(int(b)) == 1:
        return dtype.type(0)            # x % 1 (seed 8400468: `A[i] % ((0 & 7) + 1)`)
    if kind in ("div", "rem") and a is not None and b:      # truncating, as OpSDiv / OpUDiv
        q = abs(int(a)) // abs(int(b)) * (1 if (a < 0) == (b < 0) else -1)
        return dtype.type(q if kind == "div" else int(a) - q * int(b))
    if kind in _INT_FOLDS and a is not None and b is not None:
        with np.errstate(all="ignore"):
            return _INT_FOLDS[kind](np.asarray(a), np.asarray(b)).astype(dtype)[()]
    return None


def _known_bool(op, env) -> bool | None:
    """A bool the driver's compiler knows: a literal, `not` and `and`/`or`/`xor` of known
    ones (`and` with a known False, `or` with a known True, whatever the other)."""
    if op.name == "const":
        return bool(op.attrs["value"])
    args = [_known_constant(x, env) for x in op.operands]
    if op.name == "unary" and op.attrs["kind"] == "not":
        return None if args[0] is None else not args[0]
    if op.name != "binary" or op.attrs["kind"] not in ("and", "or", "xor"):
        return None
    kind = op.attrs["kind"]
    if kind != "xor" and (not kind == "and") in args:      # False and x, True or x
        return kind == "or"
    if None in args:
        return None
    a, b = (bool(x) for x in args)
    return {"and": a and b, "or": a or b, "xor": a != b}[kind]


def _unsigned_against_zero(op, a, b) -> bool | None:
    """An unsigned comparison with a known 0 that holds or fails for every value (seed
    8203505: `u16(w) < u16(0)` is false there, whatever w), else None."""
    kind, t = op.attrs["kind"], op.operands[0].type
    if not (getattr(t, "is_int", False) and not t.signed):
        return None
    if b == 0 and kind in ("lt", "ge"):
        return kind == "ge"
    if a == 0 and kind in ("gt", "le"):
        return kind == "le"
    return None


LOOP_FOLD_LIMIT = 64        # iterations of a loop of known values the model follows


def _loop_of_known_values(v, env: dict | None):
    """A loop result the driver's compiler computes: its loop run from its initial values
    (`_known_constant` on its condition and body), up to `LOOP_FOLD_LIMIT` iterations, as
    long as its condition is known (seeds 8203505 and 8204009: `while w < 1: w += 1` is 1
    there, and a loop whose condition is false on entry leaves its initial values; seed
    8400468: `for _ in range(2): x *= 0` makes x 0 whatever it was), or, whatever the
    condition, a value that keeps its initial value through the body (`_loop_invariants`);
    None where the result is not known."""
    i = _result_index(v)
    known = _run_known_loop(v.op, env)[i]
    return _loop_invariants(v.op, env).get(i) if known is None else known


def _loop_invariants(op, env: dict | None) -> dict:
    """{slot: value} of the values loop `op` carries that keep their known initial value on
    every iteration, however often its body runs: those its body yields back bit for bit
    when given them (the largest such set; the other slots unknown), as the driver's
    compiler finds them (seed 8702809: x through `for j in range(n): if c: continue`, c
    known true, keeps its value, and lavapipe's folding of a zero operand follows it)."""
    body = op.regions[1]
    end = body.ops[-1] if body.ops else None
    if end is None or end.name != "yield":
        return {}
    init = [_known_constant(x, env) for x in op.operands]
    kept = {i for i, x in enumerate(init) if x is not None}
    while kept:
        here = {**(env or {}), **{id(body.args[i]): init[i] for i in kept}}
        still = {i for i in kept if _same_bits(_known_constant(end.operands[i], here), init[i])}
        if still == kept:
            break
        kept = still
    return {i: init[i] for i in kept}


# The loop body each block argument of the module being modelled belongs to: {id(argument):
# (loop op, index)}, set by `device_model(..., module=)`.
_BODY_ARGUMENTS: dict[int, tuple] = {}


def _once_loop_argument(v):
    """The value of `v`, an argument of a loop body, where the loop runs its body exactly once
    from known initial values: the driver's compiler then has the body's arguments as those
    values (seed 8401952: the counter of `for j in range(u32(1) % u32(3))` is 0 there), or
    where `v` keeps its initial value through the body (`_loop_invariants`); else None."""
    owner = _BODY_ARGUMENTS.get(id(v))
    if owner is None:
        return None
    op, i = owner
    invariant = _loop_invariants(op, None)
    if i in invariant:
        return invariant[i]
    vals = [_known_constant(x) for x in op.operands]
    go, after = _loop_step(op, vals, None)
    if not go or vals[i] is None:
        return None
    again, _ = _loop_step(op, after, None)
    return vals[i] if again is not None and not again else None


def _loop_step(op, vals: list, env: dict | None) -> tuple:
    """(the condition of loop `op` at `vals`: True, False or None where not known; the values
    its body yields from them, None for those not known, or None where it does not run)."""
    cond, body = op.regions
    cond_end = cond.ops[-1] if cond.ops else None
    body_end = body.ops[-1] if body.ops else None
    if cond_end is None or cond_end.name != "condition" or body_end is None \
            or body_end.name != "yield":
        return None, None
    here = {**(env or {}), **{id(a): x for a, x in zip(cond.args, vals)}}
    go = _known_constant(cond_end.operands[0], here)
    if not go:
        return go, None
    here = {**(env or {}), **{id(a): x for a, x in zip(body.args, vals)}}
    return go, [_known_constant(y, here) for y in body_end.operands]


def _run_known_loop(op, env: dict | None) -> list:
    """The values of loop `op`'s block arguments where its condition first fails, run from
    its initial values for at most `LOOP_FOLD_LIMIT` iterations (None for those not known;
    all None where the condition is not known, or still holds, on the way)."""
    vals = [_known_constant(x, env) for x in op.operands]
    for _ in range(LOOP_FOLD_LIMIT):
        go, after = _loop_step(op, vals, env)
        if go is None:
            break
        if not go:
            return vals
        vals = after
    return [None] * len(vals)


def _low_bits_root(v, t):
    """The value whose low bits `v` holds as type `t`: through integer conversions that keep
    at least t's width on both sides (truncations and same-width reinterpretations: the
    driver's compiler sees `u16(i16(x))` and `u16(x)` as the same truncation of x), `min(x,
    x)` and `max(x, x)`, and selects of a known condition or of one value both ways (seed
    8203505: `x ^ select(1 < 1, y, x)` is 0 there)."""
    width = np.dtype(t.dtype).itemsize
    while True:
        op = getattr(v, "op", None)
        if op is not None and op.name == "binary" and op.attrs["kind"] in ("min", "max") \
                and op.operands[0] is op.operands[1]:
            v = op.operands[0]                     # min(x, x) is x
            continue
        if op is not None and op.name == "select":  # a known choice, or one value both ways
            c = _known_constant(op.operands[0])
            if c is not None or op.operands[1] is op.operands[2]:
                v = op.operands[1 if c is None or c else 2]
                continue
        if op is None or op.name != "cast":
            return v
        src = op.operands[0]
        if not (getattr(v.type, "is_int", False) and getattr(src.type, "is_int", False)
                and np.dtype(v.type.dtype).itemsize >= width
                and np.dtype(src.type.dtype).itemsize >= width):
            return v
        v = src


def _abs_of_nonnegative_select(op, r, x):
    # Mesa 22.3.6's NIR drops `fabs(a)` where its range analysis finds `a` never negative,
    # which it does for a select of two values not below zero: -0.0 counts (it is equal to
    # zero), so `abs(select(c, -0.0, 0.0))` is -0.0 where c holds, and so is
    # `abs(select(c, -0.0, f32(lid)))` (seed 7400636: a conversion from an unsigned integer).
    if op.attrs["kind"] != "abs" or np.asarray(r).dtype.kind != "f":
        return r
    sel = getattr(op.operands[0], "op", None)
    if sel is None or sel.name != "select" or not all(_not_negative(v)
                                                       for v in sel.operands[1:]):
        return r
    return np.broadcast_to(x, np.shape(r)).astype(np.asarray(r).dtype)


def _not_negative(v) -> bool:
    """Whether NIR's range analysis finds `v` never below zero (-0.0 counting as zero), as far
    as these rules follow it: a known value >= 0, a conversion from an unsigned integer, an
    `abs`, `exp`, `exp2` or `sqrt`, rounding of such a value, a select, sum or product of two
    such values, a max with one and a min of two."""
    known = _known_constant(v)
    if known is not None:
        return bool(known >= 0)
    op = getattr(v, "op", None)
    if op is None:
        return False
    if op.name == "cast":
        return str(op.operands[0].type).startswith("u")
    if op.name == "unary":
        kind = op.attrs["kind"]
        return kind in ("abs", "exp", "exp2", "sqrt") or (
            kind in ("floor", "ceil", "trunc") and _not_negative(op.operands[0]))
    if op.name == "select":
        return _not_negative(op.operands[1]) and _not_negative(op.operands[2])
    if op.name == "binary" and op.attrs["kind"] in ("min", "max", "add", "mul"):
        arms = [_not_negative(x) for x in op.operands]
        return any(arms) if op.attrs["kind"] == "max" else all(arms)
    return False


# integer identities the driver's compiler removes: kind -> (the identity operand's value,
# whether it may stand on the left as well as on the right)
_INT_IDENTITIES = {"mul": (1, True), "div": (1, False), "add": (0, True), "sub": (0, False),
                   "or": (0, True), "xor": (0, True), "shl": (0, False), "shr": (0, False),
                   "and": (-1, True)}


def _without_identities(v):
    """`v` with the integer identities its driver folds taken off: `x * 1`, `x // 1`,
    `x + 0`, `x - 0`, `x | 0`, `x ^ 0`, `x & ~0`, `x << 0`, `x >> 0` (the known operand as
    `_known_constant` finds it; seed 8901941: `i64(x) * i64(1) <= i64(0)` meets the sign
    extension's comparison defect)."""
    while True:
        op = getattr(v, "op", None)
        if op is None or op.name != "binary" or op.attrs["kind"] not in _INT_IDENTITIES \
                or not getattr(v.type, "is_int", False):
            return v
        unit, either = _INT_IDENTITIES[op.attrs["kind"]]
        x, y = op.operands
        if _is_unit(_known_constant(y), unit, v.type):
            v = x
        elif either and _is_unit(_known_constant(x), unit, v.type):
            v = y
        else:
            return v


def _is_unit(c, unit: int, t) -> bool:
    """Whether known value `c` is `unit` as an integer of type `t` (-1: all bits set)."""
    if c is None:
        return False
    return int(np.asarray(c).astype(t.dtype)) == int(np.asarray(unit).astype(t.dtype))


def _sext_compare_as_greater(op, r, a, b):
    # Mesa 22.3.6 evaluates a signed ordered comparison of an i32 value sign-extended to i64
    # with a constant that i32 holds as if the extended value were the greater: `w < 8` and
    # `w <= 8` false, `w > 8` and `w >= 8` true for every w (== and != are right, and so are
    # constants beyond i32, narrower sources and unsigned comparisons). Against a literal
    # constant pycoop emits the comparison in i32 (ops.core.narrowable_i64_compare): only a
    # constant the driver computes itself, such as `i64(3) + i64(5)`, meets the defect.
    kind = op.attrs["kind"]
    if kind not in ("lt", "le", "gt", "ge") or str(op.operands[0].type) != "i64":
        return r
    if narrowable_i64_compare(op):
        return r        # pycoop emits these as an i32 comparison, which the driver gets right
    x, y = op.operands
    for ext, const, ext_left in ((x, y, True), (y, x, False)):
        c = _known_constant(const)
        if sign_extended_i32(_without_identities(ext)) and c is not None \
                and -2 ** 31 <= int(c) < 2 ** 31:
            greater = kind in ("gt", "ge")          # `ext kind const` true where ext is greater
            return np.full(np.shape(r), greater if ext_left else not greater, dtype=bool)
    return r


def _fold_zero_operands(op, r, a, b):
    # Mesa 22.3.6's NIR folds `x * 0.0` to that 0.0 (the product's sign, and the NaN of an
    # infinite or NaN x, are lost) and `x + 0.0`, `0.0 + x` to `x` (wrong for x = -0.0) while
    # the module declares SignedZeroInfNanPreserve; `a - b` is `a + (-b)` there, so
    # `0.0 - x` is `-x` (wrong for x = +0.0).
    kind = op.attrs["kind"]
    if kind not in ("add", "sub", "mul") or r.dtype.kind != "f":
        return r
    ca, cb = (_known_constant(x) for x in op.operands)
    if kind == "mul":
        if ca == 0 and cb is None or cb == 0 and ca is None:
            return np.full_like(r, ca if ca == 0 else cb)
        return r
    if kind == "sub":
        b, cb = -b, None if cb is None else -cb
    if ca == 0:
        return np.broadcast_to(b, r.shape).astype(r.dtype)
    if cb == 0:
        return np.broadcast_to(a, r.shape).astype(r.dtype)
    return r


ALLOWANCES: tuple[Allowance, ...] = (
    Allowance("lavapipe_min_max_of_zeros", r"llvmpipe .*Mesa 22\.3\.6", "binary",
              "float min/max of a +0/-0 pair give the second operand (a literal, a folded "
              "value or an f32 converted from an integer on either side)", _NUMERICS,
              _min_max_second_of_zeros),
    Allowance("lavapipe_f64_to_f16", r"llvmpipe .*Mesa 22\.3\.6", "cast",
              "f64 -> f16 conversion rounds twice, through f32", _NUMERICS,
              _f64_to_f16_through_f32),
    Allowance("lavapipe_f64_trunc_zero", r"llvmpipe .*Mesa 22\.3\.6", "unary",
              "f64 trunc through integers: +0.0 for a value in (-1, 0], the value itself above "
              "2^24 (CPUs without the rounding instruction for lavapipe's f64 vectors: AVX-512F "
              "at the default 256-bit width)", _NUMERICS, _f64_trunc_through_int,
              applies=lavapipe_f64_trunc_through_int),
    Allowance("lavapipe_zero_operand_folding", r"llvmpipe .*Mesa 22\.3\.6", "binary",
              "x * 0.0 is that 0.0 (sign, inf and NaN lost); x + 0.0 and 0.0 + x are x; "
              "0.0 - x is -x", _NUMERICS, _fold_zero_operands),
    Allowance("lavapipe_abs_of_nonnegative_select", r"llvmpipe .*Mesa 22\.3\.6", "unary",
              "abs of a select of two values NIR finds not below zero is the select (-0.0 "
              "kept)",
              _NUMERICS, _abs_of_nonnegative_select),
    Allowance("lavapipe_sext_compare", r"llvmpipe .*Mesa 22\.3\.6", "compare",
              "a signed <, <=, >, >= of an i32 sign-extended to i64 and a constant i32 holds "
              "takes the extended value as the greater", _NUMERICS, _sext_compare_as_greater),
    Allowance("nvidia_f32_denormals_flushed", r"^NVIDIA .*\| NVIDIA \d+\.", _FTZ_OPS,
              "f32 subnormal operands and results of float arithmetic, comparisons and "
              "conversions are flushed to a zero of their sign (the driver has no "
              "shaderDenormPreserveFloat32; Vulkan allows the flush where a module does not "
              "declare DenormPreserve, which fp='exact' does not)", _NUMERICS_NV, _ftz_result,
              operands=_ftz_operands),
)


def loop_invariant_buffer_loads(module) -> list:
    """The buffer loads inside a loop whose buffer and index the loop does not change (their
    source locations). A value counts as changing in the loop, conservatively, where it is a
    block argument of the loop or of an op nested in it, the result of a load, of an op with
    regions or of an op with such an operand."""
    found = []
    for op in module.walk():
        if op.name != "loop":
            continue
        variant = {id(a) for r in op.regions for a in r.args}
        for inner in (o for r in op.regions for o in walk_block(r)):
            variant.update(id(a) for r in inner.regions for a in r.args)
            changes = inner.regions or any(id(v) in variant for v in inner.operands)
            if inner.name == "load" and not changes and isinstance(inner.operands[0].type,
                                                                   BufferType):
                found.append(inner.loc)
            if changes or inner.name == "load":
                variant.update(id(v) for v in inner.results)
    return found


# Drivers that fail to build some valid modules: (name, device pattern, condition on the IR
# module). The fuzzer counts such a kernel's `PipelineError` as the known defect (under its
# name, as an allowance) only where the module meets the condition; any other pipeline
# failure stays a finding.
PIPELINE_DEFECTS = (
    # vkCreateComputePipelines fails (VK_ERROR_UNKNOWN, "NVVM compilation failed") on some
    # valid modules with a loop whose body loads from a buffer at an address the loop does not
    # change; intermittent (docs/numerics.md, Driver workarounds, NVIDIA 580.159.04)
    ("nvidia_nvvm_loop_invariant_load", r"^NVIDIA .*\| NVIDIA 580\.", loop_invariant_buffer_loads),
)


def pipeline_defects_for(device: str) -> tuple[str, ...]:
    """The names of the pipeline-build defects of `device` ("name | driver version")."""
    return tuple(name for name, pattern, _ in PIPELINE_DEFECTS if re.search(pattern, device))


def known_pipeline_defect(exc: BaseException, module, device: str) -> str | None:
    """The name of the documented driver defect that explains `exc`, a Vulkan launch's
    failure of the IR `module` on `device`, or None."""
    if not isinstance(exc, PipelineError):
        return None
    for name, pattern, meets in PIPELINE_DEFECTS:
        if re.search(pattern, device) and meets(module):
            return name
    return None


def allowances_for(device: str, cpu_flags: frozenset | None = None) -> tuple[Allowance, ...]:
    """The allowances of the device described by `device` ("name | driver version") on a host
    whose CPU has `cpu_flags` (default: this machine's; they matter for CPU drivers)."""
    flags = host_cpu_flags() if cpu_flags is None else frozenset(cpu_flags)
    return tuple(a for a in ALLOWANCES if re.search(a.device, device)
                 and (a.applies is None or a.applies(device, flags)))


def vulkan_device() -> str:
    """"name | driver version" of the Vulkan device the runtime launches on."""
    caps = get_runtime().capabilities
    return f"{caps.device_name} | {caps.driver_version}"


@contextmanager
def device_model(allowances: tuple[Allowance, ...], module=None) -> Iterator[None]:
    """The emulator computes the allowances' ops as their driver does, inside the block, for
    kernels of the IR `module` (whose loops the models follow; None: no loop body's arguments
    are taken as known). The launch memo is off meanwhile: it would reuse (and keep) values
    computed without the model."""
    saved = []
    memo = os.environ.get("PYCOOP_EMULATOR_MEMO")
    os.environ["PYCOOP_EMULATOR_MEMO"] = "0"
    if module is not None:
        _BODY_ARGUMENTS.update({id(a): (op, i) for op in module.walk() if op.name == "loop"
                                for i, a in enumerate(op.regions[1].args)})
    try:
        for a in allowances:
            for op_name in a.op_names:
                opdef = get(op_name)
                saved.append((opdef, opdef.emulate))

                def emulate(ctx, op, *args, _orig=opdef.emulate, _a=a):
                    if _a.operands is not None:
                        args = _a.operands(op, *args)
                    return _a.deviate(op, _orig(ctx, op, *args), *args)
                opdef.emulate = emulate
        yield
    finally:
        for opdef, fn in reversed(saved):
            opdef.emulate = fn
        _BODY_ARGUMENTS.clear()
        if memo is None:
            del os.environ["PYCOOP_EMULATOR_MEMO"]
        else:
            os.environ["PYCOOP_EMULATOR_MEMO"] = memo
