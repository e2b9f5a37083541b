"""Views, permutes, slices, joins and gathers: view/reshape, permute/transpose, expand, (un)squeeze,
cat, split, slice, select, index, index_select, gather, flip, repeat, tril/triu.

Views go through `_layout.view` (a symbolic product of sizes stays the value's factors); permutes
and expands move or broadcast whole groups of factors; slices and selects on a dimension that is a
product refuse.
"""
from __future__ import annotations

import sys

import numpy as np

from . import TorchTensor, converter
from ._layout import axis as value_axis, broadcast, drop_parts, norm_dim, out_factors, view
from .sizes import factors


@converter("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.view_copy.default",
           "aten.unsqueeze.default", "aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default",
           "aten.flatten.using_ints", "aten.unflatten.int")
def _view(ctx):
    return view(ctx, ctx.tensor("self"))


@converter("aten.permute.default")
def _permute(ctx):
    t = ctx.tensor("self")
    dims = [norm_dim(ctx, d, t.ndim) for d in ctx.arg("dims")]
    return _permuted(ctx, t, dims)


def _permuted(ctx, t: TorchTensor, dims: list) -> TorchTensor:
    if sorted(dims) != list(range(t.ndim)):
        ctx.unsupported(f"dims {dims} are not a permutation of 0..{t.ndim - 1}")
    if dims == list(range(t.ndim)):
        return t
    groups = t.groups()
    axes = tuple(a for d in dims for a in groups[d])
    parts = None if t.parts is None else tuple(t.parts[d] for d in dims)
    return TorchTensor(ctx.op("transpose", t.value, axes=axes), parts)


@converter("aten.transpose.int")
def _transpose(ctx):
    t = ctx.tensor("self")
    a, b = norm_dim(ctx, ctx.arg("dim0"), t.ndim), norm_dim(ctx, ctx.arg("dim1"), t.ndim)
    dims = list(range(t.ndim))
    dims[a], dims[b] = dims[b], dims[a]
    return _permuted(ctx, t, dims)


@converter("aten.t.default", "aten.numpy_T.default")
def _t(ctx):
    t = ctx.tensor("self")
    return _permuted(ctx, t, list(range(t.ndim))[::-1])


@converter("aten.expand.default", "aten.expand_copy.default")
def _expand(ctx):
    t = ctx.tensor("self")
    want = out_factors(ctx)
    rank = len(want)
    off = rank - t.ndim
    shape, target = [], []
    for i, w in enumerate(want):
        if i < off:
            shape += [1] * len(w)
        else:
            f = t.factors(i - off)
            if f == w:
                shape += f
            elif all(x == 1 for x in f):
                shape += [1] * len(w)
            else:
                ctx.unsupported(f"expanding dimension {i - off} ({' * '.join(map(str, f))}) to "
                                f"{' * '.join(map(str, w))}")
        target += w
    x = t.value
    if tuple(shape) != tuple(x.shape):
        x = ctx.op("reshape", x, newshape=tuple(shape))
    return TorchTensor(broadcast(ctx, x, target), tuple(len(w) for w in want))


@converter("aten.cat.default")
def _cat(ctx):
    ts = [t for t in ctx.arg("tensors")]
    # torch's legacy rule: 1-d empty tensors take no part
    xs = [ctx.flat(t, f"tensor {i}") for i, t in enumerate(ts)
          if not (len(t.value.shape) == 1 and t.value.shape[0] == 0)]
    if not xs:
        ctx.unsupported("concatenating only empty tensors")
    ax = norm_dim(ctx, ctx.arg("dim"), len(xs[0].shape))
    dt = ctx.out_dtype()
    xs = [ctx.cast(x, dt) for x in xs]
    return xs[0] if len(xs) == 1 else ctx.op("concatenate", *xs, axis=ax)


def _split(ctx, sizes: list, dim: int):
    x = ctx.input("self")
    ax = norm_dim(ctx, dim, len(x.shape))
    if len(sizes) == 1:
        return (x,)
    points = list(np.cumsum(sizes[:-1]).tolist())
    outs = ctx.op("split", x, indices_or_sections=tuple(int(p) for p in points), axis=ax)
    return tuple(outs)


@converter("aten.split_with_sizes.default", "aten.split_with_sizes_copy.default")
def _split_with_sizes(ctx):
    sizes = [int(s) for s in ctx.arg("split_sizes")]
    return _split(ctx, sizes, ctx.arg("dim"))


@converter("aten.split.Tensor", "aten.split_copy.Tensor")
def _split_tensor(ctx):
    t = ctx.tensor("self")
    d = norm_dim(ctx, ctx.arg("dim"), t.ndim)
    n = ctx.shape("self")[d]
    step = int(ctx.arg("split_size"))
    if not isinstance(n, int):
        ctx.unsupported("splitting a symbolic dimension")
    sizes = [min(step, n - s) for s in range(0, n, step)] or [0]
    return _split(ctx, sizes, d)


@converter("aten.unbind.int")
def _unbind(ctx):
    x = ctx.input("self")
    ax = norm_dim(ctx, ctx.arg("dim"), len(x.shape))
    n = x.shape[ax]
    if not isinstance(n, int):
        ctx.unsupported("unbinding a symbolic dimension")
    outs = [ctx.op("take", x, ctx.const(np.array(i, np.int64), "index"), axis=ax) for i in range(n)]
    return tuple(outs)


@converter("aten.slice.Tensor", "aten.slice_copy.Tensor")
def _slice(ctx):
    t = ctx.tensor("self")
    d = norm_dim(ctx, ctx.arg("dim"), t.ndim)
    size = ctx.shape("self")[d]
    out = ctx.out_sizes()[d]
    start, end, step = ctx.arg("start"), ctx.arg("end"), int(ctx.arg("step"))
    start = 0 if start is None else start
    end = sys.maxsize if end is None else end
    if factors(out) == factors(size) and start == 0 and step == 1:
        return t   # the whole dimension
    ax = value_axis(ctx, t, d, "the sliced dimension")
    x = t.value
    static = isinstance(start, int) and isinstance(end, int)
    if static and isinstance(x.shape[ax], int):
        end = min(end, 2 ** 63 - 1)
        y = ctx.op("strided_slice", x, begin=(start,), end=(end,), strides=(step,), axes=(ax,))
        return TorchTensor(y, t.parts)
    if start == 0 and step == 1 and isinstance(x.shape[ax], int):
        # x[..., :S] for a symbol S: the first S entries, S checked against the extent per run
        sym = ctx.dim(end, "the end of the slice")
        return TorchTensor(ctx.op("prefix_slice", x, axes=(ax,), extents=(sym,)), t.parts)
    ctx.unsupported(f"slicing dimension {d} of extent {size} from {start} to {end} by {step}: a symbolic slice "
                    f"other than the whole dimension or a prefix x[:S] of a static one")


@converter("aten.narrow.default")
def _narrow(ctx):
    x = ctx.input("self")
    ax = norm_dim(ctx, ctx.arg("dim"), len(x.shape))
    start, length = ctx.arg("start"), ctx.arg("length")
    if not isinstance(start, int) or not isinstance(length, int):
        ctx.unsupported("a symbolic narrow")
    return ctx.op("strided_slice", x, begin=(start,), end=(start + length,), axes=(ax,))


@converter("aten.select.int", "aten.select_copy.int")
def _select(ctx):
    t = ctx.tensor("self")
    d = norm_dim(ctx, ctx.arg("dim"), t.ndim)
    index = ctx.arg("index")
    if not isinstance(index, int):
        ctx.unsupported("selecting a symbolic index")
    ax = value_axis(ctx, t, d, "the selected dimension")
    y = ctx.op("take", t.value, ctx.const(np.array(index, np.int64), "index"), axis=ax)
    return TorchTensor(y, drop_parts(t, [d]))


@converter("aten.index.Tensor")
def _index(ctx):
    x = ctx.input("self")
    idx = list(ctx.arg("indices"))
    given = [i for i, v in enumerate(idx) if v is not None]
    if len(given) != 1:
        ctx.unsupported(f"indexing with {len(given)} index tensors (tessera converts one)")
    (p,) = given
    i = ctx.flat(idx[p], "the index")
    if str(i.dtype) == "bool":
        ctx.unsupported("indexing with a boolean mask (its result's size depends on the data)")
    return ctx.op("take", x, i, axis=p)


@converter("aten.index_select.default")
def _index_select(ctx):
    x = ctx.input("self")
    return ctx.op("take", x, ctx.input("index"), axis=norm_dim(ctx, ctx.arg("dim"), len(x.shape)))


@converter("aten.gather.default")
def _gather(ctx):
    x = ctx.input("self")
    return ctx.op("gather_elements", x, ctx.input("index"), axis=norm_dim(ctx, ctx.arg("dim"), len(x.shape)))


@converter("aten.flip.default")
def _flip(ctx):
    x = ctx.input("self")
    for d in ctx.arg("dims"):
        x = ctx.op("reverse", x, axis=norm_dim(ctx, d, len(x.shape)))
    return x


@converter("aten.repeat.default")
def _repeat(ctx):
    x = ctx.input("self")
    reps = [int(r) for r in ctx.arg("repeats")]
    if len(reps) > len(x.shape):
        x = ctx.op("reshape", x, newshape=(1,) * (len(reps) - len(x.shape)) + tuple(x.shape))
    return ctx.op("tile", x, reps=tuple(reps))


@converter("aten.tril.default", "aten.triu.default")
def _trilu(ctx):
    x = ctx.input("self")
    return ctx.op("trilu", x, upper=ctx.target == "aten.triu.default", k=int(ctx.arg("diagonal")))
