"""image.grid_sample against onnx's reference GridSample (every mode and padding, 1-d to 3-d) and
onnxruntime (4-d)."""
import numpy as np
import pytest
from nn_onnx_ref import ort_run, reference_run
from op_check import infer, run_op

from tessera.errors import DTypeError, ShapeError, TesseraError

RNG = np.random.default_rng(31)


def _grid(shape, lo=-1.3, hi=1.3, dtype=np.float32):
    g = RNG.uniform(lo, hi, shape).astype(dtype)
    g.reshape(-1)[:3] = [-1.0, 1.0, 0.0]  # borders and the centre exactly
    return g


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d_matches_the_onnx_reference(mode, pad, align):
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    g = _grid((2, 3, 6, 2))
    (got,) = run_op("image.grid_sample", x, g, mode=mode, padding_mode=pad, align_corners=bool(align))
    (want,) = reference_run("GridSample", [x, g], dict(mode=mode, padding_mode=pad, align_corners=align), opset=20)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode,pad", [("bilinear", "reflection"), ("bicubic", "zeros"), ("nearest", "border")])
def test_grid_sample_2d_matches_onnxruntime_far_outside(mode, pad):
    # (onnxruntime's bicubic with border/reflection pads each tap as PyTorch does; the ONNX reference,
    # which tessera follows, moves the point inside first: they differ there, so those are not compared)
    x = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
    g = _grid((1, 5, 5, 2), lo=-4, hi=4)
    name = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    (got,) = run_op("image.grid_sample", x, g, mode=name, padding_mode=pad)
    (want,) = ort_run("GridSample", [x, g], dict(mode=mode, padding_mode=pad), opset=16)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode,pad,align", [("linear", "reflection", 1), ("cubic", "zeros", 0),
                                            ("nearest", "border", 0)])
def test_grid_sample_3d_and_1d(mode, pad, align):
    x = RNG.standard_normal((1, 2, 3, 4, 3)).astype(np.float64)
    g = _grid((1, 2, 3, 2, 3), dtype=np.float64)
    (got,) = run_op("image.grid_sample", x, g, mode=mode, padding_mode=pad, align_corners=bool(align))
    (want,) = reference_run("GridSample", [x, g], dict(mode=mode, padding_mode=pad, align_corners=align), opset=20)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    x1 = RNG.standard_normal((2, 1, 7)).astype(np.float32)
    g1 = _grid((2, 5, 1))
    (got,) = run_op("image.grid_sample", x1, g1, mode=mode, padding_mode=pad, align_corners=bool(align))
    (want,) = reference_run("GridSample", [x1, g1], dict(mode=mode, padding_mode=pad, align_corners=align), opset=20)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_grid_sample_symbolic_batch_and_float16():
    x = RNG.standard_normal((3, 2, 4, 4)).astype(np.float16)
    g = _grid((3, 2, 2, 2), dtype=np.float16)
    (got,) = run_op("image.grid_sample", x, g, sym={0: ("N", 2, 4, 4), 1: ("N", 2, 2, 2)})
    (want,) = reference_run("GridSample", [x.astype(np.float32), g.astype(np.float32)], {}, opset=20)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3, atol=2e-3)
    t = infer("image.grid_sample", (("N", 2, 4, 4), "float32"), (("N", 7, 1, 2), "float32"))[0]
    assert t.shape == ("N", 2, 7, 1)


def test_grid_sample_refusals():
    f = "float32"
    with pytest.raises(ShapeError, match=r"grid must be \(N, H1..H2, 2\)"):
        infer("image.grid_sample", ((1, 1, 4, 4), f), ((1, 3, 3, 3), f))
    with pytest.raises(ShapeError, match="batch"):
        infer("image.grid_sample", ((2, 1, 4, 4), f), ((3, 3, 3, 2), f))
    with pytest.raises(DTypeError, match="grid"):
        infer("image.grid_sample", ((1, 1, 4, 4), f), ((1, 3, 3, 2), "int32"))
    with pytest.raises(TesseraError, match="padding_mode"):
        infer("image.grid_sample", ((1, 1, 4, 4), f), ((1, 3, 3, 2), f), padding_mode="wrap")


# ---------------------------------------------------------------------------------------------
# col2im, roi_align, deform_conv2d
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("image,block,attrs", [
    ((9,), (3,), dict(dilation=(2,), padding=(1, 2), strides=(2,))),
    ((4, 5, 3), (2, 3, 2), dict(padding=(1, 0, 1, 0, 1, 1), strides=(1, 2, 1))),
])
def test_col2im_1d_and_3d_match_the_reference(image, block, attrs):
    r = len(image)
    dil, pads, strides = attrs.get("dilation", (1,) * r), attrs["padding"], attrs["strides"]
    blocks = [(image[d] + pads[d] + pads[r + d] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1 for d in range(r)]
    x = RNG.standard_normal((2, 3 * int(np.prod(block)), int(np.prod(blocks)))).astype(np.float32)
    (got,) = run_op("image.col2im", x, image_shape=image, block_shape=block, **attrs)
    (want,) = reference_run("Col2Im", [x, np.array(image, np.int64), np.array(block, np.int64)],
                            dict(dilations=list(dil), pads=list(pads), strides=list(strides)), opset=18)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_col2im_refuses_a_wrong_block_count():
    with pytest.raises(ShapeError, match="makes"):
        infer("image.col2im", ((1, 4, 7), "float32"), image_shape=(3, 3), block_shape=(2, 2))


@pytest.mark.parametrize("mode,ct", [("avg", "half_pixel"), ("max", "output_half_pixel")])
def test_roi_align_adaptive_grid_matches_the_reference(mode, ct):
    x = RNG.standard_normal((2, 3, 12, 10)).astype(np.float32)
    rois = np.array([[0.5, 1.0, 7.5, 9.0], [2.0, 2.0, 3.0, 2.5], [-3.0, -2.0, 15.0, 20.0], [1, 1, 1, 1]], np.float32)
    bidx = np.array([1, 0, 1, 0], np.int64)
    # sampling_ratio 0: the grid adapts per ROI; max_grid is the bound the converter derives from the ROIs
    (got,) = run_op("image.roi_align", x, rois, bidx, output_size=(3, 4), spatial_scale=0.8, sampling_ratio=0,
                    max_grid=(8, 8), mode=mode, half_pixel=ct == "half_pixel")
    (want,) = reference_run("RoiAlign", [x, rois, bidx], dict(output_height=3, output_width=4, spatial_scale=0.8,
                                                             sampling_ratio=0, mode=mode,
                                                             coordinate_transformation_mode=ct), opset=16)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["groups", "mask_bias_dilation"])
def test_deform_conv_matches_the_reference(case):
    if case == "groups":
        x = RNG.standard_normal((2, 4, 5, 6)).astype(np.float32)
        w = RNG.standard_normal((6, 2, 2, 3)).astype(np.float32)
        attrs, onnx_attrs = dict(groups=2, offset_groups=2, strides=(1, 2), padding=(1, 0, 0, 1)), \
            dict(group=2, offset_group=2, strides=[1, 2], pads=[1, 0, 0, 1])
        oh, ow = (5 + 1 - 2) // 1 + 1, (6 + 1 - 3) // 2 + 1
        extra, flags = [], {}
        og = 2
    else:
        x = RNG.standard_normal((1, 2, 6, 6)).astype(np.float32)
        w = RNG.standard_normal((3, 2, 2, 2)).astype(np.float32)
        attrs, onnx_attrs = dict(dilation=(2, 1)), dict(dilations=[2, 1])
        oh, ow = 6 - 2, 6 - 1
        og = 1
        extra = [RNG.standard_normal(3).astype(np.float32), RNG.uniform(0, 1, (1, og * 4, oh, ow)).astype(np.float32)]
        flags = dict(has_bias=True, has_mask=True)
    kh, kw = w.shape[2:]
    off = (RNG.standard_normal((x.shape[0], og * kh * kw * 2, oh, ow)) * 1.5).astype(np.float32)
    (got,) = run_op("image.deform_conv2d", x, w, off, *extra, **attrs, **flags)
    (want,) = reference_run("DeformConv", [x, w, off] + extra, onnx_attrs, opset=19)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_grid_sample_integer_data_interpolates_in_float_and_truncates():
    x = RNG.integers(-50, 50, (1, 2, 4, 5)).astype(np.int32)
    g = _grid((1, 3, 3, 2))
    (near,) = run_op("image.grid_sample", x, g, mode="nearest", padding_mode="border")
    np.testing.assert_array_equal(near, reference_run("GridSample", [x, g], dict(mode="nearest", padding_mode="border"),
                                                      opset=20)[0])
    (lin,) = run_op("image.grid_sample", x, g, mode="linear")
    want = reference_run("GridSample", [x.astype(np.float64), g.astype(np.float64)], dict(mode="linear"), opset=20)[0]
    assert lin.dtype == np.int32
    np.testing.assert_array_equal(lin, np.trunc(want).astype(np.int32))
