"""tensorize: replace a block (or the loop nest under a loop) by a tensor intrinsic's impl.

`sch.tensorize(loop_or_block, intrin_name)`. A loop is blockized first (blockize.py); the block's
body (its loop nest and inner block) is then matched against the intrinsic's desc structurally:
the loops one by one (extents; desc's symbolic extents such as `K` match any extent, the same one
everywhere), the block's iterators (kinds and domains), the computation up to renaming, and the
buffers: each desc buffer stands for one real buffer of the same dtype, accessed at indices that
differ from desc's by the same offset everywhere (an offset that depends only on the outer
iterators). A desc buffer of rank r matches the last r dimensions of a higher-rank buffer; the
leading dimensions are then fixed per tile. On a match, the block's body becomes impl with its
buffers bound to those regions (see tensor_intrin/intrin.py); a mismatch raises ScheduleError
naming the part that differs. The block keeps its iterators, regions and init (a reduction's
initial value stays outside the intrinsic).
"""
from __future__ import annotations

from ...arith import Analyzer
from ...errors import ScheduleError, TesseraError
from ...ir import (
    AttrStmt,
    Block,
    BlockRealize,
    BufferLoad,
    BufferStore,
    Evaluate,
    FloatImm,
    For,
    IntImm,
    LetStmt,
    Mutator,
    SeqStmt,
    StringImm,
    Var,
    const,
)
from ...ir.node import Node
from ..tensor_intrin import TensorIntrin
from ..tensor_intrin.intrin import pattern_of
from ..analysis import uses_vars
from .blockize import IndexSubst, bind_range
from .instruction import instruction_kind


class _Mismatch(Exception):
    pass


def _show(x) -> str:
    try:
        return x.script() if isinstance(x, Node) else repr(x)
    except Exception:  # noqa: BLE001 - a description only
        return type(x).__name__


def _access(buf, indices) -> str:
    return f"{buf.name}[{', '.join(_show(i) for i in indices)}]"


def _row_major(shape):
    strides = []
    acc = None
    for d in reversed(shape):
        strides.append(acc if acc is not None else const(1, d.dtype))
        acc = d if acc is None else acc * d
    return list(reversed(strides))


class _Matcher:
    """Structural matching of desc's pattern (left) against the block's body (right)."""

    def __init__(self, intrin, ana: Analyzer):
        self.intrin = intrin
        self.ana = ana
        self.vmap: dict = {}       # desc Var -> target expression
        self.pattern = set()       # desc variables that match any expression (shape extents)
        self.bufs: dict = {}       # desc Buffer -> target Buffer
        self.offsets: dict = {}    # desc Buffer -> [offset per target dimension]
        self.inner = set()         # target variables defined inside the matched body
        self.where = []            # what is being compared (for messages)
        self._sub = None

    def fail(self, what, d, t):
        ctx = " > ".join(self.where)
        raise _Mismatch(f"{ctx + ': ' if ctx else ''}{what}: the intrinsic has {_show(d)}, the block has {_show(t)}")

    # statements ---------------------------------------------------------------------------
    def stmt(self, d, t):
        td, tt = type(d), type(t)
        if td is not tt:
            self.fail("the statements differ", d, t)
        if td is For:
            self.where.append(f"loop {t.loop_var.name!r} (the intrinsic's {d.loop_var.name!r})")
            self.expr(d.min, t.min, "the loop's start")
            self.expr(d.extent, t.extent, "the loop's extent")
            self.vmap[d.loop_var] = t.loop_var
            self.inner.add(t.loop_var)
            self.where.pop()
            return self.stmt(d.body, t.body)
        if td is SeqStmt:
            if len(d.seq) != len(t.seq):
                self.fail("the number of statements differs", len(d.seq), len(t.seq))
            for x, y in zip(d.seq, t.seq):
                self.stmt(x, y)
            return
        if td is BlockRealize:
            return self.realize(d, t)
        if td is BufferStore:
            self.access(d.buffer, d.indices, t.buffer, t.indices, "the store")
            return self.expr(d.value, t.value, "the stored value")
        if td is Evaluate:
            return self.expr(d.value, t.value, "the evaluated expression")
        if td is LetStmt:
            self.expr(d.value, t.value, "a let value")
            self.vmap[d.var] = t.var
            self.inner.add(t.var)
            return self.stmt(d.body, t.body)
        self.fail(f"a {td.__name__} cannot be matched", d, t)

    def realize(self, d, t):
        db, tb = d.block, t.block
        self.where.append(f"block {tb.name_hint!r}")
        if not (type(t.predicate) is IntImm and t.predicate.value == 1):
            raise _Mismatch(f"block {tb.name_hint!r} runs under the predicate {t.predicate.script()} (a split "
                            f"that does not divide its loop); an intrinsic computes whole tiles, so make the "
                            f"tile sizes divide the extents")
        for k, (a, av, b, bv) in enumerate(self._pair_iterators(d, t)):
            if b is None:       # a unit iterator of the tile that blockize left out: it is 0
                self.expr(a.dom.min, const(0, a.var.dtype), f"the domain start of iterator {a.var.name!r}")
                self.expr(a.dom.extent, const(1, a.var.dtype), f"the domain of the intrinsic's iterator "
                                                               f"{a.var.name!r} (absent from the block: extent 1)")
                self.expr(av, const(0, av.dtype), f"the binding of the intrinsic's iterator {a.var.name!r}")
                self.vmap[a.var] = const(0, a.var.dtype)
                continue
            if a.iter_type != b.iter_type:
                self.fail(f"iterator {k} ({b.var.name}) is of another kind", a.iter_type, b.iter_type)
            self.expr(a.dom.min, b.dom.min, f"the domain start of iterator {b.var.name!r}")
            self.expr(a.dom.extent, b.dom.extent, f"the domain of iterator {b.var.name!r}")
            self.vmap[a.var] = b.var
            self.inner.add(b.var)
            self.expr(av, bv, f"the binding of iterator {b.var.name!r}")
        if (db.init is None) != (tb.init is None):
            if tb.init is not None:
                raise _Mismatch(f"block {tb.name_hint!r} has an init (the reduction's initial value) but the "
                                f"intrinsic's block has none: blockize a loop inside the reduction loops (or "
                                f"tensorize the loop, which blockizes it), so the init moves to the outer block")
            self.fail("the init differs", db.init, None)
        if db.init is not None:
            self.where.append("init")
            self.stmt(db.init, tb.init)
            self.where.pop()
        if tb.alloc_buffers or tb.match_buffers:
            raise _Mismatch(f"block {tb.name_hint!r} allocates buffers or has match_buffers; the intrinsic's "
                            f"block does not")
        self.stmt(db.body, tb.body)
        self.where.pop()

    def _pair_iterators(self, d, t):
        """(desc iterator, its binding, block iterator or None, its binding): in order, where a
        desc iterator with no counterpart of its kind left in the block is an extent-1 one that
        blockize dropped (its loops of extent 1 then bind it to 0)."""
        dv, tv = list(zip(d.block.iter_vars, d.iter_values)), list(zip(t.block.iter_vars, t.iter_values))
        if len(dv) < len(tv):
            self.fail("the number of block iterators differs", len(dv), len(tv))
        out, k = [], 0
        for n, (a, av) in enumerate(dv):
            left_d = len(dv) - n
            left_t = len(tv) - k
            if k < len(tv) and (tv[k][0].iter_type == a.iter_type or left_d == left_t):
                out.append((a, av, tv[k][0], tv[k][1]))
                k += 1
            elif left_d > left_t:
                out.append((a, av, None, None))
            else:
                self.fail("the number of block iterators differs", len(dv), len(tv))
        return out

    # expressions --------------------------------------------------------------------------
    def expr(self, d, t, what="an expression"):
        if isinstance(d, Var):
            m = self.vmap.get(d)
            if m is None:
                if d in self.pattern:
                    if uses_vars(t, self.inner):
                        self.fail(f"{what} must not depend on the loops being tensorized", d, t)
                    self.vmap[d] = t
                    return
                self.fail(f"{what}: the intrinsic uses a variable it does not define", d, t)
            if m is t:
                return
            if isinstance(m, Var) or isinstance(t, Var):
                if not self.ana.can_prove_equal(m, t):
                    self.fail(what, d, t)
                return
            if not self.ana.can_prove_equal(m, t):
                self.fail(what, d, t)
            return
        td = type(d)
        if td is not type(t):
            self.fail(what, d, t)
        if td is IntImm or td is FloatImm or td is StringImm:
            if d.dtype != t.dtype or d.value != t.value:
                self.fail(what, d, t)
            return
        if td is BufferLoad:
            return self.access(d.buffer, d.indices, t.buffer, t.indices, what)
        if getattr(d, "dtype", None) != getattr(t, "dtype", None):
            self.fail(f"{what} (dtype {getattr(d, 'dtype', '?')} vs {getattr(t, 'dtype', '?')})", d, t)
        for f in d._fields:
            if f == "dtype":
                continue
            x, y = getattr(d, f), getattr(t, f)
            if isinstance(x, Node):
                self.expr(x, y, what)
            elif isinstance(x, tuple):
                if len(x) != len(y):
                    self.fail(what, d, t)
                for a, b in zip(x, y):
                    if isinstance(a, Node):
                        self.expr(a, b, what)
                    elif a != b:
                        self.fail(what, d, t)
            elif x != y:
                self.fail(what, d, t)

    def mapped(self, e):
        if self._sub is None:
            self._sub = IndexSubst(self.vmap)   # one mutator (its dispatch cache) for the whole match
        return self._sub.visit(e)

    def access(self, dbuf, didx, tbuf, tidx, what):
        name = f"buffer {dbuf.name!r} of the intrinsic"
        if dbuf.dtype != tbuf.dtype:
            self.fail(f"{what}: {name} is {dbuf.dtype} but the block's {tbuf.name!r} is {tbuf.dtype}", dbuf, tbuf)
        prev = self.bufs.get(dbuf)
        if prev is not None and prev is not tbuf:
            self.fail(f"{what}: {name} stands for {prev.name!r} elsewhere but here for {tbuf.name!r}", dbuf, tbuf)
        nd, nt = len(didx), len(tidx)
        if nt < nd:
            self.fail(f"{what}: {name} has {nd} dimensions, the block's {tbuf.name!r} only {nt}", dbuf, tbuf)
        lead = nt - nd
        offs = []
        for p in range(nt):
            if p < lead:
                off = self.ana.simplify(tidx[p])
            else:
                off = self.ana.simplify(tidx[p] - self.mapped(didx[p - lead]))
            if uses_vars(off, self.inner):
                axis = "a leading dimension" if p < lead else f"dimension {p - lead} of {dbuf.name!r}"
                raise _Mismatch(f"{' > '.join(self.where)}: {what}: {_access(tbuf, tidx)} does not follow "
                                f"the intrinsic's access {_access(dbuf, didx)} "
                                f"({axis}: index {_show(tidx[p])} is not the intrinsic's index plus an "
                                f"offset fixed per tile)")
            offs.append(off)
        if prev is None:
            self.bufs[dbuf] = tbuf
            self.offsets[dbuf] = offs
            return
        for p, (a, b) in enumerate(zip(self.offsets[dbuf], offs)):
            if not self.ana.can_prove_equal(a, b):
                raise _Mismatch(f"{' > '.join(self.where)}: {what}: {tbuf.name!r} is accessed at two "
                                f"different offsets ({_show(a)} and {_show(b)} in dimension {p}) where the "
                                f"intrinsic accesses one buffer {dbuf.name!r} at one place")


class _ImplRewriter(Mutator):
    """impl's body with its buffers replaced by the matched regions of the real buffers."""

    def __init__(self, bufmap, vmap, ana):
        super().__init__()
        self.bufmap = bufmap   # impl Buffer -> (real Buffer, offsets per real dimension)
        self.vmap = dict(vmap)
        self.ana = ana

    def visit_Var(self, v):
        return self.vmap.get(v, v)

    def _remap(self, buf, indices):
        hit = self.bufmap.get(buf)
        if hit is None:
            return buf, indices
        real, offs = hit
        lead = len(offs) - len(indices)
        out = list(offs[:lead])
        for off, i in zip(offs[lead:], indices):
            out.append(self.ana.simplify(off + i))
        return real, out

    def visit_BufferLoad(self, e):
        buf, idx = self._remap(e.buffer, [self.visit(i) for i in e.indices])
        return BufferLoad(buf, idx)

    def visit_BufferStore(self, s):
        buf, idx = self._remap(s.buffer, [self.visit(i) for i in s.indices])
        return BufferStore(buf, self.visit(s.value), idx)

    def visit_For(self, s):
        v = Var(s.loop_var.name, s.loop_var.dtype)  # every loop gets its own variable
        self.vmap[s.loop_var] = v
        return For(v, self.visit(s.min), self.visit(s.extent), s.kind, self.visit(s.body), s.thread_binding,
                   s.annotations)

    def visit_LetStmt(self, s):
        v = Var(s.var.name, s.var.dtype)
        value = self.visit(s.value)
        self.vmap[s.var] = v
        return LetStmt(v, value, self.visit(s.body))

    def visit_BlockRealize(self, s):
        raise TesseraError("a tensor intrinsic's impl must not contain blocks (other than its root)")


def _bind_impl(intrin, m: _Matcher, ana: Analyzer, bname: str):
    """{impl Buffer: (real Buffer, offsets)} and the impl variables' values, checking strides."""
    desc, impl = intrin.desc, intrin.impl
    bufmap, vmap = {}, {}
    for k, (dp, ip) in enumerate(zip(desc.params, impl.params)):
        real = m.bufs.get(dp)
        if real is None:
            raise _Mismatch(f"the intrinsic's buffer {dp.name!r} is not accessed by block {bname!r}")
        offs = m.offsets[dp]
        nd = dp.ndim
        lead = real.ndim - nd
        dshape = [ana.simplify(m.mapped(s)) for s in dp.shape]
        for x, y in zip(ip.shape, dshape):
            if isinstance(x, Var):
                vmap.setdefault(x, y)
        rstrides = list(real.strides) if real.strides else _row_major(real.shape)
        tail = [ana.simplify(s) for s in rstrides[lead:]]
        if ip.strides:
            for d, (want, have) in enumerate(zip(ip.strides, tail)):
                if isinstance(want, Var):
                    prev = vmap.setdefault(want, have)
                    if prev is not have and not ana.can_prove_equal(prev, have):
                        raise _Mismatch(f"the intrinsic needs strides {want.name} of {ip.name!r} to be one value, "
                                        f"but {real.name!r} gives {_show(prev)} and {_show(have)}")
                elif not ana.can_prove_equal(want, have):
                    raise _Mismatch(f"the intrinsic needs {ip.name!r} with stride {_show(want)} in dimension "
                                    f"{d}, but buffer {real.name!r} has stride {_show(have)} there")
        else:
            compact = _row_major(dshape)
            for d, (want, have) in enumerate(zip(compact, tail)):
                if not ana.can_prove_equal(want, have):
                    raise _Mismatch(f"the intrinsic needs {ip.name!r} as a compact {[_show(s) for s in dshape]} "
                                    f"block, but buffer {real.name!r} has stride {_show(have)} in dimension "
                                    f"{lead + d} (the block needs {_show(want)})")
        if isinstance(ip.elem_offset, Var):
            flat = None
            for off, st in zip(offs, rstrides):
                term = off * st
                flat = term if flat is None else flat + term
            vmap[ip.elem_offset] = ana.simplify(flat)
        bufmap[ip] = (real, offs)
    return pattern_of(impl, "impl", intrin.name), bufmap, vmap


@instruction_kind("Tensorize", inputs=("block_or_loop",))
def tensorize(self, block_or_loop, tensor_intrin, preserve_unit_iters=True):
    """Replace the block (or the loop nest under the loop, blockized first) by the registered tensor
    intrinsic `tensor_intrin`; see the module docstring for what must match."""
    prim = "tensorize"
    if not isinstance(tensor_intrin, str):
        raise ScheduleError(f"{prim}: tensor_intrin is the name of a registered intrinsic, got {tensor_intrin!r}")
    try:
        intrin = TensorIntrin.get(tensor_intrin)
    except TesseraError as e:
        raise ScheduleError(f"{prim}: {e}") from None
    fname, idx, node = self._block_or_loop(block_or_loop, prim)
    if type(node) is For:
        rv = self.blockize(block_or_loop, preserve_unit_iters=preserve_unit_iters)
        fname, idx, node = self._block(rv, prim)
    realize = node
    block = realize.block
    bname = block.name_hint
    ana = Analyzer()
    for lp in idx.loops_above(realize):
        bind_range(ana, lp.loop_var, lp.min, lp.extent)
    for iv in block.iter_vars:
        bind_range(ana, iv.var, iv.dom.min, iv.dom.extent)
    m = _Matcher(intrin, ana)
    m.pattern = intrin.pattern_vars
    try:
        m.stmt(pattern_of(intrin.desc, "desc", intrin.name), block.body)
        body, bufmap, vmap = _bind_impl(intrin, m, ana, bname)
    except _Mismatch as e:
        raise ScheduleError(f"{prim}: block {bname!r} does not match tensor intrinsic {intrin.name!r}: {e}") from None
    # the impl vars that are desc's extents take their matched values
    for iv_, dv in zip([x for p in intrin.impl.params for x in p.shape], [x for p in intrin.desc.params
                                                                          for x in p.shape]):
        if isinstance(iv_, Var) and isinstance(dv, Var) and dv in m.vmap:
            vmap.setdefault(iv_, m.vmap[dv])
    try:
        new_body = _ImplRewriter(bufmap, vmap, ana).visit(body)
    except TesseraError as e:
        raise ScheduleError(f"{prim}: tensor intrinsic {intrin.name!r}: {e}") from None
    if intrin.c_source is not None:
        new_body = AttrStmt(StringImm(",".join(intrin.c_functions)), "pragma_import_c", StringImm(intrin.c_source),
                            new_body)
    new_body = AttrStmt(StringImm(intrin.name), "tensor_intrin", StringImm(",".join(intrin.features)), new_body)
    # the loops and blocks under the block are gone
    gone = []

    def collect(s):
        t = type(s)
        if t is For:
            gone.append(("l", s.loop_var))
            collect(s.body)
        elif t is BlockRealize:
            gone.append(("b", s.block.name_hint))
            if s.block.init is not None:
                collect(s.block.init)
            collect(s.block.body)
        elif t is SeqStmt:
            for x in s.seq:
                collect(x)
        elif hasattr(s, "body") and isinstance(getattr(s, "body"), Node) and not isinstance(s, Block):
            collect(s.body)
    collect(block.body)
    self._replace(fname, {block: block.replace(body=new_body)})
    why = f"it was replaced by tensor intrinsic {intrin.name!r} (tensorize of block {bname!r})"
    for kind, key in gone:
        if kind == "l":
            self._retire_loop(fname, key, why)
        else:
            self._retire_block(fname, key, why)
    return None


__all__ = ["tensorize"]
