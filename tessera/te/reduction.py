"""Commutative reducers: comm_reducer, and the built-in sum, max and min.

A reducer called with `axis=` builds `ir.Reduce` nodes (one per value for a multi-value reducer
such as argmax); called with two or more values and no axis it combines them elementwise.
"""
from __future__ import annotations

from ..errors import DTypeError, TesseraError
from ..ir import expr as E
from ..ir.dtype import DataType
from .intrin import min_value as _min_value, max_value as _max_value


def _is_axis(x) -> bool:
    if isinstance(x, E.IterVar):
        return True
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(a, E.IterVar) for a in x)


def _typed(value, dtype: DataType, what: str) -> E.PrimExpr:
    """value as an expression of dtype: Python scalars and constants convert, others must match."""
    if isinstance(value, E.IterVar):
        value = value.var
    if not isinstance(value, E.PrimExpr):
        try:
            return E.const(value, dtype)
        except TesseraError as err:
            raise DTypeError(f"{what}: {value!r} is not a {dtype} value ({err})") from None
    if value.dtype == dtype:
        return value
    if isinstance(value, (E.IntImm, E.FloatImm)):
        return E.cast(value, dtype)
    raise DTypeError(f"{what} is {value.dtype} ({value.script()}) but the reduced value is {dtype}")


class CommReducerFn:
    """A reducer made by comm_reducer: `r(expr, axis=k, where=cond, init=None)` or `r(a, b, ...)`."""

    __slots__ = ("fcombine", "fidentity", "name", "_cache")

    def __init__(self, fcombine, fidentity, name):
        self.fcombine, self.fidentity, self.name = fcombine, fidentity, str(name)
        self._cache = {}

    def combiner(self, dtypes: tuple) -> E.CommReducer:
        """The ir.CommReducer of this reducer for values of the given dtypes (cached per dtypes)."""
        comm = self._cache.get(dtypes)
        if comm is not None:
            return comm
        n = len(dtypes)
        if n == 1:
            lhs, rhs = (E.Var("x", dtypes[0]),), (E.Var("y", dtypes[0]),)
            result, ident = (self.fcombine(lhs[0], rhs[0]),), (self.fidentity(dtypes[0]),)
        else:
            lhs = tuple(E.Var(f"x{k}", d) for k, d in enumerate(dtypes))
            rhs = tuple(E.Var(f"y{k}", d) for k, d in enumerate(dtypes))
            result, ident = self.fcombine(lhs, rhs), self.fidentity(*dtypes)
            for what, got in (("fcombine", result), ("fidentity", ident)):
                if not isinstance(got, (tuple, list)) or len(got) != n:
                    raise TesseraError(f"reducer {self.name!r}: {what} must return a tuple of {n} values "
                                       f"for a {n}-value reduction, got {got!r}")
        result = tuple(_typed(r, d, f"reducer {self.name!r}: combined value {k}")
                       for k, (r, d) in enumerate(zip(result, dtypes)))
        ident = tuple(_typed(r, d, f"reducer {self.name!r}: identity value {k}")
                      for k, (r, d) in enumerate(zip(ident, dtypes)))
        comm = E.CommReducer(lhs, rhs, result, ident, self.name)
        self._cache[dtypes] = comm
        return comm

    def __call__(self, expr, axis=None, *more, where=None, init=None):
        if axis is None:
            raise TesseraError(f"te.{self.name} needs axis=... (a te.reduce_axis or a list of them), "
                               f"or two or more values to combine elementwise")
        if _is_axis(axis):
            if len(more) > 2:
                raise TesseraError(f"te.{self.name}(expr, axis, where, init) got {2 + len(more)} arguments")
            if more:
                if where is not None:
                    raise TesseraError(f"te.{self.name}: 'where' given twice")
                where = more[0]
            if len(more) == 2:
                if init is not None:
                    raise TesseraError(f"te.{self.name}: 'init' given twice")
                init = more[1]
            return self._reduce(expr, axis, where, init)
        if where is not None or init is not None:
            raise TesseraError(f"te.{self.name}: where=/init= apply to a reduction over axis=; "
                               f"{axis!r} is not a reduce axis")
        out = expr
        for value in (axis,) + more:
            out = self._combine(out, value)
        return out

    def _combine(self, a, b):
        if isinstance(a, (tuple, list)) != isinstance(b, (tuple, list)):
            raise TesseraError(f"te.{self.name}: cannot combine a tuple with a single value")
        if isinstance(a, (tuple, list)):
            if len(a) != len(b):
                raise TesseraError(f"te.{self.name}: tuples of {len(a)} and {len(b)} values")
            out = self.fcombine(tuple(a), tuple(b))
            return tuple(E.convert(v) for v in out)
        return E.convert(self.fcombine(a, b))

    def _reduce(self, expr, axis, where, init):
        multi = isinstance(expr, (tuple, list))
        values = tuple(expr) if multi else (expr,)
        if not values:
            raise TesseraError(f"te.{self.name}: nothing to reduce (empty tuple)")
        source = []
        for v in values:
            if not isinstance(v, (E.PrimExpr, E.IterVar, int, float, bool)) and not hasattr(v, "__index__"):
                raise TesseraError(f"te.{self.name}: cannot reduce {v!r}; give an expression such as A[i, k]")
            v = E.convert(v)
            if v.dtype.lanes != 1 or v.dtype.is_handle():
                raise DTypeError(f"te.{self.name}: reduces scalar numbers, got {v.dtype}")
            source.append(v)
        source = tuple(source)
        axes = (axis,) if isinstance(axis, E.IterVar) else tuple(axis)
        seen = set()
        for a in axes:
            if a.iter_type != "reduce":
                raise TesseraError(f"te.{self.name}: axis {a.var.name!r} is a {a.iter_type} axis; reduce "
                                   f"over axes made by te.reduce_axis")
            if id(a) in seen:
                raise TesseraError(f"te.{self.name}: axis {a.var.name!r} appears twice")
            seen.add(id(a))
        if where is None:
            cond = E.const(True)
        else:
            cond = E.convert(where)
            if not cond.dtype.is_bool() or cond.dtype.lanes != 1:
                raise DTypeError(f"te.{self.name}: where= needs a scalar bool condition, got {cond.dtype}")
        dtypes = tuple(s.dtype for s in source)
        if init is None:
            init_values = ()
        else:
            init_values = tuple(init) if isinstance(init, (tuple, list)) else (init,)
            if len(init_values) != len(source):
                raise TesseraError(f"te.{self.name}: init has {len(init_values)} values for "
                                   f"{len(source)} reduced values")
            init_values = tuple(_typed(v, d, f"te.{self.name}: init value {k}")
                                for k, (v, d) in enumerate(zip(init_values, dtypes)))
        comm = self.combiner(dtypes)
        reds = tuple(E.Reduce(comm, source, axes, cond, k, init_values) for k in range(len(source)))
        return reds if multi else reds[0]

    def __repr__(self):
        return f"comm_reducer({self.name!r})"


def comm_reducer(fcombine, fidentity, name="comm_reducer") -> CommReducerFn:
    """A reducer from fcombine(x, y) -> combined and fidentity(dtype) -> identity element.

    For a multi-value reducer (argmax) fcombine takes and returns tuples and fidentity takes one
    dtype per value and returns a tuple.
    """
    return CommReducerFn(fcombine, fidentity, name)


def _sum_identity(dtype):
    if DataType(dtype).is_bool():
        raise DTypeError("te.sum of bool values: cast them to an integer type first, e.g. x.astype('int32')")
    return E.const(0, dtype)


sum = comm_reducer(lambda x, y: x + y, _sum_identity, name="sum")  # noqa: A001 - TVM's name
max = comm_reducer(E.max_expr, _min_value, name="max")  # noqa: A001
min = comm_reducer(E.min_expr, _max_value, name="min")  # noqa: A001

__all__ = ["comm_reducer", "CommReducerFn", "sum", "max", "min"]
