"""Helpers the nn operator families share: type checks, attribute normalization, symbolic shapes.

Shape inference works on `TensorType`s (dims: int or symbolic name); computes work on te tensors
(dims: IntImm or te.Var). `dims_of` / `ttype` turn a te tensor into the former, `shape_exprs` turns
an inferred shape back into te extents (a symbolic name becomes the te.Var of that name found in
the inputs), so each op computes its output shape once, in its infer function.
"""
from __future__ import annotations

import inspect

from ... import te
from ...errors import DTypeError, ShapeError, TesseraError
from ...ir import TensorType
from ...ir import expr as E
from ...ir.dtype import DataType

from .._common import FLOATS, INTS, NUMERIC, accum_dtype, broadcast_index, broadcast_shapes
from .._common import cast as _cast_numpy
from .._common import check_dtype as _check_dtype
from .._common import check_same_dtype, normalize_axis
import numpy as np
from ...ir.dtype import numpy_dtype

HALF = ("float16", "bfloat16")


# ---------------------------------------------------------------------------------------------
# types and shapes
# ---------------------------------------------------------------------------------------------
def dims_of(t) -> tuple:
    """The shape of a te tensor as TensorType dims: ints, and names for symbolic extents."""
    out = []
    for s in t.shape:
        if isinstance(s, E.IntImm):
            out.append(int(s.value))
        elif isinstance(s, E.Var):
            out.append(s.name)
        else:
            raise ShapeError(f"tensor {t.name!r}: extent {s.script()} is an expression; operator inputs "
                             f"take constant or plain symbolic extents")
    return tuple(out)


def ttype(t) -> TensorType:
    return TensorType(dims_of(t), t.dtype)


def shape_exprs(shape, *tensors) -> tuple:
    """te extents for an inferred shape: names map back to the te.Var of that name in `tensors`."""
    by_name = {}
    for t in tensors:
        for s in t.shape:
            if isinstance(s, E.Var):
                by_name.setdefault(s.name, s)
    out = []
    for d in shape:
        if isinstance(d, str):
            v = by_name.get(d)
            if v is None:
                raise ShapeError(f"symbolic extent {d!r} of an output is not an extent of any input")
            out.append(v)
        else:
            out.append(int(d))
    return tuple(out)


def is_static(d) -> bool:
    return isinstance(d, int)


def static_dims(op: str, t: TensorType, axes, what: str) -> tuple:
    """The dims of `t` at `axes` as ints; a ShapeError naming them if any is symbolic."""
    dims = tuple(t.shape[a] for a in axes)
    bad = [d for d in dims if not isinstance(d, int)]
    if bad:
        raise ShapeError(f"{op}: the {what} {dims} must be static, got symbolic {bad} in input {t}; "
                         f"only batch-like dimensions may be symbolic")
    return dims


def check_rank(op: str, t: TensorType, ranks, what: str = "input") -> None:
    ranks = (ranks,) if isinstance(ranks, int) else tuple(ranks)
    if t.ndim not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ShapeError(f"{op}: {what} must have rank {want}, got {t.ndim} ({t})")


def check_dtype(op: str, t: TensorType, allowed, what: str = "input") -> None:
    """DTypeError unless TensorType t has one of the allowed dtypes."""
    _check_dtype(op, t.dtype, allowed, what)


def same_dtype(op: str, types, names) -> None:
    check_same_dtype(op, types, names)


def broadcast_dims(op: str, a: tuple, b: tuple, what=None) -> tuple:
    return broadcast_shapes(op, tuple(a), tuple(b))


def broadcast_index_batch(t, batch):
    """The batch indices of matrix operand `t` (its dims but the last two) at output batch `batch`."""
    nb = t.ndim - 2
    idx = list(batch[len(batch) - nb:]) if nb else []
    for k in range(nb):
        s = t.shape[k]
        if isinstance(s, E.IntImm) and s.value == 1:
            idx[k] = 0
    return tuple(idx)


# ---------------------------------------------------------------------------------------------
# attributes
# ---------------------------------------------------------------------------------------------
def int_tuple(op: str, name: str, value, n: int, *, minimum=None) -> tuple:
    """An attribute of n ints: an int is repeated, a tuple must have length n."""
    if isinstance(value, bool):
        raise TesseraError(f"{op}: attribute {name}={value!r} must be an int or a tuple of ints")
    if isinstance(value, int):
        value = (value,) * n
    try:
        value = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise TesseraError(f"{op}: attribute {name}={value!r} must be an int or a tuple of {n} ints") from None
    if len(value) != n:
        raise TesseraError(f"{op}: attribute {name}={value} must have {n} entries")
    if minimum is not None and any(v < minimum for v in value):
        raise TesseraError(f"{op}: attribute {name}={value} must be >= {minimum} everywhere")
    return value


def padding_tuple(op: str, value, n: int) -> tuple:
    """Padding as (begin_0..begin_{n-1}, end_0..end_{n-1}); an int or n values pad both sides alike."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,) * (2 * n)
    value = tuple(int(v) for v in value)
    if len(value) == n:
        value = value + value
    if len(value) != 2 * n:
        raise TesseraError(f"{op}: padding={value} must have 1, {n} or {2 * n} entries "
                           f"(begin_0..begin_{n - 1}, end_0..end_{n - 1})")
    if any(v < 0 for v in value):
        raise TesseraError(f"{op}: negative padding {value}")
    return value


def norm_axis(op: str, axis, ndim: int, name: str = "axis") -> int:
    return normalize_axis(op, axis, ndim, name)


def out_dtype(op: str, attr, default) -> DataType:
    if attr in (None, ""):
        return DataType(default)
    try:
        return DataType(attr)
    except TesseraError as e:
        raise DTypeError(f"{op}: out_dtype {attr!r}: {e}") from None


# ---------------------------------------------------------------------------------------------
# compute helpers
# ---------------------------------------------------------------------------------------------
def named(fn, names):
    """fn(*idx) with a signature naming its index arguments, so loops get readable names."""
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names]

    def wrapper(*idx):
        return fn(*idx)

    wrapper.__signature__ = inspect.Signature(params)
    return wrapper


def compute(shape, names, fn, name, tag="", attrs=None):
    """te.compute with explicit axis names (fn takes the indices as positional arguments)."""
    names = list(names)
    if len(names) != len(shape):
        raise TesseraError(f"internal: {len(names)} axis names for a rank-{len(shape)} compute {name!r}")
    return te.compute(shape, named(fn, names), name=name, tag=tag, attrs=attrs)


def axis_names(ndim: int, prefix: str = "i") -> list:
    return [f"{prefix}{k}" for k in range(ndim)]


SPATIAL_NAMES = {1: ("w",), 2: ("h", "w"), 3: ("d", "h", "w")}


def clamped_index(pos, first: int, last: int, size: int):
    """(pos clamped into [0, size), the conditions that pos is inside) for an index on one axis of an
    unrolled window tap whose values run from first to last: a side it never crosses is not tested."""
    conds = []
    if first < 0:
        conds.append(pos >= 0)
        pos = E.max_expr(pos, te.const(0, pos.dtype))
    if last >= size:
        conds.append(pos < size)
        pos = E.min_expr(pos, te.const(size - 1, pos.dtype))
    return pos, conds


def window_tap(pos, k: int, step: int, first: int, pad: int, size: int, extent: int):
    """clamped_index of tap k (k * first past the window's start) of output `pos` on one axis of a
    stride-`step` window padded by `pad` in front, over `size` inputs and `extent` outputs."""
    lo = k * first - pad
    return clamped_index(pos * step + lo, lo, (extent - 1) * step + lo, size)


def zero(dtype):
    return te.const(0, dtype)


def cast(x, dtype):
    """x converted to dtype (numpy semantics)."""
    return _cast_numpy(x, dtype)


def numpy_value(value: float, dtype) -> float:
    """`value` rounded to dtype (as numpy/ml_dtypes round), as a Python float."""
    return float(np.asarray(value, np.float64).astype(numpy_dtype(dtype)).astype(np.float64))
