"""Sorting along one axis: topk, argsort, sort (pattern OPAQUE).

Written in TE as a rank sort: every element's rank is the number of elements that order before it
(greater for descending / smaller for ascending, ties broken by the lower index, as ONNX TopK and
a stable numpy argsort), then output position r gathers the element of rank r. That is O(n^2) per
row along the axis: exact, branch-free and parallel, and fine for the extents models sort (top-k
of logits, detection boxes); very long rows are slow. NaN orders above every number (as numpy).
"""
from __future__ import annotations

from .. import te
from ..errors import ShapeError, TesseraError
from ..ir import TensorType
from .registry import REQUIRED, OpPattern, register_op
from .nn import _util as U

_SORTABLE = U.NUMERIC


def _before(a, b, ia, ib, descending):
    """Whether element (a, index ia) orders strictly before (b, ib)."""
    if a.dtype.is_float():
        na, nb = te.isnan(a), te.isnan(b)
        if descending:  # NaN is the largest: it comes first
            gt = te.any(te.all(na, ~nb), a > b)
        else:
            gt = te.any(te.all(nb, ~na), a < b)
        eq = te.any(a == b, te.all(na, nb))
    else:
        gt = a > b if descending else a < b
        eq = a == b
    return te.any(gt, te.all(eq, ia < ib))


def sort_indices(x, axis, k, descending, idx_dtype, name):
    """(positions, indices) stages: the indices (idx_dtype) of the first k elements in order."""
    n = x.shape[axis]
    names = U.axis_names(x.ndim)
    j = te.reduce_axis((0, n), "j")

    def rank_body(*i):
        other = list(i)
        other[axis] = j
        cond = _before(x[tuple(other)], x[i], j, i[axis], descending)
        return te.sum(te.if_then_else(cond, te.const(1, "int32"), te.const(0, "int32")), axis=j)

    rank = U.compute(x.shape, names, rank_body, f"{name}_rank")
    out_shape = tuple(k if d == axis else s for d, s in enumerate(x.shape))
    q = te.reduce_axis((0, n), "q")

    def pick(*i):
        src = list(i)
        src[axis] = q
        hit = rank[tuple(src)] == i[axis]
        return te.sum(te.if_then_else(hit, q.var.astype(idx_dtype), te.const(0, idx_dtype)), axis=q)

    return U.compute(out_shape, names, pick, f"{name}_indices")


def _gather(x, indices, axis, name):
    def body(*i):
        src = list(i)
        src[axis] = indices[i]
        return x[tuple(src)]

    return U.compute(indices.shape, U.axis_names(x.ndim), body, name)


def _check(op, data: TensorType, attrs):
    U.check_dtype(op, data, _SORTABLE, "data")
    if data.ndim == 0:
        raise ShapeError(f"{op}: data must have rank >= 1")
    axis = U.norm_axis(op, attrs["axis"], data.ndim)
    (n,) = U.static_dims(op, data, (axis,), "sorted dimension")
    return axis, n


# ---------------------------------------------------------------------------------------------
topk = register_op("topk", inputs=("data",), pattern=OpPattern.OPAQUE, num_outputs=2,
                   attrs={"k": REQUIRED, "axis": -1, "largest": True, "sorted": True, "dtype": "int64"},
                   doc="the k largest (or smallest) elements along axis and their indices; ties keep the "
                       "lower index first. Outputs are always in order (sorted=False allows any order).")


@topk.def_infer
def _topk_infer(types, attrs):
    (data,) = types
    axis, n = _check("topk", data, attrs)
    k = attrs["k"]
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= n:
        raise ShapeError(f"topk: k={k!r} must be an int in [0, {n}] (the extent of axis {axis} of {data})")
    idt = U.out_dtype("topk", attrs["dtype"], "int64")
    if not idt.is_integer():
        raise TesseraError(f"topk: index dtype {idt} must be an integer type")
    shape = tuple(k if d == axis else s for d, s in enumerate(data.shape))
    return [TensorType(shape, data.dtype), TensorType(shape, idt)]


@topk.def_compute
def _topk_compute(tensors, attrs):
    (x,) = tensors
    axis = U.norm_axis("topk", attrs["axis"], x.ndim)
    idt = U.out_dtype("topk", attrs["dtype"], "int64")
    ind = sort_indices(x, axis, int(attrs["k"]), bool(attrs["largest"]), idt, "topk")
    return [_gather(x, ind, axis, "topk_values"), ind]


# ---------------------------------------------------------------------------------------------
argsort = register_op("argsort", inputs=("data",), pattern=OpPattern.OPAQUE,
                      attrs={"axis": -1, "is_ascend": True, "dtype": "int32"},
                      doc="the indices that sort data along axis (stable: equal elements keep their order).")


@argsort.def_infer
def _argsort_infer(types, attrs):
    (data,) = types
    _check("argsort", data, attrs)
    idt = U.out_dtype("argsort", attrs["dtype"], "int32")
    if not idt.is_integer():
        raise TesseraError(f"argsort: index dtype {idt} must be an integer type")
    return [TensorType(data.shape, idt)]


@argsort.def_compute
def _argsort_compute(tensors, attrs):
    (x,) = tensors
    axis = U.norm_axis("argsort", attrs["axis"], x.ndim)
    n = int(x.shape[axis].value)
    return [sort_indices(x, axis, n, not attrs["is_ascend"], U.out_dtype("argsort", attrs["dtype"], "int32"),
                         "argsort")]


# ---------------------------------------------------------------------------------------------
sort = register_op("sort", inputs=("data",), pattern=OpPattern.OPAQUE, attrs={"axis": -1, "is_ascend": True},
                   doc="data sorted along axis.")


@sort.def_infer
def _sort_infer(types, attrs):
    (data,) = types
    _check("sort", data, attrs)
    return [data]


@sort.def_compute
def _sort_compute(tensors, attrs):
    (x,) = tensors
    axis = U.norm_axis("sort", attrs["axis"], x.ndim)
    n = int(x.shape[axis].value)
    ind = sort_indices(x, axis, n, not attrs["is_ascend"], "int32", "sort")
    return [_gather(x, ind, axis, "sort")]
