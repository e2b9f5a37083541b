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
- "entropy": TensorRT's KL-divergence calibration: the clipping threshold t whose 8-bit quantization
  of the clipped histogram loses the least information (the Kullback-Leibler divergence of the
  quantized distribution from the clipped one, smallest over the candidate t). A tensor that is never
  negative is quantized over [0, t] in 256 levels, another symmetrically over [-t, t] in 128 levels a
  side (the histogram of |x|).

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
        self.hist = None          # counts over [lo, hi] (percentile)
        self.abs_hist = None      # counts of |x| over [0, max |x|] (entropy)
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
            self.hist = h if self.hist is None else self.hist + h
        else:
            top = max(abs(self.lo), abs(self.hi), 1e-30)
            x = np.abs(x[x != 0])          # a zero is exact whatever the threshold: it says nothing of it
            h, _ = np.histogram(x, self.bins, (0.0, top))
            self.abs_hist = h if self.abs_hist is None else self.abs_hist + h

    def range(self) -> tuple:
        """(lo, hi) with lo <= 0 <= hi and hi > lo."""
        if not self.count:
            raise CalibrationError("no finite value was observed: nothing to calibrate")
        lo, hi = self.lo, self.hi
        if self.method == "percentile":
            if self.hist is None:
                raise CalibrationError("the percentile method needs observe_histogram's second pass")
            lo, hi = percentile_range(self.hist, self.lo, self.hi, self.percentile)
        elif self.method == "entropy":
            if self.abs_hist is None:
                raise CalibrationError("the entropy method needs observe_histogram's second pass")
            top = max(abs(self.lo), abs(self.hi), 1e-30)
            t = entropy_threshold(self.abs_hist, top, 256 if self.lo >= 0 else 128)
            lo, hi = max(self.lo, -t), min(self.hi, t)
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


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p || q) of two unnormalized histograms over the bins where p > 0 (q smoothed where 0)."""
    p = p / p.sum()
    q = q / max(q.sum(), 1e-30)
    mask = p > 0
    qq = np.where(q[mask] > 0, q[mask], 1e-10)
    return float(np.sum(p[mask] * np.log(p[mask] / qq)))


def entropy_threshold(abs_hist, top: float, levels: int = 128, stride: int = 0) -> float:
    """TensorRT's threshold (module docstring) for a histogram of |x| over [0, top]: over the candidate
    thresholds (bin edges from `levels` bins up), the one minimizing KL(clipped || quantized), where
    `clipped` is the first i bins with the rest's count added to the last and `quantized` merges those
    i bins into `levels` levels, spread back uniformly over each level's nonzero bins."""
    hist = np.asarray(abs_hist, np.float64)
    n = hist.size
    if n < levels:
        raise CalibrationError(f"an entropy histogram needs at least {levels} bins, got {n}")
    if hist.sum() == 0:
        return float(top)
    stride = stride or max(1, (n - levels) // 512)
    width = top / n
    best, best_i = math.inf, n
    tail = np.concatenate([np.cumsum(hist[::-1])[::-1], [0.0]])      # tail[i] = sum of hist[i:]
    for i in range(levels, n + 1, stride):
        p = hist[:i].copy()
        p[-1] += tail[i]
        if p.sum() == 0:
            continue
        # merge i bins into `levels` levels (edges rounded), then spread each level over its nonzero bins
        idx = (np.arange(i) * levels) // i
        sums = np.bincount(idx, weights=hist[:i], minlength=levels)
        nz = p > 0
        nonzero = np.bincount(idx, weights=nz.astype(np.float64), minlength=levels)
        q = np.where(nz, sums[idx] / np.maximum(nonzero[idx], 1.0), 0.0)
        d = _kl(p, q)
        if d < best:
            best, best_i = d, i
    return float(best_i * width)


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


__all__ = ["RangeCollector", "CalibrationError", "METHODS", "collect", "entropy_threshold", "percentile_range",
           "quant_params"]
