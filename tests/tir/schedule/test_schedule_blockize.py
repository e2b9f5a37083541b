"""blockize: the outer block against hand-built programs (bindings divided into outer and inner
parts, the reduction init moved out, predicates split), numeric results, traces and refusals."""
import numpy as np
import pytest

from tessera import te, tir
from tessera.errors import ScheduleError
from tessera.ir import (Block, BlockRealize, Buffer, BufferRegion, BufferStore, For, IterVar, PrimFunc, Range, Var,
                        const, seq, structural_equal)

from schedule_helpers import (assert_struct_equal, check_gemm, gemm, nest, rand, realize_of, run_built,
                              schedule, with_body)


def _tiled_gemm(order=("i_0", "j_0", "k_0", "i_1", "j_1", "k_1"), kf=8):
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 8])
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(k, [None, kf])
    loops = {"i_0": i0, "i_1": i1, "j_0": j0, "j_1": j1, "k_0": k0, "k_1": k1}
    sch.reorder(*[loops[n] for n in order])
    return sch, loops


def _r(lo, ext):
    return Range.from_min_extent(lo, ext)


def test_blockize_divides_bindings_and_moves_the_init_out():
    f = gemm()
    sch, L = _tiled_gemm()
    outer = sch.blockize(L["i_1"])
    got = sch.mod["main"]
    A, B, C = f.params
    old = realize_of(f, "C").block
    i0, j0, k0, i1, j1, k1 = (Var(n) for n in ("i_0", "j_0", "k_0", "i_1", "j_1", "k_1"))
    vio, vjo, vko = Var("vi_o"), Var("vj_o"), Var("vk_o")
    vii, vji, vki = Var("vi_i"), Var("vj_i"), Var("vk_i")
    ii, ji = vio * 8 + vii, vjo * 16 + vji
    kk = vko * 8 + vki
    inner = Block([IterVar(_r(0, 8), vii), IterVar(_r(0, 16), vji), IterVar(_r(0, 8), vki, "reduce")],
                  [BufferRegion(A, [_r(ii, 1), _r(kk, 1)]), BufferRegion(B, [_r(kk, 1), _r(ji, 1)])],
                  [BufferRegion(C, [_r(ii, 1), _r(ji, 1)])], "C",
                  BufferStore(C, C[ii, ji] + A[ii, kk] * B[kk, ji], [ii, ji]))
    body = For(i1, 0, 8, "serial", For(j1, 0, 16, "serial", For(k1, 0, 8, "serial",
               BlockRealize([i1, j1, k1], True, inner))))
    ia, ja, ib, jb = Var("i_1_init"), Var("j_1_init"), Var("vi_i_init"), Var("vj_i_init")
    init = For(ia, 0, 8, "serial", For(ja, 0, 16, "serial", BlockRealize([ia, ja], True, Block(
        [IterVar(_r(0, 8), ib), IterVar(_r(0, 16), jb)], [],
        [BufferRegion(C, [_r(vio * 8 + ib, 1), _r(vjo * 16 + jb, 1)])], "C_init",
        BufferStore(C, const(0.0, "float32"), [vio * 8 + ib, vjo * 16 + jb])))))
    ob = Block([IterVar(_r(0, 8), vio), IterVar(_r(0, 3), vjo), IterVar(_r(0, 4), vko, "reduce")],
               [BufferRegion(A, [_r(vio * 8, 8), _r(vko * 8, 8)]), BufferRegion(B, [_r(vko * 8, 8), _r(vjo * 16, 16)])],
               [BufferRegion(C, [_r(vio * 8, 8), _r(vjo * 16, 16)])], "C_o", body, init=init)
    want = For(i0, 0, 8, "serial", For(j0, 0, 3, "serial", For(k0, 0, 4, "serial",
               BlockRealize([i0, j0, k0], True, ob))))
    assert old.init is not None
    assert_struct_equal(got, with_body(f, want))
    assert sch.get(outer).name_hint == "C_o"
    assert [lp for lp, _, _ in nest(got, "C_o")] == ["i_0", "j_0", "k_0"]
    assert [lp for lp, _, _ in nest(got, "C")] == ["i_1", "j_1", "k_1"]
    check_gemm(sch)


def test_blockize_inside_the_reduction_keeps_results_for_every_placement():
    # k_0 outermost: the init must run only on the first k_0 iteration
    sch, L = _tiled_gemm(order=("k_0", "i_0", "j_0", "i_1", "j_1", "k_1"))
    sch.blockize(L["i_1"])
    check_gemm(sch)
    # blockize the whole k loop inside: the outer block has no reduction left to drive
    sch2, L2 = _tiled_gemm(order=("i_0", "j_0", "i_1", "j_1", "k_0", "k_1"))
    b = sch2.blockize(L2["k_0"])
    ob = sch2.get(b)
    assert [iv.iter_type for iv in ob.iter_vars] == ["data_par", "data_par", "reduce"]
    assert ob.iter_vars[2].dom.extent.value == 1       # vk_o: the unit outer part, kept
    check_gemm(sch2)


def test_blockize_unit_iters_dropped_on_request():
    sch, L = _tiled_gemm(order=("i_0", "j_0", "i_1", "j_1", "k_0", "k_1"))
    b = sch.blockize(L["k_0"], preserve_unit_iters=False)
    assert [iv.var.name for iv in sch.get(b).iter_vars] == ["vi_o", "vj_o"]
    inner = realize_of(sch.mod["main"], "C").block
    assert [iv.var.name for iv in inner.iter_vars] == ["vk_i"]      # vi_i, vj_i had extent 1
    assert "C[vi_o, vj_o] = C[vi_o, vj_o] + A[vi_o, vk_i] * B[vk_i, vj_o]" in sch.mod.script()
    check_gemm(sch)


def test_blockize_whole_nest_and_innermost_loop():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    b = sch.blockize(i)                                # everything inside: outer iterators of extent 1
    assert [iv.dom.extent.value for iv in sch.get(b).iter_vars] == [1, 1, 1]
    assert "C[vi_i, vj_i]" in sch.mod.script()
    check_gemm(sch)
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    b = sch.blockize(k)                                # only k inside
    assert [iv.var.name for iv in sch.get(b).iter_vars] == ["vi_o", "vj_o", "vk_o"]
    assert "C[vi_o, vj_o] = C[vi_o, vj_o] + A[vi_o, vk_i] * B[vk_i, vj_o]" in sch.mod.script()
    check_gemm(sch)


def test_blockize_packed_layout_indices_simplify():
    n, nr, K = 32, 16, 24
    A = te.placeholder((n, K), name="A")
    B = te.placeholder((K, n), name="B")
    Bp = te.compute((n // nr, K, nr), lambda jo, k, ji: B[k, jo * nr + ji], name="B_pack")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * Bp[j // nr, k, j % nr], axis=k), name="C")
    sch = schedule(te.create_prim_func([A, B, C]))
    i, j, kk = sch.get_loops(sch.get_block("C"))
    j0, j1 = sch.split(j, [None, nr])
    sch.reorder(i, j0, kk, j1)
    sch.blockize(j1)
    assert "B_pack[vj_o, vk_o, vj_i]" in sch.mod.script()   # (vj_o * 16 + vj_i) // 16 -> vj_o
    a, b = rand((n, K)), rand((K, n))
    c = np.zeros((n, n), "float32")
    run_built(sch, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_blockize_non_exact_split_keeps_the_predicate_on_the_inner_block():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 10])                 # 64 = 6 * 10 + 4
    sch.blockize(i1)
    inner = realize_of(sch.mod["main"], "C")
    assert inner.predicate.script() == "vi_o * 10 + i_1 < 64"
    assert realize_of(sch.mod["main"], "C_o").block.iter_vars[0].dom.extent.value == 7
    check_gemm(sch)


def test_blockize_elementwise_and_trace_replay():
    A = te.placeholder((12, 32), name="A")
    B = te.compute((12, 32), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    f = te.create_prim_func([A, B])
    sch = schedule(f)
    i, j = sch.get_loops(sch.get_block("B"))
    j0, j1 = sch.split(j, [None, 8])
    sch.blockize(j1)
    assert "T.init" not in sch.mod.script()
    a = rand((12, 32))
    b = np.zeros((12, 32), "float32")
    run_built(sch, a, b)
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
    text = str(sch.trace)
    assert "sch.blockize(target=l" in text
    replay = tir.Schedule(f)
    tir.schedule.Trace.apply_json_to_schedule(sch.trace.as_json(), replay)
    assert structural_equal(replay.mod, sch.mod)


def _two_blocks_in_one_loop():
    """for i: X: T[i] = A[i] + 1; Y: C[i] = T[i] * 3  (T an intermediate)."""
    A, C, T = Buffer((8,), "float32", "A"), Buffer((8,), "float32", "C"), Buffer((8,), "float32", "T")
    i = Var("i")
    v1, v2 = IterVar(_r(0, 8), Var("v")), IterVar(_r(0, 8), Var("w"))
    b1 = BlockRealize([i], True, Block([v1], [BufferRegion(A, [_r(v1.var, 1)])], [BufferRegion(T, [_r(v1.var, 1)])],
                                       "X", BufferStore(T, A[v1.var] + 1.0, [v1.var])))
    b2 = BlockRealize([i], True, Block([v2], [BufferRegion(T, [_r(v2.var, 1)])], [BufferRegion(C, [_r(v2.var, 1)])],
                                       "Y", BufferStore(C, T[v2.var] * 3.0, [v2.var])))
    root = BlockRealize([], True, Block([], [], [], "root", For(i, 0, 8, "serial", seq(b1, b2)), alloc_buffers=[T]))
    return PrimFunc([A, C], root)


def test_blockize_sibling_blocks_into_one_opaque_block():
    f = _two_blocks_in_one_loop()
    sch = schedule(f)
    ob = sch.blockize([sch.get_block("X"), sch.get_block("Y")])
    A, C = f.params
    T = f.body.block.alloc_buffers[0]
    loop = f.body.block.body
    i = loop.loop_var
    X, Y = loop.body.seq
    want = loop.replace(body=BlockRealize([], True, Block(
        [], [BufferRegion(A, [_r(i, 1)]), BufferRegion(T, [_r(i, 1)])],
        [BufferRegion(T, [_r(i, 1)]), BufferRegion(C, [_r(i, 1)])], "X_Y_o", seq(X, Y))))
    assert_struct_equal(sch.mod["main"], with_body(f, want))
    assert sch.get(ob).name_hint == "X_Y_o"
    a = rand((8,))
    c = np.zeros((8,), "float32")
    run_built(sch, a, c)
    np.testing.assert_allclose(c, (a + 1) * 3, rtol=1e-6)
    # one block alone is fine too
    sch = schedule(f)
    assert sch.get(sch.blockize([sch.get_block("Y")])).name_hint == "Y_o"


def _refused(sch, action, message):
    mod, n = sch.mod, len(sch.trace)
    with pytest.raises(ScheduleError, match=message):
        action()
    assert structural_equal(sch.mod, mod) and len(sch.trace) == n


def test_blockize_refusals():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    f = sch.fuse(i, j)
    f0, f1 = sch.split(f, [None, 5])                   # i*48+j split by 5: no i-part, j-part division
    _refused(sch, lambda: sch.blockize(f1), r"blockize: the binding .* of iterator 'vi' of block 'C' mixes loops")
    c = sch.get_block("C")
    _refused(sch, lambda: sch.blockize(c), r"blockize: target must be a LoopRV or a list of BlockRVs")
    check_gemm(sch)

    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[i, j] * 3.0, name="C")
    sch = schedule(te.create_prim_func([A, C]))
    b, c = sch.get_block("B"), sch.get_block("C")
    _refused(sch, lambda: sch.blockize([b, c]),
             r"blockize: blocks 'B', 'C' are not siblings in one sequence of statements")
    _refused(sch, lambda: sch.blockize([]), r"blockize: give a loop or a non-empty list of blocks")
    _refused(sch, lambda: sch.blockize([b, b]), r"blockize: block 'B' is given twice")


def test_blockize_refuses_a_loop_over_two_blocks():
    A, B = Buffer((8,), "float32", "A"), Buffer((8,), "float32", "B")
    i = Var("i")
    v1, v2 = IterVar(_r(0, 8), Var("v")), IterVar(_r(0, 8), Var("w"))
    b1 = BlockRealize([i], True, Block([v1], [], [BufferRegion(A, [_r(v1.var, 1)])], "X",
                                       BufferStore(A, const(1.0, "float32"), [v1.var])))
    b2 = BlockRealize([i], True, Block([v2], [], [BufferRegion(B, [_r(v2.var, 1)])], "Y",
                                       BufferStore(B, const(2.0, "float32"), [v2.var])))
    root = BlockRealize([], True, Block([], [], [], "root", For(i, 0, 8, "serial", seq(b1, b2))))
    sch = schedule(PrimFunc([A, B], root))
    (lp,) = sch.get_loops(sch.get_block("X"))
    _refused(sch, lambda: sch.blockize(lp), r"blockize: loop 'i' must hold exactly one block to be blockized, "
                                            r"it holds 2 \('X', 'Y'\)")


# ---------------------------------------------------------------------------------------------
# property: blockize of any loop of a randomly tiled and reordered program keeps its results
# ---------------------------------------------------------------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import tessera  # noqa: E402
from tessera.tir.schedule import Trace  # noqa: E402

from interp_lowered import run as interp  # noqa: E402


@st.composite
def _tiled(draw):
    kind = draw(st.sampled_from(["gemm", "elementwise"]))
    if kind == "gemm":
        n, m, K = (draw(st.integers(1, 10)) for _ in range(3))
        f = gemm(n=n, m=m, K=K)
        shapes, out, ref = [(n, K), (K, m)], (n, m), (lambda a, b: a @ b)
    else:
        n, m = draw(st.integers(1, 12)), draw(st.integers(1, 12))
        A = te.placeholder((n, m), name="A")
        B = te.compute((n, m), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
        f = te.create_prim_func([A, B])
        shapes, out, ref = [(n, m)], (n, m), (lambda a: a * 2 + 1)
    sch = schedule(f)
    blk = sch.get_block(f.body.block.body.body.body.block.name_hint if kind == "elementwise" else "C")
    loops = []
    for lp in sch.get_loops(blk):
        ext = sch.get(lp).extent.value
        factor = draw(st.integers(1, max(1, ext)))
        loops += sch.split(lp, [None, factor])
    order = draw(st.permutations(loops))
    sch.reorder(*order)
    target = draw(st.sampled_from(order))
    return sch, f, target, shapes, out, ref


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_tiled(), st.booleans(), st.integers(0, 2 ** 16))
def test_random_blockize_keeps_results(case, preserve, seed):
    sch, f, target, shapes, out, ref = case
    before, trace = sch.mod["main"], str(sch.trace)
    try:
        sch.blockize(target, preserve_unit_iters=preserve)
    except ScheduleError as e:
        assert "blockize:" in str(e)
        assert sch.mod["main"] is before and str(sch.trace) == trace   # refused, unchanged
        return
    rng = np.random.default_rng(seed)
    ins = [rng.uniform(-1, 1, s).astype("float32") for s in shapes]
    for func in (sch.mod["main"], tessera.lower(sch)):
        got = np.full(out, np.nan, "float32")
        interp(func, [x.copy() for x in ins] + [got])
        np.testing.assert_allclose(got, ref(*ins), rtol=1e-5, atol=1e-5)
    fresh = tir.Schedule(f)
    Trace.apply_json_to_schedule(sch.trace.as_json(), fresh)
    assert structural_equal(fresh.mod, sch.mod)
