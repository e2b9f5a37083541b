"""Default CPU schedules of the nn ops (conv, matmul-like), built from the loop primitives.

Convolution, packed form (conv.py's `_conv_packed`, groups = 1): for every input channel, a row of
output-channel vectors is updated, the innermost loop being the vector of output channels:
(n, o_block, spatial..., rc, width, vector); (n, o_block) run in parallel when there is enough
work. Direct form (grouped, integer): every output row is accumulated in place, vector by vector,
while the loops over input channels and kernel taps run outside it (the output-width loop is
vectorized: split by the vector lanes when it divides, whole when it is short).

Matmul, float32 with tiles that fit (dense.py's gemm_tileable): the GotoBLAS loop structure around
the target's x86 GEMM micro-kernel (tensorize; C tile in registers for the whole k slice), the
tile with the most accumulators (tile_preference), B panels in parallel for transformer-sized M.
A symbolic row count (or column count, or K: dynamic batch and sequence axes) takes the same
micro-kernel: matmul_compute pads A's rows to a multiple of the tile's rows (and packs B in
zero-padded panels), so the tiles cover the padded extents exactly and a split needs no predicate;
with a static batch that feeds the threads (attention's heads) the pad and pack run per matrix inside
one parallel loop over the batch ("heads"), and the copies of such kernels run in parallel over rows
with a row's vectors inside (symbolic_rows), so no index divides by a symbolic extent per vector.
Otherwise (B row-major (K, N)): a (4 rows x 2 vectors) tile of C is updated for every (unrolled,
see dense.py's k_unroll) k step, columns vectorized, rows unrolled:
(batch, i_outer, j_outer, k, i_inner, j_inner). dense (weight (N, K)) and the
transposed operands of matmul/batch_matmul take the same tiling; their column loads are gathers,
which is why the ONNX converters hand constant weights to nn.matmul as (K, N).

The hand-picked constants of the matmul schedules are knobs (ScheduleContext.choose, named
gemm_tile, gemm_structure, gemm_kc, gemm_mc, gemm_parallel, gemv_chunks, loop_tj, loop_ti): the
default compile takes today's choice, the tuner samples the others, each a correct program.

Each step is tried on its own; a primitive that refuses (a non-constant extent, a loop shape it
does not take) leaves that step out, so a schedule only ever improves on the unscheduled kernel.
"""
from __future__ import annotations

import dataclasses

from ...errors import ScheduleError
from ...arith import Analyzer
from ...ir import expr as E
from .. import _schedule as S
from ...errors import TesseraError
from ...target import Target
from ...tir.tensor_intrin import x86
from ...tir.schedule import has_block


def _extent(sch, loop):
    ext = sch.get(loop).extent
    return ext.value if isinstance(ext, E.IntImm) else None


def _lanes(sch, block, target) -> int:
    blk = sch.get(block)
    bits = blk.writes[0].buffer.dtype.bits if blk.writes else 32
    return max(1, int(getattr(target, "vector_bits", 128)) // max(8, bits))


def _is_reduce(sch, block) -> bool:
    return any(iv.iter_type == "reduce" for iv in sch.get(block).iter_vars)


def _other_blocks(sch, ctx, done):
    """The op's remaining blocks (padding, casts, small statistics) get the generic schedule; a
    spatial block with a symbolic loop extent is scheduled as rows (symbolic_rows)."""
    root = sch.get_block("root")
    for block in sch.get_child_blocks(root):
        if sch.get(block).name_hint in done:
            continue
        try:
            if _is_reduce(sch, block):
                S.schedule_reduce_block(sch, block, ctx.target)
            elif _has_symbolic_loop(sch, block):
                symbolic_rows(sch, block, ctx.target)
            else:
                S.schedule_spatial_block(sch, block, ctx.target)
        except ScheduleError:
            continue


def _has_symbolic_loop(sch, block) -> bool:
    return any(_extent(sch, lp) is None for lp in sch.get_loops(block))


def symbolic_rows(sch, block, target, depth: int = 0) -> None:
    """A spatial block (a pad, a pack, a copy-out with its epilogue) of a kernel with symbolic
    extents, under `depth` outer loops: its innermost loop vectorized whole (whole vectors and a
    scalar rest, tir/transform/vectorize.py) and, at depth 0, the loops above it (or the leading
    ones _schedule.parallel_prefix picks) fused into one parallel loop of rows. The vectors of a
    row stay a serial loop inside: fused into the parallel loop as schedule_spatial_block does
    with static extents, they would pay the fused index's divisions by symbolic extents at every
    vector instead of once a row (at 2 threads such copies took longer than the GEMM around them)."""
    loops = sch.get_loops(block)[depth:]
    if not loops:
        return
    try:
        sch.vectorize(loops[-1])
    except ScheduleError:
        pass
    outer = S.parallel_prefix(sch, loops[:-1], target) if len(loops) > 1 else []
    if depth == 0 and outer and S.thread_count(target) > 1:
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])


def _anchor(sch, names):
    for name in names:
        try:
            return sch.get_block(name), name
        except ScheduleError:
            continue
    return None, None


def _vector_split(sch, loop, lanes, max_whole=64):
    """(outer loops, vector loop) of `loop`: split by lanes when they divide its extent, the whole
    loop when it is short, else no vector loop."""
    ext = _extent(sch, loop)
    if ext is None or lanes <= 1 or ext < 2:
        return [loop], None
    if ext % lanes == 0 and ext > lanes:
        outer, inner = sch.split(loop, factors=[None, lanes])
        return [outer], inner
    if ext <= max_whole:
        return [], loop
    return [loop], None


# ---------------------------------------------------------------------------------------------
# convolution
# ---------------------------------------------------------------------------------------------
def schedule_conv(sch, ctx):
    """Convolution: the packed form vectorizes its output-channel vector, the direct form its output
    rows (see module doc); padding, weight packing and unpacking get the generic schedule."""
    out = ctx.block
    done = set()
    for cand, fn in ((out + "c", _packed_block), (out + "_acc", _conv_block), (out, _conv_block)):
        try:
            b = sch.get_block(cand)
        except ScheduleError:
            continue
        if not _is_reduce(sch, b):
            continue
        try:
            fn(sch, b, ctx.target)
            done.add(cand)
        except ScheduleError:
            pass
        break
    _other_blocks(sch, ctx, done)


def _packed_block(sch, block, target):
    """(n, o_block, spatial..., rc, last spatial, channel vector): for every input channel a row of
    output-channel vectors is updated; the vector of weights stays in registers along the row."""
    blk = sch.get(block)
    loops = sch.get_loops(block)
    n_sp = sum(1 for iv in blk.iter_vars if iv.iter_type == "data_par")
    n, ob, *spatial = loops[:n_sp - 1]
    vec, reduce = loops[n_sp - 1], loops[n_sp:]
    if not spatial:
        return
    sch.reorder(n, ob, *spatial[:-1], *reduce, spatial[-1], vec)
    sch.vectorize(vec)
    obe = _extent(sch, ob)
    work = 1
    for lp in sch.get_loops(block):
        e = _extent(sch, lp)
        work *= e if e is not None else S.PARALLEL_MIN_WORK
    if S.thread_count(target) > 1 and work >= S.PARALLEL_MIN_WORK and obe is not None and obe >= 2:
        sch.parallel(sch.fuse(n, ob))


def _spatial_and_reduce_loops(sch, block):
    """(the block, its spatial loops, its reduction loops), each list outermost first."""
    blk = sch.get(block)
    loops = sch.get_loops(block)
    n_sp = sum(1 for iv in blk.iter_vars if iv.iter_type == "data_par")
    return blk, list(loops[:n_sp]), list(loops[n_sp:])


def _conv_block(sch, block, target):
    _, spatial, reduce = _spatial_and_reduce_loops(sch, block)
    if len(spatial) < 3 or not reduce:
        return
    outer_sp, width = spatial[:-1], spatial[-1]
    lanes = _lanes(sch, block, target)
    w_outer, vec = _vector_split(sch, width, lanes)
    order = outer_sp + reduce + w_outer + ([vec] if vec is not None else [])
    if vec is None:
        return  # nothing to vectorize: the unscheduled order (reductions innermost) is better
    sch.reorder(*order)
    sch.vectorize(vec)
    exts = [_extent(sch, lp) for lp in spatial[:2]]
    work = 1
    for lp in sch.get_loops(block):
        e = _extent(sch, lp)
        work *= e if e is not None else S.PARALLEL_MIN_WORK
    if S.thread_count(target) > 1 and work >= S.PARALLEL_MIN_WORK and None not in exts and exts[0] * exts[1] >= 2:
        sch.parallel(sch.fuse(spatial[0], spatial[1]))


# ---------------------------------------------------------------------------------------------
# matmul-like
# ---------------------------------------------------------------------------------------------
def schedule_matmul(sch, ctx):
    """(batch..., i_outer, j_outer, k, i_inner, j_inner): a tile of C per k step (see module doc).
    Its tunable decisions (micro-kernel tile, kc, mc, loop structure, parallel loop, gemv chunks,
    the loop schedule's tiles) are ctx.choose knobs whose defaults are the hand choices."""
    out = ctx.block
    block = None
    for cand in (out + "_acc", out):
        try:
            b = sch.get_block(cand)
        except ScheduleError:
            continue
        if _is_reduce(sch, b):
            block = (b, cand)
            break
    done = set()
    panel = (ctx.attrs or {}).get("b_panel") or None  # b pre-packed in panels of this width
    if block is not None:
        try:
            _matmul_block(sch, block[0], ctx, panel, done)
            done.add(block[1])
        except ScheduleError:
            pass
    _other_blocks(sch, ctx, done)


def _pick_tile(ext, candidates):
    for c in candidates:
        if ext is not None and ext % c == 0 and ext >= c:
            return c
    return None


def _divisor_at_most(n, limit, multiple_of=1):
    best = multiple_of
    for d in range(multiple_of, min(n, limit) + 1, multiple_of):
        if n % d == 0:
            best = d
    return best


def tile_preference(tile, lanes=8):
    """Sort key of fp32 GEMM micro-kernel tiles, best first: the most FMAs per load (a k step of
    an mr x nr tile with nr / lanes vectors: mr * nr / lanes FMAs for mr broadcasts of A and
    nr / lanes loads of B; on AVX2: 4x24 1.71, 6x16 1.5, 4x16 1.33, 14x8 0.93, 8x8 0.89), then the
    most accumulators."""
    mr, nr = tile
    nv = max(1, nr // lanes)
    return (-mr * nv / (mr + nv), -mr * nv)


def _divides(extent, d) -> bool:
    """Whether d divides a loop extent, a constant or a symbolic one (a row count padded to a
    multiple of d, dense.row_pad's ((M + 3) // 4) * 4, is)."""
    if isinstance(extent, E.IntImm):
        return extent.value % d == 0
    return Analyzer().can_prove(E.floormod(extent, d) == 0)


def _gemm_plan(sch, block, ctx, panel):
    """What the micro-kernel schedule needs, or None where it does not apply (module doc): the loops,
    the static extents M, N, K (None where symbolic: M and N must then be multiples of a tile, as
    dense.matmul_compute pads them), the intrinsic names of the tiles that divide the problem, in
    preference order (the default first)."""
    blk = sch.get(block)
    if str(blk.writes[0].buffer.dtype) != "float32":
        return None
    loops = sch.get_loops(block)
    n_sp = sum(1 for iv in blk.iter_vars if iv.iter_type == "data_par")
    if n_sp < 2 or len(loops) != n_sp + 1:
        return None
    *batch, i, j = loops[:n_sp]
    k = loops[n_sp]
    M_ext, N_ext = sch.get(i).extent, sch.get(j).extent
    M, N, K = _extent(sch, i), _extent(sch, j), _extent(sch, k)
    if panel is None and has_block(sch, "b_pack"):  # B packed in panels: the tile is one panel wide
        panel = _extent(sch, sch.get_loops(sch.get_block("b_pack"))[-1])
    try:
        target = Target(ctx.target)
    except TesseraError:  # no CPU target to ask for its micro-kernels
        return None
    names = []
    for isa, feats, lanes in (("avx512", x86.AVX512, 16), ("avx2", x86.AVX2, 8)):
        if not all(target.has_feature(f) for f in feats):
            continue
        for mr, nr in sorted(x86.FP32_GEMM[isa], key=lambda t, n=lanes: tile_preference(t, n)):
            if _divides(M_ext, mr) and _divides(N_ext, nr) and (panel is None or nr == panel):
                names.append(x86.fp32_gemm_name(isa, mr, nr))
    if not names:
        return None
    return batch, i, j, k, M, N, K, names


def _tensorized_matmul(sch, block, ctx, panel=None, placed=None) -> bool:
    """The GotoBLAS structure around an x86 GEMM micro-kernel (see tir/schedule/examples/gemm.py),
    the mr x nr x kc tile tensorized. M <= 256 (transformer activations) or symbolic: (batch, j_0,
    k_0, i_1 | i_2, j_1, k_1), batch and the B panels j_0 in parallel (each thread streams its own
    panels; A stays in L2). Symbolic with enough batch ("heads", _heads_matmul): the same per
    matrix, the batch in parallel, A's and B's copies made per matrix inside it (their block names
    added to `placed`). Larger M: (batch, k_0, i_0, j_0, i_1 | ...) with mc = 64 rows of A per
    block, i_0 in parallel. False (nothing changed) when the block is not the plain float32 form or
    the target has no kernel for a tile dividing it. Panels over constant weights packed ahead of
    time (`panel` given: pack_matmul_weights) of at least PREFETCH_BYTES, static extents: all M rows
    a call (the rows intrinsic, which prefetches the next block of B), and the fused epilogue per
    panel (_epilogue_at_panel); a B computed at run time (attention's K^T and V) is in cache
    already. Knobs: "gemm_tile" (among the tiles that divide M and N and fit the packed panel),
    "gemm_structure", "gemm_kc", "gemm_mc", "gemm_parallel"."""
    plan = _gemm_plan(sch, block, ctx, panel)
    if plan is None:
        return False
    batch, i, j, k, M, N, K, names = plan
    target = ctx.target
    name = ctx.choose(sch, "gemm_tile", names, names[0])
    isa, mr, nr = x86.fp32_gemm_parts(name)
    threads = S.thread_count(target)
    # row blocks need static extents (mc rows of A a block, a multiple of mr dividing M)
    static = None not in (M, N, K)
    structure = "panels" if not static or M <= 256 else "row_blocks"
    heads = not static and _heads_fit(sch, batch, threads)
    if heads:
        structure = "heads"
    structure = ctx.choose(sch, "gemm_structure", ["panels"] + (["row_blocks"] if static else [])
                           + (["heads"] if heads else []), structure)
    work = 1
    for e in (M, N, K):
        work *= e if e is not None else S.PARALLEL_MIN_WORK
    if structure == "heads":
        sch.tensorize(_heads_matmul(sch, batch, i, j, k, K, mr, nr, threads, ctx, placed), name)
        return True
    if structure == "panels":
        rows = _rows_a_call(M, N, K, mr, batch, sch) if panel is not None else None
        j0, i2 = _panel_loops(sch, batch, i, j, k, K, mr, nr, ctx, rows)
        if rows:
            name = x86.fp32_gemm_rows_name(isa, mr, nr, rows)
            _epilogue_at_panel(sch, ctx, j0, placed)
        outer = [*batch, j0]
        n_out = N // nr if N is not None else 2
        for b in batch:
            e = _extent(sch, b)
            n_out *= e if e is not None else 2
        par = "outer" if threads > 1 and n_out >= 2 and work >= S.PARALLEL_MIN_WORK else "none"
        par = ctx.choose(sch, "gemm_parallel", ["outer", "panels", "none"] if threads > 1 else ["none"], par)
        if par == "outer":
            sch.parallel(sch.fuse(*outer) if len(outer) > 1 else j0)
        elif par == "panels":
            sch.parallel(j0)
        sch.tensorize(i2, name)
        return True
    mc = ctx.choose(sch, "gemm_mc", sorted({_divisor_at_most(M, lim, mr) for lim in (mr, 32, 64, 128)}),
                    _divisor_at_most(M, 64, mr))
    kc = ctx.choose(sch, "gemm_kc", _kc_candidates(K), _divisor_at_most(K, 256))
    i0, i1, i2 = sch.split(i, [None, mc // mr, mr])
    j0, j1 = sch.split(j, [None, nr])
    k0, k1 = sch.split(k, [None, kc])
    sch.reorder(*batch, k0, i0, j0, i1, i2, j1, k1)
    par = "row_blocks" if threads > 1 and M // mc >= 2 else "none"
    par = ctx.choose(sch, "gemm_parallel", ["row_blocks", "panels", "none"] if threads > 1 else ["none"], par)
    if par == "row_blocks":
        sch.parallel(i0)
    elif par == "panels":
        sch.parallel(j0)
    sch.tensorize(i2, name)
    return True


# B blocks from this size up stream from memory (weights, not activations in cache): the call takes
# all rows, prefetching the next block while it computes this one (x86.fp32_gemm_rows_source).
PREFETCH_BYTES = 256 * 1024


def _rows_a_call(M, N, K, mr, batch, sch):
    """All M rows of C a call (the x86 rows intrinsic) where the extents are static, the rows at
    least two tiles, and B (all its matrices) at least PREFETCH_BYTES; else None (a call per tile)."""
    if None in (M, N, K) or M < 2 * mr or M % mr:
        return None
    matrices = 1
    for b in batch:
        e = _extent(sch, b)
        if e is None:
            return None
        matrices *= e
    return M if matrices * K * N * 4 >= PREFETCH_BYTES else None


def _epilogue_at_panel(sch, ctx, j0, placed):
    """The fused elementwise epilogue computed per B panel, right after the panel's columns of C
    are complete (they are still in cache), vectorized along the columns."""
    for name in ctx.epilogue or ():
        try:
            blk = sch.get_block(name)
            sch.reverse_compute_at(blk, j0)
        except ScheduleError:
            continue
        # (not _schedule's vectorize_inner_spatial: under j0 the column is j0 * nr + the loop)
        inner = sch.get_loops(blk)[-1]
        lanes = _lanes(sch, blk, ctx.target)
        ext = _extent(sch, inner)
        if ext is not None and lanes > 1 and ext % lanes == 0:
            _, ii = sch.split(inner, [None, lanes])
            sch.vectorize(ii)
        if placed is not None:
            placed.add(name)


def _panel_loops(sch, batch, i, j, k, K, mr, nr, ctx, rows=None):
    """The panel structure's loops (batch, j_0, k_0, i_1 | i_2, j_1, k_1), knob "gemm_kc" (a symbolic
    K: no k split, the micro-kernel takes the whole of it); with `rows` (all M rows a call, static
    extents: _rows_a_call): no i split, (batch, j_0, k_0 | i, j_1, k_1). Returns (j_0, the loop to
    tensorize)."""
    if rows:
        j0, j1 = sch.split(j, [None, nr])
        kc = ctx.choose(sch, "gemm_kc", _kc_candidates(K), _divisor_at_most(K, 384))
        k0, k1 = sch.split(k, [None, kc])
        sch.reorder(*batch, j0, k0, i, j1, k1)
        return j0, i
    i1, i2 = sch.split(i, [None, mr])
    j0, j1 = sch.split(j, [None, nr])
    if K is not None:
        kc = ctx.choose(sch, "gemm_kc", _kc_candidates(K), _divisor_at_most(K, 384))
        k0, k1 = sch.split(k, [None, kc])
        sch.reorder(*batch, j0, k0, i1, i2, j1, k1)
    else:
        sch.reorder(*batch, j0, i1, i2, j1, k)
    return j0, i2


_COPIES = ("b_pack", "a_pad")  # dense.matmul_compute's in-kernel copies of B and A (symbolic extents)


def _heads_fit(sch, batch, threads) -> bool:
    """Whether a matmul with symbolic extents takes the "heads" structure: it has batch loops whose
    static extents alone give every thread two or more matrices (attention's 12 heads a sequence
    on 2 threads; a weight matmul's batch of sequences, symbolic, does not)."""
    if not batch:
        return False
    static = 1
    for b in batch:
        e = _extent(sch, b)
        static *= e if e is not None else 1
    return static >= 2 * threads


def _heads_matmul(sch, batch, i, j, k, K, mr, nr, threads, ctx, placed=None):
    """The "heads" structure of a batched matmul with symbolic extents (attention's Q.K^T and P.V
    at a dynamic sequence length): one parallel loop over the batch (heads), each iteration padding
    its head's rows of A and packing its B (compute_at: a copy the size of one head, thread-local,
    still in L1/L2 when the micro-kernel reads it) and running (j_0, k_0, i_1 | i_2, j_1, k_1) over
    it. Returns the loop to tensorize. In one parallel loop per copy over everything instead, the
    copies' fused index divided by symbolic extents at every vector, and at 2 threads they took
    several times the GEMM."""
    _, i2 = _panel_loops(sch, batch, i, j, k, K, mr, nr, ctx)
    # the copies go under the innermost batch loop before the batch loops are fused: one head's
    # region each, with no predicate for a fused index's clipped domain
    for name in _COPIES:
        if not has_block(sch, name):
            continue
        copy = sch.get_block(name)
        try:
            sch.compute_at(copy, batch[-1])
        except ScheduleError:
            continue  # left at the root: _other_blocks schedules it as rows
        symbolic_rows(sch, copy, ctx.target, depth=len(batch))
        if placed is not None:
            placed.add(name)
    bh = sch.fuse(*batch) if len(batch) > 1 else batch[0]
    if threads > 1:
        sch.parallel(bh)
    return i2


def _kc_candidates(K):
    """kc (k per micro-kernel call) choices: divisors of K up to 512."""
    return sorted({_divisor_at_most(K, lim) for lim in (64, 128, 256, 384, 512)})


def gemv_chunks(vecs: int, threads: int) -> int:
    """Column chunks of a matrix-vector product on `threads` threads: a divisor of the vectors (at
    least 2 vectors a chunk) whose static share per thread is the most even, then the fewest (125
    vectors on 2 threads: 25 chunks, 13 and 12 a thread, not 5 chunks split 3 and 2)."""
    cands = [d for d in range(threads, vecs // 2 + 1) if vecs % d == 0] or [1]
    return min(cands, key=lambda d: (-(-d // threads) / d, d))


def gemv_lanes(n: int, lanes: int) -> int:
    """Vector lanes of a matrix-vector product's N = n columns: the widest power of two up to the
    target's lanes that divides n (1000 columns take 8-lane vectors on an AVX-512 target too), or 0
    when no vector of at least 4 lanes fits two or more times."""
    w = lanes
    while w >= 4 and (n % w or n < 2 * w):
        w //= 2
    return w if w >= 4 else 0


def _gemv_block(sch, block, ctx):
    """A matrix-vector product (one row of A, B row-major): (j chunk, k, j vectors, lanes), so every k
    step streams contiguous rows of B into a row of C held in L1 (the k-major order loads each cache
    line of B once); the chunks of columns run in parallel. Raises ScheduleError where it does not
    apply (M > 1, B not contiguous along j, N not a multiple of the lanes). Knob: "gemv_chunks" (a
    divisor of the vectors; 1: one thread)."""
    target = ctx.target
    blk, spatial, reduce = _spatial_and_reduce_loops(sch, block)
    if len(reduce) != 1 or not spatial:
        raise ScheduleError("gemv: not a one-reduction matmul block")
    j = spatial[-1]
    rows = [_extent(sch, lp) for lp in spatial[:-1]]
    N = _extent(sch, j)
    lanes = gemv_lanes(N, _lanes(sch, block, target)) if N is not None else 0
    jv = S.bound_iter_var(sch, block, j)
    if None in rows or any(r != 1 for r in rows[-1:]) or not lanes \
            or jv is None or not S.unit_stride_in_last_index(blk, jv.var):
        raise ScheduleError("gemv: not a one-row product with B contiguous along a multiple of the lanes")
    threads = S.thread_count(target)
    vecs = N // lanes
    K = _extent(sch, reduce[0]) or S.PARALLEL_MIN_WORK
    chunks = 1
    if threads > 1 and N * K >= S.PARALLEL_MIN_WORK:
        chunks = gemv_chunks(vecs, threads)
    if threads > 1:
        chunks = ctx.choose(sch, "gemv_chunks", [d for d in range(1, vecs + 1) if vecs % d == 0 and d <= 64],
                            chunks)
    # chunks in parallel: each accumulates its columns in a row of its own (local, on its thread's
    # stack) and copies it out once; in the shared row, the threads' neighbouring chunks would share
    # a cache line written at every k step (1x1280 @ 1280x1000 measured slower on 2 threads than on 1)
    local = sch.cache_write(block, 0, "local") if chunks > 1 else None
    jc, jo, ji = sch.split(j, factors=[chunks, vecs // chunks, lanes])
    sch.reorder(*spatial[:-1], jc, reduce[0], jo, ji)
    if local is not None:
        sch.reverse_compute_at(local, jc)
        sch.vectorize(sch.get_loops(local)[-1])
    init = sch.decompose_reduction(block, reduce[0])
    sch.vectorize(ji)
    sch.vectorize(sch.get_loops(init)[-1])
    if chunks > 1:
        sch.parallel(jc)


def _matmul_block(sch, block, ctx, panel=None, placed=None):
    # a dry run of the default choices on a copy first: the steps before tensorize must not stay if
    # it refuses (a tuner's other choices are then applied on the schedule itself)
    dry = dataclasses.replace(ctx, knobs=None)
    try:
        fits = _tensorized_matmul(sch.copy(), block, dry, panel)
    except ScheduleError:
        fits = False
    if fits:
        _tensorized_matmul(sch, block, ctx, panel, placed)
        return
    try:  # matrix-vector (M = 1): stream B's rows
        _gemv_block(sch.copy(), block, dry)
    except ScheduleError:
        pass
    else:
        _gemv_block(sch, block, ctx)
        return
    target = ctx.target
    _, spatial, reduce = _spatial_and_reduce_loops(sch, block)
    if len(reduce) != 1 or not spatial:
        return
    lanes = _lanes(sch, block, target)
    j = spatial[-1]
    j_ext = _extent(sch, j)
    tj = _pick_tile(j_ext, [2 * lanes, lanes])
    if tj is None:
        return
    tj = ctx.choose(sch, "loop_tj", [c for c in (lanes, 2 * lanes, 4 * lanes) if j_ext % c == 0], tj)
    jo, ji = sch.split(j, factors=[None, tj])
    rest = spatial[:-1]
    if rest:
        i = rest[-1]
        i_ext = _extent(sch, i)
        ti = _pick_tile(i_ext, [4, 2])
        if i_ext is not None:
            ti = ctx.choose(sch, "loop_ti", [c for c in (2, 4, 8) if i_ext % c == 0] + [None], ti)
        batch = rest[:-1]
        if ti is not None:
            io, ii = sch.split(i, factors=[None, ti])
            sch.reorder(*batch, io, jo, reduce[0], ii, ji)
            sch.unroll(ii)
            outer = batch + [io]
        else:
            sch.reorder(*batch, i, jo, reduce[0], ji)
            outer = batch + [i]
    else:
        sch.reorder(jo, reduce[0], ji)
        outer = [jo]
    sch.vectorize(ji)
    work = 1
    for lp in sch.get_loops(block):
        e = _extent(sch, lp)
        work *= e if e is not None else S.PARALLEL_MIN_WORK
    exts = [_extent(sch, lp) for lp in outer]
    if S.thread_count(target) > 1 and work >= S.PARALLEL_MIN_WORK and None not in exts:
        n_out = 1
        for e in exts:
            n_out *= e
        if n_out >= 2:
            sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
