"""Sampling instructions: the random choices that make a schedule a probabilistic program.

Each draws from the schedule's seeded numpy Generator unless given a `decision`, and records the
decision it used in the trace, so replaying the trace repeats the choice exactly and replacing a
decision (Trace.with_decision) replays another one.

- sample_perfect_tile(loop, n, max_innermost_factor): n factors (ExprRVs) whose product is the
  loop's constant extent; the innermost is at most max_innermost_factor (-1: no limit).
  Decision: the list of factors.
- sample_categorical(candidates, probs): one candidate drawn with the given probabilities.
  Decision: the index of the candidate.
- sample_compute_location(block): a location where the block can be computed (analysis.
  compute_locations): a LoopRV of a loop, or the root (-1) / inline (-2) mark. Decision: -2, -1,
  or the position of the loop among the loops of the block's first consumer.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import ScheduleError
from ...ir import IntImm
from .instruction import instruction_kind
from .locations import compute_locations, location_is_legal
from .handles import ROOT_MARK, ExprRV, LocationMark, LoopRV


def prime_factors(n: int) -> list:
    """The prime factors of n >= 1, smallest first, with repeats (sampling and the tuner's mutators split
    tile extents by them)."""
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def _draw_tile(rng, extent: int, n: int) -> list:
    """n factors of extent: each prime factor goes to a uniformly drawn position."""
    result = [1] * n
    for p in prime_factors(extent):
        result[int(rng.integers(n))] *= p
    return result


def sample_tile_sizes(rng, extent: int, n: int, max_innermost_factor: int) -> list:
    """TVM's SamplePerfectTile: the innermost factor uniformly among the divisors of extent up to
    max_innermost_factor (-1: any divisor), the others by distributing the rest's prime factors."""
    if n == 1:
        return [extent]
    if extent == 0:
        return [0] * n
    if max_innermost_factor == -1:
        return _draw_tile(rng, extent, n)
    cands = [d for d in range(1, min(extent, max_innermost_factor) + 1) if extent % d == 0]
    inner = cands[int(rng.integers(len(cands)))]
    return _draw_tile(rng, extent // inner, n - 1) + [inner]


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


@instruction_kind("SamplePerfectTile", inputs=("loop",), outputs="list", output_type=ExprRV, pure=True,
                  sampling=True)
def sample_perfect_tile(self, loop, n, max_innermost_factor=16, decision=None):
    """n ExprRVs whose product is the loop's extent (see the module docstring)."""
    prim = "sample_perfect_tile"
    _, _, node = self._loop(loop, prim)
    name = node.loop_var.name
    if not _is_int(n) or n < 1:
        raise ScheduleError(f"{prim}: n must be an int >= 1, got {n!r}")
    if not _is_int(max_innermost_factor) or (max_innermost_factor < 1 and max_innermost_factor != -1):
        raise ScheduleError(f"{prim}: max_innermost_factor must be an int >= 1 or -1 (no limit), "
                            f"got {max_innermost_factor!r}")
    if type(node.extent) is not IntImm:
        raise ScheduleError(f"{prim}: loop {name!r} has the symbolic extent {node.extent.script()}; "
                            f"perfect tiles need a constant extent")
    extent = node.extent.value
    n = int(n)
    if decision is not None:
        if not isinstance(decision, (list, tuple)) or len(decision) != n or not all(
                _is_int(d) and d >= 1 for d in decision):
            raise ScheduleError(f"{prim}: decision {decision!r} for loop {name!r} must be {n} positive ints")
        decision = [int(d) for d in decision]
        if math.prod(decision) != extent:
            raise ScheduleError(f"{prim}: decision {decision} for loop {name!r} multiplies to "
                                f"{math.prod(decision)}, not its extent {extent}")
    else:
        decision = sample_tile_sizes(self._rng, extent, n, int(max_innermost_factor))
    return [self._new_expr_rv(v) for v in decision], list(decision)


@instruction_kind("SampleCategorical", outputs="one", output_type=ExprRV, pure=True, sampling=True)
def sample_categorical(self, candidates, probs, decision=None):
    """One of the integer candidates, drawn with the given probabilities."""
    prim = "sample_categorical"
    if not isinstance(candidates, (list, tuple)) or not candidates or not all(_is_int(c) for c in candidates):
        raise ScheduleError(f"{prim}: candidates must be a non-empty list of ints, got {candidates!r}")
    if not isinstance(probs, (list, tuple)) or len(probs) != len(candidates):
        raise ScheduleError(f"{prim}: probs must be a list of {len(candidates)} numbers (one per candidate), "
                            f"got {probs!r}")
    p = []
    for k, x in enumerate(probs):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)) \
                or not math.isfinite(x) or x < 0:
            raise ScheduleError(f"{prim}: probs[{k}] is {x!r}; probabilities are finite numbers >= 0")
        p.append(float(x))
    total = sum(p)
    if total <= 0:
        raise ScheduleError(f"{prim}: the probabilities sum to {total}; at least one must be positive")
    if decision is not None:
        if not _is_int(decision) or not 0 <= decision < len(candidates):
            raise ScheduleError(f"{prim}: decision {decision!r} is not an index into the "
                                f"{len(candidates)} candidates")
        i = int(decision)
    else:
        cum = np.cumsum(p)
        i = int(np.searchsorted(cum, self._rng.random() * total, side="right"))
        i = min(i, len(candidates) - 1)
        while p[i] == 0:  # a zero-probability candidate at the end of the cumulative sums
            i -= 1
    return self._new_expr_rv(int(candidates[i])), i


@instruction_kind("SampleComputeLocation", inputs=("block",), outputs="one", output_type=LoopRV, pure=True,
                  sampling=True)
def sample_compute_location(self, block, decision=None):
    """A location where the block can be computed: a loop, or the root (-1) / inline (-2) mark.

    A decision that is no longer a candidate falls back to the nearest candidate before it (as
    TVM does); the decision recorded is the one used."""
    prim = "sample_compute_location"
    fname, idx, realize = self._block(block, prim)
    # structural candidates, each confirmed only when reached: the first legal one of a random
    # order is uniform over the legal ones, and a decision needs only those at or below it
    cands = compute_locations(idx, realize, check=False)
    if decision is not None:
        if not _is_int(decision) or decision < -2:
            raise ScheduleError(f"{prim}: decision {decision!r} must be an int >= -2 (-2 inline, -1 root, "
                                f"k: the k-th loop of the first consumer)")
        k, loc = next(((k, loc) for k, loc in reversed(cands)
                       if k <= decision and location_is_legal(idx, realize, loc)), (-1, ROOT_MARK))
    else:
        k, loc = next(cands[i] for i in self._rng.permutation(len(cands))
                      if location_is_legal(idx, realize, cands[i][1]))
    if isinstance(loc, LocationMark):
        return self._new_mark_rv(loc), k
    return self._new_loop_rv(fname, loc.loop_var), k


__all__ = ["sample_categorical", "sample_compute_location", "sample_perfect_tile", "sample_tile_sizes"]
