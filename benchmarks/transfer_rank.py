"""How well the transferred cost model ranks the kernels of a model it never saw, from tune_model.py's databases.

    python benchmarks/tune_model.py --out tm --trials 600 --time-budget 4m     # first: the databases
    python benchmarks/transfer_rank.py --out tm [--models resnet18,...] [--top 4]

Transfer saves trials only where the pre-trained model already ranks a new model's candidates. This
asks that directly, without timing anything: for each model M, an XGBModel is pre-trained as
tune_model.py's transfer run pre-trains it (scheduler.pretrain_from on the OTHER models' scratch
databases, M's own workloads left out), and for every task of M whose scratch run measured at least
--min-candidates error-free candidates, those candidates (their traces replayed, features extracted)
are split in random halves (--splits times) and each held-out half is ranked twice: by the
pre-trained model, and by a model trained on the task's other half (its own measurements: what the
task itself teaches; its ceiling is the measurement noise, which rules where a task's candidates lie
within a few percent of each other). Printed per model, over those tasks:
- spearman_transfer / spearman_own: mean Spearman correlation of the predicted order with the
  measured times (1: the measured order; 0: no better than chance);
- topK_transfer / topK_own / topK_random: the fastest measured time among the K (--top; tune_graph's
  transfer_batch is 4) best-ranked candidates over the half's fastest (1.0: the first K picks include
  the best; random: the expectation for K drawn at random), geometric mean over the tasks (a few
  candidates 10-100x slower than the best would rule an arithmetic mean);
- tasks_transfer_beats_random: tasks where the pre-trained model's top K beat random's expectation.
The candidates are those the scratch search chose to measure (its evolutionary picks and random
samples), not a uniform sample of the space. The CPU's name is printed; no figure depends on timing now.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402
from transfer_curve import common_arguments, log_row  # noqa: E402
from tune_model import cpu_name  # noqa: E402


def spearman(a, b) -> float:
    """Spearman's rank correlation of a and b (ties share their mean rank); nan when either is constant."""
    from scipy.stats import spearmanr      # xgboost's dependency, as benchmarks/cost_model.py uses it

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")    # a constant input: nan, which the means skip
        return float(spearmanr(a, b).correlation)


def candidates(path: Path, target, min_candidates: int) -> dict:
    """{workload key: (list of feature matrices, seconds array)} of a database's error-free
    candidates, tasks with fewer than min_candidates left out (a trace measured twice counts once,
    at its median)."""
    from tessera.autotune import Database, record_target
    from tessera.autotune.cost_model.base import run_seconds
    from tessera.autotune.features import extract_features_batch
    from tessera.tir.schedule import Schedule, Trace

    db = Database(str(path))
    out = {}
    for wl in db.workloads():
        by_trace: dict = {}
        for rec in db.records(workload_key=wl.key, target=record_target(target)):
            secs = run_seconds(rec)
            if secs is not None:
                by_trace.setdefault(repr(rec.trace), (rec.trace, []))[1].append(secs)
        if len(by_trace) < min_candidates:
            continue
        schs = []
        for trace, _ in by_trace.values():
            schs.append(Schedule(wl.func))
            Trace.apply_json_to_schedule(trace, schs[-1])
        out[wl.key] = (extract_features_batch(schs, target),
                       np.array([np.median(times) for _, times in by_trace.values()]))
    return out


def top_regret(scores, secs, k: int) -> float:
    """Fastest measured time among the k best-scored candidates over the fastest of all."""
    return float(secs[np.argsort(-np.asarray(scores), kind="stable")[:k]].min() / secs.min())


def random_regret(secs, k: int) -> float:
    """The expected fastest of k candidates drawn without replacement, over the fastest of all:
    sum over sorted times t_(i) of P(the minimum is the i-th) = C(n-i, k-1) / C(n, k)."""
    from math import comb

    t = np.sort(secs)
    n = len(t)
    k = min(k, n)
    p = np.array([comb(n - 1 - i, k - 1) for i in range(n)], dtype=np.float64) / comb(n, k)
    return float((p * t).sum() / t[0])


def split_scores(feats, secs, transferred, rng, splits: int) -> list:
    """`splits` random halves of a task's candidates: a model trained on one half (its own
    measurements) and the transferred scores each rank the other half. [(own scores, transferred
    scores, seconds)] of the held-out halves."""
    from tessera.autotune.cost_model import XGBModel
    from tessera.autotune.measure import MeasureResult

    out = []
    n = len(secs)
    for _ in range(splits):
        perm = rng.permutation(n)
        tr, te = perm[: n // 2], perm[n // 2:]
        m = XGBModel(seed=0)
        m.update([feats[i] for i in tr], [MeasureResult((float(secs[i]),)) for i in tr], ["task"] * len(tr))
        out.append((m.predict([feats[i] for i in te]), transferred[te], secs[te]))
    return out


def _geomean(xs) -> float:
    return float(np.exp(np.mean(np.log(xs))))


def rank_model(name: str, out: Path, models: list, args) -> dict:
    from tessera.autotune import Database
    from tessera.autotune.cost_model import XGBModel
    from tessera.autotune.scheduler import pretrain_from
    from tessera.target import Target

    target = Target(f"c -num-threads={args.threads}")
    own = out / f"{name}-scratch.jsonl"
    others = [out / f"{o}-scratch.jsonl" for o in models if o != name]
    for p in [own, *others]:
        if not p.is_file():
            raise SystemExit(f"no database {p} (run benchmarks/tune_model.py --out {out} first)")
    tasks = candidates(own, target, args.min_candidates)
    model = XGBModel(seed=0)
    got = pretrain_from(model, [str(p) for p in others], target,
                        exclude={w.key for w in Database(str(own)).workloads()})
    rng = np.random.default_rng(args.seed)
    k = args.top
    cols = {c: [] for c in ("spearman_transfer", "spearman_own", "top_transfer", "top_own", "top_random")}
    for feats, secs in tasks.values():
        halves = split_scores(feats, secs, model.predict(feats), rng, args.splits)
        cols["spearman_transfer"].append(np.nanmean([spearman(-tr, t) for _, tr, t in halves]))
        cols["spearman_own"].append(np.nanmean([spearman(-ow, t) for ow, _, t in halves]))
        cols["top_transfer"].append(np.mean([top_regret(tr, t, k) for _, tr, t in halves]))
        cols["top_own"].append(np.mean([top_regret(ow, t, k) for ow, _, t in halves]))
        cols["top_random"].append(np.mean([random_regret(t, k) for _, _, t in halves]))
    row = {"model": name, "tasks_ranked": len(tasks),
           "candidates": int(sum(len(s) for _, s in tasks.values())), "pretrain_records": got["used"],
           "spearman_transfer": float(np.nanmean(cols["spearman_transfer"])),
           "spearman_own": float(np.nanmean(cols["spearman_own"])),
           f"top{k}_transfer": _geomean(cols["top_transfer"]),
           f"top{k}_own": _geomean(cols["top_own"]),
           f"top{k}_random": _geomean(cols["top_random"]),
           "tasks_transfer_beats_random": int(sum(a < b for a, b in zip(cols["top_transfer"], cols["top_random"])))}
    log_row(name, row)
    return row


def main(argv=None) -> int:
    p = _common.parser(__doc__.split("\n")[0])
    common_arguments(p, within=False)
    p.add_argument("--top", type=int, default=4, help="K of the top-K columns (default 4: transfer_batch)")
    p.add_argument("--min-candidates", type=int, default=10,
                   help="tasks with fewer measured candidates are skipped (default 10)")
    p.add_argument("--splits", type=int, default=5, help="random halves for the own-candidates model (default 5)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.top < 1 or args.min_candidates < 2 * args.top + 2 or args.splits < 1:
        p.error("--top >= 1, --min-candidates >= 2 x --top + 2 (a held-out half has more than --top) and "
                "--splits >= 1")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if len(models) < 2:
        p.error("--models needs at least two models (each is ranked by a model pre-trained on the others)")
    out = Path(args.out)
    rows = [rank_model(m, out, models, args) for m in models]
    print(f"\nCPU: {cpu_name()}; c -num-threads={args.threads}; databases of {out}")
    print(f"per model, over its tasks with >= {args.min_candidates} measured candidates, each task's candidates "
          f"split in random halves {args.splits} times and ranked on the held-out half: Spearman of the predicted "
          f"vs measured order (mean; transfer: pre-trained on the other models; own: trained on the task's "
          f"other half); top{args.top}: fastest of the {args.top} best-ranked over the half's fastest (geometric "
          f"mean; random: the expectation for {args.top} drawn at random)")
    _common.report("transfer_rank", rows, args.json, extra={"top": args.top, "min_candidates": args.min_candidates})
    return 0


if __name__ == "__main__":
    sys.exit(main())
