"""A tuning task: one workload (the untuned PrimFunc), the target, and the search space the
strategies draw candidates from.

A space is anything with `sample(rng)`, `mutate(sch, rng)` and `replay(trace_json)`, each giving a
postprocessed tir.Schedule or None (a candidate the postprocessors reject), and `verify(sch)`. The
search scores many more candidates than it measures, so sample and mutate run the cheap
postprocessors (annotations, vector width, parallel extent) and the expensive one, that the
candidate lowers through the target's whole pipeline, runs in `verify` on those chosen to be built.
`GeneratedSpace` is the one the design-space rules make for any PrimFunc; templates (template.py)
give another.
"""
from __future__ import annotations

from ..errors import TesseraError
from ..ir import PrimFunc
from ..ops.gpu import schedule_gpu_default
from ..target import Target
from ..tir import Schedule
from ..tir.schedule import Trace
from .mutators import default_mutators, mutate_any
from .postproc import VerifyLowers, postprocess, prepared
from .rules.base import GPU_KINDS
from .space import generate_design_space, replay_trace, sample_candidate
from .workload import Workload


def sampling_decisions(trace: Trace) -> list:
    """The decisions of trace's sampling instructions, in order (None where there is none)."""
    return [trace.decisions.get(inst) for inst in trace.insts if inst.kind.sampling]


class Space:
    """What a search strategy needs from a search space (see the module docstring)."""

    func: PrimFunc
    target: Target

    def sample(self, rng):
        raise NotImplementedError

    def mutate(self, sch: Schedule, rng):
        raise NotImplementedError

    def replay(self, trace_json):
        """The schedule a record's trace gives (None if it no longer applies)."""
        sch = Schedule(self.func)
        try:
            Trace.apply_json_to_schedule(trace_json, sch)
        except TesseraError:
            return None
        return sch

    @property
    def postprocs(self) -> list:
        """The postprocessors run on every sampled or mutated candidate: the target's shared ones
        (postproc.prepared) but VerifyLowers, which `verify` runs on those chosen to be built."""
        return [p for p in prepared(self.target)[1] if not isinstance(p, VerifyLowers)]

    def finish(self, sch: Schedule):
        """sch when the (cheap) postprocessors accept it, else None."""
        return sch if postprocess(sch, self.target, self.postprocs) else None

    def verify(self, sch: Schedule) -> bool:
        """Whether sch lowers through the target's pipeline (checked before it is built; the
        verdicts are the target's shared VerifyLowers')."""
        v = next(p for p in prepared(self.target)[1] if isinstance(p, VerifyLowers))
        try:
            return bool(v.apply(sch))
        except TesseraError:
            return False

    def mutate_trace(self, trace: Trace, rng):
        """trace with one decision changed by one of the default mutators (None: none applied)."""
        return mutate_any(trace, rng, self._mutators())

    def _mutators(self):
        m = getattr(self, "_mut", None)
        if m is None:
            m = self._mut = default_mutators(self.func)
        return m


class GeneratedSpace(Space):
    """The design spaces the rules generate for func (space.generate_design_space)."""

    def __init__(self, func: PrimFunc, target):
        self.func = func
        self.target = Target(target)
        self.design_spaces = generate_design_space(func, self.target)
        if not self.design_spaces:
            raise TesseraError(f"no design space for {func.name!r} on {self.target}")

    def sample(self, rng):
        design = self.design_spaces[int(rng.integers(len(self.design_spaces)))]
        return sample_candidate(self.func, design, self.target, rng, postprocs=self.postprocs)

    def mutate(self, sch: Schedule, rng):
        trace = self.mutate_trace(sch.trace, rng)
        if trace is None:
            return None
        return replay_trace(self.func, trace, self.target, rng, postprocs=self.postprocs)

    def default(self):
        """What tessera.build gives func on this target untuned, for a tuner to measure beside the
        space's candidates: on a GPU target schedule_gpu_default (None where it refuses func); on a
        CPU None (func unscheduled is no candidate worth a trial)."""
        if self.target.kind not in GPU_KINDS:
            return None
        try:
            return schedule_gpu_default(Schedule(self.func), self.target)
        except TesseraError:
            return None


class TuneTask:
    """One workload to tune for one target over one space."""

    def __init__(self, func: PrimFunc, target, space: Space | None = None, name: str | None = None):
        if not isinstance(func, PrimFunc):
            raise TesseraError(f"a tuning task takes a PrimFunc (te.create_prim_func), got {type(func).__name__}")
        self.func = func
        self.target = Target(target)
        self.space = space if space is not None else GeneratedSpace(func, self.target)
        self.workload = Workload(func)
        self.name = name or func.name
        self.flops = self.workload.flops or 0   # operations of one run (0: symbolic extents)
        self.weights = ()    # positions of func's parameters that hold a model's weights (GraphTask's)

    def __repr__(self):
        return f"<TuneTask {self.name} on {self.target}>"


__all__ = ["Space", "GeneratedSpace", "TuneTask", "sampling_decisions"]
