"""Models exported from PyTorch (torch.onnx.export: the TorchScript exporter at opset 17 and, where
onnxscript is installed, the torch.export-based one at opset 18, in the slow set: it takes ~10 s a
model) compile with tessera and give PyTorch's and onnxruntime's outputs within rtol 1e-4 / atol 1e-4."""
import io
import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("tessera.frontend.onnx", reason="the ONNX frontend (tessera/frontend/onnx.py) is not there yet")

import onnx  # noqa: E402

import tessera  # noqa: E402

nn = torch.nn
F = torch.nn.functional


class SmallCNN(nn.Module):
    """Conv/BN/ReLU, a strided depthwise conv, a residual, max pool, global pool, linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.dw = nn.Conv2d(16, 16, 3, stride=1, padding=1, groups=16)
        self.pw = nn.Conv2d(16, 16, 1)
        self.bn = nn.BatchNorm2d(16)
        self.down = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        y = self.pool(self.stem(x))
        y = F.relu6(y + self.bn(self.pw(F.relu(self.dw(y)))))
        y = F.relu(self.down(y))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


class CausalBlock(nn.Module):
    """A GPT-style pre-LN decoder block written with plain torch ops (masked_fill causal mask)."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
        att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class SmallTransformer(nn.Module):
    """Embedding -> torch's TransformerEncoderLayer (erf GELU) -> CausalBlock -> linear head."""

    def __init__(self, vocab=100, d=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, 64, d) * 0.1)
        self.enc = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, activation="gelu", batch_first=True)
        self.dec = CausalBlock(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        x = self.emb(ids) + self.pos[:, : ids.shape[1]]
        return self.head(self.dec(self.enc(x)))


def _randomize_bn(module, gen):
    # trained-like running statistics, so BatchNormalization is not the identity
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.2)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)


def _export(module, example, dynamo):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            pytest.importorskip("onnxscript", reason="the torch.export-based exporter needs onnxscript")
            prog = torch.onnx.export(module, (example,), dynamo=True, opset_version=18, input_names=["input"],
                                     output_names=["output"], verbose=False)
            return prog.model_proto
        f = io.BytesIO()
        torch.onnx.export(module, (example,), f, dynamo=False, opset_version=17, input_names=["input"],
                          output_names=["output"])
        return onnx.load_from_string(f.getvalue())


def _check(module, example, dynamo):
    module.eval()
    with torch.no_grad():
        expected = module(example).numpy()
    model = _export(module, example, dynamo)
    x = example.numpy()
    graph, params = tessera.frontend.from_onnx(model)
    got = tessera.compile(graph, params, target="c").run({"input": x})[0]
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, err_msg="tessera vs PyTorch")
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, err_msg="tessera vs onnxruntime")
    return model


@pytest.mark.parametrize("dynamo", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["torchscript", "dynamo"])
def test_exported_small_cnn_matches_pytorch(dynamo):
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    net = SmallCNN()
    with torch.no_grad():
        _randomize_bn(net, gen)
    _check(net, torch.randn(2, 3, 24, 24, generator=gen), dynamo)


@pytest.mark.parametrize("dynamo", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["torchscript", "dynamo"])
def test_exported_small_transformer_matches_pytorch(dynamo):
    gen = torch.Generator().manual_seed(1)
    torch.manual_seed(1)
    net = SmallTransformer()
    model = _check(net, torch.randint(0, 100, (2, 12), generator=gen), dynamo)
    ops = {n.op_type for n in model.graph.node}
    assert "Softmax" in ops and "MatMul" in ops
