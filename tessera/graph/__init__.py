"""The graph level: a typed dataflow graph of operators, its builder, passes, the graph compiler
(optimized graph -> kernels + the runtime's plan) and export. The executors live in tessera.runtime."""
from .builder import Builder
from .ir import Function, Graph, Node, TensorType, Value


def __getattr__(name):
    # the graph compiler and constant evaluation pull in the C compiler; load them on first use
    import importlib

    homes = {"get_kernel": "kernels", "compile_graph": "compiler", "load_graph": "export",
             "evaluate_constants": "const_eval", "fold_constants": "const_eval", "bind_params": "const_eval",
             "NotConstantError": "const_eval", "substitute": "transform", "subgraph": "transform",
             "topo_nodes": "transform", "structural_equal": "printer", "script": "printer"}
    if name in homes:
        return getattr(importlib.import_module(f".{homes[name]}", __name__), name)
    if name == "passes":
        return importlib.import_module(".passes", __name__)
    raise AttributeError(f"module 'tessera.graph' has no attribute {name!r}")


__all__ = ["Builder", "Function", "Graph", "Node", "TensorType", "Value", "compile_graph", "load_graph",
           "evaluate_constants", "fold_constants", "bind_params", "NotConstantError", "substitute",
           "subgraph", "topo_nodes", "structural_equal", "script", "get_kernel"]
