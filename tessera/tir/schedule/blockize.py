"""blockize: wrap the computation under a loop (or a run of sibling blocks) into a new outer block.

TVM's semantics. `blockize(loop)`: the loop nest from `loop` down to its one block becomes the body
of a new block `<name>_o` whose iterators are the outer part of the old bindings. Each binding
`v = f(outer loops, inner loops)` is divided into `v = v_o * c + v_i` with `v_o` bound outside and
`v_i` inside (`i_0 * 16 + i_1` under `i_1` gives `vi_o = i_0`, `vi_i = i_1`, c = 16); a binding of
only outer loops keeps all of it outside (c = 1), one of only inner loops all of it inside. The
inner block keeps its name and reads `vi_o * 16 + vi_i`; a reduction's init moves to the outer
block as a loop nest over the inner data-parallel iterators (block `<name>_init`), since it must
run when the whole reduction index, outer part included, is at its start. This is what tensorize
matches against an intrinsic.

`blockize([b1, b2, ...])`: consecutive sibling blocks become the body of one new opaque block (no
iterators), whose read/write regions are the union of theirs.
"""
from __future__ import annotations

from ...arith import Analyzer
from ...errors import ScheduleError
from ...ir import (Block, BlockRealize, BufferStore, For, ForKind, IntImm, IterVar, Max,
                   Min, Mutator, Range, SeqStmt, Var, Visitor, const, seq, structural_equal)
from ...ir.buffer import BufferRegion
from ...ir.expr import LE, LT, And
from ...ir.functor import load_with_indices
from ..analysis import NotAffine, linear_form, uses_vars
from .handles import BlockRV, LoopRV
from .instruction import instruction_kind
from .region import fresh_block_name
from .state import child_realizes

# ---------------------------------------------------------------------------------------------
# small helpers: substitution that simplifies indices
# ---------------------------------------------------------------------------------------------


class IndexSubst(Mutator):
    """Substitute variables; simplify the indices of buffer accesses with a given Analyzer."""

    def __init__(self, vmap, ana=None):
        super().__init__()
        self.vmap, self.ana = vmap, ana

    def visit_Var(self, v):
        return self.vmap.get(v, v)

    def _indices(self, indices):
        out = [self.visit(i) for i in indices]
        if self.ana is not None:
            out = [self.ana.simplify(i) if i.dtype.lanes == 1 and i.dtype.is_integer() else i for i in out]
        return out

    def visit_BufferLoad(self, e):
        return load_with_indices(e, self._indices(e.indices))

    def visit_BufferStore(self, s):
        value = self.visit(s.value)
        idx = self._indices(s.indices)
        if value is s.value and all(a is b for a, b in zip(idx, s.indices)):
            return s
        return BufferStore(s.buffer, value, idx)


def subst_region(region: BufferRegion, sub: IndexSubst) -> BufferRegion:
    rs = []
    for r in region.region:
        lo, ext = sub.visit(r.min), sub.visit(r.extent)
        if sub.ana is not None:
            lo, ext = sub.ana.simplify(lo), sub.ana.simplify(ext)
        rs.append(Range.from_min_extent(lo, ext))
    return BufferRegion(region.buffer, rs)


def relax_region(region: BufferRegion, ranges: dict, ana: Analyzer) -> BufferRegion:
    """The region covered as the variables of `ranges` ({var: (min, extent)}) run over their ranges;
    a dimension that is not affine in them (with non-negative coefficients) becomes the whole extent."""
    vs = set(ranges)
    out = []
    for d, r in enumerate(region.region):
        if not uses_vars(r.min, vs) and not uses_vars(r.extent, vs):
            out.append(r)
            continue
        try:
            if uses_vars(r.extent, vs):
                raise NotAffine
            coefs, rest = linear_form(r.min, vs)
            if any(c < 0 for c in coefs.values()):
                raise NotAffine
            lo = rest if rest is not None else const(0, r.min.dtype)
            span = r.extent
            for v, c in coefs.items():
                vlo, vext = ranges[v]
                lo = lo + vlo * c
                span = span + (vext - 1) * c
            out.append(Range.from_min_extent(ana.simplify(lo), ana.simplify(span)))
        except NotAffine:
            out.append(Range.from_min_extent(const(0, region.buffer.shape[d].dtype), region.buffer.shape[d]))
    return BufferRegion(region.buffer, out)


def union_regions(regions, ana: Analyzer) -> list:
    """One region per buffer (in first-seen order): the bounding box of that buffer's regions."""
    by_buf: dict = {}
    order = []
    for reg in regions:
        prev = by_buf.get(reg.buffer)
        if prev is None:
            by_buf[reg.buffer] = reg
            order.append(reg.buffer)
            continue
        if structural_equal(prev, reg, map_free_vars=False):
            continue
        rs = []
        for a, b in zip(prev.region, reg.region):
            lo = ana.simplify(Min(a.min, b.min))
            hi = ana.simplify(Max(a.min + a.extent, b.min + b.extent))
            rs.append(Range.from_min_extent(lo, ana.simplify(hi - lo)))
        by_buf[reg.buffer] = BufferRegion(reg.buffer, rs)
    return [by_buf[b] for b in order]


def bind_range(ana: Analyzer, var, lo, ext):
    """ana.bind(var, [lo, lo + ext)) with the cheap integer form when both are constants, and the
    value itself for a range of one."""
    if type(lo) is IntImm and type(ext) is IntImm:
        if ext.value == 1:
            ana.bind(var, lo)
        else:
            ana.bind(var, (lo.value, lo.value + ext.value - 1))
    else:
        ana.bind(var, Range.from_min_extent(lo, ext))


def _conjuncts(e):
    if type(e) is And:
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def _is_true(e) -> bool:
    return type(e) is IntImm and e.dtype.is_bool() and e.value == 1


def _all(conds):
    out = None
    for c in conds:
        out = c if out is None else And(out, c)
    return out if out is not None else const(True)


def _int(e):
    return e.value if type(e) is IntImm else None


# ---------------------------------------------------------------------------------------------
# blockize a loop
# ---------------------------------------------------------------------------------------------
def _chain_to_block(loop: For, prim: str):
    """The loops from `loop` down to its one block (outermost first) and that BlockRealize."""
    chain = [loop]
    s = loop.body
    while True:
        t = type(s)
        if t is For:
            chain.append(s)
            s = s.body
            continue
        if t is BlockRealize:
            return chain, s
        blocks = child_realizes(loop.body)
        lname = loop.loop_var.name
        if len(blocks) != 1:
            names = ", ".join(repr(r.block.name_hint) for r in blocks) or "none"
            raise ScheduleError(f"{prim}: loop {lname!r} must hold exactly one block to be blockized, it "
                                f"holds {len(blocks)} ({names}); blockize a list of sibling blocks instead")
        what = "a sequence of statements" if t is SeqStmt else f"a {t.__name__}"
        raise ScheduleError(f"{prim}: the loops under {lname!r} must nest perfectly down to block "
                            f"{blocks[0].block.name_hint!r}, but there is {what} on the way")


def _divide(binding, iv, inner_vars, outer_loop_vars, extents, rw: Analyzer, bname):
    """Split one binding into (outer expr, inner expr, c) with binding == outer * c + inner and
    0 <= inner < c; see the module docstring. c is an int or an expression (the whole domain)."""
    uses_inner = uses_vars(binding, inner_vars)
    if not uses_inner:
        return binding, None, 1
    if not uses_vars(binding, outer_loop_vars):
        return None, binding, None  # entirely inside: the inner iterator takes the whole domain
    def why():
        return (f"blockize: the binding {binding.script()} of iterator {iv.var.name!r} of block {bname!r} mixes "
                f"loops inside and outside the blockized loop in a way that cannot be divided into an outer "
                f"part times a tile plus an inner part")
    try:
        coefs, rest = linear_form(binding, inner_vars)
    except NotAffine:
        raise ScheduleError(why()) from None
    c = 1
    for v, coef in sorted(coefs.items(), key=lambda kv: kv[1]):
        ext = extents[v]
        if coef != c or ext is None:
            raise ScheduleError(why())
        c *= ext
    inner = None
    for v, coef in sorted(coefs.items(), key=lambda kv: -kv[1]):
        term = v if coef == 1 else v * coef
        inner = term if inner is None else inner + term
    if rest is None:
        return const(0, binding.dtype), inner, c
    try:  # the usual case, an affine outer part: divide its coefficients (no prover needed)
        ocoefs, orest = linear_form(rest, outer_loop_vars)
        if (orest is None or type(orest) is IntImm) and all(x % c == 0 for x in ocoefs.values()) \
                and (orest is None or orest.value % c == 0):
            outer = None
            for v, coef in ocoefs.items():
                term = v if coef == c else v * (coef // c)
                outer = term if outer is None else outer + term
            if orest is not None and orest.value:
                outer = const(orest.value // c, binding.dtype) if outer is None else outer + orest.value // c
            return (outer if outer is not None else const(0, binding.dtype)), inner, c
    except NotAffine:
        pass
    if not rw.can_prove(rest % c == 0):
        raise ScheduleError(why() + f" (the outer part {rest.script()} is not a multiple of the tile {c})")
    return rw.simplify(rest // c), inner, c


@instruction_kind("Blockize", inputs=("target",), outputs="one", output_type=BlockRV)
def blockize(self, target, preserve_unit_iters=True):
    """Make the subtree under a loop (or a list of consecutive sibling blocks) one new block and
    return it (see the module docstring). preserve_unit_iters=False also drops the outer block's
    iterators of extent 1 (the inner block never has any: what tensorize matches is the tile)."""
    if isinstance(target, (list, tuple)):
        return _blockize_blocks(self, list(target))
    if not isinstance(target, LoopRV):
        raise ScheduleError(f"blockize: target must be a LoopRV or a list of BlockRVs, got "
                            f"{type(target).__name__} {target!r}")
    prim = "blockize"
    fname, idx, loop = self._loop(target, prim)
    chain, realize = _chain_to_block(loop, prim)
    block = realize.block
    bname = block.name_hint
    lname = loop.loop_var.name
    if block.match_buffers:
        raise ScheduleError(f"{prim}: block {bname!r} has match_buffers, which blockize does not handle")
    if not block.iter_vars:
        raise ScheduleError(f"{prim}: block {bname!r} is opaque (no iteration variables); there is nothing "
                            f"to divide into outer and inner iterators")
    inner_vars = {lp.loop_var for lp in chain}
    outer_loops = idx.loops_above(loop)
    outer_loop_vars = {lp.loop_var for lp in outer_loops}
    extents = {}
    for lp in chain:
        if uses_vars(lp.min, inner_vars | outer_loop_vars) or uses_vars(lp.extent, inner_vars | outer_loop_vars):
            raise ScheduleError(f"{prim}: the range of loop {lp.loop_var.name!r} under {lname!r} depends on "
                                f"another loop; the blockized tile would not be rectangular")
        extents[lp.loop_var] = _int(lp.extent) if _int(lp.min) == 0 else None
    for iv in block.iter_vars:
        if iv.iter_type not in ("data_par", "reduce"):
            raise ScheduleError(f"{prim}: block {bname!r} has a {iv.iter_type} iterator {iv.var.name!r}; only "
                                f"data-parallel and reduction blocks can be blockized")

    rw = Analyzer()
    for lp in outer_loops + chain:
        bind_range(rw, lp.loop_var, lp.min, lp.extent)

    # 1. divide every binding into an outer and an inner part
    outer_ivs, outer_vals, inner_ivs, inner_vals = [], [], [], []
    vmap = {}          # old iterator -> expression of the new ones
    ranges = {}        # new iterator var -> (min, extent), to simplify and relax with
    init_parts = []    # (old iterator, inner iterator or None, outer expression) of data-par iterators
    for iv, value in zip(block.iter_vars, realize.iter_values):
        outer, inner, c = _divide(value, iv, inner_vars, outer_loop_vars, extents, rw, bname)
        dom = iv.dom
        dt = iv.var.dtype
        if c is not None and c != 1 and not (type(dom.min) is IntImm and dom.min.value == 0):
            raise ScheduleError(f"{prim}: iterator {iv.var.name!r} of block {bname!r} has a domain starting at "
                                f"{dom.min.script()}; blockize divides domains that start at 0")
        vo = Var(iv.var.name + "_o", dt)
        vi = Var(iv.var.name + "_i", dt)
        if inner is None:                         # all outside: the inner iterator has extent 1
            o_dom, i_dom, o_val, i_val = dom, Range.from_min_extent(const(0, dt), const(1, dt)), outer, const(0, dt)
            keep_o, keep_i = True, False      # the inner block never keeps a unit iterator (as TVM)
            expr = vo
        elif outer is None:                       # all inside: the outer iterator has extent 1
            o_dom, i_dom, o_val, i_val = Range.from_min_extent(const(0, dt), const(1, dt)), dom, const(0, dt), inner
            keep_o, keep_i = preserve_unit_iters, True
            expr = vi
        else:
            o_ext = rw.simplify((dom.extent + (c - 1)) // c) if c != 1 else dom.extent
            o_dom = Range.from_min_extent(const(0, dt), o_ext)
            i_dom = Range.from_min_extent(const(0, dt), const(c, dt))
            o_val, i_val = outer, inner
            keep_o, keep_i = True, True
            expr = vo * c + vi
        if not keep_o:
            expr = vi
        if not keep_i:
            expr = vo
        if keep_o:
            outer_ivs.append(IterVar(o_dom, vo, iv.iter_type))
            outer_vals.append(o_val)
            ranges[vo] = (o_dom.min, o_dom.extent)
        if keep_i:
            inner_ivs.append(IterVar(i_dom, vi, iv.iter_type))
            inner_vals.append(i_val)
            ranges[vi] = (i_dom.min, i_dom.extent)
        vmap[iv.var] = expr
        if iv.iter_type == "data_par":
            init_parts.append((iv, vi if keep_i else None, i_dom, i_val))

    # 2. the predicate: conditions on outer loops go to the outer block, on inner loops stay inside;
    #    a mixed one must be `binding < bound` of one iterator, rewritten over the new iterators
    #    (and, when the block has an init, a bound on a data-parallel iterator guards the init too)
    outer_pred, inner_pred, init_bounds = [], [], []
    at_realize = IndexSubst({v: val for v, val in zip([x.var for x in inner_ivs], inner_vals)})
    for cond in ([] if _is_true(realize.predicate) else _conjuncts(realize.predicate)):
        if not uses_vars(cond, inner_vars):
            outer_pred.append(cond)
            continue
        bound_of = None
        for iv, value in zip(block.iter_vars, realize.iter_values):
            if type(cond) in (LT, LE) and not uses_vars(cond.b, inner_vars | outer_loop_vars) \
                    and structural_equal(rw.simplify(cond.a), rw.simplify(value)):
                bound_of = iv
                break
        if bound_of is not None:
            # over the outer iterators and the inner loops (the inner block's own iterators
            # are not defined where its predicate is evaluated)
            inner_pred.append(type(cond)(rw.simplify(at_realize.visit(vmap[bound_of.var])), cond.b))
            if bound_of.iter_type == "data_par":
                init_bounds.append((vmap[bound_of.var], type(cond), cond.b))
        elif not uses_vars(cond, outer_loop_vars) and block.init is None:
            inner_pred.append(cond)
        else:
            raise ScheduleError(f"{prim}: the predicate {cond.script()} of block {bname!r} is not a bound on one of "
                                f"its iterators" + (" and the block's init must move out" if block.init is not None
                                                    else f", and it mixes loops inside and outside {lname!r}"))

    # 3. the inner block: the old one over the inner iterators, its indices simplified
    ana = rw
    inner_set = {iv.var for iv in inner_ivs}
    for v, (lo, ext) in ranges.items():
        if v in inner_set:           # the tile's iterators stay variables (tensorize matches them)
            ana.bind(v, Range.from_min_extent(lo, ext))
        else:                        # a unit outer iterator is its start: indices simplify without it
            bind_range(ana, v, lo, ext)
    sub = IndexSubst(vmap, ana)
    body = sub.visit(block.body)
    reads = [subst_region(r, sub) for r in block.reads]
    writes = [subst_region(r, sub) for r in block.writes]
    init = None
    if block.init is not None:
        red = {iv.var for iv in block.iter_vars if iv.iter_type == "reduce"}
        if uses_vars(block.init, red):
            raise ScheduleError(f"{prim}: the init of block {bname!r} uses a reduction iterator; it cannot "
                                f"move to the outer block")
        init = _blockized_init(self, idx, block, init_parts, vmap, ana, init_bounds)
    inner_block = block.replace(iter_vars=tuple(inner_ivs), reads=tuple(reads), writes=tuple(writes),
                                body=body, init=None)
    inner_realize = BlockRealize(inner_vals, _all(inner_pred), inner_block)
    new_body = inner_realize
    for lp in reversed(chain):
        new_body = lp.replace(body=new_body)

    # 4. the outer block: regions relaxed over the inner iterators
    inner_ranges = {iv.var: (iv.dom.min, iv.dom.extent) for iv in inner_ivs}
    o_reads = union_regions([relax_region(r, inner_ranges, ana) for r in reads], ana)
    o_writes = union_regions([relax_region(r, inner_ranges, ana) for r in writes], ana)
    oname = fresh_block_name(idx, bname + "_o")
    outer_block = Block(outer_ivs, o_reads, o_writes, oname, new_body, init=init)
    outer_realize = BlockRealize(outer_vals, _all(outer_pred), outer_block)
    self._replace(fname, {loop: outer_realize})
    return self._new_block_rv(fname, oname)


def _blockized_init(self, idx, block, init_parts, vmap, ana, init_bounds):
    """The outer block's init: loops over the inner data-parallel iterators around `<name>_init`."""
    loops, ivs, vals = [], [], []
    imap = {}
    for iv, vi, i_dom, i_val in init_parts:
        if vi is None:
            continue
        # the init loop is named after the inner loop that drove the iterator (`i_1_init`)
        lv_name = i_val.name if type(i_val) is Var else vi.name.lstrip("v") or vi.name
        lv = Var(lv_name + "_init", vi.dtype)
        bv = Var(vi.name + "_init", vi.dtype)
        loops.append((lv, i_dom))
        ivs.append(IterVar(i_dom, bv, "data_par"))
        vals.append(lv)
        imap[vi] = bv
    # the init's indices: old iterator -> new expression, then inner iterator -> init iterator
    sub = IndexSubst({k: IndexSubst(imap).visit(v) for k, v in vmap.items()}, ana)
    with ana.scope():
        for (lv, dom), iv in zip(loops, ivs):
            bind_range(ana, iv.var, dom.min, dom.extent)
        body = sub.visit(block.init)
        writes = [subst_region(r, sub) for r in block.writes]
    if not ivs:
        return body
    name = fresh_block_name(idx, block.name_hint + "_init")
    reads = _point_reads(body)
    # the tiles may overhang the domain (a split that does not divide): init only inside it
    lmap = {iv.var: lv for (lv, _), iv in zip(loops, ivs)}
    at_loops = IndexSubst({bv: lmap[bv] for bv in lmap})
    conds = [cls(ana.simplify(at_loops.visit(IndexSubst(imap).visit(e))), b) for e, cls, b in init_bounds]
    init_realize = BlockRealize(vals, _all(conds), Block(ivs, reads, writes, name, body))
    stmt = init_realize
    for lv, dom in reversed(loops):
        stmt = For(lv, dom.min, dom.extent, ForKind.SERIAL, stmt)
    return stmt


def _point_reads(stmt) -> list:
    """Point regions of the buffer loads in a statement (the reads of a generated init block)."""
    out = []

    class _Loads(Visitor):
        def visit_BufferLoad(self, e):
            out.append(BufferRegion(e.buffer, [Range.from_min_extent(i, 1) for i in e.indices]))
            self.generic_visit(e)

    _Loads().visit(stmt.value if isinstance(stmt, BufferStore) else stmt)
    return out


# ---------------------------------------------------------------------------------------------
# blockize a list of sibling blocks
# ---------------------------------------------------------------------------------------------
def _blockize_blocks(self, rvs):
    prim = "blockize"
    if not rvs:
        raise ScheduleError(f"{prim}: give a loop or a non-empty list of blocks")
    fname, realizes = None, []
    for rv in rvs:
        if not isinstance(rv, BlockRV):
            raise ScheduleError(f"{prim}: a list target must hold BlockRVs only, got {type(rv).__name__} {rv!r}")
        f, idx, r = self._block(rv, prim, func=fname)
        fname = f
        if any(r is x for x in realizes):
            raise ScheduleError(f"{prim}: block {r.block.name_hint!r} is given twice")
        realizes.append(r)
    names = [r.block.name_hint for r in realizes]
    parent = idx.parent_of(realizes[0])
    if len(realizes) == 1:
        items = realizes
    else:
        if type(parent) is not SeqStmt or any(idx.parent_of(r) is not parent for r in realizes):
            raise ScheduleError(f"{prim}: blocks {', '.join(map(repr, names))} are not siblings in one "
                                f"sequence of statements")
        pos = sorted(next(k for k, s in enumerate(parent.seq) if s is r) for r in realizes)
        if pos != list(range(pos[0], pos[0] + len(pos))):
            raise ScheduleError(f"{prim}: blocks {', '.join(map(repr, names))} are not consecutive statements")
        items = [parent.seq[k] for k in pos]
    ana = Analyzer()
    for lp in idx.loops_above(realizes[0]):
        bind_range(ana, lp.loop_var, lp.min, lp.extent)
    reads, writes = [], []
    for r in items:
        sub = IndexSubst({iv.var: v for iv, v in zip(r.block.iter_vars, r.iter_values)}, ana)
        reads += [subst_region(x, sub) for x in r.block.reads]
        writes += [subst_region(x, sub) for x in r.block.writes]
    base = names[0] + "_o" if len(items) == 1 else "_".join(x.block.name_hint for x in items) + "_o"
    oname = fresh_block_name(idx, base)
    outer = BlockRealize([], True, Block([], union_regions(reads, ana), union_regions(writes, ana), oname,
                                         seq(*items)))
    repl = {items[0]: outer}
    for r in items[1:]:
        repl[r] = None
    self._replace(fname, repl)
    return self._new_block_rv(fname, oname)


__all__ = ["NotAffine", "blockize", "linear_form", "relax_region", "union_regions"]
