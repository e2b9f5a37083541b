"""plan_buffer_allocation and compact_buffer_allocation: where buffers are allocated after
scheduling, how far they shrink, what stays outside reductions and vectorized loops, storage
scopes on CPU; every program is checked against numpy (interpreter and compiled)."""
import numpy as np

import tessera
from tessera import te, tir
from tessera.ir import (Allocate, Block, BlockRealize, Buffer, BufferRegion, BufferStore, For, IterVar, PrimFunc,
                        Range, Var, seq)
from tessera.tir.transform import compact_buffer_allocation, lower_blocks, plan_buffer_allocation

from interp_lowered import run as interp
from tir_builders import root


def _find(stmt, cls, out=None):
    out = [] if out is None else out
    if isinstance(stmt, cls):
        out.append(stmt)
    for f in ("body", "then_case", "else_case", "block"):
        x = getattr(stmt, f, None)
        if x is not None and hasattr(x, "_fields") and not hasattr(x, "dtype"):
            _find(x, cls, out)
    for x in getattr(stmt, "seq", ()):
        _find(x, cls, out)
    return out


def _parent_loop_of_alloc(stmt, name, loop=None):
    """The loop whose body (directly) holds the Allocate of `name` (None at the top)."""
    if isinstance(stmt, Allocate) and stmt.buffer.name == name:
        return loop, True
    nxt = stmt if isinstance(stmt, For) else loop
    for f in ("body", "then_case", "else_case", "block"):
        x = getattr(stmt, f, None)
        if x is not None and hasattr(x, "_fields") and not hasattr(x, "dtype"):
            r = _parent_loop_of_alloc(x, name, nxt if f == "body" else loop)
            if r[1]:
                return r
    for x in getattr(stmt, "seq", ()):
        r = _parent_loop_of_alloc(x, name, loop)
        if r[1]:
            return r
    return None, False


def chain(n=12, m=10, sym=False):
    rows = te.var("n") if sym else n
    A = te.placeholder((rows, m), name="A")
    B = te.compute((rows, m), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((rows, m), lambda i, j: B[i, j] + 1.0, name="C")
    return te.create_prim_func([A, C])


def check_chain(obj, n=12, m=10):
    a = np.random.default_rng(1).uniform(-1, 1, (n, m)).astype("float32")
    for f in (tessera.lower(obj),):
        c = np.full((n, m), np.nan, "float32")
        interp(f, [a.copy(), c])
        np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)
    c = np.full((n, m), np.nan, "float32")
    tessera.build(obj)(a, c)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)


def test_allocation_moves_to_the_loop_around_every_use_and_shrinks_to_its_tile():
    sch = tir.Schedule(chain())
    i, j = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, factors=[None, 4])
    sch.compute_at(sch.get_block("B"), io)
    planned = plan_buffer_allocation(sch.mod["main"])
    assert planned.body.block.alloc_buffers == ()
    loop, found = _parent_loop_of_alloc(planned.body, "B")
    assert found and loop.loop_var.name == "i_0"
    compact = compact_buffer_allocation(lower_blocks(planned))
    (alloc,) = [a for a in _find(compact.body, Allocate) if a.buffer.name == "B"]
    assert [s.value for s in alloc.buffer.shape] == [4, 10]
    assert "B[ax0, ax1] = A[i_0 * 4 + ax0, ax1] * T.float32(2.0)" in compact.script()
    check_chain(sch)


def test_a_buffer_used_at_the_top_level_stays_at_the_top():
    f = chain()
    planned = plan_buffer_allocation(f)
    loop, found = _parent_loop_of_alloc(planned.body, "B")
    assert found and loop is None
    compact = compact_buffer_allocation(lower_blocks(planned))
    (alloc,) = _find(compact.body, Allocate)
    assert [s.value for s in alloc.buffer.shape] == [12, 10]


def test_symbolic_rows_compact_to_a_constant_tile():
    sch = tir.Schedule(chain(sym=True))
    i, j = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, factors=[None, 4])
    sch.compute_at(sch.get_block("B"), io)
    low = tessera.lower(sch)
    (alloc,) = [a for a in _find(low.body, Allocate) if a.buffer.name == "B"]
    assert [s.value for s in alloc.buffer.shape] == [40]
    for rows in (1, 6, 9):
        a = np.random.default_rng(rows).uniform(-1, 1, (rows, 10)).astype("float32")
        c = np.full((rows, 10), np.nan, "float32")
        tessera.build(sch)(a, c)
        np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)


def test_no_allocation_inside_a_vectorized_loop():
    sch = tir.Schedule(chain(8, 8))
    i, j = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), j)
    sch.vectorize(j)
    planned = plan_buffer_allocation(sch.mod["main"])
    loop, found = _parent_loop_of_alloc(planned.body, "B")
    assert found and loop.loop_var.name == "i"
    low = tessera.lower(sch)
    (alloc,) = [a for a in _find(low.body, Allocate) if a.buffer.name == "B"]
    assert [s.value for s in alloc.buffer.shape] == [8]      # one row: every j of the row
    check_chain(sch, 8, 8)


def test_an_accumulator_is_not_reallocated_inside_its_reduction_loop():
    """A running sum: under loop k, block acc accumulates T[0] (reduction over vk) and block use
    reads it. Every access is inside k, but T must live across its iterations."""
    n = 6
    A, out, T = Buffer((n,), "float32", "A"), Buffer((n,), "float32", "out"), Buffer((1,), "float32", "T")
    k = Var("k")
    vk = IterVar(Range(0, n), Var("vk"), "reduce")
    acc = Block([vk], [BufferRegion(A, [Range.from_min_extent(vk.var, 1)])],
                [BufferRegion(T, [Range.from_min_extent(0, 1)])], "acc",
                BufferStore(T, T[0] + A[vk.var], [0]), init=BufferStore(T, 0.0, [0]))
    vu = IterVar(Range(0, n), Var("vu"), "data_par")
    use = Block([vu], [BufferRegion(T, [Range.from_min_extent(0, 1)])],
                [BufferRegion(out, [Range.from_min_extent(vu.var, 1)])], "use", BufferStore(out, T[0], [vu.var]))
    body = For(k, 0, n, "serial", seq(BlockRealize([k], True, acc), BlockRealize([k], True, use)))
    f = PrimFunc([A, out], root(body, alloc=[T]))
    planned = plan_buffer_allocation(f)
    loop, found = _parent_loop_of_alloc(planned.body, "T")
    assert found and loop is None
    a = np.arange(1, n + 1, dtype="float32")
    o = np.full(n, np.nan, "float32")
    interp(tessera.tir.transform.lower(f), [a, o])
    np.testing.assert_allclose(o, np.cumsum(a))


def test_shared_scope_is_plain_memory_on_cpu():
    sch = tir.Schedule(chain())
    c = sch.get_block("C")
    sch.cache_read(c, 0, "shared")
    low = tessera.lower(sch)
    scopes = {a.buffer.name: a.buffer.scope for a in _find(low.body, Allocate)}
    assert scopes["B_shared"] == "global"
    check_chain(sch)


def test_passes_leave_programs_without_allocations_alone():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    f = te.create_prim_func([A, B])
    assert plan_buffer_allocation(f) is f
    low = lower_blocks(f)
    assert compact_buffer_allocation(low) is low
