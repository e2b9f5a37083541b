"""ONNX converters of the losses: NegativeLogLikelihoodLoss (nn.nll_loss) and
SoftmaxCrossEntropyLoss (nn.log_softmax over the class axis, then nn.nll_loss; the optional
second output is the log-probabilities)."""
from __future__ import annotations

from . import converter


def _nll_args(ctx):
    reduction = ctx.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        ctx.unsupported(f"reduction={reduction!r} (ONNX defines none, sum and mean)")
    ii = ctx.attr("ignore_index")
    return dict(reduction=reduction, ignore_index=None if ii is None else int(ii))


def _targets(ctx, i):
    t = ctx.input(i)
    if str(t.type.dtype) not in ("int32", "int64"):
        ctx.unsupported(f"targets of dtype {t.type.dtype} (ONNX takes int32 or int64)")
    return t


@converter("NegativeLogLikelihoodLoss", since=12)
def _nll(ctx):
    x = ctx.input(0)
    if x.type.ndim < 2:
        ctx.unsupported(f"input {x.type} must be (N, C, d1..dk)")
    ins = [x, _targets(ctx, 1)]
    w = ctx.input(2, optional=True)
    if w is not None:
        ins.append(w)
    return ctx.op("nn.nll_loss", *ins, **_nll_args(ctx))


@converter("SoftmaxCrossEntropyLoss", since=12)
def _softmax_cross_entropy(ctx):
    x = ctx.input(0)
    if x.type.ndim < 2:
        ctx.unsupported(f"scores {x.type} must be (N, C, d1..dk)")
    log_prob = ctx.op("nn.log_softmax", x, axis=1)
    ins = [log_prob, _targets(ctx, 1)]
    w = ctx.input(2, optional=True)
    if w is not None:
        ins.append(w)
    loss = ctx.op("nn.nll_loss", *ins, **_nll_args(ctx))
    return (loss, log_prob) if ctx.has_output(1) else (loss,)
