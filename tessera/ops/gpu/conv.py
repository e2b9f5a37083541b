"""A direct convolution schedule for GPUs (TVM's conv2d_direct for CUDA, one fixed configuration):
a block of threads computes a tile of output channels x output rows x output columns of one image;
each thread accumulates IO channels x IW columns in registers ("local"); per slice of RC input
channels the block copies the padded input window and the weights it needs into shared memory
together (cooperative fetching; the zero padding is computed in the copy), a barrier, the register
tile update over the slice's channels and kernel taps (unrolled), a barrier. An elementwise
epilogue (bias, batch norm, ReLU, a residual add) is computed in the write-back of the registers.

    sch = tir.Schedule(func); schedule_conv2d_gpu(sch, sch.get_block("conv2d_nchw"))

The block must be the direct NCHW convolution of ops/nn/conv.py (conv_nd(..., packed=False)): loops
n, oc, oh, ow, then the reductions rc, ry, rx, reading the padding stage `pad_temp` and the weight.
Extents that are not multiples of the tiles are guarded.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir import IntImm

IO = 4          # output channels a thread accumulates
TO = 8          # threads along the output channels
RC = 8          # input channels a shared-memory slice holds


def _exact(n: int, options) -> int:
    """The first option that divides n (a tile without guards), else the first."""
    return next((o for o in options if n % o == 0), options[0])


def conv_tiles(oc: int, oh: int, ow: int) -> dict:
    """Tile sizes for an OC x OH x OW output, dividing the extents where they can (no guards):
    IW columns a thread (4, 2, 1), TW threads along the columns (16 down to 4), TH along the rows
    (4, 2, 7, 1), TO along the channels (IO channels each); at most 512 threads."""
    iw = _exact(ow, [w for w in (4, 2, 1) if w * 4 <= max(ow, 4)])
    cols = -(-ow // iw)
    tw = _exact(cols, [t for t in range(min(16, cols), 3, -1)] or [cols])
    to = max(1, min(TO, -(-oc // IO)))
    th = _exact(oh, [h for h in (4, 2, 7, 1) if h <= oh and to * tw * h <= 512] or [1])
    return dict(io=IO, to=to, th=th, tw=tw, iw=iw, rc=RC)


def _producer(sch, block, name):
    for p in sch.get_producers(block):
        if sch.get(p).name_hint == name:
            return p
    return None


def schedule_conv2d_gpu(sch, block, tiles=None):
    """Schedule the direct convolution `block` as in the module docstring; returns sch."""
    b = sch.get(block)
    loops = sch.get_loops(block)
    kinds = [iv.iter_type for iv in b.iter_vars]
    if len(loops) != 7 or kinds != ["data_par"] * 4 + ["reduce"] * 3:
        raise ScheduleError(f"schedule_conv2d_gpu: block {b.name_hint!r} is not a direct 2-d convolution (loops n, "
                            f"oc, oh, ow, rc, ry, rx)")
    ext = [sch.get(lp).extent for lp in loops]
    if any(type(e) is not IntImm for e in ext):
        raise ScheduleError(f"schedule_conv2d_gpu: block {b.name_hint!r} has a symbolic extent")
    n_, oc_, oh_, ow_, rc_, _, _ = (e.value for e in ext)
    pad = _producer(sch, block, "pad_temp")
    t = dict(conv_tiles(oc_, oh_, ow_), **(tiles or {}))
    n, oc, oh, ow, rc, ry, rx = loops
    bo, to, io = sch.split(oc, [None, t["to"], t["io"]])
    bh, th, ih = sch.split(oh, [None, t["th"], 1])
    bw, tw, iw = sch.split(ow, [None, t["tw"], t["iw"]])
    rco, rci = sch.split(rc, [None, min(t["rc"], rc_)])
    sch.reorder(n, bo, bh, bw, to, th, tw, rco, rci, ry, rx, io, ih, iw)
    sch.bind(sch.fuse(n, bo), "blockIdx.z")
    sch.bind(bh, "blockIdx.y")
    sch.bind(bw, "blockIdx.x")
    sch.bind(to, "threadIdx.z")
    sch.bind(th, "threadIdx.y")
    sch.bind(tw, "threadIdx.x")
    # the output accumulates in registers; the elementwise consumers are computed in its write-back
    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, tw)
    while True:
        consumers = sch.get_consumers(acc)
        if len(consumers) != 1:
            break
        try:
            sch.reverse_compute_inline(consumers[0])
        except ScheduleError:
            break
    # the input window (the padding computed in the copy) and the weights, through shared memory
    reads = [r.buffer.name for r in sch.get(block).reads]
    data_idx = next((i for i, name in enumerate(reads) if pad is not None and name == sch.get(pad).writes[0].buffer.name),
                    0)
    caches = [sch.cache_read(block, data_idx, "shared"), sch.cache_read(block, 1 - data_idx, "shared")]
    if pad is not None:
        sch.compute_inline(pad)
    rco_var = sch.get(rco).loop_var
    depth = 1 + next(k for k, lp in enumerate(sch.get_loops(block)) if sch.get(lp).loop_var is rco_var)
    for cache in caches:
        sch.compute_at(cache, rco)
        fused = sch.fuse(*sch.get_loops(cache)[depth:])
        _, cz, cy, cx = sch.split(fused, [None, t["to"], t["th"], t["tw"]])
        sch.bind(cz, "threadIdx.z")
        sch.bind(cy, "threadIdx.y")
        sch.bind(cx, "threadIdx.x")
    sch.decompose_reduction(block, rco)
    for lp in (ry, rx, io, ih, iw):
        sch.unroll(lp)
    return sch


__all__ = ["schedule_conv2d_gpu", "conv_tiles"]
