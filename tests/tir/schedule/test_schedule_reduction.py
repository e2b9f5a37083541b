"""decompose_reduction and rfactor: structure against hand-built programs, names and handles,
predicates, built kernels against numpy (sum, max, conditional sum), parallel/vectorized factored
axes, trace replay, refusals."""
import json

import numpy as np
import pytest

from tessera import te, tir
from tessera.errors import ScheduleError
from tessera.ir import Block, BlockRealize, BufferStore, For, IterVar, Range, Var, seq, structural_equal
from tessera.tir.schedule import Trace

from schedule_helpers import (assert_struct_equal, check_gemm, gemm, nest, rand, realize_of, run_built,
                              schedule, with_body)


def replays(sch, func):
    fresh = tir.Schedule(func)
    Trace.apply_json_to_schedule(json.loads(json.dumps(sch.trace.as_json())), fresh)
    return structural_equal(fresh.mod, sch.mod)


def row_reduce(n=6, m=20, kind="sum"):
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    if kind == "sum":
        B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    elif kind == "max":
        B = te.compute((n,), lambda i: te.max(A[i, k], axis=k), name="B")
    else:
        B = te.compute((n,), lambda i: te.sum(A[i, k] * 2.0, axis=k, where=k % 3 != 1), name="B")
    return te.create_prim_func([A, B])


def row_ref(a, kind):
    if kind == "sum":
        return a.sum(1)
    if kind == "max":
        return a.max(1)
    keep = np.arange(a.shape[1]) % 3 != 1
    return (a[:, keep] * 2).sum(1)


def check_rows(obj, kind="sum", n=6, m=20):
    a = rand((n, m))
    b = np.full(n, np.nan, "float32")
    run_built(obj, a, b)
    np.testing.assert_allclose(b, row_ref(a, kind), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# decompose_reduction
# ---------------------------------------------------------------------------------------------
def test_decompose_reduction_matches_hand_built_program():
    f = gemm(8, 6, 4)
    sch = schedule(f)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    init = sch.decompose_reduction(c, j)
    old = realize_of(f, "C").block
    vi, vj = Var("vi"), Var("vj")
    C = f.params[2]
    init_block = Block([IterVar(old.iter_vars[0].dom, vi, "data_par"), IterVar(old.iter_vars[1].dom, vj, "data_par")],
                       (), (old.writes[0].__class__(C, (Range.from_min_extent(vi, 1), Range.from_min_extent(vj, 1))),),
                       "C_init", BufferStore(C, 0.0, [vi, vj]))
    update = old.replace(init=None, name_hint="C_update", reads=old.writes + old.reads)
    iv, jv, kv, ji = Var("i"), Var("j"), Var("k"), Var("j_init")
    body = For(iv, 0, 8, "serial", seq(For(ji, 0, 6, "serial", BlockRealize([iv, ji], True, init_block)),
                                       For(jv, 0, 6, "serial", For(kv, 0, 4, "serial",
                                                                   BlockRealize([iv, jv, kv], True, update)))))
    assert_struct_equal(sch.mod["main"], with_body(f, body))
    # the handle of C follows the update block; the init block is returned
    assert sch.get(c).name_hint == "C_update" and sch.get(init).name_hint == "C_init"
    check_gemm(sch, 8, 6, 4)
    assert replays(sch, f)


def test_decompose_reduction_at_the_reduction_loop_and_with_split_predicates():
    f = gemm()
    sch = schedule(f)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    jo, ji = sch.split(j, factors=[None, 10])     # 48 = 4 * 10 + 8: predicate on the spatial split
    ko, ki = sch.split(k, factors=[None, 5])      # 32 = 6 * 5 + 2: predicate on the reduction split
    sch.reorder(i, jo, ko, ji, ki)
    sch.decompose_reduction(c, ko)
    text = sch.mod.script()
    assert nest(sch.mod["main"], "C_init") == [("i", "serial", "64"), ("j_0", "serial", "5"),
                                               ("j_1_init", "serial", "10")]
    assert "T.where(j_0 * 10 + j_1_init < 48)" in text     # the spatial conjunct only
    check_gemm(sch)
    # the update block no longer has an init
    with pytest.raises(ScheduleError, match=r"block 'C_update' is not a reduction block with an init"):
        sch.decompose_reduction(sch.get_block("C_update"), i)


def test_decompose_reduction_refusals():
    sch = schedule(gemm())
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    sch.reorder(k, i)
    with pytest.raises(ScheduleError, match=r"loop 'k' outside loop 'i' drives the reduction iterator 'vk' of block 'C'"):
        sch.decompose_reduction(c, i)
    A = te.placeholder((4, 3), name="A")
    B = te.compute((4, 3), lambda i, j: A[i, j] + 1.0, name="B")
    k = te.reduce_axis((0, 3), name="k")
    C = te.compute((4,), lambda i: te.sum(B[i, k], axis=k), name="C")
    s3 = schedule(te.create_prim_func([A, C]))
    bi, bj = s3.get_loops(s3.get_block("B"))
    with pytest.raises(ScheduleError, match=r"block 'B' is not a reduction block with an init"):
        s3.decompose_reduction(s3.get_block("B"), bi)
    with pytest.raises(ScheduleError, match=r"loop 'i' is not a loop around block 'C'"):
        s3.decompose_reduction(s3.get_block("C"), bi)


def test_decompose_reduction_init_predicate_is_taken_at_the_reduction_start():
    # a split reduction whose factor exceeds the extent: only k_1 < 5 exists
    f = row_reduce(3, 5)
    sch = schedule(f)
    b = sch.get_block("B")
    i, k = sch.get_loops(b)
    k0, k1 = sch.split(k, factors=[None, 8])
    sch.reorder(k1, i)
    sch.decompose_reduction(b, k1)
    assert "C_init" not in sch.mod.script() and "B_init" in sch.mod.script()
    check_rows(sch, "sum", 3, 5)


# ---------------------------------------------------------------------------------------------
# rfactor
# ---------------------------------------------------------------------------------------------
def test_rfactor_matches_hand_built_program():
    f = row_reduce(4, 8)
    sch = schedule(f)
    b = sch.get_block("B")
    i, k = sch.get_loops(b)
    ko, ki = sch.split(k, factors=[2, 4])
    rf = sch.rfactor(ki, 0)
    A, B = f.params
    B_rf = sch.mod["main"].body.block.alloc_buffers[0]
    assert (B_rf.name, [s.value for s in B_rf.shape]) == ("B_rf", [4, 4])
    vki, vi, vko = Var("vk_1"), Var("vi"), Var("vk_0")
    rf_block = Block([IterVar(Range(0, 4), vki, "data_par"), IterVar(Range(0, 4), vi, "data_par"),
                      IterVar(Range(0, 2), vko, "reduce")],
                     (A.full_region().__class__(A, (Range.from_min_extent(vi, 1),
                                                    Range.from_min_extent(vko * 4 + vki, 1))),),
                     (B_rf.full_region().__class__(B_rf, (Range.from_min_extent(vki, 1), Range.from_min_extent(vi, 1))),),
                     "B_rf", BufferStore(B_rf, B_rf[vki, vi] + A[vi, vko * 4 + vki], [vki, vi]),
                     BufferStore(B_rf, 0.0, [vki, vi]))
    wk, wi = Var("vk_1"), Var("vi")
    wb_block = Block([IterVar(Range(0, 4), wk, "reduce"), IterVar(Range(0, 4), wi, "data_par")],
                     (B_rf.full_region().__class__(B_rf, (Range.from_min_extent(wk, 1), Range.from_min_extent(wi, 1))),),
                     (B.full_region().__class__(B, (Range.from_min_extent(wi, 1),)),),
                     "B", BufferStore(B, B[wi] + B_rf[wk, wi], [wi]), BufferStore(B, 0.0, [wi]))
    i1, k0, k1, i2, k12 = Var("i"), Var("k_0"), Var("k_1"), Var("i"), Var("k_1")
    body = seq(For(i1, 0, 4, "serial", For(k0, 0, 2, "serial", For(k1, 0, 4, "serial",
                                                                   BlockRealize([k1, i1, k0], True, rf_block)))),
               For(i2, 0, 4, "serial", For(k12, 0, 4, "serial", BlockRealize([k12, i2], True, wb_block))))
    root = f.body.block
    want = f.with_body(f.body.replace(block=root.replace(body=body, alloc_buffers=(B_rf,))))
    assert_struct_equal(sch.mod["main"], want)
    assert sch.get(rf).name_hint == "B_rf" and sch.get(b).name_hint == "B"
    # the rfactor loop handle now drives the write-back block's reduction
    assert sch.get(ki).loop_var.name == "k_1"
    with pytest.raises(ScheduleError, match=r"loop 'k_0' is no longer valid: rfactor of loop 'k_1'"):
        sch.get(ko)
    check_rows(sch, "sum", 4, 8)
    assert replays(sch, f)


@pytest.mark.parametrize("kind", ["sum", "max", "where"])
def test_rfactor_then_vectorize_and_parallelize_the_factored_axis(kind):
    f = row_reduce(6, 20, kind)
    sch = schedule(f)
    b = sch.get_block("B")
    i, k = sch.get_loops(b)
    ko, ki = sch.split(k, factors=[None, 8])       # 20 = 3 * 8 - 4: predicate on the reduction
    rf = sch.rfactor(ki, 1)
    ri, rko, rki = sch.get_loops(rf)
    sch.reorder(ri, rki, rko)
    sch.parallel(ri)
    sch.vectorize(rki) if kind != "max" else sch.unroll(rki)
    assert [s.value for s in sch.get(rf).writes[0].buffer.shape] == [6, 8]
    check_rows(sch, kind)
    assert replays(sch, f)


def test_rfactor_of_an_outer_reduction_loop_with_negative_factor_axis():
    f = gemm(8, 6, 12)
    sch = schedule(f)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    ko, ki = sch.split(k, factors=[3, None])
    rf = sch.rfactor(ko, -1)
    assert [s.value for s in sch.get(rf).writes[0].buffer.shape] == [8, 6, 3]
    assert nest(sch.mod["main"], "C") == [("i", "serial", "8"), ("j", "serial", "6"), ("k_0", "serial", "3")]
    check_gemm(sch, 8, 6, 12)


def test_rfactor_with_an_empty_partial_survives_compute_at():
    # regression (found by the property test): 5 = 4 tiles of 2 with the last one empty; the tile
    # guard lives in the rf block's body, so every partial is initialized and compute_at, which
    # regenerates the loops, cannot lose it
    f = row_reduce(3, 5)
    sch = schedule(f)
    b = sch.get_block("B")
    i, k = sch.get_loops(b)
    k0, k1 = sch.split(k, factors=[4, None])
    rf = sch.rfactor(k0, 0)
    assert "if vk_0 * 2 + vk_1 < 5:" in sch.mod.script()
    check_rows(sch, "sum", 3, 5)
    wi, wk = sch.get_loops(b)
    sch.compute_at(rf, wi)
    check_rows(sch, "sum", 3, 5)
    s2 = schedule(f)
    i, k = s2.get_loops(s2.get_block("B"))
    k0, k1 = s2.split(k, factors=[4, None])
    rf2 = s2.rfactor(k0, 0)
    s2.reverse_compute_at(s2.get_block("B"), s2.get_loops(rf2)[0])
    check_rows(s2, "sum", 3, 5)


def test_rfactor_refusals():
    f = gemm(8, 6, 12)
    sch = schedule(f)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    with pytest.raises(ScheduleError, match=r"rfactor: loop 'j' drives a data-parallel iterator of block 'C'"):
        sch.rfactor(j, 0)
    with pytest.raises(ScheduleError, match=r"'C' has 2 dimensions, so factor_axis must be in \[-3, 2\], got 3"):
        sch.rfactor(k, 3)
    sch.parallel(i)
    ko, ki = sch.split(k, factors=[None, 4])
    sch.unroll(ki)
    with pytest.raises(ScheduleError, match=r"rfactor: loop 'k_1' is unrolled; rfactor needs a plain serial loop"):
        sch.rfactor(ki, 0)
    A = te.placeholder((4, 6), name="A")
    kk = te.reduce_axis((0, 6), name="k")
    B = te.compute((4,), lambda r: te.sum(A[r, kk], axis=kk, init=1.0), name="B")
    s2 = schedule(te.create_prim_func([A, B]))
    with pytest.raises(ScheduleError, match=r"block 'B' is a sum starting from T.float32\(1.0\), not 0"):
        s2.rfactor(s2.get_loops(s2.get_block("B"))[1], 0)
    # two blocks under the loop
    A = te.placeholder((4, 6), name="A")
    B = te.compute((4, 6), lambda r, c: A[r, c] * 2.0, name="B")
    k3 = te.reduce_axis((0, 6), name="k")
    C = te.compute((4,), lambda r: te.sum(B[r, k3], axis=k3), name="C")
    s3 = schedule(te.create_prim_func([A, C]))
    r, kk3 = s3.get_loops(s3.get_block("C"))
    s3.compute_at(s3.get_block("B"), r)
    with pytest.raises(ScheduleError, match=r"rfactor: loop 'r' must hold exactly one block, it holds 2"):
        s3.rfactor(r, 0)
