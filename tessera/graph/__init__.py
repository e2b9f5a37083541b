"""The graph level: a typed dataflow graph of operators, its builder, its Graph -> Graph passes, its
kernels, lowering (optimized graph -> kernels + the runtime's plan), constant evaluation and the graph
document of a library. What runs a compiled graph is tessera.executor's; the runtimes are tessera.runtime's."""
from . import passes
from .builder import Builder
from .const_eval import NotConstantError, bind_params, evaluate_constants, fold_constants
from .deferred import DeferredGraph
from .document import load_graph
from .ir import Function, Graph, Node, TensorType, Value
from .kernels import get_kernel
from .lowering import compile_graph
from .printer import script, structural_equal
from .transform import subgraph, substitute, topo_nodes

__all__ = ["Builder", "DeferredGraph", "Function", "Graph", "Node", "TensorType", "Value", "compile_graph", "load_graph",
           "evaluate_constants", "fold_constants", "bind_params", "NotConstantError", "substitute",
           "subgraph", "topo_nodes", "structural_equal", "script", "get_kernel"]
