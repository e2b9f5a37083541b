"""The Analyzer: bindings in their forms, scopes, constraints, proofs."""
import pytest

from tessera import ir
from tessera.arith import Analyzer, INF, can_prove, can_prove_equal
from tessera.errors import DTypeError, TesseraError
from tessera.ir import IntImm, Range, SizeVar, Var, structural_equal

i, j, x, y = Var("i"), Var("j"), Var("x"), Var("y")


def test_bind_forms():
    ana = Analyzer()
    ana.bind(i, Range(0, 8))
    assert ana.const_int_bound(i) == (0, 7)
    ana.bind(j, range(2, 5))
    assert ana.const_int_bound(j) == (2, 4)
    ana.bind(x, (-3, None))
    assert ana.const_int_bound(x) == (-3, INF)
    ana.bind(y, i * 2 + 1)  # an expression: substituted
    assert structural_equal(ana.simplify(y - i * 2), IntImm("int32", 1))
    assert ana.const_int_bound(y) == (1, 15)


def test_bind_with_symbolic_range():
    n = SizeVar("n")
    ana = Analyzer()
    ana.bind(n, Range(1, 100))
    ana.bind(i, Range.from_min_extent(0, n))
    assert ana.const_int_bound(i) == (0, 98)
    assert ana.can_prove(i < n)
    assert ana.can_prove(i <= n - 1)
    assert not ana.can_prove(i < n - 1)


def test_bind_refusals():
    ana = Analyzer()
    with pytest.raises(TesseraError, match="needs a Var"):
        ana.bind("i", Range(0, 8))
    with pytest.raises(TesseraError, match="step"):
        ana.bind(i, range(0, 8, 2))
    with pytest.raises(DTypeError, match="int64"):
        ana.bind(i, Var("w", "int64"))
    with pytest.raises(TesseraError, match="uses the variable itself"):
        ana.bind(i, i * 2)


def test_scopes_undo_bindings_and_constraints():
    ana = Analyzer()
    ana.bind(i, Range(0, 100))
    with ana.bind_scope(j, Range(0, 4)):
        assert ana.can_prove(j < 4)
        with ana.constraint_scope(i < 10):
            assert ana.const_int_bound(i) == (0, 9)
            assert ana.can_prove(i * 4 + j < 40)
        assert ana.const_int_bound(i) == (0, 99)
    assert not ana.can_prove(j < 4)
    with ana.scope():
        ana.bind(i, Range(0, 2))
        assert ana.can_prove(i < 2)
    assert not ana.can_prove(i < 2)


def test_constraints():
    ana = Analyzer()
    ana.bind(i, Range(0, 64))
    ana.bind(j, Range(0, 8))
    with ana.constraint_scope(i * 8 + j < 100):  # a fact about a sum
        assert ana.can_prove(i * 8 + j < 100)
        assert ana.can_prove(j + i * 8 <= 99)
        assert not ana.can_prove(i * 8 + j < 99)
    with ana.constraint_scope(ir.all_of(i >= 4, 2 * i < 20)):  # per variable: 4 <= i <= 9
        assert ana.const_int_bound(i) == (4, 9)
    b = Var("b", "bool")
    with ana.constraint_scope(b):
        assert structural_equal(ana.simplify(ir.Select(b, x, y)), x)
    with ana.constraint_scope(ir.Not(b)):
        assert structural_equal(ana.simplify(ir.Select(b, x, y)), y)
    with pytest.raises(DTypeError, match="bool"):
        ana.add_constraint(i + 1)


def test_can_prove_and_equal():
    assert can_prove(i < 8, {i: Range(0, 8)})
    assert not can_prove(i < 7, {i: Range(0, 8)})
    assert can_prove(ir.any_of(i < 0, i < 8), {i: Range(0, 8)})
    assert can_prove_equal((x // 8) * 8 + x % 8, x)
    assert can_prove_equal(x * 2 + y, y + x + x)
    assert not can_prove_equal(x, y)
    f = Var("f", "float32")
    assert can_prove_equal(f * 2.0, f * 2.0)
    assert not can_prove_equal(f * 2.0, f + f)
    ana = Analyzer()
    ana.bind(i, Range(0, 8))
    assert ana.can_prove_greater_equal(i, 0) and not ana.can_prove_greater_equal(i, 1)
    assert ana.can_prove_less(i, 8) and not ana.can_prove_less(i, 7)
    with pytest.raises(DTypeError):
        ana.can_prove(i + 1)


def test_const_int_bound_uses_the_canonical_form():
    ana = Analyzer()
    assert ana.const_int_bound(x - x) == (0, 0)
    ana.bind(x, Range(0, 1000))
    assert ana.const_int_bound((x // 8) * 8 + x % 8 - x) == (0, 0)
