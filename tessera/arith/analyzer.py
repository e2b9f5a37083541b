"""Analyzer: what is known about variables (ranges, values, constraints) and what follows from it.

    ana = Analyzer()
    ana.bind(i, Range.from_min_extent(0, 8))       # i in [0, 8)
    ana.simplify((i * 8 + j) // 8)
    with ana.constraint_scope(j < 8):               # known only inside the block
        ana.can_prove(j < 9)

`bind` accepts a Range (half-open [min, min + extent), symbolic allowed), a Python `range`, an
inclusive (lo, hi) pair (None for an unbounded side, as `const_int_bound` takes), or an expression
the variable equals (it is substituted). Everything bound or constrained inside a `scope()` is
undone when the scope exits.
"""
from __future__ import annotations

from contextlib import contextmanager

from ..errors import DTypeError, TesseraError
from ..ir import expr as E
from ..ir.expr import EQ, GE, GT, LE, LT, And, FloatImm, IntImm, Not, PrimExpr, Range, SizeVar, Var
from ..ir.functor import uses_var
from .bound import INF, NEG_INF, intersect_bound
from .canonical import Sum, sum_diff
from .simplifier import SIGNED, Simplifier, mk_bin
from .bound import var_default_bound

_MISSING = object()
_MEMO_LIMIT = 200000


class Analyzer:
    """Bounds, substitutions and constraints for variables, with simplify/prove on top of them."""

    def __init__(self):
        self.var_bounds: dict = {}   # Var -> (lo, hi) inclusive
        self.sym_ranges: dict = {}   # Var -> (min expr, max expr) when the range is symbolic
        self.subst: dict = {}        # Var -> expression it equals
        self.facts: dict = {}        # term key of a canonical sum -> (lo, hi) of its terms
        self._log: list = []         # undo log inside scopes: (table, key, old value)
        self._depth = 0              # how many scopes are open
        self._simp = Simplifier(self)

    # knowledge ------------------------------------------------------------------------------
    def _put(self, table, key, value):
        if self._depth:
            self._log.append((table, key, table.get(key, _MISSING)))
        table[key] = value

    def bind(self, var, value):
        """Record what `var` ranges over or equals (see the module docstring for the forms)."""
        if not isinstance(var, Var):
            raise TesseraError(f"Analyzer.bind needs a Var, got {var!r}")
        simp = self._simp
        if isinstance(value, Range):
            lo_e = simp.visit(value.min)
            ext = simp.visit(value.extent)
            self._bind_range(var, lo_e, _max_of(lo_e, ext, simp))
        elif isinstance(value, range):
            if value.step != 1:
                raise TesseraError(f"Analyzer.bind({var.name}): range step must be 1, got {value}")
            self._bind_bounds(var, (value.start, value.stop - 1))
        elif isinstance(value, (tuple, list)):
            if len(value) != 2:
                raise TesseraError(f"Analyzer.bind({var.name}): expected an inclusive (min, max) pair, "
                                   f"got {value!r}")
            lo, hi = value
            if isinstance(lo, PrimExpr) or isinstance(hi, PrimExpr):
                lo = simp.visit(E.convert(lo)) if lo is not None else None
                hi = simp.visit(E.convert(hi)) if hi is not None else None
                self._bind_range(var, lo, hi)
            else:
                self._bind_bounds(var, (NEG_INF if lo is None else lo, INF if hi is None else hi))
        elif isinstance(value, (PrimExpr, int, float, bool)):
            v = simp.visit(_convert_like(value, var))
            if v.dtype != var.dtype:
                raise DTypeError(f"Analyzer.bind({var.name}): variable is {var.dtype}, value is {v.dtype}")
            if v is var or uses_var(v, var):
                raise TesseraError(f"Analyzer.bind({var.name}): the value {v.script()} uses the variable itself")
            b = simp.bound(v) if (v.dtype.is_integer() or v.dtype.is_bool()) and v.dtype.lanes == 1 else None
            self._put(self.subst, var, v)
            if b is not None:
                self._put(self.var_bounds, var, b)
            self._changed()
        else:
            raise TesseraError(f"Analyzer.bind({var.name}): expected a Range, range, (min, max) pair or "
                               f"expression, got {type(value).__name__} {value!r}")

    def _bind_bounds(self, var, b):
        for x in b:
            if not isinstance(x, (int, float)) or isinstance(x, bool):
                raise TesseraError(f"Analyzer.bind({var.name}): bounds must be ints or None, got {b!r}")
        self._put(self.var_bounds, var, b)
        if self.sym_ranges.get(var) is not None:
            self._put(self.sym_ranges, var, None)
        if self.subst.get(var) is not None:
            self._put(self.subst, var, None)
        self._changed()

    def _bind_range(self, var, lo_e, hi_e):
        """var in [lo_e, hi_e] (inclusive; either may be None for unbounded)."""
        simp = self._simp
        lo = simp.bound(lo_e)[0] if lo_e is not None else NEG_INF
        hi = simp.bound(hi_e)[1] if hi_e is not None else INF
        self._put(self.var_bounds, var, (lo, hi))
        symbolic = (lo_e is not None and type(lo_e) is not IntImm) or (hi_e is not None and type(hi_e) is not IntImm)
        if symbolic and lo_e is not None and hi_e is not None and lo_e.dtype in SIGNED:
            self._put(self.sym_ranges, var, (lo_e, hi_e))
        elif self.sym_ranges.get(var) is not None:
            self._put(self.sym_ranges, var, None)
        if self.subst.get(var) is not None:
            self._put(self.subst, var, None)
        self._changed()

    def tighten(self, var, bound):
        """Intersect what is known of `var`'s range with the inclusive (lo, hi) `bound`."""
        old = self.var_bounds.get(var)
        if old is None:
            old = var_default_bound(var)
        new = intersect_bound(old, bound)
        if new != old:
            self._put(self.var_bounds, var, new)
            self._changed()

    def add_constraint(self, cond):
        """Record that the bool `cond` holds (until the enclosing scope exits)."""
        cond = self._simp.visit(E.convert(cond))
        if not cond.dtype.is_bool():
            raise DTypeError(f"a constraint must be a bool expression, got {cond.dtype} ({cond.script()})")
        if self._constrain(cond):
            self._changed()

    def _constrain(self, c) -> bool:
        t = type(c)
        if t is And:
            a = self._constrain(c.a)
            return self._constrain(c.b) or a
        if t is Var or t is SizeVar:
            self._put(self.subst, c, E.IntImm("bool", 1))
            return True
        if t is Not and type(c.a) in (Var, SizeVar):
            self._put(self.subst, c.a, E.IntImm("bool", 0))
            return True
        if t in (LT, LE, GT, GE, EQ) and c.a.dtype in SIGNED:
            simp = self._simp
            d = sum_diff(simp.to_sum(c.a), simp.to_sum(c.b))
            if not d.terms:
                return False
            k = -d.const  # d op 0  <=>  terms op k
            lo, hi = {LT: (NEG_INF, k - 1), LE: (NEG_INF, k), GT: (k + 1, INF), GE: (k, INF),
                      EQ: (k, k)}[t]
            return self._fact(d, lo, hi)
        return False

    def _fact(self, d: Sum, lo, hi) -> bool:
        """The terms of d lie in [lo, hi]."""
        if len(d.terms) == 1:
            for coef, atom in d.terms.values():
                if type(atom) in (Var, SizeVar) and self.subst.get(atom) is None:
                    if coef < 0:
                        coef, lo, hi = -coef, -hi, -lo
                    lo = lo if lo == NEG_INF else -((-lo) // coef)  # ceil
                    hi = hi if hi == INF else hi // coef
                    old = self.var_bounds.get(atom)
                    new = (lo, hi) if old is None else intersect_bound(old, (lo, hi))
                    self._put(self.var_bounds, atom, new)
                    return True
        key, nkey = d.term_key(), d.negated_term_key()
        old = self.facts.get(key)
        new = (lo, hi) if old is None else intersect_bound(old, (lo, hi))
        self._put(self.facts, key, new)
        self._put(self.facts, nkey, (-new[1], -new[0]))
        return True

    def _changed(self):
        self._simp.reset()

    @contextmanager
    def scope(self):
        """Everything bound or constrained inside the `with` block is forgotten at its end."""
        mark = len(self._log)
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            log = self._log
            if len(log) > mark:
                while len(log) > mark:
                    table, key, old = log.pop()
                    if old is _MISSING:
                        table.pop(key, None)
                    else:
                        table[key] = old
                self._changed()

    @contextmanager
    def bind_scope(self, var, value):
        """`bind(var, value)` for the duration of the `with` block (e.g. a loop body)."""
        with self.scope():
            self.bind(var, value)
            yield self

    @contextmanager
    def constraint_scope(self, cond):
        """`add_constraint(cond)` for the duration of the `with` block (e.g. an if's then-branch)."""
        with self.scope():
            self.add_constraint(cond)
            yield self

    # queries ----------------------------------------------------------------------------------
    def simplify(self, expr) -> PrimExpr:
        """The simplified expression (same dtype, same value for every binding of the variables)."""
        simp = self._simp
        if len(simp.memo) > _MEMO_LIMIT:  # a long-lived analyzer: do not hold every expression
            simp.reset()
        return simp.visit(E.convert(expr))

    def const_int_bound(self, expr) -> tuple:
        """Inclusive (min, max) of an integer expression; +-math.inf marks an unbounded side."""
        expr = E.convert(expr)
        simp = self._simp
        dt = expr.dtype
        b = simp.interval(expr)
        if dt in SIGNED and b[0] != b[1]:
            s = simp.to_sum(simp.visit(expr))
            b = intersect_bound(b, simp.sum_bound(s))
        return b

    def can_prove(self, cond) -> bool:
        """True only when `cond` holds for every value the variables can take."""
        c = self.simplify(cond)
        if not c.dtype.is_bool():
            raise DTypeError(f"can_prove needs a bool condition, got {c.dtype} ({c.script()})")
        return self._prove(c)

    def _prove(self, c) -> bool:
        t = type(c)
        if t is IntImm:
            return c.value == 1
        if t is E.Broadcast:
            return self._prove(c.value)
        if t is And:
            return self._prove(c.a) and self._prove(c.b)
        if t is E.Or:
            return self._prove(c.a) or self._prove(c.b)
        return False

    def can_prove_equal(self, a, b) -> bool:
        """True when a == b for every value of the variables (structurally, for non-integers)."""
        a, b = self.simplify(a), self.simplify(b)
        if a.dtype in SIGNED and b.dtype == a.dtype:
            simp = self._simp
            d = sum_diff(simp.to_sum(a), simp.to_sum(b))
            return not d.terms and d.const == 0
        return self._simp.key(a) == self._simp.key(b)

    def can_prove_greater_equal(self, expr, value: int) -> bool:
        return self.const_int_bound(expr)[0] >= value

    def can_prove_less(self, expr, value: int) -> bool:
        return self.const_int_bound(expr)[1] < value


def _max_of(lo_e, ext, simp):
    """The inclusive maximum lo + ext - 1 of a range, simplified."""
    one = E.IntImm(ext.dtype, 1)
    if lo_e.dtype != ext.dtype:
        lo_e, ext = E.binary_operands(lo_e, ext, "+")
        one = E.IntImm(ext.dtype, 1)
    return simp.visit(mk_bin(E.Sub, mk_bin(E.Add, lo_e, ext), one))


def _convert_like(value, var):
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, bool):
        return E.IntImm(var.dtype, int(value)) if var.dtype.is_bool() else E.convert(value)
    if isinstance(value, int) and (var.dtype.is_integer()):
        return E.IntImm(var.dtype, value)
    if isinstance(value, float) and var.dtype.is_float():
        return FloatImm(var.dtype, value)
    return E.convert(value)


# module-level convenience --------------------------------------------------------------------
def _analyzer(var_ranges):
    ana = Analyzer()
    for v, r in (var_ranges or {}).items():
        ana.bind(v, r)
    return ana


def simplify(expr, var_ranges=None) -> PrimExpr:
    """Simplify `expr`; var_ranges maps Var -> Range / range / inclusive (lo, hi) / expression."""
    return _analyzer(var_ranges).simplify(expr)


def can_prove(cond, var_ranges=None) -> bool:
    """Whether `cond` holds for every value of the variables in var_ranges."""
    return _analyzer(var_ranges).can_prove(cond)


def can_prove_equal(a, b, var_ranges=None) -> bool:
    return _analyzer(var_ranges).can_prove_equal(a, b)


__all__ = ["Analyzer", "simplify", "can_prove", "can_prove_equal"]
