"""Reductions: sum, mean, amax/amin, max/min with indices, argmax/argmin, prod, var/std, any/all,
logsumexp, cumsum.

A reduced torch dimension that is a product of symbolic sizes is reduced over all its factors.
"""
from __future__ import annotations

import math

from . import TorchTensor, converter
from ._layout import axis as value_axis, drop_parts, norm_dim


def _dims(ctx, t: TorchTensor, dim) -> list:
    """The torch dimensions reduced (None or [] is all of them), normalized."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(t.ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted({norm_dim(ctx, d, t.ndim) for d in dims})


def _reduce(ctx, op_name: str, name="self", dtype=None, dim_arg="dim", keep_arg="keepdim"):
    t = ctx.tensor(name)
    dims = _dims(ctx, t, ctx.arg(dim_arg) if dim_arg else None)
    keep = bool(ctx.arg(keep_arg)) if keep_arg else False
    groups = t.groups()
    axes = tuple(a for d in dims for a in groups[d])
    x = ctx.cast(t.value, dtype) if dtype else t.value
    if t.ndim == 0:
        return TorchTensor(ctx.op(op_name, x, axis=None, keepdims=False))
    y = ctx.op(op_name, x, axis=axes, keepdims=keep)
    return TorchTensor(y, t.parts if keep else drop_parts(t, dims))


def _acc(ctx) -> str | None:
    """The dtype a reduction accumulates and returns in: torch's output dtype."""
    return ctx.out_dtype()


@converter("aten.sum.dim_IntList", "aten.sum.default")
def _sum(ctx):
    if ctx.target == "aten.sum.default":
        return _reduce(ctx, "sum", dtype=_acc(ctx), dim_arg=None, keep_arg=None)
    return _reduce(ctx, "sum", dtype=_acc(ctx))


@converter("aten.mean.dim", "aten.mean.default")
def _mean(ctx):
    if ctx.target == "aten.mean.default":
        return _reduce(ctx, "mean", dtype=_acc(ctx), dim_arg=None, keep_arg=None)
    return _reduce(ctx, "mean", dtype=_acc(ctx))


@converter("aten.prod.dim_int", "aten.prod.default")
def _prod(ctx):
    if ctx.target == "aten.prod.default":
        return _reduce(ctx, "prod", dtype=_acc(ctx), dim_arg=None, keep_arg=None)
    return _reduce(ctx, "prod", dtype=_acc(ctx))


@converter("aten.amax.default")
def _amax(ctx):
    return _reduce(ctx, "max")


@converter("aten.amin.default")
def _amin(ctx):
    return _reduce(ctx, "min")


@converter("aten.max.default")
def _max_all(ctx):
    return _reduce(ctx, "max", dim_arg=None, keep_arg=None)


@converter("aten.min.default")
def _min_all(ctx):
    return _reduce(ctx, "min", dim_arg=None, keep_arg=None)


@converter("aten.any.dim", "aten.any.dims", "aten.any.default")
def _any(ctx):
    if ctx.target == "aten.any.default":
        return _reduce(ctx, "max", dtype="bool", dim_arg=None, keep_arg=None)
    return _reduce(ctx, "max", dtype="bool")


@converter("aten.all.dim", "aten.all.dims", "aten.all.default")
def _all(ctx):
    if ctx.target == "aten.all.default":
        return _reduce(ctx, "min", dtype="bool", dim_arg=None, keep_arg=None)
    return _reduce(ctx, "min", dtype="bool")


@converter("aten.logsumexp.default")
def _logsumexp(ctx):
    return _reduce(ctx, "logsumexp", dtype=_acc(ctx))


def _arg(ctx, op_name: str, x, dim, keep: bool):
    y = ctx.op(op_name, x, axis=dim, keepdims=keep)
    return ctx.cast(y, "int64")


@converter("aten.argmax.default", "aten.argmin.default")
def _argmax(ctx):
    op = "argmax" if "argmax" in ctx.target else "argmin"
    keep = bool(ctx.arg("keepdim"))
    if ctx.arg("dim") is None:
        x = ctx.input("self")
        flat = ctx.op("reshape", x, newshape=(-1,))
        y = _arg(ctx, op, flat, 0, False)
        return ctx.op("reshape", y, newshape=(1,) * len(x.shape)) if keep else y
    t = ctx.tensor("self")
    d = norm_dim(ctx, ctx.arg("dim"), t.ndim)
    y = _arg(ctx, op, t.value, value_axis(ctx, t, d, "the dimension searched"), keep)
    return TorchTensor(y, t.parts if keep else drop_parts(t, [d]))


@converter("aten.max.dim", "aten.min.dim")
def _max_dim(ctx):
    is_max = ctx.target == "aten.max.dim"
    t = ctx.tensor("self")
    d = norm_dim(ctx, ctx.arg("dim"), t.ndim)
    ax = value_axis(ctx, t, d, "the dimension searched")
    keep = bool(ctx.arg("keepdim"))
    parts = t.parts if keep else drop_parts(t, [d])
    values = TorchTensor(ctx.op("max" if is_max else "min", t.value, axis=(ax,), keepdims=keep), parts)
    indices = None
    if ctx.used(1):
        indices = TorchTensor(_arg(ctx, "argmax" if is_max else "argmin", t.value, ax, keep), parts)
    return values, indices


@converter("aten.var.correction", "aten.var.dim", "aten.std.correction", "aten.std.dim")
def _var(ctx):
    t = ctx.tensor("self")
    dims = _dims(ctx, t, ctx.arg("dim"))
    keep = bool(ctx.arg("keepdim"))
    if ctx.target.endswith(".dim"):
        correction = 1 if ctx.arg("unbiased") else 0
    else:
        c = ctx.arg("correction")
        correction = 1 if c is None else c
    groups = t.groups()
    axes = tuple(a for d in dims for a in groups[d])
    x = ctx.cast(t.value, ctx.out_dtype())
    m = ctx.op("mean", x, axis=axes, keepdims=True)
    dev = ctx.op("subtract", x, m)
    v = ctx.op("mean", ctx.op("multiply", dev, dev), axis=axes, keepdims=keep)
    if correction:
        extents = [x.shape[a] for a in axes]
        if not all(isinstance(e, int) for e in extents):
            ctx.unsupported("a corrected variance over a symbolic dimension")
        n = math.prod(extents)
        v = ctx.op("multiply", v, ctx.scalar(n / max(n - float(correction), 0.0) if n > correction else math.inf,
                                             str(v.dtype)))
    if ctx.target.startswith("aten.std"):
        v = ctx.op("sqrt", v)
    return TorchTensor(v, t.parts if keep else drop_parts(t, dims))


@converter("aten.cumsum.default")
def _cumsum(ctx):
    t = ctx.tensor("self")
    d = norm_dim(ctx, ctx.arg("dim"), t.ndim)
    x = ctx.cast(t.value, ctx.out_dtype())
    return TorchTensor(ctx.op("cumsum", x, axis=value_axis(ctx, t, d, "the dimension summed")), t.parts)
