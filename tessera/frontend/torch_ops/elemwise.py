"""Elementwise ATen ops: arithmetic, comparisons, math functions, activations, casts.

Each computes in the dtype torch gives its output (type promotion done by torch), a comparison in
its inputs' promoted dtype; Python numbers become 0-d constants of that dtype. They take tensors
whose torch dimensions are symbolic products (`_layout.elementwise`).
"""
from __future__ import annotations

import math

from . import TorchTensor, converter
from ._layout import aligned, elementwise


def _promoted(ctx, *names) -> str:
    """The dtype torch promotes these arguments to (torch.result_type: tensors by dtype and rank,
    Python numbers by kind)."""
    import torch

    probe = []
    for n in names:
        dt = ctx.arg_dtype(n)
        if dt is None:
            probe.append(ctx.arg(n))
        else:
            shape = () if len(ctx.shape(n)) == 0 else (1,)
            probe.append(torch.empty(shape, dtype=getattr(torch, dt)))
    return ctx.dtype(torch.result_type(*probe) if len(probe) == 2 else probe[0].dtype)


def _args(ctx, *names):
    return [ctx.arg(n) for n in names]


def _map(ctx, fn, names, dtype=None):
    return elementwise(ctx, fn, _args(ctx, *names), dtype or ctx.out_dtype())


# ---------------------------------------------------------------------------------------------
# unary math
# ---------------------------------------------------------------------------------------------
_UNARY = {"abs": "abs", "neg": "negative", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt",
          "sin": "sin", "cos": "cos", "tan": "tan", "tanh": "tanh", "sigmoid": "sigmoid", "erf": "erf",
          "floor": "floor", "ceil": "ceil", "round": "round", "trunc": "trunc", "sign": "sign",
          "reciprocal": "reciprocal", "relu": "nn.relu", "asin": "asin", "acos": "acos", "atan": "atan",
          "sinh": "sinh", "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
          "bitwise_not": "bitwise_not"}


def _unary(op_name):
    def conv(ctx):
        return _map(ctx, lambda x: ctx.op(op_name, x), ["self"])

    return conv


for _aten, _op in _UNARY.items():
    converter(f"aten.{_aten}.default")(_unary(_op))


@converter("aten.logical_not.default")
def _logical_not(ctx):
    return _map(ctx, lambda x: ctx.op("logical_not", x), ["self"], "bool")


@converter("aten.isnan.default")
def _isnan(ctx):
    return _map(ctx, lambda x: ctx.op("isnan", x), ["self"], _promoted(ctx, "self"))


@converter("aten.isinf.default")
def _isinf(ctx):
    return _map(ctx, lambda x: ctx.op("isinf", x), ["self"], _promoted(ctx, "self"))


@converter("aten.expm1.default")
def _expm1(ctx):
    return _map(ctx, lambda x: ctx.op("subtract", ctx.op("exp", x), ctx.scalar(1, x.dtype)), ["self"])


@converter("aten.log1p.default")
def _log1p(ctx):
    return _map(ctx, lambda x: ctx.op("log", ctx.op("add", x, ctx.scalar(1, x.dtype))), ["self"])


@converter("aten.log2.default", "aten.log10.default")
def _log_base(ctx):
    base = 2.0 if ctx.target == "aten.log2.default" else 10.0
    return _map(ctx, lambda x: ctx.op("multiply", ctx.op("log", x), ctx.scalar(1.0 / math.log(base), x.dtype)),
                ["self"])


# ---------------------------------------------------------------------------------------------
# binary arithmetic
# ---------------------------------------------------------------------------------------------
def _scaled(ctx, y, alpha):
    return y if alpha == 1 else ctx.op("multiply", y, ctx.scalar(alpha, y.dtype))


@converter("aten.add.Tensor", "aten.add.Scalar")
def _add(ctx):
    alpha = ctx.arg("alpha")
    return _map(ctx, lambda a, b: ctx.op("add", a, _scaled(ctx, b, alpha)), ["self", "other"])


@converter("aten.sub.Tensor", "aten.sub.Scalar")
def _sub(ctx):
    alpha = ctx.arg("alpha")
    return _map(ctx, lambda a, b: ctx.op("subtract", a, _scaled(ctx, b, alpha)), ["self", "other"])


@converter("aten.rsub.Scalar", "aten.rsub.Tensor")
def _rsub(ctx):
    alpha = ctx.arg("alpha")
    return _map(ctx, lambda a, b: ctx.op("subtract", b, _scaled(ctx, a, alpha)), ["self", "other"])


@converter("aten.div.Tensor", "aten.div.Scalar", "aten.div.Tensor_mode", "aten.div.Scalar_mode")
def _div(ctx):
    mode = ctx.arg("rounding_mode") if ctx.has_arg("rounding_mode") else None
    out = ctx.out_dtype()
    if mode is None:
        return _map(ctx, lambda a, b: ctx.op("divide", a, b), ["self", "other"])
    if mode not in ("trunc", "floor"):
        ctx.unsupported(f"rounding_mode {mode!r}")
    if out.startswith(("int", "uint")):
        if mode == "floor":
            return _map(ctx, lambda a, b: ctx.op("floor_divide", a, b), ["self", "other"])
        return _map(ctx, lambda a, b: ctx.op("divide", a, b), ["self", "other"])   # C division truncates
    return _map(ctx, lambda a, b: ctx.op(mode, ctx.op("divide", a, b)), ["self", "other"])


_BINARY = {("aten.mul.Tensor", "aten.mul.Scalar"): "multiply", ("aten.maximum.default",): "maximum",
           ("aten.minimum.default",): "minimum", ("aten.remainder.Tensor", "aten.remainder.Scalar"): "floor_mod",
           ("aten.fmod.Tensor", "aten.fmod.Scalar"): "fmod"}


def _binary(op_name):
    def conv(ctx):
        return _map(ctx, lambda a, b: ctx.op(op_name, a, b), ["self", "other"])

    return conv


for _targets, _op in _BINARY.items():
    converter(*_targets)(_binary(_op))


@converter("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar")
def _pow(ctx):
    exponent = ctx.arg("exponent")
    if ctx.target == "aten.pow.Tensor_Scalar" and not isinstance(exponent, TorchTensor):
        e = float(exponent)
        if e == 1.0:
            return _map(ctx, lambda x: x, ["self"])
        if e == 2.0:
            return _map(ctx, lambda x: ctx.op("multiply", x, x), ["self"])
        if e == 0.5 and ctx.out_dtype().startswith(("float", "bfloat")):
            return _map(ctx, lambda x: ctx.op("sqrt", x), ["self"])
    return _map(ctx, lambda a, b: ctx.op("power", a, b), ["self", "exponent"])


# ---------------------------------------------------------------------------------------------
# comparisons and logic
# ---------------------------------------------------------------------------------------------
_COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
            "ge": "greater_equal"}


def _compare(op_name):
    def conv(ctx):
        return _map(ctx, lambda a, b: ctx.op(op_name, a, b), ["self", "other"], _promoted(ctx, "self", "other"))

    return conv


for _aten, _op in _COMPARE.items():
    converter(f"aten.{_aten}.Tensor", f"aten.{_aten}.Scalar")(_compare(_op))


def _logical(op_name):
    def conv(ctx):
        return _map(ctx, lambda a, b: ctx.op(op_name, a, b), ["self", "other"], "bool")

    return conv


for _aten in ("and", "or", "xor"):
    converter(f"aten.logical_{_aten}.default")(_logical(f"logical_{_aten}"))


def _bitwise(op_name):
    def conv(ctx):
        dt = ctx.out_dtype()
        if dt == "bool":
            return _map(ctx, lambda a, b: ctx.op(op_name.replace("bitwise", "logical"), a, b), ["self", "other"])
        return _map(ctx, lambda a, b: ctx.op(op_name, a, b), ["self", "other"])

    return conv


for _aten in ("and", "or", "xor"):
    converter(f"aten.bitwise_{_aten}.Tensor", f"aten.bitwise_{_aten}.Scalar")(_bitwise(f"bitwise_{_aten}"))


@converter("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def _where(ctx):
    dt = ctx.out_dtype()
    values, parts = aligned(ctx, [ctx.arg("condition"), ctx.arg("self"), ctx.arg("other")], ["bool", dt, dt])
    cond = ctx.cast(values[0], "bool")
    return TorchTensor(ctx.op("where", cond, values[1], values[2]), parts)


# ---------------------------------------------------------------------------------------------
# clamps and activations
# ---------------------------------------------------------------------------------------------
@converter("aten.clamp.default", "aten.clamp.Tensor")
def _clamp(ctx):
    lo, hi = ctx.arg("min"), ctx.arg("max")
    names = ["self"] + (["min"] if lo is not None else []) + (["max"] if hi is not None else [])

    def fn(x, *bounds):
        bounds = list(bounds)
        if lo is not None:
            x = ctx.op("maximum", x, bounds.pop(0))
        if hi is not None:
            x = ctx.op("minimum", x, bounds.pop(0))
        return x

    return _map(ctx, fn, names)


@converter("aten.clamp_min.default", "aten.clamp_min.Tensor")
def _clamp_min(ctx):
    return _map(ctx, lambda x, m: ctx.op("maximum", x, m), ["self", "min"])


@converter("aten.clamp_max.default", "aten.clamp_max.Tensor")
def _clamp_max(ctx):
    return _map(ctx, lambda x, m: ctx.op("minimum", x, m), ["self", "max"])


@converter("aten.hardtanh.default")
def _hardtanh(ctx):
    lo, hi = float(ctx.arg("min_val")), float(ctx.arg("max_val"))
    if lo == 0.0 and hi == math.inf:
        return _map(ctx, lambda x: ctx.op("nn.relu", x), ["self"])
    return _map(ctx, lambda x: ctx.op("clip", x, a_min=lo, a_max=hi), ["self"])


@converter("aten.gelu.default")
def _gelu(ctx):
    approx = ctx.arg("approximate")
    if approx not in ("none", "tanh"):
        ctx.unsupported(f"approximate={approx!r}")
    return _map(ctx, lambda x: ctx.op("nn.gelu", x, approximate=approx), ["self"])


@converter("aten.silu.default")
def _silu(ctx):
    return _map(ctx, lambda x: ctx.op("multiply", x, ctx.op("sigmoid", x)), ["self"])


@converter("aten.mish.default")
def _mish(ctx):
    return _map(ctx, lambda x: ctx.op("nn.mish", x), ["self"])


@converter("aten.leaky_relu.default")
def _leaky_relu(ctx):
    alpha = float(ctx.arg("negative_slope"))
    return _map(ctx, lambda x: ctx.op("nn.leaky_relu", x, alpha=alpha), ["self"])


@converter("aten.elu.default")
def _elu(ctx):
    alpha, scale, in_scale = float(ctx.arg("alpha")), float(ctx.arg("scale")), float(ctx.arg("input_scale"))

    def fn(x):
        if in_scale != 1.0:
            x = ctx.op("multiply", x, ctx.scalar(in_scale, x.dtype))
            y = ctx.op("nn.elu", x, alpha=1.0)
            # alpha * (exp(in_scale * x) - 1) for x < 0, x for x >= 0 (x unscaled there)
            raw = ctx.op("divide", x, ctx.scalar(in_scale, x.dtype))
            y = ctx.op("where", ctx.op("greater", x, ctx.scalar(0, x.dtype)), raw,
                       ctx.op("multiply", y, ctx.scalar(alpha, x.dtype)))
        else:
            y = ctx.op("nn.elu", x, alpha=alpha)
        return y if scale == 1.0 else ctx.op("multiply", y, ctx.scalar(scale, x.dtype))

    return _map(ctx, fn, ["self"])


@converter("aten.celu.default")
def _celu(ctx):
    return _map(ctx, lambda x: ctx.op("nn.celu", x, alpha=float(ctx.arg("alpha"))), ["self"])


@converter("aten.hardsigmoid.default")
def _hardsigmoid(ctx):
    return _map(ctx, lambda x: ctx.op("nn.hardsigmoid", x, alpha=1.0 / 6.0, beta=0.5), ["self"])


@converter("aten.hardswish.default")
def _hardswish(ctx):
    return _map(ctx, lambda x: ctx.op("nn.hardswish", x), ["self"])


@converter("aten.softplus.default")
def _softplus(ctx):
    beta, threshold = float(ctx.arg("beta")), float(ctx.arg("threshold"))

    def fn(x):
        bx = x if beta == 1.0 else ctx.op("multiply", x, ctx.scalar(beta, x.dtype))
        y = ctx.op("nn.softplus", bx)
        y = y if beta == 1.0 else ctx.op("divide", y, ctx.scalar(beta, x.dtype))
        # torch returns x itself above the threshold (the two differ there by less than a float's step)
        return ctx.op("where", ctx.op("greater", bx, ctx.scalar(threshold, x.dtype)), x, y)

    return _map(ctx, fn, ["self"])


@converter("aten.softshrink.default", "aten.hardshrink.default")
def _shrink(ctx):
    lambd = float(ctx.arg("lambd"))
    bias = lambd if ctx.target == "aten.softshrink.default" else 0.0
    return _map(ctx, lambda x: ctx.op("nn.shrink", x, lambd=lambd, bias=bias), ["self"])


@converter("aten._prelu_kernel.default")
def _prelu(ctx):
    return _map(ctx, lambda x, w: ctx.op("where", ctx.op("greater", x, ctx.scalar(0, x.dtype)), x,
                                         ctx.op("multiply", x, w)), ["self", "weight"])


# ---------------------------------------------------------------------------------------------
# copies and casts
# ---------------------------------------------------------------------------------------------
@converter("aten._to_copy.default")
def _to_copy(ctx):
    x = ctx.tensor("self")
    dt = ctx.out_dtype()
    if str(x.value.dtype) == dt:
        return x
    return TorchTensor(ctx.op("cast", x.value, dtype=dt), x.parts)


@converter("aten.clone.default", "aten.alias.default", "aten.lift_fresh_copy.default", "aten.detach.default",
           "aten.contiguous.default")
def _identity(ctx):
    return ctx.tensor("self")
