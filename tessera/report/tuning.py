"""The tuning section of a report: from the tuning database(s) a model was compiled with, per task
(one workload of the model's kernels) its trials, default and best times, speedup and the in-model
check's choice, and the tuning curve (the model's estimated latency, the sum over tasks of calls x
best time so far, vs trials and vs seconds) replayed from the records in the order they were
measured, drawn by autotune/curve.py as a PNG embedded in the page."""
from __future__ import annotations

import base64
import io
from pathlib import Path

from ..autotune.curve import TuningCurve, plot_tuning_curve
from ..autotune.database import Database, record_target
from ..autotune.workload import workload_key
from ..errors import TesseraError


def _databases(database) -> list:
    items = database if isinstance(database, (list, tuple)) else [database]
    out = []
    for d in items:
        if isinstance(d, Database):
            out.append(d)
        elif isinstance(d, (str, bytes)) or hasattr(d, "__fspath__"):
            if not Path(d).is_file():
                raise TesseraError(f"report: tuning database {d} does not exist")
            out.append(Database(d))
        else:
            raise TesseraError(f"report: database must be a path or an autotune.Database, got {type(d).__name__}")
    return out


def model_tasks(kernels: dict, steps) -> list:
    """(workload key, op, calls) of the model's tuned-able kernels: one per workload, calls the
    nodes running a kernel of it."""
    calls: dict = {}
    ops: dict = {}
    key_of = {}
    for name, k in kernels.items():
        if getattr(k, "host", False):
            continue
        key_of[name] = key = workload_key(k.func)
        ops.setdefault(key, k.op)
    for s in steps:
        key = key_of.get(s.kernel)
        if key is not None:
            calls[key] = calls.get(key, 0) + 1
    return [(key, ops[key], n) for key, n in calls.items()]


def tuning_view(database, kernels: dict, steps, target, title: str = "") -> dict:
    """The section's data: tasks (rows), the curve's points and its PNG (base64; None without
    matplotlib, with the reason), the databases' names."""
    dbs = _databases(database)
    tk = record_target(target)
    tasks = model_tasks(kernels, steps)
    rows, timeline = [], []
    for key, op, calls in tasks:
        recs = [r for db in dbs for r in db.records(key, tk)]
        valid = [r for r in recs if r.is_valid and r.pick is None]
        pick = next((p for p in (db.get_pick(key, tk) for db in dbs) if p is not None), None)
        default = valid[0].secs if valid else None
        best = min((r.secs for r in valid), default=None)
        rows.append({"op": op, "workload": key, "calls": calls, "trials": sum(1 for r in recs if r.pick is None),
                     "errors": sum(1 for r in recs if r.error is not None),
                     "default_ms": default * 1e3 if default else None, "best_ms": best * 1e3 if best else None,
                     "speedup": default / best if default and best else None,
                     "pick": None if pick is None else pick.pick,
                     "in_model_ms": pick.in_model_secs * 1e3 if pick is not None and pick.in_model_secs else None})
        timeline.extend((r.time, key, r.secs if r.is_valid else None) for r in recs if r.pick is None)
    rows.sort(key=lambda r: -(r["calls"] * (r["best_ms"] or 0)))
    weight = {key: calls for key, _, calls in tasks}
    curve = _curve(sorted(timeline, key=lambda t: t[0]), weight)
    out = {"databases": [str(db.path) for db in dbs], "target": tk, "tasks": rows,
           "points": list(curve.points) if curve else [], "png": None, "note": ""}
    if curve is None:
        out["note"] = ("no curve: the databases hold no record of some of this model's workloads for "
                       f"{tk}" if tasks else "the model has no kernel to tune")
        return out
    try:
        buf = io.BytesIO()
        plot_tuning_curve(curve, buf, title)
        out["png"] = base64.b64encode(buf.getvalue()).decode("ascii")
    except TesseraError as e:
        out["note"] = str(e)
    return out


def _curve(timeline: list, weight: dict) -> TuningCurve | None:
    """The estimate after each record once every task has a time: (trials, seconds, ms) points; the
    default line is the first estimate (each task's first record: tune_graph measures the default
    schedule first)."""
    best: dict = {}
    pts = []
    t0 = timeline[0][0] if timeline else 0.0
    for i, (t, key, secs) in enumerate(timeline, 1):
        if secs is not None and secs < best.get(key, float("inf")):
            best[key] = secs
        if len(best) == len(weight):
            ms = sum(weight[k] * best[k] for k in weight) * 1e3
            if not pts or ms != pts[-1][2] or i == len(timeline):
                pts.append((i, round(t - t0, 3), ms))
    if not pts:
        return None
    return TuningCurve(tuple(pts), pts[0][2], None)


__all__ = ["model_tasks", "tuning_view"]
