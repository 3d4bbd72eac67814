"""Attention decode that reads K and V once, at memory speed: a few query rows per K/V head
against a long KV cache, without cooperative matrices.

Decode is a matrix-vector problem: each K/V head's K and V (keys x head_dim) are read once and
used by the G = heads / kv_heads query heads that share them (times the queries: the `rows`
query rows of a K/V head, consecutive rows of Q). Two kernels:

- `attention_decode_vector(...)`: one workgroup per (chunk of keys, K/V head). Each key row is
  read by a cluster of `lanes` consecutive lanes of a subgroup, each lane taking head_dim /
  lanes of its dimensions as vector loads of `width` halves (4: 8 bytes; 8: 16 bytes, a
  uvec4 whose words are read as half pairs; the clusters of a subgroup read consecutive key
  rows, so a load instruction reads consecutive bytes). A lane keeps its slice
  of every query row in f32 registers (pre-scaled by scale · log2(e)) and multiplies it with
  its slice of the key; a reduce-scatter of shuffles over the cluster leaves each lane the
  score of one (row, key), whose softmax step it runs before the cluster gathers the
  probabilities back (`reduce="scatter"`, where it fits), or an xor butterfly gives every
  lane every score (`reduce="butterfly"`: every lane of the cluster gets the same bits,
  each step adds the same two values in either order).
  Each cluster is a stream of keys: per iteration it takes `unroll` keys, `streams` apart
  (the workgroup reads `streams · unroll` consecutive rows), loads their K and V rows before
  any arithmetic (with `prefetch`, the default, it issues the next iteration's loads before
  this iteration's math: keeping the next loads in flight during the math made it 20 %
  faster at 32768 keys, measured while every f16 conversion still cost 13 instructions;
  loading further ahead was slower), and updates its
  online softmax in base 2 (running maximum m and sum l per
  query row in f32, one rescale per row and iteration) and its slice of the unnormalised
  outputs with the rows of V. Keys past the chunk are clamped on load and masked to -inf.
  At the end the streams of a subgroup merge by shuffles and the subgroups through shared
  memory (each rescaled to the larger maximum), and the workgroup writes one partial output,
  maximum and sum per row.
- `attention_merge(...)`: merges the chunks of each row: the invocations of a workgroup take
  4 dimensions each of the row and a share of the chunks (all loads of a share independent of
  each other), fold them into (maximum, sum, output) with the same online rescaling, and the
  shares then merge through shared memory; O = output / sum, LSE = (maximum + log2 sum) · ln 2.

`pycoop.kernels.attention(...)` uses them for decode where they apply (no mask, not causal,
head_dim 64, 128 or 256, at most `MAX_ROWS` query rows per K/V head).
"""
from __future__ import annotations

import functools

import pycoop as pc
from pycoop import f32, u32

from .attention_parts import ELEMENT, HEAD_DIMS, LN2, LOG2E, NEG_BIG, OUT, start_max
from .limits import SHARED_BYTES, SMS

VECTOR_HEAD_DIMS = (64, 128, 256)
MAX_ROWS = 8                      # query rows per K/V head a lane holds in registers
MERGE_INVOCATIONS = 256
MAX_PREFETCH = 4                  # iterations of K/V rows a stream may load ahead
DECODE_MERGES = ("workgroup", "launch", "phase")     # where the chunks of a head are merged
WIDTHS = (4, 8)                   # halves per K and V load of the vector decode
REDUCES = ("auto", "scatter", "butterfly")      # how a cluster sums its lanes' scores


class DecodeConfig:
    """Defaults of the vector decode (bench/attention_gpu.py sweeps of 2026-11-27: the H100's
    for subgroups and splits, the H200's for prefetching with 2 keys per iteration, 20 %
    faster at 32768 keys than 4 keys without it)."""
    subgroups = 4          # subgroups per workgroup
    # ... and where the chunks of the base splits are at most `short_chunk` keys, more: at
    # 8192 keys (chunks of 249) 8 subgroups took 22.0-22.6 µs against 23.2-24.2 for 4 in two
    # H100 runs (5 of 5 pairs); at 32768 keys 8 were slower (69.4 against 67.5-69.0, with 32
    # chunks each as long as the 4 subgroups' 64)
    short_subgroups = 8
    short_chunk = 256
    unroll = 2             # keys per stream and iteration
    prefetch = True        # load the next iteration's K and V before this one's math
    # the merge as the second dispatch of one kernel ("phase"), 2 chunks loaded per step: in
    # three H100 runs it took 21.2-21.6 µs against 22.0-22.2 for a second kernel ("launch")
    # at 8192 keys, 65.5-66.1 against 67.8-68.1 at 32768 (4 chunks per step: 21.9-22.5 and
    # 65.8-66.9). Merging in the last workgroup of each head (one launch, "workgroup") was
    # slower: 33.6 and 91.0 µs (its kernel alone took 28.2 µs at 8192 keys against 14.6 for
    # the chunks' kernel)
    merge = "phase"
    merge_unroll = 2
    # the merge dispatch's workgroups per row, each merging head_dim / merge_columns of its
    # dimensions (not yet timed above 1)
    merge_columns = 1
    waves = 2              # workgroups per SM the default splits aim at
    sms = SMS              # the SMs the splits aim to fill
    # chunks longer than this many keys are split further, up to twice the waves: at 32768
    # keys, 64 chunks of 512 keys took 68-71 µs against 75-77 for 33 of 1008 (H100; 128
    # chunks: 82), while at 8192 keys 33 chunks beat 64 (24.1-24.2 against 25.8-26.0 µs)
    long_chunk = 512
    # halves per K and V load: 16-byte loads (8) took 21.6-21.9 µs against 22.2-22.6 for
    # 8-byte ones (4) at 8192 keys, 67.1-67.6 against 68.7-69.4 at 32768 (H100, two runs)
    width = 8


def _check(name: str, head_dim: int, rows: int, subgroups: int, lanes: int, unroll: int,
           subgroup_size: int, dtype: str, width: int = 4) -> None:
    """Errors a wrong configuration gives before anything is traced or launched."""
    if head_dim not in VECTOR_HEAD_DIMS:
        raise ValueError(f"{name}: head_dim must be one of {VECTOR_HEAD_DIMS}, got {head_dim!r}")
    if not isinstance(rows, int) or isinstance(rows, bool) or not 1 <= rows <= MAX_ROWS:
        raise ValueError(f"{name}: rows (query rows per K/V head) must be an int from 1 to "
                         f"{MAX_ROWS}, got {rows!r}")
    for what, v in (("subgroups", subgroups), ("unroll", unroll)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name}: {what} must be an int >= 1, got {v!r}")
    if subgroup_size not in (8, 16, 32, 64, 128):
        raise ValueError(f"{name}: subgroup_size must be 8, 16, 32, 64 or 128, got "
                         f"{subgroup_size!r}")
    if width not in WIDTHS or isinstance(width, bool):
        raise ValueError(f"{name}: width (halves per K and V load) must be one of {WIDTHS}, "
                         f"got {width!r}")
    if (not isinstance(lanes, int) or lanes < 1 or lanes & (lanes - 1) or lanes > subgroup_size
            or (head_dim // width) % lanes):
        raise ValueError(f"{name}: lanes per key must be a power of two of at most the subgroup "
                         f"size ({subgroup_size}) dividing head_dim / width = "
                         f"{head_dim // width}, got {lanes!r}")
    if dtype not in ELEMENT:
        raise ValueError(f"{name}: dtype must be 'f16' or 'bf16', got {dtype!r}")
    if not fits_shared(head_dim, rows, subgroups):
        raise ValueError(f"{name}: the merge of {subgroups} subgroups x {rows} rows x "
                         f"{head_dim} f32 needs more than {SHARED_BYTES} bytes of shared memory; "
                         "use fewer subgroups or rows")


def pow2_ceil(x: int) -> int:
    return 1 << (x - 1).bit_length()


def scatter_fits(rows: int, unroll: int, lanes: int) -> bool:
    """Whether the reduce-scatter of the scores applies: one padded (row, key) score per
    group of lanes of a cluster."""
    return pow2_ceil(rows) * pow2_ceil(unroll) <= lanes


def fits_shared(head_dim: int, rows: int, subgroups: int) -> bool:
    """Whether the merge of `subgroups` subgroups' outputs fits `SHARED_BYTES`."""
    return subgroups * rows * (head_dim + 2) * 4 <= SHARED_BYTES


def default_lanes(head_dim: int, subgroup_size: int) -> int:
    """Lanes per key: one 4-half vector per lane and 2 of them at head_dim 128 on 32-lane
    subgroups (16 lanes, two keys per load instruction), at most the subgroup."""
    return min(subgroup_size, max(1, head_dim // 8))


def streams_of(subgroups: int, subgroup_size: int, lanes: int) -> int:
    """The key streams of a workgroup (one per cluster of `lanes` lanes)."""
    return subgroups * (subgroup_size // lanes)


@functools.cache
def attention_decode_vector(head_dim: int = 128, rows: int = 4, subgroups: int = 4,
                            lanes: int | None = None, unroll: int = DecodeConfig.unroll,
                            subgroup_size: int = 32, dtype: str = "f16",
                            prefetch: bool | int = DecodeConfig.prefetch, merge: bool = False,
                            out: str = "f16", merge_unroll: int = 4,
                            width: int = 4, phases: bool = False, merge_columns: int = 1,
                            reduce: str = "auto"):
    """The chunk kernel. Parameters: Q (batch · kv_heads · rows, head_dim) — for each K/V head
    its `rows` query rows, as (batch, heads, queries, head_dim) lays them out —, K and V
    (batch · kv_heads · keys, head_dim) of `dtype`; Part (splits, batch · kv_heads · rows,
    head_dim) f32, the unnormalised outputs of each chunk; M and L (splits, batch · kv_heads ·
    rows) f32, each chunk's maxima and sums in base 2 (scores times log2(e)); then keys, chunk
    (keys per workgroup) and scale. The grid is (splits, batch · kv_heads); a chunk past the
    keys writes maxima of -2^99 (`NEG_BIG`) and sums and outputs of 0. `lanes` per key
    (default `default_lanes`), `subgroups` per workgroup, `unroll` keys per stream and
    iteration, `width` halves per K and V load (4: K and V bound as vectors of `dtype`; 8: as
    uvec4, `K.view(np.uint32)`, `attention`'s default, `DecodeConfig.width`); the kernel needs
    subgroups of `subgroup_size` lanes.

    `merge=True`: the last workgroup of each K/V head to finish merges its chunks itself
    (`merge_chunks`, `merge_unroll`), so that no second launch is needed. Parameters: Q, K,
    V, Part, M, L as above, Count (u32, batch · kv_heads, zero; the kernel leaves it zero),
    O (batch · kv_heads · rows, head_dim) of `out` and LSE (batch · kv_heads · rows) f32,
    then keys, chunk and scale. Each workgroup writes its partial results, makes them
    available to the device (`pc.barrier(memory="device")`) and counts itself done with an
    acquire-release atomic add on its head's counter; the one that counts last sees every
    other chunk's results and merges them.

    `phases=True`: one kernel for both steps, dispatched twice with the same pipeline (a
    pipeline switch between two dependent dispatches cost the second one 2-4 µs on the H100,
    `bench/decode_launches.py`). Parameters: Q, K, V, Part, M, L, O, LSE, keys, chunk,
    scale, then R (the rows: batch · kv_heads · rows), splits and phase: phase 0 on the grid
    (splits, batch · kv_heads) writes the chunks as above, phase 1 on the grid (R,) merges
    them, one workgroup per row, as `attention_merge` does (`merge_chunks`, `merge_unroll`).
    Each phase leaves the other's outputs unwritten. `merge_columns` (phases): phase 1 runs on
    the grid (R, merge_columns), each workgroup merging head_dim / merge_columns dimensions of
    its row with more groups of invocations sharing the chunks (a power of two up to
    head_dim / 4): with few rows one workgroup per row leaves most SMs idle.

    `reduce`: how a cluster sums its lanes' slices of the scores. "butterfly": every lane sums
    all rows x unroll scores over the cluster (an xor butterfly each, log2(lanes) shuffles per
    score) and runs the online softmax of every row. "scatter": a reduce-scatter leaves each
    lane the sum of one (row, key) score (rows and keys padded to powers of two, np x up <=
    lanes: np · up shuffles in all), the lane runs the softmax of that one score, and the
    cluster gathers the probabilities and rescale factors back (np · up + np shuffles): about
    half the shuffles and a row's softmax once per lane instead of once per row, the
    same arithmetic otherwise. "auto" (the default): "scatter" where it fits."""
    lanes = default_lanes(head_dim, subgroup_size) if lanes is None else lanes
    _check("attention_decode_vector", head_dim, rows, subgroups, lanes, unroll, subgroup_size,
           dtype, width)
    if not isinstance(prefetch, int) or prefetch < 0 or prefetch > MAX_PREFETCH:
        raise ValueError(f"attention_decode_vector: prefetch (iterations loaded ahead; True is "
                         f"1) must be a bool or an int from 0 to {MAX_PREFETCH}, got "
                         f"{prefetch!r}")
    for what, v in (("merge", merge), ("phases", phases)):
        if not isinstance(v, bool):
            raise ValueError(f"attention_decode_vector: {what} must be a bool, got {v!r}")
    if merge and phases:
        raise ValueError("attention_decode_vector: merge (in the last workgroup) and phases (in "
                         "a second dispatch) are two ways of merging: choose one")
    if merge or phases:
        _check_merge("attention_decode_vector", head_dim, out, merge_unroll)
    check_merge_columns("attention_decode_vector", head_dim, merge_columns)
    if merge_columns != 1 and not phases:
        raise ValueError(f"attention_decode_vector: merge_columns splits the rows of phase 1 "
                         f"(phases=True) over workgroups; got {merge_columns} without phases")
    D, n, LK, U, S = head_dim, rows, lanes, unroll, subgroup_size
    scatter = scatter_fits(n, U, LK)
    if reduce not in REDUCES:
        raise ValueError(f"attention_decode_vector: reduce must be one of {REDUCES}, got "
                         f"{reduce!r}")
    if reduce == "scatter" and not scatter:
        raise ValueError(f"attention_decode_vector: reduce='scatter' needs rows x unroll, "
                         f"each rounded up to a power of two, of at most the lanes per key "
                         f"({LK}); got {n} x {U}: use reduce='butterfly' or 'auto'")
    scatter = scatter and reduce != "butterfly"
    ahead = int(prefetch)
    el = ELEMENT[dtype]
    V4 = pc.vec(el, 4)
    W = width
    KT = V4 if W == 4 else pc.vec(u32, 4)     # a K or V load
    vpl = D // (W * LK)                      # loads per lane and key
    DW = D // W
    spk = S // LK                            # streams per subgroup
    T = subgroups * spk                      # streams per workgroup
    D4 = D // 4
    WG = subgroups * S
    per_inv = -(-(n * D4) // WG)

    def halves(v):
        return [f32(v[e]) for e in range(4)]

    def kv_halves(v):
        """The f32 values of one K or V load."""
        if W == 4:
            return halves(v)
        return [f32(pc.bitcast(v[c], pc.vec(el, 2))[h]) for c in range(4) for h in range(2)]

    def add(a, b):
        return a + b

    def xor_fold(x, op, lo: int, hi: int, down: bool = False):
        """`op` of x over the lanes lo, 2 lo, ... < hi apart (from the largest with `down`):
        an xor butterfly, every lane of a group gets the same bits (each step combines the
        same two values in either order)."""
        offs = [lo << b for b in range(max(0, (hi // lo).bit_length() - 1))]
        for off in (offs[::-1] if down else offs):
            x = op(x, pc.subgroup.shuffle_xor(x, off))
        return x

    def dot(qj, kvu):
        d = qj[0] * kvu[0]
        for e in range(1, W * vpl):
            d = pc.fma(qj[e], kvu[e], d)
        return d

    def pv_row(acc, alpha, p, vs):
        """One output dimension of a row: rescaled, plus the keys' probabilities times V."""
        a = acc * alpha
        for pu, vu in zip(p, vs):
            a = pc.fma(pu, vu, a)
        return a

    # the reduce-scatter: scores padded to Np rows x Up keys, v = row · Up + key; the halving
    # step over lane offset LK / 2 ... LK / P sets bit log2(P) - 1 ... 0 of the v a lane keeps,
    # so lane `sub` of a cluster ends with v = sub // (LK / P), which lanes holder[v] hold
    Np, Up = pow2_ceil(n), pow2_ceil(U)
    P = Np * Up
    spread = max(1, LK // P)               # lanes of a cluster holding one v
    holder = [v * spread for v in range(P)]

    def scatter_sum(vals, sub):
        off = LK // 2
        while off >= 1:
            if len(vals) > 1:
                half = len(vals) // 2
                upper = (sub & u32(off)) != u32(0)
                vals = [pc.select(upper, vals[half + i], vals[i])
                        + pc.subgroup.shuffle_xor(pc.select(upper, vals[i], vals[half + i]),
                                                  off)
                        for i in range(half)]
            else:
                vals = [vals[0] + pc.subgroup.shuffle_xor(vals[0], off)]
            off //= 2
        return vals[0]


    F4 = pc.vec(f32, 4)
    G = max(1, min(WG // D4, subgroups))               # merge groups (the shared arrays' rows)
    C4 = D4 // merge_columns               # phase 1: the column groups of one workgroup
    G1 = max(1, WG // C4)                  # ... of one row, every group
    rows_sh = max(subgroups * n, G1 if phases else 0)     # the merge arrays' rows (m and l)
    o_sh = max(subgroups * n * D, G1 * 4 * C4 if phases else 0)
    if (2 * rows_sh + o_sh) * 4 > SHARED_BYTES:
        raise ValueError(f"attention_decode_vector: the merge of phase 1 ({G1} groups x "
                         f"{4 * C4} f32) needs more than {SHARED_BYTES} bytes of shared memory; "
                         "use fewer subgroups")

    OutEl = OUT[out]

    def shared_arrays():
        """The streams' merge arrays (maxima, sums, outputs), large enough for phase 1's
        merge too."""
        return pc.shared(f32, rows_sh), pc.shared(f32, rows_sh), pc.shared(f32, o_sh)

    @pc.func
    def body(Q, K, V, Part, M, L, Count, O, LSE, Skv, chunk, scale, sh_m, sh_l, sh_o):
        done = pc.shared(u32, 1) if merge else None     # the head's count before this one
        bkv, split = pc.workgroup_id.y, pc.workgroup_id.x
        R = pc.num_workgroups.y * n
        lane = pc.subgroup_local_id()
        sub = lane % LK                                   # this lane's place in its cluster
        t = pc.subgroup_id() * spk + lane // LK           # this lane's stream
        k2 = scale * f32(LOG2E)
        q = [[x * k2 for c in range(vpl) for h in range(W // 4)
              for x in halves(Q[(bkv * n + j) * D4 + (c * LK + sub) * (W // 4) + h])]
             for j in range(n)]
        kb = pc.min(split * chunk, Skv)
        ke = pc.min(kb + chunk, Skv)
        base = bkv * Skv
        m = [f32(NEG_BIG)] * n
        l = [f32(0.0)] * n
        o = [[f32(0.0)] * (W * vpl) for _ in range(n)]
        if scatter:     # this lane's row's m_l and l_l (and its key u_l), its cluster's lane 0
            m_l, l_l = f32(NEG_BIG), f32(0.0)
            u_l = sub // u32(spread) % u32(Up)
            base_lane = lane - sub

        def load(k0):
            """The raw K and V vectors of the stream's `U` keys from k0 (rows clamped)."""
            rws = [(base + pc.min(k0 + u * T + t, Skv - 1)) * DW + sub for u in range(U)]
            return ([[K[r + c * LK] for c in range(vpl)] for r in rws],
                    [[V[r + c * LK] for c in range(vpl)] for r in rws])

        # the first `ahead` iterations' loads, before the loop
        ahead_k, ahead_v = [], []
        for i in range(ahead):
            ak, av = load(kb + i * T * U)
            ahead_k.append(ak)
            ahead_v.append(av)
        for k0 in pc.range(kb, ke, T * U):
            if ahead:           # this iteration's vectors were loaded `ahead` iterations ago;
                ck = [list(r) for r in ahead_k[0]]   # the next ones are issued before any math
                cv = [list(r) for r in ahead_v[0]]
                fk, fv = load(k0 + ahead * T * U)
                for i in range(ahead):
                    nk, nv = (ahead_k[i + 1], ahead_v[i + 1]) if i + 1 < ahead else (fk, fv)
                    for u in range(U):
                        for c in range(vpl):
                            ahead_k[i][u][c] = nk[u][c]
                            ahead_v[i][u][c] = nv[u][c]
            else:
                ck, cv = load(k0)
            kv = [[x for c in range(vpl) for x in kv_halves(ck[u][c])] for u in range(U)]
            vv = [[x for c in range(vpl) for x in kv_halves(cv[u][c])] for u in range(U)]
            if scatter:
                dots = [[dot(q[j], kv[u]) if j < n and u < U else f32(0.0) for u in range(Up)]
                        for j in range(Np)]
                sc = scatter_sum([x for r in dots for x in r], sub)
                # this lane's (row, key): masked where the key is past the chunk or padding
                ok = k0 + u_l * T + t < ke
                if Up != U:
                    ok = ok & (u_l < U)
                sc = pc.select(ok, sc, f32(float("-inf")))
                mx = xor_fold(sc, pc.max, spread, spread * Up)     # over the row's keys
                m_new = pc.max(m_l, mx)
                alpha = pc.exp2(m_l - m_new)
                p_l = pc.exp2(sc - m_new)
                l_l = pc.fma(l_l, alpha, xor_fold(p_l, add, spread, spread * Up))
                m_l = m_new
                for j in range(n):
                    a_j = pc.subgroup.shuffle(alpha, base_lane + holder[j * Up])
                    p = [pc.subgroup.shuffle(p_l, base_lane + holder[j * Up + u])
                         for u in range(U)]
                    o[j] = [pv_row(o[j][e], a_j, p, [vv[u][e] for u in range(U)])
                            for e in range(W * vpl)]
            else:
                for j in range(n):
                    s = []
                    for u in range(U):
                        s.append(pc.select(k0 + u * T + t < ke,
                                           xor_fold(dot(q[j], kv[u]), add, 1, LK, down=True),
                                           f32(float("-inf"))))
                    m_new = m[j]
                    for x in s:
                        m_new = pc.max(m_new, x)
                    alpha = pc.exp2(m[j] - m_new)
                    p = [pc.exp2(x - m_new) for x in s]
                    tot = p[0]
                    for x in p[1:]:
                        tot = tot + x
                    l[j] = pc.fma(l[j], alpha, tot)
                    o[j] = [pv_row(o[j][e], alpha, p, [vv[u][e] for u in range(U)])
                            for e in range(W * vpl)]
                    m[j] = m_new
        if scatter:             # every lane takes each row's running maximum and sum
            m = [pc.subgroup.shuffle(m_l, base_lane + holder[j * Up]) for j in range(n)]
            l = [pc.subgroup.shuffle(l_l, base_lane + holder[j * Up]) for j in range(n)]
        # merge the streams of each subgroup by shuffles (xor over the cluster bits), then the
        # subgroups through shared memory; each merge rescales to the larger maximum
        def across_streams(x, op):
            return xor_fold(x, op, LK, S)

        for j in range(n):
            b = across_streams(m[j], pc.max)
            w = pc.exp2(m[j] - b)
            l[j] = across_streams(l[j] * w, add)
            o[j] = [across_streams(x * w, add) for x in o[j]]
            m[j] = b
        sg = pc.subgroup_id()
        big = groups_max(sh_m, m, lane == 0, sg, subgroups)
        if lane < LK:
            for j in range(n):
                w = pc.exp2(m[j] - big[j])
                if lane == 0:
                    sh_l[sg * n + j] = l[j] * w
                for c in range(vpl):
                    for e in range(W):
                        sh_o[(sg * n + j) * D + (c * LK + sub) * W + e] = o[j][W * c + e] * w
        pc.barrier()
        inv = pc.local_invocation_index()
        first = split * R + bkv * n                       # this chunk's rows
        for i in range(per_inv):
            idx = inv + i * WG                            # 4 dimensions of a row
            if n * D4 % WG == 0 or idx < n * D4:
                acc = [sh_o[idx * 4 + e] for e in range(4)]
                for g2 in range(1, subgroups):
                    acc = [acc[e] + sh_o[g2 * n * D + idx * 4 + e] for e in range(4)]
                Part[first * D4 + idx] = pc.make_vector(acc)
        if inv < n:
            tot = f32(0.0)
            b = sh_m[inv]
            for g2 in range(subgroups):
                tot = tot + sh_l[g2 * n + inv]
                b = pc.max(b, sh_m[g2 * n + inv])
            M[first + inv] = b
            L[first + inv] = tot
        if merge:               # the last workgroup of the head to count itself merges
            pc.barrier(memory="device")
            if inv == 0:
                done[0] = pc.atomic.add(Count, bkv, u32(1), semantics="acq_rel")
            pc.barrier(memory="device")
            if done[0] == pc.num_workgroups.x - 1:
                merge_chunks(Part, M, L, O, LSE, [bkv * n + j for j in range(n)], R,
                             pc.num_workgroups.x, inv, WG, G, D, merge_unroll, OutEl, sh_m,
                             sh_l, sh_o)
                if inv == 0:
                    pc.atomic.exchange(Count, bkv, u32(0))

    if phases:
        @pc.kernel(workgroup_size=WG, subgroup_size=S)
        def attention_decode_phases(Q: pc.ReadBuffer[V4], K: pc.ReadBuffer[KT],
                                    V: pc.ReadBuffer[KT], Part: pc.Buffer[F4],
                                    M: pc.Buffer[f32], L: pc.Buffer[f32],
                                    O: pc.WriteBuffer[OutEl], LSE: pc.WriteBuffer[f32], Skv: u32,
                                    chunk: u32, scale: f32, R: u32, splits: u32, phase: u32):
            sh_m, sh_l, sh_o = shared_arrays()
            if phase == 0:
                body(Q, K, V, Part, M, L, None, None, None, Skv, chunk, scale, sh_m, sh_l, sh_o)
            else:
                merge_chunks(Part, M, L, O, LSE, [pc.workgroup_id.x], R, splits,
                             pc.local_invocation_index(), WG, G1, D, merge_unroll, OutEl, sh_m,
                             sh_l, sh_o, cols=C4, col0=pc.workgroup_id.y * C4)
        return attention_decode_phases

    if merge:
        @pc.kernel(workgroup_size=WG, subgroup_size=S)
        def attention_decode_merged(Q: pc.ReadBuffer[V4], K: pc.ReadBuffer[KT],
                                    V: pc.ReadBuffer[KT], Part: pc.Buffer[F4],
                                    M: pc.Buffer[f32], L: pc.Buffer[f32], Count: pc.Buffer[u32],
                                    O: pc.WriteBuffer[OutEl], LSE: pc.WriteBuffer[f32], Skv: u32,
                                    chunk: u32, scale: f32):
            body(Q, K, V, Part, M, L, Count, O, LSE, Skv, chunk, scale, *shared_arrays())
        return attention_decode_merged

    @pc.kernel(workgroup_size=WG, subgroup_size=S)
    def attention_decode_vector(Q: pc.ReadBuffer[V4], K: pc.ReadBuffer[KT], V: pc.ReadBuffer[KT],
                                Part: pc.WriteBuffer[F4], M: pc.WriteBuffer[f32],
                                L: pc.WriteBuffer[f32], Skv: u32, chunk: u32, scale: f32):
        body(Q, K, V, Part, M, L, None, None, None, Skv, chunk, scale, *shared_arrays())
    return attention_decode_vector


@pc.func
def groups_max(sh, vals: list, write, slot, count: int) -> list:
    """The largest of `count` groups' values per row, in every invocation: each group's
    values (`vals`, one per row) are published by its invocation where `write` into
    sh[slot * rows + row], then, after a barrier, read back and compared."""
    n = len(vals)
    if write:
        for j in range(n):
            sh[slot * n + j] = vals[j]
    pc.barrier()
    out = []
    for j in range(n):
        b = sh[j]
        for g2 in range(1, count):
            b = pc.max(b, sh[g2 * n + j])
        out.append(b)
    return out


@pc.func
def merge_chunks(Part, M, L, O, LSE, rows: list, R, splits, inv, WG: int, G: int,
                 head_dim: int, unroll: int, OutEl, sh_m, sh_l, sh_o, exp2: bool = True,
                 cols: int | None = None, col0=0) -> None:
    """The merge of the chunks of `rows` (row indices of O) by a workgroup of WG invocations:
    invocation inv takes the 4-dimension column groups c, c + WG, ... (c = inv % (head_dim /
    4); more than one only where WG < head_dim / 4) of every row, and where WG >= G · head_dim
    / 4, group g = inv // (head_dim / 4) < G takes chunks g, g + G, ... (invocations past the
    G groups only reach the barriers). Each folds its chunks (`unroll` loaded before the first
    is used; all rows' loads of a step issued together) into (maximum, sum, output) with the
    online rescaling, and the G groups merge through shared memory (sh_m, sh_l: G * rows,
    sh_o: G * rows * head_dim f32). O = output / sum, LSE = (maximum + log2 sum) · ln 2 —
    the maxima and sums in base 2; with exp2=False in base e: weights exp(m - M), LSE =
    maximum + log sum. `cols`, `col0`: the workgroup merges only the `cols` 4-dimension
    column groups from `col0` (all of them by default); LSE is written where col0 is 0."""
    D4, n, U = head_dim // 4, len(rows), unroll
    C4 = D4 if cols is None else cols                 # the column groups merged here
    ex = pc.exp2 if exp2 else pc.exp
    cs = [inv % C4 + k * WG for k in range(max(1, C4 // WG))]     # this invocation's columns
    g = inv // C4
    active = g < G
    start = pc.select(active, g, splits)              # the groups past G take no chunk
    lowest = f32(start_max(exp2))                     # base e: any finite maximum
    big, tot = [lowest] * n, [f32(0.0)] * n
    acc = [[[f32(0.0)] * 4 for _ in cs] for _ in range(n)]
    for s0 in pc.range(start, splits, G * U):
        ss = [pc.min(s0 + u * G, splits - 1) for u in range(U)]            # clamped
        ok = [s0 + u * G < splits for u in range(U)]
        ms = [[pc.select(ok[u], M[ss[u] * R + r], lowest) for u in range(U)] for r in rows]
        ls = [[L[s * R + r] for s in ss] for r in rows]
        ps = [[[Part[(s * R + r) * D4 + col0 + c] for c in cs] for s in ss] for r in rows]
        for j in range(n):
            b = big[j]
            for x in ms[j]:
                b = pc.max(b, x)
            a = ex(big[j] - b)
            ws = [pc.select(ok[u], ex(ms[j][u] - b), f32(0.0)) for u in range(U)]
            t = tot[j] * a
            vals = [[x * a for x in col] for col in acc[j]]
            for u in range(U):
                t = pc.fma(ws[u], ls[j][u], t)
                # a clamped step past the last chunk adds nothing: selected out rather than
                # weighted by 0, which would make an infinite output (an inf in V) NaN
                vals = [[pc.select(ok[u], pc.fma(ws[u], ps[j][u][k][e], vals[k][e]),
                                   vals[k][e]) for e in range(4)] for k in range(len(cs))]
            tot[j], acc[j], big[j] = t, vals, b
    first = inv % C4 == 0 if C4 <= WG else inv == 0   # one invocation per group
    top = groups_max(sh_m, big, active and first, g, G)
    if active:
        for j in range(n):
            w = ex(big[j] - top[j])
            if first:
                sh_l[g * n + j] = tot[j] * w
            for k, c in enumerate(cs):
                for e in range(4):
                    sh_o[(g * n + j) * 4 * C4 + c * 4 + e] = acc[j][k][e] * w
    pc.barrier()
    if g == 0:
        for j in range(n):
            total = sh_l[j]
            for g2 in range(1, G):
                total = total + sh_l[g2 * n + j]
            for c in cs:
                for e in range(4):
                    x = sh_o[j * 4 * C4 + c * 4 + e]
                    for g2 in range(1, G):
                        x = x + sh_o[(g2 * n + j) * 4 * C4 + c * 4 + e]
                    O[rows[j] * head_dim + (col0 + c) * 4 + e] = OutEl(x / total)
            if first:
                if col0 == 0:
                    LSE[rows[j]] = (top[j] + pc.log2(total)) * f32(LN2) if exp2 else \
                        top[j] + pc.log(total)


def check_merge_columns(name: str, head_dim: int, columns,
                        option: str = "merge_columns") -> None:
    D4 = head_dim // 4
    if not isinstance(columns, int) or isinstance(columns, bool) or columns < 1 or \
            columns & (columns - 1) or D4 % columns:
        raise ValueError(f"{name}: {option} must be a power of two dividing head_dim / 4 "
                         f"= {D4}, got {columns!r}")


def _check_merge(name: str, head_dim: int, out: str, unroll: int) -> None:
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"{name}: head_dim must be one of {HEAD_DIMS}, got {head_dim!r}")
    if out not in OUT:
        raise ValueError(f"{name}: out must be 'f16' or 'f32', got {out!r}")
    if not isinstance(unroll, int) or isinstance(unroll, bool) or unroll < 1:
        raise ValueError(f"{name}: merge unroll must be an int >= 1, got {unroll!r}")


@functools.cache
def attention_merge(head_dim: int = 128, out: str = "f16", invocations: int | None = None,
                    unroll: int = 4, exp2: bool = True):
    """Merges the chunks of the split-KV decode kernels (`attention_decode_vector`, and
    `attention_decode` with exp2=False unless its Softmax has exp2): for each of the R rows,
    O = Σ 2^(M_s - M) Part_s / Σ 2^(M_s - M) L_s with M the largest M_s, and LSE = (M + log2
    of that sum) · ln 2 (exp2=False: maxima and sums in base e, O = Σ e^(M_s - M) Part_s /
    Σ e^(M_s - M) L_s, LSE = M + log of that sum). Parameters: Part (splits, R, head_dim), M,
    L (splits, R) f32; O (R, head_dim) of `out`, LSE (R) f32; then R and splits. One
    workgroup per row, the grid is R; its `invocations` (by default the largest multiple of
    head_dim / 4 up to `MERGE_INVOCATIONS`) take 4 dimensions each, so invocations /
    (head_dim / 4) groups of them share the chunks (`merge_chunks`)."""
    if not isinstance(exp2, bool):
        raise ValueError(f"attention_merge: exp2 must be a bool, got {exp2!r}")
    _check_merge("attention_merge", head_dim, out, unroll)
    D4 = head_dim // 4
    if invocations is None:
        invocations = MERGE_INVOCATIONS // D4 * D4
    if not isinstance(invocations, int) or invocations < D4 or invocations % D4 or \
            invocations > 1024:
        raise ValueError(f"attention_merge: invocations must be a multiple of head_dim / 4 = "
                         f"{D4} of at most 1024, got {invocations!r}")
    G = invocations // D4
    OutEl = OUT[out]
    F4 = pc.vec(f32, 4)

    @pc.kernel(workgroup_size=invocations)
    def attention_merge(Part: pc.ReadBuffer[F4], M: pc.ReadBuffer[f32], L: pc.ReadBuffer[f32],
                        O: pc.WriteBuffer[OutEl], LSE: pc.WriteBuffer[f32], R: u32, splits: u32):
        sh_m, sh_l, sh_o = pc.shared(f32, G), pc.shared(f32, G), pc.shared(f32, G * head_dim)
        merge_chunks(Part, M, L, O, LSE, [pc.workgroup_id.x], R, splits,
                     pc.local_invocation_index(), invocations, G, head_dim, unroll, OutEl, sh_m,
                     sh_l, sh_o, exp2)
    return attention_merge


def default_splits(keys: int, kv_rows: int, streams: int, unroll: int,
                   waves: int = DecodeConfig.waves, sms: int = DecodeConfig.sms,
                   long_chunk: int = DecodeConfig.long_chunk) -> int:
    """Chunks of keys per K/V head: about `waves` workgroups per SM over the kv_rows = batch ·
    kv_heads heads, more (up to twice as many) where the chunks would be longer than
    `long_chunk` keys, and no chunk shorter than one iteration of the workgroup (streams ·
    unroll keys)."""
    per_iter = streams * unroll
    base = -(-waves * sms // kv_rows)
    return max(1, min(-(-keys // per_iter), max(base, min(2 * base, -(-keys // long_chunk)))))


def default_subgroups(keys: int, kv_rows: int, waves: int = DecodeConfig.waves,
                      sms: int = DecodeConfig.sms) -> int:
    """Subgroups per workgroup of the vector decode: `DecodeConfig.short_subgroups` where the
    base splits (about `waves` workgroups per SM over the kv_rows heads) leave chunks of at
    most `DecodeConfig.short_chunk` keys, else `DecodeConfig.subgroups`. (The caller halves
    it until the stream merge fits shared memory.)"""
    base = -(-waves * sms // kv_rows)
    short = -(-keys // base) <= DecodeConfig.short_chunk
    return DecodeConfig.short_subgroups if short else DecodeConfig.subgroups


def chunk_of(keys: int, splits: int, streams: int, unroll: int) -> tuple[int, int]:
    """(keys per chunk, a multiple of streams · unroll; the splits that chunk needs)."""
    per_iter = streams * unroll
    chunk = -(-keys // (splits * per_iter)) * per_iter
    return chunk, -(-keys // chunk)
