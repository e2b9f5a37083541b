"""Vision ops on (N, C, spatial...) tensors: image.grid_sample (ONNX GridSample), image.col2im
(Col2Im), image.roi_align (RoiAlign) and image.deform_conv2d (DeformConv).

grid_sample reads data at the normalized coordinates of `grid` (N, out..., r), r = the number of
spatial axes, the last grid axis listing them innermost first (x, y[, z]) as ONNX and PyTorch do.
A first stage per spatial axis turns the grid into pixel coordinates (denormalize by
align_corners, round half to even for nearest, clamp or reflect points outside the border); the
output stage gathers the taps of every axis (1 for nearest, 2 for linear, 4 for cubic with
a = -0.75) and sums them one axis at a time, innermost first, in the order of the ONNX reference.
Taps outside the input read 0 (padding_mode "zeros"), the edge ("border") or their mirror
("reflection"). Arithmetic is float32 (float64 for float64 data or grid); integer data is
interpolated in float64 and truncated toward zero on store, saturating (ONNX Runtime takes float
data only; the ONNX reference rounds its interpolation weights to the data's integer type, which
makes integer linear/cubic results meaningless and is not imitated).
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..errors import ShapeError, TesseraError
from ..ir import TensorType
from ..ir import expr as E
from ..ir.dtype import DataType
from ._common import FLOATS, NUMERIC, check_dtype, fmt_shape
from ._schedule import schedule_blocks, schedule_injective
from ..tir.transform.lower_checks import check_range
from .registry import REQUIRED, OpPattern, register_op

GRID_SAMPLE_MODES = ("linear", "nearest", "cubic")
PADDING_MODES = ("zeros", "border", "reflection")
_CUBIC_A = -0.75

grid_sample = register_op(
    "image.grid_sample", inputs=("data", "grid"), pattern=OpPattern.INJECTIVE,
    attrs={"mode": "linear", "padding_mode": "zeros", "align_corners": False},
    doc="Sample data (N, C, D1..Dr) at the normalized grid points (N, H1..Hr', r): linear, nearest or "
        "cubic interpolation, zeros/border/reflection padding (ONNX GridSample, any r).")
grid_sample.def_schedule(schedule_injective)


def _check_grid_sample(data: TensorType, grid: TensorType, attrs):
    op = "image.grid_sample"
    check_dtype(op, data.dtype, NUMERIC, "data")
    check_dtype(op, grid.dtype, FLOATS, "grid")
    if attrs["mode"] not in GRID_SAMPLE_MODES:
        raise TesseraError(f"{op}: mode={attrs['mode']!r} is not one of {', '.join(GRID_SAMPLE_MODES)}")
    if attrs["padding_mode"] not in PADDING_MODES:
        raise TesseraError(f"{op}: padding_mode={attrs['padding_mode']!r} is not one of {', '.join(PADDING_MODES)}")
    r = data.ndim - 2
    if r < 1:
        raise ShapeError(f"{op}: data must be (N, C, D1..Dr) with r >= 1, got {fmt_shape(data.shape)}")
    if grid.ndim != r + 2 or grid.shape[-1] != r:
        raise ShapeError(f"{op}: grid must be (N, H1..H{r}, {r}) for data {fmt_shape(data.shape)}, got "
                         f"{fmt_shape(grid.shape)}")
    a, b = data.shape[0], grid.shape[0]
    if a != b and not (isinstance(a, str) != isinstance(b, str)):
        raise ShapeError(f"{op}: data {fmt_shape(data.shape)} and grid {fmt_shape(grid.shape)} have different "
                         f"batch sizes")
    return r


@grid_sample.def_infer
def _grid_sample_infer(types, attrs):
    data, grid = types
    _check_grid_sample(data, grid, attrs)
    return [TensorType((data.shape[0], data.shape[1]) + grid.shape[1:-1], data.dtype)]


def _compute_dtype(*dtypes) -> DataType:
    return DataType("float64") if any(str(d) in ("float64",) or DataType(d).is_integer() for d in dtypes) \
        else DataType("float32")


def _fconst(v, dt):
    return E.const(float(v), dt)


def reflect(x, lo, hi, dt):
    """x mirrored at lo and hi until it lies in [lo, hi] (ONNX GridSample's reflection); lo, hi
    are constants or float expressions of dtype dt."""
    rng = hi - lo
    zero, two = _fconst(0, dt), _fconst(2, dt)

    def fold(dx):
        # (reflected toward the near border when an even number of widths fit, else from the far one)
        n = te.floor(dx / rng)
        r = dx - n * rng
        return r, (n - two * te.floor(n / two)) != zero

    r_lo, odd_lo = fold(lo - x)
    below = E.Select(odd_lo, hi - r_lo, lo + r_lo)
    r_hi, odd_hi = fold(x - hi)
    above = E.Select(odd_hi, lo + r_hi, hi - r_hi)
    return E.Select(x < lo, below, E.Select(x > hi, above, x))


def _extent(d, dt):
    return _fconst(d.value, dt) if isinstance(d, E.IntImm) else d.astype(dt)


def _borders(length, align, dt):
    if align:
        return _fconst(0, dt), length - _fconst(1, dt)
    return _fconst(-0.5, dt), length - _fconst(0.5, dt)


def _cubic_coeffs(t, dt):
    a = _fconst(_CUBIC_A, dt)
    one, two = _fconst(1, dt), _fconst(2, dt)
    five, eight, four, three = (_fconst(v, dt) for v in (5, 8, 4, 3))
    x1, x2 = t + one, one - t
    x3 = two - t
    return [((a * x1 - five * a) * x1 + eight * a) * x1 - four * a,
            ((a + two) * t - (a + three)) * t * t + one,
            ((a + two) * x2 - (a + three)) * x2 * x2 + one,
            ((a * x3 - five * a) * x3 + eight * a) * x3 - four * a]


@grid_sample.def_compute
def _grid_sample_compute(tensors, attrs):
    data, grid = tensors
    tt = [TensorType([int(s.value) if isinstance(s, E.IntImm) else s.name for s in t.shape], t.dtype)
          for t in tensors]
    r = _check_grid_sample(tt[0], tt[1], attrs)
    mode, pad, align = attrs["mode"], attrs["padding_mode"], bool(attrs["align_corners"])
    dt = _compute_dtype(data.dtype, grid.dtype)
    out_sp = list(grid.shape[1:-1])
    lengths = [_extent(data.shape[2 + d], dt) for d in range(r)]
    zero, one, half = _fconst(0, dt), _fconst(1, dt), _fconst(0.5, dt)

    # stage 1: per spatial axis, the (adjusted) pixel coordinate of every output point
    coords = []
    for d in range(r):
        length = lengths[d]

        def coord(n, *o, d=d, length=length):
            g = grid[(n,) + tuple(o) + (r - 1 - d,)].astype(dt)
            x = (g + one) * half * (length - one) if align else ((g + one) * length - one) * half
            if mode == "nearest":
                x = te.round(x)
            if pad == "border":
                lo, hi = _borders(length, align, dt)
                x = E.Select(E.Or(x < lo, x > hi), te.min(te.max(x, zero), length - one), x)
            elif pad == "reflection":
                lo, hi = _borders(length, align, dt)
                x = reflect(x, lo, hi, dt) if not (align and _is_one(data.shape[2 + d])) else lo
            return x

        coords.append(te.compute([grid.shape[0]] + out_sp, coord, name=f"grid_sample_coord{d}"))

    def fetch(n, c, idx):
        """data[n, c, idx...] for integer tap positions, with the padding rule."""
        ok, safe = [], []
        for d, i in enumerate(idx):
            ext = data.shape[2 + d]
            hi = ext - 1 if isinstance(ext, E.IntImm) else ext - E.const(1, ext.dtype)
            hi = E.const(hi.value, "int64") if isinstance(hi, E.IntImm) else E.convert(hi).astype("int64")
            if pad == "reflection":
                lo_f, hi_f = _borders(lengths[d], align, dt)
                i = reflect(i.astype(dt), lo_f, hi_f, dt).astype("int64") \
                    if not (align and _is_one(ext)) else E.const(0, "int64")
            elif pad == "zeros":
                ok.append(E.And(i >= E.const(0, "int64"), i <= hi))
            safe.append(te.max(te.min(i, hi), E.const(0, "int64")))
        v = data[(n, c) + tuple(safe)]
        v = v.astype(dt) if v.dtype != dt else v
        return E.Select(te.all(*ok), v, zero) if ok else v

    def sample(n, c, *o):
        xs = [coords[d][(n,) + tuple(o)] for d in range(r)]
        if mode == "nearest":
            return _store(fetch(n, c, [x.astype("int64") for x in xs]), data.dtype, dt)
        taps = []
        for x in xs:
            f = te.floor(x)
            t = x - f
            base = f.astype("int64")
            if mode == "linear":
                taps.append([(base, one - t), (base + E.const(1, "int64"), t)])
            else:
                ws = _cubic_coeffs(t, dt)
                taps.append([(base + E.const(k - 1, "int64"), ws[k]) for k in range(4)])

        def interp(d, prefix):
            # one axis at a time, the innermost axis first (as the reference's nested 1-d passes)
            acc = None
            for i, w in taps[d]:
                v = fetch(n, c, prefix + [i]) if d == r - 1 else interp(d + 1, prefix + [i])
                acc = w * v if acc is None else acc + w * v
            return acc

        return _store(interp(0, []), data.dtype, dt)

    shape = [data.shape[0], data.shape[1]] + out_sp
    return [te.compute(shape, sample, name="grid_sample")]


def _is_one(ext) -> bool:
    return isinstance(ext, E.IntImm) and ext.value == 1


def _store(v, dtype, dt):
    """v (computed in dt) as dtype: floats round, integers truncate toward zero after saturating."""
    dtype = DataType(dtype)
    if dtype == dt:
        return v
    if dtype.is_float():
        return v.astype(dtype)
    lo, hi = te.min_value(dtype), te.max_value(dtype)
    v = te.max(te.min(v, _fconst(hi.value, dt)), _fconst(lo.value, dt))
    return v.astype(dtype)


# ---------------------------------------------------------------------------------------------
# col2im
# ---------------------------------------------------------------------------------------------
col2im = register_op(
    "image.col2im", inputs=("data",), pattern=OpPattern.OPAQUE,
    attrs={"image_shape": REQUIRED, "block_shape": REQUIRED, "dilation": None, "padding": None, "strides": None},
    doc="Sum sliding blocks (N, C*prod(block), L) back into images (N, C, *image_shape) (ONNX Col2Im, "
        "PyTorch fold): every image pixel gathers the block entries that cover it.")
col2im.def_schedule(schedule_blocks)


def _col2im_plan(data: TensorType, attrs):
    op = "image.col2im"
    check_dtype(op, data.dtype, NUMERIC, "data")
    image = tuple(int(v) for v in attrs["image_shape"])
    block = tuple(int(v) for v in attrs["block_shape"])
    r = len(image)
    if r < 1 or len(block) != r:
        raise ShapeError(f"{op}: image_shape {image} and block_shape {block} must have one length >= 1")
    dil = tuple(int(v) for v in (attrs["dilation"] or (1,) * r))
    strides = tuple(int(v) for v in (attrs["strides"] or (1,) * r))
    pads = tuple(int(v) for v in (attrs["padding"] or (0,) * (2 * r)))
    if len(dil) != r or len(strides) != r or len(pads) != 2 * r:
        raise ShapeError(f"{op}: dilation {dil}, strides {strides} ({r} each) and padding {pads} ({2 * r}) do not fit "
                         f"{r} spatial axes")
    if min(image + block + dil + strides) < 1 or min(pads) < 0:
        raise ShapeError(f"{op}: extents, dilations and strides must be positive and pads non-negative")
    if data.ndim != 3:
        raise ShapeError(f"{op}: data must be (N, C*prod(block_shape), L), got {fmt_shape(data.shape)}")
    kprod = 1
    for b in block:
        kprod *= b
    ck = data.shape[1]
    if not isinstance(ck, int) or ck % kprod:
        raise ShapeError(f"{op}: data axis 1 ({ck}) must be a static multiple of prod(block_shape) = {kprod}")
    blocks = [(image[d] + pads[d] + pads[r + d] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1 for d in range(r)]
    n_blocks = 1
    for b in blocks:
        n_blocks *= b
    if min(blocks) < 1 or data.shape[2] != n_blocks:
        raise ShapeError(f"{op}: data has {data.shape[2]} blocks; image_shape {image} with block_shape {block}, "
                         f"dilation {dil}, padding {pads}, strides {strides} makes {blocks} = {n_blocks}")
    return image, block, dil, strides, pads, blocks, ck // kprod


@col2im.def_infer
def _col2im_infer(types, attrs):
    (x,) = types
    image, _, _, _, _, _, c = _col2im_plan(x, attrs)
    return [TensorType((x.shape[0], c) + image, x.dtype)]


@col2im.def_compute
def _col2im_compute(tensors, attrs):
    (x,) = tensors
    image, block, dil, strides, pads, blocks, c = _col2im_plan(_tt(x), attrs)
    r = len(image)
    raxes = [te.reduce_axis((0, block[d]), name=f"k{d}") for d in range(r)]
    acc = DataType("float32") if str(x.dtype) in ("float16", "bfloat16") else x.dtype

    def body(n, ch, *y):
        ok, blk, kidx = [], None, None
        for d in range(r):
            k = raxes[d].var
            p = y[d] + E.const(pads[d], y[d].dtype) - k * E.const(dil[d], k.dtype)
            s = E.const(strides[d], p.dtype)
            q = te.floordiv(p, s)
            ok += [te.floormod(p, s) == E.const(0, p.dtype), p >= E.const(0, p.dtype),
                   q < E.const(blocks[d], p.dtype)]
            q = te.max(te.min(q, E.const(blocks[d] - 1, p.dtype)), E.const(0, p.dtype))
            blk = q if blk is None else blk * E.const(blocks[d], p.dtype) + q
            kidx = k if kidx is None else kidx * E.const(block[d], k.dtype) + k
        kprod = 1
        for b in block:
            kprod *= b
        v = x[n, ch * E.const(kprod, ch.dtype) + kidx, blk].astype(acc)
        return te.sum(E.Select(te.all(*ok), v, E.const(0, acc)), axis=raxes)

    out = te.compute((x.shape[0], c) + image, body, name="col2im_acc" if acc != x.dtype else "col2im")
    if acc == x.dtype:
        return [out]
    return [te.compute(out.shape, lambda *i: out[i].astype(x.dtype), name="col2im")]


# ---------------------------------------------------------------------------------------------
# roi_align
# ---------------------------------------------------------------------------------------------
roi_align = register_op(
    "image.roi_align", inputs=("data", "rois", "batch_indices"), pattern=OpPattern.OPAQUE,
    attrs={"output_size": REQUIRED, "spatial_scale": 1.0, "sampling_ratio": 0, "max_grid": (1, 1), "mode": "avg",
           "half_pixel": True},
doc="RoiAlign (ONNX): average or max of bilinear samples on a regular grid in every output bin of "
        "each ROI (x1, y1, x2, y2) of its batch entry; sampling_ratio 0 adapts the grid to the ROI "
        "(ceil(roi extent / output extent) samples), at most max_grid: a ROI needing more, or a batch "
        "index outside [0, N), is refused at run time (as ONNX Runtime refuses the index).")
roi_align.def_schedule(schedule_blocks)


def _roi_check(types, attrs):
    op = "image.roi_align"
    x, rois, idx = types
    check_dtype(op, x.dtype, FLOATS, "data")
    check_dtype(op, rois.dtype, FLOATS, "rois")
    check_dtype(op, idx.dtype, ("int32", "int64"), "batch_indices")
    if x.ndim != 4:
        raise ShapeError(f"{op}: data must be (N, C, H, W), got {fmt_shape(x.shape)}")
    if rois.ndim != 2 or rois.shape[1] != 4:
        raise ShapeError(f"{op}: rois must be (num_rois, 4), got {fmt_shape(rois.shape)}")
    same_kind = isinstance(rois.shape[0], int) == isinstance(idx.shape[0], int)
    if idx.ndim != 1 or (rois.shape[0] != idx.shape[0] and same_kind):
        raise ShapeError(f"{op}: batch_indices {fmt_shape(idx.shape)} must be (num_rois,) = ({rois.shape[0]},)")
    if attrs["mode"] not in ("avg", "max"):
        raise TesseraError(f"{op}: mode must be 'avg' or 'max', got {attrs['mode']!r}")
    oh, ow = (int(v) for v in attrs["output_size"])
    if oh < 1 or ow < 1:
        raise ShapeError(f"{op}: output_size {(oh, ow)} must be positive")
    gh, gw = (int(v) for v in attrs["max_grid"])
    if int(attrs["sampling_ratio"]) < 0 or gh < 1 or gw < 1:
        raise TesseraError(f"{op}: sampling_ratio must be >= 0 and max_grid positive")
    return oh, ow


@roi_align.def_infer
def _roi_infer(types, attrs):
    oh, ow = _roi_check(types, attrs)
    x, rois, _ = types
    return [TensorType((rois.shape[0], x.shape[1], oh, ow), x.dtype)]


@roi_align.def_compute
def _roi_compute(tensors, attrs):
    x, rois, bidx = tensors
    oh, ow = _roi_check([_tt(t) for t in tensors], attrs)
    f = DataType("float64") if x.dtype == "float64" or rois.dtype == "float64" else DataType("float32")
    c = lambda v: E.const(float(v), f)  # noqa: E731
    zero, one = c(0), c(1)
    ratio = int(attrs["sampling_ratio"])
    gh_max, gw_max = (ratio, ratio) if ratio > 0 else tuple(int(v) for v in attrs["max_grid"])
    offset = 0.5 if attrs["half_pixel"] else 0.0
    height, width = x.shape[2], x.shape[3]
    hf, wf = _extent(height, f), _extent(width, f)
    nrois = rois.shape[0]

    # per ROI: start, bin size and sample counts along h and w
    def coord(k):
        return te.compute((nrois,), lambda r: rois[r, k].astype(f) * c(attrs["spatial_scale"]) - c(offset),
                          name=f"roi_c{k}")

    x1, y1, x2, y2 = (coord(k) for k in range(4))

    def extent(lo, hi, name):
        def body(r):
            v = hi[r] - lo[r]
            return v if attrs["half_pixel"] else te.max(v, one)   # malformed ROIs are 1x1 otherwise
        return te.compute((nrois,), body, name=name)

    rw, rh = extent(x1, x2, "roi_width"), extent(y1, y2, "roi_height")
    bin_h = te.compute((nrois,), lambda r: rh[r] / c(oh), name="bin_h")
    bin_w = te.compute((nrois,), lambda r: rw[r] / c(ow), name="bin_w")
    if ratio > 0:
        grid_h = grid_w = None
    else:
        # the loops run to max_grid: a ROI needing a finer grid is refused, never sampled short
        def grid(ext, out, most, axis):
            msg = (f"image.roi_align: ROI {{3}} needs a sampling grid of {{0}} {axis} per output bin "
                   f"(sampling_ratio 0), more than max_grid ({gh_max}, {gw_max}) allows")
            # ceil(...) <= most, as [-inf, the next value after most): most + 1 may round to most
            above = float(np.nextafter(np.dtype(str(f)).type(most), np.inf))
            return lambda r: check_range(te.ceil(ext[r] / c(out)), c(float("-inf")), c(above), msg, r)

        grid_h = te.compute((nrois,), grid(rh, oh, gh_max, "rows"), name="grid_h")
        grid_w = te.compute((nrois,), grid(rw, ow, gw_max, "columns"), name="grid_w")
    # each ROI's batch entry, checked once: ONNX Runtime refuses one outside [0, N) (negative ones too)
    n_batch = E.convert(x.shape[0]).astype("int64")
    batch = te.compute((nrois,), lambda r: check_range(
        bidx[r].astype("int64"), 0, n_batch, "image.roi_align: batch index {0} of ROI {3} is out of range "
        "[{1}, {2})", r), name="roi_batch")

    def gcount(g, r, static):
        return c(static) if g is None else g[r]

    def axis_taps(pos, ext_f, ext):
        """(low index, high index, low weight, high weight, in-range flag) along one axis."""
        inside = E.And(pos >= c(-1), pos <= ext_f)
        p = te.max(pos, zero)
        low = te.floor(p)
        last = ext_f - one
        at_end = low >= last
        low = E.Select(at_end, last, low)
        p = E.Select(at_end, low, p)
        li = low.astype("int64")
        hi = E.Select(at_end, li, li + E.const(1, "int64"))
        frac = p - low
        return li, hi, one - frac, frac, inside

    iy = te.reduce_axis((0, gh_max), name="iy")
    ix = te.reduce_axis((0, gw_max), name="ix")
    mode = attrs["mode"]

    def body(r, ch, ph, pw):
        gh = gcount(grid_h, r, gh_max)
        gw = gcount(grid_w, r, gw_max)
        yy = y1[r] + ph.astype(f) * bin_h[r] + (iy.var.astype(f) + c(0.5)) * bin_h[r] / gh
        xx = x1[r] + pw.astype(f) * bin_w[r] + (ix.var.astype(f) + c(0.5)) * bin_w[r] / gw
        ylo, yhi, hy, ly, yin = axis_taps(yy, hf, height)
        xlo, xhi, hx, lx, xin = axis_taps(xx, wf, width)
        # (clamped: where a kernel cannot report (OpenCL, CUDA), a bad index still reads inside data)
        b = te.max(te.min(batch[r], n_batch - E.const(1, "int64")), E.const(0, "int64"))

        def at(yi, xi):
            return x[b, ch, yi, xi].astype(f)

        terms = [hy * hx * at(ylo, xlo), hy * lx * at(ylo, xhi), ly * hx * at(yhi, xlo), ly * lx * at(yhi, xhi)]
        used = [E.And(yin, xin)]
        if grid_h is not None:
            used += [iy.var.astype(f) < gh, ix.var.astype(f) < gw]
        if mode == "avg":
            v = terms[0] + terms[1] + terms[2] + terms[3]
            return te.sum(E.Select(te.all(*used[1:]), E.Select(used[0], v, zero), zero), axis=[iy, ix])
        v = te.max(te.max(terms[0], terms[1]), te.max(terms[2], terms[3]))
        return te.max(E.Select(te.all(*used[1:]), E.Select(used[0], v, zero), c(float("-inf"))), axis=[iy, ix])

    pooled = te.compute((nrois, x.shape[1], oh, ow), body, name="roi_pool")

    def finish(r, ch, ph, pw):
        count = gcount(grid_h, r, gh_max) * gcount(grid_w, r, gw_max)
        v = pooled[r, ch, ph, pw]
        if mode == "avg":
            v = v / te.max(count, one)
        else:
            v = E.Select(count > zero, v, zero)
        return v.astype(x.dtype) if f != x.dtype else v

    return [te.compute(pooled.shape, finish, name="roi_align")]


# ---------------------------------------------------------------------------------------------
# deform_conv2d
# ---------------------------------------------------------------------------------------------
deform_conv2d = register_op(
    "image.deform_conv2d", inputs=("data", "weight", "offset", "extra*"), pattern=OpPattern.OPAQUE,
    attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1, "offset_groups": 1,
           "has_bias": False, "has_mask": False},
    doc="Deformable 2-d convolution (ONNX DeformConv): every kernel tap reads data bilinearly (0 outside) "
        "at its position moved by `offset` (N, offset_groups*kh*kw*2, oh, ow), optionally scaled by "
        "`mask` (N, offset_groups*kh*kw, oh, ow); extra inputs: bias (C_out,) then mask, when flagged.")
deform_conv2d.def_schedule(schedule_blocks)


def _deform_plan(types, attrs):
    op = "image.deform_conv2d"
    x, w, off = types[:3]
    names = (["bias"] if attrs["has_bias"] else []) + (["mask"] if attrs["has_mask"] else [])
    if len(types) != 3 + len(names):
        raise ShapeError(f"{op}: takes data, weight, offset{''.join(', ' + n for n in names)}; got {len(types)} inputs")
    for t, what in ((x, "data"), (w, "weight"), (off, "offset")):
        check_dtype(op, t.dtype, FLOATS, what)
        if t.dtype != x.dtype:
            raise TesseraError(f"{op}: {what} is {t.dtype} but data is {x.dtype}")
    if x.ndim != 4 or w.ndim != 4 or off.ndim != 4:
        raise ShapeError(f"{op}: data, weight and offset must be 4-d, got {fmt_shape(x.shape)}, {fmt_shape(w.shape)}, "
                         f"{fmt_shape(off.shape)}")
    if not all(isinstance(d, int) for d in w.shape + x.shape[1:] + off.shape[1:]):
        raise ShapeError(f"{op}: only the batch may be symbolic")
    g, og = int(attrs["groups"]), int(attrs["offset_groups"])
    oc, icg, kh, kw = w.shape
    ic = x.shape[1]
    if g < 1 or og < 1 or ic != icg * g or oc % g or ic % og:
        raise ShapeError(f"{op}: channels do not fit: data {ic}, weight {fmt_shape(w.shape)}, groups {g}, "
                         f"offset_groups {og}")
    sh, sw = (int(v) for v in attrs["strides"])
    dh, dw = (int(v) for v in attrs["dilation"])
    pads = tuple(int(v) for v in attrs["padding"])
    oh = (x.shape[2] + pads[0] + pads[2] - ((kh - 1) * dh + 1)) // sh + 1
    ow = (x.shape[3] + pads[1] + pads[3] - ((kw - 1) * dw + 1)) // sw + 1
    if off.shape[1:] != (og * kh * kw * 2, oh, ow):
        raise ShapeError(f"{op}: offset must be (N, {og * kh * kw * 2}, {oh}, {ow}), got {fmt_shape(off.shape)}")
    extra = dict(zip(names, types[3:]))
    if "bias" in extra and extra["bias"].shape != (oc,):
        raise ShapeError(f"{op}: bias must be ({oc},), got {fmt_shape(extra['bias'].shape)}")
    if "mask" in extra and extra["mask"].shape[1:] != (og * kh * kw, oh, ow):
        raise ShapeError(f"{op}: mask must be (N, {og * kh * kw}, {oh}, {ow}), got {fmt_shape(extra['mask'].shape)}")
    return oc, oh, ow


@deform_conv2d.def_infer
def _deform_infer(types, attrs):
    oc, oh, ow = _deform_plan(types, attrs)
    return [TensorType((types[0].shape[0], oc, oh, ow), types[0].dtype)]


@deform_conv2d.def_compute
def _deform_compute(tensors, attrs):
    oc, oh, ow = _deform_plan([_tt(t) for t in tensors], attrs)
    x, w, off = tensors[:3]
    rest = list(tensors[3:])
    bias = rest.pop(0) if attrs["has_bias"] else None
    mask = rest.pop(0) if attrs["has_mask"] else None
    f = DataType("float64") if x.dtype == "float64" else DataType("float32")
    g, og = int(attrs["groups"]), int(attrs["offset_groups"])
    _, icg, kh, kw = (int(d.value) for d in w.shape)
    ic = int(x.shape[1].value)
    ic_per_og = ic // og
    sh, sw = (int(v) for v in attrs["strides"])
    dh, dw = (int(v) for v in attrs["dilation"])
    pads = tuple(int(v) for v in attrs["padding"])
    height, width = int(x.shape[2].value), int(x.shape[3].value)
    zero, one = E.const(0.0, f), E.const(1.0, f)

    def sample(n, ci, i, j, oy, ox):
        """mask * data[n, ci] read bilinearly at the moved position of tap (i, j) of output (oy, ox)."""
        grp = te.floordiv(ci, E.const(ic_per_og, ci.dtype))
        base = (grp * E.const(kh * kw, ci.dtype) + i * E.const(kw, i.dtype) + j) * E.const(2, ci.dtype)
        py = (oy * E.const(sh, oy.dtype) - E.const(pads[0], oy.dtype) + i * E.const(dh, i.dtype)).astype(f) + \
            off[n, base, oy, ox].astype(f)
        px = (ox * E.const(sw, ox.dtype) - E.const(pads[1], ox.dtype) + j * E.const(dw, j.dtype)).astype(f) + \
            off[n, base + E.const(1, base.dtype), oy, ox].astype(f)
        fy, fx = te.floor(py), te.floor(px)
        ty, tx = py - fy, px - fx
        y0, x0 = fy.astype("int64"), fx.astype("int64")
        acc = None
        for dy, wy in ((0, one - ty), (1, ty)):
            for dx, wx in ((0, one - tx), (1, tx)):
                yy, xx = y0 + E.const(dy, "int64"), x0 + E.const(dx, "int64")
                ok = te.all(yy >= E.const(0, "int64"), yy < E.const(height, "int64"),
                            xx >= E.const(0, "int64"), xx < E.const(width, "int64"))
                ys = te.max(te.min(yy, E.const(height - 1, "int64")), E.const(0, "int64"))
                xs = te.max(te.min(xx, E.const(width - 1, "int64")), E.const(0, "int64"))
                v = E.Select(ok, x[n, ci, ys, xs].astype(f), zero) * (wy * wx)
                acc = v if acc is None else acc + v
        if mask is not None:
            m = mask[n, grp * E.const(kh * kw, ci.dtype) + i * E.const(kw, i.dtype) + j, oy, ox].astype(f)
            acc = acc * m
        return acc

    cols = te.compute((x.shape[0], ic, kh, kw, oh, ow), sample, name="deform_cols")
    rc = te.reduce_axis((0, icg), name="rc")
    ri = te.reduce_axis((0, kh), name="ri")
    rj = te.reduce_axis((0, kw), name="rj")
    ocg = oc // g

    def conv(n, o, oy, ox):
        ci = te.floordiv(o, E.const(ocg, o.dtype)) * E.const(icg, o.dtype) + rc.var
        return te.sum(w[o, rc, ri, rj].astype(f) * cols[n, ci, ri, rj, oy, ox], axis=[rc, ri, rj])

    out = te.compute((x.shape[0], oc, oh, ow), conv, name="deform_conv_acc")

    def finish(n, o, oy, ox):
        v = out[n, o, oy, ox]
        if bias is not None:
            v = v + bias[o].astype(f)
        return v.astype(x.dtype) if f != x.dtype else v

    return [te.compute(out.shape, finish, name="deform_conv")]


def _tt(t) -> TensorType:
    return TensorType([int(s.value) if isinstance(s, E.IntImm) else s.name for s in t.shape], t.dtype)
