"""image.resize against onnx's reference Resize (the source of the ONNX backend tests' data)."""
from functools import partial

import numpy as np
import pytest

import tessera
from nn_onnx_ref import reference_run
from op_check import infer, run_op as _run_op

run_op = partial(_run_op, schedule=True)  # every op runs with its default schedule
RNG = np.random.default_rng(17)
X = RNG.standard_normal((1, 2, 5, 7)).astype(np.float32)


def _resize(x, scales, roi=None, **attrs):
    sizes = tuple(int(np.floor(d * s)) for d, s in zip(x.shape, scales))
    scales32 = np.array(scales, np.float32)
    (y,) = run_op("image.resize", x, sizes=sizes, scales=tuple(float(s) for s in scales32),
                  roi=tuple(roi) if roi is not None else (), **attrs)
    onnx_attrs = {("mode" if k == "method" else k): (int(v) if isinstance(v, bool) else v) for k, v in attrs.items()}
    roi_arr = np.array(roi if roi is not None else [], np.float32)
    (ref,) = reference_run("Resize", [x, roi_arr, scales32], onnx_attrs, opset=19)
    assert y.shape == ref.shape
    return y, ref


CASES = [
    ("nearest_half_pixel_up", (1, 1, 2.0, 1.5), dict(method="nearest")),
    ("nearest_asymmetric_floor_down", (1, 1, 0.6, 0.8), dict(method="nearest", coordinate_transformation_mode="asymmetric",
                                                          nearest_mode="floor")),
    ("nearest_align_corners_prefer_ceil", (1, 1, 3.0, 0.5), dict(method="nearest", nearest_mode="round_prefer_ceil",
                                                                  coordinate_transformation_mode="align_corners")),
    ("nearest_half_pixel_symmetric_ceil", (1, 1, 0.6, 0.8), dict(method="nearest", nearest_mode="ceil",
                                                                  coordinate_transformation_mode="half_pixel_symmetric")),
    ("linear_half_pixel", (1, 1, 2.0, 1.5), dict(method="linear")),
    ("linear_pytorch_half_pixel_down", (1, 1, 0.6, 0.8), dict(method="linear",
                                                               coordinate_transformation_mode="pytorch_half_pixel")),
    ("linear_align_corners", (1, 1, 3.0, 0.5), dict(method="linear", coordinate_transformation_mode="align_corners")),
    ("linear_antialias_down", (1, 1, 0.6, 0.5), dict(method="linear", antialias=True)),
    ("cubic_half_pixel", (1, 1, 2.0, 1.5), dict(method="cubic")),
    ("cubic_a_exclude_outside", (1, 1, 0.6, 1.5), dict(method="cubic", cubic_coeff_a=-0.5, exclude_outside=True)),
    ("cubic_antialias_down", (1, 1, 0.6, 0.5), dict(method="cubic", antialias=True)),
    ("cubic_asymmetric", (1, 1, 3.0, 0.8), dict(method="cubic", coordinate_transformation_mode="asymmetric")),
    ("linear_all_axes", (2.0, 1.5, 0.6, 1.0), dict(method="linear")),
]


@pytest.mark.parametrize("name,scales,attrs", CASES, ids=[c[0] for c in CASES])
def test_resize_matches_onnx_reference(name, scales, attrs):
    y, ref = _resize(X, scales, **attrs)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", ["nearest", "linear"])
def test_resize_tf_crop_and_resize_extrapolates(method):
    roi = [0, 0, 0.4, -0.2, 1, 1, 1.3, 0.8]
    y, ref = _resize(X, (1, 1, 1.6, 1.2), roi, method=method, coordinate_transformation_mode="tf_crop_and_resize",
                     extrapolation_value=-7.0)
    assert (y == -7.0).any()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_resize_int8_rounds_half_to_even_and_saturates():
    x = np.array([[[[-128, 127, 0, 3]]]], np.int8)
    y, ref = _resize(x, (1, 1, 1, 1.75), method="cubic")
    np.testing.assert_array_equal(y, ref)


def test_resize_keeps_symbolic_batch():
    x = RNG.standard_normal((3, 2, 4, 4)).astype(np.float32)
    (y,) = run_op("image.resize", x, sizes=("N", 2, 8, 8), method="nearest", sym={0: ("N", 2, 4, 4)})
    np.testing.assert_array_equal(y, x.repeat(2, axis=2).repeat(2, axis=3))


def test_resize_refuses_bad_attributes():
    with pytest.raises(tessera.TesseraError, match="method"):
        infer("image.resize", ((1, 1, 4, 4), "float32"), sizes=(1, 1, 8, 8), method="bilinear")
    with pytest.raises(tessera.ShapeError, match="one entry per axis"):
        infer("image.resize", ((1, 1, 4, 4), "float32"), sizes=(8, 8))
    with pytest.raises(tessera.ShapeError, match="symbolic"):
        infer("image.resize", (("N", 1, 4, 4), "float32"), sizes=(2, 1, 8, 8))
    with pytest.raises(tessera.ShapeError, match="roi"):
        infer("image.resize", ((1, 1, 4, 4), "float32"), sizes=(1, 1, 8, 8),
              coordinate_transformation_mode="tf_crop_and_resize")
