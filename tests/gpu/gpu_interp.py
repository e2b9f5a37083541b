"""A reference executor of lowered GPU functions (after split_host_device / thread_sync): the
threads of a work-group run as Python generators that stop at each barrier, so a missing barrier
shows up twice, as wrong numbers (threads run one after another between barriers) and as a data
race the executor reports (a shared element written by one thread and read by another, or read by
one and then written by another, with no barrier between). Slow and strict, for small sizes.

    run_gpu(lowered_func, [a, b, c])   # numpy arrays, written in place
"""
from __future__ import annotations

import itertools

import numpy as np

from interp_lowered import Interp, InterpError

from tessera import ir
from tessera.tir.transform.split_host_device import KERNEL


class RaceError(InterpError):
    pass


def run_gpu(func: ir.PrimFunc, args):
    host = Interp(func, args)
    _host(host, func.body)


def _host(host, s):
    t = type(s)
    if t is ir.AttrStmt and s.attr_key == KERNEL:
        dims = [int(a.value) for a in s.value.args]
        _kernel(host, s.node.value, tuple(dims[:3]), tuple(dims[3:6]), s.body)   # (dims[6]: dynamic shared bytes)
    elif t is ir.SeqStmt:
        for x in s.seq:
            _host(host, x)
    elif t is ir.Allocate:
        host.bufs[s.buffer] = host.alloc(s.buffer)
        _host(host, s.body)
    elif t is ir.AttrStmt:
        _host(host, s.body)
    else:
        raise InterpError(f"{t.__name__} on the host")


def _kernel(host, name, grid, block, body):
    for g in itertools.product(*(range(n) for n in reversed(grid))):
        gid = tuple(reversed(g))
        shared, tracker = {}, _Tracker(name)
        threads = []
        for t in itertools.product(*(range(n) for n in reversed(block))):
            tid = tuple(reversed(t))
            th = _Thread(host, gid, tid, shared, tracker)
            threads.append(th.g_exec(body))
        live = threads
        while live:
            waiting, done = [], 0
            for gen in live:
                try:
                    next(gen)
                    waiting.append(gen)
                except StopIteration:
                    done += 1
            if waiting and done:
                raise InterpError(f"kernel {name}: {done} threads of work-group {gid} ended while {len(waiting)} "
                                  f"wait at a barrier")
            tracker.barrier()
            live = waiting


class _Tracker:
    """Accesses of shared elements since the last barrier: element -> (writer, readers)."""

    def __init__(self, name):
        self.name, self.writes, self.reads = name, {}, {}

    def barrier(self):
        self.writes, self.reads = {}, {}

    def load(self, buf, idx, tid):
        for i in _flat(idx):
            key = (buf.name, i)
            w = self.writes.get(key)
            if w is not None and w != tid:
                raise RaceError(f"kernel {self.name}: thread {tid} reads {buf.name}[{i}] written by thread {w} "
                                f"with no barrier between")
            self.reads.setdefault(key, set()).add(tid)

    def store(self, buf, idx, tid):
        for i in _flat(idx):
            key = (buf.name, i)
            r = self.reads.get(key, set()) - {tid}
            if r:
                raise RaceError(f"kernel {self.name}: thread {tid} writes {buf.name}[{i}] that thread {min(r)} read "
                                f"with no barrier between")
            self.writes[key] = tid


def _flat(idx):
    return [int(x) for x in np.atleast_1d(idx[0]).ravel()] if len(idx) == 1 else [tuple(idx)]


_TAG_AXIS = {"x": 0, "y": 1, "z": 2}


class _Thread(Interp):
    def __init__(self, host, gid, tid, shared, tracker):   # noqa: D107 - shares the host's buffers
        self.vars = dict(host.vars)
        self.bufs = dict(host.bufs)
        self.gid, self.tid, self.shared, self.tracker = gid, tid, shared, tracker

    def g_exec(self, s):
        fn = getattr(self, "g_" + type(s).__name__, None)
        if fn is None:
            self.exec(s)
            return
        yield from fn(s)

    def g_For(self, s):
        tb = s.thread_binding
        if s.kind == "thread_binding" and tb is not None:
            tag = tb.thread_tag
            ids = self.gid if tag.startswith("blockIdx") else self.tid
            self.vars[s.loop_var] = self.eval(s.min) + ids[_TAG_AXIS[tag[-1]]]
            yield from self.g_exec(s.body)
            return
        lo, ext = self.eval(s.min), self.eval(s.extent)
        for i in range(lo, lo + ext):
            self.vars[s.loop_var] = i
            yield from self.g_exec(s.body)

    def g_SeqStmt(self, s):
        for x in s.seq:
            yield from self.g_exec(x)

    def g_IfThenElse(self, s):
        if self.eval(s.condition):
            yield from self.g_exec(s.then_case)
        elif s.else_case is not None:
            yield from self.g_exec(s.else_case)

    def g_LetStmt(self, s):
        self.vars[s.var] = self.eval(s.value)
        yield from self.g_exec(s.body)

    def g_Allocate(self, s):
        buf = s.buffer
        if buf.scope in ("shared", "shared.dyn"):
            if buf not in self.shared:
                self.shared[buf] = self.alloc(buf)
            self.bufs[buf] = self.shared[buf]
        else:
            self.bufs[buf] = self.alloc(buf)
        yield from self.g_exec(s.body)

    def g_AttrStmt(self, s):
        yield from self.g_exec(s.body)

    def g_Evaluate(self, s):
        v = s.value
        if type(v) is ir.Call and v.op == "tvm_storage_sync":
            yield "barrier"
            return
        self.eval(v)

    def s_BufferStore(self, s):
        if s.buffer.scope in ("shared", "shared.dyn"):
            arr = self.bufs[s.buffer]
            value = self.eval(s.value)
            idx = self.indices(s.buffer, arr, s.indices)
            self.tracker.store(s.buffer, idx, self.tid)
            arr[idx] = value
            return
        super().s_BufferStore(s)

    def e_BufferLoad(self, e):
        if e.buffer.scope in ("shared", "shared.dyn"):
            arr = self.bufs[e.buffer]
            self.tracker.load(e.buffer, self.indices(e.buffer, arr, e.indices), self.tid)
        return super().e_BufferLoad(e)
