"""alter_layout on quantized models: qnn.conv2d (uint8 data, constant int8 weights) becomes the blocked
int8 convolutions qnn.contrib_conv2d_NCHWc / qnn.contrib_depthwise_conv2d_NCHWc with the weights packed
and the input zero point folded into the bias; an RGB input is blocked by qnn.pack_nchwc (channels
filled with the zero point). Each model is built in the test (per-channel int8 weights, QDQ as
onnxruntime.quantization writes it, or QLinearConv) and run by tessera on the AVX2 target and the
host's and by ONNX Runtime: exact against ORT's integer kernels (QLinearConv: float32 requantization,
half to even), within one quantization step of ONNX's float DQ -> Conv -> Q."""
import re

import numpy as np
import pytest

import tessera
from tessera.graph.ir import FUSED_OP
from tessera.graph.passes._rewrite import const_derived
from tessera.tir.tensor_intrin.x86_qconv import AMX_BLOCK, amx_for, block_lanes, isa_for

from qdq_models import QDQ, ort_run, steps

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(31)
QCONV, QDW = "qnn.contrib_conv2d_NCHWc", "qnn.contrib_depthwise_conv2d_NCHWc"


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def all_ops(graph):
    """The ops of the graph's nodes, the bodies of fused nodes included."""
    out = []
    for n in graph.nodes:
        out.extend(m.op for m in (n.attrs["function"].body.nodes if n.op == FUSED_OP else [n]))
    return out


def compile_run(model, feeds, target):
    g, p = tessera.frontend.from_onnx(model)
    exe = tessera.compile(g, p, target=target)
    return exe.run(feeds), exe


def micro_kernels(exe):
    """The int8 conv micro-kernel intrinsics the executor's schedules tensorized with."""
    names = set()
    for k in exe.kernels:
        trace = getattr(k.prim, "trace", None)
        names.update(re.findall(r"x86_\w+?_qconv2d_nchwc_\w+", str(trace)))
    return names


def float_ops(graph):
    """Ops reading or computing a float tensor other than a constant (the multipliers of the
    requantizations are float constants), fused bodies looked into (their parameters are the calling
    node's inputs)."""
    consts = const_derived(graph)
    out = []
    for n in graph.nodes:
        if n.op == FUSED_OP:
            body = n.attrs["function"].body
            const_params = {p for p, v in zip(body.inputs, n.inputs) if v in consts}
            nodes, skip = body.nodes, const_params
        else:
            nodes, skip = [n], consts
        for m in nodes:
            if any(v.dtype.is_float() for v in m.outputs) or \
                    any(v.dtype.is_float() and v not in skip for v in m.inputs):
                out.append(m.op)
    return out


def conv_model(C, O, k, stride, groups=1, H=12, relu=True, batch=1, act="uint8", dilation=1):
    m = QDQ(act, seed=C * 100 + O)
    x = m.q("x", -2.0, 3.0)
    w, ws = m.weight(rand(O, C // groups, k, k, scale=0.3))
    b = m.bias(rand(O), m.scales[x], ws)
    pad = dilation * (k // 2)
    y = m.node("Conv", [x, w, b], "conv", pads=[pad] * 4, strides=[stride] * 2, group=groups,
               dilations=[dilation] * 2)
    if relu:
        y = m.node("Relu", [y], "relu")
    out = m.q(y, 0.0 if relu else -4.0, 6.0)
    OH = (H + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    model = m.model([("x", [batch, C, H, H])], out, [batch, O, OH, OH])
    return m, model, out, {"x": rand(batch, C, H, H, scale=1.5)}


CASES = {
    "1x1": dict(C=16, O=32, k=1, stride=1),
    "3x3_stride2": dict(C=8, O=16, k=3, stride=2),
    "3x3_wide": dict(C=32, O=48, k=3, stride=1, H=9, relu=False),
    "rgb_stem": dict(C=3, O=16, k=7, stride=2, H=20),
    "rgb_3x3": dict(C=3, O=8, k=3, stride=1),
    "depthwise": dict(C=16, O=16, k=3, stride=1, groups=16),
    "depthwise_stride2": dict(C=24, O=24, k=3, stride=2, groups=24, relu=False),
    "dilated_batch2": dict(C=8, O=16, k=3, stride=1, dilation=2, batch=2),
    "int8_activations": dict(C=8, O=16, k=3, stride=1, act="int8", relu=False),
    # 64-channel input blocks: AMX tiles where the target has AMX (rows of 16 pixels and a rest: 20 = 16 + 4,
    # 9 alone), three output vectors a call; VNNI / AVX2 elsewhere
    "blocks_of_64": dict(C=64, O=48, k=3, stride=1, H=20),
    "blocks_of_64_1x1_stride2": dict(C=128, O=32, k=1, stride=2, H=18, relu=False),
    "blocks_of_64_dilated": dict(C=64, O=16, k=3, stride=1, H=11, dilation=2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_blocked_int8_conv_equals_onnxruntime(case, isa_target):
    kw = CASES[case]
    m, model, out, feeds = conv_model(**kw)
    (got,), exe = compile_run(model, feeds, isa_target)
    ref, flt = ort_run(model, feeds)[0], ort_run(model, feeds, optimized=False)[0]
    assert steps(got, ref, m.scales[out]).max() == 0
    assert steps(got, flt, m.scales[out]).max() <= 1
    ops = all_ops(exe.graph)
    depthwise = kw.get("groups", 1) > 1
    assert (QDW if depthwise else QCONV) in ops and "qnn.conv2d" not in ops
    assert ("qnn.pack_nchwc" in ops) == (kw["C"] % 4 != 0)
    assert float_ops(exe.graph).count("qnn.quantize") == 1 and float_ops(exe.graph).count("qnn.dequantize") == 1
    assert len(float_ops(exe.graph)) == 2
    if not depthwise:
        # the u8 x s8 micro-kernel of the target's ISA computes it (vpdpbusd, or vpmaddwd on AVX2)
        names = micro_kernels(exe)
        lanes = block_lanes(isa_target)
        lanes = lanes if kw["O"] % lanes == 0 else 8
        isa = "amx" if lanes == 16 and kw["C"] % AMX_BLOCK == 0 and amx_for(isa_target) else isa_for(isa_target, lanes)
        assert names and all(n.startswith(f"x86_{isa}_qconv2d") for n in names), names


def test_avx2_target_takes_the_vpmaddwd_kernel_and_host_its_widest():
    assert isa_for(tessera.Target("c -mcpu=haswell"), 8) == "avx2"
    assert block_lanes(tessera.Target("c -mcpu=haswell")) == 8
    assert isa_for(tessera.Target("c -mcpu=haswell"), 16) is None
    host = tessera.Target("c")
    if host.has_feature("avx512_vnni") and host.has_feature("avx512bw"):
        assert block_lanes(host) == 16


def test_avx_vnni_target_equals_onnxruntime():
    # Alder Lake: AVX-VNNI (VEX vpdpbusd on ymm) without AVX-512; runs where the host has AVX-VNNI
    target = tessera.Target("c -mcpu=alderlake")
    host = tessera.Target("c")
    if not (host.has_feature("avx_vnni") and target.has_feature("avx_vnni")):
        pytest.skip("the host has no AVX-VNNI")
    m, model, out, feeds = conv_model(C=16, O=16, k=3, stride=1)
    (got,), exe = compile_run(model, feeds, "c -mcpu=alderlake")
    assert steps(got, ort_run(model, feeds)[0], m.scales[out]).max() == 0
    names = micro_kernels(exe)
    assert names and all(n.startswith("x86_avxvnni_qconv2d") for n in names)


@pytest.mark.parametrize("case", ["odd_channels", "grouped"])
def test_convs_the_blocks_do_not_fit_stay_qnn_conv2d(case, isa_target):
    # 12 output channels (no block of 8 or 16 divides them), or groups = 2: the NCHW integer convolution
    kw = dict(C=8, O=12, k=3, stride=1) if case == "odd_channels" else dict(C=8, O=16, k=3, stride=1, groups=2)
    m, model, out, feeds = conv_model(**kw)
    (got,), exe = compile_run(model, feeds, isa_target)
    assert steps(got, ort_run(model, feeds)[0], m.scales[out]).max() == 0
    ops = all_ops(exe.graph)
    assert "qnn.conv2d" in ops and QCONV not in ops


def test_qlinearconv_per_channel_blocked_equals_onnx_reference(isa_target):
    # QOperator: QLinearConv with per-channel weight scales (float64 requantization as ONNX's
    # reference defines it), an RGB input, then a depthwise QLinearConv on its output
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    arrays = {"xs": np.float32(0.04), "xz": np.uint8(118),
              "w1": RNG.integers(-127, 128, (16, 3, 3, 3)).astype(np.int8),
              "w1s": (RNG.random(16) * 0.01 + 0.002).astype(np.float32), "w1z": np.zeros(16, np.int8),
              "ys": np.float32(0.06), "yz": np.uint8(0), "b1": RNG.integers(-3000, 3000, 16).astype(np.int32),
              "w2": RNG.integers(-127, 128, (16, 1, 3, 3)).astype(np.int8),
              "w2s": (RNG.random(16) * 0.01 + 0.002).astype(np.float32), "w2z": np.zeros(16, np.int8),
              "zs": np.float32(0.05), "zz": np.uint8(128), "b2": RNG.integers(-3000, 3000, 16).astype(np.int32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("QLinearConv", ["xq", "xs", "xz", "w1", "w1s", "w1z", "ys", "yz", "b1"], ["yq"],
                              pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("QLinearConv", ["yq", "ys", "yz", "w2", "w2s", "w2z", "zs", "zz", "b2"], ["zq"],
                              pads=[1, 1, 1, 1], group=16),
             helper.make_node("DequantizeLinear", ["zq", "zs", "zz"], ["z"])]
    graph = helper.make_graph(nodes, "qop", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 14, 14])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 16, 7, 7])],
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in arrays.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    feeds = {"x": rand(1, 3, 14, 14, scale=2.0)}
    (got,), exe = compile_run(model, feeds, isa_target)
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, feeds)[0])
    ops = all_ops(exe.graph)
    assert QCONV in ops and QDW in ops and "qnn.pack_nchwc" in ops and "qnn.conv2d" not in ops
    assert len(float_ops(exe.graph)) == 2


def test_mobile_block_stays_blocked_and_integer(isa_target):
    # RGB stem -> depthwise -> 1x1 expand -> 1x1 project -> residual add -> max pool -> global pool
    # -> gemm: every conv blocked, no float tensor between the input's quantize and the output's
    # dequantize, the activations blocked from the stem to the global pool (one transform in, the
    # pool's NCHW{x}c output flattened for the gemm)
    m = QDQ()
    x = m.q("x", -2.0, 2.0)

    def conv(h, O, C, k=1, stride=1, groups=1, relu=True, lo=0.0, hi=6.0):
        w, ws = m.weight(rand(O, C // groups, k, k, scale=0.4))
        y = m.node("Conv", [h, w, m.bias(rand(O), m.scales[h], ws)], "c", pads=[k // 2] * 4, strides=[stride] * 2,
                   group=groups)
        return m.q(m.node("Relu", [y]) if relu else y, lo if not relu else 0.0, hi)

    h = conv(x, 16, 3, k=3, stride=2)
    d = conv(h, 16, 16, k=3, groups=16)
    e = conv(d, 32, 16)
    p = conv(e, 16, 32, relu=False, lo=-4.0, hi=4.0)
    h = m.q(m.node("Add", [h, p], "res"), -4.0, 8.0)
    h = m.q(m.node("MaxPool", [h], "mp", kernel_shape=[2, 2], strides=[2, 2]), -4.0, 8.0)
    h = m.q(m.node("Flatten", [m.q(m.node("GlobalAveragePool", [h], "gap"), -2.0, 4.0)], "flat"), -2.0, 4.0)
    w3, s3 = m.weight(rand(10, 16, scale=0.3), axis=0)
    out = m.q(m.node("Gemm", [h, w3, m.bias(rand(10), m.scales[h], s3)], "fc", transB=1), -5.0, 5.0)
    model = m.model([("x", [1, 3, 16, 16])], out, [1, 10])
    feeds = {"x": rand(1, 3, 16, 16)}
    (got,), exe = compile_run(model, feeds, isa_target)
    assert steps(got, ort_run(model, feeds)[0], m.scales[out]).max() <= 1
    ops = all_ops(exe.graph)
    assert ops.count(QCONV) == 3 and ops.count(QDW) == 1 and "qnn.conv2d" not in ops
    assert sorted(float_ops(exe.graph)) == ["qnn.dequantize", "qnn.quantize"]
    consts = const_derived(exe.graph)
    transforms = [n for n in exe.graph.nodes for b in (n.attrs["function"].body.nodes if n.op == FUSED_OP else [n])
                  if b.op == "layout_transform" and b.inputs[0] not in consts]
    assert len(transforms) <= 1
