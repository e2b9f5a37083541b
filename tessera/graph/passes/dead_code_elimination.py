"""dead_code_elimination: drop the nodes no graph output depends on, and the constants nobody reads.

Graph inputs always stay (they are the graph's signature), even when nothing reads them.
"""
from __future__ import annotations

from ..ir import Graph
from ..transform import topo_nodes
from .context import PassContext


def dead_code_elimination(graph: Graph, ctx=None) -> Graph:
    """`graph` without the nodes that reach no output and the constants no node or output reads."""
    PassContext.of(ctx)   # the one pass signature: this pass needs none of the context
    live = set(topo_nodes(graph.outputs))
    nodes = [n for n in graph.nodes if n in live]
    used = set(graph.outputs)
    for n in nodes:
        used.update(n.inputs)
    constants = {v: a for v, a in graph.constants.items() if v in used}
    if len(nodes) == len(graph.nodes) and len(constants) == len(graph.constants):
        return graph
    return Graph(graph.inputs, graph.outputs, nodes, constants, graph.name, graph.input_names, graph.output_names)
