"""Subgroup collectives (pycoop.subgroup) on the emulator against a lane-by-lane reference
written from the SPIR-V text (only active invocations take part; float combinations in lane
order), with divergent active masks; the undefined results of shuffles and broadcasts; the
capabilities and device requirements derived from the ops; misuse as CompileError at the line."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f32, i32, u32
from pycoop.runtime.vulkan.capabilities import Capabilities

from core_helpers import SETTINGS, emu, line_of

WG, SGS = 48, 16          # three subgroups per workgroup
KINDS = ["add", "mul", "min", "max", "and", "or", "xor"]
IDENTITY = {"add": 0, "mul": 1, "or": 0, "xor": 0}


def _arith_kernel(T):
    @pc.kernel(workgroup_size=WG, subgroup_size=SGS)
    def sg_arith(X: pc.ReadBuffer[T], M: pc.ReadBuffer[u32], O: pc.Buffer[T], KIND: pc.Const,
                 MODE: pc.Const, CLUSTER: pc.Const = None):
        i = pc.global_invocation_id.x
        if M[i] != 0:
            x = X[i]
            if MODE == "reduce":
                O[i] = pc.subgroup.reduce(x, KIND, CLUSTER)
            elif MODE == "inclusive":
                O[i] = pc.subgroup.inclusive_scan(x, KIND)
            else:
                O[i] = pc.subgroup.exclusive_scan(x, KIND)
    return sg_arith


ARITH = {np.int32: _arith_kernel(i32), np.uint32: _arith_kernel(u32), np.float32: _arith_kernel(f32)}


def identity(kind, dtype):
    if kind in IDENTITY:
        return dtype(IDENTITY[kind])
    if kind == "and":
        return dtype(-1) if dtype == np.int32 else np.iinfo(dtype).max if dtype != np.float32 else None
    if dtype == np.float32:
        return dtype(np.inf if kind == "min" else -np.inf)
    info = np.iinfo(dtype)
    return dtype(info.max if kind == "min" else info.min)


def fold(kind, vals, dtype):
    """Left fold in lane order, in the value's type (the emulator's defined order)."""
    fns = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b,
           "min": (lambda a, b: np.fmin(a, b)), "max": (lambda a, b: np.fmax(a, b)),
           "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b}
    acc = None
    with np.errstate(all="ignore"):
        for v in vals:
            acc = v if acc is None else dtype(fns[kind](acc, v))
    return acc


def reference(X, M, kind, mode, cluster):
    out = np.zeros_like(X)
    dtype = X.dtype.type
    for base in range(0, len(X), SGS):
        lanes = range(base, base + SGS)
        for k in lanes:
            if not M[k]:
                continue
            if mode == "reduce" and cluster:
                c0 = base + (k - base) // cluster * cluster
                part = range(c0, c0 + cluster)
            elif mode == "reduce":
                part = lanes
            elif mode == "inclusive":
                part = range(base, k + 1)
            else:
                part = range(base, k)
            vals = [X[j] for j in part if M[j]]
            out[k] = fold(kind, vals, dtype) if vals else identity(kind, dtype)
    return out


@SETTINGS
@given(dtype=st.sampled_from([np.int32, np.uint32, np.float32]), kind=st.sampled_from(KINDS),
       mode=st.sampled_from(["reduce", "inclusive", "exclusive", "clustered"]),
       cluster=st.sampled_from([1, 2, 4, 8, 16]), density=st.floats(0, 1),
       seed=st.integers(0, 2**31))
def test_reductions_and_scans_match_the_reference(dtype, kind, mode, cluster, density, seed):
    if dtype == np.float32 and kind in ("and", "or", "xor"):
        return
    r = np.random.default_rng(seed)
    n = 2 * WG
    if dtype == np.float32:
        X = (r.standard_normal(n) * 10).astype(np.float32)
    else:
        X = r.integers(-50 if dtype == np.int32 else 0, 100, n).astype(dtype)
    M = (r.random(n) < density).astype(np.uint32)
    O = np.zeros(n, dtype)
    emu(ARITH[dtype], 2, X, M, O, kind, "reduce" if mode == "clustered" else mode,
        cluster if mode == "clustered" else None)
    ref = reference(X, M, kind, "reduce" if mode == "clustered" else mode,
                    cluster if mode == "clustered" else None)
    np.testing.assert_array_equal(O, ref)      # floats too: the order is defined


def test_float_sum_of_negative_zeros_keeps_its_sign_and_exclusive_starts_at_plus_zero():
    X = np.full(2 * WG, -0.0, np.float32)
    M = np.ones(2 * WG, np.uint32)
    O = np.zeros(2 * WG, np.float32)
    emu(ARITH[np.float32], 2, X, M, O, "add", "reduce")
    assert np.signbit(O).all()
    emu(ARITH[np.float32], 2, X, M, O, "add", "exclusive")
    first = np.arange(2 * WG) % SGS == 0
    assert not np.signbit(O[first]).any() and np.signbit(O[~first]).all()


@pc.kernel(workgroup_size=WG, subgroup_size=SGS)
def sg_misc(X: pc.ReadBuffer[i32], M: pc.ReadBuffer[u32], B: pc.Buffer[u32], V: pc.Buffer[u32],
            C: pc.Buffer[u32], L: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    if M[i] != 0:
        x = X[i]
        p = x > 0
        b = pc.subgroup.ballot(p)
        for w in range(4):
            B[i * u32(4) + u32(w)] = b[w]
        V[i] = (pc.select(pc.subgroup.all(p), u32(1), u32(0))
                | pc.select(pc.subgroup.any(p), u32(2), u32(0))
                | pc.select(pc.subgroup.all_equal(x), u32(4), u32(0))
                | pc.select(pc.subgroup.elect(), u32(8), u32(0))
                | pc.select(pc.subgroup.and_(p), u32(16), u32(0))
                | pc.select(pc.subgroup.or_(p), u32(32), u32(0))
                | pc.select(pc.subgroup.xor(p), u32(64), u32(0)))
        C[i * u32(3)] = pc.subgroup.ballot_bit_count(b)
        C[i * u32(3) + u32(1)] = pc.subgroup.ballot_bit_count(b, "inclusive")
        C[i * u32(3) + u32(2)] = pc.subgroup.ballot_bit_count(b, "exclusive")
        L[i] = u32(pc.subgroup.broadcast_first(x)) + u32(1000) * u32(pc.subgroup.max(x, 4))


@SETTINGS
@given(density=st.floats(0, 1), seed=st.integers(0, 2**31), values=st.integers(1, 4))
def test_ballots_votes_and_elect_match_the_reference(density, seed, values):
    r = np.random.default_rng(seed)
    n = 2 * WG
    X = r.integers(-values, values, n).astype(np.int32)
    M = (r.random(n) < density).astype(np.uint32)
    B, V, C, L = (np.zeros(k * n, np.uint32) for k in (4, 1, 3, 1))
    emu(sg_misc, 2, X, M, B, V, C, L)
    for base in range(0, n, SGS):
        act = [j for j in range(base, base + SGS) if M[j]]
        pos = [j for j in act if X[j] > 0]
        mask = sum(1 << (j - base) for j in pos)
        for k in act:
            words = [(mask >> (32 * w)) & 0xFFFFFFFF for w in range(4)]
            assert list(B[4 * k:4 * k + 4]) == words
            v = ((len(pos) == len(act)) | (bool(pos) << 1) | (len({X[j] for j in act}) == 1) << 2
                 | (k == act[0]) << 3 | (len(pos) == len(act)) << 4 | bool(pos) << 5
                 | (len(pos) % 2) << 6)
            assert V[k] == v, (k, V[k], v)
            lane = k - base
            assert list(C[3 * k:3 * k + 3]) == [len(pos), sum(1 for j in pos if j - base <= lane),
                                               sum(1 for j in pos if j - base < lane)]
            c0 = base + lane // 4 * 4
            cl = [X[j] for j in range(c0, c0 + 4) if M[j]]
            u = lambda v: int(np.int32(v).view(np.uint32))  # noqa: E731  (u32(x) of an i32)
            assert L[k] == (u(X[act[0]]) + 1000 * u(max(cl))) % 2**32


@pc.kernel(workgroup_size=WG, subgroup_size=SGS)
def sg_shuffle(X: pc.ReadBuffer[f32], S: pc.ReadBuffer[u32], M: pc.ReadBuffer[u32], O: pc.Buffer[f32],
               KIND: pc.Const, USE: pc.Const = True):
    i = pc.global_invocation_id.x
    if M[i] != 0:
        x, s = X[i], S[i]
        if KIND == "index":
            y = pc.subgroup.shuffle(x, s)
        elif KIND == "xor":
            y = pc.subgroup.shuffle_xor(x, s)
        elif KIND == "up":
            y = pc.subgroup.shuffle_up(x, s)
        elif KIND == "down":
            y = pc.subgroup.shuffle_down(x, s)
        else:
            y = pc.subgroup.broadcast(x, s)
        if USE:
            O[i] = y                                    # USE
        else:
            O[i] = x


def source_lane(kind, lane, s):
    return {"index": s, "xor": lane ^ s, "up": lane - s, "down": lane + s, "broadcast": s}[kind]


@SETTINGS
@given(kind=st.sampled_from(["index", "xor", "up", "down", "broadcast"]), seed=st.integers(0, 2**31),
       density=st.floats(0.2, 1))
def test_shuffles_read_the_source_lane(kind, seed, density):
    """Operands chosen so that every active lane reads an active lane in range: the result is
    defined and equals that lane's value."""
    r = np.random.default_rng(seed)
    n = 2 * WG
    X = r.standard_normal(n).astype(np.float32)
    M = (r.random(n) < density).astype(np.uint32)
    S = np.zeros(n, np.uint32)
    for base in range(0, n, SGS):
        act = [j - base for j in range(base, base + SGS) if M[j]]
        if not act:
            continue
        if kind == "broadcast":
            S[base:base + SGS] = r.choice(act)
            continue
        for lane in act:
            ok = [s for s in range(SGS) if 0 <= source_lane(kind, lane, s) < SGS
                  and source_lane(kind, lane, s) in act]
            S[base + lane] = r.choice(ok)
    O = np.zeros(n, np.float32)
    emu(sg_shuffle, 2, X, S, M, O, kind)
    for k in np.flatnonzero(M):
        base = k // SGS * SGS
        assert O[k] == X[base + source_lane(kind, k - base, int(S[k]))]


@pytest.mark.parametrize("kind, s, why", [("down", 1, "out-of-range"), ("up", 3, "out-of-range"),
                                          ("xor", 1, "inactive"), ("index", 5, "inactive")])
def test_using_an_undefined_shuffle_result_is_reported_at_the_use(kind, s, why):
    n = 2 * WG
    X = np.arange(n, dtype=np.float32)
    M = np.ones(n, np.uint32)
    if why == "inactive":
        M[5] = 0                 # lane 5 of subgroup 0: lane 4 reads it (xor 1); all read it (index 5)
    S = np.full(n, s, np.uint32)
    O = np.zeros(n, np.float32)
    emu(sg_shuffle, 2, X, S, M, O, kind, False)        # computed, never used: fine
    with pytest.raises(pc.EmulatorError) as e:
        emu(sg_shuffle, 2, X, S, M, O, kind)
    assert e.value.loc.line == line_of(sg_shuffle, "# USE")
    assert "inactive or out-of-range lane" in str(e.value)


def test_broadcast_lane_must_be_uniform_and_active():
    n = 2 * WG
    X = np.arange(n, dtype=np.float32)
    M = np.ones(n, np.uint32)
    S = np.zeros(n, np.uint32)
    S[3] = 1
    O = np.zeros(n, np.float32)
    with pytest.raises(pc.EmulatorError) as e:
        emu(sg_shuffle, 2, X, S, M, O, "broadcast")
    assert "differs between the active invocations of subgroup 0" in str(e.value)
    assert e.value.rule_id == "subgroup.broadcast-uniform"
    assert "dynamically uniform" in e.value.rule
    assert e.value.loc.line == line_of(sg_shuffle, "pc.subgroup.broadcast(x, s)")
    S[:] = 7
    M[7] = 0
    with pytest.raises(pc.EmulatorError, match="inactive or out-of-range"):
        emu(sg_shuffle, 2, X, S, M, O, "broadcast")


@pc.kernel(workgroup_size=20, subgroup_size=8)
def sg_partial(X: pc.ReadBuffer[u32], O: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    O[i] = pc.subgroup.add(X[i]) + pc.subgroup.exclusive_add(X[i]) * u32(1000)


def test_a_partial_last_subgroup_has_only_its_invocations():
    X = np.arange(1, 41, dtype=np.uint32)
    O = np.zeros(40, np.uint32)
    emu(sg_partial, 2, X, O)
    for w in range(2):
        for lo, hi in ((0, 8), (8, 16), (16, 20)):
            seg = X[20 * w + lo:20 * w + hi]
            got = O[20 * w + lo:20 * w + hi]
            np.testing.assert_array_equal(got, seg.sum() + (np.cumsum(seg) - seg) * 1000)


# ---------------------------------------------------------------- capabilities and requirements

@pc.kernel(workgroup_size=32, subgroup_size=32)
def sg_everything(X: pc.Buffer[f32], Y: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    x, y = X[i], Y[i]
    X[i] = pc.subgroup.add(x) + pc.subgroup.inclusive_add(x) + pc.subgroup.shuffle_up(x, 1)
    Y[i] = pc.subgroup.max(y, 8) + pc.subgroup.shuffle(y, 3) + pc.subgroup.ballot_bit_count(
        pc.subgroup.ballot(pc.subgroup.any(y > 3)))


def test_capabilities_and_vulkan_operations_come_from_the_ops_used():
    ck = sg_everything.compile()
    caps = set(ck.requirements["capabilities"])
    assert {"GroupNonUniform", "GroupNonUniformArithmetic", "GroupNonUniformShuffleRelative",
            "GroupNonUniformClustered", "GroupNonUniformShuffle", "GroupNonUniformBallot",
            "GroupNonUniformVote"} <= caps
    assert ck.requirements["subgroup_operations"] == sorted(
        ["basic", "arithmetic", "shuffle_relative", "clustered", "shuffle", "ballot", "vote"])
    assert ck.requirements["subgroup_size"] == 32
    ck2 = sg_partial.compile()
    assert "GroupNonUniformClustered" not in ck2.requirements["capabilities"]
    assert ck2.requirements["subgroup_operations"] == ["arithmetic", "basic"]
    assert "shaderSubgroupExtendedTypes" not in ck2.requirements["features"]


def test_the_device_check_names_missing_subgroup_operations():
    dev = Capabilities("dev", "x", "1", "1.3", "cpu", subgroup_size=32,
                       subgroup_operations=("basic", "vote", "arithmetic", "ballot"),
                       subgroup_stages=("compute",))
    reqs = sg_everything.compile().requirements
    missing = dev.missing({"subgroup_operations": reqs["subgroup_operations"]})
    assert missing == ["subgroup operations clustered, shuffle, shuffle_relative in compute shaders "
                       "(device: basic, vote, arithmetic, ballot in compute)"]
    dev.subgroup_operations += ("clustered", "shuffle", "shuffle_relative")
    assert dev.missing({"subgroup_operations": reqs["subgroup_operations"]}) == []
    dev.subgroup_stages = ("fragment",)
    assert "in compute shaders" in dev.missing({"subgroup_operations": ["basic"]})[0]


@pc.kernel(workgroup_size=32, subgroup_size=32)
def sg_wide(X: pc.Buffer[pc.u64], H: pc.Buffer[pc.f16]):
    i = pc.global_invocation_id.x
    X[i] = pc.subgroup.add(X[i])
    H[i] = pc.subgroup.inclusive_add(H[i])


def test_64_bit_and_16_bit_values_need_extended_types():
    ck = sg_wide.compile()
    assert "shaderSubgroupExtendedTypes" in ck.requirements["features"]
    X = np.arange(64, dtype=np.uint64) << np.uint64(40)
    H = np.full(64, 0.5, np.float16)
    emu(sg_wide, 2, X, H)
    np.testing.assert_array_equal(X, np.repeat([496, 1520], 32).astype(np.uint64) << np.uint64(40))
    np.testing.assert_array_equal(H, np.tile(np.arange(1, 33) * 0.5, 2).astype(np.float16))


# ---------------------------------------------------------------- misuse

def _compile_error(fn, **kw):
    k = pc.kernel(workgroup_size=32, subgroup_size=16)(fn)
    with pytest.raises(pc.CompileError) as e:
        k.compile(**kw)
    return e.value


def test_cluster_size_rules():
    def bad_size(X: pc.Buffer[u32]):
        X[0] = pc.subgroup.add(X[0], 3)                    # BAD
    e = _compile_error(bad_size)
    assert "cluster_size 3 is not a power of two from 1 to the subgroup size 16" in e.message
    assert "power of 2" in e.rule and e.hint and e.line == line_of(bad_size, "# BAD")
    assert e.rule_id == "subgroup.cluster-size"

    def too_big(X: pc.Buffer[u32]):
        X[0] = pc.subgroup.add(X[0], 32)                   # BAD
    assert _compile_error(too_big).line == line_of(too_big, "# BAD")

    def runtime(X: pc.Buffer[u32], c: u32):
        X[0] = pc.subgroup.add(X[0], c)                    # BAD
    e = _compile_error(runtime)
    assert "compile-time int" in e.message and "constant instruction" in e.rule
    assert e.rule_id == "subgroup.cluster-constant"
    assert e.line == line_of(runtime, "# BAD")


def test_wrong_types():
    def float_xor(X: pc.Buffer[f32]):
        X[0] = pc.subgroup.xor(X[0])                       # BAD
    e = _compile_error(float_xor)
    assert "subgroup xor is not defined on f32" in e.message and e.rule and e.hint
    assert e.rule_id == "subgroup.arithmetic-type"
    assert e.line == line_of(float_xor, "# BAD")

    def bf16_sum(X: pc.Buffer[pc.bf16]):
        X[0] = pc.subgroup.add(X[0])                       # BAD
    e = _compile_error(bf16_sum)
    assert "takes a scalar" in e.message and e.line == line_of(bf16_sum, "# BAD")
    assert e.rule_id == "subgroup.operand-type"

    def signed_lane(X: pc.Buffer[f32], s: i32):
        X[0] = pc.subgroup.shuffle(X[0], s)                # BAD
    e = _compile_error(signed_lane)
    assert "must be a u32, not i32" in e.message and "Signedness" in e.rule
    assert e.rule_id == "subgroup.id-type"
    assert e.line == line_of(signed_lane, "# BAD")

    def float_lane(X: pc.Buffer[f32]):
        X[0] = pc.subgroup.broadcast(X[0], 1.0)            # BAD
    e = _compile_error(float_lane)                         # as an index, even an integral float
    assert "must be a u32, not f32" in e.message and e.rule_id == "subgroup.id-type"
    assert e.line == line_of(float_lane, "# BAD")

    def ballot_of_int(X: pc.Buffer[u32]):
        X[0] = pc.subgroup.ballot_bit_count(pc.subgroup.ballot(X[0]))    # BAD
    e = _compile_error(ballot_of_int)
    assert "takes a bool" in e.message and e.line == line_of(ballot_of_int, "# BAD")
    assert e.rule_id == "subgroup.predicate-bool"

    def vote_int(X: pc.Buffer[u32]):
        X[0] = pc.select(pc.subgroup.all(X[0]), u32(1), u32(0))         # BAD
    assert _compile_error(vote_int).line == line_of(vote_int, "# BAD")

    def unknown(X: pc.Buffer[u32]):
        X[0] = pc.subgroup.reduce(X[0], "nand")            # BAD
    e = _compile_error(unknown)
    assert "unknown subgroup operation 'nand'" in e.message and e.line == line_of(unknown, "# BAD")
    assert e.rule_id == "subgroup.operation"

    def listed(X: pc.Buffer[u32]):
        X[0] = pc.subgroup.inclusive_scan(X[0], ["add"])   # BAD
    e = _compile_error(listed)
    assert "unknown subgroup operation ['add']" in e.message and e.line == line_of(listed, "# BAD")
    assert e.rule_id == "subgroup.operation"


@pytest.mark.parametrize("kind,n,what", [("shuffle_xor", 16, "mask"), ("shuffle_up", 16, "delta"),
                                         ("shuffle_down", 40, "delta")])
def test_relative_shuffles_past_a_fixed_subgroup_are_compile_errors(kind, n, what):
    """With the subgroup size fixed (16 here), a constant mask or delta at or past it names no
    lane of the subgroup from any lane: undefined in every invocation, refused at the line (as
    a constant lane of broadcast or shuffle is); one below it compiles."""
    def k(X: pc.Buffer[u32], KIND: pc.Const, N: pc.Const):
        X[0] = getattr(pc.subgroup, KIND)(X[pc.global_invocation_id.x], N)    # BAD
    e = _compile_error(k, KIND=kind, N=n)
    assert f"subgroup.{kind} with {what} {n} in subgroups of 16 invocations reads no lane" in e.message
    assert e.rule_id == "emulator.undefined-behaviour" and "undefined" in e.rule and e.hint
    assert e.line == line_of(k, "# BAD")
    pc.kernel(workgroup_size=32, subgroup_size=16)(k).compile(KIND=kind, N=15)


WAcc = pc.coopmat[f32, pc.Workgroup, 16, 16, pc.Accumulator]


def _plus_subgroup_sum(row, col, e):
    return e + pc.subgroup.add(e)                          # PER ELEMENT


@pc.kernel(workgroup_size=32)
def sg_in_per_element(C: pc.Buffer[f32]):
    pc.store(C, 0, pc.nv.per_element(WAcc.fill(1.0), _plus_subgroup_sum), 16)


def test_collectives_inside_a_per_element_function_are_reported():
    with pytest.raises(pc.EmulatorError) as e:
        emu(sg_in_per_element, 1, np.zeros(256, np.float32))
    assert "not available inside a function called per matrix element" in str(e.value)
    assert e.value.rule and e.value.hint
    assert e.value.loc.line == line_of(_plus_subgroup_sum, "# PER ELEMENT")
    assert e.value.rule_id == "subgroup.in-callback"


V4 = pc.vec(f32, 4)
V2I = pc.vec(i32, 2)


@pc.kernel(workgroup_size=WG, subgroup_size=SGS)
def sg_vectors(X: pc.ReadBuffer[V4], Y: pc.ReadBuffer[V2I], M: pc.ReadBuffer[u32], O: pc.Buffer[V4],
               P: pc.Buffer[V2I], E: pc.Buffer[u32]):
    i = pc.global_invocation_id.x
    if M[i] != 0:
        x, y = X[i], Y[i]
        O[i * u32(3)] = pc.subgroup.add(x)
        O[i * u32(3) + u32(1)] = pc.subgroup.exclusive_scan(x, "max")
        O[i * u32(3) + u32(2)] = pc.subgroup.broadcast_first(x)
        P[i * u32(2)] = pc.subgroup.reduce(y, "xor", 4)
        P[i * u32(2) + u32(1)] = pc.subgroup.inclusive_scan(y, "min")
        E[i] = pc.select(pc.subgroup.all_equal(y), u32(1), u32(0))


@SETTINGS
@given(density=st.floats(0, 1), seed=st.integers(0, 2**31), spread=st.integers(0, 3))
def test_vector_operands_work_per_component(density, seed, spread):
    r = np.random.default_rng(seed)
    n = 2 * WG
    X = r.standard_normal((n, 4)).astype(np.float32)
    Y = r.integers(-spread, spread + 1, (n, 2)).astype(np.int32)
    M = (r.random(n) < density).astype(np.uint32)
    O, P, E = np.zeros((3 * n, 4), np.float32), np.zeros((2 * n, 2), np.int32), np.zeros(n, np.uint32)
    emu(sg_vectors, 2, X, Y, M, O, P, E)
    act = M != 0
    O, P = O.reshape(n, 3, 4), P.reshape(n, 2, 2)
    for c in range(4):
        np.testing.assert_array_equal(O[act, 0, c], reference(X[:, c].copy(), M, "add", "reduce", None)[act])
        np.testing.assert_array_equal(O[act, 1, c], reference(X[:, c].copy(), M, "max", "exclusive", None)[act])
    for c in range(2):
        np.testing.assert_array_equal(P[act, 0, c], reference(Y[:, c].copy(), M, "xor", "reduce", 4)[act])
        np.testing.assert_array_equal(P[act, 1, c], reference(Y[:, c].copy(), M, "min", "inclusive", None)[act])
    for base in range(0, n, SGS):
        lanes = [j for j in range(base, base + SGS) if M[j]]
        for k in lanes:
            np.testing.assert_array_equal(O[k, 2], X[lanes[0]])
            assert E[k] == all((Y[j] == Y[lanes[0]]).all() for j in lanes)


def test_ballot_bit_count_misuse():
    def not_a_ballot(X: pc.Buffer[u32]):
        X[0] = pc.subgroup.ballot_bit_count(pc.make_vector([X[0], X[1]]))      # BAD
    e = _compile_error(not_a_ballot)
    assert "takes a ballot (vec4<u32>), not vec2<u32>" in e.message
    assert "four components" in e.rule and e.line == line_of(not_a_ballot, "# BAD")
    assert e.rule_id == "subgroup.ballot-type"

    def bad_mode(X: pc.Buffer[u32]):
        X[0] = pc.subgroup.ballot_bit_count(pc.subgroup.ballot(X[0] > 1), "prefix")   # BAD
    e = _compile_error(bad_mode)
    assert "unknown ballot_bit_count mode 'prefix'" in e.message and "ExclusiveScan" in e.rule
    assert e.rule_id == "subgroup.ballot-mode"
    assert e.line == line_of(bad_mode, "# BAD")

    def listed_mode(X: pc.Buffer[u32]):
        X[0] = pc.subgroup.ballot_bit_count(pc.subgroup.ballot(X[0] > 1), ["reduce"])   # BAD
    e = _compile_error(listed_mode)
    assert "unknown ballot_bit_count mode ['reduce']" in e.message
    assert e.rule_id == "subgroup.ballot-mode" and e.line == line_of(listed_mode, "# BAD")
