"""Shared helpers of the op families: dtype groups and checks, axis normalization, numpy
broadcasting of graph shapes (ints and symbolic names) and of te index expressions.

Graph-level helpers (`infer`) work on `TensorType`s whose dims are ints or symbolic names (str);
te-level helpers (`compute`) work on te Tensors whose shapes are PrimExprs (IntImm or Var).
"""
from __future__ import annotations

from ..errors import DTypeError, ShapeError
from ..ir import expr as E
from ..ir.dtype import DataType
from ..ir.structural import structural_equal

FLOATS = ("float16", "bfloat16", "float32", "float64")
SINTS = ("int8", "int16", "int32", "int64")
UINTS = ("uint8", "uint16", "uint32", "uint64")
INTS = SINTS + UINTS
NUMERIC = INTS + FLOATS
SIGNED = SINTS + FLOATS
ALL = ("bool",) + NUMERIC
# the low-precision storage types (ir.dtype): ops convert them (cast, qnn.*), nothing computes in them
MINIFLOATS = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn")
SUBBYTE_INTS = ("int4", "uint4", "int2", "uint2")
LOWP = MINIFLOATS + SUBBYTE_INTS
INDEX = ("int32", "int64")


# ---------------------------------------------------------------------------------------------
# dtypes
# ---------------------------------------------------------------------------------------------
def _group_name(allowed) -> str:
    allowed = tuple(allowed)
    for name, group in (("bool, integer or float", ALL), ("integer or float", NUMERIC),
                        ("float", FLOATS), ("integer", INTS), ("signed integer or float", SIGNED),
                        ("int32 or int64", INDEX), ("bool", ("bool",))):
        if set(allowed) == set(group):
            return f"{name} ({', '.join(group)})"
    return ", ".join(allowed)


def check_dtype(op: str, dtype, allowed, what: str = "input") -> DataType:
    """dtype, or DTypeError naming the op, which operand and the dtypes it takes."""
    dt = DataType(dtype)
    if dt not in allowed:
        raise DTypeError(f"{op}: {what} has dtype {dt}, which {op} does not support; it takes "
                         f"{_group_name(allowed)}")
    return dt


def check_same_dtype(op: str, types, names=None) -> DataType:
    """The common dtype of the inputs, or DTypeError naming both when they differ."""
    first = types[0].dtype
    for k, t in enumerate(types[1:], 1):
        if t.dtype != first:
            a = names[0] if names else "input 0"
            b = names[k] if names else f"input {k}"
            raise DTypeError(f"{op}: {a} is {first} but {b} is {t.dtype}; the inputs must have one "
                             f"dtype (insert a cast)")
    return first


def accum_dtype(dtype) -> DataType:
    """The dtype to compute a float op in: float32 for float16/bfloat16 (one rounding at the end)."""
    dt = DataType(dtype)
    return DataType("float32") if dt in ("float16", "bfloat16") else dt


# ---------------------------------------------------------------------------------------------
# axes
# ---------------------------------------------------------------------------------------------
def normalize_axis(op: str, axis, ndim: int, what: str = "axis", extra: int = 0) -> int:
    """axis in [-ndim-extra, ndim+extra) mapped to [0, ndim+extra); ShapeError otherwise."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        try:
            axis = int(axis)
        except (TypeError, ValueError):
            raise ShapeError(f"{op}: {what} {axis!r} is not an integer") from None
    n = ndim + extra
    if not -n <= axis < n:
        raise ShapeError(f"{op}: {what} {axis} is out of range for a tensor of rank {ndim} "
                         f"(valid: {-n}..{n - 1})")
    return axis + n if axis < 0 else axis


def normalize_axes(op: str, axes, ndim: int, what: str = "axes", extra: int = 0) -> tuple:
    """Sorted, normalized, distinct axes; None means all axes."""
    if axes is None:
        return tuple(range(ndim + extra))
    if isinstance(axes, int):
        axes = (axes,)
    out = [normalize_axis(op, a, ndim, what, extra) for a in axes]
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: {what} {tuple(axes)} name an axis twice (rank {ndim})")
    return tuple(sorted(out))


# ---------------------------------------------------------------------------------------------
# shapes at the graph level (ints and symbolic names)
# ---------------------------------------------------------------------------------------------
def fmt_shape(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def broadcast_shapes(op: str, *shapes) -> tuple:
    """numpy broadcasting of graph shapes: equal dims (or equal names) match, a 1 broadcasts;
    anything else is a ShapeError naming the shapes."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(ndim):
        dim = 1
        for s in shapes:
            j = k - (ndim - len(s))
            if j < 0:
                continue
            d = s[j]
            if d == 1 or d == dim:
                continue
            if dim == 1:
                dim = d
                continue
            raise ShapeError(f"{op}: shapes {', '.join(fmt_shape(s) for s in shapes)} do not broadcast "
                             f"(dimension {k} of the result: {dim} against {d})")
        out.append(dim)
    return tuple(out)


SUM_SEP = "_plus_"   # the symbol of a sum of extents joins its terms' names (dim_sum)


def dim_sum(dims):
    """Sum of graph dims laid end to end (a concatenation's extent): an int when all are static, else
    the symbol naming the sum, its symbolic terms sorted and joined by "_plus_" and the static part last
    ("past_plus_seq", "past_plus_1"); a term that names a sum is taken apart, so the symbol of a sum
    does not depend on how it was grouped. The executor binds the symbol from the value it takes at
    run time, so two tensors whose extent is the same sum share a symbol."""
    names, n = [], 0
    for d in dims:
        if isinstance(d, int):
            n += d
        else:
            for t in d.split(SUM_SEP):
                if t.isdigit():
                    n += int(t)
                else:
                    names.append(t)
    if not names:
        return n
    names.sort()
    return SUM_SEP.join(names + ([str(n)] if n else []))


def dim_product(dims):
    """Product of graph dims: an int when all are static, else None."""
    n = 1
    for d in dims:
        if not isinstance(d, int):
            return None
        n *= d
    return n


# ---------------------------------------------------------------------------------------------
# te level
# ---------------------------------------------------------------------------------------------
def is_const(expr, value=None) -> bool:
    return isinstance(expr, E.IntImm) and (value is None or expr.value == value)


def static(expr):
    """The int value of a te extent, or None when symbolic."""
    return expr.value if isinstance(expr, E.IntImm) else None


def broadcast_shape_te(op: str, *shapes) -> tuple:
    """Broadcast te shapes (PrimExprs): a constant 1 broadcasts, equal constants or the same Var
    match; two different Vars are refused (the graph level has checked names already)."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(ndim):
        dim = None
        for s in shapes:
            j = k - (ndim - len(s))
            if j < 0:
                continue
            d = s[j]
            if is_const(d, 1):
                dim = dim if dim is not None else d
                continue
            if dim is None or is_const(dim, 1):
                dim = d
            elif not _same_extent(dim, d):
                raise ShapeError(f"{op}: shapes {', '.join(_fmt_te(s) for s in shapes)} do not broadcast")
        out.append(dim if dim is not None else E.const(1))
    return tuple(out)


def _same_extent(a, b) -> bool:
    if isinstance(a, E.IntImm) and isinstance(b, E.IntImm):
        return a.value == b.value
    if a is b:
        return True
    return structural_equal(a, b)


def _fmt_te(shape) -> str:
    return "(" + ", ".join(str(d.value) if isinstance(d, E.IntImm) else d.script() for d in shape) + ")"


def broadcast_index(tensor, out_index) -> tuple:
    """The indices into `tensor` for output point `out_index` under numpy broadcasting (trailing
    dims aligned; a constant-1 dim is read at 0)."""
    nd, no = len(tensor.shape), len(out_index)
    idx = []
    for j, d in enumerate(tensor.shape):
        i = out_index[no - nd + j]
        idx.append(E.const(0, d.dtype) if is_const(d, 1) else i)
    return tuple(idx)


def cast(x, dtype):
    """x converted to dtype with numpy/ONNX semantics (to bool: x != 0)."""
    dt = DataType(dtype)
    if x.dtype == dt:
        return x
    if dt.is_bool():
        return x != E.const(0, x.dtype) if not x.dtype.is_bool() else x
    if x.dtype.is_bool():
        return E.Select(x, E.const(1, dt), E.const(0, dt))
    return x.astype(dt)


def const(value, dtype):
    """A scalar constant of dtype (floats for float dtypes, ints truncated for integer ones)."""
    dt = DataType(dtype)
    if dt.is_bool():
        return E.const(bool(value), dt)
    if dt.is_float():
        return E.const(float(value), dt)
    return E.const(int(value), dt)


def index_dtype(*exprs) -> DataType:
    """int64 if any extent is int64, else int32 (the dtype of loop variables)."""
    for e in exprs:
        if getattr(e, "dtype", None) == "int64":
            return DataType("int64")
    return DataType("int32")
