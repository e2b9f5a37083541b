"""ONNX BitCast, Det, CenterCropPad, MaxUnpool, NonZero and the data-dependent refusals, against
onnxruntime and the reference."""
import numpy as np
import pytest
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator
from onnx_family_check import check, one_node

from tessera.errors import UnsupportedOpError
from tessera.frontend.onnx import from_onnx

RNG = np.random.default_rng(82)


def test_bitcast_and_det():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    m = one_node("BitCast", {"x": x}, dict(to=TensorProto.UINT32), opset=26)
    check(m, {"x": x}, want=[x.view(np.uint32)])
    d = RNG.standard_normal((2, 4, 4)).astype(np.float32)
    check(one_node("Det", {"d": d}, opset=11), {"d": d}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,axes", [([3, 8], [-2, -1]), ([7, 2, 5], None), ([1, 9], [0, 2])])
def test_center_crop_pad_odd_and_even_excess(shape, axes):
    x = RNG.standard_normal((4, 5, 6)).astype(np.float32)
    attrs = {} if axes is None else dict(axes=axes)
    m = one_node("CenterCropPad", {"x": x}, attrs, inits={"s": np.array(shape, np.int64)}, opset=18)
    check(m, {"x": x}, want=ReferenceEvaluator(m).run(None, {"x": x}))


def test_max_unpool_of_max_pool_indices_with_output_shape():
    # The ONNX reference (and its backend test) scatter into the unpooled shape (here 4x4) and pad
    # that to output_shape (5x5); onnxruntime scatters into output_shape directly. tessera follows ONNX.
    from onnx import helper

    x = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    pool = helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2])
    unpool = helper.make_node("MaxUnpool", ["p", "i", "shape"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    g = helper.make_graph([pool, unpool], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_empty_tensor_value_info("y")],
                          initializer=[helper.make_tensor("shape", TensorProto.INT64, [4], [1, 2, 5, 5])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    check(m, {"x": x}, want=ReferenceEvaluator(m).run(None, {"x": x}))


def test_nonzero_folds_constants_and_refuses_runtime_inputs():
    c = np.array([[1, 0, 2], [0, 3, 0]], np.int32)
    m = one_node("NonZero", {}, inits={"c": c}, opset=13)
    check(m, {}, want=[np.array(np.nonzero(c), np.int64)])
    with pytest.raises(UnsupportedOpError, match="depends on the input's values"):
        from_onnx(one_node("NonZero", {"c": c}, opset=13))
    boxes = np.zeros((1, 2, 4), np.float32)
    scores = np.zeros((1, 1, 2), np.float32)
    with pytest.raises(UnsupportedOpError, match="NonMaxSuppression.*how many boxes"):
        from_onnx(one_node("NonMaxSuppression", {"b": boxes, "s": scores}, opset=11))
