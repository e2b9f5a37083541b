"""If / Loop / Scan: resolved while converting (branch chosen, loops unrolled), against onnxruntime."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import tessera
from tessera.errors import UnsupportedOpError
from tessera.frontend.onnx import from_onnx


def vi(name, dtype=TP.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def model(nodes, inputs, outputs, opset=17):
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                             opset_imports=[helper.make_opsetid("", opset)])


def ort_run(m, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def branch(name, value_name, op, x="x"):
    return helper.make_graph([helper.make_node(op, [x, x], [value_name])], name, [], [vi(value_name)])


def if_model():
    return model([helper.make_node("If", ["cond"], ["y"], then_branch=branch("then", "t", "Add"),
                                   else_branch=branch("else", "e", "Mul"))],
                 [vi("cond", TP.BOOL, []), vi("x", shape=[3])], [vi("y")])


@pytest.mark.parametrize("cond", [True, False])
def test_if_with_a_frozen_condition_becomes_its_branch(cond):
    m = if_model()
    x = np.array([1.0, 2.0, -3.0], np.float32)
    with pytest.raises(UnsupportedOpError) as e:
        from_onnx(m, specialize=False)
    assert e.value.needs_constant == "cond"
    graph, params = from_onnx(m, const_inputs={"cond": np.array(cond)})
    assert [n.op for n in graph.nodes] == (["add"] if cond else ["multiply"])
    got = tessera.compile(graph, params).run({"x": x})[0]
    np.testing.assert_allclose(got, ort_run(m, {"cond": np.array(cond), "x": x})[0])


def loop_body():
    # carried: acc; scan output: acc * i
    nodes = [helper.make_node("Cast", ["i"], ["fi"], to=TP.FLOAT),
             helper.make_node("Add", ["acc_in", "fi"], ["acc_out"]),
             helper.make_node("Mul", ["acc_out", "fi"], ["scan_out"]),
             helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    return helper.make_graph(nodes, "body", [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("acc_in", shape=[2])],
                             [vi("cond_out", TP.BOOL, []), vi("acc_out", shape=[2]), vi("scan_out", shape=[2])])


@pytest.mark.parametrize("trips", [0, 1, 4])
def test_loop_with_a_constant_trip_count_is_unrolled(trips):
    nodes = [helper.make_node("Constant", [], ["M"], value=numpy_helper.from_array(np.array(trips, np.int64))),
             helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(True))),
             helper.make_node("Loop", ["M", "c", "a0"], ["acc", "scan"], body=loop_body())]
    m = model(nodes, [vi("a0", shape=[2])], [vi("acc"), vi("scan")])
    a0 = np.array([0.5, -1.0], np.float32)
    got = tessera.compile(*from_onnx(m)).run({"a0": a0})
    want = ort_run(m, {"a0": a0})
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_loop_whose_condition_is_computed_at_run_time_is_refused():
    body = helper.make_graph([helper.make_node("ReduceSum", ["acc_in"], ["s"], keepdims=0),
                              helper.make_node("Less", ["s", "ten"], ["cond_out"]),
                              helper.make_node("Add", ["acc_in", "acc_in"], ["acc_out"])], "body",
                             [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("acc_in", shape=[2])],
                             [vi("cond_out", TP.BOOL, []), vi("acc_out", shape=[2])],
                             initializer=[numpy_helper.from_array(np.array(10.0, np.float32), "ten")])
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(True))),
             helper.make_node("Loop", ["", "c", "a0"], ["acc"], body=body, name="while")]
    m = model(nodes, [vi("a0", shape=[2])], [vi("acc")])
    with pytest.raises(UnsupportedOpError, match="while.*loop condition after iteration 0.*runtime input 'a0'"):
        from_onnx(m, specialize=False)


def test_scan_is_unrolled_with_directions_and_axes():
    body = helper.make_graph([helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
                              helper.make_node("Mul", ["s_out", "x_t"], ["y_t"])], "body",
                             [vi("s_in", shape=[2]), vi("x_t", shape=[2])], [vi("s_out", shape=[2]), vi("y_t", shape=[2])])
    node = helper.make_node("Scan", ["s0", "x"], ["s", "y"], body=body, num_scan_inputs=1,
                            scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[-1])
    m = model([node], [vi("s0", shape=[2]), vi("x", shape=[2, 3])], [vi("s"), vi("y")])
    rng = np.random.default_rng(0)
    feeds = {"s0": rng.standard_normal(2).astype(np.float32), "x": rng.standard_normal((2, 3)).astype(np.float32)}
    got = tessera.compile(*from_onnx(m)).run(feeds)
    for g, w in zip(got, ort_run(m, feeds)):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_optional_tensors_are_tensors_that_are_given():
    opt = helper.make_value_info("o", helper.make_optional_type_proto(helper.make_tensor_type_proto(TP.FLOAT, [2])))
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("OptionalHasElement", [], ["none"]),
             helper.make_node("OptionalGetElement", ["o"], ["got"])]
    m = helper.make_model(helper.make_graph(nodes, "g", [opt], [vi("has", TP.BOOL), vi("none", TP.BOOL), vi("got")]),
                          opset_imports=[helper.make_opsetid("", 18)])
    has, none, got = tessera.compile(*from_onnx(m)).run({"o": np.array([1.5, 2.5], np.float32)})
    assert has.dtype == np.bool_ and bool(has) and not bool(none)
    np.testing.assert_array_equal(got, [1.5, 2.5])
    # sequences and optionals of tensors are taken (tests/frontend/test_onnx_sequences.py); a map is not
    mp = helper.make_value_info("s", helper.make_map_type_proto(TP.INT64, helper.make_tensor_type_proto(TP.FLOAT, [2])))
    m2 = helper.make_model(helper.make_graph([helper.make_node("Identity", ["s"], ["y"])], "g", [mp], [vi("y")]),
                           opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(UnsupportedOpError, match="model input 's' is a map"):
        from_onnx(m2)
