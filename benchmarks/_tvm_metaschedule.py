"""fp32 GEMM C = A @ B (M x K @ K x N) tuned by Apache TVM's MetaSchedule: the reference that
benchmarks/tuning_curve.py puts beside tessera's tuner (issue 11).

    python benchmarks/_tvm_metaschedule.py [--size 1024] [--trials 128] [--threads 2]
                                           [--work-dir DIR] [--verbose] [--json out.json]

apache-tvm is an optional dependency (0.27: MetaSchedule is `tvm.s_tir.meta_schedule`, schedules
`tvm.s_tir.Schedule`). `tvm_unavailable_reason()` says why it cannot be used here, or None: not
installed, or installed beside an apache-tvm-ffi whose JSON serializer crashes on TVM 0.27's IR
nodes (0.1.15.post2 does; 0.1.14.post1 works; MetaSchedule serializes the module when it starts,
so the crash is a segfault of the whole process). The probe runs in a subprocess for that reason.
The script then prints one "skipped: ..." line and exits 0; `tune_gemm_tvm` raises TVMUnavailable.

Threads: TVM's runtime thread pool takes its size from TVM_NUM_THREADS when the pool first starts
(without it, TVM uses half the logical cores on x86: 1 on a 2-core machine). `tune_gemm_tvm` sets
TVM_NUM_THREADS in os.environ before it imports tvm, so this process and MetaSchedule's runner
worker (a subprocess spawned later, which inherits the environment) both time with `threads`
threads; it refuses to go on if TVM's runtime reports another count. MetaSchedule also gets
num_tuning_cores=threads (its builder processes and XGBoost threads); its runner is one process
measuring one candidate at a time (number=3, repeat=1, min_repeat_ms=100: its defaults).
The target is `llvm -mcpu=<LLVM's host CPU name> -num-cores=<threads>`.
"""
from __future__ import annotations

import functools
import importlib
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from tessera.errors import ShapeError, TesseraError

# Serializes one IR node: the call that segfaults when apache-tvm-ffi does not match apache-tvm.
_PROBE = "import tvm; tvm.ir.save_json(tvm.tirx.IntImm('int32', 1)); print(tvm.__version__)"


class TVMUnavailable(TesseraError, ImportError):
    """Apache TVM cannot be used in this environment (the message says why and what to do); an
    ImportError too, since it means the optional dependency is missing or unusable."""


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def tvm_unavailable_reason() -> str | None:
    """None where apache-tvm imports and serializes IR in a fresh process; else why it cannot be
    used. Checked in a subprocess because the failure it looks for is a segfault."""
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], check=False, capture_output=True,
                              text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "`import tvm` did not finish within 120 s"
    if proc.returncode == 0:
        return None
    tvm_v, ffi_v = _dist_version("apache-tvm"), _dist_version("apache-tvm-ffi")
    if "No module named 'tvm'" in proc.stderr:
        return "apache-tvm is not installed (pip install apache-tvm to compare with it)"
    if proc.returncode < 0 or "Segfault" in proc.stderr:
        return (f"apache-tvm {tvm_v} crashes serializing its IR with apache-tvm-ffi {ffi_v} (a version "
                "mismatch; apache-tvm 0.27.0.post1 works with apache-tvm-ffi==0.1.14.post1)")
    last = proc.stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
    return f"`import tvm` fails: {last[0]}"


def host_target(threads: int):
    """TVM's `llvm -mcpu=<cpu> -num-cores=<threads>` with the CPU name LLVM detects on this host
    (no mcpu where LLVM only knows it as "generic"), as a tvm.target.Target. TVM 0.27 refuses the
    command-line string form, so the target is built from its JSON dict form."""
    from tvm.target import Target, codegen

    cpu = str(codegen.llvm_get_system_cpu() or "")
    spec = {"kind": "llvm", "num-cores": threads}
    if cpu not in ("", "generic"):
        spec["mcpu"] = cpu
    return Target(spec)  # raises on a CPU name this LLVM does not know, before tuning starts


def target_cli(target) -> str:
    """A Target in the `llvm -mcpu=... -num-cores=...` form people read (for reports only)."""
    attrs = dict(target.attrs)
    return " ".join([target.kind.name] + [f"-{k}={attrs[k]}" for k in ("mcpu", "num-cores") if k in attrs])


def gemm_prim_func(M: int, N: int, K: int):
    """C[i, j] = sum_k A[i, k] * B[k, j] in fp32, written in TVM's TE, as a TIR PrimFunc."""
    from tvm import te

    A = te.placeholder((M, K), name="A", dtype="float32")
    B = te.placeholder((K, N), name="B", dtype="float32")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def tune_gemm_tvm(M: int, N: int, K: int, trials: int, threads: int, work_dir: str | os.PathLike,
                  *, seed: int | None = 0, repeat: int = 10, min_repeat_ms: int = 200,
                  verbose: bool = False) -> dict:
    """Tune fp32 GEMM (M x K @ K x N) with MetaSchedule for `trials` trials on `threads` threads,
    compile the best schedule, check it against numpy and time it with TVM's time evaluator.

    Returns {"gflops", "best_ms", "median_ms", "tune_wall_s", "trials", "valid_trials",
    "tuning_best_ms", "import_s", "curve", "target", "threads", "tvm_version"}: best_ms is the
    fastest of `repeat` timings (each at least min_repeat_ms long), gflops = 2*M*N*K / best_ms,
    tune_wall_s the wall time of tune_tir alone (import_s, the one-off import of TVM's tensor
    intrinsics, and the builder's start come before it), trials the number of candidates
    MetaSchedule measured (its database's records, failed ones included; fewer than asked when its
    space runs out), valid_trials those that ran, tuning_best_ms the best time the tuner itself
    saw, curve the best GFLOPS it had seen after each trial. work_dir must be empty or absent:
    MetaSchedule would otherwise resume from the records there. Its logs stay in work_dir/logs;
    the console gets only warnings unless `verbose`. Raises TVMUnavailable (an ImportError too)
    where TVM cannot be used."""
    for name, v in (("M", M), ("N", N), ("K", K)):
        if not isinstance(v, int) or v < 1:
            raise ShapeError(f"tune_gemm_tvm: {name} must be a positive int, got {v!r}")
    for name, v in (("trials", trials), ("threads", threads), ("repeat", repeat)):
        if not isinstance(v, int) or v < 1:
            raise TesseraError(f"tune_gemm_tvm: {name} must be a positive int, got {v!r}")
    work = Path(work_dir)
    if work.exists() and any(work.iterdir()):
        raise TesseraError(f"tune_gemm_tvm: work_dir {work} is not empty; MetaSchedule would resume "
                           "from the records there instead of tuning from scratch")
    reason = tvm_unavailable_reason()
    if reason is not None:
        raise TVMUnavailable(reason)
    work.mkdir(parents=True, exist_ok=True)

    os.environ["TVM_NUM_THREADS"] = str(threads)  # read when TVM's pool starts (here and in workers)
    import numpy as np
    import tvm
    from tvm.s_tir import meta_schedule as ms

    if tvm.runtime.num_threads() != threads:
        raise TesseraError(f"tune_gemm_tvm: TVM's runtime uses {tvm.runtime.num_threads()} threads, "
                           f"not {threads}: its thread pool started before TVM_NUM_THREADS was set")
    target = host_target(threads)
    func = gemm_prim_func(M, N, K)
    # MetaSchedule's console handler takes this logger's level when tune_tir configures it
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.DEBUG if verbose else logging.WARNING)

    t0 = time.perf_counter()
    import tvm.s_tir.tensor_intrin  # what TuneContext imports first; slow (see below)
    import_s = time.perf_counter() - t0
    # MetaSchedule's builder processes import tvm.s_tir.tensor_intrin on their first build (~10 s
    # idle, ~45 s on a loaded 2-core machine), inside the 30 s build timeout: on a busy machine every
    # build then times out. Importing it in the worker's initializer (not timed) keeps the stock
    # timeout meaningful; the workers are started anew for each batch either way.
    builder = ms.builder.LocalBuilder(
        max_workers=threads, initializer=functools.partial(importlib.import_module, "tvm.s_tir.tensor_intrin"))

    t0 = time.perf_counter()
    database = ms.tune_tir(func, target, work_dir=str(work), max_trials_global=trials,
                           num_trials_per_iter=min(64, trials), builder=builder,
                           num_tuning_cores=threads, seed=seed)
    tune_wall_s = time.perf_counter() - t0

    records = database.get_all_tuning_records()
    ran = [r for r in records if r.run_secs is not None and len(r.run_secs) > 0
           and all(float(s) < 1e9 for s in r.run_secs)]  # MetaSchedule stores 1e10 s for failures
    if not ran:
        raise TesseraError(f"tune_gemm_tvm: none of MetaSchedule's {len(records)} candidates ran "
                           f"(its logs are under {work / 'logs'})")
    tuning_best_ms = min(float(np.mean([float(s) for s in r.run_secs])) for r in ran) * 1e3

    curve = _best_so_far_gflops(work / "database_tuning_record.json", 2.0 * M * N * K)

    sch = ms.tir_integration.compile_tir(database, func, target)
    if sch is None:
        raise TesseraError("tune_gemm_tvm: MetaSchedule's database holds no schedule for the GEMM")
    lib = tvm.tirx.build(sch.mod, target=target)

    dev = tvm.cpu(0)
    rng = np.random.default_rng(0)
    a_np = rng.uniform(-1, 1, (M, K)).astype("float32")
    b_np = rng.uniform(-1, 1, (K, N)).astype("float32")
    a, b = tvm.runtime.tensor(a_np, dev), tvm.runtime.tensor(b_np, dev)
    c = tvm.runtime.tensor(np.zeros((M, N), "float32"), dev)
    lib["main"](a, b, c)
    want = a_np.astype("float64") @ b_np.astype("float64")
    err = float(np.max(np.abs(c.numpy() - want)))  # inputs in [-1, 1]: a lost k-term is ~0.25
    if not np.allclose(c.numpy(), want, rtol=1e-4, atol=1e-5 * K):
        raise TesseraError(f"tune_gemm_tvm: TVM's tuned GEMM disagrees with numpy (max error {err:.3g})")

    timer = lib.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
    results = [float(x) for x in timer(a, b, c).results]
    best_ms, median_ms = min(results) * 1e3, float(np.median(results)) * 1e3
    return {"gflops": 2.0 * M * N * K / (best_ms * 1e-3) / 1e9, "best_ms": best_ms,
            "median_ms": median_ms, "tune_wall_s": tune_wall_s, "trials": len(records),
            "valid_trials": len(ran), "tuning_best_ms": tuning_best_ms, "import_s": import_s,
            "curve": curve, "target": target_cli(target), "threads": threads, "tvm_version": str(tvm.__version__)}


def _best_so_far_gflops(record_file: Path, flops: float) -> list[float] | None:
    """Best GFLOPS after each trial, in the order MetaSchedule measured them: its JSON database
    appends one line per trial, [workload index, [trace, run_secs, target, args_info]] (a failed
    trial has run_secs 1e10). None, with a printed note, where the file is not in that form."""
    best, curve = 0.0, []
    try:
        with open(record_file) as f:
            for line in f:
                if line.strip():
                    secs = [float(x) for x in json.loads(line)[1][1]]
                    best = max(best, flops / (sum(secs) / len(secs)) / 1e9)
                    curve.append(round(best, 3))
    except (OSError, ValueError, TypeError, IndexError, ZeroDivisionError) as e:
        print(f"note: no TVM tuning curve ({record_file} is not MetaSchedule's JSON record file as "
              f"0.27 writes it: {e!r})", file=sys.stderr)
        return None
    return curve


def _loadavg() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (the machine may be shared), None where unknown."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    import argparse
    import tempfile

    p = argparse.ArgumentParser(description="fp32 GEMM tuned by Apache TVM's MetaSchedule")
    p.add_argument("--size", type=int, default=1024, help="M = N = K (default 1024)")
    p.add_argument("--trials", type=int, default=128, help="max_trials_global (default 128)")
    p.add_argument("--threads", type=int, default=2, help="threads for tuning and timing (default 2)")
    p.add_argument("--work-dir", help="MetaSchedule's work_dir, empty or absent (default: a temporary one)")
    p.add_argument("--verbose", action="store_true", help="show MetaSchedule's progress log")
    p.add_argument("--json", metavar="PATH", help="also write the figures to PATH as JSON")
    args = p.parse_args(argv)

    reason = tvm_unavailable_reason()
    if reason is not None:
        print(f"skipped: {reason}")
        return 0
    n, load_before = args.size, _loadavg()
    with tempfile.TemporaryDirectory(prefix="tvm_ms_") as tmp:
        res = tune_gemm_tvm(n, n, n, args.trials, args.threads, args.work_dir or tmp,
                            verbose=args.verbose)
    res = {"size": [n, n, n], "loadavg_before": load_before, "loadavg_after": _loadavg(), **res}
    for k, v in res.items():
        if k == "curve" and v:
            v = f"{len(v)} points, best GFLOPS after trial 1/8/32/all: " + " / ".join(
                str(v[min(i, len(v)) - 1]) for i in (1, 8, 32, len(v)))
        print(f"{k:15s} {v:.4g}" if isinstance(v, float) else f"{k:15s} {v}")
    if args.json:
        Path(args.json).write_text(json.dumps({"benchmark": "tvm_metaschedule_gemm", **res}, indent=2))
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
