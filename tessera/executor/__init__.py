"""From a compiled graph to something that runs: the model library (kernels, weights, entry points,
graph document) and its export, the ahead-of-time executor over it, the graph executor over the
graph's own kernels, and the heterogeneous CPU + VDLA plan.

    from tessera.executor import build_aot, graph_executor, build_library, export_library
    exe = build_aot(compile_graph(graph, "c"))          # what tessera.compile returns for static shapes
"""
from .aot import build_aot
from .compiled import compiled_of
from .export import export_library
from .graph import graph_executor
from .hetero import HeteroPlan, partition_for_vdla
from .library import DEFAULT_PREFIX, Library, build_library, check_prefix

__all__ = ["DEFAULT_PREFIX", "HeteroPlan", "Library", "build_aot", "build_library", "check_prefix", "compiled_of",
           "export_library", "graph_executor", "partition_for_vdla"]
