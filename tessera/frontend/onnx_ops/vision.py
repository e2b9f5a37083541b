"""ONNX converters of the vision ops: GridSample (image.grid_sample), AffineGrid (a constant base grid
times theta, one nn.matmul)."""
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
    base = base_grid(spatial, bool(ctx.attr("align_corners", 0)))
    base = ctx.const(base.reshape(-1, r + 1).astype(numpy_dtype(theta.type.dtype)), "base_grid")
    g = ctx.op("nn.matmul", base, theta, transpose_b=True)          # (N, D*H*W, r)
    return ctx.op("reshape", g, newshape=(n if isinstance(n, int) else 0, *spatial, r))
