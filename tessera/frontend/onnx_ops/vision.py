"""ONNX converters of the vision ops: GridSample (image.grid_sample), AffineGrid (a constant base grid
times theta, one nn.matmul), Col2Im, RoiAlign and DeformConv (image.col2im / roi_align /
deform_conv2d)."""
from __future__ import annotations

import numpy as np

from ...ir.dtype import numpy_dtype
from . import converter

_MODE_NAMES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic",
               "cubic": "cubic"}


def _ints(a) -> list:
    return [int(x) for x in np.asarray(a).reshape(-1)]


@converter("GridSample", since=16)
def _grid_sample(ctx):
    x, grid = ctx.input(0), ctx.input(1)
    default = "linear" if ctx.opset >= 20 else "bilinear"
    mode = ctx.attr("mode", default)
    if mode not in _MODE_NAMES or (ctx.opset >= 20) != (mode in ("linear", "nearest", "cubic")) and mode != "nearest":
        ctx.unsupported(f"mode={mode!r} (opset {ctx.opset} names "
                        f"{'linear, nearest, cubic' if ctx.opset >= 20 else 'bilinear, nearest, bicubic'})")
    if ctx.opset < 20 and x.type.ndim != 4:
        ctx.unsupported(f"opset {ctx.opset} GridSample takes 4-d input, got {x.type}")
    pad = ctx.attr("padding_mode", "zeros")
    if pad not in ("zeros", "border", "reflection"):
        ctx.unsupported(f"padding_mode={pad!r}")
    return ctx.op("image.grid_sample", x, grid, mode=_MODE_NAMES[mode], padding_mode=pad,
                  align_corners=bool(ctx.attr("align_corners", 0)))


def base_grid(spatial, align_corners: bool) -> np.ndarray:
    """AffineGrid's homogeneous base grid (D.., r + 1): normalized coordinates innermost-axis first
    (x, y[, z]) and a 1, in float64."""
    axes = []
    for n in spatial:
        if align_corners:
            a = np.linspace(-1.0, 1.0, n) if n > 1 else np.full(n, -1.0)
        else:
            a = (np.arange(n, dtype=np.float64) * 2.0 + 1.0) / n - 1.0
        axes.append(a)
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack(list(mesh[::-1]) + [np.ones(tuple(spatial))], axis=-1)


@converter("AffineGrid", since=20)
def _affine_grid(ctx):
    theta = ctx.input(0)
    size = _ints(ctx.const_input(1))
    r = len(size) - 2
    if r not in (2, 3):
        ctx.unsupported(f"size {size} must be (N, C, H, W) or (N, C, D, H, W)")
    want = (r, r + 1)
    if theta.type.ndim != 3 or tuple(theta.type.shape[1:]) != want:
        ctx.unsupported(f"theta {theta.type} must be (N, {r}, {r + 1}) for size {size}")
    n = theta.type.shape[0]
    if isinstance(n, int) and n != size[0]:
        ctx.unsupported(f"theta has batch {n}, size says {size[0]}")
    spatial = size[2:]
    if any(s < 0 for s in spatial):
        ctx.unsupported(f"negative extents in size {size}")
    ctx.check_constant_size([*spatial, r + 1], np.float64, "the base grid")
    base = base_grid(spatial, bool(ctx.attr("align_corners", 0)))
    base = ctx.const(base.reshape(-1, r + 1).astype(numpy_dtype(theta.type.dtype)), "base_grid")
    g = ctx.op("nn.matmul", base, theta, transpose_b=True)          # (N, D*H*W, r)
    return ctx.op("reshape", g, newshape=(n if isinstance(n, int) else 0, *spatial, r))


@converter("Col2Im", since=18)
def _col2im(ctx):
    x = ctx.input(0)
    image = _ints(ctx.const_input(1))
    block = _ints(ctx.const_input(2))
    r = len(image)
    return ctx.op("image.col2im", x, image_shape=tuple(image), block_shape=tuple(block),
                  dilation=tuple(ctx.attr("dilations") or (1,) * r), padding=tuple(ctx.attr("pads") or (0,) * (2 * r)),
                  strides=tuple(ctx.attr("strides") or (1,) * r))


def _grid_bound(extents, out) -> tuple:
    """(the most samples along one axis of a bin for these ROI extents, ceil(extent / out); the loops'
    bound: one more where a ratio is within rounding of an integer, since the kernel computes it in
    float32, maybe with fused multiply-adds, and may round up there (the extra row is masked))."""
    r = np.asarray(extents, np.float64) / out
    near = np.abs(r - np.round(r)) <= 1e-5 * np.maximum(1.0, np.abs(r))
    return max(1, int(np.ceil(r).max(initial=1))), max(1, int((np.ceil(r) + near).max(initial=1)))


@converter("RoiAlign", since=10)
def _roi_align(ctx):
    x, rois, idx = ctx.input(0), ctx.input(1), ctx.input(2)
    mode = ctx.attr("mode", "avg")
    default_ct = "half_pixel" if ctx.opset >= 16 else "output_half_pixel"
    ct = ctx.attr("coordinate_transformation_mode", default_ct)
    if ct not in ("half_pixel", "output_half_pixel"):
        ctx.unsupported(f"coordinate_transformation_mode={ct!r}")
    oh, ow = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    ratio = int(ctx.attr("sampling_ratio", 0))
    scale = float(ctx.attr("spatial_scale", 1.0))
    grid = (1, 1)
    if ratio == 0:
        # an adaptive grid: its size comes from the ROIs, so they must be known to bound the loops
        boxes = np.asarray(ctx.const_input(1), np.float64)
        bad = np.flatnonzero(~np.isfinite(boxes).all(axis=1))
        if bad.size:
            ctx.unsupported(f"sampling_ratio 0 (a grid adapted to each ROI) needs finite ROIs; ROI {int(bad[0])} "
                            f"is {boxes[bad[0]].tolist()}")
        off = 0.5 if ct == "half_pixel" else 0.0
        b = boxes * scale - off
        hgt, wid = b[:, 3] - b[:, 1], b[:, 2] - b[:, 0]
        if ct != "half_pixel":
            hgt, wid = np.maximum(hgt, 1.0), np.maximum(wid, 1.0)
        (gh, loop_h), (gw, loop_w) = _grid_bound(hgt, oh), _grid_bound(wid, ow)
        grid = (loop_h, loop_w)
        what = f"ROIs up to {gh} x {gw} samples per output bin (sampling_ratio 0)"
    else:
        gh = gw = ratio
        what = f"sampling_ratio {ratio}"
    samples = oh * ow * gh * gw
    limit = ctx.limits.max_roi_align_samples
    if samples > limit:
        ctx.unsupported(f"{what} makes {samples:,} samples per ROI and channel ({oh} x {ow} bins), more than the "
                        f"limit of {limit:,} ({ctx.limits.where('max_roi_align_samples')})")
    if str(idx.type.dtype) not in ("int32", "int64"):
        idx = ctx.op("cast", idx, dtype="int64")
    return ctx.op("image.roi_align", x, rois, idx, output_size=(oh, ow), spatial_scale=scale, sampling_ratio=ratio,
                  max_grid=grid, mode=mode, half_pixel=ct == "half_pixel")


@converter("DeformConv", since=19)
def _deform_conv(ctx):
    x, w, off = ctx.input(0), ctx.input(1), ctx.input(2)
    if x.type.ndim != 4:
        ctx.unsupported(f"{x.type.ndim - 2}-d deformable convolution (tessera has 2-d)")
    nd = 2
    strides = tuple(int(s) for s in (ctx.attr("strides") or [1] * nd))
    dil = tuple(int(d) for d in (ctx.attr("dilations") or [1] * nd))
    pads = tuple(int(p) for p in (ctx.attr("pads") or [0] * (2 * nd)))
    kernel = ctx.attr("kernel_shape")
    if kernel is not None and tuple(int(k) for k in kernel) != tuple(w.type.shape[2:]):
        ctx.unsupported(f"kernel_shape {kernel} differs from the weight's {w.type.shape[2:]}")
    b, m = ctx.input(3, optional=True), ctx.input(4, optional=True)
    extra = [v for v in (b, m) if v is not None]
    return ctx.op("image.deform_conv2d", x, w, off, *extra, strides=strides, padding=pads, dilation=dil,
                  groups=int(ctx.attr("group", 1)), offset_groups=int(ctx.attr("offset_group", 1)),
                  has_bias=b is not None, has_mask=m is not None)
