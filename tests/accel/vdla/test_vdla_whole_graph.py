"""tessera.compile(graph, target="vdla"): refused at once, naming the node whose result the accelerator
cannot store (its out buffer holds int8 only) or that no VDLA schedule exists for, and where to go
instead -- not a failure deep in the code generator after a warning per kernel."""
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper

import tessera
import tessera.graph.kernels
from tessera.cli import main
from tessera.errors import UnsupportedOpError
from tessera.graph import Builder


@pytest.fixture
def no_kernel_work(monkeypatch):
    """Fails the test if a kernel is prepared (scheduled, lowered, rendered): the refusal comes first."""
    def prepared(*a, **k):
        raise AssertionError("a kernel was prepared before the VDLA target was refused")

    monkeypatch.setattr(tessera.graph.kernels, "prepare_kernel", prepared)


def _int8_graph(tail):
    b = Builder("int8_dense")
    x = b.input("x", (4, 32), "int8")
    b.output(tail(b, x, b.const(np.ones((32, 16), np.int8), "w")))
    return b.finish()


def test_int8_dense_with_int32_result_is_refused_at_once_naming_the_node(no_kernel_work):
    g = _int8_graph(lambda b, x, w: b.op("nn.matmul", x, w, out_dtype="int32", name="dense"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # no "default schedule failed" warning first
        with pytest.raises(UnsupportedOpError) as e:
            tessera.compile(g, target="vdla")
    msg = str(e.value)
    assert e.value.node == "dense" and e.value.op == "nn.matmul"
    assert "returns int32[4, 16]" in msg and "stores int8 tensors only" in msg
    assert "partition_for_vdla" in msg and "target 'c'" in msg


def test_an_int8_result_without_a_vdla_schedule_is_refused_too(no_kernel_work):
    g = _int8_graph(lambda b, x, w: b.op("nn.relu", x, name="act"))
    with pytest.raises(UnsupportedOpError, match=r"'nn.relu' \(node 'act'\): the operator library has no VDLA "
                                                 r"schedule"):
        tessera.compile(g, target="vdla -sync=serial")


def test_the_same_graph_compiles_and_runs_on_the_cpu():
    g = _int8_graph(lambda b, x, w: b.op("nn.matmul", x, w, out_dtype="int32", name="dense"))
    x = np.arange(-64, 64, dtype=np.int8).reshape(4, 32)
    np.testing.assert_array_equal(tessera.compile(g, target="c")(x), x.astype(np.int32) @ np.ones((32, 16), np.int32))


def test_cli_target_vdla_is_one_error_line(tmp_path, capsys):
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu1")], "relu",
                                            [helper.make_tensor_value_info("x", TP.FLOAT, [2, 8])],
                                            [helper.make_tensor_value_info("y", TP.FLOAT, None)]),
                          opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, tmp_path / "relu.onnx")
    assert main(["compile", str(tmp_path / "relu.onnx"), "--target", "vdla"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tessera: error: unsupported op 'nn.relu' (node 'relu1'): on target vdla it returns "
                          "float32[2, 8]"), err
    assert len(err.splitlines()) == 1 and "warning" not in err
