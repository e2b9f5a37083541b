"""graph/calibration.py: the range each calibration method picks on known distributions (seeded
samples of a million values), against numpy's extremes and percentiles and the quantization error
they give."""
import numpy as np
import pytest

from tessera.errors import TesseraError
from tessera.graph.calibration import RangeCollector, entropy_range, entropy_threshold, quant_params

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


def tensorrt(x, levels=128, bins=2048):
    """TensorRT's entropy threshold of x as the symmetric |x| path had it: KL over a histogram of |x|
    (exact zeros left out) in `levels` levels a side, any share clipped."""
    top = np.abs(x).max()
    h, _ = np.histogram(np.abs(x[x != 0]), bins, (0.0, top))
    return entropy_threshold(h, top, levels, max_clip=1.0)


def channel_constants(n, lo, hi, channels=64):
    """n values of a per-channel affine output whose input was exactly 0 (hardswish below -3, then
    x * a + b): one constant b per channel, uniform in [lo, hi]: a histogram of spikes."""
    return RNG.uniform(lo, hi, channels)[RNG.integers(0, channels, n)]


def test_entropy_covers_the_long_positive_tail_of_a_small_negative_bulk():
    # PP-LCNet's x * a + b: most values a small negative spike per channel, some a little above it,
    # 2% a long positive tail up to 10x the bulk's width. Quantized asymmetric in uint8 over [lo, hi],
    # the range must cover that tail: the KL search clips at most 1/2048 of the values (the
    # collector's bins), so at most (1/2048) / 2% of the tail.
    tail = np.minimum(RNG.exponential(0.1, N // 50), 0.42)
    x = channel_constants(N - tail.size, -0.044, 0.0)
    x[: N // 5] += RNG.exponential(0.01, N // 5)
    x = np.concatenate([x, tail])
    lo, hi = calibrated(x, "entropy")
    assert np.mean((x < lo) | (x > hi)) <= 1 / 2048
    assert hi >= np.quantile(tail, 1 - (1 / 2048) / 0.02) and lo <= np.quantile(x, 1 / 2048)
    # the symmetric |x| path (TensorRT's threshold, used as [-t, t]) fit the spikes and clipped most
    # of the tail; its error is many times the new range's
    t = tensorrt(x)
    assert t < np.median(tail)
    assert quant_mse(x, lo, hi) < 0.1 * quant_mse(x, max(-t, x.min()), t)


def test_entropy_of_a_symmetric_normal_is_tensorrts_threshold():
    # both tails alike: the asymmetric search over [lo, hi] in 256 levels finds TensorRT's symmetric
    # threshold in 128 levels a side (to the sample's noise in the far tails), nothing more clipped
    x = RNG.standard_normal(N)
    lo, hi = calibrated(x, "entropy")
    t = tensorrt(x)
    assert abs(hi - t) <= 0.1 * t and abs(lo + t) <= 0.1 * t
    assert quant_mse(x, lo, hi) <= 1.1 * quant_mse(x, -t, t)
    # a shifted normal: each end its own tail, the levels spread over the range (no level left to
    # the side the symmetric [-t, t] over-reached)
    y = RNG.normal(1.0, 1.0, N)
    lo, hi = calibrated(y, "entropy")
    assert lo > -tensorrt(y) + 0.5 and quant_mse(y, lo, hi) < quant_mse(y, max(-tensorrt(y), y.min()), tensorrt(y))


def test_entropy_of_a_never_negative_tensor():
    # a ReLU output whose tail is smooth: TensorRT's threshold over [0, t] in 256 levels, as before
    # (the cap on the clipped share does not bind: that tail is sparse)
    r = np.maximum(RNG.standard_normal(N), 0.0)
    lo, hi = calibrated(r, "entropy")
    top = r.max()
    h, _ = np.histogram(r[r > 0], 2048, (0.0, top))
    assert (lo, hi) == (0.0, entropy_threshold(h, top, 256, max_clip=1.0))
    # a ReLU output of spikes (some blurred) with a 10% tail decaying to 10x their range (a depthwise
    # conv over rendered text): KL alone fits the spikes and clips a good part of the tail, many
    # times 1/2048 of the values; the cap keeps the clipped share of the nonzero values to 1/2048
    # (deliberately: KL does not see how far a clipped value moves), a share of the tail at most
    # (1/2048) / 10%
    tail = 2.0 + RNG.exponential(2.0, N // 20)
    bulk = channel_constants(N // 2 - tail.size, 0.0, 2.0)
    bulk[: bulk.size // 3] += np.abs(RNG.normal(0.0, 0.1, bulk.size // 3))
    s = np.concatenate([bulk, tail, np.zeros(N // 2)])
    lo, hi = calibrated(s, "entropy")
    assert lo == 0.0 and np.mean(s[s > 0] > hi) <= 1 / 2048
    assert hi >= np.quantile(tail, 1 - (1 / 2048) / (tail.size / (N // 2)))
    h, _ = np.histogram(s[s > 0], 2048, (0.0, s.max()))
    assert np.mean(s[s > 0] > entropy_threshold(h, s.max(), 256, max_clip=1.0)) > 10 / 2048
    # never positive: the mirror image
    lo, hi = calibrated(-r, "entropy")
    assert (lo, hi) == (-calibrated(r, "entropy")[1], 0.0)


def test_entropy_range_of_a_histogram():
    # counts spread evenly over [-0.5, 2) of a histogram over [-1, 3]: KL alone (any share clipped)
    # clips none of them (a clipped bin piles onto the end; an empty bin costs nothing)
    n = 4096
    edges = np.linspace(-1.0, 3.0, n + 1)
    h = np.where((edges[:-1] >= -0.5) & (edges[1:] <= 2.0), RNG.integers(1000, 2000, n), 0)
    lo, hi = entropy_range(h, -1.0, 3.0, max_clip=1.0)
    assert -1.0 <= lo <= -0.5 and 2.0 <= hi <= 3.0
    # all on one side: that side's entropy_threshold, the other end at 0
    assert entropy_range(h[n // 4:], 0.0, 3.0) == (0.0, entropy_threshold(h[n // 4:], 3.0, 256))
    assert 2.0 <= entropy_range(h[n // 4:], 0.0, 3.0)[1] <= 3.0      # and that end clips none of the counts


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
