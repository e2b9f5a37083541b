"""tune_tir: the tuning loop over one task, and apply_best: a schedule from the records.

Each round the strategy proposes a batch of new candidates (deduplicated by program), the builder
compiles them in parallel, the runner checks and times them, the batch goes to the database (flushed
and fsynced) and to the cost model, and the strategy hears the results. A database that already
holds records of the task resumes: its trials count, its candidates are not measured again, and
they train the cost model first.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import TesseraError
from ..graph.passes.winograd import streams_weights
from ..ir import PrimFunc
from ..ir.tensor_type import TensorType
from ..target import Target
from ..tir import Schedule
from ..tir.schedule import Trace
from .apply_history import chosen_record
from .cost_model import make_cost_model
from .database import Database, record_target
from .measure import LocalRunner, MeasureCandidate, make_record
from .measure.runner import measure
from .progress import TuneProgress
from .search import make_strategy
from .task import TuneTask
from .workload import Workload


@dataclass
class TuneResult:
    """The best candidate a tuning found, and how the search got there.

    history: one (trials, seconds since the start, best seconds so far) per round, for tuning curves.
    """

    task: TuneTask
    schedule: Schedule | None
    trace: Trace | None
    run_secs: float | None
    trials: int
    errors: int
    seconds: float
    history: list = field(default_factory=list)

    @property
    def gflops(self) -> float | None:
        if not self.run_secs or not self.task.flops:
            return None
        return self.task.flops / self.run_secs / 1e9

    def __repr__(self):
        best = f"{self.run_secs * 1e3:.4f} ms" if self.run_secs else "none"
        return f"<TuneResult {self.task.name}: best {best} after {self.trials} trials ({self.errors} errors)>"


_RUNNERS: dict = {}   # the tuner's shared default runner (its worker process persists across calls)


def _tuning_runner():
    """LocalRunner timing each candidate for >= 50 ms after its checked call (which stands for the
    warm-up): a 4 ms GEMM candidate still gets a dozen timed calls, and a 1,000-trial search spends
    half as long in the timer as with MetaSchedule's 100 ms."""
    r = _RUNNERS.get("tune")
    if r is None:
        r = _RUNNERS["tune"] = LocalRunner(number=3, repeat=1, min_repeat_ms=50, warmup=False)
    return r


def graph_timing(cold_weights: bool = True) -> dict:
    """The timing settings of tune_graph's runners (LocalRunner's or DaskRunner's keywords): 3 rounds
    of 3 calls, each round after evicting the kernel's weights (MeasureCandidate.weights) from the
    caches where cold_weights -- the model's weights outgrow the last-level cache, so each node
    reads its own from memory -- and with everything warm otherwise (they stay cached from one run of
    the model to the next). The input its previous node just wrote is in cache inside a model either
    way. Flushing every argument and the whole cache instead (AutoTVM's advice for x86 convolutions)
    made MobileNetV2's isolated picks slower in the model than its defaults."""
    return {"number": 3, "repeat": 3, "min_repeat_ms": 0, "warmup": False,
            "flush_cache": "weights" if cold_weights else False}


def weights_outgrow_cache(tasks, target) -> bool:
    """Whether a model's kernels read their weights from memory: a CPU target, and weights
    (weights_bytes) past the bytes the Winograd pass also counts as streamed (streams_weights), so
    that the tuner times kernels under the conditions the compiler plans the model for."""
    return Target(target).is_cpu and streams_weights(weights_bytes(tasks))


def graph_runner(cold_weights: bool = True):
    """The runner tune_graph uses by default: a LocalRunner with graph_timing(cold_weights)."""
    key = "graph" if cold_weights else "graph-warm"
    r = _RUNNERS.get(key)
    if r is None:
        r = _RUNNERS[key] = LocalRunner(**graph_timing(cold_weights))
    return r


def weights_bytes(tasks) -> int:
    """Bytes of weights the tasks' nodes read in one run of their model: each node its own."""
    total = 0
    for t in tasks:
        params = t.func.params
        per = sum(TensorType(tuple(d.value for d in params[i].shape), params[i].dtype).nbytes() for i in t.weights)
        total += getattr(t, "weight", 1) * per
    return total


class TaskTuner:
    """One task's search, advanced a round at a time: tune_tir runs one to its end, tune_graph's
    task scheduler interleaves many (sharing one cost model, runner and database).

    start() resumes from the database's records of the task; measure(schedules) measures given
    schedules (the task's default, say); round(n) measures the strategy's next n proposals.
    trials / errors / best_secs / best_trace / history keep the state; best_trial: the trial count
    when best_secs was reached (resumed records included: early stopping counts from it);
    exhausted: the space gave nothing new. confirm: measure each candidate that beats the best so
    far a second time before it counts (_confirmed; tune_graph's tuners do)."""

    def __init__(self, task: TuneTask, model, rng, strategy="evolutionary", database=None, runner=None,
                 builder=None, cutoff_factor: float | None = 8.0, confirm: bool = False):
        self.task = task
        self.confirm = confirm
        self.model = model
        self.search = make_strategy(strategy, task, model, rng)
        self.database = database
        self.runner = runner if runner is not None else _tuning_runner()
        self.builder = builder
        self.cutoff_factor = cutoff_factor
        self.target_key = record_target(task.target)
        self.trials = self.errors = 0
        self.best_secs, self.best_trace = None, None
        self.best_trial = 0                # trials when best_secs was reached
        self.history: list = []            # (trials, seconds since start(), best seconds)
        self.exhausted = False
        self._t0 = time.perf_counter()

    def start(self) -> None:
        """Commit the workload and take over the database's records of the task (resume)."""
        self._t0 = time.perf_counter()
        if self.database is None:
            return
        task, search = self.task, self.search
        key = task.workload.key
        self.database.commit_workload(task.func)
        prior = list(self.database.records(workload_key=key, target=self.target_key))
        if not prior:
            return
        seeds, feats, results = [], [], []
        counted: set = set()
        for rec in prior:
            sch = task.space.replay(rec.trace)
            ck = search.key(sch) if sch is not None else None
            if ck is None or ck not in counted:       # a candidate measured again is one trial
                counted.add(ck)
                self.trials += 1
                if rec.error is not None:
                    self.errors += 1
            if sch is None:
                continue
            secs = rec.secs if rec.is_valid else None     # the median of its rounds, as records rank
            seeds.append((secs, sch))
            feats.append(search.features(sch))
            results.append(rec)
            if secs is not None and (self.best_secs is None or secs < self.best_secs):
                self.best_secs, self.best_trace, self.best_trial = secs, sch.trace, self.trials
        search.seed_measured(seeds)
        if feats:
            self.model.update(feats, results, [key] * len(feats))
        self.history.append((self.trials, 0.0, self.best_secs))

    def round(self, n: int) -> int:
        """Measure up to n new candidates of the strategy; the number measured (0: exhausted)."""
        cands = self.search.propose(n)
        if not cands:
            self.exhausted = True
            return 0
        return self._run(cands)

    def measure(self, cands: list) -> int:
        """Measure these schedules of the task (the task's default, say); one measured or proposed
        before is left out. The number measured."""
        fresh, keys = [], set()
        for s in cands:
            k = self.search.key(s)
            if k not in self.search.seen and k not in keys:
                keys.add(k)
                fresh.append(s)
        self.search.seen.update(keys)
        return self._run(fresh) if fresh else 0

    def default_secs(self, measure: bool = True) -> float | None:
        """Seconds of the task's default schedule (space.default(), where the space has one): found
        among the measured candidates (a resumed database), else measured now (measure=True) as a
        trial; None without one."""
        sch = self.task.space.default() if hasattr(self.task.space, "default") else None
        if sch is None:
            return None
        key = self.search.key(sch)
        if measure and not any(self.search.key(s) == key for _, s in self.search.measured) \
                and key not in self.search.seen:
            self.measure([sch])
        return next((secs for secs, s in self.search.measured if self.search.key(s) == key), None)

    def remeasure(self, k: int) -> int:
        """Measure the k fastest candidates so far and the task's default (space.default(), where
        the space has one and it was measured) once more, one after the other, as new records (not
        counted as trials): a time taken while the machine was busy is only ever too slow, so a
        second look keeps a good candidate from losing to a slower one timed in a quiet moment.
        The number measured."""
        search = self.search
        picks, keys = [], set()
        default = self.task.space.default() if hasattr(self.task.space, "default") else None
        if default is not None and search.key(default) in {search.key(s) for _, s in search.measured}:
            picks.append(default)
            keys.add(search.key(default))
        want = k + len(picks)
        for _, s in search.measured:          # fastest first
            if len(picks) >= want:
                break
            key = search.key(s)
            if key not in keys:
                keys.add(key)
                picks.append(s)
        return self._run(picks, count=False) if picks else 0

    def _run(self, fresh: list, count: bool = True) -> int:
        """Build, check and time `fresh`; records to the database, results to the cost model and
        the strategy, the best kept. count: the measurements are trials (not for remeasure)."""
        task, search = self.task, self.search
        mcs = [MeasureCandidate(task.workload, s.trace.as_json(), task.weights) for s in fresh]
        best = self.best_secs
        cutoff = None if best is None or self.cutoff_factor is None else best * self.cutoff_factor
        results = measure(mcs, task.target, self.builder, self.runner, cutoff_secs=cutoff,
                          cutoff_factor=self.cutoff_factor)
        if self.confirm and count:
            results = self._confirmed(mcs, results)
        if self.database is not None:
            self.database.commit([make_record(c, r, self.target_key) for c, r in zip(mcs, results)])
        key = task.workload.key
        self.model.update([search.features(s) for s in fresh], results, [key] * len(fresh))
        search.notify(fresh, results)
        for s, r in zip(fresh, results):
            self.trials += count
            if r.error_kind is not None:
                self.errors += count
                continue
            secs = r.secs          # the median of its rounds (inf without times), as records rank
            if secs != float("inf") and (self.best_secs is None or secs < self.best_secs):
                self.best_secs, self.best_trace, self.best_trial = secs, s.trace, self.trials
        self.history.append((self.trials, time.perf_counter() - self._t0, self.best_secs))
        return len(fresh)

    def _confirmed(self, mcs: list, results: list) -> list:
        """Each candidate that beat the best so far measured once more, its record the rounds of both
        (ranked by their median): the fastest of many candidates a few percent apart is partly the
        luckiest measurement, and a best that only won by luck would stop the search finding the
        kernels really faster than it. One whose second run fails keeps that failure."""
        best = self.best_secs
        again = [k for k, r in enumerate(results) if r.error_kind is None and (best is None or r.secs < best)]
        if not again:
            return results
        second = measure([mcs[k] for k in again], self.task.target, self.builder, self.runner)
        results = list(results)
        for k, r in zip(again, second):
            first = results[k]
            results[k] = r if r.error_kind is not None else dataclasses.replace(
                first, run_secs=tuple(first.run_secs) + tuple(r.run_secs),
                run_wall_secs=first.run_wall_secs + r.run_wall_secs, kernel_secs=first.kernel_secs + r.kernel_secs)
        return results

    def result(self) -> "TuneResult":
        best_sch = None
        if self.best_trace is not None:
            best_sch = Schedule(self.task.func)
            self.best_trace.apply_to_schedule(best_sch)
        return TuneResult(self.task, best_sch, self.best_trace, self.best_secs, self.trials, self.errors,
                          time.perf_counter() - self._t0, self.history)


def check_trials(where: str, max_trials, batch_size) -> None:
    if not isinstance(max_trials, (int, np.integer)) or isinstance(max_trials, bool) or max_trials < 0:
        raise TesseraError(f"{where}: max_trials must be an int >= 0, got {max_trials!r}")
    if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
        raise TesseraError(f"{where}: batch_size must be an int >= 1, got {batch_size!r}")


def open_database(database):
    """A Database from a Database, a path, or None (no records kept)."""
    if isinstance(database, (str, bytes)) or hasattr(database, "__fspath__"):
        return Database(database)
    if database is not None and not isinstance(database, Database):
        raise TesseraError(f"database must be an autotune.Database, a path or None, got {type(database).__name__}")
    return database


def tune_tir(func, target=None, max_trials: int = 1000, database=None, strategy="evolutionary",
             cost_model="xgb", runner=None, builder=None, seed=None, batch_size: int = 32,
             time_budget: float | None = None, progress=None, cutoff_factor: float | None = 8.0) -> TuneResult:
    """Search func's schedules for target (default "c"; a TuneTask's own target) for up to
    max_trials measured candidates (or time_budget seconds); the records go to database (a
    Database, a path, or None for none kept).

    func: a PrimFunc (its space is generated by the design-space rules) or a TuneTask (e.g. from a
    template: `my_template.task(*args, target=...)`). strategy: "evolutionary", "annealing",
    "random" or a SearchStrategy factory; cost_model: "xgb", "random" or a CostModel. builder /
    runner: None for the shared LocalBuilder and the tuner's shared LocalRunner (min_repeat_ms=50,
    the checked call as the warm-up; their worker processes persist across calls); runner may be
    a DaskRunner. cutoff_factor: a candidate whose checked run alone takes this
    many times the best time so far is not timed further (its record keeps that run's time; None:
    time every one). On a GPU target the first trial is the untuned schedule (the space's default,
    schedule_gpu_default), so what the tuner returns is never slower than tessera.build untuned.
    Returns a TuneResult (best schedule, its trace and mean seconds)."""
    if isinstance(func, TuneTask):
        task = func
        if target is not None and Target(target) != task.target:
            raise TesseraError(f"tune_tir: the task is for {task.target}, target={target!r} disagrees")
    elif isinstance(func, PrimFunc):
        task = TuneTask(func, "c" if target is None else target)
    else:
        raise TesseraError(f"tune_tir takes a PrimFunc or a TuneTask, got {type(func).__name__}")
    check_trials("tune_tir", max_trials, batch_size)
    database = open_database(database)
    rng = np.random.default_rng(seed)
    model = make_cost_model(cost_model, None if seed is None else int(seed))
    tuner = TaskTuner(task, model, rng, strategy, database, runner, builder, cutoff_factor)
    tuner.start()
    if max_trials > 0:
        tuner.default_secs()         # the untuned schedule is a trial: what the tuner returns is no slower
    with TuneProgress(task.name, max_trials, task.flops, progress) as bar:
        bar.update(tuner.trials, tuner.best_secs, tuner.errors)
        while tuner.trials < max_trials:
            if time_budget is not None and time.perf_counter() - tuner._t0 >= time_budget:
                break
            if not tuner.round(min(batch_size, max_trials - tuner.trials)):
                break  # the space is exhausted
            bar.update(tuner.trials, tuner.best_secs, tuner.errors)
    return tuner.result()


def apply_best(func: PrimFunc, database, target) -> Schedule | None:
    """func scheduled by the record ApplyHistoryBest would choose for target: the workload's
    in-model pick (tune_graph's check; a pick of the default replays the default schedule's trace),
    else the fastest error-free record target can build (its tensor intrinsics' CPU features
    present); None when the database has none (records of another target are never applied)."""
    if isinstance(database, (str, bytes)) or hasattr(database, "__fspath__"):
        database = Database(database)
    if not isinstance(func, PrimFunc):
        raise TesseraError(f"apply_best takes a PrimFunc, got {type(func).__name__}")
    target = Target(target)
    rec, _ = chosen_record(database, Workload(func).key, record_target(target), target)
    if rec is None:
        return None
    sch = Schedule(func)
    Trace.apply_json_to_schedule(rec.trace, sch)
    return sch


__all__ = ["TuneResult", "TaskTuner", "graph_runner", "graph_timing", "weights_outgrow_cache", "weights_bytes", "apply_best", "tune_tir", "open_database"]
