"""ONNX converters of the nn families: what the backend node tests do not pin down (auto_pad,
older opsets, Gemm's constant folding, runtime weights, pre-13 softmax, Resize's sizes/axes/
aspect policy, legacy Upsample), each checked against onnxruntime end to end."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import tessera
from tessera.errors import UnsupportedOpError
from tessera.frontend.onnx import from_onnx

RNG = np.random.default_rng(21)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def one_node(op, inputs, attrs=None, inits=None, opset=17, outputs=("y",), out_types=None):
    """A model of one node; inputs: {name: array} runtime inputs; inits: {name: array} weights."""
    inits = inits or {}
    names = list(inputs) + list(inits)
    node = helper.make_node(op, [n if n else "" for n in names], list(outputs), **(attrs or {}))
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs.items()]
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs if o]
    g = helper.make_graph([node], "g", ins, outs, initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def check(m, feeds, rtol=1e-4, atol=1e-4, **kw):
    graph, params = from_onnx(m, **kw)
    got = tessera.compile(graph, params).run(feeds)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return graph


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_auto_pad_with_stride_and_bias(auto_pad):
    x, w, b = rand(1, 3, 9, 8), rand(4, 3, 3, 2), rand(4)
    m = one_node("Conv", {"x": x}, dict(auto_pad=auto_pad, strides=[2, 3]), {"w": w, "b": b}, opset=11)
    check(m, {"x": x})


def test_conv_with_runtime_weight_and_bias():
    x, w, b = rand(2, 4, 6, 6), rand(6, 2, 3, 3), rand(6)
    m = one_node("Conv", {"x": x, "w": w, "b": b}, dict(group=2, pads=[1, 1, 1, 1], dilations=[1, 2]))
    check(m, {"x": x, "w": w, "b": b})


def test_conv_transpose_output_shape_and_same_upper():
    x, w = rand(1, 2, 4, 5), rand(2, 3, 3, 3)
    check(one_node("ConvTranspose", {"x": x}, dict(strides=[2, 2], output_shape=[9, 11]), {"w": w}), {"x": x})
    check(one_node("ConvTranspose", {"x": x}, dict(strides=[2, 2], auto_pad="SAME_UPPER"), {"w": w}), {"x": x})


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("const_b", [True, False])
def test_gemm_transposes_alpha_beta_and_bias(trans_a, trans_b, const_b):
    a = rand(5, 4) if not trans_a else rand(4, 5)
    b = rand(4, 3) if not trans_b else rand(3, 4)
    c = rand(3)
    attrs = dict(transA=trans_a, transB=trans_b, alpha=0.5, beta=2.0)
    inputs = {"a": a, "b": b} if not const_b else {"a": a}
    inits = {"c": c} if not const_b else {"b": b, "c": c}
    if not const_b:  # keep the ONNX input order a, b, c
        m = one_node("Gemm", {"a": a, "b": b, "c": c}, attrs)
        check(m, {"a": a, "b": b, "c": c})
    else:
        check(one_node("Gemm", inputs, attrs, inits), inputs)


def test_gemm_with_constant_weight_is_one_matmul_on_k_by_n_weights():
    a, b = rand(2, 8), rand(10, 8)
    graph = check(one_node("Gemm", {"a": a}, dict(transB=1), {"b": b}, opset=11), {"a": a})
    assert graph.op_counts() == {"nn.matmul": 1}
    (w,) = [v for v in graph.nodes[0].inputs if v is not graph.inputs[0]]
    assert w.type.shape == (8, 10)


def test_batch_norm_old_opset_and_spatial_refusal():
    x = rand(2, 3, 4, 4)
    params = {"s": rand(3), "b": rand(3), "m": rand(3), "v": np.abs(rand(3)) + 0.5}
    check(one_node("BatchNormalization", {"x": x}, dict(epsilon=1e-3), params, opset=7), {"x": x})
    with pytest.raises(UnsupportedOpError, match="spatial=0"):
        from_onnx(one_node("BatchNormalization", {"x": x}, dict(spatial=0), params, opset=7))


def test_layer_norm_outputs_only_what_is_asked():
    x, w = rand(2, 5, 8), rand(8)
    m = one_node("LayerNormalization", {"x": x}, dict(axis=-1), {"w": w}, outputs=("y", "", "inv"))
    check(m, {"x": x})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_before_opset_13_coerces_to_2d(op):
    x = rand(2, 3, 4)
    check(one_node(op, {"x": x}, dict(axis=1), opset=11), {"x": x})
    check(one_node(op, {"x": x}, {}, opset=11), {"x": x})     # default axis 1
    check(one_node(op, {"x": x}, dict(axis=1), opset=13), {"x": x})


def test_topk_k_attribute_before_opset_10_and_input_after():
    x = rand(3, 8)
    check(one_node("TopK", {"x": x}, dict(k=3), opset=9, outputs=("v", "i")), {"x": x})
    m = one_node("TopK", {"x": x}, dict(largest=0, axis=0), {"k": np.array([2], np.int64)}, opset=11,
                 outputs=("v", "i"))
    check(m, {"x": x})


def test_max_pool_indices_output_and_auto_pad():
    x = rand(1, 2, 7, 7)
    m = one_node("MaxPool", {"x": x}, dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER"),
                 outputs=("y", "i"), opset=12)
    check(m, {"x": x})


def test_average_pool_opset_7_count_include_pad():
    x = rand(1, 2, 6, 5)
    m = one_node("AveragePool", {"x": x}, dict(kernel_shape=[3, 2], pads=[1, 1, 1, 0], count_include_pad=1), opset=7)
    check(m, {"x": x})


def test_resize_sizes_with_axes_and_aspect_policy():
    x = rand(1, 2, 6, 8)
    roi = np.array([], np.float32)
    m = one_node("Resize", {"x": x}, dict(mode="linear", axes=[2, 3], keep_aspect_ratio_policy="not_larger"),
                 {"roi": roi, "": np.array([], np.float32), "sizes": np.array([9, 9], np.int64)}, opset=18)
    # ONNX input order: x, roi, scales (empty), sizes
    node = m.graph.node[0]
    del node.input[:]
    node.input.extend(["x", "roi", "", "sizes"])
    del m.graph.initializer[1]
    check(m, {"x": x})


def test_resize_opset_11_nearest_scales_with_symbolic_batch():
    x = rand(2, 3, 4, 5)
    m = one_node("Resize", {"x": x}, dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                                            nearest_mode="floor"),
                 {"roi": np.array([], np.float32), "scales": np.array([1, 1, 2, 1.5], np.float32)}, opset=11)
    graph = check(m, {"x": x}, shape_dict={"x": ("N", 3, 4, 5)})
    assert graph.outputs[0].type.shape == ("N", 3, 8, 7)


def test_upsample_legacy_nearest_and_linear():
    x = rand(1, 1, 3, 4)
    check(one_node("Upsample", {"x": x}, dict(mode="nearest", scales=[1.0, 1.0, 2.0, 3.0]), opset=7), {"x": x})
    check(one_node("Upsample", {"x": x}, dict(mode="linear"), {"s": np.array([1, 1, 2, 2], np.float32)}, opset=9),
          {"x": x})


def test_unsupported_cases_name_the_node():
    x = rand(1, 1, 2, 2, 2, 2)
    with pytest.raises(UnsupportedOpError, match="4-d convolution"):
        from_onnx(one_node("Conv", {"x": x}, {}, {"w": rand(1, 1, 1, 1, 1, 1)}))
    with pytest.raises(UnsupportedOpError, match="mode='bogus'"):
        from_onnx(one_node("Resize", {"x": rand(1, 1, 2, 2)}, dict(mode="bogus"),
                           {"roi": np.array([], np.float32), "scales": np.array([1, 1, 2, 2], np.float32)}))
