"""AddRFactor: for a reduction with little spatial parallelism and a long reduction (a row sum, a
softmax's max and sum, a GEMV), factor the reduction so its outer or inner part runs in parallel /
in vector lanes (MetaSchedule's AddRFactor).

The block's reduction loops (innermost, constant) are fused and split in two by
sample_perfect_tile; rfactor over the outer part and over the inner part each give a design space,
besides the block left as it is. Applies when the spatial iterations are fewer than the reduction's
and at most the target's parallel extent (for blocks MultiLevelTiling tiles), or when the reduction
is longer than the thread count (for the others).
"""
from __future__ import annotations

import math

from ...errors import ScheduleError
from .base import (
    ANN_TILING,
    ScheduleRule,
    const_extent,
    is_reduction,
    needs_multi_level_tiling,
    node_of,
    trivial_binding_loops,
)


class AddRFactor(ScheduleRule):
    """See the module docstring."""

    name = "AddRFactor"

    def apply(self, sch, block) -> list:
        idx, r = node_of(sch, block)
        if not is_reduction(r) or ANN_TILING in r.block.annotations:
            return [sch]
        loops = trivial_binding_loops(idx, r)
        if loops is None or any(const_extent(lp) is None for lp in loops):
            return [sch]
        kinds = [iv.iter_type for iv in r.block.iter_vars]
        if set(kinds) - {"data_par", "reduce"}:
            return [sch]
        space = math.prod(const_extent(lp) for lp, k in zip(loops, kinds) if k == "data_par")
        reduce = math.prod(const_extent(lp) for lp, k in zip(loops, kinds) if k == "reduce")
        max_par = max(self.ctx.parallel_candidates)
        if needs_multi_level_tiling(r):
            if space >= reduce or space > max_par:
                return [sch]
        elif reduce <= self.ctx.num_threads:
            return [sch]
        out = [sch]
        base = sch.copy()
        rvs = base.get_loops(block)
        s_rvs = [rv for rv, k in zip(rvs, kinds) if k == "data_par"]
        r_rvs = [rv for rv, k in zip(rvs, kinds) if k == "reduce"]
        try:
            if kinds != sorted(kinds, key=lambda k: k == "reduce"):
                base.reorder(*s_rvs, *r_rvs)
            fused = base.fuse(*r_rvs) if len(r_rvs) > 1 else r_rvs[0]
            factors = base.sample_perfect_tile(fused, n=2, max_innermost_factor=self.ctx.max_innermost_factor)
            outer, inner = base.split(fused, factors=factors)
        except ScheduleError:
            return out
        for which in (outer, inner):
            new = base.copy()
            try:
                new.rfactor(which, 0)
            except ScheduleError:
                continue
            out.append(new)
        return out


__all__ = ["AddRFactor"]
