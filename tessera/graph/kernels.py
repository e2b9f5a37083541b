"""The graph compiler's kernels: one Kernel per (op, attrs, input types, output types, target).

Each node becomes a kernel: a te placeholder per input (a symbolic dimension is a te.var of that
name), the op's `compute`, `te.create_prim_func`, the op's default schedule when it has one (a
fused node: graph/fused.py), lowered and rendered by the target's Backend (tessera.backend).
Kernels are cached in process by that signature, so every node of that signature, in any graph,
shares one Kernel. A kernel builds its own library only when something calls it on its own (the
graph executor; `compile_kernels` builds several in parallel, the C compiler's output cached on
disk by source hash); the ahead-of-time module compiles the lowered programs in one unit instead.
"""
from __future__ import annotations

import contextvars
import copy
import functools
from dataclasses import dataclass, field
import hashlib
import json
import threading
import warnings

import numpy as np

from .. import te
from ..arith import simplify
from ..backend import functions_of, get_backend
from ..errors import DTypeError, ShapeError, TesseraError, UnsupportedOpError
from ..ir import expr as E
from ..ir.functor import collect_vars, substitute
from ..ir.names import identifier
from .. import progress
from ..ops.gpu import schedule_gpu_default
from ..ops.registry import ScheduleContext, get_op
from ..target import Target
from ..te.create_prim_func import block_name_of
from ..te.tensor import PlaceholderOp
from ..tir.schedule import Schedule, Trace
from .fused import FusedKernel
from .ir import FUSED_OP, attr_key


GPU_KINDS = ("cuda", "opencl")   # targets whose kernels take the default GPU schedule


# ---------------------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------------------
class Kernel:
    """One operator prepared for one signature (te compute, schedule, lowered program and its own C
    source); compiled on demand: `fn(*inputs, *outputs)` (a runtime Function) and `module` build its
    library on first use (`compile_kernels` builds several at once). The ahead-of-time module takes
    `lowered` into one translation unit and never compiles the kernel on its own.

    out_shape_exprs: per output, its shape as PrimExprs over `shape_vars` (the te.vars of the
    symbolic input dimensions, by name); `output_shapes(in_shapes)` evaluates them.
    """

    __slots__ = ("op", "node", "target", "input_types", "output_types", "in_vars", "out_shape_exprs",
                 "static_out_shapes", "scheduled", "tuned", "prim", "func", "source", "lowered", "_module", "_fn",
                 "_lock")

    def __init__(self, prep, target):
        self.op, self.node, self.target = prep.op, prep.node, target
        self.prim = prep.prim                 # what was built: a PrimFunc or a tir.Schedule
        self.func = prep.func                 # the unscheduled PrimFunc (the fall-back)
        self.source, self.lowered = prep.source, prep.lowered
        self.input_types, self.output_types = prep.input_types, prep.output_types
        self.in_vars = prep.in_vars           # per input: tuple of (dim, var name) for symbolic dims
        self.out_shape_exprs = prep.out_exprs
        self.scheduled = prep.scheduled
        self.tuned = prep.tuned               # scheduled by a tuning record (else the default schedule)
        static = all(isinstance(d, int) for s in self.out_shape_exprs for d in s)
        self.static_out_shapes = [tuple(s) for s in self.out_shape_exprs] if static else None
        self._module = self._fn = None
        self._lock = threading.Lock()

    @property
    def compiled(self) -> bool:
        """Whether the kernel's own library is built and loaded."""
        return self._module is not None

    @property
    def module(self):
        """The kernel's own runtime Module (compiled on first use)."""
        if self._module is None:
            compile_kernels([self])
        return self._module

    @property
    def fn(self):
        """The runtime Function of the kernel's entry (compiled on first use)."""
        if self._fn is None:
            compile_kernels([self])
        return self._fn

    def _finish(self, path) -> None:
        """Load the kernel's library from `path` (or, for the BuildError of a scheduled kernel, fall
        back to the unscheduled kernel: the one fall-back path, unschedule)."""
        backend = get_backend(self.target)
        if isinstance(path, Exception):
            if not self.scheduled:
                raise path
            self.unschedule(f"the scheduled kernel failed to compile ({path})")
            path = backend.compile(self.source)
        module = backend.load(path)
        self._fn = module.get_function(module.entry_name or module.function_names[0])
        self._module = module

    def unschedule(self, why: str) -> None:
        """The one fall-back of a scheduled kernel the compiler refuses (on its own, or in a model's
        library): replace its program by the unscheduled one (lowered program and source too), with
        one warning naming the kernel and why, so that the model keeps running."""
        warnings.warn(f"{_where(self.op, self.node)}: {why}; using the unscheduled kernel", stacklevel=6)
        self.source, self.lowered = _generate(self.func, self.target, identifier(self.op))
        self.scheduled, self.tuned, self.prim = False, False, self.func

    def output_shapes(self, in_shapes) -> list:
        """Output shapes (tuples of ints) for inputs of these actual shapes."""
        if self.static_out_shapes is not None:
            return self.static_out_shapes
        env = {}
        for dims, shape in zip(self.in_vars, in_shapes):
            for d, var in dims:
                env.setdefault(var, int(shape[d]))
        out = []
        for exprs in self.out_shape_exprs:
            dims = []
            for e in exprs:
                if isinstance(e, int):
                    dims.append(e)
                    continue
                vmap = {v: E.IntImm(v.dtype, env[v]) for v in _vars_of(e) if v in env}
                r = simplify(substitute(e, vmap))
                if not isinstance(r, E.IntImm):
                    raise ShapeError(f"{self.op}: output extent {e.script()} does not reduce to an integer "
                                     f"from the input shapes {list(in_shapes)}")
                dims.append(int(r.value))
            out.append(tuple(dims))
        return out

    def __repr__(self):
        sig = ", ".join(str(t) for t in self.input_types)
        return f"<Kernel {self.op}({sig}) -> {', '.join(str(t) for t in self.output_types)}>"


def _vars_of(e):
    return collect_vars(e)


class HostKernel:
    """An op that runs on the host (OpDef.host: its output extents depend on its input values):
    `fn(*inputs)` returns the output arrays, checked against the output types' dtypes and ranks;
    the graph executor binds the symbolic extents from them. Nothing is compiled."""

    host = True
    compiled = True
    scheduled = False
    tuned = False

    def __init__(self, op, attrs, input_types, output_types, target, node=None):
        self.op, self.node, self.target = op, node, target
        self.attrs = dict(attrs)
        self.input_types, self.output_types = tuple(input_types), tuple(output_types)
        self.in_vars = ()
        self.out_shape_exprs = None
        self.static_out_shapes = None
        self._host = get_op(op, node).host
        self._np = [t.dtype.numpy() for t in self.output_types]
        self.fn = self._call

    @property
    def prim(self):
        raise TesseraError(f"{_where(self.op, self.node)} runs on the host (its output extents depend on the "
                           f"values), so it has no C program; a model with it runs in the graph executor and "
                           f"cannot be written into a library")

    lowered = None
    source = None

    def _call(self, *arrays):
        outs = self._host([np.asarray(a) for a in arrays], self.attrs)
        if len(outs) != len(self.output_types):
            raise TesseraError(f"{_where(self.op, self.node)}: the host function gave {len(outs)} outputs, the op "
                               f"has {len(self.output_types)}")
        result = []
        for i, (o, t, dt) in enumerate(zip(outs, self.output_types, self._np)):
            o = np.ascontiguousarray(o)
            if o.dtype != dt or o.ndim != t.ndim:
                raise TesseraError(f"{_where(self.op, self.node)}: output {i} is {o.dtype}{list(o.shape)}, its "
                                   f"type is {t}")
            result.append(o)
        return result

    def output_shapes(self, in_shapes) -> list:
        raise ShapeError(f"{_where(self.op, self.node)}: its output extents are known only after it runs")

    def __repr__(self):
        return f"<HostKernel {self.op}({', '.join(str(t) for t in self.input_types)})>"


_KERNELS: dict = {}
_KERNEL_LOCK = threading.Lock()


def kernel_cache_info() -> dict:
    """How many kernels the in-process cache holds (by op name)."""
    counts: dict = {}
    for key in list(_KERNELS):
        counts[key[0]] = counts.get(key[0], 0) + 1
    return counts


def clear_kernel_cache() -> None:
    """Forget the in-process kernels and programs (the on-disk library cache stays)."""
    with _KERNEL_LOCK:
        _KERNELS.clear()
        _PROGRAMS.clear()


def trace_key(trace) -> str:
    """A short digest of a trace's JSON (part of a tuned kernel's cache key)."""
    return hashlib.blake2b(json.dumps(trace, sort_keys=True).encode(), digest_size=8).hexdigest()


def _kernel_key(op, attrs, input_types, output_types, target):
    return (op, tuple((k, attr_key(v)) for k, v in sorted(dict(attrs).items())),
            tuple(input_types), tuple(output_types), str(target))


def get_kernel(op: str, attrs, input_types, output_types, target="c", node: str | None = None) -> Kernel:
    """The compiled kernel of `op` for this signature, built on first use and cached."""
    return get_kernels([(op, attrs, input_types, output_types, node)], target)[0]


def build_jobs() -> int:
    """How many C compilers run at once while building kernels ($TESSERA_BUILD_JOBS, else the CPUs)."""
    import os

    try:
        n = int(os.environ.get("TESSERA_BUILD_JOBS", "0"))
    except ValueError:
        n = 0
    return n if n > 0 else (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def kernel_traces(requests, target, schedules) -> dict:
    """The one step where tuning records apply: {node name: the trace JSON its kernel is scheduled
    by} for the kernel requests (op, attrs, input_types, output_types, node) whose program has a
    record in `schedules` (autotune.ApplyHistoryBest, or anything with `lookup(func, target) ->
    trace JSON or None`); get_kernels then schedules those kernels by their traces.
    A record whose trace is the kernel's default schedule (tuning measured it and found nothing faster)
    is left out: the kernel is built as without records, not counted as tuned, and `schedules` is told
    through its `default_record(func)` where it has one."""
    target = Target(target)
    out = {}
    for op, attrs, in_types, out_types, node in requests:
        if op != FUSED_OP and get_op(op, node).host is not None:
            continue
        prog = get_program(op, attrs, in_types, out_types, target, node)
        trace = schedules.lookup(prog.func, target)
        if trace is None:
            continue
        if trace == prog.default_trace:
            if hasattr(schedules, "default_record"):
                schedules.default_record(prog.func)
            continue
        out[node] = trace
    return out


def get_kernels(requests, target="c", compile: bool = True, traces=None) -> list:  # noqa: A002
    """Kernels for several (op, attrs, input_types, output_types, node) at once: the programs are
    prepared (computed, scheduled, lowered, rendered) one after the other; with `compile` the C
    compiler then builds the ones not built yet, several in parallel (compile_kernels). Without it
    the kernels are prepared only (the ahead-of-time module compiles their lowered programs in one
    translation unit; a kernel still builds itself when its `fn` is first used).

    traces: {node name: trace JSON} (kernel_traces): a node's kernel is scheduled by its trace
    instead of the default schedule (and cached under that trace)."""
    target = Target(target)
    traces = traces or {}
    out: list = [None] * len(requests)
    with progress.stage("preparing kernels", total=len(requests), detail="schedule, lower, write C") as st:
        for i, (op, attrs, in_types, out_types, node) in enumerate(requests):
            out[i] = _prepared(op, attrs, in_types, out_types, node, target, traces)
            st.advance()
    if compile:
        compile_kernels(out)
    return out


def _prepared(op, attrs, in_types, out_types, node, target, traces):
    """The kernel of one request of get_kernels (cached, else prepared now)."""
    key = _kernel_key(op, attrs, in_types, out_types, target)
    if op != FUSED_OP and get_op(op, node).host is not None:
        return _KERNELS.get(key) or HostKernel(op, attrs, tuple(in_types), tuple(out_types), target, node)
    trace = traces.get(node)
    if trace is not None:
        key = key + (trace_key(trace),)
    k = _KERNELS.get(key)
    if k is None:
        k = Kernel(prepare_kernel(op, attrs, tuple(in_types), tuple(out_types), target, node, trace), target)
        with _KERNEL_LOCK:
            k = _KERNELS.setdefault(key, k)
    return k


def compile_kernels(kernels) -> None:
    """Build and load each kernel's own library where it is not built yet: the C compiler runs on
    several at once (build_jobs())."""
    todo, seen = [], set()
    for k in kernels:
        if k is not None and not k.compiled and id(k) not in seen:
            seen.add(id(k))
            todo.append(k)
    if not todo:
        return
    todo.sort(key=id)                 # one lock order for every thread
    for k in todo:
        k._lock.acquire()
    try:
        todo2 = [k for k in todo if not k.compiled]
        with progress.stage("building kernels", total=len(todo2), detail="C compiler") as st:
            paths = _compile_all([k.source for k in todo2], st.advance)
        for k, path in zip(todo2, paths):
            k._finish(path)
    finally:
        for k in todo:
            k._lock.release()


def _compile_all(sources, done=lambda: None) -> list:
    """Compile every backend Source (several at once); a list of paths (or exceptions). done() is
    called after each (progress: the builds run in copies of this thread's context, so the C compiler
    driver's tallies reach this thread's progress reporter)."""

    def one(src):
        try:
            return get_backend(src.target).compile(src)
        except TesseraError as e:
            return e
        finally:
            done()

    jobs = min(build_jobs(), len(sources))
    if jobs <= 1 or not sources:
        return [one(src) for src in sources]
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = [pool.submit(contextvars.copy_context().run, one, src) for src in sources]
        return [f.result() for f in futures]
    finally:    # on Ctrl-C: no new build starts; those running finish or fail (and clean up) first
        pool.shutdown(wait=True, cancel_futures=True)


def _where(op, node):
    return f"{op} (node {node!r})" if node else op


@dataclass(frozen=True)
class Prepared:
    """A kernel whose C source is generated but not compiled yet: its program as scheduled (`prim`: a
    PrimFunc or a tir.Schedule), the unscheduled `func`, the backend Source and lowered function."""

    op: str
    node: object
    input_types: tuple
    output_types: tuple
    in_vars: tuple
    out_exprs: list
    scheduled: bool
    tuned: bool
    prim: object
    func: object
    source: object
    lowered: object

    @property
    def name_hint(self) -> str:
        return self.source.name_hint


def _generate(obj, target, name=None):
    """(backend Source, lowered PrimFunc) of a PrimFunc or Schedule, as tessera.build would compile it;
    a single function is named `name` (the op's, so the generated C reads `nn_conv2d`, not `main`).
    The lowered program is None when obj has several functions (such a kernel only runs on its own)."""
    target = Target(target)
    funcs = functions_of(obj)
    if name and len(funcs) == 1 and funcs[0].name != name:
        funcs = [funcs[0].replace(name=name)]
    backend = get_backend(target)
    lowered = [backend.lower(f, target) for f in funcs]
    source = backend.render(lowered, target, lowered[0].name)
    return source, (lowered[0] if len(lowered) == 1 else None)


@dataclass(frozen=True)
class KernelProgram:
    """A graph kernel before its schedule is chosen: `func`, the unscheduled PrimFunc (what a tuning
    record's trace replays on, keyed by its structural hash), and `schedule(knobs=None)`, its
    default schedule (the op's, a fused group's by its anchor, the GPU default), None when it has
    none. knobs: an ops.registry.Knobs while the tuner explores the default schedule's decisions.
    apply(sch, knobs, where): what schedules it (None: nothing); label: how `where` names it."""

    op: str
    node: object
    where: str
    kernel_name: str
    target: object
    what: str | None
    func: object
    outs: list
    in_vars: tuple
    out_exprs: list
    apply: object = field(repr=False)
    label: str = ""

    def schedule(self, knobs=None, where=None):
        """The default schedule of func (a tir.Schedule; with knobs, its decisions sampled or set),
        or None where the kernel has no default schedule. Raises the TesseraError of a schedule that
        fails. where: how warnings name the kernel (where_of(node) of the node asking; default the
        node the program was first made for)."""
        if self.apply is None:
            return None
        sch = Schedule(self.func) if knobs is None else Schedule(self.func, seed=knobs.seed)
        return self.apply(sch, knobs, where or self.where)

    @functools.cached_property
    def default_trace(self):
        """The trace JSON of the default schedule (as the tuner records it: the unscheduled program's
        where it has none), None where that schedule fails; computed once per program (kernel_traces
        compares every record with it, on every compile of a model with records)."""
        try:
            sch = self.schedule()
        except TesseraError:
            return None
        return (sch if sch is not None else Schedule(self.func)).trace.as_json()

    def where_of(self, node) -> str:
        """The kernel named with `node` (the program is cached by signature, so its own `where`
        names the first node it was made for, not necessarily the one asking)."""
        if not node or node == self.node:
            return self.where
        return _where(self.label, node)

    def __repr__(self):
        return f"<KernelProgram {self.where} on {self.target}>"

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


_PROGRAMS: dict = {}


def get_program(op, attrs, input_types, output_types, target="c", node=None) -> KernelProgram:
    """The KernelProgram of this signature (cached in process like the kernels)."""
    target = Target(target)
    key = _kernel_key(op, attrs, input_types, output_types, target)
    prog = _PROGRAMS.get(key)
    if prog is None:
        prog = kernel_program(op, attrs, tuple(input_types), tuple(output_types), target, node)
        with _KERNEL_LOCK:
            prog = _PROGRAMS.setdefault(key, prog)
    return prog


def kernel_program(op_name, attrs, input_types, output_types, target, node) -> KernelProgram:
    """The op's (or fused group's) te compute as a PrimFunc, with its default schedule (see KernelProgram)."""
    target = Target(target)
    label = op_name               # how `where` names the kernel (a fused group by its function)
    where = _where(label, node)
    fused = None
    if op_name == FUSED_OP:
        # a fused node: its function's computes composed, inlined, scheduled by its anchor (fused.py)
        fn = dict(attrs)["function"]
        label = fn.name
        where = _where(label, node)
        fused = FusedKernel(fn, where)
        kernel_name = fused.name
        names = fused.input_names()
        if len(names) != len(input_types):
            raise TesseraError(f"{where}: function {kernel_name!r} takes {len(names)} inputs, got "
                               f"{len(input_types)}")
    else:
        opdef = get_op(op_name, node)
        if opdef.compute is None:
            raise UnsupportedOpError(op_name, node, "the op has no compute registered")
        kernel_name = op_name
        names = _input_names(opdef, len(input_types))
    # placeholders: symbolic dims are te.vars shared by name within the kernel
    vars_by_name: dict = {}
    placeholders, in_vars = [], []
    for name, t in zip(names, input_types):
        shape, dims = [], []
        for d, s in enumerate(t.shape):
            if isinstance(s, str):
                v = vars_by_name.get(s)
                if v is None:
                    v = vars_by_name[s] = te.var(s)
                shape.append(v)
                dims.append((d, v))
            else:
                shape.append(s)
        placeholders.append(te.placeholder(shape, t.dtype, name))
        in_vars.append(tuple(dims))
    try:
        outs = (fused.compute(list(placeholders), target) if fused is not None
                else opdef.compute_for(list(placeholders), attrs, target))
    except TesseraError as e:
        if node and node not in str(e):
            raise type(e)(f"{e} (node {node!r})") if type(e) in (ShapeError, TesseraError, DTypeError) else e
        raise
    if isinstance(outs, te.Tensor):
        outs = [outs]
    outs = list(outs)
    if len(outs) != len(output_types):
        raise TesseraError(f"{where}: compute gave {len(outs)} outputs, type inference {len(output_types)}")
    seen = set()
    for i, (o, t) in enumerate(zip(outs, output_types)):
        if not isinstance(o, te.Tensor):
            raise TesseraError(f"{where}: compute output {i} is {type(o).__name__}, not a te.Tensor")
        if isinstance(o.op, PlaceholderOp) or id(o) in seen:
            # an output that is an input (or another output) gets its own copy stage
            src = o
            o = te.compute(src.shape, lambda *idx, src=src: src[idx], name=f"{identifier(kernel_name)}_out{i}")
            outs[i] = o
        seen.add(id(o))
        if o.dtype != t.dtype:
            raise DTypeError(f"{where}: compute output {i} is {o.dtype}, type inference says {t.dtype}")
        if len(o.shape) != t.ndim:
            raise ShapeError(f"{where}: compute output {i} has rank {len(o.shape)}, type inference says "
                             f"{t} (rank {t.ndim})")
    out_exprs = []
    for i, (o, t) in enumerate(zip(outs, output_types)):
        dims = []
        for d, (e, want) in enumerate(zip(o.shape, t.shape)):
            if isinstance(e, E.IntImm):
                if isinstance(want, int) and e.value != want:
                    raise ShapeError(f"{where}: compute output {i} has extent {e.value} in dimension {d}, "
                                     f"type inference says {t}")
                dims.append(int(e.value))
            else:
                dims.append(e)
        out_exprs.append(tuple(dims))
    func = te.create_prim_func(placeholders + outs, name=identifier(kernel_name))
    apply, what = None, None
    if target.kind in GPU_KINDS:
        what = "the default GPU schedule"   # ops and fused groups alike (ops/gpu)

        def apply(sch, knobs, where):
            return schedule_gpu_default(sch, target)
    elif fused is not None:
        what = "scheduling the fused kernel"
        func = fused.program(func)

        def apply(sch, knobs, where):
            fk = fused
            if where != fused.where:      # its warnings name the node asking (a shallow copy: read-only use)
                fk = copy.copy(fused)
                fk.where = where
            return fk.schedule(sch, func, outs, target, knobs=knobs)   # the Schedule to build (maybe a new one)
    elif opdef.schedule is not None:
        what = "the default schedule"

        def apply(sch, knobs, where):
            ctx = ScheduleContext(block=block_name_of(func, outs[0]), attrs=attrs, target=target,
                                  input_types=input_types, output_types=output_types, knobs=knobs)
            opdef.schedule(sch, ctx)
            return sch
    return KernelProgram(op_name, node, where, kernel_name, target, what, func, outs, tuple(in_vars), out_exprs,
                         apply, label)


def prepare_kernel(op_name, attrs, input_types, output_types, target, node, trace=None) -> Prepared:
    """The op's kernel before building: te compute, PrimFunc and schedule (one per op/attrs/types/target).
    trace: a tuning record's trace (JSON) to schedule it by instead of the default schedule; one that
    no longer applies is warned about and the default used."""
    target = Target(target)
    prog = get_program(op_name, attrs, input_types, output_types, target, node)
    func, name = prog.func, identifier(prog.kernel_name)
    where = prog.where_of(node)       # the program is shared by signature: name the node asking now
    scheduled = tuned = False
    sched_obj, source, lowered = func, None, None
    if trace is not None:
        try:
            sch = Schedule(func)
            Trace.apply_json_to_schedule(trace, sch)
            source, lowered = _generate(sch, target, name)
            sched_obj, scheduled, tuned = sch, True, True
        except TesseraError as e:
            warnings.warn(f"{where}: its tuning record does not apply ({e}); using the default schedule",
                          stacklevel=4)
    if source is None and prog.what is not None:
        try:
            sch = prog.schedule(where=where)
            source, lowered = _generate(sch, target, name)
            sched_obj, scheduled = sch, True
        except TesseraError as e:
            warnings.warn(f"{where}: {prog.what} failed ({e}); using the unscheduled kernel", stacklevel=4)
            sched_obj, source = func, None
    if source is None:
        source, lowered = _generate(func, target, name)
    return Prepared(prog.kernel_name, node, input_types, output_types, prog.in_vars, prog.out_exprs, scheduled, tuned,
                    sched_obj, func, source, lowered)


def _input_names(opdef, n: int) -> list:
    names = []
    fixed = [s for s in opdef.inputs if not s.endswith("*")]
    var = opdef.inputs[-1][:-1] if opdef.variadic else None
    for i in range(n):
        if i < len(fixed):
            names.append(identifier(fixed[i], f"in{i}"))
        else:
            names.append(identifier(f"{var}{i - len(fixed)}", f"in{i}"))
    used, out = set(), []
    for nm in names:
        base, k = nm, 0
        while nm in used:
            k += 1
            nm = f"{base}_{k}"
        used.add(nm)
        out.append(nm)
    return out


def compile_together(kernels) -> None:
    """Build the kernels not built yet into one library per build job, each a single translation unit
    holding several kernels (for kernels run once, such as constant evaluation's: there the C
    compiler's start and the runtime helpers every kernel's own unit repeats cost more than the
    kernels). A kernel keeps its own library where it has one, or where it cannot share (a unit of
    several functions, a backend other than C, a source that prepares files); a shared unit the
    compiler refuses falls back to compile_kernels (each kernel on its own). A kernel of a shared unit
    takes only its function (`fn`) from it: its `module` stays its own library, built if asked for."""
    todo, alone, seen = [], [], set()
    for k in kernels:
        if k is None or isinstance(k, HostKernel) or k.compiled or k._fn is not None or id(k) in seen:
            continue
        seen.add(id(k))
        shares = k.lowered is not None and k.target.kind == "c" and k.source.prepare is None
        (todo if shares else alone).append(k)
    if len(todo) < 2:
        compile_kernels(todo + alone)
        return
    # a deterministic split (by source), so that the next process finds the same units in the disk cache
    todo.sort(key=lambda k: k.source.text)
    jobs = min(build_jobs(), len(todo))
    groups = [todo[j::jobs] for j in range(jobs)]
    locked = sorted(todo, key=id)
    for k in locked:
        k._lock.acquire()
    try:
        units = []
        for group in groups:
            names = [f"{k.lowered.name}_{i}" for i, k in enumerate(group)]
            backend = get_backend(group[0].target)
            units.append(backend.render([k.lowered.replace(name=n) for k, n in zip(group, names)],
                                        group[0].target, "kernels"))
        paths = _compile_all(units)
        for group, unit, path in zip(groups, units, paths):
            if isinstance(path, Exception) or any(k.compiled or k._fn is not None for k in group):
                continue
            try:
                module = get_backend(group[0].target).load(path)
            except TesseraError:     # built but not loadable: like a refused unit, each kernel alone
                continue
            for i, k in enumerate(group):
                k._fn = module.get_function(f"{k.lowered.name}_{i}")
    finally:
        for k in locked:
            k._lock.release()
    compile_kernels([k for k in todo if k._fn is None] + alone)


__all__ = ["Kernel", "KernelProgram", "kernel_program", "get_program", "trace_key", "get_kernel", "get_kernels", "kernel_traces", "compile_kernels", "compile_together", "kernel_cache_info", "clear_kernel_cache", "build_jobs"]
