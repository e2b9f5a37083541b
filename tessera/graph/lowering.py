"""Lowering a graph: an optimized Graph -> its kernels (graph/kernels.py, through tessera.backend)
+ a Plan (tessera/runtime/plan.py). What runs it is tessera.executor's (graph_executor, build_aot).

    compiled = compile_graph(graph, target)       # CompiledGraph: graph, plan, kernels, memory_plan

The plan's value slots are the graph's inputs, then its constants, then the node outputs in node
order; its steps are the graph's nodes in order; each distinct kernel is named `<op>_<k>` (k in
order of first use), the name its function gets in an exported library. With static shapes the
plan carries the static memory plan (graph/memory_plan.py), which the graph executor's static runner
lays its arena out by.
"""
from __future__ import annotations

from ..errors import TesseraError
from ..ir import expr as E
from ..ir.names import identifier
from ..runtime.plan import KernelSpec, MemoryLayout, Plan, Step, TensorSpec
from ..target import Target
from ..ops.registry import get_op
from .ir import FUSED_OP, Graph
from .kernels import get_kernels, kernel_traces
from .memory_plan import plan_memory


class CompiledGraph:
    """A graph compiled for a target: `graph`, `target`, `plan` (the runtime's Plan), `kernels`
    (kernel name -> graph Kernel, with its program `prim`), `memory_plan` (the MemoryPlan whose
    offsets the plan carries, or None)."""

    __slots__ = ("graph", "target", "plan", "kernels", "memory_plan")

    def __init__(self, graph, target, plan, kernels, memory_plan):
        self.graph, self.target, self.plan, self.kernels, self.memory_plan = graph, target, plan, kernels, memory_plan

    def __repr__(self):
        return (f"<CompiledGraph {self.graph.name!r}: {len(self.plan.steps)} nodes, {len(self.kernels)} kernels, "
                f"target {self.target}>")


def static_problem(graph: Graph) -> str | None:
    """Why the graph cannot have a static memory plan (a symbolic dimension), or None."""
    for v in graph.inputs:
        if not v.type.is_static:
            return f"graph input %{v.name} is {v.type}"
    for n in graph.nodes:
        for o in n.outputs:
            if not o.type.is_static:
                return f"%{o.name} (output of node {n.name!r}, {n.op}) is {o.type}"
    return None


def _spec(v) -> TensorSpec:
    return TensorSpec(v.name, v.type.dtype, v.type.shape)


def memory_layout(memory_plan, slot_of: dict) -> MemoryLayout:
    """The runtime's MemoryLayout of a MemoryPlan, its values replaced by their plan slots."""
    return MemoryLayout(memory_plan.arena_bytes, memory_plan.strategy, memory_plan.alignment,
                        {slot_of[v]: (a.offset, a.nbytes) for v, a in memory_plan.allocations.items()},
                        memory_plan.as_dict())


def compile_graph(graph: Graph, target="c", memory_plan: bool = True, strategy: str = "greedy",
                  build_kernels: bool = True, traces=None) -> CompiledGraph:
    """Prepare every node's kernel (cached), compile them (in parallel) and make the Plan (see the
    module docstring).

    memory_plan: plan the arena when the shapes are static (False for a graph run once, such as
    constant evaluation: its single run takes the general path). build_kernels: False leaves the
    kernels prepared but not compiled on their own (the ahead-of-time module compiles them in one
    translation unit; graph_executor builds them when it needs them). traces: {node name: trace
    JSON} of the nodes whose kernels tuning records schedule (graph_traces)."""
    if not isinstance(graph, Graph):
        raise TesseraError(f"the graph compiler takes a tessera.graph.Graph, got {type(graph).__name__}")
    target = Target(target)
    slot_of: dict = {}
    values: list = []

    def define(v):
        slot_of[v] = len(values)
        values.append(_spec(v))
        return slot_of[v]

    inputs = [define(v) for v in graph.inputs]
    constants = {define(v): arr for v, arr in graph.constants.items()}
    built = get_kernels(kernel_requests(graph), target, compile=build_kernels, traces=traces)
    name_of: dict = {}          # id(kernel) -> its name in the plan
    kernels: dict = {}
    specs: dict = {}
    steps = []
    for n, k in zip(graph.nodes, built):
        name = name_of.get(id(k))
        if name is None:
            name = name_of[id(k)] = f"{identifier(k.op)}_{len(name_of)}"
            kernels[name] = k
            specs[name] = kernel_spec(k, _bounds(n))
        ins = [slot_of[v] for v in n.inputs]
        outs = [define(o) for o in n.outputs]
        steps.append(Step(n.name, n.op, name, ins, outs))
    mplan = None
    layout = None
    if memory_plan and static_problem(graph) is None:
        mplan = plan_memory(graph, strategy=strategy)
        layout = memory_layout(mplan, slot_of)
    plan = Plan(graph.name, str(target), values, inputs, [slot_of[v] for v in graph.outputs], graph.input_names,
                graph.output_names, constants, steps, specs, layout)
    return CompiledGraph(graph, target, plan, kernels, mplan)


def kernel_requests(graph: Graph) -> list:
    """(op, attrs, input types, output types, node name) of every node: what its kernel is made of."""
    return [(n.op, n.attrs, [v.type for v in n.inputs], [v.type for v in n.outputs], n.name) for n in graph.nodes]


def graph_traces(graph: Graph, target, schedules) -> dict:
    """{node name: trace JSON} of the graph's nodes that `schedules` (autotune.ApplyHistoryBest, or
    anything with `lookup(func, target)`) has a record for: the one step where records apply."""
    return kernel_traces(kernel_requests(graph), target, schedules)


def _bounds(n) -> dict:
    """The limits the op of node n puts on the symbols of its output extents (OpDef.bounds)."""
    if n.op == FUSED_OP:
        return {}
    fn = get_op(n.op, n.name).bounds
    return dict(fn(tuple(v.type for v in n.inputs), n.attrs)) if fn is not None else {}


def kernel_spec(k, bounds=None) -> KernelSpec:
    """The plan's description of a graph Kernel: its output extents as JSON expressions, or (for
    extents JSON cannot write) the kernel's own evaluation; a host kernel's come from its run."""
    if getattr(k, "host", False):
        return KernelSpec(k.op, [], None, host=True)
    in_vars = [[(d, v.name if hasattr(v, "name") else v) for d, v in dims] for dims in k.in_vars]
    tuned = bool(getattr(k, "tuned", False))
    try:
        shapes = [[expr_json(e) for e in shape] for shape in k.out_shape_exprs]
    except TesseraError:
        return KernelSpec(k.op, in_vars, None, k.output_shapes, bounds=bounds, tuned=tuned)
    return KernelSpec(k.op, in_vars, shapes, bounds=bounds, tuned=tuned)


def expr_json(e):
    """A kernel's output extent (an int or a PrimExpr over the symbols) as the plan's JSON form."""
    if isinstance(e, int):
        return e
    if isinstance(e, E.IntImm):
        return int(e.value)
    if isinstance(e, E.Var):
        return {"var": e.name}
    if isinstance(e, E.Cast) and e.dtype.is_integer() and e.value.dtype.is_integer():
        return expr_json(e.value)
    ops = {E.Add: "add", E.Sub: "sub", E.Mul: "mul", E.FloorDiv: "floordiv", E.FloorMod: "floormod",
           E.Div: "truncdiv", E.Mod: "truncmod", E.Min: "min", E.Max: "max"}
    for cls, name in ops.items():
        if type(e) is cls:
            return {name: [expr_json(e.a), expr_json(e.b)]}
    if isinstance(e, E.Select):
        return {"select": [expr_json(e.condition), expr_json(e.true_value), expr_json(e.false_value)]}
    cmps = {E.EQ: "eq", E.NE: "ne", E.LT: "lt", E.LE: "le", E.GT: "gt", E.GE: "ge"}
    for cls, name in cmps.items():
        if type(e) is cls:
            return {name: [expr_json(e.a), expr_json(e.b)]}
    raise TesseraError(f"the output extent {e.script()} uses {type(e).__name__}, which the plan's JSON extents "
                       f"cannot describe")


__all__ = ["CompiledGraph", "compile_graph", "graph_traces", "kernel_requests", "kernel_spec", "expr_json", "memory_layout", "static_problem"]
