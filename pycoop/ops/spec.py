"""Specialization constants: the value of a `pycoop.Spec[T]` kernel parameter.

One `spec_constant` op per parameter, at the top of the kernel body. It lowers to an
OpSpecConstant (its default: the value the kernel was compiled with) decorated with a SpecId,
which a Vulkan application overrides at pipeline creation (VkSpecializationInfo). Its
instructions use the id like any other value; the emulator runs the module with the value
it was compiled for (pycoop compiles one module per value it emulates).
"""
from __future__ import annotations

import numpy as np

from ..errors import CompileError
from ..ir.registry import define, emulation, lowering

SHAPE_RULE = ("pycoop: a Spec value is chosen at pipeline creation, after tracing; shapes "
              "(cooperative-matrix rows and columns, shared-array lengths) are trace-time ints")


def check_not_spec(v, what: str, loc) -> None:
    """A CompileError when `v` (used as `what`, a shape) is a Spec parameter's value."""
    op = getattr(v, "op", None)
    if op is not None and op.name == "spec_constant":
        raise CompileError(f"{what} cannot be the specialization constant "
                           f"'{op.attrs['name']}'", loc, rule=SHAPE_RULE,
                           hint=f"make '{op.attrs['name']}' a pycoop.Const parameter (one module "
                                "per value), or use a Python int",
                           rule_id="frontend.spec-as-shape")


def _infer(operands, attrs, regions, loc):
    return [attrs["type"]]


define("spec_constant", _infer,
       doc="The value of a Spec[T] parameter: an OpSpecConstant with SpecId `spec_id`, set at "
           "pipeline creation (its default: `value`).")


@emulation("spec_constant")
def _emulate(ctx, op):
    return np.full((1, 1), op.attrs["value"], dtype=op.attrs["type"].dtype)


@lowering("spec_constant")
def _lower(ctx, op):
    sid = ctx.b.spec_constant(ctx.type_id(op.attrs["type"]), op.attrs["value"])
    ctx.b.decorate(sid, "SpecId", op.attrs["spec_id"])
    ctx.b.name(sid, op.attrs["name"])
    ctx.set(op.result, sid)
