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
    (got,) = run_op("image.grid_sample", x, g, mode={"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode), padding_mode=pad)
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
