"""XGBModel: gradient-boosted trees ranking candidates by predicted speed (AutoTVM's and Ansor's
XGBoost cost model), trained online with a ranking objective.

    model = XGBModel(seed=0)
    model.update(features, results, workload_keys)  # retrains on everything seen so far
    model.predict(features)                          # higher = predicted faster

Candidates: each candidate's per-store rows (autotune.features) are pooled into one vector -- the
dominant row (most flops, then most bytes: the main loop nest, described in full), the column-wise
maximum over rows (the worst stage on each count), the sums of the additive columns (operations,
executions, bytes, over all stages) and the row count. Pooling, not TVM's per-store predictions
summed, because XGBoost's built-in `rank:pairwise` then ranks whole candidates directly (one row
each, one query group per workload), while a ranking loss on sums of per-store scores needs a custom
objective in Python whose per-round cost grows with the pairs; the tuner's programs are one dominant
loop nest plus packing/copy stages, which the pooled vector keeps whole and summarizes.

Labels: within a workload, normalized throughput = best seconds / seconds (1 for the best so far);
a candidate that failed (no run_secs, or an error) gets 0 -- it ranks below every valid one, as in
Ansor and MetaSchedule. Groups are workloads, so scales never mix across workloads. Every update
retrains from scratch on all data (labels change as the best improves); `last_train_seconds` says
how long it took.

Files: `save(path)` writes the booster in XGBoost's own JSON (`Booster.save_raw("json")`) to path
and a JSON sidecar `path + ".meta.json"` (format, version, feature width, pooling, parameters). No
pickle. A loaded model predicts exactly as the saved one; a later update keeps the loaded trees
and grows new ones on the data given since (the saved file does not hold the training set:
`pretrain(database)` refits from the records).
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from ...errors import TesseraError
from ..features import ADDITIVE, NUM_FEATURES, feature_names
from .base import CostModel, check_features, run_seconds

FORMAT = "tessera-xgb-cost-model"
VERSION = 1
_I_FLOPS = feature_names().index("compute.flops")
_I_BYTES = feature_names().index("row.bytes")
_ADD = np.array(ADDITIVE, dtype=np.int64)
POOLED_WIDTH = 2 * NUM_FEATURES + len(ADDITIVE) + 1


def pool(rows: np.ndarray) -> np.ndarray:
    """One candidate's rows (n, NUM_FEATURES) as one vector of POOLED_WIDTH (see the module docstring)."""
    return pool_batch([rows])[0]


def pool_batch(features: list) -> np.ndarray:
    """pool of each candidate's rows, all at once: (len(features), POOLED_WIDTH) float32."""
    n = len(features)
    out = np.zeros((n, POOLED_WIDTH), dtype=np.float32)
    counts = np.array([f.shape[0] for f in features], dtype=np.int64)
    nz = np.nonzero(counts)[0]
    if not len(nz):
        return out
    rows = np.concatenate([features[i] for i in nz]).astype(np.float32, copy=False)
    c = counts[nz]
    starts = np.concatenate(([0], np.cumsum(c)[:-1]))
    seg = np.repeat(np.arange(len(nz)), c)
    F = NUM_FEATURES
    # the dominant row of each candidate: most flops, then most bytes, then the first
    order = np.lexsort((np.arange(len(seg)), -rows[:, _I_BYTES], -rows[:, _I_FLOPS], seg))
    out[nz, :F] = rows[order[starts]]
    out[nz, F:2 * F] = np.maximum.reduceat(rows, starts, axis=0)
    linear = np.exp2(rows[:, _ADD].astype(np.float64)) - 1.0
    out[nz, 2 * F:2 * F + len(_ADD)] = np.log2(1.0 + np.add.reduceat(linear, starts, axis=0))
    out[nz, -1] = np.log2(1.0 + c)
    return out


def _xgb():
    try:
        import xgboost
    except ImportError as e:  # the optional dependency of the tune extra
        raise TesseraError("XGBModel needs xgboost: pip install 'tessera[tune]' (or xgboost-cpu)") from e
    return xgboost


class XGBModel(CostModel):
    """XGBoost `rank:pairwise` over pooled candidate features, one query group per workload.

    seed: XGBoost's seed and the seed of the random scores given before any training (no data yet).
    num_boost_round, max_depth, eta, min_child_weight: the trees.
    nthread: XGBoost's threads, default 1: training runs beside the measurement processes, and on a
    busy machine XGBoost's OpenMP threads contend (2000 candidates, 20 rounds, 2 cores under load:
    0.42 s with 1 thread, 5.5 s with 2).
    """

    def __init__(self, seed=None, num_boost_round: int = 60, max_depth: int = 6, eta: float = 0.2,
                 min_child_weight: float = 1.0, nthread: int = 1):
        self.seed = None if seed is None else int(seed)
        self.num_boost_round = int(num_boost_round)
        self.params = {"objective": "rank:pairwise", "eta": float(eta), "max_depth": int(max_depth),
                       "min_child_weight": float(min_child_weight), "tree_method": "hist",
                       "lambdarank_pair_method": "mean", "lambdarank_num_pair_per_sample": 8,
                       "seed": self.seed or 0, "nthread": int(nthread), "verbosity": 0}
        self._rng = np.random.default_rng(self.seed)
        self._x: list = []        # pooled vectors
        self._secs: list = []     # mean seconds, None for an error
        self._keys: list = []     # workload key per candidate
        self._booster = None
        self._base = None         # a loaded booster that training continues from
        self.last_train_seconds = 0.0

    # -- learning --------------------------------------------------------------------------------
    def update(self, features, results, workload_keys) -> None:
        feats = self._check_update(features, results, workload_keys)
        pooled = pool_batch(feats) if feats else ()
        for x, r, k in zip(pooled, results, workload_keys):
            self._x.append(x)
            self._secs.append(run_seconds(r))
            self._keys.append(k)
        self._train()

    def _labels(self) -> np.ndarray:
        best: dict = {}
        for s, k in zip(self._secs, self._keys):
            if s is not None and (k not in best or s < best[k]):
                best[k] = s
        return np.array([best[k] / s if s is not None else 0.0 for s, k in zip(self._secs, self._keys)],
                        dtype=np.float32)

    def _train(self) -> None:
        if not self._x:
            return
        y = self._labels()
        if not (y > 0).any():
            return                    # only errors so far: nothing to rank
        xgb = _xgb()
        t0 = time.perf_counter()
        order = sorted(range(len(self._keys)), key=lambda i: self._keys[i])   # rows grouped by workload
        groups = {k: g for g, k in enumerate(sorted(set(self._keys)))}
        X = np.stack([self._x[i] for i in order])
        dtrain = xgb.DMatrix(X, label=y[order], qid=np.array([groups[self._keys[i]] for i in order]))
        base = None
        if self._base is not None:    # continue from a loaded model without changing it
            base = xgb.Booster()
            base.load_model(self._base.save_raw("json"))
        self._booster = xgb.train(self.params, dtrain, num_boost_round=self.num_boost_round, xgb_model=base)
        self.last_train_seconds = time.perf_counter() - t0

    def predict(self, features) -> np.ndarray:
        feats = check_features(features, "XGBModel.predict")
        if not feats:
            return np.zeros(0)
        booster = self._booster or self._base
        if booster is None:
            return self._rng.random(len(feats))   # untrained: random scores (reproducible from the seed)
        return np.asarray(booster.inplace_predict(pool_batch(feats)), dtype=np.float64)

    @property
    def trained(self) -> bool:
        return (self._booster or self._base) is not None

    @property
    def num_samples(self) -> int:
        """Candidates learned from since construction (or load)."""
        return len(self._x)

    # -- files -------------------------------------------------------------------------------------
    def save(self, path) -> None:
        booster = self._booster or self._base
        if booster is None:
            raise TesseraError("XGBModel.save: the model has not been trained yet (update or pretrain it first)")
        path = os.fspath(path)
        with open(path, "wb") as f:
            f.write(bytes(booster.save_raw("json")))
        meta = {"format": FORMAT, "version": VERSION, "feature_width": NUM_FEATURES,
                "pooled_width": POOLED_WIDTH, "pooling": "dominant+max+additive_sums+rows",
                "seed": self.seed, "num_boost_round": self.num_boost_round, "params": self.params}
        with open(path + ".meta.json", "w") as f:
            json.dump(meta, f, indent=1)

    def load(self, path) -> None:
        path = os.fspath(path)
        try:
            with open(path + ".meta.json") as f:
                meta = json.load(f)
        except FileNotFoundError:
            raise TesseraError(f"XGBModel.load: {path}.meta.json is missing (save writes it beside the model)") from None
        except json.JSONDecodeError as e:
            raise TesseraError(f"XGBModel.load: {path}.meta.json is not JSON: {e}") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise TesseraError(f"XGBModel.load: {path}.meta.json is not an XGBModel's sidecar")
        if meta.get("version") != VERSION:
            raise TesseraError(f"XGBModel.load: {path} has file version {meta.get('version')!r}; this tessera "
                               f"reads {VERSION}")
        if meta.get("feature_width") != NUM_FEATURES or meta.get("pooled_width") != POOLED_WIDTH:
            raise TesseraError(f"XGBModel.load: {path} was trained on {meta.get('feature_width')} features per store; "
                               f"this tessera extracts {NUM_FEATURES} (retrain it, e.g. with pretrain(database))")
        xgb = _xgb()
        booster = xgb.Booster()
        with open(path, "rb") as f:
            raw = f.read()
        try:
            booster.load_model(bytearray(raw))
        except xgb.core.XGBoostError as e:
            raise TesseraError(f"XGBModel.load: {path} is not an XGBoost model: {e}") from None
        booster.set_param({"nthread": int(meta.get("params", {}).get("nthread", 1))})
        self.seed = meta.get("seed")
        self.num_boost_round = int(meta.get("num_boost_round", self.num_boost_round))
        self.params = dict(meta.get("params", self.params))
        self._base, self._booster = booster, None
        self._x, self._secs, self._keys = [], [], []

    def __repr__(self):
        return f"XGBModel(seed={self.seed}, trained={self.trained}, samples={self.num_samples})"


__all__ = ["XGBModel", "pool", "pool_batch", "POOLED_WIDTH"]
