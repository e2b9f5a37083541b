"""Matrix products: linear, addmm, mm, bmm, baddbmm, matmul -> nn.matmul.

A weight reached through a transpose (linear's and addmm's (N, K) weight) stays a transpose node:
tessera.compile folds it into a (K, N) constant and packs it for the GEMM micro-kernels, as the
ONNX frontend's Gemm does. The rows of a product may be a symbolic product of sizes (core ATen's
(B*T, K) view of a (B, T, K) activation): they stay the value's own dimensions (nn.matmul
broadcasts over them), as do bmm's batch dimensions.
"""
from __future__ import annotations

from . import TorchTensor, converter
from ._layout import aligned, axis as value_axis


def _scaled(ctx, y, factor):
    factor = float(factor)
    return y if factor == 1.0 else ctx.op("multiply", y, ctx.scalar(factor, str(y.dtype)))


def _rows_product(ctx, a: TorchTensor, b):
    """a (M, K) @ b (K, N) with a's rows kept as its factors: (Value, parts)."""
    value_axis(ctx, a, 1, "the inner dimension")
    y = ctx.op("nn.matmul", a.value, b)
    return y, (None if a.parts is None else (a.parts[0], 1))


def _plus_bias(ctx, y, parts, bias, beta):
    """beta * bias + y, bias broadcast to y's torch shape."""
    if beta == 0:
        return TorchTensor(y, parts)
    dt = str(y.dtype)
    if isinstance(bias, TorchTensor) and float(beta) != 1.0:
        bias = TorchTensor(_scaled(ctx, bias.value, beta), bias.parts)
    elif not isinstance(bias, TorchTensor):
        bias = float(bias) * float(beta)
    (yv, bv), out_parts = aligned(ctx, [TorchTensor(y, parts), bias], dt)
    return TorchTensor(ctx.op("add", yv, bv), out_parts)


@converter("aten.addmm.default")
def _addmm(ctx):
    y, parts = _rows_product(ctx, ctx.tensor("mat1"), ctx.input("mat2"))
    y = _scaled(ctx, y, ctx.arg("alpha"))
    return _plus_bias(ctx, y, parts, ctx.arg("self"), ctx.arg("beta"))


@converter("aten.mm.default")
def _mm(ctx):
    y, parts = _rows_product(ctx, ctx.tensor("self"), ctx.input("mat2"))
    return TorchTensor(y, parts)


def _batched(ctx, a: TorchTensor, b: TorchTensor):
    """a (Bt, M, K) @ b (Bt, K, N), Bt kept as its factors when both hold it so: (Value, parts)."""
    for t, what in ((a, "first"), (b, "second")):
        value_axis(ctx, t, 1, f"a matrix dimension of the {what} operand")
        value_axis(ctx, t, 2, f"a matrix dimension of the {what} operand")
    fa, fb = a.factors(0), b.factors(0)
    if fa == fb:
        return ctx.op("nn.matmul", a.value, b.value), (None if len(fa) == 1 else (len(fa), 1, 1))
    return ctx.op("nn.matmul", ctx.flat(a, "the first operand"), ctx.flat(b, "the second operand")), None


@converter("aten.bmm.default")
def _bmm(ctx):
    y, parts = _batched(ctx, ctx.tensor("self"), ctx.tensor("mat2"))
    return TorchTensor(y, parts)


@converter("aten.baddbmm.default")
def _baddbmm(ctx):
    y, parts = _batched(ctx, ctx.tensor("batch1"), ctx.tensor("batch2"))
    y = _scaled(ctx, y, ctx.arg("alpha"))
    return _plus_bias(ctx, y, parts, ctx.arg("self"), ctx.arg("beta"))


@converter("aten.linear.default")
def _linear(ctx):
    x = ctx.tensor("input")
    value_axis(ctx, x, -1, "the feature dimension")
    w = ctx.input("weight")
    wt = ctx.op("transpose", w, axes=(1, 0)) if len(w.shape) == 2 else w
    y = ctx.op("nn.matmul", x.value, wt)
    parts = x.parts if len(w.shape) == 2 or x.parts is None else x.parts[:-1]
    if not ctx.has_arg("bias"):
        return TorchTensor(y, parts)
    return _plus_bias(ctx, y, parts, ctx.arg("bias"), 1)


@converter("aten.matmul.default")
def _matmul(ctx):
    return ctx.op("nn.matmul", ctx.input("self"), ctx.input("other"))
