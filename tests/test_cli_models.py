"""The model commands of the CLI: compile, run, check, bench (through tessera.cli.main)."""
import importlib.util
import pathlib
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from tessera.cli import main

# the private ONNX test domain of tests/frontend (converters "TAdd", "TCopy", ...)
if "tessera_test_onnx_converters" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "tessera_test_onnx_converters", pathlib.Path(__file__).parent / "frontend" / "onnx_test_converters.py")
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["tessera_test_onnx_converters"] = _mod
    _spec.loader.exec_module(_mod)
T = "tessera.test"


def _model(nodes, inputs, outputs, inits=(), test_domain=True):
    g = helper.make_graph(nodes, "cli_model", inputs, outputs, initializer=list(inits))
    ops = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(T, 1)] if test_domain else [])
    return helper.make_model(g, opset_imports=ops)


W = np.arange(6, dtype=np.float32).reshape(2, 3)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    """y = x + w (an initializer), z = y + y; x: float32[N, 3] with a symbolic batch."""
    d = tmp_path_factory.mktemp("cli")
    m = _model([helper.make_node("TAdd", ["x", "w"], ["y"], domain=T),
                helper.make_node("TAdd", ["y", "y"], ["z"], domain=T)],
               [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
               [helper.make_tensor_value_info("y", TP.FLOAT, None), helper.make_tensor_value_info("z", TP.FLOAT, None)],
               [numpy_helper.from_array(W, "w")])
    p = d / "model.onnx"
    onnx.save(m, p)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.save(d / "x.npy", x)
    return d, p, x


def test_compile_writes_a_library_that_run_loads(model_path, capsys):
    d, p, x = model_path
    lib = d / "model.so"
    assert main(["compile", str(p), "-o", str(lib)]) == 0
    out = capsys.readouterr().out
    assert "wrote" in out and lib.exists() and (d / "model.h").exists()
    assert main(["run", str(lib), "--input", str(d / "x.npy"), "--output", str(d / "y.npy"),
                 "--output", str(d / "z.npy")]) == 0
    np.testing.assert_allclose(np.load(d / "y.npy"), x + W, rtol=1e-6)
    np.testing.assert_allclose(np.load(d / "z.npy"), 2 * (x + W), rtol=1e-6)


def test_run_takes_onnx_inputs_by_name_and_npz_output(model_path, capsys):
    d, p, x = model_path
    assert main(["run", str(p), "--input", f"x={d / 'x.npy'}", "--output", str(d / "all.npz")]) == 0
    with np.load(d / "all.npz", allow_pickle=False) as z:
        np.testing.assert_allclose(z["y"], x + W, rtol=1e-6)
        np.testing.assert_allclose(z["z"], 2 * (x + W), rtol=1e-6)


def test_run_prints_outputs_without_output_files(model_path, capsys):
    d, p, x = model_path
    assert main(["run", str(p), "--input", str(d / "x.npy")]) == 0
    out = capsys.readouterr().out
    assert "y: float32[2, 3]" in out and "z: float32[2, 3]" in out


def test_errors_are_one_line_with_status_2(model_path, capsys):
    d, p, x = model_path
    assert main(["run", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tessera: error: give every model input") and "Traceback" not in err
    assert main(["run", str(d / "nothing.so")]) == 2
    assert "no such file" in capsys.readouterr().err
    np.save(d / "bad.npy", np.zeros((2, 3), np.float64))
    assert main(["run", str(p), "--input", str(d / "bad.npy")]) == 2
    assert "input 'x': dtype float64" in capsys.readouterr().err
    assert main(["run", str(p), "--input", "q=" + str(d / "x.npy")]) == 2
    assert "no input 'q'" in capsys.readouterr().err
    assert main(["run", str(p), "--input", str(d / "x.npy"), "--output", str(d / "o.npy")]) == 2
    assert "2 outputs" in capsys.readouterr().err
    assert main(["compile", str(d / "x.npy")]) == 2
    assert "takes an ONNX model" in capsys.readouterr().err


@pytest.mark.parametrize("model", ["onnx", "library"])
def test_run_refuses_a_file_that_is_not_npy_saying_what_the_input_expects(model_path, capsys, model):
    """A raw .bin (what examples/run_model.c reads) or a pickle is not a .npy array: the error says
    so and gives the input's type, not numpy's advice about allow_pickle."""
    d, p, x = model_path
    if model == "library":
        p = d / "refuse.so"
        assert main(["compile", str(d / "model.onnx"), "-o", str(p)]) == 0
        capsys.readouterr()
    x.tofile(d / "x.bin")
    (d / "x.pkl").write_bytes(b"\x80\x04\x95" + bytes(20))
    for bad in ("x.bin", "x.pkl"):
        assert main(["run", str(p), "--input", str(d / bad)]) == 2
        err = capsys.readouterr().err
        assert f"{d / bad} is not a .npy array" in err and "input 'x' expects float32[2, 3]" in err
        assert "pickle" not in err and "Traceback" not in err


def test_check_lists_every_unsupported_op_and_exits_1(tmp_path, capsys):
    m = _model([helper.make_node("Fancy", ["x"], ["a"], name="n1"),
                helper.make_node("TCopy", ["x"], ["b"], domain=T, name="ok"),
                helper.make_node("Fancier", ["x"], ["c"], name="n2")],
               [helper.make_tensor_value_info("x", TP.FLOAT, [2])],
               [helper.make_tensor_value_info(n, TP.FLOAT, None) for n in "abc"])
    onnx.save(m, tmp_path / "m.onnx")
    assert main(["check", str(tmp_path / "m.onnx")]) == 1
    out = capsys.readouterr().out
    assert "2 of 3 nodes" in out and "Fancy" in out and "'n1'" in out and "Fancier" in out and "'n2'" in out
    assert "opset 17" in out
    good = _model([helper.make_node("TCopy", ["x"], ["b"], domain=T)],
                  [helper.make_tensor_value_info("x", TP.FLOAT, [2])], [helper.make_tensor_value_info("b", TP.FLOAT, None)])
    onnx.save(good, tmp_path / "good.onnx")
    assert main(["check", str(tmp_path / "good.onnx")]) == 0
    assert "all 1 nodes are supported" in capsys.readouterr().out


def test_bench_prints_tessera_beside_onnxruntime(tmp_path, capsys):
    m = _model([helper.make_node("Add", ["x", "x"], ["y"])], [helper.make_tensor_value_info("x", TP.FLOAT, ["N", 8])],
               [helper.make_tensor_value_info("y", TP.FLOAT, None)], test_domain=False)
    onnx.save(m, tmp_path / "add.onnx")
    assert main(["bench", str(tmp_path / "add.onnx"), "--threads", "1", "--repeat", "3", "--symbol-value", "4"]) == 0
    out = capsys.readouterr().out
    assert "x: float32[4, 8]" in out
    assert "tessera      end to end" in out and "onnxruntime  end to end" in out
    assert "ratio tessera / onnxruntime" in out and "warning" not in out


def test_bench_of_a_static_model_splits_the_call_into_nodes_and_outside(tmp_path, capsys):
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", TP.FLOAT, [2, 8])],
               [helper.make_tensor_value_info("y", TP.FLOAT, None)], test_domain=False)
    onnx.save(m, tmp_path / "relu.onnx")
    assert main(["bench", str(tmp_path / "relu.onnx"), "--threads", "1", "--repeat", "3"]) == 0
    out = capsys.readouterr().out
    assert "profiled call" in out and "outside the kernels" in out and "in the entry" in out


def test_demo_still_runs(capsys):
    assert main(["demo", "--size", "16"]) == 0
    assert "OK" in capsys.readouterr().out


def test_bench_says_the_machine_was_busy_instead_of_printing_a_ratio(tmp_path, capsys):
    """Another process taking turns on the one core the benchmark may use: the times are the
    scheduler's, so bench names the waits instead of giving tessera / onnxruntime a ratio."""
    import os
    import subprocess

    from tessera.runtime.contention import thread_waits

    if thread_waits() is None:
        pytest.skip("this kernel does not report threads' run-queue waits (/proc/self/task/*/schedstat)")
    m = _model([helper.make_node("Add", ["x", "x"], ["y"])], [helper.make_tensor_value_info("x", TP.FLOAT, [64, 64])],
               [helper.make_tensor_value_info("y", TP.FLOAT, None)], test_domain=False)
    onnx.save(m, tmp_path / "add.onnx")
    saved = os.sched_getaffinity(0)
    cpu = min(saved)
    hog = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})\n"
                            f"print('spinning', flush=True)\nwhile True: pass"], stdout=subprocess.PIPE, text=True)
    try:
        # the hog spins on the core before the timing starts (Python's start-up took longer than a run
        # of the bench: the bench could end before the hog ever ran), and the timing lasts several of the
        # scheduler's slices (20000 calls of about 4 us a runtime: 400 could end within one slice, unwaited)
        assert hog.stdout.readline().strip() == "spinning"
        os.sched_setaffinity(0, {cpu})
        assert main(["bench", str(tmp_path / "add.onnx"), "--threads", "1", "--repeat", "20000"]) == 0
    finally:
        os.sched_setaffinity(0, saved)
        hog.kill()
        hog.wait()
    out = capsys.readouterr().out
    assert "ratio tessera / onnxruntime: none, the machine was busy while timing" in out, out
    assert "waited" in out and "x end to end" not in out
