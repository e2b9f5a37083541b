"""The pass pipeline: opt levels, disabled passes, and whole models through tessera.compile against
onnxruntime at every level."""
import numpy as np
import pytest

import tessera
from tessera.errors import TesseraError
from tessera.graph import Builder
from tessera.graph.passes import PIPELINE, optimize, pass_names, passes_for

rng = np.random.default_rng(3)


def rand(*shape):
    return rng.standard_normal(shape).astype("float32")


def names(level, disabled=()):
    return [p.name for p in passes_for(level, disabled)]


def test_opt_levels_choose_the_passes():
    assert names(0) == []
    assert names(1) == ["fake_quantization_to_integer", "fold_constant", "simplify_inference", "fold_constant",
                        "dead_code_elimination"]
    assert names(2) == ["fake_quantization_to_integer", "fold_constant", "simplify_inference", "fold_constant",
                        "eliminate_common_subexpr", "lookup_table", "dead_code_elimination", "fuse_ops"]
    three = names(3)
    assert three[-1] == "fuse_ops"
    has_layout = any(p.name == "alter_layout" and p.fn is not None for p in PIPELINE)
    assert ("alter_layout" in three) == has_layout
    assert names(2, ["fuse_ops"])[-1] == "dead_code_elimination"
    assert "fold_constant" not in names(2, "fold_constant")
    assert set(pass_names()) >= {"fold_constant", "simplify_inference", "eliminate_common_subexpr",
                                 "dead_code_elimination", "fuse_ops", "alter_layout"}


def test_bad_levels_and_pass_names_are_refused():
    gb = Builder()
    x = gb.input("x", (2,))
    gb.output(gb.op("exp", x))
    g = gb.finish()
    with pytest.raises(TesseraError, match="opt_level must be an int from 0 to 3"):
        optimize(g, 4)
    with pytest.raises(TesseraError, match=r"unknown passes \['fuse'\]"):
        tessera.compile(g, disabled_passes=["fuse"])
    with pytest.raises(TesseraError, match="takes a tessera.graph.Graph"):
        optimize("graph")


def small_cnn():
    gb = Builder("cnn")
    x = gb.input("x", (1, 3, 16, 16))
    h = gb.op("nn.conv2d", x, gb.const(rand(8, 3, 3, 3) * 0.3, "c1.w"), padding=(1, 1, 1, 1), name="c1")
    h = gb.op("nn.batch_norm", h, gb.const(rand(8), "g"), gb.const(rand(8), "b"), gb.const(rand(8), "m"),
              gb.const(np.abs(rand(8)) + 0.5, "v"), name="bn1")
    h = gb.op("nn.relu", h, name="r1")
    skip = h
    h = gb.op("nn.conv2d", h, gb.const(rand(8, 8, 3, 3) * 0.2, "c2.w"), padding=(1, 1, 1, 1), name="c2")
    h = gb.op("add", h, gb.const(rand(8, 1, 1), "c2.b"), name="c2b")
    h = gb.op("nn.relu", gb.op("add", h, skip, name="res"), name="r2")
    h = gb.op("mean", h, axis=(2, 3), name="gap")
    gb.output(gb.op("nn.dense", h, gb.const(rand(5, 8), "fc.w"), name="fc"))
    return gb.finish()


@pytest.fixture(scope="module")
def cnn_levels():
    g = small_cnn()
    return g, {lvl: tessera.compile(g, opt_level=lvl) for lvl in (0, 1, 2)}


def test_levels_give_the_same_outputs(cnn_levels):
    g, exes = cnn_levels
    x = rand(1, 3, 16, 16)
    ref = exes[0](x)
    for lvl in (1, 2):
        np.testing.assert_allclose(exes[lvl](x), ref, rtol=1e-4, atol=1e-5)
    assert "nn.batch_norm" in exes[0].graph.op_counts()
    assert "nn.batch_norm" not in exes[1].graph.op_counts()
    assert exes[1].graph.op_counts()["nn.conv2d"] == 2
    fused = exes[2].graph.functions
    assert [f.name for f in fused] == ["fused_nn_conv2d_add_nn_relu", "fused_nn_conv2d_add_add_nn_relu"]
    assert "@fused_nn_conv2d_add_nn_relu(%x" in exes[2].graph.script()


def test_disabled_fuse_ops_is_the_fusion_ablation(cnn_levels):
    g, exes = cnn_levels
    nofuse = tessera.compile(g, opt_level=2, disabled_passes=["fuse_ops"])
    assert "fused" not in nofuse.graph.op_counts()
    assert len(nofuse.graph.nodes) == len(exes[1].graph.nodes)
    x = rand(1, 3, 16, 16)
    np.testing.assert_allclose(nofuse(x), exes[2](x), rtol=1e-4, atol=1e-5)


def test_profile_names_fused_kernels(cnn_levels):
    _, exes = cnn_levels
    rep = exes[2].profile({"x": rand(1, 3, 16, 16)}, number=1, repeat=1, show=False)
    assert [r.op for r in rep.rows][:2] == ["fused_nn_conv2d_add_nn_relu", "fused_nn_conv2d_add_add_nn_relu"]


def onnx_cnn():
    """Conv(+bias) -> BatchNormalization -> Relu -> Conv -> Add(residual) -> Relu -> GAP -> Gemm."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    r = np.random.default_rng(7)

    def init(name, *shape, positive=False):
        a = r.standard_normal(shape).astype("float32") * 0.3
        return numpy_helper.from_array(np.abs(a) + 0.5 if positive else a, name)

    inits = [init("w1", 8, 3, 3, 3), init("b1", 8), init("g", 8), init("beta", 8), init("mu", 8),
             init("var", 8, positive=True), init("w2", 8, 8, 3, 3), init("fc", 8, 4), init("fcb", 4)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g", "beta", "mu", "var"], ["bn"], epsilon=1e-5),
        helper.make_node("Relu", ["bn"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["res"]),
        helper.make_node("Relu", ["res"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc", "fcb"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "onnx_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 14, 14])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_onnx_cnn_matches_onnxruntime_at_every_level():
    ort = pytest.importorskip("onnxruntime")
    model = onnx_cnn()
    x = rand(1, 3, 14, 14)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    graph, params = tessera.frontend.from_onnx(model)
    for lvl in (0, 1, 2, 3):
        exe = tessera.compile(graph, params, opt_level=lvl)
        np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=1e-4, err_msg=f"opt_level {lvl}")
        if lvl >= 2:
            assert "nn.batch_norm" not in exe.graph.script()
            # (level 3 may have the conv in a blocked layout: nn.contrib_conv2d_NCHWc)
            assert any("conv2d" in f.ops[0] and f.ops[1:3] == ("add", "nn.relu") for f in exe.graph.functions)
