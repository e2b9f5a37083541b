"""ONNX converters of the elementwise family: math, activations, Clip, Cast/CastLike, Identity,
Dropout (inference).
"""
from __future__ import annotations

import numpy as np

from . import converter
from ...ir.dtype import numpy_dtype

# ONNX op -> tessera op (no attributes)
_UNARY = {
    "Abs": "abs", "Neg": "negative", "Sign": "sign", "Exp": "exp", "Log": "log", "Sqrt": "sqrt",
    "Reciprocal": "reciprocal", "Floor": "floor", "Ceil": "ceil", "Round": "round", "Erf": "erf",
    "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan",
    "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh",
    "IsNaN": "isnan", "Not": "logical_not", "BitwiseNot": "bitwise_not", "Sigmoid": "sigmoid",
    "Tanh": "tanh", "Relu": "nn.relu", "Softplus": "nn.softplus", "Softsign": "nn.softsign",
    "HardSwish": "nn.hardswish", "Mish": "nn.mish",
}


def _unary(tessera_op):
    def convert(ctx):
        return ctx.op(tessera_op, ctx.input(0))

    convert.__name__ = f"_convert_{tessera_op.replace('.', '_')}"
    return convert


for _onnx, _op in _UNARY.items():
    converter(_onnx)(_unary(_op))


# op -> (tessera op, {onnx attr: (tessera attr, default)})
_WITH_ATTRS = {
    "LeakyRelu": ("nn.leaky_relu", {"alpha": ("alpha", 0.01)}),
    "Elu": ("nn.elu", {"alpha": ("alpha", 1.0)}),
    "Selu": ("nn.selu", {"alpha": ("alpha", 1.67326319217681884765625),
                         "gamma": ("gamma", 1.05070102214813232421875)}),
    "Celu": ("nn.celu", {"alpha": ("alpha", 1.0)}),
    "HardSigmoid": ("nn.hardsigmoid", {"alpha": ("alpha", 0.2), "beta": ("beta", 0.5)}),
    "ThresholdedRelu": ("nn.thresholded_relu", {"alpha": ("alpha", 1.0)}),
    "Shrink": ("nn.shrink", {"lambd": ("lambd", 0.5), "bias": ("bias", 0.0)}),
    "IsInf": ("isinf", {"detect_positive": ("detect_positive", 1), "detect_negative": ("detect_negative", 1)}),
    "Gelu": ("nn.gelu", {"approximate": ("approximate", "none")}),
}


def _with_attrs(tessera_op, amap):
    def convert(ctx):
        attrs = {}
        for onnx_name, (name, default) in amap.items():
            v = ctx.attr(onnx_name, default)
            attrs[name] = bool(v) if isinstance(default, int) and name.startswith("detect") else v
        return ctx.op(tessera_op, ctx.input(0), **attrs)

    convert.__name__ = f"_convert_{tessera_op.replace('.', '_')}"
    return convert


for _onnx, (_op, _amap) in _WITH_ATTRS.items():
    converter(_onnx)(_with_attrs(_op, _amap))


@converter("Swish")
def _swish(ctx):
    """x * sigmoid(alpha * x)."""
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha", 1.0))
    scaled = x if alpha == 1.0 else ctx.op("multiply", x, np.array(alpha, _np_dtype(x)))
    return ctx.op("multiply", x, ctx.op("sigmoid", scaled))


def _np_dtype(v):
    return numpy_dtype(v.type.dtype)


# ---------------------------------------------------------------------------------------------
# Clip
# ---------------------------------------------------------------------------------------------
@converter("Clip")
def _clip_v1(ctx):
    return ctx.op("clip", ctx.input(0), a_min=ctx.attr("min"), a_max=ctx.attr("max"))


@converter("Clip", since=11)
def _clip_v11(ctx):
    """Constant bounds become clip's attributes; a runtime bound a maximum/minimum against it."""
    x = ctx.input(0)
    consts, runtime = {}, {}
    for i, name in ((1, "a_min"), (2, "a_max")):
        if not ctx.has_input(i):
            continue
        if ctx.is_const(i):
            b = np.asarray(ctx.const_input(i))
            if b.size != 1:
                ctx.unsupported(f"the {name[2:]} bound must be a scalar, it has shape {b.shape}")
            consts[name] = b.reshape(-1)[0].item()
        else:
            runtime[name] = ctx.input(i)
    if consts:
        x = ctx.op("clip", x, **consts)
    if "a_min" in runtime:
        x = ctx.op("maximum", x, runtime["a_min"])
    if "a_max" in runtime:
        x = ctx.op("minimum", x, runtime["a_max"])
    return x


# ---------------------------------------------------------------------------------------------
# Cast, CastLike, Identity, Dropout
# ---------------------------------------------------------------------------------------------
@converter("Cast")
def _cast(ctx):
    to = ctx.attr("to")
    if to is None:
        ctx.unsupported("Cast needs the 'to' attribute")
    if isinstance(to, str):  # opset 1 spelled the type as a string
        import onnx

        to = getattr(onnx.TensorProto, to.upper(), None)
        if to is None:
            ctx.unsupported(f"unknown type name {ctx.attr('to')!r}")
    return _convert(ctx, ctx.input(0), ctx.dtype(int(to)))


@converter("CastLike", since=15)
def _cast_like(ctx):
    return _convert(ctx, ctx.input(0), str(ctx.input(1).type.dtype))


# the largest finite float8 values: a saturating Cast (opset 19+, the default) clamps to them
_FLOAT8_MAX = {"float8_e4m3fn": 448.0, "float8_e4m3fnuz": 240.0, "float8_e5m2": 57344.0,
               "float8_e5m2fnuz": 57344.0}


def _convert(ctx, x, dtype: str):
    """x as dtype, as ONNX's Cast: to a float8 type with `saturate` (default 1) a value beyond the
    type's range (inf included) becomes its largest finite value, NaN stays NaN; otherwise ml_dtypes'
    conversion (overflow to inf or NaN, round to nearest even)."""
    if str(x.type.dtype) == dtype:
        return x
    src = x.type.dtype
    if dtype in _FLOAT8_MAX and int(ctx.attr("saturate", 1)) and not (src.is_bool() or src.is_subbyte()):
        if src.is_minifloat():
            x = ctx.op("cast", x, dtype="float32")   # exact: every float8 value is a float32
        m = _FLOAT8_MAX[dtype]
        x = ctx.op("clip", x, a_min=-m, a_max=m)
    return ctx.op("cast", x, dtype=dtype)


@converter("Identity")
def _identity(ctx):
    return ctx.any_input(0)      # a tensor, or (opset 14+) a sequence or an optional


@converter("Dropout")
def _dropout(ctx):
    """Inference: the identity, and a mask of ones when it is asked for. Training mode with a
    nonzero ratio (a random result) is refused."""
    x = ctx.input(0)
    if ctx.opset >= 12:
        training = bool(np.asarray(ctx.const_input(2)).reshape(-1)[0]) if ctx.has_input(2) else False
        ratio = float(np.asarray(ctx.const_input(1)).reshape(-1)[0]) if ctx.has_input(1) else 0.5
    else:
        training = not ctx.attr("is_test", 1) if ctx.opset < 7 else False
        ratio = float(ctx.attr("ratio", 0.5))
    if training and ratio != 0.0:
        ctx.unsupported(f"Dropout in training mode with ratio {ratio} is random; tessera compiles inference")
    if ctx.num_outputs < 2 or not ctx.has_output(1):
        return x
    if not x.type.is_static:
        ctx.unsupported("the mask output of a Dropout on a tensor of symbolic shape")
    mask_dtype = bool if ctx.opset >= 10 else _np_dtype(x)
    return x, ctx.const(np.ones(x.type.shape, mask_dtype), "mask")
