"""Converters' helpers for tensors whose torch dimensions are products of tessera dimensions
(TorchTensor.parts): elementwise alignment, views, axes.

Core ATen flattens (B, T, C) to (B*T, C) before a matrix product and (B, H, T, D) to (B*H, T, D)
before bmm; with symbolic B and T the product is not a tessera dimension, so the value keeps B and
T as dimensions of their own and these helpers carry the grouping through the ops that do not need
the product as one dimension.
"""
from __future__ import annotations

import collections
import math

import numpy as np

from . import TorchTensor
from .sizes import factors


def _static_merged(fs) -> list:
    """fs with each run of adjacent ints merged into their product (order kept)."""
    out = []
    for f in fs:
        if isinstance(f, int) and out and isinstance(out[-1], int):
            out[-1] *= f
        else:
            out.append(f)
    return out


def _key(fs) -> tuple:
    return math.prod(f for f in fs if isinstance(f, int)), collections.Counter(f for f in fs if isinstance(f, str))


def out_factors(ctx, k: int = 0) -> list:
    """Per torch dimension of output k, its factors (ints and bound symbol names)."""
    out = []
    for d in ctx.out_sizes(k):
        fs = factors(d)
        if fs is None:
            ctx.unsupported(f"output size {d} is an expression of symbolic sizes; tessera's dimensions are ints "
                            f"or single symbols")
        for f in fs:
            if isinstance(f, str):
                ctx.dim(f)
        out.append(tuple(_static_merged(fs)) or (1,))
    return out


def aligned(ctx, args, dtype):
    """The Values of `args` (TorchTensors and Python numbers), cast to `dtype` (one for all, or one
    per argument, None keeping the argument's own), shaped so that they
    broadcast (numpy's rules) to output 0's value shape; and that output's parts. A torch dimension
    some input holds as factors is held as those factors by every input that does not broadcast it."""
    sizes = ctx.out_sizes()
    rank = len(sizes)
    dtypes = list(dtype) if isinstance(dtype, (list, tuple)) else [dtype] * len(args)
    want = [None] * rank
    for a in args:
        if isinstance(a, TorchTensor) and a.parts is not None:
            off = rank - a.ndim
            for i in range(a.ndim):
                f = a.factors(i)
                if len(f) > 1:
                    if want[off + i] is not None and want[off + i] != f:
                        ctx.unsupported(f"the inputs hold dimension {off + i} as the factors {want[off + i]} and {f}, "
                                        f"in different orders")
                    want[off + i] = f
    values = []
    if all(w is None for w in want):
        for a, dt in zip(args, dtypes):
            v = a.value if isinstance(a, TorchTensor) else ctx.scalar(a, dt or ctx.out_dtype())
            values.append(v if dt is None else ctx.cast(v, dt))
        return values, None
    for i in range(rank):
        if want[i] is None:
            want[i] = (ctx.dim(sizes[i], f"output dimension {i}"),)
    for a, dt in zip(args, dtypes):
        if not isinstance(a, TorchTensor):
            values.append(ctx.scalar(a, dt or ctx.out_dtype()))
            continue
        off = rank - a.ndim
        shape = []
        for i in range(a.ndim):
            f, w = a.factors(i), want[off + i]
            if f == w:
                shape += f
            elif f == (1,) or all(x == 1 for x in f):
                shape += [1] * len(w)
            elif len(f) > 1 or len(w) > 1:
                ctx.unsupported(f"an input's dimension {i} ({' * '.join(map(str, f))}) does not match the output's "
                                f"({' * '.join(map(str, w))})")
            else:
                shape += f
        v = a.value if tuple(shape) == tuple(a.value.shape) else ctx.op("reshape", a.value, newshape=tuple(shape))
        values.append(v if dt is None else ctx.cast(v, dt))
    return values, tuple(len(w) for w in want)


def elementwise(ctx, fn, args, dtype: str):
    """fn(*values) over the aligned args (see `aligned`), as a TorchTensor of output 0's shape."""
    values, parts = aligned(ctx, args, dtype)
    return TorchTensor(fn(*values), parts)


def view(ctx, t: TorchTensor, k: int = 0):
    """t viewed as output k's shape (reshape, unsqueeze, squeeze, flatten: any row-major view). A
    torch dimension that is a product of symbolic sizes takes the factors of t's value that make it."""
    want = out_factors(ctx, k)
    src = list(t.value.shape)
    if all(len(w) == 1 for w in want):
        shape = tuple(w[0] for w in want)
        if shape == tuple(src) and t.parts is None:
            return t
        return TorchTensor(ctx.op("reshape", t.value, newshape=shape))
    new_shape, parts = [], []
    i = 0

    def fail():
        have = " x ".join(map(str, t.value.shape))
        ctx.unsupported(f"cannot view ({have}) as ({', '.join(' * '.join(map(str, w)) for w in want)}): a symbolic "
                        f"product of sizes would have to split a dimension")

    for w in want:
        ws, wsyms = _key(w)
        if ws == 1 and not wsyms:
            new_shape.append(1)
            parts.append(1)
            continue
        group, acc, syms = [], 1, collections.Counter()
        while (acc, syms) != (ws, wsyms):
            if i >= len(src):
                fail()
            d = src[i]
            if isinstance(d, str):
                syms[d] += 1
                if syms[d] > wsyms[d]:
                    fail()
                group.append(d)
                i += 1
            elif d == 1:
                i += 1
            else:
                if ws % acc:
                    fail()
                need = ws // acc
                if need % d == 0:
                    group.append(d)
                    acc *= d
                    i += 1
                elif d % need == 0:
                    group.append(need)
                    acc *= need
                    src[i] = d // need
                else:
                    fail()
        group = _static_merged(group)
        new_shape += group
        parts.append(len(group))
    if any(d != 1 for d in src[i:]):
        fail()
    v = t.value if tuple(new_shape) == tuple(t.value.shape) else ctx.op("reshape", t.value, newshape=tuple(new_shape))
    return TorchTensor(v, parts)


def axis(ctx, t: TorchTensor, dim: int, what: str = "dimension") -> int:
    """The value's axis that is torch dimension `dim` of t (negative dims count from the end);
    refused when that dimension is a product of symbolic sizes."""
    dim = norm_dim(ctx, dim, t.ndim)
    g = t.groups()[dim]
    if len(g) != 1:
        ctx.unsupported(f"{what} {dim} is {' * '.join(map(str, t.factors(dim)))}, a product of symbolic sizes, "
                        f"which this op needs as one dimension")
    return g[0]


def norm_dim(ctx, dim: int, ndim: int) -> int:
    d = int(dim)
    if not -max(ndim, 1) <= d < max(ndim, 1):
        ctx.unsupported(f"dimension {dim} is out of range for rank {ndim}")
    return d % max(ndim, 1)


def drop_parts(t: TorchTensor, dims) -> tuple | None:
    """The parts of t without torch dimensions `dims` (normalized)."""
    if t.parts is None:
        return None
    return tuple(p for i, p in enumerate(t.parts) if i not in set(dims))


def broadcast(ctx, x, shape):
    """x broadcast to `shape` (ints and symbol names). A symbol that x's shape lacks comes from an
    `arange` of that extent (the graph's inputs bind it at run time): a kernel takes its symbolic
    extents from its inputs, so broadcast_to alone cannot make one."""
    shape = tuple(shape)
    missing = [i for i, d in enumerate(shape) if isinstance(d, str) and d not in x.shape]
    if missing:
        carrier = None
        for i in missing:
            c = ctx.op("arange", extent=shape[i], dtype="int32")
            c = ctx.op("reshape", c, newshape=tuple(shape[i] if j == i else 1 for j in range(len(shape))))
            carrier = c if carrier is None else ctx.op("add", carrier, c)
        carrier = ctx.cast(carrier, str(x.dtype))
        x = ctx.op("where", ctx.const(np.array(True), "true"), x, carrier)
    return x if tuple(x.shape) == shape else ctx.op("broadcast_to", x, shape=shape)
