"""The tuner's measurements on a busy machine: a timing whose rounds stall (a kernel thread taken off
its core) or during which the worker's threads waited for a CPU is taken again, and a stall never
becomes a kernel's time (autotune/measure/_worker.py: settled_time, do_run)."""
import logging

import pytest

from tessera import te
from tessera.autotune.measure import _worker
from tessera.autotune.measure.candidate import MeasureResult
from tessera.autotune.measure.runner import warn_if_busy
from tessera.autotune.workload import Workload
from tessera.backend import build as build_artifact
from tessera.runtime.contention import STALL_RATIO
from tessera.runtime.module import BenchmarkResult

TARGET = "c -num-threads=2"
STALLED = [0.025e-3, 7.9e-3, 0.026e-3]       # one record of a busy machine: a 25 us kernel and a stall
CLEAN = [0.025e-3, 0.024e-3, 0.026e-3]


class FakeMeter:
    """Stands for contention.WaitMeter: busy as scripted, one answer per span measured."""

    script: list = []

    def __enter__(self):
        self.busy = FakeMeter.script.pop(0) if FakeMeter.script else False
        self.waited, self.wall = (0.01 if self.busy else 0.0), 0.02
        return self

    def __exit__(self, *exc):
        return False

    @property
    def share(self):
        return self.waited / self.wall


@pytest.fixture
def meter(monkeypatch):
    monkeypatch.setattr(_worker, "WaitMeter", FakeMeter)
    FakeMeter.script = []
    return FakeMeter


def rounds(*seq):
    it = iter(seq)
    return lambda: list(next(it))


def test_stalled_rounds_are_measured_again(meter):
    secs, remeasured, busy, _ = _worker.settled_time(rounds(STALLED, CLEAN), pause=0)
    assert secs == CLEAN and remeasured == 1 and not busy


def test_rounds_that_keep_stalling_lose_their_stalls(meter):
    secs, remeasured, busy, _ = _worker.settled_time(rounds(STALLED, STALLED[::-1], STALLED), pause=0)
    assert remeasured == 2 and not busy
    assert len(secs) == 3 and max(secs) < 0.03e-3       # three clean rounds from the three attempts


def test_measuring_again_stays_within_its_budget(meter):
    secs, remeasured, busy, _ = _worker.settled_time(rounds(STALLED, CLEAN), pause=0, budget=0.0)
    assert remeasured == 0 and secs == [0.025e-3, 0.026e-3]         # no second look, still no stall


def test_a_busy_machine_is_measured_again_and_the_result_says_so(meter):
    meter.script = [True, True, False]
    secs, remeasured, busy, _ = _worker.settled_time(rounds([2e-3] * 3, [2e-3] * 3, [1e-3] * 3), pause=0)
    assert secs == [1e-3] * 3 and remeasured == 2 and not busy         # the quiet third look is taken
    meter.script = [True, True, True]
    secs, remeasured, busy, _ = _worker.settled_time(rounds([2e-3] * 3, [2e-3] * 3, [2e-3] * 3), pause=0)
    assert remeasured == 2 and busy


@pytest.fixture(scope="module")
def worker_state():
    """A runner worker's state, in this process, prepared for an elementwise workload; its library."""
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64, 64), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    func = te.create_prim_func([A, B])
    wl = Workload(func)
    state = _worker.State()
    state.funcs[wl.key] = func
    _worker.do_prepare(state, {"key": wl.key, "target": TARGET, "seed": 0})
    art = build_artifact(func, TARGET)
    return state, wl.key, art.path, art.source.functions[0].name


class StallOnce:
    """A compiled function whose first timing reports one round stalled (as a descheduled thread makes it)."""

    def __init__(self, fn):
        self.fn, self.timings = fn, 0

    def __call__(self, *args):
        return self.fn(*args)

    def time(self, args, number, repeat, min_repeat_ms):
        res = self.fn.time(args, number, repeat, min_repeat_ms)
        self.timings += 1
        if self.timings == 1:
            return BenchmarkResult([res.results[0], 300 * max(res.results), *res.results[2:]])
        return res


class ModuleWith:
    def __init__(self, fn):
        self.fn = fn

    def get_function(self, name):
        return self.fn


def run_request(key, path, name, **kw):
    return {"op": "run", "key": key, "path": path, "func_name": name, "target": TARGET, "number": 3, "repeat": 3,
            "min_repeat_ms": 0, "check": True, "flush": False, "warmup": True, "cutoff_secs": None, **kw}


def test_the_worker_never_records_a_stalled_round_as_the_kernels_time(worker_state, monkeypatch):
    state, key, path, name = worker_state
    stalling = StallOnce(state.module(path, TARGET).get_function(name))
    monkeypatch.setitem(state.modules, path, ModuleWith(stalling))
    ans = _worker.do_run(state, run_request(key, path, name))
    assert "error_kind" not in ans, ans
    secs = ans["run_secs"]
    assert len(secs) == 3 and max(secs) <= STALL_RATIO * min(secs), secs
    assert ans["remeasured"] >= 1 and stalling.timings == 1 + ans["remeasured"]


def test_a_checked_call_slowed_by_a_busy_machine_is_not_cut_off(worker_state, meter):
    state, key, path, name = worker_state
    meter.script = [True]                    # the checked call: other work held the cores
    ans = _worker.do_run(state, run_request(key, path, name, cutoff_secs=1e-12))
    assert len(ans["run_secs"]) == 3           # timed in full, not recorded as its one checked call
    meter.script = [False]
    ans = _worker.do_run(state, run_request(key, path, name, cutoff_secs=1e-12))
    assert len(ans["run_secs"]) == 1           # a quiet checked call over the cutoff: a sure loser


def test_results_carry_their_remeasurements_and_a_busy_one_is_warned_about(caplog):
    r = MeasureResult((1e-3, 1e-3), remeasured=2, busy=True)
    back = MeasureResult.from_json(r.as_json())
    assert back.remeasured == 2 and back.busy
    older = {k: v for k, v in r.as_json().items() if k not in ("remeasured", "busy")}    # a worker before them
    assert MeasureResult.from_json(older) == MeasureResult((1e-3, 1e-3))
    with caplog.at_level(logging.WARNING, logger="tessera"):
        warn_if_busy([r, MeasureResult((2e-3,))])
    assert "1 of 2 candidates were timed while other work held the cores" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tessera"):
        warn_if_busy([MeasureResult((2e-3,))])
    assert not caplog.text
