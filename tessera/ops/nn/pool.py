"""Pooling over the spatial axes of NC[D]HW data: nn.max_pool{1,2,3}d, nn.avg_pool{1,2,3}d,
nn.lp_pool (N-d), nn.max_pool_with_indices (ONNX MaxPool's Indices output), nn.global_avg_pool,
nn.global_max_pool.

A window starts at out * stride - pad_begin; taps outside the input are skipped (max, lp) or
count as zero (avg). ceil_mode rounds the output extent up but drops a last window that would
start in the end padding (as ONNX Runtime and PyTorch). avg_pool divides by the taps inside the
input (count_include_pad=False) or inside the padded input (True).
"""
from __future__ import annotations

import itertools
import math

from ... import te
from ...errors import ShapeError, TesseraError
from ...graph.ir import TensorType
from ...ir import expr as E
from ..registry import OpPattern, register_op
from .._schedule import schedule_blocks
from . import _util as U


# ---------------------------------------------------------------------------------------------
# shapes
# ---------------------------------------------------------------------------------------------
def _pool_attrs(op, attrs, nd):
    size = U.int_tuple(op, "pool_size", attrs["pool_size"], nd, minimum=1)
    strides = U.int_tuple(op, "strides", attrs["strides"], nd, minimum=1)
    dilation = U.int_tuple(op, "dilation", attrs["dilation"], nd, minimum=1)
    padding = U.padding_tuple(op, attrs["padding"], nd)
    for k in range(nd):
        if padding[k] >= (size[k] - 1) * dilation[k] + 1 or padding[nd + k] >= (size[k] - 1) * dilation[k] + 1:
            raise ShapeError(f"{op}: padding {padding} must be smaller than the (dilated) window {size} on "
                             f"each axis, or a window could hold only padding")
    return size, strides, dilation, padding


def pool_out_shape(op, data: TensorType, attrs) -> tuple:
    if data.ndim < 3:
        raise ShapeError(f"{op}: data must be (N, C, spatial...) of rank >= 3, got {data}")
    nd = data.ndim - 2
    size, strides, dilation, padding = _pool_attrs(op, attrs, nd)
    spatial = U.static_dims(op, data, range(2, nd + 2), "spatial dimensions")
    ceil_mode = bool(attrs.get("ceil_mode", False))
    out = []
    for k in range(nd):
        window = dilation[k] * (size[k] - 1) + 1
        span = spatial[k] + padding[k] + padding[nd + k] - window
        if span < 0:
            raise ShapeError(f"{op}: window {size} (dilated extent {window} on spatial axis {k}) is larger "
                             f"than the padded input ({spatial[k]} + {padding[k]} + {padding[nd + k]})")
        if ceil_mode:
            o = -(-span // strides[k]) + 1
            if (o - 1) * strides[k] >= spatial[k] + padding[k]:
                o -= 1
        else:
            o = span // strides[k] + 1
        out.append(o)
    return tuple(data.shape[:2]) + tuple(out)


def _window(data, nd, y, rk, size, strides, dilation, padding, out_spatial):
    """(input indices, in-bounds conditions) of taps rk (reduce axes, or ints for one unrolled tap)
    of output point y."""
    conds, idx = [], []
    for k in range(nd):
        S = int(data.shape[2 + k].value)
        pos = y[k] * strides[k] - padding[k]
        if size[k] > 1:
            pos = pos + rk[k] * dilation[k]
        idx.append(pos)
        fixed = isinstance(rk[k], int)  # an unrolled tap: drop the bounds it always satisfies
        first = rk[k] * dilation[k] - padding[k] if fixed else -padding[k]
        last = (out_spatial[k] - 1) * strides[k] - padding[k] + \
            (rk[k] if fixed else size[k] - 1) * dilation[k]
        if first < 0:
            conds.append(pos >= 0)
        if last >= S:
            conds.append(pos < S)
    return idx, conds


def _count_table(k, nd, S, size, strides, dilation, padding, out_k, include_pad):
    """Per output position on axis k: the number of taps counted by avg_pool."""
    lo, hi = (-padding[k], S + padding[nd + k]) if include_pad else (0, S)
    counts = []
    for y in range(out_k):
        start = y * strides[k] - padding[k]
        counts.append(sum(1 for r in range(size[k]) if lo <= start + r * dilation[k] < hi))
    return counts, lo, hi


def _count_expr(y, counts, lo, hi, size, stride, dilation, pad):
    """The count on one axis as an expression of the output index y (a constant when uniform)."""
    if len(set(counts)) == 1:
        return te.const(counts[0], "int32"), counts[0]
    start = y * stride - pad

    def ceildiv(a):
        return (a + (dilation - 1)) // dilation if dilation > 1 else a

    r_lo = E.max_expr(ceildiv(lo - start), 0)
    r_hi = E.min_expr(ceildiv(hi - start), size)
    return E.max_expr(r_hi - r_lo, 0), None


def pool_nd(data, kind, pool_size, strides=1, dilation=1, padding=0, ceil_mode=False,
            count_include_pad=False, p=2, name=None):
    """Pooling compute: kind is "max", "avg" or "lp"."""
    nd = data.ndim - 2
    op = f"nn.{kind}_pool"
    attrs = dict(pool_size=pool_size, strides=strides, dilation=dilation, padding=padding, ceil_mode=ceil_mode)
    shape = pool_out_shape(op, U.ttype(data), attrs)
    size, strides, dilation, padding = _pool_attrs(op, attrs, nd)
    out_spatial = shape[2:]
    shape = U.shape_exprs(shape, data)
    sp = U.SPATIAL_NAMES[nd]
    names = ["n", "c"] + [f"o{s}" for s in sp]
    rk = [te.reduce_axis((0, size[k]), f"r{sp[k]}") for k in range(nd)]
    dt = data.dtype
    acc = U.accum_dtype(dt)
    name = name or f"{kind}_pool{nd}d"

    # windows of at most 64 taps are unrolled into one elementwise expression (no reduction loop:
    # the output rows vectorize); larger windows reduce over loops. A padded input (the pad value
    # never wins: the lowest value for max, 0 for sums) keeps bounds tests out of the taps.
    unrolled = math.prod(size) <= 64
    taps = list(itertools.product(*[range(e) for e in size])) if unrolled else None
    src, src_pad = data, padding
    if unrolled:
        ends = []
        for k in range(nd):
            S = int(data.shape[2 + k].value)
            need = (out_spatial[k] - 1) * strides[k] + (size[k] - 1) * dilation[k] + 1 - padding[k] - S
            ends.append(max(need, 0))
        full = tuple(padding[:nd]) + tuple(ends)
        if any(full):
            from .conv import _pad

            fill = te.min_value(dt) if kind == "max" else te.const(0, dt)
            src = _pad(data, full, nd, fill, name="pad_temp")
            src_pad = (0,) * (2 * nd)

    def tap_value(n, c, y, k, fill):
        idx, conds = _window(src, nd, y, k, size, strides, dilation, src_pad, out_spatial)
        v = src[(n, c, *idx)] if kind == "max" else U.cast(src[(n, c, *idx)], acc)
        if kind == "lp":
            v = v * v if p == 2 else (te.abs(v) if p == 1 else te.power(te.abs(v), te.const(float(p), acc)))
        return te.if_then_else(te.all(*conds), v, fill) if conds else v

    if kind == "max":
        def body(n, c, *y):
            if unrolled:
                out = None
                for k in taps:
                    v = tap_value(n, c, y, k, te.min_value(dt))
                    out = v if out is None else E.max_expr(out, v)
                return out
            return te.max(tap_value(n, c, y, rk, te.min_value(dt)), axis=rk)

        return U.compute(shape, names, body, name)

    if unrolled:
        def total_at(n, c, y):
            out = None
            for k in taps:
                v = tap_value(n, c, y, k, te.const(0, acc))
                out = v if out is None else out + v
            return out
    else:
        total = U.compute(shape, names, lambda n, c, *y: te.sum(tap_value(n, c, y, rk, te.const(0, acc)), axis=rk),
                          f"{name}_sum")

        def total_at(n, c, y):
            return total[(n, c, *y)]

    if kind == "lp":
        def fin(n, c, *y):
            s = total_at(n, c, y)
            r = te.sqrt(s) if p == 2 else (s if p == 1 else te.power(s, te.const(1.0 / p, acc)))
            return U.cast(r, dt)

        return U.compute(shape, names, fin, name)

    tables = [_count_table(k, nd, int(data.shape[2 + k].value), size, strides, dilation, padding,
                           out_spatial[k], count_include_pad) for k in range(nd)]

    def avg(n, c, *y):
        const_count, exprs = 1, []
        for k in range(nd):
            counts, lo, hi = tables[k]
            e, cval = _count_expr(y[k], counts, lo, hi, size[k], strides[k], dilation[k], padding[k])
            if cval is not None:
                const_count *= cval
            else:
                exprs.append(e)
        s = total_at(n, c, y)
        if not exprs:
            return U.cast(s * te.const(1.0 / const_count, acc), dt) if const_count & (const_count - 1) == 0 \
                else U.cast(s / te.const(float(const_count), acc), dt)
        cnt = exprs[0]
        for e in exprs[1:]:
            cnt = cnt * e
        if const_count != 1:
            cnt = cnt * const_count
        return U.cast(s / cnt.astype(acc), dt)

    return U.compute(shape, names, avg, name)


def _register_pool(kind, nd):
    name = f"nn.{kind}_pool{nd}d"
    attrs = {"pool_size": None, "strides": (1,) * nd, "dilation": (1,) * nd, "padding": (0,) * (2 * nd),
             "ceil_mode": False}
    if kind == "avg":
        attrs["count_include_pad"] = False
    from ..registry import REQUIRED
    attrs["pool_size"] = REQUIRED
    op = register_op(name, inputs=("data",), pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs=attrs,
                     doc=f"{nd}-d {kind} pooling of NC{'DHW'[3 - nd:]} data; padding (begin..., end...).")

    @op.def_infer
    def _infer(types, attrs, _name=name):
        (data,) = types
        U.check_rank(_name, data, nd + 2, "data")
        U.check_dtype(_name, data, U.FLOATS + (("int8", "uint8") if kind == "max" else ()), "data")
        return [TensorType(pool_out_shape(_name, data, attrs), data.dtype)]

    @op.def_compute
    def _compute(tensors, attrs):
        return [pool_nd(tensors[0], kind, attrs["pool_size"], attrs["strides"], attrs["dilation"],
                        attrs["padding"], attrs["ceil_mode"], attrs.get("count_include_pad", False))]

    op.def_schedule(schedule_blocks)
    return op


for _nd in (1, 2, 3):
    _register_pool("max", _nd)
    _register_pool("avg", _nd)


# ---------------------------------------------------------------------------------------------
# lp pool (N-d)
# ---------------------------------------------------------------------------------------------
def _nd_of(op, data: TensorType):
    if data.ndim < 3:
        raise ShapeError(f"{op}: data must be (N, C, spatial...) of rank >= 3, got {data}")
    return data.ndim - 2


lp_pool = register_op("nn.lp_pool", inputs=("data",), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
                      attrs={"pool_size": None, "strides": 1, "dilation": 1, "padding": 0, "ceil_mode": False,
                             "p": 2},
                      doc="(sum |x|^p)^(1/p) over each window of NC[D]HW data (ONNX LpPool).")


@lp_pool.def_infer
def _lp_infer(types, attrs):
    (data,) = types
    op = "nn.lp_pool"
    _nd_of(op, data)
    U.check_dtype(op, data, U.FLOATS, "data")
    if attrs["pool_size"] is None:
        raise TesseraError(f"{op}: attribute 'pool_size' is required")
    if float(attrs["p"]) <= 0:
        raise TesseraError(f"{op}: p={attrs['p']} must be positive")
    return [TensorType(pool_out_shape(op, data, attrs), data.dtype)]


@lp_pool.def_compute
def _lp_compute(tensors, attrs):
    p = attrs["p"]
    p = int(p) if float(p).is_integer() else float(p)
    return [pool_nd(tensors[0], "lp", attrs["pool_size"], attrs["strides"], attrs["dilation"], attrs["padding"],
                    attrs["ceil_mode"], p=p, name=f"lp_pool{tensors[0].ndim - 2}d")]


# ---------------------------------------------------------------------------------------------
# max pool with indices (ONNX MaxPool's second output)
# ---------------------------------------------------------------------------------------------
max_pool_with_indices = register_op(
    "nn.max_pool_with_indices", inputs=("data",), pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_outputs=2,
    attrs={"pool_size": None, "strides": 1, "dilation": 1, "padding": 0, "ceil_mode": False,
           "storage_order": 0, "index_dtype": "int64"},
    doc="max pooling that also returns, per output, the flat index of the (first) maximum in the "
        "input tensor (row-major, or column-major over the spatial axes with storage_order=1).")


@max_pool_with_indices.def_infer
def _mpi_infer(types, attrs):
    (data,) = types
    op = "nn.max_pool_with_indices"
    _nd_of(op, data)
    U.check_dtype(op, data, U.FLOATS + ("int8", "uint8"), "data")
    if attrs["pool_size"] is None:
        raise TesseraError(f"{op}: attribute 'pool_size' is required")
    if attrs["storage_order"] not in (0, 1):
        raise TesseraError(f"{op}: storage_order={attrs['storage_order']} must be 0 (row-major) or 1")
    U.static_dims(op, data, (1,), "channel dimension")
    shape = pool_out_shape(op, data, attrs)
    return [TensorType(shape, data.dtype), TensorType(shape, U.out_dtype(op, attrs["index_dtype"], "int64"))]


def _argmax_reducer():
    def fcombine(x, y):
        keep = x[1] >= y[1]
        return E.Select(keep, x[0], y[0]), E.Select(keep, x[1], y[1])

    def fidentity(t0, t1):
        return te.const(-1, t0), te.min_value(t1)

    return te.comm_reducer(fcombine, fidentity, name="argmax")


_ARGMAX = _argmax_reducer()


@max_pool_with_indices.def_compute
def _mpi_compute(tensors, attrs):
    (data,) = tensors
    nd = data.ndim - 2
    op = "nn.max_pool_with_indices"
    shape = pool_out_shape(op, U.ttype(data), attrs)
    size, strides, dilation, padding = _pool_attrs(op, attrs, nd)
    out_spatial = shape[2:]
    shape = U.shape_exprs(shape, data)
    idt = U.out_dtype(op, attrs["index_dtype"], "int64")
    sp = U.SPATIAL_NAMES[nd]
    rk = [te.reduce_axis((0, size[k]), f"r{sp[k]}") for k in range(nd)]
    S = [int(s.value) for s in data.shape[2:]]
    C = int(data.shape[1].value)
    col_major = attrs["storage_order"] == 1
    plane = math.prod(S)

    def body(n, c, *y):
        idx, conds = _window(data, nd, y, rk, size, strides, dilation, padding, out_spatial)
        v = data[(n, c, *idx)]
        if conds:
            v = te.if_then_else(te.all(*conds), v, te.min_value(data.dtype))
        flat = (n.astype(idt) * C + c.astype(idt)) * plane
        stride = 1
        order = range(nd) if col_major else reversed(range(nd))
        for k in order:
            flat = flat + idx[k].astype(idt) * stride
            stride *= S[k]
        return _ARGMAX((flat, v), axis=rk)

    names = ["n", "c"] + [f"o{s}" for s in sp]
    indices, values = U.compute(shape, names, body, "max_pool")
    return [values, indices]


# ---------------------------------------------------------------------------------------------
# global pools
# ---------------------------------------------------------------------------------------------
def _register_global(kind):
    name = f"nn.global_{kind}_pool"
    op = register_op(name, inputs=("data",), pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs={},
                     doc=f"{kind} over all spatial axes of NC[D]HW data; keeps them as extent 1.")

    @op.def_infer
    def _infer(types, attrs):
        (data,) = types
        nd = _nd_of(name, data)
        U.check_dtype(name, data, U.FLOATS + (("int8", "uint8") if kind == "max" else ()), "data")
        U.static_dims(name, data, range(2, nd + 2), "spatial dimensions")
        return [TensorType(tuple(data.shape[:2]) + (1,) * nd, data.dtype)]

    @op.def_compute
    def _compute(tensors, attrs):
        (data,) = tensors
        nd = data.ndim - 2
        sp = U.SPATIAL_NAMES.get(nd) or tuple(f"s{k}" for k in range(nd))
        S = [int(s.value) for s in data.shape[2:]]
        rk = [te.reduce_axis((0, S[k]), f"r{sp[k]}") for k in range(nd)]
        shape = tuple(data.shape[:2]) + (1,) * nd
        names = ["n", "c"] + [f"o{s}" for s in sp]
        dt = data.dtype
        if kind == "max":
            return [U.compute(shape, names, lambda n, c, *_: te.max(data[(n, c, *rk)], axis=rk), "global_max_pool")]
        acc = U.accum_dtype(dt)
        total = U.compute(shape, names, lambda n, c, *_: te.sum(U.cast(data[(n, c, *rk)], acc), axis=rk),
                          "global_avg_pool_sum")
        count = math.prod(S)
        return [U.compute(shape, names, lambda *i: U.cast(total[i] / te.const(float(count), acc), dt),
                          "global_avg_pool")]

    op.def_schedule(schedule_blocks)
    return op


_register_global("avg")
_register_global("max")


lp_pool.def_schedule(schedule_blocks)
max_pool_with_indices.def_schedule(schedule_blocks)
