"""ONNX converters of the remaining small ops: BitCast (reinterpret), Det, CenterCropPad (slice and
pad), MaxUnpool (a scatter into zeros), NonZero of a constant (folded), SwiGLU, TensorScatter,
CausalConvWithState (concat + depthwise conv1d + SiLU), and the refusals of the ops
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


# ---------------------------------------------------------------------------------------------
# SwiGLU, TensorScatter, CausalConvWithState (the LLM building blocks of recent opsets)
# ---------------------------------------------------------------------------------------------
@converter("SwiGLU", since=28)
def _swiglu(ctx):
    """Swish_alpha(A) * B = A * sigmoid(alpha * A) * B, as the reference rounds it."""
    a, b = ctx.input(0), ctx.input(1)
    if a.type != b.type:
        ctx.unsupported(f"A {a.type} and B {b.type} must have one shape and dtype (SwiGLU does not broadcast)")
    alpha = float(ctx.attr("alpha", 1.0))
    scaled = a if alpha == 1.0 else ctx.op("multiply", a, ctx.const(np.array(alpha, numpy_dtype(a.type.dtype)), "alpha"))
    return ctx.op("multiply", ctx.op("multiply", a, ctx.op("sigmoid", scaled)), b)


@converter("TensorScatter", since=24)
def _tensor_scatter(ctx):
    past, upd = ctx.input(0), ctx.input(1)
    w = ctx.input(2, optional=True)
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        ctx.unsupported(f"mode={mode!r}")
    ins = [past, upd] + ([w] if w is not None else [])
    return ctx.op("tensor_scatter", *ins, axis=int(ctx.attr("axis", -2)), mode=mode)


@converter("CausalConvWithState", since=27)
def _causal_conv_with_state(ctx):
    """concat(past_state or zeros, input) along time, a depthwise valid conv1d (+ bias), SiLU when
    asked; present_state is the last k-1 steps of the concatenation."""
    x, w = ctx.input(0), ctx.input(1)
    bias, past = ctx.input(2, optional=True), ctx.input(3, optional=True)
    act = ctx.attr("activation", "none")
    if act not in ("none", "silu", "swish"):
        ctx.unsupported(f"activation={act!r} (ONNX defines none, silu and swish)")
    if x.type.ndim != 3 or w.type.ndim != 3 or w.type.shape[1] != 1:
        ctx.unsupported(f"input {x.type} must be (B, C, L) and weight {w.type} (C, 1, k)")
    batch, ch, _ = x.type.shape
    k = w.type.shape[2]
    if not isinstance(k, int) or not isinstance(ch, int) or w.type.shape[0] != ch:
        ctx.unsupported(f"weight {w.type} must be ({ch}, 1, k) with a static k")
    dt = numpy_dtype(x.type.dtype)
    if past is None:
        if not isinstance(batch, int):
            ctx.unsupported("a symbolic batch without past_state (the zero state needs the batch size)")
        past = ctx.const(np.zeros((batch, ch, k - 1), dt), "zero_state")
    padded = ctx.op("concatenate", past, x, axis=2) if k > 1 else x
    y = ctx.op("nn.conv1d", padded, w, groups=ch)
    if bias is not None:
        y = ctx.op("add", y, ctx.op("reshape", bias, newshape=(ch, 1)))
    if act in ("silu", "swish"):
        y = ctx.op("multiply", y, ctx.op("sigmoid", y))
    if not ctx.has_output(1):
        return (y,)
    total = padded.type.shape[2]
    if k == 1:                                  # no state to carry: an empty one
        if not isinstance(batch, int):
            ctx.unsupported("an empty present_state of a symbolic batch")
        return y, ctx.const(np.zeros((batch, ch, 0), dt), "present_state")
    state = ctx.op("strided_slice", padded, begin=(-(k - 1),), end=(total if isinstance(total, int) else 2**62,),
                   axes=(2,))
    return y, state
