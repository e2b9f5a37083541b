"""The GPU rules beside the tiling: CrossThreadReduction (MetaSchedule's: a long reduction shared
by the threads of a block), AutoBind (MetaSchedule's AutoBind: every block no other rule bound
runs on threads) and AutoUnroll (the GPU form of ParallelizeVectorizeUnroll: only the
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
from .base import (
    ANN_TILING,
    ANN_UNROLL,
    ScheduleRule,
    const_extent,
    is_reduction,
    is_root,
    needs_multi_level_tiling,
    node_of,
    trivial_binding_loops,
)

WARP = 32


class CrossThreadReduction(ScheduleRule):
    """A reduction block's trailing reduction loops fused, split by a sampled thread count (a
    power of two the reduction reaches) and the thread part bound to threadIdx.x, the spatial loops
    fused onto blockIdx.x: the threads of a block share each output's reduction through a
    shared-memory tree (lower_cross_thread_reduction), the schedule of softmax's and layer norm's
    rows. One more design space beside the block left as it is (MetaSchedule's rule), offered as
    TVM's NeedsRFactorOrCrossThreadReduction decides: for a block MultiLevelTilingGPU tiles, only
    when its outputs are fewer than its reduction's length and than a block's threads; for any
    other reduction, when the reduction is longer than a warp (32)."""

    name = "CrossThreadReduction"

    def apply(self, sch, block) -> list:
        idx, r = node_of(sch, block)
        if is_root(idx, r) or not is_reduction(r) or ANN_TILING in r.block.annotations:
            return [sch]
        loops = trivial_binding_loops(idx, r)
        if loops is None or any(lp.kind != ForKind.SERIAL for lp in loops):
            return [sch]
        kinds = [iv.iter_type for iv in r.block.iter_vars]
        n_red = len(kinds) - next((k for k in range(len(kinds) - 1, -1, -1) if kinds[k] != "reduce"), -1) - 1
        if n_red == 0 or any(k != "data_par" for k in kinds[:len(kinds) - n_red]):
            return [sch]
        exts = [const_extent(lp) for lp in loops]
        if any(e is None for e in exts):
            return [sch]
        space = red = 1
        for e in exts[:len(exts) - n_red]:
            space *= e
        for e in exts[len(exts) - n_red:]:
            red *= e
        if needs_multi_level_tiling(r):
            if space >= red or space > self.ctx.max_threads_per_block:
                return [sch]
        elif red <= WARP:
            return [sch]
        new = sch.copy()
        rvs = new.get_loops(block)
        spatial, reds = rvs[:len(rvs) - n_red], rvs[len(rvs) - n_red:]
        cands = [t for t in self.ctx.thread_candidates if t <= red] or [min(self.ctx.thread_candidates)]
        try:
            k = new.fuse(*reds) if len(reds) > 1 else reds[0]
            threads = new.sample_categorical(cands, [1.0 / len(cands)] * len(cands))
            ko, ki = new.split(k, [None, threads])
            new.reorder(ki, ko)
            if spatial:
                new.bind(new.fuse(*spatial) if len(spatial) > 1 else spatial[0], "blockIdx.x")
            new.bind(ki, "threadIdx.x")
        except ScheduleError:
            return [sch]
        return [sch, new]


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


__all__ = ["AutoBind", "AutoUnroll", "CrossThreadReduction"]
