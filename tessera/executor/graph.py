"""The graph executor of a compiled graph: node by node from Python over the graph's own kernels."""
from __future__ import annotations

from ..graph.kernels import compile_kernels
from ..graph.lowering import CompiledGraph
from ..runtime.graph_executor import GraphExecutor
from .export import export_library


def graph_executor(compiled: CompiledGraph, opt_level=None):
    """The runtime GraphExecutor of a compiled graph, with the graph-side attachments: `graph`,
    `memory_plan` (the MemoryPlan), `opt_level`, `compiled`, and the exporter of its library."""
    compile_kernels(compiled.kernels.values())      # the ones not built on their own yet, in parallel
    exe = GraphExecutor(compiled.plan, compiled.kernels)
    exe.graph = compiled.graph
    exe.compiled = compiled
    if compiled.memory_plan is not None:
        exe.memory_plan = compiled.memory_plan
    exe.opt_level = opt_level
    exe.exporter = lambda _exe, path, prefix: export_library(compiled, path, prefix)
    return exe


__all__ = ["graph_executor"]
