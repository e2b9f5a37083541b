"""Whole models written in PyTorch (tests/frontend/torch_models.py, small sizes, random weights) through
both entry points, torch.export + from_exported_program and torch.compile(backend="tessera"),
against eager PyTorch within 1e-4; symbolic batch and sequence sizes from one compile. Slow: each
model compiles its own kernels."""
import warnings

import numpy as np
import pytest

import tessera

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs torch: pip install -e '.[torch]'")

import torch_models as M  # noqa: E402
from tessera.frontend import from_exported_program  # noqa: E402

pytestmark = pytest.mark.slow


def _ids(b, t):
    return torch.randint(0, 1000, (b, t))


def _mask(b, t):
    m = torch.ones(b, t, dtype=torch.int64)
    m[:, t - 1:] = 0                       # the last position padded
    return m


# name -> (model maker, inputs maker (batch, seq) -> tuple, dynamic dims per input name or None)
MODELS = {
    "resnet": (lambda: M.ResNet(M.BasicBlock, (1, 1, 1, 1), width=8, classes=10),
               lambda b, t: (torch.randn(b, 3, 32, 32),), {"x": {0: "batch"}}),
    "resnet_bottleneck": (lambda: M.ResNet(M.Bottleneck, (1, 1, 1, 1), width=8, classes=10),
                          lambda b, t: (torch.randn(b, 3, 32, 32),), {"x": {0: "batch"}}),
    "mobilenet_v2": (lambda: M.MobileNetV2(0.25, settings=((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 2, 2)), classes=10,
                                           last=64),
                     lambda b, t: (torch.randn(b, 3, 32, 32),), {"x": {0: "batch"}}),
    "efficientnet": (lambda: M.EfficientNet(), lambda b, t: (torch.randn(b, 3, 32, 32),), {"x": {0: "batch"}}),
    "bert": (lambda: M.Bert(), lambda b, t: (_ids(b, t), _mask(b, t)),
             {"ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}),
    "gpt2": (lambda: M.GPT2(), lambda b, t: (_ids(b, t),), {"ids": {0: "batch", 1: "seq"}}),
    "vit": (lambda: M.ViTBlock(), lambda b, t: (torch.randn(b, 3, 32, 32),), {"img": {0: "batch"}}),
}


def assert_close(got, want):
    want = want.detach().numpy()
    got = got.numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


def _model(name):
    torch.manual_seed(0)
    make, inputs, dims = MODELS[name]
    return M.randomize(make()), inputs, dims


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_through_torch_export_matches_eager(name):
    m, inputs, _ = _model(name)
    args = inputs(2, 16)
    exe = tessera.compile(torch.export.export(m, args))
    with torch.no_grad():
        assert_close(exe(*[a.numpy() for a in args]), m(*args))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_through_torch_compile_matches_eager_with_no_op_left_to_eager(name):
    m, inputs, _ = _model(name)
    args = inputs(2, 16)
    c = torch.compile(m, backend="tessera")
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = c(*args)
        want = m(*args)
    assert not [str(w.message) for w in caught if "eager" in str(w.message)]
    assert_close(got, want)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_symbolic_sizes_of_an_exported_model_run_at_several_sizes_from_one_compile(name):
    m, inputs, dims = _model(name)
    made = {"batch": torch.export.Dim("batch", max=16), "seq": torch.export.Dim("seq", min=2, max=100)}
    dynamic = {k: {ax: made[d] for ax, d in v.items()} for k, v in dims.items()}
    graph, params = from_exported_program(torch.export.export(m, inputs(2, 16), dynamic_shapes=dynamic))
    assert any(isinstance(d, str) for v in graph.inputs for d in v.shape)
    exe = tessera.compile(graph, params)
    for b, t in ((3, 7), (2, 33), (5, 16)):
        args = inputs(b, t)
        with torch.no_grad():
            assert_close(exe(*[a.numpy() for a in args]), m(*args))


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_torch_compile_dynamic_transformer_compiles_once(name):
    m, inputs, _ = _model(name)
    calls = []

    def backend(gm, example_inputs, **kw):
        from tessera.torch_backend import tessera_backend

        calls.append(1)
        return tessera_backend(gm, example_inputs, **kw)

    c = torch.compile(m, backend=backend, dynamic=True)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c(*inputs(2, 16))
        first = len(calls)
        for b, t in ((3, 7), (4, 40)):
            args = inputs(b, t)
            assert_close(c(*args), m(*args))
    assert len(calls) == first
    assert not [str(w.message) for w in caught if "tessera:" in str(w.message)]    # symbolic: no per-size compile


def test_torch_compile_dynamic_cnn_compiles_per_spatial_size_with_a_warning():
    m, inputs, _ = _model("resnet")
    c = torch.compile(m, backend="tessera", dynamic=True)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for b, hw in ((2, 32), (3, 40)):
            x = torch.randn(b, 3, hw, hw)
            assert_close(c(x), m(x))
    assert any("compiled once per distinct input size" in str(w.message) for w in caught)


@pytest.mark.parametrize("activation", sorted(M.ACTIVATIONS))
def test_mlp_with_each_activation_matches_eager_through_both_entry_points(activation):
    torch.manual_seed(0)
    m = M.MLP(activation).eval()
    x = torch.randn(8, 32) * 3
    with torch.no_grad():
        want = m(x)
    assert_close(tessera.compile(torch.export.export(m, (x,)))(x.numpy()), want)
    with torch.no_grad():
        assert_close(torch.compile(m, backend="tessera")(x), want)
