"""The tensor-core GEMM schedule for CUDA: `C[i, j] = sum_k f32(A[i, k]) * f32(B[k, j])` with A and B
float16 (after any batch loops) tiled into BM x BN blocks of C, each computed by one thread block
through the block-level intrinsic cuda_tc_gemm_f16f32_* (tir/tensor_intrin/cuda_gemm.py: warps of
mma.sync products fed by a cp.async pipeline of K slices through shared memory).

    sch = tir.Schedule(func); schedule_gemm_tensorcore(sch, sch.get_block("C"), bm=128, bn=128)

The loops i and j split by BM and BN go to blockIdx.y and blockIdx.x (batch loops fused onto
blockIdx.z); the tile loops and the whole reduction become the intrinsic's call. M must be a
multiple of BM, N of BN, and K, the row strides of A and B, of 8 (16-byte rows for cp.async).
TILE_CONFIGS are the tile shapes the default schedule and the tuner choose from.
`schedule_gemm_wgmma` tiles the same way onto Hopper's warpgroup MMA (tir/tensor_intrin/cuda_wgmma.py;
target `cuda -arch=sm_90a`); no device has run it yet, so no default schedule chooses it.
"""
from __future__ import annotations

from ...errors import ScheduleError, TesseraError
from ...ir import IntImm
from ...tir.tensor_intrin import cuda_wgmma as wgmma
from ...tir.tensor_intrin.cuda_gemm import check_shape, register, shared_bytes, threads

# (bm, bn, bk, wm, wn, stages): large tiles first (more reuse per byte copied), smaller ones where
# the matrix is small or not a multiple of the large ones
TILE_CONFIGS = (
    (128, 256, 32, 64, 64, 3),
    (128, 128, 32, 64, 64, 4),
    (128, 128, 64, 64, 64, 3),
    (256, 128, 32, 64, 64, 3),
    (128, 64, 32, 64, 32, 4),
    (64, 128, 32, 32, 64, 4),
    (64, 64, 32, 32, 32, 4),
    (64, 64, 64, 32, 32, 3),
    (32, 64, 32, 16, 32, 4),
    (32, 32, 32, 16, 16, 4),
    (16, 64, 32, 16, 32, 4),
    (16, 16, 32, 16, 16, 4),
)
DEFAULT_TILE = (128, 128, 32, 64, 64, 4)
MAX_SHARED = 227 * 1024      # the shared memory a block may have on sm_90 (backend/cuda.py's table)


def tile_space(m: int, n: int, k: int, max_shared: int = MAX_SHARED) -> list:
    """The tile shapes the tuner tries for an M x N x K GEMM (autotune/rules/tensor_core.py): block
    tiles of 64 to 256 rows and columns, warp tiles of 32 or 64, K slices of 32 or 64, 3 or 4 stages,
    128 or 256 threads, within max_shared bytes of shared memory; then TILE_CONFIGS' smaller ones.
    Only shapes the extents fit."""
    out = []
    for bm in (64, 128, 256):
        for bn in (64, 128, 256):
            for wm, wn in ((32, 32), (32, 64), (64, 32), (64, 64)):
                for bk in (32, 64):
                    for stages in (3, 4):
                        t = (bm, bn, bk, wm, wn, stages)
                        try:
                            check_shape(*t)
                        except TesseraError:
                            continue
                        if threads(bm, bn, wm, wn) in (128, 256) and shared_bytes(bm, bn, bk, stages) <= max_shared:
                            out.append(t)
    out += [t for t in TILE_CONFIGS if t not in out]
    return [t for t in out if fits(m, n, k, t)]


def gemm_extents(sch, block):
    """(batch loops, M, N, K) of a GEMM block's loops (batch..., i, j, k), or a ScheduleError."""
    b = sch.get(block)
    loops = [sch.get(lp) for lp in sch.get_loops(block)]
    kinds = [iv.iter_type for iv in b.iter_vars]
    if len(loops) < 3 or len(loops) != len(kinds) or kinds[-1] != "reduce" or "reduce" in kinds[:-1]:
        raise ScheduleError(f"schedule_gemm_tensorcore: block {b.name_hint!r} is not a GEMM (loops batch..., i, j "
                            f"and one reduction loop k innermost)")
    if any(type(lp.extent) is not IntImm for lp in loops):
        raise ScheduleError(f"schedule_gemm_tensorcore: block {b.name_hint!r} has a symbolic extent; the tensor-"
                            f"core schedule is built for static shapes")
    m, n, k = (lp.extent.value for lp in loops[-3:])
    return len(loops) - 3, m, n, k


def fits(m: int, n: int, k: int, tile) -> bool:
    """Whether an M x N x K GEMM can take the tile (bm, bn, ...): exact block tiles, 16-byte rows."""
    return m % tile[0] == 0 and n % tile[1] == 0 and k % 8 == 0 and n % 8 == 0


def default_tile(m: int, n: int, k: int, sms: int = 132):
    """The first of TILE_CONFIGS that fits and gives at least one block per multiprocessor (else the
    fitting one with the most blocks), or None when none fits."""
    fitting = [t for t in TILE_CONFIGS if fits(m, n, k, t)]
    if not fitting:
        return None
    for t in fitting:
        if (m // t[0]) * (n // t[1]) >= sms:
            return t
    return max(fitting, key=lambda t: ((m // t[0]) * (n // t[1]), t[0] * t[1]))


def schedule_gemm_tensorcore(sch, block, bm=128, bn=128, bk=32, wm=64, wn=64, stages=4):
    """Tile `block` onto the tensor cores as in the module docstring; returns sch."""
    try:
        check_shape(bm, bn, bk, wm, wn, stages)
    except TesseraError as e:
        raise ScheduleError(f"schedule_gemm_tensorcore: {e}") from None
    return _tile_onto(sch, block, bm, bn, lambda: register(bm, bn, bk, wm, wn, stages), "schedule_gemm_tensorcore")


def schedule_gemm_wgmma(sch, block, bm=128, bn=256, stages=4):
    """Tile `block` as schedule_gemm_tensorcore does, onto Hopper's warpgroup MMA instead
    (cuda_wgmma_gemm_f16f32_*: BM / 64 warpgroups of wgmma m64nBNk16, K slices of 64); it builds
    for the target `cuda -arch=sm_90a` only. Returns sch."""
    try:
        wgmma.check_shape(bm, bn, wgmma.BK, stages)
    except TesseraError as e:
        raise ScheduleError(f"schedule_gemm_wgmma: {e}") from None
    return _tile_onto(sch, block, bm, bn, lambda: wgmma.register(bm, bn, wgmma.BK, stages), "schedule_gemm_wgmma")


def _tile_onto(sch, block, bm, bn, intrin, who):
    """Blocks of BM x BN of C on blockIdx.y / x (batches on blockIdx.z), each tile's loops and the
    whole reduction tensorized by the block-level intrinsic intrin() names."""
    nbatch, m, n, k = gemm_extents(sch, block)
    name = sch.get(block).name_hint
    if not fits(m, n, k, (bm, bn)):
        raise ScheduleError(f"{who}: block {name!r} is {m} x {n} x {k}; the {bm} x {bn} tiles "
                            f"need M a multiple of {bm}, N of {bn} and K, N multiples of 8")
    *batch, i, j, kk = sch.get_loops(block)
    io, ii = sch.split(i, [None, bm])
    jo, ji = sch.split(j, [None, bn])
    sch.reorder(io, jo, ii, ji, kk)
    sch.bind(io, "blockIdx.y")
    sch.bind(jo, "blockIdx.x")
    if batch:
        sch.bind(sch.fuse(*batch) if len(batch) > 1 else batch[0], "blockIdx.z")
    sch.tensorize(ii, intrin())
    return sch


__all__ = ["DEFAULT_TILE", "TILE_CONFIGS", "default_tile", "fits", "gemm_extents", "schedule_gemm_tensorcore",
           "schedule_gemm_wgmma", "tile_space"]
