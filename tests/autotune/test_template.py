"""AutoTVM-style templates: knobs are sampling instructions, candidates are right, records replay."""
import numpy as np
import pytest

import tessera
from tessera import autotune, te
from tessera.autotune.task import sampling_decisions
from tessera.errors import TesseraError
from tessera.ir import structural_equal


def _gemm(M, N, K):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


@autotune.template("test_tiled_gemm")
def tiled_gemm(cfg, M, N, K):
    sch = cfg.schedule(_gemm(M, N, K))
    i, j, k = sch.get_loops(sch.get_block("C"))
    cfg.define_split("tile_i", i, num_outputs=2, max_factor=16)
    cfg.define_split("tile_j", j, num_outputs=2, max_factor=16)
    cfg.define_knob("parallel", [True, False])
    io, ii = cfg["tile_i"].apply(sch, i)
    jo, ji = cfg["tile_j"].apply(sch, j)
    cfg.define_reorder("order", [ii, k], policy="all")
    inner = cfg["order"].apply(sch, [ii, k])
    sch.reorder(io, jo, *inner, ji)
    if cfg["parallel"].val:
        sch.parallel(io)
    return sch


def _check(sch, M, N, K):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    c = np.zeros((M, N), np.float32)
    tessera.build(sch, target="c")(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_template_knobs_are_sampling_instructions_and_candidates_are_right():
    seen = set()
    for seed in range(4):
        sch = tiled_gemm(24, 32, 8, seed=seed)
        kinds = [inst.kind.name for inst in sch.trace.insts if inst.kind.sampling]
        assert kinds == ["SamplePerfectTile", "SamplePerfectTile", "SampleCategorical", "SampleCategorical"]
        seen.add(str(sch.mod.script()))
        _check(sch, 24, 32, 8)
    assert len(seen) > 1  # the knobs were drawn, not fixed


def test_template_rerun_with_recorded_decisions_gives_the_same_program():
    sch = tiled_gemm(24, 32, 8, seed=3)
    again = tiled_gemm.instantiate(24, 32, 8, seed=99, decisions=sampling_decisions(sch.trace))
    assert structural_equal(sch.mod, again.mod)


def test_template_space_samples_and_mutates_valid_candidates():
    space = tiled_gemm.space(16, 16, 8)
    rng = np.random.default_rng(0)
    sch = space.sample(rng)
    assert sch is not None
    mutated = [m for m in (space.mutate(sch, rng) for _ in range(6)) if m is not None]
    assert mutated
    for m in mutated[:2]:
        _check(m, 16, 16, 8)
    replayed = space.replay(mutated[0].trace.as_json())
    assert structural_equal(replayed.mod, mutated[0].mod)


def test_template_misuse_is_refused_by_name():
    @autotune.template("test_bad_template")
    def bad(cfg, n):
        A = te.placeholder((n,), name="A")
        B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
        func = te.create_prim_func([A, B])
        if n == 1:
            cfg.define_knob("x", [1, 2])  # before cfg.schedule
        sch = cfg.schedule(func)
        if n == 2:
            cfg.define_knob("x", [1, 2])
            cfg.define_knob("x", [3])
        if n == 3:
            cfg["missing"]
        if n == 4:
            cfg.define_reorder("r", sch.get_loops(sch.get_block("B")), policy="candidate", candidate=[[1]])
        if n == 5:
            return None
        return sch

    with pytest.raises(TesseraError, match="cfg.schedule"):
        bad(1)
    with pytest.raises(TesseraError, match="defined twice"):
        bad(2)
    with pytest.raises(TesseraError, match="missing"):
        bad(3)
    with pytest.raises(TesseraError, match="not a permutation"):
        bad(4)
    with pytest.raises(TesseraError, match="must return the schedule"):
        bad(5)
    assert autotune.get_template("test_bad_template") is bad
    with pytest.raises(TesseraError, match="no autotune template"):
        autotune.get_template("no_such_template")


def test_template_task_tunes_into_the_database_and_applies(tmp_path):
    task = tiled_gemm.task(32, 32, 16, target="c -num-threads=2")
    db = autotune.Database(tmp_path / "t.jsonl")
    res = autotune.tune_tir(task, max_trials=6, database=db, strategy="random", cost_model="random", seed=0,
                            batch_size=3)
    assert res.trials == 6 and res.schedule is not None
    with pytest.raises(TesseraError, match="disagrees"):
        autotune.tune_tir(task, target="c -num-threads=1", max_trials=1)
    best = autotune.apply_best(task.func, db, task.target)
    assert structural_equal(best.mod, res.schedule.mod)
    _check(best, 32, 32, 16)
