"""Two commits of tessera beside each other in one run: the same zoo models compiled by each and timed in
alternating rounds (each commit in its own worker process, its own checkout), so that a change that
should not move a figure (a refactoring) can be shown not to, on a machine whose speed drifts.

    python benchmarks/compare_commits.py OLD NEW [--models resnet18,mobilenet_v2,bert_base] [--rounds 5]

Each commit is checked out into a temporary git worktree; a worker process per commit (PYTHONPATH at
its worktree) compiles every model with tessera.compile(target="c -num-threads=T") and then, per round,
times each model's default path (exe.run over the C entry, median of --number calls). Rounds alternate
OLD, NEW, OLD, NEW...; the table gives per model each commit's median over rounds and NEW / OLD.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

WORKER = r"""
import json, sys, time
import numpy as np
import tessera
from tessera import zoo

models, threads, number = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3])
exes = {}
for name in models:
    g, p = tessera.frontend.from_onnx(zoo.get_model(name))
    exes[name] = (tessera.compile(g, p, target=f"c -num-threads={threads}"), zoo.sample_input(name))
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    out = {}
    for name, (exe, feeds) in exes.items():
        exe.run(feeds)
        ts = []
        for _ in range(number):
            t0 = time.perf_counter()
            exe.run(feeds)
            ts.append(time.perf_counter() - t0)
        out[name] = sorted(ts)[len(ts) // 2] * 1e3
    print(json.dumps(out), flush=True)
"""


def _worktree(rev: str, where: Path) -> Path:
    path = where / rev.replace("/", "_")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(path), rev], check=True)
    return path


def main():
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--models", default="resnet18,mobilenet_v2,bert_base")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--number", type=int, default=20, help="calls a model is timed over in a round")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees, workers = {}, {}
        try:
            for rev in (args.old, args.new):
                trees[rev] = _worktree(rev, Path(tmp))
                workers[rev] = subprocess.Popen(
                    [sys.executable, "-c", WORKER, args.models, str(args.threads), str(args.number)],
                    cwd=tmp, env={**os.environ, "PYTHONPATH": str(trees[rev])}, stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, text=True)
            for rev, w in workers.items():
                json.loads(w.stdout.readline())          # compiled
            times = {rev: {m: [] for m in args.models.split(",")} for rev in workers}
            for r in range(args.rounds):
                for rev, w in workers.items():
                    w.stdin.write("go\n")
                    w.stdin.flush()
                    for m, ms in json.loads(w.stdout.readline()).items():
                        times[rev][m].append(ms)
                print(f"round {r + 1}: " + "  ".join(f"{rev[:8]} " + ", ".join(f"{m} {v[-1]:.2f}"
                                                                        for m, v in times[rev].items())
                                                     for rev in workers), file=sys.stderr, flush=True)
        finally:
            for w in workers.values():
                w.kill()
            for path in trees.values():
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)])
    rows = []
    for m in args.models.split(","):
        old, new = (statistics.median(times[rev][m]) for rev in (args.old, args.new))
        rows.append({"model": m, "threads": args.threads, f"{args.old[:8]} ms": old, f"{args.new[:8]} ms": new,
                     "new/old": new / old,
                     "old spread": (max(times[args.old][m]) - min(times[args.old][m])) / old,
                     "new spread": (max(times[args.new][m]) - min(times[args.new][m])) / new})
    _common.report("compare_commits", rows, args.json, {"old": args.old, "new": args.new, "rounds": args.rounds})


if __name__ == "__main__":
    main()
