"""Estimated model latency against tuning trials, every kernel the runs picked re-measured side by side.

    python benchmarks/tune_model.py --out tm --trials 600 --time-budget 4m     # first: the databases
    python benchmarks/pick_curve.py --out tm [--models resnet18,...] [--rounds 5] [--within 0.01]

tune_model.py's trials figures compare each run's own search estimates: sums of the fastest time
each run measured for each kernel. Those are minima over many noisy measurements (the fastest of
600 candidates a few percent apart is partly the luckiest), taken minutes apart on a machine whose
speed drifts; the longer run's minimum is lower by noise alone, and the other run may never come
within 2% of it. Here each run's database (OUT/<model>-scratch.jsonl, -transfer.jsonl) is replayed
in the order it measured its candidates (the in-model check's picks left out): after each trial,
every task's pick is its fastest record so far (what tessera.compile would build; the task's
default before its first record). Every kernel either run ever picked, and every task's default,
is then measured again -- all of them in --rounds interleaved rounds, in a fresh order each round,
with tune_graph's own runner (tune.graph_runner: the model's cache conditions) -- and each run's
curve is the model's estimated latency after each trial from those times (sum over tasks of
weight x median of the re-measured times of its pick). A pick that only won by a lucky time
counts at its real time; both runs are judged in the same minutes.

Per model: target, the scratch run's estimate after its last trial; per run the fewest trials whose
estimate is within --within of it (trials_to_target; none: not reached); trials_ratio = scratch /
transfer (the issue's goal: >= 2). The in-model latency itself is transfer_curve.py's.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402
from transfer_curve import common_arguments, log_row, read_db, run_databases, trials_to_target  # noqa: E402
from tune_model import cpu_name  # noqa: E402


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def pick_events(path: Path, keys: set) -> tuple:
    """(trials, [(trial, workload key, trace)]): each time a task's fastest record changed, replaying
    the database in the order its trials were measured (records of other workloads left out)."""
    _, lines = read_db(path)
    best, events = {}, []
    for i, line in enumerate(lines, 1):
        rec = json.loads(line)
        key = rec["workload_key"]
        if key not in keys or rec.get("error") is not None or not rec.get("run_secs"):
            continue
        secs = float(np.median(rec["run_secs"]))
        if key not in best or secs < best[key]:
            best[key] = secs
            events.append((i, key, rec["trace"]))
    return len(lines), events


def remeasure(cands: dict, tasks: dict, target: str, rounds: int, seed: int) -> dict:
    """{candidate id: median seconds over rounds}: every candidate (workload key, trace) built once,
    then timed once a round, the rounds in fresh orders, with tune_graph's default runner."""
    from tessera.autotune.measure import LocalBuilder, MeasureCandidate
    from tessera.autotune.tune import graph_runner, weights_outgrow_cache

    runner = graph_runner(weights_outgrow_cache(list(tasks.values()), target))
    ids = sorted(cands)
    mcs = [MeasureCandidate(tasks[cands[c][0]].workload, cands[c][1], tasks[cands[c][0]].weights) for c in ids]
    builder = LocalBuilder()
    try:
        built = builder.build(mcs, target)
    finally:
        builder.close()
    bad = [ids[k] for k, b in enumerate(built) if not b.ok]
    if bad:
        raise SystemExit(f"{len(bad)} picked candidates no longer build, e.g. {built[ids.index(bad[0])].error_msg}")
    rng = np.random.default_rng(seed)
    times = {c: [] for c in ids}
    for _ in range(rounds):
        order = rng.permutation(len(ids))
        res = runner.run([mcs[k] for k in order], [built[k] for k in order], target)
        for k, r in zip(order, res):
            if r.error_kind is not None:
                raise SystemExit(f"re-measuring {ids[k]}: {r.error_kind}: {r.error_msg}")
            times[ids[k]].append(r.secs)
    return {c: float(np.median(v)) for c, v in times.items()}


def measure_model(name, out: Path, args) -> dict:
    from tessera import autotune, zoo
    from tessera.frontend import from_onnx

    runs = run_databases(name, out)
    graph, params = from_onnx(zoo.get_model(name))
    target = f"c -num-threads={args.threads}"
    tasks = {t.workload.key: t for t in autotune.extract_tasks(graph, params, target)}
    cands, default_of = {}, {}           # id -> (key, trace); key -> id of its default
    for key, t in tasks.items():
        sch = t.space.default()
        if sch is not None:
            default_of[key] = len(cands)
            cands[len(cands)] = (key, sch.trace.as_json())
    seen = {json.dumps(c, sort_keys=True): i for i, c in cands.items()}
    trials, events = {}, {}
    for run, path in runs.items():
        trials[run], evs = pick_events(path, set(tasks))
        events[run] = []
        for i, key, trace in evs:
            text = json.dumps([key, trace], sort_keys=True)
            cid = seen.get(text)
            if cid is None:
                cid = seen[text] = len(cands)
                cands[cid] = (key, trace)
            events[run].append((i, key, cid))
    _log(f"[{name}] re-measuring {len(cands)} kernels ({len(default_of)} defaults) in {args.rounds} rounds")
    secs = remeasure(cands, tasks, target, args.rounds, args.seed)
    curves = {}
    for run in runs:
        pick = dict(default_of)
        est = lambda: sum(tasks[k].weight * secs[c] for k, c in pick.items())   # noqa: E731
        curve = [(0, est())]
        for i, key, cid in events[run]:
            pick[key] = cid
            curve.append((i, est()))
        curve.append((trials[run], est()))
        curves[run] = curve
    target_s = curves["scratch"][-1][1]
    row = {"model": name, "kernels_remeasured": len(cands), "default_ms": curves["scratch"][0][1] * 1e3,
           "target_ms": target_s * 1e3, "target/default": target_s / curves["scratch"][0][1],
           "transfer_final_ms": curves["transfer"][-1][1] * 1e3,
           **trials_to_target(curves, trials, target_s, args.within)}
    for run in runs:     # the curve at a few trial counts (its value after the last change before each)
        pts = [p for p in (25, 50, 100, 200, 300, 400, 600, trials[run]) if p <= trials[run]]
        row[f"{run}_curve_ms"] = " ".join(
            f"{p}:{[v for n, v in curves[run] if n <= p][-1] * 1e3:.3f}" for p in sorted(set(pts)))
    log_row(name, row)
    return row


def main(argv=None) -> int:
    p = _common.parser(__doc__.split("\n")[0])
    common_arguments(p)
    p.add_argument("--rounds", type=int, default=5, help="timing rounds of every picked kernel (default 5)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    out = Path(args.out)
    load0 = _common.load_average_text()
    rows = [measure_model(m.strip(), out, args) for m in args.models.split(",") if m.strip()]
    print(f"\nCPU: {cpu_name()}; c -num-threads={args.threads}; load average {load0} -> {_common.load_average_text()}")
    print(f"estimates from kernel times re-measured side by side ({args.rounds} rounds, medians); target_ms: the "
          f"scratch run's after its last trial; trials_to_target: the fewest trials whose estimate is within "
          f"{args.within:.0%} of it; trials_ratio = scratch / transfer (goal >= 2)")
    _common.report("pick_curve", rows, args.json, extra={"rounds": args.rounds, "within": args.within})
    return 0


if __name__ == "__main__":
    sys.exit(main())
