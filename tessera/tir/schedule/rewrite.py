"""Rewriting loop nests: substitute loop variables and keep block bindings simple.

`LoopRewriter(index, anchor).rewrite(stmt, vmap, predicate)` replaces variables by expressions in
everything under `stmt` that can mention a loop variable: loop bounds, block bindings and
predicates, and statements outside blocks (through opaque blocks too; a non-opaque block's body
sees loops only through its iterators, so it is not entered). Rewritten bindings and predicates
are simplified by an Analyzer that knows the range of every enclosing loop (those above `anchor`,
the new loops bound with `bind_loop`, the loops inside `stmt` as it walks), which is what turns
split-then-fuse indices back into `i` and keeps `i_0 * 8 + i_1` readable. An optional predicate
is and-ed onto the blocks directly under `stmt` (TVM's BlockPredicateAppender).
"""
from __future__ import annotations

from ...ir import (Allocate, AssertStmt, AttrStmt, BlockRealize, BufferStore, Evaluate, For, IfThenElse, IntImm,
                   LetStmt, PrimExpr, Range, SeqStmt, seq)
from ...ir.functor import Mutator
from ..analysis import shape_var_analyzer, uses_vars


class _Subst(Mutator):
    __slots__ = ("vmap",)

    def __init__(self, vmap):
        super().__init__()
        self.vmap = vmap

    def visit_Var(self, v):
        return self.vmap.get(v, v)


def _is_true(e) -> bool:
    return type(e) is IntImm and e.dtype.is_bool() and e.value == 1


class LoopRewriter:
    """Substitution + binding simplification under one place of a function (see module doc)."""

    def __init__(self, idx, anchor):
        """idx: the FuncIndex; anchor: the statement being rewritten (the loops above it are bound)."""
        self.ana = shape_var_analyzer(idx.func)
        self.vars, self.sub, self.predicate = set(), None, None
        for loop in idx.loops_above(anchor):
            self.bind_loop(loop.loop_var, loop.min, loop.extent)

    def bind_loop(self, var, lo, extent):
        self.ana.bind(var, Range.from_min_extent(lo, extent))

    def simplify(self, e):
        return self.ana.simplify(e)

    def can_prove(self, cond) -> bool:
        return self.ana.can_prove(cond)

    def rewrite(self, stmt, vmap: dict, predicate=None):
        """stmt with vmap applied (see module doc); `predicate` is and-ed onto its child blocks."""
        self.vars = set(vmap)
        self.sub = _Subst(vmap)
        self.predicate = predicate
        return self._stmt(stmt, True)

    def _expr(self, e):
        if not self.vars or not uses_vars(e, self.vars):
            return e
        return self.ana.simplify(self.sub.visit(e))

    def _stmt(self, s, top):
        t = type(s)
        if t is For:
            lo, ext = self._expr(s.min), self._expr(s.extent)
            with self.ana.scope():
                self.bind_loop(s.loop_var, lo, ext)
                body = self._stmt(s.body, top)
            if lo is s.min and ext is s.extent and body is s.body:
                return s
            return s.replace(min=lo, extent=ext, body=body)
        if t is BlockRealize:
            values = tuple(self._expr(v) for v in s.iter_values)
            pred = self._expr(s.predicate)
            if top and self.predicate is not None:
                pred = self.predicate if _is_true(pred) else self.ana.simplify(pred & self.predicate)
            block = s.block
            if not block.iter_vars:  # opaque: its body may use the loop variables directly
                with self.ana.scope():
                    body = self._stmt(block.body, False)
                if body is not block.body:
                    block = block.replace(body=body)
            if block is s.block and pred is s.predicate and all(a is b for a, b in zip(values, s.iter_values)):
                return s
            return s.replace(iter_values=values, predicate=pred, block=block)
        if t is SeqStmt:
            items = [self._stmt(x, top) for x in s.seq]
            return s if all(a is b for a, b in zip(items, s.seq)) else seq(*items)
        if t is IfThenElse:
            cond = self._expr(s.condition)
            then = self._stmt(s.then_case, top)
            other = self._stmt(s.else_case, top) if s.else_case is not None else None
            if cond is s.condition and then is s.then_case and other is s.else_case:
                return s
            return IfThenElse(cond, then, other)
        if t is LetStmt:
            value = self._expr(s.value)
            body = self._stmt(s.body, top)
            return s if value is s.value and body is s.body else s.replace(value=value, body=body)
        if t is Allocate or t is AttrStmt or t is AssertStmt:
            changes = {"body": self._stmt(s.body, top)}
            if t is AttrStmt:
                changes["value"] = self._expr(s.value)
                if isinstance(s.node, PrimExpr):
                    changes["node"] = self._expr(s.node)
            elif t is AssertStmt:
                changes["condition"] = self._expr(s.condition)
            if all(v is getattr(s, k) for k, v in changes.items()):
                return s
            return s.replace(**changes)
        if t is BufferStore or t is Evaluate:
            if not self.vars or not uses_vars(s, self.vars):
                return s
            return self.sub.visit(s)
        return s


__all__ = ["LoopRewriter"]
