"""Make the tuning records shipped with tessera (tessera/autotune/records/): tune the zoo models for each
CPU level this machine can run and keep each kernel's fastest records.

    python benchmarks/ship_records.py --trials 400 --threads 2            # every level this CPU has
    python benchmarks/ship_records.py --models resnet18 --levels v3 --trials 100 --work /tmp/recs
    python benchmarks/ship_records.py --levels v4 --from tm/resnet18-scratch.jsonl tm/resnet50-scratch.jsonl

For every level (v4: AVX-512, the host target; v3: AVX2, the host target with -mattr=-avx512f, which
an AVX-512 machine runs) and model, autotune.tune_graph tunes the model (no transfer: the records
must not feed on themselves) into <work>/<level>.jsonl (resumed if it exists); then each workload's
8 fastest records (enough for the cost model's transfer to rank within a workload) go to
tessera/autotune/records/zoo-x86-64-<level>-<threads>t.jsonl, replacing that file. Prints the
estimated latency per model before and after, the trials and the seconds, with the CPU and load.
--from DB...: no tuning; the given databases (e.g. tune_model.py's scratch runs, which tune without
transfer too) are read in order and exported the same way, for one level (--levels), every record of
them for that level's target (another target's record is an error).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common  # noqa: E402

from tessera import autotune, zoo  # noqa: E402
from tessera.autotune.apply_history import BUILTIN_DIR  # noqa: E402
from tessera.frontend import from_onnx  # noqa: E402
from tessera.target import Target  # noqa: E402

LEVELS = {"v4": "", "v3": "-mattr=-avx512f"}
# tune_graph's in-model check (on by default) keeps a kernel's default schedule unless a candidate is
# faster inside the model, so BERT-base's records (whose isolated picks ran 5% slower in the model)
# are shipped too
MODELS = ("resnet18", "mobilenet_v2", "resnet50", "bert_base")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--levels", default=None, help="v4,v3 (default: those this CPU runs)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--trials", type=int, default=400, help="trials a model (default 400)")
    p.add_argument("--time-budget", type=float, default=None, help="seconds a model")
    p.add_argument("--keep", type=int, default=8, help="records kept a workload (default 8)")
    p.add_argument("--work", default="/tmp/tessera_ship_records", help="folder of the full databases")
    p.add_argument("--from", dest="sources", nargs="+", default=None, metavar="DB",
                   help="export these databases (read in order) instead of tuning; one --levels")
    args = p.parse_args(argv)
    host = Target("c")
    levels = args.levels.split(",") if args.levels else [lv for lv in ("v4", "v3")
                                                        if lv == "v3" or host.has_feature("avx512f")]
    if args.sources and len(levels) != 1:
        p.error("--from exports databases of one target: give one level with --levels")
    missing = [src for src in args.sources or () if not os.path.isfile(src)]
    if missing:
        p.error(f"--from: no database {missing}")
    os.makedirs(args.work, exist_ok=True)
    os.environ["TESSERA_NO_BUILTIN_RECORDS"] = "1"       # tune from the defaults, not the old records
    print(f"# machine: {_common.machine()}, load average {os.getloadavg()[0]:.2f}")
    out_dir = Path(BUILTIN_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    for lv in levels:
        if lv not in LEVELS:
            p.error(f"unknown level {lv!r}: v4 or v3")
        target = " ".join(x for x in ("c", LEVELS[lv], f"-num-threads={args.threads}") if x)
        key = autotune.record_target(target)
        work = Path(args.work) / f"{lv}-{args.threads}t.jsonl"
        full = None            # the full database, once read (tuning writes it as it goes)
        if args.sources:
            work = Path(args.work) / f"{lv}-{args.threads}t-from.jsonl"
            work.write_text("".join(_lines(src) for src in args.sources))
            full = autotune.Database(str(work))
            others = {r.target for r in full.records()} - {key}
            if others:
                p.error(f"--from: records for {sorted(others)} in {args.sources}; level {lv} ships {key!r} only")
        print(f"## level {lv}: target {target!r}, records under {key!r}, full database {work}")
        for name in ([] if args.sources else args.models.split(",")):
            g, params = from_onnx(zoo.get_model(name))
            t0 = time.perf_counter()
            res = autotune.tune_graph(g, params, target, max_trials=args.trials, database=str(work),
                                      time_budget=args.time_budget, transfer=False, seed=0)
            secs = time.perf_counter() - t0
            print(f"{name:14s} {res.trials:5d} trials {secs:7.1f} s  estimated latency "
                  f"{res.default_latency * 1e3:.3f} -> {res.latency * 1e3:.3f} ms "
                  f"({res.default_latency / res.latency:.2f}x)", flush=True)
        ship = out_dir / f"zoo-x86-64-{lv}-{args.threads}t.jsonl"
        tmp = ship.with_suffix(".jsonl.new")
        if tmp.exists():
            tmp.unlink()
        small = (full if full is not None else autotune.Database(work)).export_best(tmp, k=args.keep)
        os.replace(tmp, ship)
        print(f"wrote {ship}: {len(small)} records, {ship.stat().st_size / 1e6:.2f} MB")
    return 0


def _lines(path) -> str:
    """A database file's text, ending in a newline (files are read one after the other)."""
    text = Path(path).read_text()
    return text if not text or text.endswith("\n") else text + "\n"


if __name__ == "__main__":
    sys.exit(main())
