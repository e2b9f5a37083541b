"""Every code block of README.md runs as written, in a folder holding the files the blocks name
(model.onnx, x.npy, input.bin, examples/run_model.c).

The Python blocks run in order in one namespace (later blocks use what the tour and the ONNX block
define: `func`, `n`, `exe`); the shell blocks run their commands in order with bash (`pip install`
and `pytest`, the install and test commands themselves, are left out). Blocks that compile a whole
zoo model, tune, or start PyTorch take minutes on two cores: they run in the slow run
(`pytest -m slow tests/test_readme.py`), the rest in the default one.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SLOW_WORDS = ("resnet18", "tune", "torch")      # a block naming one of these is slow (see the docstring)
SKIPPED_COMMANDS = ("pip install", "pytest")


def readme_blocks() -> list:
    """(language, code) of every fenced block of the README, in order."""
    return [(m.group(1), m.group(2)) for m in
            re.finditer(r"^```(\w*)\n(.*?)^```", README.read_text(), re.S | re.M)]


def shell_commands(code: str) -> list:
    """The commands of a shell block: comments cut, `a && b` split, install and test commands left out."""
    out = []
    for line in code.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if not line or line.startswith("#"):
            continue
        out += [c.strip() for c in line.split("&&") if not c.strip().startswith(SKIPPED_COMMANDS)]
    return out


def is_slow(code: str) -> bool:
    return any(w in code for w in SLOW_WORDS)


def _files(folder: pathlib.Path) -> None:
    """What the blocks read: model.onnx (input 'input', float32[1, 3, 224, 224]: a conv, relu, mean and
    a dense layer, small enough to compile in seconds), x.npy and input.bin of that shape, the C example."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.1, "w")
    fc = numpy_helper.from_array(rng.standard_normal((8, 10)).astype(np.float32), "fc")
    g = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["c"], strides=[4, 4]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("GlobalAveragePool", ["r"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
         helper.make_node("MatMul", ["f", "fc"], ["output"])],
        "small", [helper.make_tensor_value_info("input", TP.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("output", TP.FLOAT, None)], [w, fc])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), folder / "model.onnx")
    x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    np.save(folder / "x.npy", x)
    x.tofile(folder / "input.bin")
    (folder / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "run_model.c", folder / "examples" / "run_model.c")
    shutil.copy(ROOT / "examples" / "Makefile", folder / "examples" / "Makefile")


def test_the_readme_has_python_and_shell_blocks_and_the_split_sees_every_command():
    blocks = readme_blocks()
    assert {lang for lang, _ in blocks} == {"python", "bash"}
    assert shell_commands("pip install -e . && tessera demo   # a comment\n./run a b") == ["tessera demo", "./run a b"]


def _run_readme(tmp_path, monkeypatch, slow: bool) -> list:
    """Run the README's blocks (every block with slow=True, else the quick ones); what ran."""
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    env = dict(os.environ, PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    namespace: dict = {"__name__": "readme"}
    ran = []
    for k, (lang, code) in enumerate(readme_blocks()):
        if lang == "python":
            if is_slow(code) and not slow:
                continue
            try:
                exec(compile(code, f"README.md block {k}", "exec"), namespace)
            except Exception as e:
                raise AssertionError(f"README block {k} failed ({type(e).__name__}: {e}):\n{code}") from e
            ran.append(code)
            continue
        for cmd in shell_commands(code):          # shell commands are quick or slow one by one
            if is_slow(cmd) and not slow:
                continue
            r = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=1800)
            assert r.returncode == 0, f"README command failed ({r.returncode}): {cmd}\n{r.stdout}\n{r.stderr}"
            ran.append(cmd)
    return ran


def test_the_quick_readme_blocks_run_as_written(tmp_path, monkeypatch):
    ran = _run_readme(tmp_path, monkeypatch, slow=False)
    assert any("tessera.build(func" in c for c in ran) and any("from_onnx(\"model.onnx\"" in c for c in ran)
    assert "tessera demo" in ran
    assert (tmp_path / "model.so").exists()        # the deploying block's export


@pytest.mark.slow
def test_every_readme_block_runs_as_written(tmp_path, monkeypatch):
    ran = _run_readme(tmp_path, monkeypatch, slow=True)
    assert any("tune_tir(f1024" in c for c in ran) and any("./run_model input.bin output.bin" == c for c in ran)
    y = np.fromfile(tmp_path / "output.bin", np.float32)
    np.testing.assert_allclose(y, np.load(tmp_path / "y.npy").ravel(), rtol=1e-5, atol=1e-5)
