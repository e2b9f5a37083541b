"""The tuner's progress line: trials, best GFLOPS (or best time) and an ETA, drawn by rich when it
is installed and the output is a terminal, a plain line per round otherwise (or nothing)."""
from __future__ import annotations

import sys
import time


class TuneProgress:
    """with TuneProgress(name, total, flops, show) as p: p.update(trials, best_secs)"""

    def __init__(self, name: str, total: int, flops: float, show=None, stream=None):
        self.name = name
        self.total = total
        self.flops = flops
        self.stream = stream or sys.stderr
        self.show = self.stream.isatty() if show is None else bool(show)
        self._rich = None
        self._id = None
        self._t0 = time.perf_counter()

    def _best(self, best_secs) -> str:
        if best_secs is None:
            return "best: -"
        if self.flops:
            return f"best {self.flops / best_secs / 1e9:8.2f} GFLOPS ({best_secs * 1e3:.3f} ms)"
        return f"best {best_secs * 1e3:.3f} ms"

    def __enter__(self):
        if self.show and self.stream.isatty():
            try:
                from rich.progress import (BarColumn, MofNCompleteColumn, Progress,  # noqa: PLC0415 (optional)
                                           TextColumn, TimeElapsedColumn, TimeRemainingColumn)
            except ImportError:
                return self
            self._rich = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("{task.fields[best]}"), TimeElapsedColumn(), TextColumn("ETA"),
                                  TimeRemainingColumn(), transient=False)
            self._rich.__enter__()
            self._id = self._rich.add_task(self.name, total=self.total, best=self._best(None))
        return self

    def update(self, trials: int, best_secs, errors: int = 0):
        if self._rich is not None:
            self._rich.update(self._id, completed=min(trials, self.total), best=self._best(best_secs))
        elif self.show:
            el = time.perf_counter() - self._t0
            eta = el / trials * (self.total - trials) if trials else float("nan")
            print(f"[tune {self.name}] {trials}/{self.total} trials, {self._best(best_secs)}, {errors} errors, "
                  f"{el:.0f} s, ETA {eta:.0f} s", file=self.stream, flush=True)

    def __exit__(self, *exc):
        if self._rich is not None:
            self._rich.__exit__(*exc)
        return False
