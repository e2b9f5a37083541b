"""Every op of the tile language against numpy, compiled for c and opencl (PoCL) and interpreted,
with hypothesis-drawn shapes that the blocks do not divide (every mask boundary)."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import op_kernels as K
import tessera.language as tl
from tessera.runtime import opencl as rt

_OK, _WHY = rt.usable()
TARGETS = [pytest.param("c -num-threads=2", id="c"),
           pytest.param("opencl", id="opencl", marks=pytest.mark.skipif(not _OK, reason=f"OpenCL: {_WHY}")),
           pytest.param("interpret", id="interpret")]
SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])


def launch(kernel, grid, *args, target, **meta):
    if target == "interpret":
        kernel[grid](*args, **meta, interpret=True)
    else:
        kernel[grid](*args, **meta, target=target)


_erf = np.vectorize(math.erf, otypes=[np.float64])
UNARY = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
         "rsqrt": lambda x: 1 / np.sqrt(x), "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "erf": _erf,
         "abs": lambda x: np.abs(x - 1.5), "neg": np.negative, "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
         "floor": lambda x: np.floor(x * 3), "ceil": lambda x: np.ceil(x * 3)}


@pytest.mark.parametrize("target", TARGETS)
def test_unary_ops(target):
    n = 1000
    x = np.random.default_rng(0).uniform(0.1, 3.0, n).astype(np.float32)
    y = np.zeros((len(K.UNARY_OPS), n), np.float32)
    launch(K.unary, (tl.cdiv(n, 256),), x, y, n, target=target, BLOCK=256)
    for k, op in enumerate(K.UNARY_OPS):
        np.testing.assert_allclose(y[k], UNARY[op](x.astype(np.float64)), rtol=2e-6, atol=2e-6, err_msg=op)


def _trunc_div(x, y):
    q = np.abs(x) // np.abs(y)
    return np.where((x < 0) != (y < 0), -q, q)


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.divide,
          "maximum": np.maximum, "minimum": np.minimum, "where": lambda x, y: np.where(x > y, x, 2 * y),
          "fma": lambda x, y: x * y + x, "clamp": lambda x, y: np.minimum(np.maximum(x, y), y + 1),
          "lt": lambda x, y: (x < y).astype(x.dtype) + 2 * (x == y), "and": np.bitwise_and, "or": np.bitwise_or,
          "xor": np.bitwise_xor, "shl": lambda x, y: x << (y & 7), "shr": lambda x, y: x >> (y & 7)}


@pytest.mark.parametrize("target", TARGETS)
def test_float_binary_ops(target):
    """Float // is floor division and % is C's fmod (Triton's frem)."""
    n = 700
    rng = np.random.default_rng(1)
    x = rng.uniform(-3, 3, n).astype(np.float32)
    y = rng.uniform(0.5, 2, n).astype(np.float32) * rng.choice([-1, 1], n).astype(np.float32)
    y[::7] = x[::7]
    z = np.zeros((len(K.FLOAT_OPS), n), np.float32)
    launch(K.binary, (tl.cdiv(n, 128),), x, y, z, n, target=target, INTS=False, BLOCK=128)
    ref = dict(BINARY, floordiv=lambda x, y: np.floor(x / y), mod=np.fmod)
    for k, op in enumerate(K.FLOAT_OPS):
        np.testing.assert_allclose(z[k], ref[op](x, y), rtol=1e-6, atol=1e-6, err_msg=op)


@pytest.mark.parametrize("target", TARGETS)
def test_int_binary_ops_have_c_semantics(target):
    """Integer // and % truncate toward zero (C's, as Triton's); shifts and bit operations."""
    n = 500
    rng = np.random.default_rng(2)
    x = rng.integers(-1000, 1000, n).astype(np.int32)
    y = rng.integers(1, 50, n).astype(np.int32) * rng.choice([-1, 1], n).astype(np.int32)
    z = np.zeros((len(K.INT_OPS), n), np.int32)
    launch(K.binary, (tl.cdiv(n, 128),), x, y, z, n, target=target, INTS=True, BLOCK=128)
    ref = dict(BINARY, floordiv=_trunc_div, mod=np.fmod)
    for k, op in enumerate(K.INT_OPS):
        if op in ("shl", "shr"):
            continue
        np.testing.assert_array_equal(z[k], ref[op](x, y), err_msg=op)
    for k, op in enumerate(K.INT_OPS):   # shifts of the non-negative values (C leaves others undefined)
        if op in ("shl", "shr"):
            pos = x >= 0
            np.testing.assert_array_equal(z[k][pos], ref[op](x, y)[pos], err_msg=op)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("int32", "float32"), ("float32", "int8"),
                                     ("int8", "float32"), ("float32", "float64")])
def test_casts(src, dst, target):
    n = 300
    x = (np.random.default_rng(3).uniform(-100, 100, n)).astype(src)
    y = np.zeros(n, dst)
    launch(K.cast, (3,), x, y, n, target=target, BLOCK=128)
    np.testing.assert_array_equal(y, x.astype(dst))


@pytest.mark.parametrize("target", [TARGETS[0], TARGETS[2]])
def test_half_precision_loads_and_stores(target):
    """fp16 and bf16 tensors (computed in fp32, rounded when stored); OpenCL refuses half types."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    n = 300
    x = np.random.default_rng(4).uniform(-10, 10, n).astype(np.float32)
    for dt in (np.float16, ml_dtypes.bfloat16):
        y = np.zeros(n, dt)
        launch(K.cast, (3,), x, y, n, target=target, BLOCK=128)
        np.testing.assert_array_equal(y, x.astype(dt))
        back = np.zeros(n, np.float32)
        launch(K.cast, (3,), y, back, n, target=target, BLOCK=128)
        np.testing.assert_array_equal(back, y.astype(np.float32))


REDUCE = {"sum": np.sum, "max": np.max, "min": np.min, "argmax": np.argmax, "argmin": np.argmin,
          "reduce_max": np.max, "reduce_argmax": np.argmax}


REDUCTIONS = [("sum", 1, False), ("max", 1, False), ("min", 1, False), ("argmax", 1, False), ("argmin", 1, False),
              ("reduce_max", 1, False), ("reduce_argmax", 1, False), ("sum", 0, False), ("argmin", 0, False),
              ("reduce_argmax", 0, False), ("max", 0, True), ("argmax", 1, True)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op,axis,keep", REDUCTIONS)
@SETTINGS
@given(m=st.integers(1, 16), n=st.integers(1, 64))
def test_reductions(op, axis, keep, target, m, n):
    rng = np.random.default_rng(m * 100 + n)
    x = rng.integers(-20, 20, (m, n)).astype(np.float32)          # ties: the first index wins
    out = np.full(n if axis == 0 else m, -5, np.int32 if "arg" in op else np.float32)
    launch(K.reduce2d, (1,), x, out, m, n, n, target=target, OP=op, AXIS=axis, KEEP=keep, BM=16, BN=64)
    np.testing.assert_allclose(out, REDUCE[op](x, axis=axis), rtol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
@SETTINGS
@given(m=st.integers(1, 32), n=st.integers(1, 16))
def test_trans_expand_broadcast_full(target, m, n):
    x = np.random.default_rng(m + n).standard_normal((m, n)).astype(np.float32)
    y = np.zeros((n, m), np.float32)
    launch(K.shapes, (1,), x, y, m, n, target=target, OP="trans", BM=32, BN=16)
    np.testing.assert_array_equal(y, x.T)
    v = np.arange(32, dtype=np.float32)
    y = np.zeros((m, n), np.float32)
    launch(K.shapes, (1,), v, y, m, n, target=target, OP="expand_broadcast", BM=32, BN=16)
    np.testing.assert_array_equal(y, v[:m, None] + 10 * v[None, :n])
    launch(K.shapes, (1,), v, y, m, n, target=target, OP="full", BM=32, BN=16)
    np.testing.assert_array_equal(y, 6.5)
    launch(K.shapes, (1,), np.asfortranarray(x), y, m, n, target=target, OP="colmajor", BM=32, BN=16)
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("target", TARGETS)
def test_reshape(target):
    x = np.arange(8 * 16, dtype=np.float32)
    y = np.zeros(8, np.float32)
    launch(K.shapes, (1,), x, y, 8, 16, target=target, OP="reshape", BM=8, BN=16)
    np.testing.assert_array_equal(y, x.reshape(8, 16).sum(1))


@pytest.mark.parametrize("target", TARGETS)
def test_program_ids_and_counts_on_three_axes(target):
    g = (3, 2, 4)
    y = np.zeros(24, np.int32)
    launch(K.programs, g, y, target=target)
    z, yy, x = np.meshgrid(range(4), range(2), range(3), indexing="ij")
    np.testing.assert_array_equal(y, (x + 10 * yy + 100 * z).reshape(-1) + 1000 * (3 + 20 + 400))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("trans_b", [False, True])
@SETTINGS
@given(m=st.integers(1, 32), n=st.integers(1, 32), k=st.integers(1, 40))
def test_dot_fp32(target, trans_b, m, n, k):
    rng = np.random.default_rng(m * 10000 + n * 100 + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    launch(K.dot, (1,), a, b.T.copy() if trans_b else b, c, m, n, k, target=target, TRANS_B=trans_b,
           BM=32, BN=32, BK=16)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_dot_int8_accumulates_in_int32(target):
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (20, 50)).astype(np.int8)
    b = rng.integers(-128, 128, (50, 30)).astype(np.int8)
    c = np.zeros((20, 30), np.int32)
    launch(K.dot, (1,), a, b, c, 20, 30, 50, target=target, TRANS_B=False, BM=32, BN=32, BK=16)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@pytest.mark.parametrize("target", [TARGETS[0], TARGETS[2]])
def test_dot_fp16_accumulates_in_fp32(target):
    rng = np.random.default_rng(6)
    a = rng.standard_normal((20, 50)).astype(np.float16)
    b = rng.standard_normal((50, 30)).astype(np.float16)
    c = np.zeros((20, 30), np.float32)
    launch(K.dot, (1,), a, b, c, 20, 30, 50, target=target, TRANS_B=False, BM=32, BN=32, BK=16)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_atomic_add(target):
    x = np.random.default_rng(7).integers(0, 15, 1000).astype(np.int32)
    h = np.zeros(16, np.int32)
    launch(K.atomics, (tl.cdiv(1000, 128),), x, h, 1000, target=target, BLOCK=128)
    want = np.bincount(x, minlength=16)
    want[15] += x.sum()
    np.testing.assert_array_equal(h, want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_values_carried_through_a_loop_and_read_after_it(target, n):
    x = np.random.default_rng(n).standard_normal(7 * 32).astype(np.float32)
    y = np.zeros(32, np.float32)
    launch(K.walk, (1,), x, y, n, target=target, BLOCK=32)
    blocks = x.reshape(7, 32)
    np.testing.assert_allclose(y, (blocks[:n].sum(0) + blocks[n] + 2 * n) * 2.0 ** n, rtol=1e-5, atol=1e-5)
