"""torch.compile(model, backend="tessera") (tessera/torch_backend.py) against eager PyTorch."""
import os
import pathlib
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch.compile backend needs torch: pip install -e '.[torch]'")
from torch import nn  # noqa: E402

import torch_models as M  # noqa: E402
from tessera import torch_backend  # noqa: E402


def assert_close(got, want):
    assert isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype == want.dtype
    scale = max(1.0, float(want.abs().max()))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4 * scale)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def counting_backend(calls: list):
    def backend(gm, example_inputs, **kw):
        calls.append(len(example_inputs))
        return torch_backend.tessera_backend(gm, example_inputs, **kw)

    return backend


def test_the_backend_is_registered_as_tessera():
    assert "tessera" in torch._dynamo.list_backends()


def test_a_compiled_model_matches_eager_and_returns_torch_tensors():
    torch.manual_seed(0)
    m = M.randomize(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4), nn.GELU()))
    c = torch.compile(m, backend="tessera")
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)      # nothing left to eager, no gradient warning
        got = c(x)
        want = m(x)
    assert_close(got, want)


class WithAtan2(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.b(torch.atan2(torch.relu(self.a(x)), x + 2.0)).softmax(-1)


def test_an_op_tessera_lacks_runs_in_eager_with_one_warning_naming_it():
    torch.manual_seed(0)
    m = WithAtan2().eval()
    c = torch.compile(m, backend="tessera")
    x = torch.randn(4, 8)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = c(x)
        want = m(x)
    assert_close(got, want)
    eager = [str(w.message) for w in caught if "left to eager" in str(w.message)]
    assert len(eager) == 1 and "aten.atan2.default" in eager[0] and "aten.addmm" not in eager[0]


def test_dynamic_sizes_compile_once_for_every_size():
    torch.manual_seed(0)
    m = M.randomize(M.GPT2Block(hidden=16, heads=2, max_len=32))
    calls = []
    c = torch.compile(m, backend=counting_backend(calls), dynamic=True)
    with torch.no_grad():
        c(torch.randn(2, 3, 16))
        first = len(calls)
        for b, t in ((4, 5), (3, 9), (2, 31)):   # sizes 0 and 1 are torch's own specializations
            x = torch.randn(b, t, 16)
            assert_close(c(x), m(x))
    assert first >= 1 and len(calls) == first


def test_a_marked_dynamic_batch_of_a_cnn_compiles_once():
    torch.manual_seed(0)
    m = M.randomize(nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                                  nn.Flatten(), nn.Linear(64, 3)))
    calls = []
    c = torch.compile(m, backend=counting_backend(calls))
    x = torch.randn(2, 3, 8, 8)
    torch._dynamo.mark_dynamic(x, 0)
    with torch.no_grad():
        assert_close(c(x), m(x))
        first = len(calls)
        for b in (3, 5):         # sizes 0 and 1 are torch's own specializations
            x = torch.randn(b, 3, 8, 8)
            assert_close(c(x), m(x))
    assert len(calls) == first


def test_gradients_run_in_eager_with_a_warning():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    c = torch.compile(m, backend="tessera")
    x = torch.randn(3, 4)
    with pytest.warns(UserWarning, match="inference.*require gradients.*eager"):
        y = c(x)
    y.sum().backward()
    assert m[0].weight.grad is not None
    assert_close(y.detach(), m(x).detach())


@pytest.mark.parametrize("options, message", [({"opt_levle": 1}, r"unknown options \['opt_levle'\]"),
                                              ({"opt_level": 5}, "opt_level must be 0, 1, 2 or 3"),
                                              ({"target": "nosuch"}, "nosuch")])
def test_bad_options_are_refused(options, message):
    c = torch.compile(nn.ReLU(), backend="tessera", options=options)
    with torch.no_grad(), pytest.raises(Exception, match=message):
        c(torch.randn(2))


def test_unfrozen_weights_are_read_at_each_call():
    torch.manual_seed(0)
    m = nn.Linear(4, 2).eval()
    c = torch.compile(m, backend="tessera", options={"freeze": False, "opt_level": 1})
    x = torch.randn(3, 4)
    with torch.no_grad():
        assert_close(c(x), m(x))
        m.weight.mul_(2.0)
        assert_close(c(x), m(x))


_SECOND_RUN = """
import torch, sys
sys.path.insert(0, {frontend!r})
import torch_models as M
torch.manual_seed(0)
m = M.randomize(M.MLP("gelu"))
with torch.no_grad():
    y = torch.compile(m, backend="tessera")(torch.ones(2, 32))
print(float(y.sum()))
"""


@pytest.mark.slow
def test_a_second_process_takes_the_compiled_kernels_from_the_disk_cache(tmp_path):
    env = dict(os.environ, TESSERA_CACHE_DIR=str(tmp_path / "cache"))
    code = _SECOND_RUN.format(frontend=str(pathlib.Path(__file__).parent))

    def run():
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        files = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").rglob("*") if p.is_file()}
        return out.stdout.strip().splitlines()[-1], files

    first, built = run()
    second, after = run()
    assert first == second and any(p.suffix == ".so" for p in built)
    rebuilt = [p for p in after if p.suffix in (".so", ".c") and built.get(p) != after[p]]
    assert not rebuilt, rebuilt
