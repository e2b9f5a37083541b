"""ParallelizeVectorizeUnroll: the root block records how the postprocessor parallelizes,
vectorizes and unrolls every loop nest (MetaSchedule's rule; RewriteParallelVectorizeUnroll in
postproc.py does the rewriting once the loops are final).

    meta_schedule.parallel        sampled among threads x (1, 4, 16, 64): the outer data-parallel
                                  loops fused into one parallel loop while their product fits
    meta_schedule.vectorize       the target's limit: inner data-parallel loops fused and vectorized
                                  while their product fits (4 registers of float32 lanes)
    meta_schedule.unroll_explicit sampled among 0 / 16 / 64 / 512: auto-unroll depth of each nest

Two of the three are decisions of the trace (MutateParallel and MutateUnroll change them). A
function whose body is not a root block (te.create_prim_func always makes one) has nowhere to
record them: its loops stay as the other rules leave them.
"""
from __future__ import annotations

from .base import (
    ANN_PARALLEL,
    ANN_UNROLL,
    ANN_VECTORIZE,
    ScheduleRule,
    is_root,
    node_of,
)


class ParallelizeVectorizeUnroll(ScheduleRule):
    """See the module docstring."""

    name = "ParallelizeVectorizeUnroll"

    def apply(self, sch, block) -> list:
        idx, r = node_of(sch, block)
        if not is_root(idx, r):
            return [sch]
        ctx = self.ctx
        par = ctx.parallel_candidates
        p = sch.sample_categorical(list(par), [1.0 / len(par)] * len(par))
        sch.annotate(block, ANN_PARALLEL, p)
        sch.annotate(block, ANN_VECTORIZE, ctx.max_vectorize_extent)
        un = ctx.unroll_candidates
        u = sch.sample_categorical(list(un), [1.0 / len(un)] * len(un))
        sch.annotate(block, ANN_UNROLL, u)
        return [sch]


__all__ = ["ParallelizeVectorizeUnroll"]
