"""An index as an integer combination of variables plus the rest (`linear_form`), for matching and
relaxing affine indices."""
from __future__ import annotations

from ...ir import IntImm, Var, const
from ...ir.expr import Add, Mul, Sub
from .uses import uses_vars


class NotAffine(Exception):
    """An index that is not affine in the variables asked about (linear_form)."""


def linear_form(e, vs):
    """(coefficients {var: int}, rest) with e == sum(coef * var) + rest, where rest uses none of
    the variables vs; raises NotAffine when e is not affine in them."""
    if not uses_vars(e, vs):
        return {}, e
    t = type(e)
    if t is Var and e in vs:
        return {e: 1}, None
    if t is Add or t is Sub:
        ca, ra = linear_form(e.a, vs)
        cb, rb = linear_form(e.b, vs)
        sign = 1 if t is Add else -1
        out = dict(ca)
        for v, c in cb.items():
            out[v] = out.get(v, 0) + sign * c
        out = {v: c for v, c in out.items() if c != 0}
        if rb is None:
            rest = ra
        elif ra is None:
            rest = rb if t is Add else const(0, rb.dtype) - rb
        else:
            rest = ra + rb if t is Add else ra - rb
        return out, rest
    if t is Mul:
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if type(y) is IntImm:
                cx, rx = linear_form(x, vs)
                return {v: c * y.value for v, c in cx.items() if c * y.value != 0}, \
                    (None if rx is None else rx * y)
    raise NotAffine


__all__ = ["NotAffine", "linear_form"]
