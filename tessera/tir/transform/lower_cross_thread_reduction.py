"""lower_cross_thread_reduction: a reduction whose loop is bound to threadIdx becomes a
shared-memory tree (TVM's LowerCrossThreadReduction + LowerThreadAllreduce).

`sch.bind(k_1, "threadIdx.x")` on a loop that drives a reduction iterator says that the threads of
a block share the reduction. For a block `B[i] = combine(B[i], v)` (combine: +, max or min, after an
init store) under such a loop of constant extent T, this pass (run on GPU targets before the
blocks are lowered) rewrites the thread loop's body as

    red_local[0] = identity;  for k_0 ...: red_local[0] = combine(red_local[0], v)   // each thread
    red_shared[tx] = red_local[0]
    for s in (P/2, P/4, ..., 1):  if (tx < s && tx + s < T) red_shared[tx] = combine(red_shared[tx], red_shared[tx + s])
    if (tx == 0) { B[i] = init; B[i] = combine(B[i], red_shared[0]) }

(P the power of two >= T; red_shared a "shared" buffer of T elements, red_local a "local" one);
thread_sync then puts a barrier between the steps of the tree.

With a warp size W (CUDA: 32), a threadIdx.x loop whose extent T is a multiple of W reduces within
each warp first, without shared memory or barriers, then across the T / W warps:

    red_local[0] = combine(red_local[0], warp_shuffle_xor(red_local[0], m))   for m in W/2, ..., 1
    if (tx % W == 0) red_shared[tx / W] = red_local[0]                          (T > W only)
    red_local[0] = combine(red_shared[0], red_shared[1], ..., red_shared[T/W - 1])
    if (tx == 0) { B[i] = init; B[i] = combine(B[i], red_local[0]) }

(warp_shuffle_xor(v, m): v of the lane whose index differs by the bits m; after the butterfly every
lane holds the warp's result): one barrier where the tree takes log2(T). The loops between the thread loop
and the block must carry only the reduction, and form a perfect nest; anything else is refused by
name, as are reductions that are not a sum, max or min of the accumulator.
"""
from __future__ import annotations

import numpy as np

from ...errors import BuildError
from ...ir import (EQ, LT, Add, Allocate, And, BlockRealize, Buffer, BufferLoad, BufferStore, Call, FloorDiv,
                   FloorMod, For, ForKind, IfThenElse, IntImm, Max, Min, PrimFunc, SeqStmt, collect_vars, const,
                   numpy_dtype, structural_equal, substitute)
from ...ir.functor import post_order_visit
from ._stmt_mutator import StmtMutator

_COMBINE = {Add: "sum", Max: "max", Min: "min"}


def lower_cross_thread_reduction(func: PrimFunc, warp_size: int | None = None) -> PrimFunc:
    """`func` with every reduction bound across threads lowered to a shared-memory tree, or with
    warp_size (a target whose renderer has warp_shuffle_xor) to warp shuffles where the thread
    extent is a multiple of it (module docstring)."""
    body = _Lower(func, warp_size).visit(func.body)
    return func if body is func.body else func.with_body(body)


def _thread_tag(loop):
    if type(loop) is For and loop.kind == ForKind.THREAD_BINDING and loop.thread_binding is not None:
        return loop.thread_binding.thread_tag
    return None


def _nest(loop):
    """(loops from `loop` down, the BlockRealize at the bottom) when loop's body is a perfect nest
    over one block, else None."""
    loops, s = [loop], loop.body
    while type(s) is For:
        loops.append(s)
        s = s.body
    return (loops, s) if type(s) is BlockRealize else None


class _Lower(StmtMutator):
    def __init__(self, func, warp_size=None):
        super().__init__()
        self.func = func
        self.warp_size = warp_size
        self.outer = []   # loops around the statement being visited

    def visit_For(self, loop):
        tag = _thread_tag(loop)
        if tag is not None and tag.startswith("threadIdx"):
            found = _nest(loop)
            if found is not None and self._is_cross_thread(loop, found[1]):
                return self.lower(loop, *found)
        self.outer.append(loop)
        try:
            return self.generic_visit(loop)
        finally:
            self.outer.pop()

    def visit_Block(self, b):
        body = self.visit(b.body)
        return b if body is b.body else b.replace(body=body)

    def visit_BlockRealize(self, r):
        block = self.visit(r.block)
        return r if block is r.block else r.replace(block=block)

    @staticmethod
    def _is_cross_thread(loop, realize) -> bool:
        return any(iv.iter_type == "reduce" and loop.loop_var in collect_vars(v)
                   for iv, v in zip(realize.block.iter_vars, realize.iter_values))

    def refuse(self, block, why):
        raise BuildError(f"{self.func.name}: block {block.name_hint!r} is reduced across the threads of loop "
                         f"bound to threadIdx, which needs {why}")

    def lower(self, tloop, loops, realize):
        block = realize.block
        if not isinstance(tloop.extent, IntImm):
            self.refuse(block, "a constant thread extent")
        T = tloop.extent.value
        red_vars = set()
        spatial_vars = set()
        for iv, v in zip(block.iter_vars, realize.iter_values):
            (red_vars if iv.iter_type == "reduce" else spatial_vars).update(collect_vars(v))
        for lp in self.outer:
            if lp.loop_var in red_vars:
                self.refuse(block, f"the reduction loops inside the thread loop (loop {lp.loop_var.name!r} "
                                   f"around it carries the reduction)")
        for lp in loops:
            if lp.loop_var in spatial_vars or lp.loop_var not in red_vars:
                self.refuse(block, f"every loop from the thread loop down to the block to carry only the "
                                   f"reduction (loop {lp.loop_var.name!r} does not)")
            if lp is not tloop and lp.kind == ForKind.THREAD_BINDING:
                self.refuse(block, "one thread loop over the reduction")
        store = block.body
        if type(store) is not BufferStore or len(block.writes) != 1 or block.init is None \
                or type(block.init) is not BufferStore:
            self.refuse(block, "a block `B[...] = combine(B[...], value)` with an init store")
        buf, idx = store.buffer, store.indices
        value = store.value
        op = type(value)
        if op not in _COMBINE:
            self.refuse(block, "a sum, max or min of the accumulator")
        acc_load = BufferLoad(buf, idx)
        if type(value.a) is BufferLoad and structural_equal(value.a, acc_load):
            term = value.b
        elif type(value.b) is BufferLoad and structural_equal(value.b, acc_load):
            term = value.a
        else:
            self.refuse(block, "a sum, max or min of the accumulator")
        if _reads(term, buf):
            self.refuse(block, "a value that does not read the accumulator")
        vmap = {iv.var: v for iv, v in zip(block.iter_vars, realize.iter_values)}
        dt = buf.dtype
        identity = {"sum": const(0, dt), "max": _min_value(dt), "min": _max_value(dt)}[_COMBINE[op]]

        def combine(a, b):
            return op(a, b)

        tx = tloop.loop_var
        name = block.name_hint
        W = self.warp_size
        warps = W is not None and T % W == 0 and _thread_tag(tloop) == "threadIdx.x"
        local = Buffer((1,), dt, f"{name}_red_local", scope="local")
        shared = Buffer((T // W if warps else T,), dt, f"{name}_red_shared", scope="shared")
        zero = const(0, "int32")
        pred = substitute(realize.predicate, vmap)
        step = BufferStore(local, combine(BufferLoad(local, (zero,)), substitute(term, vmap)), (zero,))
        if not (type(pred) is IntImm and pred.value == 1):
            step = IfThenElse(pred, step)
        inner = step
        for lp in reversed(loops[1:]):
            inner = lp.replace(body=inner)
        stmts = [BufferStore(local, identity, (zero,)), inner]
        acc = BufferLoad(local, (zero,))
        if warps:
            m = W // 2
            while m >= 1:
                stmts.append(BufferStore(local, combine(acc, Call(dt, "warp_shuffle_xor", [acc, const(m, "int32")])),
                                         (zero,)))
                m //= 2
            if T > W:
                w = const(W, tx.dtype)
                stmts.append(IfThenElse(EQ(FloorMod(tx, w), const(0, tx.dtype)),
                                        BufferStore(shared, acc, (FloorDiv(tx, w),))))
                total = BufferLoad(shared, (zero,))
                for j in range(1, T // W):
                    total = combine(total, BufferLoad(shared, (const(j, "int32"),)))
                stmts.append(BufferStore(local, total, (zero,)))
            result = acc
        else:
            stmts.append(BufferStore(shared, acc, (tx,)))
            p = 1
            while p < T:
                p *= 2
            s = p // 2
            while s >= 1:
                cond = LT(tx, const(s, tx.dtype))
                if s * 2 > T:
                    cond = And(cond, LT(tx + const(s, tx.dtype), const(T, tx.dtype)))
                stmts.append(IfThenElse(cond, BufferStore(shared, combine(BufferLoad(shared, (tx,)),
                                                                          BufferLoad(shared, (tx + const(s, tx.dtype),))),
                                                          (tx,))))
                s //= 2
            result = BufferLoad(shared, (zero,))
        out_idx = tuple(substitute(i, vmap) for i in idx)
        init = block.init
        final = SeqStmt([BufferStore(buf, substitute(init.value, vmap), tuple(substitute(i, vmap) for i in init.indices)),
                         BufferStore(buf, combine(BufferLoad(buf, out_idx), result), out_idx)])
        stmts.append(IfThenElse(EQ(tx, const(0, tx.dtype)), final))
        body = Allocate(local, SeqStmt(stmts))
        if not warps or T > W:
            body = Allocate(shared, body)
        return tloop.replace(body=body)


def _reads(expr, buf) -> bool:
    found = []
    post_order_visit(expr, lambda n: found.append(n) if type(n) is BufferLoad and n.buffer is buf else None)
    return bool(found)


def _min_value(dt):
    """The identity of max: -inf for floats, the lowest value for integers."""
    if dt.is_float():
        return const(-np.inf, dt)
    return const(int(np.iinfo(numpy_dtype(dt)).min), dt)


def _max_value(dt):
    if dt.is_float():
        return const(np.inf, dt)
    return const(int(np.iinfo(numpy_dtype(dt)).max), dt)


__all__ = ["lower_cross_thread_reduction"]
