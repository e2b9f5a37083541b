"""Shared benchmark plumbing: argument parsing, a result table, --json output."""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--json", metavar="PATH", help="also write the figures to PATH as JSON")
    return p


def pin_blas_threads(default: int = 2) -> int:
    """Give numpy's BLAS (and OpenMP) the thread count of the command's --threads (default `default`),
    the same as tessera's; call before numpy is imported (the libraries read it when they load)."""
    n = default
    for k, a in enumerate(sys.argv):
        if a == "--threads" and k + 1 < len(sys.argv):
            n = int(sys.argv[k + 1])
            break
        if a.startswith("--threads="):
            n = int(a.split("=", 1)[1])
            break
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    return n


def machine() -> dict:
    from tessera.target import Target

    t = Target("c")
    return {"python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
            "cpu_model": _cpu_model(), "cores": os.cpu_count(),
            "target": str(t), "vector_bits": t.vector_bits,
            "features": sorted(f for f in t.features if f.startswith(("avx", "fma", "amx")))}


def _cpu_model() -> str:
    """The CPU's marketing name (Linux's /proc/cpuinfo), so a figure says which machine made it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def report(name: str, rows: list[dict], json_path: str | None, extra: dict | None = None) -> None:
    """Print rows as an aligned table and optionally write {benchmark, date, command, load average,
    machine, rows} as JSON (benchmarks/perf_doc.py renders docs/performance.md from it)."""
    if rows:
        cols = list(dict.fromkeys(k for r in rows for k in r))
        cells = [[_fmt(r.get(c, "")) for c in cols] for r in rows]
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
        print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
        for row in cells:
            print("  ".join(v.ljust(w) for v, w in zip(row, widths)))
    if json_path:
        out = {"benchmark": name, "date": time.strftime("%Y-%m-%d", time.gmtime()),
               "command": " ".join(["python", *sys.argv]), "commit": _commit(), "load_average": _load_average(),
               "machine": machine(), "rows": rows, **(extra or {})}
        Path(json_path).write_text(json.dumps(out, indent=2))
        print(f"wrote {json_path}", file=sys.stderr)


def _commit() -> str | None:
    """The code's git commit, with "+dirty" when tessera/ has uncommitted changes; None outside git."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        if head.returncode:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "tessera"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


def _load_average() -> list | None:
    """The 1, 5 and 15 minute load averages when the figures were written: others' work skews timings."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):       # AttributeError: no os.getloadavg (Windows)
        return None


def load_average_text() -> str:
    """The load averages as printed beside figures ("1.52 1.20 0.98"), "" where the system has none."""
    return " ".join(f"{x:.2f}" for x in _load_average() or ())


def quiesce(window: float = 0.01, limit: float = 0.3) -> None:
    """Sleep until this process's threads stop using the CPU: a runtime's worker threads spin after
    a call (ONNX Runtime's for about 40 ms of CPU, OpenMP's for a few ms) and, on a small machine,
    take a core from whatever is timed next. Returns after a `window` of sleep with under a third
    of it in CPU time, or after `limit` seconds."""
    end = time.perf_counter() + limit
    while time.perf_counter() < end:
        c0 = time.process_time()
        time.sleep(window)
        if time.process_time() - c0 < window / 3:
            return


def time_interleaved(fns: dict, warmup: int, repeat: int, budget: float, block: int = 3, least: int = 3) -> dict:
    """Median seconds of each fn, timed in rounds after `warmup` untimed calls each; a round gives
    every fn one block: wait until the process is idle (quiesce), one untimed call, then `block`
    timed calls. Stops after `repeat` timed calls each, or past `budget` s per fn once `least` are in.
    Returns {name: (median, min)}: on a loaded machine the minimum is the steadier figure.

    Why blocks and the wait: a runtime's worker threads spin after a call (ONNX Runtime's for about
    40 ms of CPU, OpenMP's for a few ms) and, on a 2-core machine, take a core from whatever runs
    next in the process; one call each in turn timed every framework against the others' spinning
    threads (tessera 2 threads measured 2x slower right after ONNX Runtime than alone)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {k: [] for k in fns}
    start = time.perf_counter()
    while min(len(v) for v in times.values()) < repeat:
        for k, fn in fns.items():
            quiesce()
            fn()
            for _ in range(min(block, repeat - len(times[k])) or 1):
                t0 = time.perf_counter()
                own = fn()
                t = time.perf_counter() - t0
                times[k].append(own if isinstance(own, float) else t)   # a float: the call timed itself (in C)
        if min(len(v) for v in times.values()) >= least and time.perf_counter() - start > budget * len(fns):
            break
    return {k: (statistics.median(v), min(v)) for k, v in times.items()}


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"
    return str(v)
