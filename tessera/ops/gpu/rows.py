"""Row kernels for GPUs: an elementwise output over rows that reads reductions of the same rows
(softmax: max and sum of exp; layer norm: mean and variance) as one kernel, one block of threads a
row. The reductions are computed at the row's loop, their reduction loops shared by the block's
threads (lower_cross_thread_reduction: warp shuffles on CUDA, a shared-memory tree on OpenCL), so a row is read from global memory
by the block that normalizes it and no per-row statistic goes through global memory.

    sch = tir.Schedule(func); schedule_rows_gpu(sch, sch.get_block("softmax"), threads=128)
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir import IntImm


def row_reductions(sch, out):
    """The reduction blocks `out` reads that reduce its own rows (loops: the rows, then one
    reduction loop as long as out's last loop), or None where out is not such an output."""
    b = sch.get(out)
    loops = [sch.get(lp) for lp in sch.get_loops(out)]
    if len(loops) < 2 or any(iv.iter_type != "data_par" for iv in b.iter_vars) or b.init is not None \
            or any(type(lp.extent) is not IntImm for lp in loops):
        return None
    cols = loops[-1].extent.value
    found = []
    for p in sch.get_producers(out):
        pb = sch.get(p)
        kinds = [iv.iter_type for iv in pb.iter_vars]
        if pb.init is None or kinds[-1] != "reduce" or "reduce" in kinds[:-1]:
            return None
        rl = sch.get(sch.get_loops(p)[-1]).extent
        if type(rl) is not IntImm or rl.value != cols:
            return None
        found.append(p)
    return found or None


def schedule_rows_gpu(sch, out, threads: int):
    """Schedule `out` and the row reductions it reads (row_reductions) as one kernel (module
    docstring), `threads` threads a row; returns sch."""
    reds = row_reductions(sch, out)
    if reds is None:
        raise ScheduleError(f"schedule_rows_gpu: block {sch.get(out).name_hint!r} does not read reductions of its "
                            f"own rows")
    *rows, col = sch.get_loops(out)
    row = sch.fuse(*rows) if len(rows) > 1 else rows[0]
    sch.bind(row, "blockIdx.x")
    _, ci = sch.split(col, [None, threads])
    sch.bind(ci, "threadIdx.x")
    # consumers first: a reduction read by another (layer norm's variance reads the mean) goes above it
    order = list(reversed(reds))
    done = 0
    while order and done < 4 * len(reds):
        done += 1
        r = order.pop(0)
        try:
            sch.compute_at(r, row)
        except ScheduleError:
            order.append(r)         # its consumer among the reductions is not placed yet
            continue
        sch.set_scope(r, 0, "shared")      # the row's statistic: one value the block's threads read
        k = sch.get_loops(r)[-1]
        ko, ki = sch.split(k, [None, threads])
        sch.reorder(ki, ko)
        sch.bind(ki, "threadIdx.x")
    if order:
        raise ScheduleError(f"schedule_rows_gpu: the reductions of {sch.get(out).name_hint!r} could not be placed "
                            f"at its row loop")
    return sch


__all__ = ["row_reductions", "schedule_rows_gpu"]
