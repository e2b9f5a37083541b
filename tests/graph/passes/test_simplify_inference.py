"""simplify_inference: no-ops dropped, batch norm decomposed, per-channel scale/shift folded into
conv / dense / matmul weights (the values then computed by fold_constant)."""
import numpy as np
import pytest

import tessera
from tessera.graph import Builder
from tessera.graph.passes import dead_code_elimination, fold_constant, simplify_inference
from tessera.graph.printer import structural_equal

rng = np.random.default_rng(1)


def rand(*shape):
    return rng.standard_normal(shape).astype("float32")


def bn_params(gb, c, prefix):
    return [gb.const(rand(c), f"{prefix}.gamma"), gb.const(rand(c), f"{prefix}.beta"),
            gb.const(rand(c), f"{prefix}.mean"), gb.const(np.abs(rand(c)) + 0.5, f"{prefix}.var")]


def conv_bn_graph(extra=None):
    gb = Builder("conv_bn")
    x = gb.input("x", (2, 3, 10, 10))
    h = gb.op("nn.conv2d", x, gb.const(rand(6, 3, 3, 3), "w"), padding=(1, 1, 1, 1), name="conv")
    h = gb.op("nn.batch_norm", h, *bn_params(gb, 6, "bn"), epsilon=1e-3, name="bn")
    if extra == "scale_shift":
        h = gb.op("multiply", h, gb.const(rand(1, 6, 1, 1), "s"), name="scale")
        h = gb.op("subtract", gb.const(rand(6, 1, 1), "t"), h, name="shift")
    gb.output(gb.op("nn.relu", h, name="relu"))
    return gb.finish()


def optimized(g):
    return dead_code_elimination(fold_constant(simplify_inference(fold_constant(g))))


def check_same(g0, g1, feeds, rtol=1e-4, atol=1e-5):
    e0, e1 = tessera.compile(g0, opt_level=0), tessera.compile(g1, opt_level=0)
    for a, b in zip(e0.run(feeds), e1.run(feeds)):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


@pytest.mark.parametrize("extra", [None, "scale_shift"])
def test_batch_norm_and_scale_shift_fold_into_the_conv(extra):
    g = conv_bn_graph(extra)
    s = optimized(g)
    assert s.op_counts() == {"nn.conv2d": 1, "add": 1, "nn.relu": 1}
    conv, add, relu = s.nodes
    w = s.constants[conv.inputs[1]]
    b = s.constants[add.inputs[1]]
    assert w.shape == (6, 3, 3, 3) and b.shape == (6, 1, 1)
    # the folded weights are exactly what the batch norm formula gives
    gamma, beta, mean, var = (g.constants[v] for v in g.nodes[1].inputs[1:])
    scale = gamma / np.sqrt(var + np.float32(1e-3))
    shift = beta - mean * scale
    w0 = g.constants[g.nodes[0].inputs[1]]
    if extra == "scale_shift":
        sc, t = g.constants[g.nodes[2].inputs[1]].reshape(6), g.constants[g.nodes[3].inputs[0]].reshape(6)
        scale, shift = -scale * sc, t - shift * sc
    np.testing.assert_allclose(w, w0 * scale[:, None, None, None], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.reshape(6), shift, rtol=1e-5, atol=1e-5)
    check_same(g, s, {"x": rand(2, 3, 10, 10)})


def test_batch_norm_alone_becomes_multiply_add():
    gb = Builder("bn")
    x = gb.input("x", (2, 4, 5))
    gb.output(gb.op("nn.batch_norm", x, *bn_params(gb, 4, "bn"), name="bn"))
    g = gb.finish()
    s = optimized(g)
    assert s.op_counts() == {"multiply": 1, "add": 1}
    assert s.nodes[0].inputs[1].type.shape == (4, 1)
    check_same(g, s, {"x": rand(2, 4, 5)})


def test_batch_norm_with_runtime_statistics_stays():
    gb = Builder("bn_rt")
    x = gb.input("x", (2, 4, 5))
    mean = gb.input("mean", (4,))
    gamma, beta, _, var = bn_params(gb, 4, "bn")
    gb.output(gb.op("nn.batch_norm", x, gamma, beta, mean, var, name="bn"))
    g = gb.finish()
    assert simplify_inference(g) is g


def test_dense_and_matmul_take_their_output_scale():
    gb = Builder("fc")
    x = gb.input("x", (3, 8))
    d = gb.op("nn.dense", x, gb.const(rand(5, 8), "wd"), name="dense")
    d = gb.op("divide", gb.op("multiply", d, gb.const(rand(5), "s1"), name="m1"), gb.const(np.float32(4.0), "four"),
              name="d1")
    m = gb.op("nn.matmul", d, gb.const(rand(5, 7), "wm"), name="mm")
    m = gb.op("add", gb.op("multiply", m, gb.const(rand(1, 7), "s2"), name="m2"), gb.const(rand(7), "b2"), name="a2")
    gb.output(m)
    g = gb.finish()
    s = optimized(g)
    assert s.op_counts() == {"nn.dense": 1, "nn.matmul": 1, "add": 1}
    check_same(g, s, {"x": rand(3, 8)})


def test_chains_not_folded_when_a_value_has_other_readers_or_varies_per_element():
    gb = Builder("keep")
    x = gb.input("x", (1, 3, 6, 6))
    c = gb.op("nn.conv2d", x, gb.const(rand(4, 3, 1, 1), "w"), name="conv")
    m = gb.op("multiply", c, gb.const(rand(4, 1, 1), "s"), name="m")       # conv also read by the output
    c2 = gb.op("nn.conv2d", x, gb.const(rand(4, 3, 1, 1), "w2"), name="conv2")
    m2 = gb.op("multiply", c2, gb.const(rand(4, 6, 1), "s2"), name="m2")   # varies along H: not per channel
    gb.output(m, c, m2)
    g = gb.finish()
    assert structural_equal(simplify_inference(g), g)


def test_noop_nodes_are_dropped():
    gb = Builder("noops")
    x = gb.input("x", (2, 3))
    y = gb.op("copy", x, name="c")
    y = gb.op("cast", y, dtype="float32", name="cast")
    y = gb.op("reshape", y, newshape=(2, 3), name="r")
    y = gb.op("transpose", y, axes=(0, 1), name="t")
    y = gb.op("exp", y, name="e")
    y = gb.op("clip", y, name="clip")
    gb.output(gb.op("transpose", y, axes=(1, 0), name="t2"))
    g = gb.finish()
    s = simplify_inference(g)
    assert [n.op for n in s.nodes] == ["exp", "transpose"]
    assert s.nodes[0].inputs[0] is g.inputs[0]
    x = rand(2, 3)
    np.testing.assert_allclose(tessera.compile(s, opt_level=0)(x), np.exp(x).T, rtol=1e-6)


def test_identity_graph_output_is_the_input():
    gb = Builder("ident")
    x = gb.input("x", (4,))
    gb.output(gb.op("copy", x, name="c"))
    s = simplify_inference(gb.finish())
    assert s.nodes == () and s.outputs[0] is s.inputs[0]
    x = rand(4)
    out = tessera.compile(s)(x)
    np.testing.assert_array_equal(out, x)
    assert out is not x
