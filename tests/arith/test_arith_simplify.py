"""The expression simplifier, rule by rule, including what must not simplify."""
import math

import numpy as np
import pytest

from tessera import ir
from tessera.arith import simplify
from tessera.ir import (Add, And, Broadcast, Cast, Div, FloatImm, FloorDiv, FloorMod, IntImm, Let, Mul,
                        Not, Or, Ramp, Range, Select, SizeVar, Sub, Var, structural_equal)

i, j, k, x, y = (Var(n) for n in "ijkxy")
f = Var("f", "float32")
R8 = {i: range(0, 8), j: range(0, 8)}


def c(v, dtype="int32"):
    return ir.const(v, dtype)


def same(a, b):
    return structural_equal(a, b)


def check(expr, expected, var_ranges=None):
    out = simplify(expr, var_ranges)
    assert out.dtype == expr.dtype
    assert same(out, expected), f"{expr.script()} -> {out.script()}, expected {expected.script()}"
    return out


# ---------------------------------------------------------------------------------------------
# split / fuse index arithmetic
# ---------------------------------------------------------------------------------------------
def test_floordiv_and_floormod_of_a_split_index():
    check((i * 8 + j) // 8, i, R8)
    check((i * 8 + j) % 8, j, R8)
    check((j + i * 8) // 8, i, R8)
    check((i * 16 + j * 2 + 1) // 2, i * 8 + j, R8)
    check((i * 16 + j * 2 + 1) % 2, c(1), R8)


def test_floordiv_splits_off_multiples_and_keeps_the_rest():
    # j is unbounded: i comes out, j // 8 stays
    check((i * 8 + j) // 8, i + j // 8, {i: range(0, 8)})
    check((i * 8 + j) % 8, j % 8, {i: range(0, 8)})
    check((x * 8 + 3) // 8, x)
    check((x * 8 + 3) % 8, c(3))


def test_floordiv_does_not_simplify_when_the_remainder_can_leave_the_block():
    out = simplify((i * 8 + j) // 8, {i: range(0, 8), j: range(0, 9)})  # j may reach 8
    assert not same(out, i)
    assert same(out, i + j // 8)
    out = simplify((i * 8 + j) % 8, {i: range(0, 8), j: range(0, 9)})
    assert same(out, j % 8)


def test_floordiv_of_negative_ranges_uses_floor_semantics():
    # j in [-1, 7): (i*8 + j) // 8 is i - 1 when j == -1, so it must not become i
    out = simplify((i * 8 + j) // 8, {i: range(0, 8), j: range(-1, 7)})
    assert same(out, i + j // 8)
    # j in [-8, -1]: the remainder lies in the block [-8, 0): result i - 1
    check((i * 8 + j) // 8, i - 1, {i: range(0, 8), j: range(-8, 0)})
    check((i * 8 + j) % 8, j + 8, {i: range(0, 8), j: range(-8, 0)})
    # a negative coefficient: (0 - j) // 8 for j in [1, 8] is -1 (floor), not 0 (truncation)
    check((0 - j) // 8, c(-1), {j: range(1, 9)})
    check((0 - j) % 8, 8 - j, {j: range(1, 9)})


def test_fuse_followed_by_split_gives_the_fused_variable_back():
    check((x // 8) * 8 + x % 8, x)
    check(x % 8 + (x // 8) * 8, x)
    check((x // 8) * 16 + (x % 8) * 2, x * 2)
    check((x // 32) * 32 + ((x % 32) // 8) * 8 + x % 8, x)
    check(x - (x // 8) * 8, x % 8)
    check(((i * 8 + j) // 8) * 8 + (i * 8 + j) % 8, i * 8 + j)


def test_fuse_split_needs_matching_coefficients():
    out = simplify((x // 8) * 4 + x % 8)
    assert not same(out, x)
    out = simplify((x // 8) * 8 + x % 4)  # 8 and 4 do not chain
    assert not same(out, x)


def test_nested_divisions():
    check((i * 4 + j) // 4 // 2, i // 2, {i: range(0, 16), j: range(0, 4)})
    check(x // 8 // 2, x // 16)
    check(x % 16 // 4 % 2, x % 8 // 4)
    check(x % 8 // 8, c(0))
    check(x % 4 % 8, x % 4)
    check(x % 8 % 4, x % 4)


def test_trivial_divisions():
    check(x // 1, x)
    check(x % 1, c(0))
    check((x * 4) % 2, c(0))
    check((x * 4) // 2, x * 2)
    check((x * 4) // 8, x // 2)
    check((x * 2) % 8, (x % 4) * 2)
    check(c(0) // x, c(0))
    check(c(0) % x, c(0))
    check(FloorDiv(c(7), c(-2)), c(-4))
    check(FloorMod(c(7), c(-2)), c(-1))


def test_division_by_a_symbolic_or_zero_divisor_is_kept():
    out = check(x // y, x // y)
    assert type(out) is FloorDiv
    out = simplify(FloorDiv(x, c(0)))
    assert type(out) is FloorDiv  # undefined: left for the program to trip over


def test_truncating_division():
    check(ir.truncdiv(i * 8 + j, 8), i, R8)
    check(ir.truncmod(i * 8 + j, 8), j, R8)
    check(ir.truncdiv(x, 1), x)
    check(ir.truncmod(x, 1), c(0))
    check(Div(c(-7), c(2)), c(-3))
    check(ir.Mod(c(-7), c(2)), c(-1))
    # the dividend may be negative: trunc differs from floor, nothing to do
    out = simplify(ir.truncdiv(i * 8 + j, 8), {i: range(-2, 8), j: range(0, 8)})
    assert type(out) is Div


# ---------------------------------------------------------------------------------------------
# like terms, order, identities
# ---------------------------------------------------------------------------------------------
def test_like_terms_are_collected():
    check(i * 4 + j - i * 4, j)
    check(i + i, i * 2)
    check(x - x, c(0))
    check((x + 1) * 3 - x * 3, c(3))
    check((x + y) * 2 - y, x * 2 + y)
    check(x * y - y * x, c(0))  # products of non-constants are commutative atoms


def test_output_order_is_natural_and_deterministic():
    out = simplify(j + i * 8)
    assert same(out, i * 8 + j)
    assert out.script() == simplify(i * 8 + j).script()
    assert same(simplify(k + j * 8 + i * 64), i * 64 + j * 8 + k)
    assert same(simplify(x - 1 + 2), x + 1)
    assert same(simplify(1 - x + 9), 10 - x)
    assert same(simplify(x - y), x - y)
    # no 1*, +0 or 0+ in the result
    assert same(simplify(x * 1 + 0 + y * 1), x + y)


def test_integer_identities():
    check(x + 0, x)
    check(0 + x, x)
    check(x * 1, x)
    check(x * 0, c(0))
    check(0 * x, c(0))
    check(x - 0, x)


def test_unsigned_identities_and_constants():
    u = Var("u", "uint32")
    check(u + IntImm("uint32", 0), u)
    check(u * IntImm("uint32", 1), u)
    check(u - u, IntImm("uint32", 0))
    check(Add(IntImm("uint32", 3), IntImm("uint32", 4)), IntImm("uint32", 7))
    # 3 - 4 wraps in uint32: not folded into a negative constant
    out = simplify(Sub(IntImm("uint32", 3), IntImm("uint32", 4)))
    assert type(out) is Sub


def test_dtypes_are_kept_exactly():
    X = Var("X", "int64")
    out = check(X * 2 + X - X * 3, IntImm("int64", 0))
    out = check((X // 8) * 8 + X % 8, X)
    assert out.dtype == "int64"
    out = simplify(X * 2 + 1)
    assert out.dtype == "int64" and all(n.dtype == "int64" for n in _int_nodes(out))
    s = Var("s", "int16")
    out = simplify(s + s)
    assert out.dtype == "int16"
    out = simplify(Cast("int64", x) * 2 + Cast("int64", x))
    assert same(out, Cast("int64", x) * IntImm("int64", 3)) and out.dtype == "int64"


def _int_nodes(e):
    found = []
    ir.post_order_visit(e, lambda n: found.append(n) if isinstance(n, ir.PrimExpr) else None)
    return found


def test_constant_that_does_not_fit_the_dtype_is_not_folded():
    s = Var("s", "int8")
    out = simplify(s * 100 + s * 100)  # 200 does not fit int8: keep the expression as written
    assert out.dtype == "int8"
    assert not any(isinstance(n, IntImm) and n.value == 200 for n in _int_nodes(out))


# ---------------------------------------------------------------------------------------------
# comparisons, min/max, select, logic
# ---------------------------------------------------------------------------------------------
def test_comparisons_decided_by_bounds():
    ranges = {i: range(0, 8)}
    assert simplify(i < 10, ranges).value == 1
    assert simplify(i < 8, ranges).value == 1
    assert simplify(i >= 8, ranges).value == 0
    assert simplify(i == 9, ranges).value == 0
    assert simplify(i != -1, ranges).value == 1
    out = simplify(i < 7, ranges)
    assert not isinstance(out, IntImm)


def test_comparisons_decided_by_canonical_difference():
    assert simplify(x * 2 + 1 < x * 2 + 3).value == 1
    assert simplify(x + y <= y + x).value == 1
    assert simplify(x * 8 + y == x * 8 + y + 1).value == 0
    out = simplify(x < y)
    assert same(out, x < y)


def test_undecided_comparisons_are_normalized():
    assert same(simplify(i + j < i + 4), j < 4)
    assert same(simplify(x + 1 < 5), x < 4)
    assert same(simplify(x + 1 < y + 3), x < y + 2)
    assert same(simplify(8 - x < 3), x > 5)


def test_min_max_with_provable_order():
    check(ir.min_expr(i * 8 + j, 64), i * 8 + j, R8)
    check(ir.max_expr(i * 8 + j, 64), c(64), R8)
    check(ir.min_expr(x, x + 1), x)
    check(ir.max_expr(x, x + 1), x + 1)
    check(ir.min_expr(x, x), x)
    check(ir.min_expr(ir.min_expr(x, 8), 4), ir.min_expr(x, 4))
    out = simplify(ir.min_expr(x, y))
    assert same(out, ir.min_expr(x, y))


def test_select():
    check(Select(i < 8, x, y), x, {i: range(0, 8)})
    check(Select(i >= 8, x, y), y, {i: range(0, 8)})
    check(Select(x < y, x + 1, 1 + x), x + 1)
    out = simplify(Select(x < y, x, y))
    assert type(out) is Select


def test_logic_with_constants():
    ranges = {i: range(0, 8)}
    check(And(i < 8, x < y), x < y, ranges)
    check(And(x < y, i >= 8), ir.const(False), ranges)
    check(Or(i < 8, x < y), ir.const(True), ranges)
    check(Or(x < y, i >= 8), x < y, ranges)
    check(Not(i < 8), ir.const(False), ranges)
    check(Not(Not(x < y)), x < y)
    check(Not(x < y), x >= y)


def test_not_of_float_comparison_is_not_flipped():
    # not (f < 1) is not f >= 1 when f is NaN
    out = simplify(Not(f < 1.0))
    assert type(out) is Not
    check(Not(f == 1.0), f != 1.0)


# ---------------------------------------------------------------------------------------------
# floats: constants only
# ---------------------------------------------------------------------------------------------
def test_float_constants_fold_in_the_dtype_precision():
    out = simplify(Add(FloatImm("float32", 0.1), FloatImm("float32", 0.2)))
    assert out.dtype == "float32"
    assert out.value == float(np.float32(0.1) + np.float32(0.2))
    out = simplify(Add(FloatImm("float16", 1000.0), FloatImm("float16", 0.1)))
    assert out.dtype == "float16" and out.value == float(np.float16(1000.0) + np.float16(0.1))
    out = simplify(Mul(FloatImm("bfloat16", 3.0), FloatImm("bfloat16", 1.01)))
    assert out.dtype == "bfloat16"
    import ml_dtypes
    assert out.value == float(ml_dtypes.bfloat16(3.0) * ml_dtypes.bfloat16(1.01))
    out = simplify(Div(FloatImm("float32", 1.0), FloatImm("float32", 0.0)))
    assert out.value == math.inf


def test_float_algebra_is_left_alone():
    assert type(simplify(f * 0.0)) is Mul  # NaN * 0 is NaN
    assert type(simplify(f - f)) is Sub  # inf - inf is NaN
    assert type(simplify(f + 0.0)) is Add  # -0.0 + 0.0 is +0.0
    g = Var("g", "float32")
    out = simplify((f + g) + g)
    assert same(out, (f + g) + g)  # no reassociation
    check(f * 1.0, f)
    check(f - 0.0, f)
    check(Div(f, FloatImm("float32", 1.0)), f)


def test_casts():
    check(Cast("int64", c(5)), IntImm("int64", 5))
    check(Cast("float32", c(5)), FloatImm("float32", 5.0))
    check(Cast("int32", Cast("int64", x)), x)
    check(Cast("int32", x), x)
    # narrowing then widening is not the identity
    out = simplify(Cast("int32", Cast("int8", x)))
    assert type(out) is Cast
    out = simplify(Cast("float32", FloatImm("float64", 0.1)))
    assert out.value == float(np.float32(0.1))


def test_let_with_constant_value_is_substituted():
    check(Let(y, c(3), y * 2 + x), x + 6)
    out = simplify(Let(y, x + 1, y * 2))
    assert type(out) is Let
    # the let's variable gets the bound of its value
    check(Let(y, i % 4, ir.min_expr(y, 10)), i % 4, {i: range(0, 100)})


# ---------------------------------------------------------------------------------------------
# vectors
# ---------------------------------------------------------------------------------------------
def bc(v, lanes):
    return Broadcast(ir.convert(v), lanes)


def test_ramp_and_broadcast_arithmetic():
    check(Ramp(i * 8, 1, 8) + bc(j, 8), Ramp(i * 8 + j, 1, 8))
    check(bc(j, 8) + Ramp(i * 8, 1, 8), Ramp(i * 8 + j, 1, 8))
    check(Ramp(x, 2, 4) - bc(x, 4), Ramp(c(0), 2, 4))
    check(Ramp(x, 1, 4) * bc(3, 4), Ramp(x * 3, 3, 4))
    check(bc(x, 4) + bc(y, 4), bc(x + y, 4))
    check(bc(x, 4) - bc(x, 4), bc(0, 4))
    check(Ramp(x, 0, 4), bc(x, 4))
    check(Ramp(x, 2, 4) - Ramp(x, 1, 4), Ramp(c(0), 1, 4))


def test_ramp_division_within_one_block():
    check(Ramp(i * 8, 1, 8) // bc(8, 8), bc(i, 8))
    check(Ramp(i * 8, 1, 8) % bc(8, 8), Ramp(c(0), 1, 8))
    check(Ramp(i * 16 + 4, 1, 4) // bc(8, 4), bc(i * 2, 4))
    check(Ramp(x, 8, 4) // bc(8, 4), Ramp(x // 8, 1, 4))
    check(Ramp(x, 8, 4) % bc(8, 4), bc(x % 8, 4))


def test_ramp_division_across_blocks_is_kept():
    out = simplify(Ramp(i * 8 + j, 1, 4) // bc(8, 4), R8)  # j may be 5..7: the ramp crosses a block
    assert type(out) is FloorDiv
    out = simplify(Ramp(i * 8 + 4, 1, 8) // bc(8, 8))
    assert type(out) is FloorDiv


def test_vector_comparisons_decided_for_all_lanes():
    out = simplify(Ramp(i * 8, 1, 8) < bc(i * 8 + 8, 8))
    assert same(out, bc(True, 8))
    out = simplify(Ramp(i * 8, 1, 8) < bc(i * 8 + 4, 8))
    assert not isinstance(out, Broadcast)
    out = simplify(bc(x, 4) < bc(x + 1, 4))
    assert same(out, bc(True, 4))


# ---------------------------------------------------------------------------------------------
# symbolic ranges, loads, calls
# ---------------------------------------------------------------------------------------------
def test_symbolic_loop_ranges():
    n = SizeVar("n")
    assert simplify(i < n, {i: Range(0, n)}).value == 1
    check(ir.min_expr(i, n - 1), i, {i: Range(0, n)})
    out = simplify(i < n - 1, {i: Range(0, n)})
    assert not isinstance(out, IntImm)


def test_loads_and_calls_are_simplified_inside():
    A = ir.Buffer((64,), "int32", "A")
    out = simplify(A[(i * 8 + j) // 8] + A[(i * 8 + j) // 8], R8)
    assert same(out, A[i] * 2)
    out = simplify(abs(x - x + i), {i: range(0, 8)})
    assert same(out, i)
    out = simplify(ir.call_intrin("float32", "exp", f * 1.0))
    assert same(out, ir.call_intrin("float32", "exp", f))


def test_unchanged_expressions_are_returned_as_they_are():
    e = i * 8 + j
    assert simplify(e) is e
    e2 = ir.min_expr(x, y) + x // y
    assert simplify(e2) is e2


def test_simplify_refuses_bad_ranges():
    from tessera.errors import TesseraError

    with pytest.raises(TesseraError, match="bind"):
        simplify(x, {x: "zero to ten"})
    with pytest.raises(TesseraError, match="uses the variable"):
        simplify(x, {x: x + 1})
