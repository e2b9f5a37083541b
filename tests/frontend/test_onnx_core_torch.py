"""Models exported from PyTorch (torch.onnx.export) through from_onnx, against onnxruntime."""
import warnings

import numpy as np
import onnxruntime as ort
import pytest

import tessera
from tessera.errors import UnsupportedOpError
from tessera.frontend.onnx import from_onnx

torch = pytest.importorskip("torch")
nn = torch.nn


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.c1(x)))
        x = nn.functional.max_pool2d(x, 2)
        x = torch.relu(self.c2(x))
        return self.fc(x.mean(dim=(2, 3)).flatten(1))


class SmallTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 32)
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0)
        self.out = nn.Linear(32, 5)

    def forward(self, ids):
        return self.out(self.layer(self.emb(ids))[:, 0])


def export(module, example, path, dynamic_axes=None):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (example,), str(path), input_names=["x"], output_names=["y"],
                          opset_version=17, dynamic_axes=dynamic_axes, dynamo=False)
    return str(path)


def ort_out(path, x):
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_exported_cnn_with_a_symbolic_batch_matches_onnxruntime(tmp_path):
    torch.manual_seed(0)
    path = export(SmallCNN(), torch.randn(2, 3, 16, 16), tmp_path / "cnn.onnx", {"x": {0: "batch"}})
    graph, params = from_onnx(path)
    assert graph.inputs[0].shape == ("batch", 3, 16, 16)
    exe = tessera.compile(graph, params)
    rng = np.random.default_rng(0)
    for b in (1, 3):
        x = rng.standard_normal((b, 3, 16, 16)).astype(np.float32)
        np.testing.assert_allclose(exe(x), ort_out(path, x), rtol=1e-4, atol=1e-4)


def test_exported_transformer_matches_onnxruntime(tmp_path):
    torch.manual_seed(0)
    path = export(SmallTransformer(), torch.randint(0, 50, (2, 7)), tmp_path / "tf.onnx")
    graph, params = from_onnx(path)
    x = np.random.default_rng(1).integers(0, 50, (2, 7)).astype(np.int64)
    np.testing.assert_allclose(tessera.compile(graph, params)(x), ort_out(path, x), rtol=1e-4, atol=1e-4)


def test_exported_transformer_with_dynamic_axes_runs_symbolic_or_takes_a_shape(tmp_path):
    torch.manual_seed(0)
    path = export(SmallTransformer(), torch.randint(0, 50, (2, 7)), tmp_path / "tfd.onnx",
                  {"x": {0: "batch", 1: "seq"}})
    rng = np.random.default_rng(2)
    try:
        graph, params = from_onnx(path)
    except UnsupportedOpError as e:
        # exporters whose attention reshapes by values computed from the symbolic shape (batch * heads):
        # refused, naming the input, until a static shape is given
        assert "symbolic shape of 'x'" in str(e)
    else:
        # exporters whose shape arithmetic tessera follows symbolically (torch 2.13's): one compile
        # serves every batch (that exporter bakes the traced length 7 into a Reshape: onnxruntime
        # refuses other lengths too)
        exe = tessera.compile(graph, params)
        for shape in ((3, 7), (1, 7)):
            x = rng.integers(0, 50, shape).astype(np.int64)
            np.testing.assert_allclose(exe(x), ort_out(path, x), rtol=1e-4, atol=1e-4)
    graph, params = from_onnx(path, shape_dict={"x": (3, 7)})
    x = np.random.default_rng(2).integers(0, 50, (3, 7)).astype(np.int64)
    np.testing.assert_allclose(tessera.compile(graph, params)(x), ort_out(path, x), rtol=1e-4, atol=1e-4)
