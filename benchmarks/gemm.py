"""fp32 GEMM 1024^3 on 2 threads: tessera's hand-written schedule (tiling, B packed in panels,
parallel, the register-tiled FMA micro-kernel via tensorize) beside numpy's BLAS in the same run;
the machine's fp32 FMA peak (a register-only FMA loop compiled by tessera's compiler driver); the
int8 GEMM through the int8 intrinsic (u8 x s8 -> s32) in int8-ops/s beside tessera's fp32 GEMM.

    python benchmarks/gemm.py [--size 1024] [--threads 2] [--steps] [--rounds 7] [--json out.json]
--steps also prints the README table: each optimization step (naive, blocking, vectorize, loop
permutation, packing, parallel, micro-kernel) with its GFLOPS.

Timing: tessera inside the compiled module (Module.time_evaluator); numpy around np.matmul. The
two are measured in alternating rounds (the machine is shared) and the best and median round of
each are reported, with the load average measured before the run.
"""
from __future__ import annotations

import ctypes
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import parser, pin_blas_threads, quiesce, report  # noqa: E402

# numpy's BLAS gets the same number of threads as tessera (set before numpy loads it)
pin_blas_threads()
import numpy as np  # noqa: E402

import tessera  # noqa: E402
from tessera import te, tir  # noqa: E402
from tessera.tir.schedule.examples.gemm import gemm_program, plain_gemm_program, schedule_gemm  # noqa: E402
from tessera.tir.tensor_intrin import x86  # noqa: E402

PEAK_SRC = r"""
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <time.h>
static double tsr_now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
/* fp32 FMA peak: every thread runs 12 independent chains of %(lanes)d-lane FMAs (more chains than
   FMA latency x FMA ports, so the FMA units never wait); returns seconds for `iters` rounds */
double fma_peak(int64_t iters, int32_t threads, float* sink) {
  double t0 = tsr_now();
  #pragma omp parallel num_threads(threads)
  {
    %(vt)s x = %(set1)s(1.0f), y = %(set1)s(1e-7f);
    %(vt)s a0 = x, a1 = x, a2 = x, a3 = x, a4 = x, a5 = x, a6 = x, a7 = x, a8 = x, a9 = x, a10 = x, a11 = x;
    for (int64_t i = 0; i < iters; ++i) {
      a0 = %(fma)s(a0, x, y); a1 = %(fma)s(a1, x, y); a2 = %(fma)s(a2, x, y); a3 = %(fma)s(a3, x, y);
      a4 = %(fma)s(a4, x, y); a5 = %(fma)s(a5, x, y); a6 = %(fma)s(a6, x, y); a7 = %(fma)s(a7, x, y);
      a8 = %(fma)s(a8, x, y); a9 = %(fma)s(a9, x, y); a10 = %(fma)s(a10, x, y); a11 = %(fma)s(a11, x, y);
      __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5));
    }
    %(vt)s s = %(add)s(%(add)s(%(add)s(a0, a1), %(add)s(a2, a3)), %(add)s(%(add)s(a4, a5), %(add)s(a6, a7)));
    s = %(add)s(s, %(add)s(%(add)s(a8, a9), %(add)s(a10, a11)));
    sink[omp_get_thread_num()] = s[0];
  }
  return tsr_now() - t0;
}
"""


def fma_peak_gflops(target, threads: int, rounds: int = 5) -> float:
    """The fp32 FMA peak of `threads` cores: a register-only FMA loop compiled by tessera's driver."""
    from tessera.runtime.c_compiler import compile_source

    wide = target.has_feature("avx512f")
    lanes = 16 if wide else 8
    src = PEAK_SRC % ({"lanes": lanes, "vt": "__m512" if wide else "__m256", "set1": "_mm512_set1_ps" if wide
                       else "_mm256_set1_ps", "fma": "_mm512_fmadd_ps" if wide else "_mm256_fmadd_ps",
                       "add": "_mm512_add_ps" if wide else "_mm256_add_ps"})
    lib = ctypes.CDLL(compile_source(src, target, name_hint="fma_peak"))
    lib.fma_peak.restype = ctypes.c_double
    lib.fma_peak.argtypes = [ctypes.c_int64, ctypes.c_int32, ctypes.POINTER(ctypes.c_float)]
    sink = (ctypes.c_float * 256)()
    iters = 20_000_000
    best = 0.0
    for _ in range(rounds):
        t = lib.fma_peak(iters, threads, sink)
        best = max(best, threads * iters * 12 * lanes * 2 / t / 1e9)
    return best


def numpy_round(a, b, c, number):
    t0 = time.perf_counter()
    for _ in range(number):
        np.matmul(a, b, out=c)
    return (time.perf_counter() - t0) / number


def alternate(lib, args, a, b, c_np, rounds, number=3):
    """(tessera seconds per call, numpy seconds per call) of each round, measured alternately."""
    lib(*args)
    np.matmul(a, b, out=c_np)
    ts, ns = [], []
    for _ in range(rounds):
        # each side after the other's spinning worker threads have parked (OpenBLAS's spin for a
        # while after a call and take a core from the next thing timed), then one untimed call
        quiesce()
        lib(*args)
        ts.append(min(lib.time_evaluator(number=number, repeat=1)(*args).results))
        quiesce()
        np.matmul(a, b, out=c_np)
        ns.append(numpy_round(a, b, c_np, number))
    return np.array(ts), np.array(ns)


def steps(n, threads, a, b, ref, kc=1024, mc=32, pack="te", rounds=7):
    """The README table: each optimization step of TVM's CPU GEMM tutorial, then the micro-kernel."""
    target = f"c -num-threads={threads}"
    flops = 2.0 * n ** 3

    def prog(pack=0):
        A = te.placeholder((n, n), name="A")
        B = te.placeholder((n, n), name="B")
        k = te.reduce_axis((0, n), name="k")
        if pack:
            Bp = te.compute((n // pack, n, pack), lambda jo, kk, ji: B[kk, jo * pack + ji], name="B_pack")
            C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * Bp[j // pack, k, j % pack], axis=k), name="C")
        else:
            C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        return te.create_prim_func([A, B, C])

    def tiled(pack=0, permute=False, vec=False, par=False):
        sch = tir.Schedule(prog(pack))
        if pack:
            lp = sch.get_loops(sch.get_block("B_pack"))
            sch.vectorize(lp[-1])
            if par:
                sch.parallel(lp[0])
        i, j, k = sch.get_loops(sch.get_block("C"))
        io, ii = sch.split(i, [None, 32])
        jo, ji = sch.split(j, [None, 32])
        ko, ki = sch.split(k, [None, 4])
        if permute:
            sch.reorder(io, jo, ko, ii, ki, ji)
        else:
            sch.reorder(io, jo, ko, ki, ii, ji)
        if vec:
            sch.vectorize(ji)
        if par:
            sch.parallel(io)
        return sch

    plans = [
        ("naive (the TE as written)", lambda: tir.Schedule(prog())),
        ("blocking 32x32, k by 4", lambda: tiled()),
        ("+ vectorize the 32 columns", lambda: tiled(vec=True)),
        ("+ loop permutation (i, k, j inner)", lambda: tiled(vec=True, permute=True)),
        ("+ array packing of B", lambda: tiled(pack=32, vec=True, permute=True)),
        ("+ parallel (2 threads)", lambda: tiled(pack=32, vec=True, permute=True, par=True)),
        (f"micro-kernel 4x16 via tensorize (kc={kc}, mc={mc})", lambda: schedule_gemm(
            plain_gemm_program(n, n, n) if pack == "cache_read" else gemm_program(n, n, n, nr=16), mr=4, nr=16,
            kc=kc, mc=mc, target=target, pack=pack)),
    ]
    rows = []
    c = np.zeros((n, n), np.float32)
    for name, plan in plans:
        lib = tessera.build(plan(), target=target)
        c[:] = 0
        lib(a, b, c)
        np.testing.assert_allclose(c, ref, rtol=1e-3, atol=1e-2)
        slow = name.startswith(("naive", "blocking 32x32"))
        res = lib.time_evaluator(number=1, repeat=2 if slow else max(5, rounds))(a, b, c)
        rows.append({"step": name, "ms": min(res.results) * 1e3, "GFLOPS": flops / min(res.results) / 1e9})
    return rows


def main():
    p = parser(__doc__)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7, help="alternating measurement rounds")
    p.add_argument("--mr", type=int, default=None, help="micro-kernel rows (default: by target)")
    p.add_argument("--nr", type=int, default=None)
    p.add_argument("--kc", type=int, default=1024, help="k slice of packed B (1024: all of it at once, one "
                   "parallel region for the packing and one for the tiles; fewer barriers wait on a loaded machine)")
    p.add_argument("--mc", type=int, default=32, help="rows of A per parallel block")
    p.add_argument("--pack", choices=("te", "cache_read"), default=None,
                   help="pack B in the tensor expression, or by the schedule (cache_read + compute_at + "
                        "transform_layout; the default where those primitives exist)")
    p.add_argument("--steps", action="store_true", help="also print the optimization-steps table")
    p.add_argument("--no-int8", action="store_true")
    args = p.parse_args()
    n, threads = args.size, args.threads
    target = tessera.Target(f"c -num-threads={threads}")
    load = os.getloadavg()[0]
    flops = 2.0 * n ** 3
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    ref = a @ b

    if target.has_feature("avx512f"):
        mr, nr = args.mr or 8, args.nr or 32
    else:
        mr, nr = args.mr or 4, args.nr or 16
    pack = args.pack or ("cache_read" if hasattr(tir.Schedule, "cache_read") else "te")
    prog = plain_gemm_program(n, n, n) if pack == "cache_read" else gemm_program(n, n, n, nr=nr)
    sch = schedule_gemm(prog, mr=mr, nr=nr, kc=args.kc, mc=args.mc, target=target, pack=pack)
    lib = tessera.build(sch, target=target)
    c = np.zeros((n, n), np.float32)
    lib(a, b, c)
    np.testing.assert_allclose(c, ref, rtol=1e-3, atol=1e-2)
    c_np = np.empty_like(c)
    ts, ns = alternate(lib, (a, b, c), a, b, c_np, args.rounds)
    peak = fma_peak_gflops(target, threads)
    g_t, g_n = flops / ts.min() / 1e9, flops / ns.min() / 1e9
    gm_t, gm_n = flops / np.median(ts) / 1e9, flops / np.median(ns) / 1e9
    intrin = x86.gemm_intrin_for(target, "float32", tiles=[(mr, nr)])
    rows = [
        {"kernel": "numpy (OpenBLAS)", "GFLOPS best": g_n, "GFLOPS median": gm_n, "vs numpy": 1.0,
         "% of FMA peak": 100 * g_n / peak},
        {"kernel": f"tessera {mr}x{nr} kc={args.kc} mc={args.mc}", "GFLOPS best": g_t, "GFLOPS median": gm_t,
         "vs numpy": g_t / g_n, "% of FMA peak": 100 * g_t / peak},
        {"kernel": f"fp32 FMA peak ({threads} threads)", "GFLOPS best": peak, "GFLOPS median": "",
         "vs numpy": peak / g_n, "% of FMA peak": 100.0},
    ]
    extra = {"load_average": load, "intrinsic": intrin, "size": n, "threads": threads, "pack": pack,
             "goal_vs_numpy": 0.8, "met": bool(g_t / g_n >= 0.8)}
    if not args.no_int8:
        isa = "vnni" if all(target.has_feature(f) for f in x86.VNNI) else "avx2"
        tiles = [t for t in x86.INT8_GEMM[isa] if n % t[0] == 0 and n % t[1] == 0]
        i8 = x86.gemm_intrin_for(target, "int8", tiles=tiles)
        mr8, nr8 = next((t for t in tiles if x86.int8_gemm_name(isa, *t) == i8))
        prog8 = plain_gemm_program(n, n, n, "int8") if pack == "cache_read" else \
            gemm_program(n, n, n, nr=nr8, dtype="int8")
        sch8 = schedule_gemm(prog8, mr=mr8, nr=nr8, kc=args.kc, mc=args.mc, intrin=i8, target=target, pack=pack)
        lib8 = tessera.build(sch8, target=target)
        a8 = rng.integers(0, 256, (n, n), dtype=np.uint8)
        b8 = rng.integers(-128, 128, (n, n), dtype=np.int8)
        c8 = np.zeros((n, n), np.int32)
        lib8(a8, b8, c8)
        np.testing.assert_array_equal(c8, a8.astype(np.int32) @ b8.astype(np.int32))
        r8 = min(lib8.time_evaluator(number=3, repeat=args.rounds)(a8, b8, c8).results)
        ops8 = flops / r8 / 1e9
        rows.append({"kernel": f"tessera int8 {mr8}x{nr8} (u8 x s8 -> s32)", "GOPS best": ops8,
                     "vs tessera fp32": ops8 / g_t})
        extra.update({"int8_intrinsic": i8, "int8_gops": ops8, "int8_vs_fp32": ops8 / g_t, "int8_goal": 2.0})
    print(f"# fp32 GEMM {n}^3, {threads} threads, micro-kernel {intrin}, B packed by {pack}; load average before "
          f"the run: {load:.2f}")
    report("gemm", rows, args.json, extra)
    if args.steps:
        print()
        srows = steps(n, threads, a, b, ref, args.kc, args.mc, pack, args.rounds)
        for r in srows:
            r["vs numpy (best)"] = r["GFLOPS"] / g_n
        srows.append({"step": "numpy (OpenBLAS), best round above", "ms": flops / g_n / 1e6, "GFLOPS": g_n,
                      "vs numpy (best)": 1.0})
        report("gemm_steps", srows, None)


if __name__ == "__main__":
    main()
