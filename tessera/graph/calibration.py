"""Calibration for post-training quantization: the range [lo, hi] of a tensor that its 8-bit
quantization covers, estimated from the values it takes on calibration inputs.

    c = RangeCollector("entropy")
    for x in arrays: c.observe(x)                 # first pass: the extremes
    if c.needs_histogram:
        for x in arrays: c.observe_histogram(x)   # second pass: histograms over those extremes
    lo, hi = c.range()

Methods (what onnxruntime.quantization and TensorRT call them):
- "minmax": the smallest and largest value seen. Nothing clips; an outlier widens every step.
- "percentile": the values at `percentile` and 100 - `percentile` per cent of the values seen (from a
  histogram of `bins` bins over the extremes: exact to a bin's width); a tensor that is never negative
  keeps lo = its minimum.
- "entropy": TensorRT's KL-divergence calibration: the clipping range whose 8-bit quantization of the
  clipped histogram loses the least information (the Kullback-Leibler divergence of the quantized
  distribution from the clipped one, smallest over the candidate ranges), for what tessera quantizes:
  uint8, asymmetric, 256 levels over [lo, hi]. A tensor that is never negative: [0, t], TensorRT's
  search over t. One with both signs: its histogram over [min, max] (twice `bins` bins), the
  candidates [lo, hi] around 0, each end searched in turn, so each end clips its own tail (TensorRT's
  symmetric [-t, t] from the histogram of |x| fit a small negative bulk and clipped the long positive
  tail beside it, which uint8 would have held). Exact zeros are left out of the histogram.
  Each candidate clips at most 1/`bins` of the (nonzero) values, one bin's average share: KL does not
  see how far a clipped value moves, and on a histogram of spikes (per-channel constants, the levels
  of rendered text) it prefers the narrowest range of one bin a level whatever lies beyond; TensorRT
  and onnxruntime set no such bound. Smooth tails (a normal, a ReLU of one) are clipped far below it
  and keep TensorRT's threshold.

The range always contains 0 (a real zero must be representable: padding, relu) and is never empty.
`collect` runs a float graph on calibration feeds and hands every chosen value's arrays to a callback.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import TesseraError
from ..runtime.graph_executor import GraphExecutor
from .ir import Graph
from .lowering import compile_graph
from .passes import optimize

METHODS = ("minmax", "percentile", "entropy")


class CalibrationError(TesseraError):
    """A calibration method, setting or input the quantizer cannot use."""


class RangeCollector:
    """The range of one tensor over calibration arrays (module docstring)."""

    def __init__(self, method: str = "minmax", percentile: float = 99.99, bins: int = 2048):
        if method not in METHODS:
            raise CalibrationError(f"calibration method {method!r} is not one of {', '.join(METHODS)}")
        if not 50.0 < float(percentile) <= 100.0:
            raise CalibrationError(f"percentile must lie in (50, 100], got {percentile}")
        if int(bins) < 256:
            raise CalibrationError(f"a calibration histogram needs at least 256 bins, got {bins}")
        self.method, self.percentile, self.bins = method, float(percentile), int(bins)
        self.lo, self.hi = math.inf, -math.inf
        self.hist = None          # counts over [lo, hi] (percentile), over [min(lo, 0), max(hi, 0)] less
                                  # the exact zeros (entropy)
        self.count = 0

    @property
    def needs_histogram(self) -> bool:
        return self.method != "minmax"

    def observe(self, x) -> None:
        """First pass: the extremes of x (NaN and infinities ignored)."""
        x = np.asarray(x, np.float64).reshape(-1)
        x = x[np.isfinite(x)]
        if x.size:
            self.lo, self.hi = min(self.lo, float(x.min())), max(self.hi, float(x.max()))
            self.count += x.size

    def observe_histogram(self, x) -> None:
        """Second pass: x into the histograms over the extremes the first pass found."""
        if not self.count:
            raise CalibrationError("observe_histogram before any value was observed")
        x = np.asarray(x, np.float64).reshape(-1)
        x = np.clip(x[np.isfinite(x)], self.lo, self.hi)
        if self.method == "percentile":
            h, _ = np.histogram(x, self.bins, (self.lo, max(self.hi, self.lo + 1e-30)))
        else:
            lo, hi = self._span()
            x = x[x != 0]                  # a zero is exact whatever the range: it says nothing of it
            h, _ = np.histogram(x, self.bins * (2 if lo < 0 < hi else 1), (lo, hi))
        self.hist = h if self.hist is None else self.hist + h

    def _span(self) -> tuple:
        """The entropy histogram's range: the extremes widened to contain 0, never empty."""
        lo, hi = min(self.lo, 0.0), max(self.hi, 0.0)
        return lo, max(hi, lo + 1e-30)

    def range(self) -> tuple:
        """(lo, hi) with lo <= 0 <= hi and hi > lo."""
        if not self.count:
            raise CalibrationError("no finite value was observed: nothing to calibrate")
        lo, hi = self.lo, self.hi
        if self.method != "minmax" and self.hist is None:
            raise CalibrationError(f"the {self.method} method needs observe_histogram's second pass")
        if self.method == "percentile":
            lo, hi = percentile_range(self.hist, self.lo, self.hi, self.percentile)
        elif self.method == "entropy":
            lo, hi = entropy_range(self.hist, *self._span(), max_clip=1.0 / self.bins)
            lo, hi = max(self.lo, lo), min(self.hi, hi)
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        if hi - lo <= 0:
            hi = lo + 1e-8
        return float(lo), float(hi)


def percentile_range(hist, lo: float, hi: float, percentile: float) -> tuple:
    """The values at 100 - percentile and percentile per cent of a histogram over [lo, hi] (the
    bins' far edges: a value at most one bin wide of the exact percentile); lo stays where the
    values never go below zero."""
    hist = np.asarray(hist, np.float64)
    edges = np.linspace(lo, hi, hist.size + 1)
    cdf = np.cumsum(hist) / max(hist.sum(), 1.0)
    q, eps = percentile / 100.0, 1e-12        # eps: a fraction the bins reach exactly counts as reached
    top = edges[min(int(np.searchsorted(cdf, q - eps)) + 1, hist.size)]
    bottom = lo if lo >= 0 else edges[min(int(np.searchsorted(cdf, (100.0 - percentile) / 100.0 + eps, side="right")),
                                          hist.size)]
    return float(bottom), float(top)


class _Windows:
    """A histogram of counts over [lo, hi] in n bins and TensorRT's measure of its candidate ranges:
    the bins [a, b) (0 <= a < b <= n)."""

    def __init__(self, hist, lo: float, hi: float, levels: int):
        self.h = np.asarray(hist, np.float64)
        self.n, self.levels = self.h.size, levels
        self.lo, self.width = float(lo), (float(hi) - float(lo)) / self.h.size
        self.cum = np.concatenate([[0.0], np.cumsum(self.h)])            # cum[k] = h[:k].sum()
        self.total = self.cum[-1]

    def edge(self, k: int) -> float:
        return self.lo + k * self.width

    def clipped(self, a: int, b: int) -> float:
        """The share of the counts outside [a, b)."""
        return (self.cum[a] + self.total - self.cum[b]) / self.total

    def kl(self, a: int, b: int) -> float:
        """KL(clipped || quantized) of [a, b): `clipped` is its bins with the counts below a added to
        the first and those from b on to the last; `quantized` merges its bins into `levels` levels
        (edges rounded), each level's count spread uniformly over its bins where `clipped` is nonzero."""
        seg = self.h[a:b]
        p = seg.copy()
        p[0] += self.cum[a]
        p[-1] += self.total - self.cum[b]
        if p.sum() == 0:
            return math.inf
        i = b - a
        idx = (np.arange(i) * self.levels) // i
        sums = np.bincount(idx, weights=seg, minlength=self.levels)
        nz = p > 0
        nonzero = np.bincount(idx, weights=nz.astype(np.float64), minlength=self.levels)
        q = np.where(nz, sums[idx] / np.maximum(nonzero[idx], 1.0), 0.0)
        return _kl(p, q)


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p || q) of two unnormalized histograms over the bins where p > 0 (q smoothed where 0)."""
    p = p / p.sum()
    q = q / max(q.sum(), 1e-30)
    mask = p > 0
    qq = np.where(q[mask] > 0, q[mask], 1e-10)
    return float(np.sum(p[mask] * np.log(p[mask] / qq)))


def _max_clip(max_clip, n: int) -> float:
    return 1.0 / n if max_clip is None else float(max_clip)


def entropy_threshold(abs_hist, top: float, levels: int = 128, stride: int = 0, max_clip=None) -> float:
    """TensorRT's threshold (module docstring) for a histogram of |x| (or of x >= 0) over [0, top]:
    over the candidate thresholds (bin edges from `levels` bins up) that clip at most `max_clip` of
    the counts (None: 1 / the bins, one bin's average share; 1.0: any, TensorRT's search), the one
    minimizing KL(clipped || quantized) of the first i bins (_Windows.kl)."""
    hist = np.asarray(abs_hist, np.float64)
    n = hist.size
    if n < levels:
        raise CalibrationError(f"an entropy histogram needs at least {levels} bins, got {n}")
    if hist.sum() == 0:
        return float(top)
    w, cap = _Windows(hist, 0.0, top, levels), _max_clip(max_clip, n)
    stride = stride or max(1, (n - levels) // 512)
    best, best_i = math.inf, n
    for i in range(levels, n + 1, stride):
        if w.clipped(0, i) <= cap:
            d = w.kl(0, i)
            if d < best:
                best, best_i = d, i
    return float(best_i * top / n)


def entropy_range(hist, lo: float, hi: float, levels: int = 256, stride: int = 0, max_clip=None,
                  rounds: int = 8) -> tuple:
    """The range [lo', hi'] within [lo, hi] (lo <= 0 <= hi) that TensorRT's KL measure picks for a
    tensor quantized asymmetrically over it in `levels` levels, from `hist`: its counts over [lo, hi]
    (exact zeros left out). A side that holds no value stays at 0 and the other takes
    entropy_threshold's search; with values of both signs the candidates are the ranges of at least
    `levels` bins around 0 that clip at most `max_clip` of the counts (entropy_threshold), their ends
    searched in turn (the upper with the lower fixed, then the lower, from the whole range on) until
    neither moves: each end clips its own side's tail, the levels spread over the whole range as
    uint8 spreads them."""
    hist = np.asarray(hist, np.float64)
    n = hist.size
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if n < levels:
        raise CalibrationError(f"an entropy histogram needs at least {levels} bins, got {n}")
    if lo == 0.0:
        return 0.0, entropy_threshold(hist, hi, levels, stride, max_clip)
    if hi == 0.0:
        return -entropy_threshold(hist[::-1], -lo, levels, stride, max_clip), 0.0
    if hist.sum() == 0:
        return lo, hi
    w, cap = _Windows(hist, lo, hi, levels), _max_clip(max_clip, n)
    zero = -lo / w.width                              # 0's place in bins
    za, zb = min(int(math.floor(zero)), n), max(int(math.ceil(zero)), 0)
    stride = stride or max(1, (n - levels) // 512)
    a, b = 0, n
    best = w.kl(a, b)
    for _ in range(rounds):
        moved = False
        for b2 in range(n, max(zb, a + levels) - 1, -stride):
            if w.clipped(a, b2) <= cap:
                d = w.kl(a, b2)
                if d < best:
                    best, b, moved = d, b2, True
        for a2 in range(0, min(za, b - levels) + 1, stride):
            if w.clipped(a2, b) <= cap:
                d = w.kl(a2, b)
                if d < best:
                    best, a, moved = d, a2, True
        if not moved:
            break
    return w.edge(a), w.edge(b)


def quant_params(lo: float, hi: float, dtype: str = "uint8") -> tuple:
    """(scale float32, zero point) of the range [lo, hi] (lo <= 0 <= hi) in dtype, asymmetric, as
    onnxruntime.quantization computes them."""
    qmin, qmax = (0, 255) if dtype == "uint8" else (-128, 127)
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = np.float32((hi - lo) / (qmax - qmin)) if hi > lo else np.float32(1.0)
    if scale == 0:
        scale = np.float32(1e-8)
    zp = int(np.clip(np.rint(qmin - lo / float(scale)), qmin, qmax))
    return scale, zp


def collect(graph: Graph, values, calibration, observe, target="c") -> None:
    """Run float `graph` (compiled once) on every feed of `calibration` ({input name: array}, one or a
    list) with `values` (Values of graph: inputs or node outputs) as extra outputs, and call
    observe(value, array) for each; `observe` may be a list of callables: one pass over the feeds each."""
    if isinstance(calibration, dict):
        calibration = [calibration]
    calibration = list(calibration)
    if not calibration:
        raise CalibrationError("calibration needs at least one input ({input name: array})")
    values = list(values)
    inputs = {v: n for v, n in zip(graph.inputs, graph.input_names)}
    inner = [v for v in values if v not in inputs]
    outs = list(graph.outputs) + inner
    names = list(graph.output_names) + [f"calib_{i}" for i in range(len(inner))]
    g = Graph(graph.inputs, outs, graph.nodes, graph.constants, graph.name, graph.input_names, names)
    compiled = compile_graph(optimize(g, 2, target, ("fake_quantization_to_integer",)), target)
    exe = GraphExecutor(compiled.plan, compiled.kernels)
    for feed in calibration:
        missing = [n for n in graph.input_names if n not in feed] if isinstance(feed, dict) else ["(not a dict)"]
        if missing:
            raise CalibrationError(f"a calibration input lacks {missing} (each is {{input name: array}}; the "
                                   f"graph's inputs: {list(graph.input_names)})")
    for fn in (observe if isinstance(observe, (list, tuple)) else [observe]):
        for feed in calibration:
            res = exe.run({n: feed[n] for n in graph.input_names})
            for v in values:
                if v in inputs:
                    fn(v, np.asarray(feed[inputs[v]]))
            for v, arr in zip(inner, res[len(graph.outputs):]):
                fn(v, arr)


__all__ = ["RangeCollector", "CalibrationError", "METHODS", "collect", "entropy_range", "entropy_threshold",
           "percentile_range", "quant_params"]
