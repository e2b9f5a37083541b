"""The default GPU schedule of a whole kernel (an op or a fused group; docs/gpu.md): injective
intermediate blocks are inlined into their consumers (an elementwise chain becomes one kernel),
then every block is bound by auto_bind (one thread per output element, blocks of up to
`max-threads-per-block` threads, 256 by default). A block that cannot be inlined (a reduction, a
producer read by a reduction through a window) stays its own kernel over a global workspace.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...target import Target
from .auto_bind import auto_bind

DEFAULT_THREADS = 256


def threads_per_block(target) -> int:
    """The work-group size the default schedules use: the target's -max-threads-per-block, at most 256."""
    limit = Target(target).attrs.get("max-threads-per-block")
    return min(DEFAULT_THREADS, int(limit)) if limit else DEFAULT_THREADS


def schedule_gpu_default(sch, target):
    """Inline what can be inlined, then bind every block to blockIdx.x / threadIdx.x; returns sch."""
    changed = True
    while changed:
        changed = False
        root = sch.get_block("root")
        for block in reversed(sch.get_child_blocks(root)):
            try:
                sch.compute_inline(block)
                changed = True
                break
            except ScheduleError:
                continue
    return auto_bind(sch, threads_per_block(target))
