"""What the search hands to measurement and what comes back (MetaSchedule's names).

    cand = MeasureCandidate(workload, sch.trace.as_json())
    [br] = builder.build([cand], target)          # BuildResult: library path + function, or an error
    [mr] = runner.run([cand], [br], target)       # MeasureResult: seconds per run, or an error
    record = mr.to_record(cand, target)           # a database TuningRecord
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field

from ...errors import TesseraError
from ...target import Target
from ...tir import Schedule
from ...tir.schedule import Trace
from ..database import ERROR_KINDS, TuningRecord
from ..workload import Workload


class MeasureCandidate:
    """A workload and a JSON trace that, replayed on `tir.Schedule(workload.func)`, gives the candidate.
    weights: positions of the function's parameters that hold a model's weights (constants), which
    a runner with flush_cache="weights" evicts before each timing round."""

    __slots__ = ("workload", "trace", "weights")

    def __init__(self, workload, trace, weights=()):
        if not isinstance(workload, Workload):
            workload = Workload(workload)
        if not isinstance(trace, (list, tuple)):
            raise TesseraError(f"MeasureCandidate: trace must be the JSON list of Trace.as_json(), got "
                               f"{type(trace).__name__}")
        n = len(workload.func.params)
        weights = tuple(sorted({int(i) for i in weights}))
        if weights and not 0 <= weights[0] <= weights[-1] < n:
            raise TesseraError(f"MeasureCandidate: weights {list(weights)} are not parameter positions of "
                               f"{workload.func.name} ({n} parameters)")
        self.workload, self.trace, self.weights = workload, trace, weights

    @staticmethod
    def from_schedule(sch: Schedule, workload) -> "MeasureCandidate":
        """The candidate of a schedule made from workload's function (a Workload or the PrimFunc)."""
        return MeasureCandidate(workload, sch.trace.as_json())

    def schedule(self) -> Schedule:
        """Replay the trace on the workload's function (a TesseraError when it does not apply)."""
        sch = Schedule(self.workload.func)
        Trace.apply_json_to_schedule(self.trace, sch)
        return sch

    def __repr__(self):
        return f"MeasureCandidate({self.workload.key}, {len(self.trace[0]) if self.trace else 0} instructions)"


@dataclass(frozen=True)
class BuildResult:
    """A built candidate (path of its library and the function to time) or why it was not built.
    build_secs: the whole build in the worker (replay, lowering, rendering, compiling); compile_secs:
    the C compiler's part of it (0 on a cache hit)."""

    path: str | None
    func_name: str | None
    error_kind: str | None = None
    error_msg: str | None = None
    build_secs: float = 0.0
    compile_secs: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error_kind is None


@dataclass(frozen=True)
class MeasureResult:
    """The measurement of one candidate: seconds per run (one per repeat; empty on error), the
    error (kind from database.ERROR_KINDS and message), where the time went -- the build, the C
    compiler's part of it, the runner's whole handling of the candidate (run_wall_secs) and the
    part of that spent inside the candidate's own calls (kernel_secs; the rest is the runner's
    overhead: messages, loading, copying inputs, the output check) -- and the worker that ran it.
    remeasured: how often the worker timed it again because its rounds stalled or the machine was
    busy (stalled rounds are left out of run_secs); busy: even the timing kept was contended, so
    run_secs may be high."""

    run_secs: tuple
    error_kind: str | None = None
    error_msg: str | None = None
    build_secs: float = 0.0
    compile_secs: float = 0.0
    run_wall_secs: float = 0.0
    kernel_secs: float = 0.0
    worker: str = field(default="local", compare=False)
    remeasured: int = 0
    busy: bool = False

    def __post_init__(self):
        if self.error_kind is not None and self.error_kind not in ERROR_KINDS:
            raise TesseraError(f"MeasureResult: error kind {self.error_kind!r} is not one of {ERROR_KINDS}")

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def mean_secs(self) -> float:
        return sum(self.run_secs) / len(self.run_secs) if self.ok and self.run_secs else float("inf")

    @property
    def secs(self) -> float:
        """Median of run_secs, as TuningRecord.secs ranks records; inf for a failed candidate."""
        return statistics.median(self.run_secs) if self.ok and self.run_secs else float("inf")

    def to_record(self, candidate: MeasureCandidate, target) -> TuningRecord:
        """The database record of this result for candidate on target."""
        return make_record(candidate, self, target)

    def as_json(self) -> dict:
        return {"run_secs": list(self.run_secs), "error_kind": self.error_kind, "error_msg": self.error_msg,
                "build_secs": self.build_secs, "compile_secs": self.compile_secs,
                "run_wall_secs": self.run_wall_secs, "kernel_secs": self.kernel_secs, "worker": self.worker,
                "remeasured": self.remeasured, "busy": self.busy}

    @staticmethod
    def from_json(obj) -> "MeasureResult":
        return MeasureResult(tuple(obj["run_secs"]), obj["error_kind"], obj["error_msg"], obj["build_secs"],
                             obj["compile_secs"], obj["run_wall_secs"], obj.get("kernel_secs", 0.0),
                             obj.get("worker", "local"), int(obj.get("remeasured", 0)), bool(obj.get("busy", False)))


def make_record(candidate: MeasureCandidate, result: MeasureResult, target) -> TuningRecord:
    """(candidate, result, target) as a TuningRecord: error results keep no times."""
    err = None if result.ok else {"kind": result.error_kind, "msg": result.error_msg or ""}
    return TuningRecord(candidate.workload.key, str(Target(target)), candidate.trace,
                        result.run_secs if result.ok else (), err)


def intrinsics_used(trace) -> list:
    """Names of the tensor intrinsics a JSON trace tensorizes with (they must exist where it is built)."""
    out = []
    try:
        for inst in trace[0]:
            if inst[0] == "Tensorize" and inst[2]:
                name = json.loads(inst[2][0])
                if isinstance(name, str) and name not in out:
                    out.append(name)
    except (TypeError, IndexError, ValueError, KeyError):
        pass   # a malformed trace: its replay reports it
    return out


__all__ = ["MeasureCandidate", "BuildResult", "MeasureResult", "make_record", "intrinsics_used"]
