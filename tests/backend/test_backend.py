"""tessera.backend: the one build entry (lower -> render -> compile -> load) every caller uses."""
import numpy as np
import pytest

import tessera
from tessera import backend, te
from tessera.backend.c import CBackend
from tessera.errors import TesseraError
from tessera.tir.transform import PIPELINE


def _scale_func(n=None):
    n = n if n is not None else te.var("n")
    A = te.placeholder((n, 16), name="A")
    B = te.compute((n, 16), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    return te.create_prim_func([A, B])


def test_build_lowers_renders_compiles_and_loads():
    art = backend.build(_scale_func(), "c")
    a = np.random.default_rng(0).standard_normal((5, 16)).astype("float32")
    b = np.zeros_like(a)
    art.module(a, b)
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
    (info,) = art.source.functions
    assert info.name == "main" and info.entry == "tessera_call_main" and info.kernel == "main_kernel"
    assert [p["name"] for p in info.params] == ["A", "B"] and info.params[0]["shape"] == ["n", 16]
    assert info.kernel_params == ("const float* restrict", "float* restrict", "int32_t")
    assert info.shape_vars == ("n",) and info.kernel_takes_err is False
    assert f"static int32_t {info.kernel}(" in art.source.text       # what the info says is there


def test_generate_names_a_single_function_and_refuses_a_name_for_several():
    src = backend.generate(_scale_func(4), "c", name="scale")
    assert src.functions[0].name == "scale" and src.function("scale").entry == "tessera_call_scale"
    with pytest.raises(TesseraError, match="has no function 'other'"):
        src.function("other")
    mod = tessera.ir.IRModule({"f": _scale_func(4), "g": _scale_func(8)})
    with pytest.raises(TesseraError, match="applies to a single function, got 2"):
        backend.generate(mod, "c", name="x")
    assert [f.name for f in backend.generate(mod, "c").functions] == ["f", "g"]


def test_lowering_runs_the_backends_passes_in_order_and_dumps_each():
    seen = []
    backend.generate(_scale_func(4), "c", dump=lambda name, f: seen.append(name))
    assert seen == [name for name, _ in PIPELINE]


def test_a_kind_without_a_backend_is_refused_naming_those_that_have_one(monkeypatch):
    # every kind has a backend now (vdla: tests/accel/vdla); take one away for the test
    from tessera.backend import base
    monkeypatch.delitem(base._BACKENDS, "vdla")
    with pytest.raises(TesseraError, match=r"kind 'vdla' has no backend yet; backends: c"):
        tessera.build(_scale_func(4), target="vdla")


def test_every_caller_goes_through_the_registered_backend():
    """tessera.build and the graph executor's kernels both reach the backend registered for 'c'."""
    calls = []

    class Counting(CBackend):
        def compile(self, source):
            calls.append(source.functions[0].name)
            return super().compile(source)

    original = backend.get_backend("c")
    backend.register_backend(Counting())
    try:
        tessera.build(_scale_func(3), "c", name="via_build")
        from tessera.graph import Builder

        gb = Builder("g")
        x = gb.input("x", (13, 7))
        gb.output(gb.op("tanh", gb.op("exp", x)))
        exe = tessera.compile(gb.finish(), target="c -num-threads=1", opt_level=0)
        xs = np.linspace(-1, 1, 91, dtype="float32").reshape(13, 7)
        np.testing.assert_allclose(exe(xs), np.tanh(np.exp(xs)), rtol=1e-5)
    finally:
        backend.register_backend(original)
    assert calls[0] == "via_build" and len(calls) >= 2


def test_register_backend_refuses_what_is_not_a_backend():
    with pytest.raises(TesseraError, match="takes a Backend with a kind"):
        backend.register_backend(object())
