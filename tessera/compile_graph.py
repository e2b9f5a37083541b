"""tessera.compile: a graph (+ params) -> an executable that runs it with compiled kernels.

A DeferredGraph (a model whose structure depends on the values of some runtime inputs) compiles to
a SpecializingExecutor: per distinct value of those inputs, the graph is built and compiled on
first use and kept (the most recent `max_specializations`), then run on the other inputs. A sequence
input is given as a list of arrays and a sequence output comes back as one (graph/deferred.py)."""
from __future__ import annotations

import collections
import functools
import logging
import threading

import numpy as np

from . import progress as _progress
from .autotune.apply_history import ApplyHistoryBest
from .errors import TesseraError, UnsupportedOpError, resource_errors
from .frontend.torch import from_exported_program, is_exported_program
from .executor import build_aot, graph_executor
from .graph.lowering import compile_graph, graph_traces, static_problem
from .graph.const_eval import bind_params
from .graph.deferred import DeferredGraph, check_input, flatten, regroup, structure_of, value_key
from .graph.ir import Graph, TensorType
from .graph.passes import optimized_graph, passes_for
from .report import write_report
from .runtime.inputs import check_input_names, gather_inputs, named_inputs
from .runtime.plan import TensorSpec
from .target import Target


EXECUTORS = ("auto", "graph", "aot")
_LOG = logging.getLogger("tessera")


def compile(graph, params=None, target="c", opt_level: int = 3, disabled_passes=(),  # noqa: A001
            executor: str = "auto", database=None, progress=None):
    """Compile `graph` for `target`; returns an executor (`exe(x)`, `exe.run({...})`, `exe.profile()`).

    executor: "auto" (default): with static shapes (after the optimizations: bound by `params` or the
    frontend's shape_dict), the whole graph is one C entry point over a static memory plan, an
    AotExecutor (tessera.executor.aot: every kernel in one translation unit, no per-node Python, no
    kernel compiled on its own); with a symbolic dimension, the GraphExecutor. "graph" always the
    GraphExecutor (node by node from Python: symbolic shapes, debugging, each kernel its own library).
    "aot" the AotExecutor, refusing symbolic shapes.

    params: {graph input name: array} bound as constants (the weights `from_onnx` returns).
    opt_level: which graph passes run (tessera.graph.passes): 0 none, one kernel per node as given;
    1 fold_constant, simplify_inference, dead_code_elimination; 2 also eliminate_common_subexpr and
    fuse_ops; 3 (default, as TVM's builds use) also alter_layout and pack_matmul_weights (blocked
    convolutions, pre-packed matmul weights: ResNet-18 on 2 threads ran 2.4x ONNX Runtime's latency
    at level 2, 1.2x at 3). disabled_passes: pass names left
    out (TVM's PassContext(disabled_pass=...)), e.g. ["fuse_ops"] for the fusion ablation.
    `exe.graph` is the optimized graph that runs (`exe.graph.script()` prints it); the graph compiler
    (tessera.graph.lowering) made the kernels and the runtime Plan the executor runs (`exe.plan`).

    graph may also be a torch.export ExportedProgram: it is converted first
    (tessera.frontend.from_exported_program, its weights bound as constants).

    database: tuning records (autotune.tune_graph's; a path, an autotune.Database or a list of them):
    each kernel with a record for this target (its workload, the target's CPU level and thread count)
    is built with the fastest record's schedule, the rest with the default schedules. Records
    shipped with tessera (tuned zoo models) are searched after them; database=False uses none, not
    even those. `exe.tuning` says which kernels are tuned (one line; also logged at INFO on the
    "tessera" logger), and `exe.profile()` marks their nodes.

    progress: what the compile says while it works (tessera.progress), once it has taken 2 s:
    None (default) says it on a terminal only (stderr a tty: one live line, erased when done; nothing in
    a pipe, a log or a notebook), or through the Reporter already active (the command line's); True says
    it anywhere (plain lines on stderr when not a terminal); False says nothing; a function is called
    with every tessera.progress.ProgressEvent (steps: optimizing the graph, preparing kernels i/M,
    building kernels i/M with how many came from the compiler cache, compiling the library). The steps
    are also logged at DEBUG on the "tessera.progress" logger.
    """
    with _progress.reporting(progress):
        if is_exported_program(graph):
            if params:
                raise TesseraError("tessera.compile of a torch.export program: the program holds its own weights; "
                                   "params binds the inputs of a Graph (from_exported_program(ep, "
                                   "keep_params_as_input=True) gives one)")
            with _progress.stage("converting the torch.export program"):
                graph, params = from_exported_program(graph)
        with resource_errors(f"tessera.compile of graph {getattr(graph, 'name', '?')!r}"):
            return _compile(graph, params, target, opt_level, disabled_passes, executor, database)


def _compile(graph, params, target, opt_level, disabled_passes, executor, database):
    if Target(target).kind == "vdla":
        raise _vdla_refusal(graph)
    if isinstance(graph, DeferredGraph):
        _check_options(opt_level, executor, disabled_passes)
        if database is not None and database is not False:
            # opened (and a missing file refused) now, not at the first run; read once for every specialization
            database = ApplyHistoryBest(database, builtin=False).databases
        return SpecializingExecutor(graph, params, dict(target=target, opt_level=opt_level,
                                                        disabled_passes=tuple(disabled_passes), executor=executor,
                                                        database=database))
    if not isinstance(graph, Graph):
        raise TesseraError(f"tessera.compile takes a tessera.graph.Graph (from graph.Builder, "
                           f"tessera.frontend.from_onnx or from_exported_program) or a torch.export program, got "
                           f"{type(graph).__name__}")
    _check_options(opt_level, executor, disabled_passes)
    target = Target(target)
    with _progress.stage("optimizing the graph", detail=f"{len(graph.nodes)} nodes, opt level {opt_level}"):
        g = optimized_graph(graph, params, target, opt_level, disabled_passes)
    options = dict(target=target, opt_level=opt_level, disabled_passes=tuple(disabled_passes), executor=executor,
                   database=database)
    if executor == "auto":
        executor = "aot" if target.is_cpu and static_problem(g) is None else "graph"
    schedules = None if database is False else ApplyHistoryBest(database, builtin=True)
    with _progress.stage("looking up tuning records"):
        traces = graph_traces(g, target, schedules) if schedules is not None else None
    compiled = compile_graph(g, target, build_kernels=executor == "graph", traces=traces)
    exe = build_aot(compiled, opt_level=opt_level) if executor == "aot" else graph_executor(compiled, opt_level)
    if schedules is not None:
        exe.tuning = schedules.summary(compiled.kernels.values())
        if database is not None or any(getattr(k, "tuned", False) for k in compiled.kernels.values()):
            _LOG.info("tessera.compile(%s): %s", g.name, exe.tuning)
    else:
        exe.tuning = "no tuning records used (database=False)"
    exe.reporter = functools.partial(write_report, records=schedules)
    if getattr(params, "defaults", ()):
        _take_defaults(exe, graph, params, options)
    return exe


_VDLA_INSTEAD = ("a whole graph does not compile for the accelerator: compile it for the CPU (target 'c'), or "
                 "quantize it (tessera.graph.passes.quantize.quantize) and run it with "
                 "tessera.executor.partition_for_vdla (its int8 convolutions on VDLA, the rest on the CPU; "
                 "docs/vdla.md); single int8 conv2d / dense layers build with tessera.build(..., target='vdla') "
                 "from tessera.accel.vdla.layers")


def _vdla_refusal(graph) -> TesseraError:
    """Why tessera.compile refuses the VDLA target, said before any work (the code generator would fail
    deep inside on the first kernel): VDLA runs int8 layers in its packed layouts with tensorized schedules
    (tessera.accel.vdla.layers), which the operator library does not make, and its out buffer stores int8
    only -- an int32 accumulator or a float value cannot be written back. Names the first node whose
    result VDLA cannot store, else the first node."""
    nodes = list(graph.nodes) if isinstance(graph, Graph) else []
    for n in nodes:
        for o in n.outputs:
            if isinstance(o.type, TensorType) and o.type.dtype != "int8":
                return UnsupportedOpError(n.op, n.name, f"on target vdla it returns {o.type} ({o.name!r}), and VDLA "
                                                        f"stores int8 tensors only (its out buffer: an int32 "
                                                        f"accumulator or a float value cannot be written back); "
                                                        + _VDLA_INSTEAD)
    if nodes:
        return UnsupportedOpError(nodes[0].op, nodes[0].name, "the operator library has no VDLA schedule for it "
                                                              "(VDLA runs int8 layers in its packed layouts); "
                                                              + _VDLA_INSTEAD)
    return TesseraError("tessera.compile(target='vdla'): " + _VDLA_INSTEAD)


def _take_defaults(exe, graph: Graph, params, options: dict) -> None:
    """Let `exe` take the inputs whose params are defaults (graph.deferred.Params: an ONNX initializer
    that is also a graph input): they stay folded in, and a run that gives one runs on a variant
    compiled with them as inputs, made on first use (ONNX semantics, as ONNX Runtime's overridable
    initializers)."""
    public = dict(zip([v.name for v in graph.inputs], graph.input_names))
    public.update((n, n) for n in graph.input_names)
    exe.defaults = {public[n]: _read_only(params[n]) for n in params.defaults}
    rest = {n: a for n, a in params.items() if n not in params.defaults}
    exe.overriding = lambda: compile(graph, rest, **options)


def _read_only(a) -> np.ndarray:
    """A read-only view of a (the defaults a run fills in must stay what was folded in)."""
    v = np.asarray(a).view()
    v.flags.writeable = False
    return v


def _check_options(opt_level, executor, disabled_passes) -> None:
    if isinstance(opt_level, bool) or not isinstance(opt_level, int) or not 0 <= opt_level <= 3:
        raise TesseraError(f"tessera.compile: opt_level must be an int from 0 to 3, got {opt_level!r}")
    if not isinstance(executor, str) or executor not in EXECUTORS:
        raise TesseraError(f"tessera.compile: executor must be one of {', '.join(map(repr, EXECUTORS))} "
                           f"('auto': one C entry with static shapes, else the graph executor), got {executor!r}")
    passes_for(opt_level, disabled_passes)      # unknown pass names fail before any work


class BuildOnceCache:
    """The `max_size` most recently used values, each made by a build function on its key's first use:
    outside the lock (lookups of built keys go on meanwhile), once (a thread asking for a key another
    thread is building waits for that build; if it fails, the next asker builds)."""

    def __init__(self, max_size: int):
        self.max_size = int(max_size)
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        self._building: dict = {}                   # key -> Event set when that key's build ends

    def __len__(self):
        return len(self._cache)

    def get(self, key, build):
        """The value of `key`, build() made once on its first use."""
        while True:
            with self._lock:
                if key in self._cache:
                    self._cache.move_to_end(key)
                    return self._cache[key]
                pending = self._building.get(key)
                if pending is None:
                    self._building[key] = done = threading.Event()
                    break
            pending.wait()
        try:
            value = build()
            with self._lock:
                self._cache[key] = value
                while len(self._cache) > self.max_size:
                    self._cache.popitem(last=False)
            return value
        finally:
            with self._lock:
                del self._building[key]
            done.set()


class SpecializingExecutor:
    """Runs a DeferredGraph: per distinct value of its value inputs (dtype, shape and bytes) and
    shape of its shape inputs, the graph built for them and compiled with tessera.compile's options, made on first use and
    kept (the `max_specializations` most recently used); the other inputs run through it.

    exe(x, axes) / exe.run({...}) as any executor; `specializations` is how many are kept,
    `specialization(inputs)` the executor a run on these inputs uses (its graph, plan, profile). An
    input of sequence type takes a list of arrays, an optional one None or its value (one graph input
    per element, named 'name[i]', in the specialization); sequence outputs come back as lists."""

    kind = "specializing"
    max_specializations = 64

    def __init__(self, deferred: DeferredGraph, params, options: dict):
        self.deferred = deferred
        self.params = dict(params or {})
        self.options = options
        self.value_inputs = tuple(deferred.value_inputs)      # grow when a build needs another
        self.shape_inputs = tuple(deferred.shape_inputs)
        self._cache: collections.OrderedDict = collections.OrderedDict()   # key -> (executor, outputs layout)
        self._lock = threading.Lock()              # guards the cache, _building and the deciding inputs
        self._building: dict = {}                   # key -> Event set when that key's build ends

    @property
    def name(self) -> str:
        return self.deferred.name

    @property
    def input_names(self) -> list:
        return [n for n in self.deferred.input_names if n not in self.params]

    @property
    def output_names(self) -> list:
        return list(self.deferred.output_names)

    @property
    def inputs(self) -> list:
        """The inputs' TensorSpecs (dtype, shape with symbol names), in input_names' order (a sequence
        or optional input: its SequenceType / OptionalType)."""
        return [TensorSpec(n, t.dtype, t.shape) if isinstance(t, TensorType) else t
                for n, t in zip(self.deferred.input_names, self.deferred.input_types) if n not in self.params]

    @property
    def specializations(self) -> int:
        return len(self._cache)

    @property
    def tuning(self) -> str:
        """Which tuning records the kernels use: decided as each specialization is compiled (its own
        `tuning` says), so here one line saying so (tessera.compile's `exe.tuning` for this kind)."""
        if self.options.get("database") is False:
            return "no tuning records used (database=False)"
        return (f"tuning records are applied per specialization as it is compiled "
                f"(exe.specialization(inputs).tuning); {self.specializations} compiled so far")

    @property
    def graph(self):
        per = self._per()
        if not per:
            raise TesseraError(f"model {self.name!r} returns sequences or optionals, regrouped from a graph's tensor "
                               f"outputs: exe.specialization(inputs).graph is that graph")
        raise TesseraError(f"model {self.name!r} has one graph per {' and per '.join(per)}: "
                           f"exe.specialization(inputs).graph is the one those inputs run")

    def _per(self) -> list:
        """What the specializations are made per, for messages."""
        return ([f"value of inputs {list(self.value_inputs)}"] if self.value_inputs else []) + \
            ([f"shape (a sequence's element shapes, an optional's emptiness) of {list(self.shape_inputs)}"]
             if self.shape_inputs else [])

    def export_library(self, path, prefix=None):
        per = self._per()
        if per:
            raise TesseraError(f"export_library: model {self.name!r} is compiled per {' and per '.join(per)}; "
                               f"freeze them (from_onnx(..., const_inputs=..., shape_dict=...)) to export one library")
        raise TesseraError(f"export_library: model {self.name!r} returns sequences or optionals, which its "
                           f"executor regroups in Python; a library returns tensors")

    # ------------------------------------------------------------------ inputs
    def _given(self, args, kwargs) -> dict:
        names = self.input_names
        given = gather_inputs(self.name, names, args, kwargs)
        if len(given) != len(names) or not all(n in given for n in names):
            check_input_names(self.name, names, given, [f"{n}: {t}" for n, t in
                                                        zip(self.deferred.input_names, self.deferred.input_types)
                                                        if n in names])
        out = {}
        for n, t in zip(self.deferred.input_names, self.deferred.input_types):
            if n in given:
                out[n] = check_input(n, given[n], t)
        return out

    def _key(self, given: dict) -> tuple:
        key = [(n, structure_of(given[n], self.deferred.input_type(n))) for n in self.shape_inputs]
        for n in self.value_inputs:
            key.append((n,) + value_key(given[n]))
        return tuple(key)

    # ------------------------------------------------------------------ running
    def specialization(self, inputs=None, **kwargs):
        """The compiled executor for the values these inputs have (built and compiled on first use)."""
        given = self._given((), {**(inputs or {}), **kwargs})
        return self._specialization(given)[0]

    def _specialization(self, given: dict) -> tuple:
        """(executor, outputs layout: deferred.regroup) for these inputs; one cache entry holds both, so
        an eviction by another thread cannot part a run's executor from its layout. A new one is built
        outside the lock (runs on built ones go on meanwhile); a thread asking for a key another thread
        is building waits for that build, then looks again."""
        deciding = self.value_inputs, self.shape_inputs
        key = self._key(given)
        while True:
            with self._lock:
                if (self.value_inputs, self.shape_inputs) != deciding:
                    deciding = self.value_inputs, self.shape_inputs
                    key = self._key(given)      # another thread found more inputs that decide the graph
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
                    return hit
                pending = self._building.get(key)
                if pending is None:
                    self._building[key] = done = threading.Event()
                    break
            pending.wait()      # built (then a hit), failed (then this thread tries) or found more deciding inputs
        try:
            return self._build(given, key)
        finally:
            with self._lock:
                del self._building[key]
            done.set()

    def _build(self, given: dict, key: tuple) -> tuple:
        """Specialize and compile for these inputs (outside the lock), then cache the result."""
        value_inputs, shape_inputs = self.value_inputs, self.shape_inputs
        frozen = {n: x for n, x in given.items() if n in value_inputs}
        frozen.update({n: np.asarray(a) for n, a in self.params.items() if n in self.deferred.input_names})
        with resource_errors(f"specializing model {self.name!r} for its inputs"):
            names, shaped, graph, params, layout = self.deferred.specialize({**given, **frozen}, list(frozen),
                                                                            list(shape_inputs))
        merged = {**params, **{n: a for n, a in self.params.items() if n not in self.deferred.input_names}}
        exe = compile(graph, merged, **self.options)
        with self._lock:
            extra = [n for n in names if n not in self.value_inputs and n not in self.params]
            more = [n for n in shaped if n not in self.shape_inputs]
            if extra or more:
                self.value_inputs = self.value_inputs + tuple(extra)
                self.shape_inputs = self.shape_inputs + tuple(more)
            if (self.value_inputs, self.shape_inputs) != (value_inputs, shape_inputs):
                key = self._key(given)
            self._cache[key] = exe, layout
            while len(self._cache) > self.max_specializations:
                self._cache.popitem(last=False)
        return exe, layout

    def _feeds(self, exe, given: dict) -> dict:
        """The inputs of specialization `exe`: sequences flattened to one array per element."""
        flat: dict = {}
        for n, x in given.items():
            flatten(n, x, self.deferred.input_type(n), flat)
        return {n: flat[n] for n in exe.input_names}

    def _run_given(self, given: dict) -> list:
        exe, layout = self._specialization(given)
        return regroup(exe.run(self._feeds(exe, given)), layout)

    def run(self, inputs=None, **kwargs) -> list:
        """Run on a dict {input name: array}; a list of numpy arrays in the model's output order."""
        return self._run_given(self._given((), named_inputs(inputs, kwargs)))

    def __call__(self, *args, **kwargs):
        outs = self._run_given(self._given(args, kwargs))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def report(self, path, database=None, inputs=None, **options):
        """The report page (Executor.report) of the specialization these inputs run (given as a dict)."""
        if inputs is None:
            raise TesseraError(f"report: model {self.name!r} is compiled per {' and per '.join(self._per()) or 'run'}; "
                               f"give the inputs to report on (exe.report(path, inputs={{...}}))")
        given = self._given((), dict(inputs))
        exe = self._specialization(given)[0]
        return exe.report(path, database=database, inputs=self._feeds(exe, given), **options)

    def profile(self, inputs=None, **kwargs):
        """The per-node profile of the specialization these inputs run."""
        given = self._given((), {**(inputs or {})})
        exe = self._specialization(given)[0]
        return exe.profile(self._feeds(exe, given), **kwargs)

    def __repr__(self):
        return (f"<tessera.SpecializingExecutor {self.name!r}: "
                f"{'per ' + ' and per '.join(self._per()) if self._per() else 'sequence or optional outputs'}, "
                f"{len(self._cache)} compiled>")
