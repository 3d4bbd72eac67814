"""Where the attention prefill's time goes: the prefill kernel timed with parts of its online
softmax (or its loads) taken out, and its tiles at each head dim.

Each key block of the prefill loads Kᵀ and V, computes S = Q Kᵀ, the row maxima, the
exponentials, the rescaling of the earlier output and O += P V (`attention_blocks.attend`, in
the loop of `attention_blocks.key_blocks`). This script builds the kernel again with those
replaced:

- "full": the kernel as shipped;
- "gemms": P = S rounded to f16, O += P V (the two products and the loads, no softmax);
- "no_exp": the maxima and the rescaling kept, P = S (no exponentials);
- "no_rescale": the whole softmax, the earlier output not rescaled;
- "no_max": the exponentials against the maxima before the block (no row reduction);
- "no_sums": the softmax without the row sums (the default sums them by P · ones(Bc x 32),
  on the tensor cores: at head dim 64 a fifth of the block's products);
- "sums_by_reduce": the row sums by a row reduction of the f32 probabilities instead;
- "loaded_once" / "gemms_loaded_once": as "full" / "gemms" with Kᵀ and V of the first block
  loaded once before the loop and used for every block (no loads in the loop);
  "k_loaded_once" / "v_loaded_once": only Kᵀ / only V loaded once;
- "tensor_loads" / "gemms_tensor_loads": every block's Kᵀ and V through tensor layouts
  (the kernel reads the blocks inside the sequence by strided loads, 20 % faster on the
  H100);
- "prefetch": the default softmax with `prefetch` (the next block's Kᵀ and V loaded before
  this block's softmax); "q_shared": the query tile kept in shared memory and loaded from
  there for every block's product instead of held in registers through the loop (which may
  leave the registers a prefetch needs); "q_shared_prefetch": both;
- "no_lse": the log-sum-exp neither computed nor stored (what it costs the tile).

With `--causal`, the causal kernels run "full" and the probes of their diagonal blocks
(`--causal-steps`): "edge_plain" scores the blocks on the diagonal without hiding the later
keys (the per-element pass stays, doing nothing); "edge_strided" also loads them by strided
loads instead of through the tensor layout, as the blocks before the diagonal are loaded:
what the causal edge costs; "no_lse": the causal kernel without its log-sum-exp.

Only "full" is attention; the others are timing probes (their results are not checked). The
"gemms" row bounds what any softmax could reach with that tile and its loads on this device,
"gemms_loaded_once" what the products alone reach. Times are the device's (best of 3 x
`--repeat` launches), after a first untimed launch of every kernel (the driver compiles on
first use) and with the GPU kept busy before each one (`warmup.warm_gpu`).

    python3 bench/prefill_parts.py [--head-dims 128 64] [--tiles 128x64/256 128x64/128]
        [--batch 1 --heads 32 --kv-heads 8 --seq 4096]
"""
from __future__ import annotations

import argparse
import importlib
import time

import numpy as np

# before pycoop: the benchmark times the unchecked kernels (bench/unchecked.py)
import unchecked  # noqa: E402,F401

import pycoop as pc  # noqa: E402
from pycoop.kernels import Softmax, attention_prefill  # noqa: E402
from pycoop.kernels import attention_blocks as A    # the online softmax's parts  # noqa: E402
from warmup import vulkan_or_skip, warm_gpu  # noqa: E402

ATT = importlib.import_module("pycoop.kernels.attention")   # the module (the package exports
                                                             # the function of that name)

FULL, KEY_BLOCKS, LOAD_KV = A.attend, A.key_blocks, A.load_kv
LOAD_Q, SCORES, STORE_LSE = A.load_q, A.block_scores, A.store_lse
CAUSAL_SCORE, KV_LOADERS = ATT.causal_score, A.kv_loaders


def gemms(T, sm, k, m, l, o, s, v):
    return m, l, pc.mul_add(pc.nv.convert(s, T.P), v, o)


def no_exp(T, sm, k, m, l, o, s, v):
    m_new = pc.nv.per_element(m, A.larger, pc.nv.reduce(s, "row", "max", result_type=T.Row))
    return m_new, l, pc.mul_add(pc.nv.convert(s, T.P), v, o * A.by_row(m_new, T))


def no_rescale(T, sm, k, m, l, o, s, v):
    m_new, pf, p, alpha = _softmax(T, sm, k, m, s)
    l = l * alpha + pf if sm.lazy_sum else pc.mul_add(p, T.Ones.fill(1.0), l * alpha)
    return m_new, l, pc.mul_add(p, v, o)


def no_max(T, sm, k, m, l, o, s, v):
    pf = pc.nv.per_element(s, A.exp2_scaled, A.widen(m, T.S), k)
    p = pc.nv.convert(pf, T.P)
    return m, l + pf if sm.lazy_sum else pc.mul_add(p, T.Ones.fill(1.0), l), pc.mul_add(p, v, o)


def _softmax(T, sm, k, m, s):
    """The block's maxima, probabilities (f32 and as P) and rescale factors, as `_attend`
    computes them with exp2."""
    m_new = pc.nv.per_element(m, A.larger, pc.nv.reduce(s, "row", "max", result_type=T.Row))
    pf = pc.nv.per_element(s, A.exp2_scaled, A.widen(m_new, T.S), k)
    return m_new, pf, pc.nv.convert(pf, T.P), pc.nv.per_element(m, A.exp2_scaled, m_new, k)


def no_sums(T, sm, k, m, l, o, s, v):
    m_new, _, p, alpha = _softmax(T, sm, k, m, s)
    return m_new, l, pc.mul_add(p, v, o * A.by_row(alpha, T))


def sums_by_reduce(T, sm, k, m, l, o, s, v):
    m_new, pf, p, alpha = _softmax(T, sm, k, m, s)
    l = l * alpha + pc.nv.reduce(pf, "row", "add", result_type=T.Row)
    return m_new, l, pc.mul_add(p, v, o * A.by_row(alpha, T))


@pc.func
def loaded_once(T, sm, k, m, l, o, k_begin, k_end, Bc: int, load, scores, live=None):
    """`attention_blocks.key_blocks` with the first block's Kᵀ and V loaded before the loop and
    used for every block."""
    kt, v = load(k_begin)
    for k0 in pc.range(k_begin, k_end, Bc):
        m, l, o = A.attend(T, sm, k, m, l, o, scores(k0, kt), v)
    return m, l, o


def _once(which: int):
    """A loop over the key blocks with Kᵀ (which = 0) or V (1) of the first block loaded once
    before the loop, the other loaded for every block."""
    @pc.func
    def blocks(T, sm, k, m, l, o, k_begin, k_end, Bc: int, load, scores, live=None):
        first = load(k_begin)[which]
        for k0 in pc.range(k_begin, k_end, Bc):
            kt, v = load(k0)
            kt, v = (first, v) if which == 0 else (kt, first)
            m, l, o = A.attend(T, sm, k, m, l, o, scores(k0, kt), v)
        return m, l, o
    return blocks


def tensor_loads(T, K, V, layout, kt_view, row, Bc: int, D: int, strided: bool = False):
    """Every block's Kᵀ and V through tensor layouts (the kernel reads the blocks inside the
    sequence by strided loads)."""
    return LOAD_KV(T, K, V, layout, kt_view, row, Bc, D)


def q_to_shared(T, Q, layout, row, rows: int, D: int, whole):
    """The query tile copied into shared memory once; `scores_from_shared` loads it from there
    for every block's product, so no register holds it through the softmax."""
    qs = pc.shared(T.Q.component, T.Q.rows * T.Q.cols)
    pc.store(qs, 0, LOAD_Q(T, Q, layout, row, rows, D, whole), T.Q.cols)
    pc.barrier()
    return qs


def scores_from_shared(qs, kt, T, scale, sm, mask=None):
    return SCORES(T.Q.load(qs, 0, T.Q.cols), kt, T, scale, sm, mask)


# the default softmax, prefetching the next block's K and V
PREFETCH = Softmax(exp2=True, row_width=32, prefetch=True)
# step -> (the per-block step, the loop over the key blocks, the block loads); STEP_EXTRAS:
# the query hooks (load, scores) and the softmax of the steps that change them
STEPS = {"full": (FULL, KEY_BLOCKS, LOAD_KV), "gemms": (gemms, KEY_BLOCKS, LOAD_KV),
         "no_exp": (no_exp, KEY_BLOCKS, LOAD_KV), "no_rescale": (no_rescale, KEY_BLOCKS, LOAD_KV),
         "no_max": (no_max, KEY_BLOCKS, LOAD_KV), "no_sums": (no_sums, KEY_BLOCKS, LOAD_KV),
         "sums_by_reduce": (sums_by_reduce, KEY_BLOCKS, LOAD_KV),
         "loaded_once": (FULL, loaded_once, LOAD_KV),
         "gemms_loaded_once": (gemms, loaded_once, LOAD_KV),
         "k_loaded_once": (FULL, _once(0), LOAD_KV), "v_loaded_once": (FULL, _once(1), LOAD_KV),
         "tensor_loads": (FULL, KEY_BLOCKS, tensor_loads),
         "gemms_tensor_loads": (gemms, KEY_BLOCKS, tensor_loads),
         "prefetch": (FULL, KEY_BLOCKS, LOAD_KV), "q_shared": (FULL, KEY_BLOCKS, LOAD_KV),
         "q_shared_prefetch": (FULL, KEY_BLOCKS, LOAD_KV),
         "no_lse": (FULL, KEY_BLOCKS, LOAD_KV)}


def kept(r, c, s, k0, kend, q0):
    """A causal edge score with no key hidden (a probe: the per-element pass left empty)."""
    return s


def strided_loaders(T, K, V, layout, row0, Bc: int, D: int):
    """`kv_loaders` with every block, the diagonal ones too, read by strided loads."""
    inside = KV_LOADERS(T, K, V, layout, row0, Bc, D)[1]
    return inside, inside


# causal probe -> (the edge's per-element score, the K/V loaders)
CAUSAL_STEPS = {"full": (CAUSAL_SCORE, KV_LOADERS), "edge_plain": (kept, KV_LOADERS),
                "edge_strided": (kept, strided_loaders), "no_lse": (CAUSAL_SCORE, KV_LOADERS)}
STEP_EXTRAS = {"prefetch": (LOAD_Q, SCORES, PREFETCH),
               "q_shared": (q_to_shared, scores_from_shared, None),
               "q_shared_prefetch": (q_to_shared, scores_from_shared, PREFETCH)}


def build(D: int, Br: int, Bc: int, inv: int, causal: bool, step: str):
    if causal:
        ATT.causal_score, A.kv_loaders = CAUSAL_STEPS[step]
        step = "no_lse" if step == "no_lse" else "full"
    A.attend, A.key_blocks, A.load_kv = STEPS[step]
    A.load_q, A.block_scores, softmax = STEP_EXTRAS.get(step, (LOAD_Q, SCORES, None))
    A.store_lse = (lambda LSE, tile, lse: None) if step == "no_lse" else STORE_LSE
    attention_prefill.cache_clear()
    try:
        kernel = attention_prefill(D, Br, Bc, inv, causal, softmax=softmax)
        kernel.compile()                # traced now, while the step is replaced
        return kernel
    finally:
        A.attend, A.key_blocks, A.load_kv = FULL, KEY_BLOCKS, LOAD_KV
        A.load_q, A.block_scores, A.store_lse = LOAD_Q, SCORES, STORE_LSE
        ATT.causal_score, A.kv_loaders = CAUSAL_SCORE, KV_LOADERS
        attention_prefill.cache_clear()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dims", type=int, nargs="+", default=[128, 64])
    ap.add_argument("--tiles", nargs="+", default=["128x64/256", "128x64/128", "256x64/256"],
                    help="Br x Bc / invocations")
    ap.add_argument("--steps", nargs="+", default=list(STEPS), choices=list(STEPS))
    ap.add_argument("--causal", action="store_true", help="also the causal kernels")
    ap.add_argument("--causal-steps", nargs="+", default=["full"], choices=list(CAUSAL_STEPS),
                    help="the causal kernels' probes (with --causal)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, help="default: heads / 4")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args()
    if vulkan_or_skip() is None:
        return
    B, H, Hkv, S = a.batch, a.heads, a.kv_heads or a.heads // 4, a.seq
    rng = np.random.default_rng(0)
    tiles = [tuple(int(x) for x in t.replace("/", "x").split("x")) for t in a.tiles]
    cases = [(D, t, step, False) for D in a.head_dims for t in tiles for step in a.steps]
    cases += [(D, t, step, True) for D in a.head_dims for t in tiles
              for step in a.causal_steps] if a.causal else []
    data = {D: [pc.asarray(rng.standard_normal((B, h, S, D)).astype(np.float16),
                           backend="vulkan") for h in (H, Hkv, Hkv)]
            + [pc.empty((B, H, S, D), np.float16, backend="vulkan"),
               pc.empty((B, H, S), np.float32, backend="vulkan")] for D in a.head_dims}
    kernels = {c: build(c[0], *c[1], c[3], c[2]) for c in cases}

    def launch(c, repeat):
        D, (Br, _, _), _, _ = c
        return kernels[c][(-(-S // Br), B * H)](*data[D], S, S, H, Hkv, 1 / D ** 0.5,
                                             backend="vulkan", repeat=repeat)
    for c in list(kernels):                 # the driver compiles each pipeline on first use
        t0 = time.perf_counter()
        name = f"d{c[0]} {'x'.join(map(str, c[1][:2]))}/{c[1][2]} {c[2]}{' causal' * c[3]}"
        try:
            launch(c, 1)
            pc.synchronize()
            print(f"compiled and ran {name} in {time.perf_counter() - t0:.1f} s", flush=True)
        except pc.BackendUnavailable as e:
            print(f"{name}: {str(e)[:160]}", flush=True)
            del kernels[c]
    warm_gpu()
    print(f"device: {pc.get_runtime('vulkan').capabilities.device_name}; {B} x {H} heads over "
          f"{Hkv}, {S} queries and keys, f16")
    print(f"{'head dim':>8} {'tile':>12} {'causal':>6} {'step':<11} {'µs':>9} {'TFLOP/s':>8}")
    for c in kernels:
        D, (Br, Bc, inv), step, causal = c
        warm_gpu(0.3)
        best = min(launch(c, a.repeat).time_ms for _ in range(3))
        flop = 4 * B * H * S * S * D * (0.5 if causal else 1.0)
        print(f"{D:>8} {f'{Br}x{Bc}/{inv}':>12} {'yes' if causal else '':>6} {step:<11} "
              f"{best * 1e3:9.1f} {flop / best / 1e9:8.1f}", flush=True)


if __name__ == "__main__":
    main()
