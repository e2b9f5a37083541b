"""ONNX converters of the reductions: Reduce*, ArgMax/ArgMin, CumSum/CumProd.

The axes come from the attribute (older opsets) or the constant input 1 (ReduceSum from opset 13,
the others from 18). No axes reduce everything, unless noop_with_empty_axes=1: then nothing is
reduced (the composite ones still apply their elementwise part, as the ONNX reference does).
ReduceL1/L2/SumSquare/LogSum are composed from primitives (abs/multiply, sum, sqrt/log).
"""
from __future__ import annotations

import numpy as np

from . import converter

_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduce_args(ctx):
    since = _AXES_INPUT_SINCE.get(ctx.op_type, 18)
    if ctx.opset >= since:
        axes = [int(a) for a in np.asarray(ctx.const_input(1)).reshape(-1)] if ctx.has_input(1) else []
    else:
        a = ctx.attr("axes")
        axes = [] if a is None else [int(v) for v in a]
    keepdims = bool(ctx.attr("keepdims", 1))
    if not axes:
        axis = () if ctx.attr("noop_with_empty_axes", 0) else None
    else:
        axis = tuple(axes)
    return axis, keepdims


def _reduce(tessera_op, pre=None, post=None):
    def convert(ctx):
        x = ctx.input(0)
        axis, keepdims = _reduce_args(ctx)
        if pre is not None:
            x = pre(ctx, x)
        y = ctx.op(tessera_op, x, axis=axis, keepdims=keepdims)
        return post(ctx, y) if post is not None else y

    return convert


def _square(ctx, x):
    return ctx.op("multiply", x, x)


for _onnx, _fn in {
    "ReduceSum": _reduce("sum"), "ReduceMean": _reduce("mean"), "ReduceMax": _reduce("max"),
    "ReduceMin": _reduce("min"), "ReduceProd": _reduce("prod"), "ReduceLogSumExp": _reduce("logsumexp"),
    "ReduceL1": _reduce("sum", pre=lambda ctx, x: ctx.op("abs", x)),
    "ReduceL2": _reduce("sum", pre=_square, post=lambda ctx, y: _sqrt(ctx, y)),
    "ReduceSumSquare": _reduce("sum", pre=_square),
    "ReduceLogSum": _reduce("sum", post=lambda ctx, y: ctx.op("log", y)),
}.items():
    converter(_onnx)(_fn)


def _sqrt(ctx, y):
    """sqrt, for integer sums through float64 and back (ONNX ReduceL2 keeps the input's type)."""
    dt = str(y.type.dtype)
    if dt.startswith(("float", "bfloat")):
        return ctx.op("sqrt", y)
    return ctx.op("cast", ctx.op("sqrt", ctx.op("cast", y, dtype="float64")), dtype=dt)


def _arg(tessera_op):
    def convert(ctx):
        return ctx.op(tessera_op, ctx.input(0), axis=int(ctx.attr("axis", 0)),
                      keepdims=bool(ctx.attr("keepdims", 1)),
                      select_last_index=bool(ctx.attr("select_last_index", 0)))

    return convert


converter("ArgMax")(_arg("argmax"))
converter("ArgMin")(_arg("argmin"))


def _scan(tessera_op):
    def convert(ctx):
        axis = np.asarray(ctx.const_input(1)).reshape(-1)
        if axis.size != 1:
            ctx.unsupported(f"axis must hold one value, it has {axis.size}")
        return ctx.op(tessera_op, ctx.input(0), axis=int(axis[0]), exclusive=bool(ctx.attr("exclusive", 0)),
                      reverse=bool(ctx.attr("reverse", 0)))

    return convert


converter("CumSum", since=11)(_scan("cumsum"))
converter("CumProd", since=26)(_scan("cumprod"))
