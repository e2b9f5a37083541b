"""The cost model's contract (AutoTVM's and MetaSchedule's CostModel): learn from measured candidates,
rank new ones, save and load, and pre-train from a tuning database.

    model.update(features, results, workload_keys)   # per candidate: rows of extract_features, a result
    scores = model.predict(features)                 # higher = predicted faster
    model.save("model.json"); model.load("model.json")
    model.pretrain(database, target)                 # fit from the records already measured

A result is anything with `.run_secs` (seconds per repeat, empty on error) and, optionally,
`.error_kind` / `.error` (set on error): a measure.MeasureResult or a database TuningRecord.
"""
from __future__ import annotations

import math
import statistics
import warnings

import numpy as np

from ...errors import TesseraError
from ...target import Target
from ...tir.schedule import Schedule, Trace
from ..features import NUM_FEATURES, extract_features


def run_seconds(result) -> float | None:
    """The seconds of an error-free result: the median of its rounds, as records rank (one stalled round
    must not teach the model a slow candidate); None for an error (or no times)."""
    if getattr(result, "error_kind", None) is not None or getattr(result, "error", None):
        return None
    secs = getattr(result, "run_secs", None)
    if not secs:
        return None
    med = float(statistics.median(secs))
    return med if math.isfinite(med) and med > 0 else None


def check_features(features, where: str) -> list:
    """features as a list of float32 (n_rows, NUM_FEATURES) arrays, or a TesseraError naming the
    candidate whose matrix is not."""
    out = []
    for k, f in enumerate(features):
        a = np.asarray(f, dtype=np.float32)
        if a.ndim != 2 or a.shape[1] != NUM_FEATURES:
            raise TesseraError(f"{where}: candidate {k}'s features have shape {a.shape}; expected "
                               f"(n_stores, {NUM_FEATURES}) from autotune.features.extract_features")
        out.append(a)
    return out


class CostModel:
    """Base class: subclasses give update / predict / save / load."""

    def update(self, features: list, results: list, workload_keys: list) -> None:
        """Learn from measured candidates (one features matrix, result and workload key each)."""
        raise NotImplementedError

    def predict(self, features: list) -> np.ndarray:
        """One score per candidate; higher means predicted faster."""
        raise NotImplementedError

    def save(self, path) -> None:
        raise NotImplementedError

    def load(self, path) -> None:
        raise NotImplementedError

    @staticmethod
    def _check_update(features, results, workload_keys):
        if not (len(features) == len(results) == len(workload_keys)):
            raise TesseraError(f"CostModel.update: {len(features)} feature matrices, {len(results)} results and "
                               f"{len(workload_keys)} workload keys; they must correspond one to one")
        for k in workload_keys:
            if not isinstance(k, str):
                raise TesseraError(f"CostModel.update: a workload key must be a string, got {k!r}")
        return check_features(features, "CostModel.update")

    def pretrain(self, database, target=None) -> dict:
        """Fit from the records of an existing database (duck-typed: `workloads()` gives objects with
        `.key` and `.func`; `records(workload_key=, target=)` records with `.trace`, `.run_secs`,
        `.error`). Each record's trace is replayed on a fresh Schedule of its workload and its features
        taken for `target` (default: the record's own `.target`, else "c"). A trace that no longer
        replays is skipped with one warning at the end. Returns {"used": n, "skipped": m}."""
        feats, results, keys = [], [], []
        skipped, first_error = 0, None
        for wl in database.workloads():
            for rec in database.records(workload_key=wl.key, target=target):
                t = target if target is not None else getattr(rec, "target", None) or "c"
                try:
                    sch = Schedule(wl.func)
                    Trace.apply_json_to_schedule(rec.trace, sch)
                    f = extract_features(sch, Target(t))
                except TesseraError as e:
                    skipped += 1
                    first_error = first_error or f"workload {wl.key}: {e}"
                    continue
                feats.append(f)
                results.append(rec)
                keys.append(wl.key)
        if skipped:
            warnings.warn(f"CostModel.pretrain: {skipped} record(s) skipped (their traces no longer replay or "
                          f"lower); the first: {first_error}", stacklevel=2)
        if feats:
            self.update(feats, results, keys)
        return {"used": len(feats), "skipped": skipped}


__all__ = ["CostModel", "run_seconds", "check_features"]
