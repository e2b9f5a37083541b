"""ONNX quantization converters against onnxruntime and the reference: QuantizeLinear/DequantizeLinear
at old and new opsets, QLinearMatMul with per-row/per-column scales given at runtime, QLinearConv
with per-channel weight scales and a bias, DynamicQuantizeLinear; the refusal of float6 (the float8 and
int4/int2 types: test_onnx_lowp.py)."""
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_family_check import check, one_node

from tessera.errors import UnsupportedOpError
from tessera.frontend.onnx import from_onnx

RNG = np.random.default_rng(42)


def test_quantize_dequantize_old_and_new_opsets():
    x = (RNG.standard_normal((2, 3, 4)) * 50).astype(np.float32)
    s, z = np.array(0.7, np.float32), np.array(-3, np.int8)
    check(one_node("QuantizeLinear", {"x": x}, inits={"s": s, "z": z}, opset=10), {"x": x})
    sa, za = RNG.uniform(0.2, 1, 3).astype(np.float32), RNG.integers(0, 20, 3).astype(np.uint8)
    check(one_node("QuantizeLinear", {"x": x}, dict(axis=1), inits={"s": sa, "z": za}, opset=13), {"x": x})
    q = RNG.integers(-128, 127, (2, 3, 4)).astype(np.int8)
    check(one_node("DequantizeLinear", {"q": q}, inits={"s": s, "z": z}, opset=19), {"q": q}, rtol=1e-6)
    m = one_node("QuantizeLinear", {"x": x}, dict(output_dtype=TensorProto.INT16), inits={"s": s}, opset=21)
    check(m, {"x": x}, want=ReferenceEvaluator(m).run(None, {"x": x}))


def test_qlinear_matmul_runtime_scales_per_row_and_column():
    a = RNG.integers(0, 255, (4, 6)).astype(np.uint8)
    b = RNG.integers(0, 255, (6, 5)).astype(np.uint8)
    feeds = {"a": a, "sa": RNG.uniform(0.01, 0.05, 4).astype(np.float32), "za": np.array(120, np.uint8),
             "b": b, "sb": RNG.uniform(0.01, 0.05, 5).astype(np.float32), "zb": np.array(130, np.uint8),
             "sy": np.array(0.2, np.float32), "zy": np.array(128, np.uint8)}
    m = one_node("QLinearMatMul", feeds, opset=21)
    acc = (a.astype(np.int64) - 120) @ (b.astype(np.int64) - 130)
    mult = (feeds["sa"][:, None] * feeds["sb"] / feeds["sy"]).astype(np.float64)
    want = np.clip(np.rint(acc * mult + 128), 0, 255).astype(np.uint8)   # the reference, per row and column
    check(m, feeds, want=[want])


def test_qlinear_conv_per_channel_weight_scale_and_bias():
    x = RNG.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    w = RNG.integers(-127, 127, (3, 2, 3, 3)).astype(np.int8)
    inits = {"xs": np.array(0.02, np.float32), "xz": np.array(100, np.uint8), "w": w,
             "ws": RNG.uniform(0.005, 0.02, 3).astype(np.float32), "wz": np.zeros(3, np.int8),
             "ys": np.array(0.1, np.float32), "yz": np.array(90, np.uint8),
             "bias": RNG.integers(-500, 500, 3).astype(np.int32)}
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"]
    node = helper.make_node("QLinearConv", names, ["y"], pads=[1, 1, 0, 0], strides=[1, 2])
    from onnx import numpy_helper
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
                          [helper.make_empty_tensor_value_info("y")],
                          initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 10)])
    # (onnxruntime's uint8 x int8 kernels saturate int16 partial sums on CPUs without VNNI, so the
    # exact reference is the judge here)
    check(m, {"x": x}, want=ReferenceEvaluator(m).run(None, {"x": x}))


def test_dynamic_quantize_linear_three_outputs():
    x = (RNG.standard_normal((3, 7)) * 3 + 1).astype(np.float32)
    check(one_node("DynamicQuantizeLinear", {"x": x}, opset=11, outputs=("y", "s", "z")), {"x": x})


def test_float6_quantization_is_refused_as_unsupported():
    """float8 and int4/int2 quantize (tests/frontend/test_onnx_lowp.py); float6 has no tessera dtype."""
    x = np.ones((2, 2), np.float32)
    m = one_node("QuantizeLinear", {"x": x}, dict(output_dtype=TensorProto.FLOAT6E2M3),
                 inits={"s": np.array(1, np.float32)}, opset=25)
    with pytest.raises(UnsupportedOpError, match="FLOAT6E2M3"):
        from_onnx(m)
