"""Expression nodes (PrimExpr) with Python operator overloading and dtype promotion.

Operators follow TVM: `+ - *` build Add/Sub/Mul, `/` is true division (floats only), `//` and `%`
are floordiv/floormod, comparisons build EQ/LT/... nodes. A Python int/float next to an
expression takes the expression's dtype.
"""
from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from ..errors import DTypeError, ShapeError, TesseraError
from .dtype import DataType, bool_, float32, int32, int64, numpy_dtype
from .node import Node, new_node, set_field

_DT = DataType


class PrimExpr(Node):
    """Base of scalar and vector expressions; every one has a `dtype`."""

    __slots__ = ()
    dtype: DataType

    # arithmetic ------------------------------------------------------------------------------
    def __add__(self, other):
        return add(self, other)

    def __radd__(self, other):
        return add(other, self)

    def __sub__(self, other):
        return sub(self, other)

    def __rsub__(self, other):
        return sub(other, self)

    def __mul__(self, other):
        return mul(self, other)

    def __rmul__(self, other):
        return mul(other, self)

    def __truediv__(self, other):
        return div(self, other)

    def __rtruediv__(self, other):
        return div(other, self)

    def __floordiv__(self, other):
        return floordiv(self, other)

    def __rfloordiv__(self, other):
        return floordiv(other, self)

    def __mod__(self, other):
        return floormod(self, other)

    def __rmod__(self, other):
        return floormod(other, self)

    def __neg__(self):
        if isinstance(self, (IntImm, FloatImm)):
            return const(-self.value, self.dtype)
        return sub(const(0, self.dtype), self)

    def __pos__(self):
        return self

    def __abs__(self):
        return call_intrin(self.dtype, "abs", self)

    # comparisons -----------------------------------------------------------------------------
    def __lt__(self, other):
        return _cmp(LT, self, other)

    def __le__(self, other):
        return _cmp(LE, self, other)

    def __gt__(self, other):
        return _cmp(GT, self, other)

    def __ge__(self, other):
        return _cmp(GE, self, other)

    def __eq__(self, other):
        return _cmp(EQ, self, other)

    def __ne__(self, other):
        return _cmp(NE, self, other)

    __hash__ = Node.__hash__

    # logic / bits ----------------------------------------------------------------------------
    def __and__(self, other):
        return _logic_or_bits(And, "bitwise_and", self, other)

    def __rand__(self, other):
        return _logic_or_bits(And, "bitwise_and", other, self)

    def __or__(self, other):
        return _logic_or_bits(Or, "bitwise_or", self, other)

    def __ror__(self, other):
        return _logic_or_bits(Or, "bitwise_or", other, self)

    def __xor__(self, other):
        a, b = binary_operands(self, other, "^")
        if a.dtype.is_float():
            raise DTypeError(f"^ needs integer or bool operands, got {a.dtype}")
        return call_intrin(a.dtype, "bitwise_xor", a, b)

    def __invert__(self):
        if self.dtype.is_bool():
            return Not(self)
        if not self.dtype.is_integer():
            raise DTypeError(f"~ needs an integer or bool operand, got {self.dtype}")
        return call_intrin(self.dtype, "bitwise_not", self)

    def __lshift__(self, other):
        return _shift("<<", "shift_left", self, other)

    def __rlshift__(self, other):
        return _shift("<<", "shift_left", other, self)

    def __rshift__(self, other):
        return _shift(">>", "shift_right", self, other)

    def __rrshift__(self, other):
        return _shift(">>", "shift_right", other, self)

    def __bool__(self):
        raise TesseraError(
            f"cannot use an expression as a Python bool ({self.script()}): use te.all/te.any, "
            f"te.if_then_else or tir.Select instead of 'and', 'or', 'not' and 'if'")

    def __int__(self):
        if isinstance(self, IntImm):
            return self.value
        raise TesseraError(f"expression {self.script()} is not a constant integer")

    def __float__(self):
        if isinstance(self, (IntImm, FloatImm)):
            return float(self.value)
        raise TesseraError(f"expression {self.script()} is not a constant")

    def __index__(self):
        return self.__int__()

    def astype(self, dtype) -> "PrimExpr":
        return cast(self, dtype)


# ---------------------------------------------------------------------------------------------
# leaves
# ---------------------------------------------------------------------------------------------
class IntImm(PrimExpr):
    """An integer (or bool) constant."""

    __slots__ = ("dtype", "value")
    _fields = ("dtype", "value")

    def __init__(self, dtype, value):
        dtype = _DT(dtype)
        if not (dtype.is_integer() or dtype.is_bool()) or dtype.lanes != 1:
            raise DTypeError(f"IntImm needs a scalar integer dtype, got {dtype}")
        value = int(value)
        if dtype.is_bool():
            value = 1 if value else 0
        else:
            value = _wrap_int(value, dtype)
        set_field(self, "dtype", dtype)
        set_field(self, "value", value)

    def __eq__(self, other):  # noqa: D105 - constant comparison folds
        return _cmp(EQ, self, other)

    __hash__ = PrimExpr.__hash__

    def __bool__(self):
        return bool(self.value)


def _wrap_int(value: int, dtype: DataType) -> int:
    bits = dtype.bits
    lo = -(1 << (bits - 1)) if dtype.is_int() else 0
    hi = (1 << (bits - 1)) - 1 if dtype.is_int() else (1 << bits) - 1
    if lo <= value <= hi:
        return value
    raise DTypeError(f"constant {value} does not fit in {dtype} [{lo}, {hi}]")


class FloatImm(PrimExpr):
    """A floating-point constant (inf and nan allowed)."""

    __slots__ = ("dtype", "value")
    _fields = ("dtype", "value")

    def __init__(self, dtype, value):
        dtype = _DT(dtype)
        if not dtype.is_float() or dtype.lanes != 1:
            raise DTypeError(f"FloatImm needs a scalar float dtype, got {dtype}")
        set_field(self, "dtype", dtype)
        set_field(self, "value", float(value))


class StringImm(PrimExpr):
    """A string argument (pragma values, extern names)."""

    __slots__ = ("dtype", "value")
    _fields = ("dtype", "value")

    def __init__(self, value: str):
        set_field(self, "dtype", _DT("handle"))
        set_field(self, "value", str(value))


class Var(PrimExpr):
    """A variable: loop index, symbolic extent, let binding. Compared by identity."""

    __slots__ = ("name", "dtype")
    _fields = ("name", "dtype")
    _ignore_fields = ("name",)

    def __init__(self, name: str = "v", dtype="int32"):
        if not isinstance(name, str):
            raise TesseraError(f"a Var's name must be a string, got {name!r}")
        set_field(self, "name", name)
        set_field(self, "dtype", _DT(dtype))


class SizeVar(Var):
    """A variable known to be >= 0 (a symbolic shape extent)."""

    __slots__ = ()


# ---------------------------------------------------------------------------------------------
# binary arithmetic and comparison
# ---------------------------------------------------------------------------------------------
class BinaryOp(PrimExpr):
    __slots__ = ("dtype", "a", "b")
    _fields = ("dtype", "a", "b")
    symbol = "?"

    def __init__(self, a, b):
        a, b = binary_operands(a, b, self.symbol)
        if a.dtype.is_bool() and type(self) not in (Min, Max):
            _refuse_bool(type(self), a, b)
        set_field(self, "dtype", a.dtype)
        set_field(self, "a", a)
        set_field(self, "b", b)


class Add(BinaryOp):
    __slots__ = ()
    symbol = "+"


class Sub(BinaryOp):
    __slots__ = ()
    symbol = "-"


class Mul(BinaryOp):
    __slots__ = ()
    symbol = "*"


class Div(BinaryOp):
    """Division: true division on floats, truncating (C) division on integers."""

    __slots__ = ()
    symbol = "/"


class Mod(BinaryOp):
    """Truncating remainder (C `%`); the sign follows the dividend."""

    __slots__ = ()
    symbol = "truncmod"


class FloorDiv(BinaryOp):
    __slots__ = ()
    symbol = "//"


class FloorMod(BinaryOp):
    __slots__ = ()
    symbol = "%"


class Min(BinaryOp):
    __slots__ = ()
    symbol = "min"


class Max(BinaryOp):
    __slots__ = ()
    symbol = "max"


class CmpOp(PrimExpr):
    __slots__ = ("dtype", "a", "b")
    _fields = ("dtype", "a", "b")
    symbol = "?"

    def __init__(self, a, b):
        a, b = binary_operands(a, b, self.symbol)
        set_field(self, "dtype", bool_.with_lanes(a.dtype.lanes))
        set_field(self, "a", a)
        set_field(self, "b", b)


class EQ(CmpOp):
    __slots__ = ()
    symbol = "=="

    def __bool__(self):  # lets `var in list` and `a == b` on vars work as identity tests
        return self.a is self.b


class NE(CmpOp):
    __slots__ = ()
    symbol = "!="

    def __bool__(self):
        return self.a is not self.b


class LT(CmpOp):
    __slots__ = ()
    symbol = "<"


class LE(CmpOp):
    __slots__ = ()
    symbol = "<="


class GT(CmpOp):
    __slots__ = ()
    symbol = ">"


class GE(CmpOp):
    __slots__ = ()
    symbol = ">="


class And(PrimExpr):
    __slots__ = ("dtype", "a", "b")
    _fields = ("dtype", "a", "b")
    symbol = "and"

    def __init__(self, a, b):
        a, b = _as_bool(a, self.symbol), _as_bool(b, self.symbol)
        a, b = _match_lanes(a, b)
        set_field(self, "dtype", a.dtype)
        set_field(self, "a", a)
        set_field(self, "b", b)


class Or(And):
    __slots__ = ()
    symbol = "or"


class Not(PrimExpr):
    __slots__ = ("dtype", "a")
    _fields = ("dtype", "a")

    def __init__(self, a):
        a = _as_bool(a, "not")
        set_field(self, "dtype", a.dtype)
        set_field(self, "a", a)


# ---------------------------------------------------------------------------------------------
# other expressions
# ---------------------------------------------------------------------------------------------
class Select(PrimExpr):
    """`true_value if condition else false_value`; both sides may be evaluated."""

    __slots__ = ("dtype", "condition", "true_value", "false_value")
    _fields = ("dtype", "condition", "true_value", "false_value")

    def __init__(self, condition, true_value, false_value):
        condition = _as_bool(condition, "Select")
        t, f = binary_operands(true_value, false_value, "Select")
        if condition.dtype.lanes != t.dtype.lanes and condition.dtype.lanes != 1:
            raise DTypeError(f"Select: condition has {condition.dtype.lanes} lanes, values {t.dtype.lanes}")
        set_field(self, "dtype", t.dtype)
        set_field(self, "condition", condition)
        set_field(self, "true_value", t)
        set_field(self, "false_value", f)


class Cast(PrimExpr):
    __slots__ = ("dtype", "value")
    _fields = ("dtype", "value")

    def __init__(self, dtype, value):
        value = convert(value)
        dtype = _DT(dtype)
        if dtype.lanes != value.dtype.lanes:
            if value.dtype.lanes == 1:
                value = Broadcast(value, dtype.lanes)
            else:
                raise DTypeError(f"cannot cast {value.dtype} to {dtype}: lane counts differ")
        set_field(self, "dtype", dtype)
        set_field(self, "value", value)


class Let(PrimExpr):
    """`body` with `var` bound to `value`."""

    __slots__ = ("dtype", "var", "value", "body")
    _fields = ("dtype", "var", "value", "body")
    _def_fields = ("var",)

    def __init__(self, var, value, body):
        value, body = convert(value), convert(body)
        if not isinstance(var, Var):
            raise TesseraError(f"Let needs a Var, got {var!r}")
        if var.dtype != value.dtype:
            raise DTypeError(f"Let: variable {var.name} is {var.dtype}, value is {value.dtype}")
        set_field(self, "dtype", body.dtype)
        set_field(self, "var", var)
        set_field(self, "value", value)
        set_field(self, "body", body)


class Call(PrimExpr):
    """A call of a math intrinsic (exp, sqrt, fma, ...) or an extern C function by name."""

    __slots__ = ("dtype", "op", "args")
    _fields = ("dtype", "op", "args")

    def __init__(self, dtype, op: str, args):
        set_field(self, "dtype", _DT(dtype))
        set_field(self, "op", str(op))
        set_field(self, "args", tuple(convert(a) for a in args))


class Ramp(PrimExpr):
    """The vector [base, base+stride, ..., base+(lanes-1)*stride]."""

    __slots__ = ("dtype", "base", "stride", "lanes")
    _fields = ("dtype", "base", "stride", "lanes")

    def __init__(self, base, stride, lanes: int):
        base, stride = convert(base), convert(stride)
        if base.dtype.lanes != 1 or not base.dtype.is_integer():
            raise DTypeError(f"Ramp base must be a scalar integer, got {base.dtype}")
        if stride.dtype != base.dtype:
            stride = cast(stride, base.dtype)
        set_field(self, "dtype", base.dtype.with_lanes(int(lanes)))
        set_field(self, "base", base)
        set_field(self, "stride", stride)
        set_field(self, "lanes", int(lanes))


class Broadcast(PrimExpr):
    """A scalar repeated over `lanes` lanes."""

    __slots__ = ("dtype", "value", "lanes")
    _fields = ("dtype", "value", "lanes")

    def __init__(self, value, lanes: int):
        value = convert(value)
        if value.dtype.lanes != 1:
            raise DTypeError(f"Broadcast needs a scalar, got {value.dtype}")
        set_field(self, "dtype", value.dtype.with_lanes(int(lanes)))
        set_field(self, "value", value)
        set_field(self, "lanes", int(lanes))


class BufferLoad(PrimExpr):
    """`buffer[indices]`; a Ramp index makes a vector load."""

    __slots__ = ("dtype", "buffer", "indices")
    _fields = ("dtype", "buffer", "indices")

    def __init__(self, buffer, indices):
        indices = tuple(convert(i) for i in indices)
        if len(indices) != len(buffer.shape):
            raise ShapeError(f"buffer {buffer.name!r} has {len(buffer.shape)} dimensions, "
                             f"indexed with {len(indices)}")
        lanes = 1
        for i in indices:
            if not (i.dtype.is_integer()):
                raise DTypeError(f"index of {buffer.name!r} must be an integer, got {i.dtype} ({i.script()})")
            lanes = max(lanes, i.dtype.lanes)
        set_field(self, "dtype", buffer.dtype.with_lanes(lanes * buffer.dtype.lanes))
        set_field(self, "buffer", buffer)
        set_field(self, "indices", indices)


class Range(Node):
    """The half-open interval [min, min + extent)."""

    __slots__ = ("min", "extent")
    _fields = ("min", "extent")

    def __init__(self, begin, end=None):
        """`Range(extent)`, `Range(begin, end)`; use Range.from_min_extent for (min, extent)."""
        if end is None:
            begin, end = 0, begin
        begin, end = convert(begin), convert(end)
        set_field(self, "min", begin)
        set_field(self, "extent", _fold_sub(end, begin))

    @staticmethod
    def from_min_extent(min_value, extent) -> "Range":
        r = new_node(Range)
        set_field(r, "min", convert(min_value))
        set_field(r, "extent", convert(extent))
        return r


class IterVar(Node):
    """An iteration variable with its domain: kind "data_par" (spatial), "reduce" or "thread"."""

    __slots__ = ("dom", "var", "iter_type", "thread_tag")
    _fields = ("dom", "var", "iter_type", "thread_tag")
    _def_fields = ("var",)
    KINDS = ("data_par", "reduce", "thread", "opaque")

    def __init__(self, dom, var, iter_type="data_par", thread_tag=""):
        if dom is not None and not isinstance(dom, Range):
            dom = Range(*dom) if isinstance(dom, (tuple, list)) else Range(dom)
        if isinstance(var, str):
            var = Var(var, dom.extent.dtype if dom is not None else "int32")
        if iter_type not in self.KINDS:
            raise TesseraError(f"IterVar kind must be one of {self.KINDS}, got {iter_type!r}")
        set_field(self, "dom", dom)
        set_field(self, "var", var)
        set_field(self, "iter_type", iter_type)
        set_field(self, "thread_tag", thread_tag)

    # an IterVar may be used where its variable is expected (as in TVM)
    def as_expr(self):
        return self.var

    def __add__(self, o):
        return self.var + o

    def __radd__(self, o):
        return o + self.var

    def __sub__(self, o):
        return self.var - o

    def __rsub__(self, o):
        return o - self.var

    def __mul__(self, o):
        return self.var * o

    def __rmul__(self, o):
        return o * self.var

    def __floordiv__(self, o):
        return self.var // o

    def __mod__(self, o):
        return self.var % o

    def __lt__(self, o):
        return self.var < o

    def __le__(self, o):
        return self.var <= o

    def __gt__(self, o):
        return self.var > o

    def __ge__(self, o):
        return self.var >= o

    def __neg__(self):
        return -self.var

    def astype(self, dtype):
        return cast(self.var, dtype)


class CommReducer(Node):
    """A commutative reducer: result = combine(lhs, rhs) with identity elements (tuples for argmax)."""

    __slots__ = ("lhs", "rhs", "result", "identity_element", "name")
    _fields = ("lhs", "rhs", "result", "identity_element", "name")
    _def_fields = ("lhs", "rhs")
    _ignore_fields = ("name",)

    def __init__(self, lhs, rhs, result, identity_element, name="reduce"):
        set_field(self, "lhs", tuple(lhs))
        set_field(self, "rhs", tuple(rhs))
        set_field(self, "result", tuple(convert(r) for r in result))
        set_field(self, "identity_element", tuple(convert(r) for r in identity_element))
        set_field(self, "name", name)


class Reduce(PrimExpr):
    """A reduction (TE only): combiner over `source` for all points of `axis` where `condition`."""

    __slots__ = ("dtype", "combiner", "source", "axis", "condition", "value_index", "init")
    _fields = ("dtype", "combiner", "source", "axis", "condition", "value_index", "init")

    def __init__(self, combiner, source, axis, condition=None, value_index=0, init=()):
        source = tuple(convert(s) for s in source)
        set_field(self, "dtype", source[value_index].dtype)
        set_field(self, "combiner", combiner)
        set_field(self, "source", source)
        set_field(self, "axis", tuple(axis))
        set_field(self, "condition", convert(condition) if condition is not None else const(True))
        set_field(self, "value_index", int(value_index))
        set_field(self, "init", tuple(convert(i) for i in init))


# ---------------------------------------------------------------------------------------------
# construction helpers
# ---------------------------------------------------------------------------------------------
def const(value, dtype=None) -> PrimExpr:
    """A constant; dtype defaults to int32 for ints, float32 for floats, bool for bools."""
    if dtype is None:
        if isinstance(value, (bool, np.bool_)):
            dtype = "bool"
        elif isinstance(value, Integral):
            dtype = "int32" if -(2 ** 31) <= int(value) < 2 ** 31 else "int64"
        elif isinstance(value, Real):
            dtype = "float32"
        else:
            raise DTypeError(f"cannot make a constant from {value!r}")
    dtype = _DT(dtype)
    if dtype.lanes > 1:
        return Broadcast(const(value, dtype.element_of()), dtype.lanes)
    if dtype.is_float():
        return FloatImm(dtype, value)
    if dtype.is_handle():
        raise DTypeError("no constants of dtype handle")
    if isinstance(value, float) and not float(value).is_integer():
        raise DTypeError(f"constant {value} is not an integer but dtype is {dtype}")
    return IntImm(dtype, value)


def convert(value) -> PrimExpr:
    """Turn Python scalars (and IterVars) into expressions; expressions pass through."""
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, IterVar):
        return value.var
    if isinstance(value, (bool, np.bool_)):
        return IntImm(bool_, bool(value))
    if isinstance(value, (int, np.integer)):
        return const(int(value))
    if isinstance(value, (float, np.floating)):
        return FloatImm(float32, float(value))
    if isinstance(value, str):
        return StringImm(value)
    raise TesseraError(f"cannot use {type(value).__name__} {value!r} as an expression")


def _const_like(value, like: DataType) -> PrimExpr:
    """A Python scalar next to an expression of dtype `like` takes that dtype (scalar part)."""
    elem = like.element_of()
    if isinstance(value, (bool, np.bool_)):
        if elem.is_bool():
            return IntImm(elem, bool(value))
        return const(int(value), elem)
    if isinstance(value, (int, np.integer)):
        if elem.is_bool():
            raise DTypeError(f"cannot combine integer {value} with a bool expression")
        if elem.is_float():
            return FloatImm(elem, value)
        return IntImm(elem, value)
    if isinstance(value, (float, np.floating)):
        if elem.is_float():
            return FloatImm(elem, value)
        if float(value).is_integer():
            return IntImm(elem, int(value)) if not elem.is_bool() else IntImm(elem, bool(value))
        # a float literal next to an integer expression makes the expression float32 (as TVM)
        return FloatImm(float32, value)
    return convert(value)


def binary_operands(a, b, op: str):
    """Convert and promote two operands to one dtype (lanes broadcast); raise on invalid mixes."""
    a_expr, b_expr = isinstance(a, PrimExpr), isinstance(b, PrimExpr)
    if isinstance(a, IterVar):
        a, a_expr = a.var, True
    if isinstance(b, IterVar):
        b, b_expr = b.var, True
    if a_expr and not b_expr:
        b = _const_like(b, a.dtype)
    elif b_expr and not a_expr:
        a = _const_like(a, b.dtype)
    elif not a_expr and not b_expr:
        a, b = convert(a), convert(b)
    if a.dtype == b.dtype:
        return a, b
    return _promote(a, b, op)


def _promote(a: PrimExpr, b: PrimExpr, op: str):
    da, db = a.dtype, b.dtype
    ea, eb = da.element_of(), db.element_of()
    if ea != eb:
        if ea.is_handle() or eb.is_handle():
            raise DTypeError(f"operator {op}: cannot combine {da} and {db}")
        if ea.is_bool() or eb.is_bool():
            raise DTypeError(f"operator {op}: cannot mix bool and {eb if ea.is_bool() else ea} "
                             f"({a.script()} {op} {b.script()}); cast explicitly")
        if ea.is_float() and eb.is_float():
            if {ea, eb} == {_DT("float16"), _DT("bfloat16")}:
                raise DTypeError(f"operator {op}: mixed float16 and bfloat16 "
                                 f"({a.script()} {op} {b.script()}); cast one side explicitly")
            target = ea if ea.bits > eb.bits else eb
        elif ea.is_float():
            target = ea
        elif eb.is_float():
            target = eb
        else:  # two integers: wider wins; equal width mixed signedness -> signed
            if ea.bits != eb.bits:
                target = ea if ea.bits > eb.bits else eb
            else:
                target = ea if ea.is_int() else eb
        if isinstance(a, (IntImm, FloatImm)) and ea != target:
            a = const(a.value, target)
        elif ea != target:
            a = Cast(target.with_lanes(da.lanes), a)
        if isinstance(b, (IntImm, FloatImm)) and eb != target:
            b = const(b.value, target)
        elif eb != target:
            b = Cast(target.with_lanes(db.lanes), b)
    return _match_lanes(a, b)


def _match_lanes(a, b):
    la, lb = a.dtype.lanes, b.dtype.lanes
    if la == lb:
        return a, b
    if la == 1:
        return Broadcast(a, lb), b
    if lb == 1:
        return a, Broadcast(b, la)
    raise DTypeError(f"vector lanes differ: {a.dtype} and {b.dtype}")


def _as_bool(x, op):
    x = convert(x)
    if not x.dtype.is_bool():
        raise DTypeError(f"{op} needs a bool condition, got {x.dtype} ({x.script()})")
    return x


def _cmp(cls, a, b):
    if not isinstance(b, (PrimExpr, IterVar, int, float, bool, np.number, np.bool_)):
        return NotImplemented
    return cls(a, b)


def _logic_or_bits(cls, bitop, a, b):
    a, b = binary_operands(a, b, cls.symbol)
    if a.dtype.is_bool():
        return cls(a, b)
    if not a.dtype.is_integer():
        raise DTypeError(f"'{cls.symbol}' needs bool or integer operands, got {a.dtype}")
    return call_intrin(a.dtype, bitop, a, b)


def _shift(symbol, op, a, b):
    a, b = binary_operands(a, b, symbol)
    if not a.dtype.is_integer():
        raise DTypeError(f"{symbol} needs integer operands, got {a.dtype} ({a.script()} {symbol} {b.script()})")
    return call_intrin(a.dtype, op, a, b)


def _fold_sub(a, b):
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return const(a.value - b.value, a.dtype if a.dtype.bits >= b.dtype.bits else b.dtype)
    if isinstance(b, IntImm) and b.value == 0:
        return a
    return a - b


def _fold(cls, a, b):
    """Build a binary node, folding when both sides are constants of one dtype."""
    a, b = binary_operands(a, b, cls.symbol)
    if a.dtype.is_bool() and cls is not Min and cls is not Max:
        _refuse_bool(cls, a, b)
    if isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm)):
        v = eval_const(cls, a.value, b.value, a.dtype)
        if v is not None:
            return const(v, a.dtype)
    node = new_node(cls)
    set_field(node, "dtype", a.dtype)
    set_field(node, "a", a)
    set_field(node, "b", b)
    return node


def _refuse_bool(cls, a, b):
    raise DTypeError(f"operator {cls.symbol}: no arithmetic on bool ({a.script()}, {b.script()}); "
                     f"use te.all/te.any for logic or cast to an integer first")


def eval_const(cls, x, y, dtype):
    """Fold `cls(x, y)` of two Python constants in `dtype` (None if it cannot); shared with arith's simplifier."""
    try:
        if cls is Add:
            v = x + y
        elif cls is Sub:
            v = x - y
        elif cls is Mul:
            v = x * y
        elif cls is Min:
            v = min(x, y)
        elif cls is Max:
            v = max(x, y)
        elif y == 0:
            return None
        elif cls is FloorDiv:
            v = x // y if not dtype.is_float() else math.floor(x / y)
        elif cls is FloorMod:
            v = x % y if not dtype.is_float() else x - math.floor(x / y) * y
        elif cls is Div:
            v = x / y if dtype.is_float() else int(x / y) if abs(x) < 2 ** 52 else _trunc_div(x, y)
        elif cls is Mod:
            v = x - _trunc_div(x, y) * y if not dtype.is_float() else math.fmod(x, y)
        else:
            return None
    except (OverflowError, ZeroDivisionError):
        return None
    if dtype.is_integer():
        lo = -(1 << (dtype.bits - 1)) if dtype.is_int() else 0
        hi = (1 << (dtype.bits - 1)) - 1 if dtype.is_int() else (1 << dtype.bits) - 1
        if not lo <= v <= hi:
            return None
    return v


def _trunc_div(x, y):
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


def add(a, b):
    return _fold(Add, a, b)


def sub(a, b):
    return _fold(Sub, a, b)


def mul(a, b):
    return _fold(Mul, a, b)


def div(a, b):
    """True division; integer operands are refused (say floordiv or truncdiv)."""
    a, b = binary_operands(a, b, "/")
    if not a.dtype.is_float():
        raise DTypeError(f"'/' on {a.dtype} ({a.script()} / {b.script()}) is ambiguous: use // "
                         f"(floordiv), te.floordiv or tir.truncdiv for integers, or cast to float")
    return _fold(Div, a, b)


def truncdiv(a, b):
    a, b = binary_operands(a, b, "truncdiv")
    if a.dtype.is_float():
        raise DTypeError(f"truncdiv needs integers, got {a.dtype}")
    return _fold(Div, a, b)


def truncmod(a, b):
    a, b = binary_operands(a, b, "truncmod")
    if a.dtype.is_float():
        raise DTypeError(f"truncmod needs integers, got {a.dtype}")
    return _fold(Mod, a, b)


def floordiv(a, b):
    a, b = binary_operands(a, b, "//")
    if a.dtype.is_float():  # floor(a / b) on floats, as numpy
        return call_intrin(a.dtype, "floor", _fold(Div, a, b))
    return _fold(FloorDiv, a, b)


def floormod(a, b):
    a, b = binary_operands(a, b, "%")
    if a.dtype.is_float():
        return sub(a, mul(call_intrin(a.dtype, "floor", _fold(Div, a, b)), b))
    return _fold(FloorMod, a, b)


def min_expr(a, b):
    return _fold(Min, a, b)


def max_expr(a, b):
    return _fold(Max, a, b)


def cast(value, dtype) -> PrimExpr:
    value = convert(value)
    dtype = _DT(dtype)
    if value.dtype == dtype:
        return value
    if isinstance(value, (IntImm, FloatImm)) and dtype.lanes == 1 and not dtype.is_handle():
        v = value.value
        if dtype.is_bool():
            return IntImm(dtype, v != 0)
        if dtype.is_float():
            return FloatImm(dtype, float(np.asarray(v, dtype=np.float64).astype(numpy_dtype(dtype))))
        if value.dtype.is_float():
            if not math.isfinite(v):
                return Cast(dtype, value)
            v = int(v)  # truncation toward zero, as C
        bits = dtype.bits
        v &= (1 << bits) - 1
        if dtype.is_int() and v >= 1 << (bits - 1):
            v -= 1 << bits
        return IntImm(dtype, v)
    return Cast(dtype, value)


def call_intrin(dtype, op: str, *args) -> Call:
    return Call(dtype, op, args)


# logical helpers used by te.all / te.any
def all_of(*conds) -> PrimExpr:
    conds = [_as_bool(c, "all") for c in conds]
    if not conds:
        return const(True)
    out = conds[0]
    for c in conds[1:]:
        out = And(out, c)
    return out


def any_of(*conds) -> PrimExpr:
    conds = [_as_bool(c, "any") for c in conds]
    if not conds:
        return const(False)
    out = conds[0]
    for c in conds[1:]:
        out = Or(out, c)
    return out


def is_const_int(x, value=None) -> bool:
    return isinstance(x, IntImm) and (value is None or x.value == value)


int32_t, int64_t = int32, int64
