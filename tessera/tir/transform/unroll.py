"""unroll_loop: copy out unrolled loops with their variable replaced by each constant value.

`For(kind="unrolled")` with a constant extent <= max_extent is unrolled; a longer or symbolic one
stays (codegen emits `#pragma GCC unroll`). A For annotated `pragma_auto_unroll_max_step = N`
(TVM's auto-unroll) also unrolls every serial loop with a constant extent inside it, itself
included, whose total steps (extent times the statements its body executes per iteration) are
at most N; with `pragma_unroll_explicit = 0` on the same loop those loops are not copied but
marked unrolled, which codegen emits as `#pragma GCC unroll`. Each copy gets fresh variables/buffers for what the body defines (loops, lets,
allocations), so no name is defined twice in one scope of the generated code.
"""
from __future__ import annotations

import math

from ...errors import TesseraError
from ...ir import (Allocate, BlockRealize, Buffer, For, IfThenElse, IntImm, Let, LetStmt, Mutator,
                   PrimFunc, SeqStmt, Var, const, seq)

AUTO_UNROLL_KEY = "pragma_auto_unroll_max_step"
EXPLICIT_KEY = "pragma_unroll_explicit"


def unroll_loop(func: PrimFunc, max_extent: int = 64) -> PrimFunc:
    """`func` with its unrolled loops (and auto-unroll regions) copied out."""
    if not isinstance(max_extent, int) or max_extent < 0:
        raise TesseraError(f"unroll_loop: max_extent must be an int >= 0, got {max_extent!r}")
    body, _ = _Unroller(max_extent).stmt(func.body, 0)
    return func if body is func.body else func.with_body(body)


class _Unroller:
    def __init__(self, max_extent):
        self.max_extent = max_extent

    def stmt(self, s, auto):
        """(rewritten s, steps it executes: leaf statements run, inf when symbolic)."""
        t = type(s)
        if t is For:
            return self.loop(s, auto)
        if t is SeqStmt:
            items, steps = [], 0
            for x in s.seq:
                nx, n = self.stmt(x, auto)
                items.append(nx)
                steps += n
            same = all(a is b for a, b in zip(items, s.seq))
            return (s if same else seq(*items)), steps
        if t is IfThenElse:
            then, n = self.stmt(s.then_case, auto)
            other, m = self.stmt(s.else_case, auto) if s.else_case is not None else (None, 0)
            same = then is s.then_case and other is s.else_case
            return (s if same else s.replace(then_case=then, else_case=other)), n + m
        if t is BlockRealize:
            raise TesseraError(f"unroll_loop: block {s.block.name_hint!r} is still in the function; "
                               f"run lower_blocks first")
        body = getattr(s, "body", None)
        if body is None:
            return s, 1  # a store or an evaluate
        nb, n = self.stmt(body, auto)
        return (s if nb is body else s.replace(body=nb)), n

    def loop(self, loop: For, auto):
        """auto: None, or (max steps, explicit) of the enclosing auto-unroll region."""
        mark = loop.annotations.get(AUTO_UNROLL_KEY)
        if mark is not None:
            auto = (_auto_max(mark, loop), _explicit(loop.annotations.get(EXPLICIT_KEY, 1), loop))
        body, steps = self.stmt(loop.body, auto)
        if body is not loop.body:
            loop = loop.replace(body=body)
        if not isinstance(loop.extent, IntImm):
            return loop, math.inf
        extent = loop.extent.value
        total = steps * extent if extent > 0 else 0
        if loop.kind == "unrolled" and extent <= self.max_extent:
            return _unroll(loop), total
        if loop.kind == "serial" and auto and auto[0] and total <= auto[0]:
            return (_unroll(loop) if auto[1] else loop.replace(kind="unrolled")), total
        return loop, total


def _explicit(mark, loop) -> bool:
    value = mark.value if isinstance(mark, IntImm) else mark
    if not isinstance(value, int) or value not in (0, 1):
        raise TesseraError(f"loop {loop.loop_var.name!r}: annotation {EXPLICIT_KEY} must be 0 or 1, "
                           f"got {mark!r}")
    return bool(value)


def _auto_max(mark, loop) -> int:
    value = mark.value if isinstance(mark, IntImm) else mark
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TesseraError(f"loop {loop.loop_var.name!r}: annotation {AUTO_UNROLL_KEY} must be an "
                           f"int >= 0, got {mark!r}")
    return value


def _unroll(loop: For):
    var, lo = loop.loop_var, loop.min
    copies = []
    for k in range(loop.extent.value):
        value = const(lo.value + k, var.dtype) if isinstance(lo, IntImm) else lo + k if k else lo
        copies.append(_FreshCopy({var: value}).visit(loop.body))
    return seq(*copies)


class _FreshCopy(Mutator):
    """A copy of a statement with vars substituted and every variable/buffer it defines renewed."""

    def __init__(self, vmap):
        super().__init__()
        self.vmap = vmap
        self.bufs = {}

    def visit_Var(self, v):
        return self.vmap.get(v, v)

    def fresh(self, v: Var) -> Var:
        nv = Var(v.name, v.dtype)
        self.vmap[v] = nv
        return nv

    def visit_For(self, s):
        var = self.fresh(s.loop_var)
        return s.replace(loop_var=var, min=self.visit(s.min), extent=self.visit(s.extent),
                         body=self.visit(s.body))

    def visit_LetStmt(self, s):
        value = self.visit(s.value)
        return LetStmt(self.fresh(s.var), value, self.visit(s.body))

    def visit_Let(self, e):
        value = self.visit(e.value)
        return Let(self.fresh(e.var), value, self.visit(e.body))

    def visit_Allocate(self, s):
        b = s.buffer
        nb = Buffer(tuple(self.visit(x) for x in b.shape), b.dtype, b.name,
                    strides=tuple(self.visit(x) for x in b.strides), elem_offset=self.visit(b.elem_offset),
                    scope=b.scope, data_alignment=b.data_alignment)
        self.bufs[b] = nb
        return Allocate(nb, self.visit(s.body))

    def visit_BufferLoad(self, e):
        node = self.generic_visit(e)
        nb = self.bufs.get(e.buffer)
        return node if nb is None else node.replace(buffer=nb)

    def visit_BufferStore(self, s):
        node = self.generic_visit(s)
        nb = self.bufs.get(s.buffer)
        return node if nb is None else node.replace(buffer=nb)
