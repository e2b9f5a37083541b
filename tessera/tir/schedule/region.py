"""Buffer regions for the placement, memory and reduction primitives (and the lowering passes).

- `relax(expr, loops, ana)`: the inclusive (lo, hi) an index expression takes while the given loops
  run, as expressions of the variables outside them (TVM's EvalSet over a loop path). Monotone
  parts (affine sums, floordiv by a constant, min/max) are evaluated at the ends of the ranges, so
  split/fuse indices relax exactly; anything else is bounded structurally, or not at all (None).
- `block_box(realize, buffer, loops, ana, writes)`: the box of a buffer a block instance touches,
  relaxed over `loops` (the loops between a target loop and the block).
- `solve_linear(expr, ivars, ana)`: expr as a * v + b for one iteration variable v.
- block surgery: the subtree to remove with a block (`removal_root`), insertion into a loop body,
  fresh names.
"""
from __future__ import annotations

from ...arith import Analyzer
from ...ir import (Add, Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, Cast,
                   FloorDiv, FloorMod, For, IntImm, Max, Min, Mul, Range, Select, SeqStmt, Sub, const,
                   max_expr, min_expr, seq, substitute)
from ...ir.functor import Mutator, Visitor
from ...ir.names import fresh_name
from .analysis import uses_var, uses_vars
from .state import child_realizes
from ...ir import structural_equal
from .rewrite import shape_var_analyzer
from ...ir import (Allocate, AssertStmt, AttrStmt, IfThenElse, LetStmt)
from ...ir.stmt import NOP
from ...ir.stmt import NOP as _NOP


# ---------------------------------------------------------------------------------------------
# relaxing index expressions over loops
# ---------------------------------------------------------------------------------------------
def _comb(a, b):
    if a is None or b is None:
        return None
    if a == 0:
        return b
    if b == 0 or a == b:
        return a
    return None


def _monotone(e, x):
    """+1 / -1 when e is non-decreasing / non-increasing in x, 0 when it does not use x, else None."""
    if e is x:
        return 1
    if not uses_var(e, x):
        return 0
    t = type(e)
    if t is Add or t is Min or t is Max:
        return _comb(_monotone(e.a, x), _monotone(e.b, x))
    if t is Sub:
        b = _monotone(e.b, x)
        return _comb(_monotone(e.a, x), None if b is None else -b)
    if t is Mul:
        for c, other in ((e.b, e.a), (e.a, e.b)):
            if type(c) is IntImm:
                m = _monotone(other, x)
                if m is None:
                    return None
                return 0 if c.value == 0 else (m if c.value > 0 else -m)
        return None
    if t is FloorDiv and type(e.b) is IntImm and e.b.value > 0:
        return _monotone(e.a, x)
    if t is Cast and e.dtype.is_integer() and e.value.dtype.is_integer() and e.dtype.bits >= e.value.dtype.bits:
        return _monotone(e.value, x)
    return None


def _relax1(e, x, lo, hi, ana):
    """(lo, hi) of e while x runs over [lo, hi] (inclusive), or None when it cannot be bounded."""
    m = _monotone(e, x)
    if m == 0:
        return e, e
    if m is not None:
        a, b = substitute(e, {x: lo}), substitute(e, {x: hi})
        return (a, b) if m > 0 else (b, a)
    t = type(e)
    if t is Add or t is Sub:
        ra, rb = _relax1(e.a, x, lo, hi, ana), _relax1(e.b, x, lo, hi, ana)
        if ra is None or rb is None:
            return None
        if t is Add:
            return ra[0] + rb[0], ra[1] + rb[1]
        return ra[0] - rb[1], ra[1] - rb[0]
    if t is Mul:
        for c, other in ((e.b, e.a), (e.a, e.b)):
            if type(c) is IntImm:
                r = _relax1(other, x, lo, hi, ana)
                if r is None:
                    return None
                return (r[0] * c, r[1] * c) if c.value >= 0 else (r[1] * c, r[0] * c)
        return None
    if t is FloorDiv and type(e.b) is IntImm and e.b.value > 0:
        r = _relax1(e.a, x, lo, hi, ana)
        return None if r is None else (r[0] // e.b, r[1] // e.b)
    if t is FloorMod and type(e.b) is IntImm and e.b.value > 0:
        r = _relax1(e.a, x, lo, hi, ana)
        c = e.b
        if r is not None and ana.can_prove_equal(r[0] // c, r[1] // c):
            return r[0] % c, r[1] % c
        return const(0, e.dtype), const(c.value - 1, e.dtype)
    if t is Min or t is Max:
        ra, rb = _relax1(e.a, x, lo, hi, ana), _relax1(e.b, x, lo, hi, ana)
        if ra is None or rb is None:
            return None
        f = min_expr if t is Min else max_expr
        return f(ra[0], rb[0]), f(ra[1], rb[1])
    if t is Select:
        ra, rb = _relax1(e.true_value, x, lo, hi, ana), _relax1(e.false_value, x, lo, hi, ana)
        if ra is None or rb is None:
            return None
        return min_expr(ra[0], rb[0]), max_expr(ra[1], rb[1])
    if t is Cast and e.dtype.is_integer() and e.value.dtype.is_integer() and e.dtype.bits >= e.value.dtype.bits:
        r = _relax1(e.value, x, lo, hi, ana)
        return None if r is None else (Cast(e.dtype, r[0]), Cast(e.dtype, r[1]))
    return None


def relax_range(lo, hi, loops, ana):
    """Relax the inclusive pair (lo, hi) over loops [(var, min, extent)], outermost first: the
    loops are eliminated innermost first, so a loop's range may use the loops outside it."""
    for var, vmin, ext in reversed(loops):
        if lo is not None and uses_var(lo, var):
            vmax = ana.simplify(vmin + ext - 1)
            r = _relax1(lo, var, vmin, vmax, ana)
            lo = None if r is None else ana.simplify(r[0])
        if hi is not None and uses_var(hi, var):
            vmax = ana.simplify(vmin + ext - 1)
            r = _relax1(hi, var, vmin, vmax, ana)
            hi = None if r is None else ana.simplify(r[1])
    return lo, hi


def relax(expr, loops, ana):
    """(lo, hi) of an index expression over the loops [(var, min, extent)]; a side is None when
    it cannot be bounded."""
    e = ana.simplify(expr)
    return relax_range(e, e, loops, ana)


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
            if all(a is b for a, b in zip(indices, n.indices)):
                return n
            return BufferLoad(n.buffer, indices)
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


def accesses(stmt, buffer=None) -> list:
    """(kind, buffer, indices) of every load ("read") and store ("write") in stmt, in order, not
    entering nested blocks' bodies twice (a block's init is visited)."""
    out = []

    class _V(Visitor):
        def visit_BufferLoad(self, n):
            for i in n.indices:
                self.visit(i)
            if buffer is None or n.buffer is buffer:
                out.append(("read", n.buffer, n.indices))

        def visit_BufferStore(self, n):
            self.visit(n.value)
            for i in n.indices:
                self.visit(i)
            if buffer is None or n.buffer is buffer:
                out.append(("write", n.buffer, n.indices))

    _V().visit(stmt)
    return out


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


# ---------------------------------------------------------------------------------------------
# several edits of one function at once
# ---------------------------------------------------------------------------------------------
def edit(stmt, edits: dict):
    """stmt with edits applied bottom-up: edits maps id(original statement) to a function taking
    that statement rebuilt with its own edited children and returning its replacement (None
    deletes it). Only statements are entered (expressions are left alone)."""

    def go(s):
        t = type(s)
        new = s
        if t is SeqStmt:
            items = [go(x) for x in s.seq]
            if any(a is not b for a, b in zip(items, s.seq)):
                new = seq(*[x for x in items if x is not None])
        elif t is For or t is LetStmt or t is Allocate or t is AttrStmt or t is AssertStmt:
            body = go(s.body)
            if body is not s.body:
                new = s.replace(body=body if body is not None else NOP)
        elif t is BlockRealize:
            blk = go(s.block)
            if blk is not s.block:
                new = s.replace(block=blk)
        elif t is Block:
            body = go(s.body)
            init = go(s.init) if s.init is not None else None
            if body is not s.body or init is not s.init:
                new = s.replace(body=body if body is not None else NOP, init=init)
        elif t is IfThenElse:
            then = go(s.then_case)
            other = go(s.else_case) if s.else_case is not None else None
            if then is not s.then_case or other is not s.else_case:
                new = IfThenElse(s.condition, then if then is not None else NOP, other)
        fn = edits.get(id(s))
        return fn(new) if fn is not None else new

    out = go(stmt)

    return out if out is not None else _NOP


__all__ = ["edit", "relax", "relax_range", "region_bounds", "union_bounds", "block_box", "bindings",
           "solve_linear", "ceildiv", "removal_root", "loops_in", "body_items", "item_position",
           "insert_into", "fresh_block_name", "buffer_names", "BufferReplacer",
           "point_region", "accesses", "dedup_regions", "analyzer_for", "loop_triples", "is_one"]
