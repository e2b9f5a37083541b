"""What a tuning run reports: the curve (it starts on the default line, ends at the final
estimate) and `exe.tuning` (a kernel whose fastest record is its own default schedule is not tuned)."""
import importlib.util
import pathlib

import numpy as np
import pytest

import tessera
from tessera import autotune
from tessera.autotune.curve import plot_tuning_curve, tuning_curve

pytest.importorskip("xgboost")

_spec = importlib.util.spec_from_file_location("cli_tune_models", pathlib.Path(__file__).parents[1] / "test_cli_tune.py")
_models = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_models)
TARGET = "c -num-threads=1"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The conv + relu + matmul model of tests/test_cli_tune.py: (graph, params, tasks)."""
    path = _models._write_model(tmp_path_factory.mktemp("tiny") / "tiny.onnx")
    graph, params = tessera.frontend.from_onnx(str(path))
    return graph, params, autotune.extract_tasks(graph, params, TARGET)


def test_a_kernel_whose_only_record_is_its_measured_default_is_not_counted_as_tuned(tiny, tmp_path):
    graph, params, tasks = tiny
    db = str(tmp_path / "defaults.jsonl")
    res = autotune.tune_graph(graph, params, TARGET, max_trials=len(tasks), database=db, validate=False, seed=0)
    assert res.trials == len(tasks) and len(autotune.Database(db).records()) >= len(tasks)
    exe = tessera.compile(graph, params, TARGET, database=db)
    n = len([k for k in exe.kernels if not getattr(k, "host", False)])
    assert exe.tuning.startswith(f"tuned schedules for 0 of {n} kernels"), exe.tuning
    assert f"{len(tasks)} whose fastest record is the default schedule" in exe.tuning
    assert "did not apply" not in exe.tuning
    rest = n - len(tasks)          # kernels no task covers: the summary's counts add up to the kernels
    assert (f"; {rest} without a record)" in exe.tuning) == (rest > 0), exe.tuning
    np.testing.assert_allclose(exe(_models.X), _models._reference(_models.X), rtol=1e-4, atol=1e-4)


def test_the_curve_starts_on_the_default_line_and_ends_at_the_final_estimate(tiny, tmp_path):
    graph, params, tasks = tiny
    res = autotune.tune_graph(graph, params, TARGET, max_trials=len(tasks) + 12, database=str(tmp_path / "t.jsonl"),
                              validate=False, seed=0)
    curve = tuning_curve(res)
    assert curve.points[0][0] == len(tasks)                 # every default measured, nothing searched yet
    assert curve.default_ms == curve.points[0][2]           # the line is where the curve starts
    assert all(b[2] <= a[2] for a, b in zip(curve.points, curve.points[1:-1]))   # best so far only falls
    assert curve.final_ms == pytest.approx(res.latency * 1e3)  # the history ends with the final estimate
    assert res.history[-1][2] == res.latency
    assert curve.final_default_ms == pytest.approx(res.default_latency * 1e3)
    assert tuning_curve(res, resumed=True).default_ms == curve.final_default_ms
    pytest.importorskip("matplotlib")
    png = plot_tuning_curve(curve, tmp_path / "curve.png", "tiny")
    assert pathlib.Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
