"""Subgroup collectives (SPIR-V GroupNonUniform instructions, core since SPIR-V 1.3):
reductions and scans, broadcasts, shuffles, ballots, elect and votes, as `pycoop.subgroup.*`.

Every op works on the *active* invocations of the subgroup only, as the SPIR-V text says
("Only active invocations ... contribute / are considered"): under divergent control flow the
inactive lanes neither contribute nor receive a result. Results the spec leaves undefined
(a shuffle or broadcast reading an inactive or out-of-range lane) become undefined values in
the emulator: reading them later in an active invocation is reported at that line. Operands the
spec requires to be dynamically uniform (broadcast's lane) are checked.

The capabilities of each instruction come from the SPIR-V grammar (the instruction's list
intersected with its GroupOperation's); the Vulkan subgroup feature bits they need
(`VkPhysicalDeviceSubgroupProperties.supportedOperations`) are recorded in the module's
requirements and checked at launch.

Floating-point reductions and scans combine the active lanes' values in increasing lane order
(a left fold), in the value's type; GPUs may combine in another order (the spec leaves the
method implementation-defined), so float results may differ from the emulator's in rounding.
"""
from __future__ import annotations

import numpy as np

from ..errors import CompileError, EmulatorError, Loc, current_loc
from ..ir.builder import emit1, tracer
from ..ir.core import Value
from ..spirv import grammar
from ..types import ScalarType, VectorType, bool_, u32
from .core import as_value, default_type, provable_ub
from .known_bits import exact
from ..ir.registry import define, emulation, lowering

__all__ = ["reduce", "inclusive_scan", "exclusive_scan", "add", "mul", "min", "max", "and_",
           "or_", "xor", "inclusive_add", "exclusive_add", "broadcast", "broadcast_first",
           "shuffle", "shuffle_xor", "shuffle_up", "shuffle_down", "ballot", "ballot_bit_count",
           "elect", "all", "any", "all_equal"]

# Vulkan VkSubgroupFeatureFlagBits name of each GroupNonUniform* capability.
VULKAN_OPERATIONS = {
    "GroupNonUniform": "basic", "GroupNonUniformVote": "vote",
    "GroupNonUniformArithmetic": "arithmetic", "GroupNonUniformBallot": "ballot",
    "GroupNonUniformShuffle": "shuffle", "GroupNonUniformShuffleRelative": "shuffle_relative",
    "GroupNonUniformClustered": "clustered", "GroupNonUniformQuad": "quad",
}
BALLOT = VectorType(u32, 4)
_MODES = {"reduce": "Reduce", "inclusive": "InclusiveScan", "exclusive": "ExclusiveScan",
          "clustered": "ClusteredReduce"}

# --------------------------------------------------------------------------- shared helpers


def _need(ctx, op, opname: str, group_op: str | None = None) -> None:
    """Declare the capability `opname` needs (with `group_op`): the first of the instruction's
    capabilities that the GroupOperation also allows; and record the Vulkan subgroup feature."""
    if ctx.target != "vulkan":
        raise CompileError("subgroup collectives are not available in OpenCL-environment kernels",
                           op.loc,
                           rule="GroupNonUniform instructions need SPIR-V 1.3; pycoop's OpenCL "
                                "target (used by pycoop.intel kernels) is SPIR-V 1.2",
                           hint="use subgroup collectives in kernels without pycoop.intel ops",
                           rule_id="subgroup.vulkan-only")
    caps = grammar.instruction(opname).capabilities
    if group_op is not None:
        allowed = grammar.enumerant("GroupOperation", group_op).capabilities
        caps = tuple(c for c in caps if c in allowed)
    ctx.uses_subgroup = True          # results depend on the subgroup size: require it
    for cap in ("GroupNonUniform", caps[0]):
        ctx.need(cap)
        ctx.subgroup_operations.add(VULKAN_OPERATIONS[cap])


def _extended(ctx, t: ScalarType) -> None:
    """8/16/64-bit integers and f16 in group operations need shaderSubgroupExtendedTypes."""
    if not t.is_bool and (t.bits != 32 and not (t.is_float and t.bits == 64)):
        ctx.features.add("shaderSubgroupExtendedTypes")


def _scope(ctx) -> int:
    return ctx.const(u32, ctx.enum("Scope", "Subgroup"))


def elem(t) -> ScalarType | None:
    """The component type of a scalar or vector operand."""
    return t.elem if isinstance(t, VectorType) else t if isinstance(t, ScalarType) else None


def _check_operand(x: Value, what: str, loc: Loc, *, boolean: bool = False):
    """Collectives take scalars or vectors of bool, integers, f16, f32 or f64; votes and
    ballots a bool."""
    t = x.type
    e = elem(t)
    ok = e is not None and e.encoding is None
    if boolean:
        ok = ok and t == bool_
    if not ok:
        need = "a bool" if boolean else "a scalar or vector of bool, integers, f16, f32 or f64"
        raise CompileError(f"{what} takes {need}, not {t}", loc,
                           rule="SPIR-V: GroupNonUniform operands are scalars or vectors of the "
                                "result type" if not boolean else "SPIR-V: the predicate of a "
                                "vote or ballot is a Boolean scalar",
                           hint="cast bf16/fp8 values to f32 first" if not boolean
                           else "compare to get a bool, e.g. x > 0",
                           rule_id="subgroup.predicate-bool" if boolean else "subgroup.operand-type")


def _lane_operand(x, what: str, loc: Loc) -> Value:
    # a Python float or bool is refused (as the f32 or bool it would be), even 1.0 or True
    python = isinstance(x, (float, np.floating, bool, np.bool_))
    v = None if python else as_value(x, u32)
    t = default_type(x) if python else v.type
    if not (isinstance(t, ScalarType) and t.is_int and not t.signed and t.bits == 32):
        raise CompileError(f"the {what} of a subgroup shuffle/broadcast must be a u32, not {t}",
                           loc, rule="SPIR-V: Id/Mask/Delta must be a scalar of integer type whose "
                                     "Signedness operand is 0",
                           hint=f"convert it: u32({what})", rule_id="subgroup.id-type")
    return v


class _Lanes:
    """A per-invocation value seen as (workgroups, subgroups, lanes[, components]), with the
    active mask in the same shape; a partial last subgroup is padded with inactive lanes."""

    def __init__(self, ctx, op, x: np.ndarray):
        d = ctx.dispatch
        if d.per_element:
            raise EmulatorError("subgroup collectives are not available inside a function "
                                "called per matrix element", op.loc,
                                rule="decode, combine and per-element functions run once per "
                                     "element, not in an invocation's subgroup",
                                hint="call pycoop.subgroup ops in the kernel body",
                                rule_id="subgroup.in-callback")
        self.ctx, self.d = ctx, d
        self.pad = d.nsg * d.sgs - d.wgs
        extra = x.shape[2:]
        x = np.broadcast_to(x, (d.nwg, d.wgs) + extra)
        m = np.ones((d.nwg, d.wgs), bool) if ctx.mask is None else np.broadcast_to(ctx.mask, (d.nwg, d.wgs))
        if self.pad:
            x = np.concatenate([x, np.zeros((d.nwg, self.pad) + extra, x.dtype)], 1)
            m = np.concatenate([m, np.zeros((d.nwg, self.pad), bool)], 1)
        self.x = x.reshape((d.nwg, d.nsg, d.sgs) + extra)
        self.m = m.reshape(d.nwg, d.nsg, d.sgs)
        self.lane = np.arange(d.sgs, dtype=np.int64)
        self.mx = self.m.reshape(self.m.shape + (1,) * (self.x.ndim - 3))   # mask, x's rank

    def back(self, y: np.ndarray) -> np.ndarray:
        """A (W, S, lanes, ...) result as the emulator's (W, invocations, ...) value."""
        d = self.d
        y = y.reshape((d.nwg, d.nsg * d.sgs) + y.shape[3:])
        return y[:, :d.wgs] if self.pad else y

    def at(self, lane: np.ndarray) -> np.ndarray:
        """x of lane `lane` (W, S, lanes or 1), with x's components."""
        return np.take_along_axis(self.x, lane.reshape(lane.shape + (1,) * (self.x.ndim - 3)), 2)

    def first(self) -> np.ndarray:
        """x of the lowest active lane of each subgroup, (W, S, 1, ...)."""
        return self.at(self.m.argmax(-1)[..., None])

    def read(self, src: np.ndarray, ctx, op, what: str) -> np.ndarray:
        """Each lane's value of x at lane `src` (W, S, lanes); where `src` is out of range or
        an inactive lane the result is undefined (poisoned for the reads that follow)."""
        ok = (src >= 0) & (src < self.d.sgs)
        s = np.where(ok, src, 0)
        ok &= np.take_along_axis(self.m, s, -1)
        y = self.at(s)
        bad = self.m & ~ok
        if bad.any():
            ctx.poison[op.result] = (self.back(bad), f"the result of {what} at {op.loc} reads "
                                                     "an inactive or out-of-range lane")
        else:
            ctx.poison.pop(op.result, None)
        return self.back(y)


def _identity(kind: str, t: ScalarType):
    """The spec's identity I of each group operation (inactive lanes contribute it)."""
    if t.is_bool:
        return kind == "and"
    if kind in ("add", "or", "xor"):
        return 0
    if kind == "mul":
        return 1
    if kind == "and":
        return -1 if t.signed else t.min_max()[1]
    if t.is_float:
        return np.inf if kind == "min" else -np.inf
    return t.min_max()[1] if kind == "min" else t.min_max()[0]


_UFUNC = {"add": np.add, "mul": np.multiply, "min": np.minimum, "max": np.maximum,
          "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}
_BOOL_UFUNC = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}
_FLOAT_UFUNC = {"min": np.fmin, "max": np.fmax}     # "if one of two Values is a NaN, the other is chosen"

# --------------------------------------------------------------------------- reductions and scans

# kind: (float opcode, signed, unsigned, bool)
ARITH = {
    "add": ("OpGroupNonUniformFAdd", "OpGroupNonUniformIAdd", "OpGroupNonUniformIAdd", None),
    "mul": ("OpGroupNonUniformFMul", "OpGroupNonUniformIMul", "OpGroupNonUniformIMul", None),
    "min": ("OpGroupNonUniformFMin", "OpGroupNonUniformSMin", "OpGroupNonUniformUMin", None),
    "max": ("OpGroupNonUniformFMax", "OpGroupNonUniformSMax", "OpGroupNonUniformUMax", None),
    "and": (None, "OpGroupNonUniformBitwiseAnd", "OpGroupNonUniformBitwiseAnd", "OpGroupNonUniformLogicalAnd"),
    "or": (None, "OpGroupNonUniformBitwiseOr", "OpGroupNonUniformBitwiseOr", "OpGroupNonUniformLogicalOr"),
    "xor": (None, "OpGroupNonUniformBitwiseXor", "OpGroupNonUniformBitwiseXor", "OpGroupNonUniformLogicalXor"),
}


def _arith_opcode(kind: str, t) -> str | None:
    t = elem(t)
    return ARITH[kind][3 if t.is_bool else (0 if t.is_float else (1 if t.signed else 2))]


def _infer_arith(operands, attrs, regions, loc):
    x = operands[0]
    kind = attrs["kind"]
    _check_operand(x, f"pycoop.subgroup {kind}", loc)
    if _arith_opcode(kind, x.type) is None:
        raise CompileError(f"subgroup {kind} is not defined on {x.type}", loc,
                           rule="SPIR-V: GroupNonUniform add/mul/min/max take integers or floats, "
                                "and/or/xor integers or bools",
                           hint="and/or/xor need integers or bools; add/mul/min/max numbers",
                           rule_id="subgroup.arithmetic-type")
    return [x.type]


define("subgroup.arith", _infer_arith,
       doc="Subgroup reduction, inclusive or exclusive scan, or clustered reduction "
           "(OpGroupNonUniform{I,F}Add/Mul, {S,U,F}Min/Max, Bitwise/Logical And/Or/Xor).")


@lowering("subgroup.arith")
def _lower_arith(ctx, op):
    x = op.operands[0]
    opname = _arith_opcode(op.attrs["kind"], x.type)
    mode = _MODES[op.attrs["mode"]]
    _need(ctx, op, opname, mode)
    _extended(ctx, elem(x.type))
    extra = [ctx.const(u32, op.attrs["cluster"])] if op.attrs["mode"] == "clustered" else []
    ctx.set(op.result, ctx.emit(opname, x.type, _scope(ctx), mode, ctx.id(x), *extra))


@emulation("subgroup.arith")
def _emu_arith(ctx, op, x):
    kind, mode, t = op.attrs["kind"], op.attrs["mode"], elem(op.operands[0].type)
    lanes = _Lanes(ctx, op, x)
    sgs = ctx.dispatch.sgs
    fn = (_BOOL_UFUNC if t.is_bool else _FLOAT_UFUNC if t.is_float else {}).get(kind, _UFUNC[kind])
    ident = np.array(_identity(kind, t)).astype(x.dtype)
    # Inactive lanes contribute the identity; -0.0 is the exact identity of float addition
    # (x + -0.0 == x for every x), so an all-(-0.0) sum keeps its sign.
    fill = np.array(-0.0, x.dtype) if t.is_float and kind == "add" else ident
    v = np.where(lanes.mx, lanes.x, fill)            # (W, S, lanes[, components])
    with np.errstate(all="ignore"):
        if mode == "clustered":
            c = op.attrs["cluster"]
            vc = v.reshape(v.shape[:2] + (sgs // c, c) + v.shape[3:])
            r = fn.accumulate(vc, axis=3)[:, :, :, -1:]
            out = np.broadcast_to(r, vc.shape).reshape(v.shape)
        else:
            inc = fn.accumulate(v, axis=2)             # left to right: lane order
            if mode == "reduce":
                out = np.broadcast_to(inc[:, :, -1:], v.shape)
            elif mode == "inclusive":
                out = inc
            else:
                ex = np.concatenate([np.broadcast_to(fill, v.shape[:2] + (1,) + v.shape[3:]),
                                     inc[:, :, :-1]], 2)
                before = np.cumsum(lanes.mx, 2) - lanes.mx     # active lanes before each lane
                out = np.where(before == 0, ident, ex)
    return lanes.back(np.ascontiguousarray(out, dtype=x.dtype))


def _arith(x, kind: str, mode: str, cluster_size=None) -> Value:
    loc = current_loc()
    x = as_value(x)
    attrs = {"kind": kind, "mode": mode}
    if cluster_size is not None:
        if isinstance(cluster_size, Value) or not isinstance(cluster_size, (int, np.integer)) \
                or isinstance(cluster_size, bool):
            raise CompileError(f"cluster_size must be a compile-time int, not {cluster_size!r}", loc,
                               rule="SPIR-V: ClusterSize must come from a constant instruction",
                               hint="pass a Python int (a power of two), e.g. cluster_size=4",
                               rule_id="subgroup.cluster-constant")
        c = int(cluster_size)
        sgs = tracer().subgroup_size
        if c < 1 or c & (c - 1) or c > sgs:
            raise CompileError(f"cluster_size {c} is not a power of two from 1 to the subgroup "
                               f"size {sgs}", loc,
                               rule="SPIR-V: ClusterSize must be a power of 2 of at least 1; "
                                    "larger than the group size it is undefined behavior",
                               hint="use 1, 2, 4, ... up to pycoop.subgroup_size()",
                               rule_id="subgroup.cluster-size")
        attrs.update(mode="clustered", cluster=c)
    return emit1("subgroup.arith", [x], attrs, loc)


def reduce(x, op: str, cluster_size: int | None = None) -> Value:
    """Combine `x` over the active invocations of the subgroup with `op` ("add", "mul", "min",
    "max", "and", "or", "xor"); every active invocation gets the result. With `cluster_size`
    (a power of two <= the subgroup size) the subgroup is split into clusters of that many
    consecutive lanes, each reduced on its own."""
    _check_kind(op)
    return _arith(x, op, "reduce", cluster_size)


def inclusive_scan(x, op: str) -> Value:
    """Each active invocation gets `op` of `x` over the active invocations with a lane index
    <= its own."""
    _check_kind(op)
    return _arith(x, op, "inclusive")


def exclusive_scan(x, op: str) -> Value:
    """Each active invocation gets `op` of `x` over the active invocations with a lane index
    < its own (the identity of `op`, e.g. 0 for "add", for the first)."""
    _check_kind(op)
    return _arith(x, op, "exclusive")


def _check_kind(op) -> None:
    if not isinstance(op, str) or op not in ARITH:
        raise CompileError(f"unknown subgroup operation {op!r}", current_loc(),
                           rule="GroupNonUniform arithmetic is add, mul, min, max, and, or or xor",
                           hint=f"one of {', '.join(map(repr, ARITH))}", rule_id="subgroup.operation")


def add(x, cluster_size: int | None = None) -> Value:
    """Sum of `x` over the active invocations (of each cluster)."""
    return reduce(x, "add", cluster_size)


def mul(x, cluster_size: int | None = None) -> Value:
    """Product of `x` over the active invocations (of each cluster)."""
    return reduce(x, "mul", cluster_size)


def min(x, cluster_size: int | None = None) -> Value:  # noqa: A001
    """Minimum of `x` over the active invocations (of each cluster)."""
    return reduce(x, "min", cluster_size)


def max(x, cluster_size: int | None = None) -> Value:  # noqa: A001
    """Maximum of `x` over the active invocations (of each cluster)."""
    return reduce(x, "max", cluster_size)


def and_(x, cluster_size: int | None = None) -> Value:
    """Bitwise (logical for bools) AND of `x` over the active invocations (of each cluster)."""
    return reduce(x, "and", cluster_size)


def or_(x, cluster_size: int | None = None) -> Value:
    """Bitwise (logical for bools) OR of `x` over the active invocations (of each cluster)."""
    return reduce(x, "or", cluster_size)


def xor(x, cluster_size: int | None = None) -> Value:
    """Bitwise (logical for bools) XOR of `x` over the active invocations (of each cluster)."""
    return reduce(x, "xor", cluster_size)


def inclusive_add(x) -> Value:
    """Inclusive prefix sum over the active invocations in lane order."""
    return inclusive_scan(x, "add")


def exclusive_add(x) -> Value:
    """Exclusive prefix sum over the active invocations in lane order (0 for the first)."""
    return exclusive_scan(x, "add")


# --------------------------------------------------------------------------- broadcasts, shuffles

def _infer_broadcast(operands, attrs, regions, loc):
    _check_operand(operands[0], "pycoop.subgroup.broadcast", loc)
    return [operands[0].type]


define("subgroup.broadcast", _infer_broadcast,
       doc="x of the lane `Id` (dynamically uniform) to every active lane (OpGroupNonUniformBroadcast).")


@lowering("subgroup.broadcast")
def _lower_broadcast(ctx, op):
    x, lane = op.operands
    _need(ctx, op, "OpGroupNonUniformBroadcast")
    _extended(ctx, elem(x.type))
    ctx.set(op.result, ctx.emit("OpGroupNonUniformBroadcast", x.type, _scope(ctx), ctx.id(x), ctx.id(lane)))


@emulation("subgroup.broadcast")
def _emu_broadcast(ctx, op, x, lane):
    lanes = _Lanes(ctx, op, x)
    ids = _Lanes(ctx, op, lane.astype(np.int64))
    first = ids.first()
    if ((ids.x != first) & ids.m).any():
        w, s, i = np.argwhere((ids.x != first) & ids.m)[0]
        raise EmulatorError(
            f"the lane of subgroup.broadcast differs between the active invocations of subgroup "
            f"{s} in workgroup {ctx._wg_name(w)} (lanes {int(first[w, s, 0])} and "
            f"{int(ids.x[w, s, i])})", op.loc,
            rule="SPIR-V 1.5+: behavior is undefined when the Id of OpGroupNonUniformBroadcast "
                 "is not dynamically uniform",
            hint="use pycoop.subgroup.shuffle for a lane that differs per invocation",
            rule_id="subgroup.broadcast-uniform")
    return lanes.read(np.broadcast_to(first, lanes.m.shape), ctx, op, "subgroup.broadcast")


def _infer_broadcast_first(operands, attrs, regions, loc):
    _check_operand(operands[0], "pycoop.subgroup.broadcast_first", loc)
    return [operands[0].type]


define("subgroup.broadcast_first", _infer_broadcast_first,
       doc="x of the lowest active lane to every active lane (OpGroupNonUniformBroadcastFirst).")


@lowering("subgroup.broadcast_first")
def _lower_broadcast_first(ctx, op):
    x = op.operands[0]
    _need(ctx, op, "OpGroupNonUniformBroadcastFirst")
    _extended(ctx, elem(x.type))
    ctx.set(op.result, ctx.emit("OpGroupNonUniformBroadcastFirst", x.type, _scope(ctx), ctx.id(x)))


@emulation("subgroup.broadcast_first")
def _emu_broadcast_first(ctx, op, x):
    lanes = _Lanes(ctx, op, x)
    return lanes.back(np.broadcast_to(lanes.first(), lanes.x.shape))


SHUFFLES = {"index": "OpGroupNonUniformShuffle", "xor": "OpGroupNonUniformShuffleXor",
            "up": "OpGroupNonUniformShuffleUp", "down": "OpGroupNonUniformShuffleDown"}


def _infer_shuffle(operands, attrs, regions, loc):
    _check_operand(operands[0], "pycoop.subgroup.shuffle", loc)
    return [operands[0].type]


define("subgroup.shuffle", _infer_shuffle,
       doc="x of another lane: by index, lane ^ mask, lane - delta or lane + delta "
           "(OpGroupNonUniformShuffle, ShuffleXor, ShuffleUp, ShuffleDown).")


@lowering("subgroup.shuffle")
def _lower_shuffle(ctx, op):
    x, lane = op.operands
    opname = SHUFFLES[op.attrs["kind"]]
    _need(ctx, op, opname)
    _extended(ctx, elem(x.type))
    ctx.set(op.result, ctx.emit(opname, x.type, _scope(ctx), ctx.id(x), ctx.id(lane)))


@emulation("subgroup.shuffle")
def _emu_shuffle(ctx, op, x, operand):
    lanes = _Lanes(ctx, op, x)
    k = _Lanes(ctx, op, operand.astype(np.int64)).x
    me = lanes.lane
    src = {"index": lambda: k, "xor": lambda: me ^ k, "up": lambda: me - k,
           "down": lambda: me + k}[op.attrs["kind"]]()
    return lanes.read(np.broadcast_to(src, lanes.m.shape), ctx, op,
                      f"subgroup.shuffle{'' if op.attrs['kind'] == 'index' else '_' + op.attrs['kind']}")


def broadcast(x, lane) -> Value:
    """`x` of invocation `lane` of the subgroup, in every active invocation. `lane` (a u32)
    must be the same in all active invocations and name an active lane (else the result is
    undefined)."""
    loc = current_loc()
    return emit1("subgroup.broadcast", [as_value(x), _lane(lane, "broadcast", loc)], {}, loc)


def broadcast_first(x) -> Value:
    """`x` of the active invocation with the lowest lane index, in every active invocation."""
    loc = current_loc()
    return emit1("subgroup.broadcast_first", [as_value(x)], {}, loc)


def _lane(lane, what: str, loc: Loc) -> Value:
    """The lane operand of a broadcast or shuffle by index. With the kernel's subgroup size
    fixed (subgroup_size=...), a lane the IR fixes at that size or more reads no invocation:
    the result would be undefined in every invocation, so it is reported at the line."""
    v = _lane_operand(lane, "lane", loc)
    t, k = tracer(), exact(v)
    if k is not None and t.subgroup_size_explicit and k >= t.subgroup_size:
        raise provable_ub(f"subgroup.{what} of lane {k} in subgroups of {t.subgroup_size} "
                           f"invocations: the result is undefined", loc,
                           rule="SPIR-V: the result of OpGroupNonUniformBroadcast/Shuffle is "
                                "undefined if Id is greater than or equal to the size of the group",
                           hint=f"name a lane from 0 to {t.subgroup_size - 1}")
    return v


def _shuffle(kind: str, x, k, what: str) -> Value:
    loc = current_loc()
    operand = _lane(k, "shuffle", loc) if kind == "index" else _relative(kind, k, what, loc)
    return emit1("subgroup.shuffle", [as_value(x), operand], {"kind": kind}, loc)


def _relative(kind: str, k, what: str, loc: Loc) -> Value:
    """The mask or delta of a shuffle_xor/up/down. With the kernel's subgroup size fixed, one
    the IR fixes at that size or more names a lane outside the subgroup from every lane (a
    power of two: lane ^ mask, lane - delta or lane + delta is past it): the result would be
    undefined in every invocation, so it is reported at the line, as a lane is."""
    v = _lane_operand(k, what, loc)
    t, c = tracer(), exact(v)
    if c is not None and t.subgroup_size_explicit and c >= t.subgroup_size:
        raise provable_ub(f"subgroup.shuffle_{kind} with {what} {c} in subgroups of "
                           f"{t.subgroup_size} invocations reads no lane of the subgroup: the "
                           f"result is undefined", loc,
                           rule=f"SPIR-V: the result of OpGroupNonUniformShuffle"
                                f"{kind.capitalize()} is undefined where the invocation it "
                                f"names is not an active invocation of the group",
                           hint=f"use a {what} from {int(kind != 'xor')} to {t.subgroup_size - 1}")
    return v


def shuffle(x, lane) -> Value:
    """`x` of invocation `lane` (per invocation; undefined if that lane is inactive or out of
    range)."""
    return _shuffle("index", x, lane, "lane")


def shuffle_xor(x, mask) -> Value:
    """`x` of the invocation whose lane index is this one's xor `mask`."""
    return _shuffle("xor", x, mask, "mask")


def shuffle_up(x, delta) -> Value:
    """`x` of the invocation `delta` lanes below (undefined when there is none)."""
    return _shuffle("up", x, delta, "delta")


def shuffle_down(x, delta) -> Value:
    """`x` of the invocation `delta` lanes above (undefined past the end of the subgroup)."""
    return _shuffle("down", x, delta, "delta")


# --------------------------------------------------------------------------- ballots, elect, votes

def _infer_ballot(operands, attrs, regions, loc):
    _check_operand(operands[0], "pycoop.subgroup.ballot", loc, boolean=True)
    return [BALLOT]


define("subgroup.ballot", _infer_ballot,
       doc="A vec4<u32> bit mask of the active lanes whose predicate is true (OpGroupNonUniformBallot).")


@lowering("subgroup.ballot")
def _lower_ballot(ctx, op):
    _need(ctx, op, "OpGroupNonUniformBallot")
    ctx.set(op.result, ctx.emit("OpGroupNonUniformBallot", BALLOT, _scope(ctx), ctx.id(op.operands[0])))


@emulation("subgroup.ballot")
def _emu_ballot(ctx, op, pred):
    lanes = _Lanes(ctx, op, pred)
    bits = (lanes.x & lanes.m).astype(np.uint64)               # (W, S, lanes)
    sgs = ctx.dispatch.sgs
    words = np.zeros(bits.shape[:2] + (4,), np.uint32)
    for w in range(-(-sgs // 32)):                             # at most 4 words (128 lanes)
        part = bits[..., 32 * w:32 * (w + 1)]
        words[..., w] = (part << np.arange(part.shape[-1], dtype=np.uint64)).sum(-1).astype(np.uint32)
    return lanes.back(np.broadcast_to(words[:, :, None, :], lanes.m.shape + (4,)))


_BIT_COUNT_MODES = {"reduce": "Reduce", "inclusive": "InclusiveScan", "exclusive": "ExclusiveScan"}


def _infer_bit_count(operands, attrs, regions, loc):
    if operands[0].type != BALLOT:
        raise CompileError(f"subgroup.ballot_bit_count takes a ballot (vec4<u32>), not "
                           f"{operands[0].type}", loc,
                           rule="SPIR-V: Value of OpGroupNonUniformBallotBitCount must be a vector "
                                "of four components of integer type scalar, whose Signedness "
                                "operand is 0", hint="pass the result of pycoop.subgroup.ballot",
                           rule_id="subgroup.ballot-type")
    return [u32]


define("subgroup.ballot_bit_count", _infer_bit_count,
       doc="The number of set bits of a ballot: all lanes', lanes <= own, or lanes < own "
           "(OpGroupNonUniformBallotBitCount).")


@lowering("subgroup.ballot_bit_count")
def _lower_bit_count(ctx, op):
    mode = _BIT_COUNT_MODES[op.attrs["mode"]]
    _need(ctx, op, "OpGroupNonUniformBallotBitCount", mode)
    ctx.set(op.result, ctx.emit("OpGroupNonUniformBallotBitCount", u32, _scope(ctx), mode,
                                ctx.id(op.operands[0])))


@emulation("subgroup.ballot_bit_count")
def _emu_bit_count(ctx, op, b):
    lanes = _Lanes(ctx, op, b)
    sgs, mode = ctx.dispatch.sgs, op.attrs["mode"]
    lane = np.arange(128)
    word = lanes.x[..., lane // 32]                             # (W, S, lanes, 128)
    bit = ((word >> (lane % 32).astype(np.uint32)) & 1).astype(bool)
    me = lanes.lane[:, None]
    # "only the bits of Value up to SubgroupSize are considered"; scans count lanes <= / < own
    keep = {"reduce": lane < sgs, "inclusive": lane <= me, "exclusive": lane < me}[mode]
    return lanes.back((bit & keep).sum(-1).astype(np.uint32))


def ballot(pred) -> Value:
    """A vec4<u32> with bit i set when invocation i of the subgroup is active and `pred` is
    true there (bits of lanes past the subgroup size are 0)."""
    loc = current_loc()
    return emit1("subgroup.ballot", [as_value(pred)], {}, loc)


def ballot_bit_count(b, mode: str = "reduce") -> Value:
    """The number of bits set in ballot `b` (a u32): all of them ("reduce"), those of lanes
    <= this one ("inclusive") or < this one ("exclusive")."""
    loc = current_loc()
    if not isinstance(mode, str) or mode not in _BIT_COUNT_MODES:
        raise CompileError(f"unknown ballot_bit_count mode {mode!r}", loc,
                           rule="OpGroupNonUniformBallotBitCount takes Reduce, InclusiveScan or "
                                "ExclusiveScan",
                           hint="one of 'reduce', 'inclusive', 'exclusive'", rule_id="subgroup.ballot-mode")
    return emit1("subgroup.ballot_bit_count", [as_value(b)], {"mode": mode}, loc)


def _infer_elect(operands, attrs, regions, loc):
    return [bool_]


define("subgroup.elect", _infer_elect,
       doc="True in the active lane with the lowest index only (OpGroupNonUniformElect).")


@lowering("subgroup.elect")
def _lower_elect(ctx, op):
    _need(ctx, op, "OpGroupNonUniformElect")
    ctx.set(op.result, ctx.emit("OpGroupNonUniformElect", bool_, _scope(ctx)))


@emulation("subgroup.elect")
def _emu_elect(ctx, op):
    lanes = _Lanes(ctx, op, np.zeros((1, 1), bool))
    return lanes.back(lanes.lane == lanes.m.argmax(-1)[..., None])


def elect() -> Value:
    """True in exactly one active invocation of the subgroup: the one with the lowest lane
    index."""
    return emit1("subgroup.elect", [], {}, current_loc())


VOTES = {"all": "OpGroupNonUniformAll", "any": "OpGroupNonUniformAny",
         "all_equal": "OpGroupNonUniformAllEqual"}


def _infer_vote(operands, attrs, regions, loc):
    kind = attrs["kind"]
    _check_operand(operands[0], f"pycoop.subgroup.{kind}", loc, boolean=kind != "all_equal")
    return [bool_]


define("subgroup.vote", _infer_vote,
       doc="Whether a predicate holds in all / any active lane, or a value is equal in all "
           "active lanes (OpGroupNonUniformAll, Any, AllEqual).")


@lowering("subgroup.vote")
def _lower_vote(ctx, op):
    x = op.operands[0]
    opname = VOTES[op.attrs["kind"]]
    _need(ctx, op, opname)
    _extended(ctx, elem(x.type))
    ctx.set(op.result, ctx.emit(opname, bool_, _scope(ctx), ctx.id(x)))


@emulation("subgroup.vote")
def _emu_vote(ctx, op, x):
    lanes = _Lanes(ctx, op, x)
    kind, m = op.attrs["kind"], lanes.m
    if kind == "all":
        r = (lanes.x | ~m).all(-1)
    elif kind == "any":
        r = (lanes.x & m).any(-1)
    else:
        same = lanes.x == lanes.first()
        if same.ndim > 3:                                  # vectors: every component equal
            same = same.all(-1)
        r = (same | ~m).all(-1)
    return lanes.back(np.broadcast_to(r[..., None], m.shape))


def all(pred) -> Value:  # noqa: A001
    """True when `pred` is true in every active invocation of the subgroup."""
    loc = current_loc()
    return emit1("subgroup.vote", [as_value(pred)], {"kind": "all"}, loc)


def any(pred) -> Value:  # noqa: A001
    """True when `pred` is true in some active invocation of the subgroup."""
    loc = current_loc()
    return emit1("subgroup.vote", [as_value(pred)], {"kind": "any"}, loc)


def all_equal(x) -> Value:
    """True when `x` has the same value in every active invocation of the subgroup (floats
    compare as ==: a NaN equals nothing)."""
    loc = current_loc()
    return emit1("subgroup.vote", [as_value(x)], {"kind": "all_equal"}, loc)

