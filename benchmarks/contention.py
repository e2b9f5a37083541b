"""A machine shared with other work: tessera's and ONNX Runtime's latency alone and beside a second
process running a model, measured in the same run, and the slow-down factors.

    python benchmarks/contention.py                               # MobileNetV2 and ResNet-18, 2 threads
    python benchmarks/contention.py --models mobilenet_v2 --seconds 10 --json contention.json
    GOMP_SPINCOUNT=300000 python benchmarks/contention.py          # libgomp's own spin (before tessera bounded it)

Per model (tessera.zoo, batch 1) and condition, this process times tessera (tessera.compile, target
"c -num-threads=N", the AOT entry) and ONNX Runtime (CPUExecutionProvider, intra_op_num_threads=N) in
alternating blocks of calls for --seconds, each block after the process's own threads went quiet
(_common.quiesce). Conditions: alone; beside a second process running the same model in a loop with
tessera (its kernels' threads wait as this process's do: tessera's thread pool, runtime/pool.py), with
ONNX Runtime, and with tessera on libgomp under OMP_WAIT_POLICY=active (TESSERA_OPENMP=libgomp: an
OpenMP program whose threads spin while they wait). The
second process starts before each condition and is stopped after it. Figures: median ms per call and
the slow-down, the median beside the second process over the median alone; the goal is a tessera
slow-down no worse than ONNX Runtime's. `waits_pct`: the share of this process's time its threads
spent waiting for a CPU while tessera ran (runtime/contention.py). How the kernels' threads wait is
printed: a user's TESSERA_SPIN_US, OMP_WAIT_POLICY=passive or TESSERA_OPENMP applies to this process and
to the second one.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

MODELS = ("mobilenet_v2", "resnet18")
# (condition, runtime of the second process, extra environment of the second process)
CONDITIONS = (("alone", None, {}),
              ("beside tessera", "tessera", {}),
              ("beside onnxruntime", "onnxruntime", {}),
              ("beside spinning OpenMP", "tessera", {"OMP_WAIT_POLICY": "active", "TESSERA_OPENMP": "libgomp"}))


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def ort_session(path: str, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def runner(kind: str, library: str, onnx_path: str, feeds: dict, threads: int):
    """A call that runs the model once with `kind`'s runtime."""
    if kind == "tessera":
        from tessera.runtime import load_module

        exe = load_module(library)
        return lambda: exe.run(feeds)
    sess = ort_session(onnx_path, threads)
    return lambda: sess.run(None, feeds)


def serve(args) -> int:
    """The second process: run the model in a loop until stdin closes or it is killed."""
    feeds = dict(np.load(args.feeds))
    run = runner(args.serve, args.library, args.onnx, feeds, args.threads)
    run()
    print("ready", flush=True)
    while True:
        run()


def start_second(kind: str, env: dict, files: dict, threads: int):
    """Start the second process and wait until it runs the model."""
    cmd = [sys.executable, __file__, "--serve", kind, "--library", files["library"], "--onnx", files["onnx"],
           "--feeds", files["feeds"], "--threads", str(threads)]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **env})
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise SystemExit(f"contention: the second process ({kind}) did not start: exit {proc.wait()}")
    return proc


def time_blocks(fns: dict, seconds: float, block: int = 5) -> tuple:
    """Seconds per call of each fn, timed in alternating blocks (each after _common.quiesce and one
    untimed call) for about `seconds` in all (at least 3 blocks each); and, per fn, the share of its
    blocks' time this process's threads waited for a CPU."""
    from tessera.runtime.contention import WaitMeter

    times = {k: [] for k in fns}
    waited = {k: 0.0 for k in fns}
    spent = {k: 0.0 for k in fns}
    end = time.perf_counter() + seconds
    rounds = 0
    while rounds < 3 or time.perf_counter() < end:
        for k, fn in fns.items():
            _common.quiesce()
            fn()
            with WaitMeter() as m:
                for _ in range(block):
                    t0 = time.perf_counter()
                    fn()
                    times[k].append(time.perf_counter() - t0)
            waited[k] += m.waited or 0.0
            spent[k] += m.wall
        rounds += 1
    return times, {k: waited[k] / spent[k] if spent[k] else 0.0 for k in fns}


def prepare(name: str, threads: int, folder: str) -> dict:
    """Compile the model with tessera and write what the second process loads: the library, the
    ONNX model and the inputs."""
    import onnx

    import tessera
    from tessera import zoo

    model = zoo.get_model(name)
    feeds = zoo.sample_input(name)
    graph, params = tessera.frontend.from_onnx(model)
    exe = tessera.compile(graph, params, target=f"c -num-threads={threads}")
    files = {"library": os.path.join(folder, f"{name}.so"), "onnx": os.path.join(folder, f"{name}.onnx"),
             "feeds": os.path.join(folder, f"{name}.npz")}
    exe.export_library(files["library"])
    onnx.save(model, files["onnx"])
    np.savez(files["feeds"], **feeds)
    sess = ort_session(files["onnx"], threads)
    ref = sess.run(None, feeds)
    got = exe.run(feeds)
    err = max(float(np.max(np.abs(g - r))) for g, r in zip(got, ref))
    if not all(np.allclose(g, r, rtol=1e-4, atol=1e-4) for g, r in zip(got, ref)):
        raise SystemExit(f"contention: tessera's {name} differs from ONNX Runtime's (max |err| {err:.2e})")
    return files


def bench_model(name: str, args, folder: str, rows: list) -> None:
    t0 = time.perf_counter()
    files = prepare(name, args.threads, folder)
    _log(f"[{name}] compiled and checked against ONNX Runtime in {time.perf_counter() - t0:.1f} s")
    feeds = dict(np.load(files["feeds"]))
    fns = {k: runner(k, files["library"], files["onnx"], feeds, args.threads) for k in ("tessera", "onnxruntime")}
    alone = None
    for condition, second, env in CONDITIONS:
        proc = start_second(second, env, files, args.threads) if second else None
        try:
            times, waits = time_blocks(fns, args.seconds)
        finally:
            if proc is not None:
                proc.kill()
                proc.wait()
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        alone = alone or med
        row = {"model": name, "condition": condition, "tessera_ms": med["tessera"], "ort_ms": med["onnxruntime"],
               "tessera_slowdown": med["tessera"] / alone["tessera"],
               "ort_slowdown": med["onnxruntime"] / alone["onnxruntime"],
               "tessera_p90_ms": float(np.percentile(times["tessera"], 90)) * 1e3,
               "waits_pct": 100 * waits["tessera"], "calls": len(times["tessera"])}
        row["slowdown_ratio"] = row["tessera_slowdown"] / row["ort_slowdown"]
        rows.append(row)
        _log(f"[{name}] {condition}: tessera {med['tessera']:.2f} ms ({row['tessera_slowdown']:.2f}x), "
             f"onnxruntime {med['onnxruntime']:.2f} ms ({row['ort_slowdown']:.2f}x)")


def main(argv=None) -> int:
    p = _common.parser(__doc__.split("\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated zoo models (default {','.join(MODELS)})")
    p.add_argument("--threads", type=int, default=2, help="threads of each runtime, in both processes (default 2)")
    p.add_argument("--seconds", type=float, default=5.0, help="seconds of timing per condition (default 5)")
    p.add_argument("--serve", choices=("tessera", "onnxruntime"), help=argparse.SUPPRESS)
    p.add_argument("--library", help=argparse.SUPPRESS)
    p.add_argument("--onnx", help=argparse.SUPPRESS)
    p.add_argument("--feeds", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        return serve(args)
    from tessera import zoo
    from tessera.runtime import c_compiler, openmp, pool

    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in zoo.list_models()]
    if unknown:
        p.error(f"unknown model(s) {unknown}; the zoo has {zoo.list_models()}")
    if args.threads < 1 or args.seconds <= 0:
        p.error("--threads must be >= 1 and --seconds > 0")
    rows: list = []
    with tempfile.TemporaryDirectory(prefix="tessera-contention-") as folder:
        for name in names:
            bench_model(name, args, folder, rows)
    policy = pool.describe() if c_compiler.openmp_runtime() == "pool" else openmp.wait_policy()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(f"\nmedian ms per call, {args.threads} threads; slow-down: beside the second process / alone "
          f"(tessera's no worse than ONNX Runtime's: slowdown_ratio <= 1)\nOpenMP wait: {policy}"
          + (f"; load average {load:.2f} on {os.cpu_count()} cores" if load is not None else ""))
    _common.report("contention", rows, args.json, extra={"threads": args.threads, "seconds": args.seconds,
                                                          "openmp_wait": policy, "load_average": load})
    return 0


if __name__ == "__main__":
    sys.exit(main())
