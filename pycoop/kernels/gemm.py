"""GEMM kernels: C = A @ B with f16 inputs and f32 accumulation, row-major matrices.

`gemm_khr`: subgroup-scope KHR cooperative matrices loaded straight from global memory;
`gemm_khr_staged(...)`: the same through shared memory with a register prefetch.

A workgroup of 4 subgroups (2 x 2) computes a (32*TM) x (32*TN) tile of C; each subgroup holds
TM x TN accumulators of 16 x 16 and walks K in steps of 16. M and N must be multiples of the
workgroup tile and K of 16.

`gemm_nv(...)` / `gemm_q4_0(...)`: workgroup-scope NV cooperative matrices through tensor
layouts, any M, N, K; the second decodes Q4_0-quantised weights while loading.

`gemm_q4_0_staged(...)` / `gemm_q4_0_planes(...)`: Q4_0 weights dequantised by hand into
shared memory, from llama.cpp's blocks or from their nibble and scale planes (`q4_0_planes`).
"""
from __future__ import annotations

import numbers

import numpy as np

import pycoop as pc
from pycoop import f16, f32, u32

from .args import check_ints, check_unroll, kernel_cache, numeric_array

MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
MatB = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseB]
Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]


def _mul_add_tiles(acc: list, a: list, b: list) -> list:
    """[[a[i] @ b[j] + acc[i][j]]] for every pair of tiles. Returned, not updated in place: a
    runtime loop carries what its body assigns."""
    return [[pc.mul_add(ai, bj, c) for bj, c in zip(b, row)] for ai, row in zip(a, acc)]


def _tile_products(acc: list, sa, lda: int, sb, ldb: int, wm, wn, BK: int, V: int = 1,
                   b_col_major: bool = False) -> list:
    """acc plus the products of one BK-deep k-step read from shared memory: the A tiles of
    rows wm.. of sa (row-major, rows lda halves apart) and the B tiles of columns wn.. of sb
    (row-major with rows ldb halves apart, or column-major with columns ldb apart); V halves
    per element of sa and sb."""
    TM, TN = len(acc), len(acc[0])
    for kk in range(0, BK, 16):
        a = [MatA.load(sa, ((wm + 16 * i) * lda + kk) // V, lda // V) for i in range(TM)]
        if b_col_major:
            b = [MatB.load(sb, ((wn + 16 * j) * ldb + kk) // V, ldb // V, "col_major")
                 for j in range(TN)]
        else:
            b = [MatB.load(sb, (kk * ldb + wn + 16 * j) // V, ldb // V) for j in range(TN)]
        acc = _mul_add_tiles(acc, a, b)
    return acc


def _store_tiles(C, acc: list, m0, n0, N, transposed: bool = False) -> None:
    """Store the 16x16 accumulator tiles acc[i][j] at row m0 + 16i, column n0 + 16j of C
    (rows of N elements), or with `transposed` at row n0 + 16j, column m0 + 16i of C.T (C
    given as N rows of M elements, N then naming M: tiles stored column-major)."""
    for i, row in enumerate(acc):
        for j, tile in enumerate(row):
            if transposed:
                pc.store(C, (n0 + 16 * j) * N + m0 + 16 * i, tile, N, "col_major")
            else:
                pc.store(C, (m0 + 16 * i) * N + n0 + 16 * j, tile, N)


def _add_tiles_atomic(C, acc: list, scratch, sg, m0, n0, N, transposed: bool = False) -> None:
    """C += the 16x16 accumulator tiles acc[i][j] at row m0 + 16i, column n0 + 16j (or, with
    `transposed`, C.T += them as in `_store_tiles`), with f32 atomic adds (the fused split-K):
    the subgroup stores a tile into its 256 floats of `scratch`, then each of its 32
    invocations adds 8 elements of it. The barriers order the tile's store before the reads,
    and the reads before the next tile's store."""
    lane = pc.subgroup_local_id()
    base = sg * 256
    for i, row in enumerate(acc):
        for j, tile in enumerate(row):
            pc.store(scratch, base, tile, 16, "col_major" if transposed else "row_major")
            pc.barrier()
            for q in range(8):
                r, c = divmod(lane + 32 * q, 16)      # transposed: r runs along n, c along m
                at = ((n0 + 16 * j + r) * N + m0 + 16 * i + c) if transposed else \
                    ((m0 + 16 * i + r) * N + n0 + 16 * j + c)
                pc.atomic.add(C, at, scratch[base + r * 16 + c])
            pc.barrier()


def pack_f16(vals: list):
    """f32 values (8, or 4) rounded to f16, packed as a uvec4 (or uvec2): value 2i + j in half
    j of word i."""
    return pc.make_vector([pc.bitcast(pc.make_vector([f16(vals[2 * i]), f16(vals[2 * i + 1])]),
                                      u32) for i in range(len(vals) // 2)])


def _uvec4_slots(t, nth: int, rows: int, cols: int) -> list:
    """The (row, uvec4 column) slots of a rows x cols f16 tile that invocation t of nth
    copies, consecutive invocations on consecutive uvec4."""
    return [divmod(t + q * nth, cols // 8) for q in range(rows * cols // 8 // nth)]


def _check_split_k(name: str, split_k, mode: str = "stacked") -> int:
    """split_k as a Python int, checked with the split-K mode."""
    split_k, = check_ints(name, split_k=split_k)
    if mode not in ("stacked", "atomic"):
        raise ValueError(f"{name}: split_k_mode must be 'stacked' or 'atomic', got {mode!r}")
    return split_k


def _check_options(name: str, driver_unroll, clamp: str | None = None) -> None:
    """The K loop's hint as pycoop.range takes it, and (NV tensor layouts) the edge clamp: the
    others would read repeated or mirrored values past the edges instead of zeros."""
    check_unroll(name, driver_unroll, "driver_unroll")
    if clamp is not None and clamp not in ("constant", "undefined"):
        raise ValueError(f"{name}: clamp must be 'constant' or 'undefined', got {clamp!r}")


def _check_subgroup_tile(name: str, BM: int, BN: int, BK: int, SGM: int, SGN: int) -> None:
    """The SGM x SGN subgroups split the BM x BN tile into equal parts of 16 x 16 matrices and
    walk BK in steps of 16; a part that is not whole would leave rows or columns of the tile
    unwritten (the matrices per subgroup round down), a silently wrong result."""
    if BM % (16 * SGM) or BN % (16 * SGN) or BK % 16:
        raise ValueError(f"{name} needs BM a multiple of 16 x SGM = {16 * SGM}, BN of 16 x SGN "
                         f"= {16 * SGN} and BK of 16; got BM={BM}, BN={BN}, BK={BK}")


def _check_tiling(name: str, M, N, K, BM: int, BN: int, BK: int, split_k: int) -> None:
    """The tiling a GEMM without edge handling needs, checked where the shape is known: at
    trace time (`specialize`) or at the launch (`_launch_tiling`); a wrong shape would
    otherwise give a wrong result."""
    if all(isinstance(v, numbers.Integral) for v in (M, N, K)) and (
            M % BM or N % BN or K % (BK * split_k)):
        what = f"K a multiple of {BK} x {split_k} (BK x split_k)" if split_k > 1 else \
            f"K a multiple of {BK}"
        raise ValueError(f"{name} needs M a multiple of {BM}, N of {BN} and {what}; "
                         f"got M={M}, N={N}, K={K}")


def _launch_tiling(name: str, BM: int, BN: int, BK: int, split_k: int, specialize: bool,
                   n_any: bool = False):
    """The kernel's `requires` (pycoop.kernel): `_check_tiling` on each launch's M, N, K, or
    None where `specialize` makes them compile-time values (checked while tracing). `n_any`:
    N takes any size (the planes GEMMs on X's rows)."""
    if specialize:
        return None

    def requires(M, N, K):
        _check_tiling(name, M, BN if n_any else N, K, BM, BN, BK, split_k)
    return requires


def _k_split(K, split_k: int):
    """(first k, end) of this workgroup's share of K: all of it, or with split-K the
    workgroup_id.z-th of split_k equal parts."""
    if split_k == 1:
        return u32(0), K
    kb = pc.workgroup_id.z * (K // split_k)
    return kb, kb + K // split_k


def _split_rows(m0, M, split_k: int):
    """Row m0 of this workgroup's partial product in the stacked output of a split-K GEMM."""
    return pc.workgroup_id.z * M + m0 if split_k > 1 else m0


@pc.func
def _staged_k_loop(acc, K, BK: int, split_k: int, driver_unroll, fetch, stage, products):
    """The K loop of the staged GEMMs over this workgroup's share of K: the registers that
    fetch(k) loads a k-step ahead are stored into shared memory by stage(*registers), and
    after a barrier the next k-step is fetched while products(acc) multiplies this one."""
    kb, ke = _k_split(K, split_k)
    regs = fetch(kb)
    for k in pc.range(kb, ke, BK, unroll=driver_unroll):
        stage(*regs)
        pc.barrier()
        regs = fetch(pc.min(k + BK, ke - BK))      # the last prefetch reloads the last block
        acc = products(acc)
        pc.barrier()
    return acc


@kernel_cache
def sum_splits(split_k: int):
    """Y = the sum of the split_k partial products a split-K GEMM wrote into P (split_k
    stacked M x N f32 matrices), as f32 vec4: P and Y are passed as `.reshape(-1, 4)` views
    (M * N a multiple of 4), n4 = M * N / 4; the grid is ceil(n4 / 256)."""
    split_k = _check_split_k("sum_splits", split_k)
    F4 = pc.vec(f32, 4)

    @pc.kernel(workgroup_size=256)
    def sum_splits(P: pc.ReadBuffer[F4], Y: pc.WriteBuffer[F4], n4: u32):
        i = pc.workgroup_id.x * 256 + pc.local_invocation_index()
        if i < n4:
            s = P[i]
            for z in range(1, split_k):
                s = s + P[z * n4 + i]
            Y[i] = s
    return sum_splits


@pc.kernel(workgroup_size=128)
def gemm_khr(A: pc.Buffer[f16], B: pc.Buffer[f16], C: pc.Buffer[f32], M: u32, N: u32, K: u32,
             TM: pc.Const = 2, TN: pc.Const = 2):
    sg = pc.subgroup_id()
    m0 = pc.workgroup_id.x * (32 * TM) + (sg // 2) * (16 * TM)
    n0 = pc.workgroup_id.y * (32 * TN) + (sg % 2) * (16 * TN)
    acc = [[Acc.fill(0.0) for _ in range(TN)] for _ in range(TM)]
    for k in range(0, K, 16):
        a = [MatA.load(A, (m0 + 16 * i) * K + k, K) for i in range(TM)]
        b = [MatB.load(B, k * N + n0 + 16 * j, N) for j in range(TN)]
        acc = _mul_add_tiles(acc, a, b)
    _store_tiles(C, acc, m0, n0, N)


@kernel_cache
def gemm_khr_staged(BM: int = 128, BN: int = 256, BK: int = 32, SGM: int = 2, SGN: int = 4,
                    pad: int = 8, specialize: bool = False, driver_unroll: bool | int | None = None,
                    vector_copy: bool = False, split_k: int = 1, split_k_mode: str = "stacked"):
    """Subgroup-scope KHR GEMM with shared-memory staging and a register prefetch.

    SGM x SGN subgroups compute a BM x BN tile of C. Each k-step has four phases:
    - the A and B tiles fetched last step are stored from registers into shared memory
      (rows padded by `pad` halves to spread banks);
    - a barrier;
    - the tiles of the next k-step are loaded from global memory into registers;
    - the matrices are multiplied from shared memory.
    BM must be a multiple of 16 x SGM, BN of 16 x SGN and BK of 16, and the (BM / 16) x
    (BK / 16) tiles of A and (BK / 16) x (BN / 16) of B must divide among the SGM x SGN
    subgroups (whole uvec4 per invocation with `vector_copy`): other tilings are refused.
    M and N must be multiples of the tile, and K a multiple of BK (checked at each launch, or
    when compiled with `specialize`: other shapes would leave edges of C unwritten or drop
    the tail of K).
    `specialize`: M, N, K become compile-time constants (one pipeline per shape; the driver
    folds the address arithmetic). `driver_unroll`: the hint on the K loop (pycoop.range).
    `vector_copy`: the tiles move between global and shared memory as uvec4 (8 halves) per
    invocation instead of as matrices; A and B are then buffers of `pc.vec(u32, 4)` (pass
    `A.view(np.uint32).reshape(-1, 4)`), and M, N, K, BK and pad multiples of 8.
    `split_k`: the grid gains a z dimension of split_k workgroups, each multiplying an equal
    share of K; C then holds split_k stacked M x N partial products (split_k * M rows), summed
    by `sum_splits(split_k)`. K must be a multiple of BK * split_k.
    `split_k_mode="atomic"` (the fused split-K): each workgroup adds its partial product into
    the M x N matrix C with f32 atomic adds instead, so C must hold zeros (or a bias to add
    to) before the launch and no second kernel runs; it needs a device with
    shaderBufferFloat32AtomicAdd (VK_EXT_shader_atomic_float), and the summation order of the
    splits varies from run to run on a GPU.
    """
    name = "gemm_khr_staged"
    BM, BN, BK, SGM, SGN = check_ints(name, BM=BM, BN=BN, BK=BK, SGM=SGM, SGN=SGN)
    pad, = check_ints(name, 0, pad=pad)
    split_k = _check_split_k(name, split_k, split_k_mode)
    _check_options(name, driver_unroll)
    _check_subgroup_tile(name, BM, BN, BK, SGM, SGN)
    atomic = split_k > 1 and split_k_mode == "atomic"
    TM, TN = BM // (16 * SGM), BN // (16 * SGN)
    lda, ldb = BK + pad, BN + pad
    nsg = SGM * SGN
    nth = 32 * nsg
    ta, tb = (BM // 16) * (BK // 16), (BK // 16) * (BN // 16)
    Dim = pc.Const if specialize else u32
    V = 8 if vector_copy else 1                  # halves per element of A, B and shared memory
    El = pc.vec(u32, 4) if vector_copy else f16
    if vector_copy and (pad % 8 or (BM * BK // 8) % nth or (BK * BN // 8) % nth):
        raise ValueError(f"{name}: vector_copy needs pad a multiple of 8 and each tile a whole "
                         f"number of uvec4 per invocation ({nth} invocations)")
    if not vector_copy and (ta % nsg or tb % nsg):
        # each subgroup stages ta / nsg and tb / nsg tiles: a remainder would stay unstaged
        raise ValueError(f"{name} needs the {ta} 16x16 tiles of A (BM x BK) and the {tb} of B "
                         f"(BK x BN) each a multiple of the {nsg} subgroups (SGM x SGN), to "
                         f"stage them in equal shares")

    @pc.kernel(workgroup_size=nth,
               requires=_launch_tiling(name, BM, BN, BK, split_k, specialize))
    def gemm_khr_staged(A: pc.Buffer[El], B: pc.Buffer[El], C: pc.Buffer[f32], M: Dim, N: Dim,
                        K: Dim):
        sa, sb = pc.shared(El, BM * lda // V), pc.shared(El, BK * ldb // V)
        scratch = pc.shared(f32, nsg * 256) if atomic else None     # a tile per subgroup
        sg = pc.subgroup_id()
        wm, wn = (sg // SGN) * (16 * TM), (sg % SGN) * (16 * TN)
        m0, n0 = pc.workgroup_id.x * BM, pc.workgroup_id.y * BN
        if vector_copy:
            # the uvec4 of the A and B blocks this invocation copies: (row, column in uvec4)
            t = pc.local_invocation_index()
            pa, pb = _uvec4_slots(t, nth, BM, BK), _uvec4_slots(t, nth, BK, BN)

            def fetch(kn):
                return ([A[(m0 + r) * (K // 8) + kn // 8 + c] for r, c in pa],
                        [B[(kn + r) * (N // 8) + n0 // 8 + c] for r, c in pb])

            def stage(ra, rb):
                for (r, c), v in zip(pa, ra):
                    sa[r * (lda // 8) + c] = v
                for (r, c), v in zip(pb, rb):
                    sb[r * (ldb // 8) + c] = v
        else:
            # the 16x16 tiles of the A and B blocks this subgroup copies: (row, col) in tiles
            pa = [divmod(sg * (ta // nsg) + t, BK // 16) for t in range(ta // nsg)]
            pb = [divmod(sg * (tb // nsg) + t, BN // 16) for t in range(tb // nsg)]

            def fetch(kn):
                return ([MatA.load(A, (m0 + r * 16) * K + kn + c * 16, K) for r, c in pa],
                        [MatB.load(B, (kn + r * 16) * N + n0 + c * 16, N) for r, c in pb])

            def stage(ra, rb):
                for (r, c), tile in zip(pa, ra):
                    pc.store(sa, r * 16 * lda + c * 16, tile, lda)
                for (r, c), tile in zip(pb, rb):
                    pc.store(sb, r * 16 * ldb + c * 16, tile, ldb)
        _check_tiling("gemm_khr_staged", M, N, K, BM, BN, BK, split_k)
        acc = _staged_k_loop([[Acc.fill(0.0) for _ in range(TN)] for _ in range(TM)], K, BK,
                             split_k, driver_unroll, fetch, stage,
                             lambda acc: _tile_products(acc, sa, lda, sb, ldb, wm, wn, BK, V))
        if atomic:
            _add_tiles_atomic(C, acc, scratch, sg, m0 + wm, n0 + wn, N)
        else:
            _store_tiles(C, acc, _split_rows(m0, M, split_k) + wm, n0 + wn, N)
    return gemm_khr_staged


def gemm_workgroup_tile(TM: int = 2, TN: int = 2) -> tuple[int, int]:
    return 32 * TM, 32 * TN


def gemm_reference(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """The NumPy result the kernel must match (f16 products are exact in f32): A (M x K) @
    B (K x N) in f32."""
    A, B = np.asarray(A), np.asarray(B)
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"gemm_reference: A must be M x K and B K x N (A's columns B's rows), "
                         f"got A of shape {A.shape} and B of shape {B.shape}")
    return A.astype(np.float32) @ B.astype(np.float32)


@kernel_cache
def gemm_nv(BM: int = 128, BN: int = 128, BK: int = 32, invocations: int = 256,
            clamp: str = "constant", unroll: int = 1, specialize: bool = False,
            driver_unroll: bool | int | None = None, split_k: int = 1):
    """Workgroup-scope GEMM through NV tensor layouts: each workgroup computes a BM x BN tile
    of C = A @ B, f16 in, f32 accumulate. With the Constant clamp any M, N, K work (edges read
    zeros); "undefined" needs M, N multiples of the tile and K of BK * unroll. `unroll` k-steps
    are traced per loop iteration. `specialize`, `driver_unroll` and `split_k` as in
    gemm_khr_staged; with the Constant clamp and split_k > 1 each split covers
    ceil(K / (split_k * BK * unroll)) k-steps, and rows past M are clipped from its store,
    "undefined" needs M and N multiples of the tile and K of BK * unroll * split_k (checked
    at each launch, or when compiled with `specialize`)."""
    name = "gemm_nv"
    BM, BN, BK, invocations, unroll = check_ints(name, BM=BM, BN=BN, BK=BK, invocations=invocations,
                                            unroll=unroll)
    split_k = _check_split_k(name, split_k)
    _check_options(name, driver_unroll, clamp)
    MA = pc.coopmat[f16, pc.Workgroup, BM, BK, pc.UseA]
    MB = pc.coopmat[f16, pc.Workgroup, BK, BN, pc.UseB]
    MC = pc.coopmat[f32, pc.Workgroup, BM, BN, pc.Accumulator]
    Dim = pc.Const if specialize else u32

    @pc.kernel(workgroup_size=invocations, requires=_launch_tiling(
        "gemm_nv", BM, BN, BK * unroll, split_k, specialize) if clamp == "undefined" else None)
    def gemm_nv(A: pc.Buffer[f16], B: pc.Buffer[f16], C: pc.Buffer[f32], M: Dim, N: Dim, K: Dim):
        la = pc.nv.tensor_layout(2, clamp=clamp).dimension(M, K)
        lb = pc.nv.tensor_layout(2, clamp=clamp).dimension(K, N)
        lc = pc.nv.tensor_layout(2, clamp=clamp).dimension(M * split_k, N)
        m0, n0 = pc.workgroup_id.x * BM, pc.workgroup_id.y * BN
        step = BK * unroll
        if clamp == "undefined":
            _check_tiling("gemm_nv", M, N, K, BM, BN, step, split_k)
        if clamp == "undefined" or split_k == 1:
            kb, ke = _k_split(K, split_k)
        else:                                    # equal shares of whole k-steps; zeros past K
            kb, ke = _k_split((K + step * split_k - 1) // (step * split_k) * step * split_k,
                              split_k)
        acc = MC.fill(0.0)
        for k in pc.range(kb, ke, step, unroll=driver_unroll):
            for u in range(unroll):
                a = pc.nv.load_tensor(A, la.slice(m0, BM, k + BK * u, BK), MA)
                b = pc.nv.load_tensor(B, lb.slice(k + BK * u, BK, n0, BN), MB)
                acc = pc.mul_add(a, b, acc)
        out = lc.slice(_split_rows(m0, M, split_k), BM, n0, BN)
        if split_k > 1 and clamp != "undefined":    # the tile's rows past M belong to the next split
            pc.nv.store_tensor(C, out, acc, view=pc.nv.tensor_view(2).clip(0, M - m0, 0, BN))
        else:
            pc.nv.store_tensor(C, out, acc)
    return gemm_nv


Q4_0 = pc.struct("Q4_0", d=f16, qs=pc.array(pc.u16, 8))   # 18 bytes: scale, 32 nibbles


def _q4_0_weight(block, block_coord, coord_in_block):
    """One weight of a llama.cpp Q4_0 block, (nibble - 8) * scale: weight j is the low nibble
    of byte j % 16 for j < 16, else its high nibble. The bytes are read in u16 pairs (half the
    loads of byte reads; 1.07x on the H200), and the nibble becomes an f16 without an integer
    conversion: OR-ed into the mantissa of 1024.0 (0x6400) it reads as 1024 + q, and
    subtracting 1032 is exact (1.03x on the H100)."""
    j = coord_in_block[1]
    shift = ((j & 16) >> 2) + ((j & 1) << 3)        # nibble of byte j % 16 inside its u16
    q = (u32(block.qs[(j & 14) >> 1]) >> shift) & 15
    return (pc.bitcast(pc.u16(q | 0x6400), f16) - f16(1032.0)) * block.d


@kernel_cache
def gemm_q4_0(BM: int = 128, BN: int = 128, BK: int = 32, invocations: int = 256, unroll: int = 1,
              specialize: bool = False, driver_unroll: bool | int | None = None,
              clamp: str = "constant", weights_first: bool = False):
    """Y (M x N, f32) = X (M x K, f16) @ W.T, W (N x K) in Q4_0 blocks of 32 along K,
    decoded by a decode function while loading (workgroup scope). Each workgroup computes a
    BM x BN tile of Y; the grid is (ceil(M / BM), ceil(N / BN)).

    By default Y = X @ W.T with W read through a transposing view. `weights_first` computes each
    tile as Y.T = W @ X.T instead: the weights are the A operand, decoded in their own layout,
    X is read and Y written through transposing views, and workgroups walk the N tiles of one
    M tile one after another so that they share the X tile in cache (on the H200 the faster
    layout in the best configuration, not in all). The other options as in gemm_nv
    ("undefined": M and N multiples of the tile, K of BK * unroll)."""
    return decoded_gemm("gemm_q4_0", Q4_0, 32, _q4_0_weight, BM, BN, BK, invocations, unroll,
                        specialize, driver_unroll, clamp, weights_first)


def decoded_gemm(name: str, block_type, qk: int, decode, BM: int, BN: int, BK: int,
                  invocations: int, unroll: int, specialize: bool, driver_unroll, clamp: str,
                  weights_first: bool):
    """The kernel of the decode-function GEMMs (`gemm_q4_0`, `gemm_q8_0`, `gemm_q4_k`): W's
    blocks of `qk` weights of `block_type`, decoded by `decode` as the NV tensor loads read
    them (see gemm_q4_0 for the options)."""
    BM, BN, BK, invocations, unroll = check_ints(name, BM=BM, BN=BN, BK=BK, invocations=invocations,
                                            unroll=unroll)
    _check_options(name, driver_unroll, clamp)
    if BK % 32 or (qk > 32 and qk % BK and BK % qk):
        raise ValueError(f"{name}: BK must be a multiple of 32 that divides or is a multiple of "
                         f"the {qk}-weight {block_type.name} block, got {BK}")
    rows, cols = (BN, BM) if weights_first else (BM, BN)       # of the matrices multiplied
    MA = pc.coopmat[f16, pc.Workgroup, rows, BK, pc.UseA]
    MB = pc.coopmat[f16, pc.Workgroup, BK, cols, pc.UseB]
    MC = pc.coopmat[f32, pc.Workgroup, rows, cols, pc.Accumulator]
    Dim = pc.Const if specialize else u32

    def gemm(X: pc.Buffer[f16], W: pc.ReadBuffer[block_type], Y: pc.Buffer[f32], M: Dim, N: Dim,
             K: Dim):
        lx = pc.nv.tensor_layout(2, clamp=clamp).dimension(M, K)
        lw = pc.nv.tensor_layout(2, clamp=clamp).block_size(1, qk).dimension(N, K)
        ly = pc.nv.tensor_layout(2, clamp=clamp).dimension(M, N)
        tr = pc.nv.tensor_view(2, False, (1, 0))
        if weights_first:
            tile = pc.workgroup_id.x + pc.workgroup_id.y * pc.num_workgroups.x
            m0, n0 = (tile // pc.num_workgroups.y) * BM, (tile % pc.num_workgroups.y) * BN
        else:
            m0, n0 = pc.workgroup_id.x * BM, pc.workgroup_id.y * BN
        if clamp == "undefined":
            _check_tiling(name, M, N, K, BM, BN, BK * unroll, 1)
        acc = MC.fill(0.0)
        for k in pc.range(0, K, BK * unroll, unroll=driver_unroll):
            for u in range(unroll):
                kk = k + BK * u
                if weights_first:
                    a = pc.nv.load_tensor(W, lw.slice(n0, BN, kk, BK), MA, decode=decode)
                    b = pc.nv.load_tensor(X, lx.slice(m0, BM, kk, BK), MB, view=tr)
                else:
                    a = pc.nv.load_tensor(X, lx.slice(m0, BM, kk, BK), MA)
                    b = pc.nv.load_tensor(W, lw.slice(n0, BN, kk, BK), MB, view=tr, decode=decode)
                acc = pc.mul_add(a, b, acc)
        pc.nv.store_tensor(Y, ly.slice(m0, BM, n0, BN), acc, view=tr if weights_first else None)

    gemm.__name__ = gemm.__qualname__ = name
    return pc.kernel(workgroup_size=invocations, requires=_launch_tiling(
        name, BM, BN, BK * unroll, 1, specialize) if clamp == "undefined" else None)(gemm)


def _nibble_pair(bits, d):
    """Two weights from the nibbles at bits 0-3 and 16-19 of `bits`, as 2 x f16 in a u32.
    OR-ed into the mantissa of 1024.0 (0x6400) a nibble reads as 1024 + q; one f16x2
    subtraction and multiplication give (q - 8) * d, rounded as llama.cpp's f16 dequantisation."""
    w = pc.bitcast((bits & 0x000F000F) | 0x64006400, pc.vec(f16, 2))
    return pc.bitcast((w - pc.make_vector([f16(1032.0)] * 2)) * d, u32)


def _dequantise_word(c, d) -> tuple[list, list]:
    """The 8 weights of the 4 nibble bytes in u32 `c` (Q4_0: byte j holds weight j in its low
    nibble and weight j + 16 in its high one) with scale d (f16x2): the low-nibble weights as two
    f16x2, then the high-nibble ones."""
    s01 = (c & 0xFF) | ((c & 0xFF00) << 8)            # bytes 0, 1 -> 0, 2
    s23 = ((c >> 16) & 0xFF) | ((c >> 8) & 0xFF0000)  # bytes 2, 3 -> 0, 2
    return ([_nibble_pair(s01, d), _nibble_pair(s23, d)],
            [_nibble_pair(s01 >> 4, d), _nibble_pair(s23 >> 4, d)])


@kernel_cache
def gemm_q4_0_staged(BM: int = 128, BN: int = 128, BK: int = 64, SGM: int = 2, SGN: int = 4,
                     pad: int = 8, specialize: bool = False,
                     driver_unroll: bool | int | None = None):
    """Y (M x N, f32) = X (M x K, f16) @ W.T, W (N x K) in Q4_0 blocks, with subgroup-scope KHR
    matrices and the weights dequantised by hand (gemm_khr_staged's structure otherwise).

    The raw Q4_0 bytes of a W tile (BN rows of 18 * BK / 32 contiguous bytes) are copied as
    u32 words by consecutive invocations (coalesced) into a shared staging area one k-step
    ahead. Each k-step has two phases separated by barriers:
    - the X tile (uvec4 copies, as gemm_khr_staged's `vector_copy`) and the f16 W tile
      dequantised in the previous phase are stored from registers into shared memory, and so
      is the next raw W tile;
    - each invocation dequantises half Q4_0 blocks (16 weights) of that raw tile into
      registers, the next tiles are fetched, and the matrices are multiplied.

    X is a buffer of uvec4 (`X.view(np.uint32).reshape(-1, 4)`), W the raw Q4_0 bytes as u32
    (`W.view(np.uint32)`). M and N must be multiples of the tile and K of BK (checked at each
    launch, or when compiled with `specialize`); BM a multiple of 16 x SGM, BN of 16 x SGN, BK of 64 (rows of blocks stay
    4-byte aligned), pad of 8. The grid is (M // BM, N // BN).
    """
    name = "gemm_q4_0_staged"
    BM, BN, BK, SGM, SGN = check_ints(name, BM=BM, BN=BN, BK=BK, SGM=SGM, SGN=SGN)
    pad, = check_ints(name, 0, pad=pad)
    _check_options(name, driver_unroll)
    _check_subgroup_tile(name, BM, BN, BK, SGM, SGN)
    TM, TN = BM // (16 * SGM), BN // (16 * SGN)
    ld = BK + pad                                 # halves per shared row of X and of W
    nth = 32 * SGM * SGN
    halves = BN * BK // 16                        # half blocks of a W tile
    sw_words = 9 * BK // 64                       # u32 words per row and k-step
    sr_ld = sw_words | 1                          # odd row stride: conflict-free decode reads
    raw = BN * sw_words                           # words per k-step
    Dim = pc.Const if specialize else u32
    U4 = pc.vec(u32, 4)
    if BK % 64 or pad % 8 or (BM * BK // 8) % nth or halves % nth:
        raise ValueError(f"gemm_q4_0_staged needs BK a multiple of 64, pad of 8, and whole uvec4 "
                         f"of X and half Q4_0 blocks per invocation ({nth} invocations)")

    @pc.kernel(workgroup_size=nth, requires=_launch_tiling(name, BM, BN, BK, 1, specialize))
    def gemm_q4_0_staged(X: pc.ReadBuffer[U4], W: pc.ReadBuffer[u32], Y: pc.Buffer[f32],
                         M: Dim, N: Dim, K: Dim):
        sx, sw = pc.shared(U4, BM * ld // 8), pc.shared(U4, BN * ld // 8)
        sr = pc.shared(u32, BN * sr_ld)
        sg, t = pc.subgroup_id(), pc.local_invocation_index()
        wm, wn = (sg // SGN) * (16 * TM), (sg % SGN) * (16 * TN)
        m0, n0 = pc.workgroup_id.x * BM, pc.workgroup_id.y * BN
        px = _uvec4_slots(t, nth, BM, BK)
        pr = [divmod(t + q * nth, sw_words) for q in range(-(-raw // nth))]        # (row, word)
        pd = [divmod(t + q * nth, BN) for q in range(halves // nth)]   # (2 block + half, row)

        def fetch_x(kn):
            return [X[(m0 + r) * (K // 8) + kn // 8 + c] for r, c in px]

        def fetch_w(kn):
            words = []
            for q, (r, j) in enumerate(pr):
                v = u32(0)
                if (q + 1) * nth <= raw or t + q * nth < raw:    # the last round may be partial
                    v = W[(n0 + r) * (K * 9 // 64) + kn * 9 // 64 + j]
                words.append(v)
            return words

        def stage_w(words):
            for q, ((r, j), v) in enumerate(zip(pr, words)):
                if (q + 1) * nth <= raw or t + q * nth < raw:
                    sr[r * sr_ld + j] = v

        def dequantise():
            """This invocation's half blocks of the staged raw tile as f16, 8 per uvec4."""
            out = []
            for bh, r in pd:
                # half h of block b of row r: the block is bytes 18b.. of the row's words (an
                # f16 scale, then 16 bytes of nibbles); the half is nibble bytes 8h .. 8h + 7
                b, h = bh >> 1, bh & 1
                base = r * sr_ld + ((b * 9) >> 1)
                odd = (b & 1) == 1                    # odd blocks start half-way into a word
                d = pc.bitcast(pc.u16((sr[base] >> pc.select(odd, u32(16), u32(0))) & 0xFFFF), f16)
                d = pc.make_vector([d, d])
                a = [sr[base + 2 * h + i] for i in range(3)]
                lo, hi = [], []
                for i in range(2):                    # nibble bytes 8h + 4i .. 8h + 4i + 3
                    wl, wh = _dequantise_word(
                        pc.select(odd, a[i + 1], (a[i] >> 16) | (a[i + 1] << 16)), d)
                    lo, hi = lo + wl, hi + wh
                out += [pc.make_vector(lo), pc.make_vector(hi)]
            return out

        def stage_dequantised(vals):
            for q, (bh, r) in enumerate(pd):
                row = r * (ld // 8) + 4 * (bh >> 1) + (bh & 1)   # weights 8h.. (low nibbles),
                sw[row], sw[row + 2] = vals[2 * q], vals[2 * q + 1]   # then 16 + 8h..

        _check_tiling(name, M, N, K, BM, BN, BK, 1)
        acc = [[Acc.fill(0.0) for _ in range(TN)] for _ in range(TM)]
        xs = fetch_x(u32(0))
        stage_w(fetch_w(u32(0)))
        ws = fetch_w(pc.min(u32(BK), K - BK))
        pc.barrier()
        dq = dequantise()
        pc.barrier()
        for k in pc.range(0, K, BK, unroll=driver_unroll):
            for (r, c), v in zip(px, xs):
                sx[r * (ld // 8) + c] = v
            stage_dequantised(dq)
            stage_w(ws)                                # raw W of the next k-step
            pc.barrier()
            # dequantising here, beside the products, rather than in the store phase: 1.04x
            # (H100, 2026-11-22)
            dq = dequantise()
            xs = fetch_x(pc.min(k + BK, K - BK))      # the last prefetches reload the last block
            ws = fetch_w(pc.min(k + 2 * BK, K - BK))
            acc = _tile_products(acc, sx, ld, sw, ld, wm, wn, BK, 8, b_col_major=True)
            pc.barrier()
        _store_tiles(Y, acc, m0 + wm, n0 + wn, N)
    return gemm_q4_0_staged


def rows_of_blocks(raw, rows: int, K: int, qk: int, size: int, fmt: str,
                   name: str = "rows_of_blocks") -> np.ndarray:
    """The raw bytes of a rows x K matrix of `fmt` blocks (qk weights in `size` bytes each)
    as rows x blocks x bytes; a clear error, naming the caller `name`, where rows or K is
    not a positive int, K or the byte count does not fit, or a 2-D `raw` has other rows (or
    rows of other lengths) than rows x K weights: read in the wrong shape, the bytes would
    still give weights, wrong ones."""
    rows, K = check_ints(name, rows=rows, K=K)
    if K % qk:
        raise ValueError(f"{name}: {fmt} needs K a multiple of {qk} (its block), got K={K}")
    a = numeric_array(name, "raw", raw, f"an array of the {fmt} bytes (e.g. uint8)")
    row_bytes = K // qk * size
    if a.nbytes != rows * row_bytes:
        raise ValueError(f"{name}: {rows} x {K} {fmt} weights are {rows * row_bytes} bytes, "
                         f"got {a.nbytes}")
    if a.ndim == 2 and (a.shape[0] != rows or a.shape[1] * a.itemsize != row_bytes):
        raise ValueError(f"{name}: raw is {a.shape[0]} rows of {a.shape[1] * a.itemsize} bytes, "
                         f"but {rows} x {K} {fmt} weights are {rows} rows of {row_bytes}")
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(rows, K // qk, size)


def q4_0_planes(raw: np.ndarray, rows: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """llama.cpp Q4_0 blocks (raw bytes of a rows x K matrix) as two planes, losslessly: the
    16 nibble bytes of each block as one uvec4 (rows * K / 32 x 4 u32), and the scales
    (rows * K / 32 f16). The layout of `gemm_q4_0_planes`."""
    b = rows_of_blocks(raw, rows, K, 32, 18, "q4_0", "q4_0_planes")
    return (np.ascontiguousarray(b[..., 2:]).view(np.uint32).reshape(-1, 4),
            np.ascontiguousarray(b[..., :2]).view(np.float16).reshape(-1))


@kernel_cache
def gemm_q4_0_planes(BM: int = 128, BN: int = 128, BK: int = 64, SGM: int = 2, SGN: int = 4,
                     pad: int = 8, specialize: bool = False,
                     driver_unroll: bool | int | None = None, split_k: int = 1,
                     split_k_mode: str = "stacked", x_rows: bool = False,
                     x_f32: bool = False):
    """Y (M x N, f32) = W (M x K, Q4_0) @ X (K x N, f16), the weights as two planes
    (`q4_0_planes`): Q, a uvec4 of nibbles per block, and D, an f16 scale per block.

    gemm_khr_staged's structure with the weights as the A operand: each invocation loads whole
    blocks (one aligned uvec4 and a scale, consecutive invocations on consecutive blocks)
    a k-step ahead and dequantises them in registers just before storing them into the
    shared A tile, whose rows run along K as the blocks do; X is copied as uvec4. Both tiles
    are read row-major. X is passed as uvec4 (`X.view(np.uint32).reshape(-1, 4)`). M and N
    must be multiples of the tile (N any size with `x_rows`, below) and K of BK x split_k
    (checked at each launch, or when compiled with `specialize`: other shapes would leave
    edges of Y unwritten or drop the tail of K). BM a multiple of 16 x SGM, BN of 16 x SGN, BK
    of 32, pad of 8 (other tilings are refused). The grid is (M // BM, N // BN), or (M // BM,
    N // BN, split_k) with `split_k` and `split_k_mode` as in gemm_khr_staged. `x_rows=True`:
    X is N x K f16 (`X.view(np.uint32).reshape(-1, 4)`) and Y is N x M (with split_k stacked:
    split_k N x M matrices), the layouts of activations, so that few vectors need no
    transposes: the small-N kernel of `matmul_q`; any N (rows past N read as zeros; Y, or each
    split's matrix, has N rounded up to BN rows); with `x_f32=True` too, X is f32 N x K
    (`X.reshape(-1, 4)`) rounded to f16 as it is staged.
    """
    def stage_block(put, qs, d):
        lo, hi = [], []
        for i in range(4):
            wl, wh = _dequantise_word(qs[0][i], pc.make_vector([d, d]))
            lo, hi = lo + wl, hi + wh
        for i, v in enumerate([lo[:4], lo[4:], hi[:4], hi[4:]]):   # weights 8i..8i+7
            put(i, pc.make_vector(v))
    return planes_gemm("gemm_q4_0_planes", "Q4_0", 1, stage_block, BM, BN, BK, SGM, SGN, pad,
                       specialize, driver_unroll, split_k, split_k_mode, x_rows=x_rows, x_f32=x_f32)


def planes_gemm(name: str, fmt: str, words: int, stage_block, BM: int, BN: int, BK: int,
                SGM: int, SGN: int, pad: int, specialize: bool, driver_unroll, split_k: int,
                split_k_mode: str, scale_type=f16, x_rows: bool = False, x_f32: bool = False):
    """The kernel of the planes GEMMs (`gemm_q4_0_planes`, `gemm_q8_0_planes`,
    `gemm_q4_k_planes`): W's blocks of 32 weights as `words` uvec4 of Q plus one `scale_type`
    per block in D (an f16 scale, or Q4_K's f16x2 scale and min), loaded a k-step ahead, and
    `stage_block(put, qs, d)` dequantising one block (`qs`: its uvec4s, `d` its D element) and
    storing uvec4 `i` of its 8 halves with `put(i, v)` into the shared W tile; the rest is
    gemm_khr_staged's. `x_rows`: X is N x K and Y is N x M (the activations' own layout, rows
    of vectors; any N: rows past N read as zeros, Y has N rounded up to BN rows), X's tile kept
    column-major in shared memory. `x_f32` (with `x_rows`): X is f32 (as vec4), rounded to
    f16 as it is staged."""
    BM, BN, BK, SGM, SGN = check_ints(name, BM=BM, BN=BN, BK=BK, SGM=SGM, SGN=SGN)
    pad, = check_ints(name, 0, pad=pad)
    split_k = _check_split_k(name, split_k, split_k_mode)
    _check_options(name, driver_unroll)
    _check_subgroup_tile(name, BM, BN, BK, SGM, SGN)
    atomic = split_k > 1 and split_k_mode == "atomic"
    TM, TN = BM // (16 * SGM), BN // (16 * SGN)
    lda = BK + pad                                # halves per shared row of W
    ldx = BK + pad if x_rows else BN + pad        # per shared column (x_rows) or row of X
    nth = 32 * SGM * SGN
    blocks = BM * BK // 32                        # blocks of a W tile
    Dim = pc.Const if specialize else u32
    U4 = pc.vec(u32, 4)
    if x_f32 and not x_rows:
        raise ValueError(f"{name}: x_f32 reads X as rows (x_rows=True)")
    if BK % 32 or pad % 8 or (BK * BN // 8) % nth or blocks % nth:
        raise ValueError(f"{name} needs BK a multiple of 32, pad of 8, and whole "
                         f"uvec4 of X and {fmt} blocks per invocation ({nth} invocations)")

    XT = pc.vec(f32, 4) if x_f32 else U4

    def kernel(Q: pc.ReadBuffer[U4], D: pc.ReadBuffer[scale_type], X: pc.ReadBuffer[XT],
               Y: pc.Buffer[f32], M: Dim, N: Dim, K: Dim):
        sw, sx = pc.shared(U4, BM * lda // 8), pc.shared(U4, (BN if x_rows else BK) * ldx // 8)
        scratch = pc.shared(f32, SGM * SGN * 256) if atomic else None     # a tile per subgroup
        sg, t = pc.subgroup_id(), pc.local_invocation_index()
        wm, wn = (sg // SGN) * (16 * TM), (sg % SGN) * (16 * TN)
        m0, n0 = pc.workgroup_id.x * BM, pc.workgroup_id.y * BN
        px = _uvec4_slots(t, nth, BN, BK) if x_rows else _uvec4_slots(t, nth, BK, BN)
        pb = [divmod(t + q * nth, BK // 32) for q in range(blocks // nth)]   # (row, block)

        def fetch_x(kn, r, c):
            if not x_rows:
                return X[(kn + r) * (N // 8) + n0 // 8 + c]
            row = n0 + r                       # rows past N: row N - 1 read, then zeroed
            if not x_f32:
                zero = pc.make_vector([u32(0)] * 4)
                return pc.select(row < N, X[pc.min(row, N - 1) * (K // 8) + kn // 8 + c], zero)
            at = pc.min(row, N - 1) * (K // 4) + kn // 4 + 2 * c
            zero = pc.make_vector([f32(0.0)] * 4)
            return tuple(pc.select(row < N, X[at + h], zero) for h in range(2))

        def fetch(kn):
            idx = [(m0 + r) * (K // 32) + kn // 32 + b for r, b in pb]
            return [((Q[i],) if words == 1 else tuple(Q[words * i + j] for j in range(words)),
                     D[i]) for i in idx], [fetch_x(kn, r, c) for r, c in px]

        def stage(w, xs):
            for (r, b), (qs, d) in zip(pb, w):
                def put(i, v, r=r, b=b):
                    sw[r * (lda // 8) + 4 * b + i] = v
                stage_block(put, qs, d)
            for (r, c), v in zip(px, xs):
                sx[r * (ldx // 8) + c] = pack_f16([v[h][e] for h in range(2) for e in range(4)]) \
                    if x_f32 else v

        _check_tiling(name, M, BN if x_rows else N, K, BM, BN, BK, split_k)
        # dequantising in the store phase (`stage`) rather than beside the products: 1.05x
        # (gemm_q4_0_planes, H100, 2026-11-22)
        acc = _staged_k_loop([[Acc.fill(0.0) for _ in range(TN)] for _ in range(TM)], K, BK,
                             split_k, driver_unroll, fetch, stage,
                             lambda acc: _tile_products(acc, sw, lda, sx, ldx, wm, wn, BK, 8,
                                                        b_col_major=x_rows))
        if atomic:
            _add_tiles_atomic(Y, acc, scratch, sg, m0 + wm, n0 + wn, M if x_rows else N, x_rows)
        elif x_rows:              # split z's partial product: the z-th N x M matrix (N padded)
            rows = (N + BN - 1) // BN * BN
            _store_tiles(Y, acc, m0 + wm, _split_rows(n0, rows, split_k) + wn, M, True)
        else:
            _store_tiles(Y, acc, _split_rows(m0, M, split_k) + wm, n0 + wn, N)

    kernel.__name__ = kernel.__qualname__ = name
    return pc.kernel(workgroup_size=nth, requires=_launch_tiling(name, BM, BN, BK, split_k,
                                                                 specialize, n_any=x_rows))(kernel)
