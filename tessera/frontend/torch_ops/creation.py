"""Tensors made from sizes and numbers: full, zeros, ones, empty, scalar_tensor, arange, the *_like ops.

Static sizes give constants (folded away by tessera.compile). A tensor like another whose sizes are
symbolic is made from that tensor (`where(true, value, x)`), so its kernel binds the sizes; a new
tensor of symbolic sizes takes them from `arange` kernels of those extents (`_layout.broadcast`).
"""
from __future__ import annotations

import numpy as np

from ...ir.dtype import DataType
from . import TorchTensor, converter
from ._layout import broadcast, out_factors
from .sizes import factors


def _static_shape(ctx, k: int = 0):
    """Output k's shape when all its sizes are ints, else None."""
    sizes = ctx.out_sizes(k)
    return tuple(sizes) if all(isinstance(s, int) for s in sizes) else None


def _filled(ctx, value):
    shape = _static_shape(ctx)
    dt = ctx.out_dtype()
    if shape is not None:
        return ctx.const(np.full(shape, value, DataType(dt).numpy()), "fill")
    want = out_factors(ctx)
    v = broadcast(ctx, ctx.scalar(value, dt), tuple(f for w in want for f in w))
    return TorchTensor(v, tuple(len(w) for w in want))


@converter("aten.full.default")
def _full(ctx):
    return _filled(ctx, ctx.arg("fill_value"))


@converter("aten.zeros.default", "aten.empty.memory_format", "aten.new_zeros.default", "aten.new_empty.default",
           "aten.empty_strided.default", "aten.empty.default")
def _zeros(ctx):
    return _filled(ctx, 0)


@converter("aten.ones.default", "aten.new_ones.default")
def _ones(ctx):
    return _filled(ctx, 1)


@converter("aten.new_full.default")
def _new_full(ctx):
    return _filled(ctx, ctx.arg("fill_value"))


@converter("aten.scalar_tensor.default")
def _scalar_tensor(ctx):
    return ctx.const(np.array(ctx.arg("s"), DataType(ctx.out_dtype()).numpy()), "scalar")


def _like(ctx, value):
    if _static_shape(ctx) is not None:
        return _filled(ctx, value)
    t = ctx.tensor("self")
    dt = ctx.out_dtype()
    y = ctx.op("where", ctx.const(np.array(True), "true"), ctx.scalar(value, dt), ctx.cast(t.value, dt))
    return TorchTensor(y, t.parts)


@converter("aten.full_like.default")
def _full_like(ctx):
    return _like(ctx, ctx.arg("fill_value"))


@converter("aten.zeros_like.default", "aten.empty_like.default")
def _zeros_like(ctx):
    return _like(ctx, 0)


@converter("aten.ones_like.default")
def _ones_like(ctx):
    return _like(ctx, 1)


@converter("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def _arange(ctx):
    start = ctx.arg("start") if ctx.has_arg("start") else 0
    end = ctx.arg("end")
    step = ctx.arg("step") if ctx.has_arg("step") else 1
    dt = ctx.out_dtype()
    if all(isinstance(v, (int, float)) for v in (start, end, step)):
        shape = _static_shape(ctx)
        if shape is None:
            ctx.unsupported("arange of static bounds with a symbolic length")
        vals = start + np.arange(shape[0], dtype=np.float64) * step
        return ctx.const(vals.astype(DataType(dt).numpy()), "arange")
    fs = factors(end)
    if start == 0 and step == 1 and fs is not None and len(fs) == 1:
        return ctx.op("arange", extent=ctx.dim(end, "the end of arange"), dtype=dt)
    ctx.unsupported(f"arange({start}, {end}, {step}) with symbolic bounds other than arange(S)")
