"""ONNX DFT / STFT / window / MelWeightMatrix converters: the DFT matrix against numpy.fft, the
converters against onnxruntime (axes, dft_length padding and truncation, inverse, onesided,
float64, runtime windows) and the reference."""
import numpy as np
import pytest
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator
from onnx_family_check import check, one_node

from tessera.errors import UnsupportedOpError
from tessera.frontend.onnx import from_onnx
from tessera.frontend.onnx_ops.signal import dft_matrix, mel_weight_matrix

RNG = np.random.default_rng(61)


def _apply(x, mat, c_out):
    """x (n, c) -> (m, c_out) through the matrix, as the converter does."""
    return (x.reshape(-1) @ mat).reshape(-1, c_out)


@pytest.mark.parametrize("n_in,length", [(8, 8), (8, 5), (5, 8), (7, 7)])
def test_dft_matrix_matches_numpy_fft(n_in, length):
    z = RNG.standard_normal(n_in) + 1j * RNG.standard_normal(n_in)
    pair = np.stack([z.real, z.imag], -1)
    full = np.fft.fft(z, n=length)
    np.testing.assert_allclose(_apply(pair, dft_matrix(n_in, 2, length, False, False), 2),
                               np.stack([full.real, full.imag], -1), atol=1e-12)
    real = np.fft.fft(z.real, n=length)[: length // 2 + 1]
    np.testing.assert_allclose(_apply(pair[:, :1], dft_matrix(n_in, 1, length, False, True), 2),
                               np.stack([real.real, real.imag], -1), atol=1e-12)
    inv = np.fft.ifft(z, n=length)
    np.testing.assert_allclose(_apply(pair, dft_matrix(n_in, 2, length, True, False), 2),
                               np.stack([inv.real, inv.imag], -1), atol=1e-12)
    irfft = np.fft.irfft(z, n=length)
    np.testing.assert_allclose(_apply(pair, dft_matrix(n_in, 2, length, True, True), 1)[:, 0], irfft, atol=1e-12)


@pytest.mark.parametrize("opset", [17, 20])
def test_dft_along_an_inner_axis_with_dft_length(opset):
    x = RNG.standard_normal((2, 6, 3, 2)).astype(np.float32)
    inits = {"n": np.array(8, np.int64)}
    attrs = dict(onesided=0)
    if opset >= 20:
        inits["axis"] = np.array(1, np.int64)
    else:
        attrs["axis"] = 1
    check(one_node("DFT", {"x": x}, attrs, inits=inits, opset=opset), {"x": x}, rtol=1e-5, atol=1e-5)


def test_dft_real_onesided_float64_and_inverse_onesided_match_the_reference():
    x = RNG.standard_normal((3, 10, 1))
    check(one_node("DFT", {"x": x}, dict(onesided=1), opset=20), {"x": x}, rtol=1e-12, atol=1e-12)
    spec = RNG.standard_normal((2, 5, 2)).astype(np.float32)
    m = one_node("DFT", {"s": spec}, dict(inverse=1, onesided=1), opset=20)
    check(m, {"s": spec}, want=ReferenceEvaluator(m).run(None, {"s": spec}), rtol=1e-5, atol=1e-6)


def test_stft_with_a_runtime_window_and_a_complex_two_sided_signal():
    x = RNG.standard_normal((2, 20, 1)).astype(np.float32)
    win = np.hanning(8).astype(np.float32)
    check(one_node("STFT", {"x": x, "step": np.array(3, np.int64), "w": win}, opset=17),
          {"x": x, "step": np.array(3, np.int64), "w": win}, rtol=1e-4, atol=1e-5,
          const_inputs={"step": np.array(3, np.int64)})
    xc = RNG.standard_normal((1, 16, 2)).astype(np.float32)
    m = one_node("STFT", {"x": xc}, dict(onesided=0), inits={"step": np.array(4, np.int64),
                                                            "len": np.array(6, np.int64)}, opset=17)
    m.graph.node[0].input[:] = ["x", "step", "", "len"]        # no window, a frame length
    check(m, {"x": xc}, want=ReferenceEvaluator(m).run(None, {"x": xc}), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
def test_windows_periodic_symmetric_and_double(op):
    for periodic, dtype in ((1, TensorProto.FLOAT), (0, TensorProto.DOUBLE)):
        m = one_node(op, {}, dict(periodic=periodic, output_datatype=dtype), inits={"n": np.array(9, np.int32)},
                     opset=17)
        check(m, {}, rtol=1e-6, atol=1e-7)


def test_mel_weight_matrix_and_refusals():
    m = one_node("MelWeightMatrix", {}, inits={"mel": np.array(6, np.int64), "n": np.array(32, np.int64),
                                               "rate": np.array(8000, np.int64), "lo": np.array(100.0, np.float32),
                                               "hi": np.array(3500.0, np.float32)}, opset=17)
    check(m, {}, want=ReferenceEvaluator(m).run(None, {}))
    with pytest.raises(ValueError, match="Nyquist"):
        mel_weight_matrix(4, 16, 1000, 0.0, 2000.0)
    x = np.zeros((1, 5, 3), np.float32)
    with pytest.raises(UnsupportedOpError, match="real/imaginary axis|must be 1 \\(real\\) or 2"):
        from_onnx(one_node("DFT", {"x": x}, opset=20))
    with pytest.raises(UnsupportedOpError, match="must be a constant"):
        from_onnx(one_node("HannWindow", {"n": np.array(4, np.int64)}, opset=17), specialize=False)
