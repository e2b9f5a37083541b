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


def gemm_shared(m=32, n=32, k=16, tile=8, vector=False):
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


def gemm_local_acc(m=32, n=32, k=16, tile=8):
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
