"""transform_layout and IndexMap: new shapes and accesses, packing a GEMM operand through a cache,
a parameter's layout, padding, the index map's text form in traces, refusals."""
import json

import numpy as np
import pytest

from tessera import te, tir
from tessera.errors import ScheduleError
from tessera.ir import structural_equal
from tessera.tir.schedule import IndexMap, Trace

from schedule_helpers import check_gemm, gemm, rand, realize_of, run_built, schedule


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
    s2 = schedule(f)
    with pytest.raises(ScheduleError, match=r"pads 'B' \(shape \(12, 30\) -> \(12, 4, 8\)\).*pass pad_value=None"):
        s2.transform_layout(s2.get_block("B"), ("write", 0), lambda i, j: (i, j // 8, j % 8), pad_value=0.0)


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
