"""ONNX converters of the shape / data-movement family.

Inputs that decide a shape (Reshape's shape, Slice's starts/ends/axes/steps, Split's split, Pad's
pads, Tile's repeats, Expand's shape, Squeeze/Unsqueeze axes, OneHot's depth, Trilu's k, Range's
inputs, Compress's condition, CumSum's axis) must be constants: they come through
`ctx.const_input`, which names the runtime input to freeze when they are not.
"""
from __future__ import annotations

import numpy as np

from ...ops._common import broadcast_shapes, normalize_axis
from . import converter
from .misc import extent_symbol
from ...ir.dtype import numpy_dtype


def _ints(a) -> list:
    return [int(x) for x in np.asarray(a).reshape(-1)]


def _scalar(ctx, a, what):
    a = np.asarray(a)
    if a.size != 1:
        ctx.unsupported(f"{what} must hold one value, it has shape {a.shape}")
    return a.reshape(-1)[0].item()


def _ndim(v):
    return v.type.ndim


# ---------------------------------------------------------------------------------------------
# Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Expand
# ---------------------------------------------------------------------------------------------
def _shape_arg(ctx, i) -> list:
    """A shape input: constant ints, or symbolic names where a shape subgraph reads a symbolic dim."""
    return [s if isinstance(s, str) else int(s) for s in ctx.shape_input(i)]


def _reshape_to(ctx, x, shape, allowzero=False):
    shape = [s if isinstance(s, str) else int(s) for s in shape]
    if allowzero and 0 in shape:
        return _reshape_literal(ctx, x, shape)
    return ctx.op("reshape", x, newshape=tuple(shape))


def _reshape_literal(ctx, x, shape):
    """allowzero=1 with a 0 in the shape: an empty result, so the input must be empty too."""
    if -1 in shape:
        ctx.unsupported(f"allowzero=1 with both 0 and -1 in shape {shape}")
    if x.type.is_static and x.type.numel() == 0:
        return ctx.const(np.zeros(shape, _np_dtype(x)), "empty")
    ctx.unsupported(f"allowzero=1 reshapes {x.type} to {shape}, which has no elements")


def _np_dtype(v):
    return numpy_dtype(v.type.dtype)


@converter("Reshape")
def _reshape_v1(ctx):
    return _reshape_to(ctx, ctx.input(0), ctx.attr("shape", []))


@converter("Reshape", since=5)
def _reshape_v5(ctx):
    return _reshape_to(ctx, ctx.input(0), _shape_arg(ctx, 1), bool(ctx.attr("allowzero", 0)))


@converter("Flatten")
def _flatten(ctx):
    x = ctx.input(0)
    nd = _ndim(x)
    axis = ctx.attr("axis", 1)
    axis = axis + nd if axis < 0 else axis
    if not 0 <= axis <= nd:
        ctx.unsupported(f"axis {ctx.attr('axis', 1)} is out of range for rank {nd}")
    parts = []
    for dims in (x.type.shape[:axis], x.type.shape[axis:]):
        syms = [d for d in dims if isinstance(d, str)]
        static = int(np.prod([d for d in dims if isinstance(d, int)], dtype=np.int64))
        if not syms:
            parts.append(static)
        elif len(syms) == 1 and static == 1:
            parts.append(syms[0])
        else:
            parts.append(None)
    if parts.count(None) == 1:
        parts[parts.index(None)] = -1
    elif None in parts:
        ctx.unsupported(f"flattening {x.type} at axis {axis}: both halves are products of symbolic dims")
    return ctx.op("reshape", x, newshape=tuple(parts))


def _axes_arg(ctx, since_input):
    """Axes from the attribute (older opsets) or the optional constant input 1."""
    if ctx.opset >= since_input:
        return _ints(ctx.const_input(1)) if ctx.has_input(1) else None
    a = ctx.attr("axes")
    return None if a is None else [int(v) for v in a]


@converter("Squeeze")
def _squeeze(ctx):
    x = ctx.input(0)
    axes = _axes_arg(ctx, 13)
    return ctx.op("squeeze", x, axes=None if axes is None else tuple(axes))


@converter("Unsqueeze")
def _unsqueeze(ctx):
    x = ctx.input(0)
    axes = _axes_arg(ctx, 13)
    if not axes:
        ctx.unsupported("Unsqueeze needs axes")
    out_nd = _ndim(x) + len(axes)
    axes = sorted(normalize_axis("Unsqueeze", a, out_nd) for a in axes)
    if len(set(axes)) != len(axes):
        ctx.unsupported(f"axes {axes} repeat an axis")
    if len(axes) == 1:
        return ctx.op("expand_dims", x, axis=axes[0], num_newaxis=1)
    shape, it = [], iter(x.type.shape)
    for k in range(out_nd):
        shape.append(1 if k in axes else next(it))
    return ctx.op("reshape", x, newshape=tuple(shape))


@converter("Transpose")
def _transpose(ctx):
    perm = ctx.attr("perm")
    return ctx.op("transpose", ctx.input(0), axes=None if perm is None else tuple(int(p) for p in perm))


@converter("Expand", since=8)
def _expand(ctx):
    """Bidirectional broadcast of the input against the given shape."""
    x = ctx.input(0)
    shape = tuple(_shape_arg(ctx, 1))
    target = broadcast_shapes("Expand", x.type.shape, shape)
    if target == x.type.shape:
        return x
    return ctx.op("broadcast_to", x, shape=target)


# ---------------------------------------------------------------------------------------------
# Concat, Split, Slice
# ---------------------------------------------------------------------------------------------
@converter("Concat")
def _concat(ctx):
    vals = [v for v in ctx.inputs() if v is not None]
    axis = ctx.attr("axis", 1 if ctx.opset < 4 else None)
    if axis is None:
        ctx.unsupported("Concat needs the axis attribute")
    if len(vals) == 1:
        return vals[0]
    return ctx.op("concatenate", *vals, axis=int(axis))


@converter("Split")
def _split(ctx):
    x = ctx.input(0)
    axis = normalize_axis("Split", ctx.attr("axis", 0), _ndim(x))
    n_out = ctx.num_outputs
    if ctx.opset >= 13:
        sizes = _ints(ctx.const_input(1)) if ctx.has_input(1) else None
    else:
        sizes = ctx.attr("split")
        if sizes is None and ctx.opset < 2 and ctx.has_input(1):
            sizes = _ints(ctx.const_input(1))
        sizes = None if sizes is None else [int(s) for s in sizes]
    d = x.type.shape[axis]
    if sizes is None:
        if not isinstance(d, int):
            ctx.unsupported(f"splitting the symbolic extent {d!r} of axis {axis}")
        n = int(ctx.attr("num_outputs", n_out)) if ctx.opset >= 18 else n_out
        if ctx.opset >= 18:
            chunk = -(-d // n)  # ceil: the last part may be smaller
            sizes = [min(chunk, d - k * chunk) for k in range(n)]
        else:
            if d % n:
                ctx.unsupported(f"extent {d} of axis {axis} does not split into {n} equal parts")
            sizes = [d // n] * n
    if len(sizes) != n_out:
        ctx.unsupported(f"{len(sizes)} split sizes for {n_out} outputs")
    if isinstance(d, int) and sum(sizes) != d:
        ctx.unsupported(f"split sizes {sizes} do not add up to the extent {d} of axis {axis}")
    points = list(np.cumsum(sizes)[:-1].astype(int))
    outs = ctx.op("split", x, indices_or_sections=tuple(int(p) for p in points), axis=axis)
    return outs if isinstance(outs, tuple) else (outs,)


@converter("Slice")
def _slice_v1(ctx):
    starts, ends = ctx.attr("starts"), ctx.attr("ends")
    axes = ctx.attr("axes")
    return ctx.op("strided_slice", ctx.input(0), begin=tuple(starts), end=tuple(ends),
                  axes=None if axes is None else tuple(axes))


@converter("Slice", since=10)
def _slice_v10(ctx):
    if not ctx.is_const(2):
        cut = _symbolic_prefix(ctx)
        if cut is not None:
            return cut
    starts, ends = _ints(ctx.const_input(1)), _ints(ctx.const_input(2))
    axes = _ints(ctx.const_input(3)) if ctx.has_input(3) else None
    steps = _ints(ctx.const_input(4)) if ctx.has_input(4) else None
    return ctx.op("strided_slice", ctx.input(0), begin=tuple(starts), end=tuple(ends),
                  strides=None if steps is None else tuple(steps), axes=None if axes is None else tuple(axes))


def _symbolic_prefix(ctx):
    """Slice(x, 0, ends) whose ends hold symbols of the graph's inputs (ends from Shape of a tensor with a
    dynamic axis): the axes cut to a symbol become a prefix_slice, the rest a strided_slice; None when
    the slice is not of that form (the constant path then explains why)."""
    try:
        ends = ctx.shape_input(2)
        starts = _ints(ctx.const_input(1))
        axes = _ints(ctx.const_input(3)) if ctx.has_input(3) else list(range(len(ends)))
        steps = _ints(ctx.const_input(4)) if ctx.has_input(4) else [1] * len(ends)
    except Exception:  # noqa: BLE001 - not this form: the caller's constant path reports it
        return None
    x = ctx.input(0)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        return None
    sym = [(a, e) for s, e, a, st in zip(starts, ends, axes, steps) if isinstance(e, str)]
    if any(s != 0 or st != 1 for s, e, a, st in zip(starts, ends, axes, steps) if isinstance(e, str)):
        return None
    ndim = _ndim(x)
    sym_axes = [normalize_axis("Slice", a, ndim) for a, _ in sym]
    if any(not isinstance(x.type.shape[a], int) for a in sym_axes):
        return None
    rest = [(s, e, a, st) for s, e, a, st in zip(starts, ends, axes, steps) if not isinstance(e, str)]
    if rest:
        x = ctx.op("strided_slice", x, begin=tuple(r[0] for r in rest), end=tuple(r[1] for r in rest),
                   strides=tuple(r[3] for r in rest), axes=tuple(r[2] for r in rest))
    return ctx.op("prefix_slice", x, axes=tuple(sym_axes), extents=tuple(e for _, e in sym))


# ---------------------------------------------------------------------------------------------
# gathers and scatters
# ---------------------------------------------------------------------------------------------
def _index_input(ctx, i):
    v = ctx.input(i)
    if str(v.type.dtype) not in ("int32", "int64"):
        v = ctx.op("cast", v, dtype="int64")
    return v


@converter("Gather")
def _gather(ctx):
    return ctx.op("take", ctx.input(0), _index_input(ctx, 1), axis=int(ctx.attr("axis", 0)))


@converter("GatherElements", since=11)
def _gather_elements(ctx):
    return ctx.op("gather_elements", ctx.input(0), _index_input(ctx, 1), axis=int(ctx.attr("axis", 0)))


@converter("GatherND", since=11)
def _gather_nd(ctx):
    return ctx.op("gather_nd", ctx.input(0), _index_input(ctx, 1), batch_dims=int(ctx.attr("batch_dims", 0)))


@converter("ScatterElements", since=11)
def _scatter_elements(ctx):
    return ctx.op("scatter_elements", ctx.input(0), _index_input(ctx, 1), ctx.input(2),
                  axis=int(ctx.attr("axis", 0)), reduction=ctx.attr("reduction", "none"))


@converter("Scatter", since=9)
def _scatter(ctx):
    return ctx.op("scatter_elements", ctx.input(0), _index_input(ctx, 1), ctx.input(2),
                  axis=int(ctx.attr("axis", 0)))


@converter("ScatterND", since=11)
def _scatter_nd(ctx):
    return ctx.op("scatter_nd", ctx.input(0), _index_input(ctx, 1), ctx.input(2),
                  reduction=ctx.attr("reduction", "none"))


# ---------------------------------------------------------------------------------------------
# Tile, Pad, DepthToSpace, SpaceToDepth
# ---------------------------------------------------------------------------------------------
@converter("Tile", since=6)
def _tile(ctx):
    x = ctx.input(0)
    reps = _ints(ctx.const_input(1))
    if len(reps) != _ndim(x):
        ctx.unsupported(f"repeats has {len(reps)} entries for an input of rank {_ndim(x)}")
    if all(r == 1 for r in reps):
        return x
    return ctx.op("tile", x, reps=tuple(reps))


def _pad(ctx, x, pads, mode, value, axes=None):
    nd = _ndim(x)
    axes = list(range(nd)) if axes is None else [normalize_axis("Pad", a, nd) for a in axes]
    if len(pads) != 2 * len(axes):
        ctx.unsupported(f"pads has {len(pads)} entries; {2 * len(axes)} expected for axes {axes}")
    width = [[0, 0] for _ in range(nd)]
    for k, a in enumerate(axes):
        width[a] = [pads[k], pads[k + len(axes)]]
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in ("constant", "reflect", "edge", "wrap"):
        ctx.unsupported(f"pad mode {mode!r}")
    if all(a == 0 and b == 0 for a, b in width):
        return x
    return ctx.op("nn.pad", x, pad_width=tuple(tuple(w) for w in width), pad_mode=mode,
                  pad_value=float(value) if str(x.type.dtype).startswith(("float", "bfloat")) else
                  (bool(value) if str(x.type.dtype) == "bool" else int(value)))


@converter("Pad")
def _pad_v1(ctx):
    pads = ctx.attr("pads", ctx.attr("paddings"))
    return _pad(ctx, ctx.input(0), [int(p) for p in pads], ctx.attr("mode", "constant"),
                ctx.attr("value", 0.0))


@converter("Pad", since=11)
def _pad_v11(ctx):
    x = ctx.input(0)
    pads = _ints(ctx.const_input(1))
    value = _scalar(ctx, ctx.const_input(2), "constant_value") if ctx.has_input(2) else 0
    axes = _ints(ctx.const_input(3)) if ctx.has_input(3) else None
    return _pad(ctx, x, pads, ctx.attr("mode", "constant"), value, axes)


@converter("DepthToSpace")
def _depth_to_space(ctx):
    return ctx.op("nn.depth_to_space", ctx.input(0), block_size=int(ctx.attr("blocksize")),
                  mode=ctx.attr("mode", "DCR"))


@converter("SpaceToDepth")
def _space_to_depth(ctx):
    return ctx.op("nn.space_to_depth", ctx.input(0), block_size=int(ctx.attr("blocksize")),
                  mode=ctx.attr("mode", "DCR"))


# ---------------------------------------------------------------------------------------------
# OneHot, Trilu, Range, EyeLike, Compress
# ---------------------------------------------------------------------------------------------
@converter("OneHot", since=9)
def _one_hot(ctx):
    depth = int(_scalar(ctx, ctx.const_input(1), "depth"))
    return ctx.op("one_hot", ctx.input(0), ctx.input(2), depth=depth, axis=int(ctx.attr("axis", -1)))


@converter("Trilu", since=14)
def _trilu(ctx):
    k = int(_scalar(ctx, ctx.const_input(1), "k")) if ctx.has_input(1) else 0
    return ctx.op("trilu", ctx.input(0), upper=bool(ctx.attr("upper", 1)), k=k)


@converter("Range", since=11)
def _range(ctx):
    """A constant when start, limit and delta are known; Range(0, S, 1) with S a symbol of the graph's
    inputs (Shape of a tensor with a dynamic axis) is an arange of extent S."""
    if ctx.is_const(0) and ctx.is_const(2) and not ctx.is_const(1):
        sym = ctx.sym_input(1)
        lim = sym.reshape(-1)[0] if sym is not None and sym.size == 1 else None
        s0, d0 = (np.asarray(ctx.const_input(i)) for i in (0, 2))
        if isinstance(lim, str) and s0.size == 1 and d0.size == 1 and s0.reshape(-1)[0] == 0 \
                and d0.reshape(-1)[0] == 1:
            return ctx.op("arange", extent=lim, dtype=str(ctx.input_type(0).dtype))
    start, limit, delta = (np.asarray(ctx.const_input(i)) for i in range(3))
    dtype = start.dtype
    s, l, d = (_scalar(ctx, a, n) for a, n in ((start, "start"), (limit, "limit"), (delta, "delta")))
    if d == 0:
        ctx.unsupported("delta is 0")
    n = max(int(np.ceil((l - s) / d)), 0)
    ctx.check_constant_size([n], dtype)
    return ctx.const((s + np.arange(n) * d).astype(dtype) if dtype.kind == "f" else
                     np.arange(s, s + n * d, d, dtype=dtype)[:n], "range")


@converter("EyeLike", since=9)
def _eye_like(ctx):
    x = ctx.input(0)
    dt = ctx.attr("dtype")
    dtype = ctx.dtype(int(dt)) if dt is not None else str(x.type.dtype)
    return ctx.op("eye_like", x, k=int(ctx.attr("k", 0)), dtype=dtype)


@converter("Compress", since=9)
def _compress(ctx):
    """A take of the selected positions: folded for a constant condition, else the positions of a
    runtime condition come from a nonzero (a host op: its count is known when it runs)."""
    x = ctx.input(0)
    if not ctx.is_const(1):
        axis = ctx.attr("axis")
        if axis is None:
            x = ctx.op("reshape", x, newshape=(-1,))
            axis = 0
        axis = normalize_axis("Compress", axis, _ndim(x))
        c = ctx.input(1)
        if c.type.ndim != 1:
            ctx.unsupported(f"the condition must be 1-D, it is {c.type}")
        d, n = x.type.shape[axis], c.type.shape[0]
        if isinstance(d, int) and isinstance(n, int) and n > d:
            ctx.unsupported(f"the condition has {n} entries, the axis {d}")
        if not (isinstance(d, int) and isinstance(n, int)) and d != n:
            ctx.unsupported(f"a runtime condition of {n} entries on an axis of {d}: tessera cannot check "
                            f"ahead that it is no longer than the axis")
        if str(c.type.dtype) != "bool":
            c = ctx.op("cast", c, dtype="bool")
        idx = ctx.op("squeeze", ctx.op("nonzero", c, extent=extent_symbol(ctx, "kept")), axes=(0,))
        return ctx.op("take", x, idx, axis=axis)
    cond = np.asarray(ctx.const_input(1)).astype(bool).reshape(-1)
    axis = ctx.attr("axis")
    if axis is None:
        if not x.type.is_static:
            ctx.unsupported("Compress without axis of a tensor of symbolic shape")
        x = ctx.op("reshape", x, newshape=(-1,))
        axis = 0
    axis = normalize_axis("Compress", axis, _ndim(x))
    d = x.type.shape[axis]
    if isinstance(d, int) and len(cond) > d:
        ctx.unsupported(f"the condition has {len(cond)} entries, the axis {d}")
    idx = np.nonzero(cond)[0].astype(np.int64)
    return ctx.op("take", x, ctx.const(idx, "indices"), axis=axis)
