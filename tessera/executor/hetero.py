"""partition_for_vdla: an int8 graph (graph/passes/quantize.py) -> a heterogeneous plan that runs the
quantized convolutions on VDLA (the simulator) and everything else on the CPU: an executor of two
devices, not a Graph -> Graph pass.

    plan = partition_for_vdla(qgraph)
    print(plan)                      # the steps: cpu segments, copies to / from VDLA, vdla kernels
    y = plan.run({"input": x})       # a list of outputs, in the graph's order
    plan.vdla_report()               # simulated cycles of every VDLA step of the last run

A VDLA step is the chain the quantizer emits for a conv2d, `nn.conv2d(int8, const int8 weight,
out int32) -> add(const int32 bias) -> right_shift(const per-channel int32) -> clip(0 or -128, 127)
-> cast(int8)`, when its channels are multiples of VDLA's 16-wide block, its groups and dilation 1,
its padding symmetric and its strides equal (others stay on the CPU). The nodes in between form CPU
segments, each compiled as one graph by the graph compiler. The data movement is explicit: a
`to_vdla` step packs an NCHW int8 tensor into VDLA's NCHW1n16c layout in the accelerator's DRAM, a
`from_vdla` step unpacks a result for the CPU; a VDLA step feeding another VDLA step passes the packed
tensor along (no copy). The weights, bias and shift are packed once, at partitioning.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..accel.vdla import layers as vdla
from ..build_module import build as tessera_build
from ..errors import TesseraError
from ..graph.builder import Builder
from ..graph.ir import Graph, Value
from ..graph.lowering import compile_graph
from ..graph.passes import optimize
from ..graph.passes.quantize import single_consumer
from .graph import graph_executor


@dataclass
class Step:
    """One step of a heterogeneous plan: `kind` is "cpu", "to_vdla", "vdla" or "from_vdla"; `inputs`
    and `outputs` name the plan's values (a packed value is named `<value>@vdla`)."""

    kind: str
    name: str
    inputs: list
    outputs: list
    run: object = field(repr=False, default=None)
    detail: str = ""


class HeteroPlan:
    """A partitioned graph: steps in order over named values (see the module docstring)."""

    def __init__(self, graph: Graph, steps: list, reports: dict):
        self.graph, self.steps = graph, steps
        self.reports = reports

    def run(self, inputs: dict) -> list:
        env = {}
        for v, n in zip(self.graph.inputs, self.graph.input_names):
            if n not in inputs:
                raise TesseraError(f"HeteroPlan.run: missing input {n!r} (inputs: {list(self.graph.input_names)})")
            env[v.name] = np.asarray(inputs[n])
        for st in self.steps:
            outs = st.run(*[env[i] for i in st.inputs])
            for name, arr in zip(st.outputs, outs):
                env[name] = arr
        return [env[v.name] for v in self.graph.outputs]

    def vdla_report(self) -> dict:
        """{vdla step name: the simulator's Report of its last run}."""
        return dict(self.reports)

    def __str__(self):
        lines = [f"heterogeneous plan of {self.graph.name}: {len(self.steps)} steps "
                 f"({sum(s.kind == 'vdla' for s in self.steps)} on VDLA)"]
        for i, s in enumerate(self.steps):
            lines.append(f"  {i:>3} {s.kind:<9} {s.name}: {', '.join(s.inputs)} -> {', '.join(s.outputs)}"
                         + (f"  [{s.detail}]" if s.detail else ""))
        return "\n".join(lines)


def _const(g: Graph, v: Value):
    return np.asarray(g.constants[v]) if v in g.constants else None


def _match_conv(g: Graph, n, cons, outputs):
    """(nodes of the chain, Conv2DShape, packed weight, bias, shift, relu, output value) or None."""
    if n.op != "nn.conv2d" or str(n.inputs[0].dtype) != "int8" or str(n.outputs[0].dtype) != "int32":
        return None
    w = _const(g, n.inputs[1])
    if w is None or w.dtype != np.int8 or n.attrs.get("groups", 1) != 1:
        return None
    dil, strides, pad = tuple(n.attrs["dilation"]), tuple(n.attrs["strides"]), tuple(n.attrs["padding"])
    if dil != (1, 1) or strides[0] != strides[1] or len(set(pad)) != 1:
        return None
    chain = [n]
    add = single_consumer(cons, n.outputs[0], "add", outputs)
    if add is None:
        return None
    bias = _const(g, add.inputs[1])
    shr = single_consumer(cons, add.outputs[0], "right_shift", outputs)
    clip = single_consumer(cons, shr.outputs[0], "clip", outputs) if shr is not None else None
    cast = single_consumer(cons, clip.outputs[0], "cast", outputs) if clip is not None else None
    if bias is None or shr is None or clip is None or cast is None or str(cast.outputs[0].dtype) != "int8":
        return None
    shift = _const(g, shr.inputs[1])
    lo, hi = clip.attrs["a_min"], clip.attrs["a_max"]
    if shift is None or hi != 127 or lo not in (0, -128):
        return None
    N, C, H, W = n.inputs[0].shape
    O, _, KH, KW = w.shape
    if any(not isinstance(d, int) for d in (N, C, H, W)) or C % 16 or O % 16:
        return None
    s = vdla.Conv2DShape(N, C, H, W, O, KH, KW, strides[0], pad[0])
    bias = np.broadcast_to(bias.reshape(-1), (O,)).astype(np.int32)
    shift = np.broadcast_to(shift.reshape(-1), (O,)).astype(np.int32)
    if (shift < 0).any() or (shift > 31).any():
        return None
    return chain + [add, shr, clip, cast], s, w, bias, shift, lo == 0, cast.outputs[0]


def _cpu_step(g: Graph, nodes: list, needed_after: set, idx: int, target) -> Step:
    """One CPU segment: the nodes as a graph of their own, compiled by the graph compiler."""
    inside = {o for n in nodes for o in n.outputs}
    ins, consts = [], {}
    for n in nodes:
        for v in n.inputs:
            if v in inside or v in ins or v in consts:
                continue
            if v in g.constants:
                consts[v] = g.constants[v]
            else:
                ins.append(v)
    outs = [o for n in nodes for o in n.outputs if o in needed_after]
    b = Builder(f"{g.name}_cpu{idx}")
    vmap = {v: b.input(v.name, v.shape, str(v.dtype)) for v in ins}
    vmap.update({v: b.const(arr, v.name) for v, arr in consts.items()})
    for n in nodes:
        new = b.node(n.op, [vmap[v] for v in n.inputs], dict(n.attrs), name=n.name)
        vmap.update(zip(n.outputs, new.outputs))
    b.output(*[vmap[o] for o in outs])
    built = b.finish()
    sub = Graph(built.inputs, built.outputs, built.nodes, built.constants, built.name, [v.name for v in ins],
                [v.name for v in outs])
    exe = graph_executor(compile_graph(optimize(sub, 2, target), target), 2)
    names = [v.name for v in ins]

    def run(*arrays):
        return exe.run(dict(zip(names, arrays)))
    return Step("cpu", sub.name, names, [v.name for v in outs], run, f"{len(nodes)} nodes")


def partition_for_vdla(qgraph: Graph, target="c", vthreads: int = 2) -> HeteroPlan:
    """The heterogeneous plan of an int8 graph (see the module docstring)."""
    if not isinstance(qgraph, Graph):
        raise TesseraError(f"partition_for_vdla takes a tessera.graph.Graph, got {type(qgraph).__name__}")
    g = qgraph
    cons = g.consumers()
    outputs = set(g.outputs)
    units, in_unit = [], {}
    for n in g.nodes:
        if id(n) in in_unit:
            continue
        m = _match_conv(g, n, cons, outputs)
        if m is not None:
            units.append(m)
            for x in m[0]:
                in_unit[id(x)] = len(units) - 1
    # the order of work: CPU segments between VDLA units, in the graph's topological order
    order = []
    for n in g.nodes:
        u = in_unit.get(id(n))
        if u is None:
            if order and order[-1][0] == "cpu":
                order[-1][1].append(n)
            else:
                order.append(("cpu", [n]))
        elif n is units[u][0][0]:
            order.append(("vdla", units[u]))
    # which values are read after each item (to choose segment outputs)
    reads_after = [set() for _ in order]
    later: set = set(g.outputs)
    for i in range(len(order) - 1, -1, -1):
        reads_after[i] = set(later)
        kind, item = order[i]
        nodes = item if kind == "cpu" else item[0][:1]
        for n in nodes:
            later |= set(n.inputs)
    steps, packed = [], set()
    host = {v.name for v in g.inputs}     # values the CPU holds (inputs, CPU results, unpacked copies)
    reports: dict = {}
    for i, (kind, item) in enumerate(order):
        if kind == "cpu":
            # unpack what the segment reads from VDLA
            for n in item:
                for v in n.inputs:
                    if v.name in packed and v.name not in host:
                        steps.append(Step("from_vdla", f"unpack_{v.name}", [f"{v.name}@vdla"], [v.name],
                                          lambda y: [vdla.unpack_data(y)], "NCHW1n16c -> NCHW"))
                        host.add(v.name)
            steps.append(_cpu_step(g, item, reads_after[i], i, target))
            host.update(steps[-1].outputs)
            continue
        nodes, s, w, bias, shift, relu, out = item
        x = nodes[0].inputs[0]
        if x.name not in packed:
            steps.append(Step("to_vdla", f"pack_{x.name}", [x.name], [f"{x.name}@vdla"],
                              lambda a: [vdla.pack_data(a)], "NCHW -> NCHW1n16c"))
            packed.add(x.name)
        func = vdla.conv2d_packed(s, shift="channel", relu=relu, bias=True, name="conv2d")
        tiles = vdla.choose_conv2d_tiles(s, vthreads=vthreads)
        mod = tessera_build(vdla.schedule_conv2d(func, **tiles), target="vdla")
        wp, bp, sp = vdla.pack_weight(w), vdla.pack_bias(bias, 6), vdla.pack_bias(shift, 6)
        oshape = (s.n, s.o // 16, s.oh, s.ow, 1, 16)
        name = nodes[0].name

        def run(a, mod=mod, wp=wp, bp=bp, sp=sp, oshape=oshape, name=name):
            y = np.zeros(oshape, np.int8)
            mod(a, wp, bp, sp, y)
            reports[name] = mod.last_report
            return [y]
        steps.append(Step("vdla", name, [f"{x.name}@vdla"], [f"{out.name}@vdla"], run,
                          f"conv2d {s.c}x{s.h}x{s.w}->{s.o} k{s.kh} s{s.stride} p{s.pad}; tiles {tiles}"))
        packed.add(out.name)
    for v in g.outputs:
        if v.name in packed and v.name not in host:
            steps.append(Step("from_vdla", f"unpack_{v.name}", [f"{v.name}@vdla"], [v.name],
                              lambda y: [vdla.unpack_data(y)], "NCHW1n16c -> NCHW"))
    return HeteroPlan(g, steps, reports)
