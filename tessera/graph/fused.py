"""The kernel of a fused node: its function's op computes composed into one PrimFunc, scheduled once.

Composition: every node of the function body applies its op's `compute` to the te tensors of its
inputs (te placeholders for the function's parameters, the producing node's te tensors inside the
group), so the group is one te graph and `te.create_prim_func` makes one PrimFunc of it, with one
block per te stage in topological order and the intermediate tensors allocated by the root block.

Scheduling (one mechanism: the schedule primitives):
0. unit dimensions: a broadcasting op reads an operand's extent-1 dimension at index 0; where
   the block's own iteration variable of that dimension has extent 1 too, the load takes the
   variable instead (the same element), so that the block reads its producer at its iteration
   point and can be folded into it (`_unit_dims_as_vars`).
1. inline: each block of a non-anchor node that is spatial and writes no function output is
   `compute_inline`d into its readers (prologues of a reduction, the middle of an elementwise
   chain, the elementwise ops of an epilogue); then the blocks left after the anchor (the
   epilogue's last block, which writes the output) are folded into the anchor's output block with
   `reverse_compute_inline` while that block is a spatial one (a convolution's unpacking or cast
   stage). An inlined block's tensor is never allocated nor written.
   When the anchor's output block (a layout stage such as a convolution's NCHWc -> NCHW unpacking,
   now carrying the epilogue) has an innermost loop the vector lanes do not divide, the loop that
   walks the contiguous last dimension of what it reads is split by the lanes and its inner part
   moved innermost (`_contiguous_inner_loop`), so that the default spatial schedule vectorizes it.
2. the anchor's default schedule, with `ScheduleContext(block=<the anchor's output block>,
   epilogue=<the epilogue blocks that could not be folded>)`: the op family places the epilogue
   (e.g. reverse_compute_at into its tile loop). The anchor is the group's OUT_ELEMWISE_FUSABLE
   node (conv2d, dense, matmul, pools), else its reduction, else (injective-only groups) its last
   node. If the anchor's schedule fails, the kernel keeps the inlined, otherwise unscheduled form.
"""
from __future__ import annotations

import warnings

from .. import te
from ..arith import simplify
from ..errors import DTypeError, ScheduleError, ShapeError, TesseraError
from ..ir import expr as E
from ..ir.buffer import BufferRegion
from ..ir.functor import Mutator, collect_vars, post_order_visit, substitute
from ..ir.names import fresh_name, identifier
from ..ir.stmt import Block, BufferStore
from ..ops._schedule import vector_lanes
from ..ops.registry import OpPattern, ScheduleContext, get_op
from ..te.create_prim_func import block_name_of, topo_ops
from ..te.tensor import ComputeOp, PlaceholderOp
from ..tir.schedule import has_block
from .ir import Function


class FusedKernel:
    """How the graph compiler builds the kernel of one Function (see the module docstring)."""

    def __init__(self, function: Function, where: str):
        self.function = function
        self.where = where
        self.name = function.name
        self._node_ops: list = []       # per body node: the te ComputeOps it created (ids)
        self._node_outs: list = []      # per body node: its te output tensors

    # ------------------------------------------------------------------ compute
    def input_names(self) -> list:
        """C-friendly names of the placeholders: the parameters' names (the op input slots)."""
        used, out = set(), []
        for i, p in enumerate(self.function.params):
            nm = fresh_name(identifier(p.name, f"p{i}"), used)
            used.add(nm)
            out.append(nm)
        return out

    def compute(self, placeholders, target=None) -> list:
        """The te tensors of the function's outputs, computed from `placeholders` (one per param)
        for `target` (None: the host)."""
        body = self.function.body
        env = {v: t for v, t in zip(body.inputs, placeholders)}
        self._node_ops, self._node_outs = [], []
        for n in body.nodes:
            opdef = get_op(n.op, n.name)
            if opdef.compute is None:
                raise TesseraError(f"{self.where}: node {n.name!r} ({n.op}) has no compute registered")
            ins = [env[v] for v in n.inputs]
            try:
                outs = opdef.compute_for(list(ins), n.attrs, target)
            except TesseraError as e:
                if n.name not in str(e) and type(e) in (ShapeError, TesseraError, DTypeError):
                    raise type(e)(f"{e} (node {n.name!r} in {self.where})") from None
                raise
            if isinstance(outs, te.Tensor):
                outs = [outs]
            outs = list(outs)
            if len(outs) != len(n.outputs):
                raise TesseraError(f"{self.where}: node {n.name!r} ({n.op}): compute gave {len(outs)} outputs, "
                                   f"the node has {len(n.outputs)}")
            for i, (o, v) in enumerate(zip(outs, n.outputs)):
                if not isinstance(o, te.Tensor):
                    raise TesseraError(f"{self.where}: node {n.name!r} ({n.op}): compute output {i} is "
                                       f"{type(o).__name__}, not a te.Tensor")
                if o.dtype != v.type.dtype:
                    raise DTypeError(f"{self.where}: node {n.name!r} ({n.op}): compute output {i} is {o.dtype}, "
                                     f"type inference says {v.type.dtype}")
                env[v] = o
            self._node_ops.append(_ops_between(outs, ins))
            self._node_outs.append(outs)
        return [env[v] for v in body.outputs]

    # ------------------------------------------------------------------ schedule
    def anchor_index(self):
        """(index of the anchor node in the body, its kind: 'complex', 'reduce' or 'injective')."""
        nodes = self.function.body.nodes
        pats = [get_op(n.op).pattern for n in nodes]
        for i, p in enumerate(pats):
            if p == OpPattern.OUT_ELEMWISE_FUSABLE:
                return i, "complex"
        for i in range(len(pats) - 1, -1, -1):
            if pats[i] == OpPattern.COMM_REDUCE:
                return i, "reduce"
        out = self.function.body.outputs[0].producer
        return nodes.index(out), "injective"

    @staticmethod
    def program(func):
        """The PrimFunc the fused kernel's schedule works on (func with unit dimensions read through
        their loop variables); a tuning record's trace replays on it."""
        return _unit_dims_as_vars(func)

    def schedule(self, sch, func, outs, target, warn_level=5, knobs=None):
        """Inline, then the anchor's schedule (see the module docstring). Returns the Schedule to
        build: `sch`, or the inlined-only copy when the anchor's schedule failed. knobs: the
        anchor schedule's tunable decisions (ops.registry.Knobs) while the tuner explores them."""
        blocks = _blocks_of_ops(func, outs)                 # id(te ComputeOp) -> block name
        unit = _unit_dims_as_vars(func)
        if unit is not func:
            sch = type(sch)(unit)
        body = self.function.body
        ai, kind = self.anchor_index()
        anchor = body.nodes[ai]
        out_ops = {id(t.op) for t in outs}
        # 1. inline the injective stages of the other nodes
        for j, ops in enumerate(self._node_ops):
            if j == ai:
                continue
            for op_id in ops:
                name = blocks.get(op_id)
                if name is not None and op_id not in out_ops:
                    _try(sch.compute_inline, sch, name)
        epilogue = []
        if kind == "injective":
            anchor_block = block_name_of(func, outs[0])
        else:
            anchor_block = blocks[id(self._node_outs[ai][0].op)]
            # fold what is left of the epilogue (its output stage) into the anchor's output block
            for j in sorted(_downstream(body, ai)):
                for op_id in self._node_ops[j]:
                    name = blocks.get(op_id)
                    if name is None or not has_block(sch, name):
                        continue
                    if not _try(sch.reverse_compute_inline, sch, name):
                        epilogue.append(name)
        if kind == "complex":
            _contiguous_inner_loop(sch, anchor_block, target)
        # 2. the anchor's default schedule
        opdef = get_op(anchor.op)
        if opdef.schedule is None:
            return sch
        ctx = ScheduleContext(block=anchor_block, attrs=anchor.attrs, target=target,
                              input_types=tuple(v.type for v in anchor.inputs),
                              output_types=tuple(v.type for v in anchor.outputs), epilogue=tuple(epilogue),
                              knobs=knobs)
        before = sch.copy()
        try:
            opdef.schedule(sch, ctx)
        except TesseraError as e:
            if knobs is not None:
                raise       # a knob setting the schedule refuses: no candidate, not a silent fall-back
            warnings.warn(f"{self.where}: the default schedule of its anchor {anchor.op} failed ({e}); using the "
                          f"inlined, unscheduled kernel", stacklevel=warn_level)
            return before
        return sch


def _contiguous_inner_loop(sch, block_name, target) -> None:
    """Reorder a spatial block's loops so that the innermost one reads a buffer contiguously, when
    the current innermost loop cannot be vectorized (see the module docstring); no-op otherwise."""
    try:
        block = sch.get_block(block_name)
    except ScheduleError:
        return
    blk = sch.get(block)
    loops = sch.get_loops(block)
    if any(iv.iter_type != "data_par" for iv in blk.iter_vars) or len(loops) != len(blk.iter_vars) or not loops:
        return
    exts = [sch.get(lp).extent for lp in loops]
    if any(not isinstance(e, E.IntImm) for e in exts) or any(sch.get(lp).kind != "serial" for lp in loops):
        return
    lanes = vector_lanes(blk, target)
    if lanes <= 1 or exts[-1].value % lanes == 0:
        return
    ivars = [iv.var for iv in blk.iter_vars]
    loads = []

    class _Loads(Mutator):
        def visit_BufferLoad(self, n):
            loads.append(n)
            return self.generic_visit(n)

    _Loads().visit(blk.body)
    for ld in loads:
        last = ld.indices[-1] if ld.indices else None
        used = [v for v in collect_vars(last) if v in ivars] if last is not None else []
        if len(used) != 1:
            continue
        d = ivars.index(used[0])
        ext = exts[d].value
        if d == len(loops) - 1 or ext % lanes or ext < lanes:
            continue
        zero = {v: E.IntImm(v.dtype, 0) for v in collect_vars(last) if v is not used[0]}
        v = used[0]

        def at(k):
            r = simplify(substitute(last, {**zero, v: E.IntImm(v.dtype, k)}))
            return r.value if isinstance(r, E.IntImm) else None

        contiguous = all(at(base + k) is not None and at(base + k) - at(base) == k
                         for base in range(0, min(ext, 4 * lanes), lanes) for k in range(lanes))
        if not contiguous:
            continue
        try:
            outer, inner = sch.split(loops[d], factors=[None, lanes])
            order = [lp for lp in loops[:d]] + [outer] + [lp for lp in loops[d + 1:]] + [inner]
            sch.reorder(*order)
        except ScheduleError:
            pass
        return


def _unit_dims_as_vars(func):
    """func where a spatial block storing `out[v0, ..., vn]` loads a same-rank buffer at constant 0
    in a dimension d of extent 1 while v_d has extent 1: the load (and the read region) use v_d."""
    def unit_map(block):
        st = block.body
        if block.init is not None or not isinstance(st, BufferStore):
            return None
        ivs = {iv.var: iv for iv in block.iter_vars}
        out = {}
        for d, i in enumerate(st.indices):
            iv = ivs.get(i) if isinstance(i, E.Var) else None
            if iv is not None and isinstance(iv.dom.extent, E.IntImm) and iv.dom.extent.value == 1 \
                    and isinstance(iv.dom.min, E.IntImm) and iv.dom.min.value == 0:
                out[d] = i
        return out or None

    def fix(buf, indices, dims):
        if len(indices) != len(dims[1]):
            return None
        new, changed = list(indices), False
        for d, v in dims[0].items():
            if d < len(new) and isinstance(new[d], E.IntImm) and new[d].value == 0 and \
                    isinstance(buf.shape[d], E.IntImm) and buf.shape[d].value == 1:
                new[d], changed = v, True
        return new if changed else None

    class _Loads(Mutator):
        def __init__(self, dims):
            super().__init__()
            self.dims = dims

        def visit_BufferLoad(self, n):
            n = self.generic_visit(n)
            new = fix(n.buffer, n.indices, self.dims)
            return n if new is None else n.replace(indices=tuple(new))

    class _Blocks(Mutator):
        def visit_Block(self, b):
            b = self.generic_visit(b)
            m = unit_map(b)
            if m is None:
                return b
            dims = (m, b.body.indices)
            body = _Loads(dims).visit(b.body)
            if body is b.body:
                return b
            reads = []
            for r in b.reads:
                mins = fix(r.buffer, [x.min for x in r.region], dims)
                if mins is None:
                    reads.append(r)
                else:
                    reads.append(BufferRegion(r.buffer, tuple(E.Range.from_min_extent(m_, x.extent)
                                                              for m_, x in zip(mins, r.region))))
            return b.replace(body=body, reads=tuple(reads))

    body = _Blocks().visit(func.body)
    return func if body is func.body else func.with_body(body)


def _ops_between(outs, ins) -> list:
    """ids of the te ComputeOps reachable from `outs` without passing through `ins`."""
    stop = {id(t) for t in ins}
    seen, order, stack = set(), [], [t for t in outs if id(t) not in stop]
    while stack:
        t = stack.pop()
        op = t.op
        if id(op) in seen or not isinstance(op, ComputeOp):
            continue
        seen.add(id(op))
        order.append(id(op))
        stack.extend(x for x in op.input_tensors if id(x) not in stop)
    return order


def _blocks_of_ops(func, outs) -> dict:
    """id(te ComputeOp) -> the name of its block in `func` (create_prim_func makes one block per
    compute op, in topological order, named after the op)."""
    names = []

    def visit(n):
        if isinstance(n, Block) and n.name_hint != "root":
            names.append(n.name_hint)

    post_order_visit(func.body, visit)
    roots = [t for t in outs if not isinstance(t.op, PlaceholderOp)]
    order = topo_ops(roots, {id(t) for t in _placeholders(roots)})
    if len(order) != len(names):
        raise TesseraError(f"fused kernel: {len(order)} te stages but {len(names)} blocks")
    out = {}
    for op, name in zip(order, names):
        if not name.startswith(op.name):
            raise TesseraError(f"fused kernel: block {name!r} does not belong to te stage {op.name!r}")
        out[id(op)] = name
    return out


def _placeholders(roots) -> list:
    out, seen, stack = [], set(), list(roots)
    while stack:
        t = stack.pop()
        if id(t.op) in seen:
            continue
        seen.add(id(t.op))
        if isinstance(t.op, PlaceholderOp):
            out.append(t)
        else:
            stack.extend(t.op.input_tensors)
    return out


def _downstream(body, i) -> set:
    """Indices of the body nodes that (transitively) read node i's outputs."""
    reach = set(body.nodes[i].outputs)
    out = set()
    for j in range(i + 1, len(body.nodes)):
        n = body.nodes[j]
        if any(v in reach for v in n.inputs):
            out.add(j)
            reach.update(n.outputs)
    return out


def _try(primitive, sch, name) -> bool:
    """Apply a block primitive; False (the schedule unchanged) when it refuses."""
    try:
        primitive(sch.get_block(name))
        return True
    except ScheduleError:
        return False
