"""TensorCoreGEMM: a float16 GEMM block (accumulated in float32) onto CUDA's tensor cores, one design
space per block-tile shape (MetaSchedule's MultiLevelTilingTensorCore, with the block-level
intrinsic of tir/tensor_intrin/cuda_gemm.py as the tile: ops/gpu/tensorcore.py's schedule).

For a CUDA target for sm_80 or newer, every shape of `tile_space(M, N, K)` that the GEMM's extents
fit is its own design space (the shape fixes the intrinsic a space tensorizes with, so it is a
space, not a sampled decision a mutation could change under a fixed tensorize); the block is also
left as it was for the other rules (MultiLevelTilingGPU's FFMA tiling).
"""
from __future__ import annotations

from ...errors import ScheduleError, TesseraError
from ...ops.gpu.tensorcore import fits, schedule_gemm_tensorcore, tile_space
from ...target import Target
from .base import ANN_TILING, ScheduleRule, const_extent, node_of, trivial_binding_loops


def _arch(target) -> int:
    arch = Target(target).attrs.get("arch", "sm_90")
    digits = "".join(ch for ch in arch if ch.isdigit())
    return int(digits) if digits else 0


class TensorCoreGEMM(ScheduleRule):
    """See the module docstring."""

    name = "TensorCoreGEMM"

    def apply(self, sch, block) -> list:
        t = self.ctx.target
        if t.kind != "cuda" or _arch(t) < 80:
            return [sch]
        idx, r = node_of(sch, block)
        b = r.block
        if ANN_TILING in b.annotations or b.init is None or len(b.writes) != 1 \
                or str(b.writes[0].buffer.dtype) != "float32" \
                or any(str(x.buffer.dtype) != "float16" for x in b.reads if x.buffer is not b.writes[0].buffer):
            return [sch]
        loops = trivial_binding_loops(idx, r)
        if loops is None or len(loops) < 3:
            return [sch]
        ext = [const_extent(lp) for lp in loops[-3:]]
        if any(e is None for e in ext):
            return [sch]
        out = []
        for tile in tile_space(*ext):
            if not fits(*ext, tile):
                continue
            new = sch.copy()
            try:
                schedule_gemm_tensorcore(new, block, *tile)
            except (ScheduleError, TesseraError):
                continue
            out.append(new)
        return out + [sch]


__all__ = ["TensorCoreGEMM"]
