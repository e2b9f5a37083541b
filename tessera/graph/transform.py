"""Graph rewriting helpers shared by the frontends, constant evaluation and the graph passes.

Graphs are immutable: `substitute` returns a new Graph in which some Values are replaced by
others, rebuilding only the nodes downstream of a replacement (untouched nodes keep their identity).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..errors import TesseraError
from .ir import Graph, Node, Value


def topo_nodes(values, stop=()) -> list:
    """The nodes that the given Values depend on, producers first (post-order from the values).

    stop: Values treated as leaves (their producers are not visited through them).
    """
    order, done = [], set()
    for root in values:
        if root.producer is None or root.producer in done or root in stop:
            continue
        stack = [(root.producer, iter(root.producer.inputs))]
        done.add(root.producer)
        while stack:
            node, it = stack[-1]
            for v in it:
                p = v.producer
                if p is not None and p not in done and v not in stop:
                    done.add(p)
                    stack.append((p, iter(p.inputs)))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def substitute(graph: Graph, mapping: Mapping[Value, Value], constants: Mapping | None = None,
               prune: bool = True) -> Graph:
    """A new graph where every use of a key of `mapping` reads the mapped Value instead.

    constants: new constant Values (Value -> array) that mapped Values may be. prune: drop nodes
    and constants that no output depends on any more (graph inputs always stay).
    """
    vmap = dict(mapping)
    for old, new in vmap.items():
        if old.type != new.type:
            raise TesseraError(f"substitute: %{old.name} is {old.type} but its replacement %{new.name} "
                               f"is {new.type}")
    nodes = []
    for n in graph.nodes:
        ins = tuple(vmap.get(v, v) for v in n.inputs)
        if any(a is not b for a, b in zip(ins, n.inputs)):
            new = Node(n.op, ins, n.attrs, n.name, [o.type for o in n.outputs], [o.name for o in n.outputs])
            for o, no in zip(n.outputs, new.outputs):
                vmap.setdefault(o, no)
            n = new
        nodes.append(n)
    outputs = [vmap.get(v, v) for v in graph.outputs]
    consts = dict(graph.constants)
    consts.update(constants or {})
    if prune:
        live = set(topo_nodes(outputs))
        nodes = [n for n in nodes if n in live]
        used = set(outputs)
        for n in nodes:
            used.update(n.inputs)
        consts = {v: a for v, a in consts.items() if v in used}
    return Graph(graph.inputs, outputs, nodes, consts, graph.name, *graph.interface)


def subgraph(outputs, constants: Mapping, name: str = "subgraph") -> Graph:
    """The graph computing `outputs` from `constants` and whatever graph inputs they depend on."""
    nodes = topo_nodes(outputs)
    inputs, consts, seen = [], {}, set()
    for v in list(outputs) + [v for n in nodes for v in n.inputs]:
        if v in seen or v.producer is not None:
            continue
        seen.add(v)
        if v in constants:
            consts[v] = np.asarray(constants[v])
        else:
            inputs.append(v)
    return Graph(inputs, outputs, nodes, consts, name)
