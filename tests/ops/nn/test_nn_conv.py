"""nn.conv{1,2,3}d, nn.conv{1,2,3}d_transpose and nn.conv_integer against onnxruntime."""
from functools import partial

import numpy as np
import pytest

import tessera
from nn_onnx_ref import ort_run
from op_check import BF16, infer, run_op as _run_op

run_op = partial(_run_op, schedule=True)  # every op runs with its default schedule
RNG = np.random.default_rng(7)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(np.float32).astype(dtype)


def _np_conv2d(x, w, pad):
    """Direct 2-d convolution (stride 1, one group) in numpy: the float64 reference."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    oh, ow = xp.shape[2] - kh + 1, xp.shape[3] - kw + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
    return out


def _onnx_conv_attrs(strides, padding, dilation, groups):
    return dict(strides=list(strides), pads=list(padding), dilations=list(dilation), group=groups)


CONV_CASES = [
    # name, data shape, weight shape, strides, padding (begin..., end...), dilation, groups
    ("1d_stride_pad", (2, 3, 11), (4, 3, 3), (2,), (1, 2), (1,), 1),
    ("2d_asym_pad_dilation_groups", (2, 4, 9, 10), (6, 2, 3, 3), (2, 1), (1, 0, 2, 1), (1, 2), 2),
    ("2d_depthwise_multiplier", (1, 4, 8, 7), (8, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 4),
    ("2d_pointwise", (1, 8, 5, 6), (5, 8, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ("3d", (1, 2, 5, 6, 7), (3, 2, 2, 3, 2), (1, 2, 1), (0, 1, 1, 1, 0, 0), (2, 1, 1), 1),
    # output channels a multiple of 8: the packed form (kernel taps / input channels unrolled)
    ("2d_packed_3x3", (2, 8, 9, 10), (32, 8, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ("2d_packed_1x1_stride2", (1, 16, 7, 7), (16, 16, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1),
    ("2d_packed_5x5_partly_unrolled", (1, 3, 11, 11), (16, 3, 5, 5), (2, 1), (2, 1, 0, 2), (1, 2), 1),
    ("1d_packed", (1, 4, 20), (8, 4, 3), (2,), (1, 1), (1,), 1),
    ("3d_packed", (1, 2, 5, 6, 7), (8, 2, 3, 3, 3), (1, 1, 1), (1, 1, 1, 1, 1, 1), (1, 1, 1), 1),
]


@pytest.mark.parametrize("name,xs,ws,strides,padding,dilation,groups", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv_matches_onnxruntime(name, xs, ws, strides, padding, dilation, groups):
    nd = len(xs) - 2
    x, w = rand(*xs), rand(*ws)
    (y,) = run_op(f"nn.conv{nd}d", x, w, strides=strides, padding=padding, dilation=dilation, groups=groups)
    (ref,) = ort_run("Conv", [x, w], _onnx_conv_attrs(strides, padding, dilation, groups))
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_conv2d_other_float_dtypes_accumulate_precisely(dtype):
    x, w = rand(1, 16, 6, 6, dtype=dtype), rand(16, 16, 3, 3, dtype=dtype)
    (y,) = run_op("nn.conv2d", x, w, padding=(1, 1, 1, 1))
    assert y.dtype == (BF16 if dtype == "bfloat16" else np.dtype(dtype))
    ref = _np_conv2d(x.astype(np.float64), w.astype(np.float64), pad=1)
    # one rounding of an exactly accumulated sum: within half an ulp of the narrow type
    tol = {"float16": 1e-3, "bfloat16": 8e-3, "float64": 1e-12}[dtype]
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_conv2d_symbolic_batch_runs_any_batch():
    w = rand(8, 2, 3, 3)
    for n in (1, 3):
        x = rand(n, 2, 7, 7)
        (y,) = run_op("nn.conv2d", x, w, strides=(2, 2), padding=(1, 1, 1, 1), sym={0: ("N", 2, 7, 7)})
        (ref,) = ort_run("Conv", [x, w], dict(strides=[2, 2], pads=[1, 1, 1, 1]))
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    (t,) = infer("nn.conv2d", (("N", 2, 7, 7), "float32"), ((3, 2, 3, 3), "float32"), strides=(2, 2))
    assert t.shape == ("N", 3, 3, 3)
    (t,) = infer("nn.conv2d", (("N", 2, 7, 7), "float32"), ((8, 2, 3, 3), "float32"), strides=(2, 2))
    assert t.shape == ("N", 8, 3, 3)


TRANSPOSE_CASES = [
    ("1d_stride", (1, 3, 5), (3, 2, 3), (2,), (0, 0), (1,), 1, (0,)),
    ("2d_pads_output_padding", (2, 2, 4, 5), (2, 3, 3, 3), (2, 3), (1, 0, 0, 1), (1, 1), 1, (1, 2)),
    ("2d_groups_dilation", (1, 4, 4, 4), (4, 2, 2, 3), (1, 2), (0, 1, 0, 1), (2, 1), 2, (0, 1)),
    ("3d", (1, 2, 3, 3, 2), (2, 2, 2, 2, 2), (2, 1, 2), (0, 0, 0, 0, 0, 0), (1, 1, 1), 1, (0, 0, 0)),
]


@pytest.mark.parametrize("name,xs,ws,strides,padding,dilation,groups,out_pad", TRANSPOSE_CASES,
                         ids=[c[0] for c in TRANSPOSE_CASES])
def test_conv_transpose_matches_onnxruntime(name, xs, ws, strides, padding, dilation, groups, out_pad):
    nd = len(xs) - 2
    x, w = rand(*xs), rand(*ws)
    (y,) = run_op(f"nn.conv{nd}d_transpose", x, w, strides=strides, padding=padding, dilation=dilation,
                  groups=groups, output_padding=out_pad)
    attrs = _onnx_conv_attrs(strides, padding, dilation, groups)
    attrs["output_padding"] = list(out_pad)
    (ref,) = ort_run("ConvTranspose", [x, w], attrs)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_conv_integer_subtracts_zero_points_and_pads_with_them():
    x = RNG.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    w = RNG.integers(0, 255, (3, 2, 3, 3)).astype(np.uint8)
    xz, wz = np.array(17, np.uint8), np.array(130, np.uint8)
    (y,) = run_op("nn.conv_integer", x, w, xz, wz, padding=(1, 1, 1, 1))
    (ref,) = ort_run("ConvInteger", [x, w, xz, wz], dict(pads=[1, 1, 1, 1]), opset=10)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("op,types,attrs,error,match", [
    ("nn.conv2d", [((1, 3, 8, 8), "float32"), ((4, 3, 3), "float32")], {}, tessera.ShapeError, "weight must have rank 4"),
    ("nn.conv2d", [((1, 4, 8, 8), "float32"), ((4, 3, 3, 3), "float32")], {"groups": 2}, tessera.ShapeError,
     "3 input channels per group"),
    ("nn.conv2d", [((1, 6, 8, 8), "float32"), ((5, 3, 3, 3), "float32")], {"groups": 2}, tessera.ShapeError,
     "not divisible by groups"),
    ("nn.conv2d", [((1, 3, 4, 4), "float32"), ((2, 3, 5, 5), "float32")], {}, tessera.ShapeError,
     "larger than the padded input"),
    ("nn.conv2d", [((1, 3, 4, 4), "float32"), ((2, 3, 3, 3), "float32")], {"dilation": (3, 1)}, tessera.ShapeError,
     "dilated extent 7"),
    ("nn.conv2d", [((1, 3, 8, 8), "float32"), ((2, 3, 3, 3), "float16")], {}, tessera.DTypeError, "weight"),
    ("nn.conv2d", [((1, 3, "H", 8), "float32"), ((2, 3, 3, 3), "float32")], {}, tessera.ShapeError, "static"),
    ("nn.conv2d", [((1, 3, 8, 8), "bool"), ((2, 3, 3, 3), "bool")], {}, tessera.DTypeError, "bool"),
    ("nn.conv2d", [((1, 3, 8, 8), "float32"), ((2, 3, 3, 3), "float32")], {"padding": (1, -1)}, tessera.TesseraError,
     "negative padding"),
    ("nn.conv2d", [((1, 3, 8, 8), "float32"), ((2, 3, 3, 3), "float32")], {"strides": (0, 1)}, tessera.TesseraError,
     "strides"),
    ("nn.conv2d_transpose", [((1, 3, 4, 4), "float32"), ((2, 3, 3, 3), "float32")], {}, tessera.ShapeError,
     "has 2 input channels but data has 3"),
    ("nn.conv2d_transpose", [((1, 2, 4, 4), "float32"), ((2, 3, 3, 3), "float32")], {"output_padding": (1, 0)},
     tessera.ShapeError, "output_padding"),
])
def test_conv_infer_refuses_bad_input(op, types, attrs, error, match):
    with pytest.raises(error, match=match):
        infer(op, *types, **attrs)
