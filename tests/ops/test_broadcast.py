"""Broadcasting binary ops of tessera.ops.broadcast against numpy, across dtypes and shapes."""
import numpy as np
import pytest
from op_check import infer, npdt, run_op, run_ops

from tessera.errors import DTypeError, ShapeError
from tessera.graph.ir import TensorType

RNG = np.random.default_rng(11)
FLOATS = ["float32", "float64", "float16", "bfloat16"]
SINTS = ["int8", "int16", "int32", "int64"]
UINTS = ["uint8", "uint16", "uint32", "uint64"]


def _rand(shape, dtype, lo=-5, hi=5):
    d = npdt(dtype)
    if d == np.bool_:
        return RNG.random(shape) > 0.5
    if np.issubdtype(d, np.integer):
        info = np.iinfo(d)
        return RNG.integers(max(lo * 20, info.min), min(hi * 20, info.max), size=shape).astype(d)
    return RNG.uniform(lo, hi, size=shape).astype(np.float32).astype(d)


ARITH = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
         "minimum": np.minimum}
CMP = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
       "greater": np.greater, "greater_equal": np.greater_equal}


@pytest.mark.parametrize("dtype", FLOATS + SINTS + UINTS)
def test_arithmetic_and_comparisons_broadcast_like_numpy(dtype):
    a, b = _rand((3, 1, 5), dtype), _rand((4, 1), dtype)
    b[0, 0] = a[0, 0, 0]  # an equal pair for the comparisons
    names = sorted(ARITH) + sorted(CMP)
    outs = run_ops([a, b], [(n, {}, [0, 1]) for n in names])
    for n, (got,) in zip(names, outs):
        with np.errstate(over="ignore"):
            want = {**ARITH, **CMP}[n](a, b)
        assert got.shape == (3, 4, 5), n
        if npdt(dtype) in (np.float16, npdt("bfloat16")) and n in ARITH:
            np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, err_msg=n)
        else:
            np.testing.assert_array_equal(got, want, err_msg=n)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint32"])
def test_integer_division_family_matches_onnx_and_numpy(dtype):
    info = np.iinfo(dtype)
    a = np.array([v for v in (7, -7, 6, -6, 0, 1, -1, info.min, info.max, 13, -13, 5) if v >= info.min], dtype)
    b = np.array([v for v in (2, 2, -4, -4, 3, 0, 0, -1, 5, -5, 5, 0) if v >= info.min][:len(a)], dtype)
    a = a[:len(b)]
    outs = run_ops([a, b], [(n, {}, [0, 1]) for n in ("divide", "floor_divide", "floor_mod", "mod", "fmod")])
    ai, bi = a.astype(object), b.astype(object)

    def trunc_div(x, y):
        return 0 if y == 0 else (abs(x) // abs(y)) * (1 if (x >= 0) == (y >= 0) else -1)

    def wrap(v):  # to the dtype, modulo 2**bits as C integer arithmetic does
        m = 1 << info.bits
        return np.array([(int(x) - int(info.min)) % m + int(info.min) for x in v], dtype=object)

    div = [trunc_div(x, y) for x, y in zip(ai, bi)]
    fdiv = [0 if y == 0 else x // y for x, y in zip(ai, bi)]
    fmod = [0 if y == 0 else x - trunc_div(x, y) * y for x, y in zip(ai, bi)]
    floor_mod = [0 if y == 0 else x % y for x, y in zip(ai, bi)]
    for name, want, (got,) in zip(("divide", "floor_divide", "floor_mod", "mod", "fmod"),
                                  (div, fdiv, floor_mod, floor_mod, fmod), outs):
        np.testing.assert_array_equal(got, wrap(want).astype(dtype), err_msg=name)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_float_division_family(dtype):
    a = _rand((40,), dtype, -9, 9)
    b = _rand((40,), dtype, 0.5, 4) * np.where(RNG.random(40) > 0.5, 1, -1).astype(dtype)
    outs = run_ops([a, b], [(n, {}, [0, 1]) for n in ("divide", "floor_divide", "floor_mod", "fmod", "power")])
    tol = 1e-3 if dtype == "float16" else 1e-6
    with np.errstate(invalid="ignore"):
        refs = [a / b, np.floor_divide(a, b), np.mod(a, b), np.fmod(a, b), np.power(np.abs(a), b)]
    for k, ((got,), want) in enumerate(zip(outs, refs)):
        if k == 4:
            continue
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    (p,) = run_op("power", np.abs(a), b)
    np.testing.assert_allclose(p.astype(np.float64), refs[4].astype(np.float64), rtol=tol * 4, atol=tol)


def test_power_with_mixed_dtypes_keeps_the_base_dtype():
    x = np.array([1, 2, 3, -2], "int32")
    y = np.array([2.0, 3.0, 0.5, 3.0], "float32")
    (p,) = run_op("power", x, y)
    assert p.dtype == np.int32
    np.testing.assert_array_equal(p, np.power(x.astype(np.float64), y).astype("int32"))
    xf = np.array([1.5, 2.0, -3.0], "float32")
    (q,) = run_op("power", xf, np.array([2, 3, 3], "int64"))
    np.testing.assert_allclose(q, xf ** np.array([2, 3, 3]), rtol=1e-6)
    assert infer("power", ((3,), "float16"), ((3,), "int64"))[0].dtype == "float16"


@pytest.mark.parametrize("dtype", ["uint8", "uint32", "int8", "int64"])
def test_bitwise_and_shifts(dtype):
    bits = np.iinfo(dtype).bits
    a = _rand((30,), dtype)
    s = RNG.integers(0, bits + 3, 30).astype(dtype)
    outs = run_ops([a, s], [(n, {}, [0, 1]) for n in
                            ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift")])
    np.testing.assert_array_equal(outs[0][0], a & s)
    np.testing.assert_array_equal(outs[1][0], a | s)
    np.testing.assert_array_equal(outs[2][0], a ^ s)
    ai = a.astype(object)
    mask = (1 << bits) - 1
    left = [(int(x) << int(k)) & mask if k < bits else 0 for x, k in zip(ai, s)]
    right = [int(x) >> int(k) if k < bits else (-1 if x < 0 else 0) for x, k in zip(ai, s)]
    np.testing.assert_array_equal(outs[3][0], np.array(left, dtype=object).astype(np.uint64).astype(dtype))
    np.testing.assert_array_equal(outs[4][0], np.array(right).astype(dtype))


def test_logical_ops_and_where():
    a, b = _rand((2, 3), "bool"), _rand((3,), "bool")
    x, y = _rand((2, 1), "float32"), _rand((3,), "float32")
    outs = run_ops([a, b, x, y], [("logical_and", {}, [0, 1]), ("logical_or", {}, [0, 1]),
                                  ("logical_xor", {}, [0, 1]), ("equal", {}, [0, 1]),
                                  ("where", {}, [0, 2, 3])])
    np.testing.assert_array_equal(outs[0][0], a & b)
    np.testing.assert_array_equal(outs[1][0], a | b)
    np.testing.assert_array_equal(outs[2][0], a ^ b)
    np.testing.assert_array_equal(outs[3][0], a == b)
    np.testing.assert_array_equal(outs[4][0], np.where(a, x, y))


def test_prelu_broadcasts_the_slope_to_the_data():
    x = _rand((2, 3, 4), "float32")
    for slope in (_rand((3, 1), "float32"), _rand((4,), "float32"), _rand((1,), "float32")):
        (got,) = run_op("nn.prelu", x, slope)
        np.testing.assert_allclose(got, np.where(x < 0, x * slope, x), rtol=1e-6)
    with pytest.raises(ShapeError, match="slope"):
        infer("nn.prelu", ((2, 3), "float32"), ((2, 2, 3), "float32"))


def test_symbolic_dims_broadcast_by_name():
    assert infer("add", (("N", 1, 4), "float32"), (("M", 4), "float32"))[0] == TensorType(("N", "M", 4))
    assert infer("add", (("N", 4), "float32"), (("N", 1), "float32"))[0] == TensorType(("N", 4))
    with pytest.raises(ShapeError, match=r"\(N, 4\).*\(M, 4\)"):
        infer("add", (("N", 4), "float32"), (("M", 4), "float32"))
    with pytest.raises(ShapeError, match=r"\(3, 4\).*\(2, 4\)"):
        infer("multiply", ((3, 4), "float32"), ((2, 4), "float32"))
    a, b = _rand((6, 4), "float32"), _rand((1, 4), "float32")
    (got,) = run_op("subtract", a, b, sym={0: ("N", 4)})
    np.testing.assert_array_equal(got, a - b)


def test_dtype_errors_name_the_op_and_operand():
    with pytest.raises(DTypeError, match=r"add.*float32.*int32"):
        infer("add", ((3,), "float32"), ((3,), "int32"))
    with pytest.raises(DTypeError, match=r"bitwise_and.*float32"):
        infer("bitwise_and", ((3,), "float32"), ((3,), "float32"))
    with pytest.raises(DTypeError, match=r"logical_or.*int8"):
        infer("logical_or", ((3,), "int8"), ((3,), "int8"))
    with pytest.raises(DTypeError, match=r"where.*condition.*float32"):
        infer("where", ((3,), "float32"), ((3,), "float32"), ((3,), "float32"))
    with pytest.raises(DTypeError, match=r"add.*bool"):
        infer("add", ((3,), "bool"), ((3,), "bool"))
