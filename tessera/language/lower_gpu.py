"""Lowering the tile IR for GPU targets (opencl, cuda): the machine-dependent choices of lower.py's
Lowering made for a work-group of num_warps x 32 threads.

- Programs: a kernel launched on a fixed grid of work-groups (the launch grid rounded up to a power
  of two per axis, jit.py's bucket); each work-group runs the programs pid = k * launch + blockIdx
  of its column, grid-stride, so one build serves any grid up to the bucket and beyond it.
- Tiles live in shared memory: a value one op writes and another reads in another order (a
  reduction's input, a dot operand, a broadcast row) is visible to all the work-group's threads.
  thread_sync places the barriers between the nests.
- A loop nest over a tile spreads its elements row-major over the threads, element e on thread
  e % threads: consecutive threads take consecutive elements, so accesses along a contiguous last
  axis coalesce. A load or store whose pointers the axis analysis (passes.axis_info) finds
  contiguous along another axis (a transposed access) walks its tile with that axis fastest.
- A reduction is a tree of nests over shared buffers (op_reduce), a dot product a loop of nests each
  adding 16 products to every element of the result. No thread keeps an accumulator between
  statements: a private array in a kernel with barriers, launched in three dimensions, is
  miscompiled by PoCL (heap corruption), and a shared element a thread rewrites in a loop cannot be
  ordered by thread_sync's barriers.
"""
from __future__ import annotations

from ..ir import Buffer, BufferStore, For, IfThenElse, LetStmt, Select, Var, const, max_expr, min_expr, seq
from ..ir import expr as E
from ..target import Target
from ..tir.schedule.loops import thread_iter_var
from . import passes
from .core import KernelError
from .ir import Function, Value
from .lower import Lowering


class GPULowering(Lowering):
    scope = "shared"
    peel = False     # a GPU predicates a masked access at no cost worth a second copy of the nest
    reread_loads = False  # a tile read twice is kept in shared memory, not loaded twice from global

    def __init__(self, func: Function, target: Target, launch: tuple, num_warps: int, shapes: dict,
                 static: dict | None = None):
        super().__init__(func, target, static)
        self.launch, self.threads, self.shapes = launch, 32 * num_warps, shapes
        self.axis = passes.axis_info(func)
        self.order = None     # the axes of the nest being made, slowest first (None: row-major)

    def coalescing_order(self, ptr: Value):
        """The axis order whose last axis is the pointer block's contiguous one, when that is not its
        last axis (a transposed access): consecutive threads then touch consecutive addresses."""
        info = self.axis.get(ptr)
        nd = len(ptr.type.shape)
        if info is None or nd < 2 or info.contiguity[-1] > 1:
            return None
        d = max(range(nd), key=lambda i: info.contiguity[i])
        if info.contiguity[d] <= 1:
            return None
        return tuple(i for i in range(nd) if i != d) + (d,)

    def lower_op(self, op):
        self.order = self.coalescing_order(op.operands[0]) if op.kind in ("load", "store") else None
        try:
            super().lower_op(op)
        finally:
            self.order = None

    def param_buffer(self, p):
        (n,) = self.shapes[p.name]
        return Buffer((max(1, n),), p.value.type.element.element_ty.ir, p.name)

    def programs(self, make_body):
        grid_params, self.grid = self.grid_vars()
        self.pids = tuple(Var(f"pid_{a}") for a in "xyz")
        blocks = tuple(Var(f"block_{a}") for a in "xyz")
        rounds = tuple(Var(f"round_{a}") for a in "xyz")
        stmts = make_body()
        body = self.wrap_allocs(seq(*stmts))
        for d in reversed(range(3)):
            # the programs pid = r * p + block < grid: an exact trip count per work-group, not a
            # guard (PoCL miscompiles barriers under a uniform condition inside such a loop)
            p = self.launch[d]
            trips = max_expr((self.grid[d] - blocks[d] + (p - 1)) // p, const(0))
            body = For(rounds[d], 0, trips, "serial", LetStmt(self.pids[d], rounds[d] * p + blocks[d], body))
        for d in reversed(range(3)):
            body = For(blocks[d], 0, self.launch[d], "thread_binding", body,
                       thread_binding=thread_iter_var(f"blockIdx.{'xyz'[d]}"))
        return grid_params, body

    def loops(self, shape, body, cx, vector, reduce_axis):
        n = 1
        for s in shape:
            n *= s
        t = self.threads
        tx = Var(self.fresh("tx"))
        rounds = (n + t - 1) // t
        eo = Var(self.fresh("e")) if rounds > 1 else None
        e = tx if eo is None else eo * t + tx
        order = self.order if self.order is not None and len(self.order) == len(shape) else tuple(range(len(shape)))
        idx, rest = [None] * len(shape), e
        for d in reversed(order):     # element e's indices, the last axis of `order` fastest
            idx[d] = rest % shape[d] if shape[d] > 1 else const(0)
            rest = rest // shape[d]
        s = body(tuple(idx), cx)
        if n % t and n > 1 or n < t:
            s = IfThenElse(e < n, s)
        s = For(tx, 0, t, "thread_binding", s, thread_binding=thread_iter_var("threadIdx.x"))
        if eo is not None:
            s = For(eo, 0, rounds, "serial", s)
        return s

    # reductions: trees of nests --------------------------------------------------------------
    def op_reduce(self, op, *xs):
        """A reduction as levels of nests, each output element of a level combining F elements of
        the level before (F = 16 for one value, read once per step; F = 2 for (value, index) pairs
        and combine functions of several values), the last level writing the result."""
        kind, axis = op.attr("kind"), op.attr("axis")
        in_ty = op.operands[0].type
        n = in_ty.shape[axis]
        rshape = tuple(s for d, s in enumerate(in_ty.shape) if d != axis)
        keep = len(op.results[0].type.shape) == len(in_ty.shape)
        outs = [self.new_buffer(r.type.shape, r.type.element, kind) for r in op.results]

        def at_axis(x, r, j, cx):
            return x.at(tuple(r[:axis]) + (j,) + tuple(r[axis:]), cx)

        if kind in ("sum", "max", "min"):
            fn = {"sum": lambda a, b: a + b, "max": max_expr, "min": min_expr}[kind]
            srcs = [lambda r, j, cx: at_axis(xs[0], r, j, cx)]
            comb, fan = (lambda a, b: [fn(a[0], b[0])]), 16
            els = [op.results[0].type.element]
        elif kind in ("argmax", "argmin"):
            better = E.GT if kind == "argmax" else E.LT

            def comb(a, b):   # of equal values, the smaller index (a tree pairs them in any order)
                take = better(b[0], a[0]) | (E.EQ(b[0], a[0]) & (b[1] < a[1]))
                return [Select(take, b[0], a[0]), Select(take, b[1], a[1])]

            srcs = [lambda r, j, cx: at_axis(xs[0], r, j, cx), lambda r, j, cx: j]
            fan = 2
            els = [in_ty.element, op.results[0].type.element]
            outs = [self.new_buffer(op.results[0].type.shape, in_ty.element, kind + "_value")] + outs
        else:
            region = op.region
            srcs = [lambda r, j, cx, x=x: at_axis(x, r, j, cx) for x in xs]
            comb, fan = (lambda a, b: self.inline_region(region, list(a) + list(b))), 2
            els = [r.type.element for r in op.results]
        self.tree(srcs, n, rshape, outs, lambda r: self.bidx(outs[0], self._reinsert(r, axis, keep)), comb, fan, els)
        res = outs[1:] if kind in ("argmax", "argmin") else outs
        return [self.buffer_tile(b, r.type) for b, r in zip(res, op.results)]

    def tree(self, srcs, count, rshape, outs, out_of_r, comb, fan, els):
        while True:
            f = min(fan, count)
            nxt = count // f
            last = nxt == 1

            def body(idx, cx, srcs=srcs, f=f, nxt=nxt, last=last, lvl=None):
                r = idx if last else idx[:-1]
                q = const(0) if last else idx[-1]
                acc = [s(r, q, cx) for s in srcs]
                for i in range(1, f):
                    acc = comb(acc, [s(r, q + i * nxt, cx) for s in srcs])
                o = out_of_r(r) if last else tuple(idx)
                return seq(*[BufferStore(b, self.as_dtype(v, b.dtype), o) for b, v in zip(lvl or outs, acc)])

            if last:
                self.emit(self.nest(rshape, body))
                return
            lvl = [self.new_buffer(rshape + (nxt,), el, "partial") for el in els]
            self.emit(self.nest(rshape + (nxt,), lambda idx, cx, body=body, lvl=lvl: body(idx, cx, lvl=lvl)))
            srcs = [lambda r, j, cx, b=b: b[tuple(r) + (j,)] for b in lvl]
            count = nxt

    def matmul(self, A, B, C, m, n, k, out_el):
        """C += A @ B over the shared tiles: a thread per element of C, 16 products of the inner
        extent a nest (an expression: no thread re-reads shared memory it wrote without a barrier
        between), the nests in a serial loop over the inner extent."""
        f = min(16, k)
        kc = Var(self.fresh("kc"))

        def body(idx, cx):
            i, j = idx
            acc = C[i, j]
            for t in range(f):
                kk = kc * f + t
                a = A[i, kk] if A.dtype == C.dtype else A[i, kk].astype(C.dtype)
                b = B[kk, j] if B.dtype == C.dtype else B[kk, j].astype(C.dtype)
                acc = acc + a * b
            return BufferStore(C, acc, [i, j])

        return For(kc, 0, k // f, "serial", self.nest((m, n), body))

    def atomic_helper(self, el):
        name = f"tl_atomic_add_{el.name}"
        if self.target.kind == "cuda":
            t = {"float32": "float", "float64": "double", "int32": "int", "uint32": "unsigned int",
                 "int64": "long long", "uint64": "unsigned long long"}[el.ir]
            if el.bits == 64 and el.is_int():
                body = f"  return ({t})atomicAdd((unsigned long long*)p, (unsigned long long)v);"
            else:
                body = "  return atomicAdd(p, v);"
            return name, f"/* *p += v atomically; the old value (tl.atomic_add) */\n" \
                         f"static __device__ inline {t} {name}({t}* p, {t} v) {{\n{body}\n}}"
        if el.bits == 64:
            raise self.error(f"atomic_add of {el} is not supported on OpenCL (its 64-bit atomics are an extension)")
        t = {"float32": "float", "int32": "int", "uint32": "uint"}[el.ir]
        if el.is_int():
            body = "  return atomic_add(p, v);"
        else:
            body = ("  union { uint u; float f; } old, nxt;\n"
                    "  do { old.f = *p; nxt.f = old.f + v; }\n"
                    "  while (atomic_cmpxchg((volatile __global uint*)p, old.u, nxt.u) != old.u);\n"
                    "  return old.f;")
        return name, f"/* *p += v atomically; the old value (tl.atomic_add) */\n" \
                     f"inline {t} {name}(__global {t}* p, {t} v) {{\n{body}\n}}"


def lower_gpu(func: Function, target, launch: tuple, num_warps: int, shapes: dict, static: dict | None = None):
    """The tile function as a PrimFunc for a GPU target, launched on `launch` work-groups of
    num_warps x 32 threads; shapes: each pointer parameter's (elements,)."""
    if num_warps < 1 or num_warps & (num_warps - 1):
        raise KernelError(f"num_warps must be a power of two, got {num_warps}")
    return GPULowering(func, Target(target), launch, num_warps, shapes, static).run()


__all__ = ["lower_gpu", "GPULowering"]
