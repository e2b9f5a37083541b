"""Default CPU schedules shared by the op families (any family may use them as its def_schedule).

`schedule_injective` / `schedule_reduce` schedule every block of the op's PrimFunc by its kind:
- a spatial block (elementwise, broadcast, data movement): the innermost loop is split by the
  target's vector lanes (vector_bits // dtype bits) and vectorized when its extent is a multiple
  of them; the loops outside are fused and run in parallel when the block is large enough;
- a reduction block: its spatial loops are fused and run in parallel when there are enough output
  elements and work; the reduction stays inside, serial (float sums keep their order).
A block whose loops do not fit (a primitive refuses) is left as it is: the schedule only ever
improves on the unscheduled kernel.
"""
from __future__ import annotations

from ..errors import ScheduleError
from ..ir import expr as E

# below this many elements (spatial blocks) or scalar operations (reductions) a parallel loop
# costs more in thread start-up than it saves
PARALLEL_MIN_WORK = 1 << 15


def _extent(sch, loop):
    ext = sch.get(loop).extent
    return ext.value if isinstance(ext, E.IntImm) else None


def _lanes(block, target) -> int:
    bits = 32
    if block.writes:
        bits = max(8, block.writes[0].buffer.dtype.bits)
    return max(1, int(getattr(target, "vector_bits", 128)) // bits)


def _threads(target) -> int:
    try:
        return int(target.num_threads)
    except (AttributeError, TypeError, ValueError):
        return 1


def _work(extents) -> float:
    n = 1
    for e in extents:
        n *= e if e is not None else PARALLEL_MIN_WORK  # a symbolic extent counts as large
    return n


def _parallel(sch, loops, work, target):
    """Fuse `loops` and run them in parallel when there is enough work for the threads."""
    if not loops or _threads(target) < 2 or work < PARALLEL_MIN_WORK:
        return
    outer = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    sch.parallel(outer)


def schedule_spatial_block(sch, block, target) -> None:
    """Vectorize the innermost loop by the vector lanes, parallelize the fused outer loops."""
    blk = sch.get(block)
    loops = sch.get_loops(block)
    if not loops:
        return
    exts = [_extent(sch, lp) for lp in loops]
    lanes = _lanes(blk, target)
    outer = list(loops[:-1])
    inner, ext = loops[-1], exts[-1]
    if ext is not None and lanes > 1 and ext >= lanes and ext % lanes == 0:
        io, ii = sch.split(inner, factors=[None, lanes])
        sch.vectorize(ii)
        outer.append(io)
    elif ext is not None and 1 < ext <= lanes and ext in (2, 4, 8, 16):
        sch.vectorize(inner)
    _parallel(sch, outer, _work(exts), target)


def schedule_reduce_block(sch, block, target) -> None:
    """Parallelize the fused spatial loops of a reduction block; the reduction stays inside."""
    blk = sch.get(block)
    loops = sch.get_loops(block)
    n_spatial = sum(1 for iv in blk.iter_vars if iv.iter_type == "data_par")
    spatial = list(loops[:n_spatial])
    if not spatial:
        return
    exts = [_extent(sch, lp) for lp in loops]
    n_out = _work(exts[:n_spatial])
    if n_out < _threads(target):
        return
    _parallel(sch, spatial, _work(exts), target)


def _blocks(sch):
    root = sch.get_block("root")
    return sch.get_child_blocks(root)


def schedule_blocks(sch, ctx) -> None:
    """Schedule every block of the op's function by its kind (spatial or reduction)."""
    target = ctx.target
    for block in _blocks(sch):
        blk = sch.get(block)
        is_reduce = any(iv.iter_type == "reduce" for iv in blk.iter_vars)
        try:
            if is_reduce:
                schedule_reduce_block(sch, block, target)
            else:
                schedule_spatial_block(sch, block, target)
        except ScheduleError:
            continue  # this block stays as it was (each primitive is all-or-nothing)


schedule_injective = schedule_blocks
schedule_reduce = schedule_blocks

__all__ = ["schedule_injective", "schedule_reduce", "schedule_blocks", "schedule_spatial_block",
           "schedule_reduce_block", "PARALLEL_MIN_WORK"]
