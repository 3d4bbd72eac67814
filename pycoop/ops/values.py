"""The user-facing protocol of traced values: Python operators, indexing and attributes on
`Value`, `f32(x)`-style casts on scalar types, and the functions that choose between a scalar
op and a cooperative-matrix op (`cast`, and `*` of a matrix by a scalar).

The IR's `Value` is also the user's proxy while a kernel is traced (ir.core); its operators are
installed here, once, when pycoop.ops is imported, so that the IR does not depend on the ops
that implement them. This is the only module that adds behaviour to classes of lower layers.
"""
from __future__ import annotations

from ..errors import CompileError, current_loc
from ..ir.builder import tracing
from ..ir.core import Value
from ..types import ArrayType, BufferType, CoopMatType, PointerType, ScalarType, SharedArrayType, VectorType
from . import core
from .composite import extract, make_vector
from .core import TYPE_METHODS, _elem, compare, floor, load, store, unary
from .khr import convert, fill, scale
from .pointer import element, member


def binary(kind: str, a, b):
    """core.binary, with a cooperative matrix times a scalar as OpMatrixTimesScalar (KHR)."""
    if kind == "mul":
        at, bt = getattr(a, "type", None), getattr(b, "type", None)
        if isinstance(at, CoopMatType) and not isinstance(bt, CoopMatType):
            return scale(a, b)
        if isinstance(bt, CoopMatType) and not isinstance(at, CoopMatType):
            return scale(b, a)
    return core.binary(kind, a, b)


def cast(x, type: ScalarType) -> Value:
    """Convert a scalar to `type` (f32(x) is the same); a matrix converts its components."""
    if isinstance(x, Value) and isinstance(x.type, CoopMatType):
        return convert(x, type)
    return core.cast(x, type)


def _scalar_call(self: ScalarType, x):
    """f32(x), u32(x), ...: a cast when traced; a NumPy scalar otherwise."""
    if tracing():
        return cast(x, self)
    return self.dtype.type(x)


ScalarType.__call__ = _scalar_call


def _ones(t):
    """A value of type `t` (a scalar, vector or matrix type) whose every element is 1."""
    one = core.as_value(1, _elem(t))
    if isinstance(t, VectorType):
        return make_vector([one] * t.count)
    return fill(t, one) if isinstance(t, CoopMatType) else one


_COMPONENTS = {"x": 0, "y": 1, "z": 2, "w": 3}


class AttributeCompileError(CompileError, AttributeError):
    """A missing attribute of a kernel value: a CompileError at the kernel's line, which
    `hasattr` and `getattr(v, name, default)` still read as absent."""


def _install_operators():
    def bin_(kind, swap=False):
        if swap:
            return lambda self, other: binary(kind, other, self)
        return lambda self, other: binary(kind, self, other)

    for kind, dunder in [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "truediv"),
                         ("rem", "mod"), ("and", "and"), ("or", "or"), ("xor", "xor"),
                         ("shl", "lshift"), ("shr", "rshift"), ("pow", "pow")]:
        setattr(Value, f"__{dunder}__", bin_(kind))
        setattr(Value, f"__r{dunder}__", bin_(kind, True))

    def power(self, other):
        """x ** n for a Python integer n (or a float of integral value) 1 <= |n| <= 64 as
        products, by squaring, as Python computes it: GLSL's Pow is undefined for x < 0, so
        (x - 4.0) ** 2 could be NaN on a GPU; n < 0 divides 1 by the product (floats), and
        x ** 0 is 1 (Pow(x, 0) is undefined for x <= 0). Other exponents: Pow (floats only)."""
        n = other
        if isinstance(n, float) and n.is_integer():
            n = int(n)
        t = _elem(self.type)
        if type(n) is int and n == 0 and t is not None and not t.is_bool:
            return _ones(self.type)
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= abs(n) <= 64 \
                or t is None or (n < 0 and not t.is_float):
            return binary("pow", self, other)
        result, base, k = None, self, abs(n)
        while k:
            if k & 1:
                result = base if result is None else binary("mul", result, base)
            k >>= 1
            if k:
                base = binary("mul", base, base)
        return result if n > 0 else binary("div", 1.0, result)

    Value.__pow__ = power

    def floordiv(self, other, swap=False):
        a, b = (other, self) if swap else (self, other)
        t = _elem(self.type)
        if t is not None and t.is_float and isinstance(self.type, CoopMatType):
            raise CompileError(f"`//` is not defined on {t} matrices", current_loc(),
                               hint="divide with `/`; floor the elements after storing them",
                               rule="SPV_KHR_cooperative_matrix allows only + - * / and negation "
                                    "element-wise on matrices (`//` of floats is Floor of a "
                                    "division)", rule_id="khr.matrix-arithmetic")
        if t is not None and t.is_float:
            return floor(binary("div", a, b))
        return binary("div", a, b)

    def truediv(self, other, swap=False):
        a, b = (other, self) if swap else (self, other)
        t = _elem(self.type)
        if t is not None and t.is_int:
            raise CompileError("`/` on integers is ambiguous", current_loc(),
                               hint="use `//` (truncating integer division, as in C and SPIR-V) "
                                    "or cast to a float type",
                               rule="pycoop: `/` is true division on floats; integers use `//` "
                                    "(OpSDiv/OpUDiv) explicitly", rule_id="core.integer-true-division")
        return binary("div", a, b)

    Value.__divmod__ = lambda s, o: (floordiv(s, o), binary("rem", s, o))
    Value.__rdivmod__ = lambda s, o: (floordiv(s, o, True), binary("rem", o, s))
    Value.__floordiv__ = lambda s, o: floordiv(s, o)
    Value.__rfloordiv__ = lambda s, o: floordiv(s, o, True)
    Value.__truediv__ = lambda s, o: truediv(s, o)
    Value.__rtruediv__ = lambda s, o: truediv(s, o, True)
    Value.__neg__ = lambda s: unary("neg", s)
    Value.__pos__ = lambda s: s
    Value.__invert__ = lambda s: unary("not", s)
    Value.__abs__ = lambda s: unary("abs", s)
    for kind, dunder in [("eq", "eq"), ("ne", "ne"), ("lt", "lt"), ("le", "le"), ("gt", "gt"),
                         ("ge", "ge")]:
        setattr(Value, f"__{dunder}__", (lambda k: lambda self, other: compare(k, self, other))(kind))
    Value.__hash__ = object.__hash__

    def getitem(self, idx):
        if isinstance(self.type, (BufferType, SharedArrayType)):
            return load(self, idx)
        if isinstance(self.type, PointerType):
            return element(self, idx)
        if isinstance(self.type, (ArrayType, VectorType)):
            return extract(self, idx)
        raise CompileError(f"cannot index a value of type {self.type}", current_loc(),
                           rule="pycoop: buffers, shared arrays, arrays and vectors are indexed",
                           hint="index buffers, shared arrays, arrays and vectors",
                           rule_id="core.indexable")

    def setitem(self, idx, val):
        if isinstance(self.type, (BufferType, SharedArrayType)):
            return store(self, idx, val)
        raise CompileError(f"cannot assign into a value of type {self.type}", current_loc(),
                           rule="pycoop: buffers and shared arrays are assigned into; arrays and "
                                "vectors are values",
                           hint="build a new one with pycoop.make_array([...]) / "
                                "pycoop.make_vector([...])",
                           rule_id="core.assignable")

    def getattr_(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        method = TYPE_METHODS.get(type(self.type), {}).get(name)
        if method is not None:
            return lambda *a, **k: method(self, *a, **k)
        if isinstance(self.type, VectorType) and name in _COMPONENTS and \
                _COMPONENTS[name] < self.type.count:
            return extract(self, _COMPONENTS[name])       # v.x, v.y, ... as in GLSL
        if not isinstance(self.type, PointerType):
            vec = isinstance(self.type, VectorType)
            raise AttributeCompileError(
                f"a value of type {self.type} has no attribute {name!r}", current_loc(),
                rule="pycoop: a vector has the components .x .y .z .w (as many as it holds), a "
                     "struct element of a buffer its fields; other kernel values have no "
                     "attributes",
                hint="build a swizzle with pycoop.make_vector([v.x, v.y])" if vec else
                     "a buffer's length is not a kernel value: pass it as a scalar argument "
                     "(or a Const)", rule_id="core.attribute")
        return member(self, name)

    runtime_len, runtime_iter = Value.__len__, Value.__iter__

    def length(self):
        """len() of an array, vector or shared array: its length, fixed by its type."""
        t = self.type
        if isinstance(t, (ArrayType, SharedArrayType)):
            return t.length
        if isinstance(t, VectorType):
            return t.count
        return runtime_len(self)

    def iterate(self):
        """The elements of an array or vector, in order (`a, b = v`, `for c in v`); memory
        (buffers, shared arrays) is read with indexes and loops instead."""
        if isinstance(self.type, (ArrayType, VectorType)):
            return (extract(self, k) for k in range(length(self)))
        if isinstance(self.type, SharedArrayType):
            raise CompileError(f"cannot iterate over a shared array ({self.type}): it is memory, "
                               "read by index", current_loc(),
                               rule="pycoop: compile-time values, arrays and vectors are "
                                    "iterated in Python; other runtime values have no length at "
                                    "trace time (shared arrays are read by index)",
                               hint="loop over its indexes: `for k in range(len(s)):` and read "
                                    "s[k]", rule_id="frontend.runtime-iteration")
        return runtime_iter(self)

    Value.__getattr__ = getattr_
    Value.__getitem__ = getitem
    Value.__setitem__ = setitem
    Value.__len__ = length
    Value.__iter__ = iterate


_install_operators()
