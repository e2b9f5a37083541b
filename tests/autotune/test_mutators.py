"""Mutators: one decision changed, within its legal values; mutated traces replay to valid,
numerically right candidates (or are rejected)."""
import math

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.autotune.mutators import (
    MutateComputeLocation,
    MutateParallel,
    MutateTileSize,
    MutateUnroll,
    default_mutators,
    mutate_any,
)
from tessera.autotune.rules.base import ANN_PARALLEL, ANN_UNROLL
from tessera.autotune.space import (
    candidate_key,
    generate_design_space,
    replay_trace,
    sample_candidate,
)
from tessera.errors import TesseraError
from tessera.tir.schedule import Schedule
from tessera.tir.schedule.examples.gemm import gemm_program

T = "c -num-threads=2"


@pytest.fixture(scope="module")
def gemm_case():
    func = gemm_program(64, 64, 64, nr=16)
    spaces = generate_design_space(func, T)
    return func, spaces


def _changed(old, new):
    """The sampling instructions whose decision differs (mutated traces share the instructions)."""
    return [i for i in new.insts if i.kind.sampling and old.decisions.get(i) != new.decisions.get(i)]


def _mlt_candidate(func, spaces, seed=0):
    space = next(s for s in spaces if any(i.kind.name == "SamplePerfectTile" for i in s.trace.insts))
    return sample_candidate(func, space, T, seed)


def test_mutate_tile_size_moves_one_factor_and_keeps_the_product(gemm_case):
    func, spaces = gemm_case
    cand = _mlt_candidate(func, spaces)
    rng = np.random.default_rng(0)
    for _ in range(20):
        new = MutateTileSize().mutate(cand.trace, rng)
        assert new is not None
        changed = _changed(cand.trace, new)
        assert len(changed) == 1
        inst = changed[0]
        if inst.kind.name == "SamplePerfectTile":
            d = new.decisions[inst]
            assert math.prod(d) == math.prod(cand.trace.decisions[inst])
            assert d[-1] <= inst.attrs[1]
        assert not any(i.kind.name == "EnterPostproc" for i in new.insts)


def test_mutate_tile_size_changes_the_tensor_intrinsics_tile_choices(gemm_case):
    func, spaces = gemm_case
    space = next(s for s in spaces if any(i.kind.name == "Tensorize" for i in s.trace.insts))
    cand = sample_candidate(func, space, T, 1)
    new = MutateTileSize().mutate(cand.trace, np.random.default_rng(3))
    inst = _changed(cand.trace, new)[0]
    assert inst.kind.name == "SampleCategorical"
    sch = replay_trace(func, new, T)
    a, b = np.random.rand(64, 64).astype("float32"), np.random.rand(64, 64).astype("float32")
    c = np.zeros((64, 64), "float32")
    tessera.build(sch, target=T)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)


@pytest.mark.parametrize("mutator,key", [(MutateUnroll(), ANN_UNROLL), (MutateParallel(), ANN_PARALLEL)])
def test_mutate_unroll_and_parallel_change_their_annotation_only(gemm_case, mutator, key):
    func, spaces = gemm_case
    cand = _mlt_candidate(func, spaces, 2)
    new = mutator.mutate(cand.trace, np.random.default_rng(1))
    changed = _changed(cand.trace, new)
    assert len(changed) == 1
    out = changed[0].outputs[0]
    assert any(i.kind.name == "Annotate" and i.attrs[0] == key and i.inputs[1] is out for i in new.insts)
    assert replay_trace(func, new, T) is not None


def test_mutate_compute_location_picks_another_legal_location(gemm_case):
    func, spaces = gemm_case
    cand = _mlt_candidate(func, spaces, 4)
    m = MutateComputeLocation(func)
    rng = np.random.default_rng(2)
    keys = {candidate_key(cand)}
    for _ in range(4):
        new = m.mutate(cand.trace, rng)
        assert new is not None and len(_changed(cand.trace, new)) == 1
        sch = replay_trace(func, new, T)
        assert sch is not None
        keys.add(candidate_key(sch))
    assert len(keys) > 1
    with pytest.raises(TesseraError):
        MutateComputeLocation("not a function")


def test_nothing_to_mutate_gives_none():
    func = gemm_program(32, 32, 32, nr=16)
    untouched = Schedule(func).trace
    rng = np.random.default_rng(0)
    for m, _ in default_mutators(func):
        assert m.mutate(untouched, rng) is None
    assert mutate_any(untouched, rng, default_mutators(func)) is None


def test_mutated_traces_replay_to_valid_right_candidates():
    A = te.placeholder((48, 32), name="A")
    B = te.placeholder((32, 40), name="B")
    k = te.reduce_axis((0, 32), name="k")
    C = te.compute((48, 40), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((48, 40), lambda i, j: te.max(C[i, j], 0.0), name="D")
    func = te.create_prim_func([A, B, D])
    spaces = generate_design_space(func, T)
    rng = np.random.default_rng(5)
    mutators = default_mutators(func)
    a, b = rng.standard_normal((48, 32)).astype("float32"), rng.standard_normal((32, 40)).astype("float32")
    built = 0
    for space in spaces[:-1]:
        trace = sample_candidate(func, space, T, rng).trace
        for _ in range(6):
            new = mutate_any(trace, rng, mutators)
            assert new is not None
            sch = replay_trace(func, new, T)
            if sch is None:
                continue
            trace = sch.trace
        if built < 1:
            d = np.zeros((48, 40), "float32")
            tessera.build(sch or replay_trace(func, trace, T), target=T)(a, b, d)
            np.testing.assert_allclose(d, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)
            built += 1
    assert built >= 1


def test_mutate_any_draws_by_weight():
    func = gemm_program(64, 64, 64, nr=16)
    space = next(s for s in generate_design_space(func, T) if any(
        i.kind.name == "SamplePerfectTile" for i in s.trace.insts))
    cand = sample_candidate(func, space, T, 0)
    rng = np.random.default_rng(0)
    kinds = set()
    for _ in range(10):
        new = mutate_any(cand.trace, rng, [MutateTileSize(), MutateUnroll()], [0.0, 1.0])
        kinds.add(_changed(cand.trace, new)[0].kind.name)
    assert kinds == {"SampleCategorical"}
    with pytest.raises(TesseraError, match="probabilities"):
        mutate_any(cand.trace, rng, [MutateTileSize()], [0.5, 0.5])
