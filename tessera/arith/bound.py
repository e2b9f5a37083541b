"""Interval analysis: inclusive integer bounds [min, max] of integer expressions.

A bound is a pair `(lo, hi)` of Python ints, with `-math.inf` / `math.inf` for an unbounded side.
The interval rules here are shared by `const_int_bound` and by the Analyzer (which adds the
bounds of canonical sums on top); they assume integer arithmetic does not overflow, as TVM does.
"""
from __future__ import annotations

import math

from ..errors import TesseraError
from ..ir import expr as E

INF = math.inf
NEG_INF = -math.inf
UNBOUNDED = (NEG_INF, INF)
BOOL_RANGE = (0, 1)

_RANGES: dict = {}


def dtype_range(dtype) -> tuple:
    """The values a scalar of `dtype` (or one lane of it) can hold; floats are unbounded."""
    r = _RANGES.get(dtype)
    if r is None:
        code, bits = dtype.code, dtype.bits
        if code == "bool":
            r = BOOL_RANGE
        elif code == "int":
            r = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        elif code == "uint":
            r = (0, (1 << bits) - 1)
        else:
            r = UNBOUNDED
        _RANGES[dtype] = r
    return r


def var_default_bound(v) -> tuple:
    """Bound of a variable nothing is known about: SizeVar >= 0, unsigned >= 0, bool in [0, 1]."""
    dt = v.dtype
    code = dt.code
    if code == "int":
        return (0, INF) if type(v) is E.SizeVar else UNBOUNDED
    if code in ("uint", "bool"):
        return dtype_range(dt)
    return UNBOUNDED


# ---------------------------------------------------------------------------------------------
# interval arithmetic (lo may be -inf, hi may be +inf; never the other way round)
# ---------------------------------------------------------------------------------------------
def _m(x, y):
    """x * y where 0 * inf is 0 (a zero factor is exact)."""
    if x == 0 or y == 0:
        return 0
    return x * y


def add_bound(a, b):
    return (a[0] + b[0], a[1] + b[1])


def sub_bound(a, b):
    return (a[0] - b[1], a[1] - b[0])


def mul_bound(a, b):
    al, ah = a
    bl, bh = b
    if al == ah and bl == bh:
        v = _m(al, bl)
        return (v, v)
    c = (_m(al, bl), _m(al, bh), _m(ah, bl), _m(ah, bh))
    return (min(c), max(c))


def _fdiv(x, y):
    """floor(x / y) for finite positive y; x may be infinite."""
    if x == INF or x == NEG_INF:
        return x
    return x // y


def _tdiv(x, y):
    """trunc(x / y) for finite positive y; x may be infinite."""
    if x == INF or x == NEG_INF:
        return x
    q = abs(x) // y
    return q if x >= 0 else -q


def _nonzero(b):
    """The divisor range with 0 removed from an end; None when it is exactly 0 (undefined)."""
    bl, bh = b
    if bl == 0 and bh == 0:
        return None
    if bl == 0:
        bl = 1
    elif bh == 0:
        bh = -1
    return bl, bh


def _div_bound(a, b, div, below_zero):
    """Bound of div(a, b), a division rounding down (floor) or toward zero (trunc); `below_zero` is
    div(x, +inf) for a negative finite x: -1 for floor, 0 for trunc."""
    b = _nonzero(b)
    if b is None:
        return UNBOUNDED
    al, ah = a
    bl, bh = b
    if bl > 0:
        hi = div(ah, bl) if ah >= 0 else (div(ah, bh) if bh != INF else below_zero)
        lo = (div(al, bh) if bh != INF else 0) if al >= 0 else div(al, bl)
        return (lo, hi)
    if bh < 0:  # div(a, b) == div(-a, -b)
        return _div_bound((-ah, -al), (-bh, -bl), div, below_zero)
    m = max(-al, ah)  # |b| >= 1 so |div(a, b)| <= |a|
    return (-m, m)


def floordiv_bound(a, b):
    """Bound of floor(a / b); a zero divisor is excluded (division by zero is undefined)."""
    return _div_bound(a, b, _fdiv, -1)


def truncdiv_bound(a, b):
    """Bound of C division trunc(a / b)."""
    return _div_bound(a, b, _tdiv, 0)


def floormod_bound(a, b):
    """Bound of a - floor(a / b) * b: in [0, b) for b > 0, in (b, 0] for b < 0."""
    b = _nonzero(b)
    if b is None:
        return UNBOUNDED
    al, ah = a
    bl, bh = b
    if bl > 0:
        if al >= 0 and ah < bl:
            return (al, ah)
        if bl == bh and al != NEG_INF and ah != INF and al // bl == ah // bl:
            return (al % bl, ah % bl)
        hi = bh - 1
        if al >= 0 and ah < hi:
            hi = ah
        return (0, hi)
    if bh < 0:
        if ah <= 0 and al > bh:
            return (al, ah)
        lo = bl + 1
        if ah <= 0 and al > lo:
            lo = al
        return (lo, 0)
    m = max(-bl, bh) - 1
    return (-m, m)


def truncmod_bound(a, b):
    """Bound of C remainder: |r| < |b| and r has the sign of a."""
    b = _nonzero(b)
    if b is None:
        return UNBOUNDED
    al, ah = a
    bl, bh = b
    m = max(-bl, bh) - 1  # largest |r|
    mn = min(abs(bl), abs(bh)) if (bl > 0 or bh < 0) else 1  # smallest |b|
    if al >= 0:
        return (al, ah) if ah < mn else (0, min(ah, m))
    if ah <= 0:
        return (al, ah) if al > -mn else (max(al, -m), 0)
    return (max(al, -m), min(ah, m))


def min_bound(a, b):
    return (min(a[0], b[0]), min(a[1], b[1]))


def max_bound(a, b):
    return (max(a[0], b[0]), max(a[1], b[1]))


def union_bound(a, b):
    return (min(a[0], b[0]), max(a[1], b[1]))


def intersect_bound(a, b):
    return (max(a[0], b[0]), min(a[1], b[1]))


def abs_bound(a):
    lo, hi = a
    if lo >= 0:
        return a
    if hi <= 0:
        return (-hi, -lo)
    return (0, max(-lo, hi))


def cast_bound(dtype, src_dtype, b):
    """Bound after casting a value bounded by b (of src_dtype) to an integer dtype."""
    tr = dtype_range(dtype)
    if tr is UNBOUNDED:
        return UNBOUNDED
    if src_dtype.is_float():
        return tr
    if tr[0] <= b[0] and b[1] <= tr[1]:
        return b
    return tr


_BINARY = {E.Add: add_bound, E.Sub: sub_bound, E.Mul: mul_bound, E.FloorDiv: floordiv_bound,
           E.FloorMod: floormod_bound, E.Div: truncdiv_bound, E.Mod: truncmod_bound,
           E.Min: min_bound, E.Max: max_bound}


class IntervalAnalyzer:
    """Computes bounds over an expression tree; `var_bounds` maps Var -> (lo, hi), results are cached.

    The cache is keyed by node identity and is only valid while `var_bounds` does not change:
    call `clear()` after changing it.
    """

    def __init__(self, var_bounds=None):
        self.var_bounds = {} if var_bounds is None else var_bounds
        self.cache = {}

    def clear(self):
        self.cache.clear()

    def __call__(self, e) -> tuple:
        t = type(e)
        if t is E.IntImm:
            return (e.value, e.value)
        if t is E.Var or t is E.SizeVar:
            b = self.var_bounds.get(e)
            return b if b is not None else var_default_bound(e)
        dt = e.dtype
        code = dt.code
        if code != "int" and code != "uint" and code != "bool":
            return UNBOUNDED
        r = self.cache.get(e)
        if r is None:
            r = self._compute(e, t)
            self.cache[e] = r
        return r

    def _compute(self, e, t):
        fn = _BINARY.get(t)
        if fn is not None:
            return fn(self(e.a), self(e.b))
        if isinstance(e, (E.CmpOp, E.And, E.Not)):
            return BOOL_RANGE
        if t is E.Cast:
            v = e.value
            return cast_bound(e.dtype, v.dtype, self(v) if not v.dtype.is_float() else UNBOUNDED)
        if t is E.Select:
            return union_bound(self(e.true_value), self(e.false_value))
        if t is E.Let:
            vb = self.var_bounds
            old = vb.get(e.var)
            vb[e.var] = self(e.value)
            try:
                # the body's sub-results depend on this binding: compute them uncached
                saved, self.cache = self.cache, {}
                try:
                    return self(e.body)
                finally:
                    self.cache = saved
            finally:
                if old is None:
                    del vb[e.var]
                else:
                    vb[e.var] = old
        if t is E.Broadcast:
            return self(e.value)
        if t is E.Ramp:
            span = mul_bound(self(e.stride), (0, e.lanes - 1))
            return add_bound(self(e.base), span)
        if t is E.Call:
            return self._call(e)
        return dtype_range(e.dtype)

    def _call(self, e):
        op, args = e.op, e.args
        if op == "abs" and len(args) == 1:
            return abs_bound(self(args[0]))
        if len(args) == 2 and type(args[1]) is E.IntImm:
            c = args[1].value
            if op == "bitwise_and" and c >= 0:
                a = self(args[0])
                return (a[0], min(a[1], c)) if a[0] >= 0 else (0, c)
            if op == "shift_right" and 0 <= c < 64:
                return floordiv_bound(self(args[0]), (1 << c, 1 << c))
            if op == "shift_left" and 0 <= c < 64:
                return mul_bound(self(args[0]), (1 << c, 1 << c))
        return dtype_range(e.dtype)


def _as_bound(var, b):
    if isinstance(b, (tuple, list)) and len(b) == 2:
        lo = NEG_INF if b[0] is None else b[0]
        hi = INF if b[1] is None else b[1]
        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
            return (lo, hi)
    raise TesseraError(f"bound of variable {getattr(var, 'name', var)!r} must be an inclusive "
                       f"(min, max) pair of ints (None for unbounded), got {b!r}")


def const_int_bound(expr, var_bounds=None) -> tuple:
    """Inclusive integer bounds (min, max) of `expr`; +-math.inf marks an unbounded side.

    `var_bounds` maps Var -> (min, max) inclusive (None for an unbounded side). Variables not
    listed are unbounded, except SizeVars (>= 0), unsigned and bool variables.
    """
    expr = E.convert(expr)
    vb = {}
    for v, b in (var_bounds or {}).items():
        if not isinstance(v, E.Var):
            raise TesseraError(f"var_bounds keys must be Vars, got {v!r}")
        vb[v] = _as_bound(v, b)
    return IntervalAnalyzer(vb)(expr)
