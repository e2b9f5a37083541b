"""Tuning curves: best GFLOPS vs trials and vs seconds for random search, simulated annealing +
XGBoost and evolutionary search + XGBoost, on one workload, with numpy's BLAS, the op library's
default schedule and (where apache-tvm installs) TVM's MetaSchedule measured in the same run.

    python benchmarks/tuning_curve.py [--workload gemm1024|bert|conv1x1|bmm_gelu] [--trials 1000]
        [--strategies random,annealing,evolutionary] [--threads 2] [--seed 0] [--tvm-trials 128]
        [--json out.json] [--png out.png]

Printed: per strategy the best GFLOPS at its last trial, the trials to reach random search's final
best (the goal: at most a third of random's trials) and to come within 2% of it (repeated timings of
one kernel differ by about that much), trials per second, and the best
over numpy's BLAS (GEMM 1024^3: the goal is >= 1.0x within 1,000 trials); the untuned default
beside the tuned best. Each strategy tunes into its own fresh database.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _arg(name, default):
    for k, a in enumerate(sys.argv):
        if a == name and k + 1 < len(sys.argv):
            return sys.argv[k + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return default


for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TVM_NUM_THREADS"):
    os.environ[_var] = str(_arg("--threads", "2"))
import numpy as np  # noqa: E402
from _common import parser, quiesce, report  # noqa: E402

import tessera  # noqa: E402
from tessera import autotune, te  # noqa: E402
from tessera.graph.kernels import get_kernel  # noqa: E402
from tessera.ir.tensor_type import TensorType  # noqa: E402
from tessera.ops import get_op  # noqa: E402
from tessera.target import Target  # noqa: E402
from tessera.tir.schedule.examples.gemm import gemm_program  # noqa: E402

# name -> (M, N, K) of C[M, N] = A[M, K] @ B[K, N]
GEMMS = {"gemm1024": (1024, 1024, 1024), "bert": (128, 3072, 768), "conv1x1": (3136, 64, 256)}


def bmm_bias_gelu(b=4, m=128, n=768, k=768):
    """A batched matmul + bias + GELU written in TE: a PrimFunc with no hand schedule."""
    A = te.placeholder((b, m, k), name="A")
    B = te.placeholder((b, k, n), name="B")
    bias = te.placeholder((n,), name="bias")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((b, m, n), lambda x, i, j: te.sum(A[x, i, r] * B[x, r, j], axis=r), name="C")
    D = te.compute((b, m, n), lambda x, i, j: C[x, i, j] + bias[j], name="D")
    E = te.compute((b, m, n), lambda x, i, j: D[x, i, j] * 0.5 * (1.0 + te.erf(D[x, i, j] * 0.7071067811865476)),
                   name="E")
    return te.create_prim_func([A, B, bias, E]), 2 * b * m * n * k


def _nr(target) -> int:
    return 32 if target.has_feature("avx512f") else 16


def workload(name, target):
    """(PrimFunc to tune, numpy reference callable, inputs, flops, default-schedule timer or None)."""
    rng = np.random.default_rng(0)
    if name in GEMMS:
        M, N, K = GEMMS[name]
        func = gemm_program(M, N, K, nr=_nr(target))
        a = rng.standard_normal((M, K), dtype=np.float32)
        b = rng.standard_normal((K, N), dtype=np.float32)
        return func, (lambda: np.matmul(a, b)), 2 * M * N * K, (lambda: default_gemm_secs(M, N, K, target, a, b))
    if name == "bmm_gelu":
        func, flops = bmm_bias_gelu()
        return func, None, flops, None
    raise SystemExit(f"unknown workload {name!r}; choose one of {', '.join([*GEMMS, 'bmm_gelu'])}")


def default_gemm_secs(M, N, K, target, a, b):
    """The op library's default schedule of nn.matmul for this shape, timed inside C."""
    attrs = get_op("nn.matmul").normalize_attrs({})
    k = get_kernel("nn.matmul", attrs, (TensorType((M, K)), TensorType((K, N))), (TensorType((M, N)),), target)
    c = np.empty((M, N), np.float32)
    k.fn(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
    return min(k.module.time_evaluator(k.module.entry_name or k.module.function_names[0], number=5,
                                       repeat=5)(a, b, c).results)


def untuned_secs(func, target):
    """The program as written (no schedule), timed inside C: the floor a tuner starts from."""
    lib = tessera.build(func, target=target)
    args = [np.random.default_rng(1).standard_normal([int(d) for d in b.shape]).astype(str(b.dtype))
            for b in func.params]
    return min(lib.time_evaluator(number=1, repeat=3)(*args).results)


def numpy_secs(fn, rounds=15):
    fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def trials_to_reach(history, secs):
    """The first (trials, seconds) at which a history's best is at least as fast as secs."""
    for trials, el, best in history:
        if best is not None and best <= secs:
            return trials, el
    return None, None


def main():
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--workload", default="gemm1024")
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--strategies", default="random,annealing,evolutionary")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--tvm-trials", type=int, default=0, help="also tune with TVM's MetaSchedule (0: skip)")
    p.add_argument("--png", default=None)
    p.add_argument("--db-dir", default=None, help="keep each strategy's database here (default: a temporary folder)")
    args = p.parse_args()
    target = Target(f"c -num-threads={args.threads}")
    func, ref, flops, default = workload(args.workload, target)
    print(f"workload {args.workload} on {target} ({flops / 1e9:.3f} GFLOP), load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)

    curves, rows = {}, []
    for strat in args.strategies.split(","):
        cm = "random" if strat == "random" else "xgb"
        with tempfile.TemporaryDirectory() as d:
            db = autotune.Database(os.path.join(args.db_dir or d, f"{args.workload}-{strat}.jsonl"))
            res = autotune.tune_tir(func, target=target, max_trials=args.trials, database=db, strategy=strat,
                                    cost_model=cm, seed=args.seed, batch_size=args.batch, progress=True)
        curves[strat] = res
        print(f"{strat}: {res}", flush=True)

    quiesce()
    np_s = numpy_secs(ref) if ref is not None else None
    base_s = default() if default is not None else None
    raw_s = untuned_secs(func, target) if default is None else None
    rand = curves.get("random")
    rand_best = rand.run_secs if rand is not None else None
    for strat, res in curves.items():
        row = {"strategy": strat + ("" if strat == "random" else " + xgb"), "trials": res.trials,
               "errors": res.errors, "seconds": round(res.seconds, 1),
               "trials/s": round(res.trials / res.seconds, 2) if res.seconds else None,
               "best GFLOPS": round(flops / res.run_secs / 1e9, 2) if res.run_secs else None}
        if rand_best is not None:
            t, el = trials_to_reach(res.history, rand_best)
            row["trials to random's best"] = t
            row["fraction of random's trials"] = round(t / rand.trials, 3) if t else None
            t98, _ = trials_to_reach(res.history, rand_best / 0.98)   # within 2%: timing noise
            row["trials to 98% of random's best"] = t98
        if np_s:
            row["best / numpy"] = round(np_s / res.run_secs, 3) if res.run_secs else None
            t, _ = trials_to_reach(res.history, np_s)
            row["trials to numpy"] = t
        if base_s:
            row["best / op-library default"] = round(base_s / res.run_secs, 3) if res.run_secs else None
        if raw_s:
            row["best / untuned"] = round(raw_s / res.run_secs, 3) if res.run_secs else None
        rows.append(row)
    refs = {}
    if np_s:
        refs["numpy GFLOPS"] = round(flops / np_s / 1e9, 2)
    if base_s:
        refs["op-library default GFLOPS"] = round(flops / base_s / 1e9, 2)
    if raw_s:
        refs["untuned GFLOPS"] = round(flops / raw_s / 1e9, 3)
    if args.tvm_trials and args.workload == "gemm1024":
        try:
            from _tvm_metaschedule import tune_gemm_tvm

            with tempfile.TemporaryDirectory() as d:
                tvm = tune_gemm_tvm(1024, 1024, 1024, args.tvm_trials, args.threads, d)
        except ImportError as e:  # apache-tvm missing or unusable (TVMUnavailable is an ImportError)
            print(f"TVM MetaSchedule: skipped ({e})")
        else:
            refs.update({f"tvm {k}": v for k, v in tvm.items() if k != "curve"})
            with tempfile.TemporaryDirectory() as d:
                db = autotune.Database(os.path.join(d, "tune.jsonl"))
                same = autotune.tune_tir(func, target=target, max_trials=args.tvm_trials, database=db,
                                         strategy="evolutionary", seed=args.seed, batch_size=args.batch)
            refs["tessera same-budget GFLOPS"] = round(flops / same.run_secs / 1e9, 2) if same.run_secs else None
            refs["tessera same-budget wall s"] = round(same.seconds, 1)
    print(", ".join(f"{k}: {v}" for k, v in refs.items()))
    hist = {s: [list(h) for h in r.history] for s, r in curves.items()}
    report("tuning_curve", rows, args.json, {"workload": args.workload, "flops": flops, "references": refs,
                                             "history": hist})
    if args.png:
        plot(curves, flops, np_s, args.png, args.workload)


def plot(curves, flops, np_s, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for strat, res in curves.items():
        h = [(t, el, flops / b / 1e9) for t, el, b in res.history if b]
        if not h:
            continue
        t, el, g = zip(*h)
        label = strat if strat == "random" else strat + " + xgb"
        ax1.step(t, g, where="post", label=label)
        ax2.step(el, g, where="post", label=label)
    for ax, xl in ((ax1, "trials"), (ax2, "seconds")):
        if np_s:
            ax.axhline(flops / np_s / 1e9, color="gray", linestyle="--", label="numpy (BLAS)")
        ax.set_xlabel(xl)
        ax.set_ylabel("best GFLOPS")
        ax.grid(alpha=0.3)
    ax1.legend()
    fig.suptitle(f"tessera tuning curve: {title}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
