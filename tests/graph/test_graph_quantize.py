"""graph.passes.quantize: an fp32 CNN becomes an int8 graph with VTA's power-of-two scheme
(per-channel symmetric int8 weights, per-tensor activations from calibration, requantization by
shift), which runs on the CPU close to the fp32 model."""
import numpy as np
import pytest

import tessera
from tessera.graph.passes.quantize import QuantizeError, quantize

from vdla_models import inputs, small_cnn


@pytest.fixture(scope="module")
def models():
    g = small_cnn()
    return g, quantize(g, calibration=inputs(4, seed=7))


def test_int8_graph_structure(models):
    _, qg = models
    convs = [n for n in qg.nodes if n.op == "nn.conv2d"]
    assert len(convs) == 4
    for n in convs:
        assert str(n.inputs[0].dtype) == "int8" and str(n.outputs[0].dtype) == "int32"
        w = np.asarray(qg.constants[n.inputs[1]])
        assert w.dtype == np.int8
        # per-channel power-of-two scales: every channel uses the upper half of [-127, 127]
        m = np.abs(w.reshape(w.shape[0], -1).astype(int)).max(1)
        assert ((m > 63) & (m <= 127)).all()
    shifts = [n for n in qg.nodes if n.op == "right_shift"]
    assert len(shifts) >= 4
    assert all(str(v.dtype) == "float32" for v in qg.outputs)


def test_int8_close_to_fp32(models):
    g, qg = models
    fexe, qexe = tessera.compile(g), tessera.compile(qg)
    agree, errs = 0, []
    for feed in inputs(12, seed=3):
        yf, yq = fexe.run(feed)[0], qexe.run(feed)[0]
        errs.append(np.linalg.norm(yq - yf) / np.linalg.norm(yf))
        agree += int(yf.argmax() == yq.argmax())
    assert np.median(errs) < 0.1, errs
    assert agree >= 9


def test_calibration_must_cover_inputs():
    with pytest.raises(QuantizeError, match="calibration input lacks"):
        quantize(small_cnn(), calibration=[{"x": np.zeros((1, 16, 8, 8), np.float32)}])
    with pytest.raises(QuantizeError, match="at least one calibration input"):
        quantize(small_cnn(), calibration=[])


def test_dense_is_int8_dequantized_per_channel(models):
    _, qg = models
    dense = [n for n in qg.nodes if n.op == "nn.dense"]
    assert len(dense) == 1 and str(dense[0].inputs[0].dtype) == "int8"
    assert not any(n.op == "nn.matmul" for n in qg.nodes)


def _qlinear_conv_model(rng, C=16, O=32, H=6):
    from onnx import TensorProto, helper, numpy_helper

    wq = rng.integers(-127, 128, (O, C, 3, 3)).astype(np.int8)
    ws = (2.0 ** -rng.integers(6, 9, O)).astype(np.float32)
    bias = rng.integers(-3000, 3000, O).astype(np.int32)
    arrays = {"xs": np.array(2**-4, np.float32), "xz": np.array(0, np.int8), "wq": wq, "ws": ws,
              "wz": np.zeros(O, np.int8), "ys": np.array(2**-3, np.float32), "yz": np.array(0, np.int8), "b": bias}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("QLinearConv", ["xq", "xs", "xz", "wq", "ws", "wz", "ys", "yz", "b"], ["yq"],
                              pads=[1, 1, 1, 1]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "qconv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, O, H, H])],
                              [numpy_helper.from_array(a, n) for n, a in arrays.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), arrays


def test_qlinear_conv_model_in_shift_form_runs_on_vdla():
    """An ONNX QLinearConv (power-of-two multipliers) becomes the shift chain: exact against a NumPy
    round-half-up reference, equal to ONNX Runtime except at exact ties (ONNX rounds them to even),
    and partition_for_vdla runs it on VDLA bit-identically."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from tessera.frontend.onnx import from_onnx
    from tessera.executor import partition_for_vdla
    from tessera.graph.passes.quantize import from_qlinear

    rng = np.random.default_rng(0)
    model, a = _qlinear_conv_model(rng)
    g, params = from_onnx(model)
    qg = from_qlinear(g, params)
    assert not any(n.op in ("qnn.requantize", "nn.conv_integer") for n in qg.nodes)
    x = (rng.standard_normal((1, 16, 6, 6)) * 3).astype(np.float32)
    got = tessera.compile(qg).run({"x": x})[0]
    # NumPy: quantize (half to even), int32 conv + bias, x m, rounded half up / to even
    xq = np.clip(np.rint(x / a["xs"]), -128, 127).astype(np.int64)
    xp = np.pad(xq, ((0, 0), (0, 0), (1, 1), (1, 1)))
    acc = sum(np.einsum("nchw,oc->nohw", xp[:, :, dy:dy + 6, dx:dx + 6], a["wq"][:, :, dy, dx].astype(np.int64))
              for dy in range(3) for dx in range(3)) + a["b"][None, :, None, None]
    v = acc * (a["xs"] * a["ws"] / a["ys"]).astype(np.float64)[None, :, None, None]
    up = np.clip(np.floor(v + 0.5), -128, 127) * a["ys"]
    even = np.clip(np.rint(v), -128, 127) * a["ys"]
    np.testing.assert_array_equal(got, up.astype(np.float32))
    ref = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(ref, even.astype(np.float32))
    ties = np.abs(v - np.floor(v) - 0.5) == 0
    assert ((got != ref) <= ties).all()
    plan = partition_for_vdla(qg)
    assert [s.kind for s in plan.steps].count("vdla") == 1
    np.testing.assert_array_equal(plan.run({"x": x})[0], got)


def test_qlinear_with_other_multiplier_stays_as_is():
    pytest.importorskip("onnx")
    from onnx import numpy_helper

    from tessera.frontend.onnx import from_onnx
    from tessera.graph.passes.quantize import from_qlinear

    model, _ = _qlinear_conv_model(np.random.default_rng(1))
    for init in model.graph.initializer:
        if init.name == "ys":
            init.CopyFrom(numpy_helper.from_array(np.array(0.1, np.float32), "ys"))
    g, params = from_onnx(model)
    qg = from_qlinear(g, params)
    assert any(n.op == "qnn.requantize" for n in qg.nodes)
