"""Several edits of one function's statements at once, applied bottom-up in one walk (`edit`)."""
from __future__ import annotations

from ...ir import Allocate, AssertStmt, AttrStmt, Block, BlockRealize, For, IfThenElse, LetStmt, SeqStmt, seq
from ...ir.stmt import NOP


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
    return out if out is not None else NOP


__all__ = ["edit"]
