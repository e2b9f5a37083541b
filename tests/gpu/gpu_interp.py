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
from tessera.backend import get_backend
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


WARP = get_backend("cuda").warp_size   # lanes a warp_shuffle_xor exchanges among (CUDA's warp)


def _kernel(host, name, grid, block, body):
    """Each work-group's threads run round by round: a round resumes the threads that can go on
    until each stops at a barrier or a warp shuffle (or ends). A warp's shuffle completes once all
    of its lanes reached one; a barrier once every thread of the group waits at it."""
    for g in itertools.product(*(range(n) for n in reversed(grid))):
        gid = tuple(reversed(g))
        shared, tracker = {}, _Tracker(name)
        gens, tids = [], []
        for t in itertools.product(*(range(n) for n in reversed(block))):
            tid = tuple(reversed(t))
            tids.append(tid)
            gens.append(_Thread(host, gid, tid, shared, tracker).g_exec(body))
        linear = [x + block[0] * (y + block[1] * z) for x, y, z in tids]
        at = {}                                  # thread -> "barrier" or ("shfl", value, mask)
        ready = {i: None for i in range(len(gens))}   # thread -> the value it resumes with
        done = set()
        while ready:
            for i, value in ready.items():
                try:
                    at[i] = gens[i].send(value)
                except StopIteration:
                    done.add(i)
            ready = {}
            shuffling = {i for i, a in at.items() if a != "barrier"}
            if shuffling:
                for w in {linear[i] // WARP for i in shuffling}:
                    lanes = [i for i in range(len(gens)) if linear[i] // WARP == w]
                    if any(i not in shuffling for i in lanes):
                        raise InterpError(f"kernel {name}: a warp shuffle in work-group {gid} that not every lane "
                                          f"of warp {w} reaches")
                    masks = {at[i][2] for i in lanes}
                    if len(masks) != 1 or len(lanes) != WARP:
                        raise InterpError(f"kernel {name}: not every lane of warp {w} is at the same shuffle "
                                          f"(masks {sorted(masks)}, {len(lanes)} lanes of {WARP})")
                    by_lane = {linear[i] % WARP: at[i][1] for i in lanes}
                    for i in lanes:
                        ready[i] = by_lane[(linear[i] % WARP) ^ at[i][2]]
                        del at[i]
                continue
            if at and done:
                raise InterpError(f"kernel {name}: {len(done)} threads of work-group {gid} ended while {len(at)} "
                                  f"wait at a barrier")
            if at:
                tracker.barrier()
                ready = {i: None for i in at}
                at = {}


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
        self.shuffled = None     # (the warp_shuffle_xor call of the store being executed, its value)

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

    def g_BufferStore(self, s):
        """A store whose value shuffles (warp_shuffle_xor) stops for the warp's exchange."""
        calls = []
        ir.post_order_visit(s.value, lambda n: calls.append(n) if type(n) is ir.Call
                            and n.op == "warp_shuffle_xor" else None)
        if not calls:
            self.exec(s)
            return
        if len(calls) > 1:
            raise InterpError("more than one warp_shuffle_xor in one store")
        call = calls[0]
        got = yield ("shfl", self.eval(call.args[0]), int(self.eval(call.args[1])))
        self.shuffled = (call, got)
        try:
            self.exec(s)
        finally:
            self.shuffled = None

    def e_Call(self, e):
        if e.op == "warp_shuffle_xor":
            if self.shuffled is None or self.shuffled[0] is not e:
                raise InterpError("warp_shuffle_xor outside a store")
            return self.shuffled[1]
        return super().e_Call(e)

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
