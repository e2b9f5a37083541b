"""Sampling instructions: valid draws, seeded randomness, decisions, errors."""
import collections
import math

import numpy as np
import pytest

from tessera import te
from tessera.errors import ScheduleError
from tessera.tir.schedule import INLINE_MARK, ROOT_MARK
from tessera.tir.schedule.sampling import sample_tile_sizes

from schedule_helpers import check_gemm, gemm, schedule, sym_gemm


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def test_perfect_tile_products_and_innermost_bound():
    sch = schedule(gemm(n=96), seed=0)
    i = sch.get_loops(sch.get_block("C"))[0]
    inner_seen = set()
    for n in (1, 2, 3, 4):
        for _ in range(30):
            vs = sch.sample_perfect_tile(i, n=n, max_innermost_factor=8)
            vals = sch.get(vs)
            assert len(vals) == n and math.prod(vals) == 96
            if n > 1:
                assert vals[-1] <= 8
                inner_seen.add(vals[-1])
    assert inner_seen == {d for d in _divisors(96) if d <= 8}     # every allowed innermost shows up
    unlimited = {tuple(sch.get(sch.sample_perfect_tile(i, n=2, max_innermost_factor=-1))) for _ in range(200)}
    assert max(v[-1] for v in unlimited) > 8


def test_perfect_tile_algorithm_edges():
    rng = np.random.default_rng(0)
    assert sample_tile_sizes(rng, 17, 1, 16) == [17]
    assert sample_tile_sizes(rng, 1, 3, 16) == [1, 1, 1]
    for _ in range(50):
        v = sample_tile_sizes(rng, 360, 4, 16)
        assert math.prod(v) == 360 and v[-1] <= 16
    v = sample_tile_sizes(rng, 13, 3, 4)                          # a prime above the bound
    assert v[-1] == 1 and math.prod(v) == 13


def test_perfect_tile_decision_is_used_and_checked():
    sch = schedule(gemm())
    i = sch.get_loops(sch.get_block("C"))[0]
    assert sch.get(sch.sample_perfect_tile(i, n=3, decision=[2, 4, 8])) == [2, 4, 8]
    assert sch.trace.decisions[sch.trace.insts[-1]] == [2, 4, 8]
    n_inst = len(sch.trace)
    with pytest.raises(ScheduleError, match=r"decision \[3, 4, 8\] for loop 'i' multiplies to 96, not its extent 64"):
        sch.sample_perfect_tile(i, n=3, decision=[3, 4, 8])
    with pytest.raises(ScheduleError, match="must be 3 positive ints"):
        sch.sample_perfect_tile(i, n=3, decision=[64, 1])
    with pytest.raises(ScheduleError, match="must be 2 positive ints"):
        sch.sample_perfect_tile(i, n=2, decision=[0, 64])
    with pytest.raises(ScheduleError, match="n must be an int >= 1"):
        sch.sample_perfect_tile(i, n=0)
    with pytest.raises(ScheduleError, match="max_innermost_factor must be"):
        sch.sample_perfect_tile(i, n=2, max_innermost_factor=0)
    assert len(sch.trace) == n_inst


def test_perfect_tile_needs_a_constant_extent():
    sch = schedule(sym_gemm())
    i = sch.get_loops(sch.get_block("C"))[0]
    with pytest.raises(ScheduleError, match="loop 'i' has the symbolic extent n"):
        sch.sample_perfect_tile(i, n=2)


def test_failed_sampling_leaves_the_random_state():
    a, b = schedule(gemm(), seed=5), schedule(gemm(), seed=5)
    ia = a.get_loops(a.get_block("C"))[0]
    ib = b.get_loops(b.get_block("C"))[0]
    with pytest.raises(ScheduleError):
        a.sample_perfect_tile(ia, n=2, max_innermost_factor=-7)
    assert a.get(a.sample_perfect_tile(ia, n=3)) == b.get(b.sample_perfect_tile(ib, n=3))


def test_categorical_follows_probabilities():
    sch = schedule(gemm(), seed=1)
    counts = collections.Counter(sch.get(sch.sample_categorical([10, 20, 30], [0.2, 0.0, 0.8]))
                                 for _ in range(2000))
    assert set(counts) == {10, 30}
    assert abs(counts[30] / 2000 - 0.8) < 0.05
    assert all(sch.get(sch.sample_categorical([1, 2, 3], [0, 0, 5])) == 3 for _ in range(20))
    assert all(sch.get(sch.sample_categorical([1, 2, 3], [5, 0, 0])) == 1 for _ in range(20))
    v = sch.sample_categorical([7, 8], [1, 1], decision=1)
    assert sch.get(v) == 8 and sch.trace.decisions[sch.trace.insts[-1]] == 1


@pytest.mark.parametrize("cands,probs,decision,message", [
    ([], [], None, "non-empty list of ints"),
    ([1, 2.5], [1, 1], None, "non-empty list of ints"),
    ([1, 2], [1], None, "probs must be a list of 2 numbers"),
    ([1, 2], [1, -1], None, r"probs\[1\] is -1"),
    ([1, 2], [1, float("inf")], None, r"probs\[1\] is inf"),
    ([1, 2], [0, 0], None, "sum to 0"),
    ([1, 2], [1, 1], 2, "decision 2 is not an index"),
    ([1, 2], [1, 1], -1, "decision -1 is not an index"),
])
def test_categorical_errors(cands, probs, decision, message):
    sch = schedule(gemm())
    with pytest.raises(ScheduleError, match=message):
        sch.sample_categorical(cands, probs, decision=decision)
    assert len(sch.trace) == 0


def _chain_gemm():
    A = te.placeholder((16, 8), name="A")
    W = te.placeholder((8, 12), name="W")
    B = te.compute((16, 8), lambda i, j: A[i, j] * 2.0, name="B")
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((16, 12), lambda i, j: te.sum(B[i, k] * W[k, j], axis=k), name="C")
    return te.create_prim_func([A, W, C])


def test_compute_location_candidates():
    from tessera.tir.schedule.locations import compute_locations

    sch = schedule(_chain_gemm())
    idx = sch.state.index("main")
    locs = compute_locations(idx, idx.blocks["B"])
    # inline, root, and the spatial loops i, j of the consumer C (not its reduction loop k)
    assert [k for k, _ in locs] == [-2, -1, 0, 1]
    assert locs[0][1] is INLINE_MARK and locs[1][1] is ROOT_MARK
    assert [loc.loop_var.name for _, loc in locs[2:]] == ["i", "j"]
    # the output block has no consumer and writes a parameter: only the root
    assert [k for k, _ in compute_locations(idx, idx.blocks["C"])] == [-1]


def test_compute_location_of_a_reduction_producer():
    from tessera.tir.schedule.locations import compute_locations

    A = te.placeholder((8, 4), name="A")
    k = te.reduce_axis((0, 4), name="k")
    S = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="S")
    T2 = te.compute((8,), lambda i: S[i] * 2.0, name="T")
    sch = schedule(te.create_prim_func([A, T2]))
    idx = sch.state.index("main")
    assert [k for k, _ in compute_locations(idx, idx.blocks["S"])] == [-1, 0]   # not inlinable


def test_sample_compute_location_draws_and_replays():
    sch = schedule(_chain_gemm(), seed=3)
    b = sch.get_block("B")
    seen = set()
    for _ in range(60):
        loc = sch.sample_compute_location(b)
        d = sch.trace.decisions[sch.trace.insts[-1]]
        seen.add(d)
        got = sch.get(loc)
        if d == -2:
            assert got is INLINE_MARK
        elif d == -1:
            assert got is ROOT_MARK
        else:
            assert got.loop_var.name == ["i", "j"][d]
    assert seen == {-2, -1, 0, 1}
    loc = sch.sample_compute_location(b, decision=1)
    assert sch.get(loc).loop_var.name == "j"
    loc = sch.sample_compute_location(b, decision=7)            # falls back to the nearest below
    assert sch.get(loc).loop_var.name == "j" and sch.trace.decisions[sch.trace.insts[-1]] == 1
    c = sch.get_block("C")
    loc = sch.sample_compute_location(c, decision=-2)           # C cannot be inlined: root
    assert sch.get(loc) is ROOT_MARK and sch.trace.decisions[sch.trace.insts[-1]] == -1
    with pytest.raises(ScheduleError, match="decision 'x' must be an int >= -2"):
        sch.sample_compute_location(b, decision="x")


def test_compute_location_when_consumer_is_reordered_and_split():
    from tessera.tir.schedule.locations import compute_locations

    sch = schedule(_chain_gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    jo, ji = sch.split(j, factors=[None, 4])
    sch.reorder(k, i)                    # k, j_0, j_1, i: the reduction loop k first
    idx = sch.state.index("main")
    locs = compute_locations(idx, idx.blocks["B"])
    # TVM's rule: after a non-data-parallel loop no data-parallel loop is a candidate
    assert [d for d, _ in locs] == [-2, -1, 0] and locs[2][1].loop_var.name == "k"


def test_sampled_values_drive_a_correct_schedule():
    for seed in range(4):
        sch = schedule(gemm(), seed=seed)
        i, j, k = sch.get_loops(sch.get_block("C"))
        ti = sch.sample_perfect_tile(i, n=3, max_innermost_factor=8)
        tj = sch.sample_perfect_tile(j, n=2, max_innermost_factor=16)
        i0, i1, i2 = sch.split(i, ti)
        j0, j1 = sch.split(j, tj)
        sch.reorder(i0, j0, i1, k, i2, j1)
        sch.parallel(i0)
        sch.vectorize(j1)
        check_gemm(sch)
