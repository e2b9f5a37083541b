"""What a piece of IR mentions: variables (`uses_vars`), buffer loads and stores (`accesses`)."""
from __future__ import annotations

from ...ir import Buffer, FloatImm, IntImm, StringImm, Var
from ...ir.functor import Visitor
from ...ir.node import Node

_LEAVES = (IntImm, FloatImm, StringImm)


def uses_vars(expr, vs) -> bool:
    """Whether expr mentions any variable in the set vs (buffers' shapes are not entered)."""
    stack = [expr]
    pop, push = stack.pop, stack.append
    while stack:
        x = pop()
        if isinstance(x, Var):
            if x in vs:
                return True
            continue
        if type(x) in _LEAVES:
            continue
        for f in x._fields:
            v = getattr(x, f)
            if isinstance(v, Node):
                if not isinstance(v, Buffer):
                    push(v)
            elif type(v) is tuple:
                for y in v:
                    if isinstance(y, Node) and not isinstance(y, Buffer):
                        push(y)
    return False


def uses_var(expr, var) -> bool:
    return uses_vars(expr, {var})


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


__all__ = ["uses_vars", "uses_var", "accesses"]
