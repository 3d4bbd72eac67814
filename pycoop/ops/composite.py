"""Per-invocation arrays and vectors: build them from scalars and read elements at
compile-time indices (OpCompositeConstruct / OpCompositeExtract). Vendor ops that return
or take one array per invocation (Intel block IO, QCOM conversions) use these values.

Emulator layout: the element axis is last, after the invocation axes: (W|1, I|1, n).
"""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import CompileError, current_loc
from ..ir.builder import emit1
from ..ir.core import Value
from ..types import VECTOR_SIZES, ArrayType, ScalarType, VectorType
from .core import as_value
from ..ir.registry import define, emulation, lowering


def _infer_construct(operands, attrs, regions, loc):
    t = attrs["type"]
    elem = t.elem
    if len(operands) != (t.length if isinstance(t, ArrayType) else t.count):
        raise CompileError(f"internal: {t} needs {t.length if isinstance(t, ArrayType) else t.count} "
                           f"elements, got {len(operands)}", loc,
                           rule="SPIR-V: OpCompositeConstruct has exactly one constituent per component of "
                                "the Result Type")
    for v in operands:
        if v.type != elem:
            raise CompileError(f"element of type {v.type} in a {t}", loc,
                               hint=f"cast the elements to {elem}",
                               rule="SPIR-V: OpCompositeConstruct constituents have the component type of "
                                    "the Result Type", rule_id="composite.constituent-type")
    return [t]


define("composite.construct", _infer_construct, pure=True,
       doc="An array or vector from one scalar per element (OpCompositeConstruct).")


@emulation("composite.construct")
def _emu_construct(ctx, op, *elems):
    shape = np.broadcast_shapes(*(e.shape for e in elems))
    return np.stack([np.broadcast_to(e, shape) for e in elems], axis=-1)


@lowering("composite.construct")
def _lower_construct(ctx, op):
    ctx.set(op.result, ctx.emit("OpCompositeConstruct", op.result.type,
                                *(ctx.id(v) for v in op.operands)))


def make_array(values, elem: ScalarType | None = None) -> Value:
    """An array value with one element per entry of `values` (per invocation)."""
    loc = current_loc()
    values = list(values)
    if not values:
        raise CompileError("an array needs at least one element", loc,
                           rule="SPIR-V: OpTypeArray Length must be at least 1",
                           hint="pass at least one element",
                           rule_id="composite.array-length")
    like = elem or next((v.type for v in values if isinstance(v, Value)), None)
    vals = [as_value(v, like) for v in values]
    return emit1("composite.construct", vals, {"type": ArrayType(vals[0].type, len(vals))}, loc)


def make_vector(values, elem: ScalarType | None = None) -> Value:
    loc = current_loc()
    values = list(values)
    if len(values) not in VECTOR_SIZES:
        raise CompileError(f"a vector has 2, 3, 4, 8 or 16 components, got {len(values)}", loc,
                           rule="SPIR-V: OpTypeVector Component Count is 2, 3 or 4 (8 and 16 "
                                "with the Vector16 capability)",
                           hint="use 2, 3, 4, 8 or 16 components, or an array (pycoop.make_array)",
                           rule_id="composite.vector-size")
    like = elem or next((v.type for v in values if isinstance(v, Value)), None)
    vals = [as_value(v, like) for v in values]
    if not isinstance(vals[0].type, ScalarType):
        raise CompileError(f"a vector holds scalars, not {vals[0].type}", loc,
                           rule="SPIR-V: OpTypeVector Component Type must be a scalar numerical or "
                                "Boolean type",
                           hint="build an array instead (pycoop.make_array), or a vector of the "
                                "scalars themselves", rule_id="composite.vector-component")
    return emit1("composite.construct", vals, {"type": VectorType(vals[0].type, len(vals))}, loc)


def _infer_extract(operands, attrs, regions, loc):
    t = operands[0].type
    n = t.length if isinstance(t, ArrayType) else t.count
    i = attrs["index"]
    if not 0 <= i < n:
        raise CompileError(f"index {i} is out of range for {t}", loc,
                           rule="SPIR-V: OpCompositeExtract/Insert indexes must be in bounds of the "
                                "composite",
                           hint=f"index 0 to {n - 1} (or -{n} to -1 from the end)",
                           rule_id="composite.index-range")
    return [t.elem]


define("composite.extract", _infer_extract, pure=True,
       doc="One element of an array or vector at a compile-time index (OpCompositeExtract).")


@emulation("composite.extract")
def _emu_extract(ctx, op, x):
    return x[..., op.attrs["index"]]


@lowering("composite.extract")
def _lower_extract(ctx, op):
    ctx.set(op.result, ctx.emit("OpCompositeExtract", op.result.type, ctx.id(op.operands[0]),
                                op.attrs["index"]))


def extract(x: Value, index) -> Value:
    loc = current_loc()
    if isinstance(index, Value) or not isinstance(index, numbers.Integral):
        raise CompileError("arrays and vectors are indexed with compile-time ints", loc,
                           hint="unroll the loop over the elements with a Python range()",
                           rule="SPIR-V: OpCompositeExtract/Insert take literal indexes",
                           rule_id="composite.literal-index")
    n = x.type.length if isinstance(x.type, ArrayType) else x.type.count
    index = int(index)
    if -n <= index < 0:              # from the end, as Python's sequences (the length is static)
        index += n
    return emit1("composite.extract", [x], {"index": index}, loc)
