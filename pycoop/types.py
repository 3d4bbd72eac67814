"""The type system shared by the front end, the IR, the SPIR-V lowering and the emulator.

Types are immutable, hashable values with readable reprs. Names of enums (scopes, uses,
storage classes) are the SPIR-V grammar's enumerant names so the lowering can look their
numbers up in the grammar rather than hard-coding them.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import cached_property

import ml_dtypes
import numpy as np

from .errors import CompileError, current_loc, entry_point
from .jupyter import coopmat_type_html


class Type:
    """Base class of every pycoop type."""

    @property
    def is_coopmat(self) -> bool:
        return isinstance(self, CoopMatType)


# --------------------------------------------------------------------------- scalars

@dataclass(frozen=True)
class ScalarType(Type):
    name: str
    kind: str               # "bool" | "int" | "float"
    bits: int
    signed: bool = False
    encoding: str | None = None   # SPIR-V FPEncoding name for bf16 / fp8, None for IEEE

    def __repr__(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def size(self) -> int:
        """Size in bytes in memory (bool is stored as 32-bit where it may be stored at all)."""
        return 4 if self.kind == "bool" else self.bits // 8

    @cached_property
    def dtype(self) -> np.dtype:
        return np.dtype(_DTYPES[self.name])

    def min_max(self) -> tuple[int, int]:
        assert self.is_int
        if self.signed:
            return -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1
        return 0, (1 << self.bits) - 1


bool_ = ScalarType("bool", "bool", 1)
i8 = ScalarType("i8", "int", 8, True)
i16 = ScalarType("i16", "int", 16, True)
i32 = ScalarType("i32", "int", 32, True)
i64 = ScalarType("i64", "int", 64, True)
u8 = ScalarType("u8", "int", 8, False)
u16 = ScalarType("u16", "int", 16, False)
u32 = ScalarType("u32", "int", 32, False)
u64 = ScalarType("u64", "int", 64, False)
f16 = ScalarType("f16", "float", 16)
bf16 = ScalarType("bf16", "float", 16, encoding="BFloat16KHR")
f32 = ScalarType("f32", "float", 32)
f64 = ScalarType("f64", "float", 64)
fp8_e4m3 = ScalarType("fp8_e4m3", "float", 8, encoding="Float8E4M3EXT")
fp8_e5m2 = ScalarType("fp8_e5m2", "float", 8, encoding="Float8E5M2EXT")

SCALARS: dict[str, ScalarType] = {t.name: t for t in (
    bool_, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, fp8_e4m3, fp8_e5m2)}

_DTYPES = {
    "bool": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
    "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
    "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64,
    # SPIR-V's Float8E4M3EXT is the OCP E4M3 format (no infinities): ml_dtypes' e4m3fn.
    "fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2,
}
_BY_DTYPE = {np.dtype(v): SCALARS[k] for k, v in _DTYPES.items()}


def scalar_of_dtype(dtype) -> ScalarType | None:
    """The pycoop scalar type stored as `dtype`, or None."""
    return _BY_DTYPE.get(np.dtype(dtype))


# --------------------------------------------------------------------------- composites

@dataclass(frozen=True)
class VectorType(Type):
    elem: ScalarType
    count: int

    def __repr__(self) -> str:
        return f"vec{self.count}<{self.elem}>"

    @property
    def size(self) -> int:
        return self.elem.size * self.count

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype of a component (arrays of vectors have a trailing axis)."""
        return self.elem.dtype


def memory_element(t) -> bool:
    """Whether `t` can be an element of a kernel buffer or shared array loaded and stored one
    at a time: a numeric scalar, or a numeric vector of 2 or 4 components (3 would be padded)."""
    scalar = t.elem if isinstance(t, VectorType) and t.count in (2, 4) else t
    return isinstance(scalar, ScalarType) and not scalar.is_bool


@dataclass(frozen=True)
class ArrayType(Type):
    elem: Type
    length: int

    def __repr__(self) -> str:
        return f"{self.elem}[{self.length}]"

    @property
    def size(self) -> int:
        return self.elem.size * self.length


class Layout(str, Enum):
    """Explicit memory layouts for structs."""
    std430 = "std430"
    scalar = "scalar"


@dataclass(frozen=True)
class StructType(Type):
    name: str
    fields: tuple[tuple[str, Type], ...]
    layout: Layout = Layout.scalar

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}: {t}" for n, t in self.fields)
        return f"struct {self.name}{{{inner}}}"

    @cached_property
    def offsets(self) -> tuple[int, ...]:
        out, off = [], 0
        for _, t in self.fields:
            a = alignment(t, self.layout)
            off = (off + a - 1) // a * a
            out.append(off)
            off += size_in(t, self.layout)
        return tuple(out)

    @property
    def size(self) -> int:
        if not self.fields:
            return 0
        end = self.offsets[-1] + size_in(self.fields[-1][1], self.layout)
        a = alignment(self, self.layout)
        return (end + a - 1) // a * a


def size_in(t: Type, layout: Layout) -> int:
    """Size of `t` inside a struct of `layout`: array elements are padded to their alignment
    (a std430 array of vec3 has a 16-byte stride)."""
    if isinstance(t, ArrayType):
        a = alignment(t.elem, layout)
        return (size_in(t.elem, layout) + a - 1) // a * a * t.length
    return t.size


def alignment(t: Type, layout: Layout) -> int:
    """Base alignment of `t` under `layout` (std430: vec3 aligns like vec4)."""
    if isinstance(t, ScalarType):
        return t.size
    if isinstance(t, VectorType):
        if layout is Layout.scalar:
            return t.elem.size
        return t.elem.size * (4 if t.count == 3 else t.count)
    if isinstance(t, ArrayType):
        return alignment(t.elem, layout)
    if isinstance(t, StructType):
        return max((alignment(f, layout) for _, f in t.fields), default=1)
    if isinstance(t, PointerType):
        return 8
    raise TypeError(f"{t} has no memory layout")


class StorageClass(str, Enum):
    StorageBuffer = "StorageBuffer"
    PhysicalStorageBuffer = "PhysicalStorageBuffer"
    Workgroup = "Workgroup"
    Function = "Function"
    CrossWorkgroup = "CrossWorkgroup"
    PushConstant = "PushConstant"


@dataclass(frozen=True)
class PointerType(Type):
    pointee: Type
    storage: StorageClass

    def __repr__(self) -> str:
        return f"ptr<{self.storage.value}, {self.pointee}>"

    @property
    def size(self) -> int:
        return 8


@dataclass(frozen=True)
class BufferType(Type):
    """A kernel parameter: an array of `elem` in device memory, passed by device address."""
    elem: Type
    access: str = "readwrite"

    def __repr__(self) -> str:
        return f"Buffer[{self.elem}]"


@dataclass(frozen=True)
class SharedArrayType(Type):
    """An array of `elem` in Workgroup (shared) memory, one per workgroup."""
    elem: ScalarType | VectorType
    length: int

    def __repr__(self) -> str:
        return f"shared<{self.elem}[{self.length}]>"


# --------------------------------------------------------------------------- tensor addressing (NV)

CLAMP_MODES = ("undefined", "constant", "clamp_to_edge", "repeat", "mirror_repeat")


@dataclass(frozen=True)
class TensorLayoutType(Type):
    """OpTypeTensorLayoutNV: `dim` dimensions (1..5) and a clamp mode (index into CLAMP_MODES)."""
    dim: int
    clamp_mode: int

    def __repr__(self) -> str:
        return f"tensor_layout<{self.dim}, {CLAMP_MODES[self.clamp_mode]}>"


@dataclass(frozen=True)
class TensorViewType(Type):
    """OpTypeTensorViewNV: `dim` dimensions, whether it has its own dimensions, a permutation."""
    dim: int
    has_dimensions: bool
    permutation: tuple[int, ...]

    def __repr__(self) -> str:
        return f"tensor_view<{self.dim}, {self.has_dimensions}, {list(self.permutation)}>"


# --------------------------------------------------------------------------- cooperative matrices

class Scope(str, Enum):
    Subgroup = "Subgroup"
    Workgroup = "Workgroup"


class Use(str, Enum):
    A = "MatrixAKHR"
    B = "MatrixBKHR"
    Accumulator = "MatrixAccumulatorKHR"

    @property
    def short(self) -> str:
        return {"MatrixAKHR": "A", "MatrixBKHR": "B", "MatrixAccumulatorKHR": "Acc"}[self.value]


@dataclass(frozen=True)
class CoopMatType(Type):
    component: ScalarType
    scope: Scope
    rows: int
    cols: int
    use: Use

    def __repr__(self) -> str:
        return (f"coopmat<{self.component}, {self.scope.value}, {self.rows}x{self.cols}, "
                f"{self.use.short}>")

    def _repr_html_(self) -> str:
        return coopmat_type_html(self)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    def with_(self, **kw) -> "CoopMatType":
        d = dict(component=self.component, scope=self.scope, rows=self.rows,
                 cols=self.cols, use=self.use)
        d.update(kw)
        return CoopMatType(**d)

    # `pycoop.coopmat[...]` (checked) and the tracing helpers (fill / load / length) are in
    # pycoop.ops.khr.


class _BufferFactory:
    """`Buffer[f16]` is the annotation of a buffer parameter (readonly/writeonly variants exist)."""

    def __init__(self, access: str):
        self.access = access

    @entry_point
    def __getitem__(self, elem) -> BufferType:
        if not isinstance(elem, (ScalarType, VectorType, StructType)):
            raise CompileError(f"Buffer[...] takes a pycoop scalar, vector or struct type, got {elem!r}",
                               current_loc(), rule="kernel buffers hold numeric scalars, numeric "
                                                   "vectors or structs (blocks)",
                               hint="a buffer of the matrix's component type, loaded with "
                                    "M.load(buffer, offset, stride)" if isinstance(elem, CoopMatType)
                               else "use a type such as pycoop.f32 or pycoop.vec(pycoop.f16, 4)",
                               rule_id="frontend.buffer-element")
        return BufferType(elem, self.access)


Buffer = _BufferFactory("readwrite")
ReadBuffer = _BufferFactory("read")
WriteBuffer = _BufferFactory("write")


@dataclass(frozen=True)
class SpecType:
    """The annotation `Spec[u32]` of a specialization-constant parameter: one SPIR-V module
    whose value (an OpSpecConstant with a SpecId) the application picks at pipeline creation.
    Unlike a `Const`, it is a runtime value while tracing: usable in arithmetic, conditions and
    loop bounds, not in shapes."""
    type: Type

    def __str__(self) -> str:
        return f"Spec[{self.type}]"


class _SpecFactory:
    """`Spec[T]`: the annotation of a specialization-constant parameter of scalar type T
    (checked where the kernel is defined)."""

    def __getitem__(self, t) -> SpecType:
        return SpecType(t)


Spec = _SpecFactory()


VECTOR_SIZES = (2, 3, 4, 8, 16)       # components a vector may have


def vec(elem: ScalarType, count: int) -> VectorType:
    if not isinstance(elem, ScalarType):
        raise TypeError(f"vector components are a scalar type (bool, an integer or a float "
                        f"type), got {elem!r}")
    if count not in VECTOR_SIZES:
        raise TypeError(f"vector size must be 2, 3, 4, 8 or 16, got {count}")
    return VectorType(elem, count)


def array(elem: Type, length: int) -> ArrayType:
    return ArrayType(elem, int(length))


def struct(name: str, layout: str = "scalar", **fields: Type) -> StructType:
    return StructType(name, tuple(fields.items()), Layout(layout))
