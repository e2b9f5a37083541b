"""LocalRunner: built candidates checked and timed in one persistent worker process; `measure`.

    runner = LocalRunner(number=3, repeat=1, min_repeat_ms=100, timeout=10)
    results = runner.run(candidates, build_results, "c -num-threads=2")   # MeasureResults
    results = measure(candidates, "c -num-threads=2")                      # build + run

Candidates run one at a time (a measurement owns the cores) in a worker subprocess that serves many
of them: it loads a candidate's library, runs it once on the workload's seeded inputs and compares
every output with the untuned program's (check.py: how inputs, outputs and the tolerance are made)
-- a mismatch is a "wrong_result" and its time never counts -- then times it inside C
(`Module.time_evaluator`: a warm-up call, `repeat` rounds of `number` calls, grown to last
`min_repeat_ms`; with flush_cache=True the caches are flushed before each round and min_repeat_ms
does not apply; flush_cache="weights" evicts only the candidate's weights (MeasureCandidate.weights:
in a model they come from memory, while the input its previous node wrote is still in cache); with
warmup=False the checked call stands for the timer's warm-up call, one kernel call fewer per
candidate, timed by the same loop in check.py's C timer). A candidate that kills the worker (a segfault) is a "crash", one that runs past
`timeout` seconds is killed and is a "timeout"; the worker is restarted and the next candidate
measured. The reference outputs are computed once per workload (`ref_timeout` bounds that) and
kept on disk. With `cutoff_secs` (the tuner passes a multiple of its best time so far, and the
multiple as cutoff_factor, so the cutoff also follows the best of the batch) a candidate
whose checked call alone takes longer is not timed further: that call's time is its record, and a
hopeless candidate costs one call instead of the timer's rounds (not when the machine was busy
during that call: then it is timed as any other).

A busy machine: a timing whose rounds stall (one over contention.STALL_RATIO times the fastest: a
thread of the kernel was descheduled) or during which the worker's threads waited for a CPU (other
work held the cores; runtime/contention.py) is taken again, up to twice and within half the
timeout; stalled rounds never count. MeasureResult.remeasured says how often, MeasureResult.busy
that the kept timing was still contended, and a warning on the "tessera" logger counts those.

GPU targets (opencl, cuda): the worker loads the artifact through the target's backend, the
reference is the untuned program under its default GPU schedule (ops.gpu.schedule_gpu_default: an
unscheduled program has no thread bindings and does not build; where that schedule does not build
either, the untuned program on the host CPU), and the time is the device's
(the runtime's profiling timer, which makes its own warm-up launch; flush_cache is refused). The
checked call's time (for the cutoff) includes the copies to and from the device. A cuda target
without an NVIDIA GPU here is refused by name (check_device).
"""
from __future__ import annotations

import json
import logging
import threading
import time

from ...errors import TesseraError
from ...ir import to_json
from ...runtime import cuda as cuda_rt
from ...runtime.module import check_timing
from ...target import Target
from ._proc import WorkerDied, WorkerProcess, WorkerTimeout
from ._worker import MAX_REFERENCES
from .builder import LocalBuilder
from .candidate import BuildResult, MeasureCandidate, MeasureResult

_LOG = logging.getLogger("tessera")


class LocalRunner:
    """Checks and times built candidates in one persistent worker process (module docstring).
    check=False skips the output check (never for tuning: a miscompiled candidate could win).
    env: environment variables for the measuring process, e.g. {"OMP_WAIT_POLICY": "PASSIVE"}; by
    default the user's environment, the one a deployed kernel runs in (the worker's kernels wait as
    tessera's thread pool has them, runtime/pool.py, or on libgomp as runtime/openmp.py bounds it)."""

    def __init__(self, number: int = 3, repeat: int = 1, min_repeat_ms: int = 100, timeout: float = 10.0,
                 flush_cache=False, check: bool = True, seed: int = 0, ref_timeout: float = 600.0,
                 max_runs_per_worker: int = 2000, env: dict | None = None, warmup: bool = True):
        check_timing(number, repeat, min_repeat_ms)
        if flush_cache not in (True, False, "weights"):
            raise TesseraError(f"LocalRunner: flush_cache must be True, False or 'weights', got {flush_cache!r}")
        for label, v in (("timeout", timeout), ("ref_timeout", ref_timeout)):
            if not isinstance(v, (int, float)) or v <= 0:
                raise TesseraError(f"LocalRunner: {label} must be > 0 seconds, got {v!r}")
        if not isinstance(seed, int) or not isinstance(max_runs_per_worker, int) or max_runs_per_worker < 1:
            raise TesseraError("LocalRunner: seed and max_runs_per_worker must be ints (max_runs_per_worker >= 1)")
        self.number, self.repeat, self.min_repeat_ms = int(number), int(repeat), int(min_repeat_ms)
        self.timeout, self.ref_timeout = float(timeout), float(ref_timeout)
        self.flush_cache = flush_cache if flush_cache == "weights" else bool(flush_cache)
        self.check, self.seed, self.warmup = bool(check), seed, bool(warmup)
        self.max_runs_per_worker = max_runs_per_worker
        if env is not None and not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                                  for k, v in env.items())):
            raise TesseraError(f"LocalRunner: env must be a dict of strings, got {env!r}")
        self.env = dict(env or {})
        self._worker = WorkerProcess("runner worker", self.env)
        self._func_text = {}
        self._lock = threading.Lock()

    def settings(self) -> dict:
        """The timing settings (what a remote runner passes on to the device)."""
        return {"number": self.number, "repeat": self.repeat, "min_repeat_ms": self.min_repeat_ms,
                "timeout": self.timeout, "flush_cache": self.flush_cache, "check": self.check, "seed": self.seed,
                "ref_timeout": self.ref_timeout, "env": self.env, "warmup": self.warmup}

    def _func_json(self, wl) -> str:
        text = self._func_text.get(wl.key)
        if text is None:
            text = self._func_text[wl.key] = json.dumps(to_json(wl.func), separators=(",", ":"))
        return text

    def prepare(self, workload, target) -> None:
        """Start the worker and compute workload's reference outputs now (else the first candidate's
        run waits for them); a TesseraError when the untuned program cannot be run."""
        wl = workload.workload if isinstance(workload, MeasureCandidate) else workload
        check_device(target)
        with self._lock:
            self._prepare(MeasureCandidate(wl, [[], []]), str(Target(target)))

    def _prepare(self, cand: MeasureCandidate, target: str):
        w, key = self._worker, cand.workload.key
        if w.alive and w.served >= self.max_runs_per_worker:
            w.stop()          # bounds what a long session accumulates (loaded libraries)
        w.ensure()
        if key in w.prepared:
            return
        req = {"op": "prepare", "key": key, "target": target, "seed": self.seed,
               "func": None if key in w.sent_keys else self._func_json(cand.workload)}
        try:
            ans = w.call(req, self.ref_timeout)
        except (WorkerDied, WorkerTimeout) as e:
            raise TesseraError(f"LocalRunner: the untuned program of workload {key} (the reference every "
                               f"candidate is checked against) could not be run: {e}") from None
        if "fault" in ans:
            raise TesseraError(f"LocalRunner: the reference of workload {key} failed: {ans['fault']}")
        w.sent_keys.add(key)
        w.prepared[key] = None
        if len(w.prepared) > MAX_REFERENCES:      # the worker dropped its oldest reference: prepare it again
            del w.prepared[next(iter(w.prepared))]

    def run_one(self, cand: MeasureCandidate, br: BuildResult, target: str, cutoff_secs=None) -> MeasureResult:
        if not br.ok:
            return MeasureResult((), br.error_kind, br.error_msg, br.build_secs, br.compile_secs)
        self._prepare(cand, target)
        req = {"op": "run", "key": cand.workload.key, "path": br.path, "func_name": br.func_name,
               "target": target, "number": self.number, "repeat": self.repeat,
               "min_repeat_ms": self.min_repeat_ms, "check": self.check,
               "flush": list(cand.weights) if self.flush_cache == "weights" else self.flush_cache,
               "warmup": self.warmup, "cutoff_secs": cutoff_secs, "timeout": self.timeout}
        t0 = time.perf_counter()
        try:
            ans = self._worker.call(req, self.timeout)
        except WorkerTimeout:
            return MeasureResult((), "timeout", f"the candidate ran longer than {self.timeout:g} s (killed)",
                                 br.build_secs, br.compile_secs, time.perf_counter() - t0)
        except WorkerDied as e:
            return MeasureResult((), "crash", str(e), br.build_secs, br.compile_secs, time.perf_counter() - t0)
        wall = time.perf_counter() - t0
        if "fault" in ans:
            return MeasureResult((), "run", f"runner worker: {ans['fault']}", br.build_secs, br.compile_secs, wall)
        kernel = ans.get("kernel_secs", 0.0)
        if ans.get("error_kind"):
            return MeasureResult((), ans["error_kind"], ans["error_msg"], br.build_secs, br.compile_secs, wall, kernel)
        return MeasureResult(tuple(ans["run_secs"]), None, None, br.build_secs, br.compile_secs, wall, kernel,
                             remeasured=int(ans.get("remeasured", 0)), busy=bool(ans.get("busy", False)))

    def run(self, candidates, build_results, target, cutoff_secs=None, cutoff_factor=None) -> list:
        """One MeasureResult per candidate, in order; failed builds pass their error through.
        cutoff_secs: see the module docstring (None: every candidate is timed in full); with
        cutoff_factor the cutoff also falls to that multiple of the best time met in this batch."""
        for label, v in (("cutoff_secs", cutoff_secs), ("cutoff_factor", cutoff_factor)):
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0):
                raise TesseraError(f"LocalRunner.run: {label} must be > 0 or None, got {v!r}")
        candidates, build_results = list(candidates), list(build_results)
        if len(candidates) != len(build_results):
            raise TesseraError(f"LocalRunner.run: {len(candidates)} candidates but {len(build_results)} build results")
        check_device(target)
        target = str(Target(target))
        out = []
        with self._lock:
            for c, b in zip(candidates, build_results):
                r = self.run_one(c, b, target, cutoff_secs)
                out.append(r)
                if cutoff_factor is not None and r.ok and r.run_secs:
                    cut = r.secs * cutoff_factor
                    cutoff_secs = cut if cutoff_secs is None else min(cutoff_secs, cut)
        warn_if_busy(out)
        return out

    def close(self):
        """Stop the worker process (it starts again on the next run)."""
        self._worker.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"LocalRunner(number={self.number}, repeat={self.repeat}, min_repeat_ms={self.min_repeat_ms}, "
                f"timeout={self.timeout:g}, flush_cache={self.flush_cache}, check={self.check})")


def warn_if_busy(results) -> None:
    """A warning on the "tessera" logger when some results were timed on a busy machine even after
    their re-measurements (MeasureResult.busy): their times may be high."""
    busy = sum(1 for r in results if r.busy)
    if busy:
        _LOG.warning("%d of %d candidates were timed while other work held the cores (their threads waited for "
                     "a CPU, also when measured again): their times may be high; tune on a quiet machine",
                     busy, len(results))


def check_device(target) -> None:
    """Refuse to measure for a target whose device is missing here: a cuda target needs an NVIDIA
    GPU and cupy (its candidates still build and compile with nvcc without one)."""
    t = Target(target)
    if t.kind == "cuda" and not cuda_rt.available():
        raise TesseraError(f"measuring candidates for target {str(t)!r} needs an NVIDIA GPU (and cupy) on this "
                           f"machine; there is none: candidates can be generated and compiled (nvcc) but not "
                           f"timed. Measure on a machine with the GPU (DaskRunner) or tune for 'opencl'")


_DEFAULTS: dict = {}


def _default(kind):
    obj = _DEFAULTS.get(kind)
    if obj is None:
        obj = _DEFAULTS[kind] = LocalBuilder() if kind == "builder" else LocalRunner()
    return obj


def measure(candidates, target, builder=None, runner=None, cutoff_secs=None, cutoff_factor=None) -> list:
    """Build and run candidates: one MeasureResult per candidate, in order. Defaults: a shared
    LocalBuilder and LocalRunner (their worker processes persist between calls). A runner that
    builds where it measures (DaskRunner) is given the candidates directly. cutoff_secs and
    cutoff_factor go to a LocalRunner (LocalRunner.run)."""
    candidates = list(candidates)
    runner = runner if runner is not None else _default("runner")
    if getattr(runner, "builds_remotely", False):
        return runner.measure(candidates, target)
    builder = builder if builder is not None else _default("builder")
    built = builder.build(candidates, target)
    if (cutoff_secs is not None or cutoff_factor is not None) and isinstance(runner, LocalRunner):
        return runner.run(candidates, built, target, cutoff_secs=cutoff_secs, cutoff_factor=cutoff_factor)
    return runner.run(candidates, built, target)


__all__ = ["LocalRunner", "check_device", "measure", "warn_if_busy"]
