"""Sizes in torch's graphs: ints, or sympy expressions of torch's symbols (a SymInt's `node.expr`),
and their factors as tessera dimensions (ints and symbol names)."""
from __future__ import annotations

import math

import numpy as np


def size_expr(x):
    """A torch size (int, SymInt, SymBool, SymFloat, a number) as an int / float / bool or a sympy
    expression of torch's symbols."""
    node = getattr(x, "node", None)
    if node is not None and hasattr(node, "expr"):
        return size_expr_of(node.expr)
    return x


def size_expr_of(e):
    """A sympy expression as an int / float / bool where it is a number, else itself."""
    if getattr(e, "is_number", False):
        if e.is_Integer:
            return int(e)
        if getattr(e, "is_Boolean", False) or e in (True, False):
            return bool(e)
        return float(e)
    if getattr(e, "is_Boolean", False) and e in (True, False):
        return bool(e)
    return e


def factors(expr):
    """The factors of a size: [int] or [symbol name], several for a product (s0 * s1 -> ['s0', 's1'],
    4 * s0 -> [4, 's0']); None for any other expression (s0 + 1, s0 // 2)."""
    if isinstance(expr, (bool, np.bool_)):
        return None
    if isinstance(expr, (int, np.integer)):
        return [int(expr)]
    if getattr(expr, "is_Integer", False):
        return [int(expr)]
    if getattr(expr, "is_Symbol", False):
        return [str(expr)]
    if getattr(expr, "is_Mul", False):
        out = []
        for a in expr.args:
            f = factors(a)
            if f is None:
                return None
            out += f
        return out
    if getattr(expr, "is_Pow", False) and expr.exp.is_Integer and int(expr.exp) > 0 and expr.base.is_Symbol:
        return [str(expr.base)] * int(expr.exp)
    return None


def size_key(fs) -> tuple:
    """A comparable key of a list of factors: (static product, sorted symbols)."""
    return math.prod(f for f in fs if isinstance(f, int)), tuple(sorted(f for f in fs if isinstance(f, str)))
