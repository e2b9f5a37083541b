"""Shape queries as ops: `shape_of` and `ndarray_size` (TVM's names).

They read only the extents of their input, so they matter only for symbolic dimensions: with a
static shape the frontend emits a constant instead. The extents arrive in the kernel as the
symbolic variables bound from the argument's shape.
"""
from __future__ import annotations

from .. import te
from ..errors import DTypeError
from ..ir.dtype import DataType
from .registry import OpPattern, register_op

_INDEX = ("int32", "int64")


def _check_index_dtype(op, dtype):
    dt = DataType(dtype)
    if dt not in _INDEX:
        raise DTypeError(f"{op}: dtype must be int32 or int64, got {dt}")
    return dt


def shape_range(ndim, start, end):
    """ONNX Shape's start/end: negative counts from the back, both clamped to [0, ndim]."""
    start = 0 if start is None else start
    end = ndim if end is None else end
    start = min(max(start + ndim if start < 0 else start, 0), ndim)
    end = min(max(end + ndim if end < 0 else end, 0), ndim)
    return start, max(start, end)


shape_of = register_op("shape_of", inputs=("data",), pattern=OpPattern.OPAQUE,
                       attrs={"start": 0, "end": None, "dtype": "int64"},
                       doc="The extents data.shape[start:end] as a 1-D tensor.")


@shape_of.def_infer
def _(types, attrs):
    (t,) = types
    dt = _check_index_dtype("shape_of", attrs["dtype"])
    lo, hi = shape_range(t.ndim, attrs["start"], attrs["end"])
    return [t.with_shape((hi - lo,)).with_dtype(dt)]


@shape_of.def_compute
def _(tensors, attrs):
    (x,) = tensors
    dt = DataType(attrs["dtype"])
    lo, hi = shape_range(len(x.shape), attrs["start"], attrs["end"])
    dims = [x.shape[d].astype(dt) for d in range(lo, hi)]

    def f(i):
        out = te.const(0, dt)
        for k in reversed(range(len(dims))):
            out = te.if_then_else(i == k, dims[k], out)
        return out

    return [te.compute((hi - lo,), f, name="T_shape")]


ndarray_size = register_op("ndarray_size", inputs=("data",), pattern=OpPattern.OPAQUE,
                           attrs={"dtype": "int64"}, doc="The element count of data, a scalar.")


@ndarray_size.def_infer
def _(types, attrs):
    dt = _check_index_dtype("ndarray_size", attrs["dtype"])
    return [types[0].with_shape(()).with_dtype(dt)]


@ndarray_size.def_compute
def _(tensors, attrs):
    (x,) = tensors
    dt = DataType(attrs["dtype"])
    n = te.const(1, dt)
    for s in x.shape:
        n = n * s.astype(dt)
    return [te.compute((), lambda: n, name="T_size")]


__all__ = ["shape_of", "ndarray_size"]
