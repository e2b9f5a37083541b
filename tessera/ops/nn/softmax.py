"""nn.softmax, nn.log_softmax and nn.hardmax along one axis (ONNX opset-13 semantics; the older
"coerce to 2-D" semantics are built by the ONNX converter with reshapes).

Numerically stable: the row maximum is subtracted before exp. float16/bfloat16 follow numpy (the
ONNX reference): every operation rounds to the dtype, float16 sums accumulate in float32.
"""
from __future__ import annotations

from ... import te
from ...ir import expr as E
from ..registry import OpPattern, register_op
from ...errors import ScheduleError
from .._schedule import LANE_FORM, schedule_blocks, schedule_rows
from . import _util as U
from ...errors import ShapeError
from ...target import Target


def _infer(op):
    def infer(types, attrs):
        (data,) = types
        U.check_dtype(op, data, U.FLOATS, "data")
        if data.ndim == 0:
            raise ShapeError(f"{op}: data must have rank >= 1")
        U.norm_axis(op, attrs["axis"], data.ndim)
        return [data]

    return infer


def _reduce_along(x, axis, f, reducer, name, tag):
    """A tensor of x's shape with extent 1 at `axis`: reducer over that axis of f(index)."""
    shape = tuple(1 if k == axis else s for k, s in enumerate(x.shape))
    r = te.reduce_axis((0, x.shape[axis]), f"r{tag}")

    def body(*i):
        j = list(i)
        j[axis] = r
        return reducer(f(tuple(j)), axis=r)

    return U.compute(shape, U.axis_names(x.ndim), body, name)


def _at1(i, axis):
    return tuple(0 if k == axis else v for k, v in enumerate(i))


def _half_sum(e, axis, name):
    """sum over axis as numpy does it: float16 accumulates in float32 (then rounds once), bfloat16
    (an ml_dtypes type) adds in bfloat16; other dtypes in themselves."""
    if e.dtype == "float16":
        s = _reduce_along(e, axis, lambda i: e[i].astype("float32"), te.sum, name + "_acc", "s")
        return U.compute(s.shape, U.axis_names(e.ndim), lambda *i: s[i].astype("float16"), name)
    return _reduce_along(e, axis, lambda i: e[i], te.sum, name, "s")


def row_lanes(x, axis, target):
    """Lanes of the symbolic-row form (see _lane_reduce), or 0 where it does not apply: along the
    last axis of a float32/float64 tensor whose extent there is symbolic."""
    if axis != x.ndim - 1 or isinstance(x.shape[axis], E.IntImm) or x.dtype not in ("float32", "float64"):
        return 0
    t = Target.host() if target is None else Target(target)
    lanes = int(t.vector_bits) // (32 if x.dtype == "float32" else 64)
    return lanes if lanes >= 2 else 0


def _lane_reduce(x, reducer, identity, name, lanes):
    """reducer over the last (symbolic, n) axis of x in steps a vectorizing schedule can take:
    `<name>_rf[..., l]` reduces x[..., k * lanes + l] over the whole vectors (k < n // lanes),
    `<name>_lanes` reduces its lanes (as a static row's rfactor does), `<name>_tail` the n % lanes
    elements after the whole vectors (none when lanes divide n), and `<name>` (extent 1 on that
    axis) combines the two. (Folding the tail into the lanes' loop, one select and a second
    reduction at each of the lanes, made the per-row work of a short row 1.5x a static row's.)"""
    n = x.shape[-1]
    lead = U.axis_names(x.ndim - 1)
    whole = n // lanes
    k = te.reduce_axis((0, whole), "rk")
    rf = U.compute(tuple(x.shape[:-1]) + (lanes,), lead + ["l"],
                   lambda *i: reducer(x[i[:-1] + (k * lanes + i[-1],)], axis=k), name + "_rf",
                   attrs={LANE_FORM: "partial"})
    one = tuple(x.shape[:-1]) + (1,)
    r = te.reduce_axis((0, lanes), "rl")
    across = U.compute(one, lead + ["i_red"], lambda *i: reducer(rf[i[:-1] + (r,)], axis=r), name + "_lanes",
                       attrs={LANE_FORM: "combine"})
    t = te.reduce_axis((0, n - whole * lanes), "rt")
    tail = U.compute(one, lead + ["i_red"], lambda *i: reducer(x[i[:-1] + (whole * lanes + t,)], axis=t),
                     name + "_tail")

    def combine(*i):
        return across[i] + tail[i] if reducer is te.sum else reducer(across[i], tail[i])

    return U.compute(one, lead + ["i_red"], combine, name)


def _softmax_rows(x, log, lanes):
    """softmax_compute along a symbolic last axis: the row max and the exp sum by _lane_reduce (whole
    vectors of partial results, then the lanes and the tail), so the rows vectorize at any length."""
    names = U.axis_names(x.ndim)
    prefix = "log_softmax" if log else "softmax"
    last = x.ndim - 1
    mx = _lane_reduce(x, te.max, te.min_value(x.dtype), f"{prefix}_maxelem", lanes)
    zero = te.const(0, x.dtype)
    if log:
        sh = U.compute(x.shape, names, lambda *i: x[i] - mx[_at1(i, last)], f"{prefix}_shifted")
        e = U.compute(x.shape, names, lambda *i: te.exp(sh[i]), f"{prefix}_exp")
        s = _lane_reduce(e, te.sum, zero, f"{prefix}_expsum", lanes)
        return U.compute(x.shape, names, lambda *i: sh[i] - te.log(s[_at1(i, last)]), prefix)
    e = U.compute(x.shape, names, lambda *i: te.exp(x[i] - mx[_at1(i, last)]), f"{prefix}_exp")
    s = _lane_reduce(e, te.sum, zero, f"{prefix}_expsum", lanes)
    return U.compute(x.shape, names, lambda *i: e[i] / s[_at1(i, last)], prefix)


def softmax_compute(x, axis, log=False, target=None):
    """Stable softmax / log-softmax along axis. Arithmetic is in x's dtype with one rounding per
    operation, as numpy (the ONNX reference) computes it, also for float16/bfloat16. Along a
    symbolic last axis the row reductions take the vectorizable form of _softmax_rows."""
    lanes = row_lanes(x, axis, target)
    if lanes:
        return _softmax_rows(x, log, lanes)
    names = U.axis_names(x.ndim)
    prefix = "log_softmax" if log else "softmax"
    mx = _reduce_along(x, axis, lambda i: x[i], te.max, f"{prefix}_maxelem", "m")
    if log:
        sh = U.compute(x.shape, names, lambda *i: x[i] - mx[_at1(i, axis)], f"{prefix}_shifted")
        e = U.compute(x.shape, names, lambda *i: te.exp(sh[i]), f"{prefix}_exp")
        s = _half_sum(e, axis, f"{prefix}_expsum")
        return U.compute(x.shape, names, lambda *i: sh[i] - te.log(s[_at1(i, axis)]), prefix)
    e = U.compute(x.shape, names, lambda *i: te.exp(x[i] - mx[_at1(i, axis)]), f"{prefix}_exp")
    s = _half_sum(e, axis, f"{prefix}_expsum")
    return U.compute(x.shape, names, lambda *i: e[i] / s[_at1(i, axis)], prefix)


def _register_softmax(op, log, doc):
    """nn.softmax or (log) nn.log_softmax: softmax_compute along the `axis` attribute."""
    opdef = register_op(op, inputs=("data",), pattern=OpPattern.OPAQUE, attrs={"axis": -1}, doc=doc)
    opdef.def_infer(_infer(op))

    @opdef.def_compute
    def compute(tensors, attrs, target=None):
        x = tensors[0]
        return [softmax_compute(x, U.norm_axis(op, attrs["axis"], x.ndim), log=log, target=target)]

    return opdef


softmax = _register_softmax("nn.softmax", False, "exp(x - max) / sum(exp(x - max)) along axis.")
log_softmax = _register_softmax("nn.log_softmax", True, "x - max - log(sum(exp(x - max))) along axis.")


def _first_argmax():
    def fcombine(a, b):
        keep = te.any(a[1] >= b[1], a[1] != a[1])  # first maximum wins; a NaN stays
        return E.Select(keep, a[0], b[0]), E.Select(keep, a[1], b[1])

    return te.comm_reducer(fcombine, lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")


_ARGMAX = _first_argmax()

hardmax = register_op("nn.hardmax", inputs=("data",), pattern=OpPattern.OPAQUE, attrs={"axis": -1},
                      doc="1 at the first maximum along axis, 0 elsewhere.")
hardmax.def_infer(_infer("nn.hardmax"))


@hardmax.def_compute
def _hardmax_compute(tensors, attrs):
    x = tensors[0]
    axis = U.norm_axis("nn.hardmax", attrs["axis"], x.ndim)
    shape = tuple(1 if k == axis else s for k, s in enumerate(x.shape))
    r = te.reduce_axis((0, x.shape[axis]), "r")
    names = U.axis_names(x.ndim)

    def body(*i):
        j = list(i)
        j[axis] = r
        return _ARGMAX((r, x[tuple(j)]), axis=r)

    idx, _ = U.compute(shape, names, body, "hardmax_argmax")
    return [U.compute(x.shape, names, lambda *i: te.if_then_else(idx[_at1(i, axis)] == i[axis],
                                                                 te.const(1, x.dtype), te.const(0, x.dtype)),
                      "hardmax")]



def schedule_softmax(sch, ctx):
    """Along the last axis: one row at a time (schedule_rows: max, exp, sum and the output per row,
    the row in L1, reductions on vector partial results, rows in parallel); else per block."""
    ndim = len(ctx.output_types[0].shape)
    axis = ctx.attrs.get("axis", -1)
    axis = axis + ndim if axis < 0 else axis
    if ndim >= 2 and axis == ndim - 1:
        try:
            schedule_rows(sch, ctx.target, ctx.block, ndim - 1, ctx)
            return
        except ScheduleError:
            pass
    schedule_blocks(sch, ctx)


for _op in (softmax, log_softmax, hardmax):
    _op.def_schedule(schedule_softmax)
