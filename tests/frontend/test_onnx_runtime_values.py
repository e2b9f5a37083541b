"""Runtime inputs whose values decide the graph (a shape, an axis, a rank, a mode): from_onnx returns a
DeferredGraph, tessera.compile a SpecializingExecutor that builds and compiles the graph per distinct
value on first use; every result is checked against onnxruntime fed the same inputs."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

import tessera
from tessera.errors import ShapeError, TesseraError, UnsupportedOpError
from tessera.frontend.onnx import from_onnx
from tessera.graph import DeferredGraph

from onnx_family_check import one_node

RNG = np.random.default_rng(15)


def ort_run(m, feeds):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def same_as_ort(exe, m, feeds, rtol=1e-5, atol=1e-6):
    got = exe.run(feeds)
    want = ort_run(m, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def compiled(m):
    graph, params = from_onnx(m)
    assert isinstance(graph, DeferredGraph), graph
    return tessera.compile(graph, params)


def test_reduction_axes_from_a_runtime_input_decide_the_axis():
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    m = one_node("ReduceL2", {"x": x, "axes": np.array([1], np.int64)}, dict(keepdims=0), opset=18,
                 shapes={"axes": ["k"]})
    exe = compiled(m)
    assert exe.input_names == ["x", "axes"] and exe.value_inputs == ("axes",)
    shapes = []
    for axes in ([1], [0, 2], [-1], [1]):
        (y,) = same_as_ort(exe, m, {"x": x, "axes": np.array(axes, np.int64)})
        shapes.append(y.shape)
    assert shapes == [(3, 5), (4,), (3, 4), (3, 5)]
    assert exe.specializations == 3                  # [1] again reuses its compiled graph


def test_reshape_shape_from_a_runtime_input_decides_the_shape_and_the_rank():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    m = one_node("Reshape", {"x": x, "shape": np.array([6, 4], np.int64)}, opset=14,
                 shapes={"shape": ["n"]})
    exe = compiled(m)
    for shape in ([6, 4], [4, -1], [2, 0, 2, 2], [24]):
        (y,) = same_as_ort(exe, m, {"x": x, "shape": np.array(shape, np.int64)})
    assert y.shape == (24,)
    with pytest.raises(TesseraError, match="Reshape|reshape"):
        exe.run({"x": x, "shape": np.array([5, 5], np.int64)})


def test_cumsum_axis_and_trilu_k_from_runtime_inputs():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    m = one_node("CumSum", {"x": x, "axis": np.array(0, np.int64)}, opset=14)
    exe = compiled(m)
    for axis in (0, 1, -1):
        same_as_ort(exe, m, {"x": x, "axis": np.array(axis, np.int64)})
    m = one_node("Trilu", {"x": x, "k": np.array(0, np.int64)}, dict(upper=0), opset=14)
    exe = compiled(m)
    for k in (0, 1, -2, 5):
        same_as_ort(exe, m, {"x": x, "k": np.array(k, np.int64)})


def test_resize_scales_or_sizes_from_runtime_inputs():
    x = RNG.standard_normal((1, 1, 4, 4)).astype(np.float32)
    m = one_node("Resize", {"x": x, "": None, "scales": np.array([1, 1, 2, 2], np.float32)},
                 dict(mode="linear"), opset=19)
    exe = compiled(m)
    for scales in ([1, 1, 2, 2], [1, 1, 0.5, 1.5]):
        same_as_ort(exe, m, {"x": x, "scales": np.array(scales, np.float32)})
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest")], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, [1, 1, 4, 4]), helper.make_tensor_value_info("sizes", TP.INT64, [4])],
        [helper.make_empty_tensor_value_info("y")]), opset_imports=[helper.make_opsetid("", 19)])
    exe = compiled(m)
    for sizes in ([1, 1, 3, 5], [1, 1, 8, 2]):
        same_as_ort(exe, m, {"x": x, "sizes": np.array(sizes, np.int64)})


def test_two_inputs_that_decide_the_graph_are_both_learned():
    """Slice's starts and ends are both runtime inputs: the first build needs one, then the other."""
    x = RNG.standard_normal((5, 6)).astype(np.float32)
    m = one_node("Slice", {"x": x, "starts": np.array([1, 0], np.int64), "ends": np.array([4, 5], np.int64)},
                 opset=13)
    exe = compiled(m)
    same_as_ort(exe, m, {"x": x, "starts": np.array([1, 0], np.int64), "ends": np.array([4, 5], np.int64)})
    assert set(exe.value_inputs) == {"starts", "ends"}
    same_as_ort(exe, m, {"x": x, "starts": np.array([1, 0], np.int64), "ends": np.array([3, 6], np.int64)})
    assert exe.specializations == 2


def test_if_condition_from_a_runtime_input_picks_the_branch():
    def branch(name, op):
        return helper.make_graph([helper.make_node(op, ["x", "x"], [name + "_y"])], name, [],
                                 [helper.make_tensor_value_info(name + "_y", TP.FLOAT, [3])])

    m = helper.make_model(helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=branch("then", "Add"), else_branch=branch("else", "Mul"))],
        "g", [helper.make_tensor_value_info("cond", TP.BOOL, []), helper.make_tensor_value_info("x", TP.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [3])]), opset_imports=[helper.make_opsetid("", 17)])
    exe = compiled(m)
    x = np.array([1.0, 2.0, -3.0], np.float32)
    for cond in (True, False, True):
        same_as_ort(exe, m, {"cond": np.array(cond), "x": x})
    assert exe.specializations == 2
    assert [n.op for n in exe.specialization({"cond": np.array(False), "x": x}).graph.nodes] == ["multiply"]


def test_deferred_inputs_are_checked_and_the_refusal_stays_available():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    m = one_node("ReduceSum", {"x": x, "axes": np.array([1], np.int64)}, opset=13)
    with pytest.raises(UnsupportedOpError, match="const_inputs") as e:
        from_onnx(m, specialize=False)
    assert e.value.needs_constant == "axes"
    exe = compiled(m)
    with pytest.raises(ShapeError, match="'x'"):
        exe.run({"x": x[:2, :2].copy(), "axes": np.array([1], np.int64)})      # x is float32[3, 4]
    with pytest.raises(TesseraError, match="missing"):
        exe.run({"x": x})
    with pytest.raises(TesseraError, match="per value"):
        exe.export_library("/tmp/never.so")
    np.testing.assert_allclose(exe(x, np.array([0], np.int64)), x.sum(0, keepdims=True), rtol=1e-5)


def test_specializations_beyond_the_limit_drop_the_least_recently_used():
    x = RNG.standard_normal((4, 4)).astype(np.float32)
    m = one_node("Trilu", {"x": x, "k": np.array(0, np.int64)}, opset=14)
    exe = compiled(m)
    exe.max_specializations = 2
    for k in (0, 1, 2, 0):
        same_as_ort(exe, m, {"x": x, "k": np.array(k, np.int64)})
    assert exe.specializations == 2


def test_a_value_computed_from_a_dynamic_axis_is_built_per_input_shape():
    """Shape(x) * 2 (arithmetic the frontend does not track symbolically) decides ConstantOfShape's
    shape: the graph is built per distinct shape of x."""
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Mul", ["s", "two"], ["s2"]),
         helper.make_node("ConstantOfShape", ["s2"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, ["a", "b"])], [helper.make_empty_tensor_value_info("z")],
        initializer=[helper.make_tensor("two", TP.INT64, [], [2])]), opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match="symbolic shape") as e:
        from_onnx(m, specialize=False)
    assert e.value.needs_shape == ("x",)
    graph, params = from_onnx(m)
    assert isinstance(graph, DeferredGraph) and graph.shape_inputs == ("x",) and not graph.value_inputs
    exe = tessera.compile(graph, params)
    for shape in ((2, 3), (1, 5), (2, 3)):
        (z,) = same_as_ort(exe, m, {"x": np.ones(shape, np.float32)})
        assert z.shape == (2 * shape[0], 2 * shape[1])
    assert exe.specializations == 2
