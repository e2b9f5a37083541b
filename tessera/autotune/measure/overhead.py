"""Where measurement time goes, per candidate: `python -m tessera.autotune.measure.overhead`.

    python -m tessera.autotune.measure.overhead --size 1024 --target "c -num-threads=2" [--json out.json]

Builds and measures a batch of GEMM candidates (the hand schedule of tir/schedule/examples/gemm.py
over a grid of kc x mc where the target has its micro-kernel, else loop schedules) twice, with a
compiler cache of its own (a temporary folder): cold (every candidate compiled) and warm (the
compiler cache hit). Prints per candidate: the builder's
work apart from the C compiler (trace replay, lowering, rendering: build_secs - compile_secs), the
compiler's time, the builder's wall time per candidate for the batch, and the runner's overhead
(its wall time minus the time inside the candidate's calls: messages, loading the library, copying
inputs, checking outputs), with the trials per second of the whole batch.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import tempfile
import time

from ...errors import TesseraError
from ...target import Target
from ...tir import Schedule
from ...tir.schedule.examples import gemm
from ..workload import Workload
from .builder import LocalBuilder
from .candidate import MeasureCandidate
from .runner import LocalRunner


def gemm_candidates(size: int, target: str, count: int) -> list:
    """Up to `count` GEMM candidates of one workload (see the module docstring)."""
    func = gemm.gemm_program(size, size, size, nr=16)
    wl = Workload(func)
    out = []
    kcs = [k for k in (64, 128, 256, 512, 32, 16) if size % k == 0]
    mcs = [m for m in (32, 64, 128, 256, 16, 8) if size % m == 0]
    for kc, mc in itertools.product(kcs, mcs):
        if len(out) == count:
            break
        try:
            sch = gemm.schedule_gemm(func, mr=4, nr=16, kc=kc, mc=mc, target=target)
        except TesseraError:
            break
        out.append(MeasureCandidate(wl, sch.trace.as_json()))
    factors = [f for f in (4, 8, 16, 32, 64) if size % f == 0]
    for fi, fj in itertools.product(factors, factors):
        if len(out) >= count:
            break
        sch = Schedule(func)
        i, j, k = sch.get_loops(sch.get_block("C"))
        io, ii = sch.split(i, [None, fi])
        jo, ji = sch.split(j, [None, fj])
        sch.reorder(io, jo, k, ii, ji)
        sch.parallel(io)
        sch.vectorize(ji)
        out.append(MeasureCandidate(wl, sch.trace.as_json()))
    return out


def run(size: int, target: str, count: int, workers: int | None, runner_kw: dict) -> dict:
    """The figures of the module docstring (a fresh compiler cache for the workers)."""
    saved = os.environ.get("TESSERA_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="tessera-overhead-") as tmp:
        os.environ["TESSERA_CACHE_DIR"] = tmp       # the workers inherit it: nothing compiled before
        try:
            return _run(size, target, count, workers, runner_kw)
        finally:
            if saved is None:
                os.environ.pop("TESSERA_CACHE_DIR", None)
            else:
                os.environ["TESSERA_CACHE_DIR"] = saved


def _run(size: int, target: str, count: int, workers: int | None, runner_kw: dict) -> dict:
    target = str(Target(target))
    cands = gemm_candidates(size, target, count)
    figures = {"size": size, "target": target, "candidates": len(cands), "runner": runner_kw}
    with LocalBuilder(max_workers=workers) as builder, LocalRunner(**runner_kw) as runner:
        builder.build([MeasureCandidate(cands[0].workload, [[], []])], target)   # workers up: not counted
        runner.prepare(cands[0].workload, target)                               # the reference: not counted
        for label in ("cold", "warm"):
            t0 = time.perf_counter()
            brs = builder.build(cands, target)
            t1 = time.perf_counter()
            res = runner.run(cands, brs, target)
            t2 = time.perf_counter()
            ok = [r for r in res if r.ok]
            n = len(cands)
            figures[label] = {
                "builder_wall_ms_per_candidate": (t1 - t0) / n * 1e3,
                "build_ms_without_compiler": statistics.mean(b.build_secs - b.compile_secs for b in brs) * 1e3,
                "compiler_ms": statistics.mean(b.compile_secs for b in brs) * 1e3,
                "runner_wall_ms_per_candidate": (t2 - t1) / n * 1e3,
                "runner_overhead_ms": statistics.mean([r.run_wall_secs - r.kernel_secs for r in ok] or [0.0]) * 1e3,
                "kernel_ms_per_candidate": statistics.mean(r.kernel_secs for r in res) * 1e3,
                "trials_per_second": n / (t2 - t0),
                "errors": sorted({r.error_kind for r in res if not r.ok}),
                "best_gflops": max((2 * size ** 3 / r.mean_secs / 1e9 for r in ok), default=0.0),
            }
    return figures


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tessera.autotune.measure.overhead", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--target", default="c -num-threads=2")
    p.add_argument("--count", type=int, default=16)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--number", type=int, default=3)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--min-repeat-ms", type=int, default=100)
    p.add_argument("--no-warmup", action="store_true",
                   help="the checked call stands for the timer's warm-up call (LocalRunner(warmup=False))")
    p.add_argument("--passive", action="store_true",
                   help="measure with OMP_WAIT_POLICY=PASSIVE (a machine shared with other work)")
    p.add_argument("--json", default=None, help="also write the figures here")
    a = p.parse_args(argv)
    kw = {"number": a.number, "repeat": a.repeat, "min_repeat_ms": a.min_repeat_ms}
    if a.passive:
        kw["env"] = {"OMP_WAIT_POLICY": "PASSIVE"}
    if a.no_warmup:
        kw["warmup"] = False
    figures = run(a.size, a.target, a.count, a.workers, kw)
    print(f"GEMM {a.size}^3, {figures['candidates']} candidates, target {figures['target']!r}, runner {figures['runner']}")
    for label in ("cold", "warm"):
        f = figures[label]
        print(f"  {label}: builder {f['builder_wall_ms_per_candidate']:.1f} ms/candidate wall "
              f"(in a worker: {f['build_ms_without_compiler']:.1f} ms replay+lower+render, "
              f"{f['compiler_ms']:.1f} ms C compiler); runner {f['runner_wall_ms_per_candidate']:.1f} ms/candidate "
              f"wall, {f['kernel_ms_per_candidate']:.1f} ms in the candidate's calls, "
              f"{f['runner_overhead_ms']:.1f} ms overhead (error-free ones); {f['trials_per_second']:.2f} trials/s; "
              f"best {f['best_gflops']:.1f} GFLOPS" + (f"; errors {f['errors']}" if f["errors"] else ""))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(figures, fh, indent=1)


if __name__ == "__main__":
    main()
