"""tl.autotune / tessera.Config: a sweep keeps the fastest config and records every measurement in the
tuning database, a later tuner starts from the records, a cost-model search measures at most
max_trials candidates, and the outputs the kernel accumulates into are reset between configs."""
import numpy as np
import pytest

import tessera
import tessera.language as tl
from tessera.autotune import Database
from tessera.language.examples import matmul

TARGET = "c -num-threads=2"
CONFIGS = [tessera.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}),
           tessera.Config({"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32})]


@tessera.jit
def accumulate(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.atomic_add(Y + offs, tl.load(X + offs, mask=m), mask=m)


def _problem(m=70, n=50, k=40):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    args = (a, b, np.zeros((m, n), np.float32), m, n, k, k, 1, n, 1, n, 1)
    grid = lambda meta: (tl.cdiv(m, meta["BLOCK_M"]), tl.cdiv(n, meta["BLOCK_N"]))  # noqa: E731
    return args, grid


def test_sweep_keeps_the_fastest_config_and_records_every_measurement(tmp_path):
    db = str(tmp_path / "tile.jsonl")
    tuned = tl.autotune(configs=CONFIGS, key=["M", "N", "K"], database=db)(matmul)
    args, grid = _problem()
    tuned[grid](*args, target=TARGET)
    np.testing.assert_allclose(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)
    (key, timings), = tuned.timings.items()
    assert set(timings) == set(CONFIGS)
    assert tuned.best[key] == min(timings, key=timings.get)
    records = Database(db).records()
    assert len(records) == 2 and {r.trace[0][2]["kwargs"]["BLOCK_M"] for r in records} == {16, 32}


def test_a_new_tuner_starts_from_the_database(tmp_path):
    db = str(tmp_path / "tile.jsonl")
    args, grid = _problem()
    first = tl.autotune(configs=CONFIGS, key=["M", "N", "K"], database=db)(matmul)
    first[grid](*args, target=TARGET)
    again = tl.autotune(configs=CONFIGS, key=["M", "N", "K"], database=db)(matmul)
    args[2][:] = 0
    again[grid](*args, target=TARGET)
    np.testing.assert_allclose(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)
    assert not again.timings                                  # nothing measured: the record decided
    assert list(again.best.values()) == list(first.best.values())
    assert len(Database(db).records()) == 2


def test_another_key_is_tuned_again(tmp_path):
    db = str(tmp_path / "tile.jsonl")
    tuned = tl.autotune(configs=CONFIGS, key=["M", "N", "K"], database=db)(matmul)
    for m in (70, 33):
        args, grid = _problem(m=m)
        tuned[grid](*args, target=TARGET)
        np.testing.assert_allclose(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)
    assert len(tuned.timings) == 2


def test_cost_model_search_measures_at_most_max_trials(tmp_path):
    pytest.importorskip("xgboost")
    space = {"BLOCK_M": [16, 32, 64], "BLOCK_N": [16, 32, 64], "BLOCK_K": [16, 32]}
    tuned = tl.autotune(space=space, key=["M", "N", "K"], max_trials=5, database=str(tmp_path / "t.jsonl"))(matmul)
    args, grid = _problem()
    tuned[grid](*args, target=TARGET)
    np.testing.assert_allclose(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)
    (timings,) = tuned.timings.values()
    assert len(timings) == 5 and len(tuned.configs) == 18


def test_outputs_are_reset_between_configs(tmp_path):
    tuned = tl.autotune(configs=[tessera.Config({"BLOCK": 64}), tessera.Config({"BLOCK": 128})], key=["n"],
                        reset_to_zero=["Y"], database=str(tmp_path / "t.jsonl"))(accumulate)
    x = np.arange(300, dtype=np.float32)
    y = np.zeros(300, np.float32)
    tuned[lambda meta: (tl.cdiv(300, meta["BLOCK"]),)](x, y, 300, target=TARGET)
    np.testing.assert_array_equal(y, x)                      # the tuning runs' sums were reset


def test_configs_must_name_constexpr_parameters(tmp_path):
    with pytest.raises(tessera.TesseraError, match="'M' is not a tl.constexpr parameter"):
        tl.autotune(configs=[tessera.Config({"M": 4})], key=[], database=str(tmp_path / "t.jsonl"))(matmul)
    with pytest.raises(tessera.TesseraError, match="'Q' is not a parameter"):
        tl.autotune(configs=CONFIGS, key=["Q"], database=str(tmp_path / "t.jsonl"))(matmul)


def test_records_of_other_or_malformed_configs_are_passed_over(tmp_path):
    """A record read back names a declared config to be used: a faster record of a config no longer in
    configs=, or one whose trace has another shape, does not decide (nor crash) and forces no re-tuning."""
    from tessera.autotune import TuningRecord

    db = str(tmp_path / "tile.jsonl")
    args, grid = _problem()
    first = tl.autotune(configs=CONFIGS, key=["M", "N", "K"], database=db)(matmul)
    first[grid](*args, target=TARGET)
    d = Database(db)
    (rec, *_) = d.records()
    stale = tessera.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}).as_json()
    d.commit([TuningRecord(rec.workload_key, rec.target, [["TileConfig", [], stale, []]], [1e-12]),
              TuningRecord(rec.workload_key, rec.target, [["TileConfig", [], {"no": "kwargs"}, []]], [1e-12]),
              TuningRecord(rec.workload_key, rec.target, [["Split", [1], 2]], [1e-12])])
    again = tl.autotune(configs=CONFIGS, key=["M", "N", "K"], database=db)(matmul)
    args[2][:] = 0
    again[grid](*args, target=TARGET)
    np.testing.assert_allclose(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)
    assert not again.timings
    assert list(again.best.values()) == list(first.best.values())


def test_search_space_dict_is_not_changed():
    space = {"BLOCK_M": [16, 32], "BLOCK_N": [16], "BLOCK_K": [16], "num_warps": [2, 4]}
    for _ in range(2):
        tuned = tl.autotune(space=space, key=["M"], database="unused.jsonl")(matmul)
        assert len(tuned.configs) == 4 and {c.num_warps for c in tuned.configs} == {2, 4}
    assert space["num_warps"] == [2, 4]


def test_warmup_and_rep_set_the_timing_budget_and_unknown_arguments_are_refused(tmp_path, monkeypatch):
    calls = []
    real = matmul.time

    def spy(*args, **kwargs):
        calls.append({k: kwargs[k] for k in ("number", "repeat", "min_repeat_ms")})
        return real(*args, **kwargs)

    monkeypatch.setattr(matmul, "time", spy)
    tuned = tl.autotune(configs=CONFIGS, key=["M", "N", "K"], database=str(tmp_path / "t.jsonl"), warmup=2, rep=9)(matmul)
    args, grid = _problem()
    tuned[grid](*args, target=TARGET)
    np.testing.assert_allclose(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)
    # per config: one warm-up of >= 2 ms, then `repeat` measurements of >= 9 / repeat ms each (whole ms)
    assert calls == [{"number": 1, "repeat": 1, "min_repeat_ms": 2},
                     {"number": tuned.number, "repeat": tuned.repeat, "min_repeat_ms": -(-9 // tuned.repeat)}] * len(CONFIGS)
    with pytest.raises(tessera.TesseraError, match=r"unknown argument\(s\) \['do_bench'\]"):
        tl.autotune(configs=CONFIGS, key=["M"], do_bench=lambda f: 0)
    with pytest.raises(tessera.TesseraError, match="rep is milliseconds"):
        tl.autotune(configs=CONFIGS, key=["M"], rep=-1)(matmul)
