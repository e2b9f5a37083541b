"""Expressions: operator overloading, dtype promotion, constant folding, refusals."""
import math

import numpy as np
import pytest

from tessera.errors import DTypeError, ShapeError, TesseraError
from tessera.ir import (EQ, GE, GT, LE, LT, NE, Add, And, Broadcast, Buffer, BufferLoad, Call, Cast,
                        DataType, FloatImm, FloorDiv, FloorMod, IntImm, IterVar, Mul, Not, Or, Range,
                        Ramp, Select, StringImm, Sub, Var, all_of, any_of, cast, const, convert,
                        max_expr, min_expr, truncdiv, truncmod)

i, j = Var("i"), Var("j")
l64 = Var("l", "int64")
f32, f64 = Var("f", "float32"), Var("d", "float64")
f16, bf16 = Var("h", "float16"), Var("bh", "bfloat16")
b = Var("b", "bool")


def test_operators_build_nodes():
    assert type(i + j) is Add and type(i - j) is Sub and type(i * j) is Mul
    assert type(i // j) is FloorDiv and type(i % j) is FloorMod
    e = 3 - i
    assert type(e) is Sub and e.a.value == 3 and e.b is i
    for op, cls in [(i.__lt__, LT), (i.__le__, LE), (i.__gt__, GT), (i.__ge__, GE), (i.__eq__, EQ),
                    (i.__ne__, NE)]:
        c = op(j)
        assert type(c) is cls and c.dtype == "bool" and c.a is i and c.b is j
    assert type((i < j) & (j < 3)) is And and type((i < j) | b) is Or and type(~b) is Not
    bits = i & j
    assert type(bits) is Call and bits.op == "bitwise_and" and bits.dtype == "int32"
    assert (i << 2).op == "shift_left" and (i ^ j).op == "bitwise_xor" and (~i).op == "bitwise_not"
    assert type(abs(f32)) is Call and abs(f32).op == "abs"


def test_int_division_true_div_and_float_floordiv():
    with pytest.raises(DTypeError, match="ambiguous"):
        i / j
    with pytest.raises(DTypeError):
        4 / i
    q = f32 / 2.0
    assert q.dtype == "float32" and q.b.value == 2.0
    fd = f32 // f32
    assert type(fd) is Call and fd.op == "floor"  # floor(a / b) on floats
    with pytest.raises(DTypeError):
        truncdiv(f32, f32)
    with pytest.raises(DTypeError):
        truncmod(f32, 2.0)


@pytest.mark.parametrize("a, bb, dtype", [
    (i, l64, "int64"), (l64, i, "int64"), (f32, f64, "float64"), (f64, f32, "float64"),
    (i, f32, "float32"), (l64, f16, "float16"), (Var("u", "uint32"), i, "int32"),
    (Var("s", "int8"), Var("u8", "uint16"), "uint16"),
])
def test_promotion_rules(a, bb, dtype):
    e = a + bb
    assert e.dtype == dtype and e.a.dtype == dtype and e.b.dtype == dtype
    narrow = e.a if a.dtype != dtype else e.b
    assert type(narrow) is Cast  # the narrower side is cast, never the wider


def test_constant_promotion_converts_the_constant_not_casts():
    e = const(3) + l64
    assert e.dtype == "int64" and type(e.a) is IntImm and e.a.dtype == "int64"
    e = f32 + const(0.5, "float64")
    assert e.dtype == "float64" and type(e.a) is Cast


@pytest.mark.parametrize("expr, dtype", [
    (lambda: f16 + 1.5, "float16"), (lambda: f16 + 2, "float16"), (lambda: l64 + 3, "int64"),
    (lambda: 3 * l64, "int64"), (lambda: bf16 * 0.5, "bfloat16"), (lambda: f64 - np.float32(1), "float64"),
    (lambda: i + np.int64(5), "int32"),
])
def test_python_scalars_take_the_expression_dtype(expr, dtype):
    e = expr()
    assert e.dtype == dtype
    const_side = e.b if isinstance(e.b, (IntImm, FloatImm)) else e.a
    assert const_side.dtype == dtype


def test_float_literal_next_to_int_expression():
    assert (i * 2.0).dtype == "int32"  # an integral float literal stays an integer
    e = i + 1.5
    assert e.dtype == "float32" and type(e.a) is Cast


def test_vector_lanes_broadcast():
    v = Var("v", "float32x8")
    e = v + 1.0
    assert e.dtype == "float32x8" and type(e.b) is Broadcast and e.b.lanes == 8
    assert (v * f32).dtype == "float32x8"
    with pytest.raises(DTypeError, match="lanes"):
        v + Var("w", "float32x4")
    r = Ramp(i, 1, 4)
    assert r.dtype == "int32x4" and (r < 3).dtype == "boolx4"


def test_invalid_mixes_are_refused():
    with pytest.raises(DTypeError, match="float16 and bfloat16"):
        f16 + bf16
    with pytest.raises(DTypeError, match="bool"):
        b + i
    with pytest.raises(DTypeError, match="bool"):
        b + b
    with pytest.raises(DTypeError, match="bool"):
        const(True) + const(True)
    with pytest.raises(DTypeError, match="bool"):
        b * 2
    with pytest.raises(DTypeError):
        -b
    with pytest.raises(DTypeError, match="bool condition"):
        all_of(i)
    with pytest.raises(DTypeError, match="bool condition"):
        Select(i, f32, f32)
    with pytest.raises(DTypeError):
        f32 & f32
    with pytest.raises(DTypeError, match="integer operands"):
        f32 << 1
    with pytest.raises(DTypeError, match="integer operands"):
        1 >> f32
    assert (1 << i).op == "shift_left" and (i >> 1).op == "shift_right"


def test_bool_logic_and_min_max_allowed():
    assert all_of(b, i < 3, j > 1).dtype == "bool"
    assert any_of().value == 0 and all_of().value == 1
    assert min_expr(b, b).dtype == "bool"


def test_bool_of_expression_is_an_error():
    with pytest.raises(TesseraError, match="Python bool"):
        bool(i < j)
    with pytest.raises(TesseraError):
        if i + 1:
            pass
    with pytest.raises(TesseraError):
        _ = (i < 2) and (j < 3)
    # identity tests on variables keep working (as in TVM)
    assert bool(i == i) and not bool(i == j) and bool(i != j)
    assert i in [j, i] and Var("i") not in [i]
    # a constant is a Python value
    assert bool(const(3)) and not bool(const(0))


def test_int_and_float_conversions():
    assert int(const(7)) == 7 and float(const(2.5)) == 2.5 and [10, 20][const(1)] == 20
    with pytest.raises(TesseraError, match="not a constant integer"):
        int(i)
    with pytest.raises(TesseraError, match="not a constant"):
        float(i + 1)


@pytest.mark.parametrize("make, value", [
    (lambda: const(2) + const(3), 5), (lambda: const(2) - 5, -3), (lambda: const(6) * const(7), 42),
    (lambda: const(7) // 2, 3), (lambda: const(-7) // 2, -4), (lambda: const(-7) % 2, 1),
    (lambda: const(7) % -2, -1), (lambda: truncdiv(-7, 2), -3), (lambda: truncmod(-7, 2), -1),
    (lambda: truncdiv(7, -2), -3), (lambda: min_expr(3, 9), 3), (lambda: max_expr(3, 9), 9),
    (lambda: -const(4), -4), (lambda: const(2.5) * 2, 5.0), (lambda: const(1.0) / 4.0, 0.25),
    (lambda: truncdiv(const(-(2 ** 62), "int64"), 3), -(2 ** 62) // 3 + 1),
])
def test_constant_folding(make, value):
    e = make()
    assert isinstance(e, (IntImm, FloatImm)) and e.value == value


def test_folding_keeps_dtype_and_refuses_overflow_and_zero_division():
    e = const(3, "int64") + 4
    assert type(e) is IntImm and e.dtype == "int64"
    big = const(2 ** 31 - 1) + 1
    assert type(big) is Add  # would overflow int32: not folded into a wrong constant
    assert type(const(5) // 0) is FloorDiv and type(truncmod(5, 0)).__name__ == "Mod"
    assert type(const(-2 ** 31) * -1) is Mul


def test_int_imm_range_checking():
    assert IntImm("int8", -128).value == -128 and IntImm("uint8", 255).value == 255
    for dtype, v in [("int8", 128), ("int8", -129), ("uint8", -1), ("uint8", 256), ("int32", 2 ** 31),
                     ("int64", 2 ** 63)]:
        with pytest.raises(DTypeError, match="does not fit"):
            IntImm(dtype, v)
    with pytest.raises(DTypeError, match="does not fit"):
        i + 2 ** 40
    assert const(2 ** 40).dtype == "int64"
    assert IntImm("bool", 5).value == 1
    with pytest.raises(DTypeError):
        IntImm("float32", 1)
    with pytest.raises(DTypeError):
        FloatImm("int32", 1.0)
    with pytest.raises(DTypeError, match="not an integer"):
        const(1.5, "int32")


@pytest.mark.parametrize("value, dtype, expected", [
    (3.7, "int32", 3), (-3.7, "int32", -3), (300, "int8", 44), (-1, "uint8", 255), (255, "int8", -1),
    (2, "bool", 1), (0.0, "bool", 0), (3, "float32", 3.0), (True, "int32", 1),
])
def test_cast_of_constants_folds(value, dtype, expected):
    c = cast(const(value), dtype)
    assert isinstance(c, (IntImm, FloatImm)) and c.dtype == dtype and c.value == expected


def test_cast_rounds_to_the_target_float_type():
    c = cast(const(1.1, "float64"), "float16")
    assert c.dtype == "float16" and c.value == float(np.float16(1.1)) and c.value != 1.1
    c = cast(const(1.1, "float64"), "bfloat16")
    assert c.value != 1.1 and abs(c.value - 1.1) < 1e-2
    nonfinite = cast(const(math.inf), "int32")
    assert type(nonfinite) is Cast  # no Python int for inf: left to the target
    assert cast(i, "int32") is i
    assert cast(f32, "float32x4").dtype == "float32x4"
    assert i.astype("int64").dtype == "int64"


def test_constants_and_convert():
    assert const(1).dtype == "int32" and const(1.0).dtype == "float32" and const(True).dtype == "bool"
    assert const(2, "float32x4").dtype == "float32x4"
    assert convert(np.float64(0.5)).dtype == "float32" and convert("s").dtype == "handle"
    assert type(convert("s")) is StringImm
    iv = IterVar(Range(0, 8), "k", "reduce")
    assert convert(iv) is iv.var and (iv + 1).a is iv.var
    with pytest.raises(TesseraError, match="cannot use"):
        convert([1, 2])
    with pytest.raises(DTypeError):
        const(1, "handle")
    assert DataType("float32x8").lanes == 8 and DataType(np.float16) == "float16"
    assert DataType("handle") == "handle" and DataType("handle64") == "handle"
    assert DataType("handle").bits == 64 and DataType("bool").bits == 1


def test_buffer_load_checks():
    A = Buffer((4, 4), "float32", "A")
    assert A[i, j].dtype == "float32" and A[Ramp(0, 1, 4), j].dtype == "float32x4"
    with pytest.raises(ShapeError, match="2 dimensions"):
        A[i]
    with pytest.raises(DTypeError, match="index of 'A'"):
        BufferLoad(A, (f32, i))
