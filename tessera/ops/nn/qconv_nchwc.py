"""Blocked int8 convolutions (qnn.conv2d in the NCHW[x]c layouts alter_layout gives it):
qnn.contrib_conv2d_NCHWc, qnn.contrib_depthwise_conv2d_NCHWc, and qnn.pack_nchwc, which blocks an NCHW
uint8 tensor whose channels the block does not divide (an RGB input: 3 channels in NCHW4c), filling
the extra channels with the zero point.

    data    uint8 NCHW{ib}c                         (N, C / ib, H, W, ib), ib a multiple of 4
    weight  int8 (O / ob, C / ib, KH, KW, ib / 4, ob, 4)   (depthwise: (C / x, KH, KW, x))
    bias    int32 (O / ob, ob)   multiplier float32 (O / ob, ob)
    output  uint8/int8 NCHW{ob}c

acc = sum over the window of data * weight + bias, where a padded pixel is `pad_value` (the input's zero
point; the pass folded -pad_value * sum(weight) into the bias, so the integers of the data are used as
they are), then the requantization of ops/integer.py. ob is the int32 lanes of the target's
dot-product vector (16 with AVX512-VNNI, 8 otherwise).

Default CPU schedule (x86 with AVX2 or better; tir/tensor_intrin/x86_qconv.py): ROWS output rows of V
output blocks a micro-kernel call (u8 x s8 dot products into int32 accumulators held in registers for
the whole reduction), the (n, block group, row group) loops fused and parallel (row groups outer where the
input is larger than the weights), the requantization of the call's int32 tile right after it, while the
tile is in L1 (reverse_compute_at, the channel vector vectorized), the padding copy parallel over rows.
Depthwise (x86): the u8 x s8 products summed in int32 by integer dot products over interleaved taps
(tir/tensor_intrin/x86_qdepthwise.py), a group of output rows a call, its int32 tile requantized right
after it; (n, c_chunk, row group) parallel. Knobs (tessera tune): qconv.oc_blocks, qconv.rows,
qconv.rows_outer, qdepthwise.rows.
"""
from __future__ import annotations

from ... import te
from ...errors import ScheduleError, ShapeError, TesseraError
from ...ir import TensorType
from .. import _schedule as S
from ..integer import out_range, requantize_expr
from ..registry import REQUIRED, OpPattern, register_op
from . import _util as U
from .conv_nchwc import _extent, _get_block, _schedule_rest, _spatial_out, pad_nchwc
from ...tir.tensor_intrin import x86_qdepthwise
from ...tir.tensor_intrin.x86_qconv import AMX_BLOCK, amx_for, isa_for, qconv_row_intrin, row_tiles

CONV = "qnn.contrib_conv2d_NCHWc"
DEPTHWISE = "qnn.contrib_depthwise_conv2d_NCHWc"
PACK = "qnn.pack_nchwc"

_COMMON = {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "pad_value": REQUIRED,
           "output_zero_point": 0, "out_dtype": "uint8", "out_min": None, "out_max": None, "precision": "float32"}


def _attrs(op, attrs):
    return (U.int_tuple(op, "strides", attrs["strides"], 2, minimum=1), U.padding_tuple(op, attrs["padding"], 2),
            U.int_tuple(op, "dilation", attrs["dilation"], 2, minimum=1))


def _check_common(op, data, bias, mult, blocks, ob, attrs):
    U.check_dtype(op, data, ("uint8",), "data")
    U.check_rank(op, data, 5, "data (NCHW{x}c)")
    for t, dt, what in ((bias, "int32", "bias"), (mult, "float32", "multiplier")):
        U.check_dtype(op, t, (dt,), what)
        if tuple(t.shape) != (blocks, ob):
            raise ShapeError(f"{op}: {what} {t} must be ({blocks}, {ob}): one value per output channel, blocked")
    pv = int(attrs["pad_value"])
    if not 0 <= pv <= 255:
        raise ShapeError(f"{op}: pad_value {pv} lies outside uint8's range")
    out_range(op, attrs)


# ---------------------------------------------------------------------------------------------
# the blocked int8 convolution
# ---------------------------------------------------------------------------------------------
conv2d = register_op(
    CONV, inputs=("data", "weight", "bias", "multiplier"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs=_COMMON,
    doc="int8 2-d convolution in blocked layouts with the requantization fused (module docstring): data "
        "uint8 NCHW{i}c, weight int8 (O/o, C/i, KH, KW, i/4, o, 4), bias int32 and multiplier float32 (O/o, o).")


@conv2d.def_infer
def _conv_infer(types, attrs):
    op = CONV
    data, weight, bias, mult = types
    U.check_dtype(op, weight, ("int8",), "weight")
    U.check_rank(op, weight, 7, "weight (O/o, C/i, KH, KW, i/4, o, 4)")
    Oc, Cc, KH, KW, Q, ob, four = U.static_dims(op, weight, range(7), "weight dimensions")
    _check_common(op, data, bias, mult, Oc, ob, attrs)
    Dc, H, W, ib = U.static_dims(op, data, (1, 2, 3, 4), "channel blocks, spatial and block dimensions")
    if four != 4 or Q * 4 != ib or Cc != Dc:
        raise ShapeError(f"{op}: weight {weight} does not fit data {data}: it must be (O/o, {Dc}, KH, KW, {ib // 4}, "
                         f"o, 4)")
    strides, padding, dilation = _attrs(op, attrs)
    OH, OW = _spatial_out(op, H, W, KH, KW, strides, padding, dilation)
    return [TensorType((data.shape[0], Oc, OH, OW, ob), attrs["out_dtype"])]


@conv2d.def_compute
def _conv_compute(tensors, attrs):
    data, weight, bias, mult = tensors
    lo, hi = out_range(CONV, attrs)
    (sh, sw), padding, (dh, dw) = _attrs(CONV, attrs)
    Oc, Cc, KH, KW, Q, ob, _ = (int(s.value) for s in weight.shape)
    H, W = (int(s.value) for s in data.shape[2:4])
    OH, OW = _spatial_out(CONV, H, W, KH, KW, (sh, sw), padding, (dh, dw))
    src = pad_nchwc(data, padding, int(attrs["pad_value"]))
    icc, kh, kw = te.reduce_axis((0, Cc), "icc"), te.reduce_axis((0, KH), "kh"), te.reduce_axis((0, KW), "kw")
    ici = te.reduce_axis((0, Q * 4), "ici")
    names = ["n", "oc_chunk", "oh", "ow", "oc_block"]
    shape = (data.shape[0], Oc, OH, OW, ob)

    def body(n, oc, oh, ow, oci):
        x = src[n, icc, oh * sh + kh * dh, ow * sw + kw * dw, ici].astype("int32")
        return te.sum(x * weight[oc, icc, kh, kw, ici // 4, oci, ici % 4].astype("int32"), axis=[icc, kh, kw, ici])

    acc = U.compute(shape, names, body, "qconv_nchwc_acc")
    return [U.compute(shape, names, lambda n, oc, oh, ow, oci: requantize_expr(
        acc[n, oc, oh, ow, oci] + bias[oc, oci], mult[oc, oci], attrs, lo, hi), "qconv_nchwc")]


def _rows_per_call(isa, v, oh, ow, groups, threads) -> int:
    """Output rows a call: enough register tiles (>= 4) to reuse the weights a call brings to L1, a
    divisor of the height, and still >= 4 parallel tasks a thread."""
    per_row = sum(c for _, c in row_tiles(isa, v, ow))
    rows = 1
    for d in range(1, oh + 1):
        if oh % d:
            continue
        if groups * (oh // d) < 4 * max(1, threads) and d > 1:
            break
        rows = d
        if d * per_row >= 4:
            break
    return rows


def _tensorized(sch, block, out, ctx, strides, dilation) -> bool:
    target = ctx.target
    loops = sch.get_loops(block)
    if len(loops) != 9:
        return False
    n, oc, oh, ow, ob, icc, kh, kw, ici = loops
    ext = [_extent(sch, lp) for lp in loops]
    if any(e is None for e in ext):
        return False
    N, chunks, ohe, owe, obe, icce, khe, kwe, ib = ext
    isa = isa_for(target, obe)
    if isa is None or ib % 4:
        return False
    if ib == AMX_BLOCK and obe == 16 and amx_for(target):
        isa = "amx"
    wide = isa in ("vnni512", "vnni256")
    blocks = [c for c in (1, 2, 3, 4) if chunks % c == 0]
    v = ctx.choose(sch, "qconv.oc_blocks", blocks,
                   blocks[-1] if isa == "amx" else 2 if wide and chunks % 2 == 0 else 1)
    threads = S.thread_count(target)
    rows_outer = ctx.choose(sch, "qconv.rows_outer", [True, False],
                            ohe * owe * strides[0] * strides[1] > chunks * obe * khe * kwe)
    per_row = sum(c for _, c in row_tiles(isa, v, owe))
    rows = ctx.choose(sch, "qconv.rows", [d for d in range(1, ohe + 1) if ohe % d == 0 and d * per_row <= 32],
                      _rows_per_call(isa, v, ohe, owe, N * (chunks // v), threads))
    name = qconv_row_intrin(isa, v, ib, strides, dilation, owe, rows)
    oco, oci = sch.split(oc, [None, v])
    oho, ohi = sch.split(oh, [None, rows])
    outer = [n, oho, oco] if rows_outer else [n, oco, oho]
    sch.reorder(*outer, oci, ohi, ow, ob, icc, kh, kw, ici)
    init = sch.decompose_reduction(block, oci)
    sch.vectorize(sch.get_loops(init)[-1])
    blk = _get_block(sch, out)
    sch.reverse_compute_at(blk, outer[-1])
    sch.vectorize(sch.get_loops(blk)[-1])
    sch.tensorize(oci, name)
    fused = sch.fuse(*outer)
    if threads > 1:
        sch.parallel(fused)
    return True


def schedule_qconv2d_nchwc(sch, ctx):
    """Default CPU schedule of qnn.contrib_conv2d_NCHWc (module docstring); where the micro-kernel does
    not apply, a loop nest with the output vector vectorized."""
    out = ctx.block
    acc = _get_block(sch, out + "_acc")
    if acc is None:
        return
    strides = U.int_tuple(CONV, "strides", ctx.attrs["strides"], 2)
    dilation = U.int_tuple(CONV, "dilation", ctx.attrs["dilation"], 2)
    done = {out + "_acc", out}
    if ctx.knobs is not None:
        ok = _tensorized(sch, acc, out, ctx, strides, dilation)
    else:
        try:
            trial = sch.copy()
            ok = _tensorized(trial, trial.get_block(out + "_acc"), out, ctx, strides, dilation)
        except (ScheduleError, TesseraError):
            ok = False
        if ok:
            ok = _tensorized(sch, acc, out, ctx, strides, dilation)
    if not ok:
        try:
            trial = sch.copy()
            _loops(trial, trial.get_block(out + "_acc"), out, ctx.target)
            _loops(sch, acc, out, ctx.target)
        except ScheduleError:
            pass
    done.update(ctx.epilogue)
    _schedule_rest(sch, done, ctx.target)


def _loops(sch, block, out, target):
    """(n, oc, oh | ow, reduction, ob): the output vector vectorized, the requantization per row."""
    n, oc, oh, ow, ob, icc, kh, kw, ici = sch.get_loops(block)
    sch.reorder(n, oc, oh, ow, icc, kh, kw, ici, ob)
    sch.decompose_reduction(block, ow)
    sch.vectorize(ob)
    blk = sch.get_block(out)
    sch.reverse_compute_at(blk, oh)
    sch.vectorize(sch.get_loops(blk)[-1])
    if S.thread_count(target) > 1:
        sch.parallel(sch.fuse(n, oc, oh))


conv2d.def_schedule(schedule_qconv2d_nchwc)


# ---------------------------------------------------------------------------------------------
# depthwise
# ---------------------------------------------------------------------------------------------
depthwise = register_op(
    DEPTHWISE, inputs=("data", "weight", "bias", "multiplier"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs=_COMMON,
    doc="int8 depthwise 2-d convolution in a blocked layout with the requantization fused: data uint8 and "
        "output NCHW{x}c, weight int8 (C/x, KH, KW, x), bias int32 and multiplier float32 (C/x, x).")


@depthwise.def_infer
def _dw_infer(types, attrs):
    op = DEPTHWISE
    data, weight, bias, mult = types
    U.check_dtype(op, weight, ("int8",), "weight")
    U.check_rank(op, weight, 4, "weight (C/x, KH, KW, x)")
    Cc, KH, KW, x = U.static_dims(op, weight, range(4), "weight dimensions")
    if KH * KW >= 512:
        raise ShapeError(f"{op}: a {KH}x{KW} window sums more products than float32 holds exactly (< 512 taps)")
    _check_common(op, data, bias, mult, Cc, x, attrs)
    Dc, H, W, xb = U.static_dims(op, data, (1, 2, 3, 4), "channel blocks, spatial and block dimensions")
    if (Dc, xb) != (Cc, x):
        raise ShapeError(f"{op}: weight {weight} must be ({Dc}, KH, KW, {xb}) for data {data} (one filter a channel)")
    strides, padding, dilation = _attrs(op, attrs)
    OH, OW = _spatial_out(op, H, W, KH, KW, strides, padding, dilation)
    return [TensorType((data.shape[0], Cc, OH, OW, x), attrs["out_dtype"])]


@depthwise.def_compute
def _dw_compute(tensors, attrs):
    data, weight, bias, mult = tensors
    lo, hi = out_range(DEPTHWISE, attrs)
    (sh, sw), padding, (dh, dw) = _attrs(DEPTHWISE, attrs)
    Cc, KH, KW, x = (int(s.value) for s in weight.shape)
    H, W = (int(s.value) for s in data.shape[2:4])
    OH, OW = _spatial_out(DEPTHWISE, H, W, KH, KW, (sh, sw), padding, (dh, dw))
    src = pad_nchwc(data, padding, int(attrs["pad_value"]))
    kh, kw = te.reduce_axis((0, KH), "kh"), te.reduce_axis((0, KW), "kw")
    names = ["n", "c_chunk", "oh", "ow", "c_block"]
    shape = (data.shape[0], Cc, OH, OW, x)

    def body(n, c, oh, ow, b):
        # u8 x s8 products summed in int32 (exact); the x86 schedule computes it with integer dot
        # products over the taps (tir/tensor_intrin/x86_qdepthwise.py)
        p = src[n, c, oh * sh + kh * dh, ow * sw + kw * dw, b].astype("int32") * weight[c, kh, kw, b].astype("int32")
        return te.sum(p, axis=[kh, kw])

    acc = U.compute(shape, names, body, "qdepthwise_nchwc_acc")
    return [U.compute(shape, names, lambda n, c, oh, ow, b: requantize_expr(
        acc[n, c, oh, ow, b] + bias[c, b], mult[c, b], attrs, lo, hi), "qdepthwise_nchwc")]


_DW_TILE_BYTES = 16 * 1024     # the int32 tile of a call's rows, to stay in L1 with its quads


def _dw_rows(oh, ow, lanes, tasks, threads, pair) -> int:
    """Output rows a call: a divisor of the height whose int32 tile fits _DW_TILE_BYTES (at least one
    row), even where rows go in pairs (an odd count leaves a row alone), the most of those that still
    leaves >= 4 parallel tasks a thread."""
    fit = [d for d in range(1, oh + 1) if oh % d == 0 and (d == 1 or d * ow * lanes * 4 <= _DW_TILE_BYTES)]
    enough = [d for d in fit if tasks * (oh // d) >= 4 * max(1, threads)] or [1]
    return max(enough, key=lambda d: (not pair or d % 2 == 0, d))


def _dw_tensorized(sch, block, out, ctx, strides, dilation) -> bool:
    """(n, c_chunk, row group) fused and parallel; per row group the int32 tile zeroed, the micro-kernel
    call, the requantization of the tile (reverse_compute_at, the channel vector vectorized)."""
    loops = sch.get_loops(block)
    if len(loops) != 7:
        return False
    ext = [_extent(sch, lp) for lp in loops]
    if any(e is None for e in ext):
        return False
    n, c, oh, ow, b, kh, kw = loops
    N, chunks, ohe, owe, lanes, khe, kwe = ext
    isa = x86_qdepthwise.isa_for(ctx.target, lanes)
    if isa is None:
        return False
    threads = S.thread_count(ctx.target)
    cands = [d for d in range(1, ohe + 1) if ohe % d == 0 and
             x86_qdepthwise.fits(isa, d, owe, khe, kwe, strides, dilation)]
    if not cands:
        return False
    pair = strides[0] == 1 and dilation[0] == 1
    rows = ctx.choose(sch, "qdepthwise.rows", cands, _dw_rows(ohe, owe, lanes, N * chunks, threads, pair))
    name = x86_qdepthwise.qdepthwise_intrin(isa, rows, owe, (khe, kwe), strides, dilation)
    oho, ohi = sch.split(oh, [None, rows])
    init = sch.decompose_reduction(block, ohi)
    sch.vectorize(sch.get_loops(init)[-1])
    blk = _get_block(sch, out)
    sch.reverse_compute_at(blk, oho)
    sch.vectorize(sch.get_loops(blk)[-1])
    sch.tensorize(ohi, name)
    fused = sch.fuse(n, c, oho)
    if threads > 1:
        sch.parallel(fused)
    return True


def _dw_loops(sch, block, out, target):
    """(n, c_chunk, oh, ow | kh, kw, c_block): the channel vector vectorized, the requantization per pixel."""
    n, c, oh, ow, b, kh, kw = sch.get_loops(block)
    sch.reorder(n, c, oh, ow, kh, kw, b)
    sch.decompose_reduction(block, kh)
    sch.vectorize(b)
    blk = sch.get_block(out)
    sch.reverse_compute_at(blk, ow)
    sch.vectorize(sch.get_loops(blk)[-1])
    if S.thread_count(target) > 1:
        sch.parallel(sch.fuse(n, c, oh))


def schedule_qdepthwise_nchwc(sch, ctx):
    """Default CPU schedule of qnn.contrib_depthwise_conv2d_NCHWc: on x86 the integer dot-product
    micro-kernel over row groups (_dw_tensorized); elsewhere a loop nest with the channel vector
    vectorized; the padding copy parallel. Knob (tessera tune): qdepthwise.rows."""
    out = ctx.block
    acc = _get_block(sch, out + "_acc")
    if acc is not None:
        strides = U.int_tuple(DEPTHWISE, "strides", ctx.attrs["strides"], 2)
        dilation = U.int_tuple(DEPTHWISE, "dilation", ctx.attrs["dilation"], 2)
        if ctx.knobs is not None:
            ok = _dw_tensorized(sch, acc, out, ctx, strides, dilation)
        else:
            try:
                trial = sch.copy()
                ok = _dw_tensorized(trial, trial.get_block(out + "_acc"), out, ctx, strides, dilation)
            except (ScheduleError, TesseraError):
                ok = False
            if ok:
                ok = _dw_tensorized(sch, acc, out, ctx, strides, dilation)
        if not ok:
            try:
                trial = sch.copy()
                _dw_loops(trial, trial.get_block(out + "_acc"), out, ctx.target)
                _dw_loops(sch, acc, out, ctx.target)
            except ScheduleError:
                pass
    _schedule_rest(sch, {out, out + "_acc", *ctx.epilogue}, ctx.target)


depthwise.def_schedule(schedule_qdepthwise_nchwc)


# ---------------------------------------------------------------------------------------------
# qnn.pack_nchwc
# ---------------------------------------------------------------------------------------------
pack = register_op(
    PACK, inputs=("data",), pattern=OpPattern.INJECTIVE, attrs={"block": REQUIRED, "fill": 0},
    doc="an NCHW tensor in NCHW{block}c with its channels padded to a multiple of the block by `fill` (the "
        "zero point of a quantized tensor: a real zero).")


@pack.def_infer
def _pack_infer(types, attrs):
    (x,) = types
    U.check_rank(PACK, x, 4, "data (NCHW)")
    b = int(attrs["block"])
    if b < 1:
        raise ShapeError(f"{PACK}: block must be positive, got {b}")
    (C,) = U.static_dims(PACK, x, (1,), "channels")
    return [TensorType((x.shape[0], -(-C // b), x.shape[2], x.shape[3], b), x.dtype)]


@pack.def_compute
def _pack_compute(tensors, attrs):
    (x,) = tensors
    b = int(attrs["block"])
    C = int(x.shape[1].value)
    fill = te.const(int(attrs["fill"]), x.dtype)
    return [U.compute((x.shape[0], -(-C // b), x.shape[2], x.shape[3], b), ["n", "c", "h", "w", "cb"],
                      lambda n, c, h, w, cb: te.if_then_else(c * b + cb < C, x[n, te.min(c * b + cb, C - 1), h, w],
                                                             fill), "pack_nchwc")]


pack.def_schedule(S.schedule_injective)

__all__ = ["CONV", "DEPTHWISE", "PACK", "schedule_qconv2d_nchwc", "schedule_qdepthwise_nchwc"]
