"""Search spaces: design spaces generated for any PrimFunc, and candidates sampled from them
(MetaSchedule's PostOrderApply space generator).

    spaces = generate_design_space(func, "c -num-threads=2")     # list of tir.Schedule
    sch = sample_candidate(func, spaces[0], target, rng)          # fresh decisions, postprocessed
    sch = replay_trace(func, mutated_trace, target)               # the trace's own decisions
    key = candidate_key(sch)                                      # structural hash: deduplication

A design space is a schedule whose trace holds sampling instructions: a probabilistic program.
generate_design_space applies the rules (rules/: AutoInline, AddRFactor, UseTensorIntrin,
MultiLevelTiling, ParallelizeVectorizeUnroll, RandomComputeLocation; for opencl and cuda targets
AutoInline, MultiLevelTilingGPU, AutoBind, AutoUnroll) to every block, consumers first, each rule
mapping a schedule to the schedules it branches into; for a CPU target the untouched program is
always one more space. A candidate replays a space's trace (remove_postproc) with new decisions
and runs the postprocessors (postproc.py), which may reject it (None).
"""
from __future__ import annotations

import numpy as np

from ..errors import TesseraError
from ..ir import IRModule, PrimFunc, structural_hash
from ..tir.schedule import Schedule, Trace
from .postproc import postprocess, prepared
from .rules import SpaceContext, default_rules
from .rules.base import block_alive


def _as_func(func) -> PrimFunc:
    if isinstance(func, PrimFunc):
        return func
    if isinstance(func, IRModule) and len(func.functions) == 1:
        return next(iter(func.functions.values()))
    raise TesseraError(f"a search space is generated for one PrimFunc, got {type(func).__name__}")


def _context(target) -> SpaceContext:
    return prepared(target)[0]


def generate_design_space(func, target, rules=None) -> list:
    """The design spaces (tir.Schedules whose traces sample) of func for target.

    rules: ScheduleRule objects (default: rules.default_rules for the target)."""
    func = _as_func(func)
    ctx = _context(target)
    rules = default_rules(ctx) if rules is None else list(rules)
    start = Schedule(func, seed=0)
    names = [r.block.name_hint for r in start.state.index(_fname(start)).realizes]
    spaces = []
    stack = [(start, len(names))]
    while stack:
        sch, n = stack.pop()
        if n == 0:
            spaces.append(sch)
            continue
        name = names[n - 1]
        if name not in sch.state.index(_fname(sch)).blocks:
            stack.append((sch, n - 1))
            continue
        block = sch.get_block(name)
        applied = [sch]
        for rule in rules:
            nxt = []
            for s in applied:
                nxt.extend(rule.apply(s, block) if block_alive(s, block) else [s])
            applied = nxt
        for s in reversed(applied):
            stack.append((s, n - 1))
    if not ctx.is_gpu:     # a GPU kernel needs its loops bound: the untouched program never builds
        spaces.append(Schedule(func, seed=0))  # the untouched program
    return spaces


def _fname(sch) -> str:
    funcs = sch.state.funcs
    return "main" if "main" in funcs else next(iter(funcs))


def _seed(rng_or_seed) -> int:
    if isinstance(rng_or_seed, np.random.Generator):
        return int(rng_or_seed.integers(0, 2 ** 31 - 1))
    if rng_or_seed is None:
        return int(np.random.default_rng().integers(0, 2 ** 31 - 1))
    if isinstance(rng_or_seed, (int, np.integer)) and not isinstance(rng_or_seed, bool) and rng_or_seed >= 0:
        return int(rng_or_seed)
    raise TesseraError(f"rng_or_seed must be a numpy Generator, an int >= 0 or None, got {rng_or_seed!r}")


def _trace_of(design) -> Trace:
    if isinstance(design, Schedule):
        return design.trace
    if isinstance(design, Trace):
        return design
    raise TesseraError(f"a design space is a tir.Schedule or its Trace, got {type(design).__name__}")


def _fresh(inst, inputs, attrs, decision):
    return None


def _replay(func, trace, target, seed, provider, postprocs):
    sch = Schedule(_as_func(func), seed=seed)
    try:
        trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
    except TesseraError:
        return None
    return sch if postprocess(sch, target, postprocs) else None


def sample_candidate(func, design, target, rng_or_seed=None, postprocs=None):
    """A candidate of the design space (a tir.Schedule or its trace): the trace replayed with
    fresh random decisions, then postprocessed; None when replay or postprocessing rejects it."""
    return _replay(func, _trace_of(design), target, _seed(rng_or_seed), _fresh, postprocs)


def replay_trace(func, trace, target, rng_or_seed=None, postprocs=None):
    """The candidate of a trace with its own decisions (a mutated trace: Trace.with_decision);
    instructions without a decision sample anew. None when it is rejected."""
    return _replay(func, _trace_of(trace), target, _seed(rng_or_seed if rng_or_seed is not None else 0),
                   None, postprocs)


def candidate_key(sch) -> str:
    """The structural hash of the scheduled program, as hex (equal programs, equal keys)."""
    mod = sch.mod if isinstance(sch, Schedule) else sch
    return f"{structural_hash(mod):016x}"


__all__ = ["SpaceContext", "candidate_key", "generate_design_space", "replay_trace", "sample_candidate"]
