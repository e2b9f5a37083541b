"""Small TE programs the autotune tests tune, each with its numpy reference (shared by
test_rules.py and test_space.py)."""
import math

import numpy as np

from tessera import te, tir


def gemm(m, n, k):
    """C = A @ B (m x k by k x n), float32: the PrimFunc."""
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return te.create_prim_func([A, B, C])


def elementwise_chain(n=32, m=24):
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((n, m), lambda i, j: B[i, j] * 2.0, name="C")
    D = te.compute((n, m), lambda i, j: te.exp(C[i, j]) - B[i, j], name="D")
    return te.create_prim_func([A, D]), lambda a: np.exp((a + 1) * 2) - (a + 1)


def row_sum(n=4, m=1024):
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    s = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="rowsum")
    return te.create_prim_func([A, s]), lambda a: a.sum(1)


def bmm_bias_gelu(b=2, m=16, n=32, kk=32):
    A = te.placeholder((b, m, kk), name="A")
    B = te.placeholder((b, kk, n), name="B")
    bias = te.placeholder((n,), name="bias")
    k = te.reduce_axis((0, kk), name="k")
    mm = te.compute((b, m, n), lambda x, i, j: te.sum(A[x, i, k] * B[x, k, j], axis=k), name="bmm")
    ad = te.compute((b, m, n), lambda x, i, j: mm[x, i, j] + bias[j], name="bias_add")
    g = te.compute((b, m, n), lambda x, i, j: 0.5 * ad[x, i, j] * (1.0 + te.erf(ad[x, i, j] * 0.7071067811865476)),
                   name="gelu")
    erf = np.vectorize(math.erf)
    return te.create_prim_func([A, B, bias, g]), lambda a, w, c: 0.5 * (a @ w + c) * (1 + erf((a @ w + c) / np.sqrt(2)))


def conv2d_nchw(c=4, h=8, w=8, oc=8, k=3, pad=1):
    data = te.placeholder((1, c, h, w), name="data")
    weight = te.placeholder((oc, c, k, k), name="weight")
    hp, wp = h + 2 * pad, w + 2 * pad
    dp = te.compute((1, c, hp, wp), lambda a, b, y, x: te.if_then_else(
        te.all(y >= pad, y < h + pad, x >= pad, x < w + pad), data[a, b, y - pad, x - pad],
        tir.const(0.0, "float32")), name="pad")
    rc, ry, rx = te.reduce_axis((0, c), name="rc"), te.reduce_axis((0, k), name="ry"), te.reduce_axis((0, k), name="rx")
    oh, ow = hp - k + 1, wp - k + 1
    out = te.compute((1, oc, oh, ow), lambda a, f, y, x: te.sum(
        dp[a, rc, y + ry, x + rx] * weight[f, rc, ry, rx], axis=[rc, ry, rx]), name="conv")

    def ref(d, wt):
        dpad = np.pad(d, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        o = np.zeros((1, oc, oh, ow), "float32")
        for y in range(k):
            for x in range(k):
                o += np.einsum("nchw,fc->nfhw", dpad[:, :, y:y + oh, x:x + ow], wt[:, :, y, x])
        return o
    return te.create_prim_func([data, weight, out]), ref


def softmax(n=4, m=512):
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    mx = te.compute((n,), lambda i: te.max(A[i, k], axis=k), name="maxelem")
    ex = te.compute((n, m), lambda i, j: te.exp(A[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis((0, m), name="k2")
    sm = te.compute((n,), lambda i: te.sum(ex[i, k2], axis=k2), name="expsum")
    out = te.compute((n, m), lambda i, j: ex[i, j] / sm[i], name="norm")

    def ref(a):
        e = np.exp(a - a.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    return te.create_prim_func([A, out]), ref
