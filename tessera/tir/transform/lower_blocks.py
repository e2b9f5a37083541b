"""lower_blocks: replace TensorIR blocks by plain loops, stores, conditions and allocations.

A block's iteration variables are replaced by their bindings, a non-trivial predicate becomes an
IfThenElse, `alloc_buffers` become Allocate statements around the block body, and the reduction
`init` runs where TVM's semantics put it: when every reduce iteration variable is at its domain
minimum. When the loops carrying the reduction are the innermost part of a perfect nest around
the block (and provably reach the minimum exactly on their first iteration) the init is hoisted
in front of them; otherwise it stays in the body behind an `if (all reduce values at min)` guard.

A tensorized block (its body an intrinsic call reaching buffers through `T.address_of`) keeps its
read and write regions as `AttrStmt(buffer, ACCESS_REGION, tsr.region(mins..., extents...))`
around its body: the call shows one element of each buffer, the region what it really touches,
which compact_buffer_allocation sizes allocations by (and then removes).
"""
from __future__ import annotations

from ...errors import TesseraError
from ...ir import (EQ, Add, Allocate, AssertStmt, AttrStmt, Block, BlockRealize, BufferStore, Call, Cast,
                   Evaluate, FloorDiv, FloorMod, For, IfThenElse, IntImm, LetStmt, Mul, Mutator, PrimExpr,
                   PrimFunc, SeqStmt, Sub, Var, Visitor, all_of, seq, structural_equal, substitute)


ACCESS_REGION = "tsr.access_region"


def lower_blocks(func: PrimFunc) -> PrimFunc:
    """`func` with every Block/BlockRealize replaced by the loop-level statements it stands for."""
    body = _BlockLowerer().stmt(func.body, ())
    return func if body is func.body else func.with_body(body)


class _Sub(Mutator):
    """Substitutes the iteration variables of the enclosing blocks (vmap changes with the scope)."""

    def __init__(self):
        super().__init__()
        self.vmap = {}

    def visit_Var(self, v):
        return self.vmap.get(v, v)


class _VarSet(Visitor):
    def __init__(self):
        super().__init__()
        self.found = set()

    def visit_Var(self, v):
        self.found.add(v)


def _vars(exprs) -> set:
    c = _VarSet()
    for e in exprs:
        c.visit(e)
    return c.found


def _is_true(e) -> bool:
    return isinstance(e, IntImm) and e.dtype.is_bool() and e.value == 1


class _BlockLowerer:
    """Walks statements; `chain` holds (loop_var, min, extent, kind) of the perfect loop nest directly
    around the statement being lowered (innermost last), reset by anything but a For."""

    def __init__(self):
        self.sub = _Sub()
        self.hoist = None  # (loop_var, init stmt) waiting for the For of that loop_var

    def expr(self, e):
        return self.sub.visit(e) if self.sub.vmap else e

    def stmt(self, s, chain):
        t = type(s)
        if t is For:
            lo, ext = self.expr(s.min), self.expr(s.extent)
            body = self.stmt(s.body, chain + ((s.loop_var, lo, ext, s.kind),))
            out = s if (body is s.body and lo is s.min and ext is s.extent) else \
                s.replace(min=lo, extent=ext, body=body)
            if self.hoist is not None and self.hoist[0] is s.loop_var:
                init, self.hoist = self.hoist[1], None
                return seq(init, out)
            return out
        if t is BlockRealize:
            return self.realize(s, chain)
        if t is SeqStmt:
            items = [self.stmt(x, ()) for x in s.seq]
            return s if all(a is b for a, b in zip(items, s.seq)) else seq(*items)
        if t is BufferStore or t is Evaluate:
            return self.expr(s)
        if t is IfThenElse:
            cond = self.expr(s.condition)
            then = self.stmt(s.then_case, ())
            other = self.stmt(s.else_case, ()) if s.else_case is not None else None
            if cond is s.condition and then is s.then_case and other is s.else_case:
                return s
            return IfThenElse(cond, then, other)
        if t is LetStmt:
            value, body = self.expr(s.value), self.stmt(s.body, ())
            return s if value is s.value and body is s.body else s.replace(value=value, body=body)
        if t is Allocate:
            body = self.stmt(s.body, ())
            return s if body is s.body else s.replace(body=body)
        if t is AttrStmt or t is AssertStmt:
            changes = {"body": self.stmt(s.body, ())}
            if t is AttrStmt:
                changes["value"] = self.expr(s.value)
                if isinstance(s.node, PrimExpr):
                    changes["node"] = self.expr(s.node)
            else:
                changes["condition"] = self.expr(s.condition)
            if all(v is getattr(s, k) for k, v in changes.items()):
                return s
            return s.replace(**changes)
        if t is Block:
            raise TesseraError(f"lower_blocks: block {s.name_hint!r} appears without a BlockRealize; "
                               f"every Block must be wrapped in a BlockRealize binding its iter vars")
        raise TesseraError(f"lower_blocks: unexpected statement {t.__name__}")

    def realize(self, r: BlockRealize, chain):
        block = r.block
        if block.match_buffers:
            raise TesseraError(f"lower_blocks: block {block.name_hint!r} has match_buffers, which "
                               f"tessera cannot lower; inline or remove them first")
        values = [self.expr(v) for v in r.iter_values]
        pred = self.expr(r.predicate)
        reduce = [(iv, v) for iv, v in zip(block.iter_vars, values) if iv.iter_type == "reduce"]
        mins = [self.expr(iv.dom.min) for iv, _ in reduce]

        vmap = self.sub.vmap
        for iv, v in zip(block.iter_vars, values):
            vmap[iv.var] = v
        try:
            body = self.stmt(block.body, ())
            if _is_tensorized(block.body):
                for region in reversed(block.reads + block.writes):
                    value = Call("handle", "tsr.region", [self.expr(r.min) for r in region.region]
                                 + [self.expr(r.extent) for r in region.region])
                    body = AttrStmt(region.buffer, ACCESS_REGION, value, body)
            init = None
            if block.init is not None:
                for (iv, _), m in zip(reduce, mins):  # init runs with reduce vars at their minimum
                    vmap[iv.var] = m
                init = self.stmt(block.init, ())
        finally:
            for iv in block.iter_vars:
                vmap.pop(iv.var, None)

        depth = None
        if init is not None:
            depth = self.hoist_depth(block, values, reduce, mins, chain, init)
            if depth is None:
                conds = [EQ(v, m) for (_, v), m in zip(reduce, mins)
                         if not (isinstance(v, IntImm) and isinstance(m, IntImm) and v.value == m.value)]
                body = seq(IfThenElse(all_of(*conds), init) if conds else init, body)
            elif depth == 0:
                body = seq(init, body)
        for buf in reversed(block.alloc_buffers):
            body = Allocate(buf, body)
        if not _is_true(pred):
            body = IfThenElse(pred, body)
        if depth:
            seg = chain[len(chain) - depth:]
            if not _is_true(pred):
                first = substitute(pred, {var: lo for var, lo, _, _ in seg})
                init = IfThenElse(first, init)
            self.hoist = (seg[0][0], init)
        return body

    def hoist_depth(self, block, values, reduce, mins, chain, init):
        """How many innermost loops of `chain` carry only the reduction, when the init can be placed
        in front of them (0: directly before the body); None when it must be guarded instead."""
        if block.alloc_buffers and _uses_buffers(init, block.alloc_buffers):
            return None
        red_values = [v for _, v in reduce]
        spatial_vars = _vars(v for iv, v in zip(block.iter_vars, values) if iv.iter_type != "reduce")
        reduce_vars = _vars(red_values)
        depth = 0
        for var, _, _, kind in reversed(chain):  # init is never hoisted out of a thread-bound loop
            if var in reduce_vars and var not in spatial_vars and kind != "thread_binding":
                depth += 1
            else:
                break
        seg = chain[len(chain) - depth:]
        return depth if _at_min_only_first(red_values, mins, seg) else None


def _is_tensorized(body) -> bool:
    """A block body that tensorize made: the intrinsic's attributes around its call."""
    while type(body) is AttrStmt:
        if body.attr_key == "tensor_intrin":
            return True
        body = body.body
    return False


class _BufferUse(Visitor):
    def __init__(self, buffers):
        super().__init__()
        self.buffers, self.found = set(buffers), False

    def visit_BufferLoad(self, n):
        self.found = self.found or n.buffer in self.buffers
        self.generic_visit(n)

    visit_BufferStore = visit_BufferLoad


def _uses_buffers(stmt, buffers) -> bool:
    v = _BufferUse(buffers)
    v.visit(stmt)
    return v.found


# ---------------------------------------------------------------------------------------------
# When are the reduce bindings at their minimum exactly on the first iteration of the loops?
# Each binding minus its minimum is written as a sum of `scale * ((v - min_v) // lower % extent)`
# terms over the loop vars (the split/fuse shapes schedules produce), with positive scales. All
# terms are >= 0, so every binding is at its minimum iff every term is 0; the terms over one loop
# var then force it to its minimum when their (lower, extent) digits cover its whole extent.
# ---------------------------------------------------------------------------------------------
class _NotAffine(Exception):
    pass


def _at_min_only_first(values, mins, seg) -> bool:
    loops = {var: (lo, ext) for var, lo, ext, _ in seg}
    digits = {var: [] for var in loops}
    try:
        for value, m in zip(values, mins):
            offset, terms = _split_sum(value, loops)
            if not isinstance(m, IntImm) or offset != m.value:
                return False
            for var, lower, extent, scale in terms:
                if scale <= 0:
                    return False
                digits[var].append((lower, extent))
    except _NotAffine:
        return False
    for var, (_, ext) in loops.items():
        covered = 1  # every digit below `covered` is known to be zero
        for lower, extent in sorted(digits[var], key=lambda d: d[0]):
            if not isinstance(extent, int):  # a symbolic extent: only the whole variable counts
                if lower == 1 and (extent is ext or structural_equal(extent, ext)):
                    covered = None
                    break
                continue
            span = lower * extent
            if covered % lower == 0 and span % covered == 0 and span > covered:
                covered = span
        if covered is not None and not (isinstance(ext, IntImm) and covered >= ext.value):
            return False
    return True


def _split_sum(e, loops):
    """(constant offset, [(var, lower, extent, scale)]) with e == offset + sum(scale * digit)."""
    t = type(e)
    if t is IntImm:
        return e.value, []
    if isinstance(e, Var):
        if e not in loops:
            raise _NotAffine
        lo, ext = loops[e]
        if not isinstance(lo, IntImm):
            raise _NotAffine
        return lo.value, [(e, 1, ext.value if isinstance(ext, IntImm) else ext, 1)]
    if t is Add:
        (oa, ta), (ob, tb) = _split_sum(e.a, loops), _split_sum(e.b, loops)
        return oa + ob, ta + tb
    if t is Sub and isinstance(e.b, IntImm):
        oa, ta = _split_sum(e.a, loops)
        return oa - e.b.value, ta
    if t is Mul:
        a, b = (e.a, e.b) if isinstance(e.b, IntImm) else (e.b, e.a)
        if not isinstance(b, IntImm):
            raise _NotAffine
        c = b.value
        oa, ta = _split_sum(a, loops)
        return oa * c, [(v, lo, ext, s * c) for v, lo, ext, s in ta]
    if (t is FloorDiv or t is FloorMod) and isinstance(e.b, IntImm) and e.b.value > 0:
        c = e.b.value
        oa, ta = _split_sum(e.a, loops)
        if oa != 0 or len(ta) != 1 or ta[0][3] != 1 or not isinstance(ta[0][2], int):
            raise _NotAffine
        var, lower, extent, _ = ta[0]
        if t is FloorDiv:
            return 0, [(var, lower * c, -(-extent // c), 1)]
        if extent <= c:
            return 0, ta
        if extent % c:
            raise _NotAffine
        return 0, [(var, lower, c, 1)]
    if t is Cast and e.dtype.is_integer() and e.value.dtype.is_integer() and \
            e.dtype.bits >= e.value.dtype.bits:
        return _split_sum(e.value, loops)
    raise _NotAffine
