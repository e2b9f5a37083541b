"""StmtMutator: a rebuilding walker over statements only (expressions are not entered).

Loop-level passes (vectorize, unroll) only rewrite statements; skipping the expression trees
keeps them one cheap walk over the statement skeleton.
"""
from __future__ import annotations

from ...ir import SeqStmt, Stmt, seq
from ...ir.functor import Mutator


class StmtMutator(Mutator):
    """Override visit_<Stmt class>; generic_visit rebuilds a statement whose child statements changed."""

    def generic_visit(self, node):
        if type(node) is SeqStmt:
            items = [self.visit(s) for s in node.seq]
            if all(a is b for a, b in zip(items, node.seq)):
                return node
            return seq(*items)
        changes = None
        for f in node._fields:
            v = getattr(node, f)
            if isinstance(v, Stmt):
                nv = self.visit(v)
                if nv is not v:
                    if changes is None:
                        changes = {}
                    changes[f] = nv
        return node if changes is None else node.replace(**changes)
