"""image.resize: N-d resampling with ONNX Resize semantics (nearest / linear / cubic, every
coordinate_transformation_mode and nearest_mode, cubic_coeff_a, exclude_outside, antialias,
tf_crop_and_resize with extrapolation_value).

Resampling is separable: for every resized axis a small table stage maps each output coordinate
to its source taps and weights (computed in float64, in the same order of operations as the ONNX
reference, so nearest-neighbour ties round alike); the output gathers the taps of all axes and
sums their products. Axes that keep their extent with scale 1 are copied through untouched.
Integer data is rounded half to even and saturated, as ONNX's saturate_cast.
"""
from __future__ import annotations

import math

from .. import te
from ..errors import ShapeError, TesseraError
from ..ir import TensorType
from ..ir import expr as E
from .registry import REQUIRED, OpPattern, register_op
from ._schedule import schedule_blocks
from .nn import _util as U

METHODS = ("nearest", "linear", "cubic")
COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_crop_and_resize", "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_F64 = "float64"

resize = register_op(
    "image.resize", inputs=("data",), pattern=OpPattern.INJECTIVE,
    attrs={"sizes": REQUIRED, "scales": (), "roi": (), "method": "nearest",
           "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_floor",
           "cubic_coeff_a": -0.75, "exclude_outside": False, "extrapolation_value": 0.0, "antialias": False},
    doc="resample data to `sizes` (one entry per axis); `scales` (per axis, default sizes/in) are the "
        "factors the coordinate transform divides by, as ONNX Resize's scales input; roi is "
        "(starts..., ends...) for tf_crop_and_resize.")


# ---------------------------------------------------------------------------------------------
# attributes
# ---------------------------------------------------------------------------------------------
class _Plan:
    """Per axis: None (copied through) or (in, out, scale, roi_lo, roi_hi)."""

    def __init__(self, op, data: TensorType, attrs):
        r = data.ndim
        if r == 0:
            raise ShapeError(f"{op}: data must have rank >= 1")
        for key, allowed in (("method", METHODS), ("coordinate_transformation_mode", COORD_MODES),
                             ("nearest_mode", NEAREST_MODES)):
            if attrs[key] not in allowed:
                raise TesseraError(f"{op}: {key}={attrs[key]!r} is not one of {', '.join(allowed)}")
        self.method, self.mode = attrs["method"], attrs["coordinate_transformation_mode"]
        sizes = tuple(attrs["sizes"])
        if len(sizes) != r:
            raise ShapeError(f"{op}: sizes {sizes} must have one entry per axis of {data}")
        scales = tuple(float(s) for s in attrs["scales"]) if attrs["scales"] else None
        if scales is not None and len(scales) != r:
            raise ShapeError(f"{op}: scales {scales} must have one entry per axis of {data}")
        roi = tuple(float(v) for v in attrs["roi"]) if attrs["roi"] else None
        if self.mode == "tf_crop_and_resize":
            if roi is None or len(roi) != 2 * r:
                raise ShapeError(f"{op}: tf_crop_and_resize needs roi with {2 * r} entries (starts, ends), "
                                 f"got {roi}")
        self.axes = []
        for k in range(r):
            d, o = data.shape[k], sizes[k]
            s = scales[k] if scales is not None else None
            lo, hi = (roi[k], roi[r + k]) if roi is not None and self.mode == "tf_crop_and_resize" else (0.0, 1.0)
            if isinstance(o, str) or isinstance(d, str):
                if o != d or (s is not None and s != 1.0) or (lo, hi) != (0.0, 1.0):
                    raise ShapeError(f"{op}: axis {k} of {data} is symbolic; it can only be kept as is "
                                     f"(sizes entry {o!r}, scale {s})")
                self.axes.append(None)
                continue
            if not isinstance(o, int) or o < 0:
                raise ShapeError(f"{op}: sizes entry {o!r} for axis {k} must be a non-negative int")
            if s is None:
                s = o / d if d else 1.0
            if s <= 0:
                raise ShapeError(f"{op}: scale {s} for axis {k} must be positive")
            if o == d and math.isclose(s, 1.0) and math.isclose(lo, 0.0) and math.isclose(hi, 1.0):
                self.axes.append(None)  # identity (as the reference skips it)
                continue
            if d == 0:
                raise ShapeError(f"{op}: axis {k} of {data} is empty and cannot be resized to {o}")
            self.axes.append((d, o, s, lo, hi))
        self.shape = tuple(sizes)


@resize.def_infer
def _resize_infer(types, attrs):
    (data,) = types
    U.check_dtype("image.resize", data, U.NUMERIC, "data")
    plan = _Plan("image.resize", data, attrs)
    return [TensorType(plan.shape, data.dtype)]


# ---------------------------------------------------------------------------------------------
# coordinates
# ---------------------------------------------------------------------------------------------
def _f(v):
    return te.const(float(v), _F64)


def _source_coord(mode, y, d, o, s, lo, hi):
    """x_ori (float64 expression of output index y) and the 'extrapolated' condition (or None),
    in the operation order of the ONNX reference."""
    yf = y.astype(_F64)
    out_w = s * d  # the reference's float output width
    if mode == "align_corners":
        x = _f(0.0) if out_w == 1 else yf * _f(d - 1) / _f(out_w - 1)
    elif mode == "asymmetric":
        x = yf / _f(s)
    elif mode == "tf_crop_and_resize":
        if out_w == 1:
            x = _f((hi - lo) * (d - 1) / 2)
        else:
            x = yf * _f(hi - lo) * _f(d - 1) / _f(out_w - 1)
        x = x + _f(lo * (d - 1))
        return x, te.any(x < _f(0.0), x > _f(d - 1))
    elif mode == "pytorch_half_pixel":
        x = _f(-0.5) if out_w == 1 else (yf + _f(0.5)) / _f(s) - _f(0.5)
    elif mode == "half_pixel":
        x = (yf + _f(0.5)) / _f(s) - _f(0.5)
    elif mode == "half_pixel_symmetric":
        adjustment = o / out_w
        offset = (d / 2) * (1 - adjustment)
        x = _f(offset) + (yf + _f(0.5)) / _f(s) - _f(0.5)
    elif mode == "tf_half_pixel_for_nn":
        x = (yf + _f(0.5)) / _f(s)
    else:  # pragma: no cover - checked by _Plan
        raise TesseraError(f"image.resize: coordinate_transformation_mode {mode!r}")
    return x, None


def _clamp(i, d):
    return E.min_expr(E.max_expr(i, 0), d - 1)


def _first_tap(x, n):
    """(first tap index, ratio) of an n-tap kernel (n even) at source coordinate x, computed as the
    ONNX reference does: the window is found on x + n/2 (where float rounding can move a point
    that is a hair above an integer onto it) and the ratio on x itself (1 at an integer)."""
    pad = n // 2
    xp = x + _f(pad)
    p = te.floor(xp)
    start = p.astype("int32") - pad + te.if_then_else(xp - p == _f(0.0), te.const(0, "int32"),
                                                      te.const(1, "int32")) - pad
    fl = te.floor(x)
    ratio = te.if_then_else(x == fl, _f(1.0), x - fl)
    return start, ratio


def _nearest_index(x, nearest_mode):
    """The reference's nearest neighbour: tap 0 or 1 of a 2-tap window, chosen by the ratio."""
    start, ratio = _first_tap(x, 2)
    one, zero = te.const(1, "int32"), te.const(0, "int32")
    if nearest_mode == "round_prefer_floor":
        pick = te.if_then_else(te.any(ratio == _f(1.0), ratio > _f(0.5)), one, zero)
    elif nearest_mode == "round_prefer_ceil":
        pick = te.if_then_else(te.any(ratio == _f(1.0), ratio >= _f(0.5)), one, zero)
    elif nearest_mode == "floor":
        pick = te.if_then_else(ratio == _f(1.0), one, zero)
    else:
        pick = one
    return start + pick


def _kernel(method, a, dist):
    """Antialiasing kernel at signed distance `dist` (float64), as the reference's *_antialias."""
    dist = te.abs(dist)
    if method == "linear":
        return E.min_expr(E.max_expr(_f(1.0) - dist, _f(0.0)), _f(1.0))
    A = _f(a)
    d2 = dist * dist
    d3 = dist * d2
    near = (A + _f(2.0)) * d3 - (A + _f(3.0)) * d2 + _f(1.0)
    far = A * d3 - _f(5.0) * A * d2 + _f(8.0) * A * dist - _f(4.0) * A
    return te.if_then_else(dist <= _f(1.0), near, te.if_then_else(dist < _f(2.0), far, _f(0.0)))


def _tap_weight(method, a, t, ratio):
    """Weight of tap t (0..n-1) of the plain linear / cubic kernel, in the reference's form."""
    if method == "linear":
        return te.if_then_else(t == 0, _f(1.0) - ratio, ratio)
    A = _f(a)

    def outer(u):
        return ((A * u - _f(5.0) * A) * u + _f(8.0) * A) * u - _f(4.0) * A

    def inner(v):
        return ((A + _f(2.0)) * v - (A + _f(3.0))) * v * v + _f(1.0)

    one_minus = _f(1.0) - ratio
    return te.if_then_else(t == 0, outer(ratio + _f(1.0)), te.if_then_else(
        t == 1, inner(ratio), te.if_then_else(t == 2, inner(one_minus), outer(one_minus + _f(1.0)))))


def _taps(method, scale, antialias):
    """Number of taps of the kernel on one axis (the reference's footprint)."""
    if method == "nearest":
        return 1
    if not antialias:
        return 2 if method == "linear" else 4
    s = min(scale, 1.0)
    start = math.floor(-(1.0 if method == "linear" else 2.0) / s) + 1
    return 2 - 2 * start


# ---------------------------------------------------------------------------------------------
# compute
# ---------------------------------------------------------------------------------------------
@resize.def_compute
def _resize_compute(tensors, attrs):
    (x,) = tensors
    plan = _Plan("image.resize", U.ttype(x), attrs)
    out_shape = U.shape_exprs(plan.shape, x)
    method = plan.method
    antialias = bool(attrs["antialias"]) and method != "nearest"
    exclude = bool(attrs["exclude_outside"])
    a = float(attrs["cubic_coeff_a"])
    acc = "float64" if x.dtype == "float64" else "float32"
    ext_conds = []
    tables = {}  # axis -> (n, idx tensor, weight tensor or None)
    for k, ax in enumerate(plan.axes):
        if ax is None:
            continue
        d, o, s, lo, hi = ax
        n = _taps(method, s, antialias)
        extrap = None
        if plan.mode == "tf_crop_and_resize":
            extrap = U.compute((o,), ["y"], lambda y, d=d, o=o, s=s, lo=lo, hi=hi: _source_coord(
                plan.mode, y, d, o, s, lo, hi)[1], f"resize_extrapolated{k}")
            ext_conds.append((k, extrap))
        if n == 1:
            idx = U.compute((o,), ["y"], lambda y, d=d, o=o, s=s, lo=lo, hi=hi: _clamp(_nearest_index(
                _source_coord(plan.mode, y, d, o, s, lo, hi)[0], attrs["nearest_mode"]), d), f"resize_index{k}")
            tables[k] = (1, idx, None)
            continue
        half = n // 2 - 1
        ss = min(s, 1.0) if antialias else 1.0

        def base_ratio(y, d=d, o=o, s=s, lo=lo, hi=hi, n=n):
            return _first_tap(_source_coord(plan.mode, y, d, o, s, lo, hi)[0], n)

        def raw_index(y, t):
            return base_ratio(y)[0] + t

        idx = U.compute((o, n), ["y", "t"], lambda y, t, d=d: _clamp(raw_index(y, t), d), f"resize_index{k}")

        def raw_weight(y, t, d=d, half=half, ss=ss):
            _, ratio = base_ratio(y)
            if antialias:
                w = _kernel(method, a, ((t - half).astype(_F64) - ratio) * _f(ss))
            else:
                w = _tap_weight(method, a, t, ratio)
            if exclude:
                i = raw_index(y, t)
                w = te.if_then_else(te.all(i >= 0, i < d), w, _f(0.0))
            return w

        if antialias or exclude:
            wr = U.compute((o, n), ["y", "t"], raw_weight, f"resize_weight_raw{k}")
            rt = te.reduce_axis((0, n), "rt")
            wsum = U.compute((o,), ["y"], lambda y, wr=wr, rt=rt: te.sum(wr[y, rt], axis=rt), f"resize_weight_sum{k}")

            def norm(y, t, wr=wr, wsum=wsum):
                sm = wsum[y]
                return (wr[y, t] / te.if_then_else(sm == _f(0.0), _f(1.0), sm)).astype(acc)

            w = U.compute((o, n), ["y", "t"], norm, f"resize_weight{k}")
        else:
            w = U.compute((o, n), ["y", "t"], lambda y, t: raw_weight(y, t).astype(acc), f"resize_weight{k}")
        tables[k] = (n, idx, w)

    names = U.axis_names(x.ndim)
    multi = {k: v for k, v in tables.items() if v[0] > 1}
    taps = {k: te.reduce_axis((0, multi[k][0]), f"t{k}") for k in sorted(multi)}

    def source(i):
        src = []
        for k, ik in enumerate(i):
            if k not in tables:
                src.append(ik)
            elif k in taps:
                src.append(tables[k][1][ik, taps[k]])
            else:
                src.append(tables[k][1][ik])
        return tuple(src)

    def extrapolate(v, i):
        if not ext_conds:
            return v
        fill = float(attrs["extrapolation_value"])
        if not x.dtype.is_float():
            lo_, hi_ = int(te.min_value(x.dtype).value), int(te.max_value(x.dtype).value)
            fill = min(max(round(fill), lo_), hi_)
        return te.if_then_else(te.any(*[t[i[k]] for k, t in ext_conds]), te.const(fill, x.dtype), v)

    if not taps:  # nearest: a pure gather
        return [U.compute(out_shape, names, lambda *i: extrapolate(x[source(i)], i), "resize")]

    def body(*i):
        v = U.cast(x[source(i)], acc)
        for k in sorted(taps):
            v = v * tables[k][2][i[k], taps[k]]
        return te.sum(v, axis=[taps[k] for k in sorted(taps)])

    def finish(*i):
        v = total[i]
        if x.dtype.is_float():
            v = U.cast(v, x.dtype)
        else:  # round half to even, then saturate
            lo_, hi_ = te.min_value(x.dtype), te.max_value(x.dtype)
            v = E.min_expr(E.max_expr(te.round(v), U.cast(lo_, acc)), U.cast(hi_, acc)).astype(x.dtype)
        return extrapolate(v, i)

    total = U.compute(out_shape, names, body, "resize_sum")
    return [U.compute(out_shape, names, finish, "resize")]


resize.def_schedule(schedule_blocks)
