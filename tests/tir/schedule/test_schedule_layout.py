"""transform_layout and IndexMap: new shapes and accesses, packing a GEMM operand through a cache,
a parameter's layout, padding, the index map's text form in traces, refusals."""
import json

import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.errors import ScheduleError
from tessera.ir import structural_equal
from tessera.tir.schedule import IndexMap, Trace

from interp_lowered import run as interp
from schedule_helpers import check_gemm, gemm, nest, rand, realize_of, run_built, schedule


def replays(sch, func):
    fresh = tir.Schedule(func)
    Trace.apply_json_to_schedule(json.loads(json.dumps(sch.trace.as_json())), fresh)
    return structural_equal(fresh.mod, sch.mod)


def chain(n=12, m=32):
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((n, m), lambda i, j: B[i, j] + 1.0, name="C")
    return te.create_prim_func([A, C])


def check_chain(obj, n=12, m=32):
    a = rand((n, m))
    c = np.full((n, m), np.nan, "float32")
    run_built(obj, a, c)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)


def test_transform_layout_of_an_intermediate_rewrites_every_access():
    f = chain()
    sch = schedule(f)
    sch.transform_layout(sch.get_block("B"), ("write", 0), lambda i, j: (j // 8, i, j % 8))
    mod = sch.mod["main"]
    buf = realize_of(mod, "B").block.writes[0].buffer
    assert [s.value for s in buf.shape] == [4, 12, 8]
    text = sch.mod.script()
    assert "B[vj // 8, vi, vj % 8] = A[vi, vj] * T.float32(2.0)" in text
    assert "C[vi_1, vj_1] = B[vj_1 // 8, vi_1, vj_1 % 8] + T.float32(1.0)" in text
    assert 'index_map="lambda i, j: (j // 8, i, j % 8)"' in str(sch.trace)
    check_chain(sch)
    assert replays(sch, f)


def test_packing_a_gemm_operand_through_a_cache():
    f = gemm(64, 48, 32)
    sch = schedule(f)
    c = sch.get_block("C")
    pack = sch.cache_read(c, 1, "global")
    sch.transform_layout(c, ("read", 1), lambda k, j: (j // 16, k, j % 16))
    text = sch.mod.script()
    assert "B_global[v1 // 16, v0, v1 % 16] = B[v0, v1]" in text
    assert "A[vi, vk] * B_global[vj // 16, vk, vj % 16]" in text
    assert [s.value for s in sch.get(pack).writes[0].buffer.shape] == [3, 32, 16]
    i, j, k = sch.get_loops(c)
    jo, ji = sch.split(j, factors=[None, 16])
    sch.reorder(jo, i, k, ji)
    sch.vectorize(ji)
    check_gemm(sch)
    assert replays(sch, f)


def test_the_packing_block_computes_one_panel_per_tile():
    """cache_read + transform_layout + compute_at of the packing block under the reduction tile:
    its iterators are solved through the j // 16 and j % 16 indices of the packed layout."""
    f = gemm(32, 48, 32)
    sch = schedule(f)
    c = sch.get_block("C")
    pack = sch.cache_read(c, 1, "global")
    sch.transform_layout(c, ("read", 1), lambda k, j: (j // 16, k, j % 16))
    i, j, k = sch.get_loops(c)
    jo, ji = sch.split(j, factors=[None, 16])
    ko, ki = sch.split(k, factors=[None, 8])
    sch.reorder(jo, ko, i, ki, ji)
    sch.compute_at(pack, ko)
    assert nest(sch.mod["main"], "B_global") == [("j_0", "serial", "3"), ("k_0", "serial", "4"),
                                                 ("ax0", "serial", "8"), ("ax1", "serial", "16")]
    assert "v1 = T.axis.spatial(48, j_0 * 16 + ax1)" in sch.mod.script()
    check_gemm(sch, 32, 48, 32)
    low = tessera.lower(sch)
    assert "B_global = T.allocate([128]" in low.script()     # one 8 x 16 panel slice
    assert replays(sch, f)


def test_transform_layout_of_a_parameter_changes_what_the_caller_passes():
    f = gemm(16, 8, 12)
    sch = schedule(f)
    sch.transform_layout(sch.get_block("C"), "B", lambda k, j: (j, k))   # B given transposed
    assert [s.value for s in sch.mod["main"].params[1].shape] == [8, 12]
    a, b = rand((16, 12)), rand((12, 8))
    c = np.full((16, 8), np.nan, "float32")
    run_built(sch, a, np.ascontiguousarray(b.T), c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def test_padding_an_intermediate_leaves_the_padding_unwritten():
    f = chain(12, 30)
    sch = schedule(f)
    sch.transform_layout(sch.get_block("B"), ("write", 0), lambda i, j: (i, j // 8, j % 8))
    assert [s.value for s in realize_of(sch.mod["main"], "B").block.writes[0].buffer.shape] == [12, 4, 8]
    check_chain(sch, 12, 30)
    assert "if_then_else" not in sch.mod.script()


def test_pad_value_rebuilds_the_writer_over_the_padded_layout():
    f = chain(12, 30)
    sch = schedule(f)
    b = sch.get_block("B")
    old_i, old_j = sch.get_loops(b)
    sch.transform_layout(b, ("write", 0), lambda i, j: (j // 8, i, j % 8), pad_value=-7.0)
    text = sch.mod.script()
    assert nest(sch.mod["main"], "B") == [("j_o", "serial", "4"), ("i", "serial", "12"), ("j_i", "serial", "8")]
    assert ("B[vj_o, vi, vj_i] = T.if_then_else(vj_o * 8 + vj_i < 30, A[vi, vj_o * 8 + vj_i] * T.float32(2.0), "
            "T.float32(-7.0), dtype=\"float32\")") in text
    with pytest.raises(ScheduleError, match="regenerated the loops of block 'B' over the padded layout"):
        sch.get(old_i)
    check_chain(sch, 12, 30)
    # the padding really holds pad_value: expose the padded buffer as a parameter and look at it
    n, m = 3, 10
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((n, m), lambda i, j: B[i, j] * 1.0, name="C")
    s2 = schedule(te.create_prim_func([A, C]))
    s2.transform_layout(s2.get_block("B"), ("write", 0), lambda i, j: (i, j // 4, j % 4), pad_value=5.0)
    func = s2.mod["main"]
    root = func.body.block
    (bbuf,) = root.alloc_buffers
    exposed = func.replace(params=func.params + (bbuf,),
                           body=func.body.replace(block=root.replace(alloc_buffers=())))
    a = rand((n, m))
    c = np.full((n, m), np.nan, "float32")
    bp = np.full((n, 3, 4), np.nan, "float32")
    interp(exposed, [a, c, bp])
    np.testing.assert_allclose(c, a + 1, rtol=1e-6)
    np.testing.assert_allclose(bp.reshape(n, 12)[:, :m], a + 1, rtol=1e-6)
    assert (bp.reshape(n, 12)[:, m:] == 5.0).all()
    with pytest.raises(ScheduleError, match="pad_value applies to allocated buffers only"):
        s3 = schedule(gemm(8, 6, 8))
        s3.transform_layout(s3.get_block("C"), "B", lambda k, j: (k, j // 4, j % 4), pad_value=0.0)


def test_transform_layout_refusals():
    f = chain()
    sch = schedule(f)
    b = sch.get_block("B")
    with pytest.raises(ScheduleError, match=r"maps two elements of 'B' .* must be injective"):
        sch.transform_layout(b, ("write", 0), lambda i, j: (i, j % 8))
    with pytest.raises(ScheduleError, match=r"takes 1 indices, the buffer has 2 dimensions"):
        sch.transform_layout(b, ("write", 0), lambda i: (i,))
    with pytest.raises(ScheduleError, match=r"block 'B' has 1 write regions; index 3 is out of range"):
        sch.transform_layout(b, ("write", 3), lambda i, j: (j, i))
    with pytest.raises(ScheduleError, match=r"accesses no buffer named 'Q'"):
        sch.transform_layout(b, "Q", lambda i, j: (j, i))
    with pytest.raises(ScheduleError, match=r"is not provably >= 0"):
        sch.transform_layout(b, ("write", 0), lambda i, j: (i - 1, j))
    assert len([x for x in sch.trace.insts if not x.kind.pure]) == 0


def test_symbolic_shapes_take_permutations_and_splits():
    n = te.var("n")
    A = te.placeholder((n, 8), name="A")
    B = te.compute((n, 8), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((n, 8), lambda i, j: B[i, j] * 2.0, name="C")
    f = te.create_prim_func([A, C])
    sch = schedule(f)
    sch.transform_layout(sch.get_block("B"), ("write", 0), lambda i, j: (j, i))
    for rows in (1, 5):
        a = rand((rows, 8))
        c = np.full((rows, 8), np.nan, "float32")
        run_built(sch, a, c)
        np.testing.assert_allclose(c, (a + 1) * 2, rtol=1e-6)
    s2 = schedule(f)
    s2.transform_layout(s2.get_block("B"), ("write", 0), lambda i, j: (i // 2, j, i % 2))
    assert "B = T.alloc_buffer(((n - 1) // 2 + 1, 8, 2)" in s2.mod.script()
    for rows in (1, 5, 6):
        a = rand((rows, 8))
        c = np.full((rows, 8), np.nan, "float32")
        run_built(s2, a, c)
        np.testing.assert_allclose(c, (a + 1) * 2, rtol=1e-6)
    s3 = schedule(f)
    with pytest.raises(ScheduleError, match=r"symbolic shape \(n, 8\); only maps made of whole indices"):
        s3.transform_layout(s3.get_block("B"), ("write", 0), lambda i, j: (i + j, j))


def test_index_map_text_round_trip_and_safe_parsing():
    m = IndexMap.from_func(lambda a, b, c: (b // 4 * 4 - a, c % 3, (a + b) * 2, te.max(a, c)))
    text = m.text()
    assert text == "lambda a, b, c: (b // 4 * 4 - a, c % 3, (a + b) * 2, max(a, c))"
    again = IndexMap.parse(text)
    assert again.text() == text
    assert IndexMap.from_func(lambda *ix: ix[::-1], ndim=3).text() == "lambda i0, i1, i2: (i2, i1, i0)"
    for bad in ("lambda i: __import__('os').system('true')", "lambda i: (i.real,)", "lambda i: (j,)",
                "lambda i: (i / 2,)", "i + 1", "lambda *i: i"):
        with pytest.raises(ScheduleError, match="index map"):
            IndexMap.parse(bad)
    with pytest.raises(ScheduleError, match="needs ndim"):
        IndexMap.from_func(lambda *ix: ix)
