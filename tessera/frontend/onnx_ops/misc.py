"""ONNX converters of the remaining small ops: BitCast (reinterpret), Det, CenterCropPad (slice and
pad), MaxUnpool (a scatter into zeros), NonZero of a constant (folded), and the refusals of the ops
whose output shape depends on the data (NonMaxSuppression, Unique, NonZero of a runtime tensor):
tessera compiles static shapes, so their results cannot be laid out ahead of the run.
"""
from __future__ import annotations

import numpy as np

from ...ir.dtype import numpy_dtype
from ...ops._common import normalize_axis
from . import converter


def _ints(a) -> list:
    return [int(x) for x in np.asarray(a).reshape(-1)]


@converter("BitCast", since=26)
def _bitcast(ctx):
    x = ctx.input(0)
    to = ctx.attr("to")
    if to is None:
        ctx.unsupported("BitCast needs the 'to' attribute")
    return ctx.op("reinterpret", x, dtype=ctx.dtype(int(to)))


@converter("Det", since=11)
def _det(ctx):
    x = ctx.input(0)
    if x.type.ndim < 2 or not isinstance(x.type.shape[-1], int) or x.type.shape[-1] != x.type.shape[-2]:
        ctx.unsupported(f"input {x.type} must be (..., n, n) with a static n")
    return ctx.op("det", x)


@converter("CenterCropPad", since=18)
def _center_crop_pad(ctx):
    x = ctx.input(0)
    shape = _ints(ctx.const_input(1))
    nd = x.type.ndim
    axes = ctx.attr("axes")
    axes = list(range(nd)) if axes is None else [normalize_axis("CenterCropPad", a, nd) for a in axes]
    if len(axes) != len(shape):
        ctx.unsupported(f"shape {shape} has {len(shape)} entries for axes {axes}")
    begin, end, crop_axes = [], [], []
    pads = [[0, 0] for _ in range(nd)]
    for a, want in zip(axes, shape):
        have = x.type.shape[a]
        if not isinstance(have, int):
            if have == want:
                continue
            ctx.unsupported(f"axis {a} of {x.type} is symbolic; it cannot be cropped or padded to {want}")
        if want < 0:
            ctx.unsupported(f"negative target extent {want} for axis {a}")
        if want < have:                 # crop: the larger half of the excess goes at the end
            start = (have - want) // 2
            begin.append(start)
            end.append(start + want)
            crop_axes.append(a)
        elif want > have:               # pad with zeros: the larger half at the end
            pads[a] = [(want - have) // 2, want - have - (want - have) // 2]
    if crop_axes:
        x = ctx.op("strided_slice", x, begin=tuple(begin), end=tuple(end), axes=tuple(crop_axes))
    if any(p != [0, 0] for p in pads):
        dt = str(x.type.dtype)
        value = False if dt == "bool" else 0.0 if dt.startswith(("float", "bfloat")) else 0
        x = ctx.op("nn.pad", x, pad_width=tuple(tuple(p) for p in pads), pad_mode="constant", pad_value=value)
    return x


@converter("MaxUnpool", since=9)
def _max_unpool(ctx):
    """Y = zeros; Y.flat[indices] = X over the shape MaxPool had (from kernel, strides and pads),
    then zero-padded at the end of each spatial axis to output_shape when that is given."""
    x, idx = ctx.input(0), ctx.input(1)
    if not x.type.is_static:
        ctx.unsupported(f"input {x.type} must have a static shape (the output is scattered into zeros)")
    if idx.type.shape != x.type.shape:
        ctx.unsupported(f"indices {idx.type} must have the shape of X {x.type}")
    nd = x.type.ndim - 2
    kernel = ctx.attr("kernel_shape")
    if kernel is None or len(kernel) != nd:
        ctx.unsupported(f"kernel_shape {kernel} must have {nd} entries")
    strides = [int(s) for s in (ctx.attr("strides") or [1] * nd)]
    pads = [int(p) for p in (ctx.attr("pads") or [0] * (2 * nd))]
    inferred = list(x.type.shape[:2]) + [(x.type.shape[2 + d] - 1) * strides[d] - (pads[d] + pads[nd + d]) + int(kernel[d])
                                         for d in range(nd)]
    if any(s <= 0 for s in inferred):
        ctx.unsupported(f"kernel {list(kernel)}, strides {strides} and pads {pads} give the empty shape {inferred}")
    total = int(np.prod(inferred))
    if str(idx.type.dtype) != "int64":
        idx = ctx.op("cast", idx, dtype="int64")
    flat = ctx.const(np.zeros(total, numpy_dtype(x.type.dtype)), "zeros")
    y = ctx.op("scatter_elements", flat, ctx.op("reshape", idx, newshape=(-1,)), ctx.op("reshape", x, newshape=(-1,)),
               axis=0)
    y = ctx.op("reshape", y, newshape=tuple(inferred))
    if ctx.has_input(2):
        out = _ints(ctx.const_input(2))
        if len(out) != len(inferred) or any(o < i for o, i in zip(out, inferred)):
            ctx.unsupported(f"output_shape {out} must not be smaller than the unpooled shape {inferred}")
        if out != inferred:
            dt = str(x.type.dtype)
            y = ctx.op("nn.pad", y, pad_width=tuple((0, o - i) for o, i in zip(out, inferred)), pad_mode="constant",
                       pad_value=0.0 if dt.startswith(("float", "bfloat")) else 0)
    return y


@converter("NonZero", since=9)
def _nonzero(ctx):
    if ctx.is_const(0):
        a = np.asarray(ctx.const_input(0))
        return ctx.const(np.stack(np.nonzero(a)).astype(np.int64).reshape(a.ndim, -1), "nonzero")
    ctx.unsupported("the output shape depends on the input's values (how many are nonzero); tessera compiles "
                    "static shapes — freeze the input with const_inputs to fold it")


def _data_dependent(what):
    def convert(ctx):
        ctx.unsupported(f"the output shape depends on the input's values ({what}); tessera compiles static "
                        f"shapes")

    return convert


converter("NonMaxSuppression", since=10)(_data_dependent("how many boxes are selected"))
converter("Unique", since=11)(_data_dependent("how many distinct values there are"))
