"""Buffer regions for the placement, memory and reduction primitives.

- `region_bounds` / `block_box(realize, buffer, loops, ana, writes)`: the box of a buffer a block
  instance touches, relaxed over `loops` (the loops between a target loop and the block) with
  tir.analysis.relax_range.
- `solve_linear(expr, ivars, ana)`: expr as a * v + b for one iteration variable v.
- block surgery: the subtree to remove with a block (`removal_root`), insertion into a loop body,
  fresh names.
"""
from __future__ import annotations

from ...arith import Analyzer
from ...ir import (BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, For, IntImm, Range,
                   SeqStmt, const, max_expr, min_expr, seq, structural_equal, substitute)
from ...ir.functor import Mutator, Visitor, load_with_indices
from ...ir.names import fresh_name
from ..analysis import relax_range, shape_var_analyzer, uses_var, uses_vars
from .state import child_realizes


def loop_triples(loops) -> list:
    return [(lp.loop_var, lp.min, lp.extent) for lp in loops]


def region_bounds(region: BufferRegion, vmap: dict, loops, ana) -> list:
    """Per dimension the inclusive (lo, hi) of a region (iteration variables replaced by vmap)
    relaxed over loops; a side is None when it cannot be bounded."""
    out = []
    for r in region.region:
        lo = substitute(r.min, vmap) if vmap else r.min
        if type(r.extent) is IntImm and r.extent.value == 1:
            hi = lo
        else:
            hi = lo + (substitute(r.extent, vmap) if vmap else r.extent) - 1
        lo, hi = ana.simplify(lo), ana.simplify(hi)
        out.append(relax_range(lo, hi, loops, ana))
    return out


def union_bounds(a, b, ana):
    if a is None:
        return b
    out = []
    for (alo, ahi), (blo, bhi) in zip(a, b):
        lo = None if alo is None or blo is None else ana.simplify(min_expr(alo, blo))
        hi = None if ahi is None or bhi is None else ana.simplify(max_expr(ahi, bhi))
        out.append((lo, hi))
    return out


def bindings(realize: BlockRealize) -> dict:
    return {iv.var: v for iv, v in zip(realize.block.iter_vars, realize.iter_values)}


def block_box(realize: BlockRealize, buffer: Buffer, loops, ana, writes: bool):
    """The union of the block's read (or write) regions of buffer, relaxed over loops (a list of
    For, outermost first); None when the block does not access the buffer that way."""
    regions = realize.block.writes if writes else realize.block.reads
    vmap = bindings(realize)
    triples = loop_triples(loops)
    box = None
    for region in regions:
        if region.buffer is buffer:
            box = union_bounds(box, region_bounds(region, vmap, triples, ana), ana)
    return box


# ---------------------------------------------------------------------------------------------
# solving a block's iteration variable from an index
# ---------------------------------------------------------------------------------------------
def solve_linear(expr, ivars, ana):
    """(v, a, b) with expr == a * v + b for one variable v of ivars and a constant int a != 0,
    (None, 0, expr) when expr uses none of them, or None when it is not of that form."""
    used = [v for v in ivars if uses_var(expr, v)]
    if not used:
        return None, 0, expr
    if len(used) > 1:
        return None
    v = used[0]
    zero = const(0, v.dtype)
    b = ana.simplify(substitute(expr, {v: zero}))
    a = ana.simplify(substitute(expr, {v: const(1, v.dtype)}) - b)
    if type(a) is not IntImm or a.value == 0:
        return None
    if uses_vars(b, set(ivars)) or not ana.can_prove_equal(expr, a * v + b):
        return None
    return v, a.value, b


def ceildiv(x, a: int):
    return (x + (a - 1)) // a if a != 1 else x


# ---------------------------------------------------------------------------------------------
# statements: where to cut a block out, where to put one in
# ---------------------------------------------------------------------------------------------
def removal_root(idx, realize):
    """The statement to delete to remove a block: the block, or the outermost of the loops that
    hold nothing but it (they would be left empty)."""
    node = realize
    p = idx.parent_of(node)
    while type(p) is For and p.body is node:
        node, p = p, idx.parent_of(p)
    return node


def loops_in(stmt) -> list:
    """Every For in stmt (not entering blocks' bodies other than through their loops)."""
    out = []

    class _V(Visitor):
        def visit_For(self, n):
            out.append(n)
            self.visit(n.body)

        def visit_PrimExpr(self, n):
            return None

        def visit_Buffer(self, n):
            return None

    _V().visit(stmt)
    return out


def body_items(stmt) -> list:
    return list(stmt.seq) if type(stmt) is SeqStmt else [stmt]


def item_position(idx, loop_or_block_body, container, node) -> int:
    """Index of the item of container's body (a sequence or one statement) that holds node."""
    items = body_items(loop_or_block_body)
    p, cur = idx.parent_of(node), node
    while p is not None and p is not container and p is not loop_or_block_body:
        cur, p = p, idx.parent_of(p)
    for k, s in enumerate(items):
        if s is cur:
            return k
    return 0


def insert_into(body, pos: int, stmt):
    items = body_items(body)
    return seq(*items[:pos], stmt, *items[pos:])


def fresh_block_name(idx, base: str) -> str:
    """A block name the schedule's function does not use yet."""
    return fresh_name(base, idx.blocks)


def buffer_names(func) -> set:
    """Names of every buffer a function declares (params and allocations)."""
    names = {p.name for p in func.params if isinstance(p, Buffer)}

    class _V(Visitor):
        def visit_Block(self, b):
            for buf in b.alloc_buffers:
                names.add(buf.name)
            self.visit(b.body)
            if b.init is not None:
                self.visit(b.init)

        def visit_Allocate(self, a):
            names.add(a.buffer.name)
            self.visit(a.body)

        def visit_PrimExpr(self, n):
            return None

    _V().visit(func.body)
    return names




# ---------------------------------------------------------------------------------------------
# rewriting buffers
# ---------------------------------------------------------------------------------------------
class BufferReplacer(Mutator):
    """Replaces buffers in loads, stores, block regions and allocations (bmap: old -> new); an
    optional index map rewrites the indices of accesses of a replaced buffer."""

    def __init__(self, bmap: dict, index_fn=None, region_fn=None):
        super().__init__()
        self.bmap, self.index_fn, self.region_fn = bmap, index_fn, region_fn

    def visit_BufferLoad(self, n):
        indices = tuple(self.visit(i) for i in n.indices)
        new = self.bmap.get(n.buffer)
        if new is None:
            return load_with_indices(n, indices)
        if self.index_fn is not None:
            indices = self.index_fn(n.buffer, indices)
        return BufferLoad(new, indices)

    def visit_BufferStore(self, n):
        value = self.visit(n.value)
        indices = tuple(self.visit(i) for i in n.indices)
        new = self.bmap.get(n.buffer)
        if new is None:
            if value is n.value and all(a is b for a, b in zip(indices, n.indices)):
                return n
            return BufferStore(n.buffer, value, indices)
        if self.index_fn is not None:
            indices = self.index_fn(n.buffer, indices)
        return BufferStore(new, value, indices)

    def region(self, r: BufferRegion) -> BufferRegion:
        new = self.bmap.get(r.buffer)
        if new is None:
            return r
        if self.region_fn is not None:
            return self.region_fn(r, new)
        return BufferRegion(new, r.region)

    def visit_Block(self, b):
        if b.iter_vars and not any(r.buffer in self.bmap for r in b.reads + b.writes) and \
                not any(x in self.bmap for x in b.alloc_buffers) and not _has_blocks(b.body):
            return b  # a leaf block's regions list every buffer its body accesses
        body = self.visit(b.body)
        init = self.visit(b.init) if b.init is not None else None
        reads = tuple(self.region(r) for r in b.reads)
        writes = tuple(self.region(r) for r in b.writes)
        allocs = tuple(self.bmap.get(x, x) for x in b.alloc_buffers)
        if body is b.body and init is b.init and all(x is y for x, y in zip(reads, b.reads)) and \
                all(x is y for x, y in zip(writes, b.writes)) and \
                all(x is y for x, y in zip(allocs, b.alloc_buffers)):
            return b
        return b.replace(body=body, init=init, reads=reads, writes=writes, alloc_buffers=allocs)

    def visit_Allocate(self, a):
        body = self.visit(a.body)
        buf = self.bmap.get(a.buffer, a.buffer)
        if body is a.body and buf is a.buffer:
            return a
        return a.replace(buffer=buf, body=body)


def _has_blocks(stmt) -> bool:

    return bool(child_realizes(stmt))


def point_region(buffer: Buffer, indices) -> BufferRegion:
    return BufferRegion(buffer, tuple(Range.from_min_extent(i, const(1, i.dtype)) for i in indices))


def dedup_regions(regions) -> tuple:
    """Regions without structural duplicates, in order of first appearance."""

    out = []
    for r in regions:
        if not any(o.buffer is r.buffer and structural_equal(o.region, r.region) for o in out):
            out.append(r)
    return tuple(out)


def analyzer_for(idx, node, include=None) -> Analyzer:
    """An analyzer knowing the symbolic shape vars and the ranges of the loops above node (and of
    `include`, a loop, when given)."""

    ana = shape_var_analyzer(idx.func)
    for lp in idx.loops_above(node):
        ana.bind(lp.loop_var, Range.from_min_extent(lp.min, lp.extent))
    if include is not None:
        ana.bind(include.loop_var, Range.from_min_extent(include.min, include.extent))
    return ana


def is_one(e) -> bool:
    return type(e) is IntImm and e.value == 1


__all__ = ["region_bounds", "union_bounds", "block_box", "bindings",
           "solve_linear", "ceildiv", "removal_root", "loops_in", "body_items", "item_position",
           "insert_into", "fresh_block_name", "buffer_names", "BufferReplacer",
           "point_region", "dedup_regions", "analyzer_for", "loop_triples", "is_one"]
