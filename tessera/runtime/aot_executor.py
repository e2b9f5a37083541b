"""AotExecutor: a compiled model's whole graph in one C call (the library of tessera.executor.library).

The library exports `PREFIX_create/run/error/destroy/time` (its C API, model.h); this class holds
one model instance (the arena, allocated once by PREFIX_create), checks the inputs against the
plan's static types, allocates the outputs and makes one ctypes call per run: no per-op Python.
It has the graph executor's interface (runtime/executor.py): `exe(x)`, `exe.run({"input": x})`
(inputs and outputs go by the model's public names), `exe.profile(...)` (per node, C timers inside
the one entry: PREFIX_run_profiled, the real order and cache state of a call, plus what lies outside
the kernels), `exe.benchmark(...)` (the whole model timed inside the library),
`exe.export_library(path)`.

Loading needs ctypes, numpy and the library's JSON only: no compiler, no onnx, no graph code.
"""
from __future__ import annotations

import ctypes
import threading
import time
import weakref

import numpy as np

from ..errors import ShapeError, TesseraError
from .executor import Executor
from .graph_executor import graph_executor_of
from .inputs import input_array
from .module import FAST_NUMPY, STATUS_ERRORS, BenchmarkResult, check_timing, pointer_at
from .plan import Plan
from .profile import ProfileReport, ProfileRow

_P = ctypes.c_void_p


class AotExecutor(Executor):
    """Runs a whole compiled graph with one call into its library (see the module docstring).

    module: the loaded library (runtime Module); doc: its tessera_graph document; plan: the Plan
    of that document (runtime/library.py makes it with the constants mapped from the library)."""

    kind = "ahead-of-time"

    def __init__(self, module, doc: dict, plan: Plan):
        aot = doc.get("aot")
        if not aot:
            raise TesseraError(f"{module.path} has no model entry points (an ahead-of-time library needs static "
                               f"shapes)")
        super().__init__(plan)
        self.module, self.doc = module, doc
        self.prefix = aot["prefix"]
        self.workspace_bytes = aot["workspace_bytes"]
        self.library_path = module.path
        check_entry_record(module, self.prefix, doc, plan)
        self._out_shapes = [(s.shape, s.np_dtype) for s in self._outputs]
        lib = module._lib
        where = f"{module.path}"
        self._create = _fn(lib, f"{self.prefix}_create", where, _P, [])
        self._destroy = _fn(lib, f"{self.prefix}_destroy", where, None, [_P])
        self._run_c = _fn(lib, f"{self.prefix}_run", where, ctypes.c_int32, [_P, _P, _P])
        self._error = _fn(lib, f"{self.prefix}_error", where, ctypes.c_char_p, [_P])
        self._time = _fn(lib, f"{self.prefix}_time", where, ctypes.c_int32,
                         [_P, _P, _P, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_double)])
        try:
            self._run_profiled = _fn(lib, f"{self.prefix}_run_profiled", where, ctypes.c_int32,
                                     [_P, _P, _P, ctypes.POINTER(ctypes.c_double)])
        except TesseraError:           # a library from before the profiled entry: profile() goes node by node
            self._run_profiled = None
        self._kernel_list = None
        self._handle = self._new_instance()
        self._finalizer = weakref.finalize(self, self._destroy, self._handle)
        self._lock = threading.Lock()
        self._in_ptrs = (_P * max(len(self._inputs), 1))()
        self._out_ptrs = (_P * max(len(self._outputs), 1))()

    def _new_instance(self):
        h = self._create()
        if not h:      # out of memory, or a CPU without a feature the kernels use: PREFIX_error(NULL) says
            why = (self._error(None) or b"").decode("utf-8", "replace")
            raise TesseraError(f"{self.prefix}_create failed ({self.workspace_bytes}-byte arena): {why}")
        return h

    # ------------------------------------------------------------------ description
    @property
    def kernel_names(self) -> list:
        """The C kernel functions the library calls, one per distinct kernel."""
        return list(self.doc["kernels"])

    @property
    def kernels(self) -> list:
        """The distinct kernels, in first-use order: the graph compiler's Kernels (their programs and
        sources) when compiled in this process, else the library's kernel functions."""
        if self._kernel_list is None:
            self._kernel_list = graph_executor_of(self.module, self.plan).kernels
        return self._kernel_list

    @kernels.setter
    def kernels(self, ks):
        self._kernel_list = list(ks)

    @property
    def header(self) -> str:
        """The C header of the library's API (what export_library writes as model.h)."""
        return self.doc["aot"]["header"]

    def _prefix(self):
        return self.prefix

    def _header(self):
        return self.header

    # ------------------------------------------------------------------ inputs
    def _check_input(self, spec, name: str, x):
        x = input_array(name, x, spec.np_dtype, spec.dtype, spec)   # spec prints as its type text, only on error
        if x.shape != spec.shape:
            raise ShapeError(f"input {name!r}: shape {x.shape}, the graph expects {spec} (the ahead-of-time module "
                             f"has static shapes)")
        return x

    # ------------------------------------------------------------------ running
    def _run(self, arrays) -> list:
        outs = [np.empty(shape, dt) for shape, dt in self._out_shapes]
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

    def _call(self, handle, ins, outs_c, arrays, outs, secs=None):
        """One call of the entry (PREFIX_run_profiled when `secs` is given: per-node seconds there)."""
        _fill(ins, arrays)
        _fill(outs_c, outs)
        rc = self._run_c(handle, ins, outs_c) if secs is None else self._run_profiled(handle, ins, outs_c, secs)
        if rc:
            raise self._status_error(rc, handle)

    def _status_error(self, rc, handle) -> TesseraError:
        msg = (self._error(handle) or b"").decode("utf-8", "replace") or "(no message)"
        cls = STATUS_ERRORS.get(rc, TesseraError)
        return cls(f"{self.prefix}_run (graph {self.name!r}): status {rc}: {msg}")

    def benchmark(self, inputs=None, number: int = 10, repeat: int = 3, min_repeat_ms: int = 0,
                  **kwargs) -> BenchmarkResult:
        """Time whole runs inside the library (PREFIX_time, a C timer loop): seconds per run."""
        check_timing(number, repeat, min_repeat_ms)
        arrays = self._arrays(inputs, kwargs)
        outs = [np.empty(shape, dt) for shape, dt in self._out_shapes]
        ins_c, outs_c = (_P * max(len(arrays), 1))(), (_P * max(len(outs), 1))()
        _fill(ins_c, arrays)
        _fill(outs_c, outs)
        results = (ctypes.c_double * repeat)()
        with self._lock:
            rc = self._time(self._handle, ins_c, outs_c, int(number), int(repeat), int(min_repeat_ms), results)
            if rc:
                raise self._status_error(rc, self._handle)
        return BenchmarkResult(results)

    def run_profiled(self, inputs=None, **kwargs) -> tuple:
        """One run through PREFIX_run_profiled: (outputs as run() returns them, seconds of each node in
        execution order, seconds of the whole entry), every time taken by C timers inside the call."""
        if self._run_profiled is None:
            raise TesseraError(f"{self.library_path} has no {self.prefix}_run_profiled (built before the profiled "
                               f"entry existed): rebuild it")
        arrays = self._arrays(inputs, kwargs)
        n = len(self.plan.steps)
        secs = (ctypes.c_double * (n + 1))()
        outs = [np.empty(shape, dt) for shape, dt in self._out_shapes]
        with self._lock:
            self._call(self._handle, self._in_ptrs, self._out_ptrs, arrays, outs, secs)
        return outs, list(secs[:n]), secs[n]

    def profile(self, inputs=None, number: int = 10, repeat: int = 3, show: bool = True, **kwargs):
        """Per-node times of real calls: PREFIX_run_profiled runs the model as PREFIX_run does, with a C
        timer around each node (the real order, the caches as a call leaves them); `number` calls per
        round, `repeat` rounds, each figure the median over rounds of the mean over a round. Below the
        nodes: what lies outside the kernels, in the entry (argument checks, output copies) and around
        it (the Python call: input checks, output allocation, ctypes), and the whole call."""
        check_timing(number, repeat, 0)
        if self._run_profiled is None:
            return graph_executor_of(self.module, self.plan).profile(inputs, number=number, repeat=repeat,
                                                                     show=show, **kwargs)
        arrays = self._arrays(inputs, kwargs)
        steps = self.plan.steps
        n = len(steps)
        secs = (ctypes.c_double * (n + 1))()
        secs_np = np.frombuffer(secs, np.float64)
        specs, names = self._inputs, self.plan.input_names
        clock = time.perf_counter

        def call():                  # what run() does, timed from Python around the entry
            t0 = clock()
            for spec, name, x in zip(specs, names, arrays):
                self._check_input(spec, name, x)
            outs = [np.empty(shape, dt) for shape, dt in self._out_shapes]
            self._call(self._handle, self._in_ptrs, self._out_ptrs, arrays, outs, secs)
            return clock() - t0

        rounds, walls = [], []
        with self._lock:
            call()                                          # warm-up: threads started, caches as in a run
            for _ in range(repeat):
                acc, wall = np.zeros(n + 1), 0.0
                for _ in range(number):
                    wall += call()
                    acc += secs_np
                rounds.append(acc / number)
                walls.append(wall / number)
        per_round = np.array(rounds) * 1e3
        med = np.median(per_round, axis=0)
        values = self.plan.values
        rows = [ProfileRow(self.plan.kernels[st.kernel].op, st.name, [tuple(values[s].shape) for s in st.ins],
                           [tuple(values[s].shape) for s in st.outs], float(med[i]), self.plan.kernels[st.kernel].tuned)
                for i, st in enumerate(steps)]
        # the parts outside the kernels: medians of each round's own differences (medians do not add)
        in_entry = float(np.median(per_round[:, n] - per_round[:, :n].sum(axis=1)))
        around = float(np.median(np.array(walls) * 1e3 - per_round[:, n]))
        outside = [("in the entry", "argument checks, output copies", in_entry),
                   ("around the entry", "Python: input checks, outputs, ctypes", around)]
        call_ms = sum(r.ms for r in rows) + in_entry + around
        report = ProfileReport(self.name, rows, inputs=[(nm, str(s)) for nm, s in zip(names, self._inputs)],
                               outputs=[(nm, str(s)) for nm, s in zip(self.plan.output_names, self._outputs)],
                               call_ms=call_ms, outside=outside,
                               source=f"per node inside {self.prefix}_run_profiled, C timers, median of {repeat} x "
                                      f"{number} calls")
        if show:
            print(report)
        return report

    def __repr__(self):
        return (f"<tessera.AotExecutor {self.name!r}: {len(self.plan.steps)} nodes in one call "
                f"({self.prefix}_run), arena {self.workspace_bytes} bytes, target {self.plan.target}>")


def entry_record(lib, prefix: str) -> dict | None:
    """What a library's model entry points take, as compiled into it (codegen/c_aot.py `_entry_record`):
    {"workspace": arena bytes, "nodes": count, "inputs" / "outputs": bytes of each buffer}; None for
    a library built before the record."""
    try:
        def count(name):
            return ctypes.c_uint32.in_dll(lib, f"{prefix}_{name}").value

        n_in, n_out = count("num_inputs"), count("num_outputs")
        return {"workspace": ctypes.c_uint64.in_dll(lib, f"{prefix}_workspace_size").value,
                "nodes": count("num_nodes"),
                "inputs": list((ctypes.c_uint64 * n_in).in_dll(lib, f"{prefix}_input_bytes")),
                "outputs": list((ctypes.c_uint64 * n_out).in_dll(lib, f"{prefix}_output_bytes"))}
    except ValueError:
        return None


def check_entry_record(module, prefix: str, doc: dict, plan: Plan) -> None:
    """Refuse a tessera_graph that disagrees with the entry points compiled into its library: the
    entry reads and writes the caller's buffers at its own sizes, runs its own number of nodes (one
    timer each) over its own arena, so a document that says otherwise would make a run read or write
    past the buffers this executor allocates from it."""
    where = f"{module.path}: tessera_graph"
    rec = entry_record(module._lib, prefix)
    if rec is None:
        raise TesseraError(f"{module.path} does not record what its entry points {prefix}_* take (built before "
                           f"tessera checked it): re-export it, or load it with executor='graph'")
    ws = doc["aot"]["workspace_bytes"]
    memory = plan.memory
    if type(ws) is not int or ws != rec["workspace"] or (memory is not None and memory.arena_bytes != ws):
        raise TesseraError(f"{where}: aot.workspace_bytes is {ws!r} and memory.arena_bytes "
                           f"{memory.arena_bytes if memory is not None else None}, but the library's arena is "
                           f"{rec['workspace']} bytes ({prefix}_workspace_size)")
    if len(plan.steps) != rec["nodes"]:
        raise TesseraError(f"{where}: nodes has {len(plan.steps)} entries, but the library's entry runs "
                           f"{rec['nodes']} nodes ({prefix}_num_nodes)")
    for label, specs, names, sizes in (("input", plan.input_specs(), plan.input_names, rec["inputs"]),
                                       ("output", plan.output_specs(), plan.output_names, rec["outputs"])):
        if len(specs) != len(sizes):
            raise TesseraError(f"{where}: {label}s has {len(specs)} entries, but the library's entry takes "
                               f"{len(sizes)} ({prefix}_num_{label}s)")
        for i, (spec, name, nb) in enumerate(zip(specs, names, sizes)):
            if not spec.is_static or spec.nbytes() != nb:
                raise TesseraError(f"{where}: {label} {i} ({name!r}) is {spec}, but the library's entry "
                                   f"{'reads' if label == 'input' else 'writes'} {nb} bytes there "
                                   f"({prefix}_{label}_bytes[{i}])")


def _fill(slots, arrays):
    if FAST_NUMPY:
        for i, x in enumerate(arrays):
            slots[i] = pointer_at(id(x) + 16).value
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
