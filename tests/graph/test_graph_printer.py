"""graph.script() text form and structural_equal."""
import numpy as np

from tessera.graph import Builder
from tessera.graph.printer import structural_equal


def small_graph(names=("x", "w", "s", "y"), alpha=2.0, wval=None):
    gb = Builder("main")
    x = gb.input(names[0], ("N", 4))
    w = gb.const(np.ones((1, 2), "float32") if wval is None else wval, names[1])
    s = gb.op("test.add", x, x, alpha=alpha, name=names[2])
    y = gb.op("test.neg", s, name=names[3])
    lo, hi = gb.op("test.split2", y)
    gb.output(hi, w)
    return gb.finish()


def test_script_is_the_documented_form():
    text = small_graph().script()
    assert text.splitlines() == [
        "graph main(%x: float32[N, 4]) {",
        "  const %w: float32[1, 2] = [1.0, 1.0]",
        "  %s = test.add(%x, %x, alpha=2.0) : float32[N, 4]",
        "  %y = test.neg(%s) : float32[N, 4]",
        "  %split2.0, %split2.1 = test.split2(%y) : (float32[N, 2], float32[N, 2])",
        "  return %split2.1, %w",
        "}",
    ]
    assert str(small_graph()) == text


def test_default_attributes_are_left_out():
    assert "alpha" not in small_graph(alpha=1.0).script()


def test_large_constants_show_values_only_on_request():
    g = small_graph(wval=np.arange(12, dtype="float32").reshape(3, 4))
    assert "const %w: float32[3, 4]\n" in g.script()
    assert "const %w: float32[3, 4] = [0.0, 1.0, 2.0" in g.script(show_constants=True)


def test_structural_equal_ignores_names():
    assert structural_equal(small_graph(), small_graph(names=("a", "b", "c", "d")))
    assert not structural_equal(small_graph(), small_graph(names=("a", "b", "c", "d")), compare_names=True)


def test_structural_equal_sees_attrs_constants_and_types():
    g = small_graph()
    assert not structural_equal(g, small_graph(alpha=3.0))
    assert not structural_equal(g, small_graph(wval=np.array([[1.0, 2.0]], "float32")))
    assert not structural_equal(g, small_graph(wval=np.ones((1, 2), "float64")))
    nan = np.array([[np.nan, 1.0]], "float32")
    assert structural_equal(small_graph(wval=nan), small_graph(wval=nan.copy()))


def test_structural_equal_sees_sharing():
    def build(shared):
        gb = Builder()
        x = gb.input("x", (3,))
        a = gb.op("test.neg", x)
        b = a if shared else gb.op("test.neg", x)
        gb.output(gb.op("test.add", a, b))
        gb2 = gb.finish()
        return gb2

    assert structural_equal(build(True), build(True))
    # same op count is needed too: the unshared graph has one more node
    assert not structural_equal(build(True), build(False))


def test_structural_equal_sees_wiring_with_equal_node_counts():
    def build(swap):
        gb = Builder()
        x = gb.input("x", (3,))
        y = gb.input("y", (3,))
        a, b = (y, x) if swap else (x, y)
        gb.output(gb.op("test.add", a, b, alpha=2.0))
        return gb.finish()

    assert structural_equal(build(False), build(False))
    assert not structural_equal(build(False), build(True))
