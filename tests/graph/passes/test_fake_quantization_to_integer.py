"""fake_quantization_to_integer: QDQ groups and QOperator nodes computed by integer ops. Each model is
built in the test and run by tessera and by ONNX Runtime: with ORT's graph optimizations (its QDQ
fusion into integer kernels) and without them (ONNX's float semantics, DQ -> op -> Q)."""
import warnings

import numpy as np
import pytest

from tessera.graph import passes

from qdq_models import QDQ, ort_run, steps, tessera_run

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(7)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def conv_model(act, relu=True, groups=1, C=8, O=16):
    m = QDQ(act)
    x = m.q("x", -2.0, 3.0)
    w, ws = m.weight(rand(O, C // groups, 3, 3, scale=0.3))
    b = m.bias(rand(O), m.scales[x], ws)
    y = m.node("Conv", [x, w, b], "conv", pads=[1, 1, 1, 1], strides=[1, 2] if groups == 1 else [1, 1], group=groups)
    if relu:
        y = m.node("Relu", [y], "relu")
    out = m.q(y, -1.0 if not relu else 0.0, 6.0)
    shape = [1, O, 10, 5] if groups == 1 else [1, O, 10, 10]
    return m, m.model([("x", [1, C, 10, 10])], out, shape), out, {"x": rand(1, C, 10, 10, scale=1.5)}


@pytest.mark.parametrize("act", ["uint8", "int8"])
@pytest.mark.parametrize("relu,groups", [(True, 1), (False, 1), (True, 8)])
def test_qdq_conv_equals_onnxruntime_integer_kernel(act, relu, groups):
    # exact against ORT's QLinearConv (float32 requantization, half to even); within one step of
    # the float DQ -> Conv -> Q that ONNX defines
    m, model, out, feeds = conv_model(act, relu, groups, O=8 if groups > 1 else 16)
    (got,), g, p = tessera_run(model, feeds)
    ref, flt = ort_run(model, feeds)[0], ort_run(model, feeds, optimized=False)[0]
    assert steps(got, ref, m.scales[out]).max() == 0
    assert steps(got, flt, m.scales[out]).max() <= 1
    og = passes.optimized_graph(g, p, opt_level=1)
    assert [n.op for n in og.nodes] == ["qnn.quantize", "qnn.conv2d", "qnn.dequantize"]


@pytest.mark.parametrize("act", ["uint8", "int8"])
def test_qdq_matmul_and_gemm_equal_onnxruntime(act):
    m = QDQ(act)
    x = m.q("x", -3.0, 2.0)
    w1, s1 = m.weight(rand(32, 48, scale=0.2), axis=1)           # MatMul: (K, N), per column
    b1 = m.bias(rand(48), m.scales[x], s1)
    y = m.node("Add", [m.node("MatMul", [x, w1], "mm"), b1], "mmb")
    y = m.q(y, -4.0, 4.0)
    w2, s2 = m.weight(rand(16, 48, scale=0.2), axis=0)           # Gemm transB: (N, K), per row
    b2 = m.bias(rand(16), m.scales[y], s2)
    z = m.node("Gemm", [m.node("Reshape", [y, m.init(np.array([6, 48], np.int64), "shape")], "flat"), w2, b2],
               "gemm", transB=1)
    out = m.q(z, -5.0, 5.0)
    model = m.model([("x", [2, 3, 32])], out, [6, 16])
    feeds = {"x": rand(2, 3, 32, scale=1.2)}
    (got,), g, p = tessera_run(model, feeds)
    ref, flt = ort_run(model, feeds)[0], ort_run(model, feeds, optimized=False)[0]
    assert steps(got, ref, m.scales[out]).max() == 0
    assert steps(got, flt, m.scales[out]).max() <= 1
    ops = [n.op for n in passes.optimized_graph(g, p, opt_level=1).nodes]
    assert ops.count("qnn.dense") == 2 and "nn.matmul" not in ops


def test_qdq_add_pools_and_concat_within_one_step():
    # add, global average pool: ORT requantizes in fixed point, tessera in float32: one step apart
    # at most; max pool and reshape move integers (exact); concat rescales each input
    m = QDQ()
    a = m.q("a", -1.0, 2.0)
    b = m.q("b", -3.0, 1.0)
    s = m.q(m.node("Add", [a, b], "add"), -3.0, 3.0)
    p = m.q(m.node("MaxPool", [s], "mp", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), -3.0, 3.0)
    c = m.q(m.node("Concat", [p, m.q(m.node("MaxPool", [b], "mp", kernel_shape=[2, 2], strides=[2, 2]), -3.0, 1.0)],
                   "cat", axis=1), -3.0, 3.0)
    out = m.q(m.node("GlobalAveragePool", [c], "gap"), -1.0, 1.0)
    model = m.model([("a", [1, 4, 8, 8]), ("b", [1, 4, 8, 8])], out, [1, 8, 1, 1])
    feeds = {"a": rand(1, 4, 8, 8), "b": rand(1, 4, 8, 8)}
    (got,), g, p_ = tessera_run(model, feeds)
    ref, flt = ort_run(model, feeds)[0], ort_run(model, feeds, optimized=False)[0]
    assert steps(got, ref, m.scales[out]).max() <= 1
    assert steps(got, flt, m.scales[out]).max() <= 1
    og = passes.optimized_graph(g, p_, opt_level=1)
    assert sorted({n.op for n in og.nodes}) == ["concatenate", "nn.max_pool2d", "qnn.add", "qnn.dequantize",
                                                "qnn.global_avg_pool", "qnn.quantize", "qnn.rescale"]


def test_no_float_tensor_inside_a_quantized_chain():
    # conv -> relu -> conv -> residual add -> max pool -> global pool -> gemm: after the pass only the
    # model's input quantize and output dequantize touch floats; at opt_level 3 (layouts, fusion)
    # every fused function's body between them is integer too
    m = QDQ()
    x = m.q("x", -2.0, 2.0)
    w1, s1 = m.weight(rand(16, 8, 3, 3, scale=0.3))
    h = m.q(m.node("Relu", [m.node("Conv", [x, w1, m.bias(rand(16), m.scales[x], s1)], "c", pads=[1, 1, 1, 1])]),
            0.0, 4.0)
    w2, s2 = m.weight(rand(16, 16, 1, 1, scale=0.3))
    r = m.q(m.node("Conv", [h, w2, m.bias(rand(16), m.scales[h], s2)], "c"), -4.0, 4.0)
    h = m.q(m.node("Add", [h, r], "res"), -4.0, 6.0)
    h = m.q(m.node("MaxPool", [h], "mp", kernel_shape=[2, 2], strides=[2, 2]), -4.0, 6.0)
    h = m.q(m.node("Flatten", [m.q(m.node("GlobalAveragePool", [h], "gap"), -2.0, 3.0)], "flat"), -2.0, 3.0)
    w3, s3 = m.weight(rand(10, 16, scale=0.3), axis=0)
    out = m.q(m.node("Gemm", [h, w3, m.bias(rand(10), m.scales[h], s3)], "fc", transB=1), -5.0, 5.0)
    model = m.model([("x", [1, 8, 8, 8])], out, [1, 10])
    feeds = {"x": rand(1, 8, 8, 8)}
    (got,), g, p = tessera_run(model, feeds)
    assert steps(got, ort_run(model, feeds)[0], m.scales[out]).max() <= 1
    og = passes.optimized_graph(g, p, opt_level=1)
    floats = [n.op for n in og.nodes if any(v.dtype.is_float() for v in n.outputs)
              or any(v.dtype.is_float() and v not in og.constants for v in n.inputs)]
    assert floats == ["qnn.quantize", "qnn.dequantize"]
    og3 = passes.optimized_graph(g, p, opt_level=3)
    inner = [v for n in og3.nodes for f in ([n.attrs["function"]] if n.op == "fused" else [])
             for b in f.body.nodes for v in b.outputs if v.dtype.is_float()]
    ends = [n for n in og3.nodes if any(v.dtype.is_float() for v in n.outputs) or
            any(v.dtype.is_float() for v in n.inputs if v not in og3.constants)]
    assert len(ends) == 2 and len(inner) <= 2


def test_qoperator_conv_and_matmul_equal_onnx_reference():
    # QLinearConv / QLinearMatMul as ONNX defines them (its reference: float64 requantization)
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    wq = RNG.integers(-127, 128, (8, 4, 3, 3)).astype(np.int8)
    bq = RNG.integers(-5000, 5000, 8).astype(np.int32)
    mw = RNG.integers(-127, 128, (8, 6)).astype(np.int8)
    arrays = {"xs": np.float32(0.05), "xz": np.uint8(120), "wq": wq, "ws": (RNG.random(8) * 0.01 + 0.002).astype(np.float32),
              "wz": np.zeros(8, np.int8), "ys": np.float32(0.07), "yz": np.uint8(128), "b": bq, "mw": mw,
              "ms": np.float32(0.004), "mz": np.int8(0), "zs": np.float32(0.11), "zz": np.uint8(100)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("QLinearConv", ["xq", "xs", "xz", "wq", "ws", "wz", "ys", "yz", "b"], ["yq"],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["yq"], ["yt"], perm=[0, 2, 3, 1]),
             helper.make_node("QLinearMatMul", ["yt", "ys", "yz", "mw", "ms", "mz", "zs", "zz"], ["zq"]),
             helper.make_node("DequantizeLinear", ["zq", "zs", "zz"], ["z"])]
    graph = helper.make_graph(nodes, "qop", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 6, 6, 6])],
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in arrays.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    feeds = {"x": rand(1, 4, 6, 6, scale=2.0)}
    (got,), g, p = tessera_run(model, feeds)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)
    ops = [n.op for n in passes.optimized_graph(g, p, opt_level=1).nodes]
    assert "qnn.conv2d" in ops and "qnn.dense" in ops and "qnn.requantize" not in ops


def test_groups_that_do_not_qualify_stay_in_float():
    # per-tensor activation scale given at run time: nothing to fold; the model still computes
    m = QDQ()
    x = m.q("x", -1.0, 1.0)
    w, ws = m.weight(rand(4, 4, 1, 1))
    y = m.node("Conv", [x, w], "conv")
    out = m.node("Sigmoid", [y], "sig")
    model = m.model([("x", [1, 4, 3, 3])], out, [1, 4, 3, 3])
    feeds = {"x": rand(1, 4, 3, 3)}
    (got,), g, p = tessera_run(model, feeds)
    np.testing.assert_allclose(got, ort_run(model, feeds, optimized=False)[0], rtol=1e-5, atol=1e-6)
    assert "qnn.conv2d" not in [n.op for n in passes.optimized_graph(g, p, opt_level=1).nodes]


@pytest.mark.parametrize("tiny", [1e-6, 1e-16])
@pytest.mark.parametrize("bias_form", ["float", "dq"])
def test_a_bias_beyond_int32_at_a_near_zero_weight_scale_stays_float(bias_form, tiny):
    # a QDQ file from another quantizer: an output channel of near-zero weights (its scale ~1e-11 or
    # ~1e-21), so its bias at the accumulator's scale x_scale * w_scale is ~5e9 (beyond int32) or ~5e19
    # (beyond int64 too: the cast undefined, numpy's 'invalid value encountered in cast'); the bias a
    # float constant or DQ(int32) at a scale of its own. The conv stays in float, as ONNX defines it:
    # within a step of ONNX Runtime's float DQ -> Conv -> Q on every channel, no warning. (ORT's
    # optimized session folds the float-bias form into QLinearConv all the same, its int32 bias cast
    # from the same quotient, and is tens of steps off on that channel.)
    m = QDQ()
    x = m.q("x", -2.0, 3.0)
    w = rand(4, 4, 3, 3, scale=0.3)
    w[1] *= tiny
    wn, ws = m.weight(w)
    b = np.array([0.1, 0.5, -0.3, -0.4], np.float32)
    assert abs(b[1] / (m.scales[x] * ws[1])) > 2.0 ** 31 and abs(b[0] / (m.scales[x] * ws[0])) < 2.0 ** 20
    if bias_form == "float":
        bn = m.init(b, "bias")
    else:
        bs = np.float32(1e-4)
        bn = m.node("DequantizeLinear", [m.init(np.rint(b / bs).astype(np.int32), "bq"), m.init(bs, "bs"),
                                         m.init(np.int32(0), "bz")], "b")
    out = m.q(m.node("Conv", [x, wn, bn], "conv", pads=[1, 1, 1, 1]), -1.0, 6.0)
    model = m.model([("x", [1, 4, 6, 6])], out, [1, 4, 6, 6])
    feeds = {"x": rand(1, 4, 6, 6, scale=1.5)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (got,), g, p = tessera_run(model, feeds)
        ops = [n.op for n in passes.optimized_graph(g, p, opt_level=1).nodes]
    flt = ort_run(model, feeds, optimized=False)[0]
    assert steps(got, flt, m.scales[out]).max() <= 1
    # the near-zero channel is its bias alone: 0.5 in steps of 7/255 (18 of them above the zero point)
    assert np.all(np.abs(got[0, 1] - b[1]) <= m.scales[out] / 2 + 1e-6)
    assert "qnn.conv2d" not in ops and "nn.conv2d" in ops
    if bias_form == "dq":      # ORT keeps a bias DQ at another scale in float too
        assert steps(got, ort_run(model, feeds)[0], m.scales[out]).max() <= 1
