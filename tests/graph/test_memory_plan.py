"""plan_memory: static placement of intermediates in one arena; the checker; the zoo graphs."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.errors import ShapeError, TesseraError
from tessera.graph import Builder
from tessera.graph.memory_plan import (Allocation, MemoryPlan, check_memory_plan, lifetimes,
                                              plan_memory, value_nbytes)


def chain(n=6, shape=(8, 16)):
    """x -> neg -> neg -> ... (n nodes) -> output: every intermediate the same size."""
    gb = Builder("chain")
    v = gb.input("x", shape)
    for _ in range(n):
        v = gb.op("test.neg", v)
    gb.output(v)
    return gb.finish()


def test_a_chain_needs_two_buffers_whatever_its_length():
    for n in (3, 6, 11):
        g = chain(n)
        plan = plan_memory(g)
        check_memory_plan(g, plan)
        size = 8 * 16 * 4
        assert len(plan.allocations) == n - 1          # the last node writes the graph output
        assert plan.naive_bytes == (n - 1) * size
        assert plan.arena_bytes == (2 if n > 2 else 1) * size
        assert plan.live_bytes == plan.arena_bytes


def test_a_node_never_writes_where_it_reads():
    g = chain(4)
    plan = plan_memory(g)
    for node in g.nodes:
        for i in node.inputs:
            for o in node.outputs:
                if i in plan and o in plan:
                    a, b = plan[i], plan[o]
                    assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset


def test_inputs_outputs_and_constants_are_not_in_the_arena():
    gb = Builder("io")
    x = gb.input("x", (4, 6))
    w = gb.const(np.ones((4, 6), np.float32), "w")
    a = gb.op("test.add", x, w)
    b = gb.op("test.neg", a)
    gb.output(b, gb.op("test.neg", b))
    g = gb.finish()
    plan = plan_memory(g)
    assert set(plan.allocations) == {a}
    for v in (x, w, b):
        assert v not in plan
        with pytest.raises(TesseraError, match=f"%{v.name} is not in the arena"):
            plan[v]
    assert plan.input_bytes == 96 and plan.constant_bytes == 96 and plan.output_bytes == 2 * 96


def test_offsets_respect_the_alignment_and_dtype_sizes():
    gb = Builder("dtypes")
    x = gb.input("x", (3, 5), "float64")
    i = gb.op("test.to_int32", x)                     # 60 bytes
    lo, hi = gb.op("test.split2", gb.input("y", (3, 6), "int8"))   # 9 bytes each
    s = gb.op("test.add", lo, hi)
    gb.output(gb.op("test.to_int32", gb.op("test.add", i, i)), gb.op("test.to_int32", s))
    g = gb.finish()
    assert value_nbytes(i) == 60 and value_nbytes(lo) == 9 and value_nbytes(x) == 120
    for align in (1, 64, 256):
        plan = plan_memory(g, alignment=align)
        check_memory_plan(g, plan)
        assert all(a.offset % align == 0 for a in plan.allocations.values())
        assert plan.allocations[lo].nbytes == 9
    with pytest.raises(TesseraError, match="power of two"):
        plan_memory(g, alignment=48)
    with pytest.raises(TesseraError, match="unknown strategy 'best'"):
        plan_memory(g, strategy="best")


def test_symbolic_shapes_are_refused_naming_the_tensor():
    gb = Builder("sym")
    x = gb.input("x", ("N", 4))
    gb.output(gb.op("test.neg", gb.op("test.neg", x)))
    with pytest.raises(ShapeError, match=r"%x is float32\[N, 4\], a symbolic shape.*shape_dict"):
        plan_memory(gb.finish())


def test_naive_gives_each_tensor_its_own_bytes():
    g = chain(5)
    plan = plan_memory(g, strategy="naive")
    check_memory_plan(g, plan)
    assert plan.arena_bytes == plan.naive_bytes and plan.num_storages == 4
    assert plan.arena_bytes > plan_memory(g).arena_bytes


def test_the_checker_finds_broken_plans():
    g = chain(4)
    plan = plan_memory(g)
    a, b, c = [n.output for n in g.nodes[:3]]       # a, b alive together at node 1; b, c at node 2
    with pytest.raises(TesseraError, match=r"%neg_1 .* and %neg .* are alive at the same time and share memory"):
        check_memory_plan(g, _with(plan, {b: plan[a]}))
    with pytest.raises(TesseraError, match="not a multiple of 64"):
        check_memory_plan(g, _with(plan, {a: Allocation(0, 1000, plan[a].nbytes)}))
    with pytest.raises(TesseraError, match="needs 512 bytes, the plan gives it 100"):
        check_memory_plan(g, _with(plan, {a: Allocation(0, plan[a].offset, 100)}))
    broken = _with(plan, {})
    broken.allocations = {v: x for v, x in plan.allocations.items() if v is not c}
    with pytest.raises(TesseraError, match="%neg_2 has no place in the arena"):
        check_memory_plan(g, broken)
    outside = _with(plan, {})
    outside.arena_bytes = plan.arena_bytes - 64
    with pytest.raises(TesseraError, match="outside the arena"):
        check_memory_plan(g, outside)
    # a and c are never alive together: sharing their bytes is fine
    check_memory_plan(g, _with(plan, {c: plan[a]}))


def _with(plan, changes):
    allocs = dict(plan.allocations)
    allocs.update(changes)
    out = object.__new__(MemoryPlan)
    out.__dict__.update(plan.__dict__)
    out.allocations = allocs
    return out


def test_lifetimes_run_from_definition_to_last_read():
    gb = Builder("life")
    x = gb.input("x", (2, 4))
    a = gb.op("test.neg", x)              # node 0, read by nodes 1 and 3
    b = gb.op("test.neg", a)              # node 1
    lo, hi = gb.op("test.split2", b)      # node 2: hi is never read
    gb.output(gb.op("test.add", a, b), lo)  # node 3
    g = gb.finish()
    life = lifetimes(g)
    assert life[a] == (0, 3) and life[b] == (1, 3) and life[hi] == (2, 2) and life[lo] == (2, 2)


def test_the_report_gives_the_figures():
    g = chain(6)
    plan = plan_memory(g)
    text = str(plan)
    assert "memory plan of graph 'chain'" in text and "(greedy, 64-byte alignment)" in text
    assert f"{plan.saving:.2f}x smaller" in text
    d = plan.as_dict()
    assert d["arena_bytes"] == plan.arena_bytes and d["naive_bytes"] == plan.naive_bytes
    assert d["saving"] == pytest.approx(plan.naive_bytes / plan.arena_bytes)
    table = plan.table()
    assert all(f"%{v.name}" in table for v in plan.allocations)


# ----------------------------------------------------------------------------- random graphs
def random_graph(draw_ints, n_nodes):
    """A random DAG of test ops with tensors of different sizes and dtypes."""
    gb = Builder("random")
    vals = [gb.input("x", (draw_ints(1, 6), 2 * draw_ints(1, 8)))]
    for _ in range(n_nodes):
        kind = draw_ints(0, 4)
        v = vals[draw_ints(0, len(vals) - 1)]
        if v.dtype != "float32":
            vals.append(gb.op("test.neg", v))
        elif kind == 0:
            same = [u for u in vals if u.type == v.type]
            vals.append(gb.op("test.add", v, same[draw_ints(0, len(same) - 1)]))
        elif kind == 1 and v.type.ndim == 2 and v.shape[1] % 2 == 0:
            vals.extend(gb.op("test.split2", v))
        elif kind == 2 and v.type.ndim == 2:
            others = [u for u in vals if u.dtype == v.dtype and u.type.ndim == 2 and u.shape[1] == v.shape[1]]
            vals.append(gb.op("test.cat0", v, others[draw_ints(0, len(others) - 1)]))
        elif kind == 3 and v.type.ndim == 2:
            vals.append(gb.op("test.sum_rows", v))
        else:
            vals.append(gb.op("test.neg", v))
    outs = [vals[-1]] + [vals[draw_ints(0, len(vals) - 1)] for _ in range(draw_ints(0, 2))]
    gb.output(*outs)
    return gb.finish()


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(1, 30), st.sampled_from([1, 16, 64]))
def test_random_graphs_get_valid_plans_no_larger_than_naive(data, n_nodes, align):
    g = random_graph(lambda lo, hi: data.draw(st.integers(lo, hi)), n_nodes)
    plan = plan_memory(g, alignment=align)
    check_memory_plan(g, plan)
    naive = plan_memory(g, alignment=align, strategy="naive")
    check_memory_plan(g, naive)
    by_size = plan_memory(g, alignment=align, strategy="greedy_by_size")
    check_memory_plan(g, by_size)
    assert plan.live_bytes <= plan.arena_bytes <= by_size.arena_bytes <= naive.arena_bytes


# ----------------------------------------------------------------------------- the zoo
SMALL = {
    "resnet18": dict(image_size=32),
    "resnet50": dict(image_size=32),
    "mobilenet_v2": dict(image_size=32, width_mult=0.5),
    "bert_base": dict(n_layers=2, seq_len=16, hidden=64, heads=4, ffn=128, vocab=500, max_position=64),
    "gpt2_block": dict(seq_len=16, hidden=64, heads=4, n_positions=64),
    "gpt2_small": dict(n_layers=2, seq_len=16, hidden=64, heads=4, vocab=500, n_positions=64),
}


def _zoo_graph(name, **options):
    from tessera import frontend, zoo
    from tessera.graph.const_eval import bind_params

    g, params = frontend.from_onnx(zoo.get_model(name, **options))
    return bind_params(g, params)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_zoo_graph_gets_a_valid_plan(name):
    g = _zoo_graph(name, **SMALL[name])
    plan = plan_memory(g)
    check_memory_plan(g, plan)
    assert plan.live_bytes <= plan.arena_bytes < plan.naive_bytes


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "resnet50", "mobilenet_v2", "bert_base", "gpt2_block"])
def test_every_full_size_zoo_graph_gets_a_valid_plan(name):
    g = _zoo_graph(name)
    plan = plan_memory(g)
    check_memory_plan(g, plan)
    assert plan.live_bytes <= plan.arena_bytes < plan.naive_bytes
