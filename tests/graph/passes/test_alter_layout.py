"""alter_layout: convolutions in NCHW[x]c with weights packed at compile time, the blocked layout
carried through elementwise ops, broadcasts, pools and residual adds, activation transforms only at
the region boundaries; the same numbers as the NCHW graph and onnxruntime."""
import numpy as np
import pytest

import tessera
from tessera.graph import Builder
from tessera.graph.ir import FUSED_OP
from tessera.graph.passes import fold_constant, optimize
from tessera.graph.passes.alter_layout import alter_layout
from tessera.target import Target

rng = np.random.default_rng(21)
LANES = max(4, Target("c").vector_bits // 32)


def rand(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype("float32")


def all_nodes(graph):
    """The graph's nodes, the bodies of fused nodes included."""
    out = []
    for n in graph.nodes:
        out.extend(n.attrs["function"].body.nodes if n.op == FUSED_OP else [n])
    return out


def activation_transforms(graph):
    """layout_transform nodes that run on activations (not on constants)."""
    from tessera.graph.passes._rewrite import const_derived

    consts = const_derived(graph)
    out = []
    for n in graph.nodes:
        if n.op == FUSED_OP:
            out += [m for m in n.attrs["function"].body.nodes if m.op == "layout_transform"]
        elif n.op == "layout_transform" and n.inputs[0] not in consts:
            out.append(n)
    return out


def conv_chain(n_convs=4, channels=16, batch=1):
    gb = Builder("chain")
    h = gb.input("x", (batch, channels, 12, 12))
    for k in range(n_convs):
        h = gb.op("nn.conv2d", h, gb.const(rand(channels, channels, 3, 3, scale=0.2), f"w{k}"), padding=(1, 1, 1, 1))
        h = gb.op("add", h, gb.const(rand(channels, 1, 1), f"b{k}"))
        h = gb.op("nn.relu", h)
    gb.output(h)
    return gb.finish()


def assert_same(graph, x, rtol=1e-5, atol=1e-5, levels=(2, 3)):
    outs = [tessera.compile(graph, None, opt_level=lvl)(x) for lvl in levels]
    for o in outs[1:]:
        np.testing.assert_allclose(o, outs[0], rtol=rtol, atol=atol)
    return outs


def test_conv_chain_has_exactly_two_activation_layout_transforms():
    g = conv_chain()
    g2 = alter_layout(g, "c")
    assert [n.op for n in g2.nodes].count("nn.conv2d") == 0
    assert len([n for n in g2.nodes if n.op == "nn.contrib_conv2d_NCHWc"]) == 4
    moves = activation_transforms(g2)
    assert [(n.attrs["src_layout"], n.attrs["dst_layout"]) for n in moves] == \
        [("NCHW", f"NCHW{LANES if 16 % LANES == 0 else 8}c"), (f"NCHW{LANES if 16 % LANES == 0 else 8}c", "NCHW")]
    # the whole level-3 pipeline: still two, the weight and bias transforms folded into constants
    g3 = optimize(g, opt_level=3)
    assert len(activation_transforms(g3)) == 2
    assert not any(n.op == "layout_transform" and n.inputs[0] in g3.constants for n in g3.nodes)
    assert sorted(v.type.ndim for v in g3.constants) == [5] * 4 + [6] * 4    # blocked biases and weights
    assert_same(g, rand(1, 16, 12, 12))


def test_weights_are_packed_once_at_compile_time():
    g = conv_chain(n_convs=1)
    g3 = optimize(g, opt_level=3)
    (w,) = [v for v in g3.constants if v.type.ndim == 6]
    x = LANES if 16 % LANES == 0 else 8
    src = g.constants[[v for v in g.constants if v.name == "w0"][0]]
    want = src.reshape(16 // x, x, 16 // x, x, 3, 3).transpose(0, 2, 4, 5, 3, 1)
    np.testing.assert_array_equal(g3.constants[w], want)     # OIHW -> OIHW{x}i{x}o, done by fold_constant
    conv = [n for n in all_nodes(g3) if n.op == "nn.contrib_conv2d_NCHWc"]
    assert len(conv) == 1 and conv[0].attrs["kernel_layout"] == f"OIHW{x}i{x}o"


def small_cnn(batch=1):
    """RGB stem (7x7 s2) -> bias -> relu -> maxpool -> residual block -> depthwise -> clip -> avgpool
    -> 1x1 projection -> global pool -> flatten -> dense: every rule of the pass."""
    gb = Builder("cnn")
    x = gb.input("x", (batch, 3, 32, 32))
    h = gb.op("nn.conv2d", x, gb.const(rand(16, 3, 7, 7, scale=0.2), "stem"), strides=(2, 2), padding=(3, 3, 3, 3))
    h = gb.op("nn.relu", gb.op("add", h, gb.const(rand(16, 1, 1), "stem_b")))
    p = gb.op("nn.max_pool2d", h, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))
    h = gb.op("nn.conv2d", p, gb.const(rand(16, 16, 3, 3, scale=0.2), "c1"), padding=(1, 1, 1, 1))
    h = gb.op("nn.relu", gb.op("multiply", h, gb.const(rand(1, 16, 1, 1), "scale")))
    h = gb.op("nn.conv2d", h, gb.const(rand(16, 16, 3, 3, scale=0.2), "c2"), padding=(1, 1, 1, 1))
    h = gb.op("nn.relu", gb.op("add", h, p))                                   # residual add
    h = gb.op("nn.conv2d", h, gb.const(rand(16, 1, 3, 3), "dw"), padding=(1, 1, 1, 1), groups=16)
    h = gb.op("clip", gb.op("add", h, gb.const(np.float32(0.5), "half")), a_min=0.0, a_max=6.0)
    h = gb.op("nn.avg_pool2d", h, pool_size=(2, 2), strides=(2, 2))
    h = gb.op("nn.conv2d", h, gb.const(rand(32, 16, 1, 1, scale=0.3), "proj"))
    h = gb.op("nn.global_avg_pool", h)
    h = gb.op("reshape", h, newshape=(batch, 32))
    h = gb.op("nn.matmul", h, gb.const(rand(32, 10), "fc"))
    gb.output(h)
    return gb.finish()


def test_small_cnn_stays_blocked_from_stem_to_global_pool():
    g2 = alter_layout(small_cnn(), "c")
    ops = [n.op for n in g2.nodes]
    assert "nn.conv2d" not in ops
    assert ops.count("nn.contrib_depthwise_conv2d_NCHWc") == 1
    moves = activation_transforms(g2)
    # into the stem (RGB: blocks of 3 channels) and out after the global pool, nothing between
    assert [(n.attrs["src_layout"], n.attrs["dst_layout"]) for n in moves][0] == ("NCHW", "NCHW3c")
    assert len(moves) == 2 and moves[1].attrs["dst_layout"] == "NCHW"
    assert moves[1].inputs[0].producer.op == "nn.global_avg_pool"
    for n in g2.nodes:
        if n.op in ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool"):
            assert n.attrs["layout"].startswith("NCHW") and n.attrs["layout"].endswith("c")
    (res,) = [n for n in g2.nodes if n.op == "add" and all(v.type.ndim == 5 and v.type.shape[2] > 1
                                                             for v in n.inputs)]
    assert res.inputs[1].producer.op == "nn.max_pool2d"       # the residual add reads both blocked


def test_small_cnn_matches_the_nchw_graph_and_onnxruntime_numbers():
    g = small_cnn()
    x = rand(1, 3, 32, 32)
    o2, o3 = assert_same(g, x, rtol=1e-4, atol=1e-4)
    exe = tessera.compile(g, None, opt_level=3)
    assert "nn.contrib_conv2d_NCHWc" in exe.graph.script()


def test_symbolic_batch_runs_blocked():
    gb = Builder("sym")
    x = gb.input("x", ("N", 8, 10, 10))
    h = gb.op("nn.conv2d", x, gb.const(rand(8, 8, 3, 3, scale=0.3), "w"), padding=(1, 1, 1, 1))
    h = gb.op("nn.relu", gb.op("add", h, gb.const(rand(8, 1, 1), "b")))
    h = gb.op("nn.max_pool2d", h, pool_size=(2, 2), strides=(2, 2))
    gb.output(h)
    g = gb.finish()
    e2, e3 = tessera.compile(g, opt_level=2), tessera.compile(g, opt_level=3)
    assert "nn.contrib_conv2d_NCHWc" in e3.graph.script()
    for n in (1, 3):
        xv = rand(n, 8, 10, 10)
        np.testing.assert_allclose(e3(xv), e2(xv), rtol=1e-5, atol=1e-5)


def test_convs_that_do_not_fit_stay_nchw():
    gb = Builder("misfits")
    x = gb.input("x", (1, 8, 9, 9))
    w_rt = gb.input("w_rt", (8, 8, 3, 3))
    a = gb.op("nn.conv2d", x, gb.const(rand(12, 8, 3, 3), "odd_out"), padding=(1, 1, 1, 1))     # 12 channels
    b = gb.op("nn.conv2d", x, w_rt, padding=(1, 1, 1, 1))                                    # runtime weight
    c = gb.op("nn.conv2d", x, gb.const(rand(8, 4, 3, 3), "grouped"), padding=(1, 1, 1, 1), groups=2)
    gb.output(a, b, c)
    g = gb.finish()
    g2 = alter_layout(g, "c")
    assert [n.op for n in g2.nodes] == ["nn.conv2d"] * 3
    assert g2.script() == g.script()


def test_a_value_read_in_both_layouts_is_transformed_back_once():
    gb = Builder("both")
    x = gb.input("x", (1, 8, 8, 8))
    h = gb.op("nn.conv2d", x, gb.const(rand(8, 8, 3, 3, scale=0.3), "w"), padding=(1, 1, 1, 1))
    r = gb.op("nn.relu", h)
    s = gb.op("nn.softmax", h, axis=1)                  # needs NCHW
    gb.output(r, s, h)                                  # h is also a graph output
    g = gb.finish()
    g2 = alter_layout(g, "c")
    back = [n for n in activation_transforms(g2) if n.attrs["dst_layout"] == "NCHW"]
    assert len([n for n in back if n.inputs[0].producer.op == "nn.contrib_conv2d_NCHWc"]) == 1
    assert all(v.type.ndim == 4 for v in g2.outputs)
    xv = rand(1, 8, 8, 8)
    for a, b in zip(tessera.compile(g, opt_level=2).run({"x": xv}), tessera.compile(g, opt_level=3).run({"x": xv})):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_broadcast_operands_of_every_shape_follow_the_layout():
    gb = Builder("bcast")
    x = gb.input("x", (2, 16, 6, 6))
    full = gb.input("full", (2, 16, 6, 6))
    row = gb.input("row", (6,))                     # broadcast along W only
    h = gb.op("nn.conv2d", x, gb.const(rand(16, 16, 1, 1), "w"))
    h = gb.op("add", h, full)                       # full-size plain operand: blocked on the way in
    h = gb.op("multiply", h, row)
    h = gb.op("subtract", h, gb.const(rand(1, 16, 6, 1), "per_c_h"))
    h = gb.op("maximum", h, gb.const(np.float32(0.1), "floor"))
    gb.output(h)
    g = gb.finish()
    g2 = alter_layout(g, "c")
    assert all(n.outputs[0].type.ndim == 5 for n in g2.nodes if n.op in ("add", "multiply", "subtract", "maximum"))
    feeds = {"x": rand(2, 16, 6, 6), "full": rand(2, 16, 6, 6), "row": rand(6)}
    for a, b in zip(tessera.compile(g, opt_level=2).run(feeds), tessera.compile(g, opt_level=3).run(feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_non_cpu_targets_and_graphs_without_convs_are_left_alone():
    g = conv_chain(n_convs=1)
    assert alter_layout(g, "cuda") is g
    gb = Builder("noconv")
    x = gb.input("x", (1, 8, 4, 4))
    gb.output(gb.op("nn.relu", x))
    g = gb.finish()
    assert alter_layout(g, "c") is g
    with pytest.raises(tessera.errors.TesseraError, match="takes a tessera.graph.Graph"):
        alter_layout("not a graph", "c")


def test_fused_residual_block_is_one_blocked_kernel():
    gb = Builder("res")
    x = gb.input("x", (1, 16, 20, 20))
    h = gb.op("nn.conv2d", x, gb.const(rand(16, 16, 3, 3, scale=0.2), "w1"), padding=(1, 1, 1, 1))
    h = gb.op("nn.relu", gb.op("add", h, gb.const(rand(16, 1, 1), "b1")))
    h2 = gb.op("nn.conv2d", h, gb.const(rand(16, 16, 3, 3, scale=0.2), "w2"), padding=(1, 1, 1, 1))
    h2 = gb.op("nn.relu", gb.op("add", gb.op("add", h2, gb.const(rand(16, 1, 1), "b2")), h))
    gb.output(h2)
    g = gb.finish()
    exe = tessera.compile(g, opt_level=3)
    fns = [f for f in exe.graph.functions if "nn.contrib_conv2d_NCHWc" in f.ops]
    assert sorted(f.ops for f in fns) == [("nn.contrib_conv2d_NCHWc", "add", "add", "nn.relu"),
                                          ("nn.contrib_conv2d_NCHWc", "add", "nn.relu")]
    xv = rand(1, 16, 20, 20)
    np.testing.assert_allclose(exe(xv), tessera.compile(g, opt_level=2)(xv), rtol=1e-5, atol=1e-5)


def onnx_resnet_like():
    """Conv(+bias) -> BN -> Relu -> MaxPool -> [Conv -> BN -> Relu -> Conv -> BN] + downsample(1x1 s2)
    -> Relu -> GlobalAveragePool -> Flatten -> Gemm, as an exporter writes it."""
    from onnx import TensorProto, helper, numpy_helper

    r = np.random.default_rng(3)

    def init(name, *shape, positive=False):
        a = r.standard_normal(shape).astype("float32") * 0.2
        return numpy_helper.from_array(np.abs(a) + 0.5 if positive else a, name)

    inits, nodes = [], []

    def conv_bn(src, dst, cin, cout, k, s, p, relu=True):
        inits.extend([init(f"{dst}_w", cout, cin, k, k), init(f"{dst}_g", cout), init(f"{dst}_b", cout),
                      init(f"{dst}_m", cout), init(f"{dst}_v", cout, positive=True)])
        nodes.append(helper.make_node("Conv", [src, f"{dst}_w"], [f"{dst}_c"], pads=[p] * 4, strides=[s, s]))
        nodes.append(helper.make_node("BatchNormalization", [f"{dst}_c", f"{dst}_g", f"{dst}_b", f"{dst}_m",
                                                             f"{dst}_v"], [f"{dst}_bn" if relu else dst]))
        if relu:
            nodes.append(helper.make_node("Relu", [f"{dst}_bn"], [dst]))

    conv_bn("x", "stem", 3, 16, 7, 2, 3)
    nodes.append(helper.make_node("MaxPool", ["stem"], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))
    conv_bn("pool", "a", 16, 32, 3, 2, 1)
    conv_bn("a", "b", 32, 32, 3, 1, 1, relu=False)
    conv_bn("pool", "down", 16, 32, 1, 2, 0, relu=False)
    nodes += [helper.make_node("Add", ["b", "down"], ["sum"]), helper.make_node("Relu", ["sum"], ["out"]),
              helper.make_node("GlobalAveragePool", ["out"], ["gap"]), helper.make_node("Flatten", ["gap"], ["flat"]),
              helper.make_node("Gemm", ["flat", "fc", "fcb"], ["y"], transB=1)]
    inits += [init("fc", 10, 32), init("fcb", 10)]
    graph = helper.make_graph(nodes, "resnet_like", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                   [1, 3, 40, 40])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_onnx_resnet_like_at_opt_level_3_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    model = onnx_resnet_like()
    x = rand(1, 3, 40, 40)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    graph, params = tessera.frontend.from_onnx(model)
    exe = tessera.compile(graph, params, opt_level=3)
    np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=1e-4)
    assert len(activation_transforms(exe.graph)) == 2
    assert "nn.conv2d(" not in exe.graph.script()


def test_fold_constant_after_alter_layout_leaves_no_weight_transform():
    g = fold_constant(alter_layout(conv_chain(n_convs=2), "c"))
    assert not any(n.op in ("layout_transform", "reshape") and all(v in g.constants for v in n.inputs)
                   for n in g.nodes)


def test_blocked_model_runs_ahead_of_time_and_exported(tmp_path):
    # every distinct micro-kernel source goes into the one translation unit of the AOT module once
    g = small_cnn()
    x = rand(1, 3, 32, 32)
    want = tessera.compile(g, opt_level=2)(x)
    exe = tessera.compile(g, opt_level=3, executor="aot")
    np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=1e-4)
    exe.export_library(str(tmp_path / "cnn.so"))
    np.testing.assert_allclose(tessera.runtime.load_module(str(tmp_path / "cnn.so"))(x), want, rtol=1e-4, atol=1e-4)
