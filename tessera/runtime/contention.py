"""Telling a busy machine from a slow program: how long this process's threads waited for a CPU
while something was timed, and repeats that split into a fast group and stalled ones.

A time taken while other work held the cores is the scheduler's, not the program's. Linux counts
per thread the time it was ready to run but waiting for a CPU (/proc/self/task/*/schedstat, its
second field, in nanoseconds); `WaitMeter` sums that over this process's threads across a span.
Waits above BUSY_SHARE of the span's wall time (and above BUSY_FLOOR) mean the span was contended. A parallel kernel's
threads wait for each other, so one descheduled thread stalls the whole kernel: a repeat over
STALL_RATIO times the fastest is such a stall (`split_stalls`). Both are used where tessera times
something: the tuner's runner re-measures (autotune/measure/_worker.py), `tessera bench` and
`tessera demo` say the machine was busy instead of printing a ratio (`busy_reason`).
"""
from __future__ import annotations

import os
import time

BUSY_SHARE = 0.1       # threads' waits for a CPU over this share of a span's wall time: a busy machine
BUSY_FLOOR = 1e-3      # ... and over this many seconds (a thread woken from sleep waits a little anyway)
STALL_RATIO = 3.0      # a repeat over this many times the fastest: a stall, not the program's time


def thread_waits() -> int | None:
    """Nanoseconds this process's threads have waited for a CPU so far (threads that ended are not
    counted); None where the kernel does not say (no schedstat)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    total, found = 0, False
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
                total += int(f.read().split()[1])
            found = True
        except (OSError, ValueError, IndexError):
            continue                # a thread that ended meanwhile
    return total if found else None


class WaitMeter:
    """`with WaitMeter() as m: ...` -- m.wall: the span's seconds; m.waited: seconds this process's
    threads waited for a CPU in it (None where unknown); m.busy: whether that passed BUSY_SHARE of
    the span and BUSY_FLOOR (where unknown: whether the load average passed the number of cores)."""

    def __init__(self):
        self.wall, self.waited = 0.0, None
        self._t0 = self._w0 = None

    def __enter__(self):
        self._w0 = thread_waits()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self._t0
        w1 = thread_waits()
        self.waited = None if self._w0 is None or w1 is None else max(0, w1 - self._w0) * 1e-9
        return False

    @property
    def share(self) -> float | None:
        """Waits over the span's wall time (None where unknown)."""
        if self.waited is None:
            return None
        return self.waited / self.wall if self.wall > 0 else 0.0

    @property
    def busy(self) -> bool:
        if self.waited is None:
            return overloaded()
        return self.waited > BUSY_FLOOR and self.waited > BUSY_SHARE * self.wall


def overloaded() -> bool:
    """Whether the 1-minute load average is above the cores this process may use (a lagging sign,
    for where thread waits are unknown)."""
    load = load_average()
    return load is not None and load > usable_cores()


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def split_stalls(secs, floor: float = 0.0) -> tuple:
    """(kept, stalled): the repeats within STALL_RATIO of the fastest (or within `floor` seconds of
    it: whole calls from Python jitter by more than a kernel's rounds do), and the rest, each in order."""
    secs = list(secs)
    if not secs:
        return [], []
    fastest = min(secs)
    limit = max(STALL_RATIO * fastest, fastest + floor)
    return [s for s in secs if s <= limit], [s for s in secs if s > limit]


def busy_reason(secs, meter: WaitMeter) -> str | None:
    """Why the whole-call times `secs` taken across `meter`'s span say more about the machine than
    the program (a sentence), or None when they look clean."""
    kept, stalled = split_stalls(secs, floor=BUSY_FLOOR)
    why = []
    if meter.waited is not None and meter.busy:
        why.append(f"its threads waited {meter.waited * 1e3:.1f} ms for a CPU in {meter.wall * 1e3:.1f} ms")
    elif meter.waited is None and meter.busy:
        why.append("the machine is overloaded")
    if stalled:
        why.append(f"{len(stalled)} of {len(secs)} runs stalled (up to {max(stalled) / min(kept):.0f}x the fastest)")
    if not why:
        return None
    load = load_average()
    return "; ".join(why) + (f"; load average {load:.1f} on {usable_cores()} cores" if load is not None else "")


__all__ = ["BUSY_FLOOR", "BUSY_SHARE", "STALL_RATIO", "WaitMeter", "busy_reason", "load_average", "overloaded",
           "split_stalls", "thread_waits", "usable_cores"]
