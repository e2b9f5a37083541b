"""fuse_ops: group operators into fused kernels by their fusion patterns (TVM's FuseOps).

The rules are TVM's, over the op registry's OpPattern, decided on the post-dominator tree of the
dataflow graph (a node may only fuse into its immediate post-dominator, so a group has one exit
and no value inside it is needed outside):
- a chain of elementwise / broadcast / injective ops fuses (injective ops in a second phase, so
  that the complex ops have taken their epilogues first);
- a reduction fuses the elementwise/broadcast ops that feed it (its prologue) and stands as the
  group's exit;
- an OUT_ELEMWISE_FUSABLE op (conv2d, dense, matmul, pools) fuses the elementwise/broadcast ops
  that follow it when every path to its post-dominator is elementwise at the junction and
  broadcast at most in between (bias add, relu, residual add, clip: the epilogue);
- opaque ops (and multi-output ops, which have no single exit) stand alone;
- a value read by several nodes fuses only through its post-dominator: diamonds whose branches
  all satisfy the rules fuse whole, anything else keeps the value in memory;
- a group holds at most `max_fuse_depth` nodes; a graph output always leaves its group.

Each group of two or more nodes becomes one node of op "fused" calling a `Function` (its body:
the group's nodes over parameters for the group's external inputs), named after its ops
(`fused_nn_conv2d_add_nn_relu`); the executor composes the computes into one PrimFunc and
schedules it (graph/fused.py). Groups with equal structure share one Function (and kernel).
"""
from __future__ import annotations

from ...errors import TesseraError
from ...ops.registry import OpPattern, get_op
from ..ir import FUSED_OP, Function, Graph, Node, Value
from ...ir.names import fresh_name
import re
from .context import PassContext

ELEMWISE, BROADCAST, INJECTIVE = OpPattern.ELEMWISE, OpPattern.BROADCAST, OpPattern.INJECTIVE
COMM_REDUCE, OUT_FUSABLE, OPAQUE = OpPattern.COMM_REDUCE, OpPattern.OUT_ELEMWISE_FUSABLE, OpPattern.OPAQUE

MAX_FUSE_DEPTH = 256          # TVM's relay.FuseOps.max_depth default
MAX_NAME = 80                 # longer function names are cut (TVM's kMaxFuncNameLength)


def node_pattern(node: Node) -> OpPattern:
    """The fusion pattern of a node: its op's, OPAQUE for fused, compute-less or multi-output nodes,
    and for a node whose output extent is a symbol none of its inputs has (a concatenation along a
    symbolic axis: the symbol of the sum): in its compute that extent is an expression of its inputs'
    symbols, which a reader fused with it could not match with the symbol its other inputs bind."""
    if node.op == FUSED_OP or len(node.outputs) != 1:
        return OPAQUE
    opdef = get_op(node.op, node.name)
    if opdef.compute is None or opdef.pattern >= OpPattern.TUPLE:
        return OPAQUE
    if node.inputs and not set(node.outputs[0].type.symbols) <= {d for v in node.inputs for d in v.type.symbols}:
        return OPAQUE
    return OpPattern(opdef.pattern)


class _DomNode:
    __slots__ = ("parent", "depth", "pattern")

    def __init__(self, parent, depth, pattern):
        self.parent, self.depth, self.pattern = parent, depth, pattern


class _Partitioner:
    """The graph partitioner: post-dominator tree, then union-find groups fused in phases."""

    def __init__(self, graph: Graph, max_fuse_depth: int):
        self.graph = graph
        self.nodes = list(graph.nodes)
        self.index = {n: i for i, n in enumerate(self.nodes)}
        self.max_depth = max_fuse_depth
        self.pattern = [node_pattern(n) for n in self.nodes]
        outputs = set(graph.outputs)
        consumers = graph.consumers()
        # forward edges: node -> [(consumer index, edge pattern)]; extern: the value leaves the graph
        self.outs: list = []
        self.extern: list = []
        for i, n in enumerate(self.nodes):
            edges = []
            for v in n.outputs:
                for c, _ in consumers.get(v, ()):
                    j = self.index[c]
                    p = self.pattern[j]
                    if p == BROADCAST and v.type.shape == c.outputs[0].type.shape:
                        p = ELEMWISE       # a full-shape operand of a broadcast op is read elementwise
                    edges.append((j, p))
            self.outs.append(edges)
            self.extern.append(any(v in outputs for v in n.outputs) or not edges)
        self._post_dominators()
        # groups (union-find), one per node to start with
        self.g_parent = list(range(len(self.nodes)))
        self.g_pattern = list(self.pattern)
        self.g_anchor = [p == OUT_FUSABLE for p in self.pattern]
        self.g_count = [1] * len(self.nodes)

    # ------------------------------------------------------------------ post-dominator tree
    def _post_dominators(self):
        self.dom: list = [None] * len(self.nodes)
        for i in range(len(self.nodes) - 1, -1, -1):
            if self.extern[i]:
                self.dom[i] = _DomNode(None, 1, OPAQUE)
                continue
            pattern = ELEMWISE
            parent = None
            for k, (j, p) in enumerate(self.outs[i]):
                if k == 0:
                    parent = j
                else:
                    parent, pattern = self._lca(parent, j, pattern)
                pattern = max(pattern, p)
            depth = self.dom[parent].depth + 1 if parent is not None else 1
            self.dom[i] = _DomNode(parent, depth, pattern)

    def _lca(self, a, b, pattern):
        while a != b:
            if a is None or b is None:
                return None, pattern
            da, db = self.dom[a], self.dom[b]
            if da.depth < db.depth:
                pattern = max(pattern, db.pattern)
                b = db.parent
            elif db.depth < da.depth:
                pattern = max(pattern, da.pattern)
                a = da.parent
            else:
                pattern = max(pattern, da.pattern, db.pattern)
                a, b = da.parent, db.parent
        return a, pattern

    # ------------------------------------------------------------------ groups
    def find(self, i):
        root = i
        while self.g_parent[root] != root:
            root = self.g_parent[root]
        while self.g_parent[i] != root:
            self.g_parent[i], i = root, self.g_parent[i]
        return root

    def _merge(self, child, parent):
        child, parent = self.find(child), self.find(parent)
        if child == parent:
            return
        self.g_count[parent] += self.g_count[child]
        self.g_parent[child] = parent
        if self.g_anchor[child]:
            self.g_anchor[parent] = True
            self.g_pattern[parent] = max(self.g_pattern[child], self.g_pattern[parent])

    def _check_path(self, src, sink, fcond) -> bool:
        visited = set()
        stack = [j for j, _ in self.outs[src]]
        while stack:
            n = stack.pop()
            if n in visited:
                continue
            visited.add(n)
            if not fcond(self.g_pattern[self.find(n)], n == sink):
                return False
            if n != sink:
                stack.extend(j for j, _ in self.outs[n])
        return True

    def _path_nodes(self, src, sink) -> list:
        """src and the nodes on its paths to sink (sink excluded)."""
        out, visited, stack = [], set(), [src]
        while stack:
            n = stack.pop()
            if n == sink or n in visited:
                continue
            visited.add(n)
            out.append(n)
            stack.extend(j for j, _ in self.outs[n])
        return out

    def _commit(self, src, sink):
        path = self._path_nodes(src, sink)
        anchors = {self.find(n) for n in path + [sink] if self.g_anchor[self.find(n)]}
        if len(anchors) > 1:
            return   # two complex ops never share a kernel
        for n in path:
            self._merge(n, sink)

    def _fused_count(self, child, sink) -> int:
        """The size of sink's group once child's paths to it are merged in."""
        target = self.find(sink)
        roots = {self.find(m) for m in self._path_nodes(child, sink)} - {target}
        return self.g_count[target] + sum(self.g_count[r] for r in roots)

    def run(self):
        for phase in (0, 1):
            for i in range(len(self.nodes)):
                gp = self.g_pattern[i]   # the node's own group record (TVM's groups_[nid]->pattern)
                if gp == OPAQUE:
                    continue
                dom = self.dom[i]
                if dom.parent is None:
                    continue
                sink = dom.parent
                if self.find(i) == self.find(sink):
                    continue
                if self._fused_count(i, sink) > self.max_depth:
                    continue
                if gp == OUT_FUSABLE:
                    if phase == 0 and dom.pattern == ELEMWISE and \
                            self._check_path(i, sink, lambda k, is_sink: k <= BROADCAST):
                        self._commit(i, sink)
                elif gp <= BROADCAST:
                    if dom.pattern <= INJECTIVE or dom.pattern == COMM_REDUCE:
                        def fcond(k, is_sink):
                            if not is_sink:
                                return k <= INJECTIVE
                            return k <= INJECTIVE or k in (COMM_REDUCE, OUT_FUSABLE)

                        if self._check_path(i, sink, fcond):
                            self._commit(i, sink)
                elif gp == INJECTIVE:
                    if phase == 1 and self._check_path(i, sink, lambda k, is_sink: k <= INJECTIVE):
                        self._commit(i, sink)
        groups: dict = {}
        for i in range(len(self.nodes)):
            groups.setdefault(self.find(i), []).append(i)
        return sorted(groups.values(), key=lambda m: m[-1])


def fusion_groups(graph: Graph, max_fuse_depth: int = MAX_FUSE_DEPTH) -> list:
    """The fusion groups of `graph`: lists of nodes (in graph order), every node in one group."""
    if isinstance(max_fuse_depth, bool) or not isinstance(max_fuse_depth, int) or max_fuse_depth < 1:
        raise TesseraError(f"fuse_ops: max_fuse_depth must be an int >= 1, got {max_fuse_depth!r}")
    p = _Partitioner(graph, max_fuse_depth)
    return [[p.nodes[i] for i in members] for members in p.run()]


def fuse_ops(graph: Graph, ctx=None, *, max_fuse_depth: int = MAX_FUSE_DEPTH) -> Graph:
    """`graph` with every fusion group of two or more nodes replaced by one fused node."""
    PassContext.of(ctx)   # the one pass signature: this pass needs none of the context
    groups = fusion_groups(graph, max_fuse_depth)
    if all(len(g) == 1 for g in groups):
        return graph
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    vmap: dict = {}
    by_key: dict = {}         # Function.key -> Function (equal groups share one)
    names: set = set()
    new_nodes = []
    for members in groups:
        if len(members) == 1:
            n = members[0]
            ins = [vmap.get(v, v) for v in n.inputs]
            if any(a is not b for a, b in zip(ins, n.inputs)):
                nn = Node(n.op, ins, n.attrs, n.name, [o.type for o in n.outputs], [o.name for o in n.outputs])
                vmap.update(zip(n.outputs, nn.outputs))
                n = nn
            new_nodes.append(n)
            continue
        fn, ext_inputs, escaping = _function_of(members, consumers, outputs)
        known = by_key.get(fn.key)
        if known is not None:
            fn = known
        else:
            name, k = fn.name, 0
            while name in names:
                k += 1
                name = f"{fn.name}_{k}"
            if name != fn.name:
                fn = Function(name, fn.body)
            names.add(name)
            by_key[fn.key] = fn
        sink = escaping[-1].producer
        node = Node(FUSED_OP, [vmap.get(v, v) for v in ext_inputs], {"function": fn}, sink.name,
                    [v.type for v in escaping], [v.name for v in escaping])
        vmap.update(zip(escaping, node.outputs))
        new_nodes.append(node)
    return Graph(graph.inputs, [vmap.get(v, v) for v in graph.outputs], new_nodes, graph.constants, graph.name,
                 graph.input_names, graph.output_names)


def _function_of(members, consumers, outputs):
    """(Function, external input Values, escaping Values) of one group (members in graph order)."""
    inside = {o for n in members for o in n.outputs}
    member_set = set(members)
    ext_inputs, params, pmap = [], [], {}
    used_names: set = set()
    body_nodes = []
    for n in members:
        slot_names = _slot_names(n)
        ins = []
        for pos, v in enumerate(n.inputs):
            if v in inside:
                ins.append(pmap[v])
                continue
            p = pmap.get(v)
            if p is None:
                name = fresh_name(slot_names[pos], used_names)
                used_names.add(name)
                p = pmap[v] = Value(name, v.type)
                ext_inputs.append(v)
                params.append(p)
            ins.append(p)
        nn = Node(n.op, ins, n.attrs, n.name, [o.type for o in n.outputs], [o.name for o in n.outputs])
        pmap.update(zip(n.outputs, nn.outputs))
        body_nodes.append(nn)
    escaping = [o for n in members for o in n.outputs
                if o in outputs or any(c not in member_set for c, _ in consumers.get(o, ()))]
    if not escaping:
        raise TesseraError(f"fuse_ops: the group ending in node {members[-1].name!r} has no output")
    body = Graph(params, [pmap[v] for v in escaping], body_nodes, {}, "fn")
    return Function(function_name([n.op for n in members]), body), ext_inputs, escaping


def _slot_names(node) -> list:
    """The op's input names for each input of the node (data, weight, lhs, rhs, data0...)."""
    opdef = get_op(node.op, node.name)
    fixed = [s for s in opdef.inputs if not s.endswith("*")]
    var = opdef.inputs[-1][:-1] if opdef.variadic else "in"
    return [fixed[i] if i < len(fixed) else f"{var}{i - len(fixed)}" for i in range(len(node.inputs))]


def function_name(ops) -> str:
    """`fused_` and the op names in order, dots as underscores (`fused_nn_conv2d_add_nn_relu`)."""
    name = "fused_" + "_".join(re.sub(r"[^A-Za-z0-9_]", "_", op) for op in ops)
    if len(name) > MAX_NAME:
        name = name[:MAX_NAME].rstrip("_") + f"_{len(ops)}ops"
    return name
