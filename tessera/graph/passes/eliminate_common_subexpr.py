"""eliminate_common_subexpr: nodes that compute the same thing are merged into one.

Two nodes are the same computation when they apply the same op with equal attributes to the same
input Values; constants count as the same Value when their dtype, shape and bytes are equal (so
two copies of a weight, or two equal scalars, merge too). Scanning in graph order, merging one
pair can make their consumers equal in turn, and those merge in the same scan.
"""
from __future__ import annotations

import hashlib

import numpy as np

from ..ir import Graph, Node, attr_key
from .dead_code_elimination import dead_code_elimination
from .context import PassContext


def _const_key(arr: np.ndarray) -> tuple:
    return (str(arr.dtype), arr.shape, hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest())


def eliminate_common_subexpr(graph: Graph, ctx=None) -> Graph:
    """`graph` with duplicate computations (and duplicate constants) merged."""
    PassContext.of(ctx)   # the one pass signature: this pass needs none of the context
    vmap: dict = {}
    first_const: dict = {}
    for v, arr in graph.constants.items():
        key = _const_key(arr)
        rep = first_const.get(key)
        if rep is None:
            first_const[key] = v
        elif graph.constants[rep].tobytes() == arr.tobytes():
            vmap[v] = rep
    seen: dict = {}
    nodes = []
    changed = bool(vmap)
    for n in graph.nodes:
        ins = tuple(vmap.get(v, v) for v in n.inputs)
        key = (n.op, tuple((k, attr_key(a)) for k, a in sorted(n.attrs.items())), ins,
               tuple(o.type for o in n.outputs))
        twin = seen.get(key)
        if twin is not None:
            vmap.update(zip(n.outputs, twin.outputs))
            changed = True
            continue
        if any(a is not b for a, b in zip(ins, n.inputs)):
            nn = Node(n.op, ins, n.attrs, n.name, [o.type for o in n.outputs], [o.name for o in n.outputs])
            vmap.update(zip(n.outputs, nn.outputs))
            n = nn
        seen[key] = n
        nodes.append(n)
    if not changed:
        return graph
    out = Graph(graph.inputs, [vmap.get(v, v) for v in graph.outputs], nodes, graph.constants, graph.name,
                *graph.interface)
    return dead_code_elimination(out)
