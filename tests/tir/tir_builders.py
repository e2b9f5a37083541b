"""Hand-built PrimFuncs (blocks and loops, as te.create_prim_func and schedules make them) for the
lowering tests, plus helpers to run them through the reference interpreter."""
from __future__ import annotations

import numpy as np

from interp_lowered import run
from tessera import ir
from tessera.ir import (Block, BlockRealize, Buffer, BufferStore, For, IterVar, PrimFunc, Range, Var,
                        Visitor, seq)


def iv(name, extent, kind="data_par", lo=0):
    return IterVar(Range.from_min_extent(lo, extent), Var(name), kind)


def loops(vars_extents, body, kinds=None):
    """Nest `body` in For loops, outermost first: [(var, extent) or (var, min, extent)]."""
    kinds = kinds or {}
    for item in reversed(vars_extents):
        var, lo, ext = (item[0], 0, item[1]) if len(item) == 2 else item
        body = For(var, lo, ext, kinds.get(var.name, "serial"), body)
    return body


def root(*stmts, alloc=()):
    return BlockRealize([], True, Block([], [], [], "root", seq(*stmts), alloc_buffers=alloc))


def matmul_block(A, B, C, bindings, predicate=True):
    """The block C[vi, vj] += A[vi, vk] * B[vk, vj] with its init, bound to `bindings` (vi, vj, vk)."""
    n, K = A.shape
    m = B.shape[1]
    vi, vj, vk = iv("vi", n), iv("vj", m), iv("vk", K, "reduce")
    body = BufferStore(C, C[vi.var, vj.var] + A[vi.var, vk.var] * B[vk.var, vj.var], [vi.var, vj.var])
    init = BufferStore(C, ir.const(0.0, C.dtype), [vi.var, vj.var])
    block = Block([vi, vj, vk], [], [], "C", body, init=init)
    return BlockRealize(bindings, predicate, block)


def matmul_buffers(n, m, K, dtype="float32"):
    return Buffer((n, K), dtype, "A"), Buffer((K, m), dtype, "B"), Buffer((n, m), dtype, "C")


def matmul(n=6, m=5, K=7, order="ijk"):
    """A matmul nest with its loops in `order` (a permutation of "ijk")."""
    A, B, C = matmul_buffers(n, m, K)
    v = {"i": Var("i"), "j": Var("j"), "k": Var("k")}
    ext = {"i": n, "j": m, "k": K}
    nest = loops([(v[c], ext[c]) for c in order], matmul_block(A, B, C, [v["i"], v["j"], v["k"]]))
    return PrimFunc([A, B, C], root(nest))


def random_args(func, seed=0, scalars=None):
    """Random arrays for the Buffer params (shapes must be constant) and `scalars` for Var params."""
    rng = np.random.default_rng(seed)
    args, scalars = [], dict(scalars or {})
    for p in func.params:
        if isinstance(p, Var):
            args.append(scalars[p.name])
            continue
        shape = tuple(int(s) for s in p.shape)
        if p.strides:
            shape = (1 + sum((s - 1) * int(st) for s, st in zip(shape, p.strides)),)
        dt = ir.numpy_dtype(p.dtype)
        if dt.kind == "f":
            args.append(rng.standard_normal(shape).astype(dt))
        else:
            args.append(rng.integers(-20, 20, shape).astype(dt))
    return args


def run_copy(func, args):
    """Run func on copies of args; returns the (possibly written) copies."""
    out = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    run(func, out)
    return out


def assert_same(f1, f2, seed=0, scalars=None, rtol=1e-5):
    """f1 and f2 compute the same outputs on random inputs (per the reference interpreter)."""
    args = random_args(f1, seed, scalars)
    r1, r2 = run_copy(f1, args), run_copy(f2, args)
    for p, a, b in zip(f1.params, r1, r2):
        if isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-6, err_msg=f"buffer {p.name}")
    return r1


def find(node, cls):
    """Every node of type cls in node, in visiting order."""
    out = []

    class _V(Visitor):
        def generic_visit(self, n):
            if isinstance(n, cls):
                out.append(n)
            Visitor.generic_visit(self, n)

    _V().visit(node)
    return out
