"""split: loop structure, names, bindings and predicates against hand-built programs, and the
built kernels against numpy."""
import numpy as np

from tessera import te, tir
from tessera.ir import (Block, BlockRealize, Buffer, BufferStore, For, IterVar, PrimFunc, Range, Var,
                        const, seq)

from schedule_helpers import (assert_struct_equal, check_gemm, gemm, nest, rand, realize_of, run_built,
                              schedule, sym_gemm, with_body)


def _gemm_parts(f):
    return realize_of(f, "C").block


def test_split_exact_matches_hand_built_program():
    f = gemm()
    sch = schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, factors=[None, 8])
    assert [sch.get(x).loop_var.name for x in (io, ii)] == ["i_0", "i_1"]
    i0, i1, jv, kv = Var("i_0"), Var("i_1"), Var("j"), Var("k")
    body = For(i0, 0, 8, "serial", For(i1, 0, 8, "serial", For(jv, 0, 48, "serial", For(kv, 0, 32, "serial",
               BlockRealize([i0 * 8 + i1, jv, kv], True, _gemm_parts(f))))))
    assert_struct_equal(sch.mod["main"], with_body(f, body))
    assert "vi = T.axis.spatial(64, i_0 * 8 + i_1)" in sch.mod.script()
    check_gemm(sch)


def test_split_three_ways_flattens_the_binding():
    f = gemm()
    sch = schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    loops = sch.split(i, factors=[2, 4, 8])
    assert nest(sch.mod["main"], "C")[:3] == [("i_0", "serial", "2"), ("i_1", "serial", "4"),
                                              ("i_2", "serial", "8")]
    a, b, c = (Var(n) for n in ("i_0", "i_1", "i_2"))
    jv, kv = Var("j"), Var("k")
    body = For(a, 0, 2, "serial", For(b, 0, 4, "serial", For(c, 0, 8, "serial", For(jv, 0, 48, "serial",
               For(kv, 0, 32, "serial", BlockRealize([a * 32 + b * 8 + c, jv, kv], True, _gemm_parts(f)))))))
    assert_struct_equal(sch.mod["main"], with_body(f, body))
    assert len(loops) == 3
    check_gemm(sch)


def test_split_not_dividing_adds_a_predicate():
    f = gemm()
    sch = schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(i, factors=[None, 10])
    i0, i1, jv, kv = Var("i_0"), Var("i_1"), Var("j"), Var("k")
    body = For(i0, 0, 7, "serial", For(i1, 0, 10, "serial", For(jv, 0, 48, "serial", For(kv, 0, 32, "serial",
               BlockRealize([i0 * 10 + i1, jv, kv], i0 * 10 + i1 < 64, _gemm_parts(f))))))
    assert_struct_equal(sch.mod["main"], with_body(f, body))
    assert "T.where(i_0 * 10 + i_1 < 64)" in sch.mod.script()
    check_gemm(sch)


def test_split_with_product_larger_than_extent():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(j, factors=[5, 11])               # 55 >= 48
    assert nest(sch.mod["main"], "C")[1:3] == [("j_0", "serial", "5"), ("j_1", "serial", "11")]
    assert "T.where(j_0 * 11 + j_1 < 48)" in sch.mod.script()
    check_gemm(sch)


def test_split_reduction_loop_keeps_init_right():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    k0, k1 = sch.split(k, factors=[None, 6])    # 32 = 5 * 6 + 2: predicate on the reduction
    assert "vk = T.axis.reduce(32, k_0 * 6 + k_1)" in sch.mod.script()
    assert "T.where(k_0 * 6 + k_1 < 32)" in sch.mod.script()
    check_gemm(sch)
    sch.reorder(k0, i)                          # reduction outermost: init guarded, not hoisted
    check_gemm(sch)


def test_split_symbolic_extent_with_predicate():
    f = sym_gemm()
    sch = schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, factors=[None, 4])
    n = f.params[0].shape[0]
    assert sch.get(io).extent.script() == "(n + 3) // 4"
    text = sch.mod.script()
    assert "T.where(i_0 * 4 + i_1 < n)" in text
    i0, i1, jv, kv = Var("i_0"), Var("i_1"), Var("j"), Var("k")
    body = For(i0, 0, (n + 3) // 4, "serial", For(i1, 0, 4, "serial", For(jv, 0, 8, "serial",
               For(kv, 0, 16, "serial", BlockRealize([i0 * 4 + i1, jv, kv], i0 * 4 + i1 < n,
                                                     realize_of(f, "C").block)))))
    assert_struct_equal(sch.mod["main"], with_body(f, body))
    for rows in (1, 7, 8, 13):
        a, b = rand((rows, 16)), rand((16, 8))
        c = np.full((rows, 8), np.nan, "float32")
        run_built(sch, a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def test_split_symbolic_outer_factor():
    sch = schedule(sym_gemm())
    i = sch.get_loops(sch.get_block("C"))[0]
    io, ii = sch.split(i, factors=[3, None])
    assert sch.get(io).extent.value == 3 and sch.get(ii).extent.script() == "(n + 2) // 3"
    assert "T.where(i_0 * ((n + 2) // 3) + i_1 < n)" in sch.mod.script()
    for rows in (1, 5, 9):
        a, b = rand((rows, 16)), rand((16, 8))
        c = np.full((rows, 8), np.nan, "float32")
        run_built(sch, a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def test_split_with_sampled_factors():
    sch = schedule(gemm(), seed=4)
    i, j, k = sch.get_loops(sch.get_block("C"))
    factors = sch.sample_perfect_tile(j, n=3, max_innermost_factor=8)
    values = sch.get(factors)
    assert np.prod(values) == 48 and values[-1] <= 8
    loops = sch.split(j, factors=factors)
    assert [sch.get(x).extent.value for x in loops] == values
    assert "T.where" not in sch.mod.script()
    check_gemm(sch)


def test_split_preserve_unit_iters():
    f = gemm()
    kept = schedule(f)
    i = kept.get_loops(kept.get_block("C"))[0]
    kept.split(i, factors=[1, None])
    assert "vi = T.axis.spatial(64, i_0 * 64 + i_1)" in kept.mod.script()
    dropped = schedule(f)
    i = dropped.get_loops(dropped.get_block("C"))[0]
    dropped.split(i, factors=[1, None], preserve_unit_iters=False)
    assert nest(dropped.mod["main"], "C")[:2] == [("i_0", "serial", "1"), ("i_1", "serial", "64")]
    assert "vi = T.axis.spatial(64, i_1)" in dropped.mod.script()
    check_gemm(kept)
    check_gemm(dropped)


def test_split_loop_with_nonzero_min():
    A = te.placeholder((6, 12), name="A")
    k = te.reduce_axis((2, 11), name="k")
    S = te.compute((6,), lambda i: te.sum(A[i, k], axis=k), name="S")
    f = te.create_prim_func([A, S])
    sch = schedule(f)
    i, kk = sch.get_loops(sch.get_block("S"))
    assert sch.get(kk).min.value == 2
    k0, k1 = sch.split(kk, factors=[None, 4])   # extent 9 = 3 * 4 - 3
    assert sch.get(k0).min.value == 0 and sch.get(k0).extent.value == 3
    assert "T.where(k_0 * 4 + k_1 < 9)" in sch.mod.script()
    assert "vk = T.axis.reduce((2, 11), k_0 * 4 + k_1 + 2)" in sch.mod.script()
    a = rand((6, 12))
    s = np.full(6, np.nan, "float32")
    run_built(sch, a, s)
    np.testing.assert_allclose(s, a[:, 2:11].sum(1), rtol=1e-5, atol=1e-6)


def test_split_guards_every_block_under_the_loop():
    # one loop around two blocks (as compute_at makes): the predicate goes on both
    A = Buffer((10,), "float32", "A")
    B = Buffer((10,), "float32", "B")
    i = Var("i")
    vi1, vi2 = IterVar(Range(0, 10), Var("vi"), "data_par"), IterVar(Range(0, 10), Var("vi"), "data_par")
    b1 = BlockRealize([i], True, Block([vi1], [A.full_region()], [A.full_region()], "X",
                                       BufferStore(A, A[vi1.var] + 1.0, [vi1.var])))
    b2 = BlockRealize([i], True, Block([vi2], [A.full_region()], [B.full_region()], "Y",
                                       BufferStore(B, A[vi2.var] * 2.0, [vi2.var])))
    root = BlockRealize([], True, Block([], [], [], "root", For(i, 0, 10, "serial", seq(b1, b2))))
    f = PrimFunc([A, B], root)
    sch = schedule(f)
    (lp,) = sch.get_loops(sch.get_block("X"))
    sch.split(lp, factors=[None, 4])
    for name in ("X", "Y"):
        r = realize_of(sch.mod["main"], name)
        assert r.predicate.script() == "i_0 * 4 + i_1 < 10"
        assert r.iter_values[0].script() == "i_0 * 4 + i_1"
    a = rand((10,))
    b = np.full(10, np.nan, "float32")
    a0 = a.copy()
    run_built(sch, a, b)
    np.testing.assert_allclose(a, a0 + 1, rtol=1e-6)
    np.testing.assert_allclose(b, (a0 + 1) * 2, rtol=1e-6)


def test_split_then_split_again_names_and_results():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, factors=[None, 16])
    iio, iii = sch.split(ii, factors=[None, 4])
    assert [sch.get(x).loop_var.name for x in sch.get_loops(sch.get_block("C"))] == \
        ["i_0", "i_1_0", "i_1_1", "j", "k"]
    assert "vi = T.axis.spatial(64, i_0 * 16 + i_1_0 * 4 + i_1_1)" in sch.mod.script()
    check_gemm(sch)


def test_split_int64_loop():
    n = const(40, "int64")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    sch = schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    assert str(sch.get(i).loop_var.dtype) == "int64"
    io, ii = sch.split(i, factors=[None, 16])
    assert str(sch.get(io).loop_var.dtype) == "int64" and str(sch.get(io).extent.dtype) == "int64"
    a = rand((40,))
    b = np.full(40, np.nan, "float32")
    run_built(sch, a, b)
    np.testing.assert_allclose(b, a + 1, rtol=1e-6)


def test_split_output_is_listed_in_trace():
    sch = schedule(gemm())
    i = sch.get_loops(sch.get_block("C"))[0]
    sch.split(i, factors=[None, 8])
    assert str(sch.trace).splitlines()[-1] == (
        "  l4, l5 = sch.split(loop=l1, factors=[None, 8], preserve_unit_iters=True, "
        "disable_predication=False)")
    assert tir.Schedule  # the public name
