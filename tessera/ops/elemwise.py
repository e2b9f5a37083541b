"""Elementwise ops (pattern ELEMWISE): one input, out[i] = f(in[i]), same shape.

Math on float16/bfloat16 is computed in float32 and rounded once at the end (as ONNX Runtime
does); integer and bool ops compute in their own dtype. Names follow Relay ("negative", "nn.relu").
"""
from __future__ import annotations

import math

from .. import te
from ..errors import DTypeError, TesseraError
from ..ir import TensorType
from ..ir import expr as E
from ..ir.dtype import DataType
from ._common import (ALL, FLOATS, INTS, LOWP, NUMERIC, SIGNED, accum_dtype, cast, check_dtype, const)
from ._schedule import schedule_injective
from .registry import OpPattern, register_op


def _in_accum(x, fn):
    """fn applied to x computed in accum_dtype(x) and cast back to x's dtype."""
    acc = accum_dtype(x.dtype)
    v = fn(x.astype(acc) if acc != x.dtype else x)
    return v.astype(x.dtype) if v.dtype != x.dtype else v


def _zero(x):
    return const(0, x.dtype)


def _sel(cond, a, b):
    return E.Select(cond, a, b)


def register_unary(name: str, fn, dtypes, *, attrs=None, out_dtype=None, accum: bool = True,
                   doc: str = ""):
    """Register an elementwise op `name(data)` computing fn(x, attrs) per element.

    dtypes: the input dtypes it takes; out_dtype(in_dtype, attrs): the output dtype (default: the
    input's); accum: float16/bfloat16 inputs compute in float32 (for float math).
    """
    op = register_op(name, inputs=("data",), pattern=OpPattern.ELEMWISE, attrs=attrs or {},
                     doc=doc or (fn.__doc__ or ""))
    short = name.rsplit(".", 1)[-1]
    op.def_schedule(schedule_injective)

    def result_dtype(dtype, attrs):
        return DataType(out_dtype(dtype, attrs)) if out_dtype else DataType(dtype)

    @op.def_infer
    def _infer(types, attrs):
        (t,) = types
        check_dtype(name, t.dtype, dtypes, "data")
        return [TensorType(t.shape, result_dtype(t.dtype, attrs))]

    @op.def_compute
    def _compute(tensors, attrs):
        (x,) = tensors
        check_dtype(name, x.dtype, dtypes, "data")
        want = result_dtype(x.dtype, attrs)

        def body(*i):
            v = x[i]
            if accum and v.dtype in ("float16", "bfloat16"):
                r = fn(v.astype("float32"), attrs)
                return cast(r, want) if r.dtype != want else r
            r = fn(v, attrs)
            return cast(r, want) if r.dtype != want else r

        return [te.compute(x.shape, body, name=f"T_{short}")]

    return op


# ---------------------------------------------------------------------------------------------
# plain math
# ---------------------------------------------------------------------------------------------
def _sign(x, a):
    one, zero = const(1, x.dtype), _zero(x)
    if x.dtype.is_uint():
        return _sel(x > zero, one, zero)
    s = _sel(x > zero, one, _sel(x < zero, const(-1, x.dtype), zero))
    return _sel(te.isnan(x), x, s) if x.dtype.is_float() else s


def _reciprocal(x, a):
    return const(1, x.dtype) / x


def _unary_table():
    f = lambda g: (lambda x, a: g(x))  # noqa: E731 - adapts a te intrinsic to fn(x, attrs)
    return {
        "negative": (lambda x, a: _zero(x) - x if not x.dtype.is_float() else -x, SIGNED),
        "abs": (f(te.abs), NUMERIC),
        "sign": (_sign, NUMERIC),
        "exp": (f(te.exp), FLOATS), "log": (f(te.log), FLOATS), "sqrt": (f(te.sqrt), FLOATS),
        "rsqrt": (f(te.rsqrt), FLOATS), "reciprocal": (_reciprocal, FLOATS),
        "floor": (f(te.floor), NUMERIC), "ceil": (f(te.ceil), NUMERIC),
        "round": (f(te.round), NUMERIC), "trunc": (f(te.trunc), NUMERIC),
        "erf": (f(te.erf), FLOATS), "sin": (f(te.sin), FLOATS), "cos": (f(te.cos), FLOATS),
        "tan": (f(te.tan), FLOATS), "asin": (f(te.asin), FLOATS), "acos": (f(te.acos), FLOATS),
        "atan": (f(te.atan), FLOATS), "sinh": (f(te.sinh), FLOATS), "cosh": (f(te.cosh), FLOATS),
        "asinh": (f(te.asinh), FLOATS), "acosh": (f(te.acosh), FLOATS),
        "atanh": (f(te.atanh), FLOATS), "sigmoid": (f(te.sigmoid), FLOATS),
        "tanh": (f(te.tanh), FLOATS),
    }


for _name, (_fn, _dtypes) in _unary_table().items():
    register_unary(_name, _fn, _dtypes, doc=f"Elementwise {_name} (numpy semantics).")

register_unary("isnan", lambda x, a: te.isnan(x), FLOATS, out_dtype=lambda d, a: "bool",
               accum=False, doc="Elementwise isnan; bool result.")


def _isinf(x, a):
    pos, neg = a["detect_positive"], a["detect_negative"]
    inf = te.isinf(x)
    if pos and neg:
        return inf
    if pos:
        return te.all(inf, x > _zero(x))
    if neg:
        return te.all(inf, x < _zero(x))
    return E.const(False)


register_unary("isinf", _isinf, FLOATS, attrs={"detect_positive": True, "detect_negative": True},
               out_dtype=lambda d, a: "bool", accum=False,
               doc="Elementwise isinf, optionally only +inf or only -inf (ONNX IsInf); bool result.")
register_unary("logical_not", lambda x, a: E.Not(x), ("bool",), accum=False, doc="Elementwise not of bools.")
register_unary("bitwise_not", lambda x, a: ~x, INTS, accum=False, doc="Elementwise ~x of integers.")
register_unary("copy", lambda x, a: x, ALL, accum=False, doc="The identity (a copy of the input).")


# ---------------------------------------------------------------------------------------------
# activations
# ---------------------------------------------------------------------------------------------
def _relu(x, a):
    return te.max(x, _zero(x)) if not x.dtype.is_uint() else x


def _leaky_relu(x, a):
    return _sel(x < _zero(x), x * const(a["alpha"], x.dtype), x)


def _elu(x, a):
    return _sel(x < _zero(x), const(a["alpha"], x.dtype) * (te.exp(x) - const(1, x.dtype)), x)


def _selu(x, a):
    al, g = const(a["alpha"], x.dtype), const(a["gamma"], x.dtype)
    return _sel(x <= _zero(x), g * (al * te.exp(x) - al), g * x)


def _celu(x, a):
    al = const(a["alpha"], x.dtype)
    return te.max(x, _zero(x)) + te.min(_zero(x), al * (te.exp(x / al) - const(1, x.dtype)))


def _softplus(x, a):
    # log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|))
    return te.max(x, _zero(x)) + te.log1p(te.exp(-te.abs(x)))


def _softsign(x, a):
    return x / (const(1, x.dtype) + te.abs(x))


def _hardsigmoid(x, a):
    v = const(a["alpha"], x.dtype) * x + const(a["beta"], x.dtype)
    return te.max(_zero(x), te.min(const(1, x.dtype), v))


def _hardswish(x, a):
    v = x * const(1.0 / 6.0, x.dtype) + const(0.5, x.dtype)
    return x * te.max(_zero(x), te.min(const(1, x.dtype), v))


def _gelu(x, a):
    half, one = const(0.5, x.dtype), const(1, x.dtype)
    if a["approximate"] == "tanh":
        inner = const(math.sqrt(2 / math.pi), x.dtype) * (x + const(0.044715, x.dtype) * x * x * x)
        return half * x * (one + te.tanh(inner))
    if a["approximate"] != "none":
        raise TesseraError(f"nn.gelu: approximate must be 'none' or 'tanh', got {a['approximate']!r}")
    return half * x * (one + te.erf(x * const(1 / math.sqrt(2), x.dtype)))


def _mish(x, a):
    return x * te.tanh(_softplus(x, a))


def _thresholded_relu(x, a):
    return _sel(x > const(a["alpha"], x.dtype), x, _zero(x))


def _shrink(x, a):
    lambd, bias = float(a["lambd"]), float(a["bias"])
    if x.dtype.is_float():
        lo, hi, b = const(-lambd, x.dtype), const(lambd, x.dtype), const(bias, x.dtype)
        return _sel(x < lo, x + b, _sel(x > hi, x - b, _zero(x)))
    xf = x.astype("float64")
    if bias.is_integer():  # stay exact in the integer dtype
        lo, hi, b = E.const(-lambd, "float64"), E.const(lambd, "float64"), const(bias, x.dtype)
        return _sel(xf < lo, x + b, _sel(xf > hi, x - b, _zero(x)))
    lo, hi, b = E.const(-lambd, "float64"), E.const(lambd, "float64"), E.const(bias, "float64")
    return _sel(xf < lo, (xf + b).astype(x.dtype), _sel(xf > hi, (xf - b).astype(x.dtype), _zero(x)))


register_unary("nn.relu", _relu, NUMERIC, doc="max(x, 0).")
register_unary("nn.leaky_relu", _leaky_relu, FLOATS, attrs={"alpha": 0.01}, doc="x < 0 ? alpha*x : x.")
register_unary("nn.elu", _elu, FLOATS, attrs={"alpha": 1.0}, doc="x < 0 ? alpha*(exp(x)-1) : x.")
register_unary("nn.selu", _selu, FLOATS,
               attrs={"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
               doc="gamma * (x <= 0 ? alpha*exp(x) - alpha : x).")
register_unary("nn.celu", _celu, FLOATS, attrs={"alpha": 1.0},
               doc="max(0, x) + min(0, alpha*(exp(x/alpha)-1)).")
register_unary("nn.softplus", _softplus, FLOATS, doc="log(1 + exp(x)), computed without overflow.")
register_unary("nn.softsign", _softsign, FLOATS, doc="x / (1 + |x|).")
register_unary("nn.hardsigmoid", _hardsigmoid, FLOATS, attrs={"alpha": 0.2, "beta": 0.5},
               doc="max(0, min(1, alpha*x + beta)).")
register_unary("nn.hardswish", _hardswish, FLOATS, doc="x * max(0, min(1, x/6 + 1/2)).")
register_unary("nn.gelu", _gelu, FLOATS, attrs={"approximate": "none"},
               doc="x * Phi(x) with the erf form, or the tanh approximation (approximate='tanh').")
register_unary("nn.mish", _mish, FLOATS, doc="x * tanh(softplus(x)).")
register_unary("nn.thresholded_relu", _thresholded_relu, FLOATS, attrs={"alpha": 1.0},
               doc="x > alpha ? x : 0.")
register_unary("nn.shrink", _shrink, NUMERIC, attrs={"lambd": 0.5, "bias": 0.0},
               doc="x < -lambd ? x + bias : x > lambd ? x - bias : 0 (ONNX Shrink).")


# ---------------------------------------------------------------------------------------------
# clip and cast
# ---------------------------------------------------------------------------------------------
def _bound(value, dtype, what):
    """A clip bound as a constant of dtype; integer bounds are clamped into the dtype's range."""
    dt = DataType(dtype)
    if dt.is_float():
        return const(float(value), dt)
    v = float(value)
    if math.isnan(v):
        raise DTypeError(f"clip: {what} is NaN, which an integer tensor cannot be clipped to")
    lo, hi = (float(te.min_value(dt).value), float(te.max_value(dt).value))
    v = math.ceil(v) if what == "a_min" else math.floor(v)
    return const(int(min(max(v, lo), hi)), dt)


def _clip(x, a):
    if a["a_min"] is not None:
        x = te.max(x, _bound(a["a_min"], x.dtype, "a_min"))
    if a["a_max"] is not None:
        x = te.min(x, _bound(a["a_max"], x.dtype, "a_max"))
    return x


register_unary("clip", _clip, NUMERIC, attrs={"a_min": None, "a_max": None}, accum=False,
               doc="min(max(x, a_min), a_max); a None bound is open.")


def _cast_dtype(dtype, attrs):
    try:
        dt = DataType(attrs["dtype"])
    except DTypeError as err:
        raise DTypeError(f"cast: {err}") from None
    if dt.lanes != 1 or dt.is_handle() or dt == "uint1":
        raise DTypeError(f"cast: cannot cast to {dt}; the target must be one of {', '.join(ALL)}")
    return dt


def _cast(x, a):
    dt = _cast_dtype(x.dtype, a)
    if x.dtype in ("float16", "bfloat16") and not dt.is_float() and not dt.is_bool():
        x = x.astype("float32")  # half -> int goes through float32 (C has no direct conversion)
    return cast(x, dt)


register_unary("cast", _cast, ALL + LOWP, attrs={"dtype": "float32"}, out_dtype=_cast_dtype, accum=False,
               doc="Convert to dtype as numpy/ONNX do: floats to ints truncate toward zero, "
                   "anything to bool is x != 0, bool to numbers is 0/1; to and from the float8/float4/"
                   "int4/int2 storage types as ml_dtypes does (round to nearest even, no saturation; "
                   "a float to int4/int2 truncates, then wraps).")
