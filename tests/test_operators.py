"""End to end: operators written in TE, built to C, run, and compared with numpy across dtypes."""
import math

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import te

RNG = np.random.default_rng(42)
BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = ["float32", "float64", "float16", "bfloat16"]
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint32"]


def npdt(dtype):
    return BF16 if dtype == "bfloat16" else np.dtype(dtype)


def rand(shape, dtype, lo=-3.0, hi=3.0):
    d = npdt(dtype)
    if np.issubdtype(d, np.integer):
        info = np.iinfo(d)
        lo, hi = max(int(lo) * 10, info.min // 2), min(int(hi) * 10, info.max // 2)
        return RNG.integers(lo, hi + 1, size=shape).astype(d)
    return RNG.uniform(lo, hi, size=shape).astype(np.float32).astype(d)


def tol(dtype):
    return {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-5, "float64": 1e-12}.get(dtype, 0)


def run(tensors, inputs, out_shapes=None, target="c"):
    """Build the TE program over `tensors` (inputs then outputs) and run it on `inputs`."""
    func = te.create_prim_func(tensors)
    lib = tessera.build(func, target=target)
    outs_t = tensors[len(inputs):]
    outs = [np.zeros([int(s) for s in (out_shapes[i] if out_shapes else t.shape)], npdt(t.dtype))
            for i, t in enumerate(outs_t)]
    lib(*inputs, *outs)
    return outs if len(outs) > 1 else outs[0]


def check(got, want, dtype):
    if npdt(dtype) == BF16 or dtype == "float16":
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                   rtol=tol(dtype), atol=tol(dtype))
    elif np.issubdtype(npdt(dtype), np.floating):
        np.testing.assert_allclose(got, want, rtol=tol(dtype) * 10, atol=tol(dtype) * 10)
    else:
        np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------------------------------
# elementwise binary ops across dtypes
# ------------------------------------------------------------------------------------------
BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "maximum": (lambda a, b: te.max(a, b), np.maximum),
    "minimum": (lambda a, b: te.min(a, b), np.minimum),
}


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_elementwise(op, dtype):
    fte, fnp = BINARY[op]
    shape = (7, 33)
    A = te.placeholder(shape, dtype, "A")
    B = te.placeholder(shape, dtype, "B")
    C = te.compute(shape, lambda i, j: fte(A[i, j], B[i, j]), name="C")
    a, b = rand(shape, dtype), rand(shape, dtype)
    with np.errstate(over="ignore"):
        want = fnp(a, b)  # numpy rounds each op in the dtype (ml_dtypes for bfloat16)
    check(run([A, B, C], [a, b]), want, dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_true_division(dtype):
    A = te.placeholder((64,), dtype, "A")
    B = te.placeholder((64,), dtype, "B")
    C = te.compute((64,), lambda i: A[i] / B[i], name="C")
    a, b = rand((64,), dtype), rand((64,), dtype, 0.5, 4)
    check(run([A, B, C], [a, b]), a / b, dtype)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_floordiv_floormod_match_python_semantics(dtype):
    A = te.placeholder((50,), dtype, "A")
    B = te.placeholder((50,), dtype, "B")
    D = te.compute((50,), lambda i: A[i] // B[i], name="D")
    M = te.compute((50,), lambda i: A[i] % B[i], name="M")
    a = RNG.integers(-60, 60, 50).astype(dtype)
    b = RNG.choice([-7, -3, -1, 1, 2, 5], 50).astype(dtype)
    d, m = run([A, B, D, M], [a, b])
    np.testing.assert_array_equal(d, np.floor_divide(a, b))
    np.testing.assert_array_equal(m, np.mod(a, b))


def test_truncdiv_truncmod():
    A = te.placeholder((40,), "int32", "A")
    D = te.compute((40,), lambda i: te.truncdiv(A[i], 3), name="D")
    M = te.compute((40,), lambda i: te.truncmod(A[i], 3), name="M")
    a = np.arange(-20, 20, dtype="int32")
    d, m = run([A, D, M], [a])
    np.testing.assert_array_equal(d, np.trunc(a / 3).astype("int32"))
    np.testing.assert_array_equal(m, np.fmod(a, 3))


# ------------------------------------------------------------------------------------------
# unary math
# ------------------------------------------------------------------------------------------
def _np_erf(x):
    return np.vectorize(math.erf)(x.astype(np.float64))


UNARY = {
    "exp": (te.exp, np.exp, (-3, 3)),
    "log": (te.log, np.log, (0.1, 5)),
    "sqrt": (te.sqrt, np.sqrt, (0, 9)),
    "rsqrt": (te.rsqrt, lambda x: 1 / np.sqrt(x), (0.1, 9)),
    "tanh": (te.tanh, np.tanh, (-4, 4)),
    "sigmoid": (te.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-6, 6)),
    "erf": (te.erf, _np_erf, (-3, 3)),
    "abs": (te.abs, np.abs, (-3, 3)),
    "floor": (te.floor, np.floor, (-3, 3)),
    "ceil": (te.ceil, np.ceil, (-3, 3)),
    "round": (te.round, np.round, (-3, 3)),
    "neg": (lambda x: -x, np.negative, (-3, 3)),
    "relu": (lambda x: te.max(x, te.const(0, x.dtype)), lambda x: np.maximum(x, 0), (-3, 3)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_math(op, dtype):
    fte, fnp, (lo, hi) = UNARY[op]
    A = te.placeholder((5, 40), dtype, "A")
    B = te.compute((5, 40), lambda i, j: fte(A[i, j]), name="B")
    a = rand((5, 40), dtype, lo, hi)
    want = fnp(a.astype(np.float64)).astype(dtype)
    got = run([A, B], [a])
    rt = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-12}[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rt, atol=rt)


def test_round_is_half_to_even_like_numpy():
    A = te.placeholder((8,), "float32", "A")
    B = te.compute((8,), lambda i: te.round(A[i]), name="B")
    a = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, 2.6, -2.5], "float32")
    np.testing.assert_array_equal(run([A, B], [a]), np.round(a))


def test_power_and_clip_and_leaky_relu():
    A = te.placeholder((64,), "float32", "A")
    P = te.compute((64,), lambda i: te.power(A[i], 2.5), name="P")
    C = te.compute((64,), lambda i: te.min(te.max(A[i], -1.0), 2.0), name="C")
    L = te.compute((64,), lambda i: te.if_then_else(A[i] > 0, A[i], A[i] * 0.1), name="L")
    a = rand((64,), "float32", 0.1, 4)
    a[::3] *= -1
    p, c, l = run([A, P, C, L], [a])
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(p, np.power(a, np.float32(2.5)), rtol=1e-5)
    np.testing.assert_array_equal(c, np.clip(a, -1, 2))
    np.testing.assert_allclose(l, np.where(a > 0, a, a * np.float32(0.1)), rtol=1e-6)


def test_gelu_erf_form():
    A = te.placeholder((4, 32), "float32", "A")
    G = te.compute((4, 32), lambda i, j: A[i, j] * 0.5 * (1.0 + te.erf(A[i, j] * (1 / math.sqrt(2)))), name="G")
    a = rand((4, 32), "float32")
    want = a * 0.5 * (1 + _np_erf(a / math.sqrt(2)))
    np.testing.assert_allclose(run([A, G], [a]), want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------
# broadcast, casts, select
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "int32", "float16"])
def test_broadcast_bias_add_and_row_scale(dtype):
    X = te.placeholder((6, 20), dtype, "X")
    b = te.placeholder((20,), dtype, "b")
    s = te.placeholder((6, 1), dtype, "s")
    Y = te.compute((6, 20), lambda i, j: X[i, j] * s[i, 0] + b[j], name="Y")
    x, bb, ss = rand((6, 20), dtype), rand((20,), dtype), rand((6, 1), dtype)
    want = (x.astype(np.float32) * ss.astype(np.float32)).astype(x.dtype).astype(np.float32) + bb.astype(np.float32)
    if dtype == "int32":
        want = x * ss + bb
    check(run([X, b, s, Y], [x, bb, ss]), want.astype(npdt(dtype)), dtype)


@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("int32", "float32"), ("float32", "float16"),
                                     ("float16", "float32"), ("float32", "bfloat16"), ("bfloat16", "float32"),
                                     ("int32", "int8"), ("uint8", "float32"), ("float64", "float32"),
                                     ("float32", "bool"), ("int64", "int32")])
def test_cast(src, dst):
    A = te.placeholder((40,), src, "A")
    B = te.compute((40,), lambda i: A[i].astype(dst), name="B")
    a = rand((40,), src, -100, 100)
    if src.startswith("int") and dst == "int8":
        a = a.astype(np.int64).clip(-128, 127).astype(src)
    if dst == "bool":
        a[::4] = 0
    want = a.astype(npdt(dst))
    got = run([A, B], [a])
    np.testing.assert_array_equal(got, want)


def test_where_select():
    C = te.placeholder((30,), "bool", "C")
    A = te.placeholder((30,), "float32", "A")
    B = te.placeholder((30,), "float32", "B")
    D = te.compute((30,), lambda i: tessera.tir.Select(C[i], A[i], B[i]), name="D")
    c = RNG.random(30) > 0.5
    a, b = rand((30,), "float32"), rand((30,), "float32")
    np.testing.assert_array_equal(run([C, A, B, D], [c, a, b]), np.where(c, a, b))


# ------------------------------------------------------------------------------------------
# reductions
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("reducer", ["sum", "max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_reduce_each_axis(reducer, axis, dtype):
    shape = (4, 5, 6)
    A = te.placeholder(shape, dtype, "A")
    r = te.reduce_axis((0, shape[axis]), name="r")
    out_shape = tuple(s for d, s in enumerate(shape) if d != axis)
    red = getattr(te, reducer)

    def body(*idx):
        full = list(idx)
        full.insert(axis, r)
        return red(A[tuple(full)], axis=r)

    B = te.compute(out_shape, body, name="B")
    a = rand(shape, dtype)
    want = {"sum": np.sum, "max": np.max, "min": np.min}[reducer](a, axis=axis).astype(dtype)
    check(run([A, B], [a]), want, dtype)


def test_reduce_all_axes_and_mean():
    A = te.placeholder((8, 16), "float32", "A")
    i, j = te.reduce_axis((0, 8), "i"), te.reduce_axis((0, 16), "j")
    S = te.compute((1,), lambda _: te.sum(A[i, j], axis=[i, j]), name="S")
    M = te.compute((8,), lambda r: te.sum(A[r, j], axis=j), name="M")
    Mean = te.compute((8,), lambda r: M[r] / 16.0, name="Mean")
    a = rand((8, 16), "float32")
    s, mean = run([A, S, Mean], [a])
    np.testing.assert_allclose(s, [a.sum()], rtol=1e-5)
    np.testing.assert_allclose(mean, a.mean(axis=1), rtol=1e-5, atol=1e-6)


def test_product_via_comm_reducer():
    prod = te.comm_reducer(lambda x, y: x * y, lambda t: tessera.tir.const(1, t), name="prod")
    A = te.placeholder((3, 5), "float64", "A")
    k = te.reduce_axis((0, 5), "k")
    B = te.compute((3,), lambda i: prod(A[i, k], axis=k), name="B")
    a = rand((3, 5), "float64", 0.5, 2)
    np.testing.assert_allclose(run([A, B], [a]), np.prod(a, axis=1), rtol=1e-12)


def test_argmax_via_comm_reducer():
    def fcombine(x, y):
        lhs = tessera.tir.Select(x[1] >= y[1], x[0], y[0])
        rhs = tessera.tir.Select(x[1] >= y[1], x[1], y[1])
        return lhs, rhs

    def fidentity(t0, t1):
        return tessera.tir.const(-1, t0), te.min_value(t1)

    argmax = te.comm_reducer(fcombine, fidentity, name="argmax")
    m, n = 6, 17
    idx = te.placeholder((m, n), "int32", "idx")
    val = te.placeholder((m, n), "float32", "val")
    k = te.reduce_axis((0, n), "k")
    T0, T1 = te.compute((m,), lambda i: argmax((idx[i, k], val[i, k]), axis=k), name="T")
    v = rand((m, n), "float32")
    ix = np.tile(np.arange(n, dtype="int32"), (m, 1))
    t0, t1 = run([idx, val, T0, T1], [ix, v])
    np.testing.assert_array_equal(t0, np.argmax(v, axis=1))
    np.testing.assert_array_equal(t1, np.max(v, axis=1))


def test_reduction_with_where_condition_cumsum():
    n = 12
    A = te.placeholder((n,), "float32", "A")
    k = te.reduce_axis((0, n), "k")
    C = te.compute((n,), lambda i: te.sum(A[k], axis=k, where=k <= i), name="C")
    a = rand((n,), "float32")
    np.testing.assert_allclose(run([A, C], [a]), np.cumsum(a), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------
# linear algebra and convolution
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_matmul(dtype):
    M, N, K = 17, 23, 31
    A = te.placeholder((M, K), dtype, "A")
    B = te.placeholder((K, N), dtype, "B")
    k = te.reduce_axis((0, K), "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    a, b = rand((M, K), dtype), rand((K, N), dtype)
    check(run([A, B, C], [a, b]), a @ b, dtype)


def test_matmul_mixed_precision_fp16_in_fp32_acc():
    M, N, K = 8, 12, 64
    A = te.placeholder((M, K), "float16", "A")
    B = te.placeholder((K, N), "float16", "B")
    k = te.reduce_axis((0, K), "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("float32") * B[k, j].astype("float32"), axis=k), name="C")
    a, b = rand((M, K), "float16"), rand((K, N), "float16")
    np.testing.assert_allclose(run([A, B, C], [a, b]), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-4, atol=1e-4)


def test_batch_matmul_and_dense():
    Bt, M, N, K = 3, 5, 7, 9
    A = te.placeholder((Bt, M, K), "float32", "A")
    B = te.placeholder((Bt, K, N), "float32", "B")
    k = te.reduce_axis((0, K), "k")
    C = te.compute((Bt, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), name="C")
    X = te.placeholder((M, K), "float32", "X")
    W = te.placeholder((N, K), "float32", "W")
    kk = te.reduce_axis((0, K), "kk")
    D = te.compute((M, N), lambda i, j: te.sum(X[i, kk] * W[j, kk], axis=kk), name="D")
    a, b, x, w = rand((Bt, M, K), "float32"), rand((Bt, K, N), "float32"), rand((M, K), "float32"), rand((N, K), "float32")
    c, d = run([A, B, X, W, C, D], [a, b, x, w])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d, x @ w.T, rtol=1e-5, atol=1e-5)


def _np_conv2d(x, w, stride, pad, groups=1):
    N, C, H, W = x.shape
    O, Cg, KH, KW = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    OH, OW = (H + 2 * pad - KH) // stride + 1, (W + 2 * pad - KW) // stride + 1
    out = np.zeros((N, O, OH, OW), np.float64)
    og = O // groups
    for o in range(O):
        g = o // og
        for kh in range(KH):
            for kw in range(KW):
                patch = xp[:, g * Cg:(g + 1) * Cg, kh:kh + stride * OH:stride, kw:kw + stride * OW:stride]
                out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, kh, kw])
    return out.astype(np.float32)


def _te_pad(X, pad, name="pad"):
    N, C, H, W = X.shape
    return te.compute((N, C, H + 2 * pad, W + 2 * pad),
                      lambda n, c, h, w: te.if_then_else(
                          te.all(h >= pad, h < H + pad, w >= pad, w < W + pad),
                          X[n, c, h - pad, w - pad], te.const(0, X.dtype)), name=name)


@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 1), (1, 0), (2, 2)])
def test_conv2d_nchw_padding_stride(stride, pad):
    N, C, H, W, O, K = 1, 3, 9, 10, 4, 3
    X = te.placeholder((N, C, H, W), "float32", "X")
    Wt = te.placeholder((O, C, K, K), "float32", "W")
    P = _te_pad(X, pad)
    OH, OW = (H + 2 * pad - K) // stride + 1, (W + 2 * pad - K) // stride + 1
    rc, rh, rw = te.reduce_axis((0, C), "rc"), te.reduce_axis((0, K), "rh"), te.reduce_axis((0, K), "rw")
    Y = te.compute((N, O, OH, OW), lambda n, o, h, w: te.sum(
        P[n, rc, h * stride + rh, w * stride + rw] * Wt[o, rc, rh, rw], axis=[rc, rh, rw]), name="Y")
    x, w = rand((N, C, H, W), "float32"), rand((O, C, K, K), "float32")
    np.testing.assert_allclose(run([X, Wt, Y], [x, w]), _np_conv2d(x, w, stride, pad), rtol=1e-4, atol=1e-4)


def test_depthwise_conv2d():
    N, C, H, W, K = 1, 4, 8, 8, 3
    X = te.placeholder((N, C, H, W), "float32", "X")
    Wt = te.placeholder((C, 1, K, K), "float32", "W")
    P = _te_pad(X, 1)
    rh, rw = te.reduce_axis((0, K), "rh"), te.reduce_axis((0, K), "rw")
    Y = te.compute((N, C, H, W), lambda n, c, h, w: te.sum(P[n, c, h + rh, w + rw] * Wt[c, 0, rh, rw], axis=[rh, rw]), name="Y")
    x, w = rand((N, C, H, W), "float32"), rand((C, 1, K, K), "float32")
    np.testing.assert_allclose(run([X, Wt, Y], [x, w]), _np_conv2d(x, w, 1, 1, groups=C), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------------
# pooling, normalization
# ------------------------------------------------------------------------------------------
def test_max_and_avg_pool2d():
    N, C, H, W = 1, 2, 8, 8
    X = te.placeholder((N, C, H, W), "float32", "X")
    rh, rw = te.reduce_axis((0, 2), "rh"), te.reduce_axis((0, 2), "rw")
    Mx = te.compute((N, C, 4, 4), lambda n, c, h, w: te.max(X[n, c, h * 2 + rh, w * 2 + rw], axis=[rh, rw]), name="Mx")
    sh, sw = te.reduce_axis((0, 2), "sh"), te.reduce_axis((0, 2), "sw")
    S = te.compute((N, C, 4, 4), lambda n, c, h, w: te.sum(X[n, c, h * 2 + sh, w * 2 + sw], axis=[sh, sw]), name="S")
    Av = te.compute((N, C, 4, 4), lambda n, c, h, w: S[n, c, h, w] * 0.25, name="Av")
    x = rand((N, C, H, W), "float32")
    mx, av = run([X, Mx, Av], [x])
    blocks = x.reshape(N, C, 4, 2, 4, 2)
    np.testing.assert_array_equal(mx, blocks.max(axis=(3, 5)))
    np.testing.assert_allclose(av, blocks.mean(axis=(3, 5)), rtol=1e-6, atol=1e-6)   # a mean near 0: absolute


def test_global_avg_pool():
    X = te.placeholder((2, 3, 5, 7), "float32", "X")
    rh, rw = te.reduce_axis((0, 5), "rh"), te.reduce_axis((0, 7), "rw")
    S = te.compute((2, 3), lambda n, c: te.sum(X[n, c, rh, rw], axis=[rh, rw]), name="S")
    G = te.compute((2, 3), lambda n, c: S[n, c] / 35.0, name="G")
    x = rand((2, 3, 5, 7), "float32")
    np.testing.assert_allclose(run([X, G], [x]), x.mean(axis=(2, 3)), rtol=1e-5)


def _te_softmax(X):
    m, n = X.shape
    k1, k2 = te.reduce_axis((0, n), "k1"), te.reduce_axis((0, n), "k2")
    Mx = te.compute((m,), lambda i: te.max(X[i, k1], axis=k1), name="Mx")
    E = te.compute((m, n), lambda i, j: te.exp(X[i, j] - Mx[i]), name="E")
    S = te.compute((m,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    return te.compute((m, n), lambda i, j: E[i, j] / S[i], name="Softmax")


def test_softmax():
    X = te.placeholder((5, 19), "float32", "X")
    Y = _te_softmax(X)
    x = rand((5, 19), "float32", -5, 5)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(run([X, Y], [x]), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_layer_norm():
    m, n, eps = 4, 32, 1e-5
    X = te.placeholder((m, n), "float32", "X")
    g = te.placeholder((n,), "float32", "gamma")
    b = te.placeholder((n,), "float32", "beta")
    k1, k2 = te.reduce_axis((0, n), "k1"), te.reduce_axis((0, n), "k2")
    Mean = te.compute((m,), lambda i: te.sum(X[i, k1], axis=k1) / float(n), name="Mean") if False else \
        te.compute((m,), lambda i: te.sum(X[i, k1] * (1.0 / n), axis=k1), name="Mean")
    Var = te.compute((m,), lambda i: te.sum((X[i, k2] - Mean[i]) * (X[i, k2] - Mean[i]) * (1.0 / n), axis=k2), name="Var")
    Y = te.compute((m, n), lambda i, j: (X[i, j] - Mean[i]) * te.rsqrt(Var[i] + eps) * g[j] + b[j], name="Y")
    x, gg, bb = rand((m, n), "float32"), rand((n,), "float32"), rand((n,), "float32")
    mu = x.mean(axis=1, keepdims=True)
    want = (x - mu) / np.sqrt(x.var(axis=1, keepdims=True) + eps) * gg + bb
    np.testing.assert_allclose(run([X, g, b, Y], [x, gg, bb]), want, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------
# data movement
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "int8", "bfloat16"])
def test_transpose_3d(dtype):
    A = te.placeholder((3, 4, 5), dtype, "A")
    B = te.compute((5, 3, 4), lambda i, j, k: A[j, k, i], name="B")
    a = rand((3, 4, 5), dtype)
    np.testing.assert_array_equal(run([A, B], [a]), a.transpose(2, 0, 1))


def test_pad_constant():
    A = te.placeholder((3, 4), "float32", "A")
    B = te.compute((5, 8), lambda i, j: te.if_then_else(
        te.all(i >= 1, i < 4, j >= 2, j < 6), A[i - 1, j - 2], te.const(-1.0, "float32")), name="B")
    a = rand((3, 4), "float32")
    np.testing.assert_array_equal(run([A, B], [a]), np.pad(a, ((1, 1), (2, 2)), constant_values=-1))


def test_concat_via_if_then_else():
    A = te.placeholder((3, 4), "float32", "A")
    B = te.placeholder((3, 6), "float32", "B")
    C = te.compute((3, 10), lambda i, j: te.if_then_else(j < 4, A[i, te.min(j, 3)], B[i, te.max(j - 4, 0)]), name="C")
    a, b = rand((3, 4), "float32"), rand((3, 6), "float32")
    np.testing.assert_array_equal(run([A, B, C], [a, b]), np.concatenate([a, b], axis=1))


def test_reshape_flatten_and_gather():
    A = te.placeholder((4, 6), "float32", "A")
    F = te.compute((24,), lambda i: A[i // 6, i % 6], name="F")
    R = te.compute((3, 8), lambda i, j: A[(i * 8 + j) // 6, (i * 8 + j) % 6], name="R")
    I = te.placeholder((5,), "int32", "I")
    G = te.compute((5, 6), lambda i, j: A[I[i], j], name="G")
    a = rand((4, 6), "float32")
    ind = np.array([3, 0, 2, 2, 1], "int32")
    f, r, g = run([A, I, F, R, G], [a, ind])
    np.testing.assert_array_equal(f, a.reshape(-1))
    np.testing.assert_array_equal(r, a.reshape(3, 8))
    np.testing.assert_array_equal(g, a[ind])


def test_upsample_nearest():
    A = te.placeholder((1, 2, 3, 3), "float32", "A")
    B = te.compute((1, 2, 6, 6), lambda n, c, h, w: A[n, c, h // 2, w // 2], name="B")
    a = rand((1, 2, 3, 3), "float32")
    np.testing.assert_array_equal(run([A, B], [a]), a.repeat(2, axis=2).repeat(2, axis=3))


# ------------------------------------------------------------------------------------------
# symbolic shapes
# ------------------------------------------------------------------------------------------
def test_symbolic_shape_bound_at_call_time():
    n = te.var("n")
    A = te.placeholder((n, 8), "float32", "A")
    B = te.placeholder((8,), "float32", "B")
    C = te.compute((n, 8), lambda i, j: A[i, j] * B[j] + 1.0, name="C")
    lib = tessera.build(te.create_prim_func([A, B, C]))
    b = rand((8,), "float32")
    for rows in (1, 5, 64):
        a = rand((rows, 8), "float32")
        c = np.zeros((rows, 8), "float32")
        lib(a, b, c)
        np.testing.assert_allclose(c, a * b + 1, rtol=1e-6, atol=1e-6)  # gcc contracts a*b+1 into an FMA: one rounding fewer than numpy


def test_symbolic_reduction_extent():
    n = te.var("n")
    A = te.placeholder((4, n), "float32", "A")
    k = te.reduce_axis((0, n), "k")
    S = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="S")
    lib = tessera.build(te.create_prim_func([A, S]))
    for cols in (1, 7, 100):
        a = rand((4, cols), "float32")
        s = np.zeros(4, "float32")
        lib(a, s)
        np.testing.assert_allclose(s, a.sum(axis=1), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def add_lib():
    n = te.var("n")
    A = te.placeholder((n, 4), "float32", "A")
    B = te.placeholder((n, 4), "float32", "B")
    C = te.compute((n, 4), lambda i, j: A[i, j] + B[i, j], name="C")
    return tessera.build(te.create_prim_func([A, B, C]))


def test_wrong_argument_count_is_clear(add_lib):
    a = np.zeros((2, 4), "float32")
    with pytest.raises(tessera.TesseraError, match="3"):
        add_lib(a, a)


def test_wrong_dtype_names_the_argument(add_lib):
    a = np.zeros((2, 4), "float32")
    with pytest.raises(tessera.DTypeError, match="B"):
        add_lib(a, a.astype("int32"), a)


def test_wrong_extent_names_the_argument(add_lib):
    a = np.zeros((2, 4), "float32")
    with pytest.raises(tessera.ShapeError, match="A"):
        add_lib(np.zeros((2, 5), "float32"), a, a)


def test_inconsistent_symbolic_extent(add_lib):
    a = np.zeros((2, 4), "float32")
    with pytest.raises(tessera.ShapeError, match="n"):
        add_lib(a, a, np.zeros((3, 4), "float32"))


def test_wrong_rank_and_non_array(add_lib):
    a = np.zeros((2, 4), "float32")
    with pytest.raises(tessera.ShapeError):
        add_lib(np.zeros((8,), "float32"), a, a)
    with pytest.raises(tessera.TesseraError, match="C"):
        add_lib(a, a, "not an array")


def test_non_contiguous_array_is_refused(add_lib):
    a = np.zeros((2, 8), "float32")
    with pytest.raises(tessera.ShapeError, match="contiguous|strid"):
        add_lib(a[:, ::2], np.zeros((2, 4), "float32"), np.zeros((2, 4), "float32"))


def test_compiler_error_is_build_error_with_source_path():
    from tessera.runtime.c_compiler import compile_source

    with pytest.raises(tessera.BuildError) as info:
        compile_source("int main( { this is not C }\n")
    assert info.value.source_path and info.value.source_path.endswith(".c")
    assert "error" in str(info.value)


def test_build_rejects_non_function():
    with pytest.raises(tessera.TesseraError, match="PrimFunc"):
        tessera.build("not a function")
