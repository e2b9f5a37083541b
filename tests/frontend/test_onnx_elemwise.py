"""ONNX converters of the elementwise family beyond the backend node tests: older opsets, runtime
Clip bounds, Cast to every tessera dtype, Dropout's mask, symbolic shapes; against onnxruntime."""
import numpy as np
import pytest
from onnx_family_check import check, one_node, run_tessera
from onnx import TensorProto as TP

from tessera.errors import UnsupportedOpError

RNG = np.random.default_rng(1)


def rand(*shape, dtype=np.float32):
    return RNG.uniform(-3, 3, size=shape).astype(dtype)


def test_clip_attribute_form_of_opset_6_and_runtime_bounds_of_opset_13():
    x = rand(3, 4)
    check(one_node("Clip", {"x": x}, dict(min=-1.0, max=0.5), opset=6), {"x": x})
    lo, hi = np.array(-0.5, np.float32), np.array(1.0, np.float32)
    check(one_node("Clip", {"x": x, "lo": lo, "hi": hi}, opset=13), {"x": x, "lo": lo, "hi": hi})
    check(one_node("Clip", {"x": x, "": None}, inits={"hi": hi}, opset=13), {"x": x})
    xi = RNG.integers(-50, 50, (10,)).astype(np.int32)
    check(one_node("Clip", {"x": xi}, inits={"lo": np.array(-7, np.int32), "hi": np.array(9, np.int32)}, opset=13),
          {"x": xi})


@pytest.mark.parametrize("to", [TP.FLOAT16, TP.DOUBLE, TP.INT8, TP.UINT8, TP.INT64, TP.BOOL, TP.FLOAT])
def test_cast_from_float(to):
    x = (RNG.integers(0, 100, (4, 5)) / 4).astype(np.float32)
    x[0, 0] = 0
    graph = check(one_node("Cast", {"x": x}, dict(to=to), opset=13), {"x": x})
    assert (to == TP.FLOAT) == (not graph.nodes)  # a cast to the same type is no node at all


def test_castlike_and_identity():
    x, like = rand(3), np.zeros(1, np.float64)
    check(one_node("CastLike", {"x": x, "like": like}, opset=15), {"x": x, "like": like})
    check(one_node("Identity", {"x": x}, opset=13), {"x": x})


def test_dropout_is_the_identity_with_a_mask_of_ones():
    x = rand(2, 3)
    for opset, mask_type in ((7, np.float32), (10, np.bool_), (13, np.bool_)):
        m = one_node("Dropout", {"x": x}, opset=opset, outputs=("y", "mask"))
        (y, mask), _ = run_tessera(m, {"x": x})
        np.testing.assert_array_equal(y, x)
        assert mask.dtype == mask_type and mask.all()
    m = one_node("Dropout", {"x": x}, inits={"ratio": np.array(0.3, np.float32), "training": np.array(True)},
                 opset=13)
    with pytest.raises(UnsupportedOpError, match="training"):
        run_tessera(m, {"x": x})


def test_activations_with_attributes_and_symbolic_batch():
    x = rand(5, 4)
    for op, attrs in [("LeakyRelu", dict(alpha=0.2)), ("Elu", dict(alpha=0.7)), ("HardSigmoid", dict(alpha=0.3, beta=0.4)),
                      ("Selu", {}), ("ThresholdedRelu", dict(alpha=0.5)), ("Shrink", dict(lambd=1.0, bias=0.5)),
                      ("Celu", dict(alpha=2.0)), ("Softplus", {}), ("HardSwish", {})]:
        check(one_node(op, {"x": x}, attrs, shapes={"x": ("N", 4)}), {"x": x}, rtol=1e-5, atol=1e-6)


def test_gelu_and_swish_against_their_formulas():
    import math

    x = rand(10)
    erf = np.vectorize(math.erf)
    check(one_node("Gelu", {"x": x}, opset=20), {"x": x},
          want=[(0.5 * x * (1 + erf(x / np.sqrt(2)))).astype(np.float32)])
    check(one_node("Gelu", {"x": x}, dict(approximate="tanh"), opset=20), {"x": x},
          want=[(0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))).astype(np.float32)])
    check(one_node("Swish", {"x": x}, dict(alpha=0.5), opset=24), {"x": x},
          want=[(x / (1 + np.exp(-0.5 * x))).astype(np.float32)])
