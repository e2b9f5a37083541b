"""Search strategies over a task's space: random (the baseline), evolutionary (MetaSchedule's) and
parallel simulated annealing (AutoTVM's), each guided by a cost model."""
from __future__ import annotations

from ...errors import TesseraError
from .annealing import AnnealingSearch
from .base import SearchStrategy
from .evolutionary import EvolutionarySearch
from .random import RandomSearch

STRATEGIES = {"random": RandomSearch, "evolutionary": EvolutionarySearch, "annealing": AnnealingSearch}


def make_strategy(strategy, task, cost_model, rng) -> SearchStrategy:
    """A strategy by name ("evolutionary", "annealing", "random"), or a SearchStrategy class or any
    callable(task, cost_model, rng) making one (functools.partial(EvolutionarySearch, population=32))."""
    if callable(strategy) and not isinstance(strategy, str):
        made = strategy(task, cost_model, rng)
        if not isinstance(made, SearchStrategy):
            raise TesseraError(f"strategy {strategy!r} made a {type(made).__name__}, not a SearchStrategy")
        return made
    cls = STRATEGIES.get(strategy)
    if cls is None:
        raise TesseraError(f"unknown search strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    return cls(task, cost_model, rng)


__all__ = ["SearchStrategy", "RandomSearch", "EvolutionarySearch", "AnnealingSearch", "make_strategy", "STRATEGIES"]
