"""ONNX converters of the nn families: convolution, Gemm/MatMul, pooling, normalization, softmax,
TopK, Resize/Upsample.

ONNX's auto_pad is resolved to explicit (begin..., end...) padding here; Conv's bias, Gemm's
alpha/beta/C are composed with the broadcast ops (constants folded in numpy where they are known);
pre-13 Softmax's "coerce to 2-D" semantics are built with reshapes.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.dtype import numpy_dtype
from . import converter


def _ints(a) -> list:
    return [int(x) for x in np.asarray(a).reshape(-1)]


def _np_dtype(v):
    return numpy_dtype(v.type.dtype)


def static_ints(ctx, v, axes, what):
    """The static sizes of `v`'s `axes` (a ShapeError naming `what` if one is symbolic); nn and quantize."""
    dims = [v.type.shape[a] for a in axes]
    if any(not isinstance(d, int) for d in dims):
        ctx.unsupported(f"the {what} of input {v.type} must be static")
    return dims


def _scalar_const(ctx, value, like):
    return ctx.const(np.array(value, _np_dtype(like)), "scalar")


# ---------------------------------------------------------------------------------------------
# padding
# ---------------------------------------------------------------------------------------------
def _auto_pad(ctx, spatial, kernel, strides, dilations):
    """Explicit (begin..., end...) pads from the node's pads / auto_pad attributes."""
    nd = len(spatial)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", ""):
        pads = ctx.attr("pads")
        if pads is None:
            return (0,) * (2 * nd)
        pads = [int(p) for p in pads]
        if len(pads) != 2 * nd:
            ctx.unsupported(f"pads {pads} must have {2 * nd} entries")
        return tuple(pads)
    if auto_pad == "VALID":
        return (0,) * (2 * nd)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        ctx.unsupported(f"auto_pad={auto_pad!r}")
    begin, end = [], []
    for k in range(nd):
        if not isinstance(spatial[k], int):
            ctx.unsupported(f"auto_pad={auto_pad} needs static spatial dimensions")
        out = -(-spatial[k] // strides[k])
        total = max(0, (out - 1) * strides[k] + (kernel[k] - 1) * dilations[k] + 1 - spatial[k])
        small = total // 2
        if auto_pad == "SAME_UPPER":
            begin.append(small)
            end.append(total - small)
        else:
            begin.append(total - small)
            end.append(small)
    return tuple(begin + end)


def window_attrs(ctx, x, kernel=None):
    """The pooling/conv window attributes (kernel, strides, pads, dilations) of an ONNX node over `x`."""
    nd = x.type.ndim - 2
    if nd < 1:
        ctx.unsupported(f"input {x.type} must be (N, C, spatial...)")
    kernel = kernel if kernel is not None else ctx.attr("kernel_shape")
    if kernel is None:
        ctx.unsupported("kernel_shape is required")
    kernel = [int(k) for k in kernel]
    if len(kernel) != nd:
        ctx.unsupported(f"kernel_shape {kernel} must have {nd} entries for input {x.type}")
    strides = [int(s) for s in (ctx.attr("strides") or [1] * nd)]
    dilations = [int(d) for d in (ctx.attr("dilations") or [1] * nd)]
    pads = _auto_pad(ctx, list(x.type.shape[2:]), kernel, strides, dilations)
    return nd, kernel, tuple(strides), tuple(dilations), pads


# ---------------------------------------------------------------------------------------------
# Conv, ConvTranspose, ConvInteger
# ---------------------------------------------------------------------------------------------
@converter("Conv")
def _conv(ctx):
    x, w = ctx.input(0), ctx.input(1)
    if w.type.ndim != x.type.ndim:
        ctx.unsupported(f"weight {w.type} and input {x.type} must have the same rank")
    kernel = ctx.attr("kernel_shape") or static_ints(ctx, w, range(2, w.type.ndim), "kernel")
    nd, kernel, strides, dilations, pads = window_attrs(ctx, x, kernel)
    if nd > 3:
        ctx.unsupported(f"{nd}-d convolution (tessera has 1-d, 2-d and 3-d)")
    y = ctx.op(f"nn.conv{nd}d", x, w, strides=strides, padding=pads, dilation=dilations,
               groups=int(ctx.attr("group", 1)))
    b = ctx.input(2, optional=True)
    if b is not None:
        y = _bias_add(ctx, y, b, 2)
    return y


def dequantized(v) -> bool:
    """Whether v is a DequantizeLinear of something (a QDQ model's weight or bias): such a constant is
    left as the node, so that graph/passes/fake_quantization_to_integer sees the integers behind it
    (fold_constant evaluates it where that pass does not take it)."""
    return v.producer is not None and v.producer.op == "qnn.dequantize"


def _bias_add(ctx, y, b, index):
    nd = y.type.ndim - 2
    if ctx.is_const(index) and not dequantized(b):
        arr = np.asarray(ctx.const_input(index))
        return ctx.op("add", y, ctx.const(arr.reshape((-1,) + (1,) * nd), "bias"))
    return ctx.op("add", y, ctx.op("reshape", b, newshape=(b.type.shape[0],) + (1,) * nd))


@converter("ConvTranspose")
def _conv_transpose(ctx):
    x, w = ctx.input(0), ctx.input(1)
    nd = x.type.ndim - 2
    if nd < 1 or nd > 3:
        ctx.unsupported(f"{nd}-d transposed convolution (tessera has 1-d, 2-d and 3-d)")
    kernel = [int(k) for k in (ctx.attr("kernel_shape") or static_ints(ctx, w, range(2, w.type.ndim), "kernel"))]
    strides = [int(s) for s in (ctx.attr("strides") or [1] * nd)]
    dilations = [int(d) for d in (ctx.attr("dilations") or [1] * nd)]
    out_pad = [int(p) for p in (ctx.attr("output_padding") or [0] * nd)]
    group = int(ctx.attr("group", 1))
    spatial = static_ints(ctx, x, range(2, nd + 2), "spatial dimensions")
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    output_shape = ctx.attr("output_shape")
    pads = ctx.attr("pads")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape is not None:
            output_shape = [int(s) for s in output_shape][-nd:]
        else:
            output_shape = [spatial[k] * strides[k] for k in range(nd)]
        begin, end = [], []
        for k in range(nd):
            total = strides[k] * (spatial[k] - 1) + out_pad[k] + (kernel[k] - 1) * dilations[k] + 1 \
                - output_shape[k]
            if total < 0:  # the output is longer than the kernel reaches: extra zeros at the end
                out_pad[k] -= total
                total = 0
            if auto_pad == "SAME_UPPER":
                begin.append(total // 2)
                end.append(total - total // 2)
            else:
                begin.append(total - total // 2)
                end.append(total // 2)
        pads = tuple(begin + end)
    elif auto_pad == "VALID" or pads is None:
        pads = (0,) * (2 * nd)
    else:
        pads = tuple(int(p) for p in pads)
    y = ctx.op(f"nn.conv{nd}d_transpose", x, w, strides=tuple(strides), padding=pads, dilation=tuple(dilations),
               groups=group, output_padding=tuple(out_pad))
    b = ctx.input(2, optional=True)
    if b is not None:
        y = _bias_add(ctx, y, b, 2)
    return y


@converter("ConvInteger", since=10)
def _conv_integer(ctx):
    x, w = ctx.input(0), ctx.input(1)
    kernel = ctx.attr("kernel_shape") or static_ints(ctx, w, range(2, w.type.ndim), "kernel")
    nd, kernel, strides, dilations, pads = window_attrs(ctx, x, kernel)
    xz = ctx.input(2, optional=True)
    wz = ctx.input(3, optional=True)
    xz = xz if xz is not None else ctx.const(np.zeros((), _np_dtype(x)), "x_zero_point")
    wz = wz if wz is not None else ctx.const(np.zeros((), _np_dtype(w)), "w_zero_point")
    return ctx.op("nn.conv_integer", x, w, xz, wz, strides=strides, padding=pads, dilation=dilations,
                  groups=int(ctx.attr("group", 1)))


# ---------------------------------------------------------------------------------------------
# Gemm, MatMul, MatMulInteger
# ---------------------------------------------------------------------------------------------
@converter("Gemm")
def _gemm(ctx):
    a, b = ctx.input(0), ctx.input(1)
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    trans_a, trans_b = bool(ctx.attr("transA", 0)), bool(ctx.attr("transB", 0))
    if a.type.ndim != 2 or b.type.ndim != 2:
        ctx.unsupported(f"Gemm takes 2-d A and B, got {a.type} and {b.type}")
    dt = _np_dtype(a)
    if ctx.is_const(1) and dequantized(b) and not trans_a:
        # a quantized weight stays DQ(w) (transposed by a node): the integer pass reads its integers
        y = ctx.op("nn.matmul", a, ctx.op("transpose", b, axes=(1, 0)) if trans_b else b)
    elif ctx.is_const(1):
        # a constant B is stored (K, N): the layout whose rows the matmul schedule vectorizes
        w = np.asarray(ctx.const_input(1))
        w = w.T if trans_b else w
        if alpha != 1.0:
            w = (w.astype(np.float64) * alpha).astype(w.dtype)
            alpha = 1.0
        wv = ctx.const(np.ascontiguousarray(w), "weight")
        y = ctx.op("nn.matmul", a, wv, transpose_a=trans_a)
    else:
        y = ctx.op("nn.matmul", a, b, transpose_a=trans_a, transpose_b=trans_b)
    if alpha != 1.0:
        y = ctx.op("multiply", y, ctx.const(np.array(alpha, dt), "alpha"))
    c = ctx.input(2, optional=True)
    if c is None or beta == 0.0:
        return y
    if ctx.is_const(2) and not (dequantized(c) and beta == 1.0):
        carr = np.asarray(ctx.const_input(2))
        if beta != 1.0:
            carr = (carr.astype(np.float64) * beta).astype(carr.dtype)
        cv = ctx.const(carr, "bias")
    else:
        cv = c if beta == 1.0 else ctx.op("multiply", c, ctx.const(np.array(beta, dt), "beta"))
    return ctx.op("add", y, cv)


@converter("MatMul")
def _matmul(ctx):
    return ctx.op("nn.matmul", ctx.input(0), ctx.input(1))


@converter("MatMulInteger", since=10)
def _matmul_integer(ctx):
    a, b = ctx.input(0), ctx.input(1)
    az = ctx.input(2, optional=True)
    bz = ctx.input(3, optional=True)
    az = az if az is not None else ctx.const(np.zeros((), _np_dtype(a)), "a_zero_point")
    bz = bz if bz is not None else ctx.const(np.zeros((), _np_dtype(b)), "b_zero_point")
    return ctx.op("nn.matmul_integer", a, b, az, bz)


# ---------------------------------------------------------------------------------------------
# normalization
# ---------------------------------------------------------------------------------------------
@converter("BatchNormalization")
def _batch_norm(ctx):
    x = ctx.input(0)
    eps = float(ctx.attr("epsilon", 1e-5))
    params = [ctx.input(i) for i in range(1, 5)]
    training = bool(ctx.attr("training_mode", 0)) if ctx.opset >= 14 else \
        (ctx.opset < 7 and not ctx.attr("is_test", 0)) or any(ctx.has_output(i) for i in range(1, 5))
    if ctx.opset < 9 and not int(ctx.attr("spatial", 1)) and x.type.ndim > 2:
        ctx.unsupported("spatial=0 (per-activation statistics)")
    if not training:
        return ctx.op("nn.batch_norm", x, *params, axis=1, epsilon=eps)
    if ctx.opset < 14:
        ctx.unsupported("training-mode outputs (mean, var, saved_mean, saved_var) before opset 14")
    y, rm, rv = ctx.op("nn.batch_norm_training", x, *params, axis=1, epsilon=eps,
                       momentum=float(ctx.attr("momentum", 0.9)))
    return y, rm, rv


@converter("InstanceNormalization")
def _instance_norm(ctx):
    return ctx.op("nn.instance_norm", ctx.input(0), ctx.input(1), ctx.input(2),
                  epsilon=float(ctx.attr("epsilon", 1e-5)))


def _stash_dtype(ctx):
    stash = int(ctx.attr("stash_type", 1))
    return ctx.dtype(stash)


@converter("LayerNormalization", since=17)
def _layer_norm(ctx):
    x, scale = ctx.input(0), ctx.input(1)
    bias = ctx.input(2, optional=True)
    stats = ctx.has_output(1) or ctx.has_output(2)
    ins = [x, scale] + ([bias] if bias is not None else [])
    out = ctx.op("nn.layer_norm", *ins, axis=int(ctx.attr("axis", -1)), epsilon=float(ctx.attr("epsilon", 1e-5)),
                 return_stats=stats, stats_dtype=_stash_dtype(ctx) if stats else "")
    return out if stats else (out, None, None)


@converter("GroupNormalization", since=18)
def _group_norm(ctx):
    x = ctx.input(0)
    g = int(ctx.attr("num_groups"))
    scale, bias = ctx.input(1), ctx.input(2)
    if ctx.opset < 21:  # scale and bias are per group: the op takes per-group or per-channel ones
        for v in (scale, bias):
            if v.type.ndim != 1 or v.type.shape[0] != g:
                ctx.unsupported(f"opset {ctx.opset} GroupNormalization takes scale/bias of {g} entries, got {v.type}")
    return ctx.op("nn.group_norm", x, scale, bias, num_groups=g, epsilon=float(ctx.attr("epsilon", 1e-5)))


@converter("RMSNormalization", since=23)
def _rms_norm(ctx):
    return ctx.op("nn.rms_norm", ctx.input(0), ctx.input(1), axis=int(ctx.attr("axis", -1)),
                  epsilon=float(ctx.attr("epsilon", 1e-5)))


@converter("LpNormalization")
def _lp_normalization(ctx):
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        ctx.unsupported(f"p={p} (ONNX defines p = 1 or 2)")
    return ctx.op("nn.lp_normalize", ctx.input(0), axis=int(ctx.attr("axis", -1)), p=p)


@converter("MeanVarianceNormalization", since=9)
def _mvn(ctx):
    axes = ctx.attr("axes", [0, 2, 3])
    return ctx.op("nn.mean_variance_normalization", ctx.input(0), axes=tuple(int(a) for a in axes))


@converter("LRN")
def _lrn(ctx):
    size = ctx.attr("size")
    if size is None:
        ctx.unsupported("size is required")
    return ctx.op("nn.lrn", ctx.input(0), size=int(size), axis=1, alpha=float(ctx.attr("alpha", 1e-4)),
                  beta=float(ctx.attr("beta", 0.75)), bias=float(ctx.attr("bias", 1.0)))


# ---------------------------------------------------------------------------------------------
# pooling
# ---------------------------------------------------------------------------------------------
def _pool_common(ctx):
    x = ctx.input(0)
    nd, kernel, strides, dilations, pads = window_attrs(ctx, x)
    ceil_mode = bool(ctx.attr("ceil_mode", 0))
    return x, nd, dict(pool_size=tuple(kernel), strides=strides, dilation=dilations, padding=pads,
                       ceil_mode=ceil_mode)


@converter("MaxPool")
def _max_pool(ctx):
    x, nd, attrs = _pool_common(ctx)
    if ctx.has_output(1):
        return ctx.op("nn.max_pool_with_indices", x, storage_order=int(ctx.attr("storage_order", 0)), **attrs)
    if nd > 3:
        ctx.unsupported(f"{nd}-d max pooling (tessera has 1-d, 2-d and 3-d)")
    return ctx.op(f"nn.max_pool{nd}d", x, **attrs)


@converter("AveragePool")
def _avg_pool(ctx):
    x, nd, attrs = _pool_common(ctx)
    if nd > 3:
        ctx.unsupported(f"{nd}-d average pooling (tessera has 1-d, 2-d and 3-d)")
    return ctx.op(f"nn.avg_pool{nd}d", x, count_include_pad=bool(ctx.attr("count_include_pad", 0)), **attrs)


@converter("LpPool")
def _lp_pool(ctx):
    x, nd, attrs = _pool_common(ctx)
    p = ctx.attr("p", 2)
    return ctx.op("nn.lp_pool", x, p=int(p) if float(p).is_integer() else float(p), **attrs)


@converter("GlobalAveragePool")
def _global_avg_pool(ctx):
    return ctx.op("nn.global_avg_pool", ctx.input(0))


@converter("GlobalMaxPool")
def _global_max_pool(ctx):
    return ctx.op("nn.global_max_pool", ctx.input(0))


# ---------------------------------------------------------------------------------------------
# softmax family
# ---------------------------------------------------------------------------------------------
def _softmax_like(tessera_op):
    def convert(ctx):
        x = ctx.input(0)
        nd = x.type.ndim
        if ctx.opset >= 13:
            return ctx.op(tessera_op, x, axis=int(ctx.attr("axis", -1)))
        axis = int(ctx.attr("axis", 1))
        axis = axis + nd if axis < 0 else axis
        if not 0 <= axis < max(nd, 1):
            ctx.unsupported(f"axis {axis} is out of range for {x.type}")
        if axis == nd - 1:
            return ctx.op(tessera_op, x, axis=-1)
        # opset < 13: the input is coerced to 2-D (prod(shape[:axis]), prod(shape[axis:]))
        tail = x.type.shape[axis:]
        if any(not isinstance(d, int) for d in tail):
            ctx.unsupported(f"axis={axis} of {x.type}: the coerced row length must be static")
        flat = ctx.op("reshape", x, newshape=(-1, int(np.prod(tail, dtype=np.int64))))
        y = ctx.op(tessera_op, flat, axis=1)
        return ctx.op("reshape", y, newshape=tuple(x.type.shape))

    convert.__name__ = f"_convert_{tessera_op.replace('.', '_')}"
    return convert


for _onnx, _op in (("Softmax", "nn.softmax"), ("LogSoftmax", "nn.log_softmax"), ("Hardmax", "nn.hardmax")):
    converter(_onnx)(_softmax_like(_op))


# ---------------------------------------------------------------------------------------------
# TopK
# ---------------------------------------------------------------------------------------------
@converter("TopK")
def _topk(ctx):
    x = ctx.input(0)
    if ctx.opset >= 10:
        k = np.asarray(ctx.const_input(1)).reshape(-1)
        if k.size != 1:
            ctx.unsupported(f"K must hold one value, got shape {k.shape}")
        k = int(k[0])
    else:
        k = int(ctx.attr("k"))
    largest = bool(ctx.attr("largest", 1)) if ctx.opset >= 11 else True
    sorted_ = bool(ctx.attr("sorted", 1)) if ctx.opset >= 11 else True
    v, i = ctx.op("topk", x, k=k, axis=int(ctx.attr("axis", -1)), largest=largest, sorted=sorted_, dtype="int64")
    return v, i


# ---------------------------------------------------------------------------------------------
# Resize, Upsample
# ---------------------------------------------------------------------------------------------
_MODES = {"nearest": "nearest", "linear": "linear", "bilinear": "linear", "trilinear": "linear",
          "cubic": "cubic", "bicubic": "cubic"}


def _legacy_resize(ctx, x, scales, mode):
    """Upsample and Resize-10: asymmetric coordinates; nearest floors when enlarging, ceils when
    shrinking (as onnxruntime's historical behaviour)."""
    method = _MODES.get(mode)
    if method is None or method == "cubic":
        ctx.unsupported(f"mode={mode!r}")
    r = x.type.ndim
    if len(scales) != r:
        ctx.unsupported(f"scales {list(scales)} must have one entry per axis of {x.type}")
    sizes = []
    for d, s in zip(x.type.shape, scales):
        if isinstance(d, str):
            if s != 1.0:
                ctx.unsupported(f"resizing symbolic axis {d!r}")
            sizes.append(d)
        else:
            sizes.append(int(math.floor(d * s)))
    resized = [s for s, d, o in zip(scales, x.type.shape, sizes) if o != d or s != 1.0]
    up = {s >= 1.0 for s in resized}
    if len(up) > 1 and method == "nearest":
        ctx.unsupported("nearest resize that enlarges some axes and shrinks others (legacy rounding differs)")
    nearest_mode = "floor" if (not up or up == {True}) else "ceil"
    return ctx.op("image.resize", x, sizes=tuple(sizes), scales=tuple(float(s) for s in scales), method=method,
                  coordinate_transformation_mode="asymmetric", nearest_mode=nearest_mode)


@converter("Upsample", since=7)
def _upsample_v7(ctx):
    scales = [float(s) for s in (ctx.attr("scales") or [])]
    return _legacy_resize(ctx, ctx.input(0), scales, ctx.attr("mode", "nearest"))


@converter("Upsample", since=9)
def _upsample_v9(ctx):
    scales = [float(s) for s in np.asarray(ctx.const_input(1), np.float32).reshape(-1)]
    return _legacy_resize(ctx, ctx.input(0), scales, ctx.attr("mode", "nearest"))


@converter("Resize", since=10)
def _resize_v10(ctx):
    scales = [float(s) for s in np.asarray(ctx.const_input(1), np.float32).reshape(-1)]
    return _legacy_resize(ctx, ctx.input(0), scales, ctx.attr("mode", "nearest"))


@converter("Resize", since=11)
def _resize(ctx):
    x = ctx.input(0)
    r = x.type.ndim
    shape = list(x.type.shape)
    axes = ctx.attr("axes") if ctx.opset >= 18 else None
    axes = list(range(r)) if axes is None else [int(a) + r if int(a) < 0 else int(a) for a in axes]
    if len(set(axes)) != len(axes) or any(not 0 <= a < r for a in axes):
        ctx.unsupported(f"axes {ctx.attr('axes')} for input {x.type}")
    mode = ctx.attr("coordinate_transformation_mode", "half_pixel")
    method = _MODES.get(ctx.attr("mode", "nearest"))
    if method is None:
        ctx.unsupported(f"mode={ctx.attr('mode')!r}")

    def const_or_empty(i):
        if not ctx.has_input(i):
            return None
        a = np.asarray(ctx.const_input(i))
        return a if a.size else None

    roi = const_or_empty(1)
    scales = const_or_empty(2)
    sizes = const_or_empty(3)
    if (scales is None) == (sizes is None):
        ctx.unsupported("exactly one of scales and sizes must be given")
    scale_of = [1.0] * r
    out = list(shape)
    if scales is not None:
        scales = [float(s) for s in np.asarray(scales, np.float32).reshape(-1)]
        if len(scales) != len(axes):
            ctx.unsupported(f"scales {scales} must have {len(axes)} entries")
        for a, s in zip(axes, scales):
            scale_of[a] = s
            if isinstance(shape[a], str):
                if s != 1.0:
                    ctx.unsupported(f"resizing symbolic axis {shape[a]!r}")
                continue
            out[a] = int(math.floor(np.float64(np.float32(s)) * shape[a]))
    else:
        sizes = _ints(sizes)
        if len(sizes) != len(axes):
            ctx.unsupported(f"sizes {sizes} must have {len(axes)} entries")
        for a in axes:
            if isinstance(shape[a], str):
                ctx.unsupported(f"resizing symbolic axis {shape[a]!r} to given sizes")
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch") if ctx.opset >= 18 else "stretch"
        ratios = {a: sizes[k] / shape[a] for k, a in enumerate(axes)}
        if policy == "stretch":
            for k, a in enumerate(axes):
                out[a], scale_of[a] = sizes[k], ratios[a]
        elif policy in ("not_larger", "not_smaller"):
            s = (min if policy == "not_larger" else max)(ratios.values())
            for a in axes:
                out[a], scale_of[a] = int(s * shape[a] + 0.5), s
        else:
            ctx.unsupported(f"keep_aspect_ratio_policy={policy!r}")
    full_roi = ()
    if mode == "tf_crop_and_resize":
        if roi is None:
            ctx.unsupported("tf_crop_and_resize needs the roi input")
        roi = [float(v) for v in np.asarray(roi, np.float64).reshape(-1)]
        if len(roi) != 2 * len(axes):
            ctx.unsupported(f"roi {roi} must have {2 * len(axes)} entries")
        lo, hi = [0.0] * r, [1.0] * r
        for k, a in enumerate(axes):
            lo[a], hi[a] = roi[k], roi[len(axes) + k]
        full_roi = tuple(lo + hi)
    if mode not in ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_crop_and_resize", "tf_half_pixel_for_nn"):
        ctx.unsupported(f"coordinate_transformation_mode={mode!r}")
    return ctx.op("image.resize", x, sizes=tuple(out), scales=tuple(scale_of), roi=full_roi, method=method,
                  coordinate_transformation_mode=mode,
                  nearest_mode=ctx.attr("nearest_mode", "round_prefer_floor"),
                  cubic_coeff_a=float(ctx.attr("cubic_coeff_a", -0.75)),
                  exclude_outside=bool(ctx.attr("exclude_outside", 0)),
                  extrapolation_value=float(ctx.attr("extrapolation_value", 0.0)),
                  antialias=bool(ctx.attr("antialias", 0)) if ctx.opset >= 18 else False)
