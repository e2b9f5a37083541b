"""fold_constant: evaluate every subgraph that depends only on constants, once, at compile time.

One mechanism: the values are computed by `const_eval.fold_constants`, i.e. by tessera's own
kernels through the graph executor (what would have run at run time is what is folded). Shape
queries are constants too when their input's shape is static: `shape_of` / `ndarray_size` of
such a value become constants first, so the shape subgraphs exporters emit (Shape -> Gather ->
Concat -> Reshape) fold whole.
"""
from __future__ import annotations

import numpy as np

from ..const_eval import fold_constants
from ..ir import Graph, Value
from ..transform import substitute
from ...ir.dtype import DataType, numpy_dtype
from ...ops.shape import shape_range
from .context import PassContext


def _shape_constants(graph: Graph):
    """{shape query output: new constant Value} and the arrays, for queries of static shapes."""
    mapping, arrays = {}, {}
    for n in graph.nodes:
        if n.op not in ("shape_of", "ndarray_size") or not n.inputs[0].type.is_static:
            continue
        t = n.inputs[0].type
        out = n.outputs[0]
        dt = numpy_dtype(DataType(out.dtype))
        if n.op == "shape_of":
            lo, hi = shape_range(t.ndim, n.attrs["start"], n.attrs["end"])
            arr = np.array(t.shape[lo:hi], dtype=dt)
        else:
            arr = np.array(t.numel(), dtype=dt)
        v = Value(out.name, out.type)
        mapping[out] = v
        arrays[v] = arr
    return mapping, arrays


def fold_constant(graph: Graph, ctx=None) -> Graph:
    """`graph` with every constant-only subgraph replaced by its value (computed for `target`)."""
    target = PassContext.of(ctx).target
    mapping, arrays = _shape_constants(graph)
    if mapping:
        graph = substitute(graph, mapping, arrays)
    return fold_constants(graph, target)
