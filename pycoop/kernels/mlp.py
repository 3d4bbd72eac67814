"""A whole MLP block of a llama-style transformer on device arrays:

    out = x + W_down @ (silu(W_gate @ n) * (W_up @ n)),   n = x / sqrt(mean(x^2) + eps) * g

for T tokens x (T x H, f32), an RMSNorm weight g (H, f32) and GGUF weights in Q4_0 or Q4_K
(gate and up I x H, down H x I). `MLPBlock` holds the weights on a backend and enqueues the
kernels on `pc.Array`s without host round trips; it picks the kernels by T:

- **T <= 8 (token generation).** Both formats: the q8_1 path over the weights' planes
  (`pycoop.kernels.gemv_planes`, the planes shared with the prefill GEMMs): `rms_norm_q8_1`
  (RMSNorm quantised to q8_1 in one kernel, each row spread over several workgroups),
  `gemv_planes` on the stacked gate/up matrix (2I x H: the activations read once for both),
  `swiglu_q8_1` (silu(gate) * up, quantised), `gemv_planes` on down, `residual_add`. Q4_K's
  weights are then those of `q4_k_planes` (f16 scale and min per sub-block), as in prefill.
- **8 < T <= 64.** Both formats: f16 activation rows through `matmul_q`'s planes GEMMs
  (`gemm_q4_0_planes` / `gemm_q4_k_planes` on the tokens' own layout, one launch each, the
  planes shared with the other paths): `rms_norm_f16` (RMSNorm rounded to f16 rows), the
  stacked gate/up matrix, `swiglu_f16` (silu(gate) * up as f16 rows), down (from 17 to 32
  tokens on two 16-vector tiles: see `MLPBlock._down_config`), `residual_add`
  (split-K by f32 atomics: the last bits may change from run to run unless the block is
  made with `deterministic=True`, which sums the splits in a kernel of their own). On a
  Vulkan device without the GEMMs' cooperative matrices: the path above, 8 tokens at a time.
- **T > 64 (prefill).** Cooperative-matrix GEMMs with f16 activations, computed transposed
  (features x tokens) so that no activation is re-laid out between them: `rms_scale` (the
  per-token 1/rms), `rms_norm_t` (normalise, scale, round to f16 and transpose into
  H x Tp, Tp = T rounded up to the GEMM tile), the GEMM on the stacked gate/up matrix
  (2I x Tp f32), `swiglu_t` (silu(gate) * up as f16, I x Tp), the down GEMM (H x Tp) and
  `residual_t` (adds it back transposed). The GEMMs are the planes GEMMs (a GEMM whose
  tiles would leave SMs idle splits K in two, adding into a zeroed output), the weights split
  into planes once, on the first prefill call, and dequantised while staging into shared
  memory: Q4_0 `gemm_q4_0_planes` (`q4_0_planes`: nibbles and scales, lossless), Q4_K
  `gemm_q4_k_planes` (`q4_k_planes`: per sub-block of 32 the nibbles and f16 scale d * sc
  and min dmin * m, each weight f16(f16(q * scale) - min), within the f16 rounding bound
  of `q4_k_planes` of llama.cpp's weight).

The definitions, exactly (f32 unless said): RMSNorm r = rsqrt(sum(x^2) / H + eps) with the
sum's order chosen by the device, n = (x * r) * g; silu(a) = a / (1 + exp(-a)), h = silu(gate)
* up; q8_1 quantisation as `quantize_q8_1_reference`; the f16 roundings of the GEMM path round
to nearest even.
"""
from __future__ import annotations

import functools
import numbers

import numpy as np

import pycoop as pc
from pycoop import f32, i32, u32

from .args import check_bool, real_dtype
from .gemm import gemm_q4_0_planes, pack_f16
from .gemm_quant import gemm_q4_k_planes
from .gemv import (GemvConfig, GGMLWeights, choose_kernel, coopmat_kernel, matmul_q,
                   planes_kernel, weights, _weights)
from .gemv_planes import MAX_N as PLANES_MAX_N
from .gemv_planes import gemv_operands, planes_gemv_config, weight_planes
from .gemvq import q8_1_lanes
from .limits import SMS

SPECIALIZE_MAX_K = 4096     # prefill GEMMs with a longer K are not shape-specialised (see _gemm)
F4 = pc.vec(f32, 4)
U4 = pc.vec(u32, 4)
U2 = pc.vec(u32, 2)
WG = 256                                   # invocations per workgroup of the elementwise kernels
FORMATS = ("q4_0", "q4_k")
SMALL_T = 64                               # the token paths up to this many tokens


def _groups(n: int) -> int:
    return max(1, -(-n // WG))


@pc.func
def _row_rms(X, red, t, h4, lane, nsg: int, eps):
    """rsqrt(sum of squares of row t of X (h4 vec4) / H + eps), reduced over the workgroup
    (subgroup sums, then the subgroups' partials through shared memory `red`)."""
    ss = f32(0.0)
    for i in pc.range(lane, h4, WG):
        v = X[t * h4 + i]
        ss = ss + (v[0] * v[0] + v[1] * v[1]) + (v[2] * v[2] + v[3] * v[3])
    return _rms_of(ss, red, h4, nsg, eps)


@pc.func
def _rms_of(ss, red, h4, nsg: int, eps):
    """rsqrt(the workgroup's sum of the lanes' `ss` / (4 h4) + eps)."""
    ss = pc.subgroup.add(ss)
    if pc.subgroup_local_id() == 0:
        red[pc.subgroup_id()] = ss
    pc.barrier()
    tot = red[0]
    for j in range(1, nsg):
        tot = tot + red[j]
    return pc.rsqrt(tot / f32(h4 * 4) + eps)


def _row_squares_at_once(X, t, h4, lane, per: int):
    """This lane's sum of squares of row t of X (h4 vec4): its `per` vec4 (lane + j WG), all
    loads issued before any use (one memory round trip instead of one per loop iteration);
    slots past h4 read the last vec4 and count zero."""
    vals = [X[t * h4 + pc.min(lane + j * WG, h4 - 1)] for j in range(per)]
    ss = f32(0.0)
    for j, v in enumerate(vals):
        sq = (v[0] * v[0] + v[1] * v[1]) + (v[2] * v[2] + v[3] * v[3])
        ss = ss + pc.select(lane + j * WG < h4, sq, f32(0.0))
    return ss


def _check_sg(subgroup_size) -> None:
    if subgroup_size not in (8, 16, 32, 64, 128):
        raise ValueError(f"subgroup_size must be 8, 16, 32, 64 or 128, got {subgroup_size!r}")


@pc.func
def _put_q8_1(Q, D, S, G, t, h4, i, v, r):
    """Quantise vec4 i of row t (v, times the norm r and G) into the q8_1 outputs (every lane
    of an 8-lane block takes part; lanes past h4 store nothing)."""
    g = G[pc.min(i, h4 - 1)]                                # whole 8-lane blocks past the end
    word, d, s = q8_1_lanes([(v[c] * r) * g[c] for c in range(4)])
    if i < h4:
        Q[t * h4 + i] = word
        if (i & 7) == 0:
            D[(t * h4 + i) >> 3] = d
            S[(t * h4 + i) >> 3] = s


def rows_held_parts(H: int) -> int:
    """The workgroups per row of the RMSNorm kernels built for rows of `H` values."""
    return _check_rows_held(H)


def _put_f16(Y, X, G, t, h4, i, r) -> None:
    """Vec4 i of row t normalised, (X * r) * G, rounded to f16 (a uvec2)."""
    v, g = X[t * h4 + i], G[i]
    Y[t * h4 + i] = pack_f16([(v[c] * r) * g[c] for c in range(4)])


def _check_rows_held(H) -> int:
    """vec4 per lane of a row loaded at once (`H`, the row's length fixed at build, None: the
    row is read in a loop, any length)."""
    if H is None:
        return 0
    if not isinstance(H, int) or H < 4 or H % 4:
        raise ValueError(f"H must be an int, a multiple of 4, got {H!r}")
    return -(-H // (4 * WG))


@functools.cache
def rms_norm_q8_1(subgroup_size: int = 32, H: int | None = None):
    """RMSNorm of each row of X (N x H f32 as vec4, H a multiple of 32) times G (H f32 as
    vec4), quantised to q8_1 in the same kernel: Q (u32, N * H / 4), D (f32) and S (i32), one per
    32-block, as `quantize_q8_1` writes them. One workgroup per row: grid N. Operands: X, G,
    Q, D, S, H (u32), eps (f32). With `H` given at build (at most that many values per row at
    launch), the grid is N x `rows_held_parts(H)`: every workgroup of a row loads all of it at
    once (one memory round trip, from L2 after the first) for the norm and quantises one
    256-vec4 slot of it, so that a single row is spread over several SMs (the batch-1
    latency of the MLP block)."""
    _check_sg(subgroup_size)
    nsg = WG // subgroup_size
    per = _check_rows_held(H)

    @pc.kernel(workgroup_size=WG, subgroup_size=subgroup_size)
    def rms_norm_q8_1(X: pc.ReadBuffer[F4], G: pc.ReadBuffer[F4], Q: pc.WriteBuffer[u32],
                      D: pc.WriteBuffer[f32], S: pc.WriteBuffer[i32], H: u32, eps: f32):
        red = pc.shared(f32, nsg)
        t, lane = pc.workgroup_id.x, pc.local_invocation_index()
        h4 = H >> 2

        if per:                    # workgroup y quantises slot y of the row (grid T x per)
            r = _rms_of(_row_squares_at_once(X, t, h4, lane, per), red, h4, nsg, eps)
            i = lane + pc.workgroup_id.y * WG
            _put_q8_1(Q, D, S, G, t, h4, i, X[t * h4 + pc.min(i, h4 - 1)], r)
        else:
            r = _row_rms(X, red, t, h4, lane, nsg, eps)
            for j in pc.range(0, (h4 + (WG - 1)) // WG):   # the same trip count for every lane
                i = j * WG + lane
                _put_q8_1(Q, D, S, G, t, h4, i, X[t * h4 + pc.min(i, h4 - 1)], r)
    return rms_norm_q8_1


@functools.cache
def rms_norm_f16(subgroup_size: int = 32, H: int | None = None):
    """RMSNorm of each row of X (N x H f32 as vec4, H a multiple of 4) times G, rounded to f16
    into Y (N x H f16 as uvec2: the rows `matmul_q`'s planes GEMMs read). One workgroup per
    row: grid N (with `H` at build, N x `rows_held_parts(H)`, as in rms_norm_q8_1).
    Operands: X, G, Y, H, eps."""
    _check_sg(subgroup_size)
    nsg = WG // subgroup_size
    per = _check_rows_held(H)

    @pc.kernel(workgroup_size=WG, subgroup_size=subgroup_size)
    def rms_norm_f16(X: pc.ReadBuffer[F4], G: pc.ReadBuffer[F4], Y: pc.WriteBuffer[U2], H: u32,
                     eps: f32):
        red = pc.shared(f32, nsg)
        t, lane = pc.workgroup_id.x, pc.local_invocation_index()
        h4 = H >> 2
        if per:                    # workgroup y writes slot y of the row (grid T x per)
            r = _rms_of(_row_squares_at_once(X, t, h4, lane, per), red, h4, nsg, eps)
            i = lane + pc.workgroup_id.y * WG
            if i < h4:
                _put_f16(Y, X, G, t, h4, i, r)
        else:
            r = _row_rms(X, red, t, h4, lane, nsg, eps)
            for i in pc.range(lane, h4, WG):
                _put_f16(Y, X, G, t, h4, i, r)
    return rms_norm_f16


@functools.cache
def rms_scale(subgroup_size: int = 32):
    """R[t] = rsqrt(sum(X[t]^2) / H + eps) for each row of X (N x H f32 as vec4). One
    workgroup per row: grid N. Operands: X, R, H, eps."""
    _check_sg(subgroup_size)
    nsg = WG // subgroup_size

    @pc.kernel(workgroup_size=WG, subgroup_size=subgroup_size)
    def rms_scale(X: pc.ReadBuffer[F4], R: pc.WriteBuffer[f32], H: u32, eps: f32):
        red = pc.shared(f32, nsg)
        t = pc.workgroup_id.x
        r = _row_rms(X, red, t, H >> 2, pc.local_invocation_index(), nsg, eps)
        if pc.local_invocation_index() == 0:
            R[t] = r
    return rms_scale


@pc.kernel(workgroup_size=WG)
def rms_norm_t(X: pc.ReadBuffer[f32], R: pc.ReadBuffer[f32], G: pc.ReadBuffer[f32],
               Y: pc.WriteBuffer[U4], T: u32, H: u32, ld: u32):
    """Y (H x ld f16, as uvec4) = the transpose of (X[t] * R[t]) * G for the T rows of X
    (T x H f32), zeros in columns T ... ld - 1 (ld a multiple of 8). One invocation per 8
    columns of a row of Y: grid ceil(H * ld / 8 / 256)."""
    g = pc.global_invocation_id.x
    n8 = ld >> 3
    if g < H * n8:
        h, t0 = g // n8, (g % n8) * 8
        gh = G[h]
        vals = []
        for c in range(8):
            t = pc.min(t0 + c, T - 1)
            vals.append(pc.select(t0 + c < T, (X[t * H + h] * R[t]) * gh, f32(0.0)))
        Y[g] = pack_f16(vals)


def _silu_mul(a, b):
    return a / (f32(1.0) + pc.exp(-a)) * b


@functools.cache
def swiglu_q8_1(subgroup_size: int = 32):
    """h = silu(gate) * up for Y (N x 2I f32 as vec4: each row the I gate outputs, then the I
    up outputs; I a multiple of 32), quantised to q8_1 in the same kernel: Q, D, S of h (N x
    I). One invocation per 4 values of h: grid ceil(N * I / 4 / 256). Operands: Y, Q, D, S, N,
    I."""
    _check_sg(subgroup_size)

    @pc.kernel(workgroup_size=WG, subgroup_size=subgroup_size)
    def swiglu_q8_1(Y: pc.ReadBuffer[F4], Q: pc.WriteBuffer[u32], D: pc.WriteBuffer[f32],
                    S: pc.WriteBuffer[i32], N: u32, I: u32):
        g = pc.global_invocation_id.x
        i4 = I >> 2
        gc = pc.min(g, N * i4 - 1)                           # whole 8-lane blocks past the end
        n, i = gc // i4, gc % i4
        a, b = Y[n * 2 * i4 + i], Y[n * 2 * i4 + i4 + i]
        word, d, s = q8_1_lanes([_silu_mul(a[c], b[c]) for c in range(4)])
        if g < N * i4:
            Q[g] = word
            if (g & 7) == 0:
                D[g >> 3] = d
                S[g >> 3] = s
    return swiglu_q8_1


@pc.kernel(workgroup_size=WG)
def swiglu_f16(Y: pc.ReadBuffer[F4], Hh: pc.WriteBuffer[U2], N: u32, I: u32):
    """Hh (N x I f16, as uvec2) = silu(gate) * up rounded to f16, for Y (N x 2I f32, gate then
    up in each row; I a multiple of 4) as vec4. Grid ceil(N * I / 4 / 256)."""
    g = pc.global_invocation_id.x
    i4 = I >> 2
    if g < N * i4:
        n, i = g // i4, g % i4
        a, b = Y[n * 2 * i4 + i], Y[n * 2 * i4 + i4 + i]
        Hh[g] = pack_f16([_silu_mul(a[c], b[c]) for c in range(4)])


@pc.kernel(workgroup_size=WG)
def swiglu_t(Y: pc.ReadBuffer[F4], Hh: pc.WriteBuffer[U4], n8: u32):
    """Hh (I x ld f16 as uvec4, n8 = I * ld / 8) = silu(gate) * up for Y (2I x ld f32 as vec4:
    the gate rows, then the up rows), rounded to f16. Grid ceil(n8 / 256)."""
    g = pc.global_invocation_id.x
    if g < n8:
        a0, a1 = Y[2 * g], Y[2 * g + 1]
        b0, b1 = Y[2 * n8 + 2 * g], Y[2 * n8 + 2 * g + 1]
        Hh[g] = pack_f16([_silu_mul(a0[c], b0[c]) for c in range(4)]
                          + [_silu_mul(a1[c], b1[c]) for c in range(4)])


@pc.kernel(workgroup_size=WG)
def residual_add(X: pc.ReadBuffer[F4], Y: pc.ReadBuffer[F4], O: pc.WriteBuffer[F4], n4: u32):
    """O = X + Y, n4 vec4 of f32. Grid ceil(n4 / 256)."""
    g = pc.global_invocation_id.x
    if g < n4:
        O[g] = X[g] + Y[g]


@pc.kernel(workgroup_size=WG)
def residual_t(X: pc.ReadBuffer[f32], Y: pc.ReadBuffer[f32], O: pc.WriteBuffer[f32], T: u32,
               H: u32, ld: u32):
    """O (T x H f32) = X + the transpose of Y (H x ld f32, its first T columns). Grid
    ceil(T * H / 256)."""
    g = pc.global_invocation_id.x
    if g < T * H:
        t, h = g // H, g % H
        O[g] = X[g] + Y[h * ld + t]


def _tile(M1: int, M2: int, K1: int, K2: int):
    """(BM, BN, BK, SGM, SGN) of the GEMMs: 128 x 128 tiles on 2 x 2 subgroups where the
    shapes allow (H100, T = 512: 472 against 577 µs for 2 x 4 on the gate/up GEMM), else
    32 x 32, 64 deep where both K allow it, else 32 (K is a multiple of the 32-weight block,
    and M = 2I or H a multiple of 32: every shape of the formats fits)."""
    if all(m % 128 == 0 for m in (M1, M2)) and all(k % 64 == 0 for k in (K1, K2)):
        return 128, 128, 64, 2, 2
    return 32, 32, 64 if all(k % 64 == 0 for k in (K1, K2)) else 32, 1, 1


def _split(tiles: int, K: int, BK: int) -> int:
    """Split-K of a prefill GEMM: 2 where its tiles leave SMs idle (fewer than `SMS`), else
    1. Two splits add into a zeroed Y as 0 + a + b in either order, which is the same f32
    sum, so the block stays bit for bit reproducible (more splits would not be)."""
    return 2 if tiles < SMS and K % (2 * BK) == 0 else 1


class MLPBlock:
    """x -> x + down(silu(gate(n)) * up(n)), n = RMSNorm(x) * norm_weight, for GGUF weights.

    `gate`, `up` (I x H) and `down` (H x I): anything `weights()` takes (GGUF tensors, raw
    blocks with `fmt`), all Q4_0 or all Q4_K. `norm_weight`: H f32. The weights are uploaded
    to `backend` once. `block(x)` takes x (T x H f32 `pc.Array` on that backend, or H for one
    token) and returns a new array of the same shape; every launch is queued, nothing is
    copied to the host. `small_t`: the largest T of the token paths (above it, the prefill
    GEMMs on transposed activations). `deterministic`: the 8 < T <= small_t path sums its
    split-K in a second kernel instead of with f32 atomics, so that every call gives the
    same bits (the other paths always do)."""

    def __init__(self, gate, up, down, norm_weight, fmt: str | None = None, *, eps: float = 1e-5,
                 backend: str | None = None, subgroup_size: int = 32, small_t: int = SMALL_T,
                 deterministic: bool = False):
        g, u, d = (weights(w, fmt) for w in (gate, up, down))
        if not (g.fmt == u.fmt == d.fmt) or g.fmt not in FORMATS:
            raise ValueError(f"MLPBlock: gate, up and down must all be one of "
                             f"{', '.join(FORMATS)}; got {g.fmt}, {u.fmt}, {d.fmt}")
        if (g.M, g.K) != (u.M, u.K) or (d.M, d.K) != (g.K, g.M):
            raise ValueError(f"MLPBlock: gate and up are I x H and down H x I; got gate "
                             f"{g.M}x{g.K}, up {u.M}x{u.K}, down {d.M}x{d.K}")
        self.fmt, self.I, self.H = g.fmt, g.M, g.K
        nw = np.asarray(norm_weight)
        if not real_dtype(nw):
            raise ValueError(f"MLPBlock: norm_weight must be H = {self.H} real numbers, got "
                             f"dtype {nw.dtype}")
        if nw.shape != (self.H,):
            raise ValueError(f"MLPBlock: norm_weight is a vector of H = {self.H} values, got "
                             f"shape {nw.shape}")
        nw = np.ascontiguousarray(nw.astype(np.float32))
        _check_sg(subgroup_size)
        if not isinstance(small_t, numbers.Integral) or isinstance(small_t, bool) or small_t < 0:
            raise ValueError(f"MLPBlock: small_t (the largest T of the token paths) must be an "
                             f"int >= 0, got {small_t!r}")
        check_bool("MLPBlock", "deterministic", deterministic)
        if not isinstance(eps, numbers.Real) or isinstance(eps, (bool, np.bool_)) \
                or not 0 <= eps <= float(np.finfo(np.float32).max):
            raise ValueError(f"MLPBlock: eps (added to the mean square under the root) must "
                             f"be a number >= 0 that f32 holds, got {eps!r}")
        self.eps, self.small_t, self.sg = float(eps), int(small_t), subgroup_size
        self.deterministic = bool(deterministic)
        self.backend = pc.zeros(1, pc.f32, backend=backend).backend
        bk = self.backend
        self.gate_up = _weights(np.concatenate([g.data, u.data]), g.fmt, None,   # 2I x H
                                snapshot=False)       # stacked: no other reference
        self.down = d
        self.norm = pc.asarray(nw, backend=bk)
        self.tile = _tile(2 * self.I, self.H, self.H, self.I)
        self.launches: list = []               # the LaunchResults of the last call

    def __call__(self, x: pc.Array) -> pc.Array:
        if not isinstance(x, pc.Array):
            raise TypeError("MLPBlock takes a pc.Array (pc.asarray(x, backend=...)), got "
                            f"{type(x).__name__}")
        if x.backend != self.backend:
            raise ValueError(f"MLPBlock: x is on {x.backend}, the weights on {self.backend}")
        if x.dtype != np.float32 or x.ndim not in (1, 2) or x.shape[-1] != self.H:
            raise ValueError(f"MLPBlock: x is T x {self.H} (or {self.H}) float32, got "
                             f"{x.shape} {x.dtype}")
        T = 1 if x.ndim == 1 else x.shape[0]
        if T < 1:
            raise ValueError(f"MLPBlock: x has no tokens (shape {x.shape})")
        if x.offset % 4:
            raise ValueError(f"MLPBlock: x is a view {4 * x.offset} bytes into its buffer; the "
                             f"kernels read x 16 bytes at a time, so a view of x must start "
                             f"16-byte aligned: pass an aligned copy "
                             f"(y = pycoop.empty(x.shape, x.dtype); y.copy_from(x))")
        x2 = x.reshape(T, self.H)
        self.launches = []
        out = self._small(x2, T) if T <= self.small_t else self._large(x2, T)
        return out.reshape(x.shape)

    def device_time_ms(self) -> float:
        """Device time of the last call, first launch's start to last launch's end (device
        timestamps on Vulkan; waits for the launches). On the emulator, which has no device
        timestamps: the sum of the launches' times."""
        if not self.launches:
            raise RuntimeError("MLPBlock.device_time_ms: the block has not been called yet")
        spans = [r.spans_ns for r in self.launches]
        if any(s is None for s in spans):
            return sum(r.time_ms for r in self.launches)
        return (max(s[-1][1] for s in spans) - min(s[0][0] for s in spans)) / 1e6

    def _tokens(self, x, T: int):
        """T <= 8 tokens: the q8_1 path over the weights' planes (`gemv_planes`): RMSNorm
        quantised to q8_1, gate and up in one launch, SiLU * up quantised, down, residual."""
        bk, H, I, sg = self.backend, self.H, self.I, self.sg
        nb1, nb2 = T * H // 32, T * I // 32
        q1, d1, s1 = (pc.empty((nb1 * 2, 4), pc.u32, backend=bk), pc.empty(nb1, pc.f32, backend=bk),
                      pc.empty(nb1, pc.i32, backend=bk))
        self.launches.append(rms_norm_q8_1(sg, H)[T, rows_held_parts(H)](
            x.reshape(-1, 4), self.norm.reshape(-1, 4), q1.reshape(-1), d1, s1, H, self.eps))
        y1 = pc.empty((T, 2 * I), pc.f32, backend=bk)
        self._gemv_planes(self.gate_up, T, (q1, d1, s1), y1)
        q2, d2, s2 = (pc.empty((nb2 * 2, 4), pc.u32, backend=bk), pc.empty(nb2, pc.f32, backend=bk),
                      pc.empty(nb2, pc.i32, backend=bk))
        self.launches.append(swiglu_q8_1(sg)[_groups(T * I // 4)](y1.reshape(-1, 4), q2.reshape(-1),
                                                                   d2, s2, T, I))
        y2 = pc.empty((T, H), pc.f32, backend=bk)
        self._gemv_planes(self.down, T, (q2, d2, s2), y2)
        return y2

    def _gemv_planes(self, W: GGMLWeights, T: int, xq: tuple, Y) -> None:
        cfg = planes_gemv_config(W.fmt, T, "q8_1")
        Q, D = gemv_operands(W, self.backend)
        self.launches.append(cfg.kernel(W.fmt, self.sg)[cfg.grid(W.M, T)](Q, D, *xq, Y, W.M, T,
                                                                           W.K))

    def _small(self, x, T: int):
        bk, H, I, sg = self.backend, self.H, self.I, self.sg
        out = pc.empty((T, H), pc.f32, backend=bk)
        if T <= PLANES_MAX_N or not self._rows_run_here(T):
            # the token path (more tokens, on a device without cooperative matrices: 8 at a time)
            for t in range(0, T, PLANES_MAX_N):
                n = min(PLANES_MAX_N, T - t)
                self._residual(x[t:t + n], self._tokens(x[t:t + n], n), out[t:t + n], n)
            return out
        # 8 < T <= small_t: f16 rows through matmul_q's GEMMs (one launch each)
        xn = pc.empty((T, H), pc.f16, backend=bk)
        self.launches.append(rms_norm_f16(sg, H)[T, rows_held_parts(H)](
            x.reshape(-1, 4), self.norm.reshape(-1, 4), xn.view(np.uint32).reshape(-1, 2), H,
            self.eps))
        y1 = matmul_q(self.gate_up, xn, deterministic=self.deterministic,
                      launches=self.launches)                             # T x 2I f32
        h = pc.empty((T, I), pc.f16, backend=bk)
        self.launches.append(swiglu_f16[_groups(T * I // 4)](
            y1.reshape(-1, 4), h.view(np.uint32).reshape(-1, 2), T, I))
        y2 = matmul_q(self.down, h, config=self._down_config(T),
                      deterministic=self.deterministic, launches=self.launches)
        self._residual(x, y2, out, T)
        return out

    def _residual(self, x, y, out, T: int) -> None:
        """out = x + y, T rows of H f32."""
        n4 = T * self.H // 4
        self.launches.append(residual_add[_groups(n4)](x.reshape(-1, 4), y.reshape(-1, 4),
                                                        out.reshape(-1, 4), n4))

    def _rows_run_here(self, T: int) -> bool:
        """Whether the backend runs the GEMMs `matmul_q` takes for T rows of f16 activations
        (the planes GEMMs, or with small_t above 64 the decode-function ones; a Vulkan device
        without cooperative matrices does not; the GEMV kernels of shapes neither fits run
        wherever the token path does)."""
        if self.backend != "vulkan":
            return True
        for W in (self.gate_up, self.down):
            cfg = (self._down_config(T) if W is self.down else None) or choose_kernel(
                W.fmt, T, M=W.M, K=W.K)
            k = (planes_kernel(W.fmt, cfg, self.deterministic, x_f32=False)[0]
                 if cfg.kind == "planes" else
                 coopmat_kernel(W.fmt, cfg.tile) if cfg.kind == "coopmat" else None)
            try:
                if k is not None:
                    k.compile().check_vulkan()
            except pc.BackendUnavailable:
                return False
        return True

    def _down_config(self, T: int) -> GemvConfig | None:
        """The down GEMM's configuration for 16 < T <= 32 tokens: two 16-vector tiles (4
        subgroups, split-K into the largest power of two <= 16 that keeps 1,024 workgroups),
        where the shape fits them; else None (`matmul_q`'s own). With 32-vector tiles in both
        GEMMs the block ran each about 20 µs slower than alone (H200, 2026-11-28: gate/up 87
        against 70 µs, down 53 against 31 at llama-8B sizes; the cause is not known, nor
        is it the atomics, the zeroed output or the norm before them); with the down GEMM's
        tiles of another shape the block took 142-143 µs instead of 160-161 at 24 and 32
        tokens (gate/up 73-75, down 48.5)."""
        W = self.down
        if not 16 < T <= 32 or W.M % 128 or W.K % 64:
            return None
        split = 1
        while split < 16 and W.M // 128 * 2 * split * 2 <= 1024 and W.K % (64 * split * 2) == 0:
            split *= 2
        return GemvConfig("planes", subgroups=4, tile=(128, 16, 64), split_k=split)

    def _gemm_kernel(self, W: GGMLWeights, ld: int):
        """(kernel, grid, split, specialised) of W @ X for X of ld columns. Where the tiles leave SMs idle
        K is split in two (down at T = 512: 208 against 277 µs). Otherwise the shape is
        specialised where K is at most `SPECIALIZE_MAX_K` (gate/up at T = 512: 405 against
        472 µs); with K = 14336 the specialised, unsplit down GEMM took 814 µs against 257,
        so longer K stays unspecialised."""
        BM, BN, BK, SGM, SGN = self.tile
        split = _split((W.M // BM) * (ld // BN), W.K, BK)
        gemm = gemm_q4_0_planes if self.fmt == "q4_0" else gemm_q4_k_planes
        if split > 1:
            return (gemm(BM, BN, BK, SGM, SGN, split_k=split, split_k_mode="atomic"),
                    (W.M // BM, ld // BN, split), split, False)
        special = W.K <= SPECIALIZE_MAX_K
        return gemm(BM, BN, BK, SGM, SGN, specialize=special), (W.M // BM, ld // BN), 1, special

    def _gemm(self, W: GGMLWeights, X, ld: int):
        """W @ X as a new W.M x ld f32 array, X (W.K x ld f16 as uvec4)."""
        k, grid, split, _ = self._gemm_kernel(W, ld)
        q, d = weight_planes(W, self.backend)       # made once, Q shared with the token GEMVs
        Y = (pc.zeros if split > 1 else pc.empty)((W.M, ld), pc.f32, backend=self.backend)
        self.launches.append(k[grid](q, d, X, Y, W.M, ld, W.K))   # splits add into zeros
        return Y

    def _large(self, x, T: int):
        bk, H, I = self.backend, self.H, self.I
        ld = -(-T // self.tile[1]) * self.tile[1]
        if bk == "vulkan":       # the GEMMs' device needs, checked before anything is queued
            for W in (self.gate_up, self.down):
                k, _, _, special = self._gemm_kernel(W, ld)
                consts = {"M": W.M, "N": ld, "K": W.K} if special else {}
                k.compile(subgroup_size=self.sg, **consts).check_vulkan(
                    f"MLPBlock with T = {T} > small_t = {self.small_t} tokens (its GEMMs)")
        r = pc.empty(T, pc.f32, backend=bk)
        self.launches.append(rms_scale(self.sg)[T](x.reshape(-1, 4), r, H, self.eps))
        xt = pc.empty((H * ld // 8, 4), pc.u32, backend=bk)
        self.launches.append(rms_norm_t[_groups(H * ld // 8)](x.reshape(-1), r, self.norm, xt, T, H, ld))
        y1 = self._gemm(self.gate_up, xt, ld)
        h = pc.empty((I * ld // 8, 4), pc.u32, backend=bk)
        self.launches.append(swiglu_t[_groups(I * ld // 8)](y1.reshape(-1, 4), h, I * ld // 8))
        y2 = self._gemm(self.down, h, ld)
        out = pc.empty((T, H), pc.f32, backend=bk)
        self.launches.append(residual_t[_groups(T * H)](x.reshape(-1), y2.reshape(-1), out.reshape(-1), T, H, ld))
        return out


def mlp_reference(x, Wg, Wu, Wd, norm_weight, eps: float = 1e-5) -> np.ndarray:
    """The block in f64 NumPy for dequantised weights (Wg, Wu: I x H; Wd: H x I) and x (T x H
    or H)."""
    x = np.asarray(x, np.float64)
    n = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * np.asarray(norm_weight, np.float64)
    g, u = n @ np.asarray(Wg, np.float64).T, n @ np.asarray(Wu, np.float64).T
    return x + (g / (1 + np.exp(-g)) * u) @ np.asarray(Wd, np.float64).T
