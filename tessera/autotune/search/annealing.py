"""Parallel simulated annealing over decisions (the AutoTVM paper's): chains walk the space by one
mutation at a time, accepting a worse point with probability exp(delta / T) as T cools; the best
points any chain visited (by the cost model's score) are measured, with an epsilon of random ones.
The chains persist across rounds, as in AutoTVM."""
from __future__ import annotations

import heapq

import numpy as np

from .base import SearchStrategy


class AnnealingSearch(SearchStrategy):
    name = "annealing"

    def __init__(self, task, cost_model, rng, parallel: int = 32, steps: int = 24, early_stop: int = 8,
                 temperature: tuple = (1.0, 0.0), eps_greedy: float = 0.05):
        super().__init__(task, cost_model, rng)
        self.parallel = parallel
        self.steps = steps
        self.early_stop = early_stop
        self.temperature = temperature
        self.eps_greedy = eps_greedy
        self._points: list = []

    def propose(self, n: int) -> list:
        points = [p for p in self._points if p is not None]
        if len(points) < self.parallel:
            points += self.fresh(self.parallel - len(points), exclude={self.key(p) for p in points})
        if not points:
            return []
        scores = self.score(points)
        scale = float(scores.max() - scores.min()) or 1.0   # scores in units of the initial spread
        best: list = []
        in_best: set = set()
        counter = 0

        def offer(s, sc):
            nonlocal counter
            k = self.key(s)
            if k in self.seen or k in in_best:
                return False
            counter += 1
            item = (float(sc), counter, k, s)
            if len(best) < n:
                heapq.heappush(best, item)
            elif item[0] > best[0][0]:
                in_best.discard(heapq.heapreplace(best, item)[2])
            else:
                return False
            in_best.add(k)
            return True

        for p, sc in zip(points, scores):
            offer(p, sc)
        t0, t1 = self.temperature
        since = 0
        for step in range(self.steps):
            t = t0 + (t1 - t0) * step / max(self.steps - 1, 1)
            moved = [self.space.mutate(p, self.rng) for p in points]
            idx = [i for i, m in enumerate(moved) if m is not None]
            if not idx:
                break
            new_scores = self.score([moved[i] for i in idx])
            improved = False
            for i, ns in zip(idx, new_scores):
                delta = (ns - scores[i]) / scale
                if delta >= 0 or self.rng.random() < np.exp(delta / max(t, 1e-5)):
                    points[i], scores[i] = moved[i], ns
                improved |= offer(moved[i], ns)
            since = 0 if improved else since + 1
            if since >= self.early_stop:
                break
        self._points = points
        ranked = [s for _, _, _, s in sorted(best, key=lambda x: -x[0])]
        n_rand = int(round(n * self.eps_greedy))
        out = self.take(ranked, n - n_rand)
        return out + self.take(self.fresh(n - len(out)), n - len(out))
