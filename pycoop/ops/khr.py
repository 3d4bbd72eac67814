"""SPV_KHR_cooperative_matrix: matrix types, fill, load/store with layout and stride, MulAdd,
length, scalar multiply and component-type conversion. Element-wise + - * / and negation
are the core arithmetic ops (pycoop.ops.core) applied to matrices.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..codegen import extensions
from ..codegen.checked import matrix_block
from ..errors import CompileError, Loc, current_loc, entry_point
from ..ir.builder import emit, emit1
from ..ir.core import Value
from ..types import (BufferType, CoopMatType, ScalarType, Scope, SharedArrayType, Use, VectorType, f32,
                     i32, u32)
from .core import as_value, check_readable, convert_array, emit_conversion, index_value, via_f32
from .known_bits import exact, low_bits
from ..ir.registry import define, emulation, lowering
from .khr_layout import matrix_layout
from .spec import check_not_spec

KHR_CAPS = ("CooperativeMatrixKHR",)
LAYOUTS = {"row_major": "RowMajorKHR", "col_major": "ColumnMajorKHR",
           "row": "RowMajorKHR", "col": "ColumnMajorKHR"}
SPEC = "SPV_KHR_cooperative_matrix"
extensions.register(extensions.Extension(SPEC, vulkan="VK_KHR_cooperative_matrix",
                                         features={"CooperativeMatrixKHR": "cooperativeMatrix"}))


# --------------------------------------------------------------------------- the type

def make_coopmat_type(key, loc: Loc | None = None) -> CoopMatType:
    loc = loc or current_loc()
    if not isinstance(key, tuple) or len(key) != 5:
        raise CompileError("coopmat takes [component, scope, rows, cols, use]", loc,
                           hint="e.g. pycoop.coopmat[f16, pycoop.Subgroup, 16, 16, pycoop.UseA]",
                           rule="SPV_KHR_cooperative_matrix: OpTypeCooperativeMatrixKHR has Component "
                                "Type, Scope, Rows, Columns and Use", rule_id="khr.type-parameters")
    comp, scope, rows, cols, use = key
    if not isinstance(comp, ScalarType) or comp.is_bool:
        raise CompileError(f"unsupported cooperative matrix component type {comp!r}", loc,
                           rule=f"{SPEC}: 'Component Type' must be a scalar numerical type",
                           hint="use f16, bf16, f32, f64, fp8_e4m3, fp8_e5m2 or an integer type",
                           rule_id="khr.component-type")
    if not isinstance(scope, Scope):
        raise CompileError(f"cooperative matrix scope must be pycoop.Subgroup or pycoop.Workgroup, "
                           f"not {scope!r}", loc,
                           rule="SPV_KHR_cooperative_matrix: Scope is Subgroup (or Workgroup with "
                                "SPV_NV_cooperative_matrix2)",
                           hint="pycoop.Subgroup, or pycoop.Workgroup (SPV_NV_cooperative_matrix2)",
                           rule_id="khr.scope")
    for what, n in (("rows", rows), ("cols", cols)):
        check_not_spec(n, f"cooperative matrix {what}", loc)
        if isinstance(n, Value) or not isinstance(n, numbers.Integral) or isinstance(n, bool):
            raise CompileError(f"cooperative matrix {what} must be a compile-time int, got {n!r}", loc,
                               rule=f"{SPEC}: 'Rows'/'Columns' must be constant instructions",
                               hint="use a Python int (or a pycoop.Const parameter)",
                               rule_id="khr.dimension-constant")
        if n <= 0:
            raise CompileError(f"cooperative matrix {what} must be positive, got {n}", loc,
                               rule="SPV_KHR_cooperative_matrix: Rows and Columns are positive constant "
                                    "instructions",
                               hint="use a positive Python int", rule_id="khr.dimension-positive")
        if n >= 1 << 32:
            raise CompileError(f"cooperative matrix {what} must fit a 32-bit integer constant, "
                               f"got {n}", loc,
                               rule=f"{SPEC}: 'Rows'/'Columns' must be constant instructions with "
                                    "scalar 32-bit integer type",
                               hint="no device has such a matrix: tile the data into matrices of a "
                                    "shape the device lists", rule_id="khr.dimension-constant")
    if not isinstance(use, Use):
        raise CompileError(f"cooperative matrix use must be UseA, UseB or Accumulator, not {use!r}", loc,
                           rule="SPV_KHR_cooperative_matrix: Use is MatrixAKHR, MatrixBKHR or "
                                "MatrixAccumulatorKHR",
                           hint="pycoop.UseA, pycoop.UseB or pycoop.Accumulator", rule_id="khr.use")
    return CoopMatType(comp, scope, int(rows), int(cols), use)


class _CoopMatFactory:
    """`coopmat[component, scope, rows, cols, use]` builds a CoopMatType (checked)."""

    @entry_point
    def __getitem__(self, key) -> CoopMatType:
        return make_coopmat_type(key)

    def __repr__(self) -> str:
        return "pycoop.coopmat"


coopmat = _CoopMatFactory()


def _need_mat(v: Value, what: str, loc: Loc) -> CoopMatType:
    if not isinstance(v, Value) or not isinstance(v.type, CoopMatType):
        raise CompileError(f"{what} must be a cooperative matrix, got "
                           f"{getattr(v, 'type', type(v).__name__)}", loc,
                           rule="SPV_KHR_cooperative_matrix: the operand must be an "
                                "OpTypeCooperativeMatrixKHR",
                           hint="pass a matrix (T.load(...), T.fill(...), pycoop.mul_add(...))",
                           rule_id="khr.matrix-operand")
    return v.type


# --------------------------------------------------------------------------- fill

def _infer_fill(operands, attrs, regions, loc):
    t: CoopMatType = attrs["type"]
    if operands[0].type != t.component:
        raise CompileError(f"fill value is {operands[0].type}, matrix component is {t.component}", loc,
                           rule=f"{SPEC}: the single constituent must have the component type",
                           hint=f"pass a {t.component} value or a Python number",
                           rule_id="khr.fill-type")
    return [t]


define("khr.fill", _infer_fill, capabilities=KHR_CAPS, pure=True,
       doc="A matrix with every element equal to a (scope-uniform) scalar.")


@emulation("khr.fill")
def _emu_fill(ctx, op, x):
    t = op.attrs["type"]
    x = ctx.scope_uniform_value(x, t.scope, op, "the fill value")
    # a read-only broadcast: accumulators start as fills, and copying them costs a pass over
    # every element of every instance
    return np.broadcast_to(np.asarray(x, t.component.dtype)[..., None, None], x.shape + t.shape)


@lowering("khr.fill")
def _lower_fill(ctx, op):
    t = op.attrs["type"]
    src = op.operands[0]
    if src.op is not None and src.op.name == "const":
        ctx.set(op.result, ctx.constant_composite(t, ctx.id(src)))
    else:
        ctx.set(op.result, ctx.emit("OpCompositeConstruct", t, ctx.id(src)))


def fill(t: CoopMatType, value) -> Value:
    loc = current_loc()
    if not isinstance(t, CoopMatType):
        raise CompileError(f"fill makes a cooperative matrix: its type must be a coopmat type, got "
                           f"{t!r}", loc,
                           rule=f"{SPEC}: a matrix of one value is an OpCompositeConstruct whose Result "
                                "Type is an OpTypeCooperativeMatrixKHR",
                           hint="pass the matrix type, e.g. pycoop.fill(pycoop.coopmat[f32, "
                                "pycoop.Subgroup, 16, 16, pycoop.Accumulator], 0.0)",
                           rule_id="khr.fill-result-type")
    return emit1("khr.fill", [as_value(value, t.component)], {"type": t}, loc)


# --------------------------------------------------------------------------- load / store

def _check_mem(mem: Value, loc: Loc, what: str):
    if not isinstance(mem, Value) or not isinstance(mem.type, (BufferType, SharedArrayType)):
        raise CompileError(
            f"{what} needs a buffer parameter or a shared array, got "
            f"{getattr(mem, 'type', type(mem).__name__)}", loc,
            rule=f"{SPEC}: 'Pointer' must point into an array in StorageBuffer, "
                 "PhysicalStorageBuffer or Workgroup storage",
            hint="pass a Buffer[...] parameter or a pycoop.shared(...) array",
            rule_id="khr.pointer")


def _check_int(v: Value, what: str, loc: Loc):
    if not (isinstance(v.type, ScalarType) and v.type.is_int):
        raise CompileError(f"{what} must be an integer scalar, got {v.type}", loc,
                           rule="SPV_KHR_cooperative_matrix: Stride must be a scalar integer type",
                           hint="pass a Python int or an integer value",
                           rule_id="khr.stride-type")


def _check_element_size(mem: Value, t: CoopMatType, loc: Loc, what: str):
    """Arrays may hold several components per element (a uvec4 buffer or a u32 shared array
    read as f16 matrices): offset and stride count elements, a row's components are
    contiguous."""
    elem = mem.type.elem
    if isinstance(elem, (ScalarType, VectorType)) and elem.size % t.component.size:
        raise CompileError(f"{what} of {t.component} components through an array of {elem}",
                           loc, rule="pycoop: an array element holds a whole number of matrix "
                                     "components",
                           hint=f"use an array of {t.component} or of a multiple of its size",
                           rule_id="khr.array-element-size")
    # Packing reinterprets bits through integer containers (u32, uvec4); a float array of
    # another type is a conversion left out or a wrong dtype, whose bits would be read as
    # the matrix's components (an f16 identity matrix from f32 data reads 0, 0, 0, 3.5).
    scalar = elem.elem if isinstance(elem, VectorType) else elem
    if isinstance(scalar, ScalarType) and scalar.is_float and scalar != t.component:
        raise CompileError(f"{what} of {t.component} components through an array of {elem}: "
                           f"the {scalar} values' bits would be read as {t.component} "
                           f"components", loc,
                           rule="pycoop: a float array holds matrix components of its own type "
                                "(packed components are reinterpreted through u32 or "
                                "pycoop.vec(u32, 4) arrays)",
                           hint=f"convert the matrix first: pycoop.convert(m, {scalar})"
                           if what.endswith("store") else
                           f"pass {t.component} data, or load a {scalar} matrix and convert "
                           f"it: pycoop.convert(m, {t.component})",
                           rule_id="khr.array-element-type")


# --------------------------------------------------------------------------- addressing rules

STRIDE_RULE = (f"{SPEC}: Stride must be greater than 0 when passed to "
               "OpCooperativeMatrixStoreKHR and greater than or equal to 0 when passed to "
               "OpCooperativeMatrixLoadKHR")
STRIDE_HINT = ("a row-major stride is the distance between rows, in elements (usually the row "
               "length); only a load may use 0 (every row the same)")
ALIGN_RULE = ("VUID-RuntimeSpirv-OpCooperativeMatrixLoadKHR-08986: the Pointer and Stride "
              "operands must be aligned to at least the lesser of 16 bytes or the natural "
              "alignment of a row or column (depending on ColumnMajor) of the matrix")


def row_alignment(t: CoopMatType, layout: str) -> int:
    """The bytes the pointer and the stride of a load/store of `t` must be multiples of: the
    lesser of 16 and the size of a row (row major) or column (column major)."""
    n = t.cols if layout == "RowMajorKHR" else t.rows
    return min(16, n * t.component.size)


def _align_hint(t: CoopMatType, layout: str, elem_size: int) -> str:
    align = row_alignment(t, layout)
    per = align // math.gcd(align, elem_size)
    what = "row" if layout == "RowMajorKHR" else "column"
    return (f"make the offset and the stride multiples of {per} element{'s' * (per > 1)} "
            f"({align} bytes: a {what} of this matrix is "
            f"{(t.cols if layout == 'RowMajorKHR' else t.rows) * t.component.size} bytes); "
            "pad the array's rows if needed")


def _proven_misaligned(v: Value, elem_size: int, align: int) -> str | None:
    """How `v` (an offset or stride in elements of `elem_size` bytes) is misaligned in every
    invocation, or None when it may be aligned."""
    k, r = low_bits(v)
    c = exact(v)
    if c is not None:
        return None if (c * elem_size) % align == 0 else f"is {c} ({c * elem_size} bytes)"
    e = (elem_size & -elem_size).bit_length() - 1          # elem_size = 2^e * odd
    a = (align & -align).bit_length() - 1
    m = min(k + e, a)
    if (r * elem_size) % (1 << m) == 0:
        return None
    return (f"is {r} more than a multiple of {1 << k} in every invocation "
            f"({(r * elem_size) % (1 << (k + e))} bytes more than a multiple of {1 << (k + e)})")


def _check_static_addressing(mem: Value, t: CoopMatType, layout: str, offset: Value,
                             stride: Value, loc: Loc, what: str) -> None:
    """The addressing rules a trace proves broken: a constant negative stride (zero for a
    store), a pointer or stride that is misaligned whatever the runtime values are. Buffers
    and shared arrays are taken to start 16-byte aligned (the runtime allocates each buffer
    on its own, aligned to at least 16 bytes), so the element offset decides the pointer's
    alignment."""
    s = exact(stride)
    store = what.endswith("store")
    if s is not None and (s < 0 or (store and s == 0)):
        raise CompileError(f"{what} with stride {s}", loc, rule=STRIDE_RULE, hint=STRIDE_HINT,
                           rule_id="khr.stride-sign")
    elem = mem.type.elem.size
    align = row_alignment(t, layout)
    for name, v in (("offset", offset), ("stride", stride)):
        how = _proven_misaligned(v, elem, align)
        if how is not None:
            raise CompileError(
                f"{what} {name} {how}, not a multiple of {align} bytes: the "
                f"{'pointer' if name == 'offset' else 'stride'} is misaligned", loc,
                rule=ALIGN_RULE, hint=_align_hint(t, layout, elem), rule_id="khr.alignment")
    o = exact(offset)
    if isinstance(mem.type, SharedArrayType) and o is not None and s is not None:
        # a shared array's length is known: the block the emulator would report in every
        # workgroup is reported at the line (in components: an element may hold several)
        k = elem // t.component.size
        n = mem.type.length
        last = (o * k + int(matrix_layout(t, layout).extent(s * k))) // k
        if o < 0 or last >= n:
            raise CompileError(f"{what} of elements {o}..{last} of a shared array of {n} "
                               f"elements", loc,
                               rule="Vulkan: an access outside a Workgroup variable is undefined "
                                    "(robust buffer access does not cover shared memory)",
                               hint="check the offset and stride against the array size, or make "
                                    "the array longer", rule_id="emulator.out-of-bounds")


def check_addressing(ctx, op, t: CoopMatType, layout: str, elem_size: int, offs, strd,
                     active, what: str) -> None:
    """The addressing rules at run time, per scope instance: the stride's sign and the
    alignment of the pointer and the stride. `offs`, `strd`: per instance, in elements of
    `elem_size` bytes."""
    strd = np.asarray(strd)
    store = what.endswith("store")
    v = _first(strd, (strd <= 0) if store else (strd < 0), active)
    if v is not None:
        ctx.check_instances(v[1], active, op, f"{what} with stride {v[0]}", rule=STRIDE_RULE,
                            hint=STRIDE_HINT, rule_id="khr.stride-sign")
    align = row_alignment(t, layout)
    if elem_size % align == 0:
        return                                  # every element boundary is aligned
    for name, x in (("offset", np.asarray(offs)), ("stride", strd)):
        v = _first(x, (x.astype(np.int64) * elem_size) % align != 0, active)
        if v is not None:
            ctx.check_instances(
                v[1], active, op, f"{what} {name} {v[0]} ({v[0] * elem_size} bytes) is not a "
                f"multiple of {align} bytes: the {'pointer' if name == 'offset' else 'stride'} "
                "is misaligned", rule=ALIGN_RULE, hint=_align_hint(t, layout, elem_size),
                rule_id="khr.alignment")


def _first(x: np.ndarray, bad: np.ndarray, active) -> tuple[int, np.ndarray] | None:
    """(the value of `x` in the first active instance with `bad` set, `bad`), or None when
    no active instance has it set."""
    if not bad.any():
        return None
    b = np.broadcast_to(bad, np.broadcast_shapes(bad.shape, x.shape))
    if active is not None:
        b = b & active
    if not b.any():
        return None
    return int(np.broadcast_to(x, b.shape)[tuple(np.argwhere(b)[0])]), bad


def _infer_load(operands, attrs, regions, loc):
    mem, offset, stride = operands
    _check_mem(mem, loc, "cooperative matrix load")
    _check_element_size(mem, attrs["type"], loc, "cooperative matrix load")
    check_readable(mem, loc)
    _check_int(offset, "offset", loc)
    _check_int(stride, "stride", loc)
    _check_static_addressing(mem, attrs["type"], attrs["layout"], offset, stride, loc,
                             "cooperative matrix load")
    return [attrs["type"]]


def _infer_store(operands, attrs, regions, loc):
    mem, offset, mat, stride = operands
    _check_mem(mem, loc, "cooperative matrix store")
    _check_int(offset, "offset", loc)
    _check_int(stride, "stride", loc)
    _need_mat(mat, "the stored object", loc)
    _check_element_size(mem, mat.type, loc, "cooperative matrix store")
    if isinstance(mem.type, BufferType) and mem.type.access == "read":
        raise CompileError("cannot store into a read-only buffer", loc,
                           rule="SPIR-V: NonWritable memory (a ReadBuffer) is not stored to",
                           hint="annotate the parameter pycoop.Buffer[...] to store into it",
                           rule_id="core.read-only-store")
    _check_static_addressing(mem, mat.type, attrs["layout"], offset, stride, loc,
                             "cooperative matrix store")
    return []


define("khr.load", _infer_load, capabilities=KHR_CAPS,
       bounds=lambda op: _reach(op, "cooperative matrix load", op.result.type, 2),
       base_alignment=lambda op: row_alignment(op.result.type, op.attrs["layout"]),
       doc="OpCooperativeMatrixLoadKHR: element (r, c) from offset + r*stride + c (row major) "
           "or offset + c*stride + r (column major), in units of the array's element type.")
define("khr.store", _infer_store, capabilities=KHR_CAPS, writes=0,
       bounds=lambda op: _reach(op, "cooperative matrix store", op.operands[2].type, 3),
       base_alignment=lambda op: row_alignment(op.operands[2].type, op.attrs["layout"]),
       doc="OpCooperativeMatrixStoreKHR: the inverse of khr.load.")


def _reach(op, what: str, t: CoopMatType, stride: int):
    """The block a matrix load/store touches, guarded once per access in checked launches."""
    mem = op.operands[0]
    return matrix_block(what, matrix_layout(t, op.attrs["layout"]).span, mem, op.operands[1],
                        op.operands[stride], mem.type.elem.size // t.component.size)


def _layout(layout: str, loc: Loc) -> str:
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise CompileError(f"unknown layout {layout!r}", loc,
                           hint="use 'row_major' or 'col_major'",
                           rule="SPV_KHR_cooperative_matrix: MemoryLayout is RowMajorKHR or "
                                "ColumnMajorKHR", rule_id="khr.layout")
    return LAYOUTS[layout]


def _stride(stride) -> Value:
    """The stride operand: a runtime integer, or a Python int as a u32 constant (i32 where it
    is negative, so that the stride rule, not the constant's range, reports it); not a
    Python float, even an integral one."""
    if isinstance(stride, (float, np.floating)):
        raise CompileError(f"stride must be an integer scalar, not the float {stride!r}",
                           current_loc(), hint="write an int (16, not 16.0)",
                           rule="SPV_KHR_cooperative_matrix: Stride must be a scalar integer type",
                           rule_id="khr.stride-type")
    negative = isinstance(stride, numbers.Integral) and not isinstance(stride, bool) and stride < 0
    return as_value(stride, i32 if negative else u32)


def load(t: CoopMatType, mem: Value, offset, stride, layout: str = "row_major") -> Value:
    """Load a matrix of type `t` from `mem` (buffer or shared array) at element `offset`."""
    loc = current_loc()
    if not isinstance(t, CoopMatType):
        raise CompileError(f"load needs a coopmat type, got {t!r}", loc,
                           rule="SPV_KHR_cooperative_matrix: Result Type of OpCooperativeMatrixLoadKHR "
                                "must be an OpTypeCooperativeMatrixKHR",
                           hint="pass the matrix type, e.g. pycoop.coopmat[f16, pycoop.Subgroup, 16, 16, UseA]",
                           rule_id="khr.load-result-type")
    _check_mem(mem, loc, "cooperative matrix load")
    return emit1("khr.load", [mem, index_value(offset), _stride(stride)],
                 {"type": t, "layout": _layout(layout, loc)}, loc)


def store(mem: Value, offset, mat: Value, stride, layout: str = "row_major") -> None:
    """Store matrix `mat` into `mem` at element `offset`."""
    loc = current_loc()
    _check_mem(mem, loc, "cooperative matrix store")
    _need_mat(mat, "the stored object", loc)
    emit("khr.store", [mem, index_value(offset), mat, _stride(stride)],
         {"layout": _layout(layout, loc)}, None, loc)


@emulation("khr.load")
def _emu_load(ctx, op, mem, offset, stride):
    t: CoopMatType = op.result.type
    offs = ctx.scope_uniform_value(offset, t.scope, op, "the load offset")
    strd = ctx.scope_uniform_value(stride, t.scope, op, "the load stride")
    active = ctx.scope_active(t.scope, op)
    check_addressing(ctx, op, t, op.attrs["layout"], op.operands[0].type.elem.size, offs, strd,
                     active, "cooperative matrix load")
    mem, k = component_memory(ctx, op.operands[0], t)
    return mem.gather_block(ctx, op, offs * k, strd * k, matrix_layout(t, op.attrs["layout"]),
                            active, t)


def component_memory(ctx, v: Value, t: CoopMatType):
    """The memory a matrix op addresses, as an array of the matrix component when its
    elements hold several (k), and k: offsets and strides count elements."""
    mem = ctx.memory_of(v)
    k = v.type.elem.size // t.component.size
    return (mem.components(t.component) if k > 1 else mem), k


def _store_target(ctx, op, offset, stride):
    """(memory, matrix type, block offsets, stride, active instances) of a store, checked."""
    t: CoopMatType = op.operands[2].type
    offs = ctx.scope_uniform_value(offset, t.scope, op, "the store offset")
    strd = ctx.scope_uniform_value(stride, t.scope, op, "the store stride")
    active = ctx.scope_active(t.scope, op)
    check_addressing(ctx, op, t, op.attrs["layout"], op.operands[0].type.elem.size, offs, strd,
                     active, "cooperative matrix store")
    mem, k = component_memory(ctx, op.operands[0], t)
    return mem, t, offs * k, strd * k, active


@emulation("khr.store")
def _emu_store(ctx, op, mem, offset, mat, stride):
    mem, t, offs, strd, active = _store_target(ctx, op, offset, stride)
    mem.scatter_block(ctx, op, offs, strd, matrix_layout(t, op.attrs["layout"]), active, mat, t)
    return ()


@lowering("khr.load")
def _lower_load(ctx, op):
    t = op.result.type
    ptr, align = ctx.element_pointer(op.operands[0], op.operands[1])
    layout = ctx.const(u32, ctx.enum("CooperativeMatrixLayout", op.attrs["layout"]))
    ctx.set(op.result, ctx.emit("OpCooperativeMatrixLoadKHR", t, ptr, layout,
                                ctx.id(op.operands[2]), *ctx.memory_access(align)))


@lowering("khr.store")
def _lower_store(ctx, op):
    ptr, align = ctx.element_pointer(op.operands[0], op.operands[1])
    layout = ctx.const(u32, ctx.enum("CooperativeMatrixLayout", op.attrs["layout"]))
    ctx.emit("OpCooperativeMatrixStoreKHR", None, ptr, ctx.id(op.operands[2]), layout,
             ctx.id(op.operands[3]), *ctx.memory_access(align))


# --------------------------------------------------------------------------- MulAdd

def _infer_mul_add(operands, attrs, regions, loc):
    a, b, c = operands
    ta, tb, tc = (_need_mat(v, n, loc) for v, n in zip(operands, ("A", "B", "C")))
    rule = f"{SPEC}: OpCooperativeMatrixMulAddKHR"
    for t, use, n in ((ta, Use.A, "A"), (tb, Use.B, "B"), (tc, Use.Accumulator, "C")):
        if t.use != use:
            raise CompileError(f"operand {n} of mul_add has use {t.use.short}, expected {use.short}",
                               loc, rule=f"{rule}: {n}'s 'Use' must be {use.value}",
                               hint="declare the matrix with the matching use (UseA, UseB, Accumulator)",
                               rule_id="khr.mul-add-use")
    if not (ta.scope == tb.scope == tc.scope):
        raise CompileError(f"mul_add operands have different scopes: {ta.scope.value}, "
                           f"{tb.scope.value}, {tc.scope.value}", loc,
                           rule=f"{rule}: A, B, C and Result Type must have the same scope",
                           hint="declare A, B and C with one scope",
                           rule_id="khr.mul-add-scope")
    m, k = ta.shape
    k2, n = tb.shape
    if k != k2 or tc.shape != (m, n):
        raise CompileError(f"mul_add shapes do not match: A is {m}x{k}, B is {k2}x{n}, "
                           f"C is {tc.rows}x{tc.cols}", loc,
                           rule=f"{rule}: A is MxK, B is KxN, C and the result are MxN",
                           hint=f"with A {m}x{k}, B is {k}x{n} and C {m}x{n}",
                           rule_id="khr.mul-add-shape")
    kinds = {ta.component.is_float, tb.component.is_float}
    if len(kinds) != 1 or tc.component.is_float != ta.component.is_float:
        raise CompileError(f"mul_add mixes float and integer matrices ({ta.component}, "
                           f"{tb.component}, {tc.component})", loc,
                           rule="Vulkan: float A/B accumulate into float C, integer into integer",
                           hint="float A and B go with a float C, integer ones with an integer C (pycoop.convert)",
                           rule_id="khr.mul-add-kinds")
    if attrs["saturating"] and tc.component.is_float:
        raise CompileError("saturating accumulation applies to integer matrices only", loc,
                           rule=f"{rule}: SaturatingAccumulation with integer components",
                           hint="drop saturating=True: float accumulation does not saturate",
                           rule_id="khr.saturating-integer")
    return [tc]


define("khr.mul_add", _infer_mul_add, capabilities=KHR_CAPS,
       doc="OpCooperativeMatrixMulAddKHR: A*B + C at the accumulator's precision; integer "
           "signedness from the component types; optional saturating accumulation.")


def operand_mask(op) -> list[str]:
    ta, tb, tc = (v.type for v in op.operands)
    names = []
    for t, n in ((ta, "MatrixASignedComponentsKHR"), (tb, "MatrixBSignedComponentsKHR"),
                 (tc, "MatrixCSignedComponentsKHR"), (op.result.type, "MatrixResultSignedComponentsKHR")):
        if t.component.is_int and t.component.signed:
            names.append(n)
    if op.attrs["saturating"]:
        names.append("SaturatingAccumulationKHR")
    return names


def mul_add(a: Value, b: Value, c: Value, *, saturating: bool = False) -> Value:
    """A @ B + C (cooperative). Integer matrices are treated as signed or unsigned according
    to their component types."""
    return emit1("khr.mul_add", [a, b, c], {"saturating": bool(saturating)})


def _mul_add_numpy(a, b, c, ta, tb, tc, saturating, widen=lambda x, d: x.astype(d),
                   overflow=lambda bad: None):
    if tc.component.is_float:
        acc = np.float64 if tc.component.bits == 64 else np.float32
        r = np.matmul(widen(a, acc), widen(b, acc))
        r += c.astype(acc, copy=False)
        return r.astype(tc.component.dtype, copy=False)
    prod = np.matmul(a.astype(np.int64), b.astype(np.int64))
    lo, hi = tc.component.min_max()
    if saturating:
        # the spec leaves A*B undefined when that intermediate result overflows
        overflow(((prod < lo) | (prod > hi)).any((-2, -1)))
        total = np.clip(prod.astype(object) + c.astype(object), lo, hi) if tc.component.bits == 64 \
            else np.clip(prod + c.astype(np.int64), lo, hi)
        return np.asarray(total).astype(tc.component.dtype)
    return (prod + c.astype(np.int64)).astype(tc.component.dtype)   # low-order bits (wraps)


@emulation("khr.mul_add")
def _emu_mul_add(ctx, op, a, b, c):
    ta, tb, tc = (v.type for v in op.operands)
    active = ctx.scope_active(ta.scope, op)

    def overflow(bad):
        ctx.check_instances(bad, active, op, f"{SPEC}: with SaturatingAccumulation, A*B "
                            f"overflowing {tc.component} before the addition of C is undefined",
                            hint="keep A*B within the accumulator type, or accumulate without "
                                 "saturating=True", rule_id="khr.saturating-overflow")
    return _mul_add_numpy(a, b, c, ta, tb, tc, op.attrs["saturating"], ctx.widened, overflow)


@lowering("khr.mul_add")
def _lower_mul_add(ctx, op):
    ctx.need_shape(*(v.type for v in op.operands), op.result.type, op.attrs["saturating"])
    mask = operand_mask(op)
    extra = ["|".join(mask)] if mask else []
    ctx.set(op.result, ctx.emit("OpCooperativeMatrixMulAddKHR", op.result.type,
                                *(ctx.id(v) for v in op.operands), *extra))


# --------------------------------------------------------------------------- scale, length, convert

def _infer_scale(operands, attrs, regions, loc):
    m, s = operands
    t = _need_mat(m, "the matrix", loc)
    if s.type != t.component:
        raise CompileError(f"scalar is {s.type}, matrix component is {t.component}", loc,
                           rule="OpMatrixTimesScalar: the scalar has the component type",
                           hint=f"convert the scalar: pycoop.cast(s, {t.component})",
                           rule_id="khr.scalar-type")
    if not t.component.is_float:
        raise CompileError("matrix * scalar (OpMatrixTimesScalar) needs a float component type", loc,
                           hint="multiply by a filled matrix instead: m * Mat.fill(s)",
                           rule="SPIR-V: OpMatrixTimesScalar takes floating-point operands (OpIMul for "
                                "integer matrices)", rule_id="khr.scalar-float")
    return [t]


define("khr.scale", _infer_scale, capabilities=KHR_CAPS, doc="OpMatrixTimesScalar.")


@emulation("khr.scale")
def _emu_scale(ctx, op, m, s):
    t = op.result.type
    s = ctx.scope_uniform_value(s, t.scope, op, "the scalar")
    if t.component.encoding:        # in f32, rounded once, as lowered
        return convert_array(m.astype(np.float32) * s[..., None, None].astype(np.float32), f32,
                             t.component)
    return (m * s[..., None, None]).astype(t.component.dtype, copy=False)


@lowering("khr.scale")
def _lower_scale(ctx, op):
    t = op.result.type
    m, s = (ctx.id(v) for v in op.operands)

    def times(wt, x, s):
        if ctx.target == "vulkan":
            return ctx.emit("OpMatrixTimesScalar", wt, x, s)
        # OpMatrixTimesScalar needs the Matrix capability, which the OpenCL environment (kernels
        # using pycoop.intel) does not allow: multiply element-wise by a matrix filled with s
        return ctx.emit("OpFMul", wt, x, ctx.emit("OpCompositeConstruct", wt, s))
    if t.component.encoding:        # bf16 / fp8: OpMatrixTimesScalar takes IEEE floats only
        s = ctx.emit("OpFConvert", f32, s)
        ctx.set(op.result, via_f32(ctx, t, lambda wt, x: times(wt, x, s), m))
        return
    ctx.set(op.result, times(t, m, s))


def scale(m: Value, s) -> Value:
    return emit1("khr.scale", [m, as_value(s, m.type.component)])


def _infer_length(operands, attrs, regions, loc):
    if not isinstance(attrs["type"], CoopMatType):
        raise CompileError(f"pycoop.length takes a cooperative matrix type, not {attrs['type']!r}",
                           loc, rule="OpCooperativeMatrixLengthKHR: Type must be a cooperative "
                                     "matrix type",
                           hint="pass the type, e.g. pycoop.length(pycoop.coopmat[f16, "
                                "pycoop.Subgroup, 16, 16, pycoop.UseA])", rule_id="khr.length-type")
    return [u32]


define("khr.length", _infer_length, capabilities=KHR_CAPS,
       doc="OpCooperativeMatrixLengthKHR: elements owned by each invocation. The emulator "
           "reports ceil(rows*cols / invocations in the scope); devices may differ.")


@emulation("khr.length")
def _emu_length(ctx, op):
    t = op.attrs["type"]
    n = ctx.dispatch.scope_invocations(t.scope)
    return np.full((1, 1), -(-t.rows * t.cols // n), dtype=np.uint32)


@lowering("khr.length")
def _lower_length(ctx, op):
    ctx.set(op.result, ctx.emit("OpCooperativeMatrixLengthKHR", u32, ctx.type_id(op.attrs["type"])))


def length(t: CoopMatType) -> Value:
    return emit1("khr.length", [], {"type": t})


def _infer_convert(operands, attrs, regions, loc):
    src = _need_mat(operands[0], "the converted value", loc)
    dst: CoopMatType = attrs["type"]
    if (src.scope, src.rows, src.cols) != (dst.scope, dst.rows, dst.cols):
        raise CompileError(f"cannot convert {src} to {dst}: scope and shape must stay the same", loc,
                           rule=f"{SPEC}: conversions keep Scope, Rows, Columns and Use",
                           hint="a conversion changes the component type only: build a matrix of the other shape",
                           rule_id="khr.convert-shape")
    if src.use != dst.use:
        raise CompileError(f"cannot change the use from {src.use.short} to {dst.use.short} with a "
                           "component conversion", loc,
                           rule=f"{SPEC}: conversions keep the Use",
                           hint="changing the use is not part of SPV_KHR_cooperative_matrix; store and load "
                                "the matrix with the other use instead", rule_id="khr.convert-use")
    return [dst]


define("khr.convert", _infer_convert, capabilities=KHR_CAPS,
       doc="Component-type conversion of a matrix (OpFConvert, OpConvertFToS, ...).")


def report_out_of_range(ctx, op, m: np.ndarray, dst: ScalarType) -> None:
    """A float matrix converted to integer type `dst`: an element that is NaN, infinite or out
    of range after truncation is undefined behaviour (reported per scope instance)."""
    lo, hi = dst.min_max()
    x = np.trunc(m.astype(np.float64))
    bad = (~np.isfinite(x) | (x < lo) | (x > hi)).any((-2, -1))
    ctx.check_instances(bad, ctx.scope_active(op.result.type.scope, op), op,
                        f"converting an out-of-range float to {dst} is undefined",
                        hint=f"keep the elements within {lo}..{hi} (and not NaN)")


@emulation("khr.convert")
def _emu_convert(ctx, op, m):
    src, dst = op.operands[0].type.component, op.attrs["type"].component
    if src.is_float and dst.is_int:
        report_out_of_range(ctx, op, m, dst)
    return convert_array(m, src, dst)


@lowering("khr.convert")
def _lower_convert(ctx, op):
    src, dst = op.operands[0].type.component, op.attrs["type"].component
    ctx.set(op.result, emit_conversion(ctx, src, dst, op.result.type, ctx.id(op.operands[0])))


def convert(m: Value, to) -> Value:
    """Convert a matrix to another component type (`to` a scalar type or a coopmat type)."""
    loc = current_loc()
    t = _need_mat(m, "the converted value", loc)
    # a new component type is checked as the type pycoop.coopmat[...] would build (not bool)
    dst = make_coopmat_type((to, t.scope, t.rows, t.cols, t.use), loc) if isinstance(to, ScalarType) \
        else to
    if not isinstance(dst, CoopMatType):
        raise CompileError(f"convert target must be a scalar or coopmat type, got {to!r}", loc,
                           rule="SPV_KHR_cooperative_matrix: conversions produce a scalar or an "
                                "OpTypeCooperativeMatrixKHR",
                           hint="pass a scalar type (pycoop.f16) or a coopmat type",
                           rule_id="khr.convert-target")
    if dst == t:
        return m
    return emit1("khr.convert", [m], {"type": dst}, loc)


# --------------------------------------------------------------------------- sugar on types/values

CoopMatType.fill = fill
CoopMatType.load = load
CoopMatType.length = length
CoopMatType.zeros = lambda self: fill(self, 0)
