"""The ahead-of-time executor: the whole graph in one C call over the static memory plan."""
import ctypes
import threading

import numpy as np
import pytest

import tessera
from tessera.errors import DTypeError, ShapeError, TesseraError
from tessera.graph import Builder
from tessera.executor import build_aot, build_library
from tessera.graph.memory_plan import check_memory_plan
from tessera.runtime import AotExecutor

RNG = np.random.default_rng(11)


def tricky_graph():
    """Outputs that are an input, a constant, the same value twice, an intermediate read later;
    a node with an output nobody reads; int32 beside float32."""
    gb = Builder("tricky")
    x = gb.input("x", (4, 6))
    y = gb.input("y", (4, 3))
    w = gb.const(RNG.standard_normal((4, 6)).astype(np.float32), "w")
    a = gb.op("test.add", x, w, alpha=0.5)
    b = gb.op("test.neg", a)
    lo, hi = gb.op("test.split2", b)          # hi: never read
    c = gb.op("test.add", gb.op("test.neg", lo), y)
    d = gb.op("test.add", c, c)
    gb.output(d, b, x, w, d, gb.op("test.to_int32", c), gb.op("test.sum_rows", b))
    return gb.finish()


@pytest.fixture(scope="module")
def tricky():
    exe = tessera.compile(tricky_graph())
    return exe, build_aot(exe)


def inputs():
    return {"x": RNG.standard_normal((4, 6)).astype(np.float32), "y": RNG.standard_normal((4, 3)).astype(np.float32)}


def test_results_equal_the_graph_executors(tricky):
    exe, aot = tricky
    for _ in range(3):
        feed = inputs()
        want, got = exe.run(feed), aot.run(feed)
        assert len(got) == len(want) == 7
        for a, b in zip(want, got):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(b, a)
    x = feed["x"]
    np.testing.assert_allclose(got[2], x)
    assert got[0] is not got[4] and not np.shares_memory(got[2], x)


def test_call_forms_agree(tricky):
    _, aot = tricky
    feed = inputs()
    listed = aot.run(feed)
    called = aot(feed["x"], feed["y"])
    assert isinstance(called, tuple) and len(called) == 7
    for a, b, c in zip(listed, called, aot(y=feed["y"], x=feed["x"])):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    assert aot.input_names == ["x", "y"] and aot.output_names[:2] == ["add_2", "neg"]


def test_inputs_are_checked_with_clear_errors(tricky):
    _, aot = tricky
    x, y = inputs()["x"], inputs()["y"]
    with pytest.raises(DTypeError, match="input 'x': dtype float64, the graph expects float32"):
        aot(x.astype(np.float64), y)
    with pytest.raises(ShapeError, match=r"input 'y': shape \(4, 4\), the graph expects float32\[4, 3\]"):
        aot(x, np.zeros((4, 4), np.float32))
    with pytest.raises(TesseraError, match=r"missing \['y'\]"):
        aot.run({"x": x})
    with pytest.raises(TesseraError, match=r"unknown \['z'\]"):
        aot.run({"x": x, "y": y, "z": y})
    with pytest.raises(TesseraError, match="takes 2 inputs"):
        aot(x, y, y)
    # a non-contiguous input is copied, not misread
    big = RNG.standard_normal((4, 12)).astype(np.float32)
    np.testing.assert_array_equal(aot(big[:, ::2], y)[0], aot(np.ascontiguousarray(big[:, ::2]), y)[0])


def test_one_c_translation_unit_runs_every_node_in_order(tricky):
    exe, aot = tricky
    src = aot.module.get_source()
    assert sum(line.startswith("int32_t tessera_model_run_with_workspace(") for line in src.splitlines()) == 1
    calls = [line.strip().split("_kernel(")[0].split("= ")[1] for line in src.splitlines()
             if line.strip().startswith("s = ") and "_kernel(" in line]
    assert len(calls) == len(exe.graph.nodes)
    assert calls == [n["kernel"] for n in aot.doc["nodes"]]
    assert len(set(calls)) == len(exe.kernels)       # one C function per distinct kernel
    for n in exe.graph.nodes:        # every node named in the generated code
        assert f"({n.op})" in src and f"{n.name} = {n.op}(" in src


def test_the_arena_follows_a_valid_memory_plan(tricky):
    exe, aot = tricky
    plan = aot.memory_plan
    check_memory_plan(exe.graph, plan)
    assert aot.workspace_bytes == plan.arena_bytes < plan.naive_bytes


def test_the_naive_plan_gives_the_same_numbers(tricky):
    exe, aot = tricky
    naive = build_aot(exe, strategy="naive")
    assert naive.workspace_bytes > aot.workspace_bytes
    feed = inputs()
    for a, b in zip(naive.run(feed), aot.run(feed)):
        np.testing.assert_array_equal(a, b)


def test_threads_each_get_correct_results(tricky):
    exe, aot = tricky
    feeds = [inputs() for _ in range(6)]
    want = [exe.run(f) for f in feeds]
    errors = []

    def work(k):
        try:
            for _ in range(20):
                for a, b in zip(aot.run(feeds[k]), want[k]):
                    np.testing.assert_array_equal(a, b)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_benchmark_times_the_whole_model_inside_the_library(tricky):
    _, aot = tricky
    res = aot.benchmark(inputs(), number=3, repeat=2)
    assert len(res.results) == 2 and all(r > 0 for r in res.results)
    with pytest.raises(TesseraError, match="number must be an int >= 1"):
        aot.benchmark(inputs(), number=0)


def test_profile_goes_node_by_node_over_the_same_library(tricky, capsys):
    exe, aot = tricky
    report = aot.profile(inputs(), number=1, repeat=1, show=False)
    assert [r.node for r in report.rows] == [n.name for n in exe.graph.nodes]


def test_null_buffers_and_failures_are_reported_by_the_c_api(tricky):
    _, aot = tricky
    lib = aot.module._lib
    create, run, error = lib.tessera_model_create, lib.tessera_model_run, lib.tessera_model_error
    create.restype, error.restype = ctypes.c_void_p, ctypes.c_char_p
    run.argtypes, error.argtypes = [ctypes.c_void_p] * 3, [ctypes.c_void_p]
    destroy = lib.tessera_model_destroy
    destroy.argtypes = [ctypes.c_void_p]
    m = create()
    try:
        ins = (ctypes.c_void_p * 2)()
        outs = (ctypes.c_void_p * 7)()
        assert run(m, ins, outs) == 1
        assert error(m) == b"tessera_model_run: input 0 (x) is NULL"
        assert run(m, None, outs) == 1 and b"inputs is NULL; the model takes 2 input(s)" in error(m)
        assert run(None, ins, outs) == 1
    finally:
        destroy(m)


def test_symbolic_shapes_are_refused_with_a_hint():
    gb = Builder("sym")
    x = gb.input("x", ("N", 4))
    gb.output(gb.op("test.neg", x))
    with pytest.raises(ShapeError, match=r"needs static shapes, but graph input %x is float32\[N, 4\].*shape_dict"):
        tessera.compile(gb.finish(), executor="aot")
    with pytest.raises(TesseraError, match="executor must be one of 'auto', 'graph', 'aot'.*got 'fast'"):
        tessera.compile(gb.finish(), executor="fast")


def test_prefix_must_be_an_identifier(tricky):
    exe, aot = tricky
    with pytest.raises(TesseraError, match="prefix must be a C identifier"):
        build_library(exe, prefix="my-model")
    kernel = aot.doc["nodes"][0]["kernel"]
    with pytest.raises(TesseraError, match=f"collides with kernel names.*{kernel}"):
        build_library(exe, prefix=kernel)


def test_a_graph_without_nodes_copies_its_inputs():
    gb = Builder("empty")
    x = gb.input("x", (3,))
    c = gb.const(np.arange(2, dtype=np.int64), "c")
    gb.output(x, c)
    aot = tessera.compile(gb.finish(), executor="aot")
    assert isinstance(aot, AotExecutor) and aot.workspace_bytes == 0
    a, b = aot(np.array([1, 2, 3], np.float32))
    np.testing.assert_array_equal(a, [1, 2, 3])
    np.testing.assert_array_equal(b, [0, 1])


# ----------------------------------------------------------------------------- zoo models
ZOO = {
    "bert_base": dict(n_layers=2, seq_len=16, hidden=64, heads=4, ffn=128, vocab=500, max_position=64),
    "mobilenet_v2": dict(image_size=32, width_mult=0.5),
}


@pytest.mark.parametrize("name", ["bert_base", pytest.param("mobilenet_v2", marks=pytest.mark.slow)])
def test_zoo_models_run_ahead_of_time_as_in_the_graph_executor(name):
    from tessera import frontend, zoo

    g, params = frontend.from_onnx(zoo.get_model(name, **ZOO[name]))
    exe = tessera.compile(g, params)
    aot = build_aot(exe)
    feed = zoo.sample_input(name, **ZOO[name])
    for a, b in zip(exe.run(feed), aot.run(feed)):
        np.testing.assert_array_equal(b, a)
    check_memory_plan(exe.graph, aot.memory_plan)
    assert aot.workspace_bytes < aot.memory_plan.naive_bytes


def test_the_library_builds_where_the_compiler_fortifies_libc_calls(tricky, monkeypatch):
    """Some distributions' gcc defines _FORTIFY_SOURCE, which makes libc's snprintf an always_inline
    wrapper; the entry points compiled for the baseline x86-64 call libc's own symbol instead (gcc
    refuses to inline the wrapper into them: 'target specific option mismatch')."""
    import shutil
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not on the PATH")
    monkeypatch.setenv("CC", "gcc -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2")
    exe, _ = tricky
    aot = build_aot(exe)                 # built again: the compiler command is part of the cache key
    feeds = inputs()
    for got, want in zip(aot.run(feeds), exe.run(feeds)):
        np.testing.assert_array_equal(got, want)
