"""cache_read, cache_write, set_scope, storage_align: the copy blocks and buffers they add, their
placement, the lowered (compacted, aligned) allocations, built kernels against numpy, trace replay,
refusals."""
import json

import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.errors import ScheduleError
from tessera.ir import Allocate, For, structural_equal
from tessera.tir.schedule import Trace

from schedule_helpers import check_gemm, gemm, nest, rand, realize_of, run_built, schedule


def replays(sch, func):
    fresh = tir.Schedule(func)
    Trace.apply_json_to_schedule(json.loads(json.dumps(sch.trace.as_json())), fresh)
    return structural_equal(fresh.mod, sch.mod)


def allocations(func) -> dict:
    """name -> Allocate of the lowered function."""
    out = {}

    def walk(s):
        if isinstance(s, Allocate):
            out[s.buffer.name] = s
        for f in ("body", "then_case", "else_case"):
            x = getattr(s, f, None)
            if x is not None and not isinstance(x, (int, float)) and hasattr(x, "_fields"):
                walk(x)
        for x in getattr(s, "seq", ()):
            walk(x)

    walk(func.body)
    return out


def top_blocks(func) -> list:
    """Names of the blocks under the root block, in order."""
    from tessera.tir.schedule.state import child_realizes

    return [r.block.name_hint for r in child_realizes(func.body.block.body)]


def chain3(n=12, m=10):
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((n, m), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((n, m), lambda i, j: B[i, j] * C[i, j], name="D")
    return te.create_prim_func([A, D])


def check_chain3(obj, n=12, m=10):
    a = rand((n, m))
    d = np.full((n, m), np.nan, "float32")
    run_built(obj, a, d)
    np.testing.assert_allclose(d, (a * 2) * (a * 2 + 1), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# cache_read
# ---------------------------------------------------------------------------------------------
def test_cache_read_of_an_input_copies_it_first():
    f = gemm()
    sch = schedule(f)
    c = sch.get_block("C")
    a_local = sch.cache_read(c, 0, "local")
    mod = sch.mod["main"]
    r = realize_of(mod, "A_local")
    assert r.block.name_hint == "A_local" and sch.get(a_local) is r.block
    buf = r.block.writes[0].buffer
    assert (buf.name, buf.scope, [s.value for s in buf.shape]) == ("A_local", "local", [64, 32])
    assert buf in mod.body.block.alloc_buffers
    assert nest(mod, "A_local") == [("ax0", "serial", "64"), ("ax1", "serial", "32")]
    first = mod.body.block.body.seq[0]
    assert isinstance(first, For) and realize_of(mod, "A_local") is first.body.body
    assert "A_local[vi, vk] * B[vk, vj]" in sch.mod.script()
    check_gemm(sch)
    assert replays(sch, f)


def test_cache_read_of_an_intermediate_goes_after_its_writer_and_serves_chosen_consumers():
    f = chain3()
    sch = schedule(f)
    d = sch.get_block("D")
    cache = sch.cache_read(d, 0, "global", consumer_blocks=[d])
    text = sch.mod.script()
    assert "B_global[vi_2, vj_2] * C[vi_2, vj_2]" in text     # D reads the cache
    assert "C[vi_1, vj_1] = B[vi_1, vj_1] + T.float32(1.0)" in text  # C still reads B
    order = top_blocks(sch.mod["main"])
    assert order == ["B", "B_global", "C", "D"]
    check_chain3(sch)
    # consumers may be named
    s3 = schedule(f)
    s3.cache_read(s3.get_block("D"), 0, "global", consumer_blocks=["D"])
    assert structural_equal(s3.mod, sch.mod)
    assert replays(s3, f)
    # by default every consumer reads the cache
    s2 = schedule(f)
    s2.cache_read(s2.get_block("D"), 0, "global")
    assert "B_global[vi_1, vj_1] + T.float32(1.0)" in s2.mod.script()
    check_chain3(s2)
    assert sch.get(cache).name_hint == "B_global"


@pytest.mark.parametrize("prim", ["cache_read", "cache_write"])
def test_cache_copy_goes_inside_the_loop_a_consumer_shares_with_the_writer(prim):
    # found by the property test: C reverse_compute_at under B's row loop reads the copy in the same
    # iteration, D after the loop reads all of it; a copy placed after the loop left C reading garbage
    f = chain3()
    sch = schedule(f)
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.reverse_compute_at(sch.get_block("C"), i)
    if prim == "cache_read":
        sch.cache_read(sch.get_block("C"), 0, "global")
    else:
        sch.cache_write(sch.get_block("B"), 0, "global")
    loop = sch.get(sch.get_loops(sch.get_block("B"))[0])
    assert _blocks_in(loop) == ["B", "B_global", "C"]
    check_chain3(sch)
    assert replays(sch, f)


def _blocks_in(loop) -> list:
    """Names of the blocks directly under a loop's body, in order."""
    from tessera.tir.schedule.state import child_realizes

    return [r.block.name_hint for r in child_realizes(loop.body)]


def test_cache_read_then_compute_at_packs_one_tile_per_iteration():
    f = gemm()
    sch = schedule(f)
    c = sch.get_block("C")
    b_cache = sch.cache_read(c, 1, "global")
    i, j, k = sch.get_loops(c)
    jo, ji = sch.split(j, factors=[None, 16])
    sch.reorder(jo, i, k, ji)
    sch.compute_at(b_cache, jo)
    assert nest(sch.mod["main"], "B_global") == [("j_0", "serial", "3"), ("ax0", "serial", "32"),
                                                 ("ax1", "serial", "16")]
    low = tessera.lower(sch)
    alloc = allocations(low)["B_global"]
    assert [s.value for s in alloc.buffer.shape] == [32 * 16]   # one 32 x 16 panel, compacted
    check_gemm(sch)


def test_cache_read_refusals():
    sch = schedule(gemm())
    c = sch.get_block("C")
    with pytest.raises(ScheduleError, match=r"cache_read: block 'C' has 2 read regions \(0: A, 1: B\); read_buffer_index 5"):
        sch.cache_read(c, 5, "local")
    with pytest.raises(ScheduleError, match=r"storage_scope must be one of .*got 'texture'"):
        sch.cache_read(c, 0, "texture")
    i, j, k = sch.get_loops(c)
    sch.decompose_reduction(c, i)
    s2 = schedule(chain3())
    with pytest.raises(ScheduleError, match=r"block 'C' in consumer_blocks does not read 'C'|does not read"):
        s2.cache_read(s2.get_block("D"), 1, "local", consumer_blocks=[s2.get_block("B")])


def test_cache_read_of_a_buffer_with_two_writers_is_refused():
    f = gemm(8, 8, 8)
    A = te.placeholder((8, 8), name="A")
    B = te.placeholder((8, 8), name="B")
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((8, 8), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((8, 8), lambda i, j: C[i, j] + 1.0, name="D")
    sch = schedule(te.create_prim_func([A, B, D]))
    c = sch.get_block("C")
    sch.decompose_reduction(c, sch.get_loops(c)[0])
    with pytest.raises(ScheduleError, match=r"buffer 'C' is written by 2 blocks \('C_init', 'C_update'\)"):
        sch.cache_read(sch.get_block("D"), 0, "local")
    del f


# ---------------------------------------------------------------------------------------------
# cache_write
# ---------------------------------------------------------------------------------------------
def test_cache_write_accumulates_in_the_cache_and_copies_back():
    f = gemm()
    sch = schedule(f)
    c = sch.get_block("C")
    wb = sch.cache_write(c, 0, "local")
    text = sch.mod.script()
    assert "C_local[vi, vj] = C_local[vi, vj] + A[vi, vk] * B[vk, vj]" in text
    assert "C_local[vi, vj] = T.float32(0.0)" in text
    r = realize_of(sch.mod["main"], "C_local")
    assert sch.get(wb) is r.block and "C[v0, v1] = C_local[v0, v1]" in text
    order = top_blocks(sch.mod["main"])
    assert order == ["C", "C_local"]
    check_gemm(sch)
    assert replays(sch, f)


def test_register_tile_accumulation_gemm_schedule():
    """cache_write local + reverse_compute_at of the copy + cache_read of B under k: the classic
    CPU GEMM structure, each buffer compacted to its tile."""
    f = gemm()
    sch = schedule(f)
    c = sch.get_block("C")
    wb = sch.cache_write(c, 0, "local")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, factors=[None, 8])
    jo, ji = sch.split(j, factors=[None, 16])
    sch.reorder(io, jo, k, ii, ji)
    sch.reverse_compute_at(wb, jo)
    pack = sch.cache_read(c, 1, "global")
    sch.compute_at(pack, k)
    sch.vectorize(ji)
    sch.parallel(io)
    low = tessera.lower(sch)
    allocs = allocations(low)
    assert [s.value for s in allocs["C_local"].buffer.shape] == [8 * 16]
    assert [s.value for s in allocs["B_global"].buffer.shape] == [16]
    check_gemm(sch)
    assert replays(sch, f)


def test_cache_write_of_an_intermediate_goes_before_its_consumers():
    f = chain3()
    sch = schedule(f)
    sch.cache_write(sch.get_block("B"), 0, "local")
    order = top_blocks(sch.mod["main"])
    assert order == ["B", "B_local", "C", "D"]
    check_chain3(sch)


def test_cache_write_refusals():
    sch = schedule(gemm())
    with pytest.raises(ScheduleError, match=r"cache_write: block 'C' has 1 write regions \(0: C\); write_buffer_index 1"):
        sch.cache_write(sch.get_block("C"), 1, "local")


# ---------------------------------------------------------------------------------------------
# set_scope, storage_align
# ---------------------------------------------------------------------------------------------
def test_set_scope_changes_the_buffer_everywhere():
    f = chain3()
    sch = schedule(f)
    sch.set_scope(sch.get_block("B"), 0, "shared")
    mod = sch.mod["main"]
    bufs = {r.buffer for r in realize_of(mod, "C").block.reads} | {r.buffer for r in realize_of(mod, "B").block.writes}
    assert len(bufs) == 1 and next(iter(bufs)).scope == "shared"
    assert next(iter(bufs)) in mod.body.block.alloc_buffers
    check_chain3(sch)   # "shared" is plain memory on a CPU
    assert replays(sch, f)
    with pytest.raises(ScheduleError, match=r"set_scope: buffer 'D' written by block 'D' is a parameter"):
        sch.set_scope(sch.get_block("D"), 0, "local")
    with pytest.raises(ScheduleError, match=r"storage_scope must be one of"):
        sch.set_scope(sch.get_block("B"), 0, "registers")


def test_storage_align_pads_the_strides_of_the_lowered_buffer():
    f = chain3(12, 10)
    sch = schedule(f)
    b = sch.get_block("B")
    sch.storage_align(b, 0, 0, 16, 1)
    assert "buffer_dim_align" in sch.mod.script()
    low = tessera.lower(sch)
    alloc = allocations(low)["B"]
    # stride of rows: 10 rounded up to 16 k + 1 = 17; 12 rows -> 11 * 17 + 10 elements
    assert [s.value for s in alloc.buffer.shape] == [11 * 17 + 10]
    assert "i * 17 + j" in low.script()
    check_chain3(sch)
    assert replays(sch, f)


def test_storage_align_with_compute_at_aligns_the_compacted_tile():
    f = chain3(12, 10)
    sch = schedule(f)
    i, j = sch.get_loops(sch.get_block("D"))
    io, ii = sch.split(i, factors=[None, 4])
    sch.compute_at(sch.get_block("C"), io)
    sch.compute_at(sch.get_block("B"), io)
    sch.storage_align(sch.get_block("B"), 0, 0, 8, 3)
    low = tessera.lower(sch)
    alloc = allocations(low)["B"]
    assert [s.value for s in alloc.buffer.shape] == [3 * 11 + 10]    # 4 rows of stride 11 = 8 + 3
    check_chain3(sch)


def test_storage_align_refusals():
    sch = schedule(chain3())
    b = sch.get_block("B")
    with pytest.raises(ScheduleError, match=r"buffer 'B' has 2 dimensions; axis 2 is out of range"):
        sch.storage_align(b, 0, 2, 8, 1)
    with pytest.raises(ScheduleError, match=r"offset must be in \[0, factor\) = \[0, 8\), got 8"):
        sch.storage_align(b, 0, 0, 8, 8)
    with pytest.raises(ScheduleError, match=r"factor must be >= 1, got 0"):
        sch.storage_align(b, 0, 0, 0, 0)
    with pytest.raises(ScheduleError, match=r"buffer 'D' written by block 'D' is a parameter"):
        sch.storage_align(sch.get_block("D"), 0, 0, 8, 1)
