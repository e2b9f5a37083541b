"""Choosing the next token from a step's logits: greedy (argmax, the first of equal maxima), or sampled
with a temperature, top-k and top-p (nucleus) filtering, applied in transformers' order (temperature,
then top-k, then top-p), from numpy's seeded generator, so one seed gives one sequence."""
from __future__ import annotations

import numpy as np

from ..errors import TesseraError


class Sampler:
    """`sampler(logits [batch, vocab]) -> int64 [batch]`."""

    def __init__(self, do_sample: bool = False, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                 seed=None):
        if not isinstance(do_sample, (bool, np.bool_)):
            raise TesseraError(f"generate: do_sample must be True or False, got {do_sample!r}")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
            raise TesseraError(f"generate: temperature must be a number > 0, got {temperature!r}")
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 0:
            raise TesseraError(f"generate: top_k must be an int >= 0 (0: no top-k filtering), got {top_k!r}")
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
            raise TesseraError(f"generate: top_p must be in (0, 1], got {top_p!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise TesseraError(f"generate: seed must be a non-negative int or None, got {seed!r}")
        self.do_sample = bool(do_sample)
        self.temperature, self.top_k, self.top_p = float(temperature), int(top_k), float(top_p)
        self.rng = np.random.default_rng(seed)

    def __call__(self, logits: np.ndarray) -> np.ndarray:
        if not self.do_sample:
            return np.argmax(logits, axis=1).astype(np.int64)
        z = logits.astype(np.float64) / self.temperature
        vocab = z.shape[1]
        if 0 < self.top_k < vocab:
            kth = np.partition(z, vocab - self.top_k, axis=1)[:, vocab - self.top_k, None]
            z = np.where(z < kth, -np.inf, z)
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        if self.top_p < 1.0:
            order = np.argsort(-p, axis=1, kind="stable")
            sp = np.take_along_axis(p, order, axis=1)
            before = np.cumsum(sp, axis=1) - sp            # the mass of the more likely tokens
            drop = before >= self.top_p                     # (the most likely token is always kept)
            np.put_along_axis(p, order, np.where(drop, 0.0, sp), axis=1)
            p /= p.sum(axis=1, keepdims=True)
        u = self.rng.random(p.shape[0])
        cdf = np.cumsum(p, axis=1)
        choice = (cdf < u[:, None] * cdf[:, -1:]).sum(axis=1)
        # (rounding could put u past the last token with mass: take the last that has any)
        last = vocab - 1 - np.argmax(p[:, ::-1] > 0, axis=1)
        return np.minimum(choice, last).astype(np.int64)
