"""compute_at, reverse_compute_at, compute_inline, reverse_compute_inline: program structure against
hand-built programs, regions and predicates, built kernels against numpy, trace replay, refusals."""
import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tessera
from tessera import te, tir
from tessera.errors import ScheduleError
from tessera.ir import Block, BlockRealize, BufferStore, For, Range, Var, structural_equal
from tessera.tir.schedule import INLINE_MARK, ROOT_MARK, Trace
from tessera.tir.schedule.locations import compute_locations

from schedule_helpers import assert_struct_equal, nest, rand, realize_of, run_built, schedule, with_body


def two_elementwise(n=16, m=12):
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((n, m), lambda i, j: B[i, j] + 1.0, name="C")
    return te.create_prim_func([A, C])


def check_two(obj, n=16, m=12):
    a = rand((n, m))
    c = np.full((n, m), np.nan, "float32")
    run_built(obj, a, c)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)


def conv_relu(n=8, ci=3, co=4):
    A = te.placeholder((1, ci, n, n), name="A")
    W = te.placeholder((co, ci, 3, 3), name="W")
    P = te.compute((1, ci, n + 2, n + 2), lambda b, c, h, w: te.if_then_else(
        te.all(h >= 1, h < n + 1, w >= 1, w < n + 1), A[b, c, h - 1, w - 1], 0.0), name="pad")
    rc, ry, rx = te.reduce_axis((0, ci), name="rc"), te.reduce_axis((0, 3), name="ry"), te.reduce_axis((0, 3), name="rx")
    C = te.compute((1, co, n, n), lambda b, f, y, x: te.sum(P[b, rc, y + ry, x + rx] * W[f, rc, ry, rx],
                                                             axis=[rc, ry, rx]), name="conv")
    R = te.compute((1, co, n, n), lambda b, f, y, x: te.max(C[b, f, y, x], 0.0), name="relu")
    return te.create_prim_func([A, W, R])


def conv_ref(a, w):
    n = a.shape[2]
    p = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, w.shape[0], n, n), "float32")
    for y in range(n):
        for x in range(n):
            out[0, :, y, x] = np.einsum("cij,fcij->f", p[0, :, y:y + 3, x:x + 3], w)
    return np.maximum(out, 0)


def check_conv(obj, n=8, ci=3, co=4):
    a, w = rand((1, ci, n, n)), rand((co, ci, 3, 3))
    out = np.full((1, co, n, n), np.nan, "float32")
    run_built(obj, a, w, out)
    np.testing.assert_allclose(out, conv_ref(a, w), rtol=1e-5, atol=1e-5)


def matmul_relu(n=16, m=16, K=8):
    A = te.placeholder((n, K), name="A")
    B = te.placeholder((K, m), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((n, m), lambda i, j: te.max(C[i, j], 0.0), name="D")
    return te.create_prim_func([A, B, D])


def check_matmul_relu(obj, n=16, m=16, K=8):
    a, b = rand((n, K)), rand((K, m))
    d = np.full((n, m), np.nan, "float32")
    run_built(obj, a, b, d)
    np.testing.assert_allclose(d, np.maximum(a @ b, 0), rtol=1e-5, atol=1e-6)


def replays(sch, func):
    fresh = tir.Schedule(func)
    Trace.apply_json_to_schedule(json.loads(json.dumps(sch.trace.as_json())), fresh)
    return structural_equal(fresh.mod, sch.mod)


# ---------------------------------------------------------------------------------------------
# compute_at
# ---------------------------------------------------------------------------------------------
def test_compute_at_matches_hand_built_program():
    f = two_elementwise()
    sch = schedule(f)
    i, j = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i, preserve_unit_loops=True)
    iv, jv, a0, a1 = Var("i"), Var("j"), Var("ax0"), Var("ax1")
    b_block, c_block = realize_of(f, "B").block, realize_of(f, "C").block
    body = For(iv, 0, 16, "serial",
               _seq(For(a0, 0, 1, "serial", For(a1, 0, 12, "serial", BlockRealize([iv + a0, a1], True, b_block))),
                    For(jv, 0, 12, "serial", BlockRealize([iv, jv], True, c_block))))
    assert_struct_equal(sch.mod["main"], with_body(f, body))
    check_two(sch)
    assert replays(sch, f)


def _seq(*stmts):
    from tessera.ir import seq

    return seq(*stmts)


def test_compute_at_drops_unit_loops_by_default():
    f = two_elementwise()
    sch = schedule(f)
    i, j = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i)
    assert nest(sch.mod["main"], "B") == [("i", "serial", "16"), ("ax0", "serial", "12")]
    assert "vi = T.axis.spatial(16, i)" in sch.mod.script()
    check_two(sch)


def test_compute_at_non_dividing_tile_gets_a_predicate():
    f = two_elementwise()
    sch = schedule(f)
    i, j = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, factors=[None, 5])
    sch.compute_at(sch.get_block("B"), io)
    assert nest(sch.mod["main"], "B") == [("i_0", "serial", "4"), ("ax0", "serial", "5"), ("ax1", "serial", "12")]
    assert "T.where(i_0 * 5 + ax0 < 16)" in sch.mod.script()
    check_two(sch)


def test_compute_at_inner_loop_computes_one_element():
    f = two_elementwise()
    sch = schedule(f)
    i, j = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), j)
    assert nest(sch.mod["main"], "B") == [("i", "serial", "16"), ("j", "serial", "12")]
    assert realize_of(sch.mod["main"], "B").iter_values[1].name == "j"
    check_two(sch)


def test_compute_at_halo_region_of_a_stencil():
    f = conv_relu()
    sch = schedule(f)
    b, fo, y, x, rc, ry, rx = sch.get_loops(sch.get_block("conv"))
    yo, yi = sch.split(y, factors=[None, 4])
    sch.compute_at(sch.get_block("pad"), yo)
    # rows y0*4 .. y0*4+5 of the padded input: 6 = 4 + 3 - 1, all channels and columns
    assert nest(sch.mod["main"], "pad")[-3:] == [("ax0", "serial", "3"), ("ax1", "serial", "6"),
                                                  ("ax2", "serial", "10")]
    assert "vh = T.axis.spatial(10, y_0 * 4 + ax1)" in sch.mod.script()
    check_conv(sch)
    # the lowered program allocates only the tile of pad (3 x 6 x 10) inside the tile loop
    low = tessera.lower(sch)
    assert "pad = T.allocate([180]" in low.script()


def test_compute_at_producer_of_a_reduction_at_its_reduction_loop():
    f = matmul_relu()
    A = te.placeholder((6, 5), name="A")
    B = te.compute((6, 5), lambda i, j: A[i, j] + 1.0, name="B")
    k = te.reduce_axis((0, 5), name="k")
    C = te.compute((6,), lambda i: te.sum(B[i, k] * B[i, k], axis=k), name="C")
    f = te.create_prim_func([A, C])
    sch = schedule(f)
    i, kk = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), kk)
    assert nest(sch.mod["main"], "B") == [("i", "serial", "6"), ("k", "serial", "5")]
    a = rand((6, 5))
    c = np.full(6, np.nan, "float32")
    run_built(sch, a, c)
    np.testing.assert_allclose(c, ((a + 1) ** 2).sum(1), rtol=1e-5)


def test_compute_at_reduction_producer_keeps_its_reduction_loops():
    f = matmul_relu()
    sch = schedule(f)
    i, j = sch.get_loops(sch.get_block("D"))
    sch.compute_at(sch.get_block("C"), i)
    assert nest(sch.mod["main"], "C") == [("i", "serial", "16"), ("ax0", "serial", "16"), ("ax1", "serial", "8")]
    assert "vk = T.axis.reduce(8, ax1)" in sch.mod.script()
    check_matmul_relu(sch)


def test_compute_at_index_chooses_the_place_among_producers_and_consumers():
    n = 8
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((n,), lambda i: A[i] * 3.0, name="C")
    D = te.compute((n,), lambda i: B[i] * C[i], name="D")
    f = te.create_prim_func([A, D])
    sch = schedule(f)
    (i,) = sch.get_loops(sch.get_block("D"))
    sch.compute_at(sch.get_block("C"), i)
    sch.compute_at(sch.get_block("B"), i, index=0)     # before C (it does not depend on C)
    order = [r.block.name_hint for r in _children(sch.get(i))]
    assert order == ["B", "C", "D"]
    sch2 = schedule(f)
    (i2,) = sch2.get_loops(sch2.get_block("D"))
    sch2.compute_at(sch2.get_block("C"), i2)
    sch2.compute_at(sch2.get_block("B"), i2)            # -1: right before its first consumer D
    assert [r.block.name_hint for r in _children(sch2.get(i2))] == ["C", "B", "D"]
    with pytest.raises(ScheduleError, match=r"index 2 is not a valid place for block 'B' under loop 'i'.*\[0, 1\]"):
        sch3 = schedule(f)
        (i3,) = sch3.get_loops(sch3.get_block("D"))
        sch3.compute_at(sch3.get_block("C"), i3)
        sch3.compute_at(sch3.get_block("B"), i3, index=2)
    for s in (sch, sch2):
        a = rand((n,))
        d = np.full(n, np.nan, "float32")
        run_built(s, a, d)
        np.testing.assert_allclose(d, (a + 1) * (a * 3), rtol=1e-6)


def _children(loop):
    from tessera.tir.schedule.state import child_realizes

    return child_realizes(loop.body)


def test_compute_at_refusals_name_block_loop_and_reason():
    A = te.placeholder((8, 4), name="A")
    B = te.compute((8, 4), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((8, 4), lambda i, j: B[i, j] * 2.0, name="C")
    E = te.compute((8, 4), lambda i, j: A[i, j] * 5.0, name="E")
    sch = schedule(te.create_prim_func([A, C, E]))
    ei, ej = sch.get_loops(sch.get_block("E"))
    with pytest.raises(ScheduleError, match=r"compute_at: block 'B' is not a producer of anything under loop 'j'"):
        sch.compute_at(sch.get_block("B"), ej)
    bi, bj = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match=r"compute_at: block 'C' writes an output of the function"):
        sch.compute_at(sch.get_block("C"), bi)
    with pytest.raises(ScheduleError, match=r"loop 'i' already encloses block 'B'"):
        sch.compute_at(sch.get_block("B"), bi)
    b = sch.get_block("B")
    before, n = sch.mod, len(sch.trace)
    with pytest.raises(ScheduleError, match="is not a producer of anything"):
        sch.compute_at(b, ej)
    assert sch.mod is before and len(sch.trace) == n
    # a consumer outside the loop
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((8,), lambda i: B[i] + C[i], name="D")
    g = te.create_prim_func([A, D])
    s2 = schedule(g)
    (c_i,) = s2.get_loops(s2.get_block("C"))
    with pytest.raises(ScheduleError, match=r"consumer 'D' of block 'B' is not under loop 'i'"):
        s2.compute_at(s2.get_block("B"), c_i)


def test_compute_at_refuses_an_unsolvable_write_index():
    # B is written at a * v + b, a = 2: fine; a block writing at v0 + v1 cannot be solved
    A = te.placeholder((8,), name="A")
    B = te.compute((16,), lambda i: te.if_then_else(i % 2 == 0, A[i // 2], 0.0), name="B")
    C = te.compute((8,), lambda i: B[i * 2], name="C")
    f = te.create_prim_func([A, C])
    sch = schedule(f)
    (i,) = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, factors=[None, 4])
    sch.compute_at(sch.get_block("B"), io)
    assert nest(sch.mod["main"], "B")[-1] == ("ax0", "serial", "7")   # B[8 i0 .. 8 i0 + 6]
    a = rand((8,))
    c = np.full(8, np.nan, "float32")
    run_built(sch, a, c)
    np.testing.assert_allclose(c, a)


# ---------------------------------------------------------------------------------------------
# reverse_compute_at
# ---------------------------------------------------------------------------------------------
def test_reverse_compute_at_matches_hand_built_program():
    f = two_elementwise()
    sch = schedule(f)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.reverse_compute_at(sch.get_block("C"), i)
    iv, jv, a0 = Var("i"), Var("j"), Var("ax0")
    b_block, c_block = realize_of(f, "B").block, realize_of(f, "C").block
    body = For(iv, 0, 16, "serial", _seq(For(jv, 0, 12, "serial", BlockRealize([iv, jv], True, b_block)),
                                         For(a0, 0, 12, "serial", BlockRealize([iv, a0], True, c_block))))
    assert_struct_equal(sch.mod["main"], with_body(f, body))
    check_two(sch)
    assert replays(sch, f)


def test_reverse_compute_at_epilogue_into_a_gemm_tile():
    f = matmul_relu()
    sch = schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, factors=[None, 4])
    jo, ji = sch.split(j, factors=[None, 8])
    sch.reorder(io, jo, k, ii, ji)
    sch.reverse_compute_at(sch.get_block("D"), jo)
    assert nest(sch.mod["main"], "D") == [("i_0", "serial", "4"), ("j_0", "serial", "2"), ("ax0", "serial", "4"),
                                          ("ax1", "serial", "8")]
    sch.parallel(io)
    check_matmul_relu(sch)
    # C lives per tile: a 4 x 8 array inside the tile loop
    assert "C = T.allocate([32]" in tessera.lower(sch).script()
    assert replays(sch, f)


def test_reverse_compute_at_conv_relu_into_the_output_tile():
    f = conv_relu()
    sch = schedule(f)
    b, fo, y, x, rc, ry, rx = sch.get_loops(sch.get_block("conv"))
    yo, yi = sch.split(y, factors=[None, 3])
    sch.reorder(yo, fo)
    sch.compute_at(sch.get_block("pad"), yo)
    sch.reverse_compute_at(sch.get_block("relu"), fo)
    assert re.search(r"T.where\(y_0 \* 3 \+ ax0(_1)? < 8\)", sch.mod.script())
    check_conv(sch)


def test_reverse_compute_at_refuses_a_loop_carrying_the_reduction():
    f = matmul_relu()
    sch = schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match=r"loop 'k' carries the reduction of producer 'C'.*partial results"):
        sch.reverse_compute_at(sch.get_block("D"), k)
    sch.reorder(k, i)
    with pytest.raises(ScheduleError, match=r"loop 'k' carries the reduction of producer 'C'"):
        sch.reverse_compute_at(sch.get_block("D"), j)


def test_reverse_compute_at_refuses_window_reads_and_gaps():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((8,), lambda i: B[i] + B[i + 2], name="C")
    f = te.create_prim_func([A, C])
    sch = schedule(f)
    (i,) = sch.get_loops(sch.get_block("B"))
    io, ii = sch.split(i, factors=[None, 5])
    with pytest.raises(ScheduleError, match=r"reads the producers' buffers at different offsets"):
        sch.reverse_compute_at(sch.get_block("C"), io)
    # a strided tile: B[i_1 * 2 + i_0] has gaps inside one iteration of i_0
    sch = schedule(two_elementwise())
    i, j = sch.get_loops(sch.get_block("B"))
    i0, i1 = sch.split(i, factors=[8, 2])
    sch.reorder(i1, i0)
    with pytest.raises(ScheduleError, match=r"writes 'B' with gaps"):
        sch.reverse_compute_at(sch.get_block("C"), i1)


def test_reverse_compute_at_refusals_name_block_and_loop():
    f = two_elementwise()
    sch = schedule(f)
    ci, cj = sch.get_loops(sch.get_block("C"))
    bi, bj = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match=r"reverse_compute_at: block 'B' is not a consumer of anything under loop 'j'"):
        sch.reverse_compute_at(sch.get_block("B"), cj)


# ---------------------------------------------------------------------------------------------
# compute_inline / reverse_compute_inline
# ---------------------------------------------------------------------------------------------
def test_compute_inline_matches_hand_built_program():
    f = two_elementwise()
    sch = schedule(f)
    sch.compute_inline(sch.get_block("B"))
    A, C = f.params
    c_real = realize_of(f, "C")
    c_block = c_real.block
    vi, vj = (iv.var for iv in c_block.iter_vars)
    new_block = Block(c_block.iter_vars, (c_block.reads[0].__class__(A, (Range.from_min_extent(vi, 1),
                                                                       Range.from_min_extent(vj, 1))),),
                      c_block.writes, "C", BufferStore(C, A[vi, vj] * 2.0 + 1.0, [vi, vj]))
    iv, jv = Var("i"), Var("j")
    body = For(iv, 0, 16, "serial", For(jv, 0, 12, "serial", BlockRealize([iv, jv], True, new_block)))
    root = f.body.block
    want = f.with_body(f.body.replace(block=root.replace(body=body, alloc_buffers=())))
    assert_struct_equal(sch.mod["main"], want)
    check_two(sch)
    assert replays(sch, f)


def test_compute_inline_padding_into_a_convolution():
    f = conv_relu()
    sch = schedule(f)
    pad = sch.get_block("pad")
    sch.compute_inline(pad)
    text = sch.mod.script()
    assert "alloc_buffer((1, 3, 10, 10)" not in text
    assert "A[vb, vrc, vy + vry - 1, vx + vrx - 1]" in text
    check_conv(sch)
    with pytest.raises(ScheduleError, match="no longer valid: it was inlined by compute_inline"):
        sch.get_loops(pad)
    assert replays(sch, f)


def test_compute_inline_of_a_store_at_permuted_indices():
    # regression (found by the property test): after transform_layout B stores B[vj, vi]; a load
    # B[x, y] must take vj = x, vi = y, not the iterators' declaration order
    f = two_elementwise(6, 4)
    sch = schedule(f)
    sch.transform_layout(sch.get_block("B"), ("write", 0), lambda i, j: (j, i))
    sch.compute_inline(sch.get_block("B"))
    assert "C[vi, vj] = A[vi, vj] * T.float32(2.0) + T.float32(1.0)" in sch.mod.script()
    check_two(sch, 6, 4)


def test_compute_inline_refusals():
    f = matmul_relu()
    sch = schedule(f)
    with pytest.raises(ScheduleError, match=r"compute_inline: block 'C' is a reduction"):
        sch.compute_inline(sch.get_block("C"))
    with pytest.raises(ScheduleError, match=r"compute_inline: block 'D' writes 'D', an output of the function"):
        sch.compute_inline(sch.get_block("D"))


def test_reverse_compute_inline_matches_hand_built_program():
    f = two_elementwise()
    sch = schedule(f)
    sch.reverse_compute_inline(sch.get_block("C"))
    A, C = f.params
    b_block = realize_of(f, "B").block
    vi, vj = (iv.var for iv in b_block.iter_vars)
    new_block = b_block.replace(body=BufferStore(C, A[vi, vj] * 2.0 + 1.0, [vi, vj]),
                                writes=(b_block.writes[0].__class__(C, (Range.from_min_extent(vi, 1),
                                                                        Range.from_min_extent(vj, 1))),))
    iv, jv = Var("i"), Var("j")
    body = For(iv, 0, 16, "serial", For(jv, 0, 12, "serial", BlockRealize([iv, jv], True, new_block)))
    root = f.body.block
    want = f.with_body(f.body.replace(block=root.replace(body=body, alloc_buffers=())))
    assert_struct_equal(sch.mod["main"], want)
    check_two(sch)
    assert replays(sch, f)


def test_reverse_compute_inline_transposing_consumer():
    A = te.placeholder((6, 4), name="A")
    B = te.compute((6, 4), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((4, 6), lambda j, i: B[i, j] * 3.0, name="C")
    f = te.create_prim_func([A, C])
    sch = schedule(f)
    sch.reverse_compute_inline(sch.get_block("C"))
    assert "C[vj, vi] = (A[vi, vj] + T.float32(1.0)) * T.float32(3.0)" in sch.mod.script()
    a = rand((6, 4))
    c = np.full((4, 6), np.nan, "float32")
    run_built(sch, a, c)
    np.testing.assert_allclose(c, ((a + 1) * 3).T, rtol=1e-6)


def test_reverse_compute_inline_refusals():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((7,), lambda i: B[i + 1] * 2.0, name="C")
    f = te.create_prim_func([A, C])
    sch = schedule(f)
    with pytest.raises(ScheduleError, match=r"loads 'B'\[vi \+ 1\]; each index must be a distinct iteration variable"):
        sch.reverse_compute_inline(sch.get_block("C"))
    C2 = te.compute((4,), lambda i: B[i] * 2.0, name="C2")
    g = te.create_prim_func([A, C2])
    s2 = schedule(g)
    with pytest.raises(ScheduleError, match=r"iterates 'vi' over \[0, 0 \+ 4\) but reads dimension 0 of 'B'"):
        s2.reverse_compute_inline(s2.get_block("C2"))
    s3 = schedule(matmul_relu())
    with pytest.raises(ScheduleError, match=r"block 'C' is a reduction"):
        s3.reverse_compute_inline(s3.get_block("D"))


# ---------------------------------------------------------------------------------------------
# sample_compute_location proposes only what compute_at / compute_inline accept
# ---------------------------------------------------------------------------------------------
def _programs():
    n = 6
    A = te.placeholder((n, n), name="A")
    B = te.compute((n, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((n, n), lambda i, j: B[j, i] + B[i, j], name="C")
    D = te.compute((n, n), lambda i, j: te.exp(C[i, j]), name="D")
    yield te.create_prim_func([A, D])
    yield conv_relu(n=5, ci=2, co=2)
    yield matmul_relu(6, 6, 4)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2), st.lists(st.tuples(st.integers(0, 30), st.integers(1, 4)), max_size=3))
def test_sampled_compute_locations_are_accepted(which, splits):
    f = list(_programs())[which]
    sch = tir.Schedule(f)
    names = [n for n in sch.state.index("main").blocks if n != "root"]
    for pick, factor in splits:   # random tilings of the loops first
        name = names[pick % len(names)]
        loops = sch.get_loops(sch.get_block(name))
        try:
            sch.split(loops[pick % len(loops)], factors=[None, factor])
        except ScheduleError:
            pass
    idx = sch.state.index("main")
    for name in names:
        realize = idx.blocks[name]
        for decision, loc in compute_locations(idx, realize):
            trial = sch.copy()
            blk = trial.get_block(name)
            rv = trial.sample_compute_location(blk, decision=decision)
            mark = trial.get(rv)
            if mark is INLINE_MARK:
                trial.compute_inline(blk)
            elif mark is not ROOT_MARK:
                trial.compute_at(blk, rv)     # must not raise
