"""plan_memory: static memory planning of a graph with static shapes (an analysis beside the graph
compiler, graph/lowering.py, not a Graph -> Graph pass).

Every intermediate tensor (a node output that is not a graph output) gets a place in one arena:
an offset (a multiple of `alignment`, 64 bytes by default) and a storage id. Two tensors may share
bytes only when their lifetimes do not overlap, where a tensor lives from the node that defines
it to the last node that reads it, in the graph's (topological) node order, both ends included:
a node's outputs never share bytes with its inputs, since the kernel reads one while writing the
other.

Not in the arena: graph inputs and outputs (the caller's buffers in the ahead-of-time module)
and constants (the weights, in the library's data section).

Strategies:
- "greedy_by_size" (TFLite's greedy-by-size): tensors in order of decreasing size, each put in the
  smallest gap between the tensors already placed that overlap it in time, else above them.
- "greedy" (default): the same placement in three orders (size; size x lifetime; lifetime, then
  size), keeping the smallest arena: no one order wins on every graph (BERT-base prefers the second).
- "naive": one buffer per tensor, side by side (the reference the report compares against).

The storage id names a start address: tensors with one storage id reuse the same memory, one
after another. `MemoryPlan.arena_bytes` is the planned peak, `naive_bytes` the sum of every
intermediate's size (one buffer per tensor), `live_bytes` the largest set of tensors alive at
once (a lower bound no placement can beat). A graph with a symbolic dimension is refused: the
plan (and the ahead-of-time module built on it) is for static shapes.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import NamedTuple

from ..errors import ShapeError, TesseraError
from ..ir.dtype import DataType
from .ir import Graph, Value

STRATEGIES = ("greedy", "greedy_by_size", "naive")


class Allocation(NamedTuple):
    """Where one tensor lives: storage id, byte offset in the arena, and its size in bytes."""

    storage_id: int
    offset: int
    nbytes: int


def value_nbytes(v: Value) -> int:
    """Bytes of a tensor with a static shape (ShapeError for a symbolic one); bool takes a byte."""
    t = v.type
    if not t.is_static:
        raise ShapeError(f"plan_memory: %{v.name} is {t}, a symbolic shape; memory plans (and the "
                         f"ahead-of-time module) need static shapes: fix the symbols when importing, e.g. "
                         f"from_onnx(model, shape_dict={{...}}) or `tessera compile --shape NAME=1,3,224,224`")
    dt = DataType(t.dtype)
    return t.numel() * max(1, dt.bits // 8) * dt.lanes


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def lifetimes(graph: Graph) -> dict:
    """Value -> (first, last) node positions of every node output: defined at `first`, read last at
    `last` (an output nobody reads lives only at its own node)."""
    live: dict = {}
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            if v in live:
                live[v][1] = i
        for o in n.outputs:
            live[o] = [i, i]
    return {v: (f, l) for v, (f, l) in live.items()}


class MemoryPlan:
    """The result of plan_memory: `allocations[value]`, `arena_bytes`, and the report figures."""

    def __init__(self, graph, strategy, alignment, allocations, lifetimes, io_bytes, constant_bytes):
        self.graph_name = graph.name
        self.strategy, self.alignment = strategy, alignment
        self.allocations = MappingProxyType(dict(allocations))
        self.lifetimes = MappingProxyType(dict(lifetimes))
        self.arena_bytes = max((_align(a.offset + a.nbytes, alignment) for a in self.allocations.values()),
                               default=0)
        self.naive_bytes = sum(a.nbytes for a in self.allocations.values())
        self.num_storages = len({a.storage_id for a in self.allocations.values() if a.nbytes})
        self.live_bytes = _largest_live_set(self.allocations, self.lifetimes, alignment)
        self.input_bytes, self.output_bytes = io_bytes
        self.constant_bytes = constant_bytes

    def __getitem__(self, value: Value) -> Allocation:
        a = self.allocations.get(value)
        if a is None:
            raise TesseraError(f"memory plan of {self.graph_name!r}: %{getattr(value, 'name', value)} is not "
                               f"in the arena (graph inputs, outputs and constants are not)")
        return a

    def __contains__(self, value) -> bool:
        return value in self.allocations

    @property
    def saving(self) -> float:
        """naive_bytes / arena_bytes (how many times smaller the planned arena is)."""
        return self.naive_bytes / self.arena_bytes if self.arena_bytes else 1.0

    def as_dict(self) -> dict:
        """The figures as plain JSON values."""
        return {"graph": self.graph_name, "strategy": self.strategy, "alignment": self.alignment,
                "intermediates": len(self.allocations), "storages": self.num_storages,
                "arena_bytes": self.arena_bytes, "naive_bytes": self.naive_bytes, "live_bytes": self.live_bytes,
                "saving": self.saving, "input_bytes": self.input_bytes, "output_bytes": self.output_bytes,
                "constant_bytes": self.constant_bytes}

    def summary(self) -> str:
        lines = [f"memory plan of graph {self.graph_name!r} ({self.strategy}, {self.alignment}-byte alignment)",
                 f"  intermediates     {len(self.allocations):6d} tensors  {_size(self.naive_bytes):>10}  "
                 f"one buffer per tensor",
                 f"  arena (planned)   {self.num_storages:6d} storages {_size(self.arena_bytes):>10}  "
                 f"{self.saving:.2f}x smaller",
                 f"  largest live set                   {_size(self.live_bytes):>10}  the lower bound",
                 f"  not in the arena: inputs {_size(self.input_bytes)}, outputs {_size(self.output_bytes)}, "
                 f"constants {_size(self.constant_bytes)}"]
        return "\n".join(lines)

    def table(self) -> str:
        """One line per tensor, in definition order: lifetime, storage id, offset, size."""
        rows = sorted(self.allocations.items(), key=lambda kv: (self.lifetimes[kv[0]][0], kv[0].name))
        out = [self.summary(), f"  {'tensor':<32} {'live':>11} {'storage':>7} {'offset':>12} {'bytes':>12}"]
        for v, a in rows:
            f, l = self.lifetimes[v]
            out.append(f"  %{v.name:<31} {f'{f}..{l}':>11} {a.storage_id:>7} {a.offset:>12} {a.nbytes:>12}")
        return "\n".join(out)

    def __str__(self):
        return self.summary()

    def __repr__(self):
        return (f"<MemoryPlan {self.graph_name!r} {self.strategy}: arena {self.arena_bytes} bytes, naive "
                f"{self.naive_bytes} bytes, {len(self.allocations)} tensors>")


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def _largest_live_set(allocs, lives, alignment) -> int:
    if not allocs:
        return 0
    end = max(l for _, l in lives.values()) + 2
    delta = [0] * end
    for v, a in allocs.items():
        f, l = lives[v]
        size = _align(a.nbytes, alignment)
        delta[f] += size
        delta[l + 1] -= size
    best = cur = 0
    for d in delta:
        cur += d
        best = max(best, cur)
    return best


def plan_memory(graph: Graph, alignment: int = 64, strategy: str = "greedy") -> MemoryPlan:
    """A static memory plan for `graph` (see the module docstring); the graph is not changed."""
    if not isinstance(graph, Graph):
        raise TesseraError(f"plan_memory takes a tessera.graph.Graph, got {type(graph).__name__}")
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1):
        raise TesseraError(f"plan_memory: alignment must be a power of two >= 1, got {alignment!r}")
    if strategy not in STRATEGIES:
        raise TesseraError(f"plan_memory: unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    for v in graph.inputs:
        value_nbytes(v)                     # symbolic inputs refused up front, naming the input
    outputs = set(graph.outputs)
    lives = {v: fl for v, fl in lifetimes(graph).items() if v not in outputs}
    sizes = {v: value_nbytes(v) for v in lives}
    order = {v: k for k, v in enumerate(lives)}
    if strategy == "naive":
        offsets, top = {}, 0
        for v in lives:
            offsets[v] = top
            top += _align(sizes[v], alignment)
    else:
        orders = [lambda v: (-sizes[v], lives[v][0], order[v])]
        if strategy == "greedy":
            span = {v: l - f + 1 for v, (f, l) in lives.items()}
            orders += [lambda v: (-sizes[v] * span[v], order[v]), lambda v: (-span[v], -sizes[v], order[v])]
        offsets = min((_greedy(lives, sizes, key, alignment) for key in orders), key=lambda o: o[0])[1]
    storage_of: dict = {}
    allocations = {}
    for v in sorted(lives, key=lambda v: (lives[v][0], order[v])):
        sid = storage_of.setdefault(offsets[v], len(storage_of)) if sizes[v] else 0
        allocations[v] = Allocation(sid, offsets[v], sizes[v])
    allocations = {v: allocations[v] for v in lives}
    io = (sum(value_nbytes(v) for v in graph.inputs), sum(value_nbytes(v) for v in set(graph.outputs)))
    const = sum(value_nbytes(v) for v in graph.constants)
    return MemoryPlan(graph, strategy, alignment, allocations, lives, io, const)


def _greedy(lives, sizes, key, alignment) -> tuple:
    """Tensors in the order of `key`, each into the tightest gap among the placed tensors whose
    lifetimes overlap its own (TFLite's greedy-by-size with key = decreasing size); offsets and
    padded sizes are multiples of `alignment`. (arena bytes, offsets)."""
    offsets: dict = {}
    placed = []                    # (first, last, offset, end)
    for v in sorted(lives, key=key):
        size = _align(sizes[v], alignment)
        if size == 0:
            offsets[v] = 0
            continue
        f, l = lives[v]
        busy = sorted((o, e) for pf, pl, o, e in placed if pf <= l and f <= pl)
        best, best_gap, top = None, None, 0
        for o, e in busy:
            gap = o - top
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = top, gap
            top = max(top, e)
        off = top if best is None else best
        offsets[v] = off
        placed.append((f, l, off, off + size))
    return max((e for *_, e in placed), default=0), offsets


def check_memory_plan(graph: Graph, plan: MemoryPlan) -> None:
    """Raise TesseraError unless `plan` is valid for `graph`: every intermediate placed (aligned,
    inside the arena, large enough) and no two tensors alive at the same time share a byte.

    Lifetimes are recomputed here from the graph, independently of the planner's."""
    outputs = set(graph.outputs)
    first, last = {}, {}
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            if v in first:
                last[v] = i
        for o in n.outputs:
            if o not in outputs:
                first[o] = last[o] = i
    where = f"memory plan of {graph.name!r}"
    extra = [v.name for v in plan.allocations if v not in first]
    if extra:
        raise TesseraError(f"{where}: places tensors that are not intermediates of the graph: {extra[:5]}")
    for v in first:
        a = plan.allocations.get(v)
        if a is None:
            raise TesseraError(f"{where}: intermediate %{v.name} has no place in the arena")
        need = value_nbytes(v)
        if a.nbytes < need:
            raise TesseraError(f"{where}: %{v.name} needs {need} bytes, the plan gives it {a.nbytes}")
        if need and a.offset % plan.alignment:
            raise TesseraError(f"{where}: %{v.name} at offset {a.offset}, not a multiple of {plan.alignment}")
        if a.offset < 0 or a.offset + a.nbytes > plan.arena_bytes:
            raise TesseraError(f"{where}: %{v.name} [{a.offset}, {a.offset + a.nbytes}) is outside the arena "
                               f"of {plan.arena_bytes} bytes")
    # sweep the node positions with the set of live tensors
    starts: dict = {}
    for v in first:
        if plan.allocations[v].nbytes:
            starts.setdefault(first[v], []).append(v)
    live: list = []
    for i in sorted(starts):
        live = [u for u in live if last[u] >= i]
        for v in starts[i]:
            a = plan.allocations[v]
            for u in live:
                b = plan.allocations[u]
                if a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes:
                    raise TesseraError(
                        f"{where}: %{v.name} (nodes {first[v]}..{last[v]}, bytes [{a.offset}, {a.offset + a.nbytes})) "
                        f"and %{u.name} (nodes {first[u]}..{last[u]}, bytes [{b.offset}, {b.offset + b.nbytes})) "
                        f"are alive at the same time and share memory")
            live.append(v)
