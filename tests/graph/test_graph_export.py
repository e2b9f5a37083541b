"""export_library / load_module of compiled graphs: same results without recompiling."""
import os

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import te
from tessera.errors import TesseraError
from tessera.graph import Builder
from tessera.runtime import load_module


def _graph(const_dtype="float32"):
    gb = Builder("exported")
    a = gb.input("a", ("N", 3))
    b = gb.input("b", ("M", 3))
    w = gb.const(np.array([[1, 2, 3]], dtype=const_dtype).astype(np.float32), "w")
    c = gb.op("test.cat0", a, b)                  # output extent N + M
    d = gb.op("test.neg", c)
    lo, hi = gb.op("test.split2", gb.input("e", (2, 4)))
    gb.output(d, gb.op("test.sum_rows", d), gb.op("test.add", w, w), hi)
    return gb.finish()


def test_exported_graph_runs_the_same_after_loading(tmp_path):
    exe = tessera.compile(_graph(), opt_level=0)
    path = exe.export_library(tmp_path / "g.so")
    assert os.path.exists(tmp_path / "g.params.npz")
    loaded = load_module(path)
    assert loaded.graph.script() == exe.graph.script()
    rng = np.random.default_rng(1)
    for n, m in ((1, 2), (4, 3)):
        args = (rng.standard_normal((n, 3)).astype("float32"), rng.standard_normal((m, 3)).astype("float32"),
                rng.standard_normal((2, 4)).astype("float32"))
        for want, got in zip(exe(*args), loaded(*args)):
            np.testing.assert_array_equal(got, want)


def test_loaded_graph_profiles_with_the_library_timers(tmp_path, capsys):
    gb = Builder()
    x = gb.input("x", (16,))
    gb.output(gb.op("test.neg", x))
    loaded = load_module(tessera.compile(gb.finish()).export_library(tmp_path / "n.so"))
    report = loaded.profile({"x": np.ones(16, np.float32)}, number=1, repeat=1)
    assert [r.op for r in report.rows] == ["test.neg"]


def test_bfloat16_constants_survive_the_params_file(tmp_path):
    gb = Builder()
    c = gb.const(np.array([1.5, -2.25, 3.0], dtype=ml_dtypes.bfloat16), "c")
    x = gb.input("x", (3,), "bfloat16")
    gb.output(gb.op("test.add", x, c))
    exe = tessera.compile(gb.finish())
    loaded = load_module(exe.export_library(tmp_path / "b.so"))
    x = np.array([1, 2, 3], dtype=ml_dtypes.bfloat16)
    np.testing.assert_array_equal(loaded(x).astype(np.float32), np.array([2.5, -0.25, 6.0], np.float32))


def test_a_missing_weights_file_is_named(tmp_path):
    exe = tessera.compile(_graph())
    path = exe.export_library(tmp_path / "g.so")
    os.remove(tmp_path / "g.params.npz")
    with pytest.raises(TesseraError, match="weights file .*g.params.npz is missing"):
        load_module(path)


def test_kernel_libraries_still_load_as_modules(tmp_path):
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2, name="B")
    lib = tessera.build(te.create_prim_func([A, B]))
    p = lib.export_library(tmp_path / "k.so")
    mod = load_module(p)
    assert isinstance(mod, tessera.runtime.Module)
