"""AotExecutor: a compiled model's whole graph in one C call (the library of tessera.graph.aot).

The library exports `PREFIX_create/run/error/destroy/time` (its C API, model.h); this class holds
one model instance (the arena, allocated once by PREFIX_create), checks the inputs against the
graph's static types, allocates the outputs and makes one ctypes call per run: no per-op Python.
It has the GraphExecutor's interface: `exe(x)`, `exe.run({"input": x})` (inputs and outputs go by
the model's public names, the library's `input_names` / `output_names`), `exe.profile(...)` (per
node, through the graph executor over the same library), `exe.benchmark(...)` (the whole model
timed inside the library), `exe.export_library(path)`.

Loading needs ctypes, numpy and the library's JSON only: no compiler, no onnx.
"""
from __future__ import annotations

import ctypes
import threading
import weakref

import numpy as np

from ..errors import ShapeError, TesseraError
from ..ir.dtype import DataType, numpy_dtype
from .inputs import check_input_names, gather_inputs, input_array
from .module import _FAST_NUMPY, _STATUS_ERRORS, BenchmarkResult, _check_timing, _from_address

_P = ctypes.c_void_p


class _Spec:
    """One input or output: its public name, the graph value's name, its static type."""

    __slots__ = ("name", "value_name", "dtype", "np_dtype", "shape", "nbytes")

    def __init__(self, j, name: str):
        self.name, self.value_name, self.dtype = name, j["name"], DataType(j["dtype"])
        self.np_dtype = numpy_dtype(self.dtype)
        self.shape = tuple(int(d) for d in j["shape"])
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.np_dtype.itemsize

    def __str__(self):
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


class AotExecutor:
    """Runs a whole compiled graph with one call into its library (see the module docstring)."""

    def __init__(self, module, doc: dict, graph=None):
        aot = doc.get("aot")
        if not aot:
            raise TesseraError(f"{module.path} has no model entry points (an ahead-of-time library needs static "
                               f"shapes)")
        self.module, self.doc = module, doc
        self.prefix = aot["prefix"]
        self.workspace_bytes = int(aot["workspace_bytes"])
        self.library_path = module.path
        self.opt_level = None
        self._graph = graph
        self._plan = None
        self._source_exe = None      # the GraphExecutor it was built from, in this process
        in_names, out_names = doc_public_names(doc, module.path)
        self._inputs = [_Spec(j, name) for j, name in zip(doc["inputs"], in_names)]
        by_id = {j["id"]: j for j in doc["inputs"]}
        by_id.update({j["id"]: j for j in doc["constants"]})
        for n in doc["nodes"]:
            by_id.update({o["id"]: o for o in n["outputs"]})
        self._outputs = [_Spec(by_id[i], name) for i, name in zip(doc["outputs"], out_names)]
        lib = module._lib
        where = f"{module.path}"
        self._create = _fn(lib, f"{self.prefix}_create", where, _P, [])
        self._destroy = _fn(lib, f"{self.prefix}_destroy", where, None, [_P])
        self._run = _fn(lib, f"{self.prefix}_run", where, ctypes.c_int32, [_P, _P, _P])
        self._error = _fn(lib, f"{self.prefix}_error", where, ctypes.c_char_p, [_P])
        self._time = _fn(lib, f"{self.prefix}_time", where, ctypes.c_int32,
                         [_P, _P, _P, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_double)])
        self._handle = self._new_instance()
        self._finalizer = weakref.finalize(self, self._destroy, self._handle)
        self._lock = threading.Lock()
        self._in_ptrs = (_P * max(len(self._inputs), 1))()
        self._out_ptrs = (_P * max(len(self._outputs), 1))()

    def _new_instance(self):
        h = self._create()
        if not h:
            raise TesseraError(f"{self.prefix}_create failed: cannot allocate the {self.workspace_bytes}-byte arena")
        return h

    # ------------------------------------------------------------------ description
    @property
    def input_names(self) -> list:
        """The inputs' public names, in graph order (an ONNX model's own names: what run() takes)."""
        return [s.name for s in self._inputs]

    @property
    def output_names(self) -> list:
        """The outputs' public names, in the order run() returns them."""
        return [s.name for s in self._outputs]

    @property
    def target(self):
        from ..target import Target

        return Target(self.doc["target"])

    @property
    def graph(self):
        """The graph the library runs (rebuilt from its JSON when loaded; weights are views into the library)."""
        if self._graph is None:
            from ..graph.export import rebuild_graph

            self._graph = rebuild_graph(self.module.path, self.module, self.doc)[0]
        return self._graph

    @property
    def memory_plan(self):
        """The static memory plan the library runs on (tessera.graph.passes.plan_memory)."""
        if self._plan is None:
            from ..graph.passes.plan_memory import plan_memory

            plan = plan_memory(self.graph, strategy=self.doc["aot"]["strategy"])
            if plan.arena_bytes != self.workspace_bytes:
                raise TesseraError(f"{self.module.path}: the memory plan of its graph has {plan.arena_bytes} bytes, "
                                   f"the library was built with {self.workspace_bytes} (a different planner?)")
            self._plan = plan
        return self._plan

    @property
    def kernel_names(self) -> list:
        """The C kernel functions the library calls, one per distinct kernel."""
        return list(self.doc["kernels"])

    @property
    def header(self) -> str:
        """The C header of the library's API (what export_library writes as model.h)."""
        return self.doc["aot"]["header"]

    # ------------------------------------------------------------------ inputs
    def _normalize_inputs(self, args, kwargs) -> list:
        return self._from_dict(gather_inputs(self.doc["name"], self.input_names, args, kwargs))

    def _from_dict(self, given) -> list:
        check_input_names(self.doc["name"], self.input_names, given, [f"{s.name}: {s}" for s in self._inputs],
                          [s.value_name for s in self._inputs])
        return [self._check_input(s, given[s.name]) for s in self._inputs]

    @staticmethod
    def _check_input(s: _Spec, x):
        x = input_array(s.name, x, s.np_dtype, s.dtype, str(s))
        if x.shape != s.shape:
            raise ShapeError(f"input {s.name!r}: shape {x.shape}, the graph expects {s} (the ahead-of-time module "
                             f"has static shapes)")
        return x

    # ------------------------------------------------------------------ running
    def _execute(self, arrays) -> list:
        outs = [np.empty(s.shape, s.np_dtype) for s in self._outputs]
        if self._lock.acquire(False):
            try:
                self._call(self._handle, self._in_ptrs, self._out_ptrs, arrays, outs)
            finally:
                self._lock.release()
        else:  # another thread runs the shared instance: this call gets its own (own arena)
            h = self._new_instance()
            try:
                self._call(h, (_P * max(len(arrays), 1))(), (_P * max(len(outs), 1))(), arrays, outs)
            finally:
                self._destroy(h)
        return outs

    def _call(self, handle, ins, outs_c, arrays, outs):
        _fill(ins, arrays)
        _fill(outs_c, outs)
        rc = self._run(handle, ins, outs_c)
        if rc:
            raise self._status_error(rc, handle)

    def _status_error(self, rc, handle) -> TesseraError:
        msg = (self._error(handle) or b"").decode("utf-8", "replace") or "(no message)"
        cls = _STATUS_ERRORS.get(rc, TesseraError)
        return cls(f"{self.prefix}_run (graph {self.doc['name']!r}): status {rc}: {msg}")

    def run(self, inputs=None, **kwargs) -> list:
        """Run on a dict {input name: array}; a list of numpy arrays in the graph's output order."""
        given = dict(inputs or {})
        for k, v in kwargs.items():
            if k in given:
                raise TesseraError(f"input {k!r} is given twice")
            given[k] = v
        return self._execute(self._from_dict(given))

    def __call__(self, *args, **kwargs):
        """exe(x) / exe(x, y) / exe(x=..., y=...): one output -> an array, several -> a tuple."""
        outs = self._execute(self._normalize_inputs(args, kwargs))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _arrays(self, inputs, kwargs) -> list:
        if isinstance(inputs, dict) or inputs is None:
            given = dict(inputs or {})
            given.update(kwargs)
            return self._from_dict(given)
        if isinstance(inputs, (list, tuple)):
            return self._normalize_inputs(tuple(inputs), kwargs)
        return self._normalize_inputs((inputs,), kwargs)

    def benchmark(self, inputs=None, number: int = 10, repeat: int = 3, min_repeat_ms: int = 0,
                  **kwargs) -> BenchmarkResult:
        """Time whole runs inside the library (PREFIX_time, a C timer loop): seconds per run."""
        _check_timing(number, repeat, min_repeat_ms)
        arrays = self._arrays(inputs, kwargs)
        outs = [np.empty(s.shape, s.np_dtype) for s in self._outputs]
        ins_c, outs_c = (_P * max(len(arrays), 1))(), (_P * max(len(outs), 1))()
        _fill(ins_c, arrays)
        _fill(outs_c, outs)
        results = (ctypes.c_double * repeat)()
        with self._lock:
            rc = self._time(self._handle, ins_c, outs_c, int(number), int(repeat), int(min_repeat_ms), results)
            if rc:
                raise self._status_error(rc, self._handle)
        return BenchmarkResult(results)

    def profile(self, inputs=None, number: int = 10, repeat: int = 3, show: bool = True, **kwargs):
        """Per-node times: the graph executor over this library's kernels and weights (see GraphExecutor.profile)."""
        from ..graph.export import load_executable

        return load_executable(self.module.path, self.module, executor="graph").profile(
            inputs, number=number, repeat=repeat, show=show, **kwargs)

    def export_library(self, path, prefix: str | None = None) -> str:
        """Write this library to `path` and its C header beside it (`<stem>.h`)."""
        from ..graph.export import _target_path, write_library

        path = _target_path(path)
        if prefix is not None and prefix != self.prefix:
            if self._source_exe is None:
                raise TesseraError(f"export_library: this library's C API is named {self.prefix!r}; renaming it to "
                                   f"{prefix!r} needs the compiled graph (tessera.compile), not a loaded library")
            from ..graph.aot import build_library

            lib = build_library(self._source_exe, prefix, aot=True, strategy=self.doc["aot"]["strategy"])
            write_library(lib.path, lib.header, path)
            return path
        write_library(self.module.path, self.header, path)
        return path

    def __repr__(self):
        return (f"<tessera.AotExecutor {self.doc['name']!r}: {len(self.doc['nodes'])} nodes in one call "
                f"({self.prefix}_run), arena {self.workspace_bytes} bytes, target {self.doc['target']}>")


def doc_public_names(doc: dict, where: str = "tessera graph library") -> tuple:
    """(input names, output names) of a library's tessera_graph document: its `input_names` and
    `output_names` (the model's public names, aligned with `inputs` / `outputs`), or the values'
    names for a library written before them; malformed lists are refused."""
    out = []
    for key, items in (("input_names", doc["inputs"]), ("output_names", doc["outputs"])):
        names = doc.get(key)
        if names is None:
            if key == "input_names":
                names = [j["name"] for j in items]
            else:
                by_id = {j["id"]: j["name"] for j in doc["inputs"]}
                by_id.update({j["id"]: j["name"] for j in doc["constants"]})
                for n in doc["nodes"]:
                    by_id.update({o["id"]: o["name"] for o in n["outputs"]})
                names = [by_id[i] for i in items]
        if not isinstance(names, list) or len(names) != len(items) or \
                not all(isinstance(n, str) and n for n in names):
            raise TesseraError(f"{where}: malformed tessera_graph: {key} must be a list of {len(items)} non-empty "
                               f"names, got {names!r}")
        if key == "input_names" and len(set(names)) != len(names):
            raise TesseraError(f"{where}: malformed tessera_graph: input_names repeat a name ({names})")
        out.append(list(names))
    return tuple(out)


def _fill(slots, arrays):
    if _FAST_NUMPY:
        for i, x in enumerate(arrays):
            slots[i] = _from_address(id(x) + 16).value
    else:
        for i, x in enumerate(arrays):
            slots[i] = x.ctypes.data


def _fn(lib, name, where, restype, argtypes):
    try:
        f = getattr(lib, name)
    except AttributeError:
        raise TesseraError(f"{where}: the library does not export {name} (not an ahead-of-time tessera "
                           f"library?)") from None
    f.restype, f.argtypes = restype, argtypes
    return f
