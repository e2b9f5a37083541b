"""ONNX converters of quantization: QuantizeLinear / DequantizeLinear (qnn.quantize / qnn.dequantize:
per tensor, per axis, blocked), DynamicQuantizeLinear, QLinearMatMul and QLinearConv (an integer
matmul / convolution in int32, then qnn.requantize by a_scale * b_scale / y_scale).

The quantized type may be int8/uint8/int16/uint16, int4/uint4/int2/uint2, a float8 type (with the
`saturate` attribute) or float4_e2m1fn, as ONNX's reference computes them (tessera/ops/quantize.py).
"""
from __future__ import annotations

import numpy as np

from ...ops.quantize import QUANT_DTYPES
from . import converter
from .nn import static_ints, window_attrs


def _out_dtype(ctx, zp):
    """The quantized dtype: the zero point's, else output_dtype (opset 21+), else uint8."""
    if zp is not None:
        dt = str(zp.type.dtype)
        od = ctx.attr("output_dtype", 0)
        if od and ctx.dtype(int(od)) != dt:
            ctx.unsupported(f"output_dtype {ctx.dtype(int(od))} differs from the zero point's dtype {dt}")
    else:
        od = ctx.attr("output_dtype", 0)
        dt = ctx.dtype(int(od)) if od else "uint8"
    if dt not in QUANT_DTYPES:
        ctx.unsupported(f"quantized type {dt} (tessera quantizes to {', '.join(QUANT_DTYPES)})")
    return dt


def _axis_attrs(ctx):
    return dict(axis=int(ctx.attr("axis", 1)), block_size=int(ctx.attr("block_size", 0)))


def _check_scale(ctx, scale):
    if ctx.opset < 13 and not (scale.type.ndim == 0 or scale.type.shape == (1,)):
        ctx.unsupported(f"opset {ctx.opset} takes a scalar scale, got {scale.type}")


@converter("QuantizeLinear", since=10)
def _quantize_linear(ctx):
    x, scale = ctx.input(0), ctx.input(1)
    _check_scale(ctx, scale)
    zp = ctx.input(2, optional=True)
    out = _out_dtype(ctx, zp)
    precision = ctx.attr("precision", 0)
    ins = [x, scale] + ([zp] if zp is not None else [])
    return ctx.op("qnn.quantize", *ins, out_dtype=out, precision=ctx.dtype(int(precision)) if precision else "",
                  saturate=bool(int(ctx.attr("saturate", 1))), **_axis_attrs(ctx))


@converter("DequantizeLinear", since=10)
def _dequantize_linear(ctx):
    x, scale = ctx.input(0), ctx.input(1)
    _check_scale(ctx, scale)
    zp = ctx.input(2, optional=True)
    od = ctx.attr("output_dtype", 0)
    ins = [x, scale] + ([zp] if zp is not None else [])
    return ctx.op("qnn.dequantize", *ins, out_dtype=ctx.dtype(int(od)) if od else "", **_axis_attrs(ctx))


@converter("DynamicQuantizeLinear", since=11)
def _dynamic_quantize_linear(ctx):
    return ctx.op("qnn.dynamic_quantize", ctx.input(0))


def _multiplier(ctx, shape_a=None, shape_b=None):
    """a_scale * b_scale / y_scale (inputs 1, 4, 6) in the scales' dtype, folded in numpy when they
    are constants; a vector scale is reshaped by shape_a / shape_b(n) to broadcast on its axis."""
    idx = (1, 4, 6)
    shapes = (shape_a, shape_b, None)
    if all(ctx.is_const(i) for i in idx):
        a, b, y = (np.asarray(ctx.const_input(i)) for i in idx)
        a, b = (v.reshape(f(v.size)) if f is not None and v.size > 1 else v for v, f in zip((a, b), shapes))
        return ctx.const(np.ascontiguousarray(a * b / y), "multiplier")
    vals = []
    for i, f in zip(idx, shapes):
        v = ctx.input(i)
        if f is not None and v.type.ndim == 1 and v.type.shape[0] != 1:
            v = ctx.op("reshape", v, newshape=f(v.type.shape[0]))
        vals.append(v)
    return ctx.op("divide", ctx.op("multiply", vals[0], vals[1]), vals[2])


@converter("QLinearMatMul", since=10)
def _qlinear_matmul(ctx):
    a, a_zp, b, b_zp = ctx.input(0), ctx.input(2), ctx.input(3), ctx.input(5)
    y_zp = ctx.input(7)
    for v, what in ((a, "a"), (b, "b"), (y_zp, "y_zero_point")):
        if str(v.type.dtype) not in ("int8", "uint8"):
            ctx.unsupported(f"{what} of dtype {v.type.dtype} (QLinearMatMul takes int8 or uint8)")
    acc = ctx.op("nn.matmul_integer", a, b, a_zp, b_zp)
    m = _multiplier(ctx, shape_a=lambda n: (n, 1))     # a per-row scale of a is a column
    return ctx.op("qnn.requantize", acc, m, y_zp)


@converter("QLinearConv", since=10)
def _qlinear_conv(ctx):
    x, w = ctx.input(0), ctx.input(3)
    x_zp, w_zp, y_zp = ctx.input(2), ctx.input(5), ctx.input(7)
    for v, what in ((x, "x"), (w, "w"), (y_zp, "y_zero_point")):
        if str(v.type.dtype) not in ("int8", "uint8"):
            ctx.unsupported(f"{what} of dtype {v.type.dtype} (QLinearConv takes int8 or uint8)")
    kernel = ctx.attr("kernel_shape") or static_ints(ctx, w, range(2, w.type.ndim), "kernel")
    nd, kernel, strides, dilations, pads = window_attrs(ctx, x, kernel)
    acc = ctx.op("nn.conv_integer", x, w, x_zp, w_zp, strides=strides, padding=pads, dilation=dilations,
                 groups=int(ctx.attr("group", 1)))
    bias = ctx.input(8, optional=True)
    if bias is not None:
        if str(bias.type.dtype) != "int32":
            ctx.unsupported(f"bias of dtype {bias.type.dtype} (QLinearConv takes int32)")
        acc = ctx.op("add", acc, ctx.op("reshape", bias, newshape=(-1,) + (1,) * nd))
    m = _multiplier(ctx, shape_b=lambda n: (n,) + (1,) * nd)   # per output channel w_scale
    return ctx.op("qnn.requantize", acc, m, y_zp)
