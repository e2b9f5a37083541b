"""The ONNX frontend against hostile or malformed models (issue 27): external data resolved only
against a directory the caller names, limits on unrolled loops and on constants, duplicate tensor
definitions, unknown opsets, overridable initializers, dim_params that sanitize alike; and the
converter registry read once."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import tessera
from tessera.frontend import onnx_ops
from tessera.frontend.onnx import from_onnx

RNG = np.random.default_rng(27)


def vi(name, dtype=TP.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def model(nodes, inputs, outputs, initializers=(), opset=17, ir_version=None):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(initializers)),
                          opset_imports=[helper.make_opsetid("", opset)])
    if ir_version is not None:
        m.ir_version = ir_version
    return m


def ort_run(m, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def run(m, feeds, **kw):
    graph, params = from_onnx(m, **kw)
    return tessera.compile(graph, params).run(feeds)


# ---------------------------------------------------------------------------------------------
# the converter registry
# ---------------------------------------------------------------------------------------------
def test_converter_folder_is_scanned_once_not_per_node(monkeypatch):
    m = model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
               helper.make_node("Abs", ["b"], ["y"])], [vi("x", shape=[5])], [vi("y", shape=[5])])
    from_onnx(m)
    scans = []
    real = onnx_ops.pkgutil.iter_modules
    monkeypatch.setattr(onnx_ops.pkgutil, "iter_modules", lambda *a, **k: scans.append(a) or real(*a, **k))
    x = RNG.standard_normal(5).astype(np.float32)
    (y,) = run(m, {"x": x})
    assert scans == []
    np.testing.assert_allclose(y, ort_run(m, {"x": x})[0])
