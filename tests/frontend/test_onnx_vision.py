"""ONNX GridSample / AffineGrid converters against onnxruntime and the reference (old mode names,
1-pixel axes, AffineGrid feeding GridSample)."""
import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_family_check import check, one_node, run_tessera

from tessera.errors import UnsupportedOpError
from tessera.frontend.onnx import from_onnx

RNG = np.random.default_rng(32)


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")   # the reference, on 1-pixel axes
@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_2d_and_3d_with_single_pixel_axes(align):
    for size, r in (([2, 3, 1, 5], 2), ([1, 1, 2, 1, 3], 3)):
        theta = RNG.standard_normal((size[0], r, r + 1)).astype(np.float32)
        m = one_node("AffineGrid", {"theta": theta}, dict(align_corners=align), opset=20,
                     inits={"size": np.array(size, np.int64)}, outputs=("grid",))
        want = ReferenceEvaluator(m).run(None, {"theta": theta})
        check(m, {"theta": theta}, want=want, rtol=1e-5, atol=1e-6)


def test_affine_grid_into_grid_sample_matches_onnxruntime():
    x = RNG.standard_normal((2, 3, 5, 6)).astype(np.float32)
    theta = np.array([[[0.9, -0.2, 0.1], [0.3, 1.1, -0.2]], [[1.2, 0.0, 0.3], [0.1, 0.8, 0.0]]], np.float32)
    nodes = [helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=0),
             helper.make_node("GridSample", ["x", "grid"], ["y"], mode="linear", padding_mode="border")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, x.shape),
                                       helper.make_tensor_value_info("theta", 1, theta.shape)],
                          [helper.make_empty_tensor_value_info("y")],
                          initializer=[numpy_helper.from_array(np.array([2, 3, 4, 7], np.int64), "size")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    check(m, {"x": x, "theta": theta}, rtol=1e-5, atol=1e-5)


def test_grid_sample_opset16_names_and_refusals():
    x = RNG.standard_normal((1, 2, 3, 3)).astype(np.float32)
    g = RNG.uniform(-1, 1, (1, 2, 2, 2)).astype(np.float32)
    check(one_node("GridSample", {"x": x, "g": g}, dict(mode="bicubic", align_corners=1), opset=16),
          {"x": x, "g": g}, rtol=1e-5, atol=1e-5)
    with pytest.raises(UnsupportedOpError, match="mode='bicubic'"):
        from_onnx(one_node("GridSample", {"x": x, "g": g}, dict(mode="bicubic"), opset=20))
    with pytest.raises(UnsupportedOpError, match="must be a constant"):
        theta = np.zeros((1, 2, 3), np.float32)
        from_onnx(one_node("AffineGrid", {"theta": theta, "size": np.array([1, 1, 2, 2], np.int64)}, opset=20,
                           outputs=("grid",)), specialize=False)
    got, _ = run_tessera(one_node("AffineGrid", {"theta": np.eye(2, 3, dtype=np.float32)[None]}, opset=20,
                                  inits={"size": np.array([1, 1, 2, 2], np.int64)}, outputs=("grid",)),
                         {"theta": np.eye(2, 3, dtype=np.float32)[None]})
    np.testing.assert_allclose(got[0][0, :, :, 0], [[-0.5, 0.5], [-0.5, 0.5]])


def test_roi_align_adaptive_sampling_needs_constant_rois():
    x = RNG.standard_normal((1, 2, 8, 8)).astype(np.float32)
    rois = np.array([[0, 0, 5, 6], [1, 2, 7, 7.5]], np.float32)
    idx = np.zeros(2, np.int64)
    m = one_node("RoiAlign", {"x": x, "rois": rois, "idx": idx}, dict(output_height=2, output_width=3), opset=16)
    with pytest.raises(UnsupportedOpError, match="must be a constant") as e:
        from_onnx(m, specialize=False)
    assert e.value.needs_constant == "rois"
    check(m, {"x": x, "rois": rois, "idx": idx}, rtol=1e-5, atol=1e-5, const_inputs={"rois": rois})


def test_col2im_and_deform_conv_converters():
    x = RNG.standard_normal((1, 8, 4)).astype(np.float32)
    m = one_node("Col2Im", {"x": x}, dict(strides=[1, 2]), inits={"img": np.array([3, 5], np.int64),
                                                                  "blk": np.array([2, 2], np.int64)}, opset=18)
    check(m, {"x": x}, want=ReferenceEvaluator(m).run(None, {"x": x}), rtol=1e-6)
    xd = RNG.standard_normal((1, 1, 4, 4)).astype(np.float32)
    w = RNG.standard_normal((2, 1, 2, 2)).astype(np.float32)
    off = RNG.standard_normal((1, 8, 3, 3)).astype(np.float32)
    feeds = {"x": xd, "w": w, "off": off, "b": np.array([0.5, -1], np.float32)}
    md = one_node("DeformConv", feeds, opset=19)
    check(md, feeds, want=ReferenceEvaluator(md).run(None, feeds), rtol=1e-5, atol=1e-5)
