"""A shared-memory GEMM schedule for GPUs (TVM's "SSSRRSRS" tiling without the virtual threads):
a block of threads computes a tile_m x tile_n tile of C; each thread accumulates thread_m x
thread_n outputs in registers ("local"); per tile_k slice of the reduction, the block copies its A
and B tiles into shared memory together (cooperative fetching, float4 copies where they fit),
a barrier, the register tile update (unrolled), a barrier.

    sch = tir.Schedule(func); schedule_gemm_gpu(sch, sch.get_block("C"))

The block must be `C[i, j] = sum_k A[i, k] * B[k, j]`-shaped: two spatial loops and one
reduction loop, innermost last, after any number of batch loops (fused, bound to blockIdx.z);
sizes that are not multiples of the tiles are guarded.
"""
from __future__ import annotations

from ...errors import ScheduleError


def schedule_gemm_gpu(sch, block, tile_m=64, tile_n=64, tile_k=8, thread_m=4, thread_n=4, vector=4):
    """Tile `block` for a GPU as in the module docstring; returns sch."""
    loops = sch.get_loops(block)
    if len(loops) < 3:
        raise ScheduleError(f"schedule_gemm_gpu: block {sch.get(block).name_hint!r} has {len(loops)} loops; "
                            f"it takes a GEMM block with loops (batch..., i, j, k)")
    *batch, i, j, k = loops
    ty_n, tx_n = tile_m // thread_m, tile_n // thread_n
    bi, ty, ti = sch.split(i, [None, ty_n, thread_m])
    bj, tx, tj = sch.split(j, [None, tx_n, thread_n])
    ko, ki = sch.split(k, [None, tile_k])
    sch.reorder(bi, bj, ty, tx, ko, ki, ti, tj)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    if batch:
        sch.bind(sch.fuse(*batch) if len(batch) > 1 else batch[0], "blockIdx.z")
    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, tx)
    for idx in (0, 1):
        cache = sch.cache_read(block, idx, "shared")
        sch.compute_at(cache, ko)
        fused = sch.fuse(*sch.get_loops(cache)[-2:])
        n = sch.get(fused).extent.value
        vec = vector        # the widest vector copy (4, 2, 1 elements) that splits the tile evenly
        while vec > 1 and n % (ty_n * tx_n * vec):
            vec //= 2
        parts = sch.split(fused, [None, ty_n, tx_n, vec] if vec > 1 else [None, ty_n, tx_n])
        sch.bind(parts[1], "threadIdx.y")
        sch.bind(parts[2], "threadIdx.x")
        if vec > 1:
            sch.vectorize(parts[3])
    sch.decompose_reduction(block, ko)
    sch.unroll(ki)
    sch.unroll(ti)
    sch.unroll(tj)
    return sch
