"""The int8 depthwise convolution's micro-kernel (tir/tensor_intrin/x86_qdepthwise.py): integer dot
products over interleaved taps (vpdpbusd on zmm / ymm, vpmaddwd on AVX2), the output rows in pairs
where stride and dilation are 1 in h, one call a channel plane that pads (rows and columns outside the
input read as the pad value) and requantizes in registers. qnn.contrib_depthwise_conv2d_NCHWc is compared exactly with a
numpy integer reference (the requantization as ops/integer.py computes it), and QDQ depthwise models
with ONNX Runtime (exact against its integer kernels, within a step of ONNX's float QDQ), on the AVX2
target and the host's; each checks that the kernel took the micro-kernel of its target's ISA."""
import numpy as np
import pytest

import tessera
from tessera.graph.ir import TensorType
from tessera.graph.kernels import get_kernel
from tessera.ops.registry import get_op
from tessera.tir.tensor_intrin.x86_qconv import block_lanes
from tessera.tir.tensor_intrin.x86_qdepthwise import MAX_LOCAL_BYTES, Plane, c_source, fits, isa_for, qdepthwise_intrin

from qdq_models import QDQ, ort_run, steps

OP = "qnn.contrib_depthwise_conv2d_NCHWc"
RNG = np.random.default_rng(3131)


def reference(data, weight, bias, mult, attrs):
    """acc = the integer window sums (int64, the padded pixels pad_value), then clip(rint(float32(acc + bias)
    * mult) + zp, lo, hi) in float32 as the op's requantization does."""
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = attrs["strides"], attrs["padding"], attrs["dilation"]
    N, Cc, H, W, x = data.shape
    _, KH, KW, _ = weight.shape
    src = np.full((N, Cc, H + pt + pb, W + pl + pr, x), attrs["pad_value"], np.int64)
    src[:, :, pt:pt + H, pl:pl + W] = data
    OH = (H + pt + pb - dh * (KH - 1) - 1) // sh + 1
    OW = (W + pl + pr - dw * (KW - 1) - 1) // sw + 1
    acc = np.zeros((N, Cc, OH, OW, x), np.int64)
    for i in range(KH):
        for j in range(KW):
            win = src[:, :, i * dh:i * dh + sh * (OH - 1) + 1:sh, j * dw:j * dw + sw * (OW - 1) + 1:sw]
            acc += win * weight[None, :, i, j, None, None, :].astype(np.int64)
    acc = (acc + bias[None, :, None, None, :]).astype(np.int32)
    lo, hi = (0, 255) if attrs["out_dtype"] == "uint8" else (-128, 127)
    lo = lo if attrs["out_min"] is None else attrs["out_min"]
    hi = hi if attrs["out_max"] is None else attrs["out_max"]
    v = np.rint(acc.astype(np.float32) * mult[None, :, None, None, :]) + np.float32(attrs["output_zero_point"])
    return np.clip(v, lo, hi).astype(np.int32).astype(attrs["out_dtype"])


def run_op(target, shape, k, strides=(1, 1), padding=None, dilation=(1, 1), out_dtype="uint8", zp=3, pad_value=9,
           **extra):
    N, Cc, H, W, x = shape
    KH, KW = k
    if padding is None:
        padding = (dilation[0] * (KH // 2), dilation[1] * (KW // 2)) * 2
    data = RNG.integers(0, 256, shape).astype(np.uint8)
    weight = RNG.integers(-128, 128, (Cc, KH, KW, x)).astype(np.int8)
    bias = RNG.integers(-20000, 20000, (Cc, x)).astype(np.int32)
    mult = RNG.uniform(2e-5, 3e-4, (Cc, x)).astype(np.float32)
    if "scale" in extra:           # multipliers up to this (large: the sums saturate the output's range)
        mult = (mult * np.float32(extra.pop("scale") / 3e-4)).astype(np.float32)
    op = get_op(OP)
    attrs = op.normalize_attrs({"strides": strides, "padding": padding, "dilation": dilation,
                                "pad_value": pad_value, "output_zero_point": zp, "out_dtype": out_dtype, **extra})
    ins = (data, weight, bias, mult)
    in_types = tuple(TensorType.of(a) for a in ins)
    (out_type,) = op.infer_types(in_types, attrs)
    kern = get_kernel(OP, attrs, in_types, (out_type,), target)
    out = np.empty(tuple(out_type.shape), out_dtype)
    kern.fn(*ins, out)
    return out, reference(*ins, attrs), kern


CASES = {
    "3x3": dict(shape=(1, 2, 9, 13, None), k=(3, 3)),                       # odd width: column tail
    "3x3_stride2": dict(shape=(1, 2, 11, 15, None), k=(3, 3), strides=(2, 2)),
    "3x3_odd_rows": dict(shape=(1, 1, 7, 7, None), k=(3, 3)),               # a pair of rows and one alone
    "5x5": dict(shape=(1, 1, 10, 9, None), k=(5, 5)),                       # two tap groups
    "5x5_stride2_int8": dict(shape=(1, 2, 12, 11, None), k=(5, 5), strides=(2, 2), out_dtype="int8", zp=-4),
    "dilated": dict(shape=(1, 1, 11, 10, None), k=(3, 3), dilation=(2, 2)),
    "batch2_asymmetric": dict(shape=(2, 2, 8, 9, None), k=(3, 2), strides=(1, 2), dilation=(1, 3),
                              padding=(0, 2, 1, 1)),
    "1x1_no_padding": dict(shape=(1, 1, 5, 6, None), k=(1, 1), padding=(0, 0, 0, 0)),
    # the window past the input on every side (whole rows and columns of pad values), a clamped range
    "wide_padding_clamped": dict(shape=(1, 1, 4, 6, None), k=(3, 3), padding=(3, 2, 4, 5), zp=10, pad_value=201,
                                 out_min=12, out_max=200),
    "14x14": dict(shape=(1, 2, 14, 14, None), k=(3, 3)),                    # a tail of 2 columns after the blocks
    "large_values": dict(shape=(1, 1, 6, 7, None), k=(3, 3), scale=0.5),   # saturates both ends
}


@pytest.mark.parametrize("case", list(CASES))
def test_qdepthwise_equals_integer_reference(case, isa_target):
    kw = dict(CASES[case])
    lanes = block_lanes(isa_target)
    kw["shape"] = kw["shape"][:4] + (lanes,)
    got, want, kern = run_op(isa_target, **kw)
    np.testing.assert_array_equal(got, want)
    isa = isa_for(isa_target, lanes)
    assert f"tensor intrinsic x86_{isa}_qdepthwise_nchwc_" in kern.source.text


@pytest.mark.parametrize("target", ["c", "c -mcpu=alderlake"])
def test_qdepthwise_8_lanes_on_vnni(target):
    # blocks of 8 channels: vpdpbusd on ymm (AVX-512VL on the host, AVX-VNNI on Alder Lake)
    isa = isa_for(target, 8)
    if isa not in ("vnni256", "avxvnni") or not tessera.Target("c").has_feature("avx_vnni" if isa == "avxvnni"
                                                                               else "avx512_vnni"):
        pytest.skip(f"the host does not run {target}'s VNNI")
    for kw in (CASES["3x3"], CASES["5x5_stride2_int8"]):
        got, want, kern = run_op(target, **{**kw, "shape": kw["shape"][:4] + (8,)})
        np.testing.assert_array_equal(got, want)
        assert f"tensor intrinsic x86_{isa}_qdepthwise_nchwc_" in kern.source.text


def test_qdepthwise_many_taps_reduce_over_a_padded_copy(isa_target):
    # more than 64 taps: a reduction over the padded input (no unrolled expression, no micro-kernel)
    got, want, kern = run_op(isa_target, (1, 1, 11, 10, block_lanes(isa_target)), (9, 9), pad_value=77)
    np.testing.assert_array_equal(got, want)
    assert "tensor intrinsic" not in kern.source.text


def test_qdepthwise_rows_past_the_local_arrays_fall_back_to_loops(isa_target):
    # the kernel keeps a row's interleaved columns (and a pad row) in MAX_LOCAL_BYTES of stack: the widest
    # row that fits takes it, one column more the loop nest; both give the reference's integers
    lanes = block_lanes(isa_target)
    isa = isa_for(isa_target, lanes)

    def plane(W):
        return Plane(3, W, lanes, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 9, 3, 0, 255, "uint8")

    W = MAX_LOCAL_BYTES // (lanes * 4)        # one tap group of W columns: the arrays' size already
    while not fits(isa, plane(W)):
        W -= 1
    assert not fits(isa, plane(W + 1))
    for width, kernel in ((W, True), (W + 1, False)):
        got, want, kern = run_op(isa_target, (1, 1, 3, width, lanes), (3, 3))
        np.testing.assert_array_equal(got, want)
        assert (f"tensor intrinsic x86_{isa}_qdepthwise_nchwc_" in kern.source.text) == kernel


def test_qdepthwise_other_blocks_fall_back_to_loops():
    # a block of 4 channels: no micro-kernel, the vectorized loop nest; the same integers
    got, want, kern = run_op("c", (1, 1, 6, 7, 4), (3, 3))
    np.testing.assert_array_equal(got, want)
    assert "tensor intrinsic" not in kern.source.text


def test_kernel_source_shows_the_schedule():
    from tessera.ops.nn.qconv_nchwc import _dw_desc
    plane = Plane(7, 7, 16, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 9, -3, -128, 127, "int8")
    name = qdepthwise_intrin("vnni512", plane, _dw_desc)
    assert name == "x86_vnni512_qdepthwise_nchwc_7x7x16_k3x3_s1x1_d1x1_p1x1x1x1_v9_zm3_rm128x127_int8"
    src = c_source("vnni512", plane)
    assert "rows in pairs (3 and one row)" in src and "_mm512_dpbusd_epi32" in src
    assert "#error" in src and "tsr_qdw_quads4_zmm" in src and "tsr_qdw_requant_zmm" in src
    assert "padrow" in src     # rows in the padding read a row of pad values
    src2 = c_source("avx2", Plane(10, 10, 8, (5, 5), (2, 2), (1, 1), (0, 0, 0, 0), 0, 0, 0, 255, "uint8"))
    assert "_mm256_madd_epi16" in src2 and "one at a time" in src2 and "padrow" not in src2
    # a name alone registers its intrinsic (a tuning record's trace replayed in a fresh process)
    from tessera.tir.tensor_intrin import TensorIntrin
    name = "x86_avx2_qdepthwise_nchwc_5x6x8_k3x3_s2x1_d1x1_p1x1x1x1_v3_zm7_rm128x100_int8"
    intrin = TensorIntrin.get(name)
    assert intrin is not None and intrin.name == name


def depthwise_model(C, k, stride, H, W, batch=1, dilation=1, act="uint8", relu=True, then=None):
    m = QDQ(act, seed=C * 10 + k)
    x = m.q("x", -2.0, 3.0)
    w, ws = m.weight((RNG.standard_normal((C, 1, k, k)) * 0.3).astype(np.float32))
    b = m.bias((RNG.standard_normal(C)).astype(np.float32), m.scales[x], ws)
    pad = dilation * (k // 2)
    y = m.node("Conv", [x, w, b], "conv", pads=[pad] * 4, strides=[stride] * 2, group=C, dilations=[dilation] * 2)
    if relu:
        y = m.node("Relu", [y], "relu")
    out = m.q(y, 0.0 if relu else -4.0, 6.0)
    if then == "sigmoid":          # a table lookup fused after the convolution (its epilogue)
        out = m.q(m.node("Sigmoid", [out], "sig"), 0.0, 1.0)
    OH = (H + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    OW = (W + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    model = m.model([("x", [batch, C, H, W])], out, [batch, C, OH, OW])
    feeds = {"x": (RNG.standard_normal((batch, C, H, W)) * 1.5).astype(np.float32)}
    return m, model, out, feeds


ORT_CASES = {
    "3x3": dict(C=32, k=3, stride=1, H=10, W=13),
    "3x3_stride2": dict(C=16, k=3, stride=2, H=12, W=11, relu=False),
    "5x5_batch2": dict(C=16, k=5, stride=1, H=9, W=9, batch=2),
    "5x5_stride2": dict(C=32, k=5, stride=2, H=11, W=14),
    "dilated": dict(C=16, k=3, stride=1, H=11, W=9, dilation=2),
    "int8_activations": dict(C=16, k=3, stride=1, H=7, W=7, act="int8", relu=False),
    "then_sigmoid": dict(C=16, k=3, stride=1, H=8, W=9, then="sigmoid"),
}


@pytest.mark.parametrize("case", list(ORT_CASES))
def test_qdq_depthwise_equals_onnxruntime(case, isa_target):
    pytest.importorskip("onnxruntime")
    kw = ORT_CASES[case]
    m, model, out, feeds = depthwise_model(**kw)
    g, p = tessera.frontend.from_onnx(model)
    exe = tessera.compile(g, p, target=isa_target)
    (got,) = exe.run(feeds)
    if kw.get("then") is None:
        assert steps(got, ort_run(model, feeds)[0], m.scales[out]).max() == 0
    assert steps(got, ort_run(model, feeds, optimized=False)[0], m.scales[out]).max() <= 1
    lanes = block_lanes(isa_target) if kw["C"] % block_lanes(isa_target) == 0 else 8
    isa = isa_for(isa_target, lanes)
    sources = [getattr(k.source, "text", "") for k in exe.kernels]
    assert any(f"tensor intrinsic x86_{isa}_qdepthwise_nchwc_" in s for s in sources)
