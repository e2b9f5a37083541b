"""Whole-model tuning: trials and wall time to the tuned latency, from scratch and with transfer.

    python benchmarks/tune_model.py                                   # resnet18, mobilenet_v2, resnet50, bert_base
    python benchmarks/tune_model.py --models resnet18 --trials 2000 --time-budget 45m --json tune.json
    python benchmarks/tune_model.py --small --trials 40 --time-budget 2m    # the test-size models: a smoke run

For each model (tessera.zoo, batch 1; --small: the test-size variants of e2e.py) on
"c -num-threads=N" (--threads, default 2):
1. from scratch: autotune.tune_graph into a fresh database OUT/<model>-scratch.jsonl (--trials and
   --time-budget per model), recording its wall time, trials and the estimated model latency after
   every round (sum of weight x best kernel time over the tasks: tune_graph's estimate); its cost
   model starts from nothing (tune_graph(transfer=False), not from the shipped records);
2. with transfer (after every model's scratch run): an XGBoost cost model pre-trained on the OTHER
   models' scratch databases (and --transfer-db files; kernels the model itself has are left out,
   as tune_graph's transfer does) tunes the model again into a fresh
   OUT/<model>-transfer.jsonl with the same limits (tune_graph's transfer_batch, --transfer-batch: a
   task's rounds measure the pre-trained model's top 4 candidates until 2 rounds bring no gain, then
   full batches; 0 gives full batches from the start);
3. per model: the trials and seconds until the estimate first came within 2% of the scratch run's
   best search estimate (its curve's lowest point: both curves are sums of each run's own search
   measurements; the final estimate after tune_graph's re-measurement of the best candidates is
   lower by the re-measurement's noise, and no curve point is comparable with it), for both runs,
   and their ratio (scratch / transfer: the issue's goal is >= 2x
   fewer trials with transfer), and whether the scratch run kept to the issue's budget (<= 2,000
   trials and 45 minutes: in_budget);
   Each run ends with tune_graph's in-model check (--validate-budget seconds, --no-validate skips
   it): its time is in the wall time (scratch_s), not in the curve's seconds; scratch_check_changed:
   how many tasks it set otherwise than the isolated times;
4. the end-to-end latency, measured: the model compiled untuned (database=False), with the scratch
   records and with the transfer records, beside ONNX Runtime (same thread count), timed in
   interleaved rounds as e2e.py does, outputs checked against ONNX Runtime's; goal_met: in budget
   and tuned at most 0.85x ONNX Runtime's latency.
The CPU's name and the load average are printed with the figures (a shared machine gives noisy
times; so do the estimates: each run measures its kernels itself, so "within 2%" of another run's
final estimate is a threshold on noisy figures). The databases stay in OUT: `tessera compile
--db`, `benchmarks/e2e.py --tuned` use them.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402
from e2e import SMALL, _ort_session  # noqa: E402

DEFAULT_MODELS = "resnet18,mobilenet_v2,resnet50,bert_base"
WITHIN = 0.02


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform knows."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def first_within(history, target_secs: float | None, within: float = WITHIN):
    """(trials, seconds) of the first round (trials, seconds, estimate) whose estimate is within
    `within` of target_secs, or (None, None) when none is."""
    if target_secs is None:
        return None, None
    for trials, secs, est in history:
        if est is not None and est <= target_secs * (1 + within):
            return trials, secs
    return None, None


def curve_best(history) -> float | None:
    """The lowest estimate on a run's curve (seconds), or None when it has none."""
    ests = [est for _, _, est in history if est is not None]
    return min(ests) if ests else None


def _model(name: str, small: bool):
    from tessera import zoo
    from tessera.frontend import from_onnx

    kw = SMALL[name] if small else {}
    model = zoo.get_model(name, **kw)
    graph, params = from_onnx(model)
    return model, graph, params, zoo.sample_input(name, **kw)


def tune_once(name, graph, params, target, db_path, args, cost_model="xgb") -> dict:
    """One tune_graph run into db_path: its figures and curve (and what the in-model check did)."""
    from tessera import autotune
    from tessera.autotune.graph_progress import GraphTuneTable

    table = GraphTuneTable(args.trials, args.time_budget, show=not args.quiet, title=f"{name} -> {db_path.name}",
                           interval=30.0)
    t0 = time.perf_counter()
    with table:   # transfer=False: no pre-training on the shipped records (a scratch run starts from nothing)
        res = autotune.tune_graph(graph, params, target, max_trials=args.trials, database=str(db_path),
                                  cost_model=cost_model, seed=args.seed, time_budget=args.time_budget,
                                  progress=table, transfer=False, validate=not args.no_validate,
                                  validate_budget=args.validate_budget, transfer_batch=args.transfer_batch)
    wall = time.perf_counter() - t0
    _log(table.text())
    check = res.validation
    if check is not None:
        _log(check.table())
    return {"trials": res.trials, "tune_s": res.seconds, "wall_s": wall, "tasks": len(res.tasks),
            "check_s": check.seconds if check is not None else 0.0,
            "check_changed": check.changed if check is not None and not check.skipped else [],
            "check_reverted": bool(check is not None and check.reverted),
            "estimate_ms": res.latency * 1e3 if res.latency else None,
            "default_estimate_ms": res.default_latency * 1e3 if res.default_latency else None,
            "history": [[t, s, e] for t, s, e in res.history]}


def _pretrained(dbs: list, graph, params, target, seed):
    """An XGBModel fitted on the records of dbs for target, the model's own kernels left out (as
    tune_graph's transfer does); (model, records used, seconds)."""
    from tessera import autotune
    from tessera.autotune.scheduler import pretrain_from

    model = autotune.XGBModel(seed=seed)
    t0 = time.perf_counter()
    own = {t.workload.key for t in autotune.extract_tasks(graph, params, target)}
    got = pretrain_from(model, [str(p) for p in dbs], target, exclude=own)
    return model, got["used"], time.perf_counter() - t0


def measure_e2e(name, model, graph, params, feeds, target, threads, dbs: dict, args) -> dict:
    """Measured latency (ms, median) of the model untuned and with each database's records, and ONNX
    Runtime's, timed round-robin (and each one's minimum: steadier on a loaded machine); every output
    checked against ONNX Runtime's."""
    import tessera

    sess = _ort_session(model, threads)
    ref = sess.run(None, feeds)
    fns = {"onnxruntime": lambda: sess.run(None, feeds)}
    ok, notes = True, {}
    for label, db in [("untuned", False)] + list(dbs.items()):
        exe = tessera.compile(graph, params, target=target, database=db)
        out = exe.run(feeds)
        good = all(np.allclose(g, r, rtol=1e-4, atol=1e-4) for g, r in zip(out, ref))
        if not good:
            err = max(float(np.max(np.abs(np.asarray(g) - r))) for g, r in zip(out, ref))
            _log(f"[{name}] {label}: outputs differ from onnxruntime's (max |err| {err:.2e})")
        ok &= good
        if db is not False:
            notes[label] = exe.tuning
            _log(f"[{name}] {label}: {exe.tuning}")
        fns[label] = (lambda exe=exe: exe.run(feeds))
    times = _common.time_interleaved(fns, args.warmup, args.repeat, args.budget)
    out = {f"{k}_ms": v[0] * 1e3 for k, v in times.items()}
    out.update({f"{k}_min_ms": v[1] * 1e3 for k, v in times.items()})
    out["ok"] = ok
    out["tuning"] = notes
    return out


def _ratio(a, b):
    return a / b if a and b else ""


def main(argv=None) -> int:
    from tessera import zoo
    from tessera.cli import parse_duration
    from tessera.errors import TesseraError

    p = _common.parser(__doc__.split("\n")[0])
    p.add_argument("--models", default=DEFAULT_MODELS, help=f"comma-separated zoo models (default {DEFAULT_MODELS})")
    p.add_argument("--trials", type=int, default=2000, help="trials per model and run (default 2000)")
    p.add_argument("--time-budget", default="45m", help="time per model and run (default 45m; 0: none)")
    p.add_argument("--threads", type=int, default=2, help="threads of the tuned kernels and every runtime (default 2)")
    p.add_argument("--out", default="tune_model_out", help="folder of the databases (default tune_model_out)")
    p.add_argument("--overwrite", action="store_true", help="replace databases left in --out by an earlier run")
    p.add_argument("--transfer-db", action="append", default=[], metavar="DB.jsonl",
                   help="also pre-train the transfer cost model on this database (repeatable)")
    p.add_argument("--no-transfer", action="store_true", help="only the from-scratch runs")
    p.add_argument("--no-e2e", action="store_true", help="no end-to-end measurement at the end")
    p.add_argument("--no-validate", action="store_true", help="tune_graph(validate=False): no in-model check")
    p.add_argument("--validate-budget", type=float, default=60.0,
                   help="seconds of tune_graph's in-model check per run (default 60)")
    p.add_argument("--transfer-batch", type=int, default=4,
                   help="tune_graph's transfer_batch: candidates a round with a pre-trained cost model (default 4; "
                        "0: full batches, as from scratch)")
    p.add_argument("--small", action="store_true", help="the small test-size models (a quick smoke run)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--budget", type=float, default=10.0, help="seconds of timed runs per measurement (e2e.py's)")
    p.add_argument("--quiet", action="store_true", help="no progress table")
    args = p.parse_args(argv)
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in zoo.list_models()]
    if unknown:
        p.error(f"unknown model(s) {unknown}; the zoo has {zoo.list_models()}")
    if args.trials < 1 or args.threads < 1:
        p.error("--trials and --threads must be >= 1")
    try:
        args.time_budget = None if args.time_budget in ("0", "") else parse_duration(args.time_budget)
    except TesseraError as e:
        p.error(str(e))
    missing = [d for d in args.transfer_db if not Path(d).is_file()]
    if missing:
        p.error(f"--transfer-db: no such database {missing}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = "-small" if args.small else ""
    runs = ["scratch"] + ([] if args.no_transfer else ["transfer"])
    paths = {(n, r): out / f"{n}{suffix}-{r}.jsonl" for n in names for r in runs}
    taken = [str(q) for q in paths.values() if q.exists()]
    if taken and not args.overwrite:
        p.error(f"{', '.join(taken)} exist: each run tunes into a fresh database (--overwrite replaces them, or "
                f"give another --out)")
    for q in taken:
        os.remove(q)

    target = f"c -num-threads={args.threads}"
    load0 = _common.load_average_text()
    _log(f"CPU: {cpu_name()}; target {target}; load average {load0}")
    built = {n: _model(n, args.small) for n in names}
    results = {n: {} for n in names}
    for n in names:
        _log(f"[{n}] tuning from scratch: {args.trials} trials, time budget {args.time_budget or 'none'} s")
        _, graph, params, _ = built[n]
        results[n]["scratch"] = tune_once(n, graph, params, target, paths[(n, "scratch")], args)
    if not args.no_transfer:
        for n in names:
            others = [paths[(m, "scratch")] for m in names if m != n] + [Path(d) for d in args.transfer_db]
            if not others:
                _log(f"[{n}] no transfer run: no other model's database to pre-train on (give more --models or "
                     f"--transfer-db)")
                continue
            _, graph, params, _ = built[n]
            model, used, secs = _pretrained(others, graph, params, target, args.seed)
            _log(f"[{n}] tuning with transfer: cost model pre-trained on {used} records of "
                 f"{', '.join(q.name for q in others)} in {secs:.1f} s (this model's own kernels left out)")
            r = tune_once(n, graph, params, target, paths[(n, "transfer")], args, cost_model=model)
            r.update(pretrain_records=used, pretrain_s=secs, pretrained_on=[str(q) for q in others])
            results[n]["transfer"] = r

    rows = []
    for n in names:
        sc, tr = results[n]["scratch"], results[n].get("transfer")
        goal = curve_best(sc["history"])
        st, ss = first_within(sc["history"], goal)
        row = {"model": n + (" (small)" if args.small else ""), "tasks": sc["tasks"],
               "default_est_ms": sc["default_estimate_ms"] or "", "scratch_est_ms": sc["estimate_ms"] or "",
               "scratch_curve_best_ms": goal * 1e3 if goal else "",
               "scratch_trials": sc["trials"], "scratch_s": sc["wall_s"],
               "scratch_trials_2pct": st if st is not None else "", "scratch_s_2pct": ss if ss is not None else "",
               "in_budget": bool(sc["trials"] <= 2000 and sc["wall_s"] <= 45 * 60),
               "scratch_check_s": sc["check_s"], "scratch_check_changed": len(sc["check_changed"]),
               "scratch_check_reverted": sc["check_reverted"]}
        if tr is not None:
            tt, ts = first_within(tr["history"], goal)
            row.update({"transfer_est_ms": tr["estimate_ms"] or "", "transfer_trials": tr["trials"],
                        "transfer_s": tr["wall_s"], "transfer_trials_2pct": tt if tt is not None else "not reached",
                        "transfer_s_2pct": ts if ts is not None else "",
                        # a scratch run within 2% of its best once its defaults are measured (one trial a
                        # task) leaves transfer nothing to save: no ratio
                        "trials_ratio": "n/a: at its defaults" if st is not None and st <= sc["tasks"] else
                        _ratio(st, tt), "seconds_ratio": _ratio(ss, ts),
                        "pretrain_records": tr["pretrain_records"]})
        if not args.no_e2e:
            model, graph, params, feeds = built[n]
            dbs = {"tuned": str(paths[(n, "scratch")])}
            if tr is not None:
                dbs["tuned_transfer"] = str(paths[(n, "transfer")])
            e = measure_e2e(n, model, graph, params, feeds, target, args.threads, dbs, args)
            row.update({"untuned_ms": e["untuned_ms"], "tuned_ms": e["tuned_ms"],
                        "tuned_transfer_ms": e.get("tuned_transfer_ms", ""), "ort_ms": e["onnxruntime_ms"],
                        "tuned/ort": e["tuned_ms"] / e["onnxruntime_ms"],
                        "tuned/untuned": e["tuned_ms"] / e["untuned_ms"],
                        "tuned/ort (min)": e["tuned_min_ms"] / e["onnxruntime_min_ms"],
                        "tuned/untuned (min)": e["tuned_min_ms"] / e["untuned_min_ms"], "ok": e["ok"]})
            # the goal: tuned within 2,000 trials and 45 minutes to at most 0.85x ONNX Runtime
            row["goal_met"] = bool(row["in_budget"] and row["tuned/ort"] <= 0.85 and e["ok"])
            results[n]["e2e"] = e
        rows.append(row)
        # each model's figures as soon as they are in (a later model's failure must not lose them)
        _log(f"[{n}] " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
    load = _common.load_average_text()
    print(f"\nCPU: {cpu_name()}; {target}; load average at the start {load0}, at the end {load}")
    print(f"*_2pct: trials / seconds until the estimated latency first came within {WITHIN:.0%} of the scratch "
          f"run's best search estimate (scratch_curve_best_ms); trials_ratio = scratch / transfer (goal >= 2; n/a where the "
          f"scratch run got there with its default schedules alone, one trial a task); in_budget: the scratch run "
          f"took <= 2,000 trials and 45 minutes; goal_met: in budget and tuned/ort <= 0.85")
    _common.report("tune_model", rows, args.json,
                   extra={"cpu": cpu_name(), "target": target, "trials": args.trials, "time_budget_s": args.time_budget,
                          "small": args.small, "load_average_start": load0, "load_average_end": load,
                          "runs": results})
    return 0 if all(r.get("ok", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
