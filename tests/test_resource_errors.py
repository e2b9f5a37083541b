"""Running out of memory or of Python's recursion depth on a user-facing path (tessera.build,
tessera.compile, from_onnx, a tuning database's load) raises a TesseraError (errors.ResourceError)
that names the step, what ran out and the tessera function it ran out in."""
import numpy as np
import pytest

import tessera
from tessera import te
from tessera.autotune.database import Database
from tessera.codegen.c_base import CodeGenCBase
from tessera.errors import ResourceError, TesseraError
from tessera.graph import Builder
from tessera.ir import Mutator


def _out_of_memory(*args, **kwargs):
    raise MemoryError("Unable to allocate 64.0 GiB for an array")


def _add_one():
    A = te.placeholder((16,), name="A")
    return te.create_prim_func([A, te.compute((16,), lambda i: A[i] + 1.0, name="C")])


def test_memory_error_inside_a_build_is_a_tessera_error_naming_the_function(monkeypatch):
    monkeypatch.setattr(CodeGenCBase, "stmt_BufferStore", _out_of_memory)
    with pytest.raises(ResourceError) as got:
        tessera.build(_add_one(), target="c")
    msg = str(got.value)
    assert isinstance(got.value, TesseraError)
    assert msg.startswith("tessera.build of PrimFunc 'main': ran out of memory (Unable to allocate 64.0 GiB")
    assert "in tessera/codegen/c_base.py (CodeGenCBase.stmt, line" in msg


def test_memory_error_inside_a_compile_is_a_tessera_error_naming_the_graph(monkeypatch):
    gb = Builder("small")
    x = gb.input("x", (4, 8))
    gb.output(gb.op("tanh", gb.op("add", x, x)))
    monkeypatch.setattr(CodeGenCBase, "stmt_BufferStore", _out_of_memory)
    with pytest.raises(ResourceError, match=r"^tessera.compile of graph 'small': ran out of memory .* in tessera/"):
        tessera.compile(gb.finish())


class _Deepen(Mutator):
    """Replaces each stored value v by v * 1 + 0 nested `levels` times (built without recursion)."""

    def __init__(self, levels):
        super().__init__()
        self.levels = levels

    def visit_BufferStore(self, s):
        v = s.value
        for _ in range(self.levels):
            v = v * 1.0 + 0.0
        return s.replace(value=v)


def test_program_nested_beyond_the_recursion_limit_is_a_tessera_error():
    func = _add_one()
    func = func.replace(body=_Deepen(5000).visit(func.body))
    with pytest.raises(ResourceError) as got:
        tessera.build(func, target="c")
    msg = str(got.value)
    assert msg.startswith("tessera.build of PrimFunc 'main': Python's recursion limit")
    assert "calls deep): the value stored to 'C' in block 'C' of 'main' is an expression 10003 levels deep" in msg
    # the conversion leaves tessera usable: a shallow program still builds and runs
    lib = tessera.build(_add_one(), target="c")
    a, c = np.arange(16, dtype=np.float32), np.zeros(16, np.float32)
    lib(a, c)
    np.testing.assert_array_equal(c, a + 1)


def test_memory_error_in_from_onnx_is_a_tessera_error(monkeypatch):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from tessera.frontend import onnx as frontend

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    monkeypatch.setattr(frontend, "inline_functions", _out_of_memory)
    with pytest.raises(ResourceError, match=r"^tessera.frontend.from_onnx: ran out of memory \(Unable"):
        tessera.frontend.from_onnx(model)


def test_memory_error_loading_a_database_is_a_tessera_error(tmp_path, monkeypatch):
    path = tmp_path / "db.jsonl"
    path.write_text("\n")
    monkeypatch.setattr(Database, "_load", _out_of_memory)
    with pytest.raises(ResourceError, match=rf"^Database: loading {path}: ran out of memory"):
        Database(path)
