"""VDLA's operators: int8 conv2d and dense in the accelerator's packed layouts (TVM's VTA topi),
their default schedules onto the accelerator, the packing helpers and a NumPy reference.

Layouts (BATCH = cfg.batch, BLOCK = cfg.block):
    conv2d data   (N/BATCH, C/BLOCK, H, W, BATCH, BLOCK)             int8
           kernel (O/BLOCK, C/BLOCK, KH, KW, BLOCK, BLOCK)           int8  [o, c, kh, kw, o_i, c_i]
           bias   (1, O/BLOCK, 1, 1, BATCH, BLOCK)                   int32 (optional)
           out    (N/BATCH, O/BLOCK, OH, OW, BATCH, BLOCK)           int8
    dense  data (N/BATCH, K/BLOCK, BATCH, BLOCK), weight (M/BLOCK, K/BLOCK, BLOCK, BLOCK), out (N/BATCH, M/BLOCK, ...)
The result is `clip((sum + bias) >> shift, relu ? 0 : -128, 127)` cast to int8 (VTA requantizes by shift).

    func = conv2d_packed(shape...)              # a PrimFunc
    sch = schedule_conv2d(func, tile_h=7, tile_co=2, tile_ci=2, vthreads=2)
    mod = tessera.build(sch, target="vdla")
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import te, tir
from ...errors import ScheduleError, ShapeError
from ...tir.schedule import has_block
from .config import DEFAULT_CONFIG, VDLAConfig
from .intrin import gemm_intrin_name


@dataclass(frozen=True)
class Conv2DShape:
    """A conv2d layer in logical sizes (NCHW, OIHW)."""

    n: int
    c: int
    h: int
    w: int
    o: int
    kh: int
    kw: int
    stride: int = 1
    pad: int = 0

    @property
    def oh(self) -> int:
        return (self.h + 2 * self.pad - self.kh) // self.stride + 1

    @property
    def ow(self) -> int:
        return (self.w + 2 * self.pad - self.kw) // self.stride + 1

    @property
    def macs(self) -> int:
        return self.n * self.o * self.oh * self.ow * self.c * self.kh * self.kw


def _check_blocks(what, pairs, cfg):
    for name, v, b in pairs:
        if v % b:
            raise ShapeError(f"{what}: {name} = {v} is not a multiple of VDLA's {b}-wide block")


def _tail(acc, bias_at, shift, relu: bool, name: str):
    """The requantization stages on the int32 sum: (+ bias) >> shift (a constant, or a per-channel
    tensor accessor), clip, int8."""
    stages = []
    x = acc
    if bias_at is not None:
        x = te.compute(acc.shape, lambda *i: x(*i) + bias_at(*i), name=f"{name}_bias")
        stages.append(x)
    if callable(shift):
        prev = x
        x = te.compute(acc.shape, lambda *i: prev(*i) >> shift(*i), name=f"{name}_shr")
        stages.append(x)
    elif shift:
        prev = x
        x = te.compute(acc.shape, lambda *i: prev(*i) >> shift, name=f"{name}_shr")
        stages.append(x)
    lo = 0 if relu else -128
    prev2 = x
    x = te.compute(acc.shape, lambda *i: te.max(te.min(prev2(*i), 127), lo), name=f"{name}_clip")
    stages.append(x)
    out = te.compute(acc.shape, lambda *i: x(*i).astype("int8"), name=name)
    return stages, out


def conv2d_packed(s: Conv2DShape, shift=0, relu: bool = False, bias: bool = False,
                  cfg: VDLAConfig = DEFAULT_CONFIG, name: str = "conv2d"):
    """The PrimFunc of a packed int8 conv2d with its requantization tail (see the module docstring).
    shift: a constant, or "channel" for a per-output-channel int32 parameter `shift` laid out as
    the bias (the last parameter before the output)."""
    B, L = cfg.batch, cfg.block
    _check_blocks("conv2d_packed", [("batch", s.n, B), ("in channels", s.c, L), ("out channels", s.o, L)], cfg)
    if shift != "channel" and not (isinstance(shift, int) and 0 <= shift < 32):
        raise ShapeError(f"conv2d_packed: shift must be 0..31 or 'channel', got {shift!r}")
    data = te.placeholder((s.n // B, s.c // L, s.h, s.w, B, L), "int8", name="data")
    kernel = te.placeholder((s.o // L, s.c // L, s.kh, s.kw, L, L), "int8", name="kernel")
    p = s.pad
    if p:
        padded = te.compute((s.n // B, s.c // L, s.h + 2 * p, s.w + 2 * p, B, L),
                            lambda n, c, y, x, b, i: te.if_then_else(
                                te.all(y >= p, y < s.h + p, x >= p, x < s.w + p),
                                data[n, c, y - p, x - p, b, i], te.const(0, "int8")), name="data_pad")
    else:
        padded = data
    ci = te.reduce_axis((0, s.c // L), "ci")
    dy = te.reduce_axis((0, s.kh), "dy")
    dx = te.reduce_axis((0, s.kw), "dx")
    ki = te.reduce_axis((0, L), "ki")
    st = s.stride
    acc = te.compute((s.n // B, s.o // L, s.oh, s.ow, B, L),
                     lambda n, o, y, x, b, oi: te.sum(
                         padded[n, ci, y * st + dy, x * st + dx, b, ki].astype("int32")
                         * kernel[o, ci, dy, dx, oi, ki].astype("int32"), axis=[ci, dy, dx, ki]),
                     name=f"{name}_acc")
    args = [data, kernel]
    bias_at = None
    if bias:
        bt = te.placeholder((1, s.o // L, 1, 1, B, L), "int32", name="bias")
        args.append(bt)
        bias_at = lambda n, o, y, x, b, oi: bt[0, o, 0, 0, b, oi]  # noqa: E731
    if shift == "channel":
        st_ = te.placeholder((1, s.o // L, 1, 1, B, L), "int32", name="shift")
        args.append(st_)
        shift = lambda n, o, y, x, b, oi: st_[0, o, 0, 0, b, oi]  # noqa: E731
    _, out = _tail(acc, bias_at, shift, relu, name)
    return te.create_prim_func(args + [out]).replace(name=name)


def dense_packed(n: int, k: int, m: int, shift: int = 0, relu: bool = False, bias: bool = False,
                 cfg: VDLAConfig = DEFAULT_CONFIG, name: str = "dense"):
    """The PrimFunc of a packed int8 dense layer (y = x W^T) with its requantization tail."""
    B, L = cfg.batch, cfg.block
    _check_blocks("dense_packed", [("batch", n, B), ("in features", k, L), ("out features", m, L)], cfg)
    data = te.placeholder((n // B, k // L, B, L), "int8", name="data")
    weight = te.placeholder((m // L, k // L, L, L), "int8", name="weight")
    ko = te.reduce_axis((0, k // L), "ko")
    ki = te.reduce_axis((0, L), "ki")
    acc = te.compute((n // B, m // L, B, L),
                     lambda i, j, b, o: te.sum(data[i, ko, b, ki].astype("int32") * weight[j, ko, o, ki].astype("int32"),
                                               axis=[ko, ki]), name=f"{name}_acc")
    args = [data, weight]
    bias_at = None
    if bias:
        bt = te.placeholder((1, m // L, B, L), "int32", name="bias")
        args.append(bt)
        bias_at = lambda i, j, b, o: bt[0, j, b, o]  # noqa: E731
    _, out = _tail(acc, bias_at, shift, relu, name)
    return te.create_prim_func(args + [out]).replace(name=name)


# ---------------------------------------------------------------------------------------------
# schedules
# ---------------------------------------------------------------------------------------------
def _read_index(sch, block, buffer_name) -> int:
    reads = sch.get(block).reads
    for i, r in enumerate(reads):
        if r.buffer.name == buffer_name:
            return i
    raise ScheduleError(f"block {sch.get(block).name_hint!r} reads no buffer {buffer_name!r}")


def _tail_blocks(sch, name):
    return [b for b in (f"{name}_clip", f"{name}_shr", f"{name}_bias") if has_block(sch, b)]


def _factor(what, extent, tile):
    if tile is None:
        return extent
    if tile < 1 or extent % tile:
        raise ScheduleError(f"{what} tile {tile} does not divide its extent {extent}")
    return tile


def schedule_conv2d(func, tile_h=None, tile_w=None, tile_co=1, tile_ci=None, vthreads=1, vthread_axis="co",
                    cfg: VDLAConfig = DEFAULT_CONFIG):
    """A VDLA schedule of conv2d_packed: output tiles of tile_co channel blocks x tile_h x tile_w
    computed in acc; the reduction over input channels in chunks of tile_ci blocks, each chunk's
    data (with its padding) and weights loaded into inp/wgt; GEMM tensorized; the tail on the ALU;
    `vthreads` virtual threads over the output-channel ("co") or row ("h") tiles."""
    sch = tir.Schedule(func)
    name = func.name
    res = sch.get_block(name)
    n, o, y, x, b, oi = sch.get_loops(res)
    ext = [int(iv.dom.extent) for iv in sch.get(res).iter_vars]
    O, OH, OW = ext[1], ext[2], ext[3]
    th, tw, tco = _factor("h", OH, tile_h), _factor("w", OW, tile_w), _factor("co", O, tile_co)
    oo, ot = sch.split(o, [None, tco])
    yo, yt = sch.split(y, [None, th])
    xo, xt = sch.split(x, [None, tw])
    outer = {"co": oo, "h": yo}
    if vthread_axis not in outer:
        raise ScheduleError(f"schedule_conv2d: vthread_axis must be 'co' or 'h', got {vthread_axis!r}")
    vt = None
    if vthreads > 1:
        ext = (O // tco) if vthread_axis == "co" else (OH // th)
        if ext % vthreads:
            raise ScheduleError(f"schedule_conv2d: {vthreads} virtual threads do not divide the {ext} "
                                f"{vthread_axis} tiles")
        vt, rest = sch.split(outer[vthread_axis], [vthreads, None])
        outer[vthread_axis] = rest
    order = [n] + ([vt] if vt is not None else []) + [outer["co"], outer["h"], xo, ot, yt, xt, b, oi]
    sch.reorder(*order)
    tile_loop = xo
    for blk in _tail_blocks(sch, name) + [f"{name}_acc"]:
        sch.set_scope(sch.get_block(blk), 0, "acc")
        sch.compute_at(sch.get_block(blk), tile_loop, preserve_unit_loops=True)
    for stage, param in ((f"{name}_bias", "bias"), (f"{name}_shr", "shift")):
        if has_block(sch, stage) and any(r.buffer.name == param for r in sch.get(sch.get_block(stage)).reads):
            bb = sch.get_block(stage)
            sch.cache_read(bb, _read_index(sch, bb, param), "acc")
            sch.compute_at(sch.get_block(f"{param}_acc"), tile_loop, preserve_unit_loops=True)
    cb = sch.get_block(f"{name}_acc")
    loops = sch.get_loops(cb)
    cn, co, cy, cx, cbb, coi, cci, cdy, cdx, cki = loops[-10:]
    CI = int(sch.get(cb).iter_vars[6].dom.extent)
    tci = _factor("ci", CI, tile_ci)
    cio, cii = sch.split(cci, [None, tci])
    # the spatial loops outermost: they become the GEMM's iter_out x iter_in, (co, ci, dy, dx) its uop kernel
    sch.reorder(cio, cy, cx, co, cii, cdy, cdx, cbb, coi, cki)
    sch.decompose_reduction(cb, cio)
    src = "data_pad" if has_block(sch, "data_pad") else "data"
    sch.cache_read(cb, _read_index(sch, cb, src), "inp")
    sch.cache_read(cb, _read_index(sch, cb, "kernel"), "wgt")
    sch.compute_at(sch.get_block(f"{src}_inp"), cio, preserve_unit_loops=True)
    sch.compute_at(sch.get_block("kernel_wgt"), cio, preserve_unit_loops=True)
    if src == "data_pad":
        sch.compute_inline(sch.get_block("data_pad"))
    sch.tensorize(cbb, gemm_intrin_name(cfg))
    if vt is not None:
        sch.bind(vt, "vthread")
    return sch


def choose_conv2d_tiles(s: Conv2DShape, vthreads: int = 2, cfg: VDLAConfig = DEFAULT_CONFIG) -> dict:
    """Tiles for schedule_conv2d: the tilings whose buffers fit `vthreads` copies, the one with the
    least estimated time (loads vs GEMM + ALU cycles, and a per-chunk overhead) first; with no
    tiling fitting two threads, one thread. Returns schedule_conv2d's keyword arguments."""
    best = None
    for threads in ([vthreads, 1] if vthreads > 1 else [1]):
        half = {m: cfg.depth(m) // threads for m in ("inp", "wgt", "acc")}
        for tco in _divs(s.o // cfg.block):
            for tci in _divs(s.c // cfg.block):
                for th in _divs(s.oh):
                    for tw in [d for d in _divs(s.ow) if d * 2 >= s.ow]:
                        ih, iw = (th - 1) * s.stride + s.kh, (tw - 1) * s.stride + s.kw
                        inp, wgt, acc = tci * ih * iw, tco * tci * s.kh * s.kw, tco * th * tw + 2 * tco
                        if inp > half["inp"] or wgt > half["wgt"] or acc > half["acc"]:
                            continue
                        tiles = (s.o // cfg.block // tco) * (s.oh // th) * (s.ow // tw)
                        for axis, ext in (("co", s.o // cfg.block // tco), ("h", s.oh // th)):
                            if threads > 1 and ext % threads:
                                continue
                            chunks = tiles * (s.c // cfg.block // tci)
                            elem = cfg.elem_bytes("inp") // cfg.bus_bytes
                            load = chunks * (inp * elem + tci * ih * cfg.dma_row_latency
                                             + wgt * (cfg.elem_bytes("wgt") // cfg.bus_bytes) + tco * cfg.dma_row_latency)
                            compute = s.macs // cfg.macs_per_cycle + 4 * cfg.alu_cycles_per_uop * \
                                (s.o // cfg.block) * s.oh * s.ow
                            est = (max(load, compute) if threads > 1 else load + compute) + chunks * 20
                            cand = (est, dict(tile_h=th, tile_w=tw, tile_co=tco, tile_ci=tci, vthreads=threads,
                                              vthread_axis=axis))
                            if best is None or cand[0] < best[0]:
                                best = cand
        if best is not None:
            return best[1]
    raise ScheduleError(f"no VDLA tiling of conv2d {s} fits the buffers")


def _divs(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def schedule_dense(func, tile_n=None, tile_m=1, tile_k=None, vthreads=1, cfg: VDLAConfig = DEFAULT_CONFIG):
    """A VDLA schedule of dense_packed: tile_n x tile_m output blocks in acc, the reduction in chunks
    of tile_k blocks loaded into inp/wgt, GEMM tensorized, `vthreads` virtual threads over the
    output-feature tiles."""
    sch = tir.Schedule(func)
    name = func.name
    res = sch.get_block(name)
    i, j, b, o = sch.get_loops(res)
    ext = [int(iv.dom.extent) for iv in sch.get(res).iter_vars]
    tn, tm = _factor("n", ext[0], tile_n), _factor("m", ext[1], tile_m)
    io_, it = sch.split(i, [None, tn])
    jo, jt = sch.split(j, [None, tm])
    vt = None
    if vthreads > 1:
        if (ext[1] // tm) % vthreads:
            raise ScheduleError(f"schedule_dense: {vthreads} virtual threads do not divide the {ext[1] // tm} m tiles")
        vt, jo = sch.split(jo, [vthreads, None])
    sch.reorder(*([vt] if vt is not None else []), jo, io_, it, jt, b, o)
    tile_loop = io_
    for blk in _tail_blocks(sch, name) + [f"{name}_acc"]:
        sch.set_scope(sch.get_block(blk), 0, "acc")
        sch.compute_at(sch.get_block(blk), tile_loop, preserve_unit_loops=True)
    if has_block(sch, f"{name}_bias"):
        bb = sch.get_block(f"{name}_bias")
        sch.cache_read(bb, _read_index(sch, bb, "bias"), "acc")
        sch.compute_at(sch.get_block("bias_acc"), tile_loop, preserve_unit_loops=True)
    cb = sch.get_block(f"{name}_acc")
    ci_, cj, cbb, co, cko, cki = sch.get_loops(cb)[-6:]
    K = int(sch.get(cb).iter_vars[4].dom.extent)
    tk = _factor("k", K, tile_k)
    koo, koi = sch.split(cko, [None, tk])
    sch.reorder(koo, ci_, cj, koi, cbb, co, cki)
    sch.decompose_reduction(cb, koo)
    sch.cache_read(cb, _read_index(sch, cb, "data"), "inp")
    sch.cache_read(cb, _read_index(sch, cb, "weight"), "wgt")
    sch.compute_at(sch.get_block("data_inp"), koo, preserve_unit_loops=True)
    sch.compute_at(sch.get_block("weight_wgt"), koo, preserve_unit_loops=True)
    sch.tensorize(cbb, gemm_intrin_name(cfg))
    if vt is not None:
        sch.bind(vt, "vthread")
    return sch


# ---------------------------------------------------------------------------------------------
# packing and the NumPy reference
# ---------------------------------------------------------------------------------------------
def pack_data(x: np.ndarray, cfg: VDLAConfig = DEFAULT_CONFIG) -> np.ndarray:
    """(N, C, H, W) -> (N/B, C/L, H, W, B, L); (N, K) -> (N/B, K/L, B, L)."""
    B, L = cfg.batch, cfg.block
    if x.ndim == 4:
        n, c, h, w = x.shape
        return np.ascontiguousarray(x.reshape(n // B, B, c // L, L, h, w).transpose(0, 2, 4, 5, 1, 3))
    n, k = x.shape
    return np.ascontiguousarray(x.reshape(n // B, B, k // L, L).transpose(0, 2, 1, 3))


def unpack_data(y: np.ndarray) -> np.ndarray:
    """The inverse of pack_data."""
    if y.ndim == 6:
        nb, cb, h, w, B, L = y.shape
        return np.ascontiguousarray(y.transpose(0, 4, 1, 5, 2, 3).reshape(nb * B, cb * L, h, w))
    nb, kb, B, L = y.shape
    return np.ascontiguousarray(y.transpose(0, 2, 1, 3).reshape(nb * B, kb * L))


def pack_weight(w: np.ndarray, cfg: VDLAConfig = DEFAULT_CONFIG) -> np.ndarray:
    """(O, C, KH, KW) -> (O/L, C/L, KH, KW, L, L); (M, K) -> (M/L, K/L, L, L)."""
    L = cfg.block
    if w.ndim == 4:
        o, c, kh, kw = w.shape
        return np.ascontiguousarray(w.reshape(o // L, L, c // L, L, kh, kw).transpose(0, 2, 4, 5, 1, 3))
    m, k = w.shape
    return np.ascontiguousarray(w.reshape(m // L, L, k // L, L).transpose(0, 2, 1, 3))


def pack_bias(bias: np.ndarray, ndim: int, cfg: VDLAConfig = DEFAULT_CONFIG) -> np.ndarray:
    """(O,) int32 -> the bias parameter of conv2d_packed (ndim 6) or dense_packed (ndim 4)."""
    B, L = cfg.batch, cfg.block
    o = bias.shape[0]
    b = np.broadcast_to(bias.reshape(o // L, 1, L), (o // L, B, L)).astype(np.int32)
    return np.ascontiguousarray(b.reshape(1, o // L, 1, 1, B, L) if ndim == 6 else b.reshape(1, o // L, B, L))


def requantize(acc: np.ndarray, shift: int, relu: bool) -> np.ndarray:
    """int32 -> int8 as VDLA does: arithmetic shift right, clip, cast."""
    y = acc.astype(np.int64) >> shift
    return np.clip(y, 0 if relu else -128, 127).astype(np.int8)


def conv2d_reference(x, w, bias, s: Conv2DShape, shift: int, relu: bool) -> np.ndarray:
    """NumPy int8 conv2d (NCHW x OIHW, int32 accumulation) + bias, requantized to int8 (NCHW)."""
    xp = np.pad(x.astype(np.int32), ((0, 0), (0, 0), (s.pad, s.pad), (s.pad, s.pad)))
    acc = np.zeros((s.n, s.o, s.oh, s.ow), np.int64)
    w32 = w.astype(np.int64)
    for dy in range(s.kh):
        for dx in range(s.kw):
            patch = xp[:, :, dy:dy + s.stride * s.oh:s.stride, dx:dx + s.stride * s.ow:s.stride]
            acc += np.einsum("nchw,oc->nohw", patch.astype(np.int64), w32[:, :, dy, dx])
    if bias is not None:
        acc += bias.astype(np.int64)[None, :, None, None]
    acc = ((acc + 2**31) % 2**32 - 2**31).astype(np.int32)
    return requantize(acc, shift, relu)


def dense_reference(x, w, bias, shift: int, relu: bool) -> np.ndarray:
    acc = x.astype(np.int64) @ w.astype(np.int64).T
    if bias is not None:
        acc += bias.astype(np.int64)[None]
    acc = ((acc + 2**31) % 2**32 - 2**31).astype(np.int32)
    return requantize(acc, shift, relu)
