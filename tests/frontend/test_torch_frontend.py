"""tessera.frontend.from_exported_program: torch.export programs against eager PyTorch (small modules
here; the whole models are in test_torch_models.py, marked slow)."""
import json
import zipfile

import numpy as np
import pytest

import tessera
from tessera.errors import TesseraError, UnsupportedOpError

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs torch: pip install -e '.[torch]'")
from torch import nn  # noqa: E402

import torch_models as M  # noqa: E402
from tessera.frontend import from_exported_program  # noqa: E402


def assert_close(got, want):
    """Within 1e-4 of eager, relative to the output's scale."""
    want = want.detach().numpy() if hasattr(want, "detach") else np.asarray(want)
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


def export(model, *args, dynamic_shapes=None):
    return torch.export.export(model, args, dynamic_shapes=dynamic_shapes)


class TwoMissing(nn.Module):
    """Two ops tessera has no converter for (atan2, i0), one of them twice."""

    def forward(self, x):
        return torch.atan2(x, x + 1) + torch.special.i0(x) + torch.atan2(x, x - 1)


def test_every_activation_of_an_mlp_matches_eager():
    torch.manual_seed(0)
    m = M.AllActivations().eval()
    x = torch.randn(4, 16)
    graph, params = from_exported_program(export(m, x))
    with torch.no_grad():
        assert_close(tessera.compile(graph, params)(x.numpy()), m(x))


def test_weights_are_bound_without_a_copy_or_kept_as_inputs():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 4), nn.ReLU()).eval()
    x = torch.randn(3, 8)
    ep = export(m, x)
    graph, params = from_exported_program(ep)
    assert params == {} and graph.input_names == ("input",)
    weight = next(a for v, a in graph.constants.items() if a.shape == (4, 8))
    assert np.shares_memory(weight, m[0].weight.detach().numpy())
    graph2, params2 = from_exported_program(ep, keep_params_as_input=True)
    assert graph2.input_names == ("input", "0.weight", "0.bias")
    assert all(np.shares_memory(a, p.detach().numpy()) for a, p in zip(params2.values(), m.parameters()))
    with torch.no_grad():
        want = m(x)
    assert_close(tessera.compile(graph2, params2)(x.numpy()), want)
    runtime = tessera.compile(graph2)      # the weights stay inputs of the compiled model
    feeds = {"input": x.numpy(), "0.weight": m[0].weight.detach().numpy(), "0.bias": m[0].bias.detach().numpy()}
    assert_close(runtime.run(feeds)[0], want)


def test_symbolic_batch_and_sequence_sizes_run_from_one_compile():
    torch.manual_seed(0)
    m = M.randomize(M.GPT2Block(hidden=16, heads=2, max_len=32))
    batch, seq = torch.export.Dim("batch", max=8), torch.export.Dim("seq", min=2, max=31)
    ep = export(m, torch.randn(2, 5, 16), dynamic_shapes={"x": {0: batch, 1: seq}})
    graph, params = from_exported_program(ep)
    (shape,) = [v.shape for v in graph.inputs]
    assert isinstance(shape[0], str) and isinstance(shape[1], str) and shape[2] == 16
    exe = tessera.compile(graph, params)
    for b, t in ((1, 2), (3, 7), (2, 31)):
        x = torch.randn(b, t, 16)
        with torch.no_grad():
            assert_close(exe(x.numpy()), m(x))


def test_every_missing_op_is_listed_at_once_with_how_to_pass_a_converter():
    ep = export(TwoMissing(), torch.randn(4))
    with pytest.raises(UnsupportedOpError) as e:
        from_exported_program(ep)
    text = str(e.value)
    assert e.value.missing == {"aten.atan2.default": ["atan2", "atan2_1"], "aten.i0.default": ["i0"]}
    assert "aten.atan2.default (nodes 'atan2', 'atan2_1')" in text and "aten.i0.default (node 'i0')" in text
    assert "converters={'aten.atan2.default': fn}" in text


def _atan2(ctx):
    """atan2(y, x) from tessera's atan and where (the quadrant of x < 0)."""
    y, x = ctx.input("self"), ctx.input("other")
    base = ctx.op("atan", ctx.op("divide", y, x))
    pi = ctx.op("where", ctx.op("less", y, ctx.scalar(0.0, "float32")), ctx.scalar(-np.pi, "float32"),
                ctx.scalar(np.pi, "float32"))
    return ctx.op("where", ctx.op("less", x, ctx.scalar(0.0, "float32")), ctx.op("add", base, pi), base)


def test_a_converter_passed_by_the_caller_converts_a_missing_op():
    class Atan2(nn.Module):
        def forward(self, y, x):
            return torch.atan2(y, x) * 2

    y, x = torch.randn(64), torch.randn(64)
    graph, params = from_exported_program(export(Atan2(), y, x), converters={"aten.atan2.default": _atan2})
    assert_close(tessera.compile(graph, params)(y.numpy(), x.numpy()), Atan2()(y, x))


def test_a_converter_that_disagrees_with_torch_is_refused():
    def wrong(ctx):       # drops the last dimension
        return ctx.op("sum", ctx.input("self"), axis=-1)

    ep = export(nn.ReLU(), torch.randn(2, 3))
    with pytest.raises(UnsupportedOpError, match=r"shape \(2\), torch's is \(2, 3\)"):
        from_exported_program(ep, converters={"aten.relu.default": wrong})


def test_a_program_that_writes_its_buffers_is_refused():
    bn = nn.BatchNorm1d(4).train()
    with pytest.raises(TesseraError, match=r"model\.eval\(\)"):
        from_exported_program(export(bn, torch.randn(3, 4)))


def test_tessera_compile_takes_an_exported_program_and_exports_a_library(tmp_path):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(64, 5))
    m = M.randomize(m)
    x = torch.randn(2, 3, 4, 4)
    exe = tessera.compile(export(m, x))
    with torch.no_grad():
        want = m(x)
    assert_close(exe(x.numpy()), want)
    lib = tessera.runtime.load_module(exe.export_library(str(tmp_path / "m.so")))
    assert_close(lib(x.numpy()), want)


def test_the_cli_compiles_a_saved_program(tmp_path, capsys):
    from tessera.cli import main

    m = nn.Sequential(nn.Linear(6, 3), nn.Tanh()).eval()
    x = torch.randn(2, 6)
    torch.export.save(export(m, x), str(tmp_path / "m.pt2"))
    assert main(["compile", str(tmp_path / "m.pt2"), "-o", str(tmp_path / "m.so")]) == 0
    assert "float32[2, 6]" in capsys.readouterr().out
    with torch.no_grad():
        assert_close(tessera.runtime.load_module(str(tmp_path / "m.so"))(x.numpy()), m(x))


def _pickling_copy(path, dst):
    """A copy of the saved program at `path` whose weights record marks a weight `use_pickle`."""
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(dst, "w") as out:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename.endswith("model_weights_config.json"):
                cfg = json.loads(data)
                next(iter(cfg["config"].values()))["use_pickle"] = True
                data = json.dumps(cfg).encode()
            out.writestr(item, data)


def test_a_saved_program_that_would_be_unpickled_is_refused(tmp_path):
    from tessera.frontend.torch import load_program

    path = tmp_path / "m.pt2"
    torch.export.save(export(nn.Linear(2, 2).eval(), torch.randn(1, 2)), str(path))
    bad = tmp_path / "bad.pt2"
    _pickling_copy(path, bad)
    with pytest.raises(TesseraError, match="pickle"):
        load_program(bad)
    garbled = tmp_path / "garbled.pt2"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(garbled, "w") as dst:
        for item in src.infolist():
            garble = item.filename.endswith("model_weights_config.json")
            dst.writestr(item, b"{not json" if garble else src.read(item.filename))
    with pytest.raises(TesseraError, match="weights record"):
        load_program(garbled)
    legacy = tmp_path / "legacy.pt2"
    with zipfile.ZipFile(legacy, "w") as z:
        z.writestr("version", "1")
    with pytest.raises(TesseraError, match="archive_format"):
        load_program(legacy)
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(b"not a zip")
    with pytest.raises(TesseraError, match="not a zip"):
        load_program(junk)
    assert isinstance(load_program(path), torch.export.ExportedProgram)


def test_a_saved_program_is_loaded_from_the_bytes_that_were_checked(tmp_path, monkeypatch):
    # the archive swapped on disk after its check (the pickling one from the test above) is not what
    # torch.export.load reads: it reads the checked bytes
    import tessera.frontend.torch as frontend

    path = tmp_path / "m.pt2"
    torch.export.save(export(nn.Linear(2, 2).eval(), torch.randn(1, 2)), str(path))
    swapped = tmp_path / "swapped.pt2"
    _pickling_copy(path, swapped)
    check = frontend._check_payloads

    def check_then_swap(where, rel, data):
        check(where, rel, data)
        path.write_bytes(swapped.read_bytes())      # another process replaces the file meanwhile

    monkeypatch.setattr(frontend, "_check_payloads", check_then_swap)
    loaded = frontend.load_program(path)
    assert isinstance(loaded, torch.export.ExportedProgram)
    assert path.read_bytes() == swapped.read_bytes()


class ManyOps(nn.Module):
    """Shape, index, reduction and creation ops the model tests do not reach, in one program."""

    def forward(self, x, idx):
        a = torch.nn.functional.pad(x, (1, 2, 0, 1), value=0.5)[:, 1:, :-1]       # pad, then slice
        b = torch.cat([a.flip(-1), a.repeat(1, 1, 1)], dim=1).tril(1)
        c = torch.gather(b, 1, idx) + b.index_select(2, torch.tensor([0, 2]))[:, :1].sum()
        d = torch.nn.functional.max_pool1d(x, 2, 2) + torch.nn.functional.avg_pool1d(x, 2, 2)
        e = torch.stack([x.var(dim=1, unbiased=True), x.std(dim=1)], 0)
        f = x.cumsum(2) * (x.argmax(-1, keepdim=True) == 1) + torch.full_like(x, 2.0) + torch.arange(x.shape[-1])
        g = torch.where(x > 0, x, x.amax(dim=(1, 2), keepdim=True)) - x.mean() + x[:, 1].unsqueeze(1)
        parts = x.split([1, 2], dim=1)
        return c, d, e, f + g, parts[1] * parts[0], x.unbind(0)[1], x.transpose(1, 2).clamp(-0.5, 0.5)


def test_assorted_shape_index_and_reduction_ops_match_eager():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4)
    idx = torch.randint(0, 6, (2, 6, 6))
    m = ManyOps().eval()
    exe = tessera.compile(export(m, x, idx))
    with torch.no_grad():
        want = m(x, idx)
    for got, w in zip(exe(x.numpy(), idx.numpy()), want):
        assert_close(got, w)
