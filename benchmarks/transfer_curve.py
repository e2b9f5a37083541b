"""In-model latency against tuning trials, from scratch and with transfer, timed side by side.

    python benchmarks/tune_model.py --out tm --trials 600 --time-budget 4m     # first: the databases
    python benchmarks/transfer_curve.py --out tm [--models resnet18,...] [--points 50,100,200,400,600]

tune_model.py's trials figures compare each run's own search estimates (sums of kernel times the
run measured itself, minutes or an hour apart); on a shared machine whose speed drifts, and with
searches that gain a few percent over strong default schedules, "within 2% of the scratch run's
best" is decided by noise as often as by the search. Here the question is asked of the model
itself: each run's database (OUT/<model>-scratch.jsonl and -transfer.jsonl, as tune_model.py
leaves them) is cut after its first N records (the order the run measured its candidates in; the
in-model check's picks, written after the trials, are left out; its re-measurements of the best
candidates count as trials after the search's), the model is compiled with each
cut (tessera's shipped records off: only the cut applies), and every cut of both runs and the
untuned model are timed in interleaved rounds (_common.time_interleaved): all figures of a model
come from the same minutes of the machine.

Per model: the latency at every N for both runs; the target, the scratch run's latency with all its
trials; per run the fewest trials N whose latency is within --within (default 1%) of the target
(trials_to_target; none: not reached within the run's trials); trials_ratio = scratch / transfer
(the issue's goal: >= 2). The latencies are medians; the ratio of each point to the untuned model is
printed too.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ["TESSERA_NO_BUILTIN_RECORDS"] = "1"   # only the cut's records apply (set before tessera loads)

import _common  # noqa: E402
  # noqa: E402
from tune_model import DEFAULT_MODELS, cpu_name, first_within  # noqa: E402


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def read_db(path: Path):
    """(workload lines, trial record lines in the order they were measured): the in-model check's
    picks left out, its re-measurements of the best candidates (after the trials) kept."""
    workloads, trials = [], []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            line = line if line.endswith("\n") else line + "\n"
            if "run_secs" not in rec:
                workloads.append(line)
            elif "pick" not in rec:
                trials.append(line)
    return workloads, trials


def run_databases(name: str, out: Path) -> dict:
    """{"scratch": path, "transfer": path}: tune_model.py's two databases of the model in out."""
    runs = {r: out / f"{name}-{r}.jsonl" for r in ("scratch", "transfer")}
    missing = [str(p) for p in runs.values() if not p.is_file()]
    if missing:
        raise SystemExit(f"{name}: no database {missing} (run benchmarks/tune_model.py --out {out} first)")
    return runs


def trials_to_target(curves: dict, trials: dict, target_s: float, within: float) -> dict:
    """The row's trials columns: each run's trial count, the fewest trials whose point of its curve
    ([(trials, seconds)], ascending) is within `within` of target_s, and their ratio scratch / transfer."""
    to = {run: first_within([(n, None, v) for n, v in curve], target_s, within)[0] for run, curve in curves.items()}
    st, tt = to["scratch"], to["transfer"]
    return {"scratch_trials": trials["scratch"], "transfer_trials": trials["transfer"],
            "scratch_trials_to_target": st if st is not None else "none",
            "transfer_trials_to_target": tt if tt is not None else "none",
            "trials_ratio": st / tt if st and tt else ""}


def log_row(name: str, row: dict) -> None:
    _log(f"[{name}] " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))


def common_arguments(p, within: bool = True) -> None:
    """The options of the scripts that read tune_model.py's databases (transfer_curve.py, pick_curve.py,
    transfer_rank.py); within: the trials-to-target threshold too (the curves')."""
    p.add_argument("--out", default="tune_model_out", help="tune_model.py's --out folder (default tune_model_out)")
    p.add_argument("--models", default=DEFAULT_MODELS, help=f"comma-separated zoo models (default {DEFAULT_MODELS})")
    if within:
        p.add_argument("--within", type=float, default=0.01,
                       help="how close to the target counts as reached (0.01: 1%%)")
    p.add_argument("--threads", type=int, default=2, help="threads (the databases' target; default 2)")


def cut(workloads: list, trials: list, n: int, path: Path) -> Path:
    """A database of every workload and the first n trial records, written to path."""
    path.write_text("".join(workloads) + "".join(trials[:n]))
    return path


def measure_model(name, out: Path, points: list, args) -> dict:
    import numpy as np

    import tessera
    from tessera import zoo
    from tessera.frontend import from_onnx

    runs = run_databases(name, out)
    model = zoo.get_model(name)
    feeds = zoo.sample_input(name)
    graph, params = from_onnx(model)
    target = f"c -num-threads={args.threads}"
    cuts_dir = out / "cuts"
    cuts_dir.mkdir(exist_ok=True)
    fns = {}
    untuned = tessera.compile(graph, params, target=target, database=False)
    ref = untuned.run(feeds)
    fns["untuned"] = lambda exe=untuned: exe.run(feeds)
    trials = {}
    for run, path in runs.items():
        workloads, lines = read_db(path)
        trials[run] = len(lines)
        for n in sorted({min(p, len(lines)) for p in points} | {len(lines)}):
            db = cut(workloads, lines, n, cuts_dir / f"{name}-{run}-{n}.jsonl")
            exe = tessera.compile(graph, params, target=target, database=str(db))
            got = exe.run(feeds)
            if not all(np.allclose(g, r, rtol=1e-4, atol=1e-4) for g, r in zip(got, ref)):
                raise SystemExit(f"{name} {run} after {n} trials: outputs differ from the untuned model's")
            fns[f"{run}@{n}"] = lambda exe=exe: exe.run(feeds)
        _log(f"[{name}] {run}: {len(lines)} trials, compiled at {sorted(int(k.split('@')[1]) for k in fns if k.startswith(run))}")
    times = _common.time_interleaved(fns, args.warmup, args.repeat, args.budget)
    med = {k: v[0] for k, v in times.items()}
    curves = {run: {int(k.split("@")[1]): v for k, v in med.items() if k.startswith(run + "@")} for run in runs}
    target_s = curves["scratch"][trials["scratch"]]
    row = {"model": name, "untuned_ms": med["untuned"] * 1e3, "target_ms": target_s * 1e3,
           "target/untuned": target_s / med["untuned"],
           **trials_to_target({run: sorted(c.items()) for run, c in curves.items()}, trials, target_s, args.within)}
    for run in runs:
        row[f"{run}_curve_ms"] = " ".join(f"{n}:{v * 1e3:.3f}" for n, v in sorted(curves[run].items()))
    log_row(name, row)
    return row


def main(argv=None) -> int:
    p = _common.parser(__doc__.split("\n")[0])
    common_arguments(p)
    p.add_argument("--points", default="25,50,100,200,400",
                   help="trial counts to cut each database at (each run's last trial is always one)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--budget", type=float, default=8.0, help="seconds of timed runs per compiled model")
    args = p.parse_args(argv)
    try:
        points = sorted({int(x) for x in args.points.split(",") if x.strip()})
    except ValueError:
        p.error(f"--points: comma-separated trial counts, got {args.points!r}")
    if not points or points[0] < 1:
        p.error("--points: trial counts >= 1")
    out = Path(args.out)
    load0 = _common.load_average_text()
    rows = [measure_model(m.strip(), out, points, args) for m in args.models.split(",") if m.strip()]
    print(f"\nCPU: {cpu_name()}; c -num-threads={args.threads}; load average "
          f"{load0} -> {_common.load_average_text()}")
    print(f"trials_to_target: the fewest trials whose in-model latency is within {args.within:.0%} of the scratch "
          f"run's with all its trials (target_ms); trials_ratio = scratch / transfer (goal >= 2); *_curve_ms: "
          f"trials:latency ms, every point timed in the same interleaved rounds")
    _common.report("transfer_curve", rows, args.json, extra={"points": points, "within": args.within})
    return 0


if __name__ == "__main__":
    sys.exit(main())
