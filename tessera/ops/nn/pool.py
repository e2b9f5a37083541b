"""Pooling over the spatial axes of NC[D]HW data: nn.max_pool{1,2,3}d, nn.avg_pool{1,2,3}d,
nn.lp_pool (N-d), nn.max_pool_with_indices (ONNX MaxPool's Indices output), nn.global_avg_pool,
nn.global_max_pool.

A window starts at out * stride - pad_begin; taps outside the input are skipped (max, lp) or
count as zero (avg). ceil_mode rounds the output extent up but drops a last window that would
start in the end padding (as ONNX Runtime and PyTorch). avg_pool divides by the taps inside the
input (count_include_pad=False) or inside the padded input (True). A float max pool skips NaN (C's
fmax: NaN only where every tap is NaN), as ONNX Runtime's pools do where a NaN is the first tap they
scan (theirs, x86 MAXPS in scan order, let a later NaN tap drop the taps scanned before it).

Layouts: the `layout` attribute is the data layout, NC[D]HW by default; the 2-d pools and the
global pools also take the blocked layout NCHW{x}c (N, C/x, H, W, x) that graph/passes/alter_layout
gives the tensors between blocked convolutions: the pooled axes are H and W and the x channels of a
block are one SIMD vector, so a strided window reads contiguous vectors instead of gathers.
"""
from __future__ import annotations

import itertools
import math

from ... import te
import re

from ...errors import ShapeError, TesseraError
from ...ir import TensorType
from ...ir import expr as E
from ..registry import OpPattern, register_op
from .._schedule import schedule_blocks
from . import _util as U
from ...errors import ScheduleError
from .conv_nchwc import schedule_blocked_spatial
from .._schedule import PARALLEL_MIN_WORK, thread_count
from ..registry import REQUIRED


_PLAIN = {1: "NCW", 2: "NCHW", 3: "NCDHW"}
_BLOCKED = re.compile(r"^NCHW(\d+)c$")
# max of float taps without NaN's propagation (see the module docstring); its identity is NaN
_FMAX = te.comm_reducer(lambda x, y: E.call_intrin(x.dtype, "fmax", x, y), lambda t: te.const(float("nan"), t),
                        name="fmax")


def max_taps(dtype):
    """(combine, reducer, value of a skipped tap) of a max pool over `dtype`: fmax for floats."""
    if te.const(0, dtype).dtype.is_float():
        return (lambda a, b: E.call_intrin(a.dtype, "fmax", a, b)), _FMAX, te.const(float("nan"), dtype)
    return E.max_expr, te.max, te.min_value(dtype)


def layout_block(op, layout, nd=None, data=None):
    """None for the plain layout NC[D]HW, x for the blocked NCHW{x}c (2-d only); TesseraError for
    other layouts and ShapeError when data (a TensorType) does not fit the layout."""
    layout = str(layout)
    m = _BLOCKED.match(layout)
    if m and int(m.group(1)) >= 1 and nd in (None, 2):
        x = int(m.group(1))
        if data is not None:
            if data.ndim != 5:
                raise ShapeError(f"{op}: layout {layout} needs data of rank 5 (N, C/{x}, H, W, {x}), got {data}")
            if data.shape[4] != x:
                raise ShapeError(f"{op}: data {data} has blocks of {data.shape[4]} channels but the layout is {layout}")
        return x
    if nd is None and data is not None:
        nd = data.ndim - 2
    if layout == _PLAIN.get(nd):
        return None
    want = f"'{_PLAIN[nd]}'" + (" or a blocked 'NCHW{x}c' such as 'NCHW8c'" if nd == 2 else "") \
        if nd in _PLAIN else "NCW, NCHW, NCDHW or NCHW{x}c"
    raise TesseraError(f"{op}: layout {layout!r} is not supported; this pooling takes {want}")


# ---------------------------------------------------------------------------------------------
# shapes
# ---------------------------------------------------------------------------------------------
def _pool_attrs(op, attrs, nd):
    size = U.int_tuple(op, "pool_size", attrs["pool_size"], nd, minimum=1)
    strides = U.int_tuple(op, "strides", attrs["strides"], nd, minimum=1)
    dilation = U.int_tuple(op, "dilation", attrs["dilation"], nd, minimum=1)
    padding = U.padding_tuple(op, attrs["padding"], nd)
    for k in range(nd):
        if padding[k] >= (size[k] - 1) * dilation[k] + 1 or padding[nd + k] >= (size[k] - 1) * dilation[k] + 1:
            raise ShapeError(f"{op}: padding {padding} must be smaller than the (dilated) window {size} on "
                             f"each axis, or a window could hold only padding")
    return size, strides, dilation, padding


def pool_out_shape(op, data: TensorType, attrs, blocked: bool = False) -> tuple:
    """Output shape; blocked: data is NCHW{x}c (the block dimension is kept last)."""
    if data.ndim < 3:
        raise ShapeError(f"{op}: data must be (N, C, spatial...) of rank >= 3, got {data}")
    nd = data.ndim - 2 - int(blocked)
    size, strides, dilation, padding = _pool_attrs(op, attrs, nd)
    spatial = U.static_dims(op, data, range(2, nd + 2), "spatial dimensions")
    ceil_mode = bool(attrs.get("ceil_mode", False))
    out = []
    for k in range(nd):
        window = dilation[k] * (size[k] - 1) + 1
        span = spatial[k] + padding[k] + padding[nd + k] - window
        if span < 0:
            raise ShapeError(f"{op}: window {size} (dilated extent {window} on spatial axis {k}) is larger "
                             f"than the padded input ({spatial[k]} + {padding[k]} + {padding[nd + k]})")
        if ceil_mode:
            o = -(-span // strides[k]) + 1
            if (o - 1) * strides[k] >= spatial[k] + padding[k]:
                o -= 1
        else:
            o = span // strides[k] + 1
        out.append(o)
    return tuple(data.shape[:2]) + tuple(out) + (tuple(data.shape[-1:]) if blocked else ())


def _window(data, nd, y, rk, size, strides, dilation, padding, out_spatial):
    """(input indices, in-bounds conditions) of taps rk (reduce axes, or ints for one unrolled tap)
    of output point y."""
    conds, idx = [], []
    for k in range(nd):
        S = int(data.shape[2 + k].value)
        pos = y[k] * strides[k] - padding[k]
        if size[k] > 1:
            pos = pos + rk[k] * dilation[k]
        idx.append(pos)
        fixed = isinstance(rk[k], int)  # an unrolled tap: drop the bounds it always satisfies
        first = rk[k] * dilation[k] - padding[k] if fixed else -padding[k]
        last = (out_spatial[k] - 1) * strides[k] - padding[k] + \
            (rk[k] if fixed else size[k] - 1) * dilation[k]
        if first < 0:
            conds.append(pos >= 0)
        if last >= S:
            conds.append(pos < S)
    return idx, conds


def _count_table(k, nd, S, size, strides, dilation, padding, out_k, include_pad):
    """Per output position on axis k: the number of taps counted by avg_pool."""
    lo, hi = (-padding[k], S + padding[nd + k]) if include_pad else (0, S)
    counts = []
    for y in range(out_k):
        start = y * strides[k] - padding[k]
        counts.append(sum(1 for r in range(size[k]) if lo <= start + r * dilation[k] < hi))
    return counts, lo, hi


def _count_expr(y, counts, lo, hi, size, stride, dilation, pad):
    """The count on one axis as an expression of the output index y (a constant when uniform)."""
    if len(set(counts)) == 1:
        return te.const(counts[0], "int32"), counts[0]
    start = y * stride - pad

    def ceildiv(a):
        return (a + (dilation - 1)) // dilation if dilation > 1 else a

    r_lo = E.max_expr(ceildiv(lo - start), 0)
    r_hi = E.min_expr(ceildiv(hi - start), size)
    return E.max_expr(r_hi - r_lo, 0), None


def pool_nd(data, kind, pool_size, strides=1, dilation=1, padding=0, ceil_mode=False,
            count_include_pad=False, p=2, name=None, blocked=False):
    """Pooling compute: kind is "max", "avg" or "lp"; blocked: data is NCHW{x}c."""
    nd = data.ndim - 2 - int(blocked)
    op = f"nn.{kind}_pool"
    attrs = dict(pool_size=pool_size, strides=strides, dilation=dilation, padding=padding, ceil_mode=ceil_mode)
    shape = pool_out_shape(op, U.ttype(data), attrs, blocked)
    size, strides, dilation, padding = _pool_attrs(op, attrs, nd)
    out_spatial = shape[2:2 + nd]
    shape = U.shape_exprs(shape, data)
    sp = U.SPATIAL_NAMES[nd]
    names = ["n", "c"] + [f"o{s}" for s in sp] + (["c_block"] if blocked else [])
    rk = [te.reduce_axis((0, size[k]), f"r{sp[k]}") for k in range(nd)]
    dt = data.dtype
    acc = U.accum_dtype(dt)
    name = name or f"{kind}_pool{nd}d"

    # windows of at most 64 taps are unrolled into one elementwise expression (no reduction loop:
    # the output rows vectorize); larger windows reduce over loops. An unrolled tap that can fall
    # outside the input reads the nearest element inside (its index clamped, so every load is in
    # bounds) and a select on the tap's position (one scalar test per tap, not per lane) replaces
    # the value by the pad value (the lowest value for max, 0 for sums): no padded copy of the
    # input, and the vectorized lanes (a row, or the channel block of NCHW{x}c) stay loads.
    unrolled = math.prod(size) <= 64
    taps = list(itertools.product(*[range(e) for e in size])) if unrolled else None
    src, src_pad = data, padding

    # the index arguments of a compute body: (n, c, *spatial) or (n, c, *spatial, c_block)
    def split_idx(i):
        return i[0], i[1], i[2:2 + nd], tuple(i[2 + nd:])

    def clamped_tap(y, k):
        """(indices clamped into the input, condition that the tap is inside) of unrolled tap k."""
        idx, conds = [], []
        for a in range(nd):
            S = int(data.shape[2 + a].value)
            pos = y[a] * strides[a] + (k[a] * dilation[a] - padding[a])
            first = k[a] * dilation[a] - padding[a]
            last = (out_spatial[a] - 1) * strides[a] + first
            pos, inside = U.clamped_index(pos, first, last, S)
            idx.append(pos)
            conds.extend(inside)
        return idx, conds

    def tap_value(n, c, y, k, fill, cb=()):
        if isinstance(k, tuple):
            idx, conds = clamped_tap(y, k)
        else:
            idx, conds = _window(src, nd, y, k, size, strides, dilation, src_pad, out_spatial)
        v = src[(n, c, *idx, *cb)] if kind == "max" else U.cast(src[(n, c, *idx, *cb)], acc)
        if kind == "lp":
            v = v * v if p == 2 else (te.abs(v) if p == 1 else te.power(te.abs(v), te.const(float(p), acc)))
        if not conds:
            return v
        if isinstance(k, tuple):
            return E.Select(te.all(*conds), v, fill)
        return te.if_then_else(te.all(*conds), v, fill)

    if kind == "max":
        combine, reducer, skipped = max_taps(dt)

        def body(*i):
            n, c, y, cb = split_idx(i)
            if unrolled:
                out = None
                for k in taps:
                    v = tap_value(n, c, y, k, skipped, cb)
                    out = v if out is None else combine(out, v)
                return out
            return reducer(tap_value(n, c, y, rk, skipped, cb), axis=rk)

        return U.compute(shape, names, body, name)

    if unrolled:
        def total_at(n, c, y, cb):
            out = None
            for k in taps:
                v = tap_value(n, c, y, k, te.const(0, acc), cb)
                out = v if out is None else out + v
            return out
    else:
        def sum_body(*i):
            n, c, y, cb = split_idx(i)
            return te.sum(tap_value(n, c, y, rk, te.const(0, acc), cb), axis=rk)

        total = U.compute(shape, names, sum_body, f"{name}_sum")

        def total_at(n, c, y, cb):
            return total[(n, c, *y, *cb)]

    if kind == "lp":
        def fin(*i):
            n, c, y, cb = split_idx(i)
            s = total_at(n, c, y, cb)
            r = te.sqrt(s) if p == 2 else (s if p == 1 else te.power(s, te.const(1.0 / p, acc)))
            return U.cast(r, dt)

        return U.compute(shape, names, fin, name)

    tables = [_count_table(k, nd, int(data.shape[2 + k].value), size, strides, dilation, padding,
                           out_spatial[k], count_include_pad) for k in range(nd)]

    def avg(*i):
        n, c, y, cb = split_idx(i)
        const_count, exprs = 1, []
        for k in range(nd):
            counts, lo, hi = tables[k]
            e, cval = _count_expr(y[k], counts, lo, hi, size[k], strides[k], dilation[k], padding[k])
            if cval is not None:
                const_count *= cval
            else:
                exprs.append(e)
        s = total_at(n, c, y, cb)
        if not exprs:
            return U.cast(s * te.const(1.0 / const_count, acc), dt) if const_count & (const_count - 1) == 0 \
                else U.cast(s / te.const(float(const_count), acc), dt)
        cnt = exprs[0]
        for e in exprs[1:]:
            cnt = cnt * e
        if const_count != 1:
            cnt = cnt * const_count
        return U.cast(s / cnt.astype(acc), dt)

    return U.compute(shape, names, avg, name)


# ---------------------------------------------------------------------------------------------
# schedules
# ---------------------------------------------------------------------------------------------
def schedule_pool(sch, ctx):
    """Plain layouts: every block by its kind (_schedule.schedule_blocks). Blocked NCHW{x}c: rows
    (n, c_chunk, h) parallel and the channel vector vectorized in every block (padding copy and
    window); a global pool's reduction runs over the pixels with the channel vector innermost."""
    layout = str(ctx.attrs.get("layout", "") or "")
    if not _BLOCKED.match(layout):
        schedule_blocks(sch, ctx)
        return
    root = sch.get_block("root")
    for blk in sch.get_child_blocks(root):
        try:
            if any(iv.iter_type == "reduce" for iv in sch.get(blk).iter_vars):
                trial = sch.copy()
                _blocked_reduce(trial, trial.get_block(sch.get(blk).name_hint), ctx.target)
                _blocked_reduce(sch, blk, ctx.target)
            else:
                schedule_blocked_spatial(sch, blk, ctx.target)
        except ScheduleError:
            continue


def _blocked_reduce(sch, block, target):
    """(n, c_chunk | oh, ow, r..., c_block): the reduction over pixels outside the channel vector."""
    loops = sch.get_loops(block)
    n_sp = sum(1 for iv in sch.get(block).iter_vars if iv.iter_type == "data_par")
    spatial, red = loops[:n_sp], loops[n_sp:]
    vec = spatial[-1]
    sch.reorder(*spatial[:-1], *red, vec)
    init = sch.decompose_reduction(block, red[0])
    sch.vectorize(vec)
    sch.vectorize(sch.get_loops(init)[-1])
    work = 1
    for lp in loops:
        ext = sch.get(lp).extent
        work *= getattr(ext, "value", PARALLEL_MIN_WORK)
    if thread_count(target) > 1 and work >= PARALLEL_MIN_WORK:
        sch.parallel(sch.fuse(*spatial[:2]))


def _register_pool(kind, nd):
    name = f"nn.{kind}_pool{nd}d"
    attrs = {"pool_size": None, "strides": (1,) * nd, "dilation": (1,) * nd, "padding": (0,) * (2 * nd),
             "ceil_mode": False, "layout": _PLAIN[nd]}
    if kind == "avg":
        attrs["count_include_pad"] = False
    attrs["pool_size"] = REQUIRED
    blocked_doc = " or blocked NCHW{x}c data (layout)" if nd == 2 else ""
    op = register_op(name, inputs=("data",), pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs=attrs,
                     doc=f"{nd}-d {kind} pooling of NC{'DHW'[3 - nd:]} data{blocked_doc}; padding (begin..., end...).")

    @op.def_infer
    def _infer(types, attrs, _name=name):
        (data,) = types
        block = layout_block(_name, attrs["layout"], nd, data if data.ndim == 5 and nd == 2 else None)
        U.check_rank(_name, data, nd + 2 + (block is not None), "data")
        U.check_dtype(_name, data, U.FLOATS + (("int8", "uint8") if kind == "max" else ()), "data")
        return [TensorType(pool_out_shape(_name, data, attrs, block is not None), data.dtype)]

    @op.def_compute
    def _compute(tensors, attrs, _name=name):
        blocked = layout_block(_name, attrs["layout"], nd) is not None
        return [pool_nd(tensors[0], kind, attrs["pool_size"], attrs["strides"], attrs["dilation"],
                        attrs["padding"], attrs["ceil_mode"], attrs.get("count_include_pad", False),
                        blocked=blocked)]

    op.def_schedule(schedule_pool)
    return op


for _nd in (1, 2, 3):
    _register_pool("max", _nd)
    _register_pool("avg", _nd)


# ---------------------------------------------------------------------------------------------
# lp pool (N-d)
# ---------------------------------------------------------------------------------------------
def _nd_of(op, data: TensorType):
    if data.ndim < 3:
        raise ShapeError(f"{op}: data must be (N, C, spatial...) of rank >= 3, got {data}")
    return data.ndim - 2


lp_pool = register_op("nn.lp_pool", inputs=("data",), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
                      attrs={"pool_size": None, "strides": 1, "dilation": 1, "padding": 0, "ceil_mode": False,
                             "p": 2},
                      doc="(sum |x|^p)^(1/p) over each window of NC[D]HW data (ONNX LpPool).")


@lp_pool.def_infer
def _lp_infer(types, attrs):
    (data,) = types
    op = "nn.lp_pool"
    _nd_of(op, data)
    U.check_dtype(op, data, U.FLOATS, "data")
    if attrs["pool_size"] is None:
        raise TesseraError(f"{op}: attribute 'pool_size' is required")
    if float(attrs["p"]) <= 0:
        raise TesseraError(f"{op}: p={attrs['p']} must be positive")
    return [TensorType(pool_out_shape(op, data, attrs), data.dtype)]


@lp_pool.def_compute
def _lp_compute(tensors, attrs):
    p = attrs["p"]
    p = int(p) if float(p).is_integer() else float(p)
    return [pool_nd(tensors[0], "lp", attrs["pool_size"], attrs["strides"], attrs["dilation"], attrs["padding"],
                    attrs["ceil_mode"], p=p, name=f"lp_pool{tensors[0].ndim - 2}d")]


# ---------------------------------------------------------------------------------------------
# max pool with indices (ONNX MaxPool's second output)
# ---------------------------------------------------------------------------------------------
max_pool_with_indices = register_op(
    "nn.max_pool_with_indices", inputs=("data",), pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_outputs=2,
    attrs={"pool_size": None, "strides": 1, "dilation": 1, "padding": 0, "ceil_mode": False,
           "storage_order": 0, "index_dtype": "int64"},
    doc="max pooling that also returns, per output, the flat index of the (first) maximum in the "
        "input tensor (row-major, or column-major over the spatial axes with storage_order=1); float "
        "windows skip NaN as the max pools do (an all-NaN window: NaN at its first index).")


@max_pool_with_indices.def_infer
def _mpi_infer(types, attrs):
    (data,) = types
    op = "nn.max_pool_with_indices"
    _nd_of(op, data)
    U.check_dtype(op, data, U.FLOATS + ("int8", "uint8"), "data")
    if attrs["pool_size"] is None:
        raise TesseraError(f"{op}: attribute 'pool_size' is required")
    if attrs["storage_order"] not in (0, 1):
        raise TesseraError(f"{op}: storage_order={attrs['storage_order']} must be 0 (row-major) or 1")
    U.static_dims(op, data, (1,), "channel dimension")
    shape = pool_out_shape(op, data, attrs)
    return [TensorType(shape, data.dtype), TensorType(shape, U.out_dtype(op, attrs["index_dtype"], "int64"))]


def _argmax_reducer():
    def fcombine(x, y):
        keep = x[1] >= y[1]
        return E.Select(keep, x[0], y[0]), E.Select(keep, x[1], y[1])

    def fidentity(t0, t1):
        return te.const(-1, t0), te.min_value(t1)

    return te.comm_reducer(fcombine, fidentity, name="argmax")


_ARGMAX = _argmax_reducer()


def _first_fmax_reducer():
    """(flat index, value) of a float window's max as max_taps takes it (NaN skipped, NaN only where
    every tap is), at its first tap in the window's scan (row-major, as _ARGMAX: the taps are combined
    in that order, so a tie or a later NaN keeps what came first)."""
    def fcombine(x, y):
        # !(y <= x): y is larger or either is NaN; there y wins if it is a number, or if nothing came
        # before it (the identity: an all-NaN window gives its first tap)
        empty = x[0] == te.max_value(x[0].dtype)
        take = te.all(E.Not(y[1] <= x[1]), te.any(y[1] == y[1], empty))
        return E.Select(take, y[0], x[0]), E.Select(take, y[1], x[1])

    def fidentity(t0, t1):
        return te.max_value(t0), te.const(float("nan"), t1)

    return te.comm_reducer(fcombine, fidentity, name="argmax_fmax")


_FIRST_FMAX = _first_fmax_reducer()


@max_pool_with_indices.def_compute
def _mpi_compute(tensors, attrs):
    (data,) = tensors
    nd = data.ndim - 2
    op = "nn.max_pool_with_indices"
    shape = pool_out_shape(op, U.ttype(data), attrs)
    size, strides, dilation, padding = _pool_attrs(op, attrs, nd)
    out_spatial = shape[2:]
    shape = U.shape_exprs(shape, data)
    idt = U.out_dtype(op, attrs["index_dtype"], "int64")
    sp = U.SPATIAL_NAMES[nd]
    rk = [te.reduce_axis((0, size[k]), f"r{sp[k]}") for k in range(nd)]
    S = [int(s.value) for s in data.shape[2:]]
    C = int(data.shape[1].value)
    col_major = attrs["storage_order"] == 1
    plane = math.prod(S)

    is_float = te.const(0, data.dtype).dtype.is_float()
    reducer = _FIRST_FMAX if is_float else _ARGMAX

    def body(n, c, *y):
        idx, conds = _window(data, nd, y, rk, size, strides, dilation, padding, out_spatial)
        v = data[(n, c, *idx)]
        flat = (n.astype(idt) * C + c.astype(idt)) * plane
        stride = 1
        order = range(nd) if col_major else reversed(range(nd))
        for k in order:
            flat = flat + idx[k].astype(idt) * stride
            stride *= S[k]
        if conds:     # a tap in the padding: never the result (for floats its index is never taken either)
            v = te.if_then_else(te.all(*conds), v, max_taps(data.dtype)[2])
            if is_float:
                flat = te.if_then_else(te.all(*conds), flat, te.max_value(idt))
        return reducer((flat, v), axis=rk)

    names = ["n", "c"] + [f"o{s}" for s in sp]
    indices, values = U.compute(shape, names, body, "max_pool")
    return [values, indices]


# ---------------------------------------------------------------------------------------------
# global pools
# ---------------------------------------------------------------------------------------------
def _register_global(kind):
    name = f"nn.global_{kind}_pool"
    op = register_op(name, inputs=("data",), pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs={"layout": ""},
                     doc=f"{kind} over all spatial axes of NC[D]HW data (or NCHW{{x}}c with layout); keeps them as "
                         f"extent 1.")

    def _blocked(attrs, data):
        layout = attrs["layout"]
        if layout in ("", None):
            return False
        if _BLOCKED.match(str(layout)):
            return layout_block(name, layout, 2, data) is not None
        return layout_block(name, layout, data.ndim - 2, data) is not None

    @op.def_infer
    def _infer(types, attrs):
        (data,) = types
        blocked = _blocked(attrs, data)
        nd = _nd_of(name, data) - int(blocked)
        U.check_dtype(name, data, U.FLOATS + (("int8", "uint8") if kind == "max" else ()), "data")
        U.static_dims(name, data, range(2, nd + 2), "spatial dimensions")
        return [TensorType(tuple(data.shape[:2]) + (1,) * nd + (tuple(data.shape[-1:]) if blocked else ()),
                           data.dtype)]

    @op.def_compute
    def _compute(tensors, attrs):
        (data,) = tensors
        blocked = bool(_BLOCKED.match(str(attrs["layout"])))
        nd = data.ndim - 2 - int(blocked)
        sp = U.SPATIAL_NAMES.get(nd) or tuple(f"s{k}" for k in range(nd))
        S = [int(s.value) for s in data.shape[2:2 + nd]]
        rk = [te.reduce_axis((0, S[k]), f"r{sp[k]}") for k in range(nd)]
        tail = tuple(data.shape[2 + nd:])
        shape = tuple(data.shape[:2]) + (1,) * nd + tail
        names = ["n", "c"] + [f"o{s}" for s in sp] + (["c_block"] if blocked else [])
        dt = data.dtype

        def at(i):
            return data[(i[0], i[1], *rk, *i[2 + nd:])]

        if kind == "max":
            reducer = max_taps(dt)[1]
            return [U.compute(shape, names, lambda *i: reducer(at(i), axis=rk), "global_max_pool")]
        acc = U.accum_dtype(dt)
        total = U.compute(shape, names, lambda *i: te.sum(U.cast(at(i), acc), axis=rk), "global_avg_pool_sum")
        count = math.prod(S)
        return [U.compute(shape, names, lambda *i: U.cast(total[i] / te.const(float(count), acc), dt),
                          "global_avg_pool")]

    op.def_schedule(schedule_pool)
    return op


_register_global("avg")
_register_global("max")


lp_pool.def_schedule(schedule_blocks)
max_pool_with_indices.def_schedule(schedule_blocks)
