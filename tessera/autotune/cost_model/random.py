"""RandomModel: the baseline cost model -- uniform random scores, reproducible from a seed."""
from __future__ import annotations

import json

import numpy as np

from ...errors import TesseraError
from .base import CostModel, check_features

FORMAT = "tessera-random-cost-model"
VERSION = 1


class RandomModel(CostModel):
    """Scores candidates uniformly at random (what a search without a model does); learns nothing.
    Given a seed, the sequence of scores is the same every run; save/load keeps its place in it."""

    def __init__(self, seed=None):
        self.seed = None if seed is None else int(seed)
        self._rng = np.random.default_rng(self.seed)

    def update(self, features, results, workload_keys) -> None:
        self._check_update(features, results, workload_keys)

    def predict(self, features) -> np.ndarray:
        n = len(check_features(features, "RandomModel.predict"))
        return self._rng.random(n)

    def save(self, path) -> None:
        doc = {"format": FORMAT, "version": VERSION, "seed": self.seed, "rng": self._rng.bit_generator.state}
        with open(path, "w") as f:
            json.dump(doc, f)

    def load(self, path) -> None:
        with open(path) as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise TesseraError(f"{path}: not a saved RandomModel (format {doc.get('format') if isinstance(doc, dict) else None!r})")
        if doc.get("version") != VERSION:
            raise TesseraError(f"{path}: RandomModel file version {doc.get('version')!r}; this tessera reads {VERSION}")
        self.seed = doc["seed"]
        self._rng = np.random.default_rng()
        self._rng.bit_generator.state = doc["rng"]

    def __repr__(self):
        return f"RandomModel(seed={self.seed})"


__all__ = ["RandomModel"]
