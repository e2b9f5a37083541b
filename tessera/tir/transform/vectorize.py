"""vectorize_loop: turn `For(kind="vectorized")` loops into vector code (Ramp, Broadcast, vector dtypes).

As in TVM, marking a loop vectorized asserts that its iterations are independent. A loop with a
constant extent whose body is straight-line code (stores, lets, sequences, ifs whose condition
does not depend on the loop, asserts: a check of every lane) becomes vector statements: the loop
variable is a Ramp, expressions that do not depend on it stay scalar (broadcast where they meet
vectors), loads with vector indices are vector loads (a contiguous one has a Ramp(base, 1, lanes)
index; others are gathers).

A loop of symbolic extent becomes a serial loop over whole vectors of the most lanes the hint
allows, then a scalar loop over the rest (extent % lanes iterations).

Vectors have a power-of-two number of lanes, at most the hint (by default one SIMD register of
`vector_bits` for the widest element type the loop touches). A longer loop becomes an outer serial
loop over vectors; a remainder is vectorized the same way with fewer lanes, down to one scalar
iteration. A loop that cannot be vectorized (a store not indexed by the loop var, a condition or
if_then_else depending on it, inner loops, allocations, unknown calls) stays a vectorized For,
which codegen emits as `#pragma omp simd`.
"""
from __future__ import annotations

from ...errors import TesseraError
from ...ir import (Add, And, AssertStmt, BinaryOp, Broadcast, BufferLoad, BufferStore, Call, Cast, CmpOp,
                   Evaluate, FloatImm, For, IfThenElse, IntImm, Let, LetStmt, Mul, Not, Or, PrimFunc,
                   Ramp, Select, SeqStmt, StringImm, Sub, Var, Visitor, seq, substitute)
from ._stmt_mutator import StmtMutator

# Calls that apply elementwise, so a vector call is the vector of scalar calls.
ELEMENTWISE_CALLS = frozenset({
    "exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "cbrt",
    "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh",
    "atanh", "sigmoid", "erf", "abs", "fabs", "floor", "ceil", "round", "nearbyint", "trunc",
    "power", "pow", "fmod", "fma", "copysign", "hypot", "isnan", "isinf", "isfinite",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left", "shift_right",
    "popcount", "clz", "fast_exp", "fast_tanh", "fast_erf", "fmax", "fmin",
})


def vectorize_loop(func: PrimFunc, lanes_hint: int | None = None, vector_bits: int = 256) -> PrimFunc:
    """`func` with its vectorized loops turned into vector code.

    lanes_hint: the most lanes a vector may have (default: vector_bits / widest element bits,
    i.e. 8 for float32 with 256-bit registers); it is rounded down to a power of two.
    """
    if lanes_hint is not None and (not isinstance(lanes_hint, int) or lanes_hint < 1):
        raise TesseraError(f"vectorize_loop: lanes_hint must be a positive int, got {lanes_hint!r}")
    if not isinstance(vector_bits, int) or vector_bits < 8:
        raise TesseraError(f"vectorize_loop: vector_bits must be an int >= 8, got {vector_bits!r}")
    body = _LoopVectorizer(lanes_hint, vector_bits).visit(func.body)
    return func if body is func.body else func.with_body(body)


class _NotVectorizable(Exception):
    pass


class _LoopVectorizer(StmtMutator):
    def __init__(self, lanes_hint, vector_bits):
        super().__init__()
        self.lanes_hint, self.vector_bits = lanes_hint, vector_bits

    def visit_For(self, loop):
        loop = self.generic_visit(loop)  # inner loops first
        if loop.kind != "vectorized":
            return loop
        hint = self.lanes_hint or max(1, self.vector_bits // _widest_bits(loop.body))
        if not isinstance(loop.extent, IntImm):
            try:
                return _vectorize_symbolic(loop, hint)
            except _NotVectorizable:
                return loop
        if loop.extent.value < 1:
            return loop
        try:
            return _vectorize(loop, hint)
        except _NotVectorizable:
            return loop


def _vectorize(loop: For, hint: int):
    extent = loop.extent.value
    lanes = 1 << (min(hint, extent).bit_length() - 1)
    if lanes == 1:  # one scalar iteration (a remainder of one, or a hint of 1 with extent 1)
        if extent == 1:
            return substitute(loop.body, {loop.loop_var: loop.min})
        raise _NotVectorizable
    count, tail = divmod(extent, lanes)
    if count == 1:
        main = _BodyVectorizer(loop.loop_var, Ramp(loop.min, 1, lanes)).stmt(loop.body)
    else:
        outer = Var(loop.loop_var.name + "_o", loop.loop_var.dtype)
        base = _plus(loop.min, outer * lanes)
        body = _BodyVectorizer(loop.loop_var, Ramp(base, 1, lanes)).stmt(loop.body)
        main = For(outer, IntImm(outer.dtype, 0), IntImm(outer.dtype, count), "serial", body,
                   annotations=loop.annotations)
    if not tail:
        return main
    rest = loop.replace(min=_plus(loop.min, IntImm(loop.min.dtype, count * lanes)),
                        extent=IntImm(loop.extent.dtype, tail))
    return seq(main, _vectorize(rest, hint))


def _vectorize_symbolic(loop: For, hint: int):
    """A loop of symbolic extent: a serial loop over whole vectors of `hint` lanes (a power of two),
    then the remaining extent % lanes iterations as a scalar loop."""
    lanes = 1 << (hint.bit_length() - 1)
    if lanes < 2:
        raise _NotVectorizable
    var, dt = loop.loop_var, loop.extent.dtype
    outer = Var(var.name + "_o", var.dtype)
    body = _BodyVectorizer(var, Ramp(_plus(loop.min, outer * lanes), 1, lanes)).stmt(loop.body)
    count = loop.extent // IntImm(dt, lanes)
    main = For(outer, IntImm(outer.dtype, 0), count, "serial", body, annotations=loop.annotations)
    done = count * IntImm(dt, lanes)
    rest = loop.replace(min=_plus(loop.min, done), extent=loop.extent - done, kind="serial")
    return seq(main, rest)


class _Bits(Visitor):
    def __init__(self):
        super().__init__()
        self.bits = 0

    def visit_BufferLoad(self, n):
        self.bits = max(self.bits, n.buffer.dtype.bits if not n.buffer.dtype.is_bool() else 8)
        self.generic_visit(n)

    visit_BufferStore = visit_BufferLoad


def _widest_bits(stmt) -> int:
    """Bits of the widest element type the statement loads or stores (32 when it touches none)."""
    v = _Bits()
    v.visit(stmt)
    return v.bits or 32


class _BodyVectorizer:
    """Rewrites a loop body for all lanes at once; raises _NotVectorizable where it cannot."""

    def __init__(self, var: Var, ramp: Ramp):
        self.var, self.ramp, self.lanes = var, ramp, ramp.lanes
        self.lets = {}  # let var of the body -> its replacement (fresh, vector if it depends on var)

    # statements --------------------------------------------------------------------------
    def stmt(self, s):
        t = type(s)
        if t is BufferStore:
            if s.buffer.dtype.lanes != 1 or s.value.dtype.lanes != 1:
                raise _NotVectorizable
            indices = [self.expr(i) for i in s.indices]
            if all(i.dtype.lanes == 1 for i in indices):  # same element every iteration
                raise _NotVectorizable
            return BufferStore(s.buffer, self.expr(s.value), indices)
        if t is SeqStmt:
            return SeqStmt([self.stmt(x) for x in s.seq])
        if t is LetStmt:
            value = self.expr(s.value)
            var = Var(s.var.name, value.dtype)
            self.lets[s.var] = var
            return LetStmt(var, value, self.stmt(s.body))
        if t is IfThenElse:
            cond = self.expr(s.condition)
            if cond.dtype.lanes != 1:
                raise _NotVectorizable
            other = self.stmt(s.else_case) if s.else_case is not None else None
            return IfThenElse(cond, self.stmt(s.then_case), other)
        if t is AssertStmt:   # a check of every lane at once (codegen reports the first failing lane)
            cond, args = self.expr(s.condition), [self.expr(a) for a in s.args]
            if cond.dtype.lanes == 1 and any(a.dtype.lanes != 1 for a in args):
                raise _NotVectorizable
            return AssertStmt(cond, s.message, self.stmt(s.body), args)
        if t is Evaluate and isinstance(s.value, (IntImm, FloatImm)):
            return s
        raise _NotVectorizable

    # expressions -------------------------------------------------------------------------
    def expr(self, e):
        """The vector form of e, or e itself (scalar) when it does not depend on the loop var."""
        if e.dtype.lanes != 1:
            raise _NotVectorizable
        t = type(e)
        if t is Var or isinstance(e, Var):
            if e is self.var:
                return self.ramp
            return self.lets.get(e, e)
        if t is IntImm or t is FloatImm or t is StringImm:
            return e
        if isinstance(e, BinaryOp) or isinstance(e, CmpOp):
            a, b = self.expr(e.a), self.expr(e.b)
            if a is e.a and b is e.b:
                return e
            if a.dtype.lanes == 1 and b.dtype.lanes == 1:
                return e.replace(a=a, b=b)
            r = _ramp_arith(t, a, b)
            return r if r is not None else t(a, b)
        if t is And or t is Or:
            a, b = self.expr(e.a), self.expr(e.b)
            return e if a is e.a and b is e.b else t(a, b)
        if t is Not:
            a = self.expr(e.a)
            return e if a is e.a else Not(a)
        if t is BufferLoad:
            if e.buffer.dtype.lanes != 1:
                raise _NotVectorizable
            indices = [self.expr(i) for i in e.indices]
            if all(a is b for a, b in zip(indices, e.indices)):
                return e
            return BufferLoad(e.buffer, indices)
        if t is Cast:
            v = self.expr(e.value)
            if v is e.value:
                return e
            return Cast(e.dtype.with_lanes(v.dtype.lanes), v)
        if t is Select:
            c, a, b = self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value)
            if c is e.condition and a is e.true_value and b is e.false_value:
                return e
            if max(c.dtype.lanes, a.dtype.lanes, b.dtype.lanes) == 1:
                return Select(c, a, b)
            return Select(c, self.broadcast(a), self.broadcast(b))
        if t is Call:
            args = [self.expr(a) for a in e.args]
            if all(a is b for a, b in zip(args, e.args)):
                return e
            if all(a.dtype.lanes == 1 for a in args):  # only let vars renamed
                return Call(e.dtype, e.op, args)
            if e.op == "if_then_else" and args[0].dtype.lanes == 1:
                # a condition the same for every lane: still one branch evaluated (the other may read
                # out of bounds), now a vector
                return Call(e.dtype.with_lanes(self.lanes), e.op, [args[0]] + [self.broadcast(a) for a in args[1:]])
            if e.op not in ELEMENTWISE_CALLS:  # if_then_else of a lane's condition, extern calls: keep the loop
                raise _NotVectorizable
            return Call(e.dtype.with_lanes(self.lanes), e.op, [self.broadcast(a) for a in args])
        if t is Let:
            value = self.expr(e.value)
            var = Var(e.var.name, value.dtype)
            self.lets[e.var] = var
            return Let(var, value, self.expr(e.body))
        raise _NotVectorizable  # Ramp/Broadcast/Reduce inside: nested vectors are not handled

    def broadcast(self, e):
        return e if e.dtype.lanes != 1 else Broadcast(e, self.lanes)


def _ramp_arith(t, a, b):
    """a (op) b kept as one Ramp where it is affine (index arithmetic), else None."""
    ra, rb = isinstance(a, Ramp), isinstance(b, Ramp)
    sa, sb = a.dtype.lanes == 1, b.dtype.lanes == 1
    if t is Add:
        if ra and sb:
            return Ramp(_plus(a.base, b), a.stride, a.lanes)
        if sa and rb:
            return Ramp(_plus(a, b.base), b.stride, b.lanes)
        if ra and rb:
            return Ramp(a.base + b.base, a.stride + b.stride, a.lanes)
    elif t is Sub:
        if ra and sb:
            return Ramp(a.base - b, a.stride, a.lanes)
        if sa and rb:
            return Ramp(a - b.base, -b.stride, b.lanes)
        if ra and rb:
            return Ramp(a.base - b.base, a.stride - b.stride, a.lanes)
    elif t is Mul:
        if ra and sb:
            return Ramp(a.base * b, a.stride * b, a.lanes)
        if sa and rb:
            return Ramp(a * b.base, a * b.stride, b.lanes)
    return None


def _plus(a, b):
    """a + b, without the `+ 0` a Ramp over a loop starting at 0 would leave."""
    if isinstance(b, IntImm) and b.value == 0:
        return a
    if isinstance(a, IntImm) and a.value == 0:
        return b
    return a + b
