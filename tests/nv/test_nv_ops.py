"""pycoop.nv through real kernels on the emulator: tensor loads/stores against the spec
pseudo-code reference (tests/nv/test_addressing.py), decode functions, reductions,
per-element ops, conversions, transposes, capabilities, and every trace-time rule."""
from __future__ import annotations

import inspect
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pycoop as pc
from pycoop import f16, f32, u32
from pycoop.ops.nv.addressing import Outcome

sys.path.insert(0, str(Path(__file__).parent))
import test_addressing as R  # noqa: E402  (the independent reference)

CLAMPS = ["undefined", "constant", "clamp_to_edge", "repeat", "mirror_repeat"]
Acc16 = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.Accumulator]
Acc = pc.coopmat[f32, pc.Subgroup, 16, 16, pc.Accumulator]
SPV = []          # every kernel of this module is validated at the end


def line_of(marker: str, fn) -> int:
    src, start = inspect.getsourcelines(fn)
    return start + next(i for i, l in enumerate(src) if marker in l)


def tensor_kernel(clamp, view_key, store):
    has_dims, perm = view_key if view_key else (False, (0, 1))

    @pc.kernel(workgroup_size=32)
    def k(X: pc.Buffer[f16], Out: pc.Buffer[f16], P: pc.Buffer[u32]):
        lay = pc.nv.tensor_layout(2, clamp).dimension(P[0], P[1]).stride(P[2], P[3])
        lay = lay.slice(P[4], P[5], P[6], P[7]).clamp_value(P[8])
        view = pc.nv.tensor_view(2, has_dims, perm).dimension(P[9], P[10]).stride(P[11], P[12])
        view = view.clip(P[13], P[14], P[15], P[16])
        if store:
            if view_key:
                pc.nv.store_tensor(Out, lay, Acc16.load(X, 0, 16), view=view)
            else:
                pc.nv.store_tensor(Out, lay, Acc16.load(X, 0, 16))
        else:
            if view_key:
                m = pc.nv.load_tensor(X, lay, Acc16, view=view, object=Acc16.fill(7.0))
            else:
                m = pc.nv.load_tensor(X, lay, Acc16, object=Acc16.fill(7.0))
            pc.store(Out, 0, m, 16)
    SPV.append(k)
    return k


_KERNELS: dict = {}


def _kernel(*key):
    if key not in _KERNELS:
        _KERNELS[key] = tensor_kernel(*key)
    return _KERNELS[key]


def reference_layout(clamp, P):
    t = R.ref_create_layout(2, CLAMPS.index(clamp))
    t = R.ref_layout_set_dimension(t, [P[0], P[1]])
    t = R.ref_layout_set_stride(t, [P[2], P[3]])
    t = R.ref_layout_slice(t, [P[4], P[6]], [P[5], P[7]])
    t = R.ref_layout_set_clamp_value(t, P[8])
    return t


def reference_view(view_key, P):
    if not view_key:
        return None
    v = R.ref_create_view(2, view_key[0], view_key[1])
    v = R.ref_view_set_dimension(v, [P[9], P[10]])
    v = R.ref_view_set_stride(v, [P[11], P[12]])
    return R.ref_view_set_clip(v, P[13], P[14], P[15], P[16])


params = st.tuples(
    st.integers(1, 40), st.integers(1, 40), st.integers(0, 48), st.integers(0, 3),
    st.integers(0, 45), st.integers(1, 24), st.integers(0, 45), st.integers(1, 24),
    st.integers(0, 2**16 - 1),
    st.integers(1, 24), st.integers(1, 24), st.integers(0, 24), st.integers(0, 2),
    st.integers(0, 8), st.integers(0, 20), st.integers(0, 8), st.integers(0, 20))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clamp=st.sampled_from(CLAMPS), view=st.sampled_from([None, (False, (0, 1)), (False, (1, 0)),
                                                           (True, (0, 1)), (True, (1, 0))]),
       P=params, store=st.booleans())
def test_tensor_access_matches_reference(clamp, view, P, store):
    rng = np.random.default_rng(sum(P))
    X = rng.standard_normal(4096 if not store else 256).astype(np.float16)
    Out = np.zeros(4096 if store else 256, np.float16)
    t, v = reference_layout(clamp, P), reference_view(view, P)
    elems = [R.ref_element(t, v, r, c, 16, store) for r in range(16) for c in range(16)]
    faults = [e for e in elems if e.outcome >= Outcome.FAULT_UNDEFINED]
    expect = np.zeros(4096, np.float16) if store else np.full(256, 7.0, np.float16)
    writes = {}
    src = X.astype(np.float16)
    for i, e in enumerate(elems):
        if e.outcome == Outcome.ACCESSED:
            if store:
                writes.setdefault(e.index, set()).add(src[i].tobytes())
                expect[e.index] = src[i]
            else:
                expect[i] = src[e.index] if e.index < src.size else np.nan
        elif e.outcome == Outcome.CONSTANT and not store:
            expect[i] = np.array(P[8] & 0xFFFF, np.uint16).view(np.float16)
    racy = any(len(s) > 1 for s in writes.values())
    oob = (not store and any(e.outcome == Outcome.ACCESSED and e.index >= src.size for e in elems)) or \
          (store and any(idx >= 4096 for idx in writes))
    k = _kernel(clamp, view, store)
    if faults or racy or oob:
        with pytest.raises(pc.EmulatorError):
            k[1](X, Out, np.array(P, np.uint32), backend="emulator")
        return
    k[1](X, Out, np.array(P, np.uint32), backend="emulator")
    np.testing.assert_array_equal(Out.view(np.uint16), expect.view(np.uint16))


def test_decode_gets_block_pointer_and_coordinates():
    Blk = pc.struct("Blk", base=f16, pad=f16, vals=pc.array(f16, 6))   # 16 bytes, 2x3 block
    Mat = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]

    def through_pointer(block, bc, cib):
        return block.base + block.vals[cib[0] * 3 + cib[1]]

    def through_coordinates(block, bc, cib):
        return f16(bc[0] * 7 + bc[1]) * 10.0 + f16(cib[0] * 3 + cib[1])

    @pc.kernel(workgroup_size=32)
    def k(B: pc.ReadBuffer[Blk], Out: pc.Buffer[f16]):
        lay = pc.nv.tensor_layout(2, "clamp_to_edge").block_size(2, 3).dimension(20, 21)
        for i, fn in enumerate((through_pointer, through_coordinates)):
            m = pc.nv.load_tensor(B, lay.slice(1, 16, 2, 16), Mat, decode=fn)
            pc.store(Out, 256 * i, pc.convert(m, Acc16.with_(use=pc.UseA)), 16)
    SPV.append(k)
    nb = 10 * 7
    raw = np.zeros((nb, 8), np.float16)
    raw[:, 0] = np.arange(nb) * 10
    raw[:, 2:] = np.arange(6)
    Out = np.zeros(512, np.float16)
    k[1](raw.view(np.uint8).reshape(-1), Out, backend="emulator")
    r, c = np.mgrid[1:17, 2:18]
    r, c = np.minimum(r, 19), np.minimum(c, 20)          # clamp to edge
    want = ((r // 2) * 7 + c // 3) * 10 + (r % 2) * 3 + c % 3
    np.testing.assert_array_equal(Out.reshape(2, 16, 16), np.stack([want, want]).astype(np.float16))


def matrix_ops_kernel():
    """Every NV matrix op, on matrix types a coopmat2 device supports: X, Y 16x16 f32, Z 32x32
    f32 and a scalar in; 1408 f32 and 512 f16 results out (offsets below)."""
    MatB16 = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseB]
    Big = pc.coopmat[f32, pc.Subgroup, 32, 32, pc.Accumulator]
    Narrow = pc.coopmat[f32, pc.Subgroup, 16, 8, pc.Accumulator]     # a KHR size (16x8x16)

    def affine(r, c, e, s, other):
        return e * s + other + f32(r) - f32(c) * 0.5

    @pc.kernel(workgroup_size=32)
    def k(X: pc.Buffer[f32], Y: pc.Buffer[f32], Z: pc.Buffer[f32], O: pc.Buffer[f32],
          O16: pc.Buffer[f16], s: f32):
        x, y = Acc.load(X, 0, 16), Acc.load(Y, 0, 16)
        pc.store(O, 0, pc.nv.reduce(x, "row", pc.max), 16)
        pc.store(O, 256, pc.nv.reduce(x, "column", "add"), 16)
        pc.store(O, 512, pc.nv.reduce(x, "row_column", pc.min), 16)
        pc.store(O, 768, pc.nv.reduce(Big.load(Z, 0, 32), "2x2", lambda a, b: a + b), 16)
        pc.store(O, 1024, pc.nv.per_element(x, affine, s, y), 16)
        pc.store(O16, 0, pc.nv.transpose(pc.convert(x, f16)), 16)
        pc.store(O16, 256, pc.nv.convert(pc.convert(y, f16), MatB16), 16)
        pc.store(O, 1280, pc.nv.reduce(x, "row", "add", Narrow), 8)
    SPV.append(k)
    return k


def test_reduce_per_element_convert_transpose():
    k = matrix_ops_kernel()
    rng = np.random.default_rng(0)
    X, Y = (rng.standard_normal((16, 16)).astype(np.float32) for _ in range(2))
    Z = rng.standard_normal((32, 32)).astype(np.float32)
    O, O16 = np.zeros(1408, np.float32), np.zeros(512, np.float16)
    k[1](X, Y, Z, O, O16, 1.5, backend="emulator")
    r, c = np.mgrid[0:16, 0:16]
    tol = dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(O[:256].reshape(16, 16), np.repeat(X.max(1, keepdims=True), 16, 1), **tol)
    np.testing.assert_allclose(O[256:512].reshape(16, 16), np.repeat(X.sum(0, keepdims=True), 16, 0), **tol)
    np.testing.assert_allclose(O[512:768], X.min(), **tol)
    np.testing.assert_allclose(O[768:1024].reshape(16, 16), Z.reshape(16, 2, 16, 2).sum((1, 3)), **tol)
    np.testing.assert_allclose(O[1024:1280].reshape(16, 16), X * 1.5 + Y + r - c * 0.5, **tol)
    np.testing.assert_array_equal(O16[:256].reshape(16, 16), X.T.astype(np.float16))
    np.testing.assert_array_equal(O16[256:].reshape(16, 16), Y.astype(np.float16))
    np.testing.assert_allclose(O[1280:].reshape(16, 8), np.repeat(X.sum(1, keepdims=True), 8, 1), **tol)


def test_component_and_use_conversion_rounds():
    MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]

    @pc.kernel(workgroup_size=32)
    def k(X: pc.Buffer[f32], O: pc.Buffer[f16]):
        a = pc.nv.convert(Acc.load(X, 0, 16), MatA)          # f32 accumulator -> f16 UseA
        pc.store(O, 0, a, 16)
    SPV.append(k)
    X = (np.random.default_rng(1).standard_normal(256) * 300).astype(np.float32)
    O = np.zeros(256, np.float16)
    k[1](X, O, backend="emulator")
    np.testing.assert_array_equal(O, X.astype(np.float16))


def test_use_conversion_to_integers_reports_out_of_range_floats():
    """An accumulator of floats converted to an integer UseA matrix: NaN and values that do not
    fit are undefined (OpConvertFToS), as for pycoop.convert (the emulator saturated them)."""
    MatA8 = pc.coopmat[pc.i8, pc.Subgroup, 16, 16, pc.UseA]

    @pc.kernel(workgroup_size=32)
    def k(X: pc.Buffer[f32], O: pc.Buffer[pc.i8]):
        pc.store(O, 0, pc.nv.convert(Acc.load(X, 0, 16), MatA8), 16)     # CONVERT
    X, O = np.full(256, -3.7, np.float32), np.zeros(256, np.int8)
    k[1](X, O, backend="emulator")
    assert (O == -3).all()
    X[7] = 128.0
    with pytest.raises(pc.EmulatorError, match="out-of-range float to i8") as e:
        k[1](X, O, backend="emulator")
    assert e.value.loc.line == line_of("# CONVERT", k.fn)
    assert e.value.rule_id == "emulator.undefined-behaviour"


def test_capabilities_only_when_used():
    @pc.kernel(workgroup_size=32)
    def plain(X: pc.Buffer[f16], O: pc.Buffer[f16]):
        lay = pc.nv.tensor_layout(2, "constant").dimension(16, 16)
        pc.nv.store_tensor(O, lay, pc.nv.load_tensor(X, lay, Acc16))
    SPV.append(plain)
    caps = plain.compile().requirements["capabilities"]
    assert "TensorAddressingNV" in caps and "CooperativeMatrixTensorAddressingNV" in caps
    for absent in ("CooperativeMatrixBlockLoadsNV", "CooperativeMatrixReductionsNV",
                   "CooperativeMatrixPerElementOperationsNV", "CooperativeMatrixConversionsNV"):
        assert absent not in caps
    X = np.arange(256).astype(np.float16)
    O = np.zeros(256, np.float16)
    plain[1](X, O, backend="emulator")
    np.testing.assert_array_equal(O, X)


def test_store_race_is_reported():
    @pc.kernel(workgroup_size=32)
    def k(X: pc.Buffer[f16], O: pc.Buffer[f16]):
        lay = pc.nv.tensor_layout(2, "constant").dimension(16, 16).stride(1, 1)   # overlapping
        pc.nv.store_tensor(O, lay, Acc16.load(X, 0, 16))
    X = np.arange(256).astype(np.float16)
    with pytest.raises(pc.EmulatorError, match="more than once"):
        k[1](X, np.zeros(256, np.float16), backend="emulator")


def test_undefined_out_of_bounds_is_reported_with_line():
    @pc.kernel(workgroup_size=32)
    def k(X: pc.Buffer[f16], O: pc.Buffer[f16], n: u32):
        lay = pc.nv.tensor_layout(2, "undefined").dimension(n, 16).slice(0, 16, 0, 16)
        pc.store(O, 0, pc.nv.load_tensor(X, lay, Acc16), 16)  # LOAD
    X = np.zeros(256, np.float16)
    k[1](X, np.zeros(256, np.float16), 16, backend="emulator")
    with pytest.raises(pc.EmulatorError) as e:
        k[1](X, np.zeros(256, np.float16), 8, backend="emulator")
    assert e.value.loc.line == line_of("# LOAD", k.fn)


@pytest.mark.parametrize("store", [False, True])
@pytest.mark.parametrize("partial", [False, True])
def test_a_layout_larger_than_its_buffer_is_reported(store, partial):
    """A layout describing 32 x 16 elements over a 256-element buffer: the tile at row 16 lies
    inside the layout but past the buffer. With every element of the tile in the layout (one
    gather or scatter for the whole tile) or some clamped away (per element), the access is
    reported, not read or written out of range."""
    @pc.kernel(workgroup_size=32)
    def k(X: pc.Buffer[f16], O: pc.Buffer[f16], rows: u32):
        lay = pc.nv.tensor_layout(2, "constant").dimension(rows, 16).slice(16, 16, 0, 16)
        if store:
            pc.nv.store_tensor(O, lay, Acc16.load(X, 0, 16))
        else:
            pc.store(O, 0, pc.nv.load_tensor(X, lay, Acc16), 16)
    X, O = np.ones(256, np.float16), np.zeros(256, np.float16)
    with pytest.raises(pc.EmulatorError, match="writes past the end" if store else "reads element") as e:
        k[1](X, O, 24 if partial else 32, backend="emulator")
    assert e.value.rule_id == "nv.buffer-extent"
    assert not O.any()
    SPV.append(k)


# --------------------------------------------------------------------------- bad input

def _fails(body, match, marker="# HERE"):
    k = pc.kernel(workgroup_size=32)(body)
    with pytest.raises(pc.CompileError, match=match) as e:
        k.compile()
    assert e.value.loc.line == line_of(marker, body), str(e.value)


def test_layout_rules():
    def dims6(X: pc.Buffer[f16]):
        pc.nv.tensor_layout(6)  # HERE
    _fails(dims6, "1 to 5")

    def bad_clamp(X: pc.Buffer[f16]):
        pc.nv.tensor_layout(2, "wrap")  # HERE
    _fails(bad_clamp, "unknown clamp mode")

    def dim_count(X: pc.Buffer[f16]):
        pc.nv.tensor_layout(2).dimension(4, 4, 4)  # HERE
    _fails(dim_count, "takes 2 values here")

    def slice_count(X: pc.Buffer[f16]):
        pc.nv.tensor_layout(2).slice(0, 4, 0)  # HERE
    _fails(slice_count, "slice")

    def stride_type(X: pc.Buffer[f16], s: f32):
        pc.nv.tensor_layout(1).stride(s)  # HERE
    _fails(stride_type, "32-bit integers")

    def mirror_one(X: pc.Buffer[f16]):
        pc.nv.tensor_layout(2, "mirror_repeat").dimension(1, 16)  # HERE
    _fails(mirror_one, "MirrorRepeat")


def test_negative_python_offsets_and_clamp_values():
    """A slice offset before the tensor may be a negative Python int (an i32 constant; it was
    refused as a u32 that cannot hold it), and an int clamp value is its 32-bit pattern (-1 is
    0xFFFFFFFF); a NumPy float clamp value is its f32 bits, as a Python float is."""
    AccU = pc.coopmat[u32, pc.Subgroup, 16, 16, pc.Accumulator]

    @pc.kernel(workgroup_size=32)
    def k(X: pc.Buffer[f32], Y: pc.Buffer[f32], Z: pc.Buffer[u32], W: pc.Buffer[f32]):
        whole = pc.nv.tensor_layout(2).dimension(16, 16)
        edge = pc.nv.tensor_layout(2, "clamp_to_edge").dimension(16, 16).slice(0, 16, -2, 16)
        pc.nv.store_tensor(Y, whole, pc.nv.load_tensor(X, edge, Acc))
        const = pc.nv.tensor_layout(2, "constant").dimension(8, 8).slice(0, 16, 0, 16)
        pc.nv.store_tensor(Z, whole, pc.nv.load_tensor(Z, const.clamp_value(-1), AccU))
        pc.nv.store_tensor(W, whole, pc.nv.load_tensor(W, const.clamp_value(np.float32(2.5)), Acc))
    SPV.append(k)
    X = np.arange(256, dtype=np.float32)
    Y, Z, W = np.zeros(256, np.float32), np.zeros(256, np.uint32), np.zeros(256, np.float32)
    k[1](X, Y, Z, W, backend="emulator")
    np.testing.assert_array_equal(Y.reshape(16, 16), X.reshape(16, 16)[:, np.clip(np.arange(16) - 2, 0, 15)])
    outside = np.ones((16, 16), bool)
    outside[:8, :8] = False
    assert (Z.reshape(16, 16)[outside] == 0xFFFFFFFF).all() and (W.reshape(16, 16)[outside] == 2.5).all()


def test_view_rules():
    def perm(X: pc.Buffer[f16]):
        pc.nv.tensor_view(2, False, (0, 0))  # HERE
    _fails(perm, "not a permutation")

    def perm_len(X: pc.Buffer[f16]):
        pc.nv.tensor_view(3, False, (0, 1))  # HERE
    _fails(perm_len, "permutation values")

    def clip_args(X: pc.Buffer[f16]):
        pc.nv.tensor_view(2).clip(0, 1, 2)  # HERE
    _fails(clip_args, "clip")


def test_load_store_rules():
    def not_layout(X: pc.Buffer[f16]):
        v = pc.nv.tensor_view(2)
        pc.nv.load_tensor(X, v, Acc16)  # HERE
    _fails(not_layout, "tensor layout")

    def obj_type(X: pc.Buffer[f16]):
        lay = pc.nv.tensor_layout(2).dimension(16, 16)
        pc.nv.load_tensor(X, lay, Acc16, object=Acc.fill(0.0))  # HERE
    _fails(obj_type, "Object")

    def store_decode(X: pc.Buffer[f16]):
        lay = pc.nv.tensor_layout(2).dimension(16, 16)
        pc.nv.store_tensor(X, lay, Acc16.fill(0.0), decode=lambda p, b, c: p[0])  # HERE
    _fails(store_decode, "decode")

    def decode_arity(X: pc.Buffer[f16]):
        lay = pc.nv.tensor_layout(2).dimension(16, 16)
        pc.nv.load_tensor(X, lay, Acc16, decode=lambda p, b: p[0])  # HERE
    _fails(decode_arity, "takes 2 parameters")

    def decode_not_callable(X: pc.Buffer[f16]):
        lay = pc.nv.tensor_layout(2).dimension(16, 16)
        pc.nv.load_tensor(X, lay, Acc16, decode=3)  # HERE
    _fails(decode_not_callable, "must be a function")

    def decode_type(X: pc.Buffer[f16]):
        lay = pc.nv.tensor_layout(2).dimension(16, 16)
        pc.nv.load_tensor(X, lay, Acc16, decode=lambda p, b, c: f32(p[0]))  # HERE
    _fails(decode_type, "returns f32")

    def size_mismatch(X: pc.Buffer[f32]):
        lay = pc.nv.tensor_layout(2).dimension(16, 16)
        pc.nv.load_tensor(X, lay, Acc16)  # HERE
    _fails(size_mismatch, "decode function")

    def readonly(X: pc.ReadBuffer[f16]):
        lay = pc.nv.tensor_layout(2).dimension(16, 16)
        pc.nv.store_tensor(X, lay, Acc16.fill(0.0))  # HERE
    _fails(readonly, "read-only")


def test_matrix_op_rules():
    MatA = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]
    MatB = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseB]
    Odd = pc.coopmat[f32, pc.Subgroup, 16, 15, pc.Accumulator]

    def reduce_use(X: pc.Buffer[f16]):
        pc.nv.reduce(MatA.fill(0.0), "row", "add")  # HERE
    _fails(reduce_use, "accumulator")

    def reduce_2x2(X: pc.Buffer[f16]):
        pc.nv.reduce(Odd.fill(0.0), "2x2", "add")  # HERE
    _fails(reduce_2x2, "2x2")

    def reduce_rows(X: pc.Buffer[f16]):
        pc.nv.reduce(Acc.fill(0.0), "row", "add", Acc.with_(rows=8))  # HERE
    _fails(reduce_rows, "keeps the 16 rows")

    def reduce_mode(X: pc.Buffer[f16]):
        pc.nv.reduce(Acc.fill(0.0), "diagonal", "add")  # HERE
    _fails(reduce_mode, "unknown reduction")

    def combine_sig(X: pc.Buffer[f16]):
        pc.nv.reduce(Acc.fill(0.0), "row", lambda a: a)  # HERE
    _fails(combine_sig, "takes 1 parameters")

    def transpose_use(X: pc.Buffer[f16]):
        pc.nv.transpose(MatA.fill(0.0))  # HERE
    _fails(transpose_use, "accumulator")

    def transpose_target(X: pc.Buffer[f16]):
        pc.nv.transpose(Acc16.fill(0.0), MatA)  # HERE
    _fails(transpose_target, "UseB")

    def convert_b_to_a(X: pc.Buffer[f16]):
        pc.nv.convert(MatB.fill(0.0), MatA)  # HERE
    _fails(convert_b_to_a, "only an accumulator")

    def per_elem_extra(X: pc.Buffer[f16]):
        pc.nv.per_element(Acc.fill(0.0), lambda r, c, e, o: e, Acc16.fill(0.0))  # HERE
    _fails(per_elem_extra, "must have the type")

    def per_elem_sig(X: pc.Buffer[f16]):
        pc.nv.per_element(Acc.fill(0.0), lambda r, c: r)  # HERE
    _fails(per_elem_sig, "takes 2 parameters")


def test_every_module_passes_spirv_val():
    for k in SPV + list(_KERNELS.values()):
        k.compile().spv          # lowers and runs spirv-val (raises on failure)


def block_index_kernel():
    """Each element decodes to the f16 at its block's index: exposes the layout's strides."""
    Mat = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.UseA]

    def first(block, bc, cib):
        return block[0]

    @pc.kernel(workgroup_size=32)
    def k(B: pc.ReadBuffer[f16], Out: pc.Buffer[f16], d0: u32, d1: u32):
        lay = pc.nv.tensor_layout(2, "clamp_to_edge").block_size(2, 3).dimension(d0, d1)
        m = pc.nv.load_tensor(B, lay.slice(0, 16, 0, 16), Mat, decode=first)
        pc.store(Out, 0, pc.convert(m, Acc16.with_(use=pc.UseA)), 16)
    SPV.append(k)
    return k


def test_set_dimension_strides_use_the_spec_ceiling():
    """Default strides count ceil(dim / block) blocks; the module states them explicitly
    because NVIDIA's driver floors the division."""
    k = block_index_kernel()
    B, Out = np.arange(2048).astype(np.float16), np.zeros(256, np.float16)
    k[1](B, Out, 17, 20, backend="emulator")
    r, c = np.mgrid[0:16, 0:16]
    np.testing.assert_array_equal(Out.reshape(16, 16), ((r // 2) * 7 + c // 3).astype(np.float16))
    asm = k.compile().spvasm
    assert asm.index("OpTensorLayoutSetDimensionNV") < asm.index("OpTensorLayoutSetStrideNV")
    plain = _kernel("constant", None, False).compile().spvasm
    assert plain.count("OpTensorLayoutSetStrideNV") == 1           # only the user's stride()


def test_a_read_only_array_written_by_store_tensor_is_refused():
    @pc.kernel(workgroup_size=32)
    def k(O: pc.Buffer[f16]):
        pc.nv.store_tensor(O, pc.nv.tensor_layout(2).dimension(16, 16), Acc16.fill(1.0))

    O = np.zeros(256, np.float16)
    O.flags.writeable = False
    with pytest.raises(pc.ArgumentError, match="'O' is written by the kernel"):
        k[1](O, backend="emulator")
