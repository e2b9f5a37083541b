"""The graph executor: one compiled kernel per node, run in topological order.

Each node becomes a kernel: a te placeholder per input (a symbolic dimension is a te.var of that
name), the op's `compute`, `te.create_prim_func`, the op's default schedule when it has one, and
`tessera.build`. Kernels are cached in process by (op, attrs, input and output types, target), so
every node of that signature, in any graph, shares one compiled module (gcc's output is also
cached on disk by source hash).

A graph with static shapes runs through a static plan (`_StaticRunner`, made on the first run):
intermediates in one arena laid out by plan_memory, every kernel's argument array prepared once,
so a run is the kernels' entry calls in order and fresh arrays for the graph outputs only. With
symbolic dimensions (or while another thread is in the plan) the general path runs: symbols are
bound from the actual input shapes (the same symbol must get the same value everywhere), outputs
are allocated as numpy arrays, and an intermediate is dropped as soon as its last consumer has run.
"""
from __future__ import annotations

import re
import threading
import warnings

import numpy as np

from ..errors import DTypeError, ShapeError, TesseraError, UnsupportedOpError
from ..ir.dtype import DataType, numpy_dtype
from ..runtime.inputs import check_input_names, gather_inputs, input_array
from .ir import FUSED_OP, Graph, TensorType, Value, attr_key

_C_NAME = re.compile(r"[^A-Za-z0-9_]")


def _ident(name: str, fallback: str = "t") -> str:
    """`name` made a C identifier (for readable kernel and buffer names)."""
    s = _C_NAME.sub("_", str(name)).strip("_") or fallback
    return s if not s[0].isdigit() else f"{fallback}_{s}"


# ---------------------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------------------
def _attr_key(v):
    """A hashable key of an attribute value that keeps 1, 1.0 and True apart (a fused node's
    Function: its structure, so equal groups share one kernel)."""
    return attr_key(v)


class Kernel:
    """One operator compiled for one signature: call `fn(*inputs, *outputs)`.

    out_shape_exprs: per output, its shape as PrimExprs over `shape_vars` (the te.vars of the
    symbolic input dimensions, by name); `output_shapes(in_shapes)` evaluates them.
    """

    __slots__ = ("op", "module", "fn", "input_types", "output_types", "in_vars",
                 "out_shape_exprs", "static_out_shapes", "scheduled", "prim")

    def __init__(self, op, module, input_types, output_types, in_vars, out_shape_exprs, scheduled, prim=None):
        self.op, self.module = op, module
        self.prim = prim                      # what was built: a PrimFunc or a tir.Schedule
        self.fn = module.get_function(module.entry_name or module.function_names[0])
        self.input_types, self.output_types = input_types, output_types
        self.in_vars = in_vars                # per input: tuple of (dim, var name) for symbolic dims
        self.out_shape_exprs = out_shape_exprs
        self.scheduled = scheduled
        static = all(isinstance(d, int) for s in out_shape_exprs for d in s)
        self.static_out_shapes = [tuple(s) for s in out_shape_exprs] if static else None

    def output_shapes(self, in_shapes) -> list:
        """Output shapes (tuples of ints) for inputs of these actual shapes."""
        if self.static_out_shapes is not None:
            return self.static_out_shapes
        from ..arith import simplify
        from ..ir import expr as E
        from ..ir.functor import substitute

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
    from ..ir.functor import collect_vars

    return collect_vars(e)


_KERNELS: dict = {}
_KERNEL_LOCK = threading.Lock()


def kernel_cache_info() -> dict:
    """How many kernels the in-process cache holds (by op name)."""
    counts: dict = {}
    for key in list(_KERNELS):
        counts[key[0]] = counts.get(key[0], 0) + 1
    return counts


def clear_kernel_cache() -> None:
    """Forget the in-process kernels (the on-disk library cache stays)."""
    with _KERNEL_LOCK:
        _KERNELS.clear()


def _kernel_key(op, attrs, input_types, output_types, target):
    return (op, tuple((k, _attr_key(v)) for k, v in sorted(dict(attrs).items())),
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


def get_kernels(requests, target="c") -> list:
    """Kernels for several (op, attrs, input_types, output_types, node) at once: the programs are
    generated one after the other, the C compiler runs on several of them in parallel."""
    from ..target import Target

    target = Target(target)
    out: list = [None] * len(requests)
    pending: dict = {}            # key -> (prepared, [request indices])
    for i, (op, attrs, in_types, out_types, node) in enumerate(requests):
        key = _kernel_key(op, attrs, in_types, out_types, target)
        k = _KERNELS.get(key)
        if k is not None:
            out[i] = k
        elif key in pending:
            pending[key][1].append(i)
        else:
            pending[key] = (_prepare_kernel(op, attrs, tuple(in_types), tuple(out_types), target, node), [i])
    if not pending:
        return out
    items = list(pending.items())
    paths = _compile_all([p for _, (p, _) in items], target)
    for (key, (prep, idxs)), path in zip(items, paths):
        k = _finish_kernel(prep, path, target)
        with _KERNEL_LOCK:
            k = _KERNELS.setdefault(key, k)
        for i in idxs:
            out[i] = k
    return out


def _compile_all(preps, target) -> list:
    """Compile every prepared kernel's source (several at once); a list of paths (or exceptions)."""
    from ..backend import get_backend  # the build layer, not needed to run a loaded library

    backend = get_backend(target)

    def one(p):
        try:
            return backend.compile(p.source)
        except TesseraError as e:
            return e

    jobs = min(build_jobs(), len(preps))
    if jobs <= 1:
        return [one(p) for p in preps]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, preps))


def _where(op, node):
    return f"{op} (node {node!r})" if node else op


class _Prepared:
    """A kernel whose C source is generated but not compiled yet."""

    __slots__ = ("op", "node", "input_types", "output_types", "in_vars", "out_exprs", "scheduled", "prim",
                 "func", "source", "name_hint")


def _generate(obj, target, name=None):
    """(backend Source, name hint) of a PrimFunc or Schedule, as tessera.build would compile it; a
    single function is named `name` (the op's, so the generated C reads `nn_conv2d`, not `main`)."""
    from ..backend import functions_of, generate

    source = generate(obj, target, name if name and len(functions_of(obj)) == 1 else None)
    return source, source.name_hint


def _prepare_kernel(op_name, attrs, input_types, output_types, target, node) -> _Prepared:
    from .. import te
    from ..ops.registry import get_op
    from ..te.tensor import PlaceholderOp

    where = _where(op_name, node)
    fused = None
    if op_name == FUSED_OP:
        # a fused node: its function's computes composed, inlined, scheduled by its anchor (fused.py)
        from .fused import FusedKernel

        fn = dict(attrs)["function"]
        where = _where(fn.name, node)
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
            o = te.compute(src.shape, lambda *idx, src=src: src[idx], name=f"{_ident(kernel_name)}_out{i}")
            outs[i] = o
        seen.add(id(o))
        if o.dtype != t.dtype:
            raise DTypeError(f"{where}: compute output {i} is {o.dtype}, type inference says {t.dtype}")
        if len(o.shape) != t.ndim:
            raise ShapeError(f"{where}: compute output {i} has rank {len(o.shape)}, type inference says "
                             f"{t} (rank {t.ndim})")
    out_exprs = []
    from ..ir import expr as E

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
    func = te.create_prim_func(placeholders + outs, name=_ident(kernel_name))
    scheduled = False
    sched_obj = func
    source = None
    if fused is not None:
        Schedule = _schedule_class()
        if Schedule is not None:
            try:
                sch = fused.schedule(Schedule(func), func, outs, target)
                source, name_hint = _generate(sch, target, _ident(kernel_name))
                sched_obj, scheduled = sch, True
            except TesseraError as e:
                warnings.warn(f"{where}: scheduling the fused kernel failed ({e}); using the unscheduled kernel",
                              stacklevel=4)
                sched_obj, source = func, None
    elif opdef.schedule is not None:
        Schedule = _schedule_class()
        if Schedule is not None:
            from ..ops.registry import ScheduleContext

            try:
                sch = Schedule(func)
                ctx = ScheduleContext(block=_anchor_block(func, outs[0]), attrs=attrs, target=target,
                                      input_types=input_types, output_types=output_types)
                opdef.schedule(sch, ctx)
                source, name_hint = _generate(sch, target, _ident(kernel_name))
                sched_obj, scheduled = sch, True
            except TesseraError as e:
                warnings.warn(f"{where}: the default schedule failed ({e}); using the unscheduled kernel",
                              stacklevel=4)
                sched_obj, source = func, None
    if source is None:
        source, name_hint = _generate(func, target, _ident(kernel_name))
    p = _Prepared()
    p.op, p.node, p.input_types, p.output_types = kernel_name, node, input_types, output_types
    p.in_vars, p.out_exprs, p.scheduled, p.prim, p.func = tuple(in_vars), out_exprs, scheduled, sched_obj, func
    p.source, p.name_hint = source, name_hint
    return p


def _finish_kernel(p: _Prepared, path, target) -> Kernel:
    """The Kernel of a prepared kernel once its library is compiled (path, or the BuildError)."""
    from ..backend import get_backend

    backend = get_backend(target)
    if isinstance(path, Exception):
        if not p.scheduled:
            raise path
        # a scheduled kernel the C compiler refuses: keep the model running, unscheduled
        warnings.warn(f"{_where(p.op, p.node)}: the scheduled kernel failed to compile ({path}); using the "
                      f"unscheduled kernel", stacklevel=4)
        source, _ = _generate(p.func, target, _ident(p.op))
        path = backend.compile(source)
        p.scheduled, p.prim = False, p.func
    return Kernel(p.op, backend.load(path), p.input_types, p.output_types, p.in_vars, p.out_exprs, p.scheduled,
                  p.prim)


def _input_names(opdef, n: int) -> list:
    names = []
    fixed = [s for s in opdef.inputs if not s.endswith("*")]
    var = opdef.inputs[-1][:-1] if opdef.variadic else None
    for i in range(n):
        if i < len(fixed):
            names.append(_ident(fixed[i], f"in{i}"))
        else:
            names.append(_ident(f"{var}{i - len(fixed)}", f"in{i}"))
    used, out = set(), []
    for nm in names:
        base, k = nm, 0
        while nm in used:
            k += 1
            nm = f"{base}_{k}"
        used.add(nm)
        out.append(nm)
    return out


def _anchor_block(func, out_tensor) -> str:
    """Name of the block that writes the op's (first) output."""
    from ..ir.functor import post_order_visit
    from ..ir.stmt import Block

    found = []
    target_name = None
    for p in func.params:
        if getattr(p, "name", None) == out_tensor.name:
            target_name = p.name

    def visit(n):
        if isinstance(n, Block) and any(w.buffer.name == target_name for w in n.writes):
            found.append(n.name_hint)

    post_order_visit(func.body, visit)
    return found[-1] if found else out_tensor.op.name


_SCHEDULE_CLASS = []


def _schedule_class():
    """tir.Schedule when the schedule package is available, else None."""
    if not _SCHEDULE_CLASS:
        try:
            from ..tir.schedule import Schedule
        except ImportError:
            Schedule = None
        _SCHEDULE_CLASS.append(Schedule)
    return _SCHEDULE_CLASS[0]


# ---------------------------------------------------------------------------------------------
# the executable
# ---------------------------------------------------------------------------------------------
class _Step:
    __slots__ = ("node", "kernel", "ins", "outs", "out_types", "out_np", "free")

    def __init__(self, node, kernel, ins, outs, out_types):
        self.node, self.kernel, self.ins, self.outs, self.out_types = node, kernel, ins, outs, out_types
        self.out_np = tuple(_np_dtype(t.dtype) for t in out_types)
        self.free = ()


def _np_dtype(dt) -> np.dtype:
    return numpy_dtype(DataType(dt))


class GraphExecutor:
    """Runs a Graph node by node with compiled kernels (see the module docstring).

    Made by `tessera.compile`; `exe(x)`, `exe.run({"x": x})`, `exe.profile(inputs)`.
    """

    def __init__(self, graph: Graph, target="c", kernels=None):
        from ..target import Target

        if not isinstance(graph, Graph):
            raise TesseraError(f"the graph executor takes a tessera.graph.Graph, got {type(graph).__name__}")
        self.graph = graph
        self.target = Target(target)
        self.opt_level = 0
        self._given_kernels = kernels   # one per node (a loaded library), else built from the registry
        self._build()

    # ------------------------------------------------------------------ planning
    def _build(self):
        g = self.graph
        slot: dict = {}

        def slot_of(v):
            s = slot.get(v)
            if s is None:
                s = slot[v] = len(slot)
            return s

        self._input_slots = [slot_of(v) for v in g.inputs]
        self._input_np = [_np_dtype(v.dtype) for v in g.inputs]
        template = {}
        for v, arr in g.constants.items():
            template[slot_of(v)] = arr
        steps = []
        given = self._given_kernels
        if given is not None and len(given) != len(g.nodes):
            raise TesseraError(f"graph executor: {len(given)} kernels for {len(g.nodes)} nodes")
        if given is None:
            given = get_kernels([(n.op, n.attrs, [v.type for v in n.inputs], [v.type for v in n.outputs], n.name)
                                 for n in g.nodes], self.target)
        for i, n in enumerate(g.nodes):
            kernel = given[i]
            steps.append(_Step(n, kernel, [slot_of(v) for v in n.inputs], [slot_of(v) for v in n.outputs],
                               [v.type for v in n.outputs]))
        self._output_slots = [slot_of(v) for v in g.outputs]
        # the last reader of each node output frees it (graph outputs and constants are kept)
        keep = set(self._output_slots) | set(template)
        last = {}
        for i, st in enumerate(steps):
            for s in st.ins:
                last[s] = i
            for s in st.outs:
                last.setdefault(s, i)  # an output nobody reads is freed right away
        frees = [[] for _ in steps]
        for s, i in last.items():
            if s not in keep and s not in self._input_slots:
                frees[i].append(s)
        for st, f in zip(steps, frees):
            st.free = tuple(f)
        self._steps = steps
        self._template = [template.get(i) for i in range(len(slot))]
        self._static = all(v.type.is_static for v in g.inputs)
        # graph outputs that are inputs or constants are returned as copies
        self._copy_slots = {i for i, a in enumerate(self._template) if a is not None} | set(self._input_slots)
        self._runner = None          # the _StaticRunner, made on the first run of a static graph
        self._runner_lock = threading.Lock()

    # ------------------------------------------------------------------ inputs
    @property
    def input_names(self) -> list:
        """The inputs' public names, in graph order (an ONNX model's own names: what run() takes)."""
        return list(self.graph.input_names)

    @property
    def output_names(self) -> list:
        """The outputs' public names, in the order run() returns them."""
        return list(self.graph.output_names)

    def _normalize_inputs(self, args, kwargs) -> list:
        """Positional (graph input order) and keyword arguments -> one array per graph input."""
        return self._from_dict(gather_inputs(self.graph.name, self.input_names, args, kwargs))

    def _from_dict(self, given) -> list:
        g = self.graph
        check_input_names(g.name, self.input_names, given, [f"{n}: {v.type}" for n, v in zip(g.input_names, g.inputs)],
                          [v.name for v in g.inputs])
        return [self._check_input(v, name, given[name], want)
                for v, name, want in zip(g.inputs, g.input_names, self._input_np)]

    @staticmethod
    def _check_input(v: Value, name: str, x, want: np.dtype):
        x = input_array(name, x, want, v.dtype, str(v.type))
        if x.ndim != v.type.ndim:
            raise ShapeError(f"input {name!r}: rank {x.ndim} (shape {x.shape}), the graph expects rank "
                             f"{v.type.ndim} ({v.type})")
        for d, (got, dim) in enumerate(zip(x.shape, v.shape)):
            if isinstance(dim, int) and got != dim:
                raise ShapeError(f"input {name!r}: dimension {d} is {got}, the graph expects {dim} "
                                 f"(shape {x.shape}, expected {v.type})")
        return x

    def _bind_symbols(self, arrays) -> dict:
        env, origin = {}, {}
        for v, name, x in zip(self.graph.inputs, self.graph.input_names, arrays):
            for d, dim in enumerate(v.shape):
                if isinstance(dim, str):
                    got = int(x.shape[d])
                    if dim in env and env[dim] != got:
                        raise ShapeError(f"input {name!r}: dimension {d} is {dim} = {got}, but {origin[dim]} "
                                         f"bound {dim} = {env[dim]} (the same symbol must have one value)")
                    if dim not in env:
                        env[dim], origin[dim] = got, f"input {name!r} dimension {d}"
        return env

    # ------------------------------------------------------------------ running
    def _execute(self, arrays, timer=None):
        vals = list(self._template)
        for s, x in zip(self._input_slots, arrays):
            vals[s] = x
        env = None if self._static else self._bind_symbols(arrays)
        empty = np.empty
        for st in self._steps:
            ins = [vals[s] for s in st.ins]
            k = st.kernel
            shapes = k.static_out_shapes
            if shapes is None or env is not None:
                shapes = k.output_shapes([x.shape for x in ins])
                if env is not None:
                    self._check_symbols(st, shapes, env)
            outs = [empty(shape, dt) for shape, dt in zip(shapes, st.out_np)]
            try:
                k.fn(*ins, *outs)
            except TesseraError as e:
                raise type(e)(f"node {st.node.name!r} ({st.node.op}): {e}") if type(e) in (
                    TesseraError, ShapeError, DTypeError) else e
            if timer is not None:
                timer(st, ins, outs)
            for s, o in zip(st.outs, outs):
                vals[s] = o
            for s in st.free:
                vals[s] = None
        result, seen = [], set()
        copy_slots = self._copy_slots
        for s in self._output_slots:
            x = vals[s]
            if s in seen or s in copy_slots:
                x = np.array(x, copy=True)
            seen.add(s)
            result.append(x)
        return result

    def _run(self, arrays) -> list:
        """One run: through the static plan when the graph allows one and no other thread is in it."""
        runner = self._runner
        if runner is None and self._static:
            with self._runner_lock:
                if self._runner is None:
                    self._runner = _StaticRunner.for_executor(self)
                runner = self._runner
        if runner and runner.lock.acquire(False):
            try:
                return runner.run(arrays)
            finally:
                runner.lock.release()
        return self._execute(arrays)

    def _check_symbols(self, st, shapes, env):
        for i, (shape, t) in enumerate(zip(shapes, st.out_types)):
            for d, (got, dim) in enumerate(zip(shape, t.shape)):
                if isinstance(dim, int):
                    if got != dim:
                        raise ShapeError(f"node {st.node.name!r} ({st.node.op}): output {i} dimension {d} is "
                                         f"{got} at run time, its type says {t}")
                elif env.setdefault(dim, got) != got:
                    raise ShapeError(f"node {st.node.name!r} ({st.node.op}): output {i} dimension {d} is "
                                     f"{dim} = {got} at run time, but {dim} = {env[dim]} elsewhere")

    def run(self, inputs=None, **kwargs) -> list:
        """Run on a dict {input name: array}; a list of numpy arrays in the graph's output order."""
        given = dict(inputs or {})
        for k, v in kwargs.items():
            if k in given:
                raise TesseraError(f"input {k!r} is given twice")
            given[k] = v
        return self._run(self._from_dict(given))

    def __call__(self, *args, **kwargs):
        """exe(x) / exe(x, y) / exe(x=..., y=...): one output -> an array, several -> a tuple."""
        outs = self._run(self._normalize_inputs(args, kwargs))
        return outs[0] if len(outs) == 1 else tuple(outs)

    # ------------------------------------------------------------------ profiling
    def profile(self, inputs=None, number: int = 10, repeat: int = 3, show: bool = True, **kwargs):
        """Time every node with its kernel's C timer on these inputs; prints and returns the table."""
        if inputs is None and not kwargs and not self.graph.inputs:
            arrays = []
        elif isinstance(inputs, dict) or inputs is None:
            given = dict(inputs or {})
            given.update(kwargs)
            arrays = self._from_dict(given)
        elif isinstance(inputs, (list, tuple)):
            arrays = self._normalize_inputs(tuple(inputs), kwargs)
        else:
            arrays = self._normalize_inputs((inputs,), kwargs)
        rows = []

        def timer(st, ins, outs):
            res = st.kernel.module.time_evaluator(st.kernel.fn.name, number=number, repeat=repeat)(*ins, *outs)
            rows.append(ProfileRow(op_label(st.node), st.node.name, [tuple(x.shape) for x in ins],
                                   [tuple(o.shape) for o in outs], res.median * 1e3))

        self._execute(arrays)              # warm-up: thread pools started, caches filled
        self._execute(arrays, timer)
        g = self.graph
        report = ProfileReport(g.name, rows,
                               inputs=[(n, str(v.type)) for n, v in zip(g.input_names, g.inputs)],
                               outputs=[(n, str(v.type)) for n, v in zip(g.output_names, g.outputs)])
        if show:
            print(report)
        return report

    def export_library(self, path, prefix: str | None = None) -> str:
        """Write the deployable library (weights embedded, C API) to `path` and model.h beside it
        (tessera.graph.export); prefix names the C API (default tessera_model)."""
        from .export import export_library

        return export_library(self, path, prefix)

    @property
    def kernels(self) -> list:
        """The distinct kernels this executable runs."""
        out, seen = [], set()
        for st in self._steps:
            if id(st.kernel) not in seen:
                seen.add(id(st.kernel))
                out.append(st.kernel)
        return out

    def __repr__(self):
        return (f"<tessera.GraphExecutor {self.graph.name!r}: {len(self.graph.nodes)} nodes, "
                f"{len(self.kernels)} kernels, target {self.target}>")


class _StaticRunner:
    """A static graph's runs with every argument prepared once (TVM's graph executor does the same):

    intermediates live in one 64-byte aligned arena laid out by plan_memory (a tensor reuses the
    bytes of one that is dead by then, so the working set stays small and warm in cache), and
    per node the kernel's argument array points at ABI structs made once; a run only points the
    graph inputs' and outputs' structs at this run's arrays and calls the kernels' entries. On
    MobileNetV2 this is ~1 ms of a 12 ms run against fresh numpy buffers and per-call packing.
    One run at a time (`lock`); a second thread meanwhile takes the general path.
    """

    __slots__ = ("lock", "exe", "arena", "keep", "calls", "in_structs", "out_plan", "err", "_live")

    @classmethod
    def for_executor(cls, exe):
        """The runner of `exe`, or False when its graph cannot have one (a symbolic shape, a kernel
        with scalar parameters, plan_memory not installed beside a loaded library)."""
        from ..runtime.module import ERR_LEN

        g = exe.graph
        if not all(o.type.is_static for n in g.nodes for o in n.outputs):
            return False
        for st in exe._steps:
            if not all(st.kernel.fn._is_tensor) or st.kernel.static_out_shapes is None:
                return False
        try:
            from .passes.plan_memory import plan_memory
        except ImportError:   # a library loaded where only the runtime is installed: the general path
            return False
        return cls(exe, plan_memory(exe.graph), ERR_LEN)

    def __init__(self, exe, plan, err_len):
        import ctypes

        from ..runtime.module import _Tensor
        from ..runtime.ndarray import dtype_info

        g = exe.graph
        self.lock = threading.Lock()
        self.exe = exe
        raw = np.empty(plan.arena_bytes + 64, np.uint8)
        start = -raw.ctypes.data % 64
        self.arena = raw[start:start + plan.arena_bytes]
        self.keep = [raw]
        self.err = ctypes.create_string_buffer(err_len)
        slot_of_value = {}
        for st in exe._steps:
            for v, s in zip(st.node.inputs, st.ins):
                slot_of_value[s] = v
            for v, s in zip(st.node.outputs, st.outs):
                slot_of_value[s] = v
        for v, s in zip(g.inputs, exe._input_slots):
            slot_of_value[s] = v
        structs: dict = {}      # value slot -> _Tensor
        live_io: dict = {}      # value slot -> _Tensor whose data is set per run (inputs, outputs)

        def struct(shape, np_dt, data):
            info = dtype_info(np.dtype(np_dt))
            shape_c = (ctypes.c_int64 * max(len(shape), 1))(*shape)
            t = _Tensor(data, ctypes.addressof(shape_c), None, len(shape), info[1], info[2], 1)
            self.keep.append(shape_c)
            return t

        for s, arr in enumerate(exe._template):
            if arr is not None:
                arr = arr if arr.flags.c_contiguous else arr.copy(order="C")   # (keeps a 0-d array 0-d)
                self.keep.append(arr)
                structs[s] = struct(arr.shape, arr.dtype, arr.ctypes.data)
        for s, x_np in zip(exe._input_slots, exe._input_np):
            v = slot_of_value[s]
            structs[s] = live_io[s] = struct(tuple(v.shape), x_np, None)
        outputs = set(exe._output_slots)
        self.out_plan = []      # per graph output: (slot, shape, dtype), produced by a node
        for st in exe._steps:
            for v, s, shape, dt in zip(st.node.outputs, st.outs, st.kernel.static_out_shapes, st.out_np):
                if s in structs:
                    continue
                if s in outputs:
                    structs[s] = live_io[s] = struct(shape, dt, None)
                    self.out_plan.append((s, tuple(shape), dt))
                else:
                    a = plan[v]
                    view = self.arena[a.offset:a.offset + a.nbytes]
                    structs[s] = struct(shape, dt, view.ctypes.data if a.nbytes else self.arena.ctypes.data)
        self.keep.append(structs)
        self.in_structs = [(live_io[s], s) for s in exe._input_slots]
        calls = []
        for st in exe._steps:
            fn = st.kernel.fn
            args = (ctypes.c_void_p * max(fn._n, 1))(*[ctypes.addressof(structs[s]) for s in list(st.ins) + list(st.outs)])
            self.keep.append(args)
            calls.append((fn._entry, args, fn._kinds, fn._n, st))
        self.calls = calls
        self._live = live_io

    def run(self, arrays) -> list:
        exe = self.exe
        live = self._live
        vals = {}
        for (t, s), x in zip(self.in_structs, arrays):
            t.data = _data_ptr(x)
            vals[s] = x
        for s, shape, dt in self.out_plan:
            o = np.empty(shape, dt)
            live[s].data = _data_ptr(o)
            vals[s] = o
        err, n_err = self.err, len(self.err)
        for entry, args, kinds, n, st in self.calls:
            rc = entry(args, kinds, n, err, n_err)
            if rc:
                e = st.kernel.fn._status_error(rc, err)
                raise type(e)(f"node {st.node.name!r} ({st.node.op}): {e}") if type(e) in (
                    TesseraError, ShapeError, DTypeError) else e
        result, seen = [], set()
        template, copy_slots = exe._template, exe._copy_slots
        for s in exe._output_slots:
            x = vals.get(s)
            if x is None:
                x = template[s]
            if s in seen or s in copy_slots:
                x = np.array(x, copy=True)
            seen.add(s)
            result.append(x)
        return result


def _data_ptr(x: np.ndarray) -> int:
    from ..runtime.module import _FAST_NUMPY, _from_address

    return _from_address(id(x) + 16).value if _FAST_NUMPY else x.ctypes.data


def op_label(node) -> str:
    """A node's op for tables and messages: a fused node's function name, else the op."""
    return node.attrs["function"].name if node.op == FUSED_OP else node.op


class ProfileRow:
    __slots__ = ("op", "node", "input_shapes", "output_shapes", "ms")

    def __init__(self, op, node, input_shapes, output_shapes, ms):
        self.op, self.node, self.input_shapes, self.output_shapes, self.ms = op, node, input_shapes, output_shapes, ms

    def as_dict(self) -> dict:
        return {"op": self.op, "node": self.node, "input_shapes": self.input_shapes,
                "output_shapes": self.output_shapes, "ms": self.ms}


class ProfileReport:
    """Per-node times (ms, median of the C timer's repeats) in execution order; str() is the table,
    headed by the model's inputs and outputs under their public names.

    inputs / outputs: (public name, type text) per graph input / output."""

    def __init__(self, graph_name: str, rows: list, inputs=(), outputs=()):
        self.graph_name, self.rows = graph_name, list(rows)
        self.inputs, self.outputs = list(inputs), list(outputs)

    @property
    def total_ms(self) -> float:
        return sum(r.ms for r in self.rows)

    def by_op(self) -> dict:
        """op -> total ms over its nodes."""
        out: dict = {}
        for r in self.rows:
            out[r.op] = out.get(r.op, 0.0) + r.ms
        return out

    def __str__(self):
        total = self.total_ms or 1e-30
        head = ("op", "node", "shapes", "ms", "%")
        cells = []
        for r in self.rows:
            shapes = ", ".join(_fmt_shape(s) for s in r.input_shapes) + " -> " + \
                ", ".join(_fmt_shape(s) for s in r.output_shapes)
            cells.append((r.op, r.node, shapes, _ms(r.ms), f"{100 * r.ms / total:.1f}"))
        cells.append(("total", "", f"{len(self.rows)} nodes", _ms(self.total_ms), "100.0"))
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
        lines = [f"profile of graph {self.graph_name!r} (per node, C timer median)"]
        for label, items in (("inputs", self.inputs), ("outputs", self.outputs)):
            if items:
                lines.append(f"{label}: " + ", ".join(f"{name!r}: {t}" for name, t in items))
        fmt = lambda row: "  ".join(  # noqa: E731
            c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
        lines.append(fmt(head))
        lines.append("  ".join("-" * w for w in widths))
        lines.extend(fmt(c) for c in cells[:-1])
        lines.append("  ".join("-" * w for w in widths))
        lines.append(fmt(cells[-1]))
        return "\n".join(lines)

    __repr__ = __str__


def _ms(x: float) -> str:
    return f"{x:.1f}" if x >= 100 else f"{x:.3f}" if x >= 1 else f"{x:.5f}"


def _fmt_shape(s) -> str:
    return "[" + ", ".join(str(d) for d in s) + "]"
