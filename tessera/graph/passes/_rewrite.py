"""What the graph passes share: a node-by-node graph rewriter and constant-derivation analysis."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value
from ...ops.registry import get_op
from ..ir import TensorType
from ...ir.names import fresh_name
from .dead_code_elimination import dead_code_elimination


def const_derived(graph: Graph) -> set:
    """The Values computed from constants only (constants included): fold_constant can evaluate them."""
    out = set(graph.constants)
    for n in graph.nodes:
        if all(v in out for v in n.inputs):
            out.update(n.outputs)
    return out


class Rewriter:
    """Rebuilds a graph node by node: `emit` keeps a node (its inputs remapped), `make` adds a new
    one through the op registry (attrs normalized, types inferred, a fresh name), `replace` maps an
    old Value to a new one for every later reader, `finish` gives the new Graph (unused nodes and
    constants dropped)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.vmap: dict = {}
        self.nodes: list = []
        self.constants = dict(graph.constants)
        self.names = {v.name for v in graph.inputs} | {v.name for v in graph.constants}
        for n in graph.nodes:
            self.names.add(n.name)
            self.names.update(o.name for o in n.outputs)

    def fresh(self, hint: str) -> str:
        name = fresh_name(hint, self.names)
        self.names.add(name)
        return name

    def get(self, v: Value) -> Value:
        return self.vmap.get(v, v)

    def replace(self, old: Value, new: Value) -> None:
        self.vmap[old] = new

    def emit(self, n: Node) -> Node:
        ins = [self.get(v) for v in n.inputs]
        if any(a is not b for a, b in zip(ins, n.inputs)):
            nn = Node(n.op, ins, n.attrs, n.name, [o.type for o in n.outputs], [o.name for o in n.outputs])
            self.vmap.update(zip(n.outputs, nn.outputs))
            n = nn
        self.nodes.append(n)
        return n

    def make(self, op: str, *inputs: Value, name: str, takes_over=None, **attrs) -> Value:
        """A new node `op(*inputs, **attrs)` named `name` (made unique); takes_over: a node being
        replaced, whose node and output names the new node reuses."""
        node_name = takes_over.name if takes_over is not None else self.fresh(name)
        opdef = get_op(op, node_name)
        attrs = opdef.normalize_attrs(attrs, node_name)
        types = opdef.infer_types([v.type for v in inputs], attrs, node_name)
        out_names = [o.name for o in takes_over.outputs] if takes_over is not None else None
        node = Node(op, inputs, attrs, node_name, types, out_names)
        self.nodes.append(node)
        return node.outputs[0]

    def const(self, array, name: str) -> Value:
        arr = np.asarray(array)
        v = Value(self.fresh(name), TensorType.of(arr))
        self.constants[v] = arr
        return v

    def finish(self) -> Graph:
        outputs = [self.get(v) for v in self.graph.outputs]
        g = Graph(self.graph.inputs, outputs, self.nodes, self.constants, self.graph.name, *self.graph.interface)
        return dead_code_elimination(g)
