"""nn.nll_loss against onnxruntime's NegativeLogLikelihoodLoss and a numpy model of the ONNX spec."""
import numpy as np
import pytest
from nn_onnx_ref import ort_run
from op_check import infer, run_op

from tessera.errors import DTypeError, ShapeError, TesseraError

RNG = np.random.default_rng(21)


def nll_numpy(x, t, w=None, reduction="mean", ignore_index=None):
    """The ONNX definition, in float64."""
    x = x.astype(np.float64)
    c = x.shape[1]
    safe = np.clip(np.where(t < 0, t + c, t), 0, c - 1)
    picked = np.take_along_axis(x, safe[:, None], axis=1)[:, 0]
    wt = np.ones(t.shape) if w is None else w.astype(np.float64)[safe]
    if ignore_index is not None:
        wt = np.where(t == ignore_index, 0.0, wt)
    loss = -picked * wt
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / wt.sum()


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_nll_loss_matches_onnxruntime_with_weights_and_ignore_index(reduction):
    x = RNG.standard_normal((3, 5, 2, 4)).astype(np.float32)
    t = RNG.integers(0, 5, (3, 2, 4)).astype(np.int64)
    t[0, 0, :2] = 2
    w = RNG.uniform(0.1, 1, 5).astype(np.float32)
    (got,) = run_op("nn.nll_loss", x, t, w, reduction=reduction, ignore_index=2)
    (want,) = ort_run("NegativeLogLikelihoodLoss", [x, t, w], dict(reduction=reduction, ignore_index=2), opset=13)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype,tdtype", [("float64", "int32"), ("float16", "int64")])
def test_nll_loss_dtypes_no_weights_mean(dtype, tdtype):
    x = RNG.standard_normal((6, 4)).astype(dtype)
    t = RNG.integers(0, 4, (6,)).astype(tdtype)
    (got,) = run_op("nn.nll_loss", x, t)
    assert got.dtype == np.dtype(dtype) and got.shape == ()
    np.testing.assert_allclose(got, nll_numpy(x, t), rtol=1e-3 if dtype == "float16" else 1e-12)


def test_nll_loss_negative_and_out_of_range_targets_count_from_end_then_clamp():
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    t = np.array([-1, 5, -7, 1], np.int64)
    (got,) = run_op("nn.nll_loss", x, t, reduction="none", ignore_index=-7)
    np.testing.assert_allclose(got, nll_numpy(x, t, reduction="none", ignore_index=-7), rtol=1e-6)
    assert got[2] == 0  # ignored


def test_nll_loss_mean_of_all_ignored_is_nan_like_the_reference():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    t = np.array([1, 1], np.int64)
    (got,) = run_op("nn.nll_loss", x, t, reduction="mean", ignore_index=1)
    assert np.isnan(got)


def test_nll_loss_symbolic_batch():
    x = RNG.standard_normal((5, 3, 2)).astype(np.float32)
    t = RNG.integers(0, 3, (5, 2)).astype(np.int64)
    (got,) = run_op("nn.nll_loss", x, t, sym={0: ("N", 3, 2), 1: ("N", 2)})
    np.testing.assert_allclose(got, nll_numpy(x, t), rtol=1e-6)
    assert infer("nn.nll_loss", (("N", 3, 2), "float32"), (("N", 2), "int64"), reduction="none")[0].shape == ("N", 2)


def test_nll_loss_refusals_name_the_problem():
    f, i = "float32", "int64"
    with pytest.raises(ShapeError, match="without the class axis"):
        infer("nn.nll_loss", ((2, 3, 4), f), ((2, 5), i))
    with pytest.raises(ShapeError, match="rank 1"):
        infer("nn.nll_loss", ((3,), f), ((3,), i))
    with pytest.raises(DTypeError, match="targets"):
        infer("nn.nll_loss", ((2, 3), f), ((2,), "float32"))
    with pytest.raises(DTypeError, match="weights"):
        infer("nn.nll_loss", ((2, 3), f), ((2,), i), ((3,), "float64"))
    with pytest.raises(ShapeError, match="weights must be"):
        infer("nn.nll_loss", ((2, 3), f), ((2,), i), ((4,), f))
    with pytest.raises(TesseraError, match="reduction"):
        infer("nn.nll_loss", ((2, 3), f), ((2,), i), reduction="max")
