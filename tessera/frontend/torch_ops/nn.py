"""Neural-network ATen ops: convolutions, pooling, normalizations, softmax, padding, embedding,
attention."""
from __future__ import annotations

import math

import numpy as np

from ...ir.dtype import DataType
from . import TorchTensor, converter
from ._layout import axis as value_axis


def _ints(ctx, name, n: int) -> tuple:
    v = ctx.arg(name)
    v = [v] if isinstance(v, int) else list(v)
    if len(v) == 1 and n > 1:
        v = v * n
    if len(v) != n or not all(isinstance(x, int) for x in v):
        ctx.unsupported(f"{name}={ctx.arg(name)!r} must be {n} ints")
    return tuple(int(x) for x in v)


def _channel_bias(ctx, y, bias, spatial: int):
    """y + bias broadcast over NC{spatial...}."""
    b = ctx.op("reshape", bias, newshape=(-1,) + (1,) * spatial)
    return ctx.op("add", y, b)


# ---------------------------------------------------------------------------------------------
# convolution
# ---------------------------------------------------------------------------------------------
@converter("aten.convolution.default", "aten.conv2d.default", "aten.conv1d.default", "aten.conv3d.default")
def _convolution(ctx):
    x, w = ctx.input("input"), ctx.input("weight")
    nd = len(w.shape) - 2
    if nd not in (1, 2, 3) or len(x.shape) != nd + 2:
        ctx.unsupported(f"a convolution of {len(x.shape)}-d input with a {len(w.shape)}-d weight (batched 1-3 "
                        f"spatial dimensions only)")
    strides, dilation = _ints(ctx, "stride", nd), _ints(ctx, "dilation", nd)
    padding = ctx.arg("padding")
    if isinstance(padding, str):
        ctx.unsupported(f"padding={padding!r}: export lowers it to numbers")
    padding = _ints(ctx, "padding", nd)
    groups = int(ctx.arg("groups"))
    transposed = bool(ctx.arg("transposed")) if ctx.target == "aten.convolution.default" else False
    if transposed:
        out_pad = _ints(ctx, "output_padding", nd)
        y = ctx.op(f"nn.conv{nd}d_transpose", x, w, strides=strides, padding=padding + padding, dilation=dilation,
                   groups=groups, output_padding=out_pad)
    else:
        y = ctx.op(f"nn.conv{nd}d", x, w, strides=strides, padding=padding + padding, dilation=dilation,
                   groups=groups)
    if ctx.has_arg("bias"):
        y = _channel_bias(ctx, y, ctx.input("bias"), nd)
    return y


# ---------------------------------------------------------------------------------------------
# pooling
# ---------------------------------------------------------------------------------------------
@converter("aten.max_pool2d_with_indices.default", "aten.max_pool3d_with_indices.default",
           "aten.max_pool1d_with_indices.default")
def _max_pool_with_indices(ctx):
    if ctx.used(1):
        ctx.unsupported("the indices of a max pool are read (tessera's pools return the maxima only)")
    return _max_pool(ctx), None


def _window(ctx, kind: str):
    """(input, spatial rank, kernel, strides, padding (begin..., end...)) of a pooling node."""
    x = ctx.input("self")
    nd = len(x.shape) - 2
    if nd not in (1, 2, 3):
        ctx.unsupported(f"{kind} pooling of a {len(x.shape)}-d tensor (batched NC... input only)")
    kernel = _ints(ctx, "kernel_size", nd)
    stride = _ints(ctx, "stride", nd) if ctx.arg("stride") else kernel
    padding = _ints(ctx, "padding", nd)
    return x, nd, kernel, stride, padding + padding


@converter("aten.max_pool2d.default", "aten.max_pool1d.default", "aten.max_pool3d.default")
def _max_pool(ctx):
    x, nd, kernel, stride, padding = _window(ctx, "max")
    return ctx.op(f"nn.max_pool{nd}d", x, pool_size=kernel, strides=stride, padding=padding,
                  dilation=_ints(ctx, "dilation", nd), ceil_mode=bool(ctx.arg("ceil_mode")))


@converter("aten.avg_pool2d.default", "aten.avg_pool1d.default", "aten.avg_pool3d.default")
def _avg_pool(ctx):
    if ctx.has_arg("divisor_override"):
        ctx.unsupported("divisor_override")
    x, nd, kernel, stride, padding = _window(ctx, "average")
    return ctx.op(f"nn.avg_pool{nd}d", x, pool_size=kernel, strides=stride, padding=padding,
                  ceil_mode=bool(ctx.arg("ceil_mode")), count_include_pad=bool(ctx.arg("count_include_pad")))


@converter("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default",
           "aten._adaptive_avg_pool1d.default", "aten.adaptive_avg_pool1d.default")
def _adaptive_avg_pool(ctx):
    x = ctx.input("self")
    out = list(ctx.arg("output_size"))
    nd = len(out)
    spatial = x.shape[-nd:]
    if len(x.shape) != nd + 2 or not all(isinstance(d, int) for d in spatial):
        ctx.unsupported(f"adaptive pooling needs static spatial extents (NC + {nd} spatial), got {x.type}")
    if all(o == 1 for o in out):
        return ctx.op("mean", x, axis=tuple(range(2, 2 + nd)), keepdims=True)
    if any(s % o for s, o in zip(spatial, out)):
        ctx.unsupported(f"adaptive pooling from {tuple(spatial)} to {tuple(out)}: windows of unequal size")
    kernel = tuple(s // o for s, o in zip(spatial, out))
    return ctx.op(f"nn.avg_pool{nd}d", x, pool_size=kernel, strides=kernel, padding=(0,) * (2 * nd))


# ---------------------------------------------------------------------------------------------
# normalization
# ---------------------------------------------------------------------------------------------
def _affine(ctx, name, n, dtype, fill):
    """Argument `name` (an optional per-channel weight or bias), or a constant of `fill`."""
    if ctx.has_arg(name):
        return ctx.input(name)
    return ctx.const(np.full((n,), fill, DataType(dtype).numpy()), name)


@converter("aten._native_batch_norm_legit_no_training.default")
def _batch_norm_inference(ctx):
    x = ctx.input("input")
    c = x.shape[1]
    if not isinstance(c, int):
        ctx.unsupported("batch norm over a symbolic channel count")
    dt = str(x.dtype)
    gamma, beta = _affine(ctx, "weight", c, dt, 1.0), _affine(ctx, "bias", c, dt, 0.0)
    y = ctx.op("nn.batch_norm", x, gamma, beta, ctx.input("running_mean"), ctx.input("running_var"), axis=1,
               epsilon=float(ctx.arg("eps")))
    if ctx.used(1) or ctx.used(2):
        ctx.unsupported("the saved statistics of an inference batch norm are read")
    return y, None, None


@converter("aten._native_batch_norm_legit.default", "aten.native_batch_norm.default",
           "aten._native_batch_norm_legit_functional.default")
def _batch_norm_training(ctx):
    ctx.unsupported("batch norm in training mode (normalizing by the batch's statistics): tessera compiles "
                    "inference; call model.eval() first")


@converter("aten.native_layer_norm.default")
def _layer_norm(ctx):
    t = ctx.tensor("input")
    shape = list(ctx.arg("normalized_shape"))
    n = len(shape)
    for d in range(t.ndim - n, t.ndim):
        value_axis(ctx, t, d, "normalized dimension")
    x = t.value
    if ctx.used(1) or ctx.used(2):
        ctx.unsupported("the mean and rstd outputs of layer norm are read (tessera returns the normalized tensor)")
    dt = str(x.dtype)
    w = ctx.input("weight") if ctx.has_arg("weight") else ctx.const(np.ones(shape, DataType(dt).numpy()), "weight")
    ins = [x, w] + ([ctx.input("bias")] if ctx.has_arg("bias") else [])
    y = ctx.op("nn.layer_norm", *ins, axis=len(x.shape) - n, epsilon=float(ctx.arg("eps")))
    return TorchTensor(y, t.parts), None, None


@converter("aten.native_group_norm.default")
def _group_norm(ctx):
    x = ctx.input("input")
    c = int(ctx.arg("C"))
    dt = str(x.dtype)
    gamma, beta = _affine(ctx, "weight", c, dt, 1.0), _affine(ctx, "bias", c, dt, 0.0)
    if ctx.used(1) or ctx.used(2):
        ctx.unsupported("the mean and rstd outputs of group norm are read")
    y = ctx.op("nn.group_norm", x, gamma, beta, num_groups=int(ctx.arg("group")), epsilon=float(ctx.arg("eps")))
    return y, None, None


@converter("aten._softmax.default", "aten.softmax.int", "aten._log_softmax.default", "aten.log_softmax.int")
def _softmax(ctx):
    t = ctx.tensor("self")
    ax = value_axis(ctx, t, ctx.arg("dim"), "the softmax dimension")
    dt = ctx.out_dtype()
    x = ctx.cast(t.value, dt)
    op = "nn.log_softmax" if "log_softmax" in ctx.target else "nn.softmax"
    return TorchTensor(ctx.op(op, x, axis=ax), t.parts)


# ---------------------------------------------------------------------------------------------
# padding, embedding
# ---------------------------------------------------------------------------------------------
@converter("aten.constant_pad_nd.default")
def _constant_pad(ctx):
    x = ctx.input("self")
    pad = [int(p) for p in ctx.arg("pad")]
    rank = len(x.shape)
    if len(pad) % 2 or len(pad) // 2 > rank:
        ctx.unsupported(f"pad {pad} for a rank-{rank} tensor")
    widths = [[0, 0] for _ in range(rank)]
    for i in range(len(pad) // 2):
        widths[rank - 1 - i] = [pad[2 * i], pad[2 * i + 1]]
    if any(p < 0 for p in pad):
        # negative padding crops: a slice of the (non-negatively) padded tensor
        pos = [[max(b, 0), max(a, 0)] for b, a in widths]
        y = ctx.op("nn.pad", x, pad_width=tuple(map(tuple, pos)), pad_value=float(ctx.arg("value")))
        begin = [max(-b, 0) for b, _ in widths]
        end = [d + b + a - max(-a, 0) if isinstance(d, int) else None for d, (b, a) in zip(x.shape, pos)]
        if None in end:
            ctx.unsupported("negative padding of a symbolic dimension")
        return ctx.op("strided_slice", y, begin=tuple(begin), end=tuple(end))
    return ctx.op("nn.pad", x, pad_width=tuple(map(tuple, widths)), pad_value=float(ctx.arg("value")))


@converter("aten.embedding.default")
def _embedding(ctx):
    w = ctx.input("weight")
    idx = ctx.input("indices")
    return ctx.op("take", w, idx, axis=0)


# ---------------------------------------------------------------------------------------------
# attention
# ---------------------------------------------------------------------------------------------
@converter("aten.scaled_dot_product_attention.default")
def _sdpa(ctx):
    q, k, v = ctx.input("query"), ctx.input("key"), ctx.input("value")
    if float(ctx.arg("dropout_p")) != 0.0:
        ctx.unsupported("dropout_p > 0 (dropout in attention is training)")
    if len(q.shape) != 4 or len(k.shape) != 4 or len(v.shape) != 4:
        ctx.unsupported(f"attention of rank {len(q.shape)} (tessera's takes (batch, heads, seq, dim))")
    hq, hk = q.shape[1], k.shape[1]
    if hq != hk and not bool(ctx.arg("enable_gqa")):
        ctx.unsupported(f"{hq} query heads and {hk} key heads without enable_gqa")
    return _attention(ctx, q, k, v, ctx.input("attn_mask") if ctx.has_arg("attn_mask") else None,
                      bool(ctx.arg("is_causal")), ctx.arg("scale"))


@converter("aten._scaled_dot_product_flash_attention_for_cpu.default")
def _sdpa_flash_cpu(ctx):
    q, k, v = ctx.input("query"), ctx.input("key"), ctx.input("value")
    if float(ctx.arg("dropout_p")) != 0.0:
        ctx.unsupported("dropout_p > 0 (dropout in attention is training)")
    if ctx.used(1):
        ctx.unsupported("the logsumexp output of flash attention is read")
    mask = ctx.input("attn_mask") if ctx.has_arg("attn_mask") else None
    return _attention(ctx, q, k, v, mask, bool(ctx.arg("is_causal")), ctx.arg("scale")), None


def _attention(ctx, q, k, v, mask, causal: bool, scale):
    if causal and q.shape[2] != k.shape[2]:
        ctx.unsupported(f"a causal mask with {q.shape[2]} queries and {k.shape[2]} keys (tessera's is_causal "
                        f"aligns them at the top left, as torch does, only where they are equally many)")
    if causal and mask is not None:
        ctx.unsupported("both attn_mask and is_causal (torch refuses it too)")
    extras = [mask] if mask is not None else []
    d = q.shape[3]
    if scale is None and not isinstance(d, int):
        ctx.unsupported("a symbolic head size without an explicit scale")
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    return ctx.op("nn.attention", q, k, v, *extras, has_mask=mask is not None, scale=scale, is_causal=causal)
