"""Convolutions: nn.conv{1,2,3}d and nn.conv{1,2,3}d_transpose (NC[D]HW data), one N-d compute each.

    conv:  data (N, C, *S), weight (O, C/groups, *K)  -> (N, O, *S')   S' = (S + pb + pe - d(K-1) - 1) / s + 1
    transposed: data (N, C, *S), weight (C, O/groups, *K) -> (N, O, *S'')
           S'' = (S - 1) s - pb - pe + d(K-1) + output_padding + 1

Padding is (begin_0.., end_0..) as ONNX pads. float16/bfloat16 accumulate in float32 and round
once at the end; integer inputs (ConvInteger) accumulate in out_dtype (int32).
"""
from __future__ import annotations

import itertools
import math

from ... import te
from ...errors import DTypeError, ShapeError
from ...ir import TensorType
from ...target import Target
from ..registry import OpPattern, register_op
from . import _util as U
from ._cpu_schedule import schedule_conv

_ND_NAME = {1: ("conv1d", "ncw"), 2: ("conv2d", "nchw"), 3: ("conv3d", "ncdhw")}


# ---------------------------------------------------------------------------------------------
# shared checks
# ---------------------------------------------------------------------------------------------
def _check_inputs(op, data: TensorType, weight: TensorType, nd: int, attrs, zero_points=()):
    U.check_rank(op, data, nd + 2, "data")
    U.check_rank(op, weight, nd + 2, "weight")
    odt = U.out_dtype(op, attrs.get("out_dtype"), data.dtype)
    if str(data.dtype) in U.FLOATS:
        U.same_dtype(op, (data, weight), ("data", "weight"))
        if not odt.is_float():
            raise DTypeError(f"{op}: out_dtype {odt} for float inputs must be a float type")
    elif str(data.dtype) in ("int8", "uint8", "int16", "int32"):
        U.check_dtype(op, weight, ("int8", "uint8", "int16", "int32"), "weight")
        if odt not in ("int32", "int64") and not odt.is_float():
            raise DTypeError(f"{op}: integer convolution needs out_dtype int32/int64 (or a float), got {odt}")
    else:
        raise DTypeError(f"{op}: data has dtype {data.dtype}; supported: float16, bfloat16, float32, float64, "
                         f"and int8/uint8 with out_dtype int32")
    for what, zp in zero_points:
        if zp is None:
            continue
        per_channel = (1, weight.shape[0]) if what == "weight_zero_point" else (1,)
        if zp.ndim > 1 or (zp.ndim == 1 and zp.shape[0] not in per_channel):
            more = " or have one entry per output channel" if what == "weight_zero_point" else ""
            raise ShapeError(f"{op}: {what} must be a scalar or a 1-element tensor{more}, got {zp}")
    return odt


def _attrs(op, attrs, nd):
    strides = U.int_tuple(op, "strides", attrs["strides"], nd, minimum=1)
    dilation = U.int_tuple(op, "dilation", attrs["dilation"], nd, minimum=1)
    padding = U.padding_tuple(op, attrs["padding"], nd)
    groups = int(attrs["groups"])
    if groups < 1:
        raise ShapeError(f"{op}: groups={groups} must be >= 1")
    return strides, padding, dilation, groups


def conv_out_shape(op, data: TensorType, weight: TensorType, attrs, nd: int) -> tuple:
    """Output shape of a convolution (checks channels vs groups and window vs padded input)."""
    strides, padding, dilation, groups = _attrs(op, attrs, nd)
    N = data.shape[0]
    (C,) = U.static_dims(op, data, (1,), "input channels")
    spatial = U.static_dims(op, data, range(2, nd + 2), "spatial dimensions")
    wdims = U.static_dims(op, weight, range(nd + 2), "weight dimensions")
    O, Cg, K = wdims[0], wdims[1], wdims[2:]
    if C % groups:
        raise ShapeError(f"{op}: {C} input channels are not divisible by groups={groups}")
    if Cg * groups != C:
        raise ShapeError(f"{op}: weight {weight} has {Cg} input channels per group but data has "
                         f"{C} channels in {groups} groups ({C // groups} per group)")
    if O % groups:
        raise ShapeError(f"{op}: {O} output channels (weight dim 0) are not divisible by groups={groups}")
    out = []
    for k in range(nd):
        padded = spatial[k] + padding[k] + padding[nd + k]
        window = dilation[k] * (K[k] - 1) + 1
        if window > padded:
            raise ShapeError(f"{op}: kernel {K} (dilated extent {window} on spatial axis {k}) is larger than "
                             f"the padded input ({spatial[k]} + padding {padding[k]}+{padding[nd + k]} = {padded})")
        out.append((padded - window) // strides[k] + 1)
    return (N, O, *out)


def _pad(data, padding, nd, value, name="pad_temp"):
    """data padded with `value` (a number or a scalar expression) on its spatial axes."""
    if not any(padding):
        return data
    shape = list(data.shape[:2]) + [data.shape[2 + k] + padding[k] + padding[nd + k] for k in range(nd)]
    names = ["n", "c"] + [f"{s}p" for s in U.SPATIAL_NAMES[nd]]
    fill = te.const(value, data.dtype) if isinstance(value, (int, float)) else value

    def body(n, c, *x):
        conds, idx = [], []
        for k, xi in enumerate(x):
            pb, pe = padding[k], padding[nd + k]
            if pb:
                conds.append(xi >= pb)
            if pe:
                conds.append(xi < data.shape[2 + k] + pb)
            idx.append(xi - pb if pb else xi)
        return te.if_then_else(te.all(*conds), data[(n, c, *idx)], fill)

    return U.compute(shape, names, body, name)


def _scalar(t):
    """The single element of a scalar or 1-element te tensor."""
    return t[(0,) * t.ndim] if t.ndim else t[()]


# ---------------------------------------------------------------------------------------------
# conv
# ---------------------------------------------------------------------------------------------
def conv_nd(data, weight, strides, padding, dilation, groups, out_dtype=None, name=None,
            data_zero_point=None, weight_zero_point=None, packed: bool = True):
    """The N-d convolution compute (NC[D]HW / OI[D]HW); returns the output tensor.

    With zero points (ConvInteger) the products are (x - x_zp) * (w - w_zp) and padding holds x_zp.
    packed=False keeps the direct form (a reduction over input channels and kernel taps, no weight
    repacking): what a GPU schedule tiles (ops/gpu/conv.py).
    """
    nd = data.ndim - 2
    base, layout = _ND_NAME[nd]
    op = f"nn.{base}"
    name = name or f"{base}_{layout}"
    strides = U.int_tuple(op, "strides", strides, nd, minimum=1)
    dilation = U.int_tuple(op, "dilation", dilation, nd, minimum=1)
    padding = U.padding_tuple(op, padding, nd)
    odt = U.out_dtype(op, out_dtype, data.dtype)
    integer = not data.dtype.is_float()
    acc = odt if integer else U.accum_dtype(odt if odt.bits >= data.dtype.bits else data.dtype)
    shape = conv_out_shape(op, U.ttype(data), U.ttype(weight),
                           dict(strides=strides, padding=padding, dilation=dilation, groups=groups), nd)
    shape = U.shape_exprs(shape, data)
    fill = _scalar(data_zero_point) if data_zero_point is not None else 0
    src = _pad(data, padding, nd, fill)
    O, Cg = int(weight.shape[0].value), int(weight.shape[1].value)
    K = [int(s.value) for s in weight.shape[2:]]
    og = O // groups
    sp = U.SPATIAL_NAMES[nd]
    names = ["n", "oc"] + [f"o{s}" for s in sp]
    plain = data_zero_point is None and weight_zero_point is None and not integer
    width = _pack_width(O, acc) if plain and groups == 1 and packed else None
    if width:
        return _conv_packed(src, weight, shape, strides, dilation, width, acc, odt, name, names)
    if plain and Cg == 1 and math.prod(K) <= 64:
        return _conv_depthwise(src, weight, shape, strides, dilation, og, acc, odt, name, names)
    rc = te.reduce_axis((0, Cg), "rc") if Cg > 1 else None
    rk = [te.reduce_axis((0, K[k]), f"r{sp[k]}") for k in range(nd)]
    axes = ([rc] if rc is not None else []) + rk

    def load(t, zp, idx):
        v = U.cast(t[idx], acc)
        if zp is not None:
            per_channel = zp.ndim == 1 and U.dims_of(zp)[0] != 1
            v = v - U.cast(zp[idx[0]] if per_channel else _scalar(zp), acc)
        return v

    def body(n, o, *y):
        c_w = rc if rc is not None else 0
        c_in = c_w
        if groups > 1:
            c_in = (o if og == 1 else o // og) * Cg + c_w
        idx = [y[k] * strides[k] + rk[k] * dilation[k] if K[k] > 1 else y[k] * strides[k] for k in range(nd)]
        prod = load(src, data_zero_point, (n, c_in, *idx)) * load(weight, weight_zero_point, (o, c_w, *rk))
        if not axes:
            return prod
        return te.sum(prod, axis=axes)

    if acc == odt:
        return U.compute(shape, names, body, name)
    out = U.compute(shape, names, body, name + "_acc")
    return U.compute(shape, names, lambda *i: out[i].astype(odt), name)


def _pack_width(out_channels, acc):
    """Output channels computed together in the packed formulation: 64 bytes of them (two AVX2
    vectors, one AVX-512 vector: measured best on both), or half that; None when neither divides
    the output channels."""
    for v in ((16, 8) if acc.bits <= 32 else (8, 4)):
        if out_channels % v == 0:
            return v
    return None


def _unrolled_taps(C, K, limit=16):
    """How the packed convolution splits its reduction: (input channels unrolled, number of
    trailing kernel axes unrolled). Trailing kernel axes are unrolled while the unrolled taps stay
    within `limit` (their weight vectors stay in registers); when fewer than 4 taps are unrolled
    (1x1 kernels), a few input channels are unrolled instead."""
    taps, axes = 1, 0
    for e in reversed(K):
        if taps * e > limit and axes:
            break
        taps *= e
        axes += 1
    unroll = 1
    if taps < 4:
        unroll = next(u for u in (8, 4, 2, 1) if C % u == 0 and u * taps <= limit)
    return unroll, axes


def _conv_packed(src, weight, shape, strides, dilation, width, acc, odt, name, names, packed=None):
    """Convolution computed `width` output channels at a time (TVM's NCHW[x]c idea, inside the
    op): the weight is repacked to (O/width, C, *kernel, width) so a vector of output channels
    reads contiguous weights; the trailing kernel taps (or, for 1x1 kernels, a few input channels)
    are unrolled in the expression and the reduction runs over the rest; the result is unpacked to
    NC[D]HW. `packed`: an already packed weight (nn.contrib_conv_packed)."""
    nd = src.ndim - 2
    if packed is None:
        O, C = int(weight.shape[0].value), int(weight.shape[1].value)
        K = [int(s.value) for s in weight.shape[2:]]
    else:
        O, C = int(packed.shape[0].value) * width, int(packed.shape[1].value)
        K = [int(s.value) for s in packed.shape[2:-1]]
    sp = U.SPATIAL_NAMES[nd]
    if packed is None:
        packed = U.compute((O // width, C, *K, width), ["ob", "c"] + [f"k{s}" for s in sp] + ["v"],
                           lambda ob, c, *kv: weight[(ob * width + kv[-1], c, *kv[:-1])], "weight_pack")
    unroll, n_unrolled = _unrolled_taps(C, K)
    rc = te.reduce_axis((0, C // unroll), "rc")
    rk = [te.reduce_axis((0, K[a]), f"r{sp[a]}") for a in range(nd - n_unrolled)]

    def body(n, ob, *yv):
        y, v = yv[:-1], yv[-1]
        total = None
        for cu in range(unroll):
            c = rc * unroll + cu if unroll > 1 else rc
            for ku in itertools.product(*[range(e) for e in K[nd - n_unrolled:]]):
                k = tuple(rk) + ku
                idx = tuple(y[a] * strides[a] + k[a] * dilation[a] for a in range(nd))
                term = U.cast(src[(n, c, *idx)], acc) * U.cast(packed[(ob, c, *k, v)], acc)
                total = term if total is None else total + term
        return te.sum(total, axis=[rc, *rk])

    pshape = (shape[0], O // width, *shape[2:], width)
    acc_t = U.compute(pshape, ["n", "ob"] + list(names[2:]) + ["v"], body, name + "c")
    return U.compute(shape, names, lambda n, oc, *y: U.cast(acc_t[(n, oc // width, *y, oc % width)], odt), name)


def _conv_depthwise(src, weight, shape, strides, dilation, multiplier, acc, odt, name, names):
    """One input channel per output channel (depthwise, channel multiplier `multiplier`): the kernel
    taps are unrolled, so the op is a plain elementwise stage with no reduction loop."""
    nd = src.ndim - 2
    K = [int(s.value) for s in weight.shape[2:]]

    def body(n, o, *y):
        c = o if multiplier == 1 else o // multiplier
        total = None
        for k in itertools.product(*[range(e) for e in K]):
            idx = tuple(y[a] * strides[a] + k[a] * dilation[a] for a in range(nd))
            term = U.cast(src[(n, c, *idx)], acc) * U.cast(weight[(o, 0, *k)], acc)
            total = term if total is None else total + term
        return U.cast(total, odt)

    return U.compute(shape, names, body, name)


def _register_conv(nd):
    base, _ = _ND_NAME[nd]
    op = register_op(f"nn.{base}", inputs=("data", "weight"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
                     attrs={"strides": (1,) * nd, "padding": (0,) * (2 * nd), "dilation": (1,) * nd,
                            "groups": 1, "out_dtype": ""},
                     doc=f"{nd}-d convolution, NC{'DHW'[3 - nd:]} data and OI{'DHW'[3 - nd:]} weight; "
                         f"padding is (begin..., end...).")

    @op.def_infer
    def _infer(types, attrs, _name=op.name):
        data, weight = types
        odt = _check_inputs(_name, data, weight, nd, attrs)
        return [TensorType(conv_out_shape(_name, data, weight, attrs, nd), odt)]

    @op.def_compute
    def _compute(tensors, attrs, target=None):
        data, weight = tensors
        gpu = target is not None and Target(target).kind in ("cuda", "opencl")
        return [conv_nd(data, weight, attrs["strides"], attrs["padding"], attrs["dilation"], attrs["groups"],
                        attrs["out_dtype"], packed=not gpu)]

    op.def_schedule(schedule_conv)
    return op


conv1d = _register_conv(1)
conv2d = _register_conv(2)
conv3d = _register_conv(3)


# ---------------------------------------------------------------------------------------------
# conv with zero points (ONNX ConvInteger): (x - x_zp) * (w - w_zp), accumulated in int32
# ---------------------------------------------------------------------------------------------
conv_integer = register_op(
    "nn.conv_integer", inputs=("data", "weight", "data_zero_point", "weight_zero_point"),
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"strides": 1, "padding": 0, "dilation": 1, "groups": 1, "out_dtype": "int32"},
    doc="N-d integer convolution with scalar zero points (ONNX ConvInteger); int32 output.")


@conv_integer.def_infer
def _conv_integer_infer(types, attrs):
    data, weight, xz, wz = types
    op = "nn.conv_integer"
    if data.ndim < 3:
        raise ShapeError(f"{op}: data must have rank >= 3 (N, C, spatial...), got {data}")
    nd = data.ndim - 2
    U.check_dtype(op, data, ("int8", "uint8"), "data")
    U.check_dtype(op, weight, ("int8", "uint8"), "weight")
    if xz.dtype != data.dtype or wz.dtype != weight.dtype:
        raise DTypeError(f"{op}: zero points ({xz.dtype}, {wz.dtype}) must have the dtypes of data and "
                         f"weight ({data.dtype}, {weight.dtype})")
    odt = _check_inputs(op, data, weight, nd, attrs, (("data_zero_point", xz), ("weight_zero_point", wz)))
    return [TensorType(conv_out_shape(op, data, weight, _nd_attrs(attrs, nd), nd), odt)]


def _nd_attrs(attrs, nd):
    return dict(strides=U.int_tuple("nn.conv_integer", "strides", attrs["strides"], nd),
                padding=U.padding_tuple("nn.conv_integer", attrs["padding"], nd),
                dilation=U.int_tuple("nn.conv_integer", "dilation", attrs["dilation"], nd),
                groups=attrs["groups"], out_dtype=attrs["out_dtype"])


conv_integer.def_schedule(schedule_conv)


@conv_integer.def_compute
def _conv_integer_compute(tensors, attrs):
    data, weight, xz, wz = tensors
    a = _nd_attrs(attrs, data.ndim - 2)
    return [conv_nd(data, weight, a["strides"], a["padding"], a["dilation"], a["groups"], a["out_dtype"],
                    name="conv_integer", data_zero_point=xz, weight_zero_point=wz)]


# ---------------------------------------------------------------------------------------------
# transposed convolution
# ---------------------------------------------------------------------------------------------
def conv_transpose_out_shape(op, data: TensorType, weight: TensorType, attrs, nd: int) -> tuple:
    strides, padding, dilation, groups = _attrs(op, attrs, nd)
    out_pad = U.int_tuple(op, "output_padding", attrs["output_padding"], nd, minimum=0)
    N = data.shape[0]
    (C,) = U.static_dims(op, data, (1,), "input channels")
    spatial = U.static_dims(op, data, range(2, nd + 2), "spatial dimensions")
    wdims = U.static_dims(op, weight, range(nd + 2), "weight dimensions")
    Cw, Og, K = wdims[0], wdims[1], wdims[2:]
    if Cw != C:
        raise ShapeError(f"{op}: weight {weight} (C_in, C_out/groups, *kernel) has {Cw} input channels but "
                         f"data has {C}")
    if C % groups:
        raise ShapeError(f"{op}: {C} input channels are not divisible by groups={groups}")
    for k in range(nd):
        if out_pad[k] >= max(strides[k], dilation[k]):
            raise ShapeError(f"{op}: output_padding {out_pad} must be smaller than the stride or dilation "
                             f"on each axis (strides {strides}, dilation {dilation})")
    out = []
    for k in range(nd):
        o = (spatial[k] - 1) * strides[k] - padding[k] - padding[nd + k] + dilation[k] * (K[k] - 1) \
            + out_pad[k] + 1
        if o <= 0:
            raise ShapeError(f"{op}: padding {padding} leaves no output on spatial axis {k} (size {o})")
        out.append(o)
    return (N, Og * groups, *out)


def conv_transpose_nd(data, weight, strides, padding, dilation, groups, output_padding, out_dtype=None,
                      name=None):
    """The N-d transposed convolution compute (NC[D]HW data, IO[D]HW weight)."""
    nd = data.ndim - 2
    base, layout = _ND_NAME[nd]
    name = name or f"{base}_transpose_{layout}"
    odt = U.out_dtype(base, out_dtype, data.dtype)
    acc = U.accum_dtype(odt)
    attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=groups,
                 output_padding=output_padding)
    shape = U.shape_exprs(conv_transpose_out_shape(f"nn.{base}_transpose", U.ttype(data), U.ttype(weight),
                                                   attrs, nd), data)
    strides = U.int_tuple(name, "strides", strides, nd)
    dilation = U.int_tuple(name, "dilation", dilation, nd)
    padding = U.padding_tuple(name, padding, nd)
    C = int(data.shape[1].value)
    Og = int(weight.shape[1].value)
    K = [int(s.value) for s in weight.shape[2:]]
    S = [int(s.value) for s in data.shape[2:]]
    Cg = C // groups
    sp = U.SPATIAL_NAMES[nd]
    rc = te.reduce_axis((0, Cg), "rc")
    rk = [te.reduce_axis((0, K[k]), f"r{sp[k]}") for k in range(nd)]

    def body(n, o, *y):
        c_in = rc if groups == 1 else (o // Og) * Cg + rc
        o_w = o if groups == 1 else o % Og
        conds, idx = [], []
        for k in range(nd):
            t = y[k] + padding[k] - rk[k] * dilation[k]
            if strides[k] > 1:
                conds.append(t % strides[k] == 0)
                t = t // strides[k]
            conds += [t >= 0, t < S[k]]
            idx.append(t)
        prod = U.cast(data[(n, c_in, *idx)], acc) * U.cast(weight[(c_in, o_w, *rk)], acc)
        return te.sum(te.if_then_else(te.all(*conds), prod, te.const(0, acc)), axis=[rc, *rk])

    names = ["n", "oc"] + [f"o{s}" for s in sp]
    if acc == odt:
        return U.compute(shape, names, body, name)
    out = U.compute(shape, names, body, name + "_acc")
    return U.compute(shape, names, lambda *i: out[i].astype(odt), name)


def _register_conv_transpose(nd):
    base, _ = _ND_NAME[nd]
    op = register_op(f"nn.{base}_transpose", inputs=("data", "weight"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
                     attrs={"strides": (1,) * nd, "padding": (0,) * (2 * nd), "dilation": (1,) * nd,
                            "groups": 1, "output_padding": (0,) * nd, "out_dtype": ""},
                     doc=f"{nd}-d transposed convolution, NC{'DHW'[3 - nd:]} data and IO{'DHW'[3 - nd:]} "
                         f"weight (C_in, C_out/groups, *kernel).")

    @op.def_infer
    def _infer(types, attrs, _name=op.name):
        data, weight = types
        U.check_rank(_name, data, nd + 2, "data")
        U.check_rank(_name, weight, nd + 2, "weight")
        U.check_dtype(_name, data, U.FLOATS, "data")
        U.same_dtype(_name, (data, weight), ("data", "weight"))
        odt = U.out_dtype(_name, attrs["out_dtype"], data.dtype)
        return [TensorType(conv_transpose_out_shape(_name, data, weight, attrs, nd), odt)]

    @op.def_compute
    def _compute(tensors, attrs):
        data, weight = tensors
        return [conv_transpose_nd(data, weight, attrs["strides"], attrs["padding"], attrs["dilation"],
                                  attrs["groups"], attrs["output_padding"], attrs["out_dtype"])]

    op.def_schedule(schedule_conv)
    return op


conv1d_transpose = _register_conv_transpose(1)
conv2d_transpose = _register_conv_transpose(2)
conv3d_transpose = _register_conv_transpose(3)
