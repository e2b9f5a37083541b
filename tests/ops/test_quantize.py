"""qnn.quantize / dequantize / requantize / dynamic_quantize against onnx's reference
QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear (per tensor, per axis, blocked with a
remainder block, ties, saturation, NaN, float16 division)."""
import numpy as np
import pytest
from nn_onnx_ref import reference_run
from op_check import infer, run_op, run_ops

from tessera.errors import DTypeError, ShapeError

RNG = np.random.default_rng(41)
# the reference's numpy casts of saturating values warn; the results are what is compared
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                                        "ignore:invalid value encountered:RuntimeWarning")
ONNX_TYPE = {"int8": 3, "uint8": 2, "int16": 5, "uint16": 4}


def _x(shape, scale=300.0, dtype=np.float32):
    x = (RNG.standard_normal(shape) * scale).astype(dtype)
    flat = x.reshape(-1)
    flat[:4] = [0.5, 1.5, -2.5, 1e9]          # ties (half to even) and saturation
    return x


@pytest.mark.parametrize("out", ["int8", "uint8", "int16", "uint16"])
def test_quantize_per_tensor_and_per_axis_match_the_reference(out):
    x = _x((3, 4, 5))
    s = np.array(2.0, np.float32)
    zp = np.array(3, out)
    sa = RNG.uniform(0.5, 4, 4).astype(np.float32)
    za = RNG.integers(0, 50, 4).astype(out)
    outs = run_ops([x, s, zp, sa, za], [("qnn.quantize", {"out_dtype": out}, [0, 1, 2]),
                                       ("qnn.quantize", {"out_dtype": out, "axis": -2}, [0, 3, 4]),
                                       ("qnn.quantize", {"out_dtype": out}, [0, 1])])
    np.testing.assert_array_equal(outs[0][0], reference_run("QuantizeLinear", [x, s, zp], {}, opset=21)[0])
    np.testing.assert_array_equal(outs[1][0], reference_run("QuantizeLinear", [x, sa, za], dict(axis=-2), opset=21)[0])
    want = reference_run("QuantizeLinear", [x, s], dict(output_dtype=ONNX_TYPE[out]), opset=21)[0]
    np.testing.assert_array_equal(outs[2][0], want)
    assert outs[2][0].dtype == np.dtype(out)


def test_quantize_and_dequantize_blocked_with_a_remainder_block():
    x = _x((2, 7), scale=40)
    s = RNG.uniform(0.5, 2, (2, 3)).astype(np.float32)   # block_size 3 over 7: blocks 3, 3, 1
    z = RNG.integers(-10, 10, (2, 3)).astype(np.int8)
    attrs = dict(axis=1, block_size=3)
    (q,) = run_op("qnn.quantize", x, s, z, out_dtype="int8", **attrs)
    np.testing.assert_array_equal(q, reference_run("QuantizeLinear", [x, s, z], attrs, opset=21)[0])
    (d,) = run_op("qnn.dequantize", q, s, z, **attrs)
    np.testing.assert_allclose(d, reference_run("DequantizeLinear", [q, s, z], attrs, opset=21)[0], rtol=1e-6)


def test_quantize_float16_divides_in_half_and_nan_goes_to_the_lowest_value():
    x = (RNG.standard_normal((4, 6)) * 20).astype(np.float16)
    x[0, :3] = [2e4, -2e4, 0.185]                  # saturation both ways; 0.185 / 0.37 ties in half
    x[1, 1] = np.nan
    s = np.array(0.37, np.float16)
    z = np.array(120, np.uint8)
    (q,) = run_op("qnn.quantize", x, s, z, out_dtype="uint8")
    want = reference_run("QuantizeLinear", [x, s, z], {}, opset=21)[0]
    np.testing.assert_array_equal(q[~np.isnan(x)], want[~np.isnan(x)])
    assert q[1, 1] == 0
    (q32,) = run_op("qnn.quantize", x, s, z, out_dtype="uint8", precision="float32")
    xf = np.where(np.isnan(x), 0, x)
    np.testing.assert_array_equal(q32[~np.isnan(x)], reference_run(
        "QuantizeLinear", [xf, s, z], dict(precision=1), opset=23)[0][~np.isnan(x)])


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int32"])
def test_dequantize_per_axis_and_output_dtype(dtype):
    info = np.iinfo(dtype)
    x = RNG.integers(max(info.min, -(1 << 20)), min(info.max, 1 << 20), (3, 5)).astype(dtype)
    s = RNG.uniform(0.01, 1, 3).astype(np.float32)
    z = RNG.integers(0, 100, 3).astype(dtype)
    outs = run_ops([x, s, z], [("qnn.dequantize", {"axis": 0}, [0, 1, 2]),
                               ("qnn.dequantize", {"axis": 0, "out_dtype": "float16"}, [0, 1, 2])])
    want = reference_run("DequantizeLinear", [x, s, z], dict(axis=0), opset=23)[0]
    np.testing.assert_allclose(outs[0][0], want, rtol=1e-6)
    want16 = reference_run("DequantizeLinear", [x, s, z], dict(axis=0, output_dtype=10), opset=23)[0]
    assert outs[1][0].dtype == np.float16
    np.testing.assert_array_equal(outs[1][0], want16)


def test_requantize_per_channel_in_float64():
    acc = RNG.integers(-50000, 50000, (2, 3, 4)).astype(np.int32)
    m = RNG.uniform(1e-4, 1e-2, (3, 1)).astype(np.float32)
    z = np.array(-5, np.int8)
    (got,) = run_op("qnn.requantize", acc, m, z)
    want = np.clip(np.rint(acc * m.astype(np.float64) + z), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ["mixed", "positive", "negative", "constant"])
def test_dynamic_quantize_matches_the_reference(kind):
    x = {"mixed": RNG.standard_normal((3, 5)) * 4, "positive": RNG.uniform(1, 9, (3, 5)),
         "negative": -RNG.uniform(1, 9, (3, 5)), "constant": np.full((3, 5), 2.5)}[kind].astype(np.float32)
    y, s, z = run_op("qnn.dynamic_quantize", x)
    wy, ws, wz = reference_run("DynamicQuantizeLinear", [x], {}, num_outputs=3, opset=11)
    np.testing.assert_array_equal(y, wy)
    np.testing.assert_array_equal(s, ws)
    np.testing.assert_array_equal(z, wz)
    assert (y.dtype, s.dtype, z.dtype, s.shape) == (np.uint8, np.float32, np.uint8, ())


def test_quantize_refusals():
    f = "float32"
    with pytest.raises(ShapeError, match="along axis 1"):
        infer("qnn.quantize", ((2, 3), f), ((2,), f))
    with pytest.raises(ShapeError, match="block_size 2 along axis 1"):
        infer("qnn.quantize", ((2, 5), f), ((2, 2), f), block_size=2)
    with pytest.raises(DTypeError, match="zero_point is int8 but out_dtype is uint8"):
        infer("qnn.quantize", ((2, 3), f), ((), f), ((), "int8"))
    with pytest.raises(DTypeError, match="not a quantized type"):
        infer("qnn.quantize", ((2, 3), f), ((), f), out_dtype="int32")
    with pytest.raises(DTypeError, match="zero_point is uint8 but data is int8"):
        infer("qnn.dequantize", ((2, 3), "int8"), ((), f), ((), "uint8"))
    with pytest.raises(ShapeError, match="without growing"):
        infer("qnn.requantize", ((2, 3), "int32"), ((4, 1, 1), f), ((), "int8"))
