"""What a newcomer met on the command line: --version, warnings as one line, `check` of an empty file,
Ctrl-C during a compile (through tessera.cli.main, and a real SIGINT to a real process)."""
import glob
import os
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper

import tessera
from tessera.cli import main


def _relu_model(path, shape=(2, 8)):
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                                            [helper.make_tensor_value_info("x", TP.FLOAT, list(shape))],
                                            [helper.make_tensor_value_info("y", TP.FLOAT, None)]),
                          opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, path)
    return path


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"tessera {tessera.__version__}"


def test_warnings_reach_cli_users_as_one_tessera_warning_line(tmp_path, capsys):
    """A corrupt line in the tuning database: one `tessera: warning: ...` line on stderr, no Python
    warning category, file name or source line."""
    model = _relu_model(tmp_path / "relu.onnx")
    np.save(tmp_path / "x.npy", np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8))
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    assert main(["run", str(model), "--input", str(tmp_path / "x.npy"), "--db", str(tmp_path / "bad.jsonl")]) == 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "corrupt line" in ln]
    assert lines and all(ln.startswith("tessera: warning: ") for ln in lines), err
    assert f"{tmp_path / 'bad.jsonl'}:1: skipped a corrupt line" in lines[0]
    assert "UserWarning" not in err and "database.py" not in err and "self._load()" not in err


def test_check_refuses_an_empty_file_instead_of_passing_it(tmp_path, capsys):
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert main(["check", str(tmp_path / "empty.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tessera: error: ") and "empty.onnx" in err and "no graph" in err, err


def test_check_refuses_a_graph_without_nodes(tmp_path, capsys):
    """A valid ONNX file whose graph has no node (an input passed through): an error, not 'all 0 nodes
    are supported'."""
    m = helper.make_model(helper.make_graph([], "nothing", [helper.make_tensor_value_info("x", TP.FLOAT, [2])],
                                            [helper.make_tensor_value_info("x", TP.FLOAT, [2])]),
                          opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, tmp_path / "nothing.onnx")
    assert main(["check", str(tmp_path / "nothing.onnx")]) == 2
    out, err = capsys.readouterr()
    assert "all 0 nodes" not in out and err.startswith("tessera: error: ") and "has no nodes" in err, (out, err)


def test_from_onnx_refuses_bytes_that_hold_no_graph():
    with pytest.raises(tessera.TesseraError, match="no graph"):
        tessera.frontend.from_onnx(b"")


def test_keyboard_interrupt_in_a_command_exits_130_with_one_line(tmp_path, capsys, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(tessera.cli, "_load_model_executable", interrupted)
    assert main(["compile", str(_relu_model(tmp_path / "relu.onnx"))]) == 130
    err = capsys.readouterr().err
    assert err == "tessera: interrupted\n", err


@pytest.mark.parametrize("argv", [["bench", "{model}"], ["demo", "--model", "resnet18"], ["demo", "--size", "16"]])
def test_keyboard_interrupt_in_bench_and_demo_exits_130_with_one_line(argv, tmp_path, capsys, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(tessera.cli, "_load_model_executable", interrupted)
    monkeypatch.setattr(tessera.zoo, "get_model", interrupted)
    monkeypatch.setattr(tessera, "build", interrupted)
    model = str(_relu_model(tmp_path / "relu.onnx"))
    assert main([a.format(model=model) for a in argv]) == 130
    assert capsys.readouterr().err == "tessera: interrupted\n"


def _cache_temps(cache):
    return glob.glob(os.path.join(cache, "**", ".tmp-*"), recursive=True)


def test_ctrl_c_while_the_c_compiler_runs_stops_cleanly_and_leaves_no_temporary_file(tmp_path):
    """SIGINT to the process group (what Ctrl-C on a terminal sends) while gcc writes a library into
    the cache: exit status 130, one line on stderr, no .tmp- file left in the cache."""
    cache = tmp_path / "cache"
    model = _relu_model(tmp_path / "wide.onnx", (64, 4096))
    env = dict(os.environ, TESSERA_CACHE_DIR=str(cache), PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, "-m", "tessera.cli", "compile", str(model), "-o", str(tmp_path / "w.so")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not _cache_temps(cache) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        if p.poll() is not None:
            pytest.skip("the compile finished before a temporary file of the cache was seen")
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = err.decode()
    assert p.returncode == 130, (p.returncode, err)
    lines = err.strip().splitlines()      # progress lines may come first (the compile ran for 2 s)
    assert lines[-1] == "tessera: interrupted" and all(ln.startswith("tessera: ") for ln in lines), err
    assert "Traceback" not in err and "interrupted" not in "".join(lines[:-1]), err
    assert _cache_temps(cache) == []


def _conv_relu_model(path):
    """conv (with a bias) -> relu: fused into one function at opt level 2 and above."""
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "conv_relu", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TP.FLOAT, None)],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(np.ones(4, np.float32), "b")]),
        opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, path)
    return path


def test_show_prints_the_optimized_graph_with_its_fused_functions(tmp_path, capsys):
    model = _conv_relu_model(tmp_path / "cr.onnx")
    assert main(["show", str(model)]) == 0
    out = capsys.readouterr().out
    assert "fn @fused_" in out and "nn.relu(" in out and "graph conv_relu(%x: float32[1, 3, 8, 8])" in out
    assert out.strip().splitlines()[-1] == f"# {model}: 1 nodes (1 fused), 2 constants, optimized for c at opt level 3"
    assert main(["show", str(model), "--opt-level", "0"]) == 0
    out = capsys.readouterr().out
    assert "fn @fused_" not in out and "nn.conv2d(" in out and "(0 fused)" in out
    assert main(["compile", str(model), "-o", str(tmp_path / "cr.so")]) == 0
    capsys.readouterr()
    assert main(["show", str(tmp_path / "cr.so")]) == 0
    out = capsys.readouterr().out
    assert "fn @fused_" in out and "as compiled into the library" in out
