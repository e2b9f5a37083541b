"""The tessera_graph document of a compiled graph, both ways: `graph_document` writes it (the library
builder embeds it: tessera.executor.library) and `load_graph` rebuilds the Graph of a loaded library
from it (constants are views into the library's embedded weights).

The document (docs/internals.md, "A graph library"): the compiled graph's runtime Plan as JSON
(tessera/runtime/plan.py: inputs, constants with their offsets in the weights, nodes with the kernel
function each calls, outputs, the public input and output names, per kernel how its output extents
follow from its input extents, the memory plan) plus each node's attributes and the C API (`aot`).
`tessera.runtime.load_module("model.so")` loads a library with runtime code only (runtime/library.py);
`load_graph(exe)` here rebuilds its Graph when a tool wants it.
"""
from __future__ import annotations

from ..errors import TesseraError
from ..runtime.library import embedded_weights
from ..runtime.plan import public_names
from .ir import Function, Graph, Node, TensorType, Value


# ---------------------------------------------------------------------------------------------
# the document of a compiled graph
# ---------------------------------------------------------------------------------------------
def _attr_json(v):
    if isinstance(v, tuple):
        return {"tuple": [_attr_json(x) for x in v]}
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return {"float": repr(v)}
    if hasattr(v, "to_json"):                      # a fused node's Function (graph/ir.py)
        return {"function": v.to_json(_attr_json)}
    return v


def _attr_from_json(v):
    if isinstance(v, dict):
        if "tuple" in v:
            return tuple(_attr_from_json(x) for x in v["tuple"])
        if "float" in v:
            return float(v["float"])
        if "function" in v:
            return Function.from_json(v["function"], _attr_from_json)
        raise TesseraError(f"tessera graph library: malformed attribute {v!r}")
    return v


def graph_document(compiled, weight_offsets: dict, prefix: str, weights_bytes: int, memory=None) -> dict:
    """The tessera_graph JSON of a compiled graph (docs/internals.md, "A graph library"): its Plan's
    document with each node's attributes. weight_offsets: constant Value -> byte offset; memory: the
    runtime MemoryLayout the library's entry points use (None without them)."""
    g: Graph = compiled.graph
    plan = compiled.plan
    consts = sorted(plan.constants)
    offsets = {s: weight_offsets[v] for s, v in zip(consts, g.constants)}
    attrs = [{k: _attr_json(v) for k, v in n.attrs.items()} for n in g.nodes]
    doc = plan.document(offsets, f"{prefix}_weights", weights_bytes, attrs)
    doc["memory"] = memory.as_json() if memory is not None else None
    return doc


# ---------------------------------------------------------------------------------------------
# the Graph of a loaded library
# ---------------------------------------------------------------------------------------------
def load_graph(exe) -> Graph:
    """The Graph of an executor loaded from a library (`tessera.runtime.load_module`), rebuilt from
    its tessera_graph document; constants are views into the library's embedded weights. An
    executor the graph compiler made in this process gives its own graph."""
    if exe.has_graph:
        return exe.graph
    doc, mod, path = getattr(exe, "doc", None), getattr(exe, "module", None), exe.library_path
    if doc is None or mod is None:
        raise TesseraError(f"load_graph: {type(exe).__name__} {exe.name!r} was not loaded from a library")
    try:
        graph = rebuild_graph(path, mod, doc)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise TesseraError(f"{path}: malformed tessera_graph ({type(e).__name__}: {e})") from None
    exe.graph = graph
    return graph


def rebuild_graph(path: str, mod, doc) -> Graph:
    """The Graph described by a library's tessera_graph document."""
    values: dict = {}
    inputs = []
    for j in doc["inputs"]:
        v = Value(j["name"], TensorType(j["shape"], j["dtype"]))
        values[j["id"]] = v
        inputs.append(v)
    consts = {}
    arrays = embedded_weights(path, mod, doc)
    for j in doc["constants"]:
        v = Value(j["name"], TensorType(j["shape"], j["dtype"]))
        values[j["id"]] = v
        consts[v] = arrays[j["id"]]
    nodes = []
    for j in doc["nodes"]:
        ins = [values[i] for i in j["inputs"]]
        out_types = [TensorType(o["shape"], o["dtype"]) for o in j["outputs"]]
        attrs = {k: _attr_from_json(v) for k, v in j["attrs"].items()}
        n = Node(j["op"], ins, attrs, j["name"], out_types, [o["name"] for o in j["outputs"]])
        for o, oj in zip(n.outputs, j["outputs"]):
            values[oj["id"]] = o
        nodes.append(n)
    input_names, output_names = public_names(doc, path)
    return Graph(inputs, [values[i] for i in doc["outputs"]], nodes, consts, doc["name"], input_names, output_names)
