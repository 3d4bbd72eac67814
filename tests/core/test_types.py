"""The type system: scalars and their NumPy dtypes, composite layouts, cooperative matrix
types and their construction errors."""
from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest

import pycoop
from pycoop import (bf16, bool_, f16, f32, f64, fp8_e4m3, fp8_e5m2, i8, i16, i32, i64, u8, u16, u32,
                    u64)
from pycoop.types import (ArrayType, CoopMatType, Layout, ScalarType, SCALARS, StructType,
                          VectorType, alignment, scalar_of_dtype)

ALL_SCALARS = [bool_, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, fp8_e4m3, fp8_e5m2]

EXPECTED_DTYPES = {
    bool_: np.bool_, i8: np.int8, i16: np.int16, i32: np.int32, i64: np.int64,
    u8: np.uint8, u16: np.uint16, u32: np.uint32, u64: np.uint64,
    f16: np.float16, bf16: ml_dtypes.bfloat16, f32: np.float32, f64: np.float64,
    fp8_e4m3: ml_dtypes.float8_e4m3fn, fp8_e5m2: ml_dtypes.float8_e5m2,
}


def _here() -> int:
    return inspect.currentframe().f_back.f_lineno


# --------------------------------------------------------------------------- scalars

@pytest.mark.parametrize("t", ALL_SCALARS, ids=repr)
def test_scalar_dtype_roundtrip(t):
    assert t.dtype == np.dtype(EXPECTED_DTYPES[t])
    assert scalar_of_dtype(t.dtype) is t
    assert SCALARS[t.name] is t
    assert repr(t) == t.name


@pytest.mark.parametrize("t", [t for t in ALL_SCALARS if t is not bool_], ids=repr)
def test_scalar_sizes_match_dtype(t):
    assert t.size == t.dtype.itemsize == t.bits // 8
    assert t.is_float == np.issubdtype(t.dtype, np.floating) or t.encoding is not None
    assert t.is_int == np.issubdtype(t.dtype, np.integer)


def test_bool_is_stored_as_32_bits():
    assert bool_.is_bool and bool_.size == 4 and not bool_.is_int and not bool_.is_float


@pytest.mark.parametrize("t", [i8, i16, i32, i64, u8, u16, u32, u64], ids=repr)
def test_integer_ranges_match_numpy(t):
    info = np.iinfo(t.dtype)
    assert t.min_max() == (int(info.min), int(info.max))
    assert t.signed == (info.min < 0)


def test_low_precision_float_encodings():
    assert bf16.encoding == "BFloat16KHR" and bf16.bits == 16
    assert fp8_e4m3.encoding == "Float8E4M3EXT" and fp8_e5m2.encoding == "Float8E5M2EXT"
    assert f16.encoding is None and f32.encoding is None
    # the dtypes really are the formats the encodings name
    assert float(np.array(1 + 2 ** -7, np.float32).astype(bf16.dtype)) == 1 + 2 ** -7
    assert float(np.array(1 + 2 ** -8, np.float32).astype(bf16.dtype)) == 1.0   # 7 mantissa bits
    assert float(ml_dtypes.finfo(fp8_e4m3.dtype).max) == 448.0                  # OCP E4M3 (fn)
    assert float(ml_dtypes.finfo(fp8_e5m2.dtype).max) == 57344.0
    assert scalar_of_dtype(np.dtype("complex64")) is None


def test_scalar_call_outside_a_kernel_gives_numpy_scalars():
    x = f16(1.5)
    assert isinstance(x, np.float16) and float(x) == 1.5
    assert u8(255) == np.uint8(255) and type(u8(255)) is np.uint8
    b = bf16(3.0)
    assert b.dtype == bf16.dtype and float(b) == 3.0


def test_scalar_types_are_hashable_values():
    assert len({f16, f16, f32, ScalarType("f16", "float", 16)}) == 2
    assert bf16 != f16     # same width, different encoding


# --------------------------------------------------------------------------- composites

def test_vector_and_array_reprs_and_sizes():
    v = pycoop.vec(f32, 3)
    assert isinstance(v, VectorType) and repr(v) == "vec3<f32>" and v.size == 12
    a = pycoop.array(f16, 10)
    assert isinstance(a, ArrayType) and repr(a) == "f16[10]" and a.size == 20
    assert pycoop.vec(u8, 16).size == 16
    with pytest.raises(TypeError, match="vector size"):
        pycoop.vec(f32, 5)
    for elem in (pycoop.coopmat[f32, pycoop.Subgroup, 16, 16, pycoop.Accumulator],
                 pycoop.vec(f32, 4), "f32"):
        with pytest.raises(TypeError, match="vector components are a scalar type"):
            pycoop.vec(elem, 2)


def test_std430_vec3_aligns_like_vec4_but_scalar_layout_does_not():
    v3 = pycoop.vec(f32, 3)
    assert alignment(v3, Layout.std430) == 16
    assert alignment(v3, Layout.scalar) == 4
    assert alignment(pycoop.vec(f16, 2), Layout.std430) == 4
    assert alignment(pycoop.vec(f64, 4), Layout.std430) == 32


def _field_offsets_by_hand(fields, layout):
    """Independent computation: each field at the next multiple of its alignment."""
    def align(t):
        if isinstance(t, ScalarType):
            return t.size
        if isinstance(t, VectorType):
            n = 4 if (t.count == 3 and layout == "std430") else t.count
            return t.elem.size * (n if layout == "std430" else 1)
        if isinstance(t, StructType):
            return max(align(f) for _, f in t.fields)
        return align(t.elem)
    off, out, amax = 0, [], 1
    for _, t in fields:
        a = align(t)
        amax = max(amax, a)
        off = -(-off // a) * a
        out.append(off)
        off += t.size
    return out, -(-off // amax) * amax


@pytest.mark.parametrize("layout", ["std430", "scalar"])
def test_struct_offsets_and_sizes(layout):
    v3, v2 = pycoop.vec(f32, 3), pycoop.vec(f32, 2)
    s = pycoop.struct("S", layout, a=f32, b=v3, c=f16, d=v2, e=u8)
    assert s.layout is Layout(layout)
    if layout == "std430":
        assert s.offsets == (0, 16, 28, 32, 40)
        assert s.size == 48
    else:
        assert s.offsets == (0, 4, 16, 20, 28)
        assert s.size == 32     # 29 rounded up to the 4-byte alignment of f32
    offs, size = _field_offsets_by_hand(s.fields, layout)
    assert list(s.offsets) == offs and s.size == size
    assert repr(s) == "struct S{a: f32, b: vec3<f32>, c: f16, d: vec2<f32>, e: u8}"


def test_nested_struct_alignment():
    inner = pycoop.struct("In", "std430", x=f16, y=pycoop.vec(f32, 4))
    assert inner.offsets == (0, 16) and inner.size == 32
    outer = pycoop.struct("Out", "std430", a=u8, b=inner, c=f64)
    assert outer.offsets == (0, 16, 48) and outer.size == 64
    packed = pycoop.struct("Out", "scalar", a=u8, b=pycoop.struct("In", "scalar", x=f16, y=f32))
    assert packed.offsets == (0, 4) and packed.size == 12


def test_empty_struct_and_bad_layout():
    assert pycoop.struct("E").size == 0
    with pytest.raises(ValueError):
        pycoop.struct("S", "std140", a=f32)


def test_std430_array_of_vec3_has_16_byte_stride():
    s = pycoop.struct("S", "std430", a=pycoop.array(pycoop.vec(f32, 3), 2), b=f32)
    assert s.offsets == (0, 32)


def test_buffer_annotations():
    assert repr(pycoop.Buffer[f16]) == "Buffer[f16]"
    assert pycoop.Buffer[f32].access == "readwrite"
    assert pycoop.ReadBuffer[f32].access == "read"
    assert pycoop.WriteBuffer[f32].access == "write"
    assert pycoop.Buffer[pycoop.vec(f32, 4)].elem == pycoop.vec(f32, 4)
    with pytest.raises(pycoop.CompileError, match="Buffer.*takes a pycoop scalar") as e:
        pycoop.Buffer[int]
    assert e.value.loc.file == __file__ and "scalars" in e.value.rule
    assert e.value.rule_id == "frontend.buffer-element"


# --------------------------------------------------------------------------- cooperative matrices

def test_coopmat_construction_and_repr():
    t = pycoop.coopmat[f16, pycoop.Subgroup, 16, 8, pycoop.UseA]
    assert isinstance(t, CoopMatType) and t.is_coopmat and not f16.is_coopmat
    assert (t.component, t.scope, t.rows, t.cols, t.use) == (f16, pycoop.Scope.Subgroup, 16, 8,
                                                            pycoop.Use.A)
    assert t.shape == (16, 8)
    assert repr(t) == "coopmat<f16, Subgroup, 16x8, A>"
    assert repr(pycoop.coopmat[i32, pycoop.Workgroup, 32, 32, pycoop.Accumulator]) == \
        "coopmat<i32, Workgroup, 32x32, Acc>"
    assert repr(pycoop.coopmat[bf16, pycoop.Subgroup, 16, 16, pycoop.UseB]) == \
        "coopmat<bf16, Subgroup, 16x16, B>"
    assert repr(pycoop.coopmat) == "pycoop.coopmat"


def test_coopmat_types_are_values():
    a = pycoop.coopmat[f16, pycoop.Subgroup, 16, 16, pycoop.UseA]
    b = pycoop.coopmat[f16, pycoop.Subgroup, 16, np.int64(16), pycoop.UseA]
    assert a == b and hash(a) == hash(b) and type(b.cols) is int
    assert a.with_(use=pycoop.Use.B) == pycoop.coopmat[f16, pycoop.Subgroup, 16, 16, pycoop.UseB]
    assert a.with_(component=f32) != a


@pytest.mark.parametrize("comp", [f16, bf16, f32, f64, fp8_e4m3, fp8_e5m2, i8, u8, i32, u32, i64])
def test_coopmat_accepts_every_numeric_component(comp):
    assert pycoop.coopmat[comp, pycoop.Subgroup, 8, 8, pycoop.Accumulator].component is comp


BAD_KEYS = [
    ((bool_, pycoop.Subgroup, 16, 16, pycoop.UseA), "component type"),
    ((np.float16, pycoop.Subgroup, 16, 16, pycoop.UseA), "component type"),
    ((f16, pycoop.Subgroup, 16.0, 16, pycoop.UseA), "rows must be a compile-time int"),
    ((f16, pycoop.Subgroup, 16, "16", pycoop.UseA), "cols must be a compile-time int"),
    ((f16, pycoop.Subgroup, True, 16, pycoop.UseA), "rows must be a compile-time int"),
    ((f16, pycoop.Subgroup, 0, 16, pycoop.UseA), "rows must be positive"),
    ((f16, pycoop.Subgroup, 16, -8, pycoop.UseA), "cols must be positive"),
    ((f16, pycoop.Subgroup, 2**40, 16, pycoop.UseA), "rows must fit a 32-bit integer constant"),
    ((f16, pycoop.Subgroup, 16, 2**32, pycoop.UseA), "cols must fit a 32-bit integer constant"),
    ((f16, "Subgroup", 16, 16, pycoop.UseA), "scope must be"),
    ((f16, pycoop.Use.A, 16, 16, pycoop.UseA), "scope must be"),
    ((f16, pycoop.Subgroup, 16, 16, "A"), "use must be"),
    ((f16, pycoop.Subgroup, 16, 16, pycoop.Subgroup), "use must be"),
    ((f16, pycoop.Subgroup, 16, 16), "takes \\[component, scope, rows, cols, use\\]"),
]


@pytest.mark.parametrize("key,msg", BAD_KEYS)
def test_coopmat_bad_construction_raises_compile_error_at_the_callers_line(key, msg):
    line = _here() + 2
    with pytest.raises(pycoop.CompileError, match=msg) as ei:
        pycoop.coopmat[key]
    assert ei.value.loc.line == line
    assert ei.value.loc.file == __file__
    ids = {"component type": "component-type", "compile-time int": "dimension-constant",
           "32-bit integer constant": "dimension-constant",
           "positive": "dimension-positive", "scope must be": "scope", "use must be": "use",
           "takes": "type-parameters"}
    assert ei.value.rule_id == "khr." + next(v for k, v in ids.items() if k in msg)


Mat = pycoop.coopmat[f16, pycoop.Subgroup, 16, 16, pycoop.UseA]


@pycoop.kernel(workgroup_size=32)
def k_runtime_rows(A: pycoop.Buffer[f16], n: u32):
    T = pycoop.coopmat[f16, pycoop.Subgroup, n, 16, pycoop.UseA]  # runtime size: error here
    T.load(A, 0, 16)


def test_coopmat_runtime_size_inside_kernel_is_a_compile_error():
    with pytest.raises(pycoop.CompileError, match="rows must be a compile-time int") as ei:
        k_runtime_rows.compile()
    src = inspect.getsource(k_runtime_rows.fn).splitlines()
    offset = next(i for i, s in enumerate(src) if "runtime size: error here" in s)
    assert ei.value.line == k_runtime_rows.fn.__code__.co_firstlineno + offset
    assert "rule:" in str(ei.value)


@pycoop.kernel(workgroup_size=32)
def k_const_sized(A: pycoop.Buffer[f32], C: pycoop.Buffer[f32], tile: pycoop.Const = 16):
    T = pycoop.coopmat[f32, pycoop.Subgroup, tile, tile, pycoop.Accumulator]
    pycoop.store(C, 0, T.load(A, 0, tile), tile)


def test_coopmat_size_from_const_parameter_specialises():
    for tile in (8, 16):
        ck = k_const_sized.compile(tile=tile)
        assert f"coopmat<f32, Subgroup, {tile}x{tile}, Acc>" in ck.ir
    assert k_const_sized.compile(tile=8) is k_const_sized.compile(tile=8)
    a = np.arange(64, dtype=np.float32)
    c = np.zeros(64, np.float32)
    k_const_sized[1](a, c, tile=8, backend="emulator")
    np.testing.assert_array_equal(c, a)
