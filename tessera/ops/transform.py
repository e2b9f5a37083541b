"""Shape and data-movement ops (pattern INJECTIVE; the scatters are OPAQUE).

Every output element reads input elements at computable positions: reshape, transpose, squeeze,
expand_dims, broadcast_to, concatenate, split, strided_slice, take, gather_elements, gather_nd,
tile, reverse, nn.pad, nn.depth_to_space, nn.space_to_depth, one_hot, trilu, layout_transform,
eye_like; scatter_elements and scatter_nd reduce over the updates that land on each output element.

Gather- and scatter-style index inputs follow ONNX Runtime: an index in [-n, n) is valid (a negative
one counts from the end); any other is refused at run time (tir.transform.lower_checks: the C kernel
returns an error naming the index and the range, checked once per index). On OpenCL and CUDA, whose
kernels cannot report, an out-of-range index is clamped into the tensor instead (reading memory
outside it is never an option).
"""
from __future__ import annotations

import math
import re

from .. import te
from ..errors import DTypeError, ScheduleError, ShapeError, TesseraError
from ..ir import TensorType
from ..ir import expr as E
from ..ir.dtype import DataType
from ._common import (ALL, INDEX, NUMERIC, broadcast_shapes, check_dtype, check_same_dtype, cast,
                      const, dim_product, dim_sum, fmt_shape, is_const, normalize_axes, normalize_axis, static)
from . import _schedule as S
from ._schedule import schedule_injective
from ..tir.transform.lower_checks import check_range
from .registry import REQUIRED, OpPattern, register_op
from ._common import broadcast_index

_sel = E.Select


def _te_dim(d, vars_by_name):
    """A graph dim (int or symbol name) as a te extent, the symbol's Var taken from the inputs."""
    if isinstance(d, str):
        v = vars_by_name.get(d)
        if v is None:
            raise ShapeError(f"symbolic dimension {d!r} does not appear in the input shapes")
        return v
    return int(d)


def _graph_shape(shape) -> tuple:
    """A te shape as graph dims (ints and the names of the symbolic Vars)."""
    out = []
    for d in shape:
        if isinstance(d, E.IntImm):
            out.append(int(d.value))
        elif isinstance(d, E.Var):
            out.append(d.name)
        else:
            raise ShapeError(f"extent {d.script()} is an expression, not a constant or a symbol")
    return tuple(out)


def _vars_of(*tensors) -> dict:
    out = {}
    for t in tensors:
        for d in t.shape:
            if isinstance(d, E.Var):
                out.setdefault(d.name, d)
    return out


def _idx(e, like):
    """e as an index expression next to `like` (int32 or int64)."""
    return e if e.dtype == like.dtype else e.astype(like.dtype) if like.dtype == "int64" else e


def _norm_index(v, dim):
    """A gathered index: negative counts from the end, then clamped into [0, dim)."""
    v = v.astype("int64") if v.dtype != "int64" else v
    d = _dim64(dim)
    v = _sel(v < E.const(0, "int64"), v + d, v)
    return te.max(te.min(v, d - E.const(1, "int64")), E.const(0, "int64"))


def _dim64(dim):
    return E.const(dim, "int64") if isinstance(dim, int) else E.convert(dim).astype("int64")


def checked_index(op, v, dim, what, negative=True, extra=()):
    """An index read from a tensor, refused at run time outside [-dim, dim) ([0, dim) when not
    negative) as ONNX Runtime refuses it, then normalized into [0, dim) (see the module docstring).
    what: where the index points, for the message ("along axis 0 of data"); its {3}, {4}... print
    the extra expressions."""
    v = v.astype("int64") if v.dtype != "int64" else v
    d = _dim64(dim)
    lo = -d if negative else E.const(0, "int64")
    msg = f"{op}: index {{0}} is out of range [{{1}}, {{2}}) {what}"
    return _norm_index(check_range(v, lo, d, msg, *extra), dim)


def _register(name, inputs, attrs=None, pattern=OpPattern.INJECTIVE, num_outputs=1, doc=""):
    op = register_op(name, inputs=inputs, pattern=pattern, attrs=attrs or {}, num_outputs=num_outputs,
                     doc=doc)
    op.def_schedule(schedule_injective)
    return op


# ---------------------------------------------------------------------------------------------
# reshape
# ---------------------------------------------------------------------------------------------
def resolve_newshape(op: str, in_shape, newshape) -> tuple:
    """Output dims of reshaping in_shape to newshape: 0 copies the input dim at that position,
    -1 is inferred (one at most), a str names a symbolic dim of the input. Symbolic dims must map
    one to one; anything else is a ShapeError."""
    if newshape is None:
        raise ShapeError(f"{op}: newshape is required")
    if isinstance(newshape, (int, str)):
        newshape = (newshape,)
    out, infer_at = [], None
    for k, s in enumerate(newshape):
        if isinstance(s, str):
            out.append(s)
        elif isinstance(s, bool) or not isinstance(s, int):
            raise ShapeError(f"{op}: newshape entry {s!r} is not an integer")
        elif s == 0:
            if k >= len(in_shape):
                raise ShapeError(f"{op}: newshape {tuple(newshape)} copies dimension {k} (a 0) but the input "
                                 f"{fmt_shape(in_shape)} has rank {len(in_shape)}")
            out.append(in_shape[k])
        elif s == -1:
            if infer_at is not None:
                raise ShapeError(f"{op}: newshape {tuple(newshape)} has more than one -1")
            infer_at = k
            out.append(None)
        elif s < -1:
            raise ShapeError(f"{op}: newshape {tuple(newshape)} has the negative entry {s}")
        else:
            out.append(s)
    in_static = dim_product(d for d in in_shape if isinstance(d, int))
    in_syms = sorted(d for d in in_shape if isinstance(d, str))
    out_static = dim_product(d for d in out if isinstance(d, int))
    out_syms = sorted(d for d in out if isinstance(d, str))
    left = list(in_syms)
    for s in out_syms:
        if s not in left:
            raise ShapeError(f"{op}: cannot reshape {fmt_shape(in_shape)} to {tuple(newshape)}: symbolic "
                             f"dimension {s!r} is not (or not that often) in the input")
        left.remove(s)
    if infer_at is None:
        if left or in_static != out_static:
            raise ShapeError(f"{op}: cannot reshape {fmt_shape(in_shape)} ({_count(in_static, in_syms)} "
                             f"elements) to {fmt_shape(out)} ({_count(out_static, out_syms)} elements)")
        return tuple(out)
    if out_static == 0 or in_static % out_static:
        raise ShapeError(f"{op}: cannot reshape {fmt_shape(in_shape)} to {tuple(newshape)}: "
                         f"{_count(in_static, in_syms)} elements do not divide into {out_static}-element rows")
    rest = in_static // out_static
    if not left:
        out[infer_at] = rest
    elif len(left) == 1 and rest == 1:
        out[infer_at] = left[0]
    else:
        raise ShapeError(f"{op}: reshaping {fmt_shape(in_shape)} to {tuple(newshape)} needs the -1 to be "
                         f"{' * '.join(left + ([str(rest)] if rest != 1 else []))}, which is not a single "
                         f"dimension; give the symbolic dimensions explicitly")
    return tuple(out)


def _count(static_n, syms):
    return " * ".join([str(static_n)] + list(syms)) if syms else str(static_n)


reshape = _register("reshape", ("data",), {"newshape": REQUIRED},
                    doc="Reshape (row-major). newshape: 0 copies the input dim at that position, -1 is "
                        "inferred, a name is a symbolic dim (ONNX allowzero=0 semantics; the ONNX "
                        "converter resolves allowzero=1 itself).")


@reshape.def_infer
def _reshape_infer(types, attrs):
    (t,) = types
    return [TensorType(resolve_newshape("reshape", t.shape, attrs["newshape"]), t.dtype)]


def unravel(linear, shape):
    """Row-major indices of a linear position in `shape` (te extents)."""
    idx = []
    for d in reversed(shape):
        if is_const(d, 1):
            idx.append(E.const(0, linear.dtype))
            continue
        d = _idx(E.convert(d), linear)
        idx.append(linear % d)
        linear = linear // d
    return tuple(reversed(idx))


def ravel(indices, shape):
    """The row-major linear position of indices in `shape` (int64 when the size needs it)."""
    big = any(getattr(E.convert(d), "dtype", "int32") == "int64" for d in shape) or \
        (dim_product(static(E.convert(d)) for d in shape) or 0) >= 2 ** 31
    dt = "int64" if big else "int32"
    lin = E.const(0, dt)
    for i, d in zip(indices, shape):
        i = E.convert(i)
        i = i.astype(dt) if i.dtype != dt else i
        d = E.convert(d)
        d = d.astype(dt) if d.dtype != dt else d
        lin = i if is_const(lin, 0) else lin * d + i
    return lin


@reshape.def_compute
def _reshape_compute(tensors, attrs):
    (x,) = tensors
    vars_ = _vars_of(x)
    dims = resolve_newshape("reshape", _graph_shape(x.shape), attrs["newshape"])
    out_shape = [_te_dim(d, vars_) for d in dims]
    src = _graph_shape(x.shape)
    if src == dims:
        return [te.compute(out_shape, lambda *i: x[i], name="T_reshape")]
    head = tail = 0
    if not all(isinstance(d, int) for d in tuple(src) + tuple(dims)):
        # symbolic: equal leading and trailing dims index straight through, so no division by a
        # symbolic extent is left that the simplifier cannot remove (a static reshape is unchanged)
        while head < min(len(src), len(dims)) and src[head] == dims[head]:
            head += 1
        while tail < min(len(src), len(dims)) - head and src[-1 - tail] == dims[-1 - tail]:
            tail += 1
    inner_out, inner_in = out_shape[head:len(out_shape) - tail], x.shape[head:len(x.shape) - tail]

    def body(*i):
        mid = unravel(ravel(i[head:len(i) - tail], inner_out), inner_in) if inner_in else ()
        return x[tuple(i[:head]) + tuple(mid) + tuple(i[len(i) - tail:])]

    return [te.compute(out_shape, body, name="T_reshape")]


# ---------------------------------------------------------------------------------------------
# transpose, squeeze, expand_dims, broadcast_to
# ---------------------------------------------------------------------------------------------
transpose = _register("transpose", ("data",), {"axes": None},
                      doc="Permute the axes (None: reverse them, as numpy).")


def _perm(axes, ndim):
    if axes is None:
        return tuple(reversed(range(ndim)))
    if len(axes) != ndim:
        raise ShapeError(f"transpose: axes {tuple(axes)} has {len(axes)} entries for a tensor of rank {ndim}")
    perm = tuple(normalize_axis("transpose", a, ndim) for a in axes)
    if sorted(perm) != list(range(ndim)):
        raise ShapeError(f"transpose: axes {tuple(axes)} is not a permutation of 0..{ndim - 1}")
    return perm


@transpose.def_infer
def _transpose_infer(types, attrs):
    (t,) = types
    perm = _perm(attrs["axes"], t.ndim)
    return [TensorType(tuple(t.shape[p] for p in perm), t.dtype)]


@transpose.def_compute
def _transpose_compute(tensors, attrs):
    (x,) = tensors
    perm = _perm(attrs["axes"], len(x.shape))
    inv = [perm.index(k) for k in range(len(perm))]
    return [te.compute([x.shape[p] for p in perm], lambda *i: x[tuple(i[inv[k]] for k in range(len(inv)))],
                       name="T_transpose")]


squeeze = _register("squeeze", ("data",), {"axes": None},
                    doc="Remove axes of extent 1 (None: every static 1).")


def _squeeze_axes(shape, axes):
    if axes is None:
        return tuple(k for k, d in enumerate(shape) if d == 1)
    axes = normalize_axes("squeeze", axes, len(shape))
    for a in axes:
        if shape[a] != 1:
            raise ShapeError(f"squeeze: axis {a} of {fmt_shape(shape)} has extent {shape[a]}, not 1")
    return axes


@squeeze.def_infer
def _squeeze_infer(types, attrs):
    (t,) = types
    axes = _squeeze_axes(t.shape, attrs["axes"])
    return [TensorType(tuple(d for k, d in enumerate(t.shape) if k not in axes), t.dtype)]


@squeeze.def_compute
def _squeeze_compute(tensors, attrs):
    (x,) = tensors
    gs = _graph_shape(x.shape)
    axes = _squeeze_axes(gs, attrs["axes"])
    keep = [k for k in range(len(gs)) if k not in axes]

    def body(*i):
        idx = [E.const(0, x.shape[k].dtype) for k in range(len(gs))]
        for j, k in enumerate(keep):
            idx[k] = i[j]
        return x[tuple(idx)]

    return [te.compute([x.shape[k] for k in keep], body, name="T_squeeze")]


expand_dims = _register("expand_dims", ("data",), {"axis": REQUIRED, "num_newaxis": 1},
                        doc="Insert num_newaxis axes of extent 1 before position axis (-1: at the end; as "
                            "Relay).")


def _expand_at(ndim, attrs):
    n = int(attrs["num_newaxis"])
    if n < 0:
        raise ShapeError(f"expand_dims: num_newaxis must be >= 0, got {n}")
    return normalize_axis("expand_dims", attrs["axis"], ndim, extra=1), n


@expand_dims.def_infer
def _expand_dims_infer(types, attrs):
    (t,) = types
    axis, n = _expand_at(t.ndim, attrs)
    return [TensorType(t.shape[:axis] + (1,) * n + t.shape[axis:], t.dtype)]


@expand_dims.def_compute
def _expand_dims_compute(tensors, attrs):
    (x,) = tensors
    axis, n = _expand_at(len(x.shape), attrs)
    shape = list(x.shape[:axis]) + [1] * n + list(x.shape[axis:])
    return [te.compute(shape, lambda *i: x[tuple(i[:axis]) + tuple(i[axis + n:])], name="T_expand_dims")]


broadcast_to = _register("broadcast_to", ("data",), {"shape": REQUIRED},
                         doc="Broadcast data to `shape` (numpy broadcast_to; ONNX Expand's bidirectional "
                             "rule is applied by the converter).")


def _bcast_target(t_shape, shape):
    shape = tuple(shape)
    got = broadcast_shapes("broadcast_to", t_shape, shape)
    if got != shape:
        raise ShapeError(f"broadcast_to: {fmt_shape(t_shape)} does not broadcast to {fmt_shape(shape)}")
    return shape


@broadcast_to.def_infer
def _broadcast_to_infer(types, attrs):
    (t,) = types
    return [TensorType(_bcast_target(t.shape, attrs["shape"]), t.dtype)]


@broadcast_to.def_compute
def _broadcast_to_compute(tensors, attrs):
    (x,) = tensors
    shape = _bcast_target(_graph_shape(x.shape), attrs["shape"])
    vars_ = _vars_of(x)
    return [te.compute([_te_dim(d, vars_) for d in shape], lambda *i: x[broadcast_index(x, i)],
                       name="T_broadcast_to")]


# ---------------------------------------------------------------------------------------------
# concatenate, split
# ---------------------------------------------------------------------------------------------
concatenate = _register("concatenate", ("data*",), {"axis": 0},
                        doc="Join tensors along axis (the others match). A symbolic extent along axis makes "
                            "the result's extent the symbol of the sum (ops._common.dim_sum).")


def _concat_check(shapes, axis, dtypes=None):
    if not shapes:
        raise ShapeError("concatenate: needs at least one input")
    nd = len(shapes[0])
    if nd == 0:
        raise ShapeError("concatenate: cannot concatenate scalars (rank 0)")
    axis = normalize_axis("concatenate", axis, nd)
    for k, s in enumerate(shapes):
        if len(s) != nd:
            raise ShapeError(f"concatenate: input {k} has rank {len(s)}, input 0 rank {nd} "
                             f"({fmt_shape(s)} vs {fmt_shape(shapes[0])})")
        for d in range(nd):
            if d != axis and s[d] != shapes[0][d]:
                raise ShapeError(f"concatenate: input {k} {fmt_shape(s)} and input 0 {fmt_shape(shapes[0])} "
                                 f"differ in dimension {d} (only axis {axis} may differ)")
    return axis, dim_sum([s[axis] for s in shapes])


@concatenate.def_infer
def _concat_infer(types, attrs):
    check_same_dtype("concatenate", types, [f"input {k}" for k in range(len(types))])
    axis, total = _concat_check([t.shape for t in types], attrs["axis"])
    s = types[0].shape
    return [TensorType(s[:axis] + (total,) + s[axis + 1:], types[0].dtype)]


@concatenate.def_compute
def _concat_compute(tensors, attrs):
    shapes = [_graph_shape(t.shape) for t in tensors]
    axis, _ = _concat_check(shapes, attrs["axis"])
    parts = [t for t in tensors if static(t.shape[axis]) != 0] or [tensors[0]]
    # where each part starts along axis: ints, or expressions of the symbolic extents before it
    starts, off = [], 0
    for t in parts:
        starts.append(off)
        ext = static(t.shape[axis])
        off = off + ext if ext is not None and isinstance(off, int) else E.convert(off) + t.shape[axis]
    shape = list(tensors[0].shape)
    shape[axis] = off

    def body(*i):
        ax = i[axis]

        def at(k):
            start = starts[k]
            local = ax - (const(start, ax.dtype) if isinstance(start, int) else cast(start, ax.dtype))
            return parts[k][tuple(i[:axis]) + (local,) + tuple(i[axis + 1:])]

        value = at(len(parts) - 1)
        for k in range(len(parts) - 2, -1, -1):
            end = starts[k + 1]
            end = const(end, ax.dtype) if isinstance(end, int) else cast(end, ax.dtype)
            value = te.if_then_else(ax < end, at(k), value)
        return value

    return [te.compute(shape, body, name="T_concat")]


split = _register("split", ("data",), {"indices_or_sections": REQUIRED, "axis": 0}, num_outputs=None,
                  doc="Split along axis: an int gives that many equal parts, a tuple the split points "
                      "(numpy array_split indices).")


def _split_bounds(shape, attrs):
    nd = len(shape)
    axis = normalize_axis("split", attrs["axis"], nd)
    d = shape[axis]
    ios = attrs["indices_or_sections"]
    if not isinstance(d, int):
        raise ShapeError(f"split: axis {axis} of {fmt_shape(shape)} is symbolic; splitting needs a static extent")
    if isinstance(ios, int):
        if ios <= 0 or d % ios:
            raise ShapeError(f"split: cannot split extent {d} (axis {axis}) into {ios} equal parts")
        points = [d // ios * k for k in range(1, ios)]
    else:
        points = [int(p) for p in ios]
        if any(b < a for a, b in zip(points, points[1:])) or any(p < 0 or p > d for p in points):
            raise ShapeError(f"split: split points {tuple(points)} must be ascending within 0..{d}")
    bounds = [0] + points + [d]
    return axis, list(zip(bounds[:-1], bounds[1:]))


@split.def_infer
def _split_infer(types, attrs):
    (t,) = types
    axis, parts = _split_bounds(t.shape, attrs)
    return [TensorType(t.shape[:axis] + (b - a,) + t.shape[axis + 1:], t.dtype) for a, b in parts]


@split.def_compute
def _split_compute(tensors, attrs):
    (x,) = tensors
    axis, parts = _split_bounds(_graph_shape(x.shape), attrs)
    outs = []
    for k, (a, b) in enumerate(parts):
        shape = list(x.shape)
        shape[axis] = b - a
        outs.append(te.compute(shape, lambda *i, a=a: x[tuple(i[:axis]) + (i[axis] + a,) + tuple(i[axis + 1:])],
                               name=f"T_split{k}"))
    return outs


# ---------------------------------------------------------------------------------------------
# strided_slice (ONNX Slice semantics)
# ---------------------------------------------------------------------------------------------
strided_slice = _register("strided_slice", ("data",),
                          {"begin": REQUIRED, "end": REQUIRED, "strides": None, "axes": None},
                          doc="Slice with ONNX Slice semantics: negative begin/end count from the end, "
                              "both are clamped, strides may be negative; axes default to 0..len(begin)-1.")


def slice_plan(shape, attrs):
    """Per axis: (start, step, length) for sliced axes; None for untouched ones."""
    begin, end = list(attrs["begin"]), list(attrs["end"])
    n = len(begin)
    strides = list(attrs["strides"]) if attrs["strides"] is not None else [1] * n
    axes = list(attrs["axes"]) if attrs["axes"] is not None else list(range(n))
    if not len(end) == len(strides) == len(axes) == n:
        raise ShapeError(f"strided_slice: begin, end, strides and axes have different lengths "
                         f"({n}, {len(end)}, {len(strides)}, {len(axes)})")
    plan = [None] * len(shape)
    for b, e, st, ax in zip(begin, end, strides, axes):
        ax = normalize_axis("strided_slice", ax, len(shape))
        if plan[ax] is not None:
            raise ShapeError(f"strided_slice: axis {ax} is sliced twice")
        b, e, st = int(b), int(e), int(st)
        if st == 0:
            raise ShapeError(f"strided_slice: stride 0 on axis {ax}")
        d = shape[ax]
        if not isinstance(d, int):
            if b == 0 and st == 1 and e >= 2 ** 31 - 1:
                continue  # the whole of a symbolic axis
            raise ShapeError(f"strided_slice: axis {ax} has the symbolic extent {d!r}; slicing it needs a "
                             f"static extent (or the whole axis: begin 0, end INT_MAX, stride 1)")
        if b < 0:
            b += d
        if e < 0:
            e += d
        if st > 0:
            b, e = min(max(b, 0), d), min(max(e, 0), d)
            length = max(0, -(-(e - b) // st))
        else:
            b, e = min(max(b, 0), d - 1), min(max(e, -1), d - 1)
            length = max(0, -(-(b - e) // -st))
        plan[ax] = (b, st, length)
    return plan


@strided_slice.def_infer
def _slice_infer(types, attrs):
    (t,) = types
    plan = slice_plan(t.shape, attrs)
    return [TensorType(tuple(d if p is None else p[2] for d, p in zip(t.shape, plan)), t.dtype)]


@strided_slice.def_compute
def _slice_compute(tensors, attrs):
    (x,) = tensors
    plan = slice_plan(_graph_shape(x.shape), attrs)
    shape = [d if p is None else p[2] for d, p in zip(x.shape, plan)]

    def body(*i):
        return x[tuple(v if p is None else v * const(p[1], v.dtype) + const(p[0], v.dtype)
                       for v, p in zip(i, plan))]

    return [te.compute(shape, body, name="T_strided_slice")]


# ---------------------------------------------------------------------------------------------
# gathers
# ---------------------------------------------------------------------------------------------
take = _register("take", ("data", "indices"), {"axis": 0},
                 doc="Gather slices of data along axis at indices (ONNX Gather; negative indices count "
                     "from the end, out-of-range ones are refused at run time).")


@take.def_infer
def _take_infer(types, attrs):
    d, i = types
    check_dtype("take", i.dtype, INDEX, "indices")
    axis = normalize_axis("take", attrs["axis"], d.ndim)
    return [TensorType(d.shape[:axis] + i.shape + d.shape[axis + 1:], d.dtype)]


@take.def_compute
def _take_compute(tensors, attrs):
    d, ind = tensors
    axis = normalize_axis("take", attrs["axis"], len(d.shape))
    r = len(ind.shape)
    shape = list(d.shape[:axis]) + list(ind.shape) + list(d.shape[axis + 1:])

    def body(*i):
        k = checked_index("take", ind[tuple(i[axis:axis + r])], d.shape[axis], f"along axis {axis} of data")
        return d[tuple(i[:axis]) + (k,) + tuple(i[axis + r:])]

    return [te.compute(shape, body, name="T_take")]


gather_elements = _register("gather_elements", ("data", "indices"), {"axis": 0},
                            doc="out[p] = data[p with p[axis] = indices[p]] (ONNX GatherElements).")


@gather_elements.def_infer
def _gather_elements_infer(types, attrs):
    d, i = types
    check_dtype("gather_elements", i.dtype, INDEX, "indices")
    if d.ndim != i.ndim:
        raise ShapeError(f"gather_elements: data {fmt_shape(d.shape)} and indices {fmt_shape(i.shape)} "
                         f"must have one rank")
    normalize_axis("gather_elements", attrs["axis"], d.ndim)
    return [TensorType(i.shape, d.dtype)]


@gather_elements.def_compute
def _gather_elements_compute(tensors, attrs):
    d, ind = tensors
    axis = normalize_axis("gather_elements", attrs["axis"], len(d.shape))

    def body(*i):
        k = checked_index("gather_elements", ind[i], d.shape[axis], f"along axis {axis} of data")
        return d[tuple(i[:axis]) + (k,) + tuple(i[axis + 1:])]

    return [te.compute(ind.shape, body, name="T_gather_elements")]


gather_nd = _register("gather_nd", ("data", "indices"), {"batch_dims": 0},
                      doc="ONNX GatherND: the last axis of indices addresses data (after batch_dims "
                          "leading batch axes).")


def _gather_nd_shape(op, d_shape, i_shape, b):
    if b < 0 or b >= min(len(d_shape), len(i_shape)):
        raise ShapeError(f"{op}: batch_dims {b} must be below the ranks of data {fmt_shape(d_shape)} and "
                         f"indices {fmt_shape(i_shape)}")
    if d_shape[:b] != i_shape[:b]:
        raise ShapeError(f"{op}: the first {b} (batch) dims of data {fmt_shape(d_shape)} and indices "
                         f"{fmt_shape(i_shape)} differ")
    k = i_shape[-1]
    if not isinstance(k, int) or not 1 <= k <= len(d_shape) - b:
        raise ShapeError(f"{op}: the last dim of indices {fmt_shape(i_shape)} must be a static 1.."
                         f"{len(d_shape) - b} (data rank {len(d_shape)} minus batch_dims {b})")
    return k


@gather_nd.def_infer
def _gather_nd_infer(types, attrs):
    d, i = types
    check_dtype("gather_nd", i.dtype, INDEX, "indices")
    b = int(attrs["batch_dims"])
    k = _gather_nd_shape("gather_nd", d.shape, i.shape, b)
    return [TensorType(i.shape[:-1] + d.shape[b + k:], d.dtype)]


@gather_nd.def_compute
def _gather_nd_compute(tensors, attrs):
    d, ind = tensors
    b = int(attrs["batch_dims"])
    k = _gather_nd_shape("gather_nd", _graph_shape(d.shape), _graph_shape(ind.shape), b)
    ri = len(ind.shape) - 1
    shape = list(ind.shape[:-1]) + list(d.shape[b + k:])

    def body(*i):
        pos = tuple(i[:ri])
        idx = list(i[:b])
        for j in range(k):
            idx.append(checked_index("gather_nd", ind[pos + (E.const(j, "int32"),)], d.shape[b + j],
                                     f"along axis {b + j} of data (entry {j} of an index tuple)"))
        return d[tuple(idx) + tuple(i[ri:])]

    return [te.compute(shape, body, name="T_gather_nd")]


# ---------------------------------------------------------------------------------------------
# scatters: a reduction over the updates that land on each output element
# ---------------------------------------------------------------------------------------------
_REDUCTIONS = ("none", "add", "mul", "max", "min")


def _scatter_combine(data_value, found, value, reduction, dtype):
    if reduction == "none":
        return _sel(found, value, data_value)
    if reduction == "add":
        return _sel(found, data_value + value, data_value)
    if reduction == "mul":
        return _sel(found, data_value * value, data_value)
    if reduction == "max":
        return _sel(found, te.max(data_value, value), data_value)
    return _sel(found, te.min(data_value, value), data_value)


_PROD = te.comm_reducer(lambda x, y: x * y, lambda t: const(1, t), name="prod")


def _scatter_reduce(reduction, source, axes, cond):
    """The updates landing on one output point, combined by reduction (add/mul/max/min)."""
    red = {"add": te.sum, "mul": _PROD, "max": te.max, "min": te.min}[reduction]
    return red(source, axis=axes, where=cond)


def _check_reduction(op, r, dtype):
    if r not in _REDUCTIONS:
        raise TesseraError(f"{op}: reduction must be one of {_REDUCTIONS}, got {r!r}")
    if r != "none" and DataType(dtype).is_bool():
        raise DTypeError(f"{op}: reduction {r!r} on bool data is not supported")


scatter_elements = _register("scatter_elements", ("data", "indices", "updates"),
                             {"axis": 0, "reduction": "none", "negative_indices": True}, pattern=OpPattern.OPAQUE,
                             doc="ONNX ScatterElements: data with updates written at indices along axis, "
                                 "combined by reduction (none: the last update wins); every index is checked "
                                 "first (negative_indices=False also refuses negative ones, as MaxUnpool).")


@scatter_elements.def_infer
def _scatter_elements_infer(types, attrs):
    d, i, u = types
    check_dtype("scatter_elements", i.dtype, INDEX, "indices")
    check_same_dtype("scatter_elements", (d, u), ("data", "updates"))
    _check_reduction("scatter_elements", attrs["reduction"], d.dtype)
    if not d.ndim == i.ndim == u.ndim or i.shape != u.shape:
        raise ShapeError(f"scatter_elements: data {fmt_shape(d.shape)}, indices {fmt_shape(i.shape)} and "
                         f"updates {fmt_shape(u.shape)} must have one rank, indices and updates one shape")
    normalize_axis("scatter_elements", attrs["axis"], d.ndim)
    return [d]


@scatter_elements.def_compute
def _scatter_elements_compute(tensors, attrs):
    d, ind, upd = tensors
    axis = normalize_axis("scatter_elements", attrs["axis"], len(d.shape))
    reduction = attrs["reduction"]
    _check_reduction("scatter_elements", reduction, d.dtype)
    k = te.reduce_axis((0, ind.shape[axis]), name="k")
    # every index checked and normalized once, before anything is written
    target = te.compute(ind.shape, lambda *i: checked_index(
        "scatter_elements", ind[i], d.shape[axis], f"along axis {axis} of data",
        bool(attrs["negative_indices"])), name="T_scatter_index")

    def point(i):
        conds, idx = [], []
        for j in range(len(i)):
            if j == axis:
                idx.append(k.var)
            elif _same(ind.shape[j], d.shape[j]):
                idx.append(i[j])
            else:  # indices/updates may be smaller than data off the axis
                lim = _idx(E.convert(ind.shape[j]), i[j])
                conds.append(i[j] < lim)
                idx.append(te.min(i[j], lim - const(1, i[j].dtype)))
        idx = tuple(idx)
        hit = target[idx] == i[axis].astype("int64")
        return idx, te.all(*conds, hit)

    if reduction == "none":  # the last update landing here wins: the highest k that hits
        def last_body(*i):
            clamped, cond = point(i)
            return te.max(k.var.astype("int64"), axis=k, where=cond)

        last = te.compute(d.shape, last_body, name="T_scatter_last")

        def pick(*i):
            found = last[i] >= E.const(0, "int64")
            at = []
            for j in range(len(i)):
                if j == axis:
                    at.append(te.max(last[i], E.const(0, "int64")))
                elif _same(ind.shape[j], d.shape[j]):
                    at.append(i[j])
                else:
                    lim = _idx(E.convert(ind.shape[j]), i[j])
                    at.append(te.min(i[j], lim - const(1, i[j].dtype)))
            return _sel(found, upd[tuple(at)], d[i])

        return [te.compute(d.shape, pick, name="T_scatter_elements")]

    def count_body(*i):
        clamped, cond = point(i)
        return te.sum(E.const(1, "int32"), axis=k, where=cond)

    def red_body(*i):
        clamped, cond = point(i)
        return _scatter_reduce(reduction, upd[clamped], k, cond)

    cnt = te.compute(d.shape, count_body, name="T_scatter_count")
    red = te.compute(d.shape, red_body, name="T_scatter_red")
    return [te.compute(d.shape, lambda *i: _scatter_combine(d[i], cnt[i] > E.const(0, "int32"), red[i],
                                                             reduction, d.dtype),
                       name="T_scatter_elements")]


def _same(a, b):
    if isinstance(a, E.IntImm) and isinstance(b, E.IntImm):
        return a.value == b.value
    return a is b


scatter_nd = _register("scatter_nd", ("data", "indices", "updates"), {"reduction": "none"},
                       pattern=OpPattern.OPAQUE,
                       doc="ONNX ScatterND: data with updates[m] written at data[indices[m]] (the last "
                           "axis of indices addresses data), combined by reduction.")


def _scatter_nd_check(d_shape, i_shape, u_shape):
    k = i_shape[-1] if i_shape else None
    if not i_shape or not isinstance(k, int) or not 1 <= k <= len(d_shape):
        raise ShapeError(f"scatter_nd: the last dim of indices {fmt_shape(i_shape)} must be a static "
                         f"1..{len(d_shape)} (the rank of data {fmt_shape(d_shape)})")
    want = tuple(i_shape[:-1]) + tuple(d_shape[k:])
    if tuple(u_shape) != want:
        raise ShapeError(f"scatter_nd: updates must have shape {fmt_shape(want)} (indices.shape[:-1] + "
                         f"data.shape[{k}:]), got {fmt_shape(u_shape)}")
    return k


@scatter_nd.def_infer
def _scatter_nd_infer(types, attrs):
    d, i, u = types
    check_dtype("scatter_nd", i.dtype, INDEX, "indices")
    check_same_dtype("scatter_nd", (d, u), ("data", "updates"))
    _check_reduction("scatter_nd", attrs["reduction"], d.dtype)
    _scatter_nd_check(d.shape, i.shape, u.shape)
    return [d]


@scatter_nd.def_compute
def _scatter_nd_compute(tensors, attrs):
    d, ind, upd = tensors
    reduction = attrs["reduction"]
    _check_reduction("scatter_nd", reduction, d.dtype)
    k = _scatter_nd_check(_graph_shape(d.shape), _graph_shape(ind.shape), _graph_shape(upd.shape))
    m_axes = [te.reduce_axis((0, s), name=f"m{j}") for j, s in enumerate(ind.shape[:-1])]

    def index_body(*i):
        """Entry i[-1] of an index tuple, checked against its axis of data and normalized."""
        j = i[-1]
        dim = _dim64(d.shape[k - 1])
        for a in reversed(range(k - 1)):
            dim = _sel(j == E.const(a, j.dtype), _dim64(d.shape[a]), dim)
        return checked_index("scatter_nd", ind[i], dim, "along data axis {3} (entry {3} of an index tuple)",
                             extra=(j,))

    # every index checked and normalized once, before anything is written
    target = te.compute(ind.shape, index_body, name="T_scatter_index")

    def point(i):
        m = tuple(a.var for a in m_axes)
        hits = [target[m + (E.const(j, "int32"),)] == i[j].astype("int64") for j in range(k)]
        return m, te.all(*hits)

    def src(i, m):
        return upd[m + tuple(i[k:])]

    if not m_axes:
        def body(*i):
            m, cond = point(i)
            return _scatter_combine(d[i], cond, src(i, m), reduction, d.dtype)

        return [te.compute(d.shape, body, name="T_scatter_nd")]

    if reduction == "none":  # the last update landing here wins: the highest position m
        def last_body(*i):
            m, cond = point(i)
            return te.max(ravel(m, ind.shape[:-1]).astype("int64"), axis=m_axes, where=cond)

        last = te.compute(d.shape, last_body, name="T_scatter_last")

        def pick(*i):
            found = last[i] >= E.const(0, "int64")
            m = unravel(te.max(last[i], E.const(0, "int64")), ind.shape[:-1])
            return _sel(found, src(i, m), d[i])

        return [te.compute(d.shape, pick, name="T_scatter_nd")]

    def count_body(*i):
        m, cond = point(i)
        return te.sum(E.const(1, "int32"), axis=m_axes, where=cond)

    def red_body(*i):
        m, cond = point(i)
        return _scatter_reduce(reduction, src(i, m), m_axes, cond)

    cnt = te.compute(d.shape, count_body, name="T_scatter_count")
    red = te.compute(d.shape, red_body, name="T_scatter_red")
    return [te.compute(d.shape, lambda *i: _scatter_combine(d[i], cnt[i] > E.const(0, "int32"), red[i],
                                                             reduction, d.dtype),
                       name="T_scatter_nd")]


# ---------------------------------------------------------------------------------------------
# tile, reverse, pad
# ---------------------------------------------------------------------------------------------
tile = _register("tile", ("data",), {"reps": REQUIRED},
                 doc="Repeat data reps[k] times along axis k (numpy tile; shorter reps or data are "
                     "padded with leading 1s).")


def _tile_shape(shape, reps):
    reps = tuple(int(r) for r in (reps if isinstance(reps, (list, tuple)) else (reps,)))
    if any(r < 0 for r in reps):
        raise ShapeError(f"tile: reps {reps} has a negative entry")
    nd = max(len(shape), len(reps))
    shape = (1,) * (nd - len(shape)) + tuple(shape)
    reps = (1,) * (nd - len(reps)) + reps
    out = []
    for d, r in zip(shape, reps):
        if isinstance(d, str) and r != 1:
            raise ShapeError(f"tile: cannot repeat the symbolic dimension {d!r} {r} times (the result "
                             f"extent would not be a single symbol)")
        out.append(d * r if isinstance(d, int) else d)
    return tuple(out), nd


@tile.def_infer
def _tile_infer(types, attrs):
    (t,) = types
    return [TensorType(_tile_shape(t.shape, attrs["reps"])[0], t.dtype)]


@tile.def_compute
def _tile_compute(tensors, attrs):
    (x,) = tensors
    shape, nd = _tile_shape(_graph_shape(x.shape), attrs["reps"])
    vars_ = _vars_of(x)
    lead = nd - len(x.shape)

    def body(*i):
        idx = []
        for j, d in enumerate(x.shape):
            v = i[lead + j]
            idx.append(E.const(0, v.dtype) if is_const(d, 1) else v if static(d) is None or
                       shape[lead + j] == static(d) else v % _idx(E.convert(d), v))
        return x[tuple(idx)]

    return [te.compute([_te_dim(d, vars_) for d in shape], body, name="T_tile")]


reverse = _register("reverse", ("data",), {"axis": REQUIRED}, doc="Reverse the order along axis.")


@reverse.def_infer
def _reverse_infer(types, attrs):
    (t,) = types
    normalize_axis("reverse", attrs["axis"], t.ndim)
    return [t]


@reverse.def_compute
def _reverse_compute(tensors, attrs):
    (x,) = tensors
    axis = normalize_axis("reverse", attrs["axis"], len(x.shape))

    def body(*i):
        last = _idx(E.convert(x.shape[axis]), i[axis]) - const(1, i[axis].dtype)
        return x[tuple(i[:axis]) + (last - i[axis],) + tuple(i[axis + 1:])]

    return [te.compute(x.shape, body, name="T_reverse")]


pad = _register("nn.pad", ("data",), {"pad_width": REQUIRED, "pad_mode": "constant", "pad_value": 0.0},
                doc="Pad each axis by (before, after) elements (negative crops): constant fills "
                    "pad_value, edge repeats the border, reflect mirrors without the border, wrap "
                    "repeats the tensor (numpy pad modes).")
_PAD_MODES = ("constant", "edge", "reflect", "wrap")


def _pad_plan(shape, attrs):
    pw = attrs["pad_width"]
    mode = attrs["pad_mode"]
    if mode not in _PAD_MODES:
        raise TesseraError(f"nn.pad: pad_mode must be one of {_PAD_MODES}, got {mode!r}")
    try:
        pw = [(int(a), int(b)) for a, b in pw]
    except (TypeError, ValueError):
        raise ShapeError(f"nn.pad: pad_width must be one (before, after) pair per axis, got {pw!r}") from None
    if len(pw) != len(shape):
        raise ShapeError(f"nn.pad: pad_width has {len(pw)} pairs for a tensor of rank {len(shape)}")
    out = []
    for k, (d, (a, b)) in enumerate(zip(shape, pw)):
        if (a or b) and not isinstance(d, int):
            raise ShapeError(f"nn.pad: axis {k} has the symbolic extent {d!r}; padding it needs a static extent")
        if isinstance(d, int):
            if d + a + b < 0:
                raise ShapeError(f"nn.pad: pads ({a}, {b}) crop more than the extent {d} of axis {k}")
            if mode != "constant" and d == 0 and (a > 0 or b > 0):
                raise ShapeError(f"nn.pad: cannot pad an empty axis {k} in mode {mode!r}")
            out.append(d + a + b)
        else:
            out.append(d)
    return pw, mode, tuple(out)


@pad.def_infer
def _pad_infer(types, attrs):
    (t,) = types
    return [TensorType(_pad_plan(t.shape, attrs)[2], t.dtype)]


@pad.def_compute
def _pad_compute(tensors, attrs):
    (x,) = tensors
    pw, mode, oshape = _pad_plan(_graph_shape(x.shape), attrs)
    vars_ = _vars_of(x)
    value = attrs["pad_value"]

    def body(*i):
        idx, inside = [], []
        for v, d, (a, _) in zip(i, x.shape, pw):
            n = static(d)
            if n is None or (a == 0 and oshape[len(idx)] == n):
                idx.append(v)
                continue
            j = v - const(a, v.dtype)
            if mode == "constant":
                if a > 0:
                    inside.append(j >= const(0, v.dtype))
                if oshape[len(idx)] - a > n:
                    inside.append(j < const(n, v.dtype))
                idx.append(j)
            elif mode == "edge":
                idx.append(te.max(te.min(j, const(n - 1, v.dtype)), const(0, v.dtype)))
            elif mode == "wrap":
                idx.append(te.floormod(j, const(n, v.dtype)))
            else:  # reflect: period 2(n-1)
                if n == 1:
                    idx.append(const(0, v.dtype))
                else:
                    r = te.floormod(j, const(2 * (n - 1), v.dtype))
                    idx.append(_sel(r >= const(n, v.dtype), const(2 * (n - 1), v.dtype) - r, r))
        if mode == "constant" and inside:
            safe = tuple(te.max(te.min(j, const(max(static(d) or 1, 1) - 1, j.dtype)), const(0, j.dtype))
                         if static(d) is not None else j for j, d in zip(idx, x.shape))
            return te.if_then_else(te.all(*inside), x[safe], _pad_value(value, x.dtype))
        return x[tuple(idx)]

    return [te.compute([_te_dim(d, vars_) for d in oshape], body, name="T_pad")]


def _pad_value(value, dtype):
    dt = DataType(dtype)
    if dt.is_bool():
        return E.const(bool(value), dt)
    if dt.is_float():
        return const(float(value), dt)
    return const(int(value), dt)


# ---------------------------------------------------------------------------------------------
# depth_to_space, space_to_depth
# ---------------------------------------------------------------------------------------------
d2s = _register("nn.depth_to_space", ("data",), {"block_size": REQUIRED, "mode": "DCR"},
                doc="NCHW: move channel blocks into b x b spatial blocks (ONNX DepthToSpace, DCR or CRD).")
s2d = _register("nn.space_to_depth", ("data",), {"block_size": REQUIRED, "mode": "DCR"},
                doc="NCHW: move b x b spatial blocks into channels (ONNX SpaceToDepth, DCR or CRD; "
                    "the inverse of nn.depth_to_space of the same mode).")


def _d2s_shape(shape, attrs):
    if len(shape) != 4:
        raise ShapeError(f"nn.depth_to_space: needs an NCHW tensor (rank 4), got {fmt_shape(shape)}")
    b = int(attrs["block_size"])
    if attrs["mode"] not in ("DCR", "CRD"):
        raise TesseraError(f"nn.depth_to_space: mode must be 'DCR' or 'CRD', got {attrs['mode']!r}")
    n, c, h, w = shape
    if b <= 0 or not isinstance(c, int) or c % (b * b):
        raise ShapeError(f"nn.depth_to_space: channels {c} must be a static multiple of block_size^2 = {b * b}")
    for d in (h, w):
        if not isinstance(d, int):
            raise ShapeError(f"nn.depth_to_space: spatial dims of {fmt_shape(shape)} must be static")
    return b, (n, c // (b * b), h * b, w * b)


@d2s.def_infer
def _d2s_infer(types, attrs):
    (t,) = types
    return [TensorType(_d2s_shape(t.shape, attrs)[1], t.dtype)]


@d2s.def_compute
def _d2s_compute(tensors, attrs):
    (x,) = tensors
    b, shape = _d2s_shape(_graph_shape(x.shape), attrs)
    c_out = shape[1]

    def body(n, c, h, w):
        bh, bw = h % b, w % b
        if attrs["mode"] == "DCR":
            ch = (bh * b + bw) * c_out + c
        else:
            ch = c * (b * b) + bh * b + bw
        return x[n, ch, h // b, w // b]

    return [te.compute([x.shape[0], c_out, shape[2], shape[3]], body, name="T_depth_to_space")]


def _s2d_shape(shape, attrs):
    if len(shape) != 4:
        raise ShapeError(f"nn.space_to_depth: needs an NCHW tensor (rank 4), got {fmt_shape(shape)}")
    b = int(attrs["block_size"])
    if attrs["mode"] not in ("DCR", "CRD"):
        raise TesseraError(f"nn.space_to_depth: mode must be 'DCR' or 'CRD', got {attrs['mode']!r}")
    n, c, h, w = shape
    for d in (c, h, w):
        if not isinstance(d, int):
            raise ShapeError(f"nn.space_to_depth: C, H, W of {fmt_shape(shape)} must be static")
    if b <= 0 or h % b or w % b:
        raise ShapeError(f"nn.space_to_depth: H and W of {fmt_shape(shape)} must be multiples of "
                         f"block_size {b}")
    return b, (n, c * b * b, h // b, w // b)


@s2d.def_infer
def _s2d_infer(types, attrs):
    (t,) = types
    return [TensorType(_s2d_shape(t.shape, attrs)[1], t.dtype)]


@s2d.def_compute
def _s2d_compute(tensors, attrs):
    (x,) = tensors
    b, shape = _s2d_shape(_graph_shape(x.shape), attrs)
    c_in = static(x.shape[1])

    def body(n, c, h, w):
        if attrs["mode"] == "DCR":
            q, ch = c // c_in, c % c_in
        else:
            q, ch = c % (b * b), c // (b * b)
        return x[n, ch, h * b + q // b, w * b + q % b]

    return [te.compute([x.shape[0], shape[1], shape[2], shape[3]], body, name="T_space_to_depth")]


# ---------------------------------------------------------------------------------------------
# one_hot, trilu, eye_like
# ---------------------------------------------------------------------------------------------
one_hot = _register("one_hot", ("indices", "values"), {"depth": REQUIRED, "axis": -1},
                    doc="values[1] where the (new) axis equals the index, values[0] elsewhere; negative "
                        "indices count from depth (ONNX OneHot).")


@one_hot.def_infer
def _one_hot_infer(types, attrs):
    i, v = types
    check_dtype("one_hot", i.dtype, NUMERIC, "indices")
    if v.shape not in ((2,),):
        raise ShapeError(f"one_hot: values must have shape (2,) ([off, on]), got {fmt_shape(v.shape)}")
    depth = int(attrs["depth"])
    if depth < 0:
        raise ShapeError(f"one_hot: depth must be >= 0, got {depth}")
    axis = normalize_axis("one_hot", attrs["axis"], i.ndim, extra=1)
    return [TensorType(i.shape[:axis] + (depth,) + i.shape[axis:], v.dtype)]


@one_hot.def_compute
def _one_hot_compute(tensors, attrs):
    ind, vals = tensors
    depth = int(attrs["depth"])
    axis = normalize_axis("one_hot", attrs["axis"], len(ind.shape), extra=1)
    shape = list(ind.shape[:axis]) + [depth] + list(ind.shape[axis:])

    def body(*i):
        raw = ind[tuple(i[:axis]) + tuple(i[axis + 1:])]
        k = raw.astype("int64") if raw.dtype != "int64" else raw
        k = _sel(k < E.const(0, "int64"), k + E.const(depth, "int64"), k)
        return _sel(k == i[axis].astype("int64"), vals[E.const(1, "int32")], vals[E.const(0, "int32")])

    return [te.compute(shape, body, name="T_one_hot")]


trilu = _register("trilu", ("data",), {"upper": True, "k": 0},
                  doc="Keep the upper (j - i >= k) or lower (j - i <= k) triangle of the last two axes.")


@trilu.def_infer
def _trilu_infer(types, attrs):
    (t,) = types
    if t.ndim < 2:
        raise ShapeError(f"trilu: needs rank >= 2, got {fmt_shape(t.shape)}")
    return [t]


@trilu.def_compute
def _trilu_compute(tensors, attrs):
    (x,) = tensors
    k = int(attrs["k"])

    def body(*i):
        r, c = i[-2].astype("int64"), i[-1].astype("int64")
        diff = c - r
        keep = diff >= E.const(k, "int64") if attrs["upper"] else diff <= E.const(k, "int64")
        return _sel(keep, x[i], _pad_value(0, x.dtype))

    return [te.compute(x.shape, body, name="T_trilu")]


eye_like = _register("eye_like", ("data",), {"k": 0, "dtype": None},
                     doc="Ones on the k-th diagonal of a matrix shaped as data (ONNX EyeLike).")


@eye_like.def_infer
def _eye_like_infer(types, attrs):
    (t,) = types
    if t.ndim != 2:
        raise ShapeError(f"eye_like: needs a 2-D input, got {fmt_shape(t.shape)}")
    dt = attrs["dtype"] or t.dtype
    check_dtype("eye_like", dt, ALL, "dtype")
    return [TensorType(t.shape, dt)]


@eye_like.def_compute
def _eye_like_compute(tensors, attrs):
    (x,) = tensors
    dt = DataType(attrs["dtype"] or x.dtype)
    k = int(attrs["k"])
    one, zero = _pad_value(1, dt), _pad_value(0, dt)
    return [te.compute(x.shape, lambda i, j: _sel(j.astype("int64") - i.astype("int64") == E.const(k, "int64"),
                                                  one, zero), name="T_eye_like")]


# ---------------------------------------------------------------------------------------------
# layout_transform: NCHW <-> NCHW{x}c and other split layouts
# ---------------------------------------------------------------------------------------------
layout_transform = _register("layout_transform", ("data",), {"src_layout": REQUIRED, "dst_layout": REQUIRED},
                             doc="Change the data layout, e.g. NCHW -> NCHW8c (a primal axis C split into "
                                 "C/8 outer and 8 inner) and back; split extents must divide.")
_LAYOUT = re.compile(r"(\d*)([A-Za-z])")


def parse_layout(layout: str):
    """'NCHW8c' -> [('N', None), ('C', None), ('H', None), ('W', None), ('c', 8)]."""
    if not isinstance(layout, str) or not layout or _LAYOUT.sub("", layout):
        raise ShapeError(f"layout_transform: {layout!r} is not a layout such as 'NCHW' or 'NCHW8c'")
    out = []
    for num, ch in _LAYOUT.findall(layout):
        if ch.isupper():
            if num:
                raise ShapeError(f"layout_transform: {layout!r}: a primal axis ({ch}) takes no factor")
            out.append((ch, None))
        else:
            if not num or int(num) <= 0:
                raise ShapeError(f"layout_transform: {layout!r}: sub-axis {ch} needs a positive factor, e.g. 8{ch}")
            out.append((ch, int(num)))
    names = [a for a, _ in out]
    if len(set(names)) != len(names):
        raise ShapeError(f"layout_transform: {layout!r} names an axis twice")
    for a, f in out:
        if f is not None and a.upper() not in names:
            raise ShapeError(f"layout_transform: {layout!r} has sub-axis {a} without its primal axis {a.upper()}")
    return out


def _layout_plan(shape, attrs):
    src, dst = parse_layout(attrs["src_layout"]), parse_layout(attrs["dst_layout"])
    if len(src) != len(shape):
        raise ShapeError(f"layout_transform: layout {attrs['src_layout']!r} has {len(src)} axes, the tensor "
                         f"{fmt_shape(shape)} {len(shape)}")
    if sorted(a for a, f in src if f is None) != sorted(a for a, f in dst if f is None):
        raise ShapeError(f"layout_transform: {attrs['src_layout']!r} and {attrs['dst_layout']!r} have "
                         f"different primal axes")
    # logical extent of each primal axis
    extent = {}
    for (a, f), d in zip(src, shape):
        if f is None:
            extent[a] = extent.get(a, 1) * d if isinstance(d, int) and isinstance(extent.get(a, 1), int) else d
    sub_src = {a.upper(): f for a, f in src if f is not None}
    for (a, f), d in zip(src, shape):
        if f is not None:
            if d != f:
                raise ShapeError(f"layout_transform: sub-axis {a} of {attrs['src_layout']!r} must have extent "
                                 f"{f}, the tensor has {d}")
            extent[a.upper()] = extent[a.upper()] * f if isinstance(extent[a.upper()], int) else None
            if extent[a.upper()] is None:
                raise ShapeError(f"layout_transform: split axis {a.upper()} must be static")
    sub_dst = {a.upper(): f for a, f in dst if f is not None}
    out = []
    for a, f in dst:
        if f is not None:
            out.append(f)
            continue
        e = extent[a]
        if a in sub_dst:
            if not isinstance(e, int) or e % sub_dst[a]:
                raise ShapeError(f"layout_transform: axis {a} of extent {e} does not split by {sub_dst[a]}")
            out.append(e // sub_dst[a])
        else:
            out.append(e)
    return src, dst, sub_src, sub_dst, tuple(out)


def schedule_layout_transform(sch, ctx):
    """A re-blocking of one axis (NCHW16c -> NCHW64c and back): the innermost destination axis split by
    the run both blocks share (gcd of the factors), which is contiguous in the source too, and that run
    vectorized (one vector copy, where the default schedule's lanes over the whole destination block
    gathered bytes from four source blocks); the outer loops as the injective schedule leaves them."""
    src, dst = parse_layout(ctx.attrs["src_layout"]), parse_layout(ctx.attrs["dst_layout"])
    a, f2 = dst[-1]
    f1 = dict(src).get(a) if f2 is not None else None
    g = math.gcd(f1, f2) if f1 else 0
    try:
        blk = sch.get_block(ctx.block)
    except ScheduleError:
        blk = None
    if blk is None or not f1 or g == f2 or g < 4 or src[-1][0] != a:
        schedule_injective(sch, ctx)
        return
    loops = sch.get_loops(blk)
    outer, inner = sch.split(loops[-1], [None, g])
    sch.vectorize(inner)
    rows = list(loops[:-1])
    work = 1
    for lp in rows:
        e = sch.get(lp).extent
        work *= e.value if isinstance(e, E.IntImm) else S.PARALLEL_MIN_WORK
    if S.thread_count(ctx.target) > 1 and work * f2 >= S.PARALLEL_MIN_WORK and rows:
        sch.parallel(sch.fuse(*S.parallel_prefix(sch, rows, ctx.target)) if len(rows) > 1 else rows[0])


layout_transform.def_schedule(schedule_layout_transform)


@layout_transform.def_infer
def _layout_infer(types, attrs):
    (t,) = types
    return [TensorType(_layout_plan(t.shape, attrs)[4], t.dtype)]


@layout_transform.def_compute
def _layout_compute(tensors, attrs):
    (x,) = tensors
    src, dst, sub_src, sub_dst, oshape = _layout_plan(_graph_shape(x.shape), attrs)
    vars_ = _vars_of(x)

    def body(*i):
        logical = {}
        pos = {a: k for k, (a, f) in enumerate(dst)}
        for a, f in dst:
            if f is None:
                v = i[pos[a]]
                if a in sub_dst:
                    v = v * const(sub_dst[a], v.dtype) + i[pos[a.lower()]]
                logical[a] = v
        idx = []
        for a, f in src:
            if f is None:
                v = logical[a]
                idx.append(v // const(sub_src[a], v.dtype) if a in sub_src else v)
            else:
                v = logical[a.upper()]
                idx.append(v % const(f, v.dtype))
        return x[tuple(idx)]

    return [te.compute([_te_dim(d, vars_) for d in oshape], body, name="T_layout_transform")]


__all__ = ["resolve_newshape", "parse_layout", "ravel", "unravel", "cast"]
