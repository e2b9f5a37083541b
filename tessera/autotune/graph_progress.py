"""The live table of a whole-model tuning (`tessera tune`): tune_graph's progress callback.

    with GraphTuneTable(max_trials=2000, time_budget=1800) as table:
        res = autotune.tune_graph(graph, params, target, max_trials=2000, database=db, progress=table)
    print(table.text())

Per task: its weight (nodes that run it), trials and failed ones, default and best kernel time,
speedup over the default and its state (tuning, converged, exhausted); below, the totals: trials, the estimated model
latency (sum of weight x best kernel time, tune_graph's estimate) beside the default schedules', the
elapsed time and an ETA. On a terminal the table is redrawn in place by rich.live; elsewhere (a pipe,
a log file, rich missing) a one-line summary is printed every `interval` seconds instead. The live
table is transient: the caller prints text() at the end.
"""
from __future__ import annotations

import math
import sys
from collections import deque

from .scheduler import estimated_latency


def format_duration(secs: float | None) -> str:
    """12 s, 3m05s, 1h02m; '-' for unknown."""
    if secs is None or not math.isfinite(secs):
        return "-"
    secs = max(0, round(secs))
    if secs < 60:
        return f"{secs} s"
    if secs < 3600:
        return f"{secs // 60}m{secs % 60:02d}s"
    return f"{secs // 3600}h{(secs % 3600) // 60:02d}m"


def _ms(secs) -> str:
    """Milliseconds in fixed point, with more decimals for shorter kernels (nanoseconds to seconds)."""
    if not secs:
        return "-"
    ms = secs * 1e3
    digits = 1 if ms >= 100 else 3 if ms >= 1 else 4 if ms >= 0.01 else 6
    return f"{ms:.{digits}f}"


class GraphTuneTable:
    """tune_graph's `progress` callable drawing the live table (see the module docstring).

    max_trials / time_budget: the run's limits (for the ETA); show: None (draw when the stream is a
    terminal, print summary lines otherwise), True or False (nothing); interval: seconds between
    summary lines when not live; window: seconds of recent rounds the trial rate (and ETA) is taken
    over."""

    def __init__(self, max_trials: int, time_budget: float | None = None, show=None, stream=None,
                 interval: float = 10.0, window: float = 60.0, title: str = "tessera tune"):
        self.max_trials = max_trials
        self.time_budget = time_budget
        self.stream = stream or sys.stderr
        self.show = True if show is None else bool(show)
        self.interval = interval
        self.window = window
        self.title = title
        self.reports: list = []
        self.totals: dict = {}
        self._rates: deque = deque()      # (seconds, trials) of recent rounds
        self.start_trials = None          # trials already in the database when the run started (resumed)
        self._live = None
        self._last_line = None

    # ------------------------------------------------------------------ the callback
    def __call__(self, reports, totals) -> None:
        self.reports, self.totals = list(reports), dict(totals)
        if self.time_budget is None:
            self.time_budget = totals.get("time_budget")
        secs, trials = totals.get("seconds", 0.0), totals.get("trials", 0)
        if self.start_trials is None:
            self.start_trials = trials
        self._rates.append((secs, trials))
        while len(self._rates) > 2 and secs - self._rates[0][0] > self.window:
            self._rates.popleft()
        if not self.show:
            return
        if self._live is not None:
            self._live.update(self.renderable())
        elif self._last_line is None or secs - self._last_line >= self.interval:
            self._last_line = secs
            print(f"[{self.title}] {self.summary()}", file=self.stream, flush=True)

    # ------------------------------------------------------------------ figures
    @property
    def trials(self) -> int:
        return int(self.totals.get("trials", 0))

    @property
    def seconds(self) -> float:
        return float(self.totals.get("seconds", 0.0))

    def rate(self) -> float | None:
        """Trials per second over the recent window (None before two rounds that measured)."""
        if len(self._rates) < 2:
            return None
        (s0, t0), (s1, t1) = self._rates[0], self._rates[-1]
        if s1 <= s0 or t1 <= t0:
            return None
        return (t1 - t0) / (s1 - s0)

    def eta(self) -> float | None:
        """Seconds left: the trials left at the recent rate, capped by the time budget left; 0 when
        every task is done; None while unknown."""
        if self.reports and all(r.done for r in self.reports):
            return 0.0
        left = max(0, self.max_trials - self.trials)
        if left == 0:
            return 0.0
        rate = self.rate()
        eta = left / rate if rate else None
        if self.time_budget is not None:
            budget_left = max(0.0, self.time_budget - self.seconds)
            eta = budget_left if eta is None else min(eta, budget_left)
        return eta

    def summary(self) -> str:
        """One line: trials, estimated latency (and over the defaults), elapsed, ETA."""
        lat = estimated_latency(self.reports)
        dlat = estimated_latency(self.reports, "default_secs", fallback=False)   # every default measured
        est = "estimated latency -"
        if lat:
            est = f"estimated latency {lat * 1e3:.3f} ms"
            if dlat:
                est += f" (default {dlat * 1e3:.3f} ms, {dlat / lat:.2f}x)"
        done = sum(1 for r in self.reports if r.done)
        rate = self.rate()
        rate_text = f", {rate:.2f} trials/s" if rate else ""
        return (f"{self.trials}/{self.max_trials} trials, {done}/{len(self.reports)} tasks done, {est}, "
                f"{format_duration(self.seconds)} elapsed{rate_text}, ETA {format_duration(self.eta())}")

    def rows(self) -> list:
        """The table's rows as text cells: task, weight, trials, errors (candidates that failed to build,
        run or check), default ms, best ms, speedup, state."""
        out = []
        for r in self.reports:
            sp = r.speedup
            state = r.done or ("tuning" if r.trials else "waiting")
            out.append([r.name, str(r.weight), str(r.trials), str(r.errors), _ms(r.default_secs), _ms(r.best_secs),
                        f"{sp:.2f}x" if sp else "-", state])
        return out

    HEADER = ("task", "w", "trials", "errors", "default ms", "best ms", "speedup", "state")

    def text(self) -> str:
        """The table and its totals as plain text (the end of `tessera tune`)."""
        rows = [list(self.HEADER)] + self.rows()
        widths = [max(len(row[i]) for row in rows) for i in range(len(self.HEADER))]
        lines = []
        for k, row in enumerate(rows):
            cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
            lines.append("  ".join(cells).rstrip())
            if k == 0:
                lines.append("-" * len(lines[0]))
        lines.append(self.summary())
        return "\n".join(lines)

    def renderable(self, max_rows: int | None = None, width: int | None = None):
        """A rich Table of the tasks (the heaviest max_rows by weighted time when there are more; task
        names shortened to fit width columns), the totals as its caption."""
        from rich import box  # noqa: PLC0415 (optional dependency)
        from rich.table import Table  # noqa: PLC0415

        if self._live is not None:
            size = self._live.console.size
            max_rows = max(5, size.height - 9) if max_rows is None else max_rows
            width = size.width if width is None else width
        pairs = list(zip(self.reports, self.rows()))
        hidden = 0
        if max_rows is not None and len(pairs) > max_rows:
            def cost(p):
                r = p[0]
                return r.weight * (r.best_secs or r.default_secs or 0.0)
            keep = {id(p) for p in sorted(pairs, key=cost, reverse=True)[:max_rows]}
            hidden = len(pairs) - max_rows
            pairs = [p for p in pairs if id(p) in keep]
        figures = [max([len(h)] + [len(row[i]) for _, row in pairs]) for i, h in enumerate(self.HEADER)][1:]
        name_width = max(12, (width or 200) - sum(figures) - 3 * len(self.HEADER) - 2)
        table = Table(title=self.title, caption=self.summary(), caption_justify="left", box=box.SIMPLE_HEAD,
                      expand=False, pad_edge=False)
        for i, h in enumerate(self.HEADER):
            table.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
        for r, row in pairs:
            name = row[0] if len(row[0]) <= name_width else row[0][:name_width - 1] + "\u2026"
            table.add_row(name, *row[1:], style="green" if r.done else None)
        if hidden:
            table.add_row(f"... {hidden} lighter tasks", *[""] * (len(self.HEADER) - 1), style="dim")
        return table

    # ------------------------------------------------------------------ live display
    def __enter__(self):
        if self.show and getattr(self.stream, "isatty", lambda: False)():
            try:
                from rich.console import Console  # noqa: PLC0415 (optional dependency)
                from rich.live import Live  # noqa: PLC0415
            except ImportError:
                return self
            self._live = Live(console=Console(file=self.stream), refresh_per_second=4, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc):
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None
        return False


__all__ = ["GraphTuneTable", "estimated_latency", "format_duration"]
