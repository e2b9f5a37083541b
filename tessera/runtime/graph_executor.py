"""The graph executor: a Plan run step by step, one compiled kernel call per node.

`GraphExecutor(plan, kernels)`: kernels maps each kernel name of the plan to an object whose `fn`
is the runtime Function to call (the graph compiler's Kernel in this process, a LibraryKernel of a
loaded library).

A plan with static shapes and a memory plan runs through a StaticRunner (runtime/static_runner.py,
made on the first run): intermediates in one arena, every kernel's argument array prepared once,
so a run is the kernels' entry calls in order and fresh arrays for the graph outputs only. With
symbolic dimensions (or without a memory plan, or while another thread is in the runner) the
general path runs: symbols are bound from the actual input shapes (the same symbol must get the
same value everywhere), outputs are allocated as numpy arrays, and an intermediate is dropped as
soon as its last consumer has run. A symbolic plan without host steps remembers, per distinct set
of input shapes (the SHAPE_CACHE_SIZE most recently used, within SHAPE_CACHE_BYTES), a ShapeRunner made after the general path has
run once at those shapes: every output extent, symbol and argument struct derived once, the
intermediates in an arena laid out by their lifetimes, so a repeated call at the same shapes only
binds the input and output arrays and calls the kernels, as a static plan's runs do. A host step (an op whose output extents depend on its input
values: nonzero, unique, non_max_suppression) returns its outputs; their extents bind the symbols
of its output types, which size the kernels after it.
"""
from __future__ import annotations

import ctypes
import threading
import time
from collections import OrderedDict

import numpy as np

from ..errors import ShapeError, TesseraError
from .cuda import is_device_array
from .cuda_runner import CUDARunner, check_device_input
from .executor import Executor
from .plan import Plan, node_error
from .profile import ProfileReport, ProfileRow
from .module import ERR_LEN
from .static_runner import StaticRunner

# distinct sets of input shapes whose ShapeRunner a symbolic plan keeps (each holds its arena), and
# the most arena bytes they may hold together (the newest runner is kept whatever its size)
SHAPE_CACHE_SIZE = 8
SHAPE_CACHE_BYTES = 512 << 20


class _Step:
    """A plan step bound to its function: `node` (the plan's Step: name, op), input/output slots,
    output specs, the slots it frees."""

    __slots__ = ("node", "kernel", "spec", "fn", "ins", "outs", "out_specs", "out_np", "free", "host")

    def __init__(self, step, kernel, spec, out_specs):
        self.node, self.kernel, self.spec, self.fn = step, kernel, spec, kernel.fn
        self.host = spec.host
        self.ins, self.outs = step.ins, step.outs
        self.out_specs = out_specs
        self.out_np = tuple(s.np_dtype for s in out_specs)
        self.free = ()

    def where(self) -> str:
        return f"node {self.node.name!r} ({self.node.op})"


class GraphExecutor(Executor):
    """Runs a Plan node by node with compiled kernels (see the module docstring).

    Made by `tessera.compile` and `tessera.runtime.load_module(path, executor="graph")`;
    `exe(x)`, `exe.run({"x": x})`, `exe.profile(inputs)`.
    """

    kind = "graph"

    def __init__(self, plan: Plan, kernels: dict):
        super().__init__(plan)
        missing = sorted({st.kernel for st in plan.steps} - set(kernels))
        if missing:
            raise TesseraError(f"graph executor of {plan.name!r}: no compiled kernel for {missing}")
        self._kernel_objs = kernels
        values = plan.values
        steps = [_Step(st, kernels[st.kernel], plan.kernels[st.kernel], [values[s] for s in st.outs])
                 for st in plan.steps]
        # what the runners (static_runner.py, cuda_runner.py) read: the value slots of the inputs and
        # outputs, the bound steps, per slot a constant's array or None, whether the plan is static
        self.input_slots = list(plan.inputs)
        self.output_slots = list(plan.outputs)
        template = dict(plan.constants)
        # the last reader of each node output frees it (graph outputs and constants are kept)
        keep = set(self.output_slots) | set(template)
        last = {}
        for i, st in enumerate(steps):
            for s in st.ins:
                last[s] = i
            for s in st.outs:
                last.setdefault(s, i)  # an output nobody reads is freed right away
        frees = [[] for _ in steps]
        inputs = set(self.input_slots)
        for s, i in last.items():
            if s not in keep and s not in inputs:
                frees[i].append(s)
        for st, f in zip(steps, frees):
            st.free = tuple(f)
        self.steps = steps
        self.constant_values = [template.get(i) for i in range(len(values))]
        # a host step (an op whose output extents depend on values) makes symbols the inputs do not bind
        self.is_static = all(s.is_static for s in self._inputs) and not any(st.host for st in steps)
        # graph outputs that are inputs or constants are returned as copies
        self._copy_slots = set(template) | inputs
        self._runner = None          # the StaticRunner, made on the first run of a static plan
        self._runner_lock = threading.Lock()
        # a symbolic plan's ShapeRunners by input shapes (None: the plan cannot have them)
        self._shape_runners = OrderedDict() if ShapeRunner.applies(self) else None
        # the device the kernels run on: "cuda" keeps every value on the GPU (runtime/cuda_runner.py)
        self._device = next((st.fn.device for st in steps if not st.host and getattr(st.fn, "device", None)), None)
        self._device_runner = None

    # ------------------------------------------------------------------ running
    def bind_symbols(self, arrays) -> dict:
        """{symbol: extent} the input arrays bind (the same symbol must get one value everywhere)."""
        env, origin = {}, {}
        for s, name, x in zip(self._inputs, self.plan.input_names, arrays):
            for d, dim in enumerate(s.shape):
                if isinstance(dim, str):
                    got = int(x.shape[d])
                    if dim in env and env[dim] != got:
                        raise ShapeError(f"input {name!r}: dimension {d} is {dim} = {got}, but {origin[dim]} "
                                         f"bound {dim} = {env[dim]} (the same symbol must have one value)")
                    if dim not in env:
                        env[dim], origin[dim] = got, f"input {name!r} dimension {d}"
        return env

    def execute(self, arrays, timer=None, device=None) -> list:
        """The general path on checked input arrays (one per input): a numpy array per node output,
        freed after its last reader. timer(step, ins, outs) is called after each step. device: a GPU
        runner (runtime/cuda_runner.py) whose buffers the kernels take (to_device, to_host, empty,
        launch), or None for host arrays."""
        vals = list(self.constant_values)
        for s, x in zip(self.input_slots, arrays):
            vals[s] = x
        env = None if self.is_static else self.bind_symbols(arrays)
        empty = np.empty if device is None else device.empty
        for st in self.steps:
            ins = [vals[s] for s in st.ins]
            if device is not None:
                ins = [device.to_host(x) for x in ins] if st.host else [device.to_device(x) for x in ins]
            if st.host:                     # a host step returns its outputs (shapes known only now)
                try:
                    outs = st.fn(*ins)
                except TesseraError as e:
                    raise node_error(st, e) from None
                _check_symbols(st, [o.shape for o in outs], env)
            else:                           # a kernel writes into outputs allocated here
                spec = st.spec
                shapes = spec.static_out_shapes
                if shapes is None or env is not None:
                    shapes = spec.output_shapes([x.shape for x in ins], env)
                    if env is not None:
                        _check_symbols(st, shapes, env)
                outs = [empty(shape, dt) for shape, dt in zip(shapes, st.out_np)]
                try:
                    if device is None:
                        st.fn(*ins, *outs)
                    else:
                        device.launch(st, ins, outs)
                except TesseraError as e:
                    raise node_error(st, e) from None
            if timer is not None:
                timer(st, ins, outs)
            for s, o in zip(st.outs, outs):
                vals[s] = o
            for s in st.free:
                vals[s] = None
        return self.collect_outputs(vals.__getitem__)

    def collect_outputs(self, value_of) -> list:
        """The output arrays, value_of(slot) for each; an output that repeats another, or that is an
        input or a constant (a copy slot), is copied so the caller owns every array it gets."""
        result, seen = [], set()
        for s in self.output_slots:
            x = value_of(s)
            if s in seen or s in self._copy_slots:
                x = x.copy()                # (numpy or, on a GPU, a device array)
            seen.add(s)
            result.append(x)
        return result

    def static_runner(self):
        """The StaticRunner of this executor (made once), or False when its plan cannot have one."""
        if self._runner is None:

            with self._runner_lock:
                if self._runner is None:
                    self._runner = StaticRunner.for_executor(self) if self.is_static else False
        return self._runner

    def _check_input(self, spec, name: str, x):
        if self._device == "cuda" and (is_device_array(x) or (hasattr(x, "__dlpack__")
                                                               and not isinstance(x, np.ndarray))):
            return check_device_input(name, x, spec)
        return super()._check_input(spec, name, x)

    def _run(self, arrays) -> list:
        """One run: through the static runner when the plan allows one and no other thread is in it
        (on a GPU: the device runner, runtime/cuda_runner.py)."""
        if self._device == "cuda":
            if self._device_runner is None:
                with self._runner_lock:
                    if self._device_runner is None:
                        self._device_runner = CUDARunner(self)
            return self._device_runner.run(arrays)
        runner = self._runner
        if runner is None and self.is_static:
            runner = self.static_runner()
        if runner and runner.lock.acquire(False):
            try:
                return runner.run(arrays)
            finally:
                runner.lock.release()
        cache = self._shape_runners
        if cache is None:
            return self.execute(arrays)
        key = tuple(x.shape for x in arrays)
        with self._runner_lock:
            runner = cache.get(key)
            if runner is not None:
                cache.move_to_end(key)   # (least recently used first)
        if runner is None:               # first run at these shapes: the general path checks them all
            outs = self.execute(arrays)
            with self._runner_lock:
                if key not in cache:
                    cache[key] = ShapeRunner(self, arrays)
                    while len(cache) > SHAPE_CACHE_SIZE or (
                            len(cache) > 1 and sum(r.arena.nbytes for r in cache.values()) > SHAPE_CACHE_BYTES):
                        cache.popitem(last=False)
            return outs
        if runner.lock.acquire(False):
            try:
                return runner.run(arrays)
            finally:
                runner.lock.release()
        return self.execute(arrays)

    # ------------------------------------------------------------------ profiling
    def profile(self, inputs=None, number: int = 10, repeat: int = 3, show: bool = True, **kwargs):
        """Time every node with its kernel's C timer on these inputs; prints and returns the table."""
        arrays = self._arrays(inputs, kwargs)
        rows = []

        def timer(st, ins, outs):
            if st.host:                 # a host step has no C timer: timed around its Python call
                secs = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    for _ in range(number):
                        st.fn(*ins)
                    secs.append((time.perf_counter() - t0) / number)
                ms = sorted(secs)[len(secs) // 2] * 1e3
            else:
                ms = st.fn.time((*ins, *outs), number, repeat).median * 1e3
            rows.append(ProfileRow(st.spec.op, st.node.name, [tuple(x.shape) for x in ins],
                                   [tuple(o.shape) for o in outs], ms, st.spec.tuned))

        self.execute(arrays)              # warm-up: thread pools started, caches filled
        self.execute(arrays, timer)
        names = self.plan
        report = ProfileReport(self.name, rows,
                               inputs=[(n, str(s)) for n, s in zip(names.input_names, self._inputs)],
                               outputs=[(n, str(s)) for n, s in zip(names.output_names, self._outputs)])
        if show:
            print(report)
        return report

    @property
    def kernels(self) -> list:
        """The distinct kernels this executor runs, in first-use order."""
        out, seen = [], set()
        for st in self.steps:
            if id(st.kernel) not in seen:
                seen.add(id(st.kernel))
                out.append(st.kernel)
        return out

    def __repr__(self):
        return (f"<tessera.GraphExecutor {self.name!r}: {len(self.steps)} nodes, "
                f"{len(self.kernels)} kernels, target {self.plan.target}>")


def _check_symbols(st, shapes, env):
    for i, (shape, t) in enumerate(zip(shapes, st.out_specs)):
        if len(shape) != len(t.shape):
            raise ShapeError(f"{st.where()}: output {i} has rank {len(shape)} at run time, its type says {t}")
        for d, (got, dim) in enumerate(zip(shape, t.shape)):
            if isinstance(dim, int):
                if got != dim:
                    raise ShapeError(f"{st.where()}: output {i} dimension {d} is {got} at run time, its type says {t}")
            elif env.setdefault(dim, got) != got:
                raise ShapeError(f"{st.where()}: output {i} dimension {d} is {dim} = {got} at run time, but "
                                 f"{dim} = {env[dim]} elsewhere")


class ShapeRunner(StaticRunner):
    """A symbolic plan's runs at one set of input shapes, prepared as a StaticRunner prepares a static
    plan's (its `run`): output extents and symbols derived once from the shapes (with the general
    path's checks), intermediates in one arena laid out first-fit by their lifetimes (a tensor takes
    the bytes of ones dead before it is written), every kernel's argument array made once."""

    __slots__ = ()

    @staticmethod
    def applies(exe) -> bool:
        """Whether `exe`'s plan can have ShapeRunners: symbolic inputs, no host step, and every kernel
        a C function of tensor arguments."""
        if exe.is_static or any(st.host for st in exe.steps):
            return False
        return all(all(getattr(st.fn, "_is_tensor", (False,))) and hasattr(st.fn, "_entry") for st in exe.steps)

    def __init__(self, exe, arrays):  # (not StaticRunner.__init__: that one lays out a static plan)
        self.lock = threading.Lock()
        self.exe = exe
        self.err = ctypes.create_string_buffer(ERR_LEN)
        env = exe.bind_symbols(arrays)
        shapes = {s: tuple(x.shape) for s, x in zip(exe.input_slots, arrays)}
        for s, arr in enumerate(exe.constant_values):
            if arr is not None:
                shapes[s] = arr.shape
        outputs = set(exe.output_slots)
        arena = _Arena()
        offsets = {}
        for st in exe.steps:
            outs = st.spec.output_shapes([shapes[s] for s in st.ins], env)
            _check_symbols(st, outs, env)
            for s, shape, dt in zip(st.outs, outs, st.out_np):
                shapes[s] = tuple(shape)
                if s not in outputs:
                    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize
                    offsets[s] = (arena.alloc(nbytes), nbytes)
            for s in st.free:
                if s in offsets:
                    arena.release(*offsets[s])
        raw = np.empty(arena.top + 64, np.uint8)
        self.keep = [raw]
        self.arena = raw
        self._lay_out(shapes, raw.ctypes.data + (-raw.ctypes.data % 64), {s: off for s, (off, _) in offsets.items()})


class _Arena:
    """First-fit placement of 64-byte aligned blocks in one growing arena, with blocks released and
    merged with their free neighbours."""

    def __init__(self):
        self.top = 0
        self.free = []          # (offset, size), sorted by offset, no two adjacent

    def alloc(self, nbytes: int) -> int:
        size = max(64, -(-nbytes // 64) * 64)
        for k, (off, have) in enumerate(self.free):
            if have >= size:
                if have == size:
                    del self.free[k]
                else:
                    self.free[k] = (off + size, have - size)
                return off
        if self.free and self.free[-1][0] + self.free[-1][1] == self.top:   # grow the last free block
            off, have = self.free.pop()
            self.top = off + size
            return off
        off, self.top = self.top, self.top + size
        return off

    def release(self, off: int, nbytes: int) -> None:
        size = max(64, -(-nbytes // 64) * 64)
        free = self.free
        k = 0
        while k < len(free) and free[k][0] < off:
            k += 1
        free.insert(k, (off, size))
        if k + 1 < len(free) and off + size == free[k + 1][0]:          # merge with the next
            free[k] = (off, size + free.pop(k + 1)[1])
        if k > 0 and free[k - 1][0] + free[k - 1][1] == off:             # and with the previous
            prev = free.pop(k - 1)
            free[k - 1] = (prev[0], prev[1] + free[k - 1][1])


class LibraryKernel:
    """A kernel function of a loaded library: `fn` is what the graph executor calls."""

    __slots__ = ("op", "name", "module", "fn")

    def __init__(self, module, name: str, op: str):
        self.op, self.name, self.module = op, name, module
        self.fn = module.get_function(name)

    def __repr__(self):
        return f"<LibraryKernel {self.name} ({self.op})>"


def graph_executor_of(module, plan: Plan):
    """A GraphExecutor running `plan` with the kernel functions of `module` (a library holding
    every kernel the plan names: a loaded model library, or an AOT library's kernels)."""
    kernels = {name: LibraryKernel(module, name, spec.op) for name, spec in plan.kernels.items()}
    return GraphExecutor(plan, kernels)


__all__ = ["GraphExecutor", "LibraryKernel", "ShapeRunner", "graph_executor_of", "SHAPE_CACHE_SIZE",
           "SHAPE_CACHE_BYTES"]
