"""thread_sync: barriers where a "shared" buffer is written by some threads and read by others (TVM's ThreadSync).

Runs on the kernels split_host_device marked. The threads of a work-group run a kernel's
statements together; when a statement reads a shared buffer that an earlier statement wrote
(read after write), or writes one that an earlier statement read (write after read), and no
barrier lies between them, a `tvm_storage_sync("shared")` goes before the later statement (the
renderer prints `__syncthreads()` / `barrier(CLK_LOCAL_MEM_FENCE)`). Any two accesses count as
made by different threads (the pass does not compare indices), and writes after writes are not
ordered (the cooperative copies write disjoint elements). A loop whose next iteration would read
what the end of its body wrote (or overwrite what it read) gets a barrier at the end of its body:
the shared-tile GEMM's `copy; sync; compute; sync` inside its k loop.

Every thread of a work-group must reach a barrier, so one goes only where control flow is the
same for all of them: not under a condition or inside a loop whose bounds depend on a threadIdx
variable. A hazard that would need a barrier there is refused by name, except under a condition
that pins every enclosing thread index to one value (`if (tx == 0)`: the last step of a
cross-thread reduction writing the row's result): one thread runs that, in its own order.
"""
from __future__ import annotations

from ...errors import BuildError
from ...ir import (AttrStmt, BufferLoad, BufferStore, Call, Evaluate, For, IfThenElse, LetStmt, PrimFunc, SeqStmt,
                   StringImm, Var, collect_vars)
from ...ir import expr as E
from ...ir.functor import Visitor
from .split_host_device import KERNEL, SHARED_SCOPES, thread_tag

EMPTY = (frozenset(), frozenset())


def storage_sync():
    """The barrier statement: `tvm_storage_sync("shared")`."""
    return Evaluate(Call("int32", "tvm_storage_sync", [StringImm("shared")]))


def is_sync(stmt) -> bool:
    return type(stmt) is Evaluate and type(stmt.value) is Call and stmt.value.op == "tvm_storage_sync"


def thread_sync(func: PrimFunc) -> PrimFunc:
    """`func` with a barrier between every write and read (or read and write) of a shared buffer
    by the threads of a kernel (see module docstring)."""
    body = _Kernels(func).visit(func.body)
    return func if body is func.body else func.with_body(body)


class _Kernels(Visitor):
    def __init__(self, func):
        super().__init__()
        self.func = func

    def visit(self, s):
        if type(s) is AttrStmt and s.attr_key == KERNEL:
            body = _Planner(self.func.name, s.node.value).plan(s.body, True)[0]
            return s if body is s.body else s.replace(body=body)
        if type(s) is SeqStmt:
            items = [self.visit(x) for x in s.seq]
            return s if all(a is b for a, b in zip(items, s.seq)) else SeqStmt(items)
        if hasattr(s, "body") and not isinstance(s, For):
            body = self.visit(s.body)
            return s if body is s.body else s.replace(body=body)
        return s


class _Access(Visitor):
    """Shared buffers an expression or statement (without its child statements) reads and writes."""

    def __init__(self):
        super().__init__()
        self.reads, self.writes = set(), set()

    def visit_BufferLoad(self, n):
        if n.buffer.scope in SHARED_SCOPES:
            self.reads.add(n.buffer)
        self.generic_visit(n)

    def visit_BufferStore(self, n):
        if n.buffer.scope in SHARED_SCOPES:
            self.writes.add(n.buffer)
        self.generic_visit(n)

    def visit_Call(self, n):
        if n.op == "address_of" and n.args and type(n.args[0]) is BufferLoad \
                and n.args[0].buffer.scope in SHARED_SCOPES:
            self.writes.add(n.args[0].buffer)  # an extern call may write through the pointer
        self.generic_visit(n)


def _acc(*nodes):
    a = _Access()
    for n in nodes:
        a.visit(n)
    return frozenset(a.reads), frozenset(a.writes)


def _union(a, b):
    return a[0] | b[0], a[1] | b[1]


def _conflict(before, after):
    """Buffers `after` reads that `before` wrote, or writes that `before` read."""
    return (before[1] & after[0]) | (before[0] & after[1])


class _Planner:
    """plan(stmt, uniform) -> (stmt with barriers, head, tail, synced): the (reads, writes) before
    the first barrier in stmt, those after its last, and whether every path through it syncs."""

    def __init__(self, fname, kernel):
        self.fname, self.kernel = fname, kernel
        self.thread_vars = set()
        self.thread_loops = []     # the threadIdx-bound loop variables around the statement planned now
        self.single = 0            # > 0: under a condition only one thread of the work-group passes

    def one_thread(self, cond) -> bool:
        """Whether cond holds for one thread only: equalities of every enclosing threadIdx variable
        with a constant, joined by `and`."""
        pinned, todo = set(), [cond]
        while todo:
            c = todo.pop()
            if type(c) is E.And:
                todo += [c.a, c.b]
            elif type(c) is E.EQ:
                for v, k in ((c.a, c.b), (c.b, c.a)):
                    if type(v) is Var and type(k) is E.IntImm:
                        pinned.add(v)
        return bool(self.thread_loops) and all(v in pinned for v in self.thread_loops)

    def depends(self, *exprs) -> bool:
        return any(set(collect_vars(e)) & self.thread_vars for e in exprs)

    def refuse(self, bufs, where):
        names = ", ".join(sorted(b.name for b in bufs))
        raise BuildError(f"{self.fname}: in kernel {self.kernel}, shared buffer {names} is written and read by "
                         f"different threads {where}; the barrier that orders them cannot go there (every "
                         f"thread of a work-group must reach it): move the accesses out of that condition or loop")

    def plan(self, s, uniform):
        t = type(s)
        if t is SeqStmt:
            return self.seq(s, uniform)
        if t is For:
            return self.loop(s, uniform)
        if t is IfThenElse:
            cond = _acc(s.condition)
            inner = uniform and not self.depends(s.condition)
            single = self.one_thread(s.condition)
            self.single += single
            try:
                then, h1, t1, y1 = self.plan(s.then_case, inner)
            finally:
                self.single -= single
            if s.else_case is not None:
                other, h2, t2, y2 = self.plan(s.else_case, inner)
            else:
                other, h2, t2, y2 = None, EMPTY, EMPTY, False
            new = s if then is s.then_case and other is s.else_case else IfThenElse(s.condition, then, other)
            return new, _union(cond, _union(h1, h2)), _union(t1, t2), y1 and y2
        if t is LetStmt:
            if self.depends(s.value):
                self.thread_vars.add(s.var)
            body, h, tl, y = self.plan(s.body, uniform)
            new = s if body is s.body else s.replace(body=body)
            return new, _union(_acc(s.value), h), tl, y
        if hasattr(s, "body") and t is not BufferStore:   # Allocate, AttrStmt, AssertStmt
            body, h, tl, y = self.plan(s.body, uniform)
            return (s if body is s.body else s.replace(body=body)), h, tl, y
        if is_sync(s):
            return s, EMPTY, EMPTY, True
        a = _acc(s)
        return s, a, a, False

    def seq(self, s, uniform):
        out, head, pending, synced = [], None, EMPTY, False
        for x in s.seq:
            new, h, tl, y = self.plan(x, uniform)
            bad = _conflict(pending, h) if not self.single else None
            if bad:
                if not uniform:
                    self.refuse(bad, "under a thread-dependent condition or loop")
                out.append(storage_sync())
                if head is None:
                    head = pending
                pending, synced = EMPTY, True
            if y:
                if head is None:
                    head = _union(pending, h)
                pending, synced = tl, True
            else:
                pending = _union(pending, tl)
            out.append(new)
        if head is None:
            head = pending
        changed = len(out) != len(s.seq) or any(a is not b for a, b in zip(out, s.seq))
        return (SeqStmt(out) if changed else s), head, pending, synced

    def loop(self, s, uniform):
        tag = thread_tag(s)
        varying = self.depends(s.min, s.extent)
        if (tag is not None and tag.startswith("threadIdx")) or varying:
            self.thread_vars.add(s.loop_var)
        inner = uniform and not varying
        bound = tag is not None and tag.startswith("threadIdx")
        if bound:
            self.thread_loops.append(s.loop_var)
        try:
            body, h, tl, y = self.plan(s.body, inner)
        finally:
            if bound:
                self.thread_loops.pop()
        if tag is None:   # a serial loop: its next iteration follows the end of its body
            carried = _conflict(tl, h) if y else _conflict(_union(h, tl), _union(h, tl))
            if carried and not self.single:
                if not inner:
                    self.refuse(carried, f"in consecutive iterations of loop {s.loop_var.name!r}, whose bounds "
                                         f"depend on the thread")
                body = SeqStmt(list(body.seq if type(body) is SeqStmt else [body]) + [storage_sync()])
                if not y:
                    h = _union(h, tl)
                tl, y = EMPTY, True
        new = s if body is s.body else s.replace(body=body)
        if not y:
            h = tl = _union(h, tl)
        return new, h, tl, y


__all__ = ["thread_sync", "storage_sync", "is_sync"]
