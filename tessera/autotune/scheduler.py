"""tune_graph: tune every kernel of a model, trials shared out by Ansor's gradient task scheduler.

    res = autotune.tune_graph(graph, params, target="c -num-threads=2", max_trials=2000, database="tune.jsonl")
    exe = tessera.compile(graph, params, target="c -num-threads=2", database="tune.jsonl")

The model's latency is estimated as sum(weight_i * best_i) over its tasks (extract_tasks). First every
task's default schedule is measured (the untuned kernel, always a candidate), then each task gets one
round of the search; after that every round goes to the task whose next trials are expected to cut the estimate
most (Ansor's gradient: the weighted mix of the task's recent improvement per round and an optimistic
forward estimate, that its time can still shrink in proportion to its trials or to the throughput
similar tasks reached). A task stops when `early_stopping` of its trials bring no improvement, or its
space is exhausted; a task under 0.5% of the estimated latency is not tuned past its default. Records go to the database as they are measured (resume by tuning again with the
same database); one cost model learns across all tasks.
"""
from __future__ import annotations

import math
import os
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..errors import TesseraError
from ..target import Target
from .apply_history import builtin_databases
from .cost_model import make_cost_model
from .database import record_target
from .graph_tasks import extract_tasks, optimized_graph
from .in_model import InModelCheck, check_in_model
from .tune import TaskTuner, check_trials, graph_runner, open_database, weights_outgrow_cache


@dataclass
class TaskReport:
    """One task's state for progress displays and the result table."""

    name: str
    weight: int
    flops: float
    trials: int
    errors: int
    default_secs: float | None
    best_secs: float | None
    done: str | None        # None (still tuned), "converged", "exhausted", "negligible" (< 0.5% of the model),
                            # "failed" (every candidate, its default too, failed: dropped with a warning)

    @property
    def speedup(self) -> float | None:
        if self.default_secs and self.best_secs:
            return self.default_secs / self.best_secs
        return None


@dataclass
class GraphTuneResult:
    """What tune_graph did: per task its TuneResult and report; history: one (trials, seconds, estimated
    model latency in seconds) per round, and last the final estimate (`latency`); latency / default_latency: the estimate (sum of weight x
    best kernel time) now and with every default schedule; validation: the in-model check's
    InModelCheck (which tasks it checked, what it picked and what that changed), None when off."""

    tasks: list
    results: list
    reports: list
    trials: int
    seconds: float
    history: list = field(default_factory=list)
    validation: InModelCheck | None = None

    @property
    def latency(self) -> float | None:
        return estimated_latency(self.reports, "best_secs")

    @property
    def default_latency(self) -> float | None:
        return estimated_latency(self.reports, "default_secs")

    def table(self) -> str:
        """A text table of the tasks (weight, trials, default and best ms, speedup)."""
        rows = [f"{'task':<52} {'w':>3} {'trials':>6} {'default ms':>11} {'best ms':>9} {'speedup':>7}"]
        for r in self.reports:
            d = f"{r.default_secs * 1e3:.4f}" if r.default_secs else "-"
            b = f"{r.best_secs * 1e3:.4f}" if r.best_secs else "-"
            sp = f"{r.speedup:.2f}x" if r.speedup else "-"
            rows.append(f"{r.name[:52]:<52} {r.weight:>3} {r.trials:>6} {d:>11} {b:>9} {sp:>7}")
        lat, dlat = self.latency, self.default_latency
        if lat and dlat:
            rows.append(f"estimated latency {lat * 1e3:.3f} ms (default schedules {dlat * 1e3:.3f} ms, "
                        f"{dlat / lat:.2f}x) after {self.trials} trials in {self.seconds:.0f} s")
        if self.validation is not None:
            rows.append(self.validation.table())
        return "\n".join(rows)

    def __repr__(self):
        lat = self.latency
        est = f"{lat * 1e3:.3f} ms" if lat else "none"
        return f"<GraphTuneResult {len(self.tasks)} tasks, {self.trials} trials, estimated latency {est}>"


def estimated_latency(reports, attr: str = "best_secs", fallback: bool = True) -> float | None:
    """sum(weight x kernel seconds) over the tasks' reports; with fallback a task without a best time
    counts its default (and the other way round); None while some task has no figure."""
    total = 0.0
    for r in reports:
        if r.done == "failed":
            continue                 # nothing of it runs in the estimate's terms; warned about
        v = getattr(r, attr)
        if v is None and fallback:
            v = r.default_secs if attr == "best_secs" else r.best_secs
        if v is None:
            return None
        total += r.weight * v
    return total


class TaskScheduler:
    """Ansor's gradient-based allocation of rounds over the tasks' TaskTuners (see the module docstring)."""

    def __init__(self, tuners: list, rng, alpha: float = 0.2, beta: float = 2.0, eps: float = 0.05,
                 early_stopping: int | None = 64, negligible: float = 0.005, confirm: int | None = None):
        self.tuners = tuners
        self.confirm = confirm               # rounds in a row without a gain that confirm a task (transfer)
        self.stale = [0] * len(tuners)
        self.confirmed = [False] * len(tuners)   # its quick rounds over: full rounds from here on
        self.negligible = negligible
        self.rng = rng
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self.early_stopping = early_stopping
        n = len(tuners)
        self.rounds = [0] * n
        self.best_hist: list = [[] for _ in range(n)]    # best seconds after each round
        # trials at the last improvement: a resumed task's come from its records, so that early
        # stopping counts the trials since its best, not all its trials
        self.last_gain = [int(getattr(t, "best_trial", 0)) for t in tuners]
        self.done: list = [None] * n

    def weight(self, i) -> float:
        return float(getattr(self.tuners[i].task, "weight", 1))

    def record(self, i, before: float | None) -> None:
        """After a round of task i: its history, its early stop. A task none of whose candidates
        ran (its default included) is dropped with a warning: it has no time to improve on, and
        would otherwise keep the most negative gradient until its space ran out."""
        t = self.tuners[i]
        self.rounds[i] += 1
        self.best_hist[i].append(t.best_secs)
        if t.best_secs is not None and (before is None or t.best_secs < before * (1 - 1e-3)):
            self.last_gain[i] = t.trials
            self.stale[i] = 0
        else:
            self.stale[i] += 1
        if t.best_secs is None and t.trials:
            self.done[i] = "failed"
            warnings.warn(f"tune_graph: task {t.task.name}: all {t.trials} candidates measured so far failed "
                          f"({getattr(t, 'errors', t.trials)} errors); it is not tuned further and keeps its "
                          f"default schedule", stacklevel=3)
        elif t.exhausted:
            self.done[i] = "exhausted"
        elif self.early_stopping is not None and t.trials - self.last_gain[i] >= self.early_stopping:
            self.done[i] = "converged"
        elif self.confirm is not None and not self.confirmed[i] and self.stale[i] >= self.confirm:
            # the pre-trained model's next picks are no faster: the task goes on searching in full
            # rounds (and stops as any task does, by early_stopping), not with its top few alone
            self.confirmed[i] = True

    def alive(self) -> list:
        return [i for i, d in enumerate(self.done) if d is None]

    def next_task(self) -> int | None:
        """The task whose next round should cut the estimated latency most. A task whose share of the
        estimated latency is below `negligible` is not tuned at all ("negligible")."""
        known = [(self.weight(i) * t.best_secs) for i, t in enumerate(self.tuners) if t.best_secs]
        pending = [i for i, t in enumerate(self.tuners) if not t.best_secs and self.done[i] is None]
        if not pending and self.negligible:
            total = sum(known)
            for i in self.alive():
                if self.weight(i) * self.tuners[i].best_secs < self.negligible * total:
                    self.done[i] = "negligible"
        alive = self.alive()
        if not alive:
            return None
        first = [i for i in alive if self.rounds[i] == 0]
        if first:   # every task gets a first round before any gradient: the largest share of the estimate first
            return max(first, key=lambda i: (self.weight(i) * (self.tuners[i].best_secs or math.inf), -i))
        if self.rng.random() < self.eps:
            return alive[int(self.rng.integers(len(alive)))]
        # the throughput (flops / s) each op kind reached, for the optimistic forward estimate
        best_rate: dict = {}
        for i, t in enumerate(self.tuners):
            if t.best_secs and t.task.flops:
                key = _kind(t.task)
                best_rate[key] = max(best_rate.get(key, 0.0), t.task.flops / t.best_secs)
        grads = []
        for i in alive:
            t = self.tuners[i]
            g = t.best_secs
            if g is None:                             # not reached: record() drops a task with no time
                continue
            hist = self.best_hist[i]
            prev = hist[-2] if len(hist) >= 2 and hist[-2] is not None else g
            backward = g - prev                       # change over the last round (<= 0)
            forward = -g / max(1, self.rounds[i])
            rate = best_rate.get(_kind(t.task))
            if rate and t.task.flops:
                forward = min(forward, self.beta * t.task.flops / rate - g)
            grad = self.weight(i) * (self.alpha * backward + (1 - self.alpha) * forward)
            grads.append((grad, i))
        return min(grads)[1] if grads else None


def _kind(task) -> str:
    """Tasks of the same op family (the kernel name without its _k suffix) are 'similar' for the
    forward estimate."""
    name = getattr(task, "op", task.name)
    head, _, tail = name.rpartition("_")
    return head if tail.isdigit() and head else name


def tune_graph(graph, params=None, target="c", max_trials: int = 2000, database=None, *, strategy="evolutionary",
               cost_model="xgb", runner=None, builder=None, seed=None, batch_size: int = 16,
               time_budget: float | None = None, early_stopping: int | None = 64, opt_level: int = 3,
               tasks=None, progress=None, transfer=True, remeasure: int = 3, validate: bool = True,
               validate_budget: float = 60.0, transfer_batch: int | None = 4) -> GraphTuneResult:
    """Tune the kernels of graph (with params bound, as tessera.compile optimizes it) for target, for at
    most max_trials measured candidates in all (or time_budget seconds); records go to database (a
    Database or a path; tuning again with it resumes). tasks: extract_tasks' list, to tune a subset.
    cost_model: "xgb", "random" or a CostModel (e.g. one pre-trained on another model's records:
    transfer). runner: None for tune.graph_runner() (each kernel's weights evicted from the caches
    before each timing round where the model's weights exceed the last-level cache, everything warm
    otherwise: as the kernel runs inside the model), a LocalRunner or a DaskRunner. Each candidate
    that beats its task's best is measured twice (TaskTuner(confirm=True)). transfer: with
    cost_model "xgb", pre-train it on tuning records of other workloads first: True (default) the records shipped with tessera for this target's CPU level, a path /
    Database / list of them, or False (learn from this run only). The tasks' own records are left
    out of the pre-training (they resume through the database instead). progress: None, or a
    callable given a list of TaskReport and the totals after every round (the CLI draws its live
    table with it). remeasure: at the end, each searched task's `remeasure` fastest candidates and
    its default are measured again (records, not trials; 0: none), so a time taken while the machine
    was busy cannot make a slower candidate win. validate: then check the picks inside the model
    (autotune.in_model: the whole model compiled with each heavy task's default and top candidates,
    timed in interleaved rounds, a candidate kept only where it beats the default there; each
    checked task's choice is written as a pick record, which tessera.compile applies), within
    validate_budget seconds (after time_budget, like remeasure); the result's `validation` says what
    it changed. transfer_batch: when the cost model starts trained (transfer, or a trained CostModel
    given), a task's rounds measure only its top `transfer_batch` candidates instead of batch_size
    until 2 rounds in a row bring no gain (its predictions confirmed), then full batches: the first
    rounds of every task no longer cost a full batch whether or not the model already ranks well, and
    the search goes on within the budget as from scratch. None or 0: full batches from the start.
    Returns a GraphTuneResult."""
    target = Target(target)
    check_trials("tune_graph", max_trials, batch_size)
    if early_stopping is not None and (not isinstance(early_stopping, int) or early_stopping < 1):
        raise TesseraError(f"tune_graph: early_stopping must be an int >= 1 or None, got {early_stopping!r}")
    if time_budget is not None and not time_budget > 0:
        raise TesseraError(f"tune_graph: time_budget must be > 0 seconds, got {time_budget!r}")
    if not isinstance(remeasure, (int, np.integer)) or isinstance(remeasure, bool) or remeasure < 0:
        raise TesseraError(f"tune_graph: remeasure must be an int >= 0 (candidates measured again), got "
                           f"{remeasure!r}")
    if transfer_batch is not None and (isinstance(transfer_batch, bool) or not isinstance(transfer_batch, int)
                                       or transfer_batch < 0):
        raise TesseraError(f"tune_graph: transfer_batch must be an int >= 0 or None, got {transfer_batch!r}")
    if not isinstance(validate, bool):
        raise TesseraError(f"tune_graph: validate must be True or False, got {validate!r}")
    if isinstance(validate_budget, bool) or not isinstance(validate_budget, (int, float)) or \
            not validate_budget > 0:
        raise TesseraError(f"tune_graph: validate_budget must be > 0 seconds, got {validate_budget!r}")
    database = open_database(database)
    optimized = None
    if tasks is None:
        optimized = optimized_graph(graph, params, target, opt_level)
        tasks = extract_tasks(optimized, target=target, optimized=True)
    tasks = list(tasks)
    for t in tasks:
        if t.target != target:
            raise TesseraError(f"tune_graph: task {t.name} is for {t.target}, not {target}")
    rng = np.random.default_rng(seed)
    model = make_cost_model(cost_model, None if seed is None else int(seed))
    if isinstance(cost_model, str) and cost_model == "xgb" and transfer is not False:
        pretrain_from(model, transfer, target, exclude={t.workload.key for t in tasks})
    # trained before this run's own records (a resume's) reach it: pre-trained on other workloads
    quick = bool(getattr(model, "trained", False)) and bool(transfer_batch) and transfer_batch < batch_size
    round_size = transfer_batch if quick else batch_size
    if runner is None:     # a GPU kernel is timed on its device, caches as they are
        runner = graph_runner(weights_outgrow_cache(tasks, target))
    tuners = [TaskTuner(t, model, np.random.default_rng(rng.integers(2 ** 31)), strategy, database, runner, builder,
                        confirm=True) for t in tasks]
    t0 = time.perf_counter()
    defaults: list = [None] * len(tasks)
    for k, tu in enumerate(tuners):
        tu.start()
    sched = TaskScheduler(tuners, rng, early_stopping=early_stopping, confirm=2 if quick else None)
    history: list = []
    total = sum(tu.trials for tu in tuners)

    def reports():
        return [TaskReport(t.name, getattr(t, "weight", 1), t.flops or 0.0, tu.trials, tu.errors, defaults[k],
                           tu.best_secs, sched.done[k]) for k, (t, tu) in enumerate(zip(tasks, tuners))]

    def tell():
        if progress is not None:
            progress(reports(), dict(trials=total, max_trials=max_trials, seconds=time.perf_counter() - t0,
                                     time_budget=time_budget))

    tell()

    def out_of_time():
        return time_budget is not None and time.perf_counter() - t0 >= time_budget

    # every task's default schedule first: the untuned kernel is always a measured candidate, and
    # the estimate of the model's latency is complete from here on
    for k, tu in enumerate(tuners):
        if total >= max_trials or out_of_time():
            break
        defaults[k] = tu.default_secs()
        total = sum(x.trials for x in tuners)
        history.append((total, time.perf_counter() - t0, estimated_latency(reports(), "best_secs")))
        tell()
    while total < max_trials:
        if out_of_time():
            break
        i = sched.next_task()
        if i is None:
            break
        tu = tuners[i]
        before = tu.best_secs
        n = min(batch_size if sched.confirmed[i] else round_size, max_trials - total)
        if n > 0:
            tu.round(n)
        total = sum(x.trials for x in tuners)
        sched.record(i, before)
        est = estimated_latency(reports(), "best_secs")
        history.append((total, time.perf_counter() - t0, est))
        tell()
    if remeasure:
        # a second look at each searched task's best candidates and its default, one after the other
        for k, tu in enumerate(tuners):
            if sched.rounds[k] and tu.best_secs is not None:
                tu.remeasure(remeasure)
        tell()
    for k, tu in enumerate(tuners):      # the default's fastest time (measured again, or resumed)
        found = tu.default_secs(measure=False)
        if found is not None:
            defaults[k] = found
    final = estimated_latency(reports(), "best_secs")
    if history and final is not None and final != history[-1][2]:
        history.append((total, time.perf_counter() - t0, final))    # the final estimate, measured again
    validation = None
    if validate:
        if optimized is None:
            optimized = optimized_graph(graph, params, target, opt_level)
        try:
            validation = check_in_model(optimized, target, tasks, tuners, database, float(validate_budget),
                                        seed=0 if seed is None else int(seed))
        except TesseraError as e:         # the search's records stand; compile then uses the fastest
            warnings.warn(f"tune_graph: the in-model check failed ({e}); no picks written", stacklevel=2)
            validation = InModelCheck(skipped=f"it failed: {e}")
    return GraphTuneResult(tasks, [tu.result() for tu in tuners], reports(), total, time.perf_counter() - t0,
                           history, validation)


class _Without:
    """A database's records minus some workloads (what CostModel.pretrain reads)."""

    def __init__(self, db, exclude):
        self.db, self.exclude = db, exclude

    def workloads(self):
        return [w for w in self.db.workloads() if w.key not in self.exclude]

    def records(self, workload_key=None, target=None):
        return self.db.records(workload_key=workload_key, target=target)


def pretrain_from(model, transfer, target, exclude=()) -> dict:
    """Pre-train model on the records of `transfer` (True: the shipped ones for target's CPU level;
    else a path, Database or list of them) for target's record key, leaving out workloads in
    exclude. Returns {"used": n, "skipped": m} summed over the databases."""
    if transfer is True:
        dbs = builtin_databases(target)
    else:
        items = transfer if isinstance(transfer, (list, tuple)) else [transfer]
        for d in items:
            if (isinstance(d, (str, bytes)) or hasattr(d, "__fspath__")) and not os.path.isfile(d):
                raise TesseraError(f"transfer: tuning database {os.fsdecode(d)!r} does not exist (nothing to "
                                   f"pre-train the cost model on)")
        dbs = [open_database(d) for d in items]
    used = skipped = 0
    for db in dbs:
        got = model.pretrain(_Without(db, set(exclude)), record_target(target))
        used, skipped = used + got["used"], skipped + got["skipped"]
    return {"used": used, "skipped": skipped}


__all__ = ["tune_graph", "GraphTuneResult", "InModelCheck", "TaskReport", "TaskScheduler", "pretrain_from", "estimated_latency"]
