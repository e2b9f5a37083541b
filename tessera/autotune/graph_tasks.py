"""Tuning tasks of a whole model: the deduplicated kernels of its optimized graph.

    tasks = autotune.extract_tasks(graph, params, target="c -num-threads=2")
    for t in tasks: print(t.name, t.weight, t.flops)

A task is one kernel program (a fused group after fuse_ops / alter_layout, or a lone op) keyed by
the structural hash of its unscheduled PrimFunc; its weight is how many nodes of the graph run it.
Its space (KernelSpace) is the kernel's default schedule with the decisions the op exposes as knobs
(ops' ScheduleContext.choose) left open: the hand-written schedule is the point with every knob at
its default, so tuning can only keep or beat it. A kernel whose default schedule has no knobs is
searched over the design spaces the rules generate (space.generate_design_space); its default is
still measured first (tune_graph), so it stays a candidate there too.
"""
from __future__ import annotations

from ..errors import TesseraError
from ..graph.ir import FUSED_OP, Graph
from ..graph.kernels import get_program
from ..graph.passes import optimized_graph
from ..ops.registry import Knobs, get_op
from ..target import Target
from ..tir import Schedule
from .task import GeneratedSpace, Space, TuneTask, sampling_decisions
from .workload import workload_key


class KernelSpace(Space):
    """The search space of one graph kernel (see the module docstring)."""

    def __init__(self, program, target):
        self.program = program
        self.func = program.func
        self.target = Target(target)
        self._generated = False           # GeneratedSpace, None (the rules give none), False (not made yet)
        self._points = None
        self._valid: list = []
        self._knobs = None

    @property
    def knobs(self) -> int:
        """How many decisions of the default schedule are open (found by running it once with Knobs,
        on first ask: extract_tasks does not schedule every kernel for tasks never tuned)."""
        if self._knobs is None:
            self._knobs = 0
            if self.program.what is not None:
                try:
                    sch = self.program.schedule(Knobs(seed=0))
                    self._knobs = sum(1 for inst in sch.trace.insts if inst.kind.name == "SampleCategorical")
                except TesseraError:
                    pass
        return self._knobs

    @property
    def kind(self) -> str:
        """"knobs" (the default schedule's decisions) or "generated" (the rules' design spaces)."""
        return "knobs" if self.knobs else "generated"

    def default(self):
        """The kernel's default schedule (what tessera.compile builds without records), or the
        unscheduled program where it has none; None when the default schedule fails."""
        try:
            sch = self.program.schedule()
        except TesseraError:
            return None
        return sch if sch is not None else Schedule(self.func)

    def _space(self):
        if self._generated is False:
            try:
                self._generated = GeneratedSpace(self.func, self.target)
            except TesseraError:
                self._generated = None
        return self._generated

    def points(self) -> dict:
        """Every point of a knob space (decisions tuple -> postprocessed Schedule, None where the
        schedule or a postprocessor refuses it), enumerated depth first on first use and kept: the
        knob spaces are small (tens to a few hundred points) and building a point costs as much as
        sampling one, so the search draws from this table instead of rebuilding. At most
        MAX_POINTS are enumerated."""
        if self._points is None:
            pts: dict = {}
            stack = [()]
            while stack and len(pts) < self.MAX_POINTS:
                prefix = stack.pop()
                k = Knobs(list(prefix) + [0] * 64, seed=0)
                try:
                    sch = self.finish(self.program.schedule(k))
                except TesseraError:
                    sch = None
                full = tuple(prefix) + (0,) * (len(k.counts) - len(prefix))
                pts[full] = sch
                for i in range(len(k.counts) - 1, len(prefix) - 1, -1):
                    for j in range(k.counts[i] - 1, 0, -1):
                        stack.append(full[:i] + (j,))
            self._points = pts
            self._valid = [d for d, s in pts.items() if s is not None]
        return self._points

    MAX_POINTS = 512

    def sample(self, rng):
        if self.knobs:
            self.points()
            if not self._valid:
                return None
            return self._points[self._valid[int(rng.integers(len(self._valid)))]]
        space = self._space()
        return space.sample(rng) if space is not None else None

    def mutate(self, sch, rng):
        if self.knobs:
            pts = self.points()
            d = tuple(sampling_decisions(sch.trace))
            near = [e for e in self._valid if len(e) == len(d) and sum(a != b for a, b in zip(d, e)) == 1]
            return pts[near[int(rng.integers(len(near)))]] if near else None
        space = self._space()
        return space.mutate(sch, rng) if space is not None else None


class GraphTask(TuneTask):
    """A TuneTask for one kernel of a graph: `weight` (nodes that run it), `nodes` (their names),
    `op` (the kernel's name: the op, or the fused group's), `weights` (positions of the kernel's
    parameters that are graph constants at every node that runs it)."""

    def __init__(self, program, target, weight: int = 1, nodes=(), weights=()):
        super().__init__(program.func, target, space=KernelSpace(program, target), name=program.kernel_name)
        self.program = program
        self.op = program.kernel_name
        self.weight = weight
        self.nodes = list(nodes)
        self.weights = tuple(weights)

    def __repr__(self):
        return f"<GraphTask {self.name} x{self.weight} ({self.space.kind}) on {self.target}>"


def extract_tasks(graph, params=None, target="c", opt_level: int = 3, disabled_passes=(),
                  optimized: bool = False) -> list:
    """The tuning tasks of graph for target: one per distinct kernel program of the optimized graph
    (after fuse_ops and alter_layout, as tessera.compile builds it), in order of first use, each with
    its weight (how many nodes run it) and FLOPs. Host ops and kernels with symbolic extents (they
    cannot be timed without shapes) are left out. optimized: graph is already the optimized graph."""
    target = Target(target)
    if not optimized and not isinstance(graph, Graph):
        raise TesseraError(f"extract_tasks takes a tessera.graph.Graph (e.g. from tessera.frontend.from_onnx), got "
                           f"{type(graph).__name__}; a model whose structure depends on input values "
                           f"(a DeferredGraph) is tuned per specialization")
    g = graph if optimized else optimized_graph(graph, params, target, opt_level, disabled_passes)
    tasks: dict = {}
    for n in g.nodes:
        if n.op != FUSED_OP and get_op(n.op, n.name).host is not None:
            continue
        in_types = [v.type for v in n.inputs]
        out_types = [v.type for v in n.outputs]
        if not all(t.is_static for t in in_types + out_types):
            continue
        prog = get_program(n.op, n.attrs, in_types, out_types, target, n.name)
        key = workload_key(prog.func)
        consts = tuple(i for i, v in enumerate(n.inputs) if v in g.constants) \
            if len(prog.func.params) == len(n.inputs) + len(n.outputs) else ()   # inputs lead the params
        task = tasks.get(key)
        if task is None:
            tasks[key] = GraphTask(prog, target, 1, [n.name], consts)
        else:
            task.weight += 1
            task.nodes.append(n.name)
            task.weights = tuple(i for i in task.weights if i in consts)
    return list(tasks.values())


__all__ = ["KernelSpace", "GraphTask", "extract_tasks", "optimized_graph"]
