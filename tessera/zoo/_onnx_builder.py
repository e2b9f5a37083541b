"""A small writer of ONNX graphs for the zoo: named nodes and initializers, as an exporter lays them out.

Node names follow torch.onnx.export's scheme ("/layer1/layer1.0/conv1/Conv", outputs
"/layer1/layer1.0/conv1/Conv_output_0") and weights keep the framework's parameter names
("layer1.0.conv1.weight"), so the models exercise the same naming a real exported file has.
"""
from __future__ import annotations

import numpy as np

OPSET = 17          # what torch.onnx.export writes by default in the TorchScript era
IR_VERSION = 8      # the IR version that goes with opset 17


class OnnxGraphWriter:
    """Accumulates nodes, initializers, inputs and outputs; `model()` returns the ModelProto."""

    def __init__(self, name: str):
        self.name = name
        self.nodes: list = []
        self.initializers: list = []
        self.inputs: list = []
        self.outputs: list = []
        self._init_names: set = set()
        self._node_names: dict = {}
        self._consts: dict = {}

    # -- graph interface ----------------------------------------------------------------------
    def input(self, name: str, elem_type: int, shape) -> str:
        from onnx import helper

        self.inputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def output(self, value: str, name: str, elem_type: int, shape) -> str:
        """Declare `value` a graph output under `name` (an Identity renames it when they differ)."""
        from onnx import helper

        if value != name:
            self.nodes.append(helper.make_node("Identity", [value], [name], name=f"/{name}/Identity"))
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def initializer(self, name: str, array: np.ndarray) -> str:
        """Add a weight under its parameter name; a name is stored once."""
        from onnx import numpy_helper

        if name in self._init_names:
            raise ValueError(f"zoo: initializer {name!r} added twice")
        self._init_names.add(name)
        array = np.asarray(array)
        if not array.flags.c_contiguous:      # (np.ascontiguousarray would make a scalar 1-D)
            array = array.copy(order="C")
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def const(self, value, dtype=np.float32) -> str:
        """A shared scalar or small constant initializer (as a constant-folding exporter leaves them)."""
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        name = self._consts.get(key)
        if name is None:
            name = f"onnx::Const_{len(self._consts)}"
            self._consts[key] = name
            self.initializer(name, arr)
        return name

    def node(self, op_type: str, inputs, scope: str, n_outputs: int = 1, **attrs):
        """Add an `op_type` node named `{scope}/{op_type}`; returns its output name (a list for several)."""
        from onnx import helper

        base = f"{scope}/{op_type}"
        k = self._node_names.get(base, 0)
        self._node_names[base] = k + 1
        name = base if k == 0 else f"{base}_{k}"
        outs = [f"{name}_output_{i}" for i in range(n_outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if n_outputs == 1 else outs

    def model(self, doc: str = ""):
        from onnx import helper

        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.initializers)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tessera.zoo", producer_version="0.1.0", doc_string=doc)
        m.ir_version = IR_VERSION
        return m

