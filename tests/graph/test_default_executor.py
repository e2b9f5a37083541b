"""tessera.compile's default executor ("auto"): one C entry over the static memory plan when the
optimized graph's shapes are static (an AotExecutor, its kernels compiled in one translation unit,
none on its own), the graph executor when a dimension is symbolic; profile() on the default path
times every node inside the one entry and reports what lies outside the kernels."""
import numpy as np
import pytest

import tessera
from tessera import zoo
from tessera.errors import TesseraError
from tessera.graph import Builder
from tessera.runtime import AotExecutor, GraphExecutor, load_module

SMALL = {
    "resnet18": dict(image_size=32),
    "mobilenet_v2": dict(image_size=32, width_mult=0.5),
    "bert_base": dict(n_layers=2, seq_len=16, hidden=64, heads=4, ffn=128, vocab=500, max_position=64),
    "gpt2_block": dict(seq_len=16, hidden=64, heads=4, n_positions=64),
}


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_default_path_equals_the_graph_executor_on_zoo_models(name):
    pytest.importorskip("onnx")
    graph, params = tessera.frontend.from_onnx(zoo.get_model(name, **SMALL[name]))
    feeds = zoo.sample_input(name, **SMALL[name])
    default = tessera.compile(graph, params)
    per_node = tessera.compile(graph, params, executor="graph")
    assert isinstance(default, AotExecutor) and isinstance(per_node, GraphExecutor)
    assert default.output_names == per_node.output_names
    got, want = default.run(feeds), per_node.run(feeds)
    assert len(got) == len(want)
    for o, g, w in zip(default.output_names, got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, o
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{name}: output {o}")


def chain(n=3, shape=(4, 24)):
    gb = Builder("chain")
    v = x = gb.input("x", shape)
    for i in range(n):
        v = gb.op("negative" if i % 2 else "nn.relu", v)
    gb.output(gb.op("add", v, x))
    return gb.finish()


def test_static_shapes_give_one_c_entry_and_no_kernel_compiled_on_its_own():
    # a shape no other test uses: the in-process kernel cache holds no compiled kernel for it
    exe = tessera.compile(chain(shape=(3, 29)), opt_level=1)
    assert isinstance(exe, AotExecutor)
    assert exe.kernels and not any(k.compiled for k in exe.kernels)
    x = rand(3, 29)
    ref = np.maximum(-np.maximum(x, 0), 0) + x          # relu, negative, relu, add x
    np.testing.assert_allclose(exe(x), ref, rtol=1e-6)
    assert exe.graph.nodes and exe.plan.memory is not None and exe.memory_plan is not None
    # the graph executor of the same graph builds each kernel on its own, from the same prepared kernels
    per_node = tessera.compile(chain(shape=(3, 29)), opt_level=1, executor="graph")
    assert [k for k in per_node.kernels] == exe.kernels and all(k.compiled for k in exe.kernels)


def test_symbolic_shapes_compile_and_run_through_the_graph_executor():
    gb = Builder("sym")
    x = gb.input("x", ("N", 8))
    gb.output(gb.op("nn.relu", gb.op("negative", x)))
    exe = tessera.compile(gb.finish())
    assert isinstance(exe, GraphExecutor)
    for n in (1, 5):
        x = rand(n, 8, seed=n)
        np.testing.assert_allclose(exe(x), np.maximum(-x, 0))
    with pytest.raises(TesseraError, match="needs static shapes"):
        tessera.compile(gb.finish(), executor="aot")


def test_shapes_bound_at_compile_time_take_the_one_entry():
    pytest.importorskip("onnx")
    model = zoo.get_model("resnet18", batch="N", **SMALL["resnet18"])
    graph, params = tessera.frontend.from_onnx(model)
    sym = tessera.compile(graph, params)
    assert isinstance(sym, GraphExecutor)                    # the batch is symbolic
    name = model.graph.input[0].name
    fixed, params = tessera.frontend.from_onnx(model, shape_dict={name: (2, 3, 32, 32)})
    # the same passes as the symbolic graph gets (the Winograd rewrite needs static shapes: it would
    # compute the 3x3 convolutions with other roundings than the symbolic graph's direct ones)
    exe = tessera.compile(fixed, params, disabled_passes=["winograd"])
    assert isinstance(exe, AotExecutor)
    x = zoo.sample_input("resnet18", batch=2, **SMALL["resnet18"])
    np.testing.assert_allclose(exe.run(x)[0], sym.run(x)[0], rtol=1e-5, atol=1e-6)


def test_profile_on_the_default_path_lists_every_node_and_what_is_outside(capsys):
    exe = tessera.compile(chain(n=4, shape=(16, 40)), opt_level=1)
    assert isinstance(exe, AotExecutor)
    x = rand(16, 40)
    report = exe.profile(x, number=3, repeat=2)
    text = capsys.readouterr().out
    assert [r.node for r in report.rows] == [n.name for n in exe.graph.nodes]
    assert [r.op for r in report.rows] == [n.op for n in exe.graph.nodes]
    assert all(r.ms > 0 for r in report.rows)
    assert report.rows[0].input_shapes == [(16, 40)] and report.rows[0].output_shapes == [(16, 40)]
    assert report.call_ms > report.total_ms > 0
    assert report.outside_ms == pytest.approx(report.call_ms - report.total_ms)
    assert [what for what, _, _ in report.outside] == ["in the entry", "around the entry"]
    assert sum(ms for _, _, ms in report.outside) == pytest.approx(report.outside_ms)
    assert "tessera_model_run_profiled" in text and "outside the kernels" in text and "whole call" in text
    for n in exe.graph.nodes:
        assert n.name in text
    with pytest.raises(TesseraError, match="number must be an int >= 1"):
        exe.profile(x, number=0)


def test_the_exported_library_has_the_profiled_entry(tmp_path):
    exe = tessera.compile(chain(n=2, shape=(2, 5)), opt_level=1)
    path = exe.export_library(tmp_path / "m.so")
    header = (tmp_path / "m.h").read_text()
    assert "tessera_model_run_profiled(tessera_model_t* model" in header
    assert f"#define TESSERA_MODEL_NUM_NODES {len(exe.graph.nodes)}" in header
    loaded = load_module(path)
    assert isinstance(loaded, AotExecutor)
    x = rand(2, 5)
    np.testing.assert_array_equal(loaded(x), exe(x))
    rep = loaded.profile(x, number=1, repeat=1, show=False)
    assert [r.node for r in rep.rows] == [n.name for n in exe.graph.nodes] and rep.call_ms is not None


def test_executor_choices_are_named():
    with pytest.raises(TesseraError, match=r"executor must be one of 'auto', 'graph', 'aot'.*got 'fast'"):
        tessera.compile(chain(), executor="fast")
    with pytest.raises(TesseraError, match=r"executor must be one of 'auto', 'graph', 'aot'.*got None"):
        tessera.compile(chain(), executor=None)
