"""What the traced IR proves about the low bits of an integer value, the same in every
invocation: `x ≡ r (mod 2^k)`. Trace-time checks use it to reject an operand that breaks an
alignment rule in every invocation (`w * 256 + 1` is odd whatever `w` is), not only a constant
one.

Arithmetic wraps modulo 2^bits, which keeps every residue modulo a power of two up to 2^bits,
so the rules below hold with wrap-around. Anything not understood (a load, a built-in, a
loop-carried value) knows no bits: (0, 0).
"""
from __future__ import annotations

from ..ir.core import Value
from ..types import ScalarType

_DEPTH = 48                       # operand chains followed at most (deeper: nothing known)


def low_bits(v: Value) -> tuple[int, int]:
    """(k, r) with v ≡ r (mod 2^k) in every invocation, 0 <= r < 2^k."""
    return _low_bits(v, _DEPTH, {})


def exact(v: Value) -> int | None:
    """The value of `v` when the IR fixes it (a constant), as a Python int of its signedness."""
    t = v.type
    if not (isinstance(t, ScalarType) and t.is_int):
        return None
    k, r = low_bits(v)
    if k < t.bits:
        return None
    return r - (1 << t.bits) if t.signed and r >> (t.bits - 1) else r


def _tz(r: int, k: int) -> int:
    """Trailing zero bits of a value known to be ≡ r (mod 2^k): k when r == 0."""
    return k if r == 0 else (r & -r).bit_length() - 1


def _low_bits(v: Value, depth: int, seen: dict) -> tuple[int, int]:
    if v not in seen:                 # shared operands (a DAG) are looked at once
        seen[v] = _compute(v, depth, seen)
    return seen[v]


def _compute(v: Value, depth: int, seen: dict) -> tuple[int, int]:
    t = v.type
    op = v.op
    if op is None or depth == 0 or not (isinstance(t, ScalarType) and t.is_int):
        return 0, 0
    bits = t.bits
    if op.name == "const":
        return bits, int(op.attrs["value"]) % (1 << bits)
    if op.name == "cast":
        src = op.operands[0].type
        if not (isinstance(src, ScalarType) and src.is_int):
            return 0, 0
        k, r = _low_bits(op.operands[0], depth - 1, seen)
        k = min(k, bits)
        return k, r % (1 << k)
    if op.name == "select":
        (k1, r1), (k2, r2) = (_low_bits(x, depth - 1, seen) for x in op.operands[1:])
        k = min(k1, k2, _tz(r1 ^ r2, bits))
        return k, r1 % (1 << k)
    if op.name != "binary":
        return 0, 0
    kind = op.attrs["kind"]
    (k1, r1), (k2, r2) = (_low_bits(x, depth - 1, seen) for x in op.operands)
    if kind in ("add", "sub"):
        k = min(k1, k2)
        return k, (r1 + r2 if kind == "add" else r1 - r2) % (1 << k)
    if kind == "mul":
        # (r1 + 2^k1 x)(r2 + 2^k2 y) = r1 r2 + r1 2^k2 y + r2 2^k1 x + 2^(k1+k2) xy
        inf = 2 * bits
        k = min(bits, k1 + k2, k2 + (_tz(r1, k1) if r1 else inf), k1 + (_tz(r2, k2) if r2 else inf))
        return k, (r1 * r2) % (1 << k)
    if kind == "shl" and k2 == bits:                   # a constant shift amount
        if r2 >= bits:
            return 0, 0
        k = min(bits, k1 + r2)
        return k, (r1 << r2) % (1 << k)
    if kind == "and":
        # bit i of a & b is known where both are known or either is a known 0
        k = 0
        while k < bits and ((k < k1 and k < k2) or (k < k1 and not (r1 >> k) & 1)
                            or (k < k2 and not (r2 >> k) & 1)):
            k += 1
        return k, (r1 & r2) % (1 << k)
    return 0, 0
