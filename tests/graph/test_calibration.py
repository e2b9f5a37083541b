"""graph/calibration.py: the range each calibration method picks on known distributions (seeded
samples of a million values), against numpy's extremes and percentiles and the quantization error
they give."""
import numpy as np
import pytest

from tessera.errors import TesseraError
from tessera.graph.calibration import RangeCollector, entropy_threshold, quant_params

RNG = np.random.default_rng(5)
N = 1_000_000


def calibrated(x, method, parts=4, **kw):
    c = RangeCollector(method, **kw)
    for a in np.array_split(x, parts):       # several calibration inputs
        c.observe(a)
    if c.needs_histogram:
        for a in np.array_split(x, parts):
            c.observe_histogram(a)
    return c.range()


def quant_mse(x, lo, hi):
    """Mean squared error of x through uint8 quantization of [lo, hi] (ONNX's Q then DQ)."""
    s, z = quant_params(lo, hi)
    q = np.clip(np.rint(x / np.float64(s)) + z, 0, 255)
    return float(np.mean(((q - z) * np.float64(s) - x) ** 2))


def test_minmax_is_the_extremes_and_contains_zero():
    x = RNG.uniform(1.0, 5.0, N)          # all positive: the range still starts at 0
    lo, hi = calibrated(x, "minmax")
    assert (lo, hi) == (0.0, x.max())
    y = RNG.standard_normal(N)
    assert calibrated(y, "minmax") == (y.min(), y.max())


@pytest.mark.parametrize("pct", [99.0, 99.9, 99.99])
def test_percentile_within_a_bin_of_numpy(pct):
    x = RNG.standard_normal(N)
    lo, hi = calibrated(x, "percentile", percentile=pct)
    width = (x.max() - x.min()) / 2048
    assert abs(hi - np.percentile(x, pct)) <= width
    assert abs(lo - np.percentile(x, 100 - pct)) <= width
    r = np.maximum(x, 0)                 # never negative: lo stays 0
    lo, hi = calibrated(r, "percentile", percentile=pct)
    assert lo == 0.0 and abs(hi - np.percentile(r, pct)) <= r.max() / 2048


def test_entropy_keeps_a_uniform_range_and_clips_outliers():
    u = RNG.uniform(-1.0, 1.0, N)         # nothing to gain by clipping: the threshold is the extreme
    lo, hi = calibrated(u, "entropy")
    assert lo <= -0.98 and hi >= 0.98
    x = np.concatenate([RNG.standard_normal(N), [60.0, -45.0]])   # two outliers
    lo, hi = calibrated(x, "entropy")
    assert 3.0 < hi < 8.0 and -8.0 < lo < -3.0
    assert quant_mse(x, lo, hi) < 0.7 * quant_mse(x, *calibrated(x, "minmax"))


def test_entropy_beats_minmax_on_heavy_tails_and_relu_outputs():
    lap = RNG.laplace(size=N)
    lo, hi = calibrated(lap, "entropy")
    assert hi < lap.max() and quant_mse(lap, lo, hi) < quant_mse(lap, *calibrated(lap, "minmax"))
    # post-relu: half the values exactly 0 (exact whatever the threshold), quantized over [0, t]
    r = np.maximum(RNG.standard_normal(N), 0.0)
    lo, hi = calibrated(r, "entropy")
    assert lo == 0.0 and 3.0 < hi <= r.max()
    assert quant_mse(r, lo, hi) <= quant_mse(r, *calibrated(r, "minmax"))


def test_entropy_threshold_of_a_histogram():
    # a histogram with all its mass in the first 100 of 2048 bins: the threshold keeps those bins
    h = np.zeros(2048)
    h[:100] = RNG.integers(1000, 2000, 100)
    t = entropy_threshold(h, 2048.0, levels=128)
    assert 100 <= t <= 140


def test_quant_params_as_onnxruntime():
    s, z = quant_params(-2.0, 3.0)
    assert s == np.float32(5.0 / 255) and z == int(np.rint(2.0 / np.float32(5.0 / 255)))
    assert quant_params(0.0, 6.0) == (np.float32(6.0 / 255), 0)
    s, z = quant_params(-1.0, 1.0, "int8")    # the range's ends are the type's ends (to a step)
    assert s == np.float32(2.0 / 255) and np.rint(-1.0 / s) + z == -128 and abs(np.rint(1.0 / s) + z - 127) <= 1


def test_bad_settings_and_no_values_raise():
    with pytest.raises(TesseraError, match="not one of"):
        RangeCollector("mse")
    with pytest.raises(TesseraError, match="percentile"):
        RangeCollector("percentile", percentile=40)
    c = RangeCollector("entropy")
    with pytest.raises(TesseraError, match="no finite value"):
        c.observe(np.array([np.nan, np.inf]))
        c.range()
    c = RangeCollector("percentile")
    c.observe(np.arange(10.0))
    with pytest.raises(TesseraError, match="second pass"):
        c.range()
