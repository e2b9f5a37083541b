"""Scheduled GPU programs the GPU tests share: each case is (schedule, input arrays, expected
outputs), run by the reference executor (gpu_interp), by OpenCL where it works and compiled by
nvcc (tests/gpu/test_cuda_codegen.py compiles every case)."""
from __future__ import annotations

import numpy as np

from tessera import te, tir

RNG = np.random.default_rng(7)


def _rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


def elementwise(n=1000, threads=64):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.exp(A[i]) * 2.0 + 1.0, name="B")
    sch = tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    bx, tx = sch.split(i, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    a = _rand(n)
    return sch, [a, np.zeros(n, "float32")], {1: np.exp(a) * 2 + 1}


def row_sum(m=37, n=19, threads=16):
    """A reduction: one thread per row, rows split over blocks (m not a multiple of threads)."""
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((m,), lambda i: te.sum(A[i, k], axis=k), name="B")
    sch = tir.Schedule(te.create_prim_func([A, B]))
    i, _ = sch.get_loops(sch.get_block("B"))
    bx, tx = sch.split(i, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    a = _rand(m, n)
    return sch, [a, np.zeros(m, "float32")], {1: a.sum(1)}


def gemm_shared(m=8, n=16, k=16, tile=8, vector=False):
    """C = A @ B with A and B tiles fetched into shared memory by all threads of a block."""
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    sch = tir.Schedule(te.create_prim_func([A, B, C]))
    c = sch.get_block("C")
    i, j, kk = sch.get_loops(c)
    io, ii = sch.split(i, [None, tile])
    jo, ji = sch.split(j, [None, tile])
    ko, ki = sch.split(kk, [None, tile])
    sch.reorder(io, jo, ii, ji, ko, ki)
    sch.bind(io, "blockIdx.y")
    sch.bind(jo, "blockIdx.x")
    sch.bind(ii, "threadIdx.y")
    sch.bind(ji, "threadIdx.x")
    for idx in (0, 1):
        cache = sch.cache_read(c, idx, "shared")
        sch.compute_at(cache, ko)
        fused = sch.fuse(*sch.get_loops(cache)[-2:])
        if vector:
            rest, ty, tx, vec = sch.split(fused, [None, tile, tile // 4, 4])
            sch.vectorize(vec)
        else:
            rest, ty, tx = sch.split(fused, [None, tile, tile])
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
    a, b = _rand(m, k), _rand(k, n)
    return sch, [a, b, np.zeros((m, n), "float32")], {2: a @ b}


def gemm_local_acc(m=8, n=16, k=16, tile=8):
    """gemm_shared with the accumulator in registers ("local" cache_write) written back per thread."""
    sch, args, want = gemm_shared(m, n, k, tile)
    c = sch.get_block("C")
    acc = sch.cache_write(c, 0, "local")
    loops = sch.get_loops(c)
    sch.reverse_compute_at(acc, loops[3])
    return sch, args, want


CASES = {
    "elementwise": elementwise,
    "elementwise_ragged": lambda: elementwise(n=203, threads=32),
    "row_sum": row_sum,
    "gemm_shared": gemm_shared,
    "gemm_shared_ragged": lambda: gemm_shared(m=20, n=12, k=24, tile=8),
    "gemm_shared_float4": lambda: gemm_shared(vector=True),
    "gemm_local_acc": gemm_local_acc,
}


def _softmax(m, n):
    """Row softmax as four stages (max, exp, sum, divide): its Schedule, arguments and expected output."""
    A = te.placeholder((m, n), name="A")
    k1 = te.reduce_axis((0, n), name="k1")
    mx = te.compute((m,), lambda i: te.max(A[i, k1], axis=k1), name="row_max")
    e = te.compute((m, n), lambda i, j: te.exp(A[i, j] - mx[i]), name="expo")
    k2 = te.reduce_axis((0, n), name="k2")
    s = te.compute((m,), lambda i: te.sum(e[i, k2], axis=k2), name="row_sum")
    out = te.compute((m, n), lambda i, j: e[i, j] / s[i], name="softmax")
    a = _rand(m, n)
    z = np.exp(a - a.max(1, keepdims=True))
    return tir.Schedule(te.create_prim_func([A, out])), [a, np.zeros((m, n), "float32")], {1: z / z.sum(1, keepdims=True)}


def softmax(m=6, n=37):
    """Row softmax as four kernels (max, exp, sum, divide), intermediates in global workspaces."""
    from tessera.ops.gpu import auto_bind
    sch, args, expected = _softmax(m, n)
    return auto_bind(sch, 32), args, expected


def conv2d(n=1, c=3, h=9, w=7, f=4, kh=3, kw=3, pad=1):
    """NCHW conv2d with zero padding: a padding kernel and the convolution, both auto-bound."""
    from tessera.ops.gpu import auto_bind
    X = te.placeholder((n, c, h, w), name="X")
    W = te.placeholder((f, c, kh, kw), name="W")
    P = te.compute((n, c, h + 2 * pad, w + 2 * pad),
                   lambda b, ch, y, x: te.if_then_else(te.all(y >= pad, y < h + pad, x >= pad, x < w + pad),
                                                       X[b, ch, y - pad, x - pad], 0.0), name="pad")
    rc, ry, rx = te.reduce_axis((0, c), name="rc"), te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")
    oh, ow = h + 2 * pad - kh + 1, w + 2 * pad - kw + 1
    Y = te.compute((n, f, oh, ow), lambda b, o, y, x: te.sum(P[b, rc, y + ry, x + rx] * W[o, rc, ry, rx],
                                                              axis=[rc, ry, rx]), name="conv")
    sch = auto_bind(tir.Schedule(te.create_prim_func([X, W, Y])), 64)
    x, wt = _rand(n, c, h, w), _rand(f, c, kh, kw)
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ref = np.zeros((n, f, oh, ow), "float32")
    for i in range(kh):
        for j in range(kw):
            ref += np.einsum("bchw,oc->bohw", xp[:, :, i:i + oh, j:j + ow], wt[:, :, i, j])
    return sch, [x, wt, np.zeros((n, f, oh, ow), "float32")], {2: ref}


CASES.update({"softmax": softmax, "conv2d": conv2d})


def row_sum_tree(m=5, n=70, threads=32, op="sum"):
    """Each block reduces one row; its threads share the reduction (k_1 bound to threadIdx.x), summed
    through a shared-memory tree (n not a multiple of the threads)."""
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    red = te.sum if op == "sum" else te.max
    B = te.compute((m,), lambda i: red(A[i, k], axis=k), name="B")
    sch = tir.Schedule(te.create_prim_func([A, B]))
    i, kk = sch.get_loops(sch.get_block("B"))
    ko, ki = sch.split(kk, [None, threads])
    sch.reorder(i, ki, ko)
    sch.bind(i, "blockIdx.x")
    sch.bind(ki, "threadIdx.x")
    a = _rand(m, n)
    return sch, [a, np.zeros(m, "float32")], {1: a.sum(1) if op == "sum" else a.max(1)}


CASES.update({"row_sum_tree": row_sum_tree, "row_max_tree": lambda: row_sum_tree(m=3, n=100, threads=24, op="max")})


def gemm_tiled(m=18, n=10, k=10, batch=0):
    """ops.gpu.schedule_gemm_gpu (register tiles, shared A/B tiles, float4 copies, unrolled) on ragged
    sizes, with an optional batch dimension bound to blockIdx.z."""
    from tessera.ops.gpu import schedule_gemm_gpu
    lead = (batch,) if batch else ()
    A = te.placeholder(lead + (m, k), name="A")
    B = te.placeholder(lead + (k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    if batch:
        C = te.compute((batch, m, n), lambda b, i, j: te.sum(A[b, i, r] * B[b, r, j], axis=r), name="C")
    else:
        C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    sch = tir.Schedule(te.create_prim_func([A, B, C]))
    schedule_gemm_gpu(sch, sch.get_block("C"), tile_m=16, tile_n=16, tile_k=8, thread_m=2, thread_n=2)
    a, b = _rand(*lead, m, k), _rand(*lead, k, n)
    return sch, [a, b, np.zeros(lead + (m, n), "float32")], {2: a @ b}


CASES.update({"gemm_tiled": gemm_tiled, "batch_gemm_tiled": lambda: gemm_tiled(m=16, n=8, k=8, batch=2)})


def softmax_default(m=3, n=300):
    """Row softmax under ops.gpu.schedule_gpu_default: the max and sum rows reduced by a block of
    threads each (shared-memory trees), the elementwise parts one thread per element."""
    from tessera.ops.gpu import schedule_gpu_default
    sch, args, expected = _softmax(m, n)
    return schedule_gpu_default(sch, "opencl"), args, expected


CASES.update({"softmax_default": softmax_default})
