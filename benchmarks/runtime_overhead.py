"""The compiler's and runtime's own costs: call overhead, TE -> C time, build time cold and cached.

    python benchmarks/runtime_overhead.py [--json out.json]
Goals (issue 2): call < 20 us, Python side (TE GEMM -> C source) < 20 ms, cached build < 10 ms;
(issue 3): applying a 12-primitive GEMM schedule, lowering it and generating C < 30 ms (what the
tuner pays per candidate).
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
from _common import parser, report  # noqa: E402

import tessera  # noqa: E402
from tessera import te, tir  # noqa: E402


def _median_time(fn, repeat=7, number=1, clock=time.perf_counter):
    ts = []
    for _ in range(repeat):
        t0 = clock()
        for _ in range(number):
            fn()
        ts.append((clock() - t0) / number)
    return statistics.median(ts)


def gemm_program(n=1024, tag=""):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C" + tag)
    return [A, B, C]


def main():
    args = parser(__doc__).parse_args()
    from tessera.codegen import c as codegen_c
    from tessera.runtime.c_compiler import compile_source
    from tessera.runtime.module import Module
    from tessera.target import Target
    from tessera.tir.transform import lower

    target = Target("c")
    rows = []

    # 1. call overhead of a tiny kernel
    A = te.placeholder((4,), name="A")
    B = te.placeholder((4,), name="B")
    C = te.compute((4,), lambda i: A[i] + B[i], name="C")
    lib = tessera.build(te.create_prim_func([A, B, C]))
    a, b, c = (tessera.nd.array(np.ones(4, "float32")) for _ in range(3))
    na, nb, nc = (np.ones(4, "float32") for _ in range(3))
    call_nd = _median_time(lambda: lib(a, b, c), repeat=7, number=20000)
    call_np = _median_time(lambda: lib(na, nb, nc), repeat=7, number=20000)
    rows.append({"figure": "call overhead, 3 NDArrays", "value": call_nd * 1e6, "unit": "us", "goal": "< 20",
                 "met": call_nd * 1e6 < 20})
    rows.append({"figure": "call overhead, 3 numpy arrays", "value": call_np * 1e6, "unit": "us", "goal": "-",
                 "met": ""})

    # 2. Python side: TE GEMM -> C source
    def te_to_c():
        func = te.create_prim_func(gemm_program())
        return codegen_c.generate_module([lower(func, target)], target)

    te_to_c()  # warm imports
    py_side = _median_time(te_to_c, repeat=15)
    rows.append({"figure": "TE GEMM -> C source (create_prim_func+lower+codegen)", "value": py_side * 1e3,
                 "unit": "ms", "goal": "< 20", "met": py_side * 1e3 < 20})

    # 2b. Python side of one tuning candidate: apply a 12-primitive GEMM schedule (tiling, reorder,
    #     parallel, vectorized packing, tensorize), lower it and generate C
    from tessera.tir.schedule.examples.gemm import gemm_program as packed_gemm

    packed = packed_gemm(1024, 1024, 1024, nr=16)
    intrin = "x86_avx2_fma_gemm_4x16_f32"

    def schedule_12(func):
        sch = tir.Schedule(func)
        c = sch.get_block("C")                                    # 1
        i, j, k = sch.get_loops(c)                                # 2
        i0, i1, i2 = sch.split(i, [None, 16, 4])                  # 3
        j0, j1 = sch.split(j, [None, 16])                         # 4
        k0, k1 = sch.split(k, [None, 256])                        # 5
        sch.reorder(k0, i0, j0, i1, i2, j1, k1)                   # 6
        sch.parallel(i0)                                          # 7
        sch.tensorize(i2, intrin)                                 # 8 (blockize + match + bind)
        p = sch.get_block("B_pack")                               # 9
        jo, kk, ji = sch.get_loops(p)                             # 10
        sch.parallel(jo)                                          # 11
        sch.vectorize(ji)                                         # 12
        return sch

    def sched_to_c():
        sch = schedule_12(packed)
        return codegen_c.generate_module([lower(sch.mod["main"], target)], target)

    sched_to_c()
    n_prims = len(schedule_12(packed).trace)
    sched_side = _median_time(sched_to_c, repeat=15)
    apply_only = _median_time(lambda: schedule_12(packed), repeat=15)
    sched_cpu = _median_time(sched_to_c, repeat=15, clock=time.thread_time)
    rows.append({"figure": f"{n_prims}-primitive GEMM schedule + lower + C source", "value": sched_side * 1e3,
                 "unit": "ms", "goal": "< 30", "met": sched_side * 1e3 < 30})
    rows.append({"figure": "  the same, CPU time of this thread (load-independent)", "value": sched_cpu * 1e3,
                 "unit": "ms", "goal": "< 30", "met": sched_cpu * 1e3 < 30})
    rows.append({"figure": "  of which applying the schedule", "value": apply_only * 1e3, "unit": "ms",
                 "goal": "-", "met": ""})

    # 3. build cold (fresh cache dir) and from the cache
    source = te_to_c()
    with tempfile.TemporaryDirectory() as cache:
        old = os.environ.get("TESSERA_CACHE_DIR")
        os.environ["TESSERA_CACHE_DIR"] = cache
        try:
            t0 = time.perf_counter()
            path = compile_source(source, target)
            cold = time.perf_counter() - t0
            if not Path(path).exists():
                raise SystemExit(f"compile_source returned {path}, which does not exist")
            cached = _median_time(lambda: Module(compile_source(source, target)), repeat=15)
            full = _median_time(lambda: tessera.build(te.create_prim_func(gemm_program())), repeat=7)
        finally:
            if old is None:
                os.environ.pop("TESSERA_CACHE_DIR", None)
            else:
                os.environ["TESSERA_CACHE_DIR"] = old
    rows.append({"figure": "build cold (gcc, GEMM)", "value": cold * 1e3, "unit": "ms", "goal": "-", "met": ""})
    rows.append({"figure": "build from cache (lookup + load module)", "value": cached * 1e3, "unit": "ms",
                 "goal": "< 10", "met": cached * 1e3 < 10})
    rows.append({"figure": "tessera.build end to end, cache warm", "value": full * 1e3, "unit": "ms",
                 "goal": "-", "met": ""})
    report("runtime_overhead", rows, args.json)


if __name__ == "__main__":
    main()
