"""Canonical form of signed integer index expressions: a sum of coefficient * atom plus a constant.

Atoms are variables, *splits* and opaque subterms (min/max, loads, products of non-constants...).
A split is TVM's SplitExpr: ((x % upper) // lower) of a canonical sum x, with upper possibly
infinite, so `x // 8` and `x % 8` are splits of the same x. Collecting like terms then gives the
identities that make split/fuse indices come out clean:

    (x // 8) * 8 + x % 8      ->  x            (split(x, 8, inf) * 8 + split(x, 1, 8))
    (i * 8 + j) // 8          ->  i            when 0 <= j < 8 (bounds from the analyzer)

All functions here take a `ctx` (the Simplifier) only to ask for bounds of sums.
"""
from __future__ import annotations

from math import gcd, inf

from ..ir.expr import Add, FloorDiv, FloorMod, IntImm, Mul, Sub
from ..ir.node import new_node, set_field
from .bound import dtype_range


class Overflow(Exception):
    """A folded constant does not fit its dtype: the caller keeps the expression as written."""


_INTS: dict = {}


def mk_int(dtype, value: int) -> IntImm:
    """An IntImm without the constructor's checks (shared for common values); raises Overflow."""
    key = (dtype, value)
    n = _INTS.get(key)
    if n is None:
        lo, hi = dtype_range(dtype)
        if not lo <= value <= hi:
            raise Overflow(value)
        n = new_node(IntImm)
        set_field(n, "dtype", dtype)
        set_field(n, "value", value)
        if len(_INTS) < 65536:
            _INTS[key] = n
    return n


def mk_bin(cls, a, b):
    """A binary arithmetic node of two operands of one dtype (no promotion, no folding)."""
    n = new_node(cls)
    set_field(n, "dtype", a.dtype)
    set_field(n, "a", a)
    set_field(n, "b", b)
    return n


class Split:
    """The atom ((x % upper) // lower) of the canonical sum x (upper may be inf: x // lower)."""

    __slots__ = ("x", "lower", "upper", "key", "expr", "bound")

    def __init__(self, x: "Sum", lower: int, upper):
        self.x, self.lower, self.upper = x, lower, upper
        self.key = ("split", x.key(), lower, upper)
        self.expr = None
        self.bound = None  # (generation, lo, hi)


class Sum:
    """sum(coef * atom) + const of one signed integer dtype; `terms` maps a key to [coef, atom].

    Terms keep their order of first appearance, which is what makes the printed order stable.
    A Sum is built by one owner and then treated as immutable (its expr/bound/key are cached).
    """

    __slots__ = ("dtype", "terms", "const", "expr", "bound", "_key", "_tkey")

    def __init__(self, dtype, const: int = 0):
        self.dtype = dtype
        self.terms = {}
        self.const = const
        self.expr = None
        self.bound = None
        self._key = None
        self._tkey = None

    def add(self, key, atom, coef: int):
        t = self.terms.get(key)
        if t is None:
            self.terms[key] = [coef, atom]
        else:
            t[0] += coef

    def add_sum(self, other: "Sum", scale: int):
        terms = self.terms
        for k, (c, a) in other.terms.items():
            t = terms.get(k)
            if t is None:
                terms[k] = [c * scale, a]
            else:
                t[0] += c * scale
        self.const += other.const * scale

    def key(self):
        """A hashable key equal for equal sums (used to key splits of this sum)."""
        k = self._key
        if k is None:
            t = self.terms
            if len(t) == 1:
                for tk, v in t.items():
                    k = (tk, v[0], self.const)
            else:
                k = (frozenset((tk, v[0]) for tk, v in t.items()), self.const)
            self._key = k
        return k

    def term_key(self):
        """A key of the non-constant part (used for facts from constraints)."""
        k = self._tkey
        if k is None:
            k = self._tkey = frozenset((tk, v[0]) for tk, v in self.terms.items())
        return k

    def negated_term_key(self):
        return frozenset((tk, -v[0]) for tk, v in self.terms.items())

    def single(self):
        """(coef, atom) when the sum is coef * atom with no constant, else None."""
        if len(self.terms) == 1 and self.const == 0:
            for v in self.terms.values():
                return v
        return None

    def copy(self) -> "Sum":
        s = Sum(self.dtype, self.const)
        s.terms = {k: [c, a] for k, (c, a) in self.terms.items()}
        return s


def sum_diff(a: Sum, b: Sum) -> Sum:
    """a - b, normalized."""
    d = a.copy()
    d.add_sum(b, -1)
    return normalize(d)


def normalize(s: Sum) -> Sum:
    """Drop zero terms and merge splits of one sum into larger ones (fuse followed by split)."""
    terms = s.terms
    nsplit = 0
    zero = False
    for t in terms.values():
        if t[0] == 0:
            zero = True
        elif type(t[1]) is Split:
            nsplit += 1
    if zero:
        s.terms = terms = {k: t for k, t in terms.items() if t[0] != 0}
    if nsplit > 1 or (nsplit and len(terms) > 1):
        while _merge_once(s):
            pass
    return s


def _merge_once(s: Sum) -> bool:
    """One merge of split terms; True when something changed."""
    terms = s.terms
    groups = None
    for k, (c, a) in terms.items():
        if type(a) is Split:
            if c == 0:
                continue
            if a.upper == inf and a.lower > 1:
                # x - (x // b) * b  ->  x % b  (x a single atom with coefficient 1)
                one = a.x.single()
                if one is not None and one[0] == 1:
                    xk = a.x.key()[0]
                    t = terms.get(xk)
                    if t is not None and c == -t[0] * a.lower:
                        s0 = t[0]
                        del terms[k]
                        del terms[xk]
                        ns = Split(a.x, 1, a.lower)
                        s.add(ns.key, ns, s0)
                        _drop_zeros(s)
                        return True
            if groups is None:
                groups = {}
            groups.setdefault(a.x.key(), []).append((k, c, a))
    if groups is None:
        return False
    for g in groups.values():
        if len(g) < 2:
            continue
        for k1, c1, a1 in g:
            b = a1.upper
            if b == inf or b % a1.lower:
                continue
            for k2, c2, a2 in g:
                if a2 is a1 or a2.lower != b or c2 * a1.lower != c1 * b:
                    continue
                if a2.upper != inf and a2.upper % b:
                    continue
                # ((x % b) // a) * c1 + ((x % c) // b) * c1 * b / a  ==  ((x % c) // a) * c1
                del terms[k1]
                del terms[k2]
                if a1.lower == 1 and a2.upper == inf:
                    s.add_sum(a1.x, c1)
                else:
                    ns = Split(a1.x, a1.lower, a2.upper)
                    s.add(ns.key, ns, c1)
                _drop_zeros(s)
                return True
    return False


def _drop_zeros(s: Sum):
    if any(t[0] == 0 for t in s.terms.values()):
        s.terms = {k: t for k, t in s.terms.items() if t[0] != 0}


# ---------------------------------------------------------------------------------------------
# division by a positive constant
# ---------------------------------------------------------------------------------------------
def _scaled_down(r: Sum, g: int) -> Sum:
    out = Sum(r.dtype, r.const // g)
    out.terms = {k: [c // g, a] for k, (c, a) in r.terms.items()}
    return out


def _gcd_of(r: Sum, c: int) -> int:
    g = gcd(c, r.const)
    if g == 1:
        return 1
    for t in r.terms.values():
        g = gcd(g, t[0])
        if g == 1:
            return 1
    return g


def _one_block(ctx, r: Sum, c: int):
    """k when every value of r lies in [k*c, (k+1)*c), else None."""
    lo, hi = ctx.sum_bound(r)
    if lo == -inf or hi == inf:
        return None
    k = lo // c
    return k if hi // c == k else None


def _coprime_block(ctx, r: Sum, c: int):
    """(r / g, c / g, g, k): r and c divided by g, the gcd of c and r's coefficients and constant (the
    quotient r // c stays, the remainder r % c is g times the new one), and _one_block's k of the two."""
    g = _gcd_of(r, c)
    if g > 1:
        r = _scaled_down(r, g)
        c //= g
    return r, c, g, _one_block(ctx, r, c)


def floordiv_sum(ctx, s: Sum, c: int) -> Sum:
    """floor(s / c) for a constant c >= 1, as a Sum.

    Terms whose coefficients are multiples of c (and a constant that is one) are divided
    exactly; the rest r gives floor(r / c), which is a constant when r's range lies in one block
    [k*c, (k+1)*c) and a split atom otherwise.
    """
    if c == 1:
        return s
    one = s.single()
    if one is not None and one[0] == 1 and type(one[1]) is not Split:  # x // c: the common case
        k = _one_block(ctx, s, c)
        out = Sum(s.dtype, k if k is not None else 0)
        if k is None:
            ns = Split(s, c, inf)
            out.terms[ns.key] = [1, ns]
        return out
    q = Sum(s.dtype)
    r = Sum(s.dtype)
    for k, (coef, atom) in s.terms.items():
        if coef % c == 0:
            q.terms[k] = [coef // c, atom]
        else:
            r.terms[k] = [coef, atom]
    if s.const % c == 0:
        q.const = s.const // c
    else:
        r.const = s.const
    if not r.terms:
        q.const += r.const // c
        return q
    if not q.terms and q.const == 0:
        r = s  # nothing divided out: keep s (and its cached key)
    r, c, _, k = _coprime_block(ctx, r, c)
    if k is not None:
        q.const += k
        return q
    one = r.single()
    if one is not None and one[0] == 1 and type(one[1]) is Split:
        sp = one[1]  # ((x % u) // l) // c == (x % u) // (l * c)
        ns = Split(sp.x, sp.lower * c, sp.upper)
    else:
        ns = Split(r, c, inf)
    q.add(ns.key, ns, 1)
    return q


def floormod_sum(ctx, s: Sum, c: int) -> Sum:
    """s mod c (floor semantics) for a constant c >= 1, as a Sum.

    Multiples of c drop out; the rest r is r itself shifted by k*c when its range lies in one
    block, and a split atom (x % c) otherwise.
    """
    if c == 1:
        return Sum(s.dtype)
    one = s.single()
    if one is not None and one[0] == 1 and type(one[1]) is not Split:  # x % c: the common case
        k = _one_block(ctx, s, c)
        if k == 0:
            return s
        if k is not None:
            out = s.copy()
            out.const -= k * c
            return out
        ns = Split(s, 1, c)
        out = Sum(s.dtype)
        out.terms[ns.key] = [1, ns]
        return out
    r = Sum(s.dtype)
    for k, (coef, atom) in s.terms.items():
        if coef % c:
            r.terms[k] = [coef, atom]
    r.const = 0 if s.const % c == 0 else s.const
    if not r.terms:
        r.const %= c
        return r
    if len(r.terms) == len(s.terms) and r.const == s.const:
        r = s
    r, c, g, k = _coprime_block(ctx, r, c)
    if k is not None:
        if k == 0 and g == 1:
            return r
        out = Sum(r.dtype, (r.const - k * c) * g)
        out.terms = {key: [coef * g, a] for key, (coef, a) in r.terms.items()}
        return out
    one = r.single()
    if (one is not None and one[0] == 1 and type(one[1]) is Split
            and (one[1].upper == inf or one[1].upper % (one[1].lower * c) == 0)):
        sp = one[1]  # ((x % u) // l) % c == (x % (l * c)) // l  when l * c divides u
        ns = Split(sp.x, sp.lower, sp.lower * c)
    else:
        ns = Split(r, 1, c)
    out = Sum(r.dtype)
    out.add(ns.key, ns, g)
    return out


# ---------------------------------------------------------------------------------------------
# back to expressions
# ---------------------------------------------------------------------------------------------
def _order(t):
    c = t[0]
    return (c < 0, -c if c > 0 else c)


def to_expr(s: Sum):
    """The expression of a sum: positive terms by decreasing coefficient, then the negative ones,
    then the constant (`i*8 + j - 1`). Raises Overflow when a constant does not fit the dtype."""
    e = s.expr
    if e is not None:
        return e
    dtype = s.dtype
    items = list(s.terms.values())
    const = s.const
    if not items:
        e = mk_int(dtype, const)
    else:
        if len(items) > 1:
            items.sort(key=_order)
        e = None
        first_c = items[0][0]
        if first_c < 0 and const > 0:  # 10 - x rather than 0 - x + 10
            e = mk_int(dtype, const)
            const = 0
        for c, atom in items:
            ae = atom_expr(atom)
            if e is None:
                if c == 1:
                    e = ae
                elif c == -1:
                    e = mk_bin(Sub, mk_int(dtype, 0), ae)
                else:
                    e = mk_bin(Mul, ae, mk_int(dtype, c))
            elif c > 0:
                e = mk_bin(Add, e, ae if c == 1 else mk_bin(Mul, ae, mk_int(dtype, c)))
            else:
                e = mk_bin(Sub, e, ae if c == -1 else mk_bin(Mul, ae, mk_int(dtype, -c)))
        if const > 0:
            e = mk_bin(Add, e, mk_int(dtype, const))
        elif const < 0:
            e = mk_bin(Sub, e, mk_int(dtype, -const))
    s.expr = e
    return e


def atom_expr(atom):
    if type(atom) is not Split:
        return atom
    e = atom.expr
    if e is None:
        x = to_expr(atom.x)
        dtype = atom.x.dtype
        if atom.upper == inf:
            e = mk_bin(FloorDiv, x, mk_int(dtype, atom.lower))
        else:
            e = mk_bin(FloorMod, x, mk_int(dtype, atom.upper))
            if atom.lower != 1:
                e = mk_bin(FloorDiv, e, mk_int(dtype, atom.lower))
        atom.expr = e
    return e
