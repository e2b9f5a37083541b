"""Default CPU schedules shared by the op families (any family may use them as its def_schedule).

`schedule_injective` / `schedule_reduce` schedule every block of the op's PrimFunc by its kind:
- a spatial block (elementwise, broadcast, data movement): the innermost loop is split by the
  target's vector lanes (vector_bits // dtype bits) and vectorized when its extent is a multiple
  of them, and vectorized as it is when its extent is symbolic (lowered to whole vectors and a
  scalar tail); the loops outside are fused and run in parallel when the block is large enough;
- a reduction block: when its innermost loop is a reduction along the contiguous axis of every
  load (a row sum, max, norm: static extent, a multiple of the vector lanes), the row is reduced
  into one vector of partial results (rfactor by the lanes, the partial block computed per row
  and vectorized, its accumulator a register-sized local) and the lanes are combined at the end;
  so float sums are taken in `lanes` interleaved partial sums, as numpy's pairwise sum also does.
  Otherwise the reduction stays inside, serial. The spatial loops are fused and run in parallel
  when there are enough output elements and work.
A block whose loops do not fit (a primitive refuses) is left as it is: the schedule only ever
improves on the unscheduled kernel.
"""
from __future__ import annotations

from ..errors import ScheduleError
from ..ir import expr as E
from ..arith import simplify
from ..ir import collect_vars, substitute
from ..tir.analysis import accesses
from ..tir.schedule.state import child_realizes

# a block annotation of an op's compute that is already in rfactor_lanes' form (softmax along a
# symbolic row: ops/nn/softmax.py): "partial" (a row's vector of partial results, the lanes its last
# spatial axis) or "combine" (the lanes and the row's tail reduced into one value, left scalar)
LANE_FORM = "rows.lane_form"

# below this many elements (spatial blocks) or scalar operations (reductions) a parallel loop
# costs more in thread start-up than it saves
PARALLEL_MIN_WORK = 1 << 15


def _extent(sch, loop):
    ext = sch.get(loop).extent
    return ext.value if isinstance(ext, E.IntImm) else None


def vectorize_short(sch, loop) -> None:
    """Vectorizes the loop when its extent is static and 2 to 64 (a vector's lanes); else leaves it."""
    e = _extent(sch, loop)
    if e is not None and 2 <= e <= 64:
        sch.vectorize(loop)


def vector_lanes(block, target) -> int:
    """Vector lanes of the target for the block's output dtype; the graph's fused kernels use it too."""
    bits = 32
    if block.writes:
        bits = max(8, block.writes[0].buffer.dtype.bits)
    return max(1, int(getattr(target, "vector_bits", 128)) // bits)


def thread_count(target) -> int:
    """The target's thread count (1 when it has none); every CPU schedule asks it."""
    try:
        return int(target.num_threads)
    except (AttributeError, TypeError, ValueError):
        return 1


def _work(extents) -> float:
    n = 1
    for e in extents:
        n *= e if e is not None else PARALLEL_MIN_WORK  # a symbolic extent counts as large
    return n


def parallel_prefix(sch, loops, target) -> list:
    """The leading loops of `loops` (a block's row loops, outermost first) to fuse into its one
    parallel loop: all of them when every extent is static. With a symbolic extent: the first loop
    and the static loops right after it, when their static extents alone give every thread two or
    more iterations with at most a quarter of a round idle (attention's heads of a dynamic batch);
    else all of them. The fused index then divides by constants only: a symbolic extent after the
    first loop costs a division by it at every use of the row's index in the body (a softmax row of
    128 took 1.7x as long with (batch, heads, rows) fused as with (batch, heads))."""
    exts = [_extent(sch, lp) for lp in loops]
    if None not in exts or len(loops) < 2:
        return list(loops)
    prefix, static = [loops[0]], exts[0] or 1
    for lp, e in zip(loops[1:], exts[1:]):
        if e is None:
            break
        prefix.append(lp)
        static *= e
    threads = thread_count(target)
    if static >= 2 * threads and -(-static // threads) * threads <= 1.25 * static:
        return prefix
    return list(loops)


def _parallel(sch, loops, work, target):
    """Fuse `loops` and run them in parallel when there is enough work for the threads."""
    if not loops or thread_count(target) < 2 or work < PARALLEL_MIN_WORK:
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
    lanes = vector_lanes(blk, target)
    outer = list(loops[:-1])
    inner, ext = loops[-1], exts[-1]
    if ext is not None and lanes > 1 and ext >= lanes and ext % lanes == 0:
        io, ii = sch.split(inner, factors=[None, lanes])
        sch.vectorize(ii)
        if None not in exts:
            # (with a symbolic extent the vectors of a row stay a serial loop inside the parallel
            # one: fused into it, its index would divide by the symbolic extent at every vector)
            outer.append(io)
    elif ext is not None and 1 < ext <= lanes and ext in (2, 4, 8, 16):
        sch.vectorize(inner)
    elif ext is None and lanes > 1:  # symbolic: lowered to whole vectors and a scalar tail
        sch.vectorize(inner)
    _parallel(sch, parallel_prefix(sch, outer, target) if outer else outer, _work(exts), target)


def unit_stride_in_last_index(blk, var) -> bool:
    """Every load of the block's body (not its init) uses var only in its last index, as `... + var`
    (so lanes of var read consecutive elements), and some load uses it."""
    used = False
    for kind, _, indices in accesses(blk.body):
        if kind != "read" or not indices:
            continue
        if any(var in set(collect_vars(i)) for i in indices[:-1]):
            return False
        last = indices[-1]
        if var in set(collect_vars(last)):
            step = simplify(substitute(last, {var: var + 1}) - last)
            if not (isinstance(step, E.IntImm) and step.value == 1):
                return False
            used = True
    return used


def rfactor_lanes(sch, block, target):
    """Split the innermost loop of a reduction block by the vector lanes and rfactor the lanes
    out: (the partial block `<name>_rf`, the write-back block `<name>`), both where the block was.
    Raises ScheduleError where the loop is not a reduction along the contiguous axis of every load
    with a static extent that the lanes divide."""
    blk = sch.get(block)
    loops = sch.get_loops(block)
    name = blk.name_hint
    if not loops or len(blk.writes) != 1:
        raise ScheduleError(f"rfactor_lanes: block {name!r} writes {len(blk.writes)} buffers")
    inner = loops[-1]
    ext = _extent(sch, inner)
    lanes = vector_lanes(blk, target)
    if ext is None or lanes < 2 or ext % lanes:
        raise ScheduleError(f"rfactor_lanes: the innermost loop of {name!r} is not a static multiple of "
                            f"{lanes} lanes")
    bound = bound_iter_var(sch, block, inner)
    if bound is None or bound.iter_type != "reduce" or not unit_stride_in_last_index(blk, bound.var):
        raise ScheduleError(f"rfactor_lanes: the innermost loop of {name!r} is not a reduction along the "
                            f"contiguous axis of its loads")
    _, ki = sch.split(inner, factors=[None, lanes])
    rf = sch.rfactor(ki, len(blk.writes[0].buffer.shape))
    return rf, sch.get_block(name)


def vectorize_partial(sch, rf, depth: int, lane: int = 0):
    """The partial block of rfactor_lanes placed under `depth` loops: its lane loop innermost, its
    init decomposed out of the reduction loops, both vectorized (the accumulator is one vector).
    lane: the index of the lane iterator among the block's (rfactor puts the factored axis first)."""
    blk = sch.get(rf)
    lane_var = blk.iter_vars[lane]
    loops = sch.get_loops(rf)
    below = loops[depth:]
    lane = [lp for lp in below if bound_iter_var(sch, rf, lp) is lane_var]
    if len(lane) != 1 or len(below) < 2:
        raise ScheduleError(f"vectorize_partial: block {blk.name_hint!r} has no lane loop below depth {depth}")
    sch.reorder(*[lp for lp in below if lp is not lane[0]], lane[0])
    init = sch.decompose_reduction(rf, sch.get_loops(rf)[depth])
    sch.vectorize(sch.get_loops(rf)[-1])
    sch.vectorize(sch.get_loops(init)[-1])


def vectorize_inner_reduction(sch, block, target):
    """Reduce the innermost (contiguous) reduction loop of `block` into one vector of partial
    results per output element (see the module doc). Returns the write-back block (the block's
    name) on success; raises ScheduleError (the schedule unchanged) where it does not apply."""
    name = sch.get(block).name_hint
    for s in (sch.copy(), sch):  # a dry run first: the schedule changes only if every step applies
        rf, wb = rfactor_lanes(s, s.get_block(name), target)
        depth = len(s.get_loops(wb)) - 1  # the write-back's loops: spatial..., lanes
        if depth:
            s.compute_at(rf, s.get_loops(wb)[depth - 1])
        vectorize_partial(s, rf, depth)
    return sch.get_block(name)


def _vectorize_inner_spatial(sch, block, depth, target):
    """Split the innermost loop below `depth` by the lanes and vectorize it (when they divide it)."""
    loops = sch.get_loops(block)
    if len(loops) <= depth:
        return
    inner = loops[-1]
    ext = _extent(sch, inner)
    lanes = vector_lanes(sch.get(block), target)
    if bound_iter_var(sch, block, inner) is None or any(
            iv.iter_type == "reduce" for iv in sch.get(block).iter_vars):
        return
    if ext is not None and lanes > 1 and ext % lanes == 0 and ext >= lanes:
        if ext > lanes:
            inner = sch.split(inner, factors=[None, lanes])[1]
        sch.vectorize(inner)
    elif ext is None and lanes > 1:  # symbolic: lowered to whole vectors and a scalar tail
        sch.vectorize(inner)


def schedule_rows(sch, target, out: str, depth: int, ctx=None) -> None:
    """An op whose blocks all work row by row (softmax: max, exp, sum, divide; layer norm: the
    statistics, then the normalization): every block is computed inside the first `depth` loops
    of the output block `out`, so a row's intermediates stay in L1 (per-row locals), the inner
    reductions use vector partial results (rfactor_lanes), the spatial rows are vectorized, and
    the fused row loops run in parallel. Raises ScheduleError (the schedule unchanged) when a step
    does not apply. ctx: the op's ScheduleContext, whose knobs (while tuned) may turn the vector
    partial results and the parallel rows off."""
    partials, parallel = True, True
    if ctx is not None:
        partials = ctx.choose(sch, "rows.vector_partials", [False], True)
        parallel = ctx.choose(sch, "rows.parallel", [False], True)
    for s in (sch.copy(), sch):  # a dry run first
        names = [s.get(b).name_hint for b in _blocks(s)]
        if out not in names or depth < 1:
            raise ScheduleError(f"schedule_rows: no block {out!r} or no row loop (depth {depth})")
        rows = [_extent(s, lp) for lp in s.get_loops(s.get_block(out))[:depth]]
        work = _work([_extent(s, lp) for lp in s.get_loops(s.get_block(out))])
        partial, lane_form = [], {}
        for name in names:
            b = s.get_block(name)
            form = s.get(b).annotations.get(LANE_FORM)
            if form is not None:    # already in the lane form: no rfactor
                lane_form[name] = form
                continue
            if partials and any(iv.iter_type == "reduce" for iv in s.get(b).iter_vars):
                try:
                    rf, _ = rfactor_lanes(s, b, target)
                    partial.append(s.get(rf).name_hint)
                except ScheduleError:
                    pass
        order = [s.get(b).name_hint for b in _blocks(s)]
        for name in reversed(order[:order.index(out)]):
            s.compute_at(s.get_block(name), s.get_loops(s.get_block(out))[depth - 1])
        for name in order:
            if name in partial:
                vectorize_partial(s, s.get_block(name), depth)
            elif name in lane_form:
                if partials and lane_form[name] == "partial":
                    iters = s.get(s.get_block(name)).iter_vars
                    lane = max(k for k, iv in enumerate(iters) if iv.iter_type == "data_par")
                    vectorize_partial(s, s.get_block(name), depth, lane)
            else:
                _vectorize_inner_spatial(s, s.get_block(name), depth, target)
        row_loops = parallel_prefix(s, s.get_loops(s.get_block(out))[:depth], target)
        if parallel and thread_count(target) > 1 and work >= PARALLEL_MIN_WORK and _work(rows) >= 2:
            s.parallel(s.fuse(*row_loops) if len(row_loops) > 1 else row_loops[0])


def bound_iter_var(sch, block, loop):
    """The block iterator whose binding is exactly the loop's variable (None if there is none)."""
    var = sch.get(loop).loop_var
    realize = _realize_of(sch, block)
    for iv, v in zip(realize.block.iter_vars, realize.iter_values):
        if v is var:
            return iv
    return None


def _realize_of(sch, block):
    blk = sch.get(block)
    loops = sch.get_loops(block)
    scope = sch.get(loops[-1]).body
    for r in child_realizes(scope):
        if r.block is blk:
            return r
    raise ScheduleError(f"block {blk.name_hint!r} is not directly under its innermost loop")


def schedule_reduce_block(sch, block, target) -> None:
    """Vectorize an inner contiguous reduction (vectorize_inner_reduction) and parallelize the fused
    spatial loops of a reduction block."""
    work = _work([_extent(sch, lp) for lp in sch.get_loops(block)])
    try:
        block = vectorize_inner_reduction(sch, block, target)
    except ScheduleError:
        pass
    blk = sch.get(block)
    loops = sch.get_loops(block)
    n_spatial = sum(1 for iv in blk.iter_vars if iv.iter_type == "data_par")
    spatial = list(loops[:n_spatial])
    if not spatial:
        return
    exts = [_extent(sch, lp) for lp in loops]
    n_out = _work(exts[:n_spatial])
    if n_out < thread_count(target):
        return
    _parallel(sch, spatial, work, target)


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
           "schedule_reduce_block", "schedule_rows", "rfactor_lanes", "vectorize_partial",
           "vectorize_inner_reduction", "PARALLEL_MIN_WORK", "LANE_FORM"]
