"""tessera's tile-language kernels (tessera.language.examples) beside their references, one run, 2
threads, ratios printed (> 1: tessera is faster):

    vector add       vs numpy (np.add) and vs the machine's copy bandwidth (an OpenMP memcpy)
    row softmax      vs numpy (max, exp, sum, divide: four passes) and torch.softmax
    layer norm       vs numpy and torch.nn.functional.layer_norm
    matmul fp32      1024^3 and 4096x4096x1024, autotuned over CONFIGS, vs numpy's BLAS and tessera's
                     own TE GEMM (the hand-written micro-kernel schedule of benchmarks/gemm.py)
    attention        flash-attention forward vs a numpy reference and torch's scaled_dot_product_attention

    python benchmarks/tile.py [--threads 2] [--rounds 5] [--quick] [--json out.json]

Timing: tessera inside its compiled module (kernel.time: the C timer loop), the references around
their Python calls; the two are measured in alternating rounds (the machine is shared), the best
round of each compared. Every output is checked against the reference first.
"""
from __future__ import annotations

import ctypes
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import parser, pin_blas_threads, quiesce, report  # noqa: E402

# numpy's BLAS gets the same number of threads as tessera (set before numpy loads it)
pin_blas_threads()
import numpy as np  # noqa: E402

import tessera  # noqa: E402
import tessera.language as tl  # noqa: E402
from tessera.language.examples import add, attention, layer_norm, matmul, softmax  # noqa: E402

CONFIGS = [tessera.Config({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 64}),
           tessera.Config({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128}),
           tessera.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128}),
           tessera.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 256}),
           tessera.Config({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 256})]

COPY_SRC = r"""
#include <omp.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
/* seconds for one copy of n floats by `threads` threads, each its contiguous share (memcpy) */
double copy_secs(const float* src, float* dst, int64_t n, int32_t threads) {
  double t0 = now();
  #pragma omp parallel num_threads(threads)
  {
    int32_t t = omp_get_thread_num(), p = omp_get_num_threads();
    int64_t lo = n * t / p, hi = n * (t + 1) / p;
    memcpy(dst + lo, src + lo, (size_t)(hi - lo) * sizeof(float));
  }
  return now() - t0;
}
"""


def best_of(fn, rounds):
    out = []
    for _ in range(rounds):
        quiesce()
        out.append(fn())
    return min(out)


def py_secs(fn, number=1):
    fn()
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def alternate(tile_secs, refs, rounds):
    """Best seconds of the tile kernel and of each reference, measured in alternating rounds."""
    t, r = [], {k: [] for k in refs}
    for _ in range(rounds):
        quiesce()
        t.append(tile_secs())
        for k, fn in refs.items():
            quiesce()
            r[k].append(fn())
    return min(t), {k: min(v) for k, v in r.items()}


def copy_bandwidth(target, n, threads, rounds):
    """GB/s of an OpenMP memcpy of n floats (read + write counted)."""
    from tessera.runtime.c_compiler import compile_source

    lib = ctypes.CDLL(compile_source(COPY_SRC, target, name_hint="copy_bw"))
    lib.copy_secs.restype = ctypes.c_double
    lib.copy_secs.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32]
    src = np.ones(n, np.float32)
    dst = np.empty_like(src)
    secs = min(lib.copy_secs(src.ctypes.data, dst.ctypes.data, n, threads) for _ in range(rounds * 3))
    return 2 * n * 4 / secs / 1e9


def main():
    p = parser(__doc__)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="smaller problems (a smoke run)")
    args = p.parse_args()
    threads, rounds, quick = args.threads, args.rounds, args.quick
    T = f"c -num-threads={threads}"
    target = tessera.Target(T)
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    load = os.getloadavg()[0]
    rows = []

    # vector add ---------------------------------------------------------------------------
    n = (1 << 20) if quick else (1 << 24)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    z = np.empty_like(x)
    grid = (tl.cdiv(n, 4096),)
    add[grid](x, y, z, n, BLOCK=4096, target=T)
    np.testing.assert_array_equal(z, x + y)
    ts, ref = alternate(lambda: min(add.time(x, y, z, n, BLOCK=4096, grid=grid, target=T, number=5, repeat=1).results),
                        {"numpy": lambda: py_secs(lambda: np.add(x, y, out=z), 5)}, rounds)
    bw = 3 * n * 4 / ts / 1e9
    copy = copy_bandwidth(target, n, threads, rounds)
    rows.append({"kernel": f"vector add {n}", "tessera ms": ts * 1e3, "numpy ms": ref["numpy"] * 1e3,
                 "vs numpy": ref["numpy"] / ts, "GB/s": bw, "vs copy bandwidth": bw / copy})

    # softmax, layer norm --------------------------------------------------------------------
    m, cols = (512, 1024) if quick else (4096, 1024)
    xs = rng.standard_normal((m, cols), dtype=np.float32)
    ys = np.empty_like(xs)
    softmax[(m,)](xs, ys, cols, cols, cols, BLOCK=1024, target=T)
    e = np.exp(xs - xs.max(1, keepdims=True))
    np.testing.assert_allclose(ys, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)

    def np_softmax():
        e = np.exp(xs - xs.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    refs = {"numpy": lambda: py_secs(np_softmax, 3)}
    if torch is not None:
        tx = torch.from_numpy(xs)
        refs["torch"] = lambda: py_secs(lambda: torch.softmax(tx, 1), 5)
    ts, ref = alternate(lambda: min(softmax.time(xs, ys, cols, cols, cols, BLOCK=1024, grid=(m,), target=T,
                                                 number=5, repeat=1).results), refs, rounds)
    rows.append({"kernel": f"softmax {m}x{cols}", "tessera ms": ts * 1e3, "numpy ms": ref["numpy"] * 1e3,
                 "vs numpy": ref["numpy"] / ts, "torch ms": ref.get("torch", float("nan")) * 1e3,
                 "vs torch": ref.get("torch", float("nan")) / ts})

    w, b = rng.random(cols, dtype=np.float32), rng.random(cols, dtype=np.float32)
    layer_norm[(m,)](xs, ys, w, b, cols, 1e-5, BLOCK=1024, target=T)

    def np_layer_norm():
        mu = xs.mean(1, keepdims=True)
        return (xs - mu) / np.sqrt(xs.var(1, keepdims=True) + 1e-5) * w + b

    np.testing.assert_allclose(ys, np_layer_norm(), rtol=1e-4, atol=1e-4)
    refs = {"numpy": lambda: py_secs(np_layer_norm, 3)}
    if torch is not None:
        tw, tb = torch.from_numpy(w), torch.from_numpy(b)
        refs["torch"] = lambda: py_secs(lambda: torch.nn.functional.layer_norm(tx, (cols,), tw, tb, 1e-5), 5)
    ts, ref = alternate(lambda: min(layer_norm.time(xs, ys, w, b, cols, 1e-5, BLOCK=1024, grid=(m,), target=T,
                                                    number=5, repeat=1).results), refs, rounds)
    rows.append({"kernel": f"layer norm {m}x{cols}", "tessera ms": ts * 1e3, "numpy ms": ref["numpy"] * 1e3,
                 "vs numpy": ref["numpy"] / ts, "torch ms": ref.get("torch", float("nan")) * 1e3,
                 "vs torch": ref.get("torch", float("nan")) / ts})

    # matmul -----------------------------------------------------------------------------------
    db = os.path.join(tempfile.mkdtemp(prefix="tile_bench_"), "autotune.jsonl")
    tuned = tl.autotune(configs=CONFIGS, key=["M", "N", "K"], database=db)(matmul)
    shapes = [(256, 256, 256)] if quick else [(1024, 1024, 1024), (4096, 4096, 1024)]
    for M, N, K in shapes:
        A = rng.standard_normal((M, K), dtype=np.float32)
        B = rng.standard_normal((K, N), dtype=np.float32)
        C = np.zeros((M, N), np.float32)
        margs = (A, B, C, M, N, K, K, 1, N, 1, N, 1)

        def grid(meta, M=M, N=N):
            return tl.cdiv(M, meta["BLOCK_M"]), tl.cdiv(N, meta["BLOCK_N"])

        tuned[grid](*margs, target=T)
        np.testing.assert_allclose(C, A @ B, rtol=1e-3, atol=1e-2)
        best = next(iter(tuned.best[k] for k in tuned.best if k[1] == (M, N, K)))
        te_gemm = tessera_te_gemm(M, N, K, target)
        refs = {"numpy": lambda: py_secs(lambda: np.matmul(A, B, out=C_np), 2)}
        C_np = np.empty_like(C)
        if te_gemm is not None:
            C_te = np.zeros_like(C)
            te_gemm(A, B, C_te)
            np.testing.assert_allclose(C_te, A @ B, rtol=1e-3, atol=1e-2)
            refs["te"] = lambda: min(te_gemm.time_evaluator(number=2, repeat=1)(A, B, C_te).results)
        ts, ref = alternate(lambda: min(matmul.time(*margs, grid=grid, target=T, number=2, repeat=1,
                                                    **best.kwargs).results), refs, rounds)
        fl = 2.0 * M * N * K
        rows.append({"kernel": f"matmul {M}x{N}x{K} fp32 {best.kwargs['BLOCK_M']}x{best.kwargs['BLOCK_N']}"
                               f"x{best.kwargs['BLOCK_K']}", "tessera ms": ts * 1e3, "numpy ms": ref["numpy"] * 1e3,
                     "vs numpy": ref["numpy"] / ts, "GFLOPS": fl / ts / 1e9,
                     "TE GEMM ms": ref.get("te", float("nan")) * 1e3, "vs TE GEMM": ref.get("te", float("nan")) / ts})

    # attention --------------------------------------------------------------------------------
    bh, seq, d = (4, 256, 64) if quick else (16, 1024, 64)
    q, k, v = (rng.standard_normal((bh, seq, d), dtype=np.float32) for _ in range(3))
    o = np.empty_like(q)
    scale = 1.0 / np.sqrt(d)
    agrid = (tl.cdiv(seq, 64), bh)
    attention[agrid](q, k, v, o, seq, scale, D=d, BLOCK_M=64, BLOCK_N=64, target=T)

    def np_attention():
        s = np.matmul(q, k.transpose(0, 2, 1)) * scale
        p = np.exp(s - s.max(-1, keepdims=True))
        return np.matmul(p / p.sum(-1, keepdims=True), v)

    np.testing.assert_allclose(o, np_attention(), rtol=1e-4, atol=1e-4)
    refs = {"numpy": lambda: py_secs(np_attention, 1)}
    if torch is not None:
        tq, tk, tv = (torch.from_numpy(t) for t in (q, k, v))
        refs["torch"] = lambda: py_secs(lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv), 2)
    ts, ref = alternate(lambda: min(attention.time(q, k, v, o, seq, scale, D=d, BLOCK_M=64, BLOCK_N=64, grid=agrid,
                                                   target=T, number=2, repeat=1).results), refs, rounds)
    rows.append({"kernel": f"attention {bh}x{seq}x{d}", "tessera ms": ts * 1e3, "numpy ms": ref["numpy"] * 1e3,
                 "vs numpy": ref["numpy"] / ts, "torch ms": ref.get("torch", float("nan")) * 1e3,
                 "vs torch": ref.get("torch", float("nan")) / ts})

    print(f"# tile-language kernels, {threads} threads, target {target}; copy bandwidth {copy:.1f} GB/s; "
          f"load average before the run {load:.2f}")
    report("tile", rows, args.json, {"threads": threads, "copy_GBps": copy, "load_average": load,
                                     "goals": {"matmul vs numpy": 0.9, "softmax/layer norm vs numpy": 1.5,
                                               "softmax/layer norm vs torch": 1.0, "attention vs torch": 1.0}})


def tessera_te_gemm(M, N, K, target):
    """tessera's TE GEMM with the hand-written micro-kernel schedule (benchmarks/gemm.py's), or None
    where the target has no GEMM micro-kernel."""
    from tessera import tir
    from tessera.tir.schedule.examples.gemm import plain_gemm_program, schedule_gemm

    avx512 = target.has_feature("avx512f")
    mr, nr = (8, 32) if avx512 else (4, 16)
    if not (target.has_feature("avx2") or avx512) or M % mr or N % nr:
        return None
    sch = schedule_gemm(plain_gemm_program(M, N, K), mr=mr, nr=nr, kc=min(K, 1024), mc=32, target=target,
                        pack="cache_read" if hasattr(tir.Schedule, "cache_read") else "te")
    return tessera.build(sch, target=target)


if __name__ == "__main__":
    main()
