"""Shared benchmark plumbing: argument parsing, a result table, --json output."""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--json", metavar="PATH", help="also write the figures to PATH as JSON")
    return p


def machine() -> dict:
    from tessera.target import Target

    t = Target("c")
    return {"python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
            "target": str(t), "vector_bits": t.vector_bits,
            "features": sorted(f for f in t.features if f.startswith(("avx", "fma", "amx")))}


def report(name: str, rows: list[dict], json_path: str | None, extra: dict | None = None) -> None:
    """Print rows as an aligned table and optionally write {benchmark, machine, rows} as JSON."""
    if rows:
        cols = list(dict.fromkeys(k for r in rows for k in r))
        cells = [[_fmt(r.get(c, "")) for c in cols] for r in rows]
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
        print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
        for row in cells:
            print("  ".join(v.ljust(w) for v, w in zip(row, widths)))
    if json_path:
        out = {"benchmark": name, "machine": machine(), "rows": rows, **(extra or {})}
        Path(json_path).write_text(json.dumps(out, indent=2))
        print(f"wrote {json_path}", file=sys.stderr)


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


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"
    return str(v)
