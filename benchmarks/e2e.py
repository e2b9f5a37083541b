"""End-to-end latency of the zoo models: tessera beside ONNX Runtime and PyTorch, in the same run.

    python benchmarks/e2e.py                                  # every zoo model, 1 and 2 threads
    python benchmarks/e2e.py --models resnet18,mobilenet_v2 --threads 1 --json e2e.json
    python benchmarks/e2e.py --opt-level 0,2                  # one tessera row per opt level
    python benchmarks/e2e.py --small                          # the test-size models (a quick smoke run)

Each model comes from tessera.zoo (batch 1, seed 0) and runs on zoo.sample_input:
- tessera: from_onnx -> tessera.compile(graph, params, target="c -num-threads=N", opt_level=L) -> exe.run
  (the default path: one C entry over the static memory plan when the shapes are static), beside, in the
  same run: aot_entry_ms, that entry's own C timer (PREFIX_run_profiled, called as often and in the same
  blocks as exe.run; no Python inside the figure: default/entry is the default path's cost over the
  bare entry), graph_exe_ms (executor="graph", one Python step per
  node), and from exe.profile() of the same calls nodes_sum_ms (the per-node C timers inside the entry)
  and call_ms (the whole call; outside_ms = call_ms - nodes_sum_ms);
- ONNX Runtime: CPUExecutionProvider, intra_op_num_threads=N, its default (full) graph optimizations;
- PyTorch (when installed): eager, torch.set_num_threads(N), the same graph and weights run node by node
  with the same aten ops torchvision's / Hugging Face's modules call (benchmarks/_torch_onnx.py says why).
Latency is the median wall time of a whole run call over --repeat runs after --warmup runs (per
framework, within --budget seconds once 3 runs are in); the frameworks and configurations of one
model and thread count are timed round-robin, a block of calls each per round (after the previous
one's spinning worker threads have parked, see _common.time_interleaved), so load drifts on a shared
machine hit them alike. Every row also checks tessera's outputs
against ONNX Runtime's (max_abs_err, ok at rtol = atol = 1e-4): a fast wrong answer is no result.
Ratios are tessera's time over the reference's: below 1 tessera is faster.

The table has one row per (model, threads, tessera configuration); the configuration column
(`tessera_cfg`, e.g. "O2") is where the graph-optimization levels and fusion switches go.

    python benchmarks/e2e.py --models resnet18,mobilenet_v2,bert_base --opt-level 0,3 --fusion-ablation

--fusion-ablation adds, for every opt level >= 2, a row with fuse_ops disabled ("O3-nofuse":
tessera.compile(..., disabled_passes=["fuse_ops"]), every other pass as at that level) and prints a
second table: latency without and with fusion and their ratio (the TVM paper reports 1.2-2x), of the
medians and of the minimum times (steadier on a loaded machine).
The load average of the machine is printed with the figures (a shared machine gives noisy times).

    tessera tune resnet18 --trials 2000 --db tune.jsonl --threads 2
    python benchmarks/e2e.py --models resnet18 --tuned tune.jsonl

--tuned DB adds, per opt level, a row compiled with the tuning records of DB ("O3-tuned":
tessera.compile(..., database=DB)), timed in the same interleaved rounds as the untuned row (then
compiled with database=False: no records at all, not even the ones shipped with tessera), ONNX
Runtime and PyTorch, its outputs checked against ONNX Runtime's like every row; tuned_kernels says
how many kernels run a tuned schedule, kept_by_check how many the tuner's in-model check kept at their
default schedule (autotune.in_model: its pick records), default_records how many have the default
schedule as their fastest record. A second table gives per model and thread count the untuned, tuned,
ONNX Runtime and PyTorch latencies with tuned/ort and tuned/untuned. With --tuned the defaults are
--threads 2 and --opt-level 3 (records hold for the thread count and the graph they were tuned on:
`tessera tune` tunes opt level 3).
"""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

# the test-size variants (tests/zoo): same graphs, fewer and smaller layers
SMALL = {
    "resnet18": dict(image_size=32),
    "resnet50": dict(image_size=32),
    "mobilenet_v2": dict(image_size=32, width_mult=0.5),
    "bert_base": dict(n_layers=2, seq_len=16, hidden=64, heads=4, ffn=128, vocab=500, max_position=64),
    "gpt2_block": dict(seq_len=16, hidden=64, heads=4, n_positions=64),
    "gpt2_small": dict(n_layers=2, seq_len=16, hidden=64, heads=4, vocab=500, n_positions=64),
}


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _ort_session(model, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _torch_runner(model):
    try:
        import torch  # noqa: F401
    except ImportError:
        return None, "torch not installed"
    from _torch_onnx import TorchOnnxRunner

    try:
        return TorchOnnxRunner(model), None
    except NotImplementedError as e:
        return None, str(e)


def bench_model(name: str, args, rows: list) -> None:
    import tessera
    from tessera import zoo

    kw = SMALL[name] if args.small else {}
    t0 = time.perf_counter()
    model = zoo.get_model(name, batch=args.batch, **kw)
    feeds = zoo.sample_input(name, batch=args.batch, **kw)
    _log(f"[{name}] built in {time.perf_counter() - t0:.1f} s")
    graph, params = tessera.frontend.from_onnx(model)
    runner, torch_note = (None, "--no-torch") if args.no_torch else _torch_runner(model)
    if torch_note and not args.no_torch:
        _log(f"[{name}] PyTorch column empty: {torch_note}")

    for threads in args.threads:
        sess = _ort_session(model, threads)
        ref = sess.run(None, feeds)
        timed = {"onnxruntime": lambda: sess.run(None, feeds)}
        if runner is not None:
            import torch

            torch.set_num_threads(threads)
            got = runner(feeds)
            terr = max(float(np.max(np.abs(g - r))) for g, r in zip(got, ref))
            if not all(np.allclose(g, r, rtol=1e-3, atol=1e-3) for g, r in zip(got, ref)):
                _log(f"[{name}] warning: PyTorch's outputs differ from onnxruntime's (max |err| {terr:.2e})")
            timed["pytorch"] = lambda: runner(feeds)
        untuned_db = False if args.tuned else None      # --tuned: the untuned rows use no records at all
        configs = [(f"O{level}", level, (), untuned_db) for level in args.opt_level]
        if args.fusion_ablation:
            configs += [(f"O{level}-nofuse", level, ("fuse_ops",), untuned_db)
                        for level in args.opt_level if level >= 2]
        if args.tuned:
            configs += [(f"O{level}-tuned", level, (), args.tuned) for level in args.opt_level]
        built = {}
        for cfg, level, disabled, database in configs:
            t0 = time.perf_counter()
            exe = tessera.compile(graph, params, target=f"c -num-threads={threads}", opt_level=level,
                                  disabled_passes=disabled, database=database)
            out = exe.run(feeds)        # the first run also loads every kernel
            compile_s = time.perf_counter() - t0
            err = max(float(np.max(np.abs(np.asarray(g) - r))) for g, r in zip(out, ref))
            ok = all(np.allclose(g, r, rtol=1e-4, atol=1e-4) for g, r in zip(out, ref))
            built[cfg] = (exe, err, ok, compile_s)
            timed[cfg] = (lambda exe=exe: exe.run(feeds))
            if hasattr(exe, "run_profiled"):   # the default path's one C entry, timed inside it (C timer)
                timed[cfg + "/entry"] = (lambda exe=exe: exe.run_profiled(feeds)[2])
            if not args.no_graph and database in (None, False):
                gexe = tessera.compile(graph, params, target=f"c -num-threads={threads}", opt_level=level,
                                       disabled_passes=disabled, executor="graph")
                gexe.run(feeds)
                timed[cfg + "/graph"] = (lambda gexe=gexe: gexe.run(feeds))
            _log(f"[{name}] {threads} thread(s): tessera {cfg} ({type(exe).__name__}) compiled in {compile_s:.1f} s "
                 f"({len(exe.graph.nodes)} nodes, max |err| vs onnxruntime {err:.1e})")
            if database not in (None, False):
                _log(f"[{name}] {threads} thread(s): {cfg}: {exe.tuning}")
        # every runner timed round-robin: on a shared machine the load drifts alike for all
        times = _common.time_interleaved(timed, args.warmup, args.repeat, args.budget)
        ort_s, torch_s = times["onnxruntime"][0], times.get("pytorch", (None,))[0]
        _log(f"[{name}] {threads} thread(s): " + ", ".join(f"{k} {v[0] * 1e3:.2f} ms" for k, v in times.items()))
        for cfg, _, _, database in configs:
            exe, err, ok, compile_s = built[cfg]
            tess_s, tess_min = times[cfg]
            entry_s = times.get(cfg + "/entry", (None,))[0]
            graph_s = times.get(cfg + "/graph", (None,))[0]
            # the per-node times of the same calls (C timers inside the one entry) and the whole call
            rep = exe.profile(feeds, number=args.profile_number, repeat=3, show=False)
            row = {"model": name + (" (small)" if args.small else ""), "batch": args.batch, "threads": threads,
                   "tessera_cfg": cfg, "executor": type(exe).__name__.replace("Executor", ""),
                   "tessera_ms": tess_s * 1e3,
                   "aot_entry_ms": entry_s * 1e3 if entry_s is not None else "",
                   "default/entry": tess_s / entry_s if entry_s is not None else "",
                   "graph_exe_ms": graph_s * 1e3 if graph_s is not None else "",
                   "nodes_sum_ms": rep.total_ms,
                   "call_ms": rep.call_ms if rep.call_ms is not None else "",
                   "outside_ms": rep.outside_ms if rep.outside_ms is not None else "",
                   "ort_ms": ort_s * 1e3,
                   "torch_ms": torch_s * 1e3 if torch_s is not None else "",
                   "tessera/ort": tess_s / ort_s,
                   "tessera/torch": tess_s / torch_s if torch_s is not None else "",
                   "max_abs_err": err, "ok": ok, "compile_s": compile_s, "nodes": len(exe.graph.nodes),
                   "tessera_min_ms": tess_min * 1e3, "ort_min_ms": times["onnxruntime"][1] * 1e3}
            if args.tuned:
                row["tuned_kernels"] = _tuned_kernels(getattr(exe, "tuning", ""))
                summary = getattr(exe, "tuning", "")
                kept = re.search(r"(\d+) kept there by the tuner's in-model check", summary)
                row["kept_by_check"] = int(kept[1]) if kept else 0
                default = re.search(r"(\d+) whose fastest record is the default schedule", summary)
                row["default_records"] = int(default[1]) if default else 0
            if args.profile:
                row["kernels_ms"] = rep.total_ms
                top = sorted(rep.by_op().items(), key=lambda kv: -kv[1])[:3]
                row["top_ops"] = ", ".join(f"{op} {ms:.3g}" for op, ms in top)
            rows.append(row)






def _fusion_ablation(rows: list) -> list:
    """One row per (model, threads, level) measured both with and without fuse_ops."""
    by_key = {(r["model"], r["threads"], r["tessera_cfg"]): r for r in rows}
    out = []
    for (model, threads, cfg), r in by_key.items():
        if not cfg.endswith("-nofuse"):
            continue
        fused = by_key.get((model, threads, cfg[:-len("-nofuse")]))
        if fused is None:
            continue
        out.append({"model": model, "threads": threads, "opt_level": cfg[:-len("-nofuse")],
                    "nofuse_ms": r["tessera_ms"], "fused_ms": fused["tessera_ms"],
                    "nofuse/fused": r["tessera_ms"] / fused["tessera_ms"],
                    "nofuse/fused (min)": r["tessera_min_ms"] / fused["tessera_min_ms"],
                    "nofuse_nodes": r.get("nodes", ""), "fused_nodes": fused.get("nodes", "")})
    return out


def _tuned_kernels(summary: str) -> str:
    """'18/20' from exe.tuning's 'tuned schedules for 18 of 20 kernels ...' ("none" without records)."""
    m = re.search(r"tuned schedules for (\d+) of (\d+) kernels", summary or "")
    return f"{m[1]}/{m[2]}" if m else "none"


def _tuned_table(rows: list) -> list:
    """One row per (model, threads, level) with a tuned row: untuned, tuned, ORT and PyTorch latency."""
    by_key = {(r["model"], r["threads"], r["tessera_cfg"]): r for r in rows}
    out = []
    for (model, threads, cfg), r in by_key.items():
        if not cfg.endswith("-tuned"):
            continue
        base = by_key.get((model, threads, cfg[:-len("-tuned")]))
        if base is None:
            continue
        torch_ms = r["torch_ms"]
        out.append({"model": model, "threads": threads, "opt_level": cfg[:-len("-tuned")],
                    "tuned_kernels": r.get("tuned_kernels", ""), "kept_by_check": r.get("kept_by_check", ""),
                    "default_records": r.get("default_records", ""),
                    "untuned_ms": base["tessera_ms"],
                    "tuned_ms": r["tessera_ms"], "ort_ms": r["ort_ms"], "torch_ms": torch_ms,
                    "tuned/ort": r["tessera_ms"] / r["ort_ms"],
                    "tuned/untuned": r["tessera_ms"] / base["tessera_ms"],
                    "tuned/torch": r["tessera_ms"] / torch_ms if torch_ms != "" else "",
                    "tuned/ort (min)": r["tessera_min_ms"] / r["ort_min_ms"],
                    "ok": r["ok"] and base["ok"]})
    return out


def _int_list(s: str) -> list:
    try:
        vals = [int(v) for v in s.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"e2e: expected comma-separated integers, got {s!r}") from None
    if not vals:
        raise SystemExit(f"e2e: expected at least one integer, got {s!r}")
    return vals


def main(argv=None) -> int:
    from tessera import zoo

    p = _common.parser(__doc__.split("\n")[0])
    p.add_argument("--models", default=",".join(zoo.list_models()),
                   help=f"comma-separated zoo models (default: all of {', '.join(zoo.list_models())})")
    p.add_argument("--threads", default=None, help="thread counts to measure (default 1,2; with --tuned 2)")
    p.add_argument("--opt-level", default=None,
                   help="tessera.compile opt levels, one row each (default 2; with --tuned 3)")
    p.add_argument("--tuned", metavar="DB.jsonl",
                   help="also a row per opt level compiled with these tuning records (tessera tune's database)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--budget", type=float, default=10.0,
                   help="seconds of timed runs per measurement before stopping early (at least 3 runs)")
    p.add_argument("--small", action="store_true", help="the small test-size models")
    p.add_argument("--no-torch", action="store_true", help="leave the PyTorch column out")
    p.add_argument("--fusion-ablation", action="store_true",
                   help="also run every opt level >= 2 with fuse_ops disabled and print fused/unfused ratios")
    p.add_argument("--profile", action="store_true",
                   help="also name the top ops (kernels_ms: the per-node sum again)")
    p.add_argument("--profile-number", type=int, default=5,
                   help="calls per round of exe.profile for nodes_sum_ms / call_ms (3 rounds; default 5)")
    p.add_argument("--no-graph", action="store_true",
                   help="leave out the graph executor (executor='graph') column")
    args = p.parse_args(argv)
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in zoo.list_models()]
    if unknown:
        p.error(f"unknown model(s) {unknown}; the zoo has {zoo.list_models()}")
    if args.tuned and not Path(args.tuned).is_file():
        p.error(f"--tuned {args.tuned}: no such tuning database (make one with `tessera tune`)")
    args.threads = _int_list(args.threads or ("2" if args.tuned else "1,2"))
    args.opt_level = _int_list(args.opt_level or ("3" if args.tuned else "2"))
    if args.batch < 1 or args.repeat < 1 or args.warmup < 0:
        p.error("--batch and --repeat must be >= 1, --warmup >= 0")

    rows: list = []
    for name in names:
        bench_model(name, args, rows)
    load = _common.load_average_text()
    print("\nlatency in ms (median); ratios are tessera / reference (below 1: tessera faster)"
          + (f"; load average {load}" if load else ""))
    ablation = _fusion_ablation(rows)
    tuned = _tuned_table(rows)
    _common.report("e2e", rows, args.json, extra={"warmup": args.warmup, "repeat": args.repeat,
                                                   "small": args.small, "load_average": load,
                                                   "fusion_ablation": ablation, "tuned_db": args.tuned,
                                                   "tuned": tuned})
    if ablation:
        print("\nfusion ablation: latency without / with fuse_ops (above 1: fusion helps)")
        _common.report("e2e-fusion", ablation, None)
    if tuned:
        print(f"\ntuned with {args.tuned}: latency in ms (median); tuned/ort below 1: tuned tessera faster "
              f"than ONNX Runtime (the issue's goal: at most 0.85)")
        _common.report("e2e-tuned", tuned, None)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
