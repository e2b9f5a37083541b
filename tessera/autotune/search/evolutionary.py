"""Evolutionary search (MetaSchedule's): a population from the best measured candidates plus fresh
samples evolves for a few generations by mutation, parents drawn in proportion to the cost model's
scores; the best-scored unmeasured candidates are measured, with an epsilon of random ones."""
from __future__ import annotations

import heapq

import numpy as np

from .base import SearchStrategy


class EvolutionarySearch(SearchStrategy):
    name = "evolutionary"

    def __init__(self, task, cost_model, rng, population: int = 96, init_measured_ratio: float = 0.25,
                 generations: int = 3, mutate_prob: float = 0.85, eps_greedy: float = 0.05):
        super().__init__(task, cost_model, rng)
        self.population = population
        self.init_measured_ratio = init_measured_ratio
        self.generations = generations
        self.mutate_prob = mutate_prob
        self.eps_greedy = eps_greedy

    def _initial(self) -> list:
        n_best = min(int(self.population * self.init_measured_ratio), len(self.measured))
        pop = [s for _, s in self.measured[:n_best]]
        pop += self.fresh(self.population - len(pop), exclude={self.key(s) for s in pop})
        return pop

    def propose(self, n: int) -> list:
        pop = self._initial()
        if not pop:
            return []
        best: list = []          # min-heap of (score, tiebreak, key, schedule) of unmeasured candidates
        in_best: set = set()
        counter = 0

        def offer(schs, scores):
            nonlocal counter
            for s, sc in zip(schs, scores):
                k = self.key(s)
                if k in self.seen or k in in_best:
                    continue
                counter += 1
                item = (float(sc), counter, k, s)
                if len(best) < n:
                    heapq.heappush(best, item)
                    in_best.add(k)
                elif item[0] > best[0][0]:
                    _, _, old, _ = heapq.heapreplace(best, item)
                    in_best.discard(old)
                    in_best.add(k)

        scores = self.score(pop)
        offer(pop, scores)
        for _ in range(self.generations):
            p = scores - scores.min()
            p = p / p.sum() if p.sum() > 0 else np.full(len(pop), 1.0 / len(pop))
            children, keys = [], set()
            for _ in range(self.population * 2):
                if len(children) >= self.population:
                    break
                parent = pop[int(self.rng.choice(len(pop), p=p))]
                child = parent
                if self.rng.random() < self.mutate_prob:
                    child = self.space.mutate(parent, self.rng)
                    if child is None:
                        continue
                k = self.key(child)
                if k in keys:
                    continue
                keys.add(k)
                children.append(child)
            if not children:
                break
            pop, scores = children, self.score(children)
            offer(pop, scores)
        ranked = [s for _, _, _, s in sorted(best, key=lambda t: -t[0])]
        n_rand = int(round(n * self.eps_greedy))
        out = self.take(ranked, n - n_rand)
        return out + self.take(self.fresh(n - len(out)), n - len(out))
