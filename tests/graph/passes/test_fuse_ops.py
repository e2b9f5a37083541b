"""fuse_ops: TVM's fusion rules over op patterns, fused nodes in the IR, and the fused kernels."""
import numpy as np
import pytest

import tessera
from tessera.errors import TesseraError
from tessera.graph import Builder
from tessera.graph.ir import FUSED_OP, Function
from tessera.graph.passes import fuse_ops, fusion_groups
from tessera.graph.printer import structural_equal

rng = np.random.default_rng(0)


def rand(*shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


def groups(graph, **kw):
    return [[n.name for n in g] for g in fusion_groups(graph, **kw)]


def fused_nodes(graph):
    return [n for n in graph.nodes if n.op == FUSED_OP]


def kernel_of(exe, prefix):
    ks = [k for k in exe.kernels if k.op.startswith(prefix)]
    assert len(ks) == 1, [k.op for k in exe.kernels]
    return ks[0]


def alloc_names(kernel):
    """Names of the buffers the kernel allocates (intermediates that exist in memory)."""
    from tessera.ir.functor import post_order_visit
    from tessera.ir.stmt import Block

    func = kernel.prim.func if hasattr(kernel.prim, "func") else kernel.prim     # a Schedule or a PrimFunc
    names = []

    def visit(n):
        if isinstance(n, Block):
            names.extend(b.name for b in n.alloc_buffers)

    post_order_visit(func.body, visit)
    return names


def assert_same(exe_a, exe_b, feeds, rtol=1e-5, atol=1e-5):
    for a, b in zip(exe_a.run(feeds), exe_b.run(feeds)):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------------
# conv + bias + relu + residual add: the epilogue fuses into one kernel
# ---------------------------------------------------------------------------------------------
def resblock(clip=False, seed=0):
    r = np.random.default_rng(seed)
    gb = Builder("resblock")
    x = gb.input("x", (1, 8, 12, 12))
    w1 = gb.const(r.standard_normal((8, 8, 3, 3)).astype("float32") * 0.2, "w1")
    b1 = gb.const(r.standard_normal((8, 1, 1)).astype("float32"), "b1")
    w2 = gb.const(r.standard_normal((8, 8, 3, 3)).astype("float32") * 0.2, "w2")
    b2 = gb.const(r.standard_normal((8, 1, 1)).astype("float32"), "b2")
    h = gb.op("nn.conv2d", x, w1, padding=(1, 1, 1, 1), name="conv1")
    h = gb.op("add", h, b1, name="bias1")
    h = gb.op("nn.relu", h, name="relu1")
    h = gb.op("nn.conv2d", h, w2, padding=(1, 1, 1, 1), name="conv2")
    h = gb.op("add", h, b2, name="bias2")
    h = gb.op("add", h, x, name="residual")
    h = gb.op("clip", h, a_min=0.0, a_max=6.0, name="out") if clip else gb.op("nn.relu", h, name="out")
    gb.output(h)
    return gb.finish()


@pytest.fixture(scope="module")
def resblock_exes():
    g = resblock()
    return g, tessera.compile(g, opt_level=0), tessera.compile(g, opt_level=2)


def test_conv_bias_relu_and_residual_chains_fuse_into_two_groups(resblock_exes):
    g, _, _ = resblock_exes
    assert groups(g) == [["conv1", "bias1", "relu1"], ["conv2", "bias2", "residual", "out"]]
    f = fuse_ops(g)
    fused = fused_nodes(f)
    assert len(f.nodes) == 2 and len(fused) == 2
    assert [fn.name for fn in f.functions] == ["fused_nn_conv2d_add_nn_relu", "fused_nn_conv2d_add_add_nn_relu"]
    assert f.functions[1].ops == ("nn.conv2d", "add", "add", "nn.relu")
    # the second group reads x (the residual) and the first group's output, and keeps the sink's name
    second = fused[1]
    assert second.name == "out" and second.outputs[0].name == "out"
    assert second.inputs[0] is fused[0].outputs[0] and second.inputs[3] is g.inputs[0]
    assert f.outputs[0] is second.outputs[0]


def test_fused_resblock_matches_the_unfused_graph(resblock_exes):
    _, e0, e2 = resblock_exes
    assert len(e0.graph.nodes) == 7 and len(e2.graph.nodes) == 2
    assert_same(e0, e2, {"x": rand(1, 8, 12, 12)})


def test_fused_epilogue_is_never_materialized(resblock_exes):
    _, _, e2 = resblock_exes
    k = kernel_of(e2, "fused_nn_conv2d_add_add_nn_relu")
    allocs = alloc_names(k)
    # the conv's own stages (padding, packed weights, packed accumulator) only: no tensor for the
    # conv output in NCHW, the bias add, the residual add or the relu
    assert not [a for a in allocs if a.startswith(("T_add", "T_relu", "conv2d_nchw_"))] and \
        "conv2d_nchw" not in allocs, allocs
    src = k.module.get_source()
    assert "fused_nn_conv2d_add_add_nn_relu" in src
    assert "T_add" not in src.split("fused_nn_conv2d_add_add_nn_relu", 1)[1]


def test_clip_epilogue_fuses_like_relu():
    g = resblock(clip=True)
    assert [fn.name for fn in fuse_ops(g).functions] == ["fused_nn_conv2d_add_nn_relu", "fused_nn_conv2d_add_add_clip"]


# ---------------------------------------------------------------------------------------------
# reductions take their injective prologue; what follows a reduction starts a new group
# ---------------------------------------------------------------------------------------------
def rms_graph():
    gb = Builder("rms")
    x = gb.input("x", (6, 40))
    sq = gb.op("multiply", x, x, name="sq")
    mu = gb.op("mean", sq, axis=(1,), keepdims=True, name="mu")
    r = gb.op("rsqrt", gb.op("add", mu, gb.const(np.array(1e-5, "float32"), "eps"), name="mu_eps"), name="r")
    gb.output(gb.op("multiply", x, r, name="y"))
    return gb.finish()


def test_mean_of_squares_fuses_its_prologue():
    g = rms_graph()
    assert groups(g) == [["sq", "mu"], ["mu_eps", "r", "y"]]
    e0, e2 = tessera.compile(g, opt_level=0), tessera.compile(g, opt_level=2)
    x = rand(6, 40)
    np.testing.assert_allclose(e2(x), x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-5), rtol=1e-5)
    assert_same(e0, e2, {"x": x})
    k = kernel_of(e2, "fused_multiply_mean")
    assert not [a for a in alloc_names(k) if a.startswith("T_multiply")]   # x*x is read inside the sum
    assert "T_multiply" not in k.module.get_source()


def test_softmax_pieces_group_as_tvm_does():
    gb = Builder("softmax")
    x = gb.input("x", (4, 16))
    m = gb.op("max", x, axis=(1,), keepdims=True, name="m")
    e = gb.op("exp", gb.op("subtract", x, m, name="s"), name="e")
    t = gb.op("sum", e, axis=(1,), keepdims=True, name="t")
    gb.output(gb.op("divide", e, t, name="y"))
    g = gb.finish()
    # exp is read by the sum and by the divide: the sum (a reduction) is in the way of the divide,
    # so exp keeps its value in memory and the subtract fuses into it
    assert groups(g) == [["m"], ["s", "e"], ["t"], ["y"]]
    x = rand(4, 16)
    want = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(tessera.compile(g)(x), want / want.sum(1, keepdims=True), rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# diamonds, several readers, opaque ops, graph outputs, the size cap
# ---------------------------------------------------------------------------------------------
def test_diamond_of_elementwise_ops_fuses_whole():
    gb = Builder("diamond")
    x = gb.input("x", (8, 16))
    e = gb.op("exp", x, name="e")
    a = gb.op("add", e, gb.const(np.ones((16,), "float32"), "one"), name="a")
    b = gb.op("multiply", e, gb.const(np.full((8, 1), 2.0, "float32"), "two"), name="b")
    gb.output(gb.op("subtract", a, b, name="y"))
    g = gb.finish()
    assert groups(g) == [["e", "a", "b", "y"]]
    exe = tessera.compile(g)
    assert len(exe.graph.nodes) == 1
    k = exe.kernels[0]
    assert alloc_names(k) == []           # exp is recomputed in the one loop nest, never stored
    x = rand(8, 16)
    np.testing.assert_allclose(exe(x), (np.exp(x) + 1) - np.exp(x) * 2, rtol=1e-5, atol=1e-6)


def test_value_read_by_a_conv_and_an_elementwise_op_is_not_fused():
    gb = Builder("branch")
    x = gb.input("x", (1, 4, 8, 8))
    r = gb.op("nn.relu", x, name="r")
    c = gb.op("nn.conv2d", r, gb.const(rand(4, 4, 1, 1), "w"), name="c")
    gb.output(gb.op("add", c, r, name="y"))
    g = gb.finish()
    # r's post-dominator is y, but the path through the conv is not injective: r stays a kernel
    # of its own, and the conv takes the add as its epilogue
    assert groups(g) == [["r"], ["c", "y"]]
    x = rand(1, 4, 8, 8)
    assert_same(tessera.compile(g, opt_level=0), tessera.compile(g), {"x": x})


def test_conv_output_read_twice_keeps_it_in_memory():
    gb = Builder("two_readers")
    x = gb.input("x", (1, 4, 8, 8))
    c = gb.op("nn.conv2d", x, gb.const(rand(4, 4, 3, 3), "w"), padding=(1, 1, 1, 1), name="c")
    a = gb.op("nn.relu", c, name="a")
    b = gb.op("nn.conv2d", c, gb.const(rand(4, 4, 1, 1), "w2"), name="b")
    gb.output(a, b)
    g = gb.finish()
    assert groups(g) == [["c"], ["a"], ["b"]]


def test_opaque_ops_stand_alone():
    gb = Builder("opaque")
    x = gb.input("x", (4, 16))
    e = gb.op("exp", x, name="e")
    s = gb.op("nn.softmax", e, axis=-1, name="s")
    gb.output(gb.op("nn.relu", s, name="r"))
    g = gb.finish()
    assert groups(g) == [["e"], ["s"], ["r"]]
    assert fuse_ops(g) is g


def test_graph_output_leaves_its_group():
    gb = Builder("outs")
    x = gb.input("x", (16,))
    e = gb.op("exp", x, name="e")
    n = gb.op("sqrt", e, name="n")
    gb.output(gb.op("log", n, name="l"), e)
    g = gb.finish()
    assert groups(g) == [["e"], ["n", "l"]]
    exe = tessera.compile(g)
    x = rand(16)
    l, e = exe(x)
    np.testing.assert_allclose(e, np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(l, x / 2, rtol=1e-5, atol=1e-6)


def test_multi_output_ops_stand_alone():
    gb = Builder("split")
    x = gb.input("x", (4, 8))
    lo, hi = gb.op("test.split2", gb.op("test.neg", x, name="n"), name="sp")
    gb.output(gb.op("test.add", lo, hi, name="s"))
    g = gb.finish()
    assert groups(g) == [["n"], ["sp"], ["s"]]


def test_max_fuse_depth_caps_the_group_size():
    gb = Builder("chain")
    v = gb.input("x", (32,))
    for i in range(7):
        v = gb.op("negative", v, name=f"n{i}")
    gb.output(v)
    g = gb.finish()
    assert groups(g) == [[f"n{i}" for i in range(7)]]
    capped = groups(g, max_fuse_depth=3)
    assert max(len(m) for m in capped) <= 3 and sum(len(m) for m in capped) == 7
    assert len(fuse_ops(g, max_fuse_depth=3).nodes) == len(capped)
    with pytest.raises(TesseraError, match="max_fuse_depth"):
        fusion_groups(g, max_fuse_depth=0)


def test_injective_chain_fuses_into_a_vectorized_kernel():
    gb = Builder("inj")
    x = gb.input("x", (4, 6, 8))
    t = gb.op("transpose", gb.op("reshape", x, newshape=(4, 48), name="r"), axes=(1, 0), name="t")
    gb.output(gb.op("add", t, gb.const(rand(48, 4), "c"), name="y"))
    g = gb.finish()
    assert groups(g) == [["r", "t", "y"]]
    exe = tessera.compile(g)
    assert [fn.name for fn in exe.graph.functions] == ["fused_reshape_transpose_add"]
    assert alloc_names(exe.kernels[0]) == []
    x = rand(4, 6, 8)
    np.testing.assert_allclose(exe(x), x.reshape(4, 48).T + g.constants[g.nodes[2].inputs[1]], rtol=1e-6)


def test_equal_groups_share_one_function_and_one_kernel():
    gb = Builder("twice")
    x = gb.input("x", (1, 4, 6, 6))
    w = gb.const(rand(4, 4, 3, 3), "w")
    for i in range(2):
        x = gb.op("nn.relu", gb.op("nn.conv2d", x, w, padding=(1, 1, 1, 1), name=f"c{i}"), name=f"r{i}")
    gb.output(x)
    g = gb.finish()
    f = fuse_ops(g)
    a, b = fused_nodes(f)
    assert a.attrs["function"] is b.attrs["function"]
    exe = tessera.compile(g)
    assert len(exe.kernels) == 1


def test_symbolic_batch_fuses_and_runs():
    gb = Builder("sym")
    x = gb.input("x", ("N", 16))
    y = gb.op("nn.relu", gb.op("add", gb.op("nn.dense", x, gb.const(rand(8, 16), "w")), gb.const(rand(8), "b")))
    gb.output(y)
    g = gb.finish()
    exe, e0 = tessera.compile(g), tessera.compile(g, opt_level=0)
    assert [fn.name for fn in exe.graph.functions] == ["fused_nn_dense_add_nn_relu"]
    for n in (1, 5):
        assert_same(e0, exe, {"x": rand(n, 16)})


# ---------------------------------------------------------------------------------------------
# the IR of fused graphs
# ---------------------------------------------------------------------------------------------
def test_script_shows_functions_and_calls(resblock_exes):
    text = fuse_ops(resblock_exes[0]).script()
    assert "fn @fused_nn_conv2d_add_nn_relu(%data: float32[1, 8, 12, 12], %weight: float32[8, 8, 3, 3], " \
           "%rhs: float32[8, 1, 1]) {" in text
    assert "  %relu1 = nn.relu(%bias1) : float32[1, 8, 12, 12]" in text
    assert "  %out = @fused_nn_conv2d_add_add_nn_relu(%relu1, %w2, %b2, %x) : float32[1, 8, 12, 12]" in text
    assert text.index("fn @fused_nn_conv2d_add_nn_relu") < text.index("graph resblock(")


def test_structural_equal_compares_function_bodies():
    assert structural_equal(fuse_ops(resblock()), fuse_ops(resblock()))
    assert not structural_equal(fuse_ops(resblock()), fuse_ops(resblock(seed=1)))    # other weights
    assert not structural_equal(fuse_ops(resblock()), fuse_ops(resblock(clip=True)))  # another epilogue
    assert not structural_equal(fuse_ops(resblock()), resblock())


def test_fused_node_must_match_its_function():
    g = fuse_ops(rms_graph())
    node = g.nodes[0]
    fn = node.attrs["function"]
    from tessera.graph.ir import Graph, Node

    bad = Node(FUSED_OP, [g.inputs[0], g.inputs[0]], {"function": fn}, "bad", [o.type for o in node.outputs])
    with pytest.raises(TesseraError, match="with 2 inputs; it takes 1"):
        Graph(g.inputs, bad.outputs, [bad])
    with pytest.raises(TesseraError, match="not an identifier"):
        Function("fused op", fn.body)
    with pytest.raises(TesseraError, match="holds constants"):
        Function("f", rms_graph())


def test_epilogue_in_a_conv_unpacking_stage_is_vectorized_along_channels():
    # 28 output columns: the vector lanes do not divide them, so the stage that unpacks NCHWc (and
    # now computes the bias add and clip) runs along the output channels, read contiguously
    gb = Builder("pw")
    x = gb.input("x", (1, 32, 28, 28))
    y = gb.op("nn.conv2d", x, gb.const(rand(64, 32, 1, 1), "w"), name="conv")
    y = gb.op("clip", gb.op("add", y, gb.const(rand(64, 1, 1), "b"), name="bias"), a_min=0.0, a_max=6.0)
    gb.output(y)
    g = gb.finish()
    exe = tessera.compile(g, opt_level=2)      # the NCHW conv with its unpacking stage (level 3 blocks it)
    sch = exe.kernels[0].prim
    loops = sch.get_loops(sch.get_block("conv2d_nchw"))
    assert sch.get(loops[-1]).kind == "vectorized"
    assert sch.get(loops[-1]).loop_var.name.startswith("oc")
    xv = rand(1, 32, 28, 28)
    np.testing.assert_allclose(exe(xv), tessera.compile(g, opt_level=0)(xv), rtol=1e-5, atol=1e-5)


def _register_failing_anchor():
    from tessera import te
    from tessera.errors import ScheduleError
    from tessera.ops.registry import OpPattern, list_ops, register_op

    if "test.scaled_rowsum" in list_ops():
        return
    op = register_op("test.scaled_rowsum", inputs=("x",), pattern=OpPattern.OUT_ELEMWISE_FUSABLE)
    op.def_infer(lambda types, attrs: [types[0].with_shape(types[0].shape[:1])])

    @op.def_compute
    def _(ts, attrs):
        (x,) = ts
        k = te.reduce_axis((0, x.shape[1]), name="k")
        return [te.compute((x.shape[0],), lambda i: te.sum(x[i, k] * 2.0, axis=k), name="T_rowsum")]

    @op.def_schedule
    def _(sch, ctx):
        raise ScheduleError(f"test: no schedule for {ctx.block} (epilogue {list(ctx.epilogue)})")


def test_a_failing_anchor_schedule_keeps_the_inlined_kernel():
    _register_failing_anchor()
    gb = Builder("bad")
    x = gb.input("x", (5, 7))
    y = gb.op("nn.relu", gb.op("add", gb.op("test.scaled_rowsum", x, name="s"), gb.const(rand(5), "b")))
    gb.output(y)
    g = gb.finish()
    with pytest.warns(UserWarning, match=r"anchor test.scaled_rowsum failed \(test: no schedule for T_rowsum "
                                         r"\(epilogue \['T_relu'\]\)\); using the inlined, unscheduled kernel"):
        exe = tessera.compile(g)
    assert [fn.name for fn in exe.graph.functions] == ["fused_test_scaled_rowsum_add_nn_relu"]
    assert not [a for a in alloc_names(exe.kernels[0]) if a.startswith("T_add")]
    xv = rand(5, 7)
    b = g.constants[g.nodes[1].inputs[1]]
    np.testing.assert_allclose(exe(xv), np.maximum(2 * xv.sum(1) + b, 0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_random_dags_fuse_to_the_same_results(seed):
    """Random DAGs of elementwise, broadcast, injective and reduce ops, values read several times
    and some intermediate outputs: fused (opt_level 2) and one kernel per node agree."""
    r = np.random.default_rng(100 + seed)
    gb = Builder(f"dag{seed}")
    x = gb.input("x", (4, 8))
    vals = [x, gb.op("exp", gb.op("negative", x))]
    outs = []
    for i in range(10):
        kind = r.integers(0, 6)
        a = vals[r.integers(0, len(vals))]
        if kind == 0:
            b = vals[r.integers(0, len(vals))] if a.type == x.type else a
            v = gb.op(["add", "multiply", "subtract"][r.integers(0, 3)], a, b, name=f"b{i}")
        elif kind == 1:
            v = gb.op(["nn.relu", "tanh", "sigmoid"][r.integers(0, 3)], a, name=f"u{i}")
        elif kind == 2 and a.type == x.type:
            red = gb.op(["sum", "max"][r.integers(0, 2)], a, axis=(1,), keepdims=True, name=f"r{i}")
            v = gb.op("subtract", a, red, name=f"s{i}")           # broadcast back over the rows
        elif kind == 3 and a.type == x.type:
            v = gb.op("reshape", gb.op("transpose", a, axes=(1, 0), name=f"t{i}"), newshape=(4, 8), name=f"rs{i}")
        elif kind == 4:
            v = gb.op("add", a, gb.const(r.standard_normal((8,)).astype("float32"), f"c{i}"), name=f"bc{i}")
        else:
            v = gb.op("multiply", a, gb.const(np.float32(0.5), f"h{i}"), name=f"m{i}")
        vals.append(v)
        if r.random() < 0.2:
            outs.append(v)
    gb.output(*(outs + [vals[-1]]))
    g = gb.finish()
    xv = rand(4, 8)
    e0, e2 = tessera.compile(g, opt_level=0), tessera.compile(g, opt_level=2)
    assert len(e2.graph.nodes) < len(e0.graph.nodes)
    for a, b in zip(e0.run({"x": xv}), e2.run({"x": xv})):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_fused_graph_exports_and_loads_back(resblock_exes, tmp_path):
    _, _, e2 = resblock_exes
    path = e2.export_library(str(tmp_path / "resblock.so"))
    x = rand(1, 8, 12, 12)
    for executor in ("graph", None):
        loaded = tessera.runtime.load_module(path, executor=executor)
        np.testing.assert_array_equal(loaded(x), e2(x))
    from tessera.graph.document import load_graph

    g = load_graph(tessera.runtime.load_module(path, executor="graph"))
    assert [f.name for f in g.functions] == [f.name for f in e2.graph.functions]
    assert g.functions[1].key == e2.graph.functions[1].key
    assert "@fused_nn_conv2d_add_add_nn_relu(" in g.script()
