"""Mutators: a trace with one decision changed (MetaSchedule's Mutator), for evolutionary search
and simulated annealing.

    new = MutateTileSize().mutate(trace, rng)            # Trace or None (nothing to mutate)
    new = mutate_any(trace, rng, default_mutators(func))  # one of them, by weight
    sch = space.replay_trace(func, new, target)          # postprocessed candidate or None

- MutateTileSize: a sample_perfect_tile decision with a factor moved between two positions (the
  innermost staying within max_innermost_factor), or a tile-size sample_categorical (one whose
  value is a split factor: UseTensorIntrin's) with another candidate;
- MutateUnroll: the auto-unroll depth (the categorical behind meta_schedule.unroll_explicit);
- MutateParallel: the parallel extent (the categorical behind meta_schedule.parallel), i.e. how
  many outer loops the postprocessor fuses into the parallel loop;
- MutateComputeLocation: another location a sample_compute_location can legally take, found by
  replaying the trace up to that instruction on the function.
Each returns the trace up to its postprocessing (remove_postproc) with the new decision.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import TesseraError
from ..ir import PrimFunc
from ..tir.schedule import Schedule, Trace
from ..tir.schedule.locations import compute_locations
from ..tir.schedule.handles import RV
from ..tir.schedule.sampling import prime_factors
from .rules.base import ANN_PARALLEL, ANN_UNROLL


def _uses(trace: Trace) -> dict:
    """RV -> the instructions that take it as an input (directly or in a list)."""
    out: dict = {}

    def walk(x, inst):
        if isinstance(x, RV):
            out.setdefault(x, []).append(inst)
        elif isinstance(x, (list, tuple)):
            for y in x:
                walk(y, inst)
    for inst in trace.insts:
        for x in inst.inputs:
            walk(x, inst)
    return out


def _design_insts(trace: Trace) -> list:
    for k, inst in enumerate(trace.insts):
        if inst.kind.name == "EnterPostproc":
            return trace.insts[:k]
    return trace.insts


def _annotated_categoricals(trace: Trace, key: str) -> list:
    """The sample_categorical instructions whose value is annotated under `key`."""
    uses = _uses(trace)
    out = []
    for inst in _design_insts(trace):
        if inst.kind.name != "SampleCategorical" or trace.decisions.get(inst) is None:
            continue
        if any(u.kind.name == "Annotate" and u.attrs[0] == key and u.inputs[1] is inst.outputs[0]
               for u in uses.get(inst.outputs[0], ())):
            out.append(inst)
    return out


def _other_index(inst, decision, rng):
    """Another candidate index of a sample_categorical with a nonzero probability (None: none)."""
    probs = inst.attrs[1]
    others = [k for k, p in enumerate(probs) if p > 0 and k != decision]
    if not others:
        return None
    return others[int(rng.integers(len(others)))]


class Mutator:
    """mutate(trace, rng) -> a Trace with one decision changed, or None when there is none."""

    name = "mutator"

    def mutate(self, trace: Trace, rng) -> Trace | None:
        raise NotImplementedError(f"{type(self).__name__}.mutate")

    def __repr__(self):
        return f"<{type(self).__name__}>"


class MutateTileSize(Mutator):
    """See the module docstring."""

    name = "MutateTileSize"

    def _candidates(self, trace):
        uses = _uses(trace)
        out = []
        for inst in _design_insts(trace):
            d = trace.decisions.get(inst)
            if d is None:
                continue
            if inst.kind.name == "SamplePerfectTile" and len(d) > 1 and math.prod(d) > 1 or inst.kind.name == "SampleCategorical" and len(inst.attrs[0]) > 1 and any(
                    u.kind.name == "Split" for u in uses.get(inst.outputs[0], ())):
                out.append(inst)
        return out

    def mutate(self, trace, rng):
        cands = self._candidates(trace)
        rng = _rng(rng)
        while cands:
            inst = cands.pop(int(rng.integers(len(cands))))
            d = trace.decisions[inst]
            if inst.kind.name == "SampleCategorical":
                new = _other_index(inst, d, rng)
            else:
                new = self._move_factor(list(d), inst.attrs[1], rng)
            if new is not None:
                return trace.with_decision(inst, new, remove_postproc=True)
        return None

    @staticmethod
    def _move_factor(d, max_innermost, rng):
        """d with a prime factor of one position moved to another (None: no legal move)."""
        n = len(d)
        moves = []
        for i in range(n):
            for p in sorted(set(prime_factors(d[i]))):
                for j in range(n):
                    if j == i:
                        continue
                    if j == n - 1 and max_innermost != -1 and d[j] * p > max_innermost:
                        continue
                    moves.append((i, j, p))
        if not moves:
            return None
        i, j, p = moves[int(rng.integers(len(moves)))]
        d[i] //= p
        d[j] *= p
        return d


class _MutateAnnotated(Mutator):
    key = ""

    def mutate(self, trace, rng):
        rng = _rng(rng)
        cands = _annotated_categoricals(trace, self.key)
        while cands:
            inst = cands.pop(int(rng.integers(len(cands))))
            new = _other_index(inst, trace.decisions[inst], rng)
            if new is not None:
                return trace.with_decision(inst, new, remove_postproc=True)
        return None


class MutateUnroll(_MutateAnnotated):
    """See the module docstring."""

    name = "MutateUnroll"
    key = ANN_UNROLL


class MutateParallel(_MutateAnnotated):
    """See the module docstring."""

    name = "MutateParallel"
    key = ANN_PARALLEL


class MutateComputeLocation(Mutator):
    """See the module docstring; needs the function the traces schedule."""

    name = "MutateComputeLocation"

    def __init__(self, func: PrimFunc):
        if not isinstance(func, PrimFunc):
            raise TesseraError(f"MutateComputeLocation needs the PrimFunc the traces schedule, got "
                               f"{type(func).__name__}")
        self.func = func

    def mutate(self, trace, rng):
        rng = _rng(rng)
        insts = _design_insts(trace)
        cands = [k for k, inst in enumerate(insts)
                 if inst.kind.name == "SampleComputeLocation" and trace.decisions.get(inst) is not None]
        while cands:
            k = cands.pop(int(rng.integers(len(cands))))
            inst = insts[k]
            sch = Schedule(self.func, seed=0)
            try:
                Trace(insts[:k], trace.decisions).apply_to_schedule(sch)
            except TesseraError:
                continue
            rv_block = _replayed_block(sch, insts[:k], inst.inputs[0])
            if rv_block is None:
                continue
            _, idx, realize = sch._block(rv_block, "MutateComputeLocation")
            locs = [d for d, _ in compute_locations(idx, realize) if d != trace.decisions[inst]]
            if locs:
                return trace.with_decision(inst, locs[int(rng.integers(len(locs)))], remove_postproc=True)
        return None


def _replayed_block(sch, insts, block_rv):
    """The replayed schedule's handle of the block that `block_rv` names in the original trace."""
    for inst in insts:
        if block_rv in inst.outputs and inst.kind.name == "GetBlock":
            return sch.get_block(inst.attrs[0], inst.attrs[1])
    return None


def _rng(rng):
    if isinstance(rng, np.random.Generator):
        return rng
    return np.random.default_rng(rng)


def default_mutators(func: PrimFunc | None = None) -> list:
    """(mutator, probability) pairs: MetaSchedule's CPU weights (tile size 0.9, compute location
    0.05, unroll 0.03, parallel 0.02); without func, compute location is left out."""
    out = [(MutateTileSize(), 0.9), (MutateUnroll(), 0.03), (MutateParallel(), 0.02)]
    if func is not None:
        out.append((MutateComputeLocation(func), 0.05))
    return out


def mutate_any(trace: Trace, rng, mutators=None, probs=None) -> Trace | None:
    """A mutation by one mutator drawn by weight (mutators: Mutator objects, or (mutator,
    probability) pairs when probs is None); when the drawn one has nothing to change the others are
    tried in turn, by weight. None when no mutator can change the trace."""
    rng = _rng(rng)
    if mutators is None:
        mutators = default_mutators()
    if probs is None:
        pairs = [(m, p) for m, p in mutators] if mutators and isinstance(mutators[0], tuple) else \
            [(m, 1.0) for m in mutators]
    else:
        if len(probs) != len(mutators):
            raise TesseraError(f"mutate_any: {len(mutators)} mutators but {len(probs)} probabilities")
        pairs = list(zip(mutators, probs))
    pairs = [(m, float(p)) for m, p in pairs if p > 0]
    while pairs:
        w = np.array([p for _, p in pairs])
        k = int(rng.choice(len(pairs), p=w / w.sum()))
        m, _ = pairs.pop(k)
        new = m.mutate(trace, rng)
        if new is not None:
            return new
    return None


__all__ = [
    "MutateComputeLocation",
    "MutateParallel",
    "MutateTileSize",
    "MutateUnroll",
    "Mutator",
    "default_mutators",
    "mutate_any",
]
