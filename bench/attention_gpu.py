"""GPU flash attention on Vulkan (pycoop.kernels.attention) against torch's
scaled_dot_product_attention measured in the same run.

- prefill: batch 4 x 32 heads x 4096 queries and keys, head dim 128 and 64, causal and not,
  over several variants (tile shape Br x Bc, invocations, workgroup or subgroup scope, the
  Softmax options exp2 / lazy_sum / prefetch, fp mode);
- llama.cpp's shape: 512 queries x 4096 and 16384 keys, 32 heads over 8 K/V heads, head dim
  128, an f16 mask (torch with the same mask, and unmasked);
- long: few query tiles over long keys (256 queries x 32768 keys, 8 heads over 2, head dim
  128: 16 workgroups unsplit), where `attention` splits the keys by default
  (`prefill_splits`; variant "default s1" keeps them whole);
- decode: 1 query, 32 heads over 8 K/V heads, 8192 and 32768 keys, head dim 128 (split-KV
  kernel + merge kernel, shown apart; the time compared is both recorded as one launch graph
  and replayed, first start to last end), over several variants ("vec ...": the vector decode
  without cooperative matrices, `--decode-variants vector` times all of those), with the GB/s
  of K + V; torch timed as a CUDA graph replay.

f16 inputs, f32 accumulation, f16 output, on device arrays (pc.Array: no host copies between
launches). Each pycoop configuration runs --repeat times back
to back on the device after unmeasured warm-up runs and reports its fastest run; torch is timed
the same way with CUDA events. The error column is the largest absolute difference from an
f32 reference on the first two heads (torch's own f16 kernel's error beside it).

    python3 bench/attention_gpu.py [--repeat 10] [--quick] [--cases prefill,llama,long,decode]
                                   [--variants NAME ...] [--decode-variants NAME ...]
                                   [--head-dims 128 64] [--list]
"""
from __future__ import annotations

import argparse
import subprocess

import numpy as np

# before pycoop: the benchmark times the unchecked kernels (bench/unchecked.py)
import unchecked  # noqa: E402,F401

import pycoop as pc  # noqa: E402
from pycoop.kernels import Softmax, attention  # noqa: E402
from warmup import warm_gpu  # noqa: E402

_ALL = Softmax(exp2=True, lazy_sum=True, prefetch=True)
_TUNED_PREFETCH = Softmax(exp2=True, row_width=32, prefetch=True)   # the default, prefetching


def _wg(Br=128, Bc=64, inv=256, sm=None, fp="exact"):
    return {"Br": Br, "Bc": Bc, "invocations": inv, "scope": "workgroup", "softmax": sm, "fp": fp}


def _sg(Br, Bc, inv, sm=_ALL, fp="exact"):
    return {"Br": Br, "Bc": Bc, "invocations": inv, "scope": "subgroup", "softmax": sm, "fp": fp}


def _st(Br, Bc, fp="exact"):
    return {"Br": Br, "Bc": Bc, "invocations": 2 * Br, "scope": "staged", "fp": fp}


# name -> attention() keyword arguments of the prefill path ("default": attention's own,
# whose tile depends on the head dim: `prefill_invocations`); "wg" = workgroup scope, "sg" =
# subgroup scope (BrxBc/invocations; a subgroup of 32 takes Br * 32 / invocations rows);
# no option named: the tuned default softmax (exp2, row maxima and sums 32 columns wide), "e" =
# Softmax() (base e, the row state Bc wide), "layout" = the mask loaded as an accumulator
# through a tensor layout (masked cases; the default reads it as uvec4 words through shared
# memory), "every" = every mask block loaded (the default skips the blocks of only -inf and
# leaves out those of only zeros), "all" = exp2 + lazy_sum + prefetch, "narrow" =
# row maxima and sums 32 columns wide, "tuned prefetch" = the default softmax loading the next
# block's K and V before this block's softmax; "st" =
# the staged kernel (16 x 16 subgroup-scope pieces, K and V in shared memory, 16 rows per
# subgroup: Br x Bc, 2 Br invocations); "sN" = the keys split into N chunks over grid z,
# merged by attention_merge (split-KV prefill)
PREFILL_VARIANTS = {
    "default": {},
    "default s1": {"splits": 1},
    "default s2": {"splits": 2},
    "default s4": {"splits": 4},
    "wg 128x32/256 s2": _wg(Bc=32) | {"splits": 2},
    "wg 128x32/256 s4": _wg(Bc=32) | {"splits": 4},
    "wg 64x64/128 s2": _wg(64, 64, 128) | {"splits": 2},
    "wg 128x64/256": _wg(),
    "wg 128x64/256 e": _wg(sm=Softmax()),
    "wg 128x64/256 layout": dict(_wg(), mask_loads="layout"),
    "wg 128x64/256 every": dict(_wg(), mask_blocks=False),
    "wg 128x64/256 layout every": dict(_wg(), mask_loads="layout", mask_blocks=False),
    "wg 128x64/256 exp2": _wg(sm=Softmax(exp2=True)),
    "wg 128x64/256 lazy": _wg(sm=Softmax(lazy_sum=True)),
    "wg 128x64/256 prefetch": _wg(sm=Softmax(prefetch=True)),
    "wg 128x64/256 all": _wg(sm=_ALL),
    "wg 128x64/256 narrow": _wg(sm=Softmax(row_width=32)),
    "wg 128x64/256 narrow exp2": _wg(sm=Softmax(exp2=True, row_width=32)),
    "wg 128x64/256 narrow prefetch": _wg(sm=Softmax(prefetch=True, row_width=32)),
    "wg 128x64/256 tuned prefetch": _wg(sm=_TUNED_PREFETCH),
    "wg 128x64/128 tuned prefetch": _wg(inv=128, sm=_TUNED_PREFETCH),
    "wg 128x64/256 all fast": _wg(sm=_ALL, fp="fast"),
    "wg 128x32/256": _wg(Bc=32),
    "wg 128x128/256": _wg(Bc=128),
    "wg 64x64/128": _wg(64, 64, 128),
    "wg 64x64/256": _wg(64, 64, 256),
    "wg 64x128/256": _wg(64, 128, 256),
    "wg 128x64/128": _wg(inv=128),
    "wg 256x64/256": _wg(256),
    "wg 128x64/256 fast": _wg(fp="fast"),
    "wg 128x32/256 all": _wg(Bc=32, sm=_ALL),
    "wg 128x128/256 all": _wg(Bc=128, sm=_ALL),
    "wg 64x64/128 all": _wg(64, 64, 128, sm=_ALL),
    "sg 64x16/128 all": _sg(64, 16, 128),
    "sg 64x32/128 all": _sg(64, 32, 128),
    "sg 64x64/128 all": _sg(64, 64, 128),
    "sg 128x16/256 all": _sg(128, 16, 256),
    "sg 128x32/256 all": _sg(128, 32, 256),
    "sg 128x16/128 all": _sg(128, 16, 128),
    "sg 128x32/128 all": _sg(128, 32, 128),
    "sg 64x32/128 all fast": _sg(64, 32, 128, fp="fast"),
    "st 128x64": _st(128, 64),
    "st 64x64": _st(64, 64),
    "st 128x32": _st(128, 32),
    "st 64x32": _st(64, 32),
    "st 256x64": _st(256, 64),
    "st 128x64 fast": _st(128, 64, fp="fast"),
}
QUICK_PREFILL = ["default", "wg 128x64/256 all", "sg 64x32/128 all"]


def _dwg(rows=32, Bc=64, inv=128, splits=None, sm=None, fp="exact", unroll=4):
    return {"decode_rows": rows, "decode_Bc": Bc, "decode_invocations": inv,
            "decode_scope": "workgroup", "splits": splits, "softmax": sm, "fp": fp,
            "merge_unroll": unroll, "decode_kernel": "coopmat"}


def _dsg(Bc=32, inv=128, splits=None, sm=_ALL, fp="exact", rows=16):
    return {"decode_rows": rows, "decode_Bc": Bc, "decode_invocations": inv,
            "decode_scope": "subgroup", "splits": splits, "softmax": sm, "fp": fp,
            "decode_kernel": "coopmat"}


# name -> attention() keyword arguments of the decode path (splits None: the default; "sN": N
# splits; the chunks merged by attention_merge, 4 loaded ahead, "u8": 8)
DECODE_VARIANTS = {
    "default": {},                  # attention()'s own choice (the vector decode)
    "wg r32 Bc64/128": _dwg(),
    "wg r32 Bc64/128 all": _dwg(sm=_ALL),
    "wg r32 Bc64/128 narrow": _dwg(sm=Softmax(row_width=32)),
    "wg r32 Bc64/128 u8": _dwg(unroll=8),
    "wg r32 Bc64/128 narrow u8": _dwg(sm=Softmax(row_width=32), unroll=8),
    "wg r32 Bc64/128 s32 u8": _dwg(splits=32, unroll=8),
    "wg r32 Bc64/128 all s32": _dwg(splits=32, sm=_ALL),
    "wg r32 Bc64/128 all s128": _dwg(splits=128, sm=_ALL),
    "wg r32 Bc128/128 all s32": _dwg(Bc=128, splits=32, sm=_ALL),
    "sg r16 Bc32/128 all": _dsg(),
    "sg r16 Bc32/128 all s128": _dsg(splits=128),
    "sg r16 Bc32/128 all s512": _dsg(splits=512),
    "sg r16 Bc16/128 all": _dsg(Bc=16),
    "sg r16 Bc64/128 all": _dsg(Bc=64),
    "sg r16 Bc32/64 all": _dsg(inv=64),
    "sg r16 Bc32/256 all": _dsg(inv=256),
    "sg r16 Bc32/128 all fast": _dsg(fp="fast"),
}


def _dvec(subgroups=None, unroll=4, splits=None, lanes=None, merge_unroll=4, prefetch=False,
          merge="launch", width=4, columns=1, reduce="auto"):
    return {"decode_kernel": "vector", "decode_merge_columns": columns, "decode_reduce": reduce,
            "decode_subgroups": subgroups, "decode_unroll": unroll,
            "splits": splits, "decode_lanes": lanes, "merge_unroll": merge_unroll,
            "decode_prefetch": prefetch, "decode_merge": merge, "decode_width": width}


# the vector decode (attention_decode_vector + attention_merge): "vec" = the first defaults
# (4 subgroups, 4 keys per stream and iteration, about 2 workgroups per SM, the merge as a
# second launch); "gN" N subgroups, "uN" N keys per iteration, "sN" N splits, "lN" N lanes per
# key, "mN" merge unroll, "p" the next keys' K and V loaded before the current keys' math
# ("pN": N iterations ahead), "w" the chunks merged by the last workgroup of each head (one
# launch), "ph" both steps in one kernel dispatched twice (one pipeline), "cN" its merge
# dispatch with each row's dimensions over N workgroups, "x8" 16-byte K and V loads (8
# halves), "bf" the scores summed by a butterfly in every lane (not the reduce-scatter).
# "vec p u2 x8 ph m2" are the defaults.
DECODE_VARIANTS.update({
    "vec": _dvec(),
    "vec s16": _dvec(splits=16),
    "vec s64": _dvec(splits=64),
    "vec s128": _dvec(splits=128),
    "vec u2": _dvec(unroll=2),
    "vec u8": _dvec(unroll=8),
    "vec g2": _dvec(subgroups=2),
    "vec g8": _dvec(subgroups=8),
    "vec g8 s64": _dvec(subgroups=8, splits=64),
    "vec l32": _dvec(lanes=32),
    "vec l8": _dvec(lanes=8),
    "vec l8 u2": _dvec(lanes=8, unroll=2),
    "vec l8 s64": _dvec(lanes=8, splits=64),
    "vec l4 u2": _dvec(lanes=4, unroll=2),
    "vec p": _dvec(prefetch=True),
    "vec p u2": _dvec(prefetch=True, unroll=2),
    "vec p s16": _dvec(prefetch=True, splits=16),
    "vec p g2": _dvec(prefetch=True, subgroups=2),
    "vec p u1": _dvec(prefetch=True, unroll=1),
    "vec p u2 s64": _dvec(prefetch=True, unroll=2, splits=64),
    "vec p u2 g8": _dvec(prefetch=True, unroll=2, subgroups=8),
    "vec m1": _dvec(merge_unroll=1),
    "vec p2 u2": _dvec(prefetch=2, unroll=2),
    "vec p3 u2": _dvec(prefetch=3, unroll=2),
    "vec p2 u1": _dvec(prefetch=2, unroll=1),
    "vec p2 u2 s64": _dvec(prefetch=2, unroll=2, splits=64),
    "vec p u2 s128": _dvec(prefetch=True, unroll=2, splits=128),
    "vec p u2 w": _dvec(prefetch=True, unroll=2, merge="workgroup"),
    "vec p u2 w m2": _dvec(prefetch=True, unroll=2, merge="workgroup", merge_unroll=2),
    "vec p u2 w m8": _dvec(prefetch=True, unroll=2, merge="workgroup", merge_unroll=8),
    "vec p u2 w s16": _dvec(prefetch=True, unroll=2, merge="workgroup", splits=16),
    "vec p u2 w s64": _dvec(prefetch=True, unroll=2, merge="workgroup", splits=64),
    "vec p u2 w s128": _dvec(prefetch=True, unroll=2, merge="workgroup", splits=128),
    "vec p u2 s48": _dvec(prefetch=True, unroll=2, splits=48),
    "vec p u2 s80": _dvec(prefetch=True, unroll=2, splits=80),
    "vec p u2 s96": _dvec(prefetch=True, unroll=2, splits=96),
    "vec p u2 g8 s32": _dvec(prefetch=True, unroll=2, subgroups=8, splits=32),
    "vec p u2 g2 s128": _dvec(prefetch=True, unroll=2, subgroups=2, splits=128),
    "vec p u2 x8": _dvec(prefetch=True, unroll=2, width=8),
    "vec p u2 x8 l8": _dvec(prefetch=True, unroll=2, width=8, lanes=8),
    "vec p u4 x8": _dvec(prefetch=True, unroll=4, width=8),
    "vec p u1 x8": _dvec(prefetch=True, unroll=1, width=8),
    "vec p2 u2 x8": _dvec(prefetch=2, unroll=2, width=8),
    "vec p u2 x8 s64": _dvec(prefetch=True, unroll=2, width=8, splits=64),
    "vec p u2 x8 g4": _dvec(prefetch=True, unroll=2, width=8, subgroups=4),
    "vec p u2 x8 g8": _dvec(prefetch=True, unroll=2, width=8, subgroups=8),
    "vec p u2 x8 s24": _dvec(prefetch=True, unroll=2, width=8, splits=24),
    "vec p u2 x8 s48": _dvec(prefetch=True, unroll=2, width=8, splits=48),
    "vec p u2 x8 s96": _dvec(prefetch=True, unroll=2, width=8, splits=96),
    "vec p u2 x8 w": _dvec(prefetch=True, unroll=2, width=8, merge="workgroup"),
    "vec p u2 x8 w m2": _dvec(prefetch=True, unroll=2, width=8, merge="workgroup",
                              merge_unroll=2),
    "vec p u2 x8 ph m2": _dvec(prefetch=True, unroll=2, width=8, merge="phase", merge_unroll=2),
    **{f"vec p u2 x8 ph m2 c{c}": _dvec(prefetch=True, unroll=2, width=8, merge="phase",
                                         merge_unroll=2, columns=c) for c in (2, 4, 8)},
    **{f"vec p u2 x8 ph m{m}" + (f" c{c}" if c else ""): _dvec(prefetch=True, unroll=2, width=8,
                                                      merge="phase", merge_unroll=m,
                                                      columns=c or 1)
       for m in (4, 8) for c in (0, 2, 4)},
    **{f"vec p u2 x8 ph m2 s{n}": _dvec(prefetch=True, unroll=2, width=8, merge="phase",
                                         merge_unroll=2, splits=n) for n in (32, 96, 128)},
    **{f"vec p u2 x8 ph m2 g{n}": _dvec(prefetch=True, unroll=2, width=8, merge="phase",
                                         merge_unroll=2, subgroups=n) for n in (2, 8)},
    # fewer registers per key in flight: one key per iteration loaded 2-4 iterations ahead
    # (16-byte loads), or 32 lanes per key (8-byte loads: half the q and o registers a lane)
    **{f"vec p{a} u1 x8 ph m2": _dvec(prefetch=a, unroll=1, width=8, merge="phase",
                                       merge_unroll=2) for a in (2, 3, 4)},
    **{f"vec p{a} u{u} ph m2 l32": _dvec(prefetch=a, unroll=u, merge="phase", merge_unroll=2,
                                          lanes=32) for a in (1, 2) for u in (2, 4)},
    **{f"vec p u{u} x8 ph m2 l{n}": _dvec(prefetch=True, unroll=u, width=8, merge="phase",
                                           merge_unroll=2, lanes=n)
       for n in (4, 8) for u in (1, 2)},
    "vec p2 u2 x8 ph m2": _dvec(prefetch=2, unroll=2, width=8, merge="phase", merge_unroll=2),
    "vec p u4 x8 ph m2": _dvec(prefetch=True, unroll=4, width=8, merge="phase", merge_unroll=2),
    "vec p u1 x8 ph m2": _dvec(prefetch=True, unroll=1, width=8, merge="phase", merge_unroll=2),
    "vec p u1 x8 ph": _dvec(prefetch=True, unroll=1, width=8, merge="phase"),
    "vec p u2 ph": _dvec(prefetch=True, unroll=2, merge="phase"),
    "vec p u2 x8 ph": _dvec(prefetch=True, unroll=2, width=8, merge="phase"),
    "vec p u2 ph m2": _dvec(prefetch=True, unroll=2, merge="phase", merge_unroll=2),
    "vec p u2 ph m8": _dvec(prefetch=True, unroll=2, merge="phase", merge_unroll=8),
    **{f"vec p{a} u{u} x8 ph m2 bf": _dvec(prefetch=a, unroll=u, width=8, merge="phase",
                                          merge_unroll=2, reduce="butterfly")
       for a in (1, 2) for u in (1, 2, 4)},
})
QUICK_DECODE = ["wg r32 Bc64/128", "sg r16 Bc32/128 all", "vec"]
VECTOR_DECODE = [k for k in DECODE_VARIANTS if k.startswith("vec")]


def gpu_state() -> str:
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
        return q.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "nvidia-smi unavailable"


def torch_ms(fn, repeat: int, graph: bool = False) -> float:
    """The fastest of `repeat` timed runs of fn (after warm-up), optionally as a CUDA graph."""
    import torch
    for _ in range(20):
        fn()
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        fn = g.replay
        for _ in range(20):
            fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(repeat)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return min(s.elapsed_time(e) for s, e in events)


def sdpa(q, k, v, mask, causal):
    import torch.nn.functional as F
    if k.shape[1] != q.shape[1]:
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)


def sdpa_gqa(q, k, v, mask, causal):
    """torch's own GQA (enable_gqa) when it has it, else K/V expanded once beforehand."""
    import torch.nn.functional as F
    try:
        F.scaled_dot_product_attention(q[:, :, :1], k[:, :, :1], v[:, :, :1], enable_gqa=True)
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                      enable_gqa=True)
    except TypeError:
        return sdpa(q, k, v, mask, causal)


def reference_error(out, Q, K, V, mask, causal, heads: int = 2) -> float:
    """Largest |out - f32 reference| over the first `heads` query heads of batch 0 (torch, f32)."""
    import torch
    g = Q.shape[1] // K.shape[1]
    q = torch.from_numpy(Q[:1, :heads].astype(np.float32)).cuda()
    k = torch.from_numpy(K[:1, :1 + (heads - 1) // g].astype(np.float32)).cuda()
    v = torch.from_numpy(V[:1, :1 + (heads - 1) // g].astype(np.float32)).cuda()
    k, v = k.repeat_interleave(g, 1)[:, :heads], v.repeat_interleave(g, 1)[:, :heads]
    m = None if mask is None else torch.from_numpy(mask.astype(np.float32)).cuda()
    s = q @ k.transpose(-1, -2) / np.sqrt(q.shape[-1])
    if m is not None:
        s = s + m
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device="cuda").tril(), -np.inf)
    ref = torch.softmax(s, -1) @ v
    got = torch.from_numpy(np.asarray(out[:1, :heads], np.float32)).cuda()
    return float((got - ref).abs().max())


def operands(B, H, Hkv, Sq, Skv, D, masked, seed=0):
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((B, H, Sq, D), np.float32).astype(np.float16)
    K = rng.standard_normal((B, Hkv, Skv, D), np.float32).astype(np.float16)
    V = rng.standard_normal((B, Hkv, Skv, D), np.float32).astype(np.float16)
    mask = None
    if masked:           # llama.cpp-like: a causal block structure for the last queries, as f16
        mask = np.where(np.arange(Skv)[None, :] <= Skv - Sq + np.arange(Sq)[:, None], 0.0,
                        -np.inf).astype(np.float16)
    return Q, K, V, mask


def row(name: str, what: str, value: float, ref: float, err: float, terr: float,
        extra: str = "") -> None:
    ratio = value / ref if what.endswith("TFLOP/s") else ref / value     # > 1: pycoop ahead
    print(f"{name:<34} {what:<38} {value:>10.1f} {ref:>10.1f} {ratio:>7.2f}"
          f" {err:>9.1e} {terr:>9.1e} {extra}", flush=True)


def run_variant(name, label, args, kw, repeat, warmup):
    """attention(*args, **kw) after `warmup` runs: the result of `repeat` timed runs, or None
    (printed) when the device rejects the configuration."""
    try:
        attention(*args, backend="vulkan", repeat=warmup, **kw)
        return attention(*args, backend="vulkan", repeat=repeat, **kw)
    except Exception as e:         # a configuration the device rejects: report it and go on
        print(f"{name:<34} {label}: {type(e).__name__}: {str(e)[:160]}", flush=True)
        return None


def first_heads(out, heads: int = 2) -> np.ndarray:
    return np.asarray(out[0].numpy() if isinstance(out, pc.Array) else out[0])[None, :heads]


def prefill_case(name, B, H, Hkv, Sq, Skv, D, causal, masked, variants, repeat, warmup):
    import torch
    Q, K, V, mask = operands(B, H, Hkv, Sq, Skv, D, masked)
    flop = 4 * B * H * Sq * Skv * D * (0.5 if causal else 1.0)
    q, k, v = (torch.from_numpy(a).cuda() for a in (Q, K, V))
    m = None if mask is None else torch.from_numpy(mask).cuda()[None, None]
    t_ms = torch_ms(sdpa_gqa(q, k, v, m, causal), repeat)
    t_out = sdpa_gqa(q, k, v, m, causal)().cpu().numpy()
    terr = reference_error(t_out, Q, K, V, mask, causal)
    t_unmasked = flop / torch_ms(sdpa_gqa(q, k, v, None, causal), repeat) / 1e9 if masked else None
    ref = flop / t_ms / 1e9
    del q, k, v, m
    torch.cuda.empty_cache()
    args = [pc.asarray(a, backend="vulkan") for a in (Q, K, V)]
    dmask = None if mask is None else pc.asarray(mask, backend="vulkan")
    best = (0.0, "")
    for label in variants:
        r = run_variant(name, label, args, dict(PREFILL_VARIANTS[label], mask=dmask,
                                                causal=causal), repeat, warmup)
        if r is None:
            continue
        tf = flop / r.time_ms / 1e9
        best = max(best, (tf, label))
        extra = f"(torch unmasked {t_unmasked:.1f})" if t_unmasked else ""
        if len(r.kernel_ms) > 1:        # the mask's pre-pass, the prefill, the splits' merge
            extra += " kernels " + " + ".join(f"{t * 1e3:.1f}" for t in r.kernel_ms) + " µs"
        row(name, f"{label} TFLOP/s", tf, ref,
            reference_error(first_heads(r.out), Q, K, V, mask, causal), terr, extra)
    return best, ref


def graph_us(args, kw, repeat: int) -> float:
    """Both decode kernels recorded once as a launch graph (`pc.capture`) and replayed: the
    fastest replay's device time, from the first kernel's start to the second's end (the gap
    between them included, as in torch's CUDA graph)."""
    with pc.capture(backend="vulkan") as g:
        attention(*args, backend="vulkan", **kw)
    for _ in range(5):
        g.launch()
    runs = [g.launch() for _ in range(repeat)]
    pc.synchronize()
    us = min(r.times_ms[0] for r in runs) * 1e3
    g.free()
    return us


def decode_case(name, Skv, variants, repeat, warmup, B=1, H=32, Hkv=8, D=128):
    import torch
    Q, K, V, _ = operands(B, H, Hkv, 1, Skv, D, False)
    q, k, v = (torch.from_numpy(a).cuda() for a in (Q, K, V))
    t_ms = torch_ms(sdpa_gqa(q, k, v, None, False), repeat * 10, graph=True)
    terr = reference_error(sdpa_gqa(q, k, v, None, False)().cpu().numpy(), Q, K, V, None, False)
    del q, k, v
    torch.cuda.empty_cache()
    args = [pc.asarray(a, backend="vulkan") for a in (Q, K, V)]
    nbytes = K.nbytes + V.nbytes
    best = (float("inf"), "")
    for label in variants:
        kw = DECODE_VARIANTS[label]
        r = run_variant(name, label, args, kw, repeat * 10, warmup)
        if r is None:
            continue
        try:
            g_us = graph_us(args, kw, repeat * 10)
        except Exception as e:        # report and fall back to the kernels' own times
            print(f"{name:<34} {label}: graph replay failed: {type(e).__name__}: {e}"[:200])
            g_us = float("nan")
        us = r.time_ms * 1e3 if g_us != g_us else g_us
        best = min(best, (us, label))
        row(name, f"{label} µs", us, t_ms * 1e3,
            reference_error(first_heads(r.out), Q, K, V, None, False), terr,
            f"{nbytes / us / 1e3:.0f} GB/s (torch {nbytes / t_ms / 1e6:.0f}); "
            + (f"split-KV {r.kernel_ms[0] * 1e3:.1f} + merge {r.kernel_ms[1] * 1e3:.1f} µs"
               f" (sum {r.time_ms * 1e3:.1f}; graph {g_us:.1f})" if len(r.kernel_ms) == 2 else
               f"one launch {r.time_ms * 1e3:.1f} µs (graph {g_us:.1f})"))
    return best, t_ms * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="batch 1 and fewer variants")
    ap.add_argument("--cases", default="prefill,llama,long,decode",
                    help="comma-separated subset of prefill, llama, long, decode")
    ap.add_argument("--variants", nargs="*", help="prefill variants to time (names as --list)")
    ap.add_argument("--decode-variants", nargs="*", help="decode variants to time")
    ap.add_argument("--llama-variants", nargs="*", help="variants for llama.cpp's shape "
                    "(default: the best of the prefill cases, else the first variant)")
    ap.add_argument("--head-dims", type=int, nargs="*", default=[128, 64])
    ap.add_argument("--list", action="store_true", help="print the variant names and exit")
    a = ap.parse_args()
    if a.list:
        print("prefill:", *PREFILL_VARIANTS, sep="\n  ")
        print("decode:", *DECODE_VARIANTS, sep="\n  ")
        return
    pv = a.variants or (QUICK_PREFILL if a.quick else list(PREFILL_VARIANTS))
    dv = a.decode_variants or (QUICK_DECODE if a.quick else list(DECODE_VARIANTS))
    if dv == ["vector"]:
        dv = VECTOR_DECODE
    for v in pv + (a.llama_variants or []):
        if v not in PREFILL_VARIANTS:
            raise SystemExit(f"unknown prefill variant {v!r} (see --list)")
    for v in dv:
        if v not in DECODE_VARIANTS:
            raise SystemExit(f"unknown decode variant {v!r} (see --list)")
    print(f"device: {gpu_state()}")
    warm_gpu()
    print(f"{'case':<34} {'config':<38} {'pycoop':>10} {'torch':>10} {'ratio':>7} {'err':>9} "
          f"{'torch err':>9}")
    cases = a.cases.split(",")
    B = 1 if a.quick else 4
    goals, winners = [], []
    for D in a.head_dims if "prefill" in cases else []:
        for causal in (False, True):
            name = f"prefill {B}x32x4096 d{D}{' causal' if causal else ''}"
            (best, label), ref = prefill_case(name, B, 32, 32, 4096, 4096, D, causal, False, pv,
                                              a.repeat, a.warmup)
            goals.append((name, best / ref, 0.5, label))
            winners.append(label)
    lv = a.llama_variants or sorted(set(w for w in winners if w)) or pv[:1]
    for Skv in (4096, 16384) if "llama" in cases else []:
        name = f"llama 512q x {Skv}k 32/8 heads mask"
        prefill_case(name, 1, 32, 8, 512, Skv, 128, False, True, lv, a.repeat, a.warmup)
    if "long" in cases:
        prefill_case("long 256q x 32768k 8/2 heads", 1, 8, 2, 256, 32768, 128, False, False,
                     a.llama_variants or ["default", "default s1"], a.repeat, a.warmup)
    for Skv in (8192, 32768) if "decode" in cases else []:
        name = f"decode 1q x {Skv}k 32/8 heads"
        (best, label), ref = decode_case(name, Skv, dv, a.repeat, a.warmup)
        goals.append((name, ref / best, 0.8, label))
    print("\ngoals (pycoop / torch: TFLOP/s ratio for prefill, time ratio torch/pycoop for decode)")
    for name, ratio, goal, label in goals:
        print(f"  {name:<40} {ratio:6.2f} (goal >= {goal}) {'met' if ratio >= goal else 'not met'}"
              f"  [{label}]")


if __name__ == "__main__":
    main()
