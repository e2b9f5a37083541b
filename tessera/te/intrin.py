"""Scalar helpers of the tensor expression language: constants, logic, limits and math intrinsics.

Every math function builds an `ir.Call` whose `op` is the C-level name that code generators and
interpreters dispatch on: exp, exp2, log, log2, log10, log1p, sqrt, rsqrt, tanh, sigmoid, erf,
sin, cos, tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh, abs, floor, ceil, round (half
to even, as numpy), trunc, pow, fmod, fma,
isnan, isinf and if_then_else (only the taken branch is evaluated).
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError
from ..ir import expr as E
from ..ir.dtype import DataType, bool_, numpy_dtype


def var(name: str = "tindex", dtype="int32") -> E.Var:
    """A symbolic scalar (a shape extent or a scalar parameter)."""
    return E.Var(name, dtype)


def size_var(name: str = "size", dtype="int32") -> E.SizeVar:
    """A symbolic extent known to be >= 0."""
    return E.SizeVar(name, dtype)


def const(value, dtype=None) -> E.PrimExpr:
    """A constant (int32 for ints, float32 for floats, bool for bools unless dtype says otherwise)."""
    return E.const(value, dtype)


def all(*conds) -> E.PrimExpr:  # noqa: A001 - TVM's name
    """The conjunction of bool conditions (True when there are none)."""
    return E.all_of(*conds)


def any(*conds) -> E.PrimExpr:  # noqa: A001 - TVM's name
    """The disjunction of bool conditions (False when there are none)."""
    return E.any_of(*conds)


def if_then_else(cond, t, f) -> E.PrimExpr:
    """`t if cond else f`, evaluating only the taken branch (safe for guarded out-of-bounds loads)."""
    cond = E.convert(cond)
    if not cond.dtype.is_bool() or cond.dtype.lanes != 1:
        raise DTypeError(f"if_then_else needs a scalar bool condition, got {cond.dtype} ({cond.script()})")
    t, f = E.binary_operands(t, f, "if_then_else")
    if isinstance(cond, E.IntImm):  # a constant condition picks its branch now
        return t if cond.value else f
    return E.Call(t.dtype, "if_then_else", (cond, t, f))


def _limits(dtype):
    dt = DataType(dtype)
    if dt.lanes != 1:
        raise DTypeError(f"min_value/max_value need a scalar dtype, got {dt}")
    if dt.is_bool():
        return False, True
    if dt.is_handle():
        raise DTypeError("handle has no minimum or maximum value")
    npdt = numpy_dtype(dt)
    if dt == "bfloat16" or dt.is_lowp():   # numpy's finfo/iinfo know only its own types
        import ml_dtypes

        info = ml_dtypes.finfo(npdt) if dt.is_float() else ml_dtypes.iinfo(npdt)
    else:
        info = np.finfo(npdt) if dt.is_float() else np.iinfo(npdt)
    return (float(info.min), float(info.max)) if dt.is_float() else (int(info.min), int(info.max))


def min_value(dtype) -> E.PrimExpr:
    """The lowest finite value of dtype (as TVM: -FLT_MAX for float32, not -inf)."""
    return E.const(_limits(dtype)[0], dtype)


def max_value(dtype) -> E.PrimExpr:
    """The highest finite value of dtype (as TVM: FLT_MAX for float32, not inf)."""
    return E.const(_limits(dtype)[1], dtype)


# ---------------------------------------------------------------------------------------------
# math intrinsics
# ---------------------------------------------------------------------------------------------
def _arg(x, fname):
    x = E.convert(x)
    if x.dtype.is_bool() or x.dtype.is_handle():
        raise DTypeError(f"{fname} needs a numeric argument, got {x.dtype} ({x.script()})")
    return x


def _float_arg(x, fname):
    x = _arg(x, fname)
    if not x.dtype.is_float():
        raise DTypeError(f"{fname} needs a float argument, got {x.dtype} ({x.script()}); "
                         f"cast it first, e.g. x.astype('float32')")
    return x


def _float_unary(op):
    def fn(x):
        x = _float_arg(x, op)
        return E.Call(x.dtype, op, (x,))

    fn.__name__ = op
    fn.__doc__ = f"Elementwise {op} of a float expression (ir.Call op {op!r})."
    return fn


exp = _float_unary("exp")
exp2 = _float_unary("exp2")
log = _float_unary("log")
log2 = _float_unary("log2")
log10 = _float_unary("log10")
log1p = _float_unary("log1p")
sqrt = _float_unary("sqrt")
rsqrt = _float_unary("rsqrt")
tanh = _float_unary("tanh")
sigmoid = _float_unary("sigmoid")
erf = _float_unary("erf")
sin = _float_unary("sin")
cos = _float_unary("cos")
tan = _float_unary("tan")
atan = _float_unary("atan")
asin = _float_unary("asin")
acos = _float_unary("acos")
sinh = _float_unary("sinh")
cosh = _float_unary("cosh")
asinh = _float_unary("asinh")
acosh = _float_unary("acosh")
atanh = _float_unary("atanh")


def _rounding(op):
    def fn(x):
        x = _arg(x, op)
        if not x.dtype.is_float():
            return x  # already integral
        return E.Call(x.dtype, op, (x,))

    fn.__name__ = op
    fn.__doc__ = f"Elementwise {op}; the identity on integers (ir.Call op {op!r})."
    return fn


floor = _rounding("floor")
ceil = _rounding("ceil")
trunc = _rounding("trunc")
round = _rounding("round")  # noqa: A001 - TVM's name; half to even, as numpy.round


def abs(x) -> E.PrimExpr:  # noqa: A001 - TVM's name
    """Absolute value (ints and floats; the identity on unsigned ints)."""
    x = _arg(x, "abs")
    if x.dtype.is_uint():
        return x
    return E.Call(x.dtype, "abs", (x,))


def _float_binary(op, fname):
    def fn(x, y):
        x, y = E.binary_operands(x, y, fname)
        _float_arg(x, fname)
        return E.Call(x.dtype, op, (x, y))

    fn.__name__ = fname
    fn.__doc__ = f"Elementwise {fname} of two float expressions (ir.Call op {op!r})."
    return fn


power = _float_binary("pow", "power")
pow = power  # noqa: A001 - alias
fmod = _float_binary("fmod", "fmod")


def fma(a, b, c) -> E.PrimExpr:
    """a * b + c with one rounding (ir.Call op "fma"); float operands."""
    a, b = E.binary_operands(a, b, "fma")
    a, c = E.binary_operands(a, c, "fma")
    b, c = E.binary_operands(b, c, "fma")  # c (now a's dtype) is at least as wide as b
    _float_arg(a, "fma")
    return E.Call(a.dtype, "fma", (a, b, c))


def _float_test(op):
    def fn(x):
        x = _float_arg(x, op)
        return E.Call(bool_.with_lanes(x.dtype.lanes), op, (x,))

    fn.__name__ = op
    fn.__doc__ = f"Elementwise {op} of a float expression; gives bool (ir.Call op {op!r})."
    return fn


isnan = _float_test("isnan")
isinf = _float_test("isinf")

floordiv = E.floordiv
floormod = E.floormod
truncdiv = E.truncdiv
truncmod = E.truncmod

__all__ = ["var", "size_var", "const", "all", "any", "if_then_else", "min_value", "max_value",
           "exp", "exp2", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "tanh", "sigmoid", "erf",
           "sin", "cos", "tan", "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "floor",
           "ceil", "trunc", "round", "abs", "power", "pow",
           "fmod", "fma", "isnan", "isinf", "floordiv", "floormod", "truncdiv", "truncmod"]
