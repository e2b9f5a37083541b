"""Whole models through `tessera.compile(graph, params, target="opencl")` (the default GPU schedule
of every kernel, the graph executor over OpenCL modules) against ONNX Runtime; the same graph's
kernels compiled by nvcc for "cuda". ResNet-18 and BERT-base at full size are slow tests."""
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import tessera
from tessera.runtime import opencl as rt

_OK, _WHY = rt.usable()
needs_opencl = pytest.mark.skipif(not _OK, reason=f"OpenCL is not usable here: {_WHY}")
RNG = np.random.default_rng(3)


def _mlp():
    """y = softmax(relu(x @ W1 + b1) @ W2 + b2), x: [5, 24] (sizes off every work-group size)."""
    w1, b1 = RNG.standard_normal((24, 40)).astype("float32"), RNG.standard_normal(40).astype("float32")
    w2, b2 = RNG.standard_normal((40, 10)).astype("float32"), RNG.standard_normal(10).astype("float32")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h2"]), helper.make_node("MatMul", ["h2", "w2"], ["h3"]),
             helper.make_node("Add", ["h3", "b2"], ["h4"]), helper.make_node("Softmax", ["h4"], ["y"], axis=-1)]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TP.FLOAT, [5, 24])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [5, 10])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _gemm_model(batch=32):
    """y = softmax(relu(x @ W + b) @ W2) with x: [32, 48]: GEMMs big enough for the shared-memory
    default schedule, then a softmax."""
    w, b = RNG.standard_normal((48, 72)).astype("float32"), RNG.standard_normal(72).astype("float32")
    w2 = RNG.standard_normal((72, 20)).astype("float32")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h0"]), helper.make_node("Add", ["h0", "b"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h2"]), helper.make_node("MatMul", ["h2", "w2"], ["h3"]),
             helper.make_node("Softmax", ["h3"], ["y"], axis=-1)]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (b, "b"), (w2, "w2"))]
    g = helper.make_graph(nodes, "gemms", [helper.make_tensor_value_info("x", TP.FLOAT, [batch, 48])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [batch, 20])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _check(model, inputs, target, atol):
    graph, params = tessera.frontend.from_onnx(model)
    exe = tessera.compile(graph, params, target=target)
    got = exe.run(inputs)
    want = ort.InferenceSession(model.SerializeToString()).run(None, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=atol)
    return exe


@needs_opencl
@pytest.mark.slow
def test_mlp_on_opencl_matches_onnxruntime():
    _check(_mlp(), {"x": RNG.standard_normal((5, 24)).astype("float32")}, "opencl", 1e-5)


@needs_opencl
def test_gemms_take_the_shared_memory_default_schedule():
    model = _gemm_model()
    exe = _check(model, {"x": RNG.standard_normal((32, 48)).astype("float32")}, "opencl", 1e-5)
    sources = [st.kernel.module.get_source() for st in exe.steps if not st.host]
    assert any("__local float" in s and "barrier(CLK_LOCAL_MEM_FENCE)" in s for s in sources)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
def test_mlp_kernels_compile_for_cuda():
    graph, params = tessera.frontend.from_onnx(_mlp())
    exe = tessera.compile(graph, params, target="cuda")
    mods = {st.kernel.module for st in exe.steps if not st.host}
    assert mods and all(m.ptxas for m in mods)
    src = next(iter(mods)).get_source()
    assert '__global__' in src


def _zoo(name, atol, **opts):
    model = tessera.zoo.get_model(name, **opts)
    _check(model, tessera.zoo.sample_input(name, **opts), "opencl", atol)


@needs_opencl
@pytest.mark.slow
def test_resnet18_small_images_on_opencl():
    _zoo("resnet18", 1e-4, image_size=32)


@needs_opencl
@pytest.mark.slow
def test_resnet18_on_opencl_matches_onnxruntime():
    _zoo("resnet18", 1e-4)


@needs_opencl
@pytest.mark.slow
def test_bert_base_on_opencl_matches_onnxruntime():
    _zoo("bert_base", 1e-4)
