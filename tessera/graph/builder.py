"""Builder: write a graph in Python, with shape and type inference at every step.

    gb = graph.Builder("mlp")
    x = gb.input("x", ("N", 784))
    w = gb.const(np.random.rand(128, 784).astype("float32"), "fc1.weight")
    y = gb.op("nn.relu", gb.op("nn.dense", x, w))
    gb.output(y)
    g = gb.finish()
"""
from __future__ import annotations

import numpy as np

from ..errors import TesseraError
from .ir import Graph, Node, TensorType, Value
from ..ops.registry import get_op
from ..ir.names import fresh_name


class Builder:
    """Accumulates inputs, constants and nodes; `op` infers output types through the op registry."""

    def __init__(self, name: str = "main"):
        self.name = name
        self.inputs: list[Value] = []
        self.constants: dict[Value, np.ndarray] = {}
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        self._names: set[str] = set()

    def unique_name(self, hint: str) -> str:
        """`hint`, or `hint_1`, `hint_2`... if taken (value and node names stay unique)."""
        name = fresh_name(hint or "t", self._names)
        self._names.add(name)
        return name

    def input(self, name: str, shape, dtype="float32") -> Value:
        if name in self._names:
            raise TesseraError(f"graph builder: the name {name!r} is already used")
        self._names.add(name)
        v = Value(name, TensorType(shape, dtype))
        self.inputs.append(v)
        return v

    def const(self, array, name: str = "const") -> Value:
        arr = np.asarray(array)
        v = Value(self.unique_name(name), TensorType.of(arr))
        self.constants[v] = arr
        return v

    def op(self, op_name: str, *inputs: Value, name: str | None = None, **attrs):
        """Apply a registered op; returns its output Value (or a tuple for several outputs)."""
        node = self.node(op_name, inputs, attrs, name=name)
        return node.outputs[0] if len(node.outputs) == 1 else node.outputs

    def node(self, op_name: str, inputs, attrs=None, name: str | None = None,
             output_names=None) -> Node:
        node_name = self.unique_name(name or op_name.rsplit(".", 1)[-1])
        opdef = get_op(op_name, node_name)
        attrs = opdef.normalize_attrs(attrs, node_name)
        types = opdef.infer_types([v.type for v in inputs], attrs, node_name)
        if output_names is not None:
            output_names = [self.unique_name(n) if n != node_name else n for n in output_names]
        node = Node(op_name, inputs, attrs, node_name, types, output_names)
        self.nodes.append(node)
        return node

    def output(self, *values: Value) -> None:
        self.outputs.extend(values)

    def finish(self) -> Graph:
        if not self.outputs:
            raise TesseraError(f"graph {self.name!r} has no outputs; call builder.output(value)")
        return Graph(self.inputs, self.outputs, self.nodes, self.constants, self.name)
