"""ONNX sequences and optionals (frontend/onnx_ops/sequence.py): host-side lists of tensors while
converting, flattened graph inputs/outputs regrouped by the executor; against onnxruntime."""
import re

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

import tessera
from tessera.errors import ShapeError, TesseraError, UnsupportedOpError
from tessera.frontend.onnx import check_model, from_onnx
from tessera.graph import DeferredGraph
from tessera.graph.ir import Graph

RNG = np.random.default_rng(7)


def vi(name, dtype=TP.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def seq_vi(name, dtype=TP.FLOAT, shape=None):
    return helper.make_value_info(name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(dtype, shape)))


def opt_vi(name, inner):
    return helper.make_value_info(name, helper.make_optional_type_proto(inner))


def model(nodes, inputs, outputs, opset=18):
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                             opset_imports=[helper.make_opsetid("", opset)])


def const(name, value):
    value = np.asarray(value)
    dt = {np.dtype(np.int64): TP.INT64, np.dtype(np.float32): TP.FLOAT}[value.dtype]
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, dt, value.shape, value.reshape(-1)))


def ort_run(m, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def assert_same(got, want):
    """Outputs equal, through lists (sequences) and None (empty optionals)."""
    if want is None:
        assert got is None
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    else:
        got = np.asarray(got)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def run_both(m, feeds):
    graph, params = from_onnx(m)
    got = tessera.compile(graph, params).run(feeds)
    want = ort_run(m, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_same(g, w)
    return graph, got


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# building, editing and reading sequences (positions known while converting)
# ---------------------------------------------------------------------------------------------
def test_construct_insert_erase_at_length_with_constant_positions():
    nodes = [helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s0"]),
             const("p_front", np.array(0, np.int64)), const("p_neg", np.array(-2, np.int64)),
             helper.make_node("SequenceInsert", ["s0", "x"], ["s1"]),             # appended
             helper.make_node("SequenceInsert", ["s1", "x", "p_front"], ["s2"]),  # at the front
             helper.make_node("SequenceErase", ["s2", "p_neg"], ["s3"]),          # the one before the last
             helper.make_node("SequenceErase", ["s3"], ["s4"]),                   # the last
             helper.make_node("SequenceAt", ["s4", "p_neg"], ["at"]),
             helper.make_node("SequenceLength", ["s4"], ["n"]),
             helper.make_node("Add", ["at", "x"], ["y"])]
    shapes = {"a": [2, 3], "b": [4, 3], "c": [1, 3], "x": [2, 3]}
    m = model(nodes, [vi(k, shape=s) for k, s in shapes.items()],
              [seq_vi("s4"), vi("y"), vi("n", TP.INT64, [])])
    feeds = {k: rand(*s) for k, s in shapes.items()}
    graph, (s4, y, n) = run_both(m, feeds)
    assert isinstance(graph, DeferredGraph)       # a sequence output: the executor regroups it
    assert [e.shape for e in s4] == [(2, 3), (2, 3), (4, 3)] and int(n) == 3
    np.testing.assert_array_equal(s4[0], feeds["x"])


def test_empty_sequence_insert_and_concat_along_a_new_axis():
    nodes = [helper.make_node("SequenceEmpty", [], ["e"], dtype=TP.FLOAT),
             helper.make_node("SequenceInsert", ["e", "a"], ["s1"]),
             helper.make_node("SequenceInsert", ["s1", "b"], ["s2"]),
             helper.make_node("ConcatFromSequence", ["s2"], ["stacked"], axis=-1, new_axis=1),
             helper.make_node("ConcatFromSequence", ["s2"], ["joined"], axis=-1),
             helper.make_node("SequenceLength", ["e"], ["n0"])]
    m = model(nodes, [vi("a", shape=[2, 3]), vi("b", shape=[2, 3])],
              [vi("stacked"), vi("joined"), vi("n0", TP.INT64, [])])
    graph, (stacked, joined, n0) = run_both(m, {"a": rand(2, 3), "b": rand(2, 3)})
    assert isinstance(graph, Graph)           # tensor outputs only: a plain graph
    assert stacked.shape == (2, 3, 2) and joined.shape == (2, 6) and int(n0) == 0


@pytest.mark.parametrize("split,axis,keepdims", [(np.array(2, np.int64), 1, 1),      # last chunk smaller
                                                 (np.array([1, 4, 0], np.int64), 1, 1),
                                                 (None, 0, 0), (None, -1, 1)])
def test_split_to_sequence_then_concat_back(split, axis, keepdims):
    nodes = ([const("split", split)] if split is not None else []) + [
        helper.make_node("SplitToSequence", ["x"] + (["split"] if split is not None else []), ["parts"],
                         axis=axis, keepdims=keepdims),
        helper.make_node("ConcatFromSequence", ["parts"], ["back"], axis=axis, new_axis=0 if keepdims else 1)]
    m = model(nodes, [vi("x", shape=[3, 5])], [seq_vi("parts"), vi("back")])
    x = rand(3, 5)
    _, (parts, back) = run_both(m, {"x": x})
    np.testing.assert_array_equal(back, x)
    if split is not None and split.ndim == 0:
        assert [p.shape[1] for p in parts] == [2, 2, 1]


def test_split_to_sequence_with_a_runtime_split_specializes_per_value():
    m = model([helper.make_node("SplitToSequence", ["x", "split"], ["parts"], axis=1)],
              [vi("x", shape=[2, 6]), vi("split", TP.INT64, [])], [seq_vi("parts")])
    graph, params = from_onnx(m)
    assert isinstance(graph, DeferredGraph) and graph.value_inputs == ("split",)
    exe = tessera.compile(graph, params)
    x = rand(2, 6)
    for k in (2, 4, 2):
        feeds = {"x": x, "split": np.array(k, np.int64)}
        assert_same(exe.run(feeds), ort_run(m, feeds))
    assert exe.specializations == 2


def test_sequence_at_with_a_runtime_position_specializes_per_value():
    nodes = [helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"]),
             helper.make_node("SequenceAt", ["s", "pos"], ["y"])]
    m = model(nodes, [vi("a", shape=[2]), vi("b", shape=[3]), vi("c", shape=[4]), vi("pos", TP.INT64, [])],
              [vi("y")])
    graph, params = from_onnx(m)
    assert isinstance(graph, DeferredGraph) and graph.value_inputs == ("pos",)
    exe = tessera.compile(graph, params)
    feeds = {"a": rand(2), "b": rand(3), "c": rand(4)}
    for p in (0, -1, 1):
        y = exe(**feeds, pos=np.array(p, np.int64))
        np.testing.assert_array_equal(y, [feeds["a"], feeds["b"], feeds["c"]][p])
    with pytest.raises(ShapeError, match="position 3 is out of range for a sequence of 3 elements"):
        exe(**feeds, pos=np.array(3, np.int64))
    with pytest.raises(UnsupportedOpError, match="pos") as e:
        from_onnx(m, specialize=False)
    assert e.value.needs_constant == "pos"


# ---------------------------------------------------------------------------------------------
# sequence-typed model inputs: the given list decides the structure
# ---------------------------------------------------------------------------------------------
def _map_model():
    """SequenceMap over two sequences and a tensor, two outputs (one a sequence of shapes)."""
    body = helper.make_graph([helper.make_node("Add", ["xi", "yi"], ["s0"]),
                              helper.make_node("Mul", ["s0", "t"], ["o"]),
                              helper.make_node("Shape", ["xi"], ["shp"])], "body",
                             [vi("xi", shape=["L"]), vi("yi", shape=["L"]), vi("t", shape=[1])],
                             [vi("o", shape=["L"]), vi("shp", TP.INT64, [1])])
    return model([helper.make_node("SequenceMap", ["xs", "ys", "t"], ["outs", "shapes"], body=body)],
                 [seq_vi("xs", shape=["L"]), seq_vi("ys", shape=["L"]), vi("t", shape=[1])],
                 [seq_vi("outs"), seq_vi("shapes", TP.INT64)])


def test_sequence_map_over_sequence_inputs_of_any_length():
    m = _map_model()
    graph, params = from_onnx(m)
    assert isinstance(graph, DeferredGraph) and set(graph.shape_inputs) == {"xs", "ys"}
    exe = tessera.compile(graph, params)
    t = np.array([2.0], np.float32)
    for lengths in ([3, 5], [4], [3, 5]):
        xs, ys = [rand(n) for n in lengths], [rand(n) for n in lengths]
        assert_same(exe.run({"xs": xs, "ys": ys, "t": t}), ort_run(m, {"xs": xs, "ys": ys, "t": t}))
    assert exe.specializations == 2       # [3, 5] again reuses its compile
    assert exe.run({"xs": [], "ys": [], "t": t}) == [[], []]     # nothing to compute: two empty sequences
    with pytest.raises(ShapeError, match="input 1 has 1 elements, input 0 has 2"):
        exe.run({"xs": [rand(2), rand(2)], "ys": [rand(2)], "t": t})
    with pytest.raises(TesseraError, match="give a list of arrays"):
        exe.run({"xs": rand(2), "ys": [rand(2)], "t": t})


def test_sequence_outputs_regroup_under_lru_eviction_and_threads():
    """Each run regroups with its own specialization's layout, even when another thread evicts that
    specialization meanwhile (max_specializations=1, two structures alternating)."""
    from concurrent.futures import ThreadPoolExecutor
    m = _map_model()
    graph, params = from_onnx(m)
    exe = tessera.compile(graph, params)
    exe.max_specializations = 1
    t = np.array([2.0], np.float32)
    cases = []
    for lengths in ([3, 5], [4], [2, 2, 2]):
        xs, ys = [rand(n) for n in lengths], [rand(n) for n in lengths]
        cases.append(({"xs": xs, "ys": ys, "t": t}, ort_run(m, {"xs": xs, "ys": ys, "t": t})))
    with ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(lambda i: (cases[i % 3][1], exe.run(cases[i % 3][0])), range(24)))
    for want, got in runs:
        assert_same(got, want)
    assert exe.specializations == 1


def test_sequence_input_element_shared_symbol_fixes_the_tensor_input():
    # element [N] + tensor [N]: a run fixes both (the case of onnx's sequence_map_add_1_sequence_1_tensor)
    body = helper.make_graph([helper.make_node("Add", ["xi", "y"], ["o"])], "body",
                             [vi("xi", shape=["N"]), vi("y", shape=["N"])], [vi("o", shape=["N"])])
    m = model([helper.make_node("SequenceMap", ["xs", "y"], ["outs"], body=body)],
              [seq_vi("xs", shape=["N"]), vi("y", shape=["N"])], [seq_vi("outs")])
    graph, params = from_onnx(m)
    assert set(graph.shape_inputs) == {"xs", "y"}
    feeds = {"xs": [rand(6), rand(6)], "y": rand(6)}
    assert_same(tessera.compile(graph, params).run(feeds), ort_run(m, feeds))


def test_a_sequence_input_fixed_by_shape_dict_is_one_graph_input_per_element():
    m = model([helper.make_node("ConcatFromSequence", ["xs"], ["y"], axis=0)], [seq_vi("xs", shape=[None, 2])],
              [vi("y")])
    graph, params = from_onnx(m, shape_dict={"xs": [(1, 2), (3, 2)]})
    assert isinstance(graph, Graph) and graph.input_names == ("xs[0]", "xs[1]")
    a, b = rand(1, 2), rand(3, 2)
    np.testing.assert_array_equal(tessera.compile(graph, params).run({"xs[0]": a, "xs[1]": b})[0],
                                  np.concatenate([a, b]))
    with pytest.raises(ShapeError, match=r"shape_dict\['xs'\]\[0\] is \[1, 3\]"):
        from_onnx(m, shape_dict={"xs": [(1, 3)]})
    # frozen: a list of arrays
    g2, p2 = from_onnx(m, const_inputs={"xs": [a, b]})
    np.testing.assert_array_equal(tessera.compile(g2, p2).run({})[0], np.concatenate([a, b]))
    with pytest.raises(UnsupportedOpError, match="structure of model inputs 'xs'") as e:
        from_onnx(m, specialize=False)
    assert e.value.needs_shape == ("xs",)


def test_a_value_read_from_a_sequence_input_specializes_on_the_sequence():
    nodes = [const("zero", np.array(0, np.int64)), helper.make_node("SequenceAt", ["shapes", "zero"], ["shape"]),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    m = model(nodes, [vi("x", shape=[6]), seq_vi("shapes", TP.INT64, [None])], [vi("y")])
    graph, params = from_onnx(m)
    exe = tessera.compile(graph, params)
    x = rand(6)
    for shape in ([2, 3], [3, 2], [2, 3]):
        np.testing.assert_array_equal(exe(x, [np.array(shape, np.int64)]), x.reshape(shape))
    assert exe.value_inputs == ("shapes",) and exe.specializations == 2
    with pytest.raises(UnsupportedOpError, match=r"runtime input 'shapes' \(its element 'shapes\[0\]'\)") as e:
        from_onnx(m, shape_dict={"shapes": [(2,)]}, specialize=False)
    assert e.value.needs_constant == "shapes"


def test_identity_of_a_sequence_and_wrong_element_dtype():
    m = model([helper.make_node("Identity", ["xs"], ["ys"])], [seq_vi("xs", shape=[None])], [seq_vi("ys")])
    exe = tessera.compile(*from_onnx(m))
    xs = [rand(2), rand(5), rand(1)]
    assert_same(exe(xs), ort_run(m, {"xs": xs})[0])       # one output: the list itself
    with pytest.raises(TesseraError, match=r"input 'xs\[0\]': dtype float64"):
        exe([np.zeros(2)])


# ---------------------------------------------------------------------------------------------
# control flow with sequence state
# ---------------------------------------------------------------------------------------------
def test_loop_carried_sequence_and_if_branch_sequences():
    body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                              helper.make_node("Cast", ["i"], ["fi"], to=TP.FLOAT),
                              helper.make_node("Add", ["x", "fi"], ["xi"]),
                              helper.make_node("SequenceInsert", ["seq_in", "xi"], ["seq_out"]),
                              helper.make_node("Mul", ["x", "fi"], ["scan"])], "body",
                             [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), seq_vi("seq_in")],
                             [vi("cond_out", TP.BOOL, []), seq_vi("seq_out"), vi("scan")])
    then_g = helper.make_graph([helper.make_node("SequenceConstruct", ["x", "x"], ["t"])], "then", [], [seq_vi("t")])
    else_g = helper.make_graph([helper.make_node("SequenceEmpty", [], ["e"])], "else", [], [seq_vi("e")])
    nodes = [const("trip", np.array(3, np.int64)),
             helper.make_node("If", ["c"], ["init"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Loop", ["trip", "", "init"], ["final", "scans"], body=body),
             helper.make_node("SequenceLength", ["final"], ["n"])]
    m = model(nodes, [vi("x", shape=[4]), vi("c", TP.BOOL, [])],
              [seq_vi("final"), vi("scans"), vi("n", TP.INT64, [])])
    graph, params = from_onnx(m)
    assert graph.value_inputs == ("c",)
    exe = tessera.compile(graph, params)
    x = rand(4)
    for c in (True, False):
        feeds = {"x": x, "c": np.array(c)}
        got = exe.run(feeds)
        assert_same(got, ort_run(m, feeds))
        assert int(got[2]) == 3 + 2 * c


def test_loop_over_an_optional_sequence_given_or_none():
    # onnx's test_loop16_seq_none, fed both ways: the body starts a sequence when the optional is empty
    f_seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TP.FLOAT, None))
    then_g = helper.make_graph([const("zero", np.array(0.0, np.float32)),
                                helper.make_node("SequenceConstruct", ["zero"], ["init"])], "then", [],
                               [helper.make_value_info("init", f_seq)])
    else_g = helper.make_graph([helper.make_node("OptionalGetElement", ["opt_in"], ["got"])], "else", [],
                               [helper.make_value_info("got", f_seq)])
    body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                              helper.make_node("OptionalHasElement", ["opt_in"], ["has"]),
                              helper.make_node("Not", ["has"], ["none"]),
                              helper.make_node("If", ["none"], ["seq"], then_branch=then_g, else_branch=else_g),
                              helper.make_node("Cast", ["i"], ["fi"], to=TP.FLOAT),
                              helper.make_node("SequenceInsert", ["seq", "fi"], ["seq_out"])], "body",
                             [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), opt_vi("opt_in", f_seq)],
                             [vi("cond_out", TP.BOOL, []), helper.make_value_info("seq_out", f_seq)])
    m = model([helper.make_node("Loop", ["trip", "cond", "opt"], ["res"], body=body)],
              [vi("trip", TP.INT64, []), vi("cond", TP.BOOL, []), opt_vi("opt", f_seq)],
              [helper.make_value_info("res", f_seq)])
    exe = tessera.compile(*from_onnx(m))
    for opt, trip in ((None, 0), (None, 2), ([np.array([7.0, 8.0], np.float32)], 2)):
        feeds = {"trip": np.array(trip, np.int64), "cond": np.array(True), "opt": opt}
        (got,) = exe.run(feeds)
        assert_same(got, ort_run(m, feeds)[0])      # no iteration and no sequence: None, as onnxruntime gives
    assert got[0].shape == (2,) and [float(x) for x in got[1:]] == [0.0, 1.0]


# ---------------------------------------------------------------------------------------------
# optionals
# ---------------------------------------------------------------------------------------------
def test_optional_built_in_the_graph_empty_or_not():
    f5 = helper.make_tensor_type_proto(TP.FLOAT, [5])
    nodes = [helper.make_node("Optional", ["x"], ["full"]),
             helper.make_node("Optional", [], ["empty"], type=f5),
             helper.make_node("OptionalHasElement", ["full"], ["has_full"]),
             helper.make_node("OptionalHasElement", ["empty"], ["has_empty"]),
             helper.make_node("OptionalGetElement", ["full"], ["got"])]
    m = model(nodes, [vi("x", shape=[5])],
              [vi("has_full", TP.BOOL, []), vi("has_empty", TP.BOOL, []), vi("got"), opt_vi("empty", f5)])
    x = rand(5)
    has_full, has_empty, got, empty = tessera.compile(*from_onnx(m)).run({"x": x})
    assert bool(has_full) and not bool(has_empty) and empty is None
    np.testing.assert_array_equal(got, x)
    m_bad = model(nodes[1:2] + [helper.make_node("OptionalGetElement", ["empty"], ["y"])], [], [vi("y")])
    with pytest.raises(TesseraError, match="OptionalGetElement of an empty optional"):
        from_onnx(m_bad)


def test_optional_inputs_given_or_none():
    f3 = helper.make_tensor_type_proto(TP.FLOAT, [3])
    seq = helper.make_sequence_type_proto(f3)
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("OptionalHasElement", ["os"], ["has_s"]),
             helper.make_node("Identity", ["os"], ["os_out"])]
    m = model(nodes, [opt_vi("o", f3), opt_vi("os", seq)],
              [vi("has", TP.BOOL, []), vi("has_s", TP.BOOL, []), opt_vi("os_out", seq)])
    graph, params = from_onnx(m)
    assert set(graph.shape_inputs) == {"o", "os"}
    exe = tessera.compile(graph, params)
    x, s = rand(3), [rand(3), rand(3)]
    for o, os_ in ((x, s), (None, None), (x, None), (None, [])):
        has, has_s, os_out = exe.run({"o": o, "os": os_})
        assert bool(has) == (o is not None) and bool(has_s) == (os_ is not None)
        assert_same(os_out, os_)
        assert_same([has, has_s], ort_run(m, {"o": o, "os": os_})[:2])
    # a given optional's tensor and a sequence's elements are checked against the declared shapes, by name
    with pytest.raises(ShapeError, match=r"input 'o': shape \(4,\), the model expects"):
        exe.run({"o": rand(4), "os": None})
    with pytest.raises(ShapeError, match=r"input 'os\[1\]': shape \(2,\), the model expects"):
        exe.run({"o": None, "os": [rand(3), rand(2)]})
    # a given optional tensor keeps its declared (symbolic) shape: one compile for every shape
    fn = helper.make_tensor_type_proto(TP.FLOAT, ["N"])
    m_n = model([helper.make_node("OptionalGetElement", ["o"], ["v"]), helper.make_node("Add", ["v", "x"], ["y"])],
                [opt_vi("o", fn), vi("x", shape=["N"])], [vi("y")])
    exe_n = tessera.compile(*from_onnx(m_n))
    for n in (2, 5):
        a, b = rand(n), rand(n)
        np.testing.assert_allclose(exe_n(a, b), a + b, rtol=1e-6)
    assert exe_n.specializations == 1
    with pytest.raises(TesseraError, match="OptionalGetElement of an empty optional"):
        exe_n(None, rand(2))
    # without specialization an optional tensor is a tensor that is given; shape_dict None makes it empty
    g2, _ = from_onnx(model(nodes[:1], [opt_vi("o", f3)], [vi("has", TP.BOOL, [])]), specialize=False)
    assert isinstance(g2, Graph) and g2.input_names == ("o",)
    g3, _ = from_onnx(model(nodes[:1], [opt_vi("o", f3)], [vi("has", TP.BOOL, [])]), shape_dict={"o": None})
    assert not bool(tessera.compile(g3, {}).run({})[0])
    f_open = helper.make_tensor_type_proto(TP.FLOAT, None)      # a rank the model leaves open
    with pytest.raises(UnsupportedOpError, match="optional tensor of unknown rank"):
        from_onnx(model(nodes[:1], [opt_vi("o", f_open)], [vi("has", TP.BOOL, [])]), specialize=False)


# ---------------------------------------------------------------------------------------------
# refusals
# ---------------------------------------------------------------------------------------------
def test_refusals_name_what_is_wrong():
    # a sequence where a tensor is taken
    m = model([helper.make_node("SequenceConstruct", ["x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
              [vi("x", shape=[2])], [vi("y")])
    with pytest.raises(UnsupportedOpError, match=r"input 0 \('s'\) is a sequence; Relu takes a tensor"):
        from_onnx(m)
    (problem,) = check_model(m)
    assert problem.op_type == "Relu" and "is a sequence" in problem.reason
    # a tensor where a sequence is taken
    m = model([helper.make_node("SequenceLength", ["x"], ["n"])], [vi("x", shape=[2])], [vi("n", TP.INT64, [])])
    with pytest.raises(UnsupportedOpError, match="is a tensor; SequenceLength takes a sequence"):
        from_onnx(m)
    # a sequence output without specialization
    m = model([helper.make_node("SequenceConstruct", ["x"], ["s"])], [vi("x", shape=[2])], [seq_vi("s")])
    with pytest.raises(UnsupportedOpError, match=r"model outputs \['s'\] are sequences or optionals"):
        from_onnx(m, specialize=False)
    # concatenating nothing
    m = model([helper.make_node("SequenceEmpty", [], ["e"]), helper.make_node("ConcatFromSequence", ["e"], ["y"],
                                                                             axis=0)], [], [vi("y")])
    with pytest.raises(ShapeError, match="ConcatFromSequence of an empty sequence"):
        from_onnx(m)
    # a dtype the sequence does not hold
    m = model([helper.make_node("SequenceEmpty", [], ["e"], dtype=TP.INT64),
               helper.make_node("SequenceInsert", ["e", "x"], ["s"])], [vi("x", shape=[2])], [seq_vi("s")])
    with pytest.raises(UnsupportedOpError, match="a sequence of int64 cannot hold a float32 tensor"):
        from_onnx(m)
    # a map input
    mp = helper.make_value_info("m", helper.make_map_type_proto(TP.INT64, helper.make_tensor_type_proto(TP.FLOAT, [2])))
    with pytest.raises(UnsupportedOpError, match="model input 'm' is a map"):
        from_onnx(model([helper.make_node("Identity", ["m"], ["y"])], [mp], [vi("y")]))


def test_a_sequence_output_model_reads_its_inputs_once(monkeypatch):
    """from_onnx of a model with sequence outputs converts it once (its weights read once), and the
    executor's first run uses that conversion."""
    from tessera.frontend import onnx as fe
    calls = []
    read = fe._Converter._read_inputs
    monkeypatch.setattr(fe._Converter, "_read_inputs", lambda self: calls.append(1) or read(self))
    w = helper.make_tensor("w", TP.FLOAT, [2], [1.0, 2.0])
    m = model([helper.make_node("Add", ["x", "w"], ["y"]), helper.make_node("SequenceConstruct", ["x", "y"], ["s"])],
              [vi("x", shape=[2])], [seq_vi("s")])
    m.graph.initializer.append(w)
    graph, params = from_onnx(m)
    assert isinstance(graph, DeferredGraph) and len(calls) == 1
    x = rand(2)
    assert_same(tessera.compile(graph, params)(x), ort_run(m, {"x": x})[0])
    assert len(calls) == 1


def test_split_of_a_symbolic_extent_specializes_per_shape():
    m = model([helper.make_node("SplitToSequence", ["x"], ["parts"], axis=0, keepdims=0)],
              [vi("x", shape=["n", 2])], [seq_vi("parts")])
    graph, params = from_onnx(m)
    assert isinstance(graph, DeferredGraph) and graph.shape_inputs == ("x",)
    exe = tessera.compile(graph, params)
    for n in (3, 1):
        x = rand(n, 2)
        assert_same(exe(x), [x[i] for i in range(n)])
    with pytest.raises(UnsupportedOpError, match="the extent 'n' of axis 0 decides the sequence's length"):
        from_onnx(m, specialize=False)
    # split sizes over a symbolic extent: checked against each shape (a single size is not assumed to fit)
    for split in ([2, 1], [3]):
        m = model([const("s", np.array(split, np.int64)), helper.make_node("SplitToSequence", ["x", "s"], ["parts"])],
                  [vi("x", shape=["n", 2])], [seq_vi("parts")])
        graph, params = from_onnx(m)
        assert isinstance(graph, DeferredGraph) and graph.shape_inputs == ("x",)
        exe = tessera.compile(graph, params)
        x = rand(3, 2)
        assert_same(exe.run({"x": x}), ort_run(m, {"x": x}))
        with pytest.raises(ShapeError, match=re.escape(f"split sizes {split} do not add up to the extent 4")):
            exe(rand(4, 2))


def test_export_and_command_line_refuse_sequences_clearly(tmp_path, capsys):
    import onnx

    from tessera.cli import main

    m = model([helper.make_node("SequenceConstruct", ["x", "x"], ["s"])], [vi("x", shape=[2])], [seq_vi("s")])
    exe = tessera.compile(*from_onnx(m))
    with pytest.raises(TesseraError, match="returns sequences or optionals"):
        exe.export_library(str(tmp_path / "m.so"))
    with pytest.raises(TesseraError, match=r"exe.specialization\(inputs\).graph is that graph"):
        exe.graph
    assert [v.name for v in exe.specialization({"x": rand(2)}).graph.outputs] == ["x", "x"]
    m2 = model([helper.make_node("ConcatFromSequence", ["xs"], ["y"], axis=0)], [seq_vi("xs", shape=[2])], [vi("y")])
    exe2 = tessera.compile(*from_onnx(m2))
    with pytest.raises(TesseraError, match=r"per shape \(a sequence's element shapes"):
        exe2.export_library(str(tmp_path / "m2.so"))
    onnx.save(m2, str(tmp_path / "seq.onnx"))
    assert main(["run", str(tmp_path / "seq.onnx")]) == 2
    assert "xs: sequence<float32[2]>" in capsys.readouterr().err
