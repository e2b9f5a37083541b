"""Export a compiled graph to one shared library, and load it back without recompiling.

`exe.export_library("model.so")` writes:
- model.so: every kernel of the graph in one C library (one function per distinct kernel), plus
  `tessera_graph`, a JSON string describing the graph: inputs, constants, nodes (op, attrs,
  types, the kernel function each calls), outputs, and per kernel how its output extents follow
  from its input extents (for symbolic dimensions).
- model.params.npz beside it when the graph has constants (weights): numpy's npz, read back with
  allow_pickle=False (no pickles).

`tessera.runtime.load_module("model.so")` (or `load_executable`) gives a GraphExecutor again. The
ahead-of-time module of a later stage can grow from this format: the weights move into the
library, the node list into generated C.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile

import numpy as np

from ..errors import TesseraError
from ..ir.dtype import DataType, numpy_dtype
from .ir import Graph, Node, TensorType, Value

FORMAT = "tessera-graph"
VERSION = 1


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
    return v


def _attr_from_json(v):
    if isinstance(v, dict):
        if "tuple" in v:
            return tuple(_attr_from_json(x) for x in v["tuple"])
        if "float" in v:
            return float(v["float"])
        raise TesseraError(f"tessera graph library: malformed attribute {v!r}")
    return v


def params_path(path: str) -> str:
    root, ext = os.path.splitext(path)
    return (root if ext in (".so", ".dylib", ".dll") else path) + ".params.npz"


def export_library(exe, path) -> str:
    """Write exe's kernels and graph to `path` (+ `<stem>.params.npz` for the constants)."""
    from ..build_module import _functions
    from ..codegen import c as codegen_c
    from ..runtime.compiler import compile_source
    from ..tir.transform import lower as lower_func
    from .executor import _ident

    path = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise TesseraError(f"export_library: folder {folder} does not exist")
    g: Graph = exe.graph
    target = exe.target
    # one C function per distinct kernel
    fn_of: dict = {}
    kernels_json: dict = {}
    lowered = []
    for st in exe._steps:
        k = st.kernel
        if id(k) in fn_of:
            continue
        prim = getattr(k, "prim", None)
        if prim is None:
            raise TesseraError(f"export_library: the kernel of {k.op} was not built in this process "
                               f"(re-export a loaded library by copying its files)")
        funcs = _functions(prim)
        if len(funcs) != 1:
            raise TesseraError(f"export_library: the kernel of {k.op} has {len(funcs)} functions, expected 1")
        name = f"{_ident(k.op)}_{len(fn_of)}"
        fn_of[id(k)] = name
        lowered.append(lower_func(funcs[0].replace(name=name), target))
        kernels_json[name] = {
            "op": k.op,
            "in_vars": [[[d, v.name if hasattr(v, "name") else v] for d, v in dims] for dims in k.in_vars],
            "out_shapes": [[_expr_json(e) for e in shape] for shape in k.out_shape_exprs],
        }
    ids: dict = {}
    inputs_json, consts_json, nodes_json = [], [], []
    arrays = {}
    for v in g.inputs:
        ids[v] = len(ids)
        inputs_json.append({"id": ids[v], "name": v.name, **_type_json(v.type)})
    for v, arr in g.constants.items():
        ids[v] = len(ids)
        key = f"c{ids[v]}"
        dt = DataType(v.dtype)
        arrays[key] = arr.view(np.uint16) if dt == "bfloat16" else arr
        consts_json.append({"id": ids[v], "name": v.name, "key": key, **_type_json(v.type)})
    for st in exe._steps:
        n = st.node
        outs = []
        for o in n.outputs:
            ids[o] = len(ids)
            outs.append({"id": ids[o], "name": o.name, **_type_json(o.type)})
        nodes_json.append({"op": n.op, "name": n.name, "attrs": {k: _attr_json(v) for k, v in n.attrs.items()},
                           "inputs": [ids[v] for v in n.inputs], "outputs": outs, "kernel": fn_of[id(st.kernel)]})
    pfile = params_path(path) if arrays else None
    doc = {"format": FORMAT, "version": VERSION, "name": g.name, "target": str(target),
           "inputs": inputs_json, "constants": consts_json, "nodes": nodes_json,
           "outputs": [ids[v] for v in g.outputs], "kernels": kernels_json,
           "params_file": os.path.basename(pfile) if pfile else None}
    source = codegen_c.generate_module(lowered, target) if lowered else _EMPTY_MODULE
    source += "\n/* the graph this library runs (tessera.graph.export) */\nconst char tessera_graph[] =\n" + \
        _c_string(json.dumps(doc, separators=(",", ":"))) + ";\n"
    lib = compile_source(source, target, name_hint=_ident(g.name))
    _atomic_copy(lib, path)
    if pfile:
        _write_params(pfile, arrays)
    return path


_EMPTY_MODULE = ('/* a graph without kernels */\n'
                 'const char tessera_metadata[] = "{\\"version\\": 1, \\"functions\\": []}";\n')


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


def _write_params(pfile: str, arrays: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(pfile), prefix=".tmp-", suffix=".npz")
    os.close(fd)
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.chmod(tmp, 0o644)
        os.replace(tmp, pfile)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise TesseraError(f"export_library: cannot write {pfile}: {e}") from None


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
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise TesseraError(f"{path}: graph format {doc.get('format')!r} version {doc.get('version')!r}; this "
                           f"tessera reads {FORMAT} version {VERSION}")
    return doc


def load_executable(path, module=None):
    """A GraphExecutor running the graph library at `path` (written by export_library)."""
    from ..runtime.module import Module
    from .executor import GraphExecutor

    path = os.path.abspath(os.fspath(path))
    mod = module or Module(path)
    doc = read_graph_json(path, mod)
    if doc is None:
        raise TesseraError(f"{path} is a kernel library, not a compiled graph (it has no tessera_graph)")
    try:
        return _rebuild(path, mod, doc, GraphExecutor)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise TesseraError(f"{path}: malformed tessera_graph ({type(e).__name__}: {e})") from None


def _rebuild(path, mod, doc, GraphExecutor):
    values: dict = {}
    inputs = []
    for j in doc["inputs"]:
        v = Value(j["name"], TensorType(j["shape"], j["dtype"]))
        values[j["id"]] = v
        inputs.append(v)
    consts = {}
    if doc["constants"]:
        pfile = os.path.join(os.path.dirname(path), doc["params_file"] or "")
        if not doc["params_file"] or not os.path.isfile(pfile):
            raise TesseraError(f"{path}: its weights file {pfile} is missing (export_library writes it beside "
                               f"the library; keep them together)")
        with np.load(pfile, allow_pickle=False) as z:
            stored = {k: z[k] for k in z.files}
        for j in doc["constants"]:
            t = TensorType(j["shape"], j["dtype"])
            arr = stored.get(j["key"])
            if arr is None:
                raise TesseraError(f"{pfile}: no array {j['key']!r} for constant {j['name']!r}")
            if t.dtype == "bfloat16":
                arr = arr.view(numpy_dtype("bfloat16"))
            v = Value(j["name"], t)
            if TensorType.of(arr) != t:
                raise TesseraError(f"{pfile}: constant {j['name']!r} is {TensorType.of(arr)}, the graph says {t}")
            values[j["id"]] = v
            consts[v] = arr
    nodes, kernels = [], []
    for j in doc["nodes"]:
        ins = [values[i] for i in j["inputs"]]
        out_types = [TensorType(o["shape"], o["dtype"]) for o in j["outputs"]]
        attrs = {k: _attr_from_json(v) for k, v in j["attrs"].items()}
        n = Node(j["op"], ins, attrs, j["name"], out_types, [o["name"] for o in j["outputs"]])
        for o, oj in zip(n.outputs, j["outputs"]):
            values[oj["id"]] = o
        nodes.append(n)
        kernels.append(LoadedKernel(mod, j["kernel"], doc["kernels"][j["kernel"]],
                                    [v.type for v in ins], out_types))
    graph = Graph(inputs, [values[i] for i in doc["outputs"]], nodes, consts, doc["name"])
    exe = GraphExecutor(graph, doc["target"], kernels=kernels)
    exe.library_path = path
    return exe
