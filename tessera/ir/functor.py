"""Generic traversal over `_fields`: a visitor, a rebuilding mutator, substitute, post_order_visit.

A subclass handles the node types it cares about with `visit_<ClassName>(self, node)`; every other
node is walked (or rebuilt only if a child changed) generically, so passes stay short.
"""
from __future__ import annotations

from types import MappingProxyType

from .buffer import Buffer
from .dtype import bool_
from .expr import (
    And,
    BinaryOp,
    BufferLoad,
    Cast,
    CmpOp,
    Let,
    Not,
    PrimExpr,
    Select,
    Var,
)
from .node import Node, new_node, set_field


def children(node: Node):
    for f in node._fields:
        v = getattr(node, f)
        if isinstance(v, Node):
            yield v
        elif isinstance(v, tuple):
            for x in v:
                if isinstance(x, Node):
                    yield x


class _Dispatcher:
    """Calls visit_<ClassName> for a node (the nearest base class's, else generic_visit), cached per class."""

    def __init__(self):
        self._dispatch = {}

    def visit(self, node):
        cls = type(node)
        fn = self._dispatch.get(cls)
        if fn is None:
            fn = self._lookup(cls)
        return fn(node)

    def _lookup(self, cls):
        for klass in cls.__mro__:
            fn = getattr(self, "visit_" + klass.__name__, None)
            if fn is not None:
                break
        else:
            fn = self.generic_visit
        self._dispatch[cls] = fn
        return fn


class Visitor(_Dispatcher):
    """Walks every node once per occurrence; override visit_<ClassName> to act (call generic_visit to descend)."""

    visit_buffers = False  # descend into Buffer fields (shapes)?

    def generic_visit(self, node):
        if isinstance(node, Buffer) and not self.visit_buffers:
            return
        for f in node._fields:
            v = getattr(node, f)
            if isinstance(v, Node):
                self.visit(v)
            elif isinstance(v, tuple):
                for x in v:
                    if isinstance(x, Node):
                        self.visit(x)


class Mutator(_Dispatcher):
    """Rebuilds the tree bottom-up; nodes whose children did not change are returned as they are."""

    mutate_buffers = False  # rewrite Buffers (their shapes) as well?

    def generic_visit(self, node):
        if isinstance(node, Buffer) and not self.mutate_buffers:
            return node
        changed = None
        for f in node._fields:
            v = getattr(node, f)
            if isinstance(v, Node):
                nv = self.visit(v)
            elif isinstance(v, tuple) and v and any(isinstance(x, Node) for x in v):
                items = [self.visit(x) if isinstance(x, Node) else x for x in v]
                nv = v if all(a is b for a, b in zip(items, v)) else tuple(items)
            else:
                continue
            if nv is not v:
                if f in node._def_fields:
                    nv = _keep_definitions(v, nv)
                    if nv is v:
                        continue
                if changed is None:
                    changed = {}
                changed[f] = nv
        if changed is None:
            return node
        new = new_node(type(node))
        for f in node._fields:
            set_field(new, f, changed[f] if f in changed else getattr(node, f))
        return _fix_dtype(new)


def load_with_indices(load: BufferLoad, indices) -> BufferLoad:
    """`load` reading at `indices`: the load itself when they are its own (what a mutator returns when
    nothing under it changed), else a new load of its buffer."""
    if all(a is b for a, b in zip(indices, load.indices)):
        return load
    return BufferLoad(load.buffer, indices)


def _keep_definitions(old, new):
    """A defining Var may be renamed to another Var, never replaced by an expression (as TVM's
    substitute: `i -> 0` rewrites the uses in a loop's body, the loop still defines `i`)."""
    if isinstance(old, Var):
        return new if isinstance(new, Var) else old
    if isinstance(old, tuple):
        items = tuple(o if isinstance(o, Var) and not isinstance(n, Var) else n for o, n in zip(old, new))
        return old if all(a is b for a, b in zip(items, old)) else items
    return new


def _fix_dtype(node):
    """Recompute the dtype of a rebuilt expression whose operands changed lanes or types."""
    if isinstance(node, PrimExpr) and hasattr(node, "a") and "dtype" in node._fields:
        a = node.a
        if isinstance(node, BinaryOp):
            if node.a.dtype != node.b.dtype:
                return type(node)(node.a, node.b)
            set_field(node, "dtype", a.dtype)
        elif isinstance(node, CmpOp):
            if node.a.dtype != node.b.dtype:
                return type(node)(node.a, node.b)
            set_field(node, "dtype", bool_.with_lanes(a.dtype.lanes))
        elif isinstance(node, (And, Not)):
            set_field(node, "dtype", a.dtype)
    else:
        if isinstance(node, BufferLoad):
            lanes = max([i.dtype.lanes for i in node.indices] + [1])
            set_field(node, "dtype", node.buffer.dtype.with_lanes(lanes * node.buffer.dtype.lanes))
        elif isinstance(node, Select):
            if node.true_value.dtype != node.false_value.dtype:
                return Select(node.condition, node.true_value, node.false_value)
            set_field(node, "dtype", node.true_value.dtype)
        elif isinstance(node, Let):
            set_field(node, "dtype", node.body.dtype)
        elif isinstance(node, Cast) and node.value.dtype.lanes != node.dtype.lanes:
            set_field(node, "dtype", node.dtype.with_lanes(node.value.dtype.lanes))
    return node


class _Substituter(Mutator):
    def __init__(self, vmap):
        super().__init__()
        self.vmap = vmap

    def visit_Var(self, v):
        return self.vmap.get(v, v)


def substitute(node, vmap):
    """Replace variables by expressions (vmap: Var -> PrimExpr) everywhere in node."""
    if not vmap:
        return node
    return _Substituter(vmap).visit(node)


def depth(node) -> int:
    """Levels of node's deepest path to a leaf (a leaf is 1; Buffers not entered), walked with an
    explicit stack: any depth is measured, where the recursive passes stop at Python's recursion limit."""
    levels: dict = {}
    stack = [(node, False)]
    while stack:
        n, expanded = stack.pop()
        if id(n) in levels:
            continue
        kids = [c for c in children(n) if not isinstance(c, Buffer)]
        if not expanded:
            stack.append((n, True))
            stack.extend((c, False) for c in kids if id(c) not in levels)
            continue
        levels[id(n)] = 1 + max((levels[id(c)] for c in kids), default=0)
    return levels[id(node)]


def post_order_visit(node, fn):
    """Call fn on every node of the tree, children before parents."""

    class _V(Visitor):
        def generic_visit(self, n):
            Visitor.generic_visit(self, n)
            fn(n)

    _V().visit(node)


def collect_vars(node) -> list:
    """The distinct Vars used in node, in order of first use."""
    seen = {}

    class _V(Visitor):
        def visit_Var(self, v):
            seen.setdefault(v, None)

    _V().visit(node)
    return list(seen)


def uses_var(node, var) -> bool:
    found = False

    class _V(Visitor):
        def visit_Var(self, v):
            nonlocal found
            if v is var:
                found = True

    _V().visit(node)
    return found


def combine(reducer, lhs_values, rhs_values) -> tuple:
    """The values a CommReducer combines concrete lhs/rhs expressions into (its formal vars substituted)."""
    vmap = dict(zip(reducer.lhs, lhs_values))
    vmap.update(zip(reducer.rhs, rhs_values))
    return tuple(substitute(r, vmap) for r in reducer.result)


__all__ = ["Visitor", "Mutator", "combine", "substitute", "post_order_visit", "collect_vars", "uses_var", "depth",
           "MappingProxyType"]
