"""Binary (and ternary) elementwise ops with numpy broadcasting (pattern BROADCAST).

Shapes broadcast as numpy's, symbolic dims included: equal names match, a 1 broadcasts against
anything; other mismatches are ShapeErrors naming both shapes. Both operands must have one dtype
(ONNX's rule; `power` alone takes another exponent dtype). Integer division and modulo by zero
give 0 (numpy's result) instead of trapping, and so do the overflowing INT_MIN / -1 cases.
"""
from __future__ import annotations

from .. import te
from ..errors import ShapeError
from ..ir import TensorType
from ..ir import expr as E
from ..ir.dtype import DataType
from ._common import (ALL, FLOATS, INTS, NUMERIC, accum_dtype, broadcast_index, broadcast_shape_te,
                      broadcast_shapes, check_dtype, check_same_dtype, const, fmt_shape)
from ._schedule import schedule_injective
from .registry import OpPattern, register_op

_sel = E.Select


def register_binary(name: str, fn, dtypes, *, out_dtype=None, accum: bool = False, attrs=None,
                    inputs=("lhs", "rhs"), same_dtype: bool = True, doc: str = ""):
    """Register a broadcasting op `name(lhs, rhs)` computing fn(a, b, attrs) per element.

    out_dtype: "bool" or None (the input dtype); accum: float16/bfloat16 compute in float32.
    """
    op = register_op(name, inputs=inputs, pattern=OpPattern.BROADCAST, attrs=attrs or {}, doc=doc)
    short = name.rsplit(".", 1)[-1]
    op.def_schedule(schedule_injective)

    @op.def_infer
    def _infer(types, attrs):
        for t, n in zip(types, inputs):
            check_dtype(name, t.dtype, dtypes, n)
        dt = check_same_dtype(name, types, inputs) if same_dtype else types[0].dtype
        shape = broadcast_shapes(name, *(t.shape for t in types))
        return [TensorType(shape, out_dtype or dt)]

    @op.def_compute
    def _compute(tensors, attrs):
        for t, n in zip(tensors, inputs):
            check_dtype(name, t.dtype, dtypes, n)
        shape = broadcast_shape_te(name, *(t.shape for t in tensors))
        want = DataType(out_dtype) if out_dtype else tensors[0].dtype

        def body(*i):
            vals = [t[broadcast_index(t, i)] for t in tensors]
            if accum and vals[0].dtype in ("float16", "bfloat16"):
                vals = [v.astype("float32") for v in vals]
            r = fn(*vals, attrs)
            return r.astype(want) if r.dtype != want else r

        return [te.compute(shape, body, name=f"T_{short}")]

    return op


# ---------------------------------------------------------------------------------------------
# arithmetic
# ---------------------------------------------------------------------------------------------
def _zero(x):
    return const(0, x.dtype)


def _int_guard(a, b, fn, on_minus_one):
    """fn(a, b) for integers, but 0 where b == 0 and on_minus_one where b == -1 (INT_MIN / -1
    traps). The division itself never sees those divisors: vectorized selects compute both sides."""
    zero, one = _zero(b), const(1, b.dtype)
    bad = b == zero
    if a.dtype.is_int():
        minus_one = b == const(-1, b.dtype)
        value = fn(a, _sel(te.any(bad, minus_one), one, b))
        value = _sel(minus_one, on_minus_one, value)
    else:
        value = fn(a, _sel(bad, one, b))
    return _sel(bad, _zero(a), value)


def _divide(a, b, attrs):
    if a.dtype.is_float():
        return a / b
    return _int_guard(a, b, te.truncdiv, _zero(a) - a)


def _floor_divide(a, b, attrs):
    if a.dtype.is_float():  # numpy's divmod: exact quotient of (a - fmod(a, b)) / b, then floored
        acc = accum_dtype(a.dtype)
        a, b = a.astype(acc), b.astype(acc)
        m = te.fmod(a, b)
        div = (a - m) / b
        div = _sel(te.all(m != _zero(m), (b < _zero(b)) != (m < _zero(m))), div - const(1, acc), div)
        fl = te.floor(div)
        fl = _sel(div - fl > const(0.5, acc), fl + const(1, acc), fl)
        return _sel(b == _zero(b), a / b, fl)
    return _int_guard(a, b, te.floordiv, _zero(a) - a)


def _floor_mod(a, b, attrs):
    if a.dtype.is_float():  # numpy: fmod, then move a remainder of the wrong sign by b
        r = te.fmod(a, b)
        wrong = te.all(r != _zero(r), (r < _zero(r)) != (b < _zero(b)))
        return _sel(wrong, r + b, r)
    return _int_guard(a, b, te.floormod, _zero(a))


def _fmod(a, b, attrs):
    if a.dtype.is_float():
        return te.fmod(a, b)
    return _int_guard(a, b, te.truncmod, _zero(a))


def _shift(a, b, left):
    bits = a.dtype.bits
    out_of_range = b >= const(bits, b.dtype)
    if b.dtype.is_int():
        out_of_range = te.any(out_of_range, b < _zero(b))
    if left:
        return _sel(out_of_range, _zero(a), a << b)
    fill = _sel(a < _zero(a), const(-1, a.dtype), _zero(a)) if a.dtype.is_int() else _zero(a)
    return _sel(out_of_range, fill, a >> b)


_ARITH = {
    "add": (lambda a, b, at: a + b, NUMERIC, "lhs + rhs."),
    "subtract": (lambda a, b, at: a - b, NUMERIC, "lhs - rhs."),
    "multiply": (lambda a, b, at: a * b, NUMERIC, "lhs * rhs."),
    "divide": (_divide, NUMERIC, "lhs / rhs; integers truncate toward zero (ONNX Div)."),
    "floor_divide": (_floor_divide, NUMERIC, "floor(lhs / rhs) (numpy floor_divide)."),
    "floor_mod": (_floor_mod, NUMERIC, "lhs mod rhs with the sign of rhs (numpy mod, Python %)."),
    "mod": (_floor_mod, NUMERIC, "ONNX Mod with fmod=0: the remainder takes the sign of the divisor "
                                 "(same as floor_mod)."),
    "fmod": (_fmod, NUMERIC, "C fmod: the remainder takes the sign of the dividend (ONNX Mod fmod=1)."),
    "maximum": (lambda a, b, at: te.max(a, b), NUMERIC, "Elementwise maximum."),
    "minimum": (lambda a, b, at: te.min(a, b), NUMERIC, "Elementwise minimum."),
    "bitwise_and": (lambda a, b, at: a & b, INTS, "lhs & rhs of integers."),
    "bitwise_or": (lambda a, b, at: a | b, INTS, "lhs | rhs of integers."),
    "bitwise_xor": (lambda a, b, at: a ^ b, INTS, "lhs ^ rhs of integers."),
    "left_shift": (lambda a, b, at: _shift(a, b, True), INTS,
                   "lhs << rhs; shifting by the bit width or more gives 0 (numpy)."),
    "right_shift": (lambda a, b, at: _shift(a, b, False), INTS,
                    "lhs >> rhs (arithmetic for signed); shifting by the bit width or more gives 0 "
                    "or -1 (numpy)."),
}
for _name, (_fn, _dtypes, _doc) in _ARITH.items():
    register_binary(_name, _fn, _dtypes, doc=_doc)

_CMP = {
    "equal": (lambda a, b, at: a == b, ALL), "not_equal": (lambda a, b, at: a != b, ALL),
    "less": (lambda a, b, at: a < b, NUMERIC), "less_equal": (lambda a, b, at: a <= b, NUMERIC),
    "greater": (lambda a, b, at: a > b, NUMERIC),
    "greater_equal": (lambda a, b, at: a >= b, NUMERIC),
    "logical_and": (lambda a, b, at: te.all(a, b), ("bool",)),
    "logical_or": (lambda a, b, at: te.any(a, b), ("bool",)),
    "logical_xor": (lambda a, b, at: a != b, ("bool",)),
}
for _name, (_fn, _dtypes) in _CMP.items():
    register_binary(_name, _fn, _dtypes, out_dtype="bool", doc=f"Elementwise {_name}; bool result.")


# ---------------------------------------------------------------------------------------------
# power: the exponent may have another dtype (ONNX Pow(T, T1)); the result has the base's
# ---------------------------------------------------------------------------------------------
def _power(a, b, attrs):
    if a.dtype.is_float():
        acc = accum_dtype(a.dtype)
        return te.power(a.astype(acc), b.astype(acc)).astype(a.dtype)
    # integer base: through float64 (exact while the result fits in 53 bits), then truncated
    return te.power(a.astype("float64"), b.astype("float64")).astype(a.dtype)


register_binary("power", _power, NUMERIC, same_dtype=False,
                doc="lhs ** rhs; the exponent may have another dtype, the result has the base's.")


# ---------------------------------------------------------------------------------------------
# where, prelu
# ---------------------------------------------------------------------------------------------
where = register_op("where", inputs=("condition", "x", "y"), pattern=OpPattern.BROADCAST,
                    doc="condition ? x : y, all three broadcast together.")
where.def_schedule(schedule_injective)


@where.def_infer
def _where_infer(types, attrs):
    c, x, y = types
    check_dtype("where", c.dtype, ("bool",), "condition")
    check_dtype("where", x.dtype, ALL, "x")
    dt = check_same_dtype("where", (x, y), ("x", "y"))
    return [TensorType(broadcast_shapes("where", c.shape, x.shape, y.shape), dt)]


@where.def_compute
def _where_compute(tensors, attrs):
    c, x, y = tensors
    check_dtype("where", c.dtype, ("bool",), "condition")
    shape = broadcast_shape_te("where", c.shape, x.shape, y.shape)
    return [te.compute(shape, lambda *i: _sel(c[broadcast_index(c, i)], x[broadcast_index(x, i)],
                                              y[broadcast_index(y, i)]), name="T_where")]


prelu = register_op("nn.prelu", inputs=("data", "alpha"), pattern=OpPattern.BROADCAST,
                    doc="data < 0 ? alpha * data : data; alpha broadcasts to data's shape "
                        "(ONNX's unidirectional broadcast).")
prelu.def_schedule(schedule_injective)


@prelu.def_infer
def _prelu_infer(types, attrs):
    d, a = types
    check_dtype("nn.prelu", d.dtype, FLOATS + INTS[:4], "data")
    check_same_dtype("nn.prelu", types, ("data", "alpha"))
    if len(a.shape) > len(d.shape) or broadcast_shapes("nn.prelu", d.shape, a.shape) != d.shape:
        raise ShapeError(f"nn.prelu: slope of shape {fmt_shape(a.shape)} does not broadcast to the data's "
                         f"shape {fmt_shape(d.shape)}")
    return [d]


@prelu.def_compute
def _prelu_compute(tensors, attrs):
    d, a = tensors

    def body(*i):
        x = d[i]
        return _sel(x < _zero(x), x * a[broadcast_index(a, i)], x)

    return [te.compute(d.shape, body, name="T_prelu")]
