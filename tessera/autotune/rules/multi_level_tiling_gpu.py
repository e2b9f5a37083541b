"""MultiLevelTilingGPU: the "SSSRRSRS" tiling of reductions with data reuse for GPUs, with
cooperative fetching into shared memory (MetaSchedule's MultiLevelTiling for CUDA, Ansor's GPU
sketch; the structure of ops/gpu/gemm.py's hand schedule, with every size a decision).

Each constant spatial loop is tiled into 5 and each constant reduction loop into 3, ordered S0 S1
S2 R0 R1 S3 R2 S4 (a symbolic loop is not tiled and leads its level). The factors are drawn from the
innermost out, one two-way sample_perfect_tile each, so every level has its own bound
(SPATIAL_CAPS, REDUCE_CAPS): a thread's register tile S1*S3*S4 at most 32 outputs a loop, the
threads S2 at most the thread limit's share of a loop, a reduction slice R1*R2 at most 32. One
five-way draw (MetaSchedule's) hands each prime factor to any level: for a 4096^3 GEMM nine
candidates in ten then want more than 48 KiB of shared memory or 128 registers of accumulators a
thread, or run blocks of fewer threads than a warp (postproc.VerifyGPUCode rejects them). The
loops of each of the first three spatial levels are fused and bound: S0 to blockIdx.x, S1 to
vthread.x (lowered to a serial loop: a thread's strided sub-tiles), S2 to threadIdx.x. Then:
- the output is accumulated in "local" memory: cache_write, its write-back reverse_compute_at
  under the threadIdx loop (each thread stores its own outputs once); an elementwise consumer
  (the only one, reading the output at its own iterators: bias, activation) is computed there too,
  reading the accumulator (the write-back inlined into it): one kernel, no global intermediate;
- every input is cached in "shared" memory: cache_read, compute_at under the last R0 loop. The
  cache block's region is relaxed over the threads of the block (tir/schedule/placement.py), so it
  copies the whole block's tile; it is annotated meta_schedule.cooperative_fetch with a sampled
  vector width (1, 2 or 4 lanes), and postproc.RewriteCooperativeFetch fuses its loops, splits them
  by the thread count and binds them to threadIdx.x (vectorized where the width divides the copy)
  once the thread count is known.
The tiled block is annotated meta_schedule.tiling_structure (removed by the postprocessor). A
block whose tiling does not apply (no data reuse, non-trivial bindings) is left to AutoBind.
"""
from __future__ import annotations

from ...errors import ScheduleError
from .base import (
    ANN_COOP_FETCH,
    ANN_TILING,
    ScheduleRule,
    const_extent,
    needs_multi_level_tiling,
    node_of,
    trivial_binding_loops,
)
from .multi_level_tiling import MultiLevelTiling

STRUCTURE = "SSSRRSRS"
TILE_BINDS = ("blockIdx.x", "vthread.x", "threadIdx.x")


class MultiLevelTilingGPU(ScheduleRule):
    """See the module docstring. lanes: the cooperative-fetch vector widths sampled from."""

    name = "MultiLevelTilingGPU"
    SPATIAL_CAPS = (2, 4, 4)    # S1 (virtual threads), S3, S4: at most 32 outputs of a loop a thread
    REDUCE_CAPS = (4, 8)        # R1, R2: a shared-memory slice of at most 32 along a reduction loop

    def __init__(self, ctx, lanes=(1, 2, 4)):
        super().__init__(ctx)
        self.lanes = tuple(v for v in lanes if v <= ctx.lanes) or (1,)

    def apply(self, sch, block) -> list:
        idx, r = node_of(sch, block)
        if ANN_TILING in r.block.annotations or not needs_multi_level_tiling(r):
            return [sch]
        loops = trivial_binding_loops(idx, r)
        if loops is None or any(iv.iter_type not in ("data_par", "reduce") for iv in r.block.iter_vars):
            return [sch]
        out_buf = r.block.writes[0].buffer
        read_idx = [k for k, reg in enumerate(r.block.reads) if reg.buffer is not out_buf]
        new = sch.copy()
        try:
            levels = self._tile(new, block, loops, r)
            thread_loop = self._bind(new, levels)
            new.annotate(block, ANN_TILING, STRUCTURE)
            consumer = MultiLevelTiling._fusible_consumer(self, idx, r)
            acc = new.cache_write(block, 0, "local")
            new.reverse_compute_at(acc, thread_loop, preserve_unit_loops=True)
            if consumer is not None:
                self._fuse_consumer(new, acc, new.get_block(consumer), thread_loop)
            r0 = levels[STRUCTURE.index("R")]
            at = r0[-1] if r0 else thread_loop
            # a cache_read replaces its buffer in the block's reads in place: read_idx stays valid
            for k in read_idx:
                cache = new.cache_read(block, k, "shared")
                new.compute_at(cache, at, preserve_unit_loops=True)
                lanes = new.sample_categorical(list(self.lanes), [1.0 / len(self.lanes)] * len(self.lanes))
                new.annotate(cache, ANN_COOP_FETCH, lanes)
        except ScheduleError:
            return [sch]
        return [new]

    @staticmethod
    def _fuse_consumer(sch, acc, consumer, thread_loop):
        """The elementwise consumer computed by each thread right after its write-back, reading the
        local accumulator (the write-back inlined into it): one kernel, no global intermediate. Left
        a kernel of its own (AutoBind) where that does not apply."""
        trial = sch.copy()
        try:
            trial.reverse_compute_at(consumer, thread_loop, preserve_unit_loops=True)
            trial.compute_inline(acc)
        except ScheduleError:
            return
        sch.reverse_compute_at(consumer, thread_loop, preserve_unit_loops=True)
        sch.compute_inline(acc)

    def _tile(self, sch, block, loops, r):
        """Split and reorder into the structure's levels; the loop handles of each level."""
        kinds = [iv.iter_type for iv in r.block.iter_vars]
        rvs = sch.get_loops(block)
        levels = [[] for _ in STRUCTURE]
        s_pos = [k for k, c in enumerate(STRUCTURE) if c == "S"]
        r_pos = [k for k, c in enumerate(STRUCTURE) if c == "R"]
        tiled = sum(1 for lp, kind in zip(loops, kinds) if kind == "data_par" and (const_extent(lp) or 1) > 1)
        thread_cap = 1 << (self.ctx.max_threads_per_block.bit_length() - 1) // max(tiled, 1)
        for lp, rv, kind in zip(loops, rvs, kinds):
            pos = s_pos if kind == "data_par" else r_pos
            if const_extent(lp) is None:
                levels[pos[0]].append(rv)
                continue
            caps = self.spatial_caps(thread_cap) if kind == "data_par" else self.REDUCE_CAPS
            for p, part in zip(pos, self._split_inside_out(sch, rv, caps)):
                levels[p].append(part)
        sch.reorder(*[rv for level in levels for rv in level])
        return levels

    def spatial_caps(self, thread_cap: int) -> tuple:
        """The bounds of the S1..S4 factors of a spatial loop (S0 takes the rest)."""
        vthread, s3, s4 = self.SPATIAL_CAPS
        return (vthread, thread_cap, s3, s4)

    @staticmethod
    def _split_inside_out(sch, rv, caps) -> list:
        """rv split into len(caps) + 1 loops, the factors drawn innermost first, each at most its cap
        (the outermost takes the rest): the same loop nest one perfect tiling gives, bounded per level."""
        inner = []
        for cap in reversed(caps):
            factors = sch.sample_perfect_tile(rv, n=2, max_innermost_factor=cap)
            rv, part = sch.split(rv, factors=factors)
            inner.append(part)
        return [rv] + inner[::-1]

    @staticmethod
    def _bind(sch, levels):
        """Fuse and bind the first three spatial levels (TILE_BINDS); the threadIdx loop."""
        bound = None
        s_levels = [lv for lv, c in zip(levels, STRUCTURE) if c == "S"]
        for level, axis in zip(s_levels, TILE_BINDS):
            if not level:
                raise ScheduleError(f"MultiLevelTilingGPU: no spatial loop for {axis}")
            bound = sch.fuse(*level) if len(level) > 1 else level[0]
            sch.bind(bound, axis)
        return bound


__all__ = ["STRUCTURE", "TILE_BINDS", "MultiLevelTilingGPU"]
