"""Cost models: rank candidate schedules by predicted speed from their program features.

    XGBModel(seed)      gradient-boosted trees, rank:pairwise per workload, trained online (xgb.py)
    RandomModel(seed)   the baseline: random scores (random.py)
    make_cost_model("xgb" | "random", seed) -> CostModel
"""
from ...errors import TesseraError
from .base import CostModel, run_seconds
from .random import RandomModel
from .xgb import XGBModel


def make_cost_model(kind, seed=None) -> CostModel:
    """A cost model by name ("xgb", "random"), or `kind` itself when it is a CostModel."""
    if isinstance(kind, CostModel):
        return kind
    if kind == "xgb":
        return XGBModel(seed=seed)
    if kind == "random":
        return RandomModel(seed=seed)
    raise TesseraError(f"unknown cost model {kind!r}; choose 'xgb', 'random' or pass a CostModel")


__all__ = ["CostModel", "XGBModel", "RandomModel", "make_cost_model", "run_seconds"]
