"""tune_tir: candidates measured once each, records in the database, resume, apply_best by target."""
from functools import partial

import numpy as np
import pytest

import tessera
from tessera import autotune, te
from tessera.autotune.search import AnnealingSearch, EvolutionarySearch
from tessera.errors import TesseraError
from tessera.ir import structural_equal

# small searches: the default population sizes are for real tuning, not an 8-trial test
SMALL = {"random": "random", "evolutionary": partial(EvolutionarySearch, population=16, generations=2),
         "annealing": partial(AnnealingSearch, parallel=8, steps=6)}

TARGET = "c -num-threads=2"
FAST = {"runner": autotune.LocalRunner(number=1, repeat=1, min_repeat_ms=1)}  # one worker for the file, short timing


def _matmul_relu(M=32, N=32, K=32):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((M, N), lambda i, j: te.max(C[i, j], 0.0), name="D")
    return te.create_prim_func([A, B, D])


def _check(sch, M=32, N=32, K=32):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    d = np.zeros((M, N), np.float32)
    tessera.build(sch, target=TARGET)(a, b, d)
    np.testing.assert_allclose(d, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("strategy,model", [("random", "random"), ("evolutionary", "xgb"), ("annealing", "xgb")])
def test_tune_tir_measures_distinct_candidates_and_keeps_the_best(tmp_path, strategy, model):
    func = _matmul_relu()
    db = autotune.Database(tmp_path / "db.jsonl")
    res = autotune.tune_tir(func, target=TARGET, max_trials=6, database=db, strategy=SMALL[strategy], cost_model=model,
                            seed=1, batch_size=3, **FAST)
    assert res.trials == 6
    recs = list(db.records())
    assert len(recs) == 6
    # every measured candidate is a different program
    keys = set()
    for r in recs:
        sch = tessera.tir.Schedule(func)
        tessera.tir.schedule.Trace.apply_json_to_schedule(r.trace, sch)
        keys.add(tessera.ir.structural_hash(sch.mod))
    assert len(keys) == 6
    good = [r for r in recs if r.error is None]
    assert res.run_secs == pytest.approx(min(float(np.mean(r.run_secs)) for r in good))
    _check(res.schedule)
    assert res.history[-1][0] == 6


def test_tune_tir_resumes_from_the_database(tmp_path):
    func = _matmul_relu()
    path = tmp_path / "db.jsonl"
    autotune.tune_tir(func, target=TARGET, max_trials=3, database=path, strategy="random", cost_model="random",
                      seed=2, batch_size=3, **FAST)
    res = autotune.tune_tir(func, target=TARGET, max_trials=5, database=path, strategy=SMALL["evolutionary"],
                            cost_model="xgb", seed=3, batch_size=3, **FAST)
    assert res.trials == 5
    assert len(list(autotune.Database(path).records())) == 5


def test_apply_best_uses_only_records_of_the_same_target(tmp_path):
    func = _matmul_relu()
    db = autotune.Database(tmp_path / "db.jsonl")
    res = autotune.tune_tir(func, target=TARGET, max_trials=3, database=db, strategy="random", cost_model="random",
                            seed=4, batch_size=3, **FAST)
    best = autotune.apply_best(func, db, TARGET)
    assert structural_equal(best.mod, res.schedule.mod)
    assert autotune.apply_best(func, db, "c -num-threads=1") is None
    assert autotune.apply_best(func, db, "c -mcpu=haswell -num-threads=2") is None


def test_tune_tir_refuses_bad_arguments():
    func = _matmul_relu()
    with pytest.raises(TesseraError, match="strategy"):
        autotune.tune_tir(func, target=TARGET, max_trials=1, strategy="greedy")
    with pytest.raises(TesseraError, match="cost model"):
        autotune.tune_tir(func, target=TARGET, max_trials=1, cost_model="gbm")
    with pytest.raises(TesseraError, match="max_trials"):
        autotune.tune_tir(func, target=TARGET, max_trials=-1)
    with pytest.raises(TesseraError, match="PrimFunc"):
        autotune.tune_tir("gemm", target=TARGET, max_trials=1)


def test_a_candidate_slower_than_the_cutoff_is_checked_but_not_timed_further():
    from tessera.autotune.measure.runner import measure

    func = _matmul_relu()
    task = autotune.TuneTask(func, TARGET)
    rng = np.random.default_rng(0)
    schs = [s for s in (task.space.sample(rng) for _ in range(6)) if s is not None][:2]
    cands = [autotune.MeasureCandidate(task.workload, s.trace.as_json()) for s in schs]
    # TESSERA_SPIN_US=0: a busy checked call is timed in full whatever the cutoff (contention.WaitMeter), and
    # the pool's threads, spinning with sched_yield on a machine the parallel suite loads, add to the
    # process's waits for a CPU (it read "busy" once in five suite runs)
    runner = autotune.LocalRunner(number=2, repeat=3, min_repeat_ms=0, env={"TESSERA_SPIN_US": "0"})
    full = measure(cands, TARGET, runner=runner)
    cut = measure(cands, TARGET, runner=runner, cutoff_secs=1e-12)
    for f, c in zip(full, cut):
        assert f.error_kind is None and c.error_kind is None
        assert len(f.run_secs) == 3 and len(c.run_secs) == 1


class _LuckyFirstRunner:
    """A runner (measuring where it builds) whose first look at each candidate reads 1 ms and every
    later one 2 ms: a first time that is only luck."""

    builds_remotely = True

    def __init__(self):
        self.seen = {}

    def measure(self, cands, target):
        from tessera.autotune.measure import MeasureResult

        out = []
        for c in cands:
            key = repr(c.trace)
            n = self.seen[key] = self.seen.get(key, 0) + 1
            out.append(MeasureResult((1e-3 if n == 1 else 2e-3,) * 3))
        return out


def test_a_confirming_tuner_measures_each_new_best_again_and_ranks_it_by_both_looks(tmp_path):
    from tessera.autotune.cost_model import make_cost_model
    from tessera.autotune.tune import TaskTuner

    task = autotune.TuneTask(_matmul_relu(), TARGET)
    db = autotune.Database(tmp_path / "db.jsonl")
    runner = _LuckyFirstRunner()
    tu = TaskTuner(task, make_cost_model("random", 0), np.random.default_rng(0), SMALL["random"], db, runner,
                   confirm=True)
    tu.start()
    first = task.space.sample(np.random.default_rng(1))
    assert tu.measure([first]) == 1
    assert tu.best_secs == pytest.approx(1.5e-3)        # the median of 1, 1, 1, 2, 2, 2 ms
    n = tu.round(4)
    assert n == 4 and tu.trials == 5                    # confirmations are not trials
    # every later candidate's first look (1 ms) beat 1.5 ms, so each was measured again: none stays ahead
    assert tu.best_secs == pytest.approx(1.5e-3) and tu.best_trace.as_json() == first.trace.as_json()
    recs = list(db.records())
    assert len(recs) == 5 and all(len(r.run_secs) == 6 and r.secs == pytest.approx(1.5e-3) for r in recs)
    assert all(v == 2 for v in runner.seen.values())
    # without confirmation the luckiest first look wins
    plain = TaskTuner(task, make_cost_model("random", 0), np.random.default_rng(0), SMALL["random"], None,
                      _LuckyFirstRunner())
    plain.measure([first])
    assert plain.best_secs == pytest.approx(1e-3)
