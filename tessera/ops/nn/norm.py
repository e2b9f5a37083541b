"""Normalizations: nn.batch_norm (inference), nn.batch_norm_training, nn.layer_norm, nn.instance_norm,
nn.group_norm, nn.rms_norm, nn.lrn, nn.lp_normalize, nn.mean_variance_normalization.

Statistics are computed in two passes (mean, then the mean of squared deviations: as accurate
as numpy's var), in float32 for float16/bfloat16 data and in the data's dtype otherwise.
Statistics tensors keep the reduced axes with extent 1, as ONNX's Mean/InvStdDev outputs.
"""
from __future__ import annotations

import math

from ... import te
from ...errors import ScheduleError, ShapeError, TesseraError
from ...ir import TensorType
from ..registry import OpPattern, register_op
from .._schedule import schedule_blocks, schedule_rows
from . import _util as U


# ---------------------------------------------------------------------------------------------
# shared pieces
# ---------------------------------------------------------------------------------------------
def _float_data(op, data: TensorType, what="data"):
    U.check_dtype(op, data, U.FLOATS, what)


def _broadcastable_to(op, param: TensorType, data: TensorType, what: str):
    """param broadcasts to data's shape (numpy rules, right-aligned) without changing it."""
    if param.dtype != data.dtype and str(param.dtype) not in U.FLOATS:
        raise TesseraError(f"{op}: {what} has dtype {param.dtype}")
    try:
        out = U.broadcast_dims(op, data.shape, param.shape, ("data", what))
    except ShapeError:
        out = None
    if out != tuple(data.shape):
        raise ShapeError(f"{op}: {what} {param} does not broadcast to data {data}")


def _per_channel(op, param: TensorType, channels, what: str):
    if param.ndim != 1 or (isinstance(channels, int) and isinstance(param.shape[0], int)
                           and param.shape[0] != channels):
        raise ShapeError(f"{op}: {what} must be 1-D with one entry per channel ({channels}), got {param}")


def _kept(idx, axes):
    """idx with the reduced axes replaced by 0 (statistics keep them with extent 1)."""
    return tuple(0 if k in axes else i for k, i in enumerate(idx))


def moments(x, axes, acc, name, center=True):
    """(mean, var) of x over `axes` (extent-1 dims kept), in dtype acc. center=False: (None, mean of x^2)."""
    axes = tuple(sorted(axes))
    shape = tuple(1 if k in axes else s for k, s in enumerate(x.shape))
    names = U.axis_names(x.ndim)
    count = math.prod(int(x.shape[a].value) for a in axes)
    inv = te.const(1.0 / count, acc)

    def over(f, tag):
        r = [te.reduce_axis((0, x.shape[a]), f"r{tag}{a}") for a in axes]

        def body(*idx):
            full = list(idx)
            for a, ra in zip(axes, r):
                full[a] = ra
            return te.sum(f(tuple(full)), axis=r)

        return body

    if not center:
        sq = U.compute(shape, names, over(lambda i: U.cast(x[i], acc) * U.cast(x[i], acc), "s"), f"{name}_sqsum")
        return None, U.compute(shape, names, lambda *i: sq[i] * inv, f"{name}_meansq")
    s = U.compute(shape, names, over(lambda i: U.cast(x[i], acc), "m"), f"{name}_sum")
    mean = U.compute(shape, names, lambda *i: s[i] * inv, f"{name}_mean")

    def dev2(i):
        d = U.cast(x[i], acc) - mean[_kept(i, axes)]
        return d * d

    ss = U.compute(shape, names, over(dev2, "v"), f"{name}_sqdev")
    var = U.compute(shape, names, lambda *i: ss[i] * inv, f"{name}_var")
    return mean, var


def _check_eps(op, attrs):
    eps = float(attrs["epsilon"])
    if not eps >= 0:
        raise TesseraError(f"{op}: epsilon={eps} must be >= 0")
    return eps


# ---------------------------------------------------------------------------------------------
# batch norm
# ---------------------------------------------------------------------------------------------
batch_norm = register_op("nn.batch_norm", inputs=("data", "gamma", "beta", "moving_mean", "moving_var"),
                         pattern=OpPattern.BROADCAST, attrs={"axis": 1, "epsilon": 1e-5},
                         doc="inference batch norm: (x - mean) / sqrt(var + eps) * gamma + beta, per channel "
                             "of `axis`.")


@batch_norm.def_infer
def _bn_infer(types, attrs):
    op = "nn.batch_norm"
    data = types[0]
    _float_data(op, data)
    if data.ndim < 1:
        raise ShapeError(f"{op}: data must have rank >= 1")
    axis = U.norm_axis(op, attrs["axis"], data.ndim)
    _check_eps(op, attrs)
    for t, what in zip(types[1:], ("gamma", "beta", "moving_mean", "moving_var")):
        _per_channel(op, t, data.shape[axis], what)
        U.check_dtype(op, t, U.FLOATS, what)
    return [data]


@batch_norm.def_compute
def _bn_compute(tensors, attrs):
    data, gamma, beta, mean, var = tensors
    axis = U.norm_axis("nn.batch_norm", attrs["axis"], data.ndim)
    acc = U.accum_dtype(data.dtype)
    eps = float(attrs["epsilon"])
    C = data.shape[axis]
    f = lambda t, c: U.cast(t[c], acc)  # noqa: E731
    scale = U.compute((C,), ["c"], lambda c: f(gamma, c) * te.rsqrt(f(var, c) + te.const(eps, acc)),
                      "batch_norm_scale")
    shift = U.compute((C,), ["c"], lambda c: f(beta, c) - f(mean, c) * scale[c], "batch_norm_shift")
    return [U.compute(data.shape, U.axis_names(data.ndim),
                      lambda *i: U.cast(U.cast(data[i], acc) * scale[i[axis]] + shift[i[axis]], data.dtype),
                      "batch_norm")]


batch_norm_training = register_op(
    "nn.batch_norm_training", inputs=("data", "gamma", "beta", "running_mean", "running_var"),
    pattern=OpPattern.OPAQUE, num_outputs=3, attrs={"axis": 1, "epsilon": 1e-5, "momentum": 0.9},
    doc="training-mode batch norm (ONNX training_mode=1): normalizes with the batch statistics and "
        "returns (y, updated running mean, updated running var).")


@batch_norm_training.def_infer
def _bnt_infer(types, attrs):
    out = _bn_infer(types, {"axis": attrs["axis"], "epsilon": attrs["epsilon"]})
    C = types[0].shape[U.norm_axis("nn.batch_norm_training", attrs["axis"], types[0].ndim)]
    return [out[0], TensorType((C,), types[3].dtype), TensorType((C,), types[4].dtype)]


@batch_norm_training.def_compute
def _bnt_compute(tensors, attrs):
    data, gamma, beta, rmean, rvar = tensors
    axis = U.norm_axis("nn.batch_norm_training", attrs["axis"], data.ndim)
    acc = U.accum_dtype(data.dtype)
    eps, mom = float(attrs["epsilon"]), float(attrs["momentum"])
    axes = tuple(k for k in range(data.ndim) if k != axis)
    mean, var = moments(data, axes, acc, "bn")

    def at(t, c):
        idx = [0] * data.ndim
        idx[axis] = c
        return t[tuple(idx)]

    C = data.shape[axis]
    y = U.compute(data.shape, U.axis_names(data.ndim),
                  lambda *i: U.cast((U.cast(data[i], acc) - at(mean, i[axis])) * te.rsqrt(at(var, i[axis]) + eps)
                                    * U.cast(gamma[i[axis]], acc) + U.cast(beta[i[axis]], acc), data.dtype),
                  "batch_norm")
    new_mean = U.compute((C,), ["c"], lambda c: U.cast(U.cast(rmean[c], acc) * mom + at(mean, c) * (1 - mom),
                                                       rmean.dtype), "running_mean")
    new_var = U.compute((C,), ["c"], lambda c: U.cast(U.cast(rvar[c], acc) * mom + at(var, c) * (1 - mom),
                                                      rvar.dtype), "running_var")
    return [y, new_mean, new_var]


# ---------------------------------------------------------------------------------------------
# layer norm (ONNX LayerNormalization: normalizes axes [axis, rank))
# ---------------------------------------------------------------------------------------------
layer_norm = register_op("nn.layer_norm", inputs=("data", "gamma", "beta*"), pattern=OpPattern.OPAQUE,
                         num_outputs=None,
                         attrs={"axis": -1, "epsilon": 1e-5, "return_stats": False, "stats_dtype": ""},
                         doc="(x - mean) / sqrt(var + eps) * gamma + beta over the axes [axis, rank); beta is "
                             "optional; return_stats adds the Mean and InvStdDev outputs (extent-1 reduced axes).")


def _stats_dtype(op, attrs, data):
    return U.out_dtype(op, attrs["stats_dtype"], U.accum_dtype(data.dtype))


@layer_norm.def_infer
def _ln_infer(types, attrs):
    op = "nn.layer_norm"
    if len(types) > 3:
        raise ShapeError(f"{op}: takes data, gamma and an optional beta; got {len(types)} inputs")
    data = types[0]
    _float_data(op, data)
    axis = U.norm_axis(op, attrs["axis"], data.ndim)
    _check_eps(op, attrs)
    U.static_dims(op, data, range(axis, data.ndim), "normalized dimensions")
    for t, what in zip(types[1:], ("gamma", "beta")):
        _broadcastable_to(op, t, data, what)
    out = [data]
    if attrs["return_stats"]:
        st = TensorType(tuple(data.shape[:axis]) + (1,) * (data.ndim - axis), _stats_dtype(op, attrs, data))
        out += [st, st]
    return out


def _affine(y, idx, gamma, beta, acc):
    if gamma is not None:
        y = y * U.cast(gamma[U.broadcast_index(gamma, idx)], acc)
    if beta is not None:
        y = y + U.cast(beta[U.broadcast_index(beta, idx)], acc)
    return y


@layer_norm.def_compute
def _ln_compute(tensors, attrs):
    data, gamma = tensors[0], tensors[1]
    beta = tensors[2] if len(tensors) > 2 else None
    op = "nn.layer_norm"
    axis = U.norm_axis(op, attrs["axis"], data.ndim)
    acc = U.accum_dtype(data.dtype)
    eps = float(attrs["epsilon"])
    axes = tuple(range(axis, data.ndim))
    mean, var = moments(data, axes, acc, "layer_norm")
    names = U.axis_names(data.ndim)
    inv = U.compute(mean.shape, names, lambda *i: te.rsqrt(var[i] + te.const(eps, acc)), "layer_norm_inv_std")

    def body(*i):
        k = _kept(i, axes)
        return U.cast(_affine((U.cast(data[i], acc) - mean[k]) * inv[k], i, gamma, beta, acc), data.dtype)

    y = U.compute(data.shape, names, body, "layer_norm")
    if not attrs["return_stats"]:
        return [y]
    sdt = _stats_dtype(op, attrs, data)
    if sdt == acc:
        return [y, mean, inv]
    return [y, U.compute(mean.shape, names, lambda *i: U.cast(mean[i], sdt), "layer_norm_mean_out"),
            U.compute(mean.shape, names, lambda *i: U.cast(inv[i], sdt), "layer_norm_inv_std_out")]


# ---------------------------------------------------------------------------------------------
# rms norm (ONNX RMSNormalization)
# ---------------------------------------------------------------------------------------------
rms_norm = register_op("nn.rms_norm", inputs=("data", "gamma"), pattern=OpPattern.OPAQUE,
                       attrs={"axis": -1, "epsilon": 1e-5},
                       doc="x / sqrt(mean(x^2) + eps) * gamma over the axes [axis, rank).")


@rms_norm.def_infer
def _rms_infer(types, attrs):
    op = "nn.rms_norm"
    data, gamma = types
    _float_data(op, data)
    axis = U.norm_axis(op, attrs["axis"], data.ndim)
    _check_eps(op, attrs)
    U.static_dims(op, data, range(axis, data.ndim), "normalized dimensions")
    _broadcastable_to(op, gamma, data, "gamma")
    return [data]


@rms_norm.def_compute
def _rms_compute(tensors, attrs):
    data, gamma = tensors
    axis = U.norm_axis("nn.rms_norm", attrs["axis"], data.ndim)
    acc = U.accum_dtype(data.dtype)
    axes = tuple(range(axis, data.ndim))
    _, msq = moments(data, axes, acc, "rms_norm", center=False)
    names = U.axis_names(data.ndim)
    eps = te.const(float(attrs["epsilon"]), acc)
    inv = U.compute(msq.shape, names, lambda *i: te.rsqrt(msq[i] + eps), "rms_norm_inv")
    return [U.compute(data.shape, names,
                      lambda *i: U.cast(_affine(U.cast(data[i], acc) * inv[_kept(i, axes)], i, gamma, None, acc),
                                        data.dtype), "rms_norm")]


# ---------------------------------------------------------------------------------------------
# instance norm, group norm, mean-variance normalization
# ---------------------------------------------------------------------------------------------
instance_norm = register_op("nn.instance_norm", inputs=("data", "gamma", "beta"), pattern=OpPattern.OPAQUE,
                            attrs={"epsilon": 1e-5},
                            doc="normalizes each (n, c) over the spatial axes of NC... data, then per-channel "
                                "gamma/beta.")


@instance_norm.def_infer
def _in_infer(types, attrs):
    op = "nn.instance_norm"
    data, gamma, beta = types
    _float_data(op, data)
    if data.ndim < 3:
        raise ShapeError(f"{op}: data must be (N, C, spatial...) of rank >= 3, got {data}")
    _check_eps(op, attrs)
    U.static_dims(op, data, range(2, data.ndim), "spatial dimensions")
    _per_channel(op, gamma, data.shape[1], "gamma")
    _per_channel(op, beta, data.shape[1], "beta")
    return [data]


@instance_norm.def_compute
def _in_compute(tensors, attrs):
    data, gamma, beta = tensors
    acc = U.accum_dtype(data.dtype)
    axes = tuple(range(2, data.ndim))
    mean, var = moments(data, axes, acc, "instance_norm")
    eps = te.const(float(attrs["epsilon"]), acc)
    names = U.axis_names(data.ndim)

    def body(*i):
        k = _kept(i, axes)
        y = (U.cast(data[i], acc) - mean[k]) * te.rsqrt(var[k] + eps)
        return U.cast(y * U.cast(gamma[i[1]], acc) + U.cast(beta[i[1]], acc), data.dtype)

    return [U.compute(data.shape, names, body, "instance_norm")]


group_norm = register_op("nn.group_norm", inputs=("data", "gamma", "beta"), pattern=OpPattern.OPAQUE,
                         attrs={"num_groups": None, "epsilon": 1e-5},
                         doc="normalizes each group of C/num_groups channels (with the spatial axes) of NC... "
                             "data; gamma/beta have one entry per channel (ONNX opset 21) or per group "
                             "(opset 18).")


@group_norm.def_infer
def _gn_infer(types, attrs):
    op = "nn.group_norm"
    data, gamma, beta = types
    _float_data(op, data)
    if data.ndim < 2:
        raise ShapeError(f"{op}: data must be (N, C, ...) of rank >= 2, got {data}")
    _check_eps(op, attrs)
    (C,) = U.static_dims(op, data, (1,), "channel dimension")
    U.static_dims(op, data, range(2, data.ndim), "spatial dimensions")
    G = attrs["num_groups"]
    if not isinstance(G, int) or G < 1:
        raise TesseraError(f"{op}: num_groups={G!r} must be a positive int")
    if C % G:
        raise ShapeError(f"{op}: {C} channels are not divisible by num_groups={G}")
    for t, what in ((gamma, "gamma"), (beta, "beta")):
        if t.ndim != 1 or t.shape[0] not in (C, G):
            raise ShapeError(f"{op}: {what} must be 1-D with {C} (per channel) or {G} (per group) entries, "
                             f"got {t}")
    return [data]


@group_norm.def_compute
def _gn_compute(tensors, attrs):
    data, gamma, beta = tensors
    acc = U.accum_dtype(data.dtype)
    G = int(attrs["num_groups"])
    C = int(data.shape[1].value)
    Cg = C // G
    spatial = [int(s.value) for s in data.shape[2:]]
    count = Cg * math.prod(spatial)
    inv_n = te.const(1.0 / count, acc)
    N = data.shape[0]

    def group_sum(f, tag):
        rc = te.reduce_axis((0, Cg), f"r{tag}c")
        rs = [te.reduce_axis((0, s), f"r{tag}{k}") for k, s in enumerate(spatial)]

        def body(n, g):
            return te.sum(f((n, g * Cg + rc, *rs), n, g), axis=[rc, *rs])

        return body

    s = U.compute((N, G), ["n", "g"], group_sum(lambda i, n, g: U.cast(data[i], acc), "m"), "group_norm_sum")
    mean = U.compute((N, G), ["n", "g"], lambda n, g: s[n, g] * inv_n, "group_norm_mean")

    def dev2(i, n, g):
        d = U.cast(data[i], acc) - mean[n, g]
        return d * d

    ss = U.compute((N, G), ["n", "g"], group_sum(dev2, "v"), "group_norm_sqdev")
    eps = te.const(float(attrs["epsilon"]), acc)
    inv = U.compute((N, G), ["n", "g"], lambda n, g: te.rsqrt(ss[n, g] * inv_n + eps), "group_norm_inv_std")

    def param(t, c):
        return U.cast(t[c if int(t.shape[0].value) == C else c // Cg], acc)

    def body(*i):
        n, c = i[0], i[1]
        g = c // Cg if Cg > 1 else c
        y = (U.cast(data[i], acc) - mean[n, g]) * inv[n, g]
        return U.cast(y * param(gamma, c) + param(beta, c), data.dtype)

    return [U.compute(data.shape, U.axis_names(data.ndim), body, "group_norm")]


mean_variance_normalization = register_op(
    "nn.mean_variance_normalization", inputs=("data",), pattern=OpPattern.OPAQUE,
    attrs={"axes": (0, 2, 3), "epsilon": 1e-9},
    doc="(x - mean) / (sqrt(var) + epsilon) over `axes` (ONNX MeanVarianceNormalization).")


def _mvn_axes(op, attrs, ndim):
    axes = attrs["axes"]
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    out = sorted({U.norm_axis(op, a, ndim, "axes") for a in axes})
    if len(out) != len(axes):
        raise TesseraError(f"{op}: axes {axes} repeat an axis")
    return tuple(out)


@mean_variance_normalization.def_infer
def _mvn_infer(types, attrs):
    op = "nn.mean_variance_normalization"
    (data,) = types
    _float_data(op, data)
    axes = _mvn_axes(op, attrs, data.ndim)
    U.static_dims(op, data, axes, "normalized dimensions")
    return [data]


@mean_variance_normalization.def_compute
def _mvn_compute(tensors, attrs):
    (data,) = tensors
    axes = _mvn_axes("nn.mean_variance_normalization", attrs, data.ndim)
    acc = U.accum_dtype(data.dtype)
    mean, var = moments(data, axes, acc, "mvn")
    eps = te.const(float(attrs["epsilon"]), acc)

    def body(*i):
        k = _kept(i, axes)
        return U.cast((U.cast(data[i], acc) - mean[k]) / (te.sqrt(var[k]) + eps), data.dtype)

    return [U.compute(data.shape, U.axis_names(data.ndim), body, "mvn")]


# ---------------------------------------------------------------------------------------------
# LRN, Lp normalize
# ---------------------------------------------------------------------------------------------
lrn = register_op("nn.lrn", inputs=("data",), pattern=OpPattern.OPAQUE,
                  attrs={"size": 5, "axis": 1, "alpha": 1e-4, "beta": 0.75, "bias": 1.0},
                  doc="local response normalization across `axis`: x / (bias + alpha/size * sum x^2)^beta "
                      "over the window [c - (size-1)//2, c + ceil((size-1)/2)].")


@lrn.def_infer
def _lrn_infer(types, attrs):
    op = "nn.lrn"
    (data,) = types
    _float_data(op, data)
    axis = U.norm_axis(op, attrs["axis"], data.ndim)
    U.static_dims(op, data, (axis,), "normalized (channel) dimension")
    if not isinstance(attrs["size"], int) or attrs["size"] < 1:
        raise TesseraError(f"{op}: size={attrs['size']!r} must be a positive int")
    return [data]


@lrn.def_compute
def _lrn_compute(tensors, attrs):
    (data,) = tensors
    axis = U.norm_axis("nn.lrn", attrs["axis"], data.ndim)
    acc = U.accum_dtype(data.dtype)
    size = int(attrs["size"])
    C = int(data.shape[axis].value)
    lo = (size - 1) // 2
    r = te.reduce_axis((0, size), "r")
    names = U.axis_names(data.ndim)

    def sq(*i):
        c = i[axis] - lo + r
        j = list(i)
        j[axis] = c
        v = U.cast(data[tuple(j)], acc)
        return te.sum(te.if_then_else(te.all(c >= 0, c < C), v * v, te.const(0, acc)), axis=r)

    s = U.compute(data.shape, names, sq, "lrn_sqsum")
    alpha, beta, bias = float(attrs["alpha"]), float(attrs["beta"]), float(attrs["bias"])

    def body(*i):
        base = te.const(bias, acc) + te.const(alpha / size, acc) * s[i]
        den = te.power(base, te.const(beta, acc)) if beta != 0.75 else te.sqrt(base * te.sqrt(base))
        return U.cast(U.cast(data[i], acc) / den, data.dtype)

    return [U.compute(data.shape, names, body, "lrn")]


lp_normalize = register_op("nn.lp_normalize", inputs=("data",), pattern=OpPattern.OPAQUE,
                           attrs={"axis": -1, "p": 2},
                           doc="x / ||x||_p along `axis` (p = 1 or 2); zero where the norm is zero.")


@lp_normalize.def_infer
def _lpn_infer(types, attrs):
    op = "nn.lp_normalize"
    (data,) = types
    _float_data(op, data)
    axis = U.norm_axis(op, attrs["axis"], data.ndim)
    U.static_dims(op, data, (axis,), "normalized dimension")
    if attrs["p"] not in (1, 2):
        raise TesseraError(f"{op}: p={attrs['p']!r} must be 1 or 2")
    return [data]


@lp_normalize.def_compute
def _lpn_compute(tensors, attrs):
    (data,) = tensors
    axis = U.norm_axis("nn.lp_normalize", attrs["axis"], data.ndim)
    acc = U.accum_dtype(data.dtype)
    p = attrs["p"]
    names = U.axis_names(data.ndim)
    r = te.reduce_axis((0, data.shape[axis]), "r")
    shape = tuple(1 if k == axis else s for k, s in enumerate(data.shape))

    def nsum(*i):
        j = list(i)
        j[axis] = r
        v = U.cast(data[tuple(j)], acc)
        return te.sum(te.abs(v) if p == 1 else v * v, axis=r)

    s = U.compute(shape, names, nsum, "lp_norm_sum")
    norm = U.compute(shape, names, lambda *i: s[i] if p == 1 else te.sqrt(s[i]), "lp_norm")

    def body(*i):
        nv = norm[_kept(i, (axis,))]
        return U.cast(te.if_then_else(nv == te.const(0, acc), te.const(0, acc), U.cast(data[i], acc) / nv),
                      data.dtype)

    return [U.compute(data.shape, names, body, "lp_normalize")]


def _row_schedule(first_normalized):
    """Normalizations over the trailing axes [first, rank): each row's statistics and output are
    computed together (schedule_rows: the row stays in L1, both statistics passes run on vector
    partial sums, rows in parallel); the per-block schedule where that does not apply."""
    def schedule(sch, ctx):
        ndim = len(ctx.output_types[0].shape)
        first = first_normalized(ctx.attrs, ndim)
        if first is not None and 1 <= first < ndim:
            try:
                schedule_rows(sch, ctx.target, ctx.block, first, ctx)
                return
            except ScheduleError:
                pass
        schedule_blocks(sch, ctx)

    return schedule


def _axis_attr(attrs, ndim):
    axis = attrs.get("axis", -1)
    return axis + ndim if axis < 0 else axis


def _last_axis_only(attrs, ndim):
    axis = _axis_attr(attrs, ndim)
    return axis if axis == ndim - 1 else None


layer_norm.def_schedule(_row_schedule(_axis_attr))
rms_norm.def_schedule(_row_schedule(_axis_attr))
instance_norm.def_schedule(_row_schedule(lambda attrs, ndim: 2))
lp_normalize.def_schedule(_row_schedule(_last_axis_only))
for _op in (batch_norm, batch_norm_training, group_norm, mean_variance_normalization, lrn):
    _op.def_schedule(schedule_blocks)
