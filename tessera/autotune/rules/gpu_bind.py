"""The GPU rules beside the tiling: AutoBind (MetaSchedule's AutoBind: every block no other rule
bound runs on threads) and AutoUnroll (the GPU form of ParallelizeVectorizeUnroll: only the
auto-unroll depth, since a GPU kernel is already parallel and its vectors are the cooperative
copies).

AutoBind, for a block of the root scope with no thread-bound loop above it:
- its leading data-parallel loops (check_parallelizable) are fused and split into
  (blockIdx.x, threadIdx.x), the threads per block a sample_categorical among the target's
  thread_candidates that the fused extent reaches (one thread per output; a ragged last block is
  guarded); the loops below (a reduction) run serially in each thread;
- a reduction with no data-parallel loop (a sum to a scalar) shares its innermost reduction loop
  among the threads of one block: split by the sampled thread count, the thread part bound to
  threadIdx.x (a cross-thread reduction: a shared-memory tree, lower_cross_thread_reduction).
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir import ForKind
from ...tir.schedule.analysis import check_parallelizable
from .base import ANN_UNROLL, ScheduleRule, const_extent, is_root, node_of


class AutoBind(ScheduleRule):
    """See the module docstring."""

    name = "AutoBind"

    def apply(self, sch, block) -> list:
        idx, r = node_of(sch, block)
        if is_root(idx, r):
            return [sch]
        above = idx.loops_above(r)
        if not above or any(lp.kind == ForKind.THREAD_BINDING for lp in above):
            return [sch]
        new = sch.copy()
        rvs = new.get_loops(block)
        spatial = []
        for rv, lp in zip(rvs, above):
            try:
                check_parallelizable(lp, "AutoBind", "bound")
            except ScheduleError:
                break
            if lp.kind != ForKind.SERIAL:
                break
            spatial.append((rv, lp))
        try:
            if spatial:
                fused = new.fuse(*[rv for rv, _ in spatial]) if len(spatial) > 1 else spatial[0][0]
                threads = self._threads(new, const_extent(new.get(fused)))
                bx, tx = new.split(fused, [None, threads])
                new.bind(bx, "blockIdx.x")
                new.bind(tx, "threadIdx.x")
            else:
                k, lp = rvs[-1], above[-1]
                if lp.kind != ForKind.SERIAL:
                    return [sch]
                threads = self._threads(new, const_extent(lp))
                ko, ki = new.split(k, [None, threads])
                new.reorder(ki, ko)
                new.bind(ki, "threadIdx.x")
        except ScheduleError:
            return [sch]
        return [new]

    def _threads(self, sch, extent):
        """The sampled threads per block: the candidates the extent reaches (the extent itself when
        it is below all of them)."""
        cands = list(self.ctx.thread_candidates)
        if extent is not None:
            reach = [c for c in cands if c <= extent]
            cands = reach or [max(1, min(extent, self.ctx.max_threads_per_block))]
        return sch.sample_categorical(cands, [1.0 / len(cands)] * len(cands))


class AutoUnroll(ScheduleRule):
    """The root block records the auto-unroll depth (a sample_categorical among the context's
    unroll_candidates, MutateUnroll's decision); postproc.RewriteParallelVectorizeUnroll puts it
    on the outermost loop of each kernel."""

    name = "AutoUnroll"

    def apply(self, sch, block) -> list:
        idx, r = node_of(sch, block)
        if not is_root(idx, r):
            return [sch]
        un = list(self.ctx.unroll_candidates)
        u = sch.sample_categorical(un, [1.0 / len(un)] * len(un))
        sch.annotate(block, ANN_UNROLL, u)
        return [sch]


__all__ = ["AutoBind", "AutoUnroll"]
