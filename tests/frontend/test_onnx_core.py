"""The ONNX frontend core: inputs, initializers, dtypes, constants, shapes, errors, check_model."""
import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import tessera
from tessera.errors import ShapeError, TesseraError, UnsupportedOpError
from tessera.frontend.onnx import check_model, from_onnx, sanitize_name

T = "tessera.test"
RNG = np.random.default_rng(3)


def model(nodes, inputs, outputs, initializers=(), opset=17, test_domain=True, **kw):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers), **kw)
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(T, 1)] if test_domain else [])
    return helper.make_model(g, opset_imports=ops)


def vi(name, dtype=TP.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def ort_run(m, feeds):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def tessera_run(m, feeds, **kw):
    graph, params = from_onnx(m, **kw)
    return tessera.compile(graph, params).run(feeds)


# ------------------------------------------------------------------------------------------
# constants and shapes, checked against onnxruntime
# ------------------------------------------------------------------------------------------
CONSTANT_FORMS = {
    "value": dict(value=numpy_helper.from_array(np.arange(6, dtype=np.int32).reshape(2, 3), "v")),
    "value_float": dict(value_float=2.5),
    "value_floats": dict(value_floats=[1.0, -2.0, 3.5]),
    "value_int": dict(value_int=-7),
    "value_ints": dict(value_ints=[4, 5, 6]),
    "value_bf16": dict(value=numpy_helper.from_array(np.array([1.5, -2], dtype=ml_dtypes.bfloat16), "v")),
}


@pytest.mark.parametrize("form", sorted(CONSTANT_FORMS))
def test_constant_attribute_forms(form):
    m = model([helper.make_node("Constant", [], ["c"], **CONSTANT_FORMS[form])], [], [vi("c", TP.UNDEFINED)],
              test_domain=False)
    (got,) = tessera_run(m, {})
    if form == "value_bf16":   # onnxruntime has no bfloat16 Constant kernel
        want = np.array([1.5, -2], dtype=ml_dtypes.bfloat16)
    else:
        (want,) = ort_run(m, {})
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_sparse_constant_is_densified():
    sp = helper.make_sparse_tensor(numpy_helper.from_array(np.array([3.0, 4.0], np.float32), "v"),
                                   numpy_helper.from_array(np.array([1, 5], np.int64), "i"), [2, 3])
    m = model([helper.make_node("Constant", [], ["c"], sparse_value=sp)], [], [vi("c")])
    (got,) = tessera_run(m, {})
    np.testing.assert_array_equal(got, [[0, 3, 0], [0, 0, 4]])


def test_string_constant_is_unsupported_with_the_node_named():
    m = model([helper.make_node("Constant", [], ["c"], name="words", value_strings=["a"])], [], [vi("c")])
    with pytest.raises(UnsupportedOpError, match=r"'Constant' \(node 'words'\): opset 17: string"):
        from_onnx(m)


@pytest.mark.parametrize("start,end", [(None, None), (1, None), (-2, None), (0, -1), (5, 9), (2, 1)])
def test_shape_with_start_end_matches_onnxruntime(start, end):
    kw = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    m = model([helper.make_node("Shape", ["x"], ["s"], **kw)], [vi("x", shape=[2, 3, 4])], [vi("s", TP.INT64)],
              opset=15, test_domain=False)
    x = np.zeros((2, 3, 4), np.float32)
    (got,), (want,) = tessera_run(m, {"x": x}), ort_run(m, {"x": x})
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_symbolic_shape_and_size_are_computed_at_run_time():
    m = model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Size", ["x"], ["n"])],
              [vi("x", shape=["batch", 3])], [vi("s", TP.INT64), vi("n", TP.INT64)], test_domain=False)
    graph, params = from_onnx(m)
    assert graph.inputs[0].shape == ("batch", 3)
    exe = tessera.compile(graph, params)
    for b in (1, 6):
        x = np.zeros((b, 3), np.float32)
        got, want = exe.run({"x": x}), ort_run(m, {"x": x})
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)


def test_constant_of_shape_from_a_static_shape_subgraph_folds_away():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["z"],
                              value=numpy_helper.from_array(np.array([7], np.int64), "v"))]
    m = model(nodes, [vi("x", shape=[2, 5])], [vi("z", TP.INT64)], test_domain=False)
    graph, params = from_onnx(m)
    assert graph.nodes == () and len(graph.constants) == 1
    x = np.zeros((2, 5), np.float32)
    np.testing.assert_array_equal(tessera_run(m, {"x": x})[0], ort_run(m, {"x": x})[0])


def test_constant_of_shape_default_value_and_scalar_shape():
    m = model([helper.make_node("Constant", [], ["e"], value=numpy_helper.from_array(np.zeros(0, np.int64), "v")),
               helper.make_node("ConstantOfShape", ["e"], ["z"])], [], [vi("z")], test_domain=False)
    (got,), (want,) = tessera_run(m, {}), ort_run(m, {})
    assert got.shape == want.shape == () and got.dtype == want.dtype == np.float32


# ------------------------------------------------------------------------------------------
# constant propagation through tessera kernels, and needs_constant
# ------------------------------------------------------------------------------------------
def test_const_input_evaluates_a_constant_subgraph_with_tessera():
    # shape = Shape(x) + [1, 1] (a tessera 'add' kernel runs while converting); z = zeros(shape)
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Constant", [], ["one"], value_ints=[1, 1]),
             helper.make_node("TAdd", ["s", "one"], ["s1"], domain=T),
             helper.make_node("ConstantOfShape", ["s1"], ["z"])]
    m = model(nodes, [vi("x", shape=[2, 3])], [vi("z")])
    graph, _ = from_onnx(m)
    assert graph.nodes == ()                     # the shape subgraph is dead once evaluated
    (z,) = tessera.compile(graph).run({"x": np.zeros((2, 3), np.float32)})
    assert z.shape == (3, 4)


def test_a_value_from_a_runtime_input_reports_needs_constant_and_can_be_frozen():
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["z"], name="fill")]
    m = model(nodes, [vi("shape", TP.INT64, [2])], [vi("z")], test_domain=False)
    with pytest.raises(UnsupportedOpError, match="runtime input 'shape'.*const_inputs") as e:
        from_onnx(m, specialize=False)
    assert e.value.needs_constant == "shape"
    assert "fill" in str(e.value) and "ConstantOfShape" in str(e.value)
    graph, params = from_onnx(m, const_inputs={"shape": np.array([2, 4], np.int64)})
    assert graph.inputs == ()
    (z,) = tessera.compile(graph, params).run({})
    np.testing.assert_array_equal(z, np.zeros((2, 4), np.float32))


def test_needs_constant_through_a_subgraph_names_the_input():
    nodes = [helper.make_node("TAdd", ["shape", "shape"], ["s2"], domain=T),
             helper.make_node("ConstantOfShape", ["s2"], ["z"])]
    m = model(nodes, [vi("shape", TP.INT64, [2])], [vi("z")])
    with pytest.raises(UnsupportedOpError, match="depends on the runtime input 'shape'") as e:
        from_onnx(m, specialize=False)
    assert e.value.needs_constant == "shape"


# ------------------------------------------------------------------------------------------
# inputs, initializers, params
# ------------------------------------------------------------------------------------------
def test_initializers_become_params_and_graph_inputs_with_initializers_are_not_runtime_inputs():
    w = RNG.standard_normal((2, 3)).astype(np.float32)
    b = RNG.standard_normal((2, 3)).astype(np.float32)
    unused = np.ones(4, np.float32)
    nodes = [helper.make_node("TAdd", ["x", "w"], ["y"], domain=T),
             helper.make_node("TAdd", ["y", "b"], ["z"], domain=T)]
    m = model(nodes, [vi("x", shape=[2, 3]), vi("w", shape=[2, 3])], [vi("z")],
              initializers=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
                            numpy_helper.from_array(unused, "unused")])
    graph, params = from_onnx(m)
    assert sorted(params) == ["b", "w"]           # the unused initializer is dropped
    np.testing.assert_array_equal(params["w"], w)
    exe = tessera.compile(graph, params)
    assert [v.name for v in exe.graph.inputs] == ["x"]
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(exe(x), x + w + b, rtol=1e-6)
    # without params, the weights are inputs too (TVM's convention)
    assert [v.name for v in graph.inputs] == ["x", "w", "b"]


def test_symbolic_dims_are_sanitized_and_shape_dict_overrides():
    m = model([helper.make_node("TCopy", ["in:0"], ["out/0"], domain=T)],
              [vi("in:0", shape=["batch size", 4, None])], [vi("out/0")])
    graph, _ = from_onnx(m)
    x = graph.inputs[0]
    assert x.name == "in_0" and x.shape[0] == "batch_size" and x.shape[1] == 4
    assert isinstance(x.shape[2], str)
    assert graph.outputs[0].name == "out_0"
    graph2, _ = from_onnx(m, shape_dict={"in:0": (2, 4, 5)})
    assert graph2.inputs[0].shape == (2, 4, 5)
    with pytest.raises(TesseraError, match=r"shape_dict names \['nope'\]"):
        from_onnx(m, shape_dict={"nope": (1,)})


def test_input_without_shape_needs_shape_dict():
    m = model([helper.make_node("TCopy", ["x"], ["y"], domain=T)], [vi("x", shape=None)], [vi("y")])
    with pytest.raises(ShapeError, match="shape_dict"):
        from_onnx(m)
    graph, _ = from_onnx(m, shape_dict={"x": (3,)})
    np.testing.assert_array_equal(tessera.compile(graph)(np.ones(3, np.float32)), np.ones(3))


DTYPES = {TP.BOOL: np.bool_, TP.INT8: np.int8, TP.INT16: np.int16, TP.INT32: np.int32, TP.INT64: np.int64,
          TP.UINT8: np.uint8, TP.UINT16: np.uint16, TP.UINT32: np.uint32, TP.UINT64: np.uint64,
          TP.FLOAT16: np.float16, TP.BFLOAT16: ml_dtypes.bfloat16, TP.FLOAT: np.float32, TP.DOUBLE: np.float64}


def test_every_tessera_dtype_goes_in_and_out():
    names = [f"x{k}" for k in DTYPES]
    nodes = [helper.make_node("TCopy", [n], [n + "_out"], domain=T) for n in names]
    m = model(nodes, [vi(n, k, [3]) for n, k in zip(names, DTYPES)],
              [vi(n + "_out", k, [3]) for n, k in zip(names, DTYPES)])
    graph, _ = from_onnx(m)
    feeds = {n: (np.array([1, 0, 3]).astype(d)) for n, d in zip(names, DTYPES.values())}
    outs = tessera.compile(graph).run(feeds)
    for n, d, o in zip(names, DTYPES.values(), outs):
        assert o.dtype == np.dtype(d), n
        np.testing.assert_array_equal(o, feeds[n])


@pytest.mark.parametrize("elem", [TP.STRING, TP.COMPLEX64, TP.FLOAT8E8M0])
def test_unsupported_input_dtypes_are_named(elem):
    m = model([helper.make_node("TCopy", ["x"], ["y"], domain=T)], [vi("x", elem, [2])], [vi("y", elem)])
    name = onnx.helper.tensor_dtype_to_string(elem).split(".")[-1]
    with pytest.raises(UnsupportedOpError, match=f"input 'x'.*{name}"):
        from_onnx(m)


def test_unsupported_initializer_dtype_fails_only_when_read():
    f8 = helper.make_tensor("f8", TP.FLOAT8E8M0, [2], [1.0, 2.0])
    ok = model([helper.make_node("TCopy", ["x"], ["y"], domain=T)], [vi("x", shape=[2])], [vi("y")],
               initializers=[f8])
    from_onnx(ok)
    bad = model([helper.make_node("TCopy", ["f8"], ["y"], domain=T, name="reader")], [], [vi("y")],
                initializers=[f8])
    with pytest.raises(UnsupportedOpError, match="reader.*FLOAT8E8M0"):
        from_onnx(bad)


# ------------------------------------------------------------------------------------------
# outputs, names, errors
# ------------------------------------------------------------------------------------------
def test_multi_output_and_omitted_optional_inputs_and_outputs():
    nodes = [helper.make_node("TPair", ["x", ""], ["", "neg"], domain=T),
             helper.make_node("TPair", ["x", "neg"], ["sum", "neg2"], domain=T)]
    m = model(nodes, [vi("x", shape=[3])], [vi("neg"), vi("sum"), vi("neg2")])
    x = np.array([1, 2, 3], np.float32)
    neg, s, neg2 = tessera_run(m, {"x": x})
    np.testing.assert_array_equal(neg, -x)
    np.testing.assert_array_equal(s, np.zeros(3))
    np.testing.assert_array_equal(neg2, -x)


def test_an_output_the_converter_did_not_produce_is_an_error_where_used():
    nodes = [helper.make_node("TFirstOnly", ["x"], ["a", "b"], domain=T, name="half"),
             helper.make_node("TCopy", ["b"], ["c"], domain=T, name="user")]
    m = model(nodes, [vi("x", shape=[3])], [vi("c")])
    with pytest.raises(TesseraError, match=r"'user'.*output 1 of node 'half'"):
        from_onnx(m)


def test_value_names_follow_onnx_names():
    assert sanitize_name("/encoder/layer.0/Add_output_0") == "encoder_layer.0_Add_output_0"
    nodes = [helper.make_node("TAdd", ["x", "x"], ["/blk/Add:0"], domain=T, name="/blk/Add")]
    m = model(nodes, [vi("x", shape=[2])], [vi("/blk/Add:0")])
    graph, _ = from_onnx(m)
    assert graph.outputs[0].name == "blk_Add_0"
    assert "%blk_Add_0 = add(%x, %x)" in graph.script()


def test_unsupported_op_names_type_node_and_opset():
    m = model([helper.make_node("FancyOp", ["x"], ["y"], name="fancy_1")], [vi("x", shape=[2])], [vi("y")],
              opset=13)
    with pytest.raises(UnsupportedOpError, match=r"'FancyOp' \(node 'fancy_1'\): opset 13: no converter") as e:
        from_onnx(m)
    assert e.value.op == "FancyOp" and e.value.node == "fancy_1" and e.value.opset == 13


def test_converter_refusal_and_converter_bug_both_name_the_node():
    m = model([helper.make_node("TRefuse", ["x"], ["y"], domain=T, name="r", mode="wild")],
              [vi("x", shape=[2])], [vi("y")])
    with pytest.raises(UnsupportedOpError, match=r"'TRefuse' \(node 'r'\): opset 1: mode='wild' is not"):
        from_onnx(m)
    m = model([helper.make_node("TBuggy", ["x"], ["y"], domain=T, name="b")], [vi("x", shape=[2])], [vi("y")])
    with pytest.raises(TesseraError, match=r"ONNX node 'b' \(TBuggy, opset 1\): the converter failed: KeyError"):
        from_onnx(m)


def test_check_model_lists_every_unsupported_node_at_once():
    nodes = [helper.make_node("FancyOp", ["x"], ["a"], name="f1"),
             helper.make_node("TCopy", ["a"], ["b"], domain=T, name="blocked"),     # downstream: skipped
             helper.make_node("TRefuse", ["x"], ["c"], domain=T, name="r", mode="m"),
             helper.make_node("Loop", ["", "", "x"], ["d"], name="loop"),
             helper.make_node("TCopy", ["x"], ["e"], domain=T, name="fine"),
             helper.make_node("OtherOp", ["b"], ["f"], name="f2")]
    m = model(nodes, [vi("x", shape=[2])], [vi("b"), vi("c"), vi("d"), vi("e"), vi("f")])
    problems = check_model(m)
    assert [(p.op_type, p.node) for p in problems] == [("FancyOp", "f1"), ("TRefuse", "r"), ("Loop", "loop"),
                                                       ("OtherOp", "f2")]
    assert problems[0].opset == 17 and problems[1].opset == 1
    assert "never ends" in problems[2].reason          # a Loop without trip count or condition
    assert check_model(model([helper.make_node("TCopy", ["x"], ["y"], domain=T)], [vi("x", shape=[2])],
                             [vi("y")])) == []


def test_model_local_functions_are_inlined():
    fn = helper.make_function("my.fns", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                              [helper.make_opsetid("", 17)])
    g = helper.make_graph([helper.make_node("Twice", ["x"], ["y"], domain="my.fns", name="tw")], "g",
                          [vi("x", shape=[2])], [vi("y")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.fns", 1)],
                          functions=[fn])
    x = np.array([1.5, -2.0], np.float32)
    (got,) = tessera_run(m, {"x": x})
    np.testing.assert_array_equal(got, ort_run(m, {"x": x})[0])


def test_loads_paths_and_bytes_and_refuses_other_things(tmp_path):
    m = model([helper.make_node("TCopy", ["x"], ["y"], domain=T)], [vi("x", shape=[2])], [vi("y")])
    p = tmp_path / "m.onnx"
    onnx.save(m, p)
    for src in (str(p), p, m.SerializeToString()):
        graph, _ = from_onnx(src)
        assert [v.name for v in graph.inputs] == ["x"]
    with pytest.raises(TesseraError, match="no such file"):
        from_onnx(str(tmp_path / "missing.onnx"))
    with pytest.raises(TesseraError, match="takes an onnx.ModelProto"):
        from_onnx(42)
    with pytest.raises(TesseraError, match="not an ONNX model"):
        from_onnx(b"\x00garbage\xff")


def test_opset_argument_overrides_the_default_domain():
    m = model([helper.make_node("Shape", ["x"], ["s"], start=1)], [vi("x", shape=[2, 3])], [vi("s", TP.INT64)],
              opset=15, test_domain=False)
    np.testing.assert_array_equal(tessera_run(m, {"x": np.zeros((2, 3), np.float32)})[0], [3])


def test_a_value_from_a_symbolic_shape_asks_for_shape_dict_not_a_frozen_input():
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ConstantOfShape", ["s"], ["z"], name="fill")]
    m = model(nodes, [vi("x", shape=["batch", 3])], [vi("z")], test_domain=False)
    with pytest.raises(UnsupportedOpError, match=r"symbolic shape of 'x': float32\[batch, 3\].*shape_dict") as e:
        from_onnx(m, specialize=False)
    assert e.value.needs_constant is None
    graph, _ = from_onnx(m, shape_dict={"x": (2, 3)})
    (z,) = tessera.compile(graph).run({"x": np.zeros((2, 3), np.float32)})
    np.testing.assert_array_equal(z, np.zeros((2, 3), np.float32))


def _shape_subgraph_nodes(reshape_op, domain=""):
    # target = Concat(Unsqueeze(Gather(Shape(x), 0)), [24]) for x: [N, 4, 6]; also Gather(Shape(x), 2) -> 6
    return [helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Constant", [], ["i0"], value=numpy_helper.from_array(np.array(0, np.int64))),
            helper.make_node("Constant", [], ["i2"], value=numpy_helper.from_array(np.array([2], np.int64))),
            helper.make_node("Constant", [], ["ax"], value=numpy_helper.from_array(np.array([0], np.int64))),
            helper.make_node("Constant", [], ["c24"], value=numpy_helper.from_array(np.array([24], np.int64))),
            helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
            helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
            helper.make_node("Concat", ["n1", "c24"], ["target"], axis=0),
            helper.make_node("Gather", ["s", "i2"], ["six"], axis=0),
            helper.make_node("ConstantOfShape", ["six"], ["z"]),
            helper.make_node(reshape_op, ["x", "target"], ["y"], domain=domain)]


def test_shape_values_with_symbolic_dims_fold_and_reach_shape_input():
    m = model(_shape_subgraph_nodes("TReshapeShape", T), [vi("x", shape=["N", 4, 6])], [vi("y"), vi("z")])
    graph, _ = from_onnx(m)
    assert graph.outputs[0].shape == ("N", 24)
    assert graph.outputs[1] in graph.constants           # Gather(Shape(x), 2) is the constant 6
    exe = tessera.compile(graph)
    for n in (1, 3):
        x = RNG.standard_normal((n, 4, 6)).astype(np.float32)
        y, z = exe.run({"x": x})
        np.testing.assert_array_equal(y, x.reshape(n, 24))
        np.testing.assert_array_equal(z, np.zeros(6, np.float32))
