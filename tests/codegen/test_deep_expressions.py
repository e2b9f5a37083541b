"""Deep expressions (a long chain of fused elementwise ops) render, compile and compute what numpy does:
the renderer binds their deep parts to C variables (codegen.c_base.shallow_expr) instead of recursing
once per level, and a part under a condition stays under it."""
import re

import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.codegen.c_base import MAX_EXPR_DEPTH, shallow_expr
from tessera.graph import Builder
from tessera.ir import collect_vars
from tessera.ir import expr as E
from tessera.ir.functor import children

RNG = np.random.default_rng(3)
CHAIN = 250


def _chain_graph(n_ops, tail=None):
    """x -> n_ops elementwise ops (relu, tanh, add x), optionally followed by a pad or a where."""
    gb = Builder("deep")
    x = gb.input("x", (4, 8))
    v = x
    for i in range(n_ops):
        v = gb.op("add", v, x) if i % 2 else gb.op("nn.relu", v) if i % 3 == 0 else gb.op("tanh", v)
    if tail == "pad":
        v = gb.op("nn.pad", v, pad_width=((0, 0), (1, 2)))
    elif tail == "where":
        v = gb.op("where", gb.op("greater", v, x), v, x)
    gb.output(v)
    return gb.finish()


def _chain_numpy(x, n_ops, tail=None):
    v = x
    for i in range(n_ops):
        v = v + x if i % 2 else np.maximum(v, 0) if i % 3 == 0 else np.tanh(v)
    if tail == "pad":
        v = np.pad(v, ((0, 0), (1, 2)))
    elif tail == "where":
        v = np.where(v > x, v, x)
    return v


def _paren_depth(source: str) -> int:
    depth = deepest = 0
    for ch in source:
        depth += ch == "("
        depth -= ch == ")"
        deepest = max(deepest, depth)
    return deepest


@pytest.mark.parametrize("executor", ["aot", "graph"])
def test_chain_of_250_fused_elementwise_ops_compiles_and_matches_numpy(executor):
    exe = tessera.compile(_chain_graph(CHAIN), executor=executor)
    assert len(exe.graph.nodes) == 1                      # one fused kernel holds the whole chain
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(exe(x), _chain_numpy(x, CHAIN), rtol=1e-5, atol=1e-5)
    if executor == "aot":
        source = exe.module.get_source()
        assert _paren_depth(source) < 3 * MAX_EXPR_DEPTH   # printed as several statements, not one


@pytest.mark.parametrize("tail", ["pad", "where"])
def test_deep_chain_under_a_condition_matches_numpy(tail):
    """pad puts the chain inside if_then_else's branch, where a Select: the parts are bound inside
    the branch, so the padded positions never evaluate it."""
    exe = tessera.compile(_chain_graph(CHAIN, tail))
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(exe(x), _chain_numpy(x, CHAIN, tail), rtol=1e-5, atol=1e-5)


def _deep_compute(dtype, n_ops, n=67):
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.placeholder((n,), name="B", dtype=dtype)

    def body(i):
        e = A[i]
        for k in range(n_ops):
            e = e * B[i] + A[i] if k % 2 else e - B[i]
        return e

    C = te.compute((n,), body, name="C")
    return A, B, C


def _deep_numpy(a, b, n_ops):
    e = a
    for k in range(n_ops):
        e = e * b + a if k % 2 else e - b
    return e


@pytest.mark.parametrize("vectorized", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "int8"])
def test_deep_te_expression_builds_scalar_and_vectorized(dtype, vectorized):
    """300 levels in one compute: float64 (plain C) and int8 (arithmetic that wraps to its type),
    lane by lane and as vectors."""
    A, B, C = _deep_compute(dtype, 300)
    sch = tir.Schedule(te.create_prim_func([A, B, C]))
    if vectorized:
        (i,) = sch.get_loops(sch.get_block("C"))
        _, inner = sch.split(i, factors=[None, 8])
        sch.vectorize(inner)
    lib = tessera.build(sch.mod, target="c")
    if dtype == "int8":
        a = RNG.integers(-100, 100, 67).astype(np.int8)
        b = RNG.integers(-3, 4, 67).astype(np.int8)
    else:
        a, b = RNG.uniform(0.5, 1.0, 67), RNG.uniform(0.9, 1.0, 67)
    c = np.zeros(67, dtype)
    lib(a, b, c)
    with np.errstate(over="ignore"):
        want = _deep_numpy(a, b, 300)
    np.testing.assert_allclose(c, want, rtol=1e-12)
    assert re.search(r"\bC_part\b", lib.get_source())


def _depth(e):
    return 1 + max((_depth(c) for c in children(e) if isinstance(c, E.PrimExpr)), default=0)


def test_shallow_expr_binds_only_unconditional_parts_before_the_statement():
    x = E.Var("x", "float32")
    deep = x
    for _ in range(3 * MAX_EXPR_DEPTH):
        deep = deep * x + x
    guarded = E.Call("float32", "if_then_else", [x > E.const(0.0, "float32"), deep, E.const(0.0, "float32")])
    bindings, out = shallow_expr(deep + guarded, "t")
    # the unconditional copy of the chain is bound before the statement ...
    assert len(bindings) >= 2 and all(_depth(part) <= MAX_EXPR_DEPTH for _, part in bindings)
    assert type(out) is E.Add and bindings[-1][0] in collect_vars(out.a) and _depth(out.a) < MAX_EXPR_DEPTH
    for (_, part), (prev, _) in zip(bindings[1:], bindings):
        assert prev in collect_vars(part)
    # ... the guarded one inside its branch, as Let expressions
    branch = out.b.args[1]
    assert type(branch) is E.Let and out.b.args[2].value == 0.0
    bound_outside = {v for v, _ in bindings}
    lets, e = 0, branch
    while type(e) is E.Let:
        assert e.var not in bound_outside
        lets, e = lets + 1, e.body
    assert lets >= 2
    # a shallow expression comes back as it is
    small = x * x + x
    assert shallow_expr(small, "t") == ([], small)


def _opencl_usable():
    from tessera.runtime import opencl
    return opencl.usable()[0]


@pytest.mark.skipif(not _opencl_usable(), reason="no OpenCL device that builds kernels (PoCL)")
def test_deep_guarded_expression_builds_for_a_gpu_backend():
    """The renderer is the GPU backends' too: a deep chain under if_then_else, one thread an element,
    on OpenCL (the bound parts are statement expressions inside the branch)."""
    A = te.placeholder((1024,), name="A")
    B = te.placeholder((1024,), name="B")

    def body(i):
        e = A[i]
        for k in range(200):
            e = e * B[i] + A[i] if k % 2 else te.tanh(e)
        return te.if_then_else(i < 1000, e, 0.0)

    sch = tir.Schedule(te.create_prim_func([A, B, te.compute((1024,), body, name="C")]))
    (i,) = sch.get_loops(sch.get_block("C"))
    bo, bi = sch.split(i, factors=[None, 128])
    sch.bind(bo, "blockIdx.x")
    sch.bind(bi, "threadIdx.x")
    lib = tessera.build(sch.mod, target="opencl")
    a = RNG.uniform(0.0, 1.0, 1024).astype(np.float32)
    b = RNG.uniform(0.5, 1.0, 1024).astype(np.float32)
    c = np.zeros(1024, np.float32)
    lib(a, b, c)
    want = a
    for k in range(200):
        want = want * b + a if k % 2 else np.tanh(want)
    want[1000:] = 0
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
