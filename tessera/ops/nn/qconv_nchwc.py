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
Depthwise: one elementwise block (the taps, at most 64, read from the unpadded input through clamped
indices and selects, the pad value in the padding, summed in int32 and requantized), on x86 tensorized
once per channel plane by a micro-kernel of integer dot products over interleaved taps that pads and
requantizes in registers (tir/tensor_intrin/x86_qdepthwise.py); (n, c_chunk) parallel; an epilogue the
fuser attached after it runs on the plane after the kernel. More taps: a reduction over a padded copy.
Knobs (tessera tune): qconv.oc_blocks, qconv.rows, qconv.rows_outer.
"""
from __future__ import annotations

import itertools

from ... import te
from ...errors import ScheduleError, ShapeError, TesseraError
from ...ir import BufferLoad, BufferStore, TensorType
from ...ir import expr as E
from .. import _schedule as S
from ..integer import out_range, requantize_expr
from ..registry import REQUIRED, OpPattern, register_op
from . import _util as U
from .conv_nchwc import _extent, _get_block, _place_epilogue, _schedule_rest, _spatial_out, pad_nchwc
from ...tir.tensor_intrin import TensorIntrin, x86_qdepthwise
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


def _kernel_or_loops(sch, ctx, kernel, loops) -> bool:
    """kernel(sch) -> whether the micro-kernel schedule applied (False: it does not apply, and changed
    nothing); while tuning (ctx.knobs) applied to sch directly (a knob setting it refuses raises), else
    tried on a copy first. Where it does not apply, loops(sch), the loop nest, tried on a copy first too (a
    refusal leaves the stage to _schedule_rest). Whether the kernel applied."""
    if ctx.knobs is not None:
        ok = kernel(sch)
    else:
        try:
            ok = kernel(sch.copy())
        except (ScheduleError, TesseraError):
            ok = False
        if ok:
            ok = kernel(sch)
    if not ok:
        try:
            loops(sch.copy())
            loops(sch)
        except ScheduleError:
            pass
    return ok


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
    _kernel_or_loops(sch, ctx, lambda s: _tensorized(s, s.get_block(out + "_acc"), out, ctx, strides, dilation),
                     lambda s: _loops(s, s.get_block(out + "_acc"), out, ctx.target))
    done.update(ctx.epilogue)
    _schedule_rest(sch, done, ctx.target)


def _loop_nest(sch, block, out, target, order, init_at, out_at):
    """The reduction `block` as a loop nest: its loops reordered (`order`: positions in get_loops, the
    output vector last, vectorized), its init at the order[init_at] loop, the output stage (the
    requantization) at the order[out_at] loop with its vector vectorized, (n, chunk, row) fused and parallel."""
    loops = sch.get_loops(block)
    lp = [loops[i] for i in order]
    sch.reorder(*lp)
    sch.decompose_reduction(block, lp[init_at])
    sch.vectorize(lp[-1])
    blk = sch.get_block(out)
    sch.reverse_compute_at(blk, lp[out_at])
    sch.vectorize(sch.get_loops(blk)[-1])
    if S.thread_count(target) > 1:
        sch.parallel(sch.fuse(*lp[:3]))


def _loops(sch, block, out, target):
    """(n, oc, oh | ow, reduction, ob): the output vector vectorized, the requantization per row."""
    _loop_nest(sch, block, out, target, (0, 1, 2, 3, 5, 6, 7, 8, 4), 3, 2)


conv2d.def_schedule(schedule_qconv2d_nchwc)


# ---------------------------------------------------------------------------------------------
# depthwise
# ---------------------------------------------------------------------------------------------
depthwise = register_op(
    DEPTHWISE, inputs=("data", "weight", "bias", "multiplier"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs=_COMMON,
    doc="int8 depthwise 2-d convolution in a blocked layout with the requantization fused: data uint8 and "
        "output NCHW{x}c, weight int8 (C/x, KH, KW, x), bias int32 and multiplier float32 (C/x, x).")


_MAX_TAPS = (2**31 - 1) // (255 * 128)   # the window's u8 x s8 products sum in int32 without overflow
_UNROLLED_TAPS = 64                       # as the float depthwise: one elementwise expression up to this


@depthwise.def_infer
def _dw_infer(types, attrs):
    op = DEPTHWISE
    data, weight, bias, mult = types
    U.check_dtype(op, weight, ("int8",), "weight")
    U.check_rank(op, weight, 4, "weight (C/x, KH, KW, x)")
    Cc, KH, KW, x = U.static_dims(op, weight, range(4), "weight dimensions")
    if KH * KW > _MAX_TAPS:
        raise ShapeError(f"{op}: a {KH}x{KW} window sums more u8 x s8 products than int32 holds (<= {_MAX_TAPS} taps)")
    _check_common(op, data, bias, mult, Cc, x, attrs)
    Dc, H, W, xb = U.static_dims(op, data, (1, 2, 3, 4), "channel blocks, spatial and block dimensions")
    if (Dc, xb) != (Cc, x):
        raise ShapeError(f"{op}: weight {weight} must be ({Dc}, KH, KW, {xb}) for data {data} (one filter a channel)")
    strides, padding, dilation = _attrs(op, attrs)
    OH, OW = _spatial_out(op, H, W, KH, KW, strides, padding, dilation)
    return [TensorType((data.shape[0], Cc, OH, OW, x), attrs["out_dtype"])]


def _dw_plane_of(data_shape, weight_shape, attrs) -> x86_qdepthwise.Plane:
    """The plane kernel's parameters (tir/tensor_intrin/x86_qdepthwise.Plane) of the op."""
    strides, padding, dilation = _attrs(DEPTHWISE, attrs)
    _, KH, KW, x = (int(getattr(s, "value", s)) for s in weight_shape)
    H, W = (int(getattr(s, "value", s)) for s in data_shape[2:4])
    lo, hi = out_range(DEPTHWISE, attrs)
    return x86_qdepthwise.Plane(H, W, x, (KH, KW), strides, dilation, padding, int(attrs["pad_value"]),
                                int(attrs["output_zero_point"]), lo, hi, str(attrs["out_dtype"]))


def _dw_value(read, wread, bias, mult, oh, ow, p):
    """The requantized output at (oh, ow) of one channel: the KH x KW taps read(h, w) from the unpadded
    input at indices clamped into it, a tap in the padding selected to the pad value (the input zero
    point), times wread(kh, kw), summed in int32 (exact), + bias, requantized (ops/integer.py). The op's
    compute and the plane kernel's desc both build it (tensorize matches them structurally)."""

    pv = te.const(p.pv, "uint8")
    total = None
    for i, j in itertools.product(range(p.KH), range(p.KW)):
        h, ch = U.window_tap(oh, i, p.sh, p.dh, p.pt, p.H, p.OH)
        w, cw = U.window_tap(ow, j, p.sw, p.dw, p.pl, p.W, p.OW)
        x = read(h, w)
        if ch or cw:
            x = E.Select(te.all(*(ch + cw)), x, pv)
        term = x.astype("int32") * wread(i, j).astype("int32")
        total = term if total is None else total + term
    attrs = {"precision": "float32", "output_zero_point": p.zp, "out_dtype": p.odt}
    return requantize_expr(total + bias, mult, attrs, p.lo, p.hi)


def _dw_desc(p):
    """The plane kernel's desc: _dw_value over one (OH, OW, L) plane of A (H, W, L), W, B, M -> C."""
    A = te.placeholder((p.H, p.W, p.L), "uint8", "A")
    Wt = te.placeholder((p.KH, p.KW, p.L), "int8", "W")
    B = te.placeholder((p.L,), "int32", "B")
    M = te.placeholder((p.L,), "float32", "M")
    C = te.compute((p.OH, p.OW, p.L), lambda oh, ow, b: _dw_value(
        lambda h, w: A[h, w, b], lambda i, j: Wt[i, j, b], B[b], M[b], oh, ow, p), name="C")
    return te.create_prim_func([A, Wt, B, M, C])


def _dw_from_name(m) -> None:
    isa, p = x86_qdepthwise.plane_of_name(m)
    try:
        x86_qdepthwise.qdepthwise_intrin(isa, p, _dw_desc)
    except TesseraError:
        pass


TensorIntrin.register_family(x86_qdepthwise.NAME_PATTERN, _dw_from_name)


@depthwise.def_compute
def _dw_compute(tensors, attrs):
    data, weight, bias, mult = tensors
    lo, hi = out_range(DEPTHWISE, attrs)
    (sh, sw), padding, (dh, dw) = _attrs(DEPTHWISE, attrs)
    Cc, KH, KW, x = (int(s.value) for s in weight.shape)
    H, W = (int(s.value) for s in data.shape[2:4])
    OH, OW = _spatial_out(DEPTHWISE, H, W, KH, KW, (sh, sw), padding, (dh, dw))
    names = ["n", "c_chunk", "oh", "ow", "c_block"]
    shape = (data.shape[0], Cc, OH, OW, x)
    if KH * KW <= _UNROLLED_TAPS and str(attrs["precision"]) == "float32":
        # one elementwise block (no padded copy, no int32 tile), then a copy to the output: the stage an
        # epilogue the fuser attaches folds into, so that the block the kernel replaces stays this one
        p = _dw_plane_of(data.shape, weight.shape, attrs)
        q = U.compute(shape, names, lambda n, c, oh, ow, b: _dw_value(
            lambda h, w: data[n, c, h, w, b], lambda i, j: weight[c, i, j, b], bias[c, b], mult[c, b], oh, ow, p),
            "qdepthwise_nchwc_q")
        return [U.compute(shape, names, lambda *i: q[i], "qdepthwise_nchwc")]
    src = pad_nchwc(data, padding, int(attrs["pad_value"]))
    kh, kw = te.reduce_axis((0, KH), "kh"), te.reduce_axis((0, KW), "kw")

    def body(n, c, oh, ow, b):
        p = src[n, c, oh * sh + kh * dh, ow * sw + kw * dw, b].astype("int32") * weight[c, kh, kw, b].astype("int32")
        return te.sum(p, axis=[kh, kw])

    acc = U.compute(shape, names, body, "qdepthwise_nchwc_acc")
    return [U.compute(shape, names, lambda n, c, oh, ow, b: requantize_expr(
        acc[n, c, oh, ow, b] + bias[c, b], mult[c, b], attrs, lo, hi), "qdepthwise_nchwc")]


def _dw_copy_of(sch, out, q) -> bool:
    """Whether block `out` only copies q's result (no epilogue folded into it)."""
    st = sch.get(sch.get_block(out)).body
    qbuf = sch.get(sch.get_block(q)).writes[0].buffer
    return isinstance(st, BufferStore) and isinstance(st.value, BufferLoad) and st.value.buffer is qbuf


def _dw_output(sch, out, q, loop, target) -> None:
    """The output stage: a plain copy folded into q's block; one carrying an epilogue placed under `loop`,
    after q's plane, its channel vector vectorized."""
    if _dw_copy_of(sch, out, q):
        sch.reverse_compute_inline(sch.get_block(out))
    else:
        _place_epilogue(sch, [out], loop, target)


def _dw_plane(sch, ctx) -> bool:
    """(n, c_chunk) fused and parallel, each channel plane one call of the micro-kernel, which pads and
    requantizes (tir/tensor_intrin/x86_qdepthwise.py); the output stage and the epilogue after it."""
    out, q = ctx.block, ctx.block + "_q"
    loops = sch.get_loops(sch.get_block(q))
    ext = [_extent(sch, lp) for lp in loops]
    if len(loops) != 5 or any(e is None for e in ext) or len(ctx.input_types) != 4:
        return False
    n, c, oh, _, _ = loops
    isa = x86_qdepthwise.isa_for(ctx.target, ext[4])
    if isa is None:
        return False
    p = _dw_plane_of(ctx.input_types[0].shape, ctx.input_types[1].shape, ctx.attrs)
    if p.L != ext[4] or (p.OH, p.OW) != tuple(ext[2:4]) or not x86_qdepthwise.fits(isa, p):
        return False
    name = x86_qdepthwise.qdepthwise_intrin(isa, p, _dw_desc)
    fused = sch.fuse(n, c)
    _dw_output(sch, out, q, fused, ctx.target)
    sch.tensorize(oh, name)
    _place_epilogue(sch, ctx.epilogue, fused, ctx.target)
    if S.thread_count(ctx.target) > 1:
        sch.parallel(fused)
    return True


def _dw_plane_loops(sch, ctx):
    """(n, c_chunk, oh | ow, c_block): the channel vector vectorized, the output stage per row."""
    out, q = ctx.block, ctx.block + "_q"
    n, c, oh, ow, b = sch.get_loops(sch.get_block(q))
    sch.vectorize(b)
    row = sch.fuse(n, c, oh)
    _dw_output(sch, out, q, row, ctx.target)
    _place_epilogue(sch, ctx.epilogue, row, ctx.target)
    if S.thread_count(ctx.target) > 1:
        sch.parallel(row)


def _dw_loops(sch, block, out, target):
    """(n, c_chunk, oh, ow | kh, kw, c_block): the channel vector vectorized, the requantization per pixel."""
    _loop_nest(sch, block, out, target, (0, 1, 2, 3, 5, 6, 4), 4, 3)


def schedule_qdepthwise_nchwc(sch, ctx):
    """Default CPU schedule of qnn.contrib_depthwise_conv2d_NCHWc: on x86 one micro-kernel call a channel
    plane (_dw_plane); elsewhere a loop nest with the channel vector vectorized. A window of more than
    _UNROLLED_TAPS taps: the reduction's loop nest, the padding copy parallel."""
    out = ctx.block
    if _get_block(sch, out + "_q") is not None:
        _kernel_or_loops(sch, ctx, lambda s: _dw_plane(s, ctx), lambda s: _dw_plane_loops(s, ctx))
    elif _get_block(sch, out + "_acc") is not None:
        _kernel_or_loops(sch, ctx, lambda s: False, lambda s: _dw_loops(s, s.get_block(out + "_acc"), out, ctx.target))
    _schedule_rest(sch, {out, out + "_q", out + "_acc", *ctx.epilogue}, ctx.target)


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


def schedule_pack_nchwc(sch, ctx):
    """Rows (n, c, h) parallel; a row's pixels in vectors, each of the block's channels its own unrolled
    vector statement (a lane a pixel: loads contiguous along the NCHW row, stores a block apart), where the
    block is short; else the injective schedule (lanes over the block gather across channel planes)."""
    blk = _get_block(sch, ctx.block)
    loops = sch.get_loops(blk) if blk is not None else []
    ext = [_extent(sch, lp) for lp in loops]
    # lanes of the float32 quantization a pack may carry (not the uint8 output's 64): a divisor of the row
    lanes = next((x for x in (16, 8, 4) if len(ext) == 5 and ext[3] is not None and ext[3] % x == 0
                  and x <= int(getattr(ctx.target, "vector_bits", 128)) // 32), 0)
    if len(loops) != 5 or None in ext or ext[4] > 16 or lanes < 2:
        S.schedule_injective(sch, ctx)
        return
    n, c, h, w, cb = loops
    work = ext[0] * ext[1] * ext[2] * ext[3] * ext[4]
    wo, wi = sch.split(w, [None, lanes])
    sch.reorder(n, c, h, wo, cb, wi)
    sch.unroll(cb)
    sch.vectorize(wi)
    if S.thread_count(ctx.target) > 1 and work >= S.PARALLEL_MIN_WORK:
        sch.parallel(sch.fuse(n, c, h))


pack.def_schedule(schedule_pack_nchwc)

__all__ = ["CONV", "DEPTHWISE", "PACK", "schedule_qconv2d_nchwc", "schedule_qdepthwise_nchwc"]
