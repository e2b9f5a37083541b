"""Helpers of the family converter tests: a one-node ONNX model, run through tessera and onnxruntime."""
import numpy as np
import onnxruntime as ort
from onnx import helper, numpy_helper

import tessera
from tessera.frontend.onnx import from_onnx


def one_node(op, inputs, attrs=None, inits=None, opset=17, outputs=("y",), shapes=None):
    """A model of one node; inputs: {name: array} runtime inputs ('' skips an optional input);
    inits: {name: array} initializers; shapes: {input name: shape with symbolic names}."""
    inits = inits or {}
    names = list(inputs) + list(inits)
    node = helper.make_node(op, names, list(outputs), **(attrs or {}))
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), (shapes or {}).get(n, a.shape))
           for n, a in inputs.items() if n]
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs if o]
    g = helper.make_graph([node], "g", ins, outs,
                          initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def run_tessera(m, feeds, **kw):
    """tessera's outputs (inputs frozen by const_inputs= are not fed again) and the graph."""
    graph, params = from_onnx(m, **kw)
    frozen = kw.get("const_inputs") or {}
    return tessera.compile(graph, params).run({k: v for k, v in feeds.items() if k and k not in frozen}), graph


def check(m, feeds, rtol=1e-5, atol=1e-6, want=None, **kw):
    """tessera's outputs against onnxruntime's (or `want`): values, shapes and dtypes."""
    got, graph = run_tessera(m, feeds, **kw)
    if want is None:
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        want = sess.run(None, {k: v for k, v in feeds.items() if k})
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)
    return graph
