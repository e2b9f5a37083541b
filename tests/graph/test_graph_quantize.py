"""graph.passes.quantize: an fp32 CNN becomes an int8 graph with VTA's power-of-two scheme
(per-channel symmetric int8 weights, per-tensor activations from calibration, requantization by
shift), which runs on the CPU close to the fp32 model."""
import numpy as np
import pytest

import tessera
from tessera.graph.passes.quantize import QuantizeError, quantize

from vdla_models import inputs, small_cnn


@pytest.fixture(scope="module")
def models():
    g = small_cnn()
    return g, quantize(g, calibration=inputs(4, seed=7))


def test_int8_graph_structure(models):
    _, qg = models
    convs = [n for n in qg.nodes if n.op == "nn.conv2d"]
    assert len(convs) == 4
    for n in convs:
        assert str(n.inputs[0].dtype) == "int8" and str(n.outputs[0].dtype) == "int32"
        w = np.asarray(qg.constants[n.inputs[1]])
        assert w.dtype == np.int8
        # per-channel power-of-two scales: every channel uses the upper half of [-127, 127]
        m = np.abs(w.reshape(w.shape[0], -1).astype(int)).max(1)
        assert ((m > 63) & (m <= 127)).all()
    shifts = [n for n in qg.nodes if n.op == "right_shift"]
    assert len(shifts) >= 4
    assert all(str(v.dtype) == "float32" for v in qg.outputs)


def test_int8_close_to_fp32(models):
    g, qg = models
    fexe, qexe = tessera.compile(g), tessera.compile(qg)
    agree, errs = 0, []
    for feed in inputs(12, seed=3):
        yf, yq = fexe.run(feed)[0], qexe.run(feed)[0]
        errs.append(np.linalg.norm(yq - yf) / np.linalg.norm(yf))
        agree += int(yf.argmax() == yq.argmax())
    assert np.median(errs) < 0.1, errs
    assert agree >= 9


def test_calibration_must_cover_inputs():
    with pytest.raises(QuantizeError, match="calibration input lacks"):
        quantize(small_cnn(), calibration=[{"x": np.zeros((1, 16, 8, 8), np.float32)}])
    with pytest.raises(QuantizeError, match="at least one calibration input"):
        quantize(small_cnn(), calibration=[])


def test_dense_is_int8_dequantized_per_channel(models):
    _, qg = models
    dense = [n for n in qg.nodes if n.op == "nn.dense"]
    assert len(dense) == 1 and str(dense[0].inputs[0].dtype) == "int8"
    assert not any(n.op == "nn.matmul" for n in qg.nodes)
