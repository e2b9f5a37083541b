"""simplify: arithmetic simplification of every expression of a PrimFunc, with dead control flow removed.

The walk carries an Analyzer: a For binds its loop variable to [min, min + extent), a Block its
iteration variables to their domains (narrowed by the bindings' ranges), a LetStmt its variable,
an IfThenElse its condition (then-branch) or its negation (else-branch). With that knowledge:
an `if` whose condition is provably true or false becomes its branch; a For of extent 1 becomes
its body with the variable replaced by min (except thread-bound or annotated loops); a For with a
constant extent <= 0 disappears; `Evaluate(0)` no-ops leave sequences. Stores are never dropped
and statements never reordered; block structure is left as it is.
"""
from __future__ import annotations

from ...arith import Analyzer
from ...arith.simplifier import as_bool_const
from ...ir import (Allocate, AssertStmt, AttrStmt, Block, BlockRealize, BufferRegion, BufferStore,
                   Evaluate, FloatImm, For, ForKind, IfThenElse, IntImm, IterVar, LetStmt, Not, PrimExpr,
                   PrimFunc, Range, SeqStmt, SizeVar, Stmt, Var, Visitor, seq)
from ...ir.stmt import NOP
from ...errors import TesseraError


def simplify(func: PrimFunc) -> PrimFunc:
    """`func` with every expression simplified and provably dead or trivial control flow removed."""
    if not isinstance(func, PrimFunc):
        raise TesseraError(f"simplify takes a PrimFunc, got {type(func).__name__}")
    ana = Analyzer()
    _bind_shape_vars(ana, func)
    body = _StmtSimplifier(ana).visit(func.body)
    return func if body is func.body else func.with_body(body)


def simplify_stmt(stmt: Stmt, analyzer: Analyzer | None = None) -> Stmt:
    """One statement simplified with what `analyzer` knows (a fresh Analyzer by default)."""
    if not isinstance(stmt, Stmt):
        raise TesseraError(f"simplify_stmt takes a statement, got {type(stmt).__name__}")
    return _StmtSimplifier(analyzer or Analyzer()).visit(stmt)


def _bind_shape_vars(ana: Analyzer, func: PrimFunc):
    """Symbolic extents in parameter shapes are >= 0."""
    buffers = list(func.buffer_params)
    flat = func.attrs.get("flat_params") if func.attrs else None
    if flat:
        buffers += [b for b in flat if b is not None]
    seen = set()
    for b in buffers:
        for s in b.shape:
            if type(s) is Var and s not in seen and s.dtype.is_int():
                seen.add(s)
                ana.tighten(s, (0, float("inf")))


def _is_nop(s) -> bool:
    return type(s) is Evaluate and type(s.value) is IntImm


class _HasCall(Visitor):
    def __init__(self):
        super().__init__()
        self.found = False

    def visit_Call(self, node):
        self.found = True


class _UsesVar(Visitor):
    visit_buffers = True

    def __init__(self, var):
        super().__init__()
        self.var, self.found = var, False

    def visit_Var(self, v):
        if v is self.var:
            self.found = True


class _StmtSimplifier:
    """Walks statements with an Analyzer; expressions go through the Analyzer's simplifier."""

    def __init__(self, ana: Analyzer):
        self.ana = ana
        self.expr = ana._simp.visit
        self.dispatch = {
            BufferStore: self.visit_BufferStore, For: self.visit_For, SeqStmt: self.visit_SeqStmt,
            IfThenElse: self.visit_IfThenElse, LetStmt: self.visit_LetStmt,
            Evaluate: self.visit_Evaluate, Allocate: self.visit_Allocate,
            AttrStmt: self.visit_AttrStmt, AssertStmt: self.visit_AssertStmt,
            BlockRealize: self.visit_BlockRealize, Block: self.visit_Block,
        }

    def visit(self, s):
        fn = self.dispatch.get(type(s))
        return fn(s) if fn is not None else self.generic(s)

    def exprs(self, xs):
        out = tuple(self.expr(x) for x in xs)
        return xs if all(a is b for a, b in zip(out, xs)) else out

    def generic(self, s):
        """Statements without a rule: simplify expression fields, visit statement fields."""
        changes = {}
        for f in s._fields:
            v = getattr(s, f)
            if isinstance(v, PrimExpr):
                nv = self.expr(v)
            elif isinstance(v, Stmt):
                nv = self.visit(v)
            else:
                continue
            if nv is not v:
                changes[f] = nv
        return s.replace(**changes) if changes else s

    # statements -------------------------------------------------------------------------------
    def visit_BufferStore(self, s):
        value = self.expr(s.value)
        idx = self.exprs(s.indices)
        if value is s.value and idx is s.indices:
            return s
        return s.replace(value=value, indices=idx)

    def visit_Evaluate(self, s):
        v = self.expr(s.value)
        return s if v is s.value else Evaluate(v)

    def visit_SeqStmt(self, s):
        items = [self.visit(x) for x in s.seq]
        if all(a is b and not _is_nop(a) for a, b in zip(items, s.seq)):
            return s
        return seq(*items)

    def visit_For(self, s):
        ana = self.ana
        mn, ext = self.expr(s.min), self.expr(s.extent)
        if type(ext) is IntImm:
            if ext.value <= 0:
                return NOP
            if ext.value == 1 and s.kind != ForKind.THREAD_BINDING and not s.annotations:
                with ana.scope():
                    ana.bind(s.loop_var, mn if mn.dtype == s.loop_var.dtype else mn.astype(s.loop_var.dtype))
                    return self.visit(s.body)
        with ana.bind_scope(s.loop_var, Range.from_min_extent(mn, ext)):
            body = self.visit(s.body)
        if _is_nop(body):
            return NOP
        if body is s.body and mn is s.min and ext is s.extent:
            return s
        return s.replace(min=mn, extent=ext, body=body)

    def visit_IfThenElse(self, s):
        ana = self.ana
        c = self.expr(s.condition)
        cv = as_bool_const(c)
        if cv is True:
            return self.visit(s.then_case)
        if cv is False:
            return self.visit(s.else_case) if s.else_case is not None else NOP
        with ana.constraint_scope(c):
            then = self.visit(s.then_case)
        other = None
        if s.else_case is not None:
            with ana.constraint_scope(Not(c)):
                other = self.visit(s.else_case)
            if _is_nop(other):
                other = None
        if _is_nop(then):
            if other is None:
                h = _HasCall()
                h.visit(c)
                if not h.found:
                    return NOP
            else:
                return IfThenElse(self.expr(Not(c)), other, None)
        if c is s.condition and then is s.then_case and other is s.else_case:
            return s
        return IfThenElse(c, then, other)

    def visit_LetStmt(self, s):
        ana = self.ana
        v = self.expr(s.value)
        if type(v) in (IntImm, FloatImm, Var, SizeVar):
            with ana.scope():
                ana.bind(s.var, v)
                body = self.visit(s.body)
            u = _UsesVar(s.var)
            u.visit(body)
            if not u.found:
                return body
        else:
            with ana.scope():
                if (v.dtype.is_integer() or v.dtype.is_bool()) and v.dtype.lanes == 1:
                    ana.bind(s.var, ana._simp.bound(v))
                body = self.visit(s.body)
        if v is s.value and body is s.body:
            return s
        return s.replace(value=v, body=body)

    def visit_Allocate(self, s):
        body = self.visit(s.body)
        return s if body is s.body else s.replace(body=body)

    def visit_AttrStmt(self, s):
        ana = self.ana
        v = self.expr(s.value)
        if s.attr_key == "thread_extent" and isinstance(s.node, IterVar) and v.dtype.is_integer():
            with ana.bind_scope(s.node.var, Range.from_min_extent(IntImm(v.dtype, 0), v)):
                body = self.visit(s.body)
        else:
            body = self.visit(s.body)
        if v is s.value and body is s.body:
            return s
        return s.replace(value=v, body=body)

    def visit_AssertStmt(self, s):
        c = self.expr(s.condition)
        if as_bool_const(c) is True:
            return self.visit(s.body)
        with self.ana.constraint_scope(c):
            body = self.visit(s.body)
        if c is s.condition and body is s.body:
            return s
        return s.replace(condition=c, body=body)

    # blocks -----------------------------------------------------------------------------------
    def visit_BlockRealize(self, s):
        values = self.exprs(s.iter_values)
        pred = self.expr(s.predicate)
        simp = self.ana._simp
        bounds = [simp.bound(v) if v.dtype.is_integer() and v.dtype.lanes == 1 else None for v in values]
        block = self._block(s.block, bounds)
        if values is s.iter_values and pred is s.predicate and block is s.block:
            return s
        return s.replace(iter_values=values, predicate=pred, block=block)

    def visit_Block(self, s):
        return self._block(s, [None] * len(s.iter_vars))

    def _range(self, r):
        mn, ext = self.expr(r.min), self.expr(r.extent)
        return r if (mn is r.min and ext is r.extent) else Range.from_min_extent(mn, ext)

    def _region(self, br):
        rs = tuple(self._range(r) for r in br.region)
        return br if all(a is b for a, b in zip(rs, br.region)) else br.replace(region=rs)

    def _block(self, b, bounds):
        ana = self.ana
        with ana.scope():
            ivs = []
            for iv, vb in zip(b.iter_vars, bounds):
                dom = self._range(iv.dom) if iv.dom is not None else None
                if dom is not None:
                    ana.bind(iv.var, dom)
                if vb is not None:
                    ana.tighten(iv.var, vb)
                ivs.append(iv if dom is iv.dom else iv.replace(dom=dom))
            reads = tuple(self._region(r) for r in b.reads)
            writes = tuple(self._region(r) for r in b.writes)
            init = self.visit(b.init) if b.init is not None else None
            body = self.visit(b.body)
            mbs = tuple(self._match(m) for m in b.match_buffers)
        changes = {}
        if any(a is not c for a, c in zip(ivs, b.iter_vars)):
            changes["iter_vars"] = tuple(ivs)
        for name, new, old in (("reads", reads, b.reads), ("writes", writes, b.writes),
                               ("match_buffers", mbs, b.match_buffers)):
            if any(x is not y for x, y in zip(new, old)):
                changes[name] = new
        if init is not b.init:
            changes["init"] = init
        if body is not b.body:
            changes["body"] = body
        return b.replace(**changes) if changes else b

    def _match(self, m):
        """A match_buffers entry: simplify the ranges of whatever BufferRegion it holds."""
        if isinstance(m, BufferRegion):
            return self._region(m)
        changes = {}
        for f in getattr(m, "_fields", ()):
            v = getattr(m, f)
            if isinstance(v, BufferRegion):
                nv = self._region(v)
                if nv is not v:
                    changes[f] = nv
        return m.replace(**changes) if changes else m


__all__ = ["simplify", "simplify_stmt"]
