"""unroll_loop: constant unrolled loops are copied out; symbolic/long ones and auto-unroll limits."""
import numpy as np
import pytest

from tessera.errors import TesseraError
from tessera.ir import (Allocate, Buffer, BufferStore, For, IntImm, LetStmt, PrimFunc, Var, seq)
from tessera.tir.transform import lower_blocks, unroll_loop
from tir_builders import assert_same, find, matmul


def test_constant_unrolled_loop_is_copied_out():
    A = Buffer((4, 3), "float32", "A")
    i, j = Var("i"), Var("j")
    f = PrimFunc([A], For(i, 0, 4, "serial", For(j, 0, 3, "unrolled", BufferStore(A, A[i, j] * 2.0, [i, j]))))
    g = unroll_loop(f)
    loops = find(g.body, For)
    assert len(loops) == 1 and loops[0].loop_var is i
    stores = find(g.body, BufferStore)
    assert [s.indices[1].value for s in stores] == [0, 1, 2]
    (a,) = assert_same(f, g)


def test_nonzero_min_and_nested_unrolled_loops():
    A = Buffer((8,), "float32", "A")
    i, j = Var("i"), Var("j")
    f = PrimFunc([A], For(i, 1, 2, "unrolled", For(j, 2, 3, "unrolled", BufferStore(A, A[i + j] + 1.0, [i + j]))))
    g = unroll_loop(f)
    assert not find(g.body, For) and len(find(g.body, BufferStore)) == 6
    assert_same(f, g)


def test_symbolic_and_long_unrolled_loops_stay():
    n = Var("n")
    A = Buffer((100,), "float32", "A")
    i = Var("i")
    for extent, params in ((n, [A, n]), (100, [A])):
        f = PrimFunc(params, For(i, 0, extent, "unrolled", BufferStore(A, A[i] + 1.0, [i])))
        g = unroll_loop(f)
        assert g is f and g.body.kind == "unrolled"
    f = PrimFunc([A], For(i, 0, 100, "unrolled", BufferStore(A, A[i] + 1.0, [i])))
    assert not find(unroll_loop(f, max_extent=128).body, For)


def test_definitions_are_fresh_in_every_copy():
    A = Buffer((4, 2), "float32", "A")
    i, k = Var("i"), Var("k")
    t = Var("t", "float32")
    T = Buffer((2,), "float32", "T", scope="local")
    body = Allocate(T, seq(For(k, 0, 2, "serial", LetStmt(t, A[i, k] * 3.0, BufferStore(T, t, [k]))),
                           For(k, 0, 2, "serial", BufferStore(A, T[k] + 1.0, [i, k]))))
    f = PrimFunc([A], For(i, 0, 4, "unrolled", body))
    g = unroll_loop(f)
    lets = find(g.body, LetStmt)
    allocs = find(g.body, Allocate)
    assert len(lets) == 4 and len({id(x.var) for x in lets}) == 4
    assert len(allocs) == 4 and len({id(x.buffer) for x in allocs}) == 4
    for alloc in allocs:  # each copy stores into its own buffer
        assert {id(s.buffer) for s in find(alloc.body, BufferStore) if s.buffer.name == "T"} == {id(alloc.buffer)}
    (a,) = assert_same(f, g)


def test_auto_unroll_pragma():
    A = Buffer((8, 4), "float32", "A")
    i, j = Var("i"), Var("j")

    def func(max_step):
        inner = For(j, 0, 4, "serial", BufferStore(A, A[i, j] + 1.0, [i, j]))
        return PrimFunc([A], For(i, 0, 8, "serial", inner,
                                 annotations={"pragma_auto_unroll_max_step": max_step}))

    g = unroll_loop(func(16))  # 4 steps inner fits, 32 for the whole nest does not
    loops = find(g.body, For)
    assert len(loops) == 1 and loops[0].loop_var is i and len(find(g.body, BufferStore)) == 4
    assert_same(func(16), g)
    g = unroll_loop(func(IntImm("int32", 32)))  # the whole nest fits: fully unrolled
    assert not find(g.body, For) and len(find(g.body, BufferStore)) == 32
    assert_same(func(32), g)
    assert unroll_loop(func(2)).body.body.kind == "serial"  # nothing fits
    with pytest.raises(TesseraError, match="pragma_auto_unroll_max_step"):
        unroll_loop(func("many"))


def test_auto_unroll_leaves_other_kinds_and_symbolic_loops():
    n = Var("n")
    A = Buffer((n, 4), "float32", "A")
    i, j = Var("i"), Var("j")
    inner = For(j, 0, 4, "parallel", BufferStore(A, A[i, j] + 1.0, [i, j]))
    f = PrimFunc([A], For(i, 0, n, "serial", inner, annotations={"pragma_auto_unroll_max_step": 64}))
    assert unroll_loop(f) is f


def test_unroll_refuses_blocks_and_bad_limit():
    with pytest.raises(TesseraError, match="lower_blocks"):
        unroll_loop(matmul())
    with pytest.raises(TesseraError, match="max_extent"):
        unroll_loop(lower_blocks(matmul()), max_extent=-1)


def test_unrolled_reduction_matches_numpy():
    f = lower_blocks(matmul(3, 4, 5, order="ijk"))
    k_loop = f.body.body.body.seq[1]
    f = f.with_body(f.body.replace(body=f.body.body.replace(
        body=f.body.body.body.replace(seq=(f.body.body.body.seq[0], k_loop.replace(kind="unrolled"))))))
    g = unroll_loop(f)
    assert len(find(g.body, For)) == 2
    a, b, c = assert_same(f, g)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
