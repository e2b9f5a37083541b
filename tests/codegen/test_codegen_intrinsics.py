"""Every intrinsic the C backend knows, scalar and vector, against numpy; integer floor semantics."""
import math

import numpy as np
import pytest

from tessera.codegen import generate
from tessera.errors import TesseraError, UnsupportedOpError
from tessera.ir import (Buffer, BufferStore, Evaluate, For, FloorDiv, FloorMod, IntImm, PrimFunc, Ramp,
                        Var, const, max_expr, min_expr)
from tessera.ir.expr import Call

RNG = np.random.default_rng(1)
_erf = np.vectorize(math.erf)

# op -> (numpy reference, input domain (lo, hi), arity)
UNARY = {
    "exp": (np.exp, (-5, 5)), "exp2": (np.exp2, (-5, 5)), "exp10": (lambda x: np.power(10.0, x), (-3, 3)),
    "expm1": (np.expm1, (-2, 2)), "log": (np.log, (0.01, 50)), "log2": (np.log2, (0.01, 50)),
    "log10": (np.log10, (0.01, 50)), "log1p": (np.log1p, (-0.9, 5)), "sqrt": (np.sqrt, (0, 50)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (0.01, 50)), "cbrt": (np.cbrt, (-20, 20)),
    "sin": (np.sin, (-4, 4)), "cos": (np.cos, (-4, 4)), "tan": (np.tan, (-1.2, 1.2)),
    "asin": (np.arcsin, (-1, 1)), "acos": (np.arccos, (-1, 1)), "atan": (np.arctan, (-9, 9)),
    "sinh": (np.sinh, (-3, 3)), "cosh": (np.cosh, (-3, 3)), "tanh": (np.tanh, (-4, 4)),
    "asinh": (np.arcsinh, (-9, 9)), "acosh": (np.arccosh, (1, 9)), "atanh": (np.arctanh, (-0.9, 0.9)),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), (-9, 9)), "erf": (_erf, (-3, 3)),
    "abs": (np.abs, (-9, 9)), "floor": (np.floor, (-9, 9)), "ceil": (np.ceil, (-9, 9)),
    "round": (np.round, (-9, 9)), "nearbyint": (np.rint, (-9, 9)), "trunc": (np.trunc, (-9, 9)),
    "fast_exp": (np.exp, (-5, 5)), "fast_tanh": (np.tanh, (-4, 4)), "fast_erf": (_erf, (-3, 3)),
}
BINARY = {
    "pow": (np.power, (0.1, 4)), "power": (np.power, (0.1, 4)), "fmod": (np.fmod, (-9, 9)),
    "atan2": (np.arctan2, (-9, 9)), "hypot": (np.hypot, (-9, 9)), "copysign": (np.copysign, (-9, 9)),
}


def _inputs(lo, hi, dtype, n=64):
    x = RNG.uniform(lo, hi, n).astype(dtype)
    if lo <= -2.5 and hi >= 2.5:
        x[:4] = np.array([-2.5, -0.5, 0.5, 2.5]).astype(dtype)  # halfway cases for round
    return x


def _tol(dtype):
    return dict(rtol=4e-6, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dtype,lanes", [("float32", 1), ("float32", 8), ("float64", 1), ("float64", 4)])
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_math(elementwise, op, dtype, lanes):
    ref, (lo, hi) = UNARY[op]
    run = elementwise(lambda x: Call(x.dtype, op, [x]), [dtype], dtype, lanes=lanes)
    x = _inputs(lo, hi, dtype)
    want = ref(x.astype(np.float64)).astype(dtype)
    np.testing.assert_allclose(run(x), want, **_tol(dtype))


@pytest.mark.parametrize("dtype,lanes", [("float32", 1), ("float32", 8), ("float64", 4)])
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_math(elementwise, op, dtype, lanes):
    ref, (lo, hi) = BINARY[op]
    run = elementwise(lambda x, y: Call(x.dtype, op, [x, y]), [dtype, dtype], dtype, lanes=lanes)
    x, y = _inputs(lo, hi, dtype), _inputs(lo, hi, dtype)[::-1].copy()
    np.testing.assert_allclose(run(x, y), ref(x.astype(np.float64), y.astype(np.float64)).astype(dtype),
                               **_tol(dtype))


@pytest.mark.parametrize("lanes", [1, 8])
def test_fma_and_classification(elementwise, lanes):
    run = elementwise(lambda a, b, c: Call(a.dtype, "fma", [a, b, c]), ["float32"] * 3, "float32", lanes=lanes)
    a, b, c = (RNG.standard_normal(64).astype(np.float32) for _ in range(3))
    np.testing.assert_allclose(run(a, b, c), (a.astype(np.float64) * b + c).astype(np.float32), rtol=1e-6)
    x = RNG.standard_normal(64).astype(np.float32)
    x[:6] = [np.nan, np.inf, -np.inf, 0.0, -np.nan, 1e38]
    t = "bool" if lanes == 1 else f"boolx{lanes}"
    for op, ref in (("isnan", np.isnan), ("isinf", np.isinf), ("isfinite", np.isfinite)):
        run = elementwise(lambda v: Call(t, op, [v]), ["float32"], "bool", lanes=lanes)
        np.testing.assert_array_equal(run(x), ref(x))
    run = elementwise(lambda v: Call(t, "isnan", [v]), ["int32"], "bool", lanes=lanes)
    assert not run(np.arange(64, dtype=np.int32)).any()


@pytest.mark.parametrize("lanes", [1, 8])
def test_min_max_propagate_nan_like_numpy(elementwise, lanes):
    a = RNG.standard_normal(64).astype(np.float32)
    b = RNG.standard_normal(64).astype(np.float32)
    a[0], b[1], a[2], b[2] = np.nan, np.nan, np.nan, np.nan
    a[3], b[3], a[4], b[4] = 0.0, -0.0, -0.0, 0.0
    for build_op, ref in ((min_expr, np.minimum), (max_expr, np.maximum)):
        run = elementwise(lambda x, y: build_op(x, y), ["float32", "float32"], "float32", lanes=lanes)
        np.testing.assert_array_equal(run(a, b), ref(a, b))
    run = elementwise(lambda a, b: min_expr(a, b) - max_expr(a, b + const(3, "int16")), ["int16", "int16"],
                      "int16", lanes=lanes)
    p, q = (RNG.integers(-1000, 1000, 64).astype(np.int16) for _ in range(2))
    np.testing.assert_array_equal(run(p, q), np.minimum(p, q) - np.maximum(p, q + np.int16(3)))


@pytest.mark.parametrize("lanes", [1, 8])
@pytest.mark.parametrize("dtype", ["int32", "int64", "int8"])
def test_floordiv_floormod_negative(elementwise, dtype, lanes):
    if dtype == "int64" and lanes == 8:
        lanes = 4
    lim = 100 if dtype == "int8" else 10 ** 6
    a = RNG.integers(-lim, lim, 64).astype(dtype)
    b = RNG.integers(-30, 30, 64).astype(dtype)
    b[b == 0] = 7
    a[:4], b[:4] = [-7, 7, -7, 7], [2, -2, -2, 2]
    run = elementwise(lambda x, y: FloorDiv(x, y) * const(1000, dtype if dtype != "int8" else "int8")
                      if dtype != "int8" else FloorDiv(x, y) + FloorMod(x, y), [dtype, dtype], dtype, lanes=lanes)
    with np.errstate(over="ignore"):
        want = (a // b) * 1000 if dtype != "int8" else a // b + a % b
    np.testing.assert_array_equal(run(a, b), want.astype(dtype))
    run = elementwise(lambda x, y: FloorMod(x, y), [dtype, dtype], dtype, lanes=lanes)
    np.testing.assert_array_equal(run(a, b), a % b)
    # by a positive constant (the helper stays: the dividend may be negative)
    run = elementwise(lambda x: FloorDiv(x, const(4, dtype)) + FloorMod(x, const(4, dtype)), [dtype], dtype,
                      lanes=lanes)
    np.testing.assert_array_equal(run(a), (a // 4 + a % 4).astype(dtype))


def test_floordiv_of_loop_vars_is_plain_c(build, lowered):
    A = Buffer((64,), "int32", "A")
    i = Var("i")
    f = lowered([A], lambda a: For(i, 0, 64, "serial", BufferStore(a, FloorDiv(i * 3 + 1, 4) + FloorMod(i, 8), [i])))
    src = generate(f)
    assert "(i * 3 + 1) / 4 + i % 8" in src and "tsr_floordiv" not in src
    lib = build(src)
    out = np.zeros(64, np.int32)
    lib.run(out)
    idx = np.arange(64)
    np.testing.assert_array_equal(out, (idx * 3 + 1) // 4 + idx % 8)
    # a negative loop start keeps the floor helper
    j = Var("j")
    f = lowered([A], lambda a: For(j, -8, 64, "serial", BufferStore(a, FloorDiv(j, 4), [FloorMod(j, 64)])))
    src = generate(f)
    assert "tsr_floordiv_int32(j, 4)" in src
    build(src).run(out)
    want = np.zeros(64, np.int32)
    for v in range(-8, 56):
        want[v % 64] = v // 4
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("lanes", [1, 8])
def test_bitwise_and_shifts(elementwise, lanes):
    a = RNG.integers(-2 ** 31, 2 ** 31, 64).astype(np.int32)
    b = RNG.integers(0, 31, 64).astype(np.int32)
    run = elementwise(lambda x, y: (x & y) | (x ^ (y << const(3))) + (~x >> y), ["int32", "int32"], "int32", lanes=lanes)
    with np.errstate(over="ignore"):
        want = (a & b) | (a ^ (b << 3)) + (~a >> b)
    np.testing.assert_array_equal(run(a, b), want)
    c = RNG.integers(-128, 128, 64).astype(np.int8)
    run = elementwise(lambda x: (x << const(2, "int8")) >> const(1, "int8"), ["int8"], "int8", lanes=lanes)
    np.testing.assert_array_equal(run(c), ((c << 2).astype(np.int8) >> 1).astype(np.int8))
    u = RNG.integers(0, 256, 64).astype(np.uint8)
    run = elementwise(lambda x: ~x, ["uint8"], "uint8", lanes=lanes)
    np.testing.assert_array_equal(run(u), ~u)


def test_int_abs_popcount_clz(elementwise):
    c = RNG.integers(-128, 128, 64).astype(np.int8)
    c[0] = -128
    run = elementwise(lambda x: Call(x.dtype, "abs", [x]), ["int8"], "int8")
    np.testing.assert_array_equal(run(c), np.abs(c))
    w = RNG.integers(-2 ** 62, 2 ** 62, 64, dtype=np.int64)
    run = elementwise(lambda x: Call(x.dtype, "abs", [x]), ["int64"], "int64", lanes=4)
    np.testing.assert_array_equal(run(w), np.abs(w))
    u = RNG.integers(0, 2 ** 16, 64).astype(np.uint16)
    u[0] = 0
    run = elementwise(lambda x: Call("int32", "popcount", [x]), ["uint16"], "int32")
    np.testing.assert_array_equal(run(u), [bin(int(v)).count("1") for v in u])
    run = elementwise(lambda x: Call("int32x8", "clz", [x]), ["uint16"], "int32", lanes=8)
    np.testing.assert_array_equal(run(u), [16 - int(v).bit_length() for v in u])


def test_if_then_else_evaluates_only_the_taken_branch(build, lowered):
    n = Var("n")
    A, C = Buffer((n,), "float32", "A"), Buffer((16,), "float32", "C")
    i = Var("i")
    f = lowered([A, C], lambda a, c: For(i, 0, 16, "serial", BufferStore(
        c, Call("float32", "if_then_else", [i < n, a[i], const(-1.0)]), [i])))
    src = generate(f)
    assert "(i < n ? A[i] : -1.0f)" in src
    lib = build(src)
    a = np.arange(5, dtype=np.float32)
    c = np.zeros(16, np.float32)
    lib.run(a, c)
    np.testing.assert_array_equal(c, np.r_[a, -np.ones(11, np.float32)])


def test_extern_call_and_unknown_ops(build, lowered, tmp_path):
    A = Buffer((8,), "float32", "A")
    i = Var("i")
    f = lowered([A], lambda a: For(i, 0, 8, "serial", BufferStore(a, Call("float32", "my_scale", [a[i], i]), [i])))
    src = generate(f)
    assert "extern float my_scale(float, int32_t);" in src and "my_scale(A[i], i)" in src
    impl = "#include <stdint.h>\nfloat my_scale(float x, int32_t k) { return x * (float)k; }\n"
    lib = build(src.replace("/* extern functions the program calls */", impl + "/* extern functions the program calls */"))
    a = np.ones(8, np.float32)
    lib.run(a)
    np.testing.assert_array_equal(a, np.arange(8, dtype=np.float32))
    # a local named like the extern does not shadow it
    B = Buffer((8,), "float32", "my_scale")
    f = lowered([B], lambda b: For(i, 0, 8, "serial", BufferStore(b, Call("float32", "my_scale", [b[i], i]), [i])))
    src = generate(f)
    assert "float* restrict my_scale_" in src and "my_scale_[i] = my_scale(my_scale_[i], i);" in src
    # not a C identifier
    f = lowered([A], lambda a: For(i, 0, 8, "serial", BufferStore(a, Call("float32", "tir.weird", [a[i]]), [i])))
    with pytest.raises(UnsupportedOpError, match="tir.weird"):
        generate(f)
    # float math on an integer type
    B = Buffer((8,), "int32", "B")
    f = lowered([B], lambda b: For(i, 0, 8, "serial", BufferStore(b, Call("int32", "exp", [b[i]]), [i])))
    with pytest.raises(TesseraError, match="exp on int32 needs a float dtype"):
        generate(f)
    # an extern call as a statement
    f = lowered([A], lambda a: Evaluate(Call("handle", "my_hook", [a[IntImm("int32", 0)]])))
    assert "extern void my_hook(float);" in generate(f) and "  my_hook(A[0]);" in generate(f)
