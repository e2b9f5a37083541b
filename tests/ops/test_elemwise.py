"""Elementwise ops of tessera.ops.elemwise against numpy, across dtypes (several ops share a kernel)."""
import math

import numpy as np
import pytest
from op_check import BF16, infer, npdt, run_op, run_ops

from tessera.errors import DTypeError, ShapeError, TesseraError
from tessera.graph.ir import TensorType

RNG = np.random.default_rng(7)
FLOATS = ["float32", "float64", "float16", "bfloat16"]
SINTS = ["int8", "int16", "int32", "int64"]
UINTS = ["uint8", "uint16", "uint32", "uint64"]
ERF = np.vectorize(math.erf)


def _softplus(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


# op -> (numpy reference on float64, input domain)
FLOAT_UNARY = {
    "negative": (np.negative, (-3, 3)), "abs": (np.abs, (-3, 3)), "sign": (np.sign, (-3, 3)),
    "exp": (np.exp, (-3, 3)), "log": (np.log, (0.1, 5)), "sqrt": (np.sqrt, (0, 9)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (0.1, 9)), "reciprocal": (lambda x: 1 / x, (0.5, 4)),
    "floor": (np.floor, (-3, 3)), "ceil": (np.ceil, (-3, 3)), "round": (np.round, (-3, 3)),
    "trunc": (np.trunc, (-3, 3)), "erf": (ERF, (-3, 3)), "sin": (np.sin, (-3, 3)),
    "cos": (np.cos, (-3, 3)), "tan": (np.tan, (-1.2, 1.2)), "asin": (np.arcsin, (-0.95, 0.95)),
    "acos": (np.arccos, (-0.95, 0.95)), "atan": (np.arctan, (-3, 3)), "sinh": (np.sinh, (-3, 3)),
    "cosh": (np.cosh, (-3, 3)), "asinh": (np.arcsinh, (-3, 3)), "acosh": (np.arccosh, (1, 5)),
    "atanh": (np.arctanh, (-0.95, 0.95)), "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), (-6, 6)),
    "tanh": (np.tanh, (-4, 4)), "nn.relu": (lambda x: np.maximum(x, 0), (-3, 3)),
    "nn.softplus": (_softplus, (-20, 20)), "nn.softsign": (lambda x: x / (1 + np.abs(x)), (-3, 3)),
    "nn.hardswish": (lambda x: x * np.clip(x / 6 + 0.5, 0, 1), (-5, 5)),
    "nn.mish": (lambda x: x * np.tanh(_softplus(x)), (-5, 5)),
    "nn.gelu": (lambda x: 0.5 * x * (1 + ERF(x / np.sqrt(2))), (-3, 3)),
    "copy": (lambda x: x, (-3, 3)),
}
RTOL = {"float32": 2e-6, "float64": 1e-12, "float16": 1e-3, "bfloat16": 8e-3}


def _rand(shape, dtype, lo, hi):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32).astype(npdt(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_unary_ops_match_numpy(dtype):
    names = sorted(FLOAT_UNARY)
    arrays = [_rand((3, 37), dtype, *FLOAT_UNARY[n][1]) for n in names]
    outs = run_ops(arrays, [(n, {}, [k]) for k, n in enumerate(names)])
    rt = RTOL[dtype]
    for n, a, (got,) in zip(names, arrays, outs):
        assert got.dtype == npdt(dtype)
        want = FLOAT_UNARY[n][0](a.astype(np.float64)).astype(npdt(dtype)).astype(np.float64)
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=rt, atol=rt, err_msg=n)


def test_round_is_half_to_even_and_sign_keeps_nan():
    a = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49, np.nan, -0.0, 3.0], "float32")
    (r,), (s,) = run_ops([a], [("round", {}, [0]), ("sign", {}, [0])])
    np.testing.assert_array_equal(r, np.round(a))
    np.testing.assert_array_equal(s, np.sign(a))


INT_UNARY = {"abs": np.abs, "sign": np.sign, "nn.relu": lambda x: np.maximum(x, 0),
             "bitwise_not": np.invert, "floor": lambda x: x, "round": lambda x: x, "copy": lambda x: x}


@pytest.mark.parametrize("dtype", SINTS + UINTS)
def test_integer_unary_ops_are_exact(dtype):
    info = np.iinfo(dtype)
    a = RNG.integers(max(info.min, -1000), min(info.max, 1000), size=(50,)).astype(dtype)
    a[:2] = [info.max, info.min + 1]
    names = sorted(INT_UNARY) + (["negative"] if dtype in SINTS else [])
    outs = run_ops([a], [(n, {}, [0]) for n in names])
    for n, (got,) in zip(names, outs):
        want = np.negative(a) if n == "negative" else INT_UNARY[n](a)
        assert got.dtype == a.dtype, n
        np.testing.assert_array_equal(got, want.astype(dtype), err_msg=n)


def test_isnan_isinf_and_logical_not():
    a = np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -2.0], "float32")
    b = np.array([True, False, True], bool)
    outs = run_ops([a, b], [("isnan", {}, [0]), ("isinf", {}, [0]),
                            ("isinf", {"detect_negative": False}, [0]),
                            ("isinf", {"detect_positive": False}, [0]), ("logical_not", {}, [1])])
    np.testing.assert_array_equal(outs[0][0], np.isnan(a))
    np.testing.assert_array_equal(outs[1][0], np.isinf(a))
    np.testing.assert_array_equal(outs[2][0], np.isposinf(a))
    np.testing.assert_array_equal(outs[3][0], np.isneginf(a))
    np.testing.assert_array_equal(outs[4][0], ~b)
    assert outs[0][0].dtype == np.bool_


ACTIVATIONS = [
    ("nn.leaky_relu", {"alpha": 0.3}, lambda x: np.where(x < 0, 0.3 * x, x)),
    ("nn.elu", {"alpha": 2.0}, lambda x: np.where(x < 0, 2.0 * (np.exp(x) - 1), x)),
    ("nn.selu", {"alpha": 2.0, "gamma": 3.0}, lambda x: np.where(x <= 0, 3 * (2 * np.exp(x) - 2), 3 * x)),
    ("nn.celu", {"alpha": 2.0}, lambda x: np.maximum(0, x) + np.minimum(0, 2 * (np.exp(x / 2) - 1))),
    ("nn.hardsigmoid", {"alpha": 0.5, "beta": 0.6}, lambda x: np.clip(0.5 * x + 0.6, 0, 1)),
    ("nn.thresholded_relu", {"alpha": 1.5}, lambda x: np.where(x > 1.5, x, 0)),
    ("nn.shrink", {"lambd": 1.5, "bias": 0.5},
     lambda x: np.where(x < -1.5, x + 0.5, np.where(x > 1.5, x - 0.5, 0))),
    ("nn.gelu", {"approximate": "tanh"},
     lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    ("clip", {"a_min": -1.0, "a_max": 2.0}, lambda x: np.clip(x, -1, 2)),
    ("clip", {"a_min": None, "a_max": 0.5}, lambda x: np.minimum(x, 0.5)),
    ("clip", {"a_min": 0.25}, lambda x: np.maximum(x, 0.25)),
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_activations_with_attributes(dtype):
    a = _rand((4, 25), dtype, -4, 4)
    outs = run_ops([a], [(n, attrs, [0]) for n, attrs, _ in ACTIVATIONS])
    for (n, attrs, ref), (got,) in zip(ACTIVATIONS, outs):
        want = ref(a.astype(np.float64)).astype(npdt(dtype)).astype(np.float64)
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=RTOL[dtype], atol=RTOL[dtype],
                                   err_msg=f"{n} {attrs}")


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int64"])
def test_integer_clip_and_shrink(dtype):
    info = np.iinfo(dtype)
    a = np.array([v for v in (info.min, -7, -2, -1, 0, 1, 2, 7, info.max) if info.min <= v], dtype)
    outs = run_ops([a], [("clip", {"a_min": -1.5, "a_max": 5.2}, [0]), ("clip", {"a_min": -1e30}, [0]),
                         ("nn.shrink", {"lambd": 1.5, "bias": 1.0}, [0])])
    np.testing.assert_array_equal(outs[0][0], np.clip(a, max(-1, info.min), 5))
    np.testing.assert_array_equal(outs[1][0], a)
    want = np.array([v + 1 if v < -1.5 else v - 1 if v > 1.5 else 0 for v in a.tolist()], dtype)
    np.testing.assert_array_equal(outs[2][0], want)


ALL = ["bool"] + SINTS + UINTS + FLOATS


@pytest.mark.parametrize("src", ALL)
def test_cast_to_every_dtype_like_numpy(src):
    d = npdt(src)
    if d == np.bool_:
        a = RNG.random(40) > 0.5
    elif np.issubdtype(d, np.integer):
        info = np.iinfo(d)
        a = RNG.integers(max(info.min, -100), min(info.max, 100), 40).astype(d)
    else:  # values every target holds: halves, in the int8 range, exact in bfloat16
        a = (RNG.integers(-100, 100, 40) / 4).astype(d)
    a[:3] = a.dtype.type(0)
    signed = [t for t in ALL if t not in UINTS]
    unsigned_src = np.abs(a.astype(np.float64)).astype(d) if d != np.bool_ else a
    outs = run_ops([a, unsigned_src], [("cast", {"dtype": t}, [1 if t in UINTS else 0]) for t in ALL])
    for t, (got,) in zip(ALL, outs):
        src_arr = unsigned_src if t in UINTS else a
        want = src_arr.astype(np.float32).astype(npdt(t)) if d == BF16 else src_arr.astype(npdt(t))
        assert got.dtype == npdt(t)
        np.testing.assert_array_equal(got, want, err_msg=f"{src} -> {t}")
    del signed


def test_symbolic_shapes_flow_through():
    a = _rand((5, 3), "float32", -2, 2)
    (got,) = run_op("nn.relu", a, sym={0: ("N", 3)})
    np.testing.assert_array_equal(got, np.maximum(a, 0))
    (t,) = infer("exp", (("N", 3), "float32"))
    assert t == TensorType(("N", 3), "float32")


def test_bad_dtypes_and_attributes_are_refused_clearly():
    with pytest.raises(DTypeError, match=r"exp.*int32"):
        infer("exp", ((3,), "int32"))
    with pytest.raises(DTypeError, match=r"logical_not.*float32"):
        infer("logical_not", ((3,), "float32"))
    with pytest.raises(DTypeError, match=r"negative.*uint8"):
        infer("negative", ((3,), "uint8"))
    with pytest.raises(DTypeError, match=r"cast.*float7"):
        infer("cast", ((3,), "float32"), dtype="float7")
    with pytest.raises(TesseraError, match="unknown attributes"):
        infer("nn.relu", ((3,), "float32"), alpha=1.0)
    with pytest.raises(ShapeError):
        infer("exp", ((3,), "float32"), ((3,), "float32"))
    with pytest.raises(TesseraError, match="approximate"):
        run_op("nn.gelu", np.zeros(3, "float32"), approximate="fast")
