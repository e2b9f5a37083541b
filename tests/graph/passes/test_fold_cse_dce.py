"""fold_constant, eliminate_common_subexpr and dead_code_elimination."""
import numpy as np

import tessera
from tessera.graph import Builder
from tessera.graph.passes import dead_code_elimination, eliminate_common_subexpr, fold_constant
from tessera.graph.printer import structural_equal

rng = np.random.default_rng(2)


def rand(*shape):
    return rng.standard_normal(shape).astype("float32")


# ---------------------------------------------------------------------------------------------
# fold_constant
# ---------------------------------------------------------------------------------------------
def test_fold_constant_evaluates_constant_subgraphs_with_tessera_kernels():
    gb = Builder("fold")
    x = gb.input("x", (4, 3))
    w = gb.const(rand(3, 4), "w")
    wt = gb.op("transpose", gb.op("exp", w, name="ew"), axes=(1, 0), name="wt")     # constant only
    gb.output(gb.op("add", x, wt, name="y"))
    g = gb.finish()
    f = fold_constant(g)
    assert [n.op for n in f.nodes] == ["add"]
    folded = f.constants[f.nodes[0].inputs[1]]
    np.testing.assert_allclose(folded, np.exp(g.constants[w]).T, rtol=1e-6)
    assert f.nodes[0].inputs[1].name == "wt"
    xv = rand(4, 3)
    np.testing.assert_allclose(tessera.compile(f, opt_level=0)(xv), tessera.compile(g, opt_level=0)(xv), rtol=1e-6)


def test_shape_queries_of_static_shapes_fold_with_what_reads_them():
    # the exporters' shape subgraph: Shape -> Gather -> Cast -> Mul, then used as a value
    gb = Builder("shapes")
    x = gb.input("x", (2, 5, 7))
    shp = gb.op("shape_of", x, name="shape")
    n = gb.op("take", shp, gb.const(np.array(1, "int64"), "one"), name="dim1")
    size = gb.op("ndarray_size", x, dtype="int32", name="size")
    scaled = gb.op("multiply", gb.op("cast", n, dtype="float32", name="dimf"), gb.const(np.float32(0.5), "half"))
    gb.output(gb.op("add", x, scaled, name="y"), size, shp)
    g = gb.finish()
    f = fold_constant(g)
    assert [n.op for n in f.nodes] == ["add"]
    assert float(f.constants[f.nodes[0].inputs[1]]) == 2.5
    y, size, shp = tessera.compile(f, opt_level=0)(np.zeros((2, 5, 7), "float32"))
    np.testing.assert_array_equal(shp, [2, 5, 7])
    assert size.dtype == np.int32 and int(size) == 70
    assert np.all(y == 2.5)


def test_shape_of_a_symbolic_shape_stays():
    gb = Builder("sym")
    x = gb.input("x", ("N", 3))
    gb.output(gb.op("shape_of", x, name="s"))
    g = gb.finish()
    assert structural_equal(fold_constant(g), g)


def test_compile_folds_at_opt_level_1_and_not_at_0():
    gb = Builder("lv")
    x = gb.input("x", (3,))
    c = gb.op("negative", gb.const(np.arange(3, dtype="float32"), "c"), name="nc")
    gb.output(gb.op("add", x, c, name="y"))
    g = gb.finish()
    assert len(tessera.compile(g, opt_level=0).graph.nodes) == 2
    e1 = tessera.compile(g, opt_level=1)
    assert [n.op for n in e1.graph.nodes] == ["add"]
    np.testing.assert_allclose(e1(np.ones(3, "float32")), 1 - np.arange(3))


# ---------------------------------------------------------------------------------------------
# eliminate_common_subexpr
# ---------------------------------------------------------------------------------------------
def cse_graph():
    gb = Builder("cse")
    x = gb.input("x", (4, 6))
    w1 = gb.const(np.full((6,), 2.0, "float32"), "w1")
    w2 = gb.const(np.full((6,), 2.0, "float32"), "w2")       # equal by value to w1
    a = gb.op("exp", x, name="a")
    b = gb.op("exp", x, name="b")                             # same as a
    ma = gb.op("multiply", a, w1, name="ma")
    mb = gb.op("multiply", b, w2, name="mb")                  # same as ma once a=b and w1=w2
    s1 = gb.op("sum", ma, axis=(1,), name="s1")
    s2 = gb.op("sum", mb, axis=(0,), name="s2")               # other attrs: stays
    gb.output(gb.op("subtract", ma, mb, name="d"), s1, s2)
    return gb.finish()


def test_cse_merges_equal_nodes_and_equal_constants():
    g = cse_graph()
    c = eliminate_common_subexpr(g)
    assert [n.name for n in c.nodes] == ["a", "ma", "s1", "s2", "d"]
    assert len(c.constants) == 1
    d = c.nodes[-1]
    assert d.inputs[0] is d.inputs[1]
    assert c.nodes[3].inputs[0] is c.nodes[1].outputs[0]
    x = rand(4, 6)
    for got, want in zip(tessera.compile(c, opt_level=0)(x), tessera.compile(g, opt_level=0)(x)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_cse_keeps_different_attrs_and_different_constants():
    gb = Builder("keep")
    x = gb.input("x", (4, 6))
    a = gb.op("sum", x, axis=(0,), name="a")
    b = gb.op("sum", x, axis=(0,), keepdims=True, name="b")
    c1 = gb.op("add", x, gb.const(np.zeros(6, "float32"), "z"), name="c1")
    c2 = gb.op("add", x, gb.const(np.array([-0.0] * 6, "float32"), "nz"), name="c2")    # -0.0 is another value
    c3 = gb.op("add", x, gb.const(np.zeros(6, "float64").astype("float32").reshape(1, 6), "z2"), name="c3")
    gb.output(a, b, c1, c2, c3)
    g = gb.finish()
    assert eliminate_common_subexpr(g) is g


def test_cse_on_a_model_with_repeated_constants():
    gb = Builder("repeat")
    x = gb.input("x", (2, 8))
    outs = []
    for i in range(3):
        w = gb.const(np.eye(8, dtype="float32"), f"w{i}")
        outs.append(gb.op("nn.relu", gb.op("nn.dense", x, w, name=f"fc{i}"), name=f"r{i}"))
    gb.output(*outs)
    g = gb.finish()
    c = eliminate_common_subexpr(g)
    assert len(c.nodes) == 2 and len(c.constants) == 1
    assert c.outputs[0] is c.outputs[1] is c.outputs[2]
    xv = rand(2, 8)
    outs = tessera.compile(c)(xv)
    assert all(o is not outs[0] for o in outs[1:])         # the executor returns distinct arrays
    for o in outs:
        np.testing.assert_allclose(o, np.maximum(xv, 0), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# dead_code_elimination
# ---------------------------------------------------------------------------------------------
def test_dce_drops_unreachable_nodes_and_unread_constants_and_keeps_inputs():
    gb = Builder("dce")
    x = gb.input("x", (3,))
    unused_in = gb.input("unused", (2,))
    c = gb.const(np.ones(3, "float32"), "c")
    gb.const(np.ones(5, "float32"), "never_read")
    dead = gb.op("exp", gb.op("add", x, c, name="dead_add"), name="dead_exp")
    live = gb.op("negative", x, name="live")
    gb.output(live)
    g = gb.finish()
    d = dead_code_elimination(g)
    assert [n.name for n in d.nodes] == ["live"]
    assert len(d.constants) == 0
    assert d.inputs == (x, unused_in)
    assert dead_code_elimination(d) is d
    assert dead is not None


def test_dce_keeps_a_multi_output_node_if_one_output_is_used():
    gb = Builder("multi")
    x = gb.input("x", (2, 4))
    lo, hi = gb.op("test.split2", x, name="sp")
    gb.output(gb.op("test.neg", lo, name="n"))
    g = gb.finish()
    assert [n.name for n in dead_code_elimination(g).nodes] == ["sp", "n"]
