"""SPV_NV_cooperative_matrix2 matrix ops: reduce, per-element functions, use conversion,
component+use conversion and transpose.

Combine and per-element functions are Python callables traced into SPIR-V functions; the
emulator calls them vectorised over every element (reductions as a pairwise tree).
"""
from __future__ import annotations

import numpy as np

from ...errors import CompileError, Loc, current_loc
from ...ir.builder import emit1, trace_closure, trace_function
from ...ir.core import Value
from ...types import CoopMatType, ScalarType, Use, u32
from .. import core
from ..core import as_value, convert_array
from ...ir.registry import define, emulation, lowering
from .tangled import check_untangled
from ..khr import convert as khr_convert, report_out_of_range

CM2 = "SPV_NV_cooperative_matrix2"
REDUCE_MODES = {"row": ("Row",), "column": ("Column",), "row_column": ("Row", "Column"),
                "2x2": ("2x2",)}
_BUILTIN_COMBINE = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b,
                    "max": core.maximum, "min": core.minimum}


def _mat(v, what: str, loc: Loc) -> CoopMatType:
    if not isinstance(v, Value) or not isinstance(v.type, CoopMatType):
        raise CompileError(f"{what} must be a cooperative matrix, got "
                           f"{getattr(v, 'type', type(v).__name__)}", loc,
                           rule="SPV_NV_cooperative_matrix2: the Matrix operand must be an "
                                "OpTypeCooperativeMatrixKHR",
                           hint="pass a cooperative matrix (T.load(...), T.fill(...), pycoop.mul_add(...))",
                           rule_id="nv.matrix-operand")
    return v.type


# --------------------------------------------------------------------------- reduce

def _infer_reduce(operands, attrs, regions, loc):
    t = operands[0].type
    r: CoopMatType = attrs["type"]
    mode = attrs["mode"]
    rule = f"{CM2}: OpCooperativeMatrixReduceNV"
    if t.use != Use.Accumulator or r.use != Use.Accumulator:
        raise CompileError("reduce works on accumulator matrices and gives one", loc,
                           rule=f"{rule}: Matrix and Result Type have Use MatrixAccumulatorKHR",
                           hint="convert A/B matrices to accumulators first",
                           rule_id="nv.reduce-accumulator")
    if r.component != t.component or r.scope != t.scope:
        raise CompileError(f"reduce result {r} must keep the component type and scope of {t}", loc,
                           rule=f"{rule}: same Component Type and Scope",
                           hint="leave result_type out, or give it the matrix's component type and scope",
                           rule_id="nv.reduce-type")
    check_untangled(attrs["combine"], "combine function", loc)
    if mode == "2x2" and (t.rows % 2 or t.cols % 2):
        raise CompileError(f"a 2x2 reduction needs an even number of rows and columns, not "
                           f"{t.rows}x{t.cols}", loc, rule=f"{rule}: 2x2 halves both dimensions",
                           hint="reduce a matrix of even dimensions", rule_id="nv.reduce-2x2-shape")
    if mode == "2x2" and r.shape != (t.rows // 2, t.cols // 2):
        raise CompileError(f"a 2x2 reduction of {t.rows}x{t.cols} gives {t.rows // 2}x{t.cols // 2}, "
                           f"not {r.rows}x{r.cols}", loc, rule=f"{rule}: 2x2 halves both dimensions",
                           hint="leave result_type out: it follows from the matrix",
                           rule_id="nv.reduce-2x2-shape")
    if mode == "row" and r.rows != t.rows:
        raise CompileError(f"a row reduction keeps the {t.rows} rows, the result has {r.rows}", loc,
                           rule=f"{rule}: Row keeps the number of rows",
                           hint="leave result_type out, or give it the matrix's rows",
                           rule_id="nv.reduce-row-shape")
    if mode == "column" and r.cols != t.cols:
        raise CompileError(f"a column reduction keeps the {t.cols} columns, the result has {r.cols}",
                           loc, rule=f"{rule}: Column keeps the number of columns",
                           hint="leave result_type out, or give it the matrix's columns",
                           rule_id="nv.reduce-column-shape")
    return [r]


define("nv.reduce", _infer_reduce, capabilities=("CooperativeMatrixReductionsNV",), environment="vulkan",
       doc="OpCooperativeMatrixReduceNV: every element of a reduced row/column/all/2x2 block "
           "holds the combination of the source elements (pairwise tree of CombineFunc).")


def reduce(mat: Value, mode: str, combine, result_type: CoopMatType | None = None) -> Value:
    """Reduce rows ("row"), columns ("column"), everything ("row_column") or 2x2 blocks
    ("2x2") with `combine(a, b)` (a function, or "add"/"mul"/"max"/"min"). The result has
    the source's shape (halved for 2x2) unless `result_type` says otherwise."""
    loc = current_loc()
    t = _mat(mat, "the reduced value", loc)
    if not isinstance(mode, str) or mode not in REDUCE_MODES:
        raise CompileError(f"unknown reduction {mode!r}", loc,
                           hint=f"use one of {', '.join(REDUCE_MODES)}",
                           rule="SPV_NV_cooperative_matrix2: Reduce must be Row, Column, Row|Column, or "
                                "2x2",
                           rule_id="nv.reduce-mode")
    if result_type is None:
        result_type = t.with_(rows=t.rows // 2, cols=t.cols // 2) if mode == "2x2" else t
    elif not isinstance(result_type, CoopMatType):
        raise CompileError(f"reduce's result_type must be a coopmat type, got {result_type!r}",
                           loc, rule="SPV_NV_cooperative_matrix2: Result Type of "
                                     "OpCooperativeMatrixReduceNV is a cooperative matrix type",
                           hint="e.g. result_type=pycoop.coopmat[f32, pycoop.Workgroup, 128, 32, "
                                "pycoop.Accumulator]", rule_id="nv.reduce-result-type")
    fn = _BUILTIN_COMBINE.get(combine, combine) if isinstance(combine, str) else combine
    if isinstance(combine, str) and combine not in _BUILTIN_COMBINE:
        raise CompileError(f"unknown combine function {combine!r}", loc,
                           hint=f"use one of {', '.join(_BUILTIN_COMBINE)} or a function (a, b) -> value",
                           rule="SPV_NV_cooperative_matrix2: CombineFunc must be an OpFunction with two "
                                "parameters",
                           rule_id="nv.combine-function")
    f = trace_function(fn, [t.component, t.component], "combine function", loc, t.component)
    return emit1("nv.reduce", [mat], {"type": result_type, "mode": mode, "combine": f}, loc)


def _tree(ctx, fn, x: np.ndarray, axis: int) -> np.ndarray:
    """Combine along `axis` as a pairwise tree; the result keeps the axis with length 1."""
    x = np.moveaxis(x, axis, -1)
    while x.shape[-1] > 1:
        n = x.shape[-1]
        a, b = x[..., 0:n - n % 2:2], x[..., 1:n:2]
        y = ctx.call(fn, [a, b], a.shape)
        x = np.concatenate([y, x[..., n - 1:]], -1) if n % 2 else y
    return np.moveaxis(x, -1, axis)


@emulation("nv.reduce")
def _emu_reduce(ctx, op, m):
    r: CoopMatType = op.attrs["type"]
    fn = op.attrs["combine"]
    ctx.scope_active(r.scope, op)
    mode = op.attrs["mode"]
    if mode == "2x2":
        a, b = m[..., 0::2, 0::2], m[..., 1::2, 0::2]
        c, d = m[..., 0::2, 1::2], m[..., 1::2, 1::2]
        ab = ctx.call(fn, [a, b], a.shape)
        cd = ctx.call(fn, [c, d], c.shape)
        return ctx.call(fn, [ab, cd], ab.shape)
    if mode in ("row", "row_column"):
        m = _tree(ctx, fn, m, -1)
    if mode in ("column", "row_column"):
        m = _tree(ctx, fn, m, -2)
    return np.broadcast_to(m, m.shape[:-2] + r.shape).copy()


@lowering("nv.reduce")
def _lower_reduce(ctx, op):
    ctx.set(op.result, ctx.emit("OpCooperativeMatrixReduceNV", op.result.type, ctx.id(op.operands[0]),
                                "|".join(REDUCE_MODES[op.attrs["mode"]]),
                                ctx.function_id(op.attrs["combine"])))


# --------------------------------------------------------------------------- per-element

def _infer_per_element(operands, attrs, regions, loc):
    t = operands[0].type
    check_untangled(attrs["fn"], "per-element function", loc)
    for v in operands[1:]:
        if isinstance(v.type, CoopMatType) and v.type != t:
            raise CompileError(f"extra matrix operand {v.type} must have the type of the matrix {t}",
                               loc, rule=f"{CM2}: OpCooperativeMatrixPerElementOpNV: additional "
                                         "matrix operands match Matrix's type",
                               hint="convert the extra matrix to the matrix's type, or pass a scalar",
                               rule_id="nv.per-element-matrix-type")
    return [t]


define("nv.per_element", _infer_per_element, capabilities=("CooperativeMatrixPerElementOperationsNV",),
       environment="vulkan",
       doc="OpCooperativeMatrixPerElementOpNV: fn(row, col, element, *extra) for every element; "
           "extra matrix operands pass their element.")


def per_element(mat: Value, fn, *extra) -> Value:
    """Apply `fn(row: u32, col: u32, element, *extra)` to every element; extra operands are
    scalars or matrices of the same type (whose element is passed)."""
    loc = current_loc()
    t = _mat(mat, "the matrix", loc)
    ex = [e if isinstance(e, Value) else as_value(e, t.component) for e in extra]
    ptypes = [u32, u32, t.component] + [e.type.component if isinstance(e.type, CoopMatType) else e.type
                                         for e in ex]
    for e in ex:
        if not isinstance(e.type, (CoopMatType, ScalarType)):
            raise CompileError(f"extra operands are scalars or matrices, got {e.type}", loc,
                               rule="SPV_NV_cooperative_matrix2: PerElementOp's additional operands are "
                                    "scalars or matrices of Matrix's type",
                               hint="pass scalars, or matrices of the matrix's type",
                               rule_id="nv.per-element-operand")
    # values the function captures from the kernel are passed like extra operands
    f, captured = trace_closure(fn, ptypes, "per-element function", loc, t.component)
    return emit1("nv.per_element", [mat, *ex, *captured], {"fn": f}, loc)


@emulation("nv.per_element")
def _emu_per_element(ctx, op, m, *extra):
    t: CoopMatType = op.result.type
    ctx.scope_active(t.scope, op)
    shape = np.broadcast_shapes(m.shape, *(e.shape for e, v in zip(extra, op.operands[1:])
                                           if isinstance(v.type, CoopMatType)))
    rows = np.arange(t.rows, dtype=np.uint32)[:, None]
    cols = np.arange(t.cols, dtype=np.uint32)[None, :]
    args = [rows, cols, m]
    for e, v in zip(extra, op.operands[1:]):
        if isinstance(v.type, CoopMatType):
            args.append(e)
        else:
            args.append(ctx.scope_uniform_value(e, t.scope, op, "a per-element operand")[..., None, None])
    return ctx.call(op.attrs["fn"], [np.broadcast_to(a, shape) for a in args], shape)


@lowering("nv.per_element")
def _lower_per_element(ctx, op):
    ctx.set(op.result, ctx.emit("OpCooperativeMatrixPerElementOpNV", op.result.type,
                                ctx.id(op.operands[0]), ctx.function_id(op.attrs["fn"]),
                                *(ctx.id(v) for v in op.operands[1:])))


# --------------------------------------------------------------------------- conversions

def _infer_convert(operands, attrs, regions, loc):
    src = operands[0].type
    dst: CoopMatType = attrs["type"]
    rule = f"{CM2}: conversions"
    if (src.scope, src.rows, src.cols) != (dst.scope, dst.rows, dst.cols):
        raise CompileError(f"cannot convert {src} to {dst}: scope and shape must stay the same", loc,
                           rule=f"{rule} keep Scope, Rows and Columns", hint="use transpose() to swap them",
                           rule_id="nv.convert-shape")
    if src.use != dst.use and not (src.use == Use.Accumulator and dst.use in (Use.A, Use.B)):
        raise CompileError(f"cannot change the use from {src.use.short} to {dst.use.short}", loc,
                           rule=f"{rule}: only an accumulator converts to a UseA or UseB matrix",
                           hint="convert an accumulator to UseA or UseB; store and load other matrices",
                           rule_id="nv.convert-use")
    return [dst]


define("nv.convert", _infer_convert, capabilities=("CooperativeMatrixConversionsNV",), environment="vulkan",
       doc="OpCooperativeMatrixConvertNV (use change, same component type) or an "
           "Op*Convert that also changes the component type (the relaxed rule).")


def convert(mat: Value, to: CoopMatType) -> Value:
    """Convert an accumulator to a UseA/UseB matrix (and, optionally, another component type)."""
    loc = current_loc()
    t = _mat(mat, "the converted value", loc)
    if not isinstance(to, CoopMatType):
        raise CompileError(f"convert target must be a coopmat type, got {to!r}", loc,
                           rule="SPV_NV_cooperative_matrix2: Result Type must be an "
                                "OpTypeCooperativeMatrixKHR",
                           hint="pass a coopmat type, e.g. pycoop.coopmat[f16, scope, m, n, pycoop.UseA]",
                           rule_id="nv.convert-result-type")
    if to == t:
        return mat
    if to.use == t.use:
        return khr_convert(mat, to)
    return emit1("nv.convert", [mat], {"type": to}, loc)


@emulation("nv.convert")
def _emu_convert(ctx, op, m):
    src, dst = op.operands[0].type.component, op.attrs["type"].component
    if src.is_float and dst.is_int:      # undefined out of range, as for khr.convert
        report_out_of_range(ctx, op, m, dst)
    return convert_array(m, src, dst)


@lowering("nv.convert")
def _lower_convert(ctx, op):
    src, dst = op.operands[0].type.component, op.attrs["type"].component
    if src == dst:
        ctx.set(op.result, ctx.emit("OpCooperativeMatrixConvertNV", op.result.type, ctx.id(op.operands[0])))
    else:
        ctx.set(op.result, core.emit_conversion(ctx, src, dst, op.result.type, ctx.id(op.operands[0])))


def _infer_transpose(operands, attrs, regions, loc):
    src = operands[0].type
    dst: CoopMatType = attrs["type"]
    rule = f"{CM2}: OpCooperativeMatrixTransposeNV"
    if src.use != Use.Accumulator:
        raise CompileError(f"transpose takes an accumulator, got use {src.use.short}", loc,
                           rule=f"{rule}: Matrix has Use MatrixAccumulatorKHR",
                           hint="transpose an accumulator (pycoop.nv.convert it first)",
                           rule_id="nv.transpose-use")
    if dst.use != Use.B or dst.shape != (src.cols, src.rows) or dst.scope != src.scope \
            or dst.component != src.component:
        raise CompileError(f"the transpose of {src} is a UseB {src.cols}x{src.rows} matrix, not {dst}",
                           loc, rule=f"{rule}: Result is MatrixBKHR with Rows and Columns swapped",
                           hint="leave `to` out: the result type follows from the matrix",
                           rule_id="nv.transpose-shape")
    return [dst]


define("nv.transpose", _infer_transpose, capabilities=("CooperativeMatrixConversionsNV",), environment="vulkan",
       doc="OpCooperativeMatrixTransposeNV: accumulator MxN -> UseB NxM, transposed.")


def transpose(mat: Value, to: CoopMatType | None = None) -> Value:
    """Transpose an accumulator into a UseB matrix."""
    loc = current_loc()
    t = _mat(mat, "the transposed value", loc)
    to = to or t.with_(rows=t.cols, cols=t.rows, use=Use.B)
    if not isinstance(to, CoopMatType):
        raise CompileError(f"the transpose of {t} is a matrix type, not {to!r}", loc,
                           rule=f"{CM2}: OpCooperativeMatrixTransposeNV: Result is MatrixBKHR with "
                                "Rows and Columns swapped",
                           hint="leave `to` out: the result type follows from the matrix",
                           rule_id="nv.transpose-shape")
    return emit1("nv.transpose", [mat], {"type": to}, loc)


@emulation("nv.transpose")
def _emu_transpose(ctx, op, m):
    return np.swapaxes(m, -1, -2).copy()


@lowering("nv.transpose")
def _lower_transpose(ctx, op):
    ctx.set(op.result, ctx.emit("OpCooperativeMatrixTransposeNV", op.result.type, ctx.id(op.operands[0])))
