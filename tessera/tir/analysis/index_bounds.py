"""The inclusive (lo, hi) an index expression takes while given loops run, as expressions of the
variables outside them (TVM's EvalSet over a loop path). Monotone parts (affine sums, floordiv by a
constant, min/max) are evaluated at the ends of the ranges, so split/fuse indices relax exactly;
anything else is bounded structurally, or not at all (None)."""
from __future__ import annotations

from ...ir import (Add, Cast, FloorDiv, FloorMod, IntImm, Max, Min, Mul, Select, Sub, const, max_expr, min_expr,
                   substitute)
from .uses import uses_var


def _comb(a, b):
    if a is None or b is None:
        return None
    if a == 0:
        return b
    if b == 0 or a == b:
        return a
    return None


def _monotone(e, x):
    """+1 / -1 when e is non-decreasing / non-increasing in x, 0 when it does not use x, else None."""
    if e is x:
        return 1
    if not uses_var(e, x):
        return 0
    t = type(e)
    if t is Add or t is Min or t is Max:
        return _comb(_monotone(e.a, x), _monotone(e.b, x))
    if t is Sub:
        b = _monotone(e.b, x)
        return _comb(_monotone(e.a, x), None if b is None else -b)
    if t is Mul:
        for c, other in ((e.b, e.a), (e.a, e.b)):
            if type(c) is IntImm:
                m = _monotone(other, x)
                if m is None:
                    return None
                return 0 if c.value == 0 else (m if c.value > 0 else -m)
        return None
    if t is FloorDiv and type(e.b) is IntImm and e.b.value > 0:
        return _monotone(e.a, x)
    if t is Cast and e.dtype.is_integer() and e.value.dtype.is_integer() and e.dtype.bits >= e.value.dtype.bits:
        return _monotone(e.value, x)
    return None


def _relax1(e, x, lo, hi, ana):
    """(lo, hi) of e while x runs over [lo, hi] (inclusive), or None when it cannot be bounded."""
    m = _monotone(e, x)
    if m == 0:
        return e, e
    if m is not None:
        a, b = substitute(e, {x: lo}), substitute(e, {x: hi})
        return (a, b) if m > 0 else (b, a)
    t = type(e)
    if t is Add or t is Sub:
        ra, rb = _relax1(e.a, x, lo, hi, ana), _relax1(e.b, x, lo, hi, ana)
        if ra is None or rb is None:
            return None
        if t is Add:
            return ra[0] + rb[0], ra[1] + rb[1]
        return ra[0] - rb[1], ra[1] - rb[0]
    if t is Mul:
        for c, other in ((e.b, e.a), (e.a, e.b)):
            if type(c) is IntImm:
                r = _relax1(other, x, lo, hi, ana)
                if r is None:
                    return None
                return (r[0] * c, r[1] * c) if c.value >= 0 else (r[1] * c, r[0] * c)
        return None
    if t is FloorDiv and type(e.b) is IntImm and e.b.value > 0:
        r = _relax1(e.a, x, lo, hi, ana)
        return None if r is None else (r[0] // e.b, r[1] // e.b)
    if t is FloorMod and type(e.b) is IntImm and e.b.value > 0:
        r = _relax1(e.a, x, lo, hi, ana)
        c = e.b
        if r is not None and ana.can_prove_equal(r[0] // c, r[1] // c):
            return r[0] % c, r[1] % c
        return const(0, e.dtype), const(c.value - 1, e.dtype)
    if t is Min or t is Max:
        ra, rb = _relax1(e.a, x, lo, hi, ana), _relax1(e.b, x, lo, hi, ana)
        if ra is None or rb is None:
            return None
        f = min_expr if t is Min else max_expr
        return f(ra[0], rb[0]), f(ra[1], rb[1])
    if t is Select:
        ra, rb = _relax1(e.true_value, x, lo, hi, ana), _relax1(e.false_value, x, lo, hi, ana)
        if ra is None or rb is None:
            return None
        return min_expr(ra[0], rb[0]), max_expr(ra[1], rb[1])
    if t is Cast and e.dtype.is_integer() and e.value.dtype.is_integer() and e.dtype.bits >= e.value.dtype.bits:
        r = _relax1(e.value, x, lo, hi, ana)
        return None if r is None else (Cast(e.dtype, r[0]), Cast(e.dtype, r[1]))
    return None


def relax_range(lo, hi, loops, ana):
    """Relax the inclusive pair (lo, hi) over loops [(var, min, extent)], outermost first: the
    loops are eliminated innermost first, so a loop's range may use the loops outside it."""
    for var, vmin, ext in reversed(loops):
        if lo is not None and uses_var(lo, var):
            vmax = ana.simplify(vmin + ext - 1)
            r = _relax1(lo, var, vmin, vmax, ana)
            lo = None if r is None else ana.simplify(r[0])
        if hi is not None and uses_var(hi, var):
            vmax = ana.simplify(vmin + ext - 1)
            r = _relax1(hi, var, vmin, vmax, ana)
            hi = None if r is None else ana.simplify(r[1])
    return lo, hi


def relax(expr, loops, ana):
    """(lo, hi) of an index expression over the loops [(var, min, extent)]; a side is None when
    it cannot be bounded."""
    e = ana.simplify(expr)
    return relax_range(e, e, loops, ana)


__all__ = ["relax_range", "relax"]
