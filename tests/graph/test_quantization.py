"""tessera.quantize: an fp32 graph calibrated on seeded inputs and made a graph of integer ops (the
CPU's int8 kernels); its outputs near the fp32 model's, the chain integer from the input's quantize
to the output's dequantize, each calibration method's input range as graph/calibration.py picks it,
the QDQ form equal to the integer form, skip and per-tensor weights, and the errors."""
import warnings

import numpy as np
import pytest

import tessera
from tessera.errors import TesseraError
from tessera.graph import Builder
from tessera.graph.calibration import RangeCollector, quant_params
from tessera.graph.ir import FUSED_OP
from tessera.graph.passes._rewrite import const_derived

RNG = np.random.default_rng(17)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def mobile_net():
    """RGB stem, depthwise, pointwise, residual add, max pool, global pool, classifier (with batch
    norm after the stem, which the quantizer folds first)."""
    gb = Builder("mobile")
    x = gb.input("x", (1, 3, 16, 16))
    h = gb.op("nn.conv2d", x, gb.const(rand(16, 3, 3, 3, scale=0.3), "w0"), padding=(1, 1, 1, 1), strides=(2, 2),
              name="stem")
    h = gb.op("nn.batch_norm", h, gb.const(1 + rand(16, scale=0.1), "g"), gb.const(rand(16, scale=0.1), "be"),
              gb.const(rand(16, scale=0.1), "mu"), gb.const(1 + np.abs(rand(16, scale=0.1)), "var"), name="bn")
    h = gb.op("nn.relu", h)
    d = gb.op("nn.conv2d", h, gb.const(rand(16, 1, 3, 3, scale=0.3), "w1"), padding=(1, 1, 1, 1), groups=16,
              name="dw")
    d = gb.op("clip", gb.op("add", d, gb.const(rand(16, 1, 1), "b1")), a_min=0.0, a_max=6.0)
    e = gb.op("add", gb.op("nn.conv2d", d, gb.const(rand(16, 16, 1, 1, scale=0.3), "w2"), name="pw"),
              gb.const(rand(16, 1, 1), "b2"))
    s = gb.op("add", h, e, name="res")
    s = gb.op("nn.max_pool2d", s, pool_size=(2, 2), strides=(2, 2))
    f = gb.op("reshape", gb.op("nn.global_avg_pool", s), newshape=(1, 16))
    y = gb.op("add", gb.op("nn.matmul", f, gb.const(rand(16, 10, scale=0.3), "wf"), name="fc"),
              gb.const(rand(10), "bf"))
    gb.output(y)
    return gb.finish()


CALIB = [{"x": rand(1, 3, 16, 16)} for _ in range(8)]


def ops_of(graph):
    out = []
    for n in graph.nodes:
        out.extend(m.op for m in (n.attrs["function"].body.nodes if n.op == FUSED_OP else [n]))
    return out


def float_nodes(graph):
    """Nodes computing a float tensor or reading a float tensor that is not a constant."""
    consts = const_derived(graph)
    return [n.op for n in graph.nodes if any(v.dtype.is_float() for v in n.outputs)
            or any(v.dtype.is_float() and v not in consts for v in n.inputs)]


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy"])
def test_quantized_model_is_integer_and_close_to_fp32(method):
    g = mobile_net()
    qg = tessera.quantize(g, None, CALIB, method=method)
    assert sorted(set(n.op for n in qg.nodes)) == ["nn.max_pool2d", "qnn.add", "qnn.conv2d", "qnn.dense",
                                                   "qnn.dequantize", "qnn.global_avg_pool", "qnn.quantize", "reshape"]
    assert sorted(float_nodes(qg)) == ["qnn.dequantize", "qnn.quantize"]
    x = rand(1, 3, 16, 16)             # not a calibration input
    ref = tessera.compile(g)(x)
    exe = tessera.compile(qg)
    got = exe(x)
    # a few quantization steps of the output's range through six quantized layers
    assert np.abs(got - ref).max() <= 0.05 * np.abs(ref).max()
    ops = ops_of(exe.graph)
    assert "qnn.contrib_conv2d_NCHWc" in ops and "qnn.contrib_depthwise_conv2d_NCHWc" in ops


def test_qdq_form_computes_what_the_integer_form_does():
    g = mobile_net()
    qdq = tessera.quantize(g, None, CALIB, form="qdq")
    ops = [n.op for n in qdq.nodes]
    # weights: int8 DQ'd per output channel; activations: Q -> DQ pairs around the float ops
    assert "nn.conv2d" in ops and "qnn.conv2d" not in ops and ops.count("qnn.quantize") >= 6
    dqw = [n for n in qdq.nodes if n.op == "qnn.dequantize" and n.inputs[0] in qdq.constants]
    assert len(dqw) == 4 and all(str(n.inputs[0].dtype) == "int8" and n.inputs[1].type.shape[0] > 1 for n in dqw)
    x = rand(1, 3, 16, 16)
    a = tessera.compile(qdq)(x)
    b = tessera.compile(tessera.quantize(g, None, CALIB))(x)
    np.testing.assert_array_equal(a, b)


def test_input_range_follows_the_calibration_method():
    # calibration inputs with one outlier pixel: minmax's input range reaches it, percentile's and
    # entropy's clip it, each as RangeCollector computes it over the same arrays
    calib = [{"x": rand(1, 3, 16, 16)} for _ in range(8)]
    calib[3]["x"][0, 1, 5, 5] = 40.0
    g = mobile_net()
    for method in ("minmax", "percentile", "entropy"):
        qdq = tessera.quantize(g, None, calib, method=method, percentile=99.9, form="qdq")
        (q,) = [n for n in qdq.nodes if n.op == "qnn.quantize" and n.inputs[0] is qdq.inputs[0]]
        scale, zp = float(qdq.constants[q.inputs[1]]), int(qdq.constants[q.inputs[2]])
        c = RangeCollector(method, percentile=99.9)
        for f in calib:
            c.observe(f["x"])
        if c.needs_histogram:
            for f in calib:
                c.observe_histogram(f["x"])
        want = quant_params(*c.range())
        assert (np.float32(scale), zp) == want
        if method == "minmax":
            assert scale * (255 - zp) >= 39.5        # the outlier (40.0), to a rounding
        else:
            assert scale * (255 - zp) < 10.0


def test_skip_and_per_tensor_weights():
    g = mobile_net()
    qg = tessera.quantize(g, None, CALIB, skip=["fc", "nn.global_avg_pool"], per_channel=False, form="qdq")
    fc = [n for n in qg.nodes if n.name == "fc"][0]
    assert fc.inputs[1] in qg.constants                          # its weight stays float
    dqw = [n for n in qg.nodes if n.op == "qnn.dequantize" and n.inputs[0] in qg.constants]
    assert len(dqw) == 3 and all(n.inputs[1].type.shape in ((), (1,)) or n.inputs[1].type.ndim == 0 for n in dqw)
    x = rand(1, 3, 16, 16)
    ref = tessera.compile(g)(x)
    ig = tessera.quantize(g, None, CALIB, skip=["fc"])
    ops = [n.op for n in ig.nodes]
    assert "nn.matmul" in ops and "qnn.dense" not in ops and "qnn.conv2d" in ops
    assert np.abs(tessera.compile(ig)(x) - ref).max() <= 0.05 * np.abs(ref).max()


def test_errors_name_the_problem():
    g = mobile_net()
    with pytest.raises(TesseraError, match="not one of"):
        tessera.quantize(g, None, CALIB, method="kl")
    with pytest.raises(TesseraError, match="skip names"):
        tessera.quantize(g, None, CALIB, skip=["no_such_node"])
    with pytest.raises(TesseraError, match="lacks"):
        tessera.quantize(g, None, [{"y": rand(1, 3, 16, 16)}])
    with pytest.raises(TesseraError, match="at least one"):
        tessera.quantize(g, None, [])
    with pytest.raises(TesseraError, match="quantized already"):
        tessera.quantize(tessera.quantize(g, None, CALIB), None, CALIB)


@pytest.mark.parametrize("tiny", [1e-12, 1e-41])
def test_near_zero_weight_channel_keeps_its_bias(tiny):
    # a channel whose weights batch norm scaled to (nearly) zero computes its bias alone; its weight
    # scale is raised so the int32 bias (bias / (input scale * weight scale)) fits, as ORT does: before,
    # the bias was clipped to 2**31 - 1 steps of about 1e-17 (or, for a float32 denormal, cast from an
    # out-of-range float: "invalid value encountered in cast") and the channel read about 0
    w = rand(4, 3, 3, 3, scale=0.3)
    w[2] = np.float32(tiny) * np.sign(w[2])
    bias = np.array([0.1, -0.2, 0.5, 0.3], np.float32)
    for per_channel in (True, False):
        gb = Builder("tiny_channel")
        x = gb.input("x", (1, 3, 8, 8))
        gb.output(gb.op("add", gb.op("nn.conv2d", x, gb.const(w, "w"), padding=(1, 1, 1, 1), name="conv"),
                        gb.const(bias.reshape(4, 1, 1), "b")))
        g = gb.finish()
        calib = [{"x": rand(1, 3, 8, 8)} for _ in range(4)]
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            qg = tessera.quantize(g, None, calib, per_channel=per_channel)
        assert "qnn.conv2d" in [n.op for n in qg.nodes]
        (conv,) = [n for n in qg.nodes if n.op == "qnn.conv2d"]
        assert np.abs(qg.constants[conv.inputs[2]].astype(np.int64)).max() < 2 ** 31 - 1   # the int32 bias
        xin = 0.8 * calib[0]["x"]              # inside the calibrated input range
        ref = tessera.compile(g)(xin)
        got = tessera.compile(qg)(xin)
        step = (ref.max() - min(ref.min(), 0.0)) / 255
        np.testing.assert_allclose(got[0, 2], 0.5, atol=1.01 * step)
        assert np.abs(got - ref).max() <= 0.05 * np.abs(ref).max()


def test_a_bias_that_binds_the_weight_scale_leaves_room_for_the_accumulation():
    """A channel whose bias alone sets its weight scale (bias / (input scale * weight scale) near
    int32's limit): the scale also leaves room for the channel's largest accumulation, the bound the
    integer pass holds a group to, so the conv is integer instead of staying in float unsaid."""
    w = rand(4, 64, 3, 3, scale=0.3)
    bias = np.array([0.1, -0.2, 3e4, 0.3], np.float32)
    gb = Builder("big_bias")
    x = gb.input("x", (1, 64, 6, 6))
    gb.output(gb.op("add", gb.op("nn.conv2d", x, gb.const(w, "w"), padding=(1, 1, 1, 1), name="conv"),
                    gb.const(bias.reshape(4, 1, 1), "b")))
    g = gb.finish()
    calib = [{"x": rand(1, 64, 6, 6, scale=0.01)} for _ in range(4)]
    qg = tessera.quantize(g, None, calib, per_channel=True)
    assert "qnn.conv2d" in [n.op for n in qg.nodes]
    xin = 0.8 * calib[0]["x"]
    ref = tessera.compile(g)(xin)
    got = tessera.compile(qg)(xin)
    assert np.abs(got - ref).max() <= 0.05 * np.abs(ref).max()
