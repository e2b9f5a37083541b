"""Concat along a symbolic axis (a KV cache's past + new positions): compiled once, the result's extent is
the symbol of the sum, which an exporter's "past + new" dim_param names too."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.errors import ShapeError
from tessera.frontend import from_onnx


def _model():
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, "past", 3])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, "new", 3])
    m = helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, "past + new", 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "past + new", 3])
    nodes = [helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
             helper.make_node("Mul", ["cat", "m"], ["y"])]
    g = helper.make_graph(nodes, "symbolic_concat", [a, b, m], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_concat_of_symbolic_extents_compiles_once_and_matches_numpy_at_every_length():
    graph, params = from_onnx(_model())
    assert graph.outputs[0].type.shape == (2, "new_plus_past", 3)
    exe = tessera.compile(graph, params)
    rng = np.random.default_rng(0)
    for past, new in [(3, 2), (0, 4), (7, 1), (0, 0)]:
        a = rng.standard_normal((2, past, 3)).astype(np.float32)
        b = rng.standard_normal((2, new, 3)).astype(np.float32)
        m = rng.standard_normal((2, past + new, 1)).astype(np.float32)
        (y,) = exe.run({"a": a, "b": b, "m": m})
        np.testing.assert_array_equal(y, np.concatenate([a, b], 1) * m)


def test_a_length_that_is_not_the_sum_is_refused():
    exe = tessera.compile(*from_onnx(_model()))
    a, b = np.zeros((2, 3, 3), np.float32), np.zeros((2, 2, 3), np.float32)
    with pytest.raises(ShapeError, match="new_plus_past"):
        exe.run({"a": a, "b": b, "m": np.zeros((2, 4, 1), np.float32)})
