"""Loading a compiled model's library (written by `exe.export_library`, built by tessera.executor.library):
its `tessera_graph` document becomes a Plan (runtime/plan.py), its embedded weights the plan's
constants (read-only numpy views, no copy), and an executor runs it: the AotExecutor when the
library has the model entry points (static shapes), else (or with executor="graph") a
GraphExecutor over the library's kernel functions. Only ctypes, numpy and the JSON are needed:
no compiler, no onnx, no graph code.
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from ..errors import TesseraError
from .aot_executor import AotExecutor, entry_record
from .graph_executor import graph_executor_of
from .module import Module, read_cstring
from .plan import Plan, TensorSpec, parse_document

EXECUTORS = ("aot", "graph")


def read_document(path, module=None) -> dict | None:
    """The tessera_graph document of a library, or None when it is a plain kernel library."""
    mod = module or Module(path)
    text = read_cstring(mod._lib, "tessera_graph")
    if text is None:
        return None
    return parse_document(text, str(path))


def embedded_weights(path: str, mod, doc) -> dict:
    """constant id -> read-only numpy view of its bytes inside the loaded library (no copy), each
    checked to lie inside the weights the library embeds (their size is the library's own symbol
    `<weights symbol>_size`, which the document's weights.nbytes must match)."""
    w = doc["weights"]
    nbytes = w["nbytes"]
    if not doc["constants"]:
        return {}
    symbol = w["symbol"]
    try:
        base = ctypes.addressof(ctypes.c_uint8.in_dll(mod._lib, symbol))
        size = ctypes.c_uint64.in_dll(mod._lib, f"{symbol}_size").value
    except ValueError:
        raise TesseraError(f"{path}: the weights symbol {symbol} or {symbol}_size is missing from the "
                           f"library") from None
    if type(nbytes) is not int or nbytes != size:
        raise TesseraError(f"{path}: tessera_graph weights.nbytes is {nbytes!r}, but the library embeds {size} "
                           f"bytes of weights ({symbol}_size)")
    buf = (ctypes.c_uint8 * max(nbytes, 1)).from_address(base)
    out = {}
    for j in doc["constants"]:
        t = TensorSpec(j["name"], j["dtype"], j["shape"])
        if not t.is_static:
            raise TesseraError(f"{path}: constant {j['name']!r} has a symbolic shape {t}")
        off, size = int(j["offset"]), t.nbytes()
        if off < 0 or off + size > nbytes:
            raise TesseraError(f"{path}: constant {j['name']!r} [{off}, {off + size}) lies outside the "
                               f"{nbytes} bytes of embedded weights")
        arr = np.frombuffer(buf, dtype=t.np_dtype, count=t.numel(), offset=off).reshape(t.shape)
        arr.flags.writeable = False
        out[j["id"]] = arr
    return out


def plan_of(path: str, mod, doc) -> Plan:
    """The Plan of a loaded library's document, its constants viewing the embedded weights."""
    try:
        weights = embedded_weights(path, mod, doc)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise TesseraError(f"{path}: malformed tessera_graph ({type(e).__name__}: {e})") from None
    return Plan.from_document(doc, weights, path)


def load_library(path, module=None, executor: str | None = None):
    """The executor of the graph library at `path` (see the module docstring).

    executor: None gives the AotExecutor when the library has the model entry points, else a
    GraphExecutor; "graph" a GraphExecutor (per-op profiling); "aot" insists.
    """
    if executor is not None and executor not in EXECUTORS:
        raise TesseraError(f"load_module: executor must be one of {EXECUTORS} or None, got {executor!r}")
    path = os.path.abspath(os.fspath(path))
    mod = module or Module(path)
    doc = read_document(path, mod)
    if doc is None:
        raise TesseraError(f"{path} is a kernel library, not a compiled graph (it has no tessera_graph)")
    plan = plan_of(path, mod, doc)
    try:
        aot = doc.get("aot")
        # a library built before its entry points recorded what they take runs on its kernels alone
        recorded = bool(aot) and entry_record(mod._lib, aot["prefix"]) is not None
        if executor == "aot" and not aot:
            raise TesseraError(f"{path} has no model entry points (its graph has symbolic shapes); load it with "
                               f"executor='graph' or None")
        if executor == "aot" or (executor is None and recorded):
            exe = AotExecutor(mod, doc, plan)
        else:
            exe = graph_executor_of(mod, plan)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise TesseraError(f"{path}: malformed tessera_graph ({type(e).__name__}: {e})") from None
    exe.library_path, exe.module, exe.doc = path, mod, doc
    return exe


def load_module(path, executor=None):
    """Load a library written by `export_library` (or compiled by tessera).

    A compiled model (`tessera.compile(...).export_library`) comes back as an AotExecutor (the
    whole graph in one C call) or, with `executor="graph"` or symbolic shapes, a GraphExecutor
    over the same kernels and embedded weights; a kernel library as a Module. Neither the
    compiler nor onnx is needed.
    """
    mod = Module(path)
    if read_cstring(mod._lib, "tessera_graph") is not None:
        return load_library(path, module=mod, executor=executor)
    if executor is not None:
        raise TesseraError(f"{mod.path} is a kernel library, not a compiled model: it has no executor")
    return mod


__all__ = ["EXECUTORS", "read_document", "embedded_weights", "plan_of", "load_library", "load_module"]
