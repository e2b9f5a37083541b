"""Loop primitives: split, fuse, reorder, parallel, vectorize, unroll, bind.

Names follow TVM: split of `i` gives `i_0, i_1, ...`; fuse of `i, j` gives `i_j_fused`. Block
bindings are rewritten and simplified (rewrite.LoopRewriter), so split-then-fuse gives back `i`.
A split whose factors do not divide the extent guards the blocks under it with a predicate
(`T.where(i_0 * 8 + i_1 < n)`), symbolic extents included. Split and fuse make serial loops, so
they refuse loops that already carry a kind, a thread binding or annotations (as TVM does).
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir import For, ForKind, IntImm, IterVar, SeqStmt, Var, cast, const
from ..analysis import uses_vars
from .analysis import check_parallelizable, loop_bindings
from .handles import LoopRV
from .instruction import instruction_kind
from .rewrite import LoopRewriter
from .state import has_loose_statements, realizes_under


def _check_plain(loop: For, prim: str):
    name = loop.loop_var.name
    if loop.kind == ForKind.THREAD_BINDING:
        tag = getattr(loop.thread_binding, "thread_tag", "a thread axis")
        raise ScheduleError(f"{prim}: loop {name!r} is bound to {tag}; {prim} loops before binding them")
    if loop.kind != ForKind.SERIAL:
        raise ScheduleError(f"{prim}: loop {name!r} is {loop.kind}; {prim} loops before marking them "
                            f"(the loops {prim} makes are serial)")
    if loop.annotations:
        raise ScheduleError(f"{prim}: loop {name!r} has annotations {sorted(loop.annotations)}; {prim} it "
                            f"before annotating it (or unannotate it first)")


def _names(loops) -> str:
    return ", ".join(repr(lp.loop_var.name) for lp in loops)


# ---------------------------------------------------------------------------------------------
# split
# ---------------------------------------------------------------------------------------------
@instruction_kind("Split", inputs=("loop", "factors"), outputs="list", output_type=LoopRV)
def split(self, loop, factors, preserve_unit_iters=True, disable_predication=False):
    """Split a loop into len(factors) nested loops, outermost first.

    factors: positive ints or ExprRVs, at most one None (inferred as ceil(extent / the others)).
    The product must be at least the extent; when it does not provably equal it, the blocks under
    the loop get the predicate `fused index < extent`. preserve_unit_iters=False leaves loops of
    extent 1 out of the block bindings. disable_predication=True refuses (rather than omits) a
    predicate: the split must then be exact.
    """
    prim = "split"
    fname, idx, node = self._loop(loop, prim)
    name = node.loop_var.name
    _check_plain(node, prim)
    if not isinstance(factors, (list, tuple)) or not factors:
        raise ScheduleError(f"split: factors of loop {name!r} must be a non-empty list, got {factors!r}")
    values, none_at = [], None
    for k, f in enumerate(factors):
        if f is None:
            if none_at is not None:
                raise ScheduleError(f"split: loop {name!r}: at most one factor may be None, got {list(factors)!r}")
            none_at = k
            values.append(None)
            continue
        v = self._int(f, prim, f"factors[{k}] of loop {name!r}")
        if v <= 0:
            raise ScheduleError(f"split: loop {name!r}: factors[{k}] is {v}; factors must be positive "
                                f"(use None for the one to infer)")
        values.append(v)
    dtype = node.loop_var.dtype
    extent = node.extent
    known = 1
    for v in values:
        if v is not None:
            known *= v
    rw = LoopRewriter(idx, node)
    if none_at is not None:
        if type(extent) is IntImm:
            values[none_at] = -(-extent.value // known)
        else:
            inferred = rw.simplify((extent + (known - 1)) // known) if known != 1 else extent
            values[none_at] = inferred
    fexprs = [const(v, dtype) if isinstance(v, int) else v for v in values]
    new_vars = [Var(f"{name}_{k}", dtype) for k in range(len(values))]
    total, fused = None, None
    for var, f, v in zip(new_vars, fexprs, values):
        rw.bind_loop(var, const(0, dtype), f)
        term = var if (preserve_unit_iters or not (isinstance(v, int) and v == 1)) else const(0, dtype)
        fused = term if fused is None else fused * f + term
        total = f if total is None else total * f
    fused = rw.simplify(fused)
    if none_at is None and not rw.can_prove(total >= extent):
        shown = " * ".join(str(v) for v in values)
        raise ScheduleError(f"split: the factors of loop {name!r} multiply to {shown} = "
                            f"{rw.simplify(total).script()}, which is not at least its extent "
                            f"{extent.script()}")
    predicate = None
    if not rw.can_prove(fused < extent):
        if disable_predication:
            raise ScheduleError(f"split: the factors {values} of loop {name!r} do not provably divide its "
                                f"extent {extent.script()}; disable_predication=True needs an exact split")
        if has_loose_statements(node.body):
            raise ScheduleError(f"split: loop {name!r} has statements outside blocks, which cannot carry "
                                f"the predicate a non-exact split needs; split it exactly")
        predicate = rw.simplify(fused < extent)
    value = fused if (type(node.min) is IntImm and node.min.value == 0) else rw.simplify(node.min + fused)
    body = rw.rewrite(node.body, {node.loop_var: value}, predicate)
    for var, f in zip(reversed(new_vars), reversed(fexprs)):
        body = For(var, const(0, dtype), f, ForKind.SERIAL, body)
    self._replace(fname, {node: body})
    self._retire_loop(fname, node.loop_var, f"it was split into {', '.join(repr(v.name) for v in new_vars)}")
    return [self._new_loop_rv(fname, v) for v in new_vars]


# ---------------------------------------------------------------------------------------------
# fuse
# ---------------------------------------------------------------------------------------------
def _chain_problem(idx, outer: For, inner: For, prim: str):
    """None when inner is the body of outer, else the ScheduleError to raise."""
    oname, iname = outer.loop_var.name, inner.loop_var.name
    if outer.body is inner:
        return None
    if idx.encloses(outer, inner):
        between = [p for p in idx.ancestors(inner) if p is not outer and idx.encloses(outer, p)]
        loops = [p for p in between if type(p) is For]
        if loops:
            return ScheduleError(f"{prim}: loops {oname!r} and {iname!r} are not adjacent: "
                                 f"{_names(reversed(loops))} lie{'s' if len(loops) == 1 else ''} between them")
        return ScheduleError(f"{prim}: loop {iname!r} is not the only statement in the body of loop "
                             f"{oname!r} ({type(outer.body).__name__} in between)")
    if idx.encloses(inner, outer):
        return ScheduleError(f"{prim}: loops must be given from outer to inner: {iname!r} encloses {oname!r}")
    return ScheduleError(f"{prim}: loops {oname!r} and {iname!r} are not nested in one another")


@instruction_kind("Fuse", outputs="one", output_type=LoopRV)
def fuse(self, *loops, preserve_unit_iters=True):
    """Fuse consecutive perfectly nested loops (outermost first) into one loop `a_b_fused`."""
    prim = "fuse"
    if not loops:
        raise ScheduleError("fuse: give at least one loop")
    fname = None
    nodes = []
    for k, rv in enumerate(loops):
        f, idx, node = self._loop(rv, prim, func=fname)
        fname = f
        if any(node is n for n in nodes):
            raise ScheduleError(f"fuse: loop {node.loop_var.name!r} is given twice")
        nodes.append(node)
    for outer, inner in zip(nodes, nodes[1:]):
        problem = _chain_problem(idx, outer, inner, prim)
        if problem is not None:
            raise problem
    for node in nodes:
        _check_plain(node, prim)
    outer_vars = set()
    for node in nodes:
        if uses_vars(node.min, outer_vars) or uses_vars(node.extent, outer_vars):
            raise ScheduleError(f"fuse: the range of loop {node.loop_var.name!r} depends on an outer loop "
                                f"being fused; the fused loop would not be rectangular")
        outer_vars.add(node.loop_var)
    dtypes = {n.loop_var.dtype for n in nodes}
    dtype = nodes[0].loop_var.dtype if len(dtypes) == 1 else max(dtypes, key=lambda d: d.bits)
    rw = LoopRewriter(idx, nodes[0])
    part = [n for n in nodes if preserve_unit_iters or not (type(n.extent) is IntImm and n.extent.value == 1)]
    total = None
    for n in part:
        e = cast(n.extent, dtype)
        total = e if total is None else total * e
    total = rw.simplify(total) if total is not None else const(1, dtype)
    fvar = Var("_".join(n.loop_var.name for n in nodes) + "_fused", dtype)
    rw.bind_loop(fvar, const(0, dtype), total)
    vmap = {}
    rest = fvar
    for pos in range(len(part) - 1, -1, -1):
        n = part[pos]
        e = cast(n.extent, dtype)
        digit = rest if pos == 0 else rest % e
        rest = rest // e
        vmap[n.loop_var] = cast(_plus_min(n.min, digit), n.loop_var.dtype)
    for n in nodes:
        if n.loop_var not in vmap:
            vmap[n.loop_var] = n.min
    body = rw.rewrite(nodes[-1].body, vmap)
    new = For(fvar, const(0, dtype), total, ForKind.SERIAL, body)
    self._replace(fname, {nodes[0]: new})
    for n in nodes:
        self._retire_loop(fname, n.loop_var, f"it was fused into {fvar.name!r}")
    return self._new_loop_rv(fname, fvar)


def _plus_min(lo, e):
    if type(lo) is IntImm and lo.value == 0:
        return e
    return cast(lo, e.dtype) + e


# ---------------------------------------------------------------------------------------------
# reorder
# ---------------------------------------------------------------------------------------------
@instruction_kind("Reorder", outputs="none")
def reorder(self, *ordered_loops):
    """Reorder loops of one perfect nest: the given loops take the places they occupy, in the
    given order (loops of the nest that are not given stay where they are)."""
    prim = "reorder"
    fname, nodes = None, []
    for rv in ordered_loops:
        f, idx, node = self._loop(rv, prim, func=fname)
        fname = f
        if any(node is n for n in nodes):
            raise ScheduleError(f"reorder: loop {node.loop_var.name!r} is given twice")
        nodes.append(node)
    if len(nodes) <= 1:
        return None
    # the loops must lie on one chain: sort them outer to inner by nesting
    depth = {id(n): len(idx.ancestors(n)) for n in nodes}
    by_depth = sorted(nodes, key=lambda n: depth[id(n)])
    for outer, inner in zip(by_depth, by_depth[1:]):
        if not idx.encloses(outer, inner):
            raise ScheduleError(f"reorder: loops {outer.loop_var.name!r} and {inner.loop_var.name!r} are not "
                                f"in one loop nest: neither encloses the other")
    top, bottom = by_depth[0], by_depth[-1]
    chain = [top]
    while chain[-1] is not bottom:
        body = chain[-1].body
        if type(body) is not For:
            what = f"a sequence of {len(body.seq)} statements" if type(body) is SeqStmt else type(body).__name__
            raise ScheduleError(f"reorder: the loops from {top.loop_var.name!r} to {bottom.loop_var.name!r} are "
                                f"not a perfect nest: the body of {chain[-1].loop_var.name!r} is {what}")
        chain.append(body)
    for r in realizes_under(bottom.body):
        for iv in r.block.iter_vars:
            if iv.iter_type not in ("data_par", "reduce"):
                raise ScheduleError(f"reorder: block {r.block.name_hint!r} under the loops has a {iv.iter_type} "
                                    f"iterator {iv.var.name!r}; only data-parallel and reduction blocks can "
                                    f"have their loops reordered")
    given = {id(n) for n in nodes}
    slots = iter(nodes)
    new_chain = [next(slots) if id(lp) in given else lp for lp in chain]
    inner_vars = set()
    for lp in reversed(new_chain):
        if uses_vars(lp.min, inner_vars) or uses_vars(lp.extent, inner_vars):
            used = [v.name for v in inner_vars if uses_vars(lp.min, {v}) or uses_vars(lp.extent, {v})]
            raise ScheduleError(f"reorder: the range of loop {lp.loop_var.name!r} depends on {used[0]!r}, "
                                f"which the new order puts inside it")
        inner_vars.add(lp.loop_var)
    body = bottom.body
    for lp in reversed(new_chain):
        body = lp.replace(body=body)
    self._replace(fname, {top: body})
    return None


# ---------------------------------------------------------------------------------------------
# loop kinds: parallel, vectorize, unroll, bind
# ---------------------------------------------------------------------------------------------
def _set_kind(self, loop, prim, kind, what, check, thread_binding=None):
    fname, idx, node = self._loop(loop, prim)
    if check:
        check_parallelizable(node, prim, what)
    new = node.replace(kind=kind, thread_binding=thread_binding)
    self._replace(fname, {node: new})
    return None


@instruction_kind("Parallel", inputs=("loop",))
def parallel(self, loop):
    """Run the loop's iterations in parallel threads (`#pragma omp parallel for` in C)."""
    return _set_kind(self, loop, "parallel", ForKind.PARALLEL, "parallelized", True)


@instruction_kind("Vectorize", inputs=("loop",))
def vectorize(self, loop):
    """Vectorize the loop (vector code when its extent is constant, else `#pragma omp simd`)."""
    return _set_kind(self, loop, "vectorize", ForKind.VECTORIZED, "vectorized", True)


@instruction_kind("Unroll", inputs=("loop",))
def unroll(self, loop):
    """Unroll the loop (copied out when its extent is constant and <= 64, else `#pragma GCC unroll`)."""
    return _set_kind(self, loop, "unroll", ForKind.UNROLLED, "unrolled", False)


THREAD_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z",
               "vthread", "vthread.x", "vthread.y", "vthread.z")
_THREAD_IVS: dict = {}


def thread_iter_var(tag: str) -> IterVar:
    """The IterVar of a thread axis (one per tag, so scheduled functions compare structurally)."""
    iv = _THREAD_IVS.get(tag)
    if iv is None:
        iv = _THREAD_IVS[tag] = IterVar(None, Var(tag, "int32"), "thread", tag)
    return iv


@instruction_kind("Bind", inputs=("loop",))
def bind(self, loop, thread_axis):
    """Bind the loop to a GPU thread axis: blockIdx.x/y/z, threadIdx.x/y/z, vthread(.x/y/z).

    Only loops driving data-parallel iterators can be bound, except to threadIdx, where a loop may
    also drive reduction iterators: the threads of a block then share the reduction (a cross-thread
    reduction, lowered to a shared-memory tree on GPU targets). The C target lowers a vthread loop
    to a serial loop and refuses the other thread axes."""
    if not isinstance(thread_axis, str) or thread_axis not in THREAD_AXES:
        raise ScheduleError(f"bind: thread_axis must be one of {', '.join(THREAD_AXES)}, got {thread_axis!r}")
    cross = thread_axis.startswith("threadIdx")
    if cross:
        _, _, node = self._loop(loop, "bind")
        for r, iv, value in loop_bindings(node):
            if iv.iter_type not in ("data_par", "reduce"):
                raise ScheduleError(f"bind: loop {node.loop_var.name!r} cannot be bound to {thread_axis}: block "
                                    f"{r.block.name_hint!r} binds its {iv.iter_type} iterator {iv.var.name!r} "
                                    f"to it")
    return _set_kind(self, loop, "bind", ForKind.THREAD_BINDING, f"bound to {thread_axis}", not cross,
                     thread_iter_var(thread_axis))


__all__ = ["split", "fuse", "reorder", "parallel", "vectorize", "unroll", "bind", "THREAD_AXES",
           "thread_iter_var"]
