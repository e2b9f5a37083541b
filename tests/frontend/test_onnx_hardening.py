"""The ONNX frontend against hostile or malformed models (issue 27): external data resolved only
against a directory the caller names, limits on unrolled loops and on constants, duplicate tensor
definitions, unknown opsets, overridable initializers, dim_params that sanitize alike; and the
converter registry read once."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import tessera
from tessera.frontend import onnx_ops
from tessera.frontend.onnx import from_onnx

RNG = np.random.default_rng(27)


def vi(name, dtype=TP.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def model(nodes, inputs, outputs, initializers=(), opset=17, ir_version=None):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(initializers)),
                          opset_imports=[helper.make_opsetid("", opset)])
    if ir_version is not None:
        m.ir_version = ir_version
    return m


def ort_run(m, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def run(m, feeds, **kw):
    graph, params = from_onnx(m, **kw)
    return tessera.compile(graph, params).run(feeds)


# ---------------------------------------------------------------------------------------------
# the converter registry
# ---------------------------------------------------------------------------------------------
def test_converter_folder_is_scanned_once_not_per_node(monkeypatch):
    m = model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
               helper.make_node("Abs", ["b"], ["y"])], [vi("x", shape=[5])], [vi("y", shape=[5])])
    from_onnx(m)
    scans = []
    real = onnx_ops.pkgutil.iter_modules
    monkeypatch.setattr(onnx_ops.pkgutil, "iter_modules", lambda *a, **k: scans.append(a) or real(*a, **k))
    x = RNG.standard_normal(5).astype(np.float32)
    (y,) = run(m, {"x": x})
    assert scans == []
    np.testing.assert_allclose(y, ort_run(m, {"x": x})[0])


# ---------------------------------------------------------------------------------------------
# external data: resolved against the model file's folder or a base_dir the caller names
# ---------------------------------------------------------------------------------------------
W = np.arange(4, dtype=np.float32) + 0.5


def external_model(location, constant=False):
    """y = x + w, w's data in the external file `location` (an initializer, or a Constant's tensor)."""
    w = numpy_helper.from_array(W, "w")
    w.ClearField("raw_data")
    w.data_location = TP.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(W.nbytes))):
        w.external_data.add(key=k, value=v)
    nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
    if constant:
        return model([helper.make_node("Constant", [], ["w"], value=w)] + nodes, [vi("x", shape=[4])],
                     [vi("y", shape=[4])])
    return model(nodes, [vi("x", shape=[4])], [vi("y", shape=[4])], [w])


def test_bytes_model_external_data_never_reads_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "secret.bin").write_bytes(W.tobytes())
    monkeypatch.chdir(tmp_path)
    for constant in (False, True):
        with pytest.raises(tessera.TesseraError, match="external data.*base_dir"):
            from_onnx(external_model("secret.bin", constant).SerializeToString())


def test_model_proto_without_its_external_data_is_refused(tmp_path, monkeypatch):
    (tmp_path / "secret.bin").write_bytes(W.tobytes())
    monkeypatch.chdir(tmp_path)
    with pytest.raises(tessera.TesseraError, match="'w'.*external data.*base_dir"):
        from_onnx(external_model("secret.bin"))


@pytest.mark.parametrize("constant", [False, True])
def test_external_data_resolves_against_the_named_base_dir(tmp_path, monkeypatch, constant):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.bin").write_bytes(W.tobytes())
    m = external_model("w.bin", constant)
    (folder / "m.onnx").write_bytes(m.SerializeToString())
    monkeypatch.chdir(tmp_path)            # not the model's folder
    x = RNG.standard_normal(4).astype(np.float32)
    want = ort.InferenceSession(str(folder / "m.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(want, x + W)
    for source in (m.SerializeToString(), m):
        np.testing.assert_array_equal(run(source, {"x": x}, base_dir=folder)[0], want)
    np.testing.assert_array_equal(run(str(folder / "m.onnx"), {"x": x})[0], want)   # a path: its own folder
    elsewhere = tmp_path / "data"
    elsewhere.mkdir()
    (elsewhere / "w.bin").write_bytes((W * 2).tobytes())
    np.testing.assert_array_equal(run(str(folder / "m.onnx"), {"x": x}, base_dir=elsewhere)[0], x + W * 2)


def test_external_data_outside_the_base_dir_is_refused(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "secret.bin").write_bytes(W.tobytes())
    (folder / "link.bin").symlink_to(tmp_path / "secret.bin")
    (folder / "up").symlink_to(tmp_path)
    for location in ("../secret.bin", str(tmp_path / "secret.bin"), "link.bin", "up/secret.bin"):
        m = external_model(location)
        with pytest.raises(tessera.TesseraError, match="'w'"):
            from_onnx(m.SerializeToString(), base_dir=folder)
        (folder / "m.onnx").write_bytes(m.SerializeToString())
        with pytest.raises(tessera.TesseraError):
            from_onnx(str(folder / "m.onnx"))


def test_base_dir_must_be_a_folder(tmp_path):
    with pytest.raises(tessera.TesseraError, match="base_dir"):
        from_onnx(external_model("w.bin").SerializeToString(), base_dir=tmp_path / "missing")


# ---------------------------------------------------------------------------------------------
# limits: unrolled loops, constants made while converting
# ---------------------------------------------------------------------------------------------
def nested_loops(outer, inner):
    """y = x0 + outer * inner: a Loop of `outer` iterations whose body is a Loop of `inner` iterations."""
    scalar_io = [vi("c", TP.BOOL, [])]
    inner_body = helper.make_graph(
        [helper.make_node("Add", ["y", "one"], ["y2"]), helper.make_node("Identity", ["c"], ["c2"])], "ib",
        [vi("j", TP.INT64, [])] + scalar_io + [vi("y", shape=[1])], [vi("c2", TP.BOOL, []), vi("y2", shape=[1])])
    outer_body = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "x"], ["x2"], body=inner_body),
         helper.make_node("Identity", ["c"], ["c2"])],
        "ob", [vi("i", TP.INT64, [])] + scalar_io + [vi("x", shape=[1])], [vi("c2", TP.BOOL, []), vi("x2", shape=[1])])
    return model([helper.make_node("Loop", ["N", "", "x0"], ["y"], body=outer_body, name="outer")],
                 [vi("x0", shape=[1])], [vi("y", shape=[1])],
                 [numpy_helper.from_array(np.array(outer, np.int64), "N"),
                  numpy_helper.from_array(np.array(inner, np.int64), "M"),
                  numpy_helper.from_array(np.ones(1, np.float32), "one")])


def test_nested_loops_beyond_the_unroll_limit_are_refused_at_once():
    m = nested_loops(1024, 1024)
    assert len(m.SerializeToString()) < 400
    with pytest.raises(tessera.UnsupportedOpError, match=r"'outer'.*1024 iterations.*65,536.*max_unrolled_nodes"):
        from_onnx(m)


def test_unroll_limit_is_configurable(monkeypatch):
    from tessera.limits import Limits

    m = nested_loops(6, 5)          # 6 * (2 + 5 * 2) = 72 nodes from loop bodies
    x = np.zeros(1, np.float32)
    np.testing.assert_array_equal(run(m, {"x0": x}, limits=Limits(max_unrolled_nodes=72))[0], ort_run(m, {"x0": x})[0])
    with pytest.raises(tessera.UnsupportedOpError, match="more than the limit of 71 "):
        from_onnx(m, limits=Limits(max_unrolled_nodes=71))
    monkeypatch.setenv("TESSERA_MAX_UNROLLED_NODES", "40")
    with pytest.raises(tessera.UnsupportedOpError, match="TESSERA_MAX_UNROLLED_NODES"):
        from_onnx(m)
    monkeypatch.setenv("TESSERA_MAX_LOOP_ITERATIONS", "5")
    monkeypatch.setenv("TESSERA_MAX_UNROLLED_NODES", "1000")
    with pytest.raises(tessera.UnsupportedOpError, match="trip count of 6.*at most 5"):
        from_onnx(m)
    monkeypatch.setenv("TESSERA_MAX_LOOP_ITERATIONS", "many")
    with pytest.raises(tessera.TesseraError, match="TESSERA_MAX_LOOP_ITERATIONS='many'"):
        from_onnx(m)


def constant_of_shape(n):
    return model([helper.make_node("ConstantOfShape", ["shape"], ["y"], name="big",
                                   value=numpy_helper.from_array(np.array([1.5], np.float32)))],
                 [], [vi("y", shape=[n])], [numpy_helper.from_array(np.array([n], np.int64), "shape")])


def test_constant_of_shape_beyond_the_constant_limit_is_refused_before_it_is_made():
    from tessera.limits import Limits

    m = constant_of_shape(1 << 30)          # 4 GiB of float32
    assert len(m.SerializeToString()) < 170
    with pytest.raises(tessera.UnsupportedOpError,
                       match=r"'big'.*\[1073741824\] float32: 4\.0 GiB.*max_constant_bytes"):
        from_onnx(m)
    small = constant_of_shape(256)          # 1 KiB
    with pytest.raises(tessera.UnsupportedOpError, match=r"1\.0 KiB \(1,024 bytes\), more than the 1023 B"):
        from_onnx(small, limits=Limits(max_constant_bytes=1023))
    np.testing.assert_array_equal(run(small, {}, limits=Limits(max_constant_bytes=1024))[0], ort_run(small, {})[0])


def test_a_value_folded_while_converting_is_held_to_the_constant_limit():
    """Reshape's shape is computed from constants through a large intermediate (Expand): the converter
    evaluates it, so every value on the way counts."""
    from tessera.limits import Limits

    nodes = [helper.make_node("Expand", ["four", "wide"], ["e"], name="wide_expand"),
             helper.make_node("ReduceMax", ["e"], ["shape"], keepdims=1),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    inits = [numpy_helper.from_array(np.array([4], np.int64), "four"),
             numpy_helper.from_array(np.array([512], np.int64), "wide")]       # e: 512 int64, 4 KiB
    m = model(nodes, [vi("x", shape=[2, 2])], [vi("y", shape=[4])], inits)
    with pytest.raises(tessera.UnsupportedOpError, match=r"'wide_expand' \(broadcast_to\) makes.*4\.0 KiB"):
        from_onnx(m, limits=Limits(max_constant_bytes=4095))
    x = RNG.standard_normal((2, 2)).astype(np.float32)
    np.testing.assert_array_equal(run(m, {"x": x}, limits=Limits(max_constant_bytes=4096))[0],
                                  ort_run(m, {"x": x})[0])


def test_limits_refuse_nonsense():
    from tessera.limits import Limits

    for bad in (-1, 2.5, True):
        with pytest.raises(tessera.TesseraError, match="max_constant_bytes"):
            Limits(max_constant_bytes=bad)
    with pytest.raises(tessera.TesseraError, match="Limits"):
        from_onnx(constant_of_shape(4), limits={"max_constant_bytes": 4})


def test_compiling_does_not_fold_values_beyond_the_constant_limit(monkeypatch):
    m = model([helper.make_node("Expand", ["half", "shape"], ["e"]), helper.make_node("Add", ["x", "e"], ["y"])],
              [vi("x", shape=[300])], [vi("y", shape=[300])],
              [numpy_helper.from_array(np.array([0.5], np.float32), "half"),
               numpy_helper.from_array(np.array([300], np.int64), "shape")])          # e: 1200 bytes
    x = RNG.standard_normal(300).astype(np.float32)
    want = ort_run(m, {"x": x})[0]
    for limit, folded in ((1200, True), (1199, False)):
        monkeypatch.setenv("TESSERA_MAX_CONSTANT_BYTES", str(limit))
        graph, params = from_onnx(m)
        exe = tessera.compile(graph, params, opt_level=1, executor="graph")
        assert any(n.op == "broadcast_to" for n in exe.graph.nodes) != folded
        np.testing.assert_array_equal(exe.run({"x": x})[0], want)


# ---------------------------------------------------------------------------------------------
# malformed models: names defined twice, unknown opsets; dim_params that sanitize alike
# ---------------------------------------------------------------------------------------------
def test_a_tensor_defined_twice_is_refused_naming_both_definitions():
    x = [vi("x", shape=[4])]
    twice = model([helper.make_node("Relu", ["x"], ["t"], name="first"),
                   helper.make_node("Neg", ["x"], ["t"], name="second"), helper.make_node("Abs", ["t"], ["y"])],
                  x, [vi("y", shape=[4])])
    with pytest.raises(tessera.TesseraError, match=r"'t' is defined twice.*'first' \(Relu\).*'second' \(Neg\)"):
        from_onnx(twice)
    over_input = model([helper.make_node("Relu", ["x"], ["x"], name="first"), helper.make_node("Abs", ["x"], ["y"])],
                       x, [vi("y", shape=[4])])
    with pytest.raises(tessera.TesseraError, match=r"'x' is defined twice.*graph input.*'first'"):
        from_onnx(over_input)
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    over_init = model([helper.make_node("Relu", ["x"], ["w"], name="first"),
                       helper.make_node("Add", ["x", "w"], ["y"])], x, [vi("y", shape=[4])], [w])
    with pytest.raises(tessera.TesseraError, match=r"'w' is defined twice.*initializer.*'first'"):
        from_onnx(over_init)
    two_inits = model([helper.make_node("Add", ["x", "w"], ["y"])], x, [vi("y", shape=[4])], [w, w])
    with pytest.raises(tessera.TesseraError, match=r"'w' is defined twice.*initializer.*initializer"):
        from_onnx(two_inits)
    for m in (twice, over_input, over_init):
        with pytest.raises(Exception, match="(?i)duplicate definition"):
            ort_run(m, {"x": np.ones(4, np.float32)})


def test_a_subgraph_may_shadow_outer_names_by_its_inputs_not_by_its_nodes():
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"], name="inner")], "then", [], [vi("t", shape=[4])])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["u"])], "else", [], [vi("u", shape=[4])])
    m = model([helper.make_node("Relu", ["x"], ["t"], name="outer"),
               helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
              [vi("x", shape=[4]), vi("c", TP.BOOL, [])], [vi("y", shape=[4]), vi("t", shape=[4])])
    with pytest.raises(tessera.TesseraError, match=r"'t' is defined twice.*'outer' \(Relu\).*inner"):
        from_onnx(m, const_inputs={"c": np.array(True)})
    # a Loop body whose input is named like the outer input: allowed (as onnx's checker and onnxruntime do)
    body = helper.make_graph([helper.make_node("Add", ["x", "x"], ["x2"]), helper.make_node("Identity", ["c"], ["c2"])],
                             "b", [vi("i", TP.INT64, []), vi("c", TP.BOOL, []), vi("x", shape=[1])],
                             [vi("c2", TP.BOOL, []), vi("x2", shape=[1])])
    loop = model([helper.make_node("Loop", ["N", "", "x"], ["y"], body=body)], [vi("x", shape=[1])],
                 [vi("y", shape=[1])], [numpy_helper.from_array(np.array(3, np.int64), "N")])
    x = np.full(1, 1.5, np.float32)
    np.testing.assert_array_equal(run(loop, {"x": x})[0], ort_run(loop, {"x": x})[0])


def test_an_opset_newer_than_onnx_knows_is_refused():
    import onnx

    known = onnx.defs.onnx_opset_version()
    m = model([helper.make_node("Abs", ["x"], ["y"])], [vi("x", shape=[4])], [vi("y", shape=[4])], opset=99999)
    with pytest.raises(tessera.TesseraError, match=rf"opset 99999.*knows opsets up to {known}"):
        from_onnx(m)
    with pytest.raises(Exception):
        ort_run(m, {"x": np.ones(4, np.float32)})
    ok = model([helper.make_node("Abs", ["x"], ["y"])], [vi("x", shape=[4])], [vi("y", shape=[4])], opset=known)
    with pytest.raises(tessera.TesseraError, match=rf"opset {known + 1}"):
        from_onnx(ok, opset=known + 1)
    ml = model([helper.make_node("Abs", ["x"], ["y"])], [vi("x", shape=[4])], [vi("y", shape=[4])])
    ml.opset_import.append(helper.make_opsetid("ai.onnx.ml", 1000))
    with pytest.raises(tessera.TesseraError, match=r"opset 1000 of the 'ai.onnx.ml' domain"):
        from_onnx(ml)
    x = RNG.standard_normal(4).astype(np.float32)
    np.testing.assert_array_equal(run(ok, {"x": x})[0], np.abs(x))


def test_dim_params_that_sanitize_alike_stay_distinct():
    m = model([helper.make_node("Relu", ["a"], ["ya"]), helper.make_node("Neg", ["b"], ["yb"])],
              [vi("a", shape=["a-b"]), vi("b", shape=["a_b"])], [vi("ya", shape=["a-b"]), vi("yb", shape=["a_b"])])
    feeds = {"a": RNG.standard_normal(2).astype(np.float32), "b": RNG.standard_normal(3).astype(np.float32)}
    for got, want in zip(run(m, feeds), ort_run(m, feeds)):
        np.testing.assert_array_equal(got, want)
    # one dim_param is one symbol: the graph knows a and b agree
    same = model([helper.make_node("Add", ["a", "b"], ["y"])], [vi("a", shape=["n"]), vi("b", shape=["n"])],
                 [vi("y", shape=["n"])])
    graph, _ = from_onnx(same)
    assert graph.inputs[0].type.shape == graph.inputs[1].type.shape
    # an unnamed dimension is a symbol of its own, whatever the dim_params are called
    free = model([helper.make_node("Relu", ["a"], ["ya"]), helper.make_node("Neg", ["b"], ["yb"])],
                 [vi("a", shape=[None]), vi("b", shape=["a_d0"])], [vi("ya", shape=[None]), vi("yb", shape=["a_d0"])])
    for got, want in zip(run(free, feeds), ort_run(free, feeds)):
        np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------------------------
# an initializer that is also a graph input: its value is a default a run may override
# ---------------------------------------------------------------------------------------------
def close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)       # x * W + b: fused or not


def overridable(ir_version):
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "W")
    return model([helper.make_node("Mul", ["x", "W"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])],
                 [vi("x", shape=[4]), vi("W", shape=[4])], [vi("y", shape=[4])],
                 [w, numpy_helper.from_array(np.ones(4, np.float32), "b")], ir_version=ir_version)


@pytest.mark.parametrize("executor", ["aot", "graph"])
def test_an_initializer_that_is_also_a_graph_input_can_be_fed(executor):
    m = overridable(8)
    graph, params = from_onnx(m)
    exe = tessera.compile(graph, params, executor=executor)
    x, w = RNG.standard_normal(4).astype(np.float32), RNG.standard_normal(4).astype(np.float32)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_overridable_initializers()] == ["W"] and exe.input_names == ["x"]
    assert list(exe.defaults) == ["W"]
    close(exe.run({"x": x})[0], sess.run(None, {"x": x})[0])
    close(exe.run({"x": x, "W": w})[0], sess.run(None, {"x": x, "W": w})[0])
    close(exe(x, W=w), sess.run(None, {"x": x, "W": w})[0])
    close(exe(x), sess.run(None, {"x": x})[0])      # the default again
    with pytest.raises(tessera.TesseraError, match="'W'"):
        exe.run({"x": x, "W": np.ones(5, np.float32)})


def test_an_initializer_listed_as_input_before_ir_version_4_stays_a_constant():
    m = overridable(3)
    exe = tessera.compile(*from_onnx(m))
    x = RNG.standard_normal(4).astype(np.float32)
    close(exe.run({"x": x})[0], ort_run(m, {"x": x})[0])
    for run_it in (lambda: exe.run({"x": x, "W": x}), lambda: ort_run(m, {"x": x, "W": x})):
        with pytest.raises(Exception, match="W"):
            run_it()


def test_const_inputs_freezes_an_overridable_initializer():
    m = overridable(8)
    x, w = RNG.standard_normal(4).astype(np.float32), RNG.standard_normal(4).astype(np.float32)
    graph, params = from_onnx(m, const_inputs={"W": w})
    exe = tessera.compile(graph, params)
    assert exe.defaults == {} and exe.input_names == ["x"]
    close(exe.run({"x": x})[0], ort_run(m, {"x": x, "W": w})[0])
