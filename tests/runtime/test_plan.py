"""The compiled plan (tessera/runtime/plan.py): what the graph compiler hands the runtime, the same
document an exported library carries, and the executors built from it with runtime code only."""
import numpy as np
import pytest

import tessera
from tessera.errors import ShapeError, TesseraError
from tessera.graph import Builder
from tessera.graph.lowering import compile_graph
from tessera.graph.document import load_graph
from tessera.runtime import GraphExecutor, load_module
from tessera.runtime.graph_executor import graph_executor_of
from tessera.runtime.library import embedded_weights, read_document
from tessera.runtime.plan import Plan, eval_expr_json, parse_document

RNG = np.random.default_rng(3)


def _static_graph():
    gb = Builder("static")
    x = gb.input("x", (2, 8))
    w = gb.const(RNG.standard_normal((8, 4)).astype(np.float32), "w")
    h = gb.op("nn.relu", gb.op("nn.matmul", x, w))
    gb.output(gb.op("negative", h))
    return gb.finish()


def _symbolic_graph():
    gb = Builder("sym")
    x = gb.input("x", ("n", 3))
    gb.output(gb.op("negative", gb.op("nn.relu", x)))
    return gb.finish()


def test_the_compiler_makes_a_plan_with_slots_kernels_and_a_memory_layout():
    g = _static_graph()
    c = compile_graph(g, "c")
    plan = c.plan
    # slots: inputs, then constants, then node outputs in node order
    assert plan.inputs == [0] and sorted(plan.constants) == [1]
    assert [st.name for st in plan.steps] == [n.name for n in g.nodes]
    assert [plan.values[s].name for st in plan.steps for s in st.outs] == [o.name for n in g.nodes for o in n.outputs]
    assert [st.kernel for st in plan.steps] == ["nn_matmul_0", "nn_relu_1", "negative_2"]
    assert set(plan.kernels) == set(c.kernels) == {"nn_matmul_0", "nn_relu_1", "negative_2"}
    # the memory layout holds every intermediate (not the graph output) at the MemoryPlan's offsets
    mids = {s for st in plan.steps for s in st.outs} - set(plan.outputs)
    assert set(plan.memory.offsets) == mids
    assert plan.memory.arena_bytes == c.memory_plan.arena_bytes > 0


def test_a_symbolic_graph_has_no_memory_layout_and_its_extents_are_json():
    c = compile_graph(_symbolic_graph(), "c")
    assert c.plan.memory is None and c.memory_plan is None
    spec = c.plan.kernels[c.plan.steps[0].kernel]
    assert spec.in_vars == (((0, "n"),),)
    assert spec.out_shapes == [[{"var": "n"}, 3]]
    assert spec.output_shapes([(5, 3)]) == [(5, 3)]


def test_the_library_document_is_the_plan(tmp_path):
    exe = tessera.compile(_static_graph(), opt_level=0)
    path = exe.export_library(tmp_path / "m.so")
    doc = read_document(path)
    assert doc["version"] == 3 and doc["memory"]["arena_bytes"] == doc["aot"]["workspace_bytes"]
    loaded = load_module(path, executor="graph")
    lp, p = loaded.plan, exe.plan
    assert [(s.name, s.op, s.kernel, s.ins, s.outs) for s in lp.steps] == \
        [(s.name, s.op, s.kernel, s.ins, s.outs) for s in p.steps]
    assert [str(v) for v in lp.values] == [str(v) for v in p.values]
    assert lp.memory.offsets == p.memory.offsets
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_array_equal(loaded(x), exe(x))
    assert loaded.static_runner()           # the loaded graph executor runs from the library's layout


def test_a_version_2_document_loads_and_runs_the_general_path(tmp_path):
    """A library written before the memory plan was in the document (version 2, no `memory`)."""
    exe = tessera.compile(_static_graph(), opt_level=0)
    path = exe.export_library(tmp_path / "m.so")
    aot = load_module(path)
    doc = dict(aot.doc, version=2)
    del doc["memory"]
    plan = Plan.from_document(doc, embedded_weights(path, aot.module, doc), path)
    old = graph_executor_of(aot.module, plan)
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_array_equal(old(x), exe(x))
    assert plan.memory is None and old.static_runner() is False


def test_documents_of_unknown_versions_and_malformed_plans_are_refused():
    with pytest.raises(TesseraError, match="version 4; this tessera reads versions 2, 3"):
        parse_document('{"format": "tessera-graph", "version": 4}', "lib.so")
    exe = tessera.compile(_symbolic_graph(), opt_level=0)
    doc = exe.plan.document({}, "w", 0)
    doc["nodes"][0]["inputs"] = [99]
    with pytest.raises(TesseraError, match="lib.so: malformed tessera_graph: value id 99 is used before"):
        Plan.from_document(doc, {}, "lib.so")
    doc = exe.plan.document({}, "w", 0)
    doc["nodes"][0]["kernel"] = "nope"
    with pytest.raises(TesseraError, match="calls kernel 'nope'"):
        Plan.from_document(doc, {}, "lib.so")


def test_a_loaded_executor_carries_no_graph_until_graph_code_rebuilds_it(tmp_path):
    exe = tessera.compile(_symbolic_graph(), opt_level=0)
    loaded = load_module(exe.export_library(tmp_path / "s.so"))
    assert isinstance(loaded, GraphExecutor) and not loaded.has_graph
    with pytest.raises(TesseraError, match="load_graph"):
        loaded.graph
    assert load_graph(loaded).script() == exe.graph.script()
    assert loaded.graph is load_graph(loaded)
    assert [str(s) for s in loaded.inputs] == ["float32[n, 3]"]


def test_symbols_are_checked_against_the_plan():
    exe = tessera.compile(_symbolic_graph(), opt_level=0)
    np.testing.assert_array_equal(exe(np.ones((4, 3), np.float32)), -np.ones((4, 3), np.float32))
    with pytest.raises(ShapeError, match="input 'x': dimension 1 is 2, the graph expects 3"):
        exe(np.ones((4, 2), np.float32))


def test_extent_expressions_evaluate_like_c():
    env = {"n": -7, "m": 2}
    assert eval_expr_json({"truncdiv": [{"var": "n"}, {"var": "m"}]}, env) == -3
    assert eval_expr_json({"floordiv": [{"var": "n"}, {"var": "m"}]}, env) == -4
    assert eval_expr_json({"truncmod": [{"var": "n"}, {"var": "m"}]}, env) == -1
    assert eval_expr_json({"select": [{"lt": [{"var": "n"}, 0]}, 1, 2]}, env) == 1
    with pytest.raises(TesseraError, match="extent variable 'k' is not bound"):
        eval_expr_json({"var": "k"}, env)
