"""`tessera demo --model NAME` compiles and runs a zoo model and checks it against onnxruntime;
benchmarks/e2e.py measures the zoo models and writes its table as JSON."""
import importlib.util
import json
import pathlib

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("tessera.frontend.onnx", reason="the ONNX frontend (tessera/frontend/onnx.py) is not there yet")

from tessera import cli  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_demo_model_compiles_runs_and_matches_onnxruntime(capsys):
    rc = cli.main(["demo", "--model", "gpt2_block"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "output output: float32[1, 128, 768]" in out
    assert "max |error| vs onnxruntime" in out and "OK" in out and "MISMATCH" not in out


def test_demo_rejects_unknown_model(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["demo", "--model", "resnet19"])
    assert e.value.code == 2
    assert "invalid choice: 'resnet19'" in capsys.readouterr().err


def test_e2e_benchmark_writes_rows_with_ratios(tmp_path):
    spec = importlib.util.spec_from_file_location("tessera_bench_e2e", ROOT / "benchmarks" / "e2e.py")
    e2e = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(e2e)
    path = tmp_path / "e2e.json"
    rc = e2e.main(["--small", "--models", "gpt2_block,resnet18", "--threads", "1", "--opt-level", "0,2",
                   "--warmup", "0", "--repeat", "2", "--no-torch", "--json", str(path)])
    assert rc == 0
    doc = json.loads(path.read_text())
    assert doc["benchmark"] == "e2e"
    rows = doc["rows"]
    assert [(r["model"], r["tessera_cfg"]) for r in rows] == [
        ("gpt2_block (small)", "O0"), ("gpt2_block (small)", "O2"), ("resnet18 (small)", "O0"),
        ("resnet18 (small)", "O2")]
    for r in rows:
        assert r["ok"] and r["max_abs_err"] < 1e-4
        assert r["tessera_ms"] > 0 and r["ort_ms"] > 0
        assert r["tessera/ort"] == pytest.approx(r["tessera_ms"] / r["ort_ms"])
        assert r["torch_ms"] == ""


@pytest.mark.parametrize("name,dynamic", [("resnet18", False), ("mobilenet_v2", False), ("bert_base", True),
                                          ("gpt2_small", True)])
def test_e2e_pytorch_column_computes_the_same_model(name, dynamic):
    """benchmarks/_torch_onnx.py (the PyTorch column) gives onnxruntime's outputs on the zoo graphs."""
    pytest.importorskip("torch")
    import onnxruntime as ort
    import numpy as np

    from tessera import zoo

    spec = importlib.util.spec_from_file_location("tessera_bench_torch_onnx", ROOT / "benchmarks" / "_torch_onnx.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    kw = {"resnet18": dict(image_size=32), "mobilenet_v2": dict(image_size=32, width_mult=0.5),
          "bert_base": dict(n_layers=2, seq_len=16, hidden=64, heads=4, ffn=128, vocab=500, max_position=64),
          "gpt2_small": dict(n_layers=2, seq_len=16, hidden=64, heads=4, vocab=500, n_positions=64)}[name]
    if dynamic:
        kw["dynamic_shapes"] = True
    model = zoo.get_model(name, batch=2, **kw)
    feeds = zoo.sample_input(name, batch=2, **kw)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = mod.TorchOnnxRunner(model)(feeds)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)
