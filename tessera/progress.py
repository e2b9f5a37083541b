"""Progress of long work: what a compile is doing, said once it has taken a couple of seconds.

The work announces its steps; a Reporter, when one is active, shows them:

    with progress.stage("optimizing the graph", detail="51 nodes"):       # one step of the work
        ...
    with progress.stage("building kernels", total=28) as st:               # a step with a count
        for ...:
            ...
            st.advance()
    progress.tally("from cache")     # counted on the innermost step (the C compiler driver says
                                     # whether each library came from its cache or was compiled)

    with progress.Reporter(show=True):        # the command line: around the whole command
        exe = tessera.compile(graph, params)

A Reporter shows nothing during its first `delay` seconds (2 s): short work stays silent. After that,
while a step is under way, it shows the steps (outer > inner), their counts and tallies: on a terminal
as one live line drawn by rich (erased when the step ends; plain lines where rich is missing),
elsewhere as plain lines on its stream (`tessera: building kernels: 12/28 (9 from cache, 3 compiled)`,
a count at most every `interval` seconds, a last line when a shown step with a count ends, an inner
step only once it has run half a second).

show: True (rich on a terminal, plain lines otherwise), None (rich on a terminal, nothing
otherwise: what tessera.compile does when nobody asked), False (nothing). callback: a function
called with a ProgressEvent at every start, advance and end, at once (no delay), from the thread that
does the work (kernel builds run on several threads). Every step start is also logged at DEBUG on the
"tessera.progress" logger, with or without a Reporter.

The active Reporter is a context variable: the threads of a thread pool see it only when their task
runs in a copy of the submitting thread's context (`contextvars.copy_context().run`). With none
active, stage() and tally() cost a log call.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import threading
import time
from typing import NamedTuple

from .errors import TesseraError

DELAY_S = 2.0          # work shorter than this says nothing
INTERVAL_S = 2.0       # plain lines: at most one count line per step this often
_POLL_S = 0.1          # how often a Reporter looks whether its delay has passed
_NESTED_S = 0.5        # plain lines: an inner step is named once it has run this long

_LOG = logging.getLogger("tessera.progress")
_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("tessera_progress", default=None)


class ProgressEvent(NamedTuple):
    """What a callback receives. kind: "start", "advance" or "end"; path: the steps under way, outermost
    first (the event's own step last); done / total: its count (total None: not counted); tallies:
    {what: how many} told by tally(); elapsed: seconds since the Reporter started."""
    kind: str
    path: tuple
    done: int
    total: int | None
    tallies: dict
    elapsed: float


class _Stage:
    """One step under way (see stage())."""

    def __init__(self, reporter, what: str, total, detail: str):
        self.reporter = reporter
        self.what = what
        self.total = total
        self.detail = detail
        self.done = 0
        self.tallies: dict = {}
        self.t0 = time.perf_counter()
        self.shown = False            # a plain line of it was printed
        self.last_line = 0.0          # when its last plain line was printed

    def advance(self, n: int = 1) -> None:
        """n more of the step's count done (safe from any thread)."""
        if self.reporter is not None:
            self.reporter._advance(self, n)

    def text(self) -> str:
        return self.what + (f" ({self.detail})" if self.detail else "")

    def count_text(self) -> str:
        """'12/28 (9 from cache, 3 compiled)', '1 compiled' (no total) or ''."""
        tallies = ", ".join(f"{n} {what}" for what, n in self.tallies.items())
        if self.total is None:
            return tallies
        return f"{self.done}/{self.total}" + (f" ({tallies})" if tallies else "")


_NULL = _Stage(None, "", None, "")


@contextlib.contextmanager
def stage(what: str, total: int | None = None, detail: str = ""):
    """A step of the work under way for the duration of the `with` (see the module docstring); yields
    an object whose advance(n=1) counts towards `total`."""
    _LOG.debug("%s%s%s", what, f" ({detail})" if detail else "", f": {total}" if total is not None else "")
    reporter = _ACTIVE.get()
    if reporter is None:
        yield _NULL
        return
    st = _Stage(reporter, what, total, detail)
    reporter._start(st)
    try:
        yield st
    finally:
        reporter._end(st)


def tally(what: str, n: int = 1) -> None:
    """Count `what` on the innermost step under way (e.g. "from cache" or "compiled" per library)."""
    reporter = _ACTIVE.get()
    if reporter is not None:
        reporter._tally(what, n)


def active():
    """The Reporter of this context, or None."""
    return _ACTIVE.get()


class Reporter:
    """Shows the steps of the work done inside its `with` (see the module docstring).

    show: True, None or False; stream: where (default sys.stderr); delay: seconds of silence first
    (default DELAY_S); interval: seconds between count lines of plain output (default INTERVAL_S);
    callback(ProgressEvent); prefix: of plain lines."""

    def __init__(self, show=True, stream=None, delay: float | None = None, interval: float | None = None,
                 callback=None, prefix: str = "tessera: "):
        self.stream = stream if stream is not None else sys.stderr
        tty = _isatty(self.stream)
        self.mode = None                      # None (silent), "rich" or "plain"
        if show is None:
            self.mode = "rich" if tty else None
        elif show:
            self.mode = "rich" if tty else "plain"
        if self.mode == "rich" and not _has_rich():
            self.mode = "plain"
        self.delay = DELAY_S if delay is None else delay
        self.interval = INTERVAL_S if interval is None else interval
        self.callback = callback
        self.prefix = prefix
        self.stages: list = []
        self._lock = threading.RLock()
        self._t0 = None
        self._token = None
        self._stop = threading.Event()
        self._busy = threading.Event()        # set while a step is under way
        self._thread = None
        self._rich = None
        self._task = None

    # ------------------------------------------------------------------ entering / leaving
    def __enter__(self):
        self._t0 = time.perf_counter()
        self._token = _ACTIVE.set(self)
        if self.mode is not None:
            self._thread = threading.Thread(target=self._poll, name="tessera-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._busy.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._hide()
        _ACTIVE.reset(self._token)
        return False

    @property
    def elapsed(self) -> float:
        return 0.0 if self._t0 is None else time.perf_counter() - self._t0

    def _poll(self) -> None:
        """Looks every _POLL_S while a step is under way, and sleeps without waking in between (a
        timing such as `tessera bench`'s then sees no thread of ours wait for a CPU)."""
        while not self._stop.is_set():
            self._busy.wait()
            if self._stop.wait(_POLL_S):
                return
            with self._lock:
                self._refresh()

    # ------------------------------------------------------------------ events
    def _event(self, kind: str, st: _Stage) -> None:
        if self.callback is not None:
            path = tuple(s.what for s in self.stages) + (() if st in self.stages else (st.what,))
            self.callback(ProgressEvent(kind, path, st.done, st.total, dict(st.tallies), self.elapsed))

    def _start(self, st: _Stage) -> None:
        with self._lock:
            self.stages.append(st)
            self._busy.set()
            self._event("start", st)
            self._refresh()

    def _advance(self, st: _Stage, n: int) -> None:
        with self._lock:
            st.done += n
            self._event("advance", st)
            self._refresh()

    def _tally(self, what: str, n: int) -> None:
        with self._lock:
            if self.stages:
                st = self.stages[-1]
                st.tallies[what] = st.tallies.get(what, 0) + n

    def _end(self, st: _Stage) -> None:
        with self._lock:
            self._event("end", st)
            if st in self.stages:
                self.stages.remove(st)
            if not self.stages:
                self._busy.clear()
            if self.mode == "plain" and st.shown and (st.total is not None or st.tallies):
                self._line(f"{self._path_text(st)}: {st.count_text()}, {time.perf_counter() - st.t0:.1f} s")
            self._refresh()

    # ------------------------------------------------------------------ display
    def _path_text(self, st: _Stage) -> str:
        """'outer > inner (detail)': the steps under way, the innermost with its detail."""
        outer = [s.what for s in self.stages if s is not st]
        return " > ".join(outer + [st.text()])

    def _refresh(self) -> None:
        """Show the innermost step if the delay has passed (called with the lock held)."""
        if self.mode is None:
            return
        if not self.stages:
            self._hide()
            return
        if self.elapsed < self.delay:
            return
        st = self.stages[-1]
        if self.mode == "rich":
            self._draw_rich(st)
            return
        now = time.perf_counter()
        if not st.shown:
            if len(self.stages) > 1 and now - st.t0 < _NESTED_S:
                return                        # a short inner step (a constant folded) is not worth a line
            st.shown = True
            st.last_line = now
            count = st.count_text() if st.done or st.tallies else ""
            self._line(f"{self._path_text(st)}..." + (f" {count}" if count else ""))
        elif st.total is not None and now - st.last_line >= self.interval and st.done < st.total:
            st.last_line = now
            self._line(f"{self._path_text(st)}: {st.count_text()}")

    def _line(self, text: str) -> None:
        try:
            print(self.prefix + text, file=self.stream, flush=True)
        except (OSError, ValueError):       # a closed pipe or stream: progress is not worth failing for
            self.mode = None

    def _draw_rich(self, st: _Stage) -> None:
        if self._rich is None:
            try:
                from rich.console import Console  # noqa: PLC0415 (optional dependency)
                from rich.progress import (BarColumn, Progress, SpinnerColumn, TextColumn,  # noqa: PLC0415
                                           TimeElapsedColumn)

                self._rich = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                      TextColumn("{task.fields[count]}"), TimeElapsedColumn(),
                                      console=Console(file=self.stream), transient=True)
                self._rich.start()
            except Exception:  # noqa: BLE001 - another live display (a tuning table) owns the terminal
                self._rich = None
                self.mode = None
                return
            self._task = self._rich.add_task("", total=None, count="")
        self._rich.update(self._task, description=self._path_text(st), total=st.total, completed=st.done,
                          count=st.count_text())

    def _hide(self) -> None:
        if self._rich is not None:
            try:
                self._rich.stop()
            finally:
                self._rich = None
                self._task = None


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _has_rich() -> bool:
    try:
        import rich.progress  # noqa: F401, PLC0415 (optional dependency)
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def reporting(progress):
    """The Reporter for a library call's `progress` argument (tessera.compile's): None uses the one
    active (the command line's) or else shows on a terminal only; True shows (plain lines when not a
    terminal); False shows nothing; a callable gets every ProgressEvent (nothing is printed)."""
    if progress is None and _ACTIVE.get() is not None:
        yield _ACTIVE.get()
        return
    if callable(progress):
        reporter = Reporter(show=False, callback=progress)
    elif progress is None or isinstance(progress, bool):
        reporter = Reporter(show=progress)
    else:
        raise TesseraError(f"progress must be None, True, False or a function of a ProgressEvent, got "
                           f"{type(progress).__name__}")
    with reporter:
        yield reporter


__all__ = ["DELAY_S", "ProgressEvent", "Reporter", "active", "reporting", "stage", "tally"]
