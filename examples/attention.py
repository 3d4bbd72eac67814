"""Single-head attention forward with SPV_NV_cooperative_matrix2 (flash-attention style).

One subgroup handles 16 queries and walks the keys in blocks of 16: scores Q·Kᵀ (Kᵀ read
through a transposing tensor view), an additive bias read through a layout whose Constant
clamp value is -inf (keys past the end of the sequence are masked out), row maxima and sums
with reduce(), exp() with per_element(), and the running rescale of the output. Checked
against NumPy softmax attention.

    python3 examples/attention.py
"""
import numpy as np

import pycoop as pc
from pycoop import f16, f32, u32

D = 16                                               # head dimension
MatQ = pc.coopmat[f16, pc.Subgroup, 16, D, pc.UseA]
MatKt = pc.coopmat[f16, pc.Subgroup, D, 16, pc.UseB]
MatP = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
MatV = pc.coopmat[f16, pc.Subgroup, 16, D, pc.UseB]
Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]


def exp_minus(r, c, e, m):
    return pc.exp(e - m)


def larger(r, c, e, x):
    return pc.max(e, x)


def divide(r, c, e, d):
    return e / d


@pc.kernel(workgroup_size=32)
def attention(Q: pc.Buffer[f16], K: pc.Buffer[f16], V: pc.Buffer[f16], Bias: pc.Buffer[f32],
              O: pc.Buffer[f32], S: u32, scale: f32):
    q0 = pc.workgroup_id.x * 16
    lqkv = pc.nv.tensor_layout(2, clamp="constant").dimension(S, D)
    lbias = pc.nv.tensor_layout(2, clamp="constant").dimension(S, S).clamp_value(float("-inf"))
    kt = pc.nv.tensor_view(2, False, (1, 0))          # a 16 x D block of K read as D x 16
    q = pc.nv.load_tensor(Q, lqkv.slice(q0, 16, 0, D), MatQ)
    m = Acc.fill(float("-inf"))                       # running row maxima
    l = Acc.fill(0.0)                                 # running row sums
    o = Acc.fill(0.0)
    for k0 in range(0, S, 16):
        k_t = pc.nv.load_tensor(K, lqkv.slice(k0, 16, 0, D), MatKt, view=kt)
        bias = pc.nv.load_tensor(Bias, lbias.slice(q0, 16, k0, 16), Acc)   # -inf past S
        s = pc.mul_add(q, k_t, Acc.fill(0.0)) * scale + bias
        m_new = pc.nv.per_element(m, larger, pc.nv.reduce(s, "row", pc.max))
        p = pc.nv.per_element(s, exp_minus, m_new)
        alpha = pc.nv.per_element(m, exp_minus, m_new)
        l = l * alpha + pc.nv.reduce(p, "row", "add")
        v = pc.nv.load_tensor(V, lqkv.slice(k0, 16, 0, D), MatV)
        o = pc.mul_add(pc.nv.convert(p, MatP), v, o * alpha)     # f32 accumulator -> f16 UseA
        m = m_new
    pc.nv.store_tensor(O, lqkv.slice(q0, 16, 0, D), pc.nv.per_element(o, divide, l))


def reference(Q, K, V, bias, scale):
    s = Q.astype(np.float32) @ K.astype(np.float32).T * scale + bias
    p = np.exp(s - s.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)) @ V.astype(np.float32)


def main():
    S = 75
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((S, D)).astype(np.float16) for _ in range(3))
    bias = np.triu(np.full((S, S), -np.inf, np.float32), 1)    # causal mask as an additive bias
    O = np.zeros((S, D), np.float32)
    scale = 1 / np.sqrt(D)
    r = attention[-(-S // 16)](Q, K, V, bias, O, S, scale)
    err = np.abs(O - reference(Q, K, V, bias, scale)).max()
    attention.compile().spv                   # validated with spirv-val
    print(f"attention S={S} D={D} on {r.backend}: {r.time_ms:.2f} ms, max abs error {err:.1e}")
    assert err < 5e-3, err


if __name__ == "__main__":
    main()
