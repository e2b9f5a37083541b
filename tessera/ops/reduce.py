"""Reductions (pattern COMM_REDUCE): sum, mean, max, min, prod, argmax, argmin, logsumexp, and the
scans cumsum/cumprod (OPAQUE).

axis: None reduces every axis, a tuple the listed ones (an empty tuple reduces nothing); keepdims
keeps reduced axes as extent 1. float16/bfloat16 accumulate in float32 and round once; float32
accumulates in float32 (as numpy does for short rows), integers in their own dtype (exact, wrapping
like C). An empty reduction gives the identity: 0 for sum, 1 for prod, -inf/+inf for float max/min
(the dtype's lowest/highest for integers), NaN for a float mean.
"""
from __future__ import annotations

import math

from .. import te
from ..errors import ShapeError
from ..ir import TensorType
from ..ir import expr as E
from ..ir.dtype import DataType
from ._common import (ALL, FLOATS, NUMERIC, accum_dtype, check_dtype, const, normalize_axes,
                      normalize_axis)
from ._schedule import schedule_reduce
from .registry import OpPattern, register_op as _register_op

_sel = E.Select


def register_op(name, **kw):
    """register_op with this family's default schedule."""
    op = _register_op(name, **kw)
    op.def_schedule(schedule_reduce)
    return op


def _max_identity(dtype):
    dt = DataType(dtype)
    return E.const(-math.inf, dt) if dt.is_float() else te.min_value(dt)


def _min_identity(dtype):
    dt = DataType(dtype)
    return E.const(math.inf, dt) if dt.is_float() else te.max_value(dt)


MAX = te.comm_reducer(E.max_expr, _max_identity, name="max")
MIN = te.comm_reducer(E.min_expr, _min_identity, name="min")
PROD = te.comm_reducer(lambda x, y: x * y, lambda t: const(1, t), name="prod")
SUM = te.sum


def _reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if k in axes else d for k, d in enumerate(shape))
    return tuple(d for k, d in enumerate(shape) if k not in axes)


def _axes(op, attrs, ndim):
    axis = attrs["axis"]
    if axis is None:
        return tuple(range(ndim))
    return normalize_axes(op, axis, ndim, "axis")


def reduce_compute(x, axes, keepdims, value_fn, reducer, name, out_dtype=None):
    """te compute of reducer(value_fn(x[point])) over `axes` of x (shared with other families).

    value_fn(load) -> expression to reduce (e.g. a cast to the accumulation dtype)."""
    raxes = {a: te.reduce_axis((0, x.shape[a]), name=f"r{a}") for a in axes}
    out_shape = [1 if (k in axes) else d for k, d in enumerate(x.shape)] if keepdims else \
        [d for k, d in enumerate(x.shape) if k not in axes]

    def body(*i):
        idx, j = [], 0
        for k in range(len(x.shape)):
            if k in axes:
                idx.append(raxes[k].var)
                if keepdims:
                    j += 1
            else:
                idx.append(i[j])
                j += 1
        v = value_fn(x[tuple(idx)])
        if not raxes:
            return v
        return reducer(v, axis=[raxes[a] for a in axes])

    return te.compute(out_shape, body, name=name)


def _register_reduction(name, dtypes, doc):
    """An op reducing data of one of `dtypes` over `axis` (all axes by default), of data's dtype; its
    compute is the caller's."""
    op = register_op(name, inputs=("data",), pattern=OpPattern.COMM_REDUCE,
                     attrs={"axis": None, "keepdims": False}, doc=doc)

    @op.def_infer
    def _infer(types, attrs):
        (t,) = types
        check_dtype(name, t.dtype, dtypes, "data")
        return [TensorType(_reduced_shape(t.shape, _axes(name, attrs, t.ndim), attrs["keepdims"]), t.dtype)]

    return op


def _register_reduce(name, reducer, dtypes, doc, accum=True):
    op = _register_reduction(name, dtypes, doc)

    @op.def_compute
    def _compute(tensors, attrs):
        (x,) = tensors
        check_dtype(name, x.dtype, dtypes, "data")
        axes = _axes(name, attrs, len(x.shape))
        acc = accum_dtype(x.dtype) if accum else x.dtype
        if acc == x.dtype:
            return [reduce_compute(x, axes, attrs["keepdims"], lambda v: v, reducer, f"T_{name}")]
        red = reduce_compute(x, axes, attrs["keepdims"], lambda v: v.astype(acc), reducer, f"T_{name}_acc")
        return [te.compute(red.shape, lambda *i: red[i].astype(x.dtype), name=f"T_{name}")]

    return op


_register_reduce("sum", SUM, NUMERIC, "Sum over axis.")
_register_reduce("prod", PROD, NUMERIC, "Product over axis.")
_register_reduce("max", MAX, ALL, "Maximum over axis (-inf for an empty float reduction).", accum=False)
_register_reduce("min", MIN, ALL, "Minimum over axis (+inf for an empty float reduction).", accum=False)

mean = _register_reduction("mean", NUMERIC, "Arithmetic mean over axis (integers: the sum divided with truncation).")


def _count(x, axes, dtype):
    n = None
    for a in axes:
        d = x.shape[a]
        d = d.astype("int64") if d.dtype != "int64" else d
        n = d if n is None else n * d
    n = E.const(1, "int64") if n is None else n
    return n.astype(dtype) if isinstance(n, E.PrimExpr) else const(n, dtype)


@mean.def_compute
def _mean_compute(tensors, attrs):
    (x,) = tensors
    axes = _axes("mean", attrs, len(x.shape))
    acc = accum_dtype(x.dtype) if x.dtype.is_float() else DataType("int64")
    s = reduce_compute(x, axes, attrs["keepdims"], lambda v: v.astype(acc) if v.dtype != acc else v, SUM,
                       "T_mean_sum")
    n = _count(x, axes, acc)
    if acc.is_float():
        return [te.compute(s.shape, lambda *i: (s[i] / n).astype(x.dtype), name="T_mean")]
    safe = te.max(n, E.const(1, "int64"))
    return [te.compute(s.shape, lambda *i: te.truncdiv(s[i], safe).astype(x.dtype), name="T_mean")]


# ---------------------------------------------------------------------------------------------
# argmax / argmin
# ---------------------------------------------------------------------------------------------
def _arg_reducer(is_max, last):
    """(index, value) reducer; ties go to the lower (first) or higher (last) index, whatever the
    order the values are combined in. A float NaN ranks above every number, as in numpy (and onnx's
    reference): the first NaN is both the arg max and the arg min (the last with select_last_index)."""
    def fcombine(x, y):
        earlier = y[0] > x[0] if last else y[0] < x[0]
        if not x[1].dtype.is_float():
            better = y[1] > x[1] if is_max else y[1] < x[1]
            return _pick(te.any(better, te.all(y[1] == x[1], earlier)), x, y)
        # !(y <= x) (argmin: !(y >= x)) holds where y is larger or either is NaN: there y wins over a
        # number x, and over a NaN x only as a NaN that comes earlier; elsewhere only an earlier tie
        # wins. One comparison decides the common case (y no larger), as before NaN was handled.
        past = E.Not(y[1] <= x[1] if is_max else y[1] >= x[1])
        nan_side = te.any(x[1] == x[1], te.all(y[1] != y[1], earlier))
        return _pick(_sel(past, nan_side, te.all(y[1] == x[1], earlier)), x, y)

    def fidentity(t0, t1):
        idx = E.const(-1, t0) if last else te.max_value(t0)
        return idx, (_max_identity(t1) if is_max else _min_identity(t1))

    return te.comm_reducer(fcombine, fidentity, name="argmax" if is_max else "argmin")


def _pick(take_y, x, y):
    return _sel(take_y, y[0], x[0]), _sel(take_y, y[1], x[1])


_ARG_REDUCERS = {(m, l): _arg_reducer(m, l) for m in (True, False) for l in (True, False)}


def _register_arg(name, is_max):
    op = register_op(name, inputs=("data",), pattern=OpPattern.COMM_REDUCE,
                     attrs={"axis": 0, "keepdims": True, "select_last_index": False},
                     doc=f"Index (int64) of the {'largest' if is_max else 'smallest'} element along axis; "
                         f"ties pick the first index (the last with select_last_index); a NaN is picked "
                         f"first, as numpy does.")

    @op.def_infer
    def _infer(types, attrs):
        (t,) = types
        check_dtype(name, t.dtype, NUMERIC, "data")
        axis = normalize_axis(name, attrs["axis"], t.ndim)
        if t.shape[axis] == 0:
            raise ShapeError(f"{name}: axis {axis} of {t.shape} is empty; there is no {name}")
        return [TensorType(_reduced_shape(t.shape, (axis,), attrs["keepdims"]), "int64")]

    @op.def_compute
    def _compute(tensors, attrs):
        (x,) = tensors
        axis = normalize_axis(name, attrs["axis"], len(x.shape))
        red = _ARG_REDUCERS[(is_max, bool(attrs["select_last_index"]))]
        k = te.reduce_axis((0, x.shape[axis]), name="k")
        keep = attrs["keepdims"]
        shape = [1 if j == axis else d for j, d in enumerate(x.shape)] if keep else \
            [d for j, d in enumerate(x.shape) if j != axis]

        def body(*i):
            idx = list(i)
            if keep:
                idx[axis] = k.var
            else:
                idx.insert(axis, k.var)
            return red((k.var.astype("int64"), x[tuple(idx)]), axis=k)

        index, _ = te.compute(shape, body, name=f"T_{name}")
        return [index]

    return op


_register_arg("argmax", True)
_register_arg("argmin", False)


# ---------------------------------------------------------------------------------------------
# logsumexp
# ---------------------------------------------------------------------------------------------
logsumexp = _register_reduction("logsumexp", FLOATS,
                                "log(sum(exp(x))) over axis, shifted by the maximum so it does not overflow.")


@logsumexp.def_compute
def _lse_compute(tensors, attrs):
    (x,) = tensors
    check_dtype("logsumexp", x.dtype, FLOATS, "data")
    axes = _axes("logsumexp", attrs, len(x.shape))
    acc = accum_dtype(x.dtype)
    m = reduce_compute(x, axes, True, lambda v: v.astype(acc), MAX, "T_lse_max")
    zero = const(0, acc)

    def shift(mv):  # an infinite maximum (all -inf, or a +inf) shifts by 0 instead
        return _sel(te.isinf(mv), zero, mv)

    raxes = {a: te.reduce_axis((0, x.shape[a]), name=f"r{a}") for a in axes}

    def sbody(*i):
        idx = [raxes[k].var if k in axes else i[k] for k in range(len(x.shape))]
        midx = [const(0, i[k].dtype) if k in axes else i[k] for k in range(len(x.shape))]
        v = te.exp(x[tuple(idx)].astype(acc) - shift(m[tuple(midx)]))
        return te.sum(v, axis=[raxes[a] for a in axes]) if raxes else v

    s = te.compute(m.shape, sbody, name="T_lse_sum")
    keep = attrs["keepdims"]
    shape = [1 if k in axes else d for k, d in enumerate(x.shape)] if keep else \
        [d for k, d in enumerate(x.shape) if k not in axes]

    def out(*i):
        full, j = [], 0
        for k in range(len(x.shape)):
            if k in axes:
                full.append(E.const(0, "int32"))
                j += 1 if keep else 0
            else:
                full.append(i[j])
                j += 1
        full = tuple(full)
        return (te.log(s[full]) + shift(m[full])).astype(x.dtype)

    return [te.compute(shape, out, name="T_logsumexp")]


# ---------------------------------------------------------------------------------------------
# cumsum / cumprod
# ---------------------------------------------------------------------------------------------
def _register_scan(name, reducer, identity_is_one):
    op = register_op(name, inputs=("data",), pattern=OpPattern.OPAQUE,
                     attrs={"axis": 0, "exclusive": False, "reverse": False},
                     doc=f"Running {'product' if identity_is_one else 'sum'} along axis (ONNX "
                         f"{'CumProd' if identity_is_one else 'CumSum'}: exclusive leaves out the element "
                         f"itself, reverse runs from the end).")

    @op.def_infer
    def _infer(types, attrs):
        (t,) = types
        check_dtype(name, t.dtype, NUMERIC, "data")
        normalize_axis(name, attrs["axis"], t.ndim)
        return [t]

    @op.def_compute
    def _compute(tensors, attrs):
        (x,) = tensors
        axis = normalize_axis(name, attrs["axis"], len(x.shape))
        acc = accum_dtype(x.dtype)
        k = te.reduce_axis((0, x.shape[axis]), name="k")
        excl, rev = bool(attrs["exclusive"]), bool(attrs["reverse"])

        def body(*i):
            pos, kv = i[axis], k.var
            kv = kv.astype(pos.dtype) if kv.dtype != pos.dtype else kv
            if rev:
                cond = kv > pos if excl else kv >= pos
            else:
                cond = kv < pos if excl else kv <= pos
            idx = tuple(i[:axis]) + (k.var,) + tuple(i[axis + 1:])
            v = x[idx]
            return reducer(v.astype(acc) if acc != v.dtype else v, axis=k, where=cond)

        if acc == x.dtype:
            return [te.compute(x.shape, body, name=f"T_{name}")]
        r = te.compute(x.shape, body, name=f"T_{name}_acc")
        return [te.compute(x.shape, lambda *i: r[i].astype(x.dtype), name=f"T_{name}")]

    return op


_register_scan("cumsum", SUM, False)
_register_scan("cumprod", PROD, True)

__all__ = ["MAX", "MIN", "PROD", "SUM", "reduce_compute"]
