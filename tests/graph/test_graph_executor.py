"""The graph executor and tessera.compile: results against numpy, symbolic dims, validation, profile."""
import gc
import weakref

import numpy as np
import pytest

import tessera
from tessera.errors import DTypeError, ShapeError, TesseraError, UnsupportedOpError
from tessera.graph import Builder
from tessera.graph.kernels import get_kernel

RNG = np.random.default_rng(7)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def chain_graph():
    """y = neg(x + 2 * x) ; z = sum_rows(y): two outputs, a symbolic batch N."""
    gb = Builder("chain")
    x = gb.input("x", ("N", 6))
    s = gb.op("test.add", x, x, alpha=2.0)
    y = gb.op("test.neg", s)
    z = gb.op("test.sum_rows", y)
    gb.output(y, z)
    return gb.finish()


@pytest.fixture(scope="module")
def chain_exe():
    return tessera.compile(chain_graph())


def test_outputs_match_numpy_and_call_forms_agree(chain_exe):
    x = rand(4, 6)
    y, z = chain_exe(x)
    np.testing.assert_allclose(y, -(3 * x), rtol=1e-6)
    np.testing.assert_allclose(z, (-(3 * x)).sum(axis=1), rtol=1e-5, atol=1e-6)
    listed = chain_exe.run({"x": x})
    assert isinstance(listed, list) and len(listed) == 2
    np.testing.assert_array_equal(listed[0], y)
    np.testing.assert_array_equal(chain_exe(x=x)[1], z)


def test_symbolic_batch_is_bound_at_run_time(chain_exe):
    for n in (1, 3, 17):
        x = rand(n, 6)
        y, z = chain_exe(x)
        assert y.shape == (n, 6) and z.shape == (n,)
        np.testing.assert_allclose(y, -3 * x, rtol=1e-6)


def test_one_output_returns_an_array():
    gb = Builder()
    x = gb.input("x", (5,))
    gb.output(gb.op("test.neg", x))
    exe = tessera.compile(gb.finish())
    x = rand(5)
    out = exe(x)
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, -x)


def test_several_inputs_positional_or_by_name():
    gb = Builder()
    a = gb.input("a", (3, 4))
    b = gb.input("b", (3, 4))
    gb.output(gb.op("test.add", a, b, alpha=-1.0))
    exe = tessera.compile(gb.finish())
    a, b = rand(3, 4), rand(3, 4)
    np.testing.assert_allclose(exe(a, b), a - b, rtol=1e-6)
    np.testing.assert_allclose(exe(b=b, a=a), a - b, rtol=1e-6)
    np.testing.assert_allclose(exe(a, b=b), a - b, rtol=1e-6)
    with pytest.raises(TesseraError, match="both positionally and by name"):
        exe(a, a=a)
    with pytest.raises(TesseraError, match="takes 2 inputs"):
        exe(a, b, a)


def test_input_validation_names_the_input(chain_exe):
    with pytest.raises(TesseraError, match=r"missing \['x'\]"):
        chain_exe.run({})
    with pytest.raises(TesseraError, match=r"unknown \['y'\]"):
        chain_exe.run({"x": rand(2, 6), "y": rand(2, 6)})
    with pytest.raises(DTypeError, match=r"input 'x': dtype float64.*float32"):
        chain_exe(rand(2, 6, dtype="float64"))
    with pytest.raises(ShapeError, match=r"input 'x': rank 3"):
        chain_exe(rand(2, 6, 1))
    with pytest.raises(ShapeError, match=r"input 'x': dimension 1 is 5, the graph expects 6"):
        chain_exe(rand(2, 5))
    with pytest.raises(TesseraError, match="input 'x': expected an array"):
        chain_exe(object())


def test_lists_are_converted_to_the_input_dtype(chain_exe):
    y, _ = chain_exe([[1, 2, 3, 4, 5, 6]])
    np.testing.assert_allclose(y, [[-3, -6, -9, -12, -15, -18]])


def test_one_symbol_must_have_one_value():
    gb = Builder()
    a = gb.input("a", ("N", 2))
    b = gb.input("b", ("N", 2))
    gb.output(gb.op("test.add", a, b))
    exe = tessera.compile(gb.finish())
    with pytest.raises(ShapeError, match=r"input 'b': dimension 0 is N = 4, but input 'a' dimension 0 bound N = 3"):
        exe(rand(3, 2), rand(4, 2))


def test_output_extent_computed_from_the_kernel_shape_expression():
    gb = Builder()
    a = gb.input("a", ("N", 3))
    b = gb.input("b", ("M", 3))
    c = gb.op("test.cat0", a, b)
    gb.output(gb.op("test.neg", c))
    exe = tessera.compile(gb.finish())
    a, b = rand(2, 3), rand(5, 3)
    np.testing.assert_array_equal(exe(a, b), -np.concatenate([a, b]))


def test_multi_output_op_and_output_order():
    gb = Builder()
    x = gb.input("x", (3, 8))
    lo, hi = gb.op("test.split2", x)
    gb.output(hi, lo)
    exe = tessera.compile(gb.finish())
    x = rand(3, 8)
    hi, lo = exe(x)
    np.testing.assert_array_equal(lo, x[:, :4])
    np.testing.assert_array_equal(hi, x[:, 4:])


def test_op_whose_output_is_its_input_gets_a_copy():
    gb = Builder()
    x = gb.input("x", (4,))
    gb.output(gb.op("test.identity", x))
    x = rand(4)
    y = tessera.compile(gb.finish())(x)
    np.testing.assert_array_equal(y, x)
    assert not np.shares_memory(x, y)


def test_graph_outputs_that_are_inputs_or_constants_are_copies():
    gb = Builder()
    x = gb.input("x", (2,))
    c = gb.const(np.array([1, 2], "int64"), "c")
    gb.output(x, c, x)
    exe = tessera.compile(gb.finish())
    xv = rand(2)
    a, cc, b = exe(xv)
    np.testing.assert_array_equal(a, xv)
    np.testing.assert_array_equal(cc, [1, 2])
    cc[0] = 99
    np.testing.assert_array_equal(exe(xv)[1], [1, 2])
    assert not np.shares_memory(a, xv) and not np.shares_memory(a, b)


def test_kernels_are_shared_within_and_across_executables():
    def make():
        gb = Builder()
        x = gb.input("x", (7, 3))
        y = gb.op("test.neg", gb.op("test.neg", x))
        gb.output(y)
        return tessera.compile(gb.finish(), opt_level=1)     # one kernel per node (no fusion)

    e1, e2 = make(), make()
    assert len(e1.kernels) == 1
    assert e1.kernels[0] is e2.kernels[0]
    from tessera.graph import TensorType

    t = TensorType((7, 3))
    assert get_kernel("test.neg", {}, [t], [t]) is e1.kernels[0]


def test_intermediates_are_freed_after_their_last_reader():
    gb = Builder()
    x = gb.input("x", (64,))
    a = gb.op("test.neg", x, name="a")
    b = gb.op("test.neg", a, name="b")
    c = gb.op("test.neg", b, name="c")
    gb.output(c)
    exe = tessera.compile(gb.finish(), opt_level=1, executor="graph")   # one node per op: a, b, c stay apart
    refs, alive_at_c = {}, []

    def timer(step, ins, outs):
        refs[step.node.name] = weakref.ref(outs[0])
        if step.node.name == "c":
            gc.collect()
            alive_at_c.append(refs["a"]() is not None)

    exe.execute([rand(64)], timer)
    assert alive_at_c == [False]


def test_profile_prints_a_row_per_node(chain_exe, capsys):
    report = chain_exe.profile({"x": rand(8, 6)}, number=2, repeat=2)
    text = capsys.readouterr().out
    assert [r.node for r in report.rows] == [n.name for n in chain_exe.graph.nodes]
    for n in chain_exe.graph.nodes:
        assert n.name in text and n.op in text
    assert "[8, 6] -> [8]" in text and "total" in text
    assert all(r.ms >= 0 for r in report.rows)
    assert report.total_ms == pytest.approx(sum(r.ms for r in report.rows))


def test_params_bind_inputs_as_constants():
    gb = Builder()
    x = gb.input("x", (2, 3))
    w = gb.input("w", (2, 3))
    gb.output(gb.op("test.add", x, w))
    g = gb.finish()
    wv = rand(2, 3)
    exe = tessera.compile(g, params={"w": wv})
    assert [v.name for v in exe.graph.inputs] == ["x"]
    xv = rand(2, 3)
    np.testing.assert_allclose(exe(xv), xv + wv, rtol=1e-6)
    with pytest.raises(TesseraError, match=r"params name \['v'\]"):
        tessera.compile(g, params={"v": wv})
    with pytest.raises(ShapeError, match="param 'w': shape"):
        tessera.compile(g, params={"w": rand(3, 2)})
    with pytest.raises(DTypeError, match="param 'w': dtype"):
        tessera.compile(g, params={"w": wv.astype("float64")})


def test_opt_level_folds_constant_subgraphs_with_the_same_result():
    gb = Builder()
    x = gb.input("x", (4,))
    c = gb.const(np.arange(4, dtype="float32"), "c")
    k = gb.op("test.neg", gb.op("test.add", c, c, alpha=0.5))
    gb.output(gb.op("test.add", x, k))
    g = gb.finish()
    e0, e2 = tessera.compile(g, opt_level=0), tessera.compile(g, opt_level=2)
    assert len(e0.graph.nodes) == 3 and len(e2.graph.nodes) == 1
    xv = rand(4)
    np.testing.assert_allclose(e2(xv), e0(xv), rtol=1e-6)
    np.testing.assert_allclose(e2(xv), xv - 1.5 * np.arange(4), rtol=1e-6)


def test_op_without_compute_is_refused_with_its_name():
    gb = Builder()
    x = gb.input("x", (2,))
    gb.output(gb.op("test.no_compute", x, name="mystery"))
    with pytest.raises(UnsupportedOpError, match="test.no_compute.*mystery"):
        tessera.compile(gb.finish())


def test_compile_refuses_what_is_not_a_graph():
    with pytest.raises(TesseraError, match="takes a tessera.graph.Graph"):
        tessera.compile("model.onnx")
    with pytest.raises(TesseraError, match="opt_level"):
        tessera.compile(chain_graph(), opt_level=7)


def test_mixed_dtypes_flow_through():
    gb = Builder()
    x = gb.input("x", (5,))
    gb.output(gb.op("test.to_int32", x))
    out = tessera.compile(gb.finish())(np.array([1.5, -2.5, 3.9, 0, 7], "float32"))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [1, -2, 3, 0, 7])


def planned_graph():
    """x[4, 8] -> split -> (lo, hi) -> several intermediates of two sizes, a graph output (`s`) that a
    later node also reads, a cast to int32: buffers the static plan must keep apart or may reuse."""
    gb = Builder("planned")
    x = gb.input("x", (4, 8))
    lo, hi = gb.op("test.split2", gb.op("test.neg", x, name="nx"), name="split")
    s = gb.op("test.add", lo, hi, alpha=2.0, name="s")
    t = gb.op("test.neg", gb.op("test.add", s, lo, alpha=-1.0, name="d"), name="t")
    u = gb.op("test.cat0", t, gb.op("test.neg", hi, name="nh"), name="u")
    gb.output(s, gb.op("test.sum_rows", u, name="r"), gb.op("test.to_int32", u, name="ui"))
    return gb.finish()


def planned_reference(x):
    lo, hi = -x[:, :4], -x[:, 4:]
    s = lo + 2 * hi
    u = np.concatenate([-(s - lo), -hi])
    return s, u.sum(axis=1), u.astype("int32")


def test_static_graph_runs_from_its_planned_arena_and_returns_fresh_outputs():
    exe = tessera.compile(planned_graph(), opt_level=1, executor="graph")   # one node per op: six intermediates
    xs = [rand(4, 8) * 4 for _ in range(3)]
    first = exe(xs[0])
    from tessera.runtime.static_runner import StaticRunner

    assert isinstance(exe._runner, StaticRunner)
    assert exe._runner.arena.ctypes.data % 64 == 0
    for x in xs:
        got = exe(x)
        general = exe.execute([x])           # the per-call path, fresh buffers
        for g, want, ref in zip(got, general, planned_reference(x)):
            np.testing.assert_array_equal(g, want)
            np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-5)
            assert not np.shares_memory(g, exe._runner.arena)
    # the first run's outputs are the caller's: later runs do not write over them
    for g, ref in zip(first, planned_reference(xs[0])):
        np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-5)


def test_static_graph_run_from_several_threads_at_once_is_correct():
    from concurrent.futures import ThreadPoolExecutor

    exe = tessera.compile(planned_graph(), opt_level=1)
    xs = [rand(4, 8) for _ in range(32)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(exe, xs))
    for x, got in zip(xs, results):
        for g, ref in zip(got, planned_reference(x)):
            np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-5)


def test_symbolic_graph_takes_the_general_path(chain_exe):
    chain_exe(rand(3, 6))
    assert not chain_exe._runner
