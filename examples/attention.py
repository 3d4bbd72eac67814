"""Flash attention with pycoop.kernels.attention: a causal grouped-query prefill, a prefill
of few queries over many keys (its keys split over workgroups and merged) and a split-KV
decode, checked against NumPy attention (and against torch's scaled_dot_product_attention
when torch has a CUDA GPU).

The kernels (pycoop/kernels/attention.py) walk the keys in blocks with the online softmax on
workgroup-scope NV cooperative matrices: Kᵀ read through a transposing tensor view, row maxima
with reduce(), exponentials with per_element(), sequence ends handled by the tensor layouts'
clamping. The inputs are device arrays (pc.Array), so the results stay where the kernels ran
until .numpy() reads them. Small sizes run on the emulator in a few seconds; on a GPU with
VK_NV_cooperative_matrix2 the same call runs on Vulkan.

    python3 examples/attention.py
"""
import numpy as np

import pycoop as pc
from pycoop.kernels import attention, attention_prefill, attention_reference


def array_backend():
    """Where the arrays live: the Vulkan device when it runs the attention kernels (NV
    cooperative matrix 2), else the emulator."""
    try:
        missing = pc.runtime.backend.vulkan_missing(attention_prefill(64).compile())
    except pc.BackendUnavailable:
        return "emulator"
    return "emulator" if missing else "vulkan"


def torch_sdpa(Q, K, V, causal):
    """torch's f16 result, or None without torch and a CUDA GPU."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    g = Q.shape[1] // K.shape[1]
    q, k, v = (torch.from_numpy(a).cuda() for a in (Q, K, V))
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal).float().cpu().numpy()


def run(name, B, H, Hkv, Sq, Skv, D, causal):
    rng = np.random.default_rng(0)
    Q = rng.standard_normal((B, H, Sq, D)).astype(np.float16)
    K = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float16)
    V = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float16)
    be = array_backend()
    q, k, v = (pc.asarray(a, backend=be) for a in (Q, K, V))     # copied to the device once
    r = attention(q, k, v, causal=causal, out="f32")
    out, lse_got = r.out.numpy(), r.lse.numpy()
    ref, lse = attention_reference(Q, K, V, causal=causal)
    err = np.abs(out - ref).max()
    line = (f"{name}: {B}x{H} heads over {Hkv}, {Sq} queries x {Skv} keys, d{D} on {r.backend}: "
            f"{len(r.kernel_ms)} kernel(s), {r.time_ms:.2f} ms, max abs error {err:.1e}, "
            f"log-sum-exp error "
            f"{np.abs(lse_got - lse).max():.1e}")
    t = torch_sdpa(Q, K, V, causal)
    if t is not None:
        line += f" (torch f16: {np.abs(t - ref).max():.1e})"
    print(line)
    assert err < 2e-3, err


def main():
    run("prefill", 1, 4, 2, 75, 75, 64, causal=True)      # 75: not a multiple of the tile
    # 2 heads of one query tile: 2 workgroups would leave the GPU idle, so the keys are
    # split in chunks of >= 512 (prefill_splits) and the chunks merged by a second kernel
    run("long keys", 1, 2, 1, 40, 1200, 64, causal=False)
    run("decode", 1, 8, 2, 1, 300, 128, causal=False)     # 4 query heads per K/V head


if __name__ == "__main__":
    main()
