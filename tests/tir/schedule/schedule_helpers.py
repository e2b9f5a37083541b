"""Programs to schedule, expected programs built by hand, and running scheduled kernels."""
from __future__ import annotations

import numpy as np

import tessera
from tessera import te, tir
from tessera.ir import (BlockRealize, For, PrimFunc, SeqStmt, structural_equal)

RNG = np.random.default_rng(7)


def gemm(n=64, m=48, K=32, dtype="float32", name_k="k"):
    A = te.placeholder((n, K), name="A", dtype=dtype)
    B = te.placeholder((K, m), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name=name_k)
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def sym_gemm(K=16, m=8):
    n = te.var("n")
    A = te.placeholder((n, K), name="A")
    B = te.placeholder((K, m), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def chain(n=32, m=24):
    """A -> B = A * 2 -> C = B + 1 (B an intermediate), then D = exp(C) as a second output."""
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((n, m), lambda i, j: B[i, j] + 1.0, name="C")
    return te.create_prim_func([A, C])


def elementwise(shape=(16, 12), name="B"):
    A = te.placeholder(shape, name="A")
    B = te.compute(shape, lambda *ix: A[ix] * 3.0 + 1.0, name=name)
    return te.create_prim_func([A, B])


def rand(shape, dtype="float32"):
    return RNG.uniform(-1, 1, size=shape).astype(dtype)


def run_built(obj, *arrays):
    """Build obj (a Schedule, PrimFunc or module) for C and call it on numpy arrays (in place)."""
    lib = tessera.build(obj, target="c")
    lib(*arrays)
    return lib


def check_gemm(obj, n=64, m=48, K=32, rtol=1e-5):
    a, b = rand((n, K)), rand((K, m))
    c = np.full((n, m), np.nan, "float32")
    lib = run_built(obj, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=rtol, atol=1e-5)
    return lib


def root_of(func: PrimFunc):
    return func.body.block


def nest(func: PrimFunc, block_name: str):
    """[(loop name, kind, extent text)] of the loops around the block, outermost first."""
    out = []
    found = []

    def walk(s, loops):
        t = type(s)
        if t is For:
            walk(s.body, loops + [s])
        elif t is BlockRealize:
            if s.block.name_hint == block_name:
                found.append((loops, s))
            walk(s.block.body, [])
        elif t is SeqStmt:
            for x in s.seq:
                walk(x, loops)
        elif hasattr(s, "body"):
            walk(s.body, loops)

    walk(func.body, [])
    assert found, f"no block {block_name}"
    for lp in found[0][0]:
        out.append((lp.loop_var.name, lp.kind, lp.extent.script()))
    return out


def realize_of(func: PrimFunc, block_name: str) -> BlockRealize:
    found = []

    def walk(s):
        t = type(s)
        if t is BlockRealize:
            if s.block.name_hint == block_name:
                found.append(s)
            walk(s.block.body)
        elif t is SeqStmt:
            for x in s.seq:
                walk(x)
        elif hasattr(s, "body"):
            walk(s.body)

    walk(func.body)
    return found[0]


def with_body(func: PrimFunc, root_body) -> PrimFunc:
    """func with its root block's body replaced (same params, root block, alloc buffers)."""
    realize = func.body
    return func.with_body(realize.replace(block=realize.block.replace(body=root_body)))


def assert_struct_equal(got, want):
    assert structural_equal(got, want), f"got:\n{got.script()}\nwant:\n{want.script()}"


def schedule(func, **kw) -> tir.Schedule:
    kw.setdefault("debug_mask", "all")
    return tir.Schedule(func, **kw)
