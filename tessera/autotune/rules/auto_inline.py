"""AutoInline: inline cheap elementwise blocks into their consumers (MetaSchedule's AutoInline).

A spatial block is inlined into its consumers (compute_inline) when that is legal and when it is
not a packing stage: a pure copy that feeds a reduction is the program author's layout for the
reduction's inner loop (gemm_program's B_pack) and stays. As MetaSchedule does for CPUs, blocks
computing with if_then_else (padding) stay too, and inlining a consumer into its producer
(reverse_compute_inline) is off unless `into_producer=True`: an elementwise consumer of a
reduction is fused by MultiLevelTiling instead.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...tir.schedule.analysis import complete_or_reduction, consumers, producers
from ...tir.schedule.locations import can_compute_inline
from .base import (
    ScheduleRule,
    has_branch,
    is_pure_copy,
    is_reduction,
    is_root,
    is_spatial,
    node_of,
)


class AutoInline(ScheduleRule):
    """See the module docstring."""

    name = "AutoInline"

    def __init__(self, ctx, into_consumer: bool = True, into_producer: bool = False,
                 disallow_if_then_else: bool = True):
        super().__init__(ctx)
        self.into_consumer = into_consumer
        self.into_producer = into_producer
        self.disallow_if_then_else = disallow_if_then_else

    def apply(self, sch, block) -> list:
        idx, r = node_of(sch, block)
        b = r.block
        if is_root(idx, r) or not is_spatial(r) or b.init is not None or not b.iter_vars:
            return [sch]
        if self.disallow_if_then_else and has_branch(b.body):
            return [sch]
        if self.into_consumer:
            cons = consumers(idx, r)
            packing = is_pure_copy(r) and any(is_reduction(c) for c in cons)
            if cons and not packing and can_compute_inline(idx, r):
                try:
                    sch.compute_inline(block)
                    return [sch]
                except ScheduleError:
                    pass
        if self.into_producer:
            prods = producers(idx, r)
            if len(prods) == 1 and is_spatial(prods[0]) and complete_or_reduction(idx, prods[0]) is None:
                try:
                    sch.reverse_compute_inline(block)
                except ScheduleError:
                    pass
        return [sch]


__all__ = ["AutoInline"]
