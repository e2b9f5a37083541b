"""Interval analysis (const_int_bound) rule by rule, checked against brute force where it can be."""
import itertools
import math

import pytest

from tessera import ir
from tessera.arith import INF, NEG_INF, const_int_bound
from tessera.arith.bound import floordiv_bound, floormod_bound, truncdiv_bound, truncmod_bound
from tessera.errors import TesseraError
from tessera.ir import Cast, Let, Select, SizeVar, Var

x, y = Var("x"), Var("y")


def test_leaves():
    assert const_int_bound(ir.const(5)) == (5, 5)
    assert const_int_bound(x) == (NEG_INF, INF)
    assert const_int_bound(x, {x: (0, 7)}) == (0, 7)
    assert const_int_bound(x, {x: (0, None)}) == (0, INF)
    assert const_int_bound(SizeVar("n")) == (0, INF)
    assert const_int_bound(Var("u", "uint8")) == (0, 255)
    assert const_int_bound(Var("b", "bool")) == (0, 1)
    assert NEG_INF == -math.inf and INF == math.inf


def test_arithmetic():
    vb = {x: (-3, 5), y: (2, 4)}
    assert const_int_bound(x + y, vb) == (-1, 9)
    assert const_int_bound(x - y, vb) == (-7, 3)
    assert const_int_bound(x * y, vb) == (-12, 20)
    assert const_int_bound(x * 0, {}) == (0, 0)  # 0 * unbounded is exactly 0
    assert const_int_bound(x * -2, vb) == (-10, 6)
    assert const_int_bound(ir.min_expr(x, y), vb) == (-3, 4)
    assert const_int_bound(ir.max_expr(x, y), vb) == (2, 5)
    assert const_int_bound(abs(x), vb) == (0, 5)
    assert const_int_bound(Select(x < y, x, y + 10), vb) == (-3, 14)


def test_division_floor_versus_truncation():
    vb = {x: (-9, 20)}
    assert const_int_bound(x // 8, vb) == (-2, 2)
    assert const_int_bound(x % 8, vb) == (0, 7)
    assert const_int_bound(ir.truncdiv(x, 8), vb) == (-1, 2)
    assert const_int_bound(ir.truncmod(x, 8), vb) == (-7, 7)
    assert const_int_bound(x % 8, {x: (3, 5)}) == (3, 5)
    assert const_int_bound(x % 8, {x: (9, 12)}) == (1, 4)
    assert const_int_bound(x // 8, {x: (0, None)}) == (0, INF)
    assert const_int_bound(x % y, {x: (0, None), y: (1, 4)}) == (0, 3)
    # a divisor that may be zero is assumed nonzero (division by zero is undefined)
    assert const_int_bound(x // y, {x: (0, 10), y: (0, 2)}) == (0, 10)


@pytest.mark.parametrize("fn,op", [
    (floordiv_bound, lambda a, b: a // b),
    (floormod_bound, lambda a, b: a % b),
    (truncdiv_bound, lambda a, b: int(a / b)),
    (truncmod_bound, lambda a, b: a - int(a / b) * b),
])
def test_division_bounds_contain_every_value(fn, op):
    ranges = [(-7, -3), (-5, 4), (0, 9), (3, 11), (-1, 0), (0, 0), (2, 2), (-3, -3)]
    for (al, ah), (bl, bh) in itertools.product(ranges, ranges):
        values = [op(a, b) for a in range(al, ah + 1) for b in range(bl, bh + 1) if b != 0]
        if not values:
            continue
        lo, hi = fn((al, ah), (bl, bh))
        assert lo <= min(values) and max(values) <= hi, (fn.__name__, (al, ah), (bl, bh), (lo, hi))


def test_division_bounds_with_unbounded_operands():
    assert floordiv_bound((-5, -1), (1, INF)) == (-5, -1)
    assert floordiv_bound((0, INF), (2, 2)) == (0, INF)
    assert floordiv_bound((NEG_INF, 3), (2, 2)) == (NEG_INF, 1)
    assert floormod_bound((NEG_INF, INF), (1, INF)) == (0, INF)
    assert truncdiv_bound((NEG_INF, INF), (3, 3)) == (NEG_INF, INF)


def test_casts_and_lets():
    assert const_int_bound(Cast("int64", x), {x: (-2, 3)}) == (-2, 3)
    assert const_int_bound(Cast("int8", x), {x: (0, 1000)}) == (-128, 127)
    assert const_int_bound(Cast("int32", Var("f", "float32"))) == (-(2 ** 31), 2 ** 31 - 1)
    assert const_int_bound(Cast("int32", x < y)) == (0, 1)
    assert const_int_bound(Let(y, x + 1, y * 2), {x: (0, 3)}) == (2, 8)


def test_vectors_are_bounded_over_all_lanes():
    r = ir.Ramp(x, 2, 4)
    assert const_int_bound(r, {x: (0, 1)}) == (0, 7)
    assert const_int_bound(ir.Broadcast(x, 4), {x: (1, 2)}) == (1, 2)


def test_bad_var_bounds_are_refused():
    with pytest.raises(TesseraError, match="inclusive"):
        const_int_bound(x, {x: (0, 1, 2)})
    with pytest.raises(TesseraError, match="Vars"):
        const_int_bound(x, {"x": (0, 1)})
