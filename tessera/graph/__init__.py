"""The graph level: a typed dataflow graph of operators, its builder, passes, the graph compiler
(optimized graph -> kernels + the runtime's plan) and export. The executors live in tessera.runtime."""
import importlib

from . import passes
from .builder import Builder
from .deferred import DeferredGraph
from .ir import Function, Graph, Node, TensorType, Value
from .printer import script, structural_equal
from .transform import subgraph, substitute, topo_nodes


def __getattr__(name):
    # the graph compiler, its kernels, export and constant evaluation pull in the build layer
    # (backend, codegen, the C compiler driver, the runtime): they load on first use, so that
    # `import tessera.graph` (every frontend) stays light
    homes = {"get_kernel": "kernels", "compile_graph": "compiler", "load_graph": "export",
             "evaluate_constants": "const_eval", "fold_constants": "const_eval", "bind_params": "const_eval",
             "NotConstantError": "const_eval"}
    if name in homes:
        return getattr(importlib.import_module(f".{homes[name]}", __name__), name)
    raise AttributeError(f"module 'tessera.graph' has no attribute {name!r}")


__all__ = ["Builder", "DeferredGraph", "Function", "Graph", "Node", "TensorType", "Value", "compile_graph", "load_graph",
           "evaluate_constants", "fold_constants", "bind_params", "NotConstantError", "substitute",
           "subgraph", "topo_nodes", "structural_equal", "script", "get_kernel"]
