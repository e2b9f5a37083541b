"""Loss ops: nn.nll_loss (ONNX NegativeLogLikelihoodLoss; SoftmaxCrossEntropyLoss is log_softmax
followed by it).

predictions (N, C, d1..dk), targets (N, d1..dk) of class indices, optional weights (C,). Per point
the loss is -predictions[n, targets[n, d..], d..] * w, with w = weights[target] (1 without
weights) and w = 0 where the target equals ignore_index. reduction "none" gives the per-point
losses, "sum" their sum, "mean" their sum divided by the sum of the w (ONNX's weighted mean; NaN
when every point is ignored, as the reference). A target out of [0, C) that is not ignore_index
counts from the end when negative and is clamped (ONNX leaves it undefined; no read goes outside
the tensor). float16/bfloat16 accumulate in float32.
"""
from __future__ import annotations

from .. import te
from ..errors import DTypeError, ShapeError, TesseraError
from ..ir import TensorType
from ..ir import expr as E
from ._common import FLOATS, INDEX, accum_dtype, check_dtype, const, fmt_shape
from ._schedule import schedule_blocks
from .registry import OpPattern, register_op

REDUCTIONS = ("none", "sum", "mean")

nll_loss = register_op(
    "nn.nll_loss", inputs=("predictions", "targets", "weights*"), pattern=OpPattern.OPAQUE,
    attrs={"reduction": "mean", "ignore_index": None},
    doc="Negative log likelihood loss over (N, C, d...) log-probabilities and (N, d...) class "
        "indices, optional per-class weights; reduction none/sum/mean (ONNX NegativeLogLikelihoodLoss).")
nll_loss.def_schedule(schedule_blocks)


def _check(types, attrs):
    op = "nn.nll_loss"
    if len(types) > 3:
        raise ShapeError(f"{op}: takes predictions, targets and at most one weights input, got {len(types)} inputs")
    p, t = types[0], types[1]
    check_dtype(op, p.dtype, FLOATS, "predictions")
    check_dtype(op, t.dtype, INDEX, "targets")
    if attrs["reduction"] not in REDUCTIONS:
        raise TesseraError(f"{op}: reduction must be one of {REDUCTIONS}, got {attrs['reduction']!r}")
    ii = attrs["ignore_index"]
    if ii is not None and (isinstance(ii, bool) or not isinstance(ii, int)):
        raise TesseraError(f"{op}: ignore_index must be an int or None, got {ii!r}")
    if p.ndim < 2:
        raise ShapeError(f"{op}: predictions must be (N, C, d1..dk), got rank {p.ndim} {fmt_shape(p.shape)}")
    want = (p.shape[0],) + p.shape[2:]
    if t.ndim != p.ndim - 1 or any(isinstance(a, int) and isinstance(b, int) and a != b or
                                   isinstance(a, str) and isinstance(b, str) and a != b
                                   for a, b in zip(t.shape, want)):
        raise ShapeError(f"{op}: targets {fmt_shape(t.shape)} must be predictions {fmt_shape(p.shape)} "
                         f"without the class axis: {fmt_shape(want)}")
    if len(types) == 3:
        w = types[2]
        if w.dtype != p.dtype:
            raise DTypeError(f"{op}: weights are {w.dtype} but predictions are {p.dtype}; they must have one dtype")
        if w.ndim != 1 or (isinstance(w.shape[0], int) and isinstance(p.shape[1], int) and w.shape[0] != p.shape[1]):
            raise ShapeError(f"{op}: weights must be (C,) = ({p.shape[1]},), got {fmt_shape(w.shape)}")
    return p, t


@nll_loss.def_infer
def _nll_infer(types, attrs):
    p, t = _check(types, attrs)
    shape = t.shape if attrs["reduction"] == "none" else ()
    return [TensorType(shape, p.dtype)]


def _class_index(t, c_extent):
    """The target as a safe index into the class axis: negative counts from the end, then clamped."""
    v = t.astype("int64") if t.dtype != "int64" else t
    c = E.const(c_extent.value, "int64") if isinstance(c_extent, E.IntImm) else E.convert(c_extent).astype("int64")
    v = E.Select(v < E.const(0, "int64"), v + c, v)
    return te.max(te.min(v, c - E.const(1, "int64")), E.const(0, "int64"))


@nll_loss.def_compute
def _nll_compute(tensors, attrs):
    _check([TensorType([int(d.value) if isinstance(d, E.IntImm) else d.name for d in x.shape], x.dtype)
            for x in tensors], attrs)
    p, t = tensors[0], tensors[1]
    w = tensors[2] if len(tensors) == 3 else None
    acc = accum_dtype(p.dtype)
    ii = attrs["ignore_index"]
    reduction = attrs["reduction"]
    lo, hi = (-(1 << 31), (1 << 31) - 1) if t.dtype == "int32" else (-(1 << 63), (1 << 63) - 1)
    ignore = ii is not None and lo <= ii <= hi
    weighted = w is not None or ignore

    def kept(i):
        return t[i] != E.const(ii, t.dtype)

    def weight(*i):
        k = _class_index(t[i], p.shape[1])
        v = w[k].astype(acc) if w is not None else const(1, acc)
        return E.Select(kept(i), v, const(0, acc)) if ignore else v

    def element(*i):
        k = _class_index(t[i], p.shape[1])
        v = -(p[(i[0], k) + tuple(i[1:])].astype(acc))
        if w is not None:
            v = wt[i] * v
        elif ignore:
            v = E.Select(kept(i), v, const(0, acc))
        return v

    wt = te.compute(t.shape, weight, name="nll_weight") if w is not None else None
    loss = te.compute(t.shape, element, name="nll_elem")
    if reduction == "none":
        return [te.compute(t.shape, lambda *i: loss[i].astype(p.dtype), name="nll_loss")]
    axes = [te.reduce_axis((0, d), name=f"r{k}") for k, d in enumerate(t.shape)]
    rv = tuple(a.var for a in axes)
    total = te.compute((), lambda: te.sum(loss[rv], axis=axes), name="nll_sum")
    if reduction == "sum":
        return [te.compute((), lambda: total[()].astype(p.dtype), name="nll_loss")]
    if weighted:
        if wt is None:
            wt = te.compute(t.shape, weight, name="nll_weight")
        axes2 = [te.reduce_axis((0, d), name=f"s{k}") for k, d in enumerate(t.shape)]
        sv = tuple(a.var for a in axes2)
        denom = te.compute((), lambda: te.sum(wt[sv], axis=axes2), name="nll_weight_sum")
        return [te.compute((), lambda: (total[()] / denom[()]).astype(p.dtype), name="nll_loss")]
    count, static_n = None, 1
    for d in t.shape:
        if isinstance(d, E.IntImm):
            static_n *= d.value
        else:
            count = d.astype(acc) if count is None else count * d.astype(acc)
    count = const(static_n, acc) if count is None else count * const(static_n, acc)
    return [te.compute((), lambda: (total[()] / count).astype(p.dtype), name="nll_loss")]
