"""What every search strategy shares: the task's space, the cost model's scores (features cached per
candidate), and deduplication by the structural hash of the scheduled program."""
from __future__ import annotations

import weakref

import numpy as np

from ..features import extract_features
from ..space import candidate_key


class SearchStrategy:
    """propose(n) gives up to n schedules never proposed before; notify(candidates, results) tells
    the strategy what they measured. Subclasses write propose."""

    name = ""

    def __init__(self, task, cost_model, rng: np.random.Generator):
        self.task = task
        self.space = task.space
        self.cost_model = cost_model
        self.rng = rng
        self.seen: set = set()          # keys of candidates proposed (measured or in flight)
        self.measured: list = []        # (seconds, schedule) of error-free measurements
        self._features: dict = {}       # key -> feature matrix
        self._keys = weakref.WeakKeyDictionary()   # schedule -> key (by identity, while it lives)

    # candidates ---------------------------------------------------------------------------------
    def key(self, sch) -> str:
        k = self._keys.get(sch)
        if k is None:
            k = self._keys[sch] = candidate_key(sch)
        return k

    def features(self, sch) -> np.ndarray:
        k = self.key(sch)
        f = self._features.get(k)
        if f is None:
            f = self._features[k] = extract_features(sch, self.task.target)
        return f

    def score(self, schs: list) -> np.ndarray:
        """The cost model's scores of schs (higher: predicted faster)."""
        if not schs:
            return np.zeros(0)
        return np.asarray(self.cost_model.predict([self.features(s) for s in schs]), dtype=np.float64)

    def fresh(self, n: int, tries_per_candidate: int = 8, exclude=()) -> list:
        """Up to n random samples of the space that are new (not seen, not in exclude)."""
        out, keys = [], set(exclude)
        for _ in range(max(n, 1) * tries_per_candidate):
            if len(out) >= n:
                break
            sch = self.space.sample(self.rng)
            if sch is None:
                continue
            k = self.key(sch)
            if k in self.seen or k in keys:
                continue
            keys.add(k)
            out.append(sch)
        return out

    def take(self, ranked: list, n: int) -> list:
        """The first n of ranked (best first) that lower (space.verify), topped up with fresh samples
        that do; all are marked proposed (and the rejected ones seen), so none is proposed again."""
        out = []
        for s in ranked:
            if len(out) >= n:
                break
            k = self.key(s)
            if k in self.seen:
                continue
            self.seen.add(k)
            if self.space.verify(s):
                out.append(s)
        for _ in range(4):
            if len(out) >= n:
                break
            more = self.fresh(n - len(out))
            if not more:
                break
            for s in more:
                self.seen.add(self.key(s))
                if self.space.verify(s):
                    out.append(s)
        return out

    def propose(self, n: int) -> list:
        raise NotImplementedError

    def notify(self, candidates: list, results: list) -> None:
        for sch, res in zip(candidates, results):
            if res.error_kind is None and res.run_secs:
                # the median of its rounds (MeasureResult.secs), as records rank: a stalled round must not
                # make a candidate (the default schedule above all, measured once) look slow
                self.measured.append((float(res.secs), sch))
        self.measured.sort(key=lambda t: t[0])
        # keep the cached features of measured candidates only (the rest are unlikely to recur)
        if len(self._features) > 20000:
            keep = {self.key(s) for _, s in self.measured}
            self._features = {k: v for k, v in self._features.items() if k in keep}

    def seed_measured(self, schs_secs: list) -> None:
        """Candidates measured before (a resumed database): seen, and parents for the search."""
        for secs, sch in schs_secs:
            self.seen.add(self.key(sch))
            if secs is not None:
                self.measured.append((secs, sch))
        self.measured.sort(key=lambda t: t[0])
