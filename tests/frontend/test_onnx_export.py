"""frontend/onnx_export: tessera graphs written as ONNX models.

Small graphs of the ops the export writes run in ONNX Runtime beside tessera; the zoo models' fp32
graphs round-trip (ONNX -> tessera -> ONNX, both files run in ONNX Runtime); and the QDQ form of
tessera.quantize for small resnet18, mobilenet_v2 and bert_base is written, checked by onnx.checker,
run in ONNX Runtime against tessera's own int8 execution (within one quantization step of each
output), read back by the frontend into the same integer graph, and about a quarter of the fp32 file.
"""
import collections
import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import tessera  # noqa: E402
from tessera.errors import TesseraError, UnsupportedOpError  # noqa: E402
from tessera.frontend.onnx_export import export_onnx, to_onnx  # noqa: E402
from tessera.graph import Builder  # noqa: E402
from tessera.graph.calibration import quant_params  # noqa: E402
from tessera.graph.ir import FUSED_OP  # noqa: E402
from tessera.graph.passes import optimized_graph  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from int8 import SMALL, _feeds  # noqa: E402  (the benchmark's small zoo options and seeded inputs)

RNG = np.random.default_rng(5)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def ort_run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def check(model):
    onnx.checker.check_model(model, full_check=True)
    return model


def ops_of(graph):
    out = []
    for n in graph.nodes:
        out.extend(m.op for m in (n.attrs["function"].body.nodes if n.op == FUSED_OP else [n]))
    return out


# ---------------------------------------------------------------------------------------------
# the ops, one small graph per family, against tessera's own kernels
# ---------------------------------------------------------------------------------------------
def cnn_graph():
    gb = Builder("cnn")
    x = gb.input("x", (1, 4, 11, 10))
    h = gb.op("nn.conv2d", x, gb.const(rand(6, 2, 3, 3, scale=0.3), "w0"), strides=(2, 1), padding=(1, 0, 2, 1),
              dilation=(1, 2), groups=2, name="conv_g2")
    h = gb.op("add", h, gb.const(rand(6, 1, 1), "b0"))               # a bias: the Conv's third input
    h = gb.op("nn.batch_norm", h, gb.const(1 + rand(6, scale=0.1), "g"), gb.const(rand(6, scale=0.1), "be"),
              gb.const(rand(6, scale=0.1), "mu"), gb.const(1 + np.abs(rand(6, scale=0.1)), "var"), epsilon=1e-3)
    h = gb.op("nn.relu", h)
    d = gb.op("nn.conv2d", h, gb.const(rand(6, 1, 3, 3, scale=0.3), "wd"), padding=(1, 1, 1, 1), groups=6,
              name="depthwise")
    d = gb.op("clip", d, a_min=0.0, a_max=6.0)
    m = gb.op("nn.max_pool2d", d, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), ceil_mode=True)
    a = gb.op("nn.avg_pool2d", d, pool_size=(2, 2), strides=(2, 2), padding=(1, 0, 1, 1), count_include_pad=True)
    s = gb.op("sigmoid", gb.op("concatenate", m, a, axis=1))
    s = gb.op("nn.pad", s, pad_width=((0, 0), (0, 0), (1, 0), (0, 2)), pad_value=0.5)
    gp = gb.op("nn.global_avg_pool", s)
    gm = gb.op("nn.global_max_pool", s)
    f = gb.op("reshape", gb.op("multiply", gp, gm), newshape=(1, -1))
    y1 = gb.op("nn.dense", f, gb.const(rand(5, 12, scale=0.3), "wd1"))
    y2 = gb.op("nn.matmul", f, gb.const(rand(7, 12, scale=0.3), "wt"), transpose_b=True)
    gb.output(gb.op("nn.softmax", y1), gb.op("nn.leaky_relu", y2, alpha=0.2))
    return gb.finish(), {"x": rand(1, 4, 11, 10)}


def transformer_graph():
    gb = Builder("encoder")
    ids = gb.input("ids", (2, 5), "int64")
    mask = gb.input("mask", (2, 5), "int64")
    emb = gb.op("take", gb.const(rand(20, 8), "table"), ids, axis=0)
    h = gb.op("nn.layer_norm", emb, gb.const(1 + rand(8, scale=0.1), "ln_g"), gb.const(rand(8, scale=0.1), "ln_b"),
              epsilon=1e-6)
    q = gb.op("nn.matmul", h, gb.const(rand(8, 8, scale=0.3), "wq"))
    k = gb.op("nn.matmul", h, gb.const(rand(8, 8, scale=0.3), "wk"))
    q = gb.op("transpose", gb.op("reshape", q, newshape=(2, 5, 2, 4)), axes=(0, 2, 1, 3))
    k = gb.op("transpose", gb.op("reshape", k, newshape=(2, 5, 2, 4)), axes=(0, 2, 3, 1))
    att = gb.op("divide", gb.op("nn.matmul", q, k), gb.const(np.float32(2.0), "sqrt_d"))
    m = gb.op("cast", gb.op("expand_dims", gb.op("expand_dims", mask, axis=1), axis=1), dtype="float32")
    att = gb.op("add", att, gb.op("multiply", gb.op("subtract", gb.const(np.float32(1.0), "one"), m),
                                  gb.const(np.float32(-1e4), "neg")))
    p = gb.op("nn.softmax", att, axis=-1)
    g1 = gb.op("nn.gelu", p)
    g2 = gb.op("nn.gelu", p, approximate="tanh")
    e = gb.op("add", gb.op("erf", g1), gb.op("tanh", g2))
    first, rest = gb.op("split", e, indices_or_sections=(1,), axis=1)
    sl = gb.op("strided_slice", rest, begin=(0, 4), end=(1, 0), strides=(1, -2), axes=(1, 3))
    red = gb.op("mean", sl, axis=(3,), keepdims=True)
    tot = gb.op("sum", first, axis=(2, 3), keepdims=False)
    sq = gb.op("squeeze", gb.op("sqrt", gb.op("exp", red)), axes=(1,))
    w = gb.op("where", gb.op("greater", sq, gb.const(np.float32(1.5), "thr")), sq, gb.op("power", sq, sq))
    gb.output(gb.op("maximum", w, gb.const(np.float32(0.2), "lo")), gb.op("minimum", tot, tot), h)
    ids_v = RNG.integers(-20, 20, (2, 5)).astype(np.int64)      # negative ids index from the end (Gather)
    mask_v = (RNG.random((2, 5)) > 0.3).astype(np.int64)
    return gb.finish(), {"ids": ids_v, "mask": mask_v}


def qdq_graph():
    """Activations quantized per tensor (uint8 and int8), weights int8 per channel (axes 0 and 1)."""
    gb = Builder("qdq")
    x = gb.input("x", (1, 3, 6, 6))

    def qdq(v, s, z, dt="uint8"):
        sv, zv = gb.const(np.float32(s), "s"), gb.const(np.array(z, dt), "z")
        return gb.op("qnn.dequantize", gb.op("qnn.quantize", v, sv, zv, out_dtype=dt), sv, zv)

    def weight(w, axis):
        red = tuple(d for d in range(w.ndim) if d != axis)
        s = (np.abs(w).max(axis=red) / 127).astype(np.float32)
        shape = [1] * w.ndim
        shape[axis] = -1
        q = np.clip(np.rint(w / s.reshape(shape)), -127, 127).astype(np.int8)
        return gb.op("qnn.dequantize", gb.const(q, "w_int8"), gb.const(s, "w_scale"),
                     gb.const(np.zeros(s.shape, np.int8), "w_zp"), axis=axis)

    h = gb.op("nn.conv2d", qdq(x, 0.02, 128), weight(rand(4, 3, 3, 3, scale=0.3), 0), padding=(1, 1, 1, 1))
    h = qdq(gb.op("nn.relu", gb.op("add", h, gb.const(rand(4, 1, 1), "b"))), 0.01, 0)
    h = qdq(gb.op("nn.global_avg_pool", h), 0.005, 0)
    f = qdq(gb.op("reshape", h, newshape=(1, 4)), 0.005, 0)
    y = gb.op("nn.matmul", f, weight(rand(4, 3, scale=0.3), 1))
    y = qdq(gb.op("add", y, gb.const(rand(3), "bf")), 0.01, 0, "int8")
    gb.output(y)
    return gb.finish(), {"x": rand(1, 3, 6, 6)}


@pytest.mark.parametrize("make", [cnn_graph, transformer_graph], ids=["cnn", "transformer"])
def test_float_ops_compute_in_onnxruntime_what_they_do_in_tessera(make):
    g, feeds = make()
    model = check(to_onnx(g))
    assert [i.name for i in model.graph.input] == list(g.input_names)
    assert [o.name for o in model.graph.output] == list(g.output_names)
    want = tessera.compile(g).run(feeds)
    got = ort_run(model, feeds)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_conv_bias_is_the_conv_input_and_gelu_its_formula_below_opset_20():
    g, feeds = cnn_graph()
    ops = collections.Counter(n.op_type for n in to_onnx(g).graph.node)
    assert ops["Conv"] == 2 and ops["Add"] == 0 and ops["Gemm"] == 1          # nn.dense is a Gemm (transB)
    g, feeds = transformer_graph()
    m17, m20 = to_onnx(g), check(to_onnx(g, opset=20))
    assert "Gelu" not in {n.op_type for n in m17.graph.node}
    assert collections.Counter(n.op_type for n in m20.graph.node)["Gelu"] == 2
    for a, b in zip(ort_run(m17, feeds), ort_run(m20, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_qdq_graph_writes_integers_and_runs_as_tessera_int8():
    g, feeds = qdq_graph()
    model = check(to_onnx(g))
    inits = {t.name: t for t in model.graph.initializer}
    dq = [n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits]
    kinds = sorted(onnx.helper.tensor_dtype_to_np_dtype(inits[n.input[0]].data_type).name for n in dq)
    assert kinds == ["int32", "int32", "int8", "int8"]                # two int8 weights, two int32 biases
    axes = sorted(onnx.helper.get_attribute_value(a) for n in dq for a in n.attribute if a.name == "axis")
    assert axes == [0, 0, 0, 1]                                      # conv weight + its bias, Gemm bias, matmul weight
    got = ort_run(model, feeds)[0]
    want = tessera.compile(g).run(feeds)[0]
    step = 0.01                                                      # the output's quantization scale
    assert np.abs(got - want).max() <= step * (1 + 1e-6)


def test_fp32_zoo_models_round_trip_through_onnxruntime():
    for name in ("resnet18", "mobilenet_v2", "bert_base"):
        opts = SMALL[name]
        m = tessera.zoo.get_model(name, **opts)
        g, params = tessera.frontend.from_onnx(m)
        out = check(to_onnx(g, params))
        feeds = tessera.zoo.sample_input(name, **opts)
        for a, b in zip(ort_run(m, feeds), ort_run(out, feeds)):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# the QDQ form of tessera.quantize for the zoo models
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["resnet18", "mobilenet_v2", "bert_base"])
def quantized(request, tmp_path_factory):
    name = request.param
    opts = SMALL[name]
    fp32 = tessera.zoo.get_model(name, **opts)
    g, params = tessera.frontend.from_onnx(fp32)
    calib = [_feeds(name, opts, 100 + i) for i in range(4)]
    qdq = tessera.quantize(g, params, calibration=calib, form="qdq")
    folder = tmp_path_factory.mktemp(name)
    path = export_onnx(qdq, folder / f"{name}_int8.onnx")
    onnx.save(fp32, folder / f"{name}.onnx")
    # tessera's int8 execution of the same graph: compiling the QDQ form makes it the integer form
    # (fake_quantization_to_integer; tests/graph/test_quantization checks the two equal)
    int8 = tessera.compile(qdq)
    return dict(name=name, fp32=folder / f"{name}.onnx", path=path, qdq=qdq, int8=int8, feeds=_feeds(name, opts, 7))


def output_steps(qdq, outputs):
    """Per output: one quantization step. An output dequantized from uint8/int8 has its scale; a float
    output computed after the last quantized tensor (BERT's layer norm and tanh) the step of a uint8
    quantization of its range (graph/calibration.quant_params)."""
    out = []
    for v, y in zip(qdq.outputs, outputs):
        n = v.producer
        if n is not None and n.op == "qnn.dequantize":
            out.append(float(qdq.constants[n.inputs[1]]))
        else:
            out.append(float(quant_params(float(y.min()), float(y.max()))[0]))
    return out


def test_qdq_model_passes_the_checker_and_keeps_the_names(quantized):
    model = onnx.load(quantized["path"])
    onnx.checker.check_model(str(quantized["path"]), full_check=True)
    fp32 = onnx.load(quantized["fp32"])
    assert [i.name for i in model.graph.input] == [i.name for i in fp32.graph.input]
    assert [o.name for o in model.graph.output] == [o.name for o in fp32.graph.output]
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert ops["QuantizeLinear"] > 0 and ops["DequantizeLinear"] > ops["QuantizeLinear"]


def test_onnxruntime_agrees_with_tessera_int8_within_one_output_step(quantized):
    feeds = quantized["feeds"]
    got = ort_run(onnx.load(quantized["path"]), feeds)
    exe = quantized["int8"]
    assert {"qnn.conv2d", "qnn.dense"} & set(ops_of(exe.graph))           # integer kernels, not float ones
    want = exe.run(feeds)
    for a, b, step in zip(got, want, output_steps(quantized["qdq"], want)):
        assert a.shape == b.shape
        assert np.abs(a - b).max() <= step * (1 + 1e-6), (quantized["name"], np.abs(a - b).max(), step)


def constants_of(graph):
    """The graph's constants as a sorted list of (dtype, shape, digest of the bytes)."""
    return sorted((str(a.dtype), a.shape, hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest())
                  for a in map(np.asarray, graph.constants.values()))


def test_reimported_file_is_the_same_integer_graph(quantized):
    # the file through the ONNX frontend and tessera.compile's graph passes: the graph tessera compiled
    # from the QDQ form in memory, op for op and constant for constant (int8 weights, int32 biases,
    # multipliers), not a float graph that went through fp32
    g2, p2 = tessera.frontend.from_onnx(str(quantized["path"]))
    exe1 = quantized["int8"]
    opt2 = optimized_graph(g2, p2, exe1.target, 3)
    ops1, ops2 = collections.Counter(ops_of(exe1.graph)), collections.Counter(ops_of(opt2))
    assert {"qnn.conv2d", "qnn.dense"} & set(ops2), "the re-imported model computes in float"
    assert ops2 == ops1
    assert constants_of(opt2) == constants_of(exe1.graph)


def test_weights_are_int8_initializers(quantized):
    model = onnx.load(quantized["path"])
    inits = {t.name: t for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    for n in model.graph.node:
        if n.op_type in ("Conv", "MatMul", "Gemm") and n.input[1] in producer:
            dq = producer[n.input[1]]
            if dq.op_type == "DequantizeLinear" and dq.input[0] in inits:
                assert inits[dq.input[0]].data_type == onnx.TensorProto.INT8
    weights_fp32 = [n for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul") and n.input[1] in inits]
    assert not weights_fp32                      # every convolution / matmul weight is DequantizeLinear'd
    size, fp32_size = Path(quantized["path"]).stat().st_size, Path(quantized["fp32"]).stat().st_size
    assert size < fp32_size
    if quantized["name"] != "bert_base":         # BERT's float embedding tables stay fp32
        assert size < 0.3 * fp32_size


# ---------------------------------------------------------------------------------------------
# names and refusals
# ---------------------------------------------------------------------------------------------
def test_public_names_are_kept_and_pass_through_outputs_become_identities():
    gb = Builder("names")
    x = gb.input("x", (2, 3))
    y = gb.op("nn.relu", x)
    gb.output(y, x, y)
    g = gb.finish()
    from tessera.graph.ir import Graph
    g = Graph(g.inputs, g.outputs, g.nodes, g.constants, "names", ["gpu_0/data:0"], ["out/relu", "echo", "again"])
    model = check(to_onnx(g))
    assert [i.name for i in model.graph.input] == ["gpu_0/data:0"]
    assert [o.name for o in model.graph.output] == ["out/relu", "echo", "again"]
    xv = rand(2, 3)
    a, b, c = ort_run(model, {"gpu_0/data:0": xv})
    np.testing.assert_array_equal(a, np.maximum(xv, 0))
    np.testing.assert_array_equal(b, xv)
    np.testing.assert_array_equal(c, a)


def test_refusals_name_the_op_and_the_node():
    gb = Builder("t")
    x = gb.input("x", (4, 6))
    gb.output(gb.op("topk", x, k=2, name="best_two")[0])
    with pytest.raises(UnsupportedOpError, match=r"'topk' \(node 'best_two'\)"):
        to_onnx(gb.finish())
    g, _ = cnn_graph()
    fused = tessera.compile(g).graph
    with pytest.raises(UnsupportedOpError, match="fused group"):
        to_onnx(fused)
    gt, _ = transformer_graph()
    with pytest.raises(UnsupportedOpError, match="LayerNormalization, which needs opset 17"):
        to_onnx(gt, opset=13)
    with pytest.raises(TesseraError, match="opsets 13 to"):
        to_onnx(gt, opset=7)


def test_a_failed_write_leaves_the_earlier_file_as_it_was(tmp_path, monkeypatch):
    gb = Builder("relu")
    x = gb.input("x", (2, 3))
    gb.output(gb.op("nn.relu", x))
    g = gb.finish()
    path = tmp_path / "m.onnx"
    export_onnx(g, path)
    before = path.read_bytes()

    def full_disk(model, f, *args, **kwargs):
        with open(f, "wb") as out:
            out.write(b"\x08")            # a few bytes written, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(onnx, "save_model", full_disk)
    with pytest.raises(OSError, match="No space left"):
        export_onnx(g, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]    # nothing staged is left behind
