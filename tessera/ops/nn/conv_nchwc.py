"""Blocked-layout convolutions (TVM's x86 NCHW[x]c strategy): nn.contrib_conv2d_NCHWc and
nn.contrib_depthwise_conv2d_NCHWc.

    data   NCHW{ib}c    (N, C / ib, H, W, ib)
    weight OIHW{ib}i{ob}o  (O / ob, C / ib, KH, KW, ib, ob)       (depthwise: OIHW1i{ob}o,
                                                                   (C / ob, 1, KH, KW, 1, ob))
    output NCHW{ob}c    (N, O / ob, OH, OW, ob)

A block of ob output channels is one SIMD vector (8 fp32 lanes with AVX2, 16 with AVX-512), so the
innermost dimension of every tensor is a vector: a convolution updates a row of output vectors
from broadcast input values and vector loads of weights that the graph pass alter_layout packed
once, at compile time (graph/passes/alter_layout.py). Padding is (top, left, bottom, right) as
the NCHW ops' (begin..., end...).

Default CPU schedule (float32, AVX2 or AVX-512): the output rows of V blocks for one (n, block
group, row group) are one call of a register-tiled micro-kernel (tensorize; tir/tensor_intrin/x86_conv.py;
one row a call, or several when rows are short, so that the weights it brings to L1 serve enough
register tiles), the (n, block group, row group) loops fused and parallel (the row groups outside the
block groups where the input is larger than the weights), the fused epilogue
(bias, relu, residual add) computed right after each call while its output is in L1
(reverse_compute_at; where it fits, lowering folds it into the call: tir/transform/fuse_intrin_epilogue.py), the padding copy parallel over rows, or, with the row groups outer and a small
halo, each row group's input rows padded inside its task before its block groups' calls. 1x1 layers
with large weights prefetch them in the micro-kernel. Other dtypes or CPUs: the same loop order with
an (ow tile x vector) register block.
Depthwise: taps unrolled in the expression (no reduction loop) and read from the unpadded input,
the channel vector vectorized, rows parallel; a pixel whose window lies inside the input reads its
taps directly, one at the border clamps each index and zeroes a tap in the padding with a select.
"""
from __future__ import annotations

import itertools
import re

from ... import te
from ...errors import DTypeError, ScheduleError, ShapeError, TesseraError
from ...ir import TensorType
from ...target import Target
from ...ir import expr as E
from .. import _schedule as S
from ..registry import OpPattern, register_op
from . import _util as U
from ...tir.tensor_intrin.x86_conv import MAX_V, conv_row_intrin, isa_of, lanes_of, row_tiles

CONV = "nn.contrib_conv2d_NCHWc"
DEPTHWISE = "nn.contrib_depthwise_conv2d_NCHWc"

# weights from this size up are prefetched by the micro-kernel (1x1 layers; `conv.prefetch`)
PREFETCH_BYTES = 256 * 1024

_DATA = re.compile(r"^NCHW(\d+)c$")
_KERNEL = re.compile(r"^OIHW(\d+)i(\d+)o$")


def data_layout_block(op, layout) -> int:
    """8 for "NCHW8c"; TesseraError for anything else."""
    m = _DATA.match(str(layout))
    if not m or int(m.group(1)) < 1:
        raise TesseraError(f"{op}: layout {layout!r} is not a blocked layout NCHW{{x}}c such as 'NCHW8c'")
    return int(m.group(1))


def kernel_layout_blocks(op, layout) -> tuple:
    """(8, 16) for "OIHW8i16o"."""
    m = _KERNEL.match(str(layout))
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise TesseraError(f"{op}: kernel_layout {layout!r} is not a blocked kernel layout OIHW{{i}}i{{o}}o such "
                           f"as 'OIHW8i8o'")
    return int(m.group(1)), int(m.group(2))


# ---------------------------------------------------------------------------------------------
# shapes
# ---------------------------------------------------------------------------------------------
def _spatial_out(op, H, W, KH, KW, strides, padding, dilation):
    out = []
    for k, (S_, K_) in enumerate(((H, KH), (W, KW))):
        padded = S_ + padding[k] + padding[2 + k]
        window = dilation[k] * (K_ - 1) + 1
        if window > padded:
            raise ShapeError(f"{op}: kernel {KH}x{KW} (dilated extent {window} on spatial axis {k}) is larger than "
                             f"the padded input ({S_} + padding {padding[k]}+{padding[2 + k]} = {padded})")
        out.append((padded - window) // strides[k] + 1)
    return out


def _conv_attrs(op, attrs):
    strides = U.int_tuple(op, "strides", attrs["strides"], 2, minimum=1)
    dilation = U.int_tuple(op, "dilation", attrs["dilation"], 2, minimum=1)
    padding = U.padding_tuple(op, attrs["padding"], 2)
    return strides, padding, dilation


def _check_float(op, data: TensorType, weight: TensorType):
    U.check_dtype(op, data, U.FLOATS, "data")
    U.same_dtype(op, (data, weight), ("data", "weight"))


def conv2d_nchwc_shape(op, data: TensorType, weight: TensorType, attrs) -> tuple:
    """Output shape of nn.contrib_conv2d_NCHWc, checking the layouts against the shapes."""
    U.check_rank(op, data, 5, "data (NCHW{x}c)")
    U.check_rank(op, weight, 6, "weight (OIHW{i}i{o}o)")
    strides, padding, dilation = _conv_attrs(op, attrs)
    if int(attrs["groups"]) != 1:
        raise TesseraError(f"{op}: groups={attrs['groups']}; the blocked convolution takes groups=1 (depthwise: "
                           f"{DEPTHWISE})")
    ib = data_layout_block(op, attrs["data_layout"])
    kib, kob = kernel_layout_blocks(op, attrs["kernel_layout"])
    ob = data_layout_block(op, attrs["out_layout"])
    Cc, H, W, xb = U.static_dims(op, data, (1, 2, 3, 4), "channel blocks, spatial and block dimensions")
    Oc, WCc, KH, KW, wib, wob = U.static_dims(op, weight, range(6), "weight dimensions")
    if xb != ib:
        raise ShapeError(f"{op}: data {data} has blocks of {xb} channels but data_layout is {attrs['data_layout']!r}")
    if (wib, wob) != (kib, kob):
        raise ShapeError(f"{op}: weight {weight} has blocks {wib}i{wob}o but kernel_layout is "
                         f"{attrs['kernel_layout']!r}")
    if wib != ib or WCc != Cc:
        raise ShapeError(f"{op}: weight {weight} reads {WCc} blocks of {wib} input channels, the data has {Cc} "
                         f"blocks of {ib}")
    if wob != ob:
        raise ShapeError(f"{op}: weight {weight} makes blocks of {wob} output channels but out_layout is "
                         f"{attrs['out_layout']!r}")
    OH, OW = _spatial_out(op, H, W, KH, KW, strides, padding, dilation)
    return (data.shape[0], Oc, OH, OW, ob)


def depthwise_nchwc_shape(op, data: TensorType, weight: TensorType, attrs) -> tuple:
    U.check_rank(op, data, 5, "data (NCHW{x}c)")
    U.check_rank(op, weight, 6, "weight (OIHW1i{o}o)")
    strides, padding, dilation = _conv_attrs(op, attrs)
    ib = data_layout_block(op, attrs["data_layout"])
    kib, kob = kernel_layout_blocks(op, attrs["kernel_layout"])
    ob = data_layout_block(op, attrs["out_layout"])
    Cc, H, W, xb = U.static_dims(op, data, (1, 2, 3, 4), "channel blocks, spatial and block dimensions")
    Oc, one, KH, KW, wib, wob = U.static_dims(op, weight, range(6), "weight dimensions")
    if xb != ib or ob != ib or kib != 1 or kob != ib:
        raise ShapeError(f"{op}: layouts data {attrs['data_layout']!r}, kernel {attrs['kernel_layout']!r}, out "
                         f"{attrs['out_layout']!r} for data {data}: a depthwise convolution keeps the block "
                         f"(NCHW{{x}}c -> NCHW{{x}}c, kernel OIHW1i{{x}}o)")
    if (Oc, one, wib, wob) != (Cc, 1, 1, ib):
        raise ShapeError(f"{op}: weight {weight} must be ({Cc}, 1, KH, KW, 1, {ib}) for data {data} (one filter "
                         f"per channel)")
    OH, OW = _spatial_out(op, H, W, KH, KW, strides, padding, dilation)
    return (data.shape[0], Cc, OH, OW, ib)


# ---------------------------------------------------------------------------------------------
# computes
# ---------------------------------------------------------------------------------------------
def pad_nchwc(data, padding, value, name="data_pad"):
    """NCHW{x}c data padded with `value` on H and W (padding = (top, left, bottom, right))."""
    if not any(padding):
        return data
    pt, pl, pb, pr = padding
    H, W = (int(s.value) for s in data.shape[2:4])
    shape = (data.shape[0], data.shape[1], H + pt + pb, W + pl + pr, data.shape[4])
    fill = te.const(value, data.dtype) if isinstance(value, (int, float)) else value

    def body(n, c, h, w, cb):
        conds = []
        if pt:
            conds.append(h >= pt)
        if pb:
            conds.append(h < H + pt)
        if pl:
            conds.append(w >= pl)
        if pr:
            conds.append(w < W + pl)
        # the load at indices clamped into the data, in bounds at every point, and a select: a vector
        # load of the pixel's block (if_then_else, which vectorize_loop keeps a loop, made gcc copy it
        # a byte at a time: the int8 depthwise's padding copy took longer than its convolution)
        hi = te.max(te.min(h - pt, H - 1), 0) if pt or pb else h
        wi = te.max(te.min(w - pl, W - 1), 0) if pl or pr else w
        return E.Select(te.all(*conds), data[n, c, hi, wi, cb], E.convert(fill))

    return U.compute(shape, ["n", "c", "hp", "wp", "cb"], body, name)


def _conv_args(op, data, strides, padding, dilation, out_dtype):
    """(strides, padding, dilation, out dtype, accumulator dtype) of a blocked convolution, checked."""
    strides = U.int_tuple(op, "strides", strides, 2, minimum=1)
    dilation = U.int_tuple(op, "dilation", dilation, 2, minimum=1)
    padding = U.padding_tuple(op, padding, 2)
    odt = U.out_dtype(op, out_dtype, data.dtype)
    return strides, padding, dilation, odt, U.accum_dtype(odt if odt.bits >= data.dtype.bits else data.dtype)


def conv2d_nchwc(data, weight, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), out_dtype=None,
                 name="conv2d_NCHWc"):
    """The blocked convolution compute: a sum over (input block, kh, kw, input lane)."""
    op = CONV
    strides, padding, dilation, odt, acc = _conv_args(op, data, strides, padding, dilation, out_dtype)
    Oc, Cc, KH, KW, ib, ob = (int(s.value) for s in weight.shape)
    H, W = (int(s.value) for s in data.shape[2:4])
    OH, OW = _spatial_out(op, H, W, KH, KW, strides, padding, dilation)
    src = pad_nchwc(data, padding, 0)
    icc = te.reduce_axis((0, Cc), "icc")
    kh = te.reduce_axis((0, KH), "kh")
    kw = te.reduce_axis((0, KW), "kw")
    ici = te.reduce_axis((0, ib), "ici")
    sh, sw = strides
    dh, dw = dilation

    def body(n, oc, oh, ow, oci):
        x = src[n, icc, oh * sh + kh * dh, ow * sw + kw * dw, ici]
        return te.sum(U.cast(x, acc) * U.cast(weight[oc, icc, kh, kw, ici, oci], acc), axis=[icc, kh, kw, ici])

    shape = (data.shape[0], Oc, OH, OW, ob)
    names = ["n", "oc_chunk", "oh", "ow", "oc_block"]
    if acc == odt:
        return U.compute(shape, names, body, name)
    out = U.compute(shape, names, body, name + "_acc")
    return U.compute(shape, names, lambda *i: U.cast(out[i], odt), name)


def depthwise_conv2d_nchwc(data, weight, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), out_dtype=None,
                           name="depthwise_conv2d_NCHWc"):
    """Blocked depthwise convolution: the taps unrolled (at most 64) in one elementwise expression,
    else a reduction over them."""
    op = DEPTHWISE
    strides, padding, dilation, odt, acc = _conv_args(op, data, strides, padding, dilation, out_dtype)
    Cc, _, KH, KW, _, cb = (int(s.value) for s in weight.shape)
    H, W = (int(s.value) for s in data.shape[2:4])
    OH, OW = _spatial_out(op, H, W, KH, KW, strides, padding, dilation)
    sh, sw = strides
    dh, dw = dilation
    shape = (data.shape[0], Cc, OH, OW, cb)
    names = ["n", "c_chunk", "oh", "ow", "c_block"]

    if KH * KW <= 64:
        # taps unrolled straight from the unpadded input: a tap that can fall into the padding
        # reads a clamped (in-bounds) element and a select on its position, one scalar test per
        # tap and pixel, zeroes it; no padded copy of the input is made
        pt, pl = padding[0], padding[1]


        def window_inside(pos, K, step, first, pad, size, extent):
            """Conditions for the first and last taps of output `pos` on one axis to be in bounds."""
            conds = []
            if pad > 0:
                conds.append(pos * step - pad >= 0)
            if (extent - 1) * step + (K - 1) * first - pad >= size:
                conds.append(pos * step + ((K - 1) * first - pad) < size)
            return conds

        def taps(n, c, oh, ow, b, wts, border):
            """The sum over the taps; `border`: clamped reads, a tap in the padding selected to 0."""
            total = None
            zero = te.const(0, acc)
            for (i, j), w_k in zip(itertools.product(range(KH), range(KW)), wts):
                if border:
                    h, ch = U.window_tap(oh, i, sh, dh, pt, H, OH)
                    w_, cw = U.window_tap(ow, j, sw, dw, pl, W, OW)
                else:
                    h, ch = oh * sh + (i * dh - pt), ()
                    w_, cw = ow * sw + (j * dw - pl), ()
                x = U.cast(data[n, c, h, w_, b], acc)
                if ch or cw:
                    x = E.Select(te.all(*(ch + cw)), x, zero)
                term = x * w_k
                total = term if total is None else total + term
            return total

        def body(n, c, oh, ow, b):
            # a pixel whose whole window lies inside the input (first and last taps of both axes
            # in bounds) reads its taps unclamped and unselected: one test a pixel (a C ternary, only
            # the taken side runs) instead of a clamp and a select a tap. The weights are bound
            # (Let) before that branch, so that their loads run on every path and the C compiler
            # keeps them in registers across the row (measured: neither change helps alone)
            inside = window_inside(oh, KH, sh, dh, pt, H, OH) + window_inside(ow, KW, sw, dw, pl, W, OW)
            values = [U.cast(weight[c, 0, i, j, 0, b], acc) for i, j in itertools.product(range(KH), range(KW))]
            wts = [E.Var(f"w_{i}_{j}", acc) for i, j in itertools.product(range(KH), range(KW))]
            total = taps(n, c, oh, ow, b, wts, True)
            if inside:
                total = E.Select(te.all(*inside), taps(n, c, oh, ow, b, wts, False), total)
            for var, value in reversed(list(zip(wts, values))):
                total = E.Let(var, value, total)
            return U.cast(total, odt)

        return U.compute(shape, names, body, name)
    src = pad_nchwc(data, padding, 0)
    kh = te.reduce_axis((0, KH), "kh")
    kw = te.reduce_axis((0, KW), "kw")

    def red(n, c, oh, ow, b):
        x = U.cast(src[n, c, oh * sh + kh * dh, ow * sw + kw * dw, b], acc)
        return te.sum(x * U.cast(weight[c, 0, kh, kw, 0, b], acc), axis=[kh, kw])

    if acc == odt:
        return U.compute(shape, names, red, name)
    out = U.compute(shape, names, red, name + "_acc")
    return U.compute(shape, names, lambda *i: U.cast(out[i], odt), name)


# ---------------------------------------------------------------------------------------------
# schedules
# ---------------------------------------------------------------------------------------------
def _extent(sch, loop):
    ext = sch.get(loop).extent
    return ext.value if isinstance(ext, E.IntImm) else None


def _get_block(sch, name):
    try:
        return sch.get_block(name)
    except ScheduleError:
        return None


def _group(chunks: int, ow: int, taps: int, isa: str = "avx2", in_blocks: int | None = None) -> int:
    """Output blocks per micro-kernel call (V). AVX2 (16 registers), measured layer by layer (ResNet,
    MobileNetV2): two blocks (6-pixel tiles, 12 accumulators) where rows are long (>= 28 pixels, or
    >= 14 for kernels with several taps), else one block with the widest pixel tiles (up to 14
    accumulators; short rows of 1x1 convolutions gain more from it than from a second weight vector).
    Three or four blocks (4- and 3-pixel tiles) measured slower everywhere. AVX-512 (32 registers,
    14-pixel tiles for one or two blocks; docs/internals.md "1x1 convolutions", measured inside
    ResNet-50 and MobileNetV2 by exe.profile): rows of <= 7 pixels take two blocks (one fills only 7
    accumulators) for kernels with several taps (ResNet-50's 3x3 stride-2 layer to 7x7: 0.75x the
    time), for 1x1 convolutions that do not widen the channels (O <= C: 0.83-0.97x) and, since the
    micro-kernel tiles a 7x7 map across its rows and prefetches streamed weights, for 1x1 expansions
    over >= 16 input blocks (ResNet-50's 512 -> 2048 and 1024 -> 2048 stride 2, MobileNetV2's
    320 -> 1280: 0.91-0.93x; its 160 -> 960, 10 input blocks, stays at one: 1.23x with two); a 1x1 convolution
    reducing one input block (MobileNetV2's 16 -> 96 channels at 112x112) takes one (0.55-0.6x the
    time of two); rows of >= 14 pixels take two, 1x1 too (28 accumulators; ResNet-50's and
    MobileNetV2's 1x1 layers at 14x14: 0.92-0.98x the time of one); else the AVX2 rule."""
    if isa == "avx512vl8":
        # 8-channel blocks on AVX-512 (channel counts of 16k + 8: an odd number of blocks): three a call
        # where they divide (9-pixel tiles, 27 ymm accumulators of the 32 registers), else one; MobileNetV2's
        # 96 -> 24 and 144 -> 24 at 56x56 alone: 0.88-0.91x the time of the AVX2 kernel's 14 x 1 tiles
        return 3 if chunks % 3 == 0 else 1
    if isa == "avx512" and chunks % 2 == 0 and ow <= 7 and (taps > 1 or (in_blocks or 0) >= min(chunks, 16)):
        return 2
    if isa == "avx512" and taps == 1 and in_blocks == 1:
        return 1
    if isa == "avx512" and chunks % 2 == 0 and ow >= 14:
        return 2
    if chunks % 2 == 0 and (ow >= 28 or (taps > 1 and ow >= 14)):
        return 2
    return 1


def _parallel_outer(sch, loops, target, work):
    if len(loops) > 1:
        fused = sch.fuse(*loops)
    else:
        fused = loops[0]
    if S.thread_count(target) > 1 and work >= S.PARALLEL_MIN_WORK:
        sch.parallel(fused)
    return fused


def _place_epilogue(sch, epilogue, loop, target):
    """reverse_compute_at every epilogue block into `loop` and vectorize its channel vector; a block
    that refuses stays where it is (scheduled as a spatial block)."""
    for name in epilogue:
        blk = _get_block(sch, name)
        if blk is None:
            continue
        try:
            sch.reverse_compute_at(blk, loop)
        except ScheduleError:
            try:
                S.schedule_spatial_block(sch, blk, target)
            except ScheduleError:
                pass
            continue
        try:
            S.vectorize_short(sch, sch.get_loops(blk)[-1])
        except ScheduleError:
            pass


def _kernel_isa(sch, block, target):
    """The ISA of the micro-kernel for this conv block, or None (not float32, or no kernel)."""
    blk = sch.get(block)
    if str(blk.writes[0].buffer.dtype) != "float32" or any(str(r.buffer.dtype) != "float32" for r in blk.reads):
        return None
    isa = isa_of(target)
    if isa is None:
        return None
    ob = _extent(sch, sch.get_loops(block)[4])
    if ob == lanes_of(isa):
        return isa
    if ob == 8 and isa == "avx512":
        # 8-channel blocks on AVX-512: ymm vectors in all 32 registers with AVX-512VL, else the AVX2 kernel
        return "avx512vl8" if Target(target).has_feature("avx512vl") else "avx2"
    return None


def _tensorized(sch, block, ctx, epilogue, strides, dilation):
    """The micro-kernel schedule (module docstring): the names of the other stages it placed (a per-row-group
    padding), or False (and nothing changed) when it does not apply. Its knobs (ctx.choose; the defaults
    are the hand choices): output blocks a call (V), whether the block groups or the row groups are the
    outer parallel loop, whether row groups pad their own input rows, output rows a call, input-channel
    chunks a call (the reduction in slices, default whole) and the weight prefetch."""
    target = ctx.target
    isa = _kernel_isa(sch, block, target)
    if isa is None:
        return False
    loops = sch.get_loops(block)
    if len(loops) != 9:
        return False
    n, oc, oh, ow, ob, icc, kh, kw, ici = loops
    ib = _extent(sch, ici)
    chunks = _extent(sch, oc)
    if ib is None or chunks is None:
        return False
    owe, ohe, khe, kwe = _extent(sch, ow), _extent(sch, oh), _extent(sch, kh), _extent(sch, kw)
    if owe is None or ohe is None or khe is None or kwe is None:
        return False
    v = ctx.choose(sch, "conv.oc_blocks", [c for c in range(1, MAX_V + 1) if chunks % c == 0],
                   _group(chunks, owe, khe * kwe, isa, _extent(sch, icc)))
    # row groups outer where the input is larger than the weights (each block group would otherwise
    # read the whole input again: ResNet-50's 1x1 layers at 56x56, 0.86-0.96x the time in
    # benchmarks/conv1x1.py's layers), block groups outer where the weights are larger (7x7: the
    # weights would be read again per row group)
    in_pixels = ohe * owe * strides[0] * strides[1]
    rows_outer = ctx.choose(sch, "conv.rows_outer", [True, False], in_pixels > chunks * _extent(sch, ob) * khe * kwe)
    # a padded input with the row groups outer: each row group pads its own input rows (with their
    # halo) into a local buffer inside the parallel loop and runs its block groups in that task,
    # instead of a pass padding the whole input, as large, into memory before the convolution
    # (ResNet-50's 3x3 stride-2 layer 128 -> 128 at 56x56, 1 thread: 0.90x the time alone, 0.81-0.83x in
    # the model; its 7x7 stride-2 stem, 7 rows a group: 0.96x), where the halos pad the input rows at most
    # 1.5 times and the row groups are enough tasks (_pad_rows_per_call)
    batch = _extent(sch, n) or S.thread_count(target)
    per_row = sum(c for _, c in row_tiles(isa, v, owe))
    threads = S.thread_count(target)
    pad = _pad_block(sch, block)
    r = None                          # rows a call where row groups pad their own input rows
    if pad is not None and rows_outer:
        r = _pad_rows_per_call(isa, v, ohe, owe, batch, threads, khe, strides[0], dilation[0])
        pad_rows = ctx.choose(sch, "conv.pad_in_row_groups", [True, False], r is not None)
    else:
        pad_rows = False
    rows = ctx.choose(sch, "conv.rows", [d for d in range(1, ohe + 1) if ohe % d == 0 and d * per_row <= 32],
                      r if pad_rows and r is not None else
                      _rows_per_call(isa, v, ohe, owe, batch * (1 if pad_rows else chunks // v), threads))
    icce = _extent(sch, icc)
    ic_inner = icce if icce is None else ctx.choose(
        sch, "conv.ic_chunks_a_call", [d for d in range(1, icce) if icce % d == 0 and 8 * d >= icce], icce)
    # software prefetch of the next weights (the micro-kernel's first tile of each input-channel chunk):
    # 1x1 layers whose weights (>= 256 KB) come from memory rather than cache: ResNet-50's at 28x28 and
    # smaller, 0.83-0.97x the time in the model (exe.profile, 1 thread); its 64 KB layers at 56x56 go
    # without (within noise), and so do the 3x3 layers (their stride-2 ones 1.02-1.08x with it; with
    # prefetcht1 instead of prefetcht0 the 1x1 ones lose too: 1.01x)
    weight_bytes = chunks * _extent(sch, ob) * (icce or 1) * ib * khe * kwe * 4
    prefetch = ctx.choose(sch, "conv.prefetch", [True, False], khe * kwe == 1 and weight_bytes >= PREFETCH_BYTES)
    name = conv_row_intrin(isa, v, ib, strides, dilation, owe, rows, prefetch)
    work = 2 * chunks * ib * ohe * owe * (icce or 1) * 64
    oco, oci = sch.split(oc, [None, v])
    oho, ohi = sch.split(oh, [None, rows])
    outer = [n, oho, oco] if rows_outer else [n, oco, oho]
    if ic_inner is not None and ic_inner < icce:
        # the reduction over input channels in slices: a slice's weights stay in cache while
        # the call sweeps its rows; each call adds its slice's sum into the output tile
        ico, ici_ = sch.split(icc, [None, ic_inner])
        sch.reorder(*outer, ico, oci, ohi, ow, ob, ici_, kh, kw, ici)
        init = sch.decompose_reduction(block, ico)
    else:
        sch.reorder(*outer, oci, ohi, ow, ob, icc, kh, kw, ici)
        init = sch.decompose_reduction(block, oci)
    sch.vectorize(sch.get_loops(init)[-1])
    _place_epilogue(sch, epilogue, outer[-1], target)    # while the conv block still writes points
    sch.tensorize(oci, name)
    if pad_rows:
        sch.compute_at(pad, oho)
        S.vectorize_short(sch, sch.get_loops(pad)[-1])
        _parallel_outer(sch, outer[:2], target, work)
        return (sch.get(pad).name_hint,)
    _parallel_outer(sch, outer, target, work)
    return ()


def _pad_block(sch, block):
    """The padding stage (pad_nchwc) that writes the conv block's input, or None."""
    data = sch.get(block).reads[0].buffer
    for blk in sch.get_child_blocks(sch.get_block("root")):
        b = sch.get(blk)
        if b.name_hint.endswith("_pad") and b.writes and b.writes[0].buffer == data:
            return blk
    return None


def _halo(rows, kh, stride, dilation) -> float:
    """Input rows a group of `rows` output rows pads, over the rows its stride advances."""
    return ((rows - 1) * stride + (kh - 1) * dilation + 1) / (rows * stride)


def _pad_rows_per_call(isa, v, oh, ow, batch, threads, kh, stride, dilation):
    """Output rows a call (= a row group) where each row group pads its own input rows: the usual
    choice (_rows_per_call over the row groups alone), or more rows where that pads the input over 1.5
    times with a stride (a 7x7 stride-2 stem: 7 rows, 1.36 times), keeping >= 4 row groups a thread; None
    where no such count exists."""
    r = _rows_per_call(isa, v, oh, ow, batch, threads)
    for d in range(r, oh + 1 if stride > 1 else r + 1):     # (more rows measured for strided convs only)
        if oh % d == 0 and _halo(d, kh, stride, dilation) <= 1.5:
            return d if d == r or batch * (oh // d) >= 4 * max(1, threads) else None
    return None


def _rows_per_call(isa, v, oh, ow, groups, threads) -> int:
    """Output rows one micro-kernel call computes: enough register tiles (>= 8) to reuse each block
    of weights it loads into L1 (short rows: 7x7 and 14x14 outputs), a divisor of the output height,
    and still (batch x block groups x calls) >= 4 parallel tasks a thread."""
    per_row = sum(c for _, c in row_tiles(isa, v, ow))
    rows = 1
    for d in range(1, oh + 1):
        if oh % d:
            continue
        if groups * (oh // d) < 4 * max(1, threads) and d > 1:
            break
        rows = d
        if d * per_row >= 8:
            break
    return rows


def _loop_schedule(sch, block, target, epilogue):
    """Any dtype / CPU: (n, oc_chunk, oh | ow_outer, icc, kh, kw, ici, ow_inner, oc_block) with
    the oc_block vector vectorized and a few output pixels unrolled as a register block."""
    loops = sch.get_loops(block)
    if len(loops) != 9:
        return
    n, oc, oh, ow, ob, icc, kh, kw, ici = loops
    owe = _extent(sch, ow)
    reg = next((r for r in (4, 2) if owe is not None and owe % r == 0 and owe > r), None)
    if reg is not None:
        owo, owi = sch.split(ow, [None, reg])
        sch.reorder(n, oc, oh, owo, icc, kh, kw, ici, owi, ob)
        sch.decompose_reduction(block, icc)
        sch.unroll(owi)
    else:
        sch.reorder(n, oc, oh, ow, icc, kh, kw, ici, ob)
        sch.decompose_reduction(block, icc)
    S.vectorize_short(sch, ob)
    _place_epilogue(sch, epilogue, oh, target)
    _parallel_outer(sch, [n, oc, oh], target, S.PARALLEL_MIN_WORK)


def schedule_conv2d_nchwc(sch, ctx):
    """Default CPU schedule of nn.contrib_conv2d_NCHWc (module docstring)."""
    out = ctx.block
    block, name = None, None
    for cand in (out + "_acc", out):
        b = _get_block(sch, cand)
        if b is not None and any(iv.iter_type == "reduce" for iv in sch.get(b).iter_vars):
            block, name = b, cand
            break
    done = set()
    if block is not None:
        attrs = ctx.attrs
        strides = U.int_tuple(CONV, "strides", attrs["strides"], 2)
        dilation = U.int_tuple(CONV, "dilation", attrs["dilation"], 2)
        epi = tuple(e for e in ctx.epilogue if e != name)
        if out != name and _get_block(sch, out) is not None:
            epi = (out,) + epi      # the cast stage of a narrow float output
        if ctx.knobs is not None:
            # tuning: the knobs are sampled once, on sch itself (a refusal makes no candidate)
            ok = _tensorized(sch, block, ctx, epi, strides, dilation)
        else:
            try:
                trial = sch.copy()
                ok = _tensorized(trial, trial.get_block(name), ctx, epi, strides, dilation)
            except (ScheduleError, TesseraError):
                ok = False
            if ok is not False:
                ok = _tensorized(sch, block, ctx, epi, strides, dilation)
        if ok is not False:
            done.update(ok)      # stages the micro-kernel schedule placed (a per-row-group padding)
        else:
            try:
                trial = sch.copy()
                _loop_schedule(trial, trial.get_block(name), ctx.target, epi)
                _loop_schedule(sch, block, ctx.target, epi)
            except ScheduleError:
                pass
        done.add(name)
        done.update(epi)
    _schedule_rest(sch, done, ctx.target)


def _schedule_rest(sch, done, target):
    """The padding copy (and any other stage): parallel rows, the block vector vectorized."""
    root = sch.get_block("root")
    for blk in sch.get_child_blocks(root):
        nm = sch.get(blk).name_hint
        if nm in done or nm.endswith("_init"):
            continue
        try:
            if any(iv.iter_type == "reduce" for iv in sch.get(blk).iter_vars):
                S.schedule_reduce_block(sch, blk, target)
            else:
                schedule_blocked_spatial(sch, blk, target)
        except ScheduleError:
            continue


def schedule_blocked_spatial(sch, block, target):
    """A spatial NCHW{x}c block: rows (n, c_chunk, h) fused and parallel, the x lanes vectorized."""
    loops = sch.get_loops(block)
    if len(loops) != 5:
        S.schedule_spatial_block(sch, block, target)
        return
    S.vectorize_short(sch, loops[-1])
    work = 1
    for lp in loops:
        work *= _extent(sch, lp) or S.PARALLEL_MIN_WORK
    if S.thread_count(target) > 1 and work >= S.PARALLEL_MIN_WORK:
        sch.parallel(sch.fuse(*loops[:3]))


def schedule_depthwise_nchwc(sch, ctx):
    """Rows (n, c_chunk, oh) parallel, the channel vector vectorized, taps unrolled in the expression."""
    out = ctx.block
    done = set()
    for cand in (out + "_acc", out):
        b = _get_block(sch, cand)
        if b is None:
            continue
        is_red = any(iv.iter_type == "reduce" for iv in sch.get(b).iter_vars)
        if ctx.knobs is not None:    # tuning: knobs sampled once, on sch (a refusal makes no candidate)
            _depthwise_block(sch, b, ctx, is_red, ctx.epilogue)
            done.add(cand)
            done.update(ctx.epilogue)
            break
        try:
            trial = sch.copy()
            _depthwise_block(trial, trial.get_block(cand), ctx, is_red, ctx.epilogue)
            _depthwise_block(sch, b, ctx, is_red, ctx.epilogue)
            done.add(cand)
            done.update(ctx.epilogue)
        except ScheduleError:
            pass
        break
    _schedule_rest(sch, done, ctx.target)


def _local_weights(sch, block):
    """The row's filter (KH x KW vectors) copied into a local array at the start of each output row
    (compute_at the row loop, the block's third): in a parallel loop's body, which OpenMP outlines
    into a function where the pointers' restrict is lost, the C compiler keeps a local array's
    values in registers across the row's stores, not loads through the weight pointer. Nothing
    changes when the copy cannot be placed."""
    reads = sch.get(block).reads
    idx = next((k for k, r in enumerate(reads) if len(r.buffer.shape) == 6), None)
    if idx is None:
        return
    name = sch.get(block).name_hint
    trial = sch.copy()
    try:
        tb = trial.get_block(name)
        trial.compute_at(trial.cache_read(tb, idx, "local"), trial.get_loops(tb)[2])
    except ScheduleError:
        return
    cache = sch.cache_read(block, idx, "local")
    sch.compute_at(cache, sch.get_loops(block)[2])
    try:
        S.vectorize_short(sch, sch.get_loops(cache)[-1])
    except ScheduleError:
        pass


def _depthwise_block(sch, block, ctx, is_red, epilogue):
    """Knobs (ctx.choose; defaults the hand choices): output pixels unrolled as a register block
    (the unrolled expression form), the row's filter in a local array, and whether the rows or
    only the channel chunks are the parallel loop."""
    target = ctx.target
    loops = sch.get_loops(block)
    n, c, oh, ow, cb = loops[:5]
    owe = _extent(sch, ow)
    work = 1
    for lp in loops[:5]:
        work *= _extent(sch, lp) or S.PARALLEL_MIN_WORK
    if is_red:
        kh, kw = loops[5:7]
        sch.reorder(n, c, oh, ow, kh, kw, cb)
        sch.decompose_reduction(block, kh)
    else:
        unroll = ctx.choose(sch, "depthwise.ow_unroll",
                            [u for u in (2, 4, 7, 8) if owe is not None and owe % u == 0 and owe > u], 1)
        if unroll > 1:
            _, owi = sch.split(ow, [None, unroll])
            sch.unroll(owi)
    S.vectorize_short(sch, cb)
    parallel = S.thread_count(target) > 1 and work >= S.PARALLEL_MIN_WORK
    if parallel and not is_red and ctx.choose(sch, "depthwise.local_weights", [False], True):
        _local_weights(sch, block)
    _place_epilogue(sch, epilogue, oh, target)
    if parallel:
        rows = ctx.choose(sch, "depthwise.parallel_rows", [False], True)
        sch.parallel(sch.fuse(n, c, oh) if rows else sch.fuse(n, c))


# ---------------------------------------------------------------------------------------------
# registration
# ---------------------------------------------------------------------------------------------
_COMMON = {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "data_layout": "NCHW8c",
           "kernel_layout": "OIHW8i8o", "out_layout": "NCHW8c", "out_dtype": ""}

conv2d_NCHWc = register_op(
    CONV, inputs=("data", "weight"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs={**_COMMON, "groups": 1},
    doc="2-d convolution in blocked layouts: data NCHW{i}c, weight OIHW{i}i{o}o (packed once by alter_layout), "
        "output NCHW{o}c; padding (top, left, bottom, right).")


@conv2d_NCHWc.def_infer
def _conv_infer(types, attrs):
    data, weight = types
    return [TensorType(conv2d_nchwc_shape(CONV, data, weight, attrs), _float_out(CONV, data, weight, attrs))]


def _float_out(op, data, weight, attrs):
    """The output dtype of a blocked convolution: float inputs, a float out_dtype (or the data's)."""
    _check_float(op, data, weight)
    odt = U.out_dtype(op, attrs["out_dtype"], data.dtype)
    if not odt.is_float():
        raise DTypeError(f"{op}: out_dtype {odt} for float inputs must be a float type")
    return odt


@conv2d_NCHWc.def_compute
def _conv_compute(tensors, attrs):
    data, weight = tensors
    return [conv2d_nchwc(data, weight, attrs["strides"], attrs["padding"], attrs["dilation"], attrs["out_dtype"])]


conv2d_NCHWc.def_schedule(schedule_conv2d_nchwc)

depthwise_conv2d_NCHWc = register_op(
    DEPTHWISE, inputs=("data", "weight"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={**_COMMON, "kernel_layout": "OIHW1i8o"},
    doc="depthwise 2-d convolution in a blocked layout: data and output NCHW{x}c, weight OIHW1i{x}o "
        "(one filter per channel); padding (top, left, bottom, right).")


@depthwise_conv2d_NCHWc.def_infer
def _dw_infer(types, attrs):
    data, weight = types
    odt = _float_out(DEPTHWISE, data, weight, attrs)
    return [TensorType(depthwise_nchwc_shape(DEPTHWISE, data, weight, attrs), odt)]


@depthwise_conv2d_NCHWc.def_compute
def _dw_compute(tensors, attrs):
    data, weight = tensors
    return [depthwise_conv2d_nchwc(data, weight, attrs["strides"], attrs["padding"], attrs["dilation"],
                                   attrs["out_dtype"])]


depthwise_conv2d_NCHWc.def_schedule(schedule_depthwise_nchwc)

__all__ = ["conv2d_nchwc", "depthwise_conv2d_nchwc", "pad_nchwc", "conv2d_nchwc_shape", "depthwise_nchwc_shape",
           "schedule_conv2d_nchwc", "schedule_depthwise_nchwc", "data_layout_block", "kernel_layout_blocks",
           "CONV", "DEPTHWISE"]
