"""The graph level: a typed dataflow graph of operators, its builder, passes and executors."""
from .builder import Builder
from .ir import Graph, Node, TensorType, Value

__all__ = ["Builder", "Graph", "Node", "TensorType", "Value"]
