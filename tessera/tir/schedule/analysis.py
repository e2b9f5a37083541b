"""Analyses the primitives check their preconditions with.

- which blocks a loop's variable reaches and through which kind of block iterator
  (`loop_iter_type`, `check_parallelizable`);
- the dependences between the child blocks of a scope (`producers`, `consumers`: TVM's RAW and
  WAW edges from the blocks' read/write regions);
- where a block could be computed (`compute_locations`, `can_compute_at`, `can_compute_inline`),
  which sample_compute_location draws from. compute_at / compute_inline must accept every
  location these return; they are written from TVM's CollectComputeLocation and the structural
  preconditions of ComputeAt / ComputeInline.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir import (Block, Buffer, BufferStore, FloatImm, For, IntImm, SeqStmt, StringImm,
                   Var)
from ...ir.node import Node
from .handles import INLINE_MARK, ROOT_MARK
from .state import FuncIndex, child_realizes, realizes_under

_LEAVES = (IntImm, FloatImm, StringImm)


def uses_vars(expr, vs) -> bool:
    """Whether expr mentions any variable in the set vs (buffers' shapes are not entered)."""
    stack = [expr]
    pop, push = stack.pop, stack.append
    while stack:
        x = pop()
        if isinstance(x, Var):
            if x in vs:
                return True
            continue
        if type(x) in _LEAVES:
            continue
        for f in x._fields:
            v = getattr(x, f)
            if isinstance(v, Node):
                if not isinstance(v, Buffer):
                    push(v)
            elif type(v) is tuple:
                for y in v:
                    if isinstance(y, Node) and not isinstance(y, Buffer):
                        push(y)
    return False


def uses_var(expr, var) -> bool:
    return uses_vars(expr, {var})


# ---------------------------------------------------------------------------------------------
# loops and the block iterators they drive
# ---------------------------------------------------------------------------------------------
def loop_bindings(loop: For):
    """(realize, IterVar, binding) of every block iterator whose binding uses the loop's var."""
    var = {loop.loop_var}
    for r in realizes_under(loop.body):
        for iv, value in zip(r.block.iter_vars, r.iter_values):
            if uses_vars(value, var):
                yield r, iv, value


def loop_iter_type(loop: For) -> str:
    """TVM's GetLoopIterType: "data_par" when the loop drives only data-parallel iterators,
    "reduce" when only reduction ones, "opaque" when both or an opaque one."""
    spatial = reduce = other = False
    for _, iv, _ in loop_bindings(loop):
        if iv.iter_type == "data_par":
            spatial = True
        elif iv.iter_type == "reduce":
            reduce = True
        else:
            other = True
    if other or (spatial and reduce):
        return "opaque"
    return "reduce" if reduce else "data_par"


def check_parallelizable(loop: For, prim: str, what: str):
    """Raise unless every block iterator the loop drives is data parallel (TVM's check before
    parallel, vectorize and bind)."""
    name = loop.loop_var.name
    for r, iv, value in loop_bindings(loop):
        if iv.iter_type != "data_par":
            kind = {"reduce": "reduction"}.get(iv.iter_type, iv.iter_type)
            raise ScheduleError(
                f"{prim}: loop {name!r} cannot be {what}: block {r.block.name_hint!r} binds its {kind} "
                f"iterator {iv.var.name!r} to {value.script()}, which uses {name!r}; only loops that "
                f"drive data-parallel iterators can be {what}")


# ---------------------------------------------------------------------------------------------
# dependences between the child blocks of a scope
# ---------------------------------------------------------------------------------------------
def scope_children(idx: FuncIndex, scope) -> list:
    """The child blocks of a scope (a BlockRealize, or None for the function body), in order."""
    return child_realizes(scope.block.body if scope is not None else idx.func.body)


def scope_deps(idx: FuncIndex, scope) -> dict:
    """id(child realize) -> (producers, consumers) within the scope, from RAW and WAW edges."""
    key = ("deps", id(scope))
    deps = idx.cache.get(key)
    if deps is not None:
        return deps
    children = scope_children(idx, scope)
    deps = {id(c): ([], []) for c in children}
    writers: dict = {}
    for c in children:
        b = c.block
        srcs = []
        for region in b.reads:
            srcs.extend(writers.get(region.buffer, ()))
        for region in b.writes:
            srcs.extend(writers.get(region.buffer, ()))
        seen = set()
        for w in srcs:
            if id(w) not in seen and w is not c:
                seen.add(id(w))
                deps[id(c)][0].append(w)
                deps[id(w)][1].append(c)
        for region in b.writes:
            lst = writers.setdefault(region.buffer, [])
            if not lst or lst[-1] is not c:
                lst.append(c)
    idx.cache[key] = deps
    return deps


def producers(idx: FuncIndex, realize) -> list:
    return list(scope_deps(idx, idx.scope_of(realize))[id(realize)][0])


def consumers(idx: FuncIndex, realize) -> list:
    return list(scope_deps(idx, idx.scope_of(realize))[id(realize)][1])


def _written(block: Block):
    return [r.buffer for r in block.writes]


def is_output_block(idx: FuncIndex, realize) -> bool:
    """Whether the block writes a buffer its scope does not allocate (a function parameter)."""
    scope = idx.scope_of(realize)
    allocated = set(scope.block.alloc_buffers) if scope is not None else set()
    return any(b not in allocated for b in _written(realize.block))


def complete_or_reduction(idx: FuncIndex, realize) -> str | None:
    """None when the block is a complete or reduction block of its scope, else why not."""
    b = realize.block
    kinds = {iv.iter_type for iv in b.iter_vars}
    if kinds - {"data_par", "reduce"}:
        return f"block {b.name_hint!r} has {sorted(kinds - {'data_par', 'reduce'})} iterators"
    if "reduce" in kinds and b.init is None:
        return f"block {b.name_hint!r} has reduction iterators but no init"
    if "reduce" not in kinds:
        read = {r.buffer for r in b.reads}
        for buf in _written(b):
            if buf in read:
                return f"block {b.name_hint!r} reads {buf.name!r}, which it writes"
    for c in scope_children(idx, idx.scope_of(realize)):
        if c is not realize and any(buf in _written(c.block) for buf in _written(b)):
            return f"block {c.block.name_hint!r} also writes what {b.name_hint!r} writes"
    return None


def can_compute_inline(idx: FuncIndex, realize) -> bool:
    """TVM's preconditions of compute_inline: a complete, non-output block whose body is one
    store `B[v0, v1, ...] = expr` indexed by its distinct iterators (and not reading B)."""
    b = realize.block
    if not b.iter_vars or b.init is not None or b.alloc_buffers or b.match_buffers:
        return False
    if any(iv.iter_type != "data_par" for iv in b.iter_vars):
        return False
    if type(b.body) is not BufferStore or is_output_block(idx, realize):
        return False
    store = b.body
    ivars = {iv.var for iv in b.iter_vars}
    seen = set()
    for i in store.indices:
        if not isinstance(i, Var) or i not in ivars or i in seen:
            return False
        seen.add(i)
    if any(r.buffer is store.buffer for r in b.reads):
        return False
    if complete_or_reduction(idx, realize) is not None:
        return False
    from .placement import compute_inline_problem  # cycle: analysis <-> placement

    return compute_inline_problem(idx, realize) is None


def _subtree_position(idx: FuncIndex, loop: For, realize) -> int:
    """Index of the statement of loop.body (a sequence, or one statement) that holds realize."""
    body = loop.body
    node = realize
    p = idx.parent_of(node)
    while p is not None and p is not loop and p is not body:
        node, p = p, idx.parent_of(p)
    if type(body) is SeqStmt and p is body:
        for k, s in enumerate(body.seq):
            if s is node:
                return k
    return 0


def can_compute_at(idx: FuncIndex, realize, loop: For) -> str | None:
    """None when the block could be computed at the loop (compute_at's structural preconditions),
    else the reason it cannot."""
    name, lname = realize.block.name_hint, loop.loop_var.name
    scope = idx.scope_of(realize)
    if idx.scope_of(loop) is not scope:
        return f"loop {lname!r} is not in the scope of block {name!r}"
    if idx.encloses(loop, realize):
        return f"loop {lname!r} already encloses block {name!r}"
    why = complete_or_reduction(idx, realize)
    if why is not None:
        return why
    if is_output_block(idx, realize):
        return f"block {name!r} writes an output of the function"
    cons, prods = consumers(idx, realize), producers(idx, realize)
    if not cons:
        return f"block {name!r} has no consumer"
    for c in cons:
        if not idx.encloses(loop, c):
            return f"consumer {c.block.name_hint!r} of block {name!r} is not under loop {lname!r}"
    first_consumer = min(_subtree_position(idx, loop, c) for c in cons)
    inside = [p for p in prods if idx.encloses(loop, p)]
    if inside and max(_subtree_position(idx, loop, p) for p in inside) >= first_consumer:
        return (f"under loop {lname!r} a producer of block {name!r} comes after its first consumer: "
                f"there is no place to insert it")
    from .placement import compute_at_problem  # cycle: analysis <-> placement

    return compute_at_problem(idx, realize, loop)


def lowest_common_sref(idx: FuncIndex, nodes):
    """The deepest sref that is an ancestor of (or is) every one of `nodes`; used by cache_read/write."""
    chains = []
    for n in nodes:
        chain = []
        p = idx.sref_parent(n)
        while p is not None:
            chain.append(p)
            p = idx.sref_parent(p)
        chains.append(chain)
    common = {id(x) for x in chains[0]}
    for chain in chains[1:]:
        common &= {id(x) for x in chain}
    for x in chains[0]:
        if id(x) in common:
            return x
    return None


def location_is_legal(idx: FuncIndex, realize, loc) -> bool:
    """Whether the block can be computed at a location of compute_locations(check=False)."""
    if loc is ROOT_MARK:
        return True
    if loc is INLINE_MARK:
        return can_compute_inline(idx, realize)
    return can_compute_at(idx, realize, loc) is None


def compute_locations(idx: FuncIndex, realize, check: bool = True) -> list:
    """(decision index, location) pairs where the block may be computed, in TVM's order: -2 and
    INLINE_MARK when it can be inlined, -1 and ROOT_MARK, then (i, loop) with i the position of
    the loop among the loops of the block's first consumer. check=False: the structural
    candidates only, each to be confirmed by location_is_legal (the costly part, which a sampler
    needs for the one location it draws)."""
    out = []
    if not check or can_compute_inline(idx, realize):
        out.append((-2, INLINE_MARK))
    out.append((-1, ROOT_MARK))
    cons = consumers(idx, realize)
    if not cons:
        return out
    boundary = lowest_common_sref(idx, cons) if len(cons) > 1 else idx.sref_parent(cons[0])
    if type(boundary) is not For:
        return out
    loops = idx.loops_above(cons[0])
    pos = next((k for k, lp in enumerate(loops) if lp is boundary), None)
    if pos is None:
        return out
    n = pos + 1
    types = [loop_iter_type(loops[k]) for k in range(n)]
    last_dp = max((k for k in range(n) if types[k] == "data_par"), default=-1)
    visited_reduce = False
    for k in range(n):
        lp = loops[k]
        if type(lp.extent) is IntImm and lp.extent.value == 1:
            continue
        if types[k] == "data_par":
            if visited_reduce:
                break
        else:
            visited_reduce = True
            if k > last_dp:
                break
        if not check or can_compute_at(idx, realize, lp) is None:
            out.append((k, lp))
    return out


__all__ = ["uses_vars", "uses_var", "loop_bindings", "loop_iter_type", "check_parallelizable",
           "scope_children", "scope_deps", "producers", "consumers", "is_output_block",
           "can_compute_inline", "can_compute_at", "compute_locations", "location_is_legal"]
