"""Constants and shape queries: Constant, ConstantOfShape, Shape, Size.

A Shape of statically known extents is a constant (so the shape subgraphs exporters emit fold
away while converting); only symbolic extents leave a `shape_of` op in the graph.
"""
from __future__ import annotations

import numpy as np

from . import converter

_VALUE_ATTRS = ("value", "value_float", "value_floats", "value_int", "value_ints", "value_string",
                "value_strings", "sparse_value")


@converter("Constant")
def _constant(ctx):
    given = [a for a in _VALUE_ATTRS if ctx.has_attr(a)]
    if len(given) != 1:
        ctx.unsupported(f"a Constant sets exactly one of {list(_VALUE_ATTRS)}; this one sets {given or 'none'}")
    name = given[0]
    if name in ("value_string", "value_strings"):
        ctx.unsupported("string constants: tessera has no string tensors")
    v = ctx.attr(name)
    if name == "value_float":
        arr = np.array(v, np.float32)
    elif name == "value_floats":
        arr = np.array(v, np.float32).reshape(-1)
    elif name == "value_int":
        arr = np.array(v, np.int64)
    elif name == "value_ints":
        arr = np.array(v, np.int64).reshape(-1)
    else:
        arr = np.asarray(v)
    return ctx.const(arr, "value")


@converter("ConstantOfShape", since=9)
def _constant_of_shape(ctx):
    shape = ctx.const_input(0)
    if shape.ndim != 1:
        ctx.unsupported(f"the shape input must be 1-D, got shape {shape.shape}")
    dims = [int(d) for d in shape.reshape(-1)]
    if any(d < 0 for d in dims):
        ctx.unsupported(f"negative extent in shape {dims}")
    value = ctx.attr("value")
    if value is None:
        value = np.zeros((1,), np.float32)
    value = np.asarray(value)
    if value.size != 1:
        ctx.unsupported(f"'value' must hold one element, it has {value.size}")
    ctx.check_constant_size(dims, value.dtype)
    return ctx.const(np.full(dims, value.reshape(-1)[0], dtype=value.dtype), "value")


def _clamped_range(ndim, start, end):
    start = 0 if start is None else int(start)
    end = ndim if end is None else int(end)
    start = min(max(start + ndim if start < 0 else start, 0), ndim)
    end = min(max(end + ndim if end < 0 else end, 0), ndim)
    return start, max(start, end)


@converter("Shape")
def _shape(ctx):
    x = ctx.input(0)
    start, end = _clamped_range(x.type.ndim, ctx.attr("start"), ctx.attr("end"))
    dims = x.type.shape[start:end]
    if all(isinstance(d, int) for d in dims):
        return ctx.const(np.array(dims, np.int64).reshape(-1), "shape")
    return ctx.op("shape_of", x, start=start, end=end, dtype="int64")


@converter("Size")
def _size(ctx):
    x = ctx.input(0)
    if x.type.is_static:
        return ctx.const(np.array(x.type.numel(), np.int64), "size")
    return ctx.op("ndarray_size", x, dtype="int64")
