"""GPU GEMM: tessera's CUDA kernels beside cuBLAS in the same run, where an NVIDIA GPU is at hand.

    python benchmarks/gpu_gemm.py [--size 4096] [--json out.json] [--opencl]

fp32: ops.gpu.schedule_gemm_gpu (64x64 block tiles through shared memory, 4x4 register tiles per
thread, float4 cooperative copies), untuned. fp16 -> fp32: the tensor-core intrinsic
cuda_wmma_16x16x16_f16f32 through tensorize, one warp per 16x16 tile, untuned. The reference is
cuBLAS through torch (or cupy's matmul when torch is absent), timed with CUDA events around the
same number of calls; the ratio tessera / cuBLAS in GFLOPS is what to quote. Without a GPU the
script says so (and with --opencl times the fp32 kernel on the OpenCL device beside numpy instead,
at --size, default 512 there).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from _common import parser, report  # noqa: E402

import tessera  # noqa: E402
import tessera.backend  # noqa: E402
from tessera import te, tir  # noqa: E402
from tessera.ops.gpu import schedule_gemm_gpu  # noqa: E402
from tessera.runtime import cuda as cuda_rt  # noqa: E402


def fp32_gemm(n):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = tir.Schedule(te.create_prim_func([A, B, C]))
    return schedule_gemm_gpu(sch, sch.get_block("C"))


def fp16_gemm(n):
    A = te.placeholder((n, n), name="A", dtype="float16")
    B = te.placeholder((n, n), name="B", dtype="float16")
    r = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, r].astype("float32") * B[r, j].astype("float32"), axis=r),
                   name="C")
    sch = tir.Schedule(te.create_prim_func([A, B, C]))
    c = sch.get_block("C")
    i, j, kk = sch.get_loops(c)
    io, ii = sch.split(i, [None, 16])
    jo, ji = sch.split(j, [None, 16])
    ko, ki = sch.split(kk, [None, 16])
    sch.reorder(io, jo, ko, ii, ji, ki)
    sch.bind(io, "blockIdx.y")
    sch.bind(jo, "blockIdx.x")
    sch.decompose_reduction(c, ko)
    sch.tensorize(ii, "cuda_wmma_16x16x16_f16f32")
    return sch


def _reference(dtype):
    """(name, matmul(a, b) on device arrays, array maker, event timer) of cuBLAS via torch or cupy."""
    try:
        import torch
        if torch.cuda.is_available():
            def timer(fn, number):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                fn()
                s.record()
                for _ in range(number):
                    fn()
                e.record()
                torch.cuda.synchronize()
                return s.elapsed_time(e) * 1e-3 / number
            tdt = torch.float16 if dtype == "float16" else torch.float32
            return "cuBLAS (torch)", lambda a, b: torch.matmul(a, b), lambda x: torch.from_numpy(x).cuda().to(tdt), timer
    except ImportError:
        pass
    import cupy as cp

    def timer(fn, number):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        fn()
        s.record()
        for _ in range(number):
            fn()
        e.record()
        e.synchronize()
        return cp.cuda.get_elapsed_time(s, e) * 1e-3 / number
    return "cuBLAS (cupy)", lambda a, b: cp.matmul(a, b), lambda x: cp.asarray(x), timer


def run_cuda(n, number, rows):
    import cupy as cp
    rng = np.random.default_rng(0)
    flops = 2.0 * n ** 3
    for label, dtype, sch in (("fp32", "float32", fp32_gemm(n)), ("fp16->fp32 wmma", "float16", fp16_gemm(n))):
        a = rng.standard_normal((n, n)).astype(dtype)
        b = rng.standard_normal((n, n)).astype(dtype)
        mod = tessera.build(sch, target="cuda")
        da, db = cp.asarray(a), cp.asarray(b)
        dc = cp.zeros((n, n), np.float32)
        mod(da, db, dc)
        want = a.astype(np.float32) @ b.astype(np.float32)
        err = float(np.abs(cp.asnumpy(dc) - want).max() / max(1.0, np.abs(want).max()))
        t_ours = mod.time_evaluator(number=number, repeat=3)(da, db, dc).median
        name, mm, make, timer = _reference(dtype)
        ra, rb = make(a), make(b)
        t_ref = timer(lambda: mm(ra, rb), number)
        rows.append({"gemm": label, "n": n, "tessera GFLOPS": flops / t_ours * 1e-9,
                     f"{name} GFLOPS": flops / t_ref * 1e-9, "ratio": t_ref / t_ours, "rel err": err})


def run_opencl(n, number, rows):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype("float32")
    b = rng.standard_normal((n, n)).astype("float32")
    c = np.zeros((n, n), "float32")
    mod = tessera.build(fp32_gemm(n), target="opencl")
    mod(a, b, c)
    err = float(np.abs(c - a @ b).max() / np.abs(a @ b).max())
    t_ours = mod.time_evaluator(number=number, repeat=3)(a, b, c).median
    import time
    ts = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(number):
            a @ b
        ts.append((time.perf_counter() - t0) / number)
    t_ref = sorted(ts)[1]
    flops = 2.0 * n ** 3
    rows.append({"gemm": "fp32 (OpenCL)", "n": n, "tessera GFLOPS": flops / t_ours * 1e-9,
                 "numpy GFLOPS": flops / t_ref * 1e-9, "ratio": t_ref / t_ours, "rel err": err})


def main():
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=None)
    p.add_argument("--number", type=int, default=10)
    p.add_argument("--opencl", action="store_true", help="without a GPU: time the fp32 kernel on OpenCL")
    args = p.parse_args()
    rows = []
    if cuda_rt.available():
        run_cuda(args.size or 4096, args.number, rows)
        gpu = __import__("cupy").cuda.runtime.getDeviceProperties(0)["name"].decode()
    else:
        print("no NVIDIA GPU (with cupy) is at hand here: the CUDA GEMMs were not run")
        gpu = None
        if args.opencl:
            run_opencl(args.size or 512, args.number, rows)
    report("gpu_gemm", rows, args.json, {"gpu": gpu})


if __name__ == "__main__":
    main()
