"""fuse and reorder: program structure against hand-built programs, and results against numpy."""
import numpy as np

from tessera.ir import BlockRealize, For, Var

from schedule_helpers import (assert_struct_equal, check_gemm, gemm, nest, rand, realize_of, run_built,
                              schedule, sym_gemm, with_body)


def test_fuse_two_loops_matches_hand_built_program():
    f = gemm()
    sch = schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    fused = sch.fuse(i, j)
    assert sch.get(fused).loop_var.name == "i_j_fused" and sch.get(fused).extent.value == 3072
    fv, kv = Var("i_j_fused"), Var("k")
    body = For(fv, 0, 3072, "serial", For(kv, 0, 32, "serial",
               BlockRealize([fv // 48, fv % 48, kv], True, realize_of(f, "C").block)))
    assert_struct_equal(sch.mod["main"], with_body(f, body))
    check_gemm(sch)


def test_split_then_fuse_gives_clean_indices():
    f = gemm()
    sch = schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, factors=[None, 8])
    fused = sch.fuse(io, ii)
    fv, jv, kv = Var("f"), Var("j"), Var("k")
    body = For(fv, 0, 64, "serial", For(jv, 0, 48, "serial", For(kv, 0, 32, "serial",
               BlockRealize([fv, jv, kv], True, realize_of(f, "C").block))))
    assert_struct_equal(sch.mod["main"], with_body(f, body))
    assert sch.get(fused).loop_var.name == "i_0_i_1_fused"
    check_gemm(sch)


def test_fuse_three_loops_across_the_reduction():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    fused = sch.fuse(i, j, k)
    assert sch.get(fused).extent.value == 64 * 48 * 32
    text = sch.mod.script()
    assert "vi = T.axis.spatial(64, i_j_k_fused // 1536)" in text
    assert "vj = T.axis.spatial(48, i_j_k_fused % 1536 // 32)" in text
    assert "vk = T.axis.reduce(32, i_j_k_fused % 32)" in text
    check_gemm(sch)


def test_fuse_keeps_split_predicate():
    sch = schedule(gemm())
    i = sch.get_loops(sch.get_block("C"))[0]
    io, ii = sch.split(i, factors=[None, 10])
    fused = sch.fuse(io, ii)
    assert sch.get(fused).extent.value == 70
    assert "T.where(i_0_i_1_fused < 64)" in sch.mod.script()
    assert "vi = T.axis.spatial(64, i_0_i_1_fused)" in sch.mod.script()
    check_gemm(sch)


def test_fuse_symbolic_extents():
    sch = schedule(sym_gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    fused = sch.fuse(i, j)
    assert sch.get(fused).extent.script() == "n * 8"
    for rows in (1, 6):
        a, b = rand((rows, 16)), rand((16, 8))
        c = np.full((rows, 8), np.nan, "float32")
        run_built(sch, a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def test_fuse_unit_loops_and_single_loop():
    sch = schedule(gemm())
    i = sch.get_loops(sch.get_block("C"))[0]
    io, ii = sch.split(i, factors=[1, None])
    fused = sch.fuse(io, ii, preserve_unit_iters=False)
    assert sch.get(fused).extent.value == 64
    assert "vi = T.axis.spatial(64, i_0_i_1_fused)" in sch.mod.script()
    single = sch.fuse(sch.get_loops(sch.get_block("C"))[1])
    assert sch.get(single).loop_var.name == "j_fused"
    check_gemm(sch)


def test_reorder_matches_hand_built_program():
    f = gemm()
    sch = schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(k, i)                      # i and k swap places, j stays in the middle
    assert [x[0] for x in nest(sch.mod["main"], "C")] == ["k", "j", "i"]
    iv, jv, kv = Var("i"), Var("j"), Var("k")
    body = For(kv, 0, 32, "serial", For(jv, 0, 48, "serial", For(iv, 0, 64, "serial",
               BlockRealize([iv, jv, kv], True, realize_of(f, "C").block))))
    assert_struct_equal(sch.mod["main"], with_body(f, body))
    check_gemm(sch)


def test_reorder_tiles_and_keeps_loop_objects():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, factors=[None, 8])
    jo, ji = sch.split(j, factors=[None, 16])
    before = {id(sch.get(x).loop_var) for x in (io, ii, jo, ji, k)}
    sch.reorder(io, jo, k, ii, ji)
    assert [x[0] for x in nest(sch.mod["main"], "C")] == ["i_0", "j_0", "k", "i_1", "j_1"]
    assert {id(sch.get(x).loop_var) for x in (io, ii, jo, ji, k)} == before
    check_gemm(sch)
    sch.reorder(ji)                        # one loop: nothing to do
    assert [x[0] for x in nest(sch.mod["main"], "C")] == ["i_0", "j_0", "k", "i_1", "j_1"]
    sch.reorder(ji, ii)                    # two inner loops swap
    assert [x[0] for x in nest(sch.mod["main"], "C")] == ["i_0", "j_0", "k", "j_1", "i_1"]
    check_gemm(sch)


def test_reorder_keeps_loop_kinds_and_annotations():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.parallel(i)
    sch.annotate(j, "pragma_auto_unroll_max_step", 4)
    sch.reorder(j, i)
    assert nest(sch.mod["main"], "C")[:2] == [("j", "serial", "48"), ("i", "parallel", "64")]
    assert sch.get(j).annotations["pragma_auto_unroll_max_step"].value == 4
    check_gemm(sch)


def test_fuse_loops_with_nonzero_min():
    from tessera import te

    A = te.placeholder((5, 12), name="A")
    k = te.reduce_axis((3, 10), name="k")
    S = te.compute((5,), lambda i: te.sum(A[i, k], axis=k), name="S")
    sch = schedule(te.create_prim_func([A, S]))
    i, kk = sch.get_loops(sch.get_block("S"))
    fused = sch.fuse(i, kk)
    assert sch.get(fused).extent.value == 35 and sch.get(fused).min.value == 0
    text = sch.mod.script()
    assert "vi = T.axis.spatial(5, i_k_fused // 7)" in text
    assert "vk = T.axis.reduce((3, 10), i_k_fused % 7 + 3)" in text
    a = rand((5, 12))
    s = np.full(5, np.nan, "float32")
    run_built(sch, a, s)
    np.testing.assert_allclose(s, a[:, 3:10].sum(1), rtol=1e-5, atol=1e-6)
