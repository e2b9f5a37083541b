"""The graph IR: a typed dataflow graph of operator nodes.

A `Graph` lists its runtime inputs, its outputs, its nodes in topological order, and its constants
(weights bound to Values). Every tensor is a `Value` with a `TensorType` (dtype + shape, where a
dimension is an int or the name of a symbolic extent such as "N"). A `Node` applies a registered
operator (`tessera.ops.registry`) to input Values with attributes and defines output Values.

Everything is immutable: passes build new Graphs (see `Graph.rewrite`). Values are compared by
identity; two graphs compare structurally with `structural_equal`.

A fused group (graph/passes/fuse_ops.py) is a node of op "fused" whose one attribute `function` is a
`Function`: a named subgraph of operator nodes that runs as one kernel (Relay's primitive
functions, called at the node). The node's inputs are the function's parameters, in order.
"""
from __future__ import annotations

import re
from types import MappingProxyType
from typing import Iterable, Mapping

import numpy as np

from ..errors import ShapeError, TesseraError
from ..ir.tensor_type import TensorType  # re-exported: part of the graph IR's API

# The text printer behind Graph.script() and Function.script(): graph/printer.py installs it when it
# loads (it imports this module's classes, so they cannot import it); `tessera.graph` loads it.
PRINTER: dict = {}

_set = object.__setattr__


class Value:
    """A tensor in the graph: a graph input, a constant, or output `index` of node `producer`."""

    __slots__ = ("name", "type", "producer", "index")

    def __init__(self, name: str, type: TensorType, producer: "Node | None" = None, index: int = 0):
        if not isinstance(type, TensorType):
            raise TesseraError(f"value {name!r}: type must be a TensorType, got {type!r}")
        _set(self, "name", str(name))
        _set(self, "type", type)
        _set(self, "producer", producer)
        _set(self, "index", int(index))

    def __setattr__(self, key, value):
        raise AttributeError("Value is immutable")

    @property
    def shape(self):
        return self.type.shape

    @property
    def dtype(self):
        return self.type.dtype

    def __repr__(self):
        return f"%{self.name}: {self.type}"


class Node:
    """One operator application: `outputs = op(*inputs, **attrs)`.

    attrs: a read-only mapping of plain values (int, float, str, bool, None, tuples of those), so
    nodes hash and compare by value for common-subexpression elimination.
    """

    __slots__ = ("op", "inputs", "attrs", "name", "outputs")

    def __init__(self, op: str, inputs: Iterable[Value], attrs: Mapping, name: str,
                 output_types: Iterable[TensorType], output_names: Iterable[str] | None = None):
        inputs = tuple(inputs)
        for v in inputs:
            if not isinstance(v, Value):
                raise TesseraError(f"node {name!r} ({op}): input {v!r} is not a graph Value")
        attrs = {k: _freeze_attr(op, name, k, v) for k, v in dict(attrs or {}).items()}
        output_types = tuple(output_types)
        names = list(output_names) if output_names is not None else \
            [name if len(output_types) == 1 else f"{name}.{i}" for i in range(len(output_types))]
        if len(names) != len(output_types):
            raise TesseraError(f"node {name!r}: {len(names)} output names for {len(output_types)} outputs")
        _set(self, "op", str(op))
        _set(self, "inputs", inputs)
        _set(self, "attrs", MappingProxyType(attrs))
        _set(self, "name", str(name))
        _set(self, "outputs", tuple(Value(n, t, self, i) for i, (n, t) in enumerate(zip(names, output_types))))

    def __setattr__(self, key, value):
        raise AttributeError("Node is immutable")

    @property
    def output(self) -> Value:
        if len(self.outputs) != 1:
            raise TesseraError(f"node {self.name!r} ({self.op}) has {len(self.outputs)} outputs; index .outputs")
        return self.outputs[0]

    def __repr__(self):
        return f"Node({self.op}, {self.name!r})"


def _freeze_attr(op, node, key, v):
    if v is None or isinstance(v, (bool, int, float, str, Function)):
        return v
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return tuple(_freeze_attr(op, node, key, x) for x in v)
    if isinstance(v, np.ndarray) and v.ndim <= 1 and v.size <= 64:
        return tuple(x.item() for x in v.reshape(-1))
    raise TesseraError(f"node {node!r} ({op}): attribute {key!r} = {v!r} is not a plain value "
                       f"(int, float, str, bool, None or a tuple of those); tensors are inputs")


FUSED_OP = "fused"
_FN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def attr_key(v):
    """A hashable key of an attribute value that keeps 1, 1.0 and True apart (a Function: its
    structure)."""
    if isinstance(v, tuple):
        return ("tuple",) + tuple(attr_key(x) for x in v)
    if isinstance(v, float) and v != v:
        return ("float", "nan")
    if isinstance(v, Function):
        return ("function", v.key)
    return (type(v).__name__, v)


class Function:
    """A primitive function: the subgraph that a "fused" node runs as one kernel.

    body: a Graph whose inputs are the parameters (the calling node's inputs, in order) and whose
    outputs are the node's outputs; it holds operator nodes only, no constants (weights stay the
    caller's inputs) and no nested fused nodes. Two functions are equal when their bodies compute
    the same thing the same way (`key`), whatever the names.
    """

    __slots__ = ("name", "body", "_key")

    def __init__(self, name: str, body: "Graph"):
        if not isinstance(name, str) or not _FN_NAME.match(name):
            raise TesseraError(f"function name {name!r} is not an identifier ([A-Za-z_][A-Za-z0-9_]*)")
        if not isinstance(body, Graph):
            raise TesseraError(f"function {name!r}: the body must be a Graph, got {type(body).__name__}")
        if body.constants:
            raise TesseraError(f"function {name!r}: the body holds constants "
                               f"{[v.name for v in body.constants]}; pass them as parameters")
        for n in body.nodes:
            if n.op == FUSED_OP:
                raise TesseraError(f"function {name!r}: node {n.name!r} is itself fused; functions do not nest")
        if not body.outputs:
            raise TesseraError(f"function {name!r} has no outputs")
        for v in body.outputs:
            if v.producer is None:
                raise TesseraError(f"function {name!r}: output %{v.name} is a parameter, not computed by a node")
        _set(self, "name", name)
        _set(self, "body", body)
        _set(self, "_key", None)

    def __setattr__(self, key, value):
        raise AttributeError("Function is immutable")

    @property
    def params(self) -> tuple:
        return self.body.inputs

    @property
    def key(self) -> tuple:
        """The body's structure (ops, attributes, wiring, types), names left out: the identity of
        the computation (kernel caches and equality use it)."""
        if self._key is None:
            g = self.body
            ref = {v: ("in", i) for i, v in enumerate(g.inputs)}
            nodes = []
            for j, n in enumerate(g.nodes):
                nodes.append((n.op, tuple((k, attr_key(v)) for k, v in sorted(n.attrs.items())),
                              tuple(ref[v] for v in n.inputs), tuple(o.type for o in n.outputs)))
                for k, o in enumerate(n.outputs):
                    ref[o] = ("node", j, k)
            _set(self, "_key", (tuple(v.type for v in g.inputs), tuple(nodes), tuple(ref[v] for v in g.outputs)))
        return self._key

    @property
    def ops(self) -> tuple:
        return tuple(n.op for n in self.body.nodes)

    def __eq__(self, other):
        return self is other or (isinstance(other, Function) and self.key == other.key)

    def __hash__(self):
        return hash(self.key)

    def script(self) -> str:
        """The function's text form (graph/printer.py)."""
        return PRINTER["function"](self)

    def __repr__(self):
        return f"Function({self.name!r}, {len(self.params)} params, {len(self.body.nodes)} nodes)"

    def __reduce__(self):
        raise TypeError("tessera functions are not pickled")

    # JSON (graph libraries) --------------------------------------------------------------------
    def to_json(self, attr_to_json) -> dict:
        """A JSON-compatible description; attr_to_json encodes one attribute value."""
        g = self.body
        ids: dict = {}
        params = []
        for v in g.inputs:
            ids[v] = len(ids)
            params.append({"id": ids[v], "name": v.name, "dtype": str(v.dtype), "shape": list(v.shape)})
        nodes = []
        for n in g.nodes:
            outs = []
            for o in n.outputs:
                ids[o] = len(ids)
                outs.append({"id": ids[o], "name": o.name, "dtype": str(o.dtype), "shape": list(o.shape)})
            nodes.append({"op": n.op, "name": n.name, "attrs": {k: attr_to_json(v) for k, v in n.attrs.items()},
                          "inputs": [ids[v] for v in n.inputs], "outputs": outs})
        return {"name": self.name, "params": params, "nodes": nodes, "outputs": [ids[v] for v in g.outputs]}

    @staticmethod
    def from_json(doc: dict, attr_from_json) -> "Function":
        values: dict = {}
        params = []
        for j in doc["params"]:
            v = Value(j["name"], TensorType(j["shape"], j["dtype"]))
            values[j["id"]] = v
            params.append(v)
        nodes = []
        for j in doc["nodes"]:
            n = Node(j["op"], [values[i] for i in j["inputs"]], {k: attr_from_json(v) for k, v in j["attrs"].items()},
                     j["name"], [TensorType(o["shape"], o["dtype"]) for o in j["outputs"]],
                     [o["name"] for o in j["outputs"]])
            for o, oj in zip(n.outputs, j["outputs"]):
                values[oj["id"]] = o
            nodes.append(n)
        return Function(doc["name"], Graph(params, [values[i] for i in doc["outputs"]], nodes, {}, doc["name"]))


class Graph:
    """A dataflow graph: inputs, nodes in topological order, outputs, and constants.

    constants: Value -> read-only numpy array (weights). A Value is exactly one of: a graph input,
    a constant, or a node output.

    input_names / output_names: the public names of the inputs and outputs, one per position (what
    users type and see: `exe.run({name: x})`, the executors' input and output lists, error
    messages, profiles, the CLI, an exported library's metadata and model.h). They default to the
    Values' names (a graph.Builder graph); from_onnx gives the model's own names ("gpu_0/data_0"),
    while the Values keep sanitized names for the printer and code generation. Input names are
    unique when given; every pass keeps both tuples (graph.passes.run_pass checks it).
    """

    __slots__ = ("inputs", "outputs", "nodes", "constants", "name", "input_names", "output_names")

    def __init__(self, inputs, outputs, nodes, constants=None, name="main", input_names=None, output_names=None):
        inputs, outputs, nodes = tuple(inputs), tuple(outputs), tuple(nodes)
        consts = {}
        for v, arr in dict(constants or {}).items():
            arr = np.asarray(arr)
            if TensorType.of(arr) != v.type:
                raise ShapeError(f"constant {v.name!r}: array is {TensorType.of(arr)}, value is {v.type}")
            if arr.flags.writeable:
                arr = arr.copy()
                arr.flags.writeable = False
            consts[v] = arr
        _set(self, "inputs", inputs)
        _set(self, "outputs", outputs)
        _set(self, "nodes", nodes)
        _set(self, "constants", MappingProxyType(consts))
        _set(self, "name", str(name))
        _set(self, "input_names", _public_names(self.name, "input", inputs, input_names))
        _set(self, "output_names", _public_names(self.name, "output", outputs, output_names))
        self._check()

    def __setattr__(self, key, value):
        raise AttributeError("Graph is immutable; build a new one (Graph.rewrite, graph.Builder)")

    def _check(self):
        defined = set()
        for v in self.inputs:
            if v.producer is not None:
                raise TesseraError(f"graph input %{v.name} is the output of node {v.producer.name!r}")
            if v in self.constants:
                raise TesseraError(f"%{v.name} is both a graph input and a constant")
            defined.add(v)
        for v in self.constants:
            if v.producer is not None:
                raise TesseraError(f"constant %{v.name} is the output of node {v.producer.name!r}")
            defined.add(v)
        for n in self.nodes:
            for v in n.inputs:
                if v not in defined:
                    raise TesseraError(f"node {n.name!r} ({n.op}) reads %{v.name} before it is defined "
                                       f"(not a graph input, a constant, or an earlier node's output)")
            if n.op == FUSED_OP:
                _check_call(n)
            defined.update(n.outputs)
        for v in self.outputs:
            if v not in defined:
                raise TesseraError(f"graph output %{v.name} is not defined in the graph")

    # queries -------------------------------------------------------------------------------
    def input(self, name: str) -> Value:
        """The input of this public name, else the input whose Value has this name."""
        for v, public in zip(self.inputs, self.input_names):
            if public == name:
                return v
        for v in self.inputs:
            if v.name == name:
                return v
        raise TesseraError(f"graph {self.name!r} has no input {name!r}; inputs: {list(self.input_names)}")

    @property
    def interface(self) -> tuple:
        """(input_names, output_names): what a pass must keep."""
        return self.input_names, self.output_names

    def consumers(self) -> dict:
        """Value -> list of (node, input position) that read it."""
        out: dict = {}
        for n in self.nodes:
            for i, v in enumerate(n.inputs):
                out.setdefault(v, []).append((n, i))
        return out

    @property
    def functions(self) -> tuple:
        """The distinct Functions that fused nodes call, in order of first use."""
        out, seen = [], set()
        for n in self.nodes:
            if n.op == FUSED_OP and id(n.attrs["function"]) not in seen:
                seen.add(id(n.attrs["function"]))
                out.append(n.attrs["function"])
        return tuple(out)

    def op_counts(self) -> dict:
        counts: dict = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts

    def with_(self, **changes) -> "Graph":
        """A copy with some fields changed (new inputs or outputs drop the public names unless given)."""
        kw = {k: getattr(self, k) for k in self.__slots__}
        if "inputs" in changes and "input_names" not in changes:
            kw["input_names"] = None
        if "outputs" in changes and "output_names" not in changes:
            kw["output_names"] = None
        kw.update(changes)
        return Graph(**kw)

    def script(self, show_constants: bool = False) -> str:
        """The graph's text form (graph/printer.py); show_constants: the constants' values too."""
        return PRINTER["graph"](self, show_constants=show_constants)

    def __str__(self):
        return self.script()

    def __repr__(self):
        return f"Graph({self.name!r}, {len(self.inputs)} inputs, {len(self.nodes)} nodes, " \
               f"{len(self.constants)} constants, {len(self.outputs)} outputs)"

    def __reduce__(self):
        raise TypeError("tessera graphs are not pickled")


def _public_names(graph: str, kind: str, values: tuple, names) -> tuple:
    """The public names of a graph's inputs or outputs: `names` checked (one non-empty str per
    value; input names unique), or the Values' own names (checked where they are made)."""
    if names is None:
        return tuple(v.name for v in values)
    if isinstance(names, str):
        raise TesseraError(f"graph {graph!r}: {kind}_names must be a sequence of names, got the string {names!r}")
    names = tuple(names)
    if len(names) != len(values):
        raise TesseraError(f"graph {graph!r}: {len(names)} {kind} names for {len(values)} {kind}s")
    for i, n in enumerate(names):
        if not isinstance(n, str) or not n:
            raise TesseraError(f"graph {graph!r}: the name of {kind} {i} must be a non-empty str, got {n!r}")
    if kind == "input":
        seen: dict = {}
        for i, n in enumerate(names):
            if n in seen:
                raise TesseraError(f"graph {graph!r}: inputs {seen[n]} and {i} are both named {n!r}")
            seen[n] = i
    return names


def _check_call(n: Node) -> None:
    """A fused node: one `function` attribute whose parameters and outputs match the node."""
    fn = n.attrs.get("function")
    if set(n.attrs) != {"function"} or not isinstance(fn, Function):
        raise TesseraError(f"node {n.name!r} ({FUSED_OP}) must have exactly one attribute, function=<Function>; "
                           f"it has {sorted(n.attrs)}")
    if len(fn.params) != len(n.inputs):
        raise TesseraError(f"node {n.name!r} calls function {fn.name!r} with {len(n.inputs)} inputs; it takes "
                           f"{len(fn.params)}")
    for i, (v, p) in enumerate(zip(n.inputs, fn.params)):
        if v.type != p.type:
            raise TesseraError(f"node {n.name!r}: input {i} %{v.name} is {v.type}, function {fn.name!r} "
                               f"parameter %{p.name} is {p.type}")
    outs = fn.body.outputs
    if len(outs) != len(n.outputs) or any(a.type != b.type for a, b in zip(outs, n.outputs)):
        raise TesseraError(f"node {n.name!r}: outputs {[str(o.type) for o in n.outputs]} differ from function "
                           f"{fn.name!r}'s {[str(o.type) for o in outs]}")
