"""RoiAlign's sampling grid is bounded: a huge ROI with sampling_ratio 0 (the grid adapts to the ROI)
or a huge sampling_ratio made the kernel loop for ever (ONNX Runtime refuses such a ROI at once).
Above Limits.max_roi_align_samples (samples per ROI and channel) the model is refused, whether the
ROIs are constants (at conversion) or an input (when the run that gives them specializes the model)."""
import time

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import tessera
from tessera.errors import TesseraError
from tessera.limits import Limits

RNG = np.random.default_rng(11)
X = RNG.standard_normal((1, 2, 8, 8)).astype(np.float32)


def _model(rois=None, ratio=0, out=(2, 2)):
    """RoiAlign over input x (and r, unless the rois are given as an initializer)."""
    node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=out[0], output_width=out[1],
                            sampling_ratio=ratio, name="roi")
    inputs = [helper.make_tensor_value_info("x", TP.FLOAT, X.shape)]
    inits = [numpy_helper.from_array(np.zeros(1, np.int64), "b")]
    if rois is None:
        inputs.append(helper.make_tensor_value_info("r", TP.FLOAT, [1, 4]))
    else:
        inits.append(numpy_helper.from_array(rois, "r"))
    g = helper.make_graph([node], "g", inputs, [helper.make_empty_tensor_value_info("y")], initializer=inits)
    return helper.make_model_gen_version(g, opset_imports=[helper.make_opsetid("", 16)])


HUGE = np.array([[0, 0, 1e9, 1e9]], np.float32)


def test_a_huge_constant_roi_is_refused_at_once():
    with pytest.raises(Exception):           # ONNX Runtime refuses it too
        ort.InferenceSession(_model(HUGE).SerializeToString()).run(None, {"x": X})
    t0 = time.perf_counter()
    with pytest.raises(TesseraError, match=r"RoiAlign.*'roi'.*samples.*more than the limit of 16,777,216 "
                                           r"\(Limits\(max_roi_align_samples=\.\.\.\) or TESSERA_MAX_ROI_ALIGN_SAMPLES\)"):
        tessera.frontend.from_onnx(_model(HUGE))
    assert time.perf_counter() - t0 < 30


def test_a_huge_roi_given_at_run_time_is_refused_when_the_model_is_specialized():
    graph, params = tessera.frontend.from_onnx(_model())
    exe = tessera.compile(graph, params, target="c")
    ok = np.array([[0, 0, 5, 6]], np.float32)
    (want,) = ort.InferenceSession(_model().SerializeToString()).run(None, {"x": X, "r": ok})
    np.testing.assert_allclose(exe.run({"x": X, "r": ok})[0], want, rtol=1e-5, atol=1e-6)
    with pytest.raises(TesseraError, match=r"samples.*more than the limit"):
        exe.run({"x": X, "r": HUGE})


def test_a_huge_sampling_ratio_is_refused():
    with pytest.raises(TesseraError, match=r"sampling_ratio 100000.*more than the limit"):
        tessera.frontend.from_onnx(_model(np.array([[0, 0, 4, 4]], np.float32), ratio=100000))


def test_the_limit_is_configurable():
    rois = np.array([[0, 0, 60, 60]], np.float32)          # a 30 x 30 grid per bin: 3600 samples per channel
    with pytest.raises(TesseraError, match="3,600 samples"):
        tessera.frontend.from_onnx(_model(rois), limits=Limits(max_roi_align_samples=3599))
    graph, params = tessera.frontend.from_onnx(_model(rois), limits=Limits(max_roi_align_samples=3600))
    got = tessera.compile(graph, params, target="c").run({"x": X})[0]
    (want,) = ort.InferenceSession(_model(rois).SerializeToString()).run(None, {"x": X})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_non_finite_rois_are_refused_with_an_adaptive_grid():
    with pytest.raises(TesseraError, match="finite"):
        tessera.frontend.from_onnx(_model(np.array([[0, 0, np.nan, 4]], np.float32)))


def test_a_roi_at_an_integer_ratio_keeps_a_spare_sample_row():
    # (127 - 57) * 0.7 / 7 is 7 - 1.2e-8 in float64 but 7.0000005 in float32, where the kernel (as ONNX
    # Runtime) computes ceil(): 8 rows a bin. The bound from float64 keeps a spare row near integers;
    # without it the kernel refused this ROI (and before its check, sampled it short)
    rois = np.array([[0, 57, 10, 127]], np.float32)
    model = _model(rois, out=(7, 2))
    model.graph.node[0].attribute.append(helper.make_attribute("spatial_scale", 0.7))
    graph, params = tessera.frontend.from_onnx(model)
    got = tessera.compile(graph, params, target="c").run({"x": X})[0]
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": X})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
