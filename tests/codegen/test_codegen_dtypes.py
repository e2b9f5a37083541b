"""Element types: float16/bfloat16 storage and per-op rounding, narrow integers, bool, casts, constants."""
import ml_dtypes
import numpy as np
import pytest

from tessera.ir import Cast, FloatImm, IntImm, Select, const, max_expr, min_expr
from tessera.ir.expr import Call

BF16 = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(0)


def _bits(x):
    return x.view(np.uint16 if x.itemsize == 2 else np.uint32 if x.itemsize == 4 else np.uint64)


def _same(a, b):
    """Bitwise equal, any NaN equal to any NaN."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype
    nan = np.isnan(a.astype(np.float32)) if a.dtype.kind == "f" or a.dtype == BF16 else np.zeros(a.shape, bool)
    if a.dtype.kind == "f" or a.dtype == BF16:
        np.testing.assert_array_equal(nan, np.isnan(b.astype(np.float32)))
    np.testing.assert_array_equal(_bits(a)[~nan] if a.itemsize > 1 else a[~nan],
                                  _bits(b)[~nan] if b.itemsize > 1 else b[~nan])


def _halves(dtype, n=64):
    x = (RNG.standard_normal(n) * 4).astype(np.float32).astype(dtype)
    x[:6] = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-3], np.float32).astype(dtype)
    return x


@pytest.mark.parametrize("lanes", [1, 8])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_arithmetic_rounds_each_op(elementwise, dtype, lanes):
    npdt = np.dtype(np.float16) if dtype == "float16" else BF16
    run = elementwise(lambda a, b: a * b + a - b / FloatImm(dtype, 3.0), [dtype, dtype], dtype, lanes=lanes)
    a, b = _halves(npdt), _halves(npdt)[::-1].copy()
    with np.errstate(all="ignore"):
        want = a * b + a - b / npdt.type(3.0)
    _same(run(a, b), want)


@pytest.mark.parametrize("lanes", [1, 8])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_math_and_minmax(elementwise, dtype, lanes):
    npdt = np.dtype(np.float16) if dtype == "float16" else BF16
    run = elementwise(lambda a, b: Call(a.dtype, "exp", [a]) + Call(a.dtype, "sqrt", [b])
                      + max_expr(a, b) - min_expr(a, b), [dtype, dtype], dtype, lanes=lanes)
    a = (RNG.standard_normal(64)).astype(np.float32).astype(npdt)
    b = np.abs(RNG.standard_normal(64) * 10).astype(np.float32).astype(npdt)
    a[3], b[5] = np.nan, np.nan
    with np.errstate(invalid="ignore"):
        want = (np.exp(a.astype(np.float32)).astype(npdt) + np.sqrt(b.astype(np.float32)).astype(npdt)
                + np.maximum(a, b) - np.minimum(a, b))
    _same(run(a, b), want)


@pytest.mark.parametrize("lanes", [1, 8])
def test_casts_to_and_from_halves(elementwise, lanes):
    x = (RNG.standard_normal(64) * 1000).astype(np.float32)
    x[:8] = [np.nan, -np.nan, np.inf, -np.inf, 65519.0, 65520.0, 1.0 + 2 ** -11, 1.0 + 2 ** -8]
    run = elementwise(lambda a: Cast("float16" if lanes == 1 else "float16x8", a), ["float32"], "float16", lanes=lanes)
    with np.errstate(all="ignore"):
        _same(run(x), x.astype(np.float16))
    run = elementwise(lambda a: Cast("bfloat16" if lanes == 1 else "bfloat16x8", a), ["float32"], "bfloat16", lanes=lanes)
    _same(run(x), x.astype(BF16))
    h = x.astype(BF16)
    run = elementwise(lambda a: Cast("float32" if lanes == 1 else "float32x8", a), ["bfloat16"], "float32", lanes=lanes)
    _same(run(h), h.astype(np.float32))
    # bfloat16 -> float16 (one rounding of an exact value) and back
    run = elementwise(lambda a: Cast("float16" if lanes == 1 else "float16x8", a), ["bfloat16"], "float16", lanes=lanes)
    with np.errstate(all="ignore"):
        _same(run(h), h.astype(np.float16))


@pytest.mark.parametrize("lanes", [1, 8])
def test_ints_to_halves_and_back(elementwise, lanes):
    v = np.array([16842753, -16842753, 65519, 65520, 3, -7, 2 ** 30 + 1, 0] * 8, np.int32)
    t = (lambda s: s if lanes == 1 else f"{s}x{lanes}")
    run = elementwise(lambda a: Cast(t("bfloat16"), a), ["int32"], "bfloat16", lanes=lanes)
    _same(run(v), v.astype(BF16))
    run = elementwise(lambda a: Cast(t("float16"), a), ["int32"], "float16", lanes=lanes)
    with np.errstate(all="ignore"):
        _same(run(v), v.astype(np.float16))
    f = np.array([1.5, -2.5, 100.75, -0.5, 7.0, 0.0, 3.25, -9.0] * 8, np.float16)
    run = elementwise(lambda a: Cast(t("int32"), a), ["float16"], "int32", lanes=lanes)
    _same(run(f), f.astype(np.int32))


@pytest.mark.parametrize("lanes", [1, 16])
def test_int8_wraps_like_numpy(elementwise, lanes):
    a = RNG.integers(-128, 128, 64).astype(np.int8)
    b = RNG.integers(-128, 128, 64).astype(np.int8)
    b[b == 0] = 3
    run = elementwise(lambda x, y: (x + y) // const(3, "int8") + (x * y) % y, ["int8", "int8"], "int8", lanes=lanes)
    with np.errstate(all="ignore"):
        want = (a + b) // np.int8(3) + (a * b) % b
    _same(run(a, b), want)


@pytest.mark.parametrize("lanes", [1, 8])
def test_uint_and_int64(elementwise, lanes):
    a = RNG.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(np.uint32)
    b = RNG.integers(1, 2 ** 32, 64, dtype=np.uint64).astype(np.uint32)
    run = elementwise(lambda x, y: x * y - (x // y) + (x % y), ["uint32", "uint32"], "uint32", lanes=lanes)
    _same(run(a, b), a * b - a // b + a % b)
    c = RNG.integers(-2 ** 62, 2 ** 62, 64, dtype=np.int64)
    run = elementwise(lambda x: x // const(1000, "int64") - x % const(7, "int64"), ["int64"], "int64", lanes=lanes // 2 or 1)
    _same(run(c), c // 1000 - c % 7)


@pytest.mark.parametrize("lanes", [1, 8, 16])
def test_bool_loads_stores_and_masks(elementwise, lanes):
    a = RNG.standard_normal(64).astype(np.float32)
    b = RNG.standard_normal(64).astype(np.float32)
    p = RNG.integers(0, 2, 64).astype(bool)
    run = elementwise(lambda x, y, q: ((x < y) & ~q) | (x > const(1.0)), ["float32", "float32", "bool"], "bool",
                      lanes=lanes)
    _same(run(a, b, p), ((a < b) & ~p) | (a > 1))
    # a select driven by a bool buffer, and bool -> float casts
    run = elementwise(lambda x, q: Select(q, x, -x) + Cast(x.dtype, q), ["float32", "bool"], "float32", lanes=lanes)
    _same(run(a, p), np.where(p, a, -a) + p.astype(np.float32))
    # float -> bool, int8 mask meets float32 mask
    i8 = RNG.integers(-3, 3, 64).astype(np.int8)
    run = elementwise(lambda x, k: Cast("bool" if lanes == 1 else f"boolx{lanes}", x) & (k > const(0, "int8")),
                      ["float32", "int8"], "bool", lanes=lanes)
    _same(run(np.round(a), i8), (np.round(a) != 0) & (i8 > 0))


def test_float_constants_exact(elementwise):
    consts = [0.1, 1.0 / 3.0, 16777217.0, 3.4028234663852886e38, 1e-45, -0.0, float("inf"), float("-inf")]
    for dtype, npdt in (("float32", np.float32), ("float64", np.float64), ("float16", np.float16),
                        ("bfloat16", BF16)):
        for c in consts:
            run = elementwise(lambda x: x * FloatImm(dtype, 0.0) + FloatImm(dtype, c), [dtype], dtype, n=8)
            x = np.ones(8, npdt)
            with np.errstate(all="ignore"):
                want = np.ones(8, npdt) * np.zeros(8, npdt) + np.full(8, c, np.float64).astype(npdt)
            _same(run(x), want)
    run = elementwise(lambda x: FloatImm("float32", float("nan")) + x * 0, ["float32"], "float32", n=8)
    assert np.isnan(run(np.ones(8, np.float32))).all()


def test_integer_constant_extremes(elementwise):
    run = elementwise(lambda x: x + IntImm("int64", -(2 ** 63)) - IntImm("int64", -(2 ** 63)), ["int64"], "int64", n=8)
    v = np.arange(8, dtype=np.int64)
    _same(run(v), v)
    run = elementwise(lambda x: Cast("int64", x) - IntImm("int64", -(2 ** 31)), ["int32"], "int64", n=8)
    w = np.arange(8, dtype=np.int32) - 4
    _same(run(w), w.astype(np.int64) + 2 ** 31)
    run = elementwise(lambda x: x + IntImm("uint64", 2 ** 64 - 1), ["uint64"], "uint64", n=8)
    u = np.arange(8, dtype=np.uint64) + 1
    _same(run(u), u - 1)
