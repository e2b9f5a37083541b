"""ONNX NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss converters against onnxruntime (cases the
backend node tests leave out: float64, int32 labels, symbolic batch, log_prob beside every reduction)."""
import numpy as np
import pytest
from onnx_family_check import check, one_node

from tessera.errors import UnsupportedOpError
from tessera.frontend.onnx import from_onnx

RNG = np.random.default_rng(22)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_softmax_cross_entropy_with_log_prob_float64_int32_labels(reduction):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float64)
    y = RNG.integers(0, 4, (3, 5)).astype(np.int32)
    w = RNG.uniform(0.5, 1.5, 4).astype(np.float64)
    m = one_node("SoftmaxCrossEntropyLoss", {"x": x, "y": y, "w": w}, dict(reduction=reduction, ignore_index=3),
                 opset=13, outputs=("loss", "log_prob"))
    check(m, {"x": x, "y": y, "w": w}, rtol=1e-10, atol=1e-12)


def test_nll_loss_symbolic_batch_and_optional_weight_omitted():
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    y = RNG.integers(0, 3, (4,)).astype(np.int64)
    m = one_node("NegativeLogLikelihoodLoss", {"x": x, "y": y, "": None}, dict(reduction="sum"), opset=22,
                 outputs=("loss",),
                 shapes={"x": ("N", 3), "y": ("N",)})
    g = check(m, {"x": x, "y": y})
    assert g.outputs[0].type.shape == ()


def test_loss_converters_refuse_rank1_scores():
    x = RNG.standard_normal((4,)).astype(np.float32)
    y = np.zeros((4,), np.int64)
    with pytest.raises(UnsupportedOpError, match=r"\(N, C, d1..dk\)"):
        from_onnx(one_node("SoftmaxCrossEntropyLoss", {"x": x, "y": y}, opset=13, outputs=("loss",)))
