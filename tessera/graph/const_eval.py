"""Constant evaluation: compute Values whose inputs are all constants, with tessera's own kernels.

One mechanism for every user: the ONNX frontend evaluates shape subgraphs with it, `tessera.compile`
folds constant subgraphs (opt_level >= 1) with it, and the graph's fold_constant pass builds on it.
The subgraph is compiled by lowering (graph/lowering.py) and run by the runtime's graph
executor over its plan, so what is folded is exactly what would have run.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..errors import DTypeError, ShapeError, TesseraError
from ..limits import resolve as resolve_limits
from ..runtime.graph_executor import GraphExecutor
from ..runtime.ndarray import NDArray
from ..target import Target
from .ir import Graph, Node, TensorType, Value
from .kernels import compile_together
from .lowering import compile_graph
from .transform import substitute, topo_nodes


class NotConstantError(TesseraError):
    """A Value asked for as a constant depends on a runtime graph input (`.input` is that Value)."""

    def __init__(self, value: Value, input_value: Value):
        self.value, self.input = value, input_value
        if value is input_value:
            text = f"%{value.name} is a runtime input, not a constant"
        else:
            text = f"%{value.name} is not a constant: it depends on the runtime input %{input_value.name}"
        super().__init__(text)


def evaluate_constants(values, constants: Mapping, target="c") -> list:
    """Numpy arrays of `values`, each computed from `constants` (Value -> array) only.

    `constants` may also hold node outputs already known (the frontend's folded shape values):
    evaluation starts from them. Raises NotConstantError naming the first runtime input a value
    depends on.
    """
    values = list(values)
    out: list = [None] * len(values)
    todo = []
    for i, v in enumerate(values):
        if v in constants:
            out[i] = np.asarray(constants[v])
        elif v.producer is None:
            raise NotConstantError(v, v)
        else:
            todo.append(i)
    if not todo:
        return out
    wanted = [values[i] for i in todo]
    nodes = topo_nodes(wanted, stop=constants)
    consts, leaf = {}, {}
    for n in nodes:
        for v in n.inputs:
            if v in constants:
                if v.producer is not None and v not in leaf:   # a node output already known
                    leaf[v] = Value(v.name, v.type)
                consts[leaf.get(v, v)] = constants[v]
            elif v.producer is None:
                raise NotConstantError(_blocked(wanted, v), v)
        for o in n.outputs:
            if not o.type.is_static:     # an extent the graph's inputs bind (arange, prefix_slice)
                raise NotConstantError(o, o)
    if leaf:
        nodes, wanted = _cut_at(nodes, wanted, leaf)
    g = Graph([], wanted, nodes, consts, "const_eval")
    results = _run_once(g, target)
    for i, r in zip(todo, results):
        out[i] = r
    return out


def _run_once(graph: Graph, target) -> list:
    """graph (no inputs) compiled and run once: graph -> kernels + plan -> the runtime executor."""
    target = Target(target)
    if target.kind in ("cuda", "opencl"):
        # a GPU target's constants are folded on the host: once, no device needed at compile time
        target = Target.host()
    compiled = compile_graph(graph, target, memory_plan=False, build_kernels=False)
    compile_together(compiled.kernels.values())      # run once: a few C units, not one a kernel
    return GraphExecutor(compiled.plan, compiled.kernels).run({})


def _cut_at(nodes, wanted, leaf):
    """nodes rebuilt so that the produced Values in `leaf` are read from their constant stand-ins."""
    vmap = dict(leaf)
    out = []
    for n in nodes:
        ins = [vmap.get(v, v) for v in n.inputs]
        if any(a is not b for a, b in zip(ins, n.inputs)):
            nn = Node(n.op, ins, n.attrs, n.name, [o.type for o in n.outputs], [o.name for o in n.outputs])
            vmap.update(zip(n.outputs, nn.outputs))
            n = nn
        out.append(n)
    return out, [vmap.get(v, v) for v in wanted]


def _blocked(wanted, inp):
    """The wanted value that depends on `inp` (for the error message)."""
    for w in wanted:
        if inp in {v for n in topo_nodes([w]) for v in n.inputs}:
            return w
    return wanted[0]


def bind_params(graph: Graph, params: Mapping | None) -> Graph:
    """`graph` with the inputs named in `params` turned into constants (TVM's bind_params_by_name).

    A key is an input's public name (graph.input_names: the ONNX name) or its Value's name (the
    keys from_onnx's params use); the public name wins where the two point at different inputs."""
    if not params:
        return graph
    by_name = {v.name: v for v in graph.inputs}
    by_name.update(zip(graph.input_names, graph.inputs))
    unknown = sorted(set(params) - set(by_name))
    if unknown:
        raise TesseraError(f"params name {unknown}, which are not inputs of graph {graph.name!r} "
                           f"(inputs: {sorted(graph.input_names)})")
    consts = dict(graph.constants)
    for name, arr in params.items():
        v = by_name[name]
        if v in consts:
            raise TesseraError(f"params give input {name!r} of graph {graph.name!r} twice (by its public name "
                               f"and by its value name %{v.name})")
        consts[v] = _as_array(arr, v)
    kept = [(v, n) for v, n in zip(graph.inputs, graph.input_names) if v not in consts]
    return Graph([v for v, _ in kept], graph.outputs, graph.nodes, consts, graph.name,
                 [n for _, n in kept], graph.output_names)


def _as_array(arr, v: Value) -> np.ndarray:
    if isinstance(arr, NDArray):
        arr = arr.numpy()
    want = v.dtype.numpy()
    a = np.asarray(arr)
    if not isinstance(arr, np.ndarray) and a.dtype != want:
        a = np.asarray(arr, dtype=want)
    if a.dtype != want:
        raise DTypeError(f"param {v.name!r}: dtype {a.dtype}, the graph expects {v.type}")
    if TensorType.of(a) != v.type:
        raise ShapeError(f"param {v.name!r}: shape {a.shape}, the graph expects {v.type}")
    return a


def fold_constants(graph: Graph, target="c") -> Graph:
    """Evaluate every node whose inputs are all constants; its consumers read the result instead.
    A node whose output has a symbolic extent (arange, prefix_slice: a symbol the graph's inputs
    bind) depends on the run, so it is not folded; nor is one whose output would take more than
    Limits.max_constant_bytes (tessera.limits): it runs when the model runs, and a small model does
    not make a large library."""
    limit = resolve_limits(None).max_constant_bytes
    const = set(graph.constants)
    foldable = []
    for n in graph.nodes:
        if all(v in const for v in n.inputs) and all(o.type.is_static and o.type.nbytes() <= limit
                                                     for o in n.outputs):
            foldable.append(n)
            const.update(n.outputs)
    if not foldable:
        return graph
    folded = {o for n in foldable for o in n.outputs}
    frontier, seen = [], set()
    for n in graph.nodes:
        if n in foldable:
            continue
        for v in n.inputs:
            if v in folded and v not in seen:
                seen.add(v)
                frontier.append(v)
    for v in graph.outputs:
        if v in folded and v not in seen:
            seen.add(v)
            frontier.append(v)
    if not frontier:
        return substitute(graph, {})
    arrays = evaluate_constants(frontier, graph.constants, target)
    mapping, new_consts = {}, {}
    for v, a in zip(frontier, arrays):
        nv = Value(v.name, v.type)
        mapping[v] = nv
        new_consts[nv] = a
    return substitute(graph, mapping, new_consts)
