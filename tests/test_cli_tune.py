"""`tessera tune` (a whole model's kernels into a database, a live table, a PNG curve), resuming it,
`tessera run|compile --db` using the records, and the tune table's figures (GraphTuneTable)."""
import io
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from tessera import autotune
from tessera.autotune import TaskReport
from tessera.autotune.graph_progress import GraphTuneTable, estimated_latency, format_duration
from tessera.cli import main, parse_duration
from tessera.errors import TesseraError

pytest.importorskip("xgboost")

# big enough that the conv's space has ~20 points and dominates the model (its tasks do not all
# finish -- exhausted or negligible -- before the trials are spent)
CI, CO, HW = 16, 32, 16
RNG = np.random.default_rng(0)
W = (RNG.standard_normal((CO, CI, 3, 3)) * 0.1).astype(np.float32)
B = RNG.standard_normal(CO).astype(np.float32)
M = (RNG.standard_normal((CO * HW * HW, 16)) * 0.02).astype(np.float32)
X = RNG.standard_normal((1, CI, HW, HW)).astype(np.float32)


def _reference(x):
    """conv 3x3 pad 1 + bias, relu, flatten, matmul in numpy."""
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((1, CO, HW, HW), np.float32)
    for dy in range(3):
        for dx in range(3):
            conv += np.einsum("nchw,oc->nohw", xp[:, :, dy:dy + HW, dx:dx + HW], W[:, :, dy, dx])
    r = np.maximum(conv + B[None, :, None, None], 0)
    return r.reshape(1, -1) @ M


def _write_model(path, ci=CI, co=CO, hw=HW):
    """x[1,ci,hw,hw] -> Conv(co, 3x3, pad 1) -> Relu -> Reshape[1, co*hw*hw] -> MatMul[co*hw*hw, 16]."""
    rng = np.random.default_rng(1)
    w = W if (ci, co) == (CI, CO) else (rng.standard_normal((co, ci, 3, 3)) * 0.1).astype(np.float32)
    b = B if co == CO else rng.standard_normal(co).astype(np.float32)
    m = M if (co, hw) == (CO, HW) else (rng.standard_normal((co * hw * hw, 16)) * 0.02).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["f"]),
             helper.make_node("MatMul", ["f", "m"], ["y"])]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TP.FLOAT, [1, ci, hw, hw])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [1, 16])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
                           numpy_helper.from_array(m, "m"),
                           numpy_helper.from_array(np.array([1, co * hw * hw], np.int64), "shape")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture
def tiny_model(tmp_path):
    """The CI x HW x HW conv + relu + matmul model, and its input x.npy."""
    path = _write_model(tmp_path / "tiny.onnx")
    np.save(tmp_path / "x.npy", X)
    return tmp_path, path


def _records(db):
    return len(autotune.Database(db).records())


def _trials(out, max_trials):
    """The trials of the tune table's totals line ('N/max trials, ...')."""
    found = re.findall(rf"^(\d+)/{max_trials} trials", out, re.M)
    assert found, out
    return int(found[-1])


def test_tune_writes_db_and_png_refuses_overwrite_resumes_and_run_uses_records(tiny_model, capsys):
    d, model = tiny_model
    db, png = d / "tune.jsonl", d / "curve.png"
    # --no-validate: this test checks the search's records (the in-model check has its own test)
    args = ["tune", str(model), "--trials", "6", "--db", str(db), "--threads", "2", "--seed", "0", "--no-validate"]
    assert main(args + ["--png", str(png)]) == 0
    out = capsys.readouterr().out
    first = _trials(out, 6)
    assert 4 <= first <= 6                      # every task's default, then the search
    records = _records(db)
    assert records >= first                     # (tune_graph may measure its best candidates again)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "fused_nn_contrib_conv2d_NCHWc_add_nn_relu" in out
    assert f"tessera compile {model} --db {db} --target 'c -num-threads=2'" in out

    # an existing database is never tuned into by accident
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("tessera: error: tuning database") and "--resume" in err
    assert _records(db) == records

    # --resume continues: the trials of the database count, the new ones are added
    assert main(["tune", str(model), "--trials", "10", "--db", str(db), "--threads", "2", "--seed", "1",
                 "--resume", "--quiet", "--no-validate"]) == 0
    out = capsys.readouterr().out
    assert f"resuming {db} ({records} records)" in out
    assert first < _trials(out, 10) <= 10
    assert _records(db) > records
    assert (d / "tune.png").exists()            # the default PNG: --db's name with .png

    # run compiles with the records and says so; its output is still the model's
    y = d / "y.npy"
    assert main(["run", str(model), "--db", str(db), "--threads", "2", "--input", str(d / "x.npy"),
                 "--output", str(y)]) == 0
    out = capsys.readouterr().out
    # every kernel had a record: a tuned schedule, or the default where its record measured fastest (a
    # busy machine can time the default first for all of them)
    m = re.search(r"tuning: tuned schedules for (\d+) of (\d+) kernels", out)
    default = re.search(r"(\d+) whose fastest record is the default schedule", out)
    assert m and int(m.group(1)) + (int(default.group(1)) if default else 0) == int(m.group(2)), out
    assert "without a record" not in out and "did not apply" not in out, out
    np.testing.assert_allclose(np.load(y), _reference(X), rtol=1e-4, atol=1e-4)

    # compile builds the tuned kernels into the library
    lib = d / "tuned.so"
    assert main(["compile", str(model), "--db", str(db), "--threads", "2", "-o", str(lib)]) == 0
    assert "tuning: tuned schedules for" in capsys.readouterr().out
    assert main(["run", str(lib), "--input", str(d / "x.npy"), "--output", str(y)]) == 0
    np.testing.assert_allclose(np.load(y), _reference(X), rtol=1e-4, atol=1e-4)
    capsys.readouterr()

    # records tuned for 2 threads are not applied to a 1-thread build
    assert main(["run", str(model), "--db", str(db), "--threads", "1", "--input", str(d / "x.npy")]) == 0
    assert "tuned schedules for 0 of" in capsys.readouterr().out


def test_tune_transfer_pretrains_the_cost_model_from_another_database(tiny_model, capsys):
    d, model = tiny_model
    other = _write_model(d / "other.onnx", ci=8, co=16, hw=8)     # other kernels: the records transfer
    src = d / "src.jsonl"
    assert main(["tune", str(other), "--trials", "4", "--db", str(src), "--threads", "2", "--quiet", "--seed", "0",
                 "--no-transfer"]) == 0
    capsys.readouterr()
    db = d / "new.jsonl"
    assert main(["tune", str(model), "--trials", "5", "--db", str(db), "--threads", "2", "--quiet", "--seed", "0",
                 "--transfer", str(src), "--png", str(d / "t.png")]) == 0
    out = capsys.readouterr().out
    used = int(re.search(r"cost model pre-trained on (\d+) records of " + re.escape(str(src)), out)[1])
    assert 4 <= used <= _records(src)
    assert 4 <= _trials(out, 5) <= 5
    # a model's own records are not transferred to it (they resume through --db)
    assert main(["tune", str(other), "--trials", "4", "--db", str(d / "again.jsonl"), "--threads", "2",
                 "--transfer", str(src)]) == 2
    assert "nothing to pre-train the cost model on" in capsys.readouterr().err


@pytest.mark.parametrize("extra,message", [
    (["--time-budget", "ten minutes"], "--time-budget 'ten minutes': expected a duration"),
    (["--time-budget", "0m"], "must be more than 0 seconds"),
    (["--trials", "0"], "--trials must be at least 1"),
    (["--resume"], "--resume: tuning database"),
    (["--transfer", "missing.jsonl"], "--transfer missing.jsonl: no such tuning database"),
    (["--transfer", "x.jsonl", "--cost-model", "random"], "--transfer pre-trains the XGBoost cost model"),
    (["--transfer", "x.jsonl", "--no-transfer"], "--transfer and --no-transfer contradict each other"),
    (["--early-stopping", "-1"], "--early-stopping must be >= 0"),
    (["--validate-budget", "0s"], "must be more than 0 seconds"),
    (["--validate-budget", "5s", "--no-validate"], "it cannot go with --no-validate"),
])
def test_tune_bad_arguments_exit_2_with_a_message(tiny_model, capsys, extra, message, monkeypatch):
    d, model = tiny_model
    monkeypatch.chdir(d)
    (d / "x.jsonl").write_text("")
    args = ["tune", str(model), "--db", str(d / "none.jsonl")]
    if "--trials" not in extra:
        args += ["--trials", "4"]
    assert main(args + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("tessera: error: ") and message in err, err
    assert not (d / "none.jsonl").exists()


def test_tune_unknown_model_and_db_on_a_library_are_errors(tmp_path, capsys):
    assert main(["tune", str(tmp_path / "nope.onnx"), "--trials", "4", "--db", str(tmp_path / "a.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    lib = tmp_path / "m.so"
    lib.write_bytes(b"")
    assert main(["run", str(lib), "--db", str(tmp_path / "a.jsonl")]) == 2
    assert "--db applies when compiling an ONNX model" in capsys.readouterr().err


@pytest.mark.parametrize("text,secs", [("45", 45), ("90s", 90), ("30m", 1800), ("1.5h", 5400), ("1h30m", 5400),
                                       ("2m30s", 150), (" 10M ", 600)])
def test_parse_duration(text, secs):
    assert parse_duration(text) == secs


@pytest.mark.parametrize("text", ["", "m", "1h30", "30 minutes", "-5m", "1d"])
def test_parse_duration_refuses(text):
    with pytest.raises(TesseraError, match="--time-budget"):
        parse_duration(text)


def _report(name, weight, default, best, trials=1, done=None, errors=0):
    return TaskReport(name, weight, 1e6, trials, errors, default, best, done)


def test_table_estimates_latency_and_eta_from_the_recent_rate():
    t = GraphTuneTable(max_trials=100, show=False)
    reports = [_report("conv", 2, 1e-3, 5e-4, trials=7, errors=3), _report("dense", 1, 2e-3, None)]
    t(reports, dict(trials=10, max_trials=100, seconds=0.0, time_budget=None))
    assert t.eta() is None                                     # no rate yet
    t(reports, dict(trials=30, max_trials=100, seconds=10.0, time_budget=None))
    assert t.rate() == pytest.approx(2.0)                      # 20 trials in 10 s
    assert t.eta() == pytest.approx(35.0)                      # 70 trials left
    assert estimated_latency(reports) == pytest.approx(2 * 5e-4 + 2e-3)
    assert estimated_latency(reports, "default_secs") == pytest.approx(2 * 1e-3 + 2e-3)
    assert estimated_latency([_report("conv", 1, None, 1e-3)], "default_secs", fallback=False) is None
    text = t.text()
    assert "30/100 trials" in text and "1.33x" in text and "ETA 35 s" in text
    assert text.splitlines()[2].split() == ["conv", "2", "7", "3", "1.000", "0.5000", "2.00x", "tuning"]


def test_table_eta_is_capped_by_the_time_budget_and_zero_when_all_done():
    t = GraphTuneTable(max_trials=1000, time_budget=60.0, show=False)
    reports = [_report("conv", 1, 1e-3, 1e-3)]
    t(reports, dict(trials=0, max_trials=1000, seconds=0.0, time_budget=60.0))
    t(reports, dict(trials=10, max_trials=1000, seconds=40.0, time_budget=60.0))
    assert t.eta() == pytest.approx(20.0)                      # 990 trials at 0.25/s, but 20 s of budget left
    t([_report("conv", 1, 1e-3, 1e-3, done="converged")], dict(trials=12, max_trials=1000, seconds=45.0))
    assert t.eta() == 0.0 and "converged" in t.text()


def test_table_renders_with_rich_keeping_the_heaviest_tasks():
    pytest.importorskip("rich")
    from rich.console import Console

    t = GraphTuneTable(max_trials=10, show=False)
    reports = [_report(f"task{i}", 1, (i + 1) * 1e-3, None) for i in range(6)]
    t(reports, dict(trials=6, max_trials=10, seconds=1.0))
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(t.renderable(max_rows=3))
    shown = console.export_text()
    assert "task5" in shown and "task3" in shown and "task0" not in shown and "3 lighter tasks" in shown


def test_format_duration():
    assert [format_duration(s) for s in (None, 5, 125, 7260)] == ["-", "5 s", "2m05s", "2h01m"]


def _bench(name):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"tessera_bench_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_tune_model_benchmark_and_e2e_tuned_rows_on_the_small_models(tmp_path):
    """benchmarks/tune_model.py --small: scratch and transfer runs, the 2% figures, the measured
    latencies; then benchmarks/e2e.py --tuned with the scratch database it left."""
    import json

    pytest.importorskip("onnxruntime")
    out = tmp_path / "tm.json"
    rc = _bench("tune_model").main(["--small", "--models", "resnet18,bert_base", "--trials", "30", "--time-budget",
                                    "60s", "--out", str(tmp_path / "dbs"), "--repeat", "2", "--warmup", "0",
                                    "--budget", "1", "--quiet", "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    rows = {r["model"]: r for r in doc["rows"]}
    assert set(rows) == {"resnet18 (small)", "bert_base (small)"}
    for r in rows.values():
        assert r["ok"] and 0 < r["scratch_trials"] <= 30 and 0 < r["transfer_trials"] <= 30
        # the scratch curve reaches its own lowest point, the target of both runs' 2% figures
        assert r["pretrain_records"] > 0 and r["scratch_trials_2pct"] != "" and r["scratch_curve_best_ms"] > 0
        assert r["scratch_est_ms"] <= r["default_est_ms"] * 1.0001
        assert r["tuned_ms"] > 0 and r["tuned/ort"] == pytest.approx(r["tuned_ms"] / r["ort_ms"])
        assert r["in_budget"] and r["goal_met"] == (r["tuned/ort"] <= 0.85)
    db = tmp_path / "dbs" / "resnet18-small-scratch.jsonl"
    e2e_out = tmp_path / "e2e.json"
    rc = _bench("e2e").main(["--small", "--models", "resnet18", "--tuned", str(db), "--no-torch", "--no-graph",
                             "--warmup", "0", "--repeat", "2", "--budget", "1", "--json", str(e2e_out)])
    assert rc == 0
    doc = json.loads(e2e_out.read_text())
    assert [r["tessera_cfg"] for r in doc["rows"]] == ["O3", "O3-tuned"]
    (t,) = doc["tuned"]
    tuned, kernels = map(int, t["tuned_kernels"].split("/"))
    # every kernel found a record: tuned, kept at its default by the in-model check, or its fastest record
    # is its default schedule (few trials on a small model: often all of them)
    assert t["ok"] and 0 < kernels and tuned + t["kept_by_check"] + t["default_records"] == kernels, t
    assert t["threads"] == 2
    assert t["tuned/untuned"] == pytest.approx(t["tuned_ms"] / t["untuned_ms"])


def test_the_resume_command_repeats_the_options_that_decide_the_tasks_and_the_search(tmp_path, capsys):
    """An existing --db is refused with the command that continues this run: the options that change
    which kernels are tuned (--opt-level, --shape) or how (--early-stopping, --cost-model, transfer)
    are in it; the defaults are left out."""
    import shlex

    db = tmp_path / "t.jsonl"
    db.write_text("")
    base = ["tune", "resnet18", "--trials", "40", "--db", str(db)]
    assert main(base + ["--opt-level", "2", "--early-stopping", "0", "--cost-model", "random",
                        "--strategy", "random", "--shape", "input=1,3,64,64"]) == 2
    err = capsys.readouterr().err
    cmd = shlex.split(re.search(r"`(tessera tune .*?)`", err)[1])
    assert cmd[cmd.index("--opt-level") + 1] == "2" and cmd[cmd.index("--early-stopping") + 1] == "0"
    assert cmd[cmd.index("--cost-model") + 1] == "random" and cmd[cmd.index("--strategy") + 1] == "random"
    assert cmd[cmd.index("--shape") + 1] == "input=1,3,64,64" and cmd[-1] == "--resume"
    other = tmp_path / "other.jsonl"
    other.write_text("")
    assert main(base + ["--transfer", str(other)]) == 2
    cmd = shlex.split(re.search(r"`(tessera tune .*?)`", capsys.readouterr().err)[1])
    assert cmd[cmd.index("--transfer") + 1] == str(other)
    for flag in ("--opt-level", "--early-stopping", "--cost-model", "--strategy", "--no-transfer"):
        assert flag not in cmd
    assert main(base + ["--no-transfer"]) == 2
    assert "--no-transfer" in shlex.split(re.search(r"`(tessera tune .*?)`", capsys.readouterr().err)[1])
    assert main(base + ["--no-validate"]) == 2
    assert "--no-validate" in shlex.split(re.search(r"`(tessera tune .*?)`", capsys.readouterr().err)[1])
    assert main(base + ["--validate-budget", "2m"]) == 2
    cmd = shlex.split(re.search(r"`(tessera tune .*?)`", capsys.readouterr().err)[1])
    assert cmd[cmd.index("--validate-budget") + 1] == "2m" and "--no-validate" not in cmd


def test_tune_checks_its_picks_inside_the_model_and_run_uses_them(tiny_model, capsys):
    """By default `tessera tune` ends with the in-model check: its table is printed, each checked
    kernel's pick is in the database, and `run --db` builds them (tuned, or kept at the default)."""
    d, model = tiny_model
    db = d / "checked.jsonl"
    # 30 trials: the defaults (4), then rounds in task order; with fewer, whether the conv gets a
    # round (and so a candidate to check) hung on the layout transform's share being under 0.5%
    assert main(["tune", str(model), "--trials", "30", "--db", str(db), "--threads", "2", "--seed", "0", "--quiet",
                 "--validate-budget", "4s", "--no-transfer"]) == 0
    out = capsys.readouterr().out
    assert "in-model check: " in out and "end to end (median / min ms)" in out, out
    picks = [r for r in autotune.Database(db).records() if r.pick is not None]
    assert picks and all(r.in_model_secs > 0 for r in picks)
    y = d / "y.npy"
    assert main(["run", str(model), "--db", str(db), "--threads", "2", "--input", str(d / "x.npy"),
                 "--output", str(y)]) == 0
    run_out = capsys.readouterr().out
    n_tuned = int(re.search(r"tuned schedules for (\d+) of", run_out)[1])
    assert n_tuned >= sum(r.pick == "record" for r in picks)        # tasks not checked use their fastest record
    kept = re.search(r"\((\d+) kept there by the tuner's in-model check\)", run_out)
    assert (int(kept[1]) if kept else 0) == sum(r.pick == "default" for r in picks), run_out
    np.testing.assert_allclose(np.load(y), _reference(X), rtol=1e-4, atol=1e-4)


def test_pick_curve_replays_each_tasks_fastest_record_in_the_order_the_trials_were_measured(tmp_path):
    """benchmarks/pick_curve.py's replay: a task's pick changes only when a record beats its fastest
    so far (median of its rounds); errors, in-model picks and other workloads' records change nothing."""
    import json

    pick_events = _bench("pick_curve").pick_events

    def rec(key, secs, trace, **kw):
        return json.dumps({"workload_key": key, "target": "c", "run_secs": secs, "error": None, "trace": trace, **kw})

    lines = [json.dumps({"workload": "a", "func": {}}),
             rec("a", [3.0, 9.0, 3.0], "a0"),            # median 3
             rec("b", [2.0], "b0"),
             rec("a", [1.0, 4.0, 4.0], "a1"),            # median 4 (its minimum 1 does not count)
             rec("a", [], "bad", error={"kind": "crash", "msg": "x"}),
             rec("c", [0.1], "c0"),                      # not a task of the model
             rec("a", [2.0], "a2"),
             rec("b", [0.5], "b1", pick="record", in_model_secs=0.5),     # the in-model check's: left out
             rec("b", [1.5], "b2")]
    db = tmp_path / "m-scratch.jsonl"
    db.write_text("\n".join(lines) + "\n")
    trials, events = pick_events(db, {"a", "b"})
    assert trials == 7          # every trial record, the pick left out
    assert events == [(1, "a", "a0"), (2, "b", "b0"), (6, "a", "a2"), (7, "b", "b2")]


def test_transfer_rank_measures_rank_correlation_and_the_fastest_of_the_top_candidates():
    """benchmarks/transfer_rank.py's figures: Spearman with shared ranks for ties, the
    fastest of the k best-scored candidates, and the exact expectation for k drawn at random (against
    every k-subset)."""
    import itertools

    bench = _bench("transfer_rank")
    rng = np.random.default_rng(3)
    a = rng.integers(0, 4, 25).astype(float)          # many ties
    b = rng.random(25)
    ra = np.argsort(np.argsort(a))                    # no ties: plain ranks agree with the tie-aware ones
    assert bench.spearman(b, b ** 3) == pytest.approx(1.0)
    assert bench.spearman(b, -b) == pytest.approx(-1.0)
    assert np.isnan(bench.spearman(np.ones(5), b[:5]))
    assert bench.spearman(ra, b) == pytest.approx(np.corrcoef(ra, np.argsort(np.argsort(b)))[0, 1])
    ties = np.empty(len(a))
    for v in np.unique(a):                            # tied values share the mean of their positions
        ties[a == v] = np.flatnonzero(np.sort(a) == v).mean()
    assert bench.spearman(a, b) == pytest.approx(np.corrcoef(ties, np.argsort(np.argsort(b)))[0, 1])
    secs = np.array([2.0, 1.0, 4.0, 1.5, 3.0, 2.5])
    assert bench.top_regret([0, 9, 1, 2, 3, 4], secs, 1) == 1.0          # the best-scored is the fastest
    assert bench.top_regret([9, 0, 1, 8, 3, 4], secs, 2) == 1.5          # 2.0 and 1.5 picked
    for k in (1, 2, 4, 6):
        subsets = list(itertools.combinations(secs, k))
        assert bench.random_regret(secs, k) == pytest.approx(np.mean([min(s) for s in subsets]) / secs.min())
