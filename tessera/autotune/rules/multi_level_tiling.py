"""MultiLevelTiling: the "SSRSRS" tiling of reductions with data reuse for CPUs (MetaSchedule's
MultiLevelTiling), with write-cache placement.

Each constant spatial loop is tiled into 4 (sample_perfect_tile, innermost <= max_innermost_factor)
and each constant reduction loop into 2, ordered S0 S1 R0 S2 R1 S3; loops with a symbolic extent
are not tiled and lead their level (spatial first, reductions with R0). Then, as MetaSchedule's
reuse_write (levels 1 and 2):
- an elementwise consumer (the only consumer, reading the output at its own iterators) is fused:
  reverse_compute_at under the last loop of S0 or of S1 (one design space each);
- otherwise the untouched tiling is one design space, and a "local" write cache
  (cache_write, then reverse_compute_at at S0 or S1) two more.
The tiled block is annotated meta_schedule.tiling_structure (removed by the postprocessor).
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...tir.schedule.analysis import complete_or_reduction, consumers
from .base import (
    ANN_TILING,
    ScheduleRule,
    const_extent,
    elementwise_reads,
    is_spatial,
    needs_multi_level_tiling,
    node_of,
    trivial_binding_loops,
)


class MultiLevelTiling(ScheduleRule):
    """See the module docstring."""

    name = "MultiLevelTiling"

    def __init__(self, ctx, structure: str = "SSRSRS", levels=(1, 2), cache_scope: str = "local"):
        super().__init__(ctx)
        if set(structure) - {"S", "R"} or "S" not in structure:
            raise ScheduleError(f"MultiLevelTiling: structure {structure!r} must be made of S and R")
        self.structure = structure
        self.levels = tuple(levels)
        self.cache_scope = cache_scope

    def apply(self, sch, block) -> list:
        idx, r = node_of(sch, block)
        if ANN_TILING in r.block.annotations or not needs_multi_level_tiling(r):
            return [sch]
        loops = trivial_binding_loops(idx, r)
        if loops is None:
            return [sch]
        consumer = self._fusible_consumer(idx, r)
        tiled = sch.copy()
        tiles = self._tile(tiled, block, loops, r)
        if tiles is None:
            return [sch]
        tiled.annotate(block, ANN_TILING, self.structure)
        s_levels = [t for t, c in zip(tiles, self.structure) if c == "S"]
        out = [] if consumer is not None else [tiled]
        for level in self.levels:
            if level < 1 or level > len(s_levels) or not s_levels[level - 1]:
                continue
            at = s_levels[level - 1][-1]
            new = tiled.copy()
            try:
                if consumer is not None:
                    new.reverse_compute_at(new.get_block(consumer), at, preserve_unit_loops=True)
                else:
                    cache = new.cache_write(block, 0, self.cache_scope)
                    new.reverse_compute_at(cache, at, preserve_unit_loops=True)
            except ScheduleError:
                continue
            out.append(new)
        return out or [tiled]

    def _fusible_consumer(self, idx, r):
        cons = consumers(idx, r)
        if len(cons) != 1:
            return None
        c = cons[0]
        buf = r.block.writes[0].buffer
        if not is_spatial(c) or complete_or_reduction(idx, c) is not None or not elementwise_reads(c, buf):
            return None
        return c.block.name_hint

    def _tile(self, sch, block, loops, r):
        """Split and reorder; the loop handles of each level of the structure (None: nothing tiled)."""
        n_s = self.structure.count("S")
        n_r = self.structure.count("R")
        kinds = [iv.iter_type for iv in r.block.iter_vars]
        rvs = sch.get_loops(block)
        levels = [[] for _ in self.structure]
        s_pos = [k for k, c in enumerate(self.structure) if c == "S"]
        r_pos = [k for k, c in enumerate(self.structure) if c == "R"]
        any_tiled = False
        for lp, rv, kind in zip(loops, rvs, kinds):
            ext = const_extent(lp)
            pos = s_pos if kind == "data_par" else r_pos
            n = n_s if kind == "data_par" else n_r
            if kind not in ("data_par", "reduce"):
                return None
            if ext is None or n == 1:
                levels[pos[0]].append(rv)
                continue
            factors = sch.sample_perfect_tile(rv, n=n, max_innermost_factor=self.ctx.max_innermost_factor)
            parts = sch.split(rv, factors=factors)
            any_tiled = True
            for p, part in zip(pos, parts):
                levels[p].append(part)
        if not any_tiled:
            return None
        sch.reorder(*[rv for level in levels for rv in level])
        return levels


__all__ = ["MultiLevelTiling"]
