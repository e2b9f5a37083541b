"""lookup_table: an elementwise chain from one 8-bit tensor to an 8-bit tensor becomes a table lookup.

What fake_quantization_to_integer leaves in float between two quantized tensors of one shape (a QDQ
GELU: dequantize -> divide -> erf -> quantize -> qnn.add -> dequantize -> multiply ... -> quantize; a
QDQ sigmoid or hard-swish) maps each of the 256 values of its 8-bit input to one 8-bit output. The
pass evaluates that map once, on the 256 values, with tessera's own kernels (graph/const_eval: the
table holds exactly what the chain computes), and replaces the chain by qnn.lookup(x, table): one byte
load an element instead of the float chain (erf, divisions, three roundings) for each.

A chain qualifies when every node in it is elementwise or broadcast (ops/registry OpPattern; a
qnn.quantize / qnn.dequantize with one scale), has one output of the result's shape, and reads only
the chain's values, the one 8-bit input x (of the result's shape), or constants of one element; and it
has at least MIN_NODES nodes (a single requantization costs about what the lookup does). A chain whose
table cannot be computed (an op that refuses the 256-value vector) is left as it is.
"""
from __future__ import annotations

import numpy as np

from ...errors import TesseraError
from ...ops.registry import OpPattern, get_op
from ..builder import Builder
from ..const_eval import evaluate_constants
from ..ir import Graph, Node, TensorType, Value
from .context import PassContext
from .dead_code_elimination import dead_code_elimination

EIGHT_BIT = ("uint8", "int8")
MIN_NODES = 3
MAX_NODES = 64      # the search backwards from a result stops there
_ELEMWISE = (OpPattern.ELEMWISE, OpPattern.BROADCAST)
# injective in general (a scale per channel along an axis), elementwise with one scale and zero point
_PER_TENSOR = ("qnn.quantize", "qnn.dequantize")


def _elementwise(node: Node, shape, constants) -> bool:
    if len(node.outputs) != 1 or tuple(node.output.shape) != shape:
        return False
    if node.op not in _PER_TENSOR and get_op(node.op, node.name).pattern not in _ELEMWISE:
        return False
    for v in node.inputs:
        if v in constants:
            if np.asarray(constants[v]).size != 1:
                return False
        elif tuple(v.shape) != shape:
            return False
    return True


def _chain(y: Value, constants, order) -> tuple | None:
    """(x, the chain's nodes in graph order) for the 8-bit result y, the furthest 8-bit x back that y
    is a function of alone; None when there is none with MIN_NODES nodes."""
    shape = tuple(y.shape)
    if y.producer is None or not _elementwise(y.producer, shape, constants):
        return None
    region = {y.producer}
    frontier = {v for v in y.producer.inputs if v not in constants}
    best = None
    while len(region) <= MAX_NODES:
        if len(frontier) == 1:
            (x,) = frontier
            if str(x.dtype) in EIGHT_BIT and len(region) >= MIN_NODES:
                best = (x, sorted(region, key=order.__getitem__))
        # expand the latest value of the frontier (so branches meet again at their common source)
        v = max(frontier, key=lambda f: order.get(f.producer, -1), default=None)
        if v is None or v.producer is None or not _elementwise(v.producer, shape, constants):
            break
        frontier.discard(v)
        region.add(v.producer)
        frontier.update(u for u in v.producer.inputs if u not in constants)
    return best


def _tables(chains, constants, target) -> list:
    """For each (x, y, nodes) of `chains`: the 256 values of y for x = 0..255 (uint8) or -128..127 (int8),
    computed by the chain itself; all chains in one graph, compiled and run once."""
    b = Builder("lookup_tables")
    feeds, wanted = {}, []
    for c, (x, y, nodes) in enumerate(chains):
        lo = -128 if str(x.dtype) == "int8" else 0
        t = b.input(f"x{c}", (256,), str(x.dtype))
        feeds[t] = np.arange(lo, lo + 256).astype(str(x.dtype))
        vmap = {x: t}
        for v in {u for n in nodes for u in n.inputs if u in constants}:
            vmap[v] = b.const(np.asarray(constants[v]).reshape(()), v.name)
        for n in nodes:
            vmap[n.output] = b.node(n.op, [vmap[v] for v in n.inputs], dict(n.attrs), name=n.name).output
        wanted.append(vmap[y])
    b.output(*wanted)
    g = b.finish()
    return [np.asarray(t).reshape(256) for t in evaluate_constants(wanted, {**g.constants, **feeds}, target)]


def lookup_table(graph: Graph, ctx=None) -> Graph:
    """`graph` with each qualifying 8-bit -> 8-bit elementwise chain (module docstring) one qnn.lookup."""
    ctx = PassContext.of(ctx)
    constants = graph.constants
    order = {n: i for i, n in enumerate(graph.nodes)}
    consumers, outputs = graph.consumers(), set(graph.outputs)
    chains, covered = [], set()
    # from the last node back, so a chain is taken whole before its own 8-bit middle values are tried
    for n in reversed(graph.nodes):
        if n in covered or len(n.outputs) != 1 or str(n.output.dtype) not in EIGHT_BIT:
            continue
        y = n.output
        found = _chain(y, constants, order)
        if found is None:
            continue
        x, nodes = found
        # a middle value read outside the chain stays computed: then the chain is only worth it whole
        inner = {m.output for m in nodes} - {y}
        if any(v in outputs or any(c not in nodes for c, _ in consumers.get(v, [])) for v in inner):
            continue
        chains.append((x, y, nodes))
        covered.update(nodes)
    if not chains:
        return graph
    try:
        tables = _tables(chains, constants, ctx.target)
    except TesseraError:      # one chain's ops refuse the vector: each alone, those that fail left as they are
        tables = []
        for c in chains:
            try:
                tables.append(_tables([c], constants, ctx.target)[0])
            except TesseraError:
                tables.append(None)
    plans, new_consts = {}, {}
    for (x, y, _), table in zip(chains, tables):
        if table is None:
            continue
        tv = Value(f"{y.name}_table", TensorType.of(table))
        new_consts[tv] = table
        plans[y.producer] = (x, tv)
    if not plans:
        return graph
    # one rewrite in graph order: a lookup reads its x as rewritten so far (x may be an earlier lookup's)
    vmap, out = {}, []
    for n in graph.nodes:
        ins = tuple(vmap.get(v, v) for v in n.inputs)
        m = n
        if any(a is not b for a, b in zip(ins, n.inputs)):
            m = Node(n.op, ins, n.attrs, n.name, [o.type for o in n.outputs], [o.name for o in n.outputs])
            vmap.update(zip(n.outputs, m.outputs))
        out.append(m)
        if n in plans:
            x, tv = plans[n]
            look = Node("qnn.lookup", (vmap.get(x, x), tv), {}, f"{n.name}_lookup", [n.output.type],
                        [f"{n.output.name}_lookup"])
            out.append(look)
            vmap[n.output] = look.output
    g = Graph(graph.inputs, [vmap.get(v, v) for v in graph.outputs], out, {**constants, **new_consts},
              graph.name, *graph.interface)
    return dead_code_elimination(g)
