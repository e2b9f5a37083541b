"""Every precondition failure raises ScheduleError naming the block/loop and the reason, and
leaves the schedule (IR, handles, trace) exactly as it was."""
import pytest

from tessera import tir
from tessera.errors import ScheduleError
from tessera.ir import (Block, BlockRealize, Buffer, BufferStore, For, IRModule, IterVar, PrimFunc, Range,
                        Var, seq, structural_equal)

from schedule_helpers import chain, check_gemm, gemm, schedule, sym_gemm


def assert_refused(sch, action, message):
    mod, func = sch.mod, sch.mod["main"]
    text, n = str(sch.trace), len(sch.trace)
    with pytest.raises(ScheduleError, match=message):
        action()
    assert sch.mod["main"] is func and structural_equal(sch.mod, mod)
    assert len(sch.trace) == n and str(sch.trace) == text


@pytest.fixture
def g():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    return sch, i, j, k


# split -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("factors,message", [
    ([None, None], r"loop 'i': at most one factor may be None"),
    ([8, 0], r"loop 'i': factors\[1\] is 0; factors must be positive"),
    ([-1, 8], r"loop 'i': factors\[0\] is -1"),
    ([2, 3], r"the factors of loop 'i' multiply to 2 \* 3 = 6, which is not at least its extent 64"),
    ([], r"factors of loop 'i' must be a non-empty list"),
    (8, r"factors of loop 'i' must be a non-empty list"),
    (["4", None], r"factors\[0\] of loop 'i' must be an int or an ExprRV, got str"),
    ([True, None], r"factors\[0\] of loop 'i' must be an int or an ExprRV, got bool"),
])
def test_split_bad_factors(g, factors, message):
    sch, i, j, k = g
    assert_refused(sch, lambda: sch.split(i, factors), "split: " + message)
    assert sch.get(i).loop_var.name == "i"          # the handle is still valid
    check_gemm(sch)


def test_split_refuses_marked_or_annotated_loops(g):
    sch, i, j, k = g
    sch.parallel(i)
    assert_refused(sch, lambda: sch.split(i, [None, 4]), r"split: loop 'i' is parallel; split loops before marking")
    sch.annotate(j, "pragma_auto_unroll_max_step", 8)
    assert_refused(sch, lambda: sch.split(j, [None, 4]), r"split: loop 'j' has annotations \['pragma_auto")
    check_gemm(sch)


def test_split_refusals_on_bound_loops_and_predicates():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.bind(j, "vthread.y")
    assert_refused(sch, lambda: sch.split(j, [None, 4]), r"split: loop 'j' is bound to vthread.y")
    assert_refused(sch, lambda: sch.split(i, [None, 10], disable_predication=True),
                   r"split: the factors \[7, 10\] of loop 'i' do not provably divide its extent 64; "
                   r"disable_predication=True needs an exact split")
    s2 = schedule(sym_gemm())
    i2 = s2.get_loops(s2.get_block("C"))[0]
    assert_refused(s2, lambda: s2.split(i2, [4, 8]), r"multiply to 4 \* 8 = 32, which is not at least its extent n")


def test_split_refuses_predicate_without_blocks():
    A = Buffer((10,), "float32", "A")
    i = Var("i")
    f = PrimFunc([A], For(i, 0, 10, "serial", BufferStore(A, A[i] + 1.0, [i])))
    sch = schedule(f)
    from tessera.tir.schedule.handles import LoopRV  # a loop outside any block: reach it by hand

    rv = sch._new_loop_rv("main", i)
    assert isinstance(rv, LoopRV)
    assert_refused(sch, lambda: sch.split(rv, [None, 4]), r"split: loop 'i' has statements outside blocks")
    sch.split(rv, [None, 5])                          # exact: fine
    assert "i_0 * 5 + i_1" in sch.mod.script()


# fuse ------------------------------------------------------------------------------------------
def test_fuse_refusals(g):
    sch, i, j, k = g
    assert_refused(sch, lambda: sch.fuse(i, k), r"fuse: loops 'i' and 'k' are not adjacent: 'j' lies between them")
    assert_refused(sch, lambda: sch.fuse(j, i), r"fuse: loops must be given from outer to inner: 'i' encloses 'j'")
    assert_refused(sch, lambda: sch.fuse(i, i), r"fuse: loop 'i' is given twice")
    assert_refused(sch, lambda: sch.fuse(), r"fuse: give at least one loop")
    sch.parallel(j)
    assert_refused(sch, lambda: sch.fuse(i, j), r"fuse: loop 'j' is parallel")
    i0, i1 = sch.split(i, [None, 8])
    assert_refused(sch, lambda: sch.fuse(i0, k), r"fuse: loops 'i_0' and 'k' are not adjacent: 'i_1', 'j' lie between")
    check_gemm(sch)


def test_fuse_refuses_loops_of_different_nests_and_functions():
    sch = schedule(chain())
    bi, bj = sch.get_loops(sch.get_block("B"))
    ci, cj = sch.get_loops(sch.get_block("C"))
    assert_refused(sch, lambda: sch.fuse(bi, cj), r"fuse: loops 'i' and 'j' are not nested in one another")
    mod = IRModule({"main": gemm(), "other": gemm()})
    s2 = tir.Schedule(mod)
    a = s2.get_loops(s2.get_block("C"))[0]
    b = s2.get_loops(s2.get_block("C", func_name="other"))[1]
    assert_refused(s2, lambda: s2.fuse(a, b), r"fuse: loop 'j' is in function 'other', not 'main'")


def _two_blocks_under_loop():
    """for i: (for j: X[i, j] = 1) ; Y[i] = 2 -- i's body is a sequence."""
    X = Buffer((4, 3), "float32", "X")
    Y = Buffer((4,), "float32", "Y")
    i, j = Var("i"), Var("j")
    xi, xj, yi = (IterVar(Range(0, e), Var(n), "data_par") for n, e in (("vi", 4), ("vj", 3), ("vi", 4)))
    bx = BlockRealize([i, j], True, Block([xi, xj], [], [X.full_region()], "X",
                                          BufferStore(X, 1.0, [xi.var, xj.var])))
    by = BlockRealize([i], True, Block([yi], [], [Y.full_region()], "Y", BufferStore(Y, 2.0, [yi.var])))
    body = For(i, 0, 4, "serial", seq(For(j, 0, 3, "serial", bx), by))
    return PrimFunc([X, Y], BlockRealize([], True, Block([], [], [], "root", body)))


def test_fuse_and_reorder_refuse_imperfect_nests():
    sch = schedule(_two_blocks_under_loop())
    i, j = sch.get_loops(sch.get_block("X"))
    assert_refused(sch, lambda: sch.fuse(i, j), r"fuse: loop 'j' is not the only statement in the body of loop 'i'")
    assert_refused(sch, lambda: sch.reorder(j, i),
                   r"reorder: the loops from 'i' to 'j' are not a perfect nest: the body of 'i' is a sequence "
                   r"of 2 statements")


def _triangular():
    """for i in 0..4: for j in 0..i+1: X[i, j] = 1."""
    X = Buffer((4, 4), "float32", "X")
    i, j = Var("i"), Var("j")
    xi, xj = IterVar(Range(0, 4), Var("vi"), "data_par"), IterVar(Range(0, 4), Var("vj"), "data_par")
    bx = BlockRealize([i, j], True, Block([xi, xj], [], [X.full_region()], "X",
                                          BufferStore(X, 1.0, [xi.var, xj.var])))
    body = For(i, 0, 4, "serial", For(j, 0, i + 1, "serial", bx))
    return PrimFunc([X], BlockRealize([], True, Block([], [], [], "root", body)))


def test_dependent_loop_ranges_are_refused():
    sch = schedule(_triangular())
    i, j = sch.get_loops(sch.get_block("X"))
    assert_refused(sch, lambda: sch.fuse(i, j), r"fuse: the range of loop 'j' depends on an outer loop being fused")
    assert_refused(sch, lambda: sch.reorder(j, i),
                   r"reorder: the range of loop 'j' depends on 'i', which the new order puts inside it")


def test_reorder_refusals():
    sch = schedule(chain())
    bi, bj = sch.get_loops(sch.get_block("B"))
    ci, cj = sch.get_loops(sch.get_block("C"))
    assert_refused(sch, lambda: sch.reorder(bi, cj), r"reorder: loops 'i' and 'j' are not in one loop nest")
    assert_refused(sch, lambda: sch.reorder(bj, bi, bj), r"reorder: loop 'j' is given twice")
    # a block with an opaque iterator
    X = Buffer((4, 3), "float32", "X")
    i, j = Var("i"), Var("j")
    xi, xj = IterVar(Range(0, 4), Var("vi"), "data_par"), IterVar(Range(0, 3), Var("vj"), "opaque")
    bx = BlockRealize([i, j], True, Block([xi, xj], [], [X.full_region()], "X",
                                          BufferStore(X, 1.0, [xi.var, xj.var])))
    f = PrimFunc([X], BlockRealize([], True, Block([], [], [], "root",
                                                   For(i, 0, 4, "serial", For(j, 0, 3, "serial", bx)))))
    s2 = schedule(f)
    a, b = s2.get_loops(s2.get_block("X"))
    assert_refused(s2, lambda: s2.reorder(b, a), r"reorder: block 'X' under the loops has a opaque iterator 'vj'")
    assert_refused(s2, lambda: s2.parallel(b), r"parallel: loop 'j' cannot be parallelized: block 'X' binds "
                                               r"its opaque iterator 'vj'")


# loop kinds ------------------------------------------------------------------------------------
def test_parallel_vectorize_bind_refuse_reduction_loops(g):
    sch, i, j, k = g
    msg = r"block 'C' binds its reduction iterator 'vk' to k, which uses 'k'"
    assert_refused(sch, lambda: sch.parallel(k), r"parallel: loop 'k' cannot be parallelized: " + msg)
    assert_refused(sch, lambda: sch.vectorize(k), r"vectorize: loop 'k' cannot be vectorized: " + msg)
    assert_refused(sch, lambda: sch.bind(k, "blockIdx.x"), r"bind: loop 'k' cannot be bound to blockIdx.x: " + msg)
    assert_refused(sch, lambda: sch.bind(i, "warp.x"), r"bind: thread_axis must be one of blockIdx.x")
    k0, k1 = sch.split(k, [None, 8])
    fused = sch.fuse(i, j)
    assert_refused(sch, lambda: sch.parallel(k1),
                   r"block 'C' binds its reduction iterator 'vk' to k_0 \* 8 \+ k_1, which uses 'k_1'")
    sch.parallel(fused)
    sch.unroll(k1)                                   # unrolling a reduction loop is fine
    check_gemm(sch)


# annotations -----------------------------------------------------------------------------------
def test_annotation_refusals(g):
    sch, i, j, k = g
    b = sch.get_block("C")
    assert_refused(sch, lambda: sch.annotate(i, "", 1), r"annotate: ann_key must be a non-empty string")
    assert_refused(sch, lambda: sch.annotate(i, "x", {"a": 1}), r"annotate: cannot record argument \{'a': 1\}")
    assert_refused(sch, lambda: sch.annotate(i, "x", [1, None]), r"annotate loop 'i': an annotation value is")
    assert_refused(sch, lambda: sch.annotate(b, "x", float("nan")), r"annotate block 'C': annotation value nan")
    assert_refused(sch, lambda: sch.unannotate(b, "x"), r"unannotate: block 'C' has no annotation 'x' \(it has none\)")
    sch.annotate(i, "y", 1)
    assert_refused(sch, lambda: sch.unannotate(i, "x"), r"unannotate: loop 'i' has no annotation 'x' \(it has 'y'\)")
    assert_refused(sch, lambda: sch.annotate(3, "x", 1), r"annotate: expected a BlockRV or a LoopRV, got int 3")


def test_failed_primitive_keeps_handles_and_later_work(g):
    sch, i, j, k = g
    with pytest.raises(ScheduleError):
        sch.fuse(i, k)
    io, ii = sch.split(i, [None, 16])
    with pytest.raises(ScheduleError):
        sch.split(ii, [3, 3])
    sch.reorder(j, io)
    sch.vectorize(ii)
    fresh = schedule(gemm())
    sch.trace.apply_to_schedule(fresh)
    assert structural_equal(fresh.mod, sch.mod)
    check_gemm(sch)
