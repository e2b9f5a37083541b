"""plan_buffer_allocation: allocate each buffer a block allocates at the loop where it is used.

Schedules allocate every intermediate, cache and rfactor buffer in the root block; after
compute_at / reverse_compute_at its uses sit under some loop, and the buffer only lives within
one iteration of it (TVM's PlanAndUpdateBufferAllocationLocation). This pass (run before
lower_blocks) moves the allocation to the lowest loop holding every access, as an `Allocate`
around that loop's body, so each iteration (each thread, under a parallel loop) has its own copy
and compact_buffer_allocation can shrink it to one iteration's region.

Where values flow across iterations the allocation stays outside: a block that writes the buffer
with reduction iterators accumulates over the loops driving them, so its accesses count as being
above those loops. Allocations are not placed inside vectorized loops (they stay outside the
outermost one). Storage alignment requested by `storage_align` (the block annotation
"buffer_dim_align") is carried to compaction as an `AttrStmt(buffer, "buffer_dim_align", ...)`
around the Allocate.
"""
from __future__ import annotations

from ...ir import (
    Allocate,
    AttrStmt,
    BlockRealize,
    Call,
    For,
    ForKind,
    PrimFunc,
    collect_vars,
    const,
)
from ...ir.functor import Visitor
from ..analysis import edit

DIM_ALIGN = "buffer_dim_align"


def plan_buffer_allocation(func: PrimFunc) -> PrimFunc:
    """`func` with block-allocated buffers allocated at the lowest loop around all their uses."""
    body = _plan(func.body)
    return func if body is func.body else func.with_body(body)


def _dim_aligns(stmt) -> dict:
    """buffer -> [(axis, factor, offset)] from the blocks' buffer_dim_align annotations."""
    out = {}

    class _V(Visitor):
        def visit_Block(self, b):
            for entry in b.annotations.get(DIM_ALIGN, ()):
                k, axis, factor, offset = (int(x.value) for x in entry)
                if 0 <= k < len(b.writes):
                    out.setdefault(b.writes[k].buffer, {})[axis] = (factor, offset)
            self.visit(b.body)
            if b.init is not None:
                self.visit(b.init)

        def visit_PrimExpr(self, n):
            return None

    _V().visit(stmt)
    return out


class _Uses(Visitor):
    """For each buffer of interest, the lifted path (list of For/BlockRealize, outermost first)
    of every access below the allocating block."""

    def __init__(self, buffers):
        super().__init__()
        self.buffers = buffers
        self.path = []
        self.paths = {b: [] for b in buffers}

    def _record(self, buf):
        if buf in self.paths:
            self.paths[buf].append(_lift(self.path, buf))

    def visit_For(self, s):
        self.visit(s.min)
        self.visit(s.extent)
        self.path.append(s)
        self.visit(s.body)
        self.path.pop()

    def visit_BlockRealize(self, s):
        for v in s.iter_values:
            self.visit(v)
        self.visit(s.predicate)
        self.path.append(s)
        b = s.block
        for r in b.reads + b.writes:
            self._record(r.buffer)
        for x in b.alloc_buffers:
            pass
        self.visit(b.body)
        if b.init is not None:
            self.visit(b.init)
        self.path.pop()

    def visit_BufferLoad(self, n):
        self._record(n.buffer)
        self.generic_visit(n)

    def visit_BufferStore(self, n):
        self._record(n.buffer)
        self.generic_visit(n)


def _lift(path, buf):
    """The access path cut above the loops that carry a reduction into buf."""
    cut = len(path)
    for k, node in enumerate(path):
        if type(node) is not BlockRealize:
            continue
        b = node.block
        if not any(w.buffer is buf for w in b.writes):
            continue
        red = set()
        opaque = False
        for iv, v in zip(b.iter_vars, node.iter_values):
            if iv.iter_type == "reduce":
                red.update(collect_vars(v))
            elif iv.iter_type != "data_par":
                opaque = True
        if opaque:
            cut = min(cut, 0)
        for j in range(k):
            p = path[j]
            if type(p) is For and p.loop_var in red:
                cut = min(cut, j)
                break
    return path[:cut]


def _common_prefix(paths):
    if not paths:
        return []
    out = []
    for nodes in zip(*paths):
        first = nodes[0]
        if all(n is first for n in nodes):
            out.append(first)
        else:
            break
    return out


def _target_loop(prefix):
    """The deepest For of the common path, not inside a vectorized loop."""
    best = None
    for node in prefix:
        if type(node) is For:
            if node.kind == ForKind.VECTORIZED:
                break
            best = node
        elif type(node) is BlockRealize and node.block.iter_vars:
            # never move an allocation into a block with iteration variables (isolation)
            break
    return best


def _wrap(body, buf, aligns):
    stmt = Allocate(buf, body)
    for axis, (factor, offset) in sorted(aligns.get(buf, {}).items(), reverse=True):
        stmt = AttrStmt(buf, DIM_ALIGN, Call("int32", "tsr.dim_align", (const(axis), const(factor), const(offset))),
                        stmt)
    return stmt


def _plan(body):
    aligns = _dim_aligns(body)
    moves = {}      # id(For) -> [buffers]
    at_block = {}   # id(Block) -> [buffers] allocated at the top of the block body

    class _Blocks(Visitor):
        def visit_Block(self, b):
            if b.alloc_buffers:
                uses = _Uses(set(b.alloc_buffers))
                uses.visit(b.body)
                if b.init is not None:
                    uses.visit(b.init)
                for buf in b.alloc_buffers:
                    loop = _target_loop(_common_prefix(uses.paths[buf]))
                    if loop is None:
                        at_block.setdefault(id(b), []).append(buf)
                    else:
                        moves.setdefault(id(loop), []).append(buf)
            self.visit(b.body)
            if b.init is not None:
                self.visit(b.init)

        def visit_PrimExpr(self, n):
            return None

    _Blocks().visit(body)
    if not moves and not at_block:
        return body
    edits = {}
    for key, bufs in moves.items():
        def put(loop, bufs=bufs):
            inner = loop.body
            for buf in reversed(bufs):
                inner = _wrap(inner, buf, aligns)
            return loop.replace(body=inner)

        edits[key] = put
    blocks = {}

    class _Find(Visitor):
        def visit_Block(self, b):
            if id(b) in at_block or any(buf for buf in b.alloc_buffers):
                blocks[id(b)] = b
            self.visit(b.body)
            if b.init is not None:
                self.visit(b.init)

        def visit_PrimExpr(self, n):
            return None

    _Find().visit(body)
    for key, b in blocks.items():
        keep = at_block.get(key, [])

        def strip(blk, keep=keep):
            inner = blk.body
            for buf in reversed(keep):
                inner = _wrap(inner, buf, aligns)
            return blk.replace(body=inner, alloc_buffers=())

        edits[key] = strip
    return edit(body, edits)


__all__ = ["plan_buffer_allocation"]
