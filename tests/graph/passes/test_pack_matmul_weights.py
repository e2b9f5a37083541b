"""pack_matmul_weights: constant matmul weights packed in micro-kernel panels by a node that
fold_constant evaluates at compile time; the same numbers as the unpacked graph."""
import numpy as np
import pytest

import tessera
from tessera.graph import Builder
from tessera.graph.ir import FUSED_OP
from tessera.graph.passes import optimize
from tessera.graph.passes.pack_matmul_weights import pack_matmul_weights
from tessera.target import Target

rng = np.random.default_rng(4)
HAS_KERNELS = Target("c").has_feature("avx2") and Target("c").has_feature("fma") or Target("c").has_feature("avx512f")


def rand(*shape):
    return rng.standard_normal(shape).astype("float32")


def mlp(n_out=1001, rows=16):
    """x (1, rows, 32) -> matmul by a constant (32, 48) -> bias, gelu-like tanh -> matmul by a constant
    (48, n_out) (an N no tile divides) -> + x2 @ y (a matmul of two activations, left alone)."""
    gb = Builder("mlp")
    x = gb.input("x", (1, rows, 32))
    y = gb.input("y", (32, n_out))
    h = gb.op("nn.matmul", x, gb.const(rand(32, 48), "w1"))
    h = gb.op("tanh", gb.op("add", h, gb.const(rand(48), "b1")))
    h = gb.op("nn.matmul", h, gb.const(rand(48, n_out), "w2"))
    h = gb.op("add", h, gb.op("nn.matmul", x, y))
    gb.output(h)
    return gb.finish()


def all_nodes(graph):
    out = []
    for n in graph.nodes:
        out.extend(n.attrs["function"].body.nodes if n.op == FUSED_OP else [n])
    return out


@pytest.mark.skipif(not HAS_KERNELS, reason="the host has no x86 GEMM micro-kernels")
def test_constant_weights_are_packed_once_and_results_unchanged():
    g = mlp()
    g2 = pack_matmul_weights(optimize(g, opt_level=1), "c")
    mms = [n for n in g2.nodes if n.op == "nn.matmul"]
    packed = [n for n in mms if n.attrs["b_panel"]]
    assert len(mms) == 3 and len(packed) == 2          # the activation x activation product stays
    assert not any(n.op == "nn.pack_matmul_weight" for n in g2.nodes)   # folded into constants
    for n in packed:
        w = n.inputs[1]
        assert w in g2.constants
        panels, k, panel = w.type.shape
        assert panels * panel >= n.attrs["b_cols"] > (panels - 1) * panel
    # the 1001-column weight: its panels hold the columns, zeros past the end
    w2 = [n for n in packed if n.attrs["b_cols"] == 1001][0].inputs[1]
    arr = g2.constants[w2]
    src = [a for v, a in g.constants.items() if v.name == "w2"][0]
    p = arr.shape[-1]
    np.testing.assert_array_equal(arr.transpose(1, 0, 2).reshape(48, -1)[:, :1001], src)
    assert not arr.transpose(1, 0, 2).reshape(48, -1)[:, 1001:].any()
    x, y = rand(1, 16, 32), rand(32, 1001)
    want = tessera.compile(g, None, opt_level=2)(x, y)
    got = tessera.compile(g2, None, opt_level=2)(x, y)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, np.tanh(x @ g.constants[[v for v in g.constants if v.name == "w1"][0]]
                                            + g.constants[[v for v in g.constants if v.name == "b1"][0]]) @ src
                               + x @ y, rtol=1e-4, atol=1e-3)
    assert p in (8, 16, 24, 32, 64)


@pytest.mark.skipif(not HAS_KERNELS, reason="the host has no x86 GEMM micro-kernels")
def test_packed_matmul_runs_on_the_micro_kernel_inside_its_fused_kernel():
    g2 = optimize(pack_matmul_weights(optimize(mlp(n_out=96, rows=64), opt_level=1), "c"), opt_level=2)
    exe = tessera.compile(g2, None, opt_level=0)
    sources = [k.module.get_source() for k in exe.kernels]
    gemm = [s for s in sources if "_gemm_" in s]
    # the two constant weights: no packing left in their kernels; x @ y (two activations) packs in-kernel
    assert len([s for s in gemm if "b_pack" not in s]) >= 2 and len([s for s in gemm if "b_pack" in s]) == 1


def test_graphs_without_micro_kernels_or_constant_weights_are_unchanged():
    gb = Builder("act")
    a, b = gb.input("a", (64, 32)), gb.input("b", (32, 48))
    gb.output(gb.op("nn.matmul", a, b))
    g = gb.finish()
    assert pack_matmul_weights(g, "c") is g
    g = mlp()
    assert pack_matmul_weights(g, "cuda") is g
    with pytest.raises(tessera.errors.TesseraError, match="takes a tessera.graph.Graph"):
        pack_matmul_weights("graph", "c")
