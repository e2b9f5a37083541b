"""The default GPU schedule of a whole kernel (an op or a fused group; docs/gpu.md): injective
intermediate blocks are inlined into their consumers (an elementwise chain becomes one kernel),
a (batched) GEMM block of float16 inputs accumulated in float32 goes onto the tensor cores on a
CUDA target for sm_80 or newer (ops/gpu/tensorcore.py) where its extents fit the tiles, any other
is tiled through shared memory with register accumulators (ops/gpu/gemm.py: dense, matmul, batch
matmul), a reduction with few outputs and long rows (softmax,
layer norm, a matrix-vector product) gets a block of threads per output sharing its reduction
through warp shuffles (CUDA) or a shared-memory tree, and every other block is bound by auto_bind (one
thread per output element, blocks of up to `max-threads-per-block` threads, 256 by default). A block that cannot be inlined (a reduction, a
producer read by a reduction through a window) stays its own kernel over a global workspace.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir import IntImm
from ...target import Target
from .auto_bind import auto_bind
from .conv import schedule_conv2d_gpu
from .gemm import schedule_gemm_gpu
from .rows import row_reductions, schedule_rows_gpu
from .tensorcore import default_tile, schedule_gemm_tensorcore

DEFAULT_THREADS = 256


def threads_per_block(target) -> int:
    """The work-group size the default schedules use: the target's -max-threads-per-block, at most 256."""
    limit = Target(target).attrs.get("max-threads-per-block")
    return min(DEFAULT_THREADS, int(limit)) if limit else DEFAULT_THREADS


def _gemm_tiles(sch, block):
    """Tile sizes for schedule_gemm_gpu when block is a (batched) GEMM worth tiling, else None:
    data-parallel loops then one reduction loop, each loop one iterator, static extents, and
    M, N >= 16, K >= 8."""
    b = sch.get(block)
    loops = [sch.get(lp) for lp in sch.get_loops(block)]
    kinds = [iv.iter_type for iv in b.iter_vars]
    if len(loops) != len(kinds) or len(loops) < 3 or kinds[-1] != "reduce" or "reduce" in kinds[:-1]:
        return None
    if b.init is None or len(b.writes) != 1 or any(type(lp.extent) is not IntImm for lp in loops):
        return None
    m, n, k = (lp.extent.value for lp in loops[-3:])
    if m < 16 or n < 16 or k < 8:
        return None
    tm = 64 if m >= 64 else 16
    tn = 64 if n >= 64 else 16
    return dict(tile_m=tm, tile_n=tn, tile_k=8, thread_m=tm // 16, thread_n=tn // 16)


def _tensor_core_tile(sch, block, target):
    """The tensor-core tile (ops/gpu/tensorcore.py) for a GEMM block of float16 inputs and a float32
    output on a CUDA target for sm_80 or newer, or None."""
    t = Target(target)
    arch = t.attrs.get("arch", "sm_90")
    if t.kind != "cuda" or int("".join(ch for ch in arch if ch.isdigit()) or 0) < 80:
        return None
    b = sch.get(block)
    if len(b.writes) != 1 or str(b.writes[0].buffer.dtype) != "float32" or len(b.reads) < 2 \
            or any(str(r.buffer.dtype) != "float16" for r in b.reads if r.buffer is not b.writes[0].buffer):
        return None
    loops = [sch.get(lp) for lp in sch.get_loops(block)]
    if len(loops) < 3 or any(type(lp.extent) is not IntImm for lp in loops):
        return None
    m, n, k = (lp.extent.value for lp in loops[-3:])
    return default_tile(m, n, k)


def _row_reduction(sch, block):
    """Threads for a cross-thread reduction of block (a power of two <= 256), or None: one
    reduction loop, innermost, static, >= 64 long, under fewer than 16384 outputs (few outputs,
    long rows: softmax, layer norm, a matrix-vector product)."""
    b = sch.get(block)
    loops = [sch.get(lp) for lp in sch.get_loops(block)]
    kinds = [iv.iter_type for iv in b.iter_vars]
    if len(loops) != len(kinds) or not loops or kinds[-1] != "reduce" or "reduce" in kinds[:-1]:
        return None
    if b.init is None or len(b.writes) != 1 or any(type(lp.extent) is not IntImm for lp in loops):
        return None
    rows = 1
    for lp in loops[:-1]:
        rows *= lp.extent.value
    r = loops[-1].extent.value
    if r < 64 or rows >= 16384:
        return None
    t = 32
    while t * 2 <= min(r, DEFAULT_THREADS):
        t *= 2
    return t


def schedule_row_reduction(sch, block, threads):
    """One block of `threads` threads per output element, which share its reduction (a
    shared-memory tree or CUDA's warp shuffles, tir.transform.lower_cross_thread_reduction)."""
    *spatial, k = sch.get_loops(block)
    ko, ki = sch.split(k, [None, threads])
    sch.reorder(ki, ko)
    if spatial:
        sch.bind(sch.fuse(*spatial) if len(spatial) > 1 else spatial[0], "blockIdx.x")
    sch.bind(ki, "threadIdx.x")
    return sch


def _row_threads(cols: int) -> int:
    """Threads sharing a row of `cols` elements: a power of two from 32 to 256, about a quarter of
    the row (each thread reads a few elements of it per pass)."""
    t = 32
    while t * 2 <= min(256, max(32, cols // 4)):
        t *= 2
    return t


def _bound(sch, block) -> bool:
    """Whether a loop around block is already bound to a thread axis (scheduled as part of a kernel)."""
    return any(sch.get(lp).thread_binding is not None for lp in sch.get_loops(block))


def _is_conv(sch, block) -> bool:
    """Whether block is a direct 2-d convolution (ops/gpu/conv.py): loops n, oc, oh, ow, rc, ry, rx
    with static extents, an init and one output."""
    b = sch.get(block)
    loops = [sch.get(lp) for lp in sch.get_loops(block)]
    kinds = [iv.iter_type for iv in b.iter_vars]
    return (len(loops) == 7 and kinds == ["data_par"] * 4 + ["reduce"] * 3 and b.init is not None
            and len(b.writes) == 1 and all(type(lp.extent) is IntImm for lp in loops))


def _conv_pads(sch) -> set:
    """Names of the padding stages the convolutions read (kept for conv.py to compute in its copy)."""
    out = set()
    for block in sch.get_child_blocks(sch.get_block("root")):
        if _is_conv(sch, block):
            out |= {sch.get(p).name_hint for p in sch.get_producers(block) if sch.get(p).name_hint == "pad_temp"}
    return out


def schedule_gpu_default(sch, target):
    """Inline what can be inlined (a convolution's padding stage excepted), tile convolutions
    (schedule_conv2d_gpu) and (batched) GEMM blocks through shared memory (schedule_gemm_gpu, or the
    tensor cores), then bind every other block to blockIdx.x / threadIdx.x; returns the schedule (a
    new one when a block was tiled)."""
    keep = _conv_pads(sch)
    changed = True
    while changed:
        changed = False
        root = sch.get_block("root")
        for block in reversed(sch.get_child_blocks(root)):
            if sch.get(block).name_hint in keep:
                continue
            try:
                sch.compute_inline(block)
                changed = True
                break
            except ScheduleError:
                continue
    # an output over rows with the reductions of its rows (softmax, layer norm): one kernel a row
    root = sch.get_block("root")
    for name in reversed([sch.get(b).name_hint for b in sch.get_child_blocks(root)]):
        try:
            block = sch.get_block(name)
        except ScheduleError:
            continue
        if row_reductions(sch, block) is None:
            continue
        cols = sch.get(sch.get_loops(block)[-1]).extent.value
        trial = sch.copy()
        try:
            schedule_rows_gpu(trial, trial.get_block(name), min(_row_threads(cols), threads_per_block(target)))
            sch = trial
        except ScheduleError:
            continue
    root = sch.get_block("root")
    for name in [sch.get(b).name_hint for b in sch.get_child_blocks(root)]:
        try:
            block = sch.get_block(name)
        except ScheduleError:
            continue        # folded into a block scheduled before it (a convolution's epilogue)
        if name in keep or _bound(sch, block):
            continue
        if _is_conv(sch, block):
            trial = sch.copy()
            try:
                schedule_conv2d_gpu(trial, trial.get_block(name))
                sch = trial
            except ScheduleError:
                for pad in keep:        # the direct loops, each thread reading the padding inline
                    try:
                        sch.compute_inline(sch.get_block(pad))
                    except ScheduleError:
                        pass
            continue
        tiles = _gemm_tiles(sch, block)
        tc = _tensor_core_tile(sch, block, target) if tiles is not None else None
        if tc is not None:
            trial = sch.copy()
            try:
                schedule_gemm_tensorcore(trial, trial.get_block(name), *tc)
                sch = trial
                continue
            except ScheduleError:
                pass        # not the tensor cores' pattern: the shared-memory tiles below
        threads = _row_reduction(sch, block) if tiles is None else None
        if tiles is None and threads is None:
            continue
        trial = sch.copy()
        try:
            if tiles is not None:
                schedule_gemm_gpu(trial, trial.get_block(name), **tiles)
            else:
                schedule_row_reduction(trial, trial.get_block(name), min(threads, threads_per_block(target)))
        except ScheduleError:
            continue        # left to auto_bind (the trial is dropped, sch is unchanged)
        sch = trial
    return auto_bind(sch, threads_per_block(target))
