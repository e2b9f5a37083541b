"""RandomComputeLocation: where a block left alone by the tiling rules is computed, sampled
(MetaSchedule's RandomComputeLocation): sample_compute_location + compute_at, which also covers
staying at the root (ROOT_MARK) and inlining (INLINE_MARK).

It applies to a block directly under the root block that is not tiled, not an output, has a
consumer and at least one loop of its own (its outermost loop holds no other block).
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...tir.schedule.analysis import consumers, is_output_block
from ...tir.schedule.state import realizes_under
from .base import ANN_TILING, ScheduleRule, is_root, node_of


class RandomComputeLocation(ScheduleRule):
    """See the module docstring."""

    name = "RandomComputeLocation"

    def apply(self, sch, block) -> list:
        idx, r = node_of(sch, block)
        if is_root(idx, r) or ANN_TILING in r.block.annotations:
            return [sch]
        scope = idx.scope_of(r)
        if scope is not None and idx.scope_of(scope) is not None:
            return [sch]  # nested in a block other than the root
        loops = idx.loops_above(r)
        if not loops or len(realizes_under(loops[0].body)) > 1:
            return [sch]
        if is_output_block(idx, r) or not consumers(idx, r):
            return [sch]
        new = sch.copy()
        try:
            loc = new.sample_compute_location(block)
            new.compute_at(block, loc, preserve_unit_loops=True)
        except ScheduleError:
            return [sch]
        return [new]


__all__ = ["RandomComputeLocation"]
