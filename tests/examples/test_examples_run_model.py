"""examples/run_model.c: an exported model run from C with no Python, outputs equal to the Python run.

The deployment path end to end: zoo ONNX -> `tessera compile model.onnx -o model.so` (+ model.h)
-> gcc links examples/run_model.c against the library -> the program reads a raw float32 input
file and writes the output file.
"""
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

import tessera
from tessera import zoo
from tessera.cli import main
from tessera.runtime import AotExecutor, load_module

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SMALL_RESNET = dict(image_size=32)


def gcc_link(src: Path, model_dir: Path, out: Path, extra=()):
    """The one gcc line of examples/Makefile."""
    cmd = ["gcc", "-O2", "-std=c11", f"-I{model_dir}", str(src), "-o", str(out), f"-L{model_dir}", "-l:model.so",
           f"-Wl,-rpath,{model_dir}", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


def deploy(tmp: Path, name: str, options: dict):
    """ONNX file -> tessera compile -> model.so + model.h in tmp; the sample input as x.bin."""
    onnx.save(zoo.get_model(name, **options), tmp / "model.onnx")
    assert main(["compile", str(tmp / "model.onnx"), "-o", str(tmp / "model.so")]) == 0
    x = zoo.sample_input(name, **options)["input"]
    x.tofile(tmp / "x.bin")
    np.save(tmp / "x.npy", x)
    return x


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    d = tmp_path_factory.mktemp("deploy")
    x = deploy(d, "resnet18", SMALL_RESNET)
    return d, x


def test_the_c_example_runs_the_exported_model_as_python_does(resnet, capsys):
    d, x = resnet
    assert (d / "model.h").exists()
    exe = gcc_link(EXAMPLES / "run_model.c", d, d / "run_model")
    proc = subprocess.run([str(exe), str(d / "x.bin"), str(d / "y.bin")], capture_output=True, text=True,
                          cwd="/", timeout=120)
    assert proc.returncode == 0, proc.stderr
    y_c = np.fromfile(d / "y.bin", dtype=np.float32)
    loaded = load_module(d / "model.so")
    assert isinstance(loaded, AotExecutor)
    y_py = loaded(x)
    np.testing.assert_array_equal(y_c, y_py.reshape(-1))
    # and the graph executor, compiled afresh in this process, agrees
    graph, params = tessera.frontend.from_onnx(str(d / "model.onnx"))
    np.testing.assert_array_equal(y_c, tessera.compile(graph, params)(x).reshape(-1))
    # the CLI runs the same library
    assert main(["run", str(d / "model.so"), "--input", str(d / "x.npy"), "--output", str(d / "y.npy")]) == 0
    np.testing.assert_array_equal(np.load(d / "y.npy").reshape(-1), y_c)


def test_the_c_example_reports_a_short_input_file(resnet):
    d, x = resnet
    exe = d / "run_model"
    if not exe.exists():
        gcc_link(EXAMPLES / "run_model.c", d, exe)
    (d / "short.bin").write_bytes(x.tobytes()[:100])
    proc = subprocess.run([str(exe), str(d / "short.bin"), str(d / "o.bin")], capture_output=True, text=True)
    assert proc.returncode == 1 and f"cannot read {x.nbytes} bytes" in proc.stderr
    proc = subprocess.run([str(exe)], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage:" in proc.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_the_makefile_builds_the_example(resnet, tmp_path):
    d, _ = resnet
    for f in ("run_model.c", "Makefile"):
        shutil.copy(EXAMPLES / f, tmp_path / f)
    proc = subprocess.run(["make", "-C", str(tmp_path), f"MODEL_DIR={d}"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    run = subprocess.run([str(tmp_path / "run_model"), str(d / "x.bin"), str(tmp_path / "y.bin")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    np.testing.assert_array_equal(np.fromfile(tmp_path / "y.bin", np.float32),
                                  load_module(d / "model.so")(np.load(d / "x.npy")).reshape(-1))


WORKSPACE_PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include "model.h"

/* no allocation: the caller's arena, and the error paths of the C API */
static _Alignas(64) unsigned char arena[TESSERA_MODEL_WORKSPACE_BYTES];
static float in[TESSERA_MODEL_INPUT_0_NUMEL], out[TESSERA_MODEL_OUTPUT_0_NUMEL];

int main(void) {
  static const int64_t shape[] = TESSERA_MODEL_INPUT_0_SHAPE;
  if (shape[1] != 3 || tessera_model_workspace_size != TESSERA_MODEL_WORKSPACE_BYTES) return 10;
  FILE* f = fopen("x.bin", "rb");
  if (!f || fread(in, 1, sizeof in, f) != sizeof in) return 11;
  fclose(f);
  char err[256];
  const void* ins[] = {in};
  void* outs[] = {out};
  if (tessera_model_run_with_workspace(arena, ins, outs, err, sizeof err) != 0) { puts(err); return 12; }
  f = fopen("ws.bin", "wb");
  fwrite(out, 1, sizeof out, f);
  fclose(f);
  const void* none[] = {NULL};
  int32_t s = tessera_model_run_with_workspace(arena, none, outs, err, sizeof err);
  printf("%d %s\n", (int)s, err);
  tessera_model_t* m = tessera_model_create();
  s = tessera_model_run(m, none, outs);
  printf("%d %s\n", (int)s, tessera_model_error(m));
  tessera_model_destroy(m);
  return 0;
}
"""


def test_a_c_program_can_bring_its_own_arena_and_sees_errors(resnet):
    d, x = resnet
    (d / "ws.c").write_text(WORKSPACE_PROGRAM)
    exe = gcc_link(d / "ws.c", d, d / "ws")
    proc = subprocess.run([str(exe)], capture_output=True, text=True, cwd=d)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines == ["1 tessera_model_run: input 0 (input) is NULL"] * 2
    np.testing.assert_array_equal(np.fromfile(d / "ws.bin", np.float32), load_module(d / "model.so")(x).reshape(-1))


@pytest.mark.slow
def test_the_full_resnet18_runs_from_c_as_from_python(tmp_path):
    x = deploy(tmp_path, "resnet18", {})
    exe = gcc_link(EXAMPLES / "run_model.c", tmp_path, tmp_path / "run_model")
    proc = subprocess.run([str(exe), str(tmp_path / "x.bin"), str(tmp_path / "y.bin")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    y_c = np.fromfile(tmp_path / "y.bin", dtype=np.float32)
    np.testing.assert_array_equal(y_c, load_module(tmp_path / "model.so")(x).reshape(-1))
    graph, params = tessera.frontend.from_onnx(str(tmp_path / "model.onnx"))
    np.testing.assert_array_equal(y_c, tessera.compile(graph, params)(x).reshape(-1))
    import onnxruntime as ort

    ref = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    np.testing.assert_allclose(y_c, ref[0].reshape(-1), rtol=1e-4, atol=1e-4)
    assert os.path.getsize(tmp_path / "model.so") > sum(x.nbytes for x in params.values())
