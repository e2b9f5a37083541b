"""Shapes computed from dynamic axes: Slice(table, 0, Shape(x)[1]) becomes a prefix_slice and
Range(0, Shape(x)[1], 1) an arange whose extent is the symbol of x's axis; the graph compiles once and
runs at any length (checked against onnxruntime), and a length beyond the table is a ShapeError, not a
read past it. The whole models (BERT-base and GPT-2 with dynamic batch and sequence) are in
test_dynamic_models.py (slow)."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import tessera
from tessera.errors import ShapeError
from tessera.frontend.onnx import from_onnx

RNG = np.random.default_rng(1515)
TABLE = RNG.standard_normal((16, 8)).astype(np.float32)


def _model():
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),                 # a 0-d symbol
        helper.make_node("Unsqueeze", ["seq", "zero1"], ["seq1"]),
        helper.make_node("Sub", ["seq1", "seq1"], ["start"]),                           # s - s: 0
        helper.make_node("Slice", ["table", "start", "seq1", "zero1"], ["rows"]),       # table[:seq]
        helper.make_node("Add", ["x", "rows"], ["y"]),
        helper.make_node("Range", ["zero", "seq", "one"], ["pos"]),                     # arange(seq)
        helper.make_node("Gather", ["table", "pos"], ["g"], axis=0),
        helper.make_node("Mul", ["x", "g"], ["z"]),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["batch", "seq", 8])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None),
                           helper.make_tensor_value_info("z", TP.FLOAT, None)],
                          initializer=[numpy_helper.from_array(TABLE, "table"), i64("one", 1), i64("zero", 0),
                                       i64("zero1", [0])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_slice_and_range_to_a_dynamic_axis_compile_once_and_run_at_every_length():
    m = _model()
    graph, params = from_onnx(m)
    ops = [n.op for n in graph.nodes]
    assert "prefix_slice" in ops and "arange" in ops
    exe = tessera.compile(graph, params)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch, seq in [(1, 3), (2, 16), (3, 1), (1, 9)]:
        x = RNG.standard_normal((batch, seq, 8)).astype(np.float32)
        got, want = exe.run({"x": x}), sess.run(None, {"x": x})
        for g, w in zip(got, want):
            assert g.shape == w.shape == (batch, seq, 8)
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    with pytest.raises(ShapeError, match="seq = 17"):
        exe.run({"x": np.zeros((1, 17, 8), np.float32)})
