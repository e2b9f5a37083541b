"""Export a compiled graph as one deployable shared library, and load it back without recompiling.

`exe.export_library("model.so")` writes (tessera.graph.aot builds it):
- model.so, self-contained: every kernel of the graph (one C function per distinct kernel, with
  its checked entry), the weights embedded in its read-only data (`PREFIX_weights`), the model
  entry points (`PREFIX_create/run/error/destroy`: the whole graph in one C call over the static
  memory plan), and `tessera_graph`, a JSON string describing the graph: inputs, constants (their
  offsets in the weights), nodes (op, attrs, types, the kernel function each calls), outputs, the
  public input and output names (`input_names`, `output_names`: the model's own), per
  kernel how its output extents follow from its input extents, and the C API (`aot`).
- model.h beside it: the C API with the inputs' and outputs' shapes and dtypes as macros.
A graph with symbolic dimensions has no static memory plan: its library has everything but the
model entry points (and no header), and loads back as a GraphExecutor.

`tessera.runtime.load_module("model.so")` gives an AotExecutor (`executor="graph"`: a
GraphExecutor over the same kernels and embedded weights, for per-op profiling). Loading needs
neither onnx nor the compiler: only ctypes, numpy and the JSON.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import tempfile

import numpy as np

from ..errors import TesseraError
from ..ir.dtype import DataType, numpy_dtype
from .ir import Graph, Node, TensorType, Value

FORMAT = "tessera-graph"
VERSION = 2


# ---------------------------------------------------------------------------------------------
# symbolic extents as JSON
# ---------------------------------------------------------------------------------------------
def _expr_json(e):
    from ..ir import expr as E

    if isinstance(e, int):
        return e
    if isinstance(e, E.IntImm):
        return int(e.value)
    if isinstance(e, E.Var):
        return {"var": e.name}
    if isinstance(e, E.Cast):
        return _expr_json(e.value)
    ops = {E.Add: "add", E.Sub: "sub", E.Mul: "mul", E.FloorDiv: "floordiv", E.FloorMod: "floormod",
           E.Div: "truncdiv", E.Mod: "truncmod", E.Min: "min", E.Max: "max"}
    for cls, name in ops.items():
        if type(e) is cls:
            return {name: [_expr_json(e.a), _expr_json(e.b)]}
    if isinstance(e, E.Select):
        return {"select": [_expr_json(e.condition), _expr_json(e.true_value), _expr_json(e.false_value)]}
    cmps = {E.EQ: "eq", E.NE: "ne", E.LT: "lt", E.LE: "le", E.GT: "gt", E.GE: "ge"}
    for cls, name in cmps.items():
        if type(e) is cls:
            return {name: [_expr_json(e.a), _expr_json(e.b)]}
    raise TesseraError(f"export_library: the output extent {e.script()} uses {type(e).__name__}, which the "
                       f"library format cannot describe")


def _trunc_div(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_EVAL = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "floordiv": lambda a, b: a // b, "floormod": lambda a, b: a % b,
         "truncdiv": _trunc_div, "truncmod": lambda a, b: a - b * _trunc_div(a, b),
         "min": min, "max": max, "eq": lambda a, b: int(a == b), "ne": lambda a, b: int(a != b),
         "lt": lambda a, b: int(a < b), "le": lambda a, b: int(a <= b), "gt": lambda a, b: int(a > b),
         "ge": lambda a, b: int(a >= b)}


def eval_expr_json(j, env: dict) -> int:
    """Evaluate an extent written by _expr_json with var name -> int bindings."""
    if isinstance(j, int):
        return j
    if not isinstance(j, dict) or len(j) != 1:
        raise TesseraError(f"tessera graph library: malformed extent {j!r}")
    (k, v), = j.items()
    if k == "var":
        if v not in env:
            raise TesseraError(f"tessera graph library: extent variable {v!r} is not bound by the inputs")
        return env[v]
    if k == "select":
        c, a, b = v
        return eval_expr_json(a, env) if eval_expr_json(c, env) else eval_expr_json(b, env)
    fn = _EVAL.get(k)
    if fn is None:
        raise TesseraError(f"tessera graph library: unknown extent operation {k!r}")
    return fn(eval_expr_json(v[0], env), eval_expr_json(v[1], env))


# ---------------------------------------------------------------------------------------------
# export
# ---------------------------------------------------------------------------------------------
def _type_json(t: TensorType) -> dict:
    return {"dtype": str(t.dtype), "shape": list(t.shape)}


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
            from .ir import Function

            return Function.from_json(v["function"], _attr_from_json)
        raise TesseraError(f"tessera graph library: malformed attribute {v!r}")
    return v


def header_path(path: str) -> str:
    """model.so -> model.h (the C header export_library writes beside the library)."""
    root, ext = os.path.splitext(path)
    return (root if ext in (".so", ".dylib", ".dll") else path) + ".h"


def graph_document(exe, fn_of: dict, kernels_json: dict, weight_offsets: dict, prefix: str,
                   weights_bytes: int) -> dict:
    """The tessera_graph JSON of exe's graph (docs/internals.md, "A graph library")."""
    g: Graph = exe.graph
    ids: dict = {}
    inputs_json, consts_json, nodes_json = [], [], []
    for v in g.inputs:
        ids[v] = len(ids)
        inputs_json.append({"id": ids[v], "name": v.name, **_type_json(v.type)})
    for v in g.constants:
        ids[v] = len(ids)
        consts_json.append({"id": ids[v], "name": v.name, "offset": weight_offsets[v], **_type_json(v.type)})
    for st in exe._steps:
        n = st.node
        outs = []
        for o in n.outputs:
            ids[o] = len(ids)
            outs.append({"id": ids[o], "name": o.name, **_type_json(o.type)})
        nodes_json.append({"op": n.op, "name": n.name, "attrs": {k: _attr_json(v) for k, v in n.attrs.items()},
                           "inputs": [ids[v] for v in n.inputs], "outputs": outs, "kernel": fn_of[id(st.kernel)]})
    return {"format": FORMAT, "version": VERSION, "name": g.name, "target": str(exe.target),
            "inputs": inputs_json, "constants": consts_json, "nodes": nodes_json,
            "outputs": [ids[v] for v in g.outputs],
            "input_names": list(g.input_names), "output_names": list(g.output_names),
            "kernels": kernels_json,
            "weights": {"symbol": f"{prefix}_weights", "nbytes": weights_bytes}, "aot": None}


def export_library(exe, path, prefix: str | None = None) -> str:
    """Write exe's deployable library to `path` and, with static shapes, its C header beside it
    (`<stem>.h`); returns the library's path. prefix: the C API's name prefix (default tessera_model)."""
    from .aot import DEFAULT_PREFIX, build_library

    path = _target_path(path)
    lib = build_library(exe, prefix or DEFAULT_PREFIX)
    write_library(lib.path, lib.header, path)
    return path


def _target_path(path) -> str:
    path = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise TesseraError(f"export_library: folder {folder} does not exist")
    return path


def write_library(src: str, header: str | None, path: str) -> None:
    """Copy the library `src` to `path` and write `header` (when there is one) beside it."""
    _atomic_copy(src, path)
    if header is not None:
        _atomic_write_text(header_path(path), header)


def _c_string(text: str, width: int = 100) -> str:
    out = []
    for i in range(0, len(text), width):
        chunk = text[i:i + width].replace("\\", "\\\\").replace('"', '\\"')
        out.append(f'  "{chunk}"')
    return "\n".join(out) if out else '  ""'


def _atomic_copy(src: str, dst: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dst), prefix=".tmp-", suffix=".so")
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, dst)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise TesseraError(f"export_library: cannot write {dst}: {e}") from None


def _atomic_write_text(dst: str, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dst), prefix=".tmp-", suffix=".h")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dst)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise TesseraError(f"export_library: cannot write {dst}: {e}") from None


# ---------------------------------------------------------------------------------------------
# load
# ---------------------------------------------------------------------------------------------
class LoadedKernel:
    """A kernel function of an exported library, with its output extents as JSON expressions."""

    __slots__ = ("op", "module", "fn", "input_types", "output_types", "in_vars", "out_shape_json",
                 "static_out_shapes", "prim")

    def __init__(self, module, fn_name, info, input_types, output_types):
        self.op, self.module = info["op"], module
        self.fn = module.get_function(fn_name)
        self.input_types, self.output_types = tuple(input_types), tuple(output_types)
        self.in_vars = [[(int(d), str(v)) for d, v in dims] for dims in info["in_vars"]]
        self.out_shape_json = info["out_shapes"]
        static = all(isinstance(d, int) for s in self.out_shape_json for d in s)
        self.static_out_shapes = [tuple(s) for s in self.out_shape_json] if static else None
        self.prim = None

    def output_shapes(self, in_shapes) -> list:
        if self.static_out_shapes is not None:
            return self.static_out_shapes
        env = {}
        for dims, shape in zip(self.in_vars, in_shapes):
            for d, name in dims:
                env.setdefault(name, int(shape[d]))
        return [tuple(eval_expr_json(e, env) for e in s) for s in self.out_shape_json]


def read_graph_json(path: str, module=None) -> dict | None:
    """The tessera_graph document of a library, or None when it is a plain kernel library."""
    from ..runtime.module import Module, _read_cstring

    mod = module or Module(path)
    text = _read_cstring(mod._lib, "tessera_graph")
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise TesseraError(f"{path}: unreadable tessera_graph: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TesseraError(f"{path}: tessera_graph is not a {FORMAT} document")
    if doc.get("version") != VERSION:
        raise TesseraError(f"{path}: graph library version {doc.get('version')!r}; this tessera reads version "
                           f"{VERSION} (re-export the model with this tessera)")
    return doc


EXECUTORS = ("aot", "graph")


def load_executable(path, module=None, executor: str | None = None):
    """The executable of the graph library at `path` (written by export_library).

    executor: None gives the AotExecutor when the library has the model entry points (static
    shapes), else a GraphExecutor; "graph" a GraphExecutor (per-op profiling); "aot" insists.
    """
    from ..runtime.module import Module

    if executor is not None and executor not in EXECUTORS:
        raise TesseraError(f"load_module: executor must be one of {EXECUTORS} or None, got {executor!r}")
    path = os.path.abspath(os.fspath(path))
    mod = module or Module(path)
    doc = read_graph_json(path, mod)
    if doc is None:
        raise TesseraError(f"{path} is a kernel library, not a compiled graph (it has no tessera_graph)")
    try:
        if executor != "graph" and doc.get("aot"):
            from ..runtime.aot_executor import AotExecutor

            exe = AotExecutor(mod, doc)
        elif executor == "aot":
            raise TesseraError(f"{path} has no model entry points (its graph has symbolic shapes); load it with "
                               f"executor='graph' or None")
        else:
            exe = _rebuild(path, mod, doc)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise TesseraError(f"{path}: malformed tessera_graph ({type(e).__name__}: {e})") from None
    exe.library_path = path
    return exe


def embedded_weights(path: str, mod, doc) -> dict:
    """constant id -> read-only numpy view of its bytes inside the loaded library (no copy)."""
    w = doc["weights"]
    nbytes = int(w["nbytes"])
    if not doc["constants"]:
        return {}
    try:
        base = ctypes.addressof(ctypes.c_uint8.in_dll(mod._lib, w["symbol"]))
    except ValueError:
        raise TesseraError(f"{path}: the weights symbol {w['symbol']} is missing from the library") from None
    buf = (ctypes.c_uint8 * max(nbytes, 1)).from_address(base)
    out = {}
    for j in doc["constants"]:
        t = TensorType(j["shape"], j["dtype"])
        dt = numpy_dtype(DataType(t.dtype))
        off, size = int(j["offset"]), t.nbytes()
        if off < 0 or off + size > nbytes:
            raise TesseraError(f"{path}: constant {j['name']!r} [{off}, {off + size}) lies outside the "
                               f"{nbytes} bytes of embedded weights")
        arr = np.frombuffer(buf, dtype=dt, count=t.numel(), offset=off).reshape(t.shape)
        arr.flags.writeable = False
        out[j["id"]] = arr
    return out


def rebuild_graph(path: str, mod, doc):
    """(Graph, [(node, kernel function name)]) described by a library's tessera_graph."""
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
    nodes, fns = [], []
    for j in doc["nodes"]:
        ins = [values[i] for i in j["inputs"]]
        out_types = [TensorType(o["shape"], o["dtype"]) for o in j["outputs"]]
        attrs = {k: _attr_from_json(v) for k, v in j["attrs"].items()}
        n = Node(j["op"], ins, attrs, j["name"], out_types, [o["name"] for o in j["outputs"]])
        for o, oj in zip(n.outputs, j["outputs"]):
            values[oj["id"]] = o
        nodes.append(n)
        fns.append(j["kernel"])
    from ..runtime.aot_executor import doc_public_names

    input_names, output_names = doc_public_names(doc, path)
    graph = Graph(inputs, [values[i] for i in doc["outputs"]], nodes, consts, doc["name"], input_names, output_names)
    return graph, fns



def _rebuild(path, mod, doc):
    from .executor import GraphExecutor

    graph, fns = rebuild_graph(path, mod, doc)
    kernels = [LoadedKernel(mod, fn, doc["kernels"][fn], [v.type for v in n.inputs], [o.type for o in n.outputs])
               for n, fn in zip(graph.nodes, fns)]
    return GraphExecutor(graph, doc["target"], kernels=kernels)
