"""auto_bind: the fallback GPU schedule (TVM's AutoBind / DefaultGPUSchedule): every block that no
loop of which is bound gets its leading data-parallel loops fused and split into
(blockIdx.x, threadIdx.x), so each thread computes one output element (its reductions run serially
in that thread). Blocks stay separate kernels; intermediates live in global memory between them.
A block with no data-parallel loop (a reduction to a scalar) gets none of its own and is refused
by the GPU backend by name.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir import ForKind, IntImm
from ...tir.schedule.analysis import check_parallelizable


def auto_bind(sch, max_threads_per_block: int = 256):
    """Bind the unbound blocks of sch's function (see the module docstring); returns sch."""
    root = sch.get_block("root") if _has_root(sch) else None
    blocks = sch.get_child_blocks(root) if root is not None else []
    for block in blocks:
        loops = sch.get_loops(block)
        nodes = [sch.get(lp) for lp in loops]
        if any(n.kind == ForKind.THREAD_BINDING for n in nodes):
            continue
        spatial = []
        for lp, n in zip(loops, nodes):
            try:
                check_parallelizable(n, "auto_bind", "bound")
            except ScheduleError:
                break
            spatial.append(lp)
        if not spatial:
            continue
        fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        ext = sch.get(fused).extent
        threads = max_threads_per_block
        if isinstance(ext, IntImm):
            threads = max(1, min(threads, ext.value))
        bx, tx = sch.split(fused, [None, threads])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")
    return sch


def _has_root(sch) -> bool:
    try:
        sch.get_block("root")
        return True
    except ScheduleError:
        return False
