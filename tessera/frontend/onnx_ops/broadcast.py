"""ONNX converters of the broadcasting family: arithmetic, comparisons, logic, bit ops, Where, PRelu,
and the variadic Sum/Mean/Max/Min (folded into chains of binary ops).
"""
from __future__ import annotations

import numpy as np

from . import converter
from ...ir.dtype import numpy_dtype

_BINARY = {
    "Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Pow": "power",
    "Equal": "equal", "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
    "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor",
    "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor",
}


def _binary(tessera_op):
    def convert(ctx):
        return ctx.op(tessera_op, ctx.input(0), ctx.input(1))

    convert.__name__ = f"_convert_{tessera_op}"
    return convert


for _onnx, _op in _BINARY.items():
    converter(_onnx)(_binary(_op))


@converter("Mod", since=10)
def _mod(ctx):
    """fmod=1: C fmod (sign of the dividend); fmod=0: the sign of the divisor (Python %)."""
    op = "fmod" if ctx.attr("fmod", 0) else "mod"
    return ctx.op(op, ctx.input(0), ctx.input(1))


@converter("BitShift", since=11)
def _bitshift(ctx):
    direction = ctx.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        ctx.unsupported(f"direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    return ctx.op("left_shift" if direction == "LEFT" else "right_shift", ctx.input(0), ctx.input(1))


@converter("Where", since=9)
def _where(ctx):
    return ctx.op("where", ctx.input(0), ctx.input(1), ctx.input(2))


@converter("PRelu")
def _prelu(ctx):
    return ctx.op("nn.prelu", ctx.input(0), ctx.input(1))


def _variadic(tessera_op):
    def convert(ctx):
        vals = [v for v in ctx.inputs() if v is not None]
        if not vals:
            ctx.unsupported("needs at least one input")
        out = vals[0]
        for v in vals[1:]:
            out = ctx.op(tessera_op, out, v)
        return out

    return convert


converter("Sum")(_variadic("add"))
converter("Max")(_variadic("maximum"))
converter("Min")(_variadic("minimum"))


@converter("Mean")
def _mean(ctx):
    """The sum of the inputs divided by their count (in the inputs' dtype)."""
    vals = [v for v in ctx.inputs() if v is not None]
    if not vals:
        ctx.unsupported("needs at least one input")
    out = _variadic("add")(ctx)
    if len(vals) == 1:
        return out
    n = np.array(len(vals), numpy_dtype(vals[0].type.dtype))
    return ctx.op("divide", out, n)
