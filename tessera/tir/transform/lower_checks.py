"""lower_checks: run-time checks written inside expressions become asserts that leave the kernel.

An op writes `check_range(value, lo, hi, message, *extra)` where a value read at run time must lie in
[lo, hi) (an index from a tensor: ONNX Runtime refuses an out-of-range one); the call evaluates to
value. With report=True (a backend whose kernels return a status: C) the statement holding the call
becomes

    let t = value
    assert lo <= t < hi, message(t, lo, hi, extra...)
    statement (with t for the call)

and each such pair moves up out of every loop (and let) directly around it whose variable it does not
use and whose body does not write what it reads: a gather checks each index once, in the loop over
the indices, and the row copy below it stays vector code. codegen prints the assert as a failure
(`return` of a status with the message; inside a parallel loop recorded under `omp critical` and
returned after it). A hoisted check also runs where the loop it left has no iteration, as ONNX
Runtime checks every index whatever the output's size; its value must be safe to evaluate there (a
load at the index tensor's own position, as every op writes it).

With report=False (OpenCL and CUDA kernels have no status to return) the call becomes its value: the
op's clamp around it keeps every access inside the tensor, and out-of-range indices are not reported.
"""
from __future__ import annotations

import re

from ...errors import TesseraError
from ...ir import (AssertStmt, BufferLoad, BufferStore, Call, For, Let, LetStmt, PrimExpr, PrimFunc, SeqStmt,
                   StringImm, Var, collect_vars, post_order_visit, structural_equal)
from ...ir import expr as E
from ...ir.functor import Mutator
from ._stmt_mutator import StmtMutator

CHECK_RANGE = "tsr.check_range"
_PLACEHOLDER = re.compile(r"\{(\d+)\}")


def check_range(value, lo, hi, message: str, *extra) -> Call:
    """`value`, checked at run time to lie in [lo, hi) (lo and hi converted to value's dtype).

    message: the error's text; `{0}` is the value, `{1}` lo, `{2}` hi, `{3}`... the extra
    expressions (scalars known where the check runs, e.g. a ROI's number)."""
    value = E.convert(value)
    if value.dtype.lanes != 1:
        raise TesseraError(f"check_range: value {value.script()} must be a scalar")
    if "{}" in message:
        raise TesseraError(f"check_range: message {message!r} numbers its placeholders ({{0}}, {{1}}, ...)")
    bounds = [_as(b, value.dtype) for b in (lo, hi)]
    return Call(value.dtype, CHECK_RANGE, [value, *bounds, StringImm(message), *[E.convert(x) for x in extra]])


def _as(x, dtype):
    x = E.convert(x)
    if isinstance(x, E.IntImm) and dtype.is_float():
        return E.const(float(x.value), dtype)
    return x if x.dtype == dtype else E.cast(x, dtype)


def lower_checks(func: PrimFunc, report: bool = True) -> PrimFunc:
    """`func` with its check_range calls lowered (see the module docstring)."""
    body = _Lower(report).visit(func.body)
    return func if body is func.body else func.with_body(body)


class _Calls(Mutator):
    """Replaces check calls in one statement's expressions by fresh Vars (report) or their values."""

    def __init__(self, report):
        super().__init__()
        self.report, self.found = report, []

    def visit_Call(self, e):
        e = self.generic_visit(e)
        if e.op != CHECK_RANGE:
            return e
        if not self.report:
            return e.args[0]
        for t, seen in self.found:      # one check for each distinct call (an index used twice)
            if seen is e or structural_equal(seen, e):
                return t
        t = Var("checked", e.dtype)
        self.found.append((t, e))
        return t


class _Lower(StmtMutator):
    def __init__(self, report):
        super().__init__()
        self.report = report
        self.checks: set = set()   # the Vars of the lets this pass made (a check is `let t; assert`)

    def generic_visit(self, s):
        s = super().generic_visit(s)          # inner statements first
        t = type(s)
        if t is SeqStmt:
            return s
        if t is For or t is LetStmt:
            s = self.hoist(s)
        return self.extract(s)

    # a statement's own expressions -> lets and asserts around it -------------------------------
    def extract(self, s):
        calls = _Calls(self.report)
        changes = {}
        for f in s._fields:
            v = getattr(s, f)
            if isinstance(v, PrimExpr):
                nv = calls.visit(v)
            elif isinstance(v, tuple) and any(isinstance(x, PrimExpr) for x in v):
                nv = tuple(calls.visit(x) if isinstance(x, PrimExpr) else x for x in v)
                nv = v if all(a is b for a, b in zip(nv, v)) else nv
            else:
                continue
            if nv is not v:
                changes[f] = nv
        if not changes:
            return s
        s = s.replace(**changes)
        if calls.found:
            _refuse_let_bound(s, calls.found)
        for var, call in reversed(calls.found):
            s = self.check(var, call, s)
        return s

    def check(self, var, call, body):
        value, lo, hi, message, *extra = call.args
        args, order = [var, lo, hi, *extra], []

        def arg(m):
            k = int(m.group(1))
            if k >= len(args):
                raise TesseraError(f"check_range: message {message.value!r} names {{{k}}}; the check has "
                                   f"{len(args)} values")
            order.append(args[k])
            return "{}"

        text = _PLACEHOLDER.sub(arg, message.value)
        self.checks.add(var)
        return LetStmt(var, value, AssertStmt(E.And(lo <= var, var < hi), text, body, order))

    # checks directly under a loop or let that they do not depend on move above it ---------------
    def hoist(self, s):
        chain, inner = [], s.body
        while type(inner) is LetStmt and inner.var in self.checks and type(inner.body) is AssertStmt:
            chain.append(inner)
            inner = inner.body.body
        if not chain:
            return s
        bound = s.loop_var if type(s) is For else s.var
        written = _written(s.body) if type(s) is For else set()
        if type(s) is For and type(s.extent) is E.IntImm and s.extent.value < 1:
            return s
        up, stay = [], []
        for let in chain:
            used = collect_vars(let.value) + collect_vars(let.body.condition) + \
                [v for a in let.body.args for v in collect_vars(a)]
            reads = _loaded(let.value)
            (stay if bound in used or reads & written else up).append(let)
        if not up:
            return s
        return _rechain(up, s.replace(body=_rechain(stay, inner)))


def _rechain(checks, body):
    for let in reversed(checks):
        body = let.replace(body=let.body.replace(body=body))
    return body


def _written(stmt) -> set:
    out = set()
    post_order_visit(stmt, lambda n: out.add(n.buffer) if type(n) is BufferStore else None)
    return out


def _loaded(expr) -> set:
    out = set()
    post_order_visit(expr, lambda n: out.add(n.buffer) if type(n) is BufferLoad else None)
    return out


def _refuse_let_bound(s, found):
    """A check's value must not use a variable that a let expression of the same statement binds:
    the check moves in front of the statement, out of that let's scope."""
    bound = set()
    for f in s._fields:
        v = getattr(s, f)
        for x in (v if isinstance(v, tuple) else (v,)):
            if isinstance(x, PrimExpr):
                post_order_visit(x, lambda n: bound.add(n.var) if type(n) is Let else None)
    for _, call in found:
        if bound & set(collect_vars(call)):
            raise TesseraError(f"lower_checks: the check {call.script()} uses a variable bound by a let "
                               f"expression of its statement; bind it with a LetStmt instead")
