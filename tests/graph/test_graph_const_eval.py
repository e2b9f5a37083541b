"""Constant evaluation through the executor; folding; substitute."""
import numpy as np
import pytest

from tessera.graph import Builder
from tessera.graph.const_eval import NotConstantError, evaluate_constants, fold_constants
from tessera.graph.printer import structural_equal
from tessera.graph.transform import substitute


def test_evaluate_constants_runs_tessera_kernels():
    gb = Builder()
    c = gb.const(np.arange(6, dtype="float32").reshape(2, 3), "c")
    s = gb.op("test.sum_rows", gb.op("test.add", c, c, alpha=3.0))
    i = gb.op("test.to_int32", s)
    got_s, got_c, got_i = evaluate_constants([s, c, i], gb.constants)
    want = (4 * np.arange(6, dtype="float32").reshape(2, 3)).sum(axis=1)
    np.testing.assert_allclose(got_s, want)
    np.testing.assert_array_equal(got_c, np.arange(6).reshape(2, 3))
    assert got_i.dtype == np.int32
    np.testing.assert_array_equal(got_i, want.astype("int32"))


def test_evaluate_constants_names_the_runtime_input_in_the_way():
    gb = Builder()
    x = gb.input("x", (3,))
    c = gb.const(np.ones(3, "float32"), "c")
    y = gb.op("test.add", c, gb.op("test.neg", x), name="y")
    with pytest.raises(NotConstantError, match="%y is not a constant: it depends on the runtime input %x") as e:
        evaluate_constants([y], gb.constants)
    assert e.value.input is x
    with pytest.raises(NotConstantError, match="%x is a runtime input"):
        evaluate_constants([x], gb.constants)


def test_fold_constants_replaces_constant_subgraphs():
    def build(folded):
        gb = Builder()
        x = gb.input("x", (3,))
        if folded:
            k = gb.const(np.array([-2.0, -4.0, -6.0], "float32"), "k")
        else:
            c = gb.const(np.array([1.0, 2.0, 3.0], "float32"), "c")
            k = gb.op("test.neg", gb.op("test.add", c, c), name="k")
        gb.output(gb.op("test.add", x, k, name="out"))
        return gb.finish()

    folded = fold_constants(build(False))
    assert structural_equal(folded, build(True))
    nothing_to_fold = build(True)
    assert fold_constants(nothing_to_fold) is nothing_to_fold


def test_substitute_rebuilds_only_downstream_nodes():
    gb = Builder()
    x = gb.input("x", (2,))
    a = gb.op("test.neg", x, name="a")
    b = gb.op("test.neg", a, name="b")
    c = gb.op("test.add", b, x, name="c")
    gb.output(c)
    g = gb.finish()
    gb2 = Builder()
    z = gb2.const(np.zeros(2, "float32"), "z")
    new = substitute(g, {b: z}, {z: gb2.constants[z]})
    assert [n.name for n in new.nodes] == ["c"]         # a and b are dead, pruned
    assert new.nodes[0].inputs[0] is z and new.nodes[0].inputs[1] is x
    assert a.producer in g.nodes                         # the old graph is untouched
