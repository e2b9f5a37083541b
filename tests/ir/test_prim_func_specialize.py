"""PrimFunc.specialize (TVM's): symbolic extents bound to values, so a function written with a
symbolic batch can be tuned and built for one size."""
import re

import numpy as np
import pytest

import tessera
from tessera import autotune, te
from tessera.errors import ShapeError, TesseraError
from tessera.ir.expr import IntImm


def _tour_func():
    """The README tour's program: C[n, 32] = A[n, 64] @ B[64, 32] with a symbolic n."""
    n = te.var("n")
    A = te.placeholder((n, 64), name="A")
    B = te.placeholder((64, 32), name="B")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((n, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C]), n


def _args(rows):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((rows, 64), dtype=np.float32), rng.standard_normal((64, 32), dtype=np.float32),
            np.zeros((rows, 32), np.float32))


def test_specialize_makes_every_buffer_static_and_the_kernel_checks_the_bound_size():
    func, n = _tour_func()
    assert func.free_vars() == [n]
    f = func.specialize({n: 48})
    assert f.free_vars() == []
    assert [[d.value for d in b.shape] for b in f.buffer_params] == [[48, 64], [64, 32], [48, 32]]
    assert re.search(r"\bn\b", func.script()) and not re.search(r"\bn\b", f.script())
    lib = tessera.build(f, target="c")
    a, b, c = _args(48)
    lib(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    a, b, c = _args(10)
    with pytest.raises(ShapeError, match="expected 48"):
        lib(a, b, c)


def test_specialize_by_name_and_on_an_expression_of_the_variable():
    """A Var's name works as its key; an extent n * 2 folds to a constant."""
    m = te.var("m")
    A = te.placeholder((m * 2,), name="A")
    B = te.compute((m * 2,), lambda i: A[i] + 1.0, name="B")
    f = te.create_prim_func([A, B]).specialize({"m": 8})
    assert all(type(d) is IntImm and d.value == 16 for b in f.buffer_params for d in b.shape)
    a = np.arange(16, dtype=np.float32)
    out = np.zeros(16, np.float32)
    tessera.build(f, target="c")(a, out)
    np.testing.assert_array_equal(out, a + 1)


def test_specialize_refuses_what_it_cannot_bind():
    func, n = _tour_func()
    with pytest.raises(TesseraError, match="'q' is not a symbolic extent or scalar parameter of 'main' "
                                           r"\(those are: n\)"):
        func.specialize({"q": 4})
    with pytest.raises(TesseraError, match="not a symbolic extent"):
        func.specialize({te.var("n"): 4})          # another Var of the same name is not this function's
    with pytest.raises(ShapeError, match="n is an extent"):
        func.specialize({n: -1})
    with pytest.raises(TesseraError, match="expected an int"):
        func.specialize({n: 2.5})


def test_the_tour_function_specialized_tunes_and_its_best_schedule_runs(tmp_path):
    """The README's tuning example: tune_tir needs static extents, which specialize gives."""
    func, n = _tour_func()
    f = func.specialize({n: 256})
    db = str(tmp_path / "gemm.jsonl")
    res = autotune.tune_tir(f, target="c -num-threads=1", max_trials=4, database=db)
    assert res.run_secs > 0
    sch = autotune.apply_best(f, db, "c -num-threads=1")
    a, b, c = _args(256)
    tessera.build(sch.mod, target="c -num-threads=1")(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
