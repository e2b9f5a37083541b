"""ScheduleState: the functions being scheduled, an index of where each loop and block is, and
the one way to change them (`replace`).

IR is immutable, so a primitive builds new statements and asks the state to put them where the
old ones were; the state rebuilds the ancestors and drops the index of that function. The index
(`FuncIndex`) is built lazily by one walk over the statement skeleton (expressions are never
entered) and answers: the For of a loop Var, the BlockRealize of a block name, the parent of any
statement on the way to a loop or block. Invariants every primitive keeps (and the index checks):
block names are unique in a function and every For has its own loop Var object.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir import (Allocate, AssertStmt, AttrStmt, Block, BlockRealize, Buffer, Evaluate, For,
                   IfThenElse, IntImm, IRModule, LetStmt, PrimFunc, SeqStmt, Var, seq)
from ...ir.functor import collect_vars
from ...ir.stmt import NOP

_BODY_ONLY = (LetStmt, Allocate, AttrStmt, AssertStmt)


class FuncIndex:
    """Where the loops and blocks of one PrimFunc are (built once per version of the function)."""

    __slots__ = ("func", "blocks", "loops", "parent", "realizes", "cache")

    def __init__(self, func: PrimFunc):
        self.func = func
        self.blocks: dict = {}      # block name -> BlockRealize
        self.loops: dict = {}       # loop Var -> For
        self.parent: dict = {}      # id(stmt) -> the statement holding it (None at the top)
        self.realizes: list = []    # every BlockRealize, in program (pre-)order
        self.cache: dict = {}       # analyses keyed by the caller (dependences of a scope, ...)
        self._walk(func.body, None)

    def _walk(self, s, p):
        parent = self.parent
        while True:
            parent[id(s)] = p
            t = type(s)
            if t is For:
                if s.loop_var in self.loops:
                    raise ScheduleError(f"loop variable {s.loop_var.name!r} is defined by two loops of "
                                        f"function {self.func.name!r}; every loop needs its own Var "
                                        f"to be scheduled")
                self.loops[s.loop_var] = s
                p, s = s, s.body
                continue
            if t is BlockRealize:
                b = s.block
                if b.name_hint in self.blocks:
                    raise ScheduleError(f"block name {b.name_hint!r} appears twice in function "
                                        f"{self.func.name!r}; block names must be unique to be scheduled")
                self.blocks[b.name_hint] = s
                self.realizes.append(s)
                parent[id(b)] = s
                if b.init is not None:
                    self._walk(b.init, b)
                p, s = b, b.body
                continue
            if t is SeqStmt:
                for x in s.seq:
                    self._walk(x, s)
                return
            if t is IfThenElse:
                self._walk(s.then_case, s)
                if s.else_case is None:
                    return
                p, s = s, s.else_case
                continue
            if t in _BODY_ONLY or t is Block:
                p, s = s, s.body
                continue
            return

    # navigation -------------------------------------------------------------------------------
    def parent_of(self, node):
        return self.parent.get(id(node))

    def sref_parent(self, node):
        """The nearest enclosing For or BlockRealize of node (None at the top of the function)."""
        p = self.parent.get(id(node))
        while p is not None and type(p) is not For and type(p) is not BlockRealize:
            p = self.parent.get(id(p))
        return p

    def scope_of(self, node):
        """The BlockRealize of the block whose body holds node (None: the function itself)."""
        p = self.parent.get(id(node))
        while p is not None and type(p) is not BlockRealize:
            p = self.parent.get(id(p))
        return p

    def loops_above(self, node) -> list:
        """The For loops around node inside its block scope, outermost first."""
        out = []
        p = self.parent.get(id(node))
        while p is not None and type(p) is not BlockRealize:
            if type(p) is For:
                out.append(p)
            p = self.parent.get(id(p))
        out.reverse()
        return out

    def ancestors(self, node) -> list:
        """Every statement holding node, innermost first."""
        out = []
        p = self.parent.get(id(node))
        while p is not None:
            out.append(p)
            p = self.parent.get(id(p))
        return out

    def encloses(self, outer, inner) -> bool:
        """Whether statement `outer` is a (strict) ancestor of `inner`."""
        p = self.parent.get(id(inner))
        while p is not None:
            if p is outer:
                return True
            p = self.parent.get(id(p))
        return False

    def position(self, realize) -> int:
        """Program order of a BlockRealize."""
        order = self.cache.get("order")
        if order is None:
            order = self.cache["order"] = {id(r): k for k, r in enumerate(self.realizes)}
        return order[id(realize)]


def child_realizes(stmt, out=None) -> list:
    """The BlockRealizes directly under stmt (not those nested in other blocks), in order."""
    if out is None:
        out = []
    while True:
        t = type(stmt)
        if t is BlockRealize:
            out.append(stmt)
            return out
        if t is For or t in _BODY_ONLY or t is Block:
            stmt = stmt.body
            continue
        if t is SeqStmt:
            for x in stmt.seq:
                child_realizes(x, out)
            return out
        if t is IfThenElse:
            child_realizes(stmt.then_case, out)
            if stmt.else_case is None:
                return out
            stmt = stmt.else_case
            continue
        return out


def realizes_under(stmt, out=None) -> list:
    """The BlockRealizes under stmt whose bindings can mention a loop var bound outside stmt:
    the child blocks, and through opaque blocks (no iteration variables) the blocks inside them."""
    if out is None:
        out = []
    for r in child_realizes(stmt):
        out.append(r)
        if not r.block.iter_vars:
            realizes_under(r.block.body, out)
    return out


def has_loose_statements(stmt) -> bool:
    """Whether stmt executes anything (a store, an evaluate) outside of a block."""
    t = type(stmt)
    if t is BlockRealize:
        return False
    if t is For or t in _BODY_ONLY:
        return has_loose_statements(stmt.body)
    if t is SeqStmt:
        return any(has_loose_statements(x) for x in stmt.seq)
    if t is IfThenElse:
        return has_loose_statements(stmt.then_case) or (
            stmt.else_case is not None and has_loose_statements(stmt.else_case))
    return not (t is Evaluate and type(stmt.value) is IntImm)


# ---------------------------------------------------------------------------------------------
# rebuilding
# ---------------------------------------------------------------------------------------------
def _rebuild(node, repl, anc):
    new = repl.get(id(node), node)
    if new is not node:
        return NOP if new is None else new
    if id(node) not in anc:
        return node
    t = type(node)
    if t is SeqStmt:
        return seq(*[_rebuild(x, repl, anc) for x in node.seq])
    if t is For:
        return node.replace(body=_rebuild(node.body, repl, anc))
    if t is BlockRealize:
        return node.replace(block=_rebuild(node.block, repl, anc))
    if t is Block:
        init = node.init
        if init is not None:
            init = _rebuild(init, repl, anc)
        return node.replace(body=_rebuild(node.body, repl, anc), init=init)
    if t is IfThenElse:
        other = node.else_case
        if other is not None:
            other = _rebuild(other, repl, anc)
        return node.replace(then_case=_rebuild(node.then_case, repl, anc), else_case=other)
    return node.replace(body=_rebuild(node.body, repl, anc))


class ScheduleState:
    """The functions being scheduled (name -> PrimFunc) with a lazily built index per function."""

    __slots__ = ("funcs", "_index", "_mod", "debug")

    def __init__(self, funcs: dict, debug: bool = False):
        self.funcs = dict(funcs)
        self._index: dict = {}
        self._mod = None
        self.debug = debug

    def copy(self) -> "ScheduleState":
        new = ScheduleState.__new__(ScheduleState)
        new.funcs = dict(self.funcs)
        new._index = dict(self._index)  # indices describe immutable functions: shareable
        new._mod = self._mod
        new.debug = self.debug
        return new

    def snapshot(self):
        return (dict(self.funcs), dict(self._index), self._mod)

    def restore(self, snap):
        self.funcs, self._index, self._mod = dict(snap[0]), dict(snap[1]), snap[2]

    @property
    def mod(self) -> IRModule:
        if self._mod is None:
            self._mod = IRModule(self.funcs)
        return self._mod

    def func(self, name: str) -> PrimFunc:
        f = self.funcs.get(name)
        if f is None:
            raise ScheduleError(f"the module has no function {name!r}; it has {sorted(self.funcs)}")
        return f

    def index(self, name: str) -> FuncIndex:
        idx = self._index.get(name)
        if idx is None:
            idx = self._index[name] = FuncIndex(self.func(name))
        return idx

    def replace(self, name: str, repl: dict) -> PrimFunc:
        """Put new statements where old ones were: repl maps id(old statement) -> new statement
        (None removes it). Every old statement must be in the current function."""
        idx = self.index(name)
        func = idx.func
        anc = set()
        for key in repl:
            if key not in idx.parent:
                raise ScheduleError("internal: a replaced statement is not in the function")
            p = idx.parent[key]
            while p is not None and id(p) not in anc:
                anc.add(id(p))
                p = idx.parent.get(id(p))
        body = _rebuild(func.body, repl, anc)
        new = func.with_body(body)
        self.funcs[name] = new
        self._index.pop(name, None)
        self._mod = None
        if self.debug:
            verify_func(new, name)
        return new

    def set_func(self, name: str, func: PrimFunc):
        """Replace a whole function (for primitives that change parameters or attributes)."""
        self.funcs[name] = func
        self._index.pop(name, None)
        self._mod = None
        if self.debug:
            verify_func(func, name)


# ---------------------------------------------------------------------------------------------
# well-formedness (debug_mask): run after every change when the schedule is in debug mode
# ---------------------------------------------------------------------------------------------
def verify_func(func: PrimFunc, name: str = "main"):
    """Raise ScheduleError unless func is a well-formed schedulable function: unique block names
    and loop Vars, and every variable a binding, predicate or loop bound uses is in scope."""
    FuncIndex(func)  # uniqueness
    free = set()
    for p in func.params:
        if isinstance(p, Var):
            free.add(p)
        elif isinstance(p, Buffer):
            for s in p.shape + p.strides:
                free.update(collect_vars(s))

    def check(exprs, scope, where):
        for e in exprs:
            for v in collect_vars(e):
                if v not in scope and v not in free:
                    raise ScheduleError(f"function {name!r}: {where} uses {v.name!r}, which no enclosing "
                                        f"loop or block defines")

    def walk(s, scope):
        t = type(s)
        if t is For:
            check((s.min, s.extent), scope, f"loop {s.loop_var.name!r}")
            walk(s.body, scope | {s.loop_var})
        elif t is BlockRealize:
            b = s.block
            check(s.iter_values + (s.predicate,), scope, f"block {b.name_hint!r}")
            inner = scope | {iv.var for iv in b.iter_vars}
            for buf in b.alloc_buffers:
                for e in buf.shape:
                    free.update(collect_vars(e))
            if b.init is not None:
                walk(b.init, inner)
            walk(b.body, inner)
        elif t is SeqStmt:
            for x in s.seq:
                walk(x, scope)
        elif t is IfThenElse:
            walk(s.then_case, scope)
            if s.else_case is not None:
                walk(s.else_case, scope)
        elif t is LetStmt:
            walk(s.body, scope | {s.var})
        elif t in _BODY_ONLY:
            walk(s.body, scope)

    walk(func.body, frozenset())


__all__ = ["ScheduleState", "FuncIndex", "child_realizes", "realizes_under", "has_loose_statements",
           "verify_func"]
