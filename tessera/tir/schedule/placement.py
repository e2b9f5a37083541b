"""Placement primitives: compute_at, reverse_compute_at, compute_inline, reverse_compute_inline.

compute_at(block, loop) moves a producer under a loop of its consumers and regenerates its loops
(`ax0, ax1, ...`) over exactly the region the consumers read in one iteration of the loop: the
consumers' read regions are relaxed over the loops between them and `loop` (region.relax, exact
for split/fuse indices), each of the producer's iteration variables is solved from its write
index (a * v + b) and clipped to its domain; a clipped side that the loop extents cannot absorb
becomes a predicate (`T.where`). reverse_compute_at moves a consumer under a loop of its
producers, computing the elements whose inputs the producers wrote in that iteration; it needs
the written region to be a dense box and every consumer element to read one element per
dimension, and refuses loops that carry a producer's reduction (the consumer would read partial
sums).

compute_inline substitutes an injective producer `B[v0, v1, ...] = f(v)` into every load of B;
reverse_compute_inline folds a consumer `C[g(v)] = h(B[v0, v1, ...])` into the store of B's only
producer. Both remove the inlined block, its emptied loops and the intermediate buffer.
`compute_at_problem` / `compute_inline_problem` run the same checks without changing anything
(locations.can_compute_at / can_compute_inline use them, so sample_compute_location proposes only
locations these primitives accept).
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir import (
    BlockRealize,
    BufferLoad,
    BufferStore,
    Call,
    FloorDiv,
    FloorMod,
    For,
    ForKind,
    IntImm,
    Range,
    Var,
    all_of,
    cast,
    collect_vars,
    const,
    floordiv,
    max_expr,
    min_expr,
    structural_equal,
    substitute,
)
from ...ir.functor import Mutator, load_with_indices, post_order_visit
from ..analysis import edit, shape_var_analyzer, uses_var, uses_vars
from .analysis import (
    complete_or_reduction,
    consumers,
    is_output_block,
    producers,
)
from .instruction import instruction_kind
from .region import (
    analyzer_for,
    block_box,
    body_items,
    ceildiv,
    dedup_regions,
    insert_into,
    is_one,
    item_position,
    loops_in,
    point_region,
    removal_root,
    solve_linear,
    union_bounds,
)
from .handles import INLINE_MARK, ROOT_MARK
from .state import child_realizes, realizes_under


# ---------------------------------------------------------------------------------------------
# compute_at / reverse_compute_at
# ---------------------------------------------------------------------------------------------
def _loops_between(idx, node, loop) -> list:
    """The loops around node that `loop` encloses (outermost first)."""
    return [lp for lp in idx.loops_above(node) if idx.encloses(loop, lp)]


def _loops_from(idx, loop) -> list:
    """`loop` and the loops around it in its block scope, outermost first."""
    return idx.loops_above(loop) + [loop]


def _reduce_loops(realize) -> set:
    """Loop variables the block's reduction iterators are bound to."""
    out = set()
    for iv, v in zip(realize.block.iter_vars, realize.iter_values):
        if iv.iter_type == "reduce":
            out.update(collect_vars(v))
    return out


class _AtPlan:
    __slots__ = ("pos", "nest", "realize", "loop", "remove", "removed_loops")


def _insertion(idx, prim, name, lname, loop, prods, cons, index):
    """The position in loop's body where the block goes: (last producer, first consumer]."""
    items = body_items(loop.body)
    prod_pos = [item_position(idx, loop.body, loop, p) for p in prods if idx.encloses(loop, p)]
    cons_pos = [item_position(idx, loop.body, loop, c) for c in cons if idx.encloses(loop, c)]
    lo = max(prod_pos) + 1 if prod_pos else 0
    hi = min(cons_pos) if cons_pos else len(items)
    if lo > hi:
        raise ScheduleError(f"{prim}: under loop {lname!r} a producer of block {name!r} comes after one of "
                            f"its consumers; there is no place for {name!r} between them")
    if isinstance(index, bool) or not isinstance(index, int):
        raise ScheduleError(f"{prim}: index must be an int (-1: last valid place, -2: first), got {index!r}")
    if index == -1:
        return hi
    if index == -2:
        return lo
    if not lo <= index <= hi:
        raise ScheduleError(f"{prim}: index {index} is not a valid place for block {name!r} under loop "
                            f"{lname!r}: it must go after its producers and before its consumers, i.e. "
                            f"at an index in [{lo}, {hi}] (or -1 / -2)")
    return index


def _check_dense_writes(idx, prim, realize, buf, loop, ana):
    """Raise unless the block writes, within one iteration of `loop`, a dense box of buf (every
    element of the relaxed region), which reverse_compute_at relies on."""
    name, lname = realize.block.name_hint, loop.loop_var.name
    inner = _loops_between(idx, realize, loop)
    inner_vars = {lp.loop_var: lp for lp in inner}
    ivmap = {iv.var: (iv, v) for iv, v in zip(realize.block.iter_vars, realize.iter_values)}
    owner = {}
    for region in realize.block.writes:
        if region.buffer is not buf:
            continue
        for r in region.region:
            if not is_one(r.extent):
                raise ScheduleError(f"{prim}: block {name!r} writes a region of extent {r.extent.script()} of "
                                    f"{buf.name!r} per instance; the region it writes under loop {lname!r} "
                                    f"cannot be proven dense")
            used = [v for v in ivmap if uses_var(r.min, v)]
            if not used:
                continue
            if len(used) > 1 or r.min is not used[0]:
                raise ScheduleError(f"{prim}: block {name!r} writes {buf.name!r} at index {r.min.script()}; "
                                    f"reverse_compute_at needs the producer's write indices to be its "
                                    f"iteration variables")
            iv, value = ivmap[used[0]]
            # unit loops sit at their minimum
            value = substitute(value, {x: lp.min for x, lp in inner_vars.items() if is_one(lp.extent)})
            terms = []
            base = substitute(value, {x: lp.min for x, lp in inner_vars.items()})
            acc = base
            for x, lp in inner_vars.items():
                if not uses_var(value, x) or is_one(lp.extent):
                    continue
                if owner.setdefault(x, iv.var) is not iv.var:
                    raise ScheduleError(f"{prim}: loop {x.name!r} drives two iteration variables of block "
                                        f"{name!r}; the region it writes under loop {lname!r} is not a box")
                c = ana.simplify(substitute(value, {x: lp.min + 1, **{y: q.min for y, q in inner_vars.items()
                                                                        if y is not x}}) - base)
                if type(c) is not IntImm or c.value <= 0:
                    raise ScheduleError(f"{prim}: block {name!r} binds {iv.var.name!r} to {value.script()}, not "
                                        f"increasing in loop {x.name!r}; the region it writes under loop "
                                        f"{lname!r} cannot be proven dense")
                terms.append((c.value, lp))
                acc = acc + c.value * (x - lp.min)
            if not ana.can_prove_equal(acc, value):
                raise ScheduleError(f"{prim}: block {name!r} binds {iv.var.name!r} to {value.script()}, which is "
                                    f"not affine in the loops under {lname!r}; the region it writes cannot be "
                                    f"proven dense")
            covered = 1
            for c, lp in sorted(terms, key=lambda t: t[0]):
                if c > covered:
                    raise ScheduleError(f"{prim}: under loop {lname!r} block {name!r} writes {buf.name!r} with "
                                        f"gaps ({iv.var.name!r} = {value.script()} steps by {c}); "
                                        f"reverse_compute_at needs a dense region")
                if type(lp.extent) is IntImm:
                    covered += c * (lp.extent.value - 1)
                elif len(terms) == 1:
                    covered = None
                else:
                    raise ScheduleError(f"{prim}: loop {lp.loop_var.name!r} has the symbolic extent "
                                        f"{lp.extent.script()}; the region block {name!r} writes under loop "
                                        f"{lname!r} cannot be proven dense")
                if covered is None:
                    break


def _plan_at(idx, realize, loop, preserve_unit_loops, index, reverse, prim):
    """Check compute_at / reverse_compute_at and build the moved block's loop nest."""
    block = realize.block
    name, lname = block.name_hint, loop.loop_var.name
    scope = idx.scope_of(realize)
    if idx.scope_of(loop) is not scope:
        raise ScheduleError(f"{prim}: loop {lname!r} is not in the block scope of block {name!r} (the loop "
                            f"is inside another block); {prim} moves a block within its scope")
    if idx.encloses(loop, realize):
        raise ScheduleError(f"{prim}: loop {lname!r} already encloses block {name!r}")
    if idx.encloses(realize, loop):
        raise ScheduleError(f"{prim}: loop {lname!r} is inside block {name!r}")
    why = complete_or_reduction(idx, realize)
    if why is not None:
        raise ScheduleError(f"{prim}: block {name!r} is neither a complete nor a reduction block ({why})")
    prods, cons = producers(idx, realize), consumers(idx, realize)
    if not reverse:
        if is_output_block(idx, realize):
            raise ScheduleError(f"compute_at: block {name!r} writes an output of the function; only "
                                f"intermediate blocks can be computed at a consumer's loop")
        under = [c for c in cons if idx.encloses(loop, c)]
        if not under:
            extra = " (it has no consumer)" if not cons else ""
            raise ScheduleError(f"compute_at: block {name!r} is not a producer of anything under loop "
                                f"{lname!r}{extra}")
        missing = [c for c in cons if not idx.encloses(loop, c)]
        if missing:
            raise ScheduleError(f"compute_at: consumer {missing[0].block.name_hint!r} of block {name!r} is not "
                                f"under loop {lname!r}; every consumer must be under the loop")
        deps = cons
    else:
        under = [p for p in prods if idx.encloses(loop, p)]
        if not under:
            extra = " (it has no producer)" if not prods else ""
            raise ScheduleError(f"reverse_compute_at: block {name!r} is not a consumer of anything under loop "
                                f"{lname!r}{extra}")
        missing = [p for p in prods if not idx.encloses(loop, p)]
        if missing:
            raise ScheduleError(f"reverse_compute_at: producer {missing[0].block.name_hint!r} of block {name!r} "
                                f"is not under loop {lname!r}; every producer must be under the loop")
        outer = {lp.loop_var for lp in _loops_from(idx, loop)}
        for p in prods:
            carried = _reduce_loops(p) & outer
            if carried:
                v = next(iter(carried))
                raise ScheduleError(f"reverse_compute_at: loop {v.name!r} carries the reduction of producer "
                                    f"{p.block.name_hint!r}; under loop {lname!r} block {name!r} would read "
                                    f"partial results")
        deps = prods
    pos = _insertion(idx, prim, name, lname, loop, prods, cons, index)

    ana = analyzer_for(idx, loop, include=loop)
    provided = block.reads if reverse else block.writes
    ivars = [iv.var for iv in block.iter_vars]
    cons_of = {v: [] for v in ivars}
    full = set()
    seen = set()
    for region in provided:
        buf = region.buffer
        if buf in seen:
            continue
        seen.add(buf)
        req = None
        shared = [] if reverse else _thread_loops_sharing(_loops_from(idx, loop), buf)
        for d in deps:
            box = block_box(d, buf, shared + _loops_between(idx, d, loop), ana, writes=reverse)
            if box is not None:
                if reverse:
                    _check_dense_writes(idx, prim, d, buf, loop, ana)
                    if req is not None:
                        for (a, b), (c, e) in zip(req, box):
                            if a is None or c is None or not ana.can_prove_equal(a, c) or \
                                    b is None or e is None or not ana.can_prove_equal(b, e):
                                raise ScheduleError(f"reverse_compute_at: the producers of {buf.name!r} under "
                                                    f"loop {lname!r} write different regions of it")
                req = union_bounds(req, box, ana)
        if req is None:
            continue
        for reg in (r for r in provided if r.buffer is buf):
            splits = []   # (kind, v, a, b, c, lo, hi) of `(a*v + b) // c` and `(a*v + b) % c` indices
            for dim, (r, (lo, hi)) in enumerate(zip(reg.region, req)):
                sol = solve_linear(r.min, ivars, ana)
                what = "reads" if reverse else "writes"
                if sol is None and not reverse and not uses_vars(r.extent, set(ivars)):
                    part = _split_index(r, ivars, ana)
                    if part is not None:
                        splits.append(part + (lo, hi))
                    else:  # not invertible: compute every value of the iterators it uses
                        full.update(v for v in ivars if uses_var(r.min, v))
                    continue
                if sol is None or uses_vars(r.extent, set(ivars)):
                    raise ScheduleError(f"{prim}: block {name!r} {what} {buf.name!r} at {r.min.script()} in "
                                        f"dimension {dim}, which is not a * v + b of one of its iteration "
                                        f"variables; cannot derive the region it must compute")
                v, a, b = sol
                if v is None:
                    continue
                if reverse and not is_one(r.extent):
                    raise ScheduleError(f"reverse_compute_at: block {name!r} reads {r.extent.script()} elements "
                                        f"of {buf.name!r} in dimension {dim} per instance; each instance "
                                        f"must read one element per dimension")
                if lo is None or hi is None:
                    if reverse:
                        raise ScheduleError(f"reverse_compute_at: the region of {buf.name!r} written under loop "
                                            f"{lname!r} cannot be bounded")
                    full.add(v)
                    continue
                cons_of[v].append(_solve_range(a, b, r.extent, lo, hi, ana))
                if reverse:
                    _check_reads_inside(prim, name, buf, dim, r.min, v, a, b, block, ana)
            _split_constraints(splits, cons_of, full, ana)
    # the domain of every iteration variable
    doms = []
    for iv in block.iter_vars:
        dmin = iv.dom.min
        dmax = ana.simplify(iv.dom.min + iv.dom.extent - 1)
        cs = cons_of[iv.var]
        if reverse and cs and iv.iter_type == "reduce":
            if all(ana.can_prove(lo <= dmin) and ana.can_prove(hi >= dmax) for lo, hi in cs):
                doms.append((dmin, dmax, False, False))   # the whole reduction in one iteration
                continue
            raise ScheduleError(f"reverse_compute_at: under loop {lname!r} block {name!r} would be computed in "
                                f"parts along its reduction iterator {iv.var.name!r}; move it to a loop outside "
                                f"the producers' loops of that dimension")
        if not cs or iv.var in full or (not reverse and iv.iter_type == "reduce"):
            doms.append((dmin, dmax, False, False))
            continue
        lo, hi = cs[0]
        for c in cs[1:]:
            if reverse:
                if not (ana.can_prove_equal(c[0], lo) and ana.can_prove_equal(c[1], hi)):
                    raise ScheduleError(f"reverse_compute_at: block {name!r} reads the producers' buffers at "
                                        f"different offsets through {iv.var.name!r}; no single range of it "
                                        f"reads only what one iteration of loop {lname!r} wrote")
            else:
                lo, hi = ana.simplify(min_expr(lo, c[0])), ana.simplify(max_expr(hi, c[1]))
        clip_lo = not ana.can_prove(lo >= dmin)
        clip_hi = not ana.can_prove(hi <= dmax)
        doms.append((lo, hi, clip_lo, clip_hi))
    plan = _AtPlan()
    plan.pos = pos
    plan.loop = loop
    plan.realize, plan.nest = _make_nest(realize, doms, preserve_unit_loops, ana)
    plan.remove = removal_root(idx, realize)
    plan.removed_loops = [lp.loop_var for lp in loops_in(plan.remove)] if plan.remove is not realize else []
    return plan


_SHARED_SCOPES = {"shared": ("threadIdx",), "shared.dyn": ("threadIdx",), "warp": ("threadIdx",)}


def _thread_loops_sharing(loops, buf) -> list:
    """The loops of `loops` bound to the threads that share buf's storage scope (threadIdx for
    "shared"): a cache of that scope computed under them holds every such thread's region
    (cooperative fetching, as TVM's compute_at relaxes shared buffers over the thread loops)."""
    tags = _SHARED_SCOPES.get(buf.scope)
    if not tags:
        return []
    return [lp for lp in loops if lp.kind == ForKind.THREAD_BINDING and lp.thread_binding is not None
            and lp.thread_binding.thread_tag.startswith(tags)]


def _solve_range(a, b, ext, lo, hi, ana):
    """The values of v for which [a*v + b, a*v + b + ext - 1] meets [lo, hi]."""
    if a < 0:
        # a*v + b = (-a) * (-v) + b: solve for w = -v, then negate
        wlo = ceildiv(ana.simplify(lo - b - ext + 1), -a)
        whi = floordiv(hi - b, -a)
        vlo, vhi = -whi, -wlo
    else:
        vlo = ceildiv(lo - b - ext + 1, a) if not (is_one(ext) and a == 1) else lo - b
        vhi = floordiv(hi - b, a) if a != 1 else hi - b
    return ana.simplify(vlo), ana.simplify(vhi)


def _split_index(r, ivars, ana):
    """("div" | "mod", v, a, b, c) for a one-element index `(a*v + b) // c` or `(a*v + b) % c`."""
    e = r.min
    if type(e) not in (FloorDiv, FloorMod) or type(e.b) is not IntImm or e.b.value <= 0 or not is_one(r.extent):
        return None
    sol = solve_linear(e.a, ivars, ana)
    if sol is None or sol[0] is None:
        return None
    v, a, b = sol
    return ("div" if type(e) is FloorDiv else "mod", v, a, b, e.b.value)


def _split_constraints(splits, cons_of, full, ana):
    """Constraints on iterators indexed through `x // c` (with the matching `x % c`, when there is
    one, narrowing the ends): x lies in [qlo * c + mlo, qhi * c + mhi]."""
    mods = [s for s in splits if s[0] == "mod"]
    for kind, v, a, b, c, qlo, qhi in splits:
        if kind != "div":
            continue
        if qlo is None or qhi is None:
            full.add(v)
            continue
        m = next((x for x in mods if x[1] is v and x[2] == a and x[4] == c and structural_equal(x[3], b)), None)
        mlo = m[5] if m is not None and m[5] is not None else 0
        mhi = m[6] if m is not None and m[6] is not None else c - 1
        xlo, xhi = ana.simplify(qlo * c + mlo), ana.simplify(qhi * c + mhi)
        cons_of[v].append(_solve_range(a, b, const(1, v.dtype), xlo, xhi, ana))


def _check_reads_inside(prim, name, buf, dim, index, v, a, b, block, ana):
    """reverse_compute_at computes a consumer element when the producers wrote what it reads: every
    element of the consumer's domain must read inside the buffer, or it would never be computed."""
    iv = next(x for x in block.iter_vars if x.var is v)
    lo_v, hi_v = iv.dom.min, iv.dom.min + iv.dom.extent - 1
    ends = (a * lo_v + b, a * hi_v + b)
    first, last = (ends if a > 0 else ends[::-1])
    shape = buf.shape[dim]
    if not (ana.can_prove(first >= 0) and ana.can_prove(last < shape)):
        raise ScheduleError(f"reverse_compute_at: block {name!r} reads {buf.name!r}[{index.script()}] in dimension "
                            f"{dim}, which leaves the buffer (extent {shape.script()}) for some {v.name!r}; those "
                            f"elements would never be computed")


def _make_nest(realize, doms, preserve_unit_loops, ana):
    """The block's new BlockRealize and the loops (`ax0, ...`) around it for the given domains
    [(lo, hi, clip_lo, clip_hi)] of its iteration variables."""
    block = realize.block
    loops, values, conds = [], [], []
    for iv, (lo, hi, clip_lo, clip_hi) in zip(block.iter_vars, doms):
        dt = iv.var.dtype
        dmin = iv.dom.min
        dmax = ana.simplify(iv.dom.min + iv.dom.extent - 1)
        lo_c = lo if not clip_lo else ana.simplify(max_expr(lo, dmin))
        hi_c = hi if not clip_hi else ana.simplify(min_expr(hi, dmax))
        ext = ana.simplify(hi - lo + 1)
        if (clip_lo or clip_hi) and type(ext) is not IntImm:
            start, ext, clip_lo, clip_hi = lo_c, ana.simplify(hi_c - lo_c + 1), False, False
        else:
            start = lo
        start = cast(start, dt) if start.dtype != dt else start
        ext = cast(ext, dt) if ext.dtype != dt else ext
        if not preserve_unit_loops and is_one(ext):
            value = start
        else:
            var = Var(f"ax{len(loops)}", dt)
            loops.append((var, ext))
            ana.bind(var, Range.from_min_extent(const(0, dt), ext))
            value = ana.simplify(start + var) if not (type(start) is IntImm and start.value == 0) else var
        values.append(value)
        if clip_lo:
            conds.append(dmin <= value)
        if clip_hi:
            conds.append(value < iv.dom.min + iv.dom.extent)
    pred = ana.simplify(all_of(*conds)) if conds else const(True)
    new = BlockRealize(values, pred, block)
    stmt = new
    for var, ext in reversed(loops):
        stmt = For(var, const(0, var.dtype), ext, ForKind.SERIAL, stmt)
    return new, stmt


def _apply_at(self, fname, plan, prim, name):
    new_loop = plan.loop.replace(body=insert_into(plan.loop.body, plan.pos, plan.nest))
    self._replace(fname, {plan.remove: None, plan.loop: new_loop})
    for var in plan.removed_loops:
        self._retire_loop(fname, var, f"it was removed when {prim} moved block {name!r}")


@instruction_kind("ComputeAt", inputs=("block", "loop"))
def compute_at(self, block, loop, preserve_unit_loops=False, index=-1):
    """Move a producer block under a loop of its consumers, computing there the region they need
    in one iteration of the loop (see the module docstring). As in TVM, `loop` may also be a
    location mark of sample_compute_location: ROOT_MARK leaves the block where it is, INLINE_MARK
    inlines it (compute_inline)."""
    fname, idx, realize = self._block(block, "compute_at")
    loc = self._location(loop, "compute_at")
    if loc is ROOT_MARK:
        return None
    if loc is INLINE_MARK:
        return compute_inline(self, block)
    _, _, node = self._loop(loop, "compute_at", func=fname)
    plan = _plan_at(idx, realize, node, bool(preserve_unit_loops), index, False, "compute_at")
    _apply_at(self, fname, plan, "compute_at", realize.block.name_hint)
    return None


@instruction_kind("ReverseComputeAt", inputs=("block", "loop"))
def reverse_compute_at(self, block, loop, preserve_unit_loops=False, index=-1):
    """Move a consumer block under a loop of its producers, computing there what it can from what
    they wrote in one iteration of the loop (epilogue fusion)."""
    fname, idx, realize = self._block(block, "reverse_compute_at")
    _, _, node = self._loop(loop, "reverse_compute_at", func=fname)
    plan = _plan_at(idx, realize, node, bool(preserve_unit_loops), index, True, "reverse_compute_at")
    _apply_at(self, fname, plan, "reverse_compute_at", realize.block.name_hint)
    return None


def compute_at_problem(idx, realize, loop, reverse=False) -> str | None:
    """None when compute_at (reverse_compute_at) of the block at the loop would succeed, else why not."""
    try:
        _plan_at(idx, realize, loop, False, -1, reverse, "reverse_compute_at" if reverse else "compute_at")
    except ScheduleError as e:
        return str(e)
    return None


# ---------------------------------------------------------------------------------------------
# compute_inline
# ---------------------------------------------------------------------------------------------
def _store_of(block, prim):
    name = block.name_hint
    body = block.body
    if type(body) is not BufferStore:
        raise ScheduleError(f"{prim}: the body of block {name!r} is not a single store (it is a "
                            f"{type(body).__name__}); only blocks computing one value can be inlined")
    return body


def _check_injective(block, prim, what):
    name = block.name_hint
    if not block.iter_vars:
        raise ScheduleError(f"{prim}: block {name!r} has no iteration variables (an opaque block)")
    if block.init is not None or any(iv.iter_type != "data_par" for iv in block.iter_vars):
        raise ScheduleError(f"{prim}: block {name!r} is a reduction; only injective (spatial) blocks can "
                            f"be {what}")
    if block.alloc_buffers or block.match_buffers:
        raise ScheduleError(f"{prim}: block {name!r} allocates or matches buffers")
    if child_realizes(block.body):
        raise ScheduleError(f"{prim}: block {name!r} contains other blocks")


class _Inline(Mutator):
    """Replaces loads of `buf` by the producer's value with its iteration variables substituted."""

    def __init__(self, buf, ivars, value, ana):
        super().__init__()
        self.buf, self.ivars, self.value, self.ana = buf, ivars, value, ana
        self.loads = []

    def visit_BufferLoad(self, n):
        indices = tuple(self.visit(i) for i in n.indices)
        if n.buffer is not self.buf:
            return load_with_indices(n, indices)
        self.loads.append(indices)
        return substitute(self.value, dict(zip(self.ivars, indices)))


class _Simplify(Mutator):
    """Simplifies the indices of loads (after substitution)."""

    def __init__(self, ana):
        super().__init__()
        self.ana = ana

    def visit_BufferLoad(self, n):
        return load_with_indices(n, tuple(self.ana.simplify(self.visit(i)) for i in n.indices))


def _plan_inline(idx, realize):
    block = realize.block
    name = block.name_hint
    prim = "compute_inline"
    _check_injective(block, prim, "inlined")
    store = _store_of(block, prim)
    buf = store.buffer
    ivars = [iv.var for iv in block.iter_vars]
    seen = set()
    for k, i in enumerate(store.indices):
        if not isinstance(i, Var) or i not in ivars or i in seen:
            raise ScheduleError(f"compute_inline: block {name!r} stores {buf.name!r}[{', '.join(x.script() for x in store.indices)}]; "
                                f"the indices must be distinct iteration variables of the block")
        seen.add(i)
    if len(seen) != len(ivars):
        unused = [v.name for v in ivars if v not in seen]
        raise ScheduleError(f"compute_inline: block {name!r} does not store at its iterator(s) {unused}; the "
                            f"value would depend on which instance ran last")
    if any(r.buffer is buf for r in block.reads):
        raise ScheduleError(f"compute_inline: block {name!r} reads {buf.name!r}, which it writes")
    if is_output_block(idx, realize):
        raise ScheduleError(f"compute_inline: block {name!r} writes {buf.name!r}, an output of the function; "
                            f"only intermediate buffers can be inlined")
    why = complete_or_reduction(idx, realize)
    if why is not None:
        raise ScheduleError(f"compute_inline: block {name!r} is not a complete block ({why})")
    scope = idx.scope_of(realize)
    users = []
    for r in realizes_under(scope.block.body if scope is not None else idx.func.body) + \
            _nested_blocks(idx, scope):
        if r is realize:
            continue
        b = r.block
        reads = any(x.buffer is buf for x in b.reads)
        if any(x.buffer is buf for x in b.writes):
            raise ScheduleError(f"compute_inline: block {b.name_hint!r} also writes {buf.name!r}")
        if reads:
            if child_realizes(b.body):
                raise ScheduleError(f"compute_inline: block {b.name_hint!r} reads {buf.name!r} and contains "
                                    f"other blocks; inline into its inner blocks first")
            if _address_taken(b, buf):
                raise ScheduleError(f"compute_inline: block {b.name_hint!r} takes the address of {buf.name!r} "
                                    f"(a tensorized block reads it through a pointer); it cannot be inlined")
            users.append(r)
    # loads of buf index by the store's index order: substitute store.indices[d] -> load index d
    return store, buf, list(store.indices), users


def _address_taken(block, buf) -> bool:
    """Whether the block passes an element of buf by address (address_of: an intrinsic's operand)."""
    found = []

    def visit(x):
        if type(x) is Call and x.op == "address_of" and any(
                type(a) is BufferLoad and a.buffer is buf for a in x.args):
            found.append(x)
    for part in (block.body, block.init):
        if part is not None:
            post_order_visit(part, visit)
    return bool(found)


def _nested_blocks(idx, scope):
    """Blocks nested inside the child blocks of the scope (they may read the buffer too)."""
    out = []
    top = scope.block.body if scope is not None else idx.func.body
    for r in child_realizes(top):
        stack = list(child_realizes(r.block.body))
        while stack:
            x = stack.pop()
            out.append(x)
            stack.extend(child_realizes(x.block.body))
    return out


def _inline_into(block, buf, ivars, value, prod_reads, ana):
    """block with every load of buf replaced by value; its reads updated."""
    m = _Inline(buf, ivars, value, ana)
    body = m.visit(block.body)
    init = m.visit(block.init) if block.init is not None else None
    simp = _Simplify(ana)
    body = simp.visit(body)
    init = simp.visit(init) if init is not None else None
    reads = [r for r in block.reads if r.buffer is not buf]
    for indices in m.loads:
        vmap = dict(zip(ivars, indices))
        for pr in prod_reads:
            reads.append(pr.replace(region=tuple(Range.from_min_extent(ana.simplify(substitute(x.min, vmap)),
                                                                       substitute(x.extent, vmap))
                                                 for x in pr.region)))
    return block.replace(body=body, init=init, reads=dedup_regions(reads))


@instruction_kind("ComputeInline", inputs=("block",))
def compute_inline(self, block):
    """Inline an injective producer into its consumers: every load of the buffer it writes becomes
    its value expression (the block, its emptied loops and the buffer disappear)."""
    fname, idx, realize = self._block(block, "compute_inline")
    store, buf, ivars, users = _plan_inline(idx, realize)
    ana = shape_var_analyzer(idx.func)
    new_blocks = {}
    for r in users:
        new_blocks[r.block] = _inline_into(r.block, buf, ivars, store.value, realize.block.reads, ana)
    scope = idx.scope_of(realize)
    remove = removal_root(idx, realize)
    name = realize.block.name_hint
    repl = dict(new_blocks)
    repl[remove] = None
    _commit(self, fname, repl, scope, buf)
    for lp in loops_in(remove) if remove is not realize else []:
        self._retire_loop(fname, lp.loop_var, f"it was removed when compute_inline inlined block {name!r}")
    self._retire_block(fname, name, "it was inlined by compute_inline")
    return None


def _commit(self, fname, repl: dict, scope, buf):
    """Commit the replacements (old statement -> new statement or None) and drop buf from the
    alloc_buffers of the scope block."""
    edits = {id(old): (lambda _, new=new: new) for old, new in repl.items()}
    if scope is not None and buf in scope.block.alloc_buffers:
        edits[id(scope.block)] = lambda b: b.replace(
            alloc_buffers=tuple(x for x in b.alloc_buffers if x is not buf))
    func = self._state.func(fname)
    self._state.set_func(fname, func.with_body(edit(func.body, edits)))


# ---------------------------------------------------------------------------------------------
# reverse_compute_inline
# ---------------------------------------------------------------------------------------------
def _plan_reverse_inline(idx, realize):
    block = realize.block
    name = block.name_hint
    prim = "reverse_compute_inline"
    _check_injective(block, prim, "reverse-inlined")
    store = _store_of(block, prim)
    why = complete_or_reduction(idx, realize)
    if why is not None:
        raise ScheduleError(f"{prim}: block {name!r} is not a complete block ({why})")
    prods = producers(idx, realize)
    if not prods:
        raise ScheduleError(f"{prim}: block {name!r} has no producer to be inlined into")
    read_bufs = []
    for r in block.reads:
        if r.buffer not in read_bufs and any(r.buffer in [w.buffer for w in p.block.writes] for p in prods):
            read_bufs.append(r.buffer)
    if len(read_bufs) != 1:
        names = ", ".join(repr(b.name) for b in read_bufs)
        raise ScheduleError(f"{prim}: block {name!r} reads {len(read_bufs)} buffers written by other blocks "
                            f"({names}); it can be folded into the producer of exactly one")
    buf = read_bufs[0]
    writers = [p for p in prods if any(w.buffer is buf for w in p.block.writes)]
    if len(writers) != 1 or len(prods) != 1:
        raise ScheduleError(f"{prim}: block {name!r} has {len(prods)} producers; it can be folded only into "
                            f"the single block that writes what it reads")
    prod = writers[0]
    pblock = prod.block
    pname = pblock.name_hint
    _check_injective(pblock, prim, "reverse-inlined into")
    pstore = _store_of(pblock, prim)
    if pstore.buffer is not buf or len(pblock.writes) != 1:
        raise ScheduleError(f"{prim}: producer {pname!r} must write only {buf.name!r}")
    if is_output_block(idx, prod):
        raise ScheduleError(f"{prim}: {buf.name!r} is an output of the function; the consumer cannot "
                            f"replace its store")
    others = [c for c in consumers(idx, prod) if c is not realize]
    if others:
        raise ScheduleError(f"{prim}: {buf.name!r} is also read by block {others[0].block.name_hint!r}; "
                            f"block {name!r} must be its only consumer")
    # the consumer reads buf once per dimension, at its iteration variables
    loads = []

    class _Find(Mutator):
        def visit_BufferLoad(self, n):
            if n.buffer is buf:
                loads.append(n)
            return self.generic_visit(n)

    _Find().visit(store.value)
    if store.buffer is buf:
        raise ScheduleError(f"{prim}: block {name!r} writes {buf.name!r}")
    if not loads:
        raise ScheduleError(f"{prim}: block {name!r} does not load {buf.name!r} in its body")
    first = loads[0]
    for ld in loads[1:]:
        if not all(structural_equal(a, b) for a, b in zip(ld.indices, first.indices)):
            raise ScheduleError(f"{prim}: block {name!r} loads {buf.name!r} at different indices")
    ivars = [iv.var for iv in block.iter_vars]
    seen = {}
    ana = shape_var_analyzer(idx.func)
    for d, i in enumerate(first.indices):
        if isinstance(i, IntImm) and i.value == 0 and ana.can_prove_equal(buf.shape[d], 1):
            continue        # a unit dimension read at 0 (a batch of one)
        if not isinstance(i, Var) or i not in ivars or i in seen:
            raise ScheduleError(f"{prim}: block {name!r} loads {buf.name!r}[{', '.join(x.script() for x in first.indices)}]; "
                                f"each index must be a distinct iteration variable of the block (or 0 in a "
                                f"dimension of extent 1)")
        seen[i] = d
    for iv in block.iter_vars:
        if iv.var not in seen and ana.can_prove_equal(iv.dom.extent, 1):
            continue        # one value (its domain's start): the store at it is the producer's at the unit index
        if iv.var not in seen:
            raise ScheduleError(f"{prim}: iteration variable {iv.var.name!r} of block {name!r} does not index "
                                f"{buf.name!r}; the producer's instances cannot determine the consumer's")
        d = seen[iv.var]
        if not (ana.can_prove_equal(iv.dom.min, 0) and ana.can_prove_equal(iv.dom.extent, buf.shape[d])):
            raise ScheduleError(f"{prim}: block {name!r} iterates {iv.var.name!r} over [{iv.dom.min.script()}, "
                                f"{iv.dom.min.script()} + {iv.dom.extent.script()}) but reads dimension {d} of "
                                f"{buf.name!r} (extent {buf.shape[d].script()}); the ranges must match")
    return store, buf, prod, pstore, seen


@instruction_kind("ReverseComputeInline", inputs=("block",))
def reverse_compute_inline(self, block):
    """Fold an injective consumer into the store of its only producer (the consumer, its emptied
    loops and the intermediate buffer disappear)."""
    fname, idx, realize = self._block(block, "reverse_compute_inline")
    store, buf, prod, pstore, dim_of = _plan_reverse_inline(idx, realize)
    ana = shape_var_analyzer(idx.func)
    pblock = prod.block
    # consumer iteration variable v_d -> the producer's index in dimension d (one of extent 1: its start)
    vmap = {v: pstore.indices[d] for v, d in dim_of.items()}
    vmap.update({iv.var: iv.dom.min for iv in realize.block.iter_vars if iv.var not in dim_of})

    class _Sub(Mutator):
        def visit_BufferLoad(self, n):
            if n.buffer is buf:
                return pstore.value
            return self.generic_visit(n)

    value = substitute(_Sub().visit(store.value), vmap)
    value = _Simplify(ana).visit(value)
    indices = [ana.simplify(substitute(i, vmap)) for i in store.indices]
    new_store = BufferStore(store.buffer, value, indices)
    reads = [r for r in pblock.reads if r.buffer is not buf]
    for r in realize.block.reads:
        if r.buffer is buf:
            continue
        reads.append(r.replace(region=tuple(Range.from_min_extent(ana.simplify(substitute(x.min, vmap)),
                                                                  substitute(x.extent, vmap)) for x in r.region)))
    writes = [point_region(store.buffer, indices)]
    new_pblock = pblock.replace(body=new_store, reads=dedup_regions(reads), writes=tuple(writes))
    scope = idx.scope_of(realize)
    remove = removal_root(idx, realize)
    name = realize.block.name_hint
    _commit(self, fname, {remove: None, pblock: new_pblock}, scope, buf)
    for lp in loops_in(remove) if remove is not realize else []:
        self._retire_loop(fname, lp.loop_var, f"it was removed when reverse_compute_inline folded block {name!r}")
    self._retire_block(fname, name, f"it was folded into block {pblock.name_hint!r} by reverse_compute_inline")
    return None


def compute_inline_problem(idx, realize) -> str | None:
    """None when compute_inline of the block would succeed, else why not."""
    try:
        _plan_inline(idx, realize)
    except ScheduleError as e:
        return str(e)
    return None


__all__ = ["compute_at", "reverse_compute_at", "compute_inline", "reverse_compute_inline",
           "compute_at_problem", "compute_inline_problem"]
